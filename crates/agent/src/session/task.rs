//! The session task: the one owner of a session. It reads the CLI's frames all the time
//! (so turns Claude Code starts by itself show up as they happen), answers the CLI's
//! permission requests through the client, carries out commands in the order they come, and
//! reduces every action into the session's AHP state before publishing it. Nothing that can
//! take long (starting a CLI, a control round trip) runs inline: it runs beside the task and
//! reports back as an [`Internal`] message, so a subscribe or a dispatch is never stuck behind it.

mod cli;
mod client;
pub(crate) mod customs;
mod disk;
mod dispatch;
mod edits;
mod evict;
mod terminals;
pub use edits::changeset_uri;
pub(crate) use edits::scope_of;
pub use terminals::{NewTerminal, tool_terminal_uri};
mod input;
mod settings;
mod subagents;
mod turns;

use super::bridge::Bridge;
use super::{
    ChannelKind, ChatSessionError, Confirmation, Ended, ForkedSession, InputReply, SessionHandle,
    SessionNotice, SessionSnapshot, SessionStatus, SessionUris, Shared,
};
use crate::actions::{self, Ready};
use crate::completions::SlashCommand;
use crate::config;
use crate::mapper::{self, TurnMapper};
use crate::outbox::{Outbox, Published, Replay, Sequence};
use crate::questions;
use ahp::reducers::{ReduceOutcome, apply_action_to_chat, apply_action_to_session};
use ahp_types::actions::{
    ActionOrigin, ChatInputCompletedAction, ChatPendingMessageRemovedAction,
    ChatPendingMessageSetAction, ChatQueuedMessagesReorderedAction, ChatToolCallConfirmedAction,
    ChatTruncatedAction, ChatTurnCancelledAction, ChatTurnStartedAction,
    SessionActiveClientRemovedAction, SessionActiveClientSetAction, StateAction,
};
use ahp_types::common::JsonObject;
use ahp_types::notifications::PartialSessionSummary;
use ahp_types::state::{
    ChatInputResponseKind, ChatState, ChatSummary, Message, MessageKind, PendingMessageKind,
    ResponsePart, SessionActiveClient, SessionLifecycle, SessionModelInfo, SessionState,
    ToolCallConfirmationState, ToolCallState, ToolInput, Turn,
};
use claude_host_protocol::frames::{CanUseTool, CommandState, ResultFrame, RunState};
use claude_host_protocol::stream_json::{Frame, FrameKind, Typed};
use claude_host_protocol::time::{now_millis, now_rfc3339, rfc3339_from_millis};
use claude_host_protocol::uri::{file_uri, subagent_chat_uri};
use claude_host_sdk::{ClaudeSession, PermissionResult, SessionError, SessionOptions};
use claude_host_store::{SessionRecord, Store};
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::Instant;

/// Session status bits (`SessionStatus` in AHP).
pub(crate) mod status {
    pub const IDLE: u32 = 1;
    pub const ERROR: u32 = 2;
    pub const IN_PROGRESS: u32 = 8;
    pub const INPUT_NEEDED: u32 = 24;
    pub const IS_READ: u32 = 32;
    pub const IS_ARCHIVED: u32 = 64;
}

/// What the model is told when the user says no (VS Code's wording).
const DECLINED: &str = "User declined";
const PLAN_DECLINED: &str = "The user declined the plan, maybe ask why?";
const QUESTION_CANCELLED: &str = "The user cancelled the question";
/// How long writing a prompt to the CLI may take before the CLI counts as stuck.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Commands a session takes before senders wait.
const COMMAND_QUEUE: usize = 1024;
/// The live fan-out ring; a subscriber further behind catches up from the replay ring.
const LIVE_SLOTS: usize = 256;

pub(crate) type Done = oneshot::Sender<Result<String, ChatSessionError>>;
type Reply<T> = oneshot::Sender<Result<T, ChatSessionError>>;

/// What a session is asked to do.
pub(crate) enum Command {
    /// The slash commands and skills of the session's CLI (empty before it first started).
    SlashCommands {
        reply: oneshot::Sender<Vec<SlashCommand>>,
    },
    /// A client became active in the session (`Ok`), or left it (`Err(client id)`).
    ActiveClient(Result<SessionActiveClient, String>),
    /// How to reach a client's files (its published plugins are copied through it).
    ClientFiles {
        client_id: String,
        files: Arc<dyn crate::customizations::sync::ClientFiles>,
    },
    Subscribe {
        reply: oneshot::Sender<(SessionSnapshot, broadcast::Receiver<Arc<Published>>)>,
    },
    Replay {
        after: u64,
        reply: oneshot::Sender<Option<Replay>>,
    },
    Snapshot {
        reply: oneshot::Sender<SessionSnapshot>,
    },
    /// Copies the wanted channels' states only (and subscribes, when asked).
    Channels {
        wants: Vec<super::ChannelWant>,
        subscribe: bool,
        reply: oneshot::Sender<(super::ChannelsSnapshot, Option<super::LiveActions>)>,
    },
    /// Runs `read` on one chat's state (`None`: the session has no such chat), on the
    /// session's task: what it copies out is all that is copied.
    ReadChat {
        chat: super::WhichChat,
        read: ChatReader,
    },
    Prompt {
        text: String,
        done: Done,
    },
    Dispatch {
        kind: ChannelKind,
        action: Box<StateAction>,
        origin: ActionOrigin,
        /// For a `chat/turnStarted`: its prompt with the attachments already read.
        content: Option<Value>,
    },
    Steer {
        text: String,
        reply: Reply<Option<String>>,
    },
    Confirm {
        id: String,
        decision: Confirmation,
        reply: Reply<()>,
    },
    Answer {
        id: String,
        answer: InputReply,
        reply: Reply<()>,
    },
    Abort {
        reply: oneshot::Sender<()>,
    },
    Configure {
        values: JsonObject,
        reply: Reply<()>,
    },
    UpdateOptions {
        change: Box<dyn FnOnce(&mut SessionOptions) + Send>,
        reply: oneshot::Sender<()>,
    },
    Truncate {
        keep: Keep,
        reply: Reply<()>,
    },
    Fork {
        keep_turns: usize,
        reply: Reply<ForkedSession>,
    },
    Warm {
        reply: Reply<()>,
    },
    Flush {
        reply: oneshot::Sender<()>,
    },
    Close {
        reply: oneshot::Sender<()>,
    },
    /// This host may no longer drive the session (its lease ran out or another host has it):
    /// the CLI is killed at once, the running turn ends with `message`, the session closes.
    LeaseLost {
        message: String,
        reply: oneshot::Sender<()>,
    },
    /// A client's interactive terminal.
    CreateTerminal {
        terminal: Box<terminals::NewTerminal>,
        reply: Reply<()>,
    },
    /// Closes a terminal (its shell and everything it started are killed).
    DisposeTerminal {
        uri: String,
        reply: Reply<()>,
    },
    /// Puts back every file the turns from `to` on changed, then cuts those turns.
    Rewind {
        to: String,
        reply: Reply<usize>,
    },
    /// `invokeChangesetOperation` on one of the session's changesets.
    ChangesetOperation {
        scope: crate::edits::Scope,
        operation: String,
        target: Option<ahp_types::commands::ChangesetOperationTarget>,
        reply: Reply<()>,
    },
}

