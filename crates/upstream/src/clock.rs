//! Wall-clock time as a trait, so token expiry can be tested without waiting.

use std::sync::atomic::{AtomicI64, Ordering};

/// A source of Unix time in seconds.
pub trait Clock: Send + Sync + 'static {
    /// Seconds since the Unix epoch.
    fn now_unix(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_unix(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64)
    }
}

/// A clock that starts at the system time and moves only when told (for tests).
#[derive(Debug)]
pub struct ManualClock {
    offset: AtomicI64,
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ManualClock {
    /// A clock reading the current system time.
    pub fn new() -> Self {
        ManualClock {
            offset: AtomicI64::new(0),
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, secs: i64) {
        self.offset.fetch_add(secs, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_unix(&self) -> i64 {
        SystemClock.now_unix() + self.offset.load(Ordering::SeqCst)
    }
}
