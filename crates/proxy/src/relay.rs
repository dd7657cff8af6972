//! The SSE relay: forwards upstream events as they arrive, rewriting only
//! `message_start.message.model`, sending `ping` events while the upstream is silent, and
//! ending a failed stream with exactly one `error` event (never a made-up `message_stop`).

use crate::ProxyConfig;
use bytes::{Bytes, BytesMut};
use claude_host_protocol::error::{ErrorEnvelope, ErrorKind, status_for_error_type};
use claude_host_protocol::log_safe::Safe;
use claude_host_protocol::messages::Initiator;
use claude_host_protocol::openai::{Step, StreamTranslator};
use claude_host_protocol::request_kind::RequestKind;
use claude_host_protocol::sse::{event_data, event_name, find_event_end, format_event};
use claude_host_upstream::UpstreamError;
use futures::Stream;
use futures::stream::BoxStream;
use http_body_util::StreamBody;
use hyper::body::Frame;
use indexmap::IndexMap;
use serde_json::value::RawValue;
use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

const PING: &[u8] = b"event: ping\ndata: {\"type\": \"ping\"}\n\n";

/// One log line per request, written when the request ends however it ends.
/// How a request was billed, for its log line.
pub(crate) struct Billing {
    pub(crate) initiator: Initiator,
    pub(crate) kind: RequestKind,
    /// The session's counts including this request: (user, agent).
    pub(crate) counts: (u64, u64),
    /// The adaptation rules applied to the body (docs/PROXY.md).
    pub(crate) adapted: Vec<&'static str>,
    /// The upstream model's premium multiplier, when the catalog gives one.
    pub(crate) multiplier: Option<f64>,
}

pub(crate) struct RequestLog {
    _active: crate::ActiveRequest,
    session: String,
    model: String,
    upstream_model: String,
    started: Instant,
    billing: Billing,
    ttfb: Option<Duration>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    /// The Anthropic error type the request failed with, when its status does not say it.
    error: Option<String>,
    done: bool,
}

impl RequestLog {
    pub(crate) fn new(
        active: crate::ActiveRequest,
        session: String,
        model: String,
        upstream_model: String,
        started: Instant,
        billing: Billing,
    ) -> Self {
        RequestLog {
            _active: active,
            session,
            model,
            upstream_model,
            started,
            billing,
            ttfb: None,
            input_tokens: None,
            output_tokens: None,
            error: None,
            done: false,
        }
    }

    /// The request went to another model (the quota fallback), with this multiplier.
    pub(crate) fn set_upstream_model(&mut self, model: &str, multiplier: Option<f64>) {
        model.clone_into(&mut self.upstream_model);
        self.billing.multiplier = multiplier;
    }

    fn mark_first_byte(&mut self) {
        if self.ttfb.is_none() {
            self.ttfb = Some(self.started.elapsed());
            claude_host_trace::mark(claude_host_trace::PROXY_FIRST, &self.session);
        }
    }

    pub(crate) fn set_usage_from_message(&mut self, message: &serde_json::Value) {
        let usage = message.get("usage");
        let get = |k: &str| {
            usage
                .and_then(|u| u.get(k))
                .and_then(serde_json::Value::as_u64)
        };
        if let Some(i) = get("input_tokens") {
            self.input_tokens = Some(
                i + get("cache_read_input_tokens").unwrap_or(0)
                    + get("cache_creation_input_tokens").unwrap_or(0),
            );
        }
        if let Some(o) = get("output_tokens") {
            self.output_tokens = Some(o);
        }
    }

    /// The request failed with this Anthropic error type (counted when it finishes).
    pub(crate) fn set_error(&mut self, kind: &str) {
        self.error = Some(kind.to_owned());
    }

