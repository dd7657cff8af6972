//! Three `serve` hosts on one real PostgreSQL, each reaching it through a relay the test
//! controls. A host cut off in the middle of a long turn stops on its own clock; another host
//! takes the session over with its whole history; nothing the cut-off host wrote after losing
//! its lease reaches the store, even when its link comes back and delivers what it held.

use super::durable::Machine;
use super::relay::{Mode, Relay};
use super::ws::{Ws, uuid};
use super::*;
use claude_host_testkit::fake::{FakeConfig, FakeUpstream, Match, Reply, Rule};
use claude_host_testkit::pg::PgCluster;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

const LEASE: Duration = Duration::from_secs(2);
const TOKEN: &str = "partition-test-token";

struct Serve(std::process::Child);

impl Drop for Serve {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            super::serve::stop(&mut self.0);
        }
    }
}

struct Node {
    machine: Machine,
    relay: Relay,
    serve: Serve,
    port: u16,
}

async fn node(h: &Host, pg: &PgCluster, db: &str) -> Node {
    node_with(h, pg, db, &[]).await
}

async fn node_with(h: &Host, pg: &PgCluster, db: &str, env: &[(&str, &str)]) -> Node {
    let machine = Machine::new();
    let relay = Relay::start(pg.port()).await;
    let via = db.replace(
        &format!("127.0.0.1:{}/", pg.port()),
        &format!("127.0.0.1:{}/", relay.port()),
    );
    assert_ne!(via, db, "the URL goes through the relay: {db}");
    let mut c = machine.cmd(h, &via);
    c.env("CLAUDE_HOST_CONNECTION_TOKEN", TOKEN)
        .env(
            "CLAUDE_HOST_SESSION_LEASE_SECS",
            LEASE.as_secs().to_string(),
        )
        .env("CLAUDE_HOST_WARM_UP", "false");
    for (k, v) in env {
        c.env(k, v);
    }
    let (child, port, _) = super::serve::start(c);
    Node {
        machine,
        relay,
        serve: Serve(child),
        port,
    }
}

