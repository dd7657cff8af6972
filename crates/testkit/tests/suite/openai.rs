//! The fake's OpenAI endpoints (`/chat/completions`, `/responses`): what they refuse, the
//! streams and objects they answer with (read back through async-openai's own types), the
//! scripted plans, and the reverse translation the rest of the fake relies on.

use async_openai::types::chat::{
    CreateChatCompletionResponse, CreateChatCompletionStreamResponse, FinishReason, Role,
};
use async_openai::types::responses::{
    OutputContent, OutputItem, OutputMessageContent, Response, ResponseStreamEvent, Status,
    SummaryPart,
};
use claude_host_testkit::copilot_rules::prompt_tokens;
use claude_host_testkit::fake::{Block, FakeConfig, FakeUpstream, Match, Reply, Rule};
use claude_host_testkit::openai::{Endpoint, to_anthropic};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn client() -> reqwest::Client {
    claude_host_testkit::http_client()
}

async fn start(config: FakeConfig) -> (FakeUpstream, String) {
    let fake = FakeUpstream::start_with(config).await.unwrap();
    let v: Value = client()
        .get(format!("{}/copilot_internal/v2/token", fake.url()))
        .header("authorization", "token gho_fake_github_token")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tok = v["token"].as_str().unwrap().to_owned();
    (fake, tok)
}

/// A request with every header the Copilot contract asks of these endpoints.
fn request(fake: &FakeUpstream, tok: &str, path: &str, body: &Value) -> reqwest::RequestBuilder {
    request_with(fake, tok, path, body, &[])
}

/// As [`request`], with some headers replaced (or added).
fn request_with(
    fake: &FakeUpstream,
    tok: &str,
    path: &str,
    body: &Value,
    overrides: &[(&str, &str)],
) -> reqwest::RequestBuilder {
    let mut headers = vec![
        ("x-request-id", "7e1c5d0a-0000-4000-8000-000000000001"),
        ("x-github-api-version", "2025-05-01"),
        ("copilot-integration-id", "vscode-chat"),
        ("editor-version", "vscode/1.104.0"),
        ("editor-plugin-version", "copilot-chat/0.31.0"),
        ("openai-intent", "conversation-agent"),
        ("x-interaction-type", "conversation-agent"),
        ("x-initiator", "user"),
    ];
    for (k, v) in overrides {
        headers.retain(|(name, _)| name != k);
        headers.push((k, v));
    }
    let mut req = client()
        .post(format!("{}{path}", fake.url()))
        .header("authorization", format!("Bearer {tok}"));
    for (k, v) in headers {
        req = req.header(k, v);
    }
    req.json(body)
}

async fn post(fake: &FakeUpstream, tok: &str, path: &str, body: &Value) -> reqwest::Response {
    request(fake, tok, path, body).send().await.unwrap()
}

/// Status and JSON body.
async fn outcome(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// The `data:` payloads of a Chat Completions stream, in order (`[DONE]` included).
fn chat_payloads(raw: &str) -> Vec<String> {
    raw.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            assert!(!e.contains('\n'), "one data line per event: {e:?}");
            e.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not a data line: {e:?}"))
                .to_owned()
        })
        .collect()
}

/// The chunks of a complete Chat Completions stream, each read as async-openai's type and as
/// JSON; panics unless it ends with `[DONE]`.
fn chat_chunks(raw: &str) -> Vec<(CreateChatCompletionStreamResponse, Value)> {
    let mut payloads = chat_payloads(raw);
    assert_eq!(payloads.pop().as_deref(), Some("[DONE]"), "{raw}");
    payloads
        .iter()
        .map(|p| {
            let typed: CreateChatCompletionStreamResponse =
                serde_json::from_str(p).unwrap_or_else(|e| panic!("not a chat chunk ({e}): {p}"));
            (typed, serde_json::from_str(p).unwrap())
        })
        .collect()
}

/// The events of a Responses stream, each read as async-openai's type and as JSON; checks that
/// the `event:` name is the data's `type` and that sequence numbers count from 0.
fn responses_events(raw: &[u8]) -> Vec<(ResponseStreamEvent, Value)> {
    let mut p = claude_host_protocol::sse::EventParser::new();
    p.push(raw);
    let events: Vec<(ResponseStreamEvent, Value)> = std::iter::from_fn(|| p.next_event())
        .map(|e| {
            let v: Value = serde_json::from_str(&e.data).unwrap();
            assert_eq!(v["type"], e.name.as_str(), "event name is the data's type");
            let typed: ResponseStreamEvent = serde_json::from_str(&e.data)
                .unwrap_or_else(|err| panic!("not a Responses event ({err}): {}", e.data));
            (typed, v)
        })
        .collect();
    for (i, (_, v)) in events.iter().enumerate() {
        assert_eq!(v["sequence_number"], i, "sequence numbers count from 0");
    }
    events
}

fn always(reply: Reply) -> Rule {
    Rule {
        when: Match::Always,
        reply,
        times: None,
    }
}

fn chat(model: &str, stream: bool) -> Value {
    let mut b = json!({"model": model, "messages": [{"role": "user", "content": "hello"}]});
    if stream {
        b["stream"] = json!(true);
        b["stream_options"] = json!({"include_usage": true});
    }
    b
}

fn responses(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "store": false,
           "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]}]})
}

