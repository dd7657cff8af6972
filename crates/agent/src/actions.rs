//! Typed constructors for the AHP actions the agent emits. Every action a session applies is
//! built here or parsed from a client, never assembled as JSON.

use ahp_types::actions::{
    ChatDeltaAction, ChatErrorAction, ChatInputCompletedAction, ChatInputRequestedAction,
    ChatPendingMessageRemovedAction, ChatPendingMessageSetAction, ChatReasoningAction,
    ChatResponsePartAction, ChatToolCallCompleteAction, ChatToolCallConfirmedAction,
    ChatToolCallDeltaAction, ChatToolCallReadyAction, ChatToolCallStartAction,
    ChatTurnCancelledAction, ChatTurnCompleteAction, ChatTurnStartedAction, ChatUsageAction,
    PartialChatSummary, SessionChatUpdatedAction, SessionConfigChangedAction,
    SessionInputNeededRemovedAction, SessionInputNeededSetAction, SessionTitleChangedAction,
    StateAction,
};
use ahp_types::common::{JsonObject, StringOrMarkdown};
use ahp_types::state::{
    ChatInputAnswer, ChatInputRequest, ChatInputResponseKind, ErrorInfo, ErrorResponsePart,
    MarkdownResponsePart, Message, MessageKind, MessageOrigin, PendingMessageKind,
    ReasoningResponsePart, ResponsePart, SessionChatInputRequest, SessionInputRequest,
    SessionToolConfirmationRequest, ToolCallCancellationReason, ToolCallConfirmationReason,
    ToolCallConfirmationState, ToolCallResult, ToolInput, ToolResultContent, ToolResultTextContent,
    UsageInfo,
};
use claude_host_protocol::time::now_rfc3339;
use serde_json::Value;
use std::collections::HashMap;

/// A message with no attachments, model or agent.
pub fn message(text: &str, kind: MessageKind) -> Message {
    Message {
        text: text.to_owned(),
        origin: MessageOrigin { kind },
        attachments: None,
        model: None,
        agent: None,
        meta: None,
    }
}

/// `chat/turnStarted`.
pub fn turn_started(turn_id: &str, message: Message, queued_id: Option<String>) -> StateAction {
    StateAction::ChatTurnStarted(ChatTurnStartedAction {
        turn_id: turn_id.to_owned(),
        started_at: now_rfc3339(),
        message,
        queued_message_id: queued_id,
        meta: None,
    })
}

/// `chat/responsePart` with a markdown part.
pub fn markdown_part(turn_id: &str, part_id: String, content: String) -> StateAction {
    StateAction::ChatResponsePart(ChatResponsePartAction {
        turn_id: turn_id.to_owned(),
        part: ResponsePart::Markdown(MarkdownResponsePart {
            id: part_id,
            content,
        }),
        meta: None,
    })
}

/// `chat/responsePart` with a reasoning part.
pub fn reasoning_part(turn_id: &str, part_id: String, content: String) -> StateAction {
    StateAction::ChatResponsePart(ChatResponsePartAction {
        turn_id: turn_id.to_owned(),
        part: ResponsePart::Reasoning(ReasoningResponsePart {
            id: part_id,
            content,
        }),
        meta: None,
    })
}

/// `chat/delta`.
pub fn delta(turn_id: &str, part_id: String, content: String) -> StateAction {
    StateAction::ChatDelta(ChatDeltaAction {
        turn_id: turn_id.to_owned(),
        part_id,
        content,
        meta: None,
    })
}

/// `chat/reasoning`.
pub fn reasoning(turn_id: &str, part_id: String, content: String) -> StateAction {
    StateAction::ChatReasoning(ChatReasoningAction {
        turn_id: turn_id.to_owned(),
        part_id,
        content,
        meta: None,
    })
}

/// How VS Code should render a tool's card (`_meta.toolKind`): shell tools as terminals
/// (their `toolInput` carries `command`), file searches as searches.
pub fn tool_kind(tool: &str) -> Option<&'static str> {
    match tool {
        "Bash" => Some("terminal"),
        "Grep" | "Glob" => Some("search"),
        _ => None,
    }
}

