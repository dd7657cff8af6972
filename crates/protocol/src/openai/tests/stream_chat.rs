//! Chat Completions streams, split the way Copilot sends them.

use super::*;
use pretty_assertions::assert_eq;

pub(crate) fn chunk(delta: Value, finish: Value) -> String {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1767225600,
           "model": "gpt-4.1-2025-04-14",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": null}]})
    .to_string()
}

fn usage_chunk(prompt: u64, completion: u64, cached: u64) -> String {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1767225600,
           "model": "gpt-4.1-2025-04-14", "choices": [],
           "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                     "total_tokens": prompt + completion,
                     "prompt_tokens_details": {"cached_tokens": cached},
                     "completion_tokens_details": {"reasoning_tokens": 0}}})
    .to_string()
}

fn data(events: &[String]) -> Vec<(Option<&str>, &str)> {
    events.iter().map(|d| (None, d.as_str())).collect()
}

fn chat(events: &[String]) -> (Vec<Value>, Step) {
    run(Dialect::ChatCompletions, &data(events))
}

fn call(index: u64, id: Option<&str>, name: Option<&str>, args: &str) -> Value {
    let mut function = json!({"arguments": args});
    if let Some(n) = name {
        function["name"] = json!(n);
    }
    let mut c = json!({"index": index, "function": function});
    if let Some(id) = id {
        c["id"] = json!(id);
        c["type"] = json!("function");
    }
    json!({"tool_calls": [c]})
}

#[test]
fn text_with_usage_after_the_finish_and_done() {
    let (events, step) = chat(&[
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({"content": "Hel"}), Value::Null),
        chunk(json!({"content": "lo \"world\"\n"}), Value::Null),
        chunk(json!({}), json!("stop")),
        usage_chunk(1200, 7, 1000),
        "[DONE]".into(),
    ]);
    assert_eq!(step, Step::Done);
    let mut want = vec![
        message_start("msg_chatcmpl-1"),
        text_start(0),
        text(0, "Hel"),
        text(0, "lo \"world\"\n"),
        block_stop(0),
    ];
    want.extend(message_end("end_turn", 200, 7, 1000));
    assert_eq!(events, want);
}

