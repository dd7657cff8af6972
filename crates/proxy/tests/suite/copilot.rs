//! Copilot as it really behaves: the fake refuses what Copilot refuses, and each adaptation
//! rule of the proxy (docs/PROXY.md) is what lets the request through.

use super::*;
use claude_host_testkit::fake::{FakeConfig, Match, Reply, Rule};
use pretty_assertions::assert_eq;

fn answer(e: &Env) {
    e.fake.push(Rule {
        when: Match::Always,
        reply: Reply::text("ok"),
        times: Some(usize::MAX),
    });
}

/// Sends `body` (non-streaming) and returns (status, JSON answer, what Copilot received).
async fn send(e: &Env, mut body: Value) -> (u16, Value, Option<Value>) {
    body["messages"] = json!([{"role": "user", "content": "hi"}]);
    let before = e.fake.message_requests().len();
    let resp = e.messages(body).await;
    let status = resp.status().as_u16();
    let answer: Value = resp.json().await.unwrap();
    let sent = e.fake.message_requests().get(before).map(|r| r.json());
    (status, answer, sent)
}

/// Sends `body`, which the proxy must fit so that the fake takes it; returns what the fake got.
async fn forwarded(e: &Env, body: Value) -> Value {
    let (status, answer, sent) = send(e, body).await;
    assert_eq!(status, 200, "{answer}");
    sent.expect("forwarded to Copilot")
}

#[tokio::test]
async fn max_tokens_is_clamped_to_the_models_output_limit() {
    let e = env().await;
    answer(&e);
    let sent = forwarded(
        &e,
        json!({"model": "claude-opus-5-5", "max_tokens": 128000}),
    )
    .await;
    assert_eq!(sent["max_tokens"], 64000);
}

#[tokio::test]
async fn enabled_thinking_becomes_adaptive_for_an_adaptive_model() {
    let e = env().await;
    answer(&e);
    let sent = forwarded(
        &e,
        json!({"model": "claude-opus-5-5", "max_tokens": 32000,
               "thinking": {"type": "enabled", "budget_tokens": 8000}}),
    )
    .await;
    assert_eq!(sent["thinking"], json!({"type": "adaptive"}));
}

#[tokio::test]
async fn adaptive_thinking_becomes_a_budget_for_a_model_without_it() {
    let e = env().await;
    answer(&e);
    let sent = forwarded(
        &e,
        json!({"model": "claude-sonnet-4-5", "max_tokens": 16000,
               "thinking": {"type": "adaptive", "display": "omitted"}}),
    )
    .await;
    assert_eq!(
        sent["thinking"],
        json!({"type": "enabled", "display": "omitted", "budget_tokens": 15999})
    );
}

#[tokio::test]
async fn a_budget_outside_the_models_range_is_clamped() {
    let e = env().await;
    answer(&e);
    let sent = forwarded(
        &e,
        json!({"model": "claude-sonnet-4-5", "max_tokens": 64000,
               "thinking": {"type": "enabled", "budget_tokens": 50000}}),
    )
    .await;
    assert_eq!(sent["thinking"]["budget_tokens"], 32000);
}

#[tokio::test]
async fn effort_moves_to_what_the_model_offers() {
    let e = env().await;
    answer(&e);
    let sent = forwarded(
        &e,
        json!({"model": "claude-opus-5-5", "max_tokens": 1000, "output_config": {"effort": "max"}}),
    )
    .await;
    assert_eq!(sent["output_config"], json!({"effort": "high"}));
    let sent = forwarded(
        &e,
        json!({"model": "claude-sonnet-4-5", "max_tokens": 1000, "output_config": {"effort": "medium"}}),
    )
    .await;
    assert!(sent.get("output_config").is_none());
}

/// A fake whose catalog has a Claude model that neither reads images nor thinks, and whose
/// prompt limit is small.
async fn plain_model_env() -> Env {
    let mut config = FakeConfig::default();
    let mut plain = config.models[0].clone();
    plain["id"] = json!("claude-plain-4.9");
    plain["name"] = json!("Claude Plain 4.9");
    let supports = &mut plain["capabilities"]["supports"];
    supports["vision"] = json!(false);
    supports
        .as_object_mut()
        .unwrap()
        .remove("max_thinking_budget");
    supports
        .as_object_mut()
        .unwrap()
        .remove("min_thinking_budget");
    plain["capabilities"]["limits"]["max_prompt_tokens"] = json!(2000);
    config.models.push(plain);
    let fake = claude_host_testkit::fake::FakeUpstream::start_with(config)
        .await
        .unwrap();
    env_on(fake, ProxyConfig::default()).await
}

#[tokio::test]
async fn thinking_is_dropped_for_a_model_that_does_not_think() {
    let e = plain_model_env().await;
    answer(&e);
    let sent = forwarded(
        &e,
        json!({"model": "claude-plain-4-9", "max_tokens": 1000, "thinking": {"type": "adaptive"}}),
    )
    .await;
    assert!(sent.get("thinking").is_none());
}

#[tokio::test]
async fn an_image_for_a_model_without_vision_is_refused_before_copilot() {
    let e = plain_model_env().await;
    answer(&e);
    let resp = e
        .messages(json!({"model": "claude-plain-4-9", "max_tokens": 100, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}]}))
        .await;
    assert_eq!(resp.status().as_u16(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("claude-plain-4.9") && message.contains("images"),
        "{message}"
    );
    assert!(e.fake.message_requests().is_empty());
}

