//! Tests of the OpenAI translation: requests, both stream dialects, JSON replies.

mod perf;
mod reply;
mod request;
mod round_trip;
mod stream_chat;
mod stream_props;
mod stream_responses;

use super::*;
use crate::messages::MessagesRequest;
use crate::sse::EventParser;
use serde_json::{Value, json};

/// A Responses reasoning model with effort levels.
pub(super) fn gpt5() -> Target {
    Target {
        model: "gpt-5.4".into(),
        dialect: Dialect::Responses,
        max_output_tokens: Some(128_000),
        supports_vision: true,
        effort_levels: vec!["low".into(), "medium".into(), "high".into()],
        reasoning: true,
    }
}

/// A Chat Completions model without reasoning.
pub(super) fn gpt41() -> Target {
    Target {
        model: "gpt-4.1".into(),
        dialect: Dialect::ChatCompletions,
        max_output_tokens: Some(16_384),
        supports_vision: true,
        effort_levels: Vec::new(),
        reasoning: false,
    }
}

/// A Chat Completions reasoning model (Gemini-like) with effort levels.
pub(super) fn chat_reasoner() -> Target {
    Target {
        model: "gemini-3-pro".into(),
        dialect: Dialect::ChatCompletions,
        max_output_tokens: Some(64_000),
        supports_vision: true,
        effort_levels: vec!["low".into(), "high".into()],
        reasoning: true,
    }
}

pub(super) fn parse(body: &Value) -> MessagesRequest {
    MessagesRequest::parse(&serde_json::to_vec(body).unwrap()).unwrap()
}

/// A request with `messages` and the other fields of `extra`.
pub(super) fn request(messages: Value, extra: Value) -> MessagesRequest {
    let mut body = json!({"model": "claude-x", "max_tokens": 16000, "messages": messages});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    parse(&body)
}

/// Translates and reads the body back.
pub(super) fn translate(req: &MessagesRequest, target: &Target) -> (Value, Vec<&'static str>) {
    let t = translate_request(req, target).unwrap();
    (serde_json::from_slice(&t.body).unwrap(), t.rules)
}

/// Runs `events` (SSE name, data) through a translator; the Anthropic events written, each as
/// `{"event": name, "data": json}`, and the last step.
pub(super) fn run(dialect: Dialect, events: &[(Option<&str>, &str)]) -> (Vec<Value>, Step) {
    let mut t = StreamTranslator::new(dialect, "claude-client-model");
    let mut out = bytes::BytesMut::new();
    let mut step = Step::Continue;
    for (name, data) in events {
        step = t.push(name.map(str::as_bytes), data.as_bytes(), &mut out);
        if step != Step::Continue {
            break;
        }
    }
    if step == Step::Continue {
        step = t.end_of_stream(&mut out);
    }
    (anthropic_events(&out), step)
}

/// Parses written SSE back into `{"event", "data"}` values.
pub(super) fn anthropic_events(out: &[u8]) -> Vec<Value> {
    let mut p = EventParser::new();
    p.push(out);
    let mut events = Vec::new();
    while let Some(e) = p.next_event() {
        let data: Value = serde_json::from_str(&e.data)
            .unwrap_or_else(|err| panic!("not JSON ({err}): {}", e.data));
        assert_eq!(data["type"], json!(e.name), "event name and type differ");
        events.push(json!({"event": e.name, "data": data}));
    }
    assert!(p.pending().is_empty(), "a partial event was written");
    events
}

// Expected Anthropic events.

pub(super) fn ev(name: &str, data: Value) -> Value {
    json!({"event": name, "data": data})
}

pub(super) fn message_start(id: &str) -> Value {
    ev(
        "message_start",
        json!({"type":"message_start","message":{"id":id,"type":"message","role":"assistant",
            "model":"claude-client-model","content":[],"stop_reason":null,"stop_sequence":null,
            "usage":{"input_tokens":0,"output_tokens":0}}}),
    )
}

pub(super) fn text_start(index: u64) -> Value {
    ev(
        "content_block_start",
        json!({"type":"content_block_start","index":index,"content_block":{"type":"text","text":""}}),
    )
}

pub(super) fn thinking_start(index: u64) -> Value {
    ev(
        "content_block_start",
        json!({"type":"content_block_start","index":index,
            "content_block":{"type":"thinking","thinking":"","signature":""}}),
    )
}

pub(super) fn tool_start(index: u64, id: &str, name: &str) -> Value {
    ev(
        "content_block_start",
        json!({"type":"content_block_start","index":index,
            "content_block":{"type":"tool_use","id":id,"name":name,"input":{}}}),
    )
}

fn delta(index: u64, delta: Value) -> Value {
    ev(
        "content_block_delta",
        json!({"type":"content_block_delta","index":index,"delta":delta}),
    )
}

