//! A Claude chat session: provisional until the first send, then one long-lived CLI.
//! Tool permissions become pending confirmations in the state, settled by the client.

use crate::mapper::{TurnMapper, action, now_rfc3339};
use ahp::reducers::{ReduceOutcome, apply_action_to_chat};
use ahp_types::actions::StateAction;
use ahp_types::state::ChatState;
use claude_host_protocol::stream_json::FrameKind;
use claude_host_sdk::CancellationToken;
use claude_host_sdk::{Callbacks, ClaudeSession, PermissionResult, SessionError, SessionOptions};
use serde_json::{Map, Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{Notify, broadcast, oneshot};

/// Why a send failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ChatSessionError {
    /// The CLI could not be started or initialized.
    #[error("cannot start the Claude session: {0}")]
    Start(String),
    /// The CLI failed during the turn.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// No tool call with this id is waiting for confirmation.
    #[error("no tool call {0} is waiting for confirmation")]
    NotPending(String),
}

/// The client's decision on a tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirmation {
    /// Run it.
    Approve,
    /// Do not run it.
    Deny,
}

struct Reduced {
    state: ChatState,
    /// Tool calls the CLI asked permission for (their auto-approval must not be applied).
    asked: HashSet<String>,
}

struct Inner {
    reduced: Mutex<Reduced>,
    changed: Notify,
    actions: broadcast::Sender<StateAction>,
    turn: Mutex<Option<String>>,
    waiting: Mutex<HashMap<String, oneshot::Sender<Confirmation>>>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn action_type(a: &StateAction) -> (String, Option<String>, bool) {
    let v = serde_json::to_value(a).unwrap_or(Value::Null);
    (
        v["type"].as_str().unwrap_or("").to_owned(),
        v["toolCallId"].as_str().map(str::to_owned),
        v.get("confirmed").is_some_and(|c| !c.is_null()),
    )
}

impl Inner {
    fn apply(&self, actions: Vec<StateAction>) {
        {
            let mut r = lock(&self.reduced);
            for a in actions {
                let (ty, tool, confirmed) = action_type(&a);
                // The CLI asked the user about this tool: its automatic "ready" must not run it.
                if ty == "chat/toolCallReady"
                    && confirmed
                    && tool.is_some_and(|t| r.asked.contains(&t))
                {
                    continue;
                }
                match apply_action_to_chat(&mut r.state, &a) {
                    ReduceOutcome::Applied => {}
                    other => tracing::debug!(?other, %ty, "action did not change the chat state"),
                }
                let _ = self.actions.send(a);
            }
        }
        self.changed.notify_waiters();
    }

    fn has_tool_call(&self, tool_call_id: &str) -> bool {
        let r = lock(&self.reduced);
        let Some(active) = &r.state.active_turn else {
            return false;
        };
        serde_json::to_value(&active.response_parts)
            .unwrap_or(Value::Null)
            .as_array()
            .is_some_and(|parts| {
                parts
                    .iter()
                    .any(|p| p["toolCall"]["toolCallId"] == tool_call_id)
            })
    }
}

/// Routes the CLI's permission requests into the chat state.
struct Bridge(Weak<Inner>);

#[async_trait::async_trait]
impl Callbacks for Bridge {
    async fn can_use_tool(
        &self,
        request: Map<String, Value>,
        cancel: CancellationToken,
    ) -> PermissionResult {
        let deny = |m: &str| PermissionResult::Deny {
            message: m.into(),
            interrupt: false,
        };
        let Some(inner) = self.0.upgrade() else {
            return deny("session closed");
        };
        let Some(turn) = lock(&inner.turn).clone() else {
            return deny("no turn in progress");
        };
        let tool_call_id = request
            .get("tool_use_id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let input = request.get("input").cloned().unwrap_or(json!({}));
        let tool = request
            .get("tool_name")
            .and_then(Value::as_str)
            .unwrap_or("tool")
            .to_owned();
        // Frames and control requests travel separately; wait until the tool call the request
        // is about has reached the state.
        let known = async {
            loop {
                let changed = inner.changed.notified();
                if inner.has_tool_call(&tool_call_id) {
                    return;
                }
                changed.await;
            }
        };
        if tokio::time::timeout(Duration::from_secs(10), known)
            .await
            .is_err()
        {
            tracing::warn!(%tool_call_id, "permission asked for a tool call that never appeared");
        }
        let (tx, rx) = oneshot::channel();
        // Holding `waiting` until the state shows the confirmation: whoever sees the request
        // waiting also sees it pending in the state, and can settle it.
        {
            let mut waiting = lock(&inner.waiting);
            lock(&inner.reduced).asked.insert(tool_call_id.clone());
            let title = request
                .get("title")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| format!("Allow {tool}?"));
            inner.apply(
                action(json!({"type": "chat/toolCallReady", "turnId": turn, "toolCallId": tool_call_id,
                    "invocationMessage": request.get("description").and_then(Value::as_str).unwrap_or(&tool),
                    "toolInput": input.to_string(), "confirmationTitle": title}))
                .into_iter()
                .collect(),
            );
            waiting.insert(tool_call_id.clone(), tx);
        }
        inner.changed.notify_waiters();
        let decision = tokio::select! {
            d = rx => d.unwrap_or(Confirmation::Deny),
            () = cancel.cancelled() => Confirmation::Deny,
        };
        lock(&inner.waiting).remove(&tool_call_id);
        let approved = decision == Confirmation::Approve;
        let mut confirmed = json!({"type": "chat/toolCallConfirmed", "turnId": turn, "toolCallId": tool_call_id, "approved": approved});
        if approved {
            confirmed["confirmed"] = json!("user-action");
        } else {
            confirmed["reason"] = json!("denied");
        }
        inner.apply(action(confirmed).into_iter().collect());
        if approved {
            PermissionResult::Allow {
                updated_input: input,
                updated_permissions: None,
            }
        } else {
            deny("User declined")
        }
    }
}

/// One chat backed by one Claude Code process.
pub struct ChatSession {
    opts: SessionOptions,
    inner: Arc<Inner>,
    /// The live CLI; the lock also makes concurrent first sends start exactly one.
    cli: tokio::sync::Mutex<Option<Arc<ClaudeSession>>>,
    /// Serializes turns.
    turn_lock: tokio::sync::Mutex<()>,
    /// The Claude session id, once the CLI reported it (used to resume after a crash).
    session_id: Mutex<Option<String>>,
    /// The model chosen mid-session, replayed on a restarted CLI.
    model: Mutex<Option<String>>,
    materializations: AtomicUsize,
    turns: AtomicUsize,
    /// Where the host's overlay (title, model, mode, cwd, times) is kept, if anywhere.
    store: Option<Arc<dyn claude_host_store::Store>>,
    /// The first prompt, the default title.
    first_prompt: Mutex<Option<String>>,
    created_at: i64,
}

impl std::fmt::Debug for ChatSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatSession").finish_non_exhaustive()
    }
}

