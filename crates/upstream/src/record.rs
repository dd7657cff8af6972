//! `--record FILE`: wraps any upstream and appends every completed exchange to a replay file.
//!
//! Only response bodies, statuses and a few harmless headers are written, never request
//! headers, so tokens and keys cannot end up in a recording. The file is created with mode
//! 0600 because prompts and answers can be private.

use crate::replay::{ReplayEntry, ReplayEvent};
use crate::{Catalog, MessagesCall, Upstream, UpstreamError, UpstreamResponse};
use async_trait::async_trait;
use bytes::Bytes;
use claude_host_protocol::messages::last_user_text;
use claude_host_protocol::sse::EventParser;
use futures::Stream;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// Most bytes of one response kept for recording; larger responses are not recorded.
const MAX_RECORDED_BYTES: usize = 64 * 1024 * 1024;

/// An upstream that records what another one answers.
pub struct RecordingUpstream {
    inner: Arc<dyn Upstream>,
    sink: Arc<Sink>,
}

struct Sink {
    path: PathBuf,
    file: Mutex<std::fs::File>,
}

impl RecordingUpstream {
    /// Records `inner`'s replies into `path` (appending).
    pub fn new(inner: Arc<dyn Upstream>, path: &Path) -> std::io::Result<Self> {
        let mut opts = std::fs::OpenOptions::new();
        opts.create(true).append(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let file = opts.open(path)?;
        Ok(RecordingUpstream {
            inner,
            sink: Arc::new(Sink {
                path: path.to_owned(),
                file: Mutex::new(file),
            }),
        })
    }
}

impl Sink {
    fn write(&self, entry: &ReplayEntry) {
        let mut line = serde_json::to_vec(entry).unwrap_or_default();
        line.push(b'\n');
        let mut f = self
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(e) = f.write_all(&line) {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot append to the recording");
        }
    }
}

#[async_trait]
impl Upstream for RecordingUpstream {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    async fn catalog(&self) -> Result<std::sync::Arc<Catalog>, UpstreamError> {
        self.inner.catalog().await
    }

    async fn messages(&self, call: MessagesCall) -> Result<UpstreamResponse, UpstreamError> {
        let body: Value = serde_json::from_slice(&call.body).unwrap_or(Value::Null);
        let request = json!({
            "model": call.model,
            "stream": call.stream,
            "last_user_text": last_user_text(&body).chars().take(200).collect::<String>(),
        });
        let resp = self.inner.messages(call).await?;
        let headers: BTreeMap<String, String> = resp
            .headers
            .iter()
            .filter(|(k, _)| k == "retry-after")
            .cloned()
            .collect();
        let streamed = resp
            .header("content-type")
            .is_some_and(|c| c.starts_with("text/event-stream"));
        let tee = Tee {
            inner: resp.body,
            buf: Vec::new(),
            overflow: false,
            finished: false,
            meta: Some(Pending {
                sink: self.sink.clone(),
                status: resp.status,
                headers,
                streamed,
                request,
            }),
        };
        Ok(UpstreamResponse {
            status: resp.status,
            headers: resp.headers,
            body: Box::pin(tee),
        })
    }

    fn filters_betas(&self) -> bool {
        self.inner.filters_betas()
    }
}

struct Pending {
    sink: Arc<Sink>,
    status: u16,
    headers: BTreeMap<String, String>,
    streamed: bool,
    request: Value,
}

struct Tee {
    inner: futures::stream::BoxStream<'static, Result<Bytes, UpstreamError>>,
    buf: Vec<u8>,
    overflow: bool,
    finished: bool,
    meta: Option<Pending>,
}

impl Stream for Tee {
    type Item = Result<Bytes, UpstreamError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        match this.inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                if this.buf.len() + chunk.len() <= MAX_RECORDED_BYTES {
                    this.buf.extend_from_slice(&chunk);
                } else {
                    this.overflow = true;
                }
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(None) => {
                this.finished = true;
                this.flush();
                Poll::Ready(None)
            }
            other => other,
        }
    }
}

impl Tee {
    /// Records the exchange if it is complete: the body reached its end, or (for SSE, whose
    /// reader stops at `message_stop` without waiting for the end) `message_stop` was seen.
    /// A failed or abandoned exchange is not recorded: replaying it would mislead.
    fn flush(&mut self) {
        let Some(meta) = self.meta.take() else { return };
        let complete = self.finished
            || (meta.streamed && memchr_find(&self.buf, b"event: message_stop").is_some());
        if self.overflow {
            tracing::warn!("response over 64 MiB not recorded");
        } else if complete {
            record(meta, &self.buf);
        }
    }
}

impl Drop for Tee {
    fn drop(&mut self) {
        self.flush();
    }
}

fn memchr_find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn record(meta: Pending, bytes: &[u8]) {
    let (events, body) = if meta.streamed {
        let mut p = EventParser::new();
        p.push(bytes);
        let events: Vec<ReplayEvent> = std::iter::from_fn(|| p.next_event())
            .filter_map(|e| {
                Some(ReplayEvent {
                    data: serde_json::from_str(&e.data).ok()?,
                    event: e.name,
                })
            })
            .collect();
        (Some(events), None)
    } else {
        let body = serde_json::from_slice(bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()));
        (None, Some(body))
    };
    meta.sink.write(&ReplayEntry {
        match_text: None,
        status: meta.status,
        headers: meta.headers,
        events,
        body,
        repeat: false,
        request: Some(meta.request),
    });
}
