//! The protocol side of the host: which channel a URI names, the commands clients send, and
//! the actions they dispatch. Session and chat channels are the agent's sessions themselves:
//! their state and their stream come from the session's task, never reduced again here.

use crate::resources::{self, Roots};
use crate::root::{ROOT, RootChannel};
use crate::rpc::{RpcError, code};
use ahp_types::actions::{
    ActionOrigin, RootActiveSessionsChangedAction, RootAgentsChangedAction, StateAction,
};
use ahp_types::commands::{
    CompletionItem, CompletionsParams, CompletionsResult, ContentEncoding, Implementation,
    InitializeResult, ListSessionsResult, ResolveSessionConfigResult, ResourceReadResult,
    SessionConfigCompletionsResult, SessionConfigValueItem,
};
use ahp_types::common::JsonObject;
use ahp_types::notifications::{
    SessionAddedParams, SessionRemovedParams, SessionSummaryChangedParams,
};
use ahp_types::state::{
    Message, MessageAttachment, MessageResourceAttachment, RootState, SessionSummary,
    SimpleMessageAttachment, Snapshot, SnapshotState,
};
use claude_host_agent::outbox::Replay;
use claude_host_agent::{
    AHP_SESSION_PREFIX, Agent, AgentError, CLAUDE_SESSION_PREFIX, ChannelCopy, ChannelKind,
    ChannelWant, NewSession, Published, SessionHandle, SessionNotice,
};
use claude_host_protocol::log_safe::Safe;
use claude_host_protocol::time::{now_rfc3339, rfc3339_from_millis};
use claude_host_protocol::uri::{file_path, file_uri};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::broadcast;

/// Session status bits (`SessionStatus`).
mod status {
    pub const IDLE: u32 = 1;
    pub const IS_ARCHIVED: u32 = 64;
    pub const IS_READ: u32 = 32;
}

/// Sessions `listSessions` returns when the client gives no limit (VS Code never pages).
const DEFAULT_LIST_LIMIT: usize = 10_000;

/// How the host behaves.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Actions the root channel keeps for `reconnect` (sessions keep the agent's number).
    pub replay_buffer: usize,
    /// Suggested directory for remote browsing (`defaultDirectory`).
    pub default_directory: Option<PathBuf>,
    /// The newest completed turns a chat's snapshot holds for a client that asks for no
    /// window (`view.turns`), behind a first turn that says how many are left out; `None`:
    /// every turn. VS Code asks for none and takes ~16 ms a turn to open a chat, so a
    /// 3,600-turn session froze it for a minute (docs/AHP.md, "Long sessions").
    pub chat_turns: Option<usize>,
}

/// [`HostConfig::chat_turns`] unless set otherwise.
pub const DEFAULT_CHAT_TURNS: usize = 100;

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            replay_buffer: 4096,
            default_directory: None,
            chat_turns: Some(DEFAULT_CHAT_TURNS),
        }
    }
}

fn agent_error(e: AgentError) -> RpcError {
    match e {
        AgentError::AuthRequired { resources } => RpcError::new(
            code::AUTH_REQUIRED,
            "sign in with GitHub first (authenticate)",
        )
        .with_data(json!({ "resources": resources })),
        AgentError::AuthFailed(e) => RpcError::new(
            code::AUTH_REQUIRED,
            format!("the GitHub token was not accepted: {e}"),
        ),
        AgentError::UnknownSession(s) => {
            RpcError::new(code::SESSION_NOT_FOUND, format!("no session {s}"))
        }
        AgentError::SessionExists(s) => {
            RpcError::new(code::SESSION_ALREADY_EXISTS, format!("session {s} exists"))
        }
        AgentError::Held {
            ref holder,
            ref since,
            ref expires,
            ..
        } => {
            let data = json!({ "heldBy": holder, "since": since, "expires": expires });
            RpcError::new(code::PERMISSION_DENIED, e.to_string()).with_data(data)
        }
        AgentError::LeaseUnavailable { ref database, .. } => {
            let data = json!({ "leaseUnavailable": true, "database": database });
            RpcError::new(code::PERMISSION_DENIED, e.to_string()).with_data(data)
        }
        e @ (AgentError::UnknownModel { .. } | AgentError::Invalid(_)) => {
            RpcError::invalid_params(e.to_string())
        }
        other => RpcError::new(code::INTERNAL_ERROR, other.to_string()),
    }
}

fn parse<T: serde::de::DeserializeOwned>(params: &Value) -> Result<T, RpcError> {
    crate::rpc::from_params(params.clone())
}

fn str_param<'a>(params: &'a Value, key: &str) -> Result<&'a str, RpcError> {
    params
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params(format!("missing string param `{key}`")))
}

/// What a channel URI names.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// `ahp-root://`.
    Root,
    /// A session's session or chat channel.
    Session(SessionHandle, ChannelKind),
}

