//! The PostgreSQL store, for hosts that share sessions.

use crate::{
    Fence, Lease, Leases, PG_MIGRATIONS, SessionRecord, SessionStore, Store, StoreError,
    StoredSession, TranscriptKey, entry_uuid, now_ms, redact,
};
use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool, Row};
use std::str::FromStr;
use std::time::Duration;

/// Sessions in a PostgreSQL database (schema created and migrated on first use).
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
}

fn q(e: sqlx::Error) -> StoreError {
    StoreError::Query(e.to_string())
}

/// What went wrong connecting, in words a user can act on (never the password).
fn connect_error(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            match code.as_ref() {
                "28P01" | "28000" => format!("authentication failed ({})", db.message()),
                "3D000" => format!("no such database ({})", db.message()),
                _ => db.message().to_owned(),
            }
        }
        sqlx::Error::Io(io) => format!("cannot reach the server: {io}"),
        sqlx::Error::PoolTimedOut => "timed out connecting to the server".to_owned(),
        sqlx::Error::Configuration(c) => format!("invalid URL: {c}"),
        other => other.to_string(),
    }
}

impl PgStore {
    /// Connects to `url` (`postgres://user:password@host:port/db`) and brings the schema up to
    /// date. The URL's password never appears in an error.
    pub async fn connect(url: &str) -> Result<PgStore, StoreError> {
        let location = redact(url);
        let open_err = |message: String| StoreError::Open {
            location: location.clone(),
            message,
        };
        let opts = PgConnectOptions::from_str(url)
            .map_err(|e| open_err(format!("invalid URL: {}", scrub(&e.to_string(), url))))?
            .application_name("claude-host")
            // A write's transaction holds the session's lease row (for share) until it ends; a
            // host cut off mid-transaction must not keep another host from taking the lease
            // over for longer than this.
            .options([("idle_in_transaction_session_timeout", "5s")]);
        let mut conn =
            tokio::time::timeout(Duration::from_secs(10), PgConnection::connect_with(&opts))
                .await
                .map_err(|_| open_err("timed out connecting to the server (10 s)".to_owned()))?
                .map_err(|e| open_err(scrub(&connect_error(&e), url)))?;
        migrate(&mut conn).await?;
        conn.close().await.map_err(|e| open_err(e.to_string()))?;
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(opts)
            .await
            .map_err(|e| open_err(scrub(&connect_error(&e), url)))?;
        Ok(PgStore { pool })
    }

    /// The schema version of the database.
    pub async fn schema_version(&self) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT version FROM claude_host_schema")
            .fetch_one(&self.pool)
            .await
            .map_err(q)?;
        row.try_get::<i32, _>(0).map(i64::from).map_err(q)
    }
}

/// `text` with any copy of the URL's password (as written, and percent-decoded) removed.
fn scrub(text: &str, url: &str) -> String {
    let mut out = text.to_owned();
    for p in url_passwords(url) {
        out = out.replace(&p, "***");
    }
    out
}

