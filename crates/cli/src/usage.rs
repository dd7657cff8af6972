//! Requests per session, and model calls per UTC day, kept on disk for `claude-host status`.
//!
//! Every process that runs a proxy (`serve`, `run`, `claude`, `proxy`) owns one file,
//! `$CLAUDE_HOST_HOME/usage/<start ms>-<pid>.json`, and rewrites it (atomically, mode 0600)
//! shortly after its counts change and once more as it stops. One writer per file: processes
//! running side by side never lose each other's counts, and `status` adds the files up.
//! With a shared database, `serve`/`run`/`acp` also keep their per-day counts in it (one key
//! per process and day), so `status` on any host of the store sees every host's calls.

use claude_host_proxy::{DayUsage, PromptLedger, SessionUsage, UsageView};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Files untouched for longer than this are removed when a recorder starts.
const KEEP_FOR: Duration = Duration::from_secs(30 * 24 * 3600);
/// Counts are written at most this often while requests flow.
const WRITE_EVERY: Duration = Duration::from_millis(500);

#[derive(Debug, Default, Serialize, Deserialize)]
struct UsageFile {
    pid: u32,
    command: String,
    started_at: i64,
    updated_at: i64,
    sessions: BTreeMap<String, SessionUsage>,
    /// Model calls per UTC day (`YYYY-MM-DD`).
    #[serde(default)]
    days: BTreeMap<String, DayUsage>,
    /// The days are also in the shared store (counted from there, not from this file).
    #[serde(default)]
    shared: bool,
}

fn now_ms() -> i64 {
    claude_host_protocol::time::now_millis()
}

fn usage_dir(home: &Path) -> PathBuf {
    home.join("usage")
}

/// Writes one process's counts; stops (with a last write) when dropped.
pub(crate) struct UsageRecorder {
    path: PathBuf,
    sources: Sources,
    command: String,
    started_at: i64,
    task: tokio::task::JoinHandle<()>,
    /// Held for each write, which reads the counts under it: a write still running when the
    /// recorder is dropped cannot land after the last one with older counts.
    writing: Arc<Mutex<()>>,
    /// Says, while this process runs, that it drives sessions unleased when it must.
    unleased: Option<UnleasedMark>,
    /// Copies the per-day counts into the shared store.
    sharing: Option<tokio::task::JoinHandle<()>>,
    shared: Arc<std::sync::atomic::AtomicBool>,
}

/// The shared store's keys of day `day`'s counts (one key per process under it).
pub(crate) fn shared_day_prefix(day: &str) -> String {
    format!("usage/{day}/")
}

/// `$CLAUDE_HOST_HOME/unleased/<pid>.json`: this process runs with `--allow-unleased` and a
/// shared database (for `status`); removed as it stops.
pub(crate) struct UnleasedMark(PathBuf);

impl UnleasedMark {
    pub(crate) fn new(home: &Path, command: &str, database: &str) -> Option<UnleasedMark> {
        let path = home
            .join("unleased")
            .join(format!("{}.json", std::process::id()));
        let body = serde_json::json!({"pid": std::process::id(), "command": command,
            "database": database, "since": now_ms()});
        match claude_host_upstream::private_files::write_atomic(&path, body.to_string().as_bytes())
        {
            Ok(()) => Some(UnleasedMark(path)),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot record that this host allows unleased sessions");
                None
            }
        }
    }
}

impl Drop for UnleasedMark {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The running processes that drive sessions unleased when they must: (pid, command,
/// database). Marks of processes that are gone are removed.
pub(crate) fn unleased_hosts(home: &Path) -> Vec<(u32, String, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(home.join("unleased"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let Ok(v) = std::fs::read(e.path())
            .map_err(|_| ())
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).map_err(|_| ()))
        else {
            continue;
        };
        let pid = v["pid"]
            .as_u64()
            .and_then(|p| u32::try_from(p).ok())
            .unwrap_or(0);
        if pid == 0 || !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(e.path());
            continue;
        }
        out.push((
            pid,
            v["command"].as_str().unwrap_or_default().to_owned(),
            v["database"].as_str().unwrap_or_default().to_owned(),
        ));
    }
    out.sort();
    out
}

