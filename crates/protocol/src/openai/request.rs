//! Anthropic Messages request → OpenAI Chat Completions or Responses request.
//!
//! The Anthropic messages are first read into a small neutral form ([`Turn`]), then written
//! in the target dialect, so both dialects make the same choices about what is kept.

use super::{CHAT_SIGNATURE, Dialect, RESPONSES_SIGNATURE, Target, Translated};
use crate::adapt::{Refusal, SERVER_TOOLS, fit_effort};
use crate::messages::MessagesRequest;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::borrow::Cow;

/// Responses refuses a `max_output_tokens` below this (Claude Code's model check sends 1).
const MIN_OUTPUT_TOKENS: u64 = 16;
/// Chat Completions takes at most this many stop sequences.
const MAX_STOP_SEQUENCES: usize = 4;

/// The rules applied, each name once, in the order first applied.
#[derive(Default)]
struct Rules(Vec<&'static str>);

impl Rules {
    fn add(&mut self, name: &'static str) {
        if !self.0.contains(&name) {
            self.0.push(name);
        }
    }
}

// ---- The Anthropic side, read borrowed ----

#[derive(Deserialize)]
struct InMessage<'a> {
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
struct InBlock<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    thinking: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    signature: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    source: Option<InSource<'a>>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_use_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(default)]
    is_error: Option<bool>,
    #[serde(borrow, default)]
    cache_control: Option<&'a RawValue>,
    /// A `tool_reference` block's tool (Claude Code's ToolSearch answers with these).
    #[serde(borrow, default)]
    tool_name: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
struct InSource<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    media_type: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    data: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    url: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct InTool<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    description: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    input_schema: Option<&'a RawValue>,
    #[serde(borrow, default)]
    cache_control: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct InToolChoice<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    disable_parallel_tool_use: Option<bool>,
}

#[derive(Deserialize)]
struct InThinking<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    budget_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct InOutputConfig<'a> {
    #[serde(borrow, default)]
    effort: Option<Cow<'a, str>>,
}

/// Reads `raw` as `T`, `None` when it is not one.
fn read<'a, T: Deserialize<'a>>(raw: Option<&'a RawValue>) -> Option<T> {
    raw.and_then(|r| serde_json::from_str(r.get()).ok())
}

/// Blocks of a content value: a string is one text block, an array its blocks (those that are
/// not objects of the expected shape are `None`).
fn blocks_of(content: Option<&RawValue>) -> Vec<Option<InBlock<'_>>> {
    let Some(raw) = content else {
        return Vec::new();
    };
    let text = raw.get().trim_start();
    if text.starts_with('"') {
        let s: Option<Cow<str>> = serde_json::from_str(raw.get()).ok();
        return vec![Some(InBlock {
            kind: Some(Cow::Borrowed("text")),
            text: s,
            ..InBlock::default()
        })];
    }
    let list: Vec<&RawValue> = if text.starts_with('[') {
        serde_json::from_str(raw.get()).unwrap_or_default()
    } else {
        Vec::new()
    };
    list.into_iter()
        .map(|b| serde_json::from_str(b.get()).ok())
        .collect()
}

// ---- The neutral form ----

/// A piece of user content.
enum Part<'a> {
    Text(Cow<'a, str>),
    /// An image's URL (`data:` for inline images).
    Image(Cow<'a, str>),
    /// A PDF as a `data:` URL.
    Pdf(String),
    /// A PDF by URL (Responses only).
    PdfUrl(Cow<'a, str>),
}

struct ToolResult<'a> {
    id: Cow<'a, str>,
    text: String,
    images: Vec<Cow<'a, str>>,
}

enum AssistantPart<'a> {
    Text(Cow<'a, str>),
    Thinking {
        text: Cow<'a, str>,
        signature: Cow<'a, str>,
    },
    ToolUse {
        id: Cow<'a, str>,
        name: Cow<'a, str>,
        arguments: String,
    },
}

enum Turn<'a> {
    System(String),
    User {
        results: Vec<ToolResult<'a>>,
        parts: Vec<Part<'a>>,
    },
    Assistant(Vec<AssistantPart<'a>>),
}

fn note_cache_control(block: &InBlock, rules: &mut Rules) {
    if block.cache_control.is_some() {
        rules.add("cache_control_dropped");
    }
}

/// The `data:`/http URL of an image block, `None` for a source that cannot be sent.
fn image_url<'a>(source: Option<&InSource<'a>>) -> Option<Cow<'a, str>> {
    let source = source?;
    match source.kind.as_deref() {
        Some("base64") => Some(Cow::Owned(format!(
            "data:{};base64,{}",
            source.media_type.as_deref().unwrap_or("image/png"),
            source.data.as_deref().unwrap_or_default()
        ))),
        Some("url") => source.url.clone(),
        _ => None,
    }
}

