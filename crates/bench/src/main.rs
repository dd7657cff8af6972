//! Proxy overhead benchmark: streams of 2,000 small `text_delta` events through
//! `claude-host proxy` and directly from the fake upstream, at several concurrencies.
//!
//! Prints added time-to-first-byte (p50, p99), events/s through the proxy ÷ direct, proxy CPU
//! per streamed event, and proxy RSS (idle, peak, after). Run with `scripts/bench-proxy.sh`.
//!
//! With `BENCH_MODEL` naming non-Claude models (`gpt-4.1`: Chat Completions, `gpt-5.4`:
//! Responses), it measures the translation instead, optionally beside copilot-api
//! (`BENCH_PEER`): see `translate.rs` and `scripts/bench-translate.sh`.

#[allow(dead_code)] // Shared with the agent benchmarks; this one uses only the proxy process.
mod common;
mod translate;

use anyhow::{Context, bail};
use bytes::Bytes;
use claude_host_testkit::fake::{FakeConfig, FakeUpstream, Match, Reply, Rule};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::time::{Duration, Instant};

/// How the fake upstream paces its events (`BENCH_PACING`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pacing {
    /// Each event its own HTTP chunk, ten per socket write, as fast as possible: how real
    /// upstreams frame events (the default).
    Chunked,
    /// Ten events in one HTTP chunk: the best case for a relay.
    Batched,
    /// Each event its own chunk and write, 2 ms apart: a model's pace.
    Paced,
}

impl Pacing {
    fn from_env() -> anyhow::Result<Pacing> {
        match std::env::var("BENCH_PACING").as_deref() {
            Err(_) | Ok("chunked") => Ok(Pacing::Chunked),
            Ok("batched") => Ok(Pacing::Batched),
            Ok("paced") => Ok(Pacing::Paced),
            Ok(other) => anyhow::bail!("BENCH_PACING={other}: one of chunked, batched, paced"),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Pacing::Chunked => "one HTTP chunk per event, 10 events per upstream write",
            Pacing::Batched => "10 events per HTTP chunk and upstream write",
            Pacing::Paced => "one HTTP chunk and write per event, 2 ms apart",
        }
    }

    /// Events per stream: a paced stream takes real time.
    fn events(self) -> usize {
        match self {
            Pacing::Paced => 200,
            _ => 2_000,
        }
    }
}

#[derive(Clone)]
struct Target {
    base: String,
    auth: String,
}

/// What one stream's request is and what its reply must look like.
struct Load {
    /// Where to send it (`base` + `path`) and the `authorization` header.
    target: Target,
    path: String,
    body: Bytes,
    /// The reply's dialect, checked on every stream (and the first stream of each run parsed
    /// whole).
    check: translate::Check,
    /// Fewer SSE events in any stream is an error.
    min_events: u64,
}

impl Load {
    /// The Anthropic passthrough request of this benchmark.
    fn messages(target: Target) -> Load {
        Load {
            target,
            path: "/v1/messages?beta=true".into(),
            body: body(),
            check: translate::Check::Count,
            min_events: 0,
        }
    }
}

#[derive(Default, Clone)]
struct RunResult {
    ttfb: Vec<Duration>,
    events: u64,
    /// Streams completed.
    streams: u64,
    wall: Duration,
    /// What parsing the first stream whole found.
    checked: Option<translate::Checked>,
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let bin = args
        .get(1)
        .context("usage: proxy-bench <path to claude-host> [runs]")?
        .clone();
    let runs: usize = args.get(2).map(|r| r.parse()).transpose()?.unwrap_or(3);
    if let Some(config) = translate::Config::from_env()? {
        return translate::run(&bin, runs, config);
    }

