//! A session's record of what its tool calls changed, and the views clients read from it:
//! `fileEdit` tool results and changesets (per turn and for the whole session). Pure: the
//! session task owns one and changes it; the bytes live in the content store.

use super::store::Blob;
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::{
    ChangesetFile, ChangesetOperation, ChangesetOperationScope, ChangesetOperationStatus,
    ChangesetState, ChangesetStatus, ContentRef, FileEdit, FileEditDiffStats, FileEditSide,
};
use claude_host_protocol::uri::file_uri;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// A file one tool call created, changed or deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    /// The file, absolute.
    pub path: PathBuf,
    /// Its content before (`None`: it did not exist).
    pub before: Option<Blob>,
    /// Its content after (`None`: it was deleted).
    pub after: Option<Blob>,
    /// Lines added.
    pub added: u64,
    /// Lines removed.
    pub removed: u64,
    /// Where it was before, when it was moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<PathBuf>,
}

impl FileChange {
    /// Its `fileEdit` shape, with content URIs of session `session_id`.
    pub fn file_edit(&self, session_id: &str) -> FileEdit {
        file_edit(
            session_id,
            self.from.as_deref(),
            &self.path,
            self.before.as_ref(),
            self.after.as_ref(),
            self.added,
            self.removed,
        )
    }
}

/// Everything one tool call changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditRecord {
    /// The tool call.
    pub call: String,
    /// The tool's name (`Write`, `Edit`, `Bash`, …).
    pub tool: String,
    /// The files, each once.
    pub changes: Vec<FileChange>,
}

/// One line of a session's edit log (`log.jsonl`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum LogLine {
    /// A tool call's changes.
    Edit(EditRecord),
    /// A call's change to a file was undone.
    Discard {
        /// The call.
        call: String,
        /// The file.
        path: PathBuf,
    },
    /// These calls' turns were cut from the conversation; their changes leave the record.
    Drop {
        /// The calls.
        calls: Vec<String>,
    },
}

/// Which changes a changeset covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Every change of the session.
    Session,
    /// The changes of one turn (its id).
    Turn(String),
}

/// A file's changes within a scope, composed: the content before the first, after the last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Composed {
    /// The file.
    pub path: PathBuf,
    /// Before the first change in scope.
    pub before: Option<Blob>,
    /// After the last change in scope.
    pub after: Option<Blob>,
    /// Lines added, summed over the changes.
    pub added: u64,
    /// Lines removed, summed over the changes.
    pub removed: u64,
    /// Where it was before the first change, when it was moved.
    pub from: Option<PathBuf>,
    /// The calls whose changes these are.
    pub calls: Vec<String>,
}

/// The operation that puts one file back.
pub const DISCARD_FILE: &str = "discard-file";
/// The operation that puts every file of the changeset back.
pub const DISCARD_ALL: &str = "discard-all";

/// A session's edits.
#[derive(Debug, Clone, Default)]
pub struct EditBook {
    session: String,
    records: Vec<EditRecord>,
    turn_of: HashMap<String, String>,
    discarded: HashSet<(String, PathBuf)>,
}

impl EditBook {
    /// The empty record of session `session` (its id names its content URIs).
    pub fn new(session: &str) -> EditBook {
        EditBook {
            session: session.to_owned(),
            ..EditBook::default()
        }
    }

    /// Every recorded call, in order.
    pub fn calls(&self) -> Vec<String> {
        self.records.iter().map(|r| r.call.clone()).collect()
    }

    /// Applies a log line (live or read back).
    pub fn apply(&mut self, line: LogLine) {
        match line {
            LogLine::Edit(r) => {
                if let Some(old) = self.records.iter_mut().find(|x| x.call == r.call) {
                    // A call reported twice (PostToolUse and a failure hook): the later wins.
                    *old = r;
                } else {
                    self.records.push(r);
                }
            }
            LogLine::Discard { call, path } => {
                self.discarded.insert((call, path));
            }
            LogLine::Drop { calls } => {
                let calls: HashSet<String> = calls.into_iter().collect();
                self.records.retain(|r| !calls.contains(&r.call));
                self.discarded.retain(|(c, _)| !calls.contains(c));
            }
        }
    }

