//! What kind of request Claude Code is making, read from the body alone.
//!
//! Copilot bills a premium request for every call sent with `X-Initiator: user`. Claude Code
//! sends many calls that no human typed — tool-result continuations, subagents, session titles,
//! the auto-mode safety classifier, compaction, background-task events, model checks — and
//! several of them end with a user message that looks like a prompt. This module names each
//! kind by the marks the CLI (2.1.330) puts on it; docs/PROXY.md has the table and how each was
//! observed. Only [`RequestKind::Prompt`] can be a human's request.

use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// The text the `claude-host claude` prompt hook adds (as a `role:"system"` message right after
/// the prompt); the proxy strips every copy before forwarding.
pub const PROMPT_MARKER: &str = "__claude_host_user_prompt__";

/// The whole text of the throwaway prompt the host sends a freshly started CLI to run its
/// first turn ahead of a real one (the turn is then cut with `rewind_conversation`). The proxy
/// answers a request whose last message is this prompt itself, so it never reaches a model.
pub const WARM_UP_PROMPT: &str = "<claude-host-warm-up/>";

/// What a Messages request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestKind {
    /// The main conversation with a human-written message last: a prompt (or a steering
    /// message, or feedback typed with a denial).
    Prompt,
    /// The main conversation continuing after tool results.
    ToolResult,
    /// A subagent's request (header `x-claude-code-agent-id`, or `cc_is_subagent=true` in the
    /// billing line of the system prompt).
    Subagent,
    /// Session-title generation ("You are naming a coding session…"), interactive mode.
    Title,
    /// Auto mode's safety classifier ("You are a security monitor for autonomous AI coding
    /// agents"), both stages.
    SafetyClassifier,
    /// Compaction: the conversation with the summary instruction as the last user message.
    Compaction,
    /// A turn the CLI starts itself when a background task ends (`[SYSTEM NOTIFICATION - NOT
    /// USER INPUT]` … `<task-notification>`).
    TaskNotification,
    /// The validation call the CLI makes before `set_model` answers: `max_tokens: 1`, no tools.
    ModelCheck,
    /// The host's own warm-up turn ([`WARM_UP_PROMPT`] as the last message's last text):
    /// answered by the proxy itself.
    WarmUp,
    /// Anything else that ends without a human message (an assistant prefill, reminders only).
    Other,
}

impl RequestKind {
    /// A short name for logs and usage records.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestKind::Prompt => "prompt",
            RequestKind::ToolResult => "tool_result",
            RequestKind::Subagent => "subagent",
            RequestKind::Title => "title",
            RequestKind::SafetyClassifier => "safety_classifier",
            RequestKind::Compaction => "compaction",
            RequestKind::TaskNotification => "task_notification",
            RequestKind::ModelCheck => "model_check",
            RequestKind::WarmUp => "warm_up",
            RequestKind::Other => "other",
        }
    }
}

impl std::fmt::Display for RequestKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

const SUBAGENT_BILLING: &[u8] = b"cc_is_subagent=true";
const TITLE_SYSTEM: &[u8] = b"You are naming a coding session";
const CLASSIFIER_SYSTEM: &[u8] = b"You are a security monitor for autonomous AI coding agents";
const COMPACTION_TEXT: &str = "create a detailed summary of the conversation so far";
const NOTIFICATION_TEXT: &str = "[SYSTEM NOTIFICATION - NOT USER INPUT]";
const TASK_NOTIFICATION_TAG: &str = "<task-notification>";

/// What the body says about its origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classified {
    /// The kind.
    pub kind: RequestKind,
    /// The prompt hook's marker is in the `role:"system"` messages that follow the last
    /// user message: this request carries a prompt the hook saw.
    pub fresh_marker: bool,
    /// The marker appears anywhere in the body (it must be stripped).
    pub has_marker: bool,
}

/// A message's role and raw content, read without copying.
#[derive(Deserialize)]
pub(crate) struct MessagePeek<'a> {
    #[serde(borrow, default)]
    pub(crate) role: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) content: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct BlockPeek<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
}

/// What the last non-system message holds.
#[derive(Default)]
struct LastUser {
    human_text: bool,
    tool_result: bool,
    compaction: bool,
    notification: bool,
    /// The last text is the warm-up prompt.
    warm_up: bool,
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(haystack, needle).is_some()
}

