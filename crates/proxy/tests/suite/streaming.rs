use super::*;
use claude_host_testkit::fake::{Match, Reply, Rule};
use futures::StreamExt;
use pretty_assertions::assert_eq;

fn rule(trigger: &str, reply: Reply) -> Rule {
    Rule {
        when: Match::LastUserContains(trigger.into()),
        reply,
        times: None,
    }
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(n, _)| n.as_str()).collect()
}

/// The fake's own stream for the same request, fetched directly with a minted token.
async fn direct_events(e: &Env, body: &Value) -> Vec<(String, Value)> {
    sse_events(direct_response(e, body).await).await
}

async fn direct_response(e: &Env, body: &Value) -> reqwest::Response {
    let tok = e.copilot.token().await.unwrap();
    let mut body = body.clone();
    body["model"] = json!("claude-opus-5.5");
    e.http
        .post(format!("{}/v1/messages", e.fake.url()))
        .header("authorization", format!("Bearer {}", tok.token))
        .header("copilot-integration-id", "vscode-chat")
        .json(&body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn stream_is_relayed_in_order_with_only_the_model_rewritten() {
    let e = env().await;
    e.fake.push(Rule {
        when: Match::Always,
        reply: Reply::tool_use("Write", json!({"file_path": "/tmp/x", "content": "hi\n"})),
        times: Some(2),
    });
    let body = request("write it", true);
    let resp = e.messages(body.clone()).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let raw = resp.bytes().await.unwrap();
    assert!(!String::from_utf8_lossy(&raw).contains("[DONE]"));
    let via_proxy = parse_sse(&raw);
    let direct = direct_events(&e, &body).await;
    assert_eq!(names(&via_proxy), names(&direct));
    assert_eq!(via_proxy[0].1["message"]["model"], "claude-opus-5-5");
    assert_eq!(direct[0].1["message"]["model"], "claude-opus-5.5");
    for ((pn, pd), (dn, dd)) in via_proxy.iter().zip(&direct).skip(1) {
        assert_eq!(pn, dn);
        if pn != "message_start" {
            assert_eq!(strip_ids(pd), strip_ids(dd));
        }
    }
    assert_eq!(names(&via_proxy).last(), Some(&"message_stop"));
    let json: String = via_proxy
        .iter()
        .filter_map(|(_, d)| d["delta"]["partial_json"].as_str())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&json).unwrap(),
        json!({"file_path": "/tmp/x", "content": "hi\n"})
    );
}

fn strip_ids(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(cb) = v.get_mut("content_block").and_then(Value::as_object_mut) {
        cb.remove("id");
    }
    v
}

#[tokio::test]
async fn thinking_and_signatures_pass_through() {
    let e = env().await;
    e.fake.push(rule(
        "think",
        Reply::thinking("Let me think.", "sig_abc==", "Answer."),
    ));
    let events = sse_events(e.messages(request("think hard", true)).await).await;
    let thinking: String = events
        .iter()
        .filter_map(|(_, d)| d["delta"]["thinking"].as_str())
        .collect();
    let sig: String = events
        .iter()
        .filter_map(|(_, d)| d["delta"]["signature"].as_str())
        .collect();
    assert_eq!(thinking, "Let me think.");
    assert_eq!(sig, "sig_abc==");
}

#[tokio::test]
async fn an_error_before_the_stream_is_json_with_its_status() {
    let e = env().await;
    e.fake.push(rule(
        "boom",
        Reply::error_before_stream(500, "api_error", "exploded"),
    ));
    let resp = e.messages(request("boom", true)).await;
    assert_eq!(resp.status(), 500);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body["error"],
        json!({"type": "api_error", "message": "exploded"})
    );
    // An error reported as the very first SSE event also becomes a JSON status.
    e.fake.push(rule(
        "first",
        Reply::error_mid_stream(0, "overloaded_error", "busy now"),
    ));
    let resp = e.messages(request("first event error", true)).await;
    assert_eq!(resp.status(), 529);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "overloaded_error");
}

