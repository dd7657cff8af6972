//! Claude Code's stream-json frames (stdout and stdin of `--input-format stream-json
//! --output-format stream-json`) and control-protocol envelopes.
//!
//! Frames are kept **losslessly**: a [`Frame`] is the parsed JSON object plus a classification,
//! so a newer CLI's unknown frame types and fields pass through untouched.

use crate::frames::{
    AssistantFrame, CommandLifecycle, ResultFrame, SessionStateChanged, StreamEventFrame,
    SystemInit, TaskNotification, UserFrame,
};
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// What kind of frame a line is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameKind {
    /// `system` with this subtype (`init`, `status`, `api_retry`, `session_state_changed`, …).
    System(String),
    /// An assistant message (one content block per frame).
    Assistant,
    /// A user message (tool results, replays).
    User,
    /// The end of a turn.
    Result,
    /// A raw Anthropic SSE event (`--include-partial-messages`).
    StreamEvent,
    /// A control request (either direction).
    ControlRequest,
    /// A control response.
    ControlResponse,
    /// Withdraws a pending control request.
    ControlCancelRequest,
    /// Keep-alive; ignore.
    KeepAlive,
    /// Session mirror output.
    TranscriptMirror,
    /// Any other `type` (kept as is).
    Other(String),
}

/// One stream-json line.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// The classification.
    pub kind: FrameKind,
    /// The whole object as received.
    pub raw: Map<String, Value>,
}

/// A frame the host interprets, as its typed view; everything else is [`Typed::Other`].
#[derive(Debug, Clone, PartialEq)]
pub enum Typed {
    /// `system/init`.
    Init(SystemInit),
    /// `system/session_state_changed`.
    SessionState(SessionStateChanged),
    /// `system/task_notification`.
    TaskNotification(TaskNotification),
    /// `command_lifecycle`.
    CommandLifecycle(CommandLifecycle),
    /// `stream_event`.
    StreamEvent(StreamEventFrame),
    /// `assistant`.
    Assistant(AssistantFrame),
    /// `user`.
    User(UserFrame),
    /// `result`.
    Result(ResultFrame),
    /// Anything else (kept whole in the [`Frame`]).
    Other,
}

/// Why a line is not a frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Not JSON.
    #[error("malformed frame: {0}")]
    Malformed(String),
    /// JSON but not an object with a string `type`.
    #[error("frame without a type: {0}")]
    Untyped(String),
}

impl Frame {
    /// Parses one line (without its newline).
    pub fn parse(line: &str) -> Result<Frame, FrameError> {
        let value: Value =
            serde_json::from_str(line).map_err(|e| FrameError::Malformed(e.to_string()))?;
        Frame::from_value(value)
    }

    /// Classifies a parsed object.
    pub fn from_value(value: Value) -> Result<Frame, FrameError> {
        let Value::Object(raw) = value else {
            return Err(FrameError::Untyped("not a JSON object".into()));
        };
        let ty = raw
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| FrameError::Untyped("missing `type`".into()))?;
        let kind = match ty {
            "system" => FrameKind::System(
                raw.get("subtype")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
            ),
            "assistant" => FrameKind::Assistant,
            "user" => FrameKind::User,
            "result" => FrameKind::Result,
            "stream_event" => FrameKind::StreamEvent,
            "control_request" => FrameKind::ControlRequest,
            "control_response" => FrameKind::ControlResponse,
            "control_cancel_request" => FrameKind::ControlCancelRequest,
            "keep_alive" => FrameKind::KeepAlive,
            "transcript_mirror" => FrameKind::TranscriptMirror,
            other => FrameKind::Other(other.to_owned()),
        };
        Ok(Frame { kind, raw })
    }

    /// The typed view of a frame the host interprets. An error means a known frame whose
    /// fields have unexpected types; the raw frame is still whole.
    pub fn typed(&self) -> Result<Typed, serde_json::Error> {
        Ok(match &self.kind {
            FrameKind::System(sub) => match sub.as_str() {
                "init" => Typed::Init(SystemInit::deserialize(&self.raw)?),
                "session_state_changed" => {
                    Typed::SessionState(SessionStateChanged::deserialize(&self.raw)?)
                }
                "task_notification" => {
                    Typed::TaskNotification(TaskNotification::deserialize(&self.raw)?)
                }
                _ => Typed::Other,
            },
            FrameKind::Other(ty) if ty == "command_lifecycle" => {
                Typed::CommandLifecycle(CommandLifecycle::deserialize(&self.raw)?)
            }
            FrameKind::StreamEvent => Typed::StreamEvent(StreamEventFrame::deserialize(&self.raw)?),
            FrameKind::Assistant => Typed::Assistant(AssistantFrame::deserialize(&self.raw)?),
            FrameKind::User => Typed::User(UserFrame::deserialize(&self.raw)?),
            FrameKind::Result => Typed::Result(ResultFrame::deserialize(&self.raw)?),
            _ => Typed::Other,
        })
    }

    /// A top-level field.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.raw.get(key)
    }

    /// A top-level string field.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.raw.get(key).and_then(Value::as_str)
    }

    /// `session_id`, when present.
    pub fn session_id(&self) -> Option<&str> {
        self.str("session_id")
    }

    /// The frame as JSON.
    pub fn to_value(&self) -> Value {
        Value::Object(self.raw.clone())
    }

    /// For a control request: its id and the inner `request` object.
    pub fn control_request(&self) -> Option<(&str, &Map<String, Value>)> {
        if self.kind != FrameKind::ControlRequest {
            return None;
        }
        Some((self.str("request_id")?, self.get("request")?.as_object()?))
    }

    /// For a control response: `(request_id, Ok(response payload) | Err(error text))`.
    pub fn control_response(&self) -> Option<(&str, Result<Value, String>)> {
        if self.kind != FrameKind::ControlResponse {
            return None;
        }
        let resp = self.get("response")?.as_object()?;
        let id = resp.get("request_id")?.as_str()?;
        match resp.get("subtype").and_then(Value::as_str) {
            Some("success") => Some((id, Ok(resp.get("response").cloned().unwrap_or(Value::Null)))),
            _ => Some((
                id,
                Err(resp
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("control request failed")
                    .to_owned()),
            )),
        }
    }

    /// The text of a `result` frame.
    pub fn result_text(&self) -> Option<&str> {
        (self.kind == FrameKind::Result)
            .then(|| self.str("result"))
            .flatten()
    }
}

