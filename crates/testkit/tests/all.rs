//! Tests of the fake upstream itself: if the fake drifts from the real wire formats, every
//! other test loses its meaning.

// Test helpers outside #[test] functions panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;

use claude_host_testkit::fake::{FakeConfig, FakeUpstream, Match, Reply, Rule};
use serde_json::{Value, json};
use std::time::Duration;

fn client() -> reqwest::Client {
    claude_host_testkit::http_client()
}

async fn mint(fake: &FakeUpstream) -> String {
    let v: Value = client()
        .get(format!("{}/copilot_internal/v2/token", fake.url()))
        .header("authorization", "token gho_fake_github_token")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["token"].as_str().unwrap().to_owned()
}

async fn messages(fake: &FakeUpstream, token: &str, body: Value) -> reqwest::Response {
    client()
        .post(format!("{}/v1/messages?beta=true", fake.url()))
        .header("authorization", format!("Bearer {token}"))
        .json(&body)
        .send()
        .await
        .unwrap()
}

fn parse(bytes: &[u8]) -> Vec<(String, Value)> {
    let mut p = claude_host_protocol::sse::EventParser::new();
    p.push(bytes);
    std::iter::from_fn(|| p.next_event())
        .map(|e| (e.name, serde_json::from_str(&e.data).unwrap()))
        .collect()
}

