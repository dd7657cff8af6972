//! Round trips through the proxy's translation (`claude_host_protocol::openai`) and the fake's
//! independently written other half (`claude_host_testkit::openai`), over generated
//! conversations and replies:
//!
//! - requests: Anthropic → `translate_request` → the fake's own checks of the OpenAI body →
//!   `to_anthropic` → the same conversation and settings, up to the lossy mappings
//!   docs/PROXY.md ("Other models") documents, each normalized explicitly below;
//! - replies: scripted blocks → the fake's OpenAI renderers → the bytes cut at arbitrary
//!   points → `StreamTranslator` (and `translate_response` for the JSON reply) → the same
//!   blocks, in a well-formed Anthropic stream.

use claude_host_protocol::messages::MessagesRequest;
use claude_host_protocol::openai::{
    Dialect, Step, StreamTranslator, Target, translate_request, translate_response,
};
use claude_host_protocol::sse::EventParser;
use claude_host_testkit::Block;
use claude_host_testkit::fake::default_models;
use claude_host_testkit::openai::{
    CHAT_SIGNATURE_PREFIX as CHAT_SIG, Endpoint, RESPONSES_SIGNATURE_PREFIX as RESPONSES_SIG,
    Rendering, check_request, render_reply, render_stream, summary_parts, to_anthropic,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

/// `cases` cases; no regression file (proptest finds none to sit next to in an integration
/// test's module): a failure prints its minimal case, which belongs in a unit test.
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---- Generators shared by both properties ----

/// Text as people and models write it: ASCII, what JSON escapes (quote, backslash, control
/// characters), what JavaScript does not take raw (U+2028), accents, CJK, emoji. Never `~`,
/// `^` or `` ` ``: those mark thinking whose reaching the wire (or not) is checked by
/// searching the body for them (see [`Signer`]).
fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 .,:;!?'\"\\\\/\n\r\t\u{1}\u{1f}\u{7f}\u{2028}(){}<>#*=+é日本🙂-]{1,24}"
}

/// A tool (function) name as OpenAI accepts one.
fn tool_name() -> impl Strategy<Value = String> {
    "[a-zA-Z][a-zA-Z0-9_-]{0,20}"
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        // Non-finite floats become null, which is fine too.
        any::<f64>().prop_map(Value::from),
        text().prop_map(Value::from),
        Just(Value::from("")),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(prop_oneof!["[a-z_]{1,8}", text()], inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A tool's input: an object of generated JSON values.
fn json_input() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(
        prop_oneof!["[a-zA-Z_][a-zA-Z0-9_]{0,10}", text()],
        json_value(),
        0..5,
    )
    .prop_map(|m| Value::Object(m.into_iter().collect()))
}

// ---- Requests ----

#[derive(Debug, Clone)]
enum Img {
    Base64 {
        media_type: &'static str,
        data: String,
    },
    Url(String),
}

impl Img {
    fn block(&self) -> Value {
        match self {
            Img::Base64 { media_type, data } => {
                json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}})
            }
            Img::Url(url) => json!({"type": "image", "source": {"type": "url", "url": url}}),
        }
    }
}

fn image() -> impl Strategy<Value = Img> {
    prop_oneof![
        (
            prop::sample::select(vec!["image/png", "image/jpeg", "image/gif", "image/webp"]),
            "([A-Za-z0-9+/]{4}){1,8}(==)?",
        )
            .prop_map(|(media_type, data)| Img::Base64 { media_type, data }),
        "[a-z0-9]{1,8}".prop_map(|p| Img::Url(format!("https://example.com/img/{p}.png"))),
    ]
}

/// A block of user content (also of a tool result's).
#[derive(Debug, Clone)]
enum UPart {
    Text { text: String, cached: bool },
    Image(Img),
}

impl UPart {
    fn block(&self) -> Value {
        match self {
            UPart::Text { text, cached } => {
                let mut b = json!({"type": "text", "text": text});
                if *cached {
                    b["cache_control"] = json!({"type": "ephemeral"});
                }
                b
            }
            UPart::Image(i) => i.block(),
        }
    }
}

fn upart() -> impl Strategy<Value = UPart> {
    prop_oneof![
        3 => (text(), prop::bool::weighted(0.2)).prop_map(|(text, cached)| UPart::Text { text, cached }),
        1 => image().prop_map(UPart::Image),
    ]
}

#[derive(Debug, Clone)]
enum ResultContent {
    String(String),
    Blocks(Vec<UPart>),
}

#[derive(Debug, Clone)]
struct ResultSpec {
    content: ResultContent,
    is_error: bool,
}

/// Tool output, sometimes starting with "Error: " although it is not an error (the lossy
/// side of the error mapping).
fn result_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => text(),
        1 => text().prop_map(|t| format!("Error: {t}")),
    ]
}

fn result_spec() -> impl Strategy<Value = ResultSpec> {
    // An empty output is a string (Anthropic refuses empty text blocks).
    let content = prop_oneof![
        result_text().prop_map(ResultContent::String),
        Just(ResultContent::String(String::new())),
        prop::collection::vec(
            prop_oneof![
                (result_text(), prop::bool::weighted(0.2))
                    .prop_map(|(text, cached)| UPart::Text { text, cached }),
                image().prop_map(UPart::Image),
            ],
            0..4
        )
        .prop_map(ResultContent::Blocks),
    ];
    (content, prop::bool::weighted(0.3))
        .prop_map(|(content, is_error)| ResultSpec { content, is_error })
}

/// Who signed a thinking block. Each kind's text and signature payload carry a marker
/// character no other generated text has, so that a body can be searched for what must not
/// be in it: `~` Claude's own (signed by Anthropic, or redacted), `^` Chat Completions
/// reasoning, `` ` `` Responses reasoning.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Signer {
    Anthropic,
    Redacted,
    Chat,
    Responses,
}

#[derive(Debug, Clone)]
enum ABlock {
    Text(String),
    Thinking {
        by: Signer,
        text: String,
        payload: String,
    },
    ToolUse {
        name: String,
        input: Value,
    },
}

fn thinking_block() -> impl Strategy<Value = ABlock> {
    (
        prop::sample::select(vec![
            Signer::Anthropic,
            Signer::Redacted,
            Signer::Chat,
            Signer::Responses,
        ]),
        prop_oneof![Just(String::new()), text()],
        "[A-Za-z0-9+/=]{0,16}",
    )
        .prop_map(|(by, text, payload)| {
            let mark = |s: String, m: char| {
                if s.is_empty() { s } else { format!("{m}{s}") }
            };
            let (text, payload) = match by {
                // Claude's own thinking always has text and a signature.
                Signer::Anthropic | Signer::Redacted => {
                    (format!("~{text}"), format!("Eq{payload}~"))
                }
                Signer::Chat => (mark(text, '^'), mark(payload, '^')),
                Signer::Responses => (mark(text, '`'), mark(payload, '`')),
            };
            ABlock::Thinking { by, text, payload }
        })
}

