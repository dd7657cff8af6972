//! Transcripts mirrored into the session store, so a session can be resumed on another host.
//!
//! Sessions run with `--session-mirror`: Claude Code writes each transcript line to its local
//! file and then reports it in a `transcript_mirror` frame. A session task hands those frames
//! to the one [`Mirror`] task of the agent and goes on: the store is on a turn's path only at
//! its end, where a leased session's completion waits for [`Mirror::stored`].
//! The mirror task copies the file's new lines from where it last stopped, so the store holds
//! exactly the file's lines, in order — also the ones Claude Code writes without reporting them
//! (the `cost-state` it writes as it exits) — except its request-replay cache
//! (`api-request*` lines: large, and of no use on another machine).
//!
//! Every append is made under the session's lease ([`Mirror::lease`]): the store refuses it
//! in the same transaction when another host has taken the session over, or the lease ran
//! out. A session the mirror has no lease for (its lease was lost, or it closed) is not
//! written at all: its remaining lines stay in the local file, which the store's copy
//! replaces when the session is opened again.
//!
//! When an append fails (the database is down, a timeout), the file is retried from the same
//! place later, with back-off; the session goes on meanwhile. A failed append is never taken
//! for done, and a position is derived from the store's own count, so a batch that committed
//! without the host hearing of it is not stored twice.

use claude_host_store::{Fence, SessionStore, StoreError, TranscriptKey};
use serde_json::{Map, Value};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Most entries sent to the store in one append.
const BATCH_ENTRIES: usize = 500;
/// How long one append may take before the file is retried later.
const APPEND_TIMEOUT: Duration = Duration::from_secs(30);

enum Msg {
    Changed {
        file: PathBuf,
    },
    Flush(oneshot::Sender<()>),
    /// Answered once the session's lines written so far are stored under its lease, or with
    /// why they cannot be.
    Stored {
        session: String,
        reply: oneshot::Sender<Result<(), String>>,
    },
    /// The lease a session's lines are written under (`Some(None)`: unleased by choice;
    /// `None`: none any more, its lines are no longer written).
    Lease {
        session: String,
        fence: Option<Option<Fence>>,
    },
}

/// Counters of the mirror (logs and `status`).
#[derive(Debug, Default)]
pub struct MirrorStats {
    /// Entries appended to the store.
    pub appended: AtomicU64,
    /// Files whose new lines could not be stored yet.
    pub behind: AtomicU64,
    /// Appends that failed.
    pub failures: AtomicU64,
}

/// The agent's transcript mirror: a task that owns every append to the store.
#[derive(Clone)]
pub struct Mirror {
    tx: mpsc::UnboundedSender<Msg>,
    stats: Arc<MirrorStats>,
}

impl std::fmt::Debug for Mirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mirror").finish_non_exhaustive()
    }
}

/// Whether a transcript line belongs in the store: all but the request-replay cache.
pub fn is_mirrored(line: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(borrow, rename = "type")]
        kind: Option<&'a str>,
    }
    !matches!(
        serde_json::from_str::<Head<'_>>(line).map(|h| h.kind),
        Ok(Some(
            "api-request" | "api-request-shape" | "api-request-blob"
        ))
    )
}

/// The store key of a transcript file under `projects` (`<config>/projects`):
/// `<project>/<session>.jsonl` is the main transcript, `<project>/<session>/<a>/<b>.jsonl` the
/// subpath `a/b`. `None` for anything else.
pub fn key_for(projects: &Path, file: &Path) -> Option<TranscriptKey> {
    let rel = file.strip_prefix(projects).ok()?;
    let parts: Vec<&str> = rel
        .components()
        .map(|c| c.as_os_str().to_str())
        .collect::<Option<_>>()?;
    let key = match parts.as_slice() {
        [project, name] => TranscriptKey::main(project, name.strip_suffix(".jsonl")?),
        [project, session, rest @ ..] if rest.len() >= 2 => {
            let mut sub = rest.join("/");
            sub.truncate(sub.strip_suffix(".jsonl")?.len());
            TranscriptKey {
                project_key: (*project).to_owned(),
                session_id: (*session).to_owned(),
                subpath: Some(sub),
            }
        }
        _ => return None,
    };
    key.validate().ok().map(|()| key)
}

/// The file a key is materialised to under `projects`.
pub fn file_for(projects: &Path, key: &TranscriptKey) -> PathBuf {
    let dir = projects.join(&key.project_key);
    match &key.subpath {
        None => dir.join(format!("{}.jsonl", key.session_id)),
        Some(sub) => dir.join(&key.session_id).join(format!("{sub}.jsonl")),
    }
}

