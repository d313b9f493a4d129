//! Delivery through the real binary: webhook pushes (with retries) to a
//! real HTTP server, long poll and ack, ack timeouts, load-balanced and
//! broadcast groups, and resuming after a restart from the last ack.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use common::hook::{start_hook, HookMode};
use common::*;
use serde_json::{json, Value};

#[tokio::test]
async fn webhook_receives_every_event_with_retries() {
    let (hook_url, hook) = start_hook(HookMode::FailFirst(2)).await;
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    subscribe(
        &c,
        &s,
        json!({"clientId": "hook-1", "topic": "pay", "url": hook_url}),
    )
    .await;
    for i in 0..5 {
        let mut ev = event(&format!("p{i}"));
        ev["partitionkey"] = format!("k{i}").into();
        publish(&c, &s, "pay", &ev).await;
    }
    assert!(
        wait_until(
            || hook.lock().unwrap().accepted.len() >= 5,
            Duration::from_secs(20)
        )
        .await,
        "webhook got {:?}\n{}",
        hook.lock().unwrap().accepted,
        s.log_text()
    );
    {
        let h = hook.lock().unwrap();
        let ids: HashSet<&str> = h.accepted.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(
            ids,
            (0..5)
                .map(|i| format!("p{i}"))
                .collect::<HashSet<_>>()
                .iter()
                .map(String::as_str)
                .collect()
        );
        // Binary mode: the body is the event's data.
        let (_, _, body) = h.accepted.iter().find(|r| r.0 == "p0").unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(body).unwrap(),
            json!({"n": "p0"})
        );
        assert!(h.attempts.values().all(|n| *n == 3), "{:?}", h.attempts);
        assert_eq!(h.accepted.len(), 5, "each event accepted once");
    }
    // The runtime counts an ack once it has read the receiver's answer,
    // which may come a moment after the receiver recorded the push.
    let acks = metric_reaching(&c, &s, "eventmesh_acks_total", 5.0, Duration::from_secs(10)).await;
    assert_eq!(acks, 5.0);
    let m = metrics(&c, &s).await;
    for (series, want) in [
        ("eventmesh_events_dispatched_total", 5.0),
        ("eventmesh_push_failures_total", 10.0),
        ("eventmesh_redeliveries_total", 10.0),
        ("eventmesh_dead_letters_total", 0.0),
        ("eventmesh_nacks_total", 0.0),
    ] {
        assert_eq!(m.get(series), want, "{series}:\n{}", m.text);
    }
}

#[tokio::test]
async fn poll_and_ack() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    subscribe(&c, &s, json!({"clientId": "puller", "topic": "jobs"})).await;
    for i in 0..3 {
        publish(&c, &s, "jobs", &event(&format!("j{i}"))).await;
    }
    let got = poll_n(&c, &s, "puller", 3, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 3, "{got:?}");
    let mut ids: Vec<&str> = got
        .iter()
        .map(|d| d["event"]["id"].as_str().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, ["j0", "j1", "j2"]);
    assert_eq!(got[0]["event"]["specversion"], "1.0");
    for d in &got {
        assert_eq!(ack(&c, &s, d["deliveryId"].as_str().unwrap()).await, 200);
    }
    // A second ack of the same delivery matches nothing.
    assert_eq!(
        ack(&c, &s, got[0]["deliveryId"].as_str().unwrap()).await,
        404
    );
    // Committed offsets catch up with the log once the acks are flushed.
    let mut rows: Vec<Value> = Vec::new();
    for _ in 0..100 {
        rows = admin_json(&c, &s, "/admin/offsets?topic=jobs").await;
        if rows.iter().all(|r| r["lag"] == 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(rows.len(), 4, "one row per partition: {rows:?}");
    assert!(
        rows.iter()
            .all(|r| r["consumer"] == "default" && r["lag"] == 0),
        "{rows:?}"
    );
    let committed: u64 = rows.iter().map(|r| r["committed"].as_u64().unwrap()).sum();
    assert_eq!(committed, 3);
    let subs: Vec<Value> = admin_json(&c, &s, "/admin/subscriptions?topic=jobs").await;
    assert_eq!(subs.len(), 1);
    assert_eq!(subs[0]["clientId"], "puller");
    let (st, v) = post_json(
        &c,
        s.url("/events/unsubscribe"),
        json!({"clientId": "puller"}),
    )
    .await;
    assert_eq!((st, v["removed"].as_bool()), (200, Some(true)));
    let (_, v) = post_json(
        &c,
        s.url("/events/unsubscribe"),
        json!({"clientId": "puller"}),
    )
    .await;
    assert_eq!(v["removed"], false);
}

#[tokio::test]
async fn unacked_delivery_comes_again_after_ack_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.delivery.ack.timeout.ms=300"]);
    let c = client();
    subscribe(&c, &s, json!({"clientId": "slow", "topic": "t"})).await;
    publish(&c, &s, "t", &event("once")).await;
    let first = poll_n(&c, &s, "slow", 1, Duration::from_secs(10)).await;
    assert_eq!(first.len(), 1);
    let again = poll_n(&c, &s, "slow", 1, Duration::from_secs(10)).await;
    assert_eq!(again.len(), 1, "redelivered after the ack timeout");
    assert_eq!(again[0]["event"]["id"], "once");
    assert_ne!(again[0]["deliveryId"], first[0]["deliveryId"]);
    // The stale id is retired; the new one acks.
    assert_eq!(
        ack(&c, &s, first[0]["deliveryId"].as_str().unwrap()).await,
        404
    );
    assert_eq!(
        ack(&c, &s, again[0]["deliveryId"].as_str().unwrap()).await,
        200
    );
}