/// The text of text blocks in `content` (a string or blocks), joined with `sep`.
fn joined_text(content: Option<&RawValue>, sep: &str, rules: &mut Rules) -> String {
    let mut out = String::new();
    for block in blocks_of(content).into_iter().flatten() {
        note_cache_control(&block, rules);
        if block.kind.as_deref() == Some("text")
            && let Some(t) = block.text
        {
            if !out.is_empty() {
                out.push_str(sep);
            }
            out.push_str(&t);
        }
    }
    out
}

fn document_part<'a>(block: &InBlock<'a>, rules: &mut Rules) -> Option<Part<'a>> {
    let source = block.source.as_ref()?;
    match source.kind.as_deref() {
        Some("text") => source.data.clone().map(Part::Text),
        Some("content") => Some(Part::Text(Cow::Owned(joined_text(
            source.content,
            "\n\n",
            rules,
        )))),
        Some("base64") if source.media_type.as_deref() == Some("application/pdf") => {
            Some(Part::Pdf(format!(
                "data:application/pdf;base64,{}",
                source.data.as_deref().unwrap_or_default()
            )))
        }
        Some("url") => source.url.clone().map(Part::PdfUrl),
        _ => None,
    }
}

fn tool_result<'a>(block: &InBlock<'a>, rules: &mut Rules) -> ToolResult<'a> {
    let mut text = String::new();
    let mut images = Vec::new();
    for inner in blocks_of(block.content) {
        let Some(inner) = inner else {
            rules.add("block_dropped");
            continue;
        };
        note_cache_control(&inner, rules);
        let piece = match inner.kind.as_deref() {
            Some("text") => inner.text,
            Some("image") => {
                match image_url(inner.source.as_ref()) {
                    Some(url) => images.push(url),
                    None => rules.add("image_dropped"),
                }
                continue;
            }
            Some("document") => match document_part(&inner, rules) {
                Some(Part::Text(t)) => Some(t),
                _ => {
                    rules.add("document_dropped");
                    continue;
                }
            },
            // ToolSearch's answer: on Anthropic's API it loads a deferred tool's schema. The
            // tool is in the OpenAI request's list already (deferral has no equivalent there),
            // so the model is told in words.
            Some("tool_reference") => inner
                .tool_name
                .as_ref()
                .map(|name| Cow::Owned(format!("Tool {name} is loaded and can be called."))),
            _ => {
                rules.add("block_dropped");
                continue;
            }
        };
        if let Some(piece) = piece {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&piece);
        }
    }
    if block.is_error == Some(true) {
        text.insert_str(0, "Error: ");
    }
    ToolResult {
        id: block.tool_use_id.clone().unwrap_or_default(),
        text,
        images,
    }
}

/// `raw` JSON without the whitespace between tokens (tool arguments are sent as compact text).
fn compact_json(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in raw.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !matches!(c, ' ' | '\n' | '\r' | '\t') {
            out.push(c);
        }
    }
    out
}

