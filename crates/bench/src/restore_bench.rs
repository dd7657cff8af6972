//! Restoring long sessions: wall time and peak memory of the real binary reading a transcript
//! of 1, 10 and 100 MB (a real 2.1.330 transcript repeated with fresh ids, valid chains and
//! subagent files: `claude_host_testkit::long_transcript`).
//!
//! For each size, each a process of its own:
//! - `sessions show ID --json`: wall and CPU time, peak RSS (under `/usr/bin/time`), and the
//!   bytes it printed;
//! - `sessions fork ID --json`: the same;
//! - AHP open: a `claude-host serve --chat-turns 0`; a client (the official `ahp` crate over
//!   `ahp-ws`) subscribes to the session, then to its default chat with no `view`, until the
//!   chat's snapshot, every turn, is in. The
//!   host's RSS idle (before), at its peak (`VmHWM`), right after the client left, and after the
//!   session closed itself (`--restored-idle-secs 1`). Idle is taken twice: with the client
//!   just connected, and after it did what VS Code does on connecting, before a user opens a
//!   session (the root subscribed, the sessions listed): where a host in use idles;
//! - AHP open of the newest 50 turns: the same, the chat subscribed with `view: {turns: 50}`
//!   (what a client that pages older turns in with `fetchTurns` waits for first);
//! - ACP `session/load`: a `claude-host acp`; time to the answer (the history is replayed as
//!   `session/update`s before it) and the agent's peak RSS.
//!
//! And `sessions list` over 1,000 transcripts of the smallest size.
//!
//! Usage: `restore-bench [MB …]` (default 1 10 100), normally `scripts/bench-restore.sh`;
//! `restore-bench generate DIR MB` writes one session under `DIR/.claude` and prints its id.

mod common;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    InitializeRequest, LoadSessionRequest, SessionNotification,
};
use agent_client_protocol::{Agent, ByteStreams, Client};
use ahp::{ClientConfig, SubscriptionEvent};
use ahp_types::actions::StateAction;
use ahp_types::commands::SubscribeView;
use ahp_types::state::SnapshotState;
use anyhow::{Context, bail};
use claude_host_testkit::long_transcript;
use serde_json::{Value, json};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

const TOKEN: &str = "bench-token";
const MB: u64 = 1024 * 1024;

/// One child process's run.
struct Run {
    wall: Duration,
    /// CPU time (user + system).
    cpu: Duration,
    max_rss_kib: u64,
    stdout_bytes: usize,
}

/// Runs `claude-host ARGS` for `f` to its end under `/usr/bin/time`, reading its stdout, for its
/// peak RSS and CPU time. Not `wait4` on a child of this process: Linux carries the high-water
/// RSS of the process that spawned it (this benchmark, which has held a transcript) across
/// `execve` into the child's `ru_maxrss`; `time` spawns it from its own small image.
fn run_measured(bin: &Path, f: &Fixture, args: &[&str]) -> anyhow::Result<Run> {
    let report = f.home.join("time.out");
    let cmd = host_command(bin, f);
    let program = cmd.get_program().to_owned();
    let mut timed = Command::new("/usr/bin/time");
    timed
        .arg("-f")
        .arg("%M %U %S")
        .arg("-o")
        .arg(&report)
        .arg(program)
        .args(args)
        .env_clear()
        .current_dir(&f.work);
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            timed.env(k, v);
        }
    }
    let t = Instant::now();
    let mut child = timed
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running /usr/bin/time")?;
    let mut out = child.stdout.take().context("no stdout")?;
    let reader = std::thread::spawn(move || {
        let mut n = 0usize;
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(k) = out.read(&mut buf) {
            if k == 0 {
                break;
            }
            n += k;
        }
        n
    });
    let output = child.wait_with_output()?;
    let wall = t.elapsed();
    let stdout_bytes = reader.join().unwrap_or(0);
    if !output.status.success() {
        bail!(
            "claude-host {args:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let text = std::fs::read_to_string(&report)?;
    let mut fields = text.split_whitespace();
    let max_rss_kib = fields.next().context("no RSS from time")?.parse()?;
    let user: f64 = fields.next().context("no user time")?.parse()?;
    let system: f64 = fields.next().context("no system time")?.parse()?;
    Ok(Run {
        wall,
        cpu: Duration::from_secs_f64(user + system),
        max_rss_kib,
        stdout_bytes,
    })
}

/// A session of `mb` MB in a fresh HOME.
struct Fixture {
    home: PathBuf,
    work: PathBuf,
    generated: long_transcript::Generated,
}

fn fixture(root: &Path, mb: u64) -> anyhow::Result<Fixture> {
    let home = root.join(format!("{mb}mb"));
    let work = home.join("work");
    std::fs::create_dir_all(&work)?;
    let work = std::fs::canonicalize(&work)?;
    let generated =
        long_transcript::generate(&home.join(".claude"), &work.display().to_string(), mb * MB)?;
    Ok(Fixture {
        home,
        work,
        generated,
    })
}

fn host_command(bin: &Path, f: &Fixture) -> Command {
    let mut c = Command::new(bin);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &f.home)
        .env("CLAUDE_HOST_HOME", f.home.join("data"))
        .env("CLAUDE_HOST_LOG", "warn")
        // Allocator tuning under test (e.g. MALLOC_ARENA_MAX, GLIBC_TUNABLES) reaches the host.
        .envs(std::env::vars().filter(|(k, _)| k.starts_with("MALLOC_") || k == "GLIBC_TUNABLES"))
        .current_dir(&f.work);
    // `serve` and `acp` look for the CLI at start (and would install it).
    if let Ok(cli) = claude_host_testkit::cli::pinned_cli() {
        c.env("CLAUDE_HOST_CLAUDE_PATH", cli);
    }
    c
}

