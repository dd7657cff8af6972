//! Models other than Claude (served on Copilot's `/responses` and `/chat/completions`) driving
//! the real Claude Code CLI through `claude-host run` and `claude-host claude -p`, and sessions
//! that switch between them and Claude.

use super::*;
use claude_host_testkit::fake::{CapturedRequest, Match, Reply, Rule};
use serde_json::Value;

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

fn once(when: Match, reply: Reply) -> Rule {
    Rule {
        when,
        reply,
        times: Some(1),
    }
}

/// The path of a captured request, without its query.
fn path(r: &CapturedRequest) -> &str {
    r.path.split('?').next().unwrap_or_default()
}

/// Every model call the fake saw (Messages, Responses, Chat Completions), in order.
fn model_calls(h: &Host) -> Vec<CapturedRequest> {
    h.fake
        .requests()
        .into_iter()
        .filter(|r| {
            r.method == "POST"
                && matches!(path(r), "/v1/messages" | "/responses" | "/chat/completions")
        })
        .collect()
}

/// `run --json` output: the session id (its first line) and the text of its deltas.
fn session_and_text(out: &std::process::Output) -> (String, String) {
    let lines: Vec<Value> = stdout(out)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let id = lines[0]["id"].as_str().unwrap().to_owned();
    let text = lines
        .iter()
        .filter(|l| l["type"] == "chat/delta")
        .filter_map(|l| l["action"]["content"].as_str().or(l["content"].as_str()))
        .collect();
    (id, text)
}

/// The thinking blocks of a Messages request.
fn thinking_blocks(body: &Value) -> Vec<Value> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "thinking" || b["type"] == "redacted_thinking")
        .cloned()
        .collect()
}

