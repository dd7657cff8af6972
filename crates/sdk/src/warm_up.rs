//! A throwaway first turn for a freshly started CLI.
//!
//! Claude Code's first turn in a process costs about 90 ms more than its later ones (the
//! first run of its code, spread over every step of building the request), and nothing short
//! of a real turn takes that cost ahead of time. So a CLI started ahead of a prompt runs one:
//! the prompt is [`WARM_UP_PROMPT`], which the host's proxy answers itself (no model sees it,
//! no premium request is spent), and the turn is then cut with the CLI's own
//! `rewind_conversation`, which takes it out of the conversation in memory and marks the cut
//! in the transcript (the next message hangs off the message before the warm-up; the warm-up
//! stays in the file as a dead branch, as a rewound turn does).
//!
//! A hook the user configured could see the turn (a `Stop` hook that sends a notification, a
//! `UserPromptSubmit` hook that logs prompts), so the turn is only run when every configured
//! hook is on an event that a text-only turn cannot fire.

use crate::{ClaudeSession, ControlError, SessionError};
use claude_host_protocol::request_kind::WARM_UP_PROMPT;
use claude_host_protocol::stream_json::{Frame, FrameKind};
use serde_json::{Value, json};
use std::time::Duration;

/// Hook events a warm-up turn (a text prompt, a text answer, no tools) cannot fire, or fires
/// just as the first real turn would have (loading instructions). Any other event, known or
/// new, keeps the warm-up from running.
const QUIET_HOOK_EVENTS: &[&str] = &[
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "PostToolBatch",
    "PermissionDenied",
    "PermissionRequest",
    "SessionStart",
    "SessionEnd",
    "SubagentStart",
    "SubagentStop",
    "PreCompact",
    "PostCompact",
    "PreModelSwitch",
    "PostModelSwitch",
    "Setup",
    "TeammateIdle",
    "TaskCreated",
    "TaskCompleted",
    "Elicitation",
    "ElicitationResult",
    "ConfigChange",
    "InstructionsLoaded",
    "WorktreeCreate",
    "WorktreeRemove",
    "CwdChanged",
    "FileChanged",
    "DirectoryAdded",
];

/// A warm-up turn that ran and was cut.
#[derive(Debug)]
pub struct WarmedUp {
    /// The transcript lines the CLI reported while it ran (`transcript_mirror` frames), in
    /// order, for whoever keeps a copy of the transcript; every other frame of the turn is
    /// dropped.
    pub mirrored: Vec<Frame>,
}

/// Why no warm-up turn is in effect.
#[derive(Debug, thiserror::Error)]
pub enum WarmUpError {
    /// Not run: a configured hook would see it. Nothing was written.
    #[error("a hook on {0} would see the warm-up turn")]
    Hooked(String),
    /// Not run: the hooks could not be listed. Nothing was written.
    #[error("the hooks could not be listed: {0}")]
    Listing(ControlError),
    /// The turn was sent but is not cut (or may not be): the CLI's conversation and the
    /// transcript may hold it. Do not use this process; resume before `uuid`.
    #[error("the warm-up turn {uuid} was not cut: {reason}")]
    NotCut {
        /// The warm-up prompt's transcript id.
        uuid: String,
        /// What went wrong.
        reason: String,
        /// As in [`WarmedUp::mirrored`].
        mirrored: Vec<Frame>,
    },
}

impl ClaudeSession {
    /// Runs a warm-up turn whose prompt has the transcript id `uuid` and cuts it (see the
    /// module's documentation). Call it on a CLI that has been initialized and has nothing
    /// else to do; `limit` bounds each step.
    pub async fn warm_up(&mut self, uuid: &str, limit: Duration) -> Result<WarmedUp, WarmUpError> {
        let listing = self
            .request_with_timeout("get_hooks_listing", json!({}), limit)
            .await
            .map_err(WarmUpError::Listing)?;
        if let Some(event) = loud_hook_event(&listing) {
            return Err(WarmUpError::Hooked(event));
        }
        let mut mirrored = Vec::new();
        let not_cut = |reason: String, mirrored: Vec<Frame>| WarmUpError::NotCut {
            uuid: uuid.to_owned(),
            reason,
            mirrored,
        };
        let turn = tokio::time::timeout(limit, async {
            self.send_user(
                json!([{"type": "text", "text": WARM_UP_PROMPT}]),
                Some(uuid),
                None,
            )
            .await?;
            loop {
                match self.next_frame().await {
                    Some(Ok(f)) if f.kind == FrameKind::TranscriptMirror => mirrored.push(f),
                    Some(Ok(f)) if f.kind == FrameKind::Result => return Ok(()),
                    Some(Ok(_)) => {}
                    Some(Err(e @ SessionError::Exited { .. })) => return Err(e),
                    Some(Err(e)) => tracing::debug!(error = %e, "skipping a bad frame"),
                    None => return Err(SessionError::Write("the CLI's output ended".into())),
                }
            }
        })
        .await;
        match turn {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(not_cut(e.to_string(), mirrored)),
            Err(_) => return Err(not_cut(format!("no result within {limit:?}"), mirrored)),
        }
        let cut = self
            .request_with_timeout(
                "rewind_conversation",
                json!({"target_message_uuid": uuid}),
                limit,
            )
            .await;
        // The cut's own transcript line may still be on its way.
        while let Some(Ok(f)) = self.try_recv_frame() {
            if f.kind == FrameKind::TranscriptMirror {
                mirrored.push(f);
            }
        }
        match cut {
            Ok(v) if v.get("rewound") == Some(&Value::Bool(true)) => Ok(WarmedUp { mirrored }),
            Ok(v) => Err(not_cut(format!("the CLI answered {v}"), mirrored)),
            Err(e) => Err(not_cut(e.to_string(), mirrored)),
        }
    }
}

/// The first configured hook event a warm-up turn could fire, from `get_hooks_listing`'s
/// answer.
fn loud_hook_event(listing: &Value) -> Option<String> {
    let Some(events) = listing.get("events").and_then(Value::as_array) else {
        return Some("(a listing without events)".to_owned());
    };
    events
        .iter()
        .filter(|e| e.get("hookCount").and_then(Value::as_u64) != Some(0))
        .filter_map(|e| e.get("name").and_then(Value::as_str))
        .find(|name| !QUIET_HOOK_EVENTS.contains(name))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hooks_a_text_turn_cannot_fire_let_it_run() {
        let listing = |names: &[&str]| json!({"events": names.iter().map(|n| json!({"name": n, "hookCount": 1})).collect::<Vec<_>>()});
        assert_eq!(loud_hook_event(&json!({"events": []})), None);
        assert!(loud_hook_event(&json!({"hooks": []})).is_some());
        assert_eq!(
            loud_hook_event(&listing(&["PostToolUse", "SessionStart"])),
            None
        );
        for loud in ["Stop", "UserPromptSubmit", "Notification", "SomeNewEvent"] {
            assert_eq!(
                loud_hook_event(&listing(&["PreToolUse", loud])).as_deref(),
                Some(loud)
            );
        }
        // An event listed with no hook on it does not count.
        assert_eq!(
            loud_hook_event(&json!({"events": [{"name": "Stop", "hookCount": 0}]})),
            None
        );
    }
}
