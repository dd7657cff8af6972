//! The Anthropic API with the user's own key, as an upstream.

use crate::stream_client::StreamClient;
use crate::{
    Catalog, CatalogModel, MessagesCall, Upstream, UpstreamError, UpstreamResponse,
    describe_reqwest, header_map, trim_base,
};
use async_trait::async_trait;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// How long the model list is kept: every request resolves its model against it, and asking
/// Anthropic each time put a whole extra round trip in front of every model call.
const CATALOG_TTL: Duration = Duration::from_secs(600);

/// The default Anthropic API base.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// Anthropic with an API key.
#[derive(Clone)]
pub struct AnthropicUpstream {
    http: reqwest::Client,
    stream: StreamClient,
    base_url: String,
    api_key: String,
    catalog: Arc<crate::TtlCache<Arc<Catalog>>>,
}

impl std::fmt::Debug for AnthropicUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicUpstream")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl AnthropicUpstream {
    /// An upstream at `base_url` using `api_key`.
    pub fn new(http: reqwest::Client, base_url: &str, api_key: String) -> Self {
        AnthropicUpstream {
            stream: StreamClient::for_http(&http),
            http,
            base_url: trim_base(base_url),
            api_key,
            catalog: Arc::default(),
        }
    }

    fn key_header(&self) -> http::HeaderValue {
        let mut v = http::HeaderValue::from_str(&self.api_key)
            .unwrap_or_else(|_| http::HeaderValue::from_static("invalid"));
        v.set_sensitive(true);
        v
    }

    /// Asks Anthropic for its models.
    async fn fetch_catalog(&self) -> Result<Catalog, UpstreamError> {
        let resp = self
            .http
            .get(format!("{}/v1/models?limit=1000", self.base_url))
            .header("x-api-key", self.key_header())
            .header("anthropic-version", "2023-06-01")
            .send()
            .await
            .map_err(|e| UpstreamError::Transport(describe_reqwest(&e)))?;
        let status = resp.status().as_u16();
        let body = resp
            .bytes()
            .await
            .map_err(|e| UpstreamError::Transport(describe_reqwest(&e)))?;
        if status == 401 {
            return Err(UpstreamError::CredentialRejected(
                "Anthropic rejected ANTHROPIC_API_KEY".into(),
            ));
        }
        if !(200..300).contains(&status) {
            return Err(UpstreamError::Http {
                status,
                message: String::from_utf8_lossy(&body).chars().take(500).collect(),
            });
        }
        #[derive(Deserialize)]
        struct Entry {
            id: String,
            #[serde(default)]
            display_name: Option<String>,
        }
        #[derive(Deserialize)]
        struct Page {
            #[serde(default)]
            data: Vec<Entry>,
        }
        let page: Page = serde_json::from_slice(&body)
            .map_err(|e| UpstreamError::Protocol(format!("Anthropic models: {e}")))?;
        Ok(Catalog {
            models: page
                .data
                .into_iter()
                .enumerate()
                .map(|(i, e)| CatalogModel {
                    sdk_id: e.id.clone(),
                    display_name: e.display_name.unwrap_or_else(|| e.id.clone()),
                    upstream_id: e.id,
                    effort_levels: Vec::new(),
                    is_default: i == 0,
                    max_prompt_tokens: None,
                    max_output_tokens: None,
                    max_context_window: None,
                    // Every Claude model reads images.
                    supports_vision: true,
                    ..CatalogModel::default()
                })
                .collect(),
            strict: false,
        })
    }
}

#[async_trait]
impl Upstream for AnthropicUpstream {
    fn name(&self) -> &'static str {
        "anthropic"
    }

    async fn catalog(&self) -> Result<Arc<Catalog>, UpstreamError> {
        self.catalog
            .get_or_fetch(CATALOG_TTL, async {
                Ok(Arc::new(self.fetch_catalog().await?))
            })
            .await
    }

    async fn prepare(&self) {
        let _ = self.catalog().await;
        let url = format!("{}/v1/messages", self.base_url);
        if let Err(e) = self.stream.preconnect(&url).await {
            tracing::debug!(error = %e, "could not connect to the Anthropic API ahead of a call");
        }
    }

    async fn messages(&self, call: MessagesCall) -> Result<UpstreamResponse, UpstreamError> {
        let mut headers = vec![
            ("x-api-key", self.api_key.clone()),
            ("content-type", "application/json".to_owned()),
            (
                "anthropic-version",
                call.anthropic_version
                    .clone()
                    .unwrap_or_else(|| "2023-06-01".to_owned()),
            ),
        ];
        if let Some(b) = &call.anthropic_beta {
            headers.push(("anthropic-beta", b.clone()));
        }
        if let Some(ua) = &call.client_user_agent {
            headers.push(("user-agent", ua.clone()));
        }
        let resp = self
            .stream
            .post(
                &format!("{}/v1/messages", self.base_url),
                header_map(headers),
                call.body.clone(),
            )
            .await?;
        Ok(UpstreamResponse {
            status: resp.status,
            headers: resp.headers,
            body: resp.body,
        })
    }
}
