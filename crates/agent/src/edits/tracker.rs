//! Watches a session's tool calls through the CLI's `PreToolUse`/`PostToolUse` hooks and
//! records what each changed on disk: Claude's file tools by the file they name, Bash by
//! comparing snapshots of the working directories. Blocking: callers run it off the runtime.

use super::EditError;
use super::book::{EditRecord, FileChange, LogLine, line_stats};
use super::shadow::Shadow;
use super::store::{Blob, ContentStore, Limits};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// Tools that change the file their input names.
pub const FILE_TOOLS: [&str; 4] = ["Write", "Edit", "MultiEdit", "NotebookEdit"];
/// Tools whose changes are found by comparing snapshots.
pub const SHELL_TOOLS: [&str; 1] = ["Bash"];
/// The hook callback id for the moment before a tool runs.
pub const BEFORE: &str = "edits_before";
/// The hook callback id for the moment after a tool ran (or failed).
pub const AFTER: &str = "edits_after";
/// Most files a folder that is not a git repository may hold for Bash edits to be tracked.
pub const PLAIN_FOLDER_LIMIT: usize = 20_000;

/// The `hooks` of the CLI's `initialize` request that report to the tracker.
pub fn hooks() -> Value {
    let matcher = FILE_TOOLS
        .iter()
        .chain(SHELL_TOOLS.iter())
        .copied()
        .collect::<Vec<_>>()
        .join("|");
    // The first snapshot of a large repository can take a while; later ones are quick.
    let entry = |id: &str| json!([{"matcher": matcher, "hookCallbackIds": [id], "timeout": 120}]);
    json!({
        "PreToolUse": entry(BEFORE),
        "PostToolUse": entry(AFTER),
        "PostToolUseFailure": entry(AFTER),
    })
}

/// What a tool hook reports (the fields the tracker reads).
#[derive(Debug, Clone, Deserialize)]
pub struct HookInput {
    /// `PreToolUse`, `PostToolUse` or `PostToolUseFailure`.
    pub hook_event_name: String,
    /// The tool.
    pub tool_name: String,
    /// Its input.
    #[serde(default)]
    pub tool_input: Value,
    /// The call.
    pub tool_use_id: String,
}

enum Before {
    File(PathBuf, Option<Vec<u8>>),
    Shell(Vec<(Arc<Shadow>, String)>),
}

/// One session's tracker: its content store, its shadows and its log.
pub struct Tracker {
    root: PathBuf,
    store: ContentStore,
    dirs: Vec<PathBuf>,
    shadows: Mutex<HashMap<PathBuf, Option<Arc<Shadow>>>>,
    pending: Mutex<HashMap<String, Before>>,
    /// Held while a snapshot runs: one git index per shadow.
    snapshotting: Mutex<()>,
}

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracker").field("root", &self.root).finish()
    }
}

impl Tracker {
    /// Opens the tracker kept in `root` (`<data>/edits/<session id>`) for these directories.
    pub fn open(root: PathBuf, dirs: Vec<PathBuf>, limits: Limits) -> Result<Tracker, EditError> {
        let store = ContentStore::open(root.join("content"), limits)?;
        Ok(Tracker {
            root,
            store,
            dirs,
            shadows: Mutex::default(),
            pending: Mutex::default(),
            snapshotting: Mutex::new(()),
        })
    }

    /// The content store.
    pub fn store(&self) -> &ContentStore {
        &self.store
    }

    /// The log's lines so far (a line that cannot be read is skipped and logged).
    pub fn read_log(&self) -> Vec<LogLine> {
        let Ok(text) = std::fs::read_to_string(self.root.join("log.jsonl")) else {
            return Vec::new();
        };
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .filter_map(|l| match serde_json::from_str(l) {
                Ok(line) => Some(line),
                Err(e) => {
                    tracing::warn!(error = %e, "an edit log line that cannot be read; skipped");
                    None
                }
            })
            .collect()
    }

