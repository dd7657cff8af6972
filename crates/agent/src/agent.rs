//! The `claude` agent: identity, GitHub authentication (which starts the proxy), the model
//! list, and the sessions of one host.

use crate::session::{ChatSession, ChatSessionError};
use ahp_types::state::{AgentInfo, ProtectedResourceMetadata, SessionModelInfo};
use claude_host_proxy::{ProxyConfig, ProxyHandle};
use claude_host_sdk::SessionOptions;
use claude_host_store::{SessionRecord, Store};
use claude_host_upstream::{CatalogModel, Upstream, UpstreamError};
use serde_json::json;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The protected resource the agent needs a token for: a GitHub account with Copilot.
pub const GITHUB_RESOURCE: &str = "https://api.github.com";

/// The URI scheme of the agent's sessions (`claude:/<session id>`).
pub const SESSION_SCHEME: &str = "claude";

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
    /// The proxy could not be started.
    #[error("cannot start the model proxy: {0}")]
    Proxy(String),
    /// No session with this URI or id.
    #[error("no session {0}")]
    UnknownSession(String),
    /// The model is not one the agent offers.
    #[error("unknown model {model:?}; available: {available}")]
    UnknownModel {
        /// What was asked for.
        model: String,
        /// What exists.
        available: String,
    },
    /// A session operation failed.
    #[error(transparent)]
    Session(#[from] ChatSessionError),
    /// The agent has been shut down.
    #[error("the agent is shut down")]
    ShutDown,
}

/// Builds the model upstream for a GitHub token (tests point it at the fake).
pub trait UpstreamFactory: Send + Sync + 'static {
    /// An upstream that authenticates with `github_token`.
    fn for_github_token(&self, github_token: &str) -> Arc<dyn Upstream>;
}

impl<F> UpstreamFactory for F
where
    F: Fn(&str) -> Arc<dyn Upstream> + Send + Sync + 'static,
{
    fn for_github_token(&self, github_token: &str) -> Arc<dyn Upstream> {
        self(github_token)
    }
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
    /// The proxy's listener and limits.
    pub proxy: ProxyConfig,
}

/// What a new session starts with.
#[derive(Debug, Clone, Default)]
pub struct NewSession {
    /// The Claude session id to use (a UUID); `None` picks one.
    pub id: Option<String>,
    /// Working directory (default: the agent's).
    pub cwd: Option<PathBuf>,
    /// Model id, Copilot (`claude-sonnet-4.5`) or Claude Code form.
    pub model: Option<String>,
    /// Reasoning effort.
    pub effort: Option<String>,
    /// Permission mode.
    pub permission_mode: Option<String>,
    /// Start the CLI now, so the first prompt does not wait for it.
    pub warm: bool,
}

/// One entry of the session list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionListing {
    /// The Claude session id.
    pub id: String,
    /// `claude:/<id>`.
    pub resource: String,
    /// Title: the host's, else the CLI's summary or first prompt.
    pub title: String,
    /// Working directory, when known.
    pub cwd: Option<String>,
    /// Last change, milliseconds since the epoch.
    pub modified_at: i64,
    /// Model chosen in the host, if any.
    pub model: Option<String>,
    /// Archived in the host.
    pub archived: bool,
    /// Whether claude-host has an overlay for it (else it came from the user's own `claude`).
    pub from_host: bool,
}

struct Auth {
    token: String,
    proxy: ProxyHandle,
    upstream: Arc<dyn Upstream>,
}

