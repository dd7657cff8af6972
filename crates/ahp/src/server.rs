//! The WebSocket transport: one JSON-RPC 2.0 message per text frame, a connection token on
//! the upgrade request, bounded frames, bounded pending requests, and a bounded outbound
//! queue per connection so a slow reader never stalls anyone else.

mod feed;
mod order;

pub use feed::OLDER_TURNS_ID;
pub(crate) use feed::TurnsShown;

use crate::host::{Host, Target};
use crate::resources;
use crate::root::ROOT;
use crate::rpc::{RpcError, code};
use ahp_types::commands::{ReconnectResult, ReconnectSnapshotResult, SubscribeResult};
use ahp_types::state::Snapshot;
use claude_host_agent::{ChannelKind, Published, SessionHandle, SessionSubscription, trace};
use claude_host_protocol::log_safe::Safe;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, broadcast, mpsc, oneshot, watch};
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};

/// How long a connection closed for an oversized message waits for the client to read why
/// (closing sooner, with its unread data still queued, would reset the connection instead).
const CLOSE_LINGER: std::time::Duration = std::time::Duration::from_secs(2);

/// How the server listens and what it accepts.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Where to listen (default `127.0.0.1:8081`).
    pub listen: SocketAddr,
    /// The connection token clients must send as `?tkn=`; `None` accepts any connection
    /// (only when asked for with `--without-connection-token`).
    pub connection_token: Option<String>,
    /// Largest WebSocket message accepted.
    pub max_message_bytes: usize,
    /// Requests a connection may have in flight at once.
    pub max_pending_requests: usize,
    /// Frames queued for a connection before it counts as too slow and is closed.
    pub outbound_queue: usize,
    /// The kernel send buffer of each connection (`None`: the kernel tunes it). With both
    /// bounds, what a client that stops reading can cost the server is bounded too.
    pub socket_send_buffer: Option<u32>,
    /// How long a new connection may take to complete its WebSocket upgrade (token checked)
    /// before it is closed.
    pub handshake_timeout: Duration,
    /// Connections that have not completed their upgrade yet, at most; more are closed as
    /// they arrive (connections that have are not counted).
    pub max_handshakes: usize,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8081)),
            connection_token: None,
            max_message_bytes: 32 * 1024 * 1024,
            max_pending_requests: 64,
            outbound_queue: 4096,
            socket_send_buffer: None,
            handshake_timeout: Duration::from_secs(10),
            max_handshakes: 64,
        }
    }
}

/// A running server.
pub struct ServerHandle {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl ServerHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and closes every connection.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Binds and starts serving.
pub async fn start(config: ServeConfig, host: Arc<Host>) -> std::io::Result<ServerHandle> {
    let socket = if config.listen.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    if let Some(size) = config.socket_send_buffer {
        // Accepted connections inherit it.
        socket.set_send_buffer_size(size)?;
    }
    socket.bind(config.listen)?;
    let listener = socket.listen(1024)?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(accept_loop(listener, host, Arc::new(config), stopped));
    Ok(ServerHandle { addr, stop, task })
}

/// Where connections come from (a trait so the accept loop's failure handling is testable).
trait Acceptor: Send + 'static {
    fn accept(
        &mut self,
    ) -> impl std::future::Future<Output = std::io::Result<(TcpStream, SocketAddr)>> + Send;
}

impl Acceptor for TcpListener {
    async fn accept(&mut self) -> std::io::Result<(TcpStream, SocketAddr)> {
        TcpListener::accept(self).await
    }
}

/// The pause after the first failed accept; it doubles up to [`MAX_ACCEPT_BACKOFF`].
const FIRST_ACCEPT_BACKOFF: Duration = Duration::from_millis(5);
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

async fn accept_loop(
    mut listener: impl Acceptor,
    host: Arc<Host>,
    config: Arc<ServeConfig>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut backoff = FIRST_ACCEPT_BACKOFF;
    let handshakes = Arc::new(tokio::sync::Semaphore::new(config.max_handshakes.max(1)));
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    backoff = FIRST_ACCEPT_BACKOFF;
                    // Before the token is checked a connection costs a descriptor and
                    // nothing else may: their number is capped.
                    let Ok(slot) = handshakes.clone().try_acquire_owned() else {
                        tracing::warn!(%peer, "too many connections still upgrading; closing a new one");
                        drop(stream);
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(connection(stream, peer, host.clone(), config.clone(), stopped.clone(), slot));
                }
                Err(e) => {
                    // Out of file descriptors, say: retrying at once would spin a core.
                    tracing::warn!(error = %e, pause = ?backoff, "accept failed; pausing");
                    tokio::select! {
                        () = tokio::time::sleep(backoff) => {}
                        _ = stopped.changed() => break,
                    }
                    backoff = (backoff * 2).min(MAX_ACCEPT_BACKOFF);
                }
            },
            _ = stopped.changed() => break,
        }
    }
}

/// Compares the `tkn` query parameter with the token in constant time.
fn token_ok(req: &Request, expected: &str) -> bool {
    use subtle::ConstantTimeEq;
    let given = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("tkn="))
        .unwrap_or("");
    given.len() == expected.len() && bool::from(given.as_bytes().ct_eq(expected.as_bytes()))
}

