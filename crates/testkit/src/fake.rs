//! A fake GitHub (web + API) and Copilot API on one loopback port, with scripted model
//! replies in the exact wire formats (Anthropic `/v1/messages`; OpenAI `/chat/completions` and
//! `/responses`), request capture, and disconnect detection.

pub use crate::replies::{Block, Gate, Match, Reply, Rule};

use crate::openai::{Endpoint, to_anthropic};
use crate::openai_render::{self as render, ChatUsage, Ctx};
use crate::replies::{Kind, Plan, event, render_message, sse_events};
use anyhow::Context as _;
use bytes::Bytes;
use claude_host_protocol::messages::last_user_text;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How the device flow ends after the pending polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceOutcome {
    /// A token is granted.
    Success,
    /// The user declined.
    AccessDenied,
    /// The code expired.
    Expired,
    /// One `slow_down`, then a token.
    SlowDownOnce,
}

/// Fake settings.
#[derive(Debug, Clone)]
pub struct FakeConfig {
    /// `authorization_pending` answers before the outcome.
    pub device_flow_pending_polls: usize,
    /// How the device flow ends.
    pub device_flow_outcome: DeviceOutcome,
    /// The GitHub token the fake grants and accepts.
    pub github_token: String,
    /// Further GitHub tokens accepted (a second account signing in).
    pub other_github_tokens: Vec<String>,
    /// The GitHub login.
    pub login: String,
    /// The Copilot catalog.
    pub models: Vec<Value>,
    /// Record violations of the Copilot header contract on the model endpoints
    /// (`/v1/messages`, `/chat/completions`, `/responses`).
    pub require_copilot_headers: bool,
    /// SSE events per body write (real upstreams batch; benchmarks use 10).
    pub sse_events_per_write: usize,
    /// Each SSE event its own HTTP chunk, as real upstreams send them; the
    /// `sse_events_per_write` chunks of a group still reach the socket together. Off: a group
    /// is one chunk (the best case for a relay).
    pub sse_chunk_per_event: bool,
    /// A pause between groups of events (a model's pace); `None`: as fast as the socket takes.
    pub sse_group_gap: Option<std::time::Duration>,
    /// Chat Completions streams report usage inside the `finish_reason` chunk, as Copilot
    /// sometimes does; off: in a last chunk of its own with `choices: []` (OpenAI's way).
    pub chat_usage_in_finish_chunk: bool,
    /// A scripted mid-stream error on `/responses` is a bare `error` event; off: a
    /// `response.failed` event carrying the error (OpenAI's terminal event for a failure).
    pub responses_error_event: bool,
}

impl Default for FakeConfig {
    fn default() -> Self {
        FakeConfig {
            device_flow_pending_polls: 1,
            device_flow_outcome: DeviceOutcome::Success,
            github_token: "gho_fake_github_token".into(),
            other_github_tokens: Vec::new(),
            login: "octocat".into(),
            models: default_models(),
            require_copilot_headers: true,
            sse_events_per_write: 1,
            sse_chunk_per_event: false,
            sse_group_gap: None,
            chat_usage_in_finish_chunk: false,
            responses_error_event: false,
        }
    }
}

/// A request the fake received.
#[derive(Debug, Clone)]
pub struct CapturedRequest {
    /// Method.
    pub method: String,
    /// Path with query.
    pub path: String,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Bytes,
    /// When it arrived.
    pub received_at: Instant,
}

impl CapturedRequest {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`Null` when it is not JSON), as sent.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The model endpoint this request is for (`None`: not a model call).
    pub fn endpoint(&self) -> Option<Endpoint> {
        Endpoint::from_path(&self.path).filter(|_| self.method == "POST")
    }

    /// The body as an Anthropic Messages request: an OpenAI body through
    /// [`crate::openai::to_anthropic`], any other as [`CapturedRequest::json`].
    pub fn anthropic_json(&self) -> Value {
        let body = self.json();
        match self.endpoint() {
            Some(e) => to_anthropic(e, &body),
            None => body,
        }
    }

    /// The text of the last user message (of the Anthropic form of an OpenAI body).
    pub fn last_user_text(&self) -> String {
        last_user_text(&self.anthropic_json())
    }
}

struct Tokens {
    /// token → expires_at
    valid: HashMap<String, i64>,
    last: String,
    expires_in: i64,
    refresh_in: i64,
}

struct State {
    config: FakeConfig,
    url: String,
    requests: Mutex<Vec<CapturedRequest>>,
    request_notify: tokio::sync::Notify,
    rules: Mutex<Vec<(Rule, usize)>>,
    default_reply: Mutex<Reply>,
    mints: AtomicUsize,
    mint_notify: tokio::sync::Notify,
    /// While set and closed, mint requests are held after they are counted.
    mint_hold: Mutex<Option<tokio::sync::watch::Receiver<bool>>>,
    failing_mints: Mutex<VecDeque<(u16, Value)>>,
    reject_messages: AtomicUsize,
    tokens: Mutex<Tokens>,
    device_polls: Mutex<HashMap<String, usize>>,
    violations: Mutex<Vec<String>>,
    disconnects: AtomicUsize,
    disconnect_notify: tokio::sync::Notify,
    /// TCP connections accepted.
    connections: AtomicUsize,
    ids: AtomicU64,
    /// Premium requests are used up: premium models answer 402 `quota_exceeded`.
    premium_exhausted: std::sync::atomic::AtomicBool,
}

/// The running fake.
pub struct FakeUpstream {
    state: Arc<State>,
    addr: SocketAddr,
    cancel: CancellationToken,
    tracker: tokio_util::task::TaskTracker,
}