/// A fake whose every reply event comes 15 ms after the last: the long story streams for
/// ~6 s (three leases).
async fn slow_host() -> Host {
    let fake = FakeUpstream::start_with(FakeConfig {
        sse_group_gap: Some(Duration::from_millis(15)),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let h = Host::on(fake);
    let long: Vec<String> = (0..400).map(|i| format!("word{i} ")).collect();
    h.fake.push(Rule {
        when: Match::LastUserContains("tell a long story".into()),
        reply: Reply::text_deltas(long),
        times: Some(usize::MAX),
    });
    h.fake.push(Rule {
        when: Match::LastUserContains("what did I ask".into()),
        reply: Reply::text("A story."),
        times: Some(usize::MAX),
    });
    // A turn that goes on writing transcript lines: a read-only tool call after another.
    h.fake.push(Rule {
        when: Match::LastUserContains("keep looking around".into()),
        reply: Reply::tool_use("Glob", serde_json::json!({"pattern": "*"})),
        times: Some(usize::MAX),
    });
    h.fake.push(Rule {
        when: Match::HasToolResult,
        reply: Reply::tool_use("Glob", serde_json::json!({"pattern": "*"})),
        times: Some(usize::MAX),
    });
    h.fake.push(Rule {
        when: Match::Always,
        reply: Reply::text("ok"),
        times: Some(usize::MAX),
    });
    h
}

/// A small random generator whose seed is printed, so a failing run can be repeated
/// (`PARTITION_SEED=<n>`).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The store's main transcript of a session, in append order.
fn stored_entries(pg: &PgCluster, db: &str, id: &str) -> Vec<Value> {
    let name = db.rsplit('/').next().unwrap();
    let out = pg
        .psql(
            name,
            &format!("SELECT entry::text FROM transcript_entries WHERE session_id = '{id}' AND subpath = '' ORDER BY id"),
        )
        .unwrap();
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn uuids(entries: &[Value]) -> HashSet<String> {
    entries
        .iter()
        .filter_map(|e| e["uuid"].as_str().map(str::to_owned))
        .collect()
}

fn file_entries(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The chain from the last entry with a uuid back to the root; panics on a missing parent.
fn main_chain(entries: &[Value]) -> Vec<Value> {
    let by_uuid: HashMap<&str, &Value> = entries
        .iter()
        .filter_map(|e| e["uuid"].as_str().map(|u| (u, e)))
        .collect();
    let Some(mut at) = entries.iter().rev().find(|e| e["uuid"].is_string()) else {
        return Vec::new();
    };
    let mut chain = vec![at.clone()];
    while let Some(parent) = at["parentUuid"].as_str() {
        at = by_uuid
            .get(parent)
            .unwrap_or_else(|| panic!("broken chain: parent {parent} is not stored"));
        chain.push(at.clone());
    }
    chain.reverse();
    chain
}

fn text_of(e: &Value) -> String {
    e["message"]["content"].to_string()
}

/// Whether a Claude Code process of machine `m` runs for session `id`.
fn cli_of(m: &Machine, id: &str) -> bool {
    let home = m.dir.path().to_string_lossy().into_owned();
    std::fs::read_dir("/proc").unwrap().flatten().any(|p| {
        let cmd = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd);
        let env = std::fs::read(p.path().join("environ")).unwrap_or_default();
        cmd.contains(id) && String::from_utf8_lossy(&env).contains(&format!("HOME={home}"))
    })
}

/// Waits until no backend of `db` is in the middle of anything (what a relay let through
/// has been carried out).
async fn database_settled(pg: &PgCluster, db: &str) {
    let name = db.rsplit('/').next().unwrap().to_owned();
    until("the database is idle", || {
        pg.psql(
            &name,
            &format!("SELECT COUNT(*) FROM pg_stat_activity WHERE datname = '{name}' AND state <> 'idle' AND pid <> pg_backend_pid()"),
        )
        .unwrap()
            == "0"
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_cut_off_mid_turn_stops_and_another_takes_over_with_nothing_lost_or_forked() {
    let reps: usize = std::env::var("PARTITION_REPS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(20);
    let seed: u64 = std::env::var("PARTITION_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("partition test: seed {seed} (PARTITION_SEED={seed} repeats it), {reps} reps");
    let mut rng = Rng(seed);

    let pg = PgCluster::shared();
    let db = pg.create_database().unwrap();
    let h = slow_host().await;
    let nodes = vec![
        node(&h, pg, &db).await,
        node(&h, pg, &db).await,
        node(&h, pg, &db).await,
    ];

    for rep in 0..reps {
        let (a, b) = (&nodes[rep % 3], &nodes[(rep + 1) % 3]);
        let mut wa = Ws::connect(a.port, TOKEN).await;
        let (session, id, chat) = wa.new_session(&a.machine).await;
        let first = format!("first {rep}: say ok");
        let t1 = wa.turn(&chat, &first).await;
        assert_eq!(
            wa.turn_end(&t1).await["action"]["type"],
            "chat/turnComplete"
        );
        // The long turn streams one long reply, or (odd reps) makes tool call after tool
        // call, writing transcript lines all along.
        let long = if rep % 2 == 1 {
            "keep looking around"
        } else {
            "tell a long story"
        };
        let t2 = wa.turn(&chat, long).await;
        wa.action("the long turn going", |x| {
            x["action"]["turnId"] == t2.as_str()
                && matches!(
                    x["action"]["type"].as_str(),
                    Some("chat/responsePart" | "chat/toolCallStart")
                )
        })
        .await;
        // A random cut point within the first ~1.2 s of the stream; the link black-holed,
        // delayed past the lease, or cut.
        tokio::time::sleep(Duration::from_millis(rng.next() % 1200)).await;
        let mode = match rng.next() % 4 {
            0 => Mode::Cut,
            1 => Mode::Delay(LEASE + Duration::from_secs(1)),
            _ => Mode::BlackHole,
        };
        a.relay.set(mode);
        let cut = Instant::now();

        // A stops on its own clock: the turn ends with the lease's error, its CLI is gone.
        let end = wa.turn_end(&t2).await;
        let stopped = cut.elapsed();
        assert_eq!(end["action"]["type"], "chat/error", "rep {rep}: {end}");
        assert!(
            end.to_string().contains("lease"),
            "rep {rep}: the error names the lease: {end}"
        );
        assert!(
            stopped <= LEASE + Duration::from_millis(700),
            "rep {rep}: A stopped {stopped:?} after the cut (lease {LEASE:?})"
        );
        until("A's CLI is stopped", || !cli_of(&a.machine, &id)).await;

        // B opens the session once A's lease has run out; until then it is told who holds it.
        let mut wb = Ws::connect(b.port, TOKEN).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let r = wb
                .request("subscribe", serde_json::json!({"channel": session}))
                .await;
            if r.get("error").is_none() {
                break;
            }
            assert_eq!(r["error"]["code"], -32009, "rep {rep}: {r}");
            assert!(Instant::now() < deadline, "rep {rep}: never free: {r}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // What A has that the store had not when B took over: it must never get there.
        let a_file = a
            .machine
            .transcripts()
            .into_iter()
            .find(|p| p.to_string_lossy().contains(&id))
            .unwrap();
        let at_takeover = uuids(&stored_entries(pg, &db, &id));
        let a_extra: HashSet<String> = uuids(&file_entries(&a_file))
            .difference(&at_takeover)
            .cloned()
            .collect();

        wb.ok("subscribe", serde_json::json!({"channel": chat}))
            .await;
        let t3 = wb.turn(&chat, "what did I ask?").await;
        let end = wb.turn_end(&t3).await;
        assert_eq!(
            end["action"]["type"], "chat/turnComplete",
            "rep {rep}: {end}"
        );
        let b_file = b
            .machine
            .transcripts()
            .into_iter()
            .find(|p| p.to_string_lossy().contains(&id))
            .unwrap();
        let b_count = file_entries(&b_file)
            .iter()
            .filter(|e| {
                !e["type"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("api-request")
            })
            .count();
        until("B's lines are stored", || {
            stored_entries(pg, &db, &id).len() == b_count
        })
        .await;

        // A's link comes back and delivers what it held: all of it refused.
        a.relay.set(Mode::Pass);
        until("A's relay passed on what it held", || a.relay.held() == 0).await;
        database_settled(pg, &db).await;

        let stored = stored_entries(pg, &db, &id);
        let chain = main_chain(&stored);
        let on_chain = uuids(&chain);
        // One unbroken chain: every stored entry with a uuid is on the chain from the last.
        for e in &stored {
            if let Some(u) = e["uuid"].as_str() {
                assert!(
                    on_chain.contains(u),
                    "rep {rep}: {u} is off the main chain (a fork): {e}"
                );
            }
        }
        let stored_uuids = uuids(&stored);
        let leaked: Vec<&String> = a_extra.intersection(&stored_uuids).collect();
        assert!(
            leaked.is_empty(),
            "rep {rep}: lines A wrote after losing its lease reached the store: {leaked:?}"
        );
        // Every turn a client saw complete is in B's history.
        let texts: Vec<String> = chain.iter().map(text_of).collect();
        for want in [first.as_str(), "what did I ask?", "A story."] {
            assert!(
                texts.iter().any(|t| t.contains(want)),
                "rep {rep}: {want:?} not in the stored chain"
            );
        }
        assert!(
            stored.len() == b_count,
            "rep {rep}: the store holds B's copy, no more"
        );
        eprintln!(
            "rep {rep} ({long}, {mode:?}): A stopped {} ms after the cut; {} entries stored, {} of A's lines kept out",
            stopped.as_millis(),
            stored.len(),
            a_extra.len()
        );
        drop(wa);
        wb.ok("disposeSession", serde_json::json!({"channel": session}))
            .await;
    }
    drop(nodes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_turn_hands_the_session_over_at_once_with_its_history() {
    let pg = PgCluster::shared();
    let db = pg.create_database().unwrap();
    let h = slow_host().await;
    // A's turn outlasts its grace period: cancelled, flushed, released.
    let mut a = node_with(&h, pg, &db, &[("CLAUDE_HOST_SHUTDOWN_GRACE_SECS", "1")]).await;
    let b = node(&h, pg, &db).await;
    let mut wa = Ws::connect(a.port, TOKEN).await;
    let (session, id, chat) = wa.new_session(&a.machine).await;
    let t1 = wa.turn(&chat, "first: say ok").await;
    assert_eq!(
        wa.turn_end(&t1).await["action"]["type"],
        "chat/turnComplete"
    );
    let t2 = wa.turn(&chat, "tell a long story").await;
    wa.action("the story streaming", |x| {
        x["action"]["turnId"] == t2.as_str() && x["action"]["type"] == "chat/responsePart"
    })
    .await;
    let status = super::serve::stop(&mut a.serve.0);
    let exited = Instant::now();
    assert!(status.success(), "{status:?}");
    assert!(!cli_of(&a.machine, &id), "A's CLI went with it");
    let name = db.rsplit('/').next().unwrap();
    let live = pg
        .psql(
            name,
            &format!("SELECT COUNT(*) FROM session_leases WHERE session_id = '{id}' AND expires_at > (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT"),
        )
        .unwrap();
    assert_eq!(live, "0", "A gave the lease back before it exited");
    // B opens it at once (not after the lease time), with everything A's CLI wrote.
    let mut wb = Ws::connect(b.port, TOKEN).await;
    let r = wb
        .request("subscribe", serde_json::json!({"channel": session}))
        .await;
    let took = exited.elapsed();
    assert!(r.get("error").is_none(), "{r}");
    assert!(
        took < Duration::from_secs(1),
        "B opened it {took:?} after A exited"
    );
    let a_file = a.machine.transcripts().pop().unwrap();
    let a_lines: HashSet<String> = uuids(&file_entries(&a_file));
    let stored = uuids(&stored_entries(pg, &db, &id));
    assert!(
        a_lines.is_subset(&stored),
        "every line A's CLI wrote is stored: missing {:?}",
        a_lines.difference(&stored).collect::<Vec<_>>()
    );
    wb.ok("subscribe", serde_json::json!({"channel": chat}))
        .await;
    let t3 = wb.turn(&chat, "what did I ask?").await;
    assert_eq!(
        wb.turn_end(&t3).await["action"]["type"],
        "chat/turnComplete"
    );
    let last = h.fake.message_requests().pop().unwrap();
    let body = String::from_utf8_lossy(&last.body).into_owned();
    for text in ["first: say ok", "tell a long story", "what did I ask?"] {
        assert!(body.contains(text), "{text} in the history B sent");
    }
    let chain = main_chain(&stored_entries(pg, &db, &id));
    assert!(chain.iter().any(|e| text_of(e).contains("first: say ok")));
    eprintln!(
        "B opened the session {} ms after A exited",
        took.as_millis()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_down_at_open_is_refused_unless_unleased_is_allowed_and_status_says_so() {
    let pg = PgCluster::shared();
    let db = pg.create_database().unwrap();
    let h = slow_host().await;
    let a = node(&h, pg, &db).await;
    let b = node_with(&h, pg, &db, &[("CLAUDE_HOST_ALLOW_UNLEASED", "true")]).await;
    // A session A ran while the database was there, closed since.
    let mut wa = Ws::connect(a.port, TOKEN).await;
    let (old_session, old_id, old_chat) = wa.new_session(&a.machine).await;
    let t = wa.turn(&old_chat, "first: say ok").await;
    assert_eq!(wa.turn_end(&t).await["action"]["type"], "chat/turnComplete");
    wa.ok(
        "disposeSession",
        serde_json::json!({"channel": old_session}),
    )
    .await;
    until("A's lease on it is given back", || {
        pg.psql(
            db.rsplit('/').next().unwrap(),
            &format!("SELECT COUNT(*) FROM session_leases WHERE session_id = '{old_id}' AND expires_at > (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT"),
        )
        .unwrap()
            == "0"
    })
    .await;

    a.relay.set(Mode::Cut);
    b.relay.set(Mode::Cut);
    // By default: refused, naming the database and the lease, for a new and an old session.
    let id = uuid();
    let work = claude_host_protocol::uri::file_uri(&a.machine.dir.path().join("work"));
    let r = wa
        .request(
            "createSession",
            serde_json::json!({"channel": format!("claude:/{id}"), "provider": "claude", "workingDirectories": [work]}),
        )
        .await;
    let message = r["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(r["error"]["code"], -32009, "{r}");
    assert!(
        message.contains("lease") && message.contains(&format!(":{}/", a.relay.port())),
        "{message}"
    );
    assert!(
        !message.contains(claude_host_testkit::pg::PASSWORD),
        "{message}"
    );
    let r = wa
        .request("subscribe", serde_json::json!({"channel": old_session}))
        .await;
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("lease") && !message.starts_with("no session"),
        "{r}"
    );
    assert_eq!(r["error"]["data"]["leaseUnavailable"], true, "{r}");

    // With --allow-unleased: the session runs, and `status` names the host that allows it.
    let mut wb = Ws::connect(b.port, TOKEN).await;
    let (_, _, chat) = wb.new_session(&b.machine).await;
    let t = wb.turn(&chat, "say ok").await;
    assert_eq!(wb.turn_end(&t).await["action"]["type"], "chat/turnComplete");
    let via = db.replace(
        &format!("127.0.0.1:{}/", pg.port()),
        &format!("127.0.0.1:{}/", b.relay.port()),
    );
    let mut c = b.machine.cmd(&h, &via);
    c.args(["status", "--json"]);
    let out = tokio::task::spawn_blocking(move || run(c)).await.unwrap();
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let unleased = &v["database"]["unleased"];
    assert_eq!(unleased.as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(unleased[0]["pid"], b.serve.0.id(), "{v}");
    let mut c = a.machine.cmd(
        &h,
        &db.replace(
            &format!("127.0.0.1:{}/", pg.port()),
            &format!("127.0.0.1:{}/", a.relay.port()),
        ),
    );
    c.args(["status", "--json"]);
    let out = tokio::task::spawn_blocking(move || run(c)).await.unwrap();
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["database"]["unleased"], serde_json::json!([]), "{v}");
}

/// The first object under `v` whose `id` is `id`.
fn find_id<'a>(v: &'a Value, id: &str) -> Option<&'a Value> {
    match v {
        Value::Object(m) => {
            if m.get("id").and_then(Value::as_str) == Some(id) {
                return Some(v);
            }
            m.values().find_map(|x| find_id(x, id))
        }
        Value::Array(a) => a.iter().find_map(|x| find_id(x, id)),
        _ => None,
    }
}

fn turned_off_here(v: &Value, id: &str) -> bool {
    find_id(v, id).is_some_and(|e| e["enabled"] == false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_customization_decisions_move_with_it() {
    let pg = PgCluster::shared();
    let db = pg.create_database().unwrap();
    let h = slow_host().await;
    let mut a = node(&h, pg, &db).await;
    let b = node(&h, pg, &db).await;
    let skill = a.machine.dir.path().join("work/.claude/skills/deploy");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: deploy\ndescription: Deploys the thing\n---\nDeploy it.\n",
    )
    .unwrap();
    let id_of_skill = "project:skill:deploy";
    let mut wa = Ws::connect(a.port, TOKEN).await;
    let (session, id, chat) = wa.new_session(&a.machine).await;
    let t = wa.turn(&chat, "first: say ok").await;
    assert_eq!(wa.turn_end(&t).await["action"]["type"], "chat/turnComplete");
    snapshot_until(&mut wa, &session, "the skill discovered, on", |v| {
        find_id(v, id_of_skill).is_some_and(|e| e["enabled"] != false)
    })
    .await;
    wa.dispatch(
        &session,
        serde_json::json!({"type": "session/customizationToggled", "id": id_of_skill,
            "enablement": [{"kind": "session", "enabled": false}]}),
    )
    .await;
    let echo = wa
        .action("the toggle's echo", |x| {
            x["action"]["type"] == "session/customizationToggled"
        })
        .await;
    assert!(echo.get("rejectionReason").is_none(), "{echo}");
    let name = db.rsplit('/').next().unwrap().to_owned();
    until("the decision is in the session's record", || {
        pg.psql(
            &name,
            &format!("SELECT COALESCE(decisions, '') FROM sessions WHERE id = '{id}'"),
        )
        .unwrap()
        .contains(id_of_skill)
    })
    .await;
    assert!(super::serve::stop(&mut a.serve.0).success());

    // B opens it: the skill is off there too, by the session's own decision.
    let mut wb = Ws::connect(b.port, TOKEN).await;
    snapshot_until(&mut wb, &session, "the skill, off on B", |v| {
        turned_off_here(v, id_of_skill)
    })
    .await;
}

/// Subscribes to `session` until its snapshot satisfies `pred` (discovery runs beside the
/// session's task; a later subscribe sees its result).
async fn snapshot_until(ws: &mut Ws, session: &str, what: &str, pred: impl Fn(&Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let snapshot = ws
            .ok("subscribe", serde_json::json!({"channel": session}))
            .await;
        if pred(&snapshot) {
            return;
        }
        assert!(Instant::now() < deadline, "never {what}: {snapshot}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_list_shows_the_holder_and_release_hands_the_session_over() {
    let pg = PgCluster::shared();
    let db = pg.create_database().unwrap();
    let h = slow_host().await;
    let a = node(&h, pg, &db).await;
    let b = node(&h, pg, &db).await;
    let mut wa = Ws::connect(a.port, TOKEN).await;
    let (session, id, chat) = wa.new_session(&a.machine).await;
    let t = wa.turn(&chat, "first: say ok").await;
    assert_eq!(wa.turn_end(&t).await["action"]["type"], "chat/turnComplete");
    let a_pid = format!("(pid {})", a.serve.0.id());

    // Listed on B with who holds it and since when.
    let mut c = b.machine.cmd(&h, &db);
    c.args(["sessions", "list", "--json"]);
    let out = tokio::task::spawn_blocking(move || run(c)).await.unwrap();
    let list: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let s = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{list}"));
    assert!(
        s["held"]["holder"].as_str().unwrap().ends_with(&a_pid),
        "{s}"
    );
    assert!(s["held"]["since"].as_str().unwrap().ends_with('Z'), "{s}");

    // Released by hand: B may open it at once, and A stops driving it.
    let mut c = b.machine.cmd(&h, &db);
    c.args(["sessions", "release", &id]);
    let out = tokio::task::spawn_blocking(move || run(c)).await.unwrap();
    assert!(out.status.success());
    assert!(stdout(&out).contains(&a_pid), "{}", stdout(&out));
    let mut wb = Ws::connect(b.port, TOKEN).await;
    wb.ok("subscribe", serde_json::json!({"channel": session}))
        .await;
    let b_pid = format!("(pid {})", b.serve.0.id());
    until("A learns it no longer holds the session", || {
        !cli_of(&a.machine, &id)
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = wa
            .request("subscribe", serde_json::json!({"channel": session}))
            .await;
        if r["error"]["code"] == -32009 {
            assert!(
                r["error"]["data"]["heldBy"]
                    .as_str()
                    .unwrap()
                    .ends_with(&b_pid),
                "{r}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "A still drives it: {r}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether the stored chain holds the user's `prompt` and an answer after it.
fn stored_turn(pg: &PgCluster, db: &str, id: &str, prompt: &str) -> bool {
    let stored = stored_entries(pg, db, id);
    stored
        .iter()
        .position(|e| e["type"] == "user" && text_of(e).contains(prompt))
        .is_some_and(|at| stored[at..].iter().any(|e| e["type"] == "assistant"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_is_reported_complete_only_once_it_is_stored() {
    let pg = PgCluster::shared();
    let db = pg.create_database().unwrap();
    let h = slow_host().await;
    let a = node(&h, pg, &db).await;
    let b = node(&h, pg, &db).await;
    let mut wa = Ws::connect(a.port, TOKEN).await;
    let (session, id, chat) = wa.new_session(&a.machine).await;
    let t1 = wa.turn(&chat, "first: say ok").await;
    assert_eq!(
        wa.turn_end(&t1).await["action"]["type"],
        "chat/turnComplete"
    );

    // A slow link (each write takes a few round trips of 100 ms) within the lease: the turn
    // completes, and by then it is stored.
    a.relay.set(Mode::Delay(Duration::from_millis(50)));
    let t2 = wa.turn(&chat, "second: say ok").await;
    let end = wa.turn_end(&t2).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");
    assert!(
        stored_turn(pg, &db, &id, "second: say ok"),
        "a turn reported complete is in the store"
    );
    a.relay.set(Mode::Pass);

    // The link black-holed, then a short turn finishes on A: its lines cannot reach the
    // store before A's lease runs out, so the client is told of an error, not a completion.
    a.relay.set(Mode::BlackHole);
    let cut = Instant::now();
    let t3 = wa.turn(&chat, "third: say ok").await;
    let end = wa.turn_end(&t3).await;
    assert_eq!(end["action"]["type"], "chat/error", "{end}");
    assert!(
        cut.elapsed() <= LEASE + Duration::from_millis(700),
        "the turn ended by A's deadline: {:?}",
        cut.elapsed()
    );

    // B takes over once A's lease has run out: the turns A reported complete are there, the
    // one it did not is not.
    let mut wb = Ws::connect(b.port, TOKEN).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = wb
            .request("subscribe", serde_json::json!({"channel": session}))
            .await;
        if r.get("error").is_none() {
            break;
        }
        assert!(Instant::now() < deadline, "never free: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wb.ok("subscribe", serde_json::json!({"channel": chat}))
        .await;
    let t4 = wb.turn(&chat, "what did I ask?").await;
    assert_eq!(
        wb.turn_end(&t4).await["action"]["type"],
        "chat/turnComplete"
    );
    let chain: Vec<String> = main_chain(&stored_entries(pg, &db, &id))
        .iter()
        .map(text_of)
        .collect();
    for want in ["first: say ok", "second: say ok", "what did I ask?"] {
        assert!(
            chain.iter().any(|t| t.contains(want)),
            "{want:?} in B's history"
        );
    }
    assert!(
        !chain.iter().any(|t| t.contains("third: say ok")),
        "the turn that was not stored is not in B's history"
    );
    a.relay.set(Mode::Pass);
    until("A's relay passed on what it held", || a.relay.held() == 0).await;
    database_settled(pg, &db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_customization_decision_is_shared_by_every_host_of_the_store() {
    let pg = PgCluster::shared();
    let db = pg.create_database().unwrap();
    let h = slow_host().await;
    let a = node(&h, pg, &db).await;
    let b = node(&h, pg, &db).await;
    let skill = a.machine.dir.path().join("work/.claude/skills/deploy");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: deploy\ndescription: Deploys the thing\n---\nDeploy it.\n",
    )
    .unwrap();
    let id_of_skill = "project:skill:deploy";
    let mut wa = Ws::connect(a.port, TOKEN).await;
    let (session, _, _) = wa.new_session(&a.machine).await;
    snapshot_until(&mut wa, &session, "the skill discovered, on", |v| {
        find_id(v, id_of_skill).is_some_and(|e| e["enabled"] != false)
    })
    .await;
    wa.dispatch(
        &session,
        serde_json::json!({"type": "session/customizationToggled", "id": id_of_skill,
            "enablement": [{"kind": "global", "enabled": false}]}),
    )
    .await;
    let echo = wa
        .action("the toggle's echo", |x| {
            x["action"]["type"] == "session/customizationToggled"
        })
        .await;
    assert!(echo.get("rejectionReason").is_none(), "{echo}");
    let name = db.rsplit('/').next().unwrap().to_owned();
    until("the global decision is in the store", || {
        pg.psql(
            &name,
            "SELECT COALESCE(MAX(value), '') FROM shared_values WHERE key = 'customizations/global'",
        )
        .unwrap()
        .contains(id_of_skill)
    })
    .await;

    // A new session on B (another host, which never decided anything: its own decisions file
    // holds nothing) has the skill off too.
    let mut wb = Ws::connect(b.port, TOKEN).await;
    let (other, _, _) = wb.new_session(&a.machine).await;
    snapshot_until(&mut wb, &other, "the skill, off on B", |v| {
        turned_off_here(v, id_of_skill)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_days_usage_counts_of_every_host_are_in_the_shared_store() {
    let pg = PgCluster::shared();
    let db = pg.create_database().unwrap();
    let h = slow_host().await;
    let a = node(&h, pg, &db).await;
    let b = node(&h, pg, &db).await;
    for n in [&a, &b] {
        let mut w = Ws::connect(n.port, TOKEN).await;
        let (_, _, chat) = w.new_session(&n.machine).await;
        let t = w.turn(&chat, "first: say ok").await;
        assert_eq!(w.turn_end(&t).await["action"]["type"], "chat/turnComplete");
    }
    let made = h.fake.message_requests().len();
    assert!(made >= 2, "both hosts called the model");
    // A machine that ran nothing sees both hosts' calls in the store.
    let c = Machine::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut cmd = c.cmd(&h, &db);
        cmd.args(["status", "--json"]);
        let out = tokio::task::spawn_blocking(move || run(cmd)).await.unwrap();
        let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
        if v["today"]["requests"] == made {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "today's requests never {made}: {}",
            v["today"]
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
