//! One test per request translation rule.

use super::*;
use crate::adapt::Refusal;
use pretty_assertions::assert_eq;

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

#[test]
fn system_string_and_blocks() {
    let blocks = json!([{"type": "text", "text": "You are Claude Code."},
                        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]);
    let req = request(json!([user("hi")]), json!({"system": blocks}));
    let (chat, _) = translate(&req, &gpt41());
    assert_eq!(
        chat["messages"],
        json!([{"role": "system", "content": "You are Claude Code.\n\nBe brief."},
               {"role": "user", "content": "hi"}])
    );
    let (resp, _) = translate(&req, &gpt5());
    assert_eq!(
        resp["instructions"],
        json!("You are Claude Code.\n\nBe brief.")
    );
    assert_eq!(
        resp["input"],
        json!([{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}])
    );
    let req = request(json!([user("hi")]), json!({"system": "plain"}));
    assert_eq!(
        translate(&req, &gpt41()).0["messages"][0],
        json!({"role": "system", "content": "plain"})
    );
    assert_eq!(translate(&req, &gpt5()).0["instructions"], json!("plain"));
}

#[test]
fn system_messages_stay_in_place() {
    let req = request(
        json!([user("hi"), {"role": "system", "content": "env: linux"}, user("go")]),
        json!({}),
    );
    let (chat, _) = translate(&req, &gpt41());
    assert_eq!(
        chat["messages"],
        json!([{"role": "user", "content": "hi"}, {"role": "system", "content": "env: linux"},
               {"role": "user", "content": "go"}])
    );
    let (resp, _) = translate(&req, &gpt5());
    assert_eq!(
        resp["input"][1],
        json!({"type": "message", "role": "system", "content": [{"type": "input_text", "text": "env: linux"}]})
    );
}

#[test]
fn tool_results_come_first_and_errors_say_so() {
    let req = request(
        json!([{"role": "user", "content": [
            {"type": "text", "text": "and now?"},
            {"type": "tool_result", "tool_use_id": "call_1", "content": "ok"},
            {"type": "tool_result", "tool_use_id": "call_2", "is_error": true,
             "content": [{"type": "text", "text": "no such file"}, {"type": "text", "text": "exit 1"}]}
        ]}]),
        json!({}),
    );
    let (chat, _) = translate(&req, &gpt41());
    assert_eq!(
        chat["messages"],
        json!([
            {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
            {"role": "tool", "tool_call_id": "call_2", "content": "Error: no such file\nexit 1"},
            {"role": "user", "content": "and now?"}
        ])
    );
    let (resp, _) = translate(&req, &gpt5());
    assert_eq!(
        resp["input"],
        json!([
            {"type": "function_call_output", "call_id": "call_1", "output": "ok"},
            {"type": "function_call_output", "call_id": "call_2", "output": "Error: no such file\nexit 1"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and now?"}]}
        ])
    );
}

#[test]
fn tool_search_references_become_words() {
    // Claude Code's ToolSearch answers with tool_reference blocks, which load a deferred
    // tool on Anthropic's API; the OpenAI request lists every tool already.
    let req = request(
        json!([{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_9", "content": [
                {"type": "tool_reference", "tool_name": "Grep"}]}
        ]}]),
        json!({}),
    );
    let (chat, rules) = translate(&req, &gpt41());
    assert_eq!(
        chat["messages"],
        json!([{"role": "tool", "tool_call_id": "call_9",
                "content": "Tool Grep is loaded and can be called."}])
    );
    assert!(!rules.contains(&"block_dropped"), "{rules:?}");
}

