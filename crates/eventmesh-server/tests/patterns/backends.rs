//! Pattern subscriptions on the shared backends: JetStream with two
//! instances, and `PARTITION_OWNED_PULL` with three.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;

use crate::common::hook::{start_hook, HookMode};
use crate::common::topics::admin;
use crate::common::*;
use crate::{attached, drain, ev, follows, owned, sorted};

fn js_settings(nats: &str, prefix: &str) -> Vec<String> {
    vec![
        "eventmesh.storage.type=jetstream".to_string(),
        format!("eventmesh.storage.jetstream.servers={nats}"),
        format!("eventmesh.storage.jetstream.stream.prefix={prefix}"),
        "eventmesh.storage.jetstream.timeout.ms=2000".to_string(),
        "eventmesh.topic.default.partitions=2".to_string(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetstream_attaches_topics_made_by_another_instance() {
    let nats = eventmesh_jetstream::testutil::NatsServer::start();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // A lists the topics only every ten minutes: within this test only the
    // servers' stream advisories can tell it of B's topics.
    let mut a_settings = js_settings(&nats.url(), "PAT");
    a_settings.push("eventmesh.topic.pattern.rescan.ms=600000".to_string());
    let a = Server::start_with(dir_a.path(), &a_settings);
    let b = Server::start_with(dir_b.path(), &js_settings(&nats.url(), "PAT"));
    let c = client();
    publish(&c, &b, "fleet.eu", &ev("eu-pre", "t")).await;
    subscribe(&c, &a, json!({"clientId": "watcher", "topic": "fleet.*"})).await;
    assert_eq!(
        attached(&c, &a).await,
        [("watcher".to_string(), owned(&["fleet.eu"]))]
    );

    // B makes one topic through its admin API, another by publishing.
    let (status, body) = admin(
        &c,
        &b,
        reqwest::Method::POST,
        "/admin/topics",
        Some(json!({"name": "fleet.us"})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    publish(&c, &b, "fleet.us", &ev("us-1", "t")).await;
    publish(&c, &b, "fleet.apac", &ev("apac-1", "t")).await;
    publish(&c, &b, "fleet.eu", &ev("eu-1", "t")).await;
    publish(&c, &b, "trucks.eu", &ev("trucks-1", "t")).await;
    assert_eq!(
        drain(&c, &a, "watcher", None, 3).await,
        sorted(&["us-1", "apac-1", "eu-1"])
    );
    assert_eq!(
        follows(&c, &a, "watcher", &["fleet.apac", "fleet.eu", "fleet.us"]).await,
        owned(&["fleet.apac", "fleet.eu", "fleet.us"])
    );
    // B's topic deleted: A detaches it.
    let (status, body) = admin(
        &c,
        &b,
        reqwest::Method::DELETE,
        "/admin/topics/fleet.apac",
        None,
    )
    .await;
    assert_eq!(status, 204, "{body}");
    assert_eq!(
        follows(&c, &a, "watcher", &["fleet.eu", "fleet.us"]).await,
        owned(&["fleet.eu", "fleet.us"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_pull_claims_the_topics_a_pattern_follows() {
    use crate::common::mesh::*;
    let _one = SERIAL.lock().await;
    let mesh = Mesh::start(3, "OWNPAT", 10_000).await;
    let c = client();
    let (url, hook) = start_hook(HookMode::Accept).await;
    subscribe(
        &c,
        mesh.s(0),
        json!({"clientId": "hook", "group": "hooks", "topic": "parcels.*", "url": url}),
    )
    .await;
    // A topic made through the admin API of one instance, another by a
    // publish to a third; events published to both from every instance.
    let (status, body) = admin(
        &c,
        mesh.s(1),
        reqwest::Method::POST,
        "/admin/topics",
        Some(json!({"name": "parcels.eu"})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let mut want = publish_spread(&c, &mesh, "parcels.eu", 0, 300).await;
    want.extend(publish_spread(&c, &mesh, "parcels.us", 300, 600).await);
    publish_spread(&c, &mesh, "boxes.eu", 600, 650).await;
    let counts = hook_has(&hook, &want, Duration::from_secs(60)).await;
    assert_eq!(duplicates(&counts), 0);
    // Every partition of both topics is owned, spread over the three.
    for topic in ["parcels.eu", "parcels.us"] {
        let owners = settled(&c, mesh.s(0), topic, &ids(&mesh), Duration::from_secs(30)).await;
        let spread: BTreeSet<&String> = owners.values().collect();
        assert_eq!(spread.len(), 3, "{topic}: {owners:?}");
    }
    // Nothing of the other topic.
    let accepted = hook.lock().unwrap().accepted_ids();
    let mut want_sorted = want.clone();
    want_sorted.sort();
    assert_eq!(accepted, want_sorted);
}
