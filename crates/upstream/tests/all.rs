//! Integration tests of the upstream crate against the fake GitHub + Copilot server.

mod suite;
