//! Integration tests of the proxy: real sockets, the real Copilot upstream client, and the
//! testkit's fake GitHub + Copilot server.

// Test helpers outside #[test] functions panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
