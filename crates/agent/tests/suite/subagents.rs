//! Subagents as child chats: live from the CLI's frames, and restored from their transcripts.

use super::*;
use ahp_types::state::ChatState;
use claude_host_agent::{ChannelCopy, ChannelKind, ChannelWant, WhichChat};
use claude_host_testkit::fake::{Match, Reply, Rule};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use std::time::Duration;

fn once(when: Match, reply: Reply) -> Rule {
    Rule {
        when,
        reply,
        times: Some(1),
    }
}

/// A main turn that hands work to a foreground subagent, which runs `ls` and reports.
fn script_helper(e: &Env) {
    std::fs::write(e.dir.path().join("work/a.txt"), "hello").unwrap();
    e.fake.script_subagent_tool(
        "ask a helper",
        "SUBPROMPT list the files",
        (
            "Bash",
            json!({"command": "ls", "description": "List files"}),
        ),
        "Found a.txt.",
        "The helper found a.txt.",
    );
}

/// Every action published on any channel of the session until the main chat's turn ends,
/// as (channel, action JSON).
async fn until_turn_end(
    sub: &mut claude_host_agent::SessionSubscription,
    chat: &str,
) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    loop {
        let e = tokio::time::timeout(Duration::from_secs(90), sub.recv())
            .await
            .expect("an action in time")
            .expect("the session is running");
        let SessionEvent::Action(p) = e else {
            panic!("the test subscriber fell behind");
        };
        let a = serde_json::to_value(p.action()).unwrap();
        let end = p.channel() == chat && a["type"] == "chat/turnComplete";
        out.push((p.channel().to_owned(), a));
        if end {
            return out;
        }
    }
}

