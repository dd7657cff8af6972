//! Writes the Anthropic SSE events of one streamed message.
//!
//! Anthropic streams one content block at a time, while OpenAI streams can interleave their
//! items (parallel tool calls in Chat Completions, a text part arriving while a tool call is
//! still open). The [`Emitter`] keeps the Anthropic side well formed whatever the order: one
//! item is *current* and writes its deltas as they come; every other item buffers its
//! fragments, in order of first appearance, and is written out (start, buffered delta, more
//! deltas, stop) once the items before it are complete. Block indices are handed out only
//! when a block starts, so they are always sequential.
//!
//! Text travels as the *escaped* contents of JSON strings, exactly as the upstream wrote them
//! (without the quotes): concatenating those is concatenating the strings, and writing them
//! back needs no decoding or re-escaping.

use super::Usage;
use bytes::BytesMut;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

/// What an item becomes on the Anthropic side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    Text,
    Thinking,
    /// A tool call; `id` and `name` escaped JSON string contents.
    Tool {
        id: Vec<u8>,
        name: Vec<u8>,
    },
}

/// Identifies an item for the dialect that added it.
pub(crate) type ItemId = u64;

#[derive(Debug)]
struct Item {
    id: ItemId,
    kind: Kind,
    /// Fragments not written yet (escaped JSON string contents).
    pending: Vec<u8>,
    /// The thinking block's signature so far (escaped contents, after the prefix).
    signature: Vec<u8>,
    /// The signature's prefix (which API the reasoning came from).
    signature_prefix: &'static str,
    done: bool,
}

#[derive(Debug)]
struct Current {
    item: Item,
    /// The block's index, once `content_block_start` is written.
    index: Option<u64>,
}

/// Why the message stopped, in Anthropic's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    Refusal,
}

impl StopReason {
    fn as_str(self) -> &'static str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::ToolUse => "tool_use",
            StopReason::MaxTokens => "max_tokens",
            StopReason::Refusal => "refusal",
        }
    }
}

/// The Anthropic side of one streamed message.
#[derive(Debug)]
pub(crate) struct Emitter {
    model: String,
    started: bool,
    stopped: bool,
    next_index: u64,
    next_id: ItemId,
    current: Option<Current>,
    queue: VecDeque<Item>,
    /// Whether any tool call was seen (the stop reason is then `tool_use`).
    pub tool_used: bool,
    /// Usage as reported so far.
    pub usage: Usage,
}

impl Emitter {
    pub fn new(model: &str) -> Self {
        Emitter {
            model: model.to_owned(),
            started: false,
            stopped: false,
            next_index: 0,
            next_id: 0,
            current: None,
            queue: VecDeque::new(),
            tool_used: false,
            usage: Usage::default(),
        }
    }

    /// Whether any item was added.
    pub fn any_added(&self) -> bool {
        self.next_id > 0
    }

