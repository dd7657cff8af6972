//! Host metadata for sessions, behind the [`Store`] trait. The default is an embedded SQLite
//! file under the claude-host data directory; PostgreSQL (for teams) will implement the same
//! trait.

mod sqlite;

pub use sqlite::SqliteStore;

use async_trait::async_trait;

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
}

/// Session metadata storage.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Inserts or replaces a record.
    async fn put(&self, record: &SessionRecord) -> Result<(), StoreError>;
    /// One record.
    async fn get(&self, id: &str) -> Result<Option<SessionRecord>, StoreError>;
    /// Records, most recently updated first; archived ones only when asked.
    async fn list(&self, include_archived: bool) -> Result<Vec<SessionRecord>, StoreError>;
    /// Removes a record; whether there was one.
    async fn delete(&self, id: &str) -> Result<bool, StoreError>;
}

/// Schema migrations, applied in order; the index + 1 is the schema version.
pub(crate) const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/0001_sessions.sql"),
    include_str!("../migrations/0002_resource_and_read.sql"),
];
