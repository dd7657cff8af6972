//! An HTTP/1.1 client for model calls that reads the response body in the caller's task.
//!
//! hyper's client decodes a response body in a connection task of its own and hands it over
//! through a channel one chunk at a time, so every chunk costs a task switch on both sides;
//! upstreams send each SSE event as its own chunk, which made that the relay's main cost
//! (docs/BENCHMARKS.md, "Proxy under realistic pacing"). Here the body stream owns its
//! connection: a poll reads the socket once and decodes every chunk the read holds, so ten
//! events that arrive together leave as one item.
//!
//! Connections come from the same rustls connector as before (ALPN offers HTTP/1.1 only) and
//! are kept alive: a body read to its end puts its connection back in a small pool, and a
//! pooled connection that the server closed meanwhile is noticed before it is used.

use crate::chunked::{ChunkError, ChunkedDecoder};
use crate::stream_client::StreamReply;
use crate::{UpstreamError, describe_chain};
use bytes::{Bytes, BytesMut};
use futures::Stream;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};

/// The connector: TCP (TCP_NODELAY, connect timeout) with TLS for `https` URLs.
pub(crate) type Https = hyper_rustls::HttpsConnector<HttpConnector>;

type Io = TokioIo<hyper_rustls::MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>>;

/// A body's socket read takes at most this much (a TLS record's plaintext). The buffer is
/// shared by the streams of a thread, so its size costs nothing per stream.
const READ_BUF: usize = 16 * 1024;

/// First size of the buffer a response head is read into.
const HEAD_BUF: usize = 2048;

/// Largest response head accepted.
const MAX_HEAD: usize = 64 * 1024;

/// Most header fields in a response head.
const MAX_HEADERS: usize = 128;

/// A request body up to this size goes out in the same write as the head.
const INLINE_BODY: usize = 256 * 1024;

/// Why a call or its body failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum H1Error {
    /// The connection could not be made (DNS, TCP, TLS).
    #[error("{0}")]
    Connect(String),
    /// Reading or writing the connection failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The connection closed before a response arrived.
    #[error("the connection closed before a response arrived")]
    ClosedBeforeResponse,
    /// The response head is not HTTP/1.x.
    #[error("malformed response head: {0}")]
    Head(String),
    /// The response head is larger than [`MAX_HEAD`].
    #[error("the response head is larger than {MAX_HEAD} bytes")]
    HeadTooLarge,
    /// The chunked body's framing is broken.
    #[error("malformed chunked body: {0}")]
    Chunked(ChunkError),
    /// The connection closed before a chunked body ended.
    #[error("the connection closed before the end of the body: {0}")]
    Cut(ChunkError),
    /// The connection closed before `Content-Length` bytes arrived.
    #[error("the connection closed after {got} of {want} body bytes")]
    Short {
        /// Bytes received.
        got: u64,
        /// Bytes announced.
        want: u64,
    },
}

impl From<H1Error> for UpstreamError {
    fn from(e: H1Error) -> Self {
        match e {
            H1Error::Head(_) | H1Error::HeadTooLarge | H1Error::Chunked(_) => {
                UpstreamError::Protocol(e.to_string())
            }
            H1Error::Io(io) => UpstreamError::Transport(describe_chain(&io)),
            other => UpstreamError::Transport(other.to_string()),
        }
    }
}

/// The HTTP/1.1 client. Cheap to clone; clones share the pool.
#[derive(Clone)]
pub(crate) struct H1Client {
    connector: Https,
    pool: Arc<Pool>,
}

impl H1Client {
    /// A client connecting through `connector`, keeping up to `max_idle` idle connections per
    /// host for `idle_timeout`.
    pub(crate) fn new(connector: Https, max_idle: usize, idle_timeout: Duration) -> Self {
        H1Client {
            connector,
            pool: Arc::new(Pool {
                state: Mutex::new(PoolState::default()),
                max_idle,
                idle_timeout,
            }),
        }
    }

    /// Idle connections held now (for tests).
    #[cfg(test)]
    pub(crate) fn idle_connections(&self) -> usize {
        self.pool.lock().idle.values().map(Vec::len).sum()
    }

    /// `POST uri` with `headers` and `body`: the status and headers, with the body to read.
    #[cfg(test)]
    pub(crate) async fn post(
        &self,
        uri: &http::Uri,
        headers: &http::HeaderMap,
        body: &Bytes,
    ) -> Result<StreamReply, H1Error> {
        self.send(Encoded::new(uri, headers, body)).await
    }

