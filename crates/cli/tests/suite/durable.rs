//! Sessions kept in PostgreSQL: mirrored, listed and resumed on another host, leased, moved by
//! hand. Each "host" is its own HOME and data directory on this machine, sharing a real
//! PostgreSQL server (a private cluster) and the fake upstream.

use super::ws::{WAIT, Ws};
use super::*;
use claude_host_testkit::fake::{Match, Reply, Rule};
use claude_host_testkit::pg::PgCluster;
use serde_json::Value;

fn always(when: Match, reply: Reply) -> Rule {
    Rule {
        when,
        reply,
        times: Some(usize::MAX),
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

/// Another machine: its own HOME (so its own `~/.claude`) and data directory.
pub(crate) struct Machine {
    pub dir: tempfile::TempDir,
}

impl Machine {
    pub fn new() -> Machine {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        Machine { dir }
    }

    /// `h.cmd()` as run on this machine, with the database.
    pub fn cmd(&self, h: &Host, db: &str) -> Command {
        let mut c = h.cmd();
        c.env("HOME", self.dir.path())
            .env("CLAUDE_HOST_HOME", self.dir.path().join("claude-host-home"))
            .env("CLAUDE_HOST_DATABASE_URL", db)
            .current_dir(self.dir.path().join("work"));
        c
    }

    pub fn transcripts(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for p in std::fs::read_dir(self.dir.path().join(".claude/projects"))
            .into_iter()
            .flatten()
            .flatten()
        {
            for f in std::fs::read_dir(p.path()).into_iter().flatten().flatten() {
                if f.path().extension().and_then(|e| e.to_str()) == Some("jsonl") {
                    out.push(f.path());
                }
            }
        }
        out
    }
}

/// The lines of a transcript the store keeps: all but Claude Code's request-replay cache.
fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            !v["type"]
                .as_str()
                .unwrap_or_default()
                .starts_with("api-request")
        })
        .count()
}

fn stored(pg: &PgCluster, db: &str, session: &str) -> usize {
    let name = db.rsplit('/').next().unwrap();
    pg.psql(
        name,
        &format!("SELECT COUNT(*) FROM transcript_entries WHERE session_id = '{session}' AND subpath = ''"),
    )
    .unwrap()
    .parse()
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_run_on_one_host_is_listed_and_resumed_on_another() {
    let pg = PgCluster::shared();
    let db = pg.create_database().unwrap();
    let h = Host::new().await;
    h.fake.push(always(
        Match::LastUserContains("remember mango".into()),
        Reply::text("Mango noted."),
    ));
    h.fake.push(always(
        Match::LastUserContains("which fruit".into()),
        Reply::text("Mango."),
    ));
    let (a, b) = (Machine::new(), Machine::new());
    let mut c = a.cmd(&h, &db);
    c.args(["run", "remember mango"]);
    let out = blocking(move || run(c)).await;
    assert!(out.status.success());
    let files = a.transcripts();
    assert_eq!(files.len(), 1, "{files:?}");
    let id = files[0].file_stem().unwrap().to_str().unwrap().to_owned();
    // Everything A's CLI wrote is in the store (run waits for the mirror before it exits).
    assert_eq!(stored(pg, &db, &id), lines(&files[0]));
    let behind = |m: &Machine| {
        let mut c = m.cmd(&h, &db);
        c.args(["status", "--json"]);
        let out = run(c);
        let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(v["database"]["sessions"], 1, "{v}");
        assert!(!v.to_string().contains(claude_host_testkit::pg::PASSWORD));
        v["database"]["behind"]["entries"].as_u64().unwrap()
    };
    assert_eq!(behind(&a), 0, "status: every line stored");

    // B has no transcript, and lists A's session with the host that ran it.
    assert!(b.transcripts().is_empty());
    let mut c = b.cmd(&h, &db);
    c.args(["sessions", "list", "--json"]);
    let out = blocking(move || run(c)).await;
    let list: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let s = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{list}"));
    assert_eq!(s["summary"], "remember mango");
    assert_eq!(s["local"], false);
    assert!(
        s["host"]["last_host"].as_str().unwrap().contains("(pid "),
        "{s}"
    );

    // B resumes it: the history came from the store.
    let mut c = b.cmd(&h, &db);
    c.args(["run", "--resume", &id, "which fruit did I say?"]);
    let out = blocking(move || run(c)).await;
    assert!(out.status.success());
    assert_eq!(stdout(&out).trim(), "Mango.");
    let last = h.fake.message_requests().pop().unwrap().json();
    assert!(last.to_string().contains("remember mango"), "{last}");
    let files_b = b.transcripts();
    assert_eq!(files_b.len(), 1);
    assert!(lines(&files_b[0]) > lines(&files[0]), "B's turn was added");
    assert_eq!(stored(pg, &db, &id), lines(&files_b[0]), "and mirrored");
    // A line this host has and the store has not (as after an outage) is reported.
    let mut text = std::fs::read_to_string(&files_b[0]).unwrap();
    text.push_str("{\"type\":\"custom-title\",\"customTitle\":\"x\",\"sessionId\":\"s\"}\n");
    std::fs::write(&files_b[0], text).unwrap();
    assert_eq!(behind(&b), 1, "status: one line behind");
}

/// A running `serve`, killed if the test ends first.
struct Serve(std::process::Child);

impl Drop for Serve {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            sigkill(&mut self.0);
        }
    }
}

