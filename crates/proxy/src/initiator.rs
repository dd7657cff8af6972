//! Who asked: the `X-Initiator` decision and the per-session request counts.
//!
//! Copilot bills a premium request for every call marked `user`. A request can only be a
//! human's when its body is a [`RequestKind::Prompt`]; whether it really is depends on what
//! the proxy knows of the session behind the bearer token:
//!
//! - **host**: claude-host writes this session's prompts itself and says so before each one
//!   ([`Ledger::note_prompt`]). A prompt-shaped request is `user` only while such a prompt is
//!   unclaimed; the first one claims it (given back if the upstream refuses the request, so a
//!   retry is billed instead). No guessing.
//! - **hook**: the CLI runs the `claude-host claude` prompt hook, which puts
//!   [`PROMPT_MARKER`](claude_host_protocol::request_kind::PROMPT_MARKER) right after every
//!   typed prompt. Once the marker has been seen, a prompt-shaped request without a fresh one
//!   is `agent`; before that (the hook did not run) the shape decides.
//! - **shape** (the bare proxy, the user's own `claude`): prompt-shaped means `user`. Shapes
//!   not recognised as side requests err towards `user`: under-reporting human prompts to
//!   Copilot is what got other proxies' users flagged.

use claude_host_protocol::messages::Initiator;
use claude_host_protocol::request_kind::{Classified, RequestKind};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// How the proxy learns which requests a human started, for one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptSource {
    /// From the body's shape alone.
    Shape,
    /// claude-host sends the prompts and announces each.
    Host,
    /// The prompt hook marks each typed prompt.
    Hook,
}

/// Requests forwarded for one session, by what they were marked.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SessionUsage {
    /// Requests sent with `X-Initiator: user` (premium requests).
    pub user: u64,
    /// Requests sent with `X-Initiator: agent`.
    pub agent: u64,
    /// Counts by request kind (`prompt`, `tool_result`, `subagent`, …).
    pub by_kind: std::collections::BTreeMap<String, u64>,
    /// Unix milliseconds of the first and the latest request.
    pub first_at: i64,
    /// See `first_at`.
    pub last_at: i64,
}

#[derive(Debug)]
struct Book {
    source: PromptSource,
    /// Announced prompts not yet claimed by a request (host sessions).
    unclaimed: u32,
    /// The hook's marker has been seen in this session.
    marker_seen: bool,
    usage: SessionUsage,
}

impl Book {
    fn new(source: PromptSource) -> Book {
        Book {
            source,
            unclaimed: 0,
            marker_seen: false,
            usage: SessionUsage::default(),
        }
    }
}

/// The sessions' books. One short lock per request; nothing awaits while holding it.
#[derive(Debug)]
pub(crate) struct Ledger {
    books: Mutex<HashMap<String, Book>>,
    changed: tokio::sync::watch::Sender<u64>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The proxy's view of who asked, shared with whoever drives the sessions (cheap to clone).
#[derive(Debug, Clone)]
pub struct PromptLedger(pub(crate) Arc<Ledger>);

impl PromptLedger {
    /// Says how the proxy learns which of `session`'s requests a human started; sessions
    /// never named here go by the request's shape.
    pub fn set_source(&self, session: &str, source: PromptSource) {
        self.0.set_source(session, source);
    }

    /// claude-host is about to send `session`'s CLI a message a human wrote (a prompt, a
    /// steering message): the next prompt-shaped request of that session is the user's.
    pub fn note_prompt(&self, session: &str) {
        self.0.note_prompt(session);
    }

    /// `session`'s turn ended: a prompt no request claimed (a `/compact`) is dropped.
    pub fn end_turn(&self, session: &str) {
        self.0.end_turn(session);
    }

    /// Requests forwarded so far, per session (sessions with none are left out).
    pub fn usage(&self) -> Vec<(String, SessionUsage)> {
        self.0.usage()
    }

    /// Requests forwarded so far for one session.
    pub fn session_usage(&self, session: &str) -> SessionUsage {
        self.0.session_usage(session)
    }

    /// Changes whenever a request is counted.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.0.watch()
    }
}

/// A prompt claimed by a request in flight; given back unless [`Claim::keep`] is called.
pub(crate) struct Claim {
    ledger: Arc<Ledger>,
    session: String,
    kept: bool,
}

impl Claim {
    /// The upstream took the request: the prompt is spent.
    pub(crate) fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.kept
            && let Some(book) = self.ledger.lock().get_mut(&self.session)
        {
            book.unclaimed += 1;
        }
    }
}

/// What the ledger decided for one request.
pub(crate) struct Decision {
    pub(crate) initiator: Initiator,
    pub(crate) claim: Option<Claim>,
    /// The session's counts including this request: (user, agent).
    pub(crate) counts: (u64, u64),
}

