//! A running CLI session: stream-json in and out, control requests both ways.

use crate::SessionOptions;
use crate::mcp::{Bridge, Routed, SdkMcpServer};
use crate::process::{ChildGuard, kill_group, spawn};
use async_trait::async_trait;
use claude_host_protocol::stream_json::{
    Frame, FrameKind, control_error, control_request, control_success, user_message,
};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncBufReadExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// What went wrong with a session.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SessionError {
    /// The CLI could not be started.
    #[error("cannot start {cli}: {message}")]
    Spawn {
        /// The executable.
        cli: String,
        /// The cause.
        message: String,
    },
    /// One stdout line was not a frame (the session goes on).
    #[error("bad frame from the CLI: {error} (line starts {preview:?})")]
    BadFrame {
        /// Why.
        error: String,
        /// The start of the line.
        preview: String,
    },
    /// One stdout line was longer than the limit (the session goes on).
    #[error("a frame from the CLI exceeded {limit} bytes and was dropped")]
    OversizeFrame {
        /// The limit.
        limit: usize,
    },
    /// The CLI exited.
    #[error("the Claude Code CLI exited ({status}){}", tail_text(.stderr_tail))]
    Exited {
        /// Exit code, or `signal N`.
        status: String,
        /// Whether it exited successfully.
        success: bool,
        /// The last stderr lines.
        stderr_tail: Vec<String>,
    },
    /// Writing to the CLI failed (it is gone).
    #[error("cannot write to the CLI: {0}")]
    Write(String),
}

fn tail_text(tail: &[String]) -> String {
    if tail.is_empty() {
        String::new()
    } else {
        format!(": {}", tail.join(" | "))
    }
}

/// A host → CLI control request failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ControlError {
    /// The CLI answered `subtype: "error"`.
    #[error("the CLI refused {subtype}: {message}")]
    Refused {
        /// The request subtype.
        subtype: String,
        /// The CLI's error text.
        message: String,
    },
    /// No answer in time.
    #[error("no answer to {subtype} within {timeout:?}")]
    Timeout {
        /// The request subtype.
        subtype: String,
        /// The timeout.
        timeout: Duration,
    },
    /// The session ended first.
    #[error("the session ended before {subtype} was answered: {error}")]
    Closed {
        /// The request subtype.
        subtype: String,
        /// Why it ended.
        error: SessionError,
    },
}

/// The host's answer to `can_use_tool`.
#[derive(Debug, Clone, PartialEq)]
pub enum PermissionResult {
    /// Run the tool with this input (and optionally persist permission updates).
    Allow {
        /// The input to use.
        updated_input: Value,
        /// `PermissionUpdate`s, e.g. the request's `permission_suggestions` for "always".
        updated_permissions: Option<Value>,
    },
    /// Do not run it; the model sees `message`.
    Deny {
        /// What the model is told.
        message: String,
        /// Also abort the turn.
        interrupt: bool,
    },
}

/// Answers the CLI's callbacks. Each call runs in its own task; `cancel` fires when the CLI
/// withdraws the request (`control_cancel_request`) or the session ends.
#[async_trait]
pub trait Callbacks: Send + Sync + 'static {
    /// A tool needs permission. `request` is the whole `can_use_tool` request.
    async fn can_use_tool(
        &self,
        request: Map<String, Value>,
        cancel: CancellationToken,
    ) -> PermissionResult;

    /// A registered hook fired. Returns the hook's output (`{"continue": true}` to carry on).
    async fn hook_callback(
        &self,
        callback_id: String,
        input: Value,
        cancel: CancellationToken,
    ) -> Value {
        let _ = (callback_id, input, cancel);
        json!({"continue": true})
    }

    /// Any other CLI → host request. The default refuses it the way the official SDK does.
    async fn other(&self, subtype: String, request: Map<String, Value>) -> Result<Value, String> {
        let _ = request;
        match subtype.as_str() {
            // Without a handler the official SDK declines elicitations.
            "elicitation" => Ok(json!({"action": "decline"})),
            _ => Err(format!("Unsupported control request subtype: {subtype}")),
        }
    }
}

