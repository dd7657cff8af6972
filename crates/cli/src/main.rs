//! `claude-host`: run Claude Code on a GitHub Copilot plan through a secure local proxy.

mod acp;
mod commands;
mod config;
mod otel;
mod run;
mod serve;
mod sessions;
mod setup;
mod transfer;
mod usage;

use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Run Claude Code on your GitHub Copilot plan through a secure local proxy.
#[derive(Debug, Parser)]
#[command(
    name = "claude-host",
    version,
    about,
    long_about = None,
    after_help = "Any option can also be set in the config file (`claude-host config path`): \
                  command line > environment > config file > default."
)]
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
    /// Install the pinned Claude Code CLI with npm (or another version next to it).
    InstallCli {
        /// Reinstall even if it is already present.
        #[arg(long)]
        force: bool,
        /// Install this exact version instead of the pinned one, next to it under
        /// `$CLAUDE_HOST_HOME/cli/`; use it with `--claude-path`.
        #[arg(long, value_name = "VERSION")]
        version: Option<String>,
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
    /// Print a shell completion script (`source <(claude-host completions bash)`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (`claude-host man | man -l -`), or a subcommand's
    /// (`claude-host man serve`, the page `claude-host-serve(1)` the main one refers to).
    Man {
        /// The subcommand.
        subcommand: Option<String>,
    },
    /// Where the config file is, and every option's value with where it came from.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Print the config file's path (whether or not it exists).
    Path,
    /// Print every option's value as TOML, with where it came from (secrets masked).
    Show,
}

fn main() -> ExitCode {
    if claude_host_sdk::keeper::is_keeper() {
        // Started by a host to clean up after it (see `claude_host_sdk::keeper`).
        return ExitCode::from(u8::try_from(claude_host_sdk::keeper::keeper_main()).unwrap_or(1));
    }
    // Flags, then environment variables, then the config file, then defaults.
    let (matches, command, config) =
        match config::parse_args(Cli::command(), std::env::args_os().collect()) {
            Ok(parsed) => parsed,
            Err(e) => {
                eprintln!("error: {e:#}");
                return ExitCode::from(2);
            }
        };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match &cli.command {
        Command::Completions { shell } => {
            use std::io::Write as _;
            return match std::io::stdout().write_all(completions(*shell).as_bytes()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: cannot write the completions: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Command::Man { subcommand } => {
            return match man_page(subcommand.as_deref()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            };
        }
        _ => {}
    }
    raise_open_file_limit();
    one_malloc_arena();
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
            Command::InstallCli { force, version } => {
                commands::install_cli(&ctx, force, version.as_deref()).await
            }
            Command::Doctor => commands::doctor(&ctx).await,
            Command::Sessions(args) => sessions::run(&ctx, args).await,
            Command::Run(args) => run::run(&ctx, args).await,
            Command::Serve(args) => serve::serve(&ctx, args).await,
            Command::Acp(args) => acp::acp(&ctx, args).await,
            // Answered before the runtime started.
            Command::Completions { .. } | Command::Man { .. } => Ok(ExitCode::SUCCESS),
            Command::Config { command: what } => {
                match what {
                    ConfigCommand::Path => match &config.path {
                        Some(p) => println!("{}", p.display()),
                        None => anyhow::bail!(
                            "no config file location: set XDG_CONFIG_HOME, HOME or {}",
                            config::CONFIG_ENV
                        ),
                    },
                    ConfigCommand::Show => {
                        print!("{}", config::show(&command, &matches, &config, &ctx.home));
                    }
                }
                Ok(ExitCode::SUCCESS)
            }
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

/// The completion script for a shell.
fn completions(shell: clap_complete::Shell) -> String {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "claude-host", &mut out);
    let script = String::from_utf8_lossy(&out).into_owned();
    if shell == clap_complete::Shell::Bash {
        // clap_complete 4.6.11 names a subcommand's state `claude__host__subcmd__serve` in the
        // loop that finds it and `claude__subcmd__host__subcmd__serve` in the arms that
        // complete it, so nothing after a subcommand completes for a hyphenated binary name
        // (clap-rs/clap#6421); the arms are given the loop's spelling.
        return script.replace("claude__subcmd__host", "claude__host");
    }
    script
}

/// Writes the man page of claude-host, or of one of its subcommands, to stdout.
fn man_page(subcommand: Option<&str>) -> Result<(), String> {
    let mut cmd = Cli::command();
    // Built, so that a subcommand's page lists the global options it takes.
    cmd.build();
    let page = match subcommand {
        None => cmd,
        Some(name) => cmd
            .find_subcommand(name)
            .cloned()
            .ok_or_else(|| format!("no subcommand {name:?}"))?
            .name(format!("claude-host-{name}"))
            .version(env!("CARGO_PKG_VERSION")),
    };
    clap_mangen::Man::new(page)
        .render(&mut std::io::stdout())
        .map_err(|e| format!("cannot write the man page: {e}"))
}

/// The default data directory: `$XDG_DATA_HOME/claude-host` or `~/.local/share/claude-host`.
pub(crate) fn default_home() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(x).join("claude-host"));
    }
    std::env::home_dir().map(|h| h.join(".local/share/claude-host"))
}

/// Makes every thread allocate from glibc's one main arena, unless `MALLOC_ARENA_MAX` says
/// otherwise. The host runs on one thread; its other threads (the blocking pool, a
/// transcript's reading) would each get an arena of their own, and what a long session's
/// reading left in a second arena stayed resident after the session closed. With one arena
/// and the reading on a thread that ends with it (`restore::on_own_thread` in the agent), a
/// closed 100 MB session leaves 2.6–3.1 MiB of anonymous memory instead of 4.5
/// (docs/BENCHMARKS.md, *What the close leaves*). Called before any thread is started.
#[allow(unsafe_code)]
fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets one of the allocator's parameters, under its own lock.
        let _ = unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
    }
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
