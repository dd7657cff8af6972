//! Transcripts on disk: `$CLAUDE_CONFIG_DIR/projects/<slug>/<sessionId>.jsonl`.
//!
//! The format is the CLI's own and not a stable API, so everything here reads defensively: a
//! bad line is skipped with a warning, unknown entries are kept, and listing reads only a
//! bounded head and tail of each file.

mod index;

pub use index::TranscriptIndex;

use claude_host_protocol::transcript::project_slug;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Bytes read from the start, and from the end, of a transcript when listing. A file of up to
/// twice this is read whole.
const PEEK: usize = 64 * 1024;

/// Transcript errors.
#[derive(Debug, thiserror::Error)]
pub enum TranscriptError {
    /// I/O on a transcript.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// No transcript with this id.
    #[error("no transcript for session {0}")]
    NotFound(String),
    /// The fork point is not in the session.
    #[error("message {0} is not in the session")]
    NoSuchMessage(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TranscriptError + '_ {
    move |source| TranscriptError::Io {
        path: path.to_owned(),
        source,
    }
}

/// One listed session, from the first and last 64 KiB of its transcript (the whole file when
/// it is at most 128 KiB): listing stays fast however long sessions get. What the CLI writes
/// at the start (cwd, branch, first prompt) and keeps re-appending at the end (titles) is
/// found there; a title only in the middle of a long file is not.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSummary {
    /// The session id (file stem).
    pub session_id: String,
    /// The transcript file.
    pub path: PathBuf,
    /// Custom title, else AI title, else a `summary` record's text, else the first prompt.
    pub summary: String,
    /// The first human prompt.
    pub first_prompt: Option<String>,
    /// The session's working directory.
    pub cwd: Option<String>,
    /// The git branch at the start.
    pub git_branch: Option<String>,
    /// Last modification time.
    pub modified: SystemTime,
    /// File size in bytes.
    pub size: u64,
    /// User and assistant entries: exact for a file of at most 128 KiB; for a longer one an
    /// estimate, the count in the first and last 64 KiB scaled to the file's size.
    pub message_count: usize,
}

/// The project directory of a working directory (resolved through symlinks when it exists).
pub fn project_dir(config_dir: &Path, cwd: &Path) -> PathBuf {
    let resolved = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_owned());
    config_dir
        .join("projects")
        .join(project_slug(&resolved.display().to_string()))
}

/// Lists sessions, newest first: of one working directory, or of every project.
pub fn list_sessions(
    config_dir: &Path,
    cwd: Option<&Path>,
) -> Result<Vec<SessionSummary>, TranscriptError> {
    list_newest(config_dir, cwd, usize::MAX)
}

/// The `limit` newest sessions (by modification time), as [`list_sessions`] lists them: only
/// those transcripts are read, so a listing costs a `stat` per session beyond them.
pub fn list_newest(
    config_dir: &Path,
    cwd: Option<&Path>,
    limit: usize,
) -> Result<Vec<SessionSummary>, TranscriptError> {
    let dirs: Vec<PathBuf> = match cwd {
        Some(c) => vec![project_dir(config_dir, c)],
        None => {
            let root = config_dir.join("projects");
            match std::fs::read_dir(&root) {
                Ok(rd) => rd
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.is_dir())
                    .collect(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(io(&root)(e)),
            }
        }
    };
    let mut found: Vec<(SystemTime, PathBuf)> = Vec::new();
    for dir in dirs {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in rd.filter_map(Result::ok) {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("jsonl") {
                continue;
            }
            // As `summarize` stats it (following a link); an unreadable one is skipped there.
            let modified = std::fs::metadata(&path)
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            found.push((modified, path));
        }
    }
    found.sort_by_key(|(m, _)| std::cmp::Reverse(*m));
    let mut out = Vec::new();
    for (_, path) in found {
        if out.len() >= limit {
            break;
        }
        match summarize(&path) {
            Ok(s) => out.push(s),
            Err(e) => tracing::warn!(error = %e, "skipping an unreadable transcript"),
        }
    }
    // Stable, by the times the summaries read (the same as above unless a file changed).
    out.sort_by_key(|s| std::cmp::Reverse(s.modified));
    Ok(out)
}

