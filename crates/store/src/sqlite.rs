//! The embedded SQLite store.

use crate::{
    Fence, Lease, Leases, MIGRATIONS, SessionRecord, SessionStore, Store, StoreError,
    StoredSession, TranscriptKey, entry_uuid, now_ms,
};
use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::{Connection, Row, SqliteConnection, SqlitePool as Pool};
use std::path::Path;
use std::str::FromStr;

/// Sessions in a SQLite file (WAL mode, created with its directory on first use).
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: Pool,
}

fn q(e: sqlx::Error) -> StoreError {
    StoreError::Query(e.to_string())
}

impl SqliteStore {
    /// Opens (or creates) the database file and brings its schema up to date.
    pub async fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let open_err = |message: String| StoreError::Open {
            location: path.display().to_string(),
            message,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| open_err(e.to_string()))?;
        }
        // Titles are first prompts: the file is the user's alone. SQLite gives its -wal and
        // -shm files the database file's mode, so they follow.
        {
            use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| open_err(e.to_string()))?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| open_err(e.to_string()))?;
        }
        let opts = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))
            .map_err(|e| open_err(e.to_string()))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(std::time::Duration::from_secs(5));
        // Migrated on one connection before the pool opens: a pooled connection that loaded
        // the schema before a migration would prepare `SELECT *` against the old columns.
        let mut conn = SqliteConnection::connect_with(&opts)
            .await
            .map_err(|e| open_err(e.to_string()))?;
        migrate(&mut conn).await?;
        conn.close().await.map_err(|e| open_err(e.to_string()))?;
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(opts)
            .await
            .map_err(|e| open_err(e.to_string()))?;
        Ok(SqliteStore { pool })
    }

    /// The schema version in the file.
    pub async fn schema_version(&self) -> Result<i64, StoreError> {
        let row = sqlx::query("PRAGMA user_version")
            .fetch_one(&self.pool)
            .await
            .map_err(q)?;
        row.try_get::<i64, _>(0).map_err(q)
    }
}

async fn migrate(conn: &mut SqliteConnection) -> Result<(), StoreError> {
    let row = sqlx::query("PRAGMA user_version")
        .fetch_one(&mut *conn)
        .await
        .map_err(q)?;
    let current = row.try_get::<i64, _>(0).map_err(q)?;
    let known = MIGRATIONS.len() as i64;
    if current > known {
        return Err(StoreError::TooNew {
            found: current,
            known,
        });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let version = i as i64 + 1;
        let fail = |e: sqlx::Error| StoreError::Migration {
            version,
            message: e.to_string(),
        };
        // One transaction per migration: a failed one leaves the previous schema intact.
        let mut tx = conn.begin().await.map_err(fail)?;
        sqlx::raw_sql(*sql).execute(&mut *tx).await.map_err(fail)?;
        // The version is an integer this code computed, not input.
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "PRAGMA user_version = {version}"
        )))
        .execute(&mut *tx)
        .await
        .map_err(fail)?;
        tx.commit().await.map_err(fail)?;
        tracing::info!(version, "session store migrated");
    }
    Ok(())
}

fn record(row: &sqlx::sqlite::SqliteRow) -> Result<SessionRecord, StoreError> {
    Ok(SessionRecord {
        id: row.try_get("id").map_err(q)?,
        resource: row.try_get("resource").map_err(q)?,
        title: row.try_get("title").map_err(q)?,
        model: row.try_get("model").map_err(q)?,
        effort: row.try_get("effort").map_err(q)?,
        permission_mode: row.try_get("permission_mode").map_err(q)?,
        cwd: row.try_get("cwd").map_err(q)?,
        created_at: row.try_get("created_at").map_err(q)?,
        updated_at: row.try_get("updated_at").map_err(q)?,
        archived: row.try_get::<i64, _>("archived").map_err(q)? != 0,
        read: row.try_get::<i64, _>("read").map_err(q)? != 0,
        host: row.try_get("host").map_err(q)?,
        decisions: row.try_get("decisions").map_err(q)?,
    })
}

