//! The GitHub Copilot API as an upstream: token mint and cache, model catalog, `/v1/messages`.

use crate::clock::{Clock, SystemClock};
use crate::stream_client::{StreamClient, StreamReply};
use crate::{
    Catalog, CatalogModel, MessagesCall, Upstream, UpstreamError, UpstreamResponse,
    describe_reqwest, header_map, trim_base,
};
use async_trait::async_trait;
use claude_host_protocol::models::{CopilotModel, ModelApi, agent_models};
use claude_host_protocol::request_kind::RequestKind;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use serde::Deserialize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where the GitHub and Copilot APIs live. Every URL can be overridden (GHE, tests).
#[derive(Debug, Clone)]
pub struct CopilotEndpoints {
    /// GitHub web (device flow): `https://github.com`.
    pub github_url: String,
    /// GitHub API: `https://api.github.com`.
    pub github_api_url: String,
    /// Copilot API base; `None` = use `endpoints.api` from the token.
    pub copilot_api_url: Option<String>,
}

impl CopilotEndpoints {
    /// GitHub web and API both at `url`; the Copilot API from the token (a single-host
    /// deployment, or a test fake).
    pub fn single_host(url: &str) -> Self {
        CopilotEndpoints {
            github_url: url.to_owned(),
            github_api_url: url.to_owned(),
            copilot_api_url: None,
        }
    }
}

impl Default for CopilotEndpoints {
    fn default() -> Self {
        CopilotEndpoints {
            github_url: "https://github.com".to_owned(),
            github_api_url: "https://api.github.com".to_owned(),
            copilot_api_url: None,
        }
    }
}

/// How claude-host identifies itself to Copilot. Version strings change over time, so all are
/// configurable.
#[derive(Debug, Clone)]
pub struct ClientIdentity {
    /// `Editor-Version`.
    pub editor_version: String,
    /// `Editor-Plugin-Version`.
    pub editor_plugin_version: String,
    /// `Copilot-Integration-Id`.
    pub integration_id: String,
    /// `X-GitHub-Api-Version` for Copilot API calls.
    pub capi_api_version: String,
    /// `X-GitHub-Api-Version` for GitHub API calls.
    pub github_api_version: String,
}

impl Default for ClientIdentity {
    fn default() -> Self {
        ClientIdentity {
            editor_version: "vscode/1.107.0".to_owned(),
            editor_plugin_version: "copilot-chat/0.35.0".to_owned(),
            integration_id: "vscode-chat".to_owned(),
            capi_api_version: "2026-01-09".to_owned(),
            github_api_version: "2025-04-01".to_owned(),
        }
    }
}

/// Tuning knobs.
#[derive(Debug, Clone)]
pub struct CopilotOptions {
    /// Refresh the Copilot token this many seconds before its refresh time.
    pub refresh_margin_secs: i64,
    /// How long the model catalog is cached.
    pub catalog_ttl: Duration,
    /// Mint attempts for transient failures.
    pub mint_attempts: u32,
    /// First retry delay (doubles each time).
    pub mint_backoff: Duration,
}

impl Default for CopilotOptions {
    fn default() -> Self {
        CopilotOptions {
            refresh_margin_secs: 60,
            catalog_ttl: Duration::from_secs(600),
            mint_attempts: 4,
            mint_backoff: Duration::from_millis(250),
        }
    }
}

/// A minted Copilot token.
#[derive(Clone)]
pub struct CopilotToken {
    /// The bearer token for the Copilot API.
    pub token: String,
    /// Expiry (Unix seconds).
    pub expires_at: i64,
    /// When to mint a new one (Unix seconds, margin applied).
    pub refresh_at: i64,
    /// The Copilot API base URL for this account.
    pub api_base: String,
    /// The account's SKU, when reported.
    pub sku: Option<String>,
}

impl std::fmt::Debug for CopilotToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CopilotToken")
            .field("token", &"<redacted>")
            .field("expires_at", &self.expires_at)
            .field("refresh_at", &self.refresh_at)
            .field("api_base", &self.api_base)
            .finish()
    }
}

#[derive(Deserialize)]
struct MintReply {
    token: String,
    expires_at: i64,
    #[serde(default)]
    refresh_in: Option<i64>,
    #[serde(default)]
    endpoints: Option<MintEndpoints>,
    #[serde(default)]
    sku: Option<String>,
}

#[derive(Deserialize)]
struct MintEndpoints {
    #[serde(default)]
    api: Option<String>,
}

