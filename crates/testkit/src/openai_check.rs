//! What Copilot's `/chat/completions` and `/responses` refuse, enforced by the fake: the body
//! must deserialize into async-openai's request types (the OpenAI schema), carry no parameter
//! those types do not know, and pass the checks the real upstreams make. Messages follow
//! OpenAI's wording where it is known; Copilot's own refusals use Copilot's shape.

use crate::copilot_rules::copilot_error;
use crate::openai::Endpoint;
use async_openai::types::chat::{
    ChatCompletionRequestAssistantMessage, ChatCompletionRequestAssistantMessageContentPart,
    ChatCompletionRequestDeveloperMessage, ChatCompletionRequestFunctionMessage,
    ChatCompletionRequestSystemMessage, ChatCompletionRequestSystemMessageContentPart,
    ChatCompletionRequestToolMessage, ChatCompletionRequestToolMessageContentPart,
    ChatCompletionRequestUserMessage, ChatCompletionRequestUserMessageContentPart,
    CreateChatCompletionRequest,
};
use async_openai::types::responses::{
    CreateResponse, EasyInputMessage, FunctionCallOutputItemParam, FunctionToolCall, InputContent,
    InputItem, InputMessage, OutputMessage, OutputMessageContent, ReasoningItem,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::collections::HashSet;

/// A refusal: the status and body to answer, and whether it breaks the contract the proxy
/// promises (then it is recorded as a violation, so the test fails loudly).
#[derive(Debug)]
pub(crate) struct Refused {
    pub status: u16,
    pub body: Value,
    pub violation: Option<String>,
}

/// OpenAI's error envelope.
pub(crate) fn openai_error(message: &str, param: Option<&str>, code: Option<&str>) -> Value {
    json!({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}})
}

/// A 400 that the proxy should never provoke.
fn bad(endpoint: Endpoint, message: String, param: Option<&str>, code: &str) -> Refused {
    Refused {
        status: 400,
        violation: Some(format!("{}: {message}", endpoint.path())),
        body: openai_error(&message, param, Some(code)),
    }
}

/// The request body as JSON, or OpenAI's refusal of one that is not.
pub(crate) fn parse(endpoint: Endpoint, raw: &[u8]) -> Result<Value, Refused> {
    serde_json::from_slice(raw).map_err(|e| {
        bad(
            endpoint,
            format!("We could not parse the JSON body of your request. ({e})"),
            None,
            "invalid_request_body",
        )
    })
}

/// Checks an OpenAI request `body` for the catalog entry `model`. `tokens` is the prompt's
/// size: the [`crate::copilot_rules::prompt_tokens`] of its reverse translation.
pub(crate) fn check(
    endpoint: Endpoint,
    model: &Value,
    body: &Value,
    tokens: u64,
    vision_header: bool,
) -> Result<(), Refused> {
    let typed = match endpoint {
        Endpoint::ChatCompletions => chat_typed(body),
        Endpoint::Responses => responses_typed(body),
        Endpoint::Messages => return Ok(()),
    }
    .map_err(|message| bad(endpoint, message, None, "invalid_request_body"))?;
    unknown_fields(endpoint, body, &typed, "")?;
    match endpoint {
        Endpoint::ChatCompletions => chat_rules(body, model)?,
        _ => responses_rules(body, model)?,
    }
    shared_rules(endpoint, body, model, tokens, vision_header)
}

/// Deserializes `v` into `T`, naming the path of the first problem under `at`.
fn de<T: DeserializeOwned>(v: &Value, at: &str) -> Result<T, String> {
    serde_path_to_error::deserialize::<_, T>(v).map_err(|e| {
        let path = e.path().to_string();
        let place = match (at.is_empty(), path == ".") {
            (true, true) => "(root)".to_owned(),
            (true, false) => path,
            (false, true) => at.to_owned(),
            (false, false) => format!("{at}.{path}"),
        };
        format!("{place}: {}", e.into_inner())
    })
}