/// A [`SqliteStore`] opened at its first use, for a process that may never need one (an
/// editor starts `claude-host acp` per window, and many windows open no session): until then
/// none of SQLite's code or memory is touched. A failed open is returned to that use and tried
/// again by the next.
#[derive(Debug)]
pub struct SqliteOnFirstUse {
    path: std::path::PathBuf,
    store: tokio::sync::OnceCell<SqliteStore>,
}

impl SqliteOnFirstUse {
    /// A store for the database at `path`, not opened yet.
    pub fn new(path: &Path) -> SqliteOnFirstUse {
        SqliteOnFirstUse {
            path: path.to_owned(),
            store: tokio::sync::OnceCell::new(),
        }
    }

    async fn opened(&self) -> Result<&SqliteStore, StoreError> {
        self.store
            .get_or_try_init(|| SqliteStore::open(&self.path))
            .await
    }
}

#[async_trait]
impl Store for SqliteOnFirstUse {
    async fn put(&self, record: &SessionRecord, fence: Option<&Fence>) -> Result<(), StoreError> {
        self.opened().await?.put(record, fence).await
    }

    async fn get(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        self.opened().await?.get(id).await
    }

    async fn list(&self, include_archived: bool) -> Result<Vec<SessionRecord>, StoreError> {
        self.opened().await?.list(include_archived).await
    }

    async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        Store::delete(self.opened().await?, id).await
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn put(&self, r: &SessionRecord, fence: Option<&Fence>) -> Result<(), StoreError> {
        // The write first, then the check, in one transaction: the write takes SQLite's one
        // write lock at once (a read first would have to upgrade, which fails when another
        // writer went in between), and a refusal rolls it back.
        let mut tx = self.pool.begin().await.map_err(q)?;
        sqlx::query(
            "INSERT INTO sessions (id, title, model, effort, permission_mode, cwd, created_at, updated_at, archived, resource, read, host, decisions)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (id) DO UPDATE SET host = COALESCE(excluded.host, sessions.host),
               decisions = COALESCE(excluded.decisions, sessions.decisions), resource = excluded.resource, read = excluded.read, title = excluded.title, model = excluded.model,
               effort = excluded.effort, permission_mode = excluded.permission_mode, cwd = excluded.cwd,
               updated_at = excluded.updated_at, archived = excluded.archived",
        )
        .bind(&r.id)
        .bind(&r.title)
        .bind(&r.model)
        .bind(&r.effort)
        .bind(&r.permission_mode)
        .bind(&r.cwd)
        .bind(r.created_at)
        .bind(r.updated_at)
        .bind(i64::from(r.archived))
        .bind(&r.resource)
        .bind(i64::from(r.read))
        .bind(&r.host)
        .bind(&r.decisions)
        .execute(&mut *tx)
        .await
        .map_err(q)?;
        check_fence(&mut tx, &r.id, fence).await?;
        tx.commit().await.map_err(q)?;
        Ok(())
    }

    async fn get(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let row = sqlx::query("SELECT * FROM sessions WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(q)?;
        row.as_ref().map(record).transpose()
    }

    async fn list(&self, include_archived: bool) -> Result<Vec<SessionRecord>, StoreError> {
        let rows =
            sqlx::query("SELECT * FROM sessions WHERE archived = 0 OR ? ORDER BY updated_at DESC")
                .bind(include_archived)
                .fetch_all(&self.pool)
                .await
                .map_err(q)?;
        rows.iter().map(record).collect()
    }

    async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM sessions WHERE id = ?")
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(q)?;
        Ok(done.rows_affected() > 0)
    }
}

