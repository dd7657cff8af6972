//! The ACP connection: requests become commands to the host's sessions, and each session's
//! actions become `session/update`s.
//!
//! The crate's dispatch loop runs one handler at a time and waits for it, so no handler waits
//! on anything slow: work that takes a session's time (starting, loading, a settings round trip)
//! runs in a task that answers through its `Responder`, and a prompt's answer is sent by the
//! session's forwarder when the turn ends. Requests to the editor (permissions, questions)
//! are sent from tasks too, since their answers come back through the same loop.

use crate::AcpOptions;
use crate::config;
use crate::prompt::{self, PromptError};
use crate::updates::UpdateMapper;
use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, AuthMethod, AuthMethodAgent, AuthenticateRequest, AuthenticateResponse,
    AvailableCommand, AvailableCommandInput, AvailableCommandsUpdate, CancelNotification,
    ClientCapabilities, CloseSessionRequest, CloseSessionResponse, CreateElicitationRequest,
    DeleteSessionRequest, DeleteSessionResponse, ElicitationMode, ElicitationRequestScope,
    ElicitationScope, ElicitationUrlMode, ForkSessionRequest, ForkSessionResponse, Implementation,
    InitializeRequest, InitializeResponse, ListSessionsRequest, ListSessionsResponse,
    LoadSessionRequest, LoadSessionResponse, McpCapabilities, McpServer, NewSessionRequest,
    NewSessionResponse, PermissionOption, PermissionOptionKind, PromptCapabilities, PromptRequest,
    PromptResponse, RequestPermissionOutcome, RequestPermissionRequest, ResumeSessionRequest,
    ResumeSessionResponse, SessionCapabilities, SessionCloseCapabilities,
    SessionDeleteCapabilities, SessionForkCapabilities, SessionInfo, SessionListCapabilities,
    SessionNotification, SessionResumeCapabilities, SessionUpdate, SetSessionConfigOptionRequest,
    SetSessionConfigOptionResponse, SetSessionModeRequest, SetSessionModeResponse, StopReason,
    UnstructuredCommandInput,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Client, Error, JsonRpcResponse};
use ahp_types::actions::{ActionOrigin, ChatTurnStartedAction, StateAction};
use ahp_types::state::{Message, MessageOrigin, SessionConfigState};
use claude_host_agent::{
    Agent, ChannelKind, ChatSessionError, Confirmation, NewSession, SessionEvent, SessionHandle,
    SessionSubscription, trace,
};
use claude_host_protocol::log_safe::Safe;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;
use tokio::task::AbortHandle;

/// The sign-in method `authenticate` runs.
pub const GITHUB_SIGN_IN: &str = "github";

/// A `session/prompt` waiting for its turn to end.
struct PendingPrompt {
    turn_id: String,
    responder: Responder<PromptResponse>,
}

/// A session this connection has open.
struct Open {
    handle: SessionHandle,
    prompt: Mutex<Option<PendingPrompt>>,
}

