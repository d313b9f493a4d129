//! The client side of the internal channel between instances: one HTTP
//! client for every call an instance makes on another (forwarded
//! deliveries, settles sent back to a delivery's owner, replies looked up
//! and sent to the instance where their request waits), each call bounded
//! by [`INTERNAL_TIMEOUT`] and carrying the cluster secret.

use std::sync::Arc;
use std::time::Duration;

use super::InstanceInfo;

/// Bound on one internal call.
const INTERNAL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an idle connection to another instance is kept: well under
/// the HTTP ports' idle timeout (60 s by default), so that a call never
/// goes out on a connection the peer is closing.
const POOL_IDLE: Duration = Duration::from_secs(30);

/// A call on another instance's internal channel.
pub(crate) fn peer_post(
    http: &reqwest::Client,
    secret: &str,
    to: &InstanceInfo,
    path: &str,
) -> reqwest::RequestBuilder {
    let scheme = if to.tls { "https" } else { "http" };
    http.post(format!("{scheme}://{}{path}", to.address))
        .bearer_auth(secret)
}

/// The client of internal calls, with `tls` for instances serving TLS.
pub(crate) fn internal_client(tls: Option<Arc<rustls::ClientConfig>>) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .timeout(INTERNAL_TIMEOUT)
        .pool_idle_timeout(POOL_IDLE);
    if let Some(config) = tls {
        builder = builder.use_preconfigured_tls((*config).clone());
    }
    builder.build().expect("an HTTP client builds")
}
