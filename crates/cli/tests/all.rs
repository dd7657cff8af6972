//! End-to-end tests of the `claude-host` binary with the real, pinned Claude Code CLI and the
//! fake GitHub + Copilot upstream.

// Test helpers outside #[test] functions panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