    pub(crate) fn finish(&mut self, status: u16, outcome: &str) {
        if self.done {
            return;
        }
        self.done = true;
        let error = self
            .error
            .take()
            .or_else(|| (status >= 400).then(|| ErrorKind::for_status(status).as_str().to_owned()));
        self._active.telemetry().record(&crate::telemetry::Ended {
            model: &self.model,
            premium: self.billing.initiator == Initiator::User,
            multiplier: self.billing.multiplier,
            kind: &self.billing.kind.to_string(),
            status,
            error: error.as_deref(),
            input_tokens: self.input_tokens.unwrap_or(0),
            output_tokens: self.output_tokens.unwrap_or(0),
        });
        self.mark_first_byte();
        let ttfb_ms = self.ttfb.map_or(0.0, |d| d.as_secs_f64() * 1000.0);
        tracing::info!(
            session = %Safe(&self.session),
            model = %Safe(&self.model),
            upstream_model = %Safe(&self.upstream_model),
            initiator = %self.billing.initiator.as_str(),
            kind = %self.billing.kind,
            session_user_requests = self.billing.counts.0,
            session_agent_requests = self.billing.counts.1,
            adapted = %self.billing.adapted.join(","),
            status,
            ttfb_ms = format!("{ttfb_ms:.1}"),
            duration_ms = format!("{:.1}", self.started.elapsed().as_secs_f64() * 1000.0),
            input_tokens = self.input_tokens.unwrap_or(0),
            output_tokens = self.output_tokens.unwrap_or(0),
            outcome = %Safe(outcome),
            "POST /v1/messages"
        );
    }
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        self.finish(200, "client disconnected");
    }
}

/// How a relay began.
pub(crate) enum RelayStart {
    /// The first event arrived: stream it.
    Stream(Box<Relay>),
    /// The upstream failed before its first event: answer with this JSON error.
    Error {
        status: u16,
        envelope: ErrorEnvelope,
    },
}

pub(crate) struct Relay {
    upstream: BoxStream<'static, Result<Bytes, UpstreamError>>,
    buf: BytesMut,
    scan: usize,
    out: VecDeque<Bytes>,
    requested_model: String,
    ping_interval: Duration,
    idle_timeout: Duration,
    /// When the upstream last sent bytes. The ping timer is not moved on every read (a timer
    /// wheel update per read): when it fires, it is pushed back if bytes came meanwhile.
    last_data: tokio::time::Instant,
    sleep: Pin<Box<tokio::time::Sleep>>,
    events_out: usize,
    first_error: Option<ErrorEnvelope>,
    /// No more upstream reading: `message_stop` or an error was seen.
    finished: bool,
    saw_stop: bool,
    log: RequestLog,
    background: crate::Background,
    /// For a model served on an OpenAI API: turns its events into Anthropic ones.
    translator: Option<Box<StreamTranslator>>,
    /// Upstream bytes taken in the turn `turn` of the connection's task (`crate::turns`).
    turn_bytes: usize,
    turn: u64,
    /// The turn in which the relay last gave way: it stays quiet until the next.
    gave_way_in: u64,
    /// `buf` may hold complete events not yet processed: a read larger than a turn's share
    /// is taken a share at a time, so one large read (an upstream far ahead, a grown read
    /// buffer) delays neither the first byte nor the thread's other work by its whole length.
    backlog: bool,
}

/// Upstream bytes a relay takes in one turn of its task before it gives way to the rest of
/// the thread's work (other relays, requests waiting for their first byte). A turn's output
/// leaves in one socket write: 16 KiB is what hyper buffers before it writes anyway
/// (`CONNECTION_BUFFER`) and one upstream read at most, so giving way adds no write.
const TURN_SHARE: usize = 16 * 1024;

/// How long, and how many bytes, the upstream's rest is read after the relay's end.
const DRAIN_FOR: Duration = Duration::from_secs(2);
const DRAIN_BYTES: usize = 64 * 1024;