/// The password in a URL's user info or `password=` query parameter, raw and decoded.
fn url_passwords(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    if let Some((userinfo, _)) = authority.rsplit_once('@')
        && let Some((_, pw)) = userinfo.split_once(':')
    {
        found.push(pw.to_owned());
    }
    if let Some((_, query)) = url.split_once('?') {
        for pair in query.split('&') {
            if let Some(pw) = pair.strip_prefix("password=") {
                found.push(pw.to_owned());
            }
        }
    }
    let decoded: Vec<String> = found.iter().map(|p| percent_decode(p)).collect();
    found.extend(decoded);
    found.retain(|p| !p.is_empty());
    found
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(v) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn migrate(conn: &mut PgConnection) -> Result<(), StoreError> {
    let fail = |version: i64| {
        move |e: sqlx::Error| StoreError::Migration {
            version,
            message: e.to_string(),
        }
    };
    let mut tx = conn.begin().await.map_err(fail(0))?;
    // Two hosts starting at once: the first migrates, the second waits and finds it done.
    sqlx::query("SELECT pg_advisory_xact_lock(7268291447)")
        .execute(&mut *tx)
        .await
        .map_err(fail(0))?;
    sqlx::raw_sql("CREATE TABLE IF NOT EXISTS claude_host_schema (version INTEGER NOT NULL)")
        .execute(&mut *tx)
        .await
        .map_err(fail(0))?;
    let current = sqlx::query("SELECT version FROM claude_host_schema")
        .fetch_optional(&mut *tx)
        .await
        .map_err(fail(0))?
        .map(|r| r.try_get::<i32, _>(0))
        .transpose()
        .map_err(fail(0))?
        .map_or(0, i64::from);
    let known = PG_MIGRATIONS.len() as i64;
    if current > known {
        return Err(StoreError::TooNew {
            found: current,
            known,
        });
    }
    for (i, sql) in PG_MIGRATIONS.iter().enumerate().skip(current as usize) {
        let version = i as i64 + 1;
        sqlx::raw_sql(*sql)
            .execute(&mut *tx)
            .await
            .map_err(fail(version))?;
        tracing::info!(version, "PostgreSQL session store migrated");
    }
    if current < known {
        sqlx::query("DELETE FROM claude_host_schema")
            .execute(&mut *tx)
            .await
            .map_err(fail(known))?;
        sqlx::query("INSERT INTO claude_host_schema (version) VALUES ($1)")
            .bind(i32::try_from(known).unwrap_or(i32::MAX))
            .execute(&mut *tx)
            .await
            .map_err(fail(known))?;
    }
    // All migrations in one transaction: a failure leaves the database as it was.
    tx.commit().await.map_err(fail(known))?;
    Ok(())
}

/// The database's clock in Unix milliseconds, as SQL: leases are timed by it alone, so hosts
/// whose clocks disagree still agree on when a lease has run out.
macro_rules! now_ms {
    () => {
        "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT"
    };
}

/// Checks `fence` against the session's lease inside the write's transaction. The lease row is
/// locked for share until the write commits, so a take-over waits for the write, or the write
/// sees the take-over and is refused.
async fn check_fence(
    tx: &mut PgConnection,
    session_id: &str,
    fence: Option<&Fence>,
) -> Result<(), StoreError> {
    let row = sqlx::query(concat!(
        "SELECT holder, epoch, expires_at, ",
        now_ms!(),
        " AS now FROM session_leases WHERE session_id = $1 FOR SHARE"
    ))
    .bind(session_id)
    .fetch_optional(&mut *tx)
    .await
    .map_err(q)?;
    let (lease, now) = match row {
        Some(r) => (
            Some((
                r.try_get("holder").map_err(q)?,
                r.try_get("epoch").map_err(q)?,
                r.try_get("expires_at").map_err(q)?,
            )),
            r.try_get("now").map_err(q)?,
        ),
        None => (None, 0),
    };
    match crate::fence_refusal(fence, lease, now) {
        None => Ok(()),
        Some(reason) => Err(crate::fenced(session_id, fence, reason)),
    }
}

fn lease_of(session_id: &str, row: &sqlx::postgres::PgRow) -> Result<Lease, StoreError> {
    Ok(Lease {
        session_id: session_id.to_owned(),
        holder: row.try_get("holder").map_err(q)?,
        acquired_at: row.try_get("acquired_at").map_err(q)?,
        expires_at: row.try_get("expires_at").map_err(q)?,
        epoch: row.try_get("epoch").map_err(q)?,
    })
}

fn record(row: &sqlx::postgres::PgRow) -> Result<SessionRecord, StoreError> {
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
        archived: row.try_get("archived").map_err(q)?,
        read: row.try_get("read").map_err(q)?,
        host: row.try_get("host").map_err(q)?,
        decisions: row.try_get("decisions").map_err(q)?,
    })
}

#[async_trait]
impl Store for PgStore {
    async fn put(&self, r: &SessionRecord, fence: Option<&Fence>) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(q)?;
        check_fence(&mut tx, &r.id, fence).await?;
        sqlx::query(
            "INSERT INTO sessions (id, title, model, effort, permission_mode, cwd, created_at, updated_at, archived, resource, read, host, decisions)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
             ON CONFLICT (id) DO UPDATE SET host = COALESCE(excluded.host, sessions.host),
               decisions = COALESCE(excluded.decisions, sessions.decisions), resource = excluded.resource,
               read = excluded.read, title = excluded.title, model = excluded.model,
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
        .bind(r.archived)
        .bind(&r.resource)
        .bind(r.read)
        .bind(&r.host)
        .bind(&r.decisions)
        .execute(&mut *tx)
        .await
        .map_err(q)?;
        tx.commit().await.map_err(q)?;
        Ok(())
    }