impl ChatSession {
    /// A provisional session: no process is started and nothing is written until the first
    /// send.
    pub fn new(resource: &str, opts: SessionOptions) -> Result<ChatSession, ChatSessionError> {
        let state: ChatState = serde_json::from_value(json!({
            "resource": resource, "title": "", "status": 1, "modifiedAt": now_rfc3339(), "turns": []
        }))
        .map_err(|e| ChatSessionError::Start(format!("empty chat state: {e}")))?;
        // The ring is allocated up front (one slot per action); 256 keeps an idle session small,
        // and a subscriber that falls further behind sees `Lagged` and must resync from state.
        let (actions, _) = broadcast::channel(256);
        Ok(ChatSession {
            opts,
            inner: Arc::new(Inner {
                reduced: Mutex::new(Reduced {
                    state,
                    asked: HashSet::new(),
                }),
                changed: Notify::new(),
                actions,
                turn: Mutex::new(None),
                waiting: Mutex::new(HashMap::new()),
            }),
            cli: tokio::sync::Mutex::new(None),
            turn_lock: tokio::sync::Mutex::new(()),
            session_id: Mutex::new(None),
            model: Mutex::new(None),
            materializations: AtomicUsize::new(0),
            turns: AtomicUsize::new(0),
            store: None,
            first_prompt: Mutex::new(None),
            created_at: now_ms(),
        })
    }

    /// A session restored from an existing Claude session's transcript: its turns are loaded
    /// into the state, and the first send resumes it (`--resume`).
    pub fn restore(
        resource: &str,
        opts: SessionOptions,
        config_dir: &std::path::Path,
        session_id: &str,
    ) -> Result<ChatSession, ChatSessionError> {
        let transcript = claude_host_sdk::transcripts::read_session(config_dir, session_id)
            .map_err(|e| ChatSessionError::Start(e.to_string()))?;
        let turns = crate::restore::turns_from_transcript(&transcript);
        let session = ChatSession::new(resource, opts)?;
        *lock(&session.session_id) = Some(session_id.to_owned());
        let loaded = crate::mapper::action(json!({"type": "chat/turnsLoaded", "turns": turns}))
            .ok_or_else(|| {
                ChatSessionError::Start("the transcript's turns do not form valid AHP state".into())
            })?;
        session.inner.apply(vec![loaded]);
        // Later turns must not reuse ids; number them after the restored ones.
        let restored = lock(&session.inner.reduced).state.turns.len();
        session.turns.store(restored, Ordering::SeqCst);
        Ok(session)
    }

