//! `claude-host run`: the command-line client of the agent core.

use crate::setup::Context;
use ahp_types::actions::StateAction;
use anyhow::Context as _;
use claude_host_agent::{ChatSession, Confirmation, NewSession};
use serde_json::Value;
use std::collections::HashSet;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `run` options.
#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// The prompt; without it, prompts are read from standard input, one per line.
    prompt: Option<String>,
    /// Working directory for the session.
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Model (e.g. `sonnet`, `claude-opus-5-5`).
    #[arg(long)]
    model: Option<String>,
    /// Permission mode: default, acceptEdits, plan, bypassPermissions.
    #[arg(long, value_name = "MODE")]
    permission_mode: Option<String>,
    /// Continue this session.
    #[arg(long, value_name = "SESSION_ID")]
    resume: Option<String>,
    /// Write the session's AHP actions as JSON lines instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run(ctx: &Context, args: RunArgs) -> anyhow::Result<ExitCode> {
    let cwd = match args.cwd {
        Some(c) => c,
        None => std::env::current_dir().context("no current directory")?,
    };
    // Asked for on the command line by the user running it.
    let allow_bypass = args.permission_mode.as_deref() == Some("bypassPermissions");
    let agent = crate::setup::build_agent(ctx, cwd.clone(), allow_bypass).await?;
    agent.use_upstream(ctx.upstream()?).await?;
    let session = match &args.resume {
        Some(id) => {
            let s = agent
                .open_session(id)
                .await
                .with_context(|| format!("cannot resume session {id}"))?;
            if let Some(m) = &args.model {
                s.set_model(m).await?;
            }
            if let Some(m) = &args.permission_mode {
                s.set_permission_mode(m).await?;
            }
            s
        }
        None => {
            agent
                .create_session(NewSession {
                    cwd: Some(cwd),
                    model: args.model.clone(),
                    permission_mode: args.permission_mode.clone(),
                    ..Default::default()
                })
                .await?
                .1
        }
    };
    let printer = tokio::spawn(print_actions(session.subscribe(), args.json));
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let approver = tokio::spawn(approve_loop(session.clone(), interactive));
    let mut failed = false;
    let prompts: Vec<String> = match args.prompt {
        Some(p) => vec![p],
        None => Vec::new(),
    };
    let mut ran = 0;
    for p in prompts {
        failed |= run_turn(&session, &p).await;
        ran += 1;
    }
    if ran == 0 {
        // Conversation mode: one prompt per line until end of input.
        loop {
            if interactive {
                eprint!("> ");
                let _ = std::io::stderr().flush();
            }
            let line = tokio::task::spawn_blocking(|| {
                let mut l = String::new();
                std::io::stdin().read_line(&mut l).map(|n| (n, l))
            })
            .await??;
            if line.0 == 0 {
                break;
            }
            let p = line.1.trim();
            if !p.is_empty() {
                failed |= run_turn(&session, p).await;
            }
        }
    }
    approver.abort();
    let _ = approver.await;
    if let Some(id) = session.session_id() {
        tracing::info!(session = %id, "session saved; continue it with `claude-host run --resume {id}`");
    }
    // Shutting down stops the CLI; dropping the last handle closes the action stream, so
    // the printer finishes after the last action.
    agent.shutdown().await;
    drop(session);
    drop(agent);
    let _ = printer.await;
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Runs one turn; true when it did not complete.
async fn run_turn(session: &ChatSession, prompt: &str) -> bool {
    match session.send(prompt).await {
        Ok(_) => {
            let state = serde_json::to_value(session.state()).unwrap_or(Value::Null);
            let last = state["turns"]
                .as_array()
                .and_then(|t| t.last())
                .cloned()
                .unwrap_or(Value::Null);
            last["state"] != "complete"
        }
        Err(e) => {
            eprintln!("error: {e}");
            true
        }
    }
}

async fn approve_loop(session: Arc<ChatSession>, interactive: bool) {
    let always: Arc<Mutex<HashSet<String>>> = Arc::default();
    loop {
        let Some(id) = session.next_confirmation(Duration::from_secs(3600)).await else {
            continue;
        };
        let state = serde_json::to_value(session.state()).unwrap_or(Value::Null);
        let call = state["activeTurn"]["responseParts"]
            .as_array()
            .and_then(|parts| {
                parts
                    .iter()
                    .find(|p| p["toolCall"]["toolCallId"] == id.as_str())
            })
            .map(|p| p["toolCall"].clone())
            .unwrap_or(Value::Null);
        let tool = call["toolName"].as_str().unwrap_or("tool").to_owned();
        let what = call["invocationMessage"].as_str().unwrap_or("").to_owned();
        let decision = if always.lock().map(|a| a.contains(&tool)).unwrap_or(false) {
            Confirmation::Approve
        } else if interactive {
            eprint!("\nAllow {tool} {what}? [y]es / [n]o / [a]lways: ");
            let _ = std::io::stderr().flush();
            let answer = tokio::task::spawn_blocking(|| {
                let mut l = String::new();
                let _ = std::io::stdin().read_line(&mut l);
                l
            })
            .await
            .unwrap_or_default();
            match answer.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => Confirmation::Approve,
                "a" | "always" => {
                    if let Ok(mut a) = always.lock() {
                        a.insert(tool.clone());
                    }
                    Confirmation::Approve
                }
                _ => Confirmation::Deny,
            }
        } else {
            eprintln!(
                "denied {tool} {what}: no terminal to ask on (pass --permission-mode acceptEdits or bypassPermissions to allow tools)"
            );
            Confirmation::Deny
        };
        let _ = session.confirm_tool(&id, decision);
    }
}

async fn print_actions(mut rx: tokio::sync::broadcast::Receiver<StateAction>, json: bool) {
    let mut out = std::io::stdout();
    while let Ok(a) = rx.recv().await {
        let v = serde_json::to_value(&a).unwrap_or(Value::Null);
        if json {
            let _ = writeln!(out, "{v}");
            let _ = out.flush();
            continue;
        }
        match v["type"].as_str().unwrap_or("") {
            "chat/delta" => {
                let _ = write!(out, "{}", v["content"].as_str().unwrap_or(""));
            }
            "chat/responsePart" if v["part"]["kind"] == "markdown" => {
                let _ = write!(out, "{}", v["part"]["content"].as_str().unwrap_or(""));
            }
            "chat/toolCallReady" if v.get("confirmed").is_some() => {
                let _ = write!(
                    out,
                    "\n[{}]\n",
                    v["invocationMessage"].as_str().unwrap_or("tool")
                );
            }
            "chat/toolCallComplete" => {
                let text = v["result"]["content"][0]["text"].as_str().unwrap_or("");
                let first = text.lines().next().unwrap_or("");
                let _ = writeln!(out, "  → {}", first.chars().take(100).collect::<String>());
            }
            "chat/turnComplete" | "chat/turnCancelled" => {
                let _ = writeln!(out);
            }
            "chat/error" => {
                let _ = writeln!(out);
                eprintln!(
                    "error: {}",
                    v["part"]["error"]["message"]
                        .as_str()
                        .unwrap_or("turn failed")
                );
            }
            _ => {}
        }
        let _ = out.flush();
    }
}