type MintFuture = Shared<BoxFuture<'static, Result<Arc<CopilotToken>, UpstreamError>>>;

#[derive(Default)]
struct TokenState {
    current: Option<Arc<CopilotToken>>,
    inflight: Option<MintFuture>,
}

struct Inner {
    http: reqwest::Client,
    stream: StreamClient,
    github_token: String,
    endpoints: CopilotEndpoints,
    identity: ClientIdentity,
    options: CopilotOptions,
    clock: Arc<dyn Clock>,
    tokens: Mutex<TokenState>,
    /// The fetched catalog with its Claude part, kept for the configured TTL. The Claude part
    /// is built once per fetch and shared: every request resolves its model against it.
    catalog: crate::TtlCache<(Arc<Vec<CopilotModel>>, Arc<Catalog>)>,
}

/// The Copilot upstream. Cheap to clone.
#[derive(Clone)]
pub struct CopilotUpstream {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CopilotUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CopilotUpstream")
            .field("endpoints", &self.inner.endpoints)
            .finish_non_exhaustive()
    }
}

impl CopilotUpstream {
    /// A Copilot upstream for one GitHub token.
    pub fn new(
        http: reqwest::Client,
        github_token: String,
        endpoints: CopilotEndpoints,
        identity: ClientIdentity,
        options: CopilotOptions,
    ) -> Self {
        Self::with_clock(
            http,
            github_token,
            endpoints,
            identity,
            options,
            Arc::new(SystemClock),
        )
    }

    /// As [`CopilotUpstream::new`], with an explicit clock.
    pub fn with_clock(
        http: reqwest::Client,
        github_token: String,
        endpoints: CopilotEndpoints,
        identity: ClientIdentity,
        options: CopilotOptions,
        clock: Arc<dyn Clock>,
    ) -> Self {
        CopilotUpstream {
            inner: Arc::new(Inner {
                stream: StreamClient::for_http(&http),
                http,
                github_token,
                endpoints,
                identity,
                options,
                clock,
                tokens: Mutex::new(TokenState::default()),
                catalog: crate::TtlCache::default(),
            }),
        }
    }

    /// A valid Copilot token: the cached one, or a fresh mint shared by every concurrent
    /// caller. The mint runs in its own task, so a caller that gives up cancels nothing.
    pub async fn token(&self) -> Result<Arc<CopilotToken>, UpstreamError> {
        let fut = {
            let mut state = lock(&self.inner.tokens);
            if let Some(tok) = &state.current
                && self.inner.clock.now_unix() < tok.refresh_at
            {
                return Ok(tok.clone());
            }
            match &state.inflight {
                Some(f) => f.clone(),
                None => {
                    let inner = self.inner.clone();
                    let task = tokio::spawn(async move {
                        let result = mint_with_retry(&inner).await.map(Arc::new);
                        let mut state = lock(&inner.tokens);
                        state.inflight = None;
                        if let Ok(tok) = &result {
                            state.current = Some(tok.clone());
                        }
                        result
                    });
                    let fut: MintFuture = async move {
                        task.await.unwrap_or_else(|e| {
                            Err(UpstreamError::Transport(format!(
                                "token mint task failed: {e}"
                            )))
                        })
                    }
                    .boxed()
                    .shared();
                    state.inflight = Some(fut.clone());
                    fut
                }
            }
        };
        fut.await
    }

    /// Forgets `token` if it is still the cached one (after Copilot rejected it).
    pub fn invalidate(&self, token: &str) {
        let mut state = lock(&self.inner.tokens);
        if state.current.as_ref().is_some_and(|t| t.token == token) {
            state.current = None;
        }
    }

    fn api_base(&self, tok: &CopilotToken) -> String {
        self.inner
            .endpoints
            .copilot_api_url
            .as_deref()
            .map_or_else(|| tok.api_base.clone(), trim_base)
    }

    /// The full Copilot catalog (all vendors), cached for the configured TTL.
    pub async fn raw_catalog(&self) -> Result<Arc<Vec<CopilotModel>>, UpstreamError> {
        Ok(self.cached_catalog().await?.0)
    }

    async fn cached_catalog(
        &self,
    ) -> Result<(Arc<Vec<CopilotModel>>, Arc<Catalog>), UpstreamError> {
        self.inner
            .catalog
            .get_or_fetch(self.inner.options.catalog_ttl, async {
                let raw = Arc::new(self.fetch_catalog(true).await?);
                let claude = Arc::new(agent_catalog(&raw));
                Ok((raw, claude))
            })
            .await
    }

