//! A CLI that misbehaves: the agent's fallbacks, with a scripted fake CLI.

use super::*;
use claude_host_testkit::fake::{Match, Reply, Rule};
use claude_host_testkit::fake_cli::{RESULT_FRAME, Scenario, write};
use std::time::Duration;

/// Answers control requests; the first process never ends its turn, even when interrupted.
/// A second process (after the kill) answers its turn.
const STUBBORN: &str = r#"
reply() {
  id=$(printf '%s' "$1" | sed -E 's/.*"request_id":"([^"]+)".*/\1/')
  printf '{"type":"control_response","response":{"subtype":"success","request_id":"%s","response":{}}}\n' "$id"
}
first=1
[ -e "$0.ran" ] && first=0
touch "$0.ran"
while IFS= read -r line; do
  case "$line" in
    *'"control_request"'*) reply "$line" ;;
    *'"type":"user"'*)
      echo '{"type":"system","subtype":"init","session_id":"s"}'
      if [ "$first" = 0 ]; then echo "$RESULT"; fi ;;
  esac
done
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_that_ignores_the_interrupt_is_killed_and_the_next_send_resumes() {
    let e = env().await;
    let script = format!("RESULT='{RESULT_FRAME}'\n{STUBBORN}");
    let cli = write(e.dir.path(), &Scenario::Custom(script)).unwrap();
    let mut opts = e.opts();
    opts.cli = cli;
    let mut spec = claude_host_agent::StandaloneSession::new(opts);
    spec.abort_grace = Duration::from_millis(300);
    let s = Arc::new(claude_host_agent::standalone_session(spec));
    let mut rx = Actions::of(&s).await;
    let turn = tokio::spawn({
        let s = s.clone();
        async move { s.send("never ends").await }
    });
    // The turn has started once its first action is out.
    rx.recv().await;
    // The CLI is live (and has the prompt) once its process group shows.
    let pgid = tokio::time::timeout(
        Duration::from_secs(30),
        s.watch_status().wait_for(|st| st.cli_pgid.is_some()),
    )
    .await
    .unwrap()
    .unwrap()
    .cli_pgid
    .unwrap();
    s.abort().await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), turn)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(super::group_gone(pgid).await, "the stubborn CLI was killed");
    let state = serde_json::to_value(s.state().await).unwrap();
    assert_eq!(state["turns"][0]["state"], "cancelled", "{state}");
    s.send("again").await.unwrap();
    assert_eq!(s.materializations(), 2, "a new CLI for the next send");
    let state = serde_json::to_value(s.state().await).unwrap();
    assert_eq!(state["turns"][1]["state"], "complete", "{state}");
}

/// Issue 16's fault suite, with the real CLI: a CLI that hangs mid-turn (stopped with
/// SIGSTOP while the model streams) cannot answer the interrupt; the abort kills its whole
/// group after the grace, and the next prompt resumes the session with its history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_hung_mid_turn_is_killed_on_abort_and_the_next_prompt_resumes_with_history() {
    let e = env().await;
    e.fake.push(Rule {
        when: Match::LastUserContains("mango".into()),
        reply: Reply::text("Mango it is."),
        times: None,
    });
    let (reply, _gate) = Reply::gated("stuck", 3);
    e.fake.push(Rule {
        when: Match::LastUserContains("stuck".into()),
        reply,
        times: None,
    });
    e.fake.push(Rule {
        when: Match::LastUserContains("which fruit".into()),
        reply: Reply::text("mango"),
        times: None,
    });
    let mut spec = claude_host_agent::StandaloneSession::new(e.opts());
    spec.abort_grace = Duration::from_secs(1);
    let s = Arc::new(claude_host_agent::standalone_session(spec));
    s.send("remember mango").await.unwrap();
    let turn = tokio::spawn({
        let s = s.clone();
        async move { s.send("stuck turn").await }
    });
    e.fake
        .wait_message_requests(2, Duration::from_secs(30))
        .await
        .unwrap();
    let pgid = s.cli_pgid().await.unwrap();
    #[allow(unsafe_code)]
    // SAFETY: stopping the CLI's own process group: it hangs, as a wedged CLI would.
    unsafe {
        assert_eq!(libc::kill(-pgid, libc::SIGSTOP), 0);
    }
    let asked = std::time::Instant::now();
    s.abort().await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), turn)
        .await
        .expect("the turn of a hung CLI never ended")
        .unwrap()
        .unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(15),
        "the abort took {:?}",
        asked.elapsed()
    );
    assert!(super::group_gone(pgid).await, "the hung CLI was killed");
    s.send("which fruit did I say?").await.unwrap();
    assert_eq!(s.materializations(), 2, "a new CLI resumed the session");
    assert_eq!(
        super::turn_states(&s).await,
        ["complete", "cancelled", "complete"]
    );
    let last = e.fake.message_requests().pop().unwrap().json().to_string();
    assert!(
        last.contains("remember mango") && last.contains("Mango it is."),
        "history not resumed"
    );
}

