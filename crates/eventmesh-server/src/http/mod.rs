//! HTTP transports: the traffic API (`/events/...`, SSE, WebSocket) and the
//! admin API (`/admin/...`, `/metrics`). Traffic handlers only decode the
//! request into an operation of [`crate::api::Api`] and encode its answer;
//! `error.rs` renders [`ApiError`] as `{"error","message"}`.

mod admin;
mod error;
mod stream;
mod traffic;

use std::sync::Arc;
use std::time::Instant;

use eventmesh_core::config::Config;

pub use admin::admin_router;
pub use traffic::traffic_router;

/// What the local store reports about its memory (`/metrics`).
pub type StoreMemory = Arc<dyn Fn() -> Vec<(&'static str, usize)> + Send + Sync>;

#[derive(Clone)]
pub struct AppState {
    pub api: crate::api::Api,
    pub config: Arc<Config>,
    pub started: Instant,
    pub store_memory: StoreMemory,
}
