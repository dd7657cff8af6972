//! Scripted model replies and how they are rendered as Anthropic SSE or JSON (the OpenAI
//! renderings are in `openai_render`).

use serde_json::{Value, json};
use std::time::Duration;

/// When a scripted reply applies.
#[derive(Debug, Clone)]
pub enum Match {
    /// Any request.
    Always,
    /// The last user message's text contains this.
    LastUserContains(String),
    /// The last user message carries a `tool_result`.
    HasToolResult,
}

/// A scripted reply and when to use it.
#[derive(Debug, Clone)]
pub struct Rule {
    /// When it applies.
    pub when: Match,
    /// What to answer.
    pub reply: Reply,
    /// How many times it may be used (`None` = once).
    pub times: Option<usize>,
}

/// One content block of a scripted reply.
#[derive(Debug, Clone)]
pub enum Block {
    /// Text, sent as these deltas.
    Text(Vec<String>),
    /// A thinking block with its signature.
    Thinking {
        /// The thinking text.
        thinking: String,
        /// The signature.
        signature: String,
    },
    /// A tool call.
    ToolUse {
        /// Tool name.
        name: String,
        /// Tool input.
        input: Value,
    },
}

/// Opens a gated reply.
#[derive(Debug, Clone)]
pub struct Gate(tokio::sync::watch::Sender<bool>);