/// A `serve` of machine `m` on `db`, with short leases.
fn serve(h: &Host, m: &Machine, db: &str) -> (Serve, u16) {
    serve_leased(h, m, db, 2)
}

/// A `serve` of machine `m` on `db`, with leases of `secs`.
fn serve_leased(h: &Host, m: &Machine, db: &str, secs: u64) -> (Serve, u16) {
    let mut c = m.cmd(h, db);
    c.env("CLAUDE_HOST_CONNECTION_TOKEN", "durable-test-token")
        .env("CLAUDE_HOST_SESSION_LEASE_SECS", secs.to_string());
    let (child, port, _) = super::serve::start(c);
    (Serve(child), port)
}

#[allow(unsafe_code)]
fn sigkill(child: &mut std::process::Child) {
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGKILL);
    }
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_mid_turn_hands_the_session_over_with_every_entry() {
    let pg = PgCluster::shared();
    let db = pg.create_database().unwrap();
    let h = Host::new().await;
    h.fake.push(always(
        Match::LastUserContains("list the files".into()),
        Reply::tool_use(
            "Bash",
            serde_json::json!({"command": "touch a-was-here.txt", "description": "mark"}),
        ),
    ));
    h.fake.push(always(
        Match::LastUserContains("what did I ask".into()),
        Reply::text("To list the files."),
    ));
    h.fake.push(always(Match::Always, Reply::text("ok")));
    let (a, b) = (Machine::new(), Machine::new());
    let (mut serve_a, port_a) = serve(&h, &a, &db);
    let (mut serve_b, port_b) = serve(&h, &b, &db);

    let mut wa = Ws::connect(port_a, "durable-test-token").await;
    let (session, id, chat) = wa.new_session(&a).await;
    let t1 = wa.turn(&chat, "first: say ok").await;
    assert_eq!(
        wa.turn_end(&t1).await["action"]["type"],
        "chat/turnComplete"
    );

    // B lists it under the URI its client chose (once A's record is written: off A's turn).
    let mut wb = Ws::connect(port_b, "durable-test-token").await;
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let listed = wb.ok("listSessions", serde_json::json!({})).await;
        if let Some(item) = listed["items"]
            .as_array()
            .and_then(|items| items.iter().find(|i| i["resource"] == session.as_str()))
        {
            let last = item["_meta"]["lastHost"].as_str().unwrap_or_default();
            assert!(last.contains("(pid "), "the host that ran it: {item}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never listed on B: {listed}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    // A's second turn waits for the user to confirm a Bash call: mid-turn.
    let t2 = wa.turn(&chat, "list the files").await;
    wa.action("the Bash confirmation", |x| {
        x["action"]["type"] == "chat/toolCallReady" && x["action"]["confirmed"].is_null()
    })
    .await;
    let file_a = a.transcripts().pop().unwrap();
    until("the store has all A's CLI wrote", || {
        stored(pg, &db, &id) == lines(&file_a)
    })
    .await;
    let before = stored(pg, &db, &id);

    // While A holds it, B is told who does, and nothing changes.
    let held = wb
        .request("subscribe", serde_json::json!({"channel": session}))
        .await;
    assert_eq!(held["error"]["code"], -32009, "{held}");
    let message = held["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("held by") && message.contains("(pid "),
        "{message}"
    );
    assert!(held["error"]["data"]["heldBy"].is_string(), "{held}");
    assert!(b.transcripts().is_empty(), "nothing brought to B");
    let name = db.rsplit('/').next().unwrap();
    let a_pid = format!("(pid {})", serve_a.0.id());
    let holder = pg
        .psql(
            name,
            &format!("SELECT holder FROM session_leases WHERE session_id = '{id}'"),
        )
        .unwrap();
    assert!(holder.ends_with(&a_pid), "A still holds it: {holder}");
    let host = pg
        .psql(
            name,
            &format!("SELECT host FROM sessions WHERE id = '{id}'"),
        )
        .unwrap();
    assert!(host.ends_with(&a_pid), "A still ran it last: {host}");
    assert!(stored(pg, &db, &id) >= before, "nothing taken away");

    // What A's CLI has written (it may still be writing), all of it stored, then A dies.
    let a_lines = std::fs::read_to_string(&file_a).unwrap();
    let a_count = a_lines
        .lines()
        .filter(|l| !l.contains("\"type\":\"api-request"))
        .count();
    until("the store has A's lines", || {
        stored(pg, &db, &id) >= a_count
    })
    .await;
    sigkill(&mut serve_a.0);
    let _ = t2;

    // Once A's lease runs out, B takes the session over with A's whole transcript.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let r = wb
            .request("subscribe", serde_json::json!({"channel": session}))
            .await;
        if r.get("error").is_none() {
            break;
        }
        assert_eq!(r["error"]["code"], -32009, "{r}");
        assert!(std::time::Instant::now() < deadline, "never free: {r}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    wb.ok("subscribe", serde_json::json!({"channel": chat}))
        .await;
    let t3 = wb.turn(&chat, "what did I ask?").await;
    assert_eq!(
        wb.turn_end(&t3).await["action"]["type"],
        "chat/turnComplete"
    );
    let last = h.fake.message_requests().pop().unwrap();
    let body = String::from_utf8_lossy(&last.body).into_owned();
    for text in ["first: say ok", "list the files", "what did I ask?"] {
        assert!(body.contains(text), "{text} in the history");
    }
    // Every entry A's CLI wrote before it died is in B's copy, in order.
    let file_b = b.transcripts().pop().unwrap();
    let b_text = std::fs::read_to_string(&file_b).unwrap();
    let a_kept: Vec<&str> = a_lines
        .lines()
        .filter(|l| !l.contains("\"type\":\"api-request"))
        .collect();
    let b_all: Vec<&str> = b_text.lines().collect();
    assert!(b_all.len() > a_kept.len());
    for (i, l) in a_kept.iter().enumerate() {
        let (x, y): (Value, Value) = (
            serde_json::from_str(l).unwrap(),
            serde_json::from_str(b_all[i]).unwrap(),
        );
        assert_eq!(x, y, "entry {i}");
    }
    super::serve::stop(&mut serve_b.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted_mid_turn_the_turn_completes_once_the_store_has_caught_up() {
    // A cluster of its own: this test stops it.
    let pg = PgCluster::start().unwrap();
    let db = pg.create_database().unwrap();
    let h = Host::new().await;
    h.fake.push(always(
        Match::LastUserContains("make a file".into()),
        Reply::tool_use(
            "Bash",
            serde_json::json!({"command": "touch made.txt", "description": "make"}),
        ),
    ));
    h.fake
        .push(always(Match::HasToolResult, Reply::text("Made it.")));
    let a = Machine::new();
    // A restart shorter than the lease: the host keeps driving the session (a longer outage
    // stops it: see the partition tests).
    let (mut serve_a, port) = serve_leased(&h, &a, &db, 30);
    let mut w = Ws::connect(port, "durable-test-token").await;
    let (_, id, chat) = w.new_session(&a).await;
    let turn = w.turn(&chat, "make a file").await;
    let ready = w
        .action("the Bash confirmation", |x| {
            x["action"]["type"] == "chat/toolCallReady" && x["action"]["confirmed"].is_null()
        })
        .await;
    let stored_before = stored(&pg, &db, &id);
    assert!(stored_before > 0, "mirrored while the database was up");
    pg.stop().unwrap();
    w.dispatch(
        &chat,
        serde_json::json!({"type": "chat/toolCallConfirmed", "turnId": turn,
            "toolCallId": ready["action"]["toolCallId"], "approved": true, "confirmed": "user-action"}),
    )
    .await;
    // The turn goes on while the database is down; its completion waits for the store.
    let made = a.dir.path().join("work/made.txt");
    until("the tool ran", || made.exists()).await;
    pg.resume().unwrap();
    let end = w.turn_end(&turn).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");
    // Reported complete only once stored: the turn's answer is in the store already.
    let after = stored(&pg, &db, &id);
    assert!(after > stored_before);
    let name = db.rsplit('/').next().unwrap();
    let answer = pg
        .psql(
            name,
            &format!("SELECT COUNT(*) FROM transcript_entries WHERE session_id = '{id}' AND entry::text LIKE '%Made it.%'"),
        )
        .unwrap();
    assert_ne!(
        answer, "0",
        "the turn's answer was stored before the turn completed"
    );
    let file = a.transcripts().pop().unwrap();
    until("the store catches up with the local file", || {
        stored(&pg, &db, &id) == lines(&file)
    })
    .await;
    super::serve::stop(&mut serve_a.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_database_urls_are_one_line_each_and_write_nothing() {
    let pg = PgCluster::shared();
    let h = Host::new().await;
    let good = pg.create_database().unwrap();
    // A database a newer claude-host has migrated.
    let newer = pg.create_database().unwrap();
    let m = Machine::new();
    let mut c = m.cmd(&h, &newer);
    c.args(["sessions", "list"]);
    assert!(blocking(move || run(c)).await.status.success());
    let newer_name = newer.rsplit('/').next().unwrap();
    pg.psql(newer_name, "UPDATE claude_host_schema SET version = 99")
        .unwrap();
    let cases = [
        (
            good.replace(claude_host_testkit::pg::PASSWORD, "wrong"),
            "authentication failed",
        ),
        (pg.url("missing_db"), "missing_db"),
        (
            "postgres://u:pw@127.0.0.1:1/x".to_owned(),
            "cannot reach the server",
        ),
        ("postgres://u:pw@[::1/x".to_owned(), "invalid URL"),
        (newer.clone(), "schema version 99"),
    ];
    for (url, says) in cases {
        let m = Machine::new();
        for args in [vec!["sessions", "list"], vec!["run", "hello"]] {
            let mut c = m.cmd(&h, &url);
            c.args(&args);
            let out = blocking(move || run(c)).await;
            assert!(!out.status.success(), "{url}");
            let err = String::from_utf8_lossy(&out.stderr);
            let line: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
            assert_eq!(line.len(), 1, "{err}");
            assert!(line[0].contains(says), "{url}: {err}");
            assert!(
                !err.contains("wrong") || !url.contains("wrong"),
                "no password: {err}"
            );
            assert!(!err.contains(claude_host_testkit::pg::PASSWORD), "{err}");
        }
        assert!(m.transcripts().is_empty());
        assert!(
            !m.dir
                .path()
                .join("claude-host-home/sessions.sqlite")
                .exists(),
            "nothing written locally"
        );
    }
    assert!(h.fake.message_requests().is_empty(), "no turn ran");
    assert_eq!(
        pg.psql(newer_name, "SELECT version FROM claude_host_schema")
            .unwrap(),
        "99",
        "the newer database is left as it was"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_moved_by_hand_with_export_and_import() {
    let pg = PgCluster::shared();
    let db = pg.create_database().unwrap();
    let h = Host::new().await;
    h.fake.push(always(
        Match::LastUserContains("remember kiwi".into()),
        Reply::text("Kiwi noted."),
    ));
    h.fake.push(always(
        Match::LastUserContains("which fruit".into()),
        Reply::text("Kiwi."),
    ));
    // A keeps its sessions to itself (no database).
    let a = Machine::new();
    let mut c = h.cmd();
    c.env("HOME", a.dir.path())
        .env("CLAUDE_HOST_HOME", a.dir.path().join("claude-host-home"))
        .current_dir(a.dir.path().join("work"))
        .args(["run", "remember kiwi"]);
    assert!(blocking(move || run(c)).await.status.success());
    let file_a = a.transcripts().pop().unwrap();
    let id = file_a.file_stem().unwrap().to_str().unwrap().to_owned();
    let export = a.dir.path().join("kiwi.jsonl");
    let mut c = h.cmd();
    c.env("HOME", a.dir.path())
        .env("CLAUDE_HOST_HOME", a.dir.path().join("claude-host-home"))
        .args(["sessions", "export", &id, "--out", export.to_str().unwrap()]);
    assert!(blocking(move || run(c)).await.status.success());
    let text = std::fs::read_to_string(&export).unwrap();
    assert_eq!(
        text.lines().count(),
        lines(&file_a) + 1,
        "a header and every entry"
    );

    // B imports it, into its projects folder and the database, and resumes it.
    let b = Machine::new();
    let mut c = b.cmd(&h, &db);
    c.args(["sessions", "import", export.to_str().unwrap()]);
    assert!(blocking(move || run(c)).await.status.success());
    assert_eq!(stored(pg, &db, &id), lines(&file_a));
    let mut c = b.cmd(&h, &db);
    c.args(["sessions", "import", export.to_str().unwrap()]);
    let again = blocking(move || run(c)).await;
    assert!(!again.status.success(), "a second import needs --force");
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    let mut c = b.cmd(&h, &db);
    c.args(["run", "--resume", &id, "which fruit did I say?"]);
    let out = blocking(move || run(c)).await;
    assert!(out.status.success());
    assert_eq!(stdout(&out).trim(), "Kiwi.");
    let last = h.fake.message_requests().pop().unwrap();
    assert!(String::from_utf8_lossy(&last.body).contains("remember kiwi"));
    // A file that is not an export is refused, naming the problem.
    let junk = b.dir.path().join("junk.jsonl");
    std::fs::write(&junk, "{\"type\":\"user\"}\n").unwrap();
    let mut c = b.cmd(&h, &db);
    c.args(["sessions", "import", junk.to_str().unwrap()]);
    let out = blocking(move || run(c)).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a claude-host session export"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagent_transcripts_are_stored_under_their_subpath_and_brought_back() {
    let pg = PgCluster::shared();
    let db = pg.create_database().unwrap();
    let h = Host::new().await;
    h.fake.push(always(
        Match::LastUserContains("ask a helper".into()),
        Reply::subagent_call("SUBPROMPT list the files"),
    ));
    h.fake.push(always(
        Match::LastUserContains("SUBPROMPT".into()),
        Reply::text("Nothing here."),
    ));
    h.fake.push(always(
        Match::HasToolResult,
        Reply::text("The helper found nothing."),
    ));
    h.fake.push(always(Match::Always, Reply::text("ok")));
    let (a, b) = (Machine::new(), Machine::new());
    let mut c = a.cmd(&h, &db);
    c.args([
        "run",
        "--permission-mode",
        "bypassPermissions",
        "ask a helper",
    ]);
    let out = blocking(move || run(c)).await;
    assert!(out.status.success());
    let main = a.transcripts().pop().unwrap();
    let id = main.file_stem().unwrap().to_str().unwrap().to_owned();
    let sub_dir = main.with_extension("").join("subagents");
    let subs: Vec<PathBuf> = std::fs::read_dir(&sub_dir)
        .unwrap_or_else(|e| panic!("{}: {e}", sub_dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("jsonl"))
        .collect();
    assert_eq!(subs.len(), 1, "{subs:?}");
    let sub_name = subs[0].file_stem().unwrap().to_str().unwrap().to_owned();
    let name = db.rsplit('/').next().unwrap();
    let stored_subs = pg
        .psql(
            name,
            &format!(
                "SELECT subpath || ':' || COUNT(*) FROM transcript_entries WHERE session_id = '{id}' AND subpath <> '' GROUP BY subpath"
            ),
        )
        .unwrap();
    assert_eq!(
        stored_subs,
        format!("subagents/{sub_name}:{}", lines(&subs[0]))
    );
    // B brings both back when it resumes the session.
    let mut c = b.cmd(&h, &db);
    c.args(["run", "--resume", &id, "thanks"]);
    assert!(blocking(move || run(c)).await.status.success());
    let b_main = b.transcripts().pop().unwrap();
    let b_sub = b_main
        .with_extension("")
        .join("subagents")
        .join(format!("{sub_name}.jsonl"));
    assert_eq!(lines(&b_sub), lines(&subs[0]));
}
