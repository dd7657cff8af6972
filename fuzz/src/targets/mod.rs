//! One module per target.

pub mod ahp;
pub mod control;
pub mod proxy_request;
pub mod relay;
pub mod sse;
pub mod stream_json;
pub mod transcript;
