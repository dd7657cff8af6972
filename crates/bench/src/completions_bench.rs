//! `@` completions on a 100,000-file tree (issue 13). Run with `scripts/bench-completions.sh`.
//!
//! A monorepo-like tree (200 projects of 500 files in nested folders, 10,000 `.gitignore`d
//! build outputs, a `node_modules` and a `.git` folder) is generated once. Each run then:
//!
//! 1. in this process: the index walk (`FileIndex::build`), its heap, a search over it, and
//!    the baseline, the strategy before the index (a fresh walk of the tree per query, as
//!    the old `find_files` did, without its 20,000-entry cap);
//! 2. end to end through a `claude-host serve` process: `createSession` on the tree, the
//!    first `@` (which waits for the walk the session's creation started), then 200
//!    `completions` requests for each of `@src/`, `@mod`, `@zz_not_there` (p50, p99), and the
//!    server's RSS before and after the index.

mod common;

use ahp::{Client, ClientConfig};
use claude_host_agent::completions::FileMatch;
use claude_host_agent::file_index::{FileIndex, search};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TOKEN: &str = "bench-token";
const PROJECTS: usize = 200;
const AREAS: [&str; 8] = [
    "api", "core", "ui", "util", "models", "services", "hooks", "store",
];
const QUERIES: [&str; 3] = ["src/", "mod", "zz_not_there"];

/// One project's 500 files, relative to it.
fn project_files() -> Vec<String> {
    let mut files = vec!["README.md".to_owned(), "package.json".to_owned()];
    files.extend((0..18).map(|t| format!("tests/test_{t:02}.spec.ts")));
    for area in AREAS {
        for c in 0..6 {
            for name in ["index.ts", "mod.rs", "types.ts"]
                .map(str::to_owned)
                .into_iter()
                .chain((0..7).map(|u| format!("{area}_util_{u}.ts")))
            {
                files.push(format!("src/{area}/{area}_{c}/{name}"));
            }
        }
    }
    files
}

/// Generates the tree; returns how many files a query can find (the rest is ignored).
fn generate(tree: &Path) -> anyhow::Result<usize> {
    let touch = |p: &Path| -> anyhow::Result<()> {
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d)?;
        }
        std::fs::File::create(p)?;
        Ok(())
    };
    let files = project_files();
    let mut visible = 0;
    for p in 0..PROJECTS {
        let kind = ["apps", "packages", "packages", "services", "libs"][p % 5];
        let project = tree.join(kind).join(format!("{kind}_{p:03}"));
        for f in &files {
            touch(&project.join(f))?;
            visible += 1;
        }
        // Build output, .gitignored: 250 files in every fifth project.
        if p % 5 == 0 {
            for b in 0..250 {
                touch(&project.join(format!("build/out/chunk_{b:03}.js")))?;
            }
        }
    }
    for n in 0..5_000 {
        touch(&tree.join(format!("node_modules/dep_{:02}/lib/file_{n}.js", n % 50)))?;
    }
    for n in 0..2_000 {
        touch(&tree.join(format!(".git/objects/{:02x}/{n:038x}", n % 256)))?;
    }
    std::fs::write(tree.join(".gitignore"), "build/\n*.log\nnode_modules/\n")?;
    std::fs::write(tree.join("debug.log"), "")?;
    Ok(visible + 1)
}

/// The strategy before the index: a fresh walk per query, ranked as `@` ranks (the old
/// `find_files`, without its cap).
fn walk_per_query(root: &Path, query: &str, limit: usize) -> Vec<FileMatch> {
    const SKIPPED: [&str; 6] = [
        ".git",
        "node_modules",
        "target",
        ".venv",
        "__pycache__",
        "dist",
    ];
    let query = query.to_lowercase();
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for entry in entries {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            let relative = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            if relative.to_lowercase().contains(&query) {
                found.push(FileMatch {
                    path: path.clone(),
                    relative,
                    is_dir: kind.is_dir(),
                });
            }
            if kind.is_dir() && !SKIPPED.contains(&name.as_str()) {
                stack.push(path);
            }
        }
    }
    let name_starts = |m: &FileMatch| {
        m.path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().to_lowercase().starts_with(&query))
    };
    found.sort_by(|a, b| {
        name_starts(b)
            .cmp(&name_starts(a))
            .then(a.relative.len().cmp(&b.relative.len()))
            .then(a.relative.cmp(&b.relative))
    });
    found.truncate(limit);
    found
}

fn percentile(v: &[Duration], q: f64) -> Duration {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.get(((v.len() as f64 - 1.0) * q).round() as usize)
        .copied()
        .unwrap_or_default()
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn fmt(v: &[f64], digits: usize) -> String {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.d$} ({:.d$}..{:.d$})", median(v), min, max, d = digits)
}

