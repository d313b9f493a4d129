//! Shared by the runtime's integration tests.

use std::time::Duration;

use eventmesh_core::config::{DeliveryConfig, DeliveryTopology};
use eventmesh_runtime::DispatchSettings;

/// Dispatch settings for a test: small windows, short backoff, the given
/// flush interval.
pub fn settings(flush_interval: Duration) -> DispatchSettings {
    DispatchSettings {
        delivery: DeliveryConfig {
            after_sync: true,
            topology: DeliveryTopology::LocalStickyPull,
            max_inflight: 64,
            max_inflight_per_client: 64,
            max_attempts: 3,
            ack_timeout: Duration::from_secs(60),
            member_timeout: Duration::from_secs(3600),
            backoff_initial: Duration::from_millis(50),
            backoff_max: Duration::from_secs(1),
            backoff_jitter: 0.2,
            flush_interval,
            webhook_timeout: Duration::from_secs(1),
            webhook_tls: Default::default(),
            webhook_handshake: Default::default(),
        },
        webhook_guard: Default::default(),
    }
}
