//! Wire types and pure functions shared by every claude-host crate.
//!
//! Nothing here performs I/O: the proxy, the upstreams and the tests all build on these
//! definitions so that one place decides what an Anthropic error looks like, how SSE is framed,
//! how Claude model ids map to Copilot ids and which `anthropic-beta` values survive.

pub mod adapt;
pub mod betas;
pub mod copilot_errors;
pub mod count_tokens;
pub mod error;
pub mod frames;
pub mod log_safe;
pub mod messages;
pub mod model_id;
pub mod models;
pub mod openai;
pub mod request_kind;
pub mod sse;
pub mod stream_json;
pub mod time;
pub mod transcript;
pub mod uri;
