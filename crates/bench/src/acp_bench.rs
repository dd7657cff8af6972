//! `claude-host acp` against claude-agent-acp (the package at `PEER_ENTRY`: the maintained
//! `@agentclientprotocol/claude-agent-acp`, or the frozen `@zed-industries` one), side by side
//! in one run: the same ACP client (the official crate), the same pinned Claude Code CLI, the
//! same fake upstream. The client declares form and URL elicitation, as Zed and most current
//! clients do (`BENCH_ACP_NO_FORMS=1`: none); with forms the maintained peer keeps Claude's
//! `AskUserQuestion`, which it otherwise turns off, so both sides offer the same tools.
//!
//! Measures what an editor feels: spawn → `initialize` answered, RSS before the first
//! session, a just-created session's first prompt → first `agent_message_chunk` (sent at
//! once, as a script would; and 2 s later, as a person types, in `TYPED` sessions a round),
//! a later prompt's, and RSS per idle session (the agent and its CLIs).
//!
//! A third line, in the same run, gives the floor under the typed first prompts: the same CLI
//! driven directly over stream-json (no ACP agent, no host), warmed up and cut as claude-host
//! does, its first prompt 2 s after its spawn → first text delta. Like each agent's typed
//! sessions, the bare CLIs come after a first one in the same home and project that has had
//! the same turns, and all stay running (`BENCH_BARE_FRESH=1`: no first one). That is what the
//! CLI alone takes for the first message of a conversation; the host can only add to it.
//!
//! Experiments: `BENCH_ACP_TYPED=<n>` typed sessions a round (6 unless told);
//! `BENCH_ACP_TYPED_FIRST=1` runs each agent's typed sessions before any other,
//! `BENCH_ACP_TYPED_OWN_DIR=1` in a project directory of its own. `BENCH_ACP_DUMP=<dir>`
//! writes the body of every model request of a round there, in the order the fake got them
//! (`<side>-<round>-request-<k>.json`).
//!
//! The two targets are also printed paired (each typed first prompt of claude-host less the
//! floor's of the same round and session; the peer's later prompts over claude-host's, by
//! round), since a round's three sides share that minute's machine.
//!
//! Each prompt's path is also printed step by step (p50/p99): claude-host's own latency
//! marks (`claude_host_sdk::trace`, turned on in its environment), this client's instants
//! and the fake's receipt of the model request; the peer's and the bare CLI's paths are split
//! at their proxy process's marks (its receipt of the request, its first frame back) and at
//! the fake.
//!
//! The peer and the bare CLI reach the fake through `claude-host proxy` in a process of its
//! own (they cannot sign in to Copilot themselves), as a user of either would run it; so the
//! proxy's memory and CPU count against claude-host only, and every side's model call makes
//! the same hops: CLI → a proxy process → the fake. With `BENCH_ACP_PROXY=in-process` the
//! proxy runs in this process instead, beside the fake, as it did before 2026-11-29: that
//! spares the peer and the bare CLI one process wake-up per leg, which claude-host's CLI pays.
//!
//! Usage: `acp-bench PEER_ENTRY [ROUNDS]`, normally through `scripts/bench-acp.sh`.

mod common;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    ClientCapabilities, ContentBlock, ElicitationCapabilities, ElicitationFormCapabilities,
    ElicitationUrlCapabilities, InitializeRequest, NewSessionRequest, PromptRequest,
    SessionNotification, SessionUpdate, TextContent,
};
use agent_client_protocol::{Agent, ByteStreams, Client};
use anyhow::Context;
use claude_host_protocol::stream_json::FrameKind;
use claude_host_sdk::trace;
use claude_host_sdk::{ClaudeSession, DenyAll, SessionOptions};
use claude_host_testkit::fake::{CapturedRequest, FakeUpstream, Reply};
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

/// Typed first prompts per side and round (`BENCH_ACP_TYPED` to change): each in a session of
/// its own, the second, third, … of its agent, paired with the bare CLI's of the same place.
/// One per round left a run's median at the mercy of a few of the CLI's slow starts.
const TYPED: usize = 6;

/// Later prompts per round (after the first), for the later-prompt figure and its steps.
const LATER: usize = 8;

