//! Subagent chats. Each call of Claude Code's subagent tool (`Agent`, formerly `Task`) gets a
//! chat of its own, a child of the chat the call was made in, at VS Code's subagent chat URI.
//! The frames that carry the call's id as `parent_tool_use_id` are that chat's one turn; the
//! parent's tool call points at it (`_meta.subagentChatUri`, a `subagent` result). Nested
//! subagents are children of their parent's chat in the same way.

use super::*;
use crate::subagent::{Spawn, spawns_subagent};
use ahp_types::actions::SessionChatAddedAction;
use ahp_types::state::{
    ChatInteractivity, ChatOrigin, ToolCallConfirmationReason, ToolResultContent,
    ToolResultSubagentContent, UsageInfo,
};
use claude_host_protocol::frames::StreamEvent;

/// One subagent's chat.
pub(crate) struct Subagent {
    /// The tool call that started it.
    pub call: String,
    /// Its state, reduced like the default chat's.
    pub chat: ChatState,
    spawn: Spawn,
    /// The running turn (`None` once it ended, and for restored chats).
    turn: Option<ChildTurn>,
}

impl Subagent {
    /// Whether its turn still runs.
    pub(super) fn running(&self) -> bool {
        self.turn.is_some()
    }
}

struct ChildTurn {
    mapper: TurnMapper,
    /// Ended, and its transcript is being read for what the CLI did not print.
    reading: bool,
    /// Per API message: (input tokens with cache, output tokens, cache reads).
    usage: HashMap<String, (i64, i64, i64)>,
    model: Option<String>,
    /// What the CLI's task notification says the subagent used (`total_tokens`, `tool_uses`,
    /// `duration_ms`): the only account of a nested subagent, whose frames are not printed.
    reported: Option<Value>,
}

impl ChildTurn {
    /// Keeps the newest usage each of the subagent's API responses reported.
    fn record(&mut self, frame: &Typed) {
        let (id, usage) = match frame {
            Typed::Assistant(f) => {
                if let Some(m) = f.message.extra.get("model").and_then(Value::as_str)
                    && m != "<synthetic>"
                {
                    self.model = Some(m.to_owned());
                }
                (f.message.id.clone(), f.message.extra.get("usage"))
            }
            Typed::StreamEvent(f) => match &f.event {
                // The final output count comes with `message_delta`.
                StreamEvent::Other(e)
                    if e.get("type").and_then(Value::as_str) == Some("message_delta") =>
                {
                    let id = f
                        .extra
                        .get("api_message_id")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned();
                    (id, e.get("usage"))
                }
                _ => return,
            },
            _ => return,
        };
        let Some(u) = usage else { return };
        let n = |k: &str| u.get(k).and_then(Value::as_i64);
        let entry = self.usage.entry(id).or_insert((0, 0, 0));
        let input = n("input_tokens").unwrap_or(0)
            + n("cache_read_input_tokens").unwrap_or(0)
            + n("cache_creation_input_tokens").unwrap_or(0);
        entry.0 = entry.0.max(input);
        entry.1 = entry.1.max(n("output_tokens").unwrap_or(0));
        entry.2 = entry.2.max(n("cache_read_input_tokens").unwrap_or(0));
    }

    fn usage(&self) -> UsageInfo {
        let sum = self
            .usage
            .values()
            .fold((0, 0, 0), |a, u| (a.0 + u.0, a.1 + u.1, a.2 + u.2));
        let meta = self.reported.as_ref().map(|r| {
            let mut m = JsonObject::new();
            for (from, to) in [
                ("total_tokens", "totalTokens"),
                ("tool_uses", "toolUses"),
                ("duration_ms", "durationMs"),
            ] {
                if let Some(v) = r.get(from).filter(|v| v.is_number()) {
                    m.insert(to.into(), v.clone());
                }
            }
            m
        });
        UsageInfo {
            input_tokens: Some(sum.0),
            output_tokens: Some(sum.1),
            model: self.model.clone(),
            cache_read_tokens: Some(sum.2),
            meta,
        }
    }
}

/// How long a nested subagent's transcript is waited for after its end is reported.
const NESTED_TRANSCRIPT_WAIT: Duration = Duration::from_secs(2);

/// How a subagent's turn ended.
pub(crate) enum ChildEnd {
    Complete,
    Failed(String),
    Cancelled,
}

