//! Claude Code's subagents as the agent sees them: which calls start one, what their input
//! says, and what a session's transcripts keep of them.

use ahp_types::state::Turn;
use serde_json::Value;

/// Whether a tool's calls start a subagent.
pub(crate) fn spawns_subagent(tool: &str) -> bool {
    matches!(tool, "Agent" | "Task")
}

/// What a subagent call's input says about it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Spawn {
    /// The subagent's prompt (its chat's first message).
    pub prompt: String,
    /// The subagent type (`general-purpose`, a project agent, …).
    pub agent_name: Option<String>,
    /// The short description the model gave the call.
    pub description: Option<String>,
    /// Whether the call returns at once and the subagent runs on in the background.
    pub background: bool,
}

impl Spawn {
    /// Reads a subagent call's input.
    pub(crate) fn of(input: &Value) -> Spawn {
        let text = |k: &str| {
            input
                .get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        Spawn {
            prompt: text("prompt").unwrap_or_default(),
            agent_name: text("subagent_type"),
            description: text("description"),
            // Claude Code runs agents in the background unless told otherwise.
            background: input
                .get("run_in_background")
                .and_then(Value::as_bool)
                .unwrap_or(true),
        }
    }

    /// The chat's title: the description, else the agent's name.
    pub(crate) fn title(&self) -> String {
        self.description
            .clone()
            .or_else(|| self.agent_name.clone())
            .unwrap_or_else(|| "Subagent".to_owned())
    }
}

/// A subagent's chat as its transcript left it.
#[derive(Debug, Clone)]
pub(crate) struct RestoredSubagent {
    /// The tool call that started it.
    pub call: String,
    /// Its turns (one per run).
    pub turns: Vec<Turn>,
}