/// Each part of an array `content` as `T` (an untagged content enum only says "did not
/// match any variant"; a part says which part and why).
fn parts<T: DeserializeOwned>(m: &Value, at: &str) -> Result<(), String> {
    for (j, p) in m
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        de::<T>(p, &format!("{at}.content[{j}]"))?;
    }
    Ok(())
}

fn role(m: &Value) -> &str {
    m.get("role").and_then(Value::as_str).unwrap_or_default()
}

/// The body as `CreateChatCompletionRequest`, re-serialized; each message first as its role's
/// own type, for an error that names the message and part.
fn chat_typed(body: &Value) -> Result<Value, String> {
    for (i, m) in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("messages[{i}]");
        match role(m) {
            "user" => {
                parts::<ChatCompletionRequestUserMessageContentPart>(m, &at)?;
                de::<ChatCompletionRequestUserMessage>(m, &at).map(drop)
            }
            "assistant" => {
                parts::<ChatCompletionRequestAssistantMessageContentPart>(m, &at)?;
                de::<ChatCompletionRequestAssistantMessage>(m, &at).map(drop)
            }
            "system" => {
                parts::<ChatCompletionRequestSystemMessageContentPart>(m, &at)?;
                de::<ChatCompletionRequestSystemMessage>(m, &at).map(drop)
            }
            "developer" => de::<ChatCompletionRequestDeveloperMessage>(m, &at).map(drop),
            "tool" => {
                parts::<ChatCompletionRequestToolMessageContentPart>(m, &at)?;
                de::<ChatCompletionRequestToolMessage>(m, &at).map(drop)
            }
            "function" => de::<ChatCompletionRequestFunctionMessage>(m, &at).map(drop),
            other => Err(format!(
                "{at}.role: unknown variant `{other}`, expected one of `developer`, `system`, `user`, `assistant`, `tool`, `function`"
            )),
        }?;
    }
    let typed: CreateChatCompletionRequest = de(body, "")?;
    serde_json::to_value(&typed).map_err(|e| e.to_string())
}

/// An assistant `message` input item with an array content. The Responses API takes one
/// without `id`/`status` (Codex sends them so, and the spec's translation does), but
/// async-openai 0.43 only has `OutputMessage` for output parts, which requires both.
fn is_assistant_parts(item: &Value) -> bool {
    item.get("type")
        .and_then(Value::as_str)
        .unwrap_or("message")
        == "message"
        && role(item) == "assistant"
        && item.get("content").is_some_and(Value::is_array)
}

/// The body as `CreateResponse`, re-serialized; each input item first as its own type, for an
/// error that names the item and part.
fn responses_typed(body: &Value) -> Result<Value, String> {
    let mut patched = body.clone();
    if let Some(items) = patched.get_mut("input").and_then(Value::as_array_mut) {
        for (i, item) in items.iter_mut().enumerate() {
            let at = format!("input[{i}]");
            if is_assistant_parts(item) {
                // Only for the types' sake: the fields OutputMessage requires.
                if let Some(o) = item.as_object_mut() {
                    o.entry("id")
                        .or_insert_with(|| json!(format!("msg_input_{i}")));
                    o.entry("status").or_insert_with(|| json!("completed"));
                }
                parts::<OutputMessageContent>(item, &at)?;
                de::<OutputMessage>(item, &at)?;
                continue;
            }
            let kind = item.get("type").and_then(Value::as_str);
            match kind.unwrap_or("message") {
                "message" if item.get("content").is_some_and(Value::is_array) => {
                    parts::<InputContent>(item, &at)?;
                    if kind.is_some() {
                        de::<InputMessage>(item, &at).map(drop)
                    } else {
                        de::<EasyInputMessage>(item, &at).map(drop)
                    }
                }
                "message" => de::<EasyInputMessage>(item, &at).map(drop),
                "function_call" => de::<FunctionToolCall>(item, &at).map(drop),
                "function_call_output" => de::<FunctionCallOutputItemParam>(item, &at).map(drop),
                "reasoning" => de::<ReasoningItem>(item, &at).map(drop),
                _ => de::<InputItem>(item, &at).map(drop),
            }?;
        }
    }
    let typed: CreateResponse = de(&patched, "")?;
    serde_json::to_value(&typed).map_err(|e| e.to_string())
}

