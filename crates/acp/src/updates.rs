//! A session's AHP actions as ACP `session/update`s, live and in replay.
//!
//! Live updates come from the session's actions as they are published; a `session/load`
//! replays the session's turns from its state. Both build a tool call's updates with the same
//! functions ([`started`], [`ready`], [`finished`]), so an editor that loads a session shows
//! what an editor that watched it live showed.

use crate::config;
use crate::tools;
use agent_client_protocol::v1::schema::{
    ConfigOptionUpdate, ContentBlock, ContentChunk, Cost, CurrentModeUpdate, SessionInfoUpdate,
    SessionUpdate, TextContent, ToolCall, ToolCallContent, ToolCallStatus, ToolCallUpdate,
    ToolCallUpdateFields, UsageUpdate,
};
use ahp_types::actions::StateAction;
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::{
    ChatState, ResponsePart, SessionConfigState, ToolCallState, ToolInput, ToolResultContent,
    UsageInfo,
};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The context window assumed when the model's is unknown (Claude's standard one).
pub(crate) const DEFAULT_CONTEXT_WINDOW: u64 = 200_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PartKind {
    Text,
    Thought,
}

/// Turns one session's actions into updates. It remembers what later actions refer to: each
/// response part's kind, each tool call's tool, and the session's settings.
#[derive(Debug)]
pub(crate) struct UpdateMapper {
    parts: HashMap<String, PartKind>,
    tools: HashMap<String, String>,
    config: Option<SessionConfigState>,
    /// Context window of each model, by id.
    windows: HashMap<String, u64>,
    /// The session's working directory (titles show paths relative to it).
    cwd: PathBuf,
}

fn text(s: impl Into<String>) -> ContentBlock {
    ContentBlock::Text(TextContent::new(s))
}

fn plain(s: &StringOrMarkdown) -> &str {
    match s {
        StringOrMarkdown::Plain(t) => t,
        StringOrMarkdown::Markdown { markdown } => markdown,
    }
}

pub(crate) fn input_value(input: Option<&ToolInput>) -> Value {
    match input {
        Some(ToolInput::Inline(t)) => serde_json::from_str(t).unwrap_or(Value::String(t.clone())),
        _ => Value::Null,
    }
}

/// A tool call as it starts (its input is not known yet).
pub(crate) fn started(id: &str, tool: &str, display: &str) -> SessionUpdate {
    SessionUpdate::ToolCall(
        ToolCall::new(id.to_owned(), display)
            .kind(tools::kind(tool))
            .status(ToolCallStatus::Pending),
    )
}

/// What is known once the call's input is complete: its description, input, diff and place;
/// `running` when it needs no confirmation.
pub(crate) fn ready(
    id: &str,
    tool: &str,
    invocation: &str,
    input: &Value,
    running: bool,
    cwd: &Path,
) -> ToolCallUpdate {
    let title = tools::title(tool, input, cwd).unwrap_or_else(|| invocation.to_owned());
    let mut fields = ToolCallUpdateFields::new()
        .title(title)
        .kind(tools::kind(tool))
        .raw_input(input.clone())
        .status(if running {
            ToolCallStatus::InProgress
        } else {
            ToolCallStatus::Pending
        });
    let diffs = tools::diffs(tool, input);
    if !diffs.is_empty() {
        fields = fields.content(diffs);
    }
    let locations = tools::locations(input);
    if !locations.is_empty() {
        fields = fields.locations(locations);
    }
    ToolCallUpdate::new(id.to_owned(), fields)
}