impl Relay {
    pub(crate) fn new(
        upstream: BoxStream<'static, Result<Bytes, UpstreamError>>,
        requested_model: String,
        config: &ProxyConfig,
        log: RequestLog,
        background: crate::Background,
    ) -> Self {
        Relay {
            upstream,
            buf: BytesMut::new(),
            scan: 0,
            out: VecDeque::new(),
            requested_model,
            ping_interval: config.ping_interval,
            idle_timeout: config.idle_timeout,
            last_data: tokio::time::Instant::now(),
            sleep: Box::pin(tokio::time::sleep(config.ping_interval)),
            events_out: 0,
            first_error: None,
            finished: false,
            saw_stop: false,
            log,
            background,
            translator: None,
            turn_bytes: 0,
            turn: 0,
            gave_way_in: 0,
            backlog: false,
        }
    }

    /// The upstream speaks an OpenAI API: its events are translated instead of passed on.
    pub(crate) fn translating(mut self, translator: StreamTranslator) -> Self {
        self.translator = Some(Box::new(translator));
        self
    }

    /// Reads until the first event, so that an upstream failure before the stream can still be
    /// answered with a proper HTTP status.
    pub(crate) async fn start(mut self) -> RelayStart {
        let deadline = tokio::time::Instant::now() + self.idle_timeout;
        loop {
            let next =
                tokio::time::timeout_at(deadline, futures::StreamExt::next(&mut self.upstream))
                    .await;
            let fail = |relay: &mut Relay, status: u16, env: ErrorEnvelope| {
                relay.log.set_error(&env.error.kind);
                relay.log.finish(status, &env.error.message);
                RelayStart::Error {
                    status,
                    envelope: env,
                }
            };
            match next {
                Err(_) => {
                    let env = ErrorEnvelope::new(
                        ErrorKind::Api,
                        format!(
                            "upstream sent nothing for {} s",
                            self.idle_timeout.as_secs()
                        ),
                    );
                    return fail(&mut self, 504, env);
                }
                Ok(None) => {
                    let env = ErrorEnvelope::new(
                        ErrorKind::Api,
                        "upstream closed the stream before sending any event",
                    );
                    return fail(&mut self, 502, env);
                }
                Ok(Some(Err(e))) => {
                    let env = ErrorEnvelope::new(ErrorKind::Api, e.to_string());
                    return fail(&mut self, 502, env);
                }
                Ok(Some(Ok(chunk))) => {
                    self.append(chunk);
                    // Event by event until there is something to send: the rest of the read
                    // is processed once the first frame is on its way.
                    while self.out.is_empty() && !self.finished && self.process(1) > 0 {}
                    if self.events_out == 0
                        && let Some(env) = self.first_error.take()
                    {
                        let status = status_for_error_type(&env.error.kind);
                        return fail(&mut self, status, env);
                    }
                    if !self.out.is_empty() || self.finished {
                        self.log.mark_first_byte();
                        let now = tokio::time::Instant::now();
                        self.last_data = now;
                        self.sleep.as_mut().reset(now + self.ping_interval);
                        // The first events leave at once. hyper writes the response head with
                        // the first frames only when the body pauses or its buffer is full, and
                        // an upstream that is ahead of the relay never lets it pause: the
                        // client's first byte waited for 16 KiB of output. Counted as a full
                        // share of this turn, the relay gives way after its first frame.
                        self.turn = crate::turns::current();
                        self.turn_bytes = usize::MAX;
                        return RelayStart::Stream(Box::new(self));
                    }
                }
            }
        }
    }

    /// Adds upstream bytes. A read that starts on an event boundary (the usual case) becomes the
    /// buffer itself: the upstream client hands out each read in an allocation of its own size,
    /// so the frames cut from it pin no more memory than they hold while they wait in the
    /// client connection's queue. Appending it to a long-lived buffer instead made every queued
    /// frame pin a buffer-sized allocation (docs/BENCHMARKS.md, "Memory at 512 streams").
    fn append(&mut self, chunk: Bytes) {
        if self.buf.is_empty() {
            match chunk.try_into_mut() {
                Ok(owned) => self.buf = owned,
                Err(shared) => self.buf = BytesMut::from(&shared[..]),
            }
            return;
        }
        self.buf.extend_from_slice(&chunk);
    }