#[tokio::test]
async fn a_mid_stream_error_is_one_error_frame_and_no_message_stop() {
    let e = env().await;
    e.fake.push(rule(
        "midway",
        Reply::error_mid_stream(4, "overloaded_error", "capacity"),
    ));
    let events = sse_events(e.messages(request("fail midway", true)).await).await;
    let n = names(&events);
    assert_eq!(n.iter().filter(|n| **n == "error").count(), 1, "{n:?}");
    assert_eq!(n.last(), Some(&"error"));
    assert!(!n.contains(&"message_stop"));
    assert_eq!(n[0], "message_start");
    let (_, err) = events.last().unwrap();
    assert_eq!(err["type"], "error");
    assert_eq!(err["error"]["type"], "overloaded_error");
    assert_eq!(err["error"]["message"], "capacity");

    // A connection that just ends early gets a synthesized error, not a made-up stop.
    e.fake.push(rule("truncate", Reply::truncated(4)));
    let events = sse_events(e.messages(request("truncate me", true)).await).await;
    let n = names(&events);
    assert_eq!(n.last(), Some(&"error"), "{n:?}");
    assert!(!n.contains(&"message_stop"));
    assert_eq!(events.last().unwrap().1["error"]["type"], "api_error");
}

#[tokio::test]
async fn pings_flow_while_the_upstream_is_silent() {
    let e = env_with(ProxyConfig {
        ping_interval: Duration::from_millis(100),
        ..ProxyConfig::default()
    })
    .await;
    e.fake.push(rule(
        "slow",
        Reply::silent_then_text(Duration::from_millis(650), "finally"),
    ));
    let events = sse_events(e.messages(request("slow thinker", true)).await).await;
    let n = names(&events);
    assert_eq!(n[0], "message_start");
    let first_content = n.iter().position(|n| *n == "content_block_start").unwrap();
    let pings = n[1..first_content].iter().filter(|n| **n == "ping").count();
    assert!(
        pings >= 3,
        "expected pings during 650 ms of silence at 100 ms, got {n:?}"
    );
    assert_eq!(n.last(), Some(&"message_stop"));
    let text: String = events
        .iter()
        .filter_map(|(_, d)| d["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, "finally");
}

#[tokio::test]
async fn a_client_disconnect_cancels_the_upstream_request_within_a_second() {
    let e = env().await;
    let (reply, _gate) = Reply::gated("never finished", 3);
    e.fake.push(rule("gated", reply));
    let resp = e.messages(request("gated stream", true)).await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let first = body.next().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("message_start"));
    let before = e.fake.disconnects();
    drop(body);
    e.fake
        .wait_disconnects(before + 1, Duration::from_secs(1))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_disconnect_before_the_first_event_cancels_too() {
    let e = env().await;
    e.fake.push(rule(
        "quiet",
        Reply::silent_before_first_event(Duration::from_secs(30), "late"),
    ));
    let http = e.http.clone();
    let url = e.url("/v1/messages");
    let bearer = e.bearer();
    let task = tokio::spawn(async move {
        http.post(url)
            .header("authorization", bearer)
            .json(&request("quiet please", true))
            .send()
            .await
    });
    // Wait until the proxy's request reached the fake, then hang up.
    e.fake
        .wait_message_requests(1, Duration::from_secs(5))
        .await
        .unwrap();
    task.abort();
    e.fake
        .wait_disconnects(1, Duration::from_secs(1))
        .await
        .unwrap();
}

#[tokio::test]
async fn shutdown_aborts_in_flight_streams() {
    let e = env().await;
    let (reply, _gate) = Reply::gated("held", 2);
    e.fake.push(rule("hold", reply));
    let resp = e.messages(request("hold on", true)).await;
    let mut body = resp.bytes_stream();
    let _ = body.next().await.unwrap().unwrap();
    tokio::time::timeout(Duration::from_secs(2), e.proxy.shutdown())
        .await
        .expect("shutdown hung");
    e.fake
        .wait_disconnects(1, Duration::from_secs(1))
        .await
        .unwrap();
    // The client sees its stream end (error or EOF), not a hang.
    let rest = tokio::time::timeout(Duration::from_secs(2), async {
        while let Some(Ok(_)) = body.next().await {}
    })
    .await;
    assert!(rest.is_ok());
    assert!(
        e.http.get(e.url("/")).send().await.is_err(),
        "still accepting after shutdown"
    );
}

#[tokio::test]
async fn gated_stream_delivers_events_before_the_upstream_finishes() {
    let e = env().await;
    let (reply, gate) = Reply::gated("hello there", 3);
    e.fake.push(rule("live", reply));
    let resp = e.messages(request("live please", true)).await;
    let mut body = resp.bytes_stream();
    let mut seen = Vec::new();
    // Events sent before the gate arrive while the upstream is still holding the rest.
    while !String::from_utf8_lossy(&seen).contains("content_block_start") {
        let chunk = tokio::time::timeout(Duration::from_secs(2), body.next())
            .await
            .expect("event not relayed promptly");
        seen.extend_from_slice(&chunk.unwrap().unwrap());
    }
    gate.open();
    while let Some(chunk) = body.next().await {
        seen.extend_from_slice(&chunk.unwrap());
    }
    let events = parse_sse(&seen);
    assert_eq!(names(&events).last(), Some(&"message_stop"));
}

/// Resident memory of this process (the proxy runs in it), in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// Established TCP connections to local `port` (the client side: its remote port), from
/// `/proc/net/tcp`.
fn established_to(port: u16) -> usize {
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap()
        .lines()
        .skip(1)
        .filter(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let remote_port = cols
                .get(2)
                .and_then(|r| r.rsplit_once(':'))
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            remote_port == Some(port) && cols.get(3) == Some(&"01")
        })
        .count()
}

/// Issue 16's fault suite: clients that abort mid-stream, 100 at a time, while the upstream
/// is silent. Counted on the proxy's side: its connections to the upstream (the fake's own
/// disconnect count misses closures with many streams waiting at once), the runtime's live
/// tasks, and the process's RSS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_aborts_mid_stream_leave_no_upstream_stream_task_or_memory_behind() {
    const ABORTS: usize = 10_000;
    const AT_ONCE: usize = 100;
    let e = env().await;
    // Every stream stops after its first events and never finishes: only an abort ends it.
    let (reply, _gate) = Reply::gated("never finished", 2);
    e.fake.push(Rule {
        when: Match::Always,
        reply,
        times: Some(usize::MAX),
    });
    // Over a raw socket, so the abort is certain: the connection closes when it is dropped.
    let abort_one = |e: &Env| {
        let addr = e.proxy.addr();
        let body = request("abort me", true).to_string();
        let head = format!(
            "POST /v1/messages?beta=true HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            e.bearer(),
            body.len()
        );
        async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
            sock.write_all(head.as_bytes()).await.unwrap();
            sock.write_all(body.as_bytes()).await.unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !String::from_utf8_lossy(&got).contains("message_start") {
                let n = sock.read(&mut buf).await.unwrap();
                assert!(n > 0, "the stream began: {}", String::from_utf8_lossy(&got));
                got.extend_from_slice(&buf[..n]);
            }
            assert!(String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"));
            // Dropped mid-stream: the client aborts.
        }
    };
    let upstream_port = e.fake.addr().port();
    // Aborted streams leave no upstream connection open: what stays is the proxy's pool of
    // finished ones (the token mint's, here), bounded.
    let settled = |what: &str| {
        let what = what.to_owned();
        async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while established_to(upstream_port) > 4 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{what}: {} upstream connections still open",
                    established_to(upstream_port)
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    // A first wave warms everything up (pools, allocator arenas) before the baseline.
    futures::future::join_all((0..AT_ONCE).map(|_| abort_one(&e))).await;
    settled("after the first wave").await;
    let metrics = tokio::runtime::Handle::current().metrics();
    let mut sent = e.fake.forget_requests();
    let tasks_before = metrics.num_alive_tasks();
    let rss_before = rss_kib();
    for _ in 0..(ABORTS / AT_ONCE - 1) {
        futures::future::join_all((0..AT_ONCE).map(|_| abort_one(&e))).await;
        // The fake's log of requests would otherwise be most of the growth measured.
        sent += e.fake.forget_requests();
    }
    assert_eq!(sent, ABORTS);
    settled("after every abort").await;
    // Tasks come back to where they were (allow for the few still closing).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while metrics.num_alive_tasks() > tasks_before + 5 {
        assert!(
            std::time::Instant::now() < deadline,
            "tasks: {} before, {} after",
            tasks_before,
            metrics.num_alive_tasks()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let grown = rss_kib().saturating_sub(rss_before);
    assert!(
        grown < 32 * 1024,
        "memory after {ABORTS} aborts grew by {grown} KiB"
    );
}