#[tokio::test]
async fn load_balance_splits_and_broadcast_copies() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    for m in ["lb-a", "lb-b"] {
        subscribe(
            &c,
            &s,
            json!({"clientId": m, "topic": "fan", "group": "workers"}),
        )
        .await;
    }
    for m in ["bc-a", "bc-b"] {
        subscribe(
            &c,
            &s,
            json!({"clientId": m, "topic": "fan", "group": "audit", "mode": "BROADCAST"}),
        )
        .await;
    }
    // Mixing modes in one group is refused.
    let (st, _) = post_json(
        &c,
        s.url("/events/subscribe"),
        json!({"clientId": "x", "topic": "fan", "group": "workers", "mode": "BROADCAST"}),
    )
    .await;
    assert_eq!(st, 409);
    let n = 40;
    for i in 0..n {
        let mut ev = event(&format!("f{i}"));
        ev["partitionkey"] = format!("key-{}", i % 10).into();
        publish(&c, &s, "fan", &ev).await;
    }
    let mut lb_total = 0;
    let mut seen = HashSet::new();
    let mut by_key: HashMap<String, HashSet<String>> = HashMap::new();
    for m in ["lb-a", "lb-b"] {
        let got = poll_n(&c, &s, m, n, Duration::from_secs(3)).await;
        assert!(
            !got.is_empty(),
            "{m} got nothing: both members share the load"
        );
        lb_total += got.len();
        for d in &got {
            seen.insert(d["event"]["id"].as_str().unwrap().to_string());
            by_key
                .entry(d["event"]["partitionkey"].as_str().unwrap().to_string())
                .or_default()
                .insert(m.to_string());
            ack(&c, &s, d["deliveryId"].as_str().unwrap()).await;
        }
    }
    assert_eq!(lb_total, n, "each event to exactly one group member");
    assert_eq!(seen.len(), n);
    assert!(
        by_key.values().all(|members| members.len() == 1),
        "sticky by key: {by_key:?}"
    );
    for m in ["bc-a", "bc-b"] {
        let got = poll_n(&c, &s, m, n, Duration::from_secs(10)).await;
        assert_eq!(got.len(), n, "{m}: every broadcast member gets every event");
    }
}

/// Events without a partition key go by their partition, and a group's
/// members share the topic's partitions evenly: on 4 partitions, each of
/// two members takes every event of exactly 2. Four groups, so that an
/// uneven share cannot pass by the luck of the ids.
#[tokio::test]
async fn a_groups_members_share_the_partitions_evenly() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    let groups = ["g0", "g1", "g2", "g3"];
    for g in groups {
        for m in ["a", "b"] {
            let client = format!("{g}-{m}");
            subscribe(
                &c,
                &s,
                json!({"clientId": client, "topic": "even", "group": g}),
            )
            .await;
        }
    }
    let n = 40;
    let mut partition_of = HashMap::new();
    for i in 0..n {
        let id = format!("e{i}");
        let placed = publish(&c, &s, "even", &event(&id)).await;
        partition_of.insert(id, placed["partition"].as_u64().unwrap());
    }
    let all: HashSet<u64> = partition_of.values().copied().collect();
    assert_eq!(all.len(), 4, "{n} events over the topic's 4 partitions");
    for g in groups {
        let mut taken: HashMap<&str, HashSet<u64>> = HashMap::new();
        let mut total = 0;
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while total < n {
            assert!(
                std::time::Instant::now() < deadline,
                "{g}: {total} of {n} delivered"
            );
            for m in ["a", "b"] {
                let client = format!("{g}-{m}");
                for d in poll_n(&c, &s, &client, 1, Duration::from_millis(600)).await {
                    let id = d["event"]["id"].as_str().unwrap();
                    taken.entry(m).or_default().insert(partition_of[id]);
                    total += 1;
                }
            }
        }
        assert_eq!(total, n, "{g}: each event to one member");
        let a = taken.remove("a").unwrap_or_default();
        let b = taken.remove("b").unwrap_or_default();
        assert_eq!(
            (a.len(), b.len()),
            (2, 2),
            "{g}: partitions {a:?} and {b:?}"
        );
        assert!(a.is_disjoint(&b), "{g}: partitions {a:?} and {b:?}");
    }
}