    pub(crate) fn into_body(self) -> StreamBody<RelayStream> {
        StreamBody::new(RelayStream(Box::new(self)))
    }

    /// Turns the complete events in `buf` into output until `limit` bytes of them are taken
    /// (at least one event); the bytes taken. Events left over are marked in `backlog`.
    /// Consecutive pass-through events leave as one zero-copy slice of the upstream bytes.
    fn process(&mut self, limit: usize) -> usize {
        if self.translator.is_some() {
            return self.process_translated(limit);
        }
        let mut pass_end = 0;
        let mut taken = 0;
        self.backlog = false;
        loop {
            if self.finished {
                break;
            }
            if taken >= limit {
                self.backlog = true;
                break;
            }
            let end = match find_event_end(&self.buf[pass_end..], self.scan) {
                Ok(e) => pass_end + e,
                Err(resume) => {
                    self.scan = resume;
                    break;
                }
            };
            self.scan = 0;
            taken += end - pass_end;
            let raw = &self.buf[pass_end..end];
            match event_name(raw) {
                Some(b"message_start") => {
                    match rewrite_message_start(
                        &event_data(raw),
                        &self.requested_model,
                        &mut self.log,
                    ) {
                        Some(replaced) => self.replace(&mut pass_end, end, Some(replaced)),
                        // Not JSON: forwarded as received (written out again, data spread
                        // over several `data:` lines would lose all but the first).
                        None => pass_end = end,
                    }
                    self.events_out += 1;
                }
                Some(b"message_delta") => {
                    note_delta_usage(raw, &mut self.log);
                    pass_end = end;
                    self.events_out += 1;
                }
                Some(b"message_stop") => {
                    pass_end = end;
                    self.events_out += 1;
                    self.saw_stop = true;
                    self.finished = true;
                }
                Some(b"error") => {
                    let data = event_data(raw);
                    let env = ErrorEnvelope::parse(&data).unwrap_or_else(|| {
                        ErrorEnvelope::new(
                            ErrorKind::Api,
                            String::from_utf8_lossy(&data).into_owned(),
                        )
                    });
                    let frame = error_frame(&env);
                    self.first_error = Some(env);
                    self.replace(&mut pass_end, end, Some(frame));
                    self.finished = true;
                }
                _ if event_data(raw).as_ref() == b"[DONE]" => {
                    // OpenAI's terminator is not part of the Anthropic stream.
                    self.replace(&mut pass_end, end, None);
                }
                _ => {
                    pass_end = end;
                    self.events_out += 1;
                }
            }
        }
        if pass_end > 0 {
            self.out.push_back(self.buf.split_to(pass_end).freeze());
        }
        if self.finished {
            // Anything after `message_stop` or an error is not forwarded.
            self.buf.clear();
            self.backlog = false;
        }
        taken
    }

    /// `process` for a translated stream: what the events taken in one call become leaves as
    /// one frame.
    fn process_translated(&mut self, limit: usize) -> usize {
        let Some(translator) = self.translator.as_mut() else {
            return 0;
        };
        let mut out = BytesMut::new();
        let mut start = 0;
        let mut failed = None;
        self.backlog = false;
        while !self.finished {
            if start >= limit {
                self.backlog = true;
                break;
            }
            let end = match find_event_end(&self.buf[start..], self.scan) {
                Ok(e) => start + e,
                Err(resume) => {
                    self.scan = resume;
                    break;
                }
            };
            self.scan = 0;
            let raw = &self.buf[start..end];
            let step = translator.push(event_name(raw), &event_data(raw), &mut out);
            start = end;
            match step {
                Step::Continue => {}
                Step::Done => {
                    self.saw_stop = true;
                    self.finished = true;
                }
                Step::Failed(env) => {
                    failed = Some(env);
                    self.finished = true;
                }
            }
        }
        let _ = self.buf.split_to(start);
        if !out.is_empty() {
            self.events_out += 1;
            self.out.push_back(out.freeze());
        }
        if let Some(env) = failed {
            self.out.push_back(error_frame(&env));
            self.first_error = Some(env);
        }
        if self.finished {
            self.note_translated_usage();
            self.buf.clear();
            self.backlog = false;
        }
        start
    }