impl std::fmt::Debug for FakeUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeUpstream")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl FakeUpstream {
    /// Starts with the default configuration.
    pub async fn start() -> anyhow::Result<FakeUpstream> {
        Self::start_with(FakeConfig::default()).await
    }

    /// Starts on `127.0.0.1:0`.
    pub async fn start_with(config: FakeConfig) -> anyhow::Result<FakeUpstream> {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
        let listener = socket.listen(1024)?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            config,
            url: format!("http://{addr}"),
            requests: Mutex::new(Vec::new()),
            request_notify: tokio::sync::Notify::new(),
            rules: Mutex::new(Vec::new()),
            default_reply: Mutex::new(Reply::text("ok")),
            mints: AtomicUsize::new(0),
            mint_notify: tokio::sync::Notify::new(),
            mint_hold: Mutex::new(None),
            failing_mints: Mutex::new(VecDeque::new()),
            reject_messages: AtomicUsize::new(0),
            tokens: Mutex::new(Tokens {
                valid: HashMap::new(),
                last: String::new(),
                expires_in: 1800,
                refresh_in: 1500,
            }),
            device_polls: Mutex::new(HashMap::new()),
            violations: Mutex::new(Vec::new()),
            disconnects: AtomicUsize::new(0),
            disconnect_notify: tokio::sync::Notify::new(),
            connections: AtomicUsize::new(0),
            ids: AtomicU64::new(1),
            premium_exhausted: std::sync::atomic::AtomicBool::new(false),
        });
        let cancel = CancellationToken::new();
        let tracker = tokio_util::task::TaskTracker::new();
        {
            let (state, cancel, tracker2) = (state.clone(), cancel.clone(), tracker.clone());
            tracker.spawn(async move {
                loop {
                    let (stream, _) = tokio::select! {
                        () = cancel.cancelled() => return,
                        r = listener.accept() => match r { Ok(p) => p, Err(_) => continue },
                    };
                    let _ = stream.set_nodelay(true);
                    state.connections.fetch_add(1, Ordering::SeqCst);
                    let state = state.clone();
                    let cancel = cancel.clone();
                    tracker2.spawn(async move {
                        let svc = hyper::service::service_fn(move |req| {
                            let state = state.clone();
                            async move { Ok::<_, std::convert::Infallible>(handle(state, req).await) }
                        });
                        let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), svc);
                        tokio::select! {
                            _ = conn => {}
                            () = cancel.cancelled() => {}
                        }
                    });
                }
            });
        }
        Ok(FakeUpstream {
            state,
            addr,
            cancel,
            tracker,
        })
    }

    /// `http://127.0.0.1:<port>`: the GitHub web, GitHub API and Copilot API base.
    pub fn url(&self) -> String {
        self.state.url.clone()
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Calls to `/copilot_internal/v2/token` so far.
    pub fn mint_count(&self) -> usize {
        self.state.mints.load(Ordering::SeqCst)
    }

    /// Holds every mint request from now on, once it has arrived and been counted, until the
    /// returned gate opens: a test can act while a mint is in flight.
    pub fn hold_mints(&self) -> Gate {
        let (gate, rx) = Gate::new();
        *lock(&self.state.mint_hold) = Some(rx);
        gate
    }

    /// Waits until at least `n` calls to `/copilot_internal/v2/token` have arrived.
    pub async fn wait_mints(&self, n: usize, timeout: Duration) -> anyhow::Result<()> {
        wait_count(
            &self.state.mint_notify,
            || self.mint_count(),
            n,
            timeout,
            "mints",
        )
        .await
    }

    /// The last minted Copilot token.
    pub fn current_copilot_token(&self) -> String {
        lock(&self.state.tokens).last.clone()
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<CapturedRequest> {
        lock(&self.state.requests).clone()
    }

    /// Every model call so far (`POST /v1/messages`, `/chat/completions`, `/responses`, and
    /// the OpenAI endpoints' `/v1/` aliases), in arrival order.
    pub fn model_requests(&self) -> Vec<CapturedRequest> {
        lock(&self.state.requests)
            .iter()
            .filter(|r| r.endpoint().is_some())
            .cloned()
            .collect()
    }

    /// Every `POST /v1/messages` so far.
    pub fn message_requests(&self) -> Vec<CapturedRequest> {
        lock(&self.state.requests)
            .iter()
            .filter(|r| r.method == "POST" && path_only(&r.path) == "/v1/messages")
            .cloned()
            .collect()
    }

    /// Forgets the requests captured so far, returning how many were `POST /v1/messages`: a
    /// test that sends thousands measures its process's memory without the fake's log of them.
    pub fn forget_requests(&self) -> usize {
        std::mem::take(&mut *lock(&self.state.requests))
            .iter()
            .filter(|r| r.method == "POST" && path_only(&r.path) == "/v1/messages")
            .count()
    }

    /// Adds a scripted reply.
    pub fn push(&self, rule: Rule) {
        let uses = rule.times.unwrap_or(1);
        lock(&self.state.rules).push((rule, uses));
    }

    /// Scripts a main loop that uses each of Claude Code's core tools once, every reply used
    /// once and keyed on the result of the step before: a request whose last user message
    /// contains `start the loop` gets a reasoning (thinking signed `enc-reasoning-1`), a text
    /// and a `Write` of `alpha-one` to `file`; then `Edit` (to `beta-two`), `Bash` (`cat`, ending
    /// `BASH-DONE`), `Read`, and an `Agent` call whose subagent (prompt `SUBPROMPT …`) runs a
    /// `Bash` of its own and answers `One file.`; the main loop ends with
    /// `LOOP-FINISHED: the file says beta-two.`
    pub fn script_tool_loop(&self, file: &std::path::Path) {
        let f = file.to_string_lossy().into_owned();
        let once = |when, reply| Rule {
            when,
            reply,
            times: Some(1),
        };
        let steps = [
            (
                Match::LastUserContains("start the loop".into()),
                Reply::blocks(vec![
                    Block::Thinking {
                        thinking: "First the file, then the rest.".into(),
                        signature: "enc-reasoning-1".into(),
                    },
                    Block::Text(vec!["Writing it.".into()]),
                    Block::ToolUse {
                        name: "Write".into(),
                        input: json!({"file_path": f, "content": "alpha-one\n"}),
                    },
                ]),
            ),
            (
                Match::LastUserContains("File created successfully".into()),
                Reply::tool_use(
                    "Edit",
                    json!({"file_path": f, "old_string": "alpha-one", "new_string": "beta-two"}),
                ),
            ),
            (
                Match::LastUserContains("has been updated".into()),
                Reply::tool_use(
                    "Bash",
                    json!({"command": format!("cat {f}; echo BASH-DONE"), "description": "Show the file"}),
                ),
            ),
            (
                Match::LastUserContains("BASH-DONE".into()),
                Reply::tool_use("Read", json!({"file_path": f})),
            ),
            (
                Match::LastUserContains("beta-two".into()),
                Reply::subagent_call("SUBPROMPT count the files"),
            ),
            (
                Match::LastUserContains("SUBPROMPT".into()),
                Reply::tool_use(
                    "Bash",
                    json!({"command": "ls | wc -l; echo SUB-DONE", "description": "Count files"}),
                ),
            ),
            (
                Match::LastUserContains("SUB-DONE".into()),
                Reply::text("One file."),
            ),
            (
                Match::HasToolResult,
                Reply::text("LOOP-FINISHED: the file says beta-two."),
            ),
        ];
        for (when, reply) in steps {
            self.push(once(when, reply));
        }
    }

    /// Scripts a turn that hands work to a foreground subagent, each reply used once: a request
    /// whose last user message contains `trigger` gets an `Agent` call with `prompt`; the
    /// subagent's first request (its prompt is its last user message) gets a call of `tool`
    /// with `input`; then the subagent answers `subagent_says` and the main loop `agent_says`,
    /// in that order, since the main loop waits for its subagent.
    pub fn script_subagent_tool(
        &self,
        trigger: &str,
        prompt: &str,
        (tool, input): (&str, Value),
        subagent_says: &str,
        agent_says: &str,
    ) {
        let once = |when, reply| Rule {
            when,
            reply,
            times: Some(1),
        };
        self.push(once(
            Match::LastUserContains(trigger.into()),
            Reply::subagent_call(prompt),
        ));
        self.push(once(
            Match::LastUserContains(prompt.into()),
            Reply::tool_use(tool, input),
        ));
        self.push(once(Match::HasToolResult, Reply::text(subagent_says)));
        self.push(once(Match::HasToolResult, Reply::text(agent_says)));
    }

    /// The reply when no rule matches (default: the text `ok`).
    pub fn set_default_reply(&self, reply: Reply) {
        *lock(&self.state.default_reply) = reply;
    }

    /// The next `count` mints fail with this status and body.
    pub fn fail_next_mints(&self, status: u16, body: Value, count: usize) {
        let mut q = lock(&self.state.failing_mints);
        for _ in 0..count {
            q.push_back((status, body.clone()));
        }
    }

    /// Uses up (or restores) the account's premium requests: premium models then answer
    /// Copilot's 402 `quota_exceeded`, and `/copilot_internal/user` shows none left.
    pub fn exhaust_premium(&self, exhausted: bool) {
        self.state
            .premium_exhausted
            .store(exhausted, Ordering::SeqCst);
    }

    /// The next `count` model calls (any endpoint) answer 401.
    pub fn reject_next_messages_with_401(&self, count: usize) {
        self.state.reject_messages.store(count, Ordering::SeqCst);
    }

    /// Lifetime of tokens minted from now on.
    pub fn set_token_ttl(&self, expires_in_secs: i64, refresh_in_secs: i64) {
        let mut t = lock(&self.state.tokens);
        t.expires_in = expires_in_secs;
        t.refresh_in = refresh_in_secs;
    }

    /// Waits until at least `n` `POST /v1/messages` requests have arrived.
    pub async fn wait_message_requests(&self, n: usize, timeout: Duration) -> anyhow::Result<()> {
        wait_count(
            &self.state.request_notify,
            || self.message_requests().len(),
            n,
            timeout,
            "message requests",
        )
        .await
    }

    /// Waits until at least `n` model calls (any endpoint) have arrived.
    pub async fn wait_model_requests(&self, n: usize, timeout: Duration) -> anyhow::Result<()> {
        wait_count(
            &self.state.request_notify,
            || self.model_requests().len(),
            n,
            timeout,
            "model requests",
        )
        .await
    }

    /// TCP connections accepted so far (from every client: a kept-alive connection counts
    /// once however many requests it carries).
    pub fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// Client disconnects (a reply body dropped before it finished) so far.
    pub fn disconnects(&self) -> usize {
        self.state.disconnects.load(Ordering::SeqCst)
    }

    /// Waits until at least `n` disconnects were recorded.
    pub async fn wait_disconnects(&self, n: usize, timeout: Duration) -> anyhow::Result<()> {
        wait_count(
            &self.state.disconnect_notify,
            || self.disconnects(),
            n,
            timeout,
            "disconnects",
        )
        .await
    }

    /// Violations of the Copilot contract so far: headers on every model endpoint, and on
    /// `/chat/completions` and `/responses` also bodies the real upstream would refuse (each
    /// prefixed with its endpoint). Same list as [`FakeUpstream::violations`].
    pub fn header_violations(&self) -> Vec<String> {
        self.violations()
    }

    /// Every violation of the Copilot contract so far (headers and, on the OpenAI endpoints,
    /// bodies); a test that expects a well-behaved proxy asserts it is empty.
    pub fn violations(&self) -> Vec<String> {
        lock(&self.state.violations).clone()
    }

    /// Stops the server and closes every connection.
    pub async fn shutdown(self) {
        self.cancel.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

fn path_only(p: &str) -> &str {
    p.split('?').next().unwrap_or(p)
}

type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, std::io::Error>;

fn full(status: u16, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(
        http_body_util::Full::new(body.into())
            .map_err(|e| match e {})
            .boxed_unsync(),
    );
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    r
}

fn json_resp(status: u16, v: &Value) -> Response<Body> {
    full(status, "application/json", v.to_string())
}

fn error_envelope(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_fake_err"})
}

fn anthropic_error(status: u16, kind: &str, message: &str) -> Response<Body> {
    json_resp(status, &error_envelope(kind, message))
}

/// A JSON reply that announces its whole `Content-Length` but drops the connection after
/// `after_bytes` bytes.
fn cut_json(state: &Arc<State>, status: u16, whole: &str, after_bytes: usize) -> Response<Body> {
    let whole = Bytes::from(whole.to_owned());
    let sent = whole.slice(..after_bytes.min(whole.len()));
    let mut r = Response::new(FakeBody::cut(state.clone(), sent).boxed_unsync());
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r.headers_mut()
        .insert(http::header::CONTENT_LENGTH, whole.len().into());
    r
}

fn form_or_json(body: &[u8]) -> HashMap<String, String> {
    if let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(body) {
        return m
            .into_iter()
            .map(|(k, v)| (k, v.as_str().map_or_else(|| v.to_string(), str::to_owned)))
            .collect();
    }
    String::from_utf8_lossy(body)
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.replace("%3A", ":").replace('+', " ")))
        .collect()
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().to_string();
    let path = req
        .uri()
        .path_and_query()
        .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned());
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return full(400, "text/plain", "bad body"),
    };
    let captured = CapturedRequest {
        method: method.clone(),
        path: path.clone(),
        headers,
        body,
        received_at: Instant::now(),
    };
    lock(&state.requests).push(captured.clone());
    state.request_notify.notify_waiters();
    let auth = captured.header("authorization").unwrap_or("").to_owned();
    let github_ok = std::iter::once(&state.config.github_token)
        .chain(&state.config.other_github_tokens)
        .any(|t| auth == format!("token {t}") || auth == format!("Bearer {t}"));
    match (method.as_str(), path_only(&path)) {
        ("GET", "/") => full(200, "text/plain", "fake"),
        ("POST", "/login/device/code") => json_resp(
            200,
            &json!({"device_code": format!("dc_{}", state.ids.fetch_add(1, Ordering::SeqCst)), "user_code": "ABCD-1234",
                    "verification_uri": format!("{}/login/device", state.url), "expires_in": 900, "interval": 0}),
        ),
        ("POST", "/login/oauth/access_token") => device_poll(&state, &captured.body),
        ("GET", "/user") if github_ok => json_resp(
            200,
            &json!({"login": state.config.login, "id": 1, "type": "User"}),
        ),
        ("GET", "/copilot_internal/v2/token") if github_ok => mint(&state).await,
        ("GET", "/copilot_internal/v2/token") => {
            count_mint(&state);
            json_resp(
                401,
                &json!({"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"}),
            )
        }
        ("GET", "/copilot_internal/user") if github_ok => json_resp(200, &copilot_user(&state)),
        ("GET", "/user" | "/copilot_internal/user") => {
            json_resp(401, &json!({"message": "Bad credentials"}))
        }
        ("GET", "/v1/models") if anthropic_key_ok(&captured) => json_resp(
            200,
            &json!({"data": [
                {"id": "claude-opus-5-5-20261101", "type": "model", "display_name": "Claude Opus 5.5", "created_at": "2026-11-01T00:00:00Z"},
                {"id": "claude-sonnet-4-5-20250929", "type": "model", "display_name": "Claude Sonnet 4.5", "created_at": "2025-09-29T00:00:00Z"}],
                "has_more": false, "first_id": "claude-opus-5-5-20261101", "last_id": "claude-sonnet-4-5-20250929"}),
        ),
        ("GET", "/v1/models") => anthropic_error(401, "authentication_error", "invalid x-api-key"),
        ("GET", "/models") => {
            if !copilot_token_ok(&state, &auth) {
                return anthropic_error(401, "authentication_error", "invalid Copilot token");
            }
            json_resp(200, &json!({"data": state.config.models, "object": "list"}))
        }
        ("POST", "/v1/messages/count_tokens") => {
            json_resp(200, &json!({"input_tokens": captured.body.len() / 4}))
        }
        ("POST", "/v1/messages") => messages(&state, &captured, &auth),
        ("POST", p)
            if let Some(e) = Endpoint::from_path(p).filter(|e| *e != Endpoint::Messages) =>
        {
            openai(&state, &captured, &auth, e)
        }
        _ => json_resp(404, &json!({"message": "Not Found"})),
    }
}

