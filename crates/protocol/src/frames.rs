//! Typed views of the stream-json frames the host interprets.
//!
//! A [`crate::stream_json::Frame`] keeps the whole line; these views name the fields the host
//! acts on and keep every other field in `extra`, so a view serializes back to the frame it
//! came from (tested on captured frames). Fields that real frames carry as `null` at times
//! (`parent_tool_use_id`) are read through accessors on `extra` rather than named, so a
//! `null` survives the round trip.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Fields a view does not name.
pub type Extra = Map<String, Value>;

fn extra_str<'a>(extra: &'a Extra, key: &str) -> Option<&'a str> {
    extra.get(key).and_then(Value::as_str)
}

/// `system/init`: the CLI's session at the start of every turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemInit {
    /// The Claude session id.
    #[serde(default)]
    pub session_id: String,
    /// The model in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Permission mode in force.
    #[serde(
        rename = "permissionMode",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub permission_mode: Option<String>,
    /// Tool names offered to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Extra,
}

/// What `system/session_state_changed` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    /// A turn runs.
    Running,
    /// The CLI waits for the host (a permission or a dialog).
    RequiresAction,
    /// Nothing runs; the queue is drained.
    Idle,
    /// A state this host does not know.
    Other,
}

/// `system/session_state_changed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionStateChanged {
    /// `running`, `requires_action` or `idle`.
    pub state: String,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Extra,
}

impl SessionStateChanged {
    /// The state, classified.
    pub fn run_state(&self) -> RunState {
        match self.state.as_str() {
            "running" => RunState::Running,
            "requires_action" => RunState::RequiresAction,
            "idle" => RunState::Idle,
            _ => RunState::Other,
        }
    }
}

/// `system/task_notification`: a background task (shell, subagent) ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskNotification {
    /// `completed`, `failed` or `stopped`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// What the task did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Extra,
}

impl TaskNotification {
    /// A line for people: the summary (or description) and the status.
    pub fn describe(&self) -> String {
        let what = self
            .summary
            .as_deref()
            .or_else(|| extra_str(&self.extra, "description"))
            .unwrap_or("a background task");
        format!("{what} {}", self.status.as_deref().unwrap_or("finished"))
    }
}

/// Where a queued command is (`command_lifecycle`, CLI 2.1.330 and later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandState {
    /// Waiting behind another command.
    Queued,
    /// Running (or done).
    Started,
}

/// `command_lifecycle`: a user message the host sent, by its uuid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommandLifecycle {
    /// The uuid the host put on the user message.
    #[serde(default)]
    pub command_uuid: String,
    /// `queued`, `started`, …
    #[serde(default)]
    pub state: String,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Extra,
}

impl CommandLifecycle {
    /// Queued, or anything after (started, completed).
    pub fn command_state(&self) -> CommandState {
        if self.state == "queued" {
            CommandState::Queued
        } else {
            CommandState::Started
        }
    }
}

/// A content block of a message (assistant output, tool results, stream starts).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    /// Text.
    Text {
        /// The text (empty at a stream's `content_block_start`).
        #[serde(default)]
        text: String,
        /// Everything else.
        #[serde(flatten)]
        extra: Extra,
    },
    /// Extended thinking.
    Thinking {
        /// The thinking text.
        #[serde(default)]
        thinking: String,
        /// Everything else (the signature).
        #[serde(flatten)]
        extra: Extra,
    },
    /// A tool call.
    ToolUse {
        /// Its id (`toolu_…`).
        id: String,
        /// The tool.
        name: String,
        /// Its input (`{}` at a stream's `content_block_start`).
        #[serde(default)]
        input: Value,
        /// Everything else.
        #[serde(flatten)]
        extra: Extra,
    },
    /// A tool's result (in user messages).
    ToolResult {
        /// The call it answers.
        tool_use_id: String,
        /// A string or a list of blocks.
        #[serde(default, skip_serializing_if = "Value::is_null")]
        content: Value,
        /// Whether the tool failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
        /// Everything else.
        #[serde(flatten)]
        extra: Extra,
    },
    /// Any other block (images, server tools, redacted thinking, …), kept as is.
    #[serde(untagged)]
    Other(Extra),
}

