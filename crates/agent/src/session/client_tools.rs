//! The session's in-process MCP server `client`: the tools of the session's active clients,
//! offered to Claude Code (as `mcp__client__<name>`). A call does not run here: it is handed
//! to the session task, which parks it until the owning client sends the result.

use super::task::Internal;
use ahp_types::state::ToolDefinition;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, InitializeResult,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// The server's name: Claude Code calls its tools `mcp__client__<tool>`.
pub(crate) const SERVER: &str = "client";
/// The prefix of its tools' names as Claude Code calls them.
pub(crate) const PREFIX: &str = "mcp__client__";

/// One CLI's view of the clients' tools (a CLI's in-process servers are fixed when it
/// starts: a new tool set means a new CLI).
pub(super) struct ClientToolServer {
    pub(super) tools: Vec<ToolDefinition>,
    pub(super) tx: mpsc::UnboundedSender<Internal>,
    /// Which CLI of the session this is (a call from an old one is refused).
    pub(super) generation: u64,
}

fn error_result(text: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

fn mcp_tool(t: &ToolDefinition) -> Tool {
    let schema = match &t.input_schema {
        Some(Value::Object(m)) => m.clone(),
        // A client tool without a schema takes any object.
        _ => {
            let mut m = Map::new();
            m.insert("type".into(), Value::String("object".into()));
            m
        }
    };
    let mut tool = Tool::new_with_raw(
        t.name.clone(),
        t.description.clone().map(Into::into),
        Arc::new(schema),
    );
    tool.title = t.title.clone();
    tool
}

/// The id of the model's tool call a `tools/call` carries (`_meta["claudecode/toolUseId"]`).
fn tool_use_id(request: &CallToolRequestParams, context: &RequestContext<RoleServer>) -> String {
    const KEY: &str = "claudecode/toolUseId";
    request
        .meta
        .as_ref()
        .and_then(|m| m.0.get(KEY))
        .or_else(|| context.meta.0.get(KEY))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

impl ServerHandler for ClientToolServer {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            self.tools.iter().map(mcp_tool).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let id = tool_use_id(&request, &context);
        if id.is_empty() {
            return Ok(error_result("invalidInput: the call names no tool use").into());
        }
        let (reply, answer) = oneshot::channel();
        let sent = self.tx.send(Internal::ClientTool {
            generation: self.generation,
            tool_use_id: id,
            name: request.name.to_string(),
            reply,
        });
        if sent.is_err() {
            return Ok(error_result("clientUnavailable: the session has ended").into());
        }
        tokio::select! {
            biased;
            r = answer => Ok(r
                .unwrap_or_else(|_| error_result("clientUnavailable: the session has ended"))
                .into()),
            () = context.ct.cancelled() => Ok(error_result("cancelled").into()),
        }
    }
}