    /// The usage a translator read, for the request's log line.
    fn note_translated_usage(&mut self) {
        if let Some(t) = &self.translator {
            let (input, output) = t.usage();
            self.log.input_tokens = input.or(self.log.input_tokens);
            self.log.output_tokens = output.or(self.log.output_tokens);
        }
    }

    /// The upstream's body ended before the stream was complete: a translator may still
    /// finish it (Chat Completions can end on its last chunk without `[DONE]`).
    fn upstream_ended(&mut self) {
        let Some(translator) = self.translator.as_mut() else {
            self.fail_stream("upstream ended the stream before message_stop".to_owned());
            return;
        };
        let mut out = BytesMut::new();
        match translator.end_of_stream(&mut out) {
            Step::Done => {
                if !out.is_empty() {
                    self.events_out += 1;
                    self.out.push_back(out.freeze());
                }
                self.saw_stop = true;
                self.finished = true;
                self.note_translated_usage();
            }
            Step::Continue => {
                self.fail_stream("upstream ended the stream before it was complete".to_owned())
            }
            Step::Failed(env) => {
                if !out.is_empty() {
                    self.out.push_back(out.freeze());
                }
                self.fail_with(env);
            }
        }
    }

    /// Flushes pass-through bytes before the event at `[*pass_end, end)`, drops that event and
    /// queues `with` in its place.
    fn replace(&mut self, pass_end: &mut usize, end: usize, with: Option<Bytes>) {
        if *pass_end > 0 {
            self.out.push_back(self.buf.split_to(*pass_end).freeze());
        }
        let _ = self.buf.split_to(end - *pass_end);
        *pass_end = 0;
        if let Some(b) = with {
            self.out.push_back(b);
        }
    }

    /// After `message_stop`, the rest of the upstream body
    /// (its last chunk, usually) is read in the background: a body read to its end keeps its
    /// connection alive for the next request, where dropping it closes the connection.
    fn release_upstream(&mut self) {
        let mut upstream: BoxStream<'static, Result<Bytes, UpstreamError>> =
            Box::pin(futures::stream::empty());
        std::mem::swap(&mut upstream, &mut self.upstream);
        // Most often the end came with the last event.
        let mut cx = Context::from_waker(std::task::Waker::noop());
        if let Poll::Ready(None) = upstream.as_mut().poll_next(&mut cx) {
            return;
        }
        let crate::Background { tracker, cancel } = self.background.clone();
        tracker.spawn(async move {
            let drain = async {
                let mut read = 0;
                while let Some(Ok(rest)) = futures::StreamExt::next(&mut upstream).await {
                    read += rest.len();
                    if read > DRAIN_BYTES {
                        return;
                    }
                }
            };
            tokio::select! {
                () = cancel.cancelled() => {}
                _ = tokio::time::timeout(DRAIN_FOR, drain) => {}
            }
        });
    }

    fn fail_stream(&mut self, message: String) {
        self.fail_with(ErrorEnvelope::new(ErrorKind::Api, message));
    }