fn tools_chat() -> Value {
    json!([{"type": "function", "function": {"name": "Bash", "description": "Run a command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}},
           {"type": "function", "function": {"name": "Read", "description": "Read a file",
            "parameters": {"type": "object", "properties": {"file_path": {"type": "string"}}}}}])
}

/// A Chat Completions tool loop as the spec's translation sends it.
fn chat_tool_loop() -> Value {
    json!({"model": "gpt-4.1", "stream": true, "stream_options": {"include_usage": true}, "max_tokens": 1000,
           "tools": tools_chat(), "tool_choice": "auto",
           "messages": [
               {"role": "system", "content": "You are Claude Code."},
               {"role": "user", "content": [{"type": "text", "text": "list files"}]},
               {"role": "assistant", "content": "Let me look.", "reasoning_text": "ls first", "reasoning_opaque": "op1",
                "tool_calls": [
                   {"id": "call_1", "type": "function", "function": {"name": "Bash", "arguments": "{\"command\":\"ls\"}"}},
                   {"id": "call_2", "type": "function", "function": {"name": "Read", "arguments": "{\"file_path\":\"/a.png\"}"}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "a.png"},
               {"role": "tool", "tool_call_id": "call_2", "content": "Error: binary file"},
               {"role": "user", "content": [{"type": "text", "text": "Image from tool result call_2:"},
                                            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]},
               {"role": "user", "content": [{"type": "text", "text": "now summarize"}]}]})
}

/// A Responses tool loop as the spec's translation sends it.
fn responses_tool_loop() -> Value {
    json!({"model": "gpt-5.4", "stream": true, "store": false, "instructions": "You are Claude Code.",
           "include": ["reasoning.encrypted_content"], "reasoning": {"effort": "high", "summary": "auto"},
           "max_output_tokens": 16000, "parallel_tool_calls": false, "tool_choice": "auto",
           "tools": [{"type": "function", "name": "Bash", "description": "Run a command",
                      "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}, "strict": false}],
           "input": [
               {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
               {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "env: linux"}]},
               {"type": "reasoning", "summary": [{"type": "summary_text", "text": "I should run ls."},
                                                {"type": "summary_text", "text": "Then read."}], "encrypted_content": "enc1"},
               {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
               {"type": "function_call", "call_id": "call_1", "name": "Bash", "arguments": "{\"command\":\"ls\"}"},
               {"type": "function_call_output", "call_id": "call_1",
                "output": [{"type": "input_text", "text": "a.png"},
                           {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"}]},
               {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "describe it"}]}]})
}

#[tokio::test]
async fn openai_endpoints_check_the_account_and_the_catalog() {
    let (fake, tok) = start(FakeConfig::default()).await;
    let r = post(
        &fake,
        "tid=forged",
        "/chat/completions",
        &chat("gpt-4.1", false),
    )
    .await;
    assert_eq!(r.status(), 401);

    let (status, body) =
        outcome(post(&fake, &tok, "/chat/completions", &chat("gpt-5.4", false)).await).await;
    assert_eq!(status, 400);
    assert_eq!(
        body,
        json!({"error": {"message": "model \"gpt-5.4\" is not supported via /chat/completions", "code": "unsupported_api_for_model"}})
    );
    let (status, body) =
        outcome(post(&fake, &tok, "/responses", &responses("gpt-4.1", false)).await).await;
    assert_eq!(status, 400);
    assert_eq!(
        body["error"]["message"],
        "model \"gpt-4.1\" is not supported via /responses"
    );
    let (status, body) =
        outcome(post(&fake, &tok, "/responses", &responses("gpt-9", false)).await).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("model_not_supported"))
    );

    // Both endpoints, and their /v1/ aliases, for a model listed on both.
    for path in ["/chat/completions", "/v1/chat/completions"] {
        let (status, body) =
            outcome(post(&fake, &tok, path, &chat("gpt-5-mini", false)).await).await;
        assert_eq!(
            (status, body["object"].as_str()),
            (200, Some("chat.completion")),
            "{path}"
        );
    }
    for path in ["/responses", "/v1/responses"] {
        let (status, body) =
            outcome(post(&fake, &tok, path, &responses("gpt-5-mini", false)).await).await;
        assert_eq!(
            (status, body["object"].as_str()),
            (200, Some("response")),
            "{path}"
        );
    }

    // Premium models answer 402 once the quota is gone; included ones (multiplier 0) do not.
    fake.exhaust_premium(true);
    let (status, body) =
        outcome(post(&fake, &tok, "/responses", &responses("gpt-5.4", false)).await).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (402, Some("quota_exceeded"))
    );
    let (status, _) = outcome(
        post(
            &fake,
            &tok,
            "/chat/completions",
            &chat("gemini-3.1-pro", false),
        )
        .await,
    )
    .await;
    assert_eq!(status, 402);
    let (status, _) =
        outcome(post(&fake, &tok, "/responses", &responses("gpt-5-mini", false)).await).await;
    assert_eq!(status, 200);

    assert_eq!(
        fake.violations(),
        Vec::<String>::new(),
        "a well-formed client"
    );
    // The refused ones count too: every POST to a model endpoint.
    assert_eq!(fake.model_requests().len(), 11);
    assert_eq!(fake.message_requests().len(), 0);
}

#[tokio::test]
async fn openai_header_contract_is_checked() {
    let (fake, tok) = start(FakeConfig::default()).await;
    let (status, _) =
        outcome(post(&fake, &tok, "/chat/completions", &chat("gpt-4.1", false)).await).await;
    assert_eq!(status, 200);
    assert_eq!(fake.violations(), Vec::<String>::new());

    // The /v1/messages contract's headers are wrong here, and no anthropic-* header may go.
    let r = request_with(
        &fake,
        &tok,
        "/responses",
        &responses("gpt-5.4", false),
        &[
            ("openai-intent", "messages-proxy"),
            ("x-interaction-type", "messages-proxy"),
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "interleaved-thinking-2025-05-14"),
        ],
    )
    .send()
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let v = fake.violations();
    for want in [
        "/responses: openai-intent is Some(\"messages-proxy\")",
        "/responses: x-interaction-type is Some(\"messages-proxy\")",
        "/responses: anthropic-version sent",
        "/responses: anthropic-beta sent",
    ] {
        assert!(v.iter().any(|x| x.starts_with(want)), "{want} in {v:?}");
    }
    // A bare client misses the rest.
    let before = fake.violations().len();
    let r = client()
        .post(format!("{}/chat/completions", fake.url()))
        .header("authorization", format!("Bearer {tok}"))
        .body(chat("gpt-4.1", false).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v = &fake.violations()[before..];
    for want in [
        "missing x-request-id",
        "missing copilot-integration-id",
        "x-initiator is None",
        "content-type is None",
    ] {
        assert!(v.iter().any(|x| x.contains(want)), "{want} in {v:?}");
    }
}

/// Sends `body` and expects a refusal: `status`, a message containing `message`, and (when
/// `violation`) a new recorded violation saying the same.
async fn refused(
    fake: &FakeUpstream,
    tok: &str,
    path: &str,
    body: &Value,
    vision: bool,
    (status, message, violation): (u16, &str, bool),
) -> Value {
    let before = fake.violations().len();
    let mut req = request(fake, tok, path, body);
    if vision {
        req = req.header("copilot-vision-request", "true");
    }
    let (got, reply) = outcome(req.send().await.unwrap()).await;
    assert_eq!(got, status, "{body}\n-> {reply}");
    let text = reply["error"]["message"].as_str().unwrap_or_default();
    assert!(text.contains(message), "{message:?} in {text:?}");
    let new = &fake.violations()[before..];
    if violation {
        assert_eq!(new.len(), 1, "{new:?}");
        assert!(
            new[0].starts_with(path) && new[0].contains(message),
            "{new:?}"
        );
    } else {
        assert!(new.is_empty(), "{new:?}");
    }
    reply
}

/// Sends `body` and expects it served, with no violation.
async fn accepted(fake: &FakeUpstream, tok: &str, path: &str, body: &Value, vision: bool) {
    let before = fake.violations().len();
    let mut req = request(fake, tok, path, body);
    if vision {
        req = req.header("copilot-vision-request", "true");
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    assert_eq!(status, 200, "{body}\n-> {text}");
    assert_eq!(fake.violations()[before..], [] as [String; 0], "{body}");
}

#[tokio::test]
async fn chat_completions_refuses_what_the_real_upstream_refuses() {
    let mut config = FakeConfig::default();
    // A small model to overflow, and one without vision.
    let mut tiny = config
        .models
        .iter()
        .find(|m| m["id"] == "gpt-4.1")
        .unwrap()
        .clone();
    tiny["id"] = json!("gpt-tiny");
    tiny["capabilities"]["limits"]["max_prompt_tokens"] = json!(50);
    tiny["capabilities"]["supports"]["vision"] = json!(false);
    config.models.push(tiny);
    let (fake, tok) = start(config).await;
    let path = "/chat/completions";
    let with = |patch: Value| {
        let mut b = chat("gpt-5-mini", false);
        for (k, v) in patch.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let bad = |code: &str| (400, code.to_owned());
    // (body, vision header, refusal: message part, code)
    let cases: Vec<(Value, bool, &str, (u16, String))> = vec![
        (
            with(json!({"messages": [{"role": "robot", "content": "x"}]})),
            false,
            "messages[0].role: unknown variant `robot`",
            bad("invalid_request_body"),
        ),
        (
            with(
                json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}),
            ),
            false,
            "messages[0].content[0].type: unknown variant `image`",
            bad("invalid_request_body"),
        ),
        (
            with(json!({"messages": [{"role": "user", "content": 7}]})),
            false,
            "messages[0].content",
            bad("invalid_request_body"),
        ),
        (
            with(json!({"top_k": 5})),
            false,
            "Unrecognized request argument supplied: top_k",
            bad("unknown_parameter"),
        ),
        (
            with(
                json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}]}),
            ),
            false,
            "Unknown parameter: 'messages[0].content[0].cache_control'.",
            bad("unknown_parameter"),
        ),
        (
            with(json!({"messages": []})),
            false,
            "[] is too short - 'messages'",
            bad("invalid_request_body"),
        ),
        (
            with(
                json!({"messages": [{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "call_9", "content": "r"}]}),
            ),
            false,
            "must be a response to a preceeding message with 'tool_calls'",
            bad("invalid_request_body"),
        ),
        (
            with(json!({"tools": tools_chat(), "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "Bash", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_7", "content": "r"}]})),
            false,
            "answers tool_call_id \"call_7\"",
            bad("invalid_request_body"),
        ),
        (
            with(json!({"tools": tools_chat(), "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "Bash", "arguments": "{}"}},
                {"id": "call_2", "type": "function", "function": {"name": "Bash", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "r"},
            {"role": "user", "content": "y"}]})),
            false,
            "did not have response messages: call_2",
            bad("invalid_request_body"),
        ),
        (
            with(
                json!({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": null}]}),
            ),
            false,
            "Invalid value for 'messages[1].content'",
            bad("invalid_value"),
        ),
        (
            with(json!({"max_tokens": 100})),
            false,
            "Use 'max_completion_tokens' instead",
            bad("unsupported_parameter"),
        ),
        (
            with(json!({"temperature": 0.5})),
            false,
            "'temperature' does not support 0.5",
            bad("unsupported_value"),
        ),
        (
            with(json!({"top_p": 0.9})),
            false,
            "'top_p' does not support",
            bad("unsupported_value"),
        ),
        (
            with(json!({"reasoning_effort": "xhigh"})),
            false,
            "'reasoning_effort' does not support 'xhigh' with this model. Supported values are: 'low', 'medium', 'high'.",
            bad("unsupported_value"),
        ),
        (
            json!({"model": "gpt-4.1", "messages": [{"role": "user", "content": "x"}], "reasoning_effort": "low"}),
            false,
            "Unsupported parameter: 'reasoning_effort' is not supported with this model.",
            bad("unsupported_parameter"),
        ),
        (
            with(json!({"stream_options": {"include_usage": true}})),
            false,
            "only allowed when 'stream' is enabled",
            bad("invalid_value"),
        ),
        (
            with(json!({"tool_choice": "auto"})),
            false,
            "'tool_choice' is only allowed when 'tools' are specified",
            bad("invalid_value"),
        ),
        (
            with(json!({"parallel_tool_calls": false})),
            false,
            "'parallel_tool_calls' is only allowed",
            bad("invalid_value"),
        ),
        (
            with(
                json!({"tools": [{"type": "function", "function": {"name": "mcp server.tool", "parameters": {"type": "object"}}}]}),
            ),
            false,
            "Invalid 'tools[0].function.name': string does not match pattern",
            bad("invalid_value"),
        ),
        (
            with(json!({"stop": ["a", "b", "c", "d", "e"]})),
            false,
            "is too long - 'stop'",
            bad("invalid_request_body"),
        ),
        (
            with(json!({"max_completion_tokens": 64_001})),
            false,
            "max_tokens is too large: 64001",
            bad("invalid_value"),
        ),
        (
            with(
                json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]}]}),
            ),
            false,
            "missing required Copilot-Vision-Request header",
            bad("invalid_request_body"),
        ),
        (
            json!({"model": "gpt-tiny", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/a.png"}}]}]}),
            true,
            "model \"gpt-tiny\" not supported for vision",
            bad("unsupported_vision"),
        ),
    ];
    for (body, vision, message, (status, code)) in &cases {
        let reply = refused(&fake, &tok, path, body, *vision, (*status, message, true)).await;
        assert_eq!(reply["error"]["code"], code.as_str(), "{reply}");
    }
    // Not JSON at all.
    let before = fake.violations().len();
    let r = request(&fake, &tok, path, &json!(null))
        .body("{\"model\": \"gpt-4.1\", ")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(fake.violations().len(), before + 1);
    // A prompt over the model's limit is Copilot's own refusal, and no violation.
    let long =
        json!({"model": "gpt-tiny", "messages": [{"role": "user", "content": "word ".repeat(80)}]});
    let reply = refused(
        &fake,
        &tok,
        path,
        &long,
        false,
        (400, "exceeds the limit of 50", false),
    )
    .await;
    assert_eq!(reply["error"]["code"], "model_max_prompt_tokens_exceeded");

    // What the rules allow goes through.
    for body in [
        chat_tool_loop(),
        with(
            json!({"max_completion_tokens": 1000, "reasoning_effort": "high", "temperature": 1.0}),
        ),
        with(json!({"stream": true, "stream_options": {"include_usage": true}})),
        with(
            json!({"tools": tools_chat(), "tool_choice": {"type": "function", "function": {"name": "Bash"}},
                    "parallel_tool_calls": false, "stop": ["a", "b", "c", "d"]}),
        ),
        json!({"model": "gpt-4.1", "temperature": 0.2, "top_p": 0.5, "max_tokens": 100,
               "messages": [{"role": "developer", "content": "d"}, {"role": "user", "content": "x"}]}),
    ] {
        accepted(&fake, &tok, path, &body, true).await;
    }
}