fn read_turns<'a>(messages: &[InMessage<'a>], rules: &mut Rules) -> Vec<Turn<'a>> {
    let mut turns = Vec::with_capacity(messages.len());
    for message in messages {
        match message.role.as_deref() {
            Some("system") => turns.push(Turn::System(joined_text(message.content, "\n\n", rules))),
            Some("user") => {
                let mut results = Vec::new();
                let mut parts = Vec::new();
                for block in blocks_of(message.content) {
                    let Some(block) = block else {
                        rules.add("block_dropped");
                        continue;
                    };
                    note_cache_control(&block, rules);
                    match block.kind.as_deref() {
                        Some("text") => parts.extend(block.text.map(Part::Text)),
                        Some("image") => match image_url(block.source.as_ref()) {
                            Some(url) => parts.push(Part::Image(url)),
                            None => rules.add("image_dropped"),
                        },
                        Some("document") => match document_part(&block, rules) {
                            Some(p) => parts.push(p),
                            None => rules.add("document_dropped"),
                        },
                        Some("tool_result") => results.push(tool_result(&block, rules)),
                        _ => rules.add("block_dropped"),
                    }
                }
                turns.push(Turn::User { results, parts });
            }
            Some("assistant") => {
                let mut parts = Vec::new();
                for block in blocks_of(message.content) {
                    let Some(block) = block else {
                        rules.add("block_dropped");
                        continue;
                    };
                    note_cache_control(&block, rules);
                    match block.kind.as_deref() {
                        Some("text") => parts.extend(block.text.map(AssistantPart::Text)),
                        Some("thinking") => parts.push(AssistantPart::Thinking {
                            text: block.thinking.unwrap_or_default(),
                            signature: block.signature.unwrap_or_default(),
                        }),
                        Some("redacted_thinking") => rules.add("thinking_dropped"),
                        Some("tool_use") => parts.push(AssistantPart::ToolUse {
                            id: block.id.unwrap_or_default(),
                            name: block.name.unwrap_or_default(),
                            arguments: block
                                .input
                                .map_or_else(|| "{}".to_owned(), |i| compact_json(i.get())),
                        }),
                        _ => rules.add("block_dropped"),
                    }
                }
                turns.push(Turn::Assistant(parts));
            }
            _ => rules.add("message_dropped"),
        }
    }
    turns
}

// ---- Request-level settings shared by both dialects ----

/// A custom tool, as both dialects describe one.
struct Function<'a> {
    name: Cow<'a, str>,
    description: Option<Cow<'a, str>>,
    parameters: Schema<'a>,
}

/// What `tool_choice` asks for.
enum Choice<'a> {
    Mode(&'static str),
    Named(Cow<'a, str>),
}

/// Everything but the messages, fitted to the target.
struct Settings<'a> {
    system: Option<String>,
    tools: Vec<Function<'a>>,
    choice: Option<Choice<'a>>,
    parallel_tool_calls: Option<bool>,
    max_tokens: Option<u64>,
    temperature: Option<&'a RawValue>,
    top_p: Option<&'a RawValue>,
    stop: Vec<Cow<'a, str>>,
    effort: Option<&'a str>,
    stream: bool,
}

fn number(raw: Option<&RawValue>) -> Option<&RawValue> {
    raw.filter(|r| serde_json::from_str::<f64>(r.get()).is_ok())
}

fn read_tools<'a>(
    raw: Option<&'a RawValue>,
    rules: &mut Rules,
) -> Result<Vec<Function<'a>>, Refusal> {
    let list: Vec<&RawValue> = read(raw).unwrap_or_default();
    let mut tools = Vec::with_capacity(list.len());
    for raw in list {
        let Ok(tool) = serde_json::from_str::<InTool>(raw.get()) else {
            rules.add("tool_dropped");
            continue;
        };
        if tool.cache_control.is_some() {
            rules.add("cache_control_dropped");
        }
        let kind = tool.kind.as_deref().unwrap_or("custom");
        if SERVER_TOOLS.iter().any(|s| kind.starts_with(s)) {
            return Err(Refusal::ServerTool {
                name: tool.name.as_deref().unwrap_or(kind).to_owned(),
                kind: kind.to_owned(),
            });
        }
        match (kind, tool.name) {
            ("custom", Some(name)) => tools.push(Function {
                name,
                description: tool.description,
                parameters: tool
                    .input_schema
                    .filter(|s| s.get().starts_with('{'))
                    .map_or(Schema::Empty(EmptySchema::default()), Schema::Raw),
            }),
            _ => rules.add("tool_dropped"),
        }
    }
    Ok(tools)
}

/// The effort level asked for: `output_config.effort`, else one read from `thinking`.
fn requested_effort<'a>(
    config: Option<&InOutputConfig<'a>>,
    thinking: Option<&InThinking>,
) -> (Option<Cow<'a, str>>, bool) {
    if let Some(effort) = config.and_then(|c| c.effort.clone()) {
        return (Some(effort), false);
    }
    let level = match thinking.and_then(|t| t.kind.as_deref()) {
        Some("enabled") => match thinking.and_then(|t| t.budget_tokens) {
            Some(b) if b < 8000 => "low",
            Some(b) if b < 24_000 => "medium",
            Some(_) => "high",
            None => "medium",
        },
        Some("adaptive") => "medium",
        _ => return (None, false),
    };
    (Some(Cow::Borrowed(level)), true)
}