/// The protocol host.
pub struct Host {
    agent: Arc<Agent>,
    config: HostConfig,
    root: Arc<RootChannel>,
    /// Root notifications (`root/sessionAdded`, …), already serialized.
    notifications: broadcast::Sender<Arc<str>>,
    notice_pump: tokio::task::JoinHandle<()>,
    // Client ids seen by `initialize` since this host started; `reconnect` from any other
    // (after a restart) gets -32008 so the client initializes again. One insert or lookup
    // per handshake, never held across an await.
    clients: std::sync::Mutex<std::collections::HashSet<String>>,
    // Sessions being created, by session id: a `subscribe` that overtakes its
    // `createSession` waits for it instead of finding nothing. One insert or removal at a
    // time, never held across an await.
    creating: std::sync::Mutex<HashMap<String, tokio::sync::watch::Sender<bool>>>,
}

impl Host {
    /// A host serving `agent`.
    pub async fn new(agent: Arc<Agent>, config: HostConfig) -> Arc<Host> {
        let root_state = RootState {
            agents: vec![agent.info().await],
            active_sessions: Some(0),
            terminals: None,
            config: None,
            meta: None,
        };
        let root = Arc::new(RootChannel::new(
            root_state,
            agent.sequence().clone(),
            config.replay_buffer,
        ));
        let (notifications, _) = broadcast::channel(1024);
        let notice_pump = tokio::spawn(pump_notices(
            agent.clone(),
            agent.notices(),
            root.clone(),
            notifications.clone(),
        ));
        Arc::new(Host {
            agent,
            config,
            root,
            notifications,
            notice_pump,
            clients: std::sync::Mutex::default(),
            creating: std::sync::Mutex::default(),
        })
    }

    /// The agent.
    pub fn agent(&self) -> &Arc<Agent> {
        &self.agent
    }

    /// Remembers a client that initialized, for its later `reconnect`s.
    pub(crate) fn remember_client(&self, client_id: &str) {
        self.clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(client_id.to_owned());
    }

    /// Whether a client can resume with `reconnect`: it initialized with this host (not one
    /// before a restart) and has not seen numbers this host has not handed out.
    pub(crate) fn can_resume(&self, client_id: &str, last_seen: u64) -> bool {
        last_seen <= self.server_seq()
            && self
                .clients
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .contains(client_id)
    }

    /// The current `serverSeq`.
    pub fn server_seq(&self) -> u64 {
        self.agent.sequence().current()
    }

    /// Root notifications.
    pub(crate) fn notifications(&self) -> broadcast::Receiver<Arc<str>> {
        self.notifications.subscribe()
    }

    /// What a channel URI names; a known session that is not live is restored.
    pub(crate) async fn target(&self, uri: &str) -> Result<Target, RpcError> {
        if uri == ROOT {
            return Ok(Target::Root);
        }
        if let Some((id, _)) = claude_host_agent::session_id_of(uri) {
            let pending = self
                .creating
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(&id)
                .cloned();
            if let Some(mut created) = pending.map(|tx| tx.subscribe()) {
                // Its `createSession` is under way: answer once it is done, either way.
                let _ = created.wait_for(|done| *done).await;
            }
        }
        let Some((id, kind)) = self.agent.resolve(uri) else {
            return Err(RpcError::new(
                code::SESSION_NOT_FOUND,
                format!("no session or chat {uri}"),
            ));
        };
        // A stored session's `@` index is started before its transcript is read (see there).
        self.agent.warm_file_index_of(&id).await;
        let handle = self.agent.open_session(&id).await.map_err(|e| match e {
            AgentError::UnknownSession(_) => {
                RpcError::new(code::SESSION_NOT_FOUND, format!("no session {uri}"))
            }
            other => agent_error(other),
        })?;
        let own = match &kind {
            ChannelKind::Session => handle.resource().to_owned(),
            ChannelKind::Chat => handle.chat_uri().to_owned(),
            ChannelKind::Subagent(call) => {
                claude_host_protocol::uri::subagent_chat_uri(handle.resource(), call)
            }
            ChannelKind::Changeset(scope) => {
                claude_host_agent::changeset_uri(handle.resource(), scope)
            }
            ChannelKind::Terminal(own) => own.clone(),
        };
        if own != uri {
            // The session is live under other URIs (a client chose them).
            return Err(RpcError::new(
                code::SESSION_NOT_FOUND,
                format!("no session or chat {uri}; this session is {own}"),
            ));
        }
        Ok(Target::Session(handle, kind))
    }

    /// A session channel's snapshot from its copy (see [`SessionHandle::channels`]), and how
    /// many of a chat's oldest turns the copy left out; `None` for a turn's changeset when the
    /// session has no such turn.
    pub(crate) fn channel_snapshot(
        uri: &str,
        kind: &ChannelKind,
        copy: ChannelCopy,
        seq: u64,
    ) -> Option<(Snapshot, usize)> {
        let mut older = 0;
        let state = match copy {
            ChannelCopy::Session(s) => SnapshotState::Session(s),
            ChannelCopy::Chat { state, older: o } => {
                older = o;
                SnapshotState::Chat(state)
            }
            ChannelCopy::Terminal(t) => SnapshotState::Terminal(t),
            ChannelCopy::Changeset { edits, turn_known } => {
                let ChannelKind::Changeset(scope) = kind else {
                    return None;
                };
                // The marker of a bounded snapshot is a turn to its client, which asks for
                // its changes as for any other: it has none.
                if !turn_known
                    && !matches!(scope, claude_host_agent::edits::Scope::Turn(t)
                        if t == crate::server::OLDER_TURNS_ID)
                {
                    return None;
                }
                SnapshotState::Changeset(Box::new(edits.changeset(scope)))
            }
        };
        let snapshot = Snapshot {
            resource: uri.to_owned(),
            state,
            from_seq: i64::try_from(seq).unwrap_or(i64::MAX),
        };
        Some((snapshot, older))
    }

