use super::*;
use claude_host_proxy::Nonce;
use pretty_assertions::assert_eq;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn nonce_is_fresh_256_bit_hex_per_start_and_bind_is_loopback() {
    let a = env().await;
    let b = claude_host_proxy::start(ProxyConfig::default(), Arc::new(a.copilot.clone()))
        .await
        .unwrap();
    for n in [a.proxy.nonce(), b.nonce()] {
        assert_eq!(n.len(), 64);
        assert!(n.bytes().all(|c| c.is_ascii_hexdigit()));
    }
    assert_ne!(a.proxy.nonce(), b.nonce());
    assert!(a.proxy.addr().ip().is_loopback());
    assert_eq!(a.proxy.addr().ip().to_string(), "127.0.0.1");
    assert_ne!(a.proxy.addr().port(), 0);
    assert_eq!(a.proxy.auth_token("s1"), format!("{}.s1", a.proxy.nonce()));
    assert_eq!(format!("{:?}", Nonce::generate()), "Nonce(<redacted>)");
    b.shutdown().await;
}

#[tokio::test]
async fn every_auth_failure_is_401_without_touching_the_upstream() {
    let e = env().await;
    let nonce = e.proxy.nonce().to_owned();
    let cases: Vec<(&str, Option<String>, Option<&str>)> = vec![
        ("missing", None, None),
        (
            "wrong nonce",
            Some(format!("Bearer {}.s", "0".repeat(64))),
            None,
        ),
        ("nonce only", Some(format!("Bearer {nonce}")), None),
        ("empty session", Some(format!("Bearer {nonce}.")), None),
        ("x-api-key only", None, Some(nonce.as_str())),
        ("not bearer", Some(format!("Basic {nonce}.s")), None),
        ("empty", Some(String::new()), None),
    ];
    for path in [
        "/v1/messages?beta=true",
        "/v1/messages/count_tokens",
        "/v1/models",
        "/nowhere",
    ] {
        for (name, authz, key) in &cases {
            let mut req = if path == "/v1/models" {
                e.http.get(e.url(path))
            } else {
                e.http.post(e.url(path)).json(&request("hi", true))
            };
            if let Some(a) = authz {
                req = req.header("authorization", a);
            }
            if let Some(k) = key {
                req = req.header("x-api-key", *k);
            }
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), 401, "{name} on {path}");
            let body: Value = resp.json().await.unwrap();
            assert_eq!(
                body,
                json!({"type":"error","error":{"type":"authentication_error","message":"Invalid authentication"},"request_id":null}),
                "{name} on {path}"
            );
        }
    }
    assert_eq!(e.fake.requests().len(), 0, "the upstream was contacted");
}

#[tokio::test]
async fn health_check_needs_no_auth() {
    let e = env().await;
    let resp = e.http.get(e.url("/")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "ok");
}