    fn fail_with(&mut self, env: ErrorEnvelope) {
        tracing::warn!(session = %Safe(&self.log.session), error = %Safe(&env.error.message), "stream failed");
        self.out.push_back(error_frame(&env));
        self.first_error = Some(env);
        self.finished = true;
        self.buf.clear();
    }

    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        loop {
            if let Some(b) = self.out.pop_front() {
                return Poll::Ready(Some(b));
            }
            if self.finished {
                let outcome = match (&self.first_error, self.saw_stop) {
                    (Some(e), _) => {
                        self.log.set_error(&e.error.kind);
                        format!("stream error: {}", e.error.message)
                    }
                    (None, true) => "ok".to_owned(),
                    (None, false) => "ended".to_owned(),
                };
                self.log.finish(200, &outcome);
                // A stream that failed is abandoned: its upstream connection closes.
                if self.saw_stop {
                    self.release_upstream();
                }
                return Poll::Ready(None);
            }
            let turn = crate::turns::current();
            if turn != 0 && turn == self.turn && self.turn_bytes >= TURN_SHARE {
                if self.gave_way_in != turn {
                    self.gave_way_in = turn;
                    give_way(cx);
                }
                return Poll::Pending;
            }
            if turn != self.turn {
                self.turn = turn;
                self.turn_bytes = 0;
            }
            if self.backlog {
                let taken = self.process(TURN_SHARE);
                self.turn_bytes = self.turn_bytes.saturating_add(taken);
                continue;
            }
            match self.upstream.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    self.last_data = tokio::time::Instant::now();
                    self.append(chunk);
                    let taken = self.process(TURN_SHARE);
                    self.turn_bytes = self.turn_bytes.saturating_add(taken);
                }
                Poll::Ready(Some(Err(e))) => {
                    self.fail_stream(format!("upstream connection failed mid-stream: {e}"))
                }
                Poll::Ready(None) => self.upstream_ended(),
                Poll::Pending => {
                    if self.sleep.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    let now = tokio::time::Instant::now();
                    let quiet = now.saturating_duration_since(self.last_data);
                    if quiet < self.ping_interval {
                        // Bytes came since the timer was set: wait out the rest of the interval.
                        let deadline = self.last_data + self.ping_interval;
                        self.sleep.as_mut().reset(deadline);
                        continue;
                    }
                    if quiet >= self.idle_timeout {
                        self.fail_stream(format!(
                            "upstream sent nothing for {} s",
                            quiet.as_secs()
                        ));
                        continue;
                    }
                    self.sleep.as_mut().reset(now + self.ping_interval);
                    // A ping only ever goes between events: partial upstream bytes stay buffered.
                    return Poll::Ready(Some(Bytes::from_static(PING)));
                }
            }
        }
    }
}

/// Arranges for the task to be polled again after the work that is ready now, and after the
/// I/O that became ready meanwhile (tokio's `yield_now`: the wake-up is deferred until the
/// scheduler has looked at its sockets), rather than at once.
fn give_way(cx: &mut Context<'_>) {
    let yielded = std::pin::pin!(tokio::task::yield_now()).poll(cx);
    debug_assert!(yielded.is_pending());
}

/// `message_start` with `message.model` set to the client's id and every other byte of its
/// data as the upstream sent it (numbers, escapes, key order), or `None` when it has no
/// `message` object to rewrite: then it passes untouched rather than be lost.
fn rewrite_message_start(
    data: &[u8],
    requested_model: &str,
    log: &mut RequestLog,
) -> Option<Bytes> {
    // Raw values, not `serde_json::Value`: re-serializing a value rewrote numbers (a large
    // integer became a float that had lost digits) and escapes.
    type Fields = IndexMap<String, Box<RawValue>>;
    let mut top: Fields = serde_json::from_slice(data).ok()?;
    let raw_message = top.get("message")?;
    let mut message: Fields = serde_json::from_str(raw_message.get()).ok()?;
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(raw_message.get()) {
        log.set_usage_from_message(&v);
    }
    message.insert(
        "model".to_owned(),
        serde_json::value::to_raw_value(requested_model).ok()?,
    );
    top.insert(
        "message".to_owned(),
        serde_json::value::to_raw_value(&message).ok()?,
    );
    let mut out = serde_json::to_vec(&top).ok()?;
    // The upstream's whitespace inside values is kept, and a line break there would end the
    // `data:` line early; in JSON text a raw line break can only be whitespace.
    out.retain(|b| !matches!(b, b'\n' | b'\r'));
    Some(format_event("message_start", &out))
}