fn refuse(status: u16, why: &str) -> ErrorResponse {
    let mut r = ErrorResponse::new(Some(why.to_owned()));
    *r.status_mut() = tokio_tungstenite::tungstenite::http::StatusCode::from_u16(status)
        .unwrap_or(tokio_tungstenite::tungstenite::http::StatusCode::FORBIDDEN);
    r
}

/// One client connection.
struct Conn {
    out: mpsc::Sender<Arc<str>>,
    /// Dispatched actions, carried out one after another off the read loop (a session may
    /// take a while to answer; the client's other requests must not wait for it), and the
    /// subscribes they must not overtake (`order`).
    dispatches: mpsc::UnboundedSender<order::Inbound>,
    // Set once by `initialize`/`reconnect`, read by each dispatch: a plain cell beats a task.
    client_id: Mutex<Option<String>>,
    initialized: AtomicBool,
    closing: watch::Sender<bool>,
    // Subscribe/unsubscribe handlers swap entries and the connection's end drains it; each
    // holds it for one map operation, never across an await.
    forwarders: Mutex<HashMap<String, tokio::task::AbortHandle>>,
    // Each session's feed on this connection (`feed`), by the same key as its forwarder;
    // looked up or swapped for one operation, never held across an await.
    feeds: Mutex<HashMap<String, mpsc::UnboundedSender<feed::FeedCmd>>>,
    // The root forwarder, to wait for its end when the root is subscribed again; swapped or
    // taken in one operation, never held across an await.
    root_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    // Requests this server sent the client, by id, until their answer comes; one insert or
    // removal at a time, never held across an await.
    asked: Mutex<HashMap<String, oneshot::Sender<Result<Value, String>>>>,
    next_ask: std::sync::atomic::AtomicU64,
    pending: Arc<Semaphore>,
    max_pending: usize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Conn {
    /// Queues a frame; a connection whose queue is full is too slow and is closed.
    fn send(&self, frame: Arc<str>) -> bool {
        match self.out.try_send(frame) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!("a client is not reading fast enough; closing its connection");
                let _ = self.closing.send(true);
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    fn respond(&self, id: &Value, result: Result<Value, RpcError>) {
        match result {
            Ok(r) => self.respond_ok(id, &r),
            Err(e) => {
                let msg = json!({"jsonrpc": "2.0", "id": id, "error": e.to_json()});
                self.send(msg.to_string().into());
            }
        }
    }

    /// Answers with a typed result, written straight to text: a long chat's snapshot would
    /// otherwise become a `Value` tree several times its size first.
    fn respond_ok<T: serde::Serialize>(&self, id: &Value, result: &T) {
        #[derive(serde::Serialize)]
        struct Success<'a, T> {
            jsonrpc: &'static str,
            id: &'a Value,
            result: &'a T,
        }
        let msg = Success {
            jsonrpc: "2.0",
            id,
            result,
        };
        match serde_json::to_string(&msg) {
            Ok(text) => {
                self.send(text.into());
            }
            Err(e) => {
                tracing::warn!(error = %e, "a result could not be written as JSON");
                self.respond(
                    id,
                    Err(RpcError::new(
                        code::INTERNAL_ERROR,
                        format!("the result could not be written: {e}"),
                    )),
                );
            }
        }
    }

    fn client_id(&self) -> String {
        lock(&self.client_id).clone().unwrap_or_default()
    }

    /// Forwards the root channel's live actions to this connection.
    fn forward_root(self: &Arc<Self>, rx: broadcast::Receiver<Arc<Published>>) {
        let conn = self.clone();
        let task = tokio::spawn(async move { forward_root(&conn, rx).await });
        if let Some(old) = lock(&self.forwarders).insert(ROOT.to_owned(), task.abort_handle()) {
            old.abort();
        }
        *lock(&self.root_task) = Some(task);
    }

    /// Stops the root forwarder and waits until it has: a new root subscription then starts
    /// after everything the old one sent, never interleaved with it.
    async fn stop_root(&self) {
        let task = lock(&self.root_task).take();
        lock(&self.forwarders).remove(ROOT);
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
    }

    fn forward_root_notifications(self: &Arc<Self>, rx: broadcast::Receiver<Arc<str>>) {
        let conn = self.clone();
        let task = tokio::spawn(async move { forward_notifications(&conn, rx).await });
        if let Some(old) =
            lock(&self.forwarders).insert("#notifications".into(), task.abort_handle())
        {
            old.abort();
        }
    }

    fn unsubscribe(&self, uri: &str) {
        self.unsubscribe_from_feeds(uri);
        if let Some(t) = lock(&self.forwarders).remove(uri) {
            t.abort();
        }
        if uri == ROOT
            && let Some(t) = lock(&self.forwarders).remove("#notifications")
        {
            t.abort();
        }
    }
}

/// Forwards a broadcast (the root channel's actions, root notifications) to a connection. A
/// client that falls behind is closed so it reconnects and resynchronises: the root changes
/// rarely, so only a stalled client lags, and notifications are never replayed.
async fn forward_broadcast<T: Clone>(
    conn: &Conn,
    mut rx: broadcast::Receiver<T>,
    what: &str,
    frame: impl Fn(T) -> Arc<str>,
) {
    loop {
        match rx.recv().await {
            Ok(item) => {
                if !conn.send(frame(item)) {
                    return;
                }
            }
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(
                    missed = n,
                    "a client fell behind the {what}; closing its connection so it resynchronises"
                );
                let _ = conn.closing.send(true);
                return;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

async fn forward_root(conn: &Conn, rx: broadcast::Receiver<Arc<Published>>) {
    forward_broadcast(conn, rx, "root channel", |p| p.notification()).await;
}

async fn forward_notifications(conn: &Conn, rx: broadcast::Receiver<Arc<str>>) {
    forward_broadcast(conn, rx, "session-list notifications", |f| f).await;
}

/// How long the client has to answer a request this server sent.
const CLIENT_ANSWER: Duration = Duration::from_secs(30);

impl Conn {
    /// Routes the client's answer to the request waiting for it.
    fn answered(&self, msg: &Value) {
        let id = match &msg["id"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let Some(waiting) = lock(&self.asked).remove(&id) else {
            tracing::debug!(%id, "an answer to no request of this server");
            return;
        };
        let answer = match msg.get("error") {
            Some(e) => Err(e
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("the client refused")
                .to_owned()),
            None => Ok(msg.get("result").cloned().unwrap_or(Value::Null)),
        };
        let _ = waiting.send(answer);
    }
}

#[async_trait::async_trait]
impl claude_host_agent::customizations::sync::ClientFiles for Conn {
    async fn request(&self, method: &str, params: Value) -> Result<Value, String> {
        let n = self.next_ask.fetch_add(1, Ordering::Relaxed);
        // Its own id space, so an answer can never be taken for one of the client's ids.
        let id = format!("claude-host-{n}");
        let (tx, rx) = oneshot::channel();
        lock(&self.asked).insert(id.clone(), tx);
        let frame = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if !self.send(frame.to_string().into()) {
            lock(&self.asked).remove(&id);
            return Err("the connection is closing".into());
        }
        let answer = tokio::time::timeout(CLIENT_ANSWER, rx).await;
        lock(&self.asked).remove(&id);
        match answer {
            Ok(Ok(a)) => a,
            Ok(Err(_)) => Err("the connection closed".into()),
            Err(_) => Err(format!("no answer within {} s", CLIENT_ANSWER.as_secs())),
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        for (_, t) in lock(&self.forwarders).drain() {
            t.abort();
        }
    }
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    host: Arc<Host>,
    config: Arc<ServeConfig>,
    mut stopped: watch::Receiver<bool>,
    handshake_slot: tokio::sync::OwnedSemaphorePermit,
) {
    let token = config.connection_token.clone();
    // The callback's signature is tungstenite's.
    #[allow(clippy::result_large_err)]
    let check = move |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        match &token {
            Some(t) if !token_ok(req, t) => {
                tracing::warn!(%peer, "refused a connection with a missing or wrong token");
                Err(refuse(401, "missing or wrong connection token (?tkn=)"))
            }
            _ => Ok(resp),
        }
    };
    let mut ws_config = WebSocketConfig::default();
    ws_config.max_message_size = Some(config.max_message_bytes);
    ws_config.max_frame_size = Some(config.max_message_bytes);
    let upgrade = tokio_tungstenite::accept_hdr_async_with_config(stream, check, Some(ws_config));
    let ws = match tokio::time::timeout(config.handshake_timeout, upgrade).await {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "WebSocket handshake failed");
            return;
        }
        Err(_) => {
            tracing::info!(%peer, "closed a connection that did not complete its upgrade in time");
            return;
        }
    };
    drop(handshake_slot);
    tracing::info!(%peer, "client connected");
    let (mut sink, mut incoming) = ws.split();
    let (out, mut out_rx) = mpsc::channel::<Arc<str>>(config.outbound_queue.max(16));
    let (closing, mut closing_rx) = watch::channel(false);
    let (dispatches, mut dispatch_rx) = mpsc::unbounded_channel::<order::Inbound>();
    let conn = Arc::new(Conn {
        out,
        dispatches,
        client_id: Mutex::new(None),
        initialized: AtomicBool::new(false),
        closing,
        forwarders: Mutex::new(HashMap::new()),
        feeds: Mutex::new(HashMap::new()),
        root_task: Mutex::new(None),
        asked: Mutex::new(HashMap::new()),
        next_ask: std::sync::atomic::AtomicU64::new(0),
        pending: Arc::new(Semaphore::new(config.max_pending_requests.max(1))),
        max_pending: config.max_pending_requests.max(1),
    });
    let dispatcher = {
        let (host, conn) = (host.clone(), conn.clone());
        tokio::spawn(async move {
            let mut subscribes = order::Barriers::default();
            while let Some(next) = dispatch_rx.recv().await {
                match next {
                    order::Inbound::Subscribe { channel, taken } => subscribes.push(channel, taken),
                    order::Inbound::Action(params) => {
                        subscribes.before(&params).await;
                        host.dispatch(&conn.client_id(), &params, Some(conn.clone()))
                            .await;
                    }
                }
            }
        })
    };
    // Why the connection ends, when the server ends it for a reason the client should see.
    let (close_tx, close_rx) = oneshot::channel::<CloseFrame>();
    let writer = tokio::spawn(async move {
        let mut close_rx = close_rx;
        let mut close_done = false;
        loop {
            tokio::select! {
                // A reason to close comes first: the queue may end at the same moment.
                biased;
                reason = &mut close_rx, if !close_done => {
                    close_done = true;
                    if let Ok(frame) = reason {
                        let _ = sink.send(Message::Close(Some(frame))).await;
                        break;
                    }
                }
                frame = out_rx.recv() => match frame {
                    Some(frame) => {
                        if sink.send(Message::Text(frame.as_ref().into())).await.is_err() {
                            return;
                        }
                    }
                    None => break,
                },
            }
        }
        let _ = sink.close().await;
    });
    let mut close_tx = Some(close_tx);
    loop {
        tokio::select! {
            msg = incoming.next() => match msg {
                Some(Ok(Message::Text(text))) => handle_text(&host, &conn, text.as_str()).await,
                Some(Ok(Message::Binary(_))) => conn.respond(
                    &Value::Null,
                    Err(RpcError::new(code::INVALID_REQUEST, "binary frames are not JSON-RPC; send text frames")),
                ),
                Some(Ok(Message::Close(_))) | None => break,
                Some(Ok(_)) => {}
                Some(Err(tungstenite::Error::Capacity(e))) => {
                    // Said with the code for it (1009), so the client knows why, and given a
                    // moment to reach it before the socket closes.
                    tracing::info!(%peer, error = %e, "closed a connection that sent a message over the limit");
                    if let Some(tx) = close_tx.take() {
                        let _ = tx.send(CloseFrame {
                            code: CloseCode::Size,
                            reason: format!(
                                "message larger than the limit of {} bytes",
                                config.max_message_bytes
                            )
                            .into(),
                        });
                    }
                    let _ = tokio::time::timeout(CLOSE_LINGER, incoming.next()).await;
                    break;
                }
                Some(Err(e)) => {
                    tracing::info!(%peer, error = %e, "connection error");
                    break;
                }
            },
            _ = closing_rx.changed() => break,
            _ = stopped.changed() => break,
        }
    }
    for (_, t) in lock(&conn.forwarders).drain() {
        t.abort();
    }
    dispatcher.abort();
    // Gone from every session it was active in (VS Code sets itself again when it is back).
    let client_id = conn.client_id();
    if !client_id.is_empty() {
        for session in host.agent().live_sessions() {
            session.remove_active_client(&client_id).await;
        }
    }
    drop(conn);
    let _ = writer.await;
    tracing::info!(%peer, "client disconnected");
}

/// One text frame from a client, read.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientMessage {
    /// A request: it gets an answer.
    Request {
        /// Its id (a number or a string).
        id: Value,
        /// The method.
        method: String,
        /// The params (an object; `{}` when absent).
        params: Value,
    },
    /// A notification: no answer.
    Notification {
        /// The method.
        method: String,
        /// The params (an object; `{}` when absent).
        params: Value,
    },
    /// The answer to a request this server sent (the whole message).
    Response(Value),
}

/// Reads one text frame as JSON-RPC 2.0. An error comes with the id to answer it under
/// (`null` when the frame has none).
pub fn read_message(text: &str) -> Result<ClientMessage, Box<(Value, RpcError)>> {
    let msg: Value = serde_json::from_str(text).map_err(|e| {
        Box::new((
            Value::Null,
            RpcError::new(code::PARSE_ERROR, format!("not valid JSON: {e}")),
        ))
    })?;
    let id = msg.get("id").cloned();
    // JSON-RPC 2.0 §5: an error is answered under the request's id, or `null` when the id
    // cannot be read (an object or array is no id; echoing it answered under a non-id).
    let answer_id = id
        .clone()
        .filter(|i| i.is_number() || i.is_string())
        .unwrap_or(Value::Null);
    let invalid =
        |why: &str| Box::new((answer_id.clone(), RpcError::new(code::INVALID_REQUEST, why)));
    let Some(obj) = msg.as_object() else {
        return Err(invalid(
            "a JSON-RPC message must be an object (batches are not supported)",
        ));
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid("`jsonrpc` must be \"2.0\""));
    }
    let Some(method) = obj.get("method").and_then(Value::as_str) else {
        if obj.contains_key("result") || obj.contains_key("error") {
            return Ok(ClientMessage::Response(msg));
        }
        return Err(invalid("a request needs a `method` string"));
    };
    if let Some(id) = &id
        && !(id.is_number() || id.is_string())
    {
        return Err(invalid("`id` must be a number or a string"));
    }
    let params = obj.get("params").cloned().unwrap_or(json!({}));
    if !params.is_object() {
        return Err(Box::new((
            answer_id,
            RpcError::invalid_params("`params` must be an object"),
        )));
    }
    let method = method.to_owned();
    Ok(match id {
        Some(id) => ClientMessage::Request { id, method, params },
        None => ClientMessage::Notification { method, params },
    })
}

/// A latency mark (`trace`) for a dispatched `chat/turnStarted`, keyed by its session's id.
fn mark_turn_started(params: &Value) {
    if params["action"]["type"] != "chat/turnStarted" {
        return;
    }
    let session = params["channel"]
        .as_str()
        .and_then(claude_host_protocol::uri::session_of_default_chat)
        .unwrap_or_default();
    trace::mark(trace::AHP_DISPATCH, trace::key_of(&session));
}

async fn handle_text(host: &Arc<Host>, conn: &Arc<Conn>, text: &str) {
    let (id, method, params) = match read_message(text) {
        Ok(ClientMessage::Request { id, method, params }) => (Some(id), method, params),
        Ok(ClientMessage::Notification { method, params }) => (None, method, params),
        Ok(ClientMessage::Response(msg)) => {
            // The answer to a request this server sent.
            conn.answered(&msg);
            return;
        }
        Err(refused) => {
            let (id, e) = *refused;
            if e.code == code::PARSE_ERROR {
                tracing::info!(error = %e.message, "unparseable message");
            }
            conn.respond(&id, Err(e));
            return;
        }
    };
    let method = method.as_str();
    let initialized = conn.initialized.load(Ordering::SeqCst);
    match id {
        None => {
            if !initialized {
                tracing::info!(method = %Safe(method), "notification before initialize ignored");
                return;
            }
            match method {
                "dispatchAction" => {
                    tracing::debug!(
                        action = %Safe(params.pointer("/action/type").and_then(serde_json::Value::as_str).unwrap_or("")),
                        channel = %Safe(params.get("channel").and_then(serde_json::Value::as_str).unwrap_or("")),
                        "action");
                    if trace::enabled() {
                        mark_turn_started(&params);
                    }
                    // Never awaited here: the read loop goes on at once.
                    let _ = conn.dispatches.send(order::Inbound::Action(params));
                }
                "unsubscribe" => {
                    if let Some(uri) = params.get("channel").and_then(Value::as_str) {
                        conn.unsubscribe(uri);
                    }
                }
                other => tracing::info!(method = %other, "unknown notification ignored"),
            }
        }
        Some(id) => {
            if !initialized && !matches!(method, "initialize" | "reconnect" | "ping") {
                return conn.respond(
                    &id,
                    Err(RpcError::new(
                        code::INVALID_REQUEST,
                        format!("`{method}` before `initialize`"),
                    )),
                );
            }
            let Ok(permit) = conn.pending.clone().try_acquire_owned() else {
                return conn.respond(
                    &id,
                    Err(RpcError::new(
                        code::INTERNAL_ERROR,
                        format!(
                            "too many requests in flight (at most {}); wait for answers",
                            conn.max_pending
                        ),
                    )),
                );
            };
            // The order requests arrive in is what a client's race looks like in a log.
            tracing::debug!(%id, method = %Safe(method),
                channel = %Safe(params.get("channel").and_then(serde_json::Value::as_str).unwrap_or("")),
                "request");
            // Handshake messages run in order before anything else is read.
            if matches!(method, "initialize" | "reconnect") {
                request(host, conn, &id, method, params, None).await;
                drop(permit);
                return;
            }
            if method == "createSession" {
                host.announce_create(&params);
            }
            // Actions this client sends after a subscribe wait for its snapshot (`order`).
            let snapshot_taken = (method == "subscribe").then(|| {
                let (taken, rx) = oneshot::channel();
                let channel = params.get("channel").and_then(Value::as_str).unwrap_or("");
                let _ = conn.dispatches.send(order::Inbound::Subscribe {
                    channel: order::Channel::of(channel),
                    taken: rx,
                });
                taken
            });
            let (host, conn, method) = (host.clone(), conn.clone(), method.to_owned());
            tokio::spawn(async move {
                // A failure inside a handler still gets an answer, so the client never waits
                // on a request that died.
                let handler = {
                    let (conn, id, method) = (conn.clone(), id.clone(), method.clone());
                    tokio::spawn(async move {
                        request(&host, &conn, &id, &method, params, snapshot_taken).await
                    })
                };
                if let Err(e) = handler.await
                    && e.is_panic()
                {
                    tracing::error!(method = %Safe(&method), "a request handler panicked");
                    conn.respond(
                        &id,
                        Err(RpcError::new(
                            code::INTERNAL_ERROR,
                            format!("internal error while handling `{method}`"),
                        )),
                    );
                }
                drop(permit);
            });
        }
    }
}

/// Answers request `id`; a subscribe signals `snapshot_taken` once its snapshot is taken.
async fn request(
    host: &Arc<Host>,
    conn: &Arc<Conn>,
    id: &Value,
    method: &str,
    params: Value,
    snapshot_taken: Option<oneshot::Sender<()>>,
) {
    let result = match method {
        "ping" => Ok(Value::Null),
        "initialize" => return initialize(host, conn, id, &params).await,
        "reconnect" => return reconnect(host, conn, id, &params).await,
        "subscribe" => return subscribe(host, conn, id, &params, snapshot_taken).await,
        "createSession" => {
            let files: Arc<dyn claude_host_agent::customizations::sync::ClientFiles> = conn.clone();
            host.create_session(&params, Some((conn.client_id(), files)))
                .await
        }
        "disposeSession" => host.dispose_session(&params).await,
        "createChat" => host.create_chat(&params).await,
        "listSessions" => host.list_sessions(&params).await,
        "authenticate" => host.authenticate(&params).await,
        "resolveSessionConfig" => host.resolve_session_config(&params).await,
        "sessionConfigCompletions" => host.session_config_completions(&params).await,
        "fetchTurns" => return fetch_turns(host, conn, id, params).await,
        "completions" => host.completions(&params).await,
        "invokeChangesetOperation" => host.invoke_changeset_operation(&params).await,
        "createTerminal" => host.create_terminal(&params).await,
        "disposeTerminal" => host.dispose_terminal(&params).await,
        m if resources::is_resource_method(m) => host.resource(m, &params).await,
        other => Err(RpcError::new(
            code::METHOD_NOT_FOUND,
            format!("unknown method `{other}`"),
        )),
    };
    if let Err(e) = &result {
        tracing::info!(method = %Safe(method), code = e.code, message = %Safe(&e.message), "request failed");
    }
    conn.respond(id, result);
}

async fn initialize(host: &Arc<Host>, conn: &Arc<Conn>, id: &Value, params: &Value) {
    if conn.initialized.load(Ordering::SeqCst) {
        return conn.respond(
            id,
            Err(RpcError::new(
                code::INVALID_REQUEST,
                "`initialize` was already received",
            )),
        );
    }
    let (mut result, subs) = match host.initialize(params).await {
        Ok(r) => r,
        Err(e) => {
            // No common version: answer, then end the connection (the spec's rule).
            let close = e.code == code::UNSUPPORTED_PROTOCOL_VERSION;
            conn.respond(id, Err(e));
            if close {
                let _ = conn.closing.send(true);
            }
            return;
        }
    };
    let client_id = params
        .get("clientId")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if let Some(c) = &client_id {
        host.remember_client(c);
    }
    *lock(&conn.client_id) = client_id;
    let (snapshots, missing, opening) = open_channels(host, &subs).await;
    for uri in missing {
        tracing::info!(uri = %Safe(&uri), "initial subscription skipped: no such channel");
    }
    result.snapshots = snapshots;
    conn.initialized.store(true, Ordering::SeqCst);
    conn.respond_ok(id, &result);
    // Tell the client up front that sessions need a GitHub sign-in.
    if !host.agent().is_authenticated() {
        for resource in host.agent().protected_resources() {
            let frame = json!({"jsonrpc": "2.0", "method": "auth/required",
                "params": {"channel": ROOT, "resource": resource, "reason": "required"}});
            conn.send(frame.to_string().into());
        }
    }
    opening.start(host, conn);
}

async fn subscribe(
    host: &Arc<Host>,
    conn: &Arc<Conn>,
    id: &Value,
    params: &Value,
    snapshot_taken: Option<oneshot::Sender<()>>,
) {
    let Some(uri) = params.get("channel").and_then(Value::as_str) else {
        return conn.respond(id, Err(RpcError::invalid_params("missing `channel`")));
    };
    match host.target(uri).await {
        // The session's feed answers, in order with the actions it forwards.
        Ok(Target::Session(handle, kind)) => {
            // Its first `@` completion is answered from an index built meanwhile.
            host.warm_file_index(&handle);
            // `view.turns`: how many of a chat's newest turns its snapshot holds (advisory;
            // a negative count is read as none).
            let view_turns = params
                .get("view")
                .and_then(|v| v.get("turns"))
                .and_then(Value::as_i64)
                .map(|n| usize::try_from(n).unwrap_or(0));
            let shown = host.turns_shown(view_turns);
            conn.subscribe_in_feed(handle, uri, kind, id, snapshot_taken, shown)
        }
        Ok(Target::Root) => {
            // The old stream has stopped before the new snapshot is taken.
            conn.stop_root().await;
            let (snapshot, rx) = host.root_subscribe();
            drop(snapshot_taken);
            conn.respond_ok(
                id,
                &SubscribeResult {
                    snapshot: Some(snapshot),
                },
            );
            conn.forward_root_notifications(host.notifications());
            conn.forward_root(rx);
        }
        Err(e) => conn.respond(id, Err(e)),
    }
}

/// `fetchTurns`: older turns of a chat the client holds a window of (`subscribe` with
/// `view.turns`), loaded into its state alone by the session's feed.
async fn fetch_turns(host: &Arc<Host>, conn: &Arc<Conn>, id: &Value, params: Value) {
    let p: ahp_types::commands::FetchTurnsParams = match crate::rpc::from_params(params) {
        Ok(p) => p,
        Err(e) => return conn.respond(id, Err(e)),
    };
    match host.target(&p.channel).await {
        Ok(Target::Session(handle, ChannelKind::Chat | ChannelKind::Subagent(_))) => {
            conn.fetch_in_feed(handle.id(), &p.channel, p.cursor, id);
        }
        Ok(_) => conn.respond(
            id,
            Err(RpcError::invalid_params(format!(
                "{} is not a chat: only a chat has turns to fetch",
                p.channel
            ))),
        ),
        Err(e) => conn.respond(id, Err(e)),
    }
}

async fn reconnect(host: &Arc<Host>, conn: &Arc<Conn>, id: &Value, params: &Value) {
    // Older VS Code builds send `reconnect` without `channel`; it can only mean the root.
    let mut params = params.clone();
    if let Some(o) = params.as_object_mut() {
        o.entry("channel").or_insert_with(|| json!(ROOT));
    }
    let p: ahp_types::commands::ReconnectParams = match crate::rpc::from_params(params) {
        Ok(p) => p,
        Err(e) => return conn.respond(id, Err(e)),
    };
    let last_seen = u64::try_from(p.last_seen_server_seq).unwrap_or(0);
    if !host.can_resume(&p.client_id, last_seen) {
        tracing::info!(client = %p.client_id, last_seen, "a reconnect this host cannot resume; the client must initialize");
        return conn.respond(
            id,
            Err(RpcError::new(
                code::NOT_FOUND,
                format!(
                    "client {} is unknown to this host (it restarted?); send `initialize` again",
                    p.client_id
                ),
            )),
        );
    }
    *lock(&conn.client_id) = Some(p.client_id.clone());
    conn.initialized.store(true, Ordering::SeqCst);
    if let Some((actions, missing, opening)) =
        replay_channels(host, &p.subscriptions, last_seen).await
    {
        let envelopes: Vec<&ahp_types::actions::ActionEnvelope> =
            actions.iter().map(|p| &p.envelope).collect();
        conn.respond(
            id,
            Ok(json!({"type": "replay", "actions": envelopes, "missing": missing})),
        );
        opening.start(host, conn);
        return;
    }
    let (snapshots, _, opening) = open_channels(host, &p.subscriptions).await;
    conn.respond_ok(
        id,
        &ReconnectResult::Snapshot(ReconnectSnapshotResult { snapshots }),
    );
    opening.start(host, conn);
}

/// Streams opened by a handshake (`initialize`, `reconnect`), started once its answer is out:
/// the root's, and one per session for all of that session's channels (see `feed`).
#[derive(Default)]
struct Opening {
    root: Option<broadcast::Receiver<Arc<Published>>>,
    sessions: Vec<OpenedSession>,
}

/// A session whose channels a handshake opened.
struct OpenedSession {
    handle: SessionHandle,
    sub: SessionSubscription,
    /// Channel URI → the `serverSeq` after which its actions are new to the client.
    from: HashMap<String, u64>,
    /// The chats the client holds only the newest turns of.
    windows: HashMap<String, feed::Window>,
}

impl OpenedSession {
    fn new(handle: SessionHandle, sub: SessionSubscription) -> Self {
        OpenedSession {
            handle,
            sub,
            from: HashMap::new(),
            windows: HashMap::new(),
        }
    }
}

impl Opening {
    fn start(self, host: &Host, conn: &Arc<Conn>) {
        if let Some(rx) = self.root {
            conn.forward_root_notifications(host.notifications());
            conn.forward_root(rx);
        }
        for s in self.sessions {
            conn.start_feed(s.handle, Some(s.sub), s.from, s.windows);
        }
    }