    // The fake runs on its own thread so the load client's runtime does not share its queue;
    // `BENCH_FAKE_THREADS` gives it more (an experiment on where the probes' stalls come from).
    let fake_threads = match std::env::var("BENCH_FAKE_THREADS") {
        Ok(n) => n.parse().context("BENCH_FAKE_THREADS: a number")?,
        Err(_) => 1,
    };
    let fake_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(fake_threads)
        .enable_all()
        .build()?;
    let pacing = Pacing::from_env()?;
    let events_per_stream = pacing.events();
    let fake = fake_rt.block_on(FakeUpstream::start_with(FakeConfig {
        sse_events_per_write: if pacing == Pacing::Paced { 1 } else { 10 },
        sse_chunk_per_event: pacing != Pacing::Batched,
        sse_group_gap: (pacing == Pacing::Paced).then(|| Duration::from_millis(2)),
        require_copilot_headers: false,
        ..FakeConfig::default()
    }))?;
    // The probes' requests (see `probe`) get a short stream; pushed first, so it matches first.
    fake.push(Rule {
        when: Match::LastUserContains(PROBE_TEXT.into()),
        reply: Reply::many_deltas(10),
        times: Some(usize::MAX),
    });
    fake.push(Rule {
        when: Match::Always,
        reply: Reply::many_deltas(events_per_stream),
        times: Some(usize::MAX),
    });

    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let direct_token = client_rt.block_on(mint(&fake.url()))?;
    let direct = Load::messages(Target {
        base: fake.url(),
        auth: format!("Bearer {direct_token}"),
    });

    let proxy = common::spawn_proxy(std::path::Path::new(&bin), &fake.url())?;
    let pid = proxy.child.0.id();
    let via_proxy = Load::messages(Target {
        base: proxy.base_url.clone(),
        auth: format!("Bearer {}", proxy.auth_token),
    });
    // Warm up both paths (token mint, catalog, connection pools).
    client_rt.block_on(run_load(&via_proxy, 4, 2))?;
    client_rt.block_on(run_load(&direct, 4, 2))?;
    let idle_rss = status_kb(pid, "VmRSS")?;

