//! Scripted replies rendered as Copilot's OpenAI wire formats: Chat Completions chunks and
//! Responses events (streamed), the `chat.completion` and `response` objects (not streamed),
//! and error envelopes. Every event is built from async-openai's own types, so its shape is
//! the real one; Copilot's reasoning extensions (`reasoning_text`, `reasoning_opaque`) are
//! added on top. Streams are split the way real upstreams split them.

use crate::copilot_rules::text_tokens;
use crate::replies::{Block, split_text};
use async_openai::types::chat::{
    ChatChoice, ChatChoiceStream, ChatCompletionMessageToolCall,
    ChatCompletionMessageToolCallChunk, ChatCompletionMessageToolCalls,
    ChatCompletionResponseMessage, ChatCompletionStreamResponseDelta, CompletionTokensDetails,
    CompletionUsage, CreateChatCompletionResponse, CreateChatCompletionStreamResponse,
    FinishReason, FunctionCall, FunctionCallStream, FunctionType, PromptTokensDetails, Role,
};
use async_openai::types::responses::{
    AssistantRole, FunctionToolCall, IncompleteDetails, InputTokenDetails, OutputContent,
    OutputItem, OutputMessage, OutputMessageContent, OutputStatus, OutputTextContent,
    OutputTokenDetails, ReasoningItem, RefusalContent, Response, ResponseCompletedEvent,
    ResponseContentPartAddedEvent, ResponseContentPartDoneEvent, ResponseCreatedEvent,
    ResponseError, ResponseErrorCode, ResponseErrorEvent, ResponseFailedEvent,
    ResponseFunctionCallArgumentsDeltaEvent, ResponseFunctionCallArgumentsDoneEvent,
    ResponseInProgressEvent, ResponseIncompleteEvent, ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent, ResponseReasoningSummaryPartAddedEvent,
    ResponseReasoningSummaryPartDoneEvent, ResponseReasoningSummaryTextDeltaEvent,
    ResponseReasoningSummaryTextDoneEvent, ResponseRefusalDeltaEvent, ResponseRefusalDoneEvent,
    ResponseStreamEvent, ResponseTextDeltaEvent, ResponseTextDoneEvent, ResponseUsage, Status,
    SummaryPart, SummaryTextContent,
};
use serde::Serialize;
use serde_json::{Value, json};

/// What a rendering needs besides the reply.
pub(crate) struct Ctx<'a> {
    /// The model id echoed back.
    pub model: &'a str,
    /// The fake's request number (ids are made from it).
    pub id: u64,
    /// Prompt tokens (cached ones included, as OpenAI counts them).
    pub prompt_tokens: u64,
    /// Prompt tokens read from the cache.
    pub cached_tokens: u64,
    /// Unix seconds.
    pub created: u64,
}

/// Where a Chat Completions stream reports usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChatUsage {
    /// Not at all (the request did not ask with `stream_options.include_usage`).
    None,
    /// In a last chunk of its own with `choices: []` (OpenAI).
    OwnChunk,
    /// In the `finish_reason` chunk (as Copilot sometimes sends it).
    InFinish,
}

fn to_u32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Serialized JSON of a value whose types cannot fail to serialize (string-keyed maps only).
fn to_json<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// Token counts of a reply: (output tokens, of which reasoning).
fn output_tokens(blocks: &[Block]) -> (u64, u64) {
    let mut out = 0;
    let mut reasoning = 0;
    for b in blocks {
        match b {
            Block::Text(d) => out += text_tokens(&d.concat()),
            Block::Thinking { thinking, .. } => {
                let n = text_tokens(thinking);
                out += n;
                reasoning += n;
            }
            Block::ToolUse { name, input } => {
                out += text_tokens(name) + text_tokens(&input.to_string());
            }
        }
    }
    (out.max(1), reasoning)
}

/// A tool call's argument text in fragments of 5 to 12 bytes (varying, on char boundaries),
/// as OpenAI streams them.
pub(crate) fn split_arguments(text: &str) -> Vec<String> {
    const SIZES: [usize; 8] = [5, 9, 12, 7, 10, 6, 11, 8];
    let mut out = Vec::new();
    let mut start = 0;
    let mut k = 0;
    while start < text.len() {
        let mut end = (start + SIZES[k % SIZES.len()]).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        out.push(text[start..end].to_owned());
        start = end;
        k += 1;
    }
    out
}

