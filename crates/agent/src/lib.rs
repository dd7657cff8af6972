//! Claude sessions as AHP state.
//!
//! Claude Code's stream-json frames are turned into AHP `chat/*` actions ([`mapper`]), which
//! advance the session's state only through the official `ahp` reducers, so what the host
//! holds and what every client reduces are the same by construction. [`ChatSession`] owns one
//! long-lived CLI per session, created lazily on the first send.

mod agent;
pub mod mapper;
pub mod restore;
mod session;

pub use agent::{
    Agent, AgentConfig, AgentError, GITHUB_RESOURCE, NewSession, SessionListing, UpstreamFactory,
    session_id_of, session_resource,
};
pub use session::{ChatSession, ChatSessionError, Confirmation, InputReply};