#[test]
fn images_in_tool_results() {
    let png = json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}});
    let req = request(
        json!([{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": [{"type": "text", "text": "shot"}, png]},
            {"type": "tool_result", "tool_use_id": "call_2", "content": "done"}
        ]}]),
        json!({}),
    );
    let (chat, _) = translate(&req, &gpt41());
    assert_eq!(
        chat["messages"],
        json!([
            {"role": "tool", "tool_call_id": "call_1", "content": "shot"},
            {"role": "tool", "tool_call_id": "call_2", "content": "done"},
            {"role": "user", "content": [
                {"type": "text", "text": "Image from tool result call_1:"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}}]}
        ])
    );
    let (resp, _) = translate(&req, &gpt5());
    assert_eq!(
        resp["input"][0],
        json!({"type": "function_call_output", "call_id": "call_1", "output": [
            {"type": "input_text", "text": "shot"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBOR", "detail": "auto"}]})
    );
}

#[test]
fn parallel_tool_calls_in_history() {
    let req = request(
        json!([user("look"), {"role": "assistant", "content": [
            {"type": "text", "text": "Reading both."},
            {"type": "tool_use", "id": "call_a", "name": "Read", "input": {"file_path": "/a", "limit": 10}},
            {"type": "tool_use", "id": "call_b", "name": "Read", "input": {}}
        ]}]),
        json!({}),
    );
    let (chat, _) = translate(&req, &gpt41());
    assert_eq!(
        chat["messages"][1],
        json!({"role": "assistant", "content": "Reading both.", "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "Read", "arguments": "{\"file_path\":\"/a\",\"limit\":10}"}},
            {"id": "call_b", "type": "function", "function": {"name": "Read", "arguments": "{}"}}]})
    );
    let (resp, _) = translate(&req, &gpt5());
    assert_eq!(
        resp["input"],
        json!([
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "look"}]},
            {"type": "message", "role": "assistant", "content": "Reading both."},
            {"type": "function_call", "call_id": "call_a", "name": "Read", "arguments": "{\"file_path\":\"/a\",\"limit\":10}"},
            {"type": "function_call", "call_id": "call_b", "name": "Read", "arguments": "{}"}
        ])
    );
    // Only tool calls: content is null.
    let req = request(
        json!([{"role": "assistant", "content": [{"type": "tool_use", "id": "c", "name": "Bash", "input": {"command": "ls"}}]}]),
        json!({}),
    );
    assert_eq!(
        translate(&req, &gpt41()).0["messages"][0]["content"],
        Value::Null
    );
}