fn replay() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hello.replay.jsonl")
}

fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// AHP open's figures.
struct Open {
    wall: Duration,
    turns: usize,
    snapshot_bytes: usize,
    paging: Option<(Duration, usize)>,
    idle_kib: u64,
    /// RSS once the client had subscribed to the root and listed the sessions, as VS Code does
    /// on connecting: what a host in use holds before any session is opened, so what the
    /// close is measured against.
    listed_kib: u64,
    peak_kib: u64,
    left_kib: u64,
    closed_kib: u64,
    /// RSS after the same session was opened and closed a second time: whether a host that
    /// keeps opening long sessions keeps growing, or settles where the first close left it.
    reclosed_kib: u64,
    /// Anonymous memory (`RssAnon`: heap, arenas, stacks) idle, after the close and after the
    /// second close: what the host holds, without the binary's file-backed code pages the
    /// restore paged in (clean, shared with every other claude-host process, and dropped first
    /// under pressure).
    idle_anon_kib: u64,
    closed_anon_kib: u64,
    reclosed_anon_kib: u64,
}

/// One client's open of the session, until the session closed after it.
struct OpenOnce {
    wall: Duration,
    /// The turns the client held in the end (after paging in the older ones).
    turns: usize,
    snapshot_bytes: usize,
    /// With a window: how long paging in every older turn took, in how many `fetchTurns`.
    paging: Option<(Duration, usize)>,
    left_kib: u64,
    closed_kib: u64,
    closed_anon_kib: u64,
}

/// How many turns the windowed AHP open asks for.
const VIEW_TURNS: i64 = 50;