fn call_id(ctx: &Ctx, index: usize) -> String {
    format!("call_fake_{}_{index}", ctx.id)
}

/// Anthropic stop reason -> Chat Completions finish reason.
fn finish_reason(stop_reason: &str) -> FinishReason {
    match stop_reason {
        "tool_use" => FinishReason::ToolCalls,
        "max_tokens" => FinishReason::Length,
        "refusal" => FinishReason::ContentFilter,
        _ => FinishReason::Stop,
    }
}

fn chat_usage(ctx: &Ctx, blocks: &[Block]) -> CompletionUsage {
    let (out, reasoning) = output_tokens(blocks);
    CompletionUsage {
        prompt_tokens: to_u32(ctx.prompt_tokens),
        completion_tokens: to_u32(out),
        total_tokens: to_u32(ctx.prompt_tokens + out),
        prompt_tokens_details: Some(PromptTokensDetails {
            cached_tokens: Some(to_u32(ctx.cached_tokens.min(ctx.prompt_tokens))),
            audio_tokens: Some(0),
            ..Default::default()
        }),
        completion_tokens_details: Some(CompletionTokensDetails {
            reasoning_tokens: Some(to_u32(reasoning)),
            accepted_prediction_tokens: Some(0),
            rejected_prediction_tokens: Some(0),
            audio_tokens: Some(0),
            ..Default::default()
        }),
    }
}

/// One `data:` chunk. `extra` are Copilot's delta fields async-openai does not have.
fn chat_chunk(
    ctx: &Ctx,
    choice: Option<ChatChoiceStream>,
    usage: Option<CompletionUsage>,
    extra: &[(&str, &str)],
) -> String {
    let chunk = CreateChatCompletionStreamResponse {
        id: format!("chatcmpl-fake{}", ctx.id),
        choices: choice.into_iter().collect(),
        created: to_u32(ctx.created),
        model: ctx.model.into(),
        object: "chat.completion.chunk".into(),
        usage,
        ..Default::default()
    };
    let mut v = to_json(&chunk);
    if let Some(delta) = v
        .pointer_mut("/choices/0/delta")
        .and_then(Value::as_object_mut)
    {
        // Real deltas carry only what changed.
        delta.retain(|_, v| !v.is_null());
        for (k, val) in extra {
            delta.insert((*k).into(), json!(val));
        }
    }
    format!("data: {v}\n\n")
}

fn choice(delta: ChatCompletionStreamResponseDelta) -> Option<ChatChoiceStream> {
    Some(ChatChoiceStream {
        index: 0,
        delta,
        finish_reason: None,
        logprobs: None,
    })
}

