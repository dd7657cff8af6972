//! Every kind of request the real Claude Code CLI sends, through the proxy: which are
//! billed as the user's (`X-Initiator: user`) and which as the agent's. A CLI update that
//! changes a shape fails here (docs/PROXY.md has the table).

use super::claude::{StreamJson, cli, output, user_line};
use super::*;
use claude_host_protocol::request_kind::RequestKind;
use claude_host_proxy::PromptSource;
use claude_host_testkit::fake::{CapturedRequest, Match, Reply, Rule};

fn rule(when: Match, reply: Reply) -> Rule {
    Rule {
        when,
        reply,
        times: None,
    }
}

fn initiators(reqs: &[CapturedRequest]) -> Vec<String> {
    reqs.iter()
        .map(|r| r.header("x-initiator").unwrap_or("-").to_owned())
        .collect()
}

fn kinds(e: &Env, session: &str) -> std::collections::BTreeMap<String, u64> {
    e.proxy.prompt_ledger().session_usage(session).by_kind
}

fn count(pairs: &[(RequestKind, u64)]) -> std::collections::BTreeMap<String, u64> {
    pairs
        .iter()
        .map(|(k, n)| (k.as_str().to_owned(), *n))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_is_the_users_and_its_tool_continuations_are_the_agents() {
    let e = env().await;
    e.fake.push(rule(
        Match::LastUserContains("run echo".into()),
        Reply::tool_use(
            "Bash",
            json!({"command": "echo hi", "description": "say hi"}),
        ),
    ));
    e.fake.push(rule(Match::HasToolResult, Reply::text("done")));
    let home = tempfile::tempdir().unwrap();
    let mut c = cli(&e, home.path(), "s1");
    c.args(["-p", "please run echo", "--permission-mode", "acceptEdits"]);
    assert!(output(c).await.status.success());
    assert_eq!(initiators(&e.fake.message_requests()), ["user", "agent"]);
    assert_eq!(
        kinds(&e, "s1"),
        count(&[(RequestKind::Prompt, 1), (RequestKind::ToolResult, 1)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagents_prompt_is_the_agents() {
    let e = env().await;
    e.fake.push(rule(
        Match::LastUserContains("please delegate".into()),
        Reply::subagent_call("SUBPROMPT list the files"),
    ));
    e.fake.push(rule(
        Match::LastUserContains("SUBPROMPT".into()),
        Reply::text("nothing here"),
    ));
    e.fake
        .push(rule(Match::HasToolResult, Reply::text("main done")));
    let home = tempfile::tempdir().unwrap();
    let mut c = cli(&e, home.path(), "s2");
    c.args(["-p", "please delegate", "--permission-mode", "acceptEdits"]);
    let out = output(c).await;
    assert!(out.status.success());
    let reqs = e.fake.message_requests();
    assert_eq!(initiators(&reqs), ["user", "agent", "agent"]);
    assert!(reqs[1].last_user_text().contains("SUBPROMPT"));
    let interaction: Vec<_> = reqs
        .iter()
        .map(|r| r.header("x-interaction-type"))
        .collect();
    assert_eq!(
        interaction,
        [
            Some("messages-proxy"),
            Some("conversation-subagent"),
            Some("messages-proxy")
        ]
    );
    assert_eq!(
        kinds(&e, "s2"),
        count(&[
            (RequestKind::Prompt, 1),
            (RequestKind::Subagent, 1),
            (RequestKind::ToolResult, 1)
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_is_the_agents() {
    let e = env().await;
    e.fake.push(rule(
        Match::LastUserContains("detailed summary of the conversation".into()),
        Reply::text("<analysis>short</analysis>\n<summary>The user said hello.</summary>"),
    ));
    e.fake.push(rule(
        Match::LastUserContains("hello".into()),
        Reply::text("hi"),
    ));
    let home = tempfile::tempdir().unwrap();
    let mut c = cli(&e, home.path(), "s3");
    c.args(["-p", "hello", "--output-format", "json"]);
    let out = output(c).await;
    assert!(out.status.success());
    let session: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = session["session_id"].as_str().unwrap().to_owned();
    let mut c = cli(&e, home.path(), "s3");
    c.args(["-p", "/compact", "--resume", &id]);
    assert!(output(c).await.status.success());
    let reqs = e.fake.message_requests();
    assert_eq!(initiators(&reqs), ["user", "agent"]);
    assert_eq!(
        reqs[1].header("x-interaction-type"),
        Some("conversation-compaction")
    );
    assert_eq!(
        kinds(&e, "s3"),
        count(&[(RequestKind::Prompt, 1), (RequestKind::Compaction, 1)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_claude_code_starts_after_a_background_task_is_the_agents() {
    let e = env().await;
    e.fake.push(rule(
        Match::LastUserContains("<task-notification>".into()),
        Reply::text("the job is done"),
    ));
    e.fake.push(Rule {
        when: Match::LastUserContains("in the background".into()),
        reply: Reply::tool_use(
            "Bash",
            json!({"command": "echo finished", "description": "bg job", "run_in_background": true}),
        ),
        times: Some(1),
    });
    e.fake
        .push(rule(Match::HasToolResult, Reply::text("started it")));
    let home = tempfile::tempdir().unwrap();
    let mut s = StreamJson::start(cli(&e, home.path(), "s4"));
    s.send(user_line("run it in the background"));
    s.wait("first result", |v| v["type"] == "result").await;
    s.wait("second result", |v| v["type"] == "result").await;
    let reqs = e.fake.message_requests();
    assert_eq!(initiators(&reqs), ["user", "agent", "agent"]);
    assert!(reqs[2].last_user_text().contains("<task-notification>"));
    assert_eq!(
        kinds(&e, "s4"),
        count(&[
            (RequestKind::Prompt, 1),
            (RequestKind::ToolResult, 1),
            (RequestKind::TaskNotification, 1)
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_check_before_set_model_is_the_agents() {
    let e = env().await;
    e.fake.push(rule(Match::Always, Reply::text("Hi")));
    let home = tempfile::tempdir().unwrap();
    let mut s = StreamJson::start(cli(&e, home.path(), "s5"));
    s.send(json!({"type": "control_request", "request_id": "m1",
                  "request": {"subtype": "set_model", "model": "claude-sonnet-4-5"}}));
    s.wait("set_model answer", |v| {
        v["type"] == "control_response" && v["response"]["request_id"] == "m1"
    })
    .await;
    let reqs = e.fake.message_requests();
    assert_eq!(initiators(&reqs), ["agent"]);
    assert_eq!(reqs[0].json()["max_tokens"], 1);
    assert_eq!(kinds(&e, "s5"), count(&[(RequestKind::ModelCheck, 1)]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_host_session_only_the_announced_prompts_are_the_users() {
    let e = env().await;
    e.fake.push(rule(Match::Always, Reply::text("ok")));
    let ledger = e.proxy.prompt_ledger();
    ledger.set_source("host", PromptSource::Host);
    let home = tempfile::tempdir().unwrap();
    let mut s = StreamJson::start(cli(&e, home.path(), "host"));
    // A message the host did not announce as a human's (nothing claims it).
    s.send(user_line("an automated nudge"));
    s.wait("result", |v| v["type"] == "result").await;
    ledger.note_prompt("host");
    s.send(user_line("what a human typed"));
    s.wait("result", |v| v["type"] == "result").await;
    ledger.end_turn("host");
    assert_eq!(initiators(&e.fake.message_requests()), ["agent", "user"]);
    let usage = ledger.session_usage("host");
    assert_eq!((usage.user, usage.agent), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_gives_its_prompt_back_to_the_retry() {
    let e = env().await;
    e.fake.push(Rule {
        when: Match::Always,
        reply: Reply::error_before_stream(529, "overloaded_error", "Overloaded"),
        times: Some(1),
    });
    e.fake.push(rule(Match::Always, Reply::text("ok")));
    let ledger = e.proxy.prompt_ledger();
    ledger.set_source("retry", PromptSource::Host);
    ledger.note_prompt("retry");
    let home = tempfile::tempdir().unwrap();
    let mut c = cli(&e, home.path(), "retry");
    c.args(["-p", "hello"]);
    assert!(output(c).await.status.success());
    // The CLI retried the overloaded request by itself; the retry is the billed one.
    assert_eq!(initiators(&e.fake.message_requests()), ["user", "user"]);
    let usage = ledger.session_usage("retry");
    assert_eq!((usage.user, usage.agent), (2, 0));
}