fn device_poll(state: &State, body: &[u8]) -> Response<Body> {
    let form = form_or_json(body);
    let code = form.get("device_code").cloned().unwrap_or_default();
    if !code.starts_with("dc_") {
        return json_resp(
            200,
            &json!({"error": "incorrect_device_code", "error_description": "The device_code provided is not valid."}),
        );
    }
    let polls = {
        let mut p = lock(&state.device_polls);
        let n = p.entry(code).or_insert(0);
        *n += 1;
        *n
    };
    let pending = state.config.device_flow_pending_polls;
    if polls <= pending {
        return json_resp(
            200,
            &json!({"error": "authorization_pending", "error_description": "The authorization request is still pending."}),
        );
    }
    let success = json!({"access_token": state.config.github_token, "token_type": "bearer", "scope": "read:user"});
    match state.config.device_flow_outcome {
        DeviceOutcome::Success => json_resp(200, &success),
        DeviceOutcome::AccessDenied => json_resp(
            200,
            &json!({"error": "access_denied", "error_description": "The authorization request was denied."}),
        ),
        DeviceOutcome::Expired => json_resp(
            200,
            &json!({"error": "expired_token", "error_description": "The device_code has expired."}),
        ),
        DeviceOutcome::SlowDownOnce if polls == pending + 1 => json_resp(
            200,
            &json!({"error": "slow_down", "error_description": "Too many requests.", "interval": 5}),
        ),
        DeviceOutcome::SlowDownOnce => json_resp(200, &success),
    }
}

