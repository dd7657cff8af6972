//! Many open sessions, few in use: what stopping idle CLIs saves, and what it costs the next
//! prompt. Run with `scripts/bench-evict.sh [SESSIONS] [ACTIVE]`.
//!
//! 1. SESSIONS sessions are opened through one `Agent` (idle CLIs stopped after 2 s) and each
//!    runs a turn with the real Claude Code CLI against the fake upstream; ACTIVE of them
//!    then run a turn each while the rest sit idle. The memory of this process and every
//!    process below it is read once the idle CLIs are stopped. The baseline, in the same
//!    run: the same with eviction off for ACTIVE + 5 sessions, scaled per session (SESSIONS
//!    live CLIs would need ~20 GB).
//! 2. Prompt → first delta on a warm session, against a session whose CLI was stopped and
//!    whose client typed a draft 1.5 s before sending (the intent re-warms the CLI, which
//!    runs its warm-up turn), and, in the same run, the same with the warm-up turn off.

mod common;

use claude_host_agent::{Agent, ChannelKind};
use claude_host_testkit::fake::{FakeUpstream, Reply};
use std::time::{Duration, Instant};

const IDLE: Duration = Duration::from_secs(2);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let sessions: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(100);
    let active: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(5);
    let fake = FakeUpstream::start().await?;
    fake.push(claude_host_testkit::fake::Rule {
        when: claude_host_testkit::fake::Match::Always,
        reply: Reply::text("pong pong pong"),
        times: None,
    });
    let dir = std::env::temp_dir().join(format!("claude-host-evict-bench-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("work"))?;
    let me = std::process::id();
    let total_mib = || {
        common::tree(me)
            .into_iter()
            .map(common::rss_kib)
            .sum::<u64>() as f64
            / 1024.0
    };

    // Baseline: CLIs kept.
    let base_n = active + 5;
    let kept = agent(&fake, &dir, None, true).await?;
    let before = total_mib();
    let mut handles = Vec::new();
    for _ in 0..base_n {
        let s = kept.create_session(Default::default()).await?;
        s.send("hello").await?;
        handles.push(s);
    }
    let kept_mib = total_mib() - before;
    for s in &handles {
        s.close().await;
    }
    drop(handles);
    let per_live = kept_mib / base_n as f64;

    // Eviction on.
    let evicting = agent(&fake, &dir, Some(IDLE), true).await?;
    let start = total_mib();
    let t = Instant::now();
    let mut open = Vec::new();
    for _ in 0..sessions {
        let s = evicting.create_session(Default::default()).await?;
        s.send("hello").await?;
        open.push(s);
    }
    let opened_in = t.elapsed();
    for s in open.iter().take(active) {
        s.send("still here").await?;
    }
    // The idle ones stop after IDLE; the active ones are still within it.
    for s in open.iter().skip(active) {
        anyhow::ensure!(
            s.wait_cli(false, IDLE * 30).await,
            "an idle CLI was not stopped"
        );
    }
    let live = open
        .iter()
        .filter(|s| s.status().cli_pgid.is_some())
        .count();
    let evicted_mib = total_mib();
    let grown = evicted_mib - start;
    println!(
        "## {sessions} open sessions, {active} active (eviction after {} s)",
        IDLE.as_secs()
    );
    println!(
        "opened and ran a turn each in {:.1} s",
        opened_in.as_secs_f64()
    );
    println!(
        "memory, host and CLIs: {:.0} MiB in all ({:.0} MiB for the sessions; {live} CLIs live)",
        evicted_mib, grown
    );
    println!(
        "baseline (eviction off, {base_n} sessions in this run): {:.0} MiB per session with a live CLI → {:.0} MiB for {sessions}",
        per_live,
        per_live * sessions as f64
    );
    println!(
        "with ÷ without: {:.3}",
        grown / (per_live * sessions as f64)
    );

    // Prompt latency: warm against evicted with intent.
    let warm = &open[0];
    let mut warm_t = Vec::new();
    let cold_t = after_draft(open.iter().skip(active).take(5), warm, &mut warm_t).await?;
    // The same without the warm-up turn: an agent of its own, its sessions evicted too.
    let plain = agent(&fake, &dir, Some(IDLE), false).await?;
    let mut unwarmed = Vec::new();
    for _ in 0..5 {
        let s = plain.create_session(Default::default()).await?;
        s.send("hello").await?;
        unwarmed.push(s);
    }
    for s in &unwarmed {
        anyhow::ensure!(
            s.wait_cli(false, IDLE * 30).await,
            "an idle CLI was not stopped"
        );
    }
    let plain_t = after_draft(unwarmed.iter(), warm, &mut warm_t).await?;
    let (w, c, p) = (
        common::median(&warm_t),
        common::median(&cold_t),
        common::median(&plain_t),
    );
    println!(
        "prompt → first delta: warm {:.1} ms, evicted with a draft first {:.1} ms (÷ {:.2}); without the warm-up turn {:.1} ms (÷ {:.2})",
        common::ms(w),
        common::ms(c),
        common::ms(c) / common::ms(w).max(0.001),
        common::ms(p),
        common::ms(p) / common::ms(w).max(0.001)
    );
    for s in open.iter().chain(&unwarmed) {
        s.close().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// For each of `evicted`: a draft, 1.5 s of typing, then prompt → first delta; a warm
/// session's time goes into `warm_t` before each.
async fn after_draft<'a>(
    evicted: impl Iterator<Item = &'a claude_host_agent::SessionHandle>,
    warm: &claude_host_agent::SessionHandle,
    warm_t: &mut Vec<Duration>,
) -> anyhow::Result<Vec<Duration>> {
    let mut out = Vec::new();
    for (i, s) in evicted.enumerate() {
        warm_t.push(common::first_delta(warm).await?);
        anyhow::ensure!(s.status().cli_pgid.is_none(), "session {i} is not evicted");
        let draft = serde_json::from_value(serde_json::json!({"type": "chat/draftChanged",
            "draft": {"text": "pin", "origin": {"kind": "user"}}}))?;
        s.dispatch(
            ChannelKind::Chat,
            draft,
            ahp_types::actions::ActionOrigin {
                client_id: "bench".into(),
                client_seq: i64::try_from(i).unwrap_or(0) + 1,
            },
        )
        .await?;
        // The user finishes typing.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        out.push(common::first_delta(s).await?);
    }
    Ok(out)
}

async fn agent(
    fake: &FakeUpstream,
    dir: &std::path::Path,
    cli_idle: Option<Duration>,
    warm_up: bool,
) -> anyhow::Result<Agent> {
    common::agent_for(fake, dir, None, |c| {
        c.cli_idle = cli_idle;
        c.warm_up = warm_up;
    })
    .await
}