impl Block {
    /// For a tool result: its text (a string, or the text blocks joined by newlines).
    pub fn result_text(&self) -> Option<String> {
        let Block::ToolResult { content, .. } = self else {
            return None;
        };
        Some(tool_result_text(content))
    }
}

/// A tool result's `content` as text: a string, or its text blocks joined by newlines.
fn tool_result_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// A [`Block`] read in place from a parsed JSON value: the fields [`Block`] names, borrowed.
///
/// For readers of transcripts, whose entries are already `Value`s. Deserializing [`Block`]
/// from a `Value` copies each block through serde's content buffer (the tag, the untagged
/// fallback, the flattened rest) only to read a few strings; a restore did that for every
/// block of a session, and the buffer's code was a quarter of the code a first restore paged
/// in (docs/BENCHMARKS.md, *What a first open faults in*). Where [`Block`] reads a
/// block, this reads the same; a block [`Block`] rejects (a field of the wrong type) reads
/// as [`BlockRef::Other`] here.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BlockRef<'a> {
    /// [`Block::Text`]'s text.
    Text(&'a str),
    /// [`Block::Thinking`]'s thinking.
    Thinking(&'a str),
    /// [`Block::ToolUse`].
    ToolUse {
        /// Its id.
        id: &'a str,
        /// The tool.
        name: &'a str,
        /// Its input (`null` when absent).
        input: &'a Value,
    },
    /// [`Block::ToolResult`].
    ToolResult {
        /// The call it answers.
        tool_use_id: &'a str,
        /// A string or a list of blocks (`null` when absent).
        content: &'a Value,
        /// Whether the tool failed.
        is_error: Option<bool>,
    },
    /// Any other block, or one [`Block`] would not read.
    Other,
}

/// What an absent `input` or `content` reads as, as [`Block`]'s `#[serde(default)]` gives it.
static NULL: Value = Value::Null;

impl<'a> BlockRef<'a> {
    /// The block `v`.
    pub fn of(v: &'a Value) -> BlockRef<'a> {
        Self::read(v).unwrap_or(BlockRef::Other)
    }

    fn read(v: &'a Value) -> Option<BlockRef<'a>> {
        let b = v.as_object()?;
        // A present field must have the type `Block` gives it; an absent one its default.
        let text = |key: &str| match b.get(key) {
            None => Some(""),
            Some(t) => t.as_str(),
        };
        let string = |key: &str| b.get(key).and_then(Value::as_str);
        let any = |key: &str| b.get(key).unwrap_or(&NULL);
        Some(match b.get("type").and_then(Value::as_str)? {
            "text" => BlockRef::Text(text("text")?),
            "thinking" => BlockRef::Thinking(text("thinking")?),
            "tool_use" => BlockRef::ToolUse {
                id: string("id")?,
                name: string("name")?,
                input: any("input"),
            },
            "tool_result" => BlockRef::ToolResult {
                tool_use_id: string("tool_use_id")?,
                content: any("content"),
                is_error: match b.get("is_error") {
                    None | Some(Value::Null) => None,
                    Some(e) => Some(e.as_bool()?),
                },
            },
            _ => BlockRef::Other,
        })
    }

    /// For a tool result: its text, as [`Block::result_text`].
    pub fn result_text(&self) -> Option<String> {
        match self {
            BlockRef::ToolResult { content, .. } => Some(tool_result_text(content)),
            _ => None,
        }
    }
}

/// A [`UserContent`] read in place: a message's `content`, a string or blocks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ContentRef<'a> {
    /// Plain text.
    Text(&'a str),
    /// Blocks, each read with [`BlockRef::of`].
    Blocks(&'a [Value]),
}

impl<'a> ContentRef<'a> {
    /// The content `v`: a string or an array (of anything: an element that is not a block
    /// reads as [`BlockRef::Other`]).
    pub fn of(v: &'a Value) -> Option<ContentRef<'a>> {
        match v {
            Value::String(s) => Some(ContentRef::Text(s)),
            Value::Array(a) => Some(ContentRef::Blocks(a)),
            _ => None,
        }
    }

    /// Its blocks (none for text).
    pub fn blocks(&self) -> impl Iterator<Item = BlockRef<'a>> + use<'a> {
        let blocks: &'a [Value] = match self {
            ContentRef::Text(_) => &[],
            ContentRef::Blocks(b) => b,
        };
        blocks.iter().map(BlockRef::of)
    }
}

/// A streamed change to a content block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BlockDelta {
    /// More text.
    TextDelta {
        /// The text.
        text: String,
    },
    /// More thinking.
    ThinkingDelta {
        /// The thinking text.
        thinking: String,
    },
    /// More of a tool call's input JSON.
    InputJsonDelta {
        /// A fragment of the JSON.
        partial_json: String,
    },
    /// Any other delta (signatures, citations), kept as is.
    #[serde(untagged)]
    Other(Extra),
}

/// The `message` of a `message_start` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageStart {
    /// The message id.
    #[serde(default)]
    pub id: String,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Extra,
}

/// An Anthropic streaming event, as the CLI forwards it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// A response begins.
    MessageStart {
        /// The message.
        message: MessageStart,
        /// Everything else.
        #[serde(flatten)]
        extra: Extra,
    },
    /// A block begins.
    ContentBlockStart {
        /// Its position in the message.
        index: u64,
        /// The block (empty text, thinking or tool input).
        content_block: Block,
        /// Everything else.
        #[serde(flatten)]
        extra: Extra,
    },
    /// A block grows.
    ContentBlockDelta {
        /// Its position in the message.
        index: u64,
        /// The change.
        delta: BlockDelta,
        /// Everything else.
        #[serde(flatten)]
        extra: Extra,
    },
    /// Any other event (`content_block_stop`, `message_delta`, `message_stop`, `ping`, …).
    #[serde(untagged)]
    Other(Extra),
}

/// `stream_event` (with `--include-partial-messages`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamEventFrame {
    /// The event.
    pub event: StreamEvent,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Extra,
}

