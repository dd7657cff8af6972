//! Fitting a Messages request to what a Copilot model accepts.
//!
//! Claude Code builds its requests for Anthropic's API and its own idea of each model; GitHub
//! Copilot's `/v1/messages` enforces the model's catalog entry instead and answers a 400 for
//! anything outside it. Each rule here changes one top-level field, only when the catalog says
//! the request would be refused, and is named in the request log; everything else passes
//! byte for byte. docs/PROXY.md lists the rules with the error each prevents.

use crate::messages::MessagesRequest;
use crate::request_kind::MessagePeek;
use indexmap::IndexMap;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use std::borrow::Cow;

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
    /// Thinking blocks another model's reasoning became (signed `claude-host:…`) removed from
    /// the history: Anthropic would refuse their signatures.
    ForeignThinkingRemoved,
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
            Rule::ForeignThinkingRemoved => "foreign_thinking_removed",
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
pub(crate) const SERVER_TOOLS: [&str; 3] = ["web_search_", "web_fetch_", "code_execution_"];

/// The effort levels in rising order (OpenAI's `none` and `minimal` below Anthropic's).
const EFFORTS: [&str; 7] = ["none", "minimal", "low", "medium", "high", "xhigh", "max"];

/// The prefix of the signature claude-host gives a thinking block made from another model's
/// reasoning (`openai`), so the block is recognised when it comes back.
pub const FOREIGN_SIGNATURE_PREFIX: &str = "claude-host:";

/// The level to ask for when `asked` is wanted and the model offers `offered`: `asked` itself
/// when offered, else the highest offered level below it, else the lowest offered; `None` when
/// nothing is offered. An unknown `asked` counts as `medium`.
pub(crate) fn fit_effort<'a>(asked: &str, offered: &'a [String]) -> Option<&'a str> {
    if let Some(same) = offered.iter().find(|l| *l == asked) {
        return Some(same);
    }
    let rank = |l: &str| EFFORTS.iter().position(|e| *e == l);
    let asked_rank = rank(asked).or_else(|| rank("medium")).unwrap_or_default();
    let ranked = || offered.iter().filter_map(|l| rank(l).map(|r| (r, l)));
    ranked()
        .filter(|(r, _)| *r <= asked_rank)
        .max_by_key(|(r, _)| *r)
        .or_else(|| ranked().min_by_key(|(r, _)| *r))
        .map(|(_, l)| l.as_str())
        .or_else(|| offered.first().map(String::as_str))
}

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
    let messages = req.field("messages").map(RawValue::get).unwrap_or("[]");
    let kept = without_foreign_thinking(messages);
    if let Some(kept) = &kept {
        out.rules.push(Rule::ForeignThinkingRemoved);
        out.fields.push(("messages".to_owned(), Some(kept.clone())));
    }
    if let Some(Value::Object(thinking)) = field(req, "thinking") {
        adapt_thinking(thinking, max_tokens, rules, &mut out);
        if thinking_sent_enabled(req, &out)
            && last_assistant_lacks_thinking(kept.as_deref().unwrap_or(messages))
        {
            // Anthropic refuses a tool loop whose assistant turn has no thinking while
            // thinking is enabled; the turn came from a model whose reasoning does not count.
            out.fields.retain(|(name, _)| name != "thinking");
            out.rules.retain(|r| {
                !matches!(
                    r,
                    Rule::ThinkingToAdaptive
                        | Rule::ThinkingToEnabled
                        | Rule::ThinkingBudgetClamped
                )
            });
            out.fields.push(("thinking".into(), None));
            out.rules.push(Rule::ThinkingRemoved);
        }
    }
    if let Some(Value::Object(config)) = field(req, "output_config") {
        adapt_effort(config, rules, &mut out);
    }
    Ok(out)
}

#[derive(Deserialize)]
struct BlockPeek<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    signature: Option<Cow<'a, str>>,
}

