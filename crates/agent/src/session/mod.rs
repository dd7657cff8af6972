//! A Claude session: one task owns it (the CLI, its frames, the AHP session and chat state,
//! parked confirmations and questions, the prompt queue, the settings). Others hold a
//! [`SessionHandle`], send it typed commands, and observe it through one ordered stream of
//! published actions ([`SessionSubscription`]).

mod bridge;
pub(crate) mod client_tools;
mod task;

pub use task::empty_chat;
pub use task::{NewTerminal, changeset_uri, tool_terminal_uri};

pub(crate) use task::customs::CustomsSpec;
pub(crate) use task::{Overlay, SessionDurable, SessionSpec, scope_of, spawn};

use crate::outbox::{Published, ReplayRing};
use ahp_types::actions::{ActionOrigin, StateAction};
use ahp_types::common::JsonObject;
use ahp_types::notifications::PartialSessionSummary;
use ahp_types::state::{
    ChatInputAnswer, ChatInputResponseKind, ChatState, SessionActiveClient, SessionState,
    SessionSummary,
};
use claude_host_sdk::{SessionError, SessionOptions};
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use task::Command;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

/// Why a session operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ChatSessionError {
    /// The CLI could not be started or initialized.
    #[error("cannot start the Claude session: {0}")]
    Start(String),
    /// The CLI failed during the turn.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// No tool call or input request with this id is waiting.
    #[error("nothing with id {0} is waiting for the client")]
    NotPending(String),
    /// The session cannot do this now, or the request is not valid.
    #[error("{0}")]
    Refused(String),
    /// The session was closed.
    #[error("the session is closed")]
    Closed,
}

/// The client's decision on a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirmation {
    /// Run it.
    Approve,
    /// Run it, and do not ask again for calls like it: the rule the CLI suggested (which it
    /// may keep in the project's local settings, as Claude Code's own "always allow" does),
    /// else a rule allowing the tool for this session.
    ApproveForSession,
    /// Do not run it.
    Deny,
}

/// A client's answer to an input request (`AskUserQuestion`).
#[derive(Debug, Clone)]
pub struct InputReply {
    /// Accept, decline or cancel.
    pub response: ChatInputResponseKind,
    /// Answers keyed by question id.
    pub answers: HashMap<String, ChatInputAnswer>,
}

/// The URIs a session is known by on the wire, chosen once by whoever created it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionUris {
    /// The session channel.
    pub session: String,
    /// Its default chat channel.
    pub chat: String,
}

/// Which of a session's channels an action was dispatched on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelKind {
    /// The session channel.
    Session,
    /// The default chat.
    Chat,
    /// The chat of the subagent this tool call (its id) started.
    Subagent(String),
    /// A changeset of the session's file edits.
    Changeset(crate::edits::Scope),
    /// A terminal (its URI): a client's shell, or a Bash call's output.
    Terminal(String),
}

/// What a session is doing, published by its task whenever it changes (cheap to read; the
/// AHP state itself is read through [`SessionHandle::snapshot`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionStatus {
    /// The running turn.
    pub turn: Option<String>,
    /// Tool calls waiting for a confirmation.
    pub confirmations: Vec<String>,
    /// Input requests (questions) waiting for answers.
    pub inputs: Vec<String>,
    /// The model chosen (else the CLI's default).
    pub model: Option<String>,
    /// The thinking effort chosen.
    pub effort: Option<String>,
    /// The permission mode in force (`None`: the CLI's default).
    pub permission_mode: Option<String>,
    /// The live CLI's process group.
    pub cli_pgid: Option<i32>,
    /// How many CLIs were started for this session.
    pub materializations: usize,
    /// The Claude session id, once a transcript exists (or is being written).
    pub claude_session_id: Option<String>,
    /// The session's title.
    pub title: String,
    /// Working directories, the first being the CLI's.
    pub working_directories: Vec<PathBuf>,
    /// Tool calls the running turn tracks as asked about (zero between turns).
    pub tracked_tool_calls: usize,
    /// Calls of client tools waiting for their client's result.
    pub client_calls: Vec<String>,
    /// The session is closed (or closing).
    pub closed: bool,
}

/// A session's state at one point of its stream.
#[derive(Debug, Clone)]
pub struct SessionSnapshot {
    /// The session channel's state.
    pub session: SessionState,
    /// The default chat's state.
    pub chat: ChatState,
    /// The subagents' chats, in the order they started.
    pub subagents: Vec<ChatState>,
    /// What its tool calls changed on disk (changeset states are computed from it).
    pub edits: Arc<crate::edits::EditBook>,
    /// Its terminals' states, by URI.
    pub terminals: Vec<(String, ahp_types::state::TerminalState)>,
    /// The `serverSeq` it is at: every later action of the session has a higher one.
    pub seq: u64,
}

