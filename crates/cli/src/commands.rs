//! The subcommands.

use crate::setup::Context;
use anyhow::{Context as _, bail};
use claude_host_proxy::{ProxyConfig, ProxyHandle};
use claude_host_sdk::find as claude_cli;
use claude_host_upstream::credentials::{StoredCredential, TokenSource};
use claude_host_upstream::device_flow::{
    DEFAULT_CLIENT_ID, DEFAULT_SCOPE, DeviceFlow, PollProgress,
};
use claude_host_upstream::{Upstream, http_client};
use serde_json::json;
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// `login` options.
#[derive(Debug, clap::Args)]
pub(crate) struct LoginArgs {
    /// OAuth app client id.
    #[arg(long, env = "CLAUDE_HOST_GITHUB_CLIENT_ID", default_value = DEFAULT_CLIENT_ID)]
    client_id: String,
    /// OAuth scope.
    #[arg(long, default_value = DEFAULT_SCOPE)]
    scope: String,
}

/// `proxy` options.
#[derive(Debug, clap::Args)]
pub(crate) struct ProxyArgs {
    /// Port on 127.0.0.1 (default: any free port).
    #[arg(long, conflicts_with = "listen")]
    port: Option<u16>,
    /// Listen on this address instead of loopback (prints a warning when not loopback).
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Print `{"base_url","auth_token","pid"}` as one JSON line instead of shell exports.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    tuning: ProxyTuning,
}

/// Proxy knobs shared by `proxy` and `claude`.
#[derive(Debug, clap::Args)]
pub(crate) struct ProxyTuning {
    /// Seconds of upstream silence before a `ping` event is sent downstream.
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    ping_interval: f64,
    /// Largest request body accepted, in MiB.
    #[arg(long, default_value_t = 32, value_name = "MIB")]
    body_limit_mib: usize,
    /// Comma-separated `anthropic-beta` families forwarded to Copilot.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    beta_allowlist: Option<Vec<String>>,
}

impl ProxyTuning {
    fn config(&self, listen: SocketAddr) -> anyhow::Result<ProxyConfig> {
        if !(self.ping_interval.is_finite() && self.ping_interval > 0.0) {
            bail!("--ping-interval must be a positive number of seconds");
        }
        let mut config = ProxyConfig {
            listen,
            body_limit: self.body_limit_mib * 1024 * 1024,
            ping_interval: Duration::from_secs_f64(self.ping_interval),
            ..ProxyConfig::default()
        };
        if let Some(list) = &self.beta_allowlist {
            config.beta_families = list
                .iter()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect();
        }
        Ok(config)
    }
}

/// `claude` options.
#[derive(Debug, clap::Args)]
pub(crate) struct ClaudeArgs {
    #[command(flatten)]
    tuning: ProxyTuning,
    /// Arguments passed to Claude Code unchanged.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    args: Vec<std::ffi::OsString>,
}

