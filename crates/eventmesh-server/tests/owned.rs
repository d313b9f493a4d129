//! `PARTITION_OWNED_PULL` with real processes: three `eventmesh` instances
//! on a three-node NATS JetStream cluster and a real etcd.
//!
//! | scenario | test |
//! |---|---|
//! | refused at boot without cluster, etcd, secret, JetStream or a reachable address, each named | [`refused_without_what_it_needs`] |
//! | the internal channel: absent without ownership, secret required | [`the_internal_channel_exists_only_with_ownership`], [`three_instances_deliver_each_event_once_per_group`] |
//! | steady state, 50,000 events: once to a webhook group and once to a group whose members poll different instances, partitions spread over all three | [`three_instances_deliver_each_event_once_per_group`] |
//! | a client's instance killed: it polls another and gets the rest | [`a_client_moves_to_another_instance_when_its_own_dies`] |
//! | kill -9 under load: nothing lost, partitions owned again after the lease | [`a_killed_owner_is_replaced_after_its_lease`] |
//! | graceful leave (SIGTERM) under load: owned again at once, nothing twice | [`a_graceful_leave_hands_over_at_once_without_duplicates`] |
//! | zombie owner (SIGSTOP past its lease): its writes refused and counted | [`a_frozen_owner_is_fenced`] |
//! | etcd down: publishing goes on, nothing handed out without a lease, not ready; back: settles, ready, nothing lost | [`etcd_down_and_back`] |
//! | a fourth instance joins under load and takes a share | [`a_joiner_takes_a_share_under_load`] |
//! | "latest" is where the log ended when the subscription was made, though some partitions are first dispatched seconds later | [`latest_is_fixed_when_the_subscription_is_made`] |
//! | owners filter before they forward | [`owners_filter_before_they_forward`] |
//! | an event expired before its client polls is not handed out, whether its partition is owned by the client's instance or forwarded to it | [`expired_events_are_not_handed_out_whoever_owns_them`] |
//! | a polling member whose instance is killed -9 while it holds deliveries: the surviving members get all of it within the member timeout and the lease | [`a_member_whose_instance_dies_hands_its_share_to_the_others`] |
//! | events held back (`deliverat`) are released by the owners of their partitions, those of a killed owner by the instance that takes its partitions over: each delivered once, none before its time | [`held_back_events_are_released_by_the_owners_even_when_one_dies`] |
//! | a group reset while one instance is killed -9: refused while deliveries are held, forced through the owners (a killed owner's partitions once the new owners have them), everything delivered again | [`a_group_reset_goes_through_the_owners_while_one_is_killed`] |
//!
//! `owned_requests.rs` covers request-reply across instances; `chaos.rs`
//! runs a random schedule of these faults under load.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::hook::HookMode;
use common::mesh::*;
use common::*;
use serde_json::{json, Value};

#[test]
fn refused_without_what_it_needs() {
    let owned = "eventmesh.delivery.topology=PARTITION_OWNED_PULL";
    for (extra, names) in [
        (vec![owned], "eventmesh.cluster.enabled=true"),
        (
            vec![owned, "eventmesh.cluster.enabled=true"],
            "eventmesh.meta.type=etcd",
        ),
        (
            vec![
                owned,
                "eventmesh.cluster.enabled=true",
                "eventmesh.meta.type=etcd",
            ],
            "eventmesh.cluster.secret",
        ),
        (
            vec![
                owned,
                "eventmesh.cluster.enabled=true",
                "eventmesh.meta.type=etcd",
                "eventmesh.cluster.secret=owned-test-secret-0123",
            ],
            "eventmesh.storage.type=jetstream",
        ),
        (
            vec![
                owned,
                "eventmesh.cluster.enabled=true",
                "eventmesh.meta.type=etcd",
                "eventmesh.cluster.secret=owned-test-secret-0123",
                "eventmesh.server.host=0.0.0.0",
            ],
            "eventmesh.cluster.advertise.address",
        ),
        (
            vec![
                owned,
                "eventmesh.cluster.enabled=true",
                "eventmesh.meta.type=etcd",
                "eventmesh.cluster.secret=owned-test-secret-0123",
                "eventmesh.cluster.advertise.address=0.0.0.0:10105",
            ],
            "eventmesh.cluster.advertise.address \"0.0.0.0:10105\" names a wildcard host",
        ),
    ] {
        let mut args = vec!["serve", "-D", "eventmesh.storage.type=standalone"];
        for e in &extra {
            args.extend(["-D", e]);
        }
        let (status, err) = run_to_exit(&args, &[]);
        assert_eq!(status.code(), Some(2), "{err}");
        assert!(err.contains(names), "{names} not named in: {err}");
        assert!(!err.contains("listening"), "{err}");
    }
}

