//! VS Code's own dialect, frame by frame as `vscode-client.md` gives it (the workbench's
//! protocol client, not the `ahp` crate): its session URIs, the computed default chat URI,
//! `request_<uuid>` turn ids, the root config burst, reconnects with and without `channel`,
//! and re-initializing after a host restart.

use super::*;
use claude_host_testkit::fake::{Match, Reply, Rule};
use futures_util::{SinkExt, StreamExt};
use pretty_assertions::assert_eq;
use std::collections::HashMap;
use tokio_tungstenite::tungstenite::Message;

mod customizations;
mod edits;
mod terminals;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The protocol versions VS Code offers (its registry minus `0.8.0`).
const VS_CODE_VERSIONS: [&str; 5] = ["0.9.0", "0.7.0", "0.6.0", "0.5.2", "0.5.1"];

/// One VS Code window's protocol client.
struct VsCode {
    ws: Ws,
    client_id: String,
    next_id: i64,
    client_seq: i64,
    /// The highest `serverSeq` seen (what VS Code sends as `lastSeenServerSeq`).
    last_seen: u64,
    /// The last `serverSeq` seen per channel.
    last_per_channel: HashMap<String, u64>,
    /// Every `action` envelope received on this client, in order of arrival.
    actions: Vec<Value>,
    /// Every other notification received.
    notes: Vec<Value>,
    /// Files this client has (URI → content), served to the host's `resourceRead`.
    files: HashMap<String, Vec<u8>>,
    /// Files this client lists but cannot read.
    unreadable: Vec<String>,
}

impl VsCode {
    async fn connect(url: &str, client_id: &str) -> VsCode {
        VsCode {
            ws: tokio_tungstenite::connect_async(url).await.unwrap().0,
            client_id: client_id.to_owned(),
            next_id: 0,
            client_seq: 0,
            last_seen: 0,
            last_per_channel: HashMap::new(),
            actions: Vec::new(),
            notes: Vec::new(),
            files: HashMap::new(),
            unreadable: Vec::new(),
        }
    }

    async fn send(&mut self, frame: Value) {
        self.ws
            .send(Message::Text(frame.to_string().into()))
            .await
            .unwrap();
    }

    /// The next frame; actions and notifications are recorded on the way.
    async fn read(&mut self) -> Value {
        loop {
            let msg = tokio::time::timeout(WAIT, self.ws.next())
                .await
                .expect("a frame in time")
                .expect("the connection is open")
                .unwrap();
            let Message::Text(t) = msg else { continue };
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if let (Some(method), Some(id)) = (v["method"].as_str(), v.get("id")) {
                // A request of the host: VS Code answers `resourceRead` and `resourceList`
                // from its own files.
                let uri = v["params"]["uri"].as_str().unwrap_or("");
                let answer = match method {
                    "resourceRead" if self.unreadable.iter().any(|u| u == uri) => {
                        json!({"jsonrpc": "2.0", "id": id,
                            "error": {"code": -32000, "message": "permission denied"}})
                    }
                    "resourceRead" => match self.files.get(uri) {
                        Some(bytes) => {
                            use base64::Engine as _;
                            json!({"jsonrpc": "2.0", "id": id, "result": {
                                "data": base64::engine::general_purpose::STANDARD.encode(bytes),
                                "encoding": "base64"}})
                        }
                        None => json!({"jsonrpc": "2.0", "id": id,
                            "error": {"code": -32008, "message": "file not found"}}),
                    },
                    "resourceList" => {
                        let prefix = format!("{}/", uri.trim_end_matches('/'));
                        let mut entries = std::collections::BTreeMap::new();
                        for k in self.files.keys().chain(&self.unreadable) {
                            if let Some(rest) = k.strip_prefix(&prefix) {
                                let (name, dir) = match rest.split_once('/') {
                                    Some((d, _)) => (d, true),
                                    None => (rest, false),
                                };
                                entries.insert(
                                    name.to_owned(),
                                    if dir { "directory" } else { "file" },
                                );
                            }
                        }
                        let entries: Vec<Value> = entries
                            .into_iter()
                            .map(|(name, ty)| json!({"name": name, "type": ty}))
                            .collect();
                        json!({"jsonrpc": "2.0", "id": id, "result": {"entries": entries}})
                    }
                    _ => json!({"jsonrpc": "2.0", "id": id,
                        "error": {"code": -32000, "message": "unhandled"}}),
                };
                self.send(answer).await;
                self.notes.push(v.clone());
                return v;
            }
            match v["method"].as_str() {
                Some("action") => {
                    let seq = v["params"]["serverSeq"].as_u64().unwrap();
                    let channel = v["params"]["channel"].as_str().unwrap().to_owned();
                    let last = self.last_per_channel.entry(channel).or_default();
                    assert!(seq > *last, "a channel's serverSeq goes forward: {v}");
                    *last = seq;
                    self.last_seen = self.last_seen.max(seq);
                    self.actions.push(v["params"].clone());
                }
                Some(_) => self.notes.push(v.clone()),
                None => {}
            }
            return v;
        }
    }

    /// Sends a request (numeric ids, increasing, as VS Code does) and returns its response.
    async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            let v = self.read().await;
            if v["id"] == json!(id) && v.get("method").is_none() {
                return v;
            }
        }
    }

    async fn ok(&mut self, method: &str, params: Value) -> Value {
        let r = self.request(method, params).await;
        assert!(r.get("error").is_none(), "{method}: {r}");
        r["result"].clone()
    }

    /// VS Code's `initialize`, field for field.
    async fn initialize(&mut self, subscriptions: &[&str]) -> Value {
        let params = json!({
            "channel": "ahp-root://",
            "protocolVersions": VS_CODE_VERSIONS,
            "clientId": self.client_id,
            "clientInfo": {"name": "vscode-agents-window", "title": "VS Code Agents Window"},
            "initialSubscriptions": subscriptions,
            "_meta": {"vscode.telemetryLevel": "all",
                      "vscode.clientConnectionKind": "direct_websocket",
                      "vscode.ahpSessionUris": true}});
        self.ok("initialize", params).await
    }

    /// What follows every `initialize` and reconnect: root config patches, all with
    /// `clientSeq: 0`, and VS Code's own notifications.
    async fn config_burst(&mut self) {
        for config in [
            json!({"telemetryLevel": "all"}),
            json!({"workspaceTrust": {"enabled": true, "trustedUris": ["file:///home/me/proj"]}}),
            json!({"terminalAutoApproveEnabled": false}),
            json!({"preferLongContextEnabled": true}),
        ] {
            self.send(
                json!({"jsonrpc": "2.0", "method": "dispatchAction", "params": {
                "channel": "ahp-root://", "clientSeq": 0,
                "action": {"type": "root/configChanged", "config": config}}}),
            )
            .await;
        }
        self.send(
            json!({"jsonrpc": "2.0", "method": "setClientManagedSettingsPermissions",
            "params": {"permissions": {}}}),
        )
        .await;
    }

    async fn authenticate(&mut self) {
        let r = self
            .ok(
                "authenticate",
                json!({"channel": "ahp-root://", "resource": "https://api.github.com",
                    "scopes": ["read:user", "user:email"], "token": GITHUB_TOKEN,
                    "expiresIn": 28800}),
            )
            .await;
        assert_eq!(r, json!({}));
    }

    /// A `dispatchAction` notification with the next `clientSeq`; returns that number.
    async fn dispatch(&mut self, channel: &str, action: Value) -> i64 {
        self.client_seq += 1;
        let seq = self.client_seq;
        self.send(json!({"jsonrpc": "2.0", "method": "dispatchAction",
            "params": {"channel": channel, "clientSeq": seq, "action": action}}))
            .await;
        seq
    }

    /// The first action envelope received (now or later) that matches.
    async fn action(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        loop {
            if let Some(a) = self.actions.iter().find(|a| pred(a)) {
                return a.clone();
            }
            tokio::time::timeout(WAIT, self.read())
                .await
                .unwrap_or_else(|_| panic!("no {what}; got {:#?}", self.actions));
        }
    }

    /// The first notification received (now or later) that matches.
    async fn note(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        loop {
            if let Some(n) = self.notes.iter().find(|n| pred(n)) {
                return n.clone();
            }
            self.read().await;
        }
    }

    /// Dispatches `action` on `channel` and returns its echo (with `rejectionReason` when
    /// refused).
    async fn dispatch_echo(&mut self, channel: &str, action: Value) -> Value {
        let seq = self.dispatch(channel, action).await;
        self.echo(seq).await
    }

    /// The echo of this client's own action `client_seq`.
    async fn echo(&mut self, client_seq: i64) -> Value {
        let me = self.client_id.clone();
        self.action("an echo", |a| {
            a["origin"]["clientId"] == me.as_str() && a["origin"]["clientSeq"] == client_seq
        })
        .await
    }
}

/// Every model request from now on is answered with `text`.
fn answer_always(e: &Env, text: &str) {
    e.fake.push(Rule {
        when: Match::Always,
        reply: Reply::text(text),
        times: None,
    });
}

/// A VS Code chat request id.
fn request_id() -> String {
    format!("request_{}", uuid::Uuid::new_v4())
}

fn user_message(text: &str, model: &str) -> Value {
    json!({"text": text, "origin": {"kind": "user"}, "model": {"id": model}})
}

fn turn_ended(turn: &str) -> impl Fn(&Value) -> bool + '_ {
    move |a| {
        a["action"]["turnId"] == turn
            && matches!(
                a["action"]["type"].as_str(),
                Some("chat/turnComplete" | "chat/turnCancelled" | "chat/error")
            )
    }
}

/// Connects and goes through VS Code's start: initialize, config burst, sign-in.
async fn vs_code(e: &Env, client_id: &str) -> (VsCode, Value) {
    let mut c = VsCode::connect(&e.url, client_id).await;
    // VS Code pings after 5 s of silence, before or after `initialize`.
    assert_eq!(
        c.ok("ping", json!({"channel": "ahp-root://"})).await,
        Value::Null
    );
    let init = c.initialize(&["ahp-root://"]).await;
    c.config_burst().await;
    c.authenticate().await;
    (c, init)
}

/// A model id as VS Code's picker has it (from `agents[].models`).
async fn a_model(c: &mut VsCode) -> String {
    let root = c.ok("subscribe", json!({"channel": "ahp-root://"})).await;
    root["snapshot"]["state"]["agents"][0]["models"][0]["id"]
        .as_str()
        .expect("models after sign-in")
        .to_owned()
}

