//! Global options, the data directory, logging, and building the upstream.

use anyhow::{Context as _, bail};
use claude_host_upstream::anthropic::{AnthropicUpstream, DEFAULT_BASE_URL};
use claude_host_upstream::copilot::{
    ClientIdentity, CopilotEndpoints, CopilotOptions, CopilotUpstream,
};
use claude_host_upstream::credentials::{CredentialStore, GithubToken};
use claude_host_upstream::record::RecordingUpstream;
use claude_host_upstream::replay::ReplayUpstream;
use claude_host_upstream::{Upstream, http_client};
use std::path::PathBuf;
use std::sync::Arc;

/// Options every command accepts.
#[derive(Debug, clap::Args)]
pub(crate) struct GlobalOpts {
    /// Data directory (credentials, installed CLI, logs).
    #[arg(long, global = true, env = "CLAUDE_HOST_HOME", value_name = "DIR")]
    pub home: Option<PathBuf>,
    /// GitHub web URL (device flow); change for GitHub Enterprise.
    #[arg(
        long,
        global = true,
        env = "CLAUDE_HOST_GITHUB_URL",
        default_value = "https://github.com"
    )]
    pub github_url: String,
    /// GitHub API URL.
    #[arg(
        long,
        global = true,
        env = "CLAUDE_HOST_GITHUB_API_URL",
        default_value = "https://api.github.com"
    )]
    pub github_api_url: String,
    /// Copilot API URL (default: the one the Copilot token names).
    #[arg(long, global = true, env = "CLAUDE_HOST_COPILOT_API_URL")]
    pub copilot_api_url: Option<String>,
    /// `Editor-Version` sent to Copilot (version strings change over time).
    #[arg(
        long,
        global = true,
        env = "CLAUDE_HOST_COPILOT_EDITOR_VERSION",
        value_name = "VALUE"
    )]
    pub copilot_editor_version: Option<String>,
    /// `X-GitHub-Api-Version` sent with Copilot model calls.
    #[arg(
        long,
        global = true,
        env = "CLAUDE_HOST_COPILOT_API_VERSION",
        value_name = "DATE"
    )]
    pub copilot_api_version: Option<String>,
    /// Where model calls go: `copilot`, `anthropic` (uses ANTHROPIC_API_KEY) or `replay:FILE`.
    #[arg(
        long,
        global = true,
        env = "CLAUDE_HOST_UPSTREAM",
        default_value = "copilot"
    )]
    pub upstream: String,
    /// Anthropic API URL for `--upstream anthropic`.
    #[arg(long, global = true, env = "CLAUDE_HOST_ANTHROPIC_BASE_URL", default_value = DEFAULT_BASE_URL)]
    pub anthropic_base_url: String,
    /// Append every upstream response to this replay file (no secrets are written).
    #[arg(long, global = true, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Path to the Claude Code CLI to use instead of the pinned install.
    #[arg(
        long,
        global = true,
        env = "CLAUDE_HOST_CLAUDE_PATH",
        value_name = "PATH"
    )]
    pub claude_path: Option<PathBuf>,
    /// Never install the pinned CLI automatically.
    #[arg(long, global = true)]
    pub no_install: bool,
    /// When Copilot says your premium requests are used up, answer with this model instead
    /// (one included in your plan, e.g. `claude-haiku-4-5`); otherwise the request fails with
    /// the quota message.
    #[arg(
        long,
        global = true,
        env = "CLAUDE_HOST_QUOTA_FALLBACK_MODEL",
        value_name = "MODEL"
    )]
    pub quota_fallback_model: Option<String>,
    /// The model of Claude Code's small/fast calls (its background work: summaries, titles,
    /// quick checks). Default: a model your Copilot plan includes (premium multiplier 0), a
    /// Claude one first, when the plan has one. `claude-host models` shows the multipliers.
    #[arg(
        long,
        global = true,
        env = "CLAUDE_HOST_SMALL_MODEL",
        value_name = "MODEL"
    )]
    pub small_model: Option<String>,
    /// The model of every subagent Claude Code starts (default: Claude Code's choice).
    #[arg(
        long,
        global = true,
        env = "CLAUDE_HOST_SUBAGENT_MODEL",
        value_name = "MODEL"
    )]
    pub subagent_model: Option<String>,
    /// Keep sessions in this database (`postgres://user:password@host/db`, or
    /// `sqlite://PATH`) so they can be resumed on any host that uses it: transcripts are
    /// mirrored into it and one host drives a session at a time. Prefer the environment
    /// variable or `--database-url-file`: a URL on the command line is visible in `ps`.
    #[arg(
        long,
        global = true,
        env = "CLAUDE_HOST_DATABASE_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub database_url: Option<String>,
    /// Read the database URL from this file (its first line).
    #[arg(
        long,
        global = true,
        env = "CLAUDE_HOST_DATABASE_URL_FILE",
        value_name = "FILE",
        conflicts_with = "database_url"
    )]
    pub database_url_file: Option<PathBuf>,
    /// How long a host's hold on a session lasts without renewal (it renews at a third of
    /// this while the session is open); another host may take the session after that.
    #[arg(
        long,
        global = true,
        env = "CLAUDE_HOST_SESSION_LEASE_SECS",
        value_name = "SECONDS",
        default_value_t = 30
    )]
    pub session_lease_secs: u64,
    /// With a shared database that cannot be reached, drive sessions without a lease (two
    /// hosts may then drive one at once). Off: such a session is refused, naming the database.
    #[arg(long, global = true, env = "CLAUDE_HOST_ALLOW_UNLEASED")]
    pub allow_unleased: bool,
    /// On SIGTERM, how long running turns may go on before they are cancelled (then the
    /// transcripts are flushed and the sessions' leases given back).
    #[arg(
        long,
        global = true,
        env = "CLAUDE_HOST_SHUTDOWN_GRACE_SECS",
        value_name = "SECONDS",
        default_value_t = 10
    )]
    pub shutdown_grace_secs: u64,
    /// How long a session's Claude Code process may sit idle before it is stopped (it starts
    /// again, resuming, when the session is opened, a prompt is typed or sent); 0 keeps it.
    #[arg(
        long,
        global = true,
        env = "CLAUDE_HOST_CLI_IDLE_SECS",
        value_name = "SECONDS",
        default_value_t = 300
    )]
    pub cli_idle_secs: u64,
    /// How long a session restored from disk stays open with no subscriber, no Claude Code
    /// process and nothing pending before it closes and its turns leave memory.
    #[arg(
        long,
        global = true,
        env = "CLAUDE_HOST_RESTORED_IDLE_SECS",
        value_name = "SECONDS",
        default_value_t = 600
    )]
    pub restored_idle_secs: u64,
    /// Whether a Claude Code process started ahead of a prompt (a session opened, created or
    /// typed in) first runs a throwaway turn that the proxy answers and that is then cut, so
    /// the prompt finds it warm (~90 ms sooner). Skipped in sessions with hooks it could fire.
    #[arg(
        long,
        global = true,
        env = "CLAUDE_HOST_WARM_UP",
        value_name = "BOOL",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub warm_up: bool,
    /// Log filter (e.g. `info`, `claude_host_proxy=debug`); also `CLAUDE_HOST_LOG`.
    #[arg(long, global = true, env = "CLAUDE_HOST_LOG", default_value = "info")]
    pub log: String,
}