/// A Chat Completions stream: a role chunk, then per block: text deltas; reasoning as
/// `reasoning_text` fragments and one `reasoning_opaque`; tool calls (a run of them
/// interleaved, fragment by fragment) with id/type/name in each call's first fragment; then
/// the `finish_reason` chunk, the usage chunk (per `usage`), and `data: [DONE]`.
pub(crate) fn chat_events(
    blocks: &[Block],
    stop_reason: &str,
    ctx: &Ctx,
    usage: ChatUsage,
) -> Vec<String> {
    let mut ev = vec![chat_chunk(
        ctx,
        choice(ChatCompletionStreamResponseDelta {
            role: Some(Role::Assistant),
            content: Some(String::new()),
            ..Default::default()
        }),
        None,
        &[],
    )];
    let mut tool_index: u32 = 0;
    let mut i = 0;
    while i < blocks.len() {
        match &blocks[i] {
            Block::Text(deltas) => {
                for d in deltas {
                    let delta = ChatCompletionStreamResponseDelta {
                        content: Some(d.clone()),
                        ..Default::default()
                    };
                    ev.push(chat_chunk(ctx, choice(delta), None, &[]));
                }
                i += 1;
            }
            Block::Thinking {
                thinking,
                signature,
            } => {
                for d in split_text(thinking, 5) {
                    ev.push(chat_chunk(
                        ctx,
                        choice(Default::default()),
                        None,
                        &[("reasoning_text", &d)],
                    ));
                }
                ev.push(chat_chunk(
                    ctx,
                    choice(Default::default()),
                    None,
                    &[("reasoning_opaque", signature)],
                ));
                i += 1;
            }
            Block::ToolUse { .. } => {
                // A run of tool calls streams interleaved: one fragment of each call in turn.
                let mut calls: Vec<std::collections::VecDeque<ChatCompletionMessageToolCallChunk>> =
                    Vec::new();
                while let Some(Block::ToolUse { name, input }) = blocks.get(i) {
                    let mut frags = std::collections::VecDeque::new();
                    frags.push_back(ChatCompletionMessageToolCallChunk {
                        index: tool_index,
                        id: Some(call_id(ctx, i)),
                        r#type: Some(FunctionType::Function),
                        function: Some(FunctionCallStream {
                            name: Some(name.clone()),
                            arguments: Some(String::new()),
                        }),
                    });
                    for a in split_arguments(&input.to_string()) {
                        frags.push_back(ChatCompletionMessageToolCallChunk {
                            index: tool_index,
                            function: Some(FunctionCallStream {
                                name: None,
                                arguments: Some(a),
                            }),
                            ..Default::default()
                        });
                    }
                    calls.push(frags);
                    tool_index += 1;
                    i += 1;
                }
                while calls.iter().any(|c| !c.is_empty()) {
                    for c in &mut calls {
                        if let Some(frag) = c.pop_front() {
                            let delta = ChatCompletionStreamResponseDelta {
                                tool_calls: Some(vec![frag]),
                                ..Default::default()
                            };
                            ev.push(chat_chunk(ctx, choice(delta), None, &[]));
                        }
                    }
                }
            }
        }
    }
    let finish = ChatChoiceStream {
        index: 0,
        delta: Default::default(),
        finish_reason: Some(finish_reason(stop_reason)),
        logprobs: None,
    };
    let totals = chat_usage(ctx, blocks);
    match usage {
        ChatUsage::InFinish => ev.push(chat_chunk(ctx, Some(finish), Some(totals), &[])),
        ChatUsage::OwnChunk => {
            ev.push(chat_chunk(ctx, Some(finish), None, &[]));
            ev.push(chat_chunk(ctx, None, Some(totals), &[]));
        }
        ChatUsage::None => ev.push(chat_chunk(ctx, Some(finish), None, &[])),
    }
    ev.push("data: [DONE]\n\n".into());
    ev
}

/// The non-streaming `chat.completion` object.
pub(crate) fn chat_completion(blocks: &[Block], stop_reason: &str, ctx: &Ctx) -> Value {
    let text: String = blocks
        .iter()
        .filter_map(|b| match b {
            Block::Text(d) => Some(d.concat()),
            _ => None,
        })
        .collect();
    let calls: Vec<ChatCompletionMessageToolCalls> = blocks
        .iter()
        .enumerate()
        .filter_map(|(i, b)| match b {
            Block::ToolUse { name, input } => Some(ChatCompletionMessageToolCalls::Function(
                ChatCompletionMessageToolCall {
                    id: call_id(ctx, i),
                    function: FunctionCall {
                        name: name.clone(),
                        arguments: input.to_string(),
                    },
                },
            )),
            _ => None,
        })
        .collect();
    let has_text = blocks.iter().any(|b| matches!(b, Block::Text(_)));
    let response = CreateChatCompletionResponse {
        id: format!("chatcmpl-fake{}", ctx.id),
        choices: vec![ChatChoice {
            index: 0,
            message: ChatCompletionResponseMessage {
                content: has_text.then_some(text),
                tool_calls: (!calls.is_empty()).then_some(calls),
                role: Role::Assistant,
                ..Default::default()
            },
            finish_reason: Some(finish_reason(stop_reason)),
            logprobs: None,
        }],
        created: to_u32(ctx.created),
        model: ctx.model.into(),
        object: "chat.completion".into(),
        usage: Some(chat_usage(ctx, blocks)),
        ..Default::default()
    };
    let mut v = to_json(&response);
    if let Some(Block::Thinking {
        thinking,
        signature,
    }) = blocks.iter().find(|b| matches!(b, Block::Thinking { .. }))
        && let Some(m) = v
            .pointer_mut("/choices/0/message")
            .and_then(Value::as_object_mut)
    {
        m.insert("reasoning_text".into(), json!(thinking));
        m.insert("reasoning_opaque".into(), json!(signature));
    }
    v
}

