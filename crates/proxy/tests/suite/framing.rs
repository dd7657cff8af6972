//! How the proxy reads the upstream's HTTP/1.1 framing: one chunk per event (as real upstreams
//! send them), extensions, trailers, `Connection: close`, broken framing, kept-alive
//! connections, and a stream that goes quiet.

use super::*;
use claude_host_testkit::fake::{FakeConfig, Match, Reply, Rule};
use futures::StreamExt;
use pretty_assertions::assert_eq;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(n, _)| n.as_str()).collect()
}

#[tokio::test]
async fn events_read_together_leave_together_over_one_kept_alive_connection() {
    // Each event its own HTTP chunk, ten chunks per socket write.
    let fake = FakeUpstream::start_with(FakeConfig {
        sse_chunk_per_event: true,
        sse_events_per_write: 10,
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let e = env_on(fake, ProxyConfig::default()).await;
    e.fake.push(Rule {
        when: Match::Always,
        reply: Reply::many_deltas(300),
        times: Some(3),
    });
    let mut connections = Vec::new();
    for _ in 0..3 {
        let resp = e.messages(request("many", true)).await;
        assert_eq!(resp.status(), 200);
        let mut body = resp.bytes_stream();
        let (mut frames, mut raw) = (0, Vec::new());
        while let Some(frame) = body.next().await {
            frames += 1;
            raw.extend_from_slice(&frame.unwrap());
        }
        let events = parse_sse(&raw);
        let deltas: Vec<&str> = events
            .iter()
            .filter_map(|(_, d)| d["delta"]["text"].as_str())
            .collect();
        let want: Vec<String> = (0..300).map(|i| format!("w{} ", i % 10)).collect();
        assert_eq!(deltas, want);
        assert_eq!(names(&events).last(), Some(&"message_stop"));
        // hyper's client yields at least one item per HTTP chunk: the proxy sent several
        // events per chunk (one per upstream read), not one chunk per event.
        assert!(
            frames * 2 <= events.len(),
            "{frames} frames for {} events",
            events.len()
        );
        connections.push(e.fake.connections());
    }
    // The second and third streams reused the first one's upstream connection.
    assert_eq!(connections[1], connections[0], "{connections:?}");
    assert_eq!(connections[2], connections[0], "{connections:?}");
}

#[tokio::test]
async fn a_stream_that_goes_quiet_ends_in_one_error_after_the_idle_timeout() {
    let e = env_with(ProxyConfig {
        ping_interval: Duration::from_millis(50),
        idle_timeout: Duration::from_millis(400),
        ..ProxyConfig::default()
    })
    .await;
    e.fake.push(Rule {
        when: Match::Always,
        reply: Reply::silent_then_text(Duration::from_secs(30), "never"),
        times: None,
    });
    let events = sse_events(e.messages(request("quiet", true)).await).await;
    let n = names(&events);
    assert_eq!(n[0], "message_start");
    assert!(n.iter().filter(|n| **n == "ping").count() >= 3, "{n:?}");
    assert_eq!(n.iter().filter(|n| **n == "error").count(), 1, "{n:?}");
    assert_eq!(n.last(), Some(&"error"));
    assert!(!n.contains(&"message_stop"));
    let message = events.last().unwrap().1["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.starts_with("upstream sent nothing for"),
        "{message}"
    );
    // The upstream request was abandoned, not left open.
    e.fake
        .wait_disconnects(1, Duration::from_secs(2))
        .await
        .unwrap();
}

/// A Copilot API that answers `/models` with the fake's catalog and each `/v1/messages` with
/// the next scripted raw response (then closes the connection when the script says so).
struct RawCopilot {
    url: String,
    /// Connections that carried a `/v1/messages` request.
    message_connections: Arc<AtomicUsize>,
}

struct Script {
    bytes: Vec<u8>,
    close: bool,
}

/// A reply that leaves the connection open, and one after which the server closes it.
fn keep(bytes: Vec<u8>) -> Script {
    Script {
        bytes,
        close: false,
    }
}

fn close(bytes: Vec<u8>) -> Script {
    Script { bytes, close: true }
}

async fn raw_copilot(scripts: Vec<Script>) -> RawCopilot {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let scripts = Arc::new(Mutex::new(VecDeque::from(scripts)));
    let message_connections = Arc::new(AtomicUsize::new(0));
    let counted = message_connections.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let scripts = scripts.clone();
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut first_message = true;
                while let Some(path) = read_request(&mut sock).await {
                    if path == "/models" {
                        let body = json!({"data": claude_host_testkit::fake::default_models()})
                            .to_string();
                        let head = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                            body.len()
                        );
                        sock.write_all(head.as_bytes()).await.unwrap();
                        sock.write_all(body.as_bytes()).await.unwrap();
                        continue;
                    }
                    if first_message {
                        first_message = false;
                        counted.fetch_add(1, Ordering::SeqCst);
                    }
                    let script = scripts.lock().unwrap().pop_front().unwrap();
                    sock.write_all(&script.bytes).await.unwrap();
                    if script.close {
                        return;
                    }
                }
            });
        }
    });
    RawCopilot {
        url,
        message_connections,
    }
}