/// What commands share.
pub(crate) struct Context {
    pub opts: GlobalOpts,
    pub home: PathBuf,
    pub store: CredentialStore,
    /// Started by the first command that counts anything; flushed as the command ends.
    metrics: std::sync::OnceLock<crate::otel::Metrics>,
}

impl Context {
    pub fn new(opts: GlobalOpts) -> anyhow::Result<Self> {
        let home = match &opts.home {
            Some(h) => h.clone(),
            None => crate::default_home()
                .context("cannot determine the home directory; set CLAUDE_HOST_HOME")?,
        };
        let store = CredentialStore::in_home(&home);
        Ok(Context {
            opts,
            home,
            store,
            metrics: std::sync::OnceLock::new(),
        })
    }

    /// Where the proxy and the agent count, when the environment asks for OTLP metrics.
    pub fn meter(&self) -> Option<opentelemetry::metrics::Meter> {
        self.metrics
            .get_or_init(|| crate::otel::Metrics::from_env(&|k| std::env::var(k).ok()))
            .meter()
    }

    pub fn endpoints(&self) -> CopilotEndpoints {
        CopilotEndpoints {
            github_url: self.opts.github_url.clone(),
            github_api_url: self.opts.github_api_url.clone(),
            copilot_api_url: self.opts.copilot_api_url.clone(),
        }
    }

    /// How claude-host presents itself to Copilot: defaults, with any overrides.
    pub fn identity(&self) -> ClientIdentity {
        let mut id = ClientIdentity::default();
        if let Some(v) = &self.opts.copilot_editor_version {
            id.editor_version = v.clone();
        }
        if let Some(v) = &self.opts.copilot_api_version {
            id.capi_api_version = v.clone();
        }
        id
    }

