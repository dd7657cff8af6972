//! Durable session state behind three traits, on two backends: an embedded SQLite file under
//! the claude-host data directory (the default) and PostgreSQL (for teams, so a session can
//! move between machines).
//!
//! - [`Store`]: the host's metadata per session (title, settings, archived/read, which host
//!   last ran it);
//! - [`SessionStore`]: transcripts, as the Claude Agent SDK's `SessionStore` keeps them —
//!   entries appended in order under a project key, a session id and a subpath for subagent
//!   transcripts;
//! - [`Leases`]: one driver per session at a time.
//!
//! **Fencing.** A lease carries an epoch that grows with every take-over. Every write for a
//! session ([`Store::put`], [`SessionStore::append`]) names the [`Fence`] (holder and epoch)
//! it is made under, and the store checks it in the write's own transaction: the write goes in
//! only while that holder holds the lease at that epoch and the lease has not run out (by the
//! database's clock); otherwise [`StoreError::Fenced`]. A write with no fence (a host with no
//! shared database, an import, a host running unleased by choice) goes in only while nobody
//! holds a live lease on the session.

#[cfg(feature = "postgres")]
mod postgres;
mod sqlite;

#[cfg(feature = "postgres")]
pub use postgres::PgStore;
pub use sqlite::{SqliteOnFirstUse, SqliteStore};

use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

/// The host's overlay for one Claude session (the transcript itself stays on disk).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    /// The Claude session id.
    pub id: String,
    /// The session URI a client chose, verbatim (`None`: the host's own name for it).
    pub resource: Option<String>,
    /// A title set by the user or the host.
    pub title: Option<String>,
    /// The chosen model.
    pub model: Option<String>,
    /// The chosen reasoning effort.
    pub effort: Option<String>,
    /// The permission mode.
    pub permission_mode: Option<String>,
    /// Working directory.
    pub cwd: String,
    /// Creation time (Unix milliseconds).
    pub created_at: i64,
    /// Last update (Unix milliseconds).
    pub updated_at: i64,
    /// Hidden from default listings.
    pub archived: bool,
    /// Marked read by a client.
    pub read: bool,
    /// The host that last ran the session (its name), when known.
    pub host: Option<String>,
    /// The session's customization decisions (JSON), when a shared store keeps them (a
    /// record without them keeps the stored ones).
    pub decisions: Option<String>,
}

/// Store failures.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be opened.
    #[error("cannot open the session store at {location}: {message}")]
    Open {
        /// Where.
        location: String,
        /// Why.
        message: String,
    },
    /// A migration failed.
    #[error("session store migration {version} failed: {message}")]
    Migration {
        /// The migration.
        version: i64,
        /// Why.
        message: String,
    },
    /// The store was written by a newer claude-host.
    #[error(
        "the session store is at schema version {found}, newer than this claude-host understands ({known}); upgrade claude-host"
    )]
    TooNew {
        /// The database's version.
        found: i64,
        /// The newest this build knows.
        known: i64,
    },
    /// A query failed.
    #[error("session store query failed: {0}")]
    Query(String),
    /// Another host drives the session.
    #[error("session {session_id} is held by {holder} since {since} (until {expires})")]
    Held {
        /// The session.
        session_id: String,
        /// Who holds it.
        holder: String,
        /// Since when (RFC 3339).
        since: String,
        /// When the lease runs out unless renewed (RFC 3339).
        expires: String,
    },
    /// A write for a session was refused: the writer's lease is not the current one (another
    /// host took over, the lease ran out, or was released or changed by hand).
    #[error("write for session {session_id} refused: {reason}")]
    Fenced {
        /// The session.
        session_id: String,
        /// The writer's fence (`None`: an unleased write).
        writer: Option<Fence>,
        /// What the store holds instead.
        reason: String,
    },
    /// A transcript key that would escape its place (`..`, absolute subpaths).
    #[error("invalid transcript key: {0}")]
    InvalidKey(String),
}