/// Reads one request (head and `content-length` body); its path, or `None` at EOF.
async fn read_request(sock: &mut tokio::net::TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            while buf.len() < end + 4 + length {
                if sock.read_buf(&mut buf).await.unwrap() == 0 {
                    return None;
                }
            }
            let path = head.split(' ').nth(1).unwrap().to_owned();
            return Some(path.split('?').next().unwrap().to_owned());
        }
        if sock.read_buf(&mut buf).await.unwrap_or(0) == 0 {
            return None;
        }
    }
}

async fn env_raw(raw: &RawCopilot) -> (FakeUpstream, ProxyHandle) {
    let fake = FakeUpstream::start().await.unwrap();
    let proxy = proxy_with_copilot_api(&fake, raw.url.clone()).await;
    (fake, proxy)
}

fn sse(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// A whole short stream's events.
fn stream_events() -> Vec<String> {
    vec![
        sse(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-opus-5.5", "content": [], "stop_reason": null, "usage": {"input_tokens": 3, "output_tokens": 1}}}),
        ),
        sse(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        sse(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hel"}}),
        ),
        sse(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo"}}),
        ),
        sse(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        sse(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
        ),
        sse("message_stop", json!({"type": "message_stop"})),
    ]
}

/// The events as a chunked body, each its own chunk with an extension, then `end`.
fn chunked(events: &[String], extra_head: &str, end: &str) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n{extra_head}transfer-encoding: chunked\r\n\r\n"
    );
    for e in events {
        out.push_str(&format!("{:X};ext=\"v\"\r\n{e}\r\n", e.len()));
    }
    out.push_str(end);
    out.into_bytes()
}

fn text(events: &[(String, Value)]) -> String {
    events
        .iter()
        .filter_map(|(_, d)| d["delta"]["text"].as_str())
        .collect()
}

#[tokio::test]
async fn extensions_trailers_and_connection_close_are_read_as_http_says() {
    let events = stream_events();
    let raw = raw_copilot(vec![
        // Extensions on every chunk, trailers after the last: the connection stays open.
        keep(chunked(
            &events,
            "",
            "0\r\nx-trailer: 1\r\nother: 2\r\n\r\n",
        )),
        keep(chunked(&events, "", "0\r\n\r\n")),
        // `Connection: close`: the next request needs a new connection.
        close(chunked(&events, "connection: close\r\n", "0\r\n\r\n")),
        keep(chunked(&events, "", "0\r\n\r\n")),
    ])
    .await;
    let (_fake, proxy) = env_raw(&raw).await;
    let mut connections = Vec::new();
    for _ in 0..4 {
        let resp = post_stream(&proxy).await;
        assert_eq!(resp.status(), 200);
        let got = sse_events(resp).await;
        assert_eq!(text(&got), "hello");
        assert_eq!(names(&got).last(), Some(&"message_stop"), "{got:?}");
        assert_eq!(names(&got).iter().filter(|n| **n == "error").count(), 0);
        connections.push(raw.message_connections.load(Ordering::SeqCst));
    }
    assert_eq!(connections, vec![1, 1, 1, 2]);
}

#[tokio::test]
async fn broken_chunk_framing_mid_stream_is_exactly_one_error_event() {
    let events = stream_events();
    let mut bad = chunked(&events[..3], "", "");
    bad.extend_from_slice(b"zz\r\nnot a chunk\r\n");
    let mut oversize = chunked(&events[..3], "", "");
    oversize.extend_from_slice(b"100000000000000000\r\n");
    let cut = chunked(&events[..3], "", "40\r\nevent: content_block_delta\n");
    let raw = raw_copilot(vec![close(bad), close(oversize), close(cut)]).await;
    let (_fake, proxy) = env_raw(&raw).await;
    let wants = [
        "malformed chunked body: a chunk size line has no hex digits (found byte 0x7a)",
        "malformed chunked body: chunk size has more than 16 significant hex digits",
        "the connection closed before the end of the body: the body ended inside a chunk, 37 bytes short",
    ];
    for want in wants {
        let resp = post_stream(&proxy).await;
        assert_eq!(resp.status(), 200);
        let got = sse_events(resp).await;
        let n = names(&got);
        // The events before the fault, then one error, and no made-up stop.
        assert_eq!(
            n,
            vec![
                "message_start",
                "content_block_start",
                "content_block_delta",
                "error"
            ]
        );
        let message = got[3].1["error"]["message"].as_str().unwrap();
        assert!(message.ends_with(want), "{message}");
        assert!(
            message.starts_with("upstream connection failed mid-stream: "),
            "{message}"
        );
    }
}