/// The points of a prompt's path through claude-host, in order: the bench's own instants,
/// the host's latency marks (`claude_host_sdk::trace`) and the fake's receipt of the model
/// request.
const OURS: [&str; 9] = [
    "editor wrote session/prompt",
    trace::ACP_PROMPT,
    trace::CLI_STDIN,
    trace::PROXY_REQUEST,
    "fake got the model request",
    trace::PROXY_FIRST,
    trace::CLI_DELTA,
    trace::ACP_UPDATE,
    "editor read the first chunk",
];
/// Where `OURS` has the benchmark's own instants (written, fake, read) and the ends of
/// claude-host's own steps (its CLI's stdin, its CLI's first delta).
const OURS_WRITTEN: usize = 0;
const OURS_STDIN: usize = 2;
const OURS_FAKE: usize = 4;
const OURS_DELTA: usize = 6;
const OURS_READ: usize = 8;

/// The same path through the peer, whose only marks are its proxy's (a process of its own).
const PEER: [&str; 5] = [
    "editor wrote session/prompt",
    trace::PROXY_REQUEST,
    "fake got the model request",
    trace::PROXY_FIRST,
    "editor read the first chunk",
];

/// The bare CLI's path, through the same proxy process as the peer's.
const BARE: [&str; 5] = [
    "stdin written",
    trace::PROXY_REQUEST,
    "fake got the model request",
    trace::PROXY_FIRST,
    "first delta read",
];

/// `<name> <version>` of the npm package whose entry point is `entry` (`…/dist/index.js`).
fn package_name(entry: &std::path::Path) -> String {
    let manifest = entry
        .parent()
        .and_then(std::path::Path::parent)
        .map(|d| d.join("package.json"));
    let read = manifest
        .and_then(|m| std::fs::read(m).ok())
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
    match read {
        Some(p) => format!(
            "{} {}",
            p["name"].as_str().unwrap_or("claude-agent-acp"),
            p["version"].as_str().unwrap_or("?")
        ),
        None => "claude-agent-acp".to_owned(),
    }
}

/// A prompt the editor sent: which session, its text, when it was written and when its first
/// chunk was read (monotonic ns).
#[derive(Debug, Clone)]
struct Sent {
    session: String,
    text: String,
    at: u64,
    first_chunk: u64,
}

impl Sent {
    /// From the prompt written to its first chunk read.
    fn ms(&self) -> f64 {
        self.first_chunk.saturating_sub(self.at) as f64 / 1e6
    }
}

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
    /// One per typed session, in the order they were made.
    typed_first_chunk_ms: Vec<f64>,
    warm_first_chunk_ms: f64,
    rss_per_session_kib: u64,
    /// The typed first prompt's model request as the fake received it: body bytes, tools.
    request_bytes: usize,
    request_tools: Vec<String>,
    /// The typed first prompts' paths (`Env::typed`) and the later prompts' (`LATER`).
    first_path: Vec<common::Chain>,
    later_paths: Vec<common::Chain>,
}

struct Env {
    dir: PathBuf,
    fake_url: String,
    proxy_url: String,
    proxy_token: String,
    cli: PathBuf,
    ours: PathBuf,
    peer: PathBuf,
    clock: common::Clock,
    /// `BENCH_BARE_FRESH`: the bare CLI floor is a first and only CLI, not a second session.
    bare_fresh: bool,
    /// The latency marks of the proxy process the peer and the bare CLI use (none when that
    /// proxy runs inside the benchmark).
    proxy_trace: Option<PathBuf>,
    /// The peer's package name and version, from its `package.json`.
    peer_name: String,
    /// The client declares form (and URL) elicitation.
    forms: bool,
    /// Typed first prompts per side and round.
    typed: usize,
}

impl Env {
    /// The marks the proxy process has written so far (none when the proxy runs inside the
    /// benchmark).
    fn proxy_marks(&self) -> common::Marks {
        self.proxy_trace
            .as_deref()
            .map(common::Marks::read)
            .unwrap_or_default()
    }

