//! The Copilot model catalog (`GET {copilot_api}/models`) and the Anthropic models page
//! (`GET /v1/models`) the proxy serves.

use crate::model_id::ClaudeModelId;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One entry of Copilot's `/models` list. Unknown fields are kept in `extra`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CopilotModel {
    /// The Copilot id, e.g. `claude-sonnet-4.5`.
    pub id: String,
    /// Display name.
    #[serde(default)]
    pub name: Option<String>,
    /// Vendor, `Anthropic` for Claude.
    #[serde(default)]
    pub vendor: Option<String>,
    /// Endpoints the model is served on, e.g. `/v1/messages`.
    #[serde(default)]
    pub supported_endpoints: Vec<String>,
    /// Shown in model pickers.
    #[serde(default)]
    pub model_picker_enabled: bool,
    /// The default chat model.
    #[serde(default)]
    pub is_chat_default: bool,
    /// Capabilities (`supports`, `limits`, …).
    #[serde(default)]
    pub capabilities: Value,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl CopilotModel {
    /// The Claude filter VS Code applies: Anthropic vendor, served on `/v1/messages`, shown in
    /// pickers, supports tool calls, and the id parses as a versioned Claude id.
    pub fn is_claude(&self) -> bool {
        self.vendor
            .as_deref()
            .is_some_and(|v| v.eq_ignore_ascii_case("anthropic"))
            && self.supported_endpoints.iter().any(|e| e == "/v1/messages")
            && self.model_picker_enabled
            && self
                .capabilities
                .pointer("/supports/tool_calls")
                .and_then(Value::as_bool)
                .unwrap_or(false)
            && ClaudeModelId::parse(&self.id).is_some_and(|p| !p.is_bare())
    }

    /// The reasoning-effort levels the model supports, if any.
    pub fn effort_levels(&self) -> Vec<String> {
        self.capabilities
            .pointer("/supports/reasoning_effort")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether `capabilities.supports.<key>` is `true`.
    pub fn supports(&self, key: &str) -> bool {
        self.capabilities
            .get("supports")
            .and_then(|s| s.get(key))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// `capabilities.limits.<key>` as a number.
    pub fn limit(&self, key: &str) -> Option<u64> {
        self.capabilities
            .get("limits")
            .and_then(|l| l.get(key))
            .and_then(Value::as_u64)
    }

    /// `capabilities.supports.{min,max}_thinking_budget`, when both are given.
    pub fn thinking_budget(&self) -> Option<(u64, u64)> {
        let get = |k: &str| {
            self.capabilities
                .get("supports")
                .and_then(|s| s.get(k))
                .and_then(Value::as_u64)
        };
        Some((get("min_thinking_budget")?, get("max_thinking_budget")?))
    }

    /// `billing.is_premium`, when given.
    pub fn is_premium(&self) -> Option<bool> {
        self.extra
            .get("billing")
            .and_then(|b| b.get("is_premium"))
            .and_then(Value::as_bool)
    }

    /// The id in the form Claude Code uses (`claude-sonnet-4-5`).
    pub fn sdk_id(&self) -> String {
        ClaudeModelId::parse(&self.id).map_or_else(|| self.id.clone(), |p| p.sdk_id())
    }
}

/// Keeps the Claude models of a catalog, the chat default first (stable otherwise).
pub fn claude_models(catalog: &[CopilotModel]) -> Vec<CopilotModel> {
    let mut out: Vec<CopilotModel> = catalog.iter().filter(|m| m.is_claude()).cloned().collect();
    out.sort_by_key(|m| !m.is_chat_default);
    out
}

/// One entry of the Anthropic `GET /v1/models` page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnthropicModel {
    /// Model id in Claude Code's form.
    pub id: String,
    /// Always `model`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Display name.
    pub display_name: String,
    /// RFC 3339 creation time (unknown for Copilot models: the Unix epoch).
    pub created_at: String,
    /// Largest prompt the upstream accepts (Copilot's `max_prompt_tokens`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_input_tokens: Option<u64>,
    /// Largest `max_tokens` the upstream accepts, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

/// The Anthropic models page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelsPage {
    /// The models.
    pub data: Vec<AnthropicModel>,
    /// Always false: the list is complete.
    pub has_more: bool,
    /// First id, or null.
    pub first_id: Option<String>,
    /// Last id, or null.
    pub last_id: Option<String>,
}

impl ModelsPage {
    /// Builds a page from entries.
    pub fn new(data: Vec<AnthropicModel>) -> Self {
        ModelsPage {
            first_id: data.first().map(|m| m.id.clone()),
            last_id: data.last().map(|m| m.id.clone()),
            data,
            has_more: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn model(v: Value) -> CopilotModel {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn claude_filter() {
        let good = json!({"id":"claude-sonnet-4.5","vendor":"Anthropic","supported_endpoints":["/v1/messages"],"model_picker_enabled":true,"capabilities":{"supports":{"tool_calls":true}}});
        assert!(model(good.clone()).is_claude());
        let mut no_ep = good.clone();
        no_ep["supported_endpoints"] = json!(["/chat/completions"]);
        assert!(!model(no_ep).is_claude());
        let mut hidden = good.clone();
        hidden["model_picker_enabled"] = json!(false);
        assert!(!model(hidden).is_claude());
        let mut gpt = good.clone();
        gpt["vendor"] = json!("OpenAI");
        assert!(!model(gpt).is_claude());
        let mut auto = good.clone();
        auto["id"] = json!("auto");
        assert!(!model(auto).is_claude());
        let m = model(good);
        assert_eq!(m.sdk_id(), "claude-sonnet-4-5");
    }

    #[test]
    fn default_first() {
        let a = model(
            json!({"id":"claude-sonnet-4.5","vendor":"Anthropic","supported_endpoints":["/v1/messages"],"model_picker_enabled":true,"capabilities":{"supports":{"tool_calls":true}}}),
        );
        let mut b = a.clone();
        b.id = "claude-opus-5.5".into();
        b.is_chat_default = true;
        let out = claude_models(&[a, b]);
        assert_eq!(out[0].id, "claude-opus-5.5");
    }
}
