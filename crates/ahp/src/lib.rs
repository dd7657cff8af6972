//! `claude-host serve`: the Agent Host Protocol over WebSocket, so VS Code (as a remote agent
//! host) and any other AHP client can run Claude sessions on this host.
//!
//! [`Host`] maps channel URIs onto the agent's sessions (whose tasks own the session and chat
//! state) and its own root channel, and carries out commands and dispatched actions; [`start`]
//! serves it over WebSocket, one JSON-RPC 2.0 message per text frame.

mod host;
mod resources;
mod root;
mod rpc;
mod server;

pub use host::{Host, HostConfig};
pub use root::ROOT;
pub use server::{ServeConfig, ServerHandle, start};
