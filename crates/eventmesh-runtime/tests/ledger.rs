//! The in-flight ledger is written behind: a delivery settled between two
//! flushes never reaches it, one still in flight at a flush is recorded
//! under its event's (partition, offset), a redelivery under a new id
//! rewrites that same entry, and the entry goes once it is acknowledged.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use eventmesh_core::CloudEvent;
use eventmesh_meta::memory::InMemoryMetaStore;
use eventmesh_meta::MetaStore;
use eventmesh_runtime::{Metrics, Policy, Runtime, Settle, Settled, Stores, SubscribeRequest};
use eventmesh_state::{
    DeadLetterStore, DeliveryStateStore, LedgerEntry, RocksDeliveryStateStore, RocksOffsetStore,
    StartFrom, StateError, SubscriptionStore,
};
use eventmesh_storage::{EventLog, LocalDb, StandaloneLog};

const FLUSH: Duration = Duration::from_secs(2);

/// The RocksDB ledger, remembering every entry written to it as
/// (partition, offset, attempts).
struct Recording {
    inner: RocksDeliveryStateStore,
    written: Mutex<Vec<(u32, u64, u32)>>,
}

async fn ack(rt: &Runtime, delivery_id: &str) -> Settled {
    rt.settle(delivery_id, Settle::Ack, None, Policy::Enforce)
        .await
}

fn row(e: &LedgerEntry) -> (u32, u64, u32) {
    (e.partition, e.offset, e.attempts)
}

#[async_trait]
impl DeliveryStateStore for Recording {
    async fn put(&self, entry: &LedgerEntry) -> Result<(), StateError> {
        self.written.lock().unwrap().push(row(entry));
        self.inner.put(entry).await
    }
    async fn remove(
        &self,
        consumer: &str,
        topic: &str,
        partition: u32,
        offset: u64,
    ) -> Result<bool, StateError> {
        self.inner.remove(consumer, topic, partition, offset).await
    }
    async fn put_batch(&self, entries: &[LedgerEntry]) -> Result<(), StateError> {
        self.written.lock().unwrap().extend(entries.iter().map(row));
        self.inner.put_batch(entries).await
    }
    async fn remove_batch(
        &self,
        consumer: &str,
        topic: &str,
        events: &[(u32, u64)],
    ) -> Result<(), StateError> {
        self.inner.remove_batch(consumer, topic, events).await
    }
    async fn list(&self, consumer: &str, topic: &str) -> Result<Vec<LedgerEntry>, StateError> {
        self.inner.list(consumer, topic).await
    }
    async fn flush(&self) -> Result<(), StateError> {
        self.inner.flush().await
    }
}

fn event(id: &str) -> CloudEvent {
    CloudEvent::from_json_value(serde_json::json!({
        "specversion": "1.0", "id": id, "source": "/t", "type": "t", "partitionkey": "k"
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_settled_between_flushes_never_touch_the_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let db = LocalDb::open(dir.path()).unwrap();
    let log: Arc<dyn EventLog> = StandaloneLog::open(db.clone(), false).unwrap();
    let meta: Arc<dyn MetaStore> = Arc::new(InMemoryMetaStore::new());
    let ledger = Arc::new(Recording {
        inner: RocksDeliveryStateStore::new(db.clone()),
        written: Mutex::new(Vec::new()),
    });
    let rt = Runtime::start(
        log,
        Stores {
            offsets: Arc::new(RocksOffsetStore::new(db.clone())),
            ledger: ledger.clone(),
            subscriptions: SubscriptionStore::new(meta.clone()),
            dead_letters: DeadLetterStore::new(meta),
            ownership: None,
        },
        common::settings(FLUSH),
        eventmesh_runtime::IngressSettings {
            default_partitions: 1,
            dedup: true,
            retention: Default::default(),
            retention_check: std::time::Duration::from_secs(5),
            pattern_rescan: std::time::Duration::from_secs(5),
        },
        Arc::new(Metrics::new()),
        Arc::new(eventmesh_runtime::Unchecked),
    )
    .await
    .unwrap();
    rt.subscribe(SubscribeRequest {
        client_id: "c".into(),
        topic: "t".into(),
        group: Some("g".into()),
        from: Some(StartFrom::Earliest),
        ..Default::default()
    })
    .await
    .unwrap();
    // Past the flush that runs as the dispatcher starts.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let events: Vec<CloudEvent> = (0..5).map(|i| event(&format!("e{i}"))).collect();
    rt.ingress().publish("t", events).await.unwrap();
    let mut got = Vec::new();
    while got.len() < 5 {
        let polled = rt.poll("c", 5, Duration::from_secs(5)).await.unwrap();
        assert!(!polled.is_empty(), "the events were not delivered");
        got.extend(polled);
    }
    // One partition, published in order: e<i> is at offset i.
    let offset_of = |event_json: &[u8]| -> u64 {
        let v: serde_json::Value = serde_json::from_slice(event_json).unwrap();
        v["id"].as_str().unwrap()[1..].parse().unwrap()
    };
    let (acked, held) = got.split_at(4);
    let held_offset = offset_of(&held[0].event_json);
    for d in acked {
        assert_eq!(ack(&rt, &d.delivery_id).await, Settled::Done);
    }

    // A flush later, only the delivery still in flight is recorded.
    tokio::time::sleep(FLUSH + Duration::from_millis(500)).await;
    let entries = ledger.list("g", "t").await.unwrap();
    let rows: Vec<_> = entries.iter().map(row).collect();
    assert_eq!(rows, [(0, held_offset, 0)]);
    assert_eq!(entries[0].member, "c");
    let written = ledger.written.lock().unwrap().clone();
    for d in acked {
        let offset = offset_of(&d.event_json);
        assert!(
            !written.iter().any(|w| w.1 == offset),
            "offset {offset} was settled before any flush but written: {written:?}"
        );
    }

    // Given back, it comes again under a new id: the same entry now
    // counts one attempt, and no other entry appears.
    assert_eq!(
        rt.settle(&held[0].delivery_id, Settle::Nack, None, Policy::Enforce)
            .await,
        Settled::Done
    );
    let again = rt.poll("c", 5, Duration::from_secs(5)).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_ne!(again[0].delivery_id, held[0].delivery_id);
    assert_eq!(offset_of(&again[0].event_json), held_offset);
    tokio::time::sleep(FLUSH + Duration::from_millis(500)).await;
    let rows: Vec<_> = ledger
        .list("g", "t")
        .await
        .unwrap()
        .iter()
        .map(row)
        .collect();
    assert_eq!(rows, [(0, held_offset, 1)]);

    // Acknowledged, its entry goes at the next flush.
    assert_eq!(ack(&rt, &again[0].delivery_id).await, Settled::Done);
    tokio::time::sleep(FLUSH + Duration::from_millis(500)).await;
    assert!(ledger.list("g", "t").await.unwrap().is_empty());
    rt.shutdown().await;
}