fn read_settings<'a>(
    req: &'a MessagesRequest,
    target: &'a Target,
    rules: &mut Rules,
) -> Result<Settings<'a>, Refusal> {
    let mut system = None;
    let mut tools = None;
    let mut choice = None;
    let mut parallel_tool_calls = None;
    let mut max_tokens = None;
    let (mut temperature, mut top_p) = (None, None);
    let mut stop = Vec::new();
    let mut thinking = None;
    let mut config = None;
    for (name, raw) in req.fields() {
        match name {
            "model" | "messages" | "stream" => {}
            "system" => system = Some(joined_text(Some(raw), "\n\n", rules)),
            "tools" => tools = Some(read_tools(Some(raw), rules)?),
            "tool_choice" => {
                if let Some(c) = read::<InToolChoice>(Some(raw)) {
                    if c.disable_parallel_tool_use == Some(true) {
                        parallel_tool_calls = Some(false);
                    }
                    choice = match c.kind.as_deref() {
                        Some("auto") => Some(Choice::Mode("auto")),
                        Some("any") => Some(Choice::Mode("required")),
                        Some("none") => Some(Choice::Mode("none")),
                        Some("tool") => c.name.map(Choice::Named),
                        _ => None,
                    };
                }
            }
            "max_tokens" => max_tokens = serde_json::from_str::<u64>(raw.get()).ok(),
            "temperature" | "top_p" => {
                let slot = if name == "temperature" {
                    &mut temperature
                } else {
                    &mut top_p
                };
                if target.reasoning {
                    rules.add("sampling_dropped");
                } else {
                    *slot = number(Some(raw));
                }
            }
            "top_k" => rules.add("top_k_dropped"),
            "stop_sequences" => {
                stop = read::<Vec<Cow<str>>>(Some(raw)).unwrap_or_default();
                if target.dialect == Dialect::Responses && !stop.is_empty() {
                    rules.add("stop_sequences_dropped");
                    stop.clear();
                } else if stop.len() > MAX_STOP_SEQUENCES {
                    rules.add("stop_sequences_cut");
                    stop.truncate(MAX_STOP_SEQUENCES);
                }
            }
            "thinking" => thinking = Some(read::<InThinking>(Some(raw))),
            "output_config" => config = Some(raw),
            "metadata" => rules.add("metadata_dropped"),
            "context_management" => rules.add("context_management_dropped"),
            "service_tier" => rules.add("service_tier_dropped"),
            "container" => rules.add("container_dropped"),
            "mcp_servers" => rules.add("mcp_servers_dropped"),
            "cache_control" => rules.add("cache_control_dropped"),
            _ => rules.add("unknown_field_dropped"),
        }
    }
    let tools = tools.unwrap_or_default();
    if tools.is_empty() && (choice.is_some() || parallel_tool_calls.is_some()) {
        rules.add("tool_choice_dropped");
        choice = None;
        parallel_tool_calls = None;
    }
    if let Some(asked) = max_tokens {
        let limit = target
            .max_output_tokens
            .unwrap_or(u64::MAX)
            .min(u32::MAX.into());
        if asked > limit {
            rules.add("max_tokens_clamped");
            max_tokens = Some(limit);
        } else if target.dialect == Dialect::Responses && asked < MIN_OUTPUT_TOKENS {
            rules.add("max_tokens_raised");
            max_tokens = Some(MIN_OUTPUT_TOKENS);
        }
    }
    let config_read = config.and_then(|c| read::<InOutputConfig>(Some(c)));
    let thinking_on = thinking
        .as_ref()
        .and_then(Option::as_ref)
        .filter(|t| t.kind.as_deref() != Some("disabled"));
    let (asked, from_thinking) = requested_effort(config_read.as_ref(), thinking_on);
    let effort = asked.and_then(|asked| {
        let level = fit_effort(&asked, &target.effort_levels)?;
        if level != asked.as_ref() {
            rules.add("effort_mapped");
        }
        Some(level)
    });
    if thinking.is_some() {
        rules.add(if from_thinking && effort.is_some() {
            "thinking_to_effort"
        } else {
            "thinking_dropped"
        });
    }
    if let Some(raw) = config {
        let only_effort_used = effort.is_some()
            && read::<serde_json::Map<String, serde_json::Value>>(Some(raw))
                .is_some_and(|m| m.keys().all(|k| k == "effort"));
        if !only_effort_used {
            rules.add("output_config_dropped");
        }
    }
    Ok(Settings {
        system: system.filter(|s| !s.is_empty()),
        tools,
        choice,
        parallel_tool_calls,
        max_tokens,
        temperature,
        top_p,
        stop,
        effort,
        stream: req.stream,
    })
}

