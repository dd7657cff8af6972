//! The root channel (`ahp-root://`): the agents and the number of live sessions. This host is
//! its only writer; sessions' channels belong to their session tasks.

use ahp::reducers::{ReduceOutcome, apply_action_to_root};
use ahp_types::actions::{ActionOrigin, StateAction};
use ahp_types::state::{RootState, Snapshot, SnapshotState};
use claude_host_agent::outbox::{Outbox, Replay};
use claude_host_agent::{Published, Sequence};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// The root channel's URI.
pub const ROOT: &str = "ahp-root://";

struct Inner {
    state: RootState,
    outbox: Outbox,
}

/// The root channel: its state and its stream.
pub struct RootChannel {
    // The root changes a few times per sign-in or session change; a lock held only to reduce
    // and publish one action keeps the state and the stream in step without a task.
    inner: Mutex<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl RootChannel {
    /// A root holding `state`, numbering from `seq`.
    pub fn new(state: RootState, seq: Sequence, replay: usize) -> RootChannel {
        RootChannel {
            inner: Mutex::new(Inner {
                state,
                // Root actions are rare, but a benchmark or a burst of sign-ins may publish
                // many at once; a subscriber further behind catches up from the replay ring.
                outbox: Outbox::new(seq, replay, 1024),
            }),
        }
    }

    /// Reduces (unless refused) and publishes one action.
    pub fn publish(
        &self,
        action: StateAction,
        origin: Option<ActionOrigin>,
        rejection: Option<String>,
    ) -> Arc<Published> {
        let mut inner = lock(&self.inner);
        if rejection.is_none()
            && !matches!(
                apply_action_to_root(&mut inner.state, &action),
                ReduceOutcome::Applied
            )
        {
            tracing::debug!("a root action did not change the state");
        }
        inner.outbox.publish(ROOT, action, origin, rejection)
    }

    /// A snapshot and the live stream right after it.
    pub fn subscribe(&self) -> (Snapshot, broadcast::Receiver<Arc<Published>>) {
        let inner = lock(&self.inner);
        let snapshot = Snapshot {
            resource: ROOT.to_owned(),
            state: SnapshotState::Root(Box::new(inner.state.clone())),
            from_seq: i64::try_from(inner.outbox.seq()).unwrap_or(i64::MAX),
        };
        (snapshot, inner.outbox.subscribe())
    }

    /// The actions after `last_seen` and the live stream after them, or `None` when some have
    /// left the replay ring.
    pub fn replay_after(&self, last_seen: u64) -> Option<Replay> {
        lock(&self.inner).outbox.replay_after(last_seen)
    }

    /// The state now.
    pub fn state(&self) -> RootState {
        lock(&self.inner).state.clone()
    }
}