    /// The root channel's snapshot and its live stream right after it.
    pub(crate) fn root_subscribe(&self) -> (Snapshot, broadcast::Receiver<Arc<Published>>) {
        self.root.subscribe()
    }

    /// The root channel's actions after `last_seen` and its live stream after them; `None`
    /// when some are no longer kept.
    pub(crate) fn root_replay(&self, last_seen: u64) -> Option<Replay> {
        self.root.replay_after(last_seen)
    }

    /// The state of a channel now (`None`: no such channel).
    pub async fn snapshot(&self, uri: &str) -> Option<SnapshotState> {
        match self.target(uri).await.ok()? {
            Target::Root => Some(SnapshotState::Root(Box::new(self.root.state()))),
            Target::Session(handle, kind) => {
                let want = ChannelWant {
                    uri: uri.to_owned(),
                    kind: kind.clone(),
                    newest_turns: None,
                };
                let s = handle.channels(vec![want]).await.ok()?;
                let copy = s.channels.into_iter().next().flatten()?;
                Some(Self::channel_snapshot(uri, &kind, copy, s.seq)?.0.state)
            }
        }
    }

    /// How many of a chat's completed turns a snapshot holds for a client that asked for
    /// `view_turns` (`view.turns`) or, without it, the host's bound.
    pub(crate) fn turns_shown(&self, view_turns: Option<usize>) -> crate::server::TurnsShown {
        use crate::server::TurnsShown;
        match (view_turns, self.config.chat_turns) {
            (Some(n), _) => TurnsShown::Asked(n),
            (None, Some(n)) => TurnsShown::Bounded(n),
            (None, None) => TurnsShown::All,
        }
    }

    /// Starts indexing a session's folders for `@` completions.
    pub(crate) fn warm_file_index(&self, handle: &SessionHandle) {
        self.agent
            .warm_file_index(&handle.status().working_directories);
    }

    fn publish_root(&self, action: StateAction) {
        self.root.publish(action, None, None);
    }

    /// Publishes a root action on the root channel; for the fan-out benchmark.
    #[doc(hidden)]
    pub fn publish_root_action(&self, action: StateAction) {
        self.publish_root(action);
    }

    // ─── Commands ────────────────────────────────────────────────────────────

    /// `initialize`: version negotiation; the caller subscribes to the initial channels.
    pub(crate) async fn initialize(
        &self,
        params: &Value,
    ) -> Result<(InitializeResult, Vec<String>), RpcError> {
        let p: ahp_types::commands::InitializeParams = parse(params)?;
        let chosen = ahp_types::version::negotiate_protocol_version(&p.protocol_versions)
            .map_err(RpcError::invalid_params)?;
        let Some(version) = chosen else {
            return Err(RpcError::new(
                code::UNSUPPORTED_PROTOCOL_VERSION,
                format!(
                    "none of the offered protocol versions {:?} is supported",
                    p.protocol_versions
                ),
            )
            .with_data(json!({
                "supportedVersions": ahp_types::version::SUPPORTED_PROTOCOL_VERSIONS
            })));
        };
        let subs = p.initial_subscriptions.unwrap_or_default();
        let result = InitializeResult {
            protocol_version: version.to_owned(),
            server_seq: i64::try_from(self.server_seq()).unwrap_or(i64::MAX),
            server_info: Some(Implementation {
                name: "claude-host".into(),
                version: Some(env!("CARGO_PKG_VERSION").into()),
                title: None,
            }),
            meta: None,
            snapshots: Vec::new(),
            default_directory: self.config.default_directory.as_deref().map(file_uri),
            completion_trigger_characters: Some(vec!["/".into(), "@".into()]),
            terminal_command_prefix: None,
            telemetry: None,
            automations: None,
        };
        Ok((result, subs))
    }

    /// Notes a `createSession` as it is read, before it runs: a `subscribe` read after it
    /// waits for it (VS Code may send both at once).
    pub(crate) fn announce_create(&self, params: &Value) {
        if let Some(id) = creating_id(params) {
            self.creating
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(id, tokio::sync::watch::channel(false).0);
        }
    }

    /// `createSession`: a provisional Claude session with its default chat.
    pub(crate) async fn create_session(
        &self,
        params: &Value,
        client: Option<(String, Arc<dyn ClientFiles>)>,
    ) -> Result<Value, RpcError> {
        // Done however it ends (a panic too), so no `subscribe` waits forever.
        let _done = creating_id(params).map(|id| Created { host: self, id });
        self.create_session_now(params, client).await
    }

