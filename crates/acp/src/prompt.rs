//! An ACP prompt as Claude Code input: Anthropic content blocks, and the text the session's
//! history shows for it.

use agent_client_protocol::v1::schema::{ContentBlock, EmbeddedResourceResource};
use serde_json::{Value, json};

/// A prompt ready for the session.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Prompt {
    /// What the conversation shows as the user's message.
    pub text: String,
    /// What the CLI receives: a string, or content blocks when there is more than text.
    pub content: Value,
}

/// Why a prompt cannot be sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PromptError {
    /// Nothing to send.
    #[error("the prompt is empty")]
    Empty,
    /// A kind of content Claude Code does not take.
    #[error("{0} content is not supported (the agent's promptCapabilities say which kinds are)")]
    Unsupported(&'static str),
}

fn link(name: &str, uri: &str) -> String {
    let name = if name.is_empty() { uri } else { name };
    format!("[@{name}]({uri})")
}

fn name_of(uri: &str) -> &str {
    uri.rsplit('/').next().unwrap_or(uri)
}

fn image(media_type: &str, data: &str) -> Value {
    json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}})
}

/// Builds the prompt: text passes through; a resource link is mentioned as a link; an
/// embedded text resource is the link plus its text in a `<context>` block (as Claude's other
/// ACP adapter sends it); images are image blocks.
pub(crate) fn build(blocks: &[ContentBlock]) -> Result<Prompt, PromptError> {
    let mut shown: Vec<String> = Vec::new();
    let mut content: Vec<Value> = Vec::new();
    let mut context: Vec<String> = Vec::new();
    for block in blocks {
        match block {
            ContentBlock::Text(t) => {
                shown.push(t.text.clone());
                content.push(json!({"type": "text", "text": t.text}));
            }
            ContentBlock::ResourceLink(l) => {
                let s = link(&l.name, &l.uri);
                shown.push(s.clone());
                content.push(json!({"type": "text", "text": s}));
            }
            ContentBlock::Resource(r) => match &r.resource {
                EmbeddedResourceResource::TextResourceContents(t) => {
                    let s = link(name_of(&t.uri), &t.uri);
                    shown.push(s.clone());
                    content.push(json!({"type": "text", "text": s}));
                    context.push(format!(
                        "<context ref=\"{}\">\n{}\n</context>",
                        t.uri, t.text
                    ));
                }
                EmbeddedResourceResource::BlobResourceContents(b) => match b.mime_type.as_deref() {
                    Some(m) if m.starts_with("image/") => content.push(image(m, &b.blob)),
                    _ => return Err(PromptError::Unsupported("binary resource")),
                },
                _ => return Err(PromptError::Unsupported("this resource")),
            },
            ContentBlock::Image(i) => content.push(image(&i.mime_type, &i.data)),
            ContentBlock::Audio(_) => return Err(PromptError::Unsupported("audio")),
            _ => return Err(PromptError::Unsupported("this")),
        }
    }
    for c in context {
        content.push(json!({"type": "text", "text": c}));
    }
    if content.is_empty() {
        return Err(PromptError::Empty);
    }
    let text = shown.join(" ");
    let only_text = blocks.len() == 1 && matches!(blocks[0], ContentBlock::Text(_));
    Ok(Prompt {
        content: if only_text {
            Value::String(text.clone())
        } else {
            Value::Array(content)
        },
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(v: Value) -> Vec<ContentBlock> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn text_alone_is_a_string() {
        let p = build(&blocks(json!([{"type": "text", "text": "hello"}]))).unwrap();
        assert_eq!(p.content, json!("hello"));
        assert_eq!(p.text, "hello");
    }

    #[test]
    fn resources_are_links_with_their_text_as_context() {
        let p = build(&blocks(json!([
            {"type": "text", "text": "fix"},
            {"type": "resource", "resource": {"uri": "file:///w/a.rs", "text": "fn a() {}"}},
            {"type": "resource_link", "name": "b.rs", "uri": "file:///w/b.rs"},
            {"type": "image", "mimeType": "image/png", "data": "AAAA"},
        ])))
        .unwrap();
        assert_eq!(
            p.text,
            "fix [@a.rs](file:///w/a.rs) [@b.rs](file:///w/b.rs)"
        );
        let c = p.content.as_array().unwrap();
        assert_eq!(c[3]["source"]["media_type"], "image/png");
        assert_eq!(
            c[4]["text"],
            "<context ref=\"file:///w/a.rs\">\nfn a() {}\n</context>"
        );
    }

    #[test]
    fn audio_and_empty_prompts_are_refused() {
        assert_eq!(build(&[]), Err(PromptError::Empty));
        assert_eq!(
            build(&blocks(
                json!([{"type": "audio", "mimeType": "audio/wav", "data": "AA"}])
            )),
            Err(PromptError::Unsupported("audio"))
        );
    }
}
