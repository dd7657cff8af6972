//! A Chat Completions stream (`data:` chunks, then `data: [DONE]`) → Anthropic SSE.
//!
//! Phases of a turn arrive as fields of the chunks' deltas: reasoning (`reasoning_text`,
//! Copilot; `reasoning_content`, others), then text (`content`, or `refusal`), then tool
//! calls, which may interleave by `index`. A phase starting closes the one before it; the
//! first tool call stays open until the end and later ones are buffered by the emitter. The
//! finish reason comes before usage (often in a chunk of its own with `choices: []`), so the
//! message ends at `[DONE]` (or at the end of the body).

use super::emit::{Emitter, ItemId, Kind, StopReason, generated_id};
use super::errors::{OpenAiError, cut_short, envelope, untranslatable};
use super::wire::{List, lenient_u64, nonempty, str_inner};
use super::{CHAT_SIGNATURE, Step, Usage};
use bytes::BytesMut;
use serde::Deserialize;
use serde_json::value::RawValue;

#[derive(Deserialize)]
pub(crate) struct Chunk<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    choices: Option<List<Choice<'a>>>,
    #[serde(default)]
    usage: Option<ChatUsage>,
    #[serde(borrow, default)]
    error: Option<OpenAiError<'a>>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<&'a RawValue>,
}

/// A chunk's `delta`, and a reply's `message` (the same fields).
#[derive(Deserialize)]
pub(crate) struct Delta<'a> {
    #[serde(borrow, default)]
    pub(crate) content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) refusal: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) reasoning_text: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) reasoning_content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) reasoning_opaque: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) tool_calls: Option<List<ToolCallDelta<'a>>>,
}

#[derive(Deserialize)]
pub(crate) struct ToolCallDelta<'a> {
    #[serde(default, deserialize_with = "lenient_u64")]
    pub(crate) index: Option<u64>,
    #[serde(borrow, default)]
    pub(crate) id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) function: Option<FunctionDelta<'a>>,
}

#[derive(Deserialize)]
pub(crate) struct FunctionDelta<'a> {
    #[serde(borrow, default)]
    pub(crate) name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) arguments: Option<&'a RawValue>,
}

/// `usage` of Chat Completions (a reply's and a stream's last chunk).
#[derive(Deserialize, Default, Clone, Copy)]
pub(crate) struct ChatUsage {
    #[serde(default, deserialize_with = "lenient_u64")]
    prompt_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize, Default, Clone, Copy)]
struct PromptDetails {
    #[serde(default, deserialize_with = "lenient_u64")]
    cached_tokens: Option<u64>,
}

impl ChatUsage {
    pub fn usage(self) -> Usage {
        Usage {
            input: self.prompt_tokens,
            cached: self.prompt_tokens_details.and_then(|d| d.cached_tokens),
            output: self.completion_tokens,
        }
    }
}

/// A `finish_reason` as a stop reason (`None`: not finished, or a reason that says nothing
/// beyond `stop`).
pub(crate) fn finish_reason(raw: Option<&RawValue>) -> Option<StopReason> {
    match str_inner(raw)? {
        b"length" => Some(StopReason::MaxTokens),
        b"content_filter" => Some(StopReason::Refusal),
        b"tool_calls" | b"function_call" => Some(StopReason::ToolUse),
        _ => Some(StopReason::EndTurn),
    }
}

/// Merges stop reasons from several choices or chunks: a refusal or a cut-off output matters
/// more than a normal end.
pub(crate) fn stronger(a: Option<StopReason>, b: StopReason) -> StopReason {
    let rank = |s: StopReason| match s {
        StopReason::Refusal => 3,
        StopReason::MaxTokens => 2,
        StopReason::ToolUse => 1,
        StopReason::EndTurn => 0,
    };
    match a {
        Some(a) if rank(a) >= rank(b) => a,
        _ => b,
    }
}

/// The stop reason written: tool calls make it `tool_use` unless the output was cut or
/// refused (Copilot's models often finish tool calls with `stop`).
pub(crate) fn final_stop(finish: Option<StopReason>, refused: bool, tool_used: bool) -> StopReason {
    match finish {
        _ if refused => StopReason::Refusal,
        Some(s @ (StopReason::Refusal | StopReason::MaxTokens)) => s,
        _ if tool_used => StopReason::ToolUse,
        _ => StopReason::EndTurn,
    }
}

#[derive(Debug)]
struct Call {
    index: u64,
    item: ItemId,
    /// The call's id (escaped JSON string contents).
    id: Vec<u8>,
}

#[derive(Debug)]
pub(crate) struct ChatStream {
    emit: Emitter,
    ended: bool,
    /// The thinking item reasoning goes to, while reasoning lasts.
    thinking: Option<ItemId>,
    /// The text item content goes to, while text lasts.
    text: Option<ItemId>,
    /// Tool calls by their `index`, in order of first appearance.
    calls: Vec<Call>,
    /// `reasoning_opaque` that came after its thinking block was written.
    late_opaque: Vec<u8>,
    finish: Option<StopReason>,
    refused: bool,
}

impl ChatStream {
    pub fn new(model: &str) -> Self {
        ChatStream {
            emit: Emitter::new(model),
            ended: false,
            thinking: None,
            text: None,
            calls: Vec::new(),
            late_opaque: Vec::new(),
            finish: None,
            refused: false,
        }
    }

    pub fn usage(&self) -> Usage {
        self.emit.usage
    }

    fn fail(&mut self, envelope: crate::error::ErrorEnvelope) -> Step {
        self.ended = true;
        Step::Failed(envelope)
    }