impl StreamEventFrame {
    /// The subagent tool call this event belongs to, if any.
    pub fn parent_tool_use_id(&self) -> Option<&str> {
        extra_str(&self.extra, "parent_tool_use_id")
    }
}

/// An assistant message as the CLI prints it (one content block per frame).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// The API message id, shared by every block of one response.
    #[serde(default)]
    pub id: String,
    /// The blocks.
    #[serde(default)]
    pub content: Vec<Block>,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `assistant`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantFrame {
    /// The message.
    pub message: AssistantMessage,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Extra,
}

impl AssistantFrame {
    /// The subagent tool call this message belongs to, if any.
    pub fn parent_tool_use_id(&self) -> Option<&str> {
        extra_str(&self.extra, "parent_tool_use_id")
    }
}

/// A user message's content: a string or blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum UserContent {
    /// Plain text.
    Text(String),
    /// Blocks (text, tool results, images).
    Blocks(Vec<Block>),
}

/// A user message as the CLI prints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserMessage {
    /// The content.
    pub content: UserContent,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `user`: tool results and replays.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserFrame {
    /// The message.
    pub message: UserMessage,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Extra,
}

impl UserFrame {
    /// The subagent tool call this message belongs to, if any.
    pub fn parent_tool_use_id(&self) -> Option<&str> {
        extra_str(&self.extra, "parent_tool_use_id")
    }

