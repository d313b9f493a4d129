//! The `embedded` meta store: one node's cluster state in the `meta` column
//! family of its local RocksDB.
//!
//! Entries are stored as `k | key` → `revision (u64 BE) | value`, and the
//! revision counter as `r`, updated in the same write batch as the entry it
//! numbers. Mutations are serialized by one lock (compare-and-swap needs a
//! read and a write with nothing between) and synced to disk before they
//! return: cluster state is small and changes rarely, and a subscription that
//! was acknowledged must survive a crash.
//!
//! Watches are served from the last changes this process made (a bounded
//! history); leases live in memory, and a key written with a lease is also
//! marked `l | key`, so that the next open deletes the keys whose leases
//! ended with the previous process.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use eventmesh_storage::localdb::{LocalDb, CF_META};
use rocksdb::{Direction, IteratorMode, WriteBatch, WriteOptions};

use crate::error::{MetaError, Result};
use crate::lease::{LeaseHost, LeaseId, Leases};
use crate::store::{KeyValue, MetaStore};
use crate::watch::{WatchEvent, WatchHub, WatchStream};

const REVISION_KEY: &[u8] = b"r";
/// Changes kept for watches to resume from.
const WATCH_HISTORY: usize = 16 * 1024;

/// Cheap to clone: clones share one store.
#[derive(Clone)]
pub struct EmbeddedMetaStore(Arc<Inner>);

struct Inner {
    db: Arc<LocalDb>,
    /// Serializes mutations; holds the last revision handed out.
    write: Mutex<u64>,
    hub: WatchHub,
    leases: Leases,
}

fn marker_key(key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(b'l');
    k.extend_from_slice(key.as_bytes());
    k
}

fn entry_key(key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(b'k');
    k.extend_from_slice(key.as_bytes());
    k
}

fn io(e: impl std::fmt::Display) -> MetaError {
    MetaError::Unavailable(e.to_string())
}

fn decode(key: &[u8], raw: &[u8]) -> Result<KeyValue> {
    if raw.len() < 8 {
        return Err(MetaError::Corrupt("entry shorter than its revision".into()));
    }
    let key = String::from_utf8(key[1..].to_vec())
        .map_err(|_| MetaError::Corrupt("key is not UTF-8".into()))?;
    Ok(KeyValue {
        key,
        revision: u64::from_be_bytes(raw[..8].try_into().expect("8 bytes")),
        value: Bytes::copy_from_slice(&raw[8..]),
    })
}

impl EmbeddedMetaStore {
    pub fn open(db: Arc<LocalDb>) -> Result<Self> {
        let rev = match db.db().get_cf(db.cf(CF_META), REVISION_KEY).map_err(io)? {
            Some(v) if v.len() == 8 => u64::from_be_bytes(v[..].try_into().expect("8 bytes")),
            Some(_) => return Err(MetaError::Corrupt("bad revision counter".into())),
            None => 0,
        };
        let inner = Inner {
            db,
            write: Mutex::new(rev),
            hub: WatchHub::new(rev, WATCH_HISTORY),
            leases: Leases::default(),
        };
        // Leases do not outlive the process that granted them.
        for key in inner.leased_keys()? {
            inner.mutate(&key, None, |cur| cur.map(|_| None))?;
            inner.clear_marker(&key)?;
        }
        let rev = *inner
            .write
            .lock()
            .map_err(|_| io("meta write lock poisoned"))?;
        let inner = Inner {
            hub: WatchHub::new(rev, WATCH_HISTORY),
            ..inner
        };
        Ok(EmbeddedMetaStore(Arc::new(inner)))
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let inner = self.0.clone();
        self.0.db.blocking(move |_| f(&inner)).await.map_err(io)?
    }
}

impl Inner {
    fn read(&self, key: &str) -> Result<Option<KeyValue>> {
        let k = entry_key(key);
        match self
            .db
            .db()
            .get_pinned_cf(self.db.cf(CF_META), &k)
            .map_err(io)?
        {
            Some(raw) => decode(&k, &raw).map(Some),
            None => Ok(None),
        }
    }

    /// Applies `decide` to the current value under the write lock; when it
    /// returns `Some(new)` (`None` inside = delete) the change is written
    /// with the next revision. Returns whether a write happened.
    fn mutate(
        &self,
        key: &str,
        lease: Option<LeaseId>,
        decide: impl FnOnce(Option<&KeyValue>) -> Option<Option<Bytes>>,
    ) -> Result<Option<u64>> {
        self.mutate_if(None, key, lease, decide)
    }