/// What a recorder writes: the proxy's per-session requests and its per-day calls.
#[derive(Clone)]
struct Sources {
    ledger: PromptLedger,
    days: UsageView,
}

impl UsageRecorder {
    /// Starts recording the counts of the proxy behind `ledger` and `days` for the process
    /// running `command`.
    pub(crate) fn start(
        home: &Path,
        ledger: PromptLedger,
        days: UsageView,
        command: &str,
    ) -> UsageRecorder {
        let dir = usage_dir(home);
        prune(&dir);
        let started_at = now_ms();
        let path = dir.join(format!("{started_at}-{}.json", std::process::id()));
        let sources = Sources { ledger, days };
        let writing = Arc::new(Mutex::new(()));
        let shared = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = {
            let writing = writing.clone();
            let shared = shared.clone();
            let (path, sources, command) = (path.clone(), sources.clone(), command.to_owned());
            let mut prompts = sources.ledger.changes();
            let mut calls = sources.days.changes();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        r = prompts.changed() => if r.is_err() { break },
                        r = calls.changed() => if r.is_err() { break },
                    }
                    // Off the runtime's thread: the write ends with an fsync, which on a
                    // busy disk takes milliseconds, and this thread relays every stream.
                    let (path, sources, command, writing) = (
                        path.clone(),
                        sources.clone(),
                        command.clone(),
                        writing.clone(),
                    );
                    let shared = shared.load(std::sync::atomic::Ordering::SeqCst);
                    let written = tokio::task::spawn_blocking(move || {
                        let _one_at_a_time = writing.lock();
                        write(&path, &sources, &command, started_at, shared);
                    });
                    if written.await.is_err() {
                        break;
                    }
                    tokio::time::sleep(WRITE_EVERY).await;
                }
            })
        };
        UsageRecorder {
            path,
            sources,
            command: command.to_owned(),
            started_at,
            task,
            writing,
            unleased: None,
            sharing: None,
            shared,
        }
    }

    /// Keeps this process's per-day counts in the shared store too (every host of the store
    /// counts them there), under its own key per day, at most every [`WRITE_EVERY`].
    pub(crate) fn share(&mut self, db: &claude_host_store::Database, host: &str) {
        let shared = db.shared.clone();
        let days = self.sources.days.clone();
        let me = format!("{host} {}", self.started_at);
        self.shared.store(true, std::sync::atomic::Ordering::SeqCst);
        let mut calls = days.changes();
        self.sharing = Some(tokio::spawn(async move {
            while calls.changed().await.is_ok() {
                for (day, usage) in days.by_day() {
                    let key = format!("{}{me}", shared_day_prefix(&day));
                    let Ok(json) = serde_json::to_string(&usage) else {
                        continue;
                    };
                    match tokio::time::timeout(
                        Duration::from_secs(5),
                        shared.put_value(&key, &json),
                    )
                    .await
                    {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            tracing::warn!(error = %e, "cannot share the day's usage counts")
                        }
                        Err(_) => tracing::warn!(
                            "the database did not answer; the day's usage counts are shared later"
                        ),
                    }
                }
                tokio::time::sleep(WRITE_EVERY).await;
            }
        }));
    }

    /// Keeps `mark` for as long as this process records.
    pub(crate) fn hold(&mut self, mark: Option<UnleasedMark>) {
        self.unleased = mark;
    }
}

impl Drop for UsageRecorder {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(t) = &self.sharing {
            t.abort();
        }
        let _one_at_a_time = self.writing.lock();
        write(
            &self.path,
            &self.sources,
            &self.command,
            self.started_at,
            self.shared.load(std::sync::atomic::Ordering::SeqCst),
        );
    }
}