    /// A prompt's path through the proxy process: written at `at`, the proxy's receipt, the
    /// fake's, the proxy's first frame back, read at `read` (`steps` names the five points).
    fn proxy_chain(
        &self,
        marks: &common::Marks,
        steps: &[&str; 5],
        at: u64,
        fake_at: Option<u64>,
        read: u64,
    ) -> common::Chain {
        // The proxy's token is `<nonce>.<session>`; its marks are keyed by the session.
        let key = self.proxy_token.split_once('.').map_or("", |(_, s)| s);
        common::chain(
            marks,
            key,
            steps,
            &[(0, Some(at)), (2, fake_at), (4, Some(read))],
        )
    }
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
    if side == Side::Ours && std::env::var_os("BENCH_ACP_SAME_TOOLS").is_some() {
        // The peer turns AskUserQuestion off (it has no way to ask); claude-host asks the
        // editor. A blanket deny rule in the user's settings takes the tool out of the
        // model's list, so both sides send the same tools.
        let settings = home.join(".claude");
        std::fs::create_dir_all(&settings)?;
        std::fs::write(
            settings.join("settings.json"),
            r#"{"permissions":{"deny":["AskUserQuestion"]}}"#,
        )?;
    }
    let mut c = match side {
        Side::Ours => {
            let mut c = tokio::process::Command::new(&env.ours);
            c.arg("acp")
                .env("CLAUDE_HOST_HOME", home.join("data"))
                .env("CLAUDE_HOST_GITHUB_URL", &env.fake_url)
                .env("CLAUDE_HOST_GITHUB_API_URL", &env.fake_url)
                .env("CLAUDE_HOST_CLAUDE_PATH", &env.cli)
                .env("GH_TOKEN", "gho_fake_github_token")
                .env(trace::TRACE_ENV, home.with_extension("trace"))
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

/// The names of the tools a model request offers.
fn tool_names(r: &CapturedRequest) -> Vec<String> {
    r.json()["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// A model request that is a turn's: it offers tools. (The maintained peer also asks the
/// model for a session title on each prompt, a request with the prompt's text and no tools.)
struct TurnRequest<'a> {
    /// When the fake received it (monotonic ns).
    at: u64,
    last_user_text: String,
    request: &'a CapturedRequest,
}

/// The turns' requests among `requests`, each read once.
fn turn_requests<'a>(env: &Env, requests: &'a [CapturedRequest]) -> Vec<TurnRequest<'a>> {
    requests
        .iter()
        .filter(|r| r.json()["tools"].as_array().is_some_and(|t| !t.is_empty()))
        .map(|r| TurnRequest {
            at: env.clock.ns(r.received_at),
            last_user_text: r.last_user_text(),
            request: r,
        })
        .collect()
}

/// The first turn's request that carries `text`, received at or after `after`.
fn turn_request<'a, 'r>(
    turns: &'a [TurnRequest<'r>],
    text: &str,
    after: u64,
) -> Option<&'a TurnRequest<'r>> {
    turns
        .iter()
        .filter(|t| t.at >= after && t.last_user_text.contains(text))
        .min_by_key(|t| t.at)
}

/// Writes every model request of a round to `BENCH_ACP_DUMP`, if set.
fn dump_requests(requests: &[CapturedRequest], name: &str) -> anyhow::Result<()> {
    let Some(dir) = std::env::var_os("BENCH_ACP_DUMP") else {
        return Ok(());
    };
    for (k, r) in requests.iter().enumerate() {
        let file = std::path::Path::new(&dir).join(format!("{name}-request-{k}.json"));
        std::fs::write(&file, &r.body).with_context(|| format!("writing {}", file.display()))?;
    }
    Ok(())
}

async fn round(env: &Env, fake: &FakeUpstream, side: Side, n: usize) -> anyhow::Result<Figures> {
    fake.forget_requests();
    let started = Instant::now();
    let mut child = spawn(env, side, n)?;
    let pid = child.id().context("no pid")?;
    let stdin = child.stdin.take().context("no stdin")?;
    let stdout = child.stdout.take().context("no stdout")?;
    let (chunks_tx, mut chunks) = mpsc::unbounded_channel::<Instant>();
    let work = env.dir.join(format!("{side:?}-{n}")).join("work");
    let typed_first = std::env::var_os("BENCH_ACP_TYPED_FIRST").is_some();
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
                let clock = env.clock;
                let mut later_sent: Vec<Sent> = Vec::new();
                let mut caps = ClientCapabilities::new();
                if env.forms {
                    caps = caps.elicitation(
                        ElicitationCapabilities::new()
                            .form(ElicitationFormCapabilities::new())
                            .url(ElicitationUrlCapabilities::new()),
                    );
                }
                cx.send_request(
                    InitializeRequest::new(ProtocolVersion::V1).client_capabilities(caps),
                )
                .block_task()
                .await?;
                f.initialize_ms = started.elapsed().as_secs_f64() * 1e3;
                f.rss_idle_kib = common::rss_kib(pid);
                let idle_tree = tree_rss(pid);
                // The typed sessions first in their agent, with no other session's CLI beside
                // the first.
                let mut typed = if typed_first {
                    typed_prompts(&cx, &mut chunks, &work, env, side, n).await?
                } else {
                    Vec::new()
                };
                let t = Instant::now();
                let id = cx
                    .send_request(NewSessionRequest::new(work.clone()))
                    .block_task()
                    .await?
                    .session_id;
                f.new_session_ms = t.elapsed().as_secs_f64() * 1e3;
                let mut later = Vec::new();
                for i in 0..=LATER {
                    while chunks.try_recv().is_ok() {}
                    let text = format!("ping {side:?} {n} #{i}");
                    let t = Instant::now();
                    let answer = cx.send_request(prompt(&id, &text));
                    let first = chunks.recv().await.unwrap_or_else(Instant::now);
                    let ms = first.duration_since(t).as_secs_f64() * 1e3;
                    if i == 0 {
                        f.cold_first_chunk_ms = ms;
                    } else {
                        later.push(ms);
                        later_sent.push(Sent {
                            session: id.0.to_string(),
                            text,
                            at: clock.ns(t),
                            first_chunk: clock.ns(first),
                        });
                    }
                    answer.block_task().await?;
                }
                f.warm_first_chunk_ms = median(later);
                if !typed_first {
                    typed = typed_prompts(&cx, &mut chunks, &work, env, side, n).await?;
                }
                f.typed_first_chunk_ms = typed.iter().map(Sent::ms).collect();
                let open = 1 + env.typed;
                for _ in open..SESSIONS {
                    cx.send_request(NewSessionRequest::new(work.clone()))
                        .block_task()
                        .await?;
                }
                let all = settled_tree_rss(pid).await;
                f.rss_per_session_kib = all.saturating_sub(idle_tree) / open.max(SESSIONS) as u64;
                Ok((f, typed, later_sent))
            },
        )
        .await
        .map_err(|e| anyhow::anyhow!("{side:?}: {e}"))?;
    let (mut figures, typed, later) = figures;
    let marks = common::Marks::read(
        &env.dir
            .join(format!("{side:?}-{n}"))
            .with_extension("trace"),
    );
    let requests = fake.model_requests();
    dump_requests(&requests, &format!("{side:?}-{n}"))?;
    let turns = turn_requests(env, &requests);
    let proxy_marks = env.proxy_marks();
    let path_of = |s: &Sent| {
        let key = trace::key_of(&s.session);
        let turn = turn_request(&turns, &s.text, s.at);
        let fake_at = turn.map(|t| t.at);
        let path = match side {
            Side::Ours => common::chain(
                &marks,
                key,
                &OURS,
                &[
                    (OURS_WRITTEN, Some(s.at)),
                    (OURS_FAKE, fake_at),
                    (OURS_READ, Some(s.first_chunk)),
                ],
            ),
            Side::Peer => env.proxy_chain(&proxy_marks, &PEER, s.at, fake_at, s.first_chunk),
        };
        (path, turn)
    };
    for (j, s) in typed.iter().enumerate() {
        let (path, turn) = path_of(s);
        if let Some(t) = turn.filter(|_| j == 0) {
            figures.request_bytes = t.request.body.len();
            figures.request_tools = tool_names(t.request);
        }
        figures.first_path.push(path);
    }
    figures.later_paths = later.iter().map(|s| path_of(s).0).collect();
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

