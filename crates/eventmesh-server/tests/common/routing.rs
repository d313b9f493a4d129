//! Helpers of the routing tests (filters, patterns, the Subscriptions
//! API): an order event, and taking deliveries from each kind of stream,
//! each acknowledged, within a bounded wait.

use std::time::Duration;

use eventmesh_client::{Delivery, EventMeshClient, SseStream, TcpClient, WsSession};

use super::Server;
use serde_json::{json, Value};

/// How long each delivery may take.
pub const WAIT: Duration = Duration::from_secs(15);

/// A server with its TCP port open, and an SDK client of it (HTTP and
/// TCP); the data directory lives as long as the first value.
pub fn start_with_tcp() -> (tempfile::TempDir, Server, EventMeshClient) {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.server.tcp.port=0"]);
    let tcp = s.tcp.clone().expect("the TCP listener's address");
    let sdk = EventMeshClient::new(s.traffic.clone())
        .unwrap()
        .with_tcp(tcp)
        .with_request_timeout(WAIT);
    (dir, s, sdk)
}

/// An `order.*` event with an `amount` extension.
pub fn order(id: &str, ty: &str, amount: impl Into<Value>) -> Value {
    json!({
        "specversion": "1.0",
        "id": id,
        "source": "/shop",
        "type": ty,
        "amount": amount.into(),
        "data": {"id": id},
    })
}

/// The event ids of deliveries, sorted.
pub fn ids_of(got: &[Delivery]) -> Vec<String> {
    let mut ids: Vec<String> = got
        .iter()
        .map(|d| d.event["id"].as_str().unwrap().to_string())
        .collect();
    // Order holds within a partition, not across a topic's partitions.
    ids.sort();
    ids
}

/// The next `n` deliveries of an SSE stream, each acknowledged.
pub async fn take_sse(sdk: &EventMeshClient, sse: &mut SseStream, n: usize) -> Vec<Delivery> {
    let mut got = Vec::new();
    for _ in 0..n {
        let d = tokio::time::timeout(WAIT, sse.next())
            .await
            .expect("an SSE delivery in time")
            .expect("stream open")
            .unwrap();
        sdk.ack(&d.delivery_id).await.unwrap();
        got.push(d);
    }
    got
}

/// The next `n` deliveries of a WebSocket session, each acknowledged.
pub async fn take_ws(ws: &mut WsSession, n: usize) -> Vec<Delivery> {
    let mut got = Vec::new();
    for _ in 0..n {
        let d = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("a WebSocket delivery in time")
            .expect("socket open")
            .unwrap();
        ws.ack_confirmed(&d.delivery_id).await.unwrap();
        got.push(d);
    }
    got
}

/// The next `n` deliveries of a TCP session, each acknowledged.
pub async fn take_tcp(tcp: &mut TcpClient, n: usize) -> Vec<Delivery> {
    let mut got = Vec::new();
    for _ in 0..n {
        let d = tokio::time::timeout(WAIT, tcp.next())
            .await
            .expect("a TCP delivery in time")
            .expect("connection open")
            .unwrap();
        tcp.ack(&d.delivery_id).await.unwrap();
        got.push(d);
    }
    got
}
