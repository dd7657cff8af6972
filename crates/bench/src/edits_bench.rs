//! What tracking Claude's edits costs. Run with `scripts/bench-edits.sh`.
//!
//! 1. A shell command that changes 1,000 files of a 10,000-file git repository: the time the
//!    tracker's snapshots before and after take, against the command's own time, and the
//!    bytes kept, against the bytes the command changed.
//! 2. Turns whose tool calls change nothing (five `Read`s; five `Bash true`s), with the real
//!    Claude Code CLI against the fake upstream: a session that tracks edits against one
//!    that does not, in the same run.

mod common;

use claude_host_agent::edits::tracker::HookInput;
use claude_host_agent::edits::{Limits, Tracker};
use claude_host_agent::{SessionHandle, StandaloneSession, standalone_session};
use claude_host_sdk::SessionOptions;
use claude_host_testkit::fake::{FakeUpstream, Match, Reply, Rule};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const FILES: usize = 10_000;
const CHANGED: usize = 1_000;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let runs: usize = std::env::args()
        .nth(1)
        .map(|r| r.parse())
        .transpose()?
        .unwrap_or(5);
    let base = std::env::temp_dir().join(format!("claude-host-edits-bench-{}", std::process::id()));
    std::fs::create_dir_all(&base)?;
    shell_change(&base, runs)?;
    quiet_turns(&base, runs).await?;
    let _ = std::fs::remove_dir_all(&base);
    Ok(())
}

fn shell(dir: &Path, script: &str) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let ok = Command::new("bash")
        .args(["-c", script])
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@invalid")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@invalid")
        .status()?
        .success();
    anyhow::ensure!(ok, "{script} failed");
    Ok(t.elapsed())
}

