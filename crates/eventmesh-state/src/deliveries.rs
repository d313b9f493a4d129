//! The in-flight delivery ledger: every delivery sent and not yet retired,
//! in the `deliveries` column family of the node's local RocksDB.
//!
//! Key: `consumer | 0 | topic | 0 | delivery id`, value: the entry as JSON.
//! The dispatcher writes it behind, at every flush interval and at
//! shutdown: the deliveries still in flight, then the retired ones deleted,
//! then [`DeliveryStateStore::flush`] (one fsync). Writes reach the WAL
//! without an fsync of their own: they survive a killed process (the
//! operating system still holds them). After a power cut the ledger can
//! only be missing recent entries, whose events the log re-supplies from
//! the committed offset.

use std::sync::Arc;

use async_trait::async_trait;
use eventmesh_storage::localdb::{LocalDb, CF_DELIVERIES};
use rocksdb::{Direction, IteratorMode, WriteBatch};
use serde::{Deserialize, Serialize};

use crate::error::{Result, StateError};

/// One in-flight delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerEntry {
    pub delivery_id: String,
    pub consumer: String,
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    pub member: String,
    /// Failed attempts so far.
    pub attempts: u32,
    /// When the entry was written (the flush after the delivery went out).
    pub sent_ms: u64,
}

#[async_trait]
pub trait DeliveryStateStore: Send + Sync + 'static {
    /// Records (or updates) an in-flight delivery.
    async fn put(&self, entry: &LedgerEntry) -> Result<()>;
    /// Retires a delivery; true when it was recorded.
    async fn remove(&self, consumer: &str, topic: &str, delivery_id: &str) -> Result<bool>;
    /// Records several deliveries, unsynced (not as one atomic write: a
    /// failure may leave some written; writing them again is harmless).
    async fn put_batch(&self, entries: &[LedgerEntry]) -> Result<()>;
    /// Retires several deliveries of one consumer on one topic, unsynced
    /// (not as one atomic write, like [`DeliveryStateStore::put_batch`]).
    async fn remove_batch(
        &self,
        consumer: &str,
        topic: &str,
        delivery_ids: &[String],
    ) -> Result<()>;
    /// Every recorded delivery of one consumer on one topic.
    async fn list(&self, consumer: &str, topic: &str) -> Result<Vec<LedgerEntry>>;
    /// Makes every earlier write durable (one fsync).
    async fn flush(&self) -> Result<()>;
}

/// Entries written or deleted per write by a flush.
const WRITE_SLICE: usize = 128;

/// A ledger key with its new value, or `None` to delete it.
type Row = (Vec<u8>, Option<Vec<u8>>);

/// Writes `rows` unsynced, a slice at a time: a flush carries up to the
/// whole in-flight window, and one write of thousands of entries would hold
/// every other writer of the store (the log's group commits) for
/// milliseconds.
fn write_in_slices(db: &LocalDb, rows: Vec<Row>) -> Result<()> {
    let cf = db.cf(CF_DELIVERIES);
    for slice in rows.chunks(WRITE_SLICE) {
        let mut wb = WriteBatch::default();
        for (k, v) in slice {
            match v {
                Some(v) => wb.put_cf(cf, k, v),
                None => wb.delete_cf(cf, k),
            }
        }
        db.db().write(wb).map_err(io)?;
    }
    Ok(())
}

/// [`DeliveryStateStore`] on RocksDB.
pub struct RocksDeliveryStateStore {
    db: Arc<LocalDb>,
}

impl RocksDeliveryStateStore {
    pub fn new(db: Arc<LocalDb>) -> Self {
        RocksDeliveryStateStore { db }
    }
}

fn prefix(consumer: &str, topic: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(consumer.len() + topic.len() + 2);
    k.extend_from_slice(consumer.as_bytes());
    k.push(0);
    k.extend_from_slice(topic.as_bytes());
    k.push(0);
    k
}

fn key(consumer: &str, topic: &str, delivery_id: &str) -> Vec<u8> {
    let mut k = prefix(consumer, topic);
    k.extend_from_slice(delivery_id.as_bytes());
    k
}

fn io(e: impl std::fmt::Display) -> StateError {
    StateError::Io(e.to_string())
}