#[tokio::test]
async fn the_internal_channel_exists_only_with_ownership() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    let r = c
        .post(s.url("/internal/settle"))
        .bearer_auth("anything")
        .json(&json!({"deliveryId": "x", "nack": false, "checkOwner": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

/// Events of the steady-state test.
const STEADY_EVENTS: usize = 50_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_deliver_each_event_once_per_group() {
    let _one = SERIAL.lock().await;
    let (mesh, c, hook, owners) = hooked_mesh("OWN1", 10_000, "orders", HookMode::Accept).await;
    // The internal channel wants the cluster secret.
    for auth in [None, Some("wrong")] {
        let mut r = c.post(mesh.s(0).url("/internal/deliveries"));
        if let Some(a) = auth {
            r = r.bearer_auth(a);
        }
        let r = r
            .json(&json!({"clientId": "x", "deliveries": []}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"], "unauthorized");
    }
    let spread: BTreeSet<&String> = owners.values().collect();
    assert_eq!(spread.len(), 3, "every instance owns some: {owners:?}");
    // Every instance sees the same owners, and owns what it reports.
    for k in 1..3 {
        let theirs = settled(
            &c,
            mesh.s(k),
            "orders",
            &ids(&mesh),
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(theirs, owners);
    }
    let mut total = 0.0;
    for k in 0..3 {
        let n = metric(&c, mesh.s(k), "eventmesh_owned_partitions").await;
        let mine = owners.values().filter(|o| **o == format!("i-{k}")).count();
        assert_eq!(n, mine as f64, "i-{k}");
        total += n;
    }
    assert_eq!(total, f64::from(PARTITIONS));

    // Besides the webhook group, a pulling group with one member on each
    // instance, each polling and acknowledging there.
    for k in 0..3 {
        subscribe(
            &c,
            mesh.s(k),
            json!({"clientId": format!("m{k}"), "group": "spread", "topic": "orders"}),
        )
        .await;
    }
    let got: Received = Received::default();
    let stop = tokio_util::sync::CancellationToken::new();
    let pollers: Vec<_> = (0..3)
        .map(|k| {
            tokio::spawn(poll_and_ack(
                c.clone(),
                mesh.s(k).traffic.clone(),
                k,
                got.clone(),
                stop.clone(),
            ))
        })
        .collect();
    let started = Instant::now();
    let accepted = publish_spread(&c, &mesh, "orders", 0, STEADY_EVENTS).await;
    let published = started.elapsed();
    let counts = hook_has(&hook, &accepted, Duration::from_secs(600)).await;
    let hooked = started.elapsed();
    received_all(&got, &accepted, Duration::from_secs(600), "events came").await;
    let pulled = started.elapsed();
    stop.cancel();
    for p in pollers {
        p.await.unwrap();
    }
    eprintln!(
        "{STEADY_EVENTS} events: published in {published:?}, all pushed by {hooked:?}, all pulled by {pulled:?} (debug build)"
    );
    let duplicates: Vec<(&String, &usize)> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        duplicates.is_empty(),
        "pushed more than once: {duplicates:?}"
    );
    assert_eq!(counts.len(), accepted.len());
    let got = got.lock().unwrap().clone();
    let mut seen = BTreeSet::new();
    let twice: Vec<&String> = got
        .iter()
        .map(|(_, id)| id)
        .filter(|id| !seen.insert(*id))
        .collect();
    assert!(twice.is_empty(), "pulled twice: {twice:?}");
    assert_eq!(seen.len(), accepted.len());
    for k in 0..3 {
        let n = got.iter().filter(|(m, _)| *m == k).count();
        eprintln!("member m{k} (polling i-{k}) received {n}");
        assert!(n > 0, "m{k} received nothing");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_owner_is_replaced_after_its_lease() {
    let _one = SERIAL.lock().await;
    let (mut mesh, c, hook, _) = hooked_mesh("OWN2", LEASE_MS, "ledger", HookMode::Accept).await;
    let mut accepted = publish_spread(&c, &mesh, "ledger", 0, 1500).await;
    // Killed while its deliveries are under way.
    mesh.servers[2].as_mut().unwrap().kill9();
    let killed = Instant::now();
    mesh.servers[2] = None;
    accepted.extend(publish_spread(&c, &mesh, "ledger", 1500, 3000).await);
    settled(
        &c,
        mesh.s(0),
        "ledger",
        &ids(&mesh),
        Duration::from_secs(30),
    )
    .await;
    let took = killed.elapsed();
    eprintln!("partitions of the killed instance owned again {took:?} after kill -9 (lease {LEASE_MS} ms)");
    assert!(
        took <= Duration::from_millis(LEASE_MS + 2000) + Duration::from_secs(2),
        "took {took:?}"
    );
    let counts = hook_has(&hook, &accepted, Duration::from_secs(120)).await;
    let duplicates = duplicates(&counts);
    // Only what the dead owner had in flight or acknowledged but not yet
    // committed comes again: at most its window (1024 by default).
    eprintln!("duplicates after kill -9: {duplicates}");
    assert!(duplicates <= 1024, "{duplicates} duplicates");
}

/// A subscription from "latest" made while one of two instances is frozen:
/// the partitions assigned to it are first dispatched only once its lease
/// has ended, seconds later, by the other. The events published right
/// after the subscription was answered are delivered all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_is_fixed_when_the_subscription_is_made() {
    let _one = SERIAL.lock().await;
    let mesh = Mesh::start(2, "OWNLATEST", LEASE_MS).await;
    let c = client();
    let (url, hook) = common::hook::start_hook(HookMode::Accept).await;
    // Events before the subscription: not wanted.
    let before: Vec<Value> = (0..24).map(|i| event(&format!("old{i}"))).collect();
    publish_retrying(&c, mesh.s(0), "fresh", &before).await;
    mesh.s(1).signal("STOP");
    let frozen = Instant::now();
    subscribe(
        &c,
        mesh.s(0),
        json!({"clientId": "hook", "group": "hooks", "topic": "fresh", "url": url}),
    )
    .await;
    let batch: Vec<Value> = (0..48).map(|i| event(&format!("new{i}"))).collect();
    publish_retrying(&c, mesh.s(0), "fresh", &batch).await;
    let published_after = frozen.elapsed();
    let want: Vec<String> = (0..48).map(|i| format!("new{i}")).collect();
    let counts = hook_has(&hook, &want, Duration::from_secs(60)).await;
    mesh.s(1).signal("CONT");
    // The frozen instance's share was claimed only past its lease, well
    // after the events were published.
    assert!(
        published_after < Duration::from_millis(LEASE_MS),
        "published {published_after:?} after the freeze: the test proves nothing"
    );
    let old: Vec<&String> = counts.keys().filter(|id| id.starts_with("old")).collect();
    assert!(
        old.is_empty(),
        "events from before the subscription: {old:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_leave_hands_over_at_once_without_duplicates() {
    let _one = SERIAL.lock().await;
    // The default lease: the others must not wait for it to run out.
    let lease = Duration::from_millis(10_000);
    let (mut mesh, c, hook, _) = hooked_mesh("OWN6", 10_000, "moves", HookMode::Accept).await;
    let mut accepted = publish_spread(&c, &mesh, "moves", 0, 1500).await;
    // Leaves while its deliveries are under way.
    mesh.s(2).signal("TERM");
    let asked = Instant::now();
    let mut leaver = mesh.servers[2].take().unwrap();
    // Publishing goes on meanwhile.
    let (more, took) = tokio::join!(publish_spread(&c, &mesh, "moves", 1500, 3000), async {
        settled(&c, mesh.s(0), "moves", &ids(&mesh), Duration::from_secs(30)).await;
        asked.elapsed()
    });
    accepted.extend(more);
    let status = leaver.wait_exit();
    assert!(status.success(), "{status:?}");
    eprintln!(
        "partitions of the leaving instance owned again {took:?} after SIGTERM (lease {lease:?})"
    );
    // Owned again before its lease could have run out: it was revoked.
    assert!(took < lease, "took {took:?}");
    // What it handed out was acknowledged and committed before it let go:
    // nothing comes twice.
    let counts = hook_has(&hook, &accepted, Duration::from_secs(120)).await;
    assert_eq!(duplicates(&counts), 0);
    assert_eq!(counts.len(), accepted.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_owner_is_fenced() {
    let _one = SERIAL.lock().await;
    // Slow pushes: the frozen instance has deliveries under way.
    let slow = HookMode::Slow(Duration::from_millis(300));
    let (mesh, c, hook, owners) = hooked_mesh("OWN3", LEASE_MS, "frozen", slow).await;
    // And a pulling client, attached to i-2 (the topic's owners stay).
    let frozen = mesh.s(2);
    subscribe(
        &c,
        frozen,
        json!({"clientId": "puller", "group": "pullers", "topic": "frozen"}),
    )
    .await;
    assert!(owners.values().any(|o| o == "i-2"));
    let mut accepted = publish_spread(&c, &mesh, "frozen", 0, 600).await;
    // i-2 hands out events of its partitions, then freezes past its lease.
    let held = poll_n(&c, frozen, "puller", 5, Duration::from_secs(20)).await;
    assert!(held.len() >= 5, "i-2 handed out {} events", held.len());
    frozen.signal("STOP");
    let others = ["i-0".to_string(), "i-1".to_string()];
    let deadline = Instant::now() + Duration::from_millis(LEASE_MS) + Duration::from_secs(20);
    loop {
        let view = cluster_view(&c, mesh.s(0)).await;
        let owners = owners_of(&view, "frozen");
        if owners.len() == PARTITIONS as usize && owners.values().all(|o| others.contains(o)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the others did not take over: {view}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    frozen.signal("CONT");
    // The events it handed out before are acknowledged now: refused, as
    // their partitions are no longer its own.
    for d in &held {
        let r = c
            .post(frozen.url("/events/ack"))
            .json(&json!({"deliveryId": d["deliveryId"]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 409);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"], "fenced", "{body}");
    }
    // Its pushes under way come back now, and its offsets are committed
    // in the name of its old claims: every such write is refused and
    // counted.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let m = metrics(&c, frozen).await;
        let fenced: f64 = m
            .samples
            .iter()
            .filter(|(k, _)| k.starts_with("eventmesh_fenced_writes_total{"))
            .map(|(_, v)| v)
            .sum();
        if fenced >= held.len() as f64 {
            eprintln!("fenced writes of the thawed owner: {fenced}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no fenced write counted:\n{}",
            frozen.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Back, it registers again and takes its share anew (new tokens).
    settled(
        &c,
        mesh.s(0),
        "frozen",
        &ids(&mesh),
        Duration::from_secs(30),
    )
    .await;
    // Nothing is lost: every event is delivered (at least once).
    accepted.extend(publish_spread(&c, &mesh, "frozen", 600, 700).await);
    hook_has(&hook, &accepted, Duration::from_secs(60)).await;
}

/// What the pollers of a group received: (member, event id).
type Received = std::sync::Arc<std::sync::Mutex<Vec<(usize, String)>>>;

/// Waits until every id of `want` is in `got`; past `within` it fails
/// saying how many of them `what`.
async fn received_all(got: &Received, want: &[String], within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    loop {
        let have: BTreeSet<String> = got
            .lock()
            .unwrap()
            .iter()
            .map(|(_, id)| id.clone())
            .collect();
        if want.iter().all(|id| have.contains(id)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} {what}",
            have.len(),
            want.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls member `k` on its instance (`url`) and acknowledges there, until
/// `stop` (or until the instance is gone: a refused connection ends it);
/// every event id received goes into `got`.
async fn poll_and_ack(
    c: reqwest::Client,
    url: String,
    k: usize,
    got: Received,
    stop: tokio_util::sync::CancellationToken,
) {
    while !stop.is_cancelled() {
        let poll = format!("{url}/events/poll?clientId=m{k}&timeoutMs=300&max=100");
        let Ok(r) = c.get(poll).send().await else {
            return;
        };
        assert_eq!(r.status(), 200);
        let Ok(batch) = r.json::<Vec<Value>>().await else {
            return;
        };
        // The batch's acks go out together.
        let acks = batch.iter().map(|d| {
            c.post(format!("{url}/events/ack"))
                .json(&json!({"deliveryId": d["deliveryId"]}))
                .send()
        });
        // Every id of the batch was received. An ack whose answer is lost
        // with its instance may or may not have taken effect (if it did
        // not, the event comes again).
        let mut gone = false;
        for (d, ack) in batch.iter().zip(futures::future::join_all(acks).await) {
            match ack {
                Ok(r) => assert_eq!(r.status(), 200, "{}", r.text().await.unwrap()),
                Err(_) => gone = true,
            }
            let id = d["event"]["id"].as_str().unwrap().to_string();
            got.lock().unwrap().push((k, id));
        }
        if gone {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_down_and_back() {
    let _one = SERIAL.lock().await;
    let (mut mesh, c, hook, _) = hooked_mesh("OWN5", LEASE_MS, "calm", HookMode::Accept).await;
    let mut accepted = publish_spread(&c, &mesh, "calm", 0, 300).await;
    hook_has(&hook, &accepted, Duration::from_secs(60)).await;

    mesh.etcd.kill9();
    // Every instance stops handing out once it cannot vouch for its lease.
    let deadline = Instant::now() + Duration::from_millis(LEASE_MS) + Duration::from_secs(10);
    for k in 0..3 {
        while metric(&c, mesh.s(k), "eventmesh_owned_partitions").await != 0.0 {
            assert!(
                Instant::now() < deadline,
                "i-{k} still owns partitions without etcd"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // Publishing goes on (the log is JetStream's), but nothing is
    // delivered while etcd stays away.
    accepted.extend(publish_spread(&c, &mesh, "calm", 300, 600).await);
    let delivered = hook.lock().unwrap().accepted.len();
    assert_eq!(delivered, 300);
    let quiet_until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < quiet_until {
        assert_eq!(
            hook.lock().unwrap().accepted.len(),
            delivered,
            "delivered without a lease"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("delivered before every instance stood down: {delivered}");
    // No instance is ready for traffic without etcd.
    let down = (
        503,
        checks(&[
            ("lifecycle", true),
            ("storage", true),
            ("meta", false),
            ("partitions", false),
        ]),
    );
    for k in 0..3 {
        assert_eq!(ready(&c, mesh.s(k)).await, down, "i-{k}");
    }

    mesh.etcd.restart().await;
    settled(&c, mesh.s(0), "calm", &ids(&mesh), Duration::from_secs(60)).await;
    let up = (
        200,
        checks(&[
            ("lifecycle", true),
            ("storage", true),
            ("meta", true),
            ("partitions", true),
        ]),
    );
    for k in 0..3 {
        let got = ready_reaching(&c, mesh.s(k), &up, Duration::from_secs(30)).await;
        assert_eq!(got, up, "i-{k}");
    }
    let counts = hook_has(&hook, &accepted, Duration::from_secs(60)).await;
    let duplicates = duplicates(&counts);
    eprintln!(
        "after etcd came back: {} of {} delivered, {duplicates} twice",
        counts.len(),
        accepted.len()
    );
    assert_eq!(counts.len(), accepted.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joiner_takes_a_share_under_load() {
    let _one = SERIAL.lock().await;
    let (mut mesh, c, hook, _) = hooked_mesh("OWN6", 10_000, "growing", HookMode::Accept).await;
    let mut accepted = publish_spread(&c, &mesh, "growing", 0, 1500).await;
    let joined = Instant::now();
    mesh.add();
    // Publishing and delivery go on while the partitions move.
    accepted.extend(publish_spread(&c, &mesh, "growing", 1500, 3000).await);
    let owners = settled(
        &c,
        mesh.s(0),
        "growing",
        &ids(&mesh),
        Duration::from_secs(60),
    )
    .await;
    eprintln!(
        "ownership settled on four instances {:?} after the fourth started",
        joined.elapsed()
    );
    let theirs = owners.values().filter(|o| *o == "i-3").count();
    assert!(theirs > 0, "the joiner took nothing: {owners:?}");
    let counts = hook_has(&hook, &accepted, Duration::from_secs(60)).await;
    let duplicates = duplicates(&counts);
    eprintln!("the joiner owns {theirs} of {PARTITIONS}; duplicates: {duplicates}");
    // Only deliveries still in a client's hands when a handover's grace
    // ran out may come twice: at most one window (1024).
    assert!(duplicates <= 1024, "{duplicates} duplicates");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_moves_to_another_instance_when_its_own_dies() {
    let _one = SERIAL.lock().await;
    // What the dead instance held for the client comes again after the
    // ack timeout: a short one keeps the test short.
    let ack_timeout = ["eventmesh.delivery.ack.timeout.ms=3000"];
    let mut mesh = Mesh::start_with(3, "OWN7", LEASE_MS, &ack_timeout).await;
    let c = client();
    // Subscribed through i-2, which then dies: the subscription lives on.
    subscribe(
        &c,
        mesh.s(2),
        json!({"clientId": "m0", "group": "nomads", "topic": "moves"}),
    )
    .await;
    settled(&c, mesh.s(0), "moves", &ids(&mesh), Duration::from_secs(30)).await;
    let got: Received = Received::default();
    let stop = tokio_util::sync::CancellationToken::new();
    let first = tokio::spawn(poll_and_ack(
        c.clone(),
        mesh.s(2).traffic.clone(),
        0,
        got.clone(),
        stop.clone(),
    ));
    let mut accepted = publish_spread(&c, &mesh, "moves", 0, 300).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.lock().unwrap().len() < 50 {
        assert!(
            Instant::now() < deadline,
            "the client received nothing on i-2"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    mesh.servers[2].as_mut().unwrap().kill9();
    mesh.servers[2] = None;
    stop.cancel();
    // Its poller ends with the instance; what it acknowledged counts.
    first.await.unwrap();
    accepted.extend(publish_spread(&c, &mesh, "moves", 300, 600).await);
    // The client comes back through i-0: everything not acknowledged
    // before reaches it there.
    let stop = tokio_util::sync::CancellationToken::new();
    let second = tokio::spawn(poll_and_ack(
        c.clone(),
        mesh.s(0).traffic.clone(),
        0,
        got.clone(),
        stop.clone(),
    ));
    let what = "events reached the client after it moved";
    received_all(&got, &accepted, Duration::from_secs(60), what).await;
    stop.cancel();
    second.await.unwrap();
}

/// A filtered group whose client is at home on one instance: the other
/// instance owns part of the partitions and filters there, so only the
/// matching events are dispatched and forwarded, and every owner's
/// committed offsets pass the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_filter_before_they_forward() {
    let _one = SERIAL.lock().await;
    let mesh = Mesh::start(2, "OWNFILTER", LEASE_MS).await;
    let c = client();
    subscribe(
        &c,
        mesh.s(0),
        json!({"clientId": "picky", "group": "picky", "topic": "f", "from": "earliest",
               "filters": [{"exact": {"type": "keep"}}]}),
    )
    .await;
    let owners = settled(&c, mesh.s(0), "f", &ids(&mesh), Duration::from_secs(30)).await;
    let spread: BTreeSet<&String> = owners.values().collect();
    assert_eq!(spread.len(), 2, "both instances own some: {owners:?}");
    let batch: Vec<Value> = (0..40)
        .map(|i| {
            let mut e = event(&format!("e{i}"));
            e["type"] = json!(if i % 2 == 0 { "keep" } else { "drop" });
            e
        })
        .collect();
    publish_retrying(&c, mesh.s(0), "f", &batch).await;
    let got = poll_n(&c, mesh.s(0), "picky", 20, Duration::from_secs(30)).await;
    let mut want: Vec<String> = (0..40).step_by(2).map(|i| format!("e{i}")).collect();
    want.sort();
    assert_eq!(polled_ids(&got), want);
    for d in &got {
        assert_eq!(
            ack(&c, mesh.s(0), d["deliveryId"].as_str().unwrap()).await,
            200
        );
    }
    // Dispatched (and so forwarded or handed out) only what matched;
    // skipped the rest where each partition is owned.
    let mut dispatched = 0.0;
    let mut skipped = 0.0;
    for k in 0..2 {
        let m = metrics(&c, mesh.s(k)).await;
        dispatched += m.get("eventmesh_events_dispatched_total");
        skipped += m.get(r#"eventmesh_filter_skipped_total{topic="f",group="picky"}"#);
    }
    assert_eq!((dispatched, skipped), (20.0, 20.0));
    // On JetStream an offset is a stream sequence: every partition's lag
    // is what shows the committed offsets passed the skipped events.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let rows: Vec<Value> = admin_json(&c, mesh.s(0), "/admin/offsets?topic=f").await;
        let lag: u64 = rows.iter().map(|r| r["lag"].as_u64().unwrap()).sum();
        if rows.len() == PARTITIONS as usize && lag == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the group still lags: {rows:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_events_are_not_handed_out_whoever_owns_them() {
    let _one = SERIAL.lock().await;
    let mesh = Mesh::start(2, "OWNEXPIRY", LEASE_MS).await;
    let c = client();
    subscribe(
        &c,
        mesh.s(0),
        json!({"clientId": "slow", "group": "slow", "topic": "x", "from": "earliest"}),
    )
    .await;
    let owners = settled(&c, mesh.s(0), "x", &ids(&mesh), Duration::from_secs(30)).await;
    let spread: BTreeSet<&String> = owners.values().collect();
    assert_eq!(spread.len(), 2, "both instances own some: {owners:?}");
    // Half expire two seconds from now; the client polls after that, so
    // those wait in its mailbox here (partitions owned here) or were
    // forwarded to it (owned by the other instance).
    let soon_at = std::time::SystemTime::now() + Duration::from_secs(2);
    let soon: chrono::DateTime<chrono::Utc> = soon_at.into();
    let batch: Vec<Value> = (0..40)
        .map(|i| {
            let mut e = event(&format!("e{i}"));
            if i % 2 == 1 {
                e["expirytime"] = json!(soon.to_rfc3339());
            }
            e
        })
        .collect();
    publish_retrying(&c, mesh.s(0), "x", &batch).await;
    if let Ok(left) = soon_at.duration_since(std::time::SystemTime::now()) {
        tokio::time::sleep(left + Duration::from_millis(200)).await;
    }
    let got = poll_n(&c, mesh.s(0), "slow", 20, Duration::from_secs(30)).await;
    let mut want: Vec<String> = (0..40).step_by(2).map(|i| format!("e{i}")).collect();
    want.sort();
    assert_eq!(polled_ids(&got), want);
    assert!(poll_n(&c, mesh.s(0), "slow", 1, Duration::from_millis(500))
        .await
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_reset_goes_through_the_owners_while_one_is_killed() {
    let _one = SERIAL.lock().await;
    let mut mesh = Mesh::start(3, "OWNRESET", LEASE_MS).await;
    let c = client();
    subscribe(
        &c,
        mesh.s(0),
        json!({"clientId": "m", "group": "g", "topic": "rw", "from": "earliest"}),
    )
    .await;
    settled(&c, mesh.s(0), "rw", &ids(&mesh), Duration::from_secs(30)).await;
    let batch: Vec<Value> = (0..60).map(|i| event(&format!("e{i}"))).collect();
    publish_retrying(&c, mesh.s(0), "rw", &batch).await;
    let mut all: Vec<String> = (0..60).map(|i| format!("e{i}")).collect();
    all.sort();
    // Held, not acknowledged, when an owner dies.
    let held = poll_n(&c, mesh.s(0), "m", 60, Duration::from_secs(30)).await;
    assert_eq!(polled_ids(&held), all);
    mesh.servers[2].as_mut().unwrap().kill9();
    mesh.servers[2] = None;
    let reset = |query: &'static str| {
        let c = c.clone();
        let url = mesh
            .s(0)
            .admin_url(&format!("/admin/groups/g/offsets{query}"));
        async move {
            let r = c
                .post(url)
                .bearer_auth(TOKEN)
                .json(&json!({"topic": "rw", "to": "earliest"}))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let (status, v) = reset("").await;
    assert_eq!(
        (status, v["error"].as_str()),
        (409, Some("group_busy")),
        "{v}"
    );
    let (status, done) = reset("?force=true").await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["applied"], true, "{done}");
    assert!(done["held"].as_u64().unwrap() > 0, "{done}");
    assert_eq!(
        done["partitions"].as_array().unwrap().len(),
        PARTITIONS as usize
    );
    // Every event again; a copy forwarded before the reset settles
    // nothing (404), the new deliveries settle once each.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut settled_ids = BTreeSet::new();
    let mut stale = 0;
    while settled_ids.len() < 60 {
        assert!(Instant::now() < deadline, "got again only {settled_ids:?}");
        for d in poll_n(&c, mesh.s(0), "m", 1, Duration::from_secs(1)).await {
            match ack(&c, mesh.s(0), d["deliveryId"].as_str().unwrap()).await {
                200 => assert!(
                    settled_ids.insert(d["event"]["id"].as_str().unwrap().to_string()),
                    "settled twice: {d}"
                ),
                404 => stale += 1,
                other => panic!("ack answered {other}"),
            }
        }
    }
    eprintln!("after the reset: 60 delivered again, {stale} released copies refused");
    assert_eq!(settled_ids.into_iter().collect::<Vec<_>>(), all);
    assert!(caught_up(&c, mesh.s(0), "rw", Duration::from_secs(30)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_instance_dies_hands_its_share_to_the_others() {
    let _one = SERIAL.lock().await;
    // Held deliveries move only through the member timeout here.
    let mut mesh = Mesh::start_with(
        3,
        "OWNAWAY",
        LEASE_MS,
        &[
            "eventmesh.delivery.member.timeout.ms=2000",
            "eventmesh.delivery.ack.timeout.ms=600000",
        ],
    )
    .await;
    let c = client();
    // Member m<k> polls instance i-<k>.
    for k in 0..3 {
        subscribe(
            &c,
            mesh.s(k),
            json!({"clientId": format!("m{k}"), "group": "g", "topic": "away", "from": "earliest"}),
        )
        .await;
    }
    settled(&c, mesh.s(0), "away", &ids(&mesh), Duration::from_secs(30)).await;
    let batch: Vec<Value> = (0..120).map(|i| event(&format!("e{i}"))).collect();
    publish_retrying(&c, mesh.s(0), "away", &batch).await;
    // m2 takes what it is given and never acknowledges it.
    let held = poll_n(&c, mesh.s(2), "m2", 1, Duration::from_secs(30)).await;
    assert!(!held.is_empty(), "m2 got nothing");
    let mut settled_ids: BTreeSet<String> = BTreeSet::new();
    // m0 and m1 take and acknowledge their shares.
    let drain = |settled_ids: &mut BTreeSet<String>, d: Value| {
        settled_ids.insert(d["event"]["id"].as_str().unwrap().to_string());
    };
    for k in 0..2 {
        for d in poll_n(&c, mesh.s(k), &format!("m{k}"), 1, Duration::from_secs(5)).await {
            assert_eq!(
                ack(&c, mesh.s(k), d["deliveryId"].as_str().unwrap()).await,
                200
            );
            drain(&mut settled_ids, d);
        }
    }
    let held_ids: Vec<&str> = held
        .iter()
        .filter_map(|d| d["event"]["id"].as_str())
        .collect();
    // Acknowledgements refused after the kill: event id, delivery id, status.
    let mut refused: Vec<(String, String, u16)> = Vec::new();
    mesh.servers[2].as_mut().unwrap().kill9();
    let killed = Instant::now();
    mesh.servers[2] = None;
    let deadline = killed + Duration::from_secs(60);
    while settled_ids.len() < 120 {
        if Instant::now() >= deadline {
            // What each survivor says of the clients and the group, to
            // tell where the missing events are held.
            let missing: Vec<String> = (0..120)
                .map(|i| format!("e{i}"))
                .filter(|i| !settled_ids.contains(i))
                .collect();
            let mut views = String::new();
            for k in 0..2 {
                let clients: Value = admin_json(&c, mesh.s(k), "/admin/clients").await;
                let offsets: Value = admin_json(&c, mesh.s(k), "/admin/offsets?topic=away").await;
                let cluster = cluster_view(&c, mesh.s(k)).await;
                let log = mesh.s(k).log.lock().unwrap().join("\n");
                views += &format!(
                    "\ni-{k}: clients {clients}\noffsets {offsets}\ncluster {cluster}\nlog:\n{log}"
                );
            }
            panic!(
                "the survivors settled only {} of 120; missing {missing:?}; m2 held {held_ids:?}; refused acks {refused:?}{views}",
                settled_ids.len()
            );
        }
        for k in 0..2 {
            for d in poll_n(
                &c,
                mesh.s(k),
                &format!("m{k}"),
                1,
                Duration::from_millis(300),
            )
            .await
            {
                // A copy released by an owner that changed is refused; its
                // event comes again under a new id.
                let id = d["deliveryId"].as_str().unwrap().to_string();
                match ack(&c, mesh.s(k), &id).await {
                    200 => drain(&mut settled_ids, d),
                    status => refused.push((d["event"]["id"].to_string(), id, status)),
                }
            }
        }
    }
    eprintln!(
        "m2 held {} when its instance was killed; all 120 settled by the others {:?} after the kill (member timeout 2 s, lease {LEASE_MS} ms)",
        held.len(),
        killed.elapsed()
    );
    let clients: Vec<Value> = admin_json(&c, mesh.s(0), "/admin/clients").await;
    let m2 = clients.iter().find(|v| v["clientId"] == "m2").unwrap();
    assert_eq!(m2["state"], "idle", "{m2}");
    // What it was given went to the others: nothing waits for it.
    assert_eq!(m2["queued"], 0, "{m2}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_back_events_are_released_by_the_owners_even_when_one_dies() {
    let _one = SERIAL.lock().await;
    let (mut mesh, c, hook, owners) =
        hooked_mesh("OWNHELD", LEASE_MS, "due", HookMode::Accept).await;
    assert!(
        owners.values().any(|o| o == "i-2"),
        "i-2 owns some: {owners:?}"
    );
    // 1,200 events due from five seconds on, a millisecond apart.
    let start = eventmesh_core::time::now_ms() + 5_000;
    let mut want = Vec::new();
    for chunk in 0..6u64 {
        let batch: Vec<Value> = (0..200u64)
            .map(|i| {
                let n = chunk * 200 + i;
                let mut e = event(&format!("h{n}"));
                e["deliverat"] = json!(eventmesh_core::time::format_rfc3339_ms(start + n));
                want.push(format!("h{n}"));
                e
            })
            .collect();
        publish_retrying(&c, mesh.s((chunk % 3) as usize), "due", &batch).await;
    }
    let detail: Value = admin_json(&c, mesh.s(1), "/admin/topics/due").await;
    assert_eq!(
        detail["scheduled"]["count"], 1_200,
        "{}",
        detail["scheduled"]
    );
    // The owner of some of them dies before they are due.
    mesh.servers[2].as_mut().unwrap().kill9();
    mesh.servers[2] = None;
    let counts = hook_has(&hook, &want, Duration::from_secs(60)).await;
    assert_eq!(duplicates(&counts), 0, "released once each");
    let h = hook.lock().unwrap();
    for ((id, _, _), (headers, at)) in h.accepted.iter().zip(h.headers.iter().zip(&h.received_ms)) {
        let due = headers["ce-deliverat"]
            .to_str()
            .unwrap()
            .replace("%3A", ":");
        let due = eventmesh_core::time::parse_rfc3339_ms(&due).unwrap();
        assert!(*at >= due, "{id} came {} ms early", due - at);
    }
}
