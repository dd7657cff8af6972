//! The session core seen from AHP clients: one total order, nothing lost by a slow reader,
//! and the defects of the old design (each test names the one it guards against).

use super::*;
use ahp_types::actions::StateAction;
use claude_host_testkit::fake::{Match, Reply, Rule};
use futures_util::{SinkExt, StreamExt};
use pretty_assertions::assert_eq;
use std::collections::{HashMap, HashSet};
use tokio_tungstenite::tungstenite::Message;

fn action(v: Value) -> StateAction {
    serde_json::from_value(v).unwrap()
}

type Raw =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A raw connection whose socket has a tiny receive buffer, so a pause in reading is felt
/// by the server at once.
async fn raw_client(url: &str) -> Raw {
    let addr: std::net::SocketAddr = url
        .trim_start_matches("ws://")
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket.connect(addr).await.unwrap();
    let (ws, _) =
        tokio_tungstenite::client_async(url, tokio_tungstenite::MaybeTlsStream::Plain(stream))
            .await
            .unwrap();
    ws
}

async fn send(ws: &mut Raw, msg: Value) {
    ws.send(Message::Text(msg.to_string().into()))
        .await
        .unwrap();
}

/// Reads until the response to request `id`, applying chat actions on the way.
async fn response(ws: &mut Raw, id: u64, m: &mut RawMirror) -> Value {
    loop {
        let msg = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("a frame in time")
            .expect("the connection is open")
            .unwrap();
        let Message::Text(t) = msg else { continue };
        let v: Value = serde_json::from_str(&t).unwrap();
        if v["id"] == id {
            return v;
        }
        m.apply(&v);
    }
}

/// A chat as a raw client reduces it.
struct RawMirror {
    chat: String,
    state: Option<ahp_types::state::ChatState>,
    last_seq: u64,
}

impl RawMirror {
    fn apply(&mut self, v: &Value) {
        if v["method"] != "action" {
            return;
        }
        let env: ahp_types::actions::ActionEnvelope =
            serde_json::from_value(v["params"].clone()).unwrap();
        self.last_seq = self.last_seq.max(env.server_seq);
        if env.channel != self.chat || env.rejection_reason.is_some() {
            return;
        }
        if let Some(s) = self.state.as_mut() {
            ahp::reducers::apply_action_to_chat(s, &env.action);
        }
    }

    fn seat(&mut self, snapshot: &Value) {
        self.state = Some(serde_json::from_value(snapshot["state"].clone()).unwrap());
        self.last_seq = self.last_seq.max(snapshot["fromSeq"].as_u64().unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_during_a_10000_delta_turn_then_resumes_ends_equal() {
    // Small buffers, so a client that stops reading is noticed within the turn.
    let e = env_serving(HostConfig::default(), |s| {
        s.outbound_queue = 256;
        s.socket_send_buffer = Some(32 * 1024);
    })
    .await;
    e.fake.push(rule(
        Match::LastUserContains("flood".into()),
        Reply::many_deltas(10_000),
    ));
    let c = e.ready_client("driver").await;
    let (session, chat) = e.create_session(&c).await;
    let id = session.trim_start_matches("ahp-session:/").to_owned();

    let mut ws = raw_client(&e.url).await;
    let mut m = RawMirror {
        chat: chat.clone(),
        state: None,
        last_seq: 0,
    };
    send(
        &mut ws,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "channel": "ahp-root://", "clientId": "slow", "protocolVersions": ["1.0.0"]}}),
    )
    .await;
    response(&mut ws, 1, &mut m).await;
    send(
        &mut ws,
        json!({"jsonrpc": "2.0", "id": 2, "method": "subscribe",
        "params": {"channel": chat}}),
    )
    .await;
    let r = response(&mut ws, 2, &mut m).await;
    m.seat(&r["result"]["snapshot"]);

    c.dispatch(chat.clone(), user_turn("t1", "flood me"))
        .await
        .unwrap();
    // The slow client reads nothing while the whole turn streams.
    let handle = e.host.agent().session(&id).unwrap();
    tokio::time::timeout(WAIT, async {
        let mut st = handle.watch_status();
        st.wait_for(|s| s.turn.is_some()).await.unwrap();
        st.wait_for(|s| s.turn.is_none()).await.unwrap();
    })
    .await
    .expect("the turn is not held back by the slow client");

