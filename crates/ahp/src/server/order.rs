//! A client's subscribes and the actions it dispatches after them, taken in the order it sent
//! them. Subscribes are answered off the read loop and actions are carried out by the
//! connection's dispatcher, so without this an action sent right behind a subscribe of its
//! channel could be applied before that subscribe's snapshot was taken: the snapshot would hold
//! the action's effect and the client would never see its echo. VS Code keeps an unechoed action
//! pending and re-applies it over every later state (a turn started that way never shows its
//! confirmations, and comes back after a stop), and VS Code does send a new chat's subscribe and
//! its first turn in the same instant.

use super::ROOT;
use serde_json::Value;
use tokio::sync::oneshot;

/// What the dispatcher takes, in the order the client sent it.
pub(super) enum Inbound {
    /// A dispatched action (`dispatchAction`'s params).
    Action(Value),
    /// A subscribe: actions behind it on the same session wait until its snapshot is taken or
    /// it failed (either way its sender is dropped).
    Subscribe {
        channel: Channel,
        taken: oneshot::Receiver<()>,
    },
}

/// Which state a channel URI belongs to, for ordering only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Channel {
    Root,
    Session(String),
    /// A URI this server cannot place: ordered against everything.
    Unknown,
}

impl Channel {
    pub(super) fn of(uri: &str) -> Channel {
        if uri == ROOT {
            return Channel::Root;
        }
        match claude_host_agent::session_id_of(uri) {
            Some((id, _)) => Channel::Session(id),
            None => Channel::Unknown,
        }
    }

    fn orders_with(&self, other: &Channel) -> bool {
        self == other || *self == Channel::Unknown || *other == Channel::Unknown
    }
}

/// The subscribes the dispatcher has passed whose snapshots may not be taken yet.
#[derive(Default)]
pub(super) struct Barriers(Vec<(Channel, oneshot::Receiver<()>)>);

impl Barriers {
    pub(super) fn push(&mut self, channel: Channel, taken: oneshot::Receiver<()>) {
        self.0.push((channel, taken));
    }

    /// Waits for every earlier subscribe on the state `params` acts on; forgets those done.
    pub(super) async fn before(&mut self, params: &Value) {
        if self.0.is_empty() {
            return;
        }
        let channel = Channel::of(params.get("channel").and_then(Value::as_str).unwrap_or(""));
        let mut open = Vec::new();
        for (c, mut taken) in self.0.drain(..) {
            if c.orders_with(&channel) {
                // Taken or dropped: either way the snapshot is no longer ahead of this action.
                let _ = (&mut taken).await;
            } else if matches!(taken.try_recv(), Err(oneshot::error::TryRecvError::Empty)) {
                open.push((c, taken));
            }
        }
        self.0 = open;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn on(channel: &str) -> Value {
        json!({"channel": channel, "clientSeq": 1, "action": {"type": "x"}})
    }

    const SESSION: &str = "claude:/0b9e5c1e-3d0b-4a77-a0a5-0c8e2d8f1a22";
    const OTHER: &str = "claude:/11111111-3d0b-4a77-a0a5-0c8e2d8f1a22";

    #[tokio::test]
    async fn an_action_waits_for_a_subscribe_of_its_session_and_no_other() {
        let chat = claude_host_protocol::uri::default_chat_uri(SESSION);
        let mut b = Barriers::default();
        let (tx, rx) = oneshot::channel();
        b.push(Channel::of(&chat), rx);
        // Another session's action goes at once.
        tokio::time::timeout(Duration::from_secs(5), b.before(&on(OTHER)))
            .await
            .expect("not held by another session's subscribe");
        // This session's action (on its session channel) waits for the chat's snapshot: polled
        // now, it cannot finish.
        let action = on(SESSION);
        let mut waiting = Box::pin(b.before(&action));
        assert!(
            futures_util::FutureExt::now_or_never(&mut waiting).is_none(),
            "held until the snapshot is taken"
        );
        tx.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("released once taken");
        assert!(b.0.is_empty());
    }

    #[tokio::test]
    async fn a_failed_subscribe_releases_and_an_unknown_uri_orders_with_all() {
        let mut b = Barriers::default();
        let (tx, rx) = oneshot::channel::<()>();
        b.push(Channel::of("not-a-channel"), rx);
        drop(tx);
        tokio::time::timeout(Duration::from_secs(5), b.before(&on(ROOT)))
            .await
            .expect("a dropped subscribe holds nothing");
        assert_eq!(Channel::of("not-a-channel"), Channel::Unknown);
        assert!(Channel::Unknown.orders_with(&Channel::Root));
        assert!(!Channel::Root.orders_with(&Channel::of(SESSION)));
    }
}