    async fn get(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let row = sqlx::query("SELECT * FROM sessions WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(q)?;
        row.as_ref().map(record).transpose()
    }

    async fn list(&self, include_archived: bool) -> Result<Vec<SessionRecord>, StoreError> {
        let rows =
            sqlx::query("SELECT * FROM sessions WHERE NOT archived OR $1 ORDER BY updated_at DESC")
                .bind(include_archived)
                .fetch_all(&self.pool)
                .await
                .map_err(q)?;
        rows.iter().map(record).collect()
    }

    async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM sessions WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(q)?;
        Ok(done.rows_affected() > 0)
    }
}

#[async_trait]
impl SessionStore for PgStore {
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
        let uuids: Vec<Option<String>> = entries.iter().map(|e| entry_uuid(e)).collect();
        let mut tx = self.pool.begin().await.map_err(q)?;
        // Appends to one transcript take turns, so each batch's rows get consecutive ids.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
            .bind(format!(
                "{}\u{1f}{}\u{1f}{}",
                key.project_key,
                key.session_id,
                key.subpath_col()
            ))
            .execute(&mut *tx)
            .await
            .map_err(q)?;
        check_fence(&mut tx, &key.session_id, fence).await?;
        let done = sqlx::query(
            "INSERT INTO transcript_entries (project_key, session_id, subpath, uuid, entry, stored_at)
             SELECT $1, $2, $3, t.uuid, t.entry::json, $6
             FROM UNNEST($4::text[], $5::text[]) WITH ORDINALITY AS t(uuid, entry, n)
             ORDER BY t.n
             ON CONFLICT DO NOTHING",
        )
        .bind(&key.project_key)
        .bind(&key.session_id)
        .bind(key.subpath_col())
        .bind(&uuids)
        .bind(entries)
        .bind(now_ms())
        .execute(&mut *tx)
        .await
        .map_err(q)?;
        tx.commit().await.map_err(q)?;
        Ok(done.rows_affected())
    }

    async fn load(&self, key: &TranscriptKey) -> Result<Option<Vec<String>>, StoreError> {
        key.validate()?;
        let rows = sqlx::query(
            "SELECT entry::text FROM transcript_entries
             WHERE project_key = $1 AND session_id = $2 AND subpath = $3 ORDER BY id",
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
             WHERE project_key = $1 AND subpath = '' GROUP BY session_id ORDER BY mtime DESC, session_id",
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
        sqlx::query(
            "DELETE FROM transcript_entries WHERE project_key = $1 AND session_id = $2 AND ($3 OR subpath = $4)",
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
             WHERE project_key = $1 AND session_id = $2 AND subpath <> '' ORDER BY subpath",
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
            "SELECT COUNT(*) FROM transcript_entries WHERE project_key = $1 AND session_id = $2 AND subpath = $3",
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
            "SELECT project_key FROM transcript_entries WHERE session_id = $1 AND subpath = '' ORDER BY id DESC LIMIT 1",
        )
        .bind(session_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(q)?;
        row.map(|r| r.try_get::<String, _>(0).map_err(q))
            .transpose()
    }
}

#[async_trait]
impl Leases for PgStore {
    async fn acquire(
        &self,
        session_id: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Lease, StoreError> {
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2);
        // `excluded.acquired_at` is now; a live lease of the same holder is renewed at its
        // epoch, anything else taken at the next one.
        let taken = sqlx::query(concat!("WITH now AS (SELECT ", now_ms!(), " AS ms)
             INSERT INTO session_leases (session_id, holder, acquired_at, expires_at, epoch)
             SELECT $1, $2, ms, ms + $3, 1 FROM now
             ON CONFLICT (session_id) DO UPDATE SET
               epoch = CASE WHEN session_leases.holder = excluded.holder AND session_leases.expires_at > excluded.acquired_at
                 THEN session_leases.epoch ELSE session_leases.epoch + 1 END,
               acquired_at = CASE WHEN session_leases.holder = excluded.holder AND session_leases.expires_at > excluded.acquired_at
                 THEN session_leases.acquired_at ELSE excluded.acquired_at END,
               holder = excluded.holder, expires_at = excluded.expires_at
             WHERE session_leases.holder = excluded.holder OR session_leases.expires_at <= excluded.acquired_at
             RETURNING holder, acquired_at, expires_at, epoch"))
        .bind(session_id)
        .bind(holder)
        .bind(ttl_ms)
        .fetch_optional(&self.pool)
        .await
        .map_err(q)?;
        if let Some(row) = taken {
            return lease_of(session_id, &row);
        }
        let row = sqlx::query(
            "SELECT holder, acquired_at, expires_at FROM session_leases WHERE session_id = $1",
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
        ttl: Duration,
    ) -> Result<Lease, StoreError> {
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2);
        let renewed = sqlx::query(concat!(
            "UPDATE session_leases SET expires_at = ",
            now_ms!(),
            " + $4
             WHERE session_id = $1 AND holder = $2 AND epoch = $3 AND expires_at > ",
            now_ms!(),
            "
             RETURNING holder, acquired_at, expires_at, epoch"
        ))
        .bind(session_id)
        .bind(&fence.holder)
        .bind(fence.epoch)
        .bind(ttl_ms)
        .fetch_optional(&self.pool)
        .await
        .map_err(q)?;
        if let Some(row) = renewed {
            return lease_of(session_id, &row);
        }
        let mut conn = self.pool.acquire().await.map_err(q)?;
        let row = sqlx::query(concat!(
            "SELECT holder, acquired_at, expires_at, epoch, ",
            now_ms!(),
            " AS now FROM session_leases WHERE session_id = $1"
        ))
        .bind(session_id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(q)?;
        if let Some(r) = &row {
            let other = lease_of(session_id, r)?;
            let now: i64 = r.try_get("now").map_err(q)?;
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
            return Err(crate::fenced(session_id, Some(fence), reason));
        }
        Err(crate::fenced(
            session_id,
            Some(fence),
            "the session has no lease".to_owned(),
        ))
    }

    async fn release(&self, session_id: &str, fence: &Fence) -> Result<(), StoreError> {
        sqlx::query(concat!(
            "UPDATE session_leases SET expires_at = LEAST(expires_at, ",
            now_ms!(),
            ")
             WHERE session_id = $1 AND holder = $2 AND epoch = $3"
        ))
        .bind(session_id)
        .bind(&fence.holder)
        .bind(fence.epoch)
        .execute(&self.pool)
        .await
        .map_err(q)?;
        Ok(())
    }

    async fn revoke(&self, session_id: &str) -> Result<Option<Lease>, StoreError> {
        let mut tx = self.pool.begin().await.map_err(q)?;
        let row = sqlx::query(concat!(
            "SELECT holder, acquired_at, expires_at, epoch, ",
            now_ms!(),
            " AS now FROM session_leases WHERE session_id = $1 FOR UPDATE"
        ))
        .bind(session_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(q)?;
        let Some(row) = row else {
            return Ok(None);
        };
        let old = lease_of(session_id, &row)?;
        let now: i64 = row.try_get("now").map_err(q)?;
        sqlx::query(
            "UPDATE session_leases SET epoch = epoch + 1, expires_at = LEAST(expires_at, $2) WHERE session_id = $1",
        )
        .bind(session_id)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(q)?;
        tx.commit().await.map_err(q)?;
        Ok((old.expires_at > now).then_some(old))
    }

    async fn live(&self) -> Result<Vec<Lease>, StoreError> {
        let rows = sqlx::query(concat!(
            "SELECT session_id, holder, acquired_at, expires_at, epoch FROM session_leases
             WHERE expires_at > ",
            now_ms!(),
            " ORDER BY session_id"
        ))
        .fetch_all(&self.pool)
        .await
        .map_err(q)?;
        rows.iter()
            .map(|r| lease_of(&r.try_get::<String, _>("session_id").map_err(q)?, r))
            .collect()
    }
}

#[async_trait]
impl crate::SharedValues for PgStore {
    async fn get_value(&self, key: &str) -> Result<Option<String>, StoreError> {
        let row = sqlx::query("SELECT value FROM shared_values WHERE key = $1")
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(q)?;
        row.map(|r| r.try_get::<String, _>("value").map_err(q))
            .transpose()
    }

    async fn put_value(&self, key: &str, value: &str) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO shared_values (key, value, updated_at) VALUES ($1, $2, $3)
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
            "SELECT key, value FROM shared_values WHERE substr(key, 1, length($1)) = $1 ORDER BY key",
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
