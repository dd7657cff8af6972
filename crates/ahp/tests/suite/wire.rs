//! The transport: connection tokens, malformed JSON-RPC, version negotiation, and resource
//! commands confined to the session's directories.

use super::*;
use ahp::ClientError;
use futures_util::{SinkExt, StreamExt};
use pretty_assertions::assert_eq;
use tokio_tungstenite::tungstenite::Message;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn raw(url: &str) -> Ws {
    tokio_tungstenite::connect_async(url).await.unwrap().0
}

async fn call(ws: &mut Ws, text: &str) -> Value {
    ws.send(Message::Text(text.into())).await.unwrap();
    loop {
        let msg = tokio::time::timeout(WAIT, ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Message::Text(t) = msg {
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            // Skip notifications.
            if v.get("method").is_none() {
                return v;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_without_the_right_token_are_refused() {
    let e = env().await;
    let addr = e.server.as_ref().unwrap().addr();
    for url in [
        format!("ws://{addr}/"),
        format!("ws://{addr}/?tkn=wrong"),
        format!("ws://{addr}/?tkn={TOKEN}x"),
    ] {
        assert!(
            tokio_tungstenite::connect_async(&url).await.is_err(),
            "{url} was accepted"
        );
        assert!(ahp_ws::WebSocketTransport::connect(&url).await.is_err());
    }
    let c = e.client().await;
    c.ping().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_rpc_gets_precise_errors_and_keeps_the_connection() {
    let e = env().await;
    let mut ws = raw(&e.url).await;
    let r = call(&mut ws, "this is not json").await;
    assert_eq!(r["error"]["code"], -32700);
    assert_eq!(r["id"], Value::Null);
    let r = call(&mut ws, r#"{"id": 1, "method": "ping"}"#).await;
    assert_eq!(r["error"]["code"], -32600, "missing jsonrpc");
    assert_eq!(r["id"], 1);
    let r = call(&mut ws, r#"[{"jsonrpc":"2.0","id":2,"method":"ping"}]"#).await;
    assert_eq!(r["error"]["code"], -32600, "batch");
    let r = call(
        &mut ws,
        r#"{"jsonrpc":"2.0","id":3,"method":"listSessions","params":{"channel":"ahp-root://"}}"#,
    )
    .await;
    assert_eq!(r["error"]["code"], -32600, "before initialize");
    let r = call(&mut ws, r#"{"jsonrpc":"2.0","id":4,"method":"initialize","params":{"channel":"ahp-root://","clientId":"raw","protocolVersions":5}}"#).await;
    assert_eq!(r["error"]["code"], -32602);
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("protocolVersions")
    );
    let r = call(&mut ws, r#"{"jsonrpc":"2.0","id":5,"method":"initialize","params":{"channel":"ahp-root://","clientId":"raw","protocolVersions":["1.0.0"]}}"#).await;
    assert_eq!(r["result"]["protocolVersion"], "1.0.0");
    let r = call(
        &mut ws,
        r#"{"jsonrpc":"2.0","id":6,"method":"noSuchMethod","params":{}}"#,
    )
    .await;
    assert_eq!(r["error"]["code"], -32601);
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("noSuchMethod")
    );
    let r = call(
        &mut ws,
        r#"{"jsonrpc":"2.0","id":7,"method":"subscribe","params":{}}"#,
    )
    .await;
    assert_eq!(r["error"]["code"], -32602);
    let r = call(&mut ws, r#"{"jsonrpc":"2.0","id":8,"method":"subscribe","params":{"channel":"ahp-session:/00000000-0000-4000-8000-000000000000"}}"#).await;
    assert_eq!(r["error"]["code"], -32001, "unknown session");
    // Still alive after all of that.
    let r = call(
        &mut ws,
        r#"{"jsonrpc":"2.0","id":9,"method":"ping","params":{"channel":"ahp-root://"}}"#,
    )
    .await;
    assert_eq!(r["id"], 9);
    assert!(r.get("error").is_none(), "{r}");
    // And other connections never noticed.
    let c = e.client().await;
    initialize(&c, "other").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsupported_protocol_version_is_refused_with_the_supported_ones() {
    let e = env().await;
    let mut ws = raw(&e.url).await;
    let r = call(&mut ws, r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"channel":"ahp-root://","clientId":"old","protocolVersions":["0.0.1"]}}"#).await;
    assert_eq!(r["error"]["code"], -32005);
    assert!(
        r["error"]["data"]["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!("1.0.0"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_commands_stay_inside_the_working_directory() {
    let e = env().await;
    let c = e.ready_client("files").await;
    let (session, _) = e.create_session(&c).await;
    std::fs::write(e.work().join("inside.txt"), "inside").unwrap();
    std::fs::write(e.dir.path().join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(e.dir.path().join("secret.txt"), e.work().join("link.txt")).unwrap();
    let read = |path: std::path::PathBuf| {
        let c = &c;
        let session = session.clone();
        async move {
            c.request::<_, Value>(
                "resourceRead",
                json!({"channel": "ahp-root://", "uri": claude_host_protocol::uri::file_uri(&path),
                       "_meta": {"session": session}}),
            )
            .await
        }
    };
    let ok = read(e.work().join("inside.txt")).await.unwrap();
    assert!(
        ok.to_string().contains("inside") || ok.to_string().contains("aW5zaWRl"),
        "{ok}"
    );
    for escape in [
        e.work().join("../secret.txt"),
        e.dir.path().join("secret.txt"),
        std::path::PathBuf::from("/etc/passwd"),
        e.work().join("link.txt"),
    ] {
        match read(escape.clone()).await {
            Err(ClientError::Rpc(err)) => assert_eq!(err.code, -32009, "{escape:?}: {err:?}"),
            other => panic!("{escape:?} was not refused: {other:?}"),
        }
    }
    let write: Result<Value, _> = c
        .request(
            "resourceWrite",
            json!({"channel": "ahp-root://",
                   "uri": claude_host_protocol::uri::file_uri(&e.work().join("../planted.txt")),
                   "data": "eA==", "encoding": "base64", "_meta": {"session": session}}),
        )
        .await;
    assert!(write.is_err());
    assert!(!e.dir.path().join("planted.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrades_that_stall_are_closed_and_capped() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let e = env_serving(HostConfig::default(), |s| {
        s.handshake_timeout = Duration::from_secs(2);
        s.max_handshakes = 2;
    })
    .await;
    let addr = e
        .url
        .trim_start_matches("ws://")
        .split(['/', '?'])
        .next()
        .unwrap()
        .to_owned();
    let closed = |mut s: tokio::net::TcpStream| async move {
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
            .await
            .expect("closed in time")
            .ok();
        out
    };
    // Two connections that start an upgrade and never finish it hold both slots…
    let mut stalled = Vec::new();
    for _ in 0..2 {
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        s.write_all(b"GET /?tkn=x HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            .await
            .unwrap();
        stalled.push(s);
    }
    // …so a third is closed at once (the slots are taken before it is read)…
    let third = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let started = std::time::Instant::now();
    assert!(closed(third).await.is_empty());
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "closed without waiting for the upgrade timeout"
    );
    // …and the stalled ones are closed by the timeout.
    for s in stalled {
        closed(s).await;
    }
    // Then a real client connects as usual.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while tokio_tungstenite::connect_async(&e.url).await.is_err() {
        assert!(std::time::Instant::now() < deadline, "never accepted again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_frame_is_closed_with_1009_not_reset() {
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    let e = env_serving(HostConfig::default(), |s| s.max_message_bytes = 1024 * 1024).await;
    let mut ws = raw(&e.url).await;
    // 40 MiB of JSON string, forty times the limit, sent whole, as a client that ignores it
    // would.
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{{\"x\":\"{}\"}}}}",
        "a".repeat(40 * 1024 * 1024)
    );
    // The server may stop reading before all of it is sent.
    let _ = ws.send(Message::Text(big.into())).await;
    let closed = tokio::time::timeout(WAIT, async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(frame))) => return Ok(frame),
                Some(Ok(_)) => continue,
                Some(Err(err)) => return Err(err.to_string()),
                None => return Err("ended without a close frame".to_owned()),
            }
        }
    })
    .await
    .expect("the server answers the oversized frame");
    let frame = closed.expect("a close frame, not a reset");
    let frame = frame.expect("the close frame has a code");
    assert_eq!(frame.code, CloseCode::Size, "{frame:?}");
    assert!(
        frame.reason.contains("1048576"),
        "the limit is named: {frame:?}"
    );
    // The server is fine: a new connection works.
    let c = e.client().await;
    c.ping().await.unwrap();
}