impl BlockPeek<'_> {
    fn is_foreign_thinking(&self) -> bool {
        self.kind.as_deref() == Some("thinking")
            && self
                .signature
                .as_deref()
                .is_some_and(|s| s.starts_with(FOREIGN_SIGNATURE_PREFIX))
    }
}

fn blocks(content: Option<&RawValue>) -> Vec<&RawValue> {
    content
        .filter(|c| c.get().starts_with('['))
        .and_then(|c| serde_json::from_str(c.get()).ok())
        .unwrap_or_default()
}

/// `messages` (raw JSON) without the thinking blocks made from other models' reasoning, and
/// without the assistant messages that held nothing else; `None` when there are none. Every
/// other message and block is kept byte for byte.
fn without_foreign_thinking(messages: &str) -> Option<String> {
    // Nearly every request has none: one substring search settles those.
    if !messages.contains(FOREIGN_SIGNATURE_PREFIX) {
        return None;
    }
    let list: Vec<&RawValue> = serde_json::from_str(messages).ok()?;
    let mut out = String::with_capacity(messages.len());
    let mut changed = false;
    out.push('[');
    for message in list {
        let kept = rewrite_assistant(message);
        let text = match &kept {
            None => message.get(),
            Some(None) => {
                changed = true;
                continue;
            }
            Some(Some(rewritten)) => {
                changed = true;
                rewritten.as_str()
            }
        };
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str(text);
    }
    out.push(']');
    changed.then_some(out)
}

/// `None`: the message is kept as it is; `Some(None)`: it is left empty and removed;
/// `Some(Some(json))`: it is rewritten without its foreign thinking blocks.
fn rewrite_assistant(message: &RawValue) -> Option<Option<String>> {
    let peek: MessagePeek = serde_json::from_str(message.get()).ok()?;
    if peek.role.as_deref() != Some("assistant") {
        return None;
    }
    let all = blocks(peek.content);
    let kept: Vec<&RawValue> = all
        .iter()
        .copied()
        .filter(|b| {
            !serde_json::from_str::<BlockPeek>(b.get()).is_ok_and(|p| p.is_foreign_thinking())
        })
        .collect();
    if kept.len() == all.len() {
        return None;
    }
    if kept.is_empty() {
        return Some(None);
    }
    let fields: IndexMap<String, &RawValue> = serde_json::from_str(message.get()).ok()?;
    let mut out = String::with_capacity(message.get().len());
    out.push('{');
    for (i, (key, value)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(key).ok()?);
        out.push(':');
        if key == "content" {
            out.push('[');
            for (j, block) in kept.iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                out.push_str(block.get());
            }
            out.push(']');
        } else {
            out.push_str(value.get());
        }
    }
    out.push('}');
    Some(Some(out))
}

/// Whether the request goes out with `thinking.type: "enabled"` after fitting.
fn thinking_sent_enabled(req: &MessagesRequest, out: &Adapted) -> bool {
    let sent = match out.fields.iter().find(|(name, _)| name == "thinking") {
        Some((_, None)) => return false,
        Some((_, Some(changed))) => serde_json::from_str::<Value>(changed).ok(),
        None => field(req, "thinking"),
    };
    sent.as_ref()
        .and_then(|t| t.get("type"))
        .and_then(Value::as_str)
        == Some("enabled")
}

