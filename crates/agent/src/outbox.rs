//! The ordered stream of a channel's actions: each numbered with the host-wide `serverSeq`,
//! kept in a bounded replay ring, and fanned out live. The owner of the state calls
//! [`Outbox::publish`] right after reducing, so the stream and the state never disagree.

use ahp_types::actions::{ActionEnvelope, ActionOrigin, StateAction};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use tokio::sync::broadcast;

/// One action as published: its envelope (with `serverSeq`, origin, rejection).
#[derive(Debug)]
pub struct Published {
    /// The envelope.
    pub envelope: ActionEnvelope,
    /// The `action` notification text, serialized once for every subscriber that needs it.
    notification: OnceLock<Arc<str>>,
}

impl Published {
    /// An action for one connection alone, outside every channel's stream (AHP's
    /// `chat/turnsLoaded`, which answers one client's `fetchTurns`): `envelope` is sent as it is.
    pub fn to_one(envelope: ActionEnvelope) -> Published {
        Published {
            envelope,
            notification: OnceLock::new(),
        }
    }

    /// Its `serverSeq`.
    pub fn seq(&self) -> u64 {
        self.envelope.server_seq
    }

    /// The channel it was published on.
    pub fn channel(&self) -> &str {
        &self.envelope.channel
    }

    /// The action.
    pub fn action(&self) -> &StateAction {
        &self.envelope.action
    }

    /// Whether it was refused (a rejection changes no state).
    pub fn is_rejection(&self) -> bool {
        self.envelope.rejection_reason.is_some()
    }

    /// The JSON-RPC `action` notification carrying it.
    pub fn notification(&self) -> Arc<str> {
        self.notification
            .get_or_init(|| {
                let params = serde_json::to_string(&self.envelope).unwrap_or_else(|e| {
                    tracing::error!(error = %e, "cannot serialize an action envelope");
                    "null".to_owned()
                });
                format!(r#"{{"jsonrpc":"2.0","method":"action","params":{params}}}"#).into()
            })
            .clone()
    }
}

/// The host-wide `serverSeq` counter, shared by every channel so one number orders them all.
#[derive(Debug, Clone, Default)]
pub struct Sequence(Arc<AtomicU64>);

impl Sequence {
    /// The last number handed out.
    pub fn current(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }
}

/// Published actions after a point, and the live stream right after them.
pub struct Replay {
    /// The actions, oldest first.
    pub actions: Vec<Arc<Published>>,
    /// Everything published later.
    pub live: broadcast::Receiver<Arc<Published>>,
}

/// The last actions published, kept for subscribers that fell behind.
#[derive(Debug, Default)]
pub struct ReplayRing {
    ring: VecDeque<Arc<Published>>,
    capacity: usize,
    /// The highest `serverSeq` dropped from the ring: a subscriber that saw less cannot be
    /// caught up by replay.
    evicted_up_to: u64,
}

impl ReplayRing {
    fn push(&mut self, published: Arc<Published>) {
        self.ring.push_back(published);
        while self.ring.len() > self.capacity {
            if let Some(old) = self.ring.pop_front() {
                self.evicted_up_to = old.seq();
            }
        }
    }

    /// The actions after `last_seen`, or `None` when some of them have left the ring.
    pub fn after(&self, last_seen: u64) -> Option<Vec<Arc<Published>>> {
        if self.evicted_up_to > last_seen {
            return None;
        }
        Some(
            self.ring
                .iter()
                .filter(|p| p.seq() > last_seen)
                .cloned()
                .collect(),
        )
    }
}

/// A channel's (or a session's channels') publishing side.
#[derive(Debug)]
pub struct Outbox {
    seq: Sequence,
    ring: ReplayRing,
    live: broadcast::Sender<Arc<Published>>,
}

impl Outbox {
    /// An outbox numbering from `seq`, replaying up to `capacity` actions. `live_slots` bounds
    /// the live fan-out ring (allocated up front); a subscriber that falls further behind
    /// catches up from the replay ring or a snapshot.
    pub fn new(seq: Sequence, capacity: usize, live_slots: usize) -> Outbox {
        let (live, _) = broadcast::channel(live_slots.max(1));
        Outbox {
            seq,
            ring: ReplayRing {
                ring: VecDeque::new(),
                capacity: capacity.max(1),
                evicted_up_to: 0,
            },
            live,
        }
    }

    /// Numbers, keeps and sends one action.
    pub fn publish(
        &mut self,
        channel: &str,
        action: StateAction,
        origin: Option<ActionOrigin>,
        rejection_reason: Option<String>,
    ) -> Arc<Published> {
        let published = Arc::new(Published {
            envelope: ActionEnvelope {
                channel: channel.to_owned(),
                action,
                server_seq: self.seq.next(),
                origin,
                rejection_reason,
            },
            notification: OnceLock::new(),
        });
        self.ring.push(published.clone());
        // No receiver is fine: nobody is subscribed.
        let _ = self.live.send(published.clone());
        published
    }

    /// The live stream from now on (pair it with a snapshot taken at the same moment).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Published>> {
        self.live.subscribe()
    }

    /// The `serverSeq` a snapshot taken now is at.
    pub fn seq(&self) -> u64 {
        self.seq.current()
    }

    /// The actions after `last_seen` and the live stream after them, or `None` when some of
    /// them have left the ring.
    pub fn replay_after(&self, last_seen: u64) -> Option<Replay> {
        Some(Replay {
            actions: self.ring.after(last_seen)?,
            live: self.live.subscribe(),
        })
    }

    /// Gives up the replay ring (the outbox publishes nothing more): it stays readable for
    /// subscribers still catching up after the session ended.
    pub fn take_ring(&mut self) -> ReplayRing {
        std::mem::take(&mut self.ring)
    }

    /// How many live subscribers there are.
    pub fn subscribers(&self) -> usize {
        self.live.receiver_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::actions::SessionTitleChangedAction;

    fn title(t: &str) -> StateAction {
        StateAction::SessionTitleChanged(SessionTitleChangedAction {
            title: t.to_owned(),
        })
    }

    #[test]
    fn numbering_replay_and_eviction() {
        let seq = Sequence::default();
        let mut a = Outbox::new(seq.clone(), 3, 4);
        let mut b = Outbox::new(seq.clone(), 3, 4);
        let one = a.publish("a", title("1"), None, None);
        let two = b.publish("b", title("2"), None, None);
        assert_eq!(
            (one.seq(), two.seq()),
            (1, 2),
            "one counter for every outbox"
        );
        for i in 0..3 {
            a.publish("a", title(&i.to_string()), None, None);
        }
        assert!(
            a.replay_after(0).is_none(),
            "the first action left the ring"
        );
        let r = a.replay_after(3).unwrap();
        assert_eq!(
            r.actions.iter().map(|p| p.seq()).collect::<Vec<_>>(),
            [4, 5]
        );
        assert!(
            one.notification()
                .starts_with(r#"{"jsonrpc":"2.0","method":"action","params":{"#)
        );
        let v: serde_json::Value = serde_json::from_str(&one.notification()).unwrap();
        assert_eq!(v["params"]["serverSeq"], 1);
    }
}
