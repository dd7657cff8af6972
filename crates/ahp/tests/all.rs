//! `claude-host serve` driven by the official `ahp` client over `ahp-ws`, against the real
//! Claude Code CLI, the proxy and the fake upstream.

// Test helpers outside #[test] functions panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