fn write(path: &Path, sources: &Sources, command: &str, started_at: i64, shared: bool) {
    let sessions: BTreeMap<String, SessionUsage> = sources.ledger.usage().into_iter().collect();
    let days = sources.days.by_day();
    if sessions.is_empty() && days.is_empty() {
        return;
    }
    let file = UsageFile {
        pid: std::process::id(),
        command: command.to_owned(),
        started_at,
        updated_at: now_ms(),
        sessions,
        days,
        shared,
    };
    let bytes = serde_json::to_vec(&file).unwrap_or_default();
    if let Err(e) = claude_host_upstream::private_files::write_atomic(path, &bytes) {
        tracing::warn!(path = %path.display(), error = %e, "cannot record request counts");
    }
}

fn prune(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > KEEP_FOR);
        if old {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// One session's requests, summed over every process that served it.
#[derive(Debug, Default, Serialize)]
pub(crate) struct SessionTotals {
    pub session: String,
    pub user: u64,
    pub agent: u64,
    pub by_kind: BTreeMap<String, u64>,
    pub last_at: i64,
}

/// Every usage file that reads.
fn files(home: &Path) -> Vec<UsageFile> {
    let Ok(entries) = std::fs::read_dir(usage_dir(home)) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("json"))
        .filter_map(|path| {
            let file = std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<UsageFile>(&b).ok());
            if file.is_none() {
                tracing::debug!(path = %path.display(), "skipping an unreadable usage file");
            }
            file
        })
        .collect()
}

/// The model calls of UTC day `day` (`YYYY-MM-DD`), summed over every process of this
/// machine (`with_shared`: also those that count them in the shared store).
pub(crate) fn day(home: &Path, day: &str, with_shared: bool) -> DayUsage {
    let mut total = DayUsage::default();
    for file in files(home).into_iter().filter(|f| with_shared || !f.shared) {
        if let Some(d) = file.days.get(day) {
            total.add(d);
        }
    }
    total
}

/// Every recorded session, most recent first.
pub(crate) fn totals(home: &Path) -> Vec<SessionTotals> {
    let mut by_session: BTreeMap<String, SessionTotals> = BTreeMap::new();
    for file in files(home) {
        for (session, u) in file.sessions {
            let t = by_session
                .entry(session.clone())
                .or_insert_with(|| SessionTotals {
                    session,
                    ..SessionTotals::default()
                });
            t.user += u.user;
            t.agent += u.agent;
            for (k, n) in u.by_kind {
                *t.by_kind.entry(k).or_default() += n;
            }
            t.last_at = t.last_at.max(u.last_at);
        }
    }
    let mut all: Vec<_> = by_session.into_values().collect();
    all.sort_by(|a, b| b.last_at.cmp(&a.last_at).then(a.session.cmp(&b.session)));
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_add_up_files_and_skip_garbage() {
        let home = tempfile::tempdir().unwrap();
        let dir = usage_dir(home.path());
        let file = |sessions: &[(&str, u64, u64, i64)]| UsageFile {
            sessions: sessions
                .iter()
                .map(|(s, u, a, at)| {
                    (
                        (*s).to_owned(),
                        SessionUsage {
                            user: *u,
                            agent: *a,
                            by_kind: BTreeMap::from([("prompt".to_owned(), *u)]),
                            first_at: *at,
                            last_at: *at,
                        },
                    )
                })
                .collect(),
            ..UsageFile::default()
        };
        let put = |name: &str, f: &UsageFile| {
            claude_host_upstream::private_files::write_atomic(
                &dir.join(name),
                &serde_json::to_vec(f).unwrap(),
            )
            .unwrap();
        };
        put("1-1.json", &file(&[("a", 1, 4, 10), ("b", 2, 0, 30)]));
        put("2-2.json", &file(&[("a", 2, 3, 20)]));
        std::fs::write(dir.join("3-3.json"), b"{broken").unwrap();
        let t = totals(home.path());
        assert_eq!(t.len(), 2);
        assert_eq!((t[0].session.as_str(), t[0].user, t[0].agent), ("b", 2, 0));
        assert_eq!((t[1].session.as_str(), t[1].user, t[1].agent), ("a", 3, 7));
        assert_eq!(t[1].by_kind["prompt"], 3);
        assert_eq!(t[1].last_at, 20);
    }
}
