//! In-process ("SDK") MCP servers: rmcp servers that live in the host and talk to the CLI
//! through `mcp_message` control requests instead of a process or a socket.

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use rmcp::RoleServer;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;

/// An rmcp server to expose to the CLI under `name` (its tools reach the model as
/// `mcp__<name>__<tool>`).
pub struct SdkMcpServer {
    pub(crate) name: String,
    pub(crate) to_server: UnboundedSender<RxJsonRpcMessage<RoleServer>>,
    pub(crate) from_server: UnboundedReceiver<TxJsonRpcMessage<RoleServer>>,
}

impl std::fmt::Debug for SdkMcpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SdkMcpServer")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl SdkMcpServer {
    /// Starts serving `service` over in-memory channels. The MCP handshake itself is run by the
    /// CLI once the session initializes.
    pub fn new<S>(name: impl Into<String>, service: S) -> SdkMcpServer
    where
        S: rmcp::Service<RoleServer> + Send + 'static,
    {
        let name = name.into();
        let (to_server, server_rx) = unbounded::<RxJsonRpcMessage<RoleServer>>();
        let (server_tx, from_server) = unbounded::<TxJsonRpcMessage<RoleServer>>();
        let label = name.clone();
        tokio::spawn(async move {
            match rmcp::ServiceExt::serve(service, (server_tx, server_rx)).await {
                Ok(running) => {
                    let _ = running.waiting().await;
                }
                Err(e) => {
                    tracing::warn!(server = %label, error = %e, "in-process MCP server failed to start")
                }
            }
        });
        SdkMcpServer {
            name,
            to_server,
            from_server,
        }
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The host side of one server: where CLI messages go, and which CLI control requests are
/// waiting for which JSON-RPC response.
pub(crate) struct Bridge {
    pub to_server: UnboundedSender<RxJsonRpcMessage<RoleServer>>,
    /// JSON-RPC id (as JSON text) → control request id.
    pub parked: Mutex<HashMap<String, String>>,
}

/// What to do with one `mcp_message` from the CLI.
pub(crate) enum Routed {
    /// A request: the answer comes later, when the server responds.
    Parked,
    /// A notification or response: acknowledge now.
    AckNow,
}

impl Bridge {
    pub(crate) fn route(&self, control_id: &str, message: Value) -> Result<Routed, String> {
        let is_request = message.get("method").is_some() && message.get("id").is_some();
        let key = message.get("id").map(Value::to_string);
        let parsed: RxJsonRpcMessage<RoleServer> =
            serde_json::from_value(message).map_err(|e| format!("invalid MCP message: {e}"))?;
        if is_request && let Some(k) = key {
            lock(&self.parked).insert(k, control_id.to_owned());
        }
        self.to_server
            .unbounded_send(parsed)
            .map_err(|_| "the in-process MCP server has stopped".to_owned())?;
        Ok(if is_request {
            Routed::Parked
        } else {
            Routed::AckNow
        })
    }

    /// The control request waiting for this server message, if it is a response to one.
    pub(crate) fn take_parked(&self, message: &Value) -> Option<String> {
        if message.get("method").is_some() {
            return None;
        }
        let key = message.get("id")?.to_string();
        lock(&self.parked).remove(&key)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