    /// Writes `message_start` unless written already; `upstream_id` (escaped contents of the
    /// upstream's response id) names the message, else a generated id does.
    pub fn start(&mut self, upstream_id: Option<&[u8]>, out: &mut BytesMut) {
        if self.started {
            return;
        }
        self.started = true;
        begin(out, "message_start");
        out.extend_from_slice(br#"{"type":"message_start","message":{"id":"msg_"#);
        match upstream_id.filter(|id| !id.is_empty()) {
            Some(id) => out.extend_from_slice(id),
            None => out.extend_from_slice(generated_id().as_bytes()),
        }
        out.extend_from_slice(br#"","type":"message","role":"assistant","model":"#);
        write_json_str(out, &self.model);
        out.extend_from_slice(
            br#","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}}"#,
        );
        end(out);
    }

    /// Adds an item; it is written at once if nothing else is in progress.
    pub fn add(&mut self, kind: Kind, out: &mut BytesMut) -> ItemId {
        self.add_signed(kind, "", out)
    }

    /// Adds a thinking item whose signature will start with `prefix`.
    pub fn add_signed(&mut self, kind: Kind, prefix: &'static str, out: &mut BytesMut) -> ItemId {
        self.start(None, out);
        if matches!(kind, Kind::Tool { .. }) {
            self.tool_used = true;
        }
        let id = self.next_id;
        self.next_id += 1;
        let item = Item {
            id,
            kind,
            pending: Vec::new(),
            signature: Vec::new(),
            signature_prefix: prefix,
            done: false,
        };
        if self.current.is_none() {
            self.make_current(item, out);
        } else {
            self.queue.push_back(item);
        }
        id
    }

    /// Appends text (escaped JSON string contents) to item `id`.
    pub fn append(&mut self, id: ItemId, fragment: &[u8], out: &mut BytesMut) {
        if fragment.is_empty() {
            return;
        }
        if let Some(current) = self.current.as_mut().filter(|c| c.item.id == id) {
            let index = match current.index {
                Some(index) => index,
                None => open_block(&mut self.next_index, current, out),
            };
            write_delta(out, index, &current.item.kind, fragment);
        } else if let Some(item) = self.queue.iter_mut().find(|i| i.id == id) {
            item.pending.extend_from_slice(fragment);
        }
    }

    /// Appends to the signature of thinking item `id`; `false` when that block is closed
    /// already.
    pub fn append_signature(&mut self, id: ItemId, fragment: &[u8]) -> bool {
        let item = match self.current.as_mut().filter(|c| c.item.id == id) {
            Some(current) => &mut current.item,
            None => match self.queue.iter_mut().find(|i| i.id == id) {
                Some(item) => item,
                None => return false,
            },
        };
        item.signature.extend_from_slice(fragment);
        true
    }

    /// Item `id` will get no more fragments: its block closes once it is written.
    pub fn complete(&mut self, id: ItemId, out: &mut BytesMut) {
        match &mut self.current {
            Some(current) if current.item.id == id => {
                self.close_current(out);
                self.advance(out);
            }
            _ => {
                if let Some(item) = self.queue.iter_mut().find(|i| i.id == id) {
                    item.done = true;
                }
            }
        }
    }

    /// Completes every item, then writes `message_delta` and `message_stop`.
    pub fn finish(&mut self, stop: StopReason, out: &mut BytesMut) {
        if self.stopped {
            return;
        }
        self.start(None, out);
        for item in &mut self.queue {
            item.done = true;
        }
        if self.current.is_some() {
            self.close_current(out);
            self.advance(out);
        }
        let usage = self.usage;
        let cached = usage.cached.unwrap_or(0);
        let input = usage.input.unwrap_or(0).saturating_sub(cached);
        begin(out, "message_delta");
        out.extend_from_slice(br#"{"type":"message_delta","delta":{"stop_reason":""#);
        out.extend_from_slice(stop.as_str().as_bytes());
        out.extend_from_slice(br#"","stop_sequence":null},"usage":{"input_tokens":"#);
        write_u64(out, input);
        out.extend_from_slice(br#","output_tokens":"#);
        write_u64(out, usage.output.unwrap_or(0));
        out.extend_from_slice(br#","cache_read_input_tokens":"#);
        write_u64(out, cached);
        out.extend_from_slice(br#","cache_creation_input_tokens":0}}"#);
        end(out);
        begin(out, "message_stop");
        out.extend_from_slice(br#"{"type":"message_stop"}"#);
        end(out);
        self.stopped = true;
    }

    fn make_current(&mut self, item: Item, out: &mut BytesMut) {
        let mut current = Current { item, index: None };
        let starts_now =
            matches!(current.item.kind, Kind::Tool { .. }) || !current.item.pending.is_empty();
        if starts_now {
            let index = open_block(&mut self.next_index, &mut current, out);
            if !current.item.pending.is_empty() {
                let pending = std::mem::take(&mut current.item.pending);
                write_delta(out, index, &current.item.kind, &pending);
            }
        }
        self.current = Some(current);
    }

    /// Writes the rest of the current block (a thinking block's signature) and its stop.
    fn close_current(&mut self, out: &mut BytesMut) {
        let Some(mut current) = self.current.take() else {
            return;
        };
        if current.item.kind == Kind::Thinking {
            if current.index.is_none() && !current.item.signature.is_empty() {
                open_block(&mut self.next_index, &mut current, out);
            }
            if let Some(index) = current.index {
                begin(out, "content_block_delta");
                write_delta_head(out, index);
                out.extend_from_slice(br#"{"type":"signature_delta","signature":""#);
                out.extend_from_slice(current.item.signature_prefix.as_bytes());
                out.extend_from_slice(&current.item.signature);
                out.extend_from_slice(br#""}}"#);
                end(out);
            }
        }
        if let Some(index) = current.index {
            begin(out, "content_block_stop");
            out.extend_from_slice(br#"{"type":"content_block_stop","index":"#);
            write_u64(out, index);
            out.extend_from_slice(b"}");
            end(out);
        }
    }

    /// Makes the next queued item current, writing out every one that is complete already.
    fn advance(&mut self, out: &mut BytesMut) {
        while self.current.is_none() {
            let Some(item) = self.queue.pop_front() else {
                return;
            };
            let done = item.done;
            self.make_current(item, out);
            if done {
                self.close_current(out);
            }
        }
    }
}

/// Writes `content_block_start` for the current item, returning its index.
fn open_block(next_index: &mut u64, current: &mut Current, out: &mut BytesMut) -> u64 {
    let index = *next_index;
    *next_index += 1;
    current.index = Some(index);
    begin(out, "content_block_start");
    out.extend_from_slice(br#"{"type":"content_block_start","index":"#);
    write_u64(out, index);
    out.extend_from_slice(br#","content_block":"#);
    match &current.item.kind {
        Kind::Text => out.extend_from_slice(br#"{"type":"text","text":""}"#),
        Kind::Thinking => {
            out.extend_from_slice(br#"{"type":"thinking","thinking":"","signature":""}"#)
        }
        Kind::Tool { id, name } => {
            out.extend_from_slice(br#"{"type":"tool_use","id":""#);
            out.extend_from_slice(id);
            out.extend_from_slice(br#"","name":""#);
            out.extend_from_slice(name);
            out.extend_from_slice(br#"","input":{}}"#);
        }
    }
    out.extend_from_slice(b"}");
    end(out);
    index
}

fn write_delta_head(out: &mut BytesMut, index: u64) {
    out.extend_from_slice(br#"{"type":"content_block_delta","index":"#);
    write_u64(out, index);
    out.extend_from_slice(br#","delta":"#);
}

fn write_delta(out: &mut BytesMut, index: u64, kind: &Kind, fragment: &[u8]) {
    begin(out, "content_block_delta");
    write_delta_head(out, index);
    out.extend_from_slice(match kind {
        Kind::Text => br#"{"type":"text_delta","text":""#.as_slice(),
        Kind::Thinking => br#"{"type":"thinking_delta","thinking":""#.as_slice(),
        Kind::Tool { .. } => br#"{"type":"input_json_delta","partial_json":""#.as_slice(),
    });
    out.extend_from_slice(fragment);
    out.extend_from_slice(br#""}}"#);
    end(out);
}

fn begin(out: &mut BytesMut, name: &str) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
}

fn end(out: &mut BytesMut) {
    out.extend_from_slice(b"\n\n");
}

/// Writes `n` in decimal without allocating.
pub(crate) fn write_u64(out: &mut BytesMut, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        // `n % 10` is below 10, so the cast keeps it.
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Writes `s` as a JSON string.
pub(crate) fn write_json_str(out: &mut BytesMut, s: &str) {
    let mut buf = Vec::with_capacity(s.len() + 2);
    // Writing a string into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut buf, s);
    out.extend_from_slice(&buf);
}

/// A message id for an upstream that gave none: unique within the process, and unlikely to
/// repeat across processes.
pub(crate) fn generated_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    // Mixing keeps ids made in the same nanosecond by two processes apart more often.
    let mixed = (nanos as u64 ^ u64::from(std::process::id()).rotate_left(40))
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ n;
    format!("{mixed:016x}{n:08x}")
}