fn assistant_blocks() -> impl Strategy<Value = Vec<ABlock>> {
    prop::collection::vec(
        prop_oneof![
            3 => text().prop_map(ABlock::Text),
            2 => thinking_block(),
            2 => (tool_name(), json_input()).prop_map(|(name, input)| ABlock::ToolUse { name, input }),
        ],
        1..6,
    )
    .prop_map(|mut blocks| {
        // An assistant turn says something or calls a tool (else Chat has no message for it).
        if !blocks
            .iter()
            .any(|b| matches!(b, ABlock::Text(_) | ABlock::ToolUse { .. }))
        {
            blocks.push(ABlock::Text("Done.".into()));
        }
        blocks
    })
}

/// An assistant turn and the user turn answering it: every tool call's result (together, in
/// the calls' order or reversed), then the user's own content (at least one block when there
/// were no calls).
#[derive(Debug, Clone)]
struct Round {
    assistant: Vec<ABlock>,
    results: Vec<ResultSpec>,
    reversed: bool,
    parts: Vec<UPart>,
    as_string: bool,
}

fn round() -> impl Strategy<Value = Round> {
    (
        assistant_blocks(),
        prop::collection::vec(result_spec(), 6),
        any::<bool>(),
        prop::collection::vec(upart(), 0..3),
        any::<bool>(),
    )
        .prop_map(|(assistant, results, reversed, parts, as_string)| Round {
            assistant,
            results,
            reversed,
            parts,
            as_string,
        })
}

#[derive(Debug, Clone)]
struct ToolSpec {
    name: String,
    description: Option<String>,
    schema: Value,
    cached: bool,
}

fn schema() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(
        "[a-z_]{1,10}",
        (
            prop::sample::select(vec![
                "string", "integer", "number", "boolean", "array", "object",
            ]),
            prop::option::of(text()),
            any::<bool>(),
        ),
        0..4,
    )
    .prop_map(|props| {
        let mut properties = Map::new();
        let mut required = Vec::new();
        for (name, (kind, description, needed)) in props {
            let mut p = json!({"type": kind});
            if kind == "array" {
                p["items"] = json!({"type": "string"});
            }
            if let Some(d) = description {
                p["description"] = json!(d);
            }
            if needed {
                required.push(json!(name));
            }
            properties.insert(name, p);
        }
        json!({"type": "object", "properties": properties, "required": required,
               "$schema": "http://json-schema.org/draft-07/schema#", "additionalProperties": false})
    })
}

fn tools() -> impl Strategy<Value = Vec<ToolSpec>> {
    prop::collection::btree_set(tool_name(), 0..4).prop_flat_map(|names| {
        let n = names.len();
        (
            Just(names),
            prop::collection::vec(
                (
                    prop::option::of(text()),
                    schema(),
                    prop::bool::weighted(0.2),
                ),
                n,
            ),
        )
            .prop_map(|(names, rest)| {
                names
                    .into_iter()
                    .zip(rest)
                    .map(|(name, (description, schema, cached))| ToolSpec {
                        name,
                        description,
                        schema,
                        cached,
                    })
                    .collect()
            })
    })
}

#[derive(Debug, Clone)]
enum System {
    String(String),
    Blocks(Vec<(String, bool)>),
}

#[derive(Debug, Clone, Copy)]
enum Choice {
    Auto,
    Any,
    None,
    Tool(usize),
}

#[derive(Debug, Clone, Copy)]
enum Thinking {
    Enabled(u64),
    Adaptive,
    Disabled,
}

const EFFORTS: [&str; 7] = ["none", "minimal", "low", "medium", "high", "xhigh", "max"];

#[derive(Debug, Clone)]
struct Settings {
    system: Option<System>,
    tools: Vec<ToolSpec>,
    choice: Option<(Choice, bool)>,
    temperature: Option<u8>,
    top_p: Option<u8>,
    max_tokens: u64,
    stop: Option<Vec<String>>,
    thinking: Option<Thinking>,
    effort: Option<&'static str>,
    top_k: Option<u32>,
    metadata: bool,
    stream: bool,
}

fn settings() -> impl Strategy<Value = Settings> {
    let system = prop::option::of(prop_oneof![
        text().prop_map(System::String),
        prop::collection::vec((text(), prop::bool::weighted(0.3)), 1..3).prop_map(System::Blocks),
    ]);
    let choice = prop::option::of((
        prop_oneof![
            Just(Choice::Auto),
            Just(Choice::Any),
            Just(Choice::None),
            (0usize..8).prop_map(Choice::Tool),
        ],
        any::<bool>(),
    ));
    let thinking = prop::option::of(prop_oneof![
        (1024u64..40_000).prop_map(Thinking::Enabled),
        Just(Thinking::Adaptive),
        Just(Thinking::Disabled),
    ]);
    (
        (system, tools(), choice),
        (
            prop::option::of(0u8..=10),
            prop::option::of(0u8..=10),
            prop_oneof![1u64..16, 16u64..20_000, 20_000u64..200_000],
            prop::option::of(prop::collection::vec("[a-zA-Z#\n]{1,6}", 0..7)),
        ),
        (
            thinking,
            prop::option::of(prop::sample::select(EFFORTS.to_vec())),
            prop::option::of(1u32..500),
            any::<bool>(),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (system, tools, choice),
                (temperature, top_p, max_tokens, stop),
                (thinking, effort, top_k, metadata, stream),
            )| Settings {
                system,
                tools,
                choice,
                temperature,
                top_p,
                max_tokens,
                stop,
                thinking,
                effort,
                top_k,
                metadata,
                stream,
            },
        )
}

#[derive(Debug, Clone)]
struct Conversation {
    settings: Settings,
    prompt: Vec<UPart>,
    prompt_as_string: bool,
    rounds: Vec<Round>,
    /// A `role: "system"` message after the last user message (where Claude Code's prompt
    /// hook puts its marker).
    hook: Option<String>,
}

fn conversation() -> impl Strategy<Value = Conversation> {
    (
        settings(),
        prop::collection::vec(upart(), 1..3),
        any::<bool>(),
        prop::collection::vec(round(), 0..4),
        prop::option::weighted(0.2, text()),
    )
        .prop_map(
            |(settings, prompt, prompt_as_string, rounds, hook)| Conversation {
                settings,
                prompt,
                prompt_as_string,
                rounds,
                hook,
            },
        )
}

/// A user message's content: one text block may go as a plain string.
fn user_content(parts: &[UPart], as_string: bool) -> Value {
    match parts {
        [
            UPart::Text {
                text,
                cached: false,
            },
        ] if as_string => json!(text),
        _ => Value::Array(parts.iter().map(UPart::block).collect()),
    }
}

