//! The HTTP client for model calls, built for many long concurrent streams.
//!
//! reqwest's HTTP/1 connections read with an adaptive buffer that grows to 400 KiB whenever the
//! upstream is ahead of the client; with hundreds of concurrent streams that alone is most of
//! the process's memory. Model calls therefore go through hyper directly with a fixed 16 KiB
//! read buffer (HTTP/2 is bounded by flow control anyway). When the environment configures an
//! HTTP(S) proxy for the target, the call goes through reqwest, which implements proxies fully.

use crate::{UpstreamError, describe_chain, describe_reqwest, passthrough_headers};
use bytes::Bytes;
use futures::TryStreamExt;
use futures::stream::BoxStream;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

type Https = hyper_rustls::HttpsConnector<HttpConnector>;

/// Read buffer per upstream HTTP/1 connection.
const READ_BUF: usize = 8 * 1024;

/// A reply: status, pass-through headers and the streaming body.
pub struct StreamReply {
    /// HTTP status.
    pub status: u16,
    /// Headers worth passing on.
    pub headers: Vec<(String, String)>,
    /// The body as it arrives.
    pub body: BoxStream<'static, Result<Bytes, UpstreamError>>,
}

/// Client for streaming model calls.
#[derive(Clone)]
pub struct StreamClient {
    hyper: Option<Client<Https, Full<Bytes>>>,
    proxied: reqwest::Client,
    matcher: std::sync::Arc<Matcher>,
}

impl std::fmt::Debug for StreamClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamClient").finish_non_exhaustive()
    }
}

impl StreamClient {
    /// A client sharing `proxied` (used for targets the environment routes through a proxy).
    /// When the system's root certificates cannot be loaded, every call goes through reqwest,
    /// which brings its own verifier.
    pub fn for_http(proxied: &reqwest::Client) -> Self {
        match Self::new(proxied.clone()) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "falling back to reqwest for model calls");
                StreamClient {
                    hyper: None,
                    proxied: proxied.clone(),
                    matcher: std::sync::Arc::new(Matcher::from_system()),
                }
            }
        }
    }

    /// A client; `proxied` serves targets the environment routes through a proxy.
    pub fn new(proxied: reqwest::Client) -> Result<Self, UpstreamError> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(Duration::from_secs(15)));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|e| {
                UpstreamError::Transport(format!("cannot load the system's root certificates: {e}"))
            })?
            .https_or_http()
            .enable_all_versions()
            .wrap_connector(http);
        let hyper = Client::builder(TokioExecutor::new())
            .http1_read_buf_exact_size(READ_BUF)
            .pool_idle_timeout(Duration::from_secs(60))
            // Enough warm connections for many sessions; a burst's extra ones close at once.
            .pool_max_idle_per_host(32)
            .build(https);
        Ok(StreamClient {
            hyper: Some(hyper),
            proxied,
            matcher: std::sync::Arc::new(Matcher::from_system()),
        })
    }

    /// `POST url` with `headers` and `body`.
    pub async fn post(
        &self,
        url: &str,
        headers: http::HeaderMap,
        body: Bytes,
    ) -> Result<StreamReply, UpstreamError> {
        let uri: http::Uri = url
            .parse()
            .map_err(|e| UpstreamError::Transport(format!("invalid upstream URL {url}: {e}")))?;
        let hyper = match &self.hyper {
            Some(h) if self.matcher.intercept(&uri).is_none() => h,
            _ => return self.post_reqwest(url, headers, body).await,
        };
        let mut req = http::Request::post(uri)
            .body(Full::new(body))
            .map_err(|e| UpstreamError::Transport(format!("cannot build the request: {e}")))?;
        *req.headers_mut() = headers;
        let resp = hyper
            .request(req)
            .await
            .map_err(|e| UpstreamError::Transport(describe_chain(&e)))?;
        let status = resp.status().as_u16();
        let headers = passthrough_headers(resp.headers());
        let body = resp
            .into_body()
            .into_data_stream()
            .map_err(|e| UpstreamError::Transport(describe_chain(&e)));
        Ok(StreamReply {
            status,
            headers,
            body: Box::pin(body),
        })
    }

    async fn post_reqwest(
        &self,
        url: &str,
        headers: http::HeaderMap,
        body: Bytes,
    ) -> Result<StreamReply, UpstreamError> {
        let resp = self
            .proxied
            .post(url)
            .headers(headers)
            .body(body)
            .send()
            .await
            .map_err(|e| UpstreamError::Transport(describe_reqwest(&e)))?;
        Ok(StreamReply {
            status: resp.status().as_u16(),
            headers: passthrough_headers(resp.headers()),
            body: Box::pin(
                resp.bytes_stream()
                    .map_err(|e| UpstreamError::Transport(describe_reqwest(&e))),
            ),
        })
    }
}