    async fn create_session_now(
        &self,
        params: &Value,
        client: Option<(String, Arc<dyn ClientFiles>)>,
    ) -> Result<Value, RpcError> {
        let p: ahp_types::commands::CreateSessionParams = parse(params)?;
        if let Some(provider) = p.provider.as_deref().filter(|p| *p != "claude") {
            return Err(RpcError::new(
                code::PROVIDER_NOT_FOUND,
                format!("unknown provider {provider:?}; this host runs `claude`"),
            ));
        }
        // Either form VS Code chooses; the URI is kept verbatim for every later frame.
        let id = claude_host_protocol::uri::session_uri_id(&p.channel)
            .filter(|s| uuid::Uuid::parse_str(s).is_ok())
            .map(str::to_owned)
            .ok_or_else(|| {
                RpcError::invalid_params(format!(
                    "the session URI must be {CLAUDE_SESSION_PREFIX}<uuid> or \
                     {AHP_SESSION_PREFIX}<uuid>, got {}",
                    p.channel
                ))
            })?;
        let dirs: Vec<PathBuf> = p
            .working_directories
            .unwrap_or_default()
            .iter()
            .map(|u| {
                file_path(u)
                    .map_err(|e| RpcError::invalid_params(format!("working directory {u}: {e}")))
            })
            .collect::<Result<_, _>>()?;
        if !dirs.is_empty() {
            // Fails early, with the protocol's code, for a directory that does not exist.
            Roots::new(&dirs)?;
        }
        let mut config = p.config.unwrap_or_default();
        claude_host_agent::config::map_client_keys(&mut config)
            .map_err(RpcError::invalid_params)?;
        let get = |k: &str| config.get(k).and_then(Value::as_str).map(str::to_owned);
        let handle = self
            .agent
            .create_session(NewSession {
                uris: Some(claude_host_agent::uris_for(&p.channel)),
                id: Some(id),
                working_directories: dirs,
                model: get("model"),
                effort: get("effort"),
                permission_mode: get("permissionMode"),
                warm: false,
            })
            .await
            .map_err(agent_error)?;
        self.warm_file_index(&handle);
        if let Some(active) = p.active_client {
            if let Some((id, files)) = client
                && id == active.client_id
            {
                handle.set_client_files(&id, files).await;
            }
            handle.set_active_client(active).await;
        }
        Ok(Value::Null)
    }

    /// `disposeSession`.
    pub(crate) async fn dispose_session(&self, params: &Value) -> Result<Value, RpcError> {
        let uri = str_param(params, "channel")?;
        let Target::Session(handle, _) = self.target(uri).await? else {
            return Err(RpcError::invalid_params(
                "the root channel is not a session",
            ));
        };
        self.agent
            .dispose_session(handle.id())
            .await
            .map_err(agent_error)?;
        Ok(Value::Null)
    }

    /// `createChat`: each session has exactly one chat (its Claude session), created with
    /// it; asking for that one again is accepted, any other is refused with the reason.
    pub(crate) async fn create_chat(&self, params: &Value) -> Result<Value, RpcError> {
        let session = str_param(params, "channel")?;
        let chat = str_param(params, "chat")?;
        let Target::Session(handle, _) = self.target(session).await? else {
            return Err(RpcError::invalid_params(
                "the root channel is not a session",
            ));
        };
        if chat == handle.chat_uri() {
            return Ok(Value::Null);
        }
        Err(RpcError::invalid_params(format!(
            "this host runs one chat per session; use {} (fork and side chats are not supported)",
            handle.chat_uri()
        )))
    }

