//! Sessions kept in PostgreSQL: mirrored, listed and resumed on another host, leased, moved by
//! hand. Each "host" is its own HOME and data directory on this machine, sharing a real
//! PostgreSQL server (a private cluster) and the fake upstream.

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
}