/// Text the CLI itself writes into user messages, which no human typed.
fn is_cli_text(text: &str) -> bool {
    let t = text.trim_start();
    t.is_empty()
        || t.starts_with("<system-reminder>")
        || t.starts_with("[Request interrupted by user")
        || t == "(no content)"
        || t.starts_with("<local-command-")
        || t.starts_with("<command-name>")
}

fn read_text(text: &str, last: &mut LastUser) {
    if text.contains(COMPACTION_TEXT) {
        last.compaction = true;
    }
    if text.contains(NOTIFICATION_TEXT) || text.contains(TASK_NOTIFICATION_TAG) {
        last.notification = true;
    }
    if !is_cli_text(text) {
        last.human_text = true;
    }
    // Only as the last text: a warm-up prompt quoted anywhere else is ordinary content.
    last.warm_up = text.trim() == WARM_UP_PROMPT;
}

fn read_user(content: Option<&RawValue>) -> LastUser {
    let mut last = LastUser::default();
    let Some(content) = content else {
        return last;
    };
    let raw = content.get().trim_start();
    if raw.starts_with('"') {
        if let Ok(text) = serde_json::from_str::<Cow<'_, str>>(raw) {
            read_text(&text, &mut last);
        }
    } else if raw.starts_with('[') {
        let blocks: Vec<BlockPeek> = serde_json::from_str(raw).unwrap_or_default();
        for b in &blocks {
            last.warm_up = false;
            match b.kind.as_deref() {
                Some("tool_result") => last.tool_result = true,
                Some("text") => read_text(b.text.as_deref().unwrap_or_default(), &mut last),
                // A pasted image or document is the human's.
                Some("image" | "document") => last.human_text = true,
                _ => {}
            }
        }
    }
    last
}

/// Classifies a request from its raw top-level fields. `messages` is the parsed list;
/// `system`, `tools` and `max_tokens` are the raw values when present.
pub fn classify(
    body: &[u8],
    messages: &[&RawValue],
    system: Option<&RawValue>,
    tools: Option<&RawValue>,
    max_tokens: Option<&RawValue>,
) -> Classified {
    let has_marker = contains(body, PROMPT_MARKER.as_bytes());
    let mut fresh_marker = false;
    let mut last = None;
    for m in messages.iter().rev() {
        let Ok(peek) = serde_json::from_str::<MessagePeek>(m.get()) else {
            break;
        };
        match peek.role.as_deref() {
            Some("system") => {
                if has_marker && contains(m.get().as_bytes(), PROMPT_MARKER.as_bytes()) {
                    fresh_marker = true;
                }
            }
            Some("user") => {
                last = Some(read_user(peek.content));
                break;
            }
            _ => break,
        }
    }
    let system = system.map(|s| s.get().as_bytes()).unwrap_or_default();
    let no_tools = tools.is_none_or(|t| {
        let t = t.get().trim();
        t == "[]" || t == "null"
    });
    let kind = if contains(system, SUBAGENT_BILLING) {
        RequestKind::Subagent
    } else if contains(system, TITLE_SYSTEM) {
        RequestKind::Title
    } else if contains(system, CLASSIFIER_SYSTEM) {
        RequestKind::SafetyClassifier
    } else {
        match last {
            None => RequestKind::Other,
            Some(l) if l.warm_up => RequestKind::WarmUp,
            Some(l) if l.compaction => RequestKind::Compaction,
            Some(l) if l.notification => RequestKind::TaskNotification,
            Some(_) if no_tools && max_tokens.is_some_and(|m| m.get().trim() == "1") => {
                RequestKind::ModelCheck
            }
            Some(l) if l.human_text => RequestKind::Prompt,
            Some(l) if l.tool_result => RequestKind::ToolResult,
            Some(_) => RequestKind::Other,
        }
    };
    Classified {
        kind,
        fresh_marker: fresh_marker && kind == RequestKind::Prompt,
        has_marker,
    }
}