async fn ahp_open(bin: &Path, f: &Fixture, view_turns: Option<i64>) -> anyhow::Result<Open> {
    let mut child = host_command(bin, f)
        .args([
            "--upstream",
            &format!("replay:{}", replay().display()),
            "serve",
            "--port",
            "0",
            "--restored-idle-secs",
            "1",
            // The open with no `view` measures the whole chat, as before the host bounded
            // it (a view-less subscribe now gets the newest 100 turns by default).
            "--chat-turns",
            "0",
        ])
        .env("CLAUDE_HOST_CONNECTION_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let pid = child.id();
    let (port, _stdout) = common::serve_port(&mut child)?;
    let url = format!("ws://127.0.0.1:{port}/?tkn={TOKEN}");
    let c = common::ahp_client(&url, "restore-bench", ClientConfig::default()).await?;
    c.ping().await?;
    let idle_kib = common::rss_kib(pid);
    let idle_anon_kib = status_kib(pid, "RssAnon:");
    keep_smaps(pid, "idle");
    let _: Value = c
        .request("subscribe", json!({"channel": "ahp-root://"}))
        .await
        .context("subscribing to the root")?;
    let _: Value = c
        .request("listSessions", json!({"channel": "ahp-root://"}))
        .await
        .context("listing the sessions")?;
    let listed_kib = common::rss_kib(pid);
    keep_smaps(pid, "listed");
    let first = open_once(c, pid, f, view_turns).await?;
    let peak_kib = status_kib(pid, "VmHWM:");
    keep_smaps(pid, "closed");
    let c = common::ahp_client(&url, "restore-bench", ClientConfig::default()).await?;
    let again = open_once(c, pid, f, view_turns).await?;
    let _ = child.kill();
    let _ = child.wait();
    Ok(Open {
        wall: first.wall,
        turns: first.turns,
        snapshot_bytes: first.snapshot_bytes,
        paging: first.paging,
        idle_kib,
        listed_kib,
        peak_kib,
        left_kib: first.left_kib,
        closed_kib: first.closed_kib,
        reclosed_kib: again.closed_kib,
        idle_anon_kib,
        closed_anon_kib: first.closed_anon_kib,
        reclosed_anon_kib: again.closed_anon_kib,
    })
}

async fn open_once(
    c: ahp::Client,
    pid: u32,
    f: &Fixture,
    view_turns: Option<i64>,
) -> anyhow::Result<OpenOnce> {
    let session = format!("claude:/{}", f.generated.session_id);
    let start = Instant::now();
    let s: Value = c
        .request("subscribe", json!({"channel": session}))
        .await
        .context("subscribing to the session")?;
    let chat = s["snapshot"]["state"]["defaultChat"]
        .as_str()
        .context("the session's snapshot has no default chat")?
        .to_owned();
    let (snap, mut live) = c
        .subscribe_with_options(
            chat.clone(),
            None,
            view_turns.map(|n| SubscribeView { turns: Some(n) }),
        )
        .await
        .context("subscribing to the chat")?;
    let wall = start.elapsed();
    let snapshot_bytes = serde_json::to_string(&snap)?.len();
    let Some(SnapshotState::Chat(state)) = snap.snapshot.map(|s| s.state) else {
        anyhow::bail!("the chat's snapshot is not a chat");
    };
    let mut turns = state.turns.len();
    // A windowed client pages in every older turn, as a reader scrolling back to the start.
    let mut paging = None;
    if let Some(mut cursor) = state.turns_next_cursor {
        let start = Instant::now();
        let mut pages = 0;
        loop {
            let _: Value = c
                .request("fetchTurns", json!({"channel": chat, "cursor": cursor}))
                .await
                .context("fetchTurns")?;
            pages += 1;
            let loaded = loop {
                match tokio::time::timeout(Duration::from_secs(30), live.recv())
                    .await
                    .context("no chat/turnsLoaded in 30 s")?
                {
                    Some(SubscriptionEvent::Action(a)) => {
                        if let StateAction::ChatTurnsLoaded(l) = a.action {
                            break l;
                        }
                    }
                    Some(_) => {}
                    None => anyhow::bail!("the chat's subscription ended while paging"),
                }
            };
            turns += loaded.turns.len();
            match loaded.turns_next_cursor {
                Some(next) => cursor = next,
                None => break,
            }
        }
        paging = Some((start.elapsed(), pages));
    }
    drop(live);
    c.unsubscribe(chat).await?;
    c.unsubscribe(session).await?;
    c.shutdown().await;
    drop(c);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let left_kib = common::rss_kib(pid);
    // The session closes itself a second after its last subscriber left (a host without
    // `--restored-idle-secs` refuses to start: see `bench-restore.sh`).
    tokio::time::sleep(Duration::from_secs(4)).await;
    Ok(OpenOnce {
        wall,
        turns,
        snapshot_bytes,
        paging,
        left_kib,
        closed_kib: common::rss_kib(pid),
        closed_anon_kib: status_kib(pid, "RssAnon:"),
    })
}

/// With `RESTORE_BENCH_SMAPS=DIR`, keeps serve's `/proc/<pid>/smaps` at `moment` in DIR: which
/// mappings (heap, arenas, thread stacks, files) hold what is left after a session closed.
/// Beside it, `.pages`: the file offsets of the binary's resident pages (`/proc/<pid>/pagemap`),
/// one `<perms> <offset>` line each, to name the code a restore paged in (`nm -n` of the same
/// build unstripped gives the functions at those offsets; stripping does not move them).
/// With `RESTORE_BENCH_HOOK=CMD` as well (or alone), runs `CMD PID MOMENT` there and waits for
/// it: a look inside serve at that moment (`scripts/lib/heap-walk.py`, `gdb -p`).
fn keep_smaps(pid: u32, moment: &str) {
    if let Some(hook) = std::env::var_os("RESTORE_BENCH_HOOK") {
        match Command::new(&hook)
            .arg(pid.to_string())
            .arg(moment)
            .status()
        {
            Ok(s) if s.success() => {}
            Ok(s) => eprintln!("restore-bench: the hook at {moment} ended {s}"),
            Err(e) => eprintln!("restore-bench: cannot run the hook at {moment}: {e}"),
        }
    }
    let Some(dir) = std::env::var_os("RESTORE_BENCH_SMAPS") else {
        return;
    };
    let dir = PathBuf::from(dir);
    let to = dir.join(format!("serve-{pid}-{moment}.smaps"));
    if let Err(e) = std::fs::copy(format!("/proc/{pid}/smaps"), &to) {
        eprintln!("restore-bench: cannot keep {}: {e}", to.display());
    }
    let to = dir.join(format!("serve-{pid}-{moment}.pages"));
    if let Err(e) = resident_binary_pages(pid).and_then(|p| Ok(std::fs::write(&to, p)?)) {
        eprintln!("restore-bench: cannot keep {}: {e}", to.display());
    }
}

/// `<perms> <file offset>` of each resident page of the process's mappings of its own binary.
fn resident_binary_pages(pid: u32) -> anyhow::Result<String> {
    use std::os::unix::fs::FileExt;
    const PAGE: u64 = 4096;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))?;
    let pagemap = std::fs::File::open(format!("/proc/{pid}/pagemap"))?;
    let mut out = String::new();
    for line in std::fs::read_to_string(format!("/proc/{pid}/maps"))?.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 || Path::new(f[5]) != exe {
            continue;
        }
        let (lo, hi) = f[0]
            .split_once('-')
            .context("a maps line without a range")?;
        let (lo, hi) = (u64::from_str_radix(lo, 16)?, u64::from_str_radix(hi, 16)?);
        let offset = u64::from_str_radix(f[2], 16)?;
        // One 64-bit entry per page; bit 63: present.
        let mut entries = vec![0u8; ((hi - lo) / PAGE * 8) as usize];
        pagemap.read_exact_at(&mut entries, lo / PAGE * 8)?;
        for (i, e) in entries.chunks_exact(8).enumerate() {
            let e = u64::from_le_bytes(e.try_into()?);
            if e >> 63 == 1 {
                out.push_str(&format!("{} {:#x}\n", f[1], offset + i as u64 * PAGE));
            }
        }
    }
    Ok(out)
}

