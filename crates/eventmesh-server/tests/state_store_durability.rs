//! State store durability suite: the restart / multi-instance / fencing
//! scenarios of the "State store failure matrix" (control-plane doc, §3),
//! each against real processes and files (the real `eventmesh` binary on a
//! temporary data dir, or a real etcd per test with a 1 s call timeout).
//!
//! | Row | Store | Test |
//! | --- | --- | --- |
//! | 1 | `OffsetStore` (RocksDB) | [`offset_store_restart_offset_survives_process_kill`] |
//! | 2 | `SubscriptionStore` (meta) | [`subscription_store_multi_instance_converges`] |
//! | 3 | `SessionRegistry` (meta) | [`session_store_stale_heartbeat_after_takeover_is_rejected`] |
//! | 4 | `DeadLetterStore` (meta) | [`dead_letter_store_survives_wrapper_restart`], [`dead_letter_write_succeeds_after_meta_heals`] |
//! | 5 | `TaskStore` (meta) | [`task_store_meta_failure_is_surfaced`] |
//! | 6 | `DeliveryStateStore` (RocksDB) | [`delivery_state_store_ledger_survives_kill_minus_nine`] |

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::mesh::Etcd;
use common::*;
use eventmesh_meta::{EtcdMetaStore, EtcdSettings, MetaStore};
use eventmesh_state::{
    Agent, AgentStatus, DeadLetter, DeadLetterStore, DeliveryMode, OffsetStore, RocksOffsetStore,
    SessionRegistry, StartFrom, StateError, Subscription, SubscriptionChange, SubscriptionStore,
    Task, TaskState, TaskStore,
};
use eventmesh_storage::LocalDb;
use serde_json::json;

/// A fresh etcd client (one "instance") with a 1 s call timeout.
async fn meta(etcd: &Etcd) -> Arc<dyn MetaStore> {
    let mut cfg = EtcdSettings::new([etcd.endpoint()]);
    cfg.timeout = Duration::from_secs(1);
    Arc::new(EtcdMetaStore::connect(cfg).await.expect("etcd client"))
}

fn is_meta_err<T: std::fmt::Debug>(r: &Result<T, StateError>) -> bool {
    matches!(r, Err(StateError::Meta(_)))
}

// ---------------------------------------------------------------- row 1

#[tokio::test]
async fn offset_store_restart_offset_survives_process_kill() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &[]);
    let c = client();
    subscribe(
        &c,
        &s,
        json!({"clientId": "d1", "topic": "dur", "from": "earliest"}),
    )
    .await;
    for i in 0..=100 {
        let mut ev = event(&format!("e{i:03}"));
        ev["partitionkey"] = "one-partition".into();
        publish(&c, &s, "dur", &ev).await;
    }
    let mut got = poll_n(&c, &s, "d1", 101, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 101, "all 101 events delivered");
    let num =
        |d: &serde_json::Value| -> u32 { d["event"]["id"].as_str().unwrap()[1..].parse().unwrap() };
    got.sort_by_key(num);
    assert_eq!(num(&got[0]), 0);
    assert_eq!(num(&got[100]), 100);
    for d in &got[..100] {
        assert_eq!(ack(&c, &s, d["deliveryId"].as_str().unwrap()).await, 200);
    }
    // Written at the next offset flush (every 50 ms in the harness).
    assert!(
        committed_reaches(&c, &s, "dur", 100, Duration::from_secs(10)).await,
        "{}",
        s.log_text()
    );
    s.kill9();

    {
        let db = LocalDb::open(dir.path()).expect("open the killed server's data dir");
        let offsets = RocksOffsetStore::new(db)
            .load("default", "dur")
            .await
            .unwrap();
        // Every partition of the topic has an entry; all events went to one
        // of them (same partition key), the others stay at 0.
        let used: Vec<u64> = offsets.values().copied().filter(|o| *o != 0).collect();
        assert_eq!(
            used,
            [100],
            "committed offset after kill -9 (by partition): {offsets:?}"
        );
    } // LocalDb dropped: the server can open the dir again

    let s2 = s.restart();
    let again = poll_n(&c, &s2, "d1", 1, Duration::from_secs(10)).await;
    assert!(!again.is_empty(), "the unacked event comes again");
    let ids: Vec<&str> = again
        .iter()
        .map(|d| d["event"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids[0], "e100", "{ids:?}");
    assert!(
        ids.iter().all(|id| *id == "e100"),
        "acked events never come again: {ids:?}"
    );
}

