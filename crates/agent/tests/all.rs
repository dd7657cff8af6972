//! The agent core against the real Claude Code CLI, the proxy and the fake upstream; every
//! case is asserted on the reduced AHP state and on the action order.

// Test helpers outside #[test] functions panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