/// `chat/toolCallStart`.
pub fn tool_call_start(turn_id: &str, tool_call_id: &str, tool: &str) -> StateAction {
    StateAction::ChatToolCallStart(ChatToolCallStartAction {
        turn_id: turn_id.to_owned(),
        tool_call_id: tool_call_id.to_owned(),
        meta: tool_kind(tool).map(|kind| {
            let mut meta = JsonObject::new();
            meta.insert("toolKind".into(), Value::String(kind.into()));
            meta
        }),
        tool_name: tool.to_owned(),
        display_name: display_name(tool),
        intention: None,
        contributor: None,
    })
}

/// `chat/toolCallDelta` with a fragment of the input JSON.
pub fn tool_call_delta(turn_id: &str, tool_call_id: &str, content: String) -> StateAction {
    StateAction::ChatToolCallDelta(ChatToolCallDeltaAction {
        turn_id: turn_id.to_owned(),
        tool_call_id: tool_call_id.to_owned(),
        meta: None,
        content: Some(content),
        invocation_message: None,
    })
}

/// What a `chat/toolCallReady` shows.
#[derive(Debug, Clone)]
pub struct Ready {
    /// The line describing the call.
    pub invocation: String,
    /// The input, as JSON text.
    pub input: String,
    /// `None`: the client must confirm; else why no confirmation is needed.
    pub confirmed: Option<ToolCallConfirmationReason>,
    /// The confirmation's title.
    pub title: Option<String>,
}

/// `chat/toolCallReady`.
pub fn tool_call_ready(turn_id: &str, tool_call_id: &str, ready: Ready) -> StateAction {
    StateAction::ChatToolCallReady(ChatToolCallReadyAction {
        turn_id: turn_id.to_owned(),
        tool_call_id: tool_call_id.to_owned(),
        meta: None,
        contributor: None,
        intention: None,
        invocation_message: StringOrMarkdown::Plain(ready.invocation),
        tool_input: Some(ToolInput::Inline(ready.input)),
        confirmation_title: ready.title.map(StringOrMarkdown::Plain),
        risk_assessment: None,
        edits: None,
        editable: None,
        confirmed: ready.confirmed,
        options: None,
    })
}

/// `chat/toolCallConfirmed`: approved by the user, or denied.
pub fn tool_call_confirmed(turn_id: &str, tool_call_id: &str, approved: bool) -> StateAction {
    StateAction::ChatToolCallConfirmed(ChatToolCallConfirmedAction {
        turn_id: turn_id.to_owned(),
        tool_call_id: tool_call_id.to_owned(),
        meta: None,
        approved,
        confirmed: approved.then_some(ToolCallConfirmationReason::UserAction),
        reason: (!approved).then_some(ToolCallCancellationReason::Denied),
        edited_tool_input: None,
        user_suggestion: None,
        reason_message: None,
        selected_option_id: None,
    })
}

/// `chat/toolCallComplete` with a text result.
pub fn tool_call_complete(
    turn_id: &str,
    tool_call_id: &str,
    tool: &str,
    success: bool,
    text: String,
) -> StateAction {
    let verb = if success { "Ran" } else { "Failed:" };
    StateAction::ChatToolCallComplete(ChatToolCallCompleteAction {
        turn_id: turn_id.to_owned(),
        tool_call_id: tool_call_id.to_owned(),
        meta: None,
        result: ToolCallResult {
            success,
            past_tense_message: StringOrMarkdown::Plain(format!("{verb} {}", display_name(tool))),
            content: Some(vec![ToolResultContent::Text(ToolResultTextContent {
                text,
            })]),
            structured_content: None,
            error: None,
        },
        requires_result_confirmation: None,
    })
}

/// `chat/usage`.
pub fn usage(turn_id: &str, usage: UsageInfo) -> StateAction {
    StateAction::ChatUsage(ChatUsageAction {
        turn_id: turn_id.to_owned(),
        usage,
        meta: None,
    })
}

/// `chat/turnComplete`.
pub fn turn_complete(turn_id: &str, duration_ms: i64) -> StateAction {
    StateAction::ChatTurnComplete(ChatTurnCompleteAction {
        turn_id: turn_id.to_owned(),
        duration: duration_ms,
        meta: None,
    })
}

