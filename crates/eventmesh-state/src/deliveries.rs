//! The in-flight delivery ledger: every delivery sent and not yet retired,
//! in the `deliveries` column family of the node's local RocksDB.
//!
//! Key: `consumer | 0 | topic | 0 | partition (u32 BE) | offset (u64 BE)`,
//! value: the entry as JSON. An entry belongs to an event of the log, not
//! to one delivery id: sending an event again under a new id rewrites
//! nothing, and an entry changes only when its attempt count does. Keys
//! sort by partition, then offset, so [`DeliveryStateStore::list`] returns
//! entries in log order.
//!
//! The dispatcher writes it behind, at every flush interval and at
//! shutdown: the deliveries still in flight, then the retired ones deleted,
//! then [`DeliveryStateStore::flush`] (one fsync). Writes reach the WAL
//! without an fsync of their own: they survive a killed process (the
//! operating system still holds them). After a power cut the ledger can
//! only be missing recent entries, whose events the log re-supplies from
//! the committed offset.
//!
//! Entries written by earlier versions were keyed by delivery id; `list`
//! moves any it meets under their (partition, offset) key.

use std::sync::Arc;

use async_trait::async_trait;
use eventmesh_storage::localdb::{LocalDb, CF_DELIVERIES};
use rocksdb::{Direction, IteratorMode, WriteBatch};
use serde::{Deserialize, Serialize};

use crate::error::{Result, StateError};

/// One in-flight delivery: an event of the log that a consumer has not
/// acknowledged yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerEntry {
    pub consumer: String,
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    /// The member it was last assigned to.
    pub member: String,
    /// Failed attempts so far.
    pub attempts: u32,
    /// When the entry was written (the flush after the delivery went out).
    pub sent_ms: u64,
}

#[async_trait]
pub trait DeliveryStateStore: Send + Sync + 'static {
    /// Records (or updates) the entry of an event in flight.
    async fn put(&self, entry: &LedgerEntry) -> Result<()>;
    /// Retires the entry of one event; true when it was recorded.
    async fn remove(
        &self,
        consumer: &str,
        topic: &str,
        partition: u32,
        offset: u64,
    ) -> Result<bool>;
    /// Records several entries, unsynced (not as one atomic write: a
    /// failure may leave some written; writing them again is harmless).
    async fn put_batch(&self, entries: &[LedgerEntry]) -> Result<()>;
    /// Retires the entries of several events, each given as (partition,
    /// offset), of one consumer on one topic, unsynced (not as one atomic
    /// write, like [`DeliveryStateStore::put_batch`]).
    async fn remove_batch(&self, consumer: &str, topic: &str, events: &[(u32, u64)]) -> Result<()>;
    /// Every entry of one consumer on one topic, by partition then offset.
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

/// Bytes after the prefix in a key of the current form.
const SUFFIX: usize = 12;

fn key(consumer: &str, topic: &str, partition: u32, offset: u64) -> Vec<u8> {
    let mut k = prefix(consumer, topic);
    k.reserve(SUFFIX);
    k.extend_from_slice(&partition.to_be_bytes());
    k.extend_from_slice(&offset.to_be_bytes());
    k
}

fn entry_key(e: &LedgerEntry) -> Vec<u8> {
    key(&e.consumer, &e.topic, e.partition, e.offset)
}

fn io(e: impl std::fmt::Display) -> StateError {
    StateError::Io(e.to_string())
}

impl RocksDeliveryStateStore {
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&LocalDb) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.db.blocking(f).await.map_err(io)?
    }
}

/// Reads every entry under `pre`, moving entries stored under a key of an
/// earlier form (a delivery id) to their (partition, offset) key; an entry
/// already present under that key wins over the moved one.
fn list_entries(db: &LocalDb, pre: &[u8]) -> Result<Vec<LedgerEntry>> {
    let iter = db.db().iterator_cf(
        db.cf(CF_DELIVERIES),
        IteratorMode::From(pre, Direction::Forward),
    );
    let mut current = Vec::new();
    let mut legacy: Vec<(Vec<u8>, LedgerEntry)> = Vec::new();
    for item in iter {
        let (k, v) = item.map_err(io)?;
        if !k.starts_with(pre) {
            break;
        }
        let entry: LedgerEntry = serde_json::from_slice(&v).map_err(|e| StateError::Corrupt {
            key: String::from_utf8_lossy(&k).into_owned(),
            cause: e.to_string(),
        })?;
        if k.len() == pre.len() + SUFFIX && *k == *entry_key(&entry) {
            current.push(entry);
        } else {
            legacy.push((k.to_vec(), entry));
        }
    }
    if legacy.is_empty() {
        return Ok(current);
    }
    let mut rows: Vec<Row> = Vec::with_capacity(legacy.len() * 2);
    for (old, entry) in legacy {
        rows.push((old, None));
        let exists = current
            .iter()
            .any(|c| (c.partition, c.offset) == (entry.partition, entry.offset));
        if !exists {
            rows.push((
                entry_key(&entry),
                Some(serde_json::to_vec(&entry).map_err(io)?),
            ));
            current.push(entry);
        }
    }
    write_in_slices(db, rows)?;
    current.sort_by_key(|e| (e.partition, e.offset));
    Ok(current)
}

