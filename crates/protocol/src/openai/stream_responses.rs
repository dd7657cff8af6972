//! A Responses stream (`event: <type>` + `data:`) → Anthropic SSE.
//!
//! Each output item (`reasoning`, `message`, `function_call`) becomes one block, opened by
//! `response.output_item.added` and complete at `response.output_item.done`, which also
//! carries what the deltas may not have: a reasoning item's `encrypted_content` (its
//! signature), and the whole item for upstreams that stream no deltas for it.

use super::emit::{Emitter, ItemId, Kind, StopReason};
use super::errors::{OpenAiError, cut_short, envelope, untranslatable};
use super::wire::{lenient, lenient_u64, nonempty, str_inner};
use super::{RESPONSES_SIGNATURE, Step, Usage};
use bytes::BytesMut;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// Every event's fields that matter, in one lenient shape: scalars of an unexpected type
/// read as absent, so that only a structurally broken event fails.
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<&'a RawValue>,
    #[serde(default, deserialize_with = "lenient_u64")]
    output_index: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    summary_index: Option<u64>,
    #[serde(borrow, default)]
    delta: Option<&'a RawValue>,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "lenient")]
    item: Option<OutputItem<'a>>,
    #[serde(borrow, default, deserialize_with = "lenient")]
    response: Option<ResponseObject<'a>>,
    #[serde(borrow, default)]
    code: Option<&'a RawValue>,
    #[serde(borrow, default)]
    message: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "lenient")]
    error: Option<OpenAiError<'a>>,
}

/// Just the type, to tell an unknown event (ignored) from a broken known one.
#[derive(Deserialize)]
struct TypeOnly<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<&'a RawValue>,
}

/// An output item (`response.output_item.*` and a JSON reply's `output`).
#[derive(Deserialize)]
pub(crate) struct OutputItem<'a> {
    #[serde(rename = "type", borrow, default)]
    pub kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub call_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub arguments: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub encrypted_content: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "lenient")]
    pub summary: Option<Vec<TextPart<'a>>>,
    #[serde(borrow, default, deserialize_with = "lenient")]
    pub content: Option<Vec<TextPart<'a>>>,
}

/// A summary part or a message's content part.
#[derive(Deserialize)]
pub(crate) struct TextPart<'a> {
    #[serde(borrow, default)]
    pub text: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub refusal: Option<&'a RawValue>,
}

/// The `response` object (`response.created`, `.completed`, `.incomplete`, `.failed`, and a
/// JSON reply itself).
#[derive(Deserialize)]
pub(crate) struct ResponseObject<'a> {
    #[serde(borrow, default)]
    pub id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub status: Option<&'a RawValue>,
    #[serde(default, deserialize_with = "lenient")]
    pub usage: Option<ResponsesUsage>,
    #[serde(borrow, default, deserialize_with = "lenient")]
    pub incomplete_details: Option<IncompleteDetails<'a>>,
    #[serde(borrow, default, deserialize_with = "lenient")]
    pub error: Option<OpenAiError<'a>>,
}

#[derive(Deserialize)]
pub(crate) struct IncompleteDetails<'a> {
    #[serde(borrow, default)]
    pub reason: Option<&'a RawValue>,
}

#[derive(Deserialize, Default, Clone, Copy)]
pub(crate) struct ResponsesUsage {
    #[serde(default, deserialize_with = "lenient_u64")]
    input_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    output_tokens: Option<u64>,
    #[serde(default)]
    input_tokens_details: Option<InputDetails>,
}

#[derive(Deserialize, Default, Clone, Copy)]
struct InputDetails {
    #[serde(default, deserialize_with = "lenient_u64")]
    cached_tokens: Option<u64>,
}

impl ResponsesUsage {
    pub fn usage(self) -> Usage {
        Usage {
            input: self.input_tokens,
            cached: self.input_tokens_details.and_then(|d| d.cached_tokens),
            output: self.output_tokens,
        }
    }
}