/// Session metadata storage.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Inserts or replaces a record, under `fence` (see the crate's *Fencing*).
    async fn put(&self, record: &SessionRecord, fence: Option<&Fence>) -> Result<(), StoreError>;
    /// One record.
    async fn get(&self, id: &str) -> Result<Option<SessionRecord>, StoreError>;
    /// Records, most recently updated first; archived ones only when asked.
    async fn list(&self, include_archived: bool) -> Result<Vec<SessionRecord>, StoreError>;
    /// Removes a record; whether there was one.
    async fn delete(&self, id: &str) -> Result<bool, StoreError>;
}

/// Values every host of a store shares, by key: what is not a session's own but must not
/// differ by host (global customization decisions, per-day usage counts). Unfenced: no one
/// host owns them; a key is written whole (the last write wins).
#[async_trait]
pub trait SharedValues: Send + Sync + 'static {
    /// The value under `key`.
    async fn get_value(&self, key: &str) -> Result<Option<String>, StoreError>;
    /// Sets the value under `key`.
    async fn put_value(&self, key: &str, value: &str) -> Result<(), StoreError>;
    /// Every (key, value) whose key starts with `prefix`, by key.
    async fn values_under(&self, prefix: &str) -> Result<Vec<(String, String)>, StoreError>;
}

/// Schema migrations, applied in order; the index + 1 is the schema version.
pub(crate) const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/0001_sessions.sql"),
    include_str!("../migrations/0002_resource_and_read.sql"),
    include_str!("../migrations/0003_transcripts_and_leases.sql"),
    include_str!("../migrations/0004_lease_epochs.sql"),
    include_str!("../migrations/0005_session_decisions.sql"),
    include_str!("../migrations/0006_shared_values.sql"),
];

/// PostgreSQL schema migrations, applied in order; the index + 1 is the schema version.
#[cfg(feature = "postgres")]
pub(crate) const PG_MIGRATIONS: &[&str] = &[
    include_str!("../migrations/postgres/0001_schema.sql"),
    include_str!("../migrations/postgres/0002_lease_epochs.sql"),
    include_str!("../migrations/postgres/0003_session_decisions.sql"),
    include_str!("../migrations/postgres/0004_shared_values.sql"),
];

pub(crate) fn held(session_id: &str, holder: String, since: i64, expires: i64) -> StoreError {
    StoreError::Held {
        session_id: session_id.to_owned(),
        holder,
        since: rfc3339(since),
        expires: rfc3339(expires),
    }
}

pub(crate) use claude_host_protocol::time::now_millis as now_ms;

fn rfc3339(ms: i64) -> String {
    claude_host_protocol::time::rfc3339_from_millis(ms)
}

/// Where a transcript lives: the project (the slug of the session's working directory, as
/// Claude Code names its `projects/` folder), the session, and for a subagent's transcript its
/// subpath below the session (`subagents/agent-<id>`); `None` is the main transcript.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TranscriptKey {
    /// The project key (Claude Code's slug of the working directory).
    pub project_key: String,
    /// The Claude session id.
    pub session_id: String,
    /// Below the session, for subagent transcripts.
    pub subpath: Option<String>,
}

impl TranscriptKey {
    /// The main transcript of a session.
    pub fn main(project_key: &str, session_id: &str) -> TranscriptKey {
        TranscriptKey {
            project_key: project_key.to_owned(),
            session_id: session_id.to_owned(),
            subpath: None,
        }
    }

    /// Refuses keys that could name a place outside their session when materialised as files.
    pub fn validate(&self) -> Result<(), StoreError> {
        let bad_part = |p: &str| p.is_empty() || p == "." || p == ".." || p.contains(['\\', '\0']);
        let ok = !bad_part(&self.project_key)
            && !self.project_key.contains('/')
            && !bad_part(&self.session_id)
            && !self.session_id.contains('/')
            && self
                .subpath
                .as_deref()
                .is_none_or(|s| !s.starts_with('/') && s.split('/').all(|p| !bad_part(p)));
        if ok {
            Ok(())
        } else {
            Err(StoreError::InvalidKey(format!("{self:?}")))
        }
    }

