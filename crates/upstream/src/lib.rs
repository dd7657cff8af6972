//! Upstreams for claude-host.
//!
//! Everything that leaves the machine goes through here: GitHub sign-in (device flow), the
//! credential file, the Copilot API (token mint, model catalog, `/v1/messages`), the user's own
//! Anthropic API key, and the offline replay / recording upstreams. The proxy sees only the
//! [`Upstream`] trait.

pub mod anthropic;
pub mod chunked;
pub mod clock;
pub mod copilot;
pub mod credentials;
pub mod device_flow;
mod h1;
pub mod private_files;
pub mod record;
pub mod replay;
pub mod signed_out;
pub mod stream_client;

use async_trait::async_trait;
use bytes::Bytes;
use claude_host_protocol::messages::Initiator;
pub use claude_host_protocol::models::ModelApi;
use claude_host_protocol::request_kind::RequestKind;
use futures::stream::BoxStream;

/// A value fetched from an upstream and kept until its time is up. Callers that find it
/// stale wait for the one fetch in progress rather than each making their own.
#[derive(Default)]
pub(crate) struct TtlCache<T>(tokio::sync::Mutex<Option<(std::time::Instant, T)>>);

impl<T: Clone> TtlCache<T> {
    /// The kept value when younger than `ttl`, else what `fetch` gives (kept from now on; an
    /// error is not kept).
    pub(crate) async fn get_or_fetch<F>(
        &self,
        ttl: std::time::Duration,
        fetch: F,
    ) -> Result<T, UpstreamError>
    where
        F: std::future::Future<Output = Result<T, UpstreamError>>,
    {
        let mut slot = self.0.lock().await;
        if let Some((at, value)) = &*slot
            && at.elapsed() < ttl
        {
            return Ok(value.clone());
        }
        let value = fetch.await?;
        *slot = Some((std::time::Instant::now(), value.clone()));
        Ok(value)
    }
}

/// Builds a header map from name/value pairs; invalid values are skipped (they can only come
/// from a client's own malformed headers), and secrets are marked sensitive. The pairs are
/// consumed so that a request future does not keep them while the request is out.
pub(crate) fn header_map(pairs: Vec<(&'static str, String)>) -> http::HeaderMap {
    let mut map = http::HeaderMap::with_capacity(pairs.len());
    for (name, value) in pairs {
        if let Ok(mut v) = http::HeaderValue::from_str(&value) {
            if matches!(name, "authorization" | "x-api-key") {
                v.set_sensitive(true);
            }
            map.insert(name, v);
        }
    }
    map
}

/// One model an upstream offers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CatalogModel {
    /// The id the upstream expects in requests.
    pub upstream_id: String,
    /// The id in Claude Code's form (what `/v1/models` lists).
    pub sdk_id: String,
    /// Display name.
    pub display_name: String,
    /// Supported reasoning-effort levels.
    pub effort_levels: Vec<String>,
    /// The upstream's default model.
    pub is_default: bool,
    /// Largest prompt the upstream accepts, when known.
    pub max_prompt_tokens: Option<u64>,
    /// Largest output, when known.
    pub max_output_tokens: Option<u64>,
    /// The whole context window, when known.
    pub max_context_window: Option<u64>,
    /// Whether it takes images.
    pub supports_vision: bool,
    /// Whether it thinks adaptively (and refuses `thinking.type: enabled`).
    pub adaptive_thinking: bool,
    /// The thinking budget range for `thinking.type: enabled`, when known.
    pub thinking_budget: Option<(u64, u64)>,
    /// Whether a request to it spends a premium request (`billing.is_premium`), when known.
    pub premium: Option<bool>,
    /// How many premium requests one request counts as (`billing.multiplier`; 0 for a model
    /// the plan includes), when known.
    pub multiplier: Option<f64>,
    /// The API it is called through (requests to any other than Messages are translated).
    pub api: ModelApi,
    /// Who makes it (`Anthropic`, `OpenAI`, `Google`, …), when known.
    pub vendor: Option<String>,
    /// Whether it reasons before answering (effort levels or a thinking budget).
    pub reasoning: bool,
}

impl CatalogModel {
    /// Whether it is a Claude model (its requests go out as Claude Code wrote them).
    pub fn is_claude(&self) -> bool {
        self.api == ModelApi::Messages
    }

    /// What translation to an OpenAI API needs to know of it; `None` for a Messages model.
    pub fn openai_target(&self) -> Option<claude_host_protocol::openai::Target> {
        let dialect = match self.api {
            ModelApi::Messages => return None,
            ModelApi::Responses => claude_host_protocol::openai::Dialect::Responses,
            ModelApi::ChatCompletions => claude_host_protocol::openai::Dialect::ChatCompletions,
        };
        Some(claude_host_protocol::openai::Target {
            model: self.upstream_id.clone(),
            dialect,
            max_output_tokens: self.max_output_tokens,
            supports_vision: self.supports_vision,
            effort_levels: self.effort_levels.clone(),
            reasoning: self.reasoning,
        })
    }

