//! Claude Code's stream-json stdout, end to end on the host side: the SDK's line framing
//! (bounded line length, any read size), `Frame::parse` and the typed views, and the agent's
//! `TurnMapper` turning frames into AHP actions that the AHP chat reducer applies. Input = 1
//! read-size byte + 1 line-limit byte + 1 flag byte + NDJSON.
//!
//! Checks: framing gives exactly the input's lines (oversize ones reported, not returned)
//! whatever the read size; a frame survives JSON → `Frame` → JSON → `Frame`; a typed view read
//! back from its own JSON is the same view; every action the mapper makes survives the JSON
//! trip a client makes; the chat state stays serializable and reads back equal.

use crate::input;
use ahp::reducers::apply_action_to_chat;
use ahp_types::state::ChatState;
use claude_host_agent::actions;
use claude_host_agent::mapper::TurnMapper;
use claude_host_protocol::stream_json::{Frame, Typed};
use claude_host_sdk::fuzzing::stdout_lines;

/// An empty chat, as a session starts one.
pub(crate) fn empty_chat() -> ChatState {
    claude_host_agent::empty_chat("ahp-session://fuzz/chat", "")
}

fn typed_round_trip(t: &Typed) {
    match t {
        Typed::Init(x) => input::assert_json_round_trip(x, "system/init"),
        Typed::SessionState(x) => input::assert_json_round_trip(x, "session_state_changed"),
        Typed::TaskNotification(x) => input::assert_json_round_trip(x, "task_notification"),
        Typed::CommandLifecycle(x) => input::assert_json_round_trip(x, "command_lifecycle"),
        Typed::StreamEvent(x) => input::assert_json_round_trip(x, "stream_event"),
        Typed::Assistant(x) => input::assert_json_round_trip(x, "assistant"),
        Typed::User(x) => input::assert_json_round_trip(x, "user"),
        Typed::Result(x) => input::assert_json_round_trip(x, "result"),
        Typed::Other => {}
    }
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let (ctl, stream) = input::split(data, 3);
    let read_size = usize::from(ctl.first().copied().unwrap_or(0)) + 1;
    let limit = match ctl.get(1).copied().unwrap_or(255) {
        255 => 1 << 20,
        n => usize::from(n) * 4,
    };
    let flags = ctl.get(2).copied().unwrap_or(0);

    // Framing: the reference is a plain split on newlines.
    let lines = stdout_lines(stream, read_size, limit);
    let mut pieces: Vec<&[u8]> = stream.split(|b| *b == b'\n').collect();
    if pieces.last().is_some_and(|l| l.is_empty()) {
        pieces.pop();
    }
    let reference: Vec<Option<String>> = pieces
        .iter()
        .map(|l| (l.len() <= limit).then(|| String::from_utf8_lossy(l).into_owned()))
        .collect();
    assert_eq!(
        lines, reference,
        "framing differs from splitting on newlines"
    );

    let mut chat = empty_chat();
    let mut mapper = if flags & 1 == 1 {
        TurnMapper::for_subagent("toolu_fuzz")
    } else {
        TurnMapper::new("turn-1")
    };
    let start = actions::turn_started(
        mapper.turn_id(),
        actions::message("hi", ahp_types::state::MessageKind::User),
        None,
    );
    apply_action_to_chat(&mut chat, &start);
    for line in lines.into_iter().flatten() {
        if line.trim().is_empty() {
            continue;
        }
        let Ok(frame) = Frame::parse(&line) else {
            continue;
        };
        let again = Frame::parse(&frame.to_value().to_string());
        assert_eq!(again.as_ref(), Ok(&frame), "a frame changed through JSON");
        let Ok(typed) = frame.typed() else {
            continue;
        };
        typed_round_trip(&typed);
        for action in mapper.map(&typed) {
            input::assert_json_round_trip(&action, "a mapped action");
            apply_action_to_chat(&mut chat, &action);
        }
    }
    let last = match flags >> 1 & 3 {
        0 => mapper.complete(),
        1 => mapper.cancel(),
        2 => mapper.fail("error", "fuzz"),
        _ => Vec::new(),
    };
    for action in last {
        input::assert_json_round_trip(&action, "a closing action");
        apply_action_to_chat(&mut chat, &action);
    }
    input::assert_json_round_trip(&chat, "the chat state");
}