#[tokio::test]
async fn a_server_tool_is_refused_with_its_name() {
    let e = env().await;
    answer(&e);
    let (status, answer, sent) = send(
        &e,
        json!({"model": "claude-opus-5-5", "max_tokens": 100,
               "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}]}),
    )
    .await;
    assert_eq!(status, 400);
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("web_search") && message.contains("Copilot"),
        "{message}"
    );
    assert!(sent.is_none(), "never sent upstream");
}

#[tokio::test]
async fn a_prompt_over_the_limit_is_anthropics_prompt_is_too_long() {
    let e = plain_model_env().await;
    answer(&e);
    let long = "lorem ipsum dolor sit amet ".repeat(2000);
    let resp = e
        .messages(
            json!({"model": "claude-plain-4-9", "max_tokens": 100, "stream": true,
                          "messages": [{"role": "user", "content": long}]}),
        )
        .await;
    assert_eq!(resp.status().as_u16(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("prompt is too long: ") && message.ends_with(" tokens > 2000 maximum"),
        "{message}"
    );
}

#[tokio::test]
async fn used_up_premium_requests_are_said_plainly_with_the_reset_date() {
    let e = env().await;
    answer(&e);
    e.fake.exhaust_premium(true);
    let (status, answer, _) =
        send(&e, json!({"model": "claude-opus-5-5", "max_tokens": 100})).await;
    assert_eq!(status, 402);
    assert_eq!(answer["error"]["type"], "billing_error");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("premium requests are used up"),
        "{message}"
    );
    assert!(message.contains("2026-12-01"), "{message}");
}

#[tokio::test]
async fn the_quota_fallback_answers_and_says_so_in_the_model() {
    let fake = claude_host_testkit::fake::FakeUpstream::start()
        .await
        .unwrap();
    let e = env_on(
        fake,
        ProxyConfig {
            quota_fallback_model: Some("claude-haiku-5-5".into()),
            ..ProxyConfig::default()
        },
    )
    .await;
    answer(&e);
    e.fake.exhaust_premium(true);
    let (status, answer, _) =
        send(&e, json!({"model": "claude-opus-5-5", "max_tokens": 100})).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["model"], "claude-haiku-5-5",
        "the usage names the fallback"
    );
    let models: Vec<String> = e
        .fake
        .message_requests()
        .iter()
        .map(|r| r.json()["model"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(models, ["claude-opus-5.5", "claude-haiku-5.5"]);
    // Streams too; and from now on the fallback answers at once.
    let resp = e
        .messages(
            json!({"model": "claude-opus-5-5", "max_tokens": 100, "stream": true,
                          "messages": [{"role": "user", "content": "again"}]}),
        )
        .await;
    let events = sse_events(resp).await;
    assert_eq!(events[0].1["message"]["model"], "claude-haiku-5-5");
    assert_eq!(e.fake.message_requests().len(), 3);
}

#[tokio::test]
async fn the_models_page_tells_copilots_limits() {
    let e = env().await;
    let page: Value = e
        .http
        .get(e.url("/v1/models"))
        .header("authorization", e.bearer())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let opus = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "claude-opus-5-5")
        .unwrap();
    assert_eq!(opus["max_input_tokens"], 168000);
    assert_eq!(opus["max_tokens"], 64000);
}

#[test]
fn the_token_estimate_errs_high_on_every_kind_of_text() {
    use claude_host_protocol::count_tokens::estimate_text;
    use claude_host_testkit::copilot_rules::text_tokens;
    let mut seed: u64 = 42;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let b64: Vec<char> = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
        .chars()
        .collect();
    let lower: Vec<char> = "abcdefghijklmnopqrstuvwxyz".chars().collect();
    let samples = [
        (
            "base64",
            (0..20_000)
                .map(|_| b64[(rnd() % 64) as usize])
                .collect::<String>(),
        ),
        (
            "lowercase",
            (0..20_000).map(|_| lower[(rnd() % 26) as usize]).collect(),
        ),
        (
            "hex",
            (0..20_000)
                .map(|_| char::from_digit((rnd() % 16) as u32, 16).unwrap())
                .collect(),
        ),
        ("digits", (1..5000).map(|i| format!("{i}\n")).collect()),
        (
            "cjk",
            (0..5000)
                .map(|i| char::from_u32(0x4e00 + (i * 37 % 20000)).unwrap())
                .collect(),
        ),
        (
            "emoji",
            (0..3000)
                .map(|i| char::from_u32(0x1F600 + (i % 80)).unwrap())
                .collect(),
        ),
        (
            "accents",
            "naïve café déjà vu façade jalapeño über ".repeat(300),
        ),
        (
            "prose",
            "The quick brown fox jumps over the lazy dog, and then it runs away. ".repeat(300),
        ),
        (
            "code",
            "fn main() { let x = vec![1, 2, 3]; println!(\"{:?}\", x); }\n".repeat(300),
        ),
        (
            "punctuation",
            "!@#$%^&*()_+-=[]{};':\",./<>?|`~".repeat(300),
        ),
        (
            "indented",
            "        if x {\n            y();\n        }\n".repeat(500),
        ),
    ];
    for (name, text) in samples {
        let (ours, o200k) = (estimate_text(&text), text_tokens(&text));
        eprintln!(
            "{name:12} estimate/o200k = {:.2}",
            ours as f64 / o200k as f64
        );
        assert!(ours >= o200k, "{name}: {ours} < {o200k}");
    }
}
