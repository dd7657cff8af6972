//! Sessions from an AHP client: auth, a streamed turn with a confirmed tool, fan-out to two
//! clients, reconnect with replay and with snapshots.

use super::*;
use ahp::ClientError;
use claude_host_testkit::fake::{Match, Reply};
use pretty_assertions::assert_eq;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_session_auth_turn_tool_confirmation_and_matching_state() {
    let e = env().await;
    let file = e.work().join("ahp.txt");
    e.fake.push(rule(
        Match::LastUserContains("write the file".into()),
        Reply::tool_use(
            "Write",
            json!({"file_path": file.to_str().unwrap(), "content": "from ahp"}),
        ),
    ));
    e.fake.push(rule(
        Match::HasToolResult,
        Reply::text_deltas(vec!["Wrote ".into(), "the ".into(), "file.".into()]),
    ));
    let c = e.client().await;
    let mut events = c.events();
    let init = initialize(&c, "client-a").await;
    // Told at once that a sign-in is needed.
    loop {
        let ev = tokio::time::timeout(WAIT, events.recv())
            .await
            .unwrap()
            .unwrap();
        if let SubscriptionEvent::AuthRequired(p) = ev.event {
            assert_eq!(p.resource.resource, GITHUB_RESOURCE);
            break;
        }
    }
    assert_eq!(init.protocol_version, ahp_types::version::PROTOCOL_VERSION);
    let root = serde_json::to_value(&init.snapshots[0].state).unwrap();
    assert_eq!(root["agents"][0]["provider"], "claude");
    assert!(root["agents"][0]["models"].as_array().unwrap().is_empty());

    // Before a token: AuthRequired with the resource metadata.
    let id = uuid::Uuid::new_v4();
    let refused = c
        .request::<_, Value>(
            "createSession",
            json!({"channel": format!("ahp-session:/{id}")}),
        )
        .await;
    match refused {
        Err(ClientError::Rpc(err)) => {
            assert_eq!(err.code, -32007);
            assert_eq!(
                err.data.unwrap()["resources"][0]["resource"],
                GITHUB_RESOURCE
            );
        }
        other => panic!("expected AuthRequired, got {other:?}"),
    }
    let mut root_sub = c.attach_subscription("ahp-root://").await;
    let _: Value = c
        .request(
            "authenticate",
            json!({"channel": "ahp-root://", "resource": GITHUB_RESOURCE, "token": GITHUB_TOKEN}),
        )
        .await
        .unwrap();
    // The root channel announces the models.
    loop {
        let ev = tokio::time::timeout(WAIT, root_sub.recv())
            .await
            .unwrap()
            .unwrap();
        if let SubscriptionEvent::Action(env) = ev {
            let a = serde_json::to_value(&env.action).unwrap();
            if a["type"] == "root/agentsChanged" {
                assert!(!a["agents"][0]["models"].as_array().unwrap().is_empty());
                break;
            }
        }
    }

    let (session, chat) = e.create_session(&c).await;
    let (snap, mut session_sub) = c.subscribe(session.clone()).await.unwrap();
    let s = serde_json::to_value(snap.snapshot.unwrap().state).unwrap();
    assert_eq!(s["defaultChat"], chat.as_str());
    assert_eq!(s["lifecycle"], "ready");

    let mut m = Mirror::subscribe(&c, &chat).await;
    let sent = c
        .dispatch(chat.clone(), user_turn("t1", "please write the file"))
        .await
        .unwrap();
    let started = m.until("chat/turnStarted").await;
    let origin = started.origin.expect("the echo carries its origin");
    assert_eq!(origin.client_id, "client-a");
    assert_eq!(origin.client_seq, sent.client_seq);
    // The tool call waits for the client.
    let ready = loop {
        let env = m.next().await;
        let a = serde_json::to_value(&env.action).unwrap();
        if a["type"] == "chat/toolCallReady" && a.get("confirmed").is_none_or(Value::is_null) {
            break a;
        }
    };
    let tool_call_id = ready["toolCallId"].as_str().unwrap().to_owned();
    let pending = m.json()["activeTurn"]["responseParts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["toolCall"]["toolCallId"] == tool_call_id.as_str())
        .unwrap()["toolCall"]["status"]
        .clone();
    assert_eq!(pending, "pending-confirmation");
    // The session says it waits for the user, and on which tool call.
    let needed = loop {
        let ev = tokio::time::timeout(WAIT, session_sub.recv())
            .await
            .unwrap()
            .unwrap();
        if let SubscriptionEvent::Action(env) = ev
            && kind(&env) == "session/inputNeededSet"
        {
            break serde_json::to_value(&env.action).unwrap();
        }
    };
    assert_eq!(needed["request"]["kind"], "toolConfirmation");
    assert_eq!(
        needed["request"]["toolCall"]["toolCallId"],
        tool_call_id.as_str()
    );
    c.dispatch(
        chat.clone(),
        serde_json::from_value(json!({"type": "chat/toolCallConfirmed", "turnId": "t1",
            "toolCallId": tool_call_id, "approved": true}))
        .unwrap(),
    )
    .await
    .unwrap();
    m.until("chat/turnComplete").await;
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "from ahp");
    assert!(
        e.server_session_state(&session)
            .await
            .input_needed
            .unwrap_or_default()
            .is_empty(),
        "nothing waits once the tool call is answered"
    );

    let deltas: Vec<String> = m
        .envelopes
        .iter()
        .map(|e| serde_json::to_value(&e.action).unwrap())
        .filter(|a| a["type"] == "chat/delta")
        .map(|a| a["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(deltas, ["Wrote ", "the ", "file."], "streamed per token");
    let seqs: Vec<u64> = m.envelopes.iter().map(|e| e.server_seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let turn = &m.json()["turns"][0];
    assert_eq!(turn["id"], "t1");
    assert_eq!(turn["state"], "complete");
    assert_eq!(
        m.json(),
        e.server_chat_state(&chat).await,
        "the client's reduced state is the server's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_see_the_same_actions_and_a_late_joiner_gets_a_snapshot() {
    let e = env().await;
    let (reply, gate) = Reply::gated("shared answer for everyone", 4);
    e.fake
        .push(rule(Match::LastUserContains("shared".into()), reply));
    let a = e.ready_client("a").await;
    let b = e.ready_client("b").await;
    let (_, chat) = e.create_session(&a).await;
    let mut ma = Mirror::subscribe(&a, &chat).await;
    let mut mb = Mirror::subscribe(&b, &chat).await;
    a.dispatch(chat.clone(), user_turn("t1", "shared please"))
        .await
        .unwrap();
    ma.until("chat/delta").await;
    // A third client joins mid-turn.
    let late = e.ready_client("late").await;
    let mut ml = Mirror::subscribe(&late, &chat).await;
    assert!(ml.json()["activeTurn"].is_object(), "joined mid-turn");
    gate.open();
    ma.until("chat/turnComplete").await;
    mb.until("chat/turnComplete").await;
    ml.until("chat/turnComplete").await;
    let seen = |m: &Mirror| -> Vec<(u64, Value)> {
        m.envelopes
            .iter()
            .map(|e| (e.server_seq, serde_json::to_value(&e.action).unwrap()))
            .collect()
    };
    assert_eq!(seen(&ma), seen(&mb), "identical action sequences");
    let server = e.server_chat_state(&chat).await;
    assert_eq!(ma.json(), server);
    assert_eq!(mb.json(), server);
    assert_eq!(
        ml.json(),
        server,
        "snapshot + live actions = the same state"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_drops_mid_turn_reconnects_with_a_replay_without_gap_or_duplicate() {
    let e = env().await;
    let (reply, gate) = Reply::gated("a long streamed answer that continues", 4);
    e.fake
        .push(rule(Match::LastUserContains("long".into()), reply));
    let watcher = e.ready_client("watcher").await;
    let (_, chat) = e.create_session(&watcher).await;
    let mut reference = Mirror::subscribe(&watcher, &chat).await;

    let dropper = e.ready_client("dropper").await;
    let mut before = Mirror::subscribe(&dropper, &chat).await;
    watcher
        .dispatch(chat.clone(), user_turn("t1", "a long one"))
        .await
        .unwrap();
    before.until("chat/delta").await;
    let last_seen = before.envelopes.last().unwrap().server_seq;
    dropper.shutdown().await;
    drop(dropper);
    // The turn goes on while the client is away.
    gate.open();
    reference.until("chat/turnComplete").await;

    let back = e.client().await;
    let result: Value = back
        .request(
            "reconnect",
            json!({"channel": "ahp-root://", "clientId": "dropper",
                   "lastSeenServerSeq": last_seen, "subscriptions": [chat, "ahp-chat:/gone"]}),
        )
        .await
        .unwrap();
    assert_eq!(result["type"], "replay", "{result}");
    assert_eq!(result["missing"], json!(["ahp-chat:/gone"]));
    let replayed: Vec<ActionEnvelope> = serde_json::from_value(result["actions"].clone()).unwrap();
    let mut seqs: Vec<u64> = before.envelopes.iter().map(|e| e.server_seq).collect();
    seqs.extend(replayed.iter().map(|e| e.server_seq));
    let expected: Vec<u64> = reference.envelopes.iter().map(|e| e.server_seq).collect();
    assert_eq!(seqs, expected, "no gap, no duplicate");
    let mut state = before.state.clone();
    for env in &replayed {
        ahp::reducers::apply_action_to_chat(&mut state, &env.action);
    }
    assert_eq!(
        serde_json::to_value(&state).unwrap(),
        e.server_chat_state(&chat).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_longer_than_the_replay_buffer_gets_snapshots() {
    // Sessions keep the agent's number of actions for replay.
    let e = env_full(HostConfig::default(), |a| a.replay_buffer = 4, |_| {}).await;
    e.fake.push(rule(
        Match::LastUserContains("many".into()),
        Reply::many_deltas(40),
    ));
    let c = e.ready_client("c").await;
    let (_, chat) = e.create_session(&c).await;
    let mut m = Mirror::subscribe(&c, &chat).await;
    let seq_before = e.host.server_seq();
    c.dispatch(chat.clone(), user_turn("t1", "many deltas"))
        .await
        .unwrap();
    m.until("chat/turnComplete").await;
    let back = e.client().await;
    let result: Value = back
        .request(
            "reconnect",
            json!({"channel": "ahp-root://", "clientId": "c",
                   "lastSeenServerSeq": seq_before, "subscriptions": [chat]}),
        )
        .await
        .unwrap();
    assert_eq!(result["type"], "snapshot");
    assert_eq!(
        result["snapshots"][0]["state"],
        e.server_chat_state(&chat).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_does_not_stall_the_others() {
    use futures_util::SinkExt;
    // The default queue: a reader that keeps up is never dropped; the stuck one is (see
    // the server's unit test for the queue limit itself).
    let e = env().await;
    e.fake.push(rule(
        Match::LastUserContains("flood".into()),
        Reply::many_deltas(300),
    ));
    let c = e.ready_client("reader").await;
    let (_, chat) = e.create_session(&c).await;
    // A raw connection that subscribes and then never reads again.
    let (mut stuck, _) = tokio_tungstenite::connect_async(&e.url).await.unwrap();
    for msg in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"channel": "ahp-root://",
            "clientId": "stuck", "protocolVersions": ["1.0.0"]}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "subscribe", "params": {"channel": chat}}),
    ] {
        stuck
            .send(tokio_tungstenite::tungstenite::Message::Text(
                msg.to_string().into(),
            ))
            .await
            .unwrap();
    }
    let mut m = Mirror::subscribe(&c, &chat).await;
    c.dispatch(chat.clone(), user_turn("t1", "flood me"))
        .await
        .unwrap();
    tokio::time::timeout(WAIT, m.until("chat/turnComplete"))
        .await
        .expect("the reading client is not held back");
    let deltas = m
        .envelopes
        .iter()
        .filter(|e| kind(e) == "chat/delta")
        .count();
    assert_eq!(deltas, 300);
    assert_eq!(m.json(), e.server_chat_state(&chat).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_listing_rejection_and_disposal() {
    let e = env().await;
    e.fake.push(rule(
        Match::LastUserContains("first".into()),
        Reply::text("first answer"),
    ));
    let c = e.ready_client("cfg").await;

    let resolved: Value = c
        .request(
            "resolveSessionConfig",
            json!({"channel": "ahp-root://", "provider": "claude", "config": {"permissionMode": "plan"}}),
        )
        .await
        .unwrap();
    let models = resolved["schema"]["properties"]["model"]["enum"]
        .as_array()
        .unwrap()
        .clone();
    assert!(!models.is_empty());
    assert_eq!(
        resolved["values"]["model"], models[0],
        "the default filled in"
    );
    assert_eq!(
        resolved["values"]["permissionMode"], "plan",
        "the client's value kept"
    );
    let completions: Value = c
        .request(
            "sessionConfigCompletions",
            json!({"channel": "ahp-root://", "property": "model", "query": "sonnet"}),
        )
        .await
        .unwrap();
    let items = completions["items"].as_array().unwrap();
    assert!(!items.is_empty());
    assert!(items.iter().all(|i| {
        i["label"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("sonnet")
    }));

    let (session, chat) = e.create_session(&c).await;
    let (_, mut session_sub) = c.subscribe(session.clone()).await.unwrap();
    let mut m = Mirror::subscribe(&c, &chat).await;
    c.dispatch(chat.clone(), user_turn("t1", "first question"))
        .await
        .unwrap();
    m.until("chat/turnComplete").await;

    // A model change through the session's config reaches the next model request.
    let sonnet = models
        .iter()
        .filter_map(Value::as_str)
        .find(|m| m.contains("sonnet"))
        .unwrap()
        .to_owned();
    c.dispatch(
        session.clone(),
        serde_json::from_value(
            json!({"type": "session/configChanged", "config": {"model": sonnet}}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    loop {
        let ev = tokio::time::timeout(WAIT, session_sub.recv())
            .await
            .unwrap()
            .unwrap();
        if let SubscriptionEvent::Action(env) = ev
            && kind(&env) == "session/configChanged"
        {
            assert!(env.rejection_reason.is_none(), "{env:?}");
            break;
        }
    }
    c.dispatch(chat.clone(), user_turn("t2", "second question"))
        .await
        .unwrap();
    m.until("chat/turnComplete").await;
    assert_eq!(
        e.fake.message_requests().last().unwrap().json()["model"],
        sonnet.as_str()
    );

    // An action the server cannot carry out comes back rejected, with a reason.
    c.dispatch(
        chat.clone(),
        serde_json::from_value(json!({"type": "chat/toolCallConfirmed", "turnId": "t2",
            "toolCallId": "toolu_nothing", "approved": true}))
        .unwrap(),
    )
    .await
    .unwrap();
    let rejected = m.until("chat/toolCallConfirmed").await;
    assert!(rejected.rejection_reason.is_some());
    assert_eq!(
        m.json(),
        e.server_chat_state(&chat).await,
        "a rejection changes nothing"
    );

    let listed: Value = c
        .request("listSessions", json!({"channel": "ahp-root://"}))
        .await
        .unwrap();
    let item = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["resource"] == session.as_str())
        .cloned()
        .expect("the session is listed");
    assert_eq!(item["provider"], "claude");
    assert_eq!(item["title"], "first question");

    let mut events = c.events();
    let _: Value = c
        .request("disposeSession", json!({"channel": session}))
        .await
        .unwrap();
    loop {
        let ev = tokio::time::timeout(WAIT, events.recv())
            .await
            .unwrap()
            .unwrap();
        if let SubscriptionEvent::SessionRemoved(p) = ev.event {
            assert_eq!(p.session, session);
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_messages_start_as_turns_in_order_after_the_running_one() {
    let e = env().await;
    let (reply, gate) = Reply::gated("the first answer takes a while", 4);
    e.fake
        .push(rule(Match::LastUserContains("first".into()), reply));
    e.fake.push(rule(
        Match::LastUserContains("second".into()),
        Reply::text("second answer"),
    ));
    e.fake.push(rule(
        Match::LastUserContains("third".into()),
        Reply::text("third answer"),
    ));
    let c = e.ready_client("queue").await;
    let (_, chat) = e.create_session(&c).await;
    let mut m = Mirror::subscribe(&c, &chat).await;
    c.dispatch(chat.clone(), user_turn("t1", "first"))
        .await
        .unwrap();
    m.until("chat/delta").await;
    for (id, text) in [("q1", "second"), ("q2", "third")] {
        c.dispatch(
            chat.clone(),
            serde_json::from_value(json!({"type": "chat/pendingMessageSet", "kind": "queued",
                "id": id, "message": {"text": text, "origin": {"kind": "user"}}}))
            .unwrap(),
        )
        .await
        .unwrap();
    }
    let set = m.until("chat/pendingMessageSet").await;
    assert!(set.rejection_reason.is_none(), "{set:?}");
    gate.open();
    let mut completed = 0;
    while completed < 3 {
        if kind(&m.next().await) == "chat/turnComplete" {
            completed += 1;
        }
    }
    let state = m.json();
    let prompts: Vec<&str> = state["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["message"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(prompts, ["first", "second", "third"]);
    assert!(
        state["queuedMessages"]
            .as_array()
            .is_none_or(|q| q.is_empty()),
        "{state}"
    );
    assert_eq!(state, e.server_chat_state(&chat).await);
}
