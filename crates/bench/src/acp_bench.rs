//! `claude-host acp` against `@zed-industries/claude-agent-acp`, side by side in one run: the
//! same ACP client (the official crate), the same pinned Claude Code CLI, the same fake
//! upstream. Measures what an editor feels: spawn → `initialize` answered, RSS before the
//! first session, a just-created session's first prompt → first `agent_message_chunk` (sent
//! at once, as a script would; and 2 s later, as a person types), a later prompt's, and RSS
//! per idle session (the agent and its CLIs).
//!
//! A third line, in the same run, gives the floor under the typed first prompt: the same CLI
//! driven directly over stream-json (no ACP agent, no host), warmed up and cut as claude-host
//! does, its first prompt 2 s after its spawn → first text delta. That is what the CLI alone takes for
//! the first message of a conversation; the host can only add to it.
//!
//! The peer reaches the fake through a claude-host proxy in this process (it cannot sign in
//! to Copilot itself), so the proxy's memory and CPU count against claude-host only.
//!
//! Usage: `acp-bench PEER_ENTRY [ROUNDS]`, normally through `scripts/bench-acp.sh`.

mod common;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    ContentBlock, InitializeRequest, NewSessionRequest, PromptRequest, SessionNotification,
    SessionUpdate, TextContent,
};
use agent_client_protocol::{Agent, ByteStreams, Client};
use anyhow::Context;
use claude_host_protocol::stream_json::FrameKind;
use claude_host_sdk::{ClaudeSession, DenyAll, SessionOptions};
use claude_host_testkit::fake::Reply;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

/// Idle sessions per agent for the per-session memory figure.
const SESSIONS: usize = 4;

/// How long a user takes to type a first prompt after creating a session.
const TYPING: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    Ours,
    Peer,
}

/// One round's figures for one agent.
#[derive(Debug, Default, Clone)]
struct Figures {
    initialize_ms: f64,
    rss_idle_kib: u64,
    new_session_ms: f64,
    cold_first_chunk_ms: f64,
    typed_first_chunk_ms: f64,
    warm_first_chunk_ms: f64,
    rss_per_session_kib: u64,
}

struct Env {
    dir: PathBuf,
    fake_url: String,
    proxy_url: String,
    proxy_token: String,
    cli: PathBuf,
    ours: PathBuf,
    peer: PathBuf,
}

fn tree_rss(pid: u32) -> u64 {
    common::tree(pid).into_iter().map(common::rss_kib).sum()
}

/// Waits until the process tree's memory stops growing (CLIs started in the background).
async fn settled_tree_rss(pid: u32) -> u64 {
    let mut last = tree_rss(pid);
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = tree_rss(pid);
        if now.abs_diff(last) * 100 <= last.max(1) {
            return now;
        }
        last = now;
    }
    last
}

fn spawn(env: &Env, side: Side, round: usize) -> anyhow::Result<tokio::process::Child> {
    let home = env.dir.join(format!("{side:?}-{round}"));
    let work = home.join("work");
    std::fs::create_dir_all(&work)?;
    let mut c = match side {
        Side::Ours => {
            let mut c = tokio::process::Command::new(&env.ours);
            c.arg("acp")
                .env("CLAUDE_HOST_HOME", home.join("data"))
                .env("CLAUDE_HOST_GITHUB_URL", &env.fake_url)
                .env("CLAUDE_HOST_GITHUB_API_URL", &env.fake_url)
                .env("CLAUDE_HOST_CLAUDE_PATH", &env.cli)
                .env("GH_TOKEN", "gho_fake_github_token")
                .env(
                    "CLAUDE_HOST_LOG",
                    std::env::var("BENCH_AGENT_LOG").unwrap_or_else(|_| "warn".into()),
                );
            c
        }
        Side::Peer => {
            let mut c = tokio::process::Command::new("node");
            c.arg(&env.peer)
                .env("CLAUDE_CODE_EXECUTABLE", &env.cli)
                .env("ANTHROPIC_BASE_URL", &env.proxy_url)
                .env("ANTHROPIC_AUTH_TOKEN", &env.proxy_token)
                .env("DISABLE_AUTOUPDATER", "1")
                .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
            c
        }
    };
    c.env_clear_keep_path()
        .env("HOME", &home)
        .current_dir(&work)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(match std::env::var_os("BENCH_AGENT_LOG") {
            // Where the time goes, for a look by hand: each agent's log next to its folder.
            Some(_) => Stdio::from(std::fs::File::create(home.with_extension("log"))?),
            None => Stdio::null(),
        })
        .kill_on_drop(true);
    Ok(c.spawn()?)
}