    fn config_dir(&self) -> Option<std::path::PathBuf> {
        self.opts.config_dir.clone().or_else(|| {
            self.opts
                .extra_env
                .iter()
                .rev()
                .find(|(k, _)| k == "HOME")
                .map(|(_, v)| std::path::PathBuf::from(v))
                .or_else(std::env::home_dir)
                .map(|h| h.join(".claude"))
        })
    }

    /// Forks the session keeping its first `keep_turns` turns: a new Claude session (its
    /// transcript a copy of this one's up to that point) restored as a new chat.
    pub fn fork(&self, resource: &str, keep_turns: usize) -> Result<ChatSession, ChatSessionError> {
        let id = self
            .session_id()
            .ok_or_else(|| ChatSessionError::Start("nothing to fork yet".into()))?;
        let config = self
            .config_dir()
            .ok_or_else(|| ChatSessionError::Start("no Claude config directory".into()))?;
        let start = |e: claude_host_sdk::transcripts::TranscriptError| {
            ChatSessionError::Start(e.to_string())
        };
        let t = claude_host_sdk::transcripts::read_session(&config, &id).map_err(start)?;
        let chain = t.main_chain();
        // Turns start at human prompts: cut just before the first prompt that is not kept.
        let next_prompt = chain
            .iter()
            .enumerate()
            .filter(|(_, e)| crate::restore::is_prompt_entry(e))
            .map(|(i, _)| i)
            .nth(keep_turns);
        let up_to = match next_prompt {
            Some(0) | None if keep_turns == 0 => {
                return Err(ChatSessionError::Start(
                    "cannot fork before the first turn".into(),
                ));
            }
            Some(at) => chain[at - 1]
                .get("uuid")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned),
            None => None,
        };
        let new_id = claude_host_sdk::transcripts::fork_session(&config, &id, up_to.as_deref())
            .map_err(start)?;
        ChatSession::restore(resource, self.opts.clone(), &config, &new_id)
    }

    /// Subscribes to the actions applied from now on, in order.
    pub fn subscribe(&self) -> broadcast::Receiver<StateAction> {
        self.inner.actions.subscribe()
    }

    /// A copy of the reduced state.
    pub fn state(&self) -> ChatState {
        lock(&self.inner.reduced).state.clone()
    }

    /// How many times a CLI was started for this session.
    pub fn materializations(&self) -> usize {
        self.materializations.load(Ordering::SeqCst)
    }

    /// Whether the CLI has been started.
    pub fn is_materialized(&self) -> bool {
        self.materializations() > 0
    }

    /// The Claude session id, once known.
    pub fn session_id(&self) -> Option<String> {
        lock(&self.session_id).clone()
    }

    async fn live_cli(&self) -> Option<Arc<ClaudeSession>> {
        self.cli.lock().await.clone().filter(|c| !c.has_exited())
    }

    /// Keeps this session's overlay in `store` (written after each turn, never before the
    /// first send).
    pub fn with_store(mut self, store: Arc<dyn claude_host_store::Store>) -> Self {
        self.store = Some(store);
        self
    }

    async fn save_overlay(&self) {
        let (Some(store), Some(id)) = (&self.store, self.session_id()) else {
            return;
        };
        let existing = store.get(&id).await.ok().flatten();
        let title = existing.as_ref().and_then(|r| r.title.clone()).or_else(|| {
            lock(&self.first_prompt)
                .as_ref()
                .map(|p| p.chars().take(80).collect())
        });
        let record = claude_host_store::SessionRecord {
            id,
            title,
            model: lock(&self.model)
                .clone()
                .or_else(|| self.opts.model.clone()),
            effort: existing.as_ref().and_then(|r| r.effort.clone()),
            permission_mode: self.opts.permission_mode.clone(),
            cwd: self.opts.cwd.display().to_string(),
            created_at: existing.as_ref().map_or(self.created_at, |r| r.created_at),
            updated_at: now_ms(),
            archived: existing.is_some_and(|r| r.archived),
        };
        if let Err(e) = store.put(&record).await {
            tracing::warn!(error = %e, "could not save the session overlay");
        }
    }

    /// Starts the CLI now (`warm: true`), so the first prompt does not pay its start-up.
    pub async fn warm(&self) -> Result<(), ChatSessionError> {
        self.materialize().await.map(|_| ())
    }

    /// The process group of the live CLI, if one runs.
    pub async fn cli_pgid(&self) -> Option<i32> {
        self.live_cli().await.and_then(|c| c.pgid())
    }

    /// Interrupts the running turn (it ends as cancelled).
    pub async fn abort(&self) -> Result<(), ChatSessionError> {
        if let Some(cli) = self.live_cli().await {
            cli.interrupt()
                .await
                .map_err(|e| ChatSessionError::Start(e.to_string()))?;
        }
        Ok(())
    }

    /// Changes the model: applied to the live CLI now, and to any CLI started later.
    pub async fn set_model(&self, model: &str) -> Result<(), ChatSessionError> {
        *lock(&self.model) = Some(model.to_owned());
        if let Some(cli) = self.live_cli().await {
            cli.set_model(Some(model))
                .await
                .map_err(|e| ChatSessionError::Start(e.to_string()))?;
        }
        Ok(())
    }

    /// Tool calls waiting for the client's decision.
    pub fn pending_confirmations(&self) -> Vec<String> {
        lock(&self.inner.waiting).keys().cloned().collect()
    }

    /// Settles a pending tool confirmation.
    pub fn confirm_tool(
        &self,
        tool_call_id: &str,
        decision: Confirmation,
    ) -> Result<(), ChatSessionError> {
        let tx = lock(&self.inner.waiting)
            .remove(tool_call_id)
            .ok_or_else(|| ChatSessionError::NotPending(tool_call_id.to_owned()))?;
        tx.send(decision)
            .map_err(|_| ChatSessionError::NotPending(tool_call_id.to_owned()))
    }

    /// Waits until some tool call needs confirmation, and returns its id.
    pub async fn next_confirmation(&self, timeout: Duration) -> Option<String> {
        let wait = async {
            loop {
                let changed = self.inner.changed.notified();
                if let Some(id) = self.pending_confirmations().into_iter().next() {
                    return id;
                }
                changed.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.ok()
    }

    /// The live CLI, starting one if there is none (first send) or the last one died (then
    /// the session is resumed from its transcript, with the chosen model).
    async fn materialize(&self) -> Result<Arc<ClaudeSession>, ChatSessionError> {
        let mut slot = self.cli.lock().await;
        if let Some(cli) = slot.as_ref().filter(|c| !c.has_exited()) {
            return Ok(cli.clone());
        }
        self.materializations.fetch_add(1, Ordering::SeqCst);
        let mut opts = self.opts.clone();
        if let Some(id) = self.session_id() {
            opts.resume = Some(id);
            opts.session_id = None;
        }
        if let Some(m) = lock(&self.model).clone() {
            opts.model = Some(m);
        }
        let callbacks = Arc::new(Bridge(Arc::downgrade(&self.inner)));
        let cli = ClaudeSession::spawn(opts, callbacks)
            .map_err(|e| ChatSessionError::Start(e.to_string()))?;
        cli.initialize(None, json!({}))
            .await
            .map_err(|e| ChatSessionError::Start(e.to_string()))?;
        let cli = Arc::new(cli);
        *slot = Some(cli.clone());
        Ok(cli)
    }

    /// Sends a prompt and runs the turn to its end. Sends are serialized: a second send waits
    /// for the first turn. Returns the turn id.
    pub async fn send(&self, prompt: &str) -> Result<String, ChatSessionError> {
        let _turn = self.turn_lock.lock().await;
        let cli = self.materialize().await?;
        let turn_id = format!("turn-{}", self.turns.fetch_add(1, Ordering::SeqCst) + 1);
        *lock(&self.inner.turn) = Some(turn_id.clone());
        let (mut mapper, started) = TurnMapper::start(&turn_id, prompt);
        self.inner.apply(started);
        lock(&self.first_prompt).get_or_insert_with(|| prompt.to_owned());
        let result = self.run_turn(&cli, &mut mapper, prompt).await;
        *lock(&self.inner.turn) = None;
        self.save_overlay().await;
        result.map(|()| turn_id)
    }

    async fn run_turn(
        &self,
        cli: &ClaudeSession,
        mapper: &mut TurnMapper,
        prompt: &str,
    ) -> Result<(), ChatSessionError> {
        if let Err(e) = cli.send_user(json!(prompt), None, None).await {
            self.inner.apply(mapper.fail(&e.to_string()));
            return Err(e.into());
        }
        while !mapper.finished() {
            match cli.recv_frame().await {
                Some(Ok(frame)) => {
                    if let Some(id) = frame.session_id().filter(|id| !id.is_empty()) {
                        let mut known = lock(&self.session_id);
                        if known.as_deref() != Some(id) {
                            *known = Some(id.to_owned());
                        }
                    }
                    let is_result = frame.kind == FrameKind::Result;
                    self.inner.apply(mapper.map(&frame));
                    if is_result {
                        break;
                    }
                }
                Some(Err(e @ SessionError::Exited { .. })) => {
                    self.inner.apply(mapper.fail(&e.to_string()));
                    return Err(e.into());
                }
                Some(Err(e)) => tracing::warn!(error = %e, "skipping a bad frame"),
                None => {
                    self.inner
                        .apply(mapper.fail("the Claude Code CLI went away"));
                    return Err(ChatSessionError::Start(
                        "the Claude Code CLI went away".into(),
                    ));
                }
            }
        }
        Ok(())
    }
}
