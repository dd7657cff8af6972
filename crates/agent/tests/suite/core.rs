//! The session core: one owner per session, one ordered stream, and the defects the old
//! design had (each test names the one it guards against).

use super::*;
use ahp_types::actions::{ActionOrigin, StateAction};
use ahp_types::state::{ChatState, SessionState};
use claude_host_agent::{ChannelKind, ChatSessionError, SessionEvent, SessionHandle};
use claude_host_store::{SessionRecord, SqliteStore, Store, StoreError};
use claude_host_testkit::fake::{Match, Reply, Rule};
use claude_host_testkit::fake_cli::{RESULT_FRAME, Scenario, write};
use pretty_assertions::assert_eq;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

fn origin(seq: i64) -> ActionOrigin {
    ActionOrigin {
        client_id: "test-client".into(),
        client_seq: seq,
    }
}

fn action(v: serde_json::Value) -> StateAction {
    serde_json::from_value(v).unwrap()
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

/// A fake CLI that waits at start-up until the test writes a line to `gate` (a FIFO), then
/// answers every control request and ends each user message's turn with a result. It tells
/// its pid through `pid` (a FIFO) first, and logs the user lines it gets to `users`.
fn gated_cli(dir: &Path) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
    let gate = dir.join("gate.fifo");
    let pid = dir.join("pid.fifo");
    let users = dir.join("users.log");
    mkfifo(&gate);
    mkfifo(&pid);
    let cli = scripted_cli(
        dir,
        "gated",
        &format!(
            "echo $$ > '{}'\nread -r go < '{}'",
            pid.display(),
            gate.display()
        ),
        &format!(
            r#"printf '%s\n' "$line" >> '{}'
      echo '{{"type":"system","subtype":"init","session_id":"s"}}'
      echo "$RESULT""#,
            users.display()
        ),
    );
    (cli, gate, pid, users)
}

/// A fake CLI: runs `start` first, then answers control requests with success and runs
/// `on_user` for each user line (in `$line`; `$RESULT` holds a result frame).
fn scripted_cli(dir: &Path, name: &str, start: &str, on_user: &str) -> PathBuf {
    let script = format!(
        r#"RESULT='{RESULT_FRAME}'
reply() {{
  id=$(printf '%s' "$1" | sed -E 's/.*"request_id":"([^"]+)".*/\1/')
  printf '{{"type":"control_response","response":{{"subtype":"success","request_id":"%s","response":{{}}}}}}\n' "$id"
}}
{start}
while IFS= read -r line; do
  case "$line" in
    *'"control_request"'*) reply "$line" ;;
    *'"type":"user"'*) {on_user} ;;
  esac
done
"#
    );
    let sub = dir.join(name);
    std::fs::create_dir_all(&sub).unwrap();
    write(&sub, &Scenario::Custom(script)).unwrap()
}

async fn read_fifo(path: &Path) -> String {
    let path = path.to_owned();
    tokio::time::timeout(
        WAIT,
        tokio::task::spawn_blocking(move || std::fs::read_to_string(path).unwrap()),
    )
    .await
    .expect("the fake CLI started")
    .unwrap()
}

async fn open_gate(gate: &Path) {
    let gate = gate.to_owned();
    tokio::task::spawn_blocking(move || std::fs::write(gate, "go\n").unwrap())
        .await
        .unwrap();
}

/// Everything a subscriber got, reduced onto the snapshot it started from; a resync replaces
/// the state. Returns the final states and whether a resync happened.
async fn mirror(
    handle: &SessionHandle,
    session: &mut SessionState,
    chat: &mut ChatState,
    sub: &mut claude_host_agent::SessionSubscription,
) -> (usize, Vec<u64>) {
    let mut resyncs = 0;
    let mut seqs = Vec::new();
    for ev in sub.drain().await {
        match ev {
            SessionEvent::Action(p) => {
                seqs.push(p.seq());
                if p.is_rejection() {
                    continue;
                }
                if p.channel() == handle.chat_uri() {
                    ahp::reducers::apply_action_to_chat(chat, p.action());
                } else {
                    ahp::reducers::apply_action_to_session(session, p.action());
                }
            }
            SessionEvent::Resync(s) => {
                resyncs += 1;
                *session = s.session;
                *chat = s.chat;
            }
        }
    }
    (resyncs, seqs)
}

