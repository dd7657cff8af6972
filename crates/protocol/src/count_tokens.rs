//! A local estimate for `POST /v1/messages/count_tokens`.
//!
//! Copilot has no token-counting endpoint, and Claude's tokenizer is not public. Claude Code
//! only uses the count to decide when to compact and to draw its context view, where an
//! over-estimate is harmless and an under-estimate makes it compact too late. The estimate is:
//!
//! * every string in `system`, `messages` and `tools` (keys and values, JSON-escaped length)
//!   at 3.5 bytes per token, rounded up — English prose runs at about 4 bytes per token and
//!   code and JSON nearer 3, so 3.5 leans high;
//! * base64 image and document payloads are not counted by length: each image adds 1,600
//!   tokens (Anthropic's figure for a ~1.15 megapixel image) and each document 3,000;
//! * 4 tokens of framing per message and 8 per tool.

use serde_json::Value;

/// Bytes per token assumed for text.
pub const BYTES_PER_TOKEN: f64 = 3.5;
/// Tokens charged per image block.
pub const TOKENS_PER_IMAGE: u64 = 1_600;
/// Tokens charged per document block.
pub const TOKENS_PER_DOCUMENT: u64 = 3_000;

/// Estimates the input tokens of a Messages request body.
pub fn estimate_input_tokens(body: &Value) -> u64 {
    let mut acc = Acc::default();
    for key in ["system", "messages", "tools"] {
        if let Some(v) = body.get(key) {
            acc.walk(v);
        }
    }
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .map_or(0, Vec::len) as u64;
    let tools = body
        .get("tools")
        .and_then(Value::as_array)
        .map_or(0, Vec::len) as u64;
    // Bytes stay far below 2^52, where the f64 conversion would lose precision.
    let text_tokens = (acc.bytes as f64 / BYTES_PER_TOKEN).ceil() as u64;
    text_tokens + acc.fixed + messages * 4 + tools * 8
}

#[derive(Default)]
struct Acc {
    bytes: u64,
    fixed: u64,
}

impl Acc {
    fn walk(&mut self, v: &Value) {
        match v {
            Value::String(s) => self.bytes += s.len() as u64,
            Value::Array(items) => items.iter().for_each(|i| self.walk(i)),
            Value::Object(map) => {
                match map.get("type").and_then(Value::as_str) {
                    Some("image") => {
                        self.fixed += TOKENS_PER_IMAGE;
                        return;
                    }
                    Some("document") if is_base64_source(map.get("source")) => {
                        self.fixed += TOKENS_PER_DOCUMENT;
                        return;
                    }
                    _ => {}
                }
                for (k, v) in map {
                    self.bytes += k.len() as u64;
                    self.walk(v);
                }
            }
            Value::Number(n) => self.bytes += n.to_string().len() as u64,
            Value::Bool(_) | Value::Null => self.bytes += 4,
        }
    }
}

fn is_base64_source(source: Option<&Value>) -> bool {
    source
        .and_then(|s| s.get("type"))
        .and_then(Value::as_str)
        .is_some_and(|t| t == "base64")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn grows_with_text_and_charges_images_flat() {
        let small = json!({"model":"m","messages":[{"role":"user","content":"hi"}]});
        let big = json!({"model":"m","messages":[{"role":"user","content":"hi ".repeat(1000)}]});
        let img = json!({"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"A".repeat(100_000)}}]}]});
        let s = estimate_input_tokens(&small);
        assert!(s > 0 && s < 20, "{s}");
        let b = estimate_input_tokens(&big);
        assert!((850..=900).contains(&b), "{b}");
        let mut img_small = img.clone();
        img_small["messages"][0]["content"][0]["source"]["data"] = json!("AAAA");
        let i = estimate_input_tokens(&img);
        // The payload length does not count; the flat image charge does.
        assert_eq!(i, estimate_input_tokens(&img_small));
        assert!(
            (TOKENS_PER_IMAGE..TOKENS_PER_IMAGE + 20).contains(&i),
            "{i}"
        );
    }
}
