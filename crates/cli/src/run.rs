//! `claude-host run`: the command-line client of the agent core.

use crate::setup::Context;
use ahp_types::actions::StateAction;
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::{ChatOrigin, ChatState, ResponsePart, ToolCallState, ToolResultContent};
use anyhow::Context as _;
use claude_host_agent::{
    Confirmation, NewSession, SessionEvent, SessionHandle, SessionSubscription,
};
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use tokio::io::AsyncWriteExt;

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
    let (agent, _usage) = crate::setup::build_agent(
        ctx,
        cwd.clone(),
        allow_bypass,
        Some(ctx.upstream()?),
        "run",
        crate::setup::StoreOpening::AtStart,
    )
    .await?;
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
                    working_directories: vec![cwd],
                    model: args.model.clone(),
                    permission_mode: args.permission_mode.clone(),
                    ..Default::default()
                })
                .await?
        }
    };
    // The first thing a script reads names the session, so it can `--resume` it.
    let model = match session.model() {
        Some(m) => Some(m),
        None => agent
            .models()
            .await
            .ok()
            .and_then(|m| m.first().map(|m| m.id.clone())),
    };
    let intro = json!({"type": "session", "id": session.id(), "cwd": session.cwd(),
        "model": model});
    if args.json {
        println!("{intro}");
    } else {
        tracing::info!(session = %session.id(), "session started");
    }
    let (_, actions) = session.subscribe_channels(Vec::new()).await?;
    let printer = tokio::spawn(print_actions(actions, args.json));
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let approver = tokio::spawn(approve_loop(session.clone(), interactive));
    let mut failed = false;
    let mut ran = 0;
    if let Some(p) = &args.prompt {
        failed |= run_turn(&session, p).await;
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
    if session.session_id().is_some() {
        tracing::info!(session = %session.id(), "session saved; continue it with `claude-host run --resume {}`", session.id());
    }
    // Shutting down ends the session's task, which ends its stream: the printer finishes
    // after the last action.
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
async fn run_turn(session: &SessionHandle, prompt: &str) -> bool {
    match session.send(prompt).await {
        Ok(_) => {
            let state = session.state().await;
            !matches!(
                state.turns.last().map(|t| &t.state),
                Some(ahp_types::state::TurnState::Complete)
            )
        }
        Err(e) => {
            eprintln!("error: {e}");
            true
        }
    }
}

async fn approve_loop(session: SessionHandle, interactive: bool) {
    let mut always: HashSet<String> = HashSet::new();
    let mut answered: HashSet<String> = HashSet::new();
    let mut status = session.watch_status();
    loop {
        let next = match status
            .wait_for(|s| s.confirmations.iter().any(|c| !answered.contains(c)) || s.closed)
            .await
        {
            Ok(s) if !s.closed => s
                .confirmations
                .iter()
                .find(|c| !answered.contains(*c))
                .cloned(),
            _ => return,
        };
        let Some(id) = next else { continue };
        answered.insert(id.clone());
        let (tool, what) = describe_call(&session.state().await, &id);
        let decision = if always.contains(&tool) {
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
                    always.insert(tool.clone());
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
        if let Err(e) = session.confirm_tool(&id, decision).await {
            tracing::debug!(error = %e, "the confirmation was settled elsewhere");
        }
    }
}

/// A pending tool call's name and what it would do.
fn describe_call(state: &ChatState, id: &str) -> (String, String) {
    let call = state.active_turn.as_ref().and_then(|t| {
        t.response_parts.iter().find_map(|p| match p {
            ResponsePart::ToolCall(c) => match &c.tool_call {
                ToolCallState::PendingConfirmation(s) if s.tool_call_id == id => Some(s),
                _ => None,
            },
            _ => None,
        })
    });
    match call {
        Some(s) => (
            s.tool_name.clone(),
            match &s.invocation_message {
                StringOrMarkdown::Plain(t) => t.clone(),
                StringOrMarkdown::Markdown { markdown } => markdown.clone(),
            },
        ),
        None => ("tool".into(), String::new()),
    }
}

async fn print_actions(mut sub: SessionSubscription, json: bool) {
    // Written asynchronously: a reader that stops stalls only this printer (which then catches
    // up or resynchronises), never the single-threaded runtime the session itself runs on.
    let mut out = tokio::io::stdout();
    // Subagent chats (URI → how deep), from the session's `chatAdded`s: their activity is
    // shown indented under the call that started them.
    let mut subagents: HashMap<String, usize> = HashMap::new();
    while let Some(event) = sub.recv().await {
        let text = match event {
            SessionEvent::Resync(snapshot) => {
                // Fell behind: say so, and go on from the state as it is now.
                if json {
                    Some(format!(
                        "{}\n",
                        json!({"type": "resync", "chat": snapshot.chat})
                    ))
                } else {
                    eprintln!("\n(output fell behind; continuing from the current state)");
                    None
                }
            }
            SessionEvent::Action(p) if p.is_rejection() => None,
            SessionEvent::Action(p) if p.channel() == sub.handle().resource() => {
                if let StateAction::SessionChatAdded(a) = p.action()
                    && let Some(ChatOrigin::Tool { chat, .. }) = &a.summary.origin
                {
                    let depth = subagents.get(chat).copied().unwrap_or(0) + 1;
                    subagents.insert(a.summary.resource.clone(), depth);
                }
                None
            }
            // The chat's actions: the conversation (session-level changes are not output).
            SessionEvent::Action(p) if p.channel() == sub.handle().chat_uri() => {
                render(p.action(), json)
            }
            // A subagent's: its tool calls and what it says, indented (plain text only: the
            // JSON lines are the main chat's actions).
            SessionEvent::Action(p) => match subagents.get(p.channel()) {
                Some(depth) if !json => match p.action() {
                    StateAction::ChatTurnComplete(_) | StateAction::ChatTurnCancelled(_) => None,
                    a => render(a, false).map(|t| indent(&t, *depth)),
                },
                _ => None,
            },
        };
        let Some(text) = text else { continue };
        let written = async {
            out.write_all(text.as_bytes()).await?;
            out.flush().await
        };
        if let Err(e) = written.await {
            // Nobody reads any more (a closed pipe): the session goes on without an audience.
            tracing::info!(error = %e, "cannot write the output; no more is printed");
            break;
        }
    }
}

/// `text` with every line that has something on it indented `depth` steps.
fn indent(text: &str, depth: usize) -> String {
    let pad = "    ".repeat(depth);
    text.split('\n')
        .map(|l| {
            if l.is_empty() {
                String::new()
            } else {
                format!("{pad}{l}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One line per changed file: `  +12 −3 src/a.ts` (created and deleted files say so).
fn edit_summary(e: &ahp_types::state::ToolResultFileEditContent) -> String {
    let uri = e
        .after
        .as_ref()
        .or(e.before.as_ref())
        .map(|s| s.uri.as_str())
        .unwrap_or_default();
    let path = claude_host_protocol::uri::file_path(uri).unwrap_or_else(|_| uri.into());
    let shown = std::env::current_dir()
        .ok()
        .and_then(|cwd| {
            path.strip_prefix(cwd)
                .ok()
                .map(std::path::Path::to_path_buf)
        })
        .unwrap_or(path);
    let (added, removed) = e
        .diff
        .as_ref()
        .map_or((0, 0), |d| (d.added.unwrap_or(0), d.removed.unwrap_or(0)));
    let what = match (&e.before, &e.after) {
        (None, Some(_)) => " (new)",
        (Some(_), None) => " (deleted)",
        _ => "",
    };
    format!("    +{added} −{removed} {}{what}\n", shown.display())
}

/// What `run` prints for one chat action: a JSON line, or the plain text it adds.
fn render(action: &StateAction, json: bool) -> Option<String> {
    if json {
        return serde_json::to_string(action).ok().map(|l| l + "\n");
    }
    match action {
        StateAction::ChatDelta(d) => Some(d.content.clone()),
        StateAction::ChatResponsePart(r) => match &r.part {
            ResponsePart::Markdown(m) => Some(m.content.clone()),
            _ => None,
        },
        StateAction::ChatToolCallReady(r) if r.confirmed.is_some() => {
            let what = match &r.invocation_message {
                StringOrMarkdown::Plain(t) => t.as_str(),
                StringOrMarkdown::Markdown { markdown } => markdown.as_str(),
            };
            Some(format!("\n[{what}]\n"))
        }
        StateAction::ChatToolCallComplete(c) => {
            let text = c
                .result
                .content
                .iter()
                .flatten()
                .find_map(|c| match c {
                    ToolResultContent::Text(t) => Some(t.text.as_str()),
                    _ => None,
                })
                .unwrap_or("");
            let first = text.lines().next().unwrap_or("");
            let mut out = format!("  → {}\n", first.chars().take(100).collect::<String>());
            for content in c.result.content.iter().flatten() {
                if let ToolResultContent::FileEdit(e) = content {
                    out.push_str(&edit_summary(e));
                }
            }
            Some(out)
        }
        StateAction::ChatTurnComplete(_) | StateAction::ChatTurnCancelled(_) => Some("\n".into()),
        StateAction::ChatError(e) => {
            eprintln!("error: {}", e.part.error.message);
            Some("\n".into())
        }
        _ => None,
    }
}