    /// What the model accepts, for fitting requests to it.
    pub fn rules(&self) -> claude_host_protocol::adapt::ModelRules {
        claude_host_protocol::adapt::ModelRules {
            model: self.upstream_id.clone(),
            max_output_tokens: self.max_output_tokens,
            supports_vision: self.supports_vision,
            adaptive_thinking: self.adaptive_thinking,
            thinking_budget: self.thinking_budget,
            effort_levels: self.effort_levels.clone(),
        }
    }
}

/// The models an upstream offers and how requested ids are matched to them.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// Models, the default first.
    pub models: Vec<CatalogModel>,
    /// When true, a requested id must resolve to one of `models` (Copilot). When false the id
    /// is forwarded as sent and the upstream decides (Anthropic, replay).
    pub strict: bool,
}

impl Catalog {
    /// The upstream ids, in catalog order.
    pub fn upstream_ids(&self) -> Vec<&str> {
        self.models.iter().map(|m| m.upstream_id.as_str()).collect()
    }

    /// The catalog model `id` names (Copilot's or Claude Code's form of it), if any.
    pub fn find(&self, id: &str) -> Option<&CatalogModel> {
        let ids = self.upstream_ids();
        let upstream = claude_host_protocol::model_id::resolve(id, &ids)?;
        self.models.iter().find(|m| m.upstream_id == upstream)
    }

    /// The model Claude Code's small/fast calls go to unless told otherwise: one the plan
    /// includes (premium multiplier 0), a Claude one first (Claude Code's own calls need no
    /// translation then). `None` when the plan includes none.
    pub fn included_small_model(&self) -> Option<&CatalogModel> {
        let included = |m: &&CatalogModel| m.multiplier == Some(0.0);
        let mut models = self.models.iter().filter(included);
        let first = models.clone().next();
        models.find(|m| m.is_claude()).or(first)
    }

    /// The models of Claude Code's roles: `small` and `subagent` as the user named them
    /// (resolved against the catalog; an id it does not know is left to the proxy's clear
    /// 404), the small one defaulting to [`Catalog::included_small_model`].
    pub fn roles(&self, small: Option<&str>, subagent: Option<&str>) -> ModelRoles {
        let named = |id: &str| {
            self.find(id)
                .map_or_else(|| id.to_owned(), |m| m.sdk_id.clone())
        };
        ModelRoles {
            small: small
                .map(named)
                .or_else(|| self.included_small_model().map(|m| m.sdk_id.clone())),
            subagent: subagent.map(named),
        }
    }
}

/// The models Claude Code's roles use besides a session's main model (`--model`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelRoles {
    /// The small/fast model Claude Code uses for its background calls.
    pub small: Option<String>,
    /// The model of every subagent.
    pub subagent: Option<String>,
}

impl ModelRoles {
    /// The environment that tells Claude Code (2.1.x) these models.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = Vec::new();
        if let Some(small) = &self.small {
            // The first is what Claude Code 2.1 reads; the second, older name is still
            // honoured by some versions.
            env.push(("ANTHROPIC_DEFAULT_HAIKU_MODEL".to_owned(), small.clone()));
            env.push(("ANTHROPIC_SMALL_FAST_MODEL".to_owned(), small.clone()));
        }
        if let Some(subagent) = &self.subagent {
            env.push(("CLAUDE_CODE_SUBAGENT_MODEL".to_owned(), subagent.clone()));
        }
        env
    }
}

/// A `/v1/messages` call, ready to send.
#[derive(Debug, Clone)]
pub struct MessagesCall {
    /// The JSON body, its `model` already the upstream id.
    pub body: Bytes,
    /// The upstream model id.
    pub model: String,
    /// The API the body is for (it is already translated for any but Messages).
    pub api: ModelApi,
    /// Whether the client asked for SSE.
    pub stream: bool,
    /// Who started the request (Copilot's `X-Initiator`).
    pub initiator: Initiator,
    /// What the request is for (a prompt, a tool-result continuation, a subagent, …).
    pub kind: RequestKind,
    /// Whether the request carries images (Copilot's `copilot-vision-request`).
    pub vision: bool,
    /// The client's `anthropic-version`.
    pub anthropic_version: Option<String>,
    /// The client's `anthropic-beta`, already filtered for this upstream.
    pub anthropic_beta: Option<String>,
    /// The client's `User-Agent`.
    pub client_user_agent: Option<String>,
    /// The proxy session id (from the bearer token).
    pub session_id: String,
}

/// An upstream reply: status, the headers worth passing on, and the body as it arrives.
pub struct UpstreamResponse {
    /// HTTP status.
    pub status: u16,
    /// Headers to pass through (`retry-after`, `request-id`, `content-type`).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: BoxStream<'static, Result<Bytes, UpstreamError>>,
}

impl std::fmt::Debug for UpstreamResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamResponse")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

