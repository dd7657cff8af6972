//! `subscribe` with `view.turns` and `fetchTurns`: a client that asks for the newest turns of
//! a long chat gets them with a cursor, pages the rest in through `chat/turnsLoaded` sent to
//! it alone, and ends with the state every other client holds.

use super::*;
use ahp_types::actions::{ChatTruncatedAction, StateAction};
use ahp_types::commands::SubscribeView;
use claude_host_testkit::long_transcript;

/// A restored session of a generated transcript of some 300 KB; its session and chat URIs.
async fn long_session(env: &Env, c: &Client) -> (String, String) {
    let cwd = env.work().display().to_string();
    let g = long_transcript::generate(&env.dir.path().join(".claude"), &cwd, 300_000).unwrap();
    let session = format!("claude:/{}", g.session_id);
    let (s, _sub) = c.subscribe(session.clone()).await.unwrap();
    let state = serde_json::to_value(s.snapshot.unwrap().state).unwrap();
    let chat = state["defaultChat"].as_str().unwrap().to_owned();
    (session, chat)
}

/// A chat subscription holding only the newest `n` turns.
async fn windowed(c: &Client, chat: &str, n: i64) -> Mirror {
    Mirror::subscribe_with(c, chat, Some(SubscribeView { turns: Some(n) })).await
}

