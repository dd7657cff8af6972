//! Integration tests of the upstream crate against the fake GitHub + Copilot server.

// Test helpers outside #[test] functions panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