/// Callbacks that deny every tool (a safe default for scripts).
#[derive(Debug, Default, Clone, Copy)]
pub struct DenyAll;

#[async_trait]
impl Callbacks for DenyAll {
    async fn can_use_tool(
        &self,
        _request: Map<String, Value>,
        _cancel: CancellationToken,
    ) -> PermissionResult {
        PermissionResult::Deny {
            message: "denied by host".into(),
            interrupt: false,
        }
    }
}

type Pending = Arc<Mutex<HashMap<String, oneshot::Sender<Result<Value, String>>>>>;

struct Shared {
    stdin: tokio::sync::Mutex<Option<tokio::process::ChildStdin>>,
    mcp: HashMap<String, Arc<Bridge>>,
    pending: Pending,
    callbacks_inflight: Mutex<HashMap<String, CancellationToken>>,
    ended: Mutex<Option<SessionError>>,
    ended_notify: tokio::sync::Notify,
    shutdown: CancellationToken,
    next_id: AtomicU64,
    /// Latency marks (`crate::trace`), only when the environment asks for them.
    trace: Option<Trace>,
}

/// What a CLI's latency marks need: its session's key, and whether a user message went out
/// whose first stream delta has not been read yet.
struct Trace {
    key: String,
    awaiting_part: std::sync::atomic::AtomicBool,
    awaiting_delta: std::sync::atomic::AtomicBool,
}

impl Trace {
    fn sent_user(&self) {
        crate::trace::mark(crate::trace::CLI_STDIN, &self.key);
        self.awaiting_part.store(true, Ordering::Relaxed);
        self.awaiting_delta.store(true, Ordering::Relaxed);
    }

    /// Marks the first content block and the first delta read after a user message.
    fn stream_event(&self, frame: &Frame) {
        let kind = frame
            .get("event")
            .and_then(|e| e.get("type"))
            .and_then(Value::as_str);
        let (flag, step) = match kind {
            Some("content_block_start") => (&self.awaiting_part, crate::trace::CLI_PART),
            Some("content_block_delta") => (&self.awaiting_delta, crate::trace::CLI_DELTA),
            _ => return,
        };
        if flag.swap(false, Ordering::Relaxed) {
            crate::trace::mark(step, &self.key);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    async fn write(&self, value: &Value) -> Result<(), SessionError> {
        let mut line = serde_json::to_vec(value).map_err(|e| SessionError::Write(e.to_string()))?;
        line.push(b'\n');
        let mut stdin = self.stdin.lock().await;
        let pipe = stdin
            .as_mut()
            .ok_or_else(|| SessionError::Write("stdin is closed".into()))?;
        pipe.write_all(&line)
            .await
            .map_err(|e| SessionError::Write(e.to_string()))?;
        pipe.flush()
            .await
            .map_err(|e| SessionError::Write(e.to_string()))
    }
}

/// A running Claude Code CLI.
pub struct ClaudeSession {
    shared: Arc<Shared>,
    /// Unbounded on purpose: the reader that queues frames also serves control traffic, and a
    /// bound would stall that whenever nobody reads frames (between turns, say).
    frames: tokio::sync::Mutex<mpsc::UnboundedReceiver<Result<Frame, SessionError>>>,
    child: Arc<tokio::sync::Mutex<ChildGuard>>,
    pgid: Option<i32>,
    opts: SessionOptions,
}

impl std::fmt::Debug for ClaudeSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaudeSession")
            .field("pgid", &self.pgid)
            .finish_non_exhaustive()
    }
}

impl ClaudeSession {
    /// Spawns the CLI and starts serving its stdout. Nothing is sent yet: call
    /// [`ClaudeSession::initialize`] (optional to the CLI) and [`ClaudeSession::send_user`].
    pub fn spawn(
        opts: SessionOptions,
        callbacks: Arc<dyn Callbacks>,
    ) -> Result<ClaudeSession, SessionError> {
        Self::spawn_with_mcp(opts, callbacks, Vec::new())
    }