    /// `listSessions`: live sessions and every restorable one, newest first.
    pub(crate) async fn list_sessions(&self, params: &Value) -> Result<Value, RpcError> {
        // A page of at least one session, so a cursor always moves on.
        let limit = params
            .get("limit")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_LIST_LIMIT, |l| {
                usize::try_from(l).unwrap_or(usize::MAX)
            })
            .max(1);
        let offset = match params.get("cursor").and_then(Value::as_str) {
            None => 0,
            Some(c) => c
                .parse::<usize>()
                .map_err(|_| RpcError::invalid_params(format!("unknown cursor {c:?}")))?,
        };
        let all = self.agent.list_sessions().await;
        let items: Vec<SessionSummary> = all
            .iter()
            .skip(offset)
            .take(limit)
            .map(|l| {
                let mut st = status::IDLE;
                if l.read {
                    st |= status::IS_READ;
                }
                if l.archived {
                    st |= status::IS_ARCHIVED;
                }
                let mut meta = Map::new();
                meta.insert("fromHost".into(), json!(l.from_host));
                if let Some(h) = &l.last_host {
                    meta.insert("lastHost".into(), json!(h));
                }
                meta.insert("live".into(), json!(l.live));
                SessionSummary {
                    provider: "claude".into(),
                    title: l.title.clone(),
                    status: st,
                    activity: None,
                    origin: None,
                    project: None,
                    working_directories: l
                        .cwd
                        .as_ref()
                        .map(|cwd| vec![file_uri(std::path::Path::new(cwd))]),
                    annotations: None,
                    resource: l.resource.clone(),
                    created_at: at(l.created_at),
                    modified_at: at(l.modified_at),
                    changes: None,
                    meta: Some(meta),
                    chats: None,
                    default_chat: None,
                }
            })
            .collect();
        let next = offset + items.len();
        to_json(ListSessionsResult {
            next_cursor: (next < all.len()).then(|| next.to_string()),
            items,
        })
    }

    /// `authenticate`: the GitHub token reaches the agent (and its proxy).
    pub(crate) async fn authenticate(&self, params: &Value) -> Result<Value, RpcError> {
        let p: ahp_types::commands::AuthenticateParams = parse(params)?;
        let accepted = self
            .agent
            .authenticate(&p.resource, &p.token)
            .await
            .map_err(agent_error)?;
        if !accepted {
            return Err(RpcError::invalid_params(format!(
                "unknown protected resource {:?}; this host needs {}",
                p.resource,
                claude_host_agent::GITHUB_RESOURCE
            )));
        }
        let info = self.agent.info().await;
        self.publish_root(StateAction::RootAgentsChanged(RootAgentsChangedAction {
            agents: vec![info],
        }));
        Ok(json!({}))
    }

    /// `resolveSessionConfig`.
    pub(crate) async fn resolve_session_config(&self, params: &Value) -> Result<Value, RpcError> {
        let schema = self.agent.config_schema().await.map_err(agent_error)?;
        let values = params
            .get("config")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let values = claude_host_agent::config::with_defaults(&schema, values);
        to_json(ResolveSessionConfigResult { schema, values })
    }

    /// `sessionConfigCompletions`.
    pub(crate) async fn session_config_completions(
        &self,
        params: &Value,
    ) -> Result<Value, RpcError> {
        let property = str_param(params, "property")?;
        let query = params
            .get("query")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_lowercase();
        let schema = self.agent.config_schema().await.map_err(agent_error)?;
        let Some(prop) = schema.properties.get(property) else {
            return Err(RpcError::invalid_params(format!(
                "unknown property {property:?}"
            )));
        };
        let values = prop.r#enum.clone().unwrap_or_default();
        let labels = prop.enum_labels.clone().unwrap_or_default();
        let items: Vec<SessionConfigValueItem> = values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                let value = v.as_str()?.to_owned();
                let label = labels.get(i).cloned().unwrap_or_else(|| value.clone());
                let hit = query.is_empty()
                    || label.to_lowercase().contains(&query)
                    || value.to_lowercase().contains(&query);
                hit.then_some(SessionConfigValueItem {
                    value,
                    label,
                    description: None,
                })
            })
            .collect();
        to_json(SessionConfigCompletionsResult { items })
    }

    /// A `resource*` command, confined to the directories of the session named in
    /// `params._meta.session` (or of every live session and the default directory).
    pub(crate) async fn resource(&self, method: &str, params: &Value) -> Result<Value, RpcError> {
        if method == "resourceRead"
            && let Some(uri) = params.get("uri").and_then(Value::as_str)
            && uri.starts_with(claude_host_agent::edits::book::CONTENT_SCHEME)
        {
            return self.read_content(uri, params).await;
        }
        let session = params
            .get("_meta")
            .and_then(|m| m.get("session"))
            .and_then(Value::as_str);
        let dirs: Vec<PathBuf> = match session {
            Some(uri) => match self.target(uri).await? {
                Target::Session(h, _) => h.status().working_directories,
                Target::Root => Vec::new(),
            },
            None => self
                .agent
                .live_sessions()
                .iter()
                .flat_map(|h| h.status().working_directories)
                .chain(self.config.default_directory.clone())
                .collect(),
        };
        let roots = Roots::new(&dirs).map_err(|e| {
            if session.is_some() {
                RpcError::new(
                    code::NOT_FOUND,
                    format!("the session's working directory is gone: {}", e.message),
                )
            } else {
                e
            }
        })?;
        resources::handle(&roots, method, params.clone()).await
    }

    /// `resourceRead` of a file version a session's tool call read or wrote (the content URIs
    /// of `fileEdit` results and changesets).
    async fn read_content(&self, uri: &str, params: &Value) -> Result<Value, RpcError> {
        let bytes = self.agent.read_content(uri).await.map_err(|e| match e {
            AgentError::Invalid(m) => RpcError::invalid_params(m),
            other => RpcError::new(code::NOT_FOUND, other.to_string()),
        })?;
        use base64::Engine as _;
        let base64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let wants_base64 = params.get("encoding").and_then(Value::as_str) == Some("base64");
        let (data, encoding) = if wants_base64 {
            (base64(&bytes), "base64")
        } else {
            match String::from_utf8(bytes) {
                Ok(text) => (text, "utf-8"),
                Err(e) => (base64(e.as_bytes()), "base64"),
            }
        };
        Ok(json!({"data": data, "encoding": encoding}))
    }

    /// `createTerminal`: an interactive shell in one of a session's folders (the session named
    /// in `_meta.session` or the claim, else the live session whose folders hold `cwd`).
    pub(crate) async fn create_terminal(&self, params: &Value) -> Result<Value, RpcError> {
        // Some VS Code versions name the channel `terminal`.
        let mut params = params.clone();
        if params.get("channel").is_none()
            && let Some(t) = params.get("terminal").cloned()
        {
            params["channel"] = t;
        }
        let p: ahp_types::commands::CreateTerminalParams = parse(&params)?;
        if self.agent.resolve(&p.channel).is_some() || p.channel == ROOT {
            return Err(RpcError::invalid_params(format!(
                "{} is already a channel",
                p.channel
            )));
        }
        let cwd = match &p.cwd {
            Some(uri) => Some(
                claude_host_protocol::uri::file_path(uri)
                    .map_err(|e| RpcError::invalid_params(format!("`cwd`: {e}")))?,
            ),
            None => None,
        };
        let named = params
            .get("_meta")
            .and_then(|m| m.get("session"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or(match &p.claim {
                ahp_types::state::TerminalClaim::Session(s) => Some(s.session.clone()),
                ahp_types::state::TerminalClaim::Client(_) => None,
            });
        let handle = match named {
            Some(uri) => match self.target(&uri).await? {
                Target::Session(h, _) => h,
                Target::Root => return Err(RpcError::invalid_params("not a session")),
            },
            None => {
                let Some(dir) = cwd.as_ref().and_then(|d| d.canonicalize().ok()) else {
                    return Err(RpcError::invalid_params(
                        "name the session (`_meta.session`) or give a `cwd` in one of its folders",
                    ));
                };
                self.agent
                    .live_sessions()
                    .into_iter()
                    .find(|h| {
                        h.status()
                            .working_directories
                            .iter()
                            .filter_map(|w| w.canonicalize().ok())
                            .any(|w| dir.starts_with(w))
                    })
                    .ok_or_else(|| {
                        RpcError::new(
                            code::PERMISSION_DENIED,
                            format!("{} is not in any open session's folders", dir.display()),
                        )
                    })?
            }
        };
        let cwd = match cwd {
            Some(c) => c,
            None => handle
                .status()
                .working_directories
                .first()
                .cloned()
                .ok_or_else(|| RpcError::invalid_params("the session has no folder"))?,
        };
        let size = |v: Option<i64>, default: u16| {
            v.and_then(|n| u16::try_from(n).ok())
                .filter(|n| *n > 0)
                .unwrap_or(default)
        };
        self.agent
            .bind_terminal(&p.channel, handle.id())
            .map_err(|e| RpcError::invalid_params(e.to_string()))?;
        let created = handle
            .create_terminal(claude_host_agent::NewTerminal {
                uri: p.channel.clone(),
                cwd,
                name: p.name.clone(),
                size: (size(p.cols, 80), size(p.rows, 24)),
                claim: p.claim.clone(),
            })
            .await;
        if let Err(e) = created {
            self.agent.unbind_terminal(&p.channel);
            return Err(RpcError::new(code::PERMISSION_DENIED, e.to_string()));
        }
        Ok(Value::Null)
    }

    /// `disposeTerminal`: ends the shell and everything it started.
    pub(crate) async fn dispose_terminal(&self, params: &Value) -> Result<Value, RpcError> {
        let p: ahp_types::commands::DisposeTerminalParams = parse(params)?;
        let Target::Session(handle, ChannelKind::Terminal(uri)) = self.target(&p.channel).await?
        else {
            return Err(RpcError::invalid_params(format!(
                "{} is not a terminal",
                p.channel
            )));
        };
        handle
            .dispose_terminal(&uri)
            .await
            .map_err(|e| RpcError::invalid_params(e.to_string()))?;
        self.agent.unbind_terminal(&uri);
        Ok(Value::Null)
    }

    /// `invokeChangesetOperation`: discard a file's or a whole changeset's edits.
    pub(crate) async fn invoke_changeset_operation(
        &self,
        params: &Value,
    ) -> Result<Value, RpcError> {
        let p: ahp_types::commands::InvokeChangesetOperationParams = parse(params)?;
        let Target::Session(handle, ChannelKind::Changeset(scope)) =
            self.target(&p.channel).await?
        else {
            return Err(RpcError::invalid_params(format!(
                "{} is not a changeset",
                p.channel
            )));
        };
        handle
            .changeset_operation(scope, p.operation_id, p.target)
            .await
            .map_err(|e| RpcError::invalid_params(e.to_string()))?;
        Ok(json!({}))
    }

    /// `completions`: after `/`, the CLI's slash commands and skills; after `@`, files and
    /// folders under the session's folders.
    pub(crate) async fn completions(&self, params: &Value) -> Result<Value, RpcError> {
        use claude_host_agent::completions::trigger;
        let p: CompletionsParams = parse(params)?;
        let Target::Session(handle, _) = self.target(&p.channel).await? else {
            return Err(RpcError::invalid_params(
                "completions are for a session or chat",
            ));
        };
        let offset = usize::try_from(p.offset).unwrap_or(0);
        let Some((kind, query, start)) = trigger(&p.text, offset) else {
            return to_json(CompletionsResult { items: Vec::new() });
        };
        let range = |len: usize| (i64::try_from(start).ok(), i64::try_from(start + len).ok());
        let typed = query.chars().count() + 1;
        let (range_start, range_end) = range(typed);
        let items = if kind == '/' {
            let query = query.to_lowercase();
            let mut commands = handle.slash_commands().await;
            if commands.is_empty() {
                // Its CLI has not run yet: the user is writing its first prompt, so start it
                // now (the prompt would anyway) and ask it.
                if let Err(e) = handle.warm().await {
                    tracing::info!(error = %e, "no CLI to list slash commands");
                }
                commands = handle.slash_commands().await;
            }
            commands
                .into_iter()
                .filter(|c| c.name.to_lowercase().starts_with(&query))
                .map(|c| {
                    let mut meta = JsonObject::new();
                    match &c.skill {
                        // VS Code tells a skill by its file.
                        Some(uri) => {
                            meta.insert("uri".into(), json!(uri));
                            meta.insert("name".into(), json!(c.name));
                            meta.insert("displayName".into(), json!(c.name));
                        }
                        None => {
                            meta.insert("command".into(), json!(c.name));
                        }
                    }
                    meta.insert("description".into(), json!(c.description));
                    meta.insert("argumentHint".into(), json!(c.argument_hint));
                    CompletionItem {
                        insert_text: format!("/{} ", c.name),
                        range_start,
                        range_end,
                        attachment: MessageAttachment::Simple(SimpleMessageAttachment {
                            label: c.name,
                            range: None,
                            display_kind: Some("command".into()),
                            meta: Some(meta),
                            model_representation: None,
                        }),
                    }
                })
                .collect()
        } else {
            let roots = handle.status().working_directories;
            self.agent
                .find_files(roots, query, 50)
                .await
                .into_iter()
                .map(|m| {
                    let shown = if m.is_dir {
                        format!("{}/", m.relative)
                    } else {
                        m.relative.clone()
                    };
                    CompletionItem {
                        insert_text: format!("@{shown}"),
                        range_start,
                        range_end,
                        attachment: MessageAttachment::Resource(MessageResourceAttachment {
                            label: m.relative,
                            range: None,
                            display_kind: Some(
                                if m.is_dir { "directory" } else { "document" }.into(),
                            ),
                            meta: None,
                            uri: file_uri(&m.path),
                            size_hint: None,
                            content_type: None,
                            nonce: None,
                            selection: None,
                        }),
                    }
                })
                .collect()
        };
        to_json(CompletionsResult { items })
    }

    /// A message's prompt with its attachments: each file read from the session's folders
    /// (the same confinement as the resource commands), else asked of the client that sent
    /// it (`resourceRead`; VS Code grants reads of what it attached).
    async fn prompt_content(
        &self,
        handle: &SessionHandle,
        message: &Message,
        client: Option<&dyn ClientFiles>,
    ) -> Value {
        use claude_host_agent::attachments;
        let uris = attachments::files_to_read(message);
        let mut files = HashMap::new();
        if !uris.is_empty() {
            let roots = Roots::new(&handle.status().working_directories);
            for uri in uris {
                let params = json!({"channel": handle.resource(), "uri": uri});
                let mut read = match &roots {
                    Ok(roots) => resources::handle(roots, "resourceRead", params.clone())
                        .await
                        .map_err(|e| e.message)
                        .and_then(read_result),
                    Err(e) => Err(e.message.clone()),
                };
                if let (Err(here), Some(client)) = (&read, client) {
                    read = client
                        .request("resourceRead", params)
                        .await
                        .and_then(read_result)
                        .map_err(|there| format!("{here}; from the client: {there}"));
                }
                if let Err(why) = &read {
                    tracing::info!(uri = %Safe(&uri), why = %Safe(why), "an attached file could not be read");
                }
                files.insert(uri, read);
            }
        }
        attachments::prompt_content(message, &files)
    }

    // ─── Dispatched actions ───────────────────────────────────────────────────

    /// A client's `dispatchAction`: handed to the session that owns the channel, which
    /// echoes it with its origin (or a rejection reason) in order with everything else.
    pub(crate) async fn dispatch(
        &self,
        client_id: &str,
        params: &Value,
        client: Option<Arc<dyn ClientFiles>>,
    ) {
        let (channel, origin, action) = read_dispatch(client_id, params);
        match self.target(&channel).await {
            // VS Code mirrors its settings here after every connect (all with clientSeq 0,
            // unknown keys included): taken and echoed; nothing of the host depends on them.
            Ok(Target::Root) if matches!(action, StateAction::RootConfigChanged(_)) => {
                self.root.publish(action, Some(origin), None);
            }
            Ok(Target::Root) => {
                let reason = format!(
                    "{} cannot be dispatched on the root channel",
                    action_type(&action)
                );
                tracing::info!(channel = %Safe(&channel), reason = %Safe(&reason), "rejected a dispatched action");
                self.root.publish(action, Some(origin), Some(reason));
            }
            Ok(Target::Session(handle, kind)) => {
                // A prompt's attached files are read here, before the session gets it, so
                // its task never waits on the disk; this connection's later actions wait.
                let content = match &action {
                    StateAction::ChatTurnStarted(a)
                        if a.message
                            .attachments
                            .as_ref()
                            .is_some_and(|v| !v.is_empty()) =>
                    {
                        Some(
                            self.prompt_content(&handle, &a.message, client.as_deref())
                                .await,
                        )
                    }
                    _ => None,
                };
                // The plugins the client publishes are copied through its connection.
                if let (StateAction::SessionActiveClientSet(_), Some(files)) = (&action, client) {
                    handle.set_client_files(client_id, files).await;
                }
                if handle
                    .dispatch_with_content(kind, action, origin, content)
                    .await
                    .is_err()
                {
                    tracing::info!(channel = %Safe(&channel), "an action for a session that just closed was dropped");
                }
            }
            Err(e) => {
                tracing::info!(%channel, error = %e.message, "an action for an unknown channel was dropped");
            }
        }
    }

    /// Stops forwarding session-list changes and shuts the agent down.
    pub async fn shutdown(&self) {
        self.notice_pump.abort();
        self.agent.shutdown().await;
    }
}

/// A `dispatchAction`'s params: the channel, the action's origin, and the action (one this
/// host cannot read is [`StateAction::Unknown`], refused by whoever gets it).
pub fn read_dispatch(client_id: &str, params: &Value) -> (String, ActionOrigin, StateAction) {
    let channel = params["channel"].as_str().unwrap_or("").to_owned();
    let client_seq = params["clientSeq"].as_i64().unwrap_or(0);
    let origin = ActionOrigin {
        client_id: client_id.to_owned(),
        client_seq,
    };
    let raw = params.get("action").cloned().unwrap_or(Value::Null);
    let action: StateAction = match serde_json::from_value(raw.clone()) {
        Ok(a) => a,
        // Only a non-object fails: unknown shapes parse as `Unknown` and are refused below.
        Err(_) => StateAction::Unknown(raw),
    };
    (channel, origin, action)
}

fn to_json(v: impl serde::Serialize) -> Result<Value, RpcError> {
    serde_json::to_value(v).map_err(|e| RpcError::new(code::INTERNAL_ERROR, e.to_string()))
}

fn at(ms: i64) -> String {
    if ms <= 0 {
        now_rfc3339()
    } else {
        rfc3339_from_millis(ms)
    }
}

/// An action's `type`, as the client sent it.
fn action_type(action: &StateAction) -> String {
    match action {
        StateAction::Unknown(v) => v
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("an action without a type")
            .to_owned(),
        a => claude_host_agent::actions::kind(a).to_owned(),
    }
}

fn notification(method: &str, params: impl serde::Serialize) -> Option<Arc<str>> {
    let params = serde_json::to_value(params).ok()?;
    let mut msg = Map::new();
    msg.insert("jsonrpc".into(), json!("2.0"));
    msg.insert("method".into(), json!(method));
    msg.insert("params".into(), params);
    Some(Value::Object(msg).to_string().into())
}

/// Turns the agent's session-list changes into root notifications and the live-session count.
async fn pump_notices(
    agent: Arc<Agent>,
    mut notices: broadcast::Receiver<SessionNotice>,
    root: Arc<RootChannel>,
    out: broadcast::Sender<Arc<str>>,
) {
    loop {
        let notice = match notices.recv().await {
            Ok(n) => n,
            Err(broadcast::error::RecvError::Lagged(n)) => {
                // Notifications are ephemeral (clients re-list); the count is recomputed.
                tracing::warn!(
                    missed = n,
                    "session-list changes were missed; the live count is recomputed"
                );
                publish_count(&agent, &root);
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let frame = match notice {
            SessionNotice::Added(summary) => {
                publish_count(&agent, &root);
                notification(
                    "root/sessionAdded",
                    SessionAddedParams {
                        channel: ROOT.into(),
                        summary: *summary,
                    },
                )
            }
            SessionNotice::Removed { session } => {
                publish_count(&agent, &root);
                notification(
                    "root/sessionRemoved",
                    SessionRemovedParams {
                        channel: ROOT.into(),
                        session,
                    },
                )
            }
            SessionNotice::Changed { session, changes } => notification(
                "root/sessionSummaryChanged",
                SessionSummaryChangedParams {
                    channel: ROOT.into(),
                    session,
                    changes: *changes,
                },
            ),
        };
        if let Some(f) = frame {
            let _ = out.send(f);
        }
    }
}

fn publish_count(agent: &Agent, root: &RootChannel) {
    let n = i64::try_from(agent.live_sessions().len()).unwrap_or(i64::MAX);
    root.publish(
        StateAction::RootActiveSessionsChanged(RootActiveSessionsChangedAction {
            active_sessions: n,
        }),
        None,
        None,
    );
}

/// A `resourceRead` answer (`{data, encoding, contentType}`) as the bytes of a file.
fn read_result(result: Value) -> Result<claude_host_agent::attachments::ReadFile, String> {
    use base64::Engine as _;
    let r: ResourceReadResult = serde_json::from_value(result).map_err(|e| e.to_string())?;
    let bytes = match r.encoding {
        ContentEncoding::Base64 => base64::engine::general_purpose::STANDARD
            .decode(r.data.as_bytes())
            .map_err(|e| e.to_string())?,
        ContentEncoding::Utf8 => r.data.into_bytes(),
    };
    Ok(claude_host_agent::attachments::ReadFile {
        bytes,
        content_type: r.content_type.unwrap_or_else(|| "text/plain".into()),
    })
}

pub(crate) use claude_host_agent::customizations::sync::ClientFiles;

/// The session id a `createSession` names.
fn creating_id(params: &Value) -> Option<String> {
    let channel = params.get("channel").and_then(Value::as_str)?;
    claude_host_protocol::uri::session_uri_id(channel).map(str::to_owned)
}

/// Marks an announced `createSession` done when dropped.
struct Created<'a> {
    host: &'a Host,
    id: String,
}

impl Drop for Created<'_> {
    fn drop(&mut self) {
        let announced = self
            .host
            .creating
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.id);
        if let Some(tx) = announced {
            let _ = tx.send(true);
        }
    }
}
