//! The parts of a `POST /v1/messages` body the proxy needs, read without disturbing the rest.
//!
//! The body is kept as a map of top-level keys to raw JSON, in the client's order, so that a
//! forwarded request is byte-identical to what the client sent except for the `model` value.

use crate::request_kind::{Classified, classify};
use indexmap::IndexMap;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::fmt;

/// Why a request body was refused (each maps to a 400 with this message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// The body is not JSON.
    NotJson(String),
    /// The body is JSON but not an object.
    NotObject,
    /// `model` is missing, empty or not a string.
    MissingModel,
    /// `messages` is missing or not an array.
    MessagesNotArray,
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::NotJson(e) => write!(f, "Request body is not valid JSON: {e}"),
            RequestError::NotObject => f.write_str("Request body must be a JSON object"),
            RequestError::MissingModel => {
                f.write_str("Missing required field: model (a non-empty string)")
            }
            RequestError::MessagesNotArray => {
                f.write_str("Missing required field: messages (an array)")
            }
        }
    }
}

impl std::error::Error for RequestError {}

/// Who started a request, for Copilot's `X-Initiator` header (premium-request accounting).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Initiator {
    /// The last message is a human prompt.
    User,
    /// A tool-result continuation or other agent-driven request.
    Agent,
}

impl Initiator {
    /// The header value.
    pub fn as_str(self) -> &'static str {
        match self {
            Initiator::User => "user",
            Initiator::Agent => "agent",
        }
    }
}

/// A validated Messages request.
#[derive(Debug)]
pub struct MessagesRequest {
    fields: IndexMap<String, Box<RawValue>>,
    /// The model id as the client sent it.
    pub model: String,
    /// `stream: true`.
    pub stream: bool,
    /// What the request is for, and whether it carries the prompt hook's marker.
    pub classified: Classified,
    /// Number of entries in `messages`.
    pub message_count: usize,
    /// Whether any message carries an image (Copilot wants `copilot-vision-request` then).
    pub has_images: bool,
}

#[derive(Deserialize)]
struct MessagePeek<'a> {
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

impl MessagesRequest {
    /// Validates `body` and reads `model`, `stream` and the initiator.
    pub fn parse(body: &[u8]) -> Result<Self, RequestError> {
        let raw: &RawValue =
            serde_json::from_slice(body).map_err(|e| RequestError::NotJson(e.to_string()))?;
        if !raw.get().starts_with('{') {
            return Err(RequestError::NotObject);
        }
        let fields: IndexMap<String, Box<RawValue>> =
            serde_json::from_str(raw.get()).map_err(|_| RequestError::NotObject)?;
        let model = fields
            .get("model")
            .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
            .filter(|m| !m.trim().is_empty())
            .ok_or(RequestError::MissingModel)?;
        let messages: Vec<&RawValue> = fields
            .get("messages")
            .and_then(|v| serde_json::from_str(v.get()).ok())
            .ok_or(RequestError::MessagesNotArray)?;
        let stream = fields
            .get("stream")
            .is_some_and(|v| v.get().trim() == "true");
        let classified = classify(
            body,
            &messages,
            fields.get("system").map(|v| &**v),
            fields.get("tools").map(|v| &**v),
            fields.get("max_tokens").map(|v| &**v),
        );
        let message_count = messages.len();
        // Most requests have no image anywhere: one byte search settles those.
        let has_images = memchr::memmem::find(body, b"\"image\"").is_some()
            && messages.iter().any(|m| {
                serde_json::from_str::<MessagePeek>(m.get())
                    .ok()
                    .and_then(|p| p.content)
                    .is_some_and(has_image)
            });
        Ok(MessagesRequest {
            fields,
            model,
            stream,
            classified,
            message_count,
            has_images,
        })
    }

    /// The body with `model` replaced, every other key and value byte-for-byte as received.
    pub fn body_with_model(&self, model: &str) -> Vec<u8> {
        self.body_with(model, &[])
    }

    /// The body with `model` replaced and the top-level `fields` set to new raw JSON (or
    /// removed, for `None`); every other key and value byte-for-byte as received, in order.
    pub fn body_with(&self, model: &str, fields: &[(String, Option<String>)]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.fields.values().map(|v| v.get().len() + 16).sum());
        out.push(b'{');
        let mut first = true;
        let mut put = |out: &mut Vec<u8>, k: &str, v: &[u8]| {
            if !first {
                out.push(b',');
            }
            first = false;
            // Writing a string into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut *out, k);
            out.push(b':');
            out.extend_from_slice(v);
        };
        for (k, v) in &self.fields {
            if k == "model" {
                put(&mut out, k, &serde_json::to_vec(model).unwrap_or_default());
                continue;
            }
            match fields.iter().find(|(name, _)| name == k) {
                Some((_, Some(new))) => put(&mut out, k, new.as_bytes()),
                Some((_, None)) => {}
                None => put(&mut out, k, v.get().as_bytes()),
            }
        }
        out.push(b'}');
        out
    }

    /// A top-level field as raw JSON.
    pub fn field(&self, name: &str) -> Option<&RawValue> {
        self.fields.get(name).map(|v| &**v)
    }

    /// Every top-level field, in the client's order.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &RawValue)> {
        self.fields.iter().map(|(k, v)| (k.as_str(), &**v))
    }
}

#[derive(Deserialize)]
struct ContentPeek<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