/// What one run measured.
#[derive(Default)]
struct Run {
    entries: usize,
    build_ms: f64,
    heap_mib: f64,
    search_ms: Vec<f64>,
    baseline_ms: Vec<f64>,
    first_ms: f64,
    p50_ms: Vec<f64>,
    p99_ms: Vec<f64>,
    rss_mib: f64,
    typing_p50_ms: f64,
    typing_p99_ms: f64,
    typing_max_ms: f64,
    walks: usize,
}

fn in_process(tree: &Path, run: &mut Run) -> anyhow::Result<()> {
    let index = Arc::new(FileIndex::build(tree, 1_000_000));
    anyhow::ensure!(!index.is_capped(), "the index is capped");
    run.entries = index.len();
    run.build_ms = common::ms(index.build_time());
    run.heap_mib = index.heap_bytes() as f64 / (1024.0 * 1024.0);
    let indexes = [index];
    for q in QUERIES {
        let times: Vec<Duration> = (0..50)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(search(&indexes, q, 50));
                t.elapsed()
            })
            .collect();
        run.search_ms.push(common::ms(common::median(&times)));
        let new = search(&indexes, q, 50);
        let times: Vec<Duration> = (0..3)
            .map(|_| {
                let t = Instant::now();
                let old = walk_per_query(tree, q, 50);
                let took = t.elapsed();
                // The same answer, but for build output the old walk did not know was ignored.
                let shown = |v: &[FileMatch]| {
                    v.iter()
                        .filter(|m| !m.relative.contains("/build/") && m.relative != "node_modules")
                        .take(10)
                        .map(|m| m.relative.clone())
                        .collect::<Vec<_>>()
                };
                if shown(&old) != shown(&new) {
                    eprintln!(
                        "note: @{q} ranks differently: {:?} vs {:?}",
                        shown(&old),
                        shown(&new)
                    );
                }
                took
            })
            .collect();
        run.baseline_ms.push(common::ms(common::median(&times)));
    }
    Ok(())
}

async fn connect(url: &str) -> anyhow::Result<Client> {
    common::ahp_client(url, "completions-bench", ClientConfig::default()).await
}

async fn create(c: &Client, folder: &Path) -> anyhow::Result<String> {
    let session = format!("claude:/{}", uuid_v4());
    let _: Value = c
        .request(
            "createSession",
            json!({"channel": session, "provider": "claude",
                "workingDirectories": [claude_host_protocol::uri::file_uri(folder)]}),
        )
        .await?;
    Ok(session)
}

async fn complete(c: &Client, session: &str, query: &str) -> anyhow::Result<(Duration, usize)> {
    let text = format!("@{query}");
    let t = Instant::now();
    let r: Value = c
        .request(
            "completions",
            json!({"kind": "userMessage", "channel": session, "text": text,
                "offset": text.chars().count()}),
        )
        .await?;
    let took = t.elapsed();
    let n = r["items"].as_array().map_or(0, Vec::len);
    Ok((took, n))
}

async fn end_to_end(
    bin: &Path,
    base: &Path,
    tree: &Path,
    requests: usize,
    run: &mut Run,
) -> anyhow::Result<()> {
    let home = base.join("home");
    let empty = base.join("empty");
    std::fs::create_dir_all(&home)?;
    std::fs::create_dir_all(&empty)?;
    let replay = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hello.replay.jsonl");
    let mut child = std::process::Command::new(bin)
        .args([
            "--upstream",
            &format!("replay:{}", replay.display()),
            "serve",
            "--port",
            "0",
            "--cwd",
        ])
        .arg(&empty)
        .env("CLAUDE_HOST_HOME", &home)
        .env("CLAUDE_HOST_CONNECTION_TOKEN", TOKEN)
        // Each walk logs "indexed files" at debug: counted below.
        .env(
            "CLAUDE_HOST_LOG",
            "warn,claude_host_agent::file_index=debug",
        )
        // The tests' pinned CLI (never started here: the sessions stay provisional), so the
        // server installs none.
        .env(
            "CLAUDE_HOST_CLAUDE_PATH",
            claude_host_testkit::cli::pinned_cli()?,
        )
        .env("HOME", &home)
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(base.join("serve.log"))?)
        .spawn()?;
    let (port, _stdout) = common::serve_port(&mut child)?;
    let c = connect(&format!("ws://127.0.0.1:{port}/?tkn={TOKEN}")).await?;
    // A session on an empty folder first, so the reading below counts the index, not the
    // first session's own set-up.
    let first = create(&c, &empty).await?;
    complete(&c, &first, "x").await?;
    let before = common::rss_kib(child.id());
    let session = create(&c, tree).await?;
    let (cold, n) = complete(&c, &session, "zz_not_there").await?;
    anyhow::ensure!(n == 0, "@zz_not_there found {n}");
    run.first_ms = common::ms(cold);
    run.rss_mib = common::rss_kib(child.id()).saturating_sub(before) as f64 / 1024.0;
    for q in QUERIES {
        let mut times = Vec::with_capacity(requests);
        for _ in 0..requests {
            let (took, n) = complete(&c, &session, q).await?;
            anyhow::ensure!((n == 0) == (q == "zz_not_there"), "@{q}: {n} items");
            times.push(took);
        }
        run.p50_ms.push(common::ms(percentile(&times, 0.5)));
        run.p99_ms.push(common::ms(percentile(&times, 0.99)));
    }
    // Typing: `@mod` every 40 ms for 12 s, so the index goes stale and is rebuilt in the
    // background (every 5 s) while queries keep coming.
    let mut times = Vec::new();
    let mut pace = tokio::time::interval(Duration::from_millis(40));
    for _ in 0..300 {
        pace.tick().await;
        times.push(complete(&c, &session, "mod").await?.0);
    }
    run.typing_p50_ms = common::ms(percentile(&times, 0.5));
    run.typing_p99_ms = common::ms(percentile(&times, 0.99));
    run.typing_max_ms = common::ms(percentile(&times, 1.0));
    c.shutdown().await;
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(base.join("serve.log"))?;
    run.walks = log
        .lines()
        .filter(|l| l.contains("indexed files") && l.contains("monorepo"))
        .count();
    let _ = std::fs::remove_dir_all(&home);
    Ok(())
}