#[async_trait]
impl DeliveryStateStore for RocksDeliveryStateStore {
    async fn put(&self, entry: &LedgerEntry) -> Result<()> {
        let k = entry_key(entry);
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
            rows.push((entry_key(e), Some(serde_json::to_vec(e).map_err(io)?)));
        }
        self.blocking(move |db| write_in_slices(db, rows)).await
    }

    async fn remove_batch(&self, consumer: &str, topic: &str, events: &[(u32, u64)]) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let rows: Vec<Row> = events
            .iter()
            .map(|(p, o)| (key(consumer, topic, *p, *o), None))
            .collect();
        self.blocking(move |db| write_in_slices(db, rows)).await
    }

    async fn remove(
        &self,
        consumer: &str,
        topic: &str,
        partition: u32,
        offset: u64,
    ) -> Result<bool> {
        let k = key(consumer, topic, partition, offset);
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
        self.blocking(move |db| list_entries(db, &pre)).await
    }

    async fn flush(&self) -> Result<()> {
        self.blocking(|db| db.db().flush_wal(true).map_err(io))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(partition: u32, offset: u64) -> LedgerEntry {
        LedgerEntry {
            consumer: "g".into(),
            topic: "t".into(),
            partition,
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
            s.put(&entry(0, 1)).await.unwrap();
            s.put(&entry(0, 2)).await.unwrap();
            let mut other = entry(0, 3);
            other.topic = "t2".into();
            s.put(&other).await.unwrap();
            assert!(s.remove("g", "t", 0, 1).await.unwrap());
            assert!(!s.remove("g", "t", 0, 1).await.unwrap());
            s.put_batch(&[entry(0, 7), entry(1, 8)]).await.unwrap();
            s.remove_batch("g", "t", &[(0, 7), (1, 8)]).await.unwrap();
            s.flush().await.unwrap();
        }
        let s = RocksDeliveryStateStore::new(LocalDb::open(dir.path()).unwrap());
        assert_eq!(s.list("g", "t").await.unwrap(), vec![entry(0, 2)]);
        assert_eq!(s.list("g", "t2").await.unwrap().len(), 1);
        assert!(s.list("h", "t").await.unwrap().is_empty());
    }

    /// One event has one entry: writing it again (a new attempt count, as
    /// after a redelivery under a new id) replaces it, and entries list in
    /// log order whatever order they were written in.
    #[tokio::test]
    async fn one_entry_per_event_in_log_order() {
        let dir = tempfile::tempdir().unwrap();
        let s = RocksDeliveryStateStore::new(LocalDb::open(dir.path()).unwrap());
        let mut again = entry(0, 300);
        again.attempts = 2;
        s.put_batch(&[entry(1, 5), entry(0, 300), entry(0, 2), again.clone()])
            .await
            .unwrap();
        assert_eq!(
            s.list("g", "t").await.unwrap(),
            vec![entry(0, 2), again, entry(1, 5)]
        );
    }

    /// An entry written under an earlier key form (its delivery id) is
    /// listed, moved under its (partition, offset) key, and removable there.
    #[tokio::test]
    async fn entries_keyed_by_delivery_id_are_moved() {
        let dir = tempfile::tempdir().unwrap();
        let db = LocalDb::open(dir.path()).unwrap();
        let mut old_key = prefix("g", "t");
        old_key.extend_from_slice(b"0190abcdef0123456789abcdef012345-1-2a");
        let old_value = br#"{"deliveryId":"0190abcdef0123456789abcdef012345-1-2a","consumer":"g","topic":"t","partition":0,"offset":9,"member":"m","attempts":2,"sentMs":1}"#;
        db.db()
            .put_cf(db.cf(CF_DELIVERIES), &old_key, old_value)
            .unwrap();
        let s = RocksDeliveryStateStore::new(db.clone());
        let mut moved = entry(0, 9);
        moved.attempts = 2;
        assert_eq!(s.list("g", "t").await.unwrap(), vec![moved.clone()]);
        assert!(db
            .db()
            .get_cf(db.cf(CF_DELIVERIES), &old_key)
            .unwrap()
            .is_none());
        assert_eq!(s.list("g", "t").await.unwrap(), vec![moved]);
        assert!(s.remove("g", "t", 0, 9).await.unwrap());
        assert!(s.list("g", "t").await.unwrap().is_empty());
    }
}
