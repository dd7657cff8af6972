//! The WebSocket transport: one JSON-RPC 2.0 message per text frame, a connection token on
//! the upgrade request, bounded frames, bounded pending requests, and a bounded outbound
//! queue per connection so a slow reader never stalls anyone else.

use crate::channel::Published;
use crate::host::{Host, ROOT};
use crate::resources;
use crate::rpc::{RpcError, code};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, broadcast, mpsc, watch};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

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
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8081)),
            connection_token: None,
            max_message_bytes: 32 * 1024 * 1024,
            max_pending_requests: 64,
            outbound_queue: 4096,
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
    let listener = TcpListener::bind(config.listen).await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(accept_loop(listener, host, Arc::new(config), stopped));
    Ok(ServerHandle { addr, stop, task })
}

async fn accept_loop(
    listener: TcpListener,
    host: Arc<Host>,
    config: Arc<ServeConfig>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(connection(stream, peer, host.clone(), config.clone(), stopped.clone()));
                }
                Err(e) => tracing::warn!(error = %e, "accept failed"),
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
    client_id: Mutex<Option<String>>,
    initialized: AtomicBool,
    closing: watch::Sender<bool>,
    forwarders: Mutex<HashMap<String, tokio::task::AbortHandle>>,
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
        let msg = match result {
            Ok(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
            Err(e) => json!({"jsonrpc": "2.0", "id": id, "error": e.to_json()}),
        };
        self.send(msg.to_string().into());
    }

    fn client_id(&self) -> String {
        lock(&self.client_id).clone().unwrap_or_default()
    }

    /// Forwards a channel's live actions to this connection.
    fn forward(self: &Arc<Self>, uri: &str, mut live: broadcast::Receiver<Arc<Published>>) {
        let conn = self.clone();
        let task = tokio::spawn(async move {
            loop {
                match live.recv().await {
                    Ok(p) => {
                        if !conn.send(p.frame.clone()) {
                            break;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        tracing::warn!("a client fell behind a channel; closing its connection");
                        let _ = conn.closing.send(true);
                        break;
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                }
            }
        });
        if let Some(old) = lock(&self.forwarders).insert(uri.to_owned(), task.abort_handle()) {
            old.abort();
        }
    }

    fn forward_root_notifications(self: &Arc<Self>, mut rx: broadcast::Receiver<Arc<str>>) {
        let conn = self.clone();
        let task = tokio::spawn(async move {
            while let Ok(frame) = rx.recv().await {
                if !conn.send(frame) {
                    break;
                }
            }
        });
        if let Some(old) =
            lock(&self.forwarders).insert("#notifications".into(), task.abort_handle())
        {
            old.abort();
        }
    }

    fn unsubscribe(&self, uri: &str) {
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
    let ws = match tokio_tungstenite::accept_hdr_async_with_config(stream, check, Some(ws_config))
        .await
    {
        Ok(ws) => ws,
        Err(e) => {
            tracing::debug!(%peer, error = %e, "WebSocket handshake failed");
            return;
        }
    };
    tracing::info!(%peer, "client connected");
    let (mut sink, mut incoming) = ws.split();
    let (out, mut out_rx) = mpsc::channel::<Arc<str>>(config.outbound_queue.max(16));
    let (closing, mut closing_rx) = watch::channel(false);
    let conn = Arc::new(Conn {
        out,
        client_id: Mutex::new(None),
        initialized: AtomicBool::new(false),
        closing,
        forwarders: Mutex::new(HashMap::new()),
        pending: Arc::new(Semaphore::new(config.max_pending_requests.max(1))),
        max_pending: config.max_pending_requests.max(1),
    });
    let writer = tokio::spawn(async move {
        while let Some(frame) = out_rx.recv().await {
            if sink
                .send(Message::Text(frame.as_ref().into()))
                .await
                .is_err()
            {
                return;
            }
        }
        let _ = sink.close().await;
    });
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
    drop(conn);
    let _ = writer.await;
    tracing::info!(%peer, "client disconnected");
}

async fn handle_text(host: &Arc<Host>, conn: &Arc<Conn>, text: &str) {
    let msg: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            tracing::info!(error = %e, "unparseable message");
            conn.respond(
                &Value::Null,
                Err(RpcError::new(
                    code::PARSE_ERROR,
                    format!("not valid JSON: {e}"),
                )),
            );
            return;
        }
    };
    let id = msg.get("id").cloned();
    let invalid = |why: &str| {
        conn.respond(
            id.as_ref().unwrap_or(&Value::Null),
            Err(RpcError::new(code::INVALID_REQUEST, why)),
        );
    };
    let Some(obj) = msg.as_object() else {
        return invalid("a JSON-RPC message must be an object (batches are not supported)");
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid("`jsonrpc` must be \"2.0\"");
    }
    let Some(method) = obj.get("method").and_then(Value::as_str) else {
        if obj.contains_key("result") || obj.contains_key("error") {
            // A response to a server request; this server sends none.
            return;
        }
        return invalid("a request needs a `method` string");
    };
    if let Some(id) = &id
        && !(id.is_number() || id.is_string())
    {
        return invalid("`id` must be a number or a string");
    }
    let params = obj.get("params").cloned().unwrap_or(json!({}));
    if !params.is_object() {
        return conn.respond(
            id.as_ref().unwrap_or(&Value::Null),
            Err(RpcError::invalid_params("`params` must be an object")),
        );
    }
    let initialized = conn.initialized.load(Ordering::SeqCst);
    match id {
        None => {
            if !initialized {
                tracing::info!(%method, "notification before initialize ignored");
                return;
            }
            match method {
                "dispatchAction" => host.dispatch(&conn.client_id(), &params).await,
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
            // Handshake messages run in order before anything else is read.
            if matches!(method, "initialize" | "reconnect") {
                request(host, conn, &id, method, params).await;
                drop(permit);
                return;
            }
            let (host, conn, method) = (host.clone(), conn.clone(), method.to_owned());
            tokio::spawn(async move {
                // A failure inside a handler still gets an answer, so the client never waits
                // on a request that died.
                let handler = {
                    let (conn, id, method) = (conn.clone(), id.clone(), method.clone());
                    tokio::spawn(async move { request(&host, &conn, &id, &method, params).await })
                };
                if let Err(e) = handler.await
                    && e.is_panic()
                {
                    tracing::error!(%method, "a request handler panicked");
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

async fn request(host: &Arc<Host>, conn: &Arc<Conn>, id: &Value, method: &str, params: Value) {
    let result = match method {
        "ping" => Ok(Value::Null),
        "initialize" => return initialize(host, conn, id, &params).await,
        "reconnect" => return reconnect(host, conn, id, &params).await,
        "subscribe" => return subscribe(host, conn, id, &params).await,
        "createSession" => host.create_session(&params).await,
        "disposeSession" => host.dispose_session(&params).await,
        "createChat" => host.create_chat(&params).await,
        "listSessions" => host.list_sessions(&params).await,
        "authenticate" => host.authenticate(&params).await,
        "resolveSessionConfig" => host.resolve_session_config(&params).await,
        "sessionConfigCompletions" => host.session_config_completions(&params).await,
        "fetchTurns" => host.fetch_turns(&params).await,
        m if resources::is_resource_method(m) => host.resource(m, &params).await,
        other => Err(RpcError::new(
            code::METHOD_NOT_FOUND,
            format!("unknown method `{other}`"),
        )),
    };
    if let Err(e) = &result {
        tracing::info!(%method, code = e.code, message = %e.message, "request failed");
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
    *lock(&conn.client_id) = params
        .get("clientId")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut live = Vec::new();
    let mut snapshots = Vec::new();
    for uri in subs {
        match host.channel(&uri).await {
            Ok(ch) => {
                let sub = ch.subscribe(host.seq_counter());
                snapshots.push(json!(sub.snapshot));
                live.push((uri, sub.live));
            }
            Err(e) => tracing::info!(%uri, error = %e, "initial subscription skipped"),
        }
    }
    result["snapshots"] = json!(snapshots);
    conn.initialized.store(true, Ordering::SeqCst);
    conn.respond(id, Ok(result));
    // Tell the client up front that sessions need a GitHub sign-in.
    if !host.agent().is_authenticated().await {
        for resource in host.agent().protected_resources() {
            let frame = json!({"jsonrpc": "2.0", "method": "auth/required",
                "params": {"channel": ROOT, "resource": resource, "reason": "required"}});
            conn.send(frame.to_string().into());
        }
    }
    for (uri, rx) in live {
        if uri == ROOT {
            conn.forward_root_notifications(host.notifications());
        }
        conn.forward(&uri, rx);
    }
}

async fn subscribe(host: &Arc<Host>, conn: &Arc<Conn>, id: &Value, params: &Value) {
    let Some(uri) = params.get("channel").and_then(Value::as_str) else {
        return conn.respond(id, Err(RpcError::invalid_params("missing `channel`")));
    };
    match host.channel(uri).await {
        Ok(ch) => {
            let sub = ch.subscribe(host.seq_counter());
            conn.respond(id, Ok(json!({ "snapshot": sub.snapshot })));
            if uri == ROOT {
                conn.forward_root_notifications(host.notifications());
            }
            conn.forward(uri, sub.live);
        }
        Err(e) => conn.respond(id, Err(e)),
    }
}

async fn reconnect(host: &Arc<Host>, conn: &Arc<Conn>, id: &Value, params: &Value) {
    let p: ahp_types::commands::ReconnectParams = match crate::rpc::from_params(params.clone()) {
        Ok(p) => p,
        Err(e) => return conn.respond(id, Err(e)),
    };
    *lock(&conn.client_id) = Some(p.client_id.clone());
    let last_seen = p.last_seen_server_seq.max(0) as u64;
    let mut channels = Vec::new();
    let mut missing = Vec::new();
    for uri in &p.subscriptions {
        match host.channel(uri).await {
            Ok(ch) => channels.push((uri.clone(), ch)),
            Err(_) => missing.push(uri.clone()),
        }
    }
    let replays: Option<Vec<_>> = channels
        .iter()
        .map(|(uri, ch)| ch.replay_after(last_seen).map(|r| (uri.clone(), r)))
        .collect();
    conn.initialized.store(true, Ordering::SeqCst);
    match replays {
        Some(replays) => {
            let mut actions: Vec<Arc<Published>> = replays
                .iter()
                .flat_map(|(_, r)| r.actions.iter().cloned())
                .collect();
            actions.sort_by_key(|p| p.seq);
            let envelopes: Vec<&ahp_types::actions::ActionEnvelope> =
                actions.iter().map(|p| &p.envelope).collect();
            conn.respond(
                id,
                Ok(json!({"type": "replay", "actions": envelopes, "missing": missing})),
            );
            for (uri, r) in replays {
                if uri == ROOT {
                    conn.forward_root_notifications(host.notifications());
                }
                conn.forward(&uri, r.live);
            }
        }
        None => {
            let subs: Vec<_> = channels
                .iter()
                .map(|(uri, ch)| (uri.clone(), ch.subscribe(host.seq_counter())))
                .collect();
            let snapshots: Vec<Value> = subs.iter().map(|(_, s)| json!(s.snapshot)).collect();
            conn.respond(id, Ok(json!({"type": "snapshot", "snapshots": snapshots})));
            for (uri, s) in subs {
                if uri == ROOT {
                    conn.forward_root_notifications(host.notifications());
                }
                conn.forward(&uri, s.live);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_whose_queue_is_full_is_closed_not_waited_for() {
        let (out, _rx) = mpsc::channel(2);
        let (closing, closed) = watch::channel(false);
        let conn = Conn {
            out,
            client_id: Mutex::new(None),
            initialized: AtomicBool::new(true),
            closing,
            forwarders: Mutex::new(HashMap::new()),
            pending: Arc::new(Semaphore::new(1)),
            max_pending: 1,
        };
        assert!(conn.send("1".into()));
        assert!(conn.send("2".into()));
        assert!(!*closed.borrow());
        assert!(!conn.send("3".into()), "never blocks on a full queue");
        assert!(*closed.borrow(), "the slow connection is told to close");
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
