//! One connection's view of one session: every channel of the session the client subscribed
//! to (the session channel, its chats), forwarded by one task in the session's own order. Two
//! forwarders for two channels of one session would interleave at random, and a client that
//! keeps `lastSeenServerSeq` as the highest number it saw could then skip a lower one on
//! reconnect.
//!
//! A client that subscribes to a chat with `view: {turns: N}` holds only its newest N completed
//! turns; the feed remembers where that window starts and answers the client's `fetchTurns`
//! with a `chat/turnsLoaded` sent to it alone (the session's state, and every other client,
//! hold every turn). A client that asks for no window gets the host's bound on a long chat
//! (`HostConfig::chat_turns`): the newest turns behind a first turn that says how many are left
//! out, since VS Code takes 16 ms a turn to open a chat and pages nothing in (docs/AHP.md).

use super::{Conn, lock};
use crate::host::Host;
use crate::rpc::{RpcError, code};
use ahp_types::actions::{ActionEnvelope, ChatTurnsLoadedAction, StateAction};
use ahp_types::commands::SubscribeResult;
use ahp_types::state::{
    MarkdownResponsePart, MessageKind, ResponsePart, Snapshot, SnapshotState, Turn, TurnState,
};
use claude_host_agent::{
    ChannelKind, ChannelWant, Published, SessionEvent, SessionHandle, SessionSubscription,
    WhichChat, trace,
};
use serde_json::{Value, json};
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
        /// How many of a chat's completed turns its snapshot holds.
        shown: TurnsShown,
    },
    /// Load older turns of a windowed chat into this client's state (`fetchTurns`), then
    /// answer request `id`.
    FetchTurns {
        uri: String,
        cursor: Option<String>,
        id: Value,
    },
    /// Stop forwarding a channel.
    Unsubscribe(String),
}

/// How many of a chat's completed turns a client's snapshot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TurnsShown {
    /// Every turn.
    All,
    /// The newest N, as the client asked (`view.turns`).
    Asked(usize),
    /// The newest N, the host's bound for a client that asked for no window, behind a first
    /// turn that says how many are left out.
    Bounded(usize),
}

/// The id of the turn that stands for the turns a bounded snapshot leaves out.
pub const OLDER_TURNS_ID: &str = "claude-host-older-turns";

/// A chat this client holds only the newest turns of.
pub(super) struct Window {
    kind: ChannelKind,
    /// How many of the chat's oldest turns the client does not hold.
    start: usize,
    /// How many older turns one `fetchTurns` loads.
    page: usize,
}

impl Window {
    /// The chat's `turnsNextCursor` for this client: opaque to it, checked against the window.
    fn cursor(&self) -> String {
        format!("older-than-{}", self.start)
    }
}

/// The key of a session's feed among a connection's forwarders.
fn key(session_id: &str) -> String {
    format!("#session:{session_id}")
}

