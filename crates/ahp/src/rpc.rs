//! JSON-RPC 2.0 errors in the protocol's own shape.

use serde_json::{Value, json};

/// JSON-RPC and AHP error codes.
pub mod code {
    /// Invalid JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// Not a valid request object.
    pub const INVALID_REQUEST: i64 = -32600;
    /// Unknown method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Bad params.
    pub const INVALID_PARAMS: i64 = -32602;
    /// Server failure.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// No such session.
    pub const SESSION_NOT_FOUND: i64 = -32001;
    /// No such provider.
    pub const PROVIDER_NOT_FOUND: i64 = -32002;
    /// The session URI is taken.
    pub const SESSION_ALREADY_EXISTS: i64 = -32003;
    /// No common protocol version.
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32005;
    /// A credential is needed (`data.resources`).
    pub const AUTH_REQUIRED: i64 = -32007;
    /// The resource does not exist.
    pub const NOT_FOUND: i64 = -32008;
    /// Not allowed (e.g. a path outside the session's directories).
    pub const PERMISSION_DENIED: i64 = -32009;
    /// The target exists.
    pub const ALREADY_EXISTS: i64 = -32010;
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message} ({code})")]
pub struct RpcError {
    /// The code.
    pub code: i64,
    /// A message a person can act on.
    pub message: String,
    /// Extra data (e.g. `supportedVersions`, `resources`).
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with a code and message.
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// Adds `data`.
    pub fn with_data(mut self, data: Value) -> RpcError {
        self.data = Some(data);
        self
    }

    /// `-32602` with a message.
    pub fn invalid_params(message: impl Into<String>) -> RpcError {
        RpcError::new(code::INVALID_PARAMS, message)
    }

    /// The error object as JSON.
    pub fn to_json(&self) -> Value {
        let mut e = json!({"code": self.code, "message": self.message});
        if let Some(d) = &self.data {
            e["data"] = d.clone();
        }
        e
    }
}

/// Params as `T`, or `-32602` naming the field at fault.
pub fn from_params<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, RpcError> {
    serde_path_to_error::deserialize(params).map_err(|e| {
        let path = e.path().to_string();
        RpcError::invalid_params(if path == "." {
            format!("invalid params: {}", e.inner())
        } else {
            format!("invalid params: `{path}`: {}", e.inner())
        })
    })
}