/// One transcript's [`SessionSummary`], from its first and last 64 KiB.
pub fn summarize(path: &Path) -> Result<SessionSummary, TranscriptError> {
    let mut file = std::fs::File::open(path).map_err(io(path))?;
    let meta = file.metadata().map_err(io(path))?;
    let size = meta.len();
    let session_id = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("")
        .to_owned();
    let window = read_window(&mut file, size).map_err(io(path))?;
    let (head, tail) = (window.head_lines(), window.tail_lines());
    let message_count = {
        let in_window = |bytes: &[u8]| {
            count(bytes, b"\"type\":\"user\"") + count(bytes, b"\"type\":\"assistant\"")
        };
        match &window.tail {
            None => in_window(&window.head),
            Some(t) => {
                let seen = in_window(&window.head) + in_window(t);
                let read = (window.head.len() + t.len()).max(1) as f64;
                (seen as f64 * size as f64 / read).round() as usize
            }
        }
    };
    let mut first_prompt = None;
    let mut cwd = None;
    let mut git_branch = None;
    for line in head.split(|b| *b == b'\n') {
        if first_prompt.is_some() && cwd.is_some() {
            break;
        }
        let Ok(Value::Object(e)) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        if cwd.is_none() {
            cwd = e.get("cwd").and_then(Value::as_str).map(str::to_owned);
            git_branch = e
                .get("gitBranch")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        if first_prompt.is_none() {
            first_prompt = human_prompt(&e);
        }
    }
    // Latest first: the tail from its end, then the head from its end.
    let mut titles = Titles::default();
    for line in tail
        .split(|b| *b == b'\n')
        .rev()
        .chain(head.split(|b| *b == b'\n').rev())
    {
        titles.note(line);
        if titles.custom.is_some() {
            break;
        }
    }
    let summary = titles
        .custom
        .or(titles.ai)
        .or(titles.summary)
        .or_else(|| first_prompt.clone())
        .unwrap_or_default();
    Ok(SessionSummary {
        session_id,
        path: path.to_owned(),
        summary,
        first_prompt,
        cwd,
        git_branch,
        modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        size,
        message_count,
    })
}

/// What listing reads of a transcript.
struct Window {
    /// The whole file, or its first [`PEEK`] bytes.
    head: Vec<u8>,
    /// For a longer file, its last [`PEEK`] bytes and the byte before them.
    tail: Option<Vec<u8>>,
}

impl Window {
    /// The head's complete lines.
    fn head_lines(&self) -> &[u8] {
        match (&self.tail, memchr::memrchr(b'\n', &self.head)) {
            (None, _) => &self.head,
            // Cut mid-line at the window's end: that last piece is not an entry.
            (Some(_), Some(end)) => &self.head[..end],
            (Some(_), None) => &[],
        }
    }

    /// The tail's complete lines (empty for a file read whole).
    fn tail_lines(&self) -> &[u8] {
        match &self.tail {
            None => &[],
            // The byte before the window says whether its first line is complete.
            Some(t) => match memchr::memchr(b'\n', t) {
                Some(i) => &t[i + 1..],
                None => &[],
            },
        }
    }
}

/// Reads the head and tail of a file of `size` bytes (as `stat` saw it: bytes the CLI appends
/// meanwhile are not read).
fn read_window(file: &mut std::fs::File, size: u64) -> std::io::Result<Window> {
    let peek = PEEK as u64;
    if size <= 2 * peek {
        let mut head = Vec::with_capacity(size as usize);
        file.take(size).read_to_end(&mut head)?;
        return Ok(Window { head, tail: None });
    }
    let mut head = Vec::with_capacity(PEEK);
    file.by_ref().take(peek).read_to_end(&mut head)?;
    file.seek(SeekFrom::Start(size - peek - 1))?;
    let mut tail = Vec::with_capacity(PEEK + 1);
    file.take(peek + 1).read_to_end(&mut tail)?;
    Ok(Window {
        head,
        tail: Some(tail),
    })
}

/// The latest title records seen, scanning from the end.
#[derive(Default)]
struct Titles {
    custom: Option<String>,
    ai: Option<String>,
    summary: Option<String>,
}

impl Titles {
    fn note(&mut self, line: &[u8]) {
        // Only title records are parsed; everything else is skipped as bytes.
        if memchr::memmem::find(line, b"-title\"").is_none()
            && memchr::memmem::find(line, b"\"type\":\"summary\"").is_none()
        {
            return;
        }
        let Ok(Value::Object(e)) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        let (slot, keys): (_, &[&str]) = match e.get("type").and_then(Value::as_str) {
            Some("custom-title") => (&mut self.custom, &["customTitle", "title"]),
            Some("ai-title") => (&mut self.ai, &["aiTitle", "title"]),
            Some("summary") => (&mut self.summary, &["summary"]),
            _ => return,
        };
        if slot.is_none() {
            *slot = keys
                .iter()
                .find_map(|k| e.get(*k).and_then(Value::as_str))
                .filter(|t| !t.is_empty())
                .map(str::to_owned);
        }
    }
}

fn count(hay: &[u8], needle: &[u8]) -> usize {
    memchr::memmem::find_iter(hay, needle).count()
}

/// The text of a human prompt entry (not meta, not a tool result, not a command echo).
fn human_prompt(e: &Map<String, Value>) -> Option<String> {
    if e.get("type").and_then(Value::as_str) != Some("user")
        || e.get("isMeta") == Some(&Value::Bool(true))
    {
        return None;
    }
    let content = e.get("message")?.get("content")?;
    let text = match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .filter(|t| !t.starts_with("<system-reminder>"))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => return None,
    };
    let text = text.trim();
    (!text.is_empty() && !text.starts_with('<')).then(|| text.chars().take(200).collect())
}