impl SessionSnapshot {
    /// The state of one of the session's chats by URI (the default chat or a subagent's).
    pub fn chat_state(&self, uri: &str) -> Option<&ChatState> {
        if self.chat.resource == uri {
            return Some(&self.chat);
        }
        self.subagents.iter().find(|c| c.resource == uri)
    }
}

/// A channel of a session whose state a snapshot copies, and how much of it.
#[derive(Debug, Clone)]
pub struct ChannelWant {
    /// The channel's URI (a subagent's chat and a terminal are found by it).
    pub uri: String,
    /// Which of the session's channels it is.
    pub kind: ChannelKind,
    /// For a chat: at most this many of its completed turns, the newest (`None`: all).
    pub newest_turns: Option<usize>,
}

/// One channel's state, copied by [`SessionHandle::channels`].
#[derive(Debug, Clone)]
pub enum ChannelCopy {
    /// The session channel's state.
    Session(Box<SessionState>),
    /// A chat's state, without its `older` oldest completed turns (see
    /// [`ChannelWant::newest_turns`]).
    Chat {
        /// The chat, with the newest turns only.
        state: Box<ChatState>,
        /// How many of its oldest completed turns were left out.
        older: usize,
    },
    /// A terminal's state.
    Terminal(Box<ahp_types::state::TerminalState>),
    /// The edits a changeset is computed from.
    Changeset {
        /// The session's edits.
        edits: Arc<crate::edits::EditBook>,
        /// For a turn's changeset, whether the session has that turn (always true otherwise).
        turn_known: bool,
    },
}

/// Channels' states at one point of a session's stream: a copy of what was asked for only,
/// so a client opening one chat of a long session does not pay for a copy of all of it.
#[derive(Debug)]
pub struct ChannelsSnapshot {
    /// Each wanted channel's state, in the order asked; `None`: the session has no such
    /// channel.
    pub channels: Vec<Option<ChannelCopy>>,
    /// The `serverSeq` they are at: every later action of the session has a higher one.
    pub seq: u64,
}

/// The session channel's state out of a copy that asked for it first.
fn session_copy(copies: ChannelsSnapshot) -> Result<SessionState, ChatSessionError> {
    match copies.channels.into_iter().next().flatten() {
        Some(ChannelCopy::Session(s)) => Ok(*s),
        _ => Err(ChatSessionError::Closed),
    }
}

/// A receiver of a session's published actions.
type LiveActions = broadcast::Receiver<Arc<Published>>;

/// One of a session's chats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WhichChat {
    /// The session's own chat, whatever URI a client knows it by.
    Default,
    /// The chat (the default one or a subagent's) whose resource is this URI.
    Uri(String),
}

/// What a subscriber receives.
#[derive(Debug, Clone)]
pub enum SessionEvent {
    /// The next action, in order.
    Action(Arc<Published>),
    /// The subscriber fell so far behind that the actions it missed are gone: the state as
    /// of now, to start over from. Actions after it follow.
    Resync(Box<SessionSnapshot>),
}

/// Session-list changes, for listeners such as the AHP root channel.
#[derive(Debug, Clone)]
pub enum SessionNotice {
    /// A session was created.
    Added(Box<SessionSummary>),
    /// Some of a session's summary fields changed.
    Changed {
        /// Its session URI.
        session: String,
        /// The changed fields.
        changes: Box<PartialSessionSummary>,
    },
    /// A session is no longer live.
    Removed {
        /// Its session URI.
        session: String,
    },
}

/// The new session a fork made.
#[derive(Debug, Clone)]
pub struct ForkedSession {
    /// Its Claude session id.
    pub id: String,
    /// The settings it inherits.
    pub model: Option<String>,
    /// The effort it inherits.
    pub effort: Option<String>,
    /// The permission mode it inherits.
    pub permission_mode: Option<String>,
}

struct Shared {
    id: String,
    uris: SessionUris,
    /// Distinguishes this session from a later one under the same id (after an eviction).
    instance: u64,
    commands: mpsc::Sender<Command>,
    status: watch::Receiver<SessionStatus>,
    /// Set by the task as it ends, before its command channel closes.
    ended: Arc<OnceLock<Ended>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The last handle of an ended session holds its last snapshot and replay ring (a long
        // session's are megabytes); the task's own trim ran before they were freed.
        let ended = Arc::get_mut(&mut self.ended).and_then(OnceLock::take);
        if ended.is_some() {
            drop(ended);
            task::give_back_freed_memory();
        }
    }
}

