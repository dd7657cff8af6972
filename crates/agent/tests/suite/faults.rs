//! A CLI that misbehaves: the agent's fallbacks, with a scripted fake CLI.

use super::*;
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
