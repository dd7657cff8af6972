//! What the session's tool calls changed on disk: the task's side. The tracker (in the CLI's
//! hook callbacks) reports each call's changes as `Internal::Edited`; the task keeps them in
//! its `EditBook`, shows them as `fileEdit` content on the call, and keeps the changeset
//! channels (`<session>/changeset/session`, `<session>/changeset/turn/<id>`) current.
//! Discarding runs beside the task and reports back.

use super::{ChatSessionError, Internal, Reply, Task, subagents};
use crate::edits::book::{self, DISCARD_ALL, DISCARD_FILE, LogLine};
use crate::edits::{Composed, EditRecord, Scope};
use ahp_types::actions::{
    ChangesetFileRemovedAction, ChangesetFileSetAction, ChatToolCallCompleteAction, StateAction,
};
use ahp_types::commands::ChangesetOperationTarget;
use ahp_types::state::{Changeset, ResponsePart, ToolResultContent, ToolResultFileEditContent};
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

/// A changeset channel's URI for `scope` of the session at `session_uri`.
pub fn changeset_uri(session_uri: &str, scope: &Scope) -> String {
    match scope {
        Scope::Session => format!("{session_uri}/changeset/session"),
        Scope::Turn(t) => format!("{session_uri}/changeset/turn/{t}"),
    }
}

/// The scope a changeset URI names, given its session's URI.
pub(crate) fn scope_of(session_uri: &str, uri: &str) -> Option<Scope> {
    let rest = uri.strip_prefix(session_uri)?.strip_prefix("/changeset/")?;
    if rest == "session" {
        return Some(Scope::Session);
    }
    let turn = rest.strip_prefix("turn/")?;
    (!turn.is_empty() && !turn.contains('/')).then(|| Scope::Turn(turn.to_owned()))
}

/// The changesets a session with edit tracking lists.
pub(crate) fn catalogue(session_uri: &str) -> Vec<Changeset> {
    vec![
        Changeset {
            label: "Session changes".into(),
            uri_template: changeset_uri(session_uri, &Scope::Session),
            description: Some("Every file Claude changed in this session".into()),
            change_kind: "session".into(),
            capabilities: None,
        },
        Changeset {
            label: "Turn changes".into(),
            uri_template: format!("{session_uri}/changeset/turn/{{turnId}}"),
            description: Some("The files one turn changed".into()),
            change_kind: "turn".into(),
            capabilities: None,
        },
    ]
}

impl Task {
    /// Says which turn each recorded call ran in (after a restore).
    pub(super) fn index_edits(&mut self) {
        let calls: Vec<String> = self.book.calls();
        for call in calls {
            if let Some(turn) = self.owning_turn(&call) {
                Arc::make_mut(&mut self.book).set_turn(&call, &turn);
            }
        }
    }

    /// Restored turns' tool calls get the `fileEdit` content the live ones had.
    pub(super) fn restore_edit_content(&mut self) {
        let book = self.book.clone();
        let id = self.id.clone();
        let chats =
            std::iter::once(&mut self.chat).chain(self.subagents.iter_mut().map(|s| &mut s.chat));
        for chat in chats {
            for turn in &mut chat.turns {
                for part in &mut turn.response_parts {
                    let ResponsePart::ToolCall(tc) = part else {
                        continue;
                    };
                    let ahp_types::state::ToolCallState::Completed(done) = &mut tc.tool_call else {
                        continue;
                    };
                    let Some(record) = book.record(&done.tool_call_id) else {
                        continue;
                    };
                    let content = done.content.get_or_insert_with(Vec::new);
                    if content
                        .iter()
                        .any(|c| matches!(c, ToolResultContent::FileEdit(_)))
                    {
                        continue;
                    }
                    content.extend(file_edit_parts(&id, record));
                }
            }
        }
    }

    /// The main chat's turn a tool call belongs to (a subagent's call: the turn of the call
    /// that started the subagent).
    fn owning_turn(&self, call: &str) -> Option<String> {
        let mut call = call.to_owned();
        // Nested subagents: at most as deep as there are subagents.
        for _ in 0..=self.subagents.len() {
            if let Some(turn) = turn_with_call(&self.chat, &call) {
                return Some(turn);
            }
            let parent = self
                .subagents
                .iter()
                .find(|s| turn_with_call(&s.chat, &call).is_some())?;
            call = parent.call.clone();
        }
        None
    }

    pub(super) fn on_edited(&mut self, generation: u64, record: EditRecord) {
        if generation != self.generation {
            return;
        }
        let Some(tracker) = self.edits.clone() else {
            return;
        };
        let line = LogLine::Edit(record.clone());
        if let Err(e) = tracker.append(&line) {
            tracing::warn!(session = %self.id, error = %e, "the edit log could not be written");
        }
        let turn = self
            .owning_turn(&record.call)
            .or_else(|| self.turn.as_ref().map(|t| t.id.clone()));
        let book = Arc::make_mut(&mut self.book);
        if let Some(t) = &turn {
            book.set_turn(&record.call, t);
        }
        let paths: Vec<PathBuf> = record
            .changes
            .iter()
            .flat_map(|c| std::iter::once(c.path.clone()).chain(c.from.clone()))
            .collect();
        for c in &record.changes {
            tracing::info!(session = %self.id, call = %record.call, tool = %record.tool, path = %c.path.display(), added = c.added, removed = c.removed, "a tool call changed a file");
        }
        book.apply(line);
        self.refresh_changesets(&paths, turn.into_iter().collect());
    }

