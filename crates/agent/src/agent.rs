//! The `claude` agent of one host: its identity, the model edge, and the one registry of its
//! sessions (by session id, and by every URI a session is known by).

use crate::listing::{SessionListing, merge};
use crate::models::{self, ModelAccess, auth_required, model_info};
use crate::outbox::Sequence;
use crate::session::{
    self, ChannelKind, ChatSessionError, Overlay, SessionHandle, SessionNotice, SessionSpec,
    SessionUris,
};
use ahp_types::state::{
    AgentInfo, ProtectedResourceMetadata, SessionModelInfo, SessionSummary, Turn,
};
use claude_host_protocol::time::{now_millis, now_rfc3339};
use claude_host_protocol::uri::file_uri;
use claude_host_sdk::SessionOptions;
use claude_host_store::{SessionRecord, Store};
use claude_host_upstream::UpstreamError;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;

pub use claude_host_protocol::uri::{AHP_SESSION_PREFIX, CLAUDE_SESSION_PREFIX};

/// Why an agent operation failed.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// No GitHub token has been accepted yet; authenticate against these resources.
    #[error("authentication required: sign in with GitHub")]
    AuthRequired {
        /// What to authenticate against.
        resources: Vec<ProtectedResourceMetadata>,
    },
    /// The token was refused or the upstream could not be reached with it.
    #[error("authentication failed: {0}")]
    AuthFailed(#[from] UpstreamError),
    /// No session with this URI or id.
    #[error("no session {0}")]
    UnknownSession(String),
    /// A session with this id or URI exists.
    #[error("session {0} already exists")]
    SessionExists(String),
    /// The model is not one the agent offers.
    #[error("unknown model {model:?}; available: {available}")]
    UnknownModel {
        /// What was asked for.
        model: String,
        /// What exists.
        available: String,
    },
    /// The request is not valid.
    #[error("{0}")]
    Invalid(String),
    /// The host cannot do this.
    #[error("{0}")]
    Unsupported(String),
    /// A session operation failed.
    #[error(transparent)]
    Session(#[from] ChatSessionError),
    /// The agent has been shut down.
    #[error("the agent is shut down")]
    ShutDown,
    /// Another host drives the session (its lease has not run out).
    #[error(
        "session {session_id} is held by {holder} since {since}; it is free once that host closes it or its lease runs out ({expires})"
    )]
    Held {
        /// The session.
        session_id: String,
        /// Who holds it.
        holder: String,
        /// Since when (RFC 3339).
        since: String,
        /// When the lease runs out unless renewed (RFC 3339).
        expires: String,
    },
    /// The session's lease cannot be taken (the database cannot be reached): the session is
    /// not driven without one unless the host runs with `allow_unleased`.
    #[error(
        "session {session_id} cannot be opened: its lease cannot be taken in the session database {database} ({message}); nothing else may drive it meanwhile, so it is refused (run the host with --allow-unleased to drive sessions without a lease)"
    )]
    LeaseUnavailable {
        /// The session.
        session_id: String,
        /// The database (no password).
        database: String,
        /// Why.
        message: String,
    },
}

/// Sessions kept in a shared store (PostgreSQL, or a SQLite file given by URL): transcripts
/// mirrored into it, sessions restored from it on any host, one host driving a session at a
/// time.
#[derive(Debug, Clone)]
pub struct Durable {
    /// The database.
    pub db: claude_host_store::Database,
    /// This host's name in leases and listings (unique per running host).
    pub host: String,
    /// How long a lease lasts without renewal (renewed at a third of it while the session is
    /// open). A host that has not renewed it within this time, by its own clock, stops
    /// driving the session.
    pub lease_ttl: Duration,
    /// Drive a session without a lease when the database cannot be reached to take one
    /// (opt-in: two hosts may then drive it at once). Off: such a session is refused.
    pub allow_unleased: bool,
}

/// How the agent runs sessions.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The Claude Code CLI.
    pub cli: PathBuf,
    /// `CLAUDE_CONFIG_DIR` for every session (`None`: the CLI's default, `~/.claude`).
    pub config_dir: Option<PathBuf>,
    /// Working directory of sessions created without one.
    pub default_cwd: PathBuf,
    /// Environment added to every CLI (e.g. `HOME`).
    pub extra_env: Vec<(String, String)>,
    /// Whether `bypassPermissions` may be chosen.
    pub allow_bypass_permissions: bool,
    /// Actions kept per session for clients that reconnect.
    pub replay_buffer: usize,
    /// How long an interrupted turn may take to settle before its CLI is killed.
    pub abort_grace: Duration,
    /// How long a client tool call waits for its client to come back after it left.
    pub client_tool_grace: Duration,
    /// How long a session restored from disk stays open with nobody using it.
    pub idle_eviction: Duration,
    /// Tools no session may use (`WebSearch` behind Copilot, which refuses its server tool).
    pub disallowed_tools: Vec<String>,
    /// A shared store for transcripts and leases (`None`: transcripts stay local).
    pub durable: Option<Durable>,
    /// How long a session's Claude Code process may sit idle (no turn, nothing waiting, no
    /// background task) before it is stopped; the session stays open and starts it again,
    /// resuming, when a client opens it, types a prompt or sends one. `None` keeps it.
    pub cli_idle: Option<Duration>,
    /// A Claude Code process started ahead of a prompt (a client opened the session, typed,
    /// or created it) first runs a throwaway turn, cut right after, so that the prompt finds
    /// it warm (a process's first turn costs ~90 ms more than later ones). The turn's model
    /// call must reach claude-host's proxy, which answers it itself; turn this off when the
    /// CLI talks to anything else. Skipped in a session whose settings have hooks that such
    /// a turn could fire.
    pub warm_up: bool,
    /// Where sessions keep what their tool calls changed (`<dir>/<session id>`: content,
    /// snapshots, log); `None` tracks nothing.
    pub edits_dir: Option<PathBuf>,
    /// Where sessions keep their customization decisions and copies of client plugins
    /// (`<dir>/sessions/<session id>`), and the host its global decisions
    /// (`<dir>/global.json`); `None` keeps decisions in memory and copies no plugins.
    pub customizations_dir: Option<PathBuf>,
    /// Learns of every CLI's and terminal's session, so none outlives a host killed with
    /// SIGKILL (`None`: they die with the host only when it ends normally).
    pub keeper: Option<Arc<claude_host_sdk::Keeper>>,
    /// Where the agent's counters go (CLI starts, crashes, idle stops); `None`: not counted.
    pub meter: Option<opentelemetry::metrics::Meter>,
    /// How long [`Agent::shutdown`] lets running turns finish before it cancels them (then
    /// the transcripts are flushed to the shared store and the leases given back).
    pub shutdown_grace: Duration,
    /// The model of Claude Code's small/fast calls (`None`: one the plan includes, when it
    /// has one; else Claude Code's own choice).
    pub small_model: Option<String>,
    /// The model of every subagent (`None`: Claude Code's own choice, the session's model).
    pub subagent_model: Option<String>,
}

