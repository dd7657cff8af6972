//! Control-protocol messages (both directions of `--permission-prompt-tool=stdio` sessions):
//! the envelopes (`control_request`, `control_response`, `control_cancel_request`) and what
//! the host reads out of a `can_use_tool` request — the permission request, an
//! `AskUserQuestion` turned into an AHP input request and its answers written back into the
//! tool input, and the tool call's display. Input: NDJSON, one frame a line.
//!
//! Checks: a request or response rebuilt with the host's own builders reads back as the same
//! id and payload; the input request and the action carrying it survive JSON; answering every
//! question keeps the tool input an object with an `answers` object.

use crate::input;
use ahp_types::state::{
    ChatInputAnswer, ChatInputAnswerValue, ChatInputAnswered, ChatInputSelectedAnswerValue,
};
use claude_host_agent::{actions, questions};
use claude_host_protocol::frames::CanUseTool;
use claude_host_protocol::stream_json::{
    Frame, FrameKind, control_error, control_request, control_success,
};
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;

fn can_use_tool(id: &str, request: &serde_json::Map<String, Value>) {
    let Ok(req) = CanUseTool::deserialize(request) else {
        return;
    };
    input::assert_json_round_trip(&req, "can_use_tool");
    let _ = actions::display_name(&req.tool_name);
    let _ = actions::invocation(&req.tool_name, &req.input);
    let _ = actions::tool_kind(&req.tool_name);
    if req.tool_name != "AskUserQuestion" {
        return;
    }
    let asked = questions::request(id, &req.input);
    input::assert_json_round_trip(&asked, "an input request");
    input::assert_json_round_trip(&actions::input_requested(asked.clone()), "inputRequested");
    // Answer every question with its first option (or text), as a client would.
    let mut answers = HashMap::new();
    for q in asked.questions.iter().flatten() {
        let qv = serde_json::to_value(q).unwrap_or_default();
        let first = qv
            .pointer("/options/0/id")
            .and_then(Value::as_str)
            .unwrap_or("free text")
            .to_owned();
        answers.insert(
            qv.get("id")
                .and_then(Value::as_str)
                .unwrap_or("0")
                .to_owned(),
            ChatInputAnswer::Submitted(ChatInputAnswered {
                value: ChatInputAnswerValue::Selected(ChatInputSelectedAnswerValue {
                    value: first,
                    freeform_values: None,
                }),
            }),
        );
    }
    for a in answers.values() {
        let _ = questions::answer_text(a);
    }
    let updated = questions::answered_input(req.input.clone(), &answers);
    if req.input.is_object() {
        assert!(
            updated.get("answers").is_some_and(Value::is_object),
            "answered input lost its answers: {updated}"
        );
    }
}

/// Runs one input.
pub fn run(data: &[u8]) {
    for line in input::lines(data) {
        let Ok(frame) = Frame::parse(&line) else {
            continue;
        };
        if let Some((id, request)) = frame.control_request() {
            let subtype = request.get("subtype").and_then(Value::as_str).unwrap_or("");
            let rebuilt = control_request(id, subtype, Value::Object(request.clone()));
            let Ok(back) = Frame::from_value(rebuilt) else {
                panic!("a rebuilt control request is not a frame");
            };
            let Some((id2, request2)) = back.control_request() else {
                panic!("a rebuilt control request is not a control request");
            };
            assert_eq!(id2, id);
            if request.get("subtype").is_some_and(Value::is_string) {
                assert_eq!(request2, request, "a rebuilt control request changed");
            }
            if subtype == "can_use_tool" {
                can_use_tool(id, request);
            }
        }
        if let Some((id, result)) = frame.control_response() {
            let rebuilt = match &result {
                Ok(v) => control_success(id, v.clone()),
                Err(e) => control_error(id, e),
            };
            let Ok(back) = Frame::from_value(rebuilt) else {
                panic!("a rebuilt control response is not a frame");
            };
            assert_eq!(back.kind, FrameKind::ControlResponse);
            assert_eq!(
                back.control_response(),
                Some((id, result.clone())),
                "a rebuilt control response changed"
            );
        }
        if frame.kind == FrameKind::ControlCancelRequest {
            let _ = frame.str("request_id");
        }
    }
}
