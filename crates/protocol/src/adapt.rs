//! Fitting a Messages request to what a Copilot model accepts.
//!
//! Claude Code builds its requests for Anthropic's API and its own idea of each model; GitHub
//! Copilot's `/v1/messages` enforces the model's catalog entry instead and answers a 400 for
//! anything outside it. Each rule here changes one top-level field, only when the catalog says
//! the request would be refused, and is named in the request log; everything else passes
//! byte for byte. docs/PROXY.md lists the rules with the error each prevents.

use crate::messages::MessagesRequest;
use serde_json::{Map, Value, json};

/// What a model accepts, from the upstream's catalog.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelRules {
    /// The model's id upstream (for messages).
    pub model: String,
    /// Largest `max_tokens`.
    pub max_output_tokens: Option<u64>,
    /// Takes images.
    pub supports_vision: bool,
    /// Takes `thinking: {type: "adaptive"}` (and refuses `enabled`).
    pub adaptive_thinking: bool,
    /// The `budget_tokens` range of `thinking: {type: "enabled"}`, when the model thinks so.
    pub thinking_budget: Option<(u64, u64)>,
    /// `output_config.effort` levels; empty: the model takes none.
    pub effort_levels: Vec<String>,
}

/// One change made to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// `max_tokens` lowered to the model's output limit.
    MaxTokensClamped,
    /// `thinking.type` `enabled` → `adaptive` for a model that only thinks adaptively.
    ThinkingToAdaptive,
    /// `thinking.type` `adaptive` → `enabled` with a budget, for a model without adaptive
    /// thinking.
    ThinkingToEnabled,
    /// `thinking.budget_tokens` moved into the model's range (and below `max_tokens`).
    ThinkingBudgetClamped,
    /// `thinking` removed: the model does not think, or has no room to.
    ThinkingRemoved,
    /// `output_config.effort` moved to a level the model offers.
    EffortMapped,
    /// `output_config.effort` removed: the model takes no effort level.
    EffortRemoved,
}

impl Rule {
    /// The name in logs and docs.
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::MaxTokensClamped => "max_tokens_clamped",
            Rule::ThinkingToAdaptive => "thinking_to_adaptive",
            Rule::ThinkingToEnabled => "thinking_to_enabled",
            Rule::ThinkingBudgetClamped => "thinking_budget_clamped",
            Rule::ThinkingRemoved => "thinking_removed",
            Rule::EffortMapped => "effort_mapped",
            Rule::EffortRemoved => "effort_removed",
        }
    }
}

/// Why a request cannot be served by this model at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// It carries an image and the model reads none.
    NoVision {
        /// The model.
        model: String,
    },
    /// It asks for a tool the upstream runs on Anthropic's servers only.
    ServerTool {
        /// The tool's `name`.
        name: String,
        /// Its `type` (e.g. `web_search_20250305`).
        kind: String,
    },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NoVision { model } => write!(
                f,
                "{model} does not accept images on GitHub Copilot (its catalog entry has no vision support); remove the image or pick a model that reads images"
            ),
            Refusal::ServerTool { name, kind } => write!(
                f,
                "GitHub Copilot does not run Anthropic's server tool {name:?} ({kind}); it is not available through claude-host's Copilot upstream"
            ),
        }
    }
}

/// The fields to replace (`None`: remove) and the rules that did so.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Adapted {
    /// Top-level fields with their new raw JSON, or `None` to drop them.
    pub fields: Vec<(String, Option<String>)>,
    /// What was changed.
    pub rules: Vec<Rule>,
}

impl Adapted {
    /// Nothing to change.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }
}

/// Anthropic's server-executed tool families (their `type` starts with these).
const SERVER_TOOLS: [&str; 3] = ["web_search_", "web_fetch_", "code_execution_"];

/// The effort levels in rising order.
const EFFORTS: [&str; 5] = ["low", "medium", "high", "xhigh", "max"];