/// The connection's state; handlers hold it through an `Arc`.
pub(crate) struct Server {
    agent: Arc<Agent>,
    version: String,
    sign_in: Arc<dyn crate::SignIn>,
    deleter: Arc<dyn crate::SessionDeleter>,
    /// True once session set-up may go on (see `AcpOptions::before_sessions`).
    ready: watch::Receiver<bool>,
    client_id: String,
    client_seq: AtomicI64,
    client: Mutex<ClientCapabilities>,
    /// Sessions by ACP session id, each with its forwarder task.
    open: Mutex<HashMap<String, (Arc<Open>, AbortHandle)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these short locks leaves a consistent map.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The answers to requests that open a session, which show its modes and config options.
trait ShowsSettings: Sized {
    /// The answer with the session's settings (`None`: the session has none yet).
    fn settings(self, config: Option<&SessionConfigState>) -> Self;
}

macro_rules! shows_settings {
    ($($response:ty),*) => {$(
        impl ShowsSettings for $response {
            fn settings(self, config: Option<&SessionConfigState>) -> Self {
                match config {
                    Some(c) => self.modes(config::modes(c)).config_options(config::options(c)),
                    None => self,
                }
            }
        }
    )*};
}

shows_settings!(
    NewSessionResponse,
    LoadSessionResponse,
    ResumeSessionResponse,
    ForkSessionResponse
);

/// JSON-RPC "invalid params" with a reason.
fn invalid(reason: impl Into<String>) -> Error {
    Error::invalid_params().data(Value::String(reason.into()))
}

fn internal(reason: impl Into<String>) -> Error {
    Error::internal_error().data(Value::String(reason.into()))
}

/// An agent error in ACP's shape: a session another host holds, or whose lease cannot be
/// taken, says so with who holds it (or which database) in `data`.
fn agent_error(e: claude_host_agent::AgentError) -> Error {
    use claude_host_agent::AgentError;
    match &e {
        AgentError::Held {
            holder,
            since,
            expires,
            ..
        } => Error::internal_error().data(serde_json::json!({
            "message": e.to_string(), "heldBy": holder, "since": since, "expires": expires
        })),
        AgentError::LeaseUnavailable { database, .. } => {
            Error::internal_error().data(serde_json::json!({
                "message": e.to_string(), "leaseUnavailable": true, "database": database
            }))
        }
        _ => internal(e.to_string()),
    }
}

fn session_error(e: &ChatSessionError) -> Error {
    match e {
        ChatSessionError::Refused(r) => invalid(r.clone()),
        ChatSessionError::NotPending(_) => invalid(e.to_string()),
        other => internal(other.to_string()),
    }
}

/// Sends an update; a closed connection is not this session's error.
fn notify(cx: &ConnectionTo<Client>, session_id: &str, update: SessionUpdate) {
    if let Err(e) = cx.send_notification(SessionNotification::new(session_id.to_owned(), update)) {
        tracing::debug!(error = %e, "cannot send a session update");
    }
}

impl Server {
    pub(crate) fn new(agent: Arc<Agent>, options: AcpOptions) -> Server {
        let (done, ready) = watch::channel(options.before_sessions.is_none());
        if let Some(work) = options.before_sessions {
            // Started now, in a task of its own, so it runs while the editor initializes.
            tokio::spawn(async move {
                work.await;
                let _ = done.send(true);
            });
        }
        Server {
            agent,
            version: options.version,
            sign_in: options.sign_in,
            deleter: options.deleter,
            ready,
            client_id: format!("acp-{}", std::process::id()),
            client_seq: AtomicI64::new(0),
            client: Mutex::new(ClientCapabilities::default()),
            open: Mutex::new(HashMap::new()),
        }
    }

    /// Waits until sessions may be set up (a check begun at start has finished).
    async fn wait_ready(&self) {
        let mut ready = self.ready.clone();
        let _ = ready.wait_for(|r| *r).await;
    }

    fn session(&self, id: &str) -> Result<Arc<Open>, Error> {
        lock(&self.open)
            .get(id)
            .map(|(o, _)| o.clone())
            .ok_or_else(|| {
                invalid(format!(
                    "unknown session {id}: create it with session/new or open it with session/load"
                ))
            })
    }

    /// Stops every forwarder and closes every session (the connection ended).
    pub(crate) async fn shut_down(&self) {
        let open: Vec<(Arc<Open>, AbortHandle)> =
            lock(&self.open).drain().map(|(_, v)| v).collect();
        for (o, forwarder) in open {
            forwarder.abort();
            o.handle.close().await;
        }
        self.agent.shutdown().await;
    }

    pub(crate) fn initialize(
        &self,
        req: InitializeRequest,
        responder: Responder<InitializeResponse>,
    ) -> Result<(), Error> {
        *lock(&self.client) = req.client_capabilities.clone();
        let sessions = SessionCapabilities::new()
            .list(SessionListCapabilities::new())
            .resume(SessionResumeCapabilities::new())
            .close(SessionCloseCapabilities::new())
            .delete(SessionDeleteCapabilities::new())
            .fork(SessionForkCapabilities::new());
        let capabilities = AgentCapabilities::new()
            .load_session(true)
            .prompt_capabilities(PromptCapabilities::new().image(true).embedded_context(true))
            .mcp_capabilities(McpCapabilities::new().http(true).sse(true))
            .session_capabilities(sessions);
        let description = match self.sign_in.signed_in() {
            Some(who) if !who.is_empty() => format!("Already signed in as {who}; nothing to do."),
            Some(_) => "Already signed in; nothing to do.".to_owned(),
            None => {
                "Sign in with GitHub (device code) to use Claude on your Copilot plan.".to_owned()
            }
        };
        let methods = vec![AuthMethod::Agent(
            AuthMethodAgent::new(GITHUB_SIGN_IN, "GitHub Copilot").description(description),
        )];
        responder.respond(
            InitializeResponse::new(ProtocolVersion::V1)
                .agent_capabilities(capabilities)
                .agent_info(
                    Implementation::new("claude-host", self.version.clone())
                        .title("Claude (claude-host)"),
                )
                .auth_methods(methods),
        )
    }