#[async_trait]
impl SessionStore for SqliteStore {
    async fn append(
        &self,
        key: &TranscriptKey,
        entries: &[String],
        fence: Option<&Fence>,
    ) -> Result<u64, StoreError> {
        key.validate()?;
        if entries.is_empty() {
            return Ok(0);
        }
        let now = now_ms();
        // One transaction: SQLite has one writer, so the batch is contiguous and in order.
        // The writes first, then the check (see `put`); a refusal rolls them back.
        let mut tx = self.pool.begin().await.map_err(q)?;
        let mut stored = 0;
        for line in entries {
            let done = sqlx::query(
                "INSERT INTO transcript_entries (project_key, session_id, subpath, uuid, entry, stored_at)
                 VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            )
            .bind(&key.project_key)
            .bind(&key.session_id)
            .bind(key.subpath_col())
            .bind(entry_uuid(line))
            .bind(line)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(q)?;
            stored += done.rows_affected();
        }
        check_fence(&mut tx, &key.session_id, fence).await?;
        tx.commit().await.map_err(q)?;
        Ok(stored)
    }

    async fn load(&self, key: &TranscriptKey) -> Result<Option<Vec<String>>, StoreError> {
        key.validate()?;
        let rows = sqlx::query(
            "SELECT entry FROM transcript_entries WHERE project_key = ? AND session_id = ? AND subpath = ? ORDER BY id",
        )
        .bind(&key.project_key)
        .bind(&key.session_id)
        .bind(key.subpath_col())
        .fetch_all(&self.pool)
        .await
        .map_err(q)?;
        if rows.is_empty() {
            return Ok(None);
        }
        rows.iter()
            .map(|r| r.try_get::<String, _>(0).map_err(q))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    async fn list_sessions(&self, project_key: &str) -> Result<Vec<StoredSession>, StoreError> {
        let rows = sqlx::query(
            "SELECT session_id, MAX(stored_at) AS mtime FROM transcript_entries
             WHERE project_key = ? AND subpath = '' GROUP BY session_id ORDER BY mtime DESC, session_id",
        )
        .bind(project_key)
        .fetch_all(&self.pool)
        .await
        .map_err(q)?;
        rows.iter()
            .map(|r| {
                Ok(StoredSession {
                    session_id: r.try_get("session_id").map_err(q)?,
                    mtime: r.try_get("mtime").map_err(q)?,
                })
            })
            .collect()
    }

    async fn delete(&self, key: &TranscriptKey) -> Result<(), StoreError> {
        key.validate()?;
        // A main key takes its subkeys with it.
        sqlx::query(
            "DELETE FROM transcript_entries WHERE project_key = ? AND session_id = ? AND (? OR subpath = ?)",
        )
        .bind(&key.project_key)
        .bind(&key.session_id)
        .bind(key.subpath.is_none())
        .bind(key.subpath_col())
        .execute(&self.pool)
        .await
        .map_err(q)?;
        Ok(())
    }

    async fn list_subkeys(
        &self,
        project_key: &str,
        session_id: &str,
    ) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(
            "SELECT DISTINCT subpath FROM transcript_entries
             WHERE project_key = ? AND session_id = ? AND subpath <> '' ORDER BY subpath",
        )
        .bind(project_key)
        .bind(session_id)
        .fetch_all(&self.pool)
        .await
        .map_err(q)?;
        rows.iter()
            .map(|r| r.try_get::<String, _>(0).map_err(q))
            .collect()
    }

    async fn count(&self, key: &TranscriptKey) -> Result<u64, StoreError> {
        let row = sqlx::query(
            "SELECT COUNT(*) FROM transcript_entries WHERE project_key = ? AND session_id = ? AND subpath = ?",
        )
        .bind(&key.project_key)
        .bind(&key.session_id)
        .bind(key.subpath_col())
        .fetch_one(&self.pool)
        .await
        .map_err(q)?;
        Ok(row.try_get::<i64, _>(0).map_err(q)?.unsigned_abs())
    }

