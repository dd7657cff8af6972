//! Claude Code frames → AHP `chat/*` actions for one turn.
//!
//! Ordering rules kept (VS Code's invariants): a response part (markdown or reasoning) is
//! announced before any delta for it; `toolCallStart` comes before the tool call's other
//! actions; `usage` comes immediately before `turnComplete`. Part ids are
//! `<turnId>#<messageId>#<blockIndex>`.

use ahp_types::actions::StateAction;
use claude_host_protocol::stream_json::{Frame, FrameKind};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::time::Instant;

/// Builds an action from its wire JSON. The shapes below are fixed by this module, so a
/// failure is a bug here; it is logged and the action dropped rather than taking the host down.
pub fn action(value: Value) -> Option<StateAction> {
    match serde_json::from_value(value.clone()) {
        Ok(a) => Some(a),
        Err(e) => {
            tracing::error!(error = %e, action = %value, "could not build an AHP action");
            None
        }
    }
}

/// The current time as RFC 3339 (UTC, milliseconds).
pub fn now_rfc3339() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339_from_millis(now.as_millis() as i64)
}

/// A time in milliseconds since the epoch as RFC 3339 (UTC, milliseconds).
pub fn rfc3339_from_millis(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        ms.rem_euclid(1000)
    )
}

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Maps the frames of one turn.
#[derive(Debug)]
pub struct TurnMapper {
    turn_id: String,
    started: Instant,
    /// Message id of the API response being streamed.
    message_id: Option<String>,
    /// Messages whose blocks arrived as stream events (their `assistant` frames add nothing).
    streamed: HashSet<String>,
    /// Block index → tool call id, for the message being streamed.
    tool_blocks: HashMap<u64, String>,
    /// Tool call id → tool name.
    tools: HashMap<String, String>,
    finished: bool,
}

impl TurnMapper {
    /// Starts a turn: returns the mapper and the `chat/turnStarted` action.
    pub fn start(turn_id: &str, prompt: &str) -> (TurnMapper, Vec<StateAction>) {
        TurnMapper::start_from(turn_id, prompt, "user")
    }

    /// Starts a turn whose message came from `origin` (`user`, or `systemNotification` for a
    /// turn Claude Code started by itself).
    pub fn start_from(turn_id: &str, prompt: &str, origin: &str) -> (TurnMapper, Vec<StateAction>) {
        let m = TurnMapper {
            turn_id: turn_id.to_owned(),
            started: Instant::now(),
            message_id: None,
            streamed: HashSet::new(),
            tool_blocks: HashMap::new(),
            tools: HashMap::new(),
            finished: false,
        };
        let started = action(json!({
            "type": "chat/turnStarted", "turnId": turn_id, "startedAt": now_rfc3339(),
            "message": {"text": prompt, "origin": {"kind": origin}},
        }));
        (m, started.into_iter().collect())
    }

    /// The turn's id.
    pub fn turn_id(&self) -> &str {
        &self.turn_id
    }

    /// Whether the turn has ended (complete, cancelled or failed).
    pub fn finished(&self) -> bool {
        self.finished
    }

    fn part_id(&self, message_id: &str, index: u64) -> String {
        format!("{}#{message_id}#{index}", self.turn_id)
    }

    fn duration_ms(&self) -> i64 {
        self.started.elapsed().as_millis() as i64
    }