    pub fn push(&mut self, name: Option<&[u8]>, data: &[u8], out: &mut BytesMut) -> Step {
        if self.ended {
            return Step::Continue;
        }
        let data = data.trim_ascii();
        if data.is_empty() {
            return Step::Continue;
        }
        if data == b"[DONE]" {
            return self.end_of_stream(out);
        }
        // One UTF-8 check for the whole event rather than one per string inside it.
        let text = std::str::from_utf8(data).ok();
        let chunk = text.and_then(|t| serde_json::from_str::<Chunk>(t).ok());
        if name == Some(b"error") {
            // An `error` event fails the stream whatever its data holds.
            let error = chunk.and_then(|c| c.error).or_else(|| {
                text.and_then(|t| serde_json::from_str::<OpenAiError>(t).ok())
                    .filter(|e| e.message.is_some() || e.code.is_some())
            });
            return self.fail(match error {
                Some(e) => e.envelope(),
                None => envelope(None, &String::from_utf8_lossy(data)),
            });
        }
        let Some(chunk) = chunk else {
            return self.fail(untranslatable("a chunk"));
        };
        if let Some(error) = chunk.error {
            return self.fail(error.envelope());
        }
        self.emit.start(str_inner(chunk.id), out);
        if let Some(usage) = chunk.usage {
            self.emit.usage = usage.usage();
        }
        for choice in chunk.choices.into_iter().flatten() {
            if let Some(delta) = choice.delta {
                self.delta(delta, out);
            }
            if let Some(reason) = finish_reason(choice.finish_reason) {
                self.finish = Some(stronger(self.finish, reason));
            }
        }
        Step::Continue
    }

    pub fn end_of_stream(&mut self, out: &mut BytesMut) -> Step {
        if self.ended {
            return Step::Continue;
        }
        if self.finish.is_none() {
            return self.fail(cut_short());
        }
        self.ended = true;
        if !self.late_opaque.is_empty() {
            let item = self.emit.add_signed(Kind::Thinking, CHAT_SIGNATURE, out);
            self.emit.append_signature(item, &self.late_opaque);
        }
        let stop = final_stop(self.finish, self.refused, self.emit.tool_used);
        self.emit.finish(stop, out);
        Step::Done
    }

    fn end_thinking(&mut self, out: &mut BytesMut) {
        if let Some(item) = self.thinking.take() {
            self.emit.complete(item, out);
        }
    }

    fn end_text(&mut self, out: &mut BytesMut) {
        if let Some(item) = self.text.take() {
            self.emit.complete(item, out);
        }
    }

    fn delta(&mut self, delta: Delta, out: &mut BytesMut) {
        let reasoning =
            nonempty(delta.reasoning_text).or_else(|| nonempty(delta.reasoning_content));
        if let Some(fragment) = reasoning {
            self.end_text(out);
            let item = match self.thinking {
                Some(item) => item,
                None => {
                    let item = self.emit.add_signed(Kind::Thinking, CHAT_SIGNATURE, out);
                    self.thinking = Some(item);
                    item
                }
            };
            self.emit.append(item, fragment, out);
        }
        if let Some(opaque) = nonempty(delta.reasoning_opaque) {
            match self.thinking {
                Some(item) => {
                    self.emit.append_signature(item, opaque);
                }
                // Opaque reasoning with no text, before anything else: its own block first.
                None if !self.emit.any_added() => {
                    let item = self.emit.add_signed(Kind::Thinking, CHAT_SIGNATURE, out);
                    self.emit.append_signature(item, opaque);
                    self.thinking = Some(item);
                }
                None => self.late_opaque.extend_from_slice(opaque),
            }
        }
        let refusal = nonempty(delta.refusal);
        if refusal.is_some() {
            self.refused = true;
        }
        for fragment in [nonempty(delta.content), refusal].into_iter().flatten() {
            self.end_thinking(out);
            let item = match self.text {
                Some(item) => item,
                None => {
                    let item = self.emit.add(Kind::Text, out);
                    self.text = Some(item);
                    item
                }
            };
            self.emit.append(item, fragment, out);
        }
        for call in delta.tool_calls.into_iter().flatten() {
            self.tool_call(call, out);
        }
    }

    fn tool_call(&mut self, call: ToolCallDelta, out: &mut BytesMut) {
        let id = nonempty(call.id);
        let index = call
            .index
            .or_else(|| {
                // Without an index: the call with this id, else a new call when an id comes,
                // else the last call.
                let known =
                    id.and_then(|id| self.calls.iter().find(|c| c.id == id).map(|c| c.index));
                known.or_else(|| match id {
                    Some(_) => Some(self.calls.iter().map(|c| c.index + 1).max().unwrap_or(0)),
                    None => self.calls.last().map(|c| c.index),
                })
            })
            .unwrap_or(0);
        let function = call.function;
        let item = match self.calls.iter().find(|c| c.index == index) {
            Some(c) => c.item,
            None => {
                self.end_thinking(out);
                self.end_text(out);
                let tool_id = match id {
                    Some(id) => id.to_vec(),
                    None => format!("call_{}", generated_id()).into_bytes(),
                };
                let name = function
                    .as_ref()
                    .and_then(|f| str_inner(f.name))
                    .unwrap_or_default()
                    .to_vec();
                let item = self.emit.add(
                    Kind::Tool {
                        id: tool_id.clone(),
                        name,
                    },
                    out,
                );
                self.calls.push(Call {
                    index,
                    item,
                    id: tool_id,
                });
                item
            }
        };
        if let Some(arguments) = function.and_then(|f| nonempty(f.arguments)) {
            self.emit.append(item, arguments, out);
        }
    }
}
