//! End-to-end tests of the `claude-host` binary with the real, pinned Claude Code CLI and the
//! fake GitHub + Copilot upstream.

// Test helpers outside #[test] functions panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Without an optional part (`--features full` tests them all), the helpers of its tests
// (the relay, the collector, the AHP client's session helpers) have no caller.
#![cfg_attr(not(all(feature = "postgres", feature = "otlp")), allow(dead_code))]

mod suite;
