//! An in-memory [`MetaStore`] for tests of the crates above this one. Never
//! used by production code (it is compiled only with the `testing` feature).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::Result;
use crate::lease::{LeaseHost, LeaseId, Leases};
use crate::store::{KeyValue, MetaStore};
use crate::watch::{WatchEvent, WatchHub, WatchStream};

struct Inner {
    data: Mutex<(u64, BTreeMap<String, KeyValue>)>,
    hub: WatchHub,
    leases: Leases,
}

/// Cheap to clone: clones share one store.
#[derive(Clone)]
pub struct InMemoryMetaStore(Arc<Inner>);

impl Default for InMemoryMetaStore {
    fn default() -> Self {
        Self::new()
    }
}

impl InMemoryMetaStore {
    pub fn new() -> Self {
        Self::with_history(16 * 1024)
    }

    /// A store that keeps only the last `changes` changes for watches to
    /// resume from (to test compaction handling).
    pub fn with_history(changes: usize) -> Self {
        InMemoryMetaStore(Arc::new(Inner {
            data: Mutex::new((0, BTreeMap::new())),
            hub: WatchHub::new(0, changes),
            leases: Leases::default(),
        }))
    }
}

impl Inner {
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
        let mut g = self.data.lock().expect("memory meta lock");
        if let Some((k, at)) = guard {
            if g.1.get(k).map_or(0, |kv| kv.revision) != at {
                return Ok(None);
            }
        }
        let Some(change) = decide(g.1.get(key)) else {
            return Ok(None);
        };
        if let Some(l) = lease {
            self.leases.check(l)?;
        }
        g.0 += 1;
        let revision = g.0;
        let event = match change {
            Some(value) => {
                let kv = KeyValue {
                    key: key.to_string(),
                    value,
                    revision,
                };
                g.1.insert(key.to_string(), kv.clone());
                WatchEvent::Put(kv)
            }
            None => {
                g.1.remove(key);
                WatchEvent::Delete {
                    key: key.to_string(),
                    revision,
                }
            }
        };
        self.leases.bind(key, lease);
        self.hub.publish(event);
        Ok(Some(revision))
    }
}

impl LeaseHost for Inner {
    fn leases(&self) -> &Leases {
        &self.leases
    }

    fn delete_expired(&self, key: &str) {
        let _ = self.mutate(key, None, |cur| cur.map(|_| None));
    }
}

#[async_trait]
impl MetaStore for InMemoryMetaStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        Ok(self
            .0
            .data
            .lock()
            .expect("memory meta lock")
            .1
            .get(key)
            .cloned())
    }

    async fn get_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<KeyValue>> {
        use std::ops::Bound;
        let g = self.0.data.lock().expect("memory meta lock");
        let from = match after {
            Some(a) if a >= prefix => Bound::Excluded(a.to_string()),
            _ => Bound::Included(prefix.to_string()),
        };
        Ok(g.1
            .range((from, Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .take(limit)
            .map(|(_, v)| v.clone())
            .collect())
    }

    async fn snapshot_prefix(&self, prefix: &str) -> Result<(Vec<KeyValue>, u64)> {
        let g = self.0.data.lock().expect("memory meta lock");
        let kvs =
            g.1.range(prefix.to_string()..)
                .take_while(|(k, _)| k.starts_with(prefix))
                .map(|(_, v)| v.clone())
                .collect();
        Ok((kvs, g.0))
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
        for k in self.0.leases.revoke(lease) {
            self.0.mutate(&k, None, |cur| cur.map(|_| None))?;
        }
        Ok(())
    }

    async fn put_with_lease(&self, key: &str, value: Bytes, lease: LeaseId) -> Result<u64> {
        Ok(self
            .0
            .mutate(key, Some(lease), |_| Some(Some(value)))?
            .expect("put always writes"))
    }

    async fn put(&self, key: &str, value: Bytes) -> Result<u64> {
        Ok(self
            .0
            .mutate(key, None, |_| Some(Some(value)))?
            .expect("put always writes"))
    }

    async fn put_if_absent(&self, key: &str, value: Bytes) -> Result<bool> {
        Ok(self
            .0
            .mutate(key, None, |c| c.is_none().then_some(Some(value)))?
            .is_some())
    }

    async fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        new: Bytes,
    ) -> Result<bool> {
        Ok(self
            .0
            .mutate(key, None, |c| {
                let ok = match (c, expected) {
                    (None, None) => true,
                    (Some(c), Some(e)) => c.value[..] == *e,
                    _ => false,
                };
                ok.then_some(Some(new))
            })?
            .is_some())
    }

    async fn delete(&self, key: &str) -> Result<bool> {
        Ok(self
            .0
            .mutate(key, None, |c| c.is_some().then_some(None))?
            .is_some())
    }

    async fn put_guarded(
        &self,
        guard: &str,
        guard_revision: u64,
        key: &str,
        value: Bytes,
        lease: Option<LeaseId>,
    ) -> Result<Option<u64>> {
        self.0
            .mutate_if(Some((guard, guard_revision)), key, lease, |_| {
                Some(Some(value))
            })
    }

    async fn delete_at(&self, key: &str, revision: u64) -> Result<bool> {
        Ok(self
            .0
            .mutate_if(Some((key, revision)), key, None, |c| {
                c.is_some().then_some(None)
            })?
            .is_some())
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn passes_the_tck() {
        crate::tck::run_all(&super::InMemoryMetaStore::new()).await;
    }
}
