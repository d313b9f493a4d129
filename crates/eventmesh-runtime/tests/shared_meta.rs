//! Two runtimes sharing one meta store see each other's subscriptions and
//! converge on the same view under concurrent changes: the view the changes
//! lead to, compared with that end state worked out in advance.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use eventmesh_core::CloudEvent;

use eventmesh_core::config::DeliveryTopology;
use eventmesh_meta::memory::InMemoryMetaStore;
use eventmesh_meta::MetaStore;
use eventmesh_runtime::cluster::{
    Cluster, ClusterSettings, Fence, FencedOffsetStore, InstanceInfo,
};
use eventmesh_runtime::{Metrics, Ownership, Runtime, Stores, SubscribeRequest};
use eventmesh_state::{
    DeadLetterStore, OffsetStore, RocksDeliveryStateStore, RocksOffsetStore, StartFrom, StateError,
    SubscriptionStore,
};
use eventmesh_storage::{EventLog, LocalDb, StandaloneLog};

async fn runtime(dir: &std::path::Path, meta: Arc<dyn MetaStore>) -> Arc<Runtime> {
    let db = LocalDb::open(dir).unwrap();
    let offsets = Arc::new(RocksOffsetStore::new(db.clone()));
    runtime_with(db, offsets, meta, None, Arc::new(Metrics::new())).await
}

/// A runtime on `db`'s log; with `ownership`, in `PARTITION_OWNED_PULL`.
async fn runtime_with(
    db: Arc<LocalDb>,
    offsets: Arc<dyn OffsetStore>,
    meta: Arc<dyn MetaStore>,
    ownership: Option<Ownership>,
    metrics: Arc<Metrics>,
) -> Arc<Runtime> {
    let log: Arc<dyn EventLog> = StandaloneLog::open(db.clone(), false).unwrap();
    let mut settings = common::settings(Duration::from_millis(50));
    if ownership.is_some() {
        settings.delivery.topology = DeliveryTopology::PartitionOwnedPull;
    }
    Runtime::start(
        log,
        Stores {
            offsets,
            ledger: Arc::new(RocksDeliveryStateStore::new(db.clone())),
            subscriptions: SubscriptionStore::new(meta.clone()),
            dead_letters: DeadLetterStore::new(meta),
            ownership,
        },
        settings,
        eventmesh_runtime::IngressSettings {
            default_partitions: 2,
            dedup: true,
            retention: Default::default(),
            retention_check: std::time::Duration::from_secs(5),
            pattern_rescan: std::time::Duration::from_secs(5),
        },
        metrics,
        Arc::new(eventmesh_runtime::Unchecked),
    )
    .await
    .unwrap()
}

fn req(client: &str, topic: &str) -> SubscribeRequest {
    SubscribeRequest {
        client_id: client.into(),
        topic: topic.into(),
        ..Default::default()
    }
}

async fn subscribe_earliest(rt: &Runtime, client: &str, topic: &str) {
    rt.subscribe(SubscribeRequest {
        from: Some(StartFrom::Earliest),
        ..req(client, topic)
    })
    .await
    .unwrap();
}

async fn keys(rt: &Runtime) -> Vec<String> {
    rt.subscriptions(None)
        .await
        .into_iter()
        .map(|s| s.key())
        .collect()
}