    /// Sends a request encoded beforehand, so that its header map is not kept while the
    /// connection is made and the response awaited (hundreds of requests wait at once).
    pub(crate) async fn send(&self, request: Encoded) -> Result<StreamReply, H1Error> {
        let Encoded {
            uri,
            key,
            head,
            rest,
        } = request;
        let mut use_pool = true;
        loop {
            let pooled = if use_pool {
                self.pool.checkout(&key)
            } else {
                None
            };
            let reused = pooled.is_some();
            let mut io = match pooled {
                Some(io) => io,
                None => self.connect(&uri).await?,
            };
            match exchange(&mut io, &head, &rest).await {
                Ok((response, buf)) => {
                    return Ok(response.into_reply(io, buf, (self.pool.clone(), key)));
                }
                // A kept-alive connection can be closed by the server just as it is reused;
                // with no byte of a response, the request is sent again on a new connection
                // (once: a new connection failing the same way is a real failure).
                Err(Failure { error, stale: true }) if reused => {
                    tracing::debug!(error = %error, "a reused upstream connection was closed; retrying on a new one");
                    use_pool = false;
                }
                Err(Failure { error, .. }) => return Err(error),
            }
        }
    }

    /// Opens a connection to `uri`'s host ahead of a request and keeps it in the pool, unless
    /// one is idle there already: the request that follows skips the connect (and the TLS
    /// handshake).
    pub(crate) async fn preconnect(&self, uri: &http::Uri) -> Result<(), H1Error> {
        let key = pool_key(uri);
        if self
            .pool
            .lock()
            .idle
            .get(&key)
            .is_some_and(|l| !l.is_empty())
        {
            return Ok(());
        }
        let io = self.connect(uri).await?;
        self.pool.checkin(key, io);
        Ok(())
    }

    async fn connect(&self, uri: &http::Uri) -> Result<Io, H1Error> {
        use tower_service::Service;
        let mut connector = self.connector.clone();
        futures::future::poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(|e| H1Error::Connect(describe_chain(&*e)))?;
        let io = connector
            .call(uri.clone())
            .await
            .map_err(|e| H1Error::Connect(describe_chain(&*e)))?;
        Ok(TokioIo::new(io))
    }
}

/// A request in its wire form: the head (with the body, when small) and the pool key.
pub(crate) struct Encoded {
    uri: http::Uri,
    key: String,
    head: Vec<u8>,
    /// A body too large to copy into the head, written after it.
    rest: Bytes,
}

impl Encoded {
    pub(crate) fn new(uri: &http::Uri, headers: &http::HeaderMap, body: &Bytes) -> Encoded {
        let key = pool_key(uri);
        let mut head = encode_head(uri, headers, body.len());
        let rest = if body.len() <= INLINE_BODY {
            head.extend_from_slice(body);
            Bytes::new()
        } else {
            body.clone()
        };
        Encoded {
            uri: uri.clone(),
            key,
            head,
            rest,
        }
    }
}

/// Which pooled connections can serve `uri`: its scheme and authority.
fn pool_key(uri: &http::Uri) -> String {
    format!(
        "{}://{}",
        uri.scheme_str().unwrap_or("http"),
        uri.authority().map_or("", |a| a.as_str())
    )
}

/// A failed exchange; `stale` when no byte of a response arrived (the request may be sent
/// again on another connection).
struct Failure {
    error: H1Error,
    stale: bool,
}

/// Writes the request and reads the response head.
async fn exchange(io: &mut Io, head: &[u8], rest: &[u8]) -> Result<(Head, Vec<u8>), Failure> {
    let stale = |error: std::io::Error| Failure {
        error: H1Error::Io(error),
        stale: true,
    };
    io.write_all(head).await.map_err(stale)?;
    if !rest.is_empty() {
        io.write_all(rest).await.map_err(stale)?;
    }
    io.flush().await.map_err(stale)?;
    read_head(io).await
}