/// How much a truncation keeps.
pub(crate) enum Keep {
    /// The first n turns.
    Turns(usize),
    /// Up to and including this turn (`None`: nothing).
    After(Option<String>),
}

/// What jobs beside the task and the CLI's callbacks report.
pub(crate) enum Internal {
    /// The CLI's MCP servers (`mcp_status`).
    McpStatus {
        generation: u64,
        servers: Vec<Value>,
    },
    /// The CLI runs as the turn's agent now (or refused to).
    AgentApplied {
        generation: u64,
        agent: Option<String>,
        result: Result<(), String>,
    },
    /// A client plugin was copied (or not).
    PluginCopied {
        client: String,
        id: String,
        nonce: Option<String>,
        result: Result<PathBuf, String>,
    },
    Started {
        generation: u64,
        result: Result<cli::StartedCli, String>,
        /// A warm-up turn the transcript may hold uncut (its prompt's uuid): the next CLI
        /// must resume before it.
        uncut_warm_up: Option<String>,
    },
    Permission {
        generation: u64,
        request: Box<CanUseTool>,
        /// What a file tool would change, shown before it is approved.
        proposed: Option<crate::edits::FileChange>,
        reply: oneshot::Sender<PermissionResult>,
    },
    Withdrawn {
        generation: u64,
        tool_use_id: String,
    },
    Applied {
        generation: u64,
        result: Result<(), String>,
    },
    /// Move a waiting turn or the queue forward (from a handler that cannot await).
    Pump,
    /// The mirror stored a completed turn's lines under the lease (or could not).
    Stored {
        turn_id: String,
        result: Result<(), String>,
    },
    /// Claude Code calls a client's tool (through the in-process MCP server).
    ClientTool {
        generation: u64,
        tool_use_id: String,
        name: String,
        reply: oneshot::Sender<rmcp::model::CallToolResult>,
    },
    /// A nested subagent ended; what its transcript holds (the CLI prints none of it).
    SubagentRead {
        call: String,
        end: subagents::ChildEnd,
        turns: Vec<Turn>,
    },
    /// A tool call changed files (from the edit tracker's hooks).
    Edited {
        generation: u64,
        record: crate::edits::EditRecord,
    },
    /// A terminal's shell wrote or exited.
    Terminal {
        uri: String,
        event: crate::terminal::PtyEvent,
    },
    /// The files of a rewind were put back (or not).
    Rewound {
        files: usize,
        keep: usize,
        result: Result<(), String>,
        reply: Reply<usize>,
    },
    /// A discard ran.
    PutBack {
        files: Vec<crate::edits::Composed>,
        result: Result<(), String>,
        reply: Reply<()>,
    },
}

/// The host's overlay record of a session, as the task knows it.
#[derive(Debug, Clone)]
// One per session, moved rarely: boxing the record would buy nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Overlay {
    /// No store.
    Off,
    /// The store could not be read: never write, so nothing it holds is overwritten.
    Unknown,
    /// What the store holds (`None`: nothing yet).
    Known(Option<SessionRecord>),
}

/// Everything a session task starts from.
pub(crate) struct SessionSpec {
    pub id: String,
    pub uris: SessionUris,
    pub opts: SessionOptions,
    pub working_directories: Vec<PathBuf>,
    pub models: Vec<SessionModelInfo>,
    pub allow_bypass: bool,
    pub title: String,
    pub turns: Vec<Turn>,
    /// The chats of its subagents, as their transcripts left them.
    pub subagents: Vec<crate::subagent::RestoredSubagent>,
    /// Records what its tool calls change on disk (`None`: not tracked).
    pub edits: Option<Arc<crate::edits::Tracker>>,
    /// Where its customizations come from and its decisions are kept.
    pub customs: customs::CustomsSpec,
    /// How long its CLI may sit idle before it is stopped (`None`: kept while it is open).
    pub cli_idle: Option<Duration>,
    /// A CLI started ahead of a prompt runs a warm-up turn first (the host's proxy answers
    /// it).
    pub warm_up: bool,
    /// A transcript exists under `id`: the first CLI resumes it.
    pub resumable: bool,
    /// The transcript ends in a warm-up turn nobody cut (its prompt's id): the first CLI
    /// resumes before it.
    pub uncut_warm_up: Option<String>,
    pub created_at: i64,
    pub store: Option<Arc<dyn Store>>,
    pub overlay: Overlay,
    pub seq: Sequence,
    pub replay_capacity: usize,
    pub abort_grace: Duration,
    /// How long a client tool call waits for its client to come back after it left.
    pub client_grace: Duration,
    /// Close the session after this long unused (restored sessions).
    pub idle_eviction: Option<Duration>,
    pub notices: broadcast::Sender<SessionNotice>,
    /// Counts running session tasks.
    pub live_tasks: Arc<AtomicUsize>,
    /// Told of every human message the task hands the CLI (premium-request accounting).
    pub prompts: Option<Arc<dyn crate::PromptReporter>>,
    /// Where the session's transcript is mirrored, and the host's name, when the host keeps
    /// sessions in a shared store.
    pub durable: Option<SessionDurable>,
    /// Where CLI starts, crashes and idle stops are counted.
    pub meters: Option<crate::meters::CliMeters>,
    /// Called with the session's instance number as its task ends (removes it from the
    /// registry).
    pub on_exit: Box<dyn FnOnce(u64) + Send + Sync>,
}

