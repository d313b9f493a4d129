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
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::Connected;

use crate::limits::{Admission, Permit, Refusal};
use crate::tls::{Incoming, Io, Peer, ServerTls};

/// The application protocol the listener's TLS offers.
const ALPN: &[u8] = b"h2";

/// The client's HTTP/2 preface, in bytes.
const PREFACE: usize = 24;

/// Binds the gRPC port when it is configured.
pub async fn bind(cfg: &Config) -> anyhow::Result<Option<TcpListener>> {
    let Some(port) = cfg.server.grpc.port else {
        return Ok(None);
    };
    let host = cfg.server.grpc.host.as_deref().unwrap_or(&cfg.server.host);
    let listener = TcpListener::bind((host, port))
        .await
        .map_err(|e| anyhow::anyhow!("cannot bind gRPC on {host}:{port}: {e}"))?;
    Ok(Some(listener))
}

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
        let conn = Conn {
            io,
            peer,
            _permit: permit,
            preface: Some(Preface {
                sleep: Box::pin(tokio::time::sleep_until(deadline)),
                left: PREFACE,
            }),
            admission: incoming.admission().clone(),
        };
        Some((Ok(conn), incoming))
    })
}

/// The preface still expected, and by when.
struct Preface {
    sleep: Pin<Box<Sleep>>,
    left: usize,
}

/// One accepted connection: its stream, its peer and its place in the
/// connection limits (held as long as the connection).
struct Conn {
    io: Io,
    peer: Peer,
    _permit: Permit,
    preface: Option<Preface>,
    admission: Admission,
}

impl Connected for Conn {
    type ConnectInfo = GrpcPeer;

    fn connect_info(&self) -> GrpcPeer {
        GrpcPeer {
            addr: self.peer.addr,
            certificate: self.peer.certificate.clone(),
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.io).poll_read(cx, buf);
        let expired = read.is_pending()
            && this
                .preface
                .as_mut()
                .is_some_and(|p| p.sleep.as_mut().poll(cx).is_ready());
        if expired {
            this.preface = None;
            this.admission.refused(Refusal::TimeoutHeader);
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no HTTP/2 preface in time",
            )));
        }
        if let (Poll::Ready(Ok(())), Some(p)) = (&read, this.preface.as_mut()) {
            let got = buf.filled().len() - before;
            if got == 0 || got >= p.left {
                this.preface = None;
            } else {
                p.left -= got;
            }
        }
        read
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_preface_is_the_http2_one() {
        assert_eq!(super::PREFACE, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".len());
    }
}
