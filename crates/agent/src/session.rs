//! A Claude chat session: provisional until the first send, then one long-lived CLI.

use crate::mapper::{TurnMapper, now_rfc3339};
use ahp::reducers::{ReduceOutcome, apply_action_to_chat};
use ahp_types::actions::StateAction;
use ahp_types::state::ChatState;
use claude_host_protocol::stream_json::FrameKind;
use claude_host_sdk::{Callbacks, ClaudeSession, SessionError, SessionOptions};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{OnceCell, broadcast};

/// Why a send failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ChatSessionError {
    /// The CLI could not be started or initialized.
    #[error("cannot start the Claude session: {0}")]
    Start(String),
    /// The CLI failed during the turn.
    #[error(transparent)]
    Session(#[from] SessionError),
}

/// One chat backed by one Claude Code process.
pub struct ChatSession {
    opts: SessionOptions,
    callbacks: Arc<dyn Callbacks>,
    cli: OnceCell<tokio::sync::Mutex<ClaudeSession>>,
    state: Mutex<ChatState>,
    actions: broadcast::Sender<StateAction>,
    materializations: AtomicUsize,
    turns: AtomicUsize,
}

impl std::fmt::Debug for ChatSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatSession").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl ChatSession {
    /// A provisional session: no process is started and nothing is written until the first
    /// send.
    pub fn new(
        resource: &str,
        opts: SessionOptions,
        callbacks: Arc<dyn Callbacks>,
    ) -> Result<ChatSession, ChatSessionError> {
        let state: ChatState = serde_json::from_value(json!({
            "resource": resource, "title": "", "status": 1, "modifiedAt": now_rfc3339(), "turns": []
        }))
        .map_err(|e| ChatSessionError::Start(format!("empty chat state: {e}")))?;
        let (actions, _) = broadcast::channel(4096);
        Ok(ChatSession {
            opts,
            callbacks,
            cli: OnceCell::new(),
            state: Mutex::new(state),
            actions,
            materializations: AtomicUsize::new(0),
            turns: AtomicUsize::new(0),
        })
    }

    /// Subscribes to the actions applied from now on, in order.
    pub fn subscribe(&self) -> broadcast::Receiver<StateAction> {
        self.actions.subscribe()
    }

    /// A copy of the reduced state.
    pub fn state(&self) -> ChatState {
        lock(&self.state).clone()
    }

    /// How many times a CLI was started for this session.
    pub fn materializations(&self) -> usize {
        self.materializations.load(Ordering::SeqCst)
    }

    /// Whether the CLI has been started.
    pub fn is_materialized(&self) -> bool {
        self.cli.initialized()
    }

    fn apply(&self, actions: Vec<StateAction>) {
        let mut state = lock(&self.state);
        for a in actions {
            match apply_action_to_chat(&mut state, &a) {
                ReduceOutcome::Applied => {}
                other => tracing::debug!(?other, "action did not change the chat state"),
            }
            let _ = self.actions.send(a);
        }
    }

    async fn materialize(&self) -> Result<&tokio::sync::Mutex<ClaudeSession>, ChatSessionError> {
        self.cli
            .get_or_try_init(|| async {
                self.materializations.fetch_add(1, Ordering::SeqCst);
                let s = ClaudeSession::spawn(self.opts.clone(), self.callbacks.clone())
                    .map_err(|e| ChatSessionError::Start(e.to_string()))?;
                s.initialize(None, json!({}))
                    .await
                    .map_err(|e| ChatSessionError::Start(e.to_string()))?;
                Ok(tokio::sync::Mutex::new(s))
            })
            .await
    }

    /// Sends a prompt and runs the turn to its end. Sends are serialized: a second send waits
    /// for the first turn. Returns the turn id.
    pub async fn send(&self, prompt: &str) -> Result<String, ChatSessionError> {
        let cli = self.materialize().await?;
        let mut cli = cli.lock().await;
        let turn_id = format!("turn-{}", self.turns.fetch_add(1, Ordering::SeqCst) + 1);
        let (mut mapper, started) = TurnMapper::start(&turn_id, prompt);
        self.apply(started);
        if let Err(e) = cli.send_user(json!(prompt), None, None).await {
            self.apply(mapper.fail(&e.to_string()));
            return Err(e.into());
        }
        while !mapper.finished() {
            match cli.next_frame().await {
                Some(Ok(frame)) => {
                    let is_result = frame.kind == FrameKind::Result;
                    self.apply(mapper.map(&frame));
                    if is_result {
                        break;
                    }
                }
                Some(Err(e @ SessionError::Exited { .. })) => {
                    self.apply(mapper.fail(&e.to_string()));
                    return Err(e.into());
                }
                Some(Err(e)) => tracing::warn!(error = %e, "skipping a bad frame"),
                None => {
                    self.apply(mapper.fail("the Claude Code CLI went away"));
                    return Err(ChatSessionError::Start(
                        "the Claude Code CLI went away".into(),
                    ));
                }
            }
        }
        Ok(turn_id)
    }
}