/// Counts a mint request and announces it; returns its number (from 1).
fn count_mint(state: &State) -> usize {
    let n = state.mints.fetch_add(1, Ordering::SeqCst) + 1;
    state.mint_notify.notify_waiters();
    n
}

async fn mint(state: &State) -> Response<Body> {
    let n = count_mint(state);
    let hold = lock(&state.mint_hold).clone();
    if let Some(mut hold) = hold {
        let _ = hold.wait_for(|open| *open).await;
    }
    if let Some((status, body)) = lock(&state.failing_mints).pop_front() {
        return json_resp(status, &body);
    }
    let mut t = lock(&state.tokens);
    let exp = now_unix() + t.expires_in;
    let token = format!(
        "tid={n};exp={exp};sku=copilot_for_business_seat;8kp=1:{:016x}",
        rand_u64(n as u64)
    );
    t.valid.insert(token.clone(), exp);
    t.last = token.clone();
    json_resp(
        200,
        &json!({"token": token, "expires_at": exp, "refresh_in": t.refresh_in,
                "endpoints": {"api": state.url, "proxy": state.url, "telemetry": format!("{}/telemetry", state.url), "origin-tracker": state.url},
                "sku": "copilot_for_business_seat", "chat_enabled": true, "annotations_enabled": true}),
    )
}

fn rand_u64(seed: u64) -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (t ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)).rotate_left(17)
}

fn copilot_user(state: &State) -> Value {
    let remaining = if state.premium_exhausted.load(Ordering::SeqCst) {
        0
    } else {
        250
    };
    json!({"login": state.config.login, "access_type_sku": "copilot_for_business_seat", "copilot_plan": "business",
           "quota_reset_date": "2026-12-01", "chat_enabled": true,
           "quota_snapshots": {
               "chat": {"entitlement": 0, "remaining": 0, "percent_remaining": 100.0, "unlimited": true},
               "completions": {"entitlement": 0, "remaining": 0, "percent_remaining": 100.0, "unlimited": true},
               "premium_interactions": {"entitlement": 300, "remaining": remaining, "percent_remaining": remaining as f64 / 3.0, "unlimited": false, "overage_count": 0, "overage_permitted": false}},
           "endpoints": {"api": state.url, "telemetry": format!("{}/telemetry", state.url)}})
}

fn copilot_token_ok(state: &State, auth: &str) -> bool {
    let Some(tok) = auth.strip_prefix("Bearer ") else {
        return false;
    };
    lock(&state.tokens)
        .valid
        .get(tok)
        .is_some_and(|exp| now_unix() < *exp)
}

/// The scripted reply for a request (its Anthropic form).
fn pick_reply(state: &State, body: &Value) -> Reply {
    let text = last_user_text(body);
    let has_tool_result = body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_array())
        .is_some_and(|blocks| blocks.iter().any(|b| b["type"] == "tool_result"));
    let mut rules = lock(&state.rules);
    for (rule, uses) in rules.iter_mut() {
        if *uses == 0 {
            continue;
        }
        let hit = match &rule.when {
            Match::Always => true,
            Match::LastUserContains(s) => text.contains(s.as_str()),
            Match::HasToolResult => has_tool_result,
        };
        if hit {
            *uses -= 1;
            return rule.reply.clone();
        }
    }
    lock(&state.default_reply).clone()
}