/// What a session leaves behind when it ends, for subscribers still catching up.
struct Ended {
    snapshot: SessionSnapshot,
    ring: ReplayRing,
}

/// A handle on a session (cheap to clone). Every method talks to the session's task.
#[derive(Clone)]
pub struct SessionHandle(Arc<Shared>);

impl std::fmt::Debug for SessionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionHandle")
            .field("id", &self.0.id)
            .finish_non_exhaustive()
    }
}

impl SessionHandle {
    /// The session id (the Claude session id of sessions this host creates).
    pub fn id(&self) -> &str {
        &self.0.id
    }

    /// The session's URIs.
    pub fn uris(&self) -> &SessionUris {
        &self.0.uris
    }

    /// The session channel's URI.
    pub fn resource(&self) -> &str {
        &self.0.uris.session
    }

    /// The default chat's URI.
    pub fn chat_uri(&self) -> &str {
        &self.0.uris.chat
    }

    pub(crate) fn instance(&self) -> u64 {
        self.0.instance
    }

    /// What the session is doing now.
    pub fn status(&self) -> SessionStatus {
        self.0.status.borrow().clone()
    }

    /// A receiver of status changes.
    pub fn watch_status(&self) -> watch::Receiver<SessionStatus> {
        self.0.status.clone()
    }

    /// Whether a turn is running.
    pub fn turn_running(&self) -> bool {
        self.0.status.borrow().turn.is_some()
    }

    /// Tool calls waiting for the client's decision.
    pub fn pending_confirmations(&self) -> Vec<String> {
        self.0.status.borrow().confirmations.clone()
    }

    /// Input requests waiting for the client's answers.
    pub fn pending_inputs(&self) -> Vec<String> {
        self.0.status.borrow().inputs.clone()
    }

    /// The model chosen for this session, if any (else the CLI's default).
    pub fn model(&self) -> Option<String> {
        self.0.status.borrow().model.clone()
    }

    /// The thinking effort chosen, if any.
    pub fn effort(&self) -> Option<String> {
        self.0.status.borrow().effort.clone()
    }

    /// The permission mode in force (`None`: the CLI's default).
    pub fn permission_mode(&self) -> Option<String> {
        self.0.status.borrow().permission_mode.clone()
    }

    /// The Claude session id, once a transcript exists.
    pub fn session_id(&self) -> Option<String> {
        self.0.status.borrow().claude_session_id.clone()
    }

    /// How many times a CLI was started for this session.
    pub fn materializations(&self) -> usize {
        self.0.status.borrow().materializations
    }

    /// Whether a CLI was ever started.
    pub fn is_materialized(&self) -> bool {
        self.materializations() > 0
    }

    /// The CLI's working directory.
    pub fn cwd(&self) -> PathBuf {
        self.0
            .status
            .borrow()
            .working_directories
            .first()
            .cloned()
            .unwrap_or_default()
    }

    /// The process group of the live CLI, if one runs.
    pub async fn cli_pgid(&self) -> Option<i32> {
        self.0.status.borrow().cli_pgid
    }

