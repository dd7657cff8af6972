//! The claude-host proxy: a loopback HTTP server that speaks the Anthropic Messages API to
//! Claude Code and forwards to an [`Upstream`] (GitHub Copilot by default).
//!
//! Secure by default: it binds 127.0.0.1, demands `Authorization: Bearer <nonce>.<session>`
//! (a 256-bit nonce minted per start, compared in constant time), refuses foreign `Host`
//! headers (DNS rebinding) and never exposes a token. Streams are relayed event by event as
//! they arrive, with only `message_start.message.model` rewritten.

mod auth;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod initiator;
mod relay;
mod routes;
pub mod telemetry;
mod turns;

pub use auth::Nonce;
pub use initiator::{PromptLedger, PromptSource, SessionUsage};
pub use telemetry::DayUsage;

use claude_host_protocol::betas::DEFAULT_BETA_FAMILIES;
use claude_host_upstream::Upstream;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Proxy settings.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Where to listen. Default `127.0.0.1:0` (an ephemeral loopback port).
    pub listen: SocketAddr,
    /// Largest request body accepted.
    pub body_limit: usize,
    /// How long the upstream may be silent before a `ping` event is sent downstream.
    pub ping_interval: Duration,
    /// How long the upstream may be silent before the stream is failed.
    pub idle_timeout: Duration,
    /// `anthropic-beta` families forwarded to upstreams that need filtering.
    pub beta_families: Vec<String>,
    /// A model (any id form) that answers instead when Copilot says premium requests are
    /// used up; `None`: the client gets the quota error.
    pub quota_fallback_model: Option<String>,
    /// How long a connection may take to send a request's headers, and may stay idle between
    /// requests, before it is closed.
    pub header_timeout: Duration,
    /// How long a request's body may take to arrive.
    pub body_timeout: Duration,
    /// Most connections open at once; more are closed as they arrive.
    pub max_connections: usize,
    /// Where the proxy's counters go (requests, premium requests, tokens, errors); `None`:
    /// only the per-day counts of [`ProxyHandle::usage`] are kept.
    pub meter: Option<opentelemetry::metrics::Meter>,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            body_limit: 32 * 1024 * 1024,
            ping_interval: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(600),
            beta_families: DEFAULT_BETA_FAMILIES
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            quota_fallback_model: None,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(60),
            max_connections: 1024,
            meter: None,
        }
    }
}

/// Errors starting the proxy.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
}

pub(crate) struct State {
    pub(crate) config: ProxyConfig,
    /// Messages requests in flight.
    active: std::sync::atomic::AtomicUsize,
    trim_scheduled: std::sync::atomic::AtomicBool,
    pub(crate) nonce: Nonce,
    pub(crate) allowed_hosts: Vec<String>,
    upstream: RwLock<Arc<dyn Upstream>>,
    pub(crate) ledger: Arc<initiator::Ledger>,
    /// When Copilot last said premium requests are used up.
    quota_exhausted_at: std::sync::Mutex<Option<std::time::Instant>>,
    pub(crate) background: Background,
    pub(crate) telemetry: telemetry::Telemetry,
}

/// Where work that outlives a request runs: tracked, and stopped at shutdown.
#[derive(Clone)]
pub(crate) struct Background {
    pub(crate) tracker: TaskTracker,
    pub(crate) cancel: CancellationToken,
}

/// How long requests go straight to the quota fallback after Copilot said premium requests
/// are used up, before the premium model is tried again (they come back monthly, or when the
/// user buys more).
const QUOTA_RECHECK: Duration = Duration::from_secs(15 * 60);

impl State {
    /// A proxy's state for a listener bound at `bound`, its background tasks in `background`.
    fn new(
        config: ProxyConfig,
        bound: SocketAddr,
        nonce: Nonce,
        upstream: Arc<dyn Upstream>,
        background: Background,
    ) -> Arc<State> {
        Arc::new(State {
            allowed_hosts: auth::allowed_hosts(config.listen, bound),
            telemetry: telemetry::Telemetry::new(config.meter.as_ref()),
            config,
            nonce,
            active: std::sync::atomic::AtomicUsize::new(0),
            trim_scheduled: std::sync::atomic::AtomicBool::new(false),
            upstream: RwLock::new(upstream),
            ledger: Arc::new(initiator::Ledger::new()),
            quota_exhausted_at: std::sync::Mutex::new(None),
            background,
        })
    }