    /// Appends to the log.
    pub fn append(&self, line: &LogLine) -> Result<(), EditError> {
        let path = self.root.join("log.jsonl");
        let mut text = serde_json::to_string(line).map_err(|e| EditError::Git(e.to_string()))?;
        text.push('\n');
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|e| EditError::io(&path, e))
    }

    /// Where the conversation was cut, when it was cut and no turn has been sent since:
    /// (the transcript entry to resume at, the turns kept). Claude Code's transcript keeps the
    /// cut turns until the next message branches off the entry, so a session reopened before
    /// then must resume at it and show only the kept turns.
    pub fn cut(&self) -> Option<(String, usize)> {
        let text = std::fs::read_to_string(self.root.join("cut.json")).ok()?;
        let v: Value = serde_json::from_str(&text).ok()?;
        let anchor = v.get("anchor")?.as_str()?.to_owned();
        let kept = usize::try_from(v.get("keptTurns")?.as_u64()?).ok()?;
        Some((anchor, kept))
    }

    /// Records (or, with `None`, forgets) where the conversation was cut.
    pub fn set_cut(&self, cut: Option<(&str, usize)>) -> Result<(), EditError> {
        let path = self.root.join("cut.json");
        match cut {
            None => match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(EditError::io(&path, e)),
                _ => Ok(()),
            },
            Some((anchor, kept)) => {
                let text = json!({"anchor": anchor, "keptTurns": kept}).to_string();
                let tmp = self.root.join(".cut.json.tmp");
                std::fs::OpenOptions::new()
                    .create(true)
                    .write(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&tmp)
                    .and_then(|mut f| f.write_all(text.as_bytes()))
                    .and_then(|()| std::fs::rename(&tmp, &path))
                    .map_err(|e| EditError::io(&path, e))
            }
        }
    }

    /// Handles a hook: `Some` when a call's changes are known.
    pub fn on_hook(&self, input: &HookInput) -> Option<EditRecord> {
        match input.hook_event_name.as_str() {
            "PreToolUse" => {
                self.before(input);
                None
            }
            "PostToolUse" | "PostToolUseFailure" => self.after(input),
            _ => None,
        }
    }

    fn before(&self, input: &HookInput) {
        let before = if let Some(path) = file_of(&input.tool_name, &input.tool_input) {
            Before::File(path.clone(), read_if_file(&path))
        } else if SHELL_TOOLS.contains(&input.tool_name.as_str()) {
            Before::Shell(self.snapshots())
        } else {
            return;
        };
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(input.tool_use_id.clone(), before);
    }

    fn after(&self, input: &HookInput) -> Option<EditRecord> {
        let before = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&input.tool_use_id)?;
        let changes = match before {
            Before::File(path, old) => {
                let new = read_if_file(&path);
                if old == new {
                    Vec::new()
                } else {
                    self.change(path, old.as_deref(), new.as_deref())
                        .into_iter()
                        .collect()
                }
            }
            Before::Shell(before) => self.shell_changes(before),
        };
        if changes.is_empty() {
            return None;
        }
        Some(EditRecord {
            call: input.tool_use_id.clone(),
            tool: input.tool_name.clone(),
            changes,
        })
    }

    /// What a file tool call would change, from its input, for the user to see before
    /// approving it (`None`: not a file tool, or its outcome cannot be foreseen).
    pub fn proposed(&self, tool: &str, input: &Value) -> Option<FileChange> {
        let path = file_of(tool, input)?;
        let old = read_if_file(&path);
        let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let replace = |content: String, edit: &Value| -> Option<String> {
            let from = text(edit, "old_string")?;
            let to = text(edit, "new_string")?;
            if from.is_empty() || !content.contains(&from) {
                return None;
            }
            let all = edit.get("replace_all").and_then(Value::as_bool) == Some(true);
            Some(if all {
                content.replace(&from, &to)
            } else {
                content.replacen(&from, &to, 1)
            })
        };
        let new = match tool {
            "Write" => text(input, "content")?,
            "Edit" => replace(String::from_utf8(old.clone()?).ok()?, input)?,
            "MultiEdit" => {
                let mut content = String::from_utf8(old.clone()?).ok()?;
                for edit in input.get("edits")?.as_array()? {
                    content = replace(content, edit)?;
                }
                content
            }
            _ => return None,
        };
        if old.as_deref() == Some(new.as_bytes()) {
            return None;
        }
        self.change(path, old.as_deref(), Some(new.as_bytes()))
    }

    fn change(&self, path: PathBuf, old: Option<&[u8]>, new: Option<&[u8]>) -> Option<FileChange> {
        self.moved(None, path, old, new)
    }

    fn moved(
        &self,
        from: Option<PathBuf>,
        path: PathBuf,
        old: Option<&[u8]>,
        new: Option<&[u8]>,
    ) -> Option<FileChange> {
        let keep = |bytes: &[u8]| match self.store.put(bytes) {
            Ok(b) => Some(b),
            Err(e) => {
                tracing::warn!(error = %e, "a file version could not be kept");
                Some(Blob::of(bytes))
            }
        };
        let (added, removed) = line_stats(old.unwrap_or_default(), new.unwrap_or_default());
        Some(FileChange {
            path,
            before: old.and_then(keep),
            after: new.and_then(keep),
            added,
            removed,
            from,
        })
    }

    /// Snapshots of every working directory that can be tracked.
    fn snapshots(&self) -> Vec<(Arc<Shadow>, String)> {
        let _one = self
            .snapshotting
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut out = Vec::new();
        for dir in &self.dirs {
            let Some(shadow) = self.shadow(dir) else {
                continue;
            };
            match shadow.snapshot() {
                Ok(tree) => out.push((shadow, tree)),
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "no snapshot of a working directory; a shell command's edits there are not tracked");
                }
            }
        }
        out
    }

    fn shell_changes(&self, before: Vec<(Arc<Shadow>, String)>) -> Vec<FileChange> {
        let mut changes = Vec::new();
        for (shadow, tree) in before {
            let after = {
                let _one = self
                    .snapshotting
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                shadow.snapshot()
            };
            let raw = match after.and_then(|after| shadow.changes(&tree, &after)) {
                Ok(raw) => raw,
                Err(e) => {
                    tracing::warn!(error = %e, "a shell command's edits could not be read");
                    continue;
                }
            };
            let ids: Vec<String> = raw
                .iter()
                .flat_map(|c| c.before.iter().chain(c.after.iter()).cloned())
                .collect();
            let blobs = match shadow.read_blobs(&ids) {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(error = %e, "a shell command's edits could not be read");
                    continue;
                }
            };
            let mut blobs = blobs.into_iter();
            for c in raw {
                let old = c.before.as_ref().and_then(|_| blobs.next());
                let new = c.after.as_ref().and_then(|_| blobs.next());
                if changes.iter().any(|x: &FileChange| x.path == c.path) {
                    continue;
                }
                changes.extend(self.moved(c.from, c.path, old.as_deref(), new.as_deref()));
            }
        }
        changes
    }

    fn shadow(&self, dir: &Path) -> Option<Arc<Shadow>> {
        let mut shadows = self.shadows.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = shadows.get(dir) {
            return s.clone();
        }
        let opened = match Shadow::open(&self.root.join("shadow"), dir, PLAIN_FOLDER_LIMIT) {
            Ok(s) => Some(Arc::new(s)),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "shell command edits are not tracked in this directory");
                None
            }
        };
        shadows.insert(dir.to_owned(), opened.clone());
        opened
    }
}