impl RocksDeliveryStateStore {
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&LocalDb) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || f(&db))
            .await
            .map_err(io)?
    }
}

#[async_trait]
impl DeliveryStateStore for RocksDeliveryStateStore {
    async fn put(&self, entry: &LedgerEntry) -> Result<()> {
        let k = key(&entry.consumer, &entry.topic, &entry.delivery_id);
        let v = serde_json::to_vec(entry).map_err(io)?;
        self.blocking(move |db| db.db().put_cf(db.cf(CF_DELIVERIES), k, v).map_err(io))
            .await
    }

    async fn put_batch(&self, entries: &[LedgerEntry]) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut rows = Vec::with_capacity(entries.len());
        for e in entries {
            rows.push((
                key(&e.consumer, &e.topic, &e.delivery_id),
                Some(serde_json::to_vec(e).map_err(io)?),
            ));
        }
        self.blocking(move |db| write_in_slices(db, rows)).await
    }

    async fn remove_batch(
        &self,
        consumer: &str,
        topic: &str,
        delivery_ids: &[String],
    ) -> Result<()> {
        if delivery_ids.is_empty() {
            return Ok(());
        }
        let rows: Vec<Row> = delivery_ids
            .iter()
            .map(|id| (key(consumer, topic, id), None))
            .collect();
        self.blocking(move |db| write_in_slices(db, rows)).await
    }

    async fn remove(&self, consumer: &str, topic: &str, delivery_id: &str) -> Result<bool> {
        let k = key(consumer, topic, delivery_id);
        self.blocking(move |db| {
            let cf = db.cf(CF_DELIVERIES);
            let existed = db.db().get_pinned_cf(cf, &k).map_err(io)?.is_some();
            if existed {
                db.db().delete_cf(cf, &k).map_err(io)?;
            }
            Ok(existed)
        })
        .await
    }

    async fn list(&self, consumer: &str, topic: &str) -> Result<Vec<LedgerEntry>> {
        let pre = prefix(consumer, topic);
        self.blocking(move |db| {
            let iter = db.db().iterator_cf(
                db.cf(CF_DELIVERIES),
                IteratorMode::From(&pre, Direction::Forward),
            );
            let mut out = Vec::new();
            for item in iter {
                let (k, v) = item.map_err(io)?;
                if !k.starts_with(&pre) {
                    break;
                }
                out.push(serde_json::from_slice(&v).map_err(|e| StateError::Corrupt {
                    key: String::from_utf8_lossy(&k).into_owned(),
                    cause: e.to_string(),
                })?);
            }
            Ok(out)
        })
        .await
    }

    async fn flush(&self) -> Result<()> {
        self.blocking(|db| db.db().flush_wal(true).map_err(io))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, offset: u64) -> LedgerEntry {
        LedgerEntry {
            delivery_id: id.into(),
            consumer: "g".into(),
            topic: "t".into(),
            partition: 0,
            offset,
            member: "m".into(),
            attempts: 0,
            sent_ms: 1,
        }
    }

    #[tokio::test]
    async fn put_remove_list_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = RocksDeliveryStateStore::new(LocalDb::open(dir.path()).unwrap());
            s.put(&entry("a", 1)).await.unwrap();
            s.put(&entry("b", 2)).await.unwrap();
            let mut other = entry("c", 3);
            other.topic = "t2".into();
            s.put(&other).await.unwrap();
            assert!(s.remove("g", "t", "a").await.unwrap());
            assert!(!s.remove("g", "t", "a").await.unwrap());
            s.put_batch(&[entry("x", 7), entry("y", 8)]).await.unwrap();
            s.remove_batch("g", "t", &["x".to_string(), "y".to_string()])
                .await
                .unwrap();
            s.flush().await.unwrap();
        }
        let s = RocksDeliveryStateStore::new(LocalDb::open(dir.path()).unwrap());
        assert_eq!(s.list("g", "t").await.unwrap(), vec![entry("b", 2)]);
        assert_eq!(s.list("g", "t2").await.unwrap().len(), 1);
        assert!(s.list("h", "t").await.unwrap().is_empty());
    }
}