// ---- Output shapes shared by both dialects ----

#[derive(Serialize)]
#[serde(untagged)]
enum Schema<'a> {
    Raw(&'a RawValue),
    Empty(EmptySchema),
}

/// `{"type":"object","properties":{}}`, for a tool without `input_schema`.
#[derive(Serialize)]
struct EmptySchema {
    #[serde(rename = "type")]
    kind: &'static str,
    properties: EmptyObject,
}

impl Default for EmptySchema {
    fn default() -> Self {
        EmptySchema {
            kind: "object",
            properties: EmptyObject {},
        }
    }
}

#[derive(Serialize)]
struct EmptyObject {}

/// Writes `body`. Serialising these shapes (strings, numbers, raw JSON) cannot fail.
fn to_body<T: Serialize>(body: &T) -> Vec<u8> {
    serde_json::to_vec(body).unwrap_or_default()
}

// ---- Chat Completions ----

#[derive(Serialize)]
struct ChatBody<'a> {
    model: &'a str,
    messages: Vec<ChatMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<ChatTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<ChatToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    stop: Vec<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum ChatMessage<'a> {
    System {
        content: String,
    },
    User {
        content: ChatUserContent<'a>,
    },
    Assistant {
        content: Option<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ChatToolCall<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reasoning_text: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reasoning_opaque: Option<String>,
    },
    Tool {
        tool_call_id: Cow<'a, str>,
        content: String,
    },
}

#[derive(Serialize)]
#[serde(untagged)]
enum ChatUserContent<'a> {
    Text(Cow<'a, str>),
    Parts(Vec<ChatPart<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ChatPart<'a> {
    Text { text: Cow<'a, str> },
    ImageUrl { image_url: ChatImageUrl<'a> },
    File { file: ChatFile },
}

#[derive(Serialize)]
struct ChatImageUrl<'a> {
    url: Cow<'a, str>,
}

#[derive(Serialize)]
struct ChatFile {
    filename: &'static str,
    file_data: String,
}

#[derive(Serialize)]
struct ChatToolCall<'a> {
    id: Cow<'a, str>,
    #[serde(rename = "type")]
    kind: &'static str,
    function: ChatFunctionCall<'a>,
}

#[derive(Serialize)]
struct ChatFunctionCall<'a> {
    name: Cow<'a, str>,
    arguments: String,
}

#[derive(Serialize)]
struct ChatTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: ChatFunction<'a>,
}

#[derive(Serialize)]
struct ChatFunction<'a> {
    name: Cow<'a, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<Cow<'a, str>>,
    parameters: Schema<'a>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum ChatToolChoice<'a> {
    Mode(&'static str),
    Named {
        #[serde(rename = "type")]
        kind: &'static str,
        function: Named<'a>,
    },
}

#[derive(Serialize)]
struct Named<'a> {
    name: Cow<'a, str>,
}

fn chat_parts<'a>(parts: Vec<Part<'a>>, rules: &mut Rules) -> Vec<ChatPart<'a>> {
    let mut out = Vec::with_capacity(parts.len());
    for part in parts {
        out.push(match part {
            Part::Text(text) => ChatPart::Text { text },
            Part::Image(url) => ChatPart::ImageUrl {
                image_url: ChatImageUrl { url },
            },
            Part::Pdf(file_data) => ChatPart::File {
                file: ChatFile {
                    filename: "document.pdf",
                    file_data,
                },
            },
            Part::PdfUrl(_) => {
                rules.add("document_dropped");
                continue;
            }
        });
    }
    out
}

