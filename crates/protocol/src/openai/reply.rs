//! A JSON (non-streaming) OpenAI reply → an Anthropic message.

use super::emit::{StopReason, generated_id};
use super::errors::{OpenAiError, envelope, untranslatable};
use super::stream_chat::{ChatUsage, Delta, final_stop, finish_reason, stronger};
use super::stream_responses::{IncompleteDetails, OutputItem, ResponsesUsage, incomplete_stop};
use super::wire::{decode, nonempty, str_inner};
use super::{CHAT_SIGNATURE, Dialect, RESPONSES_SIGNATURE, Usage};
use crate::error::ErrorEnvelope;
use serde::Deserialize;
use serde_json::value::RawValue;

#[derive(Deserialize)]
struct ChatReply<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    choices: Option<Vec<ChatChoice<'a>>>,
    #[serde(default)]
    usage: Option<ChatUsage>,
    #[serde(borrow, default)]
    error: Option<OpenAiError<'a>>,
}

#[derive(Deserialize)]
struct ChatChoice<'a> {
    #[serde(borrow, default)]
    /// A reply's message has the fields of a stream's delta.
    message: Option<Delta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ResponsesReply<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    status: Option<&'a RawValue>,
    #[serde(borrow, default)]
    output: Option<Vec<OutputItem<'a>>>,
    #[serde(default)]
    usage: Option<ResponsesUsage>,
    #[serde(borrow, default)]
    incomplete_details: Option<IncompleteDetails<'a>>,
    #[serde(borrow, default)]
    error: Option<OpenAiError<'a>>,
}

/// An Anthropic message being written: content blocks from escaped JSON string contents.
struct Message {
    content: Vec<u8>,
    blocks: usize,
}

impl Message {
    fn new() -> Self {
        Message {
            content: Vec::with_capacity(256),
            blocks: 0,
        }
    }

    fn open(&mut self) {
        if self.blocks > 0 {
            self.content.push(b',');
        }
        self.blocks += 1;
    }

