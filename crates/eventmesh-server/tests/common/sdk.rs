//! Driving the server through the Rust client (`eventmesh-client`):
//! polling until deliveries arrive, holding deliveries, and a request
//! waiting at its responder.

use std::time::Duration;

use eventmesh_client::{Delivery, EventMeshClient, StartFrom, SubscribeOptions};
use serde_json::Value;

use super::event;

/// How long a wait for a delivery may take.
const WAIT: Duration = Duration::from_secs(10);

/// Polls `client` (up to `want` at a time) until `want` deliveries came
/// or `within` passed; what came.
pub async fn poll_deliveries(
    sdk: &EventMeshClient,
    client: &str,
    want: usize,
    within: Duration,
) -> Vec<Delivery> {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    while got.len() < want && tokio::time::Instant::now() < deadline {
        got.extend(
            sdk.poll(client, Duration::from_millis(500), want)
                .await
                .unwrap(),
        );
    }
    got
}

/// Subscribes `client` (a pulling client, from the earliest event),
/// publishes `n` events to `topic`, and polls them: the deliveries, not
/// acknowledged.
pub async fn hold(sdk: &EventMeshClient, client: &str, topic: &str, n: usize) -> Vec<Delivery> {
    sdk.subscribe(SubscribeOptions::new(client, topic).from(StartFrom::Earliest))
        .await
        .unwrap();
    for i in 0..n {
        sdk.publish(topic, &event(&format!("{client}-{i}")))
            .await
            .unwrap();
    }
    let got = poll_deliveries(sdk, client, n, WAIT).await;
    assert_eq!(got.len(), n);
    got
}

/// The answer a requester waits for.
pub type Waiting = tokio::task::JoinHandle<eventmesh_client::Result<Value>>;

/// `responder` subscribes client `pricer` to `prices`, `requester` sends
/// it a request (waiting up to 10 s for the reply), and the responder
/// polls it: the request as delivered, and the requester's wait.
pub async fn request_at_responder(
    responder: &EventMeshClient,
    requester: EventMeshClient,
) -> (Delivery, Waiting) {
    responder
        .subscribe(SubscribeOptions::new("pricer", "prices"))
        .await
        .unwrap();
    let waiting = tokio::spawn(async move {
        requester
            .request("prices", &event("ask"), Duration::from_secs(10))
            .await
    });
    let mut got = poll_deliveries(responder, "pricer", 1, WAIT).await;
    let request = got.pop().expect("the request reached the responder");
    (request, waiting)
}