    async fn project_of(&self, session_id: &str) -> Result<Option<String>, StoreError> {
        let row = sqlx::query(
            "SELECT project_key FROM transcript_entries WHERE session_id = ? AND subpath = '' ORDER BY id DESC LIMIT 1",
        )
        .bind(session_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(q)?;
        row.map(|r| r.try_get::<String, _>(0).map_err(q))
            .transpose()
    }
}

/// Checks `fence` against the session's lease inside the write's transaction (SQLite has one
/// writer: a take-over commits before the check or after the write).
async fn check_fence(
    tx: &mut sqlx::SqliteConnection,
    session_id: &str,
    fence: Option<&Fence>,
) -> Result<(), StoreError> {
    let row =
        sqlx::query("SELECT holder, epoch, expires_at FROM session_leases WHERE session_id = ?")
            .bind(session_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(q)?;
    let lease = row
        .map(|r| -> Result<_, StoreError> {
            Ok((
                r.try_get("holder").map_err(q)?,
                r.try_get("epoch").map_err(q)?,
                r.try_get("expires_at").map_err(q)?,
            ))
        })
        .transpose()?;
    match crate::fence_refusal(fence, lease, now_ms()) {
        None => Ok(()),
        Some(reason) => Err(crate::fenced(session_id, fence, reason)),
    }
}

fn lease_of(session_id: &str, row: &sqlx::sqlite::SqliteRow) -> Result<Lease, StoreError> {
    Ok(Lease {
        session_id: session_id.to_owned(),
        holder: row.try_get("holder").map_err(q)?,
        acquired_at: row.try_get("acquired_at").map_err(q)?,
        expires_at: row.try_get("expires_at").map_err(q)?,
        epoch: row.try_get("epoch").map_err(q)?,
    })
}

fn ttl_ms(ttl: std::time::Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2)
}

#[async_trait]
impl Leases for SqliteStore {
    async fn acquire(
        &self,
        session_id: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Result<Lease, StoreError> {
        let now = now_ms();
        let expires = now.saturating_add(ttl_ms(ttl));
        // `excluded.acquired_at` is now; a live lease of the same holder is renewed at its
        // epoch, anything else taken at the next one.
        let taken = sqlx::query(
            "INSERT INTO session_leases (session_id, holder, acquired_at, expires_at, epoch) VALUES (?, ?, ?, ?, 1)
             ON CONFLICT (session_id) DO UPDATE SET
               epoch = CASE WHEN session_leases.holder = excluded.holder AND session_leases.expires_at > excluded.acquired_at
                 THEN session_leases.epoch ELSE session_leases.epoch + 1 END,
               acquired_at = CASE WHEN session_leases.holder = excluded.holder AND session_leases.expires_at > excluded.acquired_at
                 THEN session_leases.acquired_at ELSE excluded.acquired_at END,
               holder = excluded.holder, expires_at = excluded.expires_at
             WHERE session_leases.holder = excluded.holder OR session_leases.expires_at <= excluded.acquired_at
             RETURNING holder, acquired_at, expires_at, epoch",
        )
        .bind(session_id)
        .bind(holder)
        .bind(now)
        .bind(expires)
        .fetch_optional(&self.pool)
        .await
        .map_err(q)?;
        if let Some(row) = taken {
            return lease_of(session_id, &row);
        }
        let row = sqlx::query(
            "SELECT holder, acquired_at, expires_at FROM session_leases WHERE session_id = ?",
        )
        .bind(session_id)
        .fetch_one(&self.pool)
        .await
        .map_err(q)?;
        Err(crate::held(
            session_id,
            row.try_get("holder").map_err(q)?,
            row.try_get("acquired_at").map_err(q)?,
            row.try_get("expires_at").map_err(q)?,
        ))
    }

    async fn renew(
        &self,
        session_id: &str,
        fence: &Fence,
        ttl: std::time::Duration,
    ) -> Result<Lease, StoreError> {
        let now = now_ms();
        let renewed = sqlx::query(
            "UPDATE session_leases SET expires_at = ?
             WHERE session_id = ? AND holder = ? AND epoch = ? AND expires_at > ?
             RETURNING holder, acquired_at, expires_at, epoch",
        )
        .bind(now.saturating_add(ttl_ms(ttl)))
        .bind(session_id)
        .bind(&fence.holder)
        .bind(fence.epoch)
        .bind(now)
        .fetch_optional(&self.pool)
        .await
        .map_err(q)?;
        if let Some(row) = renewed {
            return lease_of(session_id, &row);
        }
        let row = sqlx::query(
            "SELECT holder, acquired_at, expires_at, epoch FROM session_leases WHERE session_id = ?",
        )
        .bind(session_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(q)?;
        let Some(row) = row else {
            return Err(crate::fenced(
                session_id,
                Some(fence),
                "the session has no lease".to_owned(),
            ));
        };
        let other = lease_of(session_id, &row)?;
        let now = now_ms();
        if other.holder != fence.holder && other.expires_at > now {
            return Err(crate::held(
                session_id,
                other.holder,
                other.acquired_at,
                other.expires_at,
            ));
        }
        let reason = crate::fence_refusal(
            Some(fence),
            Some((other.holder, other.epoch, other.expires_at)),
            now,
        )
        .unwrap_or_else(|| "the lease changed while it was renewed".to_owned());
        Err(crate::fenced(session_id, Some(fence), reason))
    }

    async fn release(&self, session_id: &str, fence: &Fence) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE session_leases SET expires_at = MIN(expires_at, ?)
             WHERE session_id = ? AND holder = ? AND epoch = ?",
        )
        .bind(now_ms())
        .bind(session_id)
        .bind(&fence.holder)
        .bind(fence.epoch)
        .execute(&self.pool)
        .await
        .map_err(q)?;
        Ok(())
    }