#[test]
fn usage_inside_the_finish_chunk() {
    let mut finish: Value = serde_json::from_str(&chunk(json!({}), json!("stop"))).unwrap();
    finish["usage"] = json!({"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12});
    let (events, step) = chat(&[
        chunk(json!({"content": "ok"}), Value::Null),
        finish.to_string(),
        "[DONE]".into(),
    ]);
    assert_eq!(step, Step::Done);
    assert_eq!(
        events[events.len() - 2],
        message_end("end_turn", 10, 2, 0)[0]
    );
}

#[test]
fn tool_call_arguments_across_many_deltas() {
    let (events, step) = chat(&[
        chunk(
            json!({"role": "assistant", "content": "Let me look."}),
            Value::Null,
        ),
        chunk(call(0, Some("call_abc"), Some("Bash"), ""), Value::Null),
        chunk(call(0, None, None, "{\"comm"), Value::Null),
        chunk(call(0, None, None, "and\": \"ls"), Value::Null),
        chunk(call(0, None, None, " -la\"}"), Value::Null),
        chunk(json!({}), json!("tool_calls")),
        usage_chunk(50, 20, 0),
        "[DONE]".into(),
    ]);
    assert_eq!(step, Step::Done);
    let mut want = vec![
        message_start("msg_chatcmpl-1"),
        text_start(0),
        text(0, "Let me look."),
        block_stop(0),
        tool_start(1, "call_abc", "Bash"),
        json_part(1, "{\"comm"),
        json_part(1, "and\": \"ls"),
        json_part(1, " -la\"}"),
        block_stop(1),
    ];
    want.extend(message_end("tool_use", 50, 20, 0));
    assert_eq!(events, want);
}

#[test]
fn two_tool_calls_interleaved() {
    let (events, step) = chat(&[
        chunk(call(0, Some("call_a"), Some("Read"), ""), Value::Null),
        chunk(call(1, Some("call_b"), Some("Glob"), "{\"pat"), Value::Null),
        chunk(call(0, None, None, "{\"file_path\":"), Value::Null),
        chunk(call(1, None, None, "tern\":\"*.rs\"}"), Value::Null),
        chunk(call(0, None, None, "\"/a\"}"), Value::Null),
        // Copilot's models often end tool calls with "stop".
        chunk(json!({}), json!("stop")),
        "[DONE]".into(),
    ]);
    assert_eq!(step, Step::Done);
    let mut want = vec![
        message_start("msg_chatcmpl-1"),
        tool_start(0, "call_a", "Read"),
        json_part(0, "{\"file_path\":"),
        json_part(0, "\"/a\"}"),
        block_stop(0),
        tool_start(1, "call_b", "Glob"),
        json_part(1, "{\"pattern\":\"*.rs\"}"),
        block_stop(1),
    ];
    want.extend(message_end("tool_use", 0, 0, 0));
    assert_eq!(events, want);
}

#[test]
fn reasoning_with_its_opaque_signature() {
    let (events, step) = chat(&[
        chunk(
            json!({"role": "assistant", "reasoning_text": "The user"}),
            Value::Null,
        ),
        chunk(json!({"reasoning_text": " wants ls."}), Value::Null),
        chunk(
            json!({"reasoning_opaque": "ENC/1+", "content": "Sure."}),
            Value::Null,
        ),
        chunk(json!({}), json!("stop")),
        "[DONE]".into(),
    ]);
    assert_eq!(step, Step::Done);
    let mut want = vec![
        message_start("msg_chatcmpl-1"),
        thinking_start(0),
        thinking(0, "The user"),
        thinking(0, " wants ls."),
        signature(0, "claude-host:chat:ENC/1+"),
        block_stop(0),
        text_start(1),
        text(1, "Sure."),
        block_stop(1),
    ];
    want.extend(message_end("end_turn", 0, 0, 0));
    assert_eq!(events, want);
}

#[test]
fn opaque_split_across_tool_calls_becomes_a_last_block() {
    let (events, _) = chat(&[
        chunk(json!({"reasoning_opaque": "part1-"}), Value::Null),
        chunk(call(0, Some("call_a"), Some("Read"), "{}"), Value::Null),
        chunk(json!({"reasoning_opaque": "part2"}), Value::Null),
        chunk(json!({}), json!("tool_calls")),
        "[DONE]".into(),
    ]);
    let mut want = vec![
        message_start("msg_chatcmpl-1"),
        thinking_start(0),
        signature(0, "claude-host:chat:part1-"),
        block_stop(0),
        tool_start(1, "call_a", "Read"),
        json_part(1, "{}"),
        block_stop(1),
        thinking_start(2),
        signature(2, "claude-host:chat:part2"),
        block_stop(2),
    ];
    want.extend(message_end("tool_use", 0, 0, 0));
    assert_eq!(events, want);
}

#[test]
fn refusal_content_filter_and_length() {
    let (events, _) = chat(&[
        chunk(json!({"refusal": "I can't help with that."}), Value::Null),
        chunk(json!({}), json!("stop")),
        "[DONE]".into(),
    ]);
    assert_eq!(events[2], text(0, "I can't help with that."));
    assert_eq!(events[events.len() - 2], message_end("refusal", 0, 0, 0)[0]);
    let (events, _) = chat(&[
        chunk(json!({"content": "Here is"}), Value::Null),
        chunk(json!({}), json!("content_filter")),
        "[DONE]".into(),
    ]);
    assert_eq!(events[events.len() - 2], message_end("refusal", 0, 0, 0)[0]);
    let (events, _) = chat(&[
        chunk(
            call(0, Some("c"), Some("Write"), "{\"content\":\"lo"),
            Value::Null,
        ),
        chunk(json!({}), json!("length")),
        "[DONE]".into(),
    ]);
    assert_eq!(
        events[events.len() - 2],
        message_end("max_tokens", 0, 0, 0)[0]
    );
}

#[test]
fn an_error_mid_stream_fails_with_nothing_written_for_it() {
    let mut t = StreamTranslator::new(Dialect::ChatCompletions, "m");
    let mut out = bytes::BytesMut::new();
    assert_eq!(
        t.push(
            None,
            chunk(json!({"content": "Hi"}), Value::Null).as_bytes(),
            &mut out
        ),
        Step::Continue
    );
    let before = out.len();
    let step = t.push(
        None,
        br#"{"error":{"message":"Rate limit reached","code":"rate_limit_exceeded","type":"requests"}}"#,
        &mut out,
    );
    let Step::Failed(env) = step else {
        panic!("{step:?}")
    };
    assert_eq!(env.error.kind, "rate_limit_error");
    assert_eq!(env.error.message, "Rate limit reached");
    assert_eq!(out.len(), before);
    // Nothing after a failure.
    assert_eq!(t.push(None, b"[DONE]", &mut out), Step::Continue);
    assert_eq!(t.end_of_stream(&mut out), Step::Continue);
    assert_eq!(out.len(), before);
}

#[test]
fn an_error_before_anything_writes_nothing() {
    let (events, step) = chat(&[
        json!({"error": {"message": "prompt token count of 171234 exceeds the limit of 168000",
        "code": "model_max_prompt_tokens_exceeded"}})
        .to_string(),
    ]);
    assert!(events.is_empty());
    let Step::Failed(env) = step else {
        panic!("{step:?}")
    };
    assert_eq!(env.error.kind, "invalid_request_error");
    assert_eq!(
        env.error.message,
        "prompt is too long: 171234 tokens > 168000 maximum"
    );
}

#[test]
fn the_end_without_a_finish_fails_and_with_one_completes() {
    let (events, step) = chat(&[chunk(json!({"content": "Hel"}), Value::Null)]);
    assert!(
        matches!(step, Step::Failed(ref e) if e.error.kind == "api_error"),
        "{step:?}"
    );
    assert_eq!(events.last(), Some(&text(0, "Hel")));
    let (_, step) = chat(&[
        chunk(json!({"content": "Hel"}), Value::Null),
        "[DONE]".into(),
    ]);
    assert!(matches!(step, Step::Failed(_)));
    // No [DONE], but the finish came: the stream is complete.
    let (events, step) = chat(&[
        chunk(json!({"content": "Hel"}), Value::Null),
        chunk(json!({}), json!("stop")),
    ]);
    assert_eq!(step, Step::Done);
    assert_eq!(events.last(), Some(&message_end("end_turn", 0, 0, 0)[1]));
}

#[test]
fn unknown_fields_and_empty_events_are_ignored() {
    let (events, step) = chat(&[
        String::new(),
        json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"content": "a", "annotations": [{"x": 1}],
               "audio": {"id": "q"}}, "finish_reason": null, "content_filter_results": {"hate": {"filtered": false}}}],
               "prompt_filter_results": [], "system_fingerprint": "fp"})
        .to_string(),
        chunk(json!({}), json!("stop")),
        "[DONE]".into(),
    ]);
    assert_eq!(step, Step::Done);
    assert_eq!(events[2], text(0, "a"));
}

