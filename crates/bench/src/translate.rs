//! Translated mode of the proxy benchmark: Anthropic requests for models Copilot serves only on
//! OpenAI's APIs (`BENCH_MODEL=gpt-4.1` on Chat Completions, `gpt-5.4` on Responses), against
//! the fake's own OpenAI stream of the same reply, and optionally copilot-api (`BENCH_PEER`:
//! its `main.js`, rewritten by `scripts/bench-translate.sh` to reach the fake) doing the same
//! translation for `BENCH_PEER_MODEL` (default `gpt-4.1`).
//!
//! Every system gets the same Anthropic request from the same load client. Its "direct"
//! baseline is the upstream request that system itself sent (read back from the fake's log),
//! posted to the fake directly, so added TTFB and events/s compare the same upstream stream
//! with and without the system in front. CPU is counted per upstream event (the fake's SSE
//! events: 2,000 text deltas plus the few framing events), from `/proc/PID/task/*/schedstat`
//! of the system's process tree. Runs alternate between the systems, so their ratios come
//! from the same minutes.

use super::{Load, Pacing, RunResult, Target, percentiles, points, run_load, status_kb};
use crate::common::Owned;
use anyhow::{Context, bail};
use claude_host_testkit::fake::{FakeConfig, FakeUpstream, Match, Reply, Rule};
use serde_json::Value;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a reply must look like.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Check {
    /// Nothing checked; events counted (the passthrough benchmark).
    Count,
    /// Anthropic Messages SSE.
    Anthropic,
    /// OpenAI Chat Completions chunks.
    Chat,
    /// OpenAI Responses events.
    Responses,
}

/// What parsing one stream whole found.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Checked {
    /// SSE events (`[DONE]` included).
    pub events: u64,
    /// Text deltas, each checked against the scripted text.
    pub deltas: u64,
    /// HTTP body frames the client read (one per HTTP chunk at most).
    pub frames: u64,
}

/// Counts SSE events (`\n\n`) across body frames, a terminator split between two frames
/// included.
#[derive(Default)]
pub(crate) struct EventCounter {
    pub events: u64,
    last_newline: bool,
}

impl EventCounter {
    pub fn feed(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        if self.last_newline && data[0] == b'\n' {
            self.events += 1;
        }
        self.events += memchr::memmem::find_iter(data, b"\n\n").count() as u64;
        self.last_newline = data[data.len() - 1] == b'\n';
    }
}

/// The text of the `i`th delta of `Reply::many_deltas`.
fn delta_text(i: u64) -> String {
    format!("w{} ", i % 10)
}

impl Check {
    pub fn is_anthropic(self) -> bool {
        matches!(self, Check::Count | Check::Anthropic)
    }

    fn for_path(path: &str) -> anyhow::Result<Check> {
        Ok(match path.split('?').next().unwrap_or_default() {
            "/chat/completions" => Check::Chat,
            "/responses" => Check::Responses,
            other => bail!("upstream request to {other}: not an OpenAI endpoint"),
        })
    }

    /// Every stream: its first bytes are this dialect, and it has at least `min_events`.
    pub fn quick(self, head: &[u8], events: u64, min_events: u64, url: &str) -> anyhow::Result<()> {
        let start: &[u8] = match self {
            Check::Count => return Ok(()),
            Check::Anthropic => b"event: message_start\n",
            Check::Chat => b"data: {",
            Check::Responses => b"event: response.created\n",
        };
        if !head.starts_with(start) {
            bail!(
                "{url}: stream does not start as {self:?} SSE ({:?} expected): {:?}",
                String::from_utf8_lossy(start),
                String::from_utf8_lossy(head)
            );
        }
        if events < min_events {
            bail!("{url}: {events} SSE events in a stream, at least {min_events} expected");
        }
        Ok(())
    }

