//! Soak: SESSIONS sessions doing turns with the real Claude Code CLI against the fake upstream
//! for SECONDS, while this process's resident memory, open descriptors and live runtime tasks
//! are sampled every second (written to CSV when given). Run with
//! `scripts/soak.sh [SECONDS] [SESSIONS] [CSV]`.
//!
//! Each worker opens a session, runs three to seven turns in it (one a `Read` tool call, one
//! interrupted mid-stream), closes it and starts over, so sessions, CLIs, proxy requests and
//! transcripts are created and released all the time. The run warms up (allocator arenas,
//! pools, the store's cache) until every worker has closed its first session, and for at
//! least a quarter of it. Work in flight makes every measure swing with the sessions' cycle,
//! so what is compared is the troughs: the lowest value in the last third of the rest of the
//! run against the lowest in its first third. What a leak leaves behind stays in the troughs.
//! The run fails when one rises by more than its budget: memory 8 MiB (or 5 % of its level,
//! whichever is more), 10 descriptors, 10 tasks. A least-squares slope is printed too. The
//! host's memory is this process's; the fake upstream here forgets each request it logged,
//! so its log does not count.

mod common;

use claude_host_agent::{Agent, NewSession};
use claude_host_testkit::fake::{FakeUpstream, Match, Reply, Rule};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(120);
    let sessions: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(20);
    let csv = args.next();
    let duration = Duration::from_secs(seconds);

    let dir = std::env::temp_dir().join(format!("claude-host-soak-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("work"))?;
    let readable = dir.join("work/notes.txt");
    std::fs::write(&readable, "soak notes\n".repeat(50))?;
    let fake = FakeUpstream::start().await?;
    // The story's gate never opens: only an interrupt ends that turn.
    let _story_gate = script(&fake, &readable);
    let agent = Arc::new(agent(&fake, &dir).await?);

    let turns = Arc::new(AtomicUsize::new(0));
    let opened = Arc::new(AtomicUsize::new(0));
    let cycled = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + duration;
    let workers: Vec<_> = (0..sessions)
        .map(|_| {
            tokio::spawn(worker(
                agent.clone(),
                deadline,
                turns.clone(),
                opened.clone(),
                cycled.clone(),
            ))
        })
        .collect();

    let me = std::process::id();
    let metrics = tokio::runtime::Handle::current().metrics();
    let started = Instant::now();
    let mut samples: Vec<Sample> = Vec::new();
    let mut warm_at = None;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    while Instant::now() < deadline {
        tick.tick().await;
        if warm_at.is_none() && cycled.load(Ordering::SeqCst) == sessions {
            warm_at = Some(started.elapsed().max(duration / 4));
        }
        fake.forget_requests();
        samples.push(Sample {
            at: started.elapsed().as_secs_f64(),
            rss_mib: common::rss_kib(me) as f64 / 1024.0,
            fds: open_fds() as f64,
            tasks: metrics.num_alive_tasks() as f64,
        });
    }
    for w in workers {
        w.await??;
    }
    let turns = turns.load(Ordering::SeqCst);
    let opened = opened.load(Ordering::SeqCst);
    agent.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);

    if let Some(path) = &csv {
        let mut out = String::from("seconds,rss_mib,fds,tasks\n");
        for s in &samples {
            out.push_str(&format!(
                "{:.0},{:.1},{},{}\n",
                s.at, s.rss_mib, s.fds, s.tasks
            ));
        }
        std::fs::write(path, out)?;
    }
    let warmup = warm_at
        .filter(|w| *w + Duration::from_secs(30) <= duration)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "too short: every session must have been closed and opened again with 30 s to go (warm after {:?})",
                warm_at
            )
        })?;
    let steady: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.at >= warmup.as_secs_f64())
        .collect();
    let window_min = steady
        .last()
        .zip(steady.first())
        .map_or(0.0, |(l, f)| (l.at - f.at) / 60.0);
    println!(
        "## Soak: {sessions} sessions, {seconds} s ({} s warm-up): {turns} turns, {opened} sessions opened and closed",
        warmup.as_secs()
    );
    println!(
        "| measure | trough, first third | trough, last third | rise | budget | slope per hour |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    let mut failed = Vec::new();
    /// A name, how to read it from a sample, its budget, and whether the budget grows to
    /// 5 % of the level.
    type Measure = (&'static str, fn(&Sample) -> f64, f64, bool);
    let measures: [Measure; 3] = [
        ("RSS (MiB)", |s| s.rss_mib, 8.0, true),
        ("open descriptors", |s| s.fds, 10.0, false),
        ("live tasks", |s| s.tasks, 10.0, false),
    ];
    let third = steady.len() / 3;
    for (name, get, floor, relative) in measures {
        let values: Vec<f64> = steady.iter().map(|s| get(s)).collect();
        let low = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
        let (first, last) = (low(&values[..third]), low(&values[values.len() - third..]));
        let budget = if relative {
            floor.max(first * 0.05)
        } else {
            floor
        };
        let rise = last - first;
        let points: Vec<(f64, f64)> = steady.iter().map(|s| (s.at / 3600.0, get(s))).collect();
        println!(
            "| {name} | {first:.1} | {last:.1} | {rise:+.1} | {budget:.1} | {:+.1} |",
            slope(&points)
        );
        if rise > budget {
            failed.push(format!(
                "{name}: its trough rose by {rise:.1} over {window_min:.1} min (budget {budget:.1})"
            ));
        }
    }
    anyhow::ensure!(turns > 0, "no turn completed");
    if failed.is_empty() {
        println!("soak: flat");
        Ok(())
    } else {
        anyhow::bail!("soak: not flat: {}", failed.join("; "))
    }
}

struct Sample {
    at: f64,
    rss_mib: f64,
    fds: f64,
    tasks: f64,
}

/// Opens sessions and runs turns in them until `deadline`.
async fn worker(
    agent: Arc<Agent>,
    deadline: Instant,
    turns: Arc<AtomicUsize>,
    opened: Arc<AtomicUsize>,
    cycled: Arc<AtomicUsize>,
) -> anyhow::Result<()> {
    let mut first = true;
    while Instant::now() < deadline {
        let s = agent.create_session(NewSession::default()).await?;
        // Three to seven turns, so that the workers do not keep in step.
        let n = opened.fetch_add(1, Ordering::SeqCst);
        for i in 0..3 + (n * 7 + n / 3) % 5 {
            if Instant::now() >= deadline {
                break;
            }
            match i {
                1 => {
                    s.send("please read the notes").await?;
                }
                // A turn interrupted while the model streams: the gated reply never ends.
                3 => {
                    let (_, mut rx) = s.subscribe().await?;
                    let send = s.send("a long story");
                    tokio::pin!(send);
                    let mut aborted = false;
                    loop {
                        tokio::select! {
                            r = &mut send => { r?; break; }
                            e = rx.recv() => {
                                let e = e.ok_or_else(|| anyhow::anyhow!("the session ended"))?;
                                if !aborted && common::is_delta(&e) {
                                    s.abort().await?;
                                    aborted = true;
                                }
                            }
                        }
                    }
                }
                _ => {
                    s.send("hello").await?;
                }
            }
            turns.fetch_add(1, Ordering::SeqCst);
        }
        let id = s.id().to_owned();
        drop(s);
        agent.dispose_session(&id).await?;
        if std::mem::take(&mut first) {
            cycled.fetch_add(1, Ordering::SeqCst);
        }
    }
    Ok(())
}

/// Text for most prompts, a `Read` of `readable` for "read", and a stream that stops after
/// its first delta for "long story" (until the returned gate opens).
fn script(fake: &FakeUpstream, readable: &std::path::Path) -> claude_host_testkit::fake::Gate {
    let (story, gate) = Reply::gated("once upon a time there was a soak test", 4);
    let rules = [
        (Match::LastUserContains("long story".into()), story),
        (
            Match::LastUserContains("read the notes".into()),
            Reply::tool_use(
                "Read",
                serde_json::json!({"file_path": readable.display().to_string()}),
            ),
        ),
        (Match::HasToolResult, Reply::text("The notes say: soak.")),
    ];
    for (when, reply) in rules {
        fake.push(Rule {
            when,
            reply,
            times: Some(usize::MAX),
        });
    }
    fake.set_default_reply(Reply::text("hello there"));
    gate
}

async fn agent(fake: &FakeUpstream, dir: &std::path::Path) -> anyhow::Result<Agent> {
    let store = claude_host_store::SqliteStore::open(&dir.join("sessions.sqlite")).await?;
    common::agent_for(fake, dir, Some(Arc::new(store)), |c| {
        c.customizations_dir = Some(dir.join("customizations"));
    })
    .await
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count)
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if n == 0 { 0.0 } else { sum / n as f64 }
}

/// The least-squares slope of `points` (y per unit of x).
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let mx = mean(points.iter().map(|p| p.0));
    let my = mean(points.iter().map(|p| p.1));
    let (num, den) = points.iter().fold((0.0, 0.0), |(num, den), (x, y)| {
        (num + (x - mx) * (y - my), den + (x - mx) * (x - mx))
    });
    if den == 0.0 { 0.0 } else { num / den }
}
