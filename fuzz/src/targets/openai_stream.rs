//! The OpenAI stream translators (`claude_host_protocol::openai::StreamTranslator`), both
//! dialects over the same bytes. Input: an SSE byte stream (split into events the way the
//! relay splits them; the `sse` target covers the splitting itself).
//!
//! Checks, on what each translator writes: complete SSE events whose data is JSON with the
//! event's name as its `type`; `message_start` first; content blocks with sequential indices,
//! one open at a time, deltas only to the open block and of its kind; `message_delta` with no
//! block open; at most one `message_stop` and nothing after it; `Done` exactly when
//! `message_stop` was written; nothing written for a `Failed` step, and nothing at all once the
//! stream is over.

use crate::input;
use bytes::BytesMut;
use claude_host_protocol::openai::{Dialect, Step, StreamTranslator};
use claude_host_protocol::sse::{EventParser, event_data, event_name, find_event_end};
use serde_json::Value;

/// The upstream's events: (name, data).
fn events(stream: &[u8]) -> Vec<(Option<Vec<u8>>, Vec<u8>)> {
    let mut out = Vec::new();
    let mut rest = stream;
    while let Ok(end) = find_event_end(rest, 0) {
        let raw = &rest[..end];
        rest = &rest[end..];
        out.push((
            event_name(raw).map(<[u8]>::to_vec),
            event_data(raw).into_owned(),
        ));
    }
    if !rest.is_empty() {
        // A last event without its blank line, as a body cut at EOF leaves it.
        out.push((
            event_name(rest).map(<[u8]>::to_vec),
            event_data(rest).into_owned(),
        ));
    }
    out
}

/// The state of the Anthropic stream written so far.
#[derive(Default)]
struct Shape {
    started: bool,
    stopped: bool,
    next_index: u64,
    open: Option<(u64, String)>,
}

impl Shape {
    fn check(&mut self, name: &str, data: &Value) {
        assert!(!self.stopped, "{name} written after message_stop");
        assert_eq!(
            data["type"].as_str(),
            Some(name),
            "event name and type differ"
        );
        if name != "message_start" {
            assert!(self.started, "{name} before message_start");
        }
        match name {
            "message_start" => {
                assert!(!self.started, "a second message_start");
                self.started = true;
                assert!(
                    data["message"]["id"].is_string(),
                    "message_start without an id"
                );
            }
            "content_block_start" => {
                assert!(self.open.is_none(), "a block started while another is open");
                assert_eq!(
                    data["index"].as_u64(),
                    Some(self.next_index),
                    "block indices not sequential"
                );
                let kind = data["content_block"]["type"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                assert!(
                    matches!(kind.as_str(), "text" | "thinking" | "tool_use"),
                    "block type {kind}"
                );
                self.open = Some((self.next_index, kind));
                self.next_index += 1;
            }
            "content_block_delta" => {
                let Some((index, kind)) = &self.open else {
                    panic!("a delta with no open block");
                };
                assert_eq!(
                    data["index"].as_u64(),
                    Some(*index),
                    "a delta to another block"
                );
                let delta = data["delta"]["type"].as_str().unwrap_or_default();
                let fits = matches!(
                    (kind.as_str(), delta),
                    ("text", "text_delta")
                        | ("thinking", "thinking_delta" | "signature_delta")
                        | ("tool_use", "input_json_delta")
                );
                assert!(fits, "a {delta} in a {kind} block");
            }
            "content_block_stop" => {
                let Some((index, _)) = self.open.take() else {
                    panic!("a stop with no open block");
                };
                assert_eq!(
                    data["index"].as_u64(),
                    Some(index),
                    "the stop of another block"
                );
            }
            "message_delta" => {
                assert!(self.open.is_none(), "message_delta with a block open");
                assert!(data["delta"]["stop_reason"].is_string(), "no stop reason");
            }
            "message_stop" => {
                assert!(self.open.is_none(), "message_stop with a block open");
                self.stopped = true;
            }
            other => panic!("unexpected event {other}"),
        }
    }
}

/// Reads what the translator wrote since the last call.
fn written(out: &[u8], shape: &mut Shape) {
    let mut p = EventParser::new();
    p.push(out);
    while let Some(e) = p.next_event() {
        let data: Value = match input::json_value(e.data.as_bytes()) {
            Ok(v) => v,
            Err(err) => panic!("{} data is not JSON ({err}): {:?}", e.name, e.data),
        };
        shape.check(&e.name, &data);
    }
    assert!(p.pending().is_empty(), "a partial event was written");
}

/// Checks one step and what it wrote.
fn observe(step: &Step, out: &[u8], shape: &mut Shape, over: &mut bool) {
    if *over {
        assert!(out.is_empty(), "written after the stream was over");
        assert_eq!(step, &Step::Continue, "a step after the stream was over");
        return;
    }
    written(out, shape);
    match step {
        Step::Continue => assert!(!shape.stopped, "message_stop without Done"),
        Step::Done => {
            assert!(shape.stopped, "Done without message_stop");
            *over = true;
        }
        Step::Failed(env) => {
            assert!(!shape.stopped, "Failed after message_stop");
            assert!(out.is_empty(), "Failed wrote something");
            assert_eq!(env.envelope_type, "error");
            assert!(!env.error.kind.is_empty(), "an error without a type");
            *over = true;
        }
    }
}

fn run_dialect(dialect: Dialect, events: &[(Option<Vec<u8>>, Vec<u8>)]) {
    let mut t = StreamTranslator::new(dialect, "claude-fuzz-model");
    let mut shape = Shape::default();
    let mut over = false;
    let mut out = BytesMut::new();
    for (name, data) in events {
        out.clear();
        let step = t.push(name.as_deref(), data, &mut out);
        observe(&step, &out, &mut shape, &mut over);
        let _ = t.usage();
    }
    out.clear();
    let step = t.end_of_stream(&mut out);
    observe(&step, &out, &mut shape, &mut over);
    assert!(over, "end_of_stream left the stream open");
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let events = events(data);
    run_dialect(Dialect::ChatCompletions, &events);
    run_dialect(Dialect::Responses, &events);
}
