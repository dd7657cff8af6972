//! The CLI's callbacks, handed to the session task as messages: the task decides, the
//! callback waits for its answer.

use super::task::Internal;
use crate::edits::Tracker;
use crate::edits::tracker::{AFTER, BEFORE, HookInput};
use async_trait::async_trait;
use claude_host_protocol::frames::CanUseTool;
use claude_host_sdk::{Callbacks, CancellationToken, PermissionResult};
use serde::Deserialize;
use serde_json::json;
use serde_json::{Map, Value};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Routes one CLI's permission requests to the session task.
pub(super) struct Bridge {
    pub(super) tx: mpsc::UnboundedSender<Internal>,
    /// Which CLI of the session this is (a request from an old one is refused).
    pub(super) generation: u64,
    /// Records what tool calls change (its hooks are registered when it is set).
    pub(super) edits: Option<Arc<Tracker>>,
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
        let proposed = match self.edits.clone() {
            Some(tracker) => {
                let (tool, input) = (request.tool_name.clone(), request.input.clone());
                tokio::task::spawn_blocking(move || tracker.proposed(&tool, &input))
                    .await
                    .ok()
                    .flatten()
            }
            None => None,
        };
        let (reply, answer) = oneshot::channel();
        if self
            .tx
            .send(Internal::Permission {
                generation: self.generation,
                request: Box::new(request),
                proposed,
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

    async fn hook_callback(
        &self,
        callback_id: String,
        input: Value,
        _cancel: CancellationToken,
    ) -> Value {
        let carry_on = json!({"continue": true});
        let Some(tracker) = self.edits.clone() else {
            return carry_on;
        };
        if callback_id != BEFORE && callback_id != AFTER {
            return carry_on;
        }
        let input = match HookInput::deserialize(&input) {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!(error = %e, "a tool hook the host cannot read; its edits are not tracked");
                return carry_on;
            }
        };
        // Runs before the hook is answered, so the tool waits for it: the snapshot before a
        // command must be taken before the command runs.
        let record = tokio::task::spawn_blocking(move || tracker.on_hook(&input)).await;
        match record {
            Ok(Some(record)) => {
                let _ = self.tx.send(Internal::Edited {
                    generation: self.generation,
                    record,
                });
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "the edit tracker failed"),
        }
        carry_on
    }
}
