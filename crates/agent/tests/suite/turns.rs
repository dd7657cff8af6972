use super::*;
use ahp_types::actions::StateAction;
use claude_host_testkit::fake::{Match, Reply, Rule};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn kinds(actions: &[StateAction]) -> Vec<String> {
    actions
        .iter()
        .map(|a| {
            serde_json::to_value(a).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_turn_streams_per_token_deltas_into_the_reduced_state() {
    let e = env().await;
    e.fake.push(Rule {
        when: Match::LastUserContains("greet".into()),
        reply: Reply::text_deltas(vec!["Hel".into(), "lo ".into(), "there".into()]),
        times: None,
    });
    let s = e.session(e.opts());
    assert!(!s.is_materialized(), "a new session is provisional");
    assert!(
        !e.dir.path().join(".claude/projects").exists(),
        "nothing written before the first send"
    );
    let mut rx = Actions::of(&s).await;
    let turn = s.send("greet me").await.unwrap();
    let actions = rx.drain().await;
    let k = kinds(&actions);
    assert_eq!(k.first().map(String::as_str), Some("chat/turnStarted"));
    assert_eq!(&k[k.len() - 2..], ["chat/usage", "chat/turnComplete"]);
    let deltas: Vec<Value> = actions
        .iter()
        .map(|a| serde_json::to_value(a).unwrap())
        .filter(|v| v["type"] == "chat/delta")
        .collect();
    assert_eq!(
        deltas
            .iter()
            .map(|d| d["content"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["Hel", "lo ", "there"],
        "one action per upstream token"
    );
    let part_pos = k.iter().position(|x| x == "chat/responsePart").unwrap();
    let delta_pos = k.iter().position(|x| x == "chat/delta").unwrap();
    assert!(
        part_pos < delta_pos,
        "response part announced before its deltas: {k:?}"
    );
    let part_id = deltas[0]["partId"].as_str().unwrap();
    assert!(
        part_id.starts_with(&format!("{turn}#msg_fake_")) && part_id.ends_with("#0"),
        "{part_id}"
    );

    let state = serde_json::to_value(s.state().await).unwrap();
    assert_eq!(state["turns"].as_array().unwrap().len(), 1);
    let t = &state["turns"][0];
    assert_eq!(t["state"], "complete");
    assert_eq!(t["message"]["text"], "greet me");
    assert_eq!(t["responseParts"][0]["kind"], "markdown");
    assert_eq!(t["responseParts"][0]["content"], "Hello there");
    assert!(t["usage"]["outputTokens"].as_i64().unwrap() > 0);
    assert_eq!(t["usage"]["model"], "claude-opus-5-5");
    assert!(state.get("activeTurn").is_none() || state["activeTurn"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_first_sends_materialize_once_and_run_in_order() {
    let e = env().await;
    e.fake.push(Rule {
        when: Match::LastUserContains("one".into()),
        reply: Reply::text("first"),
        times: None,
    });
    e.fake.push(Rule {
        when: Match::LastUserContains("two".into()),
        reply: Reply::text("second"),
        times: None,
    });
    let s = Arc::new(e.session(e.opts()));
    let (a, b) = tokio::join!(s.send("one"), s.send("two"));
    a.unwrap();
    b.unwrap();
    assert_eq!(s.materializations(), 1);
    let state = serde_json::to_value(s.state().await).unwrap();
    let texts: Vec<&str> = state["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["responseParts"][0]["content"].as_str().unwrap())
        .collect();
    assert_eq!(texts.len(), 2);
    assert!(
        texts.contains(&"first") && texts.contains(&"second"),
        "{texts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_and_an_auto_approved_tool_call_reduce_to_complete_parts() {
    let e = env().await;
    let file = e.dir.path().join("work/out.txt");
    e.fake.push(Rule {
        when: Match::LastUserContains("think and write".into()),
        reply: Reply::blocks(vec![
            claude_host_testkit::Block::Thinking {
                thinking: "plan it".into(),
                signature: "sig".into(),
            },
            claude_host_testkit::Block::ToolUse {
                name: "Write".into(),
                input: json!({"file_path": file.to_str().unwrap(), "content": "x"}),
            },
        ]),
        times: None,
    });
    e.fake.push(Rule {
        when: Match::HasToolResult,
        reply: Reply::text("written"),
        times: None,
    });
    let mut opts = e.opts();
    opts.permission_mode = Some("acceptEdits".into());
    let s = e.session(opts);
    let mut rx = Actions::of(&s).await;
    s.send("think and write").await.unwrap();
    let k = kinds(&rx.drain().await);
    let start = k.iter().position(|x| x == "chat/toolCallStart").unwrap();
    for later in [
        "chat/toolCallDelta",
        "chat/toolCallReady",
        "chat/toolCallComplete",
    ] {
        assert!(
            k.iter().position(|x| x == later).unwrap() > start,
            "{later} before toolCallStart: {k:?}"
        );
    }
    assert!(file.exists());
    let state = serde_json::to_value(s.state().await).unwrap();
    let parts = state["turns"][0]["responseParts"].as_array().unwrap();
    let reasoning = parts.iter().find(|p| p["kind"] == "reasoning").unwrap();
    assert_eq!(reasoning["content"], "plan it");
    let tool = parts.iter().find(|p| p["kind"] == "toolCall").unwrap();
    assert_eq!(tool["toolCall"]["status"], "completed", "{tool}");
    assert_eq!(tool["toolCall"]["toolName"], "Write");
    assert_eq!(tool["toolCall"]["success"], true);
    let text = parts.iter().find(|p| p["kind"] == "markdown").unwrap();
    assert_eq!(text["content"], "written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_error_ends_the_turn_in_error_and_the_session_goes_on() {
    let e = env().await;
    // The recovery rule first: the CLI may resend the failed prompt along with the new one.
    e.fake.push(Rule {
        when: Match::LastUserContains("again".into()),
        reply: Reply::text("fine"),
        times: None,
    });
    e.fake.push(Rule {
        when: Match::LastUserContains("fail".into()),
        reply: Reply::error_before_stream(400, "invalid_request_error", "prompt is too long"),
        times: Some(10),
    });
    let s = e.session(e.opts());
    s.send("fail please").await.unwrap();
    s.send("again").await.unwrap();
    let state = serde_json::to_value(s.state().await).unwrap();
    assert_eq!(state["turns"][0]["state"], "error");
    let err = state["turns"][0]["responseParts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["kind"] == "error")
        .cloned()
        .unwrap_or_default();
    assert!(
        err.to_string()
            .to_lowercase()
            .contains("prompt is too long"),
        "{}",
        state["turns"][0]
    );
    // The CLI's terminal reason names the failure (here `prompt_too_long`).
    assert_eq!(err["error"]["errorType"], "prompt_too_long");
    assert_eq!(state["turns"][1]["state"], "complete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_permissions_become_pending_confirmations_settled_by_the_client() {
    use claude_host_agent::Confirmation;
    use std::time::Duration;
    let e = env().await;
    let yes = e.dir.path().join("work/yes.txt");
    let no = e.dir.path().join("work/no.txt");
    e.fake.push(Rule {
        when: Match::LastUserContains("two files".into()),
        reply: Reply::tool_use(
            "Write",
            json!({"file_path": yes.to_str().unwrap(), "content": "y"}),
        ),
        times: None,
    });
    e.fake.push(Rule {
        when: Match::LastUserContains("File created".into()),
        reply: Reply::tool_use(
            "Write",
            json!({"file_path": no.to_str().unwrap(), "content": "n"}),
        ),
        times: None,
    });
    e.fake.push(Rule {
        when: Match::LastUserContains("User declined".into()),
        reply: Reply::text("ok, skipped one"),
        times: None,
    });
    let s = Arc::new(e.session(e.opts()));
    let mut rx = Actions::of(&s).await;
    let turn = tokio::spawn({
        let s = s.clone();
        async move { s.send("write two files").await }
    });
    let first = s
        .next_confirmation(Duration::from_secs(30))
        .await
        .expect("first confirmation");
    let state = serde_json::to_value(s.state().await).unwrap();
    let pending = state["activeTurn"]["responseParts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["toolCall"]["toolCallId"] == first.as_str())
        .unwrap()
        .clone();
    assert_eq!(
        pending["toolCall"]["status"], "pending-confirmation",
        "{pending}"
    );
    s.confirm_tool(&first, Confirmation::Approve).await.unwrap();
    let second = loop {
        let id = s
            .next_confirmation(Duration::from_secs(30))
            .await
            .expect("second confirmation");
        if id != first {
            break id;
        }
    };
    s.confirm_tool(&second, Confirmation::Deny).await.unwrap();
    turn.await.unwrap().unwrap();
    assert!(yes.exists());
    assert!(!no.exists());
    let state = serde_json::to_value(s.state().await).unwrap();
    let t = &state["turns"][0];
    assert_eq!(t["state"], "complete");
    let tool = |id: &str| {
        t["responseParts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["toolCall"]["toolCallId"] == id)
            .unwrap()["toolCall"]
            .clone()
    };
    assert_eq!(tool(&first)["status"], "completed");
    assert_eq!(tool(&first)["confirmed"], "user-action");
    assert_eq!(tool(&second)["status"], "cancelled");
    assert_eq!(tool(&second)["reason"], "denied");
    let k = kinds(&rx.drain().await);
    assert!(
        k.iter().filter(|x| *x == "chat/toolCallConfirmed").count() == 2,
        "{k:?}"
    );
    assert!(s.confirm_tool("nope", Confirmation::Approve).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_mid_stream_cancels_the_turn_and_the_upstream_request() {
    let e = env().await;
    let (reply, _gate) = Reply::gated("never finishes", 4);
    e.fake.push(Rule {
        when: Match::LastUserContains("long".into()),
        reply,
        times: None,
    });
    e.fake.push(Rule {
        when: Match::LastUserContains("next".into()),
        reply: Reply::text("still here"),
        times: None,
    });
    let s = Arc::new(e.session(e.opts()));
    let mut rx = Actions::of(&s).await;
    let turn = tokio::spawn({
        let s = s.clone();
        async move { s.send("a long answer").await }
    });
    // Abort once text is streaming.
    while kind(&rx.recv().await) != "chat/delta" {}
    s.abort().await.unwrap();
    turn.await.unwrap().unwrap();
    e.fake
        .wait_disconnects(1, std::time::Duration::from_secs(2))
        .await
        .unwrap();
    s.send("next one").await.unwrap();
    let state = serde_json::to_value(s.state().await).unwrap();
    assert_eq!(state["turns"][0]["state"], "cancelled");
    assert_eq!(state["turns"][1]["state"], "complete");
    assert_eq!(s.materializations(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_change_reaches_the_next_upstream_request() {
    let e = env().await;
    let s = e.session(e.opts());
    s.send("first").await.unwrap();
    assert_eq!(
        e.fake.message_requests().last().unwrap().json()["model"],
        "claude-opus-5.5"
    );
    s.set_model("claude-sonnet-4-5").await.unwrap();
    s.send("second").await.unwrap();
    assert_eq!(
        e.fake.message_requests().last().unwrap().json()["model"],
        "claude-sonnet-4.5"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_killed_mid_turn_errors_the_turn_and_the_next_send_resumes_with_history() {
    let e = env().await;
    e.fake.push(Rule {
        when: Match::LastUserContains("papaya".into()),
        reply: Reply::text("Papaya it is."),
        times: None,
    });
    let (reply, _gate) = Reply::gated("doomed", 3);
    e.fake.push(Rule {
        when: Match::LastUserContains("doomed".into()),
        reply,
        times: None,
    });
    e.fake.push(Rule {
        when: Match::LastUserContains("which fruit".into()),
        reply: Reply::text("papaya"),
        times: None,
    });
    let s = Arc::new(e.session(e.opts()));
    s.send("remember papaya").await.unwrap();
    let turn = tokio::spawn({
        let s = s.clone();
        async move { s.send("doomed turn").await }
    });
    e.fake
        .wait_message_requests(2, std::time::Duration::from_secs(30))
        .await
        .unwrap();
    let pgid = s.cli_pgid().await.unwrap();
    #[allow(unsafe_code)]
    // SAFETY: killing the CLI's own process group, as a crash would.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
    assert!(turn.await.unwrap().is_err());
    let r = s.send("which fruit did I say?").await;
    r.unwrap();
    assert_eq!(s.materializations(), 2, "a new CLI resumed the session");
    assert_eq!(turn_states(&s).await, ["complete", "error", "complete"]);
    let last = e.fake.message_requests().pop().unwrap().json().to_string();
    assert!(
        last.contains("remember papaya") && last.contains("Papaya it is."),
        "history not resumed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_from_a_plain_claude_p_run_is_restored_and_continued() {
    let e = env().await;
    let file = e.dir.path().join("work/r.txt");
    e.fake.push(Rule {
        when: Match::LastUserContains("write r".into()),
        reply: Reply::tool_use(
            "Write",
            json!({"file_path": file.to_str().unwrap(), "content": "r"}),
        ),
        times: None,
    });
    e.fake.push(Rule {
        when: Match::LastUserContains("File created".into()),
        reply: Reply::text("Wrote r."),
        times: None,
    });
    e.fake.push(Rule {
        when: Match::LastUserContains("what did you".into()),
        reply: Reply::text("I wrote r.txt"),
        times: None,
    });
    // The user's own `claude -p`, straight through the proxy.
    let config = e.dir.path().join(".claude");
    let id = claude_host_testkit::cli::plain_claude_p(
        "please write r",
        &["--permission-mode", "acceptEdits"],
        e.dir.path(),
        &config,
        &e.dir.path().join("work"),
        &e.proxy.base_url(),
        &e.proxy.auth_token("plain"),
    )
    .unwrap();

    let agent = e.agent(None).await;
    let s = agent.open_session(&id).await.unwrap();
    assert!(!s.is_materialized());
    let state = serde_json::to_value(s.state().await).unwrap();
    let turns = state["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 1, "{state}");
    assert_eq!(turns[0]["message"]["text"], "please write r");
    let parts = turns[0]["responseParts"].as_array().unwrap();
    let tool = parts.iter().find(|p| p["kind"] == "toolCall").unwrap();
    assert_eq!(tool["toolCall"]["toolName"], "Write");
    assert_eq!(tool["toolCall"]["status"], "completed");
    assert!(
        parts
            .iter()
            .any(|p| p["kind"] == "markdown" && p["content"] == "Wrote r.")
    );

    s.send("what did you do?").await.unwrap();
    let state = serde_json::to_value(s.state().await).unwrap();
    assert_eq!(state["turns"].as_array().unwrap().len(), 2);
    assert_eq!(
        state["turns"][1]["responseParts"][0]["content"],
        "I wrote r.txt"
    );
    let last = e.fake.message_requests().pop().unwrap().json().to_string();
    assert!(last.contains("please write r"), "resumed with history");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_at_turn_one_of_two_gives_a_session_with_one_turn() {
    let e = env().await;
    e.fake.push(Rule {
        when: Match::LastUserContains("turn one".into()),
        reply: Reply::text("one done"),
        times: None,
    });
    e.fake.push(Rule {
        when: Match::LastUserContains("turn two".into()),
        reply: Reply::text("two done"),
        times: None,
    });
    e.fake.push(Rule {
        when: Match::LastUserContains("after fork".into()),
        reply: Reply::text("forked reply"),
        times: None,
    });
    let agent = e.agent(None).await;
    let s = agent.create_session(Default::default()).await.unwrap();
    s.send("turn one").await.unwrap();
    s.send("turn two").await.unwrap();
    let fork = agent.fork_session(s.id(), 1).await.unwrap();
    assert_ne!(fork.session_id(), s.session_id());
    let state = serde_json::to_value(fork.state().await).unwrap();
    let turns = state["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 1, "{state}");
    assert_eq!(turns[0]["message"]["text"], "turn one");
    fork.send("after fork").await.unwrap();
    let sent = e.fake.message_requests().pop().unwrap().json().to_string();
    assert!(
        sent.contains("turn one") && !sent.contains("turn two"),
        "fork kept the wrong history"
    );
    // The original is untouched.
    assert_eq!(
        serde_json::to_value(s.state().await).unwrap()["turns"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_overlay_is_written_after_turns_and_not_before() {
    use claude_host_store::{SqliteStore, Store};
    let e = env().await;
    let store = Arc::new(
        SqliteStore::open(&e.dir.path().join("host.sqlite"))
            .await
            .unwrap(),
    );
    let agent = e.agent(Some(store.clone())).await;
    let s = agent
        .create_session(claude_host_agent::NewSession {
            permission_mode: Some("acceptEdits".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(
        store.list(true).await.unwrap().is_empty(),
        "provisional sessions write nothing"
    );
    s.send("summarize the repository layout").await.unwrap();
    s.flush().await.unwrap();
    let id = s.session_id().unwrap();
    let r = store.get(&id).await.unwrap().unwrap();
    assert_eq!(r.title.as_deref(), Some("summarize the repository layout"));
    assert_eq!(r.permission_mode.as_deref(), Some("acceptEdits"));
    assert!(r.cwd.ends_with("work"));
    let first_update = r.updated_at;
    s.set_model("claude-sonnet-4-5").await.unwrap();
    s.send("and again").await.unwrap();
    s.flush().await.unwrap();
    let r = store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        r.title.as_deref(),
        Some("summarize the repository layout"),
        "the title stays"
    );
    assert_eq!(
        r.model.as_deref(),
        Some("claude-sonnet-4.5"),
        "the catalog's id"
    );
    assert!(r.updated_at >= first_update);
    assert_eq!(store.list(false).await.unwrap().len(), 1);
}