/// ACP `session/load`: (wall time to the answer, agent's peak RSS in KiB, updates before it).
async fn acp_load(bin: &Path, f: &Fixture) -> anyhow::Result<(Duration, u64, u64)> {
    let mut child = tokio::process::Command::from(host_command(bin, f));
    child
        .args([
            "--upstream",
            &format!("replay:{}", replay().display()),
            "acp",
        ])
        .env(
            "CLAUDE_HOST_CLAUDE_PATH",
            claude_host_testkit::cli::pinned_cli()?,
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = child.spawn()?;
    let pid = child.id().context("no pid")?;
    let stdin = child.stdin.take().context("no stdin")?;
    let stdout = child.stdout.take().context("no stdout")?;
    let updates = Arc::new(AtomicU64::new(0));
    let counted = updates.clone();
    let id = f.generated.session_id.clone();
    let work = f.work.clone();
    let (wall, peak) = Client
        .v1()
        .on_receive_notification(
            async move |_: SessionNotification, _cx: ConnectionTo<Agent>| {
                counted.fetch_add(1, Ordering::Relaxed);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_with(
            ByteStreams::new(stdin.compat_write(), stdout.compat()),
            async move |cx: ConnectionTo<Agent>| {
                cx.send_request(InitializeRequest::new(ProtocolVersion::V1))
                    .block_task()
                    .await?;
                let t = Instant::now();
                cx.send_request(LoadSessionRequest::new(id, work))
                    .block_task()
                    .await?;
                Ok((t.elapsed(), status_kib(pid, "VmHWM:")))
            },
        )
        .await
        .map_err(|e| anyhow::anyhow!("acp: {e}"))?;
    let _ = child.kill().await;
    Ok((wall, peak, updates.load(Ordering::Relaxed)))
}

/// `sessions list` over `n` transcripts of `f`'s size (links to its file under fresh ids).
fn list_many(bin: &Path, f: &Fixture, n: usize) -> anyhow::Result<Run> {
    let dir = f.generated.path.parent().context("no project dir")?;
    for _ in 1..n {
        std::fs::hard_link(
            &f.generated.path,
            dir.join(format!("{}.jsonl", uuid::Uuid::new_v4())),
        )?;
    }
    // A first run warms the page cache, as a person's machine has it.
    run_measured(bin, f, &["sessions", "list"])?;
    run_measured(bin, f, &["sessions", "list"])
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("generate") {
        let dir = PathBuf::from(
            args.get(1)
                .context("usage: restore-bench generate DIR MB")?,
        );
        let mb: u64 = args.get(2).context("no size")?.parse()?;
        let work = dir.join("work");
        std::fs::create_dir_all(&work)?;
        let g = long_transcript::generate(
            &dir.join(".claude"),
            &std::fs::canonicalize(&work)?.display().to_string(),
            mb * MB,
        )?;
        println!(
            "{} {} ({} bytes, {} lines, {} copies, {} subagents)",
            g.session_id,
            g.path.display(),
            g.bytes,
            g.lines,
            g.copies,
            g.subagents
        );
        return Ok(());
    }
    let sizes: Vec<u64> = if args.is_empty() {
        vec![1, 10, 100]
    } else {
        args.iter().map(|a| a.parse()).collect::<Result<_, _>>()?
    };
    let bin = std::env::current_exe()?
        .parent()
        .map(|d| d.join("claude-host"))
        .filter(|p| p.exists())
        .context("build claude-host next to restore-bench (scripts/bench-restore.sh does)")?;
    let root =
        std::env::temp_dir().join(format!("claude-host-restore-bench-{}", std::process::id()));
    println!("restoring long sessions (each its own process; RSS in MiB, times in s)");
    println!(
        "| size | lines | turns | show --json: time (CPU), peak RSS | fork: time (CPU), peak RSS | AHP open: time, snapshot | AHP open of the newest {VIEW_TURNS} turns: time, snapshot, serve's peak; then every older turn paged in: time, fetchTurns | serve RSS idle → sessions listed → peak → client left → session closed → opened and closed again (anonymous idle → closed → again); closed ÷ listed | ACP load: time, peak RSS, updates |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for mb in &sizes {
        let f = fixture(&root, *mb)?;
        let id = f.generated.session_id.clone();
        // The page cache holds the file for every figure alike.
        std::io::copy(
            &mut std::fs::File::open(&f.generated.path)?,
            &mut std::io::sink(),
        )?;
        let show = run_measured(&bin, &f, &["sessions", "show", &id, "--json"])?;
        let fork = run_measured(&bin, &f, &["sessions", "fork", &id, "--json"])?;
        let open = ahp_open(&bin, &f, None).await?;
        let newest = ahp_open(&bin, &f, Some(VIEW_TURNS)).await?;
        anyhow::ensure!(
            newest.turns == open.turns,
            "paged in {} turns, against {} in the whole snapshot",
            newest.turns,
            open.turns
        );
        let (load, load_peak, updates) = acp_load(&bin, &f).await?;
        println!(
            "| {mb} MB | {} | {} | {:.2} ({:.2}), {:.0} ({:.1} MB out) | {:.2} ({:.2}), {:.0} | {:.2}, {:.1} MB | {:.2}, {:.2} MB, {:.0}; {} | {:.0} → {:.0} → {:.0} → {:.0} → {:.0} → {:.0} (anon {:.1} → {:.1} → {:.1}); {:.3} | {:.2}, {:.0}, {updates} |",
            f.generated.lines,
            open.turns,
            secs(show.wall),
            secs(show.cpu),
            mib(show.max_rss_kib),
            show.stdout_bytes as f64 / MB as f64,
            secs(fork.wall),
            secs(fork.cpu),
            mib(fork.max_rss_kib),
            secs(open.wall),
            open.snapshot_bytes as f64 / MB as f64,
            secs(newest.wall),
            newest.snapshot_bytes as f64 / MB as f64,
            mib(newest.peak_kib),
            match newest.paging {
                Some((t, pages)) => format!("{:.2}, {pages}", secs(t)),
                None => "nothing older".to_owned(),
            },
            mib(open.idle_kib),
            mib(open.listed_kib),
            mib(open.peak_kib),
            mib(open.left_kib),
            mib(open.closed_kib),
            mib(open.reclosed_kib),
            open.idle_anon_kib as f64 / 1024.0,
            open.closed_anon_kib as f64 / 1024.0,
            open.reclosed_anon_kib as f64 / 1024.0,
            open.closed_kib as f64 / open.listed_kib.max(1) as f64,
            secs(load),
            mib(load_peak),
        );
        let _ = std::fs::remove_dir_all(&f.home);
    }
    let f = fixture(&root, sizes.iter().copied().min().unwrap_or(1))?;
    let list = list_many(&bin, &f, 1000)?;
    println!(
        "sessions list over 1,000 transcripts of {} MB: {:.3} s ({:.3} s CPU), {:.0} MiB peak RSS",
        sizes.iter().copied().min().unwrap_or(1),
        secs(list.wall),
        secs(list.cpu),
        mib(list.max_rss_kib)
    );
    let _ = std::fs::remove_dir_all(&root);
    Ok(())
}