    async fn fetch_catalog(&self, retry_on_401: bool) -> Result<Vec<CopilotModel>, UpstreamError> {
        let tok = self.token().await?;
        let resp = self
            .inner
            .http
            .get(format!("{}/models", self.api_base(&tok)))
            .header("authorization", sensitive(&format!("Bearer {}", tok.token)))
            .header("accept", "application/json")
            .header(
                "x-github-api-version",
                &self.inner.identity.capi_api_version,
            )
            .header("editor-version", &self.inner.identity.editor_version)
            .header(
                "editor-plugin-version",
                &self.inner.identity.editor_plugin_version,
            )
            .header(
                "copilot-integration-id",
                &self.inner.identity.integration_id,
            )
            .send()
            .await
            .map_err(|e| UpstreamError::Transport(describe_reqwest(&e)))?;
        let status = resp.status().as_u16();
        if status == 401 && retry_on_401 {
            self.invalidate(&tok.token);
            return Box::pin(self.fetch_catalog(false)).await;
        }
        let body = resp
            .bytes()
            .await
            .map_err(|e| UpstreamError::Transport(describe_reqwest(&e)))?;
        if !(200..300).contains(&status) {
            return Err(UpstreamError::Http {
                status,
                message: String::from_utf8_lossy(&body).chars().take(500).collect(),
            });
        }
        #[derive(Deserialize)]
        struct Page {
            #[serde(default)]
            data: Vec<serde_json::Value>,
        }
        let page: Page = serde_json::from_slice(&body)
            .map_err(|e| UpstreamError::Protocol(format!("model catalog: {e}")))?;
        // One odd entry must not hide the rest of the catalog.
        Ok(page
            .data
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect())
    }

    /// `GET {github_api}/copilot_internal/user`: plan, quota and endpoints.
    pub async fn user_info(&self) -> Result<serde_json::Value, UpstreamError> {
        self.github_get("/copilot_internal/user").await
    }

    /// `GET {github_api}/user`: the GitHub account.
    pub async fn github_user(&self) -> Result<serde_json::Value, UpstreamError> {
        self.github_get("/user").await
    }

    async fn github_get(&self, path: &str) -> Result<serde_json::Value, UpstreamError> {
        let resp = self
            .github_request(path)
            .send()
            .await
            .map_err(|e| UpstreamError::Transport(describe_reqwest(&e)))?;
        let status = resp.status().as_u16();
        let body = resp
            .bytes()
            .await
            .map_err(|e| UpstreamError::Transport(describe_reqwest(&e)))?;
        match status {
            200..=299 => serde_json::from_slice(&body)
                .map_err(|e| UpstreamError::Protocol(format!("{path}: {e}"))),
            401 => Err(UpstreamError::CredentialRejected(github_message(
                &body, status,
            ))),
            403 | 404 => Err(UpstreamError::NoCopilotAccess(github_message(
                &body, status,
            ))),
            _ => Err(UpstreamError::Http {
                status,
                message: github_message(&body, status),
            }),
        }
    }

    fn github_request(&self, path: &str) -> reqwest::RequestBuilder {
        let id = &self.inner.identity;
        self.inner
            .http
            .get(format!(
                "{}{path}",
                trim_base(&self.inner.endpoints.github_api_url)
            ))
            .header(
                "authorization",
                sensitive(&format!("token {}", self.inner.github_token)),
            )
            .header("accept", "application/json")
            .header("x-github-api-version", &id.github_api_version)
            .header("editor-version", &id.editor_version)
            .header("editor-plugin-version", &id.editor_plugin_version)
    }