fn size_of(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

fn hook(event: &str, call: &str) -> HookInput {
    serde_json::from_value(json!({"hook_event_name": event, "tool_name": "Bash",
        "tool_input": {"command": "sed"}, "tool_use_id": call}))
    .unwrap_or_else(|e| panic!("a hook input: {e}"))
}

fn shell_change(base: &Path, runs: usize) -> anyhow::Result<()> {
    let repo = base.join("repo");
    std::fs::create_dir_all(&repo)?;
    // 10,000 files of about 1 KiB in 100 folders, committed.
    shell(
        &repo,
        &format!(
            "for d in $(seq -w 0 99); do mkdir -p src/d$d; done; \
             for i in $(seq -w 0 {}); do d=${{i:0:2}}; \
               head -c 700 /dev/zero | tr '\\0' 'x' | fold -w 70 | sed \"s/^/$i /\" > src/d$d/f$i.txt; done; \
             git init -q && git add -A && git commit -q -m start",
            FILES - 1
        ),
    )?;
    // The first 1,000 files (folders d00..d09), changed and changed back in turn.
    let change = "sed -i 's/^/+/' src/d0?/*.txt";
    let undo = "sed -i 's/^+//' src/d0?/*.txt";
    let changed_bytes: u64 = (0..10)
        .map(|d| size_of(&repo.join(format!("src/d0{d}"))))
        .sum();
    let tracker = Tracker::open(base.join("edits"), vec![repo.clone()], Limits::default())?;
    let (mut before, mut after, mut command) = (Vec::new(), Vec::new(), Vec::new());
    let mut first = None;
    for run in 0..runs * 2 {
        let call = format!("call_{run}");
        let t = Instant::now();
        tracker.on_hook(&hook("PreToolUse", &call));
        let pre = t.elapsed();
        command.push(shell(&repo, if run % 2 == 0 { change } else { undo })?);
        let t = Instant::now();
        let record = tracker.on_hook(&hook("PostToolUse", &call));
        let post = t.elapsed();
        let n = record.map_or(0, |r| r.changes.len());
        anyhow::ensure!(n == CHANGED, "run {run}: {n} files recorded, not {CHANGED}");
        if first.is_none() {
            first = Some(pre);
        } else {
            before.push(pre);
        }
        after.push(post);
    }
    let kept = tracker.store().used();
    let shadow = size_of(&base.join("edits").join("shadow"));
    let (b, a, c) = (
        common::median(&before),
        common::median(&after),
        common::median(&command),
    );
    println!(
        "## A shell command changing {CHANGED} of {FILES} files in a git repository ({} runs)",
        runs * 2
    );
    println!(
        "snapshot before (first, seeded from the repository's index): {:.1} ms",
        common::ms(first.unwrap_or_default())
    );
    println!("snapshot before (later):  {:.1} ms", common::ms(b));
    println!(
        "snapshot after + diff + keeping both sides: {:.1} ms",
        common::ms(a)
    );
    println!(
        "the command itself (sed over the files): {:.1} ms",
        common::ms(c)
    );
    println!(
        "tracking ÷ command: {:.2}",
        (common::ms(a) + common::ms(b)) / common::ms(c).max(0.001)
    );
    println!(
        "bytes changed per run: {} KiB; kept in the content store after {} runs: {} KiB (each version once); shadow index and objects: {} KiB",
        changed_bytes / 1024,
        runs * 2,
        kept / 1024,
        shadow / 1024
    );
    Ok(())
}

async fn quiet_turns(base: &Path, runs: usize) -> anyhow::Result<()> {
    let fake = FakeUpstream::start().await?;
    let work = base.join("work");
    std::fs::create_dir_all(&work)?;
    std::fs::write(work.join("a.txt"), "hello\n")?;
    let read = json!({"file_path": work.join("a.txt").to_str()});
    let bash = json!({"command": "true", "description": "Nothing"});
    let proxy = common::proxy_for(&fake).await?;
    let cli = claude_host_testkit::cli::pinned_cli()?;
    let opts = |dir: &PathBuf| {
        let mut o = SessionOptions::new(
            cli.clone(),
            work.clone(),
            proxy.base_url(),
            proxy.auth_token("bench"),
        );
        o.config_dir = Some(dir.join(".claude"));
        o.extra_env.push(("HOME".into(), dir.display().to_string()));
        o.extra_env.push(("IS_SANDBOX".into(), "1".into()));
        o.permission_mode = Some("bypassPermissions".into());
        o
    };
    println!("\n## Turns of five tool calls that change nothing (median of {runs} turns each)");
    for (label, tool, input) in [("Read", "Read", read), ("Bash true", "Bash", bash)] {
        let mut plain = Vec::new();
        let mut tracked = Vec::new();
        for tracking in [false, true] {
            let mut s = StandaloneSession::new(opts(&base.to_path_buf()));
            s.allow_bypass = true;
            if tracking {
                s.edits_dir = Some(base.join("session-edits"));
            }
            let s = standalone_session(s);
            s.warm().await?;
            // One turn to settle, then the measured ones.
            turn(&fake, &s, tool, &input).await?;
            for _ in 0..runs {
                let d = turn(&fake, &s, tool, &input).await?;
                if tracking {
                    tracked.push(d);
                } else {
                    plain.push(d);
                }
            }
            s.close().await;
        }
        let (p, t) = (common::median(&plain), common::median(&tracked));
        println!(
            "{label}: untracked {:.1} ms, tracked {:.1} ms per turn; extra per tool call {:.2} ms (tracked ÷ untracked {:.2})",
            common::ms(p),
            common::ms(t),
            (common::ms(t) - common::ms(p)) / 5.0,
            common::ms(t) / common::ms(p).max(0.001)
        );
    }
    Ok(())
}

/// One turn of five calls of `tool`, then an answer; its time.
async fn turn(
    fake: &FakeUpstream,
    s: &SessionHandle,
    tool: &str,
    input: &serde_json::Value,
) -> anyhow::Result<Duration> {
    let prompt = format!("please use {tool} {}", uuid_like());
    let once = |when: Match, reply: Reply| Rule {
        when,
        reply,
        times: Some(1),
    };
    fake.push(once(
        Match::LastUserContains(prompt.clone()),
        Reply::tool_use(tool, input.clone()),
    ));
    for _ in 0..4 {
        fake.push(once(
            Match::HasToolResult,
            Reply::tool_use(tool, input.clone()),
        ));
    }
    fake.push(once(Match::HasToolResult, Reply::text("done")));
    let t = Instant::now();
    s.send(&prompt).await?;
    Ok(t.elapsed())
}

/// A number no two turns share.
fn uuid_like() -> u64 {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}
