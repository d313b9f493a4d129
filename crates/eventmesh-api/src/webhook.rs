//! The subscribe-time check of a webhook URL: valid, and not reaching a
//! denied range (`eventmesh.webhook.denied.cidrs`); every push is checked
//! again by the runtime's webhook client. Connectors' targets go through
//! the same guard.

use axum::http::StatusCode;

use super::{Api, ApiError};

impl Api {
    /// Refuses a webhook URL that is not valid (400) or whose host is, or
    /// resolves into, a denied range (403).
    pub async fn check_webhook_target(&self, url: &str) -> Result<(), ApiError> {
        eventmesh_runtime::push::validate_url(url)
            .map_err(|m| ApiError::bad_request("invalid_url", m))?;
        self.webhook_guard
            .check_url(url)
            .await
            .map_err(|m| ApiError::new(StatusCode::FORBIDDEN, "webhook_denied", m))
    }

    /// Refuses a connector target whose host is, or resolves into, a
    /// denied range; the message names the target and the range.
    pub async fn check_connector_target(
        &self,
        target: &eventmesh_connect::Target,
    ) -> Result<(), String> {
        self.webhook_guard
            .check_target(&target.host, target.port)
            .await
            .map_err(|m| format!("the target {target} is refused by the outbound guard: {m}"))
    }
}
