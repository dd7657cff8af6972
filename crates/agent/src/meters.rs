//! The agent's OpenTelemetry counters: Claude Code processes started, crashed, and stopped
//! for being idle. The host exports them over OTLP when it was given a meter.

use opentelemetry::metrics::{Counter, Meter};

/// Counters every session of an agent shares.
#[derive(Debug, Clone)]
pub(crate) struct CliMeters {
    starts: Counter<u64>,
    crashes: Counter<u64>,
    evictions: Counter<u64>,
}

impl CliMeters {
    pub(crate) fn new(meter: &Meter) -> CliMeters {
        CliMeters {
            starts: meter
                .u64_counter("claude_host.cli.starts")
                .with_description(
                    "Claude Code processes started (a new session, a resume, a restart)",
                )
                .build(),
            crashes: meter
                .u64_counter("claude_host.cli.crashes")
                .with_description("Claude Code processes that exited without being asked to")
                .build(),
            evictions: meter
                .u64_counter("claude_host.cli.evictions")
                .with_description("Claude Code processes stopped for being idle")
                .build(),
        }
    }

    pub(crate) fn started(&self) {
        self.starts.add(1, &[]);
    }

    pub(crate) fn crashed(&self) {
        self.crashes.add(1, &[]);
    }

    pub(crate) fn evicted(&self) {
        self.evictions.add(1, &[]);
    }
}