#[tokio::test]
async fn restart_resumes_after_the_last_ack() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &[]);
    let c = client();
    subscribe(
        &c,
        &s,
        json!({"clientId": "durable", "topic": "ledger", "from": "earliest"}),
    )
    .await;
    for i in 0..4 {
        let mut ev = event(&format!("l{i}"));
        ev["partitionkey"] = "one-partition".into();
        publish(&c, &s, "ledger", &ev).await;
    }
    let got = poll_n(&c, &s, "durable", 4, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 4);
    let by_id: HashMap<&str, &str> = got
        .iter()
        .map(|d| {
            (
                d["event"]["id"].as_str().unwrap(),
                d["deliveryId"].as_str().unwrap(),
            )
        })
        .collect();
    // Ack l0, l1 and l3 but not l2: the watermark stops at l2.
    for id in ["l0", "l1", "l3"] {
        assert_eq!(ack(&c, &s, by_id[id]).await, 200);
    }
    let mut s2 = s.restart();
    assert!(
        s2.log_text().contains("subscriptions restored"),
        "{}",
        s2.log_text()
    );
    let subs: Vec<Value> = admin_json(&c, &s2, "/admin/subscriptions").await;
    assert_eq!(subs.len(), 1, "subscription survives the restart");
    let again = poll_n(&c, &s2, "durable", 2, Duration::from_secs(10)).await;
    let ids: Vec<&str> = again
        .iter()
        .map(|d| d["event"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["l2", "l3"],
        "unacked l2 comes again (and l3 after it); l0 and l1 never"
    );
    // Delivery ids from the previous run match nothing.
    assert_eq!(ack(&c, &s2, by_id["l2"]).await, 404);
    for d in &again {
        assert_eq!(ack(&c, &s2, d["deliveryId"].as_str().unwrap()).await, 200);
    }
    // Nothing acknowledged comes again: the next event of the partition is
    // the next delivery.
    publish(&c, &s2, "ledger", &json!({"specversion": "1.0", "id": "l4", "source": "/t", "type": "t", "partitionkey": "one-partition"})).await;
    let next = poll_n(&c, &s2, "durable", 1, Duration::from_secs(10)).await;
    let ids: Vec<&str> = next
        .iter()
        .map(|d| d["event"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["l4"]);

    // After kill -9, acknowledged events stay acknowledged once flushed, and
    // one delivered but not acknowledged before the crash comes again.
    assert!(
        committed_reaches(&c, &s2, "ledger", 4, Duration::from_secs(10)).await,
        "the acks of l0..l3 were never committed:\n{}",
        s2.log_text()
    );
    s2.kill9();
    let s3 = s2.restart();
    let after = poll_n(&c, &s3, "durable", 1, Duration::from_secs(10)).await;
    let ids: Vec<&str> = after
        .iter()
        .map(|d| d["event"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["l4"]);
}

#[tokio::test]
async fn events_go_to_the_dead_letter_store_after_the_last_attempt() {
    let (hook_url, hook) = start_hook(HookMode::Refuse).await;
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.delivery.max.attempts=3"]);
    let c = client();
    subscribe(
        &c,
        &s,
        json!({"clientId": "doomed", "topic": "dlq", "url": hook_url}),
    )
    .await;
    for i in 0..3 {
        publish(&c, &s, "dlq", &event(&format!("x{i}"))).await;
    }
    let mut dead: Vec<Value> = Vec::new();
    for _ in 0..200 {
        dead = admin_json(&c, &s, "/admin/dlq/browse?topic=dlq&max=10").await;
        if dead.len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(dead.len(), 3, "{dead:?}\n{}", s.log_text());
    for d in &dead {
        assert_eq!(d["attempts"], 3, "{d}");
        assert!(d["lastError"].as_str().unwrap().contains("500"), "{d}");
        let ev: Value = serde_json::from_str(d["eventJson"].as_str().unwrap()).unwrap();
        assert_eq!(ev["source"], "/tests");
    }
    assert!(hook.lock().unwrap().attempts.values().all(|n| *n == 3));
    // Counted once the write is confirmed, a moment after it shows.
    let dead_count = metric_reaching(
        &c,
        &s,
        "eventmesh_dead_letters_total",
        3.0,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(dead_count, 3.0);
    let m = metrics(&c, &s).await;
    for (series, want) in [
        ("eventmesh_acks_total", 0.0),
        ("eventmesh_push_failures_total", 9.0),
        ("eventmesh_redeliveries_total", 6.0),
    ] {
        assert_eq!(m.get(series), want, "{series}:\n{}", m.text);
    }
    // Pending until the next offset flush commits past the dead letters.
    let pending = metric_reaching(
        &c,
        &s,
        "eventmesh_pending_deliveries",
        0.0,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(pending, 0.0);

    // The webhook heals; replaying re-publishes to the same subscription,
    // and a puller in another group gets the replayed events too.
    hook.lock().unwrap().mode = HookMode::Accept;
    subscribe(
        &c,
        &s,
        json!({"clientId": "rescuer", "topic": "dlq", "group": "rescue"}),
    )
    .await;
    let r = c
        .post(s.admin_url("/admin/dlq/replay?topic=dlq"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let outcome: Value = r.json().await.unwrap();
    assert_eq!(outcome, json!({"replayed": 3, "failed": 0}));
    let left: Vec<Value> = admin_json(&c, &s, "/admin/dlq/browse?topic=dlq").await;
    assert!(left.is_empty(), "{left:?}");
    let got = poll_n(&c, &s, "rescuer", 3, Duration::from_secs(10)).await;
    let mut ids: Vec<&str> = got
        .iter()
        .map(|d| d["event"]["id"].as_str().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, ["x0", "x1", "x2"]);
    assert!(
        wait_until(
            || hook.lock().unwrap().accepted.len() >= 3,
            Duration::from_secs(10)
        )
        .await,
        "{:?}",
        hook.lock().unwrap().accepted
    );
    assert_eq!(hook.lock().unwrap().accepted_ids(), ["x0", "x1", "x2"]);
}

#[tokio::test]
async fn attempts_survive_kill_minus_nine_through_the_ledger() {
    let (hook_url, hook) = start_hook(HookMode::Refuse).await;
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(
        dir.path(),
        &[
            "eventmesh.delivery.max.attempts=4",
            "eventmesh.delivery.backoff.initial.ms=200",
            "eventmesh.delivery.backoff.max.ms=200",
        ],
    );
    let c = client();
    subscribe(
        &c,
        &s,
        json!({"clientId": "crashy", "topic": "ledger", "url": hook_url}),
    )
    .await;
    publish(&c, &s, "ledger", &event("once")).await;
    let seen = || {
        hook.lock()
            .unwrap()
            .attempts
            .get("once")
            .copied()
            .unwrap_or(0)
    };
    assert!(wait_until(|| seen() >= 2, Duration::from_secs(20)).await);
    // Let the ledger flush record the attempt count, then crash. The ledger
    // is written behind with no outward sign of a flush; this is two flush
    // intervals, and the bounds below hold whichever flush it caught.
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.kill9();
    let before = seen();
    let s2 = s.restart();
    let mut dead: Vec<Value> = Vec::new();
    for _ in 0..200 {
        dead = admin_json(&c, &s2, "/admin/dlq/browse?topic=ledger").await;
        if !dead.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(dead.len(), 1, "{}", s2.log_text());
    assert!(
        s2.log_text()
            .contains("recovered in-flight deliveries from the ledger"),
        "{}",
        s2.log_text()
    );
    let total = seen();
    // Counting restarted from zero would take four more attempts after the
    // crash; keeping the ledger's count needs at most one more than the max.
    assert!(before >= 2 && total >= 4, "before {before}, total {total}");
    assert!(
        total < before + 4,
        "attempts restarted from zero: before {before}, total {total}"
    );
}