    /// Whether the session is closed.
    pub fn is_closed(&self) -> bool {
        self.0.status.borrow().closed || self.0.commands.is_closed()
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, ChatSessionError> {
        let (tx, rx) = oneshot::channel();
        self.0
            .commands
            .send(make(tx))
            .await
            .map_err(|_| ChatSessionError::Closed)?;
        rx.await.map_err(|_| ChatSessionError::Closed)
    }

    /// A subscription to `live`, whose actions up to `last_seq` the subscriber has.
    fn subscription(&self, live: LiveActions, last_seq: u64) -> SessionSubscription {
        SessionSubscription {
            handle: self.clone(),
            live,
            backlog: VecDeque::new(),
            last_seq,
        }
    }

    /// The state now and a subscription to every action after it.
    pub async fn subscribe(
        &self,
    ) -> Result<(SessionSnapshot, SessionSubscription), ChatSessionError> {
        let (snapshot, live) = self.ask(|reply| Command::Subscribe { reply }).await?;
        let sub = self.subscription(live, snapshot.seq);
        Ok((snapshot, sub))
    }

    /// The actions after `last_seen` and a subscription to those after them; `None` when some
    /// of them are no longer kept (then subscribe afresh from a snapshot).
    pub async fn replay_after(
        &self,
        last_seen: u64,
    ) -> Result<Option<(Vec<Arc<Published>>, SessionSubscription)>, ChatSessionError> {
        let replay = self
            .ask(|reply| Command::Replay {
                after: last_seen,
                reply,
            })
            .await?;
        Ok(replay.map(|r| {
            let last_seq = r.actions.last().map_or(last_seen, |p| p.seq());
            (r.actions, self.subscription(r.live, last_seq))
        }))
    }

    /// The state now.
    pub async fn snapshot(&self) -> Result<SessionSnapshot, ChatSessionError> {
        self.ask(|reply| Command::Snapshot { reply }).await
    }

    /// The states of `wants` now: only what they name is copied (see [`ChannelsSnapshot`]).
    pub async fn channels(
        &self,
        wants: Vec<ChannelWant>,
    ) -> Result<ChannelsSnapshot, ChatSessionError> {
        Ok(self.ask_channels(wants, false).await?.0)
    }

    async fn ask_channels(
        &self,
        wants: Vec<ChannelWant>,
        subscribe: bool,
    ) -> Result<(ChannelsSnapshot, Option<LiveActions>), ChatSessionError> {
        self.ask(|reply| Command::Channels {
            wants,
            subscribe,
            reply,
        })
        .await
    }

    /// The session channel's state now (its chats not copied).
    pub async fn session_state(&self) -> Result<SessionState, ChatSessionError> {
        session_copy(self.channels(vec![self.session_want()]).await?)
    }

    /// The session channel, as a [`ChannelWant`].
    fn session_want(&self) -> ChannelWant {
        ChannelWant {
            uri: self.resource().to_owned(),
            kind: ChannelKind::Session,
            newest_turns: None,
        }
    }

    /// A subscription to every action from now on, and the session channel's state it
    /// starts from (its chats not copied).
    pub async fn subscribe_session(
        &self,
    ) -> Result<(SessionState, SessionSubscription), ChatSessionError> {
        let (copies, sub) = self.subscribe_channels(vec![self.session_want()]).await?;
        Ok((session_copy(copies)?, sub))
    }

    /// [`Self::channels`] and a subscription to every action after them. With no `wants`,
    /// a subscription to the actions from now on.
    pub async fn subscribe_channels(
        &self,
        wants: Vec<ChannelWant>,
    ) -> Result<(ChannelsSnapshot, SessionSubscription), ChatSessionError> {
        let (snapshot, live) = self.ask_channels(wants, true).await?;
        let live = live.ok_or(ChatSessionError::Closed)?;
        let sub = self.subscription(live, snapshot.seq);
        Ok((snapshot, sub))
    }

    /// What `read` takes from chat `chat`'s state now; `None` when the session has no such
    /// chat. Only what `read` copies is copied, so a page of a long chat costs a page, not the
    /// chat; it runs on the session's task, so it must be quick.
    pub async fn read_chat<T: Send + 'static>(
        &self,
        chat: WhichChat,
        read: impl FnOnce(&ChatState) -> T + Send + 'static,
    ) -> Result<Option<T>, ChatSessionError> {
        self.ask(|reply| Command::ReadChat {
            chat,
            read: Box::new(move |state| {
                let _ = reply.send(state.map(read));
            }),
        })
        .await
    }

    /// The default chat's state now (an empty chat once the session is closed).
    pub async fn state(&self) -> ChatState {
        match self.snapshot().await {
            Ok(s) => s.chat,
            Err(_) => crate::session::task::empty_chat(self.chat_uri(), ""),
        }
    }

    /// Sends a prompt and waits for its turn to end; returns the turn id. When a turn is
    /// running, the prompt is queued (visible as a queued message) and runs after it.
    pub async fn send(&self, prompt: &str) -> Result<String, ChatSessionError> {
        self.ask(|done| Command::Prompt {
            text: prompt.to_owned(),
            done,
        })
        .await?
    }

    /// Carries out an action a client dispatched on one of this session's channels: it is
    /// echoed with `origin` (or with a rejection reason) in the session's stream, in order
    /// with everything else. Returns once the session has the action (never waits for it).
    pub async fn dispatch(
        &self,
        kind: ChannelKind,
        action: StateAction,
        origin: ActionOrigin,
    ) -> Result<(), ChatSessionError> {
        self.dispatch_with_content(kind, action, origin, None).await
    }

    /// The slash commands and skills its CLI offers (empty until the CLI first started).
    pub async fn slash_commands(&self) -> Vec<crate::completions::SlashCommand> {
        self.ask(|reply| Command::SlashCommands { reply })
            .await
            .unwrap_or_default()
    }

