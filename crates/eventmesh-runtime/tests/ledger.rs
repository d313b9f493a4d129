//! The in-flight ledger is written behind: a delivery settled between two
//! flushes never reaches it, one still in flight at a flush is recorded,
//! and its entry goes once it is acknowledged.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use eventmesh_core::CloudEvent;
use eventmesh_meta::memory::InMemoryMetaStore;
use eventmesh_meta::MetaStore;
use eventmesh_runtime::{Metrics, Runtime, Stores, SubscribeRequest};
use eventmesh_state::{
    DeadLetterStore, DeliveryStateStore, LedgerEntry, RocksDeliveryStateStore, RocksOffsetStore,
    StartFrom, StateError, SubscriptionStore,
};
use eventmesh_storage::{EventLog, LocalDb, StandaloneLog};

const FLUSH: Duration = Duration::from_secs(2);

/// The RocksDB ledger, remembering every delivery id written to it.
struct Recording {
    inner: RocksDeliveryStateStore,
    written: Mutex<Vec<String>>,
}

#[async_trait]
impl DeliveryStateStore for Recording {
    async fn put(&self, entry: &LedgerEntry) -> Result<(), StateError> {
        self.written.lock().unwrap().push(entry.delivery_id.clone());
        self.inner.put(entry).await
    }
    async fn remove(
        &self,
        consumer: &str,
        topic: &str,
        delivery_id: &str,
    ) -> Result<bool, StateError> {
        self.inner.remove(consumer, topic, delivery_id).await
    }
    async fn put_batch(&self, entries: &[LedgerEntry]) -> Result<(), StateError> {
        self.written
            .lock()
            .unwrap()
            .extend(entries.iter().map(|e| e.delivery_id.clone()));
        self.inner.put_batch(entries).await
    }
    async fn remove_batch(
        &self,
        consumer: &str,
        topic: &str,
        delivery_ids: &[String],
    ) -> Result<(), StateError> {
        self.inner.remove_batch(consumer, topic, delivery_ids).await
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
        },
        common::settings(FLUSH),
        1,
        Arc::new(Metrics::new()),
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
    let (acked, held) = got.split_at(4);
    for d in acked {
        assert!(rt.ack(&d.delivery_id).await);
    }

    // A flush later, only the delivery still in flight is recorded.
    tokio::time::sleep(FLUSH + Duration::from_millis(500)).await;
    let entries = ledger.list("g", "t").await.unwrap();
    let ids: Vec<&str> = entries.iter().map(|e| e.delivery_id.as_str()).collect();
    assert_eq!(ids, [held[0].delivery_id.as_str()]);
    assert_eq!(entries[0].attempts, 0);
    let written = ledger.written.lock().unwrap().clone();
    for d in acked {
        assert!(
            !written.contains(&d.delivery_id),
            "{} was settled before any flush but written: {written:?}",
            d.delivery_id
        );
    }

    // Acknowledged, its entry goes at the next flush.
    assert!(rt.ack(&held[0].delivery_id).await);
    tokio::time::sleep(FLUSH + Duration::from_millis(500)).await;
    assert!(ledger.list("g", "t").await.unwrap().is_empty());
    rt.shutdown().await;
}
