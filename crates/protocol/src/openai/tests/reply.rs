//! JSON (non-streaming) replies.

use super::*;
use pretty_assertions::assert_eq;

fn reply(dialect: Dialect, body: Value) -> Result<Value, crate::error::ErrorEnvelope> {
    translate_response(dialect, body.to_string().as_bytes(), "claude-client-model")
        .map(|b| serde_json::from_slice(&b).unwrap())
}

fn usage(input: u64, output: u64, cached: u64) -> Value {
    json!({"input_tokens": input, "output_tokens": output, "cache_read_input_tokens": cached,
           "cache_creation_input_tokens": 0})
}

#[test]
fn chat_reply_with_reasoning_text_and_tool_calls() {
    let body = json!({"id": "chatcmpl-9", "object": "chat.completion", "created": 1, "model": "gemini-3-pro",
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Checking.",
             "reasoning_text": "think", "reasoning_opaque": "OPQ"}},
            {"index": 1, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
             "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "Read", "arguments": "{\"file_path\": \"/a\"}"}},
                            {"id": "call_2", "type": "function", "function": {"name": "Bash", "arguments": "not json"}}]}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
                  "prompt_tokens_details": {"cached_tokens": 60}}});
    assert_eq!(
        reply(Dialect::ChatCompletions, body).unwrap(),
        json!({"id": "msg_chatcmpl-9", "type": "message", "role": "assistant", "model": "claude-client-model",
            "content": [
                {"type": "thinking", "thinking": "think", "signature": "claude-host:chat:OPQ"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "call_1", "name": "Read", "input": {"file_path": "/a"}},
                {"type": "tool_use", "id": "call_2", "name": "Bash", "input": {}}],
            "stop_reason": "tool_use", "stop_sequence": null, "usage": usage(40, 20, 60)})
    );
}

#[test]
fn chat_reply_stops_and_errors() {
    let plain = |finish: &str, message: Value| {
        reply(
            Dialect::ChatCompletions,
            json!({"id": "c", "choices": [{"index": 0, "finish_reason": finish, "message": message}]}),
        )
        .unwrap()
    };
    let r = plain("length", json!({"role": "assistant", "content": "cut"}));
    assert_eq!(r["stop_reason"], json!("max_tokens"));
    assert_eq!(r["usage"], usage(0, 0, 0));
    let r = plain(
        "stop",
        json!({"role": "assistant", "content": null, "refusal": "No."}),
    );
    assert_eq!(
        (r["stop_reason"].clone(), r["content"].clone()),
        (json!("refusal"), json!([{"type": "text", "text": "No."}]))
    );
    let err = reply(
        Dialect::ChatCompletions,
        json!({"error": {"message": "Too many requests", "code": "rate_limit_exceeded", "type": "requests"}}),
    )
    .unwrap_err();
    assert_eq!(err.error.kind, "rate_limit_error");
    let err = translate_response(Dialect::ChatCompletions, b"<html>", "m").unwrap_err();
    assert_eq!(err.error.kind, "api_error");
}

#[test]
fn responses_reply_with_reasoning_message_and_call() {
    let body = json!({"id": "resp_7", "object": "response", "status": "completed", "model": "gpt-5.4",
        "output": [
            {"id": "rs_0", "type": "reasoning", "summary": [{"type": "summary_text", "text": "one"},
                {"type": "summary_text", "text": "two"}], "encrypted_content": "ENC"},
            {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Here.", "annotations": []}]},
            {"id": "fc_2", "type": "function_call", "status": "completed", "call_id": "call_9",
             "name": "Bash", "arguments": "{\"command\":\"ls\"}"}],
        "usage": {"input_tokens": 50, "input_tokens_details": {"cached_tokens": 10}, "output_tokens": 5,
                  "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 55},
        "error": null, "incomplete_details": null});
    assert_eq!(
        reply(Dialect::Responses, body).unwrap(),
        json!({"id": "msg_resp_7", "type": "message", "role": "assistant", "model": "claude-client-model",
            "content": [
                {"type": "thinking", "thinking": "one\n\ntwo", "signature": "claude-host:responses:ENC"},
                {"type": "text", "text": "Here."},
                {"type": "tool_use", "id": "call_9", "name": "Bash", "input": {"command": "ls"}}],
            "stop_reason": "tool_use", "stop_sequence": null, "usage": usage(40, 5, 10)})
    );
}

#[test]
fn responses_reply_incomplete_and_failed() {
    let r = reply(
        Dialect::Responses,
        json!({"id": "resp_1", "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
               "output": [{"type": "message", "content": [{"type": "output_text", "text": "par"}]}]}),
    )
    .unwrap();
    assert_eq!(r["stop_reason"], json!("max_tokens"));
    let err = reply(
        Dialect::Responses,
        json!({"id": "resp_1", "status": "failed", "output": [],
               "error": {"code": "server_error", "message": "boom"}}),
    )
    .unwrap_err();
    assert_eq!(
        (err.error.kind.as_str(), err.error.message.as_str()),
        ("api_error", "boom")
    );
}