    /// A client is active in the session (its tools and customizations), as `createSession`
    /// named it; shown in `activeClients`.
    pub async fn set_active_client(&self, client: SessionActiveClient) {
        let _ = self
            .0
            .commands
            .send(Command::ActiveClient(Ok(client)))
            .await;
    }

    /// How to reach a client's files: the plugins it publishes are copied through it. Give
    /// it before the client's `activeClients` entry.
    pub async fn set_client_files(
        &self,
        client_id: &str,
        files: Arc<dyn crate::customizations::sync::ClientFiles>,
    ) {
        let _ = self
            .0
            .commands
            .send(Command::ClientFiles {
                client_id: client_id.to_owned(),
                files,
            })
            .await;
    }

    /// A client is gone (its connection closed): it leaves `activeClients`.
    pub async fn remove_active_client(&self, client_id: &str) {
        let _ = self
            .0
            .commands
            .send(Command::ActiveClient(Err(client_id.to_owned())))
            .await;
    }

    /// As [`SessionHandle::dispatch`], for a `chat/turnStarted` whose prompt `content` (its
    /// text and attachments as content blocks, see [`crate::attachments`]) the caller built.
    pub async fn dispatch_with_content(
        &self,
        kind: ChannelKind,
        action: StateAction,
        origin: ActionOrigin,
        content: Option<Value>,
    ) -> Result<(), ChatSessionError> {
        self.0
            .commands
            .send(Command::Dispatch {
                kind,
                action: Box::new(action),
                origin,
                content,
            })
            .await
            .map_err(|_| ChatSessionError::Closed)
    }

    /// Injects a message into the running turn (steering). Returns the pending message's id;
    /// `None` when no turn is running.
    pub async fn steer(&self, text: &str) -> Result<Option<String>, ChatSessionError> {
        self.ask(|reply| Command::Steer {
            text: text.to_owned(),
            reply,
        })
        .await?
    }

    /// Settles a pending tool confirmation.
    pub async fn confirm_tool(
        &self,
        tool_call_id: &str,
        decision: Confirmation,
    ) -> Result<(), ChatSessionError> {
        self.ask(|reply| Command::Confirm {
            id: tool_call_id.to_owned(),
            decision,
            reply,
        })
        .await?
    }

    /// Answers a pending input request (answers keyed by question id).
    pub async fn answer_input(
        &self,
        request_id: &str,
        answer: InputReply,
    ) -> Result<(), ChatSessionError> {
        self.ask(|reply| Command::Answer {
            id: request_id.to_owned(),
            answer,
            reply,
        })
        .await?
    }

    /// Aborts the running turn: parked questions are refused, the turn ends cancelled at
    /// once, and the CLI is interrupted (killed if it does not settle within the grace
    /// period; the next turn then resumes the session). Nothing running is not an error.
    pub async fn abort(&self) -> Result<(), ChatSessionError> {
        self.ask(|reply| Command::Abort { reply }).await
    }

    /// Changes session settings (`model`, `effort`, `permissionMode`, or a client's own keys):
    /// checked against the session's config schema, applied to the live CLI, and shown as
    /// `session/configChanged`.
    pub async fn configure(&self, values: JsonObject) -> Result<(), ChatSessionError> {
        self.ask(|reply| Command::Configure { values, reply })
            .await?
    }

    /// Changes the model.
    pub async fn set_model(&self, model: &str) -> Result<(), ChatSessionError> {
        self.configure(one(crate::config::MODEL, Value::String(model.to_owned())))
            .await
    }

    /// Changes the thinking effort (`None` clears it).
    pub async fn set_effort(&self, effort: Option<&str>) -> Result<(), ChatSessionError> {
        let v = effort.map_or(Value::Null, |e| Value::String(e.to_owned()));
        self.configure(one(crate::config::EFFORT, v)).await
    }

    /// Changes the permission mode.
    pub async fn set_permission_mode(&self, mode: &str) -> Result<(), ChatSessionError> {
        self.configure(one(
            crate::config::PERMISSION_MODE,
            Value::String(mode.to_owned()),
        ))
        .await
    }

    /// Changes what the CLI is started with (tools, MCP servers, plugins, directories). The
    /// running turn is not disturbed; the next turn starts a new CLI resuming the session.
    pub async fn update_options(
        &self,
        change: impl FnOnce(&mut SessionOptions) + Send + 'static,
    ) -> Result<(), ChatSessionError> {
        self.ask(|reply| Command::UpdateOptions {
            change: Box::new(change),
            reply,
        })
        .await
    }

