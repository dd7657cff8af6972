//! Anthropic error envelopes: `{"type":"error","error":{"type","message"},"request_id"}`.

use serde::{Deserialize, Serialize};

/// The `error.type` values of the Anthropic Messages API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// 400: the request is malformed.
    InvalidRequest,
    /// 401: missing or wrong credentials.
    Authentication,
    /// 403: authenticated but not allowed.
    Permission,
    /// 404: unknown route or model.
    NotFound,
    /// 402: the account cannot pay for the request (Copilot: premium requests used up).
    Billing,
    /// 413: the request body is over the size cap.
    RequestTooLarge,
    /// 429: rate limited.
    RateLimit,
    /// 500 / 502: an internal or upstream failure.
    Api,
    /// 529: the upstream is overloaded.
    Overloaded,
}

impl ErrorKind {
    /// The wire name used in `error.type`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest => "invalid_request_error",
            ErrorKind::Authentication => "authentication_error",
            ErrorKind::Permission => "permission_error",
            ErrorKind::NotFound => "not_found_error",
            ErrorKind::Billing => "billing_error",
            ErrorKind::RequestTooLarge => "request_too_large",
            ErrorKind::RateLimit => "rate_limit_error",
            ErrorKind::Api => "api_error",
            ErrorKind::Overloaded => "overloaded_error",
        }
    }

    /// The HTTP status Anthropic pairs with this error type.
    pub fn default_status(self) -> u16 {
        match self {
            ErrorKind::InvalidRequest => 400,
            ErrorKind::Authentication => 401,
            ErrorKind::Permission => 403,
            ErrorKind::NotFound => 404,
            ErrorKind::Billing => 402,
            ErrorKind::RequestTooLarge => 413,
            ErrorKind::RateLimit => 429,
            ErrorKind::Api => 500,
            ErrorKind::Overloaded => 529,
        }
    }

    /// The error type that fits an HTTP status whose body does not say one.
    pub fn for_status(status: u16) -> ErrorKind {
        match status {
            400 => ErrorKind::InvalidRequest,
            401 => ErrorKind::Authentication,
            403 => ErrorKind::Permission,
            404 => ErrorKind::NotFound,
            413 => ErrorKind::RequestTooLarge,
            429 => ErrorKind::RateLimit,
            529 => ErrorKind::Overloaded,
            _ => ErrorKind::Api,
        }
    }
}

/// The HTTP status for an `error.type` string found in an upstream envelope (used when an
/// upstream reports an error as the first SSE event, before any status could be chosen).
pub fn status_for_error_type(error_type: &str) -> u16 {
    match error_type {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "overloaded_error" => 529,
        "timeout_error" => 504,
        _ => 502,
    }
}

/// The inner `error` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// `error.type`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Human-readable message.
    pub message: String,
}

/// A complete Anthropic error envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorEnvelope {
    /// Always `"error"`.
    #[serde(rename = "type")]
    pub envelope_type: String,
    /// The error itself.
    pub error: ErrorDetail,
    /// The request id, `null` for errors the proxy authors.
    #[serde(default)]
    pub request_id: Option<String>,
}

impl ErrorEnvelope {
    /// An envelope authored by claude-host.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self::with_type(kind.as_str(), message)
    }

    /// An envelope with an arbitrary `error.type`.
    pub fn with_type(kind: &str, message: impl Into<String>) -> Self {
        ErrorEnvelope {
            envelope_type: "error".to_owned(),
            error: ErrorDetail {
                kind: kind.to_owned(),
                message: message.into(),
            },
            request_id: None,
        }
    }

    /// Serialised JSON bytes.
    pub fn to_json(&self) -> Vec<u8> {
        // Serialising a struct of strings cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses a conforming envelope; `None` when `bytes` is not one.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        let env: ErrorEnvelope = serde_json::from_slice(bytes).ok()?;
        (env.envelope_type == "error").then_some(env)
    }

    /// Normalises an arbitrary upstream error body: a conforming envelope is kept as it is,
    /// anything else becomes an `api_error` (or the type that fits `status`) carrying the body
    /// text, so a client never has to parse nested JSON strings.
    pub fn from_upstream_body(status: u16, body: &[u8]) -> Self {
        if let Some(env) = Self::parse(body) {
            return env;
        }
        let kind = ErrorKind::for_status(status);
        let text = String::from_utf8_lossy(body);
        let text = text.trim();
        // GitHub-style `{"message": "..."}` and OpenAI-style `{"error": {"message": ...}}` bodies.
        let message = serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .and_then(|v| {
                v.pointer("/error/message")
                    .or_else(|| v.get("message"))
                    .and_then(|m| m.as_str())
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| {
                if text.is_empty() {
                    format!("upstream returned HTTP {status}")
                } else {
                    truncate(text, 2000).to_owned()
                }
            });
        Self::new(kind, message)
    }
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_shape_is_exact() {
        let env = ErrorEnvelope::new(ErrorKind::Authentication, "Invalid authentication");
        assert_eq!(
            String::from_utf8(env.to_json()).unwrap(),
            r#"{"type":"error","error":{"type":"authentication_error","message":"Invalid authentication"},"request_id":null}"#
        );
    }

    #[test]
    fn upstream_envelopes_pass_verbatim_and_others_are_wrapped() {
        let body = br#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"},"request_id":"req_1"}"#;
        let env = ErrorEnvelope::from_upstream_body(429, body);
        assert_eq!(env.request_id.as_deref(), Some("req_1"));
        assert_eq!(env.error.kind, "rate_limit_error");

        let env = ErrorEnvelope::from_upstream_body(403, br#"{"message":"no access"}"#);
        assert_eq!(env.error.kind, "permission_error");
        assert_eq!(env.error.message, "no access");

        let env = ErrorEnvelope::from_upstream_body(503, b"");
        assert_eq!(env.error.kind, "api_error");
        assert_eq!(env.error.message, "upstream returned HTTP 503");
    }

    #[test]
    fn status_for_types() {
        assert_eq!(status_for_error_type("overloaded_error"), 529);
        assert_eq!(status_for_error_type("something_new"), 502);
    }
}
