//! What an editor shows for one of Claude Code's tool calls: its ACP kind, where it acts, the
//! diff it makes, and a to-do list as a plan.

use agent_client_protocol::v1::schema::{
    Diff, Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus, ToolCallContent, ToolCallLocation,
    ToolKind,
};
use serde_json::Value;
use std::path::Path;

/// The tool whose calls are shown as the session's plan rather than as tool calls.
pub(crate) const TODO_WRITE: &str = "TodoWrite";

/// The ACP kind of a Claude Code tool (editors pick icons and grouping by it).
pub(crate) fn kind(tool: &str) -> ToolKind {
    match tool {
        "Read" | "NotebookRead" => ToolKind::Read,
        "Write" | "Edit" | "MultiEdit" | "NotebookEdit" => ToolKind::Edit,
        "Bash" | "BashOutput" | "KillShell" | "KillBash" => ToolKind::Execute,
        "Glob" | "Grep" | "LS" | "ToolSearch" => ToolKind::Search,
        "WebFetch" | "WebSearch" => ToolKind::Fetch,
        "Task" | "Agent" => ToolKind::Think,
        "ExitPlanMode" | "EnterPlanMode" => ToolKind::SwitchMode,
        _ => ToolKind::Other,
    }
}

/// Whether the tool's result is its diff (an edit's text result adds nothing to it).
pub(crate) fn shows_diff(tool: &str) -> bool {
    kind(tool) == ToolKind::Edit
}

fn str_field<'a>(input: &'a Value, key: &str) -> Option<&'a str> {
    input.get(key).and_then(Value::as_str)
}

/// The file or folder the call acts on.
fn target_path(input: &Value) -> Option<&str> {
    str_field(input, "file_path")
        .or_else(|| str_field(input, "notebook_path"))
        .or_else(|| str_field(input, "path"))
}

/// The call's title as editors show it ("Edit src/a.rs", the command a Bash call runs), from
/// its input alone, so a replayed call reads as it did live; `None` for tools without one.
pub(crate) fn title(tool: &str, input: &Value, cwd: &Path) -> Option<String> {
    let path = || {
        target_path(input).map(|p| {
            Path::new(p)
                .strip_prefix(cwd)
                .map_or_else(|_| p.to_owned(), |r| r.display().to_string())
        })
    };
    let field = |k: &str| str_field(input, k).map(str::to_owned);
    match tool {
        "Read" | "NotebookRead" => path().map(|p| format!("Read {p}")),
        "Write" => path().map(|p| format!("Write {p}")),
        "Edit" | "MultiEdit" | "NotebookEdit" => path().map(|p| format!("Edit {p}")),
        "Bash" => field("command"),
        "Glob" => field("pattern").map(|p| format!("Find {p}")),
        "Grep" => field("pattern").map(|p| format!("grep {p:?}")),
        "WebFetch" => field("url").map(|u| format!("Fetch {u}")),
        "WebSearch" => field("query").map(|q| format!("{q:?}")),
        "Task" | "Agent" => field("description"),
        _ => None,
    }
}

/// Where the call acts, for "follow the agent" in the editor.
pub(crate) fn locations(input: &Value) -> Vec<ToolCallLocation> {
    let Some(path) = target_path(input) else {
        return Vec::new();
    };
    let mut loc = ToolCallLocation::new(path);
    if let Some(line) = input.get("offset").and_then(Value::as_u64) {
        loc = loc.line(u32::try_from(line).unwrap_or(u32::MAX));
    }
    vec![loc]
}