    /// A proxy's state without a listener: for the fuzz targets and unit tests, which call
    /// the router and the relay directly. `bound` is the address it "listens" on.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn detached(
        config: ProxyConfig,
        bound: SocketAddr,
        nonce: Nonce,
        upstream: Arc<dyn Upstream>,
    ) -> Arc<State> {
        let background = Background {
            tracker: TaskTracker::new(),
            cancel: CancellationToken::new(),
        };
        State::new(config, bound, nonce, upstream, background)
    }

    pub(crate) fn mark_quota_exhausted(&self) {
        *self
            .quota_exhausted_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(std::time::Instant::now());
    }

    pub(crate) fn quota_exhausted(&self) -> bool {
        self.quota_exhausted_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some_and(|at| at.elapsed() < QUOTA_RECHECK)
    }

    pub(crate) fn upstream(&self) -> Arc<dyn Upstream> {
        self.upstream
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// A view of a proxy's model calls per UTC day; cheap to clone.
#[derive(Clone)]
pub struct UsageView(Arc<State>);

impl std::fmt::Debug for UsageView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UsageView").finish_non_exhaustive()
    }
}

impl UsageView {
    /// The counts per UTC day (`YYYY-MM-DD`), the last 31 days.
    pub fn by_day(&self) -> std::collections::BTreeMap<String, DayUsage> {
        self.0.telemetry.days()
    }

    /// Changes each time a model call ends.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.0.telemetry.changes()
    }
}

/// Counts a messages request as in flight for as long as it lives. When the last one ends,
/// freed memory goes back to the OS: glibc keeps it otherwise, and the process would stay at
/// its peak size after a burst of streams.
pub(crate) struct ActiveRequest(Arc<State>);

impl ActiveRequest {
    pub(crate) fn new(state: &Arc<State>) -> Self {
        state
            .active
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        ActiveRequest(state.clone())
    }

    pub(crate) fn telemetry(&self) -> &telemetry::Telemetry {
        &self.0.telemetry
    }
}

impl Drop for ActiveRequest {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering::SeqCst;
        if self.0.active.fetch_sub(1, SeqCst) == 1 {
            schedule_trim(&self.0);
        }
    }
}