/// Waits until both runtimes' views equal the meta store's; returns the
/// three views as last seen.
async fn converged(
    a: &Runtime,
    b: &Runtime,
    meta: &Arc<dyn MetaStore>,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    let stored = || async {
        SubscriptionStore::new(meta.clone())
            .list()
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.key())
            .collect::<Vec<_>>()
    };
    for _ in 0..250 {
        let (ka, kb, ks) = (keys(a).await, keys(b).await, stored().await);
        if ka == ks && kb == ks {
            return (ka, kb, ks);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (keys(a).await, keys(b).await, stored().await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_made_on_one_instance_appear_on_the_other() {
    let meta: Arc<dyn MetaStore> = Arc::new(InMemoryMetaStore::new());
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = runtime(da.path(), meta.clone()).await;
    let b = runtime(db.path(), meta.clone()).await;
    a.subscribe(req("c1", "orders")).await.unwrap();
    let (ka, kb, _) = converged(&a, &b, &meta).await;
    assert_eq!(ka, vec!["/em/subs/default/orders/c1".to_string()]);
    assert_eq!(ka, kb);
    assert!(b.unsubscribe("c1", None).await.unwrap());
    let (ka, kb, _) = converged(&a, &b, &meta).await;
    assert!(ka.is_empty() && kb.is_empty(), "{ka:?} {kb:?}");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_changes_from_both_converge() {
    let meta: Arc<dyn MetaStore> = Arc::new(InMemoryMetaStore::new());
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = runtime(da.path(), meta.clone()).await;
    let b = runtime(db.path(), meta.clone()).await;
    // Each side works on its own clients, one change after another, so the
    // end state is known: a client is subscribed when its last change was.
    let storm = |rt: Arc<Runtime>, side: &'static str| async move {
        for (client, subscribe) in storm_steps(side) {
            if subscribe {
                rt.subscribe(req(&client, "storm")).await.unwrap();
            } else {
                rt.unsubscribe(&client, None).await.unwrap();
            }
        }
    };
    tokio::join!(storm(a.clone(), "a"), storm(b.clone(), "b"));
    let mut expected = BTreeMap::new();
    for (client, subscribe) in storm_steps("a").into_iter().chain(storm_steps("b")) {
        expected.insert(client, subscribe);
    }
    let expected: Vec<String> = expected
        .into_iter()
        .filter(|(_, subscribed)| *subscribed)
        .map(|(client, _)| format!("/em/subs/default/storm/{client}"))
        .collect();
    // Worked out by hand from the steps: clients 1, 2, 4, 5 and 6 of each
    // side end subscribed, 0 and 3 unsubscribed.
    let by_hand: Vec<String> = ["a", "b"]
        .iter()
        .flat_map(|side| [1, 2, 4, 5, 6].map(|n| format!("/em/subs/default/storm/{side}-{n}")))
        .collect();
    assert_eq!(expected, by_hand);
    let (ka, kb, stored) = converged(&a, &b, &meta).await;
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    assert_eq!(
        sorted(stored),
        expected,
        "the meta store holds the end state"
    );
    assert_eq!(sorted(ka), expected, "A's view equals the end state");
    assert_eq!(sorted(kb), expected, "B's view equals the end state");
    a.shutdown().await;
    b.shutdown().await;
}

/// One side's changes in order: (client, subscribe or unsubscribe).
fn storm_steps(side: &str) -> Vec<(String, bool)> {
    (0..40)
        .map(|i| (format!("{side}-{}", i % 7), i % 3 != 2))
        .collect()
}

/// Committed offsets that cannot be read while `down` is set (a meta store
/// unreachable for a moment), counting the reads refused. With `fence`,
/// only the reads for a topic that fence dispatches partitions of fail.
struct Flaky {
    inner: Arc<dyn OffsetStore>,
    down: AtomicBool,
    fence: Option<Arc<Fence>>,
    refused: AtomicUsize,
}

impl Flaky {
    fn new(inner: Arc<dyn OffsetStore>, fence: Option<Arc<Fence>>) -> Arc<Flaky> {
        Arc::new(Flaky {
            inner,
            down: AtomicBool::new(true),
            fence,
            refused: AtomicUsize::new(0),
        })
    }

    /// Waits until at least `n` reads were refused.
    async fn refused_at_least(&self, n: usize, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.refused.load(Ordering::SeqCst) < n {
            assert!(Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[async_trait]
impl OffsetStore for Flaky {
    async fn load(&self, consumer: &str, topic: &str) -> Result<HashMap<u32, u64>, StateError> {
        let dispatched = || {
            self.fence
                .as_ref()
                .is_none_or(|f| !f.dispatched(topic).is_empty())
        };
        if self.down.load(Ordering::SeqCst) && dispatched() {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(StateError::Io("offsets unreachable".into()));
        }
        self.inner.load(consumer, topic).await
    }
    async fn commit(
        &self,
        consumer: &str,
        topic: &str,
        offsets: &[(u32, u64)],
    ) -> Result<(), StateError> {
        self.inner.commit(consumer, topic, offsets).await
    }
    async fn seed(
        &self,
        consumer: &str,
        topic: &str,
        offsets: &[(u32, u64)],
    ) -> Result<(), StateError> {
        self.inner.seed(consumer, topic, offsets).await
    }
    async fn forget_topic(&self, topic: &str) -> Result<usize, StateError> {
        self.inner.forget_topic(topic).await
    }
}

/// A subscription change seen while it cannot be applied (its consumer's
/// offsets unreadable, so its dispatcher cannot start) is applied again
/// once it can: the watch does not bring the change a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_that_cannot_be_applied_yet_is_applied_again() {
    let meta: Arc<dyn MetaStore> = Arc::new(InMemoryMetaStore::new());
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = runtime(da.path(), meta.clone()).await;
    let local = LocalDb::open(db.path()).unwrap();
    let flaky = Flaky::new(Arc::new(RocksOffsetStore::new(local.clone())), None);
    let b = runtime_with(
        local,
        flaky.clone(),
        meta.clone(),
        None,
        Arc::new(Metrics::new()),
    )
    .await;
    subscribe_earliest(&a, "c1", "later").await;
    // B saw the change and failed to start its dispatcher, more than once.
    flaky
        .refused_at_least(2, "B never tried to apply the change")
        .await;
    assert!(keys(&b).await.is_empty(), "B holds what it could not apply");
    flaky.down.store(false, Ordering::SeqCst);
    let (ka, kb, _) = converged(&a, &b, &meta).await;
    assert_eq!(ka, vec!["/em/subs/default/later/c1".to_string()]);
    assert_eq!(kb, ka);
    // B dispatches it: an event published to B's log reaches the client
    // polling B.
    let event = CloudEvent::from_json_value(serde_json::json!({
        "specversion": "1.0", "id": "e1", "source": "/t", "type": "t"
    }))
    .unwrap();
    b.ingress().publish("later", vec![event]).await.unwrap();
    let polled = b.poll("c1", 1, Duration::from_secs(10)).await.unwrap();
    assert_eq!(polled.len(), 1, "B delivers the subscription's events");
    a.shutdown().await;
    b.shutdown().await;
}

/// A partition handover that cannot be applied (the committed offsets of
/// the partitions gained unreadable, so their dispatch cannot start) is
/// applied again until it holds: the ownership loop hands the same
/// partitions over only once, and without the retries they would stay
/// claimed here and undispatched for as long as this instance lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_that_cannot_be_applied_yet_is_applied_again() {
    let meta: Arc<dyn MetaStore> = Arc::new(InMemoryMetaStore::new());
    let dir = tempfile::tempdir().unwrap();
    let db = LocalDb::open(dir.path()).unwrap();
    let metrics = Arc::new(Metrics::new());
    let (cluster, handovers) = Cluster::start(
        meta.clone(),
        InstanceInfo {
            id: "solo".into(),
            boot: "b1".into(),
            address: "127.0.0.1:1".into(),
            admin_address: "127.0.0.1:2".into(),
            tls: false,
            since_ms: 1,
            lease_ms: 3000,
        },
        ClusterSettings {
            lease: Duration::from_secs(3),
            handover_grace: Duration::from_millis(200),
            secret: "secret".into(),
            internal_tls: None,
        },
        metrics.clone(),
    );
    let fence = cluster.fence().clone();
    let fenced = FencedOffsetStore::new(meta.clone(), fence.clone(), metrics.clone());
    let flaky = Flaky::new(Arc::new(fenced), Some(fence.clone()));
    let rt = runtime_with(
        db,
        flaky.clone(),
        meta,
        Some(Ownership { cluster, handovers }),
        metrics,
    )
    .await;
    // Events in both partitions before anyone subscribes.
    let events: Vec<CloudEvent> = (0..8)
        .map(|i| {
            CloudEvent::from_json_value(serde_json::json!({
                "specversion": "1.0", "id": format!("e{i}"), "source": "/t", "type": "t",
                "partitionkey": format!("k{i}")
            }))
            .unwrap()
        })
        .collect();
    let placed = rt.ingress().publish("owned", events).await.unwrap();
    let partitions: BTreeSet<u32> = placed.iter().map(|p| p.partition).collect();
    assert_eq!(partitions, BTreeSet::from([0, 1]), "{placed:?}");
    subscribe_earliest(&rt, "c1", "owned").await;
    // The instance claims both partitions, fails to dispatch them, and
    // tries again, more than once.
    flaky
        .refused_at_least(3, "the handover was never tried again")
        .await;
    assert_eq!(fence.dispatched("owned"), vec![0, 1]);
    let held = rt.poll("c1", 8, Duration::from_millis(1)).await.unwrap();
    assert!(held.is_empty(), "delivered without offsets: {held:?}");
    // Once the offsets can be read, every event is delivered.
    flaky.down.store(false, Ordering::SeqCst);
    let mut ids = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while ids.len() < 8 {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "delivered only {ids:?}");
        for d in rt.poll("c1", 8, left).await.unwrap() {
            let v: serde_json::Value = serde_json::from_slice(&d.event_json).unwrap();
            ids.insert(v["id"].as_str().unwrap().to_string());
        }
    }
    let want: BTreeSet<String> = (0..8).map(|i| format!("e{i}")).collect();
    assert_eq!(ids, want);
    rt.shutdown().await;
}