impl AgentConfig {
    /// The defaults, for a CLI and a default working directory.
    pub fn new(cli: PathBuf, default_cwd: PathBuf) -> AgentConfig {
        AgentConfig {
            cli,
            config_dir: None,
            default_cwd,
            extra_env: Vec::new(),
            allow_bypass_permissions: false,
            replay_buffer: 4096,
            abort_grace: Duration::from_secs(5),
            client_tool_grace: Duration::from_secs(30),
            idle_eviction: Duration::from_secs(600),
            disallowed_tools: Vec::new(),
            durable: None,
            edits_dir: None,
            customizations_dir: None,
            keeper: None,
            meter: None,
            shutdown_grace: Duration::from_secs(10),
            cli_idle: Some(Duration::from_secs(300)),
            warm_up: true,
            small_model: None,
            subagent_model: None,
        }
    }
}

/// What a new session starts with.
#[derive(Debug, Clone, Default)]
pub struct NewSession {
    /// The Claude session id to use (a UUID); `None` picks one.
    pub id: Option<String>,
    /// The URIs clients know it by (`None`: this host's own forms).
    pub uris: Option<SessionUris>,
    /// Working directories; the first is the CLI's (default: the agent's).
    pub working_directories: Vec<PathBuf>,
    /// Model id, Copilot (`claude-sonnet-4.5`) or Claude Code form.
    pub model: Option<String>,
    /// Reasoning effort.
    pub effort: Option<String>,
    /// Permission mode.
    pub permission_mode: Option<String>,
    /// Start the CLI now, so the first prompt does not wait for it.
    pub warm: bool,
}

/// This host's URIs for a session id: `claude:/<id>` and its default chat.
pub fn default_uris(id: &str) -> SessionUris {
    uris_for(&format!("{CLAUDE_SESSION_PREFIX}{id}"))
}

/// A session URI (verbatim, as its client chose it) and its default chat URI.
pub fn uris_for(session_uri: &str) -> SessionUris {
    SessionUris {
        session: session_uri.to_owned(),
        chat: claude_host_protocol::uri::default_chat_uri(session_uri),
    }
}

/// The session id and channel a session, default-chat or subagent-chat URI names (or a
/// bare id).
pub fn session_id_of(uri: &str) -> Option<(String, ChannelKind)> {
    use claude_host_protocol::uri::{
        session_of_default_chat, session_of_subagent_chat, session_uri_id,
    };
    if let Some(session) = session_of_default_chat(uri) {
        return session_uri_id(&session).map(|id| (id.to_owned(), ChannelKind::Chat));
    }
    if let Some((session, call)) = session_of_subagent_chat(uri) {
        return session_uri_id(&session).map(|id| (id.to_owned(), ChannelKind::Subagent(call)));
    }
    if let Some((session, scope)) = changeset_of(uri) {
        return session_uri_id(session).map(|id| (id.to_owned(), ChannelKind::Changeset(scope)));
    }
    if let Some(id) = session_uri_id(uri) {
        return Some((id.to_owned(), ChannelKind::Session));
    }
    uuid::Uuid::parse_str(uri)
        .is_ok()
        .then(|| (uri.to_owned(), ChannelKind::Session))
}

/// The session URI a Bash call's terminal URI (`<session>/terminal/<call>`) belongs to.
fn tool_terminal_of(uri: &str) -> Option<&str> {
    let at = uri.find("/terminal/")?;
    let call = &uri[at + "/terminal/".len()..];
    (!call.is_empty() && !call.contains('/')).then(|| &uri[..at])
}

/// The session URI and scope a changeset URI (`<session>/changeset/…`) names.
fn changeset_of(uri: &str) -> Option<(&str, crate::edits::Scope)> {
    let at = uri.find("/changeset/")?;
    let session = &uri[..at];
    crate::session::scope_of(session, uri).map(|scope| (session, scope))
}

/// Whether two transcript lines are the same entry (byte-equal, or equal as JSON: a store
/// may keep a line's text with other spacing).
fn same_entry(a: &str, b: &str) -> bool {
    a == b
        || serde_json::from_str::<serde_json::Value>(a).ok()
            == serde_json::from_str::<serde_json::Value>(b).ok()
}

/// A lease this host took, and when it asked for it (its deadline counts from then).
struct TakenLease {
    lease: claude_host_store::Lease,
    asked: tokio::time::Instant,
}

#[derive(Default)]
struct Registry {
    by_id: HashMap<String, SessionHandle>,
    /// Every URI of every live session → (id, which channel).
    by_uri: HashMap<String, (String, ChannelKind)>,
}

impl Registry {
    fn insert(&mut self, handle: SessionHandle) {
        let id = handle.id().to_owned();
        self.by_uri.insert(
            handle.resource().to_owned(),
            (id.clone(), ChannelKind::Session),
        );
        self.by_uri.insert(
            handle.chat_uri().to_owned(),
            (id.clone(), ChannelKind::Chat),
        );
        self.by_id.insert(id, handle);
    }

    fn remove(&mut self, id: &str, instance: Option<u64>) -> Option<SessionHandle> {
        let current = self.by_id.get(id)?;
        if instance.is_some_and(|i| i != current.instance()) {
            return None;
        }
        let h = self.by_id.remove(id)?;
        self.by_uri.remove(h.resource());
        self.by_uri.remove(h.chat_uri());
        // Its terminals went with it.
        self.by_uri
            .retain(|_, (owner, kind)| !(owner == id && matches!(kind, ChannelKind::Terminal(_))));
        Some(h)
    }
}