    /// The tool results it carries.
    pub fn tool_results(&self) -> impl Iterator<Item = &Block> {
        let blocks: &[Block] = match &self.message.content {
            UserContent::Blocks(b) => b,
            UserContent::Text(_) => &[],
        };
        blocks
            .iter()
            .filter(|b| matches!(b, Block::ToolResult { .. }))
    }
}

/// The main loop's token usage in a `result`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultUsage {
    /// Uncached input tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<i64>,
    /// Output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<i64>,
    /// Input tokens read from the cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_input_tokens: Option<i64>,
    /// Input tokens written to the cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_input_tokens: Option<i64>,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Extra,
}

impl ResultUsage {
    /// Every input token, cached or not.
    pub fn total_input(&self) -> i64 {
        self.input_tokens.unwrap_or(0)
            + self.cache_read_input_tokens.unwrap_or(0)
            + self.cache_creation_input_tokens.unwrap_or(0)
    }
}

/// `result`: exactly one per turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultFrame {
    /// `success`, `error_during_execution`, `error_max_turns`, …
    #[serde(default)]
    pub subtype: String,
    /// Whether the turn failed (an API error ends with `success` and `is_error: true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    /// The final text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// Why the turn ended (`completed`, `aborted_streaming`, `api_error`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal_reason: Option<String>,
    /// Error texts of the error subtypes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<String>>,
    /// This turn's main-loop usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ResultUsage>,
    /// Usage per model, cumulative over the process.
    #[serde(
        rename = "modelUsage",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub model_usage: Option<Map<String, Value>>,
    /// Cost so far, cumulative over the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_cost_usd: Option<serde_json::Number>,
    /// How long the turn took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<serde_json::Number>,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Extra,
}

/// How a turn ended, read from its `result`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnEnd {
    /// Completed normally.
    Complete,
    /// Interrupted.
    Cancelled,
    /// Failed: a classification (`api_error`, `prompt_too_long`, `error_max_turns`, …) and
    /// the message.
    Failed {
        /// What kind of failure.
        kind: String,
        /// What went wrong, for people.
        message: String,
    },
}

impl ResultFrame {
    /// How the turn ended.
    pub fn end(&self) -> TurnEnd {
        let terminal = self.terminal_reason.as_deref().unwrap_or("");
        if self.subtype == "success" && !self.is_error.unwrap_or(false) {
            return TurnEnd::Complete;
        }
        if terminal.starts_with("aborted") {
            return TurnEnd::Cancelled;
        }
        let message = self
            .errors
            .as_ref()
            .and_then(|e| e.first())
            .cloned()
            .or_else(|| self.result.clone())
            .unwrap_or_else(|| self.subtype.clone());
        let kind = if !terminal.is_empty() {
            terminal.to_owned()
        } else if self.subtype == "success" {
            "api_error".to_owned()
        } else {
            self.subtype.clone()
        };
        TurnEnd::Failed { kind, message }
    }

    /// The model that did the work (the first in `modelUsage`).
    pub fn model(&self) -> Option<&str> {
        self.model_usage
            .as_ref()
            .and_then(|m| m.keys().next())
            .map(String::as_str)
    }
}

