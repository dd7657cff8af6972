//! Test support for claude-host: a scripted fake GitHub + Copilot server that speaks the real
//! wire formats ([`fake`]), and a helper that provides the pinned real Claude Code CLI
//! ([`cli`]). The model is the only fake: everything else in the tests is real.

pub mod cli;
pub mod copilot_rules;
pub mod fake;
pub mod fake_cli;
pub mod pg;
mod replies;

pub use replies::{Block, Gate, Match, Reply, Rule};