/// The `claude` agent of one host.
pub struct Agent {
    config: AgentConfig,
    factory: Arc<dyn UpstreamFactory>,
    store: Option<Arc<dyn Store>>,
    auth: tokio::sync::Mutex<Option<Auth>>,
    sessions: Mutex<HashMap<String, Arc<ChatSession>>>,
    shut_down: tokio::sync::OnceCell<()>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn millis(t: std::time::SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The session id inside a `claude:/<id>` URI (a bare id is accepted too).
pub fn session_id_of(resource: &str) -> &str {
    resource
        .strip_prefix(SESSION_SCHEME)
        .and_then(|r| r.strip_prefix(':'))
        .map_or(resource, |r| r.trim_start_matches('/'))
}

/// The URI of a session id.
pub fn session_resource(id: &str) -> String {
    format!("{SESSION_SCHEME}:/{id}")
}

impl Agent {
    /// An agent with no credentials yet; `authenticate` starts its proxy.
    pub fn new(
        config: AgentConfig,
        factory: Arc<dyn UpstreamFactory>,
        store: Option<Arc<dyn Store>>,
    ) -> Agent {
        Agent {
            config,
            factory,
            store,
            auth: tokio::sync::Mutex::new(None),
            sessions: Mutex::new(HashMap::new()),
            shut_down: tokio::sync::OnceCell::new(),
        }
    }

    /// The resources a client must authenticate against.
    pub fn protected_resources(&self) -> Vec<ProtectedResourceMetadata> {
        let meta = json!({
            "resource": GITHUB_RESOURCE,
            "resource_name": "GitHub Copilot",
            "authorization_servers": ["https://github.com/login/oauth"],
            "scopes_supported": ["read:user", "user:email"],
            "bearer_methods_supported": ["header"],
            "required": true,
        });
        serde_json::from_value(meta).into_iter().collect()
    }

    /// The agent's descriptor with its current models (none before authentication).
    pub async fn info(&self) -> AgentInfo {
        AgentInfo {
            provider: "claude".into(),
            display_name: "Claude".into(),
            description: "Claude Code sessions run by claude-host, models through GitHub Copilot"
                .into(),
            models: self.models().await.unwrap_or_default(),
            protected_resources: Some(self.protected_resources()),
            customizations: None,
            capabilities: None,
        }
    }

    /// Accepts a GitHub token for `resource`. Returns `false` for a resource the agent does
    /// not use. The same token again is a no-op; a new one is checked against the upstream
    /// first (fetching the model catalog) and only then replaces the old one, so a failure
    /// leaves everything as it was. Running sessions keep their proxy address and secret.
    pub async fn authenticate(&self, resource: &str, token: &str) -> Result<bool, AgentError> {
        if resource.trim_end_matches('/') != GITHUB_RESOURCE {
            return Ok(false);
        }
        if self.shut_down.initialized() {
            return Err(AgentError::ShutDown);
        }
        let mut auth = self.auth.lock().await;
        if auth.as_ref().is_some_and(|a| a.token == token) {
            return Ok(true);
        }
        let upstream = self.factory.for_github_token(token);
        upstream.catalog().await?;
        self.install(&mut auth, upstream, token).await?;
        tracing::info!("GitHub token accepted; the model proxy is ready");
        Ok(true)
    }

    /// Uses `upstream` for model calls without a GitHub sign-in (a replay file, the
    /// Anthropic API, or a Copilot client built from stored credentials).
    pub async fn use_upstream(&self, upstream: Arc<dyn Upstream>) -> Result<(), AgentError> {
        if self.shut_down.initialized() {
            return Err(AgentError::ShutDown);
        }
        let mut auth = self.auth.lock().await;
        self.install(&mut auth, upstream, "").await
    }

    async fn install(
        &self,
        auth: &mut Option<Auth>,
        upstream: Arc<dyn Upstream>,
        token: &str,
    ) -> Result<(), AgentError> {
        match auth.as_mut() {
            Some(a) => {
                a.proxy.set_upstream(upstream.clone());
                a.upstream = upstream;
                a.token = token.to_owned();
            }
            None => {
                let proxy = claude_host_proxy::start(self.config.proxy.clone(), upstream.clone())
                    .await
                    .map_err(|e| AgentError::Proxy(e.to_string()))?;
                *auth = Some(Auth {
                    token: token.to_owned(),
                    proxy,
                    upstream,
                });
            }
        }
        Ok(())
    }

    /// Whether a token has been accepted.
    pub async fn is_authenticated(&self) -> bool {
        self.auth.lock().await.is_some()
    }

    fn auth_required(&self) -> AgentError {
        AgentError::AuthRequired {
            resources: self.protected_resources(),
        }
    }

    async fn catalog(&self) -> Result<Vec<CatalogModel>, AgentError> {
        let upstream = match self.auth.lock().await.as_ref() {
            Some(a) => a.upstream.clone(),
            None => return Err(self.auth_required()),
        };
        Ok(upstream.catalog().await?.models)
    }

    /// The Claude models on offer, the default first, each with its effort levels.
    pub async fn models(&self) -> Result<Vec<SessionModelInfo>, AgentError> {
        Ok(self.catalog().await?.iter().map(model_info).collect())
    }

    /// The proxy's base URL and a token for a client labelled `session_id` (for a user's own
    /// `claude` pointed at this host).
    pub async fn proxy_endpoint(&self, session_id: &str) -> Result<(String, String), AgentError> {
        match self.auth.lock().await.as_ref() {
            Some(a) => Ok((a.proxy.base_url(), a.proxy.auth_token(session_id))),
            None => Err(self.auth_required()),
        }
    }

    async fn session_options(
        &self,
        id: &str,
        cwd: &Path,
        settings: &NewSession,
    ) -> Result<SessionOptions, AgentError> {
        let (base_url, token) = self.proxy_endpoint(id).await?;
        let mut opts =
            SessionOptions::new(self.config.cli.clone(), cwd.to_path_buf(), base_url, token);
        opts.config_dir = self.config.config_dir.clone();
        opts.extra_env = self.config.extra_env.clone();
        opts.include_partial_messages = true;
        opts.model = settings.model.clone();
        opts.effort = settings.effort.clone();
        opts.permission_mode = settings.permission_mode.clone();
        if opts.permission_mode.as_deref() == Some("bypassPermissions") {
            if !self.config.allow_bypass_permissions {
                return Err(ChatSessionError::Start(
                    "bypassPermissions is not allowed on this host".into(),
                )
                .into());
            }
            // The CLI refuses bypass as root without this exact value.
            opts.extra_env.push(("IS_SANDBOX".into(), "1".into()));
        }
        Ok(opts)
    }

    async fn check_model(&self, model: Option<&str>) -> Result<(), AgentError> {
        let Some(model) = model else {
            return Ok(());
        };
        let catalog = self.catalog().await?;
        if catalog
            .iter()
            .any(|m| m.upstream_id == model || m.sdk_id == model)
        {
            return Ok(());
        }
        Err(AgentError::UnknownModel {
            model: model.to_owned(),
            available: catalog
                .iter()
                .map(|m| m.upstream_id.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// Creates a session: provisional (no process, nothing written) unless `warm`.
    pub async fn create_session(
        &self,
        settings: NewSession,
    ) -> Result<(String, Arc<ChatSession>), AgentError> {
        if self.shut_down.initialized() {
            return Err(AgentError::ShutDown);
        }
        self.check_model(settings.model.as_deref()).await?;
        let id = match &settings.id {
            Some(id) if uuid::Uuid::parse_str(id).is_ok() => id.clone(),
            Some(id) => {
                return Err(
                    ChatSessionError::Start(format!("session id {id:?} is not a UUID")).into(),
                );
            }
            None => uuid::Uuid::new_v4().to_string(),
        };
        if self.session(&id).is_some() {
            return Err(ChatSessionError::Start(format!("session {id} already exists")).into());
        }
        let cwd = settings
            .cwd
            .clone()
            .unwrap_or_else(|| self.config.default_cwd.clone());
        let mut opts = self.session_options(&id, &cwd, &settings).await?;
        // The Claude session id is the session's URI id, so the transcript is found by it.
        opts.session_id = Some(id.clone());
        let resource = session_resource(&id);
        let mut session = ChatSession::new(&resource, opts)?;
        if let Some(store) = &self.store {
            session = session.with_store(store.clone());
        }
        let session = Arc::new(session);
        if settings.warm {
            session.warm().await?;
        }
        lock(&self.sessions).insert(resource.clone(), session.clone());
        Ok((resource, session))
    }

    /// A live session of this host.
    pub fn session(&self, resource: &str) -> Option<Arc<ChatSession>> {
        lock(&self.sessions)
            .get(&session_resource(session_id_of(resource)))
            .cloned()
    }

    fn config_dir(&self) -> Option<PathBuf> {
        self.config.config_dir.clone().or_else(|| {
            self.config
                .extra_env
                .iter()
                .rev()
                .find(|(k, _)| k == "HOME")
                .map(|(_, v)| PathBuf::from(v))
                .or_else(std::env::home_dir)
                .map(|h| h.join(".claude"))
        })
    }

    /// A session by URI or id: the live one, or one restored from its transcript (a session
    /// of this host or of the user's own `claude`), with the host's overlay applied.
    pub async fn open_session(&self, resource: &str) -> Result<Arc<ChatSession>, AgentError> {
        if let Some(s) = self.session(resource) {
            return Ok(s);
        }
        let id = session_id_of(resource).to_owned();
        let config = self
            .config_dir()
            .ok_or_else(|| AgentError::UnknownSession(id.clone()))?;
        let record = match &self.store {
            Some(store) => store.get(&id).await.ok().flatten(),
            None => None,
        };
        let cwd = match &record {
            Some(r) => PathBuf::from(&r.cwd),
            None => transcript_cwd(&config, &id)
                .ok_or_else(|| AgentError::UnknownSession(id.clone()))?,
        };
        let settings = NewSession {
            id: None,
            cwd: Some(cwd.clone()),
            model: record.as_ref().and_then(|r| r.model.clone()),
            effort: record.as_ref().and_then(|r| r.effort.clone()),
            permission_mode: record.as_ref().and_then(|r| r.permission_mode.clone()),
            warm: false,
        };
        let opts = self.session_options(&id, &cwd, &settings).await?;
        let resource = session_resource(&id);
        let mut session = ChatSession::restore(&resource, opts, &config, &id)?;
        if let Some(store) = &self.store {
            session = session.with_store(store.clone());
        }
        let session = Arc::new(session);
        let mut sessions = lock(&self.sessions);
        // A concurrent open may have won; keep one.
        let kept = sessions
            .entry(resource)
            .or_insert_with(|| session.clone())
            .clone();
        Ok(kept)
    }

    /// Forks a session at `keep_turns` turns into a new live session.
    pub async fn fork_session(
        &self,
        resource: &str,
        keep_turns: usize,
    ) -> Result<(String, Arc<ChatSession>), AgentError> {
        let source = self.open_session(resource).await?;
        let mut fork = source.fork_with(keep_turns, session_resource)?;
        let id = fork
            .session_id()
            .ok_or_else(|| AgentError::UnknownSession("fork".into()))?;
        if let Some(store) = &self.store {
            fork = fork.with_store(store.clone());
        }
        let fork = Arc::new(fork);
        let resource = session_resource(&id);
        lock(&self.sessions).insert(resource.clone(), fork.clone());
        Ok((resource, fork))
    }

    /// Every session: live ones of this host, the host's overlay, and the transcripts on
    /// disk (including sessions of the user's own `claude`), newest first.
    pub async fn list_sessions(&self) -> Vec<SessionListing> {
        let mut by_id: HashMap<String, SessionListing> = HashMap::new();
        if let Some(config) = self.config_dir() {
            match claude_host_sdk::transcripts::list_sessions(&config, None) {
                Ok(found) => {
                    for s in found {
                        by_id.insert(
                            s.session_id.clone(),
                            SessionListing {
                                resource: session_resource(&s.session_id),
                                title: if s.summary.is_empty() {
                                    s.first_prompt.clone().unwrap_or_default()
                                } else {
                                    s.summary.clone()
                                },
                                cwd: s.cwd.clone(),
                                modified_at: millis(s.modified),
                                model: None,
                                archived: false,
                                from_host: false,
                                id: s.session_id,
                            },
                        );
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot list the CLI's sessions"),
            }
        }
        if let Some(store) = &self.store {
            match store.list(true).await {
                Ok(records) => {
                    for r in records {
                        overlay(&mut by_id, r);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot read the session overlay"),
            }
        }
        let live: Vec<Arc<ChatSession>> = lock(&self.sessions).values().cloned().collect();
        for s in live {
            let Some(id) = s.session_id() else { continue };
            let entry = by_id.entry(id.clone()).or_insert_with(|| SessionListing {
                resource: session_resource(&id),
                title: String::new(),
                cwd: Some(s.cwd().display().to_string()),
                modified_at: 0,
                model: None,
                archived: false,
                from_host: true,
                id,
            });
            entry.from_host = true;
            if entry.title.is_empty() {
                entry.title = s.state().title;
            }
        }
        let mut list: Vec<SessionListing> = by_id.into_values().collect();
        list.sort_by_key(|l| std::cmp::Reverse(l.modified_at));
        list
    }

    /// Closes a live session (its CLI stops; the transcript stays).
    pub async fn dispose_session(&self, resource: &str) -> Result<(), AgentError> {
        let key = session_resource(session_id_of(resource));
        let session = lock(&self.sessions)
            .remove(&key)
            .ok_or_else(|| AgentError::UnknownSession(resource.to_owned()))?;
        session.close().await;
        Ok(())
    }

    /// Stops every session (no child is left behind), then the proxy. Later calls return
    /// at once.
    pub async fn shutdown(&self) {
        self.shut_down
            .get_or_init(|| async {
                let sessions: Vec<Arc<ChatSession>> =
                    lock(&self.sessions).drain().map(|(_, s)| s).collect();
                let mut closing = tokio::task::JoinSet::new();
                for s in sessions {
                    closing.spawn(async move { s.close().await });
                }
                while closing.join_next().await.is_some() {}
                // Children die before the proxy they talk to.
                if let Some(a) = self.auth.lock().await.take() {
                    a.proxy.shutdown().await;
                }
            })
            .await;
    }
}

/// The host's overlay on a listed session.
fn overlay(by_id: &mut HashMap<String, SessionListing>, r: SessionRecord) {
    let entry = by_id.entry(r.id.clone()).or_insert_with(|| SessionListing {
        id: r.id.clone(),
        resource: session_resource(&r.id),
        title: String::new(),
        cwd: None,
        modified_at: 0,
        model: None,
        archived: false,
        from_host: true,
    });
    if let Some(t) = r.title.filter(|t| !t.is_empty()) {
        entry.title = t;
    }
    entry.cwd = Some(r.cwd);
    entry.model = r.model;
    entry.archived = r.archived;
    entry.from_host = true;
    entry.modified_at = entry.modified_at.max(r.updated_at);
}

/// The working directory a transcript was recorded in.
fn transcript_cwd(config: &Path, id: &str) -> Option<PathBuf> {
    let t = claude_host_sdk::transcripts::read_session(config, id).ok()?;
    t.entries
        .iter()
        .find_map(|e| e.get("cwd").and_then(serde_json::Value::as_str))
        .map(PathBuf::from)
}

/// A catalog model as an AHP model, with its effort levels as a config property.
fn model_info(m: &CatalogModel) -> SessionModelInfo {
    let mut info = json!({
        "id": m.upstream_id, "provider": "claude", "name": m.display_name,
        "_meta": {"sdkId": m.sdk_id, "isDefault": m.is_default},
    });
    if let Some(t) = m.max_prompt_tokens {
        info["maxPromptTokens"] = json!(t);
        info["maxContextWindow"] = json!(t);
    }
    if let Some(t) = m.max_output_tokens {
        info["maxOutputTokens"] = json!(t);
    }
    if !m.effort_levels.is_empty() {
        let default = if m.effort_levels.iter().any(|l| l == "medium") {
            "medium".to_owned()
        } else {
            m.effort_levels[0].clone()
        };
        info["configSchema"] = json!({"type": "object", "properties": {"effort": {
            "type": "string", "title": "Thinking effort", "enum": m.effort_levels,
            "default": default}}});
    }
    serde_json::from_value(info.clone()).unwrap_or_else(|e| {
        tracing::error!(error = %e, model = %info, "cannot describe a model");
        SessionModelInfo {
            id: m.upstream_id.clone(),
            provider: "claude".into(),
            name: m.display_name.clone(),
            max_context_window: None,
            max_output_tokens: None,
            max_prompt_tokens: None,
            supports_vision: None,
            policy_state: None,
            config_schema: None,
            meta: None,
        }
    })
}
