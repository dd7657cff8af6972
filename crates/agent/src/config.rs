//! A session's configuration as AHP shows it (`SessionState.config`): model, thinking effort
//! and permission mode, with the schema clients render as pickers and that changes are
//! checked against.

use crate::models::THINKING_LEVEL;
use ahp_types::common::JsonObject;
use ahp_types::state::{
    SessionConfigPropertySchema, SessionConfigSchema, SessionConfigState, SessionModelInfo,
};
use serde_json::Value;
use std::collections::HashMap;

/// The model property.
pub const MODEL: &str = "model";
/// The thinking-effort property.
pub const EFFORT: &str = "effort";
/// The permission-mode property.
pub const PERMISSION_MODE: &str = "permissionMode";

/// The permission modes a client may pick, with labels.
const MODES: [(&str, &str); 3] = [
    ("default", "Ask before edits and commands"),
    ("acceptEdits", "Accept edits"),
    ("plan", "Plan only"),
];
const BYPASS: (&str, &str) = ("bypassPermissions", "Bypass all permission checks");

fn property(
    title: &str,
    values: Vec<Value>,
    labels: Option<Vec<String>>,
) -> SessionConfigPropertySchema {
    SessionConfigPropertySchema {
        r#type: "string".into(),
        title: title.into(),
        description: None,
        default: values.first().cloned(),
        r#enum: Some(values),
        enum_labels: labels,
        enum_descriptions: None,
        read_only: None,
        items: None,
        min_items: None,
        max_items: None,
        properties: None,
        required: None,
        additional_properties: None,
        enum_dynamic: None,
        session_mutable: Some(true),
    }
}

