//! The protocol side of the host: channels for the root, each session and its chat, the
//! commands clients send, and the actions they dispatch.

use crate::channel::{Channel, ChannelState, Published};
use crate::resources::{self, Roots};
use crate::rpc::{RpcError, code};
use ahp_types::actions::{ActionOrigin, StateAction};
use ahp_types::state::{RootState, SessionState};
use claude_host_agent::mapper::{action, now_rfc3339};
use claude_host_agent::{
    Agent, AgentError, ChatSession, ChatSessionError, Confirmation, InputReply, NewSession,
};
use serde_json::{Map, Value, json};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// The root channel.
pub const ROOT: &str = "ahp-root://";
const SESSION_PREFIX: &str = "ahp-session:/";
const CHAT_PREFIX: &str = "ahp-chat:/";

/// Session status bits (`SessionStatus`).
mod status {
    pub const IDLE: u32 = 1;
    pub const ERROR: u32 = 2;
    pub const IN_PROGRESS: u32 = 8;
    pub const IS_ARCHIVED: u32 = 64;
}

/// How the host behaves.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Actions kept per channel for `reconnect`.
    pub replay_buffer: usize,
    /// Suggested directory for remote browsing (`defaultDirectory`).
    pub default_directory: Option<PathBuf>,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            replay_buffer: 4096,
            default_directory: None,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A `file://` URI for a path.
