//! `claude-host sessions`: list, show, fork, remove, export and import Claude Code sessions
//! (on disk, and in the shared database when one is configured).

use anyhow::Context as _;
use claude_host_sdk::transcripts::{self, SessionSummary};
use claude_host_store::{SessionRecord, Store as _};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

/// `sessions` options.
#[derive(Debug, clap::Args)]
pub(crate) struct SessionsArgs {
    /// Claude Code's config directory (transcripts live in its `projects/`).
    #[arg(long, global = true, env = "CLAUDE_CONFIG_DIR", value_name = "DIR")]
    config_dir: Option<PathBuf>,
    /// Print JSON.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: SessionsCommand,
}

#[derive(Debug, clap::Subcommand)]
enum SessionsCommand {
    /// List sessions, newest first.
    List {
        /// Only sessions started in this directory.
        #[arg(long, value_name = "DIR")]
        cwd: Option<PathBuf>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// Show a session's conversation.
    Show {
        /// Session id.
        id: String,
    },
    /// Copy a session (up to a message) into a new session that can be resumed.
    Fork {
        /// Session id.
        id: String,
        /// Keep messages up to and including this message uuid.
        #[arg(long, value_name = "UUID")]
        at: Option<String>,
    },
    /// Restore a checkpoint: put back every file Claude changed from turn TURN on (its
    /// number, from 1, or its id), then cut the conversation before that turn.
    Rewind {
        /// Session id.
        id: String,
        /// The first turn to undo.
        #[arg(long, value_name = "TURN")]
        to: String,
    },
    /// Delete a session's transcript (and, with a shared database, its copy there).
    Rm {
        /// Session id.
        id: String,
    },
    /// Write a session (transcript, subagent transcripts, the host's record) as JSONL, to
    /// move it by hand.
    Export {
        /// Session id.
        id: String,
        /// Where to write (default: stdout).
        #[arg(long, short, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Read a session written by `export` into Claude Code's projects folder (and the shared
    /// database, when one is configured), so it can be resumed here.
    Import {
        /// The export file (`-`: stdin).
        file: PathBuf,
        /// Replace a session of the same id already here.
        #[arg(long)]
        force: bool,
    },
    /// End whoever's lease on a session in the shared database, so another host may open it
    /// now. The host that held it is refused its next write or renewal and stops driving it.
    Release {
        /// Session id.
        id: String,
    },
}

fn config_dir(args: &SessionsArgs) -> anyhow::Result<PathBuf> {
    transcripts::config_dir(args.config_dir.as_deref(), &[])
        .context("no home directory; set CLAUDE_CONFIG_DIR")
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn summary_json(s: &SessionSummary) -> Value {
    json!({"id": s.session_id, "summary": s.summary, "first_prompt": s.first_prompt, "cwd": s.cwd,
           "git_branch": s.git_branch, "modified": unix(s.modified), "size": s.size,
           "messages": s.message_count, "path": s.path})
}

/// The host's overlay records: the shared database's, or the local store's when it exists
/// (listing never creates it).
async fn overlay(
    home: &std::path::Path,
    db: Option<&claude_host_store::Database>,
) -> HashMap<String, SessionRecord> {
    let records = match db {
        Some(db) => db.metadata.list(true).await,
        None => {
            let path = home.join("sessions.sqlite");
            if !path.exists() {
                return HashMap::new();
            }
            match claude_host_store::SqliteStore::open(&path).await {
                Ok(store) => store.list(true).await,
                Err(e) => Err(e),
            }
        }
    };
    match records {
        Ok(r) => r.into_iter().map(|r| (r.id.clone(), r)).collect(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the session overlay; listing without it");
            HashMap::new()
        }
    }
}

pub(crate) async fn run(
    ctx: &crate::setup::Context,
    args: SessionsArgs,
) -> anyhow::Result<ExitCode> {
    let home = ctx.home.as_path();
    let dir = config_dir(&args)?;
    let db = ctx.database().await?;
    match &args.command {
        SessionsCommand::Export { id, out } => {
            let store = crate::setup::open_store(home, db.as_ref()).await?;
            return crate::transfer::export(&dir, db.as_ref(), store, id, out.as_deref()).await;
        }
        SessionsCommand::Import { file, force } => {
            let store = crate::setup::open_store(home, db.as_ref()).await?;
            return crate::transfer::import(&dir, db.as_ref(), store, file, *force, args.json)
                .await;
        }
        SessionsCommand::Release { id } => {
            let db = db.context(
                "no shared session database is configured (CLAUDE_HOST_DATABASE_URL); leases live there",
            )?;
            let ended = db
                .leases
                .revoke(id)
                .await
                .with_context(|| format!("cannot release session {id} in {}", db.location))?;
            match &ended {
                Some(l) => {
                    tracing::warn!(session = %id, holder = %l.holder, epoch = l.epoch, "a session's lease was ended by hand");
                }
                None => tracing::info!(session = %id, "released a session nobody held"),
            }
            if args.json {
                println!(
                    "{}",
                    json!({"released": id, "was_held_by": ended.as_ref().map(|l| &l.holder),
                           "since": ended.as_ref().map(|l| claude_host_protocol::time::rfc3339_from_millis(l.acquired_at))})
                );
            } else {
                match ended {
                    Some(l) => println!(
                        "Released session {id}; it was held by {} since {}.",
                        l.holder,
                        claude_host_protocol::time::rfc3339_from_millis(l.acquired_at)
                    ),
                    None => println!("Session {id} was not held by any host."),
                }
            }
        }
        SessionsCommand::List { cwd, limit } => {
            let mut all = transcripts::list_newest(&dir, cwd.as_deref(), *limit)?;
            let host = overlay(home, db.as_ref()).await;
            // Who drives each session now (live leases in the shared database).
            let held: HashMap<String, claude_host_store::Lease> = match &db {
                Some(db) => match db.leases.live().await {
                    Ok(l) => l.into_iter().map(|l| (l.session_id.clone(), l)).collect(),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot read the sessions' leases; listing without them");
                        HashMap::new()
                    }
                },
                None => HashMap::new(),
            };
            let held_json = |id: &str| {
                held.get(id).map(|l| {
                    json!({"holder": l.holder, "since": claude_host_protocol::time::rfc3339_from_millis(l.acquired_at),
                           "expires": claude_host_protocol::time::rfc3339_from_millis(l.expires_at), "epoch": l.epoch})
                })
            };
            let held_text = |id: &str| {
                held.get(id).map_or_else(String::new, |l| {
                    format!(
                        "  [held by {} since {}]",
                        l.holder,
                        claude_host_protocol::time::rfc3339_from_millis(l.acquired_at)
                    )
                })
            };
            // Sessions only the shared database has (run on other hosts).
            let elsewhere: Vec<&SessionRecord> = {
                let here: std::collections::HashSet<&str> =
                    all.iter().map(|s| s.session_id.as_str()).collect();
                let mut v: Vec<&SessionRecord> = host
                    .values()
                    .filter(|r| !here.contains(r.id.as_str()))
                    .filter(|r| {
                        cwd.is_none()
                            || cwd.as_deref().map(|c| c.display().to_string())
                                == Some(r.cwd.clone())
                    })
                    .collect();
                v.sort_by_key(|r| std::cmp::Reverse(r.updated_at));
                v.truncate(limit.saturating_sub(all.len()));
                v
            };
            // The one merge of transcripts and overlay, as `serve` lists them.
            let merged: HashMap<String, claude_host_agent::SessionListing> =
                claude_host_agent::listing::merge(
                    all.clone(),
                    host.values().cloned().collect(),
                    Vec::new(),
                )
                .into_iter()
                .map(|l| (l.id.clone(), l))
                .collect();
            for s in &mut all {
                if let Some(l) = merged.get(&s.session_id)
                    && !l.title.is_empty()
                {
                    s.summary = l.title.clone();
                }
            }
            if args.json {
                let sessions: Vec<Value> = all
                    .iter()
                    .map(|s| {
                        let mut v = summary_json(s);
                        if let Some(r) = host.get(&s.session_id) {
                            v["host"] = json!({"model": r.model, "effort": r.effort,
                                "permission_mode": r.permission_mode, "archived": r.archived,
                                "last_host": r.host});
                        }
                        v["held"] = held_json(&s.session_id).unwrap_or(Value::Null);
                        v
                    })
                    .chain(elsewhere.iter().map(|r| {
                        json!({"id": r.id, "summary": r.title.clone().unwrap_or_default(), "cwd": r.cwd,
                               "modified": r.updated_at / 1000, "local": false,
                               "host": {"model": r.model, "effort": r.effort, "permission_mode": r.permission_mode,
                                        "archived": r.archived, "last_host": r.host},
                               "held": held_json(&r.id)})
                    }))
                    .collect();
                println!("{}", json!({ "sessions": sessions }));
            } else if all.is_empty() && elsewhere.is_empty() {
                println!("No sessions under {}.", dir.join("projects").display());
            } else {
                for s in &all {
                    let age = SystemTime::now()
                        .duration_since(s.modified)
                        .map_or(0, |d| d.as_secs());
                    println!(
                        "{}  {:>6}  {:>3} msgs  {}  {}{}",
                        s.session_id,
                        ago(age),
                        s.message_count,
                        s.cwd.as_deref().unwrap_or("?"),
                        s.summary.chars().take(60).collect::<String>(),
                        held_text(&s.session_id)
                    );
                }
                for r in &elsewhere {
                    let age = u64::try_from(
                        claude_host_protocol::time::now_millis().saturating_sub(r.updated_at),
                    )
                    .unwrap_or(0)
                        / 1000;
                    println!(
                        "{}  {:>6}  (on {})  {}  {}{}",
                        r.id,
                        ago(age),
                        r.host.as_deref().unwrap_or("another host"),
                        r.cwd,
                        r.title
                            .as_deref()
                            .unwrap_or_default()
                            .chars()
                            .take(60)
                            .collect::<String>(),
                        held_text(&r.id)
                    );
                }
            }
        }
        SessionsCommand::Show { id } => {
            let index = transcripts::TranscriptIndex::of_session(&dir, id)?;
            let active =
                claude_host_agent::customizations::active_summary(&home.join("customizations"), id);
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
            if args.json {
                show_json(&index, id, &active, &mut out)?;
            } else {
                for e in index.entries(index.main_chain()) {
                    print_entry(&mut out, &e?)?;
                }
                if index.skipped() > 0 {
                    eprintln!("({} unreadable lines skipped)", index.skipped());
                }
                if !active.is_empty() {
                    writeln!(out, "\nCustomizations when it last ran:")?;
                    for line in active {
                        writeln!(out, "  {line}")?;
                    }
                }
            }
            out.flush()?;
        }
        SessionsCommand::Fork { id, at } => {
            let new_id = transcripts::fork_session(&dir, id, at.as_deref())?;
            if args.json {
                println!("{}", json!({"id": new_id, "forked_from": id}));
            } else {
                println!("{new_id}");
                eprintln!("Resume it with: claude-host claude --resume {new_id}");
            }
        }
        SessionsCommand::Rewind { id, to } => {
            let cwd = std::env::current_dir().context("no current directory")?;
            let (agent, _usage) = crate::setup::build_agent(
                ctx,
                cwd,
                false,
                None,
                "sessions",
                crate::setup::StoreOpening::AtStart,
            )
            .await?;
            let session = agent
                .open_session(id)
                .await
                .with_context(|| format!("cannot open session {id}"))?;
            let rewound = session.rewind(to).await;
            session.close().await;
            let files = rewound.with_context(|| format!("cannot rewind session {id}"))?;
            if args.json {
                println!(
                    "{}",
                    json!({"id": id, "rewound_to": to, "files_restored": files})
                );
            } else {
                println!("Put back {files} file(s); the conversation now ends before turn {to}.");
            }
        }
        SessionsCommand::Rm { id } => {
            delete_session(home, &dir, db.as_ref(), id).await?;
            if args.json {
                println!("{}", json!({"deleted": id}));
            } else {
                println!("Deleted {id}.");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Deletes a session for good: its transcript (here and in the shared database) and the
/// host's record of it.
pub(crate) async fn delete_session(
    home: &Path,
    dir: &Path,
    db: Option<&claude_host_store::Database>,
    id: &str,
) -> anyhow::Result<()> {
    if let Some(db) = db {
        if let Some(project) = db.transcripts.project_of(id).await? {
            db.transcripts
                .delete(&claude_host_store::TranscriptKey::main(&project, id))
                .await?;
        }
        db.metadata.delete(id).await?;
        match transcripts::delete_session(dir, id) {
            Ok(()) | Err(transcripts::TranscriptError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    } else {
        transcripts::delete_session(dir, id)?;
    }
    claude_host_agent::edits::delete_session(&home.join("edits"), id)
        .context("cannot remove the session's edit history")?;
    claude_host_agent::customizations::delete_session(&home.join("customizations"), id)
        .context("cannot remove the session's customization decisions and plugin copies")?;
    let store_path = home.join("sessions.sqlite");
    if db.is_none() && store_path.exists() {
        let store = claude_host_store::SqliteStore::open(&store_path).await?;
        store.delete(id).await?;
    }
    Ok(())
}

fn ago(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m", secs / 60),
        3600..86400 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86400),
    }
}

fn print_entry(out: &mut impl Write, e: &serde_json::Map<String, Value>) -> std::io::Result<()> {
    let ty = e.get("type").and_then(Value::as_str).unwrap_or("");
    let content = e.get("message").and_then(|m| m.get("content"));
    match (ty, content) {
        ("user", Some(Value::String(s))) => writeln!(out, "> {s}")?,
        (_, Some(Value::Array(blocks))) if ty == "user" || ty == "assistant" => {
            for b in blocks {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let text = b.get("text").and_then(Value::as_str).unwrap_or("");
                        if ty == "user" {
                            if !text.starts_with("<system-reminder>") {
                                writeln!(out, "> {text}")?;
                            }
                        } else {
                            writeln!(out, "{text}")?;
                        }
                    }
                    Some("tool_use") => writeln!(
                        out,
                        "  [tool] {} {}",
                        b.get("name").and_then(Value::as_str).unwrap_or("?"),
                        b.get("input")
                            .map(Value::to_string)
                            .unwrap_or_default()
                            .chars()
                            .take(120)
                            .collect::<String>()
                    )?,
                    Some("tool_result") => {
                        let result = match b.get("content") {
                            Some(Value::String(s)) => s.clone(),
                            Some(v) => v.to_string(),
                            None => String::new(),
                        };
                        writeln!(
                            out,
                            "  [result] {}",
                            result
                                .lines()
                                .next()
                                .unwrap_or("")
                                .chars()
                                .take(120)
                                .collect::<String>()
                        )?;
                    }
                    Some("thinking") => writeln!(out, "  [thinking]")?,
                    _ => {}
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// `sessions show --json`, written as the entries are read: the same bytes as
/// `{"id", "entries": [the main chain], "skipped_lines", "customizations"}` serialized whole,
/// with one entry in memory at a time.
fn show_json(
    index: &transcripts::TranscriptIndex,
    id: &str,
    active: &[String],
    out: &mut impl Write,
) -> anyhow::Result<()> {
    out.write_all(b"{\"id\":")?;
    serde_json::to_writer(&mut *out, id)?;
    out.write_all(b",\"entries\":[")?;
    for (n, e) in index.entries(index.main_chain()).enumerate() {
        if n > 0 {
            out.write_all(b",")?;
        }
        serde_json::to_writer(&mut *out, &e?)?;
    }
    write!(
        out,
        "],\"skipped_lines\":{},\"customizations\":",
        index.skipped()
    )?;
    serde_json::to_writer(&mut *out, active)?;
    out.write_all(b"}\n")?;
    Ok(())
}