/// The diff an edit tool makes, from its input: Edit's and MultiEdit's replacements, or the
/// whole new file of a Write (shown against nothing: the old content is not in the input).
pub(crate) fn diffs(tool: &str, input: &Value) -> Vec<ToolCallContent> {
    let Some(path) = str_field(input, "file_path") else {
        return Vec::new();
    };
    let diff = |old: Option<&str>, new: &str| {
        ToolCallContent::Diff(Diff::new(path, new).old_text(old.map(str::to_owned)))
    };
    match tool {
        "Write" => str_field(input, "content")
            .map(|c| vec![diff(None, c)])
            .unwrap_or_default(),
        "Edit" => match (
            str_field(input, "old_string"),
            str_field(input, "new_string"),
        ) {
            (Some(old), Some(new)) => vec![diff(Some(old), new)],
            _ => Vec::new(),
        },
        "MultiEdit" => input
            .get("edits")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|e| {
                Some(diff(
                    Some(str_field(e, "old_string")?),
                    str_field(e, "new_string")?,
                ))
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// A TodoWrite call's list as an ACP plan.
pub(crate) fn plan(input: &Value) -> Option<Plan> {
    let todos = input.get("todos")?.as_array()?;
    let entries = todos
        .iter()
        .filter_map(|t| {
            let content = str_field(t, "content")?;
            let status = match str_field(t, "status") {
                Some("completed") => PlanEntryStatus::Completed,
                Some("in_progress") => PlanEntryStatus::InProgress,
                _ => PlanEntryStatus::Pending,
            };
            let priority = match str_field(t, "priority") {
                Some("high") => PlanEntryPriority::High,
                Some("low") => PlanEntryPriority::Low,
                _ => PlanEntryPriority::Medium,
            };
            Some(PlanEntry::new(content, priority, status))
        })
        .collect();
    Some(Plan::new(entries))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn edits_become_diffs_with_their_file() {
        let d = diffs(
            "Edit",
            &json!({"file_path": "/p/a.rs", "old_string": "x", "new_string": "y"}),
        );
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(
            v,
            json!([{"type": "diff", "path": "/p/a.rs", "oldText": "x", "newText": "y"}])
        );
        let w = serde_json::to_value(diffs(
            "Write",
            &json!({"file_path": "/p/b", "content": "new"}),
        ))
        .unwrap();
        assert_eq!(w[0]["newText"], "new");
        assert!(w[0].get("oldText").is_none_or(Value::is_null));
        let m = diffs(
            "MultiEdit",
            &json!({"file_path": "/p/c", "edits": [
                {"old_string": "1", "new_string": "2"}, {"old_string": "3", "new_string": "4"}]}),
        );
        assert_eq!(m.len(), 2);
        assert!(diffs("Bash", &json!({"command": "ls"})).is_empty());
    }

    #[test]
    fn kinds_locations_and_plans() {
        assert_eq!(kind("Bash"), ToolKind::Execute);
        assert_eq!(kind("mcp__x__y"), ToolKind::Other);
        let cwd = Path::new("/w");
        assert_eq!(
            title("Edit", &json!({"file_path": "/w/src/a.rs"}), cwd).as_deref(),
            Some("Edit src/a.rs")
        );
        assert_eq!(
            title("Write", &json!({"file_path": "/elsewhere/b"}), cwd).as_deref(),
            Some("Write /elsewhere/b")
        );
        assert_eq!(
            title("Bash", &json!({"command": "ls -la"}), cwd).as_deref(),
            Some("ls -la")
        );
        assert_eq!(title("mcp__x__y", &json!({}), cwd), None);
        let l = serde_json::to_value(locations(&json!({"file_path": "/a", "offset": 7}))).unwrap();
        assert_eq!(l, json!([{"path": "/a", "line": 7}]));
        let p = plan(&json!({"todos": [
            {"content": "one", "status": "completed", "activeForm": "x"},
            {"content": "two", "status": "in_progress"}]}))
        .unwrap();
        let v = serde_json::to_value(p).unwrap();
        assert_eq!(v["entries"][0]["status"], "completed");
        assert_eq!(v["entries"][1]["status"], "in_progress");
        assert_eq!(v["entries"][1]["priority"], "medium");
    }
}
