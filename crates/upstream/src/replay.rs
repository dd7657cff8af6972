//! The replay upstream: answers from a JSONL file of recorded responses, with no network.
//!
//! Each non-blank line not starting with `#` is one [`ReplayEntry`]. A request is answered by
//! the first unused entry whose `match` (if any) is a substring of the request's last user
//! message; entries are used once unless `repeat` is set. The format is documented in
//! `docs/REPLAY.md`.

use crate::{Catalog, CatalogModel, MessagesCall, Upstream, UpstreamError, UpstreamResponse};
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use claude_host_protocol::messages::last_user_text;
use claude_host_protocol::sse::format_event;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

/// One recorded response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayEntry {
    /// Only answer requests whose last user message contains this text.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub match_text: Option<String>,
    /// HTTP status (default 200).
    #[serde(default = "ok_status")]
    pub status: u16,
    /// Extra response headers (e.g. `retry-after`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// A streamed reply: the SSE events in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<ReplayEvent>>,
    /// A JSON reply (a message, or an error envelope with a non-200 status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// Serve this entry for every matching request instead of once.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub repeat: bool,
    /// What was asked, for people reading the file (ignored when replaying).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Value>,
}

fn ok_status() -> u16 {
    200
}

/// One SSE event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayEvent {
    /// The event name (`message_start`, …).
    pub event: String,
    /// The event's JSON data.
    pub data: Value,
}

/// Errors loading a replay file.
#[derive(Debug, thiserror::Error)]
pub enum ReplayLoadError {
    /// The file cannot be read.
    #[error("cannot read replay file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A line is not a valid entry.
    #[error("replay file {path}, line {line}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// Parses replay entries from JSONL text.
pub fn parse_entries(text: &str, path: &str) -> Result<Vec<ReplayEntry>, ReplayLoadError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let entry: ReplayEntry =
            serde_json::from_str(line).map_err(|e| ReplayLoadError::Invalid {
                path: path.to_owned(),
                line: i + 1,
                message: e.to_string(),
            })?;
        if entry.events.is_none() && entry.body.is_none() {
            return Err(ReplayLoadError::Invalid {
                path: path.to_owned(),
                line: i + 1,
                message: "an entry needs `events` (streamed) or `body` (JSON)".into(),
            });
        }
        out.push(entry);
    }
    Ok(out)
}

/// The replay upstream.
#[derive(Debug)]
pub struct ReplayUpstream {
    entries: Mutex<Vec<(ReplayEntry, bool)>>,
}

impl ReplayUpstream {
    /// Loads a replay file.
    pub fn load(path: &Path) -> Result<Self, ReplayLoadError> {
        let text = std::fs::read_to_string(path).map_err(|source| ReplayLoadError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Ok(Self::from_entries(parse_entries(
            &text,
            &path.display().to_string(),
        )?))
    }

    /// A replay upstream over entries.
    pub fn from_entries(entries: Vec<ReplayEntry>) -> Self {
        ReplayUpstream {
            entries: Mutex::new(entries.into_iter().map(|e| (e, false)).collect()),
        }
    }

    fn take(&self, last_user: &str) -> Option<ReplayEntry> {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (entry, used) = entries.iter_mut().find(|(e, used)| {
            (!*used || e.repeat)
                && e.match_text
                    .as_deref()
                    .is_none_or(|m| last_user.contains(m))
        })?;
        *used = true;
        Some(entry.clone())
    }
}

#[async_trait]
impl Upstream for ReplayUpstream {
    fn name(&self) -> &'static str {
        "replay"
    }

    async fn catalog(&self) -> Result<std::sync::Arc<Catalog>, UpstreamError> {
        let mut ids: Vec<String> = Vec::new();
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (e, _) in entries.iter() {
            let model = e
                .events
                .as_ref()
                .and_then(|ev| ev.first())
                .and_then(|ev| ev.data.pointer("/message/model"))
                .or_else(|| e.body.as_ref().and_then(|b| b.get("model")))
                .and_then(Value::as_str);
            if let Some(m) = model
                && !ids.iter().any(|i| i == m)
            {
                ids.push(m.to_owned());
            }
        }
        Ok(std::sync::Arc::new(Catalog {
            models: ids
                .into_iter()
                .enumerate()
                .map(|(i, id)| CatalogModel {
                    sdk_id: id.clone(),
                    display_name: format!("{id} (replay)"),
                    upstream_id: id,
                    effort_levels: Vec::new(),
                    is_default: i == 0,
                    max_prompt_tokens: None,
                    max_output_tokens: None,
                    max_context_window: None,
                    // Every Claude model reads images.
                    supports_vision: true,
                    ..CatalogModel::default()
                })
                .collect(),
            strict: false,
        }))
    }