    /// [`Inner::mutate`], only while `guard`'s key is at its revision (0:
    /// absent).
    fn mutate_if(
        &self,
        guard: Option<(&str, u64)>,
        key: &str,
        lease: Option<LeaseId>,
        decide: impl FnOnce(Option<&KeyValue>) -> Option<Option<Bytes>>,
    ) -> Result<Option<u64>> {
        let mut rev = self
            .write
            .lock()
            .map_err(|_| io("meta write lock poisoned"))?;
        if let Some((g, at)) = guard {
            if self.read(g)?.map_or(0, |kv| kv.revision) != at {
                return Ok(None);
            }
        }
        let current = self.read(key)?;
        let Some(change) = decide(current.as_ref()) else {
            return Ok(None);
        };
        if let Some(l) = lease {
            self.leases.check(l)?;
        }
        let next = *rev + 1;
        let cf = self.db.cf(CF_META);
        let mut wb = WriteBatch::default();
        let event = match change {
            Some(value) => {
                let mut raw = Vec::with_capacity(8 + value.len());
                raw.extend_from_slice(&next.to_be_bytes());
                raw.extend_from_slice(&value);
                wb.put_cf(cf, entry_key(key), raw);
                WatchEvent::Put(KeyValue {
                    key: key.to_string(),
                    value,
                    revision: next,
                })
            }
            None => {
                wb.delete_cf(cf, entry_key(key));
                WatchEvent::Delete {
                    key: key.to_string(),
                    revision: next,
                }
            }
        };
        match lease {
            Some(_) => wb.put_cf(cf, marker_key(key), b""),
            None => wb.delete_cf(cf, marker_key(key)),
        }
        wb.put_cf(cf, REVISION_KEY, next.to_be_bytes());
        let mut opts = WriteOptions::default();
        opts.set_sync(true);
        self.db.db().write_opt(wb, &opts).map_err(io)?;
        *rev = next;
        self.leases.bind(key, lease);
        self.hub.publish(event);
        Ok(Some(next))
    }

    /// Keys written with a lease (by this or an earlier process).
    fn leased_keys(&self) -> Result<Vec<String>> {
        let iter = self.db.db().iterator_cf(
            self.db.cf(CF_META),
            IteratorMode::From(b"l", Direction::Forward),
        );
        let mut out = Vec::new();
        for item in iter {
            let (k, _) = item.map_err(io)?;
            if k.first() != Some(&b'l') {
                break;
            }
            out.push(String::from_utf8_lossy(&k[1..]).into_owned());
        }
        Ok(out)
    }

    fn clear_marker(&self, key: &str) -> Result<()> {
        self.db
            .db()
            .delete_cf(self.db.cf(CF_META), marker_key(key))
            .map_err(io)
    }

    fn scan(&self, prefix: &str) -> Result<Vec<KeyValue>> {
        self.scan_page(prefix, None, usize::MAX)
    }

    /// Up to `limit` entries under `prefix` whose keys sort after `after`.
    fn scan_page(&self, prefix: &str, after: Option<&str>, limit: usize) -> Result<Vec<KeyValue>> {
        let within = entry_key(prefix);
        let start = match after {
            Some(a) if a >= prefix => entry_key(a),
            _ => within.clone(),
        };
        let iter = self.db.db().iterator_cf(
            self.db.cf(CF_META),
            IteratorMode::From(&start, Direction::Forward),
        );
        let mut out = Vec::new();
        for item in iter {
            if out.len() >= limit {
                break;
            }
            let (k, v) = item.map_err(io)?;
            if !k.starts_with(&within) {
                break;
            }
            if after.is_some() && *k == *start {
                continue;
            }
            out.push(decode(&k, &v)?);
        }
        Ok(out)
    }
}

impl LeaseHost for Inner {
    fn leases(&self) -> &Leases {
        &self.leases
    }

    fn delete_expired(&self, key: &str) {
        if let Err(e) = self.mutate(key, None, |cur| cur.map(|_| None)) {
            tracing::warn!(key, error = %e, "cannot delete the key of an expired lease");
        }
    }
}