impl Ledger {
    pub(crate) fn new() -> Ledger {
        Ledger {
            books: Mutex::new(HashMap::new()),
            changed: tokio::sync::watch::Sender::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Book>> {
        self.books
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn set_source(&self, session: &str, source: PromptSource) {
        self.lock()
            .entry(session.to_owned())
            .and_modify(|b| b.source = source)
            .or_insert_with(|| Book::new(source));
    }

    pub(crate) fn note_prompt(&self, session: &str) {
        let mut books = self.lock();
        let book = books
            .entry(session.to_owned())
            .or_insert_with(|| Book::new(PromptSource::Host));
        book.source = PromptSource::Host;
        book.unclaimed += 1;
    }

    pub(crate) fn end_turn(&self, session: &str) {
        if let Some(book) = self.lock().get_mut(session) {
            book.unclaimed = 0;
        }
    }

    /// Decides the initiator of a request and counts it as forwarded.
    pub(crate) fn decide(
        self: &Arc<Self>,
        session: &str,
        classified: &Classified,
        subagent_header: bool,
    ) -> Decision {
        let kind = if subagent_header {
            RequestKind::Subagent
        } else {
            classified.kind
        };
        let mut books = self.lock();
        let book = books
            .entry(session.to_owned())
            .or_insert_with(|| Book::new(PromptSource::Shape));
        if classified.has_marker {
            book.marker_seen = true;
        }
        let mut claim = None;
        let user = kind == RequestKind::Prompt
            && match book.source {
                PromptSource::Shape => true,
                PromptSource::Hook => classified.fresh_marker || !book.marker_seen,
                PromptSource::Host if book.unclaimed > 0 => {
                    book.unclaimed -= 1;
                    claim = Some(Claim {
                        ledger: self.clone(),
                        session: session.to_owned(),
                        kept: false,
                    });
                    true
                }
                PromptSource::Host => false,
            };
        let usage = &mut book.usage;
        if user {
            usage.user += 1;
        } else {
            usage.agent += 1;
        }
        *usage.by_kind.entry(kind.as_str().to_owned()).or_default() += 1;
        let now = now_ms();
        if usage.first_at == 0 {
            usage.first_at = now;
        }
        usage.last_at = now;
        let counts = (usage.user, usage.agent);
        drop(books);
        self.changed.send_modify(|v| *v += 1);
        Decision {
            initiator: if user {
                Initiator::User
            } else {
                Initiator::Agent
            },
            claim,
            counts,
        }
    }

    pub(crate) fn usage(&self) -> Vec<(String, SessionUsage)> {
        let mut all: Vec<_> = self
            .lock()
            .iter()
            .filter(|(_, b)| b.usage.user + b.usage.agent > 0)
            .map(|(k, b)| (k.clone(), b.usage.clone()))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    pub(crate) fn session_usage(&self, session: &str) -> SessionUsage {
        self.lock()
            .get(session)
            .map(|b| b.usage.clone())
            .unwrap_or_default()
    }

    pub(crate) fn watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(fresh_marker: bool, has_marker: bool) -> Classified {
        Classified {
            kind: RequestKind::Prompt,
            fresh_marker,
            has_marker,
        }
    }

    fn tool() -> Classified {
        Classified {
            kind: RequestKind::ToolResult,
            fresh_marker: false,
            has_marker: false,
        }
    }

    #[test]
    fn host_sessions_bill_exactly_the_announced_prompts() {
        let l = Arc::new(Ledger::new());
        l.set_source("s", PromptSource::Host);
        // Nothing announced: even a prompt-shaped request is the agent's.
        assert_eq!(
            l.decide("s", &prompt(false, false), false).initiator,
            Initiator::Agent
        );
        l.note_prompt("s");
        let d = l.decide("s", &prompt(false, false), false);
        assert_eq!(d.initiator, Initiator::User);
        // A refused request gives the prompt back: the retry is billed instead.
        drop(d.claim);
        let d = l.decide("s", &prompt(false, false), false);
        assert_eq!(d.initiator, Initiator::User);
        d.claim.unwrap().keep();
        assert_eq!(
            l.decide("s", &prompt(false, false), false).initiator,
            Initiator::Agent
        );
        assert_eq!(l.decide("s", &tool(), false).initiator, Initiator::Agent);
        // A subagent's prompt-shaped request never claims the human's prompt.
        l.note_prompt("s");
        assert_eq!(
            l.decide("s", &prompt(false, false), true).initiator,
            Initiator::Agent
        );
        // A turn that ended without claiming (a /compact) leaves nothing for later.
        l.end_turn("s");
        assert_eq!(
            l.decide("s", &prompt(false, false), false).initiator,
            Initiator::Agent
        );
        let u = l.session_usage("s");
        assert_eq!((u.user, u.agent), (2, 5));
        assert_eq!(u.by_kind["subagent"], 1);
    }

    #[test]
    fn hook_sessions_trust_the_marker_once_it_is_seen() {
        let l = Arc::new(Ledger::new());
        l.set_source("h", PromptSource::Hook);
        // Before any marker: the shape decides (the hook may not be running).
        assert_eq!(
            l.decide("h", &prompt(false, false), false).initiator,
            Initiator::User
        );
        assert_eq!(
            l.decide("h", &prompt(true, true), false).initiator,
            Initiator::User
        );
        assert_eq!(
            l.decide("h", &prompt(false, true), false).initiator,
            Initiator::Agent
        );
        assert_eq!(
            l.decide("h", &prompt(true, true), false).initiator,
            Initiator::User
        );
    }

    #[test]
    fn unknown_sessions_go_by_shape() {
        let l = Arc::new(Ledger::new());
        assert_eq!(
            l.decide("b", &prompt(false, false), false).initiator,
            Initiator::User
        );
        assert_eq!(l.decide("b", &tool(), false).initiator, Initiator::Agent);
        assert_eq!(l.usage().len(), 1);
    }
}
