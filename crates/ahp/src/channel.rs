//! A subscribable channel: its reduced state, the actions published on it (each with a
//! `serverSeq`), a bounded replay buffer, and live fan-out.

use ahp::reducers::{
    ReduceOutcome, apply_action_to_chat, apply_action_to_root, apply_action_to_session,
};
use ahp_types::actions::{ActionEnvelope, ActionOrigin, StateAction};
use ahp_types::state::{ChatState, RootState, SessionState, Snapshot, SnapshotState};
use serde_json::json;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// The state a channel holds.
#[derive(Debug, Clone)]
pub enum ChannelState {
    /// `ahp-root://`.
    Root(Box<RootState>),
    /// `ahp-session:/<id>`.
    Session(Box<SessionState>),
    /// `ahp-chat:/<id>`.
    Chat(Box<ChatState>),
}

impl ChannelState {
    fn reduce(&mut self, action: &StateAction) -> ReduceOutcome {
        match self {
            ChannelState::Root(s) => apply_action_to_root(s, action),
            ChannelState::Session(s) => apply_action_to_session(s, action),
            ChannelState::Chat(s) => apply_action_to_chat(s, action),
        }
    }

    fn is_session(&self) -> bool {
        matches!(self, ChannelState::Session(_))
    }

    fn snapshot_state(&self) -> SnapshotState {
        match self {
            ChannelState::Root(s) => SnapshotState::Root(s.clone()),
            ChannelState::Session(s) => SnapshotState::Session(s.clone()),
            ChannelState::Chat(s) => SnapshotState::Chat(s.clone()),
        }
    }
}

/// One published action: the envelope and its `action` notification, serialized once for
/// every subscriber.
#[derive(Debug)]
pub struct Published {
    /// Its `serverSeq`.
    pub seq: u64,
    /// The envelope.
    pub envelope: ActionEnvelope,
    /// The whole JSON-RPC notification text.
    pub frame: Arc<str>,
}

struct Inner {
    state: ChannelState,
    buffer: VecDeque<Arc<Published>>,
    /// The highest `serverSeq` dropped from the buffer: a client that saw less cannot be
    /// caught up by replay.
    evicted_up_to: u64,
}

/// A channel.
pub struct Channel {
    /// Its URI.
    pub uri: String,
    inner: Mutex<Inner>,
    live: broadcast::Sender<Arc<Published>>,
    capacity: usize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a subscriber gets: the state as of `from_seq`, then every later action.
pub struct Subscription {
    /// The snapshot.
    pub snapshot: Snapshot,
    /// Live actions after the snapshot.
    pub live: broadcast::Receiver<Arc<Published>>,
}

/// What a reconnecting subscriber gets when replay is possible.
pub struct Replay {
    /// Buffered actions after the client's last seen `serverSeq`.
    pub actions: Vec<Arc<Published>>,
    /// Live actions after those.
    pub live: broadcast::Receiver<Arc<Published>>,
}

impl Channel {
    /// A channel holding `state`, replaying up to `capacity` actions.
    pub fn new(uri: &str, state: ChannelState, capacity: usize) -> Arc<Channel> {
        // The live ring only has to absorb bursts between a subscriber's reads (a subscriber
        // that falls further behind is disconnected and reconnects through replay). It is
        // allocated up front, so it is sized by how busy the channel gets: a chat streams a
        // delta per token, a session changes a few times per turn.
        let ring = if state.is_session() { 64 } else { 1024 };
        let (live, _) = broadcast::channel(ring);
        Arc::new(Channel {
            uri: uri.to_owned(),
            inner: Mutex::new(Inner {
                state,
                buffer: VecDeque::new(),
                evicted_up_to: 0,
            }),
            live,
            capacity: capacity.max(1),
        })
    }

    /// Reduces `action` into the state, numbers it from `seq`, buffers it and sends it to
    /// every subscriber. Returns the envelope.
    pub fn publish(
        &self,
        seq: &AtomicU64,
        action: StateAction,
        origin: Option<ActionOrigin>,
        rejection_reason: Option<String>,
    ) -> Arc<Published> {
        let mut inner = lock(&self.inner);
        if rejection_reason.is_none() {
            match inner.state.reduce(&action) {
                ReduceOutcome::Applied => {}
                other => {
                    tracing::debug!(channel = %self.uri, ?other, "action did not change state")
                }
            }
        }
        // Numbered under the channel lock, so a channel's actions are in `serverSeq` order.
        let server_seq = seq.fetch_add(1, Ordering::SeqCst) + 1;
        let envelope = ActionEnvelope {
            channel: self.uri.clone(),
            action,
            server_seq,
            origin,
            rejection_reason,
        };
        let frame: Arc<str> = json!({"jsonrpc": "2.0", "method": "action", "params": &envelope})
            .to_string()
            .into();
        let published = Arc::new(Published {
            seq: server_seq,
            envelope,
            frame,
        });
        inner.buffer.push_back(published.clone());
        while inner.buffer.len() > self.capacity {
            if let Some(old) = inner.buffer.pop_front() {
                inner.evicted_up_to = old.seq;
            }
        }
        let _ = self.live.send(published.clone());
        published
    }

    /// A snapshot and a live subscription that starts right after it.
    pub fn subscribe(&self, seq: &AtomicU64) -> Subscription {
        let inner = lock(&self.inner);
        Subscription {
            snapshot: Snapshot {
                resource: self.uri.clone(),
                state: inner.state.snapshot_state(),
                from_seq: seq.load(Ordering::SeqCst) as i64,
            },
            live: self.live.subscribe(),
        }
    }

    /// The actions after `last_seen` and a live subscription after them, or `None` when
    /// some of them have left the buffer.
    pub fn replay_after(&self, last_seen: u64) -> Option<Replay> {
        let inner = lock(&self.inner);
        if inner.evicted_up_to > last_seen {
            return None;
        }
        Some(Replay {
            actions: inner
                .buffer
                .iter()
                .filter(|p| p.seq > last_seen)
                .cloned()
                .collect(),
            live: self.live.subscribe(),
        })
    }

    /// A copy of the state.
    pub fn state(&self) -> ChannelState {
        lock(&self.inner).state.clone()
    }
}