fn chat_messages<'a>(
    system: Option<String>,
    turns: Vec<Turn<'a>>,
    rules: &mut Rules,
) -> Vec<ChatMessage<'a>> {
    let mut out = Vec::with_capacity(turns.len() + 1);
    if let Some(content) = system {
        out.push(ChatMessage::System { content });
    }
    for turn in turns {
        match turn {
            Turn::System(content) => out.push(ChatMessage::System { content }),
            Turn::User { results, parts } => {
                let mut images = Vec::new();
                for r in results {
                    if !r.images.is_empty() {
                        images.push(ChatPart::Text {
                            text: Cow::Owned(format!("Image from tool result {}:", r.id)),
                        });
                        images.extend(r.images.into_iter().map(|url| ChatPart::ImageUrl {
                            image_url: ChatImageUrl { url },
                        }));
                    }
                    out.push(ChatMessage::Tool {
                        tool_call_id: r.id,
                        content: r.text,
                    });
                }
                if !images.is_empty() {
                    out.push(ChatMessage::User {
                        content: ChatUserContent::Parts(images),
                    });
                }
                let content = match <[Part; 1]>::try_from(parts) {
                    Ok([Part::Text(text)]) => ChatUserContent::Text(text),
                    Ok(one) => ChatUserContent::Parts(chat_parts(one.into(), rules)),
                    Err(parts) => ChatUserContent::Parts(chat_parts(parts, rules)),
                };
                if !matches!(&content, ChatUserContent::Parts(p) if p.is_empty()) {
                    out.push(ChatMessage::User { content });
                }
            }
            Turn::Assistant(parts) => {
                let mut text: Option<String> = None;
                let mut tool_calls = Vec::new();
                let mut reasoning_text: Option<String> = None;
                let mut reasoning_opaque: Option<String> = None;
                for part in parts {
                    match part {
                        AssistantPart::Text(t) => join_into(&mut text, &t, "\n\n"),
                        AssistantPart::Thinking { text: t, signature } => {
                            match signature.strip_prefix(CHAT_SIGNATURE) {
                                Some(opaque) => {
                                    if !t.is_empty() {
                                        join_into(&mut reasoning_text, &t, "\n\n");
                                    }
                                    if !opaque.is_empty() {
                                        join_into(&mut reasoning_opaque, opaque, "");
                                    }
                                }
                                None => rules.add("thinking_dropped"),
                            }
                        }
                        AssistantPart::ToolUse {
                            id,
                            name,
                            arguments,
                        } => tool_calls.push(ChatToolCall {
                            id,
                            kind: "function",
                            function: ChatFunctionCall { name, arguments },
                        }),
                    }
                }
                // An assistant message needs content or tool calls.
                if text.is_some() || !tool_calls.is_empty() {
                    out.push(ChatMessage::Assistant {
                        content: text,
                        tool_calls,
                        reasoning_text,
                        reasoning_opaque,
                    });
                }
            }
        }
    }
    out
}

fn join_into(slot: &mut Option<String>, piece: &str, sep: &str) {
    match slot {
        Some(s) => {
            s.push_str(sep);
            s.push_str(piece);
        }
        None => *slot = Some(piece.to_owned()),
    }
}

fn chat_body<'a>(
    target: &'a Target,
    settings: Settings<'a>,
    turns: Vec<Turn<'a>>,
    rules: &mut Rules,
) -> Vec<u8> {
    let messages = chat_messages(settings.system, turns, rules);
    let (max_tokens, max_completion_tokens) = if target.reasoning {
        (None, settings.max_tokens)
    } else {
        (settings.max_tokens, None)
    };
    let body = ChatBody {
        model: &target.model,
        messages,
        tools: settings
            .tools
            .into_iter()
            .map(|f| ChatTool {
                kind: "function",
                function: ChatFunction {
                    name: f.name,
                    description: f.description,
                    parameters: f.parameters,
                },
            })
            .collect(),
        tool_choice: settings.choice.map(|c| match c {
            Choice::Mode(m) => ChatToolChoice::Mode(m),
            Choice::Named(name) => ChatToolChoice::Named {
                kind: "function",
                function: Named { name },
            },
        }),
        parallel_tool_calls: settings.parallel_tool_calls,
        max_tokens,
        max_completion_tokens,
        temperature: settings.temperature,
        top_p: settings.top_p,
        stop: settings.stop,
        reasoning_effort: settings.effort,
        stream: settings.stream,
        stream_options: settings.stream.then_some(StreamOptions {
            include_usage: true,
        }),
    };
    to_body(&body)
}