/// `can_use_tool`: the CLI asks whether a tool may run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CanUseTool {
    /// The tool.
    #[serde(default)]
    pub tool_name: String,
    /// The tool call it is about.
    #[serde(default)]
    pub tool_use_id: String,
    /// The input it would run with.
    #[serde(default)]
    pub input: Value,
    /// A short description (a file name, a command).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A title for the prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Everything else (`permission_suggestions`, `blocked_path`, …).
    #[serde(flatten)]
    pub extra: Extra,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream_json::{Frame, Typed};

    /// Frames captured from Claude Code 2.1.330 (control sessions and `-p` output).
    const CAPTURED: &str = include_str!("../testdata/frames_2.1.330.jsonl");

    fn view_value(t: &Typed) -> Option<Value> {
        let v = match t {
            Typed::Init(x) => serde_json::to_value(x),
            Typed::SessionState(x) => serde_json::to_value(x),
            Typed::TaskNotification(x) => serde_json::to_value(x),
            Typed::CommandLifecycle(x) => serde_json::to_value(x),
            Typed::StreamEvent(x) => serde_json::to_value(x),
            Typed::Assistant(x) => serde_json::to_value(x),
            Typed::User(x) => serde_json::to_value(x),
            Typed::Result(x) => serde_json::to_value(x),
            Typed::Other => return None,
        };
        Some(v.unwrap())
    }

    #[test]
    fn captured_frames_type_and_serialize_back_unchanged() {
        let mut typed = 0;
        for line in CAPTURED.lines() {
            let frame = Frame::parse(line).unwrap();
            let t = frame.typed().unwrap_or_else(|e| panic!("{e}: {line}"));
            if let Some(v) = view_value(&t) {
                typed += 1;
                assert_eq!(v, frame.to_value(), "lossy view of {line}");
            }
        }
        assert!(typed >= 60, "only {typed} frames were typed");
    }

    /// A derived [`Block`] as the [`BlockRef`] that should read the same.
    fn as_ref(b: &Block) -> BlockRef<'_> {
        match b {
            Block::Text { text, .. } => BlockRef::Text(text),
            Block::Thinking { thinking, .. } => BlockRef::Thinking(thinking),
            Block::ToolUse {
                id, name, input, ..
            } => BlockRef::ToolUse { id, name, input },
            Block::ToolResult {
                tool_use_id,
                content,
                is_error,
                ..
            } => BlockRef::ToolResult {
                tool_use_id,
                content,
                is_error: *is_error,
            },
            Block::Other(_) => BlockRef::Other,
        }
    }

    #[test]
    fn a_block_read_in_place_reads_what_the_derived_block_reads() {
        let mut blocks: Vec<Value> = Vec::new();
        for line in CAPTURED.lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            if let Some(Value::Array(c)) = v.pointer("/message/content") {
                blocks.extend(c.iter().cloned());
            }
            if let Some(b) = v.pointer("/event/content_block") {
                blocks.push(b.clone());
            }
        }
        let captured = blocks.len();
        assert!(captured >= 15, "only {captured} captured blocks");
        let kinds: std::collections::BTreeSet<&str> = blocks
            .iter()
            .filter_map(|b| b.get("type").and_then(Value::as_str))
            .collect();
        for kind in ["text", "tool_use", "tool_result"] {
            assert!(kinds.contains(kind), "no {kind} block among {kinds:?}");
        }
        // Absent fields, nulls, wrong types, unknown and missing tags, not objects.
        for edge in [
            r#"{"type":"text"}"#,
            r#"{"type":"text","text":5}"#,
            r#"{"type":"text","text":null}"#,
            r#"{"type":"thinking","thinking":"hm","signature":"s"}"#,
            r#"{"type":"thinking","signature":"s"}"#,
            r#"{"type":"redacted_thinking","data":"x"}"#,
            r#"{"type":"tool_use","id":"toolu_1","name":"Read"}"#,
            r#"{"type":"tool_use","id":"toolu_1"}"#,
            r#"{"type":"tool_use","id":7,"name":"Read","input":{}}"#,
            r#"{"type":"tool_result","tool_use_id":"toolu_1"}"#,
            r#"{"type":"tool_result","tool_use_id":"toolu_1","is_error":null,"content":[{"type":"text","text":"a"},{"type":"image"},{"type":"text","text":"b"}]}"#,
            r#"{"type":"tool_result","tool_use_id":"toolu_1","is_error":"yes"}"#,
            r#"{"type":"tool_result","tool_use_id":"toolu_1","is_error":true,"content":3}"#,
            r#"{"type":"image","source":{"type":"base64","data":""}}"#,
            r#"{"text":"no tag"}"#,
            r#"{"type":7}"#,
            r#""a string""#,
            "[1]",
        ] {
            blocks.push(serde_json::from_str(edge).unwrap());
        }
        for v in &blocks {
            // A block the derived deserializer rejects counts as `Other`.
            let derived = Block::deserialize(v).unwrap_or(Block::Other(Extra::new()));
            let read = BlockRef::of(v);
            assert_eq!(read, as_ref(&derived), "{v}");
            assert_eq!(read.result_text(), derived.result_text(), "{v}");
        }
        // The edge cases reach every arm: a tool result's text joins its text parts.
        let joined = serde_json::from_str::<Value>(
            r#"{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}"#,
        )
        .unwrap();
        assert_eq!(BlockRef::of(&joined).result_text().as_deref(), Some("a\nb"));
        let content = serde_json::json!(["x", {"type": "text", "text": "t"}]);
        let read: Vec<BlockRef> = ContentRef::of(&content).unwrap().blocks().collect();
        assert_eq!(read, [BlockRef::Other, BlockRef::Text("t")]);
        assert_eq!(
            ContentRef::of(&Value::from("hi")),
            Some(ContentRef::Text("hi"))
        );
        assert_eq!(ContentRef::of(&Value::Null), None);
    }

    #[test]
    fn the_fields_the_host_reads() {
        let frames: Vec<Typed> = CAPTURED
            .lines()
            .map(|l| Frame::parse(l).unwrap().typed().unwrap())
            .collect();
        let deltas: String = frames
            .iter()
            .filter_map(|t| match t {
                Typed::StreamEvent(StreamEventFrame {
                    event:
                        StreamEvent::ContentBlockDelta {
                            delta: BlockDelta::TextDelta { text },
                            ..
                        },
                    ..
                }) => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert!(!deltas.is_empty());
        let tools: Vec<&str> = frames
            .iter()
            .filter_map(|t| match t {
                Typed::Assistant(a) => Some(a),
                _ => None,
            })
            .flat_map(|a| a.message.content.iter())
            .filter_map(|b| match b {
                Block::ToolUse { name, .. } => Some(name.as_str()),
                _ => None,
            })
            .collect();
        assert!(tools.contains(&"Write"), "{tools:?}");
        let ends: Vec<TurnEnd> = frames
            .iter()
            .filter_map(|t| match t {
                Typed::Result(r) => Some(r.end()),
                _ => None,
            })
            .collect();
        assert!(ends.contains(&TurnEnd::Complete));
        assert!(ends.contains(&TurnEnd::Cancelled), "{ends:?}");
        let results: Vec<String> = frames
            .iter()
            .filter_map(|t| match t {
                Typed::User(u) => Some(u),
                _ => None,
            })
            .flat_map(|u| u.tool_results().filter_map(Block::result_text))
            .collect();
        assert!(!results.is_empty());
        assert!(
            frames
                .iter()
                .any(|t| matches!(t, Typed::SessionState(s) if s.run_state() == RunState::Idle))
        );
        assert!(frames.iter().any(|t| matches!(t, Typed::CommandLifecycle(c) if c.command_state() == CommandState::Started)));
        assert!(
            frames.iter().any(
                |t| matches!(t, Typed::TaskNotification(n) if n.describe() == "nap completed")
            )
        );
    }

    #[test]
    fn failures_are_classified() {
        let r: ResultFrame = serde_json::from_value(serde_json::json!({"type": "result",
            "subtype": "success", "is_error": true, "result": "API Error: 400"}))
        .unwrap();
        assert_eq!(
            r.end(),
            TurnEnd::Failed {
                kind: "api_error".into(),
                message: "API Error: 400".into()
            }
        );
        let r: ResultFrame = serde_json::from_value(serde_json::json!({"type": "result",
            "subtype": "error_during_execution", "terminal_reason": "prompt_too_long",
            "errors": ["prompt is too long"]}))
        .unwrap();
        assert_eq!(
            r.end(),
            TurnEnd::Failed {
                kind: "prompt_too_long".into(),
                message: "prompt is too long".into()
            }
        );
    }
}