impl Conversation {
    /// The Anthropic request body.
    fn body(&self) -> Value {
        let s = &self.settings;
        let mut messages = vec![
            json!({"role": "user", "content": user_content(&self.prompt, self.prompt_as_string)}),
        ];
        let mut next_id = 0;
        for (r, round) in self.rounds.iter().enumerate() {
            let mut calls = Vec::new();
            let content: Vec<Value> = round
                .assistant
                .iter()
                .map(|b| match b {
                    ABlock::Text(t) => json!({"type": "text", "text": t}),
                    ABlock::Thinking {
                        by: Signer::Redacted,
                        text,
                        payload,
                    } => json!({"type": "redacted_thinking", "data": format!("{text}{payload}")}),
                    ABlock::Thinking { by, text, payload } => {
                        let signature = match by {
                            Signer::Chat => format!("{CHAT_SIG}{payload}"),
                            Signer::Responses => format!("{RESPONSES_SIG}{payload}"),
                            _ => payload.clone(),
                        };
                        json!({"type": "thinking", "thinking": text, "signature": signature})
                    }
                    ABlock::ToolUse { name, input } => {
                        next_id += 1;
                        let id = format!("toolu_{r}{next_id:02}x");
                        calls.push(id.clone());
                        json!({"type": "tool_use", "id": id, "name": name, "input": input})
                    }
                })
                .collect();
            messages.push(json!({"role": "assistant", "content": content}));
            let mut answers: Vec<Value> = calls
                .iter()
                .zip(&round.results)
                .map(|(id, spec)| {
                    let content = match &spec.content {
                        ResultContent::String(s) => json!(s),
                        ResultContent::Blocks(b) => {
                            Value::Array(b.iter().map(UPart::block).collect())
                        }
                    };
                    let mut block =
                        json!({"type": "tool_result", "tool_use_id": id, "content": content});
                    if spec.is_error {
                        block["is_error"] = json!(true);
                    }
                    block
                })
                .collect();
            if round.reversed {
                answers.reverse();
            }
            let mut parts = round.parts.clone();
            if calls.is_empty() && parts.is_empty() {
                parts.push(UPart::Text {
                    text: "Go on.".into(),
                    cached: false,
                });
            }
            let content = if answers.is_empty() {
                user_content(&parts, round.as_string)
            } else {
                answers.extend(parts.iter().map(UPart::block));
                Value::Array(answers)
            };
            messages.push(json!({"role": "user", "content": content}));
        }
        if let Some(hook) = &self.hook {
            messages.push(json!({"role": "system", "content": hook}));
        }
        let mut body =
            json!({"model": "claude-sonnet-4-5", "max_tokens": s.max_tokens, "messages": messages});
        match &s.system {
            Some(System::String(t)) => body["system"] = json!(t),
            Some(System::Blocks(b)) => {
                body["system"] = b
                    .iter()
                    .map(|(t, cached)| UPart::Text {
                        text: t.clone(),
                        cached: *cached,
                    })
                    .map(|p| p.block())
                    .collect();
            }
            None => {}
        }
        if !s.tools.is_empty() {
            body["tools"] = s
                .tools
                .iter()
                .map(|t| {
                    let mut tool = json!({"name": t.name, "input_schema": t.schema});
                    if let Some(d) = &t.description {
                        tool["description"] = json!(d);
                    }
                    if t.cached {
                        tool["cache_control"] = json!({"type": "ephemeral"});
                    }
                    tool
                })
                .collect();
        }
        if let Some((choice, disable)) = s.choice {
            let mut c = match choice {
                Choice::Auto => json!({"type": "auto"}),
                Choice::Any => json!({"type": "any"}),
                Choice::None => json!({"type": "none"}),
                Choice::Tool(i) => {
                    let name = s
                        .tools
                        .get(i % s.tools.len().max(1))
                        .map_or("Read", |t| t.name.as_str());
                    json!({"type": "tool", "name": name})
                }
            };
            if disable {
                c["disable_parallel_tool_use"] = json!(true);
            }
            body["tool_choice"] = c;
        }
        if let Some(t) = s.temperature {
            body["temperature"] = json!(f64::from(t) / 10.0);
        }
        if let Some(p) = s.top_p {
            body["top_p"] = json!(f64::from(p) / 10.0);
        }
        if let Some(stop) = &s.stop {
            body["stop_sequences"] = json!(stop);
        }
        match s.thinking {
            Some(Thinking::Enabled(b)) => {
                body["thinking"] = json!({"type": "enabled", "budget_tokens": b});
            }
            Some(Thinking::Adaptive) => body["thinking"] = json!({"type": "adaptive"}),
            Some(Thinking::Disabled) => body["thinking"] = json!({"type": "disabled"}),
            None => {}
        }
        if let Some(e) = s.effort {
            body["output_config"] = json!({"effort": e});
        }
        if let Some(k) = s.top_k {
            body["top_k"] = json!(k);
        }
        if s.metadata {
            body["metadata"] = json!({"user_id": "user_0123"});
        }
        if s.stream {
            body["stream"] = json!(true);
        }
        body
    }

    fn has_cache_control(&self) -> bool {
        let s = &self.settings;
        let cached = |p: &UPart| matches!(p, UPart::Text { cached: true, .. });
        matches!(&s.system, Some(System::Blocks(b)) if b.iter().any(|(_, c)| *c))
            || s.tools.iter().any(|t| t.cached)
            || self.prompt.iter().any(cached)
            || self.rounds.iter().any(|r| {
                r.parts.iter().any(cached)
                    || r.results.iter().take(calls_in(&r.assistant)).any(|spec| {
                        matches!(&spec.content, ResultContent::Blocks(b) if b.iter().any(cached))
                    })
            })
    }
}

fn calls_in(blocks: &[ABlock]) -> usize {
    blocks
        .iter()
        .filter(|b| matches!(b, ABlock::ToolUse { .. }))
        .count()
}

// ---- Conversations in a neutral form, to compare both sides ----

#[derive(Debug, Clone, PartialEq)]
enum Item {
    Text(String),
    /// An image's `source` object.
    Image(Value),
    Result {
        id: String,
        text: String,
        error: bool,
        images: Vec<Value>,
    },
    Thinking {
        text: String,
        signature: String,
    },
    Redacted(String),
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    /// Anything else (which neither side should write).
    Other(Value),
}

#[derive(Debug, Clone, PartialEq)]
struct Msg {
    role: String,
    items: Vec<Item>,
}

