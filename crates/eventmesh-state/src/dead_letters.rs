//! Dead letters: events a consumer gave up on, kept in the meta store under
//! `/em/dlq/<topic>/<id>` as JSON, where `<id>` is
//! `<consumer>:<partition>:<offset>` (see [`DeadLetter::id_for`]).
//!
//! Consistency rule: first write wins. [`DeadLetterStore::record`] is
//! `put_if_absent`, so recording the same dead letter again (a retry after a
//! meta failure, or a second instance racing on it) is idempotent: it returns
//! `false` and keeps the entry written first. The meta store is the
//! durability surface: a new store wrapper over the same meta sees every
//! recorded entry. Meta failures surface as [`StateError::Meta`].

use std::sync::Arc;

use bytes::Bytes;
use eventmesh_meta::MetaStore;
use serde::{Deserialize, Serialize};

use crate::error::{Result, StateError};

pub const DLQ_PREFIX: &str = "/em/dlq/";

/// One dead-lettered event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetter {
    pub topic: String,
    /// `<consumer>:<partition>:<offset>`.
    pub id: String,
    pub consumer: String,
    pub partition: u32,
    pub offset: u64,
    /// Delivery attempts made before giving up.
    pub attempts: u32,
    pub last_error: String,
    /// The event, in structured JSON.
    pub event_json: String,
    pub dead_at_ms: u64,
}

impl DeadLetter {
    /// The id of the dead letter for `offset` of `partition`, as read by
    /// `consumer`.
    pub fn id_for(consumer: &str, partition: u32, offset: u64) -> String {
        format!("{consumer}:{partition}:{offset}")
    }

    /// A dead letter with its id built from `consumer`, `partition` and
    /// `offset`; no attempts, no error and `dead_at_ms` 0 (see
    /// [`DeadLetter::with_failure`]).
    pub fn new(
        topic: impl Into<String>,
        consumer: impl Into<String>,
        partition: u32,
        offset: u64,
        event_json: impl Into<String>,
    ) -> Self {
        let consumer = consumer.into();
        DeadLetter {
            topic: topic.into(),
            id: Self::id_for(&consumer, partition, offset),
            consumer,
            partition,
            offset,
            attempts: 0,
            last_error: String::new(),
            event_json: event_json.into(),
            dead_at_ms: 0,
        }
    }

    /// Sets why and when delivery was given up.
    pub fn with_failure(
        mut self,
        attempts: u32,
        last_error: impl Into<String>,
        dead_at_ms: u64,
    ) -> Self {
        self.attempts = attempts;
        self.last_error = last_error.into();
        self.dead_at_ms = dead_at_ms;
        self
    }

    pub fn key(&self) -> String {
        dead_letter_key(&self.topic, &self.id)
    }
}

fn topic_prefix(topic: &str) -> String {
    format!("{DLQ_PREFIX}{topic}/")
}

fn dead_letter_key(topic: &str, id: &str) -> String {
    format!("{DLQ_PREFIX}{topic}/{id}")
}

fn decode(key: &str, value: &[u8]) -> Result<DeadLetter> {
    serde_json::from_slice(value).map_err(|e| StateError::Corrupt {
        key: key.to_string(),
        cause: e.to_string(),
    })
}

/// Meta-backed dead-letter ledger.
#[derive(Clone)]
pub struct DeadLetterStore {
    meta: Arc<dyn MetaStore>,
}

impl DeadLetterStore {
    pub fn new(meta: Arc<dyn MetaStore>) -> Self {
        DeadLetterStore { meta }
    }

    /// Records a dead letter, first write wins: true when written, false when
    /// its key was already present (the stored entry is left unchanged).
    pub async fn record(&self, dl: &DeadLetter) -> Result<bool> {
        let key = dl.key();
        let json = serde_json::to_vec(dl).map_err(|e| StateError::Corrupt {
            key: key.clone(),
            cause: e.to_string(),
        })?;
        Ok(self.meta.put_if_absent(&key, Bytes::from(json)).await?)
    }