#[tokio::test]
async fn mints_distinct_tokens_and_rejects_bad_credentials() {
    let fake = FakeUpstream::start().await.unwrap();
    let a = mint(&fake).await;
    let b = mint(&fake).await;
    assert_ne!(a, b);
    assert_eq!(fake.mint_count(), 2);
    let bad = client()
        .get(format!("{}/copilot_internal/v2/token", fake.url()))
        .header("authorization", "token nope")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 401);
    let models = client()
        .get(format!("{}/models", fake.url()))
        .header("authorization", "Bearer nope")
        .send()
        .await
        .unwrap();
    assert_eq!(models.status(), 401);
    let models: Value = client()
        .get(format!("{}/models", fake.url()))
        .header("authorization", format!("Bearer {a}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(models["data"].as_array().unwrap().len() > 7);
}

#[tokio::test]
async fn text_reply_is_exact_anthropic_sse() {
    let fake = FakeUpstream::start().await.unwrap();
    let tok = mint(&fake).await;
    fake.push(Rule {
        when: Match::LastUserContains("hello".into()),
        reply: Reply::text("Hi there!"),
        times: None,
    });
    let body = json!({"model": "claude-opus-5.5", "stream": true, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "<system-reminder>x</system-reminder>"}, {"type": "text", "text": "hello"}]},
        {"role": "system", "content": "env"}]});
    let resp = messages(&fake, &tok, body).await;
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let raw = resp.bytes().await.unwrap();
    assert!(!String::from_utf8_lossy(&raw).contains("[DONE]"));
    let ev = parse(&raw);
    let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..3], ["message_start", "ping", "content_block_start"]);
    assert_eq!(
        names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    for (name, data) in &ev {
        assert_eq!(
            data["type"],
            name.as_str(),
            "data.type matches the event name"
        );
    }
    let text: String = ev
        .iter()
        .filter_map(|(_, d)| d["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, "Hi there!");
    assert_eq!(ev[0].1["message"]["model"], "claude-opus-5.5");
    let delta = &ev[ev.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    // The header contract was not met by this bare client.
    assert!(
        fake.header_violations()
            .iter()
            .any(|v| v.contains("x-initiator"))
    );
}

#[tokio::test]
async fn rules_match_in_order_and_are_used_up() {
    let fake = FakeUpstream::start().await.unwrap();
    let tok = mint(&fake).await;
    fake.push(Rule {
        when: Match::HasToolResult,
        reply: Reply::text("after tool"),
        times: None,
    });
    fake.push(Rule {
        when: Match::Always,
        reply: Reply::text("first"),
        times: Some(2),
    });
    let ask = |content: Value| json!({"model": "claude-opus-5.5", "messages": [{"role": "user", "content": content}]});
    let text = |v: Value| v["content"][0]["text"].as_str().unwrap().to_owned();
    let get = |b: Value| {
        let fake = &fake;
        let tok = tok.clone();
        async move { text(messages(fake, &tok, b).await.json().await.unwrap()) }
    };
    assert_eq!(get(ask(json!("q"))).await, "first");
    assert_eq!(
        get(ask(
            json!([{"type": "tool_result", "tool_use_id": "t", "content": "r"}])
        ))
        .await,
        "after tool"
    );
    assert_eq!(get(ask(json!("q"))).await, "first");
    assert_eq!(
        get(ask(json!("q"))).await,
        "ok",
        "default reply once the rules are used up"
    );
}

#[tokio::test]
async fn unknown_models_and_bad_tokens_are_refused_like_copilot() {
    let fake = FakeUpstream::start().await.unwrap();
    let tok = mint(&fake).await;
    let r = messages(
        &fake,
        &tok,
        json!({"model": "claude-sonnet-4-5", "messages": []}),
    )
    .await;
    assert_eq!(r.status(), 400);
    let r = messages(
        &fake,
        "tid=forged",
        json!({"model": "claude-opus-5.5", "messages": []}),
    )
    .await;
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn batching_writes_several_events_per_chunk() {
    let fake = FakeUpstream::start_with(FakeConfig {
        sse_events_per_write: 10,
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let tok = mint(&fake).await;
    fake.push(Rule {
        when: Match::Always,
        reply: Reply::many_deltas(100),
        times: None,
    });
    let mut resp = messages(&fake, &tok, json!({"model": "claude-opus-5.5", "stream": true, "messages": [{"role": "user", "content": "x"}]})).await;
    let first = resp.chunk().await.unwrap().unwrap();
    assert!(
        first.windows(2).filter(|w| w == b"\n\n").count() >= 2,
        "first chunk carries several events"
    );
    let mut rest = first.to_vec();
    while let Some(c) = resp.chunk().await.unwrap() {
        rest.extend_from_slice(&c);
    }
    let deltas = parse(&rest)
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .count();
    assert_eq!(deltas, 100);
}

#[tokio::test]
async fn dropping_a_reply_mid_stream_is_recorded_as_a_disconnect() {
    let fake = FakeUpstream::start().await.unwrap();
    let tok = mint(&fake).await;
    let (reply, _gate) = Reply::gated("held back", 2);
    fake.push(Rule {
        when: Match::Always,
        reply,
        times: None,
    });
    let mut resp = messages(&fake, &tok, json!({"model": "claude-opus-5.5", "stream": true, "messages": [{"role": "user", "content": "x"}]})).await;
    let _ = resp.chunk().await.unwrap();
    drop(resp);
    fake.wait_disconnects(1, Duration::from_secs(1))
        .await
        .unwrap();
    // A reply read to its end is not a disconnect.
    let done = messages(&fake, &tok, json!({"model": "claude-opus-5.5", "stream": true, "messages": [{"role": "user", "content": "y"}]})).await;
    let _ = done.bytes().await.unwrap();
    assert_eq!(fake.disconnects(), 1);
}

/// Sends one `POST /v1/messages` over a bare socket and returns everything the fake wrote
/// before it closed the connection: the wire itself, not what a client library makes of it.
async fn raw_exchange(fake: &FakeUpstream, token: &str, body: &Value) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = body.to_string();
    let mut sock = tokio::net::TcpStream::connect(fake.addr()).await.unwrap();
    let req = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        fake.addr(),
        body.len()
    );
    sock.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), sock.read_to_end(&mut out))
        .await
        .expect("the fake never closed the connection")
        .unwrap();
    String::from_utf8(out).unwrap()
}

#[tokio::test]
async fn cut_off_replies_drop_the_connection_mid_body() {
    let fake = FakeUpstream::start().await.unwrap();
    let tok = mint(&fake).await;
    fake.push(Rule {
        when: Match::LastUserContains("json".into()),
        reply: Reply::cut_off("never whole", 40),
        times: None,
    });
    fake.push(Rule {
        when: Match::LastUserContains("sse".into()),
        reply: Reply::cut_off("never whole", 300),
        times: None,
    });
    let ask = |text: &str, stream: bool| json!({"model": "claude-opus-5.5", "stream": stream, "messages": [{"role": "user", "content": text}]});

    let wire = raw_exchange(&fake, &tok, &ask("json", false)).await;
    let (head, body) = wire.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    let declared: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(body.len(), 40, "{body:?}");
    assert!(declared > 40, "{head}");
    assert!(body.starts_with(r#"{"id":"msg_fake_"#), "{body}");

    let wire = raw_exchange(&fake, &tok, &ask("sse", true)).await;
    let (head, body) = wire.split_once("\r\n\r\n").unwrap();
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    assert!(body.contains("event: message_start"), "{body}");
    // No terminating zero-length chunk: the message is incomplete on the wire.
    assert!(!body.ends_with("0\r\n\r\n"), "{body}");
    assert!(!body.contains("message_stop"), "{body}");
    // Scripted cuts are the fake's doing, not a client giving up.
    assert_eq!(fake.disconnects(), 0);
}

#[test]
fn the_pinned_cli_is_available_and_pinned() {
    let bin = claude_host_testkit::cli::pinned_cli().unwrap();
    let out = std::process::Command::new(bin)
        .arg("--version")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("2.1.330"));
}
