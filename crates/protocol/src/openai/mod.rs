//! Anthropic Messages ⇄ OpenAI (GitHub Copilot's `/responses` and `/chat/completions`).
//!
//! Claude Code only speaks Anthropic's Messages API; Copilot serves many models only through
//! OpenAI's two APIs. [`translate_request`] turns a Messages request into either API's request,
//! [`StreamTranslator`] turns either API's stream back into the exact Anthropic SSE events
//! Claude Code expects, and [`translate_response`] does the same for a JSON reply. Everything
//! here is pure: no I/O, no clock but for a generated message id.
//!
//! docs/PROXY.md (*Other models*) describes the mapping. Where the first design of it differed
//! from what the OpenAI wire format (as async-openai 0.43's types read it, which the test
//! upstream validates against) accepts, this module follows the wire format:
//!
//! - **Assistant text in Responses input** is `{"type":"message","role":"assistant",
//!   "content":"T"}` (an `EasyInputMessage` with string content), not the spec's
//!   `content:[{"type":"output_text","text":T,"annotations":[]}]`: that form is an output
//!   message, which the types accept only with an `id` and a `status`, and an `id` must not be
//!   sent with `store: false`.
//! - **Unknown top-level fields** are named `unknown_field_dropped`, not `<field>_dropped`:
//!   rule names are `&'static str`. The fields the spec lists by name keep their own names.
//! - **Chat Completions blocks** are closed when the stream ends (`[DONE]` or EOF after a
//!   `finish_reason`), not at the `finish_reason` chunk itself: Copilot can finish one choice
//!   while another still streams, and deltas after a finish would otherwise have no open block
//!   to go to. The events written are the same.
//! - **`reasoning_opaque` arriving after its thinking block closed** (Copilot splits it
//!   across parallel tool calls) becomes one more thinking block with empty text at the end,
//!   signed `claude-host:chat:<rest>`; going out, the opaque parts of an assistant message's
//!   `claude-host:chat:` blocks are joined again in order, and so are their texts (with
//!   "\n\n").
//! - **`output_config_dropped`** is named only when `output_config` held something that was not
//!   sent on (a key besides `effort`, or an effort the model has no control for); an effort
//!   that became `reasoning_effort` / `reasoning.effort` was translated, not dropped.
//! - **Content the target cannot take** is dropped and named: content blocks of unknown types
//!   (`block_dropped`), images or documents whose source cannot be sent (`image_dropped`,
//!   `document_dropped`), messages of an unknown role (`message_dropped`), and `tool_choice`
//!   when no tool is left to choose (`tool_choice_dropped`).
//! - **Error codes** beyond the spec's table: `invalid_request_error` / `invalid_prompt` become
//!   `invalid_request_error` (the spec's "else `api_error`" would invite a retry of a request
//!   that cannot succeed); an error's `type` stands in for a missing `code`. A Chat Completions
//!   event named `error` fails the stream whatever its data holds.
//! - After [`Step::Done`] or [`Step::Failed`], a [`StreamTranslator`] ignores whatever comes
//!   (writes nothing, answers [`Step::Continue`]).

mod emit;
mod errors;
mod reply;
mod request;
mod stream_chat;
mod stream_responses;
mod wire;

#[cfg(test)]
mod tests;

pub use reply::translate_response;
pub use request::translate_request;

use crate::error::ErrorEnvelope;
use bytes::BytesMut;

/// Which OpenAI API a model is served on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Dialect {
    /// `POST /responses` (GPT-5 family, Codex).
    Responses,
    /// `POST /chat/completions` (GPT-4.1, Gemini, Grok, …).
    #[default]
    ChatCompletions,
}

impl Dialect {
    /// The endpoint's path under Copilot's API root.
    pub fn path(self) -> &'static str {
        match self {
            Dialect::Responses => "/responses",
            Dialect::ChatCompletions => "/chat/completions",
        }
    }
}

/// What translation needs to know about the target model (from Copilot's catalog).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Target {
    /// The model's id upstream, e.g. `gpt-5.4`.
    pub model: String,
    /// The API it is served on.
    pub dialect: Dialect,
    /// The largest output the model allows.
    pub max_output_tokens: Option<u64>,
    /// It reads images.
    pub supports_vision: bool,
    /// `capabilities.supports.reasoning_effort`; empty: no effort control.
    pub effort_levels: Vec<String>,
    /// A reasoning model: refuses `temperature`/`top_p`, wants `max_completion_tokens`.
    pub reasoning: bool,
}

/// A translated request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Translated {
    /// The OpenAI JSON request body.
    pub body: Vec<u8>,
    /// Every field dropped or fitted, each name once (logged as `adapted=`).
    pub rules: Vec<&'static str>,
}

/// What the relay does after [`StreamTranslator::push`] or
/// [`StreamTranslator::end_of_stream`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Keep going.
    Continue,
    /// `message_stop` has been written: the stream is complete.
    Done,
    /// The upstream reported a failure (or sent something untranslatable). Nothing was written
    /// for it: the relay writes exactly one Anthropic `event: error` frame from this envelope.
    Failed(ErrorEnvelope),
}

/// Streaming reply translator: one per request.
#[derive(Debug)]
pub struct StreamTranslator {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Chat(stream_chat::ChatStream),
    Responses(stream_responses::ResponsesStream),
}

impl StreamTranslator {
    /// A translator for a `dialect` stream; `model` is the id reported back in
    /// `message_start.message.model` (the client's own id).
    pub fn new(dialect: Dialect, model: &str) -> Self {
        let inner = match dialect {
            Dialect::ChatCompletions => Inner::Chat(stream_chat::ChatStream::new(model)),
            Dialect::Responses => Inner::Responses(stream_responses::ResponsesStream::new(model)),
        };
        StreamTranslator { inner }
    }

    /// One complete upstream SSE event: its `event:` name if any and its joined `data:`.
    /// Appends zero or more complete Anthropic SSE events to `out`.
    pub fn push(&mut self, name: Option<&[u8]>, data: &[u8], out: &mut BytesMut) -> Step {
        match &mut self.inner {
            Inner::Chat(s) => s.push(name, data, out),
            Inner::Responses(s) => s.push(name, data, out),
        }
    }

    /// The upstream body ended (EOF) without a `Done`/`Failed` step yet.
    pub fn end_of_stream(&mut self, out: &mut BytesMut) -> Step {
        match &mut self.inner {
            Inner::Chat(s) => s.end_of_stream(out),
            Inner::Responses(s) => s.end_of_stream(out),
        }
    }

    /// Usage seen so far (input tokens including cached ones, output tokens), for the log.
    pub fn usage(&self) -> (Option<u64>, Option<u64>) {
        let usage = match &self.inner {
            Inner::Chat(s) => s.usage(),
            Inner::Responses(s) => s.usage(),
        };
        (usage.input, usage.output)
    }
}

/// Token counts as the upstream reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    /// Prompt tokens, cached ones included.
    pub input: Option<u64>,
    /// Of which read from the cache.
    pub cached: Option<u64>,
    /// Output tokens.
    pub output: Option<u64>,
}

/// The signature prefixes of thinking blocks made from each API's reasoning.
pub(crate) const RESPONSES_SIGNATURE: &str = "claude-host:responses:";
pub(crate) const CHAT_SIGNATURE: &str = "claude-host:chat:";
