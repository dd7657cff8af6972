//! One module per target.

pub mod ahp;
pub mod control;
pub mod openai_request;
pub mod openai_response;
pub mod openai_stream;
pub mod proxy_request;
pub mod relay;
pub mod sse;
pub mod stream_json;
pub mod transcript;