/// Copilot's extensions to Chat Completions' assistant messages (reasoning carried back).
const CHAT_EXTENSIONS: [&str; 2] = ["reasoning_text", "reasoning_opaque"];

/// Every key of `body` (not null) that the typed value lost is a parameter OpenAI does not
/// know: the real APIs refuse those ("Unknown parameter"); serde would silently drop them.
fn unknown_fields(
    endpoint: Endpoint,
    body: &Value,
    typed: &Value,
    at: &str,
) -> Result<(), Refused> {
    match (body, typed) {
        (Value::Object(b), Value::Object(t)) => {
            for (k, v) in b {
                let path = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                let extension = endpoint == Endpoint::ChatCompletions
                    && at.starts_with("messages[")
                    && !at.contains('.')
                    && CHAT_EXTENSIONS.contains(&k.as_str());
                match t.get(k) {
                    _ if v.is_null() || extension => {}
                    None => {
                        let message = if endpoint == Endpoint::ChatCompletions && at.is_empty() {
                            format!("Unrecognized request argument supplied: {k}")
                        } else {
                            format!("Unknown parameter: '{path}'.")
                        };
                        return Err(bad(endpoint, message, Some(&path), "unknown_parameter"));
                    }
                    Some(tv) => unknown_fields(endpoint, v, tv, &path)?,
                }
            }
            Ok(())
        }
        (Value::Array(b), Value::Array(t)) => {
            for (i, (v, tv)) in b.iter().zip(t).enumerate() {
                unknown_fields(endpoint, v, tv, &format!("{at}[{i}]"))?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// A reasoning model (OpenAI's o-series / GPT-5 family): the catalog offers reasoning effort.
/// Claude entries offer it too but Copilot translates their Chat Completions itself.
fn is_reasoning(model: &Value) -> bool {
    model["vendor"] != "Anthropic" && efforts(model).is_some_and(|e| !e.is_empty())
}

fn efforts(model: &Value) -> Option<&Vec<Value>> {
    model["capabilities"]["supports"]["reasoning_effort"].as_array()
}

fn chat_rules(body: &Value, model: &Value) -> Result<(), Refused> {
    let e = Endpoint::ChatCompletions;
    let msgs: &[Value] = body["messages"].as_array().map_or(&[], Vec::as_slice);
    if msgs.is_empty() {
        return Err(bad(
            e,
            "[] is too short - 'messages'".into(),
            Some("messages"),
            "invalid_request_body",
        ));
    }
    tool_pairing(msgs)?;
    for (i, m) in msgs.iter().enumerate() {
        let empty = m.get("content").is_none_or(Value::is_null)
            && m.get("tool_calls").is_none_or(Value::is_null);
        if role(m) == "assistant" && empty {
            return Err(bad(
                e,
                format!("Invalid value for 'messages[{i}].content': expected a string, got null."),
                Some(&format!("messages[{i}].content")),
                "invalid_value",
            ));
        }
    }
    let has_tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
    for key in ["tool_choice", "parallel_tool_calls"] {
        if !body[key].is_null() && !has_tools {
            return Err(bad(
                e,
                format!(
                    "Invalid value for '{key}': '{key}' is only allowed when 'tools' are specified."
                ),
                Some(key),
                "invalid_value",
            ));
        }
    }
    tool_names(e, body, |t| &t["function"]["name"])?;
    if body["stop"].as_array().is_some_and(|s| s.len() > 4) {
        return Err(bad(
            e,
            format!("{} is too long - 'stop'", body["stop"]),
            Some("stop"),
            "invalid_request_body",
        ));
    }
    if is_reasoning(model) && !body["max_tokens"].is_null() {
        return Err(bad(
            e,
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.".into(),
            Some("max_tokens"),
            "unsupported_parameter",
        ));
    }
    effort(e, model, &body["reasoning_effort"], "reasoning_effort")?;
    let max = body["max_completion_tokens"]
        .as_u64()
        .or(body["max_tokens"].as_u64());
    max_output(e, model, max)
}

/// Every `tool` message answers a call of the assistant message right before its run of tool
/// messages, and every call of an assistant message is answered before the next other message
/// (OpenAI's two refusals, with its wording).
fn tool_pairing(msgs: &[Value]) -> Result<(), Refused> {
    let e = Endpoint::ChatCompletions;
    let mut pending: Vec<String> = Vec::new();
    let mut offered: HashSet<String> = HashSet::new();
    let mut previous = "";
    for (i, m) in msgs.iter().enumerate() {
        let r = role(m);
        if r == "tool" {
            let id = m["tool_call_id"].as_str().unwrap_or_default();
            if !matches!(previous, "assistant" | "tool") || !offered.contains(id) {
                return Err(bad(
                    e,
                    format!(
                        "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'. (messages[{i}] answers tool_call_id {id:?})"
                    ),
                    Some(&format!("messages.[{i}].role")),
                    "invalid_request_body",
                ));
            }
            pending.retain(|p| p != id);
        } else {
            if !pending.is_empty() {
                return Err(bad(
                    e,
                    format!(
                        "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
                        pending.join(", ")
                    ),
                    Some("messages"),
                    "invalid_request_body",
                ));
            }
            offered.clear();
            if r == "assistant" {
                for id in m["tool_calls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c["id"].as_str())
                {
                    pending.push(id.to_owned());
                    offered.insert(id.to_owned());
                }
            }
        }
        previous = r;
    }
    if pending.is_empty() {
        Ok(())
    } else {
        Err(bad(
            e,
            format!(
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
                pending.join(", ")
            ),
            Some("messages"),
            "invalid_request_body",
        ))
    }
}

/// Function names match OpenAI's pattern (`^[a-zA-Z0-9_-]{1,64}$`).
fn tool_names(e: Endpoint, body: &Value, name: impl Fn(&Value) -> &Value) -> Result<(), Refused> {
    for (i, t) in body["tools"].as_array().into_iter().flatten().enumerate() {
        let Some(n) = name(t).as_str() else { continue };
        let ok = !n.is_empty()
            && n.len() <= 64
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !ok {
            let path = if e == Endpoint::ChatCompletions {
                format!("tools[{i}].function.name")
            } else {
                format!("tools[{i}].name")
            };
            return Err(bad(
                e,
                format!(
                    "Invalid '{path}': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]{{1,64}}$'."
                ),
                Some(&path),
                "invalid_value",
            ));
        }
    }
    Ok(())
}

/// A requested reasoning effort must be one the catalog offers for the model.
fn effort(e: Endpoint, model: &Value, requested: &Value, param: &str) -> Result<(), Refused> {
    let Some(level) = requested.as_str() else {
        return Ok(());
    };
    match efforts(model).filter(|o| !o.is_empty()) {
        None => Err(bad(
            e,
            format!("Unsupported parameter: '{param}' is not supported with this model."),
            Some(param),
            "unsupported_parameter",
        )),
        Some(offered) if !offered.iter().any(|o| o == level) => {
            let list: Vec<String> = offered
                .iter()
                .map(|o| format!("'{}'", o.as_str().unwrap_or_default()))
                .collect();
            Err(bad(
                e,
                format!(
                    "Unsupported value: '{param}' does not support '{level}' with this model. Supported values are: {}.",
                    list.join(", ")
                ),
                Some(param),
                "unsupported_value",
            ))
        }
        Some(_) => Ok(()),
    }
}

/// The output cap may not exceed the model's `max_output_tokens` (the proxy clamps it).
fn max_output(e: Endpoint, model: &Value, max: Option<u64>) -> Result<(), Refused> {
    let limit = model["capabilities"]["limits"]["max_output_tokens"].as_u64();
    if let (Some(m), Some(limit)) = (max, limit)
        && m > limit
    {
        let id = model["id"].as_str().unwrap_or_default();
        return Err(bad(
            e,
            format!(
                "max_tokens is too large: {m}. This model supports at most {limit} completion tokens ({id})."
            ),
            Some("max_tokens"),
            "invalid_value",
        ));
    }
    Ok(())
}

fn responses_rules(body: &Value, model: &Value) -> Result<(), Refused> {
    let e = Endpoint::Responses;
    let mut calls: Vec<String> = Vec::new();
    let mut answered: HashSet<String> = HashSet::new();
    for (i, item) in body["input"].as_array().into_iter().flatten().enumerate() {
        match item["type"].as_str() {
            Some("function_call") => {
                calls.push(item["call_id"].as_str().unwrap_or_default().into())
            }
            Some("function_call_output") => {
                let id = item["call_id"].as_str().unwrap_or_default();
                if !calls.iter().any(|c| c == id) {
                    return Err(bad(
                        e,
                        format!(
                            "No tool call found for function call output with call_id {id}. (input[{i}])"
                        ),
                        Some("input"),
                        "invalid_request_body",
                    ));
                }
                answered.insert(id.to_owned());
            }
            _ => {}
        }
    }
    if let Some(open) = calls.iter().find(|c| !answered.contains(*c)) {
        return Err(bad(
            e,
            format!("No tool output found for function call {open}."),
            Some("input"),
            "invalid_request_body",
        ));
    }
    tool_names(e, body, |t| &t["name"])?;
    if let Some(m) = body["max_output_tokens"].as_u64()
        && m < 16
    {
        return Err(bad(
            e,
            format!(
                "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got {m} instead."
            ),
            Some("max_output_tokens"),
            "integer_below_min_value",
        ));
    }
    effort(e, model, &body["reasoning"]["effort"], "reasoning.effort")?;
    max_output(e, model, body["max_output_tokens"].as_u64())
}

/// Whether the body sends an image anywhere (Chat `image_url` parts, Responses `input_image`).
fn has_image(v: &Value) -> bool {
    match v {
        Value::Object(map) => {
            matches!(
                map.get("type").and_then(Value::as_str),
                Some("image_url" | "input_image")
            ) || map.values().any(has_image)
        }
        Value::Array(items) => items.iter().any(has_image),
        _ => false,
    }
}

fn shared_rules(
    e: Endpoint,
    body: &Value,
    model: &Value,
    tokens: u64,
    vision_header: bool,
) -> Result<(), Refused> {
    if !body["stream_options"].is_null() && body["stream"] != true {
        return Err(bad(
            e,
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.".into(),
            Some("stream_options"),
            "invalid_value",
        ));
    }
    if is_reasoning(model) {
        for key in ["temperature", "top_p"] {
            // Reasoning models take only the default, 1.
            if let Some(v) = body[key].as_f64()
                && v != 1.0
            {
                return Err(bad(
                    e,
                    format!(
                        "Unsupported value: '{key}' does not support {v} with this model. Only the default (1) value is supported."
                    ),
                    Some(key),
                    "unsupported_value",
                ));
            }
        }
    }
    let input = if e == Endpoint::ChatCompletions {
        &body["messages"]
    } else {
        &body["input"]
    };
    if has_image(input) {
        let id = model["id"].as_str().unwrap_or_default();
        let refusal = if !vision_header {
            Some((
                "missing required Copilot-Vision-Request header for vision requests".to_owned(),
                "invalid_request_body",
            ))
        } else if model["capabilities"]["supports"]["vision"] != true {
            Some((
                format!("model \"{id}\" not supported for vision"),
                "unsupported_vision",
            ))
        } else {
            None
        };
        if let Some((message, code)) = refusal {
            return Err(Refused {
                status: 400,
                violation: Some(format!("{}: {message}", e.path())),
                body: copilot_error(&message, code),
            });
        }
    }
    if let Some(limit) = model["capabilities"]["limits"]["max_prompt_tokens"].as_u64() {
        let n = tokens;
        if n > limit {
            // A real outcome (a long session), not a contract breach: no violation.
            return Err(Refused {
                status: 400,
                violation: None,
                body: copilot_error(
                    &format!("prompt token count of {n} exceeds the limit of {limit}"),
                    "model_max_prompt_tokens_exceeded",
                ),
            });
        }
    }
    Ok(())
}
