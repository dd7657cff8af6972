//! Claude Code frames → AHP `chat/*` actions for one turn.
//!
//! Ordering rules kept (VS Code's invariants): a response part (markdown or reasoning) is
//! announced before any delta for it; `toolCallStart` comes before the tool call's other
//! actions; `usage` comes immediately before `turnComplete`. Part ids are
//! `<turnId>#<messageId>#<blockIndex>`.

use crate::actions::{self, Ready};
use ahp_types::actions::StateAction;
use ahp_types::state::{ToolCallConfirmationReason, UsageInfo};
use claude_host_protocol::frames::{
    AssistantFrame, Block, BlockDelta, ResultFrame, StreamEvent, StreamEventFrame, TurnEnd,
    UserFrame,
};
use claude_host_protocol::stream_json::Typed;
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};
use std::time::Instant;

/// Maps the frames of one turn.
#[derive(Debug)]
pub struct TurnMapper {
    turn_id: String,
    started: Instant,
    /// Message id of the API response being streamed.
    message_id: Option<String>,
    /// Messages whose blocks arrived as stream events (their `assistant` frames add nothing).
    streamed: HashSet<String>,
    /// Block index → tool call id, for the message being streamed.
    tool_blocks: HashMap<u64, String>,
    /// Tool call id → tool name.
    tools: HashMap<String, String>,
    /// Tool calls the CLI asked the user about: their automatic "ready" must not run them.
    asked: HashSet<String>,
    /// Client tools' "ready", held back: the CLI asks about such a call (pending
    /// confirmation) or calls the client's tool right after its `assistant` frame, and only
    /// then is its state known, so a client sees one ready per call with the right state.
    deferred: HashMap<String, Ready>,
    /// The model that answered last, as the response named it (the proxy names its quota
    /// fallback there; the CLI's own usage is keyed by the model it asked for).
    answered_by: Option<String>,
    /// The context the last request used (its input, cached or not, and its output): what a
    /// client shows as how full the context window is.
    context_tokens: Option<i64>,
    /// The streamed response's usage so far (`message_start`, then each `message_delta`).
    streaming_usage: Option<claude_host_protocol::frames::ResultUsage>,
    /// The subagent call whose frames this maps (`None`: the main conversation's).
    parent: Option<String>,
    finished: bool,
}

impl TurnMapper {
    /// A mapper for the turn `turn_id`.
    pub fn new(turn_id: &str) -> TurnMapper {
        TurnMapper {
            turn_id: turn_id.to_owned(),
            started: Instant::now(),
            message_id: None,
            streamed: HashSet::new(),
            tool_blocks: HashMap::new(),
            tools: HashMap::new(),
            asked: HashSet::new(),
            deferred: HashMap::new(),
            answered_by: None,
            context_tokens: None,
            streaming_usage: None,
            parent: None,
            finished: false,
        }
    }

    /// A mapper for the one turn of the subagent that the tool call `call` started: it maps
    /// the frames that carry `call` as their `parent_tool_use_id`; the turn's id is `call`.
    pub fn for_subagent(call: &str) -> TurnMapper {
        TurnMapper {
            parent: Some(call.to_owned()),
            ..TurnMapper::new(call)
        }
    }

    /// The turn's id.
    pub fn turn_id(&self) -> &str {
        &self.turn_id
    }

