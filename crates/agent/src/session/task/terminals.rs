//! Terminals: a client's interactive shells (`createTerminal`, on a real pseudo-terminal in
//! one of the session's folders) and the read-only terminal of each Bash call (its output,
//! for a client that follows the call's `terminal` result). Each is a channel of the session,
//! reduced and published like its chats.

use super::{ChatSessionError, Internal, Reply, Task};
use crate::terminal::{Pty, PtyEvent};
use ahp_types::actions::{
    ChatToolCallCompleteAction, StateAction, TerminalDataAction, TerminalExitedAction,
};
use ahp_types::state::{
    TerminalClaim, TerminalCommandResult, TerminalContentPart, TerminalExitedLifecycleState,
    TerminalLifecycleState, TerminalRunningLifecycleState, TerminalSessionClaim, TerminalState,
    TerminalUnclassifiedPart, ToolResultContent, ToolResultTerminalContent,
};
use claude_host_protocol::uri::file_uri;
use std::path::PathBuf;
use tokio::sync::mpsc;

/// Interactive terminals one session may have open.
const MAX_TERMINALS: usize = 16;
/// Most output a terminal's state keeps (older output leaves the front).
const MAX_CONTENT: usize = 1 << 20;
/// Output shown in a Bash call's `terminal` result.
const PREVIEW_CHARS: usize = 2_000;

/// One terminal channel.
pub(crate) struct Term {
    pub uri: String,
    pub state: TerminalState,
    /// The shell (`None`: a tool's output, or a shell that exited).
    pty: Option<Pty>,
    read_only: bool,
}

/// The URI of the terminal of a Bash call in the session at `session_uri`.
pub fn tool_terminal_uri(session_uri: &str, call: &str) -> String {
    format!("{session_uri}/terminal/{call}")
}

/// What a client asks for with `createTerminal`.
#[derive(Debug, Clone)]
pub struct NewTerminal {
    /// The channel URI the client chose.
    pub uri: String,
    /// The folder (already checked to be one of the session's, or inside one).
    pub cwd: PathBuf,
    /// Its title.
    pub name: Option<String>,
    /// Columns and rows.
    pub size: (u16, u16),
    /// Who holds it.
    pub claim: TerminalClaim,
}

impl Task {
    pub(super) fn terminal(&mut self, uri: &str) -> Option<&mut Term> {
        self.terminals.iter_mut().find(|t| t.uri == uri)
    }

    pub(super) fn create_terminal(&mut self, t: NewTerminal, reply: Reply<()>) {
        let refuse = |reply: Reply<()>, why: String| {
            let _ = reply.send(Err(ChatSessionError::Refused(why)));
        };
        if self.terminals.iter().any(|x| x.uri == t.uri) {
            return refuse(reply, format!("terminal {} already exists", t.uri));
        }
        if self.terminals.iter().filter(|x| !x.read_only).count() >= MAX_TERMINALS {
            return refuse(
                reply,
                format!("a session has at most {MAX_TERMINALS} terminals open"),
            );
        }
        let inside = t.cwd.canonicalize().ok().is_some_and(|real| {
            self.working_directories
                .iter()
                .filter_map(|d| d.canonicalize().ok())
                .any(|root| real.starts_with(root))
        });
        if !inside {
            return refuse(
                reply,
                format!("{} is outside this session's folders", t.cwd.display()),
            );
        }
        let (tx, mut rx) = mpsc::unbounded_channel();
        let pty = match Pty::spawn(&t.cwd, t.size.0, t.size.1, tx, self.opts.keeper.clone()) {
            Ok(p) => p,
            Err(e) => return refuse(reply, format!("cannot start a shell: {e}")),
        };
        let internal = self.internal_tx.clone();
        let uri = t.uri.clone();
        tokio::spawn(async move {
            while let Some(event) = rx.recv().await {
                let done = matches!(event, PtyEvent::Exited(_));
                let msg = Internal::Terminal {
                    uri: uri.clone(),
                    event,
                };
                if internal.send(msg).is_err() || done {
                    break;
                }
            }
        });
        tracing::info!(session = %self.id, terminal = %t.uri, cwd = %t.cwd.display(), "opened a terminal");
        self.terminals.push(Term {
            uri: t.uri,
            state: TerminalState {
                title: t.name.unwrap_or_else(|| "Terminal".into()),
                cwd: Some(file_uri(&t.cwd)),
                cols: Some(i64::from(t.size.0)),
                rows: Some(i64::from(t.size.1)),
                content: Vec::new(),
                lifecycle: TerminalLifecycleState::Running(TerminalRunningLifecycleState {}),
                claim: t.claim,
                supports_command_detection: None,
                is_pty: Some(true),
            },
            pty: Some(pty),
            read_only: false,
        });
        let _ = reply.send(Ok(()));
    }

