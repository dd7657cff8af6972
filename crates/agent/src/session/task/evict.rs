//! Idle CLIs: a session's Claude Code process is stopped once nothing has used it for a
//! while (never while a turn, a confirmation, a client tool call, a subagent or a background
//! task is live) and started again, resuming the session, when it is needed. A client that
//! opens the session or starts typing a prompt starts it ahead of the prompt; while a prompt
//! is typed, the CLI is told (`prompt_draft_activity`), so that it gets its next request ready
//! (its first request after a start costs about 100 ms more than later ones otherwise).

use super::*;

/// How often a live CLI hears that a prompt is being typed: its own contract asks for the
/// first key and then about every 10 s while typing goes on.
const DRAFT_ACTIVITY_EVERY: Duration = Duration::from_secs(10);

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
            if let Some(m) = &self.meters {
                m.evicted();
            }
            self.cli_idle_since = None;
            self.running_tasks.clear();
            self.evicted = true;
        }
    }

    /// Starts the CLI ahead of a prompt a client is about to send (`why`: what showed it).
    pub(super) fn rewarm(&mut self, why: &str) {
        if matches!(self.cli, Cli::None) && !self.closing && self.turn.is_none() {
            tracing::debug!(session = %self.id, why, "starting Claude Code ahead of a prompt");
            self.start_cli(true);
        }
    }

    /// A client changed the chat's draft (`typing`: it holds a prompt, rather than cleared).
    pub(super) fn on_draft(&mut self, typing: bool) {
        self.rewarm("draft");
        if typing {
            self.draft_typed_at = Some(Instant::now());
            self.tell_draft_activity();
        }
    }

    /// Tells a live CLI between turns that a prompt is being typed, at most every
    /// [`DRAFT_ACTIVITY_EVERY`]. A CLI still starting is told once it is up.
    pub(super) fn tell_draft_activity(&mut self) {
        let Cli::Live(cli) = &self.cli else {
            return;
        };
        let typing = self
            .draft_typed_at
            .is_some_and(|t| t.elapsed() < DRAFT_ACTIVITY_EVERY);
        let told = self
            .draft_told_at
            .is_some_and(|t| t.elapsed() < DRAFT_ACTIVITY_EVERY);
        if !typing || told || self.turn.is_some() || !self.queue.is_empty() {
            return;
        }
        self.draft_told_at = Some(Instant::now());
        let cli = cli.clone();
        let id = self.id.clone();
        tokio::spawn(async move {
            if let Err(e) = cli.request("prompt_draft_activity", json!({})).await {
                tracing::debug!(session = %id, error = %e, "the CLI did not take prompt_draft_activity");
            }
        });
    }
}
