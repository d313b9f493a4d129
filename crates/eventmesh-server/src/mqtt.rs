//! The MQTT listener (`eventmesh.server.mqtt.port`, off by default): MQTT
//! 3.1.1 and 5.0 connections ([`eventmesh_mqtt`]) accepted like every other
//! listener's: within the traffic ports' connection limits (listener
//! `mqtt`), over TLS from the listeners' certificate when it is on, a
//! verified client certificate naming the caller.

use std::sync::Arc;

use eventmesh_core::config::Config;
use eventmesh_mqtt::Broker;
use tokio::net::TcpListener;
use tokio_util::either::Either;

use crate::limits::Admission;
use crate::tls::{Incoming, ServerTls};

/// Starts serving the bound MQTT port; logs where it listens (the line the
/// port is found by).
pub fn start(
    listener: TcpListener,
    tls: Option<Arc<ServerTls>>,
    admission: Admission,
    broker: Arc<Broker>,
    cfg: &Config,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let tls = tls.filter(|_| cfg.server.mqtt.tls);
    let over = if tls.is_some() { " (TLS)" } else { "" };
    let mut incoming = Incoming::new(listener, tls, admission)?;
    tracing::info!("MQTT listening on {}{over}", incoming.local_addr());
    Ok(tokio::spawn(async move {
        // Sessions a stopped or killed process left behind are settled
        // before the first connection is taken.
        broker.sweep().await;
        let sweeping = broker.start_sweeping();
        let shutdown = broker.shutdown().clone();
        loop {
            tokio::select! {
                accepted = incoming.next() => match accepted {
                    Some((stream, peer, permit)) => {
                        let broker = broker.clone();
                        tokio::spawn(async move {
                            let accepted = permit.accepted();
                            match stream {
                                Either::Left(tcp) => {
                                    let _ = tcp.set_nodelay(true);
                                    let (r, w) = tcp.into_split();
                                    eventmesh_mqtt::serve(broker, r, w, peer.addr, peer.certificate, accepted).await;
                                }
                                Either::Right(tls) => {
                                    let (r, w) = tokio::io::split(tls);
                                    eventmesh_mqtt::serve(broker, r, w, peer.addr, peer.certificate, accepted).await;
                                }
                            }
                            drop(permit);
                        });
                    }
                    None => break,
                },
                _ = shutdown.cancelled() => break,
            }
        }
        sweeping.abort();
    }))
}