impl UpstreamResponse {
    /// A whole-body reply.
    pub fn full(status: u16, content_type: &str, body: impl Into<Bytes>) -> Self {
        let body = body.into();
        UpstreamResponse {
            status,
            headers: vec![("content-type".to_owned(), content_type.to_owned())],
            body: Box::pin(futures::stream::once(async move { Ok(body) })),
        }
    }

    /// A header's value (names are lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Why an upstream call failed before producing a reply.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    /// No GitHub credential is configured.
    #[error("not signed in to GitHub: run `claude-host login` (or set GH_TOKEN)")]
    NotSignedIn,
    /// GitHub refused the stored credential.
    #[error("GitHub rejected the stored credential ({0}): run `claude-host login` again")]
    CredentialRejected(String),
    /// The account has no Copilot access (or the subscription ended).
    #[error("this GitHub account has no GitHub Copilot access ({0})")]
    NoCopilotAccess(String),
    /// The upstream could not be reached or the connection failed.
    #[error("upstream unreachable: {0}")]
    Transport(String),
    /// The upstream answered with an unexpected status (for calls whose errors are not passed
    /// through verbatim, such as the model catalog).
    #[error("upstream returned HTTP {status}: {message}")]
    Http {
        /// HTTP status.
        status: u16,
        /// The upstream's message.
        message: String,
    },
    /// The upstream answered something that could not be understood.
    #[error("unexpected upstream response: {0}")]
    Protocol(String),
    /// The replay file has no answer for this request.
    #[error("replay: {0}")]
    Replay(String),
}

/// A source of model responses. The proxy talks to nothing else.
#[async_trait]
pub trait Upstream: Send + Sync + 'static {
    /// A short name for logs and `doctor` (`copilot`, `anthropic`, `replay`).
    fn name(&self) -> &'static str;

    /// The models on offer.
    async fn catalog(&self) -> Result<std::sync::Arc<Catalog>, UpstreamError>;

    /// Sends a Messages request. Errors the upstream reports over HTTP come back as an
    /// [`UpstreamResponse`] with their status; `Err` is for failures with no HTTP reply.
    async fn messages(&self, call: MessagesCall) -> Result<UpstreamResponse, UpstreamError>;

    /// Gets ready for a call that is about to come (a session's CLI warming up): whatever the
    /// first call would otherwise wait for (credentials, the catalog, a connection). Failures
    /// are the call's to report.
    async fn prepare(&self) {
        let _ = self.catalog().await;
    }

    /// Whether `anthropic-beta` must be filtered through the allowlist for this upstream.
    fn filters_betas(&self) -> bool {
        false
    }

    /// When used-up premium requests come back (a date), if the upstream knows.
    async fn quota_reset(&self) -> Option<String> {
        None
    }
}

/// Makes rustls's *ring* provider the process's default, once; later calls do nothing. The
/// HTTP clients (reqwest, hyper-rustls, the OpenTelemetry exporter's) take their TLS from it.
pub fn install_tls_provider() {
    // Err means a provider is installed already: the first one stays, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Builds the shared HTTP client: connect timeout, no total timeout (streams can last many
/// minutes), TCP_NODELAY.
pub fn http_client() -> Result<reqwest::Client, UpstreamError> {
    install_tls_provider();
    reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(15))
        .tcp_nodelay(true)
        .pool_idle_timeout(std::time::Duration::from_secs(60))
        .user_agent(concat!("claude-host/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| UpstreamError::Transport(format!("cannot build HTTP client: {e}")))
}

/// Strips a trailing slash so `format!("{base}/path")` never doubles it.
pub(crate) fn trim_base(url: &str) -> String {
    url.trim_end_matches('/').to_owned()
}

/// Headers of an upstream reply worth passing to the client.
pub(crate) fn passthrough_headers(headers: &http::HeaderMap) -> Vec<(String, String)> {
    passthrough_fields(headers.iter().map(|(k, v)| (k.as_str(), v.as_bytes())))
}

/// [`passthrough_headers`] of raw header fields (names in any case; values kept when they
/// are visible ASCII).
pub(crate) fn passthrough_fields<'a>(
    fields: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> Vec<(String, String)> {
    const KEEP: &[&str] = &[
        "content-type",
        "retry-after",
        "request-id",
        "x-request-id",
        "anthropic-ratelimit-requests-remaining",
    ];
    fields
        .into_iter()
        .filter_map(|(k, v)| {
            let name = KEEP.iter().find(|keep| keep.eq_ignore_ascii_case(k))?;
            let value = std::str::from_utf8(v)
                .ok()
                .filter(|s| s.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b)))?;
            Some(((*name).to_owned(), value.to_owned()))
        })
        .collect()
}

/// A reqwest error described with its cause chain — reqwest's Display omits the underlying
/// cause (connection refused, TLS failure…), which is the part a user needs.
pub(crate) fn describe_reqwest(e: &reqwest::Error) -> String {
    describe_chain(e)
}

/// An error and every cause under it, joined with `: `.
pub(crate) fn describe_chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    msg
}
