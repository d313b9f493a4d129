//! HTTP transports: the traffic API (`/events/...`, SSE, WebSocket) and the
//! admin API (`/admin/...`, `/metrics`). Traffic handlers only decode the
//! request into an operation of [`eventmesh_api::Api`] and encode its answer;
//! `ApiError` answers itself as `{"error","message"}`; `error.rs` maps axum
//! extractor rejections to it.

mod a2a;
mod a2a_rest;
mod a2a_rest_v03;
mod admin;
mod connectors;
pub mod credentials;
mod error;
mod internal;
mod links;
mod mcp;
mod mqtt_ws;
mod stream;
mod subscriptions;
mod traffic;
mod ui;

use std::sync::Arc;
use std::time::Instant;

use eventmesh_core::config::Config;

pub use admin::admin_router;
pub use internal::internal_router;
pub use traffic::traffic_router;

/// Whether the request carries `Authorization: Bearer <expected>`,
/// compared in constant time.
fn bearer_matches(req: &axum::extract::Request, expected: &str) -> bool {
    use subtle::ConstantTimeEq;
    let given = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    bool::from(given.as_bytes().ct_eq(expected.as_bytes()))
}

/// What the local store reports about its memory and its disk space by
/// kind, and the idempotency keys the standalone log holds (`/metrics`).
pub type StoreMemory = Arc<dyn Fn() -> StoreUsage + Send + Sync>;

/// One reading of [`StoreMemory`].
pub struct StoreUsage {
    pub memory: Vec<(&'static str, usize)>,
    pub disk: Vec<(&'static str, u64)>,
    /// Keys in the idempotency index (none on JetStream, which keeps its
    /// own).
    pub dedup_keys: Option<u64>,
}

#[derive(Clone)]
pub struct AppState {
    pub api: eventmesh_api::Api,
    pub config: Arc<Config>,
    pub started: Instant,
    pub store_memory: StoreMemory,
    pub reloader: Arc<crate::reload::Reloader>,
    /// The A2A gateway, unless `eventmesh.a2a.enabled=false`.
    pub a2a: Option<Arc<eventmesh_a2a_gateway::Gateway>>,
    pub connectors: Arc<eventmesh_connect_runtime::Connectors>,
    /// The MQTT listener's sessions, when it is on.
    pub mqtt: Option<Arc<eventmesh_mqtt::Broker>>,
    /// The cluster's name on the mesh (`eventmesh.cluster.name`).
    pub cluster_name: Arc<str>,
    /// The admin token's and the cluster secret's failed attempts.
    pub credentials: Arc<credentials::CredentialGuards>,
}