    /// Says which turn a call ran in.
    pub fn set_turn(&mut self, call: &str, turn: &str) {
        self.turn_of.insert(call.to_owned(), turn.to_owned());
    }

    /// The turn a call ran in.
    pub fn turn_of(&self, call: &str) -> Option<&str> {
        self.turn_of.get(call).map(String::as_str)
    }

    /// The record of one call.
    pub fn record(&self, call: &str) -> Option<&EditRecord> {
        self.records.iter().find(|r| r.call == call)
    }

    /// The calls whose turn is one of `turns`.
    pub fn calls_in(&self, turns: &HashSet<&str>) -> Vec<String> {
        self.records
            .iter()
            .filter(|r| self.turn_of(&r.call).is_some_and(|t| turns.contains(t)))
            .map(|r| r.call.clone())
            .collect()
    }

    /// The turns that changed something.
    pub fn turns(&self) -> Vec<String> {
        let mut seen = Vec::new();
        for r in &self.records {
            if let Some(t) = self.turn_of(&r.call)
                && !seen.iter().any(|s| s == t)
            {
                seen.push(t.to_owned());
            }
        }
        seen
    }

    /// Whether any change is in `scope`.
    pub fn in_scope(&self, scope: &Scope, call: &str) -> bool {
        match scope {
            Scope::Session => true,
            Scope::Turn(t) => self.turn_of(call) == Some(t.as_str()),
        }
    }

    /// The files changed in `scope`, each composed, in the order first changed.
    pub fn compose(&self, scope: &Scope) -> Vec<Composed> {
        self.compose_where(|call| self.in_scope(scope, call))
    }

    /// The files the calls of these turns changed, each composed.
    pub fn compose_turns(&self, turns: &HashSet<&str>) -> Vec<Composed> {
        self.compose_where(|call| self.turn_of(call).is_some_and(|t| turns.contains(t)))
    }

    fn compose_where(&self, pick: impl Fn(&str) -> bool) -> Vec<Composed> {
        let mut files: Vec<Composed> = Vec::new();
        for r in self.records.iter().filter(|r| pick(&r.call)) {
            for c in &r.changes {
                if self.discarded.contains(&(r.call.clone(), c.path.clone())) {
                    continue;
                }
                // A move continues the entry of the file it moved (which then lives at the
                // new path), or starts one that remembers where it was.
                let at = c.from.as_ref().unwrap_or(&c.path);
                match files.iter().position(|f| f.path == *at) {
                    Some(i) => {
                        let f = &mut files[i];
                        if c.from.is_some() {
                            f.from = f.from.take().or_else(|| Some(f.path.clone()));
                            f.path = c.path.clone();
                        }
                        f.after = c.after.clone();
                        f.added += c.added;
                        f.removed += c.removed;
                        f.calls.push(r.call.clone());
                    }
                    None => files.push(Composed {
                        path: c.path.clone(),
                        before: c.before.clone(),
                        after: c.after.clone(),
                        added: c.added,
                        removed: c.removed,
                        from: c.from.clone(),
                        calls: vec![r.call.clone()],
                    }),
                }
            }
        }
        // A file put back as it was (created then deleted, edited then reverted, moved back)
        // is no change.
        for f in &mut files {
            if f.from.as_ref() == Some(&f.path) {
                f.from = None;
            }
        }
        files.retain(|f| f.before != f.after || f.from.is_some());
        files
    }

    /// A changeset's state.
    pub fn changeset(&self, scope: &Scope) -> ChangesetState {
        let files: Vec<ChangesetFile> = self
            .compose(scope)
            .iter()
            .map(|f| changeset_file(&self.session, f))
            .collect();
        ChangesetState {
            status: ChangesetStatus::Ready,
            error: None,
            operations: Some(operations()),
            files,
        }
    }
}

