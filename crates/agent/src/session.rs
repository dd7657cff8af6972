//! A Claude chat session: provisional until the first send, then one long-lived CLI.
//! Tool permissions become pending confirmations in the state, settled by the client.

use crate::mapper::{TurnMapper, action, now_rfc3339};
use ahp::reducers::{ReduceOutcome, apply_action_to_chat};
use ahp_types::actions::StateAction;
use ahp_types::state::{ChatInputAnswer, ChatInputAnswerValue, ChatInputResponseKind, ChatState};
use claude_host_protocol::stream_json::{Frame, FrameKind};
use claude_host_sdk::CancellationToken;
use claude_host_sdk::{Callbacks, ClaudeSession, PermissionResult, SessionError, SessionOptions};
use serde_json::{Map, Value, json};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
    /// No tool call or input request with this id is waiting.
    #[error("nothing with id {0} is waiting for the client")]
    NotPending(String),
    /// The session was closed.
    #[error("the session is closed")]
    Closed,
}

/// The client's decision on a tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirmation {
    /// Run it.
    Approve,
    /// Do not run it.
    Deny,
}

/// A client's answer to an input request (`AskUserQuestion`).
#[derive(Debug, Clone)]
pub struct InputReply {
    /// Accept, decline or cancel.
    pub response: ChatInputResponseKind,
    /// Answers keyed by question id.
    pub answers: HashMap<String, ChatInputAnswer>,
}

/// Where our prompt's command is in the CLI's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CommandState {
    /// No `command_lifecycle` frame for it yet (older CLIs send none).
    Unseen,
    /// Queued behind another command.
    Queued,
    /// Running (or done).
    Started,
}

/// What a parked CLI callback waits for.
enum Waiter {
    Tool(oneshot::Sender<Confirmation>),
    Input(oneshot::Sender<InputReply>),
}

/// What the session applies to its CLI beyond the spawn options; replayed on every new CLI.
#[derive(Debug, Clone, Default)]
struct Settings {
    model: Option<String>,
    effort: Option<String>,
    permission_mode: Option<String>,
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
    waiting: Mutex<HashMap<String, Waiter>>,
    settings: Mutex<Settings>,
    /// Serializes turns: the client's, and those Claude Code starts on its own.
    turn_lock: tokio::sync::Mutex<()>,
    /// Turns so far (numbers new turn ids).
    turns: AtomicUsize,
    /// Frames the between-turns watcher read after a send took over.
    handoff: Mutex<VecDeque<Result<Frame, SessionError>>>,
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

    /// The input of a tool call of the active turn, as the model sent it.
    fn tool_input(&self, tool_call_id: &str) -> Option<Value> {
        let r = lock(&self.reduced);
        let parts = serde_json::to_value(&r.state.active_turn.as_ref()?.response_parts).ok()?;
        let call = parts
            .as_array()?
            .iter()
            .find(|p| p["toolCall"]["toolCallId"] == tool_call_id)?;
        serde_json::from_str(call["toolCall"]["toolInput"].as_str()?).ok()
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

/// What the model is told when the user says no (VS Code's wording).
const DECLINED: &str = "User declined";
const PLAN_DECLINED: &str = "The user declined the plan, maybe ask why?";
const QUESTION_CANCELLED: &str = "The user cancelled the question";

fn deny(message: &str) -> PermissionResult {
    PermissionResult::Deny {
        message: message.into(),
        interrupt: false,
    }
}

fn str_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// `AskUserQuestion`'s questions as AHP input questions (ids are the question positions).
fn input_questions(input: &Value) -> Vec<Value> {
    input["questions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let options: Vec<Value> = q["options"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .filter_map(|o| {
                    let label = str_field(o, "label")?;
                    let mut opt = json!({"id": label, "label": label});
                    if let Some(d) = str_field(o, "description") {
                        opt["description"] = json!(d);
                    }
                    Some(opt)
                })
                .collect();
            let multi = q["multiSelect"].as_bool().unwrap_or(false);
            let mut question = json!({
                "kind": if multi { "multi-select" } else { "single-select" },
                "id": i.to_string(),
                "message": str_field(q, "question").unwrap_or(""),
                "required": true,
                "options": options,
                // Claude offers "Other" on every question.
                "allowFreeformInput": true,
            });
            if let Some(h) = str_field(q, "header") {
                question["title"] = json!(h);
            }
            question
        })
        .collect()
}

/// The text the CLI expects for one answer.
fn answer_text(answer: &ChatInputAnswer) -> Option<String> {
    let value = match answer {
        ChatInputAnswer::Submitted(a) | ChatInputAnswer::Draft(a) => &a.value,
        ChatInputAnswer::Skipped(_) => return None,
    };
    let with_freeform = |mut picked: Vec<String>, free: &Option<Vec<String>>| {
        picked.extend(free.iter().flatten().filter(|f| !f.is_empty()).cloned());
        picked.join(", ")
    };
    Some(match value {
        ChatInputAnswerValue::Text(t) => t.value.clone(),
        ChatInputAnswerValue::Number(n) => n.value.to_string(),
        ChatInputAnswerValue::Boolean(b) => if b.value { "Yes" } else { "No" }.to_owned(),
        ChatInputAnswerValue::Selected(s) => {
            let picked = if s.value.is_empty() {
                Vec::new()
            } else {
                vec![s.value.clone()]
            };
            with_freeform(picked, &s.freeform_values)
        }
        ChatInputAnswerValue::SelectedMany(s) => with_freeform(s.value.clone(), &s.freeform_values),
        ChatInputAnswerValue::Unknown(v) => v.to_string(),
    })
}

