//! OpenAI JSON reply → Anthropic message (`claude_host_protocol::openai::translate_response`),
//! both dialects over the same body. Input: a JSON body.
//!
//! Checks: a translated reply is an Anthropic message (`type: message`, `role: assistant`, the
//! client's model, content blocks of known types with their fields, tool inputs as objects, a
//! stop reason, usage counts); a refused one is an error envelope with a type and message.

use crate::input;
use claude_host_protocol::openai::{Dialect, translate_response};
use serde_json::Value;

fn check_message(body: &[u8]) {
    let message: Value = match input::json_value(body) {
        Ok(v) => v,
        Err(e) => panic!("the translated reply is not JSON: {e}"),
    };
    assert_eq!(message["type"], "message");
    assert_eq!(message["role"], "assistant");
    assert_eq!(message["model"], "claude-fuzz-model");
    assert!(
        message["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("msg_"))
    );
    let stop = message["stop_reason"].as_str().unwrap_or_default();
    assert!(
        matches!(stop, "end_turn" | "tool_use" | "max_tokens" | "refusal"),
        "stop reason {stop:?}"
    );
    for key in ["input_tokens", "output_tokens", "cache_read_input_tokens"] {
        assert!(message["usage"][key].is_u64(), "usage.{key}");
    }
    let Some(content) = message["content"].as_array() else {
        panic!("content is not an array");
    };
    for block in content {
        match block["type"].as_str() {
            Some("text") => assert!(block["text"].is_string()),
            Some("thinking") => {
                assert!(block["thinking"].is_string());
                assert!(
                    block["signature"]
                        .as_str()
                        .is_some_and(|s| s.starts_with("claude-host:")),
                    "a foreign thinking block without our signature"
                );
            }
            Some("tool_use") => {
                assert!(block["id"].is_string() && block["name"].is_string());
                assert!(block["input"].is_object(), "tool input is not an object");
            }
            other => panic!("block type {other:?}"),
        }
    }
}

/// Runs one input.
pub fn run(data: &[u8]) {
    for dialect in [Dialect::ChatCompletions, Dialect::Responses] {
        match translate_response(dialect, data, "claude-fuzz-model") {
            Ok(body) => check_message(&body),
            Err(env) => {
                assert_eq!(env.envelope_type, "error");
                assert!(!env.error.kind.is_empty() && !env.error.message.is_empty());
            }
        }
    }
}