/// The operations every changeset offers.
pub fn operations() -> Vec<ChangesetOperation> {
    let op = |id: &str, label: &str, scope, confirmation: &str| ChangesetOperation {
        id: id.to_owned(),
        label: label.to_owned(),
        description: None,
        scopes: vec![scope],
        confirmation: Some(StringOrMarkdown::Plain(confirmation.to_owned())),
        icon: Some("discard".to_owned()),
        group: None,
        status: ChangesetOperationStatus::Idle,
        error: None,
    };
    vec![
        op(
            DISCARD_FILE,
            "Discard changes",
            ChangesetOperationScope::Resource,
            "Put this file back as it was before these changes?",
        ),
        op(
            DISCARD_ALL,
            "Discard all changes",
            ChangesetOperationScope::Changeset,
            "Put every file here back as it was before these changes?",
        ),
    ]
}

/// One composed file as a changeset entry (its id is the file's URI).
pub fn changeset_file(session_id: &str, f: &Composed) -> ChangesetFile {
    ChangesetFile {
        id: file_uri(&f.path),
        edit: file_edit(
            session_id,
            f.from.as_deref(),
            &f.path,
            f.before.as_ref(),
            f.after.as_ref(),
            f.added,
            f.removed,
        ),
        reviewed: None,
        meta: None,
    }
}

/// The `fileEdit` shape of a change: create = after only, delete = before only, a move from
/// `from` = two sides naming different files.
pub fn file_edit(
    session_id: &str,
    from: Option<&Path>,
    path: &Path,
    before: Option<&Blob>,
    after: Option<&Blob>,
    added: u64,
    removed: u64,
) -> FileEdit {
    let side = |b: &Blob, at: &Path| FileEditSide {
        uri: file_uri(at),
        content: ContentRef {
            uri: content_uri(session_id, &b.hash, at),
            size_hint: i64::try_from(b.size).ok(),
            content_type: None,
            nonce: None,
        },
    };
    FileEdit {
        before: before.map(|b| side(b, from.unwrap_or(path))),
        after: after.map(|b| side(b, path)),
        diff: Some(FileEditDiffStats {
            added: i64::try_from(added).ok(),
            removed: i64::try_from(removed).ok(),
        }),
    }
}

/// The scheme of the URIs that name kept file versions.
pub const CONTENT_SCHEME: &str = "claude-host-content";

/// Where a client reads a kept version: `claude-host-content:/<session>/<sha256>/<file name>`
/// (the name only helps a client pick a language).
pub fn content_uri(session_id: &str, hash: &str, path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name: String = name
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    format!("{CONTENT_SCHEME}:/{session_id}/{hash}/{name}")
}

/// The session id and content hash a content URI names.
pub fn parse_content_uri(uri: &str) -> Option<(&str, &str)> {
    let rest = uri.strip_prefix(CONTENT_SCHEME)?.strip_prefix(":/")?;
    let mut parts = rest.splitn(3, '/');
    let session = parts.next().filter(|s| !s.is_empty())?;
    let hash = parts.next().filter(|h| super::store::is_hash(h))?;
    Some((session, hash))
}

