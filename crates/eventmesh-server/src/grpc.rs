//! The gRPC listener (`eventmesh.server.grpc.port`, off by default): the
//! A2A gRPC binding with gRPC health and reflection
//! ([`eventmesh_a2a_grpc`]), on connections accepted like every other
//! listener's: the traffic ports' connection limits (listener `grpc`),
//! TLS from the listeners' certificate (ALPN `h2`, replaced while running
//! like theirs), and over mutual TLS the client certificate naming the
//! caller.
//!
//! A connection must have sent the HTTP/2 preface within
//! `eventmesh.server.http.header.timeout.ms` of its accept (TLS handshake
//! included), else it is closed and counted (`timeout_header`); after
//! that, HTTP/2 pings close a peer that stops answering. At shutdown the
//! listener stops accepting, tells each connection to go away and waits
//! for the calls under way, at most `eventmesh.shutdown.grace.ms`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use eventmesh_a2a_grpc::server::{self, Limits};
use eventmesh_a2a_grpc::service::{Peer as GrpcPeer, Settings};
use eventmesh_core::config::Config;
use tokio::net::TcpListener;
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::Connected;

use crate::conn::{OnRead, Watched};
use crate::limits::{Admission, Refusal};
use crate::tls::{Incoming, Peer, ServerTls};

/// The application protocol the listener's TLS offers.
const ALPN: &[u8] = b"h2";

/// The client's HTTP/2 preface, in bytes.
const PREFACE: usize = 24;

/// Starts serving the bound gRPC port; logs where it listens (the line
/// the port is found by).
pub fn start(
    listener: TcpListener,
    tls: Option<Arc<ServerTls>>,
    admission: Admission,
    gateway: Option<Arc<eventmesh_a2a_gateway::Gateway>>,
    cfg: &Config,
    traffic_port: u16,
    shutdown: &CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let tls = tls.filter(|_| cfg.server.grpc.tls);
    let over = if tls.is_some() { " (TLS)" } else { "" };
    let incoming =
        Incoming::with_alpn(listener, tls.clone(), admission, Some(vec![ALPN.to_vec()]))?;
    tracing::info!("gRPC listening on {}{over}", incoming.local_addr());
    if gateway.is_none() {
        tracing::info!("gRPC: the A2A gateway is off (eventmesh.a2a.enabled=false); health and reflection only");
    }
    let settings = Settings {
        public_url: cfg.a2a.public_url.clone(),
        traffic_port,
        traffic_tls: cfg.server.tls.configured() && cfg.server.http.tls,
    };
    let grpc = &cfg.server.grpc;
    let limits = Limits {
        keepalive: grpc.keepalive,
        keepalive_timeout: grpc.keepalive,
        max_message_bytes: grpc.max_message_bytes,
        max_streams: 256,
    };
    let preface = cfg.server.http.header_timeout;
    let grace = cfg.shutdown.grace;
    let shutdown = shutdown.clone();
    Ok(tokio::spawn(async move {
        let services = match server::services(gateway, settings, &limits).await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "gRPC: cannot build reflection; the gRPC listener is not served");
                return;
            }
        };
        let health = services.health.clone();
        let stop = shutdown.clone();
        let signal = async move {
            stop.cancelled().await;
            // Health checks see the listener going before it goes.
            health
                .set_service_status("", tonic_health::ServingStatus::NotServing)
                .await;
            health
                .set_service_status(
                    server::SERVICE_NAME,
                    tonic_health::ServingStatus::NotServing,
                )
                .await;
        };
        let connections = connections(incoming, preface);
        let serve = server::serve(connections, services.routes, &limits, signal);
        let mut serve = std::pin::pin!(serve);
        tokio::select! {
            served = &mut serve => {
                if let Err(e) = served {
                    tracing::error!(error = %e, "gRPC listener failed");
                }
            }
            _ = async { shutdown.cancelled().await; tokio::time::sleep(grace).await } => {
                tracing::warn!(grace_ms = grace.as_millis() as u64, "gRPC calls still under way after the shutdown grace; leaving them");
            }
        }
    }))
}

/// The accepted connections, each bounded by the preface deadline.
fn connections(
    incoming: Incoming,
    preface: std::time::Duration,
) -> impl futures::Stream<Item = Result<Conn, std::io::Error>> {
    futures::stream::unfold(incoming, move |mut incoming| async move {
        let (io, peer, permit) = incoming.next().await?;
        let deadline = permit.accepted() + preface;
        let watch = GrpcWatch {
            peer,
            preface: Some(Preface {
                sleep: Box::pin(tokio::time::sleep_until(deadline)),
                left: PREFACE,
            }),
            admission: incoming.admission().clone(),
        };
        let conn = Watched::new(io, watch, permit);
        Some((Ok(conn), incoming))
    })
}

/// The preface still expected, and by when.
struct Preface {
    sleep: Pin<Box<Sleep>>,
    left: usize,
}

/// What a gRPC connection watches: the preface until it has come whole,
/// and who the peer is.
struct GrpcWatch {
    peer: Peer,
    preface: Option<Preface>,
    admission: Admission,
}

/// One accepted connection: its stream, its peer and its place in the
/// connection limits (held as long as the connection).
type Conn = Watched<GrpcWatch>;

impl Connected for Conn {
    type ConnectInfo = GrpcPeer;

    fn connect_info(&self) -> GrpcPeer {
        GrpcPeer {
            addr: self.watch.peer.addr,
            certificate: self.watch.peer.certificate.clone(),
        }
    }
}

impl OnRead for GrpcWatch {
    fn on_read(
        &mut self,
        cx: &mut Context<'_>,
        read: &Poll<std::io::Result<()>>,
        got: usize,
    ) -> Option<std::io::Error> {
        let p = self.preface.as_mut()?;
        match read {
            Poll::Pending if p.sleep.as_mut().poll(cx).is_ready() => {
                self.preface = None;
                self.admission.refused(Refusal::TimeoutHeader);
                Some(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no HTTP/2 preface in time",
                ))
            }
            Poll::Ready(Ok(())) if got == 0 || got >= p.left => {
                self.preface = None;
                None
            }
            Poll::Ready(Ok(())) => {
                p.left -= got;
                None
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_preface_is_the_http2_one() {
        assert_eq!(super::PREFACE, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".len());
    }
}