    /// As [`ClaudeSession::spawn`], serving in-process MCP servers to the CLI. Their names are
    /// announced in `initialize` (call it before the first message).
    pub fn spawn_with_mcp(
        opts: SessionOptions,
        callbacks: Arc<dyn Callbacks>,
        servers: Vec<SdkMcpServer>,
    ) -> Result<ClaudeSession, SessionError> {
        let mut guard = spawn(&opts).map_err(|e| SessionError::Spawn {
            cli: opts.cli.display().to_string(),
            message: e.to_string(),
        })?;
        let stdin = guard.child.stdin.take();
        let stdout = guard
            .child
            .stdout
            .take()
            .ok_or_else(|| SessionError::Spawn {
                cli: opts.cli.display().to_string(),
                message: "no stdout pipe".into(),
            })?;
        let pgid = guard.pgid();
        let mut receivers = Vec::new();
        let mut mcp = HashMap::new();
        for server in servers {
            let bridge = Arc::new(Bridge {
                to_server: server.to_server,
                parked: Mutex::new(HashMap::new()),
            });
            mcp.insert(server.name.clone(), bridge.clone());
            receivers.push((server.name, bridge, server.from_server));
        }
        let shared = Arc::new(Shared {
            stdin: tokio::sync::Mutex::new(stdin),
            mcp,
            pending: Arc::new(Mutex::new(HashMap::new())),
            callbacks_inflight: Mutex::new(HashMap::new()),
            ended: Mutex::new(None),
            ended_notify: tokio::sync::Notify::new(),
            shutdown: CancellationToken::new(),
            next_id: AtomicU64::new(1),
            trace: crate::trace::enabled().then(|| Trace {
                key: opts
                    .session_id
                    .clone()
                    .or_else(|| opts.resume.clone())
                    .unwrap_or_default(),
                awaiting_part: std::sync::atomic::AtomicBool::new(false),
                awaiting_delta: std::sync::atomic::AtomicBool::new(false),
            }),
        });
        for (name, bridge, rx) in receivers {
            tokio::spawn(pump_server(name, bridge, rx, shared.clone()));
        }
        let child = Arc::new(tokio::sync::Mutex::new(guard));
        let (tx, rx) = mpsc::unbounded_channel();
        let reader = LineReader::new(stdout, opts.max_line_bytes);
        tokio::spawn(read_loop(
            reader,
            shared.clone(),
            callbacks,
            tx,
            child.clone(),
            opts.max_line_bytes,
        ));
        Ok(ClaudeSession {
            shared,
            frames: tokio::sync::Mutex::new(rx),
            child,
            pgid,
            opts,
        })
    }

    /// The process group id of the CLI (its pid).
    pub fn pgid(&self) -> Option<i32> {
        self.pgid
    }

    /// The next frame, a per-frame error, or `None` after the CLI's exit was reported.
    ///
    /// Frames queue without bound until read, so that control traffic (answers to
    /// [`ClaudeSession::request`], tool permission callbacks, MCP messages) is served even
    /// when nobody reads; a session's owner should keep reading to keep memory bounded.
    pub async fn next_frame(&mut self) -> Option<Result<Frame, SessionError>> {
        self.frames.get_mut().recv().await
    }

    /// As [`ClaudeSession::next_frame`], through a shared reference, so one task can read a
    /// turn while another interrupts it. Concurrent readers take turns frame by frame.
    pub async fn recv_frame(&self) -> Option<Result<Frame, SessionError>> {
        self.frames.lock().await.recv().await
    }

    /// The next frame if one is already waiting (never blocks; `None` also while another
    /// task is reading).
    pub fn try_recv_frame(&self) -> Option<Result<Frame, SessionError>> {
        self.frames.try_lock().ok()?.try_recv().ok()
    }

    /// Kills the CLI's whole process group now (for a CLI that does not answer an interrupt).
    /// Its exit is then reported like any other.
    pub fn kill(&self) {
        if let Some(pgid) = self.pgid {
            kill_group(pgid, libc::SIGKILL);
        }
    }

    /// Whether the CLI has exited (its exit was seen on stdout).
    pub fn has_exited(&self) -> bool {
        lock(&self.shared.ended).is_some()
    }