fn note_delta_usage(raw: &[u8], log: &mut RequestLog) {
    #[derive(serde::Deserialize)]
    struct Delta {
        #[serde(default)]
        usage: Option<Usage>,
    }
    #[derive(serde::Deserialize)]
    struct Usage {
        #[serde(default)]
        output_tokens: Option<u64>,
    }
    if let Ok(d) = serde_json::from_slice::<Delta>(&event_data(raw))
        && let Some(o) = d.usage.and_then(|u| u.output_tokens)
    {
        log.output_tokens = Some(o);
    }
}

fn error_frame(env: &ErrorEnvelope) -> Bytes {
    format_event("error", &env.to_json())
}

/// The relay as a body stream.
pub(crate) struct RelayStream(Box<Relay>);

impl Stream for RelayStream {
    type Item = Result<Frame<Bytes>, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_event(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    }
}

use std::future::Future;

#[cfg(test)]
mod tests {
    use super::*;
    use claude_host_protocol::request_kind::RequestKind;
    use std::sync::Arc;

    /// A relay of `chunks`, all ready at once: an upstream far ahead of the relay.
    fn relay_of(chunks: Vec<Bytes>) -> Relay {
        let state = crate::State::detached(
            ProxyConfig::default(),
            std::net::SocketAddr::from(([127, 0, 0, 1], 8080)),
            crate::Nonce::generate(),
            Arc::new(claude_host_upstream::signed_out::SignedOut),
        );
        let log = RequestLog::new(
            crate::ActiveRequest::new(&state),
            "s".into(),
            "m".into(),
            "m".into(),
            Instant::now(),
            Billing {
                initiator: Initiator::Agent,
                kind: RequestKind::ToolResult,
                counts: (0, 1),
                adapted: Vec::new(),
                multiplier: None,
            },
        );
        Relay::new(
            Box::pin(futures::stream::iter(chunks.into_iter().map(Ok))),
            "m".into(),
            &state.config,
            log,
            state.background.clone(),
        )
    }

    /// `n` upstream reads of ten `text_delta` events each, then `message_stop`.
    fn stream(reads: usize) -> (Vec<Bytes>, usize) {
        let event = b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"w1 \"}}\n\n";
        let read: Vec<u8> = event.repeat(10);
        let mut chunks: Vec<Bytes> = (0..reads).map(|_| Bytes::from(read.clone())).collect();
        chunks.push(Bytes::from_static(
            b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        ));
        let total = chunks.iter().map(Bytes::len).sum();
        (chunks, total)
    }

    /// Polls `relay` as hyper does in one turn of its connection's task: frames until
    /// `Pending` (and once more after it); the bytes it gave, and whether it ended.
    fn one_turn(relay: &mut Relay, cx: &mut Context<'_>) -> (usize, bool) {
        crate::turns::within(|| {
            let mut bytes = 0;
            loop {
                match relay.poll_event(cx) {
                    Poll::Ready(Some(b)) => bytes += b.len(),
                    Poll::Ready(None) => return (bytes, true),
                    Poll::Pending => {
                        // hyper may poll a body again within the same turn.
                        assert!(relay.poll_event(cx).is_pending());
                        return (bytes, false);
                    }
                }
            }
        })
    }