/// The key the fake accepts when it plays the Anthropic API (`x-api-key`).
pub const FAKE_ANTHROPIC_KEY: &str = "sk-ant-fake-key";

fn anthropic_key_ok(r: &CapturedRequest) -> bool {
    r.header("x-api-key") == Some(FAKE_ANTHROPIC_KEY)
}

fn messages(state: &Arc<State>, r: &CapturedRequest, auth: &str) -> Response<Body> {
    // Played as the Anthropic API: any model id, no Copilot header contract.
    let as_anthropic = anthropic_key_ok(r);
    if !as_anthropic && !copilot_token_ok(state, auth) {
        return anthropic_error(
            401,
            "authentication_error",
            "invalid or expired Copilot token",
        );
    }
    if state
        .reject_messages
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        return anthropic_error(401, "authentication_error", "token revoked");
    }
    if state.config.require_copilot_headers && !as_anthropic {
        check_headers(state, r, Endpoint::Messages);
    }
    let body = r.json();
    let model = body["model"].as_str().unwrap_or("").to_owned();
    let served = state.config.models.iter().any(|m| {
        m["id"] == model.as_str()
            && m["supported_endpoints"]
                .as_array()
                .is_some_and(|e| e.iter().any(|x| x == "/v1/messages"))
    });
    if !served && !as_anthropic {
        return anthropic_error(
            400,
            "invalid_request_error",
            &format!("model \"{model}\" is not supported via /v1/messages"),
        );
    }
    let tokens = crate::copilot_rules::prompt_tokens(&body);
    if !as_anthropic
        && let Some(entry) = state
            .config
            .models
            .iter()
            .find(|m| m["id"] == model.as_str())
        && let Some((status, body)) = crate::copilot_rules::refusal(
            entry,
            &body,
            tokens,
            r.header("copilot-vision-request") == Some("true"),
            state.premium_exhausted.load(Ordering::SeqCst),
        )
    {
        return json_resp(status, &body);
    }
    let reply = pick_reply(state, &body);
    let id = state.ids.fetch_add(1, Ordering::SeqCst);
    let input_tokens = (tokens, reply.cached_tokens);
    let stream = body["stream"] == true;
    let resp = match reply.kind {
        Kind::Error {
            status,
            error_type,
            message,
            cut_after: None,
        } => anthropic_error(status, &error_type, &message),
        Kind::Error {
            status,
            error_type,
            message,
            cut_after: Some(n),
        } => cut_json(
            state,
            status,
            &error_envelope(&error_type, &message).to_string(),
            n,
        ),
        Kind::Json(v) => json_resp(200, &v),
        Kind::Raw {
            status,
            content_type,
            body,
        } => full(status, &content_type, body),
        Kind::Blocks {
            blocks,
            stop_reason,
            plan,
        } if !stream => {
            let message = render_message(&blocks, &stop_reason, &model, id, input_tokens);
            json_plan(state, message, plan)
        }
        Kind::Blocks {
            blocks,
            stop_reason,
            plan,
        } => {
            let events = sse_events(blocks, &stop_reason, &model, id, input_tokens);
            sse_response(state.clone(), events, plan, |_, kind, message| {
                vec![event(
                    "error",
                    &json!({"type": "error", "error": {"type": kind, "message": message}}),
                )]
            })
        }
    };
    finish_reply(resp, reply.headers)
}

/// Adds a reply's scripted headers and Copilot's request id.
fn finish_reply(mut resp: Response<Body>, headers: Vec<(String, String)>) -> Response<Body> {
    for (k, v) in headers {
        if let (Ok(k), Ok(v)) = (
            http::HeaderName::from_bytes(k.as_bytes()),
            http::HeaderValue::from_str(&v),
        ) {
            resp.headers_mut().insert(k, v);
        }
    }
    resp.headers_mut()
        .insert("x-request-id", http::HeaderValue::from_static("req_fake"));
    resp
}

/// Checks the headers Copilot's clients send with a model call: Copilot's own, the intent
/// each endpoint's traffic carries (`messages-proxy` for Messages, `conversation-agent` for
/// the OpenAI endpoints, which take no Anthropic headers).
fn check_headers(state: &State, r: &CapturedRequest, endpoint: Endpoint) {
    let mut v = Vec::new();
    // Violations of the OpenAI endpoints name their path; Messages' read as they always have.
    let path = match endpoint {
        Endpoint::Messages => String::new(),
        other => format!("{}: ", other.path()),
    };
    let intent = match endpoint {
        Endpoint::Messages => "messages-proxy",
        _ => "conversation-agent",
    };
    for h in [
        "x-request-id",
        "x-github-api-version",
        "copilot-integration-id",
        "editor-version",
    ] {
        if r.header(h).is_none_or(str::is_empty) {
            v.push(format!("{path}missing {h}"));
        }
    }
    if r.header("openai-intent") != Some(intent) {
        v.push(format!(
            "{path}openai-intent is {:?}, want {intent:?}",
            r.header("openai-intent")
        ));
    }
    if !r.header("x-interaction-type").is_some_and(|t| {
        t == intent || matches!(t, "conversation-compaction" | "conversation-subagent")
    }) {
        v.push(format!(
            "{path}x-interaction-type is {:?}",
            r.header("x-interaction-type")
        ));
    }
    if !matches!(r.header("x-initiator"), Some("user" | "agent")) {
        v.push(format!(
            "{path}x-initiator is {:?}",
            r.header("x-initiator")
        ));
    }
    if !r
        .header("content-type")
        .is_some_and(|c| c.starts_with("application/json"))
    {
        v.push(format!(
            "{path}content-type is {:?}",
            r.header("content-type")
        ));
    }
    if endpoint != Endpoint::Messages {
        for h in ["anthropic-version", "anthropic-beta"] {
            if let Some(value) = r.header(h) {
                v.push(format!("{path}{h} sent ({value:?})"));
            }
        }
    }
    lock(&state.violations).extend(v);
}

/// Answers a refused OpenAI request, recording the violation it is.
fn refuse(state: &State, refused: crate::openai_check::Refused) -> Response<Body> {
    lock(&state.violations).extend(refused.violation);
    json_resp(refused.status, &refused.body)
}