/// The request head: request line, `Host`, the caller's headers and `Content-Length`.
fn encode_head(uri: &http::Uri, headers: &http::HeaderMap, body_len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + headers.len() * 48);
    out.extend_from_slice(b"POST ");
    out.extend_from_slice(uri.path_and_query().map_or("/", |p| p.as_str()).as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(uri.host().unwrap_or("").as_bytes());
    let default_port = if uri.scheme_str() == Some("https") {
        443
    } else {
        80
    };
    if let Some(port) = uri.port_u16().filter(|p| *p != default_port) {
        out.extend_from_slice(format!(":{port}").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        // Framing is this client's to set.
        if matches!(
            name.as_str(),
            "host" | "content-length" | "transfer-encoding" | "connection"
        ) {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("content-length: {body_len}\r\n\r\n").as_bytes());
    out
}

/// How a response body is delimited.
#[derive(Debug)]
enum Framing {
    Chunked(ChunkedDecoder),
    Length {
        left: u64,
        total: u64,
    },
    /// Until the server closes the connection (no length given).
    UntilClose,
}

/// A parsed response head.
#[derive(Debug)]
struct Head {
    status: u16,
    headers: Vec<(String, String)>,
    framing: Framing,
    /// The connection can carry another request once the body is read.
    reusable: bool,
    /// Bytes of the head (the rest of the buffer is the body's start).
    len: usize,
}

impl Head {
    fn into_reply(self, io: Io, buf: Vec<u8>, home: (Arc<Pool>, String)) -> StreamReply {
        let early = buf.get(self.len..).filter(|b| !b.is_empty());
        let body = Body {
            io: Some(io),
            early: early.map(<[u8]>::to_vec),
            framing: self.framing,
            reusable: self.reusable,
            home: Some(home),
            fault: None,
            ended: false,
        };
        StreamReply {
            status: self.status,
            headers: self.headers,
            body: Box::pin(body),
        }
    }
}

/// Reads until a final (non-1xx) response head is complete; returns it with the buffer, whose
/// bytes after the head are the body's start.
async fn read_head(io: &mut Io) -> Result<(Head, Vec<u8>), Failure> {
    let fail = |error| Failure {
        error,
        stale: false,
    };
    // Small to start: hundreds of streams may wait for their heads at once, and a head is a
    // few hundred bytes; a larger one doubles it.
    let mut buf: Vec<u8> = Vec::with_capacity(HEAD_BUF);
    let mut received = false;
    loop {
        if !buf.is_empty() {
            match parse_head(&buf).map_err(fail)? {
                Some(head) if (100..200).contains(&head.status) && head.status != 101 => {
                    // An interim response (100 Continue, 103 Early Hints): the real one follows.
                    buf.drain(..head.len);
                    continue;
                }
                Some(head) if head.status == 101 => {
                    return Err(fail(H1Error::Head(
                        "the server switched protocols (101)".to_owned(),
                    )));
                }
                Some(head) => return Ok((head, buf)),
                None if buf.len() >= MAX_HEAD => return Err(fail(H1Error::HeadTooLarge)),
                None => {}
            }
        }
        if buf.capacity() == buf.len() {
            buf.reserve(buf.len());
        }
        match io.read_buf(&mut buf).await {
            Ok(0) if !received => {
                return Err(Failure {
                    error: H1Error::ClosedBeforeResponse,
                    stale: true,
                });
            }
            Ok(0) => {
                return Err(fail(H1Error::Head(
                    "the connection closed inside the response head".to_owned(),
                )));
            }
            Ok(_) => received = true,
            Err(e) => {
                return Err(Failure {
                    error: H1Error::Io(e),
                    stale: !received,
                });
            }
        }
    }
}

/// The head at the start of `buf`, or `None` while it is incomplete.
fn parse_head(buf: &[u8]) -> Result<Option<Head>, H1Error> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut fields);
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(H1Error::Head(e.to_string())),
    };
    let status = response.code.unwrap_or(0);
    let http11 = response.version == Some(1);
    let mut chunked = None;
    let mut length: Option<u64> = None;
    let mut close = false;
    for field in response.headers.iter() {
        let name = field.name;
        if name.eq_ignore_ascii_case("transfer-encoding") {
            // The last coding decides: chunked bodies end by their framing, others at close.
            let last = tokens(field.value).last().unwrap_or_default();
            chunked = Some(last.eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case("content-length") {
            for v in tokens(field.value) {
                let n = std::str::from_utf8(v)
                    .ok()
                    .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or_else(|| {
                        H1Error::Head(format!(
                            "invalid Content-Length {:?}",
                            String::from_utf8_lossy(field.value)
                        ))
                    })?;
                if length.is_some_and(|l| l != n) {
                    return Err(H1Error::Head(
                        "conflicting Content-Length values".to_owned(),
                    ));
                }
                length = Some(n);
            }
        } else if name.eq_ignore_ascii_case("connection") {
            close |= tokens(field.value).any(|t| t.eq_ignore_ascii_case(b"close"));
        }
    }
    let headers = crate::passthrough_fields(response.headers.iter().map(|f| (f.name, f.value)));
    // RFC 9112 §6.3: no body for 1xx, 204 and 304; Transfer-Encoding overrides Content-Length
    // (and such a message may not be trusted with another request).
    let (framing, trusted) = if (100..200).contains(&status) || status == 204 || status == 304 {
        (Framing::Length { left: 0, total: 0 }, true)
    } else {
        match (chunked, length) {
            (Some(true), l) => (Framing::Chunked(ChunkedDecoder::new()), l.is_none()),
            (Some(false), _) => (Framing::UntilClose, false),
            (None, Some(n)) => (Framing::Length { left: n, total: n }, true),
            (None, None) => (Framing::UntilClose, false),
        }
    };
    Ok(Some(Head {
        status,
        headers,
        reusable: http11 && !close && trusted && !matches!(framing, Framing::UntilClose),
        framing,
        len,
    }))
}

/// The comma-separated elements of a header value, trimmed, empty ones skipped.
fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|b| *b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty())
}