// ---- Responses ----

#[derive(Serialize)]
struct ResponsesBody<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    instructions: Option<String>,
    input: Vec<Item<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<ResponsesTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<ResponsesToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning: Option<Reasoning<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    include: Option<[&'static str; 1]>,
    store: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
}

#[derive(Serialize)]
struct Reasoning<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    effort: Option<&'a str>,
    summary: &'static str,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Item<'a> {
    Message {
        role: &'static str,
        content: ItemContent<'a>,
    },
    FunctionCall {
        call_id: Cow<'a, str>,
        name: Cow<'a, str>,
        arguments: String,
    },
    FunctionCallOutput {
        call_id: Cow<'a, str>,
        output: ItemContent<'a>,
    },
    Reasoning {
        summary: Vec<SummaryText<'a>>,
        encrypted_content: Cow<'a, str>,
    },
}

#[derive(Serialize)]
#[serde(untagged)]
enum ItemContent<'a> {
    Text(String),
    Parts(Vec<InputPart<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type")]
enum InputPart<'a> {
    #[serde(rename = "input_text")]
    Text { text: Cow<'a, str> },
    #[serde(rename = "input_image")]
    Image {
        image_url: Cow<'a, str>,
        detail: &'static str,
    },
    #[serde(rename = "input_file")]
    File {
        #[serde(skip_serializing_if = "Option::is_none")]
        filename: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        file_data: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        file_url: Option<Cow<'a, str>>,
    },
}

#[derive(Serialize)]
struct SummaryText<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: Cow<'a, str>,
}

#[derive(Serialize)]
struct ResponsesTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: Cow<'a, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<Cow<'a, str>>,
    parameters: Schema<'a>,
    strict: bool,
}

#[derive(Serialize)]
#[serde(untagged)]
enum ResponsesToolChoice<'a> {
    Mode(&'static str),
    Named {
        #[serde(rename = "type")]
        kind: &'static str,
        name: Cow<'a, str>,
    },
}

fn input_parts(parts: Vec<Part<'_>>) -> Vec<InputPart<'_>> {
    parts
        .into_iter()
        .map(|part| match part {
            Part::Text(text) => InputPart::Text { text },
            Part::Image(image_url) => InputPart::Image {
                image_url,
                detail: "auto",
            },
            Part::Pdf(data) => InputPart::File {
                filename: Some("document.pdf"),
                file_data: Some(data),
                file_url: None,
            },
            Part::PdfUrl(url) => InputPart::File {
                filename: None,
                file_data: None,
                file_url: Some(url),
            },
        })
        .collect()
}

/// Moves `text` (consecutive assistant text) into `items` as one assistant message.
fn flush_assistant_text<'a>(text: &mut Option<String>, items: &mut Vec<Item<'a>>) {
    if let Some(t) = text.take() {
        items.push(Item::Message {
            role: "assistant",
            content: ItemContent::Text(t),
        });
    }
}

/// `s` without `prefix`, borrowed where `s` is.
fn strip_prefix_cow<'a>(s: Cow<'a, str>, prefix: &str) -> Option<Cow<'a, str>> {
    match s {
        Cow::Borrowed(b) => b.strip_prefix(prefix).map(Cow::Borrowed),
        Cow::Owned(o) => o.strip_prefix(prefix).map(|r| Cow::Owned(r.to_owned())),
    }
}

