//! The gRPC listener's services and its HTTP/2 settings: the A2A service,
//! `grpc.health.v1.Health` and server reflection (`grpc.reflection.v1`
//! and `v1alpha`), so that grpcurl-style tools list and call everything
//! without a copy of the protos.
//!
//! The server takes accepted connections from its caller (which does the
//! TLS and the connection limits), HTTP/2 only. Bounds that keep a slow
//! or silent peer from holding anything for long:
//! - every connection is pinged every `keepalive` and closed when a ping
//!   is not answered within `keepalive_timeout`;
//! - a message larger than `max_message_bytes` is refused
//!   (`OUT_OF_RANGE`) before it is decoded;
//! - a connection opens at most `max_streams` streams at once, and its
//!   headers are bounded ([`MAX_HEADER_LIST_BYTES`]);
//! - once `shutdown` resolves no connection is accepted, each connection
//!   is told to go away, and the calls under way end (the gateway's
//!   streams and waits end with the runtime's shutdown).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use eventmesh_a2a_gateway::Gateway;
use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite};
use tonic::service::Routes;
use tonic::transport::server::Connected;
use tonic::transport::Server;
use tonic_health::server::HealthReporter;

use crate::pb::a2a_service_server::A2aServiceServer;
use crate::service::{A2a, Authority, Settings};

/// The largest header list a request may carry.
pub const MAX_HEADER_LIST_BYTES: u32 = 64 * 1024;

/// The name health checks ask about for the A2A service.
pub const SERVICE_NAME: &str = "lf.a2a.v1.A2AService";

/// The listener's bounds.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub keepalive: Duration,
    pub keepalive_timeout: Duration,
    pub max_message_bytes: usize,
    pub max_streams: u32,
}

/// The services of the listener, and the handle that says whether they
/// are serving.
pub struct Services {
    pub routes: Routes,
    pub health: HealthReporter,
}

/// The A2A service over `gw` (or, with the gateway off, only health and
/// reflection, health saying the A2A service is not serving), health
/// and reflection.
pub async fn services(
    gw: Option<Arc<Gateway>>,
    settings: Settings,
    limits: &Limits,
) -> Result<Services, tonic_reflection::server::Error> {
    let (health, health_service) = tonic_health::server::health_reporter();
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(crate::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let mut routes = Routes::new(health_service)
        .add_service(reflection().build_v1()?)
        .add_service(reflection().build_v1alpha()?);
    match gw {
        Some(gw) => {
            let a2a = A2aServiceServer::new(A2a::new(gw, settings))
                .max_decoding_message_size(limits.max_message_bytes);
            routes = routes.add_service(a2a);
            health
                .set_service_status(SERVICE_NAME, tonic_health::ServingStatus::Serving)
                .await;
        }
        None => {
            health
                .set_service_status(SERVICE_NAME, tonic_health::ServingStatus::NotServing)
                .await;
        }
    }
    Ok(Services { routes, health })
}

/// Notes the `:authority` a request addressed, for the service.
fn note_authority<B>(
    mut req: tonic::codegen::http::Request<B>,
) -> tonic::codegen::http::Request<B> {
    if let Some(a) = req.uri().authority().map(|a| a.as_str().to_string()) {
        req.extensions_mut().insert(Authority(a));
    }
    req
}

/// Serves `routes` on the connections of `incoming` until `shutdown`
/// resolves and the connections have gone.
pub async fn serve<I, IO, IE, F>(
    incoming: I,
    routes: Routes,
    limits: &Limits,
    shutdown: F,
) -> Result<(), tonic::transport::Error>
where
    I: Stream<Item = Result<IO, IE>>,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>>,
    F: Future<Output = ()>,
{
    Server::builder()
        .http2_keepalive_interval(Some(limits.keepalive))
        .http2_keepalive_timeout(Some(limits.keepalive_timeout))
        .max_concurrent_streams(limits.max_streams)
        .http2_max_header_list_size(MAX_HEADER_LIST_BYTES)
        .layer(tower::util::MapRequestLayer::new(
            note_authority::<tonic::body::Body>,
        ))
        .add_routes(routes)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}
