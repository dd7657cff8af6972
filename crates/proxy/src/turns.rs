//! Turns of a connection's task, so that a long relay can give way to other work.
//!
//! A relay's upstream is usually ahead of it: a real upstream (and the benchmark's fake)
//! writes a stream into the socket faster than the relay forwards it, so every read finds more.
//! hyper's server polls a response body for as long as it returns data, and tokio's budget
//! only stops a task after 128 socket operations, which is a whole 2,000-event stream. With
//! 64 streams relayed on the proxy's one thread, each task's turn was milliseconds, and a new
//! request waited for dozens of such turns before its first byte (+142 ms at the median,
//! docs/BENCHMARKS.md, *First bytes under load*). A relay now forwards a bounded amount per
//! turn ([`crate::relay`]) and then gives way until its task's next turn.
//!
//! "Its task's next turn" is what hyper cannot say: after a body answers `Pending`, hyper may
//! poll it again within the same turn. So the accept loop runs each connection's task
//! [`within`] a turn of its own, numbered, and the relay compares the number it gave way in
//! with [`current`].

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// The next turn's number; never 0, which means "not inside a numbered turn".
static NEXT: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static CURRENT: Cell<u64> = const { Cell::new(0) };
}

/// Runs `poll` (one poll of a connection's task) as a turn of its own.
pub(crate) fn within<R>(poll: impl FnOnce() -> R) -> R {
    let turn = NEXT.fetch_add(1, Ordering::Relaxed);
    let outer = CURRENT.replace(turn);
    let out = poll();
    CURRENT.set(outer);
    out
}

/// The turn running now on this thread; 0 outside [`within`] (then nothing gives way).
pub(crate) fn current() -> u64 {
    CURRENT.get()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_are_numbered_and_nest() {
        assert_eq!(current(), 0);
        let (a, b, inner) = (
            within(current),
            within(current),
            within(|| {
                let outer = current();
                let inner = within(current);
                assert_eq!(current(), outer);
                inner
            }),
        );
        assert!(a != 0 && b != 0 && inner != 0);
        assert_ne!(a, b);
        assert_eq!(current(), 0);
    }
}