#[test]
fn text_after_a_tool_call_follows_it() {
    let (events, _) = chat(&[
        chunk(
            call(0, Some("c1"), Some("Bash"), "{\"command\":"),
            Value::Null,
        ),
        chunk(json!({"content": "(running)"}), Value::Null),
        chunk(call(0, None, None, "\"ls\"}"), Value::Null),
        chunk(json!({}), json!("tool_calls")),
        "[DONE]".into(),
    ]);
    let mut want = vec![
        message_start("msg_chatcmpl-1"),
        tool_start(0, "c1", "Bash"),
        json_part(0, "{\"command\":"),
        json_part(0, "\"ls\"}"),
        block_stop(0),
        text_start(1),
        text(1, "(running)"),
        block_stop(1),
    ];
    want.extend(message_end("tool_use", 0, 0, 0));
    assert_eq!(events, want);
}

#[test]
fn an_error_event_fails_whatever_its_data() {
    for data in [
        r#"{"error":{"message":"Overloaded","code":"overloaded"}}"#,
        r#"{"message":"Overloaded","code":"overloaded"}"#,
    ] {
        let (events, step) = run(Dialect::ChatCompletions, &[(Some("error"), data)]);
        assert!(events.is_empty());
        let Step::Failed(env) = step else {
            panic!("{step:?}")
        };
        assert_eq!(
            (env.error.kind.as_str(), env.error.message.as_str()),
            ("overloaded_error", "Overloaded")
        );
    }
    let (_, step) = run(
        Dialect::ChatCompletions,
        &[(Some("error"), "upstream timeout")],
    );
    assert!(matches!(step, Step::Failed(ref e) if e.error.message == "upstream timeout"));
}
