//! AHP server benchmarks: actions per second fanned out to 1 / 10 / 100 subscribed clients
//! (the official `ahp` client over `ahp-ws`, all on loopback), the RSS of a
//! `claude-host serve` process holding 100 idle sessions, and the latency of VS Code's path
//! with 10 sessions streaming: a `claude-host serve` process with the pinned Claude Code CLI
//! and the fake upstream (each reply streamed at a model's pace), one client driving 10
//! sessions turn after turn, every turn timed step by step from `chat/turnStarted` written to
//! its first `chat/responsePart` read, with the host's latency marks
//! (`claude_host_sdk::trace`). Run with `scripts/bench-ahp.sh [ACTIONS]`;
//! `ahp-bench latency [SESSIONS] [TURNS]` runs the latency part alone.

use ahp::{Client, ClientConfig, SubscriptionEvent};
use ahp_types::actions::{RootActiveSessionsChangedAction, StateAction};
use claude_host_agent::{Agent, AgentConfig};
use claude_host_ahp::{Host, HostConfig, ServeConfig};
use claude_host_sdk::trace;
use claude_host_testkit::fake::{FakeConfig, FakeUpstream, Match, Reply, Rule};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod common;

const TOKEN: &str = "bench-token";

async fn connect(url: &str, id: &str) -> anyhow::Result<Client> {
    let config = ClientConfig {
        subscription_buffer: 1 << 16,
        ..ClientConfig::default()
    };
    common::ahp_client(url, id, config).await
}

