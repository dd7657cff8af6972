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

/// The resident memory of process `pid`, in KiB (0 when it is gone).
#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// `pid` and every process below it.
#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
pub fn tree(pid: u32) -> Vec<u32> {
    let mut children: std::collections::HashMap<u32, Vec<u32>> = Default::default();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
                continue;
            };
            if let Some(ppid) = stat
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
            {
                children.entry(ppid).or_default().push(p);
            }
        }
    }
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        out.extend(children.get(&out[i]).cloned().unwrap_or_default());
        i += 1;
    }
    out
}