/// Lines added and removed between two versions (text diff; a binary file counts nothing).
pub fn line_stats(before: &[u8], after: &[u8]) -> (u64, u64) {
    if before.contains(&0) || after.contains(&0) {
        return (0, 0);
    }
    let old = String::from_utf8_lossy(before);
    let new = String::from_utf8_lossy(after);
    let diff = similar::TextDiff::configure()
        .timeout(std::time::Duration::from_millis(100))
        .diff_lines(old.as_ref(), new.as_ref());
    let (mut added, mut removed) = (0, 0);
    for op in diff.ops() {
        for change in diff.iter_changes(op) {
            match change.tag() {
                similar::ChangeTag::Insert => added += 1,
                similar::ChangeTag::Delete => removed += 1,
                similar::ChangeTag::Equal => {}
            }
        }
    }
    (added, removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(path: &str, before: Option<&str>, after: Option<&str>) -> FileChange {
        FileChange {
            path: PathBuf::from(path),
            before: before.map(|b| Blob::of(b.as_bytes())),
            after: after.map(|a| Blob::of(a.as_bytes())),
            added: 1,
            removed: 1,
            from: None,
        }
    }

    fn record(call: &str, changes: Vec<FileChange>) -> LogLine {
        LogLine::Edit(EditRecord {
            call: call.into(),
            tool: "Edit".into(),
            changes,
        })
    }

    #[test]
    fn a_turns_changes_compose_per_file_and_discards_and_drops_leave_it() {
        let mut book = EditBook::default();
        book.apply(record("c1", vec![change("/p/a", Some("1"), Some("2"))]));
        book.apply(record(
            "c2",
            vec![
                change("/p/a", Some("2"), Some("3")),
                change("/p/b", None, Some("b")),
            ],
        ));
        book.apply(record("c3", vec![change("/p/c", Some("c"), None)]));
        book.set_turn("c1", "t1");
        book.set_turn("c2", "t1");
        book.set_turn("c3", "t2");
        let t1 = book.compose(&Scope::Turn("t1".into()));
        assert_eq!(t1.len(), 2);
        assert_eq!(t1[0].before, Some(Blob::of(b"1")));
        assert_eq!(t1[0].after, Some(Blob::of(b"3")));
        assert_eq!(t1[0].calls, ["c1", "c2"]);
        assert_eq!(book.compose(&Scope::Session).len(), 3);
        book.apply(LogLine::Discard {
            call: "c2".into(),
            path: "/p/b".into(),
        });
        assert_eq!(book.compose(&Scope::Turn("t1".into())).len(), 1);
        book.apply(LogLine::Drop {
            calls: vec!["c3".into()],
        });
        assert_eq!(book.compose(&Scope::Session).len(), 1);
        // Changed and changed back within the scope: nothing to show.
        book.apply(record("c4", vec![change("/p/a", Some("3"), Some("1"))]));
        book.set_turn("c4", "t1");
        assert!(book.compose(&Scope::Turn("t1".into())).is_empty());
    }

    #[test]
    fn a_move_then_an_edit_compose_into_one_entry_that_remembers_where_it_was() {
        let mut book = EditBook::default();
        let mut moved = change("/p/new", Some("x"), Some("x"));
        moved.from = Some(PathBuf::from("/p/old"));
        book.apply(record("c1", vec![moved]));
        book.apply(record("c2", vec![change("/p/new", Some("x"), Some("y"))]));
        let files = book.compose(&Scope::Session);
        assert_eq!(files.len(), 1, "{files:?}");
        assert_eq!(files[0].from, Some(PathBuf::from("/p/old")));
        assert_eq!(files[0].path, PathBuf::from("/p/new"));
        assert_eq!(files[0].before, Some(Blob::of(b"x")));
        assert_eq!(files[0].after, Some(Blob::of(b"y")));
        let edit = changeset_file("s", &files[0]).edit;
        assert_eq!(edit.before.unwrap().uri, "file:///p/old");
        assert_eq!(edit.after.unwrap().uri, "file:///p/new");
    }

    #[test]
    fn content_uris_round_trip_and_reject_what_is_not_a_hash() {
        let h = Blob::of(b"x").hash;
        let uri = content_uri("s1", &h, Path::new("/p/a b.ts"));
        assert_eq!(uri, format!("claude-host-content:/s1/{h}/a%20b.ts"));
        assert_eq!(parse_content_uri(&uri), Some(("s1", h.as_str())));
        assert_eq!(parse_content_uri("claude-host-content:/s1/../etc"), None);
        assert_eq!(parse_content_uri("file:///etc/passwd"), None);
    }

    #[test]
    fn line_stats_count_lines() {
        assert_eq!(line_stats(b"a\nb\nc\n", b"a\nB\nc\nd\n"), (2, 1));
        assert_eq!(line_stats(b"", b"x\n"), (1, 0));
        assert_eq!(line_stats(b"\0bin", b"other"), (0, 0));
    }
}
