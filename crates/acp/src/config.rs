//! A session's settings (AHP `SessionState.config`) as ACP config options and modes.

use agent_client_protocol::v1::schema::{
    SessionConfigOption, SessionConfigOptionCategory, SessionConfigSelectOption, SessionMode,
    SessionModeState,
};
use ahp_types::state::{SessionConfigPropertySchema, SessionConfigState};
use serde_json::Value;

pub(crate) use claude_host_agent::config::{EFFORT, MODEL, PERMISSION_MODE};

/// The ACP id of the permission-mode option (the name Claude's other ACP adapter uses).
pub(crate) const MODE_OPTION: &str = "mode";

/// The options an editor shows, in the order it shows them: ACP id, session key, name, kind.
const OPTIONS: [(&str, &str, &str, Category); 3] = [
    (MODEL, MODEL, "Model", Category::Model),
    (EFFORT, EFFORT, "Thinking effort", Category::Thought),
    (MODE_OPTION, PERMISSION_MODE, "Permissions", Category::Mode),
];

#[derive(Clone, Copy)]
enum Category {
    Model,
    Thought,
    Mode,
}

/// The session key an ACP config option sets.
pub(crate) fn key_of(option_id: &str) -> Option<&'static str> {
    OPTIONS
        .iter()
        .find(|(id, ..)| *id == option_id)
        .map(|(_, key, ..)| *key)
}

fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A property's choices: (value, label).
fn choices(p: &SessionConfigPropertySchema) -> Vec<(String, String)> {
    let values = p.r#enum.clone().unwrap_or_default();
    let labels = p.enum_labels.clone().unwrap_or_default();
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let value = as_text(v);
            let label = labels.get(i).cloned().unwrap_or_else(|| value.clone());
            (value, label)
        })
        .collect()
}

fn current(state: &SessionConfigState, key: &str, p: &SessionConfigPropertySchema) -> String {
    state
        .values
        .get(key)
        .filter(|v| !v.is_null())
        .or(p.default.as_ref())
        .map(as_text)
        .unwrap_or_default()
}

/// The session's settings as select options (those with choices).
pub(crate) fn options(state: &SessionConfigState) -> Vec<SessionConfigOption> {
    OPTIONS
        .iter()
        .filter_map(|(id, key, name, category)| {
            let p = state.schema.properties.get(*key)?;
            let choices = choices(p);
            if choices.is_empty() {
                return None;
            }
            let options: Vec<SessionConfigSelectOption> = choices
                .into_iter()
                .map(|(v, l)| SessionConfigSelectOption::new(v, l))
                .collect();
            let category = match category {
                Category::Model => SessionConfigOptionCategory::Model,
                Category::Thought => SessionConfigOptionCategory::ThoughtLevel,
                Category::Mode => SessionConfigOptionCategory::Mode,
            };
            Some(
                SessionConfigOption::select(*id, *name, current(state, key, p), options)
                    .category(category),
            )
        })
        .collect()
}

/// The permission modes as ACP session modes.
pub(crate) fn modes(state: &SessionConfigState) -> Option<SessionModeState> {
    let p = state.schema.properties.get(PERMISSION_MODE)?;
    let available: Vec<SessionMode> = choices(p)
        .into_iter()
        .map(|(id, label)| SessionMode::new(id.clone(), label))
        .collect();
    if available.is_empty() {
        return None;
    }
    Some(SessionModeState::new(
        current(state, PERMISSION_MODE, p),
        available,
    ))
}
