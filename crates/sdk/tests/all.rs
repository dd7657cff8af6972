//! The SDK layer against the real Claude Code CLI (through the proxy and the fake upstream),
//! and against scripted fake CLIs for the failure cases.

// Test helpers outside #[test] functions panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
