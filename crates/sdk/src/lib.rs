//! The Claude Code CLI as a library.
//!
//! [`find`] locates (or installs) the pinned CLI; [`ClaudeSession`] spawns it with a clean
//! environment in its own session (see [`keeper`]) and drives it over stream-json and the control
//! protocol in both directions: the host's requests (`initialize`, `interrupt`, `set_model`, …)
//! and the CLI's callbacks (`can_use_tool`, `hook_callback`, cancellation).

pub mod find;
pub mod keeper;
pub mod mcp;
mod options;
mod process;
mod session;
/// Latency marks for the benchmarks (a crate of its own so that the proxy marks too).
pub use claude_host_trace as trace;
pub mod transcripts;
mod warm_up;

pub use keeper::Keeper;
pub use mcp::SdkMcpServer;
pub use options::SessionOptions;
pub use process::kill_group;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub use session::fuzzing;
pub use session::{
    Callbacks, ClaudeSession, ControlError, DenyAll, PermissionResult, SessionError,
};
/// Cancellation handed to [`Callbacks`] (re-exported so implementors need no extra crate).
pub use tokio_util::sync::CancellationToken;
pub use warm_up::{WarmUpError, WarmedUp};