/// `chat/turnCancelled`.
pub fn turn_cancelled(turn_id: &str, duration_ms: i64) -> StateAction {
    StateAction::ChatTurnCancelled(ChatTurnCancelledAction {
        turn_id: turn_id.to_owned(),
        duration: duration_ms,
        meta: None,
    })
}

/// `chat/error`: the turn ends with an error part.
pub fn turn_error(turn_id: &str, duration_ms: i64, kind: &str, message: &str) -> StateAction {
    StateAction::ChatError(ChatErrorAction {
        turn_id: turn_id.to_owned(),
        duration: duration_ms,
        part: ErrorResponsePart {
            error: ErrorInfo {
                error_type: kind.to_owned(),
                message: message.to_owned(),
                stack: None,
                meta: None,
            },
            resumable: None,
        },
        meta: None,
    })
}

/// `chat/inputRequested`.
pub fn input_requested(request: ChatInputRequest) -> StateAction {
    StateAction::ChatInputRequested(ChatInputRequestedAction { request })
}

/// `chat/inputCompleted`.
pub fn input_completed(
    request_id: &str,
    response: ChatInputResponseKind,
    answers: HashMap<String, ChatInputAnswer>,
) -> StateAction {
    StateAction::ChatInputCompleted(ChatInputCompletedAction {
        request_id: request_id.to_owned(),
        response,
        answers: (!answers.is_empty()).then_some(answers),
    })
}

/// `chat/pendingMessageSet`.
pub fn pending_set(kind: PendingMessageKind, id: &str, message: Message) -> StateAction {
    StateAction::ChatPendingMessageSet(ChatPendingMessageSetAction {
        kind,
        id: id.to_owned(),
        message,
    })
}

/// `chat/pendingMessageRemoved`.
pub fn pending_removed(kind: PendingMessageKind, id: &str) -> StateAction {
    StateAction::ChatPendingMessageRemoved(ChatPendingMessageRemovedAction {
        kind,
        id: id.to_owned(),
    })
}

/// `session/titleChanged`.
pub fn title_changed(title: &str) -> StateAction {
    StateAction::SessionTitleChanged(SessionTitleChangedAction {
        title: title.to_owned(),
    })
}

/// `session/chatUpdated` with a new status (and the time of the change).
pub fn chat_status(chat: &str, status: u32) -> StateAction {
    StateAction::SessionChatUpdated(SessionChatUpdatedAction {
        chat: chat.to_owned(),
        changes: PartialChatSummary {
            resource: None,
            title: None,
            status: Some(status),
            activity: None,
            modified_at: Some(now_rfc3339()),
            changes: None,
            origin: None,
            movable: None,
            interactivity: None,
            working_directories: None,
        },
    })
}

/// `session/configChanged` merging `values`.
pub fn config_changed(values: JsonObject) -> StateAction {
    StateAction::SessionConfigChanged(SessionConfigChangedAction {
        config: values,
        replace: None,
    })
}

/// `session/inputNeededSet` for a tool call waiting for confirmation.
pub fn tool_confirmation_needed(
    chat: &str,
    turn_id: &str,
    tool_call: ToolCallConfirmationState,
) -> StateAction {
    let id = match &tool_call {
        ToolCallConfirmationState::PendingConfirmation(s) => s.tool_call_id.clone(),
        ToolCallConfirmationState::PendingResultConfirmation(s) => s.tool_call_id.clone(),
        ToolCallConfirmationState::Unknown(_) => String::new(),
    };
    StateAction::SessionInputNeededSet(Box::new(SessionInputNeededSetAction {
        request: SessionInputRequest::ToolConfirmation(SessionToolConfirmationRequest {
            id,
            chat: chat.to_owned(),
            turn_id: turn_id.to_owned(),
            tool_call,
        }),
    }))
}

/// `session/inputNeededSet` for a question waiting for answers.
pub fn chat_input_needed(chat: &str, request: ChatInputRequest) -> StateAction {
    StateAction::SessionInputNeededSet(Box::new(SessionInputNeededSetAction {
        request: SessionInputRequest::ChatInput(SessionChatInputRequest {
            id: request.id.clone(),
            chat: chat.to_owned(),
            request,
        }),
    }))
}

