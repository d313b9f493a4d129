//! A fault-injecting wrapper around any [`MetaStore`], for tests: partition
//! (every call fails as an unreachable backend would), delay (every call
//! waits first), and heal. Compiled only with the `testing` feature.
//! A partition also breaks every open watch, as a lost connection would:
//! the stream yields one `Unavailable` error and ends.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::watch;

use crate::error::{MetaError, Result};
use crate::lease::LeaseId;
use crate::store::{KeyValue, MetaStore};
use crate::watch::WatchStream;

#[derive(Clone)]
pub struct FaultyMetaStore {
    inner: Arc<dyn MetaStore>,
    partitioned: Arc<AtomicBool>,
    delay_ms: Arc<AtomicU64>,
    /// Bumped at every partition, to break open watches.
    breaks: Arc<watch::Sender<u64>>,
}

impl FaultyMetaStore {
    pub fn new(inner: Arc<dyn MetaStore>) -> Self {
        FaultyMetaStore {
            inner,
            partitioned: Arc::new(AtomicBool::new(false)),
            delay_ms: Arc::new(AtomicU64::new(0)),
            breaks: Arc::new(watch::channel(0).0),
        }
    }

    /// Every call fails with `MetaError::Unavailable` until [`Self::heal`].
    pub fn partition(&self) {
        self.partitioned.store(true, Ordering::SeqCst);
        self.breaks.send_modify(|n| *n += 1);
    }

    /// Every call waits this long before it runs.
    pub fn delay(&self, d: Duration) {
        self.delay_ms.store(d.as_millis() as u64, Ordering::SeqCst);
    }

    /// Removes every fault.
    pub fn heal(&self) {
        self.partitioned.store(false, Ordering::SeqCst);
        self.delay_ms.store(0, Ordering::SeqCst);
    }

    async fn gate(&self) -> Result<()> {
        let d = self.delay_ms.load(Ordering::SeqCst);
        if d > 0 {
            tokio::time::sleep(Duration::from_millis(d)).await;
        }
        if self.partitioned.load(Ordering::SeqCst) {
            return Err(MetaError::Unavailable(
                "meta store partitioned (injected fault)".into(),
            ));
        }
        Ok(())
    }
}

#[async_trait]
impl MetaStore for FaultyMetaStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        self.gate().await?;
        self.inner.get(key).await
    }

    async fn snapshot_prefix(&self, prefix: &str) -> Result<(Vec<KeyValue>, u64)> {
        self.gate().await?;
        self.inner.snapshot_prefix(prefix).await
    }

    async fn get_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<KeyValue>> {
        self.gate().await?;
        self.inner.get_page(prefix, after, limit).await
    }

    async fn watch_prefix(&self, prefix: &str, after_revision: u64) -> Result<WatchStream> {
        self.gate().await?;
        let mut inner = self.inner.watch_prefix(prefix, after_revision).await?;
        let mut breaks = self.breaks.subscribe();
        let stream = async_stream_of(move |tx| async move {
            loop {
                tokio::select! {
                    item = inner.next() => match item {
                        Some(item) => {
                            let stop = item.is_err();
                            if tx.send(item).await.is_err() || stop {
                                return;
                            }
                        }
                        None => return,
                    },
                    _ = breaks.changed() => {
                        let _ = tx
                            .send(Err(MetaError::Unavailable(
                                "meta store partitioned (injected fault)".into(),
                            )))
                            .await;
                        return;
                    }
                }
            }
        });
        Ok(stream)
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseId> {
        self.gate().await?;
        self.inner.grant_lease(ttl).await
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<()> {
        self.gate().await?;
        self.inner.keep_alive(lease).await
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<()> {
        self.gate().await?;
        self.inner.revoke_lease(lease).await
    }

    async fn put_with_lease(&self, key: &str, value: Bytes, lease: LeaseId) -> Result<u64> {
        self.gate().await?;
        self.inner.put_with_lease(key, value, lease).await
    }

    async fn put(&self, key: &str, value: Bytes) -> Result<u64> {
        self.gate().await?;
        self.inner.put(key, value).await
    }

    async fn put_if_absent(&self, key: &str, value: Bytes) -> Result<bool> {
        self.gate().await?;
        self.inner.put_if_absent(key, value).await
    }

    async fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        new: Bytes,
    ) -> Result<bool> {
        self.gate().await?;
        self.inner.compare_and_swap(key, expected, new).await
    }

    async fn delete(&self, key: &str) -> Result<bool> {
        self.gate().await?;
        self.inner.delete(key).await
    }

    async fn put_guarded(
        &self,
        guard: &str,
        guard_revision: u64,
        key: &str,
        value: Bytes,
        lease: Option<LeaseId>,
    ) -> Result<Option<u64>> {
        self.gate().await?;
        self.inner
            .put_guarded(guard, guard_revision, key, value, lease)
            .await
    }

    async fn delete_at(&self, key: &str, revision: u64) -> Result<bool> {
        self.gate().await?;
        self.inner.delete_at(key, revision).await
    }
}

/// A stream fed by a task: `body` sends items on a channel until it returns.
fn async_stream_of<F, Fut>(body: F) -> WatchStream
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<crate::watch::WatchEvent>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(body(tx));
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|i| (i, rx)) }).boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::InMemoryMetaStore;

    #[tokio::test]
    async fn partition_fails_every_call_and_heal_restores() {
        let store = FaultyMetaStore::new(Arc::new(InMemoryMetaStore::new()));
        store.put("/k", Bytes::from_static(b"1")).await.unwrap();
        store.partition();
        assert!(matches!(
            store.get("/k").await,
            Err(MetaError::Unavailable(_))
        ));
        assert!(store.put_if_absent("/j", Bytes::new()).await.is_err());
        assert!(store.watch_prefix("/", 0).await.is_err());
        store.heal();
        assert_eq!(
            store.get("/k").await.unwrap().unwrap().value,
            Bytes::from_static(b"1")
        );
        // The TCK passes through a healed wrapper.
        crate::tck::run_all(&store).await;
    }

    #[tokio::test]
    async fn partition_breaks_open_watches() {
        let store = FaultyMetaStore::new(Arc::new(InMemoryMetaStore::new()));
        let mut w = store.watch_prefix("/", 0).await.unwrap();
        store.put("/a", Bytes::new()).await.unwrap();
        assert!(w.next().await.unwrap().is_ok());
        store.partition();
        assert!(matches!(
            w.next().await,
            Some(Err(MetaError::Unavailable(_)))
        ));
        assert!(w.next().await.is_none());
    }

    #[tokio::test]
    async fn delay_postpones_calls() {
        let store = FaultyMetaStore::new(Arc::new(InMemoryMetaStore::new()));
        store.delay(Duration::from_millis(200));
        let started = tokio::time::Instant::now();
        store.put("/k", Bytes::new()).await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(200));
    }
}