/// Whether the last assistant message calls a tool without a thinking block of its own.
fn last_assistant_lacks_thinking(messages: &str) -> bool {
    let list: Vec<&RawValue> = serde_json::from_str(messages).unwrap_or_default();
    let Some(last) = list.iter().rev().find_map(|m| {
        serde_json::from_str::<MessagePeek>(m.get())
            .ok()
            .filter(|p| p.role.as_deref() == Some("assistant"))
    }) else {
        return false;
    };
    let kinds: Vec<BlockPeek> = blocks(last.content)
        .iter()
        .filter_map(|b| serde_json::from_str(b.get()).ok())
        .collect();
    let has = |k: &str| kinds.iter().any(|b| b.kind.as_deref() == Some(k));
    has("tool_use") && !has("thinking") && !has("redacted_thinking")
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
    let rule = match fit_effort(&asked, &rules.effort_levels) {
        None => {
            config.remove("effort");
            Rule::EffortRemoved
        }
        Some(level) => {
            config.insert("effort".into(), json!(level));
            Rule::EffortMapped
        }
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

    fn with_history(messages: Value, extra: Value) -> MessagesRequest {
        let mut body = json!({"model": "m", "max_tokens": 32000, "messages": messages});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        MessagesRequest::parse(&serde_json::to_vec(&body).unwrap()).unwrap()
    }

    #[test]
    fn foreign_thinking_is_removed_for_claude_and_empty_turns_with_it() {
        let messages = json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "t", "signature": "claude-host:responses:E"}]},
            {"role": "user", "content": "again"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "mine", "signature": "Eq=="},
                {"type": "thinking", "thinking": "t", "signature": "claude-host:chat:O"},
                {"type": "text", "text": "ok", "cache_control": {"type": "ephemeral"}}]},
            {"role": "user", "content": "more"}
        ]);
        let a = adapt(&with_history(messages, json!({})), &sonnet45()).unwrap();
        assert_eq!(a.rules, [Rule::ForeignThinkingRemoved]);
        assert_eq!(
            changed(&a, "messages"),
            Some(json!([
                {"role": "user", "content": "hi"},
                {"role": "user", "content": "again"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "mine", "signature": "Eq=="},
                    {"type": "text", "text": "ok", "cache_control": {"type": "ephemeral"}}]},
                {"role": "user", "content": "more"}
            ]))
        );
        // Claude's own blocks, or the marker inside a text, change nothing.
        let own = json!([{"role": "assistant", "content": [
            {"type": "thinking", "thinking": "x", "signature": "Eq=="},
            {"type": "text", "text": "claude-host:chat:"}]}]);
        assert!(
            adapt(&with_history(own, json!({})), &sonnet45())
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_tool_loop_without_its_thinking_goes_out_without_thinking() {
        let loop_from = |thinking: Value| {
            json!([
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [thinking,
                    {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}
            ])
        };
        let enabled = json!({"thinking": {"type": "enabled", "budget_tokens": 4000}});
        let foreign = loop_from(
            json!({"type": "thinking", "thinking": "t", "signature": "claude-host:chat:O"}),
        );
        let a = adapt(&with_history(foreign.clone(), enabled.clone()), &sonnet45()).unwrap();
        assert_eq!(
            a.rules,
            [Rule::ForeignThinkingRemoved, Rule::ThinkingRemoved]
        );
        assert_eq!(changed(&a, "thinking"), Some(Value::Null));
        // A turn with its own thinking keeps thinking on.
        let own = loop_from(json!({"type": "thinking", "thinking": "t", "signature": "Eq=="}));
        assert!(
            adapt(&with_history(own, enabled), &sonnet45())
                .unwrap()
                .is_empty()
        );
        // Adaptive thinking does not need the turn's thinking: it stays.
        let a = adapt(
            &with_history(foreign.clone(), json!({"thinking": {"type": "adaptive"}})),
            &opus(),
        )
        .unwrap();
        assert_eq!(a.rules, [Rule::ForeignThinkingRemoved]);
        // Adaptive made enabled for a model without it is enabled when sent.
        let a = adapt(
            &with_history(foreign, json!({"thinking": {"type": "adaptive"}})),
            &sonnet45(),
        )
        .unwrap();
        assert_eq!(
            a.rules,
            [Rule::ForeignThinkingRemoved, Rule::ThinkingRemoved]
        );
        assert_eq!(a.fields.iter().filter(|(k, _)| k == "thinking").count(), 1);
    }
}