/// `POST /chat/completions` and `POST /responses`: the same account checks as `/v1/messages`,
/// the request held to the OpenAI schema and Copilot's rules, the reply in that dialect.
fn openai(
    state: &Arc<State>,
    r: &CapturedRequest,
    auth: &str,
    endpoint: Endpoint,
) -> Response<Body> {
    let unauthorized = |message: &str| {
        json_resp(
            401,
            &crate::copilot_rules::copilot_error(message, "unauthorized"),
        )
    };
    if !copilot_token_ok(state, auth) {
        return unauthorized("unauthorized: invalid or expired Copilot token");
    }
    if state
        .reject_messages
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        return unauthorized("unauthorized: token revoked");
    }
    if state.config.require_copilot_headers {
        check_headers(state, r, endpoint);
    }
    let body = match crate::openai_check::parse(endpoint, &r.body) {
        Ok(body) => body,
        Err(refused) => return refuse(state, refused),
    };
    let model = body["model"].as_str().unwrap_or("").to_owned();
    let Some(entry) = state
        .config
        .models
        .iter()
        .find(|m| m["id"] == model.as_str())
    else {
        return json_resp(
            400,
            &json!({"error": {"message": "The requested model is not supported.", "code": "model_not_supported",
                               "param": "model", "type": "invalid_request_error"}}),
        );
    };
    let served = entry["supported_endpoints"]
        .as_array()
        .is_some_and(|e| e.iter().any(|x| x == endpoint.path()));
    if !served {
        return json_resp(
            400,
            &crate::copilot_rules::copilot_error(
                &format!("model \"{model}\" is not supported via {}", endpoint.path()),
                "unsupported_api_for_model",
            ),
        );
    }
    if state.premium_exhausted.load(Ordering::SeqCst)
        && entry["billing"]["multiplier"].as_f64().unwrap_or(1.0) > 0.0
    {
        return json_resp(
            402,
            &crate::copilot_rules::copilot_error("You have no quota", "quota_exceeded"),
        );
    }
    let anthropic = to_anthropic(endpoint, &body);
    let tokens = crate::copilot_rules::prompt_tokens(&anthropic);
    if let Err(refused) = crate::openai_check::check(
        endpoint,
        entry,
        &body,
        tokens,
        r.header("copilot-vision-request") == Some("true"),
    ) {
        return refuse(state, refused);
    }
    let reply = pick_reply(state, &anthropic);
    let ctx = Ctx {
        model: &model,
        id: state.ids.fetch_add(1, Ordering::SeqCst),
        prompt_tokens: tokens,
        cached_tokens: reply.cached_tokens,
        created: u64::try_from(now_unix()).unwrap_or(0),
    };
    let stream = body["stream"] == true;
    let resp = match reply.kind {
        Kind::Error {
            status,
            error_type,
            message,
            cut_after,
        } => {
            let envelope = render::error_envelope(&error_type, &message);
            match cut_after {
                None => json_resp(status, &envelope),
                Some(n) => cut_json(state, status, &envelope.to_string(), n),
            }
        }
        Kind::Json(v) => json_resp(200, &v),
        Kind::Raw {
            status,
            content_type,
            body,
        } => full(status, &content_type, body),
        Kind::Blocks {
            blocks,
            stop_reason,
            plan,
        } if !stream => {
            let whole = match endpoint {
                Endpoint::Responses => render::responses_object(&blocks, &stop_reason, &ctx),
                _ => render::chat_completion(&blocks, &stop_reason, &ctx),
            };
            json_plan(state, whole, plan)
        }
        Kind::Blocks {
            blocks,
            stop_reason,
            plan,
        } => match endpoint {
            Endpoint::Responses => {
                let events = render::responses_events(&blocks, &stop_reason, &ctx);
                let as_error_event = state.config.responses_error_event;
                sse_response(state.clone(), events, plan, |sent, kind, message| {
                    render::responses_error_events(kind, message, sent, &ctx, as_error_event)
                })
            }
            _ => {
                let usage = if body["stream_options"]["include_usage"] != true {
                    ChatUsage::None
                } else if state.config.chat_usage_in_finish_chunk {
                    ChatUsage::InFinish
                } else {
                    ChatUsage::OwnChunk
                };
                let events = render::chat_events(&blocks, &stop_reason, &ctx, usage);
                sse_response(state.clone(), events, plan, |_, kind, message| {
                    render::chat_error_events(kind, message)
                })
            }
        },
    };
    finish_reply(resp, reply.headers)
}

/// A whole (non-streaming) reply under a plan: cut short, held by a gate, or sent.
fn json_plan(state: &Arc<State>, whole: Value, plan: Plan) -> Response<Body> {
    match plan {
        Plan::CutAfterBytes(n) => cut_json(state, 200, &whole.to_string(), n),
        // A gate holds the whole reply until it opens.
        Plan::GateAfter(_, mut gate) => {
            let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(1);
            tokio::spawn(async move {
                let _ = gate.wait_for(|open| *open).await;
                let _ = tx.send(Bytes::from(whole.to_string())).await;
            });
            let mut r = Response::new(FakeBody::channel(state.clone(), rx).boxed_unsync());
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            r
        }
        _ => json_resp(200, &whole),
    }
}

fn batch(events: &[String], per_write: usize) -> Vec<Bytes> {
    events
        .chunks(per_write.max(1))
        .map(|c| Bytes::from(c.concat()))
        .collect()
}

/// The body chunks of a normal stream, made as they are sent, and how many of them make one
/// socket write.
fn stream_chunks(
    state: &State,
    events: impl Iterator<Item = String> + Send + 'static,
) -> (Box<dyn Iterator<Item = Bytes> + Send>, usize) {
    let per = state.config.sse_events_per_write.max(1);
    if state.config.sse_chunk_per_event {
        (Box::new(events.map(Bytes::from)), per)
    } else {
        let mut events = events;
        let batches = std::iter::from_fn(move || {
            let chunk: String = events.by_ref().take(per).collect();
            (!chunk.is_empty()).then(|| Bytes::from(chunk))
        });
        (Box::new(batches), 1)
    }
}

