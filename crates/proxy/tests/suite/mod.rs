mod auth;
mod claude;
mod copilot;
mod copilot_cli;
mod framing;
mod initiator;
mod messages;
mod openai;
mod streaming;
mod tokens;

use claude_host_proxy::{ProxyConfig, ProxyHandle};
use claude_host_testkit::fake::FakeUpstream;
use claude_host_upstream::clock::{Clock, ManualClock};
use claude_host_upstream::copilot::{
    ClientIdentity, CopilotEndpoints, CopilotOptions, CopilotUpstream,
};
use claude_host_upstream::http_client;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

pub(crate) struct Env {
    pub fake: FakeUpstream,
    pub proxy: ProxyHandle,
    pub copilot: CopilotUpstream,
    pub clock: Arc<ManualClock>,
    pub http: reqwest::Client,
}

pub(crate) async fn env() -> Env {
    env_with(ProxyConfig::default()).await
}

pub(crate) async fn env_with(config: ProxyConfig) -> Env {
    let fake = FakeUpstream::start().await.unwrap();
    env_on(fake, config).await
}

pub(crate) async fn env_on(fake: FakeUpstream, config: ProxyConfig) -> Env {
    let clock = Arc::new(ManualClock::new());
    let copilot = CopilotUpstream::with_clock(
        http_client().unwrap(),
        "gho_fake_github_token".into(),
        CopilotEndpoints::single_host(&fake.url()),
        ClientIdentity::default(),
        CopilotOptions {
            mint_backoff: Duration::from_millis(10),
            ..CopilotOptions::default()
        },
        clock.clone() as Arc<dyn Clock>,
    );
    let proxy = claude_host_proxy::start(config, Arc::new(copilot.clone()))
        .await
        .unwrap();
    Env {
        fake,
        proxy,
        copilot,
        clock,
        http: claude_host_testkit::http_client(),
    }
}

impl Env {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.proxy.base_url())
    }

    pub fn bearer(&self) -> String {
        format!("Bearer {}", self.proxy.auth_token("test-session"))
    }

    pub fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.http
            .post(self.url(path))
            .header("authorization", self.bearer())
            .header("anthropic-version", "2023-06-01")
            .header("user-agent", "claude-cli/2.1.330 (external, sdk-cli)")
    }

    pub async fn messages(&self, body: Value) -> reqwest::Response {
        self.post("/v1/messages?beta=true")
            .json(&body)
            .send()
            .await
            .unwrap()
    }
}

/// A proxy whose Copilot API is at `api_url`, with GitHub (sign-in, token mint) at `fake`.
pub(crate) async fn proxy_with_copilot_api(fake: &FakeUpstream, api_url: String) -> ProxyHandle {
    let copilot = CopilotUpstream::new(
        http_client().unwrap(),
        "gho_fake_github_token".into(),
        CopilotEndpoints {
            github_url: fake.url(),
            github_api_url: fake.url(),
            copilot_api_url: Some(api_url),
        },
        ClientIdentity::default(),
        CopilotOptions::default(),
    );
    claude_host_proxy::start(ProxyConfig::default(), Arc::new(copilot))
        .await
        .unwrap()
}

/// A streamed Messages request through `proxy`, from a client of its own.
pub(crate) async fn post_stream(proxy: &ProxyHandle) -> reqwest::Response {
    claude_host_testkit::http_client()
        .post(format!("{}/v1/messages", proxy.base_url()))
        .header("authorization", format!("Bearer {}", proxy.auth_token("s")))
        .json(&request("hi", true))
        .send()
        .await
        .unwrap()
}

pub(crate) fn request(prompt: &str, stream: bool) -> Value {
    json!({
        "model": "claude-opus-5-5",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}],
        "stream": stream,
    })
}

/// Reads a whole SSE response into (event name, data JSON) pairs.
pub(crate) async fn sse_events(resp: reqwest::Response) -> Vec<(String, Value)> {
    let bytes = resp.bytes().await.unwrap();
    parse_sse(&bytes)
}

pub(crate) fn parse_sse(bytes: &[u8]) -> Vec<(String, Value)> {
    let mut p = claude_host_protocol::sse::EventParser::new();
    p.push(bytes);
    std::iter::from_fn(|| p.next_event())
        .map(|e| {
            let data = serde_json::from_str(&e.data).unwrap_or(Value::String(e.data.clone()));
            (e.name, data)
        })
        .collect()
}
