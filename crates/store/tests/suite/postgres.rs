//! PostgreSQL-only behaviour: bad URLs, wrong passwords, unreachable servers, newer schemas.

use claude_host_store::{Database, PgStore, StoreError};
use claude_host_testkit::pg::{PASSWORD, PgCluster};

fn expect_open_error(r: Result<Database, StoreError>) -> String {
    let e = r.expect_err("must not open").to_string();
    assert!(!e.contains(PASSWORD), "the password never shows: {e}");
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_urls_passwords_and_servers_are_one_clear_line_each() {
    let pg = PgCluster::shared();
    let url = pg.create_database().unwrap();
    let wrong = url.replace(PASSWORD, "not-the-password");
    let bad_password = expect_open_error(Database::open(&wrong).await);
    assert!(
        bad_password.contains("authentication failed"),
        "{bad_password}"
    );
    assert!(!bad_password.contains("not-the-password"), "{bad_password}");
    let no_db = expect_open_error(Database::open(&pg.url("no_such_db")).await);
    assert!(no_db.contains("no_such_db"), "{no_db}");
    // Nothing listens on port 1.
    let unreachable =
        expect_open_error(Database::open(&format!("postgres://u:{PASSWORD}@127.0.0.1:1/db")).await);
    assert!(
        unreachable.contains("cannot reach the server"),
        "{unreachable}"
    );
    let garbled = expect_open_error(Database::open("postgres://u:pw@[::1/db").await);
    assert!(garbled.contains("invalid URL"), "{garbled}");
    for e in [&bad_password, &no_db, &unreachable, &garbled] {
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(
            e.contains("127.0.0.1") || e.contains("[::1"),
            "names the server: {e}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_is_refused_and_changes_nothing() {
    let pg = PgCluster::shared();
    let url = pg.create_database().unwrap();
    let store = PgStore::connect(&url).await.unwrap();
    assert_eq!(store.schema_version().await.unwrap(), 4);
    drop(store);
    let db = url.rsplit('/').next().unwrap().to_owned();
    pg.psql(&db, "UPDATE claude_host_schema SET version = 7")
        .unwrap();
    match PgStore::connect(&url).await {
        Err(StoreError::TooNew { found: 7, known: 4 }) => {}
        other => panic!("{other:?}"),
    }
    pg.psql(&db, "UPDATE claude_host_schema SET version = 4")
        .unwrap();
    // Two hosts starting on a fresh database at once: one migrates, both open.
    let url2 = pg.create_database().unwrap();
    let (a, b) = tokio::join!(PgStore::connect(&url2), PgStore::connect(&url2));
    assert_eq!(a.unwrap().schema_version().await.unwrap(), 4);
    assert_eq!(b.unwrap().schema_version().await.unwrap(), 4);
}