fn result_text(content: Option<&Vec<ToolResultContent>>) -> String {
    content
        .into_iter()
        .flatten()
        .filter_map(|c| match c {
            ToolResultContent::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The call's end: its status, and its output (an edit keeps its diff as content).
pub(crate) fn finished(
    id: &str,
    tool: &str,
    success: bool,
    content: Option<&Vec<ToolResultContent>>,
) -> ToolCallUpdate {
    let output = result_text(content);
    let mut fields = ToolCallUpdateFields::new()
        .status(if success {
            ToolCallStatus::Completed
        } else {
            ToolCallStatus::Failed
        })
        .raw_output(Value::String(output.clone()));
    let diff_says_it = success && tools::shows_diff(tool);
    if !diff_says_it && !output.is_empty() {
        fields = fields.content(vec![ToolCallContent::from(text(output))]);
    }
    ToolCallUpdate::new(id.to_owned(), fields)
}

impl UpdateMapper {
    /// A mapper for a session whose settings are `config` now.
    pub(crate) fn new(
        config: Option<SessionConfigState>,
        windows: HashMap<String, u64>,
        cwd: PathBuf,
    ) -> Self {
        UpdateMapper {
            parts: HashMap::new(),
            tools: HashMap::new(),
            config,
            windows,
            cwd,
        }
    }

    /// The session's working directory.
    pub(crate) fn cwd(&self) -> &Path {
        &self.cwd
    }

    /// Starts over from a session's state (after falling behind its stream).
    pub(crate) fn reset(&mut self, config: Option<SessionConfigState>) {
        self.config = config;
    }

    /// The tool of a call this mapper has seen start.
    pub(crate) fn tool_name(&self, id: &str) -> Option<&str> {
        self.tools.get(id).map(String::as_str)
    }

    fn tool_of(&self, id: &str) -> &str {
        self.tools.get(id).map_or("", String::as_str)
    }

    fn usage(&self, u: &UsageInfo) -> SessionUpdate {
        // How full the context is: what the last request used. A turn's token totals count
        // its context once per request.
        let context = u
            .meta
            .as_ref()
            .and_then(|m| m.get(claude_host_agent::mapper::CONTEXT_TOKENS))
            .and_then(Value::as_i64);
        let used = context.unwrap_or_else(|| {
            u.input_tokens.unwrap_or(0).max(0) + u.output_tokens.unwrap_or(0).max(0)
        });
        let used = u64::try_from(used).unwrap_or(0);
        let model = u
            .model
            .clone()
            .or_else(|| self.config_value(config::MODEL).map(str::to_owned));
        let size = model
            .and_then(|m| self.windows.get(&m).copied())
            .unwrap_or(DEFAULT_CONTEXT_WINDOW);
        let mut update = UsageUpdate::new(used, size);
        if let Some(cost) = u
            .meta
            .as_ref()
            .and_then(|m| m.get("costUsd"))
            .and_then(Value::as_f64)
        {
            update = update.cost(Cost::new(cost, "USD"));
        }
        SessionUpdate::UsageUpdate(update)
    }

    fn config_value(&self, key: &str) -> Option<&str> {
        self.config.as_ref()?.values.get(key)?.as_str()
    }

    /// The updates one published action makes (most make none).
    pub(crate) fn on_action(&mut self, action: &StateAction) -> Vec<SessionUpdate> {
        match action {
            StateAction::ChatResponsePart(r) => match &r.part {
                ResponsePart::Markdown(m) => {
                    self.parts.insert(m.id.clone(), PartKind::Text);
                    chunk(PartKind::Text, &m.content)
                }
                ResponsePart::Reasoning(m) => {
                    self.parts.insert(m.id.clone(), PartKind::Thought);
                    chunk(PartKind::Thought, &m.content)
                }
                _ => Vec::new(),
            },
            StateAction::ChatDelta(d) => {
                let kind = self
                    .parts
                    .get(&d.part_id)
                    .copied()
                    .unwrap_or(PartKind::Text);
                chunk(kind, &d.content)
            }
            StateAction::ChatReasoning(r) => chunk(PartKind::Thought, &r.content),
            StateAction::ChatToolCallStart(s) => {
                self.tools
                    .insert(s.tool_call_id.clone(), s.tool_name.clone());
                if s.tool_name == tools::TODO_WRITE {
                    return Vec::new();
                }
                vec![started(&s.tool_call_id, &s.tool_name, &s.display_name)]
            }
            StateAction::ChatToolCallReady(r) => {
                let tool = self.tool_of(&r.tool_call_id).to_owned();
                let input = input_value(r.tool_input.as_ref());
                if tool == tools::TODO_WRITE {
                    return tools::plan(&input)
                        .map(SessionUpdate::Plan)
                        .into_iter()
                        .collect();
                }
                vec![SessionUpdate::ToolCallUpdate(ready(
                    &r.tool_call_id,
                    &tool,
                    plain(&r.invocation_message),
                    &input,
                    r.confirmed.is_some(),
                    &self.cwd,
                ))]
            }
            StateAction::ChatToolCallConfirmed(c) => {
                if self.tool_of(&c.tool_call_id) == tools::TODO_WRITE {
                    return Vec::new();
                }
                let status = if c.approved {
                    ToolCallStatus::InProgress
                } else {
                    ToolCallStatus::Failed
                };
                vec![SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    c.tool_call_id.clone(),
                    ToolCallUpdateFields::new().status(status),
                ))]
            }
            StateAction::ChatToolCallComplete(c) => {
                let tool = self.tool_of(&c.tool_call_id).to_owned();
                if tool == tools::TODO_WRITE {
                    return Vec::new();
                }
                vec![SessionUpdate::ToolCallUpdate(finished(
                    &c.tool_call_id,
                    &tool,
                    c.result.success,
                    c.result.content.as_ref(),
                ))]
            }
            StateAction::ChatUsage(u) => vec![self.usage(&u.usage)],
            StateAction::SessionConfigChanged(c) => {
                let Some(cfg) = self.config.as_mut() else {
                    return Vec::new();
                };
                for (k, v) in &c.config {
                    cfg.values.insert(k.clone(), v.clone());
                }
                let mut out = Vec::new();
                if let Some(mode) = c
                    .config
                    .get(config::PERMISSION_MODE)
                    .and_then(Value::as_str)
                {
                    out.push(SessionUpdate::CurrentModeUpdate(CurrentModeUpdate::new(
                        mode.to_owned(),
                    )));
                }
                out.push(SessionUpdate::ConfigOptionUpdate(ConfigOptionUpdate::new(
                    config::options(cfg),
                )));
                out
            }
            StateAction::SessionTitleChanged(t) => vec![SessionUpdate::SessionInfoUpdate(
                SessionInfoUpdate::new().title(t.title.clone()),
            )],
            _ => Vec::new(),
        }
    }

    /// The updates that show a session's conversation so far, turn by turn; each subagent's
    /// tool calls (from `subagents`, the subagents' chats) right after the call that started
    /// it, as they came live.
    pub(crate) fn replay(
        &mut self,
        chat: &ChatState,
        subagents: &[ChatState],
    ) -> Vec<SessionUpdate> {
        let mut out = Vec::new();
        let finished_turns = chat
            .turns
            .iter()
            .map(|t| (&t.message.text, &t.response_parts, t.usage.as_ref()));
        let active = chat
            .active_turn
            .iter()
            .map(|t| (&t.message.text, &t.response_parts, None));
        for (message, parts, usage) in finished_turns.chain(active) {
            if !message.is_empty() {
                out.push(SessionUpdate::UserMessageChunk(ContentChunk::new(text(
                    message.clone(),
                ))));
            }
            for part in parts {
                out.extend(self.replay_part(part));
                let ResponsePart::ToolCall(c) = part else {
                    continue;
                };
                let id = match &c.tool_call {
                    ToolCallState::Completed(s) => &s.tool_call_id,
                    ToolCallState::Cancelled(s) => &s.tool_call_id,
                    ToolCallState::Running(s) => &s.tool_call_id,
                    _ => continue,
                };
                for child in subagents
                    .iter()
                    .filter(|c| subagent_parent(&c.resource) == id.as_str())
                {
                    let mut m = UpdateMapper::new(None, HashMap::new(), self.cwd.clone());
                    out.extend(
                        m.replay(child, subagents)
                            .into_iter()
                            .filter_map(|u| of_subagent(u, id)),
                    );
                }
            }
            if let Some(u) = usage {
                out.push(self.usage(u));
            }
        }
        out
    }

    fn replay_part(&mut self, part: &ResponsePart) -> Vec<SessionUpdate> {
        match part {
            ResponsePart::Markdown(m) => chunk(PartKind::Text, &m.content),
            ResponsePart::Reasoning(m) => chunk(PartKind::Thought, &m.content),
            ResponsePart::ToolCall(c) => {
                let (id, tool, display, invocation, input, end) = match &c.tool_call {
                    ToolCallState::Completed(s) => (
                        &s.tool_call_id,
                        &s.tool_name,
                        &s.display_name,
                        &s.invocation_message,
                        s.tool_input.as_ref(),
                        Some((s.success, s.content.as_ref())),
                    ),
                    ToolCallState::Cancelled(s) => (
                        &s.tool_call_id,
                        &s.tool_name,
                        &s.display_name,
                        &s.invocation_message,
                        s.tool_input.as_ref(),
                        Some((false, None)),
                    ),
                    ToolCallState::Running(s) => (
                        &s.tool_call_id,
                        &s.tool_name,
                        &s.display_name,
                        &s.invocation_message,
                        s.tool_input.as_ref(),
                        None,
                    ),
                    _ => return Vec::new(),
                };
                self.tools.insert(id.clone(), tool.clone());
                let input = input_value(input);
                if tool == tools::TODO_WRITE {
                    return tools::plan(&input)
                        .map(SessionUpdate::Plan)
                        .into_iter()
                        .collect();
                }
                let mut out = vec![
                    started(id, tool, display),
                    SessionUpdate::ToolCallUpdate(ready(
                        id,
                        tool,
                        plain(invocation),
                        &input,
                        true,
                        &self.cwd,
                    )),
                ];
                if let Some((success, content)) = end {
                    out.push(SessionUpdate::ToolCallUpdate(finished(
                        id, tool, success, content,
                    )));
                }
                out
            }
            _ => Vec::new(),
        }
    }
}

fn chunk(kind: PartKind, content: &str) -> Vec<SessionUpdate> {
    if content.is_empty() {
        return Vec::new();
    }
    let c = ContentChunk::new(text(content.to_owned()));
    vec![match kind {
        PartKind::Text => SessionUpdate::AgentMessageChunk(c),
        PartKind::Thought => SessionUpdate::AgentThoughtChunk(c),
    }]
}

/// A subagent's update as the editor gets it: only its tool calls, each marked with the
/// subagent's own tool call (`_meta.claudeCode.parentToolUseId`, as Claude's other ACP
/// adapter marks them); its text stays in its own chat.
pub(crate) fn of_subagent(update: SessionUpdate, parent: &str) -> Option<SessionUpdate> {
    let mut meta = serde_json::Map::new();
    meta.insert(
        "claudeCode".into(),
        serde_json::json!({"parentToolUseId": parent}),
    );
    match update {
        SessionUpdate::ToolCall(mut c) => {
            c.meta = Some(meta);
            Some(SessionUpdate::ToolCall(c))
        }
        SessionUpdate::ToolCallUpdate(mut u) => {
            u.meta = Some(meta);
            Some(SessionUpdate::ToolCallUpdate(u))
        }
        _ => None,
    }
}

/// The subagent tool call a subagent chat belongs to: the last segment of its URI.
pub(crate) fn subagent_parent(chat_uri: &str) -> &str {
    chat_uri.rsplit('/').next().unwrap_or(chat_uri)
}

/// The result of a tool call as the AHP state holds it, for tests that build one.
#[cfg(test)]
pub(crate) fn result(success: bool, text: &str) -> ahp_types::state::ToolCallResult {
    ahp_types::state::ToolCallResult {
        success,
        past_tense_message: StringOrMarkdown::Plain(String::new()),
        content: Some(vec![ToolResultContent::Text(
            ahp_types::state::ToolResultTextContent { text: text.into() },
        )]),
        structured_content: None,
        error: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn actions(v: Value) -> Vec<StateAction> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_turn_streams_text_thoughts_and_a_tool_call() {
        let mut m = UpdateMapper::new(None, HashMap::new(), PathBuf::from("/w"));
        let list = actions(json!([
            {"type": "chat/responsePart", "turnId": "t", "part": {"kind": "reasoning", "id": "p0", "content": ""}},
            {"type": "chat/reasoning", "turnId": "t", "partId": "p0", "content": "hm"},
            {"type": "chat/responsePart", "turnId": "t", "part": {"kind": "markdown", "id": "p1", "content": ""}},
            {"type": "chat/delta", "turnId": "t", "partId": "p1", "content": "Hi"},
            {"type": "chat/toolCallStart", "turnId": "t", "toolCallId": "tu", "toolName": "Edit", "displayName": "Edit"},
            {"type": "chat/toolCallReady", "turnId": "t", "toolCallId": "tu", "invocationMessage": "Edit a.rs",
             "toolInput": "{\"file_path\":\"/w/a.rs\",\"old_string\":\"a\",\"new_string\":\"b\"}"},
            {"type": "chat/toolCallConfirmed", "turnId": "t", "toolCallId": "tu", "approved": true, "confirmed": "user-action"},
            {"type": "chat/toolCallComplete", "turnId": "t", "toolCallId": "tu",
             "result": {"success": true, "pastTenseMessage": "Edited", "content": [{"type": "text", "text": "ok"}]}},
        ]));
        let out: Vec<Value> = list
            .iter()
            .flat_map(|a| m.on_action(a))
            .map(|u| serde_json::to_value(u).unwrap())
            .collect();
        let kinds: Vec<&str> = out
            .iter()
            .map(|u| u["sessionUpdate"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "agent_thought_chunk",
                "agent_message_chunk",
                "tool_call",
                "tool_call_update",
                "tool_call_update",
                "tool_call_update"
            ]
        );
        assert_eq!(out[2]["kind"], "edit");
        assert_eq!(out[3]["status"], "pending", "waits for a confirmation");
        assert_eq!(out[3]["content"][0]["oldText"], "a");
        assert_eq!(out[4]["status"], "in_progress");
        assert_eq!(out[5]["status"], "completed");
        assert!(
            out[5].get("content").is_none(),
            "the diff stays: {}",
            out[5]
        );
    }

    #[test]
    fn todo_lists_are_plans_not_tool_calls() {
        let mut m = UpdateMapper::new(None, HashMap::new(), PathBuf::from("/w"));
        let list = actions(json!([
            {"type": "chat/toolCallStart", "turnId": "t", "toolCallId": "td", "toolName": "TodoWrite", "displayName": "Todo"},
            {"type": "chat/toolCallReady", "turnId": "t", "toolCallId": "td", "invocationMessage": "x", "confirmed": "not-needed",
             "toolInput": "{\"todos\":[{\"content\":\"a\",\"status\":\"pending\"}]}"},
            {"type": "chat/toolCallComplete", "turnId": "t", "toolCallId": "td",
             "result": {"success": true, "pastTenseMessage": "x"}},
        ]));
        let out: Vec<SessionUpdate> = list.iter().flat_map(|a| m.on_action(a)).collect();
        assert_eq!(out.len(), 1);
        assert!(matches!(out[0], SessionUpdate::Plan(_)));
    }

    #[test]
    fn failed_calls_show_their_error_and_usage_has_cost() {
        let f = serde_json::to_value(finished(
            "x",
            "Write",
            false,
            result(false, "denied").content.as_ref(),
        ))
        .unwrap();
        assert_eq!(f["status"], "failed");
        assert_eq!(f["content"][0]["content"]["text"], "denied");
        let m = UpdateMapper::new(
            None,
            HashMap::from([("m1".to_owned(), 1000)]),
            PathBuf::from("/w"),
        );
        let mut meta = serde_json::Map::new();
        meta.insert("costUsd".into(), json!(0.5));
        let u = serde_json::to_value(m.usage(&UsageInfo {
            input_tokens: Some(10),
            output_tokens: Some(5),
            model: Some("m1".into()),
            cache_read_tokens: None,
            meta: Some(meta),
        }))
        .unwrap();
        assert_eq!(u["used"], 15);
        assert_eq!(u["size"], 1000);
        assert_eq!(u["cost"]["amount"], 0.5);
    }
}
