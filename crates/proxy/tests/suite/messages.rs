use super::*;
use claude_host_testkit::fake::{Match, Reply, Rule};
use pretty_assertions::assert_eq;

fn rule(when: Match, reply: Reply) -> Rule {
    Rule {
        when,
        reply,
        times: None,
    }
}

async fn error_of(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

#[tokio::test]
async fn each_invalid_body_is_a_precise_400_without_upstream_call() {
    let e = env().await;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "not json",
            b"{not json".to_vec(),
            "Request body is not valid JSON",
        ),
        (
            "array",
            b"[1]".to_vec(),
            "Request body must be a JSON object",
        ),
        (
            "string",
            b"\"x\"".to_vec(),
            "Request body must be a JSON object",
        ),
        (
            "no model",
            br#"{"messages":[]}"#.to_vec(),
            "Missing required field: model",
        ),
        (
            "empty model",
            br#"{"model":"","messages":[]}"#.to_vec(),
            "Missing required field: model",
        ),
        (
            "no messages",
            br#"{"model":"claude-opus-5-5"}"#.to_vec(),
            "Missing required field: messages",
        ),
        (
            "messages object",
            br#"{"model":"claude-opus-5-5","messages":{}}"#.to_vec(),
            "Missing required field: messages",
        ),
    ];
    for (name, body, want) in cases {
        let resp = e
            .post("/v1/messages?beta=true")
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let (status, body) = error_of(resp).await;
        assert_eq!(status, 400, "{name}");
        assert_eq!(body["error"]["type"], "invalid_request_error", "{name}");
        let msg = body["error"]["message"].as_str().unwrap();
        assert!(msg.starts_with(want), "{name}: {msg}");
        assert_eq!(body["request_id"], Value::Null);
    }
    assert!(e.fake.message_requests().is_empty());
}

#[tokio::test]
async fn oversized_bodies_are_413() {
    let e = env_with(ProxyConfig {
        body_limit: 4096,
        ..ProxyConfig::default()
    })
    .await;
    let big = request(&"x".repeat(10_000), true);
    let (status, body) = error_of(e.messages(big).await).await;
    assert_eq!(status, 413);
    assert_eq!(body["error"]["type"], "request_too_large");
    // Chunked (no Content-Length) is capped while reading.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        vec![Ok(vec![b' '; 3000]), Ok(vec![b' '; 3000])];
    let resp = e
        .post("/v1/messages")
        .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    assert!(e.fake.message_requests().is_empty());
}

#[tokio::test]
async fn unknown_model_is_404_listing_the_plans_models_with_no_upstream_call() {
    let e = env().await;
    let mut req = request("hi", true);
    req["model"] = json!("gpt-9-unheard-of");
    let (status, body) = error_of(e.messages(req).await).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["type"], "not_found_error");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("Unknown model: gpt-9-unheard-of. Available models: claude-opus-5-5"),
        "{msg}"
    );
    for listed in [
        "claude-sonnet-4-5",
        "claude-haiku-5-5",
        "claude-opus-4-6-1m",
        "gpt-5.4",
        "gpt-4.1",
        "gemini-3.1-pro",
    ] {
        assert!(msg.contains(listed), "{msg}");
    }
    let listed = msg.split_once("Available models:").unwrap().1;
    for hidden in ["claude-hidden", "claude-notools", "legacy", "embedding"] {
        assert!(!listed.contains(hidden), "{msg}");
    }
    assert!(e.fake.message_requests().is_empty());
}