/// The turn ids of a chat's state as the server holds it (`Env::server_chat_state`).
fn server_turn_ids(state: &Value) -> Vec<String> {
    state["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect()
}

fn turn_ids(state: &ahp_types::state::ChatState) -> Vec<String> {
    state.turns.iter().map(|t| t.id.clone()).collect()
}

async fn fetch(c: &Client, chat: &str, cursor: Option<&str>) -> Result<Value, ahp::ClientError> {
    c.request("fetchTurns", json!({"channel": chat, "cursor": cursor}))
        .await
}

fn invalid_params(r: Result<Value, ahp::ClientError>) -> String {
    match r {
        Err(ahp::ClientError::Rpc(e)) => {
            assert_eq!(e.code, -32602, "{e:?}");
            e.message
        }
        other => panic!("expected InvalidParams, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_asking_for_the_newest_turns_pages_in_the_rest_and_ends_with_the_whole_chat() {
    let env = env().await;
    let full_client = env.ready_client("whole").await;
    let (_, chat) = long_session(&env, &full_client).await;
    let whole = Mirror::subscribe(&full_client, &chat).await;
    let all = turn_ids(&whole.state);
    assert!(
        all.len() >= 8,
        "the generated session has {} turns",
        all.len()
    );
    assert_eq!(whole.state.turns_next_cursor, None, "no view: every turn");

    let c = env.ready_client("windowed").await;
    let mut m = windowed(&c, &chat, 3).await;
    assert_eq!(turn_ids(&m.state), all[all.len() - 3..], "the newest three");
    let first_cursor = m
        .state
        .turns_next_cursor
        .clone()
        .expect("a cursor to older turns");

    let bogus = invalid_params(fetch(&c, &chat, Some("nonsense")).await);
    assert!(bogus.contains("nonsense"), "{bogus}");

    // Page by page, each page put ahead of what the client holds, until no cursor is left.
    let mut cursor = Some(first_cursor.clone());
    let mut pages = 0;
    while let Some(at) = cursor.take() {
        let answer = fetch(&c, &chat, Some(&at)).await.unwrap();
        assert_eq!(answer, json!({}));
        let loaded = m.until("chat/turnsLoaded").await;
        let StateAction::ChatTurnsLoaded(a) = &loaded.action else {
            unreachable!()
        };
        assert!(
            !a.turns.is_empty() && a.turns.len() <= 3,
            "{} turns",
            a.turns.len()
        );
        assert_eq!(
            turn_ids(&m.state),
            all[all.len() - m.state.turns.len()..],
            "page {pages}: the newest turns, in order"
        );
        cursor = m.state.turns_next_cursor.clone();
        pages += 1;
    }
    assert_eq!(pages, (all.len() - 3).div_ceil(3));
    assert_eq!(
        serde_json::to_value(&m.state.turns).unwrap(),
        serde_json::to_value(&whole.state.turns).unwrap(),
        "the windowed client ends with the whole chat"
    );
    // Nothing older now: a used cursor is unknown, a fetch without one loads nothing.
    invalid_params(fetch(&c, &chat, Some(&first_cursor)).await);
    assert_eq!(fetch(&c, &chat, None).await.unwrap(), json!({}));
    // A client that holds every turn has no cursor to give.
    invalid_params(fetch(&full_client, &chat, Some(&first_cursor)).await);
    // Only a chat has turns.
    let root = invalid_params(fetch(&c, "ahp-root://", None).await);
    assert!(root.contains("not a chat"), "{root}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncation_to_a_turn_older_than_the_window_loads_it_first() {
    let env = env().await;
    let c = env.ready_client("windowed").await;
    let (_, chat) = long_session(&env, &c).await;
    let whole = env.server_chat_state(&chat).await;
    let all = server_turn_ids(&whole);
    let mut m = windowed(&c, &chat, 2).await;
    assert_eq!(turn_ids(&m.state), all[all.len() - 2..]);

    // Back to the second turn, which this client does not hold.
    c.dispatch(
        chat.clone(),
        StateAction::ChatTruncated(ChatTruncatedAction {
            turn_id: Some(all[1].clone()),
        }),
    )
    .await
    .unwrap();
    let loaded = m.next().await;
    assert_eq!(
        super::kind(&loaded),
        "chat/turnsLoaded",
        "the older turns come before the truncation"
    );
    let truncated = m.until("chat/truncated").await;
    assert_eq!(truncated.rejection_reason, None);
    assert_eq!(turn_ids(&m.state), all[..2], "what the session keeps");
    assert_eq!(m.state.turns_next_cursor, None);
    let kept = env.server_chat_state(&chat).await;
    assert_eq!(
        serde_json::to_value(&m.state.turns).unwrap(),
        kept["turns"],
        "the client's state is the server's"
    );
}

/// The newest `n` turns of `all` behind the host's marker, as a client that asked for no
/// window holds them; the marker's text.
fn assert_bounded(state: &ahp_types::state::ChatState, all: &[String], n: usize, session_id: &str) {
    let ids = turn_ids(state);
    assert_eq!(ids[0], claude_host_ahp::OLDER_TURNS_ID, "the marker first");
    assert_eq!(ids[1..], all[all.len() - n..], "then the newest {n}");
    let marker = &state.turns[0];
    let left_out = all.len() - n;
    assert_eq!(
        marker.message.text,
        format!("{left_out} earlier turns of this session")
    );
    let text = serde_json::to_string(&marker.response_parts).unwrap();
    assert!(
        text.contains(&format!("sessions show {session_id}")),
        "the marker says where the whole conversation is: {text}"
    );
    assert!(
        state.turns_next_cursor.is_some(),
        "AHP's own way to page the rest in"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_asking_for_no_window_gets_a_long_chats_newest_turns_behind_a_marker() {
    let env = env_with(HostConfig {
        chat_turns: Some(4),
        ..HostConfig::default()
    })
    .await;
    let c = env.ready_client("vscode-like").await;
    let (session, chat) = long_session(&env, &c).await;
    let session_id = session.trim_start_matches("claude:/").to_owned();
    let whole = env.server_chat_state(&chat).await;
    let all = server_turn_ids(&whole);
    assert!(
        all.len() > 6,
        "the generated session has {} turns",
        all.len()
    );

    // Subscribed as VS Code does, with no view.
    let mut m = Mirror::subscribe(&c, &chat).await;
    assert_bounded(&m.state, &all, 4, &session_id);
    // A page asked for lands ahead of the marker, which keeps the newest turns apart.
    let cursor = m.state.turns_next_cursor.clone();
    assert_eq!(
        fetch(&c, &chat, cursor.as_deref()).await.unwrap(),
        json!({})
    );
    m.until("chat/turnsLoaded").await;
    let ids = turn_ids(&m.state);
    assert_eq!(
        ids[..4],
        all[all.len() - 8..all.len() - 4],
        "the next four older"
    );
    assert_eq!(ids[4], claude_host_ahp::OLDER_TURNS_ID);
    // The session itself keeps every turn.
    assert_eq!(env.server_chat_state(&chat).await["turns"], whole["turns"]);
    // VS Code asks every turn it holds for its changes, the marker too: it has none.
    let marker_changes = format!(
        "{session}/changeset/turn/{}",
        claude_host_ahp::OLDER_TURNS_ID
    );
    let (s, _changes) = c.subscribe(marker_changes).await.unwrap();
    let changes = serde_json::to_value(s.snapshot.unwrap().state).unwrap();
    assert_eq!(changes["files"], json!([]), "{changes}");

    // A client that asks for a window gets it, with no marker; one larger than the chat gets
    // every turn.
    let asked = windowed(&env.ready_client("asked").await, &chat, 5).await;
    assert_eq!(turn_ids(&asked.state), all[all.len() - 5..]);
    let large = windowed(&env.ready_client("large").await, &chat, 1000).await;
    assert_eq!(turn_ids(&large.state), all);
    assert_eq!(large.state.turns_next_cursor, None);

    // Chats opened by `initialize` (initialSubscriptions) are bounded the same way.
    let h = env.client().await;
    let versions = ahp_types::version::SUPPORTED_PROTOCOL_VERSIONS
        .iter()
        .map(|v| (*v).to_owned())
        .collect();
    let init = h
        .initialize(
            "handshake".into(),
            versions,
            vec!["ahp-root://".into(), session.clone(), chat.clone()],
        )
        .await
        .unwrap();
    let snapshot = init
        .snapshots
        .into_iter()
        .find(|s| s.resource == chat)
        .expect("the chat's snapshot");
    let ahp_types::state::SnapshotState::Chat(state) = snapshot.state else {
        panic!("not a chat")
    };
    assert_bounded(&state, &all, 4, &session_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_bound_a_client_asking_for_no_window_gets_every_turn() {
    let env = env_with(HostConfig {
        chat_turns: None,
        ..HostConfig::default()
    })
    .await;
    let c = env.ready_client("all").await;
    let (_, chat) = long_session(&env, &c).await;
    let whole = env.server_chat_state(&chat).await;
    let m = Mirror::subscribe(&c, &chat).await;
    assert_eq!(
        serde_json::to_value(&m.state.turns).unwrap(),
        whole["turns"]
    );
    assert_eq!(m.state.turns_next_cursor, None);
}