#[tokio::test]
async fn foreign_host_headers_are_refused() {
    let e = env().await;
    let port = e.proxy.addr().port();
    for host in [
        format!("evil.example:{port}"),
        format!("127.0.0.1:{}", port + 1),
        "localhost".to_owned(),
    ] {
        let resp = e
            .post("/v1/messages")
            .header("host", &host)
            .json(&request("hi", true))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 403, "{host}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["type"], "permission_error");
    }
    // Even the health check is not served to a rebinding page.
    let resp = e
        .http
        .get(e.url("/"))
        .header("host", format!("attacker.test:{port}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    for host in [
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        format!("127.0.0.1:{port}"),
    ] {
        let resp = e
            .http
            .get(e.url("/"))
            .header("host", &host)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{host}");
    }
    assert_eq!(e.fake.requests().len(), 0);
}

/// Sends raw bytes to the proxy and returns what it answered.
async fn raw(e: &Env, request: &str) -> String {
    let mut sock = tokio::net::TcpStream::connect(e.proxy.addr())
        .await
        .unwrap();
    sock.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    sock.read_to_end(&mut out).await.unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn malformed_host_headers_are_bad_requests() {
    let e = env().await;
    let port = e.proxy.addr().port();
    let good = format!("127.0.0.1:{port}");
    let cases = [
        ("GET / HTTP/1.0\r\n\r\n".to_owned(), "no Host header"),
        (
            format!(
                "GET / HTTP/1.1\r\nHost: {good}\r\nHost: attacker.test\r\nConnection: close\r\n\r\n"
            ),
            "2 Host headers",
        ),
        (
            format!(
                "GET http://attacker.test/ HTTP/1.1\r\nHost: {good}\r\nConnection: close\r\n\r\n"
            ),
            "differs from its Host header",
        ),
    ];
    for (request, says) in cases {
        let text = raw(&e, &request).await;
        assert!(
            text.starts_with("HTTP/1.0 400") || text.starts_with("HTTP/1.1 400"),
            "{request:?}: {text}"
        );
        assert!(text.contains(says), "{text}");
        assert!(text.contains("invalid_request_error"), "{text}");
    }
    // The same authority in absolute form is served.
    let text = raw(
        &e,
        &format!("GET http://{good}/ HTTP/1.1\r\nHost: {good}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
}

#[tokio::test]
async fn unknown_route_is_404_in_the_anthropic_envelope() {
    let e = env().await;
    let resp = e
        .post("/v1/complete")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "not_found_error");
    assert_eq!(body["error"]["message"], "No route for POST /v1/complete");
    let resp = e
        .http
        .get(e.url("/token"))
        .header("authorization", e.bearer())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
}

fn short_timeouts(max_connections: usize) -> ProxyConfig {
    ProxyConfig {
        header_timeout: std::time::Duration::from_millis(300),
        body_timeout: std::time::Duration::from_millis(300),
        max_connections,
        ..ProxyConfig::default()
    }
}

/// Reads until the server closes the connection (or 10 s pass: then the test fails).
async fn until_closed(sock: &mut tokio::net::TcpStream) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        sock.read_to_end(&mut out),
    )
    .await
    .expect("the server closed the connection in time")
    .ok();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn a_request_head_over_16_kib_is_refused_with_431() {
    let e = env().await;
    for (kib, want) in [(12, 200), (20, 431)] {
        let resp = e
            .http
            .get(e.url("/"))
            .header("x-padding", "p".repeat(kib * 1024))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), want, "a head with {kib} KiB of padding");
    }
}

#[tokio::test]
async fn half_sent_requests_and_idle_connections_are_closed() {
    let e = env_with(short_timeouts(64)).await;
    let port = e.proxy.addr().port();
    // Headers that never end.
    let mut sock = tokio::net::TcpStream::connect(e.proxy.addr())
        .await
        .unwrap();
    sock.write_all(format!("POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n").as_bytes())
        .await
        .unwrap();
    until_closed(&mut sock).await;
    // A body that never arrives: 408, then closed.
    let mut sock = tokio::net::TcpStream::connect(e.proxy.addr())
        .await
        .unwrap();
    sock.write_all(
        format!(
            "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: {}\r\nContent-Length: 100\r\n\r\n{{",
            e.bearer()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let answer = until_closed(&mut sock).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("did not arrive"), "{answer}");
    // A connection that says nothing at all.
    let mut sock = tokio::net::TcpStream::connect(e.proxy.addr())
        .await
        .unwrap();
    until_closed(&mut sock).await;
}

#[tokio::test]
async fn connections_beyond_the_cap_are_closed_and_the_cap_frees_up() {
    let e = env_with(ProxyConfig {
        header_timeout: std::time::Duration::from_secs(30),
        ..short_timeouts(3)
    })
    .await;
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(
            tokio::net::TcpStream::connect(e.proxy.addr())
                .await
                .unwrap(),
        );
    }
    // Held open by the three idle ones: the fourth is closed at once.
    let mut extra = tokio::net::TcpStream::connect(e.proxy.addr())
        .await
        .unwrap();
    let _ = extra.write_all(b"GET / HTTP/1.1\r\n").await;
    assert_eq!(until_closed(&mut extra).await, "");
    drop(idle.pop());
    // Once one leaves, a client is served again (the freed slot may take a moment to show).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let ok = e
            .http
            .get(e.url("/"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200);
        if ok {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never served again");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
