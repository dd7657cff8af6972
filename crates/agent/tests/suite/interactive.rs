//! Questions, plans, steering and mid-session changes, with the real CLI.

use super::*;
use ahp_types::state::{
    ChatInputAnswer, ChatInputAnswerValue, ChatInputAnswered, ChatInputResponseKind,
    ChatInputSelectedAnswerValue,
};
use claude_host_agent::{Confirmation, InputReply};
use claude_host_testkit::fake::{Match, Reply, Rule};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

async fn drain(rx: &mut Actions) -> Vec<Value> {
    rx.drain()
        .await
        .into_iter()
        .map(|a| serde_json::to_value(a).unwrap())
        .collect()
}

fn types(actions: &[Value]) -> Vec<&str> {
    actions
        .iter()
        .map(|a| a["type"].as_str().unwrap())
        .collect()
}

fn rule(when: Match, reply: Reply) -> Rule {
    Rule {
        when,
        reply,
        times: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_user_question_becomes_an_input_request_and_the_answers_reach_the_model() {
    let e = env().await;
    e.fake.push(rule(
        Match::LastUserContains("pick a fruit".into()),
        Reply::tool_use(
            "AskUserQuestion",
            json!({"questions": [{
                "question": "Which fruit should I use?", "header": "Fruit", "multiSelect": false,
                "options": [{"label": "Apple", "description": "red"},
                            {"label": "Banana", "description": "yellow"}]}]}),
        ),
    ));
    e.fake
        .push(rule(Match::HasToolResult, Reply::text("Banana noted.")));
    let s = Arc::new(e.session(e.opts()));
    let mut rx = Actions::of(&s).await;
    let turn = tokio::spawn({
        let s = s.clone();
        async move { s.send("pick a fruit for me").await }
    });
    let id = s.next_input(WAIT).await.expect("an input request");
    let state = serde_json::to_value(s.state().await).unwrap();
    let part = state["activeTurn"]["responseParts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["request"]["id"] == id.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("no input request part in {state}"));
    let q = &part["request"]["questions"][0];
    assert_eq!(q["kind"], "single-select");
    assert_eq!(q["message"], "Which fruit should I use?");
    assert_eq!(q["title"], "Fruit");
    assert_eq!(q["options"][1]["label"], "Banana");
    assert!(
        s.confirm_tool(&id, Confirmation::Approve).await.is_err(),
        "not a tool confirmation"
    );

    let answer = ChatInputAnswer::Submitted(ChatInputAnswered {
        value: ChatInputAnswerValue::Selected(ChatInputSelectedAnswerValue {
            value: "Banana".into(),
            freeform_values: None,
        }),
    });
    s.answer_input(
        &id,
        InputReply {
            response: ChatInputResponseKind::Accept,
            answers: HashMap::from([("0".to_owned(), answer)]),
        },
    )
    .await
    .unwrap();
    tokio::time::timeout(WAIT, turn)
        .await
        .unwrap()
        .unwrap()
        .unwrap();

    let sent = e.fake.message_requests().pop().unwrap().json();
    let result = sent["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .to_string();
    assert!(
        result.contains("tool_result") && result.contains("Banana"),
        "the answer did not reach the model: {result}"
    );
    let k = drain(&mut rx).await;
    let t = types(&k);
    let requested = t.iter().position(|x| *x == "chat/inputRequested").unwrap();
    let completed = t.iter().position(|x| *x == "chat/inputCompleted").unwrap();
    assert!(requested < completed, "{t:?}");
    assert_eq!(k[completed]["response"], "accept");
    let state = serde_json::to_value(s.state().await).unwrap();
    assert_eq!(state["turns"][0]["state"], "complete");
    assert_eq!(super::turn_markdown(&state["turns"][0]), "Banana noted.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_plan_switches_the_session_to_accept_edits() {
    let e = env().await;
    let file = e.dir.path().join("work/plan.txt");
    e.fake.push(rule(
        Match::LastUserContains("make a plan".into()),
        Reply::tool_use("ExitPlanMode", json!({"plan": "1. Write plan.txt"})),
    ));
    e.fake.push(rule(
        Match::HasToolResult,
        Reply::tool_use(
            "Write",
            json!({"file_path": file.to_str().unwrap(), "content": "planned"}),
        ),
    ));
    e.fake
        .push(rule(Match::HasToolResult, Reply::text("Plan carried out.")));
    let mut opts = e.opts();
    opts.permission_mode = Some("plan".into());
    let s = Arc::new(e.session(opts));
    let turn = tokio::spawn({
        let s = s.clone();
        async move { s.send("make a plan, then do it").await }
    });
    let id = s.next_confirmation(WAIT).await.expect("plan approval");
    let state = serde_json::to_value(s.state().await).unwrap();
    let tool = state["activeTurn"]["responseParts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["toolCall"]["toolCallId"] == id.as_str())
        .unwrap()["toolCall"]
        .clone();
    assert_eq!(tool["toolName"], "ExitPlanMode");
    assert_eq!(tool["status"], "pending-confirmation");
    assert_eq!(tool["invocationMessage"], "1. Write plan.txt");
    s.confirm_tool(&id, Confirmation::Approve).await.unwrap();
    // The Write that follows needs no confirmation any more: the turn ends on its own.
    tokio::time::timeout(WAIT, turn)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(s.pending_confirmations().is_empty());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "planned");
    assert_eq!(s.permission_mode().as_deref(), Some("acceptEdits"));
    let state = serde_json::to_value(s.state().await).unwrap();
    assert_eq!(state["turns"][0]["state"], "complete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_plan_tells_the_model_and_keeps_plan_mode() {
    let e = env().await;
    e.fake.push(rule(
        Match::LastUserContains("make a plan".into()),
        Reply::tool_use("ExitPlanMode", json!({"plan": "1. Delete everything"})),
    ));
    e.fake
        .push(rule(Match::HasToolResult, Reply::text("Why not?")));
    let mut opts = e.opts();
    opts.permission_mode = Some("plan".into());
    let s = Arc::new(e.session(opts));
    let turn = tokio::spawn({
        let s = s.clone();
        async move { s.send("make a plan").await }
    });
    let id = s.next_confirmation(WAIT).await.expect("plan approval");
    s.confirm_tool(&id, Confirmation::Deny).await.unwrap();
    tokio::time::timeout(WAIT, turn)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let last = e.fake.message_requests().pop().unwrap().json().to_string();
    assert!(last.contains("The user declined the plan"), "{last}");
    assert_eq!(s.permission_mode().as_deref(), Some("plan"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steering_message_lands_in_the_running_turn() {
    let e = env().await;
    let (reply, gate) = Reply::gated("working on a long answer", 4);
    e.fake
        .push(rule(Match::LastUserContains("start".into()), reply));
    e.fake.push(rule(
        Match::LastUserContains("bananas".into()),
        Reply::text("Bananas too."),
    ));
    let s = Arc::new(e.session(e.opts()));
    assert_eq!(
        s.steer("too early").await.unwrap(),
        None,
        "no turn to steer"
    );
    let mut rx = Actions::of(&s).await;
    let turn = tokio::spawn({
        let s = s.clone();
        async move { s.send("start the work").await }
    });
    // Steer while the answer streams: the CLI stops the answer there and asks again with
    // the steering message after the partial answer.
    let mut seen = Vec::new();
    while !seen.iter().any(|a: &Value| a["type"] == "chat/delta") {
        seen.push(serde_json::to_value(rx.recv().await).unwrap());
    }
    let id = s
        .steer("also mention bananas")
        .await
        .unwrap()
        .expect("a running turn");
    let state = serde_json::to_value(s.state().await).unwrap();
    assert_eq!(state["steeringMessage"]["id"], id.as_str());
    // The CLI takes the message into the running turn (its command starts) while the answer
    // is still held at the gate; only then does the answer go on. Opening the gate at once
    // raced the CLI's reading of its input: on a busy machine the answer could finish first,
    // and the message became a turn of its own.
    while !seen
        .iter()
        .any(|a: &Value| a["type"] == "chat/pendingMessageRemoved" && a["id"] == id.as_str())
    {
        let next = tokio::time::timeout(WAIT, rx.recv())
            .await
            .expect("the CLI takes the steering message");
        seen.push(serde_json::to_value(next).unwrap());
    }
    gate.open();
    tokio::time::timeout(WAIT, turn)
        .await
        .unwrap()
        .unwrap()
        .unwrap();

    let requests = e.fake.message_requests();
    assert_eq!(requests.len(), 2, "one follow-up request");
    let follow_up = requests[1].json()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(Value::to_string)
        .collect::<String>();
    assert!(
        follow_up.contains("start the work") && follow_up.contains("also mention bananas"),
        "the follow-up carries the prompt and the steering message"
    );
    seen.extend(drain(&mut rx).await);
    let t = types(&seen);
    let set = t
        .iter()
        .position(|x| *x == "chat/pendingMessageSet")
        .unwrap();
    let removed = t
        .iter()
        .position(|x| *x == "chat/pendingMessageRemoved")
        .unwrap();
    assert!(set < removed, "{t:?}");
    assert_eq!(
        t.iter().filter(|x| **x == "chat/turnComplete").count(),
        1,
        "one turn: {t:?}"
    );
    assert!(!t.contains(&"chat/turnCancelled"), "{t:?}");
    let state = serde_json::to_value(s.state().await).unwrap();
    assert_eq!(state["turns"].as_array().unwrap().len(), 1);
    assert_eq!(state["turns"][0]["state"], "complete");
    assert!(state.get("steeringMessage").is_none_or(Value::is_null));
    let last_text = state["turns"][0]["responseParts"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|p| p["kind"] == "markdown")
        .unwrap()["content"]
        .clone();
    assert_eq!(last_text, "Bananas too.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn effort_and_permission_mode_change_mid_session() {
    let e = env().await;
    let file = e.dir.path().join("work/mode.txt");
    e.fake.push(rule(
        Match::LastUserContains("write it".into()),
        Reply::tool_use(
            "Write",
            json!({"file_path": file.to_str().unwrap(), "content": "m"}),
        ),
    ));
    let s = e.session(e.opts());
    s.send("hello").await.unwrap();
    let effort = |i: usize| e.fake.message_requests()[i].json()["output_config"]["effort"].clone();
    assert_eq!(effort(0), "medium", "the CLI's default for this model");
    s.set_effort(Some("high")).await.unwrap();
    s.set_permission_mode("acceptEdits").await.unwrap();
    // With acceptEdits the Write runs without asking.
    tokio::time::timeout(WAIT, s.send("write it"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(effort(1), "high");
    assert!(file.exists());
    assert!(s.pending_confirmations().is_empty());
    assert_eq!(s.effort().as_deref(), Some("high"));
    assert_eq!(s.permission_mode().as_deref(), Some("acceptEdits"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_cli_inputs_restart_the_cli_on_the_same_session() {
    let e = env().await;
    e.fake.push(rule(
        Match::LastUserContains("kiwi".into()),
        Reply::text("Kiwi."),
    ));
    let s = e.session(e.opts());
    s.send("remember kiwi").await.unwrap();
    s.set_effort(Some("low")).await.unwrap();
    let tools = |i: usize| -> Vec<String> {
        e.fake.message_requests()[i].json()["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap_or("").to_owned())
            .collect()
    };
    assert!(tools(0).iter().any(|t| t == "Bash"));
    s.update_options(|o| o.disallowed_tools.push("Bash".into()))
        .await
        .unwrap();
    s.send("and now?").await.unwrap();
    assert_eq!(s.materializations(), 2, "a new CLI");
    assert!(
        !tools(1).iter().any(|t| t == "Bash"),
        "the new input applies"
    );
    let last = e.fake.message_requests()[1].json();
    assert!(
        last.to_string().contains("remember kiwi"),
        "same session, history kept"
    );
    assert_eq!(last["output_config"]["effort"], "low", "settings replayed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncate_keeps_the_first_turn_and_the_next_send_continues_from_it() {
    let e = env().await;
    e.fake.push(rule(
        Match::LastUserContains("turn one".into()),
        Reply::text("one done"),
    ));
    e.fake.push(rule(
        Match::LastUserContains("turn two".into()),
        Reply::text("two done"),
    ));
    let s = e.session(e.opts());
    s.send("turn one").await.unwrap();
    s.send("turn two").await.unwrap();
    let id = s.session_id().unwrap();
    let mut rx = Actions::of(&s).await;
    s.truncate(1).await.unwrap();
    assert_eq!(types(&drain(&mut rx).await), ["chat/truncated"]);
    let state = serde_json::to_value(s.state().await).unwrap();
    assert_eq!(state["turns"].as_array().unwrap().len(), 1);
    s.send("turn three").await.unwrap();
    assert_eq!(s.session_id().as_deref(), Some(id.as_str()), "same session");
    let sent = e.fake.message_requests().pop().unwrap().json().to_string();
    assert!(
        sent.contains("turn one") && !sent.contains("turn two") && sent.contains("turn three"),
        "truncated history: {sent}"
    );
    let state = serde_json::to_value(s.state().await).unwrap();
    let prompts: Vec<&str> = state["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["message"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(prompts, ["turn one", "turn three"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_denies_parked_questions_and_close_is_idempotent() {
    let e = env().await;
    let file = e.dir.path().join("work/never.txt");
    e.fake.push(rule(
        Match::LastUserContains("write".into()),
        Reply::tool_use(
            "Write",
            json!({"file_path": file.to_str().unwrap(), "content": "n"}),
        ),
    ));
    let s = Arc::new(e.session(e.opts()));
    let turn = tokio::spawn({
        let s = s.clone();
        async move { s.send("write a file").await }
    });
    let id = s.next_confirmation(WAIT).await.unwrap();
    s.abort().await.unwrap();
    tokio::time::timeout(WAIT, turn)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(!file.exists());
    assert!(s.pending_confirmations().is_empty());
    let state = serde_json::to_value(s.state().await).unwrap();
    assert_eq!(state["turns"][0]["state"], "cancelled", "{state}");
    let tool = state["turns"][0]["responseParts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["toolCall"]["toolCallId"] == id.as_str())
        .unwrap()
        .clone();
    assert_ne!(tool["toolCall"]["status"], "completed");
    let pgid = s.cli_pgid().await.unwrap();
    s.close().await;
    s.close().await;
    assert!(super::group_gone(pgid).await, "the CLI's group is gone");
    assert!(matches!(
        s.send("more").await,
        Err(claude_host_agent::ChatSessionError::Closed)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_claude_code_starts_on_its_own_becomes_its_own_turn() {
    let e = env().await;
    e.fake.push(rule(
        Match::LastUserContains("in the background".into()),
        Reply::tool_use(
            "Bash",
            json!({"command": "sleep 1; echo done-in-bg", "run_in_background": true,
                   "description": "nap"}),
        ),
    ));
    e.fake
        .push(rule(Match::HasToolResult, Reply::text("Started it.")));
    e.fake.push(rule(
        Match::LastUserContains("zebra".into()),
        Reply::text("Zebra answer."),
    ));
    e.fake.push(Rule {
        when: Match::Always,
        reply: Reply::text("The nap finished."),
        times: Some(3),
    });
    let mut opts = e.opts();
    // Root needs the sandbox marker for bypass; the test runs wherever CI runs.
    opts.permission_mode = Some("bypassPermissions".into());
    opts.extra_env.push(("IS_SANDBOX".into(), "1".into()));
    let s = e.session(opts);
    let mut rx = Actions::of(&s).await;
    s.send("run something in the background").await.unwrap();
    // When the task ends the CLI starts a turn by itself; it shows up live, with nothing
    // sent by the client.
    let mut adopted = None;
    loop {
        let v = serde_json::to_value(rx.recv().await).unwrap();
        if v["type"] == "chat/turnStarted" && v["message"]["origin"]["kind"] == "systemNotification"
        {
            adopted = v["turnId"].as_str().map(str::to_owned);
        }
        if v["type"] == "chat/turnComplete" && adopted.is_some() && v["turnId"] == json!(adopted) {
            break;
        }
    }
    assert_eq!(
        serde_json::to_value(s.state().await).unwrap()["turns"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    s.send("and now zebra").await.unwrap();
    let state = serde_json::to_value(s.state().await).unwrap();
    let turns = state["turns"].as_array().unwrap();
    let summary: Vec<(String, String, String)> = turns
        .iter()
        .map(|t| {
            let text = super::turn_markdown(t);
            (
                t["message"]["origin"]["kind"].as_str().unwrap().to_owned(),
                t["state"].as_str().unwrap().to_owned(),
                text,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("user".into(), "complete".into(), "Started it.".into()),
            (
                "systemNotification".into(),
                "complete".into(),
                "The nap finished.".into()
            ),
            ("user".into(), "complete".into(), "Zebra answer.".into()),
        ]
    );
}