/// A user creates a session and types for a while before its first prompt, `env.typed`
/// times: each prompt's path's ends, in order.
async fn typed_prompts(
    cx: &ConnectionTo<Agent>,
    chunks: &mut mpsc::UnboundedReceiver<Instant>,
    work: &std::path::Path,
    env: &Env,
    side: Side,
    n: usize,
) -> anyhow::Result<Vec<Sent>> {
    // In a project of its own, the CLI finds no earlier session's files in it.
    let work = if std::env::var_os("BENCH_ACP_TYPED_OWN_DIR").is_some() {
        let own = work.with_file_name("typed-work");
        std::fs::create_dir_all(&own)?;
        own
    } else {
        work.to_path_buf()
    };
    let mut sent = Vec::new();
    for j in 0..env.typed {
        let typed = cx
            .send_request(NewSessionRequest::new(work.clone()))
            .block_task()
            .await?
            .session_id;
        tokio::time::sleep(TYPING).await;
        while chunks.try_recv().is_ok() {}
        let text = typed_text(&format!("{side:?}"), n, j);
        let t = Instant::now();
        let answer = cx.send_request(prompt(&typed, &text));
        let first = chunks.recv().await.unwrap_or_else(Instant::now);
        answer.block_task().await?;
        sent.push(Sent {
            session: typed.0.to_string(),
            text,
            at: env.clock.ns(t),
            first_chunk: env.clock.ns(first),
        });
    }
    Ok(sent)
}

