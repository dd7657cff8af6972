//! Session store benchmark (results in docs/BENCHMARKS.md): append throughput and the restore
//! of a 10,000-entry transcript, on PostgreSQL (a private cluster with `fsync` on, as deployed)
//! and the embedded SQLite store, against appending and reading the same JSONL file locally,
//! in the same run.
//!
//! `store-bench [ROUNDS]`; prints medians (min..max) and each store's ratio to the local file.

use claude_host_store::{Database, TranscriptKey};
use claude_host_testkit::pg::PgCluster;
use std::io::Write as _;
use std::time::{Duration, Instant};

const ENTRIES: usize = 10_000;

/// Transcript lines shaped and sized like Claude Code's: mostly small conversation entries,
/// some tool results of a few KiB, a few large ones.
fn transcript(n: usize) -> Vec<String> {
    let session = "3ccc0f6e-7a1b-4c1e-9f53-2f0d9d5b1c11";
    (0..n)
        .map(|i| {
            let size = match i % 10 {
                0..=5 => 400,
                6..=8 => 2_000,
                _ => 8_000,
            };
            let text: String = "lorem ipsum dolor sit amet, consectetur adipiscing elit. "
                .chars()
                .cycle()
                .take(size)
                .collect();
            let kind = if i % 2 == 0 { "user" } else { "assistant" };
            serde_json::json!({
                "parentUuid": format!("00000000-0000-4000-8000-{:012}", i.saturating_sub(1)),
                "isSidechain": false, "type": kind,
                "message": {"role": kind, "content": [{"type": "text", "text": text}]},
                "uuid": format!("00000000-0000-4000-8000-{i:012}"),
                "timestamp": "2026-11-25T10:00:00.000Z", "sessionId": session,
                "cwd": "/home/user/project", "version": "2.1.330", "gitBranch": "main",
                "userType": "external", "entrypoint": "sdk-cli"})
            .to_string()
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn fmt(v: &[f64]) -> String {
    let (m, lo, hi) = median(v.to_vec());
    format!("{m:.0} ({lo:.0}..{hi:.0})")
}

/// Appends `lines` to a local file `batch` lines per write, as Claude Code appends its own.
fn local_append(path: &std::path::Path, lines: &[String], batch: usize) -> anyhow::Result<f64> {
    let _ = std::fs::remove_file(path);
    let started = Instant::now();
    for chunk in lines.chunks(batch) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let mut text = chunk.join("\n");
        text.push('\n');
        f.write_all(text.as_bytes())?;
    }
    Ok(lines.len() as f64 / started.elapsed().as_secs_f64())
}

async fn store_append(
    db: &Database,
    key: &TranscriptKey,
    lines: &[String],
    batch: usize,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    for chunk in lines.chunks(batch) {
        db.transcripts.append(key, chunk, None).await?;
    }
    Ok(lines.len() as f64 / started.elapsed().as_secs_f64())
}

/// Loads a transcript from the store and writes it as the file the CLI resumes from.
async fn store_restore(
    db: &Database,
    key: &TranscriptKey,
    out: &std::path::Path,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let lines = db.transcripts.load(key).await?.unwrap_or_default();
    anyhow::ensure!(lines.len() == ENTRIES, "loaded {}", lines.len());
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(out, text)?;
    Ok(started.elapsed())
}

/// Reads the local file as a host reads a transcript: whole, split into lines.
fn local_read(path: &std::path::Path) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let text = std::fs::read_to_string(path)?;
    let n = text.lines().filter(|l| !l.is_empty()).count();
    anyhow::ensure!(n == ENTRIES, "read {n}");
    Ok(started.elapsed())
}

fn main() -> anyhow::Result<()> {
    let rounds: usize = std::env::args()
        .nth(1)
        .map_or(Ok(3), |a| a.parse())
        .unwrap_or(3)
        .max(1);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(rounds))
}

async fn run(rounds: usize) -> anyhow::Result<()> {
    let lines = transcript(ENTRIES);
    let bytes: usize = lines.iter().map(|l| l.len() + 1).sum();
    let pg = PgCluster::start_with(true)?;
    let dir = std::env::temp_dir().join(format!("claude-host-store-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    println!(
        "# session store benchmark: {ENTRIES} transcript entries ({:.1} MiB), PostgreSQL with fsync on, {rounds} rounds, medians (min..max)",
        bytes as f64 / (1 << 20) as f64
    );
    // Appends of 1 entry are what a quiet session sends; 10 a turn's worth; 500 a catch-up.
    let batches = [1usize, 10, 500];
    let mut append: Vec<[Vec<f64>; 3]> = batches.iter().map(|_| Default::default()).collect();
    let mut restore: [Vec<f64>; 3] = Default::default();
    for round in 0..rounds {
        for (b, &batch) in batches.iter().enumerate() {
            // One-entry appends commit (and fsync) once each: a fifth of the transcript is enough.
            let n = if batch == 1 { ENTRIES / 5 } else { ENTRIES };
            let key = TranscriptKey::main("-bench", &format!("s{round}-{batch}"));
            let pg_db = Database::open(&pg.create_database()?).await?;
            let sqlite = Database::open(
                dir.join(format!("s{round}-{batch}.sqlite"))
                    .to_str()
                    .unwrap_or_default(),
            )
            .await?;
            append[b][0].push(local_append(&dir.join("local.jsonl"), &lines[..n], batch)?);
            append[b][1].push(store_append(&sqlite, &key, &lines[..n], batch).await?);
            append[b][2].push(store_append(&pg_db, &key, &lines[..n], batch).await?);
            if batch == 500 {
                restore[0].push(local_read(&dir.join("local.jsonl"))?.as_secs_f64() * 1000.0);
                restore[1].push(
                    store_restore(&sqlite, &key, &dir.join("from-sqlite.jsonl"))
                        .await?
                        .as_secs_f64()
                        * 1000.0,
                );
                restore[2].push(
                    store_restore(&pg_db, &key, &dir.join("from-pg.jsonl"))
                        .await?
                        .as_secs_f64()
                        * 1000.0,
                );
            }
        }
    }
    println!(
        "| measurement | local JSONL | SQLite | PostgreSQL | SQLite ÷ local | PostgreSQL ÷ local |"
    );
    println!("|---|---|---|---|---|---|");
    for (b, &batch) in batches.iter().enumerate() {
        let m = |i: usize| median(append[b][i].clone()).0;
        println!(
            "| append, {batch} per batch (entries/s) | {} | {} | {} | {:.3} | {:.3} |",
            fmt(&append[b][0]),
            fmt(&append[b][1]),
            fmt(&append[b][2]),
            m(1) / m(0),
            m(2) / m(0)
        );
    }
    let m = |i: usize| median(restore[i].clone()).0;
    println!(
        "| restore {ENTRIES} entries (ms) | {} | {} | {} | {:.1} | {:.1} |",
        fmt(&restore[0]),
        fmt(&restore[1]),
        fmt(&restore[2]),
        m(1) / m(0),
        m(2) / m(0)
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