/// Whether message (or tool-result) content has an image block.
fn has_image(content: &RawValue) -> bool {
    if !content.get().trim_start().starts_with('[') {
        return false;
    }
    let blocks: Vec<ContentPeek> = serde_json::from_str(content.get()).unwrap_or_default();
    blocks.iter().any(|b| match b.kind.as_deref() {
        Some("image") => true,
        Some("tool_result") => b.content.is_some_and(has_image),
        _ => false,
    })
}

/// The text of the last `role:"user"` message (text blocks, tool-result text, or string
/// content joined with newlines), skipping `role:"system"` messages. Used to pick scripted or
/// replayed replies.
pub fn last_user_text(body: &serde_json::Value) -> String {
    let Some(messages) = body.get("messages").and_then(|m| m.as_array()) else {
        return String::new();
    };
    let Some(last) = messages
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(|r| r.as_str()) == Some("user"))
    else {
        return String::new();
    };
    let mut parts = Vec::new();
    collect_text(last.get("content"), &mut parts);
    parts.join("\n")
}

fn collect_text(content: Option<&serde_json::Value>, out: &mut Vec<String>) {
    match content {
        Some(serde_json::Value::String(s)) => out.push(s.clone()),
        Some(serde_json::Value::Array(blocks)) => {
            for b in blocks {
                match b.get("type").and_then(|t| t.as_str()) {
                    Some("text") => {
                        if let Some(t) = b.get("text").and_then(|t| t.as_str()) {
                            out.push(t.to_owned());
                        }
                    }
                    Some("tool_result") => collect_text(b.get("content"), out),
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn validation_messages() {
        let err = |b: &[u8]| MessagesRequest::parse(b).unwrap_err();
        assert!(matches!(err(b"{nope"), RequestError::NotJson(_)));
        assert_eq!(err(b"[1,2]"), RequestError::NotObject);
        assert_eq!(err(b"\"s\""), RequestError::NotObject);
        assert_eq!(err(br#"{"messages":[]}"#), RequestError::MissingModel);
        assert_eq!(
            err(br#"{"model":"","messages":[]}"#),
            RequestError::MissingModel
        );
        assert_eq!(
            err(br#"{"model":7,"messages":[]}"#),
            RequestError::MissingModel
        );
        assert_eq!(err(br#"{"model":"m"}"#), RequestError::MessagesNotArray);
        assert_eq!(
            err(br#"{"model":"m","messages":{}}"#),
            RequestError::MessagesNotArray
        );
    }

    #[test]
    fn images_are_found_in_messages_and_tool_results_and_nowhere_else() {
        let images = |msgs: &str| {
            MessagesRequest::parse(format!(r#"{{"model":"m","messages":{msgs}}}"#).as_bytes())
                .unwrap()
                .has_images
        };
        let png = r#"{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBOR"}}"#;
        assert!(images(&format!(r#"[{{"role":"user","content":[{png}]}}]"#)));
        assert!(images(&format!(
            r#"[{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t","content":[{png}]}}]}}]"#
        )));
        // The word in text, or no image at all.
        assert!(!images(
            r#"[{"role":"user","content":"what is an \"image\"?"}]"#
        ));
        assert!(!images(
            r#"[{"role":"user","content":[{"type":"text","text":"\"image\""}]}]"#
        ));
        assert!(!images(r#"[{"role":"user","content":"hi"}]"#));
    }

    #[test]
    fn model_rewrite_keeps_everything_else() {
        let body = br#"{"z":1, "model":"claude-opus-5-5","messages":[{"role":"system","content":"x","output_config":{"effort":"low"}}],"metadata":{"user_id":"{\"a\":1}"},"unknown":[1.50,2e3],"stream":true}"#;
        let req = MessagesRequest::parse(body).unwrap();
        assert!(req.stream);
        let out = String::from_utf8(req.body_with_model("claude-opus-5.5")).unwrap();
        assert_eq!(
            out,
            r#"{"z":1,"model":"claude-opus-5.5","messages":[{"role":"system","content":"x","output_config":{"effort":"low"}}],"metadata":{"user_id":"{\"a\":1}"},"unknown":[1.50,2e3],"stream":true}"#
        );
    }

    #[test]
    fn fields_are_replaced_and_removed_in_place() {
        let body = br#"{"model":"a","max_tokens":128000,"thinking":{"type":"enabled"},"messages":[],"x":[1.50]}"#;
        let req = MessagesRequest::parse(body).unwrap();
        let out = req.body_with(
            "b",
            &[
                ("max_tokens".into(), Some("64000".into())),
                ("thinking".into(), None),
            ],
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"model":"b","max_tokens":64000,"messages":[],"x":[1.50]}"#
        );
    }

    #[test]
    fn the_kind_is_read_with_the_body() {
        let kind = |msgs: &str| {
            MessagesRequest::parse(format!(r#"{{"model":"m","messages":{msgs}}}"#).as_bytes())
                .unwrap()
                .classified
                .kind
        };
        use crate::request_kind::RequestKind;
        assert_eq!(
            kind(r#"[{"role":"user","content":"hi"}]"#),
            RequestKind::Prompt
        );
        assert_eq!(
            kind(
                r#"[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok"}]}]"#
            ),
            RequestKind::ToolResult
        );
    }

    #[test]
    fn last_user_text_skips_system_messages() {
        let v: serde_json::Value = serde_json::from_str(
            r#"{"messages":[{"role":"user","content":[{"type":"text","text":"<r>"},{"type":"text","text":"write it"}]},{"role":"system","content":"env"}]}"#,
        )
        .unwrap();
        assert_eq!(last_user_text(&v), "<r>\nwrite it");
    }
}