    pub(crate) async fn authenticate(
        self: Arc<Self>,
        req: AuthenticateRequest,
        responder: Responder<AuthenticateResponse>,
        cx: ConnectionTo<Client>,
    ) {
        // A stored credential counts once the upstream has taken it.
        self.wait_ready().await;
        let result = if &*req.method_id.0 != GITHUB_SIGN_IN {
            Err(invalid(format!(
                "unknown authentication method {:?}; this agent offers {GITHUB_SIGN_IN:?}",
                req.method_id.0
            )))
        } else if self.agent.is_authenticated() {
            Ok(())
        } else {
            let request_id = responder.id().clone();
            self.sign_in(&cx, request_id).await
        };
        let _ = match result {
            Ok(()) => responder.respond(AuthenticateResponse::new()),
            Err(e) => responder.respond_with_error(e),
        };
    }

    async fn sign_in(
        &self,
        cx: &ConnectionTo<Client>,
        request_id: agent_client_protocol::v1::schema::RequestId,
    ) -> Result<(), Error> {
        let flow = self
            .sign_in
            .start()
            .await
            .map_err(|e| internal(format!("cannot start the GitHub sign-in: {e}")))?;
        let message = format!(
            "To sign in, open {} and enter the code {}",
            flow.verification_uri, flow.user_code
        );
        // Shown in the editor when it can open a link for the user; always in the log, which
        // editors show for their agents.
        tracing::warn!("{message}");
        let url_elicitation = lock(&self.client)
            .elicitation
            .as_ref()
            .is_some_and(|e| e.url.is_some());
        if url_elicitation {
            let mode = ElicitationUrlMode::new(
                ElicitationScope::Request(ElicitationRequestScope::new(request_id)),
                format!("github-sign-in-{}", std::process::id()),
                flow.verification_uri.clone(),
            );
            let request = CreateElicitationRequest::new(ElicitationMode::Url(mode), message);
            // The editor's answer says only that the user saw it; GitHub says when it is done.
            let pending = cx.send_request(request);
            tokio::spawn(async move {
                if let Err(e) = pending.block_task().await {
                    tracing::debug!(error = %e, "the editor did not show the sign-in link");
                }
            });
        }
        let token = flow
            .finish
            .await
            .map_err(|e| Error::auth_required().data(Value::String(e)))?;
        self.agent
            .authenticate(claude_host_agent::GITHUB_RESOURCE, &token)
            .await
            .map_err(|e| internal(e.to_string()))?;
        Ok(())
    }

    /// Context windows of the models the upstream offers, for usage updates.
    async fn windows(&self) -> HashMap<String, u64> {
        self.agent
            .models()
            .await
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| Some((m.id, u64::try_from(m.max_context_window?).ok()?)))
            .collect()
    }

    pub(crate) async fn new_session(
        self: Arc<Self>,
        req: NewSessionRequest,
        responder: Responder<NewSessionResponse>,
        cx: ConnectionTo<Client>,
    ) {
        let result = async {
            self.wait_ready().await;
            if !self.agent.is_authenticated() {
                // ACP's own code for it: the editor offers the auth methods and retries.
                return Err(Error::auth_required().data(Value::String(format!(
                    "sign in first: authenticate with {GITHUB_SIGN_IN:?} (or run `claude-host login`)"
                ))));
            }
            if !req.cwd.is_absolute() {
                return Err(invalid(format!(
                    "cwd must be an absolute path, not {}",
                    req.cwd.display()
                )));
            }
            let mut dirs = vec![req.cwd.clone()];
            dirs.extend(req.additional_directories.iter().cloned());
            let handle = self
                .agent
                .create_session(NewSession {
                    working_directories: dirs,
                    ..Default::default()
                })
                .await
                .map_err(agent_error)?;
            let config = self.attach(&handle, &req.mcp_servers, &cx, false).await?;
            Ok((handle, config))
        }
        .await;
        let id = result
            .as_ref()
            .map(|(h, _)| h.id().to_owned())
            .unwrap_or_default();
        let answer = result.map(|(handle, config)| {
            NewSessionResponse::new(handle.id().to_owned()).settings(config.as_ref())
        });
        self.answer_opened(&id, responder, answer, cx);
    }