#[tokio::test]
async fn model_forms_resolve_to_copilot_ids() {
    let e = env().await;
    let cases = [
        ("claude-opus-5-5", "claude-opus-5.5"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4.5"),
        ("claude-sonnet-4-20250514", "claude-sonnet-4"),
        ("sonnet", "claude-sonnet-5.5"),
        ("claude-opus-4-6[1m]", "claude-opus-4.6-1m"),
        ("claude-haiku-5.5", "claude-haiku-5.5"),
    ];
    for (asked, sent) in cases {
        let mut req = request("hi", false);
        req["model"] = json!(asked);
        let resp = e.messages(req).await;
        assert_eq!(resp.status(), 200, "{asked}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(
            body["model"], asked,
            "non-streaming reply names the requested model"
        );
        let captured = e.fake.message_requests().pop().unwrap();
        assert_eq!(captured.json()["model"], sent, "{asked}");
    }
}

#[tokio::test]
async fn body_is_forwarded_unchanged_except_the_model() {
    let e = env().await;
    let body = r##"{"model":"claude-opus-5-5","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"system","content":"# Environment","output_config":{"effort":"medium"}}],"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.330"}],"metadata":{"user_id":"{\"device_id\":\"d\",\"session_id\":\"s\"}"},"max_tokens":64000,"thinking":{"type":"adaptive","display":"updates"},"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},"output_config":{"effort":"medium"},"future_field":{"nested":[1.50,true,null]},"stream":true}"##;
    let resp = e
        .post("/v1/messages?beta=true")
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let _ = resp.bytes().await.unwrap();
    let captured = e.fake.message_requests().pop().unwrap();
    assert_eq!(
        String::from_utf8(captured.body.to_vec()).unwrap(),
        body.replace("\"claude-opus-5-5\"", "\"claude-opus-5.5\"")
    );
}

#[tokio::test]
async fn betas_are_filtered_through_the_allowlist() {
    let e = env().await;
    let cases: [(&str, Option<&str>); 5] = [
        (
            "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,per-turn-control-2026-07-01,mid-conversation-tool-changes-2026-07-01,advanced-tool-use-2025-11-20,effort-2025-11-24",
            Some(
                "interleaved-thinking-2025-05-14,context-management-2025-06-27,per-turn-control-2026-07-01,advanced-tool-use-2025-11-20",
            ),
        ),
        (
            "interleaved-thinking-2025-05-14",
            Some("interleaved-thinking-2025-05-14"),
        ),
        ("interleaved-thinking", None),
        ("claude-code-20250219, effort-2025-11-24", None),
        (
            " context-management-2025-06-27 ,interleaved-thinking",
            Some("context-management-2025-06-27"),
        ),
    ];
    for (sent, want) in cases {
        let resp = e
            .post("/v1/messages?beta=true")
            .header("anthropic-beta", sent)
            .json(&request("hi", false))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let captured = e.fake.message_requests().pop().unwrap();
        assert_eq!(captured.header("anthropic-beta"), want, "{sent}");
        assert_eq!(captured.header("anthropic-version"), Some("2023-06-01"));
    }
}

#[tokio::test]
async fn copilot_headers_and_an_honest_initiator() {
    let e = env().await;
    let resp = e.messages(request("hello", true)).await;
    assert_eq!(resp.status(), 200);
    let _ = resp.bytes().await.unwrap();
    let follow_up = json!({
        "model": "claude-opus-5-5",
        "max_tokens": 10,
        "stream": true,
        "messages": [
            {"role": "user", "content": "write it"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Write", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}, {"type": "text", "text": "<system-reminder>r</system-reminder>"}]},
            {"role": "system", "content": "env"}
        ]
    });
    let _ = e.messages(follow_up).await.bytes().await.unwrap();
    let reqs = e.fake.message_requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].header("x-initiator"), Some("user"));
    assert_eq!(reqs[1].header("x-initiator"), Some("agent"));
    for r in &reqs {
        assert_eq!(r.header("openai-intent"), Some("messages-proxy"));
        assert_eq!(r.header("x-interaction-type"), Some("messages-proxy"));
        assert_eq!(
            r.header("user-agent"),
            Some("vscode_claude_code/2.1.330 (external, sdk-cli)")
        );
        assert_eq!(r.header("vscode-sessionid"), Some("test-session"));
        assert!(r.header("authorization").unwrap().starts_with("Bearer "));
        assert!(
            !r.header("authorization").unwrap().contains("gho_"),
            "GitHub token leaked to Copilot API"
        );
    }
    assert_ne!(
        reqs[0].header("x-request-id"),
        reqs[1].header("x-request-id")
    );
    assert_eq!(reqs[0].header("copilot-vision-request"), None, "no image");
    // An image (a screenshot a tool returned) asks for Copilot's vision handling.
    let with_image = json!({
        "model": "claude-opus-5-5", "max_tokens": 10, "stream": true,
        "messages": [
            {"role": "user", "content": "look"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_2", "name": "Read", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}]}
        ]
    });
    let _ = e.messages(with_image).await.bytes().await.unwrap();
    let last = e.fake.message_requests().pop().unwrap();
    assert_eq!(last.header("copilot-vision-request"), Some("true"));
    assert_eq!(e.fake.header_violations(), Vec::<String>::new());
}

#[tokio::test]
async fn upstream_error_statuses_and_envelopes_pass_through() {
    let e = env().await;
    e.fake.push(rule(
        Match::LastUserContains("limit me".into()),
        Reply::error_before_stream(429, "rate_limit_error", "slow down")
            .with_header("retry-after", "7"),
    ));
    let resp = e.messages(request("limit me", true)).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "7");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(
        body["error"],
        json!({"type":"rate_limit_error","message":"slow down"})
    );

    e.fake.push(rule(
        Match::LastUserContains("overload".into()),
        Reply::error_before_stream(529, "overloaded_error", "busy"),
    ));
    let (status, body) = error_of(e.messages(request("overload", false)).await).await;
    assert_eq!(status, 529);
    assert_eq!(body["error"]["type"], "overloaded_error");
}

