//! The real Claude Code CLI against the stricter fake Copilot, through the proxy.

use super::claude::{StreamJson, cli, output, user_line};
use super::*;
use claude_host_testkit::copilot_rules::prompt_tokens;
use claude_host_testkit::fake::{CapturedRequest, FakeConfig, FakeUpstream, Match, Reply, Rule};
use pretty_assertions::assert_eq;

fn rule(when: Match, reply: Reply) -> Rule {
    Rule {
        when,
        reply,
        times: Some(usize::MAX),
    }
}

/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

fn has_image(r: &CapturedRequest) -> bool {
    fn walk(v: &Value) -> bool {
        match v {
            Value::Object(m) => {
                m.get("type").and_then(Value::as_str) == Some("image") || m.values().any(walk)
            }
            Value::Array(a) => a.iter().any(walk),
            _ => false,
        }
    }
    walk(&r.json()["messages"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_carry_the_vision_header_on_exactly_the_requests_that_hold_one() {
    let e = env().await;
    let home = tempfile::tempdir().unwrap();
    let shot = home.path().join("work/shot.png");
    std::fs::create_dir_all(shot.parent().unwrap()).unwrap();
    use base64::Engine as _;
    std::fs::write(
        &shot,
        base64::engine::general_purpose::STANDARD
            .decode(PNG)
            .unwrap(),
    )
    .unwrap();
    e.fake.push(rule(
        Match::LastUserContains("look at the screenshot".into()),
        Reply::tool_use("Read", json!({"file_path": shot.to_str().unwrap()})),
    ));
    e.fake
        .push(rule(Match::HasToolResult, Reply::text("A tiny image.")));
    e.fake.push(rule(Match::Always, Reply::text("Seen.")));
    let mut s = StreamJson::start(cli(&e, home.path(), "img"));
    s.send(
        json!({"type": "user", "message": {"role": "user", "content": [
        {"type": "text", "text": "what is in this picture?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]},
        "parent_tool_use_id": null, "session_id": ""}),
    );
    s.wait("the pasted image's turn", |v| v["type"] == "result")
        .await;
    s.send(user_line("now look at the screenshot"));
    s.wait("the Read turn", |v| v["type"] == "result").await;
    let reqs = e.fake.message_requests();
    let seen: Vec<(bool, bool)> = reqs
        .iter()
        .map(|r| {
            (
                has_image(r),
                r.header("copilot-vision-request") == Some("true"),
            )
        })
        .collect();
    assert!(
        seen.iter().all(|(image, header)| image == header),
        "{seen:?}"
    );
    assert!(
        seen.iter().filter(|(image, _)| *image).count() >= 2,
        "{seen:?}"
    );
    // The Read's result carries the image: the continuation after it asks for vision.
    let after_read = reqs
        .iter()
        .find(|r| r.last_user_text().is_empty() && r.json().to_string().contains("tool_result"))
        .or_else(|| {
            reqs.iter()
                .rev()
                .find(|r| r.json().to_string().contains("tool_result"))
        })
        .unwrap();
    assert!(has_image(after_read));
    assert_eq!(after_read.header("copilot-vision-request"), Some("true"));
    assert!(
        e.fake.header_violations().is_empty(),
        "{:?}",
        e.fake.header_violations()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_only_thinks_adaptively_completes_a_thinking_turn() {
    // Copilot's sonnet-4.5 made adaptive-only (like Opus 4.7): Claude Code, which knows it as
    // an older model, asks for `enabled` thinking with a budget.
    let mut config = FakeConfig::default();
    let sonnet = config
        .models
        .iter_mut()
        .find(|m| m["id"] == "claude-sonnet-4.5")
        .unwrap();
    sonnet["capabilities"]["supports"]["adaptive_thinking"] = json!(true);
    sonnet["capabilities"]["supports"]["reasoning_effort"] = json!(["low", "medium", "high"]);
    let e = env_on(
        FakeUpstream::start_with(config).await.unwrap(),
        ProxyConfig::default(),
    )
    .await;
    e.fake.push(rule(
        Match::Always,
        Reply::thinking("Let me think.", "sig-1", "Thought it through."),
    ));
    let home = tempfile::tempdir().unwrap();
    let mut c = cli(&e, home.path(), "adaptive");
    c.args(["-p", "think hard", "--model", "claude-sonnet-4-5"]);
    let out = output(c).await;
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("Thought it through."));
    let reqs = e.fake.message_requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].json()["thinking"]["type"], "adaptive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thinking_budget_beyond_the_models_range_is_clamped() {
    let e = env().await;
    e.fake.push(rule(Match::Always, Reply::text("ok")));
    let home = tempfile::tempdir().unwrap();
    let mut c = cli(&e, home.path(), "budget");
    c.env("MAX_THINKING_TOKENS", "60000")
        .args(["-p", "think", "--model", "claude-sonnet-4-5"]);
    assert!(output(c).await.status.success());
    let sent = e.fake.message_requests()[0].json();
    assert_eq!(sent["thinking"]["type"], "enabled", "{}", sent["thinking"]);
    let budget = sent["thinking"]["budget_tokens"].as_u64().unwrap();
    assert!(budget <= 32000, "clamped into the model's range: {budget}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_tokens_never_counts_less_than_copilot_would() {
    let e = env().await;
    e.fake.push(rule(
        Match::LastUserContains("run it".into()),
        Reply::tool_use(
            "Bash",
            json!({"command": "seq 1 2000", "description": "numbers"}),
        ),
    ));
    e.fake
        .push(rule(Match::HasToolResult, Reply::text("Counted.")));
    e.fake.push(rule(
        Match::Always,
        Reply::text("Hello there, a longer answer to count."),
    ));
    let home = tempfile::tempdir().unwrap();
    let mut s = StreamJson::start(cli(&e, home.path(), "count"));
    for p in [
        "hello",
        "please run it",
        &"some pasted code: fn main() { println!(\"{}\", 1 + 2); } ".repeat(200),
    ] {
        s.send(user_line(p));
        s.wait("a turn's end", |v| v["type"] == "result").await;
    }
    let mut ratios = Vec::new();
    for r in e.fake.message_requests() {
        let body = r.json();
        let estimate: Value = e
            .post("/v1/messages/count_tokens")
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let estimate = estimate["input_tokens"].as_u64().unwrap();
        let counted = prompt_tokens(&body);
        assert!(
            estimate >= counted,
            "estimate {estimate} < Copilot's {counted}"
        );
        ratios.push(estimate as f64 / counted as f64);
    }
    eprintln!(
        "count_tokens / o200k over {} requests: {ratios:.3?}",
        ratios.len()
    );
}
