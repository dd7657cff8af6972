//! Client tools at the agent's edge: what happens to a call waiting for its client when the
//! session closes.

use super::*;
use claude_host_testkit::fake::{Match, Reply, Rule};
use serde_json::json;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_session_answers_a_waiting_client_tool_and_nothing_hangs() {
    let e = env().await;
    e.fake.push(Rule {
        when: Match::LastUserContains("run the tests".into()),
        reply: Reply::tool_use("mcp__client__runTests", json!({})),
        times: Some(1),
    });
    let agent = e.agent(None).await;
    let s = agent.create_session(Default::default()).await.unwrap();
    s.set_active_client(
        serde_json::from_value(json!({"clientId": "window-1", "tools": [
            {"name": "runTests", "description": "Runs the tests"}]}))
        .unwrap(),
    )
    .await;
    let (_, mut sub) = s.subscribe().await.unwrap();
    let sender = s.clone();
    let sent = tokio::spawn(async move { sender.send("Please run the tests").await });
    let id = s
        .next_confirmation(Duration::from_secs(60))
        .await
        .expect("Claude Code asks about the tool");
    s.confirm_tool(&id, claude_host_agent::Confirmation::Approve)
        .await
        .unwrap();
    let mut status = s.watch_status();
    tokio::time::timeout(
        Duration::from_secs(60),
        status.wait_for(|st| st.client_calls == [id.clone()]),
    )
    .await
    .expect("the call waits for its client")
    .unwrap();
    let waiting = serde_json::to_value(s.snapshot().await.unwrap().session.input_needed).unwrap();
    assert_eq!(waiting[0]["kind"], "toolClientExecution", "{waiting}");
    assert_eq!(waiting[0]["clientId"], "window-1");

    let pgid = s.cli_pgid().await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), s.close())
        .await
        .expect("the session closes without waiting for the client");
    assert!(s.status().client_calls.is_empty());
    // The request was withdrawn before the stream ended.
    let mut withdrawn = false;
    while let Some(ev) = sub.recv().await {
        if let SessionEvent::Action(p) = ev {
            let a = serde_json::to_value(p.action()).unwrap();
            withdrawn |= a["type"] == "session/inputNeededRemoved" && a["id"] == id.as_str();
        }
    }
    assert!(withdrawn);
    let _ = sent.await.unwrap();
    assert!(group_gone(pgid).await);
}