#[tokio::test]
async fn responses_refuses_what_the_real_upstream_refuses() {
    let (fake, tok) = start(FakeConfig::default()).await;
    let path = "/responses";
    let with = |patch: Value| {
        let mut b = responses("gpt-5.4", false);
        for (k, v) in patch.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let user = json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]});
    let call = |id: &str| json!({"type": "function_call", "call_id": id, "name": "Bash", "arguments": "{}"});
    let output = |id: &str| json!({"type": "function_call_output", "call_id": id, "output": "r"});
    let cases: Vec<(Value, bool, &str, &str)> = vec![
        (
            with(json!({"input": [{"type": "telepathy"}]})),
            false,
            "input[0]",
            "invalid_request_body",
        ),
        (
            with(
                json!({"input": [{"type": "message", "role": "user", "content": [{"type": "output_text", "text": "x"}]}]}),
            ),
            false,
            "input[0].content[0].type: unknown variant `output_text`",
            "invalid_request_body",
        ),
        (
            with(
                json!({"input": [user.clone(), {"type": "message", "role": "assistant", "content": [{"type": "input_text", "text": "x"}]}]}),
            ),
            false,
            "input[1].content[0].type: unknown variant `input_text`",
            "invalid_request_body",
        ),
        (
            with(
                json!({"input": [user.clone(), {"type": "function_call", "call_id": "c", "name": "Bash"}]}),
            ),
            false,
            "input[1]: missing field `arguments`",
            "invalid_request_body",
        ),
        (
            with(json!({"reasoning": {"effort": "extreme"}})),
            false,
            "reasoning.effort: unknown variant `extreme`",
            "invalid_request_body",
        ),
        (
            with(json!({"thinking": {"type": "enabled", "budget_tokens": 2000}})),
            false,
            "Unknown parameter: 'thinking'.",
            "unknown_parameter",
        ),
        (
            with(
                json!({"input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x", "cache_control": {"type": "ephemeral"}}]}]}),
            ),
            false,
            "Unknown parameter: 'input[0].content[0].cache_control'.",
            "unknown_parameter",
        ),
        (
            with(json!({"input": [user.clone(), output("call_1")]})),
            false,
            "No tool call found for function call output with call_id call_1",
            "invalid_request_body",
        ),
        (
            with(
                json!({"input": [user.clone(), call("call_1"), output("call_1"), call("call_2"), user.clone()]}),
            ),
            false,
            "No tool output found for function call call_2.",
            "invalid_request_body",
        ),
        (
            with(json!({"max_output_tokens": 1})),
            false,
            "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got 1 instead.",
            "integer_below_min_value",
        ),
        (
            with(json!({"max_output_tokens": 128_001})),
            false,
            "max_tokens is too large: 128001",
            "invalid_value",
        ),
        (
            with(json!({"reasoning": {"effort": "minimal"}})),
            false,
            "'reasoning.effort' does not support 'minimal' with this model.",
            "unsupported_value",
        ),
        (
            with(json!({"temperature": 0.7})),
            false,
            "'temperature' does not support 0.7",
            "unsupported_value",
        ),
        (
            with(json!({"stream_options": {"include_obfuscation": false}})),
            false,
            "only allowed when 'stream' is enabled",
            "invalid_value",
        ),
        (
            with(
                json!({"tools": [{"type": "function", "name": "", "parameters": {"type": "object"}}]}),
            ),
            false,
            "Invalid 'tools[0].name'",
            "invalid_value",
        ),
        (
            with(json!({"input": [user.clone(), call("call_1"),
                               {"type": "function_call_output", "call_id": "call_1",
                                "output": [{"type": "input_image", "image_url": "data:image/png;base64,AA==", "detail": "auto"}]}]})),
            false,
            "missing required Copilot-Vision-Request header",
            "invalid_request_body",
        ),
    ];
    for (body, vision, message, code) in &cases {
        let reply = refused(&fake, &tok, path, body, *vision, (400, message, true)).await;
        assert_eq!(reply["error"]["code"], *code, "{reply}");
    }
    for body in [
        responses_tool_loop(),
        with(
            json!({"max_output_tokens": 16, "reasoning": {"effort": "low", "summary": "auto"}, "temperature": 1}),
        ),
        with(json!({"input": "just text", "instructions": "be brief"})),
        with(
            json!({"input": [{"role": "user", "content": "easy"}, {"role": "assistant", "content": "easy back"}]}),
        ),
    ] {
        accepted(&fake, &tok, path, &body, true).await;
    }
}

