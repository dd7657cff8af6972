//! A user message with attachments as the content Claude Code takes: the text, then each
//! attachment as a text block (files, selections, pasted text, references) or an image block.

use ahp_types::state::{Message, MessageAttachment, TextRange};
use base64::Engine as _;
use serde_json::{Value, json};
use std::collections::HashMap;

/// A file an attachment names, as read for the prompt (or why it could not be).
pub type FileRead = Result<ReadFile, String>;

/// The bytes of an attached file and their type.
#[derive(Debug, Clone)]
pub struct ReadFile {
    /// The content.
    pub bytes: Vec<u8>,
    /// Its MIME type (`image/png`, `text/plain`, …).
    pub content_type: String,
}

/// Image types the model reads.
const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// The URIs of the files a message's attachments name (to be read before it is sent).
pub fn files_to_read(message: &Message) -> Vec<String> {
    message
        .attachments
        .iter()
        .flatten()
        .filter_map(|a| match a {
            MessageAttachment::Resource(r)
                if r.uri.starts_with("file:") && r.display_kind.as_deref() != Some("directory") =>
            {
                Some(r.uri.clone())
            }
            _ => None,
        })
        .collect()
}

/// The prompt content for `message`: its text alone when it has no attachments, else content
/// blocks. `files` holds what [`files_to_read`] named.
pub fn prompt_content(message: &Message, files: &HashMap<String, FileRead>) -> Value {
    let Some(attachments) = message.attachments.as_ref().filter(|a| !a.is_empty()) else {
        return Value::String(message.text.clone());
    };
    let mut blocks = vec![text_block(&message.text)];
    for a in attachments {
        match a {
            MessageAttachment::Resource(r) => {
                if r.display_kind.as_deref() == Some("directory") {
                    blocks.push(text_block(&format!("Attached folder: {}", path_of(&r.uri))));
                    continue;
                }
                match files.get(&r.uri) {
                    Some(Ok(file)) => blocks.push(file_block(
                        &r.label,
                        &r.uri,
                        file,
                        r.selection.as_ref().map(|s| &s.range),
                    )),
                    Some(Err(why)) => blocks.push(text_block(&format!(
                        "(The attached file {} could not be read: {why})",
                        path_of(&r.uri)
                    ))),
                    None => blocks.push(text_block(&format!("Attached: {} ({})", r.label, r.uri))),
                }
            }
            MessageAttachment::EmbeddedResource(e) => {
                match base64::engine::general_purpose::STANDARD.decode(e.data.as_bytes()) {
                    Ok(bytes) => {
                        let file = ReadFile {
                            bytes,
                            content_type: e.content_type.clone(),
                        };
                        blocks.push(file_block(
                            &e.label,
                            "",
                            &file,
                            e.selection.as_ref().map(|s| &s.range),
                        ));
                    }
                    Err(_) => blocks.push(text_block(&format!(
                        "(The attachment {} was not valid base64)",
                        e.label
                    ))),
                }
            }
            MessageAttachment::Simple(s) => {
                let text = s.model_representation.as_deref().unwrap_or(&s.label);
                blocks.push(text_block(text));
            }
            other => {
                // References this host cannot resolve (other chats, annotations): named.
                let label = serde_json::to_value(other)
                    .ok()
                    .and_then(|v| v.get("label").and_then(Value::as_str).map(str::to_owned))
                    .unwrap_or_default();
                blocks.push(text_block(&format!("Attached: {label}")));
            }
        }
    }
    Value::Array(blocks)
}

fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

fn path_of(uri: &str) -> String {
    claude_host_protocol::uri::file_path(uri)
        .map_or_else(|_| uri.to_owned(), |p| p.display().to_string())
}

