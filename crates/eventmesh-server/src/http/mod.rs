//! HTTP transports: the traffic API (`/events/...`) and the admin API
//! (`/admin/...`, `/metrics`). Handlers build a request, call the runtime,
//! and map its errors through [`error::ApiError`], the one place where
//! errors become `{"error","message"}` answers.

mod admin;
mod error;
mod gate;
mod stream;
mod traffic;

use std::sync::Arc;
use std::time::Instant;

use eventmesh_core::config::Config;
use eventmesh_runtime::Runtime;
use eventmesh_security::SecurityGate;
use tokio_util::sync::CancellationToken;

pub use admin::admin_router;
pub use error::ApiError;
pub use gate::quota_key;
pub use traffic::traffic_router;

#[derive(Clone)]
pub struct AppState {
    pub runtime: Arc<Runtime>,
    pub gate: Arc<SecurityGate>,
    /// Ranges a webhook URL may not reach (also checked on every push).
    pub webhook_guard: Arc<eventmesh_runtime::WebhookGuard>,
    pub config: Arc<Config>,
    /// Cancelled when the server shuts down; long polls return early.
    pub shutdown: CancellationToken,
    pub started: Instant,
    /// The local RocksDB store (its memory is reported on `/metrics`).
    pub store: Arc<eventmesh_storage::LocalDb>,
}