    /// The index of `handle`'s session, if it is open already.
    fn session(&self, handle: &SessionHandle) -> Option<usize> {
        self.sessions
            .iter()
            .position(|s| s.handle.id() == handle.id())
    }
}

/// Snapshots of `uris` in order, the ones that name nothing, and their streams: the channels
/// of one session share one subscription, so their snapshots are of one moment, and each
/// copies only its own channel's state.
async fn open_channels(host: &Host, uris: &[String]) -> (Vec<Snapshot>, Vec<String>, Opening) {
    let mut opening = Opening::default();
    let mut shown: Vec<Option<Snapshot>> = Vec::with_capacity(uris.len());
    // Each session's channels, as (the URI's index, its kind), to copy in one command.
    let mut wanted: Vec<(SessionHandle, Vec<(usize, ChannelKind)>)> = Vec::new();
    for (at, uri) in uris.iter().enumerate() {
        shown.push(None);
        match host.target(uri).await {
            Ok(Target::Root) => {
                let (snapshot, rx) = host.root_subscribe();
                shown[at] = Some(snapshot);
                opening.root = Some(rx);
            }
            Ok(Target::Session(handle, kind)) => {
                match wanted.iter_mut().find(|(h, _)| h.id() == handle.id()) {
                    Some((_, channels)) => channels.push((at, kind)),
                    None => wanted.push((handle, vec![(at, kind)])),
                }
            }
            Err(_) => {}
        }
    }
    // A handshake names channels only: a long chat gets the host's bound.
    let bound = host.turns_shown(None);
    for (handle, channels) in wanted {
        let wants = channels
            .iter()
            .map(|(at, kind)| feed::want(&uris[*at], kind, bound))
            .collect();
        let Ok((copies, sub)) = handle.subscribe_channels(wants).await else {
            continue;
        };
        let mut opened = OpenedSession::new(handle, sub);
        for ((at, kind), copy) in channels.into_iter().zip(copies.channels) {
            let uri = &uris[at];
            let Some((mut snapshot, older)) =
                copy.and_then(|c| Host::channel_snapshot(uri, &kind, c, copies.seq))
            else {
                continue;
            };
            if let Some(w) =
                feed::bound_chat(&mut snapshot, &kind, bound, older, opened.handle.id())
            {
                opened.windows.insert(uri.clone(), w);
            }
            opened.from.insert(uri.clone(), copies.seq);
            shown[at] = Some(snapshot);
        }
        opening.sessions.push(opened);
    }
    let mut snapshots = Vec::with_capacity(uris.len());
    let mut missing = Vec::new();
    for (uri, snapshot) in uris.iter().zip(shown) {
        match snapshot {
            Some(s) => snapshots.push(s),
            None => missing.push(uri.clone()),
        }
    }
    (snapshots, missing, opening)
}

/// The actions of `uris` after `last_seen` in `serverSeq` order, the URIs that name nothing,
/// and the streams right after them; `None` when some of the actions are no longer kept.
async fn replay_channels(
    host: &Host,
    uris: &[String],
    last_seen: u64,
) -> Option<(Vec<Arc<Published>>, Vec<String>, Opening)> {
    let mut opening = Opening::default();
    let mut replayed: Vec<Vec<Arc<Published>>> = Vec::new();
    let mut actions = Vec::new();
    let mut missing = Vec::new();
    for uri in uris {
        match host.target(uri).await {
            Ok(Target::Root) => {
                let root = host.root_replay(last_seen)?;
                actions.extend(root.actions);
                opening.root = Some(root.live);
            }
            Ok(Target::Session(handle, _)) => {
                let at = match opening.session(&handle) {
                    Some(at) => at,
                    None => {
                        let (session, sub) = handle.replay_after(last_seen).await.ok()??;
                        opening.sessions.push(OpenedSession::new(handle, sub));
                        replayed.push(session);
                        replayed.len() - 1
                    }
                };
                // The stream starts right after the replay: everything in it is new.
                opening.sessions[at].from.insert(uri.clone(), last_seen);
            }
            Err(_) => missing.push(uri.clone()),
        }
    }
    for (at, session) in replayed.into_iter().enumerate() {
        let from = &opening.sessions[at].from;
        actions.extend(
            session
                .into_iter()
                .filter(|p| from.contains_key(p.channel())),
        );
    }
    actions.sort_by_key(|p| p.seq());
    Some((actions, missing, opening))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_whose_queue_is_full_is_closed_not_waited_for() {
        let (conn, closed, _rx) = test_conn(2);
        assert!(conn.send("1".into()));
        assert!(conn.send("2".into()));
        assert!(!*closed.borrow());
        assert!(!conn.send("3".into()), "never blocks on a full queue");
        assert!(*closed.borrow(), "the slow connection is told to close");
    }

    /// An acceptor that always fails, counting how often it is asked.
    struct Failing(Arc<std::sync::atomic::AtomicUsize>);

    impl Acceptor for Failing {
        async fn accept(&mut self) -> std::io::Result<(TcpStream, SocketAddr)> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Err(std::io::Error::from_raw_os_error(libc::EMFILE))
        }
    }