    /// Republishes `paths` on the session changeset and these turns' changesets.
    fn refresh_changesets(&mut self, paths: &[PathBuf], turns: Vec<String>) {
        let scopes = std::iter::once(Scope::Session).chain(turns.into_iter().map(Scope::Turn));
        for scope in scopes {
            let channel = changeset_uri(&self.uris.session, &scope);
            let files = self.book.compose(&scope);
            for path in paths {
                let action = match files.iter().find(|f| f.path == *path) {
                    Some(f) => StateAction::ChangesetFileSet(ChangesetFileSetAction {
                        file: book::changeset_file(&self.id, f),
                    }),
                    None => StateAction::ChangesetFileRemoved(ChangesetFileRemovedAction {
                        file_id: claude_host_protocol::uri::file_uri(path),
                    }),
                };
                self.outbox.publish(&channel, action, None, None);
            }
        }
    }

    /// Adds a call's file changes to its result.
    pub(super) fn attach_edits(&self, c: &mut ChatToolCallCompleteAction) {
        let Some(record) = self.book.record(&c.tool_call_id) else {
            return;
        };
        let parts = file_edit_parts(&self.id, record);
        c.result.content.get_or_insert_with(Vec::new).extend(parts);
    }

    /// `invokeChangesetOperation` on one of the session's changesets.
    pub(super) fn changeset_operation(
        &mut self,
        scope: Scope,
        operation: String,
        target: Option<ChangesetOperationTarget>,
        reply: Reply<()>,
    ) {
        let refuse = |reply: Reply<()>, why: String| {
            let _ = reply.send(Err(ChatSessionError::Refused(why)));
        };
        let Some(tracker) = self.edits.clone() else {
            return refuse(reply, "this session does not track edits".into());
        };
        if let Scope::Turn(t) = &scope
            && !self.turn_exists(t)
        {
            return refuse(reply, format!("no turn {t} in this session"));
        }
        if self.discarding {
            return refuse(reply, "another changeset operation is running".into());
        }
        let files = self.book.compose(&scope);
        let files: Vec<Composed> = match (operation.as_str(), target) {
            (DISCARD_ALL, _) => files,
            (DISCARD_FILE, Some(ChangesetOperationTarget::Resource { resource, .. })) => {
                match files.into_iter().find(|f| {
                    claude_host_protocol::uri::file_uri(&f.path) == resource
                        || claude_host_protocol::uri::file_path(&resource)
                            .is_ok_and(|p| p == f.path)
                }) {
                    Some(f) => vec![f],
                    None => {
                        return refuse(reply, format!("{resource} is not in this changeset"));
                    }
                }
            }
            (DISCARD_FILE, _) => {
                return refuse(reply, "discard-file needs a resource target".into());
            }
            (other, _) => return refuse(reply, format!("no operation {other} on this changeset")),
        };
        if files.is_empty() {
            let _ = reply.send(Ok(()));
            return;
        }
        self.discarding = true;
        let roots = self.working_directories.clone();
        let tx = self.internal_tx.clone();
        tokio::spawn(async move {
            let job = {
                let files = files.clone();
                tokio::task::spawn_blocking(move || {
                    crate::edits::put_back(tracker.store(), &files, &roots)
                })
            };
            let result = match job.await {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(e) => Err(format!("the discard did not finish: {e}")),
            };
            let _ = tx.send(Internal::PutBack {
                files,
                result,
                reply,
            });
        });
    }

    pub(super) fn on_put_back(
        &mut self,
        files: Vec<Composed>,
        result: Result<(), String>,
        reply: Reply<()>,
    ) {
        self.discarding = false;
        if let Err(why) = result {
            tracing::info!(session = %self.id, reason = %why, "a discard was refused");
            let _ = reply.send(Err(ChatSessionError::Refused(why)));
            return;
        }
        let mut turns = Vec::new();
        for f in &files {
            for call in &f.calls {
                let line = LogLine::Discard {
                    call: call.clone(),
                    path: f.path.clone(),
                };
                if let Some(t) = &self.edits
                    && let Err(e) = t.append(&line)
                {
                    tracing::warn!(session = %self.id, error = %e, "the edit log could not be written");
                }
                if let Some(t) = self.book.turn_of(call)
                    && !turns.contains(&t.to_owned())
                {
                    turns.push(t.to_owned());
                }
                Arc::make_mut(&mut self.book).apply(line);
            }
            tracing::info!(session = %self.id, path = %f.path.display(), "discarded Claude's changes to a file");
        }
        let paths: Vec<PathBuf> = files
            .iter()
            .flat_map(|f| std::iter::once(f.path.clone()).chain(f.from.clone()))
            .collect();
        self.refresh_changesets(&paths, turns);
        let _ = reply.send(Ok(()));
    }