/// A subscriber reads nothing during a 10,000-delta turn (and, with `close_first`, until the
/// session has closed), then reads everything: its state ends equal to the server's.
async fn stalled_subscriber_ends_equal(replay: usize, close_first: bool) -> (usize, Vec<u64>) {
    let e = env().await;
    e.fake.push(Rule {
        when: Match::LastUserContains("flood".into()),
        reply: Reply::many_deltas(10_000),
        times: None,
    });
    let mut spec = claude_host_agent::StandaloneSession::new(e.opts());
    spec.replay_capacity = replay;
    let s = claude_host_agent::standalone_session(spec);
    let (snapshot, mut sub) = s.subscribe().await.unwrap();
    let (mut session, mut chat) = (snapshot.session, snapshot.chat);
    // The subscriber reads nothing while the whole turn streams.
    tokio::time::timeout(WAIT, s.send("flood me"))
        .await
        .unwrap()
        .unwrap();
    let server = s.snapshot().await.unwrap();
    if close_first {
        s.close().await;
    }
    let (resyncs, seqs) = mirror(&s, &mut session, &mut chat, &mut sub).await;
    if close_first {
        let end = tokio::time::timeout(WAIT, sub.recv()).await.unwrap();
        assert!(end.is_none(), "the stream ends after the last action");
    }
    assert_eq!(
        serde_json::to_value(&chat).unwrap(),
        serde_json::to_value(&server.chat).unwrap(),
        "the stalled subscriber's chat is the server's"
    );
    assert_eq!(
        serde_json::to_value(&session).unwrap(),
        serde_json::to_value(&server.session).unwrap()
    );
    let deltas = chat.turns[0]
        .response_parts
        .iter()
        .find_map(|p| match p {
            ahp_types::state::ResponsePart::Markdown(m) => Some(m.content.split(' ').count()),
            _ => None,
        })
        .unwrap();
    assert!(
        deltas > 10_000,
        "the whole answer is there ({deltas} words)"
    );
    (resyncs, seqs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_stops_reading_catches_up_from_the_replay_ring_without_a_gap() {
    let (resyncs, seqs) = stalled_subscriber_ends_equal(50_000, false).await;
    assert_eq!(resyncs, 0, "the ring held everything it missed");
    assert!(seqs.len() > 10_000);
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "every action once, in order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_falls_behind_the_ring_is_resynchronised_visibly() {
    let (resyncs, seqs) = stalled_subscriber_ends_equal(64, false).await;
    assert!(resyncs >= 1, "told it was resynchronised");
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "never backwards");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_behind_when_the_session_closes_still_gets_every_action() {
    let (resyncs, seqs) = stalled_subscriber_ends_equal(50_000, true).await;
    assert_eq!(
        resyncs, 0,
        "what the session left held everything it missed"
    );
    assert!(seqs.len() > 10_000);
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_behind_the_ring_when_the_session_closes_is_resynchronised() {
    let (resyncs, _) = stalled_subscriber_ends_equal(64, true).await;
    assert!(resyncs >= 1, "resynchronised from the session's last state");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_during_cli_start_up_one_runs_a_second_is_refused_and_a_cancel_is_taken() {
    let e = env().await;
    let (cli, gate, pid, users) = gated_cli(e.dir.path());
    let mut opts = e.opts();
    opts.cli = cli;
    let s = e.session(opts);
    let mut rx = s.subscribe().await.unwrap().1;
    let turn = |id: &str| {
        action(json!({"type": "chat/turnStarted", "turnId": id,
            "startedAt": "2026-01-01T00:00:00.000Z",
            "message": {"text": format!("prompt {id}"), "origin": {"kind": "user"}}}))
    };
    s.dispatch(ChannelKind::Chat, turn("t1"), origin(1))
        .await
        .unwrap();
    s.dispatch(ChannelKind::Chat, turn("t2"), origin(2))
        .await
        .unwrap();
    s.dispatch(
        ChannelKind::Chat,
        action(json!({"type": "chat/turnCancelled", "turnId": "t1", "duration": 5})),
        origin(3),
    )
    .await
    .unwrap();
    // Every dispatch comes back: echoed or refused, in order.
    let mut echoes = Vec::new();
    while echoes.len() < 3 {
        let ev = tokio::time::timeout(WAIT, rx.recv())
            .await
            .unwrap()
            .unwrap();
        if let SessionEvent::Action(p) = ev
            && let Some(o) = &p.envelope.origin
        {
            echoes.push((o.client_seq, p.envelope.rejection_reason.clone()));
        }
    }
    assert_eq!(echoes[0], (1, None));
    assert_eq!(echoes[1].0, 2);
    assert!(
        echoes[1]
            .1
            .as_deref()
            .is_some_and(|r| r.contains("already running")),
        "{echoes:?}"
    );
    assert_eq!(echoes[2], (3, None), "a cancel during start-up is taken");
    // All of it happened while the CLI was still starting.
    let pid: i32 = read_fifo(&pid).await.trim().parse().unwrap();
    assert_eq!(s.status().cli_pgid, None, "still starting");
    assert_eq!(s.status().materializations, 1);
    let state = s.state().await;
    assert_eq!(state.turns.len(), 1);
    assert_eq!(state.turns[0].id, "t1");
    assert_eq!(
        serde_json::to_value(state.turns[0].state).unwrap(),
        "cancelled"
    );
    assert!(state.active_turn.is_none());

    open_gate(&gate).await;
    let live = tokio::time::timeout(WAIT, s.watch_status().wait_for(|st| st.cli_pgid.is_some()))
        .await
        .unwrap()
        .unwrap()
        .cli_pgid;
    assert_eq!(live, Some(pid));
    s.send("after the cancel").await.unwrap();
    let sent = std::fs::read_to_string(&users).unwrap();
    assert_eq!(
        sent.lines().count(),
        1,
        "the cancelled prompt never reached the CLI: {sent}"
    );
    assert!(sent.contains("after the cancel"));
    s.close().await;
    assert!(group_gone(pid).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_during_cli_start_up_leaves_no_task_no_process_and_no_stream() {
    let e = env().await;
    let (cli, _gate, pid, _users) = gated_cli(e.dir.path());
    let agent = e.agent_with(None, |c| c.cli = cli).await;
    let s = agent.create_session(Default::default()).await.unwrap();
    assert_eq!(agent.running_sessions(), 1);
    let (_, mut sub) = s.subscribe().await.unwrap();
    let turn = tokio::spawn({
        let s = s.clone();
        async move { s.send("never sent").await }
    });
    let pid: i32 = read_fifo(&pid).await.trim().parse().unwrap();
    tokio::time::timeout(WAIT, agent.dispose_session(s.id()))
        .await
        .unwrap()
        .unwrap();
    // Counted, not assumed: the task, the process group, the registry entry, the stream.
    assert_eq!(agent.running_sessions(), 0, "the session's task ended");
    assert!(group_gone(pid).await, "the half-started CLI was killed");
    assert!(agent.session(s.id()).is_none());
    assert!(agent.live_sessions().is_empty());
    let turn = tokio::time::timeout(WAIT, turn).await.unwrap().unwrap();
    assert!(
        turn.is_ok(),
        "the turn ended (cancelled) with the session: {turn:?}"
    );
    loop {
        match tokio::time::timeout(WAIT, sub.recv()).await.unwrap() {
            None => break,
            Some(_) => continue,
        }
    }
    assert!(s.is_closed());
    assert!(matches!(
        s.send("more").await,
        Err(ChatSessionError::Closed)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_is_tracked_only_while_its_turn_runs() {
    let e = env().await;
    for round in 0..2 {
        let file = e.dir.path().join(format!("work/tracked{round}.txt"));
        e.fake.push(Rule {
            when: Match::LastUserContains(format!("track round {round}")),
            reply: Reply::tool_use(
                "Write",
                json!({"file_path": file.to_str().unwrap(), "content": "t"}),
            ),
            times: None,
        });
    }
    e.fake.push(Rule {
        when: Match::HasToolResult,
        reply: Reply::text("done"),
        times: None,
    });
    let s = Arc::new(e.session(e.opts()));
    for round in 0..2 {
        let turn = tokio::spawn({
            let s = s.clone();
            async move { s.send(&format!("track round {round}")).await }
        });
        let id = s.next_confirmation(WAIT).await.unwrap();
        assert_eq!(s.status().tracked_tool_calls, 1, "round {round}");
        s.confirm_tool(&id, claude_host_agent::Confirmation::Approve)
            .await
            .unwrap();
        tokio::time::timeout(WAIT, turn)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(
            s.status().tracked_tool_calls,
            0,
            "nothing kept once the turn is over (round {round})"
        );
    }
}

/// The user's own `claude -p` run (a transcript this host did not write).
async fn plain_session(e: &Env, prompt: &str) -> String {
    claude_host_testkit::cli::plain_claude_p(
        prompt,
        &[],
        e.dir.path(),
        &e.dir.path().join(".claude"),
        &e.dir.path().join("work"),
        &e.proxy.base_url(),
        &e.proxy.auth_token("plain"),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_session_nobody_uses_is_closed_and_forgotten() {
    let e = env().await;
    let id = plain_session(&e, "an old conversation").await;
    let agent = e
        .agent_with(None, |c| c.idle_eviction = Duration::from_millis(300))
        .await;
    let s = agent.open_session(&id).await.unwrap();
    assert_eq!(agent.running_sessions(), 1);
    {
        let (_, _sub) = s.subscribe().await.unwrap();
        // Subscribed: kept for well over the idle period.
        assert!(
            tokio::time::timeout(Duration::from_millis(1500), s.closed())
                .await
                .is_err(),
            "a subscribed session stays open"
        );
    }
    tokio::time::timeout(WAIT, s.closed())
        .await
        .expect("closed once nobody uses it");
    assert!(agent.session(&id).is_none(), "forgotten by the registry");
    assert_eq!(agent.running_sessions(), 0);
    // It can be opened again.
    let again = agent.open_session(&id).await.unwrap();
    assert_eq!(
        again.state().await.turns[0].message.text,
        "an old conversation"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_session_keeps_its_title_and_the_next_prompt_does_not_rename_it() {
    let e = env().await;
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&e.dir.path().join("host.sqlite"))
            .await
            .unwrap(),
    );
    let agent = e.agent(Some(store.clone())).await;
    let s = agent.create_session(Default::default()).await.unwrap();
    s.send("the first prompt").await.unwrap();
    s.dispatch(
        ChannelKind::Session,
        action(json!({"type": "session/titleChanged", "title": "Named by the user"})),
        origin(1),
    )
    .await
    .unwrap();
    s.flush().await.unwrap();
    let id = s.id().to_owned();
    agent.dispose_session(&id).await.unwrap();

    let back = agent.open_session(&id).await.unwrap();
    let snap = back.snapshot().await.unwrap();
    assert_eq!(snap.session.title, "Named by the user");
    back.send("a second prompt").await.unwrap();
    back.flush().await.unwrap();
    assert_eq!(
        back.snapshot().await.unwrap().session.title,
        "Named by the user",
        "not renamed by the next prompt"
    );
    assert_eq!(
        store.get(&id).await.unwrap().unwrap().title.as_deref(),
        Some("Named by the user")
    );
}

/// The real store, with reads failing on demand.
struct FlakyStore {
    inner: SqliteStore,
    fail_reads: std::sync::atomic::AtomicBool,
    writes: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl Store for FlakyStore {
    async fn put(
        &self,
        record: &SessionRecord,
        fence: Option<&claude_host_store::Fence>,
    ) -> Result<(), StoreError> {
        self.writes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.put(record, fence).await
    }
    async fn get(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        if self.fail_reads.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(StoreError::Query("injected read failure".into()));
        }
        self.inner.get(id).await
    }
    async fn list(&self, include_archived: bool) -> Result<Vec<SessionRecord>, StoreError> {
        self.inner.list(include_archived).await
    }
    async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        self.inner.delete(id).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_store_record_is_never_overwritten() {
    let e = env().await;
    let id = plain_session(&e, "kept as it was").await;
    let store = Arc::new(FlakyStore {
        inner: SqliteStore::open(&e.dir.path().join("host.sqlite"))
            .await
            .unwrap(),
        fail_reads: std::sync::atomic::AtomicBool::new(false),
        writes: std::sync::atomic::AtomicUsize::new(0),
    });
    let kept = SessionRecord {
        id: id.clone(),
        resource: None,
        read: false,
        host: None,
        decisions: None,
        title: Some("Archived long ago".into()),
        model: None,
        effort: None,
        permission_mode: None,
        cwd: e.dir.path().join("work").display().to_string(),
        created_at: 1,
        updated_at: 2,
        archived: true,
    };
    store.inner.put(&kept, None).await.unwrap();
    store
        .fail_reads
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let agent = e.agent(Some(store.clone())).await;
    let s = agent.open_session(&id).await.unwrap();
    s.send("one more turn").await.unwrap();
    s.flush().await.unwrap();
    assert_eq!(
        store.writes.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "nothing written over a record that could not be read"
    );
    assert_eq!(store.inner.get(&id).await.unwrap(), Some(kept));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_the_cli_starts_on_its_own_ends_when_it_goes_idle_without_a_result() {
    let e = env().await;
    // Our turn ends with a result; then the CLI runs a turn of its own that reports no result.
    let cli = scripted_cli(
        e.dir.path(),
        "own-turn",
        "",
        r#"echo "$RESULT"
      echo '{"type":"system","subtype":"session_state_changed","state":"idle"}'
      echo '{"type":"system","subtype":"session_state_changed","state":"running"}'
      echo '{"type":"assistant","message":{"id":"m9","type":"message","role":"assistant","content":[{"type":"text","text":"background note"}]},"session_id":"s"}'
      echo '{"type":"system","subtype":"session_state_changed","state":"idle"}'"#,
    );
    let mut opts = e.opts();
    opts.cli = cli;
    let s = e.session(opts);
    let mut rx = Actions::of(&s).await;
    s.send("first").await.unwrap();
    let mut ended = Vec::new();
    while ended.len() < 2 {
        let v = serde_json::to_value(rx.recv().await).unwrap();
        if v["type"] == "chat/turnComplete" {
            ended.push(v["turnId"].as_str().unwrap().to_owned());
        }
    }
    let state = serde_json::to_value(s.state().await).unwrap();
    let turns = state["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2, "{state}");
    assert_eq!(turns[1]["id"], json!(ended[1]));
    assert_eq!(turns[1]["state"], "complete");
    assert!(turns[1].to_string().contains("background note"), "{state}");
    assert!(state["activeTurn"].is_null(), "{state}");
    // The session is free for the next prompt.
    let next = tokio::time::timeout(WAIT, s.send("second")).await.unwrap();
    assert!(next.is_ok(), "{next:?}");
    s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_the_cli_cannot_take_fails_alone_and_the_queued_one_gets_a_new_cli() {
    let e = env().await;
    let marker = e.dir.path().join("second-start");
    // The first CLI closes its input right after `initialize` yet stays alive; a second one
    // behaves.
    let first_start = format!(
        r#"if [ ! -e '{m}' ]; then
  : > '{m}'
  IFS= read -r line
  exec 0<&-
  reply "$line"
  exec sleep 600
fi"#,
        m = marker.display()
    );
    let mut opts = e.opts();
    opts.cli = scripted_cli(e.dir.path(), "deaf", &first_start, r#"echo "$RESULT""#);
    let s = e.session(opts);
    // Polled in order: the first opens a turn, the second queues behind it.
    let (first, second) = tokio::time::timeout(WAIT, async {
        tokio::join!(s.send("first"), s.send("second"))
    })
    .await
    .unwrap();
    assert!(
        matches!(first, Err(ChatSessionError::Session(_))),
        "{first:?}"
    );
    assert!(
        second.is_ok(),
        "the queued prompt ran on a new CLI: {second:?}"
    );
    assert_eq!(s.status().materializations, 2);
    assert_eq!(turn_states(&s).await, ["error", "complete"]);
    s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_cli_stops_and_comes_back_resumed_never_while_anything_waits() {
    let e = env().await;
    let file = e.dir.path().join("work").join("w.txt");
    e.fake.push(claude_host_testkit::fake::Rule {
        when: claude_host_testkit::fake::Match::LastUserContains("write a file".into()),
        reply: claude_host_testkit::fake::Reply::tool_use(
            "Write",
            json!({"file_path": file.to_str().unwrap(), "content": "w"}),
        ),
        times: Some(1),
    });
    let meter = TestMeter::new();
    let agent = e
        .agent_with(None, |c| {
            c.cli_idle = Some(Duration::from_millis(300));
            c.meter = Some(meter.meter());
        })
        .await;
    let s = agent.create_session(Default::default()).await.unwrap();
    s.send("remember the word heliotrope").await.unwrap();
    assert!(s.wait_cli(false, WAIT).await, "stopped once idle");
    assert!(s.state().await.turns.len() == 1, "the session stays open");

    // A confirmation waiting keeps it, however long.
    let pending = {
        let s = s.clone();
        tokio::spawn(async move { s.send("please write a file").await })
    };
    let call = s.next_confirmation(WAIT).await.expect("a confirmation");
    let pgid = s.cli_pgid().await.expect("resumed for the prompt");
    assert!(
        !s.wait_cli(false, Duration::from_millis(1500)).await,
        "kept while a confirmation waits"
    );
    assert_eq!(s.cli_pgid().await, Some(pgid));
    s.confirm_tool(&call, claude_host_agent::Confirmation::Approve)
        .await
        .unwrap();
    pending.await.unwrap().unwrap();
    assert!(s.wait_cli(false, WAIT).await, "stopped again once idle");

    // Typing a prompt starts it ahead of the prompt; the prompt has the whole history.
    let started = s.status().materializations;
    s.dispatch(
        ChannelKind::Chat,
        action(json!({"type": "chat/draftChanged", "draft": {"text": "what was", "origin": {"kind": "user"}}})),
        origin(1),
    )
    .await
    .unwrap();
    assert!(
        s.wait_status(|st| st.materializations > started, WAIT)
            .await
            .is_some(),
        "started by the draft"
    );
    s.send("what was the word?").await.unwrap();
    let last = e.fake.message_requests().pop().unwrap().json().to_string();
    assert!(
        last.contains("heliotrope"),
        "resumed with the history: {last}"
    );
    // Counted for the host's metrics: three starts, two idle stops, no crash; then a crash.
    assert_eq!(meter.total("claude_host.cli.starts"), 3);
    assert_eq!(meter.total("claude_host.cli.evictions"), 2);
    assert_eq!(meter.total("claude_host.cli.crashes"), 0);
    let pgid = s.cli_pgid().await.unwrap();
    #[allow(unsafe_code)]
    // SAFETY: killing the CLI's own process group, as a crash would.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
    // Counted as the task learns of the exit, before its status shows no CLI.
    assert!(s.wait_cli(false, WAIT).await, "the crash was noticed");
    assert_eq!(meter.total("claude_host.cli.crashes"), 1);
}

/// A CLI that logs every line it reads to `<script>.log`, answers control requests, and ends
/// each turn at once.
const LOGGING_CLI: &str = r#"
while IFS= read -r line; do
  printf '%s\n' "$line" >> "$0.log"
  case "$line" in
    *'"control_request"'*)
      id=$(printf '%s' "$line" | sed -E 's/.*"request_id":"([^"]+)".*/\1/')
      printf '{"type":"control_response","response":{"subtype":"success","request_id":"%s","response":{}}}\n' "$id" ;;
    *'"type":"user"'*)
      echo '{"type":"system","subtype":"init","session_id":"s"}'
      echo "$RESULT" ;;
  esac
done
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_a_prompt_starts_the_cli_and_tells_it_between_turns_once_per_ten_seconds() {
    let e = env().await;
    let cli = write(
        e.dir.path(),
        &Scenario::Custom(format!("RESULT='{RESULT_FRAME}'\n{LOGGING_CLI}")),
    )
    .unwrap();
    let log = PathBuf::from(format!("{}.log", cli.display()));
    let mut opts = e.opts();
    opts.cli = cli;
    let s = e.session(opts);
    let told = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(r#""subtype":"prompt_draft_activity""#))
            .count()
    };
    let draft = |text: Option<&str>| {
        action(match text {
            Some(t) => json!({"type": "chat/draftChanged",
                "draft": {"text": t, "origin": {"kind": "user"}}}),
            None => json!({"type": "chat/draftChanged"}),
        })
    };
    assert!(s.cli_pgid().await.is_none(), "no CLI before anything asks");
    // The first key starts the CLI, which is told once it is up.
    s.dispatch(ChannelKind::Chat, draft(Some("w")), origin(1))
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    while told() == 0 {
        assert!(std::time::Instant::now() < deadline, "never told");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // More keys within ten seconds, and a cleared draft, tell it nothing more.
    for (i, text) in [Some("wh"), Some("wha"), None].into_iter().enumerate() {
        s.dispatch(ChannelKind::Chat, draft(text), origin(2 + i as i64))
            .await
            .unwrap();
    }
    s.send("what").await.unwrap();
    let lines = std::fs::read_to_string(&log).unwrap();
    let user_at = lines
        .lines()
        .position(|l| l.contains(r#""type":"user""#))
        .unwrap();
    let told_at = lines
        .lines()
        .position(|l| l.contains("prompt_draft_activity"))
        .unwrap();
    assert!(told_at < user_at, "told before the prompt:\n{lines}");
    assert_eq!(told(), 1, "told once:\n{lines}");
    assert_eq!(s.status().materializations, 1);
}

/// The roles of a model request's messages, in order.
fn roles(request: &serde_json::Value) -> Vec<&str> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect()
}

/// The session's transcript file, as text.
fn transcript_text(e: &Env, id: &str) -> String {
    let path = claude_host_sdk::transcripts::find_session(&e.dir.path().join(".claude"), id)
        .expect("a transcript");
    std::fs::read_to_string(path).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_started_ahead_of_a_prompt_runs_a_warm_up_turn_nobody_sees() {
    use claude_host_protocol::request_kind::WARM_UP_PROMPT;
    let e = env().await;
    let agent = e
        .agent_with(None, |c| c.cli_idle = Some(Duration::from_millis(300)))
        .await;
    let draft = |n: i64| async move {
        (
            action(
                json!({"type": "chat/draftChanged", "draft": {"text": "wh", "origin": {"kind": "user"}}}),
            ),
            origin(n),
        )
    };

    // A new session: the CLI started ahead of its first prompt warms up.
    let s = agent.create_session(Default::default()).await.unwrap();
    let (a, o) = draft(1).await;
    s.dispatch(ChannelKind::Chat, a, o).await.unwrap();
    assert!(s.wait_cli(true, WAIT).await, "started by the draft");
    assert!(
        transcript_text(&e, s.id()).contains(WARM_UP_PROMPT),
        "the warm-up turn ran"
    );
    assert!(
        e.fake.message_requests().is_empty(),
        "the proxy answered it"
    );
    assert!(s.state().await.turns.is_empty(), "no client sees it");

    // Stopped before any prompt, the session starts afresh: nothing of the warm-up is left.
    assert!(s.wait_cli(false, WAIT).await, "stopped once idle");
    s.send("remember the word heliotrope").await.unwrap();
    let first = e.fake.message_requests().pop().unwrap().json().to_string();
    assert!(
        !first.contains(WARM_UP_PROMPT),
        "the warm-up is not in the history"
    );
    assert!(first.contains("heliotrope"));

    // Stopped, opened again by a draft: warmed up once more; the prompt has the whole history
    // and none of the warm-up.
    assert!(s.wait_cli(false, WAIT).await, "stopped again once idle");
    let warm_ups = |e: &Env| transcript_text(e, s.id()).matches(WARM_UP_PROMPT).count();
    let before = warm_ups(&e);
    let (a, o) = draft(2).await;
    s.dispatch(ChannelKind::Chat, a, o).await.unwrap();
    assert!(s.wait_cli(true, WAIT).await);
    assert!(warm_ups(&e) > before, "warmed up again");
    s.send("what was the word?").await.unwrap();
    let requests = e.fake.message_requests();
    assert_eq!(requests.len(), 2, "the warm-ups never reached the upstream");
    let last = requests[1].json();
    let text = last.to_string();
    assert!(text.contains("heliotrope"), "resumed with the history");
    assert!(
        !text.contains(WARM_UP_PROMPT),
        "the warm-up is not in the history"
    );
    // The first prompt (with the CLI's environment message), its answer, the second prompt.
    assert_eq!(roles(&last), ["user", "system", "assistant", "user"]);
    assert_eq!(turn_states(&s).await, ["complete", "complete"]);
    // The transcript's conversation is the two turns.
    let t =
        claude_host_sdk::transcripts::read_session(&e.dir.path().join(".claude"), s.id()).unwrap();
    let chain = t.main_chain();
    assert!(
        chain
            .iter()
            .all(|m| !serde_json::to_string(m).unwrap().contains(WARM_UP_PROMPT)),
        "the warm-up is off the conversation's chain"
    );
    s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_warm_up_turn_where_a_hook_would_see_it() {
    use claude_host_protocol::request_kind::WARM_UP_PROMPT;
    let e = env().await;
    let settings = e.dir.path().join("work/.claude");
    std::fs::create_dir_all(&settings).unwrap();
    std::fs::write(
        settings.join("settings.json"),
        json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "true"}]}]}})
            .to_string(),
    )
    .unwrap();
    let agent = e.agent(None).await;
    let s = agent.create_session(Default::default()).await.unwrap();
    s.dispatch(
        ChannelKind::Chat,
        action(json!({"type": "chat/draftChanged", "draft": {"text": "w", "origin": {"kind": "user"}}})),
        origin(1),
    )
    .await
    .unwrap();
    assert!(s.wait_cli(true, WAIT).await);
    s.send("hello").await.unwrap();
    assert!(!transcript_text(&e, s.id()).contains(WARM_UP_PROMPT));
    s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_closed_with_only_a_warm_up_leaves_no_transcript() {
    let e = env().await;
    let agent = e.agent(None).await;
    let config = e.dir.path().join(".claude");
    let draft = || {
        action(
            json!({"type": "chat/draftChanged", "draft": {"text": "w", "origin": {"kind": "user"}}}),
        )
    };
    // Closed once warmed up, and closed while warming up (the close lets the cut finish).
    for wait_for_it in [true, false] {
        let s = agent.create_session(Default::default()).await.unwrap();
        s.dispatch(ChannelKind::Chat, draft(), origin(1))
            .await
            .unwrap();
        if wait_for_it {
            assert!(s.wait_cli(true, WAIT).await);
            assert!(
                claude_host_sdk::transcripts::find_session(&config, s.id()).is_ok(),
                "the warm-up wrote a transcript"
            );
        }
        let id = s.id().to_owned();
        s.close().await;
        assert!(
            claude_host_sdk::transcripts::find_session(&config, &id).is_err(),
            "nothing of the warm-up is left (waited: {wait_for_it})"
        );
    }
}

/// A host killed between its warm-up turn and the cut leaves the warm-up at the end of the
/// transcript. The next host shows none of it and resumes before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_up_left_uncut_by_a_killed_host_is_not_resumed() {
    use claude_host_protocol::request_kind::WARM_UP_PROMPT;
    use claude_host_protocol::stream_json::FrameKind;
    let e = env().await;
    let config = e.dir.path().join(".claude");
    let id = {
        let agent = e.agent(None).await;
        let s = agent.create_session(Default::default()).await.unwrap();
        s.send("remember the word heliotrope").await.unwrap();
        let id = s.id().to_owned();
        s.close().await;
        id
    };
    // What the killed host left: the CLI ran the warm-up turn on the resumed session, and
    // nothing cut it.
    let mut opts = claude_host_sdk::SessionOptions::new(
        claude_host_testkit::cli::pinned_cli().unwrap(),
        e.dir.path().join("work"),
        e.proxy.base_url(),
        e.proxy.auth_token(&id),
    );
    opts.config_dir = Some(config.clone());
    opts.resume = Some(id.clone());
    opts.extra_env
        .push(("HOME".into(), e.dir.path().display().to_string()));
    let mut cli =
        claude_host_sdk::ClaudeSession::spawn(opts, Arc::new(claude_host_sdk::DenyAll)).unwrap();
    cli.initialize(None, json!({})).await.unwrap();
    cli.send_user(
        json!([{"type": "text", "text": WARM_UP_PROMPT}]),
        Some(&uuid::Uuid::new_v4().to_string()),
        None,
    )
    .await
    .unwrap();
    loop {
        let frame = tokio::time::timeout(WAIT, cli.next_frame())
            .await
            .expect("the warm-up turn ends")
            .expect("the CLI is up")
            .unwrap();
        if frame.kind == FrameKind::Result {
            break;
        }
    }
    drop(cli);
    let t = claude_host_sdk::transcripts::read_session(&config, &id).unwrap();
    assert!(
        t.main_chain()
            .iter()
            .any(|m| serde_json::to_string(m).unwrap().contains(WARM_UP_PROMPT)),
        "the warm-up is on the conversation's chain"
    );
    let before = e.fake.message_requests().len();

    let agent = e.agent(None).await;
    let s = agent.open_session(&id).await.unwrap();
    let turns = s.state().await.turns;
    assert_eq!(turns.len(), 1, "only the real turn is restored");
    assert_eq!(turns[0].message.text, "remember the word heliotrope");
    s.send("what was the word?").await.unwrap();
    let requests = e.fake.message_requests();
    assert_eq!(requests.len(), before + 1);
    let last = requests[before].json();
    let text = last.to_string();
    assert!(text.contains("heliotrope"), "resumed with the history");
    assert!(!text.contains(WARM_UP_PROMPT), "resumed before the warm-up");
    assert_eq!(roles(&last), ["user", "system", "assistant", "user"]);
    assert_eq!(turn_states(&s).await, ["complete", "complete"]);
    s.close().await;
}

/// A transcript the host never saw, begun in `folder` (one prompt), as the CLI lays it out.
fn stored_transcript(e: &Env, folder: &Path) -> String {
    let id = uuid::Uuid::new_v4().to_string();
    let project = claude_host_sdk::transcripts::project_dir(&e.dir.path().join(".claude"), folder);
    std::fs::create_dir_all(&project).unwrap();
    let entry = json!({"type": "user", "uuid": uuid::Uuid::new_v4().to_string(),
        "parentUuid": null, "sessionId": id, "cwd": folder, "timestamp": "2026-01-01T00:00:00Z",
        "message": {"role": "user", "content": "hello from the folder"}});
    std::fs::write(project.join(format!("{id}.jsonl")), format!("{entry}\n")).unwrap();
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_sessions_folder_is_indexed_before_the_session_is_opened() {
    let e = env().await;
    let folder = e.dir.path().join("elsewhere");
    std::fs::create_dir_all(folder.join("notes")).unwrap();
    std::fs::write(folder.join("notes/findme.txt"), "").unwrap();
    let id = stored_transcript(&e, &folder);
    let agent = e.agent(None).await;

    // Without an overlay, the folder the transcript starts in.
    assert_eq!(agent.warm_file_index_of(&id).await, Some(folder.clone()));
    assert!(agent.session(&id).is_none(), "looked up, not opened");
    let found = agent
        .find_files(vec![folder.clone()], "findme".into(), 10)
        .await;
    assert_eq!(
        found
            .iter()
            .map(|m| m.relative.as_str())
            .collect::<Vec<_>>(),
        ["notes/findme.txt"]
    );
    // The folder the open gives the session, so its front end's warm-up finds it indexed.
    let s = agent.open_session(&id).await.unwrap();
    assert_eq!(
        s.status().working_directories,
        std::slice::from_ref(&folder)
    );
    assert_eq!(
        agent.warm_file_index_of(&id).await,
        None,
        "an open session's folders are its front end's to warm"
    );
    assert_eq!(agent.warm_file_index_of("not-a-session").await, None);
    let unknown = uuid::Uuid::new_v4().to_string();
    assert_eq!(agent.warm_file_index_of(&unknown).await, None);

    // With an overlay, the folder it records (the session's own, which the open uses too).
    let other = e.dir.path().join("recorded");
    std::fs::create_dir_all(&other).unwrap();
    let id = stored_transcript(&e, &folder);
    let store = SqliteStore::open(&e.dir.path().join("host.sqlite"))
        .await
        .unwrap();
    let record = SessionRecord {
        id: id.clone(),
        resource: None,
        read: false,
        host: None,
        decisions: None,
        title: None,
        model: None,
        effort: None,
        permission_mode: None,
        cwd: other.display().to_string(),
        created_at: 1,
        updated_at: 2,
        archived: false,
    };
    store.put(&record, None).await.unwrap();
    let agent = e.agent(Some(Arc::new(store))).await;
    assert_eq!(agent.warm_file_index_of(&id).await, Some(other.clone()));
    let s = agent.open_session(&id).await.unwrap();
    assert_eq!(s.status().working_directories, [other]);
}