    async fn send_messages(
        &self,
        call: &MessagesCall,
        tok: &CopilotToken,
    ) -> Result<StreamReply, UpstreamError> {
        let id = &self.inner.identity;
        let ua = call
            .client_user_agent
            .as_deref()
            .and_then(|ua| ua.split_once('/').map(|(_, rest)| rest))
            .map_or_else(
                || format!("claude-host/{}", env!("CARGO_PKG_VERSION")),
                |rest| format!("vscode_claude_code/{rest}"),
            );
        let accept = if call.stream {
            "text/event-stream"
        } else {
            "application/json"
        };
        // Copilot's own clients name the traffic they send: Claude Code's Messages calls as
        // the Anthropic proxy they are, translated calls as the agent traffic of its chat.
        let intent = match call.api {
            ModelApi::Messages => "messages-proxy",
            ModelApi::Responses | ModelApi::ChatCompletions => "conversation-agent",
        };
        let mut headers = vec![
            ("authorization", format!("Bearer {}", tok.token)),
            ("content-type", "application/json".to_owned()),
            ("accept", accept.to_owned()),
            ("x-request-id", uuid::Uuid::new_v4().to_string()),
            ("x-github-api-version", id.capi_api_version.clone()),
            ("openai-intent", intent.to_owned()),
            (
                "x-interaction-type",
                interaction_type(call.kind, intent).to_owned(),
            ),
            ("x-initiator", call.initiator.as_str().to_owned()),
            ("copilot-integration-id", id.integration_id.clone()),
            ("editor-version", id.editor_version.clone()),
            ("editor-plugin-version", id.editor_plugin_version.clone()),
            ("vscode-sessionid", call.session_id.clone()),
            ("user-agent", ua),
        ];
        if call.vision {
            headers.push(("copilot-vision-request", "true".to_owned()));
        }
        // Anthropic's headers mean nothing to the OpenAI endpoints.
        if call.api == ModelApi::Messages {
            if let Some(v) = &call.anthropic_version {
                headers.push(("anthropic-version", v.clone()));
            }
            if let Some(b) = &call.anthropic_beta {
                headers.push(("anthropic-beta", b.clone()));
            }
        }
        self.inner
            .stream
            .post(
                &format!("{}{}", self.api_base(tok), call.api.path()),
                header_map(headers),
                call.body.clone(),
            )
            .await
    }
}

/// The models of a Copilot catalog Claude Code can be driven with, in the form requests are
/// resolved against.
fn agent_catalog(raw: &[CopilotModel]) -> Catalog {
    let models = agent_models(raw)
        .into_iter()
        .map(|m| CatalogModel {
            sdk_id: m.sdk_id(),
            display_name: m.name.clone().unwrap_or_else(|| m.id.clone()),
            effort_levels: m.effort_levels(),
            is_default: m.is_chat_default,
            max_prompt_tokens: m.limit("max_prompt_tokens"),
            max_output_tokens: m.limit("max_output_tokens"),
            max_context_window: m.limit("max_context_window_tokens"),
            supports_vision: m.supports("vision"),
            adaptive_thinking: m.supports("adaptive_thinking"),
            thinking_budget: m.thinking_budget(),
            premium: m.is_premium(),
            multiplier: m.multiplier(),
            api: m.api().unwrap_or_default(),
            reasoning: m.reasons(),
            vendor: m.vendor.clone(),
            upstream_id: m.id,
        })
        .collect();
    Catalog {
        models,
        strict: true,
    }
}

/// What Copilot's other clients send as `X-Interaction-Type` for a request of this kind:
/// compaction and subagent calls are told apart so Copilot can account them as such.
fn interaction_type(kind: RequestKind, default: &'static str) -> &'static str {
    match kind {
        RequestKind::Compaction => "conversation-compaction",
        RequestKind::Subagent => "conversation-subagent",
        _ => default,
    }
}

#[async_trait]
impl Upstream for CopilotUpstream {
    fn name(&self) -> &'static str {
        "copilot"
    }

    async fn catalog(&self) -> Result<Arc<Catalog>, UpstreamError> {
        Ok(self.cached_catalog().await?.1)
    }

    async fn prepare(&self) {
        let Ok(tok) = self.token().await else {
            return;
        };
        let _ = self.catalog().await;
        let url = format!("{}/v1/messages", self.api_base(&tok));
        if let Err(e) = self.inner.stream.preconnect(&url).await {
            tracing::debug!(error = %e, "could not connect to the Copilot API ahead of a call");
        }
    }

    async fn messages(&self, call: MessagesCall) -> Result<UpstreamResponse, UpstreamError> {
        let tok = self.token().await?;
        let mut resp = self.send_messages(&call, &tok).await?;
        if resp.status == 401 {
            // The token was revoked or expired early: mint a new one and try exactly once more.
            tracing::info!(session = %call.session_id, "Copilot rejected the token; minting a new one and retrying once");
            self.invalidate(&tok.token);
            let tok = self.token().await?;
            resp = self.send_messages(&call, &tok).await?;
        }
        Ok(UpstreamResponse {
            status: resp.status,
            headers: resp.headers,
            body: resp.body,
        })
    }

    fn filters_betas(&self) -> bool {
        true
    }

    async fn quota_reset(&self) -> Option<String> {
        let info = self.user_info().await.ok()?;
        info.get("quota_reset_date")
            .and_then(|d| d.as_str())
            .map(str::to_owned)
    }
}