fn str_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// Anthropic `messages` (a request's, or what `to_anthropic` made) in the neutral form: a
/// string content is one text block; a tool result's text is its text blocks joined with
/// "\n" (as the forward translation joins them: both APIs take one text per result).
fn neutral(messages: &Value) -> Vec<Msg> {
    let blocks = |content: &Value| -> Vec<Value> {
        match content {
            Value::String(s) => vec![json!({"type": "text", "text": s})],
            Value::Array(a) => a.clone(),
            other => vec![other.clone()],
        }
    };
    messages
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| Msg {
            role: str_of(&m["role"]),
            items: blocks(&m["content"])
                .iter()
                .map(|b| match b["type"].as_str().unwrap_or_default() {
                    "text" => Item::Text(str_of(&b["text"])),
                    "image" => Item::Image(b["source"].clone()),
                    "tool_result" => {
                        let inner = blocks(&b["content"]);
                        let texts: Vec<String> = inner
                            .iter()
                            .filter(|i| i["type"] == "text")
                            .map(|i| str_of(&i["text"]))
                            .collect();
                        Item::Result {
                            id: str_of(&b["tool_use_id"]),
                            text: texts.join("\n"),
                            error: b["is_error"] == true,
                            images: inner
                                .iter()
                                .filter(|i| i["type"] == "image")
                                .map(|i| i["source"].clone())
                                .collect(),
                        }
                    }
                    "thinking" => Item::Thinking {
                        text: str_of(&b["thinking"]),
                        signature: str_of(&b["signature"]),
                    },
                    "redacted_thinking" => Item::Redacted(str_of(&b["data"])),
                    "tool_use" => Item::ToolUse {
                        id: str_of(&b["id"]),
                        name: str_of(&b["name"]),
                        input: b["input"].clone(),
                    },
                    _ => Item::Other(b.clone()),
                })
                .collect(),
        })
        .collect()
}

/// What should come back of a request's `messages` through `dialect`, by the documented
/// (lossy) mappings. A tool result's images need no normalizing: Chat Completions sends them
/// in a user message after the tool messages (led by "Image from tool result ID:", a `tool`
/// message takes text only, as `check_request` enforces), and the fake puts them back into
/// their result; its user message after the results joins the same Anthropic user turn.
fn expected_messages(dialect: Dialect, original: Vec<Msg>) -> Vec<Msg> {
    original
        .into_iter()
        .map(|m| {
            let items = if m.role == "assistant" {
                match dialect {
                    Dialect::ChatCompletions => chat_assistant(m.items),
                    Dialect::Responses => responses_assistant(m.items),
                }
            } else {
                m.items.into_iter().map(error_mapping).collect()
            };
            Msg {
                role: m.role,
                items,
            }
        })
        .collect()
}

/// Neither API marks a tool result as failed: the text goes out prefixed "Error: ", and the
/// fake reads any result starting so as an error (a successful result whose text starts
/// "Error: " comes back as a failed one without the prefix).
fn error_mapping(item: Item) -> Item {
    match item {
        Item::Result {
            id,
            text,
            error,
            images,
        } => {
            let wire = if error {
                format!("Error: {text}")
            } else {
                text
            };
            let (text, error) = match wire.strip_prefix("Error: ") {
                Some(rest) => (rest.to_owned(), true),
                None => (wire, false),
            };
            Item::Result {
                id,
                text,
                error,
                images,
            }
        }
        other => other,
    }
}

/// A Chat Completions assistant message has one content, one reasoning and its tool calls:
/// the texts are joined with "\n\n", the thinking blocks signed `claude-host:chat:` become one
/// (texts joined with "\n\n", opaque payloads concatenated) which the fake puts first, every
/// other thinking block (Claude's, redacted, Responses') is dropped.
fn chat_assistant(items: Vec<Item>) -> Vec<Item> {
    let (mut reasoning, mut opaque, mut texts, mut calls) =
        (Vec::new(), String::new(), Vec::new(), Vec::new());
    for item in items {
        match item {
            Item::Text(t) => texts.push(t),
            Item::Thinking { text, signature } => {
                if let Some(payload) = signature.strip_prefix(CHAT_SIG) {
                    if !text.is_empty() {
                        reasoning.push(text);
                    }
                    opaque.push_str(payload);
                }
            }
            Item::Redacted(_) => {}
            call => calls.push(call),
        }
    }
    let mut out = Vec::new();
    if !reasoning.is_empty() || !opaque.is_empty() {
        out.push(Item::Thinking {
            text: reasoning.join("\n\n"),
            signature: format!("{CHAT_SIG}{opaque}"),
        });
    }
    if !texts.is_empty() {
        out.push(Item::Text(texts.join("\n\n")));
    }
    out.extend(calls);
    out
}

/// Responses keeps the order of an assistant turn's items: thinking signed
/// `claude-host:responses:` with a payload is a reasoning item, every other thinking block is
/// dropped, and consecutive texts (with dropped thinking between them) are one assistant
/// message, joined with "\n\n".
fn responses_assistant(items: Vec<Item>) -> Vec<Item> {
    let mut out: Vec<Item> = Vec::new();
    for item in items {
        match item {
            Item::Text(t) => match out.last_mut() {
                Some(Item::Text(prev)) => {
                    prev.push_str("\n\n");
                    prev.push_str(&t);
                }
                _ => out.push(Item::Text(t)),
            },
            Item::Thinking { text, signature } => {
                if signature
                    .strip_prefix(RESPONSES_SIG)
                    .is_some_and(|p| !p.is_empty())
                {
                    out.push(Item::Thinking { text, signature });
                }
            }
            Item::Redacted(_) => {}
            other => out.push(other),
        }
    }
    out
}

/// `fit_effort`'s documented rule: the level itself when offered, else the highest offered
/// below it, else the lowest offered.
fn fit_effort(asked: &str, offered: &[String]) -> Option<String> {
    if offered.iter().any(|o| o == asked) {
        return Some(asked.to_owned());
    }
    let rank = |l: &str| EFFORTS.iter().position(|e| *e == l);
    let asked_rank = rank(asked)?;
    let ranked = || offered.iter().filter_map(|l| rank(l).map(|r| (r, l)));
    ranked()
        .filter(|(r, _)| *r <= asked_rank)
        .max_by_key(|(r, _)| *r)
        .or_else(|| ranked().min_by_key(|(r, _)| *r))
        .map(|(_, l)| l.clone())
}

