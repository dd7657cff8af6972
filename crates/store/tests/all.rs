//! The stores on real files and a real PostgreSQL server.

// Test helpers outside #[test] functions panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use claude_host_store::{SessionRecord, SqliteStore, Store, StoreError};

mod suite;

pub(crate) fn rec(id: &str, updated: i64) -> SessionRecord {
    SessionRecord {
        id: id.into(),
        resource: Some(format!("ahp-session:/{id}")),
        title: Some(format!("title {id}")),
        model: Some("claude-opus-5-5".into()),
        effort: None,
        permission_mode: Some("default".into()),
        cwd: "/work".into(),
        created_at: 1,
        updated_at: updated,
        archived: false,
        read: false,
        host: None,
        decisions: None,
    }
}

#[tokio::test]
async fn put_get_list_archive_delete_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/host.sqlite");
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.schema_version().await.unwrap(), 6);
    store.put(&rec("a", 10), None).await.unwrap();
    store.put(&rec("b", 20), None).await.unwrap();
    let mut c = rec("c", 30);
    c.archived = true;
    store.put(&c, None).await.unwrap();
    let ids: Vec<String> = store
        .list(false)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(ids, ["b", "a"]);
    assert_eq!(store.list(true).await.unwrap().len(), 3);
    // Upsert keeps created_at, replaces the rest.
    let mut a2 = rec("a", 40);
    a2.created_at = 999;
    a2.title = None;
    store.put(&a2, None).await.unwrap();
    let a = store.get("a").await.unwrap().unwrap();
    assert_eq!((a.created_at, a.updated_at, a.title), (1, 40, None));
    assert!(store.delete("b").await.unwrap());
    assert!(!store.delete("b").await.unwrap());
    drop(store);
    // Reopening keeps the data and does not re-run migrations.
    let store = SqliteStore::open(&path).await.unwrap();
    assert!(store.get("c").await.unwrap().unwrap().archived);
    assert_eq!(store.schema_version().await.unwrap(), 6);
}

#[tokio::test]
async fn a_newer_schema_is_refused_and_garbage_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sqlite");
    let store = SqliteStore::open(&path).await.unwrap();
    drop(store);
    let conn = bump_schema_version(&path).await;
    assert!(conn);
    let err = SqliteStore::open(&path).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::TooNew {
                found: 99,
                known: 6
            }
        ),
        "{err}"
    );
    let junk = dir.path().join("junk.sqlite");
    std::fs::write(&junk, b"this is not a database, not at all, really not").unwrap();
    let err = SqliteStore::open(&junk).await.unwrap_err();
    assert!(err.to_string().contains("junk.sqlite"), "{err}");
}

/// Sets the schema version to 99 through a plain connection, as a newer claude-host would.
async fn bump_schema_version(path: &std::path::Path) -> bool {
    use sqlx::Connection;
    let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    sqlx::raw_sql("PRAGMA user_version = 99")
        .execute(&mut c)
        .await
        .is_ok()
}

#[tokio::test]
async fn a_version_1_file_is_upgraded_in_place_and_keeps_its_rows() {
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.sqlite");
    {
        let mut c =
            sqlx::SqliteConnection::connect(&format!("sqlite://{}?mode=rwc", path.display()))
                .await
                .unwrap();
        sqlx::raw_sql(include_str!("../migrations/0001_sessions.sql"))
            .execute(&mut c)
            .await
            .unwrap();
        sqlx::raw_sql(
            "PRAGMA user_version = 1;
             INSERT INTO sessions (id, title, cwd, created_at, updated_at) VALUES ('old', 'Old one', '/w', 1, 2);",
        )
        .execute(&mut c)
        .await
        .unwrap();
    }
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.schema_version().await.unwrap(), 6);
    // Every pooled connection sees the new columns (none loaded the old schema).
    let lists = tokio::join!(
        store.list(true),
        store.list(true),
        store.list(true),
        store.list(true)
    );
    for l in [lists.0, lists.1, lists.2, lists.3] {
        assert_eq!(l.unwrap()[0].resource, None);
    }
    let old = store.get("old").await.unwrap().unwrap();
    assert_eq!(old.title.as_deref(), Some("Old one"));
    assert_eq!(old.resource, None, "named by the host");
    let mut named = rec("new", 3);
    named.resource = Some("claude:/new".into());
    named.read = true;
    store.put(&named, None).await.unwrap();
    let back = store.get("new").await.unwrap().unwrap();
    assert_eq!(back.resource.as_deref(), Some("claude:/new"));
    assert!(back.read);
    assert!(!old.read, "unread until marked");
}

/// A build without PostgreSQL says so for a PostgreSQL URL, without the password and without
/// touching the network.
#[cfg(not(feature = "postgres"))]
#[tokio::test]
async fn a_build_without_postgres_refuses_its_urls_plainly() {
    let err = claude_host_store::Database::open("postgres://me:s3cret@127.0.0.1:1/db")
        .await
        .err()
        .unwrap();
    let text = err.to_string();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
    assert!(text.contains("built without PostgreSQL support"), "{text}");
    assert!(text.contains("--features postgres"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
}
