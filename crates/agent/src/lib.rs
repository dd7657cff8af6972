//! Claude sessions as AHP state.
//!
//! One task owns each session ([`session`]): it drives the Claude Code CLI, turns its
//! stream-json frames into AHP actions ([`mapper`]), reduces them with the official `ahp`
//! reducers and publishes them, numbered, to every subscriber ([`outbox`]). What the host holds
//! and what every client reduces are the same by construction. [`Agent`] is the registry of a
//! host's sessions and its edge to the models ([`models`]).

pub mod actions;
mod agent;
pub mod attachments;
pub mod completions;
pub mod config;
pub mod customizations;
pub mod edits;
pub mod file_index;
pub mod listing;
pub mod mapper;
mod meters;
pub mod mirror;
pub mod models;
pub mod outbox;
pub mod questions;
pub mod restore;
mod session;
mod subagent;
pub mod terminal;

pub use agent::{
    AHP_SESSION_PREFIX, Agent, AgentConfig, AgentError, CLAUDE_SESSION_PREFIX, Durable, NewSession,
    default_uris, session_id_of, uris_for,
};
/// Latency marks for the benchmarks (the front ends mark their own steps with it).
pub use claude_host_sdk::trace;
pub use listing::SessionListing;
pub use models::{
    GITHUB_RESOURCE, ModelAccess, PromptReporter, ProxyEndpoint, ProxyModels, UpstreamFactory,
};
pub use outbox::{Published, Sequence};
pub use session::{
    ChannelCopy, ChannelKind, ChannelWant, ChannelsSnapshot, ChatSessionError, Confirmation,
    ForkedSession, InputReply, SessionEvent, SessionHandle, SessionNotice, SessionSnapshot,
    SessionStatus, SessionSubscription, SessionUris, WhichChat, empty_chat,
};
pub use session::{NewTerminal, changeset_uri, tool_terminal_uri};

/// Spawns a session that no [`Agent`] owns (tests, benchmarks, embedders that manage their
/// own registry). It closes when its last handle is dropped.
pub fn standalone_session(spec: StandaloneSession) -> SessionHandle {
    session::spawn_standalone(spec)
}

pub use session::StandaloneSession;