    /// Opens a session the host knows (`replay`: show its history first).
    pub(crate) async fn open_session(
        self: Arc<Self>,
        id: String,
        mcp: Vec<McpServer>,
        replay: bool,
        cx: ConnectionTo<Client>,
    ) -> Result<Option<SessionConfigState>, Error> {
        self.wait_ready().await;
        if let Ok(open) = self.session(&id) {
            // Already open on this connection: nothing to start, but a load still shows it.
            if !replay {
                let session = open
                    .handle
                    .session_state()
                    .await
                    .map_err(|e| session_error(&e))?;
                return Ok(session.config);
            }
            let snapshot = open
                .handle
                .snapshot()
                .await
                .map_err(|e| session_error(&e))?;
            let mut m = UpdateMapper::new(
                snapshot.session.config.clone(),
                self.windows().await,
                open.handle.cwd(),
            );
            for u in m.replay(&snapshot.chat, &snapshot.subagents) {
                notify(&cx, &id, u);
            }
            return Ok(snapshot.session.config);
        }
        let handle = self.agent.open_session(&id).await.map_err(|e| match e {
            claude_host_agent::AgentError::UnknownSession(_) => {
                invalid(format!("unknown session {id}"))
            }
            other => agent_error(other),
        })?;
        self.attach(&handle, &mcp, &cx, replay).await
    }

    /// Starts forwarding a session's updates to the editor (after its history, when
    /// `replay`), and gives it the editor's MCP servers.
    async fn attach(
        &self,
        handle: &SessionHandle,
        mcp: &[McpServer],
        cx: &ConnectionTo<Client>,
        replay: bool,
    ) -> Result<Option<SessionConfigState>, Error> {
        if !mcp.is_empty() {
            let servers = mcp_config(mcp)?;
            handle
                .update_options(move |o| o.mcp_config = Some(servers))
                .await
                .map_err(|e| session_error(&e))?;
        }
        let id = handle.id().to_owned();
        // Only a replay needs the chats; a long session's are megabytes to copy.
        let (session, chats, sub) = if replay {
            let (s, sub) = handle.subscribe().await.map_err(|e| session_error(&e))?;
            (s.session, Some((s.chat, s.subagents)), sub)
        } else {
            let (s, sub) = handle
                .subscribe_session()
                .await
                .map_err(|e| session_error(&e))?;
            (s, None, sub)
        };
        let mut mapper =
            UpdateMapper::new(session.config.clone(), self.windows().await, handle.cwd());
        if let Some((chat, subagents)) = chats {
            for u in mapper.replay(&chat, &subagents) {
                notify(cx, &id, u);
            }
        }
        let config = session.config;
        let open = Arc::new(Open {
            handle: handle.clone(),
            prompt: Mutex::new(None),
        });
        // Questions go to the editor as one form where it can show forms.
        let forms = lock(&self.client)
            .elicitation
            .as_ref()
            .is_some_and(|e| e.form.is_some());
        let forwarder = tokio::spawn(forward(open.clone(), sub, mapper, forms, cx.clone()));
        let previous = lock(&self.open).insert(id, (open, forwarder.abort_handle()));
        if let Some((_, f)) = previous {
            f.abort();
        }
        Ok(config)
    }

