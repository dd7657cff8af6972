//! Anthropic → OpenAI request translation (`claude_host_protocol::openai::translate_request`)
//! over arbitrary bodies that `MessagesRequest::parse` accepts, for targets of both dialects,
//! with and without vision, reasoning and effort levels. Input: a JSON body.
//!
//! Checks: a translated body is a JSON object naming the target's model, with `messages`
//! (Chat Completions) or `input` and `store: false` (Responses) as arrays, no Anthropic-only
//! field (`thinking`, `cache_control`, `metadata`, `system`), a `max_tokens` within the model's
//! limit; every rule named once; an image for a model without vision is refused.

use crate::input;
use claude_host_protocol::adapt::Refusal;
use claude_host_protocol::messages::MessagesRequest;
use claude_host_protocol::openai::{Dialect, Target, translate_request};
use serde_json::Value;

fn targets() -> Vec<Target> {
    let mut out = Vec::new();
    for dialect in [Dialect::ChatCompletions, Dialect::Responses] {
        for (vision, reasoning, levels) in [
            (true, true, vec!["low", "medium", "high"]),
            (false, false, vec![]),
            (true, false, vec!["minimal", "xhigh"]),
        ] {
            out.push(Target {
                model: "gpt-fuzz".into(),
                dialect,
                max_output_tokens: Some(32_000),
                supports_vision: vision,
                effort_levels: levels.into_iter().map(str::to_owned).collect(),
                reasoning,
            });
        }
    }
    out
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let Ok(req) = MessagesRequest::parse(data) else {
        return;
    };
    for target in targets() {
        let translated = match translate_request(&req, &target) {
            Ok(t) => t,
            Err(Refusal::NoVision { model }) => {
                assert!(
                    req.has_images && !target.supports_vision,
                    "refused for vision wrongly"
                );
                assert_eq!(model, target.model);
                continue;
            }
            Err(Refusal::ServerTool { .. }) => continue,
        };
        assert!(
            !req.has_images || target.supports_vision,
            "an image went to a model without vision"
        );
        let mut seen = translated.rules.clone();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), translated.rules.len(), "a rule named twice");
        let body: Value = match input::json_value(&translated.body) {
            Ok(v) => v,
            Err(e) => panic!("the translated body is not JSON: {e}"),
        };
        let Some(object) = body.as_object() else {
            panic!("the translated body is not an object");
        };
        assert_eq!(
            object.get("model").and_then(Value::as_str),
            Some("gpt-fuzz")
        );
        for field in [
            "thinking",
            "cache_control",
            "metadata",
            "system",
            "output_config",
        ] {
            assert!(!object.contains_key(field), "{field} was sent");
        }
        let list = match target.dialect {
            Dialect::ChatCompletions => "messages",
            Dialect::Responses => {
                assert_eq!(
                    object.get("store"),
                    Some(&Value::Bool(false)),
                    "store is not false"
                );
                "input"
            }
        };
        assert!(
            object.get(list).is_some_and(Value::is_array),
            "{list} is not an array"
        );
        for limit in ["max_tokens", "max_completion_tokens", "max_output_tokens"] {
            if let Some(n) = object.get(limit) {
                assert!(
                    n.as_u64().is_some_and(|n| n <= 32_000),
                    "{limit} {n} over the limit"
                );
            }
        }
        if let Some(effort) = object
            .get("reasoning_effort")
            .or_else(|| body.pointer("/reasoning/effort"))
        {
            assert!(
                target
                    .effort_levels
                    .iter()
                    .any(|l| Some(l.as_str()) == effort.as_str()),
                "effort {effort} is not offered"
            );
        }
    }
}