/// The text of round `n`'s typed prompt `j` on `side`; no prompt's text holds another's.
fn typed_text(side: &str, n: usize, j: usize) -> String {
    format!("typed ping {side} {n}/{j}.")
}

/// A 90 % interval of the median of `v`: the 5th and 95th percentiles of the medians of
/// 5,000 resamples (with replacement, from a fixed seed, so a run's lists give its figures
/// again).
fn median_interval(v: &[f64]) -> (f64, f64) {
    use rand::{Rng, SeedableRng};
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(32);
    let medians: Vec<f64> = (0..5_000)
        .map(|_| {
            median(
                (0..v.len())
                    .map(|_| v[rng.random_range(0..v.len())])
                    .collect(),
            )
        })
        .collect();
    (
        common::quantile(&medians, 0.05),
        common::quantile(&medians, 0.95),
    )
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
    let clock = common::Clock::new();
    let exe = std::env::current_exe()?;
    let ours = exe
        .parent()
        .map(|d| d.join("claude-host"))
        .filter(|p| p.exists())
        .context("build claude-host next to acp-bench (scripts/bench-acp.sh does)")?;
    let fake = common::fake_answering(Reply::text("pong pong pong")).await?;
    // Either handle keeps its proxy alive until the end of the run.
    let dir = std::env::temp_dir().join(format!("claude-host-acp-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let proxy_trace = dir.join("proxy.trace");
    let in_process = std::env::var("BENCH_ACP_PROXY").as_deref() == Ok("in-process");
    let (proxy_url, proxy_token, _in_process, _process) = if in_process {
        let proxy = common::proxy_for(&fake).await?;
        let (url, token) = (proxy.base_url(), proxy.auth_token("acp-peer"));
        (url, token, Some(proxy), None)
    } else {
        let proxy = common::spawn_traced_proxy(&ours, &fake.url(), Some(&proxy_trace))?;
        let (url, token) = (proxy.base_url.clone(), proxy.auth_token.clone());
        (url, token, None, Some(proxy))
    };
    // The fake's first answer loads its tokenizer (a few hundred ms): paid here, not by
    // whichever agent happens to go first. Through the proxy, so its token and catalog are
    // fetched too.
    let warmup = claude_host_upstream::http_client()?
        .post(format!("{proxy_url}/v1/messages"))
        .bearer_auth(&proxy_token)
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
    let peer_name = package_name(&peer);
    let env = Env {
        dir: dir.clone(),
        fake_url: fake.url(),
        proxy_url,
        proxy_token,
        cli: claude_host_testkit::cli::pinned_cli()?,
        ours,
        peer,
        clock,
        bare_fresh: std::env::var_os("BENCH_BARE_FRESH").is_some(),
        proxy_trace: (!in_process).then_some(proxy_trace),
        peer_name,
        forms: std::env::var_os("BENCH_ACP_NO_FORMS").is_none(),
        typed: std::env::var("BENCH_ACP_TYPED")
            .ok()
            .map(|t| t.parse())
            .transpose()
            .context("BENCH_ACP_TYPED: a number of typed sessions")?
            .unwrap_or(TYPED)
            .max(1),
    };
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    let mut floor = Vec::new();
    for n in 0..rounds {
        // Alternating, so a drift of the machine affects both alike.
        ours.push(round(&env, &fake, Side::Ours, n).await?);
        theirs.push(round(&env, &fake, Side::Peer, n).await?);
        floor.push(bare_cli_first_prompts(&env, &fake, n).await?);
    }
    if std::env::var_os("BENCH_AGENT_LOG").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!("logs in {}", dir.display());
    }
    report(&env, &ours, &theirs, rounds);
    report_floor(&env, &floor, &ours, &theirs);
    report_paired(&floor, &ours, &theirs);
    report_steps(&env, &ours, &theirs, &floor);
    report_requests(&ours, &theirs, &floor);
    Ok(())
}

fn report(env: &Env, ours: &[Figures], theirs: &[Figures], rounds: usize) {
    let m = |v: &[Figures], f: fn(&Figures) -> f64| median(v.iter().map(f).collect());
    println!(
        "claude-host acp vs {}, same CLI and fake upstream, {rounds} rounds alternating, medians; the client {} forms",
        env.peer_name,
        if env.forms {
            "declares"
        } else {
            "does not declare"
        }
    );
    // Lower is better for every row; the ratio is theirs ÷ ours (above 1: claude-host ahead).
    println!("| measurement | claude-host (min..max) | the peer (min..max) | theirs ÷ ours |");
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
            |f| median(f.typed_first_chunk_ms.clone()),
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

/// A typed first prompt on the bare CLI: what the floor is made of.
struct FloorPrompt {
    /// From writing the prompt to the first `content_block_delta` read.
    ms: f64,
    path: common::Chain,
    /// The model request's body.
    bytes: usize,
}

/// The round's typed first prompts on the bare CLI (`Env::typed`), each on a CLI of its own
/// spawned with the round's fresh `HOME`, initialized, warmed up and cut by the same SDK code
/// claude-host uses, then prompted 2 s after its spawn; each left running, as each agent's
/// typed sessions are.
async fn bare_cli_first_prompts(
    env: &Env,
    fake: &FakeUpstream,
    round: usize,
) -> anyhow::Result<Vec<FloorPrompt>> {
    fake.forget_requests();
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
    // What claude-host gives its CLIs beyond the SDK's defaults, to tell the host's own time
    // from the cost of these options (an experiment, not the floor).
    if let Ok(extras) = std::env::var("BENCH_BARE_EXTRAS") {
        for extra in extras.split(',') {
            match extra {
                "session-id" => opts.session_id = Some(uuid::Uuid::new_v4().to_string()),
                "no-websearch" => opts.disallowed_tools = vec!["WebSearch".into()],
                "models" => opts.extra_env.extend([
                    (
                        "ANTHROPIC_DEFAULT_HAIKU_MODEL".into(),
                        "claude-haiku-5-5".into(),
                    ),
                    (
                        "ANTHROPIC_SMALL_FAST_MODEL".into(),
                        "claude-haiku-5-5".into(),
                    ),
                ]),
                "compact-window" => opts
                    .extra_env
                    .push(("CLAUDE_CODE_AUTO_COMPACT_WINDOW".into(), "168000".into())),
                other => anyhow::bail!("BENCH_BARE_EXTRAS: unknown {other:?}"),
            }
        }
    }
    // A session before it in the same home and project, with the same turns and left
    // running, as each agent's typed session has: the CLI's second session is slower to its
    // first request than its first (docs/BENCHMARKS.md). `BENCH_BARE_FRESH` leaves it out.
    let _earlier = if env.bare_fresh {
        None
    } else {
        let mut cli = started_bare_cli(opts.clone()).await?;
        for i in 0..=LATER {
            cli.send_user(
                serde_json::json!(format!("ping Bare {round} #{i}")),
                None,
                None,
            )
            .await?;
            while let Some(frame) = tokio::time::timeout(Duration::from_secs(30), cli.next_frame())
                .await
                .context("the earlier bare CLI did not answer")?
            {
                if frame?.kind == FrameKind::Result {
                    break;
                }
            }
        }
        Some(cli)
    };
    // Each prompt's text, its CLI, and when it was written (before and after the write: the
    // total starts before, the proxy's split after) and its first delta read.
    let mut typed = Vec::new();
    for j in 0..env.typed {
        // Timed from the spawn, as claude-host's CLI is started at `session/new`: the prompt
        // meets the CLI at the same point of its start-up work.
        let spawned = Instant::now();
        let mut cli = started_bare_cli(opts.clone()).await?;
        tokio::time::sleep(TYPING.saturating_sub(spawned.elapsed())).await;
        let text = typed_text("Bare", round, j);
        let t = Instant::now();
        cli.send_user(serde_json::json!(text), None, None).await?;
        let written = Instant::now();
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
                first = Some(Instant::now());
            }
            if frame.kind == FrameKind::Result {
                break;
            }
        }
        let first = first.context("the bare CLI's turn streamed no text")?;
        typed.push((text, cli, t, written, first));
    }
    let requests = fake.model_requests();
    dump_requests(&requests, &format!("Bare-{round}"))?;
    let turns = turn_requests(env, &requests);
    let marks = env.proxy_marks();
    let mut prompts = Vec::new();
    for (text, cli, t, written, first) in typed {
        let _ = cli.close().await;
        let at = env.clock.ns(written);
        let turn = turn_request(&turns, &text, at);
        prompts.push(FloorPrompt {
            ms: first.duration_since(t).as_secs_f64() * 1e3,
            path: env.proxy_chain(&marks, &BARE, at, turn.map(|t| t.at), env.clock.ns(first)),
            bytes: turn.map_or(0, |t| t.request.body.len()),
        });
    }
    Ok(prompts)
}