    /// The actions for one frame of this turn.
    pub fn map(&mut self, frame: &Frame) -> Vec<StateAction> {
        let t = self.turn_id.clone();
        let mut out: Vec<Value> = Vec::new();
        match &frame.kind {
            FrameKind::StreamEvent => {
                // Subagent streams (parent_tool_use_id set) are not part of the main response.
                if frame
                    .get("parent_tool_use_id")
                    .is_some_and(|p| !p.is_null())
                {
                    return Vec::new();
                }
                let Some(ev) = frame.get("event") else {
                    return Vec::new();
                };
                let index = ev.get("index").and_then(Value::as_u64).unwrap_or(0);
                match ev.get("type").and_then(Value::as_str) {
                    Some("message_start") => {
                        let id = ev
                            .pointer("/message/id")
                            .and_then(Value::as_str)
                            .unwrap_or("msg")
                            .to_owned();
                        self.streamed.insert(id.clone());
                        self.message_id = Some(id);
                        self.tool_blocks.clear();
                    }
                    Some("content_block_start") => {
                        let mid = self.message_id.clone().unwrap_or_else(|| "msg".into());
                        let block = ev.get("content_block").cloned().unwrap_or(Value::Null);
                        match block.get("type").and_then(Value::as_str) {
                            Some("text") => out.push(json!({"type": "chat/responsePart", "turnId": t,
                                "part": {"kind": "markdown", "id": self.part_id(&mid, index), "content": ""}})),
                            Some("thinking") => out.push(json!({"type": "chat/responsePart", "turnId": t,
                                "part": {"kind": "reasoning", "id": self.part_id(&mid, index), "content": ""}})),
                            Some("tool_use") => {
                                let id = block.get("id").and_then(Value::as_str).unwrap_or("").to_owned();
                                let name = block.get("name").and_then(Value::as_str).unwrap_or("").to_owned();
                                self.tool_blocks.insert(index, id.clone());
                                self.tools.insert(id.clone(), name.clone());
                                out.push(json!({"type": "chat/toolCallStart", "turnId": t, "toolCallId": id,
                                    "toolName": name, "displayName": display_name(&name)}));
                            }
                            _ => {}
                        }
                    }
                    Some("content_block_delta") => {
                        let mid = self.message_id.clone().unwrap_or_else(|| "msg".into());
                        let delta = ev.get("delta").cloned().unwrap_or(Value::Null);
                        match delta.get("type").and_then(Value::as_str) {
                            Some("text_delta") => out.push(json!({"type": "chat/delta", "turnId": t,
                                "partId": self.part_id(&mid, index), "content": delta.get("text").cloned().unwrap_or(json!(""))})),
                            Some("thinking_delta") => out.push(json!({"type": "chat/reasoning", "turnId": t,
                                "partId": self.part_id(&mid, index), "content": delta.get("thinking").cloned().unwrap_or(json!(""))})),
                            Some("input_json_delta") => {
                                if let Some(id) = self.tool_blocks.get(&index) {
                                    out.push(json!({"type": "chat/toolCallDelta", "turnId": t, "toolCallId": id,
                                        "content": delta.get("partial_json").cloned().unwrap_or(json!(""))}));
                                }
                            }
                            _ => {}
                        }
                    }
                    _ => {}
                }
            }
            FrameKind::Assistant => {
                if frame
                    .get("parent_tool_use_id")
                    .is_some_and(|p| !p.is_null())
                {
                    return Vec::new();
                }
                let msg = frame.get("message").cloned().unwrap_or(Value::Null);
                let mid = msg
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or("msg")
                    .to_owned();
                let streamed = self.streamed.contains(&mid);
                let blocks = msg
                    .get("content")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for (i, block) in blocks.iter().enumerate() {
                    match block.get("type").and_then(Value::as_str) {
                        // Without partial messages, whole blocks arrive here instead.
                        Some("text") if !streamed => out.push(json!({"type": "chat/responsePart", "turnId": t,
                            "part": {"kind": "markdown", "id": self.part_id(&mid, i as u64), "content": block.get("text").cloned().unwrap_or(json!(""))}})),
                        Some("thinking") if !streamed => out.push(json!({"type": "chat/responsePart", "turnId": t,
                            "part": {"kind": "reasoning", "id": self.part_id(&mid, i as u64), "content": block.get("thinking").cloned().unwrap_or(json!(""))}})),
                        Some("tool_use") => {
                            let id = block.get("id").and_then(Value::as_str).unwrap_or("").to_owned();
                            let name = block.get("name").and_then(Value::as_str).unwrap_or("").to_owned();
                            if !self.tools.contains_key(&id) {
                                self.tools.insert(id.clone(), name.clone());
                                out.push(json!({"type": "chat/toolCallStart", "turnId": t, "toolCallId": id,
                                    "toolName": name, "displayName": display_name(&name)}));
                            }
                            let input = block.get("input").cloned().unwrap_or(json!({}));
                            out.push(json!({"type": "chat/toolCallReady", "turnId": t, "toolCallId": id,
                                "invocationMessage": invocation(&name, &input), "toolInput": input.to_string(),
                                "confirmed": "not-needed"}));
                        }
                        _ => {}
                    }
                }
            }
            FrameKind::User => {
                let blocks = frame
                    .get("message")
                    .and_then(|m| m.get("content"))
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for b in blocks
                    .iter()
                    .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
                {
                    let id = b
                        .get("tool_use_id")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned();
                    let Some(name) = self.tools.get(&id).cloned() else {
                        continue;
                    };
                    let is_error = b.get("is_error").and_then(Value::as_bool).unwrap_or(false);
                    let text = match b.get("content") {
                        Some(Value::String(s)) => s.clone(),
                        Some(Value::Array(parts)) => parts
                            .iter()
                            .filter_map(|p| p.get("text").and_then(Value::as_str))
                            .collect::<Vec<_>>()
                            .join("\n"),
                        _ => String::new(),
                    };
                    out.push(json!({"type": "chat/toolCallComplete", "turnId": t, "toolCallId": id,
                        "result": {"success": !is_error, "pastTenseMessage": format!("{} {}", if is_error { "Failed:" } else { "Ran" }, display_name(&name)),
                                   "content": [{"type": "text", "text": text}]}}));
                }
            }
            FrameKind::Result => {
                self.finished = true;
                let usage = frame.get("usage").cloned().unwrap_or(Value::Null);
                let tokens = |k: &str| usage.get(k).and_then(Value::as_i64);
                let model = frame
                    .get("modelUsage")
                    .and_then(Value::as_object)
                    .and_then(|m| m.keys().next().cloned());
                let subtype = frame.str("subtype").unwrap_or("");
                let terminal = frame.str("terminal_reason").unwrap_or("");
                let duration = self.duration_ms();
                // An API failure ends with subtype "success" but `is_error: true`.
                let is_error = frame
                    .get("is_error")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                if subtype == "success" && !is_error {
                    out.push(json!({"type": "chat/usage", "turnId": t, "usage": {
                        "inputTokens": tokens("input_tokens").unwrap_or(0) + tokens("cache_read_input_tokens").unwrap_or(0) + tokens("cache_creation_input_tokens").unwrap_or(0),
                        "outputTokens": tokens("output_tokens"), "cacheReadTokens": tokens("cache_read_input_tokens"), "model": model,
                        "_meta": {"costUsd": frame.get("total_cost_usd"), "durationMs": frame.get("duration_ms")}}}));
                    out.push(
                        json!({"type": "chat/turnComplete", "turnId": t, "duration": duration}),
                    );
                } else if terminal.starts_with("aborted") {
                    out.push(
                        json!({"type": "chat/turnCancelled", "turnId": t, "duration": duration}),
                    );
                } else {
                    let message = frame
                        .get("errors")
                        .and_then(Value::as_array)
                        .and_then(|e| e.first())
                        .and_then(Value::as_str)
                        .or_else(|| frame.str("result"))
                        .unwrap_or(subtype)
                        .to_owned();
                    let error_type = frame
                        .str("terminal_reason")
                        .filter(|r| !r.is_empty())
                        .unwrap_or(if subtype == "success" {
                            "api_error"
                        } else {
                            subtype
                        });
                    out.push(
                        json!({"type": "chat/error", "turnId": t, "duration": duration,
                        "part": {"error": {"errorType": error_type, "message": message}}}),
                    );
                }
            }
            _ => {}
        }
        out.into_iter().filter_map(action).collect()
    }

