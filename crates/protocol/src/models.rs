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

/// The API a model is called through.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ModelApi {
    /// Anthropic Messages (`/v1/messages`): the request is forwarded as Claude Code sent it.
    #[default]
    #[serde(rename = "/v1/messages")]
    Messages,
    /// OpenAI Responses (`/responses`): the request and reply are translated.
    #[serde(rename = "/responses")]
    Responses,
    /// OpenAI Chat Completions (`/chat/completions`): the request and reply are translated.
    #[serde(rename = "/chat/completions")]
    ChatCompletions,
}

impl ModelApi {
    /// The endpoint's path under the Copilot API's base URL.
    pub fn path(self) -> &'static str {
        match self {
            ModelApi::Messages => "/v1/messages",
            ModelApi::Responses => "/responses",
            ModelApi::ChatCompletions => "/chat/completions",
        }
    }
}

impl std::fmt::Display for ModelApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.path())
    }
}

impl CopilotModel {
    /// The Claude filter VS Code applies: Anthropic vendor, served on `/v1/messages`, shown in
    /// pickers, supports tool calls, and the id parses as a versioned Claude id.
    pub fn is_claude(&self) -> bool {
        self.vendor
            .as_deref()
            .is_some_and(|v| v.eq_ignore_ascii_case("anthropic"))
            && self.serves(ModelApi::Messages)
            && self.model_picker_enabled
            && self.supports("tool_calls")
            && ClaudeModelId::parse(&self.id).is_some_and(|p| !p.is_bare())
    }

    /// Whether `supported_endpoints` lists `api`.
    pub fn serves(&self, api: ModelApi) -> bool {
        self.supported_endpoints.iter().any(|e| e == api.path())
    }

    /// The API claude-host calls the model through: Anthropic's own where Copilot offers it
    /// (nothing is translated), else Responses (GPT-5 and Codex are served only there, and it
    /// carries reasoning across turns), else Chat Completions. `None`: none of them.
    pub fn api(&self) -> Option<ModelApi> {
        [
            ModelApi::Messages,
            ModelApi::Responses,
            ModelApi::ChatCompletions,
        ]
        .into_iter()
        .find(|api| self.serves(*api))
    }

    /// A model Claude Code can be driven with: a chat model shown in pickers that calls tools,
    /// on an API claude-host speaks. Claude models must also have a versioned id (VS Code's
    /// filter), since Claude Code reads features from it.
    pub fn is_agent_model(&self) -> bool {
        if self.is_claude() {
            return true;
        }
        let anthropic = self
            .vendor
            .as_deref()
            .is_some_and(|v| v.eq_ignore_ascii_case("anthropic"));
        let chat = self
            .capabilities
            .get("type")
            .and_then(Value::as_str)
            .is_none_or(|t| t == "chat");
        !anthropic
            && chat
            && self.model_picker_enabled
            && self.supports("tool_calls")
            && self.api().is_some()
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

    /// `billing.multiplier`: how many premium requests one request counts as (0 for a model
    /// the plan includes), when given.
    pub fn multiplier(&self) -> Option<f64> {
        self.extra
            .get("billing")
            .and_then(|b| b.get("multiplier"))
            .and_then(Value::as_f64)
    }

    /// Whether the model reasons before answering (it offers effort levels or a thinking
    /// budget): such models refuse sampling settings and spend output tokens on reasoning.
    pub fn reasons(&self) -> bool {
        !self.effort_levels().is_empty()
            || self.supports("adaptive_thinking")
            || self.thinking_budget().is_some()
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

/// Keeps every model Claude Code can be driven with ([`CopilotModel::is_agent_model`]): the
/// chat default first, then the Claude models, then the rest, each in catalog order.
pub fn agent_models(catalog: &[CopilotModel]) -> Vec<CopilotModel> {
    let mut out: Vec<CopilotModel> = catalog
        .iter()
        .filter(|m| m.is_agent_model())
        .cloned()
        .collect();
    out.sort_by_key(|m| (!m.is_chat_default, !m.is_claude()));
    out
}

/// One entry of the Anthropic `GET /v1/models` page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// What Copilot's catalog says of the model (claude-host's own field; absent for other
    /// upstreams). Anthropic's clients ignore fields they do not know.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copilot: Option<CopilotModelInfo>,
}

/// What Copilot's catalog says of a model, as `GET /v1/models` and `claude-host models` show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CopilotModelInfo {
    /// The API claude-host calls it through.
    pub endpoint: ModelApi,
    /// Who makes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    /// The whole context window, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// Whether it reads images.
    pub vision: bool,
    /// Whether it reasons before answering.
    pub reasoning: bool,
    /// Its reasoning-effort levels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub effort_levels: Vec<String>,
    /// Premium requests one request counts as (0: included in the plan), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub premium_multiplier: Option<f64>,
}

/// The Anthropic models page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