/// The effort levels a model offers (its `configSchema`'s `thinkingLevel`).
pub fn effort_levels(model: &SessionModelInfo) -> Vec<Value> {
    model
        .config_schema
        .as_ref()
        .and_then(|s| s.properties.get(THINKING_LEVEL))
        .and_then(|p| p.r#enum.clone())
        .unwrap_or_default()
}

/// The schema: models (default first), the default model's effort levels, and the permission
/// modes this host allows.
pub fn schema(models: &[SessionModelInfo], allow_bypass: bool) -> SessionConfigSchema {
    let mut properties = HashMap::new();
    if let Some(first) = models.first() {
        properties.insert(
            MODEL.to_owned(),
            property(
                "Model",
                models.iter().map(|m| Value::String(m.id.clone())).collect(),
                Some(models.iter().map(|m| m.name.clone()).collect()),
            ),
        );
        let levels = effort_levels(first);
        if !levels.is_empty() {
            let mut effort = property("Thinking effort", levels, None);
            effort.default = first
                .config_schema
                .as_ref()
                .and_then(|s| s.properties.get(THINKING_LEVEL))
                .and_then(|p| p.default.clone())
                .or(effort.default);
            properties.insert(EFFORT.to_owned(), effort);
        }
    }
    let modes: Vec<(&str, &str)> = MODES
        .into_iter()
        .chain(allow_bypass.then_some(BYPASS))
        .collect();
    properties.insert(
        PERMISSION_MODE.to_owned(),
        property(
            "Permissions",
            modes
                .iter()
                .map(|(v, _)| Value::String((*v).into()))
                .collect(),
            Some(modes.iter().map(|(_, l)| (*l).to_owned()).collect()),
        ),
    );
    SessionConfigSchema {
        r#type: "object".into(),
        properties,
        required: None,
    }
}

/// `values` with the schema's defaults filled in where a value is missing.
pub fn with_defaults(schema: &SessionConfigSchema, mut values: JsonObject) -> JsonObject {
    for (k, p) in &schema.properties {
        if !values.contains_key(k)
            && let Some(d) = &p.default
        {
            values.insert(k.clone(), d.clone());
        }
    }
    values
}

/// Checks changes against the schema: a property with a fixed set of values takes only one
/// of them (this is where a host that does not allow `bypassPermissions` refuses it).
/// Properties the schema does not name are kept as they are (clients send their own keys).
pub fn check(schema: &SessionConfigSchema, changes: &JsonObject) -> Result<(), String> {
    for (k, v) in changes {
        let Some(p) = schema.properties.get(k) else {
            continue;
        };
        // Clearing a value (an effort for a model without levels) is always allowed.
        if v.is_null() {
            continue;
        }
        if p.session_mutable == Some(false) {
            return Err(format!("{k} cannot change after the session is created"));
        }
        if let Some(allowed) = &p.r#enum
            && !allowed.contains(v)
        {
            let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
            return Err(format!(
                "{k} {v} is not one of the values this host offers: {}",
                list.join(", ")
            ));
        }
    }
    Ok(())
}

/// VS Code's own session keys in this host's terms. `isolation` must be `folder` (sessions
/// run in their folder; worktrees are not made); `mode` and `autoApprove` become a
/// `permissionMode` when the values name none: `plan` → `plan`; `autopilot`, or approving
/// everything → `bypassPermissions` (refused later unless the host allows it); `assisted` →
/// `acceptEdits`; `default` → `default`. Their own keys stay in the values.
pub fn map_client_keys(values: &mut JsonObject) -> Result<(), String> {
    let get = |k: &str| values.get(k).and_then(Value::as_str).map(str::to_owned);
    match get("isolation").as_deref() {
        None | Some("folder") => {}
        Some(other) => {
            return Err(format!(
                "isolation {other:?} is not offered by this host: sessions run in their folder"
            ));
        }
    }
    if values.contains_key(PERMISSION_MODE) {
        return Ok(());
    }
    let mode = match (get("mode").as_deref(), get("autoApprove").as_deref()) {
        (Some("plan"), _) => "plan",
        (Some("autopilot"), _) | (_, Some("autopilot" | "autoApprove")) => "bypassPermissions",
        (_, Some("assisted")) => "acceptEdits",
        (_, Some("default")) => "default",
        _ => return Ok(()),
    };
    values.insert(PERMISSION_MODE.into(), Value::String(mode.into()));
    Ok(())
}

/// A session's config state: the schema and the values in force.
pub fn state(schema: SessionConfigSchema, values: JsonObject) -> SessionConfigState {
    SessionConfigState { schema, values }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn model(id: &str) -> SessionModelInfo {
        serde_json::from_value(json!({"id": id, "provider": "claude", "name": id,
            "configSchema": {"type": "object", "properties": {"thinkingLevel": {"type": "string",
            "title": "Thinking effort", "enum": ["low", "medium"], "default": "medium"}}}}))
        .unwrap()
    }

    #[test]
    fn vs_code_keys_become_permission_modes() {
        let mapped = |v: serde_json::Value| {
            let mut o = v.as_object().unwrap().clone();
            map_client_keys(&mut o).map(|()| o.get(PERMISSION_MODE).cloned())
        };
        assert_eq!(
            mapped(json!({"isolation": "folder", "autoApprove": "default"})),
            Ok(Some(json!("default")))
        );
        assert_eq!(
            mapped(json!({"mode": "plan", "autoApprove": "autopilot"})),
            Ok(Some(json!("plan")))
        );
        assert_eq!(
            mapped(json!({"autoApprove": "autopilot"})),
            Ok(Some(json!("bypassPermissions")))
        );
        assert_eq!(
            mapped(json!({"mode": "autopilot"})),
            Ok(Some(json!("bypassPermissions")))
        );
        assert_eq!(
            mapped(json!({"autoApprove": "assisted"})),
            Ok(Some(json!("acceptEdits")))
        );
        assert_eq!(mapped(json!({"mode": "interactive"})), Ok(None));
        assert_eq!(
            mapped(json!({"autoApprove": "autopilot", "permissionMode": "default"})),
            Ok(Some(json!("default"))),
            "an explicit mode wins"
        );
        assert!(
            mapped(json!({"isolation": "worktree"}))
                .unwrap_err()
                .contains("worktree")
        );
    }

    #[test]
    fn bypass_is_offered_only_when_allowed() {
        let strict = schema(&[model("claude-a"), model("claude-b")], false);
        let bypass = json!({"permissionMode": "bypassPermissions"});
        let err = check(&strict, bypass.as_object().unwrap()).unwrap_err();
        assert!(err.contains("permissionMode"), "{err}");
        let open = schema(&[model("claude-a")], true);
        assert!(check(&open, bypass.as_object().unwrap()).is_ok());
        assert!(
            check(&strict, json!({"model": "claude-z"}).as_object().unwrap()).is_err(),
            "unknown model"
        );
        assert!(
            check(&strict, json!({"isolation": "folder"}).as_object().unwrap()).is_ok(),
            "a client's own key"
        );
        let filled = with_defaults(&strict, JsonObject::new());
        assert_eq!(filled["model"], "claude-a");
        assert_eq!(filled["effort"], "medium");
        assert_eq!(filled["permissionMode"], "default");
    }
}
