//! Turns rebuilt from a transcript on disk, for sessions the host did not run itself (or ran
//! before a restart), including ones created by the user's own `claude`.

use claude_host_sdk::transcripts::Transcript;
use serde_json::{Map, Value, json};

/// The completed turns of a transcript's main chain, as AHP `Turn` JSON, oldest first.
/// A turn starts at each human prompt; assistant text, thinking and tool calls, and the tool
/// results that answer them, make its response parts.
pub fn turns_from_transcript(t: &Transcript) -> Vec<Value> {
    let mut turns: Vec<Value> = Vec::new();
    let mut tools: Map<String, Value> = Map::new();
    for e in t.main_chain() {
        let ty = e.get("type").and_then(Value::as_str).unwrap_or("");
        let content = e.get("message").and_then(|m| m.get("content"));
        let uuid = e.get("uuid").and_then(Value::as_str).unwrap_or("");
        match (ty, content) {
            ("user", Some(c)) if is_prompt(e, c) => {
                turns.push(json!({"id": format!("restored-{uuid}"), "startedAt": e.get("timestamp"),
                    "message": {"text": prompt_text(c), "origin": {"kind": "user"}}, "responseParts": [], "state": "complete"}));
            }
            ("user", Some(Value::Array(blocks))) => {
                for b in blocks.iter().filter(|b| b["type"] == "tool_result") {
                    let id = b["tool_use_id"].as_str().unwrap_or("");
                    if let Some(call) = tools.get_mut(id) {
                        let text = match &b["content"] {
                            Value::String(s) => s.clone(),
                            Value::Array(p) => p
                                .iter()
                                .filter_map(|x| x["text"].as_str())
                                .collect::<Vec<_>>()
                                .join("\n"),
                            _ => String::new(),
                        };
                        let ok = !b["is_error"].as_bool().unwrap_or(false);
                        call["success"] = json!(ok);
                        call["content"] = json!([{"type": "text", "text": text}]);
                    }
                }
            }
            ("assistant", Some(Value::Array(blocks))) => {
                let Some(turn) = turns.last_mut() else {
                    continue;
                };
                for (i, b) in blocks.iter().enumerate() {
                    let id = format!("{}#{}#{i}", turn["id"].as_str().unwrap_or(""), uuid);
                    let part = match b["type"].as_str() {
                        Some("text") => json!({"kind": "markdown", "id": id, "content": b["text"]}),
                        Some("thinking") => {
                            json!({"kind": "reasoning", "id": id, "content": b["thinking"]})
                        }
                        Some("tool_use") => {
                            let call_id = b["id"].as_str().unwrap_or("").to_owned();
                            let name = b["name"].as_str().unwrap_or("tool");
                            let call = json!({"status": "completed", "toolCallId": call_id, "toolName": name, "displayName": name,
                                "invocationMessage": name, "toolInput": b["input"].to_string(), "success": true,
                                "pastTenseMessage": format!("Ran {name}"), "confirmed": "not-needed"});
                            tools.insert(call_id.clone(), call);
                            json!({"kind": "toolCall", "toolCall": {"toolCallId": call_id}})
                        }
                        _ => continue,
                    };
                    if let Some(parts) = turn["responseParts"].as_array_mut() {
                        parts.push(part);
                    }
                }
            }
            _ => {}
        }
    }
    // Tool calls were placeholders until their results were seen; fill them in.
    for turn in &mut turns {
        if let Some(parts) = turn["responseParts"].as_array_mut() {
            for p in parts.iter_mut().filter(|p| p["kind"] == "toolCall") {
                let id = p["toolCall"]["toolCallId"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned();
                if let Some(call) = tools.get(&id) {
                    p["toolCall"] = call.clone();
                }
            }
        }
    }
    turns
}

/// Whether a transcript entry is a human prompt (which starts a turn).
pub(crate) fn is_prompt_entry(e: &Map<String, Value>) -> bool {
    e.get("type").and_then(Value::as_str) == Some("user")
        && e.get("message")
            .and_then(|m| m.get("content"))
            .is_some_and(|c| is_prompt(e, c))
}

fn is_prompt(e: &Map<String, Value>, content: &Value) -> bool {
    if e.get("isMeta") == Some(&Value::Bool(true))
        || e.get("isSidechain") == Some(&Value::Bool(true))
    {
        return false;
    }
    match content {
        Value::String(s) => !s.starts_with('<'),
        Value::Array(blocks) => {
            !blocks.iter().any(|b| b["type"] == "tool_result") && !prompt_text(content).is_empty()
        }
        _ => false,
    }
}

fn prompt_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .filter(|t| !t.starts_with("<system-reminder>"))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}