    /// The GitHub token (environment first, then the credentials file).
    pub fn github_token(&self) -> anyhow::Result<Option<GithubToken>> {
        Ok(self.store.resolve(&|k| std::env::var(k).ok())?)
    }

    /// A Copilot client for the signed-in account.
    pub fn copilot(&self) -> anyhow::Result<CopilotUpstream> {
        let Some(token) = self.github_token()? else {
            bail!("not signed in to GitHub: run `claude-host login` (or set GH_TOKEN)");
        };
        Ok(CopilotUpstream::new(
            http_client()?,
            token.token,
            self.endpoints(),
            self.identity(),
            CopilotOptions::default(),
        ))
    }

    /// Builds a Copilot upstream for a GitHub token (sign-ins through a protocol client).
    pub fn upstream_factory(
        &self,
    ) -> anyhow::Result<impl Fn(&str) -> Arc<dyn Upstream> + Send + Sync + 'static> {
        let http = http_client()?;
        let endpoints = self.endpoints();
        let identity = self.identity();
        Ok(move |token: &str| -> Arc<dyn Upstream> {
            Arc::new(CopilotUpstream::new(
                http.clone(),
                token.to_owned(),
                endpoints.clone(),
                identity.clone(),
                CopilotOptions::default(),
            ))
        })
    }

    /// The upstream selected by `--upstream`, wrapped in a recorder when `--record` is set.
    pub fn upstream(&self) -> anyhow::Result<Arc<dyn Upstream>> {
        let spec = self.opts.upstream.as_str();
        let base: Arc<dyn Upstream> = if spec == "copilot" {
            Arc::new(self.copilot()?)
        } else if spec == "anthropic" {
            let key = std::env::var("ANTHROPIC_API_KEY")
                .ok()
                .filter(|k| !k.trim().is_empty())
                .context("--upstream anthropic needs ANTHROPIC_API_KEY in the environment")?;
            Arc::new(AnthropicUpstream::new(
                http_client()?,
                &self.opts.anthropic_base_url,
                key,
            ))
        } else if let Some(file) = spec.strip_prefix("replay:") {
            Arc::new(ReplayUpstream::load(std::path::Path::new(file))?)
        } else {
            bail!("unknown --upstream {spec:?}: use copilot, anthropic or replay:FILE");
        };
        Ok(match &self.opts.record {
            Some(path) => Arc::new(
                RecordingUpstream::new(base, path)
                    .with_context(|| format!("cannot open recording file {}", path.display()))?,
            ),
            None => base,
        })
    }
}

/// Logs go to stderr, or to `$CLAUDE_HOST_HOME/logs/claude-host.log` when stderr belongs to
/// an interactive child (the `claude` command).
pub(crate) fn init_logging(opts: &GlobalOpts, to_file: bool) -> Option<()> {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_new(&opts.log).unwrap_or_else(|_| EnvFilter::new("info"));
    if to_file {
        // Logs hold session ids, paths and model names: the user's alone.
        let dir = opts.home.clone().or_else(crate::default_home)?.join("logs");
        claude_host_upstream::private_files::create_private_dir(&dir).ok()?;
        let path = dir.join("claude-host.log");
        let file = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(&path)
                .ok()?
        };
        // A log file from an older claude-host may have been readable by others.
        claude_host_upstream::private_files::set_mode_0600(&path).ok()?;
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(Arc::new(file))
            .init();
    } else {
        // Colours only for a person at a terminal: in a file or a pipe they are noise.
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .init();
    }
    Some(())
}

impl Context {
    /// The shared database's URL, from `--database-url`, its environment variable, or the
    /// file named by `--database-url-file`.
    pub fn database_url(&self) -> anyhow::Result<Option<String>> {
        if let Some(u) = &self.opts.database_url {
            return Ok(Some(u.trim().to_owned()).filter(|u| !u.is_empty()));
        }
        let Some(file) = &self.opts.database_url_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read the database URL file {}", file.display()))?;
        let url = text.lines().next().unwrap_or_default().trim().to_owned();
        if url.is_empty() {
            bail!("the database URL file {} is empty", file.display());
        }
        Ok(Some(url))
    }

    /// The shared database, when one is configured (opened and migrated).
    pub async fn database(&self) -> anyhow::Result<Option<claude_host_store::Database>> {
        let Some(url) = self.database_url()? else {
            return Ok(None);
        };
        if std::env::args().any(|a| a.starts_with("--database-url=") || a == "--database-url")
            && url.contains('@')
        {
            tracing::warn!(
                "the database URL was given on the command line, where `ps` shows it; use CLAUDE_HOST_DATABASE_URL or --database-url-file"
            );
        }
        let db = claude_host_store::Database::open(&url)
            .await
            .map_err(|e| anyhow::anyhow!("cannot open the session database: {e}"))?;
        tracing::info!(database = %db.location, "sessions are kept in the shared database");
        Ok(Some(db))
    }
}