/// Finds a session's transcript in any project.
pub fn find_session(config_dir: &Path, session_id: &str) -> Result<PathBuf, TranscriptError> {
    let root = config_dir.join("projects");
    let rd = std::fs::read_dir(&root).map_err(|_| TranscriptError::NotFound(session_id.into()))?;
    rd.filter_map(Result::ok)
        .map(|d| d.path().join(format!("{session_id}.jsonl")))
        .find(|p| p.is_file())
        .ok_or_else(|| TranscriptError::NotFound(session_id.into()))
}

/// A transcript as entries.
#[derive(Debug, Clone)]
pub struct Transcript {
    /// Every parseable line, in file order, unknown kinds included.
    pub entries: Vec<Map<String, Value>>,
    /// Lines that could not be parsed.
    pub skipped: usize,
}

impl Transcript {
    /// The conversation's main chain (user / assistant / system / attachment entries), from
    /// the first message to the leaf, following `parentUuid` back from the leaf.
    pub fn main_chain(&self) -> Vec<&Map<String, Value>> {
        let by_uuid: HashMap<&str, &Map<String, Value>> = self
            .entries
            .iter()
            .filter_map(|e| Some((e.get("uuid")?.as_str()?, e)))
            .collect();
        // The leaf is whichever comes last in the file: a `last-prompt` pointer, or a
        // conversation entry written after it (the CLI updates the pointer lazily).
        let leaf = self.entries.iter().rev().find_map(|e| {
            if e.get("type").and_then(Value::as_str) == Some("last-prompt") {
                return e.get("leafUuid")?.as_str();
            }
            let conversational = matches!(
                e.get("type").and_then(Value::as_str),
                Some("user" | "assistant" | "attachment" | "system")
            );
            if conversational && e.get("isSidechain") != Some(&Value::Bool(true)) {
                return e.get("uuid")?.as_str();
            }
            None
        });
        let mut chain = Vec::new();
        let mut cur = leaf.and_then(|l| by_uuid.get(l).copied());
        while let Some(e) = cur {
            chain.push(e);
            if chain.len() > self.entries.len() {
                break; // a cycle in a corrupt file
            }
            let parent = e
                .get("parentUuid")
                .and_then(Value::as_str)
                .or_else(|| e.get("logicalParentUuid").and_then(Value::as_str));
            cur = parent.and_then(|p| by_uuid.get(p).copied());
        }
        chain.reverse();
        chain
    }
}