/// The file a file tool's input names.
fn file_of(tool: &str, input: &Value) -> Option<PathBuf> {
    if !FILE_TOOLS.contains(&tool) {
        return None;
    }
    ["file_path", "notebook_path"]
        .iter()
        .find_map(|k| input.get(*k).and_then(Value::as_str))
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

/// A regular file's bytes (`None` when there is none, or it is not a regular file).
fn read_if_file(path: &Path) -> Option<Vec<u8>> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    meta.is_file().then(|| std::fs::read(path).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(event: &str, tool: &str, input: Value, call: &str) -> HookInput {
        HookInput {
            hook_event_name: event.into(),
            tool_name: tool.into(),
            tool_input: input,
            tool_use_id: call.into(),
        }
    }

    #[test]
    fn a_write_an_edit_and_a_shell_command_are_recorded_with_both_sides_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let work = work.canonicalize().unwrap();
        let t = Tracker::open(
            tmp.path().join("edits"),
            vec![work.clone()],
            Limits::default(),
        )
        .unwrap();
        let a = work.join("a.txt");
        let input = json!({"file_path": a, "content": "one\n"});
        assert!(
            t.on_hook(&hook("PreToolUse", "Write", input.clone(), "c1"))
                .is_none()
        );
        std::fs::write(&a, "one\n").unwrap();
        let r = t
            .on_hook(&hook("PostToolUse", "Write", input, "c1"))
            .unwrap();
        assert_eq!(r.changes.len(), 1);
        assert!(r.changes[0].before.is_none());
        let after = r.changes[0].after.clone().unwrap();
        assert_eq!(t.store().get(&after.hash).unwrap(), b"one\n");

        let sh = json!({"command": "sed -i s/one/two/ a.txt; rm -f gone"});
        std::fs::write(work.join("gone"), "bye").unwrap();
        t.on_hook(&hook("PreToolUse", "Bash", sh.clone(), "c2"));
        std::fs::write(&a, "two\n").unwrap();
        std::fs::remove_file(work.join("gone")).unwrap();
        let r = t.on_hook(&hook("PostToolUse", "Bash", sh, "c2")).unwrap();
        let mut paths: Vec<_> = r.changes.iter().map(|c| c.path.clone()).collect();
        paths.sort();
        assert_eq!(paths, [work.join("a.txt"), work.join("gone")]);
        let edit = r.changes.iter().find(|c| c.path == a).unwrap();
        assert_eq!(
            t.store().get(&edit.before.clone().unwrap().hash).unwrap(),
            b"one\n"
        );
        assert_eq!((edit.added, edit.removed), (1, 1));

        // A tool that changed nothing records nothing; a post without a pre is ignored.
        let sh = json!({"command": "true"});
        t.on_hook(&hook("PreToolUse", "Bash", sh.clone(), "c3"));
        assert!(
            t.on_hook(&hook("PostToolUse", "Bash", sh.clone(), "c3"))
                .is_none()
        );
        assert!(t.on_hook(&hook("PostToolUse", "Bash", sh, "c4")).is_none());

        let line = LogLine::Edit(r);
        t.append(&line).unwrap();
        assert_eq!(t.read_log(), [line]);
    }
}