/// Anthropic error type -> OpenAI/Copilot (`code`, `type`).
pub(crate) fn error_code(kind: &str) -> (&str, &str) {
    match kind {
        "invalid_request_error" => ("invalid_request_body", "invalid_request_error"),
        "authentication_error" => ("unauthorized", "authentication_error"),
        "permission_error" => ("forbidden", "permission_error"),
        "not_found_error" => ("model_not_found", "invalid_request_error"),
        "request_too_large" => ("request_too_large", "invalid_request_error"),
        "rate_limit_error" => ("rate_limit_exceeded", "rate_limit_error"),
        "billing_error" => ("insufficient_quota", "insufficient_quota"),
        "overloaded_error" => ("server_is_overloaded", "server_error"),
        "timeout_error" => ("timeout", "server_error"),
        "api_error" => ("server_error", "server_error"),
        other => (other, "server_error"),
    }
}

/// The OpenAI/Copilot error envelope for an Anthropic error type and message.
pub(crate) fn error_envelope(kind: &str, message: &str) -> Value {
    let (code, kind) = error_code(kind);
    json!({"error": {"message": message, "code": code, "type": kind}})
}

/// A Chat Completions mid-stream error: one `data:` chunk holding the envelope, then the end
/// (no `[DONE]`).
pub(crate) fn chat_error_events(kind: &str, message: &str) -> Vec<String> {
    vec![format!("data: {}\n\n", error_envelope(kind, message))]
}

/// Numbers Responses events in order from 0.
struct Seq(u64);

impl Seq {
    fn next(&mut self) -> u64 {
        let n = self.0;
        self.0 += 1;
        n
    }
}

fn response_event(e: &ResponseStreamEvent) -> String {
    let v = to_json(e);
    let name = v["type"].as_str().unwrap_or("message").to_owned();
    format!("event: {name}\ndata: {v}\n\n")
}

/// A `response` object; `output` and `usage` as far as known.
#[allow(deprecated)]
fn response(
    ctx: &Ctx,
    status: Status,
    output: Vec<OutputItem>,
    usage: Option<ResponseUsage>,
) -> Response {
    let done = matches!(
        status,
        Status::Completed | Status::Incomplete | Status::Failed
    );
    Response {
        background: Some(false),
        billing: None,
        conversation: None,
        created_at: ctx.created,
        completed_at: (status == Status::Completed).then_some(ctx.created),
        error: None,
        id: format!("resp_fake_{}", ctx.id),
        incomplete_details: None,
        instructions: None,
        max_output_tokens: None,
        metadata: Some(Default::default()),
        model: ctx.model.into(),
        object: "response".into(),
        output,
        parallel_tool_calls: Some(true),
        previous_response_id: None,
        prompt: None,
        prompt_cache_key: None,
        prompt_cache_retention: None,
        reasoning: None,
        safety_identifier: None,
        service_tier: None,
        status,
        temperature: None,
        text: None,
        tool_choice: None,
        tools: Some(Vec::new()),
        top_logprobs: None,
        top_p: None,
        truncation: None,
        usage: if done { usage } else { None },
        prompt_cache_options: None,
        prompt_cache_diagnostics: None,
        moderation: None,
        access_programs: None,
        tool_usage: None,
    }
}

fn responses_usage(ctx: &Ctx, blocks: &[Block]) -> ResponseUsage {
    let (out, reasoning) = output_tokens(blocks);
    ResponseUsage {
        input_tokens: to_u32(ctx.prompt_tokens),
        input_tokens_details: InputTokenDetails {
            cached_tokens: to_u32(ctx.cached_tokens.min(ctx.prompt_tokens)),
            cache_write_tokens: None,
        },
        output_tokens: to_u32(out),
        output_tokens_details: OutputTokenDetails {
            reasoning_tokens: to_u32(reasoning),
        },
        total_tokens: to_u32(ctx.prompt_tokens + out),
    }
}