/// A response body, read in the task that polls it.
struct Body {
    /// `None` once the body ended (the connection is pooled or closed).
    io: Option<Io>,
    /// Body bytes that came with the head.
    early: Option<Vec<u8>>,
    framing: Framing,
    reusable: bool,
    home: Option<(Arc<Pool>, String)>,
    /// A framing fault found after data that has yet to be handed out.
    fault: Option<H1Error>,
    ended: bool,
}

type Item = Poll<Option<Result<Bytes, UpstreamError>>>;

thread_local! {
    /// The read buffer of every body polled on this thread. A poll decodes all that its read
    /// returned before it ends, so no bytes stay in it between polls, and a stream costs no
    /// buffer of its own while it waits (hundreds of streams wait at once).
    static SCRATCH: std::cell::RefCell<Box<[u8]>> =
        std::cell::RefCell::new(vec![0; READ_BUF].into_boxed_slice());
}

impl Body {
    fn complete(&self) -> bool {
        match &self.framing {
            Framing::Chunked(d) => d.is_done(),
            Framing::Length { left, .. } => *left == 0,
            Framing::UntilClose => false,
        }
    }

    /// The body is read: a connection with nothing after the body goes back to the pool.
    fn finish(&mut self, nothing_after: bool) {
        self.ended = true;
        let io = self.io.take();
        if let (Some(io), Some((pool, key)), true) =
            (io, self.home.take(), self.reusable && nothing_after)
        {
            pool.checkin(key, io);
        }
    }

    fn fail(&mut self, e: H1Error) -> Item {
        self.ended = true;
        self.io = None;
        Poll::Ready(Some(Err(e.into())))
    }

    /// Decodes `input`, all of it that belongs to the body: its data as one item (`None`
    /// when it held none), ending the body when it is complete.
    fn consume(&mut self, input: &[u8]) -> Option<Item> {
        let mut out = BytesMut::with_capacity(input.len());
        let used = match &mut self.framing {
            Framing::Chunked(d) => match d.decode(input, &mut out) {
                Ok(used) => used,
                // The data before the fault is handed out first.
                Err(e) if out.is_empty() => return Some(self.fail(H1Error::Chunked(e))),
                Err(e) => {
                    self.fault = Some(H1Error::Chunked(e));
                    return Some(Poll::Ready(Some(Ok(out.freeze()))));
                }
            },
            Framing::Length { left, .. } => {
                let take = usize::try_from(*left)
                    .unwrap_or(usize::MAX)
                    .min(input.len());
                out.extend_from_slice(&input[..take]);
                *left -= take as u64;
                take
            }
            Framing::UntilClose => {
                out.extend_from_slice(input);
                input.len()
            }
        };
        if self.complete() {
            self.finish(used == input.len());
        }
        (!out.is_empty()).then(|| Poll::Ready(Some(Ok(out.freeze()))))
    }

