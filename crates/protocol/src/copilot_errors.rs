//! Copilot's own error answers, restated in the form Claude Code acts on.
//!
//! Copilot answers some refusals with its own body (`{"error": {"message", "code"}}`) where
//! Anthropic's API would use an envelope Claude Code recognises. The two that matter:
//!
//! - a prompt over the model's limit (`model_max_prompt_tokens_exceeded`, "prompt token count
//!   of N exceeds the limit of M"): Claude Code compacts and retries only on Anthropic's
//!   `invalid_request_error` "prompt is too long: N tokens > M maximum";
//! - premium requests used up (402 `quota_exceeded`, "You have no quota"): said plainly,
//!   with the reset date, as Anthropic's `billing_error`, which Claude Code does not retry.

use crate::error::{ErrorEnvelope, ErrorKind};
use serde_json::Value;

/// What a Copilot error means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopilotRefusal {
    /// The prompt is over the model's limit.
    PromptTooLong {
        /// The prompt's tokens, when Copilot said.
        tokens: Option<u64>,
        /// The model's limit, when Copilot said.
        limit: Option<u64>,
    },
    /// Premium requests are used up.
    QuotaExhausted,
    /// The organisation has not enabled vision.
    VisionDisabled,
}

pub(crate) fn numbers(text: &str) -> Vec<u64> {
    text.split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect()
}

/// Reads a Copilot error body; `None` for anything else (passed through as it is).
pub fn classify(status: u16, body: &[u8]) -> Option<CopilotRefusal> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let err = v.get("error")?;
    let code = err.get("code").and_then(Value::as_str).unwrap_or_default();
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let lower = message.to_ascii_lowercase();
    if code == "model_max_prompt_tokens_exceeded" || lower.contains("prompt token count") {
        let n = numbers(message);
        return Some(CopilotRefusal::PromptTooLong {
            tokens: n.first().copied(),
            limit: n.get(1).copied(),
        });
    }
    if code == "quota_exceeded" || (status == 402 && lower.contains("quota")) {
        return Some(CopilotRefusal::QuotaExhausted);
    }
    if lower.contains("vision is not enabled") {
        return Some(CopilotRefusal::VisionDisabled);
    }
    None
}

impl CopilotRefusal {
    /// The status and envelope Claude Code gets. `quota_reset` is the date premium requests
    /// come back (from Copilot's account endpoint), when known.
    pub fn restate(&self, quota_reset: Option<&str>) -> (u16, ErrorEnvelope) {
        match self {
            CopilotRefusal::PromptTooLong { tokens, limit } => {
                let message = match (tokens, limit) {
                    (Some(n), Some(m)) => format!("prompt is too long: {n} tokens > {m} maximum"),
                    _ => "prompt is too long for this model's limit on GitHub Copilot".to_owned(),
                };
                (400, ErrorEnvelope::new(ErrorKind::InvalidRequest, message))
            }
            CopilotRefusal::QuotaExhausted => {
                let when = quota_reset
                    .map(|d| format!(" They come back on {d}."))
                    .unwrap_or_default();
                (
                    402,
                    ErrorEnvelope::new(
                        ErrorKind::Billing,
                        format!(
                            "Your GitHub Copilot premium requests are used up.{when} Models included in your plan still work (`claude-host models`; `claude-host status` shows your quota)."
                        ),
                    ),
                )
            }
            CopilotRefusal::VisionDisabled => (
                400,
                ErrorEnvelope::new(
                    ErrorKind::InvalidRequest,
                    "Images cannot be sent: your organization has not enabled vision for GitHub Copilot (an administrator can turn it on in the Copilot policies)",
                ),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn prompt_too_long_becomes_anthropics_words() {
        let body = br#"{"error":{"message":"prompt token count of 171234 exceeds the limit of 168000","code":"model_max_prompt_tokens_exceeded"}}"#;
        let r = classify(400, body).unwrap();
        let (status, env) = r.restate(None);
        assert_eq!(status, 400);
        assert_eq!(env.error.kind, "invalid_request_error");
        assert_eq!(
            env.error.message,
            "prompt is too long: 171234 tokens > 168000 maximum"
        );
    }

    #[test]
    fn quota_is_a_billing_error_with_the_reset_date() {
        let body = br#"{"error":{"message":"You have no quota","code":"quota_exceeded"}}"#;
        let (status, env) = classify(402, body).unwrap().restate(Some("2026-12-01"));
        assert_eq!(status, 402);
        assert_eq!(env.error.kind, "billing_error");
        assert!(
            env.error.message.contains("2026-12-01"),
            "{}",
            env.error.message
        );
        assert_eq!(classify(429, body), Some(CopilotRefusal::QuotaExhausted));
    }

    #[test]
    fn other_errors_pass() {
        assert_eq!(
            classify(
                400,
                br#"{"type":"error","error":{"type":"invalid_request_error","message":"x"}}"#
            ),
            None
        );
        assert_eq!(classify(500, b"oops"), None);
        assert_eq!(
            classify(
                400,
                br#"{"error":{"message":"vision is not enabled for this organization"}}"#
            ),
            Some(CopilotRefusal::VisionDisabled)
        );
    }
}
