//! MQTT over WebSocket: `GET /mqtt` on the traffic ports, with the
//! subprotocol `mqtt`, while the MQTT listener is on. The socket's binary
//! messages carry the MQTT byte stream (a packet may span messages, and a
//! message may hold several); behind the socket the connection is served
//! exactly as one of the MQTT listener's, with the same session, gate and
//! limits. A text message ends the connection.

use std::sync::Arc;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use eventmesh_api::ApiError;

use super::AppState;
use crate::tls::Peer;

/// Bytes of the MQTT stream one outgoing message carries at most.
const CHUNK: usize = 16 * 1024;

pub fn routes() -> Router<AppState> {
    Router::new().route("/mqtt", get(upgrade))
}

async fn upgrade(
    State(app): State<AppState>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let Some(broker) = app.mqtt.clone() else {
        return Err(ApiError::not_found(
            "not_found",
            "MQTT is off on this server (eventmesh.server.mqtt.port)",
        ));
    };
    let upgrade = upgrade.map_err(|r| {
        ApiError::new(
            r.status(),
            "websocket_upgrade_required",
            format!("{}: open /mqtt with a WebSocket handshake", r.body_text()),
        )
    })?;
    let accepted = tokio::time::Instant::now();
    let max = broker.max_packet_bytes() + 1024;
    Ok(upgrade
        .protocols(["mqtt", "mqttv3.1"])
        .max_message_size(max)
        .max_frame_size(max)
        .on_upgrade(move |socket| bridge(broker, socket, peer, accepted))
        .into_response())
}

/// Serves the MQTT connection behind `socket` until it ends.
async fn bridge(
    broker: Arc<eventmesh_mqtt::Broker>,
    socket: WebSocket,
    peer: Peer,
    accepted: tokio::time::Instant,
) {
    let (mut to_client, mut from_client) = socket.split();
    let (ours, theirs) = tokio::io::duplex(4 * CHUNK);
    let (mut ours_r, mut ours_w) = tokio::io::split(ours);
    let (theirs_r, theirs_w) = tokio::io::split(theirs);
    let done = CancellationToken::new();
    // The client's messages into the connection's reader; ends the
    // reader's stream when the socket closes.
    let inbound = async {
        while let Some(Ok(msg)) = from_client.next().await {
            match msg {
                Message::Binary(b) => {
                    if ours_w.write_all(&b).await.is_err() {
                        break;
                    }
                }
                Message::Text(_) | Message::Close(_) => break,
                Message::Ping(_) | Message::Pong(_) => {}
            }
        }
        let _ = ours_w.shutdown().await;
    };
    // What the connection writes, as binary messages; closes the socket
    // once the connection is done writing.
    let outbound = async {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match ours_r.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let msg = Message::Binary(bytes::Bytes::copy_from_slice(&buf[..n]));
                    if to_client.send(msg).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to_client.close().await;
    };
    let serve = eventmesh_mqtt::serve(
        broker,
        theirs_r,
        theirs_w,
        peer.addr,
        peer.certificate,
        accepted,
    );
    // The connection always runs to its end (its will, its session); the
    // reading side stops with it.
    let reading = async {
        tokio::select! {
            _ = inbound => {}
            _ = done.cancelled() => {}
        }
    };
    let serving = async {
        tokio::join!(serve, outbound);
        done.cancel();
    };
    tokio::join!(reading, serving);
}
