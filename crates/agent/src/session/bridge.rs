//! The CLI's callbacks, handed to the session task as messages: the task decides, the
//! callback waits for its answer.

use super::task::Internal;
use async_trait::async_trait;
use claude_host_protocol::frames::CanUseTool;
use claude_host_sdk::{Callbacks, CancellationToken, PermissionResult};
use serde::Deserialize;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};

/// Routes one CLI's permission requests to the session task.
pub(super) struct Bridge {
    pub(super) tx: mpsc::UnboundedSender<Internal>,
    /// Which CLI of the session this is (a request from an old one is refused).
    pub(super) generation: u64,
}

fn deny(message: &str) -> PermissionResult {
    PermissionResult::Deny {
        message: message.into(),
        interrupt: false,
    }
}

#[async_trait]
impl Callbacks for Bridge {
    async fn can_use_tool(
        &self,
        request: Map<String, Value>,
        cancel: CancellationToken,
    ) -> PermissionResult {
        let request = match CanUseTool::deserialize(&request) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "a permission request the host cannot read");
                return deny("The host could not read this permission request");
            }
        };
        let tool_use_id = request.tool_use_id.clone();
        let (reply, answer) = oneshot::channel();
        if self
            .tx
            .send(Internal::Permission {
                generation: self.generation,
                request: Box::new(request),
                reply,
            })
            .is_err()
        {
            return deny("Session is no longer active");
        }
        tokio::select! {
            biased;
            r = answer => r.unwrap_or_else(|_| deny("Session is no longer active")),
            () = cancel.cancelled() => {
                // The CLI withdrew it (after an interrupt): the task takes it off the state.
                let _ = self.tx.send(Internal::Withdrawn {
                    generation: self.generation,
                    tool_use_id,
                });
                deny("withdrawn")
            }
        }
    }
}