pub fn file_uri(path: &std::path::Path) -> String {
    let mut out = String::from("file://");
    for b in path.display().to_string().bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn path_of_file_uri(uri: &str) -> Option<PathBuf> {
    let rest = uri.strip_prefix("file://")?;
    let bytes = rest.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(v) = u8::from_str_radix(std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?, 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    Some(PathBuf::from(String::from_utf8(out).ok()?))
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
        AgentError::UnknownModel { .. } => RpcError::invalid_params(e.to_string()),
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

/// A session served over AHP: one Claude chat.
pub struct HostSession {
    /// `ahp-session:/<id>`.
    pub uri: String,
    /// `ahp-chat:/<id>`.
    pub chat_uri: String,
    /// The agent's session.
    pub chat: Arc<ChatSession>,
    session_channel: Arc<Channel>,
    chat_channel: Arc<Channel>,
    /// `None` when the working directory no longer exists.
    roots: Option<Roots>,
    /// Client origins of dispatched actions, matched to the actions the session emits.
    origins: Mutex<HashMap<String, ActionOrigin>>,
    created_at: String,
    pump: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Queued messages (id, text), started as turns one after another.
    queue: Mutex<VecDeque<(String, String)>>,
    /// Held while the queue is being worked off, so queued turns start in order.
    draining: tokio::sync::Mutex<()>,
}

/// The key an emitted action is matched on to a client's dispatch.
fn origin_key(action: &Value) -> Option<String> {
    let ty = action["type"].as_str()?;
    let id = match ty {
        "chat/turnStarted" | "chat/turnCancelled" => action["turnId"].as_str()?,
        "chat/toolCallConfirmed" => action["toolCallId"].as_str()?,
        "chat/inputCompleted" => action["requestId"].as_str()?,
        "chat/pendingMessageSet" => action["id"].as_str()?,
        "chat/truncated" => action["turnId"].as_str().unwrap_or(""),
        _ => return None,
    };
    Some(format!("{ty}:{id}"))
}

/// Client-dispatched actions applied as they are (no agent work behind them).
const PASSIVE_CHAT_ACTIONS: &[&str] = &[
    "chat/draftChanged",
    "chat/isReadChanged",
    "chat/isArchivedChanged",
    "chat/inputAnswerChanged",
];
const PASSIVE_SESSION_ACTIONS: &[&str] = &[
    "session/titleChanged",
    "session/isReadChanged",
    "session/isArchivedChanged",
    "session/activeClientSet",
    "session/activeClientRemoved",
];

/// The protocol host.
pub struct Host {
    agent: Arc<Agent>,
    config: HostConfig,
    seq: Arc<AtomicU64>,
    root: Arc<Channel>,
    sessions: Mutex<HashMap<String, Arc<HostSession>>>,
    /// Root notifications (`root/sessionAdded`, …), already serialized.
    notifications: broadcast::Sender<Arc<str>>,
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
        let (notifications, _) = broadcast::channel(1024);
        Arc::new(Host {
            root: Channel::new(
                ROOT,
                ChannelState::Root(Box::new(root_state)),
                config.replay_buffer,
            ),
            agent,
            config,
            seq: Arc::new(AtomicU64::new(0)),
            sessions: Mutex::new(HashMap::new()),
            notifications,
        })
    }

    /// The agent.
    pub fn agent(&self) -> &Arc<Agent> {
        &self.agent
    }

    /// The current `serverSeq`.
    pub fn server_seq(&self) -> u64 {
        self.seq.load(Ordering::SeqCst)
    }

    /// The `serverSeq` counter (snapshots read it under their channel's lock).
    pub fn seq_counter(&self) -> &AtomicU64 {
        &self.seq
    }

    /// Root notifications.
    pub fn notifications(&self) -> broadcast::Receiver<Arc<str>> {
        self.notifications.subscribe()
    }

    fn notify_root(&self, method: &str, params: Value) {
        let frame = json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string();
        let _ = self.notifications.send(frame.into());
    }

    /// The session or chat channel, or the root.
    pub async fn channel(&self, uri: &str) -> Result<Arc<Channel>, RpcError> {
        if uri == ROOT {
            return Ok(self.root.clone());
        }
        let s = self.session_for(uri).await?;
        Ok(if uri.starts_with(CHAT_PREFIX) {
            s.chat_channel.clone()
        } else {
            s.session_channel.clone()
        })
    }

    /// A live session by its session or chat URI, restoring a known one on first use.
    pub async fn session_for(self: &Host, uri: &str) -> Result<Arc<HostSession>, RpcError> {
        let id = uri
            .strip_prefix(SESSION_PREFIX)
            .or_else(|| uri.strip_prefix(CHAT_PREFIX))
            .ok_or_else(|| RpcError::invalid_params(format!("not a session or chat URI: {uri}")))?
            .trim_start_matches('/')
            .to_owned();
        if let Some(s) = lock(&self.sessions).get(&id).cloned() {
            return Ok(s);
        }
        let chat = self.agent.open_session(&id).await.map_err(|e| match e {
            AgentError::UnknownSession(_) | AgentError::Session(_) => {
                RpcError::new(code::SESSION_NOT_FOUND, format!("no session {uri}"))
            }
            other => agent_error(other),
        })?;
        Ok(self.register(&id, chat, None))
    }

    fn session_state(&self, id: &str, chat: &ChatSession) -> SessionState {
        let chat_uri = format!("{CHAT_PREFIX}{id}");
        let title = chat.state().title;
        let state = json!({
            "provider": "claude", "title": title, "status": status::IDLE,
            "workingDirectories": [file_uri(&chat.cwd())], "lifecycle": "ready",
            "activeClients": [], "defaultChat": chat_uri,
            "chats": [{"resource": chat_uri, "title": title, "status": status::IDLE,
                       "modifiedAt": now_rfc3339()}],
            "config": self.config_state(chat),
        });
        serde_json::from_value(state).unwrap_or_else(|e| {
            tracing::error!(error = %e, "cannot build a session state");
            SessionState {
                provider: "claude".into(),
                title: String::new(),
                status: status::IDLE,
                activity: None,
                origin: None,
                project: None,
                working_directories: None,
                annotations: None,
                lifecycle: ahp_types::state::SessionLifecycle::Ready,
                creation_error: None,
                server_tools: None,
                active_clients: Vec::new(),
                chats: Vec::new(),
                default_chat: None,
                config: None,
                customizations: None,
                changesets: None,
                input_needed: None,
                meta: None,
            }
        })
    }

    fn config_values(chat: &ChatSession) -> Value {
        let mut v = Map::new();
        if let Some(m) = chat.model() {
            v.insert("model".into(), json!(m));
        }
        if let Some(e) = chat.effort() {
            v.insert("effort".into(), json!(e));
        }
        v.insert(
            "permissionMode".into(),
            json!(chat.permission_mode().unwrap_or_else(|| "default".into())),
        );
        Value::Object(v)
    }

    fn config_state(&self, chat: &ChatSession) -> Value {
        json!({"schema": self.config_schema(&[]), "values": Host::config_values(chat)})
    }

    /// The session configuration schema: model, effort, permission mode.
    fn config_schema(&self, models: &[ahp_types::state::SessionModelInfo]) -> Value {
        let mut props = Map::new();
        if !models.is_empty() {
            props.insert(
                "model".into(),
                json!({
                "type": "string", "title": "Model",
                "enum": models.iter().map(|m| m.id.clone()).collect::<Vec<_>>(),
                "enumLabels": models.iter().map(|m| m.name.clone()).collect::<Vec<_>>(),
                "default": models[0].id, "sessionMutable": true}),
            );
            let levels = serde_json::to_value(&models[0].config_schema)
                .ok()
                .and_then(|s| s["properties"]["effort"]["enum"].as_array().cloned());
            if let Some(levels) = levels {
                props.insert(
                    "effort".into(),
                    json!({"type": "string", "title": "Thinking effort",
                    "enum": levels, "sessionMutable": true}),
                );
            }
        }
        props.insert(
            "permissionMode".into(),
            json!({
            "type": "string", "title": "Permissions",
            "enum": ["default", "acceptEdits", "plan"],
            "enumLabels": ["Ask before edits and commands", "Accept edits", "Plan only"],
            "default": "default", "sessionMutable": true}),
        );
        json!({"type": "object", "properties": props})
    }

    fn register(&self, id: &str, chat: Arc<ChatSession>, roots: Option<Roots>) -> Arc<HostSession> {
        let uri = format!("{SESSION_PREFIX}{id}");
        let chat_uri = format!("{CHAT_PREFIX}{id}");
        let (mut chat_state, actions) = chat.snapshot_and_subscribe();
        chat_state.resource = chat_uri.clone();
        let session_channel = Channel::new(
            &uri,
            ChannelState::Session(Box::new(self.session_state(id, &chat))),
            self.config.replay_buffer,
        );
        let chat_channel = Channel::new(
            &chat_uri,
            ChannelState::Chat(Box::new(chat_state)),
            self.config.replay_buffer,
        );
        let roots = roots.or_else(|| Roots::new(&[chat.cwd()]).ok());
        let hs = Arc::new(HostSession {
            uri,
            chat_uri,
            chat,
            session_channel,
            chat_channel,
            roots,
            origins: Mutex::new(HashMap::new()),
            created_at: now_rfc3339(),
            pump: Mutex::new(None),
            queue: Mutex::new(VecDeque::new()),
            draining: tokio::sync::Mutex::new(()),
        });
        let mut sessions = lock(&self.sessions);
        if let Some(existing) = sessions.get(id) {
            // A concurrent restore won the race.
            return existing.clone();
        }
        sessions.insert(id.to_owned(), hs.clone());
        drop(sessions);
        let pump = tokio::spawn(pump(
            hs.clone(),
            actions,
            self.seq.clone(),
            self.notifications.clone(),
        ));
        *lock(&hs.pump) = Some(pump);
        hs
    }

    fn active_count(&self) -> i64 {
        lock(&self.sessions).len() as i64
    }

    fn publish_root(&self, a: Value) {
        if let Some(a) = action(a) {
            self.root.publish(&self.seq, a, None, None);
        }
    }

    /// Publishes a root action (given as its JSON) to every root subscriber; for embedders
    /// announcing host-level changes, and for the fan-out benchmark.
    pub fn publish_root_action(&self, a: Value) {
        self.publish_root(a);
    }

    fn summary(&self, hs: &HostSession) -> Value {
        let state = hs.session_channel.state();
        let (title, st) = match state {
            ChannelState::Session(s) => (s.title.clone(), s.status),
            _ => (String::new(), status::IDLE),
        };
        json!({"resource": hs.uri, "provider": "claude", "title": title, "status": st,
               "createdAt": hs.created_at, "modifiedAt": now_rfc3339(),
               "workingDirectories": [file_uri(&hs.chat.cwd())], "defaultChat": hs.chat_uri,
               "chats": [{"resource": hs.chat_uri, "title": title}]})
    }

    // ─── Commands ────────────────────────────────────────────────────────────

    /// `initialize`: version negotiation and snapshots of the initial subscriptions.
    pub async fn initialize(&self, params: &Value) -> Result<(Value, Vec<String>), RpcError> {
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
        let mut result = json!({
            "protocolVersion": version,
            "serverSeq": self.server_seq(),
            "serverInfo": {"name": "claude-host", "version": env!("CARGO_PKG_VERSION")},
            "snapshots": [],
        });
        if let Some(d) = &self.config.default_directory {
            result["defaultDirectory"] = json!(file_uri(d));
        }
        Ok((result, subs))
    }

    /// `createSession`: a provisional Claude session with its default chat.
    pub async fn create_session(&self, params: &Value) -> Result<Value, RpcError> {
        let p: ahp_types::commands::CreateSessionParams = parse(params)?;
        if let Some(provider) = p.provider.as_deref().filter(|p| *p != "claude") {
            return Err(RpcError::new(
                code::PROVIDER_NOT_FOUND,
                format!("unknown provider {provider:?}; this host runs `claude`"),
            ));
        }
        let id = p
            .channel
            .strip_prefix(SESSION_PREFIX)
            .map(|s| s.trim_start_matches('/').to_owned())
            .filter(|s| uuid::Uuid::parse_str(s).is_ok())
            .ok_or_else(|| {
                RpcError::invalid_params(format!(
                    "the session URI must be {SESSION_PREFIX}<uuid>, got {}",
                    p.channel
                ))
            })?;
        if lock(&self.sessions).contains_key(&id) {
            return Err(RpcError::new(
                code::SESSION_ALREADY_EXISTS,
                format!("session {} exists", p.channel),
            ));
        }
        let dirs: Vec<PathBuf> = p
            .working_directories
            .unwrap_or_default()
            .iter()
            .map(|u| {
                path_of_file_uri(u).ok_or_else(|| {
                    RpcError::invalid_params(format!("working directory must be a file: URI: {u}"))
                })
            })
            .collect::<Result<_, _>>()?;
        let roots = match dirs.first() {
            Some(_) => Some(Roots::new(&dirs)?),
            None => None,
        };
        let config = p.config.unwrap_or_default();
        let get = |k: &str| config.get(k).and_then(Value::as_str).map(str::to_owned);
        let (_, chat) = self
            .agent
            .create_session(NewSession {
                id: Some(id.clone()),
                cwd: roots.as_ref().and_then(|r| r.dirs().first().cloned()),
                model: get("model"),
                effort: get("effort"),
                permission_mode: get("permissionMode").filter(|m| m != "default"),
                warm: false,
            })
            .await
            .map_err(agent_error)?;
        let hs = self.register(&id, chat, roots);
        self.publish_root(
            json!({"type": "root/activeSessionsChanged", "activeSessions": self.active_count()}),
        );
        self.notify_root(
            "root/sessionAdded",
            json!({"channel": ROOT, "summary": self.summary(&hs)}),
        );
        Ok(Value::Null)
    }

    /// `disposeSession`.
    pub async fn dispose_session(&self, params: &Value) -> Result<Value, RpcError> {
        let uri = str_param(params, "channel")?;
        let hs = self.session_for(uri).await?;
        let id = hs.uri.trim_start_matches(SESSION_PREFIX).to_owned();
        lock(&self.sessions).remove(&id);
        if let Some(p) = lock(&hs.pump).take() {
            p.abort();
        }
        let _ = self.agent.dispose_session(&id).await;
        self.publish_root(
            json!({"type": "root/activeSessionsChanged", "activeSessions": self.active_count()}),
        );
        self.notify_root(
            "root/sessionRemoved",
            json!({"channel": ROOT, "session": hs.uri}),
        );
        Ok(Value::Null)
    }

    /// `createChat`: each session has exactly one chat (its Claude session), created with
    /// it; asking for that one again is accepted, any other is refused with the reason.
    pub async fn create_chat(&self, params: &Value) -> Result<Value, RpcError> {
        let session = str_param(params, "channel")?;
        let chat = str_param(params, "chat")?;
        let hs = self.session_for(session).await?;
        if chat == hs.chat_uri {
            return Ok(Value::Null);
        }
        Err(RpcError::invalid_params(format!(
            "this host runs one chat per session; use {} (fork and side chats are not supported)",
            hs.chat_uri
        )))
    }

    /// `listSessions`: live sessions and every restorable one, newest first.
    pub async fn list_sessions(&self, params: &Value) -> Result<Value, RpcError> {
        let limit = params.get("limit").and_then(Value::as_u64).unwrap_or(100) as usize;
        let offset = match params.get("cursor").and_then(Value::as_str) {
            None => 0,
            Some(c) => c
                .parse::<usize>()
                .map_err(|_| RpcError::invalid_params(format!("unknown cursor {c:?}")))?,
        };
        let all = self.agent.list_sessions().await;
        let items: Vec<Value> = all
            .iter()
            .skip(offset)
            .take(limit.max(1))
            .map(|l| {
                let at = millis_rfc3339(l.modified_at);
                let mut st = status::IDLE;
                if l.archived {
                    st |= status::IS_ARCHIVED;
                }
                let mut item = json!({"resource": format!("{SESSION_PREFIX}{}", l.id),
                    "provider": "claude", "title": l.title, "status": st,
                    "createdAt": at, "modifiedAt": at,
                    "_meta": {"fromHost": l.from_host}});
                if let Some(cwd) = &l.cwd {
                    item["workingDirectories"] = json!([file_uri(std::path::Path::new(cwd))]);
                }
                item
            })
            .collect();
        let mut result = json!({ "items": items });
        if offset + limit < all.len() {
            result["nextCursor"] = json!((offset + limit).to_string());
        }
        Ok(result)
    }

    /// `authenticate`: the GitHub token reaches the agent (and its proxy).
    pub async fn authenticate(&self, params: &Value) -> Result<Value, RpcError> {
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
        self.publish_root(json!({"type": "root/agentsChanged", "agents": [info]}));
        Ok(json!({}))
    }

    /// `resolveSessionConfig`.
    pub async fn resolve_session_config(&self, params: &Value) -> Result<Value, RpcError> {
        let models = self.agent.models().await.map_err(agent_error)?;
        let schema = self.config_schema(&models);
        let mut values = params
            .get("config")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for (k, prop) in schema["properties"].as_object().into_iter().flatten() {
            if !values.contains_key(k)
                && let Some(d) = prop.get("default")
            {
                values.insert(k.clone(), d.clone());
            }
        }
        Ok(json!({"schema": schema, "values": values}))
    }

    /// `sessionConfigCompletions`.
    pub async fn session_config_completions(&self, params: &Value) -> Result<Value, RpcError> {
        let property = str_param(params, "property")?;
        let query = params
            .get("query")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_lowercase();
        let models = self.agent.models().await.map_err(agent_error)?;
        let items: Vec<Value> = match property {
            "model" => models
                .iter()
                .map(|m| json!({"value": m.id, "label": m.name}))
                .collect(),
            "permissionMode" => ["default", "acceptEdits", "plan"]
                .iter()
                .map(|m| json!({"value": m, "label": m}))
                .collect(),
            "effort" => models
                .first()
                .and_then(|m| serde_json::to_value(&m.config_schema).ok())
                .and_then(|s| s["properties"]["effort"]["enum"].as_array().cloned())
                .unwrap_or_default()
                .iter()
                .map(|l| json!({"value": l, "label": l}))
                .collect(),
            other => {
                return Err(RpcError::invalid_params(format!(
                    "unknown property {other:?}"
                )));
            }
        };
        let items: Vec<Value> = items
            .into_iter()
            .filter(|i| {
                query.is_empty()
                    || i["label"]
                        .as_str()
                        .is_some_and(|l| l.to_lowercase().contains(&query))
            })
            .collect();
        Ok(json!({ "items": items }))
    }

    /// `fetchTurns`: every turn is in the snapshot, so there is never an older page.
    pub async fn fetch_turns(&self, params: &Value) -> Result<Value, RpcError> {
        let uri = str_param(params, "channel")?;
        self.session_for(uri).await?;
        if let Some(c) = params.get("cursor").and_then(Value::as_str) {
            return Err(RpcError::invalid_params(format!("unknown cursor {c:?}")));
        }
        Ok(json!({}))
    }

    /// A `resource*` command, confined to the directories of the session named in
    /// `params._meta.session` (or of every live session).
    pub async fn resource(&self, method: &str, params: &Value) -> Result<Value, RpcError> {
        let session = params
            .get("_meta")
            .and_then(|m| m.get("session"))
            .and_then(Value::as_str);
        let roots = match session {
            Some(uri) => self.session_for(uri).await?.roots.clone().ok_or_else(|| {
                RpcError::new(
                    code::NOT_FOUND,
                    "the session's working directory no longer exists",
                )
            })?,
            None => {
                let dirs: Vec<PathBuf> = lock(&self.sessions)
                    .values()
                    .flat_map(|s| s.roots.iter().flat_map(|r| r.dirs().to_vec()))
                    .chain(self.config.default_directory.clone())
                    .collect();
                Roots::new(&dirs)?
            }
        };
        resources::handle(&roots, method, params.clone()).await
    }

    // ─── Dispatched actions ───────────────────────────────────────────────────

    /// A client's `dispatchAction`: validated, carried out, and echoed with its origin (or
    /// echoed with a rejection reason).
    pub async fn dispatch(self: &Arc<Host>, client_id: &str, params: &Value) {
        let channel = params["channel"].as_str().unwrap_or("").to_owned();
        let client_seq = params["clientSeq"].as_i64().unwrap_or(0);
        let origin = ActionOrigin {
            client_id: client_id.to_owned(),
            client_seq,
        };
        let raw = params.get("action").cloned().unwrap_or(Value::Null);
        let parsed: Result<StateAction, _> = serde_json::from_value(raw.clone());
        let outcome = match parsed {
            Err(e) => Err(format!("invalid action: {e}")),
            Ok(a) => self.carry_out(&channel, a, &raw, origin.clone()).await,
        };
        if let Err(reason) = outcome {
            tracing::info!(%channel, %reason, "rejected a dispatched action");
            if let (Ok(ch), Ok(a)) = (
                self.channel(&channel).await,
                serde_json::from_value::<StateAction>(raw),
            ) {
                ch.publish(&self.seq, a, Some(origin), Some(reason));
            }
        }
    }

    async fn carry_out(
        self: &Arc<Host>,
        channel: &str,
        a: StateAction,
        raw: &Value,
        origin: ActionOrigin,
    ) -> Result<(), String> {
        let ty = raw["type"].as_str().unwrap_or("").to_owned();
        if channel == ROOT {
            return Err(format!("{ty} cannot be dispatched on the root channel"));
        }
        let hs = self.session_for(channel).await.map_err(|e| e.message)?;
        let on_chat = channel.starts_with(CHAT_PREFIX);
        if !on_chat {
            if PASSIVE_SESSION_ACTIONS.contains(&ty.as_str()) {
                hs.session_channel.publish(&self.seq, a, Some(origin), None);
                return Ok(());
            }
            if ty == "session/configChanged" {
                let config = raw["config"].as_object().cloned().unwrap_or_default();
                apply_config(&hs.chat, &config).await?;
                hs.session_channel.publish(&self.seq, a, Some(origin), None);
                return Ok(());
            }
            return Err(format!("{ty} is not accepted on a session channel"));
        }
        if PASSIVE_CHAT_ACTIONS.contains(&ty.as_str()) {
            hs.chat_channel.publish(&self.seq, a, Some(origin), None);
            return Ok(());
        }
        let chat = hs.chat.clone();
        match ty.as_str() {
            "chat/turnStarted" => {
                let turn_id = raw["turnId"].as_str().unwrap_or("").to_owned();
                let text = raw["message"]["text"].as_str().unwrap_or("").to_owned();
                if turn_id.is_empty() {
                    return Err("chat/turnStarted needs a turnId".into());
                }
                if chat.turn_running() {
                    return Err("a turn is already running in this chat".into());
                }
                if let Some(model) = raw["message"]["model"]["id"].as_str()
                    && chat.model().as_deref() != Some(model)
                {
                    chat.set_model(model).await.map_err(|e| e.to_string())?;
                }
                if let Some(effort) = raw["message"]["model"]["config"]["effort"].as_str() {
                    chat.set_effort(Some(effort))
                        .await
                        .map_err(|e| e.to_string())?;
                }
                hs.expect_origin(raw, origin);
                let host = self.clone();
                let hs2 = hs.clone();
                tokio::spawn(async move {
                    if let Err(e) = chat.send_turn(Some(turn_id), &text).await {
                        tracing::warn!(session = %hs2.uri, error = %e, "turn failed");
                    }
                    host.touch(&hs2);
                    drain_queue(host.seq.clone(), hs2);
                });
                Ok(())
            }
            "chat/toolCallConfirmed" => {
                let id = raw["toolCallId"].as_str().unwrap_or("");
                let decision = if raw["approved"].as_bool().unwrap_or(false) {
                    Confirmation::Approve
                } else {
                    Confirmation::Deny
                };
                hs.expect_origin(raw, origin);
                chat.confirm_tool(id, decision).map_err(|e| {
                    hs.forget_origin(raw);
                    e.to_string()
                })
            }
            "chat/inputCompleted" => {
                let p: ahp_types::actions::ChatInputCompletedAction =
                    serde_json::from_value(raw.clone()).map_err(|e| e.to_string())?;
                hs.expect_origin(raw, origin);
                chat.answer_input(
                    &p.request_id,
                    InputReply {
                        response: p.response,
                        answers: p.answers.unwrap_or_default(),
                    },
                )
                .map_err(|e| {
                    hs.forget_origin(raw);
                    e.to_string()
                })
            }
            "chat/pendingMessageSet" if raw["kind"] == "queued" => {
                let id = raw["id"].as_str().unwrap_or("").to_owned();
                if id.is_empty() {
                    return Err("a queued message needs an id".into());
                }
                let text = raw["message"]["text"].as_str().unwrap_or("").to_owned();
                {
                    let mut queue = lock(&hs.queue);
                    match queue.iter_mut().find(|(q, _)| *q == id) {
                        Some(entry) => entry.1 = text,
                        None => queue.push_back((id, text)),
                    }
                }
                hs.chat_channel.publish(&self.seq, a, Some(origin), None);
                drain_queue(self.seq.clone(), hs.clone());
                Ok(())
            }
            "chat/pendingMessageRemoved" if raw["kind"] == "queued" => {
                let id = raw["id"].as_str().unwrap_or("");
                let mut queue = lock(&hs.queue);
                let before = queue.len();
                queue.retain(|(q, _)| q != id);
                if queue.len() == before {
                    return Err(format!("no queued message {id}"));
                }
                drop(queue);
                hs.chat_channel.publish(&self.seq, a, Some(origin), None);
                Ok(())
            }
            "chat/queuedMessagesReordered" => {
                let order: Vec<String> = raw["order"]
                    .as_array()
                    .map(|o| {
                        o.iter()
                            .filter_map(|v| v.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                let mut queue = lock(&hs.queue);
                let mut rest: Vec<(String, String)> = queue.drain(..).collect();
                for id in &order {
                    if let Some(at) = rest.iter().position(|(q, _)| q == id) {
                        queue.push_back(rest.remove(at));
                    }
                }
                queue.extend(rest);
                drop(queue);
                hs.chat_channel.publish(&self.seq, a, Some(origin), None);
                Ok(())
            }
            "chat/pendingMessageSet" => {
                if raw["kind"] != "steering" {
                    return Err("unknown pending message kind".into());
                }
                let id = raw["id"].as_str().unwrap_or("");
                if uuid::Uuid::parse_str(id).is_err() {
                    return Err("a steering message id must be a UUID".into());
                }
                let text = raw["message"]["text"].as_str().unwrap_or("");
                hs.expect_origin(raw, origin);
                match chat.steer_with_id(id, text).await {
                    Ok(Some(_)) => Ok(()),
                    Ok(None) => {
                        hs.forget_origin(raw);
                        Err("no turn is running to steer".into())
                    }
                    Err(e) => {
                        hs.forget_origin(raw);
                        Err(e.to_string())
                    }
                }
            }
            "chat/turnCancelled" => {
                if !chat.turn_running() {
                    return Err("no turn is running".into());
                }
                tokio::spawn(async move {
                    if let Err(e) = chat.abort().await {
                        tracing::warn!(error = %e, "abort failed");
                    }
                });
                Ok(())
            }
            "chat/truncated" => {
                if chat.turn_running() {
                    return Err("cannot truncate while a turn is running".into());
                }
                hs.expect_origin(raw, origin);
                let turn = raw["turnId"].as_str().map(str::to_owned);
                chat.truncate_after(turn.as_deref()).await.map_err(|e| {
                    hs.forget_origin(raw);
                    match e {
                        ChatSessionError::NotPending(t) => format!("no turn {t}"),
                        other => other.to_string(),
                    }
                })
            }
            other => Err(format!("{other} cannot be dispatched by a client")),
        }
    }

    fn touch(&self, hs: &HostSession) {
        self.notify_root(
            "root/sessionSummaryChanged",
            json!({"channel": ROOT, "session": hs.uri, "changes": {"modifiedAt": now_rfc3339()}}),
        );
    }

    /// Stops every session's pump (the agent shuts the sessions down).
    pub async fn shutdown(&self) {
        let sessions: Vec<Arc<HostSession>> =
            lock(&self.sessions).drain().map(|(_, s)| s).collect();
        for s in sessions {
            if let Some(p) = lock(&s.pump).take() {
                p.abort();
            }
        }
        self.agent.shutdown().await;
    }
}

/// The session-level mirror of a chat waiting for the user (`session/inputNeededSet`) or no
/// longer waiting (`session/inputNeededRemoved`), with the session status that goes with it.
fn input_needed(hs: &HostSession, chat_action: &Value) -> Option<(Value, u32)> {
    const INPUT_NEEDED: u32 = 24;
    match chat_action["type"].as_str()? {
        // A re-announced tool call without `confirmed` waits for the user.
        "chat/toolCallReady" if chat_action.get("confirmed").is_none_or(Value::is_null) => {
            let id = chat_action["toolCallId"].as_str()?;
            let ChannelState::Chat(state) = hs.chat_channel.state() else {
                return None;
            };
            let parts = serde_json::to_value(&state.active_turn.as_ref()?.response_parts).ok()?;
            let tool_call = parts
                .as_array()?
                .iter()
                .find(|p| p["toolCall"]["toolCallId"] == id)?["toolCall"]
                .clone();
            Some((
                json!({"type": "session/inputNeededSet", "request": {"kind": "toolConfirmation",
                    "id": id, "chat": hs.chat_uri, "turnId": chat_action["turnId"],
                    "toolCall": tool_call}}),
                INPUT_NEEDED,
            ))
        }
        "chat/inputRequested" => Some((
            json!({"type": "session/inputNeededSet", "request": {"kind": "chatInput",
                "id": chat_action["request"]["id"], "chat": hs.chat_uri,
                "request": chat_action["request"]}}),
            INPUT_NEEDED,
        )),
        "chat/toolCallConfirmed" => Some((
            json!({"type": "session/inputNeededRemoved", "id": chat_action["toolCallId"]}),
            status::IN_PROGRESS,
        )),
        "chat/inputCompleted" => Some((
            json!({"type": "session/inputNeededRemoved", "id": chat_action["requestId"]}),
            status::IN_PROGRESS,
        )),
        _ => None,
    }
}

/// Starts queued messages as turns, in order, each once the chat is idle.
fn drain_queue(seq: Arc<AtomicU64>, hs: Arc<HostSession>) {
    tokio::spawn(async move {
        let _one_at_a_time = hs.draining.lock().await;
        loop {
            if lock(&hs.queue).is_empty() {
                return;
            }
            hs.chat.wait_idle().await;
            let Some((id, text)) = lock(&hs.queue).pop_front() else {
                return;
            };
            if let Some(removed) =
                action(json!({"type": "chat/pendingMessageRemoved", "kind": "queued", "id": id}))
            {
                hs.chat_channel.publish(&seq, removed, None, None);
            }
            let turn_id = uuid::Uuid::new_v4().to_string();
            if let Err(e) = hs.chat.send_turn(Some(turn_id), &text).await {
                tracing::warn!(session = %hs.uri, error = %e, "queued turn failed");
            }
        }
    });
}

/// Applies `session/configChanged` values to the chat.
async fn apply_config(chat: &ChatSession, config: &Map<String, Value>) -> Result<(), String> {
    if let Some(m) = config.get("model").and_then(Value::as_str) {
        chat.set_model(m).await.map_err(|e| e.to_string())?;
    }
    if let Some(e) = config.get("effort") {
        chat.set_effort(e.as_str())
            .await
            .map_err(|e| e.to_string())?;
    }
    if let Some(m) = config.get("permissionMode").and_then(Value::as_str) {
        if !["default", "acceptEdits", "plan", "bypassPermissions"].contains(&m) {
            return Err(format!("unknown permission mode {m:?}"));
        }
        chat.set_permission_mode(m)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn millis_rfc3339(ms: i64) -> String {
    if ms <= 0 {
        return now_rfc3339();
    }
    claude_host_agent::mapper::rfc3339_from_millis(ms)
}

impl HostSession {
    fn expect_origin(&self, raw: &Value, origin: ActionOrigin) {
        if let Some(k) = origin_key(raw) {
            lock(&self.origins).insert(k, origin);
        }
    }

    fn forget_origin(&self, raw: &Value) {
        if let Some(k) = origin_key(raw) {
            lock(&self.origins).remove(&k);
        }
    }

    fn take_origin(&self, action: &StateAction) -> Option<ActionOrigin> {
        let v = serde_json::to_value(action).ok()?;
        let k = origin_key(&v)?;
        lock(&self.origins).remove(&k)
    }

    /// The roots resource commands are confined to.
    pub fn roots(&self) -> Option<&Roots> {
        self.roots.as_ref()
    }
}

/// Moves a chat's actions onto its channel, numbering them, and keeps the session's status.
async fn pump(
    hs: Arc<HostSession>,
    mut actions: broadcast::Receiver<StateAction>,
    seq: Arc<AtomicU64>,
    notifications: broadcast::Sender<Arc<str>>,
) {
    let summary_changed = |changes: Value| {
        let frame = json!({"jsonrpc": "2.0", "method": "root/sessionSummaryChanged",
            "params": {"channel": ROOT, "session": hs.uri, "changes": changes}});
        let _ = notifications.send(frame.to_string().into());
    };
    loop {
        match actions.recv().await {
            Ok(a) => {
                let v = serde_json::to_value(&a).unwrap_or(Value::Null);
                let ty = v["type"].as_str().unwrap_or("").to_owned();
                // The first prompt names the session.
                if ty == "chat/turnStarted"
                    && let ChannelState::Session(s) = hs.session_channel.state()
                    && s.title.is_empty()
                {
                    let title: String = v["message"]["text"]
                        .as_str()
                        .unwrap_or("")
                        .lines()
                        .next()
                        .unwrap_or("")
                        .chars()
                        .take(80)
                        .collect();
                    if !title.is_empty()
                        && let Some(t) =
                            action(json!({"type": "session/titleChanged", "title": title}))
                    {
                        hs.session_channel.publish(&seq, t, None, None);
                        summary_changed(json!({"title": title}));
                    }
                }
                let origin = hs.take_origin(&a);
                hs.chat_channel.publish(&seq, a, origin, None);
                if let Some((input, status)) = input_needed(&hs, &v)
                    && let Some(input) = action(input)
                {
                    hs.session_channel.publish(&seq, input, None, None);
                    summary_changed(json!({"status": status}));
                }
                if matches!(
                    ty.as_str(),
                    "chat/turnComplete" | "chat/turnCancelled" | "chat/error"
                ) && !lock(&hs.queue).is_empty()
                {
                    drain_queue(seq.clone(), hs.clone());
                }
                let new_status = match ty.as_str() {
                    "chat/turnStarted" => Some(status::IN_PROGRESS),
                    "chat/turnComplete" | "chat/turnCancelled" => Some(status::IDLE),
                    "chat/error" => Some(status::ERROR),
                    _ => None,
                };
                if let Some(st) = new_status
                    && let Some(update) = action(json!({"type": "session/chatUpdated",
                        "chat": hs.chat_uri, "changes": {"status": st, "modifiedAt": now_rfc3339()}}))
                {
                    hs.session_channel.publish(&seq, update, None, None);
                    summary_changed(json!({"status": st, "modifiedAt": now_rfc3339()}));
                }
            }
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::error!(session = %hs.uri, missed = n, "the chat pump fell behind; clients must resubscribe");
            }
            Err(broadcast::error::RecvError::Closed) => break,
        }
    }
}

/// A published action, for tests and benchmarks.
pub type PublishedAction = Arc<Published>;