    /// Parses a whole stream: every event of this dialect, in order, each text delta the
    /// scripted one.
    pub fn parse_whole(self, body: &[u8], frames: u64) -> anyhow::Result<Checked> {
        let events = sse_events(body)?;
        let mut deltas = 0u64;
        let n = events.len();
        let fail = |i: usize, why: &str, data: &str| {
            anyhow::anyhow!(
                "{self:?} stream, event {i} of {n}: {why}: {}",
                &data[..data.len().min(300)]
            )
        };
        for (i, (name, data)) in events.iter().enumerate() {
            let last = i + 1 == n;
            if self == Check::Chat && data == "[DONE]" {
                if !last {
                    return Err(fail(i, "[DONE] before the end", data));
                }
                continue;
            }
            let v: Value = serde_json::from_str(data)
                .map_err(|e| fail(i, &format!("not JSON ({e})"), data))?;
            let kind = v["type"].as_str().unwrap_or_default();
            match self {
                Check::Count => {}
                Check::Anthropic => {
                    if name.as_deref() != Some(kind) {
                        return Err(fail(i, "event name is not the data's type", data));
                    }
                    let allowed = [
                        "message_start",
                        "content_block_start",
                        "content_block_delta",
                        "content_block_stop",
                        "message_delta",
                        "message_stop",
                        "ping",
                    ];
                    if !allowed.contains(&kind) {
                        return Err(fail(i, "not an Anthropic stream event", data));
                    }
                    if i == 0 && (kind != "message_start" || v["message"]["role"] != "assistant") {
                        return Err(fail(i, "first event is not message_start", data));
                    }
                    if last && kind != "message_stop" {
                        return Err(fail(i, "last event is not message_stop", data));
                    }
                    if kind == "message_delta" && v["delta"]["stop_reason"] != "end_turn" {
                        return Err(fail(i, "stop_reason is not end_turn", data));
                    }
                    if kind == "content_block_delta" {
                        if v["delta"]["type"] != "text_delta"
                            || v["delta"]["text"] != delta_text(deltas).as_str()
                        {
                            return Err(fail(i, "not the next text_delta", data));
                        }
                        deltas += 1;
                    }
                }
                Check::Chat => {
                    if name.is_some() || v["object"] != "chat.completion.chunk" {
                        return Err(fail(i, "not a chat.completion.chunk", data));
                    }
                    if let Some(text) = v["choices"][0]["delta"]["content"]
                        .as_str()
                        .filter(|t| !t.is_empty())
                    {
                        if text != delta_text(deltas) {
                            return Err(fail(i, "not the next content delta", data));
                        }
                        deltas += 1;
                    }
                    if last {
                        return Err(fail(i, "the stream does not end with [DONE]", data));
                    }
                }
                Check::Responses => {
                    if name.as_deref() != Some(kind) || !kind.starts_with("response.") {
                        return Err(fail(i, "not a Responses event", data));
                    }
                    if i == 0 && kind != "response.created" {
                        return Err(fail(i, "first event is not response.created", data));
                    }
                    if last && kind != "response.completed" {
                        return Err(fail(i, "last event is not response.completed", data));
                    }
                    if kind == "response.output_text.delta" {
                        if v["delta"] != delta_text(deltas).as_str() {
                            return Err(fail(i, "not the next output_text delta", data));
                        }
                        deltas += 1;
                    }
                }
            }
        }
        Ok(Checked {
            events: n as u64,
            deltas,
            frames,
        })
    }
}

/// A whole SSE body as (event name, joined data) pairs; comment-only events are left out.
fn sse_events(body: &[u8]) -> anyhow::Result<Vec<(Option<String>, String)>> {
    let text = std::str::from_utf8(body).context("stream is not UTF-8")?;
    let Some(text) = text.strip_suffix("\n\n") else {
        bail!(
            "stream does not end with a whole event: {:?}",
            &text[text.len().saturating_sub(200)..]
        );
    };
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut name = None;
        let mut data: Option<String> = None;
        for line in block.lines() {
            if let Some(n) = line.strip_prefix("event:") {
                name = Some(n.trim_start().to_owned());
            } else if let Some(d) = line.strip_prefix("data:") {
                let d = d.strip_prefix(' ').unwrap_or(d);
                match data.as_mut() {
                    Some(all) => {
                        all.push('\n');
                        all.push_str(d);
                    }
                    None => data = Some(d.to_owned()),
                }
            } else if !line.starts_with(':') && !line.is_empty() {
                bail!("not an SSE line: {line:?}");
            }
        }
        match (name, data) {
            (None, None) => {}
            (name, Some(data)) => out.push((name, data)),
            (Some(name), None) => bail!("event {name} without data"),
        }
    }
    Ok(out)
}