    /// Reads frames until the turn's `result` frame, which is returned last. Frames of other
    /// kinds are returned in order before it.
    pub async fn collect_turn(&mut self) -> Result<Vec<Frame>, SessionError> {
        let mut out = Vec::new();
        loop {
            match self.next_frame().await {
                Some(Ok(f)) => {
                    let done = f.kind == FrameKind::Result;
                    out.push(f);
                    if done {
                        return Ok(out);
                    }
                }
                Some(Err(e @ SessionError::Exited { .. })) => return Err(e),
                // The reader has logged it (with a bound on how often).
                Some(Err(e)) => tracing::debug!(error = %e, "skipping a bad frame"),
                None => return Err(self.ended_error()),
            }
        }
    }

    /// After a failed write: the CLI's exit, once the reader has seen it, explains more than
    /// "broken pipe".
    async fn exit_cause(&self, write_error: SessionError) -> SessionError {
        let notified = self.shared.ended_notify.notified();
        if let Some(e) = lock(&self.shared.ended).clone() {
            return e;
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), notified).await;
        lock(&self.shared.ended).clone().unwrap_or(write_error)
    }

    fn ended_error(&self) -> SessionError {
        lock(&self.shared.ended)
            .clone()
            .unwrap_or(SessionError::Write("session closed".into()))
    }

    /// Sends a user message (`content`: a string or Messages-API blocks). `uuid` becomes the
    /// transcript id; `priority` is `now`, `next` or `later`.
    pub async fn send_user(
        &self,
        content: Value,
        uuid: Option<&str>,
        priority: Option<&str>,
    ) -> Result<(), SessionError> {
        match self
            .shared
            .write(&user_message(content, uuid, priority))
            .await
        {
            Ok(()) => {
                if let Some(t) = &self.shared.trace {
                    t.sent_user();
                }
                Ok(())
            }
            Err(e) => Err(self.exit_cause(e).await),
        }
    }

    /// Sends a control request and waits for its answer (default timeout).
    pub async fn request(&self, subtype: &str, fields: Value) -> Result<Value, ControlError> {
        self.request_with_timeout(subtype, fields, self.opts.control_timeout)
            .await
    }

    /// Sends a control request and waits for its answer. On timeout the request is withdrawn
    /// with `control_cancel_request`.
    pub async fn request_with_timeout(
        &self,
        subtype: &str,
        fields: Value,
        timeout: Duration,
    ) -> Result<Value, ControlError> {
        let id = format!(
            "req_{}_{}",
            self.shared.next_id.fetch_add(1, Ordering::SeqCst),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let (tx, rx) = oneshot::channel();
        lock(&self.shared.pending).insert(id.clone(), tx);
        let closed = |error| ControlError::Closed {
            subtype: subtype.to_owned(),
            error,
        };
        if let Err(e) = self
            .shared
            .write(&control_request(&id, subtype, fields))
            .await
        {
            lock(&self.shared.pending).remove(&id);
            return Err(closed(self.exit_cause(e).await));
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(Ok(v))) => Ok(v),
            Ok(Ok(Err(message))) => Err(ControlError::Refused {
                subtype: subtype.to_owned(),
                message,
            }),
            Ok(Err(_)) => Err(closed(self.ended_error())),
            Err(_) => {
                lock(&self.shared.pending).remove(&id);
                let _ = self
                    .shared
                    .write(&json!({"type": "control_cancel_request", "request_id": id}))
                    .await;
                Err(ControlError::Timeout {
                    subtype: subtype.to_owned(),
                    timeout,
                })
            }
        }
    }

    /// `initialize` with the full Claude Code system prompt (the `claude_code` preset), the
    /// given hooks (`{"PreToolUse": [{"matcher", "hookCallbackIds", "timeout"}]}`) and any
    /// further fields (`sdkMcpServers`, `agents`, `appendSystemPrompt`, …).
    pub async fn initialize(
        &self,
        hooks: Option<Value>,
        extra: Value,
    ) -> Result<Value, ControlError> {
        let mut fields = match extra {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        fields.insert("hooks".into(), hooks.unwrap_or(Value::Null));
        if !self.shared.mcp.is_empty() && !fields.contains_key("sdkMcpServers") {
            let mut names: Vec<&String> = self.shared.mcp.keys().collect();
            names.sort();
            fields.insert("sdkMcpServers".into(), json!(names));
        }
        self.request("initialize", Value::Object(fields)).await
    }

    /// Interrupts the running turn.
    pub async fn interrupt(&self) -> Result<Value, ControlError> {
        self.request("interrupt", json!({})).await
    }

    /// Changes the model (`None` resets to the default). The CLI validates it upstream first.
    pub async fn set_model(&self, model: Option<&str>) -> Result<Value, ControlError> {
        self.request("set_model", json!({"model": model})).await
    }

    /// Changes the permission mode.
    pub async fn set_permission_mode(&self, mode: &str) -> Result<Value, ControlError> {
        self.request("set_permission_mode", json!({"mode": mode}))
            .await
    }

    /// Sets the reasoning effort (`None` clears it, for models without effort levels),
    /// effective from the next model request.
    pub async fn set_effort(&self, level: Option<&str>) -> Result<Value, ControlError> {
        self.request(
            "apply_flag_settings",
            json!({"settings": {"effortLevel": level}}),
        )
        .await
    }

    /// Sets the thinking budget (`None` clears it).
    pub async fn set_max_thinking_tokens(
        &self,
        tokens: Option<u32>,
    ) -> Result<Value, ControlError> {
        self.request(
            "set_max_thinking_tokens",
            json!({"max_thinking_tokens": tokens}),
        )
        .await
    }

    /// `mcp_status`.
    pub async fn mcp_status(&self) -> Result<Value, ControlError> {
        self.request("mcp_status", json!({})).await
    }

    /// `get_context_usage`.
    pub async fn get_context_usage(&self) -> Result<Value, ControlError> {
        self.request("get_context_usage", json!({})).await
    }

    /// `rewind_files` to the state before the user message `user_message_id`.
    pub async fn rewind_files(
        &self,
        user_message_id: &str,
        dry_run: bool,
    ) -> Result<Value, ControlError> {
        self.request(
            "rewind_files",
            json!({"user_message_id": user_message_id, "dry_run": dry_run}),
        )
        .await
    }

    /// `reload_plugins`.
    pub async fn reload_plugins(&self) -> Result<Value, ControlError> {
        self.request("reload_plugins", json!({})).await
    }

    /// `mcp_set_servers`.
    pub async fn mcp_set_servers(&self, servers: Value) -> Result<Value, ControlError> {
        self.request("mcp_set_servers", json!({"servers": servers}))
            .await
    }

    /// `stop_task`.
    pub async fn stop_task(&self, task_id: &str) -> Result<Value, ControlError> {
        self.request("stop_task", json!({"task_id": task_id})).await
    }

    /// Graceful close: end stdin, wait for the CLI to exit, kill the group after the timeout.
    /// Returns the exit error (with `success: true` for a clean exit).
    pub async fn close(mut self) -> SessionError {
        *self.shared.stdin.lock().await = None;
        let timeout = self.opts.close_timeout;
        let drained = tokio::time::timeout(timeout, async {
            while let Some(item) = self.frames.get_mut().recv().await {
                if let Err(e @ SessionError::Exited { .. }) = item {
                    return Some(e);
                }
            }
            None
        })
        .await;
        match drained {
            Ok(Some(e)) => e,
            _ => {
                if let Some(pgid) = self.pgid {
                    kill_group(pgid, libc::SIGKILL);
                }
                let mut child = self.child.lock().await;
                let status = child
                    .child
                    .wait()
                    .await
                    .map(describe_status)
                    .unwrap_or_else(|e| (e.to_string(), false));
                SessionError::Exited {
                    status: status.0,
                    success: status.1,
                    stderr_tail: child.tail(),
                }
            }
        }
    }
}