/// `{"type":"control_request","request_id":…,"request":{"subtype":…, …}}`.
pub fn control_request(request_id: &str, subtype: &str, fields: Value) -> Value {
    let mut request = match fields {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    request.insert("subtype".into(), Value::String(subtype.into()));
    json!({"type": "control_request", "request_id": request_id, "request": request})
}

/// A success control response.
pub fn control_success(request_id: &str, response: Value) -> Value {
    json!({"type": "control_response", "response": {"subtype": "success", "request_id": request_id, "response": response}})
}

/// An error control response.
pub fn control_error(request_id: &str, error: &str) -> Value {
    json!({"type": "control_response", "response": {"subtype": "error", "request_id": request_id, "error": error}})
}

/// A stdin user message.
pub fn user_message(content: Value, uuid: Option<&str>, priority: Option<&str>) -> Value {
    let mut m = json!({"type": "user", "session_id": "", "message": {"role": "user", "content": content}, "parent_tool_use_id": null});
    if let Some(u) = uuid {
        m["uuid"] = Value::String(u.into());
    }
    if let Some(p) = priority {
        m["priority"] = Value::String(p.into());
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn classifies_and_keeps_unknown_fields() {
        let f =
            Frame::parse(r#"{"type":"system","subtype":"init","session_id":"s","future":{"x":1}}"#)
                .unwrap();
        assert_eq!(f.kind, FrameKind::System("init".into()));
        assert_eq!(f.get("future").unwrap()["x"], 1);
        let f = Frame::parse(r#"{"type":"brand_new","a":[1]}"#).unwrap();
        assert_eq!(f.kind, FrameKind::Other("brand_new".into()));
        assert_eq!(
            f.to_value(),
            serde_json::json!({"type":"brand_new","a":[1]})
        );
        assert!(matches!(
            Frame::parse("{nope"),
            Err(FrameError::Malformed(_))
        ));
        assert!(matches!(Frame::parse("[1]"), Err(FrameError::Untyped(_))));
        assert!(matches!(
            Frame::parse(r#"{"x":1}"#),
            Err(FrameError::Untyped(_))
        ));
    }

    #[test]
    fn control_envelopes() {
        let f = Frame::parse(r#"{"type":"control_response","response":{"subtype":"success","request_id":"r1","response":{"model":"m"}}}"#).unwrap();
        assert_eq!(
            f.control_response(),
            Some(("r1", Ok(serde_json::json!({"model":"m"}))))
        );
        let f = Frame::parse(r#"{"type":"control_response","response":{"subtype":"error","request_id":"r2","error":"boom"}}"#).unwrap();
        assert_eq!(f.control_response(), Some(("r2", Err("boom".into()))));
        let req = control_request("x", "set_model", serde_json::json!({"model": "sonnet"}));
        assert_eq!(req["request"]["subtype"], "set_model");
        let f = Frame::from_value(req).unwrap();
        assert_eq!(f.control_request().unwrap().0, "x");
    }

    proptest! {
        #[test]
        fn arbitrary_and_truncated_input_never_panics(s in ".{0,300}") {
            let _ = Frame::parse(&s);
        }

        #[test]
        fn truncated_real_frames_are_errors_not_panics(cut in 0usize..120) {
            let line = r#"{"type":"assistant","message":{"id":"msg_1","content":[{"type":"text","text":"hé"}]},"session_id":"s"}"#;
            let end = (0..=cut.min(line.len())).rev().find(|i| line.is_char_boundary(*i)).unwrap_or(0);
            let r = Frame::parse(&line[..end]);
            if end < line.len() { prop_assert!(r.is_err()); } else { prop_assert!(r.is_ok()); }
        }
    }
}