/// The translation's target for a catalog entry, as the proxy builds it.
fn target(entry: &Value, dialect: Dialect) -> Target {
    let supports = &entry["capabilities"]["supports"];
    let effort_levels: Vec<String> = supports["reasoning_effort"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    Target {
        model: str_of(&entry["id"]),
        dialect,
        max_output_tokens: entry["capabilities"]["limits"]["max_output_tokens"].as_u64(),
        supports_vision: supports["vision"] == true,
        reasoning: !effort_levels.is_empty(),
        effort_levels,
    }
}

/// Models of the fake's catalog and the API each is driven on: Responses and Chat
/// Completions, with and without reasoning effort, different output limits.
const TARGETS: [(&str, Dialect); 5] = [
    ("gpt-5.4", Dialect::Responses),
    ("gpt-5-mini", Dialect::Responses),
    ("gpt-5-mini", Dialect::ChatCompletions),
    ("gpt-4.1", Dialect::ChatCompletions),
    ("gemini-3.1-pro", Dialect::ChatCompletions),
];

/// Everything `to_anthropic` should give back besides `messages`, by the documented
/// mappings, and the rules (`adapted=`) the translation must name.
fn expected_rest(conv: &Conversation, t: &Target) -> (Map<String, Value>, BTreeSet<&'static str>) {
    let s = &conv.settings;
    let responses = t.dialect == Dialect::Responses;
    let mut rest = Map::new();
    let mut rules = BTreeSet::new();
    rest.insert("model".into(), json!(t.model));
    if s.stream {
        rest.insert("stream".into(), json!(true));
    }
    // The system prompt: text blocks joined with "\n\n"; an empty one is not sent.
    let system = match &s.system {
        Some(System::String(t)) => t.clone(),
        Some(System::Blocks(b)) => b
            .iter()
            .map(|(t, _)| t.as_str())
            .collect::<Vec<_>>()
            .join("\n\n"),
        None => String::new(),
    };
    if !system.is_empty() {
        rest.insert("system".into(), json!(system));
    }
    // max_tokens: clamped to the model's limit, raised to Responses' minimum of 16.
    let limit = t.max_output_tokens.unwrap_or(u64::MAX);
    let max = if s.max_tokens > limit {
        rules.insert("max_tokens_clamped");
        limit
    } else if responses && s.max_tokens < 16 {
        rules.insert("max_tokens_raised");
        16
    } else {
        s.max_tokens
    };
    rest.insert("max_tokens".into(), json!(max));
    // Sampling: reasoning models take none.
    for (key, v) in [("temperature", s.temperature), ("top_p", s.top_p)] {
        if let Some(v) = v {
            if t.reasoning {
                rules.insert("sampling_dropped");
            } else {
                rest.insert(key.into(), json!(f64::from(v) / 10.0));
            }
        }
    }
    // Stop sequences: Responses has none; Chat takes at most 4.
    match &s.stop {
        Some(stop) if responses && !stop.is_empty() => {
            rules.insert("stop_sequences_dropped");
        }
        Some(stop) if !stop.is_empty() => {
            if stop.len() > 4 {
                rules.insert("stop_sequences_cut");
            }
            rest.insert("stop_sequences".into(), json!(stop[..stop.len().min(4)]));
        }
        _ => {}
    }
    // Effort: output_config's, else one read from thinking, fitted to the model's levels.
    let (asked, from_thinking) = match (s.effort, s.thinking) {
        (Some(e), _) => (Some(e), false),
        (None, Some(Thinking::Enabled(b))) => (
            Some(if b < 8000 {
                "low"
            } else if b < 24_000 {
                "medium"
            } else {
                "high"
            }),
            true,
        ),
        (None, Some(Thinking::Adaptive)) => (Some("medium"), true),
        _ => (None, false),
    };
    let effort = asked.and_then(|a| fit_effort(a, &t.effort_levels));
    if let (Some(a), Some(e)) = (asked, &effort) {
        if a != e {
            rules.insert("effort_mapped");
        }
        rest.insert("output_config".into(), json!({"effort": e}));
    }
    if s.thinking.is_some() {
        rules.insert(if from_thinking && effort.is_some() {
            "thinking_to_effort"
        } else {
            "thinking_dropped"
        });
    }
    if s.effort.is_some() && effort.is_none() {
        rules.insert("output_config_dropped");
    }
    // Tools: name, description and schema as sent.
    if !s.tools.is_empty() {
        let tools: Vec<Value> = s
            .tools
            .iter()
            .map(|t| {
                let mut tool = json!({"name": t.name, "input_schema": t.schema});
                if let Some(d) = &t.description {
                    tool["description"] = json!(d);
                }
                tool
            })
            .collect();
        rest.insert("tools".into(), Value::Array(tools));
    }
    // tool_choice: any ↔ required; disable_parallel_tool_use ↔ parallel_tool_calls: false
    // (which the fake reads as `auto` when there is no choice of its own). None without tools.
    if let Some((choice, disable)) = s.choice {
        if s.tools.is_empty() {
            rules.insert("tool_choice_dropped");
        } else {
            let mut c = match choice {
                Choice::Auto => json!({"type": "auto"}),
                Choice::Any => json!({"type": "any"}),
                Choice::None => json!({"type": "none"}),
                Choice::Tool(i) => json!({"type": "tool", "name": s.tools[i % s.tools.len()].name}),
            };
            if disable {
                c["disable_parallel_tool_use"] = json!(true);
            }
            rest.insert("tool_choice".into(), c);
        }
    }
    if s.top_k.is_some() {
        rules.insert("top_k_dropped");
    }
    if s.metadata {
        rules.insert("metadata_dropped");
    }
    if conv.has_cache_control() {
        rules.insert("cache_control_dropped");
    }
    // Thinking another model (or Claude) signed cannot be read by this one.
    let own = if responses {
        Signer::Responses
    } else {
        Signer::Chat
    };
    let foreign = conv
        .rounds
        .iter()
        .flat_map(|r| &r.assistant)
        .any(|b| match b {
            ABlock::Thinking { by, payload, .. } => *by != own || (responses && payload.is_empty()),
            _ => false,
        });
    if foreign {
        rules.insert("thinking_dropped");
    }
    (rest, rules)
}

fn round_trip_request(
    conv: &Conversation,
    body: &Value,
    req: &MessagesRequest,
    model: &str,
    dialect: Dialect,
) -> Result<(), TestCaseError> {
    let entry = default_models()
        .into_iter()
        .find(|m| m["id"] == model)
        .ok_or_else(|| TestCaseError::fail(format!("{model} is not in the fake's catalog")))?;
    let t = target(&entry, dialect);
    let (endpoint, other_mark) = match dialect {
        Dialect::ChatCompletions => (Endpoint::ChatCompletions, '`'),
        Dialect::Responses => (Endpoint::Responses, '^'),
    };
    let translated = translate_request(req, &t)
        .map_err(|r| TestCaseError::fail(format!("{model} refused: {r}")))?;
    let raw = String::from_utf8(translated.body.clone())
        .map_err(|e| TestCaseError::fail(format!("body not UTF-8: {e}")))?;
    let wire: Value = serde_json::from_str(&raw)
        .map_err(|e| TestCaseError::fail(format!("body not JSON: {e}: {raw}")))?;
    // The body is one the real API takes (async-openai's types, no unknown parameter,
    // OpenAI's and Copilot's refusals). Among them: a Chat `tool` message carries text only,
    // which is why a tool result's images go in a user message after the tool messages.
    if let Err(refusal) = check_request(endpoint, &entry, &wire) {
        return Err(TestCaseError::fail(format!("{model}: {refusal}\n{raw}")));
    }
    // What is documented as dropped never reaches the wire: Claude's own thinking (signed by
    // Anthropic, or redacted), the other API's reasoning, top_k and metadata.
    prop_assert!(
        !raw.contains('~'),
        "Claude's thinking reached {}: {}",
        model,
        raw
    );
    prop_assert!(
        !raw.contains(other_mark),
        "the other API's reasoning reached {}: {}",
        model,
        raw
    );
    prop_assert!(wire.get("top_k").is_none() && wire.get("metadata").is_none());

    let back = to_anthropic(endpoint, &wire);
    let mut rest = back.as_object().cloned().unwrap_or_default();
    let messages = rest.remove("messages").unwrap_or(Value::Null);
    prop_assert_eq!(
        neutral(&messages),
        expected_messages(dialect, neutral(&body["messages"])),
        "{} ({:?}): messages differ; wire: {}",
        model,
        dialect,
        raw
    );
    let (want_rest, want_rules) = expected_rest(conv, &t);
    prop_assert_eq!(
        Value::Object(rest),
        Value::Object(want_rest),
        "{} ({:?}): settings differ; wire: {}",
        model,
        dialect,
        raw
    );
    let rules: BTreeSet<&str> = translated.rules.iter().copied().collect();
    prop_assert_eq!(rules.len(), translated.rules.len(), "a rule named twice");
    prop_assert_eq!(
        rules,
        want_rules,
        "{} ({:?}): adapted= rules",
        model,
        dialect
    );
    Ok(())
}

proptest! {
    #![proptest_config(config(64))]

    /// Anthropic → OpenAI (each model and API of the fake's catalog) → Anthropic keeps the
    /// conversation: roles and texts, images, tool calls (ids, names, inputs as JSON values),
    /// tool results (ids, texts, error-ness, images), the model's own reasoning with its
    /// payload, tools, tool_choice, sampling, limits and effort; and drops exactly what is
    /// documented as dropped.
    #[test]
    fn requests_survive_a_round_trip_through_either_api(conv in conversation(), pretty in any::<bool>()) {
        let body = conv.body();
        // JSON as it travels (compact, or with whitespace everywhere JSON allows it, which
        // the translation reads raw): the expected values are read back from the bytes sent.
        let bytes = if pretty {
            serde_json::to_vec_pretty(&body).unwrap()
        } else {
            serde_json::to_vec(&body).unwrap()
        };
        let body: Value = serde_json::from_slice(&bytes).unwrap();
        let req = MessagesRequest::parse(&bytes).unwrap();
        for (model, dialect) in TARGETS {
            round_trip_request(&conv, &body, &req, model, dialect)?;
        }
    }
}

// ---- Replies ----

fn reply_block() -> impl Strategy<Value = Block> {
    prop_oneof![
        // Deltas may be empty (as a Chat stream's first content is).
        3 => prop::collection::vec(prop_oneof![4 => text(), 1 => Just(String::new())], 1..4)
            .prop_map(Block::Text),
        2 => (
            prop_oneof![
                // Reasoning may come as an encrypted payload only.
                1 => Just(String::new()),
                4 => text(),
                2 => (text(), text()).prop_map(|(a, b)| format!("{a}\n\n{b}")),
            ],
            "[A-Za-z0-9+/=]{1,40}",
        )
            .prop_map(|(thinking, signature)| Block::Thinking { thinking, signature }),
        2 => (tool_name(), json_input()).prop_map(|(name, input)| Block::ToolUse { name, input }),
    ]
}

#[derive(Debug, Clone)]
struct ReplySpec {
    blocks: Vec<Block>,
    stop_reason: &'static str,
    prompt_tokens: u64,
    cached_tokens: u64,
    usage_in_finish: bool,
    request_number: u64,
    /// Where the bytes of the stream are cut (positions modulo its length).
    cuts: Vec<usize>,
}

fn reply_spec() -> impl Strategy<Value = ReplySpec> {
    (
        prop::collection::vec(reply_block(), 0..6),
        0usize..3,
        (0u64..200_000, 0u64..=100),
        any::<bool>(),
        0u64..1000,
        prop::collection::vec(any::<usize>(), 0..40),
    )
        .prop_map(|(blocks, stop, (prompt, pct), usage_in_finish, n, cuts)| {
            let tools = blocks.iter().any(|b| matches!(b, Block::ToolUse { .. }));
            let text = blocks
                .iter()
                .any(|b| matches!(b, Block::Text(d) if !d.concat().is_empty()));
            // A stop reason the reply can have: tool calls end with tool_use (or stop, as
            // Copilot's models often finish them) or max_tokens; a refusal says something
            // and calls nothing.
            let choices: &[&'static str] = if tools {
                &["tool_use", "end_turn", "max_tokens"]
            } else if text {
                &["end_turn", "refusal", "max_tokens"]
            } else {
                &["end_turn", "max_tokens", "end_turn"]
            };
            ReplySpec {
                stop_reason: choices[stop],
                prompt_tokens: prompt,
                cached_tokens: prompt * pct / 100,
                usage_in_finish,
                request_number: n,
                blocks,
                cuts,
            }
        })
}

impl ReplySpec {
    fn rendering(&self) -> Rendering<'_> {
        Rendering {
            model: "gpt-upstream",
            request_number: self.request_number,
            prompt_tokens: self.prompt_tokens,
            cached_tokens: self.cached_tokens,
            chat_usage_in_finish: self.usage_in_finish,
        }
    }

    fn call_id(&self, block_index: usize) -> String {
        format!("call_fake_{}_{block_index}", self.request_number)
    }

    /// The stop reason that comes back: a finish reason says less than Anthropic's (tool
    /// calls finished with `stop` are `tool_use`).
    fn expected_stop(&self) -> &'static str {
        match self.stop_reason {
            "refusal" | "max_tokens" => self.stop_reason,
            _ if self
                .blocks
                .iter()
                .any(|b| matches!(b, Block::ToolUse { .. })) =>
            {
                "tool_use"
            }
            _ => "end_turn",
        }
    }

    /// The content blocks a client should assemble from the translated stream.
    fn expected_stream_content(&self, dialect: Dialect) -> Vec<Value> {
        match dialect {
            Dialect::Responses => self.responses_content(),
            Dialect::ChatCompletions => self.chat_stream_content(),
        }
    }

    /// Responses: one block per output item, in order. A message with no text makes no
    /// block. The reasoning summary comes in parts (the fake splits a thinking text in two),
    /// which the translation joins with "\n\n".
    fn responses_content(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for (i, b) in self.blocks.iter().enumerate() {
            match b {
                Block::Text(d) if d.concat().is_empty() => {}
                Block::Text(d) => out.push(json!({"type": "text", "text": d.concat()})),
                Block::Thinking {
                    thinking,
                    signature,
                } => {
                    let parts: Vec<String> = summary_parts(thinking)
                        .into_iter()
                        .filter(|p| !p.is_empty())
                        .collect();
                    out.push(json!({"type": "thinking", "thinking": parts.join("\n\n"),
                        "signature": format!("{RESPONSES_SIG}{signature}")}));
                }
                Block::ToolUse { name, input } => out.push(
                    json!({"type": "tool_use", "id": self.call_id(i), "name": name, "input": input}),
                ),
            }
        }
        out
    }

    /// Chat Completions streams content and reasoning as fields of one message, so blocks
    /// of a kind that follow each other are one: consecutive texts are one text (empty ones
    /// vanish), consecutive thinking one thinking (texts and opaque payloads concatenated).
    /// Reasoning with no text is only an opaque payload: it joins the thinking just before
    /// it, stands alone when it comes first, and otherwise (its block closed) goes to one
    /// thinking block with no text at the end, as documented.
    fn chat_stream_content(&self) -> Vec<Value> {
        let mut out: Vec<Value> = Vec::new();
        let mut late = String::new();
        for (i, b) in self.blocks.iter().enumerate() {
            let first = out.is_empty();
            let last = out.last_mut().filter(|l| l["type"] != "tool_use");
            let append = |block: &mut Value, key: &str, more: &str| {
                block[key] = json!(format!("{}{more}", block[key].as_str().unwrap_or_default()));
            };
            match b {
                Block::Text(d) if d.concat().is_empty() => {}
                Block::Text(d) => match last.filter(|l| l["type"] == "text") {
                    Some(l) => append(l, "text", &d.concat()),
                    None => out.push(json!({"type": "text", "text": d.concat()})),
                },
                Block::Thinking {
                    thinking,
                    signature,
                } => match last.filter(|l| l["type"] == "thinking") {
                    Some(l) => {
                        append(l, "thinking", thinking);
                        append(l, "signature", signature);
                    }
                    None if thinking.is_empty() && !first => late.push_str(signature),
                    None => out.push(json!({"type": "thinking", "thinking": thinking,
                        "signature": format!("{CHAT_SIG}{signature}")})),
                },
                Block::ToolUse { name, input } => out.push(
                    json!({"type": "tool_use", "id": self.call_id(i), "name": name, "input": input}),
                ),
            }
        }
        if !late.is_empty() {
            out.push(json!({"type": "thinking", "thinking": "", "signature": format!("{CHAT_SIG}{late}")}));
        }
        out
    }

    /// The content of the translated JSON reply.
    fn expected_json_content(&self, dialect: Dialect) -> Vec<Value> {
        match dialect {
            Dialect::Responses => self.expected_stream_content(dialect),
            // A chat.completion is one message: the fake sends the first thinking block as
            // its reasoning and every text as one content; the translation writes thinking,
            // text, then the tool calls.
            Dialect::ChatCompletions => {
                let mut out = Vec::new();
                if let Some(Block::Thinking {
                    thinking,
                    signature,
                }) = self
                    .blocks
                    .iter()
                    .find(|b| matches!(b, Block::Thinking { .. }))
                {
                    out.push(json!({"type": "thinking", "thinking": thinking,
                        "signature": format!("{CHAT_SIG}{signature}")}));
                }
                let text: String = self
                    .blocks
                    .iter()
                    .filter_map(|b| match b {
                        Block::Text(d) => Some(d.concat()),
                        _ => None,
                    })
                    .collect();
                if !text.is_empty() {
                    out.push(json!({"type": "text", "text": text}));
                }
                for (i, b) in self.blocks.iter().enumerate() {
                    if let Block::ToolUse { name, input } = b {
                        out.push(json!({"type": "tool_use", "id": self.call_id(i), "name": name, "input": input}));
                    }
                }
                out
            }
        }
    }
}