    /// After a session is open: start its CLI before the first prompt needs it, then tell the
    /// editor the commands it offers.
    fn after_open(&self, handle: SessionHandle, cx: ConnectionTo<Client>) {
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let warmed = handle.warm().await;
            tracing::debug!(session = %handle.id(), ms = started.elapsed().as_millis(), "the session's CLI is ready");
            if let Err(e) = warmed {
                tracing::warn!(session = %handle.id(), error = %e, "cannot start the session's CLI ahead of its first prompt");
                return;
            }
            let commands: Vec<AvailableCommand> = handle
                .slash_commands()
                .await
                .into_iter()
                .map(|c| {
                    let mut a = AvailableCommand::new(c.name, c.description);
                    if !c.argument_hint.is_empty() {
                        a = a.input(AvailableCommandInput::Unstructured(
                            UnstructuredCommandInput::new(c.argument_hint),
                        ));
                    }
                    a
                })
                .collect();
            notify(
                &cx,
                handle.id(),
                SessionUpdate::AvailableCommandsUpdate(AvailableCommandsUpdate::new(commands)),
            );
        });
    }

    pub(crate) async fn load_session(
        self: Arc<Self>,
        req: LoadSessionRequest,
        responder: Responder<LoadSessionResponse>,
        cx: ConnectionTo<Client>,
    ) {
        let id = req.session_id.0.to_string();
        let opened = self
            .clone()
            .open_session(id.clone(), req.mcp_servers, true, cx.clone())
            .await;
        let answer = opened.map(|config| LoadSessionResponse::new().settings(config.as_ref()));
        self.answer_opened(&id, responder, answer, cx);
    }

    pub(crate) async fn resume_session(
        self: Arc<Self>,
        req: ResumeSessionRequest,
        responder: Responder<ResumeSessionResponse>,
        cx: ConnectionTo<Client>,
    ) {
        let id = req.session_id.0.to_string();
        let opened = self
            .clone()
            .open_session(id.clone(), req.mcp_servers, false, cx.clone())
            .await;
        let answer = opened.map(|config| ResumeSessionResponse::new().settings(config.as_ref()));
        self.answer_opened(&id, responder, answer, cx);
    }

    /// Answers a request that opened session `id`, then gets its CLI going.
    fn answer_opened<T: JsonRpcResponse>(
        &self,
        id: &str,
        responder: Responder<T>,
        answer: Result<T, Error>,
        cx: ConnectionTo<Client>,
    ) {
        match answer {
            Ok(r) => {
                let _ = responder.respond(r);
                if let Ok(open) = self.session(id) {
                    self.after_open(open.handle.clone(), cx);
                }
            }
            Err(e) => {
                let _ = responder.respond_with_error(e);
            }
        }
    }

    /// `session/fork` (unstable): a new session with the whole conversation so far.
    pub(crate) async fn fork_session(
        self: Arc<Self>,
        req: ForkSessionRequest,
        responder: Responder<ForkSessionResponse>,
        cx: ConnectionTo<Client>,
    ) {
        let source = req.session_id.0.to_string();
        self.wait_ready().await;
        let result = async {
            let turns = match self.session(&source) {
                Ok(open) => open.handle.state().await.turns.len(),
                Err(_) => {
                    let h = self
                        .agent
                        .open_session(&source)
                        .await
                        .map_err(|e| invalid(format!("cannot fork session {source}: {e}")))?;
                    h.state().await.turns.len()
                }
            };
            let fork = self
                .agent
                .fork_session(&source, turns)
                .await
                .map_err(|e| internal(format!("cannot fork session {source}: {e}")))?;
            let config = self.attach(&fork, &req.mcp_servers, &cx, false).await?;
            Ok::<_, Error>((fork, config))
        }
        .await;
        let id = result
            .as_ref()
            .map(|(f, _)| f.id().to_owned())
            .unwrap_or_default();
        let answer = result.map(|(fork, config)| {
            ForkSessionResponse::new(fork.id().to_owned()).settings(config.as_ref())
        });
        self.answer_opened(&id, responder, answer, cx);
    }

    pub(crate) async fn list_sessions(
        self: Arc<Self>,
        req: ListSessionsRequest,
        responder: Responder<ListSessionsResponse>,
        _cx: ConnectionTo<Client>,
    ) {
        self.wait_ready().await;
        let sessions: Vec<SessionInfo> = self
            .agent
            .list_sessions()
            .await
            .into_iter()
            .filter_map(|s| {
                let cwd = PathBuf::from(s.cwd?);
                if req.cwd.as_ref().is_some_and(|want| *want != cwd) {
                    return None;
                }
                let mut info = SessionInfo::new(s.id, cwd);
                if !s.title.is_empty() {
                    info = info.title(s.title);
                }
                if s.modified_at > 0 {
                    info = info.updated_at(claude_host_protocol::time::rfc3339_from_millis(
                        s.modified_at,
                    ));
                }
                Some(info)
            })
            .collect();
        let _ = responder.respond(ListSessionsResponse::new(sessions));
    }

    /// Closes a session this connection has open; false when it has none by that id.
    async fn close(&self, id: &str) -> bool {
        let Some((open, forwarder)) = lock(&self.open).remove(id) else {
            return false;
        };
        forwarder.abort();
        if let Some(p) = lock(&open.prompt).take() {
            let _ = p
                .responder
                .respond(PromptResponse::new(StopReason::Cancelled));
        }
        if self.agent.dispose_session(id).await.is_err() {
            open.handle.close().await;
        }
        true
    }

    pub(crate) async fn close_session(
        self: Arc<Self>,
        req: CloseSessionRequest,
        responder: Responder<CloseSessionResponse>,
        _cx: ConnectionTo<Client>,
    ) {
        let id = req.session_id.0.to_string();
        if self.close(&id).await {
            let _ = responder.respond(CloseSessionResponse::new());
        } else {
            let _ = responder.respond_with_error(invalid(format!(
                "session {id} is not open on this connection"
            )));
        }
    }

    pub(crate) async fn delete_session(
        self: Arc<Self>,
        req: DeleteSessionRequest,
        responder: Responder<DeleteSessionResponse>,
        _cx: ConnectionTo<Client>,
    ) {
        let id = req.session_id.0.to_string();
        self.close(&id).await;
        let _ = match self.deleter.delete(&id).await {
            Ok(()) => responder.respond(DeleteSessionResponse::new()),
            Err(e) => responder.respond_with_error(invalid(e)),
        };
    }

    pub(crate) async fn set_mode(
        self: Arc<Self>,
        req: SetSessionModeRequest,
        responder: Responder<SetSessionModeResponse>,
        _cx: ConnectionTo<Client>,
    ) {
        let result = async {
            let open = self.session(&req.session_id.0)?;
            open.handle
                .set_permission_mode(&req.mode_id.0)
                .await
                .map_err(|e| session_error(&e))
        }
        .await;
        let _ = match result {
            Ok(()) => responder.respond(SetSessionModeResponse::new()),
            Err(e) => responder.respond_with_error(e),
        };
    }

    pub(crate) async fn set_config_option(
        self: Arc<Self>,
        req: SetSessionConfigOptionRequest,
        responder: Responder<SetSessionConfigOptionResponse>,
        _cx: ConnectionTo<Client>,
    ) {
        let result = async {
            let open = self.session(&req.session_id.0)?;
            let key = config::key_of(&req.config_id.0).ok_or_else(|| {
                invalid(format!(
                    "unknown config option {:?}: the session offers model, effort and mode",
                    &*req.config_id.0
                ))
            })?;
            let value = match req.value.as_value_id() {
                Some(v) => Value::String(v.0.to_string()),
                None => {
                    return Err(invalid(format!("{key} takes one of its listed values")));
                }
            };
            let mut values = serde_json::Map::new();
            values.insert(key.to_owned(), value);
            open.handle
                .configure(values)
                .await
                .map_err(|e| session_error(&e))?;
            let session = open
                .handle
                .session_state()
                .await
                .map_err(|e| session_error(&e))?;
            Ok(session
                .config
                .as_ref()
                .map(config::options)
                .unwrap_or_default())
        }
        .await;
        let _ = match result {
            Ok(options) => responder.respond(SetSessionConfigOptionResponse::new(options)),
            Err(e) => responder.respond_with_error(e),
        };
    }

    /// Starts a turn; its answer is sent when the turn ends.
    pub(crate) async fn prompt(
        &self,
        req: PromptRequest,
        responder: Responder<PromptResponse>,
    ) -> Result<(), Error> {
        trace::mark(trace::ACP_PROMPT, trace::key_of(&req.session_id.0));
        let open = match self.session(&req.session_id.0) {
            Ok(o) => o,
            Err(e) => return responder.respond_with_error(e),
        };
        let built = match prompt::build(&req.prompt) {
            Ok(p) => p,
            Err(e @ (PromptError::Empty | PromptError::Unsupported(_))) => {
                return responder.respond_with_error(invalid(e.to_string()));
            }
        };
        // The durable form: a restored session names the turn the same.
        let turn_id = claude_host_agent::restore::new_turn_id();
        {
            let mut slot = lock(&open.prompt);
            if slot.is_some() || open.handle.turn_running() {
                drop(slot);
                return responder.respond_with_error(invalid(
                    "a prompt is already running in this session; cancel it or wait for its answer",
                ));
            }
            *slot = Some(PendingPrompt {
                turn_id: turn_id.clone(),
                responder,
            });
        }
        let action = StateAction::ChatTurnStarted(ChatTurnStartedAction {
            turn_id: turn_id.clone(),
            started_at: claude_host_protocol::time::now_rfc3339(),
            message: Message {
                text: built.text,
                origin: MessageOrigin {
                    kind: ahp_types::state::MessageKind::User,
                },
                agent: None,
                attachments: None,
                model: None,
                meta: None,
            },
            queued_message_id: None,
            meta: None,
        });
        let origin = ActionOrigin {
            client_id: self.client_id.clone(),
            client_seq: self.client_seq.fetch_add(1, Ordering::Relaxed) + 1,
        };
        if let Err(e) = open
            .handle
            .dispatch_with_content(ChannelKind::Chat, action, origin, Some(built.content))
            .await
            && let Some(p) = lock(&open.prompt).take()
        {
            return p.responder.respond_with_error(session_error(&e));
        }
        Ok(())
    }

    pub(crate) async fn cancel(&self, n: CancelNotification) {
        let Ok(open) = self.session(&n.session_id.0) else {
            tracing::info!(session = %Safe(&n.session_id.0), "session/cancel for a session that is not open");
            return;
        };
        if let Err(e) = open.handle.abort().await {
            tracing::warn!(error = %e, "cannot cancel the turn");
        }
    }
}