/// Reads a session's transcript, skipping bad lines with a warning.
pub fn read_session(config_dir: &Path, session_id: &str) -> Result<Transcript, TranscriptError> {
    let path = find_session(config_dir, session_id)?;
    read_file(&path)
}

/// Reads one transcript file.
pub fn read_file(path: &Path) -> Result<Transcript, TranscriptError> {
    let text = std::fs::read(path).map_err(io(path))?;
    Ok(parse_lines(&text, |n| {
        tracing::warn!(path = %path.display(), line = n, "skipping a bad transcript line");
    }))
}

/// A transcript from its text: one JSON object a line; blank lines are ignored and other
/// lines counted in [`Transcript::skipped`].
pub fn parse_transcript(text: &[u8]) -> Transcript {
    parse_lines(text, |_| {})
}

/// Parses transcript text, telling `bad` the (1-based) number of each line it skips.
fn parse_lines(text: &[u8], mut bad: impl FnMut(usize)) -> Transcript {
    let mut entries = Vec::new();
    let mut skipped = 0;
    for (n, line) in text.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Value>(line) {
            Ok(Value::Object(m)) => entries.push(m),
            _ => {
                skipped += 1;
                bad(n + 1);
            }
        }
    }
    Transcript { entries, skipped }
}

/// Copies a session into a new one that the CLI can `--resume`: every non-sidechain entry up
/// to and including `up_to_message_uuid` (or all), with every uuid remapped and the new
/// session id. Returns the new id. Read and written a line at a time: memory is the remapped
/// uuids and the longest line, not the file.
pub fn fork_session(
    config_dir: &Path,
    session_id: &str,
    up_to_message_uuid: Option<&str>,
) -> Result<String, TranscriptError> {
    use std::io::{BufRead, Write};
    let path = find_session(config_dir, session_id)?;
    let new_id = uuid::Uuid::new_v4().to_string();
    let dir = path.parent().unwrap_or(Path::new("."));
    let target = dir.join(format!("{new_id}.jsonl"));
    let mut reader = std::io::BufReader::new(std::fs::File::open(&path).map_err(io(&path))?);
    let mut out = std::io::BufWriter::new(std::fs::File::create(&target).map_err(io(&target))?);
    let mut remap: HashMap<String, String> = HashMap::new();
    let mut last_uuid = None;
    let mut found = up_to_message_uuid.is_none();
    let mut line = Vec::new();
    let copied = (|| -> Result<(), TranscriptError> {
        for n in 1.. {
            line.clear();
            if reader.read_until(b'\n', &mut line).map_err(io(&path))? == 0 {
                break;
            }
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let mut e = match serde_json::from_slice::<Value>(text) {
                Ok(Value::Object(m)) => m,
                _ => {
                    tracing::warn!(path = %path.display(), line = n, "skipping a bad transcript line");
                    continue;
                }
            };
            let stop = up_to_message_uuid.is_some()
                && e.get("uuid").and_then(Value::as_str) == up_to_message_uuid;
            if let Some(e) = forked_entry(&mut e, &mut remap, &mut last_uuid, &new_id) {
                serde_json::to_writer(&mut out, e).map_err(|e| io(&target)(e.into()))?;
                out.write_all(b"\n").map_err(io(&target))?;
            }
            if stop {
                found = true;
                break;
            }
        }
        if !found {
            return Err(TranscriptError::NoSuchMessage(
                up_to_message_uuid.unwrap_or_default().into(),
            ));
        }
        if let Some(leaf) = last_uuid.take() {
            writeln!(
                out,
                "{}",
                serde_json::json!({"type": "last-prompt", "leafUuid": leaf, "sessionId": new_id})
            )
            .map_err(io(&target))?;
        }
        writeln!(out, "{}", serde_json::json!({"type": "forked-from", "forkedFrom": {"sessionId": session_id, "messageUuid": up_to_message_uuid}, "sessionId": new_id})).map_err(io(&target))?;
        out.flush().map_err(io(&target))
    })();
    if let Err(e) = copied {
        drop(out);
        let _ = std::fs::remove_file(&target);
        return Err(e);
    }
    Ok(new_id)
}