    pub(crate) fn subpath_col(&self) -> &str {
        self.subpath.as_deref().unwrap_or("")
    }
}

/// One session in a project's listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSession {
    /// The Claude session id.
    pub session_id: String,
    /// When its main transcript last grew (Unix milliseconds).
    pub mtime: i64,
}

/// The `uuid` of a transcript line, Claude Code's idempotency key for an entry.
pub(crate) fn entry_uuid(line: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Head {
        uuid: Option<String>,
    }
    serde_json::from_str::<Head>(line).ok()?.uuid
}

/// Transcripts, kept as Claude Code writes them (the Claude Agent SDK's `SessionStore`).
#[async_trait]
pub trait SessionStore: Send + Sync + 'static {
    /// Appends `entries` (JSON lines, in order) to `key`'s transcript as one batch: the batch
    /// stays contiguous and in order; an entry whose `uuid` is already stored under the key is
    /// skipped. Returns how many were stored. Made under `fence` (see the crate's *Fencing*):
    /// a refused batch stores nothing.
    async fn append(
        &self,
        key: &TranscriptKey,
        entries: &[String],
        fence: Option<&Fence>,
    ) -> Result<u64, StoreError>;
    /// The transcript in append order; `None` when nothing is stored under the key.
    async fn load(&self, key: &TranscriptKey) -> Result<Option<Vec<String>>, StoreError>;
    /// The project's sessions (main transcripts), most recently changed first.
    async fn list_sessions(&self, project_key: &str) -> Result<Vec<StoredSession>, StoreError>;
    /// Removes the transcript; a main key takes its subkeys with it.
    async fn delete(&self, key: &TranscriptKey) -> Result<(), StoreError>;
    /// The subpaths stored below a session.
    async fn list_subkeys(
        &self,
        project_key: &str,
        session_id: &str,
    ) -> Result<Vec<String>, StoreError>;
    /// How many entries are stored under the key (to catch up from a local file).
    async fn count(&self, key: &TranscriptKey) -> Result<u64, StoreError>;
    /// The project a session's main transcript is stored under, if any.
    async fn project_of(&self, session_id: &str) -> Result<Option<String>, StoreError>;
}

/// A session's lease: who drives it, until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The session.
    pub session_id: String,
    /// The holder's name.
    pub holder: String,
    /// When it was taken (Unix milliseconds).
    pub acquired_at: i64,
    /// When it runs out unless renewed (Unix milliseconds).
    pub expires_at: i64,
    /// Grows with every take-over: the writes of an earlier holder are refused.
    pub epoch: i64,
}

impl Lease {
    /// What the holder's writes carry.
    pub fn fence(&self) -> Fence {
        Fence {
            holder: self.holder.clone(),
            epoch: self.epoch,
        }
    }
}

/// Who writes for a session, under which lease: checked by the store in each write's own
/// transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The lease holder's name.
    pub holder: String,
    /// The lease's epoch when it was taken.
    pub epoch: i64,
}

/// One driver per session: a lease per session with a holder, an epoch and an expiry.
#[async_trait]
pub trait Leases: Send + Sync + 'static {
    /// Takes the session's lease for `ttl`. Free, released or run out: taken at the next
    /// epoch. Already `holder`'s and live: renewed at the same epoch. Otherwise
    /// [`StoreError::Held`] naming who has it.
    async fn acquire(
        &self,
        session_id: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Lease, StoreError>;
    /// Extends the lease `fence` was taken under by `ttl`, only while it is still that one and
    /// live; else [`StoreError::Fenced`] (or [`StoreError::Held`] when another host has it):
    /// the holder must stop driving the session.
    async fn renew(
        &self,
        session_id: &str,
        fence: &Fence,
        ttl: Duration,
    ) -> Result<Lease, StoreError>;
    /// Gives the lease up if it is still the one `fence` was taken under (its epoch is kept,
    /// so the next take-over's is higher).
    async fn release(&self, session_id: &str, fence: &Fence) -> Result<(), StoreError>;
    /// Ends whoever's lease on the session now (`sessions release`): its epoch moves on, so
    /// the holder's next write or renewal is refused and it stops. The lease it ended, if one
    /// was live.
    async fn revoke(&self, session_id: &str) -> Result<Option<Lease>, StoreError>;
    /// Every live lease.
    async fn live(&self) -> Result<Vec<Lease>, StoreError>;
}