    pub(super) fn dispose_terminal(&mut self, uri: &str, reply: Reply<()>) {
        let Some(at) = self.terminals.iter().position(|t| t.uri == uri) else {
            let _ = reply.send(Err(ChatSessionError::Refused(format!("no terminal {uri}"))));
            return;
        };
        // Dropping the shell kills its whole group.
        self.terminals.remove(at);
        tracing::info!(session = %self.id, terminal = %uri, "closed a terminal");
        let _ = reply.send(Ok(()));
    }

    pub(super) fn on_terminal_event(&mut self, uri: &str, event: PtyEvent) {
        let action = match event {
            PtyEvent::Data(data) => StateAction::TerminalData(TerminalDataAction { data }),
            PtyEvent::Exited(exit_code) => {
                if let Some(t) = self.terminal(uri) {
                    t.pty = None;
                }
                StateAction::TerminalExited(TerminalExitedAction { exit_code })
            }
        };
        if self.terminal(uri).is_some() {
            self.publish(super::ChannelKind::Terminal(uri.to_owned()), action, None);
        }
    }

    /// A client's action on a terminal channel: `Err` is the reason it is refused.
    pub(super) fn terminal_action(
        &mut self,
        uri: &str,
        action: &StateAction,
    ) -> Result<(), String> {
        let Some(t) = self.terminal(uri) else {
            return Err(format!("no terminal {uri}"));
        };
        match action {
            StateAction::TerminalInput(_) | StateAction::TerminalResized(_) if t.read_only => {
                Err("this terminal shows a tool's output; it takes no input".into())
            }
            StateAction::TerminalInput(i) => match &t.pty {
                Some(pty) => {
                    pty.input(&i.data);
                    Ok(())
                }
                None => Err("the shell has exited".into()),
            },
            StateAction::TerminalResized(r) => {
                let Some(pty) = &t.pty else {
                    return Err("the shell has exited".into());
                };
                match (u16::try_from(r.cols), u16::try_from(r.rows)) {
                    (Ok(cols), Ok(rows)) if cols > 0 && rows > 0 => {
                        pty.resize(cols, rows);
                        Ok(())
                    }
                    _ => Err(format!("{}×{} is not a terminal size", r.cols, r.rows)),
                }
            }
            StateAction::TerminalCleared(_)
            | StateAction::TerminalClaimed(_)
            | StateAction::TerminalTitleChanged(_) => Ok(()),
            other => Err(format!(
                "{} cannot be dispatched on a terminal",
                crate::actions::kind(other)
            )),
        }
    }

    /// Keeps a terminal's content within its limit (the oldest output goes first).
    pub(super) fn trim_terminal(&mut self, uri: &str) {
        let Some(t) = self.terminal(uri) else { return };
        let total: usize = t.state.content.iter().map(part_len).sum();
        if total <= MAX_CONTENT {
            return;
        }
        let mut excess = total - MAX_CONTENT;
        while excess > 0 && !t.state.content.is_empty() {
            let len = part_len(&t.state.content[0]);
            if len <= excess {
                t.state.content.remove(0);
                excess -= len;
            } else if let TerminalContentPart::Unclassified(u) = &mut t.state.content[0] {
                let mut cut = excess;
                while !u.value.is_char_boundary(cut) {
                    cut += 1;
                }
                u.value.drain(..cut);
                excess = 0;
            } else {
                t.state.content.remove(0);
                excess = excess.saturating_sub(len);
            }
        }
    }