#[test]
fn reverse_translation_of_a_chat_tool_loop() {
    let a = to_anthropic(Endpoint::ChatCompletions, &chat_tool_loop());
    let tools = json!([
        {"name": "Bash", "description": "Run a command",
         "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
        {"name": "Read", "description": "Read a file",
         "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}}]);
    assert_eq!(
        a,
        json!({"model": "gpt-4.1", "stream": true, "max_tokens": 1000, "tools": tools, "tool_choice": {"type": "auto"},
               "system": "You are Claude Code.",
               "messages": [
                   {"role": "user", "content": [{"type": "text", "text": "list files"}]},
                   {"role": "assistant", "content": [
                       {"type": "thinking", "thinking": "ls first", "signature": "claude-host:chat:op1"},
                       {"type": "text", "text": "Let me look."},
                       {"type": "tool_use", "id": "call_1", "name": "Bash", "input": {"command": "ls"}},
                       {"type": "tool_use", "id": "call_2", "name": "Read", "input": {"file_path": "/a.png"}}]},
                   {"role": "user", "content": [
                       {"type": "tool_result", "tool_use_id": "call_1", "content": "a.png"},
                       {"type": "tool_result", "tool_use_id": "call_2", "is_error": true, "content": [
                           {"type": "text", "text": "binary file"},
                           {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]},
                       {"type": "text", "text": "now summarize"}]}]})
    );
    assert_eq!(
        claude_host_protocol::messages::last_user_text(&a),
        "a.png\nbinary file\nnow summarize"
    );
}

#[test]
fn reverse_translation_of_a_responses_tool_loop() {
    let a = to_anthropic(Endpoint::Responses, &responses_tool_loop());
    assert_eq!(
        a,
        json!({"model": "gpt-5.4", "stream": true, "max_tokens": 16000, "output_config": {"effort": "high"},
               "tools": [{"name": "Bash", "description": "Run a command",
                          "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}],
               "tool_choice": {"type": "auto", "disable_parallel_tool_use": true},
               "system": "You are Claude Code.",
               "messages": [
                   {"role": "user", "content": [{"type": "text", "text": "list files"}]},
                   {"role": "system", "content": "env: linux"},
                   {"role": "assistant", "content": [
                       {"type": "thinking", "thinking": "I should run ls.\n\nThen read.", "signature": "claude-host:responses:enc1"},
                       {"type": "text", "text": "Let me look."},
                       {"type": "tool_use", "id": "call_1", "name": "Bash", "input": {"command": "ls"}}]},
                   {"role": "user", "content": [
                       {"type": "tool_result", "tool_use_id": "call_1", "content": [
                           {"type": "text", "text": "a.png"},
                           {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]},
                       {"type": "text", "text": "describe it"}]}]})
    );
    // A Messages body is its own Anthropic form.
    let m = json!({"model": "claude-opus-5.5", "messages": [{"role": "user", "content": "x"}]});
    assert_eq!(to_anthropic(Endpoint::Messages, &m), m);
}

#[tokio::test]
async fn rules_and_captures_read_openai_bodies_through_the_reverse_translation() {
    let (fake, tok) = start(FakeConfig::default()).await;
    fake.push(Rule {
        when: Match::HasToolResult,
        reply: Reply::text("saw the result"),
        times: Some(2),
    });
    fake.push(Rule {
        when: Match::LastUserContains("hello".into()),
        reply: Reply::text("hi from rules"),
        times: Some(2),
    });
    let text_of = |v: &Value| {
        v["choices"][0]["message"]["content"]
            .as_str()
            .or(v["output"][0]["content"][0]["text"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    let mut loop_chat = chat_tool_loop();
    loop_chat["stream"] = json!(false);
    loop_chat.as_object_mut().unwrap().remove("stream_options");
    let mut loop_responses = responses_tool_loop();
    loop_responses["stream"] = json!(false);
    let calls = [
        ("/chat/completions", chat("gpt-4.1", false), "hi from rules"),
        ("/responses", responses("gpt-5.4", false), "hi from rules"),
        ("/chat/completions", loop_chat, "saw the result"),
        ("/responses", loop_responses, "saw the result"),
    ];
    for (path, body, want) in &calls {
        let r = request(&fake, &tok, path, body)
            .header("copilot-vision-request", "true")
            .send()
            .await
            .unwrap();
        let (status, v) = outcome(r).await;
        assert_eq!((status, text_of(&v).as_str()), (200, *want), "{path}: {v}");
    }
    let reqs = fake.model_requests();
    let endpoints: Vec<_> = reqs.iter().map(|r| r.endpoint()).collect();
    assert_eq!(
        endpoints,
        [
            Some(Endpoint::ChatCompletions),
            Some(Endpoint::Responses),
            Some(Endpoint::ChatCompletions),
            Some(Endpoint::Responses)
        ]
    );
    assert_eq!(reqs[0].last_user_text(), "hello");
    assert_eq!(reqs[3].last_user_text(), "a.png\ndescribe it");
    assert_eq!(
        reqs[1].anthropic_json()["messages"][0]["content"][0]["text"],
        "hello"
    );
    assert_eq!(
        reqs[1].json()["input"][0]["content"][0]["text"],
        "hello",
        "json() is the body as sent"
    );
    assert!(fake.message_requests().is_empty());
    assert_eq!(fake.violations(), Vec::<String>::new());
}

/// A reply with reasoning, text and two tool calls.
fn busy_reply() -> Reply {
    Reply::blocks(vec![
        Block::Thinking {
            thinking: "First I look around.\n\nThen I read the file.".into(),
            signature: "sig-opaque-1".into(),
        },
        Block::Text(vec![
            "Let ".into(),
            "me ".into(),
            "check".into(),
            ".".into(),
        ]),
        Block::ToolUse {
            name: "Bash".into(),
            input: json!({"command": "ls -la /tmp/some/where", "description": "List the files"}),
        },
        Block::ToolUse {
            name: "Read".into(),
            input: json!({"file_path": "/tmp/some/where/notes.txt", "limit": 200}),
        },
    ])
    .with_cached_tokens(7)
}

#[tokio::test]
async fn chat_stream_is_split_and_interleaved_like_the_real_one() {
    let (fake, tok) = start(FakeConfig::default()).await;
    fake.push(always(busy_reply()));
    let body = chat("gpt-5-mini", true);
    let resp = post(&fake, &tok, "/chat/completions", &body).await;
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let raw = resp.text().await.unwrap();
    let chunks = chat_chunks(&raw);
    for (c, _) in &chunks {
        assert_eq!(
            (c.object.as_str(), c.model.as_str()),
            ("chat.completion.chunk", "gpt-5-mini")
        );
        assert_eq!(c.id, chunks[0].0.id, "one id per stream");
    }
    // The role comes first, alone.
    assert_eq!(chunks[0].0.choices[0].delta.role, Some(Role::Assistant));
    assert!(
        chunks[1..]
            .iter()
            .all(|(c, _)| c.choices.iter().all(|ch| ch.delta.role.is_none()))
    );
    // Reasoning: text fragments, then the opaque signature once, before any content.
    let deltas: Vec<&Value> = chunks
        .iter()
        .filter_map(|(_, v)| v.pointer("/choices/0/delta"))
        .collect();
    let reasoning: String = deltas
        .iter()
        .filter_map(|d| d["reasoning_text"].as_str())
        .collect();
    assert_eq!(reasoning, "First I look around.\n\nThen I read the file.");
    assert!(
        deltas
            .iter()
            .filter(|d| d.get("reasoning_text").is_some())
            .count()
            > 3
    );
    let opaque: Vec<&str> = deltas
        .iter()
        .filter_map(|d| d["reasoning_opaque"].as_str())
        .collect();
    assert_eq!(opaque, ["sig-opaque-1"]);
    let text: String = chunks
        .iter()
        .filter_map(|(c, _)| c.choices.first()?.delta.content.clone())
        .collect();
    assert_eq!(text, "Let me check.");
    assert!(
        chunks
            .iter()
            .filter(|(c, _)| c
                .choices
                .first()
                .and_then(|ch| ch.delta.content.as_deref())
                .is_some_and(|t| !t.is_empty()))
            .count()
            >= 4
    );

    // Tool calls: each call's first fragment names it; the arguments come in 5-12 byte
    // fragments; the two calls' fragments alternate.
    let frags: Vec<_> = chunks
        .iter()
        .filter_map(|(c, _)| c.choices.first()?.delta.tool_calls.clone())
        .flatten()
        .collect();
    let order: Vec<u32> = frags.iter().map(|f| f.index).collect();
    assert_eq!(&order[..4], [0, 1, 0, 1], "interleaved: {order:?}");
    let mut args = [String::new(), String::new()];
    for (k, name) in [(0, "Bash"), (1, "Read")] {
        let own: Vec<_> = frags.iter().filter(|f| f.index == k).collect();
        let first = own[0];
        assert!(
            first
                .id
                .as_deref()
                .is_some_and(|id| id.starts_with("call_"))
        );
        assert!(first.r#type.is_some());
        assert_eq!(first.function.as_ref().unwrap().name.as_deref(), Some(name));
        for (j, f) in own[1..].iter().enumerate() {
            assert!(f.id.is_none() && f.r#type.is_none());
            let piece = f.function.as_ref().unwrap().arguments.clone().unwrap();
            assert!(piece.len() <= 12, "{piece:?}");
            if j + 2 < own.len() {
                assert!(piece.len() >= 5, "{piece:?}");
            }
            args[k as usize].push_str(&piece);
        }
        assert!(own.len() > 4, "many fragments");
    }
    assert_eq!(
        serde_json::from_str::<Value>(&args[0]).unwrap()["command"],
        "ls -la /tmp/some/where"
    );
    assert_eq!(
        serde_json::from_str::<Value>(&args[1]).unwrap()["limit"],
        200
    );

    // finish_reason in a chunk of its own, then usage with no choices, then [DONE].
    let n = chunks.len();
    let (finish, finish_json) = &chunks[n - 2];
    assert_eq!(
        finish.choices[0].finish_reason,
        Some(FinishReason::ToolCalls)
    );
    assert_eq!(finish_json["choices"][0]["delta"], json!({}));
    assert!(finish.usage.is_none());
    let (usage_chunk, _) = &chunks[n - 1];
    assert!(usage_chunk.choices.is_empty());
    let usage = usage_chunk.usage.clone().unwrap();
    let anthropic = to_anthropic(Endpoint::ChatCompletions, &body);
    assert_eq!(u64::from(usage.prompt_tokens), prompt_tokens(&anthropic));
    assert_eq!(usage.prompt_tokens_details.unwrap().cached_tokens, Some(7));
    assert!(
        usage
            .completion_tokens_details
            .unwrap()
            .reasoning_tokens
            .unwrap()
            > 0
    );
    assert_eq!(
        usage.total_tokens,
        usage.prompt_tokens + usage.completion_tokens
    );
    assert!(chunks[..n - 1].iter().all(|(c, _)| c.usage.is_none()));
}

#[tokio::test]
async fn chat_usage_goes_where_configured_or_nowhere() {
    let (fake, tok) = start(FakeConfig {
        chat_usage_in_finish_chunk: true,
        ..FakeConfig::default()
    })
    .await;
    let raw = post(&fake, &tok, "/chat/completions", &chat("gpt-4.1", true))
        .await
        .text()
        .await
        .unwrap();
    let chunks = chat_chunks(&raw);
    let (last, _) = chunks.last().unwrap();
    assert_eq!(last.choices[0].finish_reason, Some(FinishReason::Stop));
    assert!(last.usage.as_ref().is_some_and(|u| u.completion_tokens > 0));
    assert!(
        chunks.iter().all(|(c, _)| !c.choices.is_empty()),
        "no usage-only chunk"
    );

    // Without stream_options.include_usage, no usage at all (as OpenAI does).
    let mut body = chat("gpt-4.1", true);
    body.as_object_mut().unwrap().remove("stream_options");
    let raw = post(&fake, &tok, "/chat/completions", &body)
        .await
        .text()
        .await
        .unwrap();
    assert!(chat_chunks(&raw).iter().all(|(c, _)| c.usage.is_none()));
}

#[tokio::test]
async fn responses_stream_has_the_real_items_and_events() {
    let (fake, tok) = start(FakeConfig::default()).await;
    fake.push(always(busy_reply()));
    let body = responses("gpt-5.4", true);
    let resp = post(&fake, &tok, "/responses", &body).await;
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let events = responses_events(&resp.bytes().await.unwrap());
    let names: Vec<&str> = events
        .iter()
        .map(|(_, v)| v["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        names[..3],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added"
        ]
    );
    assert_eq!(names.last(), Some(&"response.completed"));
    let pos = |name: &str| names.iter().position(|n| *n == name).unwrap();
    assert!(pos("response.reasoning_summary_part.added") < pos("response.content_part.added"));
    assert!(pos("response.content_part.added") < pos("response.function_call_arguments.delta"));

    // Reasoning: two summary parts, the encrypted content only on the finished item.
    let mut summary = [String::new(), String::new()];
    let mut parts_added = 0;
    let mut items_added = Vec::new();
    let mut items_done = Vec::new();
    let mut text = String::new();
    let mut args: Vec<String> = Vec::new();
    for (e, _) in &events {
        match e {
            ResponseStreamEvent::ResponseReasoningSummaryPartAdded(p) => {
                parts_added += 1;
                assert!(matches!(&p.part, SummaryPart::SummaryText(t) if t.text.is_empty()));
            }
            ResponseStreamEvent::ResponseReasoningSummaryTextDelta(d) => {
                summary[d.summary_index as usize].push_str(&d.delta);
            }
            ResponseStreamEvent::ResponseOutputItemAdded(a) => items_added.push(a.item.clone()),
            ResponseStreamEvent::ResponseOutputItemDone(d) => items_done.push(d.item.clone()),
            ResponseStreamEvent::ResponseOutputTextDelta(d) => text.push_str(&d.delta),
            ResponseStreamEvent::ResponseFunctionCallArgumentsDelta(d) => {
                assert!(d.delta.len() <= 12, "{:?}", d.delta);
                if args.len() <= d.output_index as usize - 2 {
                    args.push(String::new());
                }
                args[d.output_index as usize - 2].push_str(&d.delta);
            }
            _ => {}
        }
    }
    assert_eq!(parts_added, 2);
    assert_eq!(summary, ["First I look around.", "Then I read the file."]);
    assert_eq!(text, "Let me check.");
    assert_eq!(items_added.len(), 4);
    match (&items_added[0], &items_done[0]) {
        (OutputItem::Reasoning(a), OutputItem::Reasoning(d)) => {
            assert!(a.encrypted_content.is_none() && a.summary.is_empty());
            assert_eq!(d.encrypted_content.as_deref(), Some("sig-opaque-1"));
            assert_eq!(d.summary.len(), 2);
        }
        other => panic!("{other:?}"),
    }
    match &items_done[1] {
        OutputItem::Message(m) => {
            assert!(
                matches!(&m.content[..], [OutputMessageContent::OutputText(t)] if t.text == "Let me check.")
            );
        }
        other => panic!("{other:?}"),
    }
    let calls: Vec<_> = items_done
        .iter()
        .filter_map(|i| match i {
            OutputItem::FunctionCall(f) => Some(f.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        (calls[0].name.as_str(), calls[1].name.as_str()),
        ("Bash", "Read")
    );
    assert_ne!(calls[0].call_id, calls[1].call_id);
    assert_eq!(
        args,
        [calls[0].arguments.clone(), calls[1].arguments.clone()]
    );
    assert_eq!(
        serde_json::from_str::<Value>(&calls[1].arguments).unwrap()["limit"],
        200
    );

    let ResponseStreamEvent::ResponseCompleted(done) = &events.last().unwrap().0 else {
        panic!("ends with response.completed")
    };
    assert_eq!(done.response.status, Status::Completed);
    assert_eq!(done.response.output.len(), 4);
    let usage = done.response.usage.clone().unwrap();
    let anthropic = to_anthropic(Endpoint::Responses, &body);
    assert_eq!(u64::from(usage.input_tokens), prompt_tokens(&anthropic));
    assert_eq!(usage.input_tokens_details.cached_tokens, 7);
    assert!(usage.output_tokens_details.reasoning_tokens > 0);
    assert_eq!(usage.total_tokens, usage.input_tokens + usage.output_tokens);
}

#[tokio::test]
async fn stop_reasons_map_to_each_dialect() {
    let (fake, tok) = start(FakeConfig::default()).await;
    let cases = [
        ("end_turn", FinishReason::Stop),
        ("tool_use", FinishReason::ToolCalls),
        ("max_tokens", FinishReason::Length),
        ("refusal", FinishReason::ContentFilter),
    ];
    for (stop, finish) in cases {
        fake.push(Rule {
            when: Match::Always,
            reply: Reply::text("some words here").with_stop_reason(stop),
            times: Some(2),
        });
        let raw = post(&fake, &tok, "/chat/completions", &chat("gpt-4.1", true))
            .await
            .text()
            .await
            .unwrap();
        let chunks = chat_chunks(&raw);
        let reason = chunks
            .iter()
            .find_map(|(c, _)| c.choices.first()?.finish_reason);
        assert_eq!(reason, Some(finish), "{stop}");

        let events = responses_events(
            &post(&fake, &tok, "/responses", &responses("gpt-5.4", true))
                .await
                .bytes()
                .await
                .unwrap(),
        );
        let (last, last_json) = events.last().unwrap();
        match stop {
            "max_tokens" => {
                assert!(
                    matches!(last, ResponseStreamEvent::ResponseIncomplete(_)),
                    "{last_json}"
                );
                assert_eq!(
                    last_json["response"]["incomplete_details"]["reason"],
                    "max_output_tokens"
                );
                assert_eq!(last_json["response"]["status"], "incomplete");
            }
            _ => assert!(
                matches!(last, ResponseStreamEvent::ResponseCompleted(_)),
                "{last_json}"
            ),
        }
        let refusal_part = events.iter().any(|(e, _)| {
            matches!(e, ResponseStreamEvent::ResponseContentPartAdded(p) if matches!(p.part, OutputContent::Refusal(_)))
        });
        let refusal_text: String = events
            .iter()
            .filter_map(|(e, _)| match e {
                ResponseStreamEvent::ResponseRefusalDelta(d) => Some(d.delta.clone()),
                _ => None,
            })
            .collect();
        if stop == "refusal" {
            assert!(refusal_part);
            assert_eq!(refusal_text, "some words here");
        } else {
            assert!(!refusal_part && refusal_text.is_empty(), "{stop}");
        }
    }
}

#[tokio::test]
async fn non_streaming_replies_are_the_real_objects() {
    let (fake, tok) = start(FakeConfig::default()).await;
    fake.push(Rule {
        when: Match::Always,
        reply: busy_reply(),
        times: Some(2),
    });
    let (status, v) =
        outcome(post(&fake, &tok, "/chat/completions", &chat("gpt-5-mini", false)).await).await;
    assert_eq!(status, 200);
    let c: CreateChatCompletionResponse = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(c.object, "chat.completion");
    let choice = &c.choices[0];
    assert_eq!(choice.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(choice.message.content.as_deref(), Some("Let me check."));
    assert_eq!(choice.message.tool_calls.as_ref().unwrap().len(), 2);
    assert_eq!(
        v["choices"][0]["message"]["reasoning_opaque"],
        "sig-opaque-1"
    );
    assert_eq!(
        c.usage
            .unwrap()
            .prompt_tokens_details
            .unwrap()
            .cached_tokens,
        Some(7)
    );

    let (status, v) =
        outcome(post(&fake, &tok, "/responses", &responses("gpt-5.4", false)).await).await;
    assert_eq!(status, 200);
    let r: Response = serde_json::from_value(v).unwrap();
    assert_eq!(
        (r.object.as_str(), r.status),
        ("response", Status::Completed)
    );
    assert_eq!(r.output.len(), 4);
    assert!(
        matches!(&r.output[0], OutputItem::Reasoning(i) if i.encrypted_content.as_deref() == Some("sig-opaque-1"))
    );
    assert!(r.usage.is_some());
}

#[tokio::test]
async fn errors_use_the_openai_envelope_and_keep_reply_headers() {
    let (fake, tok) = start(FakeConfig::default()).await;
    fake.push(Rule {
        when: Match::Always,
        reply: Reply::error_before_stream(429, "rate_limit_error", "slow down")
            .with_header("retry-after", "7"),
        times: Some(2),
    });
    fake.push(Rule {
        when: Match::Always,
        reply: Reply::error_before_stream(529, "overloaded_error", "busy"),
        times: Some(1),
    });
    for (path, body) in [
        ("/chat/completions", chat("gpt-4.1", true)),
        ("/responses", responses("gpt-5.4", true)),
    ] {
        let r = post(&fake, &tok, path, &body).await;
        assert_eq!(r.status(), 429);
        assert_eq!(r.headers()["retry-after"], "7");
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            v,
            json!({"error": {"message": "slow down", "code": "rate_limit_exceeded", "type": "rate_limit_error"}})
        );
    }
    let (status, v) =
        outcome(post(&fake, &tok, "/responses", &responses("gpt-5.4", true)).await).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (529, Some("server_is_overloaded"))
    );
}

#[tokio::test]
async fn mid_stream_errors_in_each_dialect() {
    let (fake, tok) = start(FakeConfig::default()).await;
    fake.push(Rule {
        when: Match::Always,
        reply: Reply::error_mid_stream(3, "overloaded_error", "Overloaded"),
        times: Some(2),
    });
    let raw = post(&fake, &tok, "/chat/completions", &chat("gpt-4.1", true))
        .await
        .text()
        .await
        .unwrap();
    let payloads = chat_payloads(&raw);
    assert_eq!(
        payloads.len(),
        4,
        "3 chunks, then the error, and no [DONE]: {raw}"
    );
    for p in &payloads[..3] {
        serde_json::from_str::<CreateChatCompletionStreamResponse>(p).unwrap();
    }
    let err: Value = serde_json::from_str(&payloads[3]).unwrap();
    assert_eq!(
        err,
        json!({"error": {"message": "Overloaded", "code": "server_is_overloaded", "type": "server_error"}})
    );

    let events = responses_events(
        &post(&fake, &tok, "/responses", &responses("gpt-5.4", true))
            .await
            .bytes()
            .await
            .unwrap(),
    );
    assert_eq!(events.len(), 4);
    let (ResponseStreamEvent::ResponseFailed(failed), v) = &events[3] else {
        panic!("{:?}", events[3].1)
    };
    assert_eq!(failed.response.status, Status::Failed);
    assert_eq!(
        v["response"]["error"],
        json!({"code": "server_is_overloaded", "message": "Overloaded"})
    );

    // Or a bare `error` event, when configured.
    let (fake, tok) = start(FakeConfig {
        responses_error_event: true,
        ..FakeConfig::default()
    })
    .await;
    fake.push(always(Reply::error_mid_stream(
        2,
        "rate_limit_error",
        "Too many",
    )));
    let events = responses_events(
        &post(&fake, &tok, "/responses", &responses("gpt-5.4", true))
            .await
            .bytes()
            .await
            .unwrap(),
    );
    assert_eq!(events.len(), 3);
    assert_eq!(
        events[2].1,
        json!({"type": "error", "sequence_number": 2, "code": "rate_limit_exceeded", "message": "Too many", "param": null})
    );
}

/// Sends one request over a bare socket; everything the fake wrote before it closed.
async fn raw_exchange(fake: &FakeUpstream, tok: &str, path: &str, body: &Value) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = body.to_string();
    let mut sock = tokio::net::TcpStream::connect(fake.addr()).await.unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {tok}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        fake.addr(),
        body.len()
    );
    sock.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), sock.read_to_end(&mut out))
        .await
        .expect("the fake never closed the connection")
        .unwrap();
    String::from_utf8(out).unwrap()
}

#[tokio::test]
async fn truncation_and_cut_offs_in_each_dialect() {
    let (fake, tok) = start(FakeConfig::default()).await;
    fake.push(Rule {
        when: Match::LastUserContains("truncate".into()),
        reply: Reply::truncated(4),
        times: Some(2),
    });
    fake.push(Rule {
        when: Match::LastUserContains("cut".into()),
        reply: Reply::cut_off("never whole, never whole", 200),
        times: Some(3),
    });
    let ask_chat = |text: &str, stream: bool| {
        let mut b = chat("gpt-4.1", stream);
        b["messages"][0]["content"] = json!(text);
        b
    };
    let ask_responses = |text: &str| {
        let mut b = responses("gpt-5.4", true);
        b["input"][0]["content"][0]["text"] = json!(text);
        b
    };
    let raw = post(
        &fake,
        &tok,
        "/chat/completions",
        &ask_chat("truncate", true),
    )
    .await
    .text()
    .await
    .unwrap();
    let payloads = chat_payloads(&raw);
    assert_eq!(payloads.len(), 4);
    assert!(!raw.contains("[DONE]") && !raw.contains("finish_reason"));
    let events = responses_events(
        &post(&fake, &tok, "/responses", &ask_responses("truncate"))
            .await
            .bytes()
            .await
            .unwrap(),
    );
    assert_eq!(events.len(), 4);

    for (path, body) in [
        ("/chat/completions", ask_chat("cut", true)),
        ("/responses", ask_responses("cut")),
    ] {
        let wire = raw_exchange(&fake, &tok, path, &body).await;
        let (head, body) = wire.split_once("\r\n\r\n").unwrap();
        assert!(
            head.starts_with("HTTP/1.1 200 OK\r\n") && head.contains("transfer-encoding: chunked"),
            "{head}"
        );
        assert!(!body.ends_with("0\r\n\r\n"), "no last chunk: {body}");
        assert!(
            !body.contains("[DONE]") && !body.contains("response.completed"),
            "{body}"
        );
    }
    // Not streamed: the JSON object announced whole, cut after 200 bytes.
    let wire = raw_exchange(&fake, &tok, "/chat/completions", &ask_chat("cut", false)).await;
    let (head, body) = wire.split_once("\r\n\r\n").unwrap();
    let declared: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(body.len(), 200, "{body}");
    assert!(declared > 200, "{head}");
    assert!(body.starts_with("{\"id\":\"chatcmpl-fake"), "{body}");
    assert_eq!(
        fake.disconnects(),
        0,
        "scripted cuts are not client disconnects"
    );
}

#[tokio::test]
async fn silences_and_gates_in_each_dialect() {
    let (fake, tok) = start(FakeConfig::default()).await;
    let silence = Duration::from_millis(300);
    fake.push(Rule {
        when: Match::LastUserContains("after start".into()),
        reply: Reply::silent_then_text(silence, "late words"),
        times: Some(2),
    });
    fake.push(Rule {
        when: Match::LastUserContains("before first".into()),
        reply: Reply::silent_before_first_event(silence, "late words"),
        times: Some(1),
    });
    let ask_chat = |text: &str| {
        let mut b = chat("gpt-4.1", true);
        b["messages"][0]["content"] = json!(text);
        b
    };
    let ask_responses = |text: &str| {
        let mut b = responses("gpt-5.4", true);
        b["input"][0]["content"][0]["text"] = json!(text);
        b
    };

    // The first event, then silence, then the rest.
    let started = Instant::now();
    let mut resp = post(&fake, &tok, "/chat/completions", &ask_chat("after start")).await;
    let first = resp.chunk().await.unwrap().unwrap();
    let first_at = started.elapsed();
    assert!(String::from_utf8_lossy(&first).contains("\"role\":\"assistant\""));
    let mut rest = Vec::new();
    while let Some(c) = resp.chunk().await.unwrap() {
        rest.extend_from_slice(&c);
    }
    assert!(
        started.elapsed() >= silence && first_at < silence,
        "{first_at:?}"
    );
    assert!(String::from_utf8_lossy(&rest).ends_with("data: [DONE]\n\n"));

    let started = Instant::now();
    let mut resp = post(&fake, &tok, "/responses", &ask_responses("after start")).await;
    let first = resp.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).starts_with("event: response.created\n"));
    let first_at = started.elapsed();
    let rest = resp.bytes().await.unwrap();
    assert!(
        started.elapsed() >= silence && first_at < silence,
        "{first_at:?}"
    );
    assert!(String::from_utf8_lossy(&rest).contains("event: response.completed"));

    // Nothing at all until the silence ends.
    let started = Instant::now();
    let mut resp = post(&fake, &tok, "/chat/completions", &ask_chat("before first")).await;
    let _ = resp.chunk().await.unwrap().unwrap();
    assert!(started.elapsed() >= silence);

    // A gate holds the rest until opened.
    let (reply, gate) = Reply::gated("held back words", 2);
    fake.push(always(reply));
    let mut resp = post(&fake, &tok, "/responses", &responses("gpt-5.4", true)).await;
    let mut got = Vec::new();
    while got.windows(2).filter(|w| w == b"\n\n").count() < 2 {
        got.extend_from_slice(&resp.chunk().await.unwrap().unwrap());
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(200), resp.chunk())
            .await
            .is_err(),
        "nothing past the gate while it is closed"
    );
    gate.open();
    got.extend_from_slice(&resp.bytes().await.unwrap());
    let events = responses_events(&got);
    assert!(matches!(
        events.last().unwrap().0,
        ResponseStreamEvent::ResponseCompleted(_)
    ));
}

#[test]
fn the_catalog_lists_realistic_openai_models() {
    let models = claude_host_testkit::fake::default_models();
    let get = |id: &str| {
        models
            .iter()
            .find(|m| m["id"] == id)
            .unwrap_or_else(|| panic!("{id}"))
    };
    assert_eq!(get("gpt-5.4")["supported_endpoints"], json!(["/responses"]));
    assert_eq!(
        get("gpt-5.4")["capabilities"]["limits"]["max_prompt_tokens"],
        272_000
    );
    assert_eq!(
        get("gpt-5-mini")["supported_endpoints"],
        json!(["/chat/completions", "/responses"])
    );
    assert_eq!(
        get("gpt-5-mini")["billing"],
        json!({"is_premium": false, "multiplier": 0.0})
    );
    assert_eq!(
        get("gpt-4.1")["capabilities"]["supports"]["reasoning_effort"],
        Value::Null
    );
    assert_eq!(get("gemini-3.1-pro")["vendor"], "Google");
    assert_eq!(
        get("gpt-4o")["supported_endpoints"],
        json!(["/chat/completions"])
    );
    for m in &models {
        let caps = &m["capabilities"];
        if caps["type"] == "chat" {
            assert!(
                caps["tokenizer"].is_string() && caps["limits"]["max_prompt_tokens"].is_u64(),
                "{m}"
            );
            for s in ["tool_calls", "streaming", "parallel_tool_calls"] {
                assert!(caps["supports"][s].is_boolean(), "{s} of {m}");
            }
        }
    }
}