/// The translated mode's settings, from the environment.
pub(crate) struct Config {
    /// `BENCH_MODEL`: the models claude-host is measured with (each its own proxy process).
    models: Vec<String>,
    /// `BENCH_PEER`: copilot-api's `main.js`, rewritten to reach the fake.
    peer: Option<String>,
    /// `BENCH_PEER_MODEL`.
    peer_model: String,
    /// `BENCH_NODE`: the Node.js binary.
    node: String,
}

impl Config {
    /// `None`: no `BENCH_MODEL`, or a Claude model (the passthrough benchmark).
    pub fn from_env() -> anyhow::Result<Option<Config>> {
        let models: Vec<String> = std::env::var("BENCH_MODEL")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(str::to_owned)
            .collect();
        if models.is_empty() || models.iter().all(|m| m.starts_with("claude")) {
            return Ok(None);
        }
        if let Some(claude) = models.iter().find(|m| m.starts_with("claude")) {
            bail!(
                "BENCH_MODEL={claude}: a Claude model is passed through, not translated; measure it without BENCH_MODEL"
            );
        }
        Ok(Some(Config {
            models,
            peer: std::env::var("BENCH_PEER").ok().filter(|p| !p.is_empty()),
            peer_model: std::env::var("BENCH_PEER_MODEL").unwrap_or_else(|_| "gpt-4.1".into()),
            node: std::env::var("BENCH_NODE").unwrap_or_else(|_| "node".into()),
        }))
    }
}

/// One system under test.
struct System {
    name: String,
    process: Owned,
    load: Load,
    /// The fake's own stream of the same reply: the upstream request this system sent.
    direct: Load,
    /// SSE events in one upstream stream.
    upstream_events: u64,
    idle_kb: u64,
    /// Per point, per run.
    points: Vec<PointStats>,
    /// Added time to first byte of single requests, each paired with a direct one sent
    /// right before or after it (ms).
    paired_ttfb: Vec<f64>,
    /// The direct request's own time to first byte in each pair (ms).
    paired_direct_ttfb: Vec<f64>,
}

impl System {
    fn pid(&self) -> u32 {
        self.process.0.id()
    }
}

#[derive(Default)]
struct PointStats {
    streams: usize,
    added_p50: Vec<f64>,
    added_p99: Vec<f64>,
    rate_direct: Vec<f64>,
    rate: Vec<f64>,
    ratio: Vec<f64>,
    cpu_per_event: Vec<f64>,
    peak_kb: u64,
}

/// The Anthropic request every system gets: `max_tokens` within what every model allows, so
/// no system has to clamp it.
fn anthropic_body(model: &str) -> bytes::Bytes {
    bytes::Bytes::from(
        serde_json::json!({
            "model": model,
            "max_tokens": 4096,
            "stream": true,
            "messages": [{"role": "user", "content": "stream please"}]
        })
        .to_string(),
    )
}

/// A run of the load client, bounded in time.
fn timed(
    rt: &tokio::runtime::Runtime,
    load: &Load,
    concurrency: usize,
    per_task: usize,
) -> anyhow::Result<RunResult> {
    let limit = Duration::from_secs(
        std::env::var("BENCH_RUN_TIMEOUT")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(300),
    );
    let r = rt
        .block_on(async {
            tokio::time::timeout(limit, run_load(load, concurrency, per_task)).await
        })
        .with_context(|| {
            format!(
                "{}{}: {concurrency} streams did not finish in {limit:?}",
                load.target.base, load.path
            )
        })??;
    let want = (concurrency * per_task) as u64;
    if r.streams != want {
        bail!("{} of {want} streams completed", r.streams);
    }
    Ok(r)
}

