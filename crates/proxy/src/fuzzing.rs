//! In-process entry points for the fuzz targets (`fuzz/`, feature `fuzzing`): one HTTP request
//! through the proxy's real router and SSE relay, with no socket, against a scripted upstream.
//! Not part of the proxy's API.

use crate::{ProxyConfig, State, auth, routes};
use async_trait::async_trait;
use bytes::Bytes;
use claude_host_upstream::{Catalog, MessagesCall, Upstream, UpstreamError, UpstreamResponse};
use http_body_util::{BodyExt, Full};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// The `Host` header the fuzzed proxy serves (it "listens" on this address).
pub const HOST: &str = "127.0.0.1:8080";

/// The nonce of the fuzzed proxy: requests that should pass authentication send
/// `Bearer <NONCE>.<session>`.
pub const NONCE: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// What the scripted upstream answers to every messages call.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: Vec<(String, String)>,
    /// The body, as the chunks it arrives in.
    pub chunks: Vec<Bytes>,
    /// The connection fails after the last chunk instead of ending cleanly.
    pub fail_at_end: bool,
}

/// What the client got, and what reached the upstream.
#[derive(Debug)]
pub struct Exchange {
    /// Response status.
    pub status: u16,
    /// Response headers (lossy text).
    pub headers: Vec<(String, String)>,
    /// The whole response body (a relayed stream, collected).
    pub body: Vec<u8>,
    /// Every messages call the upstream received, in order.
    pub calls: Vec<MessagesCall>,
}

struct Scripted {
    catalog: Arc<Catalog>,
    reply: Reply,
    calls: Mutex<Vec<MessagesCall>>,
}

#[async_trait]
impl Upstream for Scripted {
    fn name(&self) -> &'static str {
        "fuzz"
    }

    async fn catalog(&self) -> Result<Arc<Catalog>, UpstreamError> {
        Ok(self.catalog.clone())
    }

    async fn messages(&self, call: MessagesCall) -> Result<UpstreamResponse, UpstreamError> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(call);
        let chunks = self.reply.chunks.clone().into_iter().map(Ok);
        let tail = self.reply.fail_at_end.then(|| {
            Err(UpstreamError::Transport(
                "connection reset (fuzz)".to_owned(),
            ))
        });
        Ok(UpstreamResponse {
            status: self.reply.status,
            headers: self.reply.headers.clone(),
            body: Box::pin(futures::stream::iter(chunks.chain(tail))),
        })
    }

    fn filters_betas(&self) -> bool {
        self.catalog.strict
    }
}

/// Sends `request` (its body whole) through the proxy's router, with `catalog` and `reply` as
/// the upstream, and collects the response. `fallback` is the quota fallback model setting.
pub fn exchange(
    request: http::Request<Bytes>,
    catalog: Catalog,
    reply: Reply,
    fallback: Option<String>,
) -> Exchange {
    thread_local! {
        // One runtime for every input: building one per input cost more than the input's
        // handling (a fuzzer runs this thousands of times a second).
        static RUNTIME: Option<tokio::runtime::Runtime> = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .ok();
    }
    let upstream = Arc::new(Scripted {
        catalog: Arc::new(catalog),
        reply,
        calls: Mutex::new(Vec::new()),
    });
    let config = ProxyConfig {
        quota_fallback_model: fallback,
        ..ProxyConfig::default()
    };
    let bound: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 8080));
    let state = State::detached(
        config,
        bound,
        auth::Nonce(NONCE.to_owned()),
        upstream.clone(),
    );
    let (parts, body) = request.into_parts();
    let request = http::Request::from_parts(parts, Full::new(body));
    let handled = async move {
        let resp = routes::handle(request, state).await;
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let body = match resp.into_body().collect().await {
            Ok(b) => b.to_bytes().to_vec(),
            Err(e) => format!("<body error: {e}>").into_bytes(),
        };
        (status, headers, body)
    };
    // A runtime that cannot start says nothing about the input.
    let (status, headers, body) = RUNTIME
        .with(|rt| rt.as_ref().map(|rt| rt.block_on(handled)))
        .unwrap_or_default();
    let calls = std::mem::take(
        &mut *upstream
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    Exchange {
        status,
        headers,
        body,
        calls,
    }
}