    println!(
        "# proxy benchmark: {events_per_stream} text_delta events per stream, {}, medians of {runs} runs (min..max)",
        pacing.describe()
    );
    println!(
        "| streams | added TTFB p50 | added TTFB p99 | events/s direct | events/s proxy | proxy ÷ direct | proxy CPU/event | proxy RSS peak |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (concurrency, per_task) in points() {
        let mut added_p50 = Vec::new();
        let mut added_p99 = Vec::new();
        let mut rate_direct = Vec::new();
        let mut rate_proxy = Vec::new();
        let mut ratio = Vec::new();
        let mut cpu_per_event = Vec::new();
        // Each run's TTFB (ms): direct p50, p99, through the proxy p50, p99.
        let mut absolute = Vec::new();
        // The probes' (direct, through the proxy) TTFBs, ms, over every run.
        let mut probes: Vec<(f64, f64)> = Vec::new();
        for _ in 0..runs {
            let d = client_rt.block_on(run_load(&direct, concurrency, per_task))?;
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let prober = {
                let (direct, proxied) = (direct.target.clone(), via_proxy.target.clone());
                let stop = stop.clone();
                std::thread::spawn(move || probe(&direct, &proxied, &stop))
            };
            let cpu0 = cpu_ns(pid)?;
            let p = client_rt.block_on(run_load(&via_proxy, concurrency, per_task));
            let cpu1 = cpu_ns(pid)?;
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            let pairs = prober
                .join()
                .map_err(|_| anyhow::anyhow!("the probe thread panicked"))??;
            let p = p?;
            if std::env::var_os("BENCH_PROBE_DUMP").is_some() {
                dump_probes(&pairs, &fake.requests());
            }
            probes.extend(pairs.iter().map(|(d, p)| (d.ttfb_ms(), p.ttfb_ms())));
            let (d50, d99) = percentiles(&d.ttfb);
            let (p50, p99) = percentiles(&p.ttfb);
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            absolute.push(format!(
                "{:.1}/{:.1} → {:.1}/{:.1}",
                ms(d50),
                ms(d99),
                ms(p50),
                ms(p99)
            ));
            added_p50.push(p50.as_secs_f64() * 1e3 - d50.as_secs_f64() * 1e3);
            added_p99.push(p99.as_secs_f64() * 1e3 - d99.as_secs_f64() * 1e3);
            let rd = d.events as f64 / d.wall.as_secs_f64();
            let rp = p.events as f64 / p.wall.as_secs_f64();
            rate_direct.push(rd);
            rate_proxy.push(rp);
            ratio.push(rp / rd);
            cpu_per_event.push((cpu1 - cpu0) as f64 / 1e3 / p.events as f64);
        }
        let peak = status_kb(pid, "VmHWM")?;
        println!(
            "| {concurrency} | {} ms | {} ms | {} | {} | {} | {} µs | {:.1} MB |",
            fmt(&added_p50, 3),
            fmt(&added_p99, 3),
            fmt_k(&rate_direct),
            fmt_k(&rate_proxy),
            fmt(&ratio, 2),
            fmt(&cpu_per_event, 2),
            peak as f64 / 1024.0
        );
        // The differences alone hide whether both sides queued: with every core busy, the
        // load client's own scheduling delays its reads of the direct streams too.
        eprintln!(
            "  {concurrency} streams, TTFB p50/p99 direct → proxied (ms), per run: {}",
            absolute.join(", ")
        );
        if !probes.is_empty() {
            let mut added: Vec<f64> = probes.iter().map(|(d, p)| p - d).collect();
            added.sort_by(f64::total_cmp);
            let mut direct: Vec<f64> = probes.iter().map(|(d, _)| *d).collect();
            direct.sort_by(f64::total_cmp);
            let mut proxied: Vec<f64> = probes.iter().map(|(_, p)| *p).collect();
            proxied.sort_by(f64::total_cmp);
            let q = |v: &[f64], f: f64| v[((v.len() - 1) as f64 * f).round() as usize];
            eprintln!(
                "  {concurrency} streams, probes: {} pairs, added TTFB p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms (direct probe TTFB p50 {:.3} ms)",
                added.len(),
                q(&added, 0.5),
                q(&added, 0.9),
                q(&added, 0.99),
                q(&direct, 0.5)
            );
            // The fake itself now and then answers a probe late, whichever side sent it; a
            // pair's difference then carries that stall. Side by side, the two distributions
            // show whether the tail is the proxy's.
            eprintln!(
                "  {concurrency} streams, probe TTFB p50 / p90 / p99 / max: direct {:.2} / {:.2} / {:.2} / {:.2} ms, proxied {:.2} / {:.2} / {:.2} / {:.2} ms; pairs where the direct probe was the slower by over 20 ms: {}, the proxied: {}",
                q(&direct, 0.5),
                q(&direct, 0.9),
                q(&direct, 0.99),
                q(&direct, 1.0),
                q(&proxied, 0.5),
                q(&proxied, 0.9),
                q(&proxied, 0.99),
                q(&proxied, 1.0),
                added.iter().filter(|a| **a < -20.0).count(),
                added.iter().filter(|a| **a > 20.0).count(),
            );
        }
    }
    // Let connections close and the proxy notice it is idle; then past the upstream pool's
    // idle timeout (60 s), which the target's "one minute after" allows for.
    std::thread::sleep(Duration::from_secs(4));
    let after = status_kb(pid, "VmRSS")?;
    std::thread::sleep(Duration::from_secs(61));
    let minute = status_kb(pid, "VmRSS")?;
    println!();
    println!(
        "proxy RSS: idle {:.1} MB, peak {:.1} MB, 4 s after the load {:.1} MB, a minute after {:.1} MB ({:.2}× idle)",
        idle_rss as f64 / 1024.0,
        status_kb(pid, "VmHWM")? as f64 / 1024.0,
        after as f64 / 1024.0,
        minute as f64 / 1024.0,
        minute as f64 / idle_rss.max(1) as f64
    );
    println!(
        "(CPU/event = on-CPU time of all proxy threads, from /proc/PID/task/*/schedstat, ÷ events relayed)"
    );
    drop(proxy);
    fake_rt.block_on(fake.shutdown());
    Ok(())
}

/// The concurrencies to measure (`BENCH_POINTS`) and the streams each task runs in turn.
fn points() -> Vec<(usize, usize)> {
    match std::env::var("BENCH_POINTS") {
        Ok(p) => p
            .split(',')
            .filter_map(|c| c.parse().ok())
            .map(|c: usize| {
                (
                    c,
                    if c == 1 {
                        40
                    } else if c <= 64 {
                        3
                    } else {
                        1
                    },
                )
            })
            .collect(),
        Err(_) => vec![(1, 100), (64, 3), (512, 1)],
    }
}

async fn mint(fake_url: &str) -> anyhow::Result<String> {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let req = http::Request::get(format!("{fake_url}/copilot_internal/v2/token"))
        .header("authorization", "token gho_fake_github_token")
        .body(Full::new(Bytes::new()))?;
    let resp = client.request(req).await?;
    let body = resp.into_body().collect().await?.to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body)?;
    v["token"]
        .as_str()
        .map(str::to_owned)
        .context("no token in mint reply")
}