/// `session/inputNeededRemoved`.
pub fn input_needed_removed(id: &str) -> StateAction {
    StateAction::SessionInputNeededRemoved(SessionInputNeededRemovedAction { id: id.to_owned() })
}

/// A tool's name as people see it (`mcp__server__tool` → `tool`).
pub fn display_name(tool: &str) -> String {
    match tool.strip_prefix("mcp__") {
        Some(rest) => rest.split("__").last().unwrap_or(rest).to_owned(),
        None => tool.to_owned(),
    }
}

/// The line describing a tool call: its name and main argument.
pub fn invocation(tool: &str, input: &serde_json::Value) -> String {
    let arg = ["file_path", "command", "pattern", "url", "description"]
        .iter()
        .find_map(|k| input.get(*k).and_then(serde_json::Value::as_str));
    match arg {
        Some(a) => format!(
            "{} {}",
            display_name(tool),
            a.chars().take(120).collect::<String>()
        ),
        None => display_name(tool),
    }
}

/// The AHP `type` of an action (`chat/delta`, …), for logs and routing.
pub fn kind(action: &StateAction) -> &'static str {
    match action {
        StateAction::ChatTurnStarted(_) => "chat/turnStarted",
        StateAction::ChatDelta(_) => "chat/delta",
        StateAction::ChatResponsePart(_) => "chat/responsePart",
        StateAction::ChatReasoning(_) => "chat/reasoning",
        StateAction::ChatToolCallStart(_) => "chat/toolCallStart",
        StateAction::ChatToolCallDelta(_) => "chat/toolCallDelta",
        StateAction::ChatToolCallReady(_) => "chat/toolCallReady",
        StateAction::ChatToolCallConfirmed(_) => "chat/toolCallConfirmed",
        StateAction::ChatToolCallComplete(_) => "chat/toolCallComplete",
        StateAction::ChatUsage(_) => "chat/usage",
        StateAction::ChatTurnComplete(_) => "chat/turnComplete",
        StateAction::ChatTurnCancelled(_) => "chat/turnCancelled",
        StateAction::ChatError(_) => "chat/error",
        StateAction::ChatInputRequested(_) => "chat/inputRequested",
        StateAction::ChatInputCompleted(_) => "chat/inputCompleted",
        StateAction::ChatInputAnswerChanged(_) => "chat/inputAnswerChanged",
        StateAction::ChatPendingMessageSet(_) => "chat/pendingMessageSet",
        StateAction::ChatPendingMessageRemoved(_) => "chat/pendingMessageRemoved",
        StateAction::ChatQueuedMessagesReordered(_) => "chat/queuedMessagesReordered",
        StateAction::ChatTruncated(_) => "chat/truncated",
        StateAction::ChatTurnsLoaded(_) => "chat/turnsLoaded",
        StateAction::ChatDraftChanged(_) => "chat/draftChanged",
        StateAction::ChatIsReadChanged(_) => "chat/isReadChanged",
        StateAction::ChatIsArchivedChanged(_) => "chat/isArchivedChanged",
        StateAction::SessionTitleChanged(_) => "session/titleChanged",
        StateAction::SessionChatUpdated(_) => "session/chatUpdated",
        StateAction::SessionConfigChanged(_) => "session/configChanged",
        StateAction::SessionInputNeededSet(_) => "session/inputNeededSet",
        StateAction::SessionInputNeededRemoved(_) => "session/inputNeededRemoved",
        StateAction::SessionIsReadChanged(_) => "session/isReadChanged",
        StateAction::SessionIsArchivedChanged(_) => "session/isArchivedChanged",
        StateAction::SessionActiveClientSet(_) => "session/activeClientSet",
        StateAction::SessionActiveClientRemoved(_) => "session/activeClientRemoved",
        StateAction::RootAgentsChanged(_) => "root/agentsChanged",
        StateAction::RootActiveSessionsChanged(_) => "root/activeSessionsChanged",
        StateAction::RootConfigChanged(_) => "root/configChanged",
        StateAction::Unknown(_) => "unknown",
        _ => "other",
    }
}