    /// [`DeadLetterStore::record`] in the name of a partition's claim: the
    /// write happens only while the key `guard` is at revision `token`,
    /// else it fails with [`StateError::Fenced`].
    pub async fn record_guarded(&self, dl: &DeadLetter, guard: &str, token: u64) -> Result<bool> {
        let key = dl.key();
        if self.meta.get(&key).await?.is_some() {
            return Ok(false);
        }
        let json = serde_json::to_vec(dl).map_err(|e| StateError::Corrupt {
            key: key.clone(),
            cause: e.to_string(),
        })?;
        match self
            .meta
            .put_guarded(guard, token, &key, Bytes::from(json), None)
            .await?
        {
            Some(_) => Ok(true),
            None => Err(StateError::Fenced(format!(
                "dead letter {key} refused: this instance no longer owns its partition"
            ))),
        }
    }

    /// Up to `max` dead letters of `topic`, sorted by key.
    pub async fn browse(&self, topic: &str, max: usize) -> Result<Vec<DeadLetter>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for kv in self.meta.get_prefix(&topic_prefix(topic)).await? {
            let dl = decode(&kv.key, &kv.value)?;
            // `/em/dlq/a/` also prefixes the keys of a topic named `a/b`.
            if dl.topic != topic {
                continue;
            }
            out.push(dl);
            if out.len() == max {
                break;
            }
        }
        Ok(out)
    }

    /// One dead letter.
    pub async fn get(&self, topic: &str, id: &str) -> Result<Option<DeadLetter>> {
        let key = dead_letter_key(topic, id);
        match self.meta.get(&key).await? {
            Some(kv) => decode(&key, &kv.value).map(Some),
            None => Ok(None),
        }
    }

    /// Removes one dead letter (replayed or discarded); true when it existed.
    pub async fn remove(&self, topic: &str, id: &str) -> Result<bool> {
        Ok(self.meta.delete(&dead_letter_key(topic, id)).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventmesh_meta::fault::FaultyMetaStore;
    use eventmesh_meta::memory::InMemoryMetaStore;
    use eventmesh_meta::EmbeddedMetaStore;
    use eventmesh_storage::localdb::LocalDb;

    fn dl(topic: &str, consumer: &str, offset: u64, error: &str) -> DeadLetter {
        DeadLetter::new(
            topic,
            consumer,
            0,
            offset,
            format!("{{\"offset\":{offset}}}"),
        )
        .with_failure(3, error, 1_000 + offset)
    }

    fn embedded(dir: &std::path::Path) -> Arc<dyn MetaStore> {
        Arc::new(EmbeddedMetaStore::open(LocalDb::open(dir).unwrap()).unwrap())
    }

    async fn check_record_is_idempotent(meta: Arc<dyn MetaStore>) {
        let store = DeadLetterStore::new(meta);
        let first = dl("orders", "g", 7, "timeout");
        assert!(store.record(&first).await.unwrap());
        let mut second = dl("orders", "g", 7, "HTTP 500");
        second.attempts = 9;
        assert_eq!(first.key(), second.key());
        assert!(!store.record(&second).await.unwrap(), "already present");
        assert!(!store.record(&first).await.unwrap(), "retry of the same");
        assert_eq!(
            store.get("orders", &first.id).await.unwrap(),
            Some(first.clone())
        );
        assert!(store.remove("orders", &first.id).await.unwrap());
        assert!(!store.remove("orders", &first.id).await.unwrap());
        assert_eq!(store.get("orders", &first.id).await.unwrap(), None);
    }

    async fn check_browse_order_and_limit(meta: Arc<dyn MetaStore>) {
        let store = DeadLetterStore::new(meta);
        for offset in [3, 1, 2] {
            assert!(store.record(&dl("orders", "g", offset, "e")).await.unwrap());
        }
        assert!(store.record(&dl("orders/eu", "g", 0, "e")).await.unwrap());
        assert!(store.record(&dl("payments", "g", 0, "e")).await.unwrap());
        let ids = |v: Vec<DeadLetter>| v.into_iter().map(|d| d.id).collect::<Vec<_>>();
        assert_eq!(
            ids(store.browse("orders", 10).await.unwrap()),
            ["g:0:1", "g:0:2", "g:0:3"]
        );
        assert_eq!(
            ids(store.browse("orders", 2).await.unwrap()),
            ["g:0:1", "g:0:2"]
        );
        assert!(store.browse("orders", 0).await.unwrap().is_empty());
        assert_eq!(ids(store.browse("orders/eu", 10).await.unwrap()), ["g:0:0"]);
        assert!(store.browse("none", 10).await.unwrap().is_empty());
    }

    async fn check_corrupt_entry(meta: Arc<dyn MetaStore>) {
        let key = dead_letter_key("orders", "g:0:1");
        meta.put(&key, Bytes::from_static(b"{not json"))
            .await
            .unwrap();
        let store = DeadLetterStore::new(meta);
        for err in [
            store.get("orders", "g:0:1").await.unwrap_err(),
            store.browse("orders", 5).await.unwrap_err(),
        ] {
            assert!(matches!(err, StateError::Corrupt { key: k, .. } if k == key));
        }
    }

    #[tokio::test]
    async fn record_is_idempotent_memory() {
        check_record_is_idempotent(Arc::new(InMemoryMetaStore::new())).await;
    }

    #[tokio::test]
    async fn record_is_idempotent_embedded() {
        let dir = tempfile::tempdir().unwrap();
        check_record_is_idempotent(embedded(dir.path())).await;
    }

    #[tokio::test]
    async fn browse_order_and_limit_memory() {
        check_browse_order_and_limit(Arc::new(InMemoryMetaStore::new())).await;
    }

    #[tokio::test]
    async fn browse_order_and_limit_embedded() {
        let dir = tempfile::tempdir().unwrap();
        check_browse_order_and_limit(embedded(dir.path())).await;
    }

    #[tokio::test]
    async fn corrupt_entry_memory() {
        check_corrupt_entry(Arc::new(InMemoryMetaStore::new())).await;
    }

    #[tokio::test]
    async fn corrupt_entry_embedded() {
        let dir = tempfile::tempdir().unwrap();
        check_corrupt_entry(embedded(dir.path())).await;
    }

    #[tokio::test]
    async fn ledger_survives_store_wrapper_restart() {
        let dir = tempfile::tempdir().unwrap();
        let first = dl("orders", "g", 1, "timeout");
        {
            let store = DeadLetterStore::new(embedded(dir.path()));
            assert!(store.record(&first).await.unwrap());
            assert!(store.record(&dl("orders", "g", 2, "x")).await.unwrap());
        } // store, meta and LocalDb dropped: the RocksDB is closed
        let store = DeadLetterStore::new(embedded(dir.path()));
        assert_eq!(store.browse("orders", 10).await.unwrap().len(), 2);
        assert_eq!(
            store.get("orders", &first.id).await.unwrap(),
            Some(first.clone())
        );
        assert!(
            !store.record(&dl("orders", "g", 1, "other")).await.unwrap(),
            "still idempotent after the restart"
        );
        assert_eq!(store.get("orders", &first.id).await.unwrap(), Some(first));
    }

    #[tokio::test]
    async fn meta_failures_surface_and_write_succeeds_after_heal() {
        let meta = FaultyMetaStore::new(Arc::new(InMemoryMetaStore::new()));
        let store = DeadLetterStore::new(Arc::new(meta.clone()));
        let d = dl("orders", "g", 1, "e");
        meta.partition();
        let meta_err = |e: StateError| matches!(e, StateError::Meta(_));
        assert!(meta_err(store.record(&d).await.unwrap_err()));
        assert!(meta_err(store.browse("orders", 5).await.unwrap_err()));
        assert!(meta_err(store.get("orders", &d.id).await.unwrap_err()));
        assert!(meta_err(store.remove("orders", &d.id).await.unwrap_err()));
        meta.heal();
        assert!(store.record(&d).await.unwrap(), "the retry writes it");
        assert!(!store.record(&d).await.unwrap());
        assert_eq!(store.get("orders", &d.id).await.unwrap(), Some(d));
    }

    #[test]
    fn json_shape_is_stable() {
        let v = serde_json::to_value(dl("orders", "g:c", 5, "boom")).unwrap();
        assert_eq!(v["id"], "g:c:0:5");
        assert_eq!(v["lastError"], "boom");
        assert_eq!(v["eventJson"], "{\"offset\":5}");
        assert_eq!(v["deadAtMs"], 1_005);
    }
}