/// A thinking text as a reasoning item's two summary parts: split at its first blank line,
/// else at the word break nearest its middle (a single word stays one part).
pub(crate) fn summary_parts(thinking: &str) -> Vec<String> {
    if let Some((a, b)) = thinking.split_once("\n\n")
        && !a.is_empty()
        && !b.is_empty()
    {
        return vec![a.into(), b.into()];
    }
    let mid = thinking.len() / 2;
    let split = thinking
        .char_indices()
        .filter(|(_, c)| *c == ' ')
        .map(|(i, _)| i)
        .min_by_key(|i| i.abs_diff(mid));
    match split {
        Some(i) if i > 0 && i + 1 < thinking.len() => {
            vec![thinking[..i].into(), thinking[i + 1..].into()]
        }
        _ => vec![thinking.into()],
    }
}

fn output_text(text: &str) -> OutputTextContent {
    OutputTextContent {
        annotations: Vec::new(),
        logprobs: Some(Vec::new()),
        text: text.into(),
    }
}

/// A reply's output items, complete (what `output_item.done` and the final response carry).
fn output_items(blocks: &[Block], stop_reason: &str, ctx: &Ctx) -> Vec<OutputItem> {
    let last = blocks.len().saturating_sub(1);
    blocks
        .iter()
        .enumerate()
        .map(|(i, b)| match b {
            Block::Text(d) => {
                let text = d.concat();
                let content = if stop_reason == "refusal" {
                    OutputMessageContent::Refusal(RefusalContent { refusal: text })
                } else {
                    OutputMessageContent::OutputText(output_text(&text))
                };
                OutputItem::Message(OutputMessage {
                    content: vec![content],
                    id: format!("msg_fake_{}_{i}", ctx.id),
                    role: AssistantRole::Assistant,
                    phase: None,
                    status: if stop_reason == "max_tokens" && i == last {
                        OutputStatus::Incomplete
                    } else {
                        OutputStatus::Completed
                    },
                })
            }
            Block::Thinking {
                thinking,
                signature,
            } => OutputItem::Reasoning(ReasoningItem {
                id: Some(format!("rs_fake_{}_{i}", ctx.id)),
                summary: summary_parts(thinking)
                    .into_iter()
                    .map(|text| SummaryPart::SummaryText(SummaryTextContent { text }))
                    .collect(),
                encrypted_content: Some(signature.clone()),
                ..Default::default()
            }),
            Block::ToolUse { name, input } => OutputItem::FunctionCall(FunctionToolCall {
                arguments: input.to_string(),
                call_id: call_id(ctx, i),
                name: name.clone(),
                id: Some(format!("fc_fake_{}_{i}", ctx.id)),
                status: Some(OutputStatus::Completed),
                ..Default::default()
            }),
        })
        .collect()
}