fn uuid_v4() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (t >> 64) as u32,
        (t >> 48) as u16,
        (t >> 36) as u16 & 0xfff,
        (t >> 24) as u16 & 0xfff,
        t as u64 & 0xffff_ffff_ffff
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let runs: usize = args.next().map(|r| r.parse()).transpose()?.unwrap_or(3);
    let requests: usize = args.next().map(|r| r.parse()).transpose()?.unwrap_or(200);
    let bin: PathBuf = std::env::current_exe()?
        .parent()
        .map(|d| d.join("claude-host"))
        .ok_or_else(|| anyhow::anyhow!("no binary directory"))?;
    let base = std::env::temp_dir().join(format!(
        "claude-host-completions-bench-{}",
        std::process::id()
    ));
    let tree = base.join("monorepo");
    std::fs::create_dir_all(&tree)?;
    let t = Instant::now();
    let visible = generate(&tree)?;
    println!(
        "tree: {visible} files a query can find, 10,000 .gitignored build outputs, 5,000 in node_modules, 2,000 in .git (generated in {:.1} s)",
        t.elapsed().as_secs_f64()
    );
    let mut all = Vec::new();
    for r in 0..runs {
        let mut run = Run::default();
        in_process(&tree, &mut run)?;
        end_to_end(&bin, &base, &tree, requests, &mut run).await?;
        eprintln!(
            "run {}: first @ {:.0} ms, p99 {:?} ms",
            r + 1,
            run.first_ms,
            run.p99_ms
        );
        all.push(run);
    }
    let col = |f: &dyn Fn(&Run) -> f64| all.iter().map(f).collect::<Vec<_>>();
    println!(
        "\n## `@` completions on {} indexed entries, medians of {runs} runs (min..max)\n",
        all.first().map_or(0, |r| r.entries)
    );
    println!("| what | figure |");
    println!("|---|---|");
    println!(
        "| index walk (in process) | {} ms |",
        fmt(&col(&|r| r.build_ms), 0)
    );
    println!("| index heap | {} MiB |", fmt(&col(&|r| r.heap_mib), 1));
    println!(
        "| server RSS growth, index built | {} MiB |",
        fmt(&col(&|r| r.rss_mib), 1)
    );
    println!(
        "| createSession, then the first `@` (waits for the walk) | {} ms |",
        fmt(&col(&|r| r.first_ms), 0)
    );
    println!(
        "\n| query | search (in process) | end to end p50 | end to end p99 | baseline: a walk per query | p50 ÷ baseline |"
    );
    println!("|---|---|---|---|---|---|");
    for (i, q) in QUERIES.iter().enumerate() {
        let ratio = col(&|r| r.p50_ms[i] / r.baseline_ms[i]);
        println!(
            "| `@{q}` | {} ms | {} ms | {} ms | {} ms | {} |",
            fmt(&col(&|r| r.search_ms[i]), 2),
            fmt(&col(&|r| r.p50_ms[i]), 2),
            fmt(&col(&|r| r.p99_ms[i]), 2),
            fmt(&col(&|r| r.baseline_ms[i]), 0),
            fmt(&ratio, 4)
        );
    }
    println!(
        "\n| typing: `@mod` every 40 ms for 12 s (background rebuilds) | p50 | p99 | max | walks of the tree in the server |"
    );
    println!("|---|---|---|---|---|");
    println!(
        "| 300 requests | {} ms | {} ms | {} ms | {} |",
        fmt(&col(&|r| r.typing_p50_ms), 2),
        fmt(&col(&|r| r.typing_p99_ms), 2),
        fmt(&col(&|r| r.typing_max_ms), 2),
        fmt(&col(&|r| r.walks as f64), 0)
    );
    let _ = std::fs::remove_dir_all(&base);
    Ok(())
}