/// A session's part in a shared store: its transcript mirror and the name of this host.
#[derive(Debug, Clone)]
pub(crate) struct SessionDurable {
    pub mirror: crate::mirror::Mirror,
    pub host: String,
    /// The lease the session's writes are made under (`None`: running unleased by choice).
    pub fence: Option<claude_host_store::Fence>,
    /// The database (its shared values hold the global customization decisions).
    pub db: claude_host_store::Database,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Settings {
    model: Option<String>,
    effort: Option<String>,
    permission_mode: Option<String>,
}

enum Cli {
    None,
    Starting(tokio::task::JoinHandle<()>),
    Live(Arc<ClaudeSession>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The prompt is not written yet (the CLI starts, settles or takes settings first).
    Waiting,
    /// The CLI has it.
    Sent,
}

struct ActiveTurn {
    id: String,
    mapper: TurnMapper,
    /// The uuid of our user message; empty for a turn Claude Code started by itself.
    command: String,
    /// What to write.
    content: Value,
    phase: Phase,
    /// Where our command is in the CLI's queue (`None`: not reported; older CLIs).
    ours: Option<CommandState>,
    /// A `result` held back while a steering message is still to run.
    held: Option<ResultFrame>,
    /// A steering message went to the CLI during this turn: the turn ends when the CLI goes
    /// idle, not at a `result` (the CLI may report one for the interrupted answer before the
    /// request that carries the steering message).
    steered: bool,
    /// The turn's completion, held back until the mirror has stored its lines under the
    /// session's lease (a shared store): a turn a client saw complete is on every host.
    storing: Option<Vec<StateAction>>,
    done: Option<Done>,
}

struct Queued {
    id: String,
    message: Message,
    done: Option<Done>,
}

struct Steering {
    /// The client's id.
    id: String,
    /// The uuid it went to the CLI with.
    cli_uuid: String,
}

enum Waiter {
    Tool {
        /// The chat whose tool call it is (the default chat, or a subagent's).
        chat: ChannelKind,
        turn_id: String,
        reply: oneshot::Sender<PermissionResult>,
        input: Value,
        plan: bool,
        /// The permission update sent when the client approves for the session.
        always: Value,
    },
    Question {
        chat: ChannelKind,
        reply: oneshot::Sender<PermissionResult>,
        input: Value,
    },
}

impl Waiter {
    fn chat(&self) -> &ChannelKind {
        match self {
            Waiter::Tool { chat, .. } | Waiter::Question { chat, .. } => chat,
        }
    }
}

/// A settings change waiting for, or being applied to, the live CLI.
struct PendingConfig {
    values: JsonObject,
    target: Settings,
    origin: Option<ActionOrigin>,
    echo: Option<StateAction>,
    reply: Option<Reply<()>>,
    /// From a turn's message: if the CLI refuses it, that turn fails.
    for_turn: bool,
}

/// An interrupted turn whose frames are still coming (it has already ended in the state).
struct Settling {
    deadline: Instant,
    killed: bool,
}

/// Writes overlay records off the task, latest first: a record superseded before it was
/// written is skipped.
struct Writer {
    records: watch::Sender<Option<(u64, SessionRecord)>>,
    /// The version of the last record written (or given up on).
    written: watch::Receiver<u64>,
    job: tokio::task::JoinHandle<()>,
}

static INSTANCES: AtomicU64 = AtomicU64::new(1);

/// Starts a session task; returns its handle.
pub(crate) fn spawn(spec: SessionSpec) -> SessionHandle {
    let (commands_tx, commands) = mpsc::channel(COMMAND_QUEUE);
    let (internal_tx, internal) = mpsc::unbounded_channel();
    let settings = Settings {
        model: spec.opts.model.clone(),
        effort: spec.opts.effort.clone(),
        permission_mode: spec.opts.permission_mode.clone(),
    };
    let schema = config::schema(&spec.models, spec.allow_bypass);
    let mut values = JsonObject::new();
    if let Some(m) = &settings.model {
        values.insert(config::MODEL.into(), json!(m));
    }
    if let Some(e) = &settings.effort {
        values.insert(config::EFFORT.into(), json!(e));
    }
    values.insert(
        config::PERMISSION_MODE.into(),
        json!(settings.permission_mode.as_deref().unwrap_or("default")),
    );
    let values = config::with_defaults(&schema, values);
    let now = rfc3339_from_millis(now_millis());
    let mut chat = empty_chat(&spec.uris.chat, &spec.title);
    chat.turns = spec.turns;
    // What the store kept: read and archived.
    let mut flags = status::IDLE;
    if let Overlay::Known(Some(r)) = &spec.overlay {
        if r.read {
            flags |= status::IS_READ;
        }
        if r.archived {
            flags |= status::IS_ARCHIVED;
        }
    }
    let mut session = SessionState {
        provider: "claude".into(),
        title: spec.title.clone(),
        status: flags,
        activity: None,
        origin: None,
        project: None,
        working_directories: Some(
            spec.working_directories
                .iter()
                .map(|d| file_uri(d))
                .collect(),
        ),
        annotations: None,
        lifecycle: SessionLifecycle::Ready,
        creation_error: None,
        server_tools: None,
        active_clients: Vec::new(),
        chats: vec![ChatSummary {
            resource: spec.uris.chat.clone(),
            title: spec.title.clone(),
            status: status::IDLE,
            activity: None,
            modified_at: now,
            changes: None,
            origin: None,
            movable: None,
            interactivity: None,
            working_directories: None,
        }],
        default_chat: Some(spec.uris.chat.clone()),
        config: Some(config::state(schema, values)),
        customizations: None,
        changesets: spec
            .edits
            .as_ref()
            .map(|_| edits::catalogue(&spec.uris.session)),
        input_needed: None,
        meta: None,
    };
    let subagents = subagents::restore(&spec.uris.session, &mut chat, &mut session, spec.subagents);
    let initial = SessionStatus {
        model: settings.model.clone(),
        effort: settings.effort.clone(),
        permission_mode: settings.permission_mode.clone(),
        claude_session_id: spec.resumable.then(|| spec.id.clone()),
        title: spec.title.clone(),
        working_directories: spec.working_directories.clone(),
        ..SessionStatus::default()
    };
    let (status_tx, status_rx) = watch::channel(initial);
    let ended = Arc::new(std::sync::OnceLock::new());
    let handle = SessionHandle(Arc::new(Shared {
        id: spec.id.clone(),
        uris: spec.uris.clone(),
        instance: INSTANCES.fetch_add(1, Ordering::Relaxed),
        commands: commands_tx,
        status: status_rx,
        ended: ended.clone(),
    }));
    let turns_started = chat.turns.len();
    let mut book = crate::edits::EditBook::new(&spec.id);
    if let Some(t) = &spec.edits {
        for line in t.read_log() {
            book.apply(line);
        }
    }
    let instance = handle.instance();
    spec.live_tasks.fetch_add(1, Ordering::SeqCst);
    let task = Task {
        exit: Some(Exit {
            on_exit: spec.on_exit,
            live_tasks: spec.live_tasks,
            instance,
        }),
        id: spec.id,
        uris: spec.uris,
        session,
        chat,
        outbox: Outbox::new(spec.seq, spec.replay_capacity, LIVE_SLOTS),
        status: status_tx,
        notices: spec.notices,
        commands,
        internal_tx,
        internal,
        opts: spec.opts,
        prompts: spec.prompts,
        durable: spec.durable,
        working_directories: spec.working_directories,
        allow_bypass: spec.allow_bypass,
        models: spec.models,
        settings: settings.clone(),
        cli_settings: settings,
        cli: Cli::None,
        generation: 0,
        materializations: 0,
        resumable: spec.resumable,
        warm_up: spec.warm_up,
        warm_up_in_flight: None,
        warm_up_wanted: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        uncut_warm_up: spec.uncut_warm_up,
        warmed_empty: false,
        restart_needed: false,
        resume_at: None,
        turn: None,
        settling: None,
        queue: VecDeque::new(),
        steering: Vec::new(),
        waiting: HashMap::new(),
        notes: Vec::new(),
        applying: None,
        config_queue: VecDeque::new(),
        warm_waiters: Vec::new(),
        turns_started,
        abort_grace: spec.abort_grace,
        store: spec.store,
        archived: matches!(&spec.overlay, Overlay::Known(Some(r)) if r.archived),
        read: matches!(&spec.overlay, Overlay::Known(Some(r)) if r.read),
        overlay: spec.overlay,
        created_at: spec.created_at,
        writer: None,
        saved: 0,
        idle_eviction: spec.idle_eviction,
        meters: spec.meters,
        idle_since: None,
        closing: false,
        close_waiters: Vec::new(),
        slash_commands: Vec::new(),
        ended,
        subagents,
        client_calls: HashMap::new(),
        client_completed: std::collections::HashSet::new(),
        cli_tools: Vec::new(),
        client_grace: spec.client_grace,
        edits: spec.edits,
        book: Arc::new(book),
        discarding: false,
        terminals: Vec::new(),
        cut_pending: false,
        cli_idle_limit: spec.cli_idle,
        cli_idle_since: None,
        running_tasks: std::collections::HashSet::new(),
        evicted: false,
        draft_typed_at: None,
        draft_told_at: None,
        customs: customs::Customs::new(spec.customs),
    };
    let mut task = task;
    task.refresh_customizations();
    // A cut made before the last close, with no turn since: resume at it, show what it kept.
    if let Some((anchor, kept)) = task.edits.as_ref().and_then(|t| t.cut())
        && task.resumable
    {
        task.chat.turns.truncate(kept);
        task.turns_started = task.chat.turns.len();
        task.prune_subagents();
        task.resume_at = Some(anchor);
        task.cut_pending = true;
    }
    task.index_edits();
    task.restore_edit_content();
    tokio::spawn(async move {
        task.run().await;
        // The task and its state are gone: hand what they freed back to the system.
        give_back_freed_memory();
    });
    handle
}

/// Returns freed heap pages to the system. glibc's allocator keeps what a closed session
/// freed (a long one's turns are megabytes) in its arenas, so the host's RSS would stay at
/// its peak after the session is gone; `malloc_trim` releases the free pages of every arena.
#[allow(unsafe_code)]
pub(super) fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists, under its own locks; it
    // is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A reading of one chat's state (`None`: no such chat), run on the session's task.
pub(super) type ChatReader = Box<dyn FnOnce(Option<&ChatState>) + Send>;

/// A copy of `chat` with at most its `newest` completed turns (the newest; all without it).
fn copy_chat(chat: &ChatState, newest: Option<usize>) -> super::ChannelCopy {
    let older = newest.map_or(0, |n| chat.turns.len().saturating_sub(n));
    // Everything but the turns is small: copy the chat without them, then the ones wanted.
    let mut state = chat_without_turns(chat);
    state.turns = chat.turns[older..].to_vec();
    super::ChannelCopy::Chat {
        state: Box::new(state),
        older,
    }
}

/// `chat`'s state with no completed turns.
fn chat_without_turns(chat: &ChatState) -> ChatState {
    let ChatState {
        resource,
        title,
        status,
        activity,
        modified_at,
        changes,
        origin,
        movable,
        interactivity,
        working_directories,
        changesets,
        background_work,
        canvases,
        turns: _,
        turns_next_cursor,
        active_turn,
        steering_message,
        queued_messages,
        draft,
        meta,
    } = chat;
    ChatState {
        resource: resource.clone(),
        title: title.clone(),
        status: *status,
        activity: activity.clone(),
        modified_at: modified_at.clone(),
        changes: changes.clone(),
        origin: origin.clone(),
        movable: *movable,
        interactivity: *interactivity,
        working_directories: working_directories.clone(),
        changesets: changesets.clone(),
        background_work: background_work.clone(),
        canvases: canvases.clone(),
        turns: Vec::new(),
        turns_next_cursor: turns_next_cursor.clone(),
        active_turn: active_turn.clone(),
        steering_message: steering_message.clone(),
        queued_messages: queued_messages.clone(),
        draft: draft.clone(),
        meta: meta.clone(),
    }
}

/// An empty chat state, as a new session's chat starts.
pub fn empty_chat(uri: &str, title: &str) -> ChatState {
    ChatState {
        resource: uri.to_owned(),
        title: title.to_owned(),
        status: status::IDLE,
        activity: None,
        modified_at: now_rfc3339(),
        changes: None,
        origin: None,
        movable: None,
        interactivity: None,
        working_directories: None,
        changesets: None,
        background_work: None,
        canvases: None,
        turns: Vec::new(),
        turns_next_cursor: None,
        active_turn: None,
        steering_message: None,
        queued_messages: None,
        draft: None,
        meta: None,
    }
}

fn deny(message: &str) -> PermissionResult {
    PermissionResult::Deny {
        message: message.into(),
        interrupt: false,
    }
}

fn summary_changes() -> PartialSessionSummary {
    serde_json::from_value(json!({})).unwrap_or_else(|e| {
        // Every field of a partial summary is optional; this cannot fail.
        tracing::error!(error = %e, "cannot build an empty summary change");
        PartialSessionSummary {
            provider: None,
            title: None,
            status: None,
            activity: None,
            origin: None,
            project: None,
            working_directories: None,
            annotations: None,
            resource: None,
            created_at: None,
            modified_at: None,
            changes: None,
            meta: None,
            chats: None,
            default_chat: None,
        }
    })
}

async fn recv_frame(cli: Option<&ClaudeSession>) -> Option<Result<Frame, SessionError>> {
    match cli {
        Some(c) => c.recv_frame().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// What the end of a task undoes: its registry entry and its count.
struct Exit {
    on_exit: Box<dyn FnOnce(u64) + Send + Sync>,
    live_tasks: Arc<AtomicUsize>,
    instance: u64,
}

struct Task {
    exit: Option<Exit>,
    id: String,
    uris: SessionUris,
    // The state: reduced here and nowhere else.
    session: SessionState,
    chat: ChatState,
    outbox: Outbox,
    status: watch::Sender<SessionStatus>,
    notices: broadcast::Sender<SessionNotice>,
    commands: mpsc::Receiver<Command>,
    internal_tx: mpsc::UnboundedSender<Internal>,
    internal: mpsc::UnboundedReceiver<Internal>,
    // The CLI.
    opts: SessionOptions,
    prompts: Option<Arc<dyn crate::PromptReporter>>,
    durable: Option<SessionDurable>,
    working_directories: Vec<PathBuf>,
    allow_bypass: bool,
    models: Vec<SessionModelInfo>,
    /// The settings in force (what the state shows).
    settings: Settings,
    /// The settings the live CLI has.
    cli_settings: Settings,
    cli: Cli,
    generation: u64,
    materializations: usize,
    resumable: bool,
    /// CLIs started ahead of a prompt run a warm-up turn.
    warm_up: bool,
    /// The uuid of the warm-up turn the starting CLI runs.
    warm_up_in_flight: Option<String>,
    /// Cleared when a prompt comes for the starting CLI: a warm-up not begun yet is skipped.
    warm_up_wanted: Arc<std::sync::atomic::AtomicBool>,
    /// A warm-up turn that may be in the transcript uncut (its start was stopped midway).
    uncut_warm_up: Option<String>,
    /// A warm-up turn ran before the session's first turn: its transcript holds nothing
    /// else, and is removed before the next CLI starts the session afresh.
    warmed_empty: bool,
    restart_needed: bool,
    resume_at: Option<String>,
    // Turns.
    turn: Option<ActiveTurn>,
    settling: Option<Settling>,
    queue: VecDeque<Queued>,
    steering: Vec<Steering>,
    waiting: HashMap<String, Waiter>,
    /// Background tasks that finished since the last turn (a turn Claude Code starts by
    /// itself is named after them).
    notes: Vec<String>,
    applying: Option<PendingConfig>,
    config_queue: VecDeque<PendingConfig>,
    warm_waiters: Vec<Reply<()>>,
    turns_started: usize,
    abort_grace: Duration,
    // Persistence.
    store: Option<Arc<dyn Store>>,
    overlay: Overlay,
    created_at: i64,
    /// Archived by a client (kept in the overlay).
    archived: bool,
    /// Marked read by a client (kept in the store).
    read: bool,
    writer: Option<Writer>,
    /// Overlay records handed to the writer so far.
    saved: u64,
    // Lifecycle.
    idle_eviction: Option<Duration>,
    idle_since: Option<Instant>,
    closing: bool,
    close_waiters: Vec<oneshot::Sender<()>>,
    /// What its CLI offers after `/`, as it said at start-up.
    slash_commands: Vec<SlashCommand>,
    /// Where it leaves its last state and replay ring when it ends.
    ended: Arc<std::sync::OnceLock<Ended>>,
    /// The chats of the subagents its tool calls started (restored ones included), in the
    /// order they started.
    subagents: Vec<subagents::Subagent>,
    /// Client tool calls waiting for their client, by tool call id.
    client_calls: HashMap<String, client::ClientCall>,
    /// Client tool calls a client completed: the CLI's own report of them adds nothing.
    client_completed: std::collections::HashSet<String>,
    /// The clients' tools the live CLI offers.
    cli_tools: Vec<ahp_types::state::ToolDefinition>,
    client_grace: Duration,
    /// Records what tool calls change on disk (`None`: not tracked).
    edits: Option<Arc<crate::edits::Tracker>>,
    /// What they changed; shared with snapshots (changed copy-on-write).
    book: Arc<crate::edits::EditBook>,
    /// A discard is running.
    discarding: bool,
    /// Its terminals: clients' shells and Bash calls' output.
    terminals: Vec<terminals::Term>,
    /// The conversation was cut and no turn has gone to a CLI since (the cut is on disk).
    cut_pending: bool,
    /// How long the CLI may sit idle before it is stopped (`None`: it is kept).
    cli_idle_limit: Option<Duration>,
    /// Since when the live CLI has been idle.
    cli_idle_since: Option<Instant>,
    /// The CLI's background tasks that have not ended (by task id).
    running_tasks: std::collections::HashSet<String>,
    /// The CLI was stopped for being idle (opening the session starts it again).
    evicted: bool,
    meters: Option<crate::meters::CliMeters>,
    /// When a client last showed a prompt being typed, and when the live CLI was last told.
    draft_typed_at: Option<Instant>,
    draft_told_at: Option<Instant>,
    /// Its customizations.
    customs: customs::Customs,
}

impl Task {
    async fn run(mut self) {
        loop {
            // The future owns its handle on the CLI, so none is left over while a handler
            // runs (a CLI held only here can be closed gracefully).
            let frames = {
                let cli = match &self.cli {
                    Cli::Live(c) => Some(c.clone()),
                    _ => None,
                };
                async move { recv_frame(cli.as_deref()).await }
            };
            let deadline = self.deadline();
            tokio::select! {
                biased;
                Some(msg) = self.internal.recv() => self.on_internal(msg).await,
                cmd = self.commands.recv() => match cmd {
                    Some(c) => self.on_command(c).await,
                    // Every handle is gone: nobody can use the session any more.
                    None => self.closing = true,
                },
                item = frames => self.on_frame(item).await,
                () = sleep_until(deadline) => self.on_deadline().await,
            }
            self.sync_status();
            if self.closing {
                break;
            }
        }
        self.shut_down().await;
    }

    // ─── Publishing: reduce, then publish ─────────────────────────────────────

    fn publish(&mut self, kind: ChannelKind, action: StateAction, origin: Option<ActionOrigin>) {
        let (outcome, channel) = match &kind {
            ChannelKind::Session => (
                apply_action_to_session(&mut self.session, &action),
                self.uris.session.clone(),
            ),
            ChannelKind::Chat => (
                apply_action_to_chat(&mut self.chat, &action),
                self.uris.chat.clone(),
            ),
            ChannelKind::Subagent(call) => {
                let Some(child) = self.subagents.iter_mut().find(|c| c.call == *call) else {
                    tracing::warn!(session = %self.id, call = %call, action = actions::kind(&action), "an action for a subagent chat that does not exist; dropped");
                    return;
                };
                (
                    apply_action_to_chat(&mut child.chat, &action),
                    child.chat.resource.clone(),
                )
            }
            // A changeset's state is computed from the edit book; its actions are published
            // directly (`edits::refresh_changesets`).
            ChannelKind::Terminal(uri) => {
                let Some(t) = self.terminals.iter_mut().find(|t| t.uri == *uri) else {
                    tracing::warn!(session = %self.id, terminal = %uri, action = actions::kind(&action), "an action for a terminal that does not exist; dropped");
                    return;
                };
                let outcome = ahp::reducers::apply_action_to_terminal(&mut t.state, &action);
                let uri = uri.clone();
                self.trim_terminal(&uri);
                (outcome, uri)
            }
            ChannelKind::Changeset(scope) => {
                tracing::warn!(session = %self.id, ?scope, action = actions::kind(&action), "an action for a changeset published as state; dropped");
                return;
            }
        };
        if !matches!(outcome, ReduceOutcome::Applied) {
            tracing::debug!(session = %self.id, action = actions::kind(&action), ?outcome, "action did not change the state");
        }
        self.outbox.publish(&channel, action, origin, None);
    }

    fn chat(&mut self, action: StateAction) {
        self.publish(ChannelKind::Chat, action, None);
    }

    fn chat_all(&mut self, actions: Vec<StateAction>) {
        for a in actions {
            self.chat(a);
        }
    }

    fn session(&mut self, action: StateAction) {
        self.publish(ChannelKind::Session, action, None);
    }

    /// A dispatched action refused: echoed with the reason, the state untouched.
    fn reject(
        &mut self,
        kind: ChannelKind,
        action: StateAction,
        origin: ActionOrigin,
        why: String,
    ) {
        tracing::info!(session = %self.id, action = actions::kind(&action), reason = %why, "rejected a dispatched action");
        let channel = match kind {
            ChannelKind::Session => self.uris.session.clone(),
            ChannelKind::Chat => self.uris.chat.clone(),
            ChannelKind::Subagent(call) => subagent_chat_uri(&self.uris.session, &call),
            ChannelKind::Changeset(scope) => edits::changeset_uri(&self.uris.session, &scope),
            ChannelKind::Terminal(uri) => uri,
        };
        self.outbox
            .publish(&channel, action, Some(origin), Some(why));
    }

    fn notice(&self, changes: PartialSessionSummary) {
        let _ = self.notices.send(SessionNotice::Changed {
            session: self.uris.session.clone(),
            changes: Box::new(changes),
        });
    }

    fn notice_status(&self, st: u32) {
        let mut c = summary_changes();
        c.status = Some(st);
        c.modified_at = Some(now_rfc3339());
        self.notice(c);
    }

    fn sync_status(&self) {
        let turn = self.turn.as_ref();
        let mut confirmations = Vec::new();
        let mut inputs = Vec::new();
        for (id, w) in &self.waiting {
            match w {
                Waiter::Tool { .. } => confirmations.push(id.clone()),
                Waiter::Question { .. } => inputs.push(id.clone()),
            }
        }
        confirmations.sort();
        inputs.sort();
        let now = SessionStatus {
            turn: turn.map(|t| t.id.clone()),
            confirmations,
            inputs,
            model: self.settings.model.clone(),
            effort: self.settings.effort.clone(),
            permission_mode: self.settings.permission_mode.clone(),
            cli_pgid: match &self.cli {
                Cli::Live(c) => c.pgid(),
                _ => None,
            },
            materializations: self.materializations,
            claude_session_id: self.resumable.then(|| self.id.clone()),
            title: self.session.title.clone(),
            working_directories: self.working_directories.clone(),
            tracked_tool_calls: turn.map_or(0, |t| t.mapper.tracked()),
            client_calls: {
                let mut ids: Vec<String> = self.client_calls.keys().cloned().collect();
                ids.sort();
                ids
            },
            closed: self.closing,
        };
        self.status.send_if_modified(|s| {
            if *s == now {
                return false;
            }
            *s = now;
            true
        });
    }

    // ─── Commands ─────────────────────────────────────────────────────────────

    async fn on_command(&mut self, cmd: Command) {
        match cmd {
            Command::SlashCommands { reply } => {
                let out = self.with_skill_files(self.slash_commands.clone());
                self.deliver(reply, out);
            }
            Command::ActiveClient(Ok(client)) => {
                self.client_back(&client.client_id);
                self.session(StateAction::SessionActiveClientSet(
                    SessionActiveClientSetAction {
                        active_client: client,
                    },
                ));
                self.client_plugins_changed().await;
            }
            Command::ClientFiles { client_id, files } => self.set_client_files(client_id, files),
            Command::ActiveClient(Err(client_id)) => {
                self.client_left(&client_id);
                if self
                    .session
                    .active_clients
                    .iter()
                    .any(|c| c.client_id == client_id)
                {
                    self.session(StateAction::SessionActiveClientRemoved(
                        SessionActiveClientRemovedAction { client_id },
                    ));
                }
            }
            Command::Subscribe { reply } => {
                // Someone opened a session whose CLI was stopped for idleness: a prompt may
                // follow.
                if self.evicted {
                    self.rewarm("subscribed");
                }
                let live = self.outbox.subscribe();
                let out = (self.snapshot(), live);
                self.deliver(reply, out);
            }
            Command::Replay { after, reply } => {
                let out = self.outbox.replay_after(after);
                self.deliver(reply, out);
            }
            Command::Snapshot { reply } => {
                let out = self.snapshot();
                self.deliver(reply, out);
            }
            Command::Channels {
                wants,
                subscribe,
                reply,
            } => {
                if subscribe && self.evicted {
                    self.rewarm("subscribed");
                }
                let live = subscribe.then(|| self.outbox.subscribe());
                let out = (self.copy_channels(&wants), live);
                self.deliver(reply, out);
            }
            Command::ReadChat { chat, read } => {
                self.sync_status();
                let state = match chat {
                    super::WhichChat::Default => Some(&self.chat),
                    super::WhichChat::Uri(uri) => std::iter::once(&self.chat)
                        .chain(self.subagents.iter().map(|s| &s.chat))
                        .find(|c| c.resource == uri),
                };
                read(state);
            }
            Command::Prompt { text, done } => self.prompt(text, done).await,
            Command::Dispatch {
                kind,
                action,
                origin,
                content,
            } => self.dispatch(kind, *action, origin, content).await,
            Command::Steer { text, reply } => {
                if !self.turn.as_ref().is_some_and(|t| t.phase == Phase::Sent) {
                    self.deliver(reply, Ok(None));
                    return;
                }
                let id = uuid::Uuid::new_v4().to_string();
                let message = actions::message(&text, MessageKind::User);
                let r = match self.steer(&id, message, None, None).await {
                    Ok(()) => Ok(Some(id)),
                    Err(e) => Err(ChatSessionError::Refused(e)),
                };
                self.deliver(reply, r);
            }
            Command::Confirm {
                id,
                decision,
                reply,
            } => {
                let out = self.confirm(&id, decision, None, None);
                self.deliver(reply, out);
            }
            Command::Answer { id, answer, reply } => {
                let out = self.answer(&id, answer, None, None);
                self.deliver(reply, out);
            }
            Command::Abort { reply } => {
                if self.turn.is_some() {
                    self.cancel_turn(None, None);
                }
                self.deliver(reply, ());
            }
            Command::Configure { values, reply } => {
                self.configure(PendingConfig {
                    values,
                    target: Settings::default(),
                    origin: None,
                    echo: None,
                    reply: Some(reply),
                    for_turn: false,
                });
            }
            Command::UpdateOptions { change, reply } => {
                change(&mut self.opts);
                self.restart_needed = true;
                self.deliver(reply, ());
            }
            Command::Truncate { keep, reply } => {
                let r = self.truncate(keep, None).await;
                self.deliver(reply, r.map_err(ChatSessionError::Refused));
            }
            Command::Fork { keep_turns, reply } => {
                let out = self.fork(keep_turns).await;
                self.deliver(reply, out);
            }
            Command::Warm { reply } => self.warm(reply),
            Command::Flush { reply } => self.flush(reply),
            Command::Close { reply } => {
                self.close_waiters.push(reply);
                self.closing = true;
                self.save_active_summary();
            }
            Command::LeaseLost { message, reply } => {
                tracing::error!(session = %self.id, %message, "this host stops driving the session");
                // Killed before anything else: nothing it would write from now on counts.
                if let Cli::Live(cli) = &self.cli {
                    cli.kill();
                }
                self.fail_turn(
                    "leaseLost",
                    &message,
                    ChatSessionError::Refused(message.clone()),
                );
                self.close_waiters.push(reply);
                self.closing = true;
            }
            Command::ChangesetOperation {
                scope,
                operation,
                target,
                reply,
            } => self.changeset_operation(scope, operation, target, reply),
            Command::Rewind { to, reply } => self.rewind(&to, reply),
            Command::CreateTerminal { terminal, reply } => self.create_terminal(*terminal, reply),
            Command::DisposeTerminal { uri, reply } => self.dispose_terminal(&uri, reply),
        }
    }

    /// Answers a command; the status watch is brought up to date first, so whoever gets the
    /// answer and then reads the status sees what the answer says.
    fn deliver<T>(&self, tx: oneshot::Sender<T>, value: T) {
        self.sync_status();
        let _ = tx.send(value);
    }

    fn snapshot(&self) -> SessionSnapshot {
        let subagents = self.subagents.iter().map(|c| c.chat.clone()).collect();
        self.snapshot_with(self.chat.clone(), subagents)
    }

    /// A snapshot whose chats are these (the rest is small and copied).
    fn snapshot_with(&self, chat: ChatState, subagents: Vec<ChatState>) -> SessionSnapshot {
        SessionSnapshot {
            session: self.session.clone(),
            chat,
            subagents,
            edits: self.book.clone(),
            terminals: self
                .terminals
                .iter()
                .map(|t| (t.uri.clone(), t.state.clone()))
                .collect(),
            seq: self.outbox.seq(),
        }
    }

    fn copy_channels(&self, wants: &[super::ChannelWant]) -> super::ChannelsSnapshot {
        super::ChannelsSnapshot {
            channels: wants.iter().map(|w| self.copy_channel(w)).collect(),
            seq: self.outbox.seq(),
        }
    }

    fn copy_channel(&self, want: &super::ChannelWant) -> Option<super::ChannelCopy> {
        use super::ChannelCopy;
        Some(match &want.kind {
            ChannelKind::Session => ChannelCopy::Session(Box::new(self.session.clone())),
            ChannelKind::Chat => copy_chat(&self.chat, want.newest_turns),
            ChannelKind::Subagent(_) => copy_chat(
                &self
                    .subagents
                    .iter()
                    .find(|s| s.chat.resource == want.uri)?
                    .chat,
                want.newest_turns,
            ),
            ChannelKind::Terminal(uri) => {
                let t = self.terminals.iter().find(|t| t.uri == *uri)?;
                ChannelCopy::Terminal(Box::new(t.state.clone()))
            }
            ChannelKind::Changeset(scope) => ChannelCopy::Changeset {
                edits: self.book.clone(),
                turn_known: match scope {
                    crate::edits::Scope::Turn(t) => {
                        self.chat.turns.iter().any(|x| x.id == *t)
                            || self.chat.active_turn.as_ref().is_some_and(|a| a.id == *t)
                    }
                    _ => true,
                },
            },
        })
    }

    /// The state a closing session leaves behind: moved out, not copied (the task ends
    /// right after, and a long session's chats are megabytes).
    fn take_snapshot(&mut self) -> SessionSnapshot {
        let title = self.chat.title.clone();
        let chat = std::mem::replace(&mut self.chat, empty_chat(&self.uris.chat, &title));
        let subagents = self
            .subagents
            .iter_mut()
            .map(|c| {
                let uri = c.chat.resource.clone();
                std::mem::replace(&mut c.chat, empty_chat(&uri, ""))
            })
            .collect();
        self.snapshot_with(chat, subagents)
    }

    fn warm(&mut self, reply: Reply<()>) {
        if self.closing {
            self.deliver(reply, Err(ChatSessionError::Closed));
            return;
        }
        match &self.cli {
            Cli::Live(_) => {
                self.deliver(reply, Ok(()));
            }
            Cli::Starting(_) => self.warm_waiters.push(reply),
            Cli::None => {
                self.warm_waiters.push(reply);
                self.start_cli(true);
            }
        }
    }

    // ─── Deadlines and the end ────────────────────────────────────────────────

    fn quiet(&self) -> bool {
        self.turn.is_none()
            && matches!(self.cli, Cli::None)
            && self.waiting.is_empty()
            && self.client_calls.is_empty()
            && self.queue.is_empty()
            && self.applying.is_none()
    }

    fn deadline(&mut self) -> Option<Instant> {
        let settle = self
            .settling
            .as_ref()
            .filter(|s| !s.killed)
            .map(|s| s.deadline);
        let evict = match self.idle_eviction {
            Some(idle) if self.quiet() => {
                if self.outbox.subscribers() > 0 {
                    self.idle_since = None;
                    // Unsubscribing does not wake the task: look again later.
                    Some(Instant::now() + idle)
                } else {
                    Some(*self.idle_since.get_or_insert_with(Instant::now) + idle)
                }
            }
            _ => {
                self.idle_since = None;
                None
            }
        };
        [settle, evict, self.client_deadline(), self.cli_deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    async fn on_deadline(&mut self) {
        let now = Instant::now();
        self.evict_if_due(now).await;
        self.client_deadlines_passed(now);
        if let Some(s) = self.settling.as_mut()
            && !s.killed
            && now >= s.deadline
        {
            s.killed = true;
            tracing::warn!(session = %self.id, grace = ?self.abort_grace, "the turn did not settle after an interrupt; killing the CLI");
            if let Cli::Live(cli) = &self.cli {
                cli.kill();
            }
        }
        if let (Some(idle), Some(since)) = (self.idle_eviction, self.idle_since)
            && self.quiet()
            && self.outbox.subscribers() == 0
            && now >= since + idle
        {
            tracing::info!(session = %self.id, "closing a session nobody uses");
            self.closing = true;
        }
    }

    async fn shut_down(&mut self) {
        self.closing = true;
        if self.turn.is_some() {
            self.cancel_turn(None, None);
        }
        self.end_all_subagents(|| subagents::ChildEnd::Cancelled);
        self.refuse_waiting();
        for q in std::mem::take(&mut self.queue) {
            if let Some(done) = q.done {
                self.deliver(done, Err(ChatSessionError::Closed));
            }
        }
        for w in std::mem::take(&mut self.warm_waiters) {
            self.deliver(w, Err(ChatSessionError::Closed));
        }
        if let Some(p) = self.applying.take()
            && let Some(r) = p.reply
        {
            let _ = r.send(Err(ChatSessionError::Closed));
        }
        self.stop_cli().await;
        // A CLI that finished starting meanwhile is dropped here, which kills its group.
        while let Ok(msg) = self.internal.try_recv() {
            drop(msg);
        }
        self.forget_warm_up_transcript().await;
        if let Some(w) = self.writer.take() {
            drop(w.records);
            let _ = w.job.await;
        }
        self.sync_status();
        // Before the command channel closes: a subscriber that fell behind and then finds
        // the session gone catches up from these.
        let ended = Ended {
            snapshot: self.take_snapshot(),
            ring: self.outbox.take_ring(),
        };
        let _ = self.ended.set(ended);
        // Before the command channel closes ([`SessionHandle::closed`]): whoever waits for
        // that sees the session gone from the registry and the count.
        if let Some(exit) = self.exit.take() {
            (exit.on_exit)(exit.instance);
            exit.live_tasks.fetch_sub(1, Ordering::SeqCst);
        }
        // Commands that arrived meanwhile learn the session is closed.
        self.commands.close();
        while let Ok(cmd) = self.commands.try_recv() {
            refuse_command(cmd);
        }
        for w in self.close_waiters.drain(..) {
            let _ = w.send(());
        }
    }
}

/// Answers a command that arrived as the session closed.
fn refuse_command(cmd: Command) {
    match cmd {
        Command::Prompt { done, .. } => {
            let _ = done.send(Err(ChatSessionError::Closed));
        }
        Command::Steer { reply, .. } => {
            let _ = reply.send(Err(ChatSessionError::Closed));
        }
        Command::Confirm { reply, .. }
        | Command::Answer { reply, .. }
        | Command::Configure { reply, .. }
        | Command::Truncate { reply, .. }
        | Command::ChangesetOperation { reply, .. }
        | Command::CreateTerminal { reply, .. }
        | Command::DisposeTerminal { reply, .. }
        | Command::Warm { reply } => {
            let _ = reply.send(Err(ChatSessionError::Closed));
        }
        Command::Rewind { reply, .. } => {
            let _ = reply.send(Err(ChatSessionError::Closed));
        }
        Command::Fork { reply, .. } => {
            let _ = reply.send(Err(ChatSessionError::Closed));
        }
        Command::Close { reply }
        | Command::LeaseLost { reply, .. }
        | Command::Abort { reply }
        | Command::Flush { reply } => {
            let _ = reply.send(());
        }
        Command::UpdateOptions { reply, .. } => {
            let _ = reply.send(());
        }
        Command::Subscribe { .. }
        | Command::Replay { .. }
        | Command::Snapshot { .. }
        | Command::Channels { .. }
        | Command::ReadChat { .. }
        | Command::Dispatch { .. }
        | Command::SlashCommands { .. }
        | Command::ActiveClient(_)
        | Command::ClientFiles { .. } => {}
    }
}
