//! Copilot's OpenAI endpoints (`POST /chat/completions`, `POST /responses`) as the fake sees
//! them: which endpoint a request is for, and [`to_anthropic`], the reverse translation of an
//! OpenAI request into the Anthropic Messages shape that the rest of the fake reads (rule
//! matching, the last user text, prompt counting).
//!
//! The reverse translation is written from the OpenAI side, independently of the proxy's
//! forward translation (`/work/spec-openai.md`), so that a round trip Anthropic -> OpenAI ->
//! Anthropic checks the forward half against something it does not share code with.
//!
//! For tests that drive the translation without a server: [`render_stream`] and
//! [`render_reply`] give a scripted reply as the fake would send it, [`check_request`] checks
//! a body as the fake would (the round-trip properties in `tests/suite/openai_round_trip.rs`
//! use all three).

use serde_json::{Map, Value, json};

/// A Copilot model endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `POST /v1/messages`: Anthropic Messages (Claude models).
    Messages,
    /// `POST /chat/completions`: OpenAI Chat Completions.
    ChatCompletions,
    /// `POST /responses`: OpenAI Responses.
    Responses,
}

impl Endpoint {
    /// The path Copilot serves it on, as the catalog's `supported_endpoints` names it.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Messages => "/v1/messages",
            Endpoint::ChatCompletions => "/chat/completions",
            Endpoint::Responses => "/responses",
        }
    }

    /// The endpoint a request path (query ignored) is for; the OpenAI endpoints also under
    /// their `/v1/` aliases.
    pub fn from_path(path: &str) -> Option<Endpoint> {
        match path.split('?').next().unwrap_or(path) {
            "/v1/messages" => Some(Endpoint::Messages),
            "/chat/completions" | "/v1/chat/completions" => Some(Endpoint::ChatCompletions),
            "/responses" | "/v1/responses" => Some(Endpoint::Responses),
            _ => None,
        }
    }
}

/// Prefix of the signature a thinking block made from Chat Completions reasoning carries.
pub const CHAT_SIGNATURE_PREFIX: &str = "claude-host:chat:";
/// Prefix of the signature a thinking block made from a Responses reasoning item carries.
pub const RESPONSES_SIGNATURE_PREFIX: &str = "claude-host:responses:";

/// An OpenAI request body for `endpoint` as an Anthropic Messages request (a `Messages` body
/// is returned as is). Never fails: what it does not understand it leaves out.
///
/// The result, field by field (absent when the source is):
/// - `model`, `stream`, `temperature`, `top_p` copied; `max_tokens` from `max_tokens` /
///   `max_completion_tokens` / `max_output_tokens`; `stop_sequences` from `stop` (always an
///   array); `output_config.effort` from `reasoning_effort` / `reasoning.effort`.
/// - `system`: a string, from Chat's leading `system`/`developer` messages (joined with
///   "\n\n") or Responses' `instructions`. Later system/developer messages (every one in a
///   Responses `input`) stay in place as `{"role":"system","content":TEXT}`.
/// - `tools`: `[{"name","description","input_schema"}]` from function tools; `tool_choice`
///   `auto`/`any`/`none`/`{"type":"tool","name"}`, with `disable_parallel_tool_use: true`
///   from `parallel_tool_calls: false`.
/// - user messages: string content stays a string; content parts become blocks: text ->
///   `text`, images (`image_url` / `input_image`) -> `image` with a `base64` source for a
///   `data:` URL, else a `url` source; a file with PDF `data:` -> `document` (base64).
/// - tool results: a run of Chat `tool` messages (Responses `function_call_output` items) is
///   one user message of `tool_result` blocks `{"type":"tool_result","tool_use_id","content"}`
///   in order; text starting `"Error: "` loses that prefix and gets `"is_error": true`; the
///   content is the text as a string, or blocks when the result has images. Chat's
///   `"Image from tool result ID:"` user message that follows puts its images back into that
///   result, and the user message right after the run joins the same user message (after the
///   results), as the forward translation splits one Anthropic user turn that way.
/// - assistant messages: always block arrays. Chat: thinking (from `reasoning_text`, signed
///   `claude-host:chat:<reasoning_opaque>`), then text, then `tool_use` blocks (`id`, `name`,
///   `input` parsed from `arguments`; kept as a string when it is not JSON). Responses:
///   consecutive `reasoning` (thinking = summary texts joined with "\n\n", signed
///   `claude-host:responses:<encrypted_content>`), assistant `message` (text per part) and
///   `function_call` items make one assistant message, in item order.
pub fn to_anthropic(endpoint: Endpoint, body: &Value) -> Value {
    match endpoint {
        Endpoint::Messages => body.clone(),
        Endpoint::ChatCompletions => chat_to_anthropic(body),
        Endpoint::Responses => responses_to_anthropic(body),
    }
}

