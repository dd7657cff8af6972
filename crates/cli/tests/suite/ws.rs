//! A VS Code-like AHP client over a real WebSocket, enough for the tests that drive `serve`
//! from outside (durable sessions, partitions, the ACP bridge).

use serde_json::Value;

/// A VS Code-like AHP client, enough for these tests.
pub(crate) struct Ws {
    ws: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    client_id: String,
    next_id: i64,
    client_seq: i64,
    actions: Vec<Value>,
}

pub(crate) const WAIT: std::time::Duration = std::time::Duration::from_secs(60);

impl Ws {
    pub(crate) async fn connect(port: u16, token: &str) -> Ws {
        let url = format!("ws://127.0.0.1:{port}/?tkn={token}");
        let mut w = Ws {
            ws: tokio_tungstenite::connect_async(url).await.unwrap().0,
            client_id: uuid(),
            next_id: 0,
            client_seq: 0,
            actions: Vec::new(),
        };
        let params = serde_json::json!({"channel": "ahp-root://", "protocolVersions": ["0.9.0"],
            "clientId": w.client_id, "initialSubscriptions": ["ahp-root://"]});
        let r = w.request("initialize", params).await;
        assert!(r.get("error").is_none(), "{r}");
        w
    }

    pub(crate) async fn read(&mut self) -> Value {
        use futures_util::StreamExt;
        loop {
            let msg = self
                .ws
                .next()
                .await
                .expect("the connection is open")
                .unwrap();
            let tokio_tungstenite::tungstenite::Message::Text(t) = msg else {
                continue;
            };
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if v["method"] == "action" {
                self.actions.push(v["params"].clone());
            }
            return v;
        }
    }

    pub(crate) async fn request(&mut self, method: &str, params: Value) -> Value {
        use futures_util::SinkExt;
        self.next_id += 1;
        let id = self.next_id;
        let frame =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.ws
            .send(tokio_tungstenite::tungstenite::Message::Text(
                frame.to_string().into(),
            ))
            .await
            .unwrap();
        tokio::time::timeout(WAIT, async {
            loop {
                let v = self.read().await;
                if v["id"] == id && v.get("method").is_none() {
                    return v;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no answer to {method}"))
    }

    pub(crate) async fn ok(&mut self, method: &str, params: Value) -> Value {
        let r = self.request(method, params).await;
        assert!(r.get("error").is_none(), "{method}: {r}");
        r["result"].clone()
    }

    pub(crate) async fn dispatch(&mut self, channel: &str, action: Value) {
        use futures_util::SinkExt;
        self.client_seq += 1;
        let frame = serde_json::json!({"jsonrpc": "2.0", "method": "dispatchAction",
            "params": {"channel": channel, "clientSeq": self.client_seq, "action": action}});
        self.ws
            .send(tokio_tungstenite::tungstenite::Message::Text(
                frame.to_string().into(),
            ))
            .await
            .unwrap();
    }

    pub(crate) async fn action(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(a) = self.actions.iter().find(|a| pred(a)) {
                return a.clone();
            }
            if tokio::time::timeout_at(deadline, self.read())
                .await
                .is_err()
            {
                panic!("no {what}; got {:#?}", self.actions);
            }
        }
    }

    /// Starts a turn and returns its id.
    pub(crate) async fn turn(&mut self, chat: &str, text: &str) -> String {
        let turn = format!("request_{}", uuid());
        self.dispatch(
            chat,
            serde_json::json!({"type": "chat/turnStarted", "turnId": turn,
                "startedAt": "2026-05-01T10:01:00.000Z",
                "message": {"text": text, "origin": {"kind": "user"}}}),
        )
        .await;
        turn
    }

    pub(crate) async fn turn_end(&mut self, turn: &str) -> Value {
        self.action("the turn's end", |a| {
            a["action"]["turnId"] == turn
                && matches!(
                    a["action"]["type"].as_str(),
                    Some("chat/turnComplete" | "chat/turnCancelled" | "chat/error")
                )
        })
        .await
    }
}

/// What only the PostgreSQL tests use: sessions on another "machine".
#[cfg(feature = "postgres")]
impl Ws {
    /// Creates a session in `m`'s work folder under a `claude:/` URI VS Code would choose and
    /// subscribes to it and its chat: (session URI, session id, chat URI).
    pub(crate) async fn new_session(
        &mut self,
        m: &super::durable::Machine,
    ) -> (String, String, String) {
        let id = uuid();
        let session = format!("claude:/{id}");
        let work = claude_host_protocol::uri::file_uri(&m.dir.path().join("work"));
        self.ok(
            "createSession",
            serde_json::json!({"channel": session, "provider": "claude", "workingDirectories": [work]}),
        )
        .await;
        self.ok("subscribe", serde_json::json!({"channel": session}))
            .await;
        let chat = claude_host_protocol::uri::default_chat_uri(&session);
        self.ok("subscribe", serde_json::json!({"channel": chat}))
            .await;
        (session, id, chat)
    }
}

pub(crate) fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}
