//! Idle CLIs: a session's Claude Code process is stopped once nothing has used it for a
//! while (never while a turn, a confirmation, a client tool call, a subagent or a background
//! task is live) and started again, resuming the session, when it is needed. A client that
//! opens the session or starts typing a prompt starts it ahead of the prompt.

use super::*;

impl Task {
    /// Keeps the CLI's background tasks (started, ended, or listed anew) from its frames;
    /// hands the frame back.
    pub(super) fn track_tasks<'f>(&mut self, frame: &'f Frame) -> &'f Frame {
        let FrameKind::System(subtype) = &frame.kind else {
            return frame;
        };
        let id = |v: &Value| {
            v.get("task_id")
                .or_else(|| v.get("id"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        match subtype.as_str() {
            "task_started" => {
                if let Some(t) = id(&Value::Object(frame.raw.clone())) {
                    self.running_tasks.insert(t);
                }
            }
            "task_notification" => {
                if let Some(t) = id(&Value::Object(frame.raw.clone())) {
                    self.running_tasks.remove(&t);
                }
            }
            "background_tasks_changed" => {
                self.running_tasks = frame
                    .raw
                    .get("tasks")
                    .and_then(Value::as_array)
                    .map(|tasks| tasks.iter().filter_map(id).collect())
                    .unwrap_or_default();
            }
            _ => {}
        }
        frame
    }

    /// Whether the live CLI does nothing anyone waits for.
    pub(super) fn cli_idle(&self) -> bool {
        matches!(self.cli, Cli::Live(_))
            && self.turn.is_none()
            && self.settling.is_none()
            && self.waiting.is_empty()
            && self.client_calls.is_empty()
            && self.queue.is_empty()
            && self.applying.is_none()
            && self.config_queue.is_empty()
            && self.running_tasks.is_empty()
            && !self.subagents.iter().any(|s| s.running())
    }

    /// When the live CLI is to be stopped (`None`: not while it is in use).
    pub(super) fn cli_deadline(&mut self) -> Option<Instant> {
        match self.cli_idle_limit {
            Some(limit) if self.cli_idle() => {
                Some(*self.cli_idle_since.get_or_insert_with(Instant::now) + limit)
            }
            _ => {
                self.cli_idle_since = None;
                None
            }
        }
    }

    /// Stops the CLI if it has been idle long enough.
    pub(super) async fn evict_if_due(&mut self, now: Instant) {
        let due = matches!((self.cli_idle_limit, self.cli_idle_since),
            (Some(limit), Some(since)) if now >= since + limit);
        if due && self.cli_idle() {
            tracing::info!(session = %self.id, "stopping an idle Claude Code process; it resumes when needed");
            self.stop_cli().await;
            self.cli_idle_since = None;
            self.running_tasks.clear();
            self.evicted = true;
        }
    }

    /// Starts the CLI ahead of a prompt a client is about to send (`why`: what showed it).
    pub(super) fn rewarm(&mut self, why: &str) {
        if matches!(self.cli, Cli::None) && !self.closing && self.turn.is_none() {
            tracing::debug!(session = %self.id, why, "starting Claude Code ahead of a prompt");
            self.start_cli();
        }
    }
}