/// Issue 16's fault suite, with the real CLI: a reply of 20,000 deltas floods the host with
/// as many stream frames; every one reaches the turn's text and a subscriber, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_stream_frames_from_the_real_cli_arrives_whole() {
    const DELTAS: usize = 20_000;
    let e = env().await;
    e.fake.set_default_reply(Reply::many_deltas(DELTAS));
    let s = e.session(e.opts());
    let (_, mut rx) = s.subscribe().await.unwrap();
    // A subscriber reading as the deltas come gets every one of them.
    let mut streamed = String::new();
    let mut take = |ev: &SessionEvent| {
        if let SessionEvent::Action(p) = ev
            && let StateAction::ChatDelta(d) = p.action()
        {
            streamed.push_str(&d.content);
        }
    };
    let send = s.send("flood me");
    tokio::pin!(send);
    loop {
        tokio::select! {
            r = &mut send => { r.unwrap(); break; }
            ev = rx.recv() => take(&ev.expect("the subscription ended")),
        }
    }
    for ev in rx.drain().await {
        take(&ev);
    }
    let state = serde_json::to_value(s.state().await).unwrap();
    assert_eq!(state["turns"][0]["state"], "complete");
    let text = super::turn_markdown(&state["turns"][0]);
    let want: String = (0..DELTAS).map(|i| format!("w{} ", i % 10)).collect();
    assert_eq!(text.len(), want.len());
    assert!(
        text == want,
        "the turn's text differs from what the model sent"
    );
    assert_eq!(streamed.len(), want.len());
    assert!(
        streamed == want,
        "the deltas differ from what the model sent"
    );
}

/// Issue 16's fault suite: a CLI that floods its stdout mid-turn with one 300 MB line and
/// 100,000 lines of junk. The host reads past them without keeping them (its memory grows
/// by far less than the flood), logs them as bad frames, and the turn still completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_flooding_stdout_mid_turn_costs_bounded_memory_and_the_turn_completes() {
    let e = env().await;
    let script = format!(
        r#"RESULT='{RESULT_FRAME}'
reply() {{
  id=$(printf '%s' "$1" | sed -E 's/.*"request_id":"([^"]+)".*/\1/')
  printf '{{"type":"control_response","response":{{"subtype":"success","request_id":"%s","response":{{}}}}}}\n' "$id"
}}
while IFS= read -r line; do
  case "$line" in
    *'"control_request"'*) reply "$line" ;;
    *'"type":"user"'*)
      echo '{{"type":"system","subtype":"init","session_id":"s"}}'
      head -c 300000000 /dev/zero | tr '\0' x
      echo
      yes 'not json at all' | head -n 100000
      echo "$RESULT" ;;
  esac
done
"#
    );
    let cli = write(e.dir.path(), &Scenario::Custom(script)).unwrap();
    let mut opts = e.opts();
    opts.cli = cli;
    let s = e.session(opts);
    let before = rss_kib();
    tokio::time::timeout(Duration::from_secs(120), s.send("flood"))
        .await
        .expect("the turn never ended")
        .unwrap();
    let grown = rss_kib().saturating_sub(before);
    assert!(
        grown < 128 * 1024,
        "memory grew by {grown} KiB over a 300 MB flood"
    );
    assert_eq!(super::turn_states(&s).await, ["complete"]);
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}