    /// Cuts the session back to its first `keep_turns` turns, in place: the state drops the
    /// later turns and the next turn resumes the same Claude session at that point.
    pub async fn truncate(&self, keep_turns: usize) -> Result<(), ChatSessionError> {
        self.ask(|reply| Command::Truncate {
            keep: task::Keep::Turns(keep_turns),
            reply,
        })
        .await?
    }

    /// Cuts the session back to just after `turn_id` (`None`: every turn).
    pub async fn truncate_after(&self, turn_id: Option<&str>) -> Result<(), ChatSessionError> {
        self.ask(|reply| Command::Truncate {
            keep: task::Keep::After(turn_id.map(str::to_owned)),
            reply,
        })
        .await?
    }

    /// Copies the session's transcript up to its first `keep_turns` turns into a new Claude
    /// session (which the agent then opens).
    pub async fn fork(&self, keep_turns: usize) -> Result<ForkedSession, ChatSessionError> {
        self.ask(|reply| Command::Fork { keep_turns, reply })
            .await?
    }

    /// Runs a changeset operation (`discard-file`, `discard-all`) on one of the session's
    /// changesets; refused with a reason naming the file when it would lose a change.
    pub async fn changeset_operation(
        &self,
        scope: crate::edits::Scope,
        operation: String,
        target: Option<ahp_types::commands::ChangesetOperationTarget>,
    ) -> Result<(), ChatSessionError> {
        self.ask(|reply| Command::ChangesetOperation {
            scope,
            operation,
            target,
            reply,
        })
        .await?
    }

    /// Restores the checkpoint before turn `to` (its id, or its 1-based number): every file
    /// the turns from there on changed is put back, then those turns leave the conversation.
    /// Returns how many files were put back; refused, changing nothing, when one of them was
    /// changed on disk since.
    pub async fn rewind(&self, to: &str) -> Result<usize, ChatSessionError> {
        self.ask(|reply| Command::Rewind {
            to: to.to_owned(),
            reply,
        })
        .await?
    }

    /// Opens a client's interactive terminal (a shell on a pseudo-terminal) in one of the
    /// session's folders.
    pub async fn create_terminal(&self, terminal: NewTerminal) -> Result<(), ChatSessionError> {
        self.ask(|reply| Command::CreateTerminal {
            terminal: Box::new(terminal),
            reply,
        })
        .await?
    }

    /// Closes a terminal; its shell and everything it started are killed.
    pub async fn dispose_terminal(&self, uri: &str) -> Result<(), ChatSessionError> {
        self.ask(|reply| Command::DisposeTerminal {
            uri: uri.to_owned(),
            reply,
        })
        .await?
    }

    /// Starts the CLI now, so the first prompt does not wait for it.
    pub async fn warm(&self) -> Result<(), ChatSessionError> {
        self.ask(|reply| Command::Warm { reply }).await?
    }

    /// Waits until what the store keeps of this session (title, settings, times) is written.
    pub async fn flush(&self) -> Result<(), ChatSessionError> {
        self.ask(|reply| Command::Flush { reply }).await
    }

    /// Ends the session: aborts a running turn, closes the CLI (killed if it does not exit in
    /// time), writes what the store keeps, and ends the task and its stream. Idempotent.
    pub async fn close(&self) {
        if self.ask(|reply| Command::Close { reply }).await.is_err() {
            // Already gone; wait until the task has fully ended.
        }
        self.0.commands.closed().await;
    }

    /// This host may no longer drive the session: its CLI is killed, the running turn ends
    /// with `message`, and the session closes. Returns once it has.
    pub async fn lease_lost(&self, message: String) {
        let _ = self
            .ask(|reply| Command::LeaseLost { message, reply })
            .await;
        self.0.commands.closed().await;
    }

    /// Resolves when the session's task has ended.
    pub async fn closed(&self) {
        self.0.commands.closed().await;
    }

    /// Waits until no turn runs.
    pub async fn wait_idle(&self) {
        let mut rx = self.0.status.clone();
        let _ = rx.wait_for(|s| s.turn.is_none() || s.closed).await;
    }

    async fn next_waiting(
        &self,
        timeout: Duration,
        pick: impl Fn(&SessionStatus) -> Option<String>,
    ) -> Option<String> {
        let mut rx = self.0.status.clone();
        let wait = async {
            let s = rx.wait_for(|s| pick(s).is_some() || s.closed).await.ok()?;
            pick(&s)
        };
        tokio::time::timeout(timeout, wait).await.ok().flatten()
    }