    /// The connection closed.
    fn eof(&mut self) -> Item {
        match &self.framing {
            Framing::UntilClose => {
                self.ended = true;
                self.io = None;
                Poll::Ready(None)
            }
            Framing::Chunked(d) => {
                let e = d
                    .eof_error()
                    .unwrap_or_else(|| ChunkError::Truncated("early".to_owned()));
                self.fail(H1Error::Cut(e))
            }
            Framing::Length { left, total } => {
                let (got, want) = (total - left, *total);
                self.fail(H1Error::Short { got, want })
            }
        }
    }

    /// One socket read, decoded: `None` when it held no data (the loop goes on).
    fn read(&mut self, cx: &mut Context<'_>) -> Option<Item> {
        SCRATCH.with_borrow_mut(|buf| {
            let mut rb = ReadBuf::new(buf);
            let polled = match self.io.as_mut() {
                Some(io) => Pin::new(io).poll_read(cx, &mut rb),
                None => return Some(Poll::Ready(None)),
            };
            match polled {
                Poll::Pending => Some(Poll::Pending),
                Poll::Ready(Err(e)) => Some(self.fail(H1Error::Io(e))),
                Poll::Ready(Ok(())) if rb.filled().is_empty() => Some(self.eof()),
                // Everything this read returned, however many chunks, becomes one item.
                Poll::Ready(Ok(())) => self.consume(rb.filled()),
            }
        })
    }
}

impl Stream for Body {
    type Item = Result<Bytes, UpstreamError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Item {
        let this = &mut *self;
        loop {
            if let Some(e) = this.fault.take() {
                return this.fail(e);
            }
            if this.ended {
                return Poll::Ready(None);
            }
            if let Some(early) = this.early.take() {
                if let Some(item) = this.consume(&early) {
                    return item;
                }
                continue;
            }
            if this.complete() {
                this.finish(true);
                continue;
            }
            if let Some(item) = this.read(cx) {
                return item;
            }
        }
    }
}

/// Idle kept-alive connections, by `scheme://authority`.
struct Pool {
    state: Mutex<PoolState>,
    max_idle: usize,
    idle_timeout: Duration,
}

#[derive(Default)]
struct PoolState {
    idle: HashMap<String, Vec<(Io, Instant)>>,
    /// A task closes connections idle for too long while any are held.
    reaper: bool,
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        // A panic elsewhere cannot leave the map inconsistent: keep using it.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The most recently used idle connection to `key` that is still open.
    fn checkout(&self, key: &str) -> Option<Io> {
        let mut closed = Vec::new();
        let found = {
            let mut state = self.lock();
            let list = state.idle.get_mut(key)?;
            let mut found = None;
            while let Some((mut io, since)) = list.pop() {
                if since.elapsed() < self.idle_timeout && still_open(&mut io) {
                    found = Some(io);
                    break;
                }
                closed.push(io);
            }
            found
        };
        // Closing sockets outside the lock.
        drop(closed);
        found
    }

    fn checkin(self: &Arc<Self>, key: String, io: Io) {
        let mut state = self.lock();
        let list = state.idle.entry(key).or_default();
        if list.len() >= self.max_idle {
            // A burst's extra connections close at once.
            return;
        }
        list.push((io, Instant::now()));
        if !state.reaper
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            state.reaper = true;
            rt.spawn(reap(Arc::downgrade(self), self.idle_timeout));
        }
    }

    /// Closes connections idle longer than the timeout; false when none are left.
    fn prune(&self) -> bool {
        let mut expired = Vec::new();
        let left = {
            let mut state = self.lock();
            for list in state.idle.values_mut() {
                let (keep, old): (Vec<_>, Vec<_>) = std::mem::take(list)
                    .into_iter()
                    .partition(|(_, since)| since.elapsed() < self.idle_timeout);
                *list = keep;
                expired.extend(old);
            }
            state.idle.retain(|_, l| !l.is_empty());
            if state.idle.is_empty() {
                state.reaper = false;
            }
            !state.idle.is_empty()
        };
        drop(expired);
        left
    }
}

async fn reap(pool: Weak<Pool>, every: Duration) {
    loop {
        tokio::time::sleep(every / 2).await;
        match pool.upgrade() {
            Some(pool) if pool.prune() => {}
            _ => return,
        }
    }
}

