//! Client tools: the tools of the session's active clients, offered to Claude Code through
//! the in-process MCP server `client`. A call is parked here, shown as a `toolClientExecution`
//! input request for the client that owns the tool, and answered with what that client sends
//! in `chat/toolCallComplete`, or with an error when the turn ends, the session closes, or the
//! client leaves and does not come back in time. Claude never waits forever.

use super::*;
use crate::session::client_tools::{ClientToolServer, PREFIX, SERVER};
use ahp_types::actions::ChatToolCallCompleteAction;
use ahp_types::state::{
    SessionToolClientExecutionRequest, ToolCallClientContributor, ToolCallContributor,
    ToolDefinition, ToolResultContent,
};
use rmcp::model::{CallToolResult, ContentBlock};
use std::collections::HashSet;

/// A call of a client tool waiting for its client.
pub(super) struct ClientCall {
    /// The chat whose tool call it is (the default chat, or a subagent's).
    chat: ChannelKind,
    client_id: String,
    turn_id: String,
    reply: oneshot::Sender<CallToolResult>,
    /// Set while its client is gone: answered with an error if it is not back by then.
    deadline: Option<Instant>,
}

/// Why a parked call ends without its client's result (VS Code's error codes).
#[derive(Debug, Clone, Copy)]
pub(super) enum Unanswered {
    Cancelled,
    ClientGone,
}

impl Unanswered {
    fn text(self) -> &'static str {
        match self {
            Unanswered::Cancelled => "cancelled: the turn ended before the client answered",
            Unanswered::ClientGone => {
                "clientUnavailable: the client that runs this tool left and did not come back"
            }
        }
    }
}

fn error_result(text: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// What Claude gets for a client's result; `Err` for a result it cannot carry.
fn to_mcp(result: &ahp_types::state::ToolCallResult) -> Result<CallToolResult, String> {
    let mut blocks = Vec::new();
    for c in result.content.iter().flatten() {
        match c {
            ToolResultContent::Text(t) => blocks.push(ContentBlock::text(t.text.clone())),
            ToolResultContent::EmbeddedResource(r) => {
                use base64::Engine as _;
                if base64::engine::general_purpose::STANDARD
                    .decode(&r.data)
                    .is_err()
                {
                    return Err("an embeddedResource's data is not base64".into());
                }
                if r.content_type.starts_with("image/") {
                    blocks.push(ContentBlock::image(r.data.clone(), r.content_type.clone()));
                } else {
                    blocks.push(ContentBlock::text(format!(
                        "[{} content, {} bytes of base64]",
                        r.content_type,
                        r.data.len()
                    )));
                }
            }
            other => {
                let kind = serde_json::to_value(other)
                    .ok()
                    .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_owned))
                    .unwrap_or_else(|| "unknown".into());
                return Err(format!(
                    "a client tool's result may hold text and embeddedResource content, not {kind}"
                ));
            }
        }
    }
    if result.success {
        return Ok(CallToolResult::success(blocks));
    }
    let error = result.error.as_ref();
    let message = error
        .and_then(|e| e.get("message").and_then(Value::as_str))
        .unwrap_or("the tool failed");
    let code = error.and_then(|e| e.get("code").and_then(Value::as_str));
    let line = match code {
        Some(code) => format!("{code}: {message}"),
        None => message.to_owned(),
    };
    blocks.insert(0, ContentBlock::text(line));
    Ok(CallToolResult::error(blocks))
}