pub(crate) fn run(bin: &str, runs: usize, config: Config) -> anyhow::Result<()> {
    let pacing = Pacing::from_env()?;
    let deltas = pacing.events();
    let fake_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let fake = fake_rt.block_on(FakeUpstream::start_with(FakeConfig {
        sse_events_per_write: if pacing == Pacing::Paced { 1 } else { 10 },
        sse_chunk_per_event: pacing != Pacing::Batched,
        sse_group_gap: (pacing == Pacing::Paced).then(|| Duration::from_millis(2)),
        require_copilot_headers: false,
        ..FakeConfig::default()
    }))?;
    fake.push(Rule {
        when: Match::Always,
        reply: Reply::many_deltas(deltas),
        times: Some(usize::MAX),
    });
    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let direct_auth = format!("Bearer {}", client_rt.block_on(super::mint(&fake.url()))?);

    // Each system: its process, its warm-up, and the upstream request it sent.
    let mut started: Vec<(String, Owned, Target, String)> = Vec::new();
    for model in &config.models {
        let proxy = crate::common::spawn_proxy(std::path::Path::new(bin), &fake.url())?;
        let target = Target {
            base: proxy.base_url.clone(),
            auth: format!("Bearer {}", proxy.auth_token),
        };
        started.push((
            format!("claude-host {model}"),
            proxy.child,
            target,
            model.clone(),
        ));
    }
    if let Some(main_js) = &config.peer {
        let (child, base) = spawn_peer(&config.node, main_js, &fake.url())?;
        started.push((
            format!("copilot-api 0.7.0 {}", config.peer_model),
            child,
            Target {
                base,
                auth: "Bearer dummy".into(),
            },
            config.peer_model.clone(),
        ));
    }
    let mut systems = Vec::new();
    println!(
        "# translation benchmark: {deltas} text deltas per upstream stream, {}, medians of {runs} runs (min..max)",
        pacing.describe()
    );
    println!();
    for (name, process, target, model) in started {
        let load = Load {
            target,
            path: "/v1/messages".into(),
            body: anthropic_body(&model),
            check: Check::Anthropic,
            min_events: deltas as u64,
        };
        fake.forget_requests();
        let through = timed(&client_rt, &load, 1, 1)?;
        let sent = fake
            .model_requests()
            .pop()
            .with_context(|| format!("{name}: the fake saw no model request"))?;
        let direct = Load {
            target: Target {
                base: fake.url(),
                auth: direct_auth.clone(),
            },
            check: Check::for_path(&sent.path)?,
            path: sent.path.clone(),
            body: sent.body.clone(),
            min_events: deltas as u64,
        };
        let upstream = timed(&client_rt, &direct, 1, 1)?;
        let (Some(up), Some(down)) = (upstream.checked, through.checked) else {
            bail!("{name}: streams were not parsed");
        };
        for (what, c) in [("upstream", up), (name.as_str(), down)] {
            if c.deltas != deltas as u64 {
                bail!(
                    "{what}: {} text deltas in a stream, {deltas} expected",
                    c.deltas
                );
            }
        }
        println!(
            "checked {name}: upstream {} {}: {} SSE events, {} text deltas, {} HTTP body frames; \
             out: Anthropic SSE, {} events (message_start … {} text_delta … message_stop)",
            sent.path,
            String::from_utf8_lossy(&sent.body),
            up.events,
            up.deltas,
            up.frames,
            down.events,
            down.deltas
        );
        // Warm both paths further (connection pools on every side).
        timed(&client_rt, &load, 4, 2)?;
        timed(&client_rt, &direct, 4, 2)?;
        let mut system = System {
            name,
            process,
            load,
            direct,
            upstream_events: up.events,
            idle_kb: 0,
            points: Vec::new(),
            paired_ttfb: Vec::new(),
            paired_direct_ttfb: Vec::new(),
        };
        system.idle_kb = status_kb(system.pid(), "VmRSS")?;
        systems.push(system);
    }
    fake.forget_requests();
    println!();

    for (concurrency, per_task) in points() {
        for s in &mut systems {
            s.points.push(PointStats {
                streams: concurrency,
                ..PointStats::default()
            });
        }
        for _ in 0..runs {
            for s in &mut systems {
                let d = timed(&client_rt, &s.direct, concurrency, per_task)?;
                let pids = super::tree(s.pid());
                let cpu0 = cpu_ns(&pids);
                let p = timed(&client_rt, &s.load, concurrency, per_task)?;
                let cpu1 = cpu_ns(&pids);
                let rss = status_kb(s.pid(), "VmRSS")?;
                let (d50, d99) = percentiles(&d.ttfb);
                let (p50, p99) = percentiles(&p.ttfb);
                let upstream = (p.streams * s.upstream_events) as f64;
                let rd = d.events as f64 / d.wall.as_secs_f64();
                let rp = upstream / p.wall.as_secs_f64();
                let Some(st) = s.points.last_mut() else {
                    bail!("no point");
                };
                st.added_p50
                    .push(p50.as_secs_f64() * 1e3 - d50.as_secs_f64() * 1e3);
                st.added_p99
                    .push(p99.as_secs_f64() * 1e3 - d99.as_secs_f64() * 1e3);
                st.rate_direct.push(rd);
                st.rate.push(rp);
                st.ratio.push(rp / rd);
                st.cpu_per_event
                    .push(cpu1.saturating_sub(cpu0) as f64 / 1e3 / upstream);
                st.peak_kb = st.peak_kb.max(rss);
            }
            fake.forget_requests();
        }
        for s in &mut systems {
            // The kernel updates VmHWM lazily: it can lag a VmRSS read before it.
            let peak = status_kb(s.pid(), "VmHWM")?.max(s.idle_kb);
            if let Some(st) = s.points.last_mut() {
                st.peak_kb = st.peak_kb.max(peak);
            }
        }
    }
    // Added TTFB from pairs: a direct request and one through the system, back to back, in
    // alternating order. The p50s of two separate runs drift with whatever else the machine
    // does between them (their difference swung by ±2 ms on a shared machine); a pair sees
    // the same moment, so the median of the differences is what the system adds.
    let pairs: usize = std::env::var("BENCH_TTFB_PAIRS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    for s in &mut systems {
        for i in 0..pairs {
            let (d, p) = if i % 2 == 0 {
                let d = timed(&client_rt, &s.direct, 1, 1)?;
                (d, timed(&client_rt, &s.load, 1, 1)?)
            } else {
                let p = timed(&client_rt, &s.load, 1, 1)?;
                (timed(&client_rt, &s.direct, 1, 1)?, p)
            };
            if let (Some(d), Some(p)) = (d.ttfb.first(), p.ttfb.first()) {
                s.paired_ttfb
                    .push(p.as_secs_f64() * 1e3 - d.as_secs_f64() * 1e3);
                s.paired_direct_ttfb.push(d.as_secs_f64() * 1e3);
            }
        }
        fake.forget_requests();
    }
    std::thread::sleep(Duration::from_secs(4));
    report(&systems)?;
    drop(systems);
    fake_rt.block_on(fake.shutdown());
    Ok(())
}