impl Bridge {
    /// Waits until the tool call a control request is about has reached the state (frames
    /// and control requests travel separately).
    async fn wait_for_tool_call(inner: &Inner, tool_call_id: &str) {
        let known = async {
            loop {
                let changed = inner.changed.notified();
                if inner.has_tool_call(tool_call_id) {
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
    }

    /// Shows a pending confirmation and waits for the client's decision.
    async fn confirm(
        inner: &Inner,
        turn: &str,
        tool_call_id: &str,
        shown: Value,
        cancel: &CancellationToken,
    ) -> bool {
        let (tx, rx) = oneshot::channel();
        // Holding `waiting` until the state shows the confirmation: whoever sees the request
        // waiting also sees it pending in the state, and can settle it.
        {
            let mut waiting = lock(&inner.waiting);
            lock(&inner.reduced).asked.insert(tool_call_id.to_owned());
            let mut ready =
                json!({"type": "chat/toolCallReady", "turnId": turn, "toolCallId": tool_call_id});
            if let (Some(r), Value::Object(extra)) = (ready.as_object_mut(), shown) {
                r.extend(extra);
            }
            inner.apply(action(ready).into_iter().collect());
            waiting.insert(tool_call_id.to_owned(), Waiter::Tool(tx));
        }
        inner.changed.notify_waiters();
        let decision = tokio::select! {
            d = rx => d.unwrap_or(Confirmation::Deny),
            () = cancel.cancelled() => Confirmation::Deny,
        };
        lock(&inner.waiting).remove(tool_call_id);
        let approved = decision == Confirmation::Approve;
        let mut confirmed = json!({"type": "chat/toolCallConfirmed", "turnId": turn, "toolCallId": tool_call_id, "approved": approved});
        if approved {
            confirmed["confirmed"] = json!("user-action");
        } else {
            confirmed["reason"] = json!("denied");
        }
        inner.apply(action(confirmed).into_iter().collect());
        approved
    }

    /// `AskUserQuestion`: an input request; the answers go back keyed by question text.
    async fn ask(
        inner: &Inner,
        tool_call_id: &str,
        input: Value,
        cancel: &CancellationToken,
    ) -> PermissionResult {
        let questions = input_questions(&input);
        let (tx, rx) = oneshot::channel();
        {
            let mut waiting = lock(&inner.waiting);
            inner.apply(
                action(json!({"type": "chat/inputRequested", "request": {
                    "id": tool_call_id, "questions": questions}}))
                .into_iter()
                .collect(),
            );
            waiting.insert(tool_call_id.to_owned(), Waiter::Input(tx));
        }
        inner.changed.notify_waiters();
        let reply = tokio::select! {
            r = rx => r.ok(),
            () = cancel.cancelled() => None,
        };
        lock(&inner.waiting).remove(tool_call_id);
        let reply = reply.unwrap_or(InputReply {
            response: ChatInputResponseKind::Cancel,
            answers: HashMap::new(),
        });
        let mut completed = json!({"type": "chat/inputCompleted", "requestId": tool_call_id,
            "response": reply.response});
        if !reply.answers.is_empty() {
            completed["answers"] = json!(reply.answers);
        }
        inner.apply(action(completed).into_iter().collect());
        if reply.response != ChatInputResponseKind::Accept {
            return deny(QUESTION_CANCELLED);
        }
        let mut answers = Map::new();
        for (i, q) in input["questions"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            if let (Some(text), Some(a)) = (
                str_field(q, "question"),
                reply.answers.get(&i.to_string()).and_then(answer_text),
            ) {
                answers.insert(text.to_owned(), json!(a));
            }
        }
        let mut updated = input;
        updated["answers"] = Value::Object(answers);
        PermissionResult::Allow {
            updated_input: updated,
            updated_permissions: None,
        }
    }
}

#[async_trait::async_trait]
impl Callbacks for Bridge {
    async fn can_use_tool(
        &self,
        request: Map<String, Value>,
        cancel: CancellationToken,
    ) -> PermissionResult {
        let Some(inner) = self.0.upgrade() else {
            return deny("Session is no longer active");
        };
        let Some(turn) = lock(&inner.turn).clone() else {
            return deny("no turn in progress");
        };
        let request = Value::Object(request);
        let tool_call_id = str_field(&request, "tool_use_id").unwrap_or("").to_owned();
        let input = request.get("input").cloned().unwrap_or(json!({}));
        let tool = str_field(&request, "tool_name")
            .unwrap_or("tool")
            .to_owned();
        Bridge::wait_for_tool_call(&inner, &tool_call_id).await;
        match tool.as_str() {
            "AskUserQuestion" => Bridge::ask(&inner, &tool_call_id, input, &cancel).await,
            "ExitPlanMode" => {
                // The CLI hands over an empty input; the plan is in the model's tool call.
                let plan = str_field(&input, "plan")
                    .map(str::to_owned)
                    .or_else(|| {
                        inner
                            .tool_input(&tool_call_id)
                            .and_then(|i| str_field(&i, "plan").map(str::to_owned))
                    })
                    .unwrap_or_default();
                let shown = json!({"invocationMessage": plan, "toolInput": input.to_string(),
                    "confirmationTitle": "Approve this plan and start editing?"});
                if Bridge::confirm(&inner, &turn, &tool_call_id, shown, &cancel).await {
                    // The CLI applies the mode change itself; calling `set_permission_mode` from
                    // inside `can_use_tool` would deadlock its control channel.
                    lock(&inner.settings).permission_mode = Some("acceptEdits".into());
                    PermissionResult::Allow {
                        updated_input: input,
                        updated_permissions: Some(json!([{"type": "setMode",
                            "mode": "acceptEdits", "destination": "session"}])),
                    }
                } else {
                    deny(PLAN_DECLINED)
                }
            }
            _ => {
                let title = str_field(&request, "title")
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("Allow {tool}?"));
                let shown = json!({
                    "invocationMessage": str_field(&request, "description").unwrap_or(&tool),
                    "toolInput": input.to_string(), "confirmationTitle": title});
                if Bridge::confirm(&inner, &turn, &tool_call_id, shown, &cancel).await {
                    PermissionResult::Allow {
                        updated_input: input,
                        updated_permissions: None,
                    }
                } else {
                    deny(DECLINED)
                }
            }
        }
    }
}

/// One chat backed by one Claude Code process.
pub struct ChatSession {
    /// How the CLI is started; changing what the CLI loads (tools, MCP servers, plugins)
    /// restarts it before the next turn.
    opts: Mutex<SessionOptions>,
    inner: Arc<Inner>,
    /// The live CLI; the lock also makes concurrent first sends start exactly one.
    cli: tokio::sync::Mutex<Option<Arc<ClaudeSession>>>,
    /// The Claude session id, once the CLI reported it (used to resume after a crash).
    session_id: Mutex<Option<String>>,
    /// The CLI's inputs changed: the next send starts a new CLI resuming this session.
    restart_needed: AtomicBool,
    /// A truncation point (message uuid) for the next CLI: `--resume-session-at`.
    resume_at: Mutex<Option<String>>,
    /// An abort is in progress: a CLI exit now ends the turn as cancelled, not failed.
    aborting: AtomicBool,
    /// Steering messages sent into the running turn and not yet seen consumed.
    steering: Mutex<Vec<String>>,
    /// How long an interrupted turn may take to settle before the CLI is killed.
    abort_grace: Duration,
    closed: AtomicBool,
    materializations: AtomicUsize,
    /// Reads frames while no turn runs, to show turns Claude Code starts on its own.
    watcher: Mutex<Option<(Arc<Notify>, tokio::task::JoinHandle<()>)>>,
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

/// Settles every parked callback as refused: tools denied, questions cancelled.
fn refuse_all(inner: &Inner) {
    let parked: Vec<Waiter> = lock(&inner.waiting).drain().map(|(_, w)| w).collect();
    for w in parked {
        match w {
            Waiter::Tool(tx) => {
                let _ = tx.send(Confirmation::Deny);
            }
            Waiter::Input(tx) => {
                let _ = tx.send(InputReply {
                    response: ChatInputResponseKind::Cancel,
                    answers: HashMap::new(),
                });
            }
        }
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
        let settings = Settings {
            model: opts.model.clone(),
            effort: opts.effort.clone(),
            permission_mode: opts.permission_mode.clone(),
        };
        Ok(ChatSession {
            opts: Mutex::new(opts),
            inner: Arc::new(Inner {
                reduced: Mutex::new(Reduced {
                    state,
                    asked: HashSet::new(),
                }),
                changed: Notify::new(),
                actions,
                turn: Mutex::new(None),
                waiting: Mutex::new(HashMap::new()),
                settings: Mutex::new(settings),
                turn_lock: tokio::sync::Mutex::new(()),
                turns: AtomicUsize::new(0),
                handoff: Mutex::new(VecDeque::new()),
            }),
            cli: tokio::sync::Mutex::new(None),
            session_id: Mutex::new(None),
            restart_needed: AtomicBool::new(false),
            resume_at: Mutex::new(None),
            aborting: AtomicBool::new(false),
            steering: Mutex::new(Vec::new()),
            abort_grace: Duration::from_secs(5),
            closed: AtomicBool::new(false),
            materializations: AtomicUsize::new(0),
            watcher: Mutex::new(None),
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
        session.inner.turns.store(restored, Ordering::SeqCst);
        Ok(session)
    }

    /// How long an aborted turn may take to settle before the CLI is killed (default 5 s).
    pub fn with_abort_grace(mut self, grace: Duration) -> Self {
        self.abort_grace = grace;
        self
    }

    /// Keeps this session's overlay in `store` (written after each turn, never before the
    /// first send).
    pub fn with_store(mut self, store: Arc<dyn claude_host_store::Store>) -> Self {
        self.store = Some(store);
        self
    }

    fn opts(&self) -> SessionOptions {
        lock(&self.opts).clone()
    }

    fn config_dir(&self) -> Option<std::path::PathBuf> {
        let opts = self.opts();
        opts.config_dir.clone().or_else(|| {
            opts.extra_env
                .iter()
                .rev()
                .find(|(k, _)| k == "HOME")
                .map(|(_, v)| std::path::PathBuf::from(v))
                .or_else(std::env::home_dir)
                .map(|h| h.join(".claude"))
        })
    }

    /// The uuid of the last transcript entry of the first `keep_turns` turns (`None`: keep
    /// everything), for a fork or a truncation.
    fn turn_anchor(
        &self,
        keep_turns: usize,
    ) -> Result<(std::path::PathBuf, String, Option<String>), ChatSessionError> {
        let id = self
            .session_id()
            .ok_or_else(|| ChatSessionError::Start("the session has no turns yet".into()))?;
        let config = self
            .config_dir()
            .ok_or_else(|| ChatSessionError::Start("no Claude config directory".into()))?;
        let t = claude_host_sdk::transcripts::read_session(&config, &id)
            .map_err(|e| ChatSessionError::Start(e.to_string()))?;
        let chain = t.main_chain();
        // Turns start at human prompts: cut just before the first prompt that is not kept.
        let next_prompt = chain
            .iter()
            .enumerate()
            .filter(|(_, e)| crate::restore::is_prompt_entry(e))
            .map(|(i, _)| i)
            .nth(keep_turns);
        let anchor = match next_prompt {
            Some(0) => None,
            Some(at) => chain[at - 1]
                .get("uuid")
                .and_then(Value::as_str)
                .map(str::to_owned),
            None => return Ok((config, id, None)),
        };
        match anchor {
            Some(a) => Ok((config, id, Some(a))),
            None => Err(ChatSessionError::Start(
                "cannot cut the session before its first turn".into(),
            )),
        }
    }

    /// Forks the session keeping its first `keep_turns` turns: a new Claude session (its
    /// transcript a copy of this one's up to that point) restored as a new chat.
    pub fn fork(&self, resource: &str, keep_turns: usize) -> Result<ChatSession, ChatSessionError> {
        self.fork_with(keep_turns, |_| resource.to_owned())
    }

    /// As [`ChatSession::fork`], naming the new chat after the new Claude session id.
    pub fn fork_with(
        &self,
        keep_turns: usize,
        resource_for: impl FnOnce(&str) -> String,
    ) -> Result<ChatSession, ChatSessionError> {
        if keep_turns == 0 {
            return Err(ChatSessionError::Start(
                "cannot fork before the first turn".into(),
            ));
        }
        let (config, id, up_to) = self.turn_anchor(keep_turns)?;
        let new_id = claude_host_sdk::transcripts::fork_session(&config, &id, up_to.as_deref())
            .map_err(|e| ChatSessionError::Start(e.to_string()))?;
        let mut opts = self.opts();
        let s = lock(&self.inner.settings).clone();
        opts.model = s.model;
        opts.effort = s.effort;
        opts.permission_mode = s.permission_mode;
        ChatSession::restore(&resource_for(&new_id), opts, &config, &new_id)
    }

    /// Cuts the session back to its first `keep_turns` turns, in place: the state drops the
    /// later turns and the next send resumes the same Claude session at that point
    /// (`--resume-session-at`). Waits for a running turn to end first.
    pub async fn truncate(&self, keep_turns: usize) -> Result<(), ChatSessionError> {
        let _turn = self.inner.turn_lock.lock().await;
        let kept_turn_id = {
            let r = lock(&self.inner.reduced);
            if keep_turns >= r.state.turns.len() {
                return Ok(());
            }
            keep_turns
                .checked_sub(1)
                .and_then(|i| r.state.turns.get(i))
                .map(|t| t.id.clone())
        };
        if keep_turns == 0 {
            // Nothing is kept: the next send starts a fresh Claude session.
            if let Some(cli) = self.cli.lock().await.take() {
                cli.kill();
            }
            if let (Some(config), Some(id)) = (self.config_dir(), self.session_id())
                && let Err(e) = claude_host_sdk::transcripts::delete_session(&config, &id)
            {
                tracing::warn!(error = %e, "could not delete the truncated session's transcript");
            }
            *lock(&self.session_id) = None;
        } else {
            let (_, _, anchor) = self.turn_anchor(keep_turns)?;
            *lock(&self.resume_at) = anchor;
            self.restart_needed.store(true, Ordering::SeqCst);
        }
        let mut truncated = json!({"type": "chat/truncated"});
        if let Some(t) = kept_turn_id {
            truncated["turnId"] = json!(t);
        }
        self.inner.apply(action(truncated).into_iter().collect());
        Ok(())
    }

    /// Cuts the session back to just before the turn after `turn_id` (keeping it); `None`
    /// clears every turn. See [`ChatSession::truncate`].
    pub async fn truncate_after(&self, turn_id: Option<&str>) -> Result<(), ChatSessionError> {
        let keep = match turn_id {
            None => 0,
            Some(id) => {
                let r = lock(&self.inner.reduced);
                r.state
                    .turns
                    .iter()
                    .position(|t| t.id == id)
                    .map(|i| i + 1)
                    .ok_or_else(|| ChatSessionError::NotPending(id.to_owned()))?
            }
        };
        self.truncate(keep).await
    }

    /// Subscribes to the actions applied from now on, in order.
    pub fn subscribe(&self) -> broadcast::Receiver<StateAction> {
        self.inner.actions.subscribe()
    }

    /// A copy of the reduced state.
    pub fn state(&self) -> ChatState {
        lock(&self.inner.reduced).state.clone()
    }

    /// A copy of the reduced state and a subscription starting right after it, so a client
    /// joining mid-turn misses nothing and sees nothing twice.
    pub fn snapshot_and_subscribe(&self) -> (ChatState, broadcast::Receiver<StateAction>) {
        // `apply` reduces and broadcasts under the state lock.
        let r = lock(&self.inner.reduced);
        (r.state.clone(), self.inner.actions.subscribe())
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

    /// The model chosen for this session, if any (else the CLI's default).
    pub fn model(&self) -> Option<String> {
        lock(&self.inner.settings).model.clone()
    }

    /// The reasoning effort chosen for this session, if any.
    pub fn effort(&self) -> Option<String> {
        lock(&self.inner.settings).effort.clone()
    }

    /// The permission mode in force (`None`: the CLI's default).
    pub fn permission_mode(&self) -> Option<String> {
        lock(&self.inner.settings).permission_mode.clone()
    }

    /// The working directory.
    pub fn cwd(&self) -> std::path::PathBuf {
        lock(&self.opts).cwd.clone()
    }

    async fn live_cli(&self) -> Option<Arc<ClaudeSession>> {
        self.cli.lock().await.clone().filter(|c| !c.has_exited())
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
        let settings = lock(&self.inner.settings).clone();
        let record = claude_host_store::SessionRecord {
            id,
            title,
            model: settings.model,
            effort: settings.effort,
            permission_mode: settings.permission_mode,
            cwd: self.cwd().display().to_string(),
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
        let _turn = self.inner.turn_lock.lock().await;
        self.stop_watcher().await;
        let cli = self.materialize().await?;
        self.start_watcher(&cli);
        Ok(())
    }

    /// The process group of the live CLI, if one runs.
    pub async fn cli_pgid(&self) -> Option<i32> {
        self.live_cli().await.and_then(|c| c.pgid())
    }

    /// Waits until no turn runs.
    pub async fn wait_idle(&self) {
        loop {
            let changed = self.inner.changed.notified();
            if !self.turn_running() {
                return;
            }
            changed.await;
        }
    }

    /// Whether a turn is running.
    pub fn turn_running(&self) -> bool {
        lock(&self.inner.turn).is_some()
    }

    /// Aborts the running turn: parked questions are refused, the CLI is interrupted, and if
    /// the turn has not ended within the grace period the CLI is killed (the next send
    /// resumes the session). The turn ends as cancelled.
    pub async fn abort(&self) -> Result<(), ChatSessionError> {
        refuse_all(&self.inner);
        let Some(cli) = self.live_cli().await else {
            return Ok(());
        };
        if !self.turn_running() {
            return Ok(());
        }
        self.aborting.store(true, Ordering::SeqCst);
        let settled = async {
            loop {
                let changed = self.inner.changed.notified();
                if !self.turn_running() {
                    return;
                }
                changed.await;
            }
        };
        let interrupt = async {
            if let Err(e) = cli.interrupt().await {
                tracing::warn!(error = %e, "the CLI did not take the interrupt");
            }
            settled.await;
        };
        if tokio::time::timeout(self.abort_grace, interrupt)
            .await
            .is_err()
        {
            tracing::warn!(grace = ?self.abort_grace, "the turn did not settle after an interrupt; killing the CLI");
            cli.kill();
        }
        Ok(())
    }

    /// Changes the model: applied to the live CLI now, and to any CLI started later.
    pub async fn set_model(&self, model: &str) -> Result<(), ChatSessionError> {
        lock(&self.inner.settings).model = Some(model.to_owned());
        if let Some(cli) = self.live_cli().await {
            cli.set_model(Some(model))
                .await
                .map_err(|e| ChatSessionError::Start(e.to_string()))?;
        }
        Ok(())
    }

    /// Changes the reasoning effort (`None` clears it): applied to the live CLI now (from its
    /// next model request), and to any CLI started later.
    pub async fn set_effort(&self, effort: Option<&str>) -> Result<(), ChatSessionError> {
        lock(&self.inner.settings).effort = effort.map(str::to_owned);
        if let Some(cli) = self.live_cli().await {
            cli.set_effort(effort)
                .await
                .map_err(|e| ChatSessionError::Start(e.to_string()))?;
        }
        Ok(())
    }

    /// Changes the permission mode (`default`, `acceptEdits`, `plan`, `bypassPermissions`):
    /// applied to the live CLI now, and to any CLI started later.
    pub async fn set_permission_mode(&self, mode: &str) -> Result<(), ChatSessionError> {
        lock(&self.inner.settings).permission_mode = Some(mode.to_owned());
        if let Some(cli) = self.live_cli().await {
            cli.set_permission_mode(mode)
                .await
                .map_err(|e| ChatSessionError::Start(e.to_string()))?;
        }
        Ok(())
    }

    /// Changes what the CLI is started with (tools, MCP servers, plugins, directories). The
    /// running turn is not disturbed; the next send starts a new CLI resuming this session.
    pub fn update_options(&self, change: impl FnOnce(&mut SessionOptions)) {
        change(&mut lock(&self.opts));
        self.restart_needed.store(true, Ordering::SeqCst);
    }

    /// Tool calls waiting for the client's decision.
    pub fn pending_confirmations(&self) -> Vec<String> {
        lock(&self.inner.waiting)
            .iter()
            .filter(|(_, w)| matches!(w, Waiter::Tool(_)))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Input requests (questions) waiting for the client's answers.
    pub fn pending_inputs(&self) -> Vec<String> {
        lock(&self.inner.waiting)
            .iter()
            .filter(|(_, w)| matches!(w, Waiter::Input(_)))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Settles a pending tool confirmation.
    pub fn confirm_tool(
        &self,
        tool_call_id: &str,
        decision: Confirmation,
    ) -> Result<(), ChatSessionError> {
        let mut waiting = lock(&self.inner.waiting);
        match waiting.remove(tool_call_id) {
            Some(Waiter::Tool(tx)) => tx
                .send(decision)
                .map_err(|_| ChatSessionError::NotPending(tool_call_id.to_owned())),
            Some(other) => {
                waiting.insert(tool_call_id.to_owned(), other);
                Err(ChatSessionError::NotPending(tool_call_id.to_owned()))
            }
            None => Err(ChatSessionError::NotPending(tool_call_id.to_owned())),
        }
    }

    /// Answers a pending input request (answers keyed by question id).
    pub fn answer_input(
        &self,
        request_id: &str,
        reply: InputReply,
    ) -> Result<(), ChatSessionError> {
        let mut waiting = lock(&self.inner.waiting);
        match waiting.remove(request_id) {
            Some(Waiter::Input(tx)) => tx
                .send(reply)
                .map_err(|_| ChatSessionError::NotPending(request_id.to_owned())),
            Some(other) => {
                waiting.insert(request_id.to_owned(), other);
                Err(ChatSessionError::NotPending(request_id.to_owned()))
            }
            None => Err(ChatSessionError::NotPending(request_id.to_owned())),
        }
    }

    async fn next_waiting(&self, timeout: Duration, input: bool) -> Option<String> {
        let wait = async {
            loop {
                let changed = self.inner.changed.notified();
                let ids = if input {
                    self.pending_inputs()
                } else {
                    self.pending_confirmations()
                };
                if let Some(id) = ids.into_iter().next() {
                    return id;
                }
                changed.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.ok()
    }

    /// Waits until some tool call needs confirmation, and returns its id.
    pub async fn next_confirmation(&self, timeout: Duration) -> Option<String> {
        self.next_waiting(timeout, false).await
    }

    /// Waits until some input request needs answers, and returns its id.
    pub async fn next_input(&self, timeout: Duration) -> Option<String> {
        self.next_waiting(timeout, true).await
    }

    /// The live CLI, starting one if there is none (first send), the last one died (then
    /// the session is resumed from its transcript, with the chosen settings), or its inputs
    /// changed (the old one is closed first).
    async fn materialize(&self) -> Result<Arc<ClaudeSession>, ChatSessionError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(ChatSessionError::Closed);
        }
        let mut slot = self.cli.lock().await;
        let restart = self.restart_needed.swap(false, Ordering::SeqCst);
        if let Some(cli) = slot.as_ref().filter(|c| !c.has_exited()) {
            if !restart {
                return Ok(cli.clone());
            }
            if let Some(old) = slot.take() {
                close_cli(old).await;
            }
        }
        self.materializations.fetch_add(1, Ordering::SeqCst);
        let mut opts = self.opts();
        if let Some(id) = self.session_id() {
            opts.resume = Some(id);
            opts.session_id = None;
            opts.resume_session_at = lock(&self.resume_at).take();
        }
        let settings = lock(&self.inner.settings).clone();
        opts.model = settings.model.or(opts.model);
        opts.effort = settings.effort.or(opts.effort);
        opts.permission_mode = settings.permission_mode.or(opts.permission_mode);
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

    fn start_watcher(&self, cli: &Arc<ClaudeSession>) {
        if cli.has_exited() || self.closed.load(Ordering::SeqCst) {
            return;
        }
        let stop = Arc::new(Notify::new());
        let task = tokio::spawn(watch_between_turns(
            self.inner.clone(),
            cli.clone(),
            stop.clone(),
        ));
        if let Some((old_stop, old)) = lock(&self.watcher).replace((stop, task)) {
            old_stop.notify_one();
            old.abort();
        }
    }

    async fn stop_watcher(&self) {
        let running = lock(&self.watcher).take();
        if let Some((stop, task)) = running {
            stop.notify_one();
            let _ = task.await;
        }
    }

    /// Sends a prompt and runs the turn to its end. Sends are serialized: a second send waits
    /// for the first turn. Returns the turn id.
    pub async fn send(&self, prompt: &str) -> Result<String, ChatSessionError> {
        self.send_turn(None, prompt).await
    }

    /// As [`ChatSession::send`], with the turn id chosen by the client (AHP's
    /// `chat/turnStarted`); `None` numbers it.
    pub async fn send_turn(
        &self,
        turn_id: Option<String>,
        prompt: &str,
    ) -> Result<String, ChatSessionError> {
        let _turn = self.inner.turn_lock.lock().await;
        self.stop_watcher().await;
        let cli = self.materialize().await?;
        // Frames of a turn Claude Code started by itself: those the watcher handed over and
        // those still queued.
        let mut waiting: Vec<_> = lock(&self.inner.handoff).drain(..).collect();
        while let Some(item) = cli.try_recv_frame() {
            waiting.push(item);
        }
        adopt(&self.inner, &cli, waiting).await;
        let number = self.inner.turns.fetch_add(1, Ordering::SeqCst) + 1;
        let turn_id = turn_id.unwrap_or_else(|| format!("turn-{number}"));
        self.aborting.store(false, Ordering::SeqCst);
        *lock(&self.inner.turn) = Some(turn_id.clone());
        let (mut mapper, started) = TurnMapper::start(&turn_id, prompt);
        self.inner.apply(started);
        lock(&self.first_prompt).get_or_insert_with(|| prompt.to_owned());
        let result = self.run_turn(&cli, &mut mapper, prompt).await;
        *lock(&self.inner.turn) = None;
        self.consume_steering(Vec::new());
        self.inner.changed.notify_waiters();
        self.save_overlay().await;
        self.start_watcher(&cli);
        result.map(|()| turn_id)
    }

    /// Injects a message into the running turn (steering): the model sees it at its next
    /// step. Returns the pending message's id; `None` when no turn is running.
    pub async fn steer(&self, text: &str) -> Result<Option<String>, ChatSessionError> {
        self.steer_with_id(&uuid::Uuid::new_v4().to_string(), text)
            .await
    }

    /// As [`ChatSession::steer`], with the pending message's id chosen by the client (a
    /// uuid: the CLI uses it as the message's transcript id).
    pub async fn steer_with_id(
        &self,
        id: &str,
        text: &str,
    ) -> Result<Option<String>, ChatSessionError> {
        if !self.turn_running() {
            return Ok(None);
        }
        let Some(cli) = self.live_cli().await else {
            return Ok(None);
        };
        let id = id.to_owned();
        self.inner.apply(
            action(
                json!({"type": "chat/pendingMessageSet", "kind": "steering", "id": id,
                "message": {"text": text, "origin": {"kind": "user"}}}),
            )
            .into_iter()
            .collect(),
        );
        lock(&self.steering).push(id.clone());
        if let Err(e) = cli.send_user(json!(text), Some(&id), Some("now")).await {
            self.consume_steering(vec![id]);
            return Err(e.into());
        }
        Ok(Some(id))
    }

    /// Marks steering messages as handed over (`ids` empty: all of them, at turn end).
    fn consume_steering(&self, ids: Vec<String>) {
        let consumed: Vec<String> = {
            let mut pending = lock(&self.steering);
            if ids.is_empty() {
                pending.drain(..).collect()
            } else {
                pending.retain(|p| !ids.contains(p));
                ids
            }
        };
        let removed: Vec<StateAction> = consumed
            .into_iter()
            .filter_map(|id| {
                action(json!({"type": "chat/pendingMessageRemoved", "kind": "steering", "id": id}))
            })
            .collect();
        if !removed.is_empty() {
            self.inner.apply(removed);
        }
    }

    async fn run_turn(
        &self,
        cli: &ClaudeSession,
        mapper: &mut TurnMapper,
        prompt: &str,
    ) -> Result<(), ChatSessionError> {
        // The message's uuid names our command in the CLI's `command_lifecycle` frames, so a
        // `result` of a turn the CLI started on its own is not taken for ours.
        let command = uuid::Uuid::new_v4().to_string();
        if let Err(e) = cli.send_user(json!(prompt), Some(&command), None).await {
            self.inner.apply(mapper.fail(&e.to_string()));
            return Err(e.into());
        }
        let mut ours = CommandState::Unseen;
        let mut held_result = None;
        while !mapper.finished() {
            match cli.recv_frame().await {
                Some(Ok(frame)) => {
                    if let Some(id) = frame.session_id().filter(|id| !id.is_empty()) {
                        let mut known = lock(&self.session_id);
                        if known.as_deref() != Some(id) {
                            *known = Some(id.to_owned());
                        }
                    }
                    match frame.raw.get("type").and_then(Value::as_str) {
                        // A steering message becomes a command of its own; once it started,
                        // it has been handed to the model.
                        Some("command_lifecycle") => {
                            let id = frame.raw.get("command_uuid").and_then(Value::as_str);
                            let state = frame.raw.get("state").and_then(Value::as_str);
                            if id == Some(command.as_str()) {
                                ours = if state == Some("queued") {
                                    CommandState::Queued
                                } else {
                                    CommandState::Started
                                };
                            }
                            if let Some(id) = id
                                && state != Some("queued")
                                && lock(&self.steering).iter().any(|s| s == id)
                            {
                                self.consume_steering(vec![id.to_owned()]);
                            }
                            continue;
                        }
                        // The queue drained: a result held back for steering ends the turn.
                        Some("system")
                            if frame.raw.get("subtype").and_then(Value::as_str)
                                == Some("session_state_changed")
                                && frame.raw.get("state").and_then(Value::as_str)
                                    == Some("idle") =>
                        {
                            if let Some(result) = held_result.take() {
                                self.consume_steering(Vec::new());
                                self.inner.apply(mapper.map(&result));
                                break;
                            }
                            continue;
                        }
                        _ => {}
                    }
                    if frame.kind == FrameKind::Result {
                        // Our command is known but not started: this result ends a turn the
                        // CLI ran before it.
                        if ours == CommandState::Queued {
                            tracing::debug!("a result before our command started; skipped");
                            continue;
                        }
                        // A steering message still to run means this result ends only the
                        // step before it; the turn goes on.
                        if !lock(&self.steering).is_empty() {
                            held_result = Some(frame);
                            continue;
                        }
                        self.inner.apply(mapper.map(&frame));
                        break;
                    }
                    self.inner.apply(mapper.map(&frame));
                }
                Some(Err(e @ SessionError::Exited { .. })) => {
                    if self.aborting.load(Ordering::SeqCst) {
                        self.inner.apply(mapper.cancel());
                        return Ok(());
                    }
                    self.inner.apply(mapper.fail(&e.to_string()));
                    return Err(e.into());
                }
                Some(Err(e)) => tracing::warn!(error = %e, "skipping a bad frame"),
                None => {
                    if self.aborting.load(Ordering::SeqCst) {
                        self.inner.apply(mapper.cancel());
                        return Ok(());
                    }
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

    /// Ends the session: aborts a running turn, closes the CLI (killed if it does not exit
    /// in time) and refuses further sends. Idempotent.
    pub async fn close(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        if self.turn_running() {
            let _ = self.abort().await;
        }
        refuse_all(&self.inner);
        self.stop_watcher().await;
        if let Some(cli) = self.cli.lock().await.take() {
            close_cli(cli).await;
        }
    }
}

/// Closes a CLI the session no longer uses: gracefully when this was its last holder, by
/// killing its group otherwise (a callback task may still hold it briefly).
async fn close_cli(cli: Arc<ClaudeSession>) {
    match Arc::try_unwrap(cli) {
        Ok(cli) => {
            let _ = cli.close().await;
        }
        Err(shared) => shared.kill(),
    }
}

/// Whether a frame shows a turn going on: its content, or the CLI saying it is running.
fn shows_a_turn(f: &Frame) -> bool {
    matches!(
        f.kind,
        FrameKind::Assistant | FrameKind::StreamEvent | FrameKind::Result
    ) || (f.raw.get("subtype").and_then(Value::as_str) == Some("session_state_changed")
        && f.raw.get("state").and_then(Value::as_str) == Some("running"))
}

/// A turn Claude Code started on its own (after a background task finished, say), given the
/// frames read so far: it becomes a turn of its own with a system-notification message, read
/// to its end. The caller holds the turn lock. Frames that show no turn are dropped.
async fn adopt(inner: &Inner, cli: &ClaudeSession, waiting: Vec<Result<Frame, SessionError>>) {
    if !waiting.iter().any(|i| i.as_ref().is_ok_and(shows_a_turn)) {
        return;
    }
    let text = waiting
        .iter()
        .filter_map(|i| i.as_ref().ok())
        .find(|f| f.raw.get("subtype").and_then(Value::as_str) == Some("task_notification"))
        .map(|f| {
            let what = f
                .raw
                .get("summary")
                .or_else(|| f.raw.get("description"))
                .and_then(Value::as_str)
                .unwrap_or("a background task");
            let status = f
                .raw
                .get("status")
                .and_then(Value::as_str)
                .unwrap_or("finished");
            format!("{what} {status}")
        })
        .unwrap_or_else(|| "Claude Code continued on its own".to_owned());
    let number = inner.turns.fetch_add(1, Ordering::SeqCst) + 1;
    let turn_id = format!("turn-{number}");
    *lock(&inner.turn) = Some(turn_id.clone());
    let (mut mapper, started) = TurnMapper::start_from(&turn_id, &text, "systemNotification");
    inner.apply(started);
    let mut queue = waiting.into_iter();
    while !mapper.finished() {
        let item = match queue.next() {
            Some(i) => Some(i),
            None => tokio::time::timeout(Duration::from_secs(600), cli.recv_frame())
                .await
                .ok()
                .flatten(),
        };
        match item {
            Some(Ok(frame)) => inner.apply(mapper.map(&frame)),
            Some(Err(SessionError::Exited { .. })) | None => {
                inner.apply(mapper.fail("the Claude Code CLI went away"));
            }
            Some(Err(e)) => tracing::warn!(error = %e, "skipping a bad frame"),
        }
    }
    *lock(&inner.turn) = None;
    inner.changed.notify_waiters();
    tracing::info!(turn = %turn_id, "adopted a turn Claude Code started on its own");
}

/// Reads the CLI's frames while no turn of ours runs, so a turn Claude Code starts by itself
/// is shown as it happens. Stops when told (a send takes over the frames) or when the CLI is
/// gone; a frame read just as a send took the turn lock is handed to that send.
async fn watch_between_turns(inner: Arc<Inner>, cli: Arc<ClaudeSession>, stop: Arc<Notify>) {
    loop {
        // `recv_frame` is cancel-safe: stopping mid-wait loses no frame.
        let item = tokio::select! {
            biased;
            () = stop.notified() => return,
            item = cli.recv_frame() => item,
        };
        let Some(item) = item else { return };
        let gone = matches!(item, Err(SessionError::Exited { .. }));
        match inner.turn_lock.try_lock() {
            Err(_) => {
                lock(&inner.handoff).push_back(item);
                return;
            }
            Ok(_guard) => adopt(&inner, &cli, vec![item]).await,
        }
        if gone {
            return;
        }
    }
}