/// This host's name in leases and listings: the machine's name and this process.
pub(crate) fn host_name() -> String {
    let machine = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{machine} (pid {})", std::process::id())
}

/// The host's session metadata store: the shared database's, or
/// `$CLAUDE_HOST_HOME/sessions.sqlite` (created on first use).
pub(crate) async fn open_store(
    home: &std::path::Path,
    db: Option<&claude_host_store::Database>,
) -> anyhow::Result<Arc<dyn claude_host_store::Store>> {
    if let Some(db) = db {
        return Ok(db.metadata.clone());
    }
    let path = sqlite_path(home)?;
    Ok(Arc::new(claude_host_store::SqliteStore::open(&path).await?))
}

/// The embedded database's file, its folder created (private) so that a failure to write it
/// shows at start-up.
fn sqlite_path(home: &std::path::Path) -> anyhow::Result<PathBuf> {
    claude_host_upstream::private_files::create_private_dir(home)
        .with_context(|| format!("cannot create the data directory {}", home.display()))?;
    Ok(home.join("sessions.sqlite"))
}

/// When the embedded database is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreOpening {
    /// Before the agent is built: a database that cannot be opened stops the start.
    AtStart,
    /// At its first use, for a process that may never need it (`acp`: an editor starts one
    /// per window, and many open no session). Until then none of SQLite is loaded; a failed
    /// open is a store that fails, tried again by the next use.
    OnFirstUse,
}

/// The agent `run` and `serve` share: the pinned CLI, the host's session store, a loopback
/// proxy every session's CLI talks to (with `upstream`, or waiting for a GitHub sign-in when
/// there is none), sessions in `cwd` unless a client says otherwise.
pub(crate) async fn build_agent(
    ctx: &Context,
    cwd: PathBuf,
    allow_bypass_permissions: bool,
    upstream: Option<Arc<dyn Upstream>>,
    command: &str,
    opening: StoreOpening,
) -> anyhow::Result<(claude_host_agent::Agent, crate::usage::UsageRecorder)> {
    let (cli, origin) = claude_host_sdk::find::locate_path(
        ctx.opts.claude_path.as_deref(),
        &ctx.home,
        !ctx.opts.no_install,
    )
    .await?;
    let known = origin == claude_host_sdk::find::Origin::Pinned
        || claude_host_sdk::find::packaged_version(&cli).as_deref()
            == Some(claude_host_sdk::find::PINNED_VERSION);
    if !known {
        // Checked beside the start-up: only a warning depends on it.
        let path = cli.clone();
        tokio::spawn(async move {
            match claude_host_sdk::find::version_of(&path).await {
                Ok(v) if v == claude_host_sdk::find::PINNED_VERSION => {}
                Ok(v) => {
                    tracing::warn!(path = %path.display(), version = %v, pinned = claude_host_sdk::find::PINNED_VERSION, "using a Claude Code version other than the pinned one");
                }
                Err(e) => tracing::warn!(error = %e, "the Claude Code CLI does not run"),
            }
        });
    }
    let db = ctx.database().await?;
    let store = match (&db, opening) {
        (None, StoreOpening::OnFirstUse) => Arc::new(claude_host_store::SqliteOnFirstUse::new(
            &sqlite_path(&ctx.home)?,
        )),
        _ => open_store(&ctx.home, db.as_ref()).await?,
    };
    let proxy = claude_host_proxy::start(
        claude_host_proxy::ProxyConfig {
            listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            quota_fallback_model: ctx.opts.quota_fallback_model.clone(),
            meter: ctx.meter(),
            ..Default::default()
        },
        Arc::new(claude_host_upstream::signed_out::SignedOut),
    )
    .await
    .context("cannot start the model proxy")?;
    let mut usage = crate::usage::UsageRecorder::start(
        &ctx.home,
        proxy.prompt_ledger(),
        proxy.usage(),
        command,
    );
    let factory: Arc<dyn claude_host_agent::UpstreamFactory> = Arc::new(ctx.upstream_factory()?);
    let models = match upstream {
        Some(u) => claude_host_agent::ProxyModels::with_upstream(proxy, u, Some(factory)),
        None => claude_host_agent::ProxyModels::signed_out(proxy, factory),
    };
    let mut config = claude_host_agent::AgentConfig::new(cli, cwd);
    config.config_dir = std::env::var_os("CLAUDE_CONFIG_DIR").map(PathBuf::from);
    config.allow_bypass_permissions = allow_bypass_permissions;
    config.edits_dir = Some(ctx.home.join("edits"));
    config.customizations_dir = Some(ctx.home.join("customizations"));
    config.keeper = start_keeper();
    config.meter = ctx.meter();
    config.idle_eviction = std::time::Duration::from_secs(ctx.opts.restored_idle_secs.max(1));
    config.cli_idle = (ctx.opts.cli_idle_secs > 0)
        .then(|| std::time::Duration::from_secs(ctx.opts.cli_idle_secs));
    config.warm_up = ctx.opts.warm_up;
    config.shutdown_grace = std::time::Duration::from_secs(ctx.opts.shutdown_grace_secs);
    config.small_model.clone_from(&ctx.opts.small_model);
    config.subagent_model.clone_from(&ctx.opts.subagent_model);
    if let Some(db) = &db {
        usage.share(db, &host_name());
    }
    if ctx.opts.allow_unleased
        && let Some(db) = &db
    {
        usage.hold(crate::usage::UnleasedMark::new(
            &ctx.home,
            command,
            &db.location,
        ));
    }
    config.durable = db.map(|db| claude_host_agent::Durable {
        db,
        host: host_name(),
        lease_ttl: std::time::Duration::from_secs(ctx.opts.session_lease_secs.max(1)),
        allow_unleased: ctx.opts.allow_unleased,
    });
    if ctx.opts.upstream == "copilot" {
        // Claude Code's WebSearch is a server tool that Copilot refuses ("did 0 searches").
        config.disallowed_tools.push("WebSearch".into());
    }
    Ok((
        claude_host_agent::Agent::new(config, Arc::new(models), Some(store)),
        usage,
    ))
}