    /// The turn was aborted and its CLI stopped before a `result`: a cancellation.
    pub fn cancel(&mut self) -> Vec<StateAction> {
        self.finished = true;
        action(json!({"type": "chat/turnCancelled", "turnId": self.turn_id, "duration": self.duration_ms()}))
            .into_iter()
            .collect()
    }

    /// The turn ended without a `result` (the CLI died): an error action.
    pub fn fail(&mut self, message: &str) -> Vec<StateAction> {
        self.finished = true;
        action(
            json!({"type": "chat/error", "turnId": self.turn_id, "duration": self.duration_ms(),
            "part": {"error": {"errorType": "cli_exited", "message": message}}}),
        )
        .into_iter()
        .collect()
    }
}

fn display_name(tool: &str) -> String {
    match tool.strip_prefix("mcp__") {
        Some(rest) => rest.split("__").last().unwrap_or(rest).to_owned(),
        None => tool.to_owned(),
    }
}

fn invocation(tool: &str, input: &Value) -> String {
    let arg = ["file_path", "command", "pattern", "url", "description"]
        .iter()
        .find_map(|k| input.get(*k).and_then(Value::as_str));
    match arg {
        Some(a) => format!(
            "{} {}",
            display_name(tool),
            a.chars().take(120).collect::<String>()
        ),
        None => display_name(tool),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_414), (2025, 11, 22));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert!(now_rfc3339().ends_with('Z'));
    }

    #[test]
    fn every_shape_builds() {
        let (mut m, started) = TurnMapper::start("t1", "hi");
        assert_eq!(started.len(), 1);
        let frames = [
            r#"{"type":"stream_event","event":{"type":"message_start","message":{"id":"m1"}}}"#,
            r#"{"type":"stream_event","event":{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}}"#,
            r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}}"#,
            r#"{"type":"stream_event","event":{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}}"#,
            r#"{"type":"stream_event","event":{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}}}"#,
            r#"{"type":"stream_event","event":{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"tu1","name":"Bash","input":{}}}}"#,
            r#"{"type":"stream_event","event":{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{}"}}}"#,
            r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"tu1","name":"Bash","input":{"command":"ls"}}]}}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu1","content":"a\nb"}]}}"#,
            r#"{"type":"result","subtype":"success","usage":{"input_tokens":3,"output_tokens":4},"modelUsage":{"claude-opus-5-5":{}},"total_cost_usd":0.1}"#,
        ];
        let kinds: Vec<String> = frames
            .iter()
            .flat_map(|f| m.map(&Frame::parse(f).unwrap()))
            .map(|a| {
                serde_json::to_value(&a).unwrap()["type"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "chat/responsePart",
                "chat/reasoning",
                "chat/responsePart",
                "chat/delta",
                "chat/toolCallStart",
                "chat/toolCallDelta",
                "chat/toolCallReady",
                "chat/toolCallComplete",
                "chat/usage",
                "chat/turnComplete"
            ]
        );
        assert!(m.finished());
        let mut m2 = TurnMapper::start("t2", "x").0;
        let err = m2.map(&Frame::parse(r#"{"type":"result","subtype":"error_during_execution","terminal_reason":"api_error","errors":["boom"]}"#).unwrap());
        assert_eq!(serde_json::to_value(&err[0]).unwrap()["type"], "chat/error");
        let cancelled = TurnMapper::start("t3", "x").0.map(&Frame::parse(r#"{"type":"result","subtype":"error_during_execution","terminal_reason":"aborted_streaming"}"#).unwrap());
        assert_eq!(
            serde_json::to_value(&cancelled[0]).unwrap()["type"],
            "chat/turnCancelled"
        );
        assert_eq!(m2.fail("gone").len(), 1);
    }
}