// ---------------------------------------------------------------- row 2

fn storm_sub(n: usize, stamp: u64) -> Subscription {
    Subscription {
        subscription_id: format!("id-{n}"),
        client_id: format!("c{n}"),
        topic: "storm".into(),
        group: "g".into(),
        mode: DeliveryMode::LoadBalance,
        url: None,
        from: StartFrom::Latest,
        created_ms: stamp,
        tenant: None,
        principal: None,
        filters: Vec::new(),
        headers: Default::default(),
        spec: None,
        roles: Vec::new(),
        topics_at_subscribe: Vec::new(),
        push: Default::default(),
    }
}

type View = Arc<Mutex<HashMap<String, Subscription>>>;

/// Starts a follower on `store` and keeps applying its changes into a map.
async fn follow_into_map(store: &SubscriptionStore) -> View {
    let (initial, mut rx) = store.follow().await.expect("follow");
    let view: View = Arc::new(Mutex::new(
        initial.into_iter().map(|s| (s.key(), s)).collect(),
    ));
    let sink = view.clone();
    tokio::spawn(async move {
        while let Some(change) = rx.recv().await {
            let mut map = sink.lock().unwrap();
            match change {
                SubscriptionChange::Put(s) => {
                    map.insert(s.key(), s);
                }
                SubscriptionChange::Removed(key) => {
                    map.remove(&key);
                }
            }
        }
    });
    view
}

async fn listed(store: &SubscriptionStore) -> HashMap<String, Subscription> {
    store
        .list()
        .await
        .expect("list")
        .into_iter()
        .map(|s| (s.key(), s))
        .collect()
}