/// The fields both APIs share, in Anthropic form.
fn common(body: &Value, out: &mut Map<String, Value>) {
    for key in ["model", "stream", "temperature", "top_p"] {
        if let Some(v) = body.get(key).filter(|v| !v.is_null()) {
            out.insert(key.into(), v.clone());
        }
    }
    let max = ["max_output_tokens", "max_completion_tokens", "max_tokens"]
        .iter()
        .find_map(|k| body.get(*k).filter(|v| v.is_u64()));
    if let Some(max) = max {
        out.insert("max_tokens".into(), max.clone());
    }
    match body.get("stop") {
        Some(Value::String(s)) => {
            out.insert("stop_sequences".into(), json!([s]));
        }
        Some(Value::Array(a)) => {
            out.insert("stop_sequences".into(), Value::Array(a.clone()));
        }
        _ => {}
    }
    let effort = body
        .get("reasoning_effort")
        .or_else(|| body.get("reasoning").and_then(|r| r.get("effort")))
        .and_then(Value::as_str);
    if let Some(effort) = effort {
        out.insert("output_config".into(), json!({ "effort": effort }));
    }
    let tools: Vec<Value> = body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|t| t.get("type").and_then(Value::as_str) == Some("function"))
        .map(|t| {
            // Chat nests the function; Responses flattens it.
            let f = t.get("function").unwrap_or(t);
            let mut tool = Map::new();
            tool.insert("name".into(), f.get("name").cloned().unwrap_or(Value::Null));
            if let Some(d) = f.get("description").filter(|d| !d.is_null()) {
                tool.insert("description".into(), d.clone());
            }
            tool.insert(
                "input_schema".into(),
                f.get("parameters")
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
            );
            Value::Object(tool)
        })
        .collect();
    if !tools.is_empty() {
        out.insert("tools".into(), Value::Array(tools));
    }
    let mut choice = match body.get("tool_choice") {
        Some(Value::String(s)) => match s.as_str() {
            "required" => Some(json!({"type": "any"})),
            "none" => Some(json!({"type": "none"})),
            _ => Some(json!({"type": "auto"})),
        },
        Some(Value::Object(o)) if o.get("type").and_then(Value::as_str) == Some("function") => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .or_else(|| o.get("name"))
                .cloned()
                .unwrap_or(Value::Null);
            Some(json!({"type": "tool", "name": name}))
        }
        _ => None,
    };
    if body.get("parallel_tool_calls") == Some(&Value::Bool(false)) {
        let c = choice.get_or_insert_with(|| json!({"type": "auto"}));
        c["disable_parallel_tool_use"] = Value::Bool(true);
    }
    if let Some(c) = choice {
        out.insert("tool_choice".into(), c);
    }
}

/// The text of a content value: a string, or its text parts joined with "\n".
fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// An Anthropic image block for an OpenAI image URL (`data:` URLs become base64 sources).
fn image_block(url: &str) -> Value {
    match parse_data_url(url) {
        Some((media_type, data)) => {
            json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}})
        }
        None => json!({"type": "image", "source": {"type": "url", "url": url}}),
    }
}

