//! Set-up the agent benchmarks share.

use anyhow::Context;
use claude_host_testkit::fake::{FakeUpstream, Match, Reply, Rule};
use claude_host_upstream::copilot::{
    ClientIdentity, CopilotEndpoints, CopilotOptions, CopilotUpstream,
};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

/// The fake upstream answering every request with `reply`, and a claude-host proxy in this
/// process in front of it (a Copilot upstream signed in with the fake's token).
#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
pub async fn fake_behind_proxy(
    reply: Reply,
) -> anyhow::Result<(FakeUpstream, claude_host_proxy::ProxyHandle)> {
    let fake = fake_answering(reply).await?;
    let proxy = proxy_for(&fake).await?;
    Ok((fake, proxy))
}

/// The fake upstream answering every request with `reply`.
#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
pub async fn fake_answering(reply: Reply) -> anyhow::Result<FakeUpstream> {
    let fake = FakeUpstream::start().await?;
    fake.push(Rule {
        when: Match::Always,
        reply,
        times: Some(usize::MAX),
    });
    Ok(fake)
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

/// Instants of this process as `CLOCK_MONOTONIC` nanoseconds, the clock of the host's latency
/// marks (`claude_host_sdk::trace`), so the two can be compared.
#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    base: std::time::Instant,
    base_ns: u64,
}

#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
impl Clock {
    /// Pairs an `Instant` with the monotonic clock now (both read the same clock on Linux;
    /// the pairing only removes the representation's offset). The pair is read between two
    /// readings of the clock, and the tightest of a few tries is kept: a thread preempted
    /// between the two reads of a single try (once seen, 1.1 ms) would shift every instant
    /// the benchmark converts against the host's marks, and a step would be matched to the
    /// next prompt's mark.
    pub fn new() -> Clock {
        let pair = || {
            let before = claude_host_sdk::trace::now_ns();
            let base = std::time::Instant::now();
            let after = claude_host_sdk::trace::now_ns();
            let spread = after.saturating_sub(before);
            let base_ns = before + spread / 2;
            (spread, Clock { base, base_ns })
        };
        let mut best = pair();
        for _ in 1..16 {
            let next = pair();
            if next.0 < best.0 {
                best = next;
            }
        }
        best.1
    }

    /// `at` in monotonic nanoseconds.
    pub fn ns(&self, at: std::time::Instant) -> u64 {
        match at.checked_duration_since(self.base) {
            Some(d) => self.base_ns + d.as_nanos() as u64,
            None => self
                .base_ns
                .saturating_sub(self.base.duration_since(at).as_nanos() as u64),
        }
    }

    /// Now, in monotonic nanoseconds.
    pub fn now(&self) -> u64 {
        claude_host_sdk::trace::now_ns()
    }
}

/// The host's latency marks: by session key, each step's instants in order.
#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
#[derive(Debug, Default)]
pub struct Marks(std::collections::HashMap<(String, String), Vec<u64>>);

#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
impl Marks {
    /// Reads a trace file (`<step> <key> <ns>` lines); a missing file is no marks.
    pub fn read(path: &std::path::Path) -> Marks {
        let mut m: std::collections::HashMap<(String, String), Vec<u64>> = Default::default();
        for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
            let mut it = line.split_whitespace();
            if let (Some(step), Some(key), Some(ns)) = (it.next(), it.next(), it.next())
                && let Ok(ns) = ns.parse()
            {
                m.entry((step.to_owned(), key.to_owned()))
                    .or_default()
                    .push(ns);
            }
        }
        for v in m.values_mut() {
            v.sort_unstable();
        }
        Marks(m)
    }

    /// The first `step` of session `key` at or after `after`.
    pub fn first(&self, step: &str, key: &str, after: u64) -> Option<u64> {
        let v = self.0.get(&(step.to_owned(), key.to_owned()))?;
        v.get(v.partition_point(|t| *t < after)).copied()
    }
}

/// One prompt's path as a chain of instants (ns), `None` where a mark is missing.
#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
pub type Chain = Vec<Option<u64>>;

/// Follows `steps` from `start` for session `key`: each step's first mark at or after the one
/// before it (the instants the bench itself took are given as `Some` fixed points by the
/// caller through `fixed`: `(index, ns)`).
#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
pub fn chain(marks: &Marks, key: &str, steps: &[&str], fixed: &[(usize, Option<u64>)]) -> Chain {
    let mut out: Chain = vec![None; steps.len()];
    let mut last = 0u64;
    for (i, step) in steps.iter().enumerate() {
        let at = match fixed.iter().find(|(j, _)| *j == i) {
            Some((_, at)) => *at,
            None => marks.first(step, key, last),
        };
        out[i] = at;
        if let Some(t) = at {
            last = t;
        }
    }
    out
}