/// The `claude` agent of one host.
pub struct Agent {
    config: AgentConfig,
    models: Arc<dyn ModelAccess>,
    store: Option<Arc<dyn Store>>,
    mirror: Option<crate::mirror::Mirror>,
    // The one registry. Held only to look up, insert or remove a handle (never across an
    // await): every session operation then goes to the session's own task.
    registry: Arc<Mutex<Registry>>,
    seq: Sequence,
    notices: broadcast::Sender<SessionNotice>,
    live_tasks: Arc<AtomicUsize>,
    shut_down: tokio::sync::OnceCell<()>,
    // The sessions' folders, indexed for `@` completions (one index per folder, shared).
    file_indexes: crate::file_index::FileIndexes,
    meters: Option<crate::meters::CliMeters>,
    // Sessions driven without a lease (`allow_unleased`), for `status`.
    unleased: AtomicUsize,
    // Each open session's lease keeper (renews, then flushes and releases as it closes).
    lease_jobs: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    // Set as a shutdown begins: no session is created or opened from then on.
    stopping: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Agent {
    /// An agent whose sessions' model calls go through `models`.
    pub fn new(
        config: AgentConfig,
        models: Arc<dyn ModelAccess>,
        store: Option<Arc<dyn Store>>,
    ) -> Agent {
        let (notices, _) = broadcast::channel(1024);
        let meters = config.meter.as_ref().map(crate::meters::CliMeters::new);
        let mirror = config.durable.as_ref().and_then(|d| {
            let projects = claude_host_sdk::transcripts::config_dir(
                config.config_dir.as_deref(),
                &config.extra_env,
            )?
            .join("projects");
            Some(crate::mirror::Mirror::start(
                d.db.transcripts.clone(),
                projects,
            ))
        });
        Agent {
            config,
            models,
            store,
            mirror,
            registry: Arc::new(Mutex::new(Registry::default())),
            seq: Sequence::default(),
            notices,
            live_tasks: Arc::new(AtomicUsize::new(0)),
            shut_down: tokio::sync::OnceCell::new(),
            file_indexes: crate::file_index::FileIndexes::default(),
            meters,
            unleased: AtomicUsize::new(0),
            lease_jobs: Mutex::new(Vec::new()),
            stopping: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The host-wide `serverSeq` counter (the AHP root channel numbers from it too).
    pub fn sequence(&self) -> &Sequence {
        &self.seq
    }

    /// Files and folders under `roots` whose relative path contains `query` (any case), those
    /// whose name starts with it first, then shorter paths, at most `limit`
    /// ([`crate::file_index::search`]). Answers from each folder's index, which a query
    /// refreshes in the background once it is a few seconds old; a folder with none is
    /// indexed first.
    pub async fn find_files(
        &self,
        roots: Vec<PathBuf>,
        query: String,
        limit: usize,
    ) -> Vec<crate::completions::FileMatch> {
        self.file_indexes.find(roots, query, limit).await
    }

    /// Starts indexing `roots` for `@` completions, without waiting (a front end that offers
    /// them does it when a client creates or opens a session, so its first `@` is answered
    /// at once).
    pub fn warm_file_index(&self, roots: &[PathBuf]) {
        self.file_indexes.warm(roots);
    }

    /// Starts indexing the folder of session `id`, which is not open yet, before its
    /// transcript is read: the folder its overlay records, else the one its transcript starts
    /// in (read from the transcript's first 64 KiB). Returns the folder, if one was found.
    ///
    /// Why before: a long session's restore grows the heap by tens of megabytes and frees
    /// them at the close. The walk's allocations that outlive it (the index, `ignore`'s and
    /// the walker's own) made while the restore holds the heap are scattered through it, and
    /// every page one of them sits on stays resident after the close (docs/BENCHMARKS.md,
    /// *The `@` index built before the restore*).
    pub async fn warm_file_index_of(&self, id: &str) -> Option<PathBuf> {
        if self.session(id).is_some() || uuid::Uuid::parse_str(id).is_err() {
            return None;
        }
        let recorded = match &self.store {
            Some(store) => store.get(id).await.ok().flatten().map(|r| r.cwd),
            None => None,
        };
        let cwd = match recorded.filter(|c| !c.is_empty()) {
            Some(c) => c,
            None => {
                let config = self.config_dir()?;
                let id = id.to_owned();
                tokio::task::spawn_blocking(move || {
                    let path = claude_host_sdk::transcripts::find_session(&config, &id).ok()?;
                    claude_host_sdk::transcripts::summarize(&path).ok()?.cwd
                })
                .await
                .ok()??
            }
        };
        let cwd = PathBuf::from(cwd);
        self.file_indexes.warm(std::slice::from_ref(&cwd));
        Some(cwd)
    }

    /// Makes `uri` name a terminal of live session `session_id` (until it is unbound or the
    /// session leaves).
    pub fn bind_terminal(&self, uri: &str, session_id: &str) -> Result<(), AgentError> {
        let mut reg = lock(&self.registry);
        if !reg.by_id.contains_key(session_id) {
            return Err(AgentError::UnknownSession(session_id.to_owned()));
        }
        if reg.by_uri.contains_key(uri) {
            return Err(AgentError::SessionExists(uri.to_owned()));
        }
        reg.by_uri.insert(
            uri.to_owned(),
            (session_id.to_owned(), ChannelKind::Terminal(uri.to_owned())),
        );
        Ok(())
    }

    /// Forgets a terminal URI.
    pub fn unbind_terminal(&self, uri: &str) {
        let mut reg = lock(&self.registry);
        if matches!(reg.by_uri.get(uri), Some((_, ChannelKind::Terminal(_)))) {
            reg.by_uri.remove(uri);
        }
    }

    /// A file version one of a session's tool calls read or wrote, by its content URI
    /// (`claude-host-content:/<session>/<sha256>/…`).
    pub async fn read_content(&self, uri: &str) -> Result<Vec<u8>, AgentError> {
        let Some((session, hash)) = crate::edits::book::parse_content_uri(uri) else {
            return Err(AgentError::Invalid(format!("{uri} is not a content URI")));
        };
        let Some(root) = &self.config.edits_dir else {
            return Err(AgentError::Unsupported(
                "this host does not track edits".into(),
            ));
        };
        // Session ids are UUIDs: nothing else may become a path.
        if uuid::Uuid::parse_str(session).is_err() {
            return Err(AgentError::UnknownSession(session.to_owned()));
        }
        let path = root.join(session).join("content").join(hash);
        let hash = hash.to_owned();
        let read = tokio::task::spawn_blocking(move || std::fs::read(path)).await;
        match read {
            Ok(Ok(bytes)) => Ok(bytes),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => Err(AgentError::Session(
                ChatSessionError::Refused(crate::edits::EditError::NotKept(hash).to_string()),
            )),
            Ok(Err(e)) => Err(AgentError::Invalid(format!("cannot read {uri}: {e}"))),
            Err(e) => Err(AgentError::Invalid(format!("cannot read {uri}: {e}"))),
        }
    }

    /// Session-list changes (created, changed, removed).
    pub fn notices(&self) -> broadcast::Receiver<SessionNotice> {
        self.notices.subscribe()
    }

    /// How many session tasks are running.
    pub fn running_sessions(&self) -> usize {
        self.live_tasks.load(Ordering::SeqCst)
    }

    /// The model edge.
    pub fn models_access(&self) -> &Arc<dyn ModelAccess> {
        &self.models
    }

    /// The resources a client can authenticate against, `required` while the host has no
    /// working credential. The AHP host republishes them (`root/agentsChanged`) whenever an
    /// `authenticate` changes that.
    pub fn protected_resources(&self) -> Vec<ProtectedResourceMetadata> {
        models::protected_resources(!self.is_authenticated())
    }

    /// Where the customizations of a session in `cwd` come from: the CLI's config folder
    /// (`CLAUDE_CONFIG_DIR`, else `$HOME/.claude` with the `HOME` the CLI gets).
    fn customization_sources(&self, cwd: &std::path::Path) -> crate::customizations::Sources {
        let home = self
            .config
            .extra_env
            .iter()
            .find(|(k, _)| k == "HOME")
            .map(|(_, v)| PathBuf::from(v))
            .or_else(|| std::env::var_os("HOME").map(PathBuf::from))
            .unwrap_or_default();
        crate::customizations::Sources::new(self.config.config_dir.as_deref(), &home, cwd)
    }

    /// The agent's descriptor with its current models (none before authentication) and the
    /// user's own customizations (those every session has).
    pub async fn info(&self) -> AgentInfo {
        let sources = self.customization_sources(&self.config.default_cwd);
        let customizations =
            tokio::task::spawn_blocking(move || crate::customizations::discover_user(&sources))
                .await
                .ok();
        AgentInfo {
            provider: "claude".into(),
            display_name: "Claude".into(),
            description: "Claude Code sessions run by claude-host, models through GitHub Copilot"
                .into(),
            models: self.models().await.unwrap_or_default(),
            protected_resources: Some(self.protected_resources()),
            customizations,
            capabilities: None,
        }
    }

    /// Accepts a GitHub token for `resource` (see [`ModelAccess::authenticate`]).
    pub async fn authenticate(&self, resource: &str, token: &str) -> Result<bool, AgentError> {
        if self.shut_down.initialized() {
            return Err(AgentError::ShutDown);
        }
        self.models.authenticate(resource, token).await
    }

    /// Whether an upstream is in place.
    pub fn is_authenticated(&self) -> bool {
        self.models.is_authenticated()
    }

    /// The Claude models on offer, the default first, each with its effort levels.
    pub async fn models(&self) -> Result<Vec<SessionModelInfo>, AgentError> {
        Ok(self
            .models
            .catalog()
            .await?
            .iter()
            .map(model_info)
            .collect())
    }

    /// The session configuration schema clients render (models, effort, permission modes).
    pub async fn config_schema(&self) -> Result<ahp_types::state::SessionConfigSchema, AgentError> {
        let models = self.models().await?;
        Ok(crate::config::schema(
            &models,
            self.config.allow_bypass_permissions,
        ))
    }

    /// The environment that names the models of Claude Code's roles for a new CLI (nothing
    /// before a sign-in: the catalog decides the defaults).
    async fn role_env(&self) -> Vec<(String, String)> {
        let Ok(models) = self.models.catalog().await else {
            return Vec::new();
        };
        let catalog = claude_host_upstream::Catalog {
            models,
            strict: true,
        };
        catalog
            .roles(
                self.config.small_model.as_deref(),
                self.config.subagent_model.as_deref(),
            )
            .env()
    }

    async fn checked_model(
        &self,
        models: &[SessionModelInfo],
        model: Option<String>,
    ) -> Result<Option<String>, AgentError> {
        let Some(model) = model else {
            return Ok(None);
        };
        let catalog = self.models.catalog().await?;
        match models::find(&catalog, &model) {
            Some(m) => Ok(Some(m.upstream_id.clone())),
            None => Err(AgentError::UnknownModel {
                model,
                available: models
                    .iter()
                    .map(|m| m.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    fn options(
        &self,
        id: &str,
        cwd: PathBuf,
        extra_dirs: &[PathBuf],
    ) -> Result<SessionOptions, AgentError> {
        let endpoint = self.models.endpoint(id)?;
        let mut opts = SessionOptions::new(
            self.config.cli.clone(),
            cwd,
            endpoint.base_url,
            endpoint.token,
        );
        opts.config_dir = self.config.config_dir.clone();
        opts.keeper = self.config.keeper.clone();
        opts.extra_env = self.config.extra_env.clone();
        opts.include_partial_messages = true;
        opts.additional_directories = extra_dirs.to_vec();
        opts.disallowed_tools
            .extend(self.config.disallowed_tools.iter().cloned());
        Ok(opts)
    }

    fn check_mode(&self, mode: Option<&str>) -> Result<(), AgentError> {
        if mode == Some("bypassPermissions") && !self.config.allow_bypass_permissions {
            return Err(AgentError::Invalid(
                "bypassPermissions is not allowed on this host".into(),
            ));
        }
        Ok(())
    }

    fn on_exit(&self, id: &str) -> Box<dyn FnOnce(u64) + Send + Sync> {
        let registry = Arc::downgrade(&self.registry);
        let notices = self.notices.clone();
        let id = id.to_owned();
        Box::new(move |instance| {
            let Some(registry) = registry.upgrade() else {
                return;
            };
            if let Some(h) = lock(&registry).remove(&id, Some(instance)) {
                let _ = notices.send(SessionNotice::Removed {
                    session: h.resource().to_owned(),
                });
            }
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn spec(
        &self,
        id: String,
        uris: SessionUris,
        opts: SessionOptions,
        working_directories: Vec<PathBuf>,
        models: Vec<SessionModelInfo>,
        title: String,
        turns: Vec<Turn>,
        resumable: bool,
        overlay: Overlay,
        idle_eviction: Option<Duration>,
    ) -> SessionSpec {
        let created_at = match &overlay {
            Overlay::Known(Some(r)) => r.created_at,
            _ => now_millis(),
        };
        let edits = self.config.edits_dir.as_ref().and_then(|dir| {
            crate::edits::Tracker::open(
                dir.join(&id),
                working_directories.clone(),
                crate::edits::Limits::default(),
            )
            .map(Arc::new)
            .map_err(|e| {
                tracing::warn!(session = %id, error = %e, "edits in this session are not tracked");
            })
            .ok()
        });
        let customs = crate::session::CustomsSpec {
            sources: self.customization_sources(&opts.cwd),
            dir: self
                .config
                .customizations_dir
                .as_ref()
                .map(|d| d.join("sessions").join(&id)),
            global: self
                .config
                .customizations_dir
                .as_ref()
                .map(|d| d.join("global.json")),
            stored: None,
            stored_global: None,
        };
        SessionSpec {
            edits,
            customs,
            cli_idle: self.config.cli_idle,
            warm_up: self.config.warm_up,
            uncut_warm_up: None,
            meters: self.meters.clone(),
            on_exit: self.on_exit(&id),
            id,
            uris,
            opts,
            working_directories,
            models,
            allow_bypass: self.config.allow_bypass_permissions,
            title,
            turns,
            subagents: Vec::new(),
            resumable,
            created_at,
            store: self.store.clone(),
            overlay,
            seq: self.seq.clone(),
            replay_capacity: self.config.replay_buffer,
            abort_grace: self.config.abort_grace,
            client_grace: self.config.client_tool_grace,
            idle_eviction,
            notices: self.notices.clone(),
            live_tasks: self.live_tasks.clone(),
            prompts: self.models.prompts(),
            durable: self
                .config
                .durable
                .as_ref()
                .zip(self.mirror.as_ref())
                .map(|(d, m)| crate::session::SessionDurable {
                    mirror: m.clone(),
                    host: d.host.clone(),
                    fence: None,
                    db: d.db.clone(),
                }),
        }
    }

    /// The global customization decisions as the shared store keeps them (`None`: no shared
    /// store, none stored yet, or it cannot be read: the host's file is used).
    async fn shared_global_decisions(&self) -> Option<crate::customizations::Decisions> {
        let d = self.config.durable.as_ref()?;
        let read = tokio::time::timeout(
            Duration::from_secs(2),
            d.db.shared
                .get_value(crate::customizations::GLOBAL_DECISIONS_KEY),
        )
        .await;
        let json = match read {
            Ok(Ok(v)) => v?,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot read the shared global customization decisions; using this host's");
                return None;
            }
            Err(_) => {
                tracing::warn!(
                    "the database did not answer for the global customization decisions; using this host's"
                );
                return None;
            }
        };
        serde_json::from_str(&json)
            .map_err(|e| tracing::warn!(error = %e, "the shared global customization decisions are unreadable; using this host's"))
            .ok()
    }

    /// The transcript mirror, when the host keeps sessions in a shared store.
    pub fn mirror(&self) -> Option<&crate::mirror::Mirror> {
        self.mirror.as_ref()
    }

    /// Takes the session's lease for this host, or says who holds it; the lease taken (with
    /// the instant it was asked for, from which this host counts its deadline), or `None`
    /// when the host keeps no shared store, or runs unleased by choice and the database
    /// cannot be reached.
    async fn take_lease(&self, id: &str) -> Result<Option<TakenLease>, AgentError> {
        let Some(d) = &self.config.durable else {
            return Ok(None);
        };
        let asked = tokio::time::Instant::now();
        let taken =
            tokio::time::timeout(d.lease_ttl, d.db.leases.acquire(id, &d.host, d.lease_ttl))
                .await
                .unwrap_or_else(|_| {
                    Err(claude_host_store::StoreError::Query(format!(
                        "no answer within the lease time ({} ms)",
                        d.lease_ttl.as_millis()
                    )))
                });
        match taken {
            Ok(lease) => {
                tracing::info!(session = %id, epoch = lease.epoch, "took the session's lease");
                if let Some(m) = &self.mirror {
                    m.lease(id, Some(lease.fence()));
                }
                Ok(Some(TakenLease { lease, asked }))
            }
            Err(claude_host_store::StoreError::Held {
                session_id,
                holder,
                since,
                expires,
            }) => {
                tracing::info!(session = %id, %holder, "the session is held by another host");
                Err(AgentError::Held {
                    session_id,
                    holder,
                    since,
                    expires,
                })
            }
            Err(e) if d.allow_unleased => {
                tracing::warn!(session = %id, error = %e, database = %d.db.location, "cannot take the session's lease; driving it unleased (--allow-unleased)");
                self.unleased.fetch_add(1, Ordering::SeqCst);
                if let Some(m) = &self.mirror {
                    m.lease(id, None);
                }
                Ok(None)
            }
            Err(e) => {
                tracing::error!(session = %id, error = %e, database = %d.db.location, "cannot take the session's lease; refused");
                Err(AgentError::LeaseUnavailable {
                    session_id: id.to_owned(),
                    database: d.db.location.clone(),
                    message: e.to_string(),
                })
            }
        }
    }

    /// How many sessions this host has driven without a lease (`--allow-unleased`).
    pub fn unleased_sessions(&self) -> usize {
        self.unleased.load(Ordering::SeqCst)
    }

    /// Renews the lease of a live session until it closes, then flushes its transcript and
    /// gives the lease up. A lease not renewed by its deadline (counted on this host's clock
    /// from when it was asked for), or taken by another host, stops the session here.
    fn keep_lease(&self, handle: &SessionHandle, taken: Option<TakenLease>) {
        let (Some(d), Some(TakenLease { lease, asked })) = (self.config.durable.clone(), taken)
        else {
            return;
        };
        let handle = handle.clone();
        let mirror = self.mirror.clone();
        let job = tokio::spawn(async move {
            let id = handle.id().to_owned();
            let fence = lease.fence();
            let every = (d.lease_ttl / 3).max(Duration::from_millis(100));
            let retry = (d.lease_ttl / 10).max(Duration::from_millis(50));
            let mut deadline = asked + d.lease_ttl;
            let mut next = tokio::time::Instant::now() + every;
            let lost = loop {
                tokio::select! {
                    () = handle.closed() => break None,
                    () = tokio::time::sleep_until(next.min(deadline)) => {
                        if tokio::time::Instant::now() >= deadline {
                            break Some(format!("this host could not renew its lease on the session in time (the database did not answer); it may be driven elsewhere now (lease epoch {})", fence.epoch));
                        }
                        let sent = tokio::time::Instant::now();
                        let renewed = tokio::time::timeout_at(deadline, d.db.leases.renew(&id, &fence, d.lease_ttl)).await;
                        match renewed {
                            Ok(Ok(_)) => {
                                deadline = sent + d.lease_ttl;
                                next = sent + every;
                            }
                            Ok(Err(claude_host_store::StoreError::Held { holder, since, .. })) => {
                                break Some(format!("the session is held by {holder} since {since}; this host's lease ran out and it stopped driving the session"));
                            }
                            Ok(Err(e @ claude_host_store::StoreError::Fenced { .. })) => {
                                break Some(format!("this host's lease on the session is no longer valid ({e}); it stopped driving the session"));
                            }
                            Ok(Err(e)) => {
                                tracing::warn!(session = %id, error = %e, "cannot renew the session's lease; retrying until it runs out");
                                next = tokio::time::Instant::now() + retry;
                            }
                            Err(_) => {
                                break Some(format!("this host could not renew its lease on the session in time (the database did not answer); it may be driven elsewhere now (lease epoch {})", fence.epoch));
                            }
                        }
                    }
                }
            };
            match lost {
                Some(message) => {
                    // Nothing more of the session is written from here, then it stops.
                    if let Some(m) = &mirror {
                        m.forget(&id);
                    }
                    handle.lease_lost(message).await;
                }
                None => {
                    // What its CLI wrote last reaches the store under this lease, then the
                    // lease is given back (bounded by the lease: past it the writes would be
                    // refused anyway).
                    if let Some(m) = &mirror {
                        let _ = tokio::time::timeout_at(deadline, m.flush()).await;
                        m.forget(&id);
                    }
                    match tokio::time::timeout(
                        Duration::from_secs(5),
                        d.db.leases.release(&id, &fence),
                    )
                    .await
                    {
                        Ok(Ok(())) => {
                            tracing::info!(session = %id, epoch = fence.epoch, "gave the session's lease back")
                        }
                        Ok(Err(e)) => {
                            tracing::warn!(session = %id, error = %e, "cannot release the session's lease; it runs out by itself")
                        }
                        Err(_) => {
                            tracing::warn!(session = %id, "the database did not answer the lease's release; it runs out by itself")
                        }
                    }
                }
            }
        });
        let mut jobs = lock(&self.lease_jobs);
        jobs.retain(|j| !j.is_finished());
        jobs.push(job);
    }

    /// Brings a session's transcript from the shared store into the CLI's projects folder when
    /// this host's copy is missing or shorter (the session ran elsewhere); marks it for a
    /// catch-up when this host's copy is longer (the store was down).
    async fn materialize(&self, id: &str) {
        let (Some(d), Some(config)) = (&self.config.durable, self.config_dir()) else {
            return;
        };
        if let Err(e) = self.try_materialize(d, &config.join("projects"), id).await {
            tracing::warn!(session = %id, error = %e, "cannot bring the session from the shared store; using this host's copy");
        }
    }

    async fn try_materialize(
        &self,
        d: &Durable,
        projects: &std::path::Path,
        id: &str,
    ) -> Result<(), String> {
        use claude_host_store::TranscriptKey;
        let t = &d.db.transcripts;
        let Some(project) = t.project_of(id).await.map_err(|e| e.to_string())? else {
            return Ok(());
        };
        let main = TranscriptKey::main(&project, id);
        let stored = t.count(&main).await.map_err(|e| e.to_string())?;
        let path = crate::mirror::file_for(projects, &main);
        let local_path = path.clone();
        let local = tokio::task::spawn_blocking(move || crate::mirror::mirrored_lines(&local_path))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        let stored_lines = t.load(&main).await.map_err(|e| e.to_string())?;
        let lines = stored_lines.as_deref().unwrap_or_default();
        // This host's copy may go on from the store's (the store was down while it ran): it
        // is caught up. A copy that differs from the store's within what both have holds
        // lines written under a lease that was lost (the session went on elsewhere): the
        // store's copy is the session, and replaces it.
        let same_prefix =
            local.len() >= lines.len() && local.iter().zip(lines).all(|(a, b)| same_entry(a, b));
        if same_prefix {
            if local.len() as u64 > stored
                && let Some(m) = &self.mirror
            {
                m.catch_up(path);
            }
            return Ok(());
        }
        if !local.is_empty() {
            tracing::warn!(session = %id, local = local.len(), stored, "this host's copy of the session differs from the shared store's (lines written after its lease was lost); the store's copy replaces it");
        }
        let mut files = vec![(path, stored_lines)];
        for sub in t
            .list_subkeys(&project, id)
            .await
            .map_err(|e| e.to_string())?
        {
            let key = TranscriptKey {
                subpath: Some(sub),
                ..main.clone()
            };
            files.push((
                crate::mirror::file_for(projects, &key),
                t.load(&key).await.map_err(|e| e.to_string())?,
            ));
        }
        let count = files.len();
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            for (path, lines) in files {
                if let Some(lines) = lines {
                    crate::mirror::write_transcript(&path, &lines)?;
                }
            }
            Ok(())
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
        tracing::info!(session = %id, project = %project, entries = stored, files = count, "brought the session from the shared store");
        Ok(())
    }

    /// Creates a session: provisional (no process, nothing written) unless `warm`.
    pub async fn create_session(&self, new: NewSession) -> Result<SessionHandle, AgentError> {
        if self.shut_down.initialized() || self.stopping.load(Ordering::SeqCst) {
            return Err(AgentError::ShutDown);
        }
        if !self.models.is_authenticated() {
            return Err(auth_required());
        }
        let id = match &new.id {
            Some(id) if uuid::Uuid::parse_str(id).is_ok() => id.clone(),
            Some(id) => {
                return Err(AgentError::Invalid(format!(
                    "session id {id:?} is not a UUID"
                )));
            }
            None => uuid::Uuid::new_v4().to_string(),
        };
        let uris = new.uris.clone().unwrap_or_else(|| default_uris(&id));
        {
            let reg = lock(&self.registry);
            if reg.by_id.contains_key(&id) {
                return Err(AgentError::SessionExists(id));
            }
            if let Some(u) = [&uris.session, &uris.chat]
                .into_iter()
                .find(|u| reg.by_uri.contains_key(*u))
            {
                return Err(AgentError::SessionExists(u.clone()));
            }
        }
        self.check_mode(new.permission_mode.as_deref())?;
        let models = self.models().await?;
        let model = self.checked_model(&models, new.model.clone()).await?;
        let dirs = if new.working_directories.is_empty() {
            vec![self.config.default_cwd.clone()]
        } else {
            new.working_directories.clone()
        };
        let mut opts = self.options(&id, dirs[0].clone(), &dirs[1..])?;
        opts.extra_env.extend(self.role_env().await);
        opts.model = model;
        opts.effort = new.effort.clone();
        opts.permission_mode = new.permission_mode.clone().filter(|m| m != "default");
        let spec = self.spec(
            id.clone(),
            uris,
            opts,
            dirs.clone(),
            models,
            String::new(),
            Vec::new(),
            false,
            if self.store.is_some() {
                Overlay::Known(None)
            } else {
                Overlay::Off
            },
            None,
        );
        let mut spec = spec;
        let taken = self.take_lease(&id).await?;
        spec.customs.stored_global = self.shared_global_decisions().await;
        if let Some(d) = &mut spec.durable {
            d.fence = taken.as_ref().map(|t| t.lease.fence());
        }
        let handle = {
            let mut reg = lock(&self.registry);
            if reg.by_id.contains_key(&id) {
                return Err(AgentError::SessionExists(id));
            }
            let handle = session::spawn(spec);
            reg.insert(handle.clone());
            handle
        };
        self.keep_lease(&handle, taken);
        let now = now_rfc3339();
        let _ = self
            .notices
            .send(SessionNotice::Added(Box::new(SessionSummary {
                provider: "claude".into(),
                title: String::new(),
                status: 1,
                activity: None,
                origin: None,
                project: None,
                working_directories: Some(dirs.iter().map(|d| file_uri(d)).collect()),
                annotations: None,
                resource: handle.resource().to_owned(),
                created_at: now.clone(),
                modified_at: now,
                changes: None,
                meta: None,
                chats: None,
                default_chat: Some(handle.chat_uri().to_owned()),
            })));
        if new.warm
            && let Err(e) = handle.warm().await
        {
            tracing::warn!(session = %id, error = %e, "could not warm the session's CLI");
        }
        Ok(handle)
    }

    /// A live session by id.
    pub fn session(&self, id: &str) -> Option<SessionHandle> {
        lock(&self.registry).by_id.get(id).cloned()
    }

    /// Every live session.
    pub fn live_sessions(&self) -> Vec<SessionHandle> {
        lock(&self.registry).by_id.values().cloned().collect()
    }

    /// Which session and channel a URI names: a live session's URI, or one of this host's
    /// URI forms (for sessions that can be restored).
    pub fn resolve(&self, uri: &str) -> Option<(String, ChannelKind)> {
        use claude_host_protocol::uri::session_of_subagent_chat;
        let reg = lock(&self.registry);
        if let Some(found) = reg.by_uri.get(uri) {
            return Some(found.clone());
        }
        // A subagent's chat is named after its session's URI, which a client may have chosen.
        if let Some((session, call)) = session_of_subagent_chat(uri)
            && let Some((id, ChannelKind::Session)) = reg.by_uri.get(&session)
        {
            return Some((id.clone(), ChannelKind::Subagent(call)));
        }
        if let Some((session, scope)) = changeset_of(uri)
            && let Some((id, ChannelKind::Session)) = reg.by_uri.get(session)
        {
            return Some((id.clone(), ChannelKind::Changeset(scope)));
        }
        if let Some(session) = tool_terminal_of(uri)
            && let Some((id, ChannelKind::Session)) = reg.by_uri.get(session)
        {
            return Some((id.clone(), ChannelKind::Terminal(uri.to_owned())));
        }
        drop(reg);
        session_id_of(uri)
    }

    fn config_dir(&self) -> Option<PathBuf> {
        claude_host_sdk::transcripts::config_dir(
            self.config.config_dir.as_deref(),
            &self.config.extra_env,
        )
    }

    /// A session by id: the live one, or one restored from its transcript (a session of
    /// this host or of the user's own `claude`), with the host's overlay applied. A restored
    /// session closes itself after a while with nobody using it.
    pub async fn open_session(&self, id: &str) -> Result<SessionHandle, AgentError> {
        if let Some(s) = self.session(id) {
            return Ok(s);
        }
        if self.shut_down.initialized() || self.stopping.load(Ordering::SeqCst) {
            return Err(AgentError::ShutDown);
        }
        if uuid::Uuid::parse_str(id).is_err() {
            return Err(AgentError::UnknownSession(id.to_owned()));
        }
        let taken = self.take_lease(id).await?;
        self.materialize(id).await;
        let fence = taken.as_ref().map(|t| t.lease.fence());
        let opened = self.restore(id, fence.clone()).await;
        match &opened {
            Ok(handle) => self.keep_lease(handle, taken),
            Err(_) => {
                if let Some(m) = &self.mirror {
                    m.forget(id);
                }
                if let (Some(d), Some(fence)) = (&self.config.durable, &fence)
                    && self.session(id).is_none()
                    && let Err(e) = d.db.leases.release(id, fence).await
                {
                    tracing::debug!(session = %id, error = %e, "cannot release the lease");
                }
            }
        }
        opened
    }

    async fn restore(
        &self,
        id: &str,
        fence: Option<claude_host_store::Fence>,
    ) -> Result<SessionHandle, AgentError> {
        let config = self
            .config_dir()
            .ok_or_else(|| AgentError::UnknownSession(id.to_owned()))?;
        let overlay = match &self.store {
            None => Overlay::Off,
            Some(store) => match store.get(id).await {
                Ok(r) => Overlay::Known(r),
                Err(e) => {
                    tracing::warn!(session = %id, error = %e, "cannot read the session overlay; it will not be written");
                    Overlay::Unknown
                }
            },
        };
        let record: Option<SessionRecord> = match &overlay {
            Overlay::Known(r) => r.clone(),
            _ => None,
        };
        let read_id = id.to_owned();
        let (restored, subagents) = crate::restore::on_own_thread(move || {
            let main = crate::restore::read_session(&config, &read_id)?;
            let paths = claude_host_sdk::transcripts::subagent_transcripts(&config, &read_id)
                .unwrap_or_default();
            Ok::<_, claude_host_sdk::transcripts::TranscriptError>((
                main,
                crate::restore::subagents_from_transcripts(&paths),
            ))
        })
        .await
        .map_err(|e| AgentError::Unsupported(format!("reading the transcript failed: {e}")))?
        .map_err(|_| AgentError::UnknownSession(id.to_owned()))?;
        let crate::restore::Restored {
            conversation:
                crate::restore::Conversation {
                    turns,
                    uncut_warm_up,
                },
            title: transcript_title,
            cwd: transcript_cwd,
        } = restored;
        let title = record
            .as_ref()
            .and_then(|r| r.title.clone())
            .filter(|t| !t.is_empty())
            .or(transcript_title)
            .unwrap_or_default();
        let cwd = match &record {
            Some(r) if !r.cwd.is_empty() => PathBuf::from(&r.cwd),
            _ => transcript_cwd.ok_or_else(|| AgentError::UnknownSession(id.to_owned()))?,
        };
        // Its history needs no sign-in: a client that reconnects after a restart subscribes
        // before it authenticates. Signed out, the session offers no models to pick.
        let models = match self.models().await {
            Ok(m) => m,
            Err(AgentError::AuthRequired { .. }) => Vec::new(),
            Err(e) => return Err(e),
        };
        let mut opts = self.options(id, cwd.clone(), &[])?;
        opts.extra_env.extend(self.role_env().await);
        opts.model = record.as_ref().and_then(|r| r.model.clone());
        opts.effort = record.as_ref().and_then(|r| r.effort.clone());
        opts.permission_mode = record
            .as_ref()
            .and_then(|r| r.permission_mode.clone())
            .filter(|m| m != "bypassPermissions" || self.config.allow_bypass_permissions);
        let mut spec = self.spec(
            id.to_owned(),
            // The name its client chose, kept in the overlay; else the host's own.
            record
                .as_ref()
                .and_then(|r| r.resource.as_deref())
                .filter(|u| claude_host_protocol::uri::session_uri_id(u) == Some(id))
                .map_or_else(|| default_uris(id), uris_for),
            opts,
            vec![cwd.clone()],
            models,
            title,
            turns,
            true,
            overlay,
            Some(self.config.idle_eviction),
        );
        spec.subagents = subagents;
        spec.customs.stored_global = self.shared_global_decisions().await;
        if let Some(d) = &mut spec.durable {
            d.fence = fence;
            spec.customs.stored = record
                .as_ref()
                .and_then(|r| r.decisions.as_deref())
                .and_then(|j| {
                    serde_json::from_str(j)
                        .map_err(|e| tracing::warn!(session = %id, error = %e, "the stored customization decisions are unreadable; using this host's"))
                        .ok()
                });
        }
        if let Some(u) = &uncut_warm_up {
            tracing::info!(session = %id, warm_up = %u, "the transcript ends in a warm-up turn that was not cut; the next CLI resumes before it");
        }
        spec.uncut_warm_up = uncut_warm_up;
        let mut reg = lock(&self.registry);
        // A concurrent open may have won; keep one.
        if let Some(existing) = reg.by_id.get(id) {
            return Ok(existing.clone());
        }
        let handle = session::spawn(spec);
        reg.insert(handle.clone());
        drop(reg);
        Ok(handle)
    }

    /// Forks a session at `keep_turns` turns into a new live session.
    pub async fn fork_session(
        &self,
        id: &str,
        keep_turns: usize,
    ) -> Result<SessionHandle, AgentError> {
        let source = self.open_session(id).await?;
        let forked = source.fork(keep_turns).await?;
        let fork = self.open_session(&forked.id).await?;
        let mut values = ahp_types::common::JsonObject::new();
        for (k, v) in [
            (crate::config::MODEL, forked.model),
            (crate::config::EFFORT, forked.effort),
            (crate::config::PERMISSION_MODE, forked.permission_mode),
        ] {
            if let Some(v) = v {
                values.insert(k.into(), serde_json::Value::String(v));
            }
        }
        if !values.is_empty() {
            fork.configure(values).await?;
        }
        Ok(fork)
    }

    /// Every session: live ones of this host, the host's overlay, and the transcripts on
    /// disk (including sessions of the user's own `claude`), newest first.
    pub async fn list_sessions(&self) -> Vec<SessionListing> {
        let transcripts = match self.config_dir() {
            Some(config) => {
                let listed = tokio::task::spawn_blocking(move || {
                    claude_host_sdk::transcripts::list_sessions(&config, None)
                        .map_err(|e| e.to_string())
                })
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r);
                listed.unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "cannot list the CLI's sessions");
                    Vec::new()
                })
            }
            None => Vec::new(),
        };
        let records = match &self.store {
            Some(store) => store.list(true).await.unwrap_or_else(|e| {
                tracing::warn!(error = %e, "cannot read the session overlay");
                Vec::new()
            }),
            None => Vec::new(),
        };
        // A provisional session (nothing sent yet, no transcript) is not listed.
        let live: Vec<crate::listing::Live> = self
            .live_sessions()
            .iter()
            .filter(|h| h.session_id().is_some())
            .map(|h| {
                let s = h.status();
                crate::listing::Live {
                    id: h.id().to_owned(),
                    resource: h.resource().to_owned(),
                    title: s.title,
                    cwd: h.cwd().display().to_string(),
                    model: s.model,
                }
            })
            .collect();
        merge(transcripts, records, live)
    }

    /// Closes a live session (its CLI stops; the transcript stays).
    pub async fn dispose_session(&self, id: &str) -> Result<(), AgentError> {
        let handle = lock(&self.registry)
            .remove(id, None)
            .ok_or_else(|| AgentError::UnknownSession(id.to_owned()))?;
        handle.close().await;
        let _ = self.notices.send(SessionNotice::Removed {
            session: handle.resource().to_owned(),
        });
        Ok(())
    }

    /// Stops every session (no child is left behind), then the model edge. Later calls return
    /// at once.
    pub async fn shutdown(&self) {
        self.shut_down
            .get_or_init(|| async {
                self.stopping.store(true, Ordering::SeqCst);
                // Running turns may finish (bounded); what still runs then is cancelled by
                // the close below.
                let running: Vec<SessionHandle> = self
                    .live_sessions()
                    .into_iter()
                    .filter(|s| s.status().turn.is_some())
                    .collect();
                if !running.is_empty() {
                    tracing::info!(sessions = running.len(), grace = ?self.config.shutdown_grace, "letting running turns finish before stopping");
                    let all = async {
                        for s in &running {
                            s.wait_idle().await;
                        }
                    };
                    if tokio::time::timeout(self.config.shutdown_grace, all)
                        .await
                        .is_err()
                    {
                        tracing::warn!("turns still running after the grace period are cancelled");
                    }
                }
                let sessions: Vec<SessionHandle> = {
                    let mut reg = lock(&self.registry);
                    reg.by_uri.clear();
                    reg.by_id.drain().map(|(_, s)| s).collect()
                };
                let mut closing = tokio::task::JoinSet::new();
                for s in sessions {
                    closing.spawn(async move { s.close().await });
                }
                while closing.join_next().await.is_some() {}
                // Children die before the proxy they talk to.
                self.models.shutdown().await;
                // Each session's lease keeper saw it close: it flushes what the CLI wrote last
                // into the shared store under the session's lease, then gives the lease back
                // (bounded by the lease: a database that does not answer gets neither, and the
                // lease runs out by itself).
                let jobs: Vec<_> = std::mem::take(&mut *lock(&self.lease_jobs));
                let bound = self
                    .config
                    .durable
                    .as_ref()
                    .map_or(Duration::ZERO, |d| d.lease_ttl + Duration::from_secs(5));
                let all = async {
                    for j in jobs {
                        let _ = j.await;
                    }
                };
                if tokio::time::timeout(bound, all).await.is_err()
                {
                    tracing::warn!("the session store did not take the last transcript lines or lease releases in time; the leases run out by themselves");
                }
                if let Some(m) = &self.mirror
                    && tokio::time::timeout(Duration::from_secs(10), m.flush())
                        .await
                        .is_err()
                {
                    tracing::warn!("the session store did not take the last transcript lines in time; they stay in the local files");
                }

            })
            .await;
    }
}
