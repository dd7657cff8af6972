//! One connection's view of one session: every channel of the session the client subscribed
//! to (the session channel, its chats), forwarded by one task in the session's own order. Two
//! forwarders for two channels of one session would interleave at random, and a client that
//! keeps `lastSeenServerSeq` as the highest number it saw could then skip a lower one on
//! reconnect.

use super::{Conn, lock};
use crate::host::Host;
use crate::rpc::{RpcError, code};
use ahp_types::actions::StateAction;
use ahp_types::commands::SubscribeResult;
use claude_host_agent::{ChannelKind, SessionEvent, SessionHandle, SessionSubscription, trace};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// What a feed is asked to do.
pub(super) enum FeedCmd {
    /// Subscribe a channel: answer request `id` with its snapshot, then forward its actions.
    Subscribe {
        uri: String,
        kind: ChannelKind,
        id: Value,
        /// Dropped once the snapshot is taken (`order`).
        taken: Option<oneshot::Sender<()>>,
    },
    /// Stop forwarding a channel.
    Unsubscribe(String),
}

/// The key of a session's feed among a connection's forwarders.
fn key(session_id: &str) -> String {
    format!("#session:{session_id}")
}

impl Conn {
    /// Forwards the session's channels `from` (channel URI → the `serverSeq` after which its
    /// actions are new to the client) out of `sub`, replacing any feed of that session.
    pub(super) fn start_feed(
        self: &Arc<Self>,
        handle: SessionHandle,
        sub: Option<SessionSubscription>,
        from: HashMap<String, u64>,
    ) -> mpsc::UnboundedSender<FeedCmd> {
        let (tx, rx) = mpsc::unbounded_channel();
        let key = key(handle.id());
        let task = tokio::spawn(run(self.clone(), handle, sub, from, rx));
        if let Some(old) = lock(&self.forwarders).insert(key.clone(), task.abort_handle()) {
            old.abort();
        }
        lock(&self.feeds).insert(key, tx.clone());
        tx
    }

    /// Subscribes a channel of a session through the session's feed on this connection
    /// (started if there is none); the feed answers request `id`.
    pub(super) fn subscribe_in_feed(
        self: &Arc<Self>,
        handle: SessionHandle,
        uri: &str,
        kind: ChannelKind,
        id: &Value,
        taken: Option<oneshot::Sender<()>>,
    ) {
        // Looked up and, if need be, started under one hold of the lock: two subscriptions
        // racing must share one feed, not replace each other's.
        let tx = {
            let mut feeds = lock(&self.feeds);
            let key = key(handle.id());
            match feeds.get(&key).filter(|tx| !tx.is_closed()) {
                Some(tx) => tx.clone(),
                None => {
                    let (tx, rx) = mpsc::unbounded_channel();
                    let task = tokio::spawn(run(self.clone(), handle, None, HashMap::new(), rx));
                    if let Some(old) =
                        lock(&self.forwarders).insert(key.clone(), task.abort_handle())
                    {
                        old.abort();
                    }
                    feeds.insert(key, tx.clone());
                    tx
                }
            }
        };
        let cmd = FeedCmd::Subscribe {
            uri: uri.to_owned(),
            kind,
            id: id.clone(),
            taken,
        };
        if let Err(mpsc::error::SendError(FeedCmd::Subscribe { id, .. })) = tx.send(cmd) {
            self.respond(
                &id,
                Err(RpcError::new(
                    code::SESSION_NOT_FOUND,
                    format!("{uri}: the session closed"),
                )),
            );
        }
    }

    /// Stops forwarding a session channel, whichever feed has it.
    pub(super) fn unsubscribe_from_feeds(&self, uri: &str) {
        for tx in lock(&self.feeds).values() {
            let _ = tx.send(FeedCmd::Unsubscribe(uri.to_owned()));
        }
    }
}

async fn run(
    conn: Arc<Conn>,
    handle: SessionHandle,
    mut sub: Option<SessionSubscription>,
    mut from: HashMap<String, u64>,
    mut cmds: mpsc::UnboundedReceiver<FeedCmd>,
) {
    // The turn's first response part is still to go out (a latency mark, `trace`).
    let mut first_part = false;
    loop {
        let event = tokio::select! {
            // Commands first: a subscription is answered before more actions go out.
            biased;
            cmd = cmds.recv() => {
                let emptied = match cmd {
                    Some(FeedCmd::Subscribe { uri, kind, id, taken }) => {
                        subscribe(&conn, &handle, &mut sub, &mut from, uri, kind, &id).await;
                        // Actions the client sent behind this subscribe may go on now.
                        drop(taken);
                        from.is_empty()
                    }
                    Some(FeedCmd::Unsubscribe(uri)) => {
                        from.remove(&uri).is_some() && from.is_empty()
                    }
                    None => true,
                };
                if emptied {
                    // Nothing subscribed any more.
                    return;
                }
                continue;
            }
            event = next(&mut sub) => event,
        };
        match event {
            Some(SessionEvent::Action(p)) => {
                let new = from.get(p.channel()).is_some_and(|after| p.seq() > *after);
                // What went to this client, in order: the trace a race with a client is read from.
                tracing::trace!(seq = p.seq(), action = claude_host_agent::actions::kind(p.action()),
                    channel = %p.channel(), origin = ?p.envelope.origin.as_ref().map(|o| o.client_seq),
                    sent = new, "action out");
                if new && !conn.send(p.notification()) {
                    return;
                }
                if new {
                    match p.action() {
                        StateAction::ChatTurnStarted(_) => first_part = true,
                        StateAction::ChatResponsePart(_) if std::mem::take(&mut first_part) => {
                            trace::mark(trace::AHP_PART, trace::key_of(handle.id()));
                        }
                        _ => {}
                    }
                }
            }
            Some(SessionEvent::Resync(_)) => {
                // The protocol has no way to push a snapshot: the client reconnects and
                // gets one.
                tracing::warn!(session = %handle.id(), "a client fell too far behind a session; closing its connection so it resynchronises");
                let _ = conn.closing.send(true);
                return;
            }
            None => return,
        }
    }
}

/// The next event, or never while nothing is subscribed yet.
async fn next(sub: &mut Option<SessionSubscription>) -> Option<SessionEvent> {
    match sub {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

async fn subscribe(
    conn: &Conn,
    handle: &SessionHandle,
    sub: &mut Option<SessionSubscription>,
    from: &mut HashMap<String, u64>,
    uri: String,
    kind: ChannelKind,
    id: &Value,
) {
    // With a stream already going, a snapshot taken now is at or after every action this
    // feed has passed, so the channel's actions go on right after it, in order.
    let snapshot = match sub {
        Some(_) => handle.snapshot().await,
        None => handle.subscribe().await.map(|(s, live)| {
            *sub = Some(live);
            s
        }),
    };
    match snapshot {
        Ok(s) => {
            let seq = s.seq;
            match Host::snapshot_of(&uri, &kind, s) {
                Some(snapshot) => {
                    from.insert(uri.clone(), seq);
                    conn.respond_ok(
                        id,
                        &SubscribeResult {
                            snapshot: Some(snapshot),
                        },
                    );
                }
                None => conn.respond(
                    id,
                    Err(RpcError::new(
                        code::SESSION_NOT_FOUND,
                        format!("no chat {uri} in this session"),
                    )),
                ),
            }
        }
        Err(e) => conn.respond(
            id,
            Err(RpcError::new(
                code::SESSION_NOT_FOUND,
                format!("{uri}: {e}"),
            )),
        ),
    }
}