    async fn messages(&self, call: MessagesCall) -> Result<UpstreamResponse, UpstreamError> {
        let body: Value = serde_json::from_slice(&call.body).unwrap_or(Value::Null);
        let last = last_user_text(&body);
        let entry = self.take(&last).ok_or_else(|| {
            UpstreamError::Replay(format!(
                "no recorded response left for a request whose last user message is {:?}",
                last.chars().take(120).collect::<String>()
            ))
        })?;
        let mut headers: Vec<(String, String)> = entry
            .headers
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
            .collect();
        let (content_type, bytes) = match (&entry.events, &entry.body, call.stream) {
            (Some(events), _, true) => ("text/event-stream", sse_bytes(events)),
            (Some(events), _, false) => (
                "application/json",
                Bytes::from(assemble_message(events).to_string()),
            ),
            (None, Some(body), _) => ("application/json", Bytes::from(body.to_string())),
            (None, None, _) => {
                return Err(UpstreamError::Replay(
                    "entry has neither events nor body".into(),
                ));
            }
        };
        headers.push(("content-type".to_owned(), content_type.to_owned()));
        Ok(UpstreamResponse {
            status: entry.status,
            headers,
            body: Box::pin(futures::stream::once(async move { Ok(bytes) })),
        })
    }
}

fn sse_bytes(events: &[ReplayEvent]) -> Bytes {
    let mut out = BytesMut::new();
    for e in events {
        out.extend_from_slice(&format_event(&e.event, e.data.to_string().as_bytes()));
    }
    out.freeze()
}

/// Builds the non-streaming message equivalent to a list of SSE events.
pub fn assemble_message(events: &[ReplayEvent]) -> Value {
    let mut message = json!({});
    let mut blocks: Vec<Value> = Vec::new();
    let mut partial_json: BTreeMap<usize, String> = BTreeMap::new();
    for e in events {
        let d = &e.data;
        let index = d.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
        match e.event.as_str() {
            "message_start" => message = d.get("message").cloned().unwrap_or_else(|| json!({})),
            "content_block_start" => {
                if blocks.len() <= index {
                    blocks.resize(index + 1, Value::Null);
                }
                blocks[index] = d.get("content_block").cloned().unwrap_or(Value::Null);
            }
            "content_block_delta" => {
                let Some(block) = blocks.get_mut(index) else {
                    continue;
                };
                let delta = d.get("delta").cloned().unwrap_or(Value::Null);
                let append = |block: &mut Value, key: &str, piece: Option<&Value>| {
                    let piece = piece.and_then(Value::as_str).unwrap_or("");
                    let cur = block
                        .get(key)
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned();
                    block[key] = Value::String(cur + piece);
                };
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => append(block, "text", delta.get("text")),
                    Some("thinking_delta") => append(block, "thinking", delta.get("thinking")),
                    Some("signature_delta") => append(block, "signature", delta.get("signature")),
                    Some("input_json_delta") => partial_json.entry(index).or_default().push_str(
                        delta
                            .get("partial_json")
                            .and_then(Value::as_str)
                            .unwrap_or(""),
                    ),
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(delta) = d.get("delta").and_then(Value::as_object) {
                    for (k, v) in delta {
                        message[k] = v.clone();
                    }
                }
                if let Some(usage) = d.get("usage").and_then(Value::as_object) {
                    for (k, v) in usage {
                        message["usage"][k] = v.clone();
                    }
                }
            }
            _ => {}
        }
    }
    for (index, json_text) in partial_json {
        if let (Some(block), Ok(input)) = (
            blocks.get_mut(index),
            serde_json::from_str::<Value>(&json_text),
        ) {
            block["input"] = input;
        }
    }
    message["content"] = Value::Array(blocks.into_iter().filter(|b| !b.is_null()).collect());
    message
}