#[async_trait]
impl MetaStore for EmbeddedMetaStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let key = key.to_string();
        self.blocking(move |s| s.read(&key)).await
    }

    async fn get_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<KeyValue>> {
        let (prefix, after) = (prefix.to_string(), after.map(str::to_string));
        self.blocking(move |s| s.scan_page(&prefix, after.as_deref(), limit))
            .await
    }

    async fn snapshot_prefix(&self, prefix: &str) -> Result<(Vec<KeyValue>, u64)> {
        let prefix = prefix.to_string();
        self.blocking(move |s| {
            // Under the write lock, so the revision matches what was read.
            let rev = s.write.lock().map_err(|_| io("meta write lock poisoned"))?;
            Ok((s.scan(&prefix)?, *rev))
        })
        .await
    }

    async fn watch_prefix(&self, prefix: &str, after_revision: u64) -> Result<WatchStream> {
        self.0.hub.watch(prefix, after_revision)
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseId> {
        Ok(self.0.leases.grant_for(&self.0, ttl))
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<()> {
        self.0.leases.keep_alive(lease)
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<()> {
        let keys = self.0.leases.revoke(lease);
        self.blocking(move |s| {
            for k in keys {
                s.mutate(&k, None, |cur| cur.map(|_| None))?;
            }
            Ok(())
        })
        .await
    }

    async fn put_with_lease(&self, key: &str, value: Bytes, lease: LeaseId) -> Result<u64> {
        let key = key.to_string();
        self.blocking(move |s| s.mutate(&key, Some(lease), |_| Some(Some(value))))
            .await
            .map(|r| r.expect("unconditional put always writes"))
    }

    async fn put(&self, key: &str, value: Bytes) -> Result<u64> {
        let key = key.to_string();
        self.blocking(move |s| s.mutate(&key, None, |_| Some(Some(value))))
            .await
            .map(|r| r.expect("unconditional put always writes"))
    }

    async fn put_if_absent(&self, key: &str, value: Bytes) -> Result<bool> {
        let key = key.to_string();
        self.blocking(move |s| s.mutate(&key, None, |cur| cur.is_none().then_some(Some(value))))
            .await
            .map(|r| r.is_some())
    }

    async fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        new: Bytes,
    ) -> Result<bool> {
        let key = key.to_string();
        let expected = expected.map(<[u8]>::to_vec);
        self.blocking(move |s| {
            s.mutate(&key, None, |cur| {
                let matches = match (cur, &expected) {
                    (None, None) => true,
                    (Some(c), Some(e)) => c.value[..] == e[..],
                    _ => false,
                };
                matches.then_some(Some(new))
            })
        })
        .await
        .map(|r| r.is_some())
    }

    async fn delete(&self, key: &str) -> Result<bool> {
        let key = key.to_string();
        self.blocking(move |s| s.mutate(&key, None, |cur| cur.is_some().then_some(None)))
            .await
            .map(|r| r.is_some())
    }

    async fn put_guarded(
        &self,
        guard: &str,
        guard_revision: u64,
        key: &str,
        value: Bytes,
        lease: Option<LeaseId>,
    ) -> Result<Option<u64>> {
        let (guard, key) = (guard.to_string(), key.to_string());
        self.blocking(move |s| {
            s.mutate_if(Some((&guard, guard_revision)), &key, lease, |_| {
                Some(Some(value))
            })
        })
        .await
    }

    async fn delete_at(&self, key: &str, revision: u64) -> Result<bool> {
        let key = key.to_string();
        self.blocking(move |s| {
            s.mutate_if(Some((&key, revision)), &key, None, |cur| {
                cur.is_some().then_some(None)
            })
        })
        .await
        .map(|r| r.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn passes_the_tck() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedMetaStore::open(LocalDb::open(dir.path()).unwrap()).unwrap();
        crate::tck::run_all(&store).await;
    }

    #[tokio::test]
    async fn entries_and_revisions_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let rev = {
            let store = EmbeddedMetaStore::open(LocalDb::open(dir.path()).unwrap()).unwrap();
            store.put("/em/a", Bytes::from_static(b"1")).await.unwrap();
            store.put("/em/b", Bytes::from_static(b"2")).await.unwrap()
        };
        let store = EmbeddedMetaStore::open(LocalDb::open(dir.path()).unwrap()).unwrap();
        let b = store.get("/em/b").await.unwrap().unwrap();
        assert_eq!((b.value.as_ref(), b.revision), (&b"2"[..], rev));
        let next = store.put("/em/c", Bytes::from_static(b"3")).await.unwrap();
        assert!(next > rev, "revisions keep growing across a reopen");
    }

    #[tokio::test]
    async fn leases_end_with_the_process_and_old_revisions_are_compacted() {
        let dir = tempfile::tempdir().unwrap();
        let before = {
            let store = EmbeddedMetaStore::open(LocalDb::open(dir.path()).unwrap()).unwrap();
            let lease = store
                .grant_lease(std::time::Duration::from_secs(60))
                .await
                .unwrap();
            store
                .put_with_lease("/em/instances/a", Bytes::from_static(b"1"), lease)
                .await
                .unwrap();
            store
                .put("/em/keep", Bytes::from_static(b"1"))
                .await
                .unwrap()
        };
        let store = EmbeddedMetaStore::open(LocalDb::open(dir.path()).unwrap()).unwrap();
        assert!(store.get("/em/instances/a").await.unwrap().is_none());
        assert!(store.get("/em/keep").await.unwrap().is_some());
        // Changes made before this open cannot be replayed.
        let err = store.watch_prefix("/em/", before - 1).await.err();
        assert!(matches!(err, Some(MetaError::Compacted { .. })), "{err:?}");
        let (_, now) = store.snapshot_prefix("/em/").await.unwrap();
        assert!(store.watch_prefix("/em/", now).await.is_ok());
    }
}