/// The stop reason of an incomplete response.
pub(crate) fn incomplete_stop(details: Option<&IncompleteDetails>) -> StopReason {
    match details.and_then(|d| str_inner(d.reason)) {
        Some(b"content_filter") => StopReason::Refusal,
        _ => StopReason::MaxTokens,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ItemType {
    Reasoning,
    Message,
    Call,
}

impl ItemType {
    fn of(kind: Option<&RawValue>) -> Option<Self> {
        match str_inner(kind)? {
            b"reasoning" => Some(ItemType::Reasoning),
            b"message" => Some(ItemType::Message),
            b"function_call" => Some(ItemType::Call),
            _ => None,
        }
    }
}

#[derive(Debug)]
struct Tracked {
    output_index: u64,
    item: ItemId,
    kind: ItemType,
    /// Whether any text (or arguments) was streamed for it.
    streamed: bool,
    /// The reasoning summary part the last text belonged to.
    summary_index: Option<u64>,
}

#[derive(Debug)]
pub(crate) struct ResponsesStream {
    emit: Emitter,
    ended: bool,
    items: Vec<Tracked>,
    refused: bool,
}

/// The escaped form of the separator between reasoning summary parts.
const SUMMARY_SEPARATOR: &[u8] = br"\n\n";

impl ResponsesStream {
    pub fn new(model: &str) -> Self {
        ResponsesStream {
            emit: Emitter::new(model),
            ended: false,
            items: Vec::new(),
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

    pub fn end_of_stream(&mut self, _out: &mut BytesMut) -> Step {
        if self.ended {
            return Step::Continue;
        }
        self.fail(cut_short())
    }

    pub fn push(&mut self, name: Option<&[u8]>, data: &[u8], out: &mut BytesMut) -> Step {
        if self.ended {
            return Step::Continue;
        }
        let data = data.trim_ascii();
        if data.is_empty() || data == b"[DONE]" {
            return Step::Continue;
        }
        // One UTF-8 check for the whole event rather than one per string inside it.
        let event: Event = match std::str::from_utf8(data).map(serde_json::from_str) {
            Ok(Ok(e)) => e,
            _ => {
                let kind = serde_json::from_slice::<TypeOnly>(data)
                    .ok()
                    .and_then(|t| str_inner(t.kind).map(<[u8]>::to_vec));
                let kind = name.map(<[u8]>::to_vec).or(kind);
                return match kind.as_deref().map(handled) {
                    Some(false) => Step::Continue,
                    _ => self.fail(untranslatable("an event")),
                };
            }
        };
        let kind = name
            .filter(|n| !n.is_empty())
            .or_else(|| str_inner(event.kind))
            .unwrap_or_default();
        self.event(kind, event, out)
    }

    fn tracked(&mut self, output_index: Option<u64>) -> Option<&mut Tracked> {
        let index = output_index?;
        self.items.iter_mut().find(|t| t.output_index == index)
    }

    fn event(&mut self, kind: &[u8], event: Event, out: &mut BytesMut) -> Step {
        match kind {
            b"error" => {
                let env = match &event.error {
                    Some(e) => e.envelope(),
                    None => envelope(
                        decoded(event.code).as_deref(),
                        decoded(event.message).as_deref().unwrap_or_default(),
                    ),
                };
                return self.fail(env);
            }
            b"response.failed" => {
                let env = event
                    .response
                    .as_ref()
                    .and_then(|r| r.error.as_ref())
                    .map_or_else(
                        || envelope(None, "the upstream's response failed"),
                        OpenAiError::envelope,
                    );
                return self.fail(env);
            }
            _ => {}
        }
        let response_id = event.response.as_ref().and_then(|r| str_inner(r.id));
        self.emit.start(response_id, out);
        match kind {
            b"response.output_item.added" => {
                if let Some(item) = &event.item {
                    self.add(event.output_index, item, out);
                }
            }
            b"response.reasoning_summary_text.delta" | b"response.reasoning_text.delta" => {
                let summary = event.summary_index;
                if let (Some(delta), Some(t)) =
                    (nonempty(event.delta), self.tracked(event.output_index))
                {
                    let separate = t.streamed && summary.is_some() && t.summary_index != summary;
                    t.streamed = true;
                    if summary.is_some() {
                        t.summary_index = summary;
                    }
                    let item = t.item;
                    if separate {
                        self.emit.append(item, SUMMARY_SEPARATOR, out);
                    }
                    self.emit.append(item, delta, out);
                }
            }
            b"response.output_text.delta" | b"response.refusal.delta" => {
                if kind == b"response.refusal.delta" {
                    self.refused = true;
                }
                if let (Some(delta), Some(t)) =
                    (nonempty(event.delta), self.tracked(event.output_index))
                {
                    t.streamed = true;
                    let item = t.item;
                    self.emit.append(item, delta, out);
                }
            }
            b"response.function_call_arguments.delta" => {
                if let (Some(delta), Some(t)) =
                    (nonempty(event.delta), self.tracked(event.output_index))
                {
                    t.streamed = true;
                    let item = t.item;
                    self.emit.append(item, delta, out);
                }
            }
            b"response.function_call_arguments.done" => {
                if let (Some(arguments), Some(t)) =
                    (nonempty(event.arguments), self.tracked(event.output_index))
                    && !t.streamed
                {
                    t.streamed = true;
                    let item = t.item;
                    self.emit.append(item, arguments, out);
                }
            }
            b"response.output_item.done" => {
                if let Some(item) = &event.item {
                    self.done(event.output_index, item, out);
                }
            }
            b"response.completed" | b"response.incomplete" => {
                let response = event.response.as_ref();
                if let Some(usage) = response.and_then(|r| r.usage) {
                    self.emit.usage = usage.usage();
                }
                let stop = if kind == b"response.incomplete"
                    || response.is_some_and(|r| str_inner(r.status) == Some(b"incomplete"))
                {
                    incomplete_stop(response.and_then(|r| r.incomplete_details.as_ref()))
                } else if self.refused {
                    StopReason::Refusal
                } else if self.emit.tool_used {
                    StopReason::ToolUse
                } else {
                    StopReason::EndTurn
                };
                let stop = if self.refused {
                    StopReason::Refusal
                } else {
                    stop
                };
                self.ended = true;
                self.emit.finish(stop, out);
                return Step::Done;
            }
            _ => {}
        }
        Step::Continue
    }

    fn add(
        &mut self,
        output_index: Option<u64>,
        item: &OutputItem,
        out: &mut BytesMut,
    ) -> Option<ItemId> {
        let kind = ItemType::of(item.kind)?;
        let id = match kind {
            ItemType::Reasoning => self
                .emit
                .add_signed(Kind::Thinking, RESPONSES_SIGNATURE, out),
            ItemType::Message => self.emit.add(Kind::Text, out),
            ItemType::Call => self.emit.add(
                Kind::Tool {
                    id: str_inner(item.call_id).unwrap_or_default().to_vec(),
                    name: str_inner(item.name).unwrap_or_default().to_vec(),
                },
                out,
            ),
        };
        // A later item at the same index replaces an earlier one (which is left to finish).
        self.items.retain(|t| Some(t.output_index) != output_index);
        self.items.push(Tracked {
            output_index: output_index.unwrap_or(u64::MAX),
            item: id,
            kind,
            streamed: false,
            summary_index: None,
        });
        Some(id)
    }

    fn done(&mut self, output_index: Option<u64>, item: &OutputItem, out: &mut BytesMut) {
        let known = self
            .tracked(output_index)
            .filter(|t| Some(t.kind) == ItemType::of(item.kind))
            .map(|t| (t.item, t.streamed));
        let (id, streamed) = match known {
            Some(k) => k,
            None => match self.add(output_index, item, out) {
                Some(id) => (id, false),
                None => return,
            },
        };
        match ItemType::of(item.kind) {
            Some(ItemType::Reasoning) => {
                if !streamed {
                    let parts = item
                        .summary
                        .iter()
                        .flatten()
                        .filter_map(|p| nonempty(p.text));
                    for (i, text) in parts.enumerate() {
                        if i > 0 {
                            self.emit.append(id, SUMMARY_SEPARATOR, out);
                        }
                        self.emit.append(id, text, out);
                    }
                }
                if let Some(encrypted) = nonempty(item.encrypted_content) {
                    self.emit.append_signature(id, encrypted);
                }
            }
            Some(ItemType::Message) if !streamed => {
                for part in item.content.iter().flatten() {
                    if let Some(refusal) = nonempty(part.refusal) {
                        self.refused = true;
                        self.emit.append(id, refusal, out);
                    } else if let Some(text) = nonempty(part.text) {
                        self.emit.append(id, text, out);
                    }
                }
            }
            Some(ItemType::Call) if !streamed => {
                if let Some(arguments) = nonempty(item.arguments) {
                    self.emit.append(id, arguments, out);
                }
            }
            _ => {}
        }
        self.items.retain(|t| t.item != id);
        self.emit.complete(id, out);
    }
}

/// Whether an event type is one this translator acts on.
fn handled(kind: &[u8]) -> bool {
    matches!(
        kind,
        b"error"
            | b"response.failed"
            | b"response.created"
            | b"response.in_progress"
            | b"response.output_item.added"
            | b"response.reasoning_summary_text.delta"
            | b"response.reasoning_text.delta"
            | b"response.output_text.delta"
            | b"response.refusal.delta"
            | b"response.function_call_arguments.delta"
            | b"response.function_call_arguments.done"
            | b"response.output_item.done"
            | b"response.completed"
            | b"response.incomplete"
    )
}

fn decoded(raw: Option<&RawValue>) -> Option<Cow<'static, str>> {
    str_inner(raw).map(|s| Cow::Owned(super::wire::decode(s)))
}