/// What a probe asks for (the fake answers it with ten events).
const PROBE_TEXT: &str = "probe: first byte please";

/// One probe request: its number (in its text, `PROBE_TEXT #id`), when it was sent and when
/// its first body byte was read.
struct Probe {
    id: u64,
    sent: Instant,
    first: Instant,
}

impl Probe {
    fn ttfb_ms(&self) -> f64 {
        (self.first - self.sent).as_secs_f64() * 1e3
    }
}

/// The probe number in a request the fake received (`None`: not a probe).
fn probe_id(body: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(body).ok()?;
    let at = text.find(PROBE_TEXT)? + PROBE_TEXT.len();
    let digits = text[at..].strip_prefix(" #")?;
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse().ok()
}

/// While a proxied run streams, sends single requests, one at a time, from a thread and a
/// runtime of its own, alternately direct and through the proxy (which first alternates
/// too), each on its kept-alive connection, as a new turn of a session would arrive. The
/// load client is busy with its own streams and would delay its own first bytes; the probe
/// is not, and the fake serves both probes under the same load, so the difference of a pair
/// is what the proxy adds to a request that arrives while it relays. Stops when `stop` is set.
fn probe(
    direct: &Target,
    proxied: &Target,
    stop: &std::sync::atomic::AtomicBool,
) -> anyhow::Result<Vec<(Probe, Probe)>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client: Client<HttpConnector, Full<Bytes>> =
            Client::builder(TokioExecutor::new()).build(connector);
        let mut next_id = 0u64;
        let mut once = |target: &Target| {
            next_id += 1;
            let id = next_id;
            // Numbered, so the fake's record of its arrival can be found (`Probe::id`).
            let body = Bytes::from(
                serde_json::json!({
                    "model": "claude-opus-5.5",
                    "max_tokens": 64000,
                    "stream": true,
                    "messages": [{"role": "user", "content": format!("{PROBE_TEXT} #{id}")}]
                })
                .to_string(),
            );
            let req = http::Request::post(format!("{}/v1/messages?beta=true", target.base))
                .header("authorization", &target.auth)
                .header("content-type", "application/json")
                .header("anthropic-version", "2023-06-01")
                .body(Full::new(body));
            let client = client.clone();
            async move {
                let sent = Instant::now();
                let resp = client.request(req?).await?;
                if resp.status() != 200 {
                    bail!("probe: HTTP {}", resp.status());
                }
                let mut b = resp.into_body();
                let mut first = None;
                while let Some(frame) = b.frame().await {
                    if frame?.is_data() && first.is_none() {
                        first = Some(Instant::now());
                    }
                }
                Ok(Probe {
                    id,
                    sent,
                    first: first.context("probe: no body")?,
                })
            }
        };
        // Let the load's streams start first.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut pairs = Vec::new();
        let mut n = 0u64;
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            let pair = if n.is_multiple_of(2) {
                let d = once(direct).await?;
                (d, once(proxied).await?)
            } else {
                let p = once(proxied).await?;
                (once(direct).await?, p)
            };
            n += 1;
            if !stop.load(std::sync::atomic::Ordering::SeqCst) {
                pairs.push(pair);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(pairs)
    })
}

/// Which probes were slow, in the order they went, and on which leg: from sending to the
/// fake's receipt of the request (the client, the proxy for a proxied probe, the fake's
/// reading), or from that receipt to the first byte read (the fake's answer, the proxy's
/// relay). Both instants are this process's clock.
fn dump_probes(pairs: &[(Probe, Probe)], received: &[claude_host_testkit::fake::CapturedRequest]) {
    let arrival: std::collections::HashMap<u64, Instant> = received
        .iter()
        .filter_map(|r| Some((probe_id(&r.body)?, r.received_at)))
        .collect();
    let legs = |p: &Probe| match arrival.get(&p.id) {
        Some(at) => format!(
            "{:.1}+{:.1}",
            (*at - p.sent).as_secs_f64() * 1e3,
            (p.first - *at).as_secs_f64() * 1e3
        ),
        None => format!("{:.1} (not received)", p.ttfb_ms()),
    };
    let added: Vec<String> = pairs
        .iter()
        .map(|(d, p)| format!("{:.1}", p.ttfb_ms() - d.ttfb_ms()))
        .collect();
    eprintln!("probe pairs (added ms, in order): {}", added.join(" "));
    let start = pairs.first().map(|(d, p)| d.sent.min(p.sent));
    for (d, p) in pairs {
        if d.ttfb_ms().max(p.ttfb_ms()) > 20.0 {
            let at = start.map_or(0.0, |s| (d.sent.min(p.sent) - s).as_secs_f64() * 1e3);
            eprintln!(
                "  slow pair at +{at:.0} ms: direct {} ms, proxied {} ms (to the fake's receipt + after it)",
                legs(d),
                legs(p)
            );
        }
    }
}