/// The lines of a transcript file that belong in the store (see [`is_mirrored`]): its
/// complete (newline-terminated), non-empty lines, the request-replay cache left out.
pub fn mirrored_lines(path: &Path) -> std::io::Result<Vec<String>> {
    read_from(path, 0, 0).map(|(lines, _)| lines)
}

/// Writes `lines` as a transcript file, whole or not at all (a CLI must never resume half a
/// transcript): private, through a temporary file beside it.
pub fn write_transcript(path: &Path, lines: &[String]) -> std::io::Result<()> {
    let mut text = lines.join("\n");
    text.push('\n');
    claude_host_upstream::private_files::write_atomic(path, text.as_bytes())
}

impl Mirror {
    /// Starts the mirror task for transcripts under `projects`.
    pub fn start(store: Arc<dyn SessionStore>, projects: PathBuf) -> Mirror {
        let (tx, rx) = mpsc::unbounded_channel();
        let stats = Arc::new(MirrorStats::default());
        let worker = Worker {
            store,
            projects,
            leases: HashMap::new(),
            tails: HashMap::new(),
            behind: BTreeSet::new(),
            waiting: HashMap::new(),
            stats: stats.clone(),
        };
        tokio::spawn(worker.run(rx));
        Mirror { tx, stats }
    }

    /// The counters.
    pub fn stats(&self) -> &MirrorStats {
        &self.stats
    }

    /// Takes a `transcript_mirror` frame: its file has new lines.
    pub fn frame(&self, raw: &Map<String, Value>) {
        let Some(file) = raw.get("filePath").and_then(Value::as_str) else {
            tracing::warn!("a transcript_mirror frame without filePath; skipped");
            return;
        };
        let _ = self.tx.send(Msg::Changed {
            file: PathBuf::from(file),
        });
    }

    /// Copies what the store lacks of `file` (a transcript this host has and the store may
    /// not have whole).
    pub fn catch_up(&self, file: PathBuf) {
        let _ = self.tx.send(Msg::Changed { file });
    }

    /// Writes the session's lines under `fence` from now on (`None`: unleased, by choice).
    pub fn lease(&self, session: &str, fence: Option<Fence>) {
        let _ = self.tx.send(Msg::Lease {
            session: session.to_owned(),
            fence: Some(fence),
        });
    }

    /// Stops writing the session's lines (its lease was lost or given back).
    pub fn forget(&self, session: &str) {
        let _ = self.tx.send(Msg::Lease {
            session: session.to_owned(),
            fence: None,
        });
    }

