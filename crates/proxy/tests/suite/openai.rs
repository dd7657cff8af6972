//! The proxy with models served on Copilot's OpenAI endpoints: what a client of the Anthropic
//! API receives, on success and on every failure the issue names (before and during the
//! stream), as Claude Code acts on it.

use super::*;
use claude_host_testkit::fake::{Match, Reply, Rule};
use pretty_assertions::assert_eq;

fn on(model: &str, stream: bool) -> Value {
    let mut r = request("hello there", stream);
    r["model"] = json!(model);
    r
}

/// `reply` to every request of the test (each test makes a few).
fn always(e: &Env, reply: Reply) {
    e.fake.push(Rule {
        when: Match::Always,
        reply,
        times: Some(100),
    });
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(n, _)| n.as_str()).collect()
}

const MODELS: [(&str, &str); 2] = [("gpt-5.4", "/responses"), ("gpt-4.1", "/chat/completions")];

#[tokio::test]
async fn a_stream_comes_back_as_anthropic_events_with_the_clients_model_id() {
    let e = env().await;
    always(&e, Reply::text_deltas(vec!["Hel".into(), "lo".into()]));
    for (model, path) in MODELS {
        let resp = e.messages(on(model, true)).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(
            resp.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        let events = sse_events(resp).await;
        assert_eq!(
            names(&events),
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ],
            "{model}: {events:?}"
        );
        assert_eq!(events[0].1["message"]["model"], model);
        let text: String = events
            .iter()
            .filter_map(|(_, d)| d["delta"]["text"].as_str())
            .collect();
        assert_eq!(text, "Hello");
        assert_eq!(events[5].1["delta"]["stop_reason"], "end_turn");
        assert!(events[5].1["usage"]["input_tokens"].as_u64().unwrap() > 0);
        let sent = e.fake.model_requests().last().unwrap().clone();
        assert_eq!(sent.path.split('?').next().unwrap(), path);
        assert_eq!(sent.header("openai-intent"), Some("conversation-agent"));
        assert_eq!(sent.header("anthropic-version"), None);
    }
    assert_eq!(e.fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_json_reply_comes_back_as_an_anthropic_message() {
    let e = env().await;
    always(
        &e,
        Reply::tool_use("Bash", json!({"command": "ls", "description": "List"})),
    );
    for (model, _) in MODELS {
        let resp = e.messages(on(model, false)).await;
        assert_eq!(resp.status(), 200);
        let m: Value = resp.json().await.unwrap();
        assert_eq!(m["type"], "message");
        assert_eq!(m["model"], model);
        assert_eq!(m["stop_reason"], "tool_use", "{m}");
        let call = m["content"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["type"] == "tool_use")
            .unwrap_or_else(|| panic!("{m}"));
        assert_eq!(call["name"], "Bash");
        assert_eq!(
            call["input"],
            json!({"command": "ls", "description": "List"})
        );
    }
    assert_eq!(e.fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_rate_limit_before_the_stream_is_anthropics_429_with_its_retry_after() {
    let e = env().await;
    always(
        &e,
        Reply::error_before_stream(429, "rate_limit_error", "slow down")
            .with_header("retry-after", "7"),
    );
    for (model, _) in MODELS {
        let resp = e.messages(on(model, true)).await;
        assert_eq!(resp.status(), 429, "{model}");
        assert_eq!(resp.headers()["retry-after"], "7");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "rate_limit_error", "{body}");
        assert_eq!(body["error"]["message"], "slow down");
    }
}

#[tokio::test]
async fn copilots_prompt_limit_is_restated_as_prompt_is_too_long() {
    let e = env().await;
    always(
        &e,
        Reply::raw(
            400,
            "application/json",
            r#"{"error":{"message":"prompt token count of 300123 exceeds the limit of 272000","code":"model_max_prompt_tokens_exceeded"}}"#,
        ),
    );
    for (model, _) in MODELS {
        let resp = e.messages(on(model, true)).await;
        assert_eq!(resp.status(), 400, "{model}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(
            body["error"]["message"],
            "prompt is too long: 300123 tokens > 272000 maximum"
        );
    }
}

#[tokio::test]
async fn used_up_premium_requests_are_a_billing_error_and_included_models_still_answer() {
    let e = env().await;
    always(&e, Reply::text("still here"));
    e.fake.exhaust_premium(true);
    // gpt-5.4 counts as a premium request; gpt-4.1 is included in the plan.
    let resp = e.messages(on("gpt-5.4", true)).await;
    assert_eq!(resp.status(), 402);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "billing_error", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("premium requests are used up"),
        "{body}"
    );
    let resp = e.messages(on("gpt-4.1", true)).await;
    assert_eq!(resp.status(), 200);
    let events = sse_events(resp).await;
    assert_eq!(names(&events).last(), Some(&"message_stop"));
}

#[tokio::test]
async fn a_failure_mid_stream_is_one_anthropic_error_event_and_nothing_after() {
    let e = env().await;
    always(
        &e,
        Reply::error_mid_stream(4, "overloaded_error", "the model is overloaded"),
    );
    for (model, _) in MODELS {
        let resp = e.messages(on(model, true)).await;
        assert_eq!(resp.status(), 200, "{model}");
        let events = sse_events(resp).await;
        let (last, data) = events.last().unwrap();
        assert_eq!(last, "error", "{model}: {events:?}");
        assert_eq!(data["error"]["type"], "overloaded_error", "{data}");
        assert_eq!(events.iter().filter(|(n, _)| n == "error").count(), 1);
        assert!(
            !names(&events).contains(&"message_stop"),
            "never a made-up end: {events:?}"
        );
    }
}

#[tokio::test]
async fn a_silent_upstream_gets_pings_between_whole_events() {
    let e = env_with(ProxyConfig {
        ping_interval: Duration::from_millis(100),
        ..ProxyConfig::default()
    })
    .await;
    always(
        &e,
        Reply::silent_then_text(Duration::from_millis(450), "after a pause"),
    );
    for (model, _) in MODELS {
        let resp = e.messages(on(model, true)).await;
        let events = sse_events(resp).await;
        let pings = events.iter().filter(|(n, _)| n == "ping").count();
        assert!(pings >= 2, "{model}: {events:?}");
        assert_eq!(names(&events).last(), Some(&"message_stop"));
        let text: String = events
            .iter()
            .filter_map(|(_, d)| d["delta"]["text"].as_str())
            .collect();
        assert_eq!(text, "after a pause");
    }
}

#[tokio::test]
async fn fields_without_an_openai_equivalent_are_not_sent() {
    let e = env().await;
    always(&e, Reply::text("ok"));
    let mut body = on("gpt-5.4", true);
    body["top_k"] = json!(5);
    body["stop_sequences"] = json!(["END"]);
    body["metadata"] = json!({"user_id": "u"});
    let resp = e.messages(body).await;
    assert_eq!(resp.status(), 200);
    let sent = e.fake.model_requests().last().unwrap().json();
    for dropped in ["top_k", "stop_sequences", "stop", "metadata"] {
        assert!(sent.get(dropped).is_none(), "{dropped} not sent: {sent}");
    }
    assert_eq!(sent["store"], false);
}