/// A bare CLI spawned, initialized, warmed up and cut by the same SDK code claude-host uses.
async fn started_bare_cli(mut opts: SessionOptions) -> anyhow::Result<ClaudeSession> {
    if opts.session_id.is_some() {
        // Each CLI a session of its own, as claude-host gives each session's CLI.
        opts.session_id = Some(uuid::Uuid::new_v4().to_string());
    }
    let mut cli = ClaudeSession::spawn(opts, Arc::new(DenyAll))?;
    cli.initialize(None, serde_json::json!({})).await?;
    cli.warm_up(&uuid::Uuid::new_v4().to_string(), Duration::from_secs(10))
        .await
        .map_err(|e| anyhow::anyhow!("bare CLI warm-up: {e}"))?;
    Ok(cli)
}

fn report_floor(env: &Env, floor: &[Vec<FloorPrompt>], ours: &[Figures], theirs: &[Figures]) {
    let floor: Vec<f64> = floor.iter().flatten().map(|p| p.ms).collect();
    let lo = floor.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = floor.iter().copied().fold(0.0, f64::max);
    let bare = median(floor);
    let typed = |v: &[Figures]| {
        median(
            v.iter()
                .flat_map(|f| f.typed_first_chunk_ms.iter().copied())
                .collect(),
        )
    };
    let (ours, theirs) = (typed(ours), typed(theirs));
    let history = if env.bare_fresh {
        "with no first session before them"
    } else {
        "after a first session with the same turns"
    };
    println!();
    println!(
        "floor: the bare CLI ({} a round, each a session of its own, {history}), warmed up and cut, \
         first prompt 2 s after its spawn → first text delta: {bare:.1} ms ({lo:.1}..{hi:.1}); \
         claude-host's typed first prompts (median of all) add {:.1} ms; the peer's figure over \
         this floor: {:.2}× (the most any host could reach with this CLI's warm-up)",
        env.typed,
        ours - bare,
        if bare > 0.0 { theirs / bare } else { 0.0 },
    );
}