    /// `one_turn` until the relay ends: the bytes of each turn, after those in `turns`.
    fn turns_to_the_end(
        relay: &mut Relay,
        cx: &mut Context<'_>,
        mut turns: Vec<usize>,
    ) -> Vec<usize> {
        loop {
            let (bytes, ended) = one_turn(relay, cx);
            turns.push(bytes);
            if ended {
                return turns;
            }
            assert!(turns.len() < 10_000, "the relay never ended");
        }
    }

    /// The handler's turn as hyper runs it: the relay starts on ready bytes, its first frame
    /// is taken and the body is polled again. The first frame's length, what that second poll
    /// gave, and the relay.
    fn start_in_one_turn(relay: Relay) -> (usize, Poll<Option<usize>>, Box<Relay>) {
        crate::turns::within(|| {
            let mut start = std::pin::pin!(relay.start());
            let mut cx = Context::from_waker(std::task::Waker::noop());
            let Poll::Ready(RelayStart::Stream(mut relay)) = start.as_mut().poll(&mut cx) else {
                panic!("the relay did not start on ready bytes");
            };
            let first = match relay.poll_event(&mut cx) {
                Poll::Ready(Some(b)) => b.len(),
                other => panic!("no first frame: {other:?}"),
            };
            let again = relay.poll_event(&mut cx).map(|b| b.map(|b| b.len()));
            (first, again, relay)
        })
    }

    #[tokio::test]
    async fn a_relay_whose_upstream_is_ahead_gives_way_after_its_share_of_a_turn() {
        let (chunks, total) = stream(200);
        let read = chunks[0].len();
        let mut relay = relay_of(chunks);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let turns = turns_to_the_end(&mut relay, &mut cx, Vec::new());
        assert_eq!(turns.iter().sum::<usize>(), total, "every byte relayed");
        // Without giving way, hyper would have taken the whole stream (260 KB) in one turn.
        let most = turns.iter().copied().max().unwrap_or(0);
        assert!(
            most <= TURN_SHARE + read,
            "a turn relayed {most} bytes, more than its share {} and one read",
            TURN_SHARE
        );
        assert!(turns.len() >= total / (TURN_SHARE + read));
    }

    #[tokio::test]
    async fn the_first_frame_leaves_before_the_relay_takes_more() {
        let (chunks, _) = stream(50);
        let read = chunks[0].len();
        let (started, rest, _) = start_in_one_turn(relay_of(chunks));
        assert_eq!(started, read / 10, "the first event is the first frame");
        assert_eq!(rest, Poll::Pending, "the relay waits for its next turn");
    }

    #[tokio::test]
    async fn one_large_read_is_taken_a_share_at_a_time_after_its_first_event() {
        // The whole stream in one read: what an upstream far ahead of the relay gives once
        // the upstream connection's read buffer has grown.
        let (chunks, total) = stream(200);
        let event = chunks[0].len() / 10;
        let whole = Bytes::from(chunks.concat());
        let (first, again, mut relay) = start_in_one_turn(relay_of(vec![whole]));
        assert!(again.is_pending(), "it gives way after its first frame");
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert_eq!(
            first, event,
            "the first frame waited for no more than its event"
        );
        let turns = turns_to_the_end(&mut relay, &mut cx, vec![first]);
        assert_eq!(turns.iter().sum::<usize>(), total, "every byte relayed");
        let most = turns.iter().copied().max().unwrap_or(0);
        assert!(
            most <= TURN_SHARE + event,
            "a turn relayed {most} bytes of one read, more than its share {TURN_SHARE} and one event"
        );
    }

    #[tokio::test]
    async fn outside_a_numbered_turn_nothing_gives_way() {
        let (chunks, total) = stream(200);
        let mut relay = relay_of(chunks);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut bytes = 0;
        loop {
            match relay.poll_event(&mut cx) {
                Poll::Ready(Some(b)) => bytes += b.len(),
                Poll::Ready(None) => break,
                Poll::Pending => panic!("a relay outside a turn must not pause"),
            }
        }
        assert_eq!(bytes, total);
    }
}
