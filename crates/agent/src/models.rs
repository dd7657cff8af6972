//! Where sessions' model calls go: the proxy every CLI talks to, the upstream behind it, and
//! the GitHub sign-in that chooses that upstream. The agent receives this edge as a
//! [`ModelAccess`]; whoever runs the host starts the proxy and hands it over.

use crate::AgentError;
use ahp_types::common::JsonObject;
use ahp_types::state::{
    ConfigPropertySchema, ConfigSchema, ProtectedResourceMetadata, SessionModelInfo,
};
use async_trait::async_trait;
use claude_host_proxy::ProxyHandle;
use claude_host_upstream::signed_out::SignedOut;
use claude_host_upstream::{CatalogModel, Upstream};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// The protected resource the agent needs a token for: a GitHub account with Copilot.
pub const GITHUB_RESOURCE: &str = "https://api.github.com";

/// The loopback endpoint a CLI is started with.
#[derive(Clone)]
pub struct ProxyEndpoint {
    /// `ANTHROPIC_BASE_URL`.
    pub base_url: String,
    /// `ANTHROPIC_AUTH_TOKEN` (a secret).
    pub token: String,
}

impl std::fmt::Debug for ProxyEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyEndpoint")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

/// Tells the model edge which of a session's requests a human started: Copilot bills a
/// premium request for each (`X-Initiator: user`), and only the host knows for sure.
pub trait PromptReporter: Send + Sync + std::fmt::Debug + 'static {
    /// The host is about to hand `session_id`'s CLI a message a human wrote.
    fn human_message(&self, session_id: &str);
    /// `session_id`'s turn ended; a human message no request carried is dropped.
    fn turn_ended(&self, session_id: &str);
}

impl PromptReporter for claude_host_proxy::PromptLedger {
    fn human_message(&self, session_id: &str) {
        self.note_prompt(session_id);
    }

    fn turn_ended(&self, session_id: &str) {
        self.end_turn(session_id);
    }
}

/// The model edge of the agent.
#[async_trait]
pub trait ModelAccess: Send + Sync + 'static {
    /// The endpoint for a CLI of session `session_id`.
    fn endpoint(&self, session_id: &str) -> Result<ProxyEndpoint, AgentError>;
    /// Whether an upstream is in place.
    fn is_authenticated(&self) -> bool;
    /// The Claude models on offer, the default first.
    async fn catalog(&self) -> Result<Vec<CatalogModel>, AgentError>;
    /// Accepts a GitHub token for `resource`: `Ok(false)` for a resource this host does not
    /// use; an empty token signs out.
    async fn authenticate(&self, resource: &str, token: &str) -> Result<bool, AgentError>;
    /// Stops what this edge runs (the proxy), after every session is gone.
    async fn shutdown(&self);
    /// Where sessions report their human messages (`None`: nobody counts them).
    fn prompts(&self) -> Option<Arc<dyn PromptReporter>> {
        None
    }
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

struct SignedIn {
    /// The GitHub token it came from (empty for an upstream installed without one).
    token: String,
    upstream: Arc<dyn Upstream>,
}

/// [`ModelAccess`] over a running proxy: a sign-in swaps the upstream behind the same proxy,
/// so running sessions keep their address and secret.
pub struct ProxyModels {
    proxy: ProxyHandle,
    factory: Option<Arc<dyn UpstreamFactory>>,
    // Held only to read or swap the current upstream, never across an await: a slow
    // GitHub must not stall anyone else; a task would add a round trip to every lookup.
    current: Mutex<Option<SignedIn>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl ProxyModels {
    /// A proxy that waits for a GitHub sign-in (its upstream is replaced on the first one).
    pub fn signed_out(proxy: ProxyHandle, factory: Arc<dyn UpstreamFactory>) -> ProxyModels {
        proxy.set_upstream(Arc::new(SignedOut));
        ProxyModels {
            proxy,
            factory: Some(factory),
            current: Mutex::new(None),
        }
    }

    /// A proxy with a fixed upstream (a replay file, the Anthropic API, a Copilot client from
    /// stored credentials); `factory` allows later sign-ins.
    pub fn with_upstream(
        proxy: ProxyHandle,
        upstream: Arc<dyn Upstream>,
        factory: Option<Arc<dyn UpstreamFactory>>,
    ) -> ProxyModels {
        proxy.set_upstream(upstream.clone());
        ProxyModels {
            proxy,
            factory,
            current: Mutex::new(Some(SignedIn {
                token: String::new(),
                upstream,
            })),
        }
    }

    /// The proxy.
    pub fn proxy(&self) -> &ProxyHandle {
        &self.proxy
    }

    fn upstream(&self) -> Option<Arc<dyn Upstream>> {
        lock(&self.current).as_ref().map(|s| s.upstream.clone())
    }
}

/// The GitHub sign-in this host takes, as RFC 9728 metadata. `required` is what VS Code reads
/// as "a sign-in is needed before this agent can be used": it greys the agent out and asks for
/// a GitHub sign-in on send unless it has one, so it is true only while the host has no
/// working credential (a host signed in with `claude-host login` or `GH_TOKEN` serves a VS Code
/// that has no GitHub session). A client with a session still pushes its token either way.
pub fn protected_resources(required: bool) -> Vec<ProtectedResourceMetadata> {
    let meta = json!({
        "resource": GITHUB_RESOURCE,
        "resource_name": "GitHub Copilot",
        "authorization_servers": ["https://github.com/login/oauth"],
        "scopes_supported": ["read:user", "user:email"],
        "bearer_methods_supported": ["header"],
        "required": required,
    });
    serde_json::from_value(meta).into_iter().collect()
}

/// The error before a sign-in.
pub fn auth_required() -> AgentError {
    AgentError::AuthRequired {
        resources: protected_resources(true),
    }
}

#[async_trait]
impl ModelAccess for ProxyModels {
    fn endpoint(&self, session_id: &str) -> Result<ProxyEndpoint, AgentError> {
        // The host writes this session's prompts and reports each one (see `prompts`).
        self.proxy
            .prompt_ledger()
            .set_source(session_id, claude_host_proxy::PromptSource::Host);
        // Given out signed in or not: a restored session shows its history before a client
        // signs in, and its CLI gets 401s from the proxy until one does.
        Ok(ProxyEndpoint {
            base_url: self.proxy.base_url(),
            token: self.proxy.auth_token(session_id),
        })
    }