/// The `q` quantile (0..=1) of `v`, nearest rank (`NaN` for none).
#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// Milliseconds from point `a` to point `b` of `chain`, when both are marked and in order.
#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
pub fn span_ms(chain: &Chain, a: usize, b: usize) -> Option<f64> {
    let (a, b) = ((*chain.get(a)?)?, (*chain.get(b)?)?);
    Some(b.checked_sub(a)? as f64 / 1e6)
}

/// Prints a table of the time between consecutive points of `chains` (milliseconds, p50 and
/// p99 and the count with both ends marked), one row per step, and the whole path.
#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
pub fn print_steps(title: &str, points: &[&str], chains: &[Chain]) {
    println!();
    println!("{title} ({} prompts)", chains.len());
    println!("| step | p50 (ms) | p99 (ms) | n |");
    println!("|---|---|---|---|");
    let row = |label: String, a: usize, b: usize| {
        let d: Vec<f64> = chains.iter().filter_map(|c| span_ms(c, a, b)).collect();
        println!(
            "| {label} | {:.2} | {:.2} | {} |",
            quantile(&d, 0.5),
            quantile(&d, 0.99),
            d.len()
        );
    };
    for i in 1..points.len() {
        row(format!("{} → {}", points[i - 1], points[i]), i - 1, i);
    }
    row(
        format!("total: {} → {}", points[0], points[points.len() - 1]),
        0,
        points.len() - 1,
    );
}

/// An official `ahp` client connected to `url` and initialized as `client_id`, offering every
/// protocol version the crate speaks.
#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
pub async fn ahp_client(
    url: &str,
    client_id: &str,
    config: ahp::ClientConfig,
) -> anyhow::Result<ahp::Client> {
    let t = ahp_ws::WebSocketTransport::connect(url).await?;
    let c = ahp::Client::connect(t, config).await?;
    c.initialize(
        client_id.into(),
        ahp_types::version::SUPPORTED_PROTOCOL_VERSIONS
            .iter()
            .map(|v| (*v).to_owned())
            .collect(),
        vec![],
    )
    .await?;
    Ok(c)
}

/// `claude-host proxy` in a process of its own, in front of a fake upstream: the bare proxy a
/// user runs for their own `claude`, and the hop every agent's model call makes in real use
/// (an in-process proxy beside the fake would spare its clients one process wake-up per leg).
#[allow(dead_code)] // `child` is only held, for its drop, by some benchmarks.
pub struct ProxyProcess {
    /// The running proxy (killed on drop).
    pub child: Owned,
    /// Its `http://127.0.0.1:PORT`.
    pub base_url: String,
    /// The bearer token it accepts.
    pub auth_token: String,
}

/// A child process killed when dropped (on every way out of a benchmark).
pub struct Owned(pub Child);

impl Drop for Owned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `bin proxy --json` signed in to the fake at `fake_url` with the fake's GitHub token.
#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
pub fn spawn_proxy(bin: &std::path::Path, fake_url: &str) -> anyhow::Result<ProxyProcess> {
    spawn_traced_proxy(bin, fake_url, None)
}

/// [`spawn_proxy`], writing its latency marks (`claude_host_sdk::trace`) to `trace` if given.
#[allow(dead_code)] // Not every benchmark binary that includes this module uses it.
pub fn spawn_traced_proxy(
    bin: &std::path::Path,
    fake_url: &str,
    trace: Option<&std::path::Path>,
) -> anyhow::Result<ProxyProcess> {
    let home = std::env::temp_dir().join(format!("claude-host-bench-{}", std::process::id()));
    let mut command = Command::new(bin);
    command.env_clear();
    if let Some(trace) = trace {
        command.env(claude_host_sdk::trace::TRACE_ENV, trace);
    }
    let mut child = command
        .args(["proxy", "--json"])
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("CLAUDE_HOST_HOME", &home)
        .env("GH_TOKEN", "gho_fake_github_token")
        .env("CLAUDE_HOST_GITHUB_URL", fake_url)
        .env("CLAUDE_HOST_GITHUB_API_URL", fake_url)
        .env("CLAUDE_HOST_LOG", "warn")
        // Allocator tuning under test (e.g. MALLOC_ARENA_MAX) reaches the proxy.
        .envs(std::env::vars().filter(|(k, _)| k.starts_with("MALLOC_")))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("cannot start {}", bin.display()))?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("no stdout")?).read_line(&mut line)?;
    let v: serde_json::Value =
        serde_json::from_str(&line).with_context(|| format!("proxy printed {line:?}"))?;
    let s = |k: &str| {
        v[k].as_str()
            .map(str::to_owned)
            .with_context(|| format!("missing {k}"))
    };
    Ok(ProxyProcess {
        base_url: s("base_url")?,
        auth_token: s("auth_token")?,
        child: Owned(child),
    })
}
