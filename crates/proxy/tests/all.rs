//! Integration tests of the proxy: real sockets, the real Copilot upstream client, and the
//! testkit's fake GitHub + Copilot server.

mod suite;