/// The subagent call a frame belongs to, if it is a subagent's.
pub(super) fn subagent_of(frame: &Typed) -> Option<&str> {
    match frame {
        Typed::Assistant(f) => f.parent_tool_use_id(),
        Typed::User(f) => f.parent_tool_use_id(),
        Typed::StreamEvent(f) => f.parent_tool_use_id(),
        _ => None,
    }
}

/// `_meta` of a subagent call: how VS Code finds and labels the child chat.
fn meta(uri: Option<&str>, spawn: Option<&Spawn>) -> JsonObject {
    let mut m = JsonObject::new();
    m.insert("toolKind".into(), Value::String("subagent".into()));
    if let Some(uri) = uri {
        m.insert("subagentChatUri".into(), Value::String(uri.to_owned()));
    }
    if let Some(s) = spawn {
        if let Some(n) = &s.agent_name {
            m.insert("subagentAgentName".into(), Value::String(n.clone()));
        }
        if let Some(d) = &s.description {
            m.insert("subagentDescription".into(), Value::String(d.clone()));
        }
    }
    m
}

fn result_content(uri: &str, spawn: &Spawn) -> ToolResultContent {
    ToolResultContent::Subagent(ToolResultSubagentContent {
        resource: uri.to_owned(),
        title: spawn.title(),
        agent_name: spawn.agent_name.clone(),
        description: spawn.description.clone(),
    })
}

fn summary(chat: &ChatState) -> ChatSummary {
    ChatSummary {
        resource: chat.resource.clone(),
        title: chat.title.clone(),
        status: chat.status,
        activity: None,
        modified_at: chat.modified_at.clone(),
        changes: None,
        origin: chat.origin.clone(),
        movable: None,
        interactivity: chat.interactivity,
        working_directories: None,
    }
}

fn new_chat(uri: &str, parent: &str, call: &str, spawn: &Spawn, turns: Vec<Turn>) -> ChatState {
    let mut chat = empty_chat(uri, &spawn.title());
    chat.origin = Some(ChatOrigin::Tool {
        chat: parent.to_owned(),
        tool_call_id: call.to_owned(),
    });
    chat.interactivity = Some(ChatInteractivity::ReadOnly);
    chat.turns = turns;
    chat
}

/// Restored subagent chats and their place in the session: listed in its `chats`, and the
/// calls that started them decorated in every chat's turns.
pub(super) fn restore(
    session_uri: &str,
    default_chat: &mut ChatState,
    session: &mut SessionState,
    restored: Vec<crate::subagent::RestoredSubagent>,
) -> Vec<Subagent> {
    let mut out: Vec<Subagent> = Vec::new();
    for r in &restored {
        // The chat whose turns hold the call: the default chat, or a subagent's (nesting).
        let holder = std::iter::once((default_chat.resource.clone(), &default_chat.turns))
            .chain(
                restored
                    .iter()
                    .map(|o| (subagent_chat_uri(session_uri, &o.call), &o.turns)),
            )
            .find_map(|(uri, turns)| call_input(turns, &r.call).map(|input| (uri, input)));
        let Some((parent, input)) = holder else {
            tracing::debug!(call = %r.call, "a subagent transcript whose call is not in the session; skipped");
            continue;
        };
        let spawn = Spawn::of(&input);
        let uri = subagent_chat_uri(session_uri, &r.call);
        out.push(Subagent {
            call: r.call.clone(),
            chat: new_chat(&uri, &parent, &r.call, &spawn, r.turns.clone()),
            spawn,
            turn: None,
        });
    }
    let spawns: HashMap<String, (String, Spawn)> = out
        .iter()
        .map(|s| (s.call.clone(), (s.chat.resource.clone(), s.spawn.clone())))
        .collect();
    decorate(&mut default_chat.turns, &spawns);
    for s in &mut out {
        decorate(&mut s.chat.turns, &spawns);
        session.chats.push(summary(&s.chat));
    }
    out
}

/// The input of the completed tool call `call` among `turns`.
fn call_input(turns: &[Turn], call: &str) -> Option<Value> {
    turns
        .iter()
        .flat_map(|t| &t.response_parts)
        .find_map(|p| match p {
            ResponsePart::ToolCall(tc) => match &tc.tool_call {
                ToolCallState::Completed(c) if c.tool_call_id == call => match &c.tool_input {
                    Some(ToolInput::Inline(text)) => serde_json::from_str(text).ok(),
                    _ => Some(Value::Null),
                },
                _ => None,
            },
            _ => None,
        })
}