/// `createSession` as the chat-session handler sends it, then its two subscriptions.
async fn create(c: &mut VsCode, e: &Env, session: &str) -> Value {
    let work = claude_host_protocol::uri::file_uri(&e.work());
    let r = c
        .ok(
            "createSession",
            json!({"channel": session, "provider": "claude", "workingDirectories": [work],
                "config": {"isolation": "folder", "autoApprove": "default"},
                "activeClient": {"clientId": c.client_id, "tools": [
                    {"name": "vscode_runTests", "title": "Run tests", "description": "Runs tests",
                     "inputSchema": {"type": "object", "properties": {
                        "files": {"type": "array", "items": {"type": "string"}}}}}],
                    "customizations": []},
                "progressToken": uuid::Uuid::new_v4().to_string()}),
        )
        .await;
    assert_eq!(r, Value::Null);
    let s = c.ok("subscribe", json!({"channel": session})).await;
    let state = &s["snapshot"]["state"];
    assert_eq!(s["snapshot"]["resource"], session);
    let chat = claude_host_protocol::uri::default_chat_uri(session);
    assert_eq!(
        state["defaultChat"],
        chat.as_str(),
        "the computed form: {state}"
    );
    assert_eq!(state["lifecycle"], "ready");
    assert_eq!(
        state["chats"][0]["resource"],
        chat.as_str(),
        "listed in chats[]"
    );
    assert_eq!(state["activeClients"][0]["clientId"], c.client_id.as_str());
    assert_eq!(
        state["activeClients"][0]["tools"][0]["name"],
        "vscode_runTests"
    );
    let chat_snapshot = c.ok("subscribe", json!({"channel": chat})).await;
    assert_eq!(chat_snapshot["snapshot"]["resource"], chat.as_str());
    assert_eq!(chat_snapshot["snapshot"]["state"]["turns"], json!([]));
    state.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vs_code_window_runs_turns_in_sessions_named_either_way() {
    let e = env().await;
    answer_always(&e, "Hello from Claude.");
    let (mut c, init) = vs_code(&e, &uuid::Uuid::new_v4().to_string()).await;
    assert_eq!(init["protocolVersion"], "0.9.0", "{init}");
    assert_eq!(init["snapshots"][0]["resource"], "ahp-root://");
    let agent = &init["snapshots"][0]["state"]["agents"][0];
    assert_eq!(agent["provider"], "claude");
    assert!(agent["protectedResources"][0]["authorization_servers"].is_array());
    assert!(
        init.get("_meta")
            .is_none_or(|m| m.get("vscode.agentHost").is_none()),
        "not VS Code's own host"
    );
    // The config burst is taken (echoed, not refused) without closing anything.
    assert_eq!(
        c.ok("ping", json!({"channel": "ahp-root://"})).await,
        Value::Null
    );
    let burst = |c: &VsCode| -> Vec<Value> {
        c.actions
            .iter()
            .filter(|a| {
                a["action"]["type"] == "root/configChanged" && a["origin"]["clientSeq"] == 0
            })
            .cloned()
            .collect()
    };
    while burst(&c).len() < 4 {
        c.read().await;
    }
    for echo in burst(&c) {
        assert!(echo.get("rejectionReason").is_none(), "{echo}");
    }
    let listed = c
        .ok("listSessions", json!({"channel": "ahp-root://"}))
        .await;
    assert!(listed["items"].is_array());
    let model = a_model(&mut c).await;

    for session in [
        format!("claude:/{}", uuid::Uuid::new_v4()),
        format!("ahp-session:/{}", uuid::Uuid::new_v4()),
    ] {
        create(&mut c, &e, &session).await;
        let chat = claude_host_protocol::uri::default_chat_uri(&session);
        let turn = request_id();
        let seq = c
            .dispatch(
                &chat,
                json!({"type": "chat/turnStarted", "turnId": turn,
                    "startedAt": "2026-05-01T10:01:00.000Z",
                    "message": user_message("Say hello", &model)}),
            )
            .await;
        let echo = c.echo(seq).await;
        assert_eq!(echo["channel"], chat.as_str());
        assert!(echo.get("rejectionReason").is_none(), "{echo}");
        let end = c.action("the turn's end", turn_ended(&turn)).await;
        assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");
        assert_eq!(end["channel"], chat.as_str());
        let at = |c: &VsCode, kind: &str| {
            c.actions
                .iter()
                .position(|a| a["action"]["type"] == kind && a["action"]["turnId"] == turn)
        };
        assert!(
            at(&c, "chat/usage").unwrap() < at(&c, "chat/turnComplete").unwrap(),
            "usage comes before the turn ends"
        );
        // Every frame about the session names it exactly as VS Code did.
        let added = c
            .note(|n| {
                n["method"] == "root/sessionAdded" && n["params"]["summary"]["resource"] == session
            })
            .await;
        assert_eq!(added["params"]["summary"]["provider"], "claude");
        let listed = c
            .ok("listSessions", json!({"channel": "ahp-root://"}))
            .await;
        // One page without asking for one; times VS Code's `Date.parse` reads.
        assert!(listed.get("nextCursor").is_none_or(Value::is_null));
        let item = listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["resource"] == session.as_str())
            .unwrap_or_else(|| panic!("{session} in {listed}"))
            .clone();
        assert_eq!(item["provider"], "claude");
        for key in ["createdAt", "modifiedAt"] {
            let t = item[key].as_str().unwrap();
            assert!(t.contains('T') && t.ends_with('Z'), "{key}: {t}");
        }
        let snap = c.ok("subscribe", json!({"channel": chat})).await;
        let turns = snap["snapshot"]["state"]["turns"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(turns.len(), 1);
        assert_eq!(turns[0]["id"], turn.as_str());
        assert_eq!(turns[0]["state"], "complete");
    }
}

/// The GitHub resource in a root state (`agents[0].protectedResources[0]`).
fn github_resource(root: &Value) -> Value {
    root["agents"][0]["protectedResources"][0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_holding_a_credential_serves_a_vs_code_without_a_github_session() {
    // VS Code greys the agent out and asks for a sign-in on send while the resource's
    // `required` is not false and it has no GitHub session of its own.
    let e = env_signed_in().await;
    answer_always(&e, "Hello without a sign-in.");
    let mut c = VsCode::connect(&e.url, &uuid::Uuid::new_v4().to_string()).await;
    let init = c.initialize(&["ahp-root://"]).await;
    c.config_burst().await;
    let resource = github_resource(&init["snapshots"][0]["state"]);
    assert_eq!(resource["resource"], "https://api.github.com", "{resource}");
    assert_eq!(resource["required"], false, "{resource}");
    assert!(
        resource["authorization_servers"].is_array(),
        "a client with a session still pushes its token: {resource}"
    );
    // No `authenticate` at all: models, a session and a turn.
    let model = a_model(&mut c).await;
    let session = format!("claude:/{}", uuid::Uuid::new_v4());
    create(&mut c, &e, &session).await;
    let chat = claude_host_protocol::uri::default_chat_uri(&session);
    let turn = start_turn_with(&mut c, &chat, user_message("Say hello", &model)).await;
    let end = c.action("the turn's end", turn_ended(&turn)).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");
    assert!(
        c.notes.iter().all(|n| n["method"] != "auth/required"),
        "nothing asked for a sign-in: {:#?}",
        c.notes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sign_in_is_required_only_while_the_host_has_no_credential_and_the_root_says_when_that_changes()
 {
    let e = env().await;
    let mut c = VsCode::connect(&e.url, &uuid::Uuid::new_v4().to_string()).await;
    let init = c.initialize(&["ahp-root://"]).await;
    assert_eq!(
        github_resource(&init["snapshots"][0]["state"])["required"],
        true
    );
    let asked = c.note(|n| n["method"] == "auth/required").await;
    assert_eq!(asked["params"]["resource"]["required"], true, "{asked}");
    let agents_changed = |required: bool| {
        move |a: &Value| {
            a["action"]["type"] == "root/agentsChanged"
                && a["action"]["agents"][0]["protectedResources"][0]["required"] == required
        }
    };
    c.authenticate().await;
    let signed_in = c
        .action("agents changed after the sign-in", agents_changed(false))
        .await;
    assert!(
        signed_in["action"]["agents"][0]["models"]
            .as_array()
            .is_some_and(|m| !m.is_empty()),
        "{signed_in}"
    );
    // Sign-out (VS Code revokes with an empty token): required again.
    let r = c
        .ok(
            "authenticate",
            json!({"channel": "ahp-root://", "resource": "https://api.github.com",
                "scopes": ["read:user", "user:email"], "token": ""}),
        )
        .await;
    assert_eq!(r, json!({}));
    c.action("agents changed after the sign-out", agents_changed(true))
        .await;
    let root = c.ok("subscribe", json!({"channel": "ahp-root://"})).await;
    assert_eq!(
        github_resource(&root["snapshot"]["state"])["required"],
        true
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_socket_resumes_with_reconnect_in_both_forms_without_gap_or_duplicate() {
    let e = env().await;
    let (reply, gate) = Reply::gated("Part one. Part two.", 2);
    e.fake.push(Rule {
        when: Match::LastUserContains("slowly".into()),
        reply,
        times: Some(1),
    });
    answer_always(&e, "Again.");
    let client_id = uuid::Uuid::new_v4().to_string();
    let (mut c, _) = vs_code(&e, &client_id).await;
    let model = a_model(&mut c).await;
    let session = format!("claude:/{}", uuid::Uuid::new_v4());
    create(&mut c, &e, &session).await;
    let chat = claude_host_protocol::uri::default_chat_uri(&session);
    let turn = request_id();
    let seq = c
        .dispatch(
            &chat,
            json!({"type": "chat/turnStarted", "turnId": turn,
                "startedAt": "2026-05-01T10:01:00.000Z",
                "message": user_message("Answer slowly", &model)}),
        )
        .await;
    c.echo(seq).await;
    // The reply is under way (held by the upstream) when the socket drops.
    e.fake.wait_message_requests(1, WAIT).await.unwrap();
    let seen_before = c.last_seen;
    drop(c);
    gate.open();

    // An older build: no `channel` on `reconnect`.
    let mut c = VsCode::connect(&e.url, &client_id).await;
    let r = c
        .ok(
            "reconnect",
            json!({"clientId": client_id, "lastSeenServerSeq": seen_before,
                "subscriptions": ["ahp-root://", session, chat]}),
        )
        .await;
    assert_eq!(r["type"], "replay", "{r}");
    assert_eq!(r["missing"], json!([]));
    c.actions.clone_from(r["actions"].as_array().unwrap());
    c.last_seen = c
        .actions
        .last()
        .map_or(seen_before, |a| a["serverSeq"].as_u64().unwrap());
    for a in &c.actions {
        let seq = a["serverSeq"].as_u64().unwrap();
        c.last_per_channel
            .insert(a["channel"].as_str().unwrap().to_owned(), seq);
    }
    c.config_burst().await;
    // Live actions after the replay must each be newer than the last (`read` checks).
    let end = c.action("the turn's end", turn_ended(&turn)).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete");
    // Root and session streams may interleave; together they must cover every number once.
    let mut after: Vec<u64> = c
        .actions
        .iter()
        .map(|a| a["serverSeq"].as_u64().unwrap())
        .collect();
    after.sort_unstable();
    assert_eq!(
        after[0],
        seen_before + 1,
        "replay starts right after: {after:?}"
    );
    assert!(
        after.windows(2).all(|w| w[1] == w[0] + 1),
        "replay then live: no gap, no duplicate: {after:?}"
    );
    let last_seen = c.last_seen;
    drop(c);

    // The newest build: `reconnect` with `channel`.
    let mut c = VsCode::connect(&e.url, &client_id).await;
    let r = c
        .ok(
            "reconnect",
            json!({"channel": "ahp-root://", "clientId": client_id,
                "lastSeenServerSeq": last_seen, "subscriptions": ["ahp-root://", session, chat]}),
        )
        .await;
    assert_eq!(r["type"], "replay", "{r}");
    let replayed: Vec<u64> = r["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["serverSeq"].as_u64().unwrap())
        .collect();
    assert!(
        replayed.iter().all(|s| *s > last_seen),
        "nothing it already had: {replayed:?}"
    );
    // The chat it rebuilt from what it saw equals the server's.
    let snap = c.ok("subscribe", json!({"channel": chat})).await;
    let turns = &snap["snapshot"]["state"]["turns"];
    assert_eq!(turns[0]["id"], turn.as_str());
    assert_eq!(turns[0]["state"], "complete");
    let text = turns[0]["responseParts"].to_string();
    assert!(text.contains("Part one. Part two."), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_host_restart_vs_code_initializes_again_and_finds_its_session_by_its_uri() {
    let mut e = env_with_store().await;
    answer_always(&e, "Remembered.");
    let client_id = uuid::Uuid::new_v4().to_string();
    let (mut c, _) = vs_code(&e, &client_id).await;
    let model = a_model(&mut c).await;
    let session = format!("ahp-session:/{}", uuid::Uuid::new_v4());
    create(&mut c, &e, &session).await;
    let chat = claude_host_protocol::uri::default_chat_uri(&session);
    let turn = start_turn_with(&mut c, &chat, user_message("Remember this", &model)).await;
    c.action("the turn's end", turn_ended(&turn)).await;
    // Read in VS Code (sent on the session channel).
    let seq = c
        .dispatch(
            &session,
            json!({"type": "session/isReadChanged", "isRead": true}),
        )
        .await;
    assert!(c.echo(seq).await.get("rejectionReason").is_none());
    let last_seen = c.last_seen;
    drop(c);

    e.restart().await;

    let mut c = VsCode::connect(&e.url, &client_id).await;
    let r = c
        .request(
            "reconnect",
            json!({"channel": "ahp-root://", "clientId": client_id,
                "lastSeenServerSeq": last_seen, "subscriptions": ["ahp-root://", session, chat]}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32008, "{r}");
    // VS Code answers -32008 with a fresh `initialize` carrying every subscription.
    let init = c
        .initialize(&["ahp-root://", session.as_str(), chat.as_str()])
        .await;
    let snapshots = init["snapshots"].as_array().unwrap();
    let resources: Vec<&str> = snapshots
        .iter()
        .map(|s| s["resource"].as_str().unwrap())
        .collect();
    assert_eq!(resources, ["ahp-root://", session.as_str(), chat.as_str()]);
    assert_eq!(snapshots[1]["state"]["defaultChat"], chat.as_str());
    let is_read = |status: &Value| status.as_u64().unwrap() & 32 != 0;
    assert!(
        is_read(&snapshots[1]["state"]["status"]),
        "still read: {}",
        snapshots[1]
    );
    let turns = snapshots[2]["state"]["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 1, "{turns:?}");
    assert_eq!(turns[0]["state"], "complete");
    assert!(turns[0].to_string().contains("Remember this"));
    // The id VS Code gave the turn, which its fork, truncate and own records use.
    assert_eq!(turns[0]["id"], turn.as_str(), "{turns:?}");
    c.config_burst().await;
    c.authenticate().await;
    let listed = c
        .ok("listSessions", json!({"channel": "ahp-root://"}))
        .await;
    let item = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["resource"] == session.as_str())
        .unwrap_or_else(|| panic!("listed under the URI VS Code chose: {listed}"));
    assert!(is_read(&item["status"]), "{item}");
}

/// A window through VS Code's start with a new `claude:/` session: the client, a model id,
/// and the session's default chat.
async fn session_ready(e: &Env) -> (VsCode, String, String) {
    let (mut c, _) = vs_code(e, &uuid::Uuid::new_v4().to_string()).await;
    let model = a_model(&mut c).await;
    let session = format!("claude:/{}", uuid::Uuid::new_v4());
    create(&mut c, e, &session).await;
    let chat = claude_host_protocol::uri::default_chat_uri(&session);
    (c, model, chat)
}

/// A turn as VS Code starts it, with the model's `thinkingLevel` picked; returns its id.
async fn start_turn(c: &mut VsCode, chat: &str, text: &str, model: &str) -> String {
    start_turn_with(
        c,
        chat,
        json!({"text": text, "origin": {"kind": "user"},
            "model": {"id": model, "config": {"thinkingLevel": "high"}}}),
    )
    .await
}

/// A pending message of `kind` (`steering` or `queued`) as VS Code sets it, taken (echoed
/// without a rejection); its id.
async fn set_pending(c: &mut VsCode, chat: &str, kind: &str, text: &str) -> String {
    let id = request_id();
    let echo = c
        .dispatch_echo(
            chat,
            json!({"type": "chat/pendingMessageSet", "kind": kind, "id": id,
                "message": {"text": text, "origin": {"kind": "user"}}}),
        )
        .await;
    assert!(echo.get("rejectionReason").is_none(), "{echo}");
    id
}

/// A turn with `message` as VS Code sends it, taken (echoed without a rejection); its id.
async fn start_turn_with(c: &mut VsCode, chat: &str, message: Value) -> String {
    let turn = request_id();
    let seq = c
        .dispatch(
            chat,
            json!({"type": "chat/turnStarted", "turnId": turn,
                "startedAt": "2026-05-01T10:01:00.000Z", "message": message}),
        )
        .await;
    let echo = c.echo(seq).await;
    assert!(echo.get("rejectionReason").is_none(), "{echo}");
    turn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bash_card_steering_a_queued_message_and_cancels_as_vs_code_sends_them() {
    let e = env().await;
    let rule = |when: Match, reply: Reply| Rule {
        when,
        reply,
        times: Some(1),
    };
    e.fake.push(rule(
        Match::LastUserContains("run the tests".into()),
        Reply::tool_use(
            "Bash",
            json!({"command": "touch ran.txt && echo tests-passed", "description": "Run the tests"}),
        ),
    ));
    e.fake
        .push(rule(Match::HasToolResult, Reply::text("The tests passed.")));
    let (held_steer, steer_gate) = Reply::gated("Working on it, slowly.", 2);
    e.fake.push(rule(
        Match::LastUserContains("long task".into()),
        held_steer,
    ));
    let (held_queue, queue_gate) = Reply::gated("First things first.", 2);
    e.fake.push(rule(
        Match::LastUserContains("first job".into()),
        held_queue,
    ));
    let (held_cancel, _cancel_gate) = Reply::gated("This never ends.", 2);
    e.fake
        .push(rule(Match::LastUserContains("endless".into()), held_cancel));
    answer_always(&e, "Done.");
    let (mut c, model, chat) = session_ready(&e).await;

    // A Bash call: a terminal card with the command in `toolInput`, confirmed by the user.
    let turn = start_turn(&mut c, &chat, "Please run the tests", &model).await;
    let start = c
        .action("the Bash call", |a| {
            a["action"]["type"] == "chat/toolCallStart" && a["action"]["toolName"] == "Bash"
        })
        .await;
    assert_eq!(start["action"]["_meta"]["toolKind"], "terminal", "{start}");
    let call = start["action"]["toolCallId"].as_str().unwrap().to_owned();
    let ready = c
        .action("the card asking for confirmation", |a| {
            a["action"]["type"] == "chat/toolCallReady"
                && a["action"]["toolCallId"] == call
                && a["action"]["confirmed"].is_null()
        })
        .await;
    let input: Value =
        serde_json::from_str(ready["action"]["toolInput"].as_str().unwrap()).unwrap();
    assert_eq!(input["command"], "touch ran.txt && echo tests-passed");
    let seq = c
        .dispatch(
            &chat,
            json!({"type": "chat/toolCallConfirmed", "turnId": turn, "toolCallId": call,
                "approved": true, "confirmed": "user-action", "selectedOptionId": "allow-once"}),
        )
        .await;
    assert!(c.echo(seq).await.get("rejectionReason").is_none());
    let end = c.action("the Bash turn's end", turn_ended(&turn)).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");
    let snap = c.ok("subscribe", json!({"channel": chat})).await;
    let parts = snap["snapshot"]["state"]["turns"][0]["responseParts"].to_string();
    assert!(
        parts.contains("tests-passed"),
        "the command's output: {parts}"
    );
    assert!(parts.contains(r#""toolKind":"terminal""#), "{parts}");
    assert!(e.work().join("ran.txt").exists(), "it ran once approved");

    // Steering with VS Code's request id while a turn runs.
    let turn = start_turn(&mut c, &chat, "A long task", &model).await;
    e.fake.wait_message_requests(3, WAIT).await.unwrap();
    let steer = set_pending(&mut c, &chat, "steering", "also update the docs").await;
    steer_gate.open();
    let end = c.action("the steered turn's end", turn_ended(&turn)).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete");
    let removed = c
        .action("the steering message handed over", |a| {
            a["action"]["type"] == "chat/pendingMessageRemoved" && a["action"]["id"] == steer
        })
        .await;
    assert_eq!(removed["action"]["kind"], "steering");
    // The steering reaches the model: within the turn when Claude Code read it in time, else
    // in a turn of its own right after (the gate may open before it read the message).
    let steered = |e: &Env| {
        e.fake
            .message_requests()
            .iter()
            .any(|r| r.json().to_string().contains("also update the docs"))
    };
    let mut requests = e.fake.message_requests().len();
    while !steered(&e) {
        requests += 1;
        e.fake
            .wait_message_requests(requests, WAIT)
            .await
            .expect("the steering reached the model");
    }

    // A message queued behind a running turn is promoted when it ends (in a second session:
    // the first may still run the steering as a turn of its own).
    let session = format!("ahp-session:/{}", uuid::Uuid::new_v4());
    create(&mut c, &e, &session).await;
    let chat = claude_host_protocol::uri::default_chat_uri(&session);
    let before = e.fake.message_requests().len();
    let turn = start_turn(&mut c, &chat, "The first job", &model).await;
    e.fake
        .wait_message_requests(before + 1, WAIT)
        .await
        .unwrap();
    let queued = set_pending(&mut c, &chat, "queued", "then the second job").await;
    queue_gate.open();
    c.action("the first job's end", turn_ended(&turn)).await;
    let promoted = c
        .action("the queued message promoted", |a| {
            a["action"]["type"] == "chat/turnStarted" && a["action"]["queuedMessageId"] == queued
        })
        .await;
    let promoted_turn = promoted["action"]["turnId"].as_str().unwrap().to_owned();
    // On this chat: the first session's own turn of the steering message may have the same
    // host-made id (`turn-<n>` counts per session).
    let ended = turn_ended(&promoted_turn);
    let end = c
        .action("the promoted turn's end", |a| {
            a["channel"] == chat.as_str() && ended(a)
        })
        .await;
    assert_eq!(end["action"]["type"], "chat/turnComplete");
    let snap = c.ok("subscribe", json!({"channel": chat})).await;
    assert!(
        snap["snapshot"]["state"]["queuedMessages"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "{snap}"
    );

    // Cancel while running; then the same cancel again once idle: acknowledged, harmless.
    let before = e.fake.message_requests().len();
    let turn = start_turn(&mut c, &chat, "An endless story", &model).await;
    e.fake
        .wait_message_requests(before + 1, WAIT)
        .await
        .unwrap();
    let cancel = json!({"type": "chat/turnCancelled", "turnId": turn, "duration": 3150});
    let seq = c.dispatch(&chat, cancel.clone()).await;
    assert!(c.echo(seq).await.get("rejectionReason").is_none());
    let seq = c.dispatch(&chat, cancel).await;
    let again = c.echo(seq).await;
    assert!(again.get("rejectionReason").is_none(), "{again}");
    let snap = c.ok("subscribe", json!({"channel": chat})).await;
    let turns = snap["snapshot"]["state"]["turns"].as_array().unwrap();
    let last = turns.last().unwrap();
    assert_eq!(last["id"], turn.as_str());
    assert_eq!(last["state"], "cancelled");
    assert!(snap["snapshot"]["state"]["activeTurn"].is_null());

    // A message typed right after the stop, sent as steering (the real VS Code does when it
    // still shows the cancelled turn running): it runs as a turn of its own, not lost.
    let before = e.fake.message_requests().len();
    let late = set_pending(&mut c, &chat, "steering", "after the stop, say done").await;
    c.action("the steering message taken", |a| {
        a["action"]["type"] == "chat/pendingMessageRemoved"
            && a["action"]["kind"] == "steering"
            && a["action"]["id"] == late
    })
    .await;
    let started = c
        .action("a turn for it", |a| {
            a["action"]["type"] == "chat/turnStarted" && a["action"]["queuedMessageId"] == late
        })
        .await;
    assert_eq!(
        started["action"]["message"]["text"], "after the stop, say done",
        "{started}"
    );
    let late_turn = started["action"]["turnId"].as_str().unwrap().to_owned();
    let end = c.action("its end", turn_ended(&late_turn)).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");
    e.fake
        .wait_message_requests(before + 1, WAIT)
        .await
        .expect("the message reached the model");
    let last = e.fake.message_requests().pop().unwrap().last_user_text();
    assert!(last.contains("after the stop, say done"), "{last}");
    let snap = c.ok("subscribe", json!({"channel": chat})).await;
    assert!(
        snap["snapshot"]["state"]["steeringMessage"].is_null(),
        "{snap}"
    );
}

/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_with_a_file_selection_and_a_pasted_image_reaches_claude_whole() {
    let e = env().await;
    answer_always(&e, "I see the code and the picture.");
    let file = e.work().join("foo.ts");
    std::fs::write(
        &file,
        "line one\nexport function failing() {\n  return 41;\n}\nline five\n",
    )
    .unwrap();
    let (mut c, model, chat) = session_ready(&e).await;
    let uri = claude_host_protocol::uri::file_uri(&file);
    let turn = start_turn_with(
        &mut c,
        &chat,
        json!({"text": "Fix the failing test in #file:foo.ts", "origin": {"kind": "user"},
                    "attachments": [
                        {"type": "resource", "uri": uri, "label": "foo.ts", "displayKind": "selection",
                         "selection": {"range": {"start": {"line": 1, "character": 0},
                                                 "end": {"line": 3, "character": 1}}}},
                        {"type": "embeddedResource", "label": "image.png", "displayKind": "image",
                         "data": PNG, "contentType": "image/png"},
                        {"type": "simple", "label": "Workspace", "displayKind": "workspace",
                         "modelRepresentation": "The workspace is a TypeScript project."}],
                    "model": {"id": model, "config": {"thinkingLevel": "high"}}}),
    )
    .await;
    let end = c.action("the turn's end", turn_ended(&turn)).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");
    // What Claude Code sent upstream: the selected lines, the image, the workspace note.
    let req = e.fake.message_requests().pop().unwrap();
    let body = req.json();
    let user = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .unwrap()
        .to_string();
    assert!(user.contains("Fix the failing test"), "{user}");
    assert!(user.contains("export function failing()"), "{user}");
    assert!(user.contains("return 41;"));
    assert!(!user.contains("line five"), "only the selection: {user}");
    assert!(user.contains(r#""type":"image""#), "{user}");
    assert!(user.contains("TypeScript project"));
    assert_eq!(req.header("copilot-vision-request"), Some("true"));
    // The history keeps the attachments and the model VS Code picked.
    let snap = c.ok("subscribe", json!({"channel": chat})).await;
    let message = &snap["snapshot"]["state"]["turns"][0]["message"];
    assert_eq!(message["attachments"][0]["uri"], uri.as_str());
    assert_eq!(message["attachments"][1]["contentType"], "image/png");
    assert_eq!(message["model"]["id"], model.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_on_demand_unknown_requests_and_a_client_leaving_as_vs_code_expects() {
    let e = env().await;
    let mut a = VsCode::connect(&e.url, &uuid::Uuid::new_v4().to_string()).await;
    a.initialize(&["ahp-root://"]).await;
    a.config_burst().await;
    // Before any sign-in, createSession says which sign-in it needs.
    let session = format!("claude:/{}", uuid::Uuid::new_v4());
    let work = claude_host_protocol::uri::file_uri(&e.work());
    let refused = a
        .request(
            "createSession",
            json!({"channel": session, "provider": "claude", "workingDirectories": [work]}),
        )
        .await;
    assert_eq!(refused["error"]["code"], -32007, "{refused}");
    let resource = &refused["error"]["data"]["resources"][0];
    assert_eq!(resource["resource"], "https://api.github.com");
    assert_eq!(
        resource["authorization_servers"],
        json!(["https://github.com/login/oauth"])
    );
    // VS Code signs in and retries once.
    a.authenticate().await;
    create(&mut a, &e, &session).await;
    // Extension requests this host does not serve: -32601, and the connection stays.
    for method in ["shutdown", "getNetworkDiagnosticsInfo", "diagnosticsFetch"] {
        let r = a.request(method, json!({"channel": "ahp-root://"})).await;
        assert_eq!(r["error"]["code"], -32601, "{method}: {r}");
    }
    assert_eq!(
        a.ok("ping", json!({"channel": "ahp-root://"})).await,
        Value::Null
    );
    // Another window watches the session; the first one's connection closes.
    let mut b = VsCode::connect(&e.url, &uuid::Uuid::new_v4().to_string()).await;
    b.initialize(&["ahp-root://", session.as_str()]).await;
    let gone = a.client_id.clone();
    drop(a);
    let removed = b
        .action("the closed window leaving", |x| {
            x["action"]["type"] == "session/activeClientRemoved"
                && x["action"]["clientId"] == gone.as_str()
        })
        .await;
    assert_eq!(removed["channel"], session.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slash_and_at_complete_to_claude_codes_commands_and_the_sessions_files() {
    let e = env().await;
    std::fs::create_dir_all(e.work().join("src")).unwrap();
    std::fs::write(e.work().join("src/main.rs"), "fn main() {}\n").unwrap();
    let (mut c, init) = vs_code(&e, &uuid::Uuid::new_v4().to_string()).await;
    assert_eq!(init["completionTriggerCharacters"], json!(["/", "@"]));
    let session = format!("claude:/{}", uuid::Uuid::new_v4());
    create(&mut c, &e, &session).await;
    let complete = |text: &str| {
        json!({"kind": "userMessage", "channel": session, "text": text,
            "offset": text.chars().count()})
    };
    // Before the first prompt: the session's CLI is started to ask it.
    let all = c.ok("completions", complete("/")).await;
    let items = all["items"].as_array().unwrap().clone();
    assert!(!items.is_empty(), "Claude Code's commands: {all}");
    let first = items[0]["attachment"]["_meta"]["command"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(items[0]["insertText"], format!("/{first} "));
    assert_eq!(
        (items[0]["rangeStart"].clone(), items[0]["rangeEnd"].clone()),
        (json!(0), json!(1))
    );
    let prefix: String = first.chars().take(3).collect();
    let narrowed = c.ok("completions", complete(&format!("/{prefix}"))).await;
    let narrowed = narrowed["items"].as_array().unwrap();
    assert!(!narrowed.is_empty() && narrowed.len() <= items.len());
    assert!(narrowed.iter().all(|i| {
        i["insertText"]
            .as_str()
            .unwrap()
            .starts_with(&format!("/{prefix}"))
    }));
    // Files under the session's folder.
    let files = c.ok("completions", complete("look at @mai")).await;
    let file = &files["items"][0];
    assert_eq!(file["insertText"], "@src/main.rs");
    assert_eq!(file["rangeStart"], 8);
    assert_eq!(file["rangeEnd"], 12);
    assert_eq!(file["attachment"]["type"], "resource");
    assert_eq!(
        file["attachment"]["uri"],
        claude_host_protocol::uri::file_uri(&e.work().join("src/main.rs")).as_str()
    );
    // No trigger, no items.
    let none = c.ok("completions", complete("plain words")).await;
    assert_eq!(none["items"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vs_codes_session_config_keys_map_onto_permission_modes_or_are_refused_with_a_reason() {
    let e = env().await;
    let (mut c, _) = vs_code(&e, &uuid::Uuid::new_v4().to_string()).await;
    let session = format!("claude:/{}", uuid::Uuid::new_v4());
    let work = claude_host_protocol::uri::file_uri(&e.work());
    c.ok(
        "createSession",
        json!({"channel": session, "provider": "claude", "workingDirectories": [work],
            "config": {"isolation": "folder", "autoApprove": "default", "mode": "plan"}}),
    )
    .await;
    let s = c.ok("subscribe", json!({"channel": session})).await;
    let values = &s["snapshot"]["state"]["config"]["values"];
    assert_eq!(values["permissionMode"], "plan", "{values}");
    // The chip VS Code changes on a live session.
    let seq = c
        .dispatch(
            &session,
            json!({"type": "session/configChanged", "config": {"autoApprove": "assisted"}}),
        )
        .await;
    let echo = c.echo(seq).await;
    assert!(echo.get("rejectionReason").is_none(), "{echo}");
    assert_eq!(echo["action"]["config"]["permissionMode"], "acceptEdits");
    for (config, why) in [
        (json!({"isolation": "worktree"}), "worktree"),
        (json!({"mode": "autopilot"}), "bypassPermissions"),
    ] {
        let seq = c
            .dispatch(
                &session,
                json!({"type": "session/configChanged", "config": config}),
            )
            .await;
        let echo = c.echo(seq).await;
        let reason = echo["rejectionReason"].as_str().unwrap_or_default();
        assert!(reason.contains(why), "{echo}");
    }
    let s = c.ok("subscribe", json!({"channel": session})).await;
    assert_eq!(
        s["snapshot"]["state"]["config"]["values"]["permissionMode"],
        "acceptEdits"
    );
    // A worktree is refused at creation too, with the reason.
    let other = format!("claude:/{}", uuid::Uuid::new_v4());
    let r = c
        .request(
            "createSession",
            json!({"channel": other, "provider": "claude", "workingDirectories": [work],
                "config": {"isolation": "worktree"}}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("worktree"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_only_the_client_has_is_read_from_the_client() {
    let e = env().await;
    answer_always(&e, "Noted.");
    let (mut c, model, chat) = session_ready(&e).await;
    let mine = "file:///home/me/notes/plan.md";
    c.files.insert(
        mine.into(),
        b"Client-side notes: the answer is 42.\n".to_vec(),
    );
    let nowhere = "file:///home/me/notes/missing.md";
    let turn = start_turn_with(
        &mut c,
        &chat,
        json!({"text": "Read my notes", "origin": {"kind": "user"},
                    "attachments": [
                        {"type": "resource", "uri": mine, "label": "plan.md", "displayKind": "document"},
                        {"type": "resource", "uri": nowhere, "label": "missing.md", "displayKind": "document"}],
                    "model": {"id": model}}),
    )
    .await;
    c.action("the turn's end", turn_ended(&turn)).await;
    let asked: Vec<&str> = c
        .notes
        .iter()
        .filter(|n| n["method"] == "resourceRead")
        .map(|n| n["params"]["uri"].as_str().unwrap())
        .collect();
    assert_eq!(
        asked,
        [mine, nowhere],
        "asked the client for what the host lacks"
    );
    let sent = e.fake.message_requests().pop().unwrap().json().to_string();
    assert!(sent.contains("the answer is 42"), "{sent}");
    assert!(sent.contains("missing.md could not be read"), "{sent}");
    assert!(sent.contains("from the client: file not found"), "{sent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribes_sent_with_their_create_session_wait_for_it() {
    let e = env().await;
    let (mut c, _) = vs_code(&e, &uuid::Uuid::new_v4().to_string()).await;
    let work = claude_host_protocol::uri::file_uri(&e.work());
    for round in 0..5 {
        let session = format!("ahp-session:/{}", uuid::Uuid::new_v4());
        let chat = claude_host_protocol::uri::default_chat_uri(&session);
        // All three frames at once, as a client that does not wait for the create.
        let base = 1000 * (round + 1);
        c.send(
            json!({"jsonrpc": "2.0", "id": base, "method": "createSession",
            "params": {"channel": session, "provider": "claude", "workingDirectories": [work]}}),
        )
        .await;
        c.send(
            json!({"jsonrpc": "2.0", "id": base + 1, "method": "subscribe",
            "params": {"channel": session}}),
        )
        .await;
        c.send(
            json!({"jsonrpc": "2.0", "id": base + 2, "method": "subscribe",
            "params": {"channel": chat}}),
        )
        .await;
        let mut answers = HashMap::new();
        while answers.len() < 3 {
            let v = c.read().await;
            if let Some(id) = v["id"].as_i64().filter(|i| (base..base + 3).contains(i)) {
                answers.insert(id, v);
            }
        }
        assert_eq!(
            answers[&base]["result"],
            Value::Null,
            "{:?}",
            answers[&base]
        );
        assert_eq!(
            answers[&(base + 1)]["result"]["snapshot"]["resource"],
            session.as_str(),
            "{:?}",
            answers[&(base + 1)]
        );
        assert_eq!(
            answers[&(base + 2)]["result"]["snapshot"]["resource"],
            chat.as_str()
        );
    }
}

/// VS Code 1.139.1, when it creates the session with the first message, subscribes to the chat
/// and dispatches the turn in the same instant, without waiting for the snapshot. The host must
/// take them in that order: the snapshot before the turn, then the turn's echo. An echo folded
/// into the snapshot instead leaves VS Code's optimistic turn unconfirmed for good; it re-applies
/// it over every later state, so no confirmation or question is ever shown, and after a stop the
/// turn comes back as one "the server started".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_dispatched_with_its_chats_subscribe_is_echoed_after_the_snapshot() {
    let e = env().await;
    answer_always(&e, "Hello from Claude.");
    let (mut c, _) = vs_code(&e, &uuid::Uuid::new_v4().to_string()).await;
    let model = a_model(&mut c).await;
    let work = claude_host_protocol::uri::file_uri(&e.work());
    for round in 0..8 {
        let session = format!("claude:/{}", uuid::Uuid::new_v4());
        let chat = claude_host_protocol::uri::default_chat_uri(&session);
        c.ok(
            "createSession",
            json!({"channel": session, "provider": "claude", "workingDirectories": [work]}),
        )
        .await;
        c.ok("subscribe", json!({"channel": session})).await;
        // The chat's subscribe and the turn in one write, as VS Code sends them back to back.
        let id = 5000 + round;
        let turn = request_id();
        c.client_seq += 1;
        let seq = c.client_seq;
        for frame in [
            json!({"jsonrpc": "2.0", "id": id, "method": "subscribe",
                "params": {"channel": chat}}),
            json!({"jsonrpc": "2.0", "method": "dispatchAction", "params": {
                "channel": chat, "clientSeq": seq, "action": {
                    "type": "chat/turnStarted", "turnId": turn,
                    "startedAt": "2026-05-01T10:01:00.000Z",
                    "message": user_message("Say hello", &model)}}}),
        ] {
            c.ws.feed(Message::Text(frame.to_string().into()))
                .await
                .unwrap();
        }
        c.ws.flush().await.unwrap();
        let answer = loop {
            let v = c.read().await;
            if v["id"] == json!(id) && v.get("method").is_none() {
                break v;
            }
        };
        let snapshot = &answer["result"]["snapshot"];
        assert_eq!(snapshot["resource"], chat.as_str(), "{answer}");
        assert!(
            snapshot["state"]["activeTurn"].is_null(),
            "round {round}: the snapshot was taken before the turn: {snapshot}"
        );
        let echo = c.echo(seq).await;
        assert!(echo.get("rejectionReason").is_none(), "{echo}");
        assert!(
            echo["serverSeq"].as_u64() > snapshot["fromSeq"].as_u64(),
            "round {round}: the echo comes after the snapshot: {echo} / {}",
            snapshot["fromSeq"]
        );
        c.action("the turn's end", turn_ended(&turn)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_prompts_with_tools_and_a_subagent_are_three_premium_requests() {
    let e = env().await;
    let rule = |when: Match, reply: Reply| Rule {
        when,
        reply,
        times: Some(1),
    };
    e.fake.push(rule(
        Match::LastUserContains("run the tests".into()),
        Reply::tool_use(
            "Bash",
            json!({"command": "touch ran.txt && echo tests-passed", "description": "Run the tests"}),
        ),
    ));
    e.fake
        .push(rule(Match::HasToolResult, Reply::text("The tests passed.")));
    e.fake.push(rule(
        Match::LastUserContains("ask a helper".into()),
        Reply::subagent_call("SUBPROMPT list the files"),
    ));
    e.fake.push(rule(
        Match::LastUserContains("SUBPROMPT".into()),
        Reply::text("Nothing here."),
    ));
    e.fake.push(rule(
        Match::HasToolResult,
        Reply::text("The helper found nothing."),
    ));
    e.fake.push(rule(
        Match::LastUserContains("thanks".into()),
        Reply::text("You're welcome."),
    ));
    let (mut c, model, chat) = session_ready(&e).await;

    let turn = start_turn(&mut c, &chat, "Please run the tests", &model).await;
    let ready = c
        .action("the Bash card asking for confirmation", |a| {
            a["action"]["type"] == "chat/toolCallReady" && a["action"]["confirmed"].is_null()
        })
        .await;
    let call = ready["action"]["toolCallId"].as_str().unwrap().to_owned();
    let seq = c
        .dispatch(
            &chat,
            json!({"type": "chat/toolCallConfirmed", "turnId": turn, "toolCallId": call,
                "approved": true, "confirmed": "user-action"}),
        )
        .await;
    assert!(c.echo(seq).await.get("rejectionReason").is_none());
    let end = c.action("the first turn's end", turn_ended(&turn)).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");

    let turn = start_turn(&mut c, &chat, "Please ask a helper", &model).await;
    let end = c.action("the second turn's end", turn_ended(&turn)).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");

    let turn = start_turn(&mut c, &chat, "thanks", &model).await;
    let end = c.action("the third turn's end", turn_ended(&turn)).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");

    let reqs = e.fake.message_requests();
    let by: Vec<(String, String)> = reqs
        .iter()
        .map(|r| {
            let text = r.last_user_text();
            (
                r.header("x-initiator").unwrap().to_owned(),
                text.lines().last().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let users: Vec<_> = by.iter().filter(|(i, _)| i == "user").collect();
    assert_eq!(users.len(), 3, "{by:#?}");
    assert!(users[0].1.contains("run the tests"), "{by:#?}");
    assert!(users[1].1.contains("ask a helper"), "{by:#?}");
    assert!(users[2].1.contains("thanks"), "{by:#?}");
    assert!(
        by.iter()
            .any(|(i, t)| i == "agent" && t.contains("SUBPROMPT")),
        "the subagent's request is the agent's: {by:#?}"
    );
    assert_eq!(reqs.len(), 6, "{by:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn used_up_premium_requests_end_the_turn_with_the_reset_date() {
    let e = env().await;
    answer_always(&e, "Never sent.");
    e.fake.exhaust_premium(true);
    let (mut c, model, chat) = session_ready(&e).await;
    let turn = start_turn(&mut c, &chat, "hello", &model).await;
    let end = c.action("the turn's end", turn_ended(&turn)).await;
    assert_eq!(end["action"]["type"], "chat/error", "{end}");
    let message = end["action"]["part"]["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("premium requests are used up"),
        "{message}"
    );
    assert!(message.contains("2026-12-01"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_titles_and_drafts_are_refused_and_change_nothing() {
    let e = env().await;
    let (mut c, _) = vs_code(&e, &uuid::Uuid::new_v4().to_string()).await;
    let session_uri = format!("claude:/{}", uuid::Uuid::new_v4());
    create(&mut c, &e, &session_uri).await;
    let chat = claude_host_protocol::uri::default_chat_uri(&session_uri);
    let seq = c
        .dispatch(
            &session_uri,
            json!({"type": "session/titleChanged", "title": "t".repeat(1_001)}),
        )
        .await;
    let echo = c.echo(seq).await;
    let why = echo["rejectionReason"].as_str().unwrap_or_default();
    assert!(why.contains("at most 1000 characters"), "{echo}");
    let seq = c
        .dispatch(
            &chat,
            json!({"type": "chat/draftChanged", "draft": {"text": "d".repeat(9 << 20),
                "origin": {"kind": "user"}}}),
        )
        .await;
    let echo = c.echo(seq).await;
    assert!(
        echo["rejectionReason"]
            .as_str()
            .unwrap_or_default()
            .contains("larger than 8 MiB"),
        "{}",
        &echo.to_string()[..300.min(echo.to_string().len())]
    );
    // Nothing of either was kept.
    let s = c.ok("subscribe", json!({"channel": session_uri})).await;
    assert!(
        s["snapshot"]["state"]["title"]
            .as_str()
            .unwrap_or_default()
            .len()
            < 1_001
    );
    let s = c.ok("subscribe", json!({"channel": chat})).await;
    assert!(
        s["snapshot"]["state"]
            .get("draft")
            .is_none_or(Value::is_null),
        "{}",
        s["snapshot"]["state"]["draft"]
    );
    // A title of normal length still goes through.
    let seq = c
        .dispatch(
            &session_uri,
            json!({"type": "session/titleChanged", "title": "Fine"}),
        )
        .await;
    assert!(c.echo(seq).await.get("rejectionReason").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vs_code_follows_a_subagent_in_its_own_chat_live_and_after_a_host_restart() {
    use claude_host_testkit::fake::Block;
    let mut e = env_with_store().await;
    std::fs::write(e.work().join("a.txt"), "hello").unwrap();
    let once = |when: Match, reply: Reply| Rule {
        when,
        reply,
        times: Some(1),
    };
    e.fake.push(once(
        Match::LastUserContains("ask a helper".into()),
        Reply::subagent_call("SUBPROMPT list the files"),
    ));
    // The subagent's first answer waits, so the window subscribes before its tool call.
    let (held, gate) = Reply::gated_blocks(
        vec![Block::ToolUse {
            name: "Bash".into(),
            input: json!({"command": "ls", "description": "List files"}),
        }],
        1,
    );
    e.fake
        .push(once(Match::LastUserContains("SUBPROMPT".into()), held));
    e.fake
        .push(once(Match::HasToolResult, Reply::text("Found a.txt.")));
    e.fake.push(once(
        Match::HasToolResult,
        Reply::text("The helper found a.txt."),
    ));
    let client_id = uuid::Uuid::new_v4().to_string();
    let (mut c, _) = vs_code(&e, &client_id).await;
    let model = a_model(&mut c).await;
    let session = format!("claude:/{}", uuid::Uuid::new_v4());
    create(&mut c, &e, &session).await;
    let chat = claude_host_protocol::uri::default_chat_uri(&session);
    let turn = start_turn(&mut c, &chat, "Please ask a helper", &model).await;

    let ready = c
        .action("the Agent call's card", |a| {
            a["channel"] == chat.as_str()
                && a["action"]["type"] == "chat/toolCallReady"
                && a["action"]["_meta"]["toolKind"] == "subagent"
        })
        .await;
    let call = ready["action"]["toolCallId"].as_str().unwrap().to_owned();
    let child = ready["action"]["_meta"]["subagentChatUri"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        child,
        claude_host_protocol::uri::subagent_chat_uri(&session, &call)
    );
    assert_eq!(
        ready["action"]["_meta"]["subagentAgentName"],
        "general-purpose"
    );
    let added = c
        .action("the child chat in the session's chats", |a| {
            a["action"]["type"] == "session/chatAdded"
        })
        .await;
    assert_eq!(added["channel"], session.as_str());
    assert_eq!(added["action"]["summary"]["resource"], child.as_str());
    assert_eq!(
        added["action"]["summary"]["origin"],
        json!({"kind": "tool", "chat": chat, "toolCallId": call})
    );

    // Subscribed while the parent's call runs: the child's turn is open, with nothing in it.
    let snap = c.ok("subscribe", json!({"channel": child})).await;
    let from = snap["snapshot"]["fromSeq"].as_u64().unwrap();
    let mut mirror: ahp_types::state::ChatState =
        serde_json::from_value(snap["snapshot"]["state"].clone()).unwrap();
    let open = mirror.active_turn.as_ref().expect("the child's turn runs");
    assert_eq!(open.id, call);
    assert_eq!(open.message.text, "SUBPROMPT list the files");
    assert!(open.response_parts.is_empty(), "{open:?}");
    gate.open();
    c.action("the main turn's end", turn_ended(&turn)).await;

    let child_actions: Vec<Value> = c
        .actions
        .iter()
        .filter(|a| a["channel"] == child.as_str())
        .cloned()
        .collect();
    let kinds: Vec<&str> = child_actions
        .iter()
        .map(|a| a["action"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "chat/toolCallStart",
            "chat/toolCallReady",
            "chat/toolCallComplete",
            "chat/usage",
            "chat/turnComplete"
        ]
    );
    for a in &child_actions {
        assert!(a["serverSeq"].as_u64().unwrap() > from);
        let action: ahp_types::actions::StateAction =
            serde_json::from_value(a["action"].clone()).unwrap();
        ahp::reducers::apply_action_to_chat(&mut mirror, &action);
    }
    // Live: the child's tool call finished before the parent's call did.
    let at = |pred: &dyn Fn(&Value) -> bool| c.actions.iter().position(pred).unwrap();
    let inner_done =
        at(&|a| a["channel"] == child.as_str() && a["action"]["type"] == "chat/toolCallComplete");
    let parent_done = at(&|a| {
        a["channel"] == chat.as_str()
            && a["action"]["type"] == "chat/toolCallComplete"
            && a["action"]["toolCallId"] == call.as_str()
    });
    assert!(inner_done < parent_done);
    let mirrored = serde_json::to_value(&mirror).unwrap();
    assert_eq!(mirrored, e.server_chat_state(&child).await);
    let live_calls = tool_calls_of(&mirrored["turns"][0]);
    assert_eq!(live_calls.len(), 1, "{mirrored}");

    // A subagent's chat takes no prompts, and a chat no call started is not there.
    let seq = c
        .dispatch(
            &child,
            json!({"type": "chat/turnStarted", "turnId": request_id(),
                "startedAt": "2026-05-01T10:01:00.000Z",
                "message": user_message("hello child", &model)}),
        )
        .await;
    let echo = c.echo(seq).await;
    assert!(
        echo["rejectionReason"]
            .as_str()
            .unwrap_or_default()
            .contains("read-only"),
        "{echo}"
    );
    assert_eq!(mirrored, e.server_chat_state(&child).await, "unchanged");
    let nothing = claude_host_protocol::uri::subagent_chat_uri(&session, "toolu_nothing");
    let r = c.request("subscribe", json!({"channel": nothing})).await;
    assert!(r.get("error").is_some(), "{r}");

    // After a restart the window initializes again with the same subscriptions.
    drop(c);
    e.restart().await;
    let mut c = VsCode::connect(&e.url, &client_id).await;
    let init = c
        .initialize(&[
            "ahp-root://",
            session.as_str(),
            chat.as_str(),
            child.as_str(),
        ])
        .await;
    let snapshots = init["snapshots"].as_array().unwrap();
    assert_eq!(snapshots.len(), 4, "{init}");
    let chats = snapshots[1]["state"]["chats"].as_array().unwrap();
    let listed = chats
        .iter()
        .find(|c| c["resource"] == child.as_str())
        .unwrap_or_else(|| panic!("the child is listed again: {chats:?}"));
    assert_eq!(
        listed["origin"],
        json!({"kind": "tool", "chat": chat, "toolCallId": call})
    );
    let parent_call = snapshots[2]["state"]["turns"][0]["responseParts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["toolCall"]["toolCallId"] == call.as_str())
        .unwrap()["toolCall"]
        .clone();
    assert_eq!(parent_call["_meta"]["subagentChatUri"], child.as_str());
    let restored = &snapshots[3]["state"];
    assert_eq!(snapshots[3]["resource"], child.as_str());
    assert_eq!(restored["turns"].as_array().unwrap().len(), 1, "{restored}");
    assert_eq!(restored["turns"][0]["id"], call.as_str());
    assert_eq!(
        restored["turns"][0]["message"]["text"],
        "SUBPROMPT list the files"
    );
    assert_eq!(tool_calls_of(&restored["turns"][0]), live_calls);
}

/// (id, name, status) of a turn's tool calls.
fn tool_calls_of(turn: &Value) -> Vec<(String, String, String)> {
    turn["responseParts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "toolCall")
        .map(|p| {
            let c = &p["toolCall"];
            (
                c["toolCallId"].as_str().unwrap().to_owned(),
                c["toolName"].as_str().unwrap().to_owned(),
                c["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// A `chat/toolCallComplete` as VS Code sends a client tool's result.
fn tool_result(turn: &str, call: &str, text: &str) -> Value {
    json!({"type": "chat/toolCallComplete", "turnId": turn, "toolCallId": call,
        "result": {"success": true, "pastTenseMessage": "Ran tests",
            "content": [{"type": "text", "text": text}]}})
}

/// A turn in which Claude calls the window's `vscode_runTests`, confirmed by the window, up
/// to the host asking the window to run it: the session, the turn and the call.
async fn client_tool_parked(e: &Env, c: &mut VsCode, model: &str, chat: &str) -> (String, String) {
    let turn = start_turn(c, chat, "Please run the tests", model).await;
    let start = c
        .action("the client tool's card", |a| {
            a["action"]["type"] == "chat/toolCallStart"
                && a["action"]["toolName"] == "mcp__client__vscode_runTests"
        })
        .await;
    let me = c.client_id.clone();
    assert_eq!(
        start["action"]["contributor"],
        json!({"kind": "client", "clientId": me}),
        "{start}"
    );
    assert_eq!(start["action"]["displayName"], "vscode_runTests");
    let call = start["action"]["toolCallId"].as_str().unwrap().to_owned();
    c.action("the confirmation", |a| {
        a["action"]["type"] == "chat/toolCallReady"
            && a["action"]["toolCallId"] == call.as_str()
            && a["action"]["confirmed"].is_null()
    })
    .await;
    let seq = c
        .dispatch(
            chat,
            json!({"type": "chat/toolCallConfirmed", "turnId": turn, "toolCallId": call,
                "approved": true, "confirmed": "user-action"}),
        )
        .await;
    assert!(c.echo(seq).await.get("rejectionReason").is_none());
    let need = c
        .action("the request to run it", |a| {
            a["action"]["type"] == "session/inputNeededSet"
                && a["action"]["request"]["kind"] == "toolClientExecution"
                && a["action"]["request"]["id"] == call.as_str()
        })
        .await;
    let request = &need["action"]["request"];
    // One ready for the call, asking: VS Code shows a call as running, then asking, when a
    // `not-needed` ready comes first.
    let readies: Vec<&Value> = c
        .actions
        .iter()
        .filter(|a| {
            a["action"]["type"] == "chat/toolCallReady"
                && a["action"]["toolCallId"] == call.as_str()
        })
        .collect();
    assert_eq!(readies.len(), 1, "one ready per call: {readies:#?}");
    assert!(readies[0]["action"]["confirmed"].is_null(), "{readies:#?}");
    assert_eq!(request["id"], call.as_str(), "{need}");
    assert_eq!(request["clientId"], me.as_str());
    assert_eq!(request["chat"], chat);
    assert_eq!(request["turnId"], turn.as_str());
    assert_eq!(request["toolCall"]["status"], "running");
    assert_eq!(request["toolCall"]["toolCallId"], call.as_str());
    let _ = e;
    (turn, call)
}

fn script_client_tool(e: &Env, then: &str) {
    e.fake.push(Rule {
        when: Match::LastUserContains("run the tests".into()),
        reply: Reply::tool_use(
            "mcp__client__vscode_runTests",
            json!({"files": ["a.test.ts"]}),
        ),
        times: Some(1),
    });
    e.fake.push(Rule {
        when: Match::HasToolResult,
        reply: Reply::text(then),
        times: Some(1),
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_tool_runs_in_its_window_and_only_its_result_reaches_claude() {
    let e = env().await;
    script_client_tool(&e, "All green.");
    let (mut c, model, chat) = session_ready(&e).await;
    let session = claude_host_protocol::uri::session_of_default_chat(&chat).unwrap();
    let (turn, call) = client_tool_parked(&e, &mut c, &model, &chat).await;

    // Refused, each with its reason, and the call still waits.
    let seq = c
        .dispatch(&chat, tool_result(&turn, "toolu_nothing", "3 passed"))
        .await;
    let echo = c.echo(seq).await;
    assert!(
        echo["rejectionReason"]
            .as_str()
            .unwrap_or_default()
            .contains("no client tool call toolu_nothing"),
        "{echo}"
    );
    let (mut other, _) = vs_code(&e, &uuid::Uuid::new_v4().to_string()).await;
    other.ok("subscribe", json!({"channel": chat})).await;
    let seq = other
        .dispatch(&chat, tool_result(&turn, &call, "forged"))
        .await;
    let echo = other.echo(seq).await;
    assert!(
        echo["rejectionReason"]
            .as_str()
            .unwrap_or_default()
            .contains("another client"),
        "{echo}"
    );
    let seq = c
        .dispatch(
            &chat,
            json!({"type": "chat/toolCallComplete", "turnId": turn, "toolCallId": call,
                "result": {"success": "yes"}}),
        )
        .await;
    let echo = c.echo(seq).await;
    assert!(
        echo["rejectionReason"]
            .as_str()
            .unwrap_or_default()
            .contains("malformed"),
        "{echo}"
    );
    let waiting = e.server_session_state(&session).await.input_needed;
    assert_eq!(
        serde_json::to_value(&waiting).unwrap()[0]["id"],
        call.as_str(),
        "still waiting: {waiting:?}"
    );

    // The owner's result goes to Claude.
    let seq = c
        .dispatch(&chat, tool_result(&turn, &call, "3 passed"))
        .await;
    let echo = c.echo(seq).await;
    assert!(echo.get("rejectionReason").is_none(), "{echo}");
    c.action("the request withdrawn", |a| {
        a["action"]["type"] == "session/inputNeededRemoved" && a["action"]["id"] == call.as_str()
    })
    .await;
    let end = c.action("the turn's end", turn_ended(&turn)).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");
    let last = e.fake.message_requests().pop().unwrap().json().to_string();
    assert!(last.contains("3 passed"), "{last}");
    assert!(!last.contains("forged"), "{last}");
    let state = e.server_chat_state(&chat).await;
    let completes = c
        .actions
        .iter()
        .filter(|a| {
            a["action"]["type"] == "chat/toolCallComplete"
                && a["action"]["toolCallId"] == call.as_str()
                && a.get("rejectionReason").is_none()
        })
        .count();
    assert_eq!(completes, 1, "the call completes once");
    assert!(state.to_string().contains("All green."), "{state}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_turn_while_a_client_tool_waits_ends_the_call_and_claude_goes_on() {
    let e = env().await;
    script_client_tool(&e, "never used");
    let (mut c, model, chat) = session_ready(&e).await;
    let session = claude_host_protocol::uri::session_of_default_chat(&chat).unwrap();
    let (turn, call) = client_tool_parked(&e, &mut c, &model, &chat).await;
    let seq = c
        .dispatch(
            &chat,
            json!({"type": "chat/turnCancelled", "turnId": turn, "duration": 1000}),
        )
        .await;
    assert!(c.echo(seq).await.get("rejectionReason").is_none());
    c.action("the request withdrawn", |a| {
        a["action"]["type"] == "session/inputNeededRemoved" && a["action"]["id"] == call.as_str()
    })
    .await;
    let end = c.action("the turn's end", turn_ended(&turn)).await;
    assert_eq!(end["action"]["type"], "chat/turnCancelled", "{end}");
    assert!(
        e.server_session_state(&session)
            .await
            .input_needed
            .is_none_or(|v| v.is_empty())
    );
    // Nothing hangs: the next turn runs.
    e.fake.push(Rule {
        when: Match::LastUserContains("again".into()),
        reply: Reply::text("Back."),
        times: Some(1),
    });
    let turn = start_turn(&mut c, &chat, "again", &model).await;
    let end = c.action("the next turn's end", turn_ended(&turn)).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_while_its_tool_waits_gets_an_error_result_to_claude() {
    let e = env_full(
        HostConfig::default(),
        |a| a.client_tool_grace = std::time::Duration::from_millis(300),
        |_| {},
    )
    .await;
    script_client_tool(&e, "The tests could not run.");
    let (mut c, model, chat) = session_ready(&e).await;
    let (mut watcher, _) = vs_code(&e, &uuid::Uuid::new_v4().to_string()).await;
    watcher.ok("subscribe", json!({"channel": chat})).await;
    let (turn, call) = client_tool_parked(&e, &mut c, &model, &chat).await;
    drop(c);
    let end = watcher.action("the turn's end", turn_ended(&turn)).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");
    let last = e.fake.message_requests().pop().unwrap().json().to_string();
    assert!(last.contains("clientUnavailable"), "{last}");
    let state = e.server_chat_state(&chat).await;
    assert!(state.to_string().contains("The tests could not run."));
    let _ = call;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_windows_tools_reach_only_their_owner_and_a_new_tool_restarts_the_cli_once() {
    let e = env().await;
    let once = |when: Match, reply: Reply| Rule {
        when,
        reply,
        times: Some(1),
    };
    e.fake.push(once(
        Match::LastUserContains("hello".into()),
        Reply::text("Hi."),
    ));
    e.fake.push(once(
        Match::LastUserContains("open the file".into()),
        Reply::tool_use("mcp__client__vscode_openFile", json!({"path": "a.ts"})),
    ));
    e.fake
        .push(once(Match::HasToolResult, Reply::text("Opened.")));
    script_client_tool(&e, "All green.");
    let (mut a, model, chat) = session_ready(&e).await;
    let session = claude_host_protocol::uri::session_of_default_chat(&chat).unwrap();
    let id = claude_host_protocol::uri::session_uri_id(&session)
        .unwrap()
        .to_owned();
    let turn = start_turn(&mut a, &chat, "hello", &model).await;
    a.action("the first turn's end", turn_ended(&turn)).await;
    let handle = e.host.agent().session(&id).unwrap();
    assert_eq!(handle.materializations(), 1);

    // A second window joins with a tool of its own, between turns.
    let (mut b, _) = vs_code(&e, &uuid::Uuid::new_v4().to_string()).await;
    b.ok("subscribe", json!({"channel": session})).await;
    b.ok("subscribe", json!({"channel": chat})).await;
    let b_id = b.client_id.clone();
    let seq = b
        .dispatch(
            &session,
            json!({"type": "session/activeClientSet", "activeClient": {"clientId": b_id,
                "displayName": "Window B", "tools": [{"name": "vscode_openFile",
                "description": "Opens a file", "inputSchema": {"type": "object",
                "properties": {"path": {"type": "string"}}}}]}}),
        )
        .await;
    assert!(b.echo(seq).await.get("rejectionReason").is_none());

    // Its tool's call goes to it alone.
    let turn = start_turn(&mut a, &chat, "open the file", &model).await;
    let start = a
        .action("window B's tool card", |x| {
            x["action"]["type"] == "chat/toolCallStart"
                && x["action"]["toolName"] == "mcp__client__vscode_openFile"
        })
        .await;
    assert_eq!(
        start["action"]["contributor"],
        json!({"kind": "client", "clientId": b_id})
    );
    let call = start["action"]["toolCallId"].as_str().unwrap().to_owned();
    a.action("the confirmation", |x| {
        x["action"]["type"] == "chat/toolCallReady"
            && x["action"]["toolCallId"] == call.as_str()
            && x["action"]["confirmed"].is_null()
    })
    .await;
    let seq = a
        .dispatch(
            &chat,
            json!({"type": "chat/toolCallConfirmed", "turnId": turn, "toolCallId": call,
                "approved": true, "confirmed": "user-action"}),
        )
        .await;
    assert!(a.echo(seq).await.get("rejectionReason").is_none());
    let need = b
        .action("window B asked to run it", |x| {
            x["action"]["type"] == "session/inputNeededSet"
                && x["action"]["request"]["kind"] == "toolClientExecution"
        })
        .await;
    assert_eq!(need["action"]["request"]["clientId"], b_id.as_str());
    let seq = a
        .dispatch(&chat, tool_result(&turn, &call, "not mine"))
        .await;
    let echo = a.echo(seq).await;
    assert!(
        echo["rejectionReason"]
            .as_str()
            .unwrap_or_default()
            .contains("another client"),
        "{echo}"
    );
    let seq = b
        .dispatch(&chat, tool_result(&turn, &call, "opened a.ts"))
        .await;
    assert!(b.echo(seq).await.get("rejectionReason").is_none());
    let end = a.action("the second turn's end", turn_ended(&turn)).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");
    // One restart for the new tool, with the history intact.
    assert_eq!(handle.materializations(), 2);
    let sent: Vec<String> = e
        .fake
        .message_requests()
        .iter()
        .map(|r| r.json().to_string())
        .collect();
    let with_result = sent.iter().find(|r| r.contains("opened a.ts")).unwrap();
    assert!(with_result.contains("hello"), "the history went along");
    assert!(!sent.iter().any(|r| r.contains("not mine")));

    // Window A's own tool still goes to A, without another restart.
    let (turn, call) = client_tool_parked(&e, &mut a, &model, &chat).await;
    let seq = a
        .dispatch(&chat, tool_result(&turn, &call, "3 passed"))
        .await;
    assert!(a.echo(seq).await.get("rejectionReason").is_none());
    let end = a.action("the third turn's end", turn_ended(&turn)).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");
    assert_eq!(handle.materializations(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_that_comes_back_in_time_still_runs_its_waiting_tool() {
    let e = env().await;
    script_client_tool(&e, "All green.");
    let (mut c, model, chat) = session_ready(&e).await;
    let session = claude_host_protocol::uri::session_of_default_chat(&chat).unwrap();
    let (mut watcher, _) = vs_code(&e, &uuid::Uuid::new_v4().to_string()).await;
    watcher.ok("subscribe", json!({"channel": session})).await;
    let (turn, call) = client_tool_parked(&e, &mut c, &model, &chat).await;
    let client_id = c.client_id.clone();
    let seen_before = c.last_seen;
    drop(c);
    let gone = client_id.clone();
    watcher
        .action("the window leaving the session", |a| {
            a["action"]["type"] == "session/activeClientRemoved"
                && a["action"]["clientId"] == gone.as_str()
        })
        .await;

    // Back well within the grace: it reconnects, says it is active again, and answers.
    let mut c = VsCode::connect(&e.url, &client_id).await;
    let r = c
        .ok(
            "reconnect",
            json!({"channel": "ahp-root://", "clientId": client_id,
                "lastSeenServerSeq": seen_before, "subscriptions": [session, chat]}),
        )
        .await;
    assert_eq!(r["type"], "replay", "{r}");
    let seq = c
        .dispatch(
            &session,
            json!({"type": "session/activeClientSet", "activeClient": {"clientId": client_id,
                "tools": [{"name": "vscode_runTests", "description": "Runs tests"}]}}),
        )
        .await;
    assert!(c.echo(seq).await.get("rejectionReason").is_none());
    let seq = c
        .dispatch(&chat, tool_result(&turn, &call, "3 passed"))
        .await;
    let echo = c.echo(seq).await;
    assert!(echo.get("rejectionReason").is_none(), "{echo}");
    let end = c.action("the turn's end", turn_ended(&turn)).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");
    let last = e.fake.message_requests().pop().unwrap().json().to_string();
    assert!(last.contains("3 passed"), "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vs_code_confirms_a_subagents_tool_call_in_the_subagents_chat() {
    let e = env().await;
    e.fake.script_subagent_tool(
        "ask a helper",
        "SUBPROMPT make a file",
        (
            "Bash",
            json!({"command": "touch made.txt", "description": "Make a file"}),
        ),
        "Made it.",
        "The helper made it.",
    );
    let (mut c, model, chat) = session_ready(&e).await;
    let turn = start_turn(&mut c, &chat, "Please ask a helper", &model).await;
    let need = c
        .action("the subagent's confirmation", |a| {
            a["action"]["type"] == "session/inputNeededSet"
                && a["action"]["request"]["kind"] == "toolConfirmation"
        })
        .await;
    let request = need["action"]["request"].clone();
    let child = request["chat"].as_str().unwrap().to_owned();
    assert!(child.starts_with("ahp-chat://subagent/"), "{request}");
    let call = request["id"].as_str().unwrap().to_owned();
    let child_turn = request["turnId"].as_str().unwrap().to_owned();
    c.ok("subscribe", json!({"channel": child})).await;
    let confirm = json!({"type": "chat/toolCallConfirmed", "turnId": child_turn,
        "toolCallId": call, "approved": true, "confirmed": "user-action"});
    // On the parent's chat it is refused: the call is not there.
    let seq = c.dispatch(&chat, confirm.clone()).await;
    let echo = c.echo(seq).await;
    assert!(
        echo["rejectionReason"]
            .as_str()
            .unwrap_or_default()
            .contains("another chat"),
        "{echo}"
    );
    let seq = c.dispatch(&child, confirm).await;
    let echo = c.echo(seq).await;
    assert!(echo.get("rejectionReason").is_none(), "{echo}");
    assert_eq!(echo["channel"], child.as_str());
    let end = c.action("the turn's end", turn_ended(&turn)).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");
    assert!(e.work().join("made.txt").exists());
    let state = e.server_chat_state(&child).await;
    assert_eq!(
        tool_calls_of(&state["turns"][0]),
        [(call, "Bash".to_owned(), "completed".to_owned())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagent_calls_a_windows_tool_in_the_subagents_chat() {
    let e = env().await;
    e.fake.script_subagent_tool(
        "ask a helper",
        "SUBPROMPT check the tests",
        (
            "mcp__client__vscode_runTests",
            json!({"files": ["a.test.ts"]}),
        ),
        "They pass.",
        "The helper says they pass.",
    );
    let (mut c, model, chat) = session_ready(&e).await;
    let turn = start_turn(&mut c, &chat, "Please ask a helper", &model).await;
    let need = c
        .action("the confirmation in the subagent's chat", |a| {
            a["action"]["type"] == "session/inputNeededSet"
                && a["action"]["request"]["kind"] == "toolConfirmation"
        })
        .await;
    let child = need["action"]["request"]["chat"]
        .as_str()
        .unwrap()
        .to_owned();
    let call = need["action"]["request"]["id"].as_str().unwrap().to_owned();
    let child_turn = need["action"]["request"]["turnId"]
        .as_str()
        .unwrap()
        .to_owned();
    c.ok("subscribe", json!({"channel": child})).await;
    let seq = c
        .dispatch(
            &child,
            json!({"type": "chat/toolCallConfirmed", "turnId": child_turn,
                "toolCallId": call, "approved": true, "confirmed": "user-action"}),
        )
        .await;
    assert!(c.echo(seq).await.get("rejectionReason").is_none());
    let run = c
        .action("the request to run it", |a| {
            a["action"]["type"] == "session/inputNeededSet"
                && a["action"]["request"]["kind"] == "toolClientExecution"
        })
        .await;
    assert_eq!(run["action"]["request"]["chat"], child.as_str(), "{run}");
    assert_eq!(run["action"]["request"]["clientId"], c.client_id.as_str());
    // Answered on the parent's chat it is refused; on the subagent's it is taken.
    let seq = c
        .dispatch(&chat, tool_result(&child_turn, &call, "3 passed"))
        .await;
    let echo = c.echo(seq).await;
    assert!(
        echo["rejectionReason"]
            .as_str()
            .unwrap_or_default()
            .contains("another chat"),
        "{echo}"
    );
    let seq = c
        .dispatch(&child, tool_result(&child_turn, &call, "3 passed"))
        .await;
    let echo = c.echo(seq).await;
    assert!(echo.get("rejectionReason").is_none(), "{echo}");
    let end = c.action("the turn's end", turn_ended(&turn)).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");
    let sent: Vec<String> = e
        .fake
        .message_requests()
        .iter()
        .map(|r| r.json().to_string())
        .collect();
    assert!(sent.iter().any(|r| r.contains("3 passed")), "{sent:?}");
    let state = e.server_chat_state(&child).await;
    assert_eq!(
        tool_calls_of(&state["turns"][0]),
        [(
            call,
            "mcp__client__vscode_runTests".to_owned(),
            "completed".to_owned()
        )]
    );
}

/// The model ids VS Code's picker has (from `agents[].models`), with each one's `_meta`.
async fn picker_models(c: &mut VsCode) -> Vec<Value> {
    let root = c.ok("subscribe", json!({"channel": "ahp-root://"})).await;
    root["snapshot"]["state"]["agents"][0]["models"]
        .as_array()
        .expect("models after sign-in")
        .clone()
}

/// Lets `turn` run to its end, allowing every tool call it (or a subagent of it) asks about,
/// in the chat that asks; the turn's end.
async fn allow_all_until_the_end(c: &mut VsCode, turn: &str) -> Value {
    let mut allowed: Vec<String> = Vec::new();
    let mut subscribed: Vec<String> = Vec::new();
    loop {
        let next = c
            .action("a confirmation or the turn's end", |a| {
                turn_ended(turn)(a)
                    || (a["action"]["type"] == "session/inputNeededSet"
                        && a["action"]["request"]["kind"] == "toolConfirmation"
                        && !allowed
                            .iter()
                            .any(|id| a["action"]["request"]["id"] == id.as_str()))
            })
            .await;
        if turn_ended(turn)(&next) {
            return next;
        }
        let request = &next["action"]["request"];
        let chat = request["chat"].as_str().unwrap().to_owned();
        if chat.starts_with("ahp-chat://subagent/") && !subscribed.contains(&chat) {
            c.ok("subscribe", json!({"channel": chat})).await;
            subscribed.push(chat.clone());
        }
        let id = request["id"].as_str().unwrap().to_owned();
        let echo = c
            .dispatch_echo(
                &chat,
                json!({"type": "chat/toolCallConfirmed", "turnId": request["turnId"],
                    "toolCallId": id, "approved": true, "confirmed": "user-action"}),
            )
            .await;
        assert!(echo.get("rejectionReason").is_none(), "{echo}");
        allowed.push(id);
    }
}

/// VS Code runs Claude Code's core tools and a subagent on `model` (served on `endpoint`),
/// then the same session goes on with a Claude model, then with a Chat Completions model.
async fn vs_code_tool_loop_then_claude_then_another_model(model: &str, endpoint: &str) {
    let e = env().await;
    let file = e.work().join("a.txt");
    e.fake.script_tool_loop(&file);
    let once = |when: Match, reply: Reply| Rule {
        when,
        reply,
        times: Some(1),
    };
    e.fake.push(once(
        Match::LastUserContains("summarise".into()),
        Reply::text("CLAUDE: one loop, all green."),
    ));
    e.fake.push(once(
        Match::LastUserContains("anything else".into()),
        Reply::text("CHAT: nothing else."),
    ));
    let (mut c, claude, chat) = session_ready(&e).await;
    let models = picker_models(&mut c).await;
    let meta = |id: &str| {
        models
            .iter()
            .find(|m| m["id"] == id)
            .unwrap_or_else(|| panic!("{id} in the picker: {models:?}"))["_meta"]
            .clone()
    };
    assert_eq!(meta("gpt-5.4")["endpoint"], "/responses");
    assert_eq!(meta("gpt-4.1")["endpoint"], "/chat/completions");
    assert_eq!(meta("gpt-4.1")["premiumMultiplier"], 0.0);
    assert_eq!(meta(&claude)["endpoint"], "/v1/messages");

    let turn = start_turn(&mut c, &chat, "Please start the loop", model).await;
    let end = allow_all_until_the_end(&mut c, &turn).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "beta-two\n");
    let state = e.server_chat_state(&chat).await;
    let tools: Vec<String> = tool_calls_of(&state["turns"][0])
        .into_iter()
        .map(|(_, name, status)| format!("{name}:{status}"))
        .collect();
    assert_eq!(
        tools,
        [
            "Write:completed",
            "Edit:completed",
            "Bash:completed",
            "Read:completed",
            "Agent:completed"
        ],
        "{state}"
    );
    assert!(
        claude_host_testkit::turn_markdown(&state["turns"][0]).contains("LOOP-FINISHED"),
        "{state}"
    );

    let turn = start_turn(&mut c, &chat, "Please summarise", &claude).await;
    let end = c.action("the Claude turn's end", turn_ended(&turn)).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");

    let turn = start_turn(&mut c, &chat, "Is there anything else?", "gpt-4.1").await;
    let end = c
        .action("the Chat Completions turn's end", turn_ended(&turn))
        .await;
    assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");

    let calls: Vec<_> = e
        .fake
        .model_requests()
        .into_iter()
        .map(|r| {
            (
                r.path.split('?').next().unwrap_or_default().to_owned(),
                r.json()["model"].as_str().unwrap_or_default().to_owned(),
                r.last_user_text(),
                String::from_utf8_lossy(&r.body).into_owned(),
            )
        })
        .collect();
    let find = |text: &str| {
        calls
            .iter()
            .rev()
            .find(|(_, _, last, _)| last.contains(text))
            .unwrap_or_else(|| panic!("a call for {text:?}"))
    };
    let main_loop: Vec<_> = calls.iter().filter(|(p, ..)| p == endpoint).collect();
    assert!(main_loop.len() >= 6, "{calls:?}");
    assert!(main_loop.iter().all(|(_, m, ..)| m == model), "{calls:?}");
    let (p, m, _, body) = find("summarise");
    assert_eq!((p.as_str(), m.as_str()), ("/v1/messages", claude.as_str()));
    assert!(body.contains("LOOP-FINISHED"), "{body}");
    assert!(
        !body.contains("claude-host:"),
        "no other model's reasoning reaches Claude: {body}"
    );
    let (p, m, _, body) = find("anything else");
    assert_eq!((p.as_str(), m.as_str()), ("/chat/completions", "gpt-4.1"));
    assert!(
        body.contains("LOOP-FINISHED") && body.contains("CLAUDE: one loop"),
        "both earlier turns reach the third model: {body}"
    );
    assert_eq!(e.fake.header_violations(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vs_code_runs_the_core_tools_and_a_subagent_on_a_responses_model_then_claude_and_chat() {
    vs_code_tool_loop_then_claude_then_another_model("gpt-5.4", "/responses").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vs_code_runs_the_core_tools_and_a_subagent_on_a_chat_model_then_claude_and_back() {
    vs_code_tool_loop_then_claude_then_another_model("gpt-4.1", "/chat/completions").await;
}