fn field(req: &MessagesRequest, name: &str) -> Option<Value> {
    req.field(name)
        .and_then(|raw| serde_json::from_str(raw.get()).ok())
}

/// Works out what `req` must lose or change to be accepted by the model `rules` describe.
pub fn adapt(req: &MessagesRequest, rules: &ModelRules) -> Result<Adapted, Refusal> {
    if req.has_images && !rules.supports_vision {
        return Err(Refusal::NoVision {
            model: rules.model.clone(),
        });
    }
    if let Some(tools) = req.field("tools")
        && SERVER_TOOLS
            .iter()
            .any(|t| tools.get().contains(&format!("\"{t}")))
        && let Some(Value::Array(tools)) = field(req, "tools")
    {
        for t in &tools {
            let kind = t.get("type").and_then(Value::as_str).unwrap_or_default();
            if SERVER_TOOLS.iter().any(|s| kind.starts_with(s)) {
                return Err(Refusal::ServerTool {
                    name: t
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or(kind)
                        .to_owned(),
                    kind: kind.to_owned(),
                });
            }
        }
    }
    let mut out = Adapted::default();
    let requested_max = field(req, "max_tokens").and_then(|v| v.as_u64());
    let mut max_tokens = requested_max;
    if let (Some(m), Some(limit)) = (max_tokens, rules.max_output_tokens)
        && m > limit
    {
        max_tokens = Some(limit);
        out.rules.push(Rule::MaxTokensClamped);
        out.fields
            .push(("max_tokens".to_owned(), Some(limit.to_string())));
    }
    if let Some(Value::Object(thinking)) = field(req, "thinking") {
        adapt_thinking(thinking, max_tokens, rules, &mut out);
    }
    if let Some(Value::Object(config)) = field(req, "output_config") {
        adapt_effort(config, rules, &mut out);
    }
    Ok(out)
}

fn adapt_thinking(
    mut thinking: Map<String, Value>,
    max_tokens: Option<u64>,
    rules: &ModelRules,
    out: &mut Adapted,
) {
    let kind = thinking
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let mut changed = None;
    match kind.as_str() {
        "enabled" if rules.adaptive_thinking => {
            thinking.remove("budget_tokens");
            thinking.insert("type".into(), json!("adaptive"));
            changed = Some(Rule::ThinkingToAdaptive);
        }
        "adaptive" if !rules.adaptive_thinking => match rules.thinking_budget {
            Some((min, max)) => match budget_room(max, min, max_tokens) {
                Some(budget) => {
                    thinking.insert("type".into(), json!("enabled"));
                    thinking.insert("budget_tokens".into(), json!(budget));
                    changed = Some(Rule::ThinkingToEnabled);
                }
                None => changed = Some(Rule::ThinkingRemoved),
            },
            None => changed = Some(Rule::ThinkingRemoved),
        },
        "enabled" => {
            let asked = thinking.get("budget_tokens").and_then(Value::as_u64);
            match (rules.thinking_budget, asked) {
                (None, _) => changed = Some(Rule::ThinkingRemoved),
                (Some((min, max)), Some(asked)) => match budget_room(asked, min, max_tokens) {
                    Some(budget) if budget.min(max) != asked => {
                        thinking.insert("budget_tokens".into(), json!(budget.min(max)));
                        changed = Some(Rule::ThinkingBudgetClamped);
                    }
                    Some(_) => {}
                    None => changed = Some(Rule::ThinkingRemoved),
                },
                (Some(_), None) => {}
            }
        }
        _ => {}
    }
    match changed {
        Some(Rule::ThinkingRemoved) => {
            out.fields.push(("thinking".into(), None));
            out.rules.push(Rule::ThinkingRemoved);
        }
        Some(rule) => {
            out.fields
                .push(("thinking".into(), Some(Value::Object(thinking).to_string())));
            out.rules.push(rule);
        }
        None => {}
    }
}