/// The editor's MCP servers in the CLI's `--mcp-config` form.
fn mcp_config(servers: &[McpServer]) -> Result<Value, Error> {
    let mut map = serde_json::Map::new();
    for s in servers {
        let (name, entry) = match s {
            McpServer::Stdio(s) => {
                let env: serde_json::Map<String, Value> = s
                    .env
                    .iter()
                    .map(|e| (e.name.clone(), Value::String(e.value.clone())))
                    .collect();
                (
                    s.name.clone(),
                    json!({"type": "stdio", "command": s.command, "args": s.args, "env": env}),
                )
            }
            McpServer::Http(h) => (h.name.clone(), remote("http", &h.url, &h.headers)),
            McpServer::Sse(h) => (h.name.clone(), remote("sse", &h.url, &h.headers)),
            _ => return Err(invalid("this MCP server transport is not supported")),
        };
        if name.is_empty() {
            return Err(invalid("every MCP server needs a name"));
        }
        map.insert(name, entry);
    }
    Ok(json!({"mcpServers": map}))
}

fn remote(
    kind: &str,
    url: &str,
    headers: &[agent_client_protocol::v1::schema::HttpHeader],
) -> Value {
    let h: serde_json::Map<String, Value> = headers
        .iter()
        .map(|h| (h.name.clone(), Value::String(h.value.clone())))
        .collect();
    json!({"type": kind, "url": url, "headers": h})
}