impl Drop for ClaudeSession {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
        if let Some(pgid) = self.pgid {
            kill_group(pgid, libc::SIGKILL);
        }
    }
}

fn describe_status(s: std::process::ExitStatus) -> (String, bool) {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => (format!("exit code {c}"), c == 0),
        (None, Some(sig)) => (format!("signal {sig}"), false),
        _ => ("unknown status".into(), false),
    }
}

/// One stdout line, or the news that one was too long (and skipped).
#[cfg_attr(feature = "fuzzing", derive(Debug, PartialEq, Eq))]
enum Line {
    Text(String),
    TooLong,
}

/// NDJSON framing with a bounded line length. An oversize line is skipped up to its newline
/// and reported; the stream goes on (a codec that stops at its first error would end the
/// session over one bad frame).
struct LineReader<R = tokio::io::BufReader<tokio::process::ChildStdout>> {
    inner: R,
    buf: Vec<u8>,
    limit: usize,
}

impl LineReader {
    fn new(stdout: tokio::process::ChildStdout, limit: usize) -> Self {
        LineReader::over(
            tokio::io::BufReader::with_capacity(64 * 1024, stdout),
            limit,
        )
    }
}

impl<R: tokio::io::AsyncBufRead + Unpin> LineReader<R> {
    /// Frames lines out of any buffered reader (the CLI's stdout; bytes in the fuzz targets).
    fn over(inner: R, limit: usize) -> Self {
        LineReader {
            inner,
            buf: Vec::new(),
            limit,
        }
    }