fn body() -> Bytes {
    Bytes::from(
        serde_json::json!({
            "model": "claude-opus-5.5",
            "max_tokens": 64000,
            "stream": true,
            "messages": [{"role": "user", "content": "stream please"}]
        })
        .to_string(),
    )
}

async fn run_load(load: &Load, concurrency: usize, per_task: usize) -> anyhow::Result<RunResult> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(concurrency)
        .build(connector);
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    let url = format!("{}{}", load.target.base, load.path);
    for task in 0..concurrency {
        let client = client.clone();
        let url = url.clone();
        let auth = load.target.auth.clone();
        let body = load.body.clone();
        let check = load.check;
        let min_events = load.min_events;
        set.spawn(async move {
            let mut out = RunResult::default();
            for n in 0..per_task {
                let mut req = http::Request::post(&url)
                    .header("authorization", &auth)
                    .header("content-type", "application/json");
                if check.is_anthropic() {
                    req = req.header("anthropic-version", "2023-06-01");
                }
                let req = req.body(Full::new(body.clone()))?;
                let t0 = Instant::now();
                let resp = client.request(req).await?;
                if resp.status() != 200 {
                    let status = resp.status();
                    let text = resp.into_body().collect().await?.to_bytes();
                    bail!("{url}: HTTP {status}: {}", String::from_utf8_lossy(&text));
                }
                let mut b = resp.into_body();
                // The first stream of the run is kept whole and parsed.
                let mut whole =
                    (task == 0 && n == 0 && check != translate::Check::Count).then(Vec::new);
                let mut counter = translate::EventCounter::default();
                let mut frames = 0u64;
                let mut first = true;
                let mut head = Vec::new();
                while let Some(frame) = b.frame().await {
                    let frame = frame?;
                    if let Some(data) = frame.data_ref() {
                        if first {
                            out.ttfb.push(t0.elapsed());
                            first = false;
                        }
                        if head.len() < 64 {
                            head.extend_from_slice(&data[..data.len().min(64 - head.len())]);
                        }
                        frames += 1;
                        counter.feed(data);
                        if let Some(w) = whole.as_mut() {
                            w.extend_from_slice(data);
                        }
                    }
                }
                check.quick(&head, counter.events, min_events, &url)?;
                if let Some(w) = whole {
                    out.checked = Some(check.parse_whole(&w, frames)?);
                }
                out.events += counter.events;
                out.streams += 1;
            }
            Ok(out)
        });
    }
    let mut total = RunResult::default();
    while let Some(r) = set.join_next().await {
        let r = r??;
        total.ttfb.extend(r.ttfb);
        total.events += r.events;
        total.streams += r.streams;
        total.checked = total.checked.or(r.checked);
    }
    total.wall = started.elapsed();
    Ok(total)
}

fn percentiles(v: &[Duration]) -> (Duration, Duration) {
    let mut v = v.to_vec();
    v.sort_unstable();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99))
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn fmt(v: &[f64], digits: usize) -> String {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.d$} ({:.d$}..{:.d$})", median(v), min, max, d = digits)
}

fn fmt_k(v: &[f64]) -> String {
    format!("{:.0}k", median(v) / 1000.0)
}

/// CPU time of every thread of the process, in nanoseconds (schedstat has ns resolution,
/// where /proc/PID/stat counts 10 ms ticks).
fn cpu_ns(pid: u32) -> anyhow::Result<u64> {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let path = task?.path().join("schedstat");
        if let Ok(s) = std::fs::read_to_string(path) {
            total += s
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Ok(total)
}

/// `pid` and every process below it.
fn tree(pid: u32) -> Vec<u32> {
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

fn status_kb(pid: u32, key: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix(key)?
                .trim_start_matches(':')
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .with_context(|| format!("{key} not in /proc/{pid}/status"))
}
