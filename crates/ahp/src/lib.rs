//! `claude-host serve`: the Agent Host Protocol over WebSocket, so VS Code (as a remote agent
//! host) and any other AHP client can run Claude sessions on this host.
//!
//! [`host::Host`] holds the protocol state (root, session and chat channels, each reduced
//! with the official `ahp` reducers and numbered with one `serverSeq`); [`server`] carries it
//! over WebSocket, one JSON-RPC 2.0 message per text frame.

pub mod channel;
pub mod host;
pub mod resources;
pub mod rpc;
pub mod server;

pub use host::{Host, HostConfig};
pub use server::{ServeConfig, ServerHandle, start};