/// The two targets paired: each typed first prompt of claude-host less the bare CLI's in the
/// same place (round and session), and each round's later prompts. A round runs claude-host,
/// the peer and the floor one after the other, so a pair shares the machine's state of that
/// minute; the medians of each side above do not pair them, and on a machine whose speed
/// drifts within a run their difference can be the drift's.
fn report_paired(floor: &[Vec<FloorPrompt>], ours: &[Figures], theirs: &[Figures]) {
    let over: Vec<f64> = ours
        .iter()
        .zip(floor)
        .flat_map(|(o, f)| o.typed_first_chunk_ms.iter().zip(f).map(|(o, f)| o - f.ms))
        .collect();
    let ratios: Vec<f64> = ours
        .iter()
        .zip(theirs)
        .filter(|(o, _)| o.warm_first_chunk_ms > 0.0)
        .map(|(o, t)| t.warm_first_chunk_ms / o.warm_first_chunk_ms)
        .collect();
    let list = |v: &[f64], digits: usize| {
        v.iter()
            .map(|x| format!("{x:.digits$}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (lo, hi) = median_interval(&over);
    println!();
    println!(
        "paired: first prompt, claude-host − floor (same round, same session): median {:+.1} ms \
         (90 % interval {lo:+.1}..{hi:+.1}), within +5 ms in {} of {} pairs ({}); \
         later prompts, peer ÷ claude-host by round: median {:.2}, at least 1.0 in {} of {} rounds ({})",
        median(over.clone()),
        over.iter().filter(|d| **d <= 5.0).count(),
        over.len(),
        list(&over, 1),
        median(ratios.clone()),
        ratios.iter().filter(|r| **r >= 1.0).count(),
        ratios.len(),
        list(&ratios, 2),
    );
}

/// What each side asked the model for its typed first prompt: the work the CLI, the proxy and
/// the fake do per request grows with it.
fn report_requests(ours: &[Figures], theirs: &[Figures], floor: &[Vec<FloorPrompt>]) {
    let bytes = |v: &[Figures]| median(v.iter().map(|f| f.request_bytes as f64).collect());
    let tools = |v: &[Figures]| {
        v.first()
            .map(|f| f.request_tools.join(", "))
            .unwrap_or_default()
    };
    println!();
    println!(
        "model request of the typed first prompt, body bytes (median): claude-host {:.0}, the peer {:.0}, the bare CLI {:.0}",
        bytes(ours),
        bytes(theirs),
        median(floor.iter().flatten().map(|p| p.bytes as f64).collect()),
    );
    println!("tools offered: claude-host [{}]", tools(ours));
    println!("tools offered: the peer [{}]", tools(theirs));
}

/// Where each prompt's time goes, step by step, on both sides and on the bare CLI.
fn report_steps(env: &Env, ours: &[Figures], theirs: &[Figures], floor: &[Vec<FloorPrompt>]) {
    let all = |v: &[Figures], f: fn(&Figures) -> &Vec<common::Chain>| -> Vec<common::Chain> {
        v.iter().flat_map(|x| f(x).iter().cloned()).collect()
    };
    common::print_steps(
        "claude-host, first prompt 2 s after session/new, per step",
        &OURS,
        &all(ours, |f| &f.first_path),
    );
    common::print_steps(
        "claude-host, later prompts, per step",
        &OURS,
        &all(ours, |f| &f.later_paths),
    );
    common::print_steps(
        &format!("{}, first prompt 2 s after session/new", env.peer_name),
        &PEER,
        &all(theirs, |f| &f.first_path),
    );
    common::print_steps(
        &format!("{}, later prompts", env.peer_name),
        &PEER,
        &all(theirs, |f| &f.later_paths),
    );
    let bare: Vec<common::Chain> = floor.iter().flatten().map(|p| p.path.clone()).collect();
    common::print_steps(
        "the bare CLI, first prompt 2 s after its spawn",
        &BARE,
        &bare,
    );
    // What is claude-host's own: editor → CLI stdin and CLI delta → editor.
    let own = |paths: &[common::Chain]| -> Vec<f64> {
        paths
            .iter()
            .filter_map(|c| {
                Some(
                    common::span_ms(c, OURS_WRITTEN, OURS_STDIN)?
                        + common::span_ms(c, OURS_DELTA, OURS_READ)?,
                )
            })
            .collect()
    };
    let first = own(&all(ours, |f| &f.first_path));
    let later = own(&all(ours, |f| &f.later_paths));
    println!();
    println!(
        "claude-host's own steps (editor → CLI stdin, plus CLI first delta → editor): first prompt p50 {:.2} ms, later prompts p50 {:.2} ms p99 {:.2} ms",
        common::quantile(&first, 0.5),
        common::quantile(&later, 0.5),
        common::quantile(&later, 0.99),
    );
}