/// Status and body text of a reply, the body as JSON (a panic shows what arrived instead).
async fn status_and_json(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    let body = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("HTTP {status} with a body that is not JSON ({e}): {text:?}"));
    (status, body)
}

#[tokio::test]
async fn a_non_streaming_reply_cut_off_mid_body_is_a_502_not_a_partial_200() {
    let e = env().await;
    e.fake.push(rule(
        Match::LastUserContains("cut me".into()),
        Reply::cut_off("an answer that never arrives whole", 40)
            .with_header("request-id", "req_cut"),
    ));
    let resp = e.messages(request("cut me", false)).await;
    // The upstream's request id stays, for whoever reports the failure.
    assert_eq!(resp.headers()["request-id"], "req_cut");
    let (status, body) = status_and_json(resp).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "api_error");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("upstream response was cut off after 40 bytes: "),
        "{msg}"
    );
    // The next request is served whole: the failure was that one reply's alone.
    let (status, body) = status_and_json(e.messages(request("hi", false)).await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["content"][0]["text"], "ok");
}

#[tokio::test]
async fn a_2xx_body_that_is_not_a_json_message_is_a_502() {
    let e = env().await;
    e.fake.push(rule(
        Match::LastUserContains("portal".into()),
        Reply::raw(200, "text/html", "<html>Sign in to the hotel Wi-Fi</html>"),
    ));
    e.fake.push(rule(
        Match::LastUserContains("array".into()),
        Reply::json(json!(["not", "a", "message"])),
    ));
    let (status, body) = status_and_json(e.messages(request("portal", false)).await).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["type"], "api_error");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("upstream answered HTTP 200 with a body that is not valid JSON"),
        "{msg}"
    );
    let (status, body) = status_and_json(e.messages(request("array", false)).await).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(
        body["error"]["message"],
        "upstream answered HTTP 200 with JSON that is not a message object"
    );
}

#[tokio::test]
async fn an_error_reply_cut_off_mid_body_keeps_its_status() {
    let e = env().await;
    e.fake.push(rule(
        Match::LastUserContains("limit".into()),
        Reply::error_cut_off(429, "rate_limit_error", "slow down", 20),
    ));
    let (status, body) = status_and_json(e.messages(request("limit", false)).await).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["type"], "rate_limit_error");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with(
            "upstream returned HTTP 429, and its error body was cut off after 20 bytes: "
        ),
        "{msg}"
    );
}