/// Restored calls that started a subagent point at its chat, as live ones do.
fn decorate(turns: &mut [Turn], spawns: &HashMap<String, (String, Spawn)>) {
    for part in turns.iter_mut().flat_map(|t| t.response_parts.iter_mut()) {
        let ResponsePart::ToolCall(tc) = part else {
            continue;
        };
        let ToolCallState::Completed(c) = &mut tc.tool_call else {
            continue;
        };
        let Some((uri, spawn)) = spawns.get(&c.tool_call_id) else {
            continue;
        };
        c.meta = Some(meta(Some(uri), Some(spawn)));
        c.content
            .get_or_insert_with(Vec::new)
            .push(result_content(uri, spawn));
    }
}

impl Task {
    pub(super) fn subagent(&self, call: &str) -> Option<&Subagent> {
        self.subagents.iter().find(|c| c.call == call)
    }

    /// The state of the subagent chat of `call`.
    pub(super) fn subagent_chat(&self, call: &str) -> Option<&ChatState> {
        self.subagent(call).map(|c| &c.chat)
    }

    /// The running subagent whose tool call `id` is (the CLI asks about it): its call.
    pub(super) fn subagent_asking(&mut self, id: &str, tool: &str) -> Option<String> {
        let child = self.subagents.iter_mut().find(|c| {
            c.turn
                .as_ref()
                .is_some_and(|t| t.mapper.tool_name(id).is_some())
        })?;
        if let Some(turn) = child.turn.as_mut() {
            // Seen already: this only keeps its pending confirmation from being overridden.
            let _ = turn.mapper.asked(id, tool);
        }
        Some(child.call.clone())
    }

    /// The held-back ready of a running subagent's client tool call `id`, with its chat.
    pub(super) fn release_in_subagent(&mut self, id: &str) -> Option<(ChannelKind, StateAction)> {
        self.subagents.iter_mut().find_map(|c| {
            let ready = c.turn.as_mut()?.mapper.release(id)?;
            Some((ChannelKind::Subagent(c.call.clone()), ready))
        })
    }

    fn chat_uri_of(&self, kind: &ChannelKind) -> String {
        match kind {
            ChannelKind::Subagent(call) => subagent_chat_uri(&self.uris.session, call),
            _ => self.uris.chat.clone(),
        }
    }

    /// Publishes what a turn's mapper made of frames in chat `kind`; a call of the subagent
    /// tool opens the subagent's chat, and its end ends that chat's turn.
    pub(super) fn publish_mapped(&mut self, kind: &ChannelKind, actions: Vec<StateAction>) {
        for mut a in actions {
            if let StateAction::ChatToolCallComplete(c) = &mut a {
                self.attach_edits(c);
                if let Some(command) = self.bash_command(kind, &c.turn_id, &c.tool_call_id) {
                    self.attach_terminal(c, &command);
                }
            }
            match &mut a {
                StateAction::ChatToolCallStart(s) if spawns_subagent(&s.tool_name) => {
                    s.meta = Some(meta(None, None));
                }
                StateAction::ChatToolCallStart(s) => {
                    s.contributor = self.contributor(&s.tool_name);
                }
                // A client completed it: the CLI's report of the same result adds nothing.
                StateAction::ChatToolCallComplete(c)
                    if self.client_completed.remove(&c.tool_call_id) =>
                {
                    continue;
                }
                StateAction::ChatToolCallReady(r) => {
                    let tool = self.tool_name_in(kind, &r.turn_id, &r.tool_call_id);
                    if tool.as_deref().is_some_and(spawns_subagent) {
                        let input = match &r.tool_input {
                            Some(ToolInput::Inline(text)) => {
                                serde_json::from_str(text).unwrap_or(Value::Null)
                            }
                            _ => Value::Null,
                        };
                        let spawn = Spawn::of(&input);
                        let uri = self.open_subagent(kind, &r.tool_call_id, spawn.clone());
                        r.meta = Some(meta(Some(&uri), Some(&spawn)));
                    }
                }
                StateAction::ChatToolCallComplete(c) => {
                    if let Some(child) = self.subagent(&c.tool_call_id) {
                        let uri = child.chat.resource.clone();
                        let spawn = child.spawn.clone();
                        c.result
                            .content
                            .get_or_insert_with(Vec::new)
                            .push(result_content(&uri, &spawn));
                        // A background subagent's call returns as it starts; its end is
                        // reported by a task notification.
                        if !spawn.background || !c.result.success {
                            let end = if c.result.success {
                                ChildEnd::Complete
                            } else {
                                ChildEnd::Failed(
                                    c.result
                                        .content
                                        .iter()
                                        .flatten()
                                        .find_map(|x| match x {
                                            ToolResultContent::Text(t) => Some(t.text.clone()),
                                            _ => None,
                                        })
                                        .unwrap_or_else(|| "the subagent failed".to_owned()),
                                )
                            };
                            let call = c.tool_call_id.clone();
                            self.end_subagent(&call, end);
                        }
                    }
                }
                _ => {}
            }
            self.publish(kind.clone(), a, None);
        }
    }

