//! Members that leave: a pulling member away (no poll, no stream) past
//! `eventmesh.delivery.member.timeout.ms` leaves its group's rotation, and
//! what it held goes to the others at once; it rejoins when it polls.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::*;

/// The state `/admin/clients` shows for `client`.
async fn state_of(c: &reqwest::Client, s: &Server, client: &str) -> Value {
    let clients: Vec<Value> = admin_json(c, s, "/admin/clients").await;
    clients
        .into_iter()
        .find(|v| v["clientId"] == client)
        .unwrap_or_else(|| panic!("{client} is not listed"))
}

#[tokio::test]
async fn a_member_away_past_the_timeout_hands_its_share_over_and_rejoins() {
    let dir = tempfile::tempdir().unwrap();
    // The ack timeout is far: only the member timeout moves what m1 holds.
    let s = Server::start(
        dir.path(),
        &[
            "eventmesh.delivery.member.timeout.ms=1500",
            "eventmesh.delivery.ack.timeout.ms=600000",
            "eventmesh.topic.default.partitions=4",
        ],
    );
    let c = client();
    for m in ["m1", "m2"] {
        subscribe(
            &c,
            &s,
            json!({"clientId": m, "topic": "work", "group": "g"}),
        )
        .await;
    }
    let batch: Vec<Value> = (0..40)
        .map(|i| {
            let mut e = event(&format!("e{i}"));
            e["partitionkey"] = json!(format!("k{i}"));
            e
        })
        .collect();
    for e in &batch {
        publish(&c, &s, "work", e).await;
    }
    // m1 takes part of its share and goes away without acknowledging.
    let taken = poll_n(&c, &s, "m1", 1, Duration::from_secs(10)).await;
    assert!(!taken.is_empty());
    let away = Instant::now();
    assert_eq!(state_of(&c, &s, "m1").await["state"], "active");
    // m2 goes on polling and acknowledging: it gets everything, m1's
    // share included, once m1 has been away 1.5 s.
    let mut got = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < 40 {
        assert!(
            Instant::now() < deadline,
            "m2 got only {}: {got:?}",
            got.len()
        );
        for d in poll_n(&c, &s, "m2", 1, Duration::from_millis(500)).await {
            assert_eq!(ack(&c, &s, d["deliveryId"].as_str().unwrap()).await, 200);
            got.insert(d["event"]["id"].as_str().unwrap().to_string());
        }
    }
    let took = away.elapsed();
    eprintln!("m1's share reached m2 {took:?} after m1 went away (timeout 1.5 s)");
    assert!(caught_up(&c, &s, "work", Duration::from_secs(10)).await);
    let m1 = state_of(&c, &s, "m1").await;
    assert_eq!(m1["state"], "idle", "{m1}");
    let since = m1["idleSinceMs"].as_u64().unwrap();
    assert!(since <= eventmesh_core::time::now_ms(), "{m1}");
    assert_eq!(state_of(&c, &s, "m2").await["state"], "active");
    // What m1 took is settled by m2 now: its old ids settle nothing.
    assert_eq!(
        ack(&c, &s, taken[0]["deliveryId"].as_str().unwrap()).await,
        404
    );

    // m1 polls again: back in rotation, it gets its keys' new events.
    assert!(poll_n(&c, &s, "m1", 1, Duration::from_millis(200))
        .await
        .is_empty());
    assert_eq!(state_of(&c, &s, "m1").await["state"], "active");
    let mut m1_got = 0;
    for i in 40..80 {
        let mut e = event(&format!("e{i}"));
        e["partitionkey"] = json!(format!("k{i}"));
        publish(&c, &s, "work", &e).await;
    }
    let mut seen = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.len() < 40 {
        assert!(Instant::now() < deadline, "got only {seen:?}");
        for (m, d) in [
            (
                "m1",
                poll_n(&c, &s, "m1", 1, Duration::from_millis(300)).await,
            ),
            (
                "m2",
                poll_n(&c, &s, "m2", 1, Duration::from_millis(300)).await,
            ),
        ]
        .into_iter()
        .flat_map(|(m, ds)| ds.into_iter().map(move |d| (m, d)))
        {
            assert_eq!(ack(&c, &s, d["deliveryId"].as_str().unwrap()).await, 200);
            assert!(
                seen.insert(d["event"]["id"].as_str().unwrap().to_string()),
                "{d}"
            );
            m1_got += usize::from(m == "m1");
        }
    }
    assert!(m1_got > 0, "m1 rejoined but got nothing");
}