    /// The command of a running Bash call in chat `kind` (`None`: not a Bash call).
    pub(super) fn bash_command(
        &self,
        kind: &super::ChannelKind,
        turn_id: &str,
        call: &str,
    ) -> Option<String> {
        let chat = match kind {
            super::ChannelKind::Subagent(c) => &self.subagent(c)?.chat,
            _ => &self.chat,
        };
        let turn = chat.active_turn.as_ref().filter(|t| t.id == turn_id)?;
        turn.response_parts.iter().find_map(|p| match p {
            ahp_types::state::ResponsePart::ToolCall(tc) => match &tc.tool_call {
                ahp_types::state::ToolCallState::Running(s)
                    if s.tool_call_id == call && s.tool_name == "Bash" =>
                {
                    let input = match &s.tool_input {
                        Some(ahp_types::state::ToolInput::Inline(text)) => {
                            serde_json::from_str::<serde_json::Value>(text).ok()
                        }
                        _ => None,
                    };
                    Some(
                        input
                            .as_ref()
                            .and_then(|v| v.get("command"))
                            .and_then(serde_json::Value::as_str)
                            .unwrap_or("Bash")
                            .to_owned(),
                    )
                }
                _ => None,
            },
            _ => None,
        })
    }

    /// A Bash call's result gets a `terminal` part, and its output a read-only terminal.
    pub(super) fn attach_terminal(&mut self, c: &mut ChatToolCallCompleteAction, command: &str) {
        let output: String = c
            .result
            .content
            .iter()
            .flatten()
            .filter_map(|x| match x {
                ToolResultContent::Text(t) => Some(t.text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        let exit_code = if c.result.success {
            0
        } else {
            exit_code_in(&output).unwrap_or(1)
        };
        let uri = tool_terminal_uri(&self.uris.session, &c.tool_call_id);
        let preview: String = output.chars().take(PREVIEW_CHARS).collect();
        let truncated = preview.len() < output.len();
        c.result
            .content
            .get_or_insert_with(Vec::new)
            .push(ToolResultContent::Terminal(ToolResultTerminalContent {
                resource: uri.clone(),
                title: command.chars().take(200).collect(),
                is_pty: Some(false),
                result: Some(TerminalCommandResult {
                    exit_code: Some(exit_code),
                    preview: Some(preview),
                    truncated: Some(truncated),
                }),
            }));
        if self.terminals.iter().any(|t| t.uri == uri) {
            return;
        }
        let mut output = output;
        if output.len() > MAX_CONTENT {
            let mut cut = output.len() - MAX_CONTENT;
            while !output.is_char_boundary(cut) {
                cut += 1;
            }
            output.drain(..cut);
        }
        self.terminals.push(Term {
            uri,
            state: TerminalState {
                title: command.chars().take(200).collect(),
                cwd: self.working_directories.first().map(|d| file_uri(d)),
                cols: None,
                rows: None,
                content: vec![TerminalContentPart::Unclassified(
                    TerminalUnclassifiedPart { value: output },
                )],
                lifecycle: TerminalLifecycleState::Exited(TerminalExitedLifecycleState {
                    exit_code: Some(exit_code),
                }),
                claim: TerminalClaim::Session(TerminalSessionClaim {
                    session: self.uris.session.clone(),
                    chat: self.uris.chat.clone(),
                    turn_id: Some(c.turn_id.clone()),
                    tool_call_id: Some(c.tool_call_id.clone()),
                }),
                supports_command_detection: None,
                is_pty: Some(false),
            },
            pty: None,
            read_only: true,
        });
    }
}

fn part_len(p: &TerminalContentPart) -> usize {
    match p {
        TerminalContentPart::Unclassified(u) => u.value.len(),
        TerminalContentPart::Command(c) => c.output.len() + c.command_line.len(),
        TerminalContentPart::Unknown(v) => v.to_string().len(),
    }
}

/// The code in Claude Code's "Exit code N" line of a failed command.
fn exit_code_in(output: &str) -> Option<i64> {
    output.lines().find_map(|l| {
        l.trim()
            .strip_prefix("Exit code ")
            .and_then(|n| n.split_whitespace().next())
            .and_then(|n| n.parse().ok())
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn exit_codes_are_read_from_the_failure_line() {
        assert_eq!(super::exit_code_in("Exit code 2\nnope"), Some(2));
        assert_eq!(super::exit_code_in("no code here"), None);
    }
}