    async fn revoke(&self, session_id: &str) -> Result<Option<Lease>, StoreError> {
        let now = now_ms();
        let mut tx = self.pool.begin().await.map_err(q)?;
        let row = sqlx::query(
            "SELECT holder, acquired_at, expires_at, epoch FROM session_leases WHERE session_id = ?",
        )
        .bind(session_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(q)?;
        let Some(row) = row else {
            return Ok(None);
        };
        let old = lease_of(session_id, &row)?;
        sqlx::query(
            "UPDATE session_leases SET epoch = epoch + 1, expires_at = MIN(expires_at, ?) WHERE session_id = ?",
        )
        .bind(now)
        .bind(session_id)
        .execute(&mut *tx)
        .await
        .map_err(q)?;
        tx.commit().await.map_err(q)?;
        Ok((old.expires_at > now).then_some(old))
    }

    async fn live(&self) -> Result<Vec<Lease>, StoreError> {
        let rows = sqlx::query(
            "SELECT session_id, holder, acquired_at, expires_at, epoch FROM session_leases
             WHERE expires_at > ? ORDER BY session_id",
        )
        .bind(now_ms())
        .fetch_all(&self.pool)
        .await
        .map_err(q)?;
        rows.iter()
            .map(|r| lease_of(&r.try_get::<String, _>("session_id").map_err(q)?, r))
            .collect()
    }
}

#[async_trait]
impl crate::SharedValues for SqliteStore {
    async fn get_value(&self, key: &str) -> Result<Option<String>, StoreError> {
        let row = sqlx::query("SELECT value FROM shared_values WHERE key = ?1")
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(q)?;
        row.map(|r| r.try_get::<String, _>("value").map_err(q))
            .transpose()
    }

    async fn put_value(&self, key: &str, value: &str) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO shared_values (key, value, updated_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        )
        .bind(key)
        .bind(value)
        .bind(claude_host_protocol::time::now_millis())
        .execute(&self.pool)
        .await
        .map_err(q)?;
        Ok(())
    }

    async fn values_under(&self, prefix: &str) -> Result<Vec<(String, String)>, StoreError> {
        // Not LIKE: a prefix may hold `%` or `_`.
        let rows = sqlx::query(
            "SELECT key, value FROM shared_values WHERE substr(key, 1, length(?1)) = ?1 ORDER BY key",
        )
        .bind(prefix)
        .fetch_all(&self.pool)
        .await
        .map_err(q)?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get::<String, _>("key").map_err(q)?,
                    r.try_get::<String, _>("value").map_err(q)?,
                ))
            })
            .collect()
    }
}
