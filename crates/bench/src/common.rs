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
    Ok(claude_host_proxy::start(
        claude_host_proxy::ProxyConfig::default(),
        Arc::new(copilot_for(fake)?),
    )
    .await?)
}

/// An agent running the pinned CLI in `dir/work` (its config and home in `dir`), its model
/// calls through a claude-host proxy in front of `fake`; `tune` adjusts the configuration.
#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
pub async fn agent_for(
    fake: &FakeUpstream,
    dir: &std::path::Path,
    store: Option<Arc<dyn claude_host_store::Store>>,
    tune: impl FnOnce(&mut claude_host_agent::AgentConfig),
) -> anyhow::Result<claude_host_agent::Agent> {
    let mut config = claude_host_agent::AgentConfig::new(
        claude_host_testkit::cli::pinned_cli()?,
        dir.join("work"),
    );
    config.config_dir = Some(dir.join(".claude"));
    config
        .extra_env
        .push(("HOME".into(), dir.display().to_string()));
    tune(&mut config);
    let proxy = proxy_for(fake).await?;
    Ok(claude_host_agent::Agent::new(
        config,
        Arc::new(claude_host_agent::ProxyModels::with_upstream(
            proxy,
            Arc::new(copilot_for(fake)?),
            None,
        )),
        store,
    ))
}

fn copilot_for(fake: &FakeUpstream) -> anyhow::Result<CopilotUpstream> {
    Ok(CopilotUpstream::new(
        claude_host_upstream::http_client()?,
        "gho_fake_github_token".into(),
        CopilotEndpoints::single_host(&fake.url()),
        ClientIdentity::default(),
        CopilotOptions::default(),
    ))
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

/// Whether a session event is a `chat/delta`.
#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
pub fn is_delta(e: &claude_host_agent::SessionEvent) -> bool {
    matches!(e, claude_host_agent::SessionEvent::Action(p)
        if matches!(p.action(), ahp_types::actions::StateAction::ChatDelta(_)))
}

/// Sends `ping` to `s` and times it to the first `chat/delta` it publishes.
#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
pub async fn first_delta(
    s: &claude_host_agent::SessionHandle,
) -> anyhow::Result<std::time::Duration> {
    let (_, mut rx) = s.subscribe().await?;
    let t = std::time::Instant::now();
    let send = s.send("ping");
    tokio::pin!(send);
    let mut first = None;
    loop {
        tokio::select! {
            r = &mut send => { r?; break; }
            e = rx.recv() => {
                let e = e.ok_or_else(|| anyhow::anyhow!("the session ended"))?;
                if first.is_none() && is_delta(&e) {
                    first = Some(t.elapsed());
                }
            }
        }
    }
    for e in rx.drain().await {
        if first.is_none() && is_delta(&e) {
            first = Some(t.elapsed());
        }
    }
    first.ok_or_else(|| anyhow::anyhow!("no delta"))
}

/// The median of some durations (zero for none).
#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
pub fn median(v: &[std::time::Duration]) -> std::time::Duration {
    let mut v = v.to_vec();
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// A duration in milliseconds.
#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
pub fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The port `claude-host serve` (spawned with a piped stdout) prints as `READY:<port>`, and
/// its stdout, which the caller keeps open while the server runs (a closed pipe would fail
/// its later output).
#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
pub fn serve_port(
    child: &mut std::process::Child,
) -> anyhow::Result<(
    u16,
    std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
)> {
    use std::io::BufRead;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let mut lines = std::io::BufReader::new(stdout).lines();
    loop {
        let line = lines
            .next()
            .ok_or_else(|| anyhow::anyhow!("serve exited"))??;
        if let Some(p) = line.strip_prefix("READY:") {
            return Ok((p.trim().parse::<u16>()?, lines));
        }
    }
}