/// `bytes` cut at `cuts` (modulo its length, so anywhere: inside an event, a line, a UTF-8
/// character).
fn cut(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    at.extend([0, bytes.len()]);
    at.sort_unstable();
    at.dedup();
    at.windows(2).map(|w| bytes[w[0]..w[1]].to_vec()).collect()
}

/// Feeds `pieces` of an upstream stream to a translator, event by event as the relay does;
/// the Anthropic bytes written.
fn translate_stream(dialect: Dialect, pieces: &[Vec<u8>]) -> Result<Vec<u8>, TestCaseError> {
    let mut t = StreamTranslator::new(dialect, "claude-client-model");
    let mut parser = EventParser::new();
    let mut out = bytes::BytesMut::new();
    let mut step = Step::Continue;
    for piece in pieces {
        parser.push(piece);
        while let Some(e) = parser.next_event() {
            prop_assert_eq!(
                &step,
                &Step::Continue,
                "an upstream event after the end: {:?}",
                e
            );
            let name = (!e.name.is_empty()).then_some(e.name.as_bytes());
            step = t.push(name, e.data.as_bytes(), &mut out);
            prop_assert!(
                !matches!(step, Step::Failed(_)),
                "failed at {:?}: {:?}",
                e,
                step
            );
        }
    }
    prop_assert!(
        parser.pending().is_empty(),
        "a partial upstream event is left"
    );
    if step == Step::Continue {
        step = t.end_of_stream(&mut out);
    }
    prop_assert_eq!(step, Step::Done);
    Ok(out.to_vec())
}

