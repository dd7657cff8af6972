//! Set-up the agent benchmarks share.

use claude_host_testkit::fake::{FakeUpstream, Match, Reply, Rule};
use claude_host_upstream::copilot::{
    ClientIdentity, CopilotEndpoints, CopilotOptions, CopilotUpstream,
};
use std::sync::Arc;

/// The fake upstream answering every request with `reply`, and a claude-host proxy in this
/// process in front of it (a Copilot upstream signed in with the fake's token).
#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
pub async fn fake_behind_proxy(
    reply: Reply,
) -> anyhow::Result<(FakeUpstream, claude_host_proxy::ProxyHandle)> {
    let fake = FakeUpstream::start().await?;
    fake.push(Rule {
        when: Match::Always,
        reply,
        times: Some(usize::MAX),
    });
    let proxy = proxy_for(&fake).await?;
    Ok((fake, proxy))
}

/// A claude-host proxy in this process in front of `fake` (a Copilot upstream signed in with
/// the fake's token).
#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
pub async fn proxy_for(fake: &FakeUpstream) -> anyhow::Result<claude_host_proxy::ProxyHandle> {
    let copilot = CopilotUpstream::new(
        claude_host_upstream::http_client()?,
        "gho_fake_github_token".into(),
        CopilotEndpoints::single_host(&fake.url()),
        ClientIdentity::default(),
        CopilotOptions::default(),
    );
    Ok(
        claude_host_proxy::start(claude_host_proxy::ProxyConfig::default(), Arc::new(copilot))
            .await?,
    )
}
