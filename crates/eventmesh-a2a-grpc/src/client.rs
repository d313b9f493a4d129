//! A small client of the A2A gRPC service, for the benchmarks and the
//! tests: a plain-text HTTP/2 channel to the listener, and requests that
//! carry the metadata the service reads (`a2a-version`, and
//! `authorization` when a token is given).

use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};

pub use crate::pb::a2a_service_client::A2aServiceClient;

/// A client of the service at `target` (`host:port`, or an `http://`
/// URL), connected; fails when the listener cannot be reached within
/// `connect_timeout`.
pub async fn connect(
    target: &str,
    connect_timeout: Duration,
) -> Result<A2aServiceClient<Channel>, tonic::transport::Error> {
    let url = if target.contains("://") {
        target.to_string()
    } else {
        format!("http://{target}")
    };
    let channel = Endpoint::from_shared(url)?
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .connect()
        .await?;
    Ok(A2aServiceClient::new(channel))
}

/// `message` as a request of A2A 1.0, with `authorization: Bearer
/// <token>` when a token is given. A token that cannot be a header value
/// is left out (the call is then refused as unauthenticated).
pub fn request<T>(message: T, token: Option<&str>) -> tonic::Request<T> {
    let mut req = tonic::Request::new(message);
    req.metadata_mut()
        .insert("a2a-version", MetadataValue::from_static("1.0"));
    if let Some(t) = token {
        if let Ok(v) = MetadataValue::try_from(format!("Bearer {t}")) {
            req.metadata_mut().insert("authorization", v);
        }
    }
    req
}