impl Gate {
    /// A closed gate and the receiver that waits for it.
    pub(crate) fn new() -> (Gate, tokio::sync::watch::Receiver<bool>) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        (Gate(tx), rx)
    }

    /// Lets the rest of the reply through.
    pub fn open(&self) {
        let _ = self.0.send(true);
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Plan {
    Normal,
    ErrorAfter(usize, String, String),
    TruncateAfter(usize),
    CutAfterBytes(usize),
    SilentAfterStart(Duration),
    SilentBeforeFirst(Duration),
    GateAfter(usize, tokio::sync::watch::Receiver<bool>),
}

#[derive(Debug, Clone)]
pub(crate) enum Kind {
    Blocks {
        blocks: Vec<Block>,
        stop_reason: String,
        plan: Plan,
    },
    Error {
        status: u16,
        error_type: String,
        message: String,
        /// Drop the connection after this many bytes of the body.
        cut_after: Option<usize>,
    },
    Json(Value),
    Raw {
        status: u16,
        content_type: String,
        body: String,
    },
}

/// What the fake answers to a model request (`/v1/messages`, `/chat/completions` or
/// `/responses`, each in its own wire format).
#[derive(Debug, Clone)]
pub struct Reply {
    pub(crate) kind: Kind,
    pub(crate) headers: Vec<(String, String)>,
    /// Prompt tokens reported as read from the cache.
    pub(crate) cached_tokens: u64,
}

pub(crate) fn split_text(text: &str, piece: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(piece.max(1))
        .map(|c| c.iter().collect())
        .collect()
}

impl Reply {
    fn blocks_with(blocks: Vec<Block>, stop_reason: &str, plan: Plan) -> Reply {
        Reply {
            kind: Kind::Blocks {
                blocks,
                stop_reason: stop_reason.into(),
                plan,
            },
            headers: Vec::new(),
            cached_tokens: 0,
        }
    }

    /// One text block streamed in ~4-character deltas, `end_turn`.
    pub fn text(text: &str) -> Reply {
        Self::blocks(vec![Block::Text(split_text(text, 4))])
    }

    /// One text block sent as exactly these deltas.
    pub fn text_deltas(deltas: Vec<String>) -> Reply {
        Self::blocks(vec![Block::Text(deltas)])
    }

    /// A thinking block (with signature), then text.
    pub fn thinking(thinking: &str, signature: &str, then_text: &str) -> Reply {
        Self::blocks(vec![
            Block::Thinking {
                thinking: thinking.into(),
                signature: signature.into(),
            },
            Block::Text(split_text(then_text, 4)),
        ])
    }

    /// A tool call, `stop_reason: tool_use`.
    pub fn tool_use(name: &str, input: Value) -> Reply {
        Self::blocks_with(
            vec![Block::ToolUse {
                name: name.into(),
                input,
            }],
            "tool_use",
            Plan::Normal,
        )
    }

    /// A call of Claude Code's subagent tool (`Agent`), run in the foreground, whose
    /// subagent gets `prompt`.
    pub fn subagent_call(prompt: &str) -> Reply {
        Self::tool_use(
            "Agent",
            serde_json::json!({"description": "look around", "prompt": prompt,
                   "subagent_type": "general-purpose", "run_in_background": false}),
        )
    }

    /// Several blocks; `tool_use` stop reason when any block is a tool call.
    pub fn blocks(blocks: Vec<Block>) -> Reply {
        let stop = if blocks.iter().any(|b| matches!(b, Block::ToolUse { .. })) {
            "tool_use"
        } else {
            "end_turn"
        };
        Self::blocks_with(blocks, stop, Plan::Normal)
    }

    /// An HTTP error status with an Anthropic error envelope.
    pub fn error_before_stream(status: u16, error_type: &str, message: &str) -> Reply {
        Reply {
            kind: Kind::Error {
                status,
                error_type: error_type.into(),
                message: message.into(),
                cut_after: None,
            },
            headers: Vec::new(),
            cached_tokens: 0,
        }
    }

    /// As [`Reply::error_before_stream`], but the connection drops after the first
    /// `after_bytes` bytes of the body (its full `Content-Length` announced).
    pub fn error_cut_off(
        status: u16,
        error_type: &str,
        message: &str,
        after_bytes: usize,
    ) -> Reply {
        Reply {
            kind: Kind::Error {
                status,
                error_type: error_type.into(),
                message: message.into(),
                cut_after: Some(after_bytes),
            },
            headers: Vec::new(),
            cached_tokens: 0,
        }
    }

    /// The first `after_events` events of a text reply, then an `error` event, then the end.
    pub fn error_mid_stream(after_events: usize, error_type: &str, message: &str) -> Reply {
        Self::blocks_with(
            vec![Block::Text(split_text("partial answer that fails", 4))],
            "end_turn",
            Plan::ErrorAfter(after_events, error_type.into(), message.into()),
        )
    }

    /// The first `after_events` events, then the body just ends.
    pub fn truncated(after_events: usize) -> Reply {
        Self::blocks_with(
            vec![Block::Text(split_text("cut short before the end", 4))],
            "end_turn",
            Plan::TruncateAfter(after_events),
        )
    }

    /// A text reply whose connection drops after its first `after_bytes` bytes, as when a
    /// network path fails mid-body: a JSON reply declares its full `Content-Length`, an SSE
    /// reply is chunked and never sends its last chunk.
    pub fn cut_off(text: &str, after_bytes: usize) -> Reply {
        Self::blocks_with(
            vec![Block::Text(split_text(text, 4))],
            "end_turn",
            Plan::CutAfterBytes(after_bytes),
        )
    }

    /// `message_start`, then no bytes for `silence`, then the rest of a text reply.
    pub fn silent_then_text(silence: Duration, text: &str) -> Reply {
        Self::blocks_with(
            vec![Block::Text(split_text(text, 4))],
            "end_turn",
            Plan::SilentAfterStart(silence),
        )
    }

    /// Response headers, then no bytes for `silence`, then a whole text reply.
    pub fn silent_before_first_event(silence: Duration, text: &str) -> Reply {
        Self::blocks_with(
            vec![Block::Text(split_text(text, 4))],
            "end_turn",
            Plan::SilentBeforeFirst(silence),
        )
    }

    /// The first `gate_after_events` events of a text reply; the rest once the gate opens.
    pub fn gated(text: &str, gate_after_events: usize) -> (Reply, Gate) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        (
            Self::blocks_with(
                vec![Block::Text(split_text(text, 4))],
                "end_turn",
                Plan::GateAfter(gate_after_events, rx),
            ),
            Gate(tx),
        )
    }

    /// The first `gate_after_events` events of these blocks; the rest once the gate opens.
    pub fn gated_blocks(blocks: Vec<Block>, gate_after_events: usize) -> (Reply, Gate) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        let stop = if blocks.iter().any(|b| matches!(b, Block::ToolUse { .. })) {
            "tool_use"
        } else {
            "end_turn"
        };
        (
            Self::blocks_with(blocks, stop, Plan::GateAfter(gate_after_events, rx)),
            Gate(tx),
        )
    }

    /// A text reply of exactly `n` small `text_delta` events.
    pub fn many_deltas(n: usize) -> Reply {
        Self::text_deltas((0..n).map(|i| format!("w{} ", i % 10)).collect())
    }

    /// A whole JSON body, status 200.
    pub fn json(value: Value) -> Reply {
        Reply {
            kind: Kind::Json(value),
            headers: Vec::new(),
            cached_tokens: 0,
        }
    }

    /// Any body with any status, sent as given (a captive portal's HTML page, say).
    pub fn raw(status: u16, content_type: &str, body: &str) -> Reply {
        Reply {
            kind: Kind::Raw {
                status,
                content_type: content_type.into(),
                body: body.into(),
            },
            headers: Vec::new(),
            cached_tokens: 0,
        }
    }

    /// Adds a response header.
    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_ascii_lowercase(), value.into()));
        self
    }

    /// Ends a blocks reply with this Anthropic stop reason instead (`max_tokens`, `refusal`,
    /// `stop_sequence`, ...); the OpenAI renderings map it (`max_tokens` -> `length` /
    /// `response.incomplete`, `refusal` -> `content_filter` / a refusal part). No effect on
    /// other replies.
    pub fn with_stop_reason(mut self, stop_reason: &str) -> Reply {
        if let Kind::Blocks { stop_reason: s, .. } = &mut self.kind {
            *s = stop_reason.into();
        }
        self
    }

    /// Reports `tokens` of the prompt as read from the cache (`cache_read_input_tokens`;
    /// OpenAI's `cached_tokens`, part of the prompt count). Default 0.
    pub fn with_cached_tokens(mut self, tokens: u64) -> Reply {
        self.cached_tokens = tokens;
        self
    }
}

