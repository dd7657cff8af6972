//! OpenAI error reports → Anthropic error envelopes Claude Code acts on.

use crate::copilot_errors::{CopilotRefusal, numbers};
use crate::error::{ErrorEnvelope, ErrorKind};
use serde::Deserialize;
use std::borrow::Cow;

/// The `error` object of an OpenAI error (Chat Completions chunks and bodies, Responses
/// `error` events and failed responses).
#[derive(Debug, Deserialize, Default)]
pub(crate) struct OpenAiError<'a> {
    #[serde(borrow, default)]
    pub code: Option<Cow<'a, str>>,
    #[serde(rename = "type", borrow, default)]
    pub kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub message: Option<Cow<'a, str>>,
}

impl OpenAiError<'_> {
    /// The Anthropic envelope for this error.
    pub fn envelope(&self) -> ErrorEnvelope {
        envelope(
            self.code.as_deref().or(self.kind.as_deref()),
            self.message.as_deref().unwrap_or_default(),
        )
    }
}

/// The Anthropic envelope for an OpenAI error `code` (or `type`) and `message`.
pub(crate) fn envelope(code: Option<&str>, message: &str) -> ErrorEnvelope {
    let code = code.filter(|c| !c.is_empty());
    let message = match (message.is_empty(), code) {
        (false, _) => message,
        (true, Some(code)) => code,
        (true, None) => "the upstream reported an error without a message",
    };
    match code.unwrap_or_default() {
        "rate_limit_exceeded" | "rate_limit_error" => {
            ErrorEnvelope::new(ErrorKind::RateLimit, message)
        }
        "context_length_exceeded" | "model_max_prompt_tokens_exceeded" => {
            // Two numbers: the prompt's size and the limit, in either order (OpenAI names the
            // limit first, Copilot the prompt); the prompt is the larger.
            let n = numbers(message);
            let (tokens, limit) = match (n.first(), n.get(1)) {
                (Some(&a), Some(&b)) => (Some(a.max(b)), Some(a.min(b))),
                _ => (None, None),
            };
            CopilotRefusal::PromptTooLong { tokens, limit }
                .restate(None)
                .1
        }
        "insufficient_quota" | "quota_exceeded" => CopilotRefusal::QuotaExhausted.restate(None).1,
        "overloaded" | "server_is_overloaded" | "overloaded_error" => {
            ErrorEnvelope::new(ErrorKind::Overloaded, message)
        }
        "invalid_request_error" | "invalid_prompt" => {
            ErrorEnvelope::new(ErrorKind::InvalidRequest, message)
        }
        _ => ErrorEnvelope::new(ErrorKind::Api, message),
    }
}

/// The envelope for upstream data that could not be translated.
pub(crate) fn untranslatable(what: &str) -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorKind::Api,
        format!("the upstream sent {what} claude-host cannot translate"),
    )
}

/// The envelope for a stream that ended before it was complete.
pub(crate) fn cut_short() -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorKind::Api,
        "the upstream's stream ended before the reply was complete",
    )
}
