//! `claude-host`: run Claude Code on a GitHub Copilot plan through a secure local proxy.

mod acp;
mod commands;
mod otel;
mod run;
mod serve;
mod sessions;
mod setup;
mod transfer;
mod usage;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Run Claude Code on your GitHub Copilot plan through a secure local proxy.
#[derive(Debug, Parser)]
#[command(name = "claude-host", version, about, long_about = None)]
pub(crate) struct Cli {
    #[command(flatten)]
    global: setup::GlobalOpts,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Sign in to GitHub with the device flow and store the credential (mode 0600).
    Login(commands::LoginArgs),
    /// Forget the stored GitHub credential.
    Logout,
    /// Show who is signed in, the Copilot plan and quota, and token freshness.
    Status {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// List the Claude models the upstream offers.
    Models {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Run the Anthropic-compatible proxy in the foreground for your own `claude`.
    Proxy(commands::ProxyArgs),
    /// Run the Claude Code CLI through the proxy, passing ARGS through.
    Claude(commands::ClaudeArgs),
    /// Install the pinned Claude Code CLI with npm.
    InstallCli {
        /// Reinstall even if it is already present.
        #[arg(long)]
        force: bool,
    },
    /// Check the CLI, credentials, Copilot reachability and models.
    Doctor,
    /// Run a Claude session in the terminal: stream the answer, ask for tool permissions.
    Run(run::RunArgs),
    /// List, show, fork or remove Claude Code sessions on disk.
    Sessions(sessions::SessionsArgs),
    /// Serve sessions over the Agent Host Protocol (VS Code remote agent host).
    Serve(serve::ServeArgs),
    /// Serve sessions over the Agent Client Protocol on stdio (Zed, JetBrains, Neovim).
    Acp(acp::AcpArgs),
}

fn main() -> ExitCode {
    if claude_host_sdk::keeper::is_keeper() {
        // Started by a host to clean up after it (see `claude_host_sdk::keeper`).
        return ExitCode::from(u8::try_from(claude_host_sdk::keeper::keeper_main()).unwrap_or(1));
    }
    let cli = Cli::parse();
    raise_open_file_limit();
    // Before any HTTP client is built (the OTLP exporter's among them).
    claude_host_upstream::install_tls_provider();
    let log_to_file = matches!(cli.command, Command::Claude(_) | Command::Run(_));
    let _log_guard = setup::init_logging(&cli.global, log_to_file);
    // One thread: the proxy is I/O-bound (about 1 µs of CPU per streamed event), and keeping
    // the upstream and downstream halves of a stream on one thread avoids a cross-thread
    // wake-up per chunk — half the CPU per event of the multi-threaded runtime
    // (docs/BENCHMARKS.md).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        let ctx = setup::Context::new(cli.global)?;
        match cli.command {
            Command::Login(args) => commands::login(&ctx, args).await,
            Command::Logout => commands::logout(&ctx),
            Command::Status { json } => commands::status(&ctx, json).await,
            Command::Models { json } => commands::models(&ctx, json).await,
            Command::Proxy(args) => commands::proxy(&ctx, args).await,
            Command::Claude(args) => commands::claude(&ctx, args).await,
            Command::InstallCli { force } => commands::install_cli(&ctx, force).await,
            Command::Doctor => commands::doctor(&ctx).await,
            Command::Sessions(args) => sessions::run(&ctx, args).await,
            Command::Run(args) => run::run(&ctx, args).await,
            Command::Serve(args) => serve::serve(&ctx, args).await,
            Command::Acp(args) => acp::acp(&ctx, args).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The default data directory: `$XDG_DATA_HOME/claude-host` or `~/.local/share/claude-host`.
pub(crate) fn default_home() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(x).join("claude-host"));
    }
    std::env::home_dir().map(|h| h.join(".local/share/claude-host"))
}

/// Each stream the proxy relays holds two sockets and each session a CLI's pipes; a desktop's
/// default soft limit of 1,024 descriptors would refuse clients long before the proxy's own
/// connection cap. The soft limit goes up to the hard one (at most 65,536, which children
/// such as the CLI inherit and some programs walk in full).
#[allow(unsafe_code)]
fn raise_open_file_limit() {
    const WANTED: libc::rlim_t = 65_536;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given, which lives for the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) } != 0 {
        return;
    }
    let target = limit.rlim_max.min(WANTED);
    if limit.rlim_cur >= target {
        return;
    }
    let raised = libc::rlimit {
        rlim_cur: target,
        rlim_max: limit.rlim_max,
    };
    // SAFETY: setrlimit only reads the struct it is given, which lives for the call.
    let _ = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const raised) };
}