/// A translated message: its content blocks as a client assembles them, the stop reason and
/// the final usage.
struct Assembled {
    content: Vec<Value>,
    stop_reason: Value,
    usage: Value,
}

/// Reads an Anthropic stream, checking its shape on the way: one `message_start` first;
/// blocks with sequential indices, each started, given deltas of its own kind only while
/// open, and stopped before the next starts; one `message_delta` with no block open; one
/// `message_stop`, last.
fn assemble(out: &[u8]) -> Result<Assembled, TestCaseError> {
    let mut parser = EventParser::new();
    parser.push(out);
    let mut events = Vec::new();
    while let Some(e) = parser.next_event() {
        let data: Value = serde_json::from_str(&e.data)
            .map_err(|err| TestCaseError::fail(format!("not JSON ({err}): {}", e.data)))?;
        prop_assert_eq!(
            &data["type"],
            &json!(e.name),
            "the event's name is not its type"
        );
        events.push(data);
    }
    prop_assert!(parser.pending().is_empty(), "a partial event was written");
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or_default())
        .collect();
    prop_assert_eq!(kinds.first(), Some(&"message_start"), "{:?}", kinds);
    prop_assert_eq!(kinds.last(), Some(&"message_stop"), "{:?}", kinds);
    prop_assert_eq!(kinds.iter().filter(|k| **k == "message_start").count(), 1);
    prop_assert_eq!(kinds.iter().filter(|k| **k == "message_stop").count(), 1);
    prop_assert_eq!(kinds.iter().filter(|k| **k == "message_delta").count(), 1);
    prop_assert_eq!(kinds[kinds.len() - 2], "message_delta");
    let start = &events[0]["message"];
    prop_assert_eq!(&start["model"], "claude-client-model");
    prop_assert!(start["usage"].is_object(), "message_start has no usage");

    let mut content: Vec<Value> = Vec::new();
    let mut open: Option<usize> = None;
    let mut partial_json = String::new();
    let mut end = None;
    for e in &events[1..events.len() - 1] {
        match e["type"].as_str().unwrap_or_default() {
            "content_block_start" => {
                prop_assert!(
                    open.is_none(),
                    "a block started while another is open: {}",
                    e
                );
                prop_assert_eq!(&e["index"], &json!(content.len()), "indices not sequential");
                open = Some(content.len());
                content.push(e["content_block"].clone());
                partial_json.clear();
            }
            "content_block_delta" => {
                let index = open.ok_or_else(|| {
                    TestCaseError::fail(format!("a delta with no open block: {e}"))
                })?;
                prop_assert_eq!(&e["index"], &json!(index), "a delta to another block");
                let block = &mut content[index];
                let d = &e["delta"];
                let piece = |key: &str| d[key].as_str().unwrap_or_default().to_owned();
                let append = |block: &mut Value, key: &str, piece: String| {
                    let joined = format!("{}{piece}", block[key].as_str().unwrap_or_default());
                    block[key] = json!(joined);
                };
                match (block["type"].as_str(), d["type"].as_str()) {
                    (Some("text"), Some("text_delta")) => append(block, "text", piece("text")),
                    (Some("thinking"), Some("thinking_delta")) => {
                        append(block, "thinking", piece("thinking"));
                    }
                    (Some("thinking"), Some("signature_delta")) => {
                        prop_assert_eq!(&block["signature"], "", "a second signature");
                        append(block, "signature", piece("signature"));
                    }
                    (Some("tool_use"), Some("input_json_delta")) => {
                        partial_json.push_str(&piece("partial_json"));
                    }
                    other => prop_assert!(false, "a delta of the wrong kind: {:?}", other),
                }
            }
            "content_block_stop" => {
                let index = open.take().ok_or_else(|| {
                    TestCaseError::fail(format!("a stop with no open block: {e}"))
                })?;
                prop_assert_eq!(&e["index"], &json!(index));
                let block = &mut content[index];
                if block["type"] == "tool_use" {
                    block["input"] = serde_json::from_str(&partial_json).map_err(|err| {
                        TestCaseError::fail(format!(
                            "tool input {partial_json:?} is not JSON: {err}"
                        ))
                    })?;
                }
            }
            "message_delta" => {
                prop_assert!(open.is_none(), "message_delta with a block open");
                end = Some(e.clone());
            }
            "ping" => {}
            other => prop_assert!(false, "unexpected event {}", other),
        }
    }
    let end = end.ok_or_else(|| TestCaseError::fail("no message_delta"))?;
    Ok(Assembled {
        content,
        stop_reason: end["delta"]["stop_reason"].clone(),
        usage: end["usage"].clone(),
    })
}