/// `body` with every copy of [`PROMPT_MARKER`] removed. The marker is plain ASCII with no
/// character JSON escapes, so cutting it out of a string value leaves valid JSON.
pub fn strip_marker(body: &[u8]) -> Vec<u8> {
    let marker = PROMPT_MARKER.as_bytes();
    let mut out = Vec::with_capacity(body.len());
    let mut rest = body;
    while let Some(i) = memchr::memmem::find(rest, marker) {
        out.extend_from_slice(&rest[..i]);
        rest = &rest[i + marker.len()..];
    }
    out.extend_from_slice(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::{Value, json};

    fn classify_value(body: &Value) -> Classified {
        let bytes = serde_json::to_vec(body).unwrap();
        let fields: serde_json::Map<String, Value> = serde_json::from_slice(&bytes).unwrap();
        let raw = |k: &str| {
            fields
                .get(k)
                .map(|v| RawValue::from_string(v.to_string()).unwrap())
        };
        let msgs: Vec<Box<RawValue>> = fields["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| RawValue::from_string(m.to_string()).unwrap())
            .collect();
        let refs: Vec<&RawValue> = msgs.iter().map(|m| &**m).collect();
        classify(
            &bytes,
            &refs,
            raw("system").as_deref(),
            raw("tools").as_deref(),
            raw("max_tokens").as_deref(),
        )
    }

    fn kind(body: Value) -> RequestKind {
        classify_value(&body).kind
    }

    fn main_system() -> Value {
        json!([{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.330.a9c; cc_entrypoint=cli;"},
               {"type":"text","text":"You are Claude Code, Anthropic's official CLI for Claude."},
               {"type":"text","text":"You are an agent working with the user toward their goals"}])
    }

    fn reminder() -> Value {
        json!({"type":"text","text":"<system-reminder>\nAttribution for git commits\n</system-reminder>\n"})
    }

    #[test]
    fn a_prompt_and_its_continuation() {
        let tools = json!([{"name":"Bash"}]);
        let first = json!({"model":"m","system":main_system(),"tools":tools,"messages":[
            {"role":"user","content":[reminder(),{"type":"text","text":"fix the test"}]},
            {"role":"system","content":[{"type":"text","text":"# Environment"}]}]});
        assert_eq!(kind(first), RequestKind::Prompt);
        let later = json!({"model":"m","system":main_system(),"tools":tools,"messages":[
            {"role":"user","content":"fix the test"},
            {"role":"assistant","content":[{"type":"tool_use","id":"t","name":"Bash","input":{}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok"},reminder()]}]});
        assert_eq!(kind(later), RequestKind::ToolResult);
        // Steering folded into a continuation is a human's message.
        let steered = json!({"model":"m","tools":tools,"messages":[
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok"},{"type":"text","text":"also update the docs"}]}]});
        assert_eq!(kind(steered), RequestKind::Prompt);
        let image = json!({"model":"m","tools":tools,"messages":[
            {"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"x"}}]}]});
        assert_eq!(kind(image), RequestKind::Prompt);
    }

    #[test]
    fn the_warm_up_prompt_is_its_own_kind_only_as_the_last_text() {
        let tools = json!([{"name":"Bash"}]);
        let warm = json!({"model":"m","system":main_system(),"tools":tools,"messages":[
            {"role":"user","content":[reminder(),{"type":"text","text":WARM_UP_PROMPT}]},
            {"role":"system","content":[{"type":"text","text":"# Environment"}]}]});
        assert_eq!(kind(warm), RequestKind::WarmUp);
        let as_string = json!({"model":"m","messages":[{"role":"user","content":WARM_UP_PROMPT}]});
        assert_eq!(kind(as_string), RequestKind::WarmUp);
        // Quoted inside a prompt, or followed by anything, it is a human's prompt.
        let quoted = json!({"model":"m","messages":[{"role":"user","content":[
            {"type":"text","text":format!("what does {WARM_UP_PROMPT} do?")}]}]});
        assert_eq!(kind(quoted), RequestKind::Prompt);
        let then_image = json!({"model":"m","messages":[{"role":"user","content":[
            {"type":"text","text":WARM_UP_PROMPT},
            {"type":"image","source":{"type":"base64","media_type":"image/png","data":"x"}}]}]});
        assert_eq!(kind(then_image), RequestKind::Prompt);
        // An earlier warm-up in the history does not make a later prompt one.
        let later = json!({"model":"m","messages":[
            {"role":"user","content":WARM_UP_PROMPT},
            {"role":"assistant","content":"ok"},
            {"role":"user","content":"fix the test"}]});
        assert_eq!(kind(later), RequestKind::Prompt);
    }

    #[test]
    fn side_requests_are_named() {
        let sub = json!({"model":"m","tools":[{"name":"Bash"}],"system":[
            {"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.330.efd; cc_entrypoint=sdk-cli; cc_is_subagent=true;"}],
            "messages":[{"role":"user","content":[reminder(),{"type":"text","text":"list files"}]}]});
        assert_eq!(kind(sub), RequestKind::Subagent);
        let title = json!({"model":"m","system":[{"type":"text","text":"You are Claude Code, Anthropic's official CLI for Claude."},
            {"type":"text","text":"You are naming a coding session so the user can pick it out"}],
            "messages":[{"role":"user","content":[{"type":"text","text":"<session> fix it </session>"}]}]});
        assert_eq!(kind(title), RequestKind::Title);
        let classifier = json!({"model":"m","max_tokens":64,"system":[{"type":"text","text":"You are a security monitor for autonomous AI coding agents.\n"}],
            "messages":[{"role":"user","content":[{"type":"text","text":"<transcript>\n"}]}]});
        assert_eq!(kind(classifier), RequestKind::SafetyClassifier);
        let compaction = json!({"model":"m","tools":[{"name":"Bash"}],"system":main_system(),"messages":[
            {"role":"user","content":"hi"},{"role":"assistant","content":"ok"},
            {"role":"user","content":"CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\nYour task is to create a detailed summary of the conversation so far, paying close attention"}]});
        assert_eq!(kind(compaction), RequestKind::Compaction);
        let note = json!({"model":"m","tools":[{"name":"Bash"}],"messages":[
            {"role":"user","content":[{"type":"text","text":"<system-reminder>\n[SYSTEM NOTIFICATION - NOT USER INPUT]\nThis is an automated background-task event\n<task-notification>\n</task-notification>\n</system-reminder>"}]}]});
        assert_eq!(kind(note), RequestKind::TaskNotification);
        let check = json!({"model":"m","max_tokens":1,"system":[{"type":"text","text":"You are Claude Code, Anthropic's official CLI for Claude."}],
            "messages":[{"role":"user","content":[{"type":"text","text":"Hi"}]}]});
        assert_eq!(kind(check), RequestKind::ModelCheck);
        let prefill = json!({"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]});
        assert_eq!(kind(prefill), RequestKind::Other);
        let reminders_only = json!({"model":"m","messages":[{"role":"user","content":[reminder(),{"type":"text","text":"(no content)"}]}]});
        assert_eq!(kind(reminders_only), RequestKind::Other);
        assert_eq!(kind(json!({"model":"m","messages":[]})), RequestKind::Other);
    }

    #[test]
    fn the_marker_counts_only_right_after_the_prompt() {
        let hook = json!({"role":"system","content":[{"type":"text","text":format!("UserPromptSubmit hook success: {PROMPT_MARKER}")}]});
        let fresh = json!({"model":"m","tools":[{"name":"Bash"}],"messages":[
            {"role":"user","content":"first"},{"role":"assistant","content":"ok"},
            {"role":"user","content":"second"}, hook]});
        let c = classify_value(&fresh);
        assert_eq!(
            (c.kind, c.fresh_marker, c.has_marker),
            (RequestKind::Prompt, true, true)
        );
        let continuation = json!({"model":"m","tools":[{"name":"Bash"}],"messages":[
            {"role":"user","content":"second"}, hook,
            {"role":"assistant","content":[{"type":"tool_use","id":"t","name":"Bash","input":{}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok"}]}]});
        let c = classify_value(&continuation);
        assert_eq!(
            (c.kind, c.fresh_marker, c.has_marker),
            (RequestKind::ToolResult, false, true)
        );
    }

    #[test]
    fn stripping_the_marker_keeps_valid_json() {
        let body = serde_json::to_vec(&json!({"messages":[{"role":"system","content":format!("UserPromptSubmit hook success: {PROMPT_MARKER}")},
            {"role":"system","content":[{"type":"text","text":format!("env\n{PROMPT_MARKER}\n{PROMPT_MARKER}")}]}]})).unwrap();
        let out = strip_marker(&body);
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v["messages"][0]["content"],
            "UserPromptSubmit hook success: "
        );
        assert_eq!(v["messages"][1]["content"][0]["text"], "env\n\n");
        assert_eq!(strip_marker(b"{\"a\":1}"), b"{\"a\":1}");
    }
}