fn report(systems: &[System]) -> anyhow::Result<()> {
    use super::{fmt, fmt_k, median};
    println!(
        "| system | streams | added TTFB p50 | added TTFB p99 | events/s direct | events/s through | ÷ direct | CPU per upstream event | RSS peak |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for s in systems {
        for st in &s.points {
            println!(
                "| {} | {} | {} ms | {} ms | {} | {} | {} | {} µs | {:.1} MB |",
                s.name,
                st.streams,
                fmt(&st.added_p50, 3),
                fmt(&st.added_p99, 3),
                fmt_k(&st.rate_direct),
                fmt_k(&st.rate),
                fmt(&st.ratio, 2),
                fmt(&st.cpu_per_event, 2),
                st.peak_kb as f64 / 1024.0
            );
        }
    }
    println!();
    println!("| system | RSS idle | RSS peak | RSS 4 s after |");
    println!("|---|---|---|---|");
    for s in systems {
        println!(
            "| {} | {:.1} MB | {:.1} MB | {:.1} MB |",
            s.name,
            s.idle_kb as f64 / 1024.0,
            s.points
                .iter()
                .map(|p| p.peak_kb)
                .chain([status_kb(s.pid(), "VmHWM")?, s.idle_kb])
                .max()
                .unwrap_or(0) as f64
                / 1024.0,
            status_kb(s.pid(), "VmRSS")? as f64 / 1024.0
        );
    }
    let peer = systems.iter().find(|s| s.name.starts_with("copilot-api"));
    println!();
    for s in systems.iter().filter(|s| s.name.starts_with("claude-host")) {
        println!("{}:", s.name);
        for (i, st) in s.points.iter().enumerate() {
            let cpu = median(&st.cpu_per_event);
            let mut line = format!(
                "  {} streams: CPU/event {cpu:.2} µs (target ≤ 2: {})",
                st.streams,
                met(cpu <= 2.0)
            );
            if let Some(peer_st) = peer.and_then(|p| p.points.get(i)) {
                // Per run: the two measurements of the same minutes.
                let ratios: Vec<f64> = peer_st
                    .cpu_per_event
                    .iter()
                    .zip(&st.cpu_per_event)
                    .map(|(p, c)| p / c)
                    .collect();
                line += &format!(
                    "; copilot-api ÷ this {}× (target ≥ 5: {})",
                    fmt(&ratios, 1),
                    met(median(&ratios) >= 5.0)
                );
            }
            println!("{line}");
        }
    }
    for s in systems {
        if s.paired_ttfb.is_empty() {
            continue;
        }
        let mut d = s.paired_ttfb.clone();
        d.sort_by(f64::total_cmp);
        let q = |f: f64| d[((d.len() - 1) as f64 * f).round() as usize];
        let mut line = format!(
            "{}: added TTFB, 1 stream, median of {} paired requests {:.3} ms (quartiles {:.3}..{:.3}) over a direct TTFB of {:.3} ms",
            s.name,
            d.len(),
            q(0.5),
            q(0.25),
            q(0.75),
            median(&s.paired_direct_ttfb)
        );
        if s.name.starts_with("claude-host") {
            line += &format!(" (target ≤ 0.5: {})", met(q(0.5) <= 0.5));
        }
        println!("{line}");
    }
    println!();
    println!(
        "(CPU per upstream event = on-CPU time of the system's process tree, from /proc/PID/task/*/schedstat, ÷ upstream SSE events of the streams it translated)"
    );
    Ok(())
}

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