#[tokio::test]
async fn unreachable_upstream_is_502_api_error() {
    let fake = FakeUpstream::start().await.unwrap();
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let proxy = proxy_with_copilot_api(&fake, dead_url).await;
    let resp = post_stream(&proxy).await;
    assert_eq!(resp.status(), 502);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "api_error");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("upstream unreachable"),
        "{body}"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn models_page_lists_the_plans_models_default_first_then_claude_with_their_api() {
    let e = env().await;
    let resp = e
        .http
        .get(e.url("/v1/models"))
        .header("authorization", e.bearer())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let page: Value = resp.json().await.unwrap();
    let ids: Vec<&str> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids[0], "claude-opus-5-5");
    for want in [
        "claude-sonnet-5-5",
        "claude-haiku-5-5",
        "claude-sonnet-4-5",
        "claude-opus-4-6",
        "claude-opus-4-6-1m",
        "claude-sonnet-4",
    ] {
        assert!(ids.contains(&want), "{want} missing from {ids:?}");
    }
    // Claude models first (Claude Code's own), then the others in catalog order.
    assert_eq!(
        ids[7..],
        [
            "gpt-5.4",
            "gpt-5-mini",
            "gpt-4.1",
            "gpt-4o",
            "gemini-3.1-pro"
        ],
        "{ids:?}"
    );
    let entry = |id: &str| {
        page["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(entry("gpt-5.4")["copilot"]["endpoint"], "/responses");
    assert_eq!(entry("gpt-5.4")["copilot"]["reasoning"], true);
    assert_eq!(entry("gpt-4.1")["copilot"]["endpoint"], "/chat/completions");
    assert_eq!(entry("gpt-4.1")["copilot"]["premium_multiplier"], 0.0);
    assert_eq!(
        entry("claude-opus-5-5")["copilot"]["endpoint"],
        "/v1/messages"
    );
    assert!(entry("gpt-5.4")["max_input_tokens"].is_u64());
    assert_eq!(page["has_more"], false);
    assert_eq!(page["first_id"], ids[0]);
    assert_eq!(page["last_id"], *ids.last().unwrap());
    let first = &page["data"][0];
    assert_eq!(first["type"], "model");
    assert!(first["display_name"].is_string());
    assert_eq!(first["created_at"], "1970-01-01T00:00:00Z");
}

#[tokio::test]
async fn count_tokens_is_a_marked_local_estimate() {
    let e = env().await;
    let small = e
        .post("/v1/messages/count_tokens?beta=true")
        .json(&request("hi", false))
        .send()
        .await
        .unwrap();
    assert_eq!(small.status(), 200);
    assert_eq!(small.headers()["x-claude-host-estimate"], "true");
    let small: Value = small.json().await.unwrap();
    let big: Value = e
        .post("/v1/messages/count_tokens")
        .json(&request(&"lorem ipsum ".repeat(2000), false))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let (s, b) = (
        small["input_tokens"].as_u64().unwrap(),
        big["input_tokens"].as_u64().unwrap(),
    );
    // 4,000 words, one token each, as o200k counts them.
    assert!(s > 0 && (4000..4100).contains(&b), "{s} {b}");
    let bad = e
        .post("/v1/messages/count_tokens")
        .body("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    assert!(
        e.fake.message_requests().is_empty(),
        "count_tokens must not reach the upstream"
    );
}

#[tokio::test]
async fn the_hosts_warm_up_turn_is_answered_here_and_readies_the_upstream_for_the_next_call() {
    use claude_host_protocol::request_kind::WARM_UP_PROMPT;
    let e = env().await;
    let warm_up = |stream: bool| {
        json!({"model": "claude-sonnet-4-5", "max_tokens": 100, "stream": stream, "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>\ncontext\n</system-reminder>"},
                {"type": "text", "text": WARM_UP_PROMPT}]}]})
    };
    let streamed = e.messages(warm_up(true)).await;
    assert_eq!(streamed.status(), 200);
    assert_eq!(
        streamed.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let text = streamed.text().await.unwrap();
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    for data in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
        let event: Value = serde_json::from_str(data).unwrap();
        assert!(event["type"].is_string(), "{data}");
    }
    let whole: Value = e.messages(warm_up(false)).await.json().await.unwrap();
    assert_eq!(whole["type"], "message");
    assert_eq!(whole["model"], "claude-sonnet-4-5");
    assert_eq!(whole["stop_reason"], "end_turn");
    assert!(e.fake.message_requests().is_empty());
    // Answered once the upstream was readied: the catalog fetched, a connection open.
    let fetched = e.fake.requests();
    assert!(
        fetched
            .iter()
            .any(|r| r.method == "GET" && r.path.starts_with("/models")),
        "{:?}",
        fetched.iter().map(|r| &r.path).collect::<Vec<_>>()
    );
    let connections = e.fake.connections();
    // A prompt that only mentions it goes to the model, on the connection made ahead.
    e.fake
        .push(rule(Match::Always, Reply::text("from the model")));
    let asked = json!({"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [
        {"role": "user", "content": format!("what is {WARM_UP_PROMPT}?")}]});
    let resp: Value = e.messages(asked).await.json().await.unwrap();
    assert_eq!(resp["content"][0]["text"], "from the model");
    assert_eq!(e.fake.message_requests().len(), 1);
    assert_eq!(e.fake.connections(), connections, "no new connection");
}