/// Usage as the reply reported it: input without the cached part, which is read from the
/// cache; some output.
fn check_usage(usage: &Value, spec: &ReplySpec) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        &usage["input_tokens"],
        &json!(spec.prompt_tokens - spec.cached_tokens),
        "{}",
        usage
    );
    prop_assert_eq!(
        &usage["cache_read_input_tokens"],
        &json!(spec.cached_tokens)
    );
    prop_assert!(
        usage["output_tokens"].as_u64().is_some_and(|n| n > 0),
        "{}",
        usage
    );
    Ok(())
}

proptest! {
    #![proptest_config(config(128))]

    /// Scripted replies rendered by the fake as each API streams them, cut into arbitrary
    /// chunks, come out of the translator as a well-formed Anthropic stream of the same
    /// blocks, stop reason and usage; and the same replies unstreamed through
    /// `translate_response`.
    #[test]
    fn replies_survive_a_round_trip_through_either_api(spec in reply_spec()) {
        for (dialect, endpoint) in [
            (Dialect::ChatCompletions, Endpoint::ChatCompletions),
            (Dialect::Responses, Endpoint::Responses),
        ] {
            let events = render_stream(endpoint, &spec.blocks, spec.stop_reason, &spec.rendering());
            let bytes = events.concat().into_bytes();
            let out = translate_stream(dialect, &cut(&bytes, &spec.cuts))?;
            let got = assemble(&out)?;
            prop_assert_eq!(
                &got.content,
                &spec.expected_stream_content(dialect),
                "{:?} stream: {}",
                dialect,
                String::from_utf8_lossy(&bytes)
            );
            prop_assert_eq!(&got.stop_reason, &json!(spec.expected_stop()), "{:?} stream", dialect);
            check_usage(&got.usage, &spec)?;

            let reply = render_reply(endpoint, &spec.blocks, spec.stop_reason, &spec.rendering());
            let raw = serde_json::to_vec(&reply).unwrap();
            let message = translate_response(dialect, &raw, "claude-client-model")
                .map_err(|e| TestCaseError::fail(format!("{dialect:?} reply refused: {e:?}")))?;
            let message: Value = serde_json::from_slice(&message).unwrap();
            prop_assert_eq!(&message["type"], "message");
            prop_assert_eq!(&message["role"], "assistant");
            prop_assert_eq!(&message["model"], "claude-client-model");
            prop_assert_eq!(
                &message["content"],
                &json!(spec.expected_json_content(dialect)),
                "{:?} reply: {}",
                dialect,
                reply
            );
            prop_assert_eq!(&message["stop_reason"], &json!(spec.expected_stop()), "{:?} reply", dialect);
            check_usage(&message["usage"], &spec)?;
        }
    }
}

/// The check the request property relies on is the fake's own and refuses what OpenAI
/// refuses (so a translation that broke the wire format would fail the property).
#[test]
fn the_request_check_refuses_bodies_openai_refuses() {
    let model = |id: &str| {
        default_models()
            .into_iter()
            .find(|m| m["id"] == id)
            .unwrap()
    };
    let chat = json!({"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(
        check_request(Endpoint::ChatCompletions, &model("gpt-4.1"), &chat),
        Ok(())
    );
    let mut unknown = chat.clone();
    unknown["top_k"] = json!(5);
    let err = check_request(Endpoint::ChatCompletions, &model("gpt-4.1"), &unknown).unwrap_err();
    assert!(err.contains("top_k"), "{err}");
    let image_in_tool = json!({"model": "gpt-4.1", "messages": [
        {"role": "user", "content": "look"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "Read", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "image_url",
            "image_url": {"url": "https://example.com/a.png"}}]}]});
    let err =
        check_request(Endpoint::ChatCompletions, &model("gpt-4.1"), &image_in_tool).unwrap_err();
    assert!(err.contains("messages[2]"), "{err}");
    let unanswered = json!({"model": "gpt-5.4", "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {"type": "function_call", "call_id": "c1", "name": "Read", "arguments": "{}"}], "store": false});
    let err = check_request(Endpoint::Responses, &model("gpt-5.4"), &unanswered).unwrap_err();
    assert!(err.contains("No tool output found"), "{err}");
}
