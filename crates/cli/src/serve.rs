//! `claude-host serve`: the Agent Host Protocol server VS Code connects to as a remote agent
//! host.

use crate::setup::Context;
use anyhow::{Context as _, bail};
use claude_host_ahp::{HostConfig, ServeConfig};
use serde_json::json;
use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// `serve` options.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on. Anything but loopback exposes the host to the network.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Port to listen on (0 picks a free one).
    #[arg(long, env = "CLAUDE_HOST_AHP_PORT", default_value_t = 8081)]
    port: u16,
    /// The connection token clients must present (`?tkn=`); prefer the environment variable
    /// or --connection-token-file, since arguments are visible to other local users.
    #[arg(
        long,
        env = "CLAUDE_HOST_CONNECTION_TOKEN",
        hide_env_values = true,
        conflicts_with_all = ["connection_token_file", "without_connection_token"]
    )]
    connection_token: Option<String>,
    /// Read the connection token from this file.
    #[arg(long, value_name = "FILE", conflicts_with = "without_connection_token")]
    connection_token_file: Option<PathBuf>,
    /// Accept connections without a token (only on a machine you alone use).
    #[arg(long)]
    without_connection_token: bool,
    /// Default working directory for new sessions (default: the current directory).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Let clients choose the bypassPermissions mode.
    #[arg(long)]
    allow_bypass_permissions: bool,
    /// The newest turns of a chat a client that asks for no window (VS Code) gets when it
    /// opens a session, behind a first turn saying how many are left out; 0 sends every turn.
    /// VS Code takes ~16 ms a turn to open a chat.
    #[arg(
        long,
        env = "CLAUDE_HOST_CHAT_TURNS",
        value_name = "N",
        default_value_t = claude_host_ahp::DEFAULT_CHAT_TURNS
    )]
    chat_turns: usize,
}

/// Token characters VS Code accepts.
fn valid_token(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 256
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The token kept in the data directory (mode 0600), so a restarted host keeps working
/// with the settings already pasted into VS Code.
fn stored_token(home: &Path) -> anyhow::Result<String> {
    let path = home.join("connection-token");
    if let Ok(t) = std::fs::read_to_string(&path) {
        let t = t.trim().to_owned();
        if valid_token(&t) {
            return Ok(t);
        }
    }
    let token = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    claude_host_upstream::private_files::create_private_dir(home)
        .with_context(|| format!("cannot create {}", home.display()))?;
    let tmp = home.join("connection-token.tmp");
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        f.write_all(token.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, &path)?;
    Ok(token)
}

pub(crate) async fn serve(ctx: &Context, args: ServeArgs) -> anyhow::Result<ExitCode> {
    let token = if args.without_connection_token {
        eprintln!(
            "warning: --without-connection-token: anyone who can reach the port can run Claude with your account"
        );
        None
    } else if let Some(t) = args.connection_token {
        Some(t)
    } else if let Some(f) = &args.connection_token_file {
        Some(
            std::fs::read_to_string(f)
                .with_context(|| format!("cannot read the connection token file {}", f.display()))?
                .trim()
                .to_owned(),
        )
    } else {
        Some(stored_token(&ctx.home)?)
    };
    if let Some(t) = &token
        && !valid_token(t)
    {
        bail!("the connection token must be 1-256 characters of A-Z, a-z, 0-9, '-' and '_'");
    }
    if !args.host.is_loopback() {
        eprintln!(
            "warning: listening on {}, reachable from other machines; use a strong connection token and a TLS tunnel",
            args.host
        );
    }
    let cwd = crate::setup::session_directory(args.cwd)?;
    // Signed in already (`claude-host login`, GH_TOKEN) or another upstream: ready at once;
    // otherwise the client authenticates over AHP.
    let upstream = crate::setup::protocol_upstream(ctx)?;
    let (agent, _usage) = crate::setup::build_agent(
        ctx,
        cwd.clone(),
        args.allow_bypass_permissions,
        upstream,
        "serve",
        crate::setup::StoreOpening::AtStart,
    )
    .await?;
    let agent = Arc::new(agent);
    if let Some(why) = crate::setup::sign_in_stored(ctx, &agent).await? {
        eprintln!(
            "warning: the stored GitHub credential was not accepted ({why}); clients must sign in"
        );
    }
    let host = claude_host_ahp::Host::new(
        agent,
        HostConfig {
            default_directory: Some(cwd),
            chat_turns: (args.chat_turns > 0).then_some(args.chat_turns),
            ..Default::default()
        },
    )
    .await;
    let server = claude_host_ahp::start(
        ServeConfig {
            listen: SocketAddr::new(args.host, args.port),
            connection_token: token.clone(),
            ..Default::default()
        },
        host.clone(),
    )
    .await
    .with_context(|| format!("cannot listen on {}:{}", args.host, args.port))?;
    // Handlers are in place before READY is printed, so a stop right after it is graceful.
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    let addr = server.addr();
    let mut entry = json!({"address": format!("ws://{addr}"), "name": "claude-host"});
    if let Some(t) = &token {
        entry["connectionToken"] = json!(t);
    }
    let settings = json!({"chat.remoteAgentHostsEnabled": true, "chat.remoteAgentHosts": [entry]});
    println!("READY:{}", addr.port());
    eprintln!("Add this to your VS Code settings.json to use claude-host as a remote agent host:");
    println!(
        "{}",
        serde_json::to_string_pretty(&settings).unwrap_or_default()
    );
    let _ = std::io::stdout().flush();
    tokio::select! {
        _ = term.recv() => {}
        _ = interrupt.recv() => {}
    }
    tracing::info!("shutting down");
    server.shutdown().await;
    host.shutdown().await;
    Ok(ExitCode::SUCCESS)
}
