//! The upstream before anyone has signed in: every call says so.

use crate::{Catalog, MessagesCall, Upstream, UpstreamError, UpstreamResponse};
use async_trait::async_trait;

/// Refuses every call with [`UpstreamError::NotSignedIn`] (the proxy answers 401), until a
/// sign-in replaces it.
#[derive(Debug, Clone, Copy, Default)]
pub struct SignedOut;

#[async_trait]
impl Upstream for SignedOut {
    fn name(&self) -> &'static str {
        "signed-out"
    }

    async fn catalog(&self) -> Result<std::sync::Arc<Catalog>, UpstreamError> {
        Err(UpstreamError::NotSignedIn)
    }

    async fn messages(&self, _call: MessagesCall) -> Result<UpstreamResponse, UpstreamError> {
        Err(UpstreamError::NotSignedIn)
    }
}