    /// The name of a tool call in a chat's running turn.
    fn tool_name_in(&self, kind: &ChannelKind, turn_id: &str, call: &str) -> Option<String> {
        let chat = match kind {
            ChannelKind::Subagent(c) => &self.subagent(c)?.chat,
            _ => &self.chat,
        };
        let turn = chat.active_turn.as_ref().filter(|t| t.id == turn_id)?;
        turn.response_parts.iter().find_map(|p| match p {
            ResponsePart::ToolCall(tc) => {
                let (id, name) = match &tc.tool_call {
                    ToolCallState::Streaming(s) => (&s.tool_call_id, &s.tool_name),
                    ToolCallState::PendingConfirmation(s) => (&s.tool_call_id, &s.tool_name),
                    ToolCallState::Running(s) => (&s.tool_call_id, &s.tool_name),
                    _ => return None,
                };
                (id == call).then(|| name.clone())
            }
            _ => None,
        })
    }

    /// Opens the chat of the subagent `call` (made in chat `parent`) with its one turn;
    /// returns its URI.
    fn open_subagent(&mut self, parent: &ChannelKind, call: &str, spawn: Spawn) -> String {
        if let Some(existing) = self.subagent(call) {
            return existing.chat.resource.clone();
        }
        let uri = subagent_chat_uri(&self.uris.session, call);
        let parent_uri = self.chat_uri_of(parent);
        let mut chat = new_chat(&uri, &parent_uri, call, &spawn, Vec::new());
        chat.status = status::IN_PROGRESS;
        let added = summary(&chat);
        // An empty chat until its `turnStarted`, like a client's own view of it.
        chat.status = status::IDLE;
        let prompt = spawn.prompt.clone();
        self.subagents.push(Subagent {
            call: call.to_owned(),
            chat,
            spawn,
            turn: Some(ChildTurn {
                mapper: TurnMapper::for_subagent(call),
                reading: false,
                usage: HashMap::new(),
                model: None,
                reported: None,
            }),
        });
        tracing::debug!(session = %self.id, call = %call, "a subagent started");
        self.session(StateAction::SessionChatAdded(SessionChatAddedAction {
            summary: added,
        }));
        self.publish(
            ChannelKind::Subagent(call.to_owned()),
            actions::turn_started(call, actions::message(&prompt, MessageKind::Tool), None),
            None,
        );
        uri
    }

    /// Drops the chats of subagents whose call is no longer in the session (after a
    /// truncation), nested ones with them.
    pub(super) fn prune_subagents(&mut self) {
        loop {
            let holds = |chat: &ChatState, call: &str| {
                chat.turns.iter().flat_map(|t| &t.response_parts).any(|p| {
                    matches!(p, ResponsePart::ToolCall(tc) if tool_call_id_of(&tc.tool_call) == call)
                })
            };
            let gone = self.subagents.iter().position(|c| {
                c.turn.is_none()
                    && !holds(&self.chat, &c.call)
                    && !self
                        .subagents
                        .iter()
                        .any(|o| o.call != c.call && holds(&o.chat, &c.call))
            });
            let Some(at) = gone else { return };
            let child = self.subagents.remove(at);
            tracing::debug!(session = %self.id, call = %child.call, "a subagent chat left with its call");
            self.session(StateAction::SessionChatRemoved(
                ahp_types::actions::SessionChatRemovedAction {
                    chat: child.chat.resource,
                },
            ));
        }
    }