/// An Anthropic document block for an OpenAI file part (`file_data` as a `data:` URL).
fn document_block(file: &Value) -> Option<Value> {
    let data = file.get("file_data").and_then(Value::as_str)?;
    let (media_type, data) = parse_data_url(data)?;
    Some(
        json!({"type": "document", "source": {"type": "base64", "media_type": media_type, "data": data}}),
    )
}

/// `data:<media type>;base64,<data>` -> (media type, data).
fn parse_data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (meta, data) = rest.split_once(',')?;
    let media_type = meta.strip_suffix(";base64")?;
    Some((media_type, data))
}

/// Anthropic blocks for OpenAI user content parts (both APIs' part types).
fn user_parts(parts: &[Value]) -> Vec<Value> {
    parts
        .iter()
        .filter_map(|p| match p.get("type").and_then(Value::as_str) {
            Some("text" | "input_text") => {
                Some(json!({"type": "text", "text": p.get("text").cloned().unwrap_or_default()}))
            }
            Some("image_url") => p
                .get("image_url")
                .and_then(|i| i.get("url"))
                .and_then(Value::as_str)
                .map(image_block),
            Some("input_image") => p.get("image_url").and_then(Value::as_str).map(image_block),
            Some("file") => p.get("file").and_then(document_block),
            Some("input_file") => document_block(p),
            _ => None,
        })
        .collect()
}

/// User content as Anthropic content: a string stays a string.
fn user_content(content: Option<&Value>) -> Value {
    match content {
        Some(Value::String(s)) => Value::String(s.clone()),
        Some(Value::Array(parts)) => Value::Array(user_parts(parts)),
        _ => Value::Array(Vec::new()),
    }
}

/// User content as blocks (to join a tool-result turn).
fn user_blocks(content: Option<&Value>) -> Vec<Value> {
    match user_content(content) {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(blocks) => blocks,
        _ => Vec::new(),
    }
}

/// A `tool_result` block; the forward translation marks an error result with "Error: ".
fn tool_result(id: &Value, text: &str, images: Vec<Value>) -> Value {
    let (text, is_error) = match text.strip_prefix("Error: ") {
        Some(rest) => (rest, true),
        None => (text, false),
    };
    let content = if images.is_empty() {
        Value::String(text.to_owned())
    } else {
        let mut blocks = Vec::new();
        if !text.is_empty() {
            blocks.push(json!({"type": "text", "text": text}));
        }
        blocks.extend(images);
        Value::Array(blocks)
    };
    let mut block = json!({"type": "tool_result", "tool_use_id": id, "content": content});
    if is_error {
        block["is_error"] = Value::Bool(true);
    }
    block
}

/// A `tool_use` block; `arguments` that are not JSON stay a string, for a test to see.
fn tool_use(id: Option<&Value>, name: Option<&Value>, arguments: Option<&Value>) -> Value {
    let args = arguments.and_then(Value::as_str).unwrap_or("{}");
    let input = serde_json::from_str::<Value>(args).unwrap_or_else(|_| Value::String(args.into()));
    json!({"type": "tool_use", "id": id.cloned().unwrap_or_default(),
           "name": name.cloned().unwrap_or_default(), "input": input})
}

fn role(m: &Value) -> &str {
    m.get("role").and_then(Value::as_str).unwrap_or_default()
}