    fn test_conn(queue: usize) -> (Conn, watch::Receiver<bool>, mpsc::Receiver<Arc<str>>) {
        let (out, rx) = mpsc::channel(queue);
        let (closing, closed) = watch::channel(false);
        let (dispatches, _d) = mpsc::unbounded_channel();
        (
            Conn {
                out,
                dispatches,
                client_id: Mutex::new(None),
                initialized: AtomicBool::new(true),
                closing,
                forwarders: Mutex::new(HashMap::new()),
                feeds: Mutex::new(HashMap::new()),
                root_task: Mutex::new(None),
                asked: Mutex::new(HashMap::new()),
                next_ask: std::sync::atomic::AtomicU64::new(0),
                pending: Arc::new(Semaphore::new(1)),
                max_pending: 1,
            },
            closed,
            rx,
        )
    }

    #[tokio::test(start_paused = true)]
    async fn failed_accepts_back_off_instead_of_spinning() {
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let agent = {
            let proxy = claude_host_proxy::start(
                claude_host_proxy::ProxyConfig::default(),
                Arc::new(claude_host_upstream::signed_out::SignedOut),
            )
            .await
            .unwrap();
            let factory = |_: &str| -> Arc<dyn claude_host_upstream::Upstream> {
                Arc::new(claude_host_upstream::signed_out::SignedOut)
            };
            Arc::new(claude_host_agent::Agent::new(
                claude_host_agent::AgentConfig::new("claude".into(), "/".into()),
                Arc::new(claude_host_agent::ProxyModels::signed_out(
                    proxy,
                    Arc::new(factory),
                )),
                None,
            ))
        };
        let host = Host::new(agent, crate::HostConfig::default()).await;
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(accept_loop(
            Failing(calls.clone()),
            host,
            Arc::new(ServeConfig::default()),
            stopped,
        ));
        // Ten seconds of (paused, auto-advancing) time.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let n = calls.load(Ordering::SeqCst);
        // 5 ms doubling to 1 s: about 8 tries to reach the cap, then one a second.
        assert!((10..=25).contains(&n), "{n} accept calls in 10 s");
        let _ = stop.send(true);
        task.await.unwrap();
    }

    #[tokio::test]
    async fn a_connection_that_missed_notifications_is_closed_not_left_stale() {
        let (conn, closed, mut out) = test_conn(64);
        let (tx, rx) = broadcast::channel::<Arc<str>>(4);
        // More than the ring holds, before the forwarder reads any.
        for i in 0..10 {
            tx.send(format!("n{i}").into()).unwrap();
        }
        tokio::time::timeout(Duration::from_secs(5), forward_notifications(&conn, rx))
            .await
            .expect("the forwarder ends");
        assert!(*closed.borrow(), "the connection is told to close");
        assert!(out.try_recv().is_err(), "nothing stale was sent");
    }

    #[test]
    fn the_token_is_taken_from_the_query_only_exactly() {
        let req = |uri: &str| Request::builder().uri(uri).body(()).unwrap();
        assert!(token_ok(&req("/?tkn=abc"), "abc"));
        assert!(token_ok(&req("/?x=1&tkn=abc"), "abc"));
        assert!(!token_ok(&req("/?tkn=abcd"), "abc"));
        assert!(!token_ok(&req("/?tkn=ab"), "abc"));
        assert!(!token_ok(&req("/"), "abc"));
        assert!(!token_ok(&req("/abc"), "abc"));
    }
}
