mod faults;
mod host;
mod interactive;
mod turns;

use claude_host_proxy::{ProxyConfig, ProxyHandle};
use claude_host_sdk::SessionOptions;
use claude_host_testkit::fake::FakeUpstream;
use claude_host_upstream::copilot::{
    ClientIdentity, CopilotEndpoints, CopilotOptions, CopilotUpstream,
};
use claude_host_upstream::http_client;
use std::sync::Arc;

pub(crate) struct Env {
    pub fake: FakeUpstream,
    pub proxy: ProxyHandle,
    pub dir: tempfile::TempDir,
}

pub(crate) async fn env() -> Env {
    let fake = FakeUpstream::start().await.unwrap();
    let copilot = CopilotUpstream::new(
        http_client().unwrap(),
        "gho_fake_github_token".into(),
        CopilotEndpoints::single_host(&fake.url()),
        ClientIdentity::default(),
        CopilotOptions::default(),
    );
    let proxy = claude_host_proxy::start(ProxyConfig::default(), Arc::new(copilot))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("work")).unwrap();
    Env { fake, proxy, dir }
}

impl Env {
    pub fn opts(&self) -> SessionOptions {
        let mut o = SessionOptions::new(
            claude_host_testkit::cli::pinned_cli().unwrap(),
            self.dir.path().join("work"),
            self.proxy.base_url(),
            self.proxy.auth_token("agent-test"),
        );
        o.config_dir = Some(self.dir.path().join(".claude"));
        o.extra_env
            .push(("HOME".into(), self.dir.path().display().to_string()));
        o.include_partial_messages = true;
        o
    }

    pub fn session(&self, opts: SessionOptions) -> claude_host_agent::ChatSession {
        claude_host_agent::ChatSession::new("claude:/chat/test", opts).unwrap()
    }
}

pub(crate) use claude_host_testkit::cli::group_gone;
