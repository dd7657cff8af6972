//! The embedded SQLite store.

use crate::{MIGRATIONS, SessionRecord, Store, StoreError};
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
    })
}

#[async_trait]
impl Store for SqliteStore {
    async fn put(&self, r: &SessionRecord) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO sessions (id, title, model, effort, permission_mode, cwd, created_at, updated_at, archived, resource, read)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (id) DO UPDATE SET resource = excluded.resource, read = excluded.read, title = excluded.title, model = excluded.model,
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
        .execute(&self.pool)
        .await
        .map_err(q)?;
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