/// A Responses stream: `response.created`, `response.in_progress`, per block an output item
/// (`output_item.added`, its parts and deltas, `output_item.done`), then `response.completed`
/// (`response.incomplete` for `max_tokens`). Sequence numbers count from 0.
pub(crate) fn responses_events(blocks: &[Block], stop_reason: &str, ctx: &Ctx) -> Vec<String> {
    let mut seq = Seq(0);
    let mut ev = Vec::new();
    let mut push = |e: ResponseStreamEvent| ev.push(response_event(&e));
    push(ResponseStreamEvent::ResponseCreated(ResponseCreatedEvent {
        sequence_number: seq.next(),
        response: response(ctx, Status::InProgress, Vec::new(), None),
    }));
    push(ResponseStreamEvent::ResponseInProgress(
        ResponseInProgressEvent {
            sequence_number: seq.next(),
            response: response(ctx, Status::InProgress, Vec::new(), None),
        },
    ));
    let items = output_items(blocks, stop_reason, ctx);
    for (i, (block, done)) in blocks.iter().zip(&items).enumerate() {
        let output_index = to_u32(i as u64);
        let item_id = match done {
            OutputItem::Message(m) => m.id.clone(),
            OutputItem::Reasoning(r) => r.id.clone().unwrap_or_default(),
            OutputItem::FunctionCall(f) => f.id.clone().unwrap_or_default(),
            _ => String::new(),
        };
        // The item as first announced: nothing generated yet.
        let added = match done {
            OutputItem::Message(m) => OutputItem::Message(OutputMessage {
                content: Vec::new(),
                status: OutputStatus::InProgress,
                ..m.clone()
            }),
            OutputItem::Reasoning(r) => OutputItem::Reasoning(ReasoningItem {
                summary: Vec::new(),
                encrypted_content: None,
                ..r.clone()
            }),
            OutputItem::FunctionCall(f) => OutputItem::FunctionCall(FunctionToolCall {
                arguments: String::new(),
                status: Some(OutputStatus::InProgress),
                ..f.clone()
            }),
            other => other.clone(),
        };
        push(ResponseStreamEvent::ResponseOutputItemAdded(
            ResponseOutputItemAddedEvent {
                sequence_number: seq.next(),
                output_index,
                item: added,
            },
        ));
        match block {
            Block::Text(deltas) => {
                let text = deltas.concat();
                let refusal = stop_reason == "refusal";
                let (empty, full) = if refusal {
                    (
                        OutputContent::Refusal(RefusalContent {
                            refusal: String::new(),
                        }),
                        OutputContent::Refusal(RefusalContent {
                            refusal: text.clone(),
                        }),
                    )
                } else {
                    (
                        OutputContent::OutputText(output_text("")),
                        OutputContent::OutputText(output_text(&text)),
                    )
                };
                push(ResponseStreamEvent::ResponseContentPartAdded(
                    ResponseContentPartAddedEvent {
                        sequence_number: seq.next(),
                        item_id: item_id.clone(),
                        output_index,
                        content_index: 0,
                        part: empty,
                    },
                ));
                for d in deltas {
                    push(if refusal {
                        ResponseStreamEvent::ResponseRefusalDelta(ResponseRefusalDeltaEvent {
                            sequence_number: seq.next(),
                            item_id: item_id.clone(),
                            output_index,
                            content_index: 0,
                            delta: d.clone(),
                        })
                    } else {
                        ResponseStreamEvent::ResponseOutputTextDelta(ResponseTextDeltaEvent {
                            sequence_number: seq.next(),
                            item_id: item_id.clone(),
                            output_index,
                            content_index: 0,
                            delta: d.clone(),
                            logprobs: Some(Vec::new()),
                        })
                    });
                }
                push(if refusal {
                    ResponseStreamEvent::ResponseRefusalDone(ResponseRefusalDoneEvent {
                        sequence_number: seq.next(),
                        item_id: item_id.clone(),
                        output_index,
                        content_index: 0,
                        refusal: text.clone(),
                    })
                } else {
                    ResponseStreamEvent::ResponseOutputTextDone(ResponseTextDoneEvent {
                        sequence_number: seq.next(),
                        item_id: item_id.clone(),
                        output_index,
                        content_index: 0,
                        text: text.clone(),
                        logprobs: Some(Vec::new()),
                    })
                });
                push(ResponseStreamEvent::ResponseContentPartDone(
                    ResponseContentPartDoneEvent {
                        sequence_number: seq.next(),
                        item_id: item_id.clone(),
                        output_index,
                        content_index: 0,
                        part: full,
                    },
                ));
            }
            Block::Thinking { thinking, .. } => {
                for (k, part) in summary_parts(thinking).into_iter().enumerate() {
                    let summary_index = to_u32(k as u64);
                    let text_part = |text: &str| {
                        SummaryPart::SummaryText(SummaryTextContent { text: text.into() })
                    };
                    push(ResponseStreamEvent::ResponseReasoningSummaryPartAdded(
                        ResponseReasoningSummaryPartAddedEvent {
                            sequence_number: seq.next(),
                            item_id: item_id.clone(),
                            output_index,
                            summary_index,
                            part: text_part(""),
                        },
                    ));
                    for d in split_text(&part, 5) {
                        push(ResponseStreamEvent::ResponseReasoningSummaryTextDelta(
                            ResponseReasoningSummaryTextDeltaEvent {
                                sequence_number: seq.next(),
                                item_id: item_id.clone(),
                                output_index,
                                summary_index,
                                delta: d,
                            },
                        ));
                    }
                    push(ResponseStreamEvent::ResponseReasoningSummaryTextDone(
                        ResponseReasoningSummaryTextDoneEvent {
                            sequence_number: seq.next(),
                            item_id: item_id.clone(),
                            output_index,
                            summary_index,
                            text: part.clone(),
                        },
                    ));
                    push(ResponseStreamEvent::ResponseReasoningSummaryPartDone(
                        ResponseReasoningSummaryPartDoneEvent {
                            sequence_number: seq.next(),
                            item_id: item_id.clone(),
                            output_index,
                            summary_index,
                            part: text_part(&part),
                            status: None,
                        },
                    ));
                }
            }
            Block::ToolUse { name, input } => {
                let arguments = input.to_string();
                for d in split_arguments(&arguments) {
                    push(ResponseStreamEvent::ResponseFunctionCallArgumentsDelta(
                        ResponseFunctionCallArgumentsDeltaEvent {
                            sequence_number: seq.next(),
                            item_id: item_id.clone(),
                            output_index,
                            delta: d,
                        },
                    ));
                }
                push(ResponseStreamEvent::ResponseFunctionCallArgumentsDone(
                    ResponseFunctionCallArgumentsDoneEvent {
                        name: Some(name.clone()),
                        sequence_number: seq.next(),
                        item_id: item_id.clone(),
                        output_index,
                        arguments,
                    },
                ));
            }
        }
        push(ResponseStreamEvent::ResponseOutputItemDone(
            ResponseOutputItemDoneEvent {
                sequence_number: seq.next(),
                output_index,
                item: done.clone(),
            },
        ));
    }
    let last = responses_object_typed(blocks, stop_reason, ctx);
    push(if last.status == Status::Incomplete {
        ResponseStreamEvent::ResponseIncomplete(ResponseIncompleteEvent {
            sequence_number: seq.next(),
            response: last,
        })
    } else {
        ResponseStreamEvent::ResponseCompleted(ResponseCompletedEvent {
            sequence_number: seq.next(),
            response: last,
        })
    });
    ev
}