/// Why a fenced write may not go in, given the lease row (`None`: no row) and the store's
/// clock; `None` when it may.
pub(crate) fn fence_refusal(
    fence: Option<&Fence>,
    row: Option<(String, i64, i64)>,
    now: i64,
) -> Option<String> {
    match (fence, row) {
        (None, None) => None,
        (None, Some((holder, epoch, expires))) => (expires > now).then(|| {
            format!(
                "{holder} holds the session's lease (epoch {epoch}); an unleased write is refused"
            )
        }),
        (Some(f), None) => Some(format!(
            "the session has no lease, and the writer's (epoch {}) is gone",
            f.epoch
        )),
        (Some(f), Some((holder, epoch, expires))) => {
            if holder != f.holder || epoch != f.epoch {
                Some(format!(
                    "the writer's lease (epoch {}) is not the current one: {holder} at epoch {epoch}",
                    f.epoch
                ))
            } else if expires <= now {
                Some(format!(
                    "the writer's lease (epoch {epoch}) ran out {} ms ago",
                    now - expires
                ))
            } else {
                None
            }
        }
    }
}

pub(crate) fn fenced(session_id: &str, fence: Option<&Fence>, reason: String) -> StoreError {
    tracing::warn!(session = %session_id, writer = ?fence, %reason, "a write for the session was refused by its lease");
    StoreError::Fenced {
        session_id: session_id.to_owned(),
        writer: fence.cloned(),
        reason,
    }
}

/// Everything a host keeps in one database.
#[derive(Clone)]
pub struct Database {
    /// Session metadata.
    pub metadata: Arc<dyn Store>,
    /// Transcripts.
    pub transcripts: Arc<dyn SessionStore>,
    /// Leases.
    pub leases: Arc<dyn Leases>,
    /// Values the hosts share.
    pub shared: Arc<dyn SharedValues>,
    /// Where it is, safe to print (no password).
    pub location: String,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl Database {
    fn from<T: Store + SessionStore + Leases + SharedValues>(
        store: T,
        location: String,
    ) -> Database {
        let store = Arc::new(store);
        Database {
            metadata: store.clone(),
            transcripts: store.clone(),
            leases: store.clone(),
            shared: store,
            location,
        }
    }

    /// Opens `url`: `postgres://…` / `postgresql://…`, or `sqlite://PATH` / a plain path.
    pub async fn open(url: &str) -> Result<Database, StoreError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            #[cfg(feature = "postgres")]
            {
                let store = PgStore::connect(url).await?;
                Ok(Database::from(store, redact(url)))
            }
            #[cfg(not(feature = "postgres"))]
            Err(StoreError::Open {
                location: redact(url),
                message: NO_POSTGRES.to_owned(),
            })
        } else {
            let path = url.strip_prefix("sqlite://").unwrap_or(url);
            let store = SqliteStore::open(std::path::Path::new(path)).await?;
            Ok(Database::from(store, path.to_owned()))
        }
    }
}

/// Why a build without the `postgres` feature refuses a PostgreSQL URL.
#[cfg(not(feature = "postgres"))]
const NO_POSTGRES: &str = "this claude-host was built without PostgreSQL support; the release \
     binaries and the npm package have it, or build with `--features postgres`";

/// `url` without its password (for logs and errors).
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}@{host}{}", redact_query(tail))
        }
        None => format!("{scheme}://{authority}{}", redact_query(tail)),
    }
}

fn redact_query(tail: &str) -> String {
    let Some((path, query)) = tail.split_once('?') else {
        return tail.to_owned();
    };
    let kept: Vec<&str> = query
        .split('&')
        .map(|p| {
            if p.starts_with("password=") {
                "password=***"
            } else {
                p
            }
        })
        .collect();
    format!("{path}?{}", kept.join("&"))
}