    /// Returns once every line the session's transcripts hold now is stored under its lease
    /// (retried while the store is unreachable), or with why it cannot be: the lease was lost,
    /// given back or refused by the store. A turn is reported complete only after this.
    pub async fn stored(&self, session: &str) -> Result<(), String> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Msg::Stored {
                session: session.to_owned(),
                reply,
            })
            .map_err(|_| "the transcript mirror has stopped".to_owned())?;
        rx.await
            .map_err(|_| "the transcript mirror stopped before the lines were stored".to_owned())?
    }

    /// Returns once every file reported before is stored to its end, or known to be behind.
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Flush(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

/// How far a file has been copied.
struct Tail {
    key: TranscriptKey,
    /// Bytes of the file already stored (or deliberately left out); `None` until the store's
    /// count has been read.
    offset: Option<u64>,
}

struct Worker {
    store: Arc<dyn SessionStore>,
    projects: PathBuf,
    /// The lease each session's lines are written under; a session not here is not written.
    leases: HashMap<String, Option<Fence>>,
    tails: HashMap<PathBuf, Tail>,
    /// Files with lines the store could not take yet.
    behind: BTreeSet<PathBuf>,
    /// Sessions whose callers wait for their lines to be stored (their files are behind).
    waiting: HashMap<String, Vec<oneshot::Sender<Result<(), String>>>>,
    stats: Arc<MirrorStats>,
}

impl Worker {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Msg>) {
        let mut retry = Duration::from_millis(500);
        loop {
            let msg = if self.behind.is_empty() {
                rx.recv().await
            } else {
                // A turn waits on a session behind: retry often, the lease bounds the wait.
                let wait = if self.waiting.is_empty() {
                    retry
                } else {
                    retry.min(Duration::from_millis(250))
                };
                tokio::select! {
                    m = rx.recv() => m,
                    () = tokio::time::sleep(wait) => {
                        let files: Vec<PathBuf> = self.behind.iter().cloned().collect();
                        for f in files {
                            self.sync(&f).await;
                        }
                        self.answer_waiting();
                        retry = if self.behind.is_empty() {
                            Duration::from_millis(500)
                        } else {
                            (retry * 2).min(Duration::from_secs(15))
                        };
                        continue;
                    }
                }
            };
            let Some(first) = msg else {
                // Every sender is gone (the agent shut down): one last attempt.
                let files: Vec<PathBuf> = self.tails.keys().cloned().collect();
                for f in files {
                    self.sync(&f).await;
                }
                return;
            };
            // Frames that piled up are one read of each file and as few appends as possible.
            let mut changed = BTreeSet::new();
            let mut flushes = Vec::new();
            let mut stores = Vec::new();
            let mut next = Some(first);
            while let Some(m) = next {
                match m {
                    Msg::Changed { file } => {
                        changed.insert(file);
                    }
                    Msg::Flush(reply) => flushes.push(reply),
                    Msg::Stored { session, reply } => stores.push((session, reply)),
                    Msg::Lease { session, fence } => {
                        // Lines reported before the change are written under the old lease.
                        for file in std::mem::take(&mut changed) {
                            self.sync(&file).await;
                        }
                        match fence {
                            Some(f) => {
                                self.leases.insert(session, f);
                            }
                            None => self.drop_session(
                                &session,
                                "this host's lease on the session ended before its lines were stored",
                            ),
                        }
                    }
                }
                next = rx.try_recv().ok();
            }
            if !flushes.is_empty() {
                // A flush covers every file this host has written.
                changed.extend(self.tails.keys().cloned());
            }
            for file in changed {
                self.sync(&file).await;
            }
            self.answer_waiting();
            for reply in flushes {
                let _ = reply.send(());
            }
            for (session, reply) in stores {
                self.store_session(&session, reply).await;
            }
        }
    }

    /// Stores what the session's files hold now, then answers (or, a file behind, keeps the
    /// caller waiting for a retry or the end of the lease).
    async fn store_session(&mut self, session: &str, reply: oneshot::Sender<Result<(), String>>) {
        let files = self.files_of(session);
        for f in files {
            self.sync(&f).await;
        }
        if !self.leases.contains_key(session) {
            let _ = reply.send(Err(
                "this host holds no lease on the session; its lines cannot be stored".into(),
            ));
        } else if self.session_behind(session) {
            self.waiting
                .entry(session.to_owned())
                .or_default()
                .push(reply);
        } else {
            let _ = reply.send(Ok(()));
        }
    }

    /// The files the mirror follows for `session` (its transcript and its subagents').
    fn files_of(&self, session: &str) -> Vec<PathBuf> {
        self.tails
            .iter()
            .filter(|(_, t)| t.key.session_id == session)
            .map(|(f, _)| f.clone())
            .collect()
    }

    fn session_behind(&self, session: &str) -> bool {
        self.behind.iter().any(|f| {
            self.tails
                .get(f)
                .is_some_and(|t| t.key.session_id == session)
        })
    }

    /// Answers the callers whose sessions are stored now.
    fn answer_waiting(&mut self) {
        let done: Vec<String> = self
            .waiting
            .keys()
            .filter(|s| !self.session_behind(s))
            .cloned()
            .collect();
        for s in done {
            for reply in self.waiting.remove(&s).unwrap_or_default() {
                let _ = reply.send(Ok(()));
            }
        }
    }

    /// Forgets a session's lease and files: nothing more of it is written; whoever waits for
    /// its lines to be stored hears `why` they are not.
    fn drop_session(&mut self, session: &str, why: &str) {
        self.leases.remove(session);
        for reply in self.waiting.remove(session).unwrap_or_default() {
            let _ = reply.send(Err(why.to_owned()));
        }
        let files = self.files_of(session);
        for f in files {
            self.tails.remove(&f);
            if self.behind.remove(&f) {
                self.stats.behind.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Copies the lines `file` has beyond what the store holds.
    async fn sync(&mut self, file: &Path) {
        let tail = match self.tails.get(file) {
            Some(t) => t,
            None => {
                let Some(key) = key_for(&self.projects, file) else {
                    tracing::warn!(file = %file.display(), "a mirrored transcript outside the CLI's projects folder; not stored");
                    return;
                };
                self.tails
                    .entry(file.to_owned())
                    .or_insert(Tail { key, offset: None })
            }
        };
        let key = tail.key.clone();
        let known = tail.offset;
        let Some(fence) = self.leases.get(&key.session_id).cloned() else {
            tracing::debug!(session = %key.session_id, file = %file.display(), "no lease for the session here; its new lines are not stored");
            self.tails.remove(file);
            return;
        };
        match self.copy(&key, file, known, fence.as_ref()).await {
            Ok(offset) => {
                if let Some(t) = self.tails.get_mut(file) {
                    t.offset = Some(offset);
                }
                if self.behind.remove(file) {
                    self.stats.behind.fetch_sub(1, Ordering::Relaxed);
                    tracing::info!(session = %key.session_id, "the session store caught up with the transcript");
                }
            }
            Err(CopyError::Fenced(error)) => {
                // Another host has the session: nothing more of it is written from here.
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(session = %key.session_id, %error, "the store refused the session's lines: this host's lease is not the current one");
                self.drop_session(
                    &key.session_id,
                    &format!("the session store refused its lines: {error}"),
                );
            }
            Err(CopyError::Other(error)) => {
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
                if self.behind.insert(file.to_owned()) {
                    self.stats.behind.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(session = %key.session_id, %error,
                        "cannot append to the session store; the transcript will catch up from its local file");
                } else {
                    tracing::debug!(session = %key.session_id, %error, "the session store is still behind");
                }
            }
        }
    }

    /// Appends the mirrored lines of `file` after byte `from` (or, unknown, after the lines
    /// the store already counts); returns the byte offset now stored up to.
    async fn copy(
        &self,
        key: &TranscriptKey,
        file: &Path,
        from: Option<u64>,
        fence: Option<&Fence>,
    ) -> Result<u64, CopyError> {
        let skip = match from {
            Some(_) => 0,
            None => usize::try_from(self.store.count(key).await.map_err(CopyError::from)?)
                .unwrap_or(usize::MAX),
        };
        let path = file.to_owned();
        let (lines, end) =
            tokio::task::spawn_blocking(move || read_from(&path, from.unwrap_or(0), skip))
                .await
                .map_err(|e| CopyError::Other(e.to_string()))?
                .map_err(|e| CopyError::Other(format!("cannot read {}: {e}", file.display())))?;
        for chunk in lines.chunks(BATCH_ENTRIES) {
            let n = tokio::time::timeout(APPEND_TIMEOUT, self.store.append(key, chunk, fence))
                .await
                .map_err(|_| {
                    CopyError::Other(format!("no answer in {} s", APPEND_TIMEOUT.as_secs()))
                })?
                .map_err(CopyError::from)?;
            self.stats.appended.fetch_add(n, Ordering::Relaxed);
        }
        Ok(end)
    }
}

/// Why a copy stopped: the lease (final for the session) or anything else (retried).
enum CopyError {
    Fenced(String),
    Other(String),
}

impl From<StoreError> for CopyError {
    fn from(e: StoreError) -> CopyError {
        match e {
            e @ StoreError::Fenced { .. } => CopyError::Fenced(e.to_string()),
            e => CopyError::Other(e.to_string()),
        }
    }
}

/// The mirrored complete lines of `path` after byte `from`, the first `skip` of them dropped,
/// and the offset after the last complete line.
fn read_from(path: &Path, from: u64, skip: usize) -> std::io::Result<(Vec<String>, u64)> {
    use std::io::{Read as _, Seek as _};
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), from)),
        Err(e) => return Err(e),
    };
    f.seek(std::io::SeekFrom::Start(from))?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    let Some(last) = buf.iter().rposition(|b| *b == b'\n') else {
        return Ok((Vec::new(), from));
    };
    let end = from + last as u64 + 1;
    let lines = String::from_utf8_lossy(&buf[..last])
        .split('\n')
        .filter(|l| !l.trim().is_empty() && is_mirrored(l))
        .skip(skip)
        .map(str::to_owned)
        .collect();
    Ok((lines, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_map_to_keys_and_back() {
        let projects = Path::new("/h/.claude/projects");
        let main = key_for(projects, &projects.join("-w/abc.jsonl")).unwrap();
        assert_eq!(main, TranscriptKey::main("-w", "abc"));
        assert_eq!(file_for(projects, &main), projects.join("-w/abc.jsonl"));
        let sub = key_for(projects, &projects.join("-w/abc/subagents/agent-1.jsonl")).unwrap();
        assert_eq!(sub.subpath.as_deref(), Some("subagents/agent-1"));
        assert_eq!(
            file_for(projects, &sub),
            projects.join("-w/abc/subagents/agent-1.jsonl")
        );
        assert_eq!(
            key_for(projects, Path::new("/elsewhere/-w/abc.jsonl")),
            None
        );
        assert_eq!(key_for(projects, &projects.join("-w/abc.txt")), None);
        assert_eq!(key_for(projects, &projects.join("-w/../x/abc.jsonl")), None);
    }
}