/// A streamed reply under a plan; `error_tail(sent, type, message)` renders a scripted
/// mid-stream error after `sent` events, in the stream's dialect.
fn sse_response(
    state: Arc<State>,
    events: impl IntoIterator<Item = String, IntoIter: Send + 'static>,
    plan: Plan,
    error_tail: impl FnOnce(usize, &str, &str) -> Vec<String>,
) -> Response<Body> {
    let per = state.config.sse_events_per_write;
    let events = events.into_iter();
    let body = match plan {
        Plan::Normal => {
            let (chunks, group) = stream_chunks(&state, events);
            let mut body = FakeBody::made(state.clone(), chunks);
            body.group = group;
            body.gap = state.config.sse_group_gap;
            body
        }
        Plan::ErrorAfter(n, kind, message) => {
            let mut evs: Vec<String> = events.take(n).collect();
            evs.extend(error_tail(evs.len(), &kind, &message));
            FakeBody::ready(state.clone(), batch(&evs, per))
        }
        Plan::TruncateAfter(n) => FakeBody::ready(
            state.clone(),
            batch(&events.take(n).collect::<Vec<_>>(), per),
        ),
        Plan::CutAfterBytes(n) => {
            let whole = Bytes::from(events.collect::<String>());
            FakeBody::cut(state.clone(), whole.slice(..n.min(whole.len())))
        }
        other => {
            // A held or silent stream is sent in pieces by a task of its own.
            let events: Vec<String> = events.collect();
            let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
            tokio::spawn(async move {
                let send_all = |evs: &[String]| {
                    let chunks = batch(evs, per);
                    let tx = tx.clone();
                    async move {
                        for c in chunks {
                            if tx.send(c).await.is_err() {
                                return false;
                            }
                        }
                        true
                    }
                };
                let split = |n: usize| n.min(events.len());
                let ok = match other {
                    Plan::SilentAfterStart(d) => {
                        send_all(&events[..1]).await
                            && !wait_or_closed(&tx, tokio::time::sleep(d)).await
                            && send_all(&events[1..]).await
                    }
                    Plan::SilentBeforeFirst(d) => {
                        !wait_or_closed(&tx, tokio::time::sleep(d)).await && send_all(&events).await
                    }
                    Plan::GateAfter(n, mut gate) => {
                        let n = split(n);
                        send_all(&events[..n]).await
                            && !wait_or_closed(&tx, async move {
                                let _ = gate.wait_for(|open| *open).await;
                            })
                            .await
                            && send_all(&events[n..]).await
                    }
                    _ => true,
                };
                let _ = ok;
            });
            FakeBody::channel(state.clone(), rx)
        }
    };
    let mut r = Response::new(body.boxed_unsync());
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    r.headers_mut().insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache"),
    );
    r
}

/// Waits for `fut`, or returns true early when the body's receiver is gone.
async fn wait_or_closed(
    tx: &tokio::sync::mpsc::Sender<Bytes>,
    fut: impl std::future::Future<Output = ()>,
) -> bool {
    tokio::select! {
        () = fut => false,
        () = tx.closed() => true,
    }
}

/// How a body ends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// Normally.
    No,
    /// With an error, once what was sent has been flushed.
    Pending,
    /// With an error now: the bytes before it are on the wire.
    Now,
}

/// A reply body that records a disconnect when dropped before it finished.
struct FakeBody {
    state: Arc<State>,
    source: Source,
    /// End with an error instead of the end of the body: hyper then drops the connection
    /// without completing the message (no last chunk, or fewer bytes than `Content-Length`).
    cut: Cut,
    finished: bool,
    /// Chunks per socket write: the body pauses after each group, so hyper writes it.
    group: usize,
    sent_in_group: usize,
    /// How long each pause lasts (`None`: a yield).
    gap: Option<std::time::Duration>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

enum Source {
    Ready(VecDeque<Bytes>),
    /// Made as it is sent.
    Made(std::iter::Peekable<Box<dyn Iterator<Item = Bytes> + Send>>),
    Channel(tokio::sync::mpsc::Receiver<Bytes>),
}

impl FakeBody {
    fn new(state: Arc<State>, source: Source) -> FakeBody {
        FakeBody {
            state,
            source,
            cut: Cut::No,
            finished: false,
            group: usize::MAX,
            sent_in_group: 0,
            gap: None,
            sleep: None,
        }
    }

    fn ready(state: Arc<State>, chunks: Vec<Bytes>) -> FakeBody {
        FakeBody::new(state, Source::Ready(chunks.into()))
    }

    fn cut(state: Arc<State>, sent: Bytes) -> FakeBody {
        let mut body = FakeBody::ready(state, vec![sent]);
        body.cut = Cut::Pending;
        body
    }

    fn channel(state: Arc<State>, rx: tokio::sync::mpsc::Receiver<Bytes>) -> FakeBody {
        FakeBody::new(state, Source::Channel(rx))
    }