/// One entry of a fork, remapped (`None`: left out).
fn forked_entry<'a>(
    e: &'a mut Map<String, Value>,
    remap: &mut HashMap<String, String>,
    last_uuid: &mut Option<String>,
    new_id: &str,
) -> Option<&'a Map<String, Value>> {
    if e.get("isSidechain") == Some(&Value::Bool(true))
        || e.get("type").and_then(Value::as_str) == Some("progress")
    {
        return None;
    }
    // Records about the old file's tail (leaf pointer, titles) are rebuilt at the end.
    if matches!(
        e.get("type").and_then(Value::as_str),
        Some("last-prompt" | "custom-title" | "ai-title")
    ) {
        return None;
    }
    if let Some(u) = e.get("uuid").and_then(Value::as_str).map(str::to_owned) {
        let fresh = uuid::Uuid::new_v4().to_string();
        remap.insert(u, fresh.clone());
        e.insert("uuid".into(), Value::String(fresh.clone()));
        if e.get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| matches!(t, "user" | "assistant"))
        {
            *last_uuid = Some(fresh);
        }
    }
    for key in [
        "parentUuid",
        "logicalParentUuid",
        "leafUuid",
        "sourceToolAssistantUUID",
    ] {
        if let Some(old) = e.get(key).and_then(Value::as_str)
            && let Some(new) = remap.get(old)
        {
            e.insert(key.into(), Value::String(new.clone()));
        }
    }
    if e.contains_key("sessionId") {
        e.insert("sessionId".into(), Value::String(new_id.to_owned()));
    }
    Some(e)
}

/// Deletes a session's transcript and its per-session directory (subagents, tool results).
pub fn delete_session(config_dir: &Path, session_id: &str) -> Result<(), TranscriptError> {
    let path = find_session(config_dir, session_id)?;
    std::fs::remove_file(&path).map_err(io(&path))?;
    let dir = path.with_extension("");
    if dir.is_dir() {
        std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
    }
    Ok(())
}

/// Subagent transcripts of a session (`<session>/subagents/agent-*.jsonl`).
pub fn subagent_transcripts(
    config_dir: &Path,
    session_id: &str,
) -> Result<Vec<PathBuf>, TranscriptError> {
    let path = find_session(config_dir, session_id)?;
    let dir = path.with_extension("").join("subagents");
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut out: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("jsonl"))
        .collect();
    out.sort();
    Ok(out)
}

/// Where the CLI keeps its sessions for a host: `explicit` (`CLAUDE_CONFIG_DIR`), else
/// `.claude` under the `HOME` the CLI is given (the last one in `env`), else under this
/// process's home.
pub fn config_dir(explicit: Option<&Path>, env: &[(String, String)]) -> Option<PathBuf> {
    explicit.map(Path::to_path_buf).or_else(|| {
        env.iter()
            .rev()
            .find(|(k, _)| k == "HOME")
            .map(|(_, v)| PathBuf::from(v))
            .or_else(std::env::home_dir)
            .map(|h| h.join(".claude"))
    })
}