fn chat_to_anthropic(body: &Value) -> Value {
    let mut out = Map::new();
    common(body, &mut out);
    let msgs: &[Value] = body
        .get("messages")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let is_system = |m: &Value| matches!(role(m), "system" | "developer");
    let leading = msgs.iter().take_while(|m| is_system(m)).count();
    if leading > 0 {
        let system: Vec<String> = msgs[..leading]
            .iter()
            .map(|m| text_of(m.get("content")))
            .collect();
        out.insert("system".into(), Value::String(system.join("\n\n")));
    }
    let mut messages = Vec::new();
    let mut i = leading;
    while i < msgs.len() {
        let m = &msgs[i];
        match role(m) {
            "system" | "developer" => {
                messages.push(json!({"role": "system", "content": text_of(m.get("content"))}));
                i += 1;
            }
            "assistant" => {
                messages.push(chat_assistant(m));
                i += 1;
            }
            "tool" => {
                let mut results: Vec<(Value, String, Vec<Value>)> = Vec::new();
                while let Some(t) = msgs.get(i).filter(|m| role(m) == "tool") {
                    let id = t.get("tool_call_id").cloned().unwrap_or_default();
                    results.push((id, text_of(t.get("content")), Vec::new()));
                    i += 1;
                }
                // Images a tool returned come in user messages led by "Image from tool result ID:".
                while let Some(parts) = msgs
                    .get(i)
                    .filter(|m| role(m) == "user")
                    .and_then(|m| m.get("content"))
                    .and_then(Value::as_array)
                    .filter(|parts| parts.first().and_then(image_header).is_some())
                {
                    let mut target = None;
                    for p in parts {
                        if let Some(id) = image_header(p) {
                            target = results.iter().position(|(rid, _, _)| rid == id);
                        } else if let Some(t) = target {
                            results[t].2.extend(user_parts(std::slice::from_ref(p)));
                        }
                    }
                    i += 1;
                }
                let mut blocks: Vec<Value> = results
                    .into_iter()
                    .map(|(id, text, images)| tool_result(&id, &text, images))
                    .collect();
                if let Some(user) = msgs.get(i).filter(|m| role(m) == "user") {
                    blocks.extend(user_blocks(user.get("content")));
                    i += 1;
                }
                messages.push(json!({"role": "user", "content": blocks}));
            }
            "user" => {
                messages.push(json!({"role": "user", "content": user_content(m.get("content"))}));
                i += 1;
            }
            // Legacy `function` messages have no Anthropic counterpart.
            _ => i += 1,
        }
    }
    out.insert("messages".into(), Value::Array(messages));
    Value::Object(out)
}

/// The tool id of an "Image from tool result ID:" text part.
fn image_header(part: &Value) -> Option<&str> {
    let text = part
        .get("text")
        .and_then(Value::as_str)?
        .strip_prefix("Image from tool result ")?;
    text.strip_suffix(':')
}

fn chat_assistant(m: &Value) -> Value {
    let mut blocks = Vec::new();
    let reasoning = m.get("reasoning_text").and_then(Value::as_str);
    let opaque = m.get("reasoning_opaque").and_then(Value::as_str);
    if reasoning.is_some() || opaque.is_some() {
        blocks.push(json!({"type": "thinking", "thinking": reasoning.unwrap_or_default(),
                           "signature": format!("{CHAT_SIGNATURE_PREFIX}{}", opaque.unwrap_or_default())}));
    }
    match m.get("content") {
        Some(Value::String(s)) if !s.is_empty() => {
            blocks.push(json!({"type": "text", "text": s}));
        }
        Some(Value::Array(parts)) => {
            for p in parts {
                if let Some(t) = p
                    .get("text")
                    .or_else(|| p.get("refusal"))
                    .and_then(Value::as_str)
                {
                    blocks.push(json!({"type": "text", "text": t}));
                }
            }
        }
        _ => {}
    }
    if let Some(refusal) = m.get("refusal").and_then(Value::as_str) {
        blocks.push(json!({"type": "text", "text": refusal}));
    }
    for call in m
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let f = call.get("function");
        blocks.push(tool_use(
            call.get("id"),
            f.and_then(|f| f.get("name")),
            f.and_then(|f| f.get("arguments")),
        ));
    }
    json!({"role": "assistant", "content": blocks})
}

/// Where the last Anthropic message being built came from, to know what joins it.
#[derive(PartialEq)]
enum Open {
    None,
    /// An assistant message from consecutive assistant-side items.
    Assistant,
    /// A user message of tool results, which the next user message item joins.
    ToolResults,
}