/// Gives freed memory back to the OS once the proxy has stayed idle for a moment: no request
/// in flight and, checked again then, none started. The last request's end and the last
/// client connection's close (idle keep-alive connections close up to a timeout later, and
/// free their buffers then, see [`accept_loop`]) each schedule one; glibc would otherwise keep
/// the process at its peak size after a burst.
fn schedule_trim(state: &Arc<State>) {
    use std::sync::atomic::Ordering::SeqCst;
    if state.trim_scheduled.swap(true, SeqCst) {
        return;
    }
    let state = state.clone();
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            state.trim_scheduled.store(false, SeqCst);
            if state.active.load(SeqCst) == 0 {
                release_free_memory();
            }
        });
    } else {
        state.trim_scheduled.store(false, SeqCst);
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn release_free_memory() {
    // SAFETY: malloc_trim only walks the allocator's own free lists; it is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_free_memory() {}

/// A running proxy. Dropping it does not stop the server; call [`ProxyHandle::shutdown`].
pub struct ProxyHandle {
    addr: SocketAddr,
    state: Arc<State>,
    cancel: CancellationToken,
    tracker: TaskTracker,
}

impl std::fmt::Debug for ProxyHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyHandle")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl ProxyHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>` — the value for `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The per-start nonce (64 hex characters). Treat as a secret.
    pub fn nonce(&self) -> &str {
        self.state.nonce.as_str()
    }

    /// The bearer token for a session: `<nonce>.<session_id>` — the value for
    /// `ANTHROPIC_AUTH_TOKEN`.
    pub fn auth_token(&self, session_id: &str) -> String {
        format!("{}.{}", self.state.nonce.as_str(), session_id)
    }

    /// Replaces the upstream (new credentials) for requests that start from now on.
    pub fn set_upstream(&self, upstream: Arc<dyn Upstream>) {
        *self
            .state
            .upstream
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = upstream;
    }

    /// `POST /v1/messages` requests in flight now, from the moment their body is read until
    /// their response ends.
    pub fn active_requests(&self) -> usize {
        self.state.active.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// This proxy's model calls, counted per UTC day.
    pub fn usage(&self) -> UsageView {
        UsageView(self.state.clone())
    }

    /// How this proxy learns which requests a human started, per session (see
    /// [`PromptLedger`]).
    pub fn prompt_ledger(&self) -> PromptLedger {
        PromptLedger(self.state.ledger.clone())
    }

    /// Stops accepting, aborts every in-flight upstream request and closes every connection.
    pub async fn shutdown(&self) {
        self.cancel.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }

    /// Resolves when the proxy has been shut down.
    pub async fn closed(&self) {
        self.tracker.wait().await;
    }
}

/// Binds and starts serving in the background.
pub async fn start(
    config: ProxyConfig,
    upstream: Arc<dyn Upstream>,
) -> Result<ProxyHandle, ProxyError> {
    let listener = bind(config.listen).map_err(|source| ProxyError::Bind {
        addr: config.listen,
        source,
    })?;
    let addr = listener.local_addr().map_err(|source| ProxyError::Bind {
        addr: config.listen,
        source,
    })?;
    let cancel = CancellationToken::new();
    let tracker = TaskTracker::new();
    let background = Background {
        tracker: tracker.clone(),
        cancel: cancel.clone(),
    };
    let state = State::new(config, addr, Nonce::generate(), upstream, background);
    tracker.spawn(accept_loop(
        listener,
        state.clone(),
        cancel.clone(),
        tracker.clone(),
    ));
    tracing::info!(%addr, "proxy listening");
    Ok(ProxyHandle {
        addr,
        state,
        cancel,
        tracker,
    })
}

fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    // A real backlog: bursts of simultaneous connects must not fall into SYN retries.
    socket.listen(1024)
}

/// See the HTTP/1 builder in [`accept_loop`]; hyper's floor is 8 KiB.
const CONNECTION_BUFFER: usize = 16 * 1024;

async fn accept_loop(
    listener: TcpListener,
    state: Arc<State>,
    cancel: CancellationToken,
    tracker: TaskTracker,
) {
    let capacity = state.config.max_connections.max(1);
    let slots = Arc::new(tokio::sync::Semaphore::new(capacity));
    let mut refused: u64 = 0;
    loop {
        let (stream, peer) = tokio::select! {
            () = cancel.cancelled() => return,
            r = listener.accept() => match r {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of file descriptors and similar: back off briefly rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // A cap on open connections: idle or half-sent ones cannot use up the descriptors
        // that legitimate clients need (they are closed by the header timeout meanwhile).
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refused += 1;
            if refused.is_power_of_two() {
                tracing::warn!(%peer, refused, max = state.config.max_connections, "too many connections; closing new ones");
            }
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let cancel = cancel.clone();
        let slots = slots.clone();
        tracker.spawn(async move {
            let header_timeout = state.config.header_timeout;
            let idle_check = state.clone();
            // Boxed: hyper keeps a slot the size of the handler's future for every connection,
            // in use or not (3.7 KB each); a box costs that only while a request is handled.
            let service = hyper::service::service_fn(move |req| {
                let state = state.clone();
                let handled: futures::future::BoxFuture<'static, _> = Box::pin(async move {
                    Ok::<_, std::convert::Infallible>(routes::handle(req, state).await)
                });
                handled
            });
            let conn = http1::Builder::new()
                .keep_alive(true)
                // What a connection may hold: a request head, and response bytes the client
                // has not taken yet. Past it the relay stops reading the upstream (its socket
                // holds the rest), so a slow client costs ~16 KiB, not hyper's default
                // 400 KiB or 16 queued frames of up to 16 KiB each.
                .max_buf_size(CONNECTION_BUFFER)
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(TokioIo::new(stream), service);
            // Each poll of this task is a numbered turn: a relay that has forwarded its share
            // gives way until the next one (`turns`).
            let mut conn = std::pin::pin!(conn);
            let conn = std::future::poll_fn(|cx| turns::within(|| conn.as_mut().poll(cx)));
            tokio::select! {
                r = conn => {
                    if let Err(e) = r {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                }
                // Dropping the connection drops every in-flight handler and body, which
                // aborts their upstream requests.
                () = cancel.cancelled() => {}
            }
            // The last connection to close: its buffers (and those of idle keep-alive ones
            // that closed before it) are free now.
            drop(slot);
            if slots.available_permits() == capacity {
                schedule_trim(&idle_check);
            }
        });
    }
}