fn responses_object_typed(blocks: &[Block], stop_reason: &str, ctx: &Ctx) -> Response {
    let items = output_items(blocks, stop_reason, ctx);
    let usage = Some(responses_usage(ctx, blocks));
    if stop_reason == "max_tokens" {
        let mut r = response(ctx, Status::Incomplete, items, usage);
        r.incomplete_details = Some(IncompleteDetails {
            reason: "max_output_tokens".into(),
        });
        r
    } else {
        response(ctx, Status::Completed, items, usage)
    }
}

/// The non-streaming `response` object.
pub(crate) fn responses_object(blocks: &[Block], stop_reason: &str, ctx: &Ctx) -> Value {
    to_json(&responses_object_typed(blocks, stop_reason, ctx))
}

/// A Responses mid-stream failure after `sent` events: `response.failed` carrying the error
/// (what OpenAI documents as the terminal event of a failed response, and what Codex reads
/// rate limits and context overflows from), or with `as_error_event` a bare `error` event.
/// Nothing follows either.
pub(crate) fn responses_error_events(
    kind: &str,
    message: &str,
    sent: usize,
    ctx: &Ctx,
    as_error_event: bool,
) -> Vec<String> {
    let (code, _) = error_code(kind);
    let sequence_number = sent as u64;
    let e = if as_error_event {
        ResponseStreamEvent::ResponseError(ResponseErrorEvent {
            sequence_number,
            code: Some(code.into()),
            message: message.into(),
            param: None,
        })
    } else {
        let mut r = response(ctx, Status::Failed, Vec::new(), None);
        r.error = Some(ResponseError {
            code: serde_json::from_value(json!(code))
                .unwrap_or_else(|_| ResponseErrorCode::Other(code.into())),
            message: message.into(),
            misalignment: None,
            param: None,
            r#type: None,
        });
        ResponseStreamEvent::ResponseFailed(ResponseFailedEvent {
            sequence_number,
            response: r,
        })
    };
    vec![response_event(&e)]
}
