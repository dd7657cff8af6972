//! Agent-layer benchmarks with the real Claude Code CLI, the in-process proxy and the fake
//! upstream: first-prompt latency warm vs cold, the agent layer's added latency to the first
//! delta over a bare SDK session, and host memory per idle session. Run with
//! `scripts/bench-agent.sh`.

mod common;

use claude_host_agent::{StandaloneSession, standalone_session};
use claude_host_protocol::stream_json::FrameKind;
use claude_host_sdk::{ClaudeSession, DenyAll, SessionOptions};
use claude_host_testkit::fake::Reply;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let runs: usize = std::env::args()
        .nth(1)
        .map(|r| r.parse())
        .transpose()?
        .unwrap_or(5);
    // The fake lives as long as the benchmark.
    let (_fake, proxy) = common::fake_behind_proxy(Reply::text("pong pong pong")).await?;
    let dir = std::env::temp_dir().join(format!("claude-host-agent-bench-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("work"))?;
    let cli = claude_host_testkit::cli::pinned_cli()?;
    let opts = || {
        let mut o = SessionOptions::new(
            cli.clone(),
            dir.join("work"),
            proxy.base_url(),
            proxy.auth_token("bench"),
        );
        o.config_dir = Some(dir.join(".claude"));
        o.extra_env.push(("HOME".into(), dir.display().to_string()));
        o.include_partial_messages = true;
        o
    };

    // 1. First prompt: cold (spawn on send) vs warm (spawned at create).
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    for _ in 0..runs {
        let s = standalone_session(StandaloneSession::new(opts()));
        cold.push(common::first_delta(&s).await?);
        let s = standalone_session(StandaloneSession::new(opts()));
        s.warm().await?;
        warm.push(common::first_delta(&s).await?);
    }

    // 2. Warm session, later turns: agent layer vs the bare SDK session it wraps.
    let mut agent = Vec::new();
    let mut bare = Vec::new();
    let s = standalone_session(StandaloneSession::new(opts()));
    s.warm().await?;
    let mut b = ClaudeSession::spawn(opts(), Arc::new(DenyAll))?;
    b.initialize(None, serde_json::json!({})).await?;
    for _ in 0..runs * 4 {
        agent.push(common::first_delta(&s).await?);
        let t = Instant::now();
        b.send_user(serde_json::json!("ping"), None, None).await?;
        let mut first = None;
        loop {
            match b.next_frame().await {
                Some(Ok(f)) => {
                    if first.is_none()
                        && f.kind == FrameKind::StreamEvent
                        && f.get("event")
                            .and_then(|e| e.pointer("/delta/text"))
                            .is_some()
                    {
                        first = Some(t.elapsed());
                    }
                    if f.kind == FrameKind::Result {
                        break;
                    }
                }
                Some(Err(e)) => anyhow::bail!("{e}"),
                None => anyhow::bail!("CLI exited"),
            }
        }
        bare.push(first.ok_or_else(|| anyhow::anyhow!("no delta"))?);
    }

    // 3. Host memory per idle (warm) session, the CLI processes excluded.
    let before = rss_kb()?;
    let mut idle = Vec::new();
    let n = 10;
    for _ in 0..n {
        let s = standalone_session(StandaloneSession::new(opts()));
        s.warm().await?;
        idle.push(s);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = rss_kb()?;

    println!(
        "# agent benchmark: real Claude Code {}, fake upstream, {runs} runs",
        claude_host_sdk::find::PINNED_VERSION
    );
    println!("| measurement | median | min..max |");
    println!("|---|---|---|");
    row("first prompt → first delta, cold session", &cold);
    row("first prompt → first delta, warm session", &warm);
    row("later prompt → first delta, agent session", &agent);
    row("later prompt → first delta, bare SDK session", &bare);
    let (ma, mb) = (common::median(&agent), common::median(&bare));
    println!(
        "| agent layer added (median difference) | {:.2} ms | |",
        ma.as_secs_f64() * 1e3 - mb.as_secs_f64() * 1e3
    );
    println!(
        "| host RSS per idle warm session ({n} sessions) | {:.0} KB | |",
        (after.saturating_sub(before)) as f64 / n as f64
    );
    drop(idle);
    proxy.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn row(name: &str, v: &[Duration]) {
    let mut s = v.to_vec();
    s.sort();
    println!(
        "| {name} | {:.1} ms | {:.1}..{:.1} ms |",
        common::median(v).as_secs_f64() * 1e3,
        s[0].as_secs_f64() * 1e3,
        s[s.len() - 1].as_secs_f64() * 1e3
    );
}

fn rss_kb() -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmRSS:")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .ok_or_else(|| anyhow::anyhow!("no VmRSS"))
}