    /// Waits (at most `timeout`) until the session's CLI is running (`true`) or not; whether
    /// it got there.
    pub async fn wait_cli(&self, running: bool, timeout: Duration) -> bool {
        self.wait_status(|s| s.cli_pgid.is_some() == running, timeout)
            .await
            .is_some()
    }

    /// Waits (at most `timeout`) until the session's status satisfies `pred`; that status.
    pub async fn wait_status(
        &self,
        pred: impl Fn(&SessionStatus) -> bool,
        timeout: Duration,
    ) -> Option<SessionStatus> {
        let mut rx = self.0.status.clone();
        let found = tokio::time::timeout(timeout, rx.wait_for(|s| pred(s) || s.closed))
            .await
            .ok()?
            .ok()?
            .clone();
        pred(&found).then_some(found)
    }

    /// Waits until some tool call needs confirmation, and returns its id.
    pub async fn next_confirmation(&self, timeout: Duration) -> Option<String> {
        self.next_waiting(timeout, |s| s.confirmations.first().cloned())
            .await
    }

    /// Waits until some input request needs answers, and returns its id.
    pub async fn next_input(&self, timeout: Duration) -> Option<String> {
        self.next_waiting(timeout, |s| s.inputs.first().cloned())
            .await
    }
}

/// A session no [`crate::Agent`] owns: for tests, benchmarks and embedders with their own
/// registry.
#[derive(Debug, Clone)]
pub struct StandaloneSession {
    /// How the CLI is started (its model, effort and permission mode are the initial
    /// settings).
    pub opts: SessionOptions,
    /// The Claude session id (`None`: a new UUID).
    pub id: Option<String>,
    /// The models offered (checked by config changes; empty: anything goes).
    pub models: Vec<ahp_types::state::SessionModelInfo>,
    /// Whether `bypassPermissions` may be chosen.
    pub allow_bypass: bool,
    /// How long an interrupted turn may take to settle before the CLI is killed.
    pub abort_grace: Duration,
    /// How long a client tool call waits for its client to come back after it left.
    pub client_tool_grace: Duration,
    /// Actions kept for replay.
    pub replay_capacity: usize,
    /// Told of every human message the session hands its CLI.
    pub prompts: Option<Arc<dyn crate::PromptReporter>>,
    /// Where it records what its tool calls change (`None`: nothing is tracked).
    pub edits_dir: Option<std::path::PathBuf>,
    /// How long its CLI may sit idle before it is stopped (`None`: kept while it is open).
    pub cli_idle: Option<Duration>,
}

impl StandaloneSession {
    /// A new session with the defaults.
    pub fn new(opts: SessionOptions) -> StandaloneSession {
        StandaloneSession {
            opts,
            id: None,
            models: Vec::new(),
            allow_bypass: false,
            abort_grace: Duration::from_secs(5),
            client_tool_grace: Duration::from_secs(30),
            replay_capacity: 4096,
            prompts: None,
            edits_dir: None,
            cli_idle: None,
        }
    }
}

pub(crate) fn spawn_standalone(s: StandaloneSession) -> SessionHandle {
    let id = s.id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let (notices, _) = broadcast::channel(16);
    let dirs: Vec<std::path::PathBuf> = std::iter::once(s.opts.cwd.clone())
        .chain(s.opts.additional_directories.iter().cloned())
        .collect();
    let edits = s.edits_dir.as_ref().and_then(|d| {
        crate::edits::Tracker::open(d.join(&id), dirs.clone(), crate::edits::Limits::default())
            .map(Arc::new)
            .map_err(|e| tracing::warn!(error = %e, "edits in this session are not tracked"))
            .ok()
    });
    let home = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_default();
    let customs = CustomsSpec {
        sources: crate::customizations::Sources::new(
            s.opts.config_dir.as_deref(),
            &home,
            &s.opts.cwd,
        ),
        dir: None,
        global: None,
        stored: None,
        stored_global: None,
    };
    spawn(SessionSpec {
        customs,
        uris: crate::agent::default_uris(&id),
        id,
        opts: s.opts,
        working_directories: dirs,
        models: s.models,
        allow_bypass: s.allow_bypass,
        title: String::new(),
        turns: Vec::new(),
        subagents: Vec::new(),
        resumable: false,
        created_at: claude_host_protocol::time::now_millis(),
        store: None,
        overlay: Overlay::Off,
        seq: crate::outbox::Sequence::default(),
        replay_capacity: s.replay_capacity,
        abort_grace: s.abort_grace,
        client_grace: s.client_tool_grace,
        idle_eviction: None,
        notices,
        live_tasks: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        prompts: s.prompts,
        durable: None,
        edits,
        cli_idle: s.cli_idle,
        warm_up: false,
        uncut_warm_up: None,
        meters: None,
        on_exit: Box::new(|_| {}),
    })
}

