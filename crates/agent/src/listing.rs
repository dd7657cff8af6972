//! The session list: the CLI's transcripts on disk, the host's overlay, and the live
//! sessions, merged in one place.

use claude_host_protocol::time::millis;
use claude_host_sdk::transcripts::SessionSummary;
use claude_host_store::SessionRecord;
use std::collections::HashMap;

/// One entry of the session list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionListing {
    /// The Claude session id.
    pub id: String,
    /// The session's URI (a live session's own, else this host's form).
    pub resource: String,
    /// Title: the host's, else the CLI's title or first prompt.
    pub title: String,
    /// Working directory, when known.
    pub cwd: Option<String>,
    /// Git branch the session started on, when known.
    pub git_branch: Option<String>,
    /// Creation, milliseconds since the epoch (0 when unknown).
    pub created_at: i64,
    /// Last change, milliseconds since the epoch.
    pub modified_at: i64,
    /// Model chosen in the host, if any.
    pub model: Option<String>,
    /// Archived in the host.
    pub archived: bool,
    /// Marked read by a client.
    pub read: bool,
    /// Whether claude-host knows it (else it came from the user's own `claude`).
    pub from_host: bool,
    /// Whether it is live in this host now.
    pub live: bool,
    /// The host that last ran it, when the shared store says.
    pub last_host: Option<String>,
}

/// What the list needs from a live session.
#[derive(Debug, Clone)]
pub struct Live {
    /// Its id.
    pub id: String,
    /// Its session URI.
    pub resource: String,
    /// Its title.
    pub title: String,
    /// Its working directory.
    pub cwd: String,
    /// Its model.
    pub model: Option<String>,
}

fn entry(id: &str) -> SessionListing {
    SessionListing {
        id: id.to_owned(),
        resource: crate::agent::default_uris(id).session,
        title: String::new(),
        cwd: None,
        git_branch: None,
        created_at: 0,
        modified_at: 0,
        model: None,
        archived: false,
        read: false,
        from_host: false,
        live: false,
        last_host: None,
    }
}

/// Merges the three sources, newest first: the overlay's title and settings win over the
/// transcript's, a live session's URI and title over both.
pub fn merge(
    transcripts: Vec<SessionSummary>,
    records: Vec<SessionRecord>,
    live: Vec<Live>,
) -> Vec<SessionListing> {
    let mut by_id: HashMap<String, SessionListing> = HashMap::new();
    for s in transcripts {
        let e = by_id
            .entry(s.session_id.clone())
            .or_insert_with(|| entry(&s.session_id));
        e.title = if s.summary.is_empty() {
            s.first_prompt.clone().unwrap_or_default()
        } else {
            s.summary.clone()
        };
        e.cwd = s.cwd.clone();
        e.git_branch = s.git_branch.clone();
        e.modified_at = millis(s.modified);
    }
    for r in records {
        let e = by_id.entry(r.id.clone()).or_insert_with(|| entry(&r.id));
        if let Some(resource) = r.resource {
            e.resource = resource;
        }
        if let Some(t) = r.title.filter(|t| !t.is_empty()) {
            e.title = t;
        }
        if !r.cwd.is_empty() {
            e.cwd = Some(r.cwd);
        }
        e.model = r.model;
        e.archived = r.archived;
        e.read = r.read;
        e.last_host = r.host;
        e.from_host = true;
        e.created_at = r.created_at;
        e.modified_at = e.modified_at.max(r.updated_at);
    }
    for l in live {
        let e = by_id.entry(l.id.clone()).or_insert_with(|| entry(&l.id));
        e.resource = l.resource;
        e.from_host = true;
        e.live = true;
        if !l.title.is_empty() {
            e.title = l.title;
        }
        if e.cwd.is_none() {
            e.cwd = Some(l.cwd);
        }
        if l.model.is_some() {
            e.model = l.model;
        }
    }
    let mut list: Vec<SessionListing> = by_id.into_values().collect();
    for l in &mut list {
        if l.created_at == 0 {
            l.created_at = l.modified_at;
        }
    }
    list.sort_by(|a, b| b.modified_at.cmp(&a.modified_at).then(a.id.cmp(&b.id)));
    list
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overlay_and_live_sessions_win() {
        let t = SessionSummary {
            session_id: "a".into(),
            path: "/x/a.jsonl".into(),
            summary: "from the cli".into(),
            first_prompt: Some("hi".into()),
            cwd: Some("/w".into()),
            git_branch: None,
            modified: std::time::UNIX_EPOCH + std::time::Duration::from_secs(10),
            size: 1,
            message_count: 2,
        };
        let r = SessionRecord {
            id: "a".into(),
            resource: Some("ahp-session:/a".into()),
            title: Some("host title".into()),
            model: Some("claude-x".into()),
            effort: None,
            permission_mode: None,
            cwd: "/w".into(),
            created_at: 5,
            updated_at: 20_000,
            archived: true,
            read: true,
            host: None,
            decisions: None,
        };
        let live = Live {
            id: "b".into(),
            resource: "claude:/b".into(),
            title: "live one".into(),
            cwd: "/v".into(),
            model: None,
        };
        let list = merge(vec![t], vec![r], vec![live]);
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].title, "host title", "newest first");
        assert!(list[0].archived && list[0].read && list[0].from_host && !list[0].live);
        assert_eq!(list[0].modified_at, 20_000);
        assert_eq!(
            list[0].resource, "ahp-session:/a",
            "the name its client chose"
        );
        assert_eq!(list[1].resource, "claude:/b");
        assert!(list[1].live);
    }
}
