//! End-to-end tests of the `claude-host` binary with the real, pinned Claude Code CLI and the
//! fake GitHub + Copilot upstream.

mod suite;