/// An image as an image block; text as a tagged text block (only the selected lines, when a
/// selection is given).
fn file_block(label: &str, uri: &str, file: &ReadFile, range: Option<&TextRange>) -> Value {
    let media = file.content_type.split(';').next().unwrap_or("").trim();
    if IMAGE_TYPES.contains(&media) {
        return json!({"type": "image", "source": {"type": "base64", "media_type": media,
            "data": base64::engine::general_purpose::STANDARD.encode(&file.bytes)}});
    }
    let text = String::from_utf8_lossy(&file.bytes);
    let source = if uri.is_empty() {
        format!("<attachment name=\"{label}\"")
    } else {
        format!("<attachment name=\"{label}\" path=\"{}\"", path_of(uri))
    };
    let body = match range {
        Some(r) => {
            let first = usize::try_from(r.start.line).unwrap_or(0);
            let last = usize::try_from(r.end.line).unwrap_or(first).max(first);
            let lines: Vec<&str> = text.lines().skip(first).take(last - first + 1).collect();
            return text_block(&format!(
                "{source} lines=\"{}-{}\">\n{}\n</attachment>",
                first + 1,
                first + lines.len(),
                lines.join("\n")
            ));
        }
        None => text,
    };
    text_block(&format!(
        "{source}>\n{}\n</attachment>",
        body.trim_end_matches('\n')
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn message(attachments: Value) -> Message {
        serde_json::from_value(json!({"text": "Fix #file:a.ts", "origin": {"kind": "user"},
            "attachments": attachments}))
        .unwrap()
    }

    #[test]
    fn files_selections_images_and_simple_attachments_become_blocks() {
        let m = message(json!([
            {"type": "resource", "uri": "file:///p/a.ts", "label": "a.ts", "displayKind": "document"},
            {"type": "resource", "uri": "file:///p/b.ts", "label": "b.ts", "displayKind": "selection",
             "selection": {"range": {"start": {"line": 1, "character": 0}, "end": {"line": 2, "character": 0}}}},
            {"type": "resource", "uri": "file:///p/gone.ts", "label": "gone.ts"},
            {"type": "resource", "uri": "file:///p/src", "label": "src", "displayKind": "directory"},
            {"type": "embeddedResource", "label": "shot.png", "displayKind": "image",
             "data": "iVBORw0KGgo=", "contentType": "image/png"},
            {"type": "embeddedResource", "label": "pasted", "data": "aGVsbG8=", "contentType": "text/plain"},
            {"type": "simple", "label": "Workspace", "modelRepresentation": "The workspace has 3 files."}
        ]));
        assert_eq!(
            files_to_read(&m),
            ["file:///p/a.ts", "file:///p/b.ts", "file:///p/gone.ts"]
        );
        let files: HashMap<String, FileRead> = [
            ("file:///p/a.ts", Ok("one\ntwo\n")),
            ("file:///p/b.ts", Ok("l1\nl2\nl3\nl4\n")),
            ("file:///p/gone.ts", Err("not found")),
        ]
        .into_iter()
        .map(|(u, r)| {
            (
                u.to_owned(),
                r.map(|t: &str| ReadFile {
                    bytes: t.as_bytes().to_vec(),
                    content_type: "text/plain".into(),
                })
                .map_err(str::to_owned),
            )
        })
        .collect();
        let content = prompt_content(&m, &files);
        let texts: Vec<String> = content
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                b["text"]
                    .as_str()
                    .map_or_else(|| b["type"].to_string(), str::to_owned)
            })
            .collect();
        assert_eq!(
            texts,
            [
                "Fix #file:a.ts",
                "<attachment name=\"a.ts\" path=\"/p/a.ts\">\none\ntwo\n</attachment>",
                "<attachment name=\"b.ts\" path=\"/p/b.ts\" lines=\"2-3\">\nl2\nl3\n</attachment>",
                "(The attached file /p/gone.ts could not be read: not found)",
                "Attached folder: /p/src",
                "\"image\"",
                "<attachment name=\"pasted\">\nhello\n</attachment>",
                "The workspace has 3 files.",
            ]
        );
        let image = &content[5];
        assert_eq!(image["source"]["media_type"], "image/png");
        assert_eq!(image["source"]["data"], "iVBORw0KGgo=");
    }

    #[test]
    fn a_message_without_attachments_is_its_text() {
        let m = message(json!([]));
        assert_eq!(prompt_content(&m, &HashMap::new()), json!("Fix #file:a.ts"));
    }
}