fn one(key: &str, value: Value) -> JsonObject {
    let mut m = JsonObject::new();
    m.insert(key.to_owned(), value);
    m
}

/// How a lagging subscriber went on.
enum CatchUp {
    /// The missed actions are in its backlog.
    Backlog,
    /// It starts over from this snapshot.
    Resync(SessionEvent),
    /// The session is gone and left nothing to catch up from.
    Ended,
}

/// A live view of a session's actions. A subscriber that falls behind the live ring catches
/// up from the session's replay ring; one that falls behind that too gets a
/// [`SessionEvent::Resync`] with the current state. Nothing is skipped silently.
pub struct SessionSubscription {
    handle: SessionHandle,
    live: LiveActions,
    backlog: VecDeque<Arc<Published>>,
    last_seq: u64,
}

impl std::fmt::Debug for SessionSubscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionSubscription")
            .field("session", &self.handle.id())
            .field("last_seq", &self.last_seq)
            .finish_non_exhaustive()
    }
}

impl SessionSubscription {
    /// The session.
    pub fn handle(&self) -> &SessionHandle {
        &self.handle
    }

    /// Catches up after the live ring overflowed: from the replay ring, else from a snapshot
    /// (from what the session left behind if it has ended meanwhile).
    async fn catch_up(&mut self, missed: u64) -> CatchUp {
        tracing::debug!(session = %self.handle.id(), missed, "a subscriber fell behind; catching up from the replay ring");
        match self.handle.replay_after(self.last_seq).await {
            Ok(Some((actions, sub))) => {
                self.backlog.extend(actions);
                self.live = sub.live;
                return CatchUp::Backlog;
            }
            Ok(None) => {
                tracing::warn!(session = %self.handle.id(), missed, "a subscriber fell behind the replay ring; resynchronising it from a snapshot");
                if let Ok((snapshot, sub)) = self.handle.subscribe().await {
                    self.live = sub.live;
                    return self.resync(snapshot);
                }
            }
            Err(_) => {}
        }
        // Ended meanwhile: the rest is in what it left (the live receiver only has its tail).
        let Some(ended) = self.handle.0.ended.get() else {
            return CatchUp::Ended;
        };
        match ended.ring.after(self.last_seq) {
            Some(actions) => {
                self.backlog.extend(actions);
                CatchUp::Backlog
            }
            None => self.resync(ended.snapshot.clone()),
        }
    }

    fn resync(&mut self, snapshot: SessionSnapshot) -> CatchUp {
        self.backlog.clear();
        self.last_seq = snapshot.seq;
        CatchUp::Resync(SessionEvent::Resync(Box::new(snapshot)))
    }

    fn take(&mut self, p: Arc<Published>) -> Option<SessionEvent> {
        if p.seq() <= self.last_seq {
            return None;
        }
        self.last_seq = p.seq();
        Some(SessionEvent::Action(p))
    }

    /// The next event; `None` once the session has ended.
    pub async fn recv(&mut self) -> Option<SessionEvent> {
        loop {
            if let Some(p) = self.backlog.pop_front() {
                if let Some(ev) = self.take(p) {
                    return Some(ev);
                }
                continue;
            }
            match self.live.recv().await {
                Ok(p) => {
                    if let Some(ev) = self.take(p) {
                        return Some(ev);
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return None,
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    match self.catch_up(missed).await {
                        CatchUp::Backlog => {}
                        CatchUp::Resync(ev) => return Some(ev),
                        CatchUp::Ended => return None,
                    }
                }
            }
        }
    }

    /// Every event already published, without waiting for more.
    pub async fn drain(&mut self) -> Vec<SessionEvent> {
        let mut out = Vec::new();
        loop {
            if let Some(p) = self.backlog.pop_front() {
                out.extend(self.take(p));
                continue;
            }
            match self.live.try_recv() {
                Ok(p) => out.extend(self.take(p)),
                Err(broadcast::error::TryRecvError::Lagged(missed)) => {
                    match self.catch_up(missed).await {
                        CatchUp::Backlog => {}
                        CatchUp::Resync(ev) => out.push(ev),
                        CatchUp::Ended => return out,
                    }
                }
                Err(_) => return out,
            }
        }
    }
}
