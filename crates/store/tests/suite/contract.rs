//! The same contract on both backends: the embedded SQLite file and a real PostgreSQL server.

use claude_host_store::{Database, StoreError, TranscriptKey};
use claude_host_testkit::pg::PgCluster;
use pretty_assertions::assert_eq;
use std::time::Duration;

/// A fresh database of each kind (the temporary directory lives as long as the list).
async fn backends() -> (tempfile::TempDir, Vec<(&'static str, Database)>) {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Database::open(dir.path().join("s.sqlite").to_str().unwrap())
        .await
        .unwrap();
    #[cfg(feature = "postgres")]
    {
        let url = PgCluster::shared().create_database().unwrap();
        let pg = Database::open(&url).await.unwrap();
        (dir, vec![("sqlite", sqlite), ("postgres", pg)])
    }
    #[cfg(not(feature = "postgres"))]
    (dir, vec![("sqlite", sqlite)])
}

fn line(uuid: &str, text: &str) -> String {
    serde_json::json!({"type": "user", "uuid": uuid, "message": {"role": "user", "content": text}})
        .to_string()
}

fn key(project: &str, session: &str, sub: Option<&str>) -> TranscriptKey {
    TranscriptKey {
        project_key: project.into(),
        session_id: session.into(),
        subpath: sub.map(str::to_owned),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_then_load_keeps_order_and_bytes_and_skips_stored_uuids() {
    let (_dir, dbs) = backends().await;
    for (name, db) in dbs {
        let t = &db.transcripts;
        let k = key("-work", "s1", None);
        // Lines with and without uuids, key order and spacing Claude Code's own.
        let batch1 = vec![
            line("u1", "first"),
            r#"{"type":"last-prompt","lastPrompt":"first","leafUuid":"u1","sessionId":"s1"}"#
                .to_owned(),
            line("u2", "tab\tnul\u{0}end"),
        ];
        assert_eq!(t.append(&k, &batch1, None).await.unwrap(), 3, "{name}");
        let batch2 = vec![line("u2", "again"), line("u3", "third")];
        assert_eq!(
            t.append(&k, &batch2, None).await.unwrap(),
            1,
            "{name}: u2 once"
        );
        let loaded = t.load(&k).await.unwrap().unwrap();
        let want = [batch1.clone(), vec![batch2[1].clone()]].concat();
        assert_eq!(loaded, want, "{name}");
        assert_eq!(t.count(&k).await.unwrap(), 4, "{name}");
        assert_eq!(t.project_of("s1").await.unwrap().as_deref(), Some("-work"));
        assert_eq!(t.project_of("nope").await.unwrap(), None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_keys_load_none_and_subpaths_are_isolated() {
    let (_dir, dbs) = backends().await;
    for (name, db) in dbs {
        let t = &db.transcripts;
        assert_eq!(
            t.load(&key("-p", "none", None)).await.unwrap(),
            None,
            "{name}"
        );
        let main = key("-p", "s", None);
        let sub_a = key("-p", "s", Some("subagents/agent-a"));
        let sub_b = key("-p", "s", Some("subagents/agent-b"));
        t.append(&main, &[line("m1", "main")], None).await.unwrap();
        // The same uuid under another subpath is another entry.
        t.append(&sub_a, &[line("m1", "a"), line("a2", "a")], None)
            .await
            .unwrap();
        t.append(&sub_b, &[line("b1", "b")], None).await.unwrap();
        assert_eq!(t.load(&main).await.unwrap().unwrap().len(), 1, "{name}");
        assert_eq!(t.load(&sub_a).await.unwrap().unwrap().len(), 2, "{name}");
        assert_eq!(t.load(&sub_b).await.unwrap().unwrap().len(), 1, "{name}");
        assert_eq!(
            t.load(&key("-other", "s", None)).await.unwrap(),
            None,
            "{name}"
        );
        assert_eq!(
            t.list_subkeys("-p", "s").await.unwrap(),
            ["subagents/agent-a", "subagents/agent-b"],
            "{name}"
        );
        assert!(t.list_subkeys("-p", "none").await.unwrap().is_empty());
        // Keys that would leave their place when written as files are refused.
        for bad in [
            key("-p", "s", Some("../../etc")),
            key("-p", "s", Some("/abs")),
            key("-p", "../s", None),
            key("", "s", None),
        ] {
            assert!(
                matches!(
                    t.append(&bad, &[line("x", "x")], None).await,
                    Err(StoreError::InvalidKey(_))
                ),
                "{name}: {bad:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_listed_by_mtime_and_deleted_in_scope() {
    let (_dir, dbs) = backends().await;
    for (name, db) in dbs {
        let t = &db.transcripts;
        t.append(&key("-p", "old", None), &[line("o", "x")], None)
            .await
            .unwrap();
        // Listing is by the time entries were stored: make the second one later for certain.
        let first_mtime = t.list_sessions("-p").await.unwrap()[0].mtime;
        loop {
            t.append(&key("-p", "new", None), &[line(&uuid(), "x")], None)
                .await
                .unwrap();
            if t.list_sessions("-p").await.unwrap()[0].mtime > first_mtime {
                break;
            }
        }
        t.append(
            &key("-p", "new", Some("subagents/agent-x")),
            &[line("s", "x")],
            None,
        )
        .await
        .unwrap();
        t.append(&key("-q", "elsewhere", None), &[line("e", "x")], None)
            .await
            .unwrap();
        let listed: Vec<String> = t
            .list_sessions("-p")
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.session_id)
            .collect();
        assert_eq!(
            listed,
            ["new", "old"],
            "{name}: newest first, subagents not listed"
        );
        // Deleting a subkey leaves the main transcript; deleting the main key takes subkeys.
        t.delete(&key("-p", "new", Some("subagents/agent-x")))
            .await
            .unwrap();
        assert!(
            t.load(&key("-p", "new", None)).await.unwrap().is_some(),
            "{name}"
        );
        t.append(
            &key("-p", "new", Some("subagents/agent-y")),
            &[line("y", "x")],
            None,
        )
        .await
        .unwrap();
        t.delete(&key("-p", "new", None)).await.unwrap();
        assert_eq!(t.load(&key("-p", "new", None)).await.unwrap(), None);
        assert!(
            t.list_subkeys("-p", "new").await.unwrap().is_empty(),
            "{name}"
        );
        assert!(
            t.load(&key("-p", "old", None)).await.unwrap().is_some(),
            "{name}"
        );
        assert!(
            t.load(&key("-q", "elsewhere", None))
                .await
                .unwrap()
                .is_some()
        );
    }
}

fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_appends_lose_nothing_and_keep_each_batch_in_order() {
    let (_dir, dbs) = backends().await;
    for (name, db) in dbs {
        let k = key("-p", "busy", None);
        let tasks: Vec<_> = (0..1000)
            .map(|b| {
                let t = db.transcripts.clone();
                let k = k.clone();
                tokio::spawn(async move {
                    let batch: Vec<String> =
                        (0..3).map(|i| line(&format!("{b}-{i}"), "x")).collect();
                    t.append(&k, &batch, None).await.unwrap()
                })
            })
            .collect();
        let mut stored = 0;
        for t in tasks {
            stored += t.await.unwrap();
        }
        assert_eq!(stored, 3000, "{name}");
        let loaded = db.transcripts.load(&k).await.unwrap().unwrap();
        assert_eq!(loaded.len(), 3000, "{name}");
        let ids: Vec<String> = loaded
            .iter()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["uuid"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        // Each batch's three entries are consecutive and in order.
        for chunk in ids.chunks(3) {
            let b = chunk[0].split('-').next().unwrap();
            assert_eq!(
                chunk,
                [format!("{b}-0"), format!("{b}-1"), format!("{b}-2")],
                "{name}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_holder_per_session_until_the_lease_runs_out() {
    let (_dir, dbs) = backends().await;
    for (name, db) in dbs {
        let l = &db.leases;
        let a = l
            .acquire("s", "host-a", Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(a.holder, "host-a");
        match l.acquire("s", "host-b", Duration::from_secs(60)).await {
            Err(StoreError::Held { holder, since, .. }) => {
                assert_eq!(holder, "host-a", "{name}");
                assert!(since.ends_with('Z'), "{since}");
            }
            other => panic!("{name}: {other:?}"),
        }
        // The holder renews and keeps its start time.
        let renewed = l
            .acquire("s", "host-a", Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(renewed.acquired_at, a.acquired_at, "{name}");
        assert!(renewed.expires_at >= a.expires_at);
        // An expired lease is taken over.
        l.acquire("t", "host-a", Duration::ZERO).await.unwrap();
        let taken = l
            .acquire("t", "host-b", Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(taken.holder, "host-b", "{name}");
        // Released: free for the next, at a higher epoch.
        l.release("s", &a.fence()).await.unwrap();
        let b = l
            .acquire("s", "host-b", Duration::from_secs(60))
            .await
            .unwrap();
        assert!(b.epoch > a.epoch, "{name}: {b:?} after {a:?}");
        // A release under an old fence does nothing.
        l.release("s", &a.fence()).await.unwrap();
        assert!(
            l.acquire("s", "host-a", Duration::from_secs(60))
                .await
                .is_err(),
            "{name}"
        );
        // Renewing keeps the epoch; a renewal under an old fence says who holds it.
        assert_eq!(
            l.renew("s", &b.fence(), Duration::from_secs(60))
                .await
                .unwrap()
                .epoch,
            b.epoch
        );
        match l.renew("s", &a.fence(), Duration::from_secs(60)).await {
            Err(StoreError::Held { holder, .. }) => assert_eq!(holder, "host-b", "{name}"),
            other => panic!("{name}: {other:?}"),
        }
        let live = l.live().await.unwrap();
        assert!(
            live.iter()
                .any(|x| x.session_id == "s" && x.holder == "host-b"),
            "{name}: {live:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_carry_the_lease_epoch_and_stale_ones_are_refused() {
    let (_dir, dbs) = backends().await;
    for (name, db) in dbs {
        let (l, t) = (&db.leases, &db.transcripts);
        let k = key("-w", "f", None);
        let a = l
            .acquire("f", "host-a", Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(
            t.append(&k, &[line("a1", "a")], Some(&a.fence()))
                .await
                .unwrap(),
            1
        );
        // Unleased writes and forged holders are refused while A holds it.
        let forged = claude_host_store::Fence {
            holder: "host-x".into(),
            epoch: a.epoch,
        };
        for fence in [None, Some(&forged)] {
            match t.append(&k, &[line("x1", "x")], fence).await {
                Err(StoreError::Fenced {
                    session_id, reason, ..
                }) => {
                    assert_eq!(session_id, "f");
                    assert!(reason.contains("host-a"), "{name}: {reason}");
                }
                other => panic!("{name}: {other:?}"),
            }
            assert!(matches!(
                db.metadata.put(&crate::rec("f", 1), fence).await,
                Err(StoreError::Fenced { .. })
            ));
        }
        // A's lease runs out (edited by hand here) and B takes over: A's writes are refused,
        // in the same transaction, with nothing stored.
        let dbname = db.location.rsplit('/').next().unwrap().to_owned();
        if name == "postgres" {
            PgCluster::shared()
                .psql(
                    &dbname,
                    "UPDATE session_leases SET expires_at = 0 WHERE session_id = 'f'",
                )
                .unwrap();
        } else {
            l.release("f", &a.fence()).await.unwrap();
        }
        assert!(
            matches!(
                t.append(&k, &[line("a2", "late")], Some(&a.fence())).await,
                Err(StoreError::Fenced { .. })
            ),
            "{name}: a write after the lease ran out"
        );
        let b = l
            .acquire("f", "host-b", Duration::from_secs(60))
            .await
            .unwrap();
        assert!(b.epoch > a.epoch);
        match t.append(&k, &[line("a3", "stale")], Some(&a.fence())).await {
            Err(StoreError::Fenced { writer, reason, .. }) => {
                assert_eq!(writer, Some(a.fence()));
                assert!(reason.contains("host-b"), "{name}: {reason}");
            }
            other => panic!("{name}: {other:?}"),
        }
        assert!(matches!(
            db.metadata.put(&crate::rec("f", 2), Some(&a.fence())).await,
            Err(StoreError::Fenced { .. })
        ));
        assert!(matches!(
            l.renew("f", &a.fence(), Duration::from_secs(60)).await,
            Err(StoreError::Held { .. })
        ));
        assert_eq!(
            t.append(&k, &[line("b1", "b")], Some(&b.fence()))
                .await
                .unwrap(),
            1
        );
        db.metadata
            .put(&crate::rec("f", 3), Some(&b.fence()))
            .await
            .unwrap();
        let stored = t.load(&k).await.unwrap().unwrap();
        assert_eq!(stored, vec![line("a1", "a"), line("b1", "b")], "{name}");
        // Revoked (`sessions release`): B's writes are refused from then on, and the next
        // holder's epoch is higher still.
        let revoked = l.revoke("f").await.unwrap().unwrap();
        assert_eq!(revoked.holder, "host-b");
        assert!(matches!(
            t.append(&k, &[line("b2", "b")], Some(&b.fence())).await,
            Err(StoreError::Fenced { .. })
        ));
        let c = l
            .acquire("f", "host-c", Duration::from_secs(60))
            .await
            .unwrap();
        assert!(c.epoch > b.epoch + 1, "{name}: {c:?}");
        // A lease row whose epoch was set back by hand: the holder's fence no longer matches.
        if name == "postgres" {
            PgCluster::shared()
                .psql(
                    &dbname,
                    "UPDATE session_leases SET epoch = 1 WHERE session_id = 'f'",
                )
                .unwrap();
            assert!(matches!(
                t.append(&k, &[line("c1", "c")], Some(&c.fence())).await,
                Err(StoreError::Fenced { .. })
            ));
        }
        assert_eq!(
            t.count(&k).await.unwrap(),
            2,
            "{name}: nothing lost, nothing added"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_round_trips_with_its_host() {
    let (_dir, dbs) = backends().await;
    for (name, db) in dbs {
        let mut r = crate::rec("m", 5);
        r.host = Some("box-1".into());
        r.read = true;
        r.decisions = Some(r#"{"by_id":{}}"#.into());
        db.metadata.put(&r, None).await.unwrap();
        // A write that does not know the host keeps the one stored.
        let mut again = r.clone();
        again.host = None;
        again.updated_at = 6;
        db.metadata.put(&again, None).await.unwrap();
        let back = db.metadata.get("m").await.unwrap().unwrap();
        assert_eq!(back.host.as_deref(), Some("box-1"), "{name}");
        assert_eq!(
            back.decisions.as_deref(),
            Some(r#"{"by_id":{}}"#),
            "{name}: decisions kept by a record without them"
        );
        assert_eq!(back.updated_at, 6);
        assert!(back.read);
        assert_eq!(db.metadata.list(false).await.unwrap().len(), 1, "{name}");
        assert!(db.metadata.delete("m").await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_values_are_set_whole_and_listed_by_a_literal_prefix() {
    let (_dir, dbs) = backends().await;
    for (name, db) in dbs {
        let s = &db.shared;
        assert_eq!(
            s.get_value("customizations/global").await.unwrap(),
            None,
            "{name}"
        );
        s.put_value("customizations/global", "{\"a\":1}")
            .await
            .unwrap();
        s.put_value("customizations/global", "{\"b\":2}")
            .await
            .unwrap();
        assert_eq!(
            s.get_value("customizations/global")
                .await
                .unwrap()
                .as_deref(),
            Some("{\"b\":2}"),
            "{name}: the last write wins"
        );
        s.put_value("usage/2026-11-28/h1", "1").await.unwrap();
        s.put_value("usage/2026-11-28/h2", "2").await.unwrap();
        s.put_value("usage/2026-11-29/h1", "3").await.unwrap();
        // `_` and `%` are no wildcards.
        s.put_value("usageX2026-11-28/h3", "4").await.unwrap();
        assert_eq!(
            s.values_under("usage/2026-11-28/").await.unwrap(),
            vec![
                ("usage/2026-11-28/h1".to_owned(), "1".to_owned()),
                ("usage/2026-11-28/h2".to_owned(), "2".to_owned())
            ],
            "{name}"
        );
        assert_eq!(s.values_under("usage_").await.unwrap(), vec![], "{name}");
    }
}