async fn mint_with_retry(inner: &Inner) -> Result<CopilotToken, UpstreamError> {
    let mut delay = inner.options.mint_backoff;
    let mut attempt = 1;
    loop {
        match mint(inner).await {
            Ok(tok) => return Ok(tok),
            Err(MintFailure::Fatal(e)) => return Err(e),
            Err(MintFailure::Transient(e)) if attempt >= inner.options.mint_attempts => {
                return Err(e);
            }
            Err(MintFailure::Transient(e)) => {
                tracing::warn!(attempt, error = %e, "Copilot token mint failed; retrying");
                tokio::time::sleep(delay).await;
                delay *= 2;
                attempt += 1;
            }
        }
    }
}

enum MintFailure {
    Fatal(UpstreamError),
    Transient(UpstreamError),
}

async fn mint(inner: &Inner) -> Result<CopilotToken, MintFailure> {
    let id = &inner.identity;
    let resp = inner
        .http
        .get(format!(
            "{}/copilot_internal/v2/token",
            trim_base(&inner.endpoints.github_api_url)
        ))
        .header(
            "authorization",
            sensitive(&format!("token {}", inner.github_token)),
        )
        .header("accept", "application/json")
        .header("x-github-api-version", &id.github_api_version)
        .header("editor-version", &id.editor_version)
        .header("editor-plugin-version", &id.editor_plugin_version)
        .send()
        .await
        .map_err(|e| MintFailure::Transient(UpstreamError::Transport(describe_reqwest(&e))))?;
    let status = resp.status().as_u16();
    let body = resp
        .bytes()
        .await
        .map_err(|e| MintFailure::Transient(UpstreamError::Transport(describe_reqwest(&e))))?;
    match status {
        200..=299 => {}
        401 => {
            return Err(MintFailure::Fatal(UpstreamError::CredentialRejected(
                github_message(&body, status),
            )));
        }
        403 | 404 => {
            return Err(MintFailure::Fatal(UpstreamError::NoCopilotAccess(
                github_message(&body, status),
            )));
        }
        429 | 500..=599 => {
            return Err(MintFailure::Transient(UpstreamError::Http {
                status,
                message: github_message(&body, status),
            }));
        }
        _ => {
            return Err(MintFailure::Fatal(UpstreamError::Http {
                status,
                message: github_message(&body, status),
            }));
        }
    }
    let reply: MintReply = serde_json::from_slice(&body).map_err(|e| {
        MintFailure::Fatal(UpstreamError::Protocol(format!("Copilot token reply: {e}")))
    })?;
    let now = inner.clock.now_unix();
    // Refresh at `refresh_in` (less the margin) when given, else before expiry; never sooner than
    // 30 s from now, so a short-lived token cannot make us mint in a loop.
    let refresh_base = reply
        .refresh_in
        .map_or(reply.expires_at, |r| (now + r).min(reply.expires_at));
    let refresh_at = (refresh_base - inner.options.refresh_margin_secs)
        .max(now + 30)
        .min(reply.expires_at);
    let api_base = reply
        .endpoints
        .and_then(|e| e.api)
        .map(|a| trim_base(&a))
        .unwrap_or_else(|| "https://api.githubcopilot.com".to_owned());
    Ok(CopilotToken {
        token: reply.token,
        expires_at: reply.expires_at,
        refresh_at,
        api_base,
        sku: reply.sku,
    })
}

fn github_message(body: &[u8], status: u16) -> String {
    let v: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let field = |k: &str| {
        v.as_ref()
            .and_then(|v| v.get(k))
            .and_then(|m| m.as_str())
            .map(str::to_owned)
    };
    match (field("message"), field("notification_id")) {
        (Some(m), Some(n)) => format!("{n}: {m}"),
        (Some(m), None) => m,
        (None, Some(n)) => n,
        (None, None) => format!("HTTP {status}"),
    }
}

fn sensitive(value: &str) -> http::HeaderValue {
    match http::HeaderValue::from_str(value) {
        Ok(mut v) => {
            v.set_sensitive(true);
            v
        }
        Err(_) => http::HeaderValue::from_static("invalid"),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means another thread panicked mid-update of a cache; the data is
    // still a valid cache state, so keep going.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
