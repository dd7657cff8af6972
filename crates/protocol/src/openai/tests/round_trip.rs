//! Thinking made from another model's reasoning, streamed to the client and sent back.

use super::stream_chat::chunk;
use super::stream_responses::Builder;
use super::*;
use crate::adapt::{ModelRules, Rule, adapt};
use pretty_assertions::assert_eq;

/// The conversation a client builds after `content`, answering its tool call.
fn history(content: Value) -> Value {
    json!([
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "ok"}]}
    ])
}

fn claude() -> ModelRules {
    ModelRules {
        model: "claude-sonnet-4.5".into(),
        max_output_tokens: Some(64_000),
        supports_vision: true,
        adaptive_thinking: false,
        thinking_budget: Some((1024, 32_000)),
        effort_levels: Vec::new(),
    }
}

#[test]
fn responses_reasoning_goes_back_as_a_reasoning_item() {
    let (events, _) = Builder::new()
        .reasoning(
            0,
            &[&["Check", " the test"], &["Run it"]],
            Some("gAAAAB+/enc=="),
        )
        .call_added(1, "call_1", "Bash")
        .call_delta(1, "{\"command\":\"cargo test\"}")
        .call_done(1, "call_1", "Bash", "{\"command\":\"cargo test\"}")
        .completed(1, 0, 1)
        .run();
    let content = assemble(&events);
    let req = request(
        history(content.clone()),
        json!({"thinking": {"type": "enabled", "budget_tokens": 10000}}),
    );
    let (body, _) = translate(&req, &gpt5());
    assert_eq!(
        body["input"][1],
        json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": "Check the test\n\nRun it"}],
               "encrypted_content": "gAAAAB+/enc=="})
    );
    assert_eq!(
        body["input"][2],
        json!({"type": "function_call", "call_id": "call_1", "name": "Bash", "arguments": "{\"command\":\"cargo test\"}"})
    );
    // To Chat Completions the Responses reasoning means nothing: dropped.
    let (body, rules) = translate(&req, &gpt41());
    assert!(body["messages"][1].get("reasoning_text").is_none());
    assert!(rules.contains(&"thinking_dropped"));
    // To Claude it is removed, and with it thinking for this tool loop.
    let a = adapt(&req, &claude()).unwrap();
    assert_eq!(
        a.rules,
        [Rule::ForeignThinkingRemoved, Rule::ThinkingRemoved]
    );
}

#[test]
fn chat_reasoning_goes_back_as_reasoning_text_and_opaque() {
    let (events, _) = run(
        Dialect::ChatCompletions,
        &[
            (None, &chunk(json!({"reasoning_text": "Look"}), Value::Null)),
            (
                None,
                &chunk(json!({"reasoning_text": " first"}), Value::Null),
            ),
            (
                None,
                &chunk(
                    json!({"reasoning_opaque": "op/aq", "tool_calls": [{"index": 0, "id": "call_1",
                "type": "function", "function": {"name": "Bash", "arguments": "{\"command\":\"ls\"}"}}]}),
                    Value::Null,
                ),
            ),
            (
                None,
                &chunk(json!({"reasoning_opaque": "+ue"}), Value::Null),
            ),
            (None, &chunk(json!({}), json!("tool_calls"))),
            (None, "[DONE]"),
        ],
    );
    let content = assemble(&events);
    let req = request(history(content), json!({}));
    let (body, rules) = translate(&req, &chat_reasoner());
    assert_eq!(
        body["messages"][1],
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
               "function": {"name": "Bash", "arguments": "{\"command\":\"ls\"}"}}],
               "reasoning_text": "Look first", "reasoning_opaque": "op/aq+ue"})
    );
    assert!(rules.is_empty(), "{rules:?}");
    let (body, rules) = translate(&req, &gpt5());
    assert_eq!(body["input"][1]["type"], json!("function_call"));
    assert_eq!(rules, ["thinking_dropped"]);
    let a = adapt(&req, &claude()).unwrap();
    assert_eq!(a.rules, [Rule::ForeignThinkingRemoved]);
}