trait ClearKeepPath {
    fn env_clear_keep_path(&mut self) -> &mut Self;
}

impl ClearKeepPath for tokio::process::Command {
    fn env_clear_keep_path(&mut self) -> &mut Self {
        // Only what each side is given: no credential or setting of the machine leaks in.
        let path = std::env::var_os("PATH").unwrap_or_default();
        let kept: Vec<(String, String)> = self
            .as_std()
            .get_envs()
            .filter_map(|(k, v)| {
                Some((
                    k.to_string_lossy().into_owned(),
                    v?.to_string_lossy().into_owned(),
                ))
            })
            .collect();
        self.env_clear().env("PATH", path).env("LANG", "C.UTF-8");
        for (k, v) in kept {
            self.env(k, v);
        }
        self
    }
}

fn prompt(session: &agent_client_protocol::v1::schema::SessionId, text: &str) -> PromptRequest {
    PromptRequest::new(
        session.clone(),
        vec![ContentBlock::Text(TextContent::new(text))],
    )
}

async fn round(env: &Env, side: Side, n: usize) -> anyhow::Result<Figures> {
    let started = Instant::now();
    let mut child = spawn(env, side, n)?;
    let pid = child.id().context("no pid")?;
    let stdin = child.stdin.take().context("no stdin")?;
    let stdout = child.stdout.take().context("no stdout")?;
    let (chunks_tx, mut chunks) = mpsc::unbounded_channel::<Instant>();
    let work = env.dir.join(format!("{side:?}-{n}")).join("work");
    let figures = Client
        .v1()
        .on_receive_notification(
            async move |n: SessionNotification, _cx: ConnectionTo<Agent>| {
                if matches!(n.update, SessionUpdate::AgentMessageChunk(_)) {
                    let _ = chunks_tx.send(Instant::now());
                }
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_with(
            ByteStreams::new(stdin.compat_write(), stdout.compat()),
            async move |cx: ConnectionTo<Agent>| {
                let mut f = Figures::default();
                cx.send_request(InitializeRequest::new(ProtocolVersion::V1))
                    .block_task()
                    .await?;
                f.initialize_ms = started.elapsed().as_secs_f64() * 1e3;
                f.rss_idle_kib = common::rss_kib(pid);
                let idle_tree = tree_rss(pid);
                let t = Instant::now();
                let id = cx
                    .send_request(NewSessionRequest::new(work.clone()))
                    .block_task()
                    .await?
                    .session_id;
                f.new_session_ms = t.elapsed().as_secs_f64() * 1e3;
                for (i, slot) in [&mut f.cold_first_chunk_ms, &mut f.warm_first_chunk_ms]
                    .into_iter()
                    .enumerate()
                {
                    while chunks.try_recv().is_ok() {}
                    let t = Instant::now();
                    let answer = cx.send_request(prompt(&id, &format!("ping {i}")));
                    let first = chunks.recv().await.unwrap_or_else(Instant::now);
                    *slot = first.duration_since(t).as_secs_f64() * 1e3;
                    answer.block_task().await?;
                }
                // A user creates a session and types for a while before the first prompt.
                let typed = cx
                    .send_request(NewSessionRequest::new(work.clone()))
                    .block_task()
                    .await?
                    .session_id;
                tokio::time::sleep(TYPING).await;
                while chunks.try_recv().is_ok() {}
                let t = Instant::now();
                let answer = cx.send_request(prompt(&typed, "typed ping"));
                let first = chunks.recv().await.unwrap_or_else(Instant::now);
                f.typed_first_chunk_ms = first.duration_since(t).as_secs_f64() * 1e3;
                answer.block_task().await?;
                for _ in 2..SESSIONS {
                    cx.send_request(NewSessionRequest::new(work.clone()))
                        .block_task()
                        .await?;
                }
                let all = settled_tree_rss(pid).await;
                f.rss_per_session_kib = all.saturating_sub(idle_tree) / SESSIONS as u64;
                Ok(f)
            },
        )
        .await
        .map_err(|e| anyhow::anyhow!("{side:?}: {e}"))?;
    // The client closed the pipes: each agent exits and takes its CLIs with it. The next
    // round starts once all of them are gone, so neither side pays for the other's exit.
    let left = common::tree(pid);
    let _ = tokio::time::timeout(Duration::from_secs(20), child.wait()).await;
    let _ = child.kill().await;
    for _ in 0..200 {
        if left
            .iter()
            .all(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(figures)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let peer = PathBuf::from(args.next().context(
        "usage: acp-bench PEER_ENTRY [ROUNDS] (scripts/bench-acp.sh installs the peer)",
    )?);
    let rounds: usize = args.next().map(|r| r.parse()).transpose()?.unwrap_or(3);
    let (fake, proxy) = common::fake_behind_proxy(Reply::text("pong pong pong")).await?;
    // The fake's first answer loads its tokenizer (a few hundred ms): paid here, not by
    // whichever agent happens to go first.
    let warmup = claude_host_upstream::http_client()?
        .post(format!("{}/v1/messages", proxy.base_url()))
        .bearer_auth(proxy.auth_token("warmup"))
        .header("anthropic-version", "2023-06-01")
        .json(
            &serde_json::json!({"model": "claude-sonnet-4-5", "max_tokens": 16,
            "messages": [{"role": "user", "content": "warm up"}]}),
        )
        .send()
        .await?;
    anyhow::ensure!(
        warmup.status().is_success(),
        "the fake upstream did not answer the warm-up: {}",
        warmup.status()
    );
    let _ = warmup.bytes().await?;
    let dir = std::env::temp_dir().join(format!("claude-host-acp-bench-{}", std::process::id()));
    let exe = std::env::current_exe()?;
    let ours = exe
        .parent()
        .map(|d| d.join("claude-host"))
        .filter(|p| p.exists())
        .context("build claude-host next to acp-bench (scripts/bench-acp.sh does)")?;
    let env = Env {
        dir: dir.clone(),
        fake_url: fake.url(),
        proxy_url: proxy.base_url(),
        proxy_token: proxy.auth_token("acp-peer"),
        cli: claude_host_testkit::cli::pinned_cli()?,
        ours,
        peer,
    };
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    let mut floor = Vec::new();
    for n in 0..rounds {
        // Alternating, so a drift of the machine affects both alike.
        ours.push(round(&env, Side::Ours, n).await?);
        theirs.push(round(&env, Side::Peer, n).await?);
        floor.push(bare_cli_first_prompt(&env, n).await?);
    }
    if std::env::var_os("BENCH_AGENT_LOG").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!("logs in {}", dir.display());
    }
    report(&ours, &theirs, rounds);
    report_floor(&floor, &ours, &theirs);
    Ok(())
}

fn report(ours: &[Figures], theirs: &[Figures], rounds: usize) {
    let m = |v: &[Figures], f: fn(&Figures) -> f64| median(v.iter().map(f).collect());
    println!(
        "claude-host acp vs claude-agent-acp 0.23.1, same CLI and fake upstream, {rounds} rounds alternating, medians"
    );
    // Lower is better for every row; the ratio is theirs ÷ ours (above 1: claude-host ahead).
    println!(
        "| measurement | claude-host (min..max) | claude-agent-acp (min..max) | theirs ÷ ours |"
    );
    println!("|---|---|---|---|");
    type Row = (&'static str, fn(&Figures) -> f64);
    let rows: [Row; 7] = [
        ("spawn → initialize answered (ms)", |f| f.initialize_ms),
        ("RSS before the first session (MiB)", |f| {
            f.rss_idle_kib as f64 / 1024.0
        }),
        ("session/new answered (ms)", |f| f.new_session_ms),
        (
            "first prompt at once after session/new → first chunk (ms)",
            |f| f.cold_first_chunk_ms,
        ),
        (
            "first prompt 2 s after session/new → first chunk (ms)",
            |f| f.typed_first_chunk_ms,
        ),
        ("later prompt → first chunk (ms)", |f| {
            f.warm_first_chunk_ms
        }),
        ("RSS per idle session, CLI included (MiB)", |f| {
            f.rss_per_session_kib as f64 / 1024.0
        }),
    ];
    for (label, get) in rows {
        let a = m(ours, get);
        let b = m(theirs, get);
        let ratio = if a > 0.0 { b / a } else { 0.0 };
        let range = |v: &[Figures]| {
            let all: Vec<f64> = v.iter().map(get).collect();
            let lo = all.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = all.iter().copied().fold(0.0, f64::max);
            format!("{lo:.1}..{hi:.1}")
        };
        println!(
            "| {label} | {a:.1} ({}) | {b:.1} ({}) | {ratio:.2} |",
            range(ours),
            range(theirs)
        );
    }
}

/// The typed first prompt on the bare CLI: spawned with a fresh `HOME`, initialized, warmed
/// up and cut by the same SDK code claude-host uses, then prompted 2 s after the spawn.
/// Milliseconds from writing the prompt to the first `content_block_delta`.
async fn bare_cli_first_prompt(env: &Env, round: usize) -> anyhow::Result<f64> {
    let home = env.dir.join(format!("Bare-{round}"));
    let work = home.join("work");
    std::fs::create_dir_all(&work)?;
    let mut opts = SessionOptions::new(
        env.cli.clone(),
        work,
        env.proxy_url.clone(),
        env.proxy_token.clone(),
    );
    opts.include_partial_messages = true;
    opts.extra_env = vec![("HOME".into(), home.display().to_string())];
    // Timed from the spawn, as claude-host's CLI is started at `session/new`: the prompt
    // meets the CLI at the same point of its start-up work.
    let spawned = Instant::now();
    let mut cli = ClaudeSession::spawn(opts, Arc::new(DenyAll))?;
    cli.initialize(None, serde_json::json!({})).await?;
    cli.warm_up(&uuid::Uuid::new_v4().to_string(), Duration::from_secs(10))
        .await
        .map_err(|e| anyhow::anyhow!("bare CLI warm-up: {e}"))?;
    tokio::time::sleep(TYPING.saturating_sub(spawned.elapsed())).await;
    let t = Instant::now();
    cli.send_user(serde_json::json!("typed ping"), None, None)
        .await?;
    let mut first = None;
    while let Some(frame) = tokio::time::timeout(Duration::from_secs(30), cli.next_frame())
        .await
        .context("the bare CLI did not answer")?
    {
        let frame = frame?;
        let delta = frame.kind == FrameKind::StreamEvent
            && frame
                .get("event")
                .and_then(|e| e.get("type"))
                .and_then(|t| t.as_str())
                == Some("content_block_delta");
        if delta && first.is_none() {
            first = Some(t.elapsed());
        }
        if frame.kind == FrameKind::Result {
            break;
        }
    }
    let _ = cli.close().await;
    let first = first.context("the bare CLI's turn streamed no text")?;
    Ok(first.as_secs_f64() * 1e3)
}

fn report_floor(floor: &[f64], ours: &[Figures], theirs: &[Figures]) {
    let lo = floor.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = floor.iter().copied().fold(0.0, f64::max);
    let bare = median(floor.to_vec());
    let typed = |v: &[Figures]| median(v.iter().map(|f| f.typed_first_chunk_ms).collect());
    let (ours, theirs) = (typed(ours), typed(theirs));
    println!();
    println!(
        "floor: the bare CLI, warmed up and cut, first prompt 2 s after its spawn → first text delta: \
         {bare:.1} ms ({lo:.1}..{hi:.1}); claude-host adds {:.1} ms; the peer's figure over this \
         floor: {:.2}× (the most any host could reach with this CLI's warm-up)",
        ours - bare,
        if bare > 0.0 { theirs / bare } else { 0.0 },
    );
}