    /// A frame of the subagent `call`: mapped into its chat's turn.
    pub(super) fn on_subagent_frame(&mut self, call: &str, frame: &Typed) {
        let Some(child) = self.subagents.iter_mut().find(|c| c.call == call) else {
            tracing::debug!(session = %self.id, call = %call, "a frame of an unknown subagent; skipped");
            return;
        };
        let Some(turn) = child.turn.as_mut() else {
            tracing::debug!(session = %self.id, call = %call, "a frame of a subagent that ended; skipped");
            return;
        };
        turn.record(frame);
        let out = turn.mapper.map(frame);
        self.publish_mapped(&ChannelKind::Subagent(call.to_owned()), out);
    }

    /// A background task ended: if it is a subagent, so is its chat's turn.
    pub(super) fn on_task_notification(
        &mut self,
        n: &claude_host_protocol::frames::TaskNotification,
    ) {
        let Some(call) = n.extra.get("tool_use_id").and_then(Value::as_str) else {
            return;
        };
        let end = match n.status.as_deref() {
            Some("failed") => ChildEnd::Failed(n.describe()),
            Some("stopped") => ChildEnd::Cancelled,
            _ => ChildEnd::Complete,
        };
        let call = call.to_owned();
        if let Some(turn) = self
            .subagents
            .iter_mut()
            .find(|c| c.call == call)
            .and_then(|c| c.turn.as_mut())
        {
            turn.reported = n.extra.get("usage").cloned();
        }
        // The CLI prints the frames of its own subagents only, not of theirs: a nested
        // subagent's turn is filled in from its transcript as it ends.
        let config = self.config_dir();
        let nested = self.subagents.iter_mut().find(|c| {
            c.call == call
                && c.turn.as_ref().is_some_and(|t| !t.reading)
                && matches!(&c.chat.origin, Some(ChatOrigin::Tool { chat, .. })
                    if *chat != self.uris.chat)
        });
        if let (Some(child), Some(config)) = (nested, config)
            && let Some(turn) = child.turn.as_mut()
        {
            turn.reading = true;
            let session = self.id.clone();
            let internal = self.internal_tx.clone();
            tokio::spawn(async move {
                let read_call = call.clone();
                let complete = matches!(end, ChildEnd::Complete);
                let turns = tokio::task::spawn_blocking(move || {
                    // Its last lines may still be on their way to the disk: wait for them a
                    // little (a subagent that failed or was stopped has no final answer).
                    let deadline = std::time::Instant::now() + NESTED_TRANSCRIPT_WAIT;
                    let paths = loop {
                        let paths =
                            claude_host_sdk::transcripts::subagent_transcripts(&config, &session)
                                .unwrap_or_default();
                        if !complete
                            || crate::restore::subagent_transcript_ended(&paths, &read_call)
                            || std::time::Instant::now() >= deadline
                        {
                            break paths;
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    };
                    crate::restore::subagents_from_transcripts(&paths)
                        .into_iter()
                        .find(|r| r.call == read_call)
                        .map(|r| r.turns)
                        .unwrap_or_default()
                })
                .await
                .unwrap_or_default();
                let _ = internal.send(Internal::SubagentRead { call, end, turns });
            });
            return;
        }
        self.end_subagent(&call, end);
    }

    /// What a nested subagent's transcript holds, published into its turn before it ends.
    pub(super) fn subagent_read(&mut self, call: &str, end: ChildEnd, turns: Vec<Turn>) {
        let Some(turn) = self
            .subagents
            .iter_mut()
            .find(|c| c.call == call)
            .and_then(|c| c.turn.as_mut())
        else {
            return;
        };
        turn.reading = false;
        let parts = turns
            .into_iter()
            .next()
            .map(|t| t.response_parts)
            .unwrap_or_default();
        let kind = ChannelKind::Subagent(call.to_owned());
        for part in parts {
            for a in replay_part(call, part) {
                self.publish(kind.clone(), a, None);
            }
        }
        self.end_subagent(call, end);
    }

    /// Ends the running turn of the subagent `call` (and of the subagents it started).
    pub(super) fn end_subagent(&mut self, call: &str, end: ChildEnd) {
        let nested: Vec<String> = self
            .subagents
            .iter()
            .filter(|c| {
                // One still being read ends when its transcript is in.
                c.turn.as_ref().is_some_and(|t| !t.reading)
                    && matches!(&c.chat.origin, Some(ChatOrigin::Tool { chat, .. })
                        if *chat == subagent_chat_uri(&self.uris.session, call))
            })
            .map(|c| c.call.clone())
            .collect();
        for n in nested {
            let inner = match &end {
                ChildEnd::Complete => ChildEnd::Complete,
                ChildEnd::Failed(m) => ChildEnd::Failed(m.clone()),
                ChildEnd::Cancelled => ChildEnd::Cancelled,
            };
            self.end_subagent(&n, inner);
        }
        let Some(child) = self.subagents.iter_mut().find(|c| c.call == call) else {
            return;
        };
        if child.turn.as_ref().is_some_and(|t| t.reading) {
            // Ends once its transcript is in.
            return;
        }
        let Some(mut turn) = child.turn.take() else {
            return;
        };
        let uri = child.chat.resource.clone();
        let (end, st) = match end {
            ChildEnd::Complete => {
                let mut out = vec![actions::usage(call, turn.usage())];
                out.extend(turn.mapper.complete());
                (out, status::IDLE)
            }
            ChildEnd::Failed(m) => (turn.mapper.fail("subagent_failed", &m), status::ERROR),
            ChildEnd::Cancelled => (turn.mapper.cancel(), status::IDLE),
        };
        for a in end {
            self.publish(ChannelKind::Subagent(call.to_owned()), a, None);
        }
        self.session(actions::chat_status(&uri, st));
        tracing::debug!(session = %self.id, call = %call, "a subagent ended");
    }

    /// Ends every running subagent turn (the CLI stopped, the turn was cancelled, the
    /// session closes).
    pub(super) fn end_all_subagents(&mut self, end: fn() -> ChildEnd) {
        let mut running = Vec::new();
        for c in &mut self.subagents {
            if let Some(t) = c.turn.as_mut() {
                // Not waiting for a transcript any more: what it would add comes too late.
                t.reading = false;
                running.push(c.call.clone());
            }
        }
        for call in running {
            self.end_subagent(&call, end());
        }
    }
}

/// The actions that rebuild one response part of a finished turn.
fn replay_part(turn_id: &str, part: ResponsePart) -> Vec<StateAction> {
    match part {
        ResponsePart::Markdown(m) => vec![actions::markdown_part(turn_id, m.id, m.content)],
        ResponsePart::Reasoning(r) => vec![actions::reasoning_part(turn_id, r.id, r.content)],
        ResponsePart::ToolCall(tc) => {
            let ToolCallState::Completed(c) = tc.tool_call else {
                return Vec::new();
            };
            let input = match &c.tool_input {
                Some(ToolInput::Inline(text)) => text.clone(),
                _ => "{}".to_owned(),
            };
            let invocation = match &c.invocation_message {
                ahp_types::common::StringOrMarkdown::Plain(s) => s.clone(),
                other => serde_json::to_value(other)
                    .ok()
                    .and_then(|v| v.get("markdown").and_then(Value::as_str).map(str::to_owned))
                    .unwrap_or_else(|| c.display_name.clone()),
            };
            vec![
                actions::tool_call_start(turn_id, &c.tool_call_id, &c.tool_name),
                actions::tool_call_ready(
                    turn_id,
                    &c.tool_call_id,
                    Ready {
                        invocation,
                        input,
                        confirmed: Some(ToolCallConfirmationReason::NotNeeded),
                        title: None,
                    },
                ),
                StateAction::ChatToolCallComplete(ahp_types::actions::ChatToolCallCompleteAction {
                    turn_id: turn_id.to_owned(),
                    tool_call_id: c.tool_call_id.clone(),
                    meta: None,
                    result: ahp_types::state::ToolCallResult {
                        success: c.success,
                        past_tense_message: c.past_tense_message.clone(),
                        content: c.content.clone(),
                        structured_content: None,
                        error: None,
                    },
                    requires_result_confirmation: None,
                }),
            ]
        }
        _ => Vec::new(),
    }
}

/// The id of a tool call in any state.
pub(super) fn tool_call_id_of(tc: &ToolCallState) -> &str {
    match tc {
        ToolCallState::Streaming(s) => &s.tool_call_id,
        ToolCallState::PendingConfirmation(s) => &s.tool_call_id,
        ToolCallState::Running(s) => &s.tool_call_id,
        ToolCallState::PendingResultConfirmation(s) => &s.tool_call_id,
        ToolCallState::Completed(s) => &s.tool_call_id,
        ToolCallState::Cancelled(s) => &s.tool_call_id,
        _ => "",
    }
}