/// Ends the pending prompt if `turn_id` is its turn.
fn end_prompt(open: &Open, turn_id: &str, end: Result<StopReason, Error>) {
    let mut slot = lock(&open.prompt);
    if slot.as_ref().is_some_and(|p| p.turn_id == turn_id)
        && let Some(p) = slot.take()
    {
        drop(slot);
        let _ = match end {
            Ok(reason) => p.responder.respond(PromptResponse::new(reason)),
            Err(e) => p.responder.respond_with_error(e),
        };
    }
}

/// Forwards one session's actions to the editor until the session ends or the connection
/// closes it.
async fn forward(
    open: Arc<Open>,
    mut sub: SessionSubscription,
    mut mapper: UpdateMapper,
    forms: bool,
    cx: ConnectionTo<Client>,
) {
    let id = open.handle.id().to_owned();
    // Subagent chats by URI, each with a mapper of its own (tool ids are per chat).
    let mut subagents: HashMap<String, UpdateMapper> = HashMap::new();
    // The turn's first text is still to come (a latency mark, `trace`).
    let mut first_text = false;
    while let Some(event) = sub.recv().await {
        let published = match event {
            SessionEvent::Action(p) => p,
            SessionEvent::Resync(snapshot) => {
                // Fell behind: the updates in between are gone. Settings start over from the
                // state; a prompt whose turn ended meanwhile gets its answer.
                mapper.reset(snapshot.session.config.clone());
                let ended = lock(&open.prompt).as_ref().and_then(|p| {
                    snapshot
                        .chat
                        .turns
                        .iter()
                        .find(|t| t.id == p.turn_id)
                        .map(|t| (t.id.clone(), t.state))
                });
                if let Some((turn, state)) = ended {
                    let reason = match state {
                        ahp_types::state::TurnState::Cancelled => Ok(StopReason::Cancelled),
                        ahp_types::state::TurnState::Error => Err(internal("the turn failed")),
                        ahp_types::state::TurnState::Complete => Ok(StopReason::EndTurn),
                    };
                    end_prompt(&open, &turn, reason);
                }
                continue;
            }
        };
        let action = published.action();
        if let Some(reason) = &published.envelope.rejection_reason {
            if let StateAction::ChatTurnStarted(t) = action {
                end_prompt(&open, &t.turn_id, Err(invalid(reason.clone())));
            }
            continue;
        }
        let channel = published.channel();
        if channel != open.handle.chat_uri() && channel != open.handle.resource() {
            // A subagent's chat: its tool calls are shown under its call, and what it asks
            // the user is asked like the main chat's.
            let parent = crate::updates::subagent_parent(channel).to_owned();
            let sub = subagents
                .entry(channel.to_owned())
                .or_insert_with(|| UpdateMapper::new(None, HashMap::new(), open.handle.cwd()));
            for update in sub.on_action(action) {
                if let Some(u) = crate::updates::of_subagent(update, &parent) {
                    notify(&cx, &id, u);
                }
            }
            ask_user(&open, &id, sub, action, forms, &cx);
            continue;
        }
        if matches!(action, StateAction::ChatTurnStarted(_)) {
            first_text = true;
        }
        for update in mapper.on_action(action) {
            let text = matches!(update, SessionUpdate::AgentMessageChunk(_));
            notify(&cx, &id, update);
            if text && std::mem::take(&mut first_text) {
                trace::mark(trace::ACP_UPDATE, trace::key_of(&id));
            }
        }
        ask_user(&open, &id, &mapper, action, forms, &cx);
        match action {
            StateAction::ChatTurnComplete(t) => {
                end_prompt(&open, &t.turn_id, Ok(StopReason::EndTurn));
            }
            StateAction::ChatTurnCancelled(t) => {
                end_prompt(&open, &t.turn_id, Ok(StopReason::Cancelled));
            }
            StateAction::ChatError(e) => {
                let message = &e.part.error.message;
                end_prompt(&open, &e.turn_id, Err(internal(message.clone())));
            }
            _ => {}
        }
    }
    // The session ended under a running prompt (its CLI could not go on, or the host shut
    // down): the editor gets an answer rather than a wait.
    if let Some(p) = lock(&open.prompt).take() {
        let _ = p
            .responder
            .respond_with_error(internal("the session ended during the turn"));
    }
}