impl Task {
    /// The clients' tools, each name once (the client that offered it first keeps it).
    pub(super) fn client_tool_set(&self) -> Vec<ToolDefinition> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for c in &self.session.active_clients {
            for t in &c.tools {
                if seen.insert(t.name.clone()) {
                    out.push(t.clone());
                } else {
                    tracing::debug!(session = %self.id, tool = %t.name, client = %c.client_id, "a client tool another client already offers; skipped");
                }
            }
        }
        out
    }

    /// The client whose tool `name` is (Claude Code's name, `mcp__client__<tool>`, or bare).
    pub(super) fn tool_owner(&self, name: &str) -> Option<String> {
        let bare = name.strip_prefix(PREFIX).unwrap_or(name);
        self.session
            .active_clients
            .iter()
            .find(|c| c.tools.iter().any(|t| t.name == bare))
            .map(|c| c.client_id.clone())
    }

    /// Whether the clients' tools differ from what the live CLI offers (its MCP server is
    /// fixed when it starts, so the next turn starts a new CLI).
    pub(super) fn client_tools_changed(&self) -> bool {
        !matches!(self.cli, Cli::None) && self.client_tool_set() != self.cli_tools
    }

    /// The in-process servers a new CLI gets (none when no client offers tools).
    pub(super) fn client_tool_servers(
        &mut self,
        generation: u64,
    ) -> Vec<claude_host_sdk::SdkMcpServer> {
        self.cli_tools = self.client_tool_set();
        if self.cli_tools.is_empty() {
            return Vec::new();
        }
        vec![claude_host_sdk::SdkMcpServer::new(
            SERVER,
            ClientToolServer {
                tools: self.cli_tools.clone(),
                tx: self.internal_tx.clone(),
                generation,
            },
        )]
    }

    /// The contributor of a tool call, when it is a client's tool.
    pub(super) fn contributor(&self, tool: &str) -> Option<ToolCallContributor> {
        if !tool.starts_with(PREFIX) {
            return None;
        }
        self.tool_owner(tool)
            .map(|client_id| ToolCallContributor::Client(ToolCallClientContributor { client_id }))
    }

    /// Claude Code calls a client's tool: parked, and shown to the client that owns it.
    pub(super) async fn on_client_tool(
        &mut self,
        generation: u64,
        id: String,
        name: String,
        reply: oneshot::Sender<CallToolResult>,
    ) {
        let live = match &self.cli {
            Cli::Live(c) if generation == self.generation => c.clone(),
            _ => {
                let _ = reply.send(error_result("clientUnavailable: the session restarted"));
                return;
            }
        };
        // The frames before the call are in the state first (its tool call is running there).
        while let Some(item) = live.try_recv_frame() {
            self.on_frame(Some(item)).await;
        }
        let Some(client_id) = self.tool_owner(&name) else {
            tracing::info!(session = %self.id, tool = %name, "a call of a client tool no client offers");
            let _ = reply.send(error_result(&format!(
                "toolUnavailable: no client offers {name}"
            )));
            return;
        };
        // The CLI did not ask about it: it runs, and its one ready says so now.
        let held = match self.turn.as_mut().and_then(|t| t.mapper.release(&id)) {
            Some(ready) => Some((ChannelKind::Chat, ready)),
            None => self.release_in_subagent(&id),
        };
        if let Some((kind, ready)) = held {
            self.publish_mapped(&kind, vec![ready]);
        }
        let Some((kind, turn_id, call)) = self.running_call(&id) else {
            tracing::info!(session = %self.id, call = %id, "a client tool call outside a running tool call of the turn");
            let _ = reply.send(error_result(
                "invocationFailed: the call is not part of the running turn",
            ));
            return;
        };
        let chat = match &kind {
            ChannelKind::Subagent(c) => subagent_chat_uri(&self.uris.session, c),
            _ => self.uris.chat.clone(),
        };
        self.session(StateAction::SessionInputNeededSet(Box::new(
            ahp_types::actions::SessionInputNeededSetAction {
                request: ahp_types::state::SessionInputRequest::ToolClientExecution(
                    SessionToolClientExecutionRequest {
                        id: id.clone(),
                        chat,
                        turn_id: turn_id.clone(),
                        client_id: client_id.clone(),
                        tool_call: call,
                    },
                ),
            },
        )));
        tracing::debug!(session = %self.id, call = %id, client = %client_id, "a client tool call waits for its client");
        let gone = !self
            .session
            .active_clients
            .iter()
            .any(|c| c.client_id == client_id);
        self.client_calls.insert(
            id,
            ClientCall {
                chat: kind,
                client_id,
                turn_id,
                reply,
                deadline: gone.then(|| Instant::now() + self.client_grace),
            },
        );
    }

    /// The running tool call `id`: its chat (the default chat's turn, or a subagent's),
    /// turn and state.
    fn running_call(
        &self,
        id: &str,
    ) -> Option<(ChannelKind, String, ahp_types::state::ToolCallRunningState)> {
        let in_turn = |chat: &ChatState| {
            let turn = chat.active_turn.as_ref()?;
            turn.response_parts.iter().find_map(|p| match p {
                ResponsePart::ToolCall(tc) => match &tc.tool_call {
                    ToolCallState::Running(s) if s.tool_call_id == id => {
                        Some((turn.id.clone(), s.clone()))
                    }
                    _ => None,
                },
                _ => None,
            })
        };
        if let Some((turn, call)) = in_turn(&self.chat) {
            return Some((ChannelKind::Chat, turn, call));
        }
        self.subagents.iter().find_map(|c| {
            in_turn(&c.chat).map(|(turn, call)| (ChannelKind::Subagent(c.call.clone()), turn, call))
        })
    }

    /// A client's `chat/toolCallComplete`: the result of a parked call it owns.
    pub(super) fn client_complete(
        &mut self,
        kind: &ChannelKind,
        a: ChatToolCallCompleteAction,
        origin: &ActionOrigin,
    ) -> Result<(), String> {
        let Some(call) = self.client_calls.get(&a.tool_call_id) else {
            return Err(format!(
                "no client tool call {} is waiting for a result",
                a.tool_call_id
            ));
        };
        if call.chat != *kind {
            return Err(format!(
                "tool call {} waits in another chat of this session; answer it there",
                a.tool_call_id
            ));
        }
        if call.client_id != origin.client_id {
            return Err(format!(
                "tool call {} is run by another client",
                a.tool_call_id
            ));
        }
        if call.turn_id != a.turn_id {
            return Err(format!(
                "tool call {} belongs to turn {}, not {}",
                a.tool_call_id, call.turn_id, a.turn_id
            ));
        }
        let result = to_mcp(&a.result)?;
        let Some(call) = self.client_calls.remove(&a.tool_call_id) else {
            return Err(format!("no client tool call {} is waiting", a.tool_call_id));
        };
        if call.reply.send(result).is_err() {
            tracing::debug!(session = %self.id, call = %a.tool_call_id, "the CLI no longer waits for this client tool call");
        }
        let id = a.tool_call_id.clone();
        self.client_completed.insert(id.clone());
        self.publish(
            call.chat,
            StateAction::ChatToolCallComplete(a),
            Some(origin.clone()),
        );
        self.session(actions::input_needed_removed(&id));
        Ok(())
    }

    /// Answers parked calls with an error (the turn ended, the session closes); `main_only`:
    /// those of the default chat's turn (a background subagent's outlive it).
    pub(super) fn refuse_client_calls(&mut self, why: Unanswered, main_only: bool) {
        let ids: Vec<String> = self
            .client_calls
            .iter()
            .filter(|(_, c)| !main_only || c.chat == ChannelKind::Chat)
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            self.refuse_client_call(&id, why);
        }
        // The CLI's late reports of calls its client completed are not shown any more.
        if self.client_calls.is_empty() {
            self.client_completed.clear();
        }
    }

    fn refuse_client_call(&mut self, id: &str, why: Unanswered) {
        let Some(call) = self.client_calls.remove(id) else {
            return;
        };
        tracing::info!(session = %self.id, call = %id, client = %call.client_id, reason = why.text(), "a client tool call ends without its client's result");
        let _ = call.reply.send(error_result(why.text()));
        self.session(actions::input_needed_removed(id));
    }

    /// A client left: its parked calls wait a while for it to come back.
    pub(super) fn client_left(&mut self, client_id: &str) {
        let deadline = Instant::now() + self.client_grace;
        for c in self.client_calls.values_mut() {
            if c.client_id == client_id && c.deadline.is_none() {
                c.deadline = Some(deadline);
            }
        }
    }

    /// A client is (back) in the session: its parked calls wait for it again.
    pub(super) fn client_back(&mut self, client_id: &str) {
        for c in self.client_calls.values_mut() {
            if c.client_id == client_id {
                c.deadline = None;
            }
        }
    }

    /// The first moment a parked call's client counts as gone.
    pub(super) fn client_deadline(&self) -> Option<Instant> {
        self.client_calls.values().filter_map(|c| c.deadline).min()
    }

    /// Answers the calls whose client did not come back in time.
    pub(super) fn client_deadlines_passed(&mut self, now: Instant) {
        let due: Vec<String> = self
            .client_calls
            .iter()
            .filter(|(_, c)| c.deadline.is_some_and(|d| now >= d))
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            self.refuse_client_call(&id, Unanswered::ClientGone);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(v: serde_json::Value) -> ahp_types::state::ToolCallResult {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_clients_result_reaches_claude_as_text_images_and_coded_errors() {
        let ok = to_mcp(&result(serde_json::json!({"success": true,
            "pastTenseMessage": "Ran tests", "content": [
                {"type": "text", "text": "3 passed"},
                {"type": "embeddedResource", "data": "iVBORw0KGgo=", "contentType": "image/png"}]})))
        .unwrap();
        let v = serde_json::to_value(&ok).unwrap();
        assert_eq!(v["isError"], false, "{v}");
        assert_eq!(v["content"][0]["text"], "3 passed");
        assert_eq!(v["content"][1]["type"], "image");
        assert_eq!(v["content"][1]["mimeType"], "image/png");

        let failed = to_mcp(&result(serde_json::json!({"success": false,
            "pastTenseMessage": "Run tests failed",
            "error": {"message": "tool not found", "code": "toolUnavailable"}})))
        .unwrap();
        let v = serde_json::to_value(&failed).unwrap();
        assert_eq!(v["isError"], true);
        assert_eq!(v["content"][0]["text"], "toolUnavailable: tool not found");
    }

    #[test]
    fn results_claude_cannot_take_are_refused_with_the_reason() {
        let bad = to_mcp(&result(serde_json::json!({"success": true,
            "pastTenseMessage": "x", "content": [
                {"type": "embeddedResource", "data": "not base64!", "contentType": "image/png"}]})));
        assert!(bad.unwrap_err().contains("not base64"));
        let other = to_mcp(&result(serde_json::json!({"success": true,
            "pastTenseMessage": "x", "content": [
                {"type": "terminal", "resource": "ahp-terminal:/1", "title": "t"}]})));
        let why = other.unwrap_err();
        assert!(why.contains("not terminal"), "{why}");
    }
}