#[tokio::test]
async fn subscription_store_multi_instance_converges() {
    let etcd = Etcd::start().await;
    let a = SubscriptionStore::new(meta(&etcd).await);
    let b = SubscriptionStore::new(meta(&etcd).await);
    let view_a = follow_into_map(&a).await;
    let view_b = follow_into_map(&b).await;

    let mut tasks = Vec::new();
    for task in 0..8usize {
        let (a, b) = (a.clone(), b.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..100usize {
                let store = if (task + i) % 2 == 0 { &a } else { &b };
                let sub = storm_sub((task * 7 + i * 3) % 10, (task * 1000 + i) as u64);
                if (task * 31 + i * 7) % 3 == 2 {
                    store.remove(&sub).await.expect("remove");
                } else {
                    store.put(&sub).await.expect("put");
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (la, lb) = (listed(&a).await, listed(&b).await);
        let fa = view_a.lock().unwrap().clone();
        let fb = view_b.lock().unwrap().clone();
        if la == lb && fa == la && fb == la {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "views never converged:\nlist A {la:?}\nlist B {lb:?}\nfollow A {fa:?}\nfollow B {fb:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A removal through A is observed by B's follower.
    let marker = storm_sub(99, 1);
    a.put(&marker).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !view_b.lock().unwrap().contains_key(&marker.key()) {
        assert!(Instant::now() < deadline, "B never saw the put");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(a.remove(&marker).await.unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    while view_b.lock().unwrap().contains_key(&marker.key()) {
        assert!(Instant::now() < deadline, "B never saw the removal");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!listed(&b).await.contains_key(&marker.key()));
}

// ---------------------------------------------------------------- row 3

#[tokio::test]
async fn session_store_stale_heartbeat_after_takeover_is_rejected() {
    let etcd = Etcd::start().await;
    let inst_a = SessionRegistry::new(meta(&etcd).await);
    let inst_b = SessionRegistry::new(meta(&etcd).await);
    let agent = Agent {
        id: "agent-1".into(),
        capabilities: vec!["chat".into()],
        capacity: 4,
        load: 0,
        status: AgentStatus::Up,
        heartbeat_ms: 1,
        host: "inst-a".into(),
        host_epoch: 1,
        card: None,
        extended_card: None,
        tenant: None,
        principal: None,
        ttl_ms: 0,
    };
    inst_a.register_agent(&agent).await.unwrap();

    let epoch = inst_b.take_over("agent-1", "inst-b", 10).await.unwrap();
    assert_eq!(epoch, Some(2));

    let stale = inst_a.heartbeat("agent-1", "inst-a", 1, 3, 20).await;
    assert!(!stale.unwrap(), "stale owner's heartbeat is fenced");
    for reg in [&inst_a, &inst_b] {
        let stored = reg.get_agent("agent-1").await.unwrap().unwrap();
        assert_eq!((stored.host.as_str(), stored.host_epoch), ("inst-b", 2));
    }

    let fresh = inst_b.heartbeat("agent-1", "inst-b", 2, 1, 30).await;
    assert!(fresh.unwrap(), "the new owner's heartbeat is accepted");
    let stored = inst_a.get_agent("agent-1").await.unwrap().unwrap();
    assert_eq!((stored.host.as_str(), stored.host_epoch), ("inst-b", 2));
    assert_eq!((stored.load, stored.heartbeat_ms), (1, 30));
}

// ---------------------------------------------------------------- row 4

fn dead_letter(offset: u64, error: &str) -> DeadLetter {
    DeadLetter::new("orders", "g", 0, offset, format!("{{\"offset\":{offset}}}")).with_failure(
        3,
        error,
        1_000 + offset,
    )
}

#[tokio::test]
async fn dead_letter_store_survives_wrapper_restart() {
    let etcd = Etcd::start().await;
    let first = dead_letter(1, "timeout");
    {
        let store = DeadLetterStore::new(meta(&etcd).await);
        assert!(store.record(&first).await.unwrap());
    } // store and its etcd client dropped

    let store = DeadLetterStore::new(meta(&etcd).await);
    assert_eq!(
        store.get("orders", &first.id).await.unwrap(),
        Some(first.clone())
    );
    assert_eq!(
        store.browse("orders", 10).await.unwrap(),
        vec![first.clone()]
    );
    assert!(
        !store.record(&dead_letter(1, "other")).await.unwrap(),
        "same key again: first write wins"
    );
    assert_eq!(store.get("orders", &first.id).await.unwrap(), Some(first));
}

#[tokio::test]
async fn dead_letter_write_succeeds_after_meta_heals() {
    let mut etcd = Etcd::start().await;
    let store = DeadLetterStore::new(meta(&etcd).await);
    assert!(store.record(&dead_letter(1, "before")).await.unwrap());

    etcd.kill9();
    let d = dead_letter(2, "during");
    let down = store.record(&d).await;
    assert!(is_meta_err(&down), "etcd down: {down:?}");

    etcd.restart().await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match store.record(&d).await {
            Ok(_) => break,
            Err(e) => assert!(
                Instant::now() < deadline,
                "record never succeeded after etcd came back: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(store.get("orders", &d.id).await.unwrap(), Some(d.clone()));
    assert!(!store.record(&d).await.unwrap(), "idempotent once written");
    assert_eq!(store.browse("orders", 10).await.unwrap().len(), 2);
}

// ---------------------------------------------------------------- row 5

fn task(id: &str) -> Task {
    Task::new(
        id,
        TaskState::Submitted,
        "node-a",
        json!({ "text": format!("do {id}") }),
        10,
    )
}

#[tokio::test]
async fn task_store_meta_failure_is_surfaced() {
    let etcd = Etcd::start().await;
    let store = TaskStore::new(meta(&etcd).await);
    let t0 = task("t0");
    assert_eq!(store.create(&t0).await.unwrap(), Some(t0.clone()));

    etcd.stop();
    let t1 = task("t1");
    let created = store.create(&t1).await;
    let updated = store
        .update_status("t0", TaskState::Submitted, TaskState::Working, 20)
        .await;
    etcd.cont();
    assert!(is_meta_err(&created), "create while frozen: {created:?}");
    assert!(
        is_meta_err(&updated),
        "update_status while frozen (never Ok(None)): {updated:?}"
    );

    let t2 = task("t2");
    let deadline = Instant::now() + Duration::from_secs(15);
    let fresh = loop {
        match store.create(&t2).await {
            Ok(r) => break r,
            Err(e) => assert!(
                Instant::now() < deadline,
                "create never succeeded after etcd thawed: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(fresh, Some(t2.clone()));
    assert_eq!(store.get("t2").await.unwrap(), Some(t2));

    // Nothing half-written: the failed create is absent or exactly t1 (etcd
    // applied it late); t0 is unchanged or exactly the requested transition.
    let late = store.get("t1").await.unwrap();
    assert!(late.is_none() || late == Some(t1.clone()), "{late:?}");
    let mut working = t0.clone();
    working.state = TaskState::Working;
    working.updated_ms = 20;
    working.version = 1;
    let stored = store.get("t0").await.unwrap();
    assert!(
        stored == Some(t0.clone()) || stored == Some(working),
        "{stored:?}"
    );
    // The caller's retry of the failed create leaves exactly t1 behind.
    let retried = store.create(&t1).await.unwrap();
    assert!(retried.is_none() || retried == Some(t1.clone()));
    assert_eq!(store.get("t1").await.unwrap(), Some(t1));
}

/// Names the data dir of the ledger writer started by row 6.
const LEDGER_DIR_ENV: &str = "EVENTMESH_TEST_LEDGER_DIR";

fn ledger_entry(i: u64) -> eventmesh_state::LedgerEntry {
    eventmesh_state::LedgerEntry {
        consumer: "g".into(),
        topic: "t".into(),
        partition: 0,
        offset: i,
        member: "m".into(),
        attempts: 0,
        sent_ms: 1,
    }
}

/// Row 6: a separate process (this test binary, started again in writer
/// mode) records 50 in-flight deliveries, retires every fifth, and is then
/// killed with SIGKILL while it holds the store open, without any flush or
/// close. Reopening the data dir shows exactly the 40 it left in flight.
#[test]
fn delivery_state_store_ledger_survives_kill_minus_nine() {
    use eventmesh_state::{DeliveryStateStore, RocksDeliveryStateStore};
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "ledger_writer_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(LEDGER_DIR_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Its output is read on a thread, so that waiting for it is bounded.
    let stdout = child.stdout.take().unwrap();
    let (tx, ready) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let found = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|l| l.contains("ledger-ready"));
        let _ = tx.send(found);
    });
    match ready.recv_timeout(Duration::from_secs(60)) {
        Ok(true) => {}
        Ok(false) => panic!("the ledger writer exited before it was ready"),
        Err(_) => {
            kill_and_reap(&mut child);
            panic!("the ledger writer was not ready within 60 s");
        }
    }
    let status = kill_and_reap(&mut child);
    assert!(!status.success(), "the writer was killed, not finished");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let entries = rt
        .block_on(
            RocksDeliveryStateStore::new(eventmesh_storage::LocalDb::open(dir.path()).unwrap())
                .list("g", "t"),
        )
        .unwrap();
    let expected: Vec<_> = (0..50).filter(|i| i % 5 != 0).map(ledger_entry).collect();
    assert_eq!(entries, expected);
}

/// The writer half of row 6. It runs only when row 6 starts this binary
/// with `EVENTMESH_TEST_LEDGER_DIR` set; in a normal run it has nothing to do.
#[test]
fn ledger_writer_process() {
    use eventmesh_state::{DeliveryStateStore, RocksDeliveryStateStore};
    let Ok(dir) = std::env::var(LEDGER_DIR_ENV) else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let db = eventmesh_storage::LocalDb::open(std::path::Path::new(&dir)).unwrap();
        let store = RocksDeliveryStateStore::new(db);
        for i in 0..50 {
            store.put(&ledger_entry(i)).await.unwrap();
        }
        for i in (0..50).step_by(5) {
            assert!(store
                .remove("g", "t", 0, ledger_entry(i).offset)
                .await
                .unwrap());
        }
    });
    println!("ledger-ready");
    std::thread::sleep(std::time::Duration::from_secs(120));
}
