//! The subscribe-time check of a webhook URL against the denied ranges
//! (`eventmesh.webhook.denied.cidrs`).

use std::net::IpAddr;

use axum::http::StatusCode;

use super::{Api, ApiError};

impl Api {
    /// Refuses a webhook URL whose host resolves into a denied range.
    pub(crate) async fn check_webhook_target(&self, url: &str) -> Result<(), ApiError> {
        if self.denied_cidrs.is_empty() {
            return Ok(());
        }
        let invalid = |m: String| ApiError::bad_request("invalid_url", m);
        let parsed = eventmesh_runtime::push::host_and_port(url)
            .ok_or_else(|| invalid(format!("cannot parse {url:?}")))?;
        let addrs: Vec<IpAddr> = match parsed.0.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => tokio::net::lookup_host((parsed.0.as_str(), parsed.1))
                .await
                .map_err(|e| {
                    invalid(format!(
                        "cannot resolve the webhook host {:?}: {e}",
                        parsed.0
                    ))
                })?
                .map(|a| a.ip())
                .collect(),
        };
        for ip in addrs {
            if let Some(net) = self.denied_cidrs.iter().find(|n| n.contains(&ip)) {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "webhook_denied",
                    format!("the webhook host resolves to {ip}, inside the denied range {net} (eventmesh.webhook.denied.cidrs)"),
                ));
            }
        }
        Ok(())
    }
}
