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

/// The message reading and action handling behind the server, for the fuzz targets (`fuzz/`,
/// feature `fuzzing`). Not part of the API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::host::read_dispatch;
    pub use crate::resources::is_resource_method;
    pub use crate::root::RootChannel;
    pub use crate::rpc::{RpcError, code, from_params};
    pub use crate::server::{ClientMessage, read_message};
}

pub use host::{DEFAULT_CHAT_TURNS, Host, HostConfig};
pub use root::ROOT;
pub use server::{OLDER_TURNS_ID, ServeConfig, ServerHandle, start};