impl Conn {
    /// Forwards the session's channels `from` (channel URI → the `serverSeq` after which its
    /// actions are new to the client) out of `sub`, replacing any feed of that session; the
    /// client holds `windows` of its chats.
    pub(super) fn start_feed(
        self: &Arc<Self>,
        handle: SessionHandle,
        sub: Option<SessionSubscription>,
        from: HashMap<String, u64>,
        windows: HashMap<String, Window>,
    ) -> mpsc::UnboundedSender<FeedCmd> {
        let (tx, rx) = mpsc::unbounded_channel();
        let key = key(handle.id());
        let task = tokio::spawn(run(self.clone(), handle, sub, from, windows, rx));
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
        shown: TurnsShown,
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
                    let task = tokio::spawn(run(
                        self.clone(),
                        handle,
                        None,
                        HashMap::new(),
                        HashMap::new(),
                        rx,
                    ));
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
            shown,
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

    /// Answers `fetchTurns` for chat `uri` of session `session_id`: through the session's feed,
    /// which knows what this client holds; without a feed the client holds no window.
    pub(super) fn fetch_in_feed(
        &self,
        session_id: &str,
        uri: &str,
        cursor: Option<String>,
        id: &Value,
    ) {
        let tx = lock(&self.feeds)
            .get(&key(session_id))
            .filter(|tx| !tx.is_closed())
            .cloned();
        let cmd = FeedCmd::FetchTurns {
            uri: uri.to_owned(),
            cursor,
            id: id.clone(),
        };
        let unsent = match tx {
            Some(tx) => tx.send(cmd).err().map(|e| e.0),
            None => Some(cmd),
        };
        if let Some(FeedCmd::FetchTurns { cursor, id, .. }) = unsent {
            self.respond(&id, no_window(cursor.as_deref()));
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
    // Chats this client holds a window of.
    mut windows: HashMap<String, Window>,
    mut cmds: mpsc::UnboundedReceiver<FeedCmd>,
) {
    // The turn's first response part is still to go out (a latency mark, `trace`).
    let mut first_part = false;
    // The highest `serverSeq` this client was sent.
    let mut last_seq = from.values().copied().max().unwrap_or(0);
    loop {
        let event = tokio::select! {
            // Commands first: a subscription is answered before more actions go out.
            biased;
            cmd = cmds.recv() => {
                let emptied = match cmd {
                    Some(FeedCmd::Subscribe { uri, kind, id, taken, shown }) => {
                        let opened = Opened { uri, kind, shown };
                        subscribe(&conn, &handle, &mut sub, &mut from, &mut windows, opened, &id)
                            .await;
                        // Actions the client sent behind this subscribe may go on now.
                        drop(taken);
                        last_seq = last_seq.max(from.values().copied().max().unwrap_or(0));
                        from.is_empty()
                    }
                    Some(FeedCmd::FetchTurns { uri, cursor, id }) => {
                        let answer = fetch_turns(&conn, &handle, &mut windows, last_seq, &uri, cursor)
                            .await;
                        conn.respond(&id, answer);
                        false
                    }
                    Some(FeedCmd::Unsubscribe(uri)) => {
                        windows.remove(&uri);
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
                if new {
                    last_seq = last_seq.max(p.seq());
                    if let StateAction::ChatTruncated(t) = p.action()
                        && let Some(w) = windows.get(p.channel())
                    {
                        // The reducer keeps the turns up to the named one (none without a
                        // name), which this client may not hold: it gets them first.
                        let whole = match &t.turn_id {
                            Some(turn) => {
                                complete_window(&conn, &handle, p.channel(), w, turn, last_seq)
                                    .await
                            }
                            None => true,
                        };
                        if whole {
                            windows.remove(p.channel());
                        }
                    }
                }
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

/// A channel a subscribe opens, and the shape its client asked for.
struct Opened {
    uri: String,
    kind: ChannelKind,
    shown: TurnsShown,
}

async fn subscribe(
    conn: &Conn,
    handle: &SessionHandle,
    sub: &mut Option<SessionSubscription>,
    from: &mut HashMap<String, u64>,
    windows: &mut HashMap<String, Window>,
    opened: Opened,
    id: &Value,
) {
    let Opened { uri, kind, shown } = opened;
    let wants = vec![want(&uri, &kind, shown)];
    // With a stream already going, a snapshot taken now is at or after every action this
    // feed has passed, so the channel's actions go on right after it, in order.
    let snapshot = match sub {
        Some(_) => handle.channels(wants).await,
        None => handle.subscribe_channels(wants).await.map(|(s, live)| {
            *sub = Some(live);
            s
        }),
    };
    match snapshot {
        Ok(s) => {
            let seq = s.seq;
            let copy = s.channels.into_iter().next().flatten();
            match copy.and_then(|c| Host::channel_snapshot(&uri, &kind, c, seq)) {
                Some((mut snapshot, older)) => {
                    windows.remove(&uri);
                    if let Some(w) = bound_chat(&mut snapshot, &kind, shown, older, handle.id()) {
                        windows.insert(uri.clone(), w);
                    }
                    from.insert(uri, seq);
                    conn.respond_ok(
                        id,
                        &SubscribeResult {
                            snapshot: Some(snapshot),
                        },
                    );
                }
                None => conn.respond(id, Err(no_chat(&uri))),
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

/// What a snapshot of channel `kind` at `uri` copies for a client shown `shown`: of a chat,
/// no more turns than it will hold.
pub(super) fn want(uri: &str, kind: &ChannelKind, shown: TurnsShown) -> ChannelWant {
    ChannelWant {
        uri: uri.to_owned(),
        kind: kind.clone(),
        newest_turns: match shown {
            TurnsShown::All => None,
            TurnsShown::Asked(n) | TurnsShown::Bounded(n) => Some(n),
        },
    }
}

/// Marks `snapshot`, of channel `kind` of session `session_id`, a chat copied without its
/// `older` oldest turns (see [`want`]), as `shown` says a client is told; the window the
/// client then holds (`None`: every turn).
pub(super) fn bound_chat(
    snapshot: &mut Snapshot,
    kind: &ChannelKind,
    shown: TurnsShown,
    older: usize,
    session_id: &str,
) -> Option<Window> {
    let SnapshotState::Chat(chat) = &mut snapshot.state else {
        return None;
    };
    let (n, marked) = match shown {
        TurnsShown::All => return None,
        TurnsShown::Asked(n) => (n, false),
        TurnsShown::Bounded(n) => (n, true),
    };
    if older == 0 {
        return None;
    }
    let w = Window {
        kind: kind.clone(),
        start: older,
        page: n.max(1),
    };
    if marked {
        chat.turns.insert(0, older_turns(w.start, session_id));
    }
    chat.turns_next_cursor = Some(w.cursor());
    Some(w)
}

/// The first turn of a bounded snapshot: what a client that pages nothing in (VS Code) shows
/// where the `left_out` older turns would be.
fn older_turns(left_out: usize, session_id: &str) -> Turn {
    let turns = if left_out == 1 { "turn" } else { "turns" };
    let left_out = thousands(left_out);
    Turn {
        id: OLDER_TURNS_ID.to_owned(),
        started_at: None,
        duration: None,
        message: claude_host_agent::actions::message(
            &format!("{left_out} earlier {turns} of this session"),
            MessageKind::Agent,
        ),
        response_parts: vec![ResponsePart::Markdown(MarkdownResponsePart {
            id: format!("{OLDER_TURNS_ID}-text"),
            content: format!(
                "The {left_out} earlier {turns} of this session are not shown, so that it opens \
                 quickly; Claude still has them. `claude-host sessions show {session_id}` prints \
                 the whole conversation, and `claude-host serve --chat-turns 0` sends every turn \
                 to clients that do not ask for fewer."
            ),
        })],
        usage: None,
        state: TurnState::Complete,
    }
}

/// `n` with its thousands apart: 3,514.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// `fetchTurns` where the client holds every turn (no window): nothing older to load.
fn no_window(cursor: Option<&str>) -> Result<Value, RpcError> {
    match cursor {
        Some(c) => Err(RpcError::invalid_params(format!("unknown cursor {c:?}"))),
        None => Ok(json!({})),
    }
}

/// What `read` takes from the completed turns of chat `uri` (a chat or subagent channel).
async fn read_turns<T: Send + 'static>(
    handle: &SessionHandle,
    uri: &str,
    kind: &ChannelKind,
    read: impl FnOnce(&[Turn]) -> T + Send + 'static,
) -> Result<T, RpcError> {
    let chat = match kind {
        ChannelKind::Chat => WhichChat::Default,
        _ => WhichChat::Uri(uri.to_owned()),
    };
    handle
        .read_chat(chat, move |c| read(&c.turns))
        .await
        .map_err(|e| RpcError::new(code::SESSION_NOT_FOUND, format!("{uri}: {e}")))?
        .ok_or_else(|| no_chat(uri))
}

/// A subscribed or fetched channel the session does not have.
fn no_chat(uri: &str) -> RpcError {
    RpcError::new(
        code::SESSION_NOT_FOUND,
        format!("no chat {uri} in this session"),
    )
}

/// Sends this client alone the `chat/turnsLoaded` that puts `turns` ahead of what it holds (a
/// connection too slow to take it is being closed, and its answer goes nowhere either).
fn send_loaded(conn: &Conn, uri: &str, seq: u64, turns: Vec<Turn>, next: Option<String>) {
    let loaded = Published::to_one(ActionEnvelope {
        channel: uri.to_owned(),
        action: StateAction::ChatTurnsLoaded(ChatTurnsLoadedAction {
            turns,
            turns_next_cursor: next,
        }),
        // Not a new action of the channel's stream: the number the client last saw.
        server_seq: seq,
        origin: None,
        rejection_reason: None,
    });
    let _ = conn.send(loaded.notification());
}

/// Loads the page of turns before this client's window of chat `uri` into its state
/// (`chat/turnsLoaded`, before the answer, as AHP requires).
async fn fetch_turns(
    conn: &Conn,
    handle: &SessionHandle,
    windows: &mut HashMap<String, Window>,
    seq: u64,
    uri: &str,
    cursor: Option<String>,
) -> Result<Value, RpcError> {
    let Some(w) = windows.get_mut(uri) else {
        return no_window(cursor.as_deref());
    };
    if let Some(c) = &cursor
        && *c != w.cursor()
    {
        return Err(RpcError::invalid_params(format!("unknown cursor {c:?}")));
    }
    let (start, page) = (w.start, w.page);
    // Only the page is copied out of the session, however long the chat.
    let (begin, page) = read_turns(handle, uri, &w.kind, move |turns| {
        let end = start.min(turns.len());
        let begin = end.saturating_sub(page);
        (begin, turns[begin..end].to_vec())
    })
    .await?;
    let next = if begin > 0 {
        w.start = begin;
        Some(w.cursor())
    } else {
        windows.remove(uri);
        None
    };
    send_loaded(conn, uri, seq, page, next);
    Ok(json!({}))
}

/// Before a truncation to `turn` reaches a client holding window `w` of chat `uri`: when
/// the turn is older than the window, every turn up to it is loaded into the client's state,
/// so the client keeps what the session keeps. Whether the client now holds every turn.
async fn complete_window(
    conn: &Conn,
    handle: &SessionHandle,
    uri: &str,
    w: &Window,
    turn: &str,
    seq: u64,
) -> bool {
    let (start, turn) = (w.start, turn.to_owned());
    // The turns the client lacks, copied only when the kept turn is among them.
    let older = read_turns(handle, uri, &w.kind, move |turns| {
        let lacking = &turns[..start.min(turns.len())];
        lacking
            .iter()
            .any(|t| t.id == turn)
            .then(|| lacking.to_vec())
    });
    match older.await {
        Ok(Some(turns)) => {
            send_loaded(conn, uri, seq, turns, None);
            true
        }
        Ok(None) => false,
        Err(e) => {
            tracing::warn!(channel = %uri, error = %e.message, "cannot load a truncated chat's older turns for a client");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn thousands_are_set_apart() {
        for (n, s) in [
            (0, "0"),
            (7, "7"),
            (999, "999"),
            (1000, "1,000"),
            (3514, "3,514"),
        ] {
            assert_eq!(super::thousands(n), s);
        }
        assert_eq!(super::thousands(1_234_567), "1,234,567");
    }
}
