//! claude-host's Agent Client Protocol server: the host's Claude Code sessions for Zed,
//! JetBrains, Neovim and every other ACP editor, over one stdio connection.
//!
//! It is a front end of the agent core like the AHP server: it holds [`SessionHandle`]s from
//! the [`Agent`], renders their published actions as `session/update`s and sends commands;
//! it keeps no second copy of a session's state. The official `agent-client-protocol` crate
//! (pinned exactly) does the JSON-RPC; its types stay inside this crate.
//!
//! [`SessionHandle`]: claude_host_agent::SessionHandle

mod config;
mod prompt;
mod questions;
mod server;
mod tools;
mod updates;

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    AuthenticateRequest, CancelNotification, CloseSessionRequest, DeleteSessionRequest,
    ForkSessionRequest, InitializeRequest, ListSessionsRequest, LoadSessionRequest,
    NewSessionRequest, PromptRequest, ResumeSessionRequest, SetSessionConfigOptionRequest,
    SetSessionModeRequest,
};
use agent_client_protocol::{Client, on_receive_notification, on_receive_request};
use claude_host_agent::Agent;
use futures::future::BoxFuture;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

pub use server::GITHUB_SIGN_IN;

/// A GitHub device sign-in in progress.
pub struct DeviceSignIn {
    /// Where the user enters the code.
    pub verification_uri: String,
    /// The code to enter.
    pub user_code: String,
    /// Resolves to the GitHub token once the user approved (or to why not).
    pub finish: BoxFuture<'static, Result<String, String>>,
}

impl std::fmt::Debug for DeviceSignIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceSignIn")
            .field("verification_uri", &self.verification_uri)
            .finish_non_exhaustive()
    }
}

/// The GitHub sign-in `authenticate` runs (the binary's device flow and credential file).
#[async_trait::async_trait]
pub trait SignIn: Send + Sync {
    /// The signed-in account's login (empty when unknown); `None` when nobody is signed in.
    fn signed_in(&self) -> Option<String>;
    /// Starts a device flow; saving the credential is part of finishing it.
    async fn start(&self) -> Result<DeviceSignIn, String>;
}

/// Removes a session's transcript and record for good (`session/delete`).
#[async_trait::async_trait]
pub trait SessionDeleter: Send + Sync {
    /// Deletes the session; an unknown id is an error.
    async fn delete(&self, id: &str) -> Result<(), String>;
}

/// What the ACP server needs besides the agent.
pub struct AcpOptions {
    /// This program's version, as `initialize` reports it.
    pub version: String,
    /// GitHub sign-in.
    pub sign_in: Arc<dyn SignIn>,
    /// Session removal.
    pub deleter: Arc<dyn SessionDeleter>,
    /// Work sessions wait for, which `initialize` does not: checking the stored credential
    /// with the upstream takes network round trips an editor should not wait on at start.
    pub before_sessions: Option<BoxFuture<'static, ()>>,
}

impl std::fmt::Debug for AcpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcpOptions")
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// Why serving ended in failure.
#[derive(Debug, thiserror::Error)]
#[error("the ACP connection failed: {0}")]
pub struct AcpError(String);

/// A handler that runs `Server::$method` in a task of its own and returns at once, so the
/// connection's dispatch loop (which waits for each handler) goes on.
macro_rules! spawned {
    ($server:expr, $request:ty, $method:ident) => {{
        let s = $server.clone();
        async move |req: $request, responder, cx: ConnectionTo<Client>| {
            tokio::spawn(s.clone().$method(req, responder, cx));
            Ok(())
        }
    }};
}

/// Serves ACP v1 on `input`/`output` (the editor's pipes) until the editor closes them; then
/// closes every session it opened (their CLIs stop) and shuts the agent down.
pub async fn serve<R, W>(
    agent: Arc<Agent>,
    options: AcpOptions,
    input: R,
    output: W,
) -> Result<(), AcpError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let server = Arc::new(server::Server::new(agent, options));
    let transport = agent_client_protocol::ByteStreams::new(output.compat_write(), input.compat());
    let s = server.clone();
    let result = agent_client_protocol::Agent
        .v1()
        .name("claude-host")
        .on_receive_request(
            {
                let s = s.clone();
                async move |req: InitializeRequest, responder, _cx: ConnectionTo<Client>| {
                    s.initialize(req, responder)
                }
            },
            on_receive_request!(),
        )
        .on_receive_request(
            spawned!(s, AuthenticateRequest, authenticate),
            on_receive_request!(),
        )
        .on_receive_request(
            spawned!(s, NewSessionRequest, new_session),
            on_receive_request!(),
        )
        .on_receive_request(
            spawned!(s, LoadSessionRequest, load_session),
            on_receive_request!(),
        )
        .on_receive_request(
            spawned!(s, ResumeSessionRequest, resume_session),
            on_receive_request!(),
        )
        .on_receive_request(
            spawned!(s, ForkSessionRequest, fork_session),
            on_receive_request!(),
        )
        .on_receive_request(
            spawned!(s, ListSessionsRequest, list_sessions),
            on_receive_request!(),
        )
        .on_receive_request(
            spawned!(s, CloseSessionRequest, close_session),
            on_receive_request!(),
        )
        .on_receive_request(
            spawned!(s, DeleteSessionRequest, delete_session),
            on_receive_request!(),
        )
        .on_receive_request(
            spawned!(s, SetSessionModeRequest, set_mode),
            on_receive_request!(),
        )
        .on_receive_request(
            spawned!(s, SetSessionConfigOptionRequest, set_config_option),
            on_receive_request!(),
        )
        .on_receive_request(
            {
                let s = s.clone();
                // Inline: it only hands the prompt to the session (which never waits), so a
                // cancel or a second prompt after it sees it started.
                async move |req: PromptRequest, responder, _cx: ConnectionTo<Client>| {
                    s.prompt(req, responder).await
                }
            },
            on_receive_request!(),
        )
        .on_receive_notification(
            {
                let s = s.clone();
                async move |n: CancelNotification, _cx: ConnectionTo<Client>| {
                    s.cancel(n).await;
                    Ok(())
                }
            },
            on_receive_notification!(),
        )
        .connect_to(transport)
        .await;
    server.shut_down().await;
    result.map_err(|e| AcpError(e.to_string()))
}