async fn tool_loop_then_claude_then_back(model: &str, endpoint: &str) {
    let h = Host::new().await;
    let file = h.cwd().join("a.txt");
    h.fake.script_tool_loop(&file);
    let mut c = h.cmd();
    c.args([
        "run",
        "--json",
        "--model",
        model,
        "--permission-mode",
        "bypassPermissions",
        "please start the loop",
    ]);
    let out = blocking(move || run(c)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "beta-two\n");
    let (session, text) = session_and_text(&out);
    assert!(text.contains("LOOP-FINISHED"), "{text}");
    let calls = model_calls(&h);
    let main: Vec<_> = calls.iter().filter(|r| path(r) == endpoint).collect();
    // Write, Edit, Bash, Read, Agent, and the answer after the subagent: six calls at least.
    assert!(
        main.len() >= 6,
        "{:?}",
        calls.iter().map(path).collect::<Vec<_>>()
    );
    assert!(
        main.iter().all(|r| r.json()["model"] == model),
        "every main-loop call names {model}"
    );
    assert_eq!(h.fake.header_violations(), Vec::<String>::new());

    // The same session goes on with Claude: it sees the whole loop, and nothing of the other
    // model's reasoning (its signature is not Anthropic's).
    h.fake.push(once(
        Match::LastUserContains("what happened".into()),
        Reply::text("CLAUDE-SAYS: it went well."),
    ));
    let before = model_calls(&h).len();
    let mut c = h.cmd();
    c.args([
        "run",
        "--json",
        "--resume",
        &session,
        "--model",
        "claude-opus-5-5",
        "what happened?",
    ]);
    let out = blocking(move || run(c)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(session_and_text(&out).1.contains("CLAUDE-SAYS"));
    let calls = model_calls(&h);
    let claude = calls[before..]
        .iter()
        .rev()
        .find(|r| path(r) == "/v1/messages" && r.last_user_text().contains("what happened"))
        .expect("the Claude call");
    let body = claude.json();
    let history = body["messages"].to_string();
    for step in ["Write", "Edit", "Bash", "Read", "Agent", "LOOP-FINISHED"] {
        assert!(history.contains(step), "{step} in the history: {history}");
    }
    assert!(
        thinking_blocks(&body).iter().all(|b| !b["signature"]
            .as_str()
            .unwrap_or("")
            .starts_with("claude-host:")),
        "another model's reasoning is not sent to Claude: {:?}",
        thinking_blocks(&body)
    );

    // And back: the other model gets Claude's answer and, where its API carries it, its own
    // reasoning from the first turn.
    h.fake.push(once(
        Match::LastUserContains("once more".into()),
        Reply::text("BACK-AGAIN"),
    ));
    let before = model_calls(&h).len();
    let mut c = h.cmd();
    c.args([
        "run",
        "--json",
        "--resume",
        &session,
        "--model",
        model,
        "once more",
    ]);
    let out = blocking(move || run(c)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(session_and_text(&out).1.contains("BACK-AGAIN"));
    let calls = model_calls(&h);
    let back = calls[before..]
        .iter()
        .rev()
        .find(|r| path(r) == endpoint && r.last_user_text().contains("once more"))
        .expect("the call back on the first model");
    let sent = String::from_utf8_lossy(&back.body).into_owned();
    assert!(
        sent.contains("CLAUDE-SAYS"),
        "Claude's turn is in it: {sent}"
    );
    assert!(
        sent.contains("enc-reasoning-1"),
        "its own reasoning comes back to it: {sent}"
    );
    assert_eq!(h.fake.header_violations(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_responses_model_runs_a_tool_loop_then_the_session_goes_to_claude_and_back() {
    tool_loop_then_claude_then_back("gpt-5.4", "/responses").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_completions_model_runs_a_tool_loop_then_the_session_goes_to_claude_and_back() {
    tool_loop_then_claude_then_back("gpt-4.1", "/chat/completions").await;
}

async fn print_mode_tool_loop(model: &str, endpoint: &str) {
    let h = Host::new().await;
    let file = h.cwd().join("a.txt");
    h.fake.script_tool_loop(&file);
    let mut c = h.cmd();
    c.args([
        "claude",
        "-p",
        "please start the loop",
        "--model",
        model,
        "--permission-mode",
        "bypassPermissions",
    ])
    .env("IS_SANDBOX", "1");
    let out = blocking(move || run(c)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout(&out).contains("LOOP-FINISHED"), "{}", stdout(&out));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "beta-two\n");
    let calls = model_calls(&h);
    assert!(
        calls.iter().filter(|r| path(r) == endpoint).count() >= 6,
        "{:?}",
        calls.iter().map(path).collect::<Vec<_>>()
    );
    assert_eq!(h.fake.header_violations(), Vec::<String>::new());
    let log = log_of(&h.home());
    assert!(log.contains(&format!("upstream_model={model}")), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_print_mode_runs_a_tool_loop_on_a_responses_model() {
    print_mode_tool_loop("gpt-5.4", "/responses").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_print_mode_runs_a_tool_loop_on_a_chat_completions_model() {
    print_mode_tool_loop("gpt-4.1", "/chat/completions").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_lists_every_model_with_its_api_and_multiplier() {
    let h = Host::new().await;
    let mut c = h.cmd();
    c.args(["models", "--json"]);
    let out = blocking(move || run(c)).await;
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let models = v["models"].as_array().unwrap();
    let by_id = |id: &str| {
        models
            .iter()
            .find(|m| m["id"] == id)
            .unwrap_or_else(|| panic!("{id} in {v}"))
            .clone()
    };
    assert_eq!(by_id("gpt-5.4")["endpoint"], "/responses");
    assert_eq!(by_id("gpt-4.1")["endpoint"], "/chat/completions");
    assert_eq!(by_id("gpt-4.1")["premium_multiplier"], 0.0);
    assert_eq!(by_id("claude-opus-5-5")["endpoint"], "/v1/messages");
    assert_eq!(by_id("claude-opus-5-5")["default"], true);
    // The included Claude model is the small/fast one.
    assert_eq!(by_id("claude-haiku-5-5")["small_model"], true);
    assert!(
        models.iter().all(|m| m["id"] != "text-embedding-3-small"),
        "no embeddings model: {v}"
    );
    let mut c = h.cmd();
    c.args(["models"]);
    let text = stdout(&blocking(move || run(c)).await);
    let gpt = text.lines().find(|l| l.starts_with("gpt-5.4")).unwrap();
    assert!(
        gpt.contains("/responses") && gpt.contains("1x premium"),
        "{text}"
    );
    let haiku = text
        .lines()
        .find(|l| l.starts_with("claude-haiku-5-5"))
        .unwrap();
    assert!(
        haiku.contains("included") && haiku.contains("small/fast"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_small_fast_and_subagent_roles_reach_the_cli() {
    let h = Host::new().await;
    let file = h.cwd().join("a.txt");
    h.fake.script_tool_loop(&file);
    let mut c = h.cmd();
    c.args([
        "--subagent-model",
        "gpt-4.1",
        "claude",
        "-p",
        "please start the loop",
        "--model",
        "gpt-5.4",
        "--permission-mode",
        "bypassPermissions",
    ])
    .env("IS_SANDBOX", "1");
    let out = blocking(move || run(c)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls = model_calls(&h);
    let sub = calls
        .iter()
        .find(|r| r.last_user_text().contains("SUBPROMPT"))
        .expect("the subagent's first call");
    assert_eq!(
        path(sub),
        "/chat/completions",
        "the subagent runs on gpt-4.1"
    );
    assert_eq!(sub.json()["model"], "gpt-4.1");
}