    fn text(&mut self, text: &[u8]) {
        self.open();
        self.content
            .extend_from_slice(br#"{"type":"text","text":""#);
        self.content.extend_from_slice(text);
        self.content.extend_from_slice(br#""}"#);
    }

    fn thinking(&mut self, text: &[u8], prefix: &str, signature: &[u8]) {
        self.open();
        self.content
            .extend_from_slice(br#"{"type":"thinking","thinking":""#);
        self.content.extend_from_slice(text);
        self.content.extend_from_slice(br#"","signature":""#);
        self.content.extend_from_slice(prefix.as_bytes());
        self.content.extend_from_slice(signature);
        self.content.extend_from_slice(br#""}"#);
    }

    fn tool_use(&mut self, id: Option<&[u8]>, name: &[u8], arguments: Option<&[u8]>) {
        self.open();
        self.content
            .extend_from_slice(br#"{"type":"tool_use","id":""#);
        match id.filter(|i| !i.is_empty()) {
            Some(id) => self.content.extend_from_slice(id),
            None => {
                self.content.extend_from_slice(b"call_");
                self.content.extend_from_slice(generated_id().as_bytes());
            }
        }
        self.content.extend_from_slice(br#"","name":""#);
        self.content.extend_from_slice(name);
        self.content.extend_from_slice(br#"","input":"#);
        // The arguments are JSON text inside a string; anything but an object becomes `{}`.
        let input = arguments.map(decode).filter(|a| {
            a.trim_start().starts_with('{') && serde_json::from_str::<&RawValue>(a).is_ok()
        });
        match input {
            Some(input) => self.content.extend_from_slice(input.trim().as_bytes()),
            None => self.content.extend_from_slice(b"{}"),
        }
        self.content.push(b'}');
    }

    fn finish(self, id: Option<&[u8]>, model: &str, stop: StopReason, usage: Usage) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.content.len() + 320);
        out.extend_from_slice(br#"{"id":"msg_"#);
        match id.filter(|i| !i.is_empty()) {
            Some(id) => out.extend_from_slice(id),
            None => out.extend_from_slice(generated_id().as_bytes()),
        }
        out.extend_from_slice(br#"","type":"message","role":"assistant","model":"#);
        // Writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut out, model);
        out.extend_from_slice(br#","content":["#);
        out.extend_from_slice(&self.content);
        out.extend_from_slice(br#"],"stop_reason":""#);
        out.extend_from_slice(stop_name(stop).as_bytes());
        let cached = usage.cached.unwrap_or(0);
        out.extend_from_slice(
            format!(
                r#"","stop_sequence":null,"usage":{{"input_tokens":{},"output_tokens":{},"cache_read_input_tokens":{cached},"cache_creation_input_tokens":0}}}}"#,
                usage.input.unwrap_or(0).saturating_sub(cached),
                usage.output.unwrap_or(0),
            )
            .as_bytes(),
        );
        out
    }
}

fn stop_name(stop: StopReason) -> &'static str {
    match stop {
        StopReason::EndTurn => "end_turn",
        StopReason::ToolUse => "tool_use",
        StopReason::MaxTokens => "max_tokens",
        StopReason::Refusal => "refusal",
    }
}

fn chat(body: &[u8], model: &str) -> Result<Vec<u8>, ErrorEnvelope> {
    let reply: ChatReply = serde_json::from_slice(body).map_err(|_| untranslatable("a reply"))?;
    if let Some(error) = reply.error {
        return Err(error.envelope());
    }
    let choices = reply
        .choices
        .ok_or_else(|| untranslatable("a reply without choices"))?;
    let mut message = Message::new();
    // Copilot may split one answer over several choices (text in one, tool calls in another):
    // they are one message here, reasoning first.
    let mut reasoning = Vec::new();
    let mut opaque = Vec::new();
    let mut text = Vec::new();
    let mut finish = None;
    let mut refused = false;
    for choice in &choices {
        if let Some(reason) = finish_reason(choice.finish_reason) {
            finish = Some(stronger(finish, reason));
        }
        let Some(m) = &choice.message else { continue };
        if let Some(r) = nonempty(m.reasoning_text).or_else(|| nonempty(m.reasoning_content)) {
            reasoning.extend_from_slice(r);
        }
        if let Some(o) = nonempty(m.reasoning_opaque) {
            opaque.extend_from_slice(o);
        }
        if let Some(r) = nonempty(m.refusal) {
            refused = true;
            text.extend_from_slice(r);
        }
        if let Some(t) = nonempty(m.content) {
            text.extend_from_slice(t);
        }
    }
    if !reasoning.is_empty() || !opaque.is_empty() {
        message.thinking(&reasoning, CHAT_SIGNATURE, &opaque);
    }
    if !text.is_empty() {
        message.text(&text);
    }
    let mut tool_used = false;
    for call in choices
        .iter()
        .filter_map(|c| c.message.as_ref())
        .flat_map(|m| m.tool_calls.iter().flatten())
    {
        tool_used = true;
        let function = call.function.as_ref();
        message.tool_use(
            str_inner(call.id),
            function.and_then(|f| str_inner(f.name)).unwrap_or_default(),
            function.and_then(|f| str_inner(f.arguments)),
        );
    }
    let usage = reply.usage.map(ChatUsage::usage).unwrap_or_default();
    let stop = final_stop(finish, refused, tool_used);
    Ok(message.finish(str_inner(reply.id), model, stop, usage))
}

fn responses(body: &[u8], model: &str) -> Result<Vec<u8>, ErrorEnvelope> {
    let reply: ResponsesReply =
        serde_json::from_slice(body).map_err(|_| untranslatable("a reply"))?;
    if let Some(error) = reply.error {
        return Err(error.envelope());
    }
    let status = str_inner(reply.status);
    if status == Some(b"failed") {
        return Err(envelope(None, "the upstream's response failed"));
    }
    let output = reply
        .output
        .ok_or_else(|| untranslatable("a reply without output"))?;
    let mut message = Message::new();
    let (mut refused, mut tool_used) = (false, false);
    for item in &output {
        match str_inner(item.kind) {
            Some(b"reasoning") => {
                let mut text = Vec::new();
                for part in item
                    .summary
                    .iter()
                    .flatten()
                    .filter_map(|p| nonempty(p.text))
                {
                    if !text.is_empty() {
                        text.extend_from_slice(br"\n\n");
                    }
                    text.extend_from_slice(part);
                }
                let encrypted = nonempty(item.encrypted_content);
                if !text.is_empty() || encrypted.is_some() {
                    message.thinking(&text, RESPONSES_SIGNATURE, encrypted.unwrap_or_default());
                }
            }
            Some(b"message") => {
                let mut text = Vec::new();
                for part in item.content.iter().flatten() {
                    if let Some(r) = nonempty(part.refusal) {
                        refused = true;
                        text.extend_from_slice(r);
                    } else if let Some(t) = nonempty(part.text) {
                        text.extend_from_slice(t);
                    }
                }
                if !text.is_empty() {
                    message.text(&text);
                }
            }
            Some(b"function_call") => {
                tool_used = true;
                message.tool_use(
                    str_inner(item.call_id),
                    str_inner(item.name).unwrap_or_default(),
                    str_inner(item.arguments),
                );
            }
            _ => {}
        }
    }
    let stop = if status == Some(b"incomplete") {
        incomplete_stop(reply.incomplete_details.as_ref())
    } else if refused {
        StopReason::Refusal
    } else if tool_used {
        StopReason::ToolUse
    } else {
        StopReason::EndTurn
    };
    let stop = if refused { StopReason::Refusal } else { stop };
    let usage = reply.usage.map(ResponsesUsage::usage).unwrap_or_default();
    Ok(message.finish(str_inner(reply.id), model, stop, usage))
}

/// Non-streaming: an OpenAI JSON reply → an Anthropic message JSON (`model` = `model`).
pub fn translate_response(
    dialect: Dialect,
    body: &[u8],
    model: &str,
) -> Result<Vec<u8>, ErrorEnvelope> {
    match dialect {
        Dialect::ChatCompletions => chat(body, model),
        Dialect::Responses => responses(body, model),
    }
}