#[test]
fn tools_and_tool_choice_forms() {
    let tools = json!([{"name": "Bash", "description": "Run", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}},
                       {"type": "custom", "name": "Plain"},
                       {"type": "bash_20250124", "name": "bash"}]);
    let cases = [
        (json!({"type": "auto"}), json!("auto"), json!("auto")),
        (json!({"type": "any"}), json!("required"), json!("required")),
        (json!({"type": "none"}), json!("none"), json!("none")),
        (
            json!({"type": "tool", "name": "Bash"}),
            json!({"type": "function", "function": {"name": "Bash"}}),
            json!({"type": "function", "name": "Bash"}),
        ),
    ];
    for (choice, chat_want, resp_want) in cases {
        let req = request(
            json!([user("hi")]),
            json!({"tools": tools, "tool_choice": choice}),
        );
        let (chat, rules) = translate(&req, &gpt41());
        assert_eq!(chat["tool_choice"], chat_want);
        assert_eq!(rules, ["tool_dropped"]);
        assert!(chat.get("parallel_tool_calls").is_none());
        let (resp, _) = translate(&req, &gpt5());
        assert_eq!(resp["tool_choice"], resp_want);
    }
    let req = request(
        json!([user("hi")]),
        json!({"tools": tools, "tool_choice": {"type": "auto", "disable_parallel_tool_use": true}}),
    );
    let (chat, _) = translate(&req, &gpt41());
    assert_eq!(chat["parallel_tool_calls"], json!(false));
    assert_eq!(
        chat["tools"],
        json!([{"type": "function", "function": {"name": "Bash", "description": "Run",
                 "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}},
               {"type": "function", "function": {"name": "Plain", "parameters": {"type": "object", "properties": {}}}}])
    );
    let (resp, _) = translate(&req, &gpt5());
    assert_eq!(resp["parallel_tool_calls"], json!(false));
    assert_eq!(
        resp["tools"][0],
        json!({"type": "function", "name": "Bash", "description": "Run",
               "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}, "strict": false})
    );
    // No tool left to choose: no tool_choice either.
    let req = request(
        json!([user("hi")]),
        json!({"tools": [{"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}], "tool_choice": {"type": "any"}}),
    );
    let (chat, rules) = translate(&req, &gpt41());
    assert!(chat.get("tools").is_none() && chat.get("tool_choice").is_none());
    assert_eq!(rules, ["tool_dropped", "tool_choice_dropped"]);
}

#[test]
fn images_by_data_and_url() {
    let req = request(
        json!([{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4A"}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
            {"type": "text", "text": "what is this?"}]}]),
        json!({}),
    );
    let (chat, _) = translate(&req, &gpt41());
    assert_eq!(
        chat["messages"][0]["content"],
        json!([{"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4A"}},
               {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
               {"type": "text", "text": "what is this?"}])
    );
    let (resp, _) = translate(&req, &gpt5());
    assert_eq!(
        resp["input"][0]["content"],
        json!([{"type": "input_image", "image_url": "data:image/jpeg;base64,/9j/4A", "detail": "auto"},
               {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"},
               {"type": "input_text", "text": "what is this?"}])
    );
}

#[test]
fn documents_as_text_and_files() {
    let req = request(
        json!([{"role": "user", "content": [
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "notes"}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBER"}}]}]),
        json!({}),
    );
    let (chat, _) = translate(&req, &gpt41());
    assert_eq!(
        chat["messages"][0]["content"],
        json!([{"type": "text", "text": "notes"},
               {"type": "file", "file": {"filename": "document.pdf", "file_data": "data:application/pdf;base64,JVBER"}}])
    );
    let (resp, _) = translate(&req, &gpt5());
    assert_eq!(
        resp["input"][0]["content"],
        json!([{"type": "input_text", "text": "notes"},
               {"type": "input_file", "filename": "document.pdf", "file_data": "data:application/pdf;base64,JVBER"}])
    );
}

#[test]
fn stop_sequences() {
    let req = request(
        json!([user("hi")]),
        json!({"stop_sequences": ["a", "b", "c", "d", "e"]}),
    );
    let (chat, rules) = translate(&req, &gpt41());
    assert_eq!(chat["stop"], json!(["a", "b", "c", "d"]));
    assert_eq!(rules, ["stop_sequences_cut"]);
    let req = request(json!([user("hi")]), json!({"stop_sequences": ["END"]}));
    let (chat, rules) = translate(&req, &gpt41());
    assert_eq!((chat["stop"].clone(), rules), (json!(["END"]), vec![]));
    let (resp, rules) = translate(&req, &gpt5());
    assert!(resp.get("stop").is_none());
    assert_eq!(rules, ["stop_sequences_dropped"]);
}

#[test]
fn sampling_passes_except_to_reasoning_models() {
    let req = request(
        json!([user("hi")]),
        json!({"temperature": 0.25, "top_p": 0.9, "top_k": 40}),
    );
    let (chat, rules) = translate(&req, &gpt41());
    assert_eq!(
        (chat["temperature"].clone(), chat["top_p"].clone()),
        (json!(0.25), json!(0.9))
    );
    assert_eq!(rules, ["top_k_dropped"]);
    let (chat, rules) = translate(&req, &chat_reasoner());
    assert!(chat.get("temperature").is_none() && chat.get("top_p").is_none());
    assert_eq!(rules, ["sampling_dropped", "top_k_dropped"]);
    let (resp, rules) = translate(&req, &gpt5());
    assert!(resp.get("temperature").is_none() && resp.get("top_p").is_none());
    assert_eq!(rules, ["sampling_dropped", "top_k_dropped"]);
    let mut plain = gpt5();
    plain.reasoning = false;
    plain.effort_levels.clear();
    assert_eq!(translate(&req, &plain).0["temperature"], json!(0.25));
}

#[test]
fn max_tokens_clamped_raised_and_named_per_model() {
    let req = request(json!([user("hi")]), json!({"max_tokens": 64000}));
    let (chat, rules) = translate(&req, &gpt41());
    assert_eq!(chat["max_tokens"], json!(16384));
    assert!(chat.get("max_completion_tokens").is_none());
    assert_eq!(rules, ["max_tokens_clamped"]);
    let (chat, rules) = translate(&req, &chat_reasoner());
    assert_eq!(chat["max_completion_tokens"], json!(64000));
    assert!(chat.get("max_tokens").is_none());
    assert_eq!(rules, Vec::<&str>::new());
    let (resp, _) = translate(&req, &gpt5());
    assert_eq!(resp["max_output_tokens"], json!(64000));
    // Claude Code's model check asks for one token; Responses wants at least 16.
    let req = request(json!([user("hi")]), json!({"max_tokens": 1}));
    let (resp, rules) = translate(&req, &gpt5());
    assert_eq!(resp["max_output_tokens"], json!(16));
    assert_eq!(rules, ["max_tokens_raised"]);
    assert_eq!(translate(&req, &gpt41()).0["max_tokens"], json!(1));
}

#[test]
fn thinking_budget_becomes_an_effort() {
    let effort = |thinking: Value, target: &Target| {
        let req = request(json!([user("hi")]), json!({"thinking": thinking}));
        translate(&req, target)
    };
    let cases = [
        (json!({"type": "enabled", "budget_tokens": 4000}), "low"),
        (json!({"type": "enabled", "budget_tokens": 10000}), "medium"),
        (json!({"type": "enabled", "budget_tokens": 31999}), "high"),
        (json!({"type": "adaptive"}), "medium"),
    ];
    for (thinking, level) in cases {
        let (resp, rules) = effort(thinking.clone(), &gpt5());
        assert_eq!(
            resp["reasoning"],
            json!({"effort": level, "summary": "auto"}),
            "{thinking}"
        );
        assert_eq!(resp["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(rules, ["thinking_to_effort"]);
        assert!(resp.get("thinking").is_none());
    }
    // Fitted to the levels offered (medium is not: the highest below it).
    let (chat, rules) = effort(
        json!({"type": "enabled", "budget_tokens": 10000}),
        &chat_reasoner(),
    );
    assert_eq!(chat["reasoning_effort"], json!("low"));
    assert_eq!(rules, ["effort_mapped", "thinking_to_effort"]);
    // output_config.effort wins over thinking.
    let req = request(
        json!([user("hi")]),
        json!({"thinking": {"type": "adaptive"}, "output_config": {"effort": "max"}}),
    );
    let (resp, rules) = translate(&req, &gpt5());
    assert_eq!(resp["reasoning"]["effort"], json!("high"));
    assert_eq!(rules, ["effort_mapped", "thinking_dropped"]);
    // No thinking asked for: the model's default effort, reasoning summaries still asked for.
    let (resp, rules) = effort(json!({"type": "disabled"}), &gpt5());
    assert_eq!(resp["reasoning"], json!({"summary": "auto"}));
    assert_eq!(rules, ["thinking_dropped"]);
    // A model without effort control gets none.
    let (chat, rules) = effort(json!({"type": "enabled", "budget_tokens": 4000}), &gpt41());
    assert!(chat.get("reasoning_effort").is_none() && chat.get("thinking").is_none());
    assert_eq!(rules, ["thinking_dropped"]);
}

#[test]
fn cache_control_is_dropped_everywhere() {
    let cc = json!({"type": "ephemeral"});
    let req = request(
        json!([{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": cc}]}]),
        json!({"tools": [{"name": "Bash", "input_schema": {"type": "object"}, "cache_control": cc}]}),
    );
    for target in [gpt41(), gpt5()] {
        let t = translate_request(&req, &target).unwrap();
        assert_eq!(t.rules, ["cache_control_dropped"]);
        assert!(!String::from_utf8(t.body).unwrap().contains("cache_control"));
    }
}

#[test]
fn metadata_and_other_fields_are_dropped_by_name() {
    let req = request(
        json!([user("hi")]),
        json!({"metadata": {"user_id": "u"}, "context_management": {"edits": []},
               "service_tier": "auto", "speed": "fast", "stream": true}),
    );
    let (chat, rules) = translate(&req, &gpt41());
    assert_eq!(
        rules,
        [
            "metadata_dropped",
            "context_management_dropped",
            "service_tier_dropped",
            "unknown_field_dropped"
        ]
    );
    assert_eq!(
        chat.as_object().unwrap().keys().collect::<Vec<_>>(),
        [
            "model",
            "messages",
            "max_tokens",
            "stream",
            "stream_options"
        ]
    );
    assert_eq!(chat["stream_options"], json!({"include_usage": true}));
    let (resp, _) = translate(&req, &gpt5());
    assert_eq!(
        (resp["store"].clone(), resp["stream"].clone()),
        (json!(false), json!(true))
    );
    assert!(resp.get("stream_options").is_none() && resp.get("metadata").is_none());
}

#[test]
fn server_tools_are_refused() {
    let req = request(
        json!([user("hi")]),
        json!({"tools": [{"name": "Bash", "input_schema": {}},
                          {"type": "web_search_20250305", "name": "web_search", "max_uses": 8}]}),
    );
    for target in [gpt41(), gpt5()] {
        assert_eq!(
            translate_request(&req, &target).unwrap_err(),
            Refusal::ServerTool {
                name: "web_search".into(),
                kind: "web_search_20250305".into()
            }
        );
    }
}

#[test]
fn images_are_refused_without_vision() {
    let req = request(
        json!([{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}}]}]),
        json!({}),
    );
    let mut blind = gpt41();
    blind.supports_vision = false;
    assert_eq!(
        translate_request(&req, &blind).unwrap_err(),
        Refusal::NoVision {
            model: "gpt-4.1".into()
        }
    );
    assert!(translate_request(&req, &gpt41()).is_ok());
}

#[test]
fn foreign_thinking_goes_back_to_its_own_api_only() {
    let history = json!([user("hi"), {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Claude's", "signature": "EqQBCkYIBxgCKkD"},
        {"type": "redacted_thinking", "data": "xyz"},
        {"type": "thinking", "thinking": "GPT's plan", "signature": "claude-host:responses:gAAAAB-enc"},
        {"type": "thinking", "thinking": "Gemini's plan", "signature": "claude-host:chat:opaque-1"},
        {"type": "text", "text": "Done."}]}, user("next")]);
    let req = request(history, json!({}));
    let (resp, rules) = translate(&req, &gpt5());
    assert_eq!(
        resp["input"][1],
        json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": "GPT's plan"}],
               "encrypted_content": "gAAAAB-enc"})
    );
    assert_eq!(
        resp["input"][2],
        json!({"type": "message", "role": "assistant", "content": "Done."})
    );
    assert_eq!(rules, ["thinking_dropped"]);
    let (chat, rules) = translate(&req, &gpt41());
    assert_eq!(
        chat["messages"][1],
        json!({"role": "assistant", "content": "Done.", "reasoning_text": "Gemini's plan",
               "reasoning_opaque": "opaque-1"})
    );
    assert_eq!(rules, ["thinking_dropped"]);
}
