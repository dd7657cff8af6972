//! The HTTP client for model calls, built for many long concurrent streams.
//!
//! reqwest's HTTP/1 connections read with an adaptive buffer that grows to 400 KiB whenever the
//! upstream is ahead of the client; with hundreds of concurrent streams that alone is most of
//! the process's memory. hyper's client costs a task switch per body chunk. Model calls
//! therefore go through this crate's own HTTP/1.1 client (`h1`), whose body is read with a
//! fixed 8 KiB buffer in the task that consumes it. When the environment configures an
//! HTTP(S) proxy for the target, the call goes through reqwest, which implements proxies fully.

use crate::h1::H1Client;
use crate::{UpstreamError, describe_reqwest, passthrough_headers};
use bytes::Bytes;
use futures::TryStreamExt;
use futures::stream::BoxStream;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::proxy::matcher::Matcher;
use std::time::Duration;

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
    h1: Option<H1Client>,
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
                    h1: None,
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
        crate::install_tls_provider();
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|e| {
                UpstreamError::Transport(format!("cannot load the system's root certificates: {e}"))
            })?
            .https_or_http()
            // The body is read by `h1`, an HTTP/1.1 reader: ALPN must not agree on HTTP/2.
            .enable_http1()
            .wrap_connector(http);
        // Enough warm connections for many sessions; a burst's extra ones close at once.
        let h1 = H1Client::new(https, 32, Duration::from_secs(60));
        Ok(StreamClient {
            h1: Some(h1),
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
        let uri = parse_url(url)?;
        match &self.h1 {
            Some(h1) if self.matcher.intercept(&uri).is_none() => {
                let request = crate::h1::Encoded::new(&uri, &headers, &body);
                drop((headers, body));
                Ok(h1.send(request).await?)
            }
            _ => self.post_reqwest(url, headers, body).await,
        }
    }

    /// Opens a connection for a call to `url` that is about to come (see
    /// `H1Client::preconnect`); nothing for targets that go through a proxy.
    pub async fn preconnect(&self, url: &str) -> Result<(), UpstreamError> {
        let uri = parse_url(url)?;
        match &self.h1 {
            Some(h1) if self.matcher.intercept(&uri).is_none() => Ok(h1.preconnect(&uri).await?),
            _ => Ok(()),
        }
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

/// An upstream URL as a URI, or why it is not one.
fn parse_url(url: &str) -> Result<http::Uri, UpstreamError> {
    url.parse()
        .map_err(|e| UpstreamError::Transport(format!("invalid upstream URL {url}: {e}")))
}
