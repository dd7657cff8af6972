use super::*;
use claude_host_protocol::stream_json::FrameKind;
use claude_host_testkit::fake::{Match, Reply, Rule};
use pretty_assertions::assert_eq;
use serde_json::json;

fn rule(trigger: &str, reply: Reply) -> Rule {
    Rule {
        when: Match::LastUserContains(trigger.into()),
        reply,
        times: None,
    }
}

fn result_of(
    frames: &[claude_host_protocol::stream_json::Frame],
) -> &claude_host_protocol::stream_json::Frame {
    let last = frames.last().unwrap();
    assert_eq!(last.kind, FrameKind::Result);
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_turns_in_one_process_and_no_process_left_behind() {
    let e = env().await;
    e.fake.push(rule("first", Reply::text("one")));
    e.fake.push(rule("second", Reply::text("two")));
    let s = e.spawn(e.opts(), Recorder::with(vec![]));
    let mut s = s;
    let init = s.initialize(None, json!({})).await.unwrap();
    assert_eq!(init["claude_code_version"], "2.1.330");
    assert!(init["models"].as_array().is_some_and(|m| !m.is_empty()));
    s.send_user(
        json!("first turn"),
        Some("11111111-1111-4111-8111-111111111111"),
        None,
    )
    .await
    .unwrap();
    let t1 = s.collect_turn().await.unwrap();
    assert_eq!(result_of(&t1).result_text(), Some("one"));
    assert!(
        t1.iter()
            .any(|f| f.kind == FrameKind::System("init".into()))
    );
    s.send_user(json!("second turn"), None, None).await.unwrap();
    let t2 = s.collect_turn().await.unwrap();
    assert_eq!(result_of(&t2).result_text(), Some("two"));
    let reqs = e.fake.message_requests();
    assert_eq!(reqs.len(), 2);
    assert!(
        reqs[1].json().to_string().contains("first turn"),
        "history carried in the same process"
    );
    let pgid = s.pgid().unwrap();
    let exit = s.close().await;
    assert!(
        matches!(
            exit,
            claude_host_sdk::SessionError::Exited { success: true, .. }
        ),
        "{exit}"
    );
    assert!(group_gone(pgid).await, "CLI process group still alive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn can_use_tool_allow_writes_and_deny_reaches_the_model() {
    let e = env().await;
    let file = e.cwd().join("hello.txt");
    let denied = e.cwd().join("denied.txt");
    e.fake.push(rule(
        "write files",
        Reply::tool_use(
            "Write",
            json!({"file_path": file.to_str().unwrap(), "content": "hi\n"}),
        ),
    ));
    e.fake.push(rule(
        "File created",
        Reply::tool_use(
            "Write",
            json!({"file_path": denied.to_str().unwrap(), "content": "no\n"}),
        ),
    ));
    e.fake.push(rule("not today", Reply::text("understood")));
    let cb = Recorder::with(vec![Decision::Allow, Decision::Deny("not today")]);
    let mut s = e.spawn(e.opts(), cb.clone());
    s.send_user(json!("write files please"), None, None)
        .await
        .unwrap();
    let frames = s.collect_turn().await.unwrap();
    assert_eq!(result_of(&frames).result_text(), Some("understood"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "hi\n");
    assert!(!denied.exists());
    let perms = cb.permission_requests.lock().unwrap().clone();
    assert_eq!(perms.len(), 2);
    assert_eq!(perms[0]["tool_name"], "Write");
    let last = e.fake.message_requests().pop().unwrap().json().to_string();
    assert!(last.contains("not today"), "the denial reached the model");
    let denials = result_of(&frames)
        .get("permission_denials")
        .unwrap()
        .as_array()
        .unwrap()
        .len();
    assert_eq!(denials, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_callbacks_are_invoked() {
    let e = env().await;
    let file = e.cwd().join("hooked.txt");
    e.fake.push(rule(
        "hook me",
        Reply::tool_use(
            "Write",
            json!({"file_path": file.to_str().unwrap(), "content": "x"}),
        ),
    ));
    e.fake.push(rule("File created", Reply::text("done")));
    let cb = Recorder::with(vec![Decision::Allow]);
    let mut s = e.spawn(e.opts(), cb.clone());
    let hooks =
        json!({"PreToolUse": [{"matcher": "Write", "hookCallbackIds": ["hook_0"], "timeout": 30}]});
    s.initialize(Some(hooks), json!({})).await.unwrap();
    s.send_user(json!("hook me"), None, None).await.unwrap();
    s.collect_turn().await.unwrap();
    let seen = cb.hooks.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].0, "hook_0");
    assert_eq!(seen[0].1["hook_event_name"], "PreToolUse");
    assert_eq!(seen[0].1["tool_name"], "Write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_mid_stream_cancels_the_upstream_request() {
    let e = env().await;
    let (reply, _gate) = Reply::gated("this will be cut off", 4);
    e.fake.push(rule("long answer", reply));
    e.fake.push(rule("again", Reply::text("back")));
    let mut opts = e.opts();
    opts.include_partial_messages = true;
    let mut s = e.spawn(opts, Recorder::with(vec![]));
    s.send_user(json!("long answer please"), None, None)
        .await
        .unwrap();
    // Wait for streamed text, then interrupt.
    loop {
        let f = s.next_frame().await.unwrap().unwrap();
        if f.kind == FrameKind::StreamEvent
            && f.get("event")
                .and_then(|ev| ev.pointer("/delta/text"))
                .is_some()
        {
            break;
        }
    }
    s.interrupt().await.unwrap();
    let frames = s.collect_turn().await.unwrap();
    let result = result_of(&frames);
    assert_eq!(result.str("subtype"), Some("error_during_execution"));
    e.fake
        .wait_disconnects(1, Duration::from_secs(2))
        .await
        .unwrap();
    // The session goes on.
    s.send_user(json!("again"), None, None).await.unwrap();
    let frames = s.collect_turn().await.unwrap();
    assert_eq!(result_of(&frames).result_text(), Some("back"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_withdraws_a_pending_permission_request() {
    let e = env().await;
    let file = e.cwd().join("never.txt");
    e.fake.push(rule(
        "park",
        Reply::tool_use(
            "Write",
            json!({"file_path": file.to_str().unwrap(), "content": "x"}),
        ),
    ));
    let cb = Recorder::with(vec![Decision::Park]);
    let mut s = e.spawn(e.opts(), cb.clone());
    s.send_user(json!("park this"), None, None).await.unwrap();
    let asked = cb.event.notified();
    if cb.permission_requests.lock().unwrap().is_empty() {
        tokio::time::timeout(Duration::from_secs(20), asked)
            .await
            .expect("no can_use_tool");
    }
    let cancelled = cb.event.notified();
    s.interrupt().await.unwrap();
    if cb.cancelled.lock().unwrap().is_empty() {
        tokio::time::timeout(Duration::from_secs(10), cancelled)
            .await
            .expect("no control_cancel_request");
    }
    assert_eq!(cb.cancelled.lock().unwrap().as_slice(), ["Write"]);
    let frames = s.collect_turn().await.unwrap();
    assert!(
        frames
            .iter()
            .any(|f| f.kind == FrameKind::ControlCancelRequest)
    );
    assert!(!file.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_model_and_set_permission_mode_take_effect() {
    let e = env().await;
    let file = e.cwd().join("auto.txt");
    e.fake.push(rule(
        "edit now",
        Reply::tool_use(
            "Write",
            json!({"file_path": file.to_str().unwrap(), "content": "ok"}),
        ),
    ));
    e.fake.push(rule("File created", Reply::text("written")));
    let cb = Recorder::with(vec![]);
    let mut s = e.spawn(e.opts(), cb.clone());
    let r = s.set_model(Some("claude-sonnet-4-5")).await.unwrap();
    assert_eq!(r["model"], "claude-sonnet-4-5");
    let validation = e
        .fake
        .message_requests()
        .pop()
        .expect("the CLI validates a new model upstream");
    assert_eq!(validation.json()["model"], "claude-sonnet-4.5");
    assert_eq!(
        validation.json().get("stream"),
        None,
        "validation is non-streaming"
    );
    let r = s.set_permission_mode("acceptEdits").await.unwrap();
    assert_eq!(r["mode"], "acceptEdits");
    s.send_user(json!("edit now"), None, None).await.unwrap();
    let frames = s.collect_turn().await.unwrap();
    assert_eq!(result_of(&frames).result_text(), Some("written"));
    assert!(file.exists());
    assert!(
        cb.permission_requests.lock().unwrap().is_empty(),
        "acceptEdits needs no permission"
    );
    let turn = e.fake.message_requests();
    assert_eq!(turn.last().unwrap().json()["model"], "claude-sonnet-4.5");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_session_resumes_with_its_history() {
    let e = env().await;
    e.fake.push(rule("kiwi", Reply::text("noted")));
    e.fake.push(rule("which fruit", Reply::text("kiwi")));
    let mut s = e.spawn(e.opts(), Recorder::with(vec![]));
    s.send_user(json!("remember kiwi"), None, None)
        .await
        .unwrap();
    let frames = s.collect_turn().await.unwrap();
    let session_id = result_of(&frames).session_id().unwrap().to_owned();
    s.close().await;
    let mut opts = e.opts();
    opts.resume = Some(session_id.clone());
    let mut s = e.spawn(opts, Recorder::with(vec![]));
    s.send_user(json!("which fruit?"), None, None)
        .await
        .unwrap();
    let frames = s.collect_turn().await.unwrap();
    assert_eq!(result_of(&frames).result_text(), Some("kiwi"));
    assert_eq!(result_of(&frames).session_id(), Some(session_id.as_str()));
    let last = e.fake.message_requests().pop().unwrap().json().to_string();
    assert!(last.contains("remember kiwi") && last.contains("noted"));
    let slug = claude_host_protocol::transcript::project_slug(
        &std::fs::canonicalize(e.cwd())
            .unwrap()
            .display()
            .to_string(),
    );
    let transcript = e
        .dir
        .path()
        .join(".claude/projects")
        .join(slug)
        .join(format!("{session_id}.jsonl"));
    assert!(
        transcript.is_file(),
        "transcript at the slug path: {}",
        transcript.display()
    );
}

mod inproc {
    use rmcp::handler::server::wrapper::Parameters;
    use rmcp::{schemars, tool, tool_router};
    use serde::Deserialize;

    #[derive(Debug, Deserialize, schemars::JsonSchema)]
    pub struct EchoArgs {
        /// What to echo.
        pub text: String,
    }

    #[derive(Debug, Clone, Default)]
    pub struct Echo;

    #[tool_router(server_handler)]
    impl Echo {
        #[tool(name = "echo", description = "Echoes the text back")]
        fn echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
            format!("echo: {text}")
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_process_mcp_tool_is_called_and_its_result_reaches_the_model() {
    let e = env().await;
    e.fake.push(rule(
        "use the tool",
        Reply::tool_use("mcp__inproc__echo", json!({"text": "ping"})),
    ));
    e.fake
        .push(rule("echo: ping", Reply::text("the tool said ping")));
    let cb = Recorder::with(vec![Decision::Allow]);
    let server = claude_host_sdk::SdkMcpServer::new("inproc", inproc::Echo);
    let mut s = e.spawn_mcp(e.opts(), cb.clone(), vec![server]);
    let init = s.initialize(None, json!({})).await.unwrap();
    assert!(init.is_object());
    s.send_user(json!("use the tool"), None, None)
        .await
        .unwrap();
    let frames = s.collect_turn().await.unwrap();
    let sys_init = frames
        .iter()
        .find(|f| f.kind == FrameKind::System("init".into()))
        .unwrap();
    let tools = sys_init.get("tools").unwrap().to_string();
    assert!(tools.contains("mcp__inproc__echo"), "{tools}");
    assert_eq!(result_of(&frames).result_text(), Some("the tool said ping"));
    let reqs = e.fake.message_requests();
    // The tool may be deferred (named in the system message rather than in `tools`).
    assert!(reqs[0].json().to_string().contains("mcp__inproc__echo"));
    let last = reqs.last().unwrap().json().to_string();
    assert!(
        last.contains("echo: ping"),
        "the MCP result reached the next upstream request"
    );
    let status = s.mcp_status().await.unwrap().to_string();
    assert!(
        status.contains("inproc") && status.contains("connected"),
        "{status}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_usage_is_served_by_the_proxys_token_estimate() {
    let e = env().await;
    let s = e.spawn(e.opts(), Recorder::with(vec![]));
    s.initialize(None, json!({})).await.unwrap();
    let usage = s.get_context_usage().await.unwrap();
    assert!(usage["totalTokens"].as_u64().unwrap() > 0, "{usage}");
    assert!(
        usage["categories"]
            .as_array()
            .is_some_and(|c| !c.is_empty())
    );
    // The CLI counted through the proxy, which answered locally: Copilot has no such route.
    assert!(
        e.fake
            .requests()
            .iter()
            .all(|r| !r.path.contains("count_tokens"))
    );
}