/// Whether an idle connection is still usable: the server has neither closed it nor sent
/// anything (which no request asked for).
fn still_open(io: &mut Io) -> bool {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut probe = [0u8; 1];
    let mut rb = ReadBuf::new(&mut probe);
    Pin::new(io).poll_read(&mut cx, &mut rb).is_pending()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use pretty_assertions::assert_eq;
    use tokio::net::TcpListener;

    fn client() -> H1Client {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        crate::install_tls_provider();
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .unwrap()
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        H1Client::new(https, 4, Duration::from_secs(60))
    }

    /// A server that answers each accepted connection's requests with `replies`, in order,
    /// and records every request head it read. `close` closes the connection after them.
    async fn server(
        replies: Vec<Vec<u8>>,
        close: bool,
    ) -> (
        String,
        tokio::task::JoinHandle<Vec<String>>,
        Arc<std::sync::atomic::AtomicUsize>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        let task = tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut replies = replies.into_iter().peekable();
            while replies.peek().is_some() {
                let (mut sock, _) = listener.accept().await.unwrap();
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                while let Some(reply) = replies.peek().cloned() {
                    let Some(request) = read_request(&mut sock).await else {
                        break;
                    };
                    replies.next();
                    seen.push(request);
                    sock.write_all(&reply).await.unwrap();
                    if close {
                        break;
                    }
                }
            }
            seen
        });
        (url, task, accepted)
    }

    /// One request (head and `content-length` body), or `None` at EOF.
    async fn read_request(sock: &mut tokio::net::TcpStream) -> Option<String> {
        let mut buf = Vec::new();
        loop {
            let mut fields = [httparse::EMPTY_HEADER; 32];
            let mut req = httparse::Request::new(&mut fields);
            if let httparse::Status::Complete(len) = req.parse(&buf).unwrap() {
                let body_len: usize = req
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .map(|h| std::str::from_utf8(h.value).unwrap().parse().unwrap())
                    .unwrap();
                while buf.len() < len + body_len {
                    if sock.read_buf(&mut buf).await.unwrap() == 0 {
                        return None;
                    }
                }
                return Some(String::from_utf8_lossy(&buf[..len + body_len]).into_owned());
            }
            if sock.read_buf(&mut buf).await.unwrap() == 0 {
                return None;
            }
        }
    }

    async fn collect(reply: StreamReply) -> (Vec<Bytes>, Option<UpstreamError>) {
        let mut items = Vec::new();
        let mut body = reply.body;
        while let Some(item) = body.next().await {
            match item {
                Ok(b) => items.push(b),
                Err(e) => return (items, Some(e)),
            }
        }
        (items, None)
    }

    fn headers() -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert("authorization", "Bearer t".parse().unwrap());
        h.insert("content-type", "application/json".parse().unwrap());
        h
    }

    #[tokio::test]
    async fn chunks_read_together_are_one_item_and_the_connection_is_reused() {
        let stream = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nrequest-id: r1\r\n\
            transfer-encoding: chunked\r\n\r\n\
            5;ext=1\r\nhello\r\n1\r\n \r\n6\r\nworld!\r\n0\r\nx-trailer: t\r\n\r\n"
            .to_vec();
        let (url, task, accepted) = server(vec![stream.clone(), stream], false).await;
        let c = client();
        let uri: http::Uri = format!("{url}/v1/messages?x=1").parse().unwrap();
        for _ in 0..2 {
            let reply = c
                .post(&uri, &headers(), &Bytes::from_static(b"{}"))
                .await
                .unwrap();
            assert_eq!(reply.status, 200);
            assert_eq!(
                reply.headers,
                vec![
                    ("content-type".to_owned(), "text/event-stream".to_owned()),
                    ("request-id".to_owned(), "r1".to_owned())
                ]
            );
            let (items, err) = collect(reply).await;
            assert!(err.is_none(), "{err:?}");
            assert_eq!(items, vec![Bytes::from_static(b"hello world!")]);
            assert_eq!(c.idle_connections(), 1);
        }
        let seen = task.await.unwrap();
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(seen.len(), 2);
        let host = url.trim_start_matches("http://");
        assert!(
            seen[0].starts_with(&format!(
                "POST /v1/messages?x=1 HTTP/1.1\r\nhost: {host}\r\n"
            )),
            "{}",
            seen[0]
        );
        assert!(seen[0].contains("authorization: Bearer t\r\n"));
        assert!(
            seen[0].ends_with("content-length: 2\r\n\r\n{}"),
            "{}",
            seen[0]
        );
    }

    #[tokio::test]
    async fn a_content_length_body_is_read_whole_and_interim_responses_skipped() {
        let reply = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 401 Unauthorized\r\n\
            Content-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"e\":\"no\"}\n"
            .to_vec();
        let (url, _task, _) = server(vec![reply], false).await;
        let c = client();
        let reply = c
            .post(&url.parse().unwrap(), &headers(), &Bytes::new())
            .await
            .unwrap();
        assert_eq!(reply.status, 401);
        let (items, err) = collect(reply).await;
        assert!(err.is_none());
        assert_eq!(items.concat(), b"{\"e\":\"no\"}\n");
        assert_eq!(c.idle_connections(), 1);
    }

    #[tokio::test]
    async fn connection_close_and_close_delimited_bodies_are_not_pooled() {
        let replies = vec![
            b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok".to_vec(),
            b"HTTP/1.1 200 OK\r\n\r\nuntil close".to_vec(),
        ];
        let (url, _task, accepted) = server(replies, true).await;
        let c = client();
        let uri: http::Uri = url.parse().unwrap();
        let (items, err) = collect(c.post(&uri, &headers(), &Bytes::new()).await.unwrap()).await;
        assert_eq!((items.concat(), err.is_none()), (b"ok".to_vec(), true));
        assert_eq!(c.idle_connections(), 0);
        let (items, err) = collect(c.post(&uri, &headers(), &Bytes::new()).await.unwrap()).await;
        assert_eq!(
            (items.concat(), err.is_none()),
            (b"until close".to_vec(), true)
        );
        assert_eq!(c.idle_connections(), 0);
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_pooled_connection_the_server_closed_is_replaced() {
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec();
        // The server answers once per connection and then closes it without saying so.
        let (url, task, accepted) = server(vec![ok.clone(), ok], true).await;
        let c = client();
        let uri: http::Uri = url.parse().unwrap();
        let (items, _) = collect(c.post(&uri, &headers(), &Bytes::new()).await.unwrap()).await;
        assert_eq!(items.concat(), b"ok");
        assert_eq!(c.idle_connections(), 1);
        let (items, err) = collect(c.post(&uri, &headers(), &Bytes::new()).await.unwrap()).await;
        assert_eq!((items.concat(), err.is_none()), (b"ok".to_vec(), true));
        assert_eq!(task.await.unwrap().len(), 2);
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn malformed_and_cut_bodies_end_in_one_precise_error() {
        let cases: Vec<(&[u8], &[u8], &str)> = vec![
            (
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n",
                b"hello",
                "unexpected upstream response: malformed chunked body: a chunk size line has no hex digits (found byte 0x7a)",
            ),
            (
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel",
                b"hel",
                "upstream unreachable: the connection closed before the end of the body: the body ended inside a chunk, 2 bytes short",
            ),
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhel",
                b"hel",
                "upstream unreachable: the connection closed after 3 of 10 body bytes",
            ),
        ];
        for (reply, want_data, want) in cases {
            let (url, _task, _) = server(vec![reply.to_vec()], true).await;
            let c = client();
            let reply = c
                .post(&url.parse().unwrap(), &headers(), &Bytes::new())
                .await
                .unwrap();
            let mut body = reply.body;
            let mut errors = Vec::new();
            let mut data = Vec::new();
            while let Some(item) = body.next().await {
                match item {
                    Ok(b) => data.extend_from_slice(&b),
                    Err(e) => errors.push(e.to_string()),
                }
            }
            assert_eq!(errors, vec![want.to_owned()]);
            assert_eq!(data, want_data);
            assert_eq!(c.idle_connections(), 0);
        }
    }

    #[tokio::test]
    async fn malformed_heads_are_refused() {
        let cases: Vec<(&[u8], &str)> = vec![
            (
                b"SSH-2.0-OpenSSH\r\n\r\n",
                "malformed response head: invalid HTTP version",
            ),
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: 1x\r\n\r\n",
                "malformed response head: invalid Content-Length \"1x\"",
            ),
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
                "malformed response head: conflicting Content-Length values",
            ),
            (
                b"HTTP/1.1 200 OK\r\nx: y\r\n",
                "malformed response head: the connection closed inside the response head",
            ),
            (b"", "the connection closed before a response arrived"),
        ];
        for (reply, want) in cases {
            let (url, _task, _) = server(vec![reply.to_vec()], true).await;
            let err = client()
                .post(&url.parse().unwrap(), &headers(), &Bytes::new())
                .await
                .err()
                .unwrap();
            assert_eq!(err.to_string(), want);
        }
    }
}