pub(crate) fn event(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// Renders a reply's SSE events (complete `event:`/`data:` blocks).
pub(crate) fn render_events(
    blocks: &[Block],
    stop_reason: &str,
    model: &str,
    id: u64,
    tokens: (u64, u64),
) -> Vec<String> {
    sse_events(blocks.to_vec(), stop_reason, model, id, tokens).collect()
}

/// A `text_delta` event, written out rather than built as a `Value`: a benchmark's stream is
/// thousands of them, and a map per event made the fake's rendering cost more than the
/// proxy's relaying it. The bytes are those `json!` gives (keys in insertion order).
fn text_delta_event(index: usize, text: &str) -> String {
    let text = Value::String(text.to_owned());
    format!(
        "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":{index},\"delta\":{{\"type\":\"text_delta\",\"text\":{text}}}}}\n\n"
    )
}

/// A reply's SSE events, each text delta rendered only when it is asked for: a real upstream
/// produces a stream's events as it goes, and rendering thousands of them before the first
/// one is sent would hold the fake's thread for milliseconds per request, which every other
/// request arriving meanwhile then waits out (the proxy benchmark's probes did, 60–190 ms,
/// whenever a load of 64 streams started at once).
pub(crate) fn sse_events(
    blocks: Vec<Block>,
    stop_reason: &str,
    model: &str,
    id: u64,
    (input_tokens, cached): (u64, u64),
) -> impl Iterator<Item = String> + Send + 'static {
    let cached = cached.min(input_tokens);
    let head = [
        event(
            "message_start",
            &json!({"type": "message_start", "message": {"id": format!("msg_fake_{id}"), "type": "message", "role": "assistant",
                "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": input_tokens - cached, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}}}),
        ),
        event("ping", &json!({"type": "ping"})),
    ];
    let mut output_tokens: u64 = 1;
    let mut parts: Vec<Box<dyn Iterator<Item = String> + Send>> = Vec::new();
    for (index, block) in blocks.into_iter().enumerate() {
        let stop = event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        );
        match block {
            Block::Text(deltas) => {
                output_tokens += deltas.len() as u64;
                let start = event(
                    "content_block_start",
                    &json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
                );
                let deltas = deltas.into_iter().map(move |d| text_delta_event(index, &d));
                parts.push(Box::new(
                    std::iter::once(start)
                        .chain(deltas)
                        .chain(std::iter::once(stop)),
                ));
            }
            Block::Thinking {
                thinking,
                signature,
            } => {
                let mut ev = vec![event(
                    "content_block_start",
                    &json!({"type": "content_block_start", "index": index, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
                )];
                for d in split_text(&thinking, 5) {
                    output_tokens += 1;
                    ev.push(event("content_block_delta", &json!({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": d}})));
                }
                ev.push(event("content_block_delta", &json!({"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta", "signature": signature}})));
                ev.push(stop);
                parts.push(Box::new(ev.into_iter()));
            }
            Block::ToolUse { name, input } => {
                let mut ev = vec![event(
                    "content_block_start",
                    &json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": format!("toolu_fake_{id}_{index}"), "name": name, "input": {}}}),
                )];
                let text = input.to_string();
                let piece = text.chars().count().div_ceil(3).max(1);
                for d in split_text(&text, piece) {
                    output_tokens += 1;
                    ev.push(event("content_block_delta", &json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": d}})));
                }
                ev.push(stop);
                parts.push(Box::new(ev.into_iter()));
            }
        }
    }
    let tail = [
        event(
            "message_delta",
            &json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                    "usage": {"output_tokens": output_tokens}, "copilot_usage": {"total_nano_aiu": 1_000_000 * output_tokens}}),
        ),
        event("message_stop", &json!({"type": "message_stop"})),
    ];
    head.into_iter()
        .chain(parts.into_iter().flatten())
        .chain(tail)
}

/// The non-streaming message for a reply.
pub(crate) fn render_message(
    blocks: &[Block],
    stop_reason: &str,
    model: &str,
    id: u64,
    (input_tokens, cached): (u64, u64),
) -> Value {
    let cached = cached.min(input_tokens);
    let content: Vec<Value> = blocks
        .iter()
        .enumerate()
        .map(|(index, b)| match b {
            Block::Text(d) => json!({"type": "text", "text": d.concat()}),
            Block::Thinking { thinking, signature } => json!({"type": "thinking", "thinking": thinking, "signature": signature}),
            Block::ToolUse { name, input } => json!({"type": "tool_use", "id": format!("toolu_fake_{id}_{index}"), "name": name, "input": input}),
        })
        .collect();
    json!({"id": format!("msg_fake_{id}"), "type": "message", "role": "assistant", "model": model, "content": content,
           "stop_reason": stop_reason, "stop_sequence": null,
           "usage": {"input_tokens": input_tokens - cached, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_out_text_delta_is_the_bytes_json_gives() {
        for (index, text) in [
            (0, "w1 "),
            (3, "quote \" backslash \\ newline \n tab \t"),
            (1, "non-ASCII é 日本 and a control \u{1}"),
            (0, ""),
        ] {
            let built = event(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}),
            );
            assert_eq!(text_delta_event(index, text), built);
        }
    }

    #[test]
    fn events_made_as_they_go_are_the_whole_reply() {
        let blocks = vec![
            Block::Thinking {
                thinking: "thinking it over".into(),
                signature: "sig".into(),
            },
            Block::Text(vec!["a".into(), "b".into(), "c".into()]),
            Block::ToolUse {
                name: "Bash".into(),
                input: json!({"command": "ls"}),
            },
        ];
        let events = render_events(&blocks, "tool_use", "m", 7, (10, 4));
        let names: Vec<&str> = events
            .iter()
            .map(|e| e.lines().next().unwrap_or_default())
            .collect();
        assert_eq!(names.first(), Some(&"event: message_start"));
        assert_eq!(names.last(), Some(&"event: message_stop"));
        // 1 + 4 thinking pieces + 3 text deltas + 3 pieces of the tool input.
        let delta = events
            .iter()
            .find(|e| e.starts_with("event: message_delta"))
            .map(String::as_str)
            .unwrap_or_default();
        assert!(delta.contains("\"output_tokens\":11"), "{delta}");
        let text: Vec<&String> = events
            .iter()
            .filter(|e| e.contains("\"text_delta\""))
            .collect();
        assert_eq!(text.len(), 3);
        assert_eq!(
            names
                .iter()
                .filter(|n| **n == "event: content_block_stop")
                .count(),
            3
        );
    }
}