    fn made(state: Arc<State>, chunks: Box<dyn Iterator<Item = Bytes> + Send>) -> FakeBody {
        FakeBody::new(state, Source::Made(chunks.peekable()))
    }
}

impl hyper::body::Body for FakeBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if let Some(sleep) = self.sleep.as_mut() {
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.sleep = None;
        }
        let more = match &mut self.source {
            Source::Ready(q) => !q.is_empty(),
            Source::Made(chunks) => chunks.peek().is_some(),
            Source::Channel(_) => true,
        };
        // The last group goes out with the body's end, as real upstreams send a stream's last
        // chunk with its last event.
        if self.sent_in_group >= self.group && more {
            // A group is complete: pause, so hyper writes it as one socket write.
            self.sent_in_group = 0;
            match self.gap {
                Some(gap) => {
                    let mut sleep = Box::pin(tokio::time::sleep(gap));
                    if sleep.as_mut().poll(cx).is_pending() {
                        self.sleep = Some(sleep);
                        return Poll::Pending;
                    }
                }
                None => {
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
            }
        }
        let next = match &mut self.source {
            Source::Ready(q) => Poll::Ready(q.pop_front()),
            Source::Made(chunks) => Poll::Ready(chunks.next()),
            Source::Channel(rx) => rx.poll_recv(cx),
        };
        match next {
            Poll::Ready(Some(b)) => {
                self.sent_in_group += 1;
                Poll::Ready(Some(Ok(Frame::data(b))))
            }
            Poll::Ready(None) => match self.cut {
                Cut::No => {
                    self.finished = true;
                    Poll::Ready(None)
                }
                // hyper drops a connection at a body error without flushing what it
                // buffered; one pending poll first lets it write the bytes sent so far.
                Cut::Pending => {
                    self.cut = Cut::Now;
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
                Cut::Now => {
                    // Ended as scripted, so not a client disconnect.
                    self.finished = true;
                    Poll::Ready(Some(Err(std::io::Error::new(
                        std::io::ErrorKind::ConnectionAborted,
                        "scripted cut-off",
                    ))))
                }
            },
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for FakeBody {
    fn drop(&mut self) {
        if !self.finished {
            self.state.disconnects.fetch_add(1, Ordering::SeqCst);
            self.state.disconnect_notify.notify_waiters();
        }
    }
}

/// A realistic Copilot catalog: Claude models on `/v1/messages`; OpenAI and Google models on
/// `/responses` and/or `/chat/completions` (`gpt-5.4` responses only, premium; `gpt-5-mini`
/// both, included; `gpt-4.1` and `gpt-4o` chat only, included; `gemini-3.1-pro` chat only,
/// premium); and entries a Claude filter must drop (no `/v1/messages`, hidden from pickers,
/// no tool calls, embeddings).
pub fn default_models() -> Vec<Value> {
    let claude = |id: &str, name: &str, default: bool, effort: bool| {
        let mut supports = json!({"streaming": true, "tool_calls": true, "vision": true, "parallel_tool_calls": true,
                                  "max_thinking_budget": 32000, "min_thinking_budget": 1024});
        if effort {
            supports["adaptive_thinking"] = json!(true);
            supports["reasoning_effort"] = json!(["low", "medium", "high"]);
        }
        json!({"id": id, "name": name, "vendor": "Anthropic", "version": id, "object": "model",
               "model_picker_enabled": true, "is_chat_default": default, "preview": false,
               "supported_endpoints": ["/chat/completions", "/v1/messages"],
               "capabilities": {"family": id, "type": "chat", "tokenizer": "o200k_base",
                                "limits": {"max_context_window_tokens": 200000, "max_prompt_tokens": 168000, "max_output_tokens": 64000},
                                "supports": supports},
               "billing": {"is_premium": true, "multiplier": 1.0}})
    };
    let mut hidden = claude("claude-hidden-4.9", "Claude Hidden 4.9", false, false);
    hidden["model_picker_enabled"] = json!(false);
    let mut notools = claude("claude-notools-4.9", "Claude No Tools 4.9", false, false);
    notools["capabilities"]["supports"]["tool_calls"] = json!(false);
    let mut legacy = claude(
        "claude-3.5-sonnet-legacy",
        "Claude 3.5 Sonnet (legacy)",
        false,
        false,
    );
    legacy["supported_endpoints"] = json!(["/chat/completions"]);
    vec![
        claude("claude-sonnet-4.5", "Claude Sonnet 4.5", false, false),
        claude("claude-opus-5.5", "Claude Opus 5.5", true, true),
        claude("claude-sonnet-5.5", "Claude Sonnet 5.5", false, true),
        {
            // Included in the plan: no premium requests (the quota fallback's model).
            let mut haiku = claude("claude-haiku-5.5", "Claude Haiku 5.5", false, false);
            haiku["billing"] = json!({"is_premium": false, "multiplier": 0.0});
            haiku
        },
        claude("claude-opus-4.6", "Claude Opus 4.6", false, true),
        claude(
            "claude-opus-4.6-1m",
            "Claude Opus 4.6 (1M context)",
            false,
            true,
        ),
        claude("claude-sonnet-4", "Claude Sonnet 4", false, false),
        openai_model(OpenAiModel {
            id: "gpt-5.4",
            name: "GPT-5.4",
            vendor: "OpenAI",
            endpoints: &["/responses"],
            limits: (400_000, 272_000, 128_000),
            efforts: &["low", "medium", "high"],
            multiplier: 1.0,
        }),
        openai_model(OpenAiModel {
            id: "gpt-5-mini",
            name: "GPT-5 mini",
            vendor: "Azure OpenAI",
            endpoints: &["/chat/completions", "/responses"],
            limits: (264_000, 128_000, 64_000),
            efforts: &["low", "medium", "high"],
            multiplier: 0.0,
        }),
        openai_model(OpenAiModel {
            id: "gpt-4.1",
            name: "GPT-4.1",
            vendor: "Azure OpenAI",
            endpoints: &["/chat/completions"],
            limits: (128_000, 128_000, 16_384),
            efforts: &[],
            multiplier: 0.0,
        }),
        openai_model(OpenAiModel {
            id: "gpt-4o",
            name: "GPT-4o",
            vendor: "Azure OpenAI",
            endpoints: &["/chat/completions"],
            limits: (128_000, 64_000, 4_096),
            efforts: &[],
            multiplier: 0.0,
        }),
        openai_model(OpenAiModel {
            id: "gemini-3.1-pro",
            name: "Gemini 3.1 Pro",
            vendor: "Google",
            endpoints: &["/chat/completions"],
            limits: (128_000, 128_000, 64_000),
            efforts: &[],
            multiplier: 1.0,
        }),
        legacy,
        hidden,
        notools,
        json!({"id": "text-embedding-3-small", "name": "Embedding V3 small", "vendor": "Azure OpenAI", "object": "model",
               "version": "text-embedding-3-small", "model_picker_enabled": false, "is_chat_default": false, "preview": false,
               "capabilities": {"family": "text-embedding-3-small", "type": "embeddings", "tokenizer": "cl100k_base",
                                "limits": {"max_inputs": 512}, "supports": {"dimensions": true}},
               "billing": {"is_premium": false, "multiplier": 0.0}}),
    ]
}

/// A non-Claude catalog entry, as Copilot's `/models` lists one.
struct OpenAiModel {
    id: &'static str,
    name: &'static str,
    vendor: &'static str,
    endpoints: &'static [&'static str],
    /// (context window, prompt, output) tokens.
    limits: (u64, u64, u64),
    /// `capabilities.supports.reasoning_effort` (empty: a model without effort control).
    efforts: &'static [&'static str],
    /// Premium requests per call (0: included in the plan).
    multiplier: f64,
}

fn openai_model(m: OpenAiModel) -> Value {
    let (context, prompt, output) = m.limits;
    let mut supports = json!({"streaming": true, "tool_calls": true, "parallel_tool_calls": true,
                              "vision": true, "structured_outputs": true});
    if !m.efforts.is_empty() {
        supports["reasoning_effort"] = json!(m.efforts);
    }
    json!({"id": m.id, "name": m.name, "vendor": m.vendor, "version": m.id, "object": "model",
           "model_picker_enabled": true, "model_picker_category": "versatile", "is_chat_default": false, "preview": false,
           "supported_endpoints": m.endpoints,
           "capabilities": {"family": m.id, "object": "model_capabilities", "type": "chat", "tokenizer": "o200k_base",
                            "limits": {"max_context_window_tokens": context, "max_prompt_tokens": prompt, "max_output_tokens": output,
                                       "vision": {"max_prompt_image_size": 3_145_728, "max_prompt_images": 1,
                                                  "supported_media_types": ["image/jpeg", "image/png", "image/webp", "image/gif"]}},
                            "supports": supports},
           "billing": {"is_premium": m.multiplier > 0.0, "multiplier": m.multiplier},
           "policy": {"state": "enabled", "terms": "Enable access to the latest models."}})
}

/// Waits until `count()` reaches `n`; `notify` fires whenever it may have grown.
async fn wait_count(
    notify: &tokio::sync::Notify,
    count: impl Fn() -> usize,
    n: usize,
    timeout: Duration,
    what: &str,
) -> anyhow::Result<()> {
    let wait = async {
        loop {
            let notified = notify.notified();
            if count() >= n {
                return;
            }
            notified.await;
        }
    };
    tokio::time::timeout(timeout, wait)
        .await
        .with_context(|| format!("{} of {n} {what} after {timeout:?}", count()))
}
