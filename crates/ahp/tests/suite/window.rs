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
    let all: Vec<String> = whole["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect();
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