pub(crate) async fn login(ctx: &Context, args: LoginArgs) -> anyhow::Result<ExitCode> {
    ctx.store
        .check_writable()
        .context("the credential could not be saved there; set CLAUDE_HOST_HOME or --home to a folder you can write")?;
    let flow = DeviceFlow::new(
        http_client()?,
        &ctx.opts.github_url,
        &args.client_id,
        &args.scope,
    );
    let code = flow.request_code().await?;
    eprintln!(
        "To sign in, open {} and enter the code: {}",
        code.verification_uri, code.user_code
    );
    let tty = std::io::stderr().is_terminal();
    let granted = flow
        .poll(&code, |p| match p {
            PollProgress::Pending(n) if tty => {
                eprint!("\rWaiting for approval on GitHub… ({n} checks)");
                let _ = std::io::stderr().flush();
            }
            PollProgress::Pending(_) => {}
            PollProgress::SlowDown(i) => {
                eprintln!(
                    "\nGitHub asked to slow down; checking every {} s",
                    i.as_secs()
                );
            }
        })
        .await;
    if tty {
        eprintln!();
    }
    let granted = granted?;
    let (login, copilot) = keep_credential(
        &ctx.store,
        ctx.endpoints(),
        ctx.identity(),
        granted,
        &args.client_id,
    )
    .await?;
    println!(
        "Signed in{}. Credential saved to {} (mode 0600).",
        login.map(|l| format!(" as {l}")).unwrap_or_default(),
        ctx.store.path().display()
    );
    if let Err(e) = copilot.token().await {
        eprintln!("warning: {e}");
    }
    for var in ["GH_TOKEN", "GITHUB_TOKEN"] {
        if std::env::var_os(var).is_some() {
            eprintln!(
                "note: {var} is set in the environment and takes precedence over the saved credential"
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Saves a granted GitHub token (0600) with the account's login when GitHub tells it, and
/// returns that login and a Copilot client for the account.
pub(crate) async fn keep_credential(
    store: &claude_host_upstream::credentials::CredentialStore,
    endpoints: claude_host_upstream::copilot::CopilotEndpoints,
    identity: claude_host_upstream::copilot::ClientIdentity,
    granted: claude_host_upstream::device_flow::GrantedToken,
    client_id: &str,
) -> anyhow::Result<(
    Option<String>,
    claude_host_upstream::copilot::CopilotUpstream,
)> {
    let copilot = claude_host_upstream::copilot::CopilotUpstream::new(
        http_client()?,
        granted.access_token.clone(),
        endpoints,
        identity,
        Default::default(),
    );
    let login = match copilot.github_user().await {
        Ok(user) => user
            .get("login")
            .and_then(|l| l.as_str())
            .map(str::to_owned),
        Err(e) => {
            tracing::warn!(error = %e, "signed in, but could not read the GitHub user");
            None
        }
    };
    store.save(&StoredCredential {
        github_token: granted.access_token,
        login: login.clone(),
        obtained_at: now_unix(),
        client_id: Some(client_id.to_owned()),
        scope: granted.scope,
    })?;
    Ok((login, copilot))
}

pub(crate) fn logout(ctx: &Context) -> anyhow::Result<ExitCode> {
    if ctx.store.delete()? {
        println!("Removed {}.", ctx.store.path().display());
    } else {
        println!("Not signed in (no {}).", ctx.store.path().display());
    }
    for var in ["GH_TOKEN", "GITHUB_TOKEN"] {
        if std::env::var_os(var).is_some() {
            eprintln!("note: {var} is still set in the environment and will keep being used");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The shared database, when one is configured: where, how many sessions, and how far this
/// host's transcripts are ahead of their copies there.
/// Day `day`'s model calls of every host that counts them in the shared store (`None`: no
/// store configured, or it cannot be read; logged).
async fn shared_day(ctx: &Context, day: &str) -> Option<claude_host_proxy::DayUsage> {
    let url = ctx.database_url().ok()??;
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        let db = claude_host_store::Database::open(&url).await?;
        db.shared
            .values_under(&crate::usage::shared_day_prefix(day))
            .await
    })
    .await;
    let values = match read {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot read the shared usage counts");
            return None;
        }
        Err(_) => {
            tracing::warn!("the database did not answer for the shared usage counts");
            return None;
        }
    };
    let mut total = claude_host_proxy::DayUsage::default();
    for (key, json) in values {
        match serde_json::from_str::<claude_host_proxy::DayUsage>(&json) {
            Ok(u) => total.add(&u),
            Err(e) => tracing::warn!(%key, error = %e, "unreadable shared usage counts; skipped"),
        }
    }
    Some(total)
}

async fn database_report(ctx: &Context) -> Option<serde_json::Value> {
    let url = match ctx.database_url() {
        Ok(u) => u?,
        Err(e) => return Some(json!({"error": format!("{e:#}")})),
    };
    let location = claude_host_store::redact(&url);
    let db = match claude_host_store::Database::open(&url).await {
        Ok(db) => db,
        Err(e) => {
            return Some(
                json!({"location": location, "error": e.to_string(), "unleased": unleased_json(ctx)}),
            );
        }
    };
    let records = match db.metadata.list(true).await {
        Ok(r) => r,
        Err(e) => {
            return Some(
                json!({"location": location, "error": e.to_string(), "unleased": unleased_json(ctx)}),
            );
        }
    };
    let ids: std::collections::HashSet<String> = records.iter().map(|r| r.id.clone()).collect();
    let (mut behind_sessions, mut behind_entries) = (0u64, 0u64);
    if let Some(config) = claude_host_sdk::transcripts::config_dir(
        std::env::var_os("CLAUDE_CONFIG_DIR")
            .map(std::path::PathBuf::from)
            .as_deref(),
        &[],
    ) {
        let projects = config.join("projects");
        let local = claude_host_sdk::transcripts::list_sessions(&config, None).unwrap_or_default();
        for s in local.iter().filter(|s| ids.contains(&s.session_id)) {
            let Some(key) = claude_host_agent::mirror::key_for(&projects, &s.path) else {
                continue;
            };
            let here =
                claude_host_agent::mirror::mirrored_lines(&s.path).map_or(0, |l| l.len() as u64);
            let there = db.transcripts.count(&key).await.unwrap_or(0);
            if here > there {
                behind_sessions += 1;
                behind_entries += here - there;
            }
        }
    }
    Some(json!({"location": location, "sessions": records.len(),
                "behind": {"sessions": behind_sessions, "entries": behind_entries},
                "unleased": unleased_json(ctx)}))
}

/// The running hosts that drive sessions without a lease when the database cannot be reached
/// (`--allow-unleased`).
fn unleased_json(ctx: &Context) -> Vec<serde_json::Value> {
    crate::usage::unleased_hosts(&ctx.home)
        .into_iter()
        .map(|(pid, command, database)| json!({"pid": pid, "command": command, "database": database}))
        .collect()
}

fn print_database(report: Option<&serde_json::Value>) {
    let Some(r) = report else { return };
    for h in r["unleased"].as_array().into_iter().flatten() {
        println!(
            "Unleased sessions allowed (--allow-unleased): `{}` (pid {}) drives a session without a lease when {} cannot be reached; another host may then drive it too",
            h["command"].as_str().unwrap_or("?"),
            h["pid"],
            h["database"].as_str().unwrap_or("?")
        );
    }
    let location = r["location"].as_str().unwrap_or("?");
    if let Some(e) = r["error"].as_str() {
        println!("Session database: {location}: {e}");
        return;
    }
    let behind = &r["behind"];
    let lag = if behind["entries"] == 0 {
        "every transcript of this host is stored".to_owned()
    } else {
        format!(
            "{} transcript lines of {} sessions on this host not stored yet (the host that ran them catches up when the database is back)",
            behind["entries"], behind["sessions"]
        )
    };
    println!(
        "Session database: {location}, {} sessions; {lag}",
        r["sessions"]
    );
}

pub(crate) async fn status(ctx: &Context, as_json: bool) -> anyhow::Result<ExitCode> {
    let requests = crate::usage::totals(&ctx.home);
    let day = claude_host_proxy::telemetry::today();
    // Every host of a shared store counts there; without it (none, or unreachable), the
    // processes of this machine count.
    let today = match shared_day(ctx, &day).await {
        Some(shared) => {
            let mut t = crate::usage::day(&ctx.home, &day, false);
            t.add(&shared);
            t
        }
        None => crate::usage::day(&ctx.home, &day, true),
    };
    let database = database_report(ctx).await;
    let Some(token) = ctx.github_token()? else {
        if as_json {
            println!(
                "{}",
                json!({"signed_in": false, "today": today_json(&day, &today), "requests": requests_json(&requests), "database": database})
            );
        } else {
            println!("Not signed in. Run `claude-host login`.");
            print_today(&day, &today);
            print_requests(&requests);
            print_database(database.as_ref());
        }
        return Ok(ExitCode::from(1));
    };
    let source = match &token.source {
        TokenSource::Env(v) => format!("env {v}"),
        TokenSource::File(p) => p.display().to_string(),
    };
    let copilot = ctx.copilot()?;
    let user = copilot.github_user().await;
    let info = copilot.user_info().await;
    let minted = copilot.token().await;
    let now = now_unix();
    let login = user
        .as_ref()
        .ok()
        .and_then(|u| u.get("login").and_then(|l| l.as_str()).map(str::to_owned))
        .or(token.login.clone());
    let errors: Vec<String> = [user.as_ref().err(), info.as_ref().err()]
        .into_iter()
        .flatten()
        .map(ToString::to_string)
        .collect();
    let report = json!({
        "signed_in": true,
        "login": login,
        "credential_source": source,
        "copilot_plan": info.as_ref().ok().and_then(|i| i.get("copilot_plan").cloned()),
        "quota_reset_date": info.as_ref().ok().and_then(|i| i.get("quota_reset_date").cloned()),
        "quota_snapshots": info.as_ref().ok().and_then(|i| i.get("quota_snapshots").cloned()),
        "copilot_token": match &minted {
            Ok(t) => json!({"valid": true, "expires_in_secs": t.expires_at - now, "refresh_in_secs": t.refresh_at - now, "api": t.api_base, "sku": t.sku}),
            Err(e) => json!({"valid": false, "error": e.to_string()}),
        },
        "errors": errors,
        "today": today_json(&day, &today),
        "requests": requests_json(&requests),
        "database": database,
    });
    if as_json {
        println!("{report}");
    } else {
        println!(
            "Signed in as {} (credential: {source})",
            login.as_deref().unwrap_or("<unknown>")
        );
        match &info {
            Ok(i) => {
                println!(
                    "Copilot plan: {}",
                    i.get("copilot_plan")
                        .and_then(|p| p.as_str())
                        .unwrap_or("unknown")
                );
                if let Some(q) = i.pointer("/quota_snapshots/premium_interactions") {
                    if q.get("unlimited").and_then(|u| u.as_bool()) == Some(true) {
                        println!("Premium requests: unlimited");
                    } else {
                        println!(
                            "Premium requests: {} of {} left ({}%), resets {}",
                            q.get("remaining").unwrap_or(&json!("?")),
                            q.get("entitlement").unwrap_or(&json!("?")),
                            q.get("percent_remaining")
                                .and_then(|p| p.as_f64())
                                .map_or("?".into(), |p| format!("{p:.0}")),
                            i.get("quota_reset_date")
                                .and_then(|d| d.as_str())
                                .unwrap_or("?")
                        );
                    }
                }
            }
            Err(e) => println!("Copilot plan: unavailable ({e})"),
        }
        match &minted {
            Ok(t) => println!(
                "Copilot token: valid for {} more, refreshed in {} (API {})",
                human_secs(t.expires_at - now),
                human_secs(t.refresh_at - now),
                t.api_base
            ),
            Err(e) => println!("Copilot token: {e}"),
        }
        print_today(&day, &today);
        print_requests(&requests);
        print_database(database.as_ref());
    }
    Ok(if minted.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The recorded requests: totals and per session, for `status --json`.
fn requests_json(sessions: &[crate::usage::SessionTotals]) -> serde_json::Value {
    json!({
        "user": sessions.iter().map(|s| s.user).sum::<u64>(),
        "agent": sessions.iter().map(|s| s.agent).sum::<u64>(),
        "sessions": sessions,
    })
}

/// How many requests went out as the user's (premium requests) and as the agent's.
fn today_json(day: &str, u: &claude_host_proxy::DayUsage) -> serde_json::Value {
    json!({"date": day, "requests": u.requests, "premium_requests": u.premium_requests,
        "premium_cost": u.premium_cost, "agent_requests": u.agent_requests, "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens, "errors": u.errors})
}

fn print_today(day: &str, u: &claude_host_proxy::DayUsage) {
    if u.requests == 0 {
        println!("Today ({day} UTC): no model calls through claude-host");
        return;
    }
    let errors = if u.errors.is_empty() {
        "none".to_owned()
    } else {
        u.errors
            .iter()
            .map(|(kind, n)| format!("{n} {kind}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "Today ({day} UTC): {} model calls, {} premium (by you, counting as {} at the models' multipliers) and {} by the agent; {} input and {} output tokens; errors: {errors}",
        u.requests,
        u.premium_requests,
        // Multipliers are small fractions (0.33, 0.5) or whole numbers.
        (u.premium_cost * 100.0).round() / 100.0,
        u.agent_requests,
        u.input_tokens,
        u.output_tokens
    );
}

fn print_requests(sessions: &[crate::usage::SessionTotals]) {
    const SHOWN: usize = 10;
    if sessions.is_empty() {
        println!("Requests through claude-host: none recorded yet");
        return;
    }
    let user: u64 = sessions.iter().map(|s| s.user).sum();
    let agent: u64 = sessions.iter().map(|s| s.agent).sum();
    println!(
        "Requests through claude-host (last 30 days): {user} by you (premium requests), {agent} by the agent, in {} sessions",
        sessions.len()
    );
    for s in sessions.iter().take(SHOWN) {
        println!(
            "  {}  {} by you, {} by the agent, last {}",
            s.session,
            s.user,
            s.agent,
            claude_host_protocol::time::rfc3339_from_millis(s.last_at)
        );
    }
    if sessions.len() > SHOWN {
        println!(
            "  … {} more (status --json lists all)",
            sessions.len() - SHOWN
        );
    }
}

pub(crate) async fn models(ctx: &Context, as_json: bool) -> anyhow::Result<ExitCode> {
    let upstream = ctx.upstream()?;
    let catalog = upstream.catalog().await?;
    let roles = catalog.roles(
        ctx.opts.small_model.as_deref(),
        ctx.opts.subagent_model.as_deref(),
    );
    if as_json {
        let models: Vec<_> = catalog
            .models
            .iter()
            .map(|m| {
                json!({"id": m.sdk_id, "upstream_id": m.upstream_id, "display_name": m.display_name,
                       "default": m.is_default, "effort_levels": m.effort_levels,
                       "endpoint": m.api.path(), "vendor": m.vendor,
                       "max_context_window": m.max_context_window,
                       "max_prompt_tokens": m.max_prompt_tokens, "max_output_tokens": m.max_output_tokens,
                       "vision": m.supports_vision, "reasoning": m.reasoning,
                       "premium_multiplier": m.multiplier,
                       "small_model": roles.small.as_deref() == Some(m.sdk_id.as_str())})
            })
            .collect();
        println!("{}", json!({"upstream": upstream.name(), "models": models}));
    } else if catalog.models.is_empty() {
        println!("No models offered by the {} upstream.", upstream.name());
    } else {
        let width = catalog
            .models
            .iter()
            .map(|m| m.sdk_id.len())
            .max()
            .unwrap_or(0);
        for m in &catalog.models {
            let mut notes = Vec::new();
            if m.is_default {
                notes.push("default".to_owned());
            }
            if roles.small.as_deref() == Some(m.sdk_id.as_str()) {
                notes.push("small/fast".to_owned());
            }
            if catalog.strict {
                notes.push(match m.multiplier {
                    Some(0.0) => "included".to_owned(),
                    Some(x) => format!("{x}x premium"),
                    None => "premium: unknown".to_owned(),
                });
                notes.push(m.api.path().to_owned());
                if let Some(t) = m.max_prompt_tokens {
                    notes.push(format!("prompt {}k", t / 1000));
                }
                if m.supports_vision {
                    notes.push("vision".to_owned());
                }
            }
            if !m.effort_levels.is_empty() {
                notes.push(format!("effort: {}", m.effort_levels.join("/")));
            }
            println!(
                "{:width$}  {}  ({})",
                m.sdk_id,
                m.display_name,
                notes.join(", ")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn start_proxy(
    ctx: &Context,
    mut config: ProxyConfig,
) -> anyhow::Result<(ProxyHandle, Arc<dyn Upstream>)> {
    let upstream = ctx.upstream()?;
    config
        .quota_fallback_model
        .clone_from(&ctx.opts.quota_fallback_model);
    config.meter = ctx.meter();
    let handle = claude_host_proxy::start(config, upstream.clone()).await?;
    Ok((handle, upstream))
}

pub(crate) async fn proxy(ctx: &Context, args: ProxyArgs) -> anyhow::Result<ExitCode> {
    let listen = match (args.listen, args.port) {
        (Some(addr), _) => {
            if !addr.ip().is_loopback() {
                eprintln!(
                    "warning: listening on {addr}, which is reachable from other machines; the nonce is the only protection"
                );
            }
            addr
        }
        (None, port) => SocketAddr::from(([127, 0, 0, 1], port.unwrap_or(0))),
    };
    let (handle, upstream) = start_proxy(ctx, args.tuning.config(listen)?).await?;
    let _usage = crate::usage::UsageRecorder::start(
        &ctx.home,
        handle.prompt_ledger(),
        handle.usage(),
        "proxy",
    );
    let session = format!("proxy-{}", &uuid_simple()[..12]);
    let token = handle.auth_token(&session);
    if args.json {
        println!(
            "{}",
            json!({"base_url": handle.base_url(), "auth_token": token, "pid": std::process::id()})
        );
    } else {
        println!("export ANTHROPIC_BASE_URL={}", handle.base_url());
        println!("export ANTHROPIC_AUTH_TOKEN={token}");
        eprintln!(
            "# claude-host proxy ({} upstream) is running; paste the lines above into a shell, also set \
             CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 and unset ANTHROPIC_API_KEY, then run `claude`. Ctrl-C stops it.",
            upstream.name()
        );
    }
    let _ = std::io::stdout().flush();
    wait_for_stop_signal().await;
    tracing::info!("shutting down the proxy");
    handle.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

async fn wait_for_stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
    }
}

pub(crate) async fn claude(ctx: &Context, args: ClaudeArgs) -> anyhow::Result<ExitCode> {
    let cli = claude_cli::locate(
        ctx.opts.claude_path.as_deref(),
        &ctx.home,
        !ctx.opts.no_install,
    )
    .await?;
    let (handle, upstream) = start_proxy(
        ctx,
        args.tuning.config(SocketAddr::from(([127, 0, 0, 1], 0)))?,
    )
    .await?;
    // Claude Code compacts against its own idea of the window; the upstream's smallest
    // prompt limit is the one that fails a turn (the user may switch models with /model).
    let catalog = match upstream.catalog().await {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::debug!(error = %e, "no catalog for the compaction window and model roles");
            None
        }
    };
    // The model the user named, else the Claude models' smallest limit (models the user may
    // switch to with /model; the others are asked for by name).
    let named = model_argument(&args.args);
    let compact_window =
        catalog
            .as_ref()
            .and_then(|c| match named.as_deref().and_then(|m| c.find(m)) {
                Some(m) => m.max_prompt_tokens,
                None => c
                    .models
                    .iter()
                    .filter(|m| m.is_claude())
                    .filter_map(|m| m.max_prompt_tokens)
                    .min(),
            });
    let roles = catalog.as_ref().map(|c| {
        c.roles(
            ctx.opts.small_model.as_deref(),
            ctx.opts.subagent_model.as_deref(),
        )
    });
    let session = uuid_simple();
    let usage = crate::usage::UsageRecorder::start(
        &ctx.home,
        handle.prompt_ledger(),
        handle.usage(),
        "claude",
    );
    let mut cmd = tokio::process::Command::new(&cli.path);
    // The CLI takes the last `--settings` only: when the user passes one, the prompt hook
    // would replace it, so the proxy goes by the request's shape instead.
    if args.args.iter().any(|a| {
        a.to_str()
            .is_some_and(|a| a == "--settings" || a.starts_with("--settings="))
    }) {
        tracing::info!("--settings given: premium requests are told by the request's shape");
    } else {
        cmd.arg("--settings").arg(prompt_hook_settings());
        handle
            .prompt_ledger()
            .set_source(&session, claude_host_proxy::PromptSource::Hook);
    }
    if let Some(window) = compact_window
        && std::env::var_os("CLAUDE_CODE_AUTO_COMPACT_WINDOW").is_none()
    {
        cmd.env("CLAUDE_CODE_AUTO_COMPACT_WINDOW", window.to_string());
    }
    for (name, value) in roles.map(|r| r.env()).unwrap_or_default() {
        // The user's own choice, made in their environment, stands.
        if std::env::var_os(&name).is_none() {
            cmd.env(name, value);
        }
    }
    if cli.origin == claude_host_sdk::find::Origin::Pinned {
        // The pinned install is claude-host's; its updater would install a global copy.
        cmd.env("DISABLE_AUTOUPDATER", "1");
    }
    cmd.args(&args.args)
        // Claude Code then asks the proxy for its models (`/v1/models`: every model of the
        // plan) to offer them in its own /model picker.
        .env("CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY", "1")
        .env("ANTHROPIC_BASE_URL", handle.base_url())
        .env("ANTHROPIC_AUTH_TOKEN", handle.auth_token(&session))
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        // The CLI must never see a real credential: only the proxy holds them.
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("GH_TOKEN")
        .env_remove("GITHUB_TOKEN")
        .env_remove("NODE_OPTIONS")
        .kill_on_drop(true);
    die_with_parent(&mut cmd);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {}", cli.path.display()))?;
    // The child shares the terminal and its foreground process group (it is interactive), so
    // Ctrl-C reaches it directly; we only keep running until it exits.
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let status = loop {
        tokio::select! {
            s = child.wait() => break s?,
            _ = int.recv() => {}
            _ = term.recv() => {
                if let Some(pid) = child.id() {
                    send_signal(pid, libc::SIGTERM);
                }
            }
        }
    };
    handle.shutdown().await;
    drop(usage);
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1);
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

/// The value of `--model` (or `--model=`) among Claude Code arguments.
fn model_argument(args: &[std::ffi::OsString]) -> Option<String> {
    let mut args = args.iter().filter_map(|a| a.to_str());
    while let Some(a) = args.next() {
        if a == "--model" {
            return args.next().map(str::to_owned);
        }
        if let Some(m) = a.strip_prefix("--model=") {
            return Some(m.to_owned());
        }
    }
    None
}

/// Settings with a `UserPromptSubmit` hook that marks every prompt the user types, so the
/// proxy can tell the one request that carries it (billed as a premium request) from every
/// request Claude Code sends on its own. The proxy strips the marker before forwarding.
fn prompt_hook_settings() -> String {
    json!({"hooks": {"UserPromptSubmit": [{"hooks": [{
        "type": "command",
        "command": format!("printf %s {}", claude_host_protocol::request_kind::PROMPT_MARKER),
    }]}]}})
    .to_string()
}

#[allow(unsafe_code)]
fn die_with_parent(cmd: &mut tokio::process::Command) {
    // SAFETY: prctl is async-signal-safe; the closure runs in the forked child before exec and
    // touches no memory shared with the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
}

#[allow(unsafe_code)]
fn send_signal(pid: u32, sig: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) with a pid we spawned and still own (not yet reaped).
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

pub(crate) async fn install_cli(
    ctx: &Context,
    force: bool,
    version: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let version = version.unwrap_or(claude_cli::PINNED_VERSION);
    let path = claude_cli::install_version(&ctx.home, version, force).await?;
    println!("{}", path.display());
    if version != claude_cli::PINNED_VERSION {
        eprintln!(
            "Claude Code {version} is installed next to the pinned {}; claude-host uses it with --claude-path {} (or CLAUDE_HOST_CLAUDE_PATH)",
            claude_cli::PINNED_VERSION,
            path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn doctor(ctx: &Context) -> anyhow::Result<ExitCode> {
    let mut failed = false;
    let mut report = |ok: bool, what: &str, detail: String| {
        println!("{} {what}: {detail}", if ok { "ok  " } else { "FAIL" });
        failed |= !ok;
    };
    let located = claude_cli::locate(ctx.opts.claude_path.as_deref(), &ctx.home, false).await;
    let used = located.as_ref().ok().map(|c| c.path.clone());
    match located {
        Ok(cli) => report(
            true,
            "Claude Code CLI",
            format!(
                "{} ({}, {}){}",
                cli.version,
                cli.path.display(),
                cli.origin,
                if cli.version == claude_cli::PINNED_VERSION {
                    String::new()
                } else {
                    format!(" — pinned version is {}", claude_cli::PINNED_VERSION)
                }
            ),
        ),
        Err(e) => report(false, "Claude Code CLI", format!("{e:#}")),
    }
    report(
        true,
        "Installed Claude Code versions",
        installed_versions(ctx, used.as_deref()),
    );
    report(true, "Optional parts of this build", optional_parts());
    if ctx.opts.upstream == "copilot" {
        match ctx.github_token() {
            Ok(Some(t)) => report(true, "GitHub credential", t.source.to_string()),
            Ok(None) => report(
                false,
                "GitHub credential",
                "not signed in; run `claude-host login`".into(),
            ),
            Err(e) => report(false, "GitHub credential", e.to_string()),
        }
        if let Ok(copilot) = ctx.copilot() {
            match copilot.token().await {
                Ok(t) => report(
                    true,
                    "Copilot API",
                    format!("token minted, API {}", t.api_base),
                ),
                Err(e) => report(false, "Copilot API", e.to_string()),
            }
        }
    }
    match ctx.upstream() {
        Ok(up) => match up.catalog().await {
            Ok(c) if !c.models.is_empty() || !c.strict => report(
                true,
                "Models",
                format!("{} Claude models from {}", c.models.len(), up.name()),
            ),
            Ok(_) => report(
                false,
                "Models",
                "the upstream offers no Claude models".into(),
            ),
            Err(e) => report(false, "Models", e.to_string()),
        },
        Err(e) => report(false, "Upstream", format!("{e:#}")),
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Which of the cargo features that a source build leaves out by default this binary has.
fn optional_parts() -> String {
    let parts = [
        ("PostgreSQL", cfg!(feature = "postgres"), "postgres"),
        ("OTLP metrics export", cfg!(feature = "otlp"), "otlp"),
    ];
    parts
        .iter()
        .map(|(name, on, feature)| {
            if *on {
                format!("{name} yes")
            } else {
                format!("{name} no (feature `{feature}`)")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `2.1.329, 2.1.330 (pinned, in use) in DIR`, or that none is installed there.
fn installed_versions(ctx: &Context, used: Option<&std::path::Path>) -> String {
    let dir = ctx.home.join("cli");
    let installed = claude_cli::installed_versions(&ctx.home);
    let used = used.and_then(|u| std::fs::canonicalize(u).ok());
    if installed.is_empty() {
        return format!("none in {}", dir.display());
    }
    let list: Vec<String> = installed
        .iter()
        .map(|(version, bin)| {
            let mut notes = Vec::new();
            if version == claude_cli::PINNED_VERSION {
                notes.push("pinned");
            }
            if used.is_some() && used == std::fs::canonicalize(bin).ok() {
                notes.push("in use");
            }
            if notes.is_empty() {
                version.clone()
            } else {
                format!("{version} ({})", notes.join(", "))
            }
        })
        .collect();
    format!("{} in {}", list.join(", "), dir.display())
}

fn human_secs(s: i64) -> String {
    if s < 0 {
        return "expired".into();
    }
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

fn now_unix() -> i64 {
    use claude_host_upstream::clock::{Clock, SystemClock};
    SystemClock.now_unix()
}

fn uuid_simple() -> String {
    uuid::Uuid::new_v4().to_string()
}