    /// Whether the turn has ended (complete, cancelled or failed).
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// How long the turn has run, in milliseconds.
    pub fn duration_ms(&self) -> i64 {
        i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    /// How many tool calls this turn tracks as asked about.
    pub fn tracked(&self) -> usize {
        self.asked.len()
    }

    /// The name of a tool call of this turn, if it was seen.
    pub fn tool_name(&self, tool_call_id: &str) -> Option<&str> {
        self.tools.get(tool_call_id).map(String::as_str)
    }

    /// Records that the CLI asked the user about a tool call; when it was not seen yet (it
    /// should have been), returns its `toolCallStart` so the confirmation has a call to land on.
    pub fn asked(&mut self, tool_call_id: &str, tool: &str) -> Option<StateAction> {
        self.asked.insert(tool_call_id.to_owned());
        // The confirmation's own ready replaces it.
        self.deferred.remove(tool_call_id);
        if self.tools.contains_key(tool_call_id) {
            return None;
        }
        self.tools.insert(tool_call_id.to_owned(), tool.to_owned());
        Some(actions::tool_call_start(&self.turn_id, tool_call_id, tool))
    }

    /// The held-back ready of a client tool call that runs without a confirmation (the CLI
    /// calls the client's tool): published before the call waits for its client.
    pub fn release(&mut self, tool_call_id: &str) -> Option<StateAction> {
        let ready = self.deferred.remove(tool_call_id)?;
        Some(actions::tool_call_ready(&self.turn_id, tool_call_id, ready))
    }

    fn part_id(&self, message_id: &str, index: u64) -> String {
        format!("{}#{message_id}#{index}", self.turn_id)
    }

    /// The actions for one frame of this turn (a `result` ends it).
    pub fn map(&mut self, frame: &Typed) -> Vec<StateAction> {
        match frame {
            Typed::StreamEvent(f) => self.stream_event(f),
            Typed::Assistant(f) => self.assistant(f),
            Typed::User(f) => self.user(f),
            Typed::Result(f) => self.finish(f),
            _ => Vec::new(),
        }
    }

    fn stream_event(&mut self, f: &StreamEventFrame) -> Vec<StateAction> {
        // Another conversation's stream (a subagent's, or the main one's).
        if f.parent_tool_use_id() != self.parent.as_deref() {
            return Vec::new();
        }
        let t = self.turn_id.clone();
        match &f.event {
            StreamEvent::MessageStart { message, .. } => {
                let id = if message.id.is_empty() {
                    "msg".to_owned()
                } else {
                    message.id.clone()
                };
                self.streamed.insert(id.clone());
                self.message_id = Some(id);
                self.tool_blocks.clear();
                self.streaming_usage = message
                    .extra
                    .get("usage")
                    .and_then(|u| serde_json::from_value(u.clone()).ok());
                self.note_context();
                Vec::new()
            }
            StreamEvent::Other(e)
                if e.get("type").and_then(Value::as_str) == Some("message_delta") =>
            {
                // The delta's counts are the response's totals so far; absent ones stand.
                if let (Some(now), Some(delta)) = (
                    self.streaming_usage.as_mut(),
                    e.get("usage").and_then(|u| {
                        serde_json::from_value::<claude_host_protocol::frames::ResultUsage>(
                            u.clone(),
                        )
                        .ok()
                    }),
                ) {
                    now.output_tokens = delta.output_tokens.or(now.output_tokens);
                    now.input_tokens = delta.input_tokens.or(now.input_tokens);
                    now.cache_read_input_tokens = delta
                        .cache_read_input_tokens
                        .or(now.cache_read_input_tokens);
                    now.cache_creation_input_tokens = delta
                        .cache_creation_input_tokens
                        .or(now.cache_creation_input_tokens);
                }
                self.note_context();
                Vec::new()
            }
            StreamEvent::ContentBlockStart {
                index,
                content_block,
                ..
            } => {
                let mid = self.message_id.clone().unwrap_or_else(|| "msg".into());
                match content_block {
                    Block::Text { .. } => {
                        vec![actions::markdown_part(
                            &t,
                            self.part_id(&mid, *index),
                            String::new(),
                        )]
                    }
                    Block::Thinking { .. } => vec![actions::reasoning_part(
                        &t,
                        self.part_id(&mid, *index),
                        String::new(),
                    )],
                    Block::ToolUse { id, name, .. } => {
                        self.tool_blocks.insert(*index, id.clone());
                        self.tools.insert(id.clone(), name.clone());
                        vec![actions::tool_call_start(&t, id, name)]
                    }
                    _ => Vec::new(),
                }
            }
            StreamEvent::ContentBlockDelta { index, delta, .. } => {
                let mid = self.message_id.clone().unwrap_or_else(|| "msg".into());
                match delta {
                    BlockDelta::TextDelta { text } => {
                        vec![actions::delta(&t, self.part_id(&mid, *index), text.clone())]
                    }
                    BlockDelta::ThinkingDelta { thinking } => {
                        vec![actions::reasoning(
                            &t,
                            self.part_id(&mid, *index),
                            thinking.clone(),
                        )]
                    }
                    BlockDelta::InputJsonDelta { partial_json } => self
                        .tool_blocks
                        .get(index)
                        .map(|id| actions::tool_call_delta(&t, id, partial_json.clone()))
                        .into_iter()
                        .collect(),
                    BlockDelta::Other(_) => Vec::new(),
                }
            }
            StreamEvent::Other(_) => Vec::new(),
        }
    }

    fn assistant(&mut self, f: &AssistantFrame) -> Vec<StateAction> {
        if f.parent_tool_use_id() != self.parent.as_deref() {
            return Vec::new();
        }
        if let Some(model) = f.message.extra.get("model").and_then(Value::as_str)
            && model != "<synthetic>"
        {
            self.answered_by = Some(model.to_owned());
        }
        if !self.streamed.contains(&f.message.id)
            && let Some(tokens) = context_tokens(&f.message.extra)
        {
            self.context_tokens = Some(tokens);
        }
        let t = self.turn_id.clone();
        let mid = if f.message.id.is_empty() {
            "msg".to_owned()
        } else {
            f.message.id.clone()
        };
        let streamed = self.streamed.contains(&mid);
        let mut out = Vec::new();
        for (i, block) in f.message.content.iter().enumerate() {
            let index = u64::try_from(i).unwrap_or(u64::MAX);
            match block {
                // Without partial messages, whole blocks arrive here instead.
                Block::Text { text, .. } if !streamed => {
                    out.push(actions::markdown_part(
                        &t,
                        self.part_id(&mid, index),
                        text.clone(),
                    ));
                }
                Block::Thinking { thinking, .. } if !streamed => out.push(actions::reasoning_part(
                    &t,
                    self.part_id(&mid, index),
                    thinking.clone(),
                )),
                Block::ToolUse {
                    id, name, input, ..
                } => {
                    if !self.tools.contains_key(id) {
                        self.tools.insert(id.clone(), name.clone());
                        out.push(actions::tool_call_start(&t, id, name));
                    }
                    // Asked about already: the pending confirmation stands.
                    if !self.asked.contains(id) {
                        let ready = Ready {
                            invocation: actions::invocation(name, input),
                            input: input.to_string(),
                            confirmed: Some(ToolCallConfirmationReason::NotNeeded),
                            title: None,
                        };
                        if name.starts_with(crate::session::client_tools::PREFIX) {
                            self.deferred.insert(id.clone(), ready);
                        } else {
                            out.push(actions::tool_call_ready(&t, id, ready));
                        }
                    }
                }
                _ => {}
            }
        }
        out
    }

    fn user(&mut self, f: &UserFrame) -> Vec<StateAction> {
        if f.parent_tool_use_id() != self.parent.as_deref() {
            return Vec::new();
        }
        let t = self.turn_id.clone();
        let mut out = Vec::new();
        for b in f.tool_results() {
            let Block::ToolResult {
                tool_use_id,
                is_error,
                ..
            } = b
            else {
                continue;
            };
            let Some(name) = self.tools.get(tool_use_id).cloned() else {
                continue;
            };
            // A client tool call that ended before either (a rule refused it): its ready
            // still comes before its end.
            out.extend(self.release(tool_use_id));
            out.push(actions::tool_call_complete(
                &t,
                tool_use_id,
                &name,
                !is_error.unwrap_or(false),
                b.result_text().unwrap_or_default(),
            ));
        }
        out
    }

    fn note_context(&mut self) {
        if let Some(u) = &self.streaming_usage {
            self.context_tokens = Some(u.total_input() + u.output_tokens.unwrap_or(0));
        }
    }

    /// The turn's `result`: usage and completion, a cancellation, or an error.
    pub fn finish(&mut self, f: &ResultFrame) -> Vec<StateAction> {
        self.finished = true;
        let t = self.turn_id.clone();
        let duration = self.duration_ms();
        match f.end() {
            TurnEnd::Complete => {
                let usage = f.usage.as_ref();
                let mut meta = Map::new();
                meta.insert(
                    "costUsd".into(),
                    f.total_cost_usd.clone().map_or(Value::Null, Value::Number),
                );
                meta.insert(
                    "durationMs".into(),
                    f.duration_ms.clone().map_or(Value::Null, Value::Number),
                );
                if let Some(tokens) = self.context_tokens {
                    meta.insert(CONTEXT_TOKENS.into(), Value::from(tokens));
                }
                let info = UsageInfo {
                    input_tokens: Some(usage.map_or(0, |u| u.total_input())),
                    output_tokens: usage.and_then(|u| u.output_tokens),
                    model: self
                        .answered_by
                        .clone()
                        .or_else(|| f.model().map(str::to_owned)),
                    cache_read_tokens: usage.and_then(|u| u.cache_read_input_tokens),
                    meta: Some(meta),
                };
                vec![
                    actions::usage(&t, info),
                    actions::turn_complete(&t, duration),
                ]
            }
            TurnEnd::Cancelled => vec![actions::turn_cancelled(&t, duration)],
            TurnEnd::Failed { kind, message } => {
                vec![actions::turn_error(&t, duration, &kind, &message)]
            }
        }
    }

    /// The turn was cancelled before a `result`.
    pub fn cancel(&mut self) -> Vec<StateAction> {
        self.finished = true;
        vec![actions::turn_cancelled(&self.turn_id, self.duration_ms())]
    }

    /// The CLI went idle without a `result` (a turn of its own with nothing to report).
    pub fn complete(&mut self) -> Vec<StateAction> {
        self.finished = true;
        vec![actions::turn_complete(&self.turn_id, self.duration_ms())]
    }

    /// The turn ended without a `result` (the CLI died, or never started): an error.
    pub fn fail(&mut self, kind: &str, message: &str) -> Vec<StateAction> {
        self.finished = true;
        vec![actions::turn_error(
            &self.turn_id,
            self.duration_ms(),
            kind,
            message,
        )]
    }
}

/// The `chat/usage` meta key with the context the turn's last request used.
pub const CONTEXT_TOKENS: &str = "contextTokens";

/// The context an API response used, from its message's `usage`: every input token (cached
/// or not) and the output.
pub fn context_tokens(message_extra: &Map<String, Value>) -> Option<i64> {
    UsageTokens::of(message_extra).map(|t| t.context())
}

/// An API response's token counts, read from its message's `usage` without the rest of it.
/// Not `ResultUsage`: its flattened rest sends every field through serde's content buffer,
/// once per assistant frame here and per response of a restored transcript.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct UsageTokens {
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub cache_read_input_tokens: Option<i64>,
    pub cache_creation_input_tokens: Option<i64>,
}