    /// A checkpoint: puts back every file changed from turn `to` on (a turn id, or its
    /// 1-based number), then cuts the conversation before that turn. All or nothing: a file
    /// changed on disk since Claude's edit refuses it, naming the file.
    pub(super) fn rewind(&mut self, to: &str, reply: Reply<usize>) {
        let refuse = |reply: Reply<usize>, why: String| {
            let _ = reply.send(Err(ChatSessionError::Refused(why)));
        };
        if self.turn.is_some() {
            return refuse(reply, "cannot rewind while a turn is running".into());
        }
        if self.discarding {
            return refuse(reply, "another changeset operation is running".into());
        }
        let index = match to.parse::<usize>() {
            Ok(n) if (1..=self.chat.turns.len()).contains(&n) => n - 1,
            Ok(n) => {
                return refuse(
                    reply,
                    format!("no turn {n}; this session has {}", self.chat.turns.len()),
                );
            }
            Err(_) => match self.chat.turns.iter().position(|t| t.id == to) {
                Some(i) => i,
                None => return refuse(reply, format!("no turn {to} in this session")),
            },
        };
        let cut: HashSet<&str> = self.chat.turns[index..]
            .iter()
            .map(|t| t.id.as_str())
            .collect();
        let files = self.book.compose_turns(&cut);
        let count = files.len();
        let roots = self.working_directories.clone();
        let tx = self.internal_tx.clone();
        let store = self.edits.clone();
        self.discarding = true;
        tokio::spawn(async move {
            let result = match store {
                None => Ok(()),
                Some(tracker) => tokio::task::spawn_blocking(move || {
                    crate::edits::put_back(tracker.store(), &files, &roots)
                })
                .await
                .map_err(|e| format!("the rewind did not finish: {e}"))
                .and_then(|r| r.map_err(|e| e.to_string())),
            };
            let _ = tx.send(Internal::Rewound {
                files: count,
                keep: index,
                result,
                reply,
            });
        });
    }

    pub(super) async fn rewound(
        &mut self,
        files: usize,
        keep: usize,
        result: Result<(), String>,
        reply: Reply<usize>,
    ) {
        self.discarding = false;
        if let Err(why) = result {
            tracing::info!(session = %self.id, reason = %why, "a rewind was refused");
            let _ = reply.send(Err(ChatSessionError::Refused(why)));
            return;
        }
        match self.truncate(super::Keep::Turns(keep), None).await {
            Ok(()) => {
                tracing::info!(session = %self.id, files, kept_turns = keep, "rewound the session");
                let _ = reply.send(Ok(files));
            }
            Err(why) => {
                let _ = reply.send(Err(ChatSessionError::Refused(format!(
                    "the files were put back, but the conversation was not cut: {why}"
                ))));
            }
        }
    }

    /// Cuts the changes of calls in turns that left the conversation.
    pub(super) fn drop_edits_of(&mut self, turns: &HashSet<&str>) {
        let calls = self.book.calls_in(turns);
        if calls.is_empty() {
            return;
        }
        let line = LogLine::Drop { calls };
        if let Some(t) = &self.edits
            && let Err(e) = t.append(&line)
        {
            tracing::warn!(session = %self.id, error = %e, "the edit log could not be written");
        }
        Arc::make_mut(&mut self.book).apply(line);
    }

    fn turn_exists(&self, turn: &str) -> bool {
        self.chat.turns.iter().any(|t| t.id == turn)
            || self.chat.active_turn.as_ref().is_some_and(|t| t.id == turn)
    }
}

/// A call's changes as `fileEdit` result parts.
fn file_edit_parts(session_id: &str, record: &EditRecord) -> Vec<ToolResultContent> {
    record
        .changes
        .iter()
        .map(|change| {
            let edit = change.file_edit(session_id);
            ToolResultContent::FileEdit(ToolResultFileEditContent {
                before: edit.before,
                after: edit.after,
                diff: edit.diff,
            })
        })
        .collect()
}

/// The id of the turn of `chat` holding tool call `call`.
fn turn_with_call(chat: &ahp_types::state::ChatState, call: &str) -> Option<String> {
    let has = |parts: &[ResponsePart]| {
        parts.iter().any(|p| match p {
            ResponsePart::ToolCall(t) => subagents::tool_call_id_of(&t.tool_call) == call,
            _ => false,
        })
    };
    if let Some(a) = &chat.active_turn
        && has(&a.response_parts)
    {
        return Some(a.id.clone());
    }
    chat.turns
        .iter()
        .rev()
        .find(|t| has(&t.response_parts))
        .map(|t| t.id.clone())
}
