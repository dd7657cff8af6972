//! What the real Copilot `/v1/messages` refuses, enforced by the fake: a test cannot pass
//! against an upstream more lenient than the one users have. The messages and codes are
//! Copilot's (docs/PROXY.md and `shared/reference/copilot-upstream.md` §6.2 name where each
//! was seen); where Copilot's exact wording is unknown, Anthropic's is used.

use serde_json::{Value, json};
use std::sync::OnceLock;

/// Copilot's own error body (`{"error": {"message", "code"}}`, not Anthropic's envelope).
pub(crate) fn copilot_error(message: &str, code: &str) -> Value {
    json!({"error": {"message": message, "code": code}})
}

fn tokenizer() -> &'static tiktoken_rs::CoreBPE {
    static BPE: OnceLock<tiktoken_rs::CoreBPE> = OnceLock::new();
    // The vocabulary ships inside the crate: building it cannot fail.
    #[allow(clippy::expect_used)]
    BPE.get_or_init(|| tiktoken_rs::o200k_base().expect("the bundled o200k_base vocabulary loads"))
}

/// Tokens per image, whatever its size (what the fake charges instead of base64 text).
pub const IMAGE_TOKENS: u64 = 1_600;
/// Tokens per base64 document.
pub const DOCUMENT_TOKENS: u64 = 3_000;

/// The prompt's size as the fake counts it: `o200k_base` (the tokenizer Copilot's catalog
/// names for Claude models) over the JSON of `system`, `messages` and `tools`; images at a
/// flat [`IMAGE_TOKENS`], base64 documents at [`DOCUMENT_TOKENS`].
pub fn prompt_tokens(body: &Value) -> u64 {
    let mut fixed = 0;
    let mut text = String::new();
    for key in ["system", "messages", "tools"] {
        if let Some(v) = body.get(key) {
            let mut v = v.clone();
            fixed += strip_payloads(&mut v);
            text.push_str(&v.to_string());
        }
    }
    text_tokens(&text) + fixed
}

/// `o200k_base`'s token count of `text`.
pub fn text_tokens(text: &str) -> u64 {
    tokenizer().encode_ordinary(text).len() as u64
}

fn strip_payloads(v: &mut Value) -> u64 {
    match v {
        Value::Object(map) => match map.get("type").and_then(Value::as_str) {
            Some("image") => {
                map.remove("source");
                IMAGE_TOKENS
            }
            Some("document")
                if map.get("source").and_then(|s| s.get("type")) == Some(&json!("base64")) =>
            {
                map.remove("source");
                DOCUMENT_TOKENS
            }
            _ => map.values_mut().map(strip_payloads).sum(),
        },
        Value::Array(items) => items.iter_mut().map(strip_payloads).sum(),
        _ => 0,
    }
}

fn has_image(v: &Value) -> bool {
    match v {
        Value::Object(map) => {
            map.get("type").and_then(Value::as_str) == Some("image") || map.values().any(has_image)
        }
        Value::Array(items) => items.iter().any(has_image),
        _ => false,
    }
}

/// The refusal Copilot would answer `body` with for `model` (a catalog entry), if any:
/// (status, body). `tokens` is the body's [`prompt_tokens`], counted once per request by the
/// caller, which reports it too: counting a 50 KB prompt takes the fake about 3 ms.
pub(crate) fn refusal(
    model: &Value,
    body: &Value,
    tokens: u64,
    vision_header: bool,
    premium_exhausted: bool,
) -> Option<(u16, Value)> {
    let id = model["id"].as_str().unwrap_or_default();
    let supports = &model["capabilities"]["supports"];
    let limits = &model["capabilities"]["limits"];
    let bad = |message: String, code: &str| Some((400, copilot_error(&message, code)));
    if premium_exhausted && model["billing"]["is_premium"] != false {
        return Some((402, copilot_error("You have no quota", "quota_exceeded")));
    }
    if let Some(tools) = body["tools"].as_array() {
        for t in tools {
            let kind = t["type"].as_str().unwrap_or_default();
            if ["web_search_", "web_fetch_", "code_execution_"]
                .iter()
                .any(|s| kind.starts_with(s))
            {
                return bad(
                    format!("tool type \"{kind}\" is not supported"),
                    "invalid_request_body",
                );
            }
        }
    }
    if has_image(&body["messages"]) {
        if !vision_header {
            return bad(
                "missing required Copilot-Vision-Request header for vision requests".into(),
                "invalid_request_body",
            );
        }
        if supports["vision"] != true {
            return bad(
                format!("model \"{id}\" not supported for vision"),
                "unsupported_vision",
            );
        }
    }
    let max_tokens = body["max_tokens"].as_u64();
    if let (Some(m), Some(limit)) = (max_tokens, limits["max_output_tokens"].as_u64())
        && m > limit
    {
        return bad(
            format!(
                "max_tokens: {m} > {limit}, which is the maximum allowed number of output tokens for {id}"
            ),
            "invalid_request_body",
        );
    }
    let thinking = &body["thinking"];
    match thinking["type"].as_str() {
        Some("enabled") if supports["adaptive_thinking"] == true => {
            return bad(
                "thinking.type.enabled is not supported for this model. Use thinking.type.adaptive and output_config.effort to control thinking behavior.".into(),
                "invalid_request_body",
            );
        }
        Some("enabled") => {
            let budget = thinking["budget_tokens"].as_u64().unwrap_or(0);
            let (min, max) = (
                supports["min_thinking_budget"].as_u64(),
                supports["max_thinking_budget"].as_u64(),
            );
            let (Some(min), Some(max)) = (min, max) else {
                return bad(
                    format!("thinking is not supported for {id}"),
                    "invalid_request_body",
                );
            };
            if budget < min || budget > max {
                return bad(
                    format!(
                        "thinking.budget_tokens: {budget} is outside the range {min}-{max} for {id}"
                    ),
                    "invalid_request_body",
                );
            }
            if max_tokens.is_some_and(|m| budget >= m) {
                return bad(
                    "max_tokens must be greater than thinking.budget_tokens".into(),
                    "invalid_request_body",
                );
            }
        }
        Some("adaptive") if supports["adaptive_thinking"] != true => {
            return bad(
                format!("adaptive thinking is not supported for {id}"),
                "invalid_request_body",
            );
        }
        _ => {}
    }
    if let Some(effort) = body["output_config"]["effort"].as_str() {
        let offered = supports["reasoning_effort"].as_array();
        if !offered.is_some_and(|o| o.iter().any(|e| e == effort)) {
            return bad(
                format!("output_config.effort: \"{effort}\" is not supported for {id}"),
                "invalid_request_body",
            );
        }
    }
    if let Some(limit) = limits["max_prompt_tokens"].as_u64() {
        let n = tokens;
        if n > limit {
            return bad(
                format!("prompt token count of {n} exceeds the limit of {limit}"),
                "model_max_prompt_tokens_exceeded",
            );
        }
    }
    None
}