fn position(log: &[(String, Value)], what: impl Fn(&str, &Value) -> bool) -> usize {
    log.iter()
        .position(|(c, a)| what(c, a))
        .unwrap_or_else(|| panic!("not found in {log:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagent_call_gets_a_child_chat_live_and_again_after_a_restart() {
    let e = env().await;
    script_helper(&e);
    let agent = e.agent(None).await;
    let s = agent.create_session(Default::default()).await.unwrap();
    let chat = s.chat_uri().to_owned();
    let (_, mut sub) = s.subscribe().await.unwrap();
    let sender = s.clone();
    let sent = tokio::spawn(async move { sender.send("Please ask a helper").await });
    let log = until_turn_end(&mut sub, &chat).await;
    sent.await.unwrap().unwrap();

    // The parent's call points at the child chat.
    let ready = &log[position(&log, |c, a| {
        c == chat && a["type"] == "chat/toolCallReady" && a["_meta"]["toolKind"] == "subagent"
    })]
    .1;
    let call = ready["toolCallId"].as_str().unwrap().to_owned();
    let child = claude_host_protocol::uri::subagent_chat_uri(s.resource(), &call);
    assert_eq!(ready["_meta"]["subagentChatUri"], child.as_str());
    assert_eq!(ready["_meta"]["subagentAgentName"], "general-purpose");
    assert_eq!(ready["_meta"]["subagentDescription"], "look around");
    let start = position(&log, |c, a| {
        c == chat && a["type"] == "chat/toolCallStart" && a["toolCallId"] == call.as_str()
    });
    assert_eq!(log[start].1["_meta"]["toolKind"], "subagent");

    // Listed in the session before anything happens in it.
    let added = position(&log, |_, a| a["type"] == "session/chatAdded");
    assert_eq!(log[added].1["summary"]["resource"], child.as_str());
    assert_eq!(
        log[added].1["summary"]["origin"],
        json!({"kind": "tool", "chat": chat, "toolCallId": call})
    );
    let first_child = position(&log, |c, _| c == child);
    assert!(added < first_child);

    // The child's one turn, live: its tool call is reported while the parent's call runs.
    let child_kinds: Vec<&str> = log
        .iter()
        .filter(|(c, _)| *c == child)
        .map(|(_, a)| a["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        child_kinds,
        [
            "chat/turnStarted",
            "chat/toolCallStart",
            "chat/toolCallReady",
            "chat/toolCallComplete",
            "chat/usage",
            "chat/turnComplete"
        ]
    );
    let child_started = &log[first_child].1;
    assert_eq!(child_started["turnId"], call.as_str());
    assert_eq!(child_started["message"]["text"], "SUBPROMPT list the files");
    let inner_done = position(&log, |c, a| {
        c == child && a["type"] == "chat/toolCallComplete"
    });
    let parent_done = position(&log, |c, a| {
        c == chat && a["type"] == "chat/toolCallComplete" && a["toolCallId"] == call.as_str()
    });
    assert!(inner_done < parent_done, "the child is not live");
    assert!(
        log[inner_done].1["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("a.txt"),
        "{}",
        log[inner_done].1
    );
    let usage = position(&log, |c, a| c == child && a["type"] == "chat/usage");
    assert!(log[usage].1["usage"]["inputTokens"].as_i64().unwrap() > 0);
    // The CLI's own account of the subagent comes along.
    let meta = &log[usage].1["usage"]["_meta"];
    assert!(meta["totalTokens"].as_i64().unwrap() > 0, "{meta}");
    assert_eq!(meta["toolUses"], 1, "{meta}");
    let content = log[parent_done].1["result"]["content"].as_array().unwrap();
    assert!(
        content
            .iter()
            .any(|c| c["type"] == "subagent" && c["resource"] == child.as_str()),
        "{content:?}"
    );

    // The snapshot has it too.
    let snap = s.snapshot().await.unwrap();
    assert_eq!(snap.session.chats.len(), 2);
    let live_child = snap.chat_state(&child).unwrap().clone();
    assert_eq!(live_child.turns.len(), 1);
    let live_turn = serde_json::to_value(&live_child.turns[0]).unwrap();
    assert_eq!(live_turn["state"], "complete");
    let live_calls = tool_calls(&live_turn);
    assert_eq!(live_calls.len(), 1, "{live_turn}");
    assert_eq!(live_calls[0].1, "Bash");
    // Reading one chat gives that chat's turns and nothing else.
    let ids = |c: &ChatState| c.turns.iter().map(|t| t.id.clone()).collect::<Vec<_>>();
    let read = s.read_chat(WhichChat::Uri(child.clone()), ids).await;
    assert_eq!(read.unwrap(), Some(ids(&live_child)));
    let read = s.read_chat(WhichChat::Default, ids).await;
    assert_eq!(read.unwrap(), Some(ids(&snap.chat)));
    let read = s.read_chat(WhichChat::Uri(chat.clone()), ids).await;
    assert_eq!(read.unwrap(), Some(ids(&snap.chat)));
    let read = s
        .read_chat(WhichChat::Uri(format!("{child}-none")), ids)
        .await;
    assert_eq!(read.unwrap(), None);
    // A snapshot of channels copies the ones asked for, of a chat its newest turns only.
    let want = |uri: &str, kind: ChannelKind, newest_turns| ChannelWant {
        uri: uri.to_owned(),
        kind,
        newest_turns,
    };
    let copies = s
        .channels(vec![
            want(&child, ChannelKind::Subagent(call.clone()), Some(0)),
            want(&chat, ChannelKind::Chat, Some(1)),
            want(&chat, ChannelKind::Chat, None),
            want(
                &format!("{child}-none"),
                ChannelKind::Subagent(call.clone()),
                None,
            ),
        ])
        .await
        .unwrap();
    assert_eq!(copies.seq, snap.seq);
    let [child_copy, newest, whole, none] = &copies.channels[..] else {
        panic!("{copies:?}");
    };
    let Some(ChannelCopy::Chat { state, older }) = child_copy else {
        panic!("{child_copy:?}");
    };
    assert_eq!(
        (state.resource.as_str(), state.turns.len(), *older),
        (child.as_str(), 0, 1)
    );
    assert_eq!(state.title, live_child.title);
    let all = ids(&snap.chat);
    assert!(!all.is_empty());
    let Some(ChannelCopy::Chat { state, older }) = newest else {
        panic!("{newest:?}");
    };
    assert_eq!(
        (ids(state), *older),
        (all[all.len() - 1..].to_vec(), all.len() - 1)
    );
    let Some(ChannelCopy::Chat { state, older: 0 }) = whole else {
        panic!("{whole:?}");
    };
    assert_eq!(ids(state), all);
    assert!(none.is_none());

    // After a restart, the same child turn comes back from the subagent's transcript.
    let id = s.id().to_owned();
    agent.shutdown().await;
    let agent = e.agent(None).await;
    let s = agent.open_session(&id).await.unwrap();
    let snap = s.snapshot().await.unwrap();
    let summary = snap
        .session
        .chats
        .iter()
        .find(|c| c.resource == child)
        .expect("the child chat is listed again");
    assert_eq!(
        serde_json::to_value(&summary.origin).unwrap(),
        json!({"kind": "tool", "chat": chat, "toolCallId": call})
    );
    let restored = snap.chat_state(&child).expect("the child chat is restored");
    assert_eq!(restored.turns.len(), 1);
    let turn = serde_json::to_value(&restored.turns[0]).unwrap();
    assert_eq!(turn["id"], call.as_str());
    assert_eq!(turn["message"]["text"], "SUBPROMPT list the files");
    assert_eq!(tool_calls(&turn), live_calls);
    let parent_call = serde_json::to_value(&snap.chat.turns[0]).unwrap()["responseParts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["toolCall"]["toolCallId"] == call.as_str())
        .unwrap()["toolCall"]
        .clone();
    assert_eq!(parent_call["_meta"]["subagentChatUri"], child.as_str());
    assert!(
        parent_call["content"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "subagent" && c["resource"] == child.as_str()),
        "{parent_call}"
    );
    agent.shutdown().await;
}

/// (tool call id, tool name, status) of a turn's tool calls.
fn tool_calls(turn: &Value) -> Vec<(String, String, String)> {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagent_of_a_subagent_is_a_child_of_its_parents_chat() {
    let e = env().await;
    std::fs::write(e.dir.path().join("work/a.txt"), "hello").unwrap();
    e.fake.push(once(
        Match::LastUserContains("ask a helper".into()),
        Reply::subagent_call("SUBPROMPT delegate again"),
    ));
    e.fake.push(once(
        Match::LastUserContains("SUBPROMPT".into()),
        Reply::subagent_call("NESTED list the files"),
    ));
    e.fake.push(once(
        Match::LastUserContains("NESTED".into()),
        Reply::tool_use(
            "Bash",
            json!({"command": "ls", "description": "List files"}),
        ),
    ));
    for text in ["Found a.txt.", "My helper found a.txt.", "Done."] {
        e.fake.push(once(Match::HasToolResult, Reply::text(text)));
    }
    let agent = e.agent(None).await;
    let s = agent.create_session(Default::default()).await.unwrap();
    let chat = s.chat_uri().to_owned();
    let (_, mut sub) = s.subscribe().await.unwrap();
    let sender = s.clone();
    let sent = tokio::spawn(async move { sender.send("Please ask a helper").await });
    let mut log = until_turn_end(&mut sub, &chat).await;
    sent.await.unwrap().unwrap();
    // The inner subagent's calls come from its transcript as it ends, which may be read
    // after the main turn has ended.
    let chats_ended = |log: &[(String, Value)]| {
        log.iter()
            .filter(|(c, a)| *c != chat && a["type"] == "chat/turnComplete")
            .count()
    };
    while chats_ended(&log) < 2 {
        let e = tokio::time::timeout(Duration::from_secs(30), sub.recv())
            .await
            .expect("the subagents end")
            .expect("the session is running");
        if let SessionEvent::Action(p) = e {
            log.push((
                p.channel().to_owned(),
                serde_json::to_value(p.action()).unwrap(),
            ));
        }
    }

    let added: Vec<&Value> = log
        .iter()
        .filter(|(_, a)| a["type"] == "session/chatAdded")
        .map(|(_, a)| &a["summary"])
        .collect();
    assert_eq!(added.len(), 2, "{log:#?}");
    let outer = added[0]["resource"].as_str().unwrap();
    let inner = added[1]["resource"].as_str().unwrap();
    assert_eq!(added[0]["origin"]["chat"], chat.as_str());
    assert_eq!(added[1]["origin"]["chat"], outer, "nested under its parent");
    // The outer child's call of the subagent tool points at the inner child.
    let ready = log
        .iter()
        .find(|(c, a)| c == outer && a["type"] == "chat/toolCallReady")
        .unwrap();
    assert_eq!(ready.1["_meta"]["subagentChatUri"], inner);
    let inner_kinds: Vec<&str> = log
        .iter()
        .filter(|(c, _)| c == inner)
        .map(|(_, a)| a["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        inner_kinds,
        [
            "chat/turnStarted",
            "chat/toolCallStart",
            "chat/toolCallReady",
            "chat/toolCallComplete",
            "chat/responsePart",
            "chat/usage",
            "chat/turnComplete"
        ]
    );
    // Its answer too: read once its transcript holds it (the CLI reports the end first).
    let answer = log
        .iter()
        .find(|(c, a)| c == inner && a["type"] == "chat/responsePart")
        .unwrap();
    assert!(answer.1.to_string().contains("Found a.txt."), "{answer:?}");
    let snap = s.snapshot().await.unwrap();
    assert_eq!(snap.session.chats.len(), 3);
    for uri in [outer, inner] {
        let st = snap.chat_state(uri).unwrap();
        assert_eq!(st.turns.len(), 1, "{uri}");
        assert!(st.active_turn.is_none(), "{uri}");
    }

    // Restored the same way.
    let id = s.id().to_owned();
    agent.shutdown().await;
    let agent = e.agent(None).await;
    let s = agent.open_session(&id).await.unwrap();
    let snap = s.snapshot().await.unwrap();
    let origin_of = |uri: &str| {
        serde_json::to_value(
            &snap
                .session
                .chats
                .iter()
                .find(|c| c.resource == uri)
                .unwrap_or_else(|| panic!("{uri} listed"))
                .origin,
        )
        .unwrap()
    };
    assert_eq!(origin_of(outer)["chat"], chat.as_str());
    assert_eq!(origin_of(inner)["chat"], outer);
    let restored = serde_json::to_value(&snap.chat_state(inner).unwrap().turns[0]).unwrap();
    assert_eq!(tool_calls(&restored).len(), 1, "{restored}");
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_subagent_keeps_its_chat_running_past_the_turn_that_started_it() {
    let e = env().await;
    std::fs::write(e.dir.path().join("work/a.txt"), "hello").unwrap();
    e.fake.push(once(
        Match::LastUserContains("ask a helper".into()),
        // Without `run_in_background: false` Claude Code runs the agent in the background.
        Reply::tool_use(
            "Agent",
            json!({"description": "look around", "prompt": "SUBPROMPT list the files",
                "subagent_type": "general-purpose"}),
        ),
    ));
    e.fake.push(once(
        Match::LastUserContains("SUBPROMPT".into()),
        Reply::tool_use(
            "Bash",
            json!({"command": "ls", "description": "List files"}),
        ),
    ));
    // The subagent's request after `ls` (its result names the file) and the main loop's
    // after the launch are told apart by what they carry.
    // It answers only once the main turn has ended, so the subagent outlives that turn.
    let (held, gate) = Reply::gated_blocks(
        vec![claude_host_testkit::fake::Block::Text(vec![
            "Found a.txt.".into(),
        ])],
        1,
    );
    e.fake
        .push(once(Match::LastUserContains("a.txt".into()), held));
    e.fake.push(Rule {
        when: Match::Always,
        reply: Reply::text("Noted."),
        times: None,
    });
    let agent = e.agent(None).await;
    let s = agent.create_session(Default::default()).await.unwrap();
    let chat = s.chat_uri().to_owned();
    let (_, mut sub) = s.subscribe().await.unwrap();
    let sender = s.clone();
    let sent = tokio::spawn(async move { sender.send("Please ask a helper").await });
    let mut log = until_turn_end(&mut sub, &chat).await;
    sent.await.unwrap().unwrap();
    gate.open();
    let child_ended = |log: &[(String, Value)]| {
        log.iter()
            .any(|(c, a)| *c != chat && a["type"] == "chat/turnComplete")
    };
    while !child_ended(&log) {
        let e = tokio::time::timeout(Duration::from_secs(60), sub.recv())
            .await
            .expect("the subagent ends")
            .expect("the session is running");
        if let SessionEvent::Action(p) = e {
            log.push((
                p.channel().to_owned(),
                serde_json::to_value(p.action()).unwrap(),
            ));
        }
    }
    let child = log
        .iter()
        .find(|(_, a)| a["type"] == "session/chatAdded")
        .map(|(_, a)| a["summary"]["resource"].as_str().unwrap().to_owned())
        .unwrap();
    // What the subagent says comes too (a background agent's text is printed).
    let kinds: Vec<&str> = log
        .iter()
        .filter(|(c, _)| *c == child)
        .map(|(_, a)| a["type"].as_str().unwrap())
        .filter(|k| !matches!(*k, "chat/responsePart" | "chat/delta"))
        .collect();
    assert_eq!(
        kinds,
        [
            "chat/turnStarted",
            "chat/toolCallStart",
            "chat/toolCallReady",
            "chat/toolCallComplete",
            "chat/usage",
            "chat/turnComplete"
        ],
        "{log:#?}"
    );
    // It outlived the turn that started it.
    let main_end = position(&log, |c, a| c == chat && a["type"] == "chat/turnComplete");
    let child_end = position(&log, |c, a| c == child && a["type"] == "chat/turnComplete");
    assert!(main_end < child_end, "{log:#?}");
    let snap = s.snapshot().await.unwrap();
    let st = snap.chat_state(&child).unwrap();
    assert!(st.active_turn.is_none());
    assert_eq!(st.turns.len(), 1);
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagents_tool_that_needs_the_user_is_asked_about_in_its_own_chat() {
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
    let agent = e.agent(None).await;
    let s = agent.create_session(Default::default()).await.unwrap();
    let sender = s.clone();
    let sent = tokio::spawn(async move { sender.send("Please ask a helper").await });
    let id = s
        .next_confirmation(Duration::from_secs(60))
        .await
        .expect("the subagent's Bash call asks");
    let snap = s.snapshot().await.unwrap();
    let child = &snap.subagents[0];
    let pending = serde_json::to_value(child.active_turn.as_ref().unwrap()).unwrap();
    let call = tool_calls(&json!({"responseParts": pending["responseParts"]}));
    assert_eq!(
        call,
        [(
            id.clone(),
            "Bash".to_owned(),
            "pending-confirmation".to_owned()
        )]
    );
    let waiting = serde_json::to_value(&snap.session.input_needed).unwrap();
    assert_eq!(waiting[0]["chat"], child.resource.as_str(), "{waiting}");
    let main = serde_json::to_value(&snap.chat).unwrap().to_string();
    assert!(!main.contains(&id), "not in the main chat: {main}");

    s.confirm_tool(&id, claude_host_agent::Confirmation::Approve)
        .await
        .unwrap();
    sent.await.unwrap().unwrap();
    assert!(e.dir.path().join("work/made.txt").exists());
    let snap = s.snapshot().await.unwrap();
    let turn = serde_json::to_value(&snap.subagents[0].turns[0]).unwrap();
    assert_eq!(
        tool_calls(&turn),
        [(id.clone(), "Bash".to_owned(), "completed".to_owned())]
    );
    assert!(
        !serde_json::to_value(&snap.chat)
            .unwrap()
            .to_string()
            .contains(&id)
    );
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncating_away_a_subagents_call_removes_its_chat() {
    let e = env().await;
    script_helper(&e);
    e.fake.push(Rule {
        when: Match::LastUserContains("first".into()),
        reply: Reply::text("First."),
        times: None,
    });
    let agent = e.agent(None).await;
    let s = agent.create_session(Default::default()).await.unwrap();
    s.send("first").await.unwrap();
    s.send("Please ask a helper").await.unwrap();
    let snap = s.snapshot().await.unwrap();
    assert_eq!(snap.subagents.len(), 1);
    let child = snap.subagents[0].resource.clone();
    let (_, mut sub) = s.subscribe().await.unwrap();

    // Keeping the first turn keeps nothing of the helper.
    s.truncate(1).await.unwrap();
    let snap = s.snapshot().await.unwrap();
    assert!(snap.subagents.is_empty());
    assert_eq!(snap.session.chats.len(), 1);
    assert!(snap.chat_state(&child).is_none());
    let removed = sub.drain().await.into_iter().any(|ev| match ev {
        SessionEvent::Action(p) => {
            let a = serde_json::to_value(p.action()).unwrap();
            a["type"] == "session/chatRemoved" && a["chat"] == child.as_str()
        }
        SessionEvent::Resync(_) => false,
    });
    assert!(removed);
    agent.shutdown().await;
}