impl UsageTokens {
    /// The counts of a message's `usage`, if it has one that reads as counts.
    pub fn of(message: &Map<String, Value>) -> Option<UsageTokens> {
        // An object only, as `ResultUsage` reads it: a struct would also take an array.
        let usage = message.get("usage").filter(|u| u.is_object())?;
        serde::Deserialize::deserialize(usage).ok()
    }

    /// Every input token, cached or not.
    pub fn input(&self) -> i64 {
        self.input_tokens.unwrap_or(0)
            + self.cache_read_input_tokens.unwrap_or(0)
            + self.cache_creation_input_tokens.unwrap_or(0)
    }

    /// The context the request used: its input and the output.
    pub fn context(&self) -> i64 {
        self.input() + self.output_tokens.unwrap_or(0)
    }
}

/// Whether a frame shows a turn going on (its content, or the CLI saying it runs): a frame
/// like this with no turn of ours open is a turn Claude Code started by itself.
pub fn shows_a_turn(frame: &Typed) -> bool {
    match frame {
        Typed::Assistant(_) | Typed::StreamEvent(_) | Typed::Result(_) => true,
        Typed::SessionState(s) => s.run_state() == claude_host_protocol::frames::RunState::Running,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use claude_host_protocol::stream_json::Frame;

    fn typed(line: &str) -> Typed {
        Frame::parse(line).unwrap().typed().unwrap()
    }

    #[test]
    fn context_tokens_are_a_responses_input_and_output() {
        use serde_json::json;
        let of = |m: Value| context_tokens(m.as_object().unwrap());
        let usage = json!({"usage": {"input_tokens": 1, "cache_read_input_tokens": 2,
            "cache_creation_input_tokens": 3, "output_tokens": 4, "server_tool_use": {}}});
        assert_eq!(of(usage), Some(10));
        assert_eq!(of(json!({"usage": {"output_tokens": 4}})), Some(4));
        assert_eq!(of(json!({"model": "m"})), None);
        assert_eq!(of(json!({"usage": [1, 2, 3, 4]})), None);
        assert_eq!(of(json!({"usage": {"input_tokens": "1"}})), None);
    }

    #[test]
    fn every_shape_builds_in_order() {
        let mut m = TurnMapper::new("t1");
        let frames = [
            r#"{"type":"stream_event","event":{"type":"message_start","message":{"id":"m1"}}}"#,
            r#"{"type":"stream_event","event":{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}}"#,
            r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}}"#,
            r#"{"type":"stream_event","event":{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}}"#,
            r#"{"type":"stream_event","event":{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}}}"#,
            r#"{"type":"stream_event","event":{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"tu1","name":"Bash","input":{}}}}"#,
            r#"{"type":"stream_event","event":{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{}"}}}"#,
            r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"tu1","name":"Bash","input":{"command":"ls"}}]}}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu1","content":"a\nb"}]}}"#,
            r#"{"type":"result","subtype":"success","usage":{"input_tokens":3,"output_tokens":4},"modelUsage":{"claude-opus-5-5":{}},"total_cost_usd":0.1}"#,
        ];
        let kinds: Vec<&str> = frames
            .iter()
            .flat_map(|f| m.map(&typed(f)))
            .map(|a| actions::kind(&a))
            .collect();
        assert_eq!(
            kinds,
            [
                "chat/responsePart",
                "chat/reasoning",
                "chat/responsePart",
                "chat/delta",
                "chat/toolCallStart",
                "chat/toolCallDelta",
                "chat/toolCallReady",
                "chat/toolCallComplete",
                "chat/usage",
                "chat/turnComplete"
            ]
        );
        assert!(m.finished());
    }

    #[test]
    fn a_tool_call_asked_about_keeps_its_pending_confirmation() {
        let mut m = TurnMapper::new("t1");
        assert!(
            m.asked("tu9", "Write").is_some(),
            "an unseen call is started"
        );
        let a = m.map(&typed(
            r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"tu9","name":"Write","input":{}}]}}"#,
        ));
        assert!(a.is_empty(), "no automatic ready: {a:?}");
    }

    #[test]
    fn errors_and_cancellations_end_the_turn() {
        let mut m = TurnMapper::new("t2");
        let err = m.map(&typed(
            r#"{"type":"result","subtype":"error_during_execution","terminal_reason":"api_error","errors":["boom"]}"#,
        ));
        assert_eq!(actions::kind(&err[0]), "chat/error");
        let cancelled = TurnMapper::new("t3").map(&typed(
            r#"{"type":"result","subtype":"error_during_execution","terminal_reason":"aborted_streaming"}"#,
        ));
        assert_eq!(actions::kind(&cancelled[0]), "chat/turnCancelled");
        assert_eq!(TurnMapper::new("t4").fail("x", "gone").len(), 1);
    }

    #[test]
    fn subagent_frames_are_not_the_main_response() {
        let mut m = TurnMapper::new("t5");
        let a = m.map(&typed(
            r#"{"type":"assistant","parent_tool_use_id":"toolu_p","message":{"id":"m1","content":[{"type":"text","text":"inner"}]}}"#,
        ));
        assert!(a.is_empty());
    }

    #[test]
    fn a_subagent_mapper_takes_only_its_own_frames() {
        let mut m = TurnMapper::for_subagent("toolu_p");
        assert_eq!(m.turn_id(), "toolu_p");
        let main = m.map(&typed(
            r#"{"type":"assistant","message":{"id":"m0","content":[{"type":"text","text":"main"}]}}"#,
        ));
        assert!(main.is_empty(), "{main:?}");
        let other = m.map(&typed(
            r#"{"type":"assistant","parent_tool_use_id":"toolu_q","message":{"id":"m1","content":[{"type":"text","text":"other"}]}}"#,
        ));
        assert!(other.is_empty(), "{other:?}");
        let own: Vec<&str> = m
            .map(&typed(
                r#"{"type":"assistant","parent_tool_use_id":"toolu_p","message":{"id":"m2","content":[{"type":"tool_use","id":"tu1","name":"Glob","input":{"pattern":"*"}}]}}"#,
            ))
            .iter()
            .map(actions::kind)
            .collect();
        assert_eq!(own, ["chat/toolCallStart", "chat/toolCallReady"]);
        let done: Vec<&str> = m
            .map(&typed(
                r#"{"type":"user","parent_tool_use_id":"toolu_p","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu1","content":"a.txt"}]}}"#,
            ))
            .iter()
            .map(actions::kind)
            .collect();
        assert_eq!(done, ["chat/toolCallComplete"]);
    }
}