    fn is_authenticated(&self) -> bool {
        lock(&self.current).is_some()
    }

    async fn catalog(&self) -> Result<Vec<CatalogModel>, AgentError> {
        let upstream = self.upstream().ok_or_else(auth_required)?;
        Ok(upstream.catalog().await?.models.clone())
    }

    async fn authenticate(&self, resource: &str, token: &str) -> Result<bool, AgentError> {
        if resource.trim_end_matches('/') != GITHUB_RESOURCE {
            return Ok(false);
        }
        if token.is_empty() {
            // Sign-out: running CLIs get 401s from now on.
            *lock(&self.current) = None;
            self.proxy.set_upstream(Arc::new(SignedOut));
            tracing::info!("signed out; sessions wait for a new GitHub token");
            return Ok(true);
        }
        if lock(&self.current)
            .as_ref()
            .is_some_and(|s| s.token == token)
        {
            return Ok(true);
        }
        let factory = self.factory.as_ref().ok_or_else(|| {
            AgentError::Unsupported("this host does not take GitHub tokens".into())
        })?;
        let upstream = factory.for_github_token(token);
        // Checked before anything changes, without holding the lock: a refused token leaves
        // the old state in place, and a slow GitHub stalls nobody else.
        upstream.catalog().await?;
        let mut current = lock(&self.current);
        self.proxy.set_upstream(upstream.clone());
        *current = Some(SignedIn {
            token: token.to_owned(),
            upstream,
        });
        drop(current);
        tracing::info!("GitHub token accepted; the model proxy uses it");
        Ok(true)
    }

    async fn shutdown(&self) {
        self.proxy.shutdown().await;
    }

    fn prompts(&self) -> Option<Arc<dyn PromptReporter>> {
        Some(Arc::new(self.proxy.prompt_ledger()))
    }
}

/// The per-model option VS Code renders as its effort chip (`thinkingLevel`).
pub const THINKING_LEVEL: &str = "thinkingLevel";

/// A catalog model as an AHP model: the limits and vision flag VS Code's picker reads, and
/// its effort levels as the `thinkingLevel` option.
pub fn model_info(m: &CatalogModel) -> SessionModelInfo {
    let tokens = |t: Option<u64>| t.and_then(|t| i64::try_from(t).ok());
    let config_schema = (!m.effort_levels.is_empty()).then(|| {
        let default = if m.effort_levels.iter().any(|l| l == "medium") {
            "medium".to_owned()
        } else {
            m.effort_levels[0].clone()
        };
        let level = ConfigPropertySchema {
            r#type: "string".into(),
            title: "Thinking".into(),
            description: None,
            default: Some(Value::String(default)),
            r#enum: Some(m.effort_levels.iter().cloned().map(Value::String).collect()),
            enum_labels: Some(m.effort_levels.iter().map(|l| capitalized(l)).collect()),
            enum_descriptions: None,
            read_only: None,
            items: None,
            min_items: None,
            max_items: None,
            properties: None,
            required: None,
            additional_properties: None,
        };
        ConfigSchema {
            r#type: "object".into(),
            properties: [(THINKING_LEVEL.to_owned(), level)].into_iter().collect(),
            required: None,
        }
    });
    let mut meta = JsonObject::new();
    meta.insert("sdkId".into(), Value::String(m.sdk_id.clone()));
    meta.insert("isDefault".into(), Value::Bool(m.is_default));
    meta.insert(
        "group".into(),
        Value::String(m.vendor.clone().unwrap_or_else(|| "Anthropic".into())),
    );
    meta.insert("endpoint".into(), Value::String(m.api.path().into()));
    if let Some(multiplier) = m.multiplier {
        meta.insert("premiumMultiplier".into(), json!(multiplier));
    }
    SessionModelInfo {
        id: m.upstream_id.clone(),
        provider: "claude".into(),
        name: m.display_name.clone(),
        max_context_window: tokens(m.max_context_window.or(m.max_prompt_tokens)),
        max_output_tokens: tokens(m.max_output_tokens),
        max_prompt_tokens: tokens(m.max_prompt_tokens),
        supports_vision: Some(m.supports_vision),
        policy_state: None,
        config_schema,
        meta: Some(meta),
    }
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// Whether `model` names a catalog model (Copilot or Claude Code form).
pub fn find<'a>(catalog: &'a [CatalogModel], model: &str) -> Option<&'a CatalogModel> {
    catalog
        .iter()
        .find(|m| m.upstream_id == model || m.sdk_id == model)
}