    // It resumes: what the server kept sending, then (if it was dropped for being slow) a
    // reconnect that catches it up.
    let mut dropped = false;
    loop {
        match tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("a frame")
        {
            Some(Ok(Message::Text(t))) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                m.apply(&v);
                let done = m
                    .state
                    .as_ref()
                    .is_some_and(|s| s.turns.len() == 1 && s.active_turn.is_none());
                if done {
                    break;
                }
            }
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                dropped = true;
                break;
            }
            Some(Ok(_)) => {}
        }
    }
    if dropped {
        let mut ws = raw_client(&e.url).await;
        send(
            &mut ws,
            json!({"jsonrpc": "2.0", "id": 1, "method": "reconnect", "params": {
            "channel": "ahp-root://", "clientId": "slow", "lastSeenServerSeq": m.last_seq,
            "subscriptions": [chat]}}),
        )
        .await;
        let r = response(&mut ws, 1, &mut m).await;
        let result = &r["result"];
        if result["type"] == "replay" {
            for env in result["actions"].as_array().unwrap() {
                m.apply(&json!({"method": "action", "params": env}));
            }
        } else {
            assert_eq!(result["type"], "snapshot", "{result}");
            m.seat(&result["snapshots"][0]);
        }
    }
    assert!(
        dropped,
        "a client that stops reading is dropped, not waited for"
    );
    assert_eq!(
        serde_json::to_value(m.state.unwrap()).unwrap(),
        e.server_chat_state(&chat).await,
        "the slow client ends with the server's state"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_clients_dispatching_100_actions_each_get_every_one_back_in_one_order() {
    let e = env().await;
    let first = e.ready_client("c0").await;
    let (session, chat) = e.create_session(&first).await;
    let mut clients = vec![first];
    for i in 1..3 {
        clients.push(e.ready_client(&format!("c{i}")).await);
    }
    // Each client watches both channels; the client library drops events it cannot buffer,
    // so the buffers hold everything this test sends.
    let mut subs = Vec::new();
    for c in &clients {
        let (_, s) = c.subscribe(session.clone()).await.unwrap();
        let (_, ch) = c.subscribe(chat.clone()).await.unwrap();
        subs.push((s, ch));
    }
    let per_client: usize = 100;
    let send_all = |i: usize, c: &Client| {
        let (session, chat) = (session.clone(), chat.clone());
        let c = c.clone();
        async move {
            let mut seqs = Vec::new();
            for n in 0..per_client {
                let (channel, a) = match n % 4 {
                    0 => (
                        session.clone(),
                        json!({"type": "session/titleChanged", "title": format!("c{i} #{n}")}),
                    ),
                    1 => (
                        chat.clone(),
                        json!({"type": "chat/draftChanged",
                            "draft": {"text": format!("c{i} #{n}"), "origin": {"kind": "user"}}}),
                    ),
                    2 => (
                        chat.clone(),
                        json!({"type": "chat/toolCallConfirmed", "turnId": "none",
                            "toolCallId": format!("toolu_c{i}_{n}"), "approved": true}),
                    ),
                    _ => (
                        session.clone(),
                        json!({"type": "session/isReadChanged", "isRead": n % 8 == 3}),
                    ),
                };
                seqs.push(c.dispatch(channel, action(a)).await.unwrap().client_seq);
            }
            seqs
        }
    };
    // The three clients send at the same time.
    let handles: Vec<Vec<i64>> =
        futures_util::future::join_all(clients.iter().enumerate().map(|(i, c)| send_all(i, c)))
            .await;
    let total = per_client * 3;
    let mut seen: Vec<Vec<(u64, String, i64, bool)>> = Vec::new();
    for (s, ch) in &mut subs {
        let mut got = Vec::new();
        while got.len() < total {
            let ev = tokio::select! {
                ev = s.recv() => ev,
                ev = ch.recv() => ev,
            };
            let Some(SubscriptionEvent::Action(env)) = ev else {
                continue;
            };
            if let Some(o) = &env.origin {
                got.push((
                    env.server_seq,
                    o.client_id.clone(),
                    o.client_seq,
                    env.rejection_reason.is_some(),
                ));
            }
        }
        got.sort_by_key(|g| g.0);
        seen.push(got);
    }
    let first = &seen[0];
    let ids: HashSet<(String, i64)> = first.iter().map(|g| (g.1.clone(), g.2)).collect();
    assert_eq!(ids.len(), total, "every dispatch came back exactly once");
    for (i, h) in handles.iter().enumerate() {
        for seq in h {
            assert!(
                ids.contains(&(format!("c{i}"), *seq)),
                "c{i} #{seq} missing"
            );
        }
    }
    let rejected = first.iter().filter(|g| g.3).count();
    assert_eq!(
        rejected,
        total / 4,
        "the confirmations of nothing were refused"
    );
    assert!(first.windows(2).all(|w| w[0].0 < w[1].0), "one total order");
    for other in &seen[1..] {
        assert_eq!(other, first, "every client saw the same order");
    }
    // Within one client, its own dispatches keep their order.
    let mut by_client: HashMap<String, Vec<i64>> = HashMap::new();
    for g in first {
        by_client.entry(g.1.clone()).or_default().push(g.2);
    }
    for seqs in by_client.values() {
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bypass_permissions_cannot_be_switched_on_through_config_on_a_host_that_forbids_it() {
    let e = env().await;
    let c = e.ready_client("cfg").await;
    let (session, _) = e.create_session(&c).await;
    let (_, mut sub) = c.subscribe(session.clone()).await.unwrap();
    c.dispatch(
        session.clone(),
        action(json!({"type": "session/configChanged",
            "config": {"permissionMode": "bypassPermissions"}})),
    )
    .await
    .unwrap();
    let env = loop {
        let ev = tokio::time::timeout(WAIT, sub.recv())
            .await
            .unwrap()
            .unwrap();
        if let SubscriptionEvent::Action(env) = ev
            && kind(&env) == "session/configChanged"
        {
            break env;
        }
    };
    let reason = env.rejection_reason.expect("refused");
    assert!(reason.contains("permissionMode"), "{reason}");
    let state = e.server_session_state(&session).await;
    assert_eq!(
        state.config.unwrap().values["permissionMode"],
        "default",
        "nothing changed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_whose_cli_cannot_start_gets_its_echo_and_then_an_error() {
    let e = env_full(
        HostConfig::default(),
        |a| a.cli = "/nonexistent/claude-host-test/claude".into(),
        |_| {},
    )
    .await;
    let c = e.ready_client("nocli").await;
    let (_, chat) = e.create_session(&c).await;
    let mut m = Mirror::subscribe(&c, &chat).await;
    let sent = c
        .dispatch(chat.clone(), user_turn("t1", "will not start"))
        .await
        .unwrap();
    let echo = m.until("chat/turnStarted").await;
    assert!(echo.rejection_reason.is_none());
    assert_eq!(echo.origin.unwrap().client_seq, sent.client_seq);
    let err = m.until("chat/error").await;
    let a = serde_json::to_value(&err.action).unwrap();
    assert_eq!(a["part"]["error"]["errorType"], "cli_start_failed", "{a}");
    assert!(
        a["part"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/claude-host-test/claude"),
        "{a}"
    );
    assert_eq!(m.json()["turns"][0]["state"], "error");
    assert_eq!(m.json(), e.server_chat_state(&chat).await);
    // The chat is usable again (it fails the same way, visibly).
    c.dispatch(chat.clone(), user_turn("t2", "again"))
        .await
        .unwrap();
    let echo = m.until("chat/turnStarted").await;
    assert!(echo.rejection_reason.is_none(), "not stuck as running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_sessions_with_limit_zero_still_moves_its_cursor() {
    let e = env().await;
    e.fake.push(rule(Match::Always, Reply::text("ok")));
    let c = e.ready_client("pager").await;
    for i in 0..2 {
        let (_, chat) = e.create_session(&c).await;
        let mut m = Mirror::subscribe(&c, &chat).await;
        c.dispatch(chat.clone(), user_turn(&format!("t{i}"), "hello"))
            .await
            .unwrap();
        m.until("chat/turnComplete").await;
    }
    let mut cursor: Option<String> = None;
    let mut seen = Vec::new();
    for _ in 0..5 {
        let mut params = json!({"channel": "ahp-root://", "limit": 0});
        if let Some(c) = &cursor {
            params["cursor"] = json!(c);
        }
        let page: Value = c.request("listSessions", params).await.unwrap();
        let items = page["items"].as_array().unwrap();
        assert_eq!(items.len(), 1, "{page}");
        seen.push(items[0]["resource"].as_str().unwrap().to_owned());
        match page["nextCursor"].as_str() {
            Some(next) => {
                assert_ne!(Some(next.to_owned()), cursor, "the cursor moves");
                cursor = Some(next.to_owned());
            }
            None => break,
        }
    }
    assert_eq!(seen.len(), 2);
    assert_ne!(seen[0], seen[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_turn_while_a_tool_call_waits_clears_what_the_session_waits_for() {
    let e = env().await;
    let file = e.work().join("never.txt");
    e.fake.push(rule(
        Match::LastUserContains("write".into()),
        Reply::tool_use(
            "Write",
            json!({"file_path": file.to_str().unwrap(), "content": "n"}),
        ),
    ));
    let c = e.ready_client("canceller").await;
    let (session, chat) = e.create_session(&c).await;
    let (_, mut session_sub) = c.subscribe(session.clone()).await.unwrap();
    let mut m = Mirror::subscribe(&c, &chat).await;
    c.dispatch(chat.clone(), user_turn("t1", "write a file"))
        .await
        .unwrap();
    until_kind(&mut session_sub, "session/inputNeededSet", false).await;
    let sent = c
        .dispatch(
            chat.clone(),
            action(json!({"type": "chat/turnCancelled", "turnId": "t1", "duration": 10})),
        )
        .await
        .unwrap();
    let cancelled = m.until("chat/turnCancelled").await;
    assert!(cancelled.rejection_reason.is_none());
    assert_eq!(cancelled.origin.unwrap().client_seq, sent.client_seq);
    until_kind(&mut session_sub, "session/inputNeededRemoved", false).await;
    let state = m.json();
    assert_eq!(state["turns"][0]["state"], "cancelled");
    assert!(
        e.server_session_state(&session)
            .await
            .input_needed
            .unwrap_or_default()
            .is_empty()
    );
    assert_eq!(state, e.server_chat_state(&chat).await);
    assert!(!file.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_change_waiting_on_the_cli_does_not_hold_up_the_clients_other_requests() {
    let e = env().await;
    e.fake.push(rule(
        Match::LastUserContains("first".into()),
        Reply::text("first answer"),
    ));
    let c = e.ready_client("busy").await;
    let (session, chat) = e.create_session(&c).await;
    let (_, mut session_sub) = c.subscribe(session.clone()).await.unwrap();
    let mut m = Mirror::subscribe(&c, &chat).await;
    c.dispatch(chat.clone(), user_turn("t1", "first question"))
        .await
        .unwrap();
    m.until("chat/turnComplete").await;
    let resolved: Value = c
        .request(
            "resolveSessionConfig",
            json!({"channel": "ahp-root://", "provider": "claude"}),
        )
        .await
        .unwrap();
    let sonnet = resolved["schema"]["properties"]["model"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .find(|m| m.contains("sonnet"))
        .unwrap()
        .to_owned();
    // The CLI checks a new model with a request upstream before it answers: hold it there.
    let (reply, gate) = Reply::gated("ok", 0);
    e.fake.push(Rule {
        when: Match::LastUserContains("Hi".into()),
        reply,
        times: Some(1),
    });
    let before = e.fake.message_requests().len();
    c.dispatch(
        session.clone(),
        action(json!({"type": "session/configChanged", "config": {"model": sonnet}})),
    )
    .await
    .unwrap();
    e.fake
        .wait_message_requests(before + 1, WAIT)
        .await
        .unwrap();
    // While that round trip waits, the same client's requests are answered.
    let quick = Duration::from_secs(5);
    let _: Value =
        tokio::time::timeout(quick, c.request("ping", json!({"channel": "ahp-root://"})))
            .await
            .expect("ping answered while the model change waits")
            .unwrap();
    let listed: Value = tokio::time::timeout(
        quick,
        c.request("listSessions", json!({"channel": "ahp-root://"})),
    )
    .await
    .expect("listSessions answered while the model change waits")
    .unwrap();
    assert!(!listed["items"].as_array().unwrap().is_empty());
    assert_ne!(
        e.server_session_state(&session)
            .await
            .config
            .unwrap()
            .values["model"],
        sonnet.as_str(),
        "not applied before the CLI took it"
    );
    gate.open();
    let echo = until_kind(&mut session_sub, "session/configChanged", true).await;
    assert!(echo.rejection_reason.is_none(), "{echo:?}");
    assert_eq!(
        e.server_session_state(&session)
            .await
            .config
            .unwrap()
            .values["model"],
        sonnet.as_str()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_sign_in_stalls_no_other_request_of_any_client() {
    let e = env().await;
    let a = e.client().await;
    initialize(&a, "client-a").await;
    // GitHub takes its time to exchange the token.
    let gate = e.fake.hold_mints();
    let signing_in = tokio::spawn(async move {
        let r: Result<Value, _> = a
            .request(
                "authenticate",
                json!({"channel": "ahp-root://", "resource": GITHUB_RESOURCE, "token": GITHUB_TOKEN}),
            )
            .await;
        (a, r)
    });
    e.fake.wait_mints(1, WAIT).await.unwrap();
    let quick = Duration::from_secs(5);
    let b = tokio::time::timeout(quick, async {
        let b = e.client().await;
        initialize(&b, "client-b").await;
        b
    })
    .await
    .expect("another client connects and initializes meanwhile");
    let listed: Value = tokio::time::timeout(
        quick,
        b.request("listSessions", json!({"channel": "ahp-root://"})),
    )
    .await
    .expect("listSessions answered meanwhile")
    .unwrap();
    assert!(listed["items"].is_array());
    let _: Value =
        tokio::time::timeout(quick, b.request("ping", json!({"channel": "ahp-root://"})))
            .await
            .expect("ping answered meanwhile")
            .unwrap();
    assert!(!signing_in.is_finished(), "the sign-in is still waiting");
    gate.open();
    let (a, signed_in) = tokio::time::timeout(WAIT, signing_in)
        .await
        .unwrap()
        .unwrap();
    assert!(signed_in.is_ok(), "{signed_in:?}");
    // Signed in: a session can be created now.
    e.create_session(&a).await;
}