fn responses_input<'a>(turns: Vec<Turn<'a>>, rules: &mut Rules) -> Vec<Item<'a>> {
    let mut items = Vec::with_capacity(turns.len());
    for turn in turns {
        match turn {
            Turn::System(text) => items.push(Item::Message {
                role: "system",
                content: ItemContent::Parts(vec![InputPart::Text {
                    text: Cow::Owned(text),
                }]),
            }),
            Turn::User { results, parts } => {
                for r in results {
                    let output = if r.images.is_empty() {
                        ItemContent::Text(r.text)
                    } else {
                        let mut p = Vec::with_capacity(r.images.len() + 1);
                        if !r.text.is_empty() {
                            p.push(InputPart::Text {
                                text: Cow::Owned(r.text),
                            });
                        }
                        p.extend(r.images.into_iter().map(|image_url| InputPart::Image {
                            image_url,
                            detail: "auto",
                        }));
                        ItemContent::Parts(p)
                    };
                    items.push(Item::FunctionCallOutput {
                        call_id: r.id,
                        output,
                    });
                }
                if !parts.is_empty() {
                    items.push(Item::Message {
                        role: "user",
                        content: ItemContent::Parts(input_parts(parts)),
                    });
                }
            }
            Turn::Assistant(parts) => {
                let mut text: Option<String> = None;
                for part in parts {
                    match part {
                        AssistantPart::Text(t) => join_into(&mut text, &t, "\n\n"),
                        AssistantPart::Thinking { text: t, signature } => {
                            match strip_prefix_cow(signature, RESPONSES_SIGNATURE) {
                                Some(encrypted) if !encrypted.is_empty() => {
                                    flush_assistant_text(&mut text, &mut items);
                                    items.push(Item::Reasoning {
                                        summary: if t.is_empty() {
                                            Vec::new()
                                        } else {
                                            vec![SummaryText {
                                                kind: "summary_text",
                                                text: t,
                                            }]
                                        },
                                        encrypted_content: encrypted,
                                    });
                                }
                                _ => rules.add("thinking_dropped"),
                            }
                        }
                        AssistantPart::ToolUse {
                            id,
                            name,
                            arguments,
                        } => {
                            flush_assistant_text(&mut text, &mut items);
                            items.push(Item::FunctionCall {
                                call_id: id,
                                name,
                                arguments,
                            });
                        }
                    }
                }
                flush_assistant_text(&mut text, &mut items);
            }
        }
    }
    items
}

fn responses_body<'a>(
    target: &'a Target,
    settings: Settings<'a>,
    turns: Vec<Turn<'a>>,
    rules: &mut Rules,
) -> Vec<u8> {
    let input = responses_input(turns, rules);
    let reasoning = (target.reasoning || settings.effort.is_some()).then_some(Reasoning {
        effort: settings.effort,
        summary: "auto",
    });
    let body = ResponsesBody {
        model: &target.model,
        instructions: settings.system,
        input,
        tools: settings
            .tools
            .into_iter()
            .map(|f| ResponsesTool {
                kind: "function",
                name: f.name,
                description: f.description,
                parameters: f.parameters,
                strict: false,
            })
            .collect(),
        tool_choice: settings.choice.map(|c| match c {
            Choice::Mode(m) => ResponsesToolChoice::Mode(m),
            Choice::Named(name) => ResponsesToolChoice::Named {
                kind: "function",
                name,
            },
        }),
        parallel_tool_calls: settings.parallel_tool_calls,
        max_output_tokens: settings.max_tokens,
        temperature: settings.temperature,
        top_p: settings.top_p,
        include: reasoning
            .is_some()
            .then_some(["reasoning.encrypted_content"]),
        reasoning,
        store: false,
        stream: settings.stream,
    };
    to_body(&body)
}

/// Anthropic request → OpenAI request for `target`.
pub fn translate_request(req: &MessagesRequest, target: &Target) -> Result<Translated, Refusal> {
    if req.has_images && !target.supports_vision {
        return Err(Refusal::NoVision {
            model: target.model.clone(),
        });
    }
    let mut rules = Rules::default();
    let settings = read_settings(req, target, &mut rules)?;
    let messages: Vec<&RawValue> = read(req.field("messages")).unwrap_or_default();
    let messages: Vec<InMessage> = messages
        .into_iter()
        .filter_map(|m| {
            let read = serde_json::from_str(m.get()).ok();
            if read.is_none() {
                rules.add("message_dropped");
            }
            read
        })
        .collect();
    let turns = read_turns(&messages, &mut rules);
    let body = match target.dialect {
        Dialect::ChatCompletions => chat_body(target, settings, turns, &mut rules),
        Dialect::Responses => responses_body(target, settings, turns, &mut rules),
    };
    Ok(Translated {
        body,
        rules: rules.0,
    })
}
