//! `claude-host acp`: the Agent Client Protocol server an editor (Zed, JetBrains, Neovim)
//! starts as its agent, speaking ACP on standard input and output.

use crate::setup::Context;
use claude_host_acp::{AcpOptions, DeviceSignIn, SessionDeleter, SignIn};
use claude_host_upstream::copilot::{ClientIdentity, CopilotEndpoints};
use claude_host_upstream::credentials::CredentialStore;
use claude_host_upstream::device_flow::{DEFAULT_CLIENT_ID, DEFAULT_SCOPE, DeviceFlow};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// `acp` options.
#[derive(Debug, clap::Args)]
pub(crate) struct AcpArgs {
    /// Working directory for sessions whose editor names none (default: the current one).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Let sessions use the bypassPermissions mode.
    #[arg(long)]
    allow_bypass_permissions: bool,
}

pub(crate) async fn acp(ctx: &Context, args: AcpArgs) -> anyhow::Result<ExitCode> {
    let cwd = crate::setup::session_directory(args.cwd)?;
    let upstream = crate::setup::protocol_upstream(ctx)?;
    let (agent, _usage) = crate::setup::build_agent(
        ctx,
        cwd,
        args.allow_bypass_permissions,
        upstream,
        "acp",
        // Its footprint before the first session counts (docs/BENCHMARKS.md, ACP).
        crate::setup::StoreOpening::OnFirstUse,
    )
    .await?;
    let agent = Arc::new(agent);
    // Checked in the background: `initialize` is answered at once, sessions wait for it.
    let stored = crate::setup::stored_sign_in(ctx, agent.clone())?;
    let options = AcpOptions {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        sign_in: Arc::new(GithubSignIn {
            store: ctx.store.clone(),
            github_url: ctx.opts.github_url.clone(),
            endpoints: ctx.endpoints(),
            identity: ctx.identity(),
            signed_in: ctx.github_token()?.map(|t| t.login.unwrap_or_default()),
            copilot: ctx.opts.upstream == "copilot",
        }),
        deleter: Arc::new(Deleter {
            home: ctx.home.clone(),
            db: ctx.database().await?,
        }),
        before_sessions: stored,
    };
    tracing::info!("serving ACP on standard input and output");
    let (input, output) = stdio();
    claude_host_acp::serve(agent, options, input, output).await?;
    Ok(ExitCode::SUCCESS)
}

type Input = Box<dyn tokio::io::AsyncRead + Unpin + Send>;
type Output = Box<dyn tokio::io::AsyncWrite + Unpin + Send>;

/// Standard input and output as the editor's connection. Pipes (what an editor gives its
/// agent) are read and written on the runtime's own reactor: tokio's `stdin()`/`stdout()`
/// hand every read and write to a blocking-pool thread, a thread hop on each message's way
/// in and out (docs/BENCHMARKS.md, ACP, per step). Anything else (a terminal, a file) keeps
/// them. The pipes are duplicates of fds 0 and 1, made non-blocking; nothing else in
/// `acp` reads standard input or writes standard output.
fn stdio() -> (Input, Output) {
    use std::os::fd::AsFd;
    use tokio::net::unix::pipe;
    let input: Input = match std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .and_then(pipe::Receiver::from_owned_fd)
    {
        Ok(r) => Box::new(r),
        Err(e) => {
            tracing::debug!(error = %e, "standard input is not a pipe; read through a thread");
            Box::new(tokio::io::stdin())
        }
    };
    let output: Output = match std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .and_then(pipe::Sender::from_owned_fd)
    {
        Ok(w) => Box::new(w),
        Err(e) => {
            tracing::debug!(error = %e, "standard output is not a pipe; written through a thread");
            Box::new(tokio::io::stdout())
        }
    };
    (input, output)
}

/// The device flow of `claude-host login`, run for an editor's `authenticate`.
struct GithubSignIn {
    store: CredentialStore,
    github_url: String,
    endpoints: CopilotEndpoints,
    identity: ClientIdentity,
    /// Who was signed in when the editor connected.
    signed_in: Option<String>,
    /// Signing in to GitHub matters only with the Copilot upstream.
    copilot: bool,
}

#[async_trait::async_trait]
impl SignIn for GithubSignIn {
    fn signed_in(&self) -> Option<String> {
        if !self.copilot {
            return Some(String::new());
        }
        match self.store.load() {
            Ok(Some(c)) => Some(c.login.unwrap_or_default()),
            _ => self.signed_in.clone(),
        }
    }

    async fn start(&self) -> Result<DeviceSignIn, String> {
        self.store.check_writable().map_err(|e| {
            format!("the credential could not be saved ({e}); set CLAUDE_HOST_HOME to a folder you can write")
        })?;
        let http = claude_host_upstream::http_client().map_err(|e| e.to_string())?;
        let flow = DeviceFlow::new(http, &self.github_url, DEFAULT_CLIENT_ID, DEFAULT_SCOPE);
        let code = flow.request_code().await.map_err(|e| e.to_string())?;
        let (store, endpoints, identity) = (
            self.store.clone(),
            self.endpoints.clone(),
            self.identity.clone(),
        );
        let verification_uri = code.verification_uri.clone();
        let user_code = code.user_code.clone();
        let finish = Box::pin(async move {
            let granted = flow.poll(&code, |_| {}).await.map_err(|e| e.to_string())?;
            let token = granted.access_token.clone();
            let (login, _) = crate::commands::keep_credential(
                &store,
                endpoints,
                identity,
                granted,
                DEFAULT_CLIENT_ID,
            )
            .await
            .map_err(|e| format!("{e:#}"))?;
            tracing::info!(login = ?login, "signed in to GitHub");
            Ok(token)
        });
        Ok(DeviceSignIn {
            verification_uri,
            user_code,
            finish,
        })
    }
}

/// `session/delete`: what `claude-host sessions rm` does.
struct Deleter {
    home: PathBuf,
    db: Option<claude_host_store::Database>,
}

#[async_trait::async_trait]
impl SessionDeleter for Deleter {
    async fn delete(&self, id: &str) -> Result<(), String> {
        let dir = claude_host_sdk::transcripts::config_dir(None, &[])
            .ok_or_else(|| "no home directory; set CLAUDE_CONFIG_DIR".to_owned())?;
        crate::sessions::delete_session(&self.home, &dir, self.db.as_ref(), id)
            .await
            .map_err(|e| format!("{e:#}"))
    }
}