/// CPU time of every thread of these processes, in nanoseconds.
fn cpu_ns(pids: &[u32]) -> u64 {
    pids.iter().map(|&p| super::cpu_ns(p).unwrap_or(0)).sum()
}

/// Starts copilot-api on a free loopback port against the fake; returns it and its URL once
/// it answers.
fn spawn_peer(node: &str, main_js: &str, fake_url: &str) -> anyhow::Result<(Owned, String)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let home = std::env::temp_dir().join(format!(
        "claude-host-bench-copilot-api-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&home)?;
    let log_path = home.join("copilot-api.log");
    let log = std::fs::File::create(&log_path)?;
    let child = Command::new(node)
        .arg(main_js)
        .args(["start", "--port", &port.to_string()])
        .args(["--github-token", "gho_fake_github_token"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        // srvx listens on HOST: loopback only.
        .env("HOST", "127.0.0.1")
        // Read by the rewritten main.js in place of GitHub's and Copilot's URLs.
        .env("COPILOT_API_UPSTREAM", fake_url)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("cannot start {node} {main_js}"))?;
    let mut child = Owned(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.0.try_wait()? {
            bail!(
                "copilot-api exited ({status}) before serving:\n{}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
        if answers(port) {
            return Ok((child, format!("http://127.0.0.1:{port}")));
        }
        if Instant::now() > deadline {
            bail!(
                "copilot-api did not answer on port {port} within 60 s:\n{}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `GET /` on the port answers 200.
fn answers(port: u16) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}