fn responses_to_anthropic(body: &Value) -> Value {
    let mut out = Map::new();
    common(body, &mut out);
    if let Some(s) = body.get("instructions").and_then(Value::as_str) {
        out.insert("system".into(), Value::String(s.into()));
    }
    let mut messages: Vec<Value> = Vec::new();
    let mut open = Open::None;
    let push_block = |messages: &mut Vec<Value>, open: &mut Open, want: Open, block: Value| {
        if *open != want {
            let role = if want == Open::Assistant {
                "assistant"
            } else {
                "user"
            };
            messages.push(json!({"role": role, "content": []}));
            *open = want;
        }
        if let Some(content) = messages
            .last_mut()
            .and_then(|m| m.get_mut("content"))
            .and_then(Value::as_array_mut)
        {
            content.push(block);
        }
    };
    match body.get("input") {
        Some(Value::String(s)) => messages.push(json!({"role": "user", "content": s})),
        Some(Value::Array(items)) => {
            for item in items {
                let kind = item
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("message");
                match (kind, role(item)) {
                    ("message", "system" | "developer") => {
                        messages.push(
                            json!({"role": "system", "content": text_of(item.get("content"))}),
                        );
                        open = Open::None;
                    }
                    ("message", "assistant") => match item.get("content") {
                        Some(Value::String(s)) => push_block(
                            &mut messages,
                            &mut open,
                            Open::Assistant,
                            json!({"type": "text", "text": s}),
                        ),
                        Some(Value::Array(parts)) => {
                            for p in parts {
                                if let Some(t) = p
                                    .get("text")
                                    .or_else(|| p.get("refusal"))
                                    .and_then(Value::as_str)
                                {
                                    push_block(
                                        &mut messages,
                                        &mut open,
                                        Open::Assistant,
                                        json!({"type": "text", "text": t}),
                                    );
                                }
                            }
                        }
                        _ => {}
                    },
                    ("message", _) => {
                        if open == Open::ToolResults {
                            for b in user_blocks(item.get("content")) {
                                push_block(&mut messages, &mut open, Open::ToolResults, b);
                            }
                            open = Open::None;
                        } else {
                            messages.push(json!({"role": "user", "content": user_content(item.get("content"))}));
                            open = Open::None;
                        }
                    }
                    ("reasoning", _) => {
                        let summary: Vec<&str> = item
                            .get("summary")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                            .filter_map(|s| s.get("text").and_then(Value::as_str))
                            .collect();
                        let encrypted = item
                            .get("encrypted_content")
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        push_block(
                            &mut messages,
                            &mut open,
                            Open::Assistant,
                            json!({"type": "thinking", "thinking": summary.join("\n\n"),
                                   "signature": format!("{RESPONSES_SIGNATURE_PREFIX}{encrypted}")}),
                        );
                    }
                    ("function_call", _) => push_block(
                        &mut messages,
                        &mut open,
                        Open::Assistant,
                        tool_use(item.get("call_id"), item.get("name"), item.get("arguments")),
                    ),
                    ("function_call_output", _) => {
                        let id = item.get("call_id").cloned().unwrap_or_default();
                        let block = match item.get("output") {
                            Some(Value::Array(parts)) => {
                                let text = text_of(Some(&Value::Array(parts.clone())));
                                let images: Vec<Value> = user_parts(parts)
                                    .into_iter()
                                    .filter(|b| b["type"] != "text")
                                    .collect();
                                tool_result(&id, &text, images)
                            }
                            other => tool_result(&id, &text_of(other), Vec::new()),
                        };
                        push_block(&mut messages, &mut open, Open::ToolResults, block);
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
    out.insert("messages".into(), Value::Array(messages));
    Value::Object(out)
}

// ---- The fake's renderings and checks, for tests that drive a translator directly ----

/// What a rendered reply reports besides its blocks (see [`render_stream`]).
#[derive(Debug, Clone, Copy)]
pub struct Rendering<'a> {
    /// The model id echoed back.
    pub model: &'a str,
    /// The fake's request number, which ids are made from: tool calls are
    /// `call_fake_<n>_<block index>` on the OpenAI endpoints, `toolu_fake_<n>_<block index>`
    /// on Messages.
    pub request_number: u64,
    /// Prompt tokens reported (cached ones included, as OpenAI counts them).
    pub prompt_tokens: u64,
    /// Of which read from the cache.
    pub cached_tokens: u64,
    /// Chat Completions only: usage in the `finish_reason` chunk (as Copilot sometimes sends
    /// it) rather than in a last chunk of its own with `choices: []` (OpenAI).
    pub chat_usage_in_finish: bool,
}

impl Rendering<'_> {
    fn ctx(&self) -> crate::openai_render::Ctx<'_> {
        crate::openai_render::Ctx {
            model: self.model,
            id: self.request_number,
            prompt_tokens: self.prompt_tokens,
            cached_tokens: self.cached_tokens,
            created: 1_750_000_000,
        }
    }
}

/// A scripted reply as the fake streams it from `endpoint`: its SSE events in order, each
/// complete (`data: …\n\n` for Chat Completions, `event: …\ndata: …\n\n` for Responses and
/// Messages), split the way the real upstreams split them (see `openai_render`). A Chat
/// Completions stream reports usage (as asked with `stream_options.include_usage`) and ends
/// with `data: [DONE]`; a Responses stream ends with `response.completed` (or
/// `response.incomplete` for `max_tokens`).
pub fn render_stream(
    endpoint: Endpoint,
    blocks: &[crate::Block],
    stop_reason: &str,
    r: &Rendering,
) -> Vec<String> {
    use crate::openai_render::{ChatUsage, chat_events, responses_events};
    let ctx = r.ctx();
    match endpoint {
        Endpoint::ChatCompletions => {
            let usage = if r.chat_usage_in_finish {
                ChatUsage::InFinish
            } else {
                ChatUsage::OwnChunk
            };
            chat_events(blocks, stop_reason, &ctx, usage)
        }
        Endpoint::Responses => responses_events(blocks, stop_reason, &ctx),
        Endpoint::Messages => crate::replies::render_events(
            blocks,
            stop_reason,
            r.model,
            r.request_number,
            (r.prompt_tokens, r.cached_tokens),
        ),
    }
}

/// The same reply as the fake answers it unstreamed: a `chat.completion` (one message: the
/// first thinking block as `reasoning_text`/`reasoning_opaque`, every text block's text as
/// one `content`, then the tool calls), a `response` object (one output item per block), or
/// an Anthropic message.
pub fn render_reply(
    endpoint: Endpoint,
    blocks: &[crate::Block],
    stop_reason: &str,
    r: &Rendering,
) -> Value {
    use crate::openai_render::{chat_completion, responses_object};
    let ctx = r.ctx();
    match endpoint {
        Endpoint::ChatCompletions => chat_completion(blocks, stop_reason, &ctx),
        Endpoint::Responses => responses_object(blocks, stop_reason, &ctx),
        Endpoint::Messages => crate::replies::render_message(
            blocks,
            stop_reason,
            r.model,
            r.request_number,
            (r.prompt_tokens, r.cached_tokens),
        ),
    }
}

/// The reasoning summary parts the fake splits a thinking text into on `/responses` (at its
/// first blank line, else at the space nearest its middle, which is dropped; a single word
/// stays one part). A translator joining them with "\n\n" gets the text back up to that.
pub fn summary_parts(thinking: &str) -> Vec<String> {
    crate::openai_render::summary_parts(thinking)
}

/// Checks an OpenAI request `body` for `endpoint` exactly as the fake does before answering
/// it: the body read as async-openai's request types with no parameter they do not know,
/// then OpenAI's and Copilot's refusals for the catalog entry `model` (one of
/// [`crate::fake::default_models`]), sent with `Copilot-Vision-Request: true`. `Err` holds
/// the refusal's message (for a Messages body: always `Ok`).
pub fn check_request(endpoint: Endpoint, model: &Value, body: &Value) -> Result<(), String> {
    let anthropic = to_anthropic(endpoint, body);
    let tokens = crate::copilot_rules::prompt_tokens(&anthropic);
    crate::openai_check::check(endpoint, model, body, tokens, true).map_err(|refused| {
        refused
            .violation
            .unwrap_or_else(|| format!("{} {}", refused.status, refused.body))
    })
}