/// Starts the process keeper (this program again, see `claude_host_sdk::keeper`); without it
/// sessions still end with the host, except when the host is killed with SIGKILL.
fn start_keeper() -> Option<Arc<claude_host_sdk::Keeper>> {
    let started = std::env::current_exe().and_then(|exe| claude_host_sdk::Keeper::start(&exe));
    match started {
        Ok(k) => {
            tracing::debug!(pid = k.pid(), "process keeper started");
            Some(Arc::new(k))
        }
        Err(e) => {
            tracing::warn!(error = %e, "no process keeper: a host killed with SIGKILL may leave tool processes behind");
            None
        }
    }
}

/// The working directory a protocol server starts sessions in: `--cwd`, else the current one.
pub(crate) fn session_directory(cwd: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match cwd {
        Some(c) => Ok(c),
        None => std::env::current_dir().context("no current directory"),
    }
}

/// The upstream a protocol server starts with: with Copilot, none until someone signs in
/// (the stored credential is tried by [`sign_in_stored`], else a client signs in); any other
/// upstream at once.
pub(crate) fn protocol_upstream(ctx: &Context) -> anyhow::Result<Option<Arc<dyn Upstream>>> {
    if ctx.opts.upstream == "copilot" {
        Ok(None)
    } else {
        Ok(Some(ctx.upstream()?))
    }
}

/// Signs the agent in with the stored GitHub credential (or `GH_TOKEN`), if there is one.
/// Returns why it was not accepted, if it was not.
pub(crate) async fn sign_in_stored(
    ctx: &Context,
    agent: &claude_host_agent::Agent,
) -> anyhow::Result<Option<String>> {
    match stored_sign_in_with(ctx)? {
        Some(token) => Ok(try_sign_in(agent, &token).await),
        None => Ok(None),
    }
}

/// As [`sign_in_stored`], as work to run in the background (its failure is logged).
pub(crate) fn stored_sign_in(
    ctx: &Context,
    agent: Arc<claude_host_agent::Agent>,
) -> anyhow::Result<Option<futures::future::BoxFuture<'static, ()>>> {
    let Some(token) = stored_sign_in_with(ctx)? else {
        return Ok(None);
    };
    Ok(Some(Box::pin(async move {
        if let Some(why) = try_sign_in(&agent, &token).await {
            tracing::warn!(error = %why, "the stored GitHub credential was not accepted; sign in through the client");
        }
    })))
}

/// The stored GitHub token, when the Copilot upstream needs one.
fn stored_sign_in_with(ctx: &Context) -> anyhow::Result<Option<String>> {
    if ctx.opts.upstream != "copilot" {
        return Ok(None);
    }
    Ok(ctx.github_token()?.map(|t| t.token))
}

async fn try_sign_in(agent: &claude_host_agent::Agent, token: &str) -> Option<String> {
    agent
        .authenticate(claude_host_agent::GITHUB_RESOURCE, token)
        .await
        .err()
        .map(|e| e.to_string())
}