    async fn next(&mut self) -> std::io::Result<Option<Line>> {
        let mut too_long = false;
        loop {
            let available = self.inner.fill_buf().await?;
            if available.is_empty() {
                if too_long || self.buf.is_empty() {
                    return Ok(too_long.then_some(Line::TooLong));
                }
                return Ok(Some(self.take_line()));
            }
            let (chunk, consumed, done) = match available.iter().position(|b| *b == b'\n') {
                Some(i) => (&available[..i], i + 1, true),
                None => (available, available.len(), false),
            };
            if !too_long {
                if self.buf.len() + chunk.len() > self.limit {
                    too_long = true;
                    self.buf = Vec::new();
                } else {
                    self.buf.extend_from_slice(chunk);
                }
            }
            self.inner.consume(consumed);
            if done {
                return Ok(Some(if too_long {
                    Line::TooLong
                } else {
                    self.take_line()
                }));
            }
        }
    }

    fn take_line(&mut self) -> Line {
        let bytes = std::mem::take(&mut self.buf);
        Line::Text(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// Whether the `n`th bad frame from one CLI gets a log line: the first ten, then every power
/// of ten.
fn worth_logging(n: u64) -> bool {
    n <= 10 || n == 10u64.pow(n.ilog10())
}

async fn read_loop(
    mut reader: LineReader,
    shared: Arc<Shared>,
    callbacks: Arc<dyn Callbacks>,
    tx: mpsc::UnboundedSender<Result<Frame, SessionError>>,
    child: Arc<tokio::sync::Mutex<ChildGuard>>,
    limit: usize,
) {
    // A CLI gone wrong can write garbage without end; the log gets the first few and then a
    // running count, not a line per frame.
    let mut bad_frames: u64 = 0;
    loop {
        let line = match reader.next().await {
            Ok(Some(Line::Text(l))) => l,
            Ok(Some(Line::TooLong)) => {
                bad_frames += 1;
                if worth_logging(bad_frames) {
                    tracing::warn!(limit, bad_frames, "dropping an oversize frame from the CLI");
                }
                let _ = tx.send(Err(SessionError::OversizeFrame { limit }));
                continue;
            }
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(error = %e, "reading the CLI's stdout failed");
                break;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let frame = match Frame::parse(&line) {
            Ok(f) => f,
            Err(e) => {
                let preview: String = line.chars().take(80).collect();
                bad_frames += 1;
                if worth_logging(bad_frames) {
                    tracing::warn!(error = %e, %preview, bad_frames, "bad frame from the CLI");
                }
                let _ = tx.send(Err(SessionError::BadFrame {
                    error: e.to_string(),
                    preview,
                }));
                continue;
            }
        };
        match frame.kind {
            FrameKind::ControlResponse => {
                if let Some((id, result)) = frame.control_response()
                    && let Some(waiter) = lock(&shared.pending).remove(id)
                {
                    let _ = waiter.send(result);
                }
            }
            FrameKind::ControlRequest => serve_callback(&shared, &callbacks, &frame),
            FrameKind::ControlCancelRequest => {
                if let Some(id) = frame.str("request_id")
                    && let Some(token) = lock(&shared.callbacks_inflight).remove(id)
                {
                    token.cancel();
                }
                let _ = tx.send(Ok(frame));
            }
            FrameKind::KeepAlive => {}
            FrameKind::StreamEvent if shared.trace.is_some() => {
                if let Some(t) = &shared.trace {
                    t.stream_event(&frame);
                }
                let _ = tx.send(Ok(frame));
            }
            // Never waits: the channel is unbounded, so frames nobody reads yet cannot hold
            // up the control traffic behind them. A send fails only once the session is
            // dropped, and then the frame has no reader anyway.
            _ => {
                let _ = tx.send(Ok(frame));
            }
        }
    }
    // stdout closed: the CLI is exiting. Fail what is still waiting, then report the exit.
    let (status, tail) = {
        let mut guard = child.lock().await;
        let status = match tokio::time::timeout(Duration::from_secs(5), guard.child.wait()).await {
            Ok(Ok(s)) => describe_status(s),
            _ => {
                guard.kill_group();
                ("killed after closing stdout".into(), false)
            }
        };
        guard.drain_stderr().await;
        (status, guard.tail())
    };
    let err = SessionError::Exited {
        status: status.0,
        success: status.1,
        stderr_tail: tail,
    };
    *lock(&shared.ended) = Some(err.clone());
    shared.ended_notify.notify_waiters();
    lock(&shared.pending).clear();
    for (_, token) in lock(&shared.callbacks_inflight).drain() {
        token.cancel();
    }
    let _ = tx.send(Err(err));
}

fn serve_callback(shared: &Arc<Shared>, callbacks: &Arc<dyn Callbacks>, frame: &Frame) {
    let Some((id, request)) = frame.control_request() else {
        return;
    };
    let id = id.to_owned();
    let request = request.clone();
    let subtype = request
        .get("subtype")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if subtype == "mcp_message" {
        serve_mcp(shared, &id, &request);
        return;
    }
    let cancel = shared.shutdown.child_token();
    lock(&shared.callbacks_inflight).insert(id.clone(), cancel.clone());
    let shared = shared.clone();
    let callbacks = callbacks.clone();
    // Never block the read loop: the CLI can interleave requests (MCP handshakes happen before
    // it answers `initialize`) and must get its answers while we keep reading.
    tokio::spawn(async move {
        let answer = match subtype.as_str() {
            "can_use_tool" => {
                let tool_use_id = request.get("tool_use_id").cloned();
                let fut = callbacks.can_use_tool(request, cancel.clone());
                // Biased: a callback that reacts to the cancellation gets to finish; only one
                // that ignores it is dropped.
                tokio::select! {
                    biased;
                    r = fut => Ok(permission_json(r, tool_use_id)),
                    () = cancel.cancelled() => Err(None),
                }
            }
            "hook_callback" => {
                let cb = request
                    .get("callback_id")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                let input = request.get("input").cloned().unwrap_or(Value::Null);
                tokio::select! {
                    biased;
                    r = callbacks.hook_callback(cb, input, cancel.clone()) => Ok(r),
                    () = cancel.cancelled() => Err(None),
                }
            }
            _ => callbacks
                .other(subtype.clone(), request)
                .await
                .map_err(Some),
        };
        lock(&shared.callbacks_inflight).remove(&id);
        let reply = match answer {
            Ok(v) => control_success(&id, v),
            Err(Some(e)) => control_error(&id, &e),
            // Withdrawn by the CLI: it expects no answer.
            Err(None) => return,
        };
        if let Err(e) = shared.write(&reply).await {
            tracing::debug!(error = %e, "could not answer a CLI request");
        }
    });
}

fn permission_json(r: PermissionResult, tool_use_id: Option<Value>) -> Value {
    let mut v = match r {
        PermissionResult::Allow {
            updated_input,
            updated_permissions,
        } => {
            let mut v = json!({"behavior": "allow", "updatedInput": updated_input});
            if let Some(p) = updated_permissions {
                v["updatedPermissions"] = p;
            }
            v
        }
        PermissionResult::Deny { message, interrupt } => {
            json!({"behavior": "deny", "message": message, "interrupt": interrupt})
        }
    };
    if let Some(id) = tool_use_id {
        v["toolUseID"] = id;
    }
    v
}

/// Routes one `mcp_message` from the CLI to its in-process server, inline: the CLI runs the
/// MCP handshake before it answers `initialize`, so this must never wait on anything.
fn serve_mcp(shared: &Arc<Shared>, id: &str, request: &Map<String, Value>) {
    let server = request
        .get("server_name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let message = request.get("message").cloned().unwrap_or(Value::Null);
    let immediate = match shared.mcp.get(server) {
        None => Some(control_error(
            id,
            &format!("no in-process MCP server named {server:?}"),
        )),
        Some(bridge) => match bridge.route(id, message) {
            Ok(Routed::Parked) => None,
            Ok(Routed::AckNow) => Some(control_success(
                id,
                json!({"mcp_response": {"jsonrpc": "2.0", "result": {}, "id": 0}}),
            )),
            Err(e) => Some(control_error(id, &e)),
        },
    };
    if let Some(reply) = immediate {
        let shared = shared.clone();
        tokio::spawn(async move {
            let _ = shared.write(&reply).await;
        });
    }
}

/// Forwards what a server says: responses answer the parked control request; anything else
/// (notifications, server → client requests) goes to the CLI as a new `mcp_message`.
async fn pump_server(
    name: String,
    bridge: Arc<Bridge>,
    mut rx: futures::channel::mpsc::UnboundedReceiver<
        rmcp::service::TxJsonRpcMessage<rmcp::RoleServer>,
    >,
    shared: Arc<Shared>,
) {
    use futures::StreamExt;
    while let Some(msg) = rx.next().await {
        let Ok(value) = serde_json::to_value(&msg) else {
            continue;
        };
        let frame = match bridge.take_parked(&value) {
            Some(control_id) => control_success(&control_id, json!({"mcp_response": value})),
            None => {
                let id = format!("mcp_{}", uuid::Uuid::new_v4().simple());
                control_request(
                    &id,
                    "mcp_message",
                    json!({"server_name": name, "message": value}),
                )
            }
        };
        if shared.write(&frame).await.is_err() {
            break;
        }
    }
}

/// The stdout framing for the fuzz targets (`fuzz/`, feature `fuzzing`). Not part of the API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    use super::{Line, LineReader};

    /// The lines [`LineReader`] frames out of `bytes` when they arrive `read_size` bytes at a
    /// time, with lines longer than `limit` bytes reported as `None`. The frames the session
    /// would parse are the `Some` lines that are not blank.
    pub fn stdout_lines(bytes: &[u8], read_size: usize, limit: usize) -> Vec<Option<String>> {
        thread_local! {
            // One runtime for every input: building one per input cost more than the input.
            static RUNTIME: Option<tokio::runtime::Runtime> =
                tokio::runtime::Builder::new_current_thread().build().ok();
        }
        let read = async {
            let reader = tokio::io::BufReader::with_capacity(read_size.max(1), bytes);
            let mut lines = LineReader::over(reader, limit);
            let mut out = Vec::new();
            // Reading from memory cannot fail.
            while let Ok(Some(line)) = lines.next().await {
                out.push(match line {
                    Line::Text(t) => Some(t),
                    Line::TooLong => None,
                });
            }
            out
        };
        RUNTIME
            .with(|rt| rt.as_ref().map(|rt| rt.block_on(read)))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::worth_logging;

    #[test]
    fn bad_frames_are_logged_ten_times_then_at_powers_of_ten() {
        let logged: Vec<u64> = (1..=100_000).filter(|&n| worth_logging(n)).collect();
        assert_eq!(
            logged,
            [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100, 1_000, 10_000, 100_000]
        );
    }
}