/// Publishes `total` root actions in bursts, waiting after each burst until every client has
/// received it; returns actions per second published (each delivered to every client).
async fn fan_out(host: &Arc<Host>, url: &str, clients: usize, total: u64) -> anyhow::Result<f64> {
    let received = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    let mut conns = Vec::new();
    for i in 0..clients {
        let c = connect(url, &format!("bench-{i}")).await?;
        let (_, mut sub) = c.subscribe("ahp-root://".into()).await?;
        let received = received.clone();
        handles.push(tokio::spawn(async move {
            while let Some(ev) = sub.recv().await {
                if matches!(ev, SubscriptionEvent::Action(_)) {
                    received.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
        conns.push(c);
    }
    let burst = 256;
    let start = Instant::now();
    let mut sent = 0u64;
    while sent < total {
        for _ in 0..burst {
            sent += 1;
            host.publish_root_action(StateAction::RootActiveSessionsChanged(
                RootActiveSessionsChangedAction {
                    active_sessions: i64::try_from(sent)?,
                },
            ));
        }
        let want = sent * clients as u64;
        let deadline = Instant::now() + Duration::from_secs(60);
        while received.load(Ordering::Relaxed) < want {
            anyhow::ensure!(Instant::now() < deadline, "clients stopped receiving");
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    for c in &conns {
        c.shutdown().await;
    }
    for h in handles {
        h.abort();
    }
    Ok(total as f64 / secs)
}

/// Starts `claude-host serve` on a replay upstream, creates `sessions` idle sessions, and
/// returns (RSS at start, RSS after) in KiB.
async fn idle_sessions_rss(sessions: usize) -> anyhow::Result<(u64, u64)> {
    let bin = std::env::current_exe()?
        .parent()
        .map(|d| d.join("claude-host"))
        .ok_or_else(|| anyhow::anyhow!("no binary directory"))?;
    let home = tempdir()?;
    let work = home.join("work");
    std::fs::create_dir_all(&work)?;
    let replay =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hello.replay.jsonl");
    let mut child = std::process::Command::new(&bin)
        .args([
            "--upstream",
            &format!("replay:{}", replay.display()),
            "serve",
            "--port",
            "0",
            "--cwd",
        ])
        .arg(&work)
        .env("CLAUDE_HOST_HOME", &home)
        .env("CLAUDE_HOST_CONNECTION_TOKEN", TOKEN)
        .env("CLAUDE_HOST_LOG", "warn")
        .env("HOME", &home)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let (port, _stdout) = common::serve_port(&mut child)?;
    let url = format!("ws://127.0.0.1:{port}/?tkn={TOKEN}");
    let c = connect(&url, "rss").await?;
    let before = common::rss_kib(child.id());
    for _ in 0..sessions {
        let _: Value = c
            .request(
                "createSession",
                json!({"channel": format!("ahp-session:/{}", uuid_v4()), "provider": "claude"}),
            )
            .await?;
    }
    // Let allocations settle before reading.
    c.ping().await?;
    let after = common::rss_kib(child.id());
    c.shutdown().await;
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&home);
    Ok((before, after))
}

fn uuid_v4() -> String {
    // A v4 UUID from the clock and a counter is enough for distinct bench sessions.
    static N: AtomicU64 = AtomicU64::new(1);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (t >> 32) as u32,
        (t >> 16) as u16,
        n & 0xfff,
        (n >> 12) & 0xfff,
        t & 0xffff_ffff_ffff
    )
}

fn tempdir() -> anyhow::Result<std::path::PathBuf> {
    let d = std::env::temp_dir().join(format!("claude-host-ahp-bench-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let first = args.next();
    if first.as_deref() == Some("latency") {
        let sessions = args.next().map(|r| r.parse()).transpose()?.unwrap_or(10);
        let turns = args.next().map(|r| r.parse()).transpose()?.unwrap_or(10);
        return streaming_latency(sessions, turns).await;
    }
    let total: u64 = first.map(|r| r.parse()).transpose()?.unwrap_or(20_000);
    let dir = tempdir()?;
    let proxy = claude_host_proxy::start(
        claude_host_proxy::ProxyConfig::default(),
        Arc::new(claude_host_upstream::signed_out::SignedOut),
    )
    .await?;
    let factory = |_: &str| -> Arc<dyn claude_host_upstream::Upstream> {
        Arc::new(claude_host_upstream::replay::ReplayUpstream::from_entries(
            Vec::new(),
        ))
    };
    let mut config = AgentConfig::new("claude".into(), dir.clone());
    config.config_dir = Some(dir.join(".claude"));
    let agent = Arc::new(Agent::new(
        config,
        Arc::new(claude_host_agent::ProxyModels::signed_out(
            proxy,
            Arc::new(factory),
        )),
        None,
    ));
    let host = Host::new(agent, HostConfig::default()).await;
    let server = claude_host_ahp::start(
        ServeConfig {
            listen: "127.0.0.1:0".parse()?,
            connection_token: Some(TOKEN.into()),
            ..Default::default()
        },
        host.clone(),
    )
    .await?;
    let url = format!("ws://{}/?tkn={TOKEN}", server.addr());
    println!(
        "fan-out of {total} actions (official ahp client over ahp-ws, loopback, 2 cores shared by server and clients)"
    );
    let mut base = None;
    for clients in [1usize, 10, 100] {
        let n = if clients == 100 { total / 4 } else { total };
        let rate = fan_out(&host, &url, clients, n).await?;
        let delivered = rate * clients as f64;
        let b = *base.get_or_insert(delivered);
        println!(
            "  {clients:>3} clients: {rate:>9.0} actions/s published, {delivered:>10.0} deliveries/s ({:.2}x the 1-client delivery rate)",
            delivered / b
        );
    }
    server.shutdown().await;
    let (before, after) = idle_sessions_rss(100).await?;
    println!(
        "claude-host serve RSS: {:.1} MiB at start, {:.1} MiB with 100 idle sessions ({:.1} KiB per session)",
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        (after.saturating_sub(before)) as f64 / 100.0
    );
    let _ = std::fs::remove_dir_all(&dir);
    streaming_latency(10, 10).await
}

/// The points of a turn's path, in order: the client's own instants, the host's marks and the
/// fake's receipt of the model request.
const PATH: [&str; 7] = [
    "client wrote chat/turnStarted",
    trace::AHP_DISPATCH,
    trace::CLI_STDIN,
    "fake got the model request",
    trace::CLI_PART,
    trace::AHP_PART,
    "client read chat/responsePart",
];

/// How a reply streams: 100 text deltas, one every 10 ms (about a second a turn).
fn paced_fake_config() -> FakeConfig {
    FakeConfig {
        sse_group_gap: Some(Duration::from_millis(10)),
        ..FakeConfig::default()
    }
}

/// One turn as the client saw it: its session, its prompt, when `chat/turnStarted` was
/// written and when the turn's first `chat/responsePart` was read (monotonic ns).
struct Turn {
    session: String,
    text: String,
    at: u64,
    part: Option<u64>,
}

/// `sessions` sessions in one `claude-host serve`, each running `turns` turns back to back
/// (after one unmeasured turn that has every CLI up), started 100 ms apart so turns start
/// while the others stream; prints each step's p50 and p99.
async fn streaming_latency(sessions: usize, turns: usize) -> anyhow::Result<()> {
    let clock = common::Clock::new();
    let fake = FakeUpstream::start_with(paced_fake_config()).await?;
    fake.push(Rule {
        when: Match::Always,
        reply: Reply::text(&"pong ".repeat(80)),
        times: Some(usize::MAX),
    });
    let bin = std::env::current_exe()?
        .parent()
        .map(|d| d.join("claude-host"))
        .ok_or_else(|| anyhow::anyhow!("no binary directory"))?;
    let home = tempdir()?.join("latency");
    let work = home.join("work");
    std::fs::create_dir_all(&work)?;
    let trace_file = home.join("latency.trace");
    let mut child = std::process::Command::new(&bin)
        .args(["serve", "--port", "0", "--cwd"])
        .arg(&work)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("LANG", "C.UTF-8")
        .env("HOME", &home)
        .env("CLAUDE_HOST_HOME", home.join("data"))
        .env("CLAUDE_HOST_CONNECTION_TOKEN", TOKEN)
        .env("CLAUDE_HOST_GITHUB_URL", fake.url())
        .env("CLAUDE_HOST_GITHUB_API_URL", fake.url())
        .env(
            "CLAUDE_HOST_CLAUDE_PATH",
            claude_host_testkit::cli::pinned_cli()?,
        )
        .env("GH_TOKEN", "gho_fake_github_token")
        .env(trace::TRACE_ENV, &trace_file)
        .env(
            "CLAUDE_HOST_LOG",
            std::env::var("BENCH_AGENT_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(std::process::Stdio::piped())
        .stderr(match std::env::var_os("BENCH_AGENT_LOG") {
            Some(_) => std::process::Stdio::from(std::fs::File::create(home.join("serve.log"))?),
            None => std::process::Stdio::null(),
        })
        .spawn()?;
    let (port, _stdout) = common::serve_port(&mut child)?;
    let url = format!("ws://127.0.0.1:{port}/?tkn={TOKEN}");
    let client = Arc::new(connect(&url, "latency").await?);
    let work_uri = claude_host_protocol::uri::file_uri(&work);
    let mut chats = Vec::new();
    for _ in 0..sessions {
        let session = format!("ahp-session:/{}", uuid_v4());
        let _: Value = client
            .request(
                "createSession",
                json!({"channel": session, "provider": "claude", "workingDirectories": [work_uri]}),
            )
            .await?;
        let _ = client.subscribe(session.clone()).await?;
        let chat = claude_host_protocol::uri::default_chat_uri(&session);
        let (_, sub) = client.subscribe(chat.clone()).await?;
        chats.push((session, chat, sub));
    }
    let mut tasks = Vec::new();
    for (i, (session, chat, mut sub)) in chats.into_iter().enumerate() {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            // Unmeasured: every CLI is up and past its first turn before any is timed.
            run_turn(&client, &mut sub, &session, &chat, "warm", &clock).await?;
            tokio::time::sleep(Duration::from_millis(100 * i as u64)).await;
            for t in 0..turns {
                let text = format!("turn {i} {t}");
                out.push(run_turn(&client, &mut sub, &session, &chat, &text, &clock).await?);
            }
            anyhow::Ok(out)
        }));
    }
    let mut done = Vec::new();
    for t in tasks {
        done.extend(t.await??);
    }
    client.shutdown().await;
    let _ = child.kill();
    let _ = child.wait();
    let marks = common::Marks::read(&trace_file);
    let requests = fake.model_requests();
    let paths: Vec<common::Chain> = done
        .iter()
        .map(|t| {
            let fake_at = requests
                .iter()
                .map(|r| (clock.ns(r.received_at), r))
                .filter(|(at, r)| *at >= t.at && r.last_user_text().contains(&t.text))
                .map(|(at, _)| at)
                .min();
            common::chain(
                &marks,
                trace::key_of(&t.session),
                &PATH,
                &[(0, Some(t.at)), (3, fake_at), (6, t.part)],
            )
        })
        .collect();
    common::print_steps(
        &format!(
            "AHP latency with {sessions} sessions streaming (claude-host serve, Claude Code CLI, replies of 100 deltas 10 ms apart), per step"
        ),
        &PATH,
        &paths,
    );
    let part = |a: usize, b: usize| -> Vec<f64> {
        paths
            .iter()
            .filter_map(|c| common::span_ms(c, a, b))
            .collect()
    };
    let (inbound, outbound) = (part(0, 2), part(4, 6));
    println!();
    println!(
        "claude-host's own steps, p50 (target ≤ 2 ms each): chat/turnStarted → CLI stdin {:.2} ms (p99 {:.2}); CLI first content block → chat/responsePart read {:.2} ms (p99 {:.2})",
        common::quantile(&inbound, 0.5),
        common::quantile(&inbound, 0.99),
        common::quantile(&outbound, 0.5),
        common::quantile(&outbound, 0.99),
    );
    let _ = std::fs::remove_dir_all(&home);
    Ok(())
}

/// Sends one prompt and reads the chat until its turn ends.
async fn run_turn(
    client: &Client,
    sub: &mut ahp::SessionSubscription,
    session: &str,
    chat: &str,
    text: &str,
    clock: &common::Clock,
) -> anyhow::Result<Turn> {
    let turn_id = format!("request_{}", uuid_v4());
    let action: StateAction = serde_json::from_value(json!({
        "type": "chat/turnStarted", "turnId": turn_id,
        "startedAt": "2026-01-01T00:00:00.000Z",
        "message": {"text": text, "origin": {"kind": "user"}},
    }))?;
    let at = clock.now();
    client.dispatch(chat.to_owned(), action).await?;
    let mut part = None;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ev = tokio::time::timeout_at(deadline.into(), sub.recv())
            .await
            .map_err(|_| anyhow::anyhow!("turn {text}: no end in 120 s"))?
            .ok_or_else(|| anyhow::anyhow!("the chat subscription ended"))?;
        let SubscriptionEvent::Action(env) = ev else {
            continue;
        };
        if let Some(why) = &env.rejection_reason {
            anyhow::bail!("turn {text} refused: {why}");
        }
        match &env.action {
            StateAction::ChatResponsePart(p) if p.turn_id == turn_id && part.is_none() => {
                part = Some(clock.now());
            }
            StateAction::ChatTurnComplete(t) if t.turn_id == turn_id => break,
            StateAction::ChatError(e) if e.turn_id == turn_id => {
                anyhow::bail!("turn {text} failed: {}", e.part.error.message)
            }
            _ => {}
        }
    }
    Ok(Turn {
        session: session.to_owned(),
        text: text.to_owned(),
        at,
        part,
    })
}
