//! AHP server benchmarks: actions per second fanned out to 1 / 10 / 100 subscribed clients
//! (the official `ahp` client over `ahp-ws`, all on loopback), and the RSS of a
//! `claude-host serve` process holding 100 idle sessions. Run with `scripts/bench-ahp.sh`.

use ahp::{Client, ClientConfig, SubscriptionEvent};
use ahp_types::actions::{RootActiveSessionsChangedAction, StateAction};
use claude_host_agent::{Agent, AgentConfig};
use claude_host_ahp::{Host, HostConfig, ServeConfig};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod common;

const TOKEN: &str = "bench-token";

async fn connect(url: &str, id: &str) -> anyhow::Result<Client> {
    let t = ahp_ws::WebSocketTransport::connect(url).await?;
    let c = Client::connect(
        t,
        ClientConfig {
            subscription_buffer: 1 << 16,
            ..ClientConfig::default()
        },
    )
    .await?;
    c.initialize(
        id.into(),
        ahp_types::version::SUPPORTED_PROTOCOL_VERSIONS
            .iter()
            .map(|v| (*v).to_owned())
            .collect(),
        vec![],
    )
    .await?;
    Ok(c)
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
    let total: u64 = std::env::args()
        .nth(1)
        .map(|r| r.parse())
        .transpose()?
        .unwrap_or(20_000);
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
    Ok(())
}