/// A budget of about `wanted` inside `[min, …)` and below `max_tokens` (the API's rule), or
/// `None` when there is no room for the model's smallest budget.
fn budget_room(wanted: u64, min: u64, max_tokens: Option<u64>) -> Option<u64> {
    let ceiling = max_tokens.map_or(u64::MAX, |m| m.saturating_sub(1));
    let budget = wanted.max(min).min(ceiling);
    (budget >= min).then_some(budget)
}

fn adapt_effort(mut config: Map<String, Value>, rules: &ModelRules, out: &mut Adapted) {
    let Some(asked) = config
        .get("effort")
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return;
    };
    if rules.effort_levels.contains(&asked) {
        return;
    }
    let rule = if rules.effort_levels.is_empty() {
        config.remove("effort");
        Rule::EffortRemoved
    } else {
        let rank = |l: &str| EFFORTS.iter().position(|e| *e == l);
        let asked_rank = rank(&asked).unwrap_or(1);
        // The highest level at or below the one asked for, else the lowest offered.
        let level = rules
            .effort_levels
            .iter()
            .filter(|l| rank(l).is_some_and(|r| r <= asked_rank))
            .max_by_key(|l| rank(l))
            .or_else(|| rules.effort_levels.iter().min_by_key(|l| rank(l)))
            .cloned()
            .unwrap_or_default();
        config.insert("effort".into(), json!(level));
        Rule::EffortMapped
    };
    out.rules.push(rule);
    out.fields.push((
        "output_config".into(),
        (!config.is_empty()).then(|| Value::Object(config).to_string()),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn req(extra: Value) -> MessagesRequest {
        let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        MessagesRequest::parse(&serde_json::to_vec(&body).unwrap()).unwrap()
    }

    fn opus() -> ModelRules {
        ModelRules {
            model: "claude-opus-5.5".into(),
            max_output_tokens: Some(64_000),
            supports_vision: true,
            adaptive_thinking: true,
            thinking_budget: Some((1024, 32_000)),
            effort_levels: vec!["low".into(), "medium".into(), "high".into()],
        }
    }

    fn sonnet45() -> ModelRules {
        ModelRules {
            model: "claude-sonnet-4.5".into(),
            max_output_tokens: Some(64_000),
            supports_vision: true,
            adaptive_thinking: false,
            thinking_budget: Some((1024, 32_000)),
            effort_levels: Vec::new(),
        }
    }

    fn changed(a: &Adapted, name: &str) -> Option<Value> {
        a.fields.iter().find(|(k, _)| k == name).map(|(_, v)| {
            v.as_deref()
                .map_or(Value::Null, |s| serde_json::from_str(s).unwrap())
        })
    }

    #[test]
    fn a_request_that_fits_is_left_alone() {
        let r = req(
            json!({"max_tokens": 32000, "thinking": {"type": "adaptive", "display": "omitted"},
                           "output_config": {"effort": "medium"}}),
        );
        assert!(adapt(&r, &opus()).unwrap().is_empty());
        let r = req(
            json!({"max_tokens": 32000, "thinking": {"type": "enabled", "budget_tokens": 31999}}),
        );
        assert!(adapt(&r, &sonnet45()).unwrap().is_empty());
    }

    #[test]
    fn max_tokens_and_the_budget_under_it_are_clamped() {
        let r = req(
            json!({"max_tokens": 128000, "thinking": {"type": "enabled", "budget_tokens": 127999}}),
        );
        let a = adapt(&r, &sonnet45()).unwrap();
        assert_eq!(
            a.rules,
            [Rule::MaxTokensClamped, Rule::ThinkingBudgetClamped]
        );
        assert_eq!(changed(&a, "max_tokens"), Some(json!(64000)));
        assert_eq!(
            changed(&a, "thinking"),
            Some(json!({"type": "enabled", "budget_tokens": 32000}))
        );
        let r =
            req(json!({"max_tokens": 8000, "thinking": {"type": "enabled", "budget_tokens": 100}}));
        let a = adapt(&r, &sonnet45()).unwrap();
        assert_eq!(
            changed(&a, "thinking"),
            Some(json!({"type": "enabled", "budget_tokens": 1024}))
        );
        // No room for the smallest budget: no thinking.
        let r =
            req(json!({"max_tokens": 1000, "thinking": {"type": "enabled", "budget_tokens": 500}}));
        assert_eq!(
            adapt(&r, &sonnet45()).unwrap().rules,
            [Rule::ThinkingRemoved]
        );
    }

    #[test]
    fn thinking_takes_the_form_the_model_has() {
        let r = req(
            json!({"max_tokens": 32000, "thinking": {"type": "enabled", "budget_tokens": 4000, "display": "updates"}}),
        );
        let a = adapt(&r, &opus()).unwrap();
        assert_eq!(a.rules, [Rule::ThinkingToAdaptive]);
        assert_eq!(
            changed(&a, "thinking"),
            Some(json!({"type": "adaptive", "display": "updates"}))
        );
        let r = req(json!({"max_tokens": 20000, "thinking": {"type": "adaptive"}}));
        let a = adapt(&r, &sonnet45()).unwrap();
        assert_eq!(a.rules, [Rule::ThinkingToEnabled]);
        assert_eq!(
            changed(&a, "thinking"),
            Some(json!({"type": "enabled", "budget_tokens": 19999}))
        );
        let mut plain = sonnet45();
        plain.thinking_budget = None;
        let a = adapt(&r, &plain).unwrap();
        assert_eq!(
            (a.rules.clone(), changed(&a, "thinking")),
            (vec![Rule::ThinkingRemoved], Some(Value::Null))
        );
    }

    #[test]
    fn effort_moves_to_a_level_the_model_offers() {
        let r = req(json!({"output_config": {"effort": "max"}}));
        let a = adapt(&r, &opus()).unwrap();
        assert_eq!(a.rules, [Rule::EffortMapped]);
        assert_eq!(
            changed(&a, "output_config"),
            Some(json!({"effort": "high"}))
        );
        let r = req(json!({"output_config": {"effort": "medium", "format": {"type": "json"}}}));
        let a = adapt(&r, &sonnet45()).unwrap();
        assert_eq!(a.rules, [Rule::EffortRemoved]);
        assert_eq!(
            changed(&a, "output_config"),
            Some(json!({"format": {"type": "json"}}))
        );
        let r = req(json!({"output_config": {"effort": "medium"}}));
        assert_eq!(
            changed(&adapt(&r, &sonnet45()).unwrap(), "output_config"),
            Some(Value::Null)
        );
        let mut high_only = opus();
        high_only.effort_levels = vec!["high".into(), "max".into()];
        let r = req(json!({"output_config": {"effort": "low"}}));
        assert_eq!(
            changed(&adapt(&r, &high_only).unwrap(), "output_config"),
            Some(json!({"effort": "high"}))
        );
    }

    #[test]
    fn images_and_server_tools_are_refused_with_a_reason() {
        let body = json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}}]}]});
        let r = MessagesRequest::parse(&serde_json::to_vec(&body).unwrap()).unwrap();
        let mut blind = opus();
        blind.supports_vision = false;
        let err = adapt(&r, &blind).unwrap_err();
        assert!(err.to_string().contains("does not accept images"), "{err}");
        assert!(adapt(&r, &opus()).is_ok());
        let r = req(json!({"tools": [{"name": "Bash", "input_schema": {}},
                                      {"type": "web_search_20250305", "name": "web_search", "max_uses": 8}]}));
        assert_eq!(
            adapt(&r, &opus()).unwrap_err(),
            Refusal::ServerTool {
                name: "web_search".into(),
                kind: "web_search_20250305".into()
            }
        );
    }
}