pub(super) fn text(index: u64, t: &str) -> Value {
    delta(index, json!({"type":"text_delta","text":t}))
}

pub(super) fn thinking(index: u64, t: &str) -> Value {
    delta(index, json!({"type":"thinking_delta","thinking":t}))
}

pub(super) fn signature(index: u64, s: &str) -> Value {
    delta(index, json!({"type":"signature_delta","signature":s}))
}

pub(super) fn json_part(index: u64, s: &str) -> Value {
    delta(index, json!({"type":"input_json_delta","partial_json":s}))
}

pub(super) fn block_stop(index: u64) -> Value {
    ev(
        "content_block_stop",
        json!({"type":"content_block_stop","index":index}),
    )
}

pub(super) fn message_end(stop: &str, input: u64, output: u64, cached: u64) -> [Value; 2] {
    [
        ev(
            "message_delta",
            json!({"type":"message_delta","delta":{"stop_reason":stop,"stop_sequence":null},
                "usage":{"input_tokens":input,"output_tokens":output,
                    "cache_read_input_tokens":cached,"cache_creation_input_tokens":0}}),
        ),
        ev("message_stop", json!({"type":"message_stop"})),
    ]
}

/// The content blocks a client assembles from `events`, as it would store them.
pub(super) fn assemble(events: &[Value]) -> Value {
    let mut blocks: Vec<Value> = Vec::new();
    let mut partial = String::new();
    for e in events {
        let data = &e["data"];
        match data["type"].as_str().unwrap() {
            "content_block_start" => blocks.push(data["content_block"].clone()),
            "content_block_delta" => {
                let b = blocks.last_mut().unwrap();
                let d = &data["delta"];
                let append = |b: &mut Value, key: &str, s: &Value| {
                    let joined = format!("{}{}", b[key].as_str().unwrap(), s.as_str().unwrap());
                    b[key] = json!(joined);
                };
                match d["type"].as_str().unwrap() {
                    "text_delta" => append(b, "text", &d["text"]),
                    "thinking_delta" => append(b, "thinking", &d["thinking"]),
                    "signature_delta" => append(b, "signature", &d["signature"]),
                    "input_json_delta" => partial += d["partial_json"].as_str().unwrap(),
                    other => panic!("{other}"),
                }
            }
            "content_block_stop" => {
                let b = blocks.last_mut().unwrap();
                if b["type"] == "tool_use" {
                    b["input"] =
                        serde_json::from_str(&std::mem::take(&mut partial)).unwrap_or(json!({}));
                }
            }
            _ => {}
        }
    }
    Value::Array(blocks)
}

/// Checks the shape every translated stream must have, whatever its content: one
/// `message_start` first, blocks with sequential indices each started, given deltas of its
/// own kind and stopped before the next starts, at most one `message_stop`, last. Returns
/// each tool block's (id, name, concatenated partial_json) and each block's kind.
pub(super) fn check_well_formed(events: &[Value]) -> Vec<(String, String, String)> {
    let mut tools = Vec::new();
    let mut open: Option<(u64, String)> = None;
    let mut next = 0;
    let mut stopped = false;
    for (i, e) in events.iter().enumerate() {
        assert!(!stopped, "an event after message_stop: {e}");
        let data = &e["data"];
        match e["event"].as_str().unwrap() {
            "message_start" => assert_eq!(i, 0, "message_start not first"),
            "content_block_start" => {
                assert!(open.is_none(), "a block started while another is open");
                assert_eq!(data["index"], json!(next), "block indices not sequential");
                let kind = data["content_block"]["type"].as_str().unwrap().to_owned();
                if kind == "tool_use" {
                    let b = &data["content_block"];
                    tools.push((
                        b["id"].as_str().unwrap().to_owned(),
                        b["name"].as_str().unwrap().to_owned(),
                        String::new(),
                    ));
                }
                open = Some((next, kind));
                next += 1;
            }
            "content_block_delta" => {
                let (index, kind) = open.as_ref().expect("a delta with no open block");
                assert_eq!(&data["index"], &json!(index), "a delta to another block");
                let d = &data["delta"];
                match (kind.as_str(), d["type"].as_str().unwrap()) {
                    ("text", "text_delta") | ("thinking", "thinking_delta") => {}
                    ("thinking", "signature_delta") => {}
                    ("tool_use", "input_json_delta") => {
                        tools.last_mut().unwrap().2 += d["partial_json"].as_str().unwrap();
                    }
                    other => panic!("a delta of the wrong kind: {other:?}"),
                }
            }
            "content_block_stop" => {
                let (index, _) = open.take().expect("a stop with no open block");
                assert_eq!(data["index"], json!(index));
            }
            "message_delta" => assert!(open.is_none(), "message_delta with a block open"),
            "message_stop" => stopped = true,
            other => panic!("unexpected event {other}"),
        }
    }
    tools
}