/// Asks the editor what an action waits for: a tool call's confirmation, or a question.
fn ask_user(
    open: &Open,
    session_id: &str,
    mapper: &UpdateMapper,
    action: &StateAction,
    forms: bool,
    cx: &ConnectionTo<Client>,
) {
    match action {
        StateAction::ChatToolCallReady(r) if r.confirmed.is_none() => {
            let request = permission_request(session_id, mapper, r);
            tokio::spawn(ask_permission(
                open.handle.clone(),
                r.tool_call_id.clone(),
                request,
                cx.clone(),
            ));
        }
        StateAction::ChatInputRequested(r) => {
            tokio::spawn(crate::questions::ask(
                open.handle.clone(),
                session_id.to_owned(),
                r.request.clone(),
                forms,
                cx.clone(),
            ));
        }
        _ => {}
    }
}

/// The editor's question for a tool call that waits for a confirmation.
fn permission_request(
    session_id: &str,
    mapper: &UpdateMapper,
    r: &ahp_types::actions::ChatToolCallReadyAction,
) -> RequestPermissionRequest {
    let tool = mapper.tool_name(&r.tool_call_id).unwrap_or_default();
    let input = crate::updates::input_value(r.tool_input.as_ref());
    let invocation = match &r.invocation_message {
        ahp_types::common::StringOrMarkdown::Plain(t) => t.clone(),
        ahp_types::common::StringOrMarkdown::Markdown { markdown } => markdown.clone(),
    };
    let call = crate::updates::ready(
        &r.tool_call_id,
        tool,
        &invocation,
        &input,
        false,
        mapper.cwd(),
    );
    let options = vec![
        PermissionOption::new(
            ALLOW_ALWAYS,
            "Always Allow",
            PermissionOptionKind::AllowAlways,
        ),
        PermissionOption::new(ALLOW, "Allow", PermissionOptionKind::AllowOnce),
        PermissionOption::new(REJECT, "Reject", PermissionOptionKind::RejectOnce),
    ];
    RequestPermissionRequest::new(session_id.to_owned(), call, options)
}

const ALLOW_ALWAYS: &str = "allow_always";
const ALLOW: &str = "allow";
const REJECT: &str = "reject";

async fn ask_permission(
    handle: SessionHandle,
    tool_call_id: String,
    request: RequestPermissionRequest,
    cx: ConnectionTo<Client>,
) {
    let decision = match cx.send_request(request).block_task().await {
        Ok(r) => match r.outcome {
            RequestPermissionOutcome::Selected(s) => match &*s.option_id.0 {
                ALLOW_ALWAYS => Confirmation::ApproveForSession,
                ALLOW => Confirmation::Approve,
                _ => Confirmation::Deny,
            },
            _ => Confirmation::Deny,
        },
        Err(e) => {
            tracing::info!(error = %e, "the editor did not answer a permission request; the tool call is denied");
            Confirmation::Deny
        }
    };
    if let Err(e) = handle.confirm_tool(&tool_call_id, decision).await {
        // Settled otherwise meanwhile (the turn was cancelled).
        tracing::debug!(error = %e, "a permission answer came after the call was settled");
    }
}
