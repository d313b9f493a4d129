//! The [`MetaStore`] trait.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::Result;
use crate::lease::LeaseId;
use crate::watch::WatchStream;

/// One stored entry and the revision of its last change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: Bytes,
    pub revision: u64,
}

#[async_trait]
pub trait MetaStore: Send + Sync + 'static {
    /// Reads one key.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>>;

    /// Reads every key starting with `prefix`, sorted by key.
    async fn get_prefix(&self, prefix: &str) -> Result<Vec<KeyValue>> {
        Ok(self.snapshot_prefix(prefix).await?.0)
    }

    /// Up to `limit` keys starting with `prefix` that sort after `after`
    /// (from the first when `None`), sorted by key: one page of a walk
    /// through a prefix too large to read at once. The default reads the
    /// whole prefix; the backends read the page only.
    async fn get_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<KeyValue>> {
        Ok(self
            .get_prefix(prefix)
            .await?
            .into_iter()
            .filter(|kv| after.is_none_or(|a| kv.key.as_str() > a))
            .take(limit)
            .collect())
    }

    /// Reads every key starting with `prefix` together with the store
    /// revision the read reflects, to start a watch from without a gap.
    async fn snapshot_prefix(&self, prefix: &str) -> Result<(Vec<KeyValue>, u64)>;

    /// Every change under `prefix` with a revision above `after_revision`,
    /// in order, then live changes. Resuming from a revision whose changes
    /// are no longer kept fails with `MetaError::Compacted`.
    async fn watch_prefix(&self, prefix: &str, after_revision: u64) -> Result<WatchStream>;

    /// Grants a lease that expires unless renewed within `ttl`.
    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseId>;

    /// Renews a lease; fails with `MetaError::LeaseNotFound` once expired.
    async fn keep_alive(&self, lease: LeaseId) -> Result<()>;

    /// Ends a lease now, deleting its keys.
    async fn revoke_lease(&self, lease: LeaseId) -> Result<()>;

    /// Writes a key that is deleted when `lease` ends.
    async fn put_with_lease(&self, key: &str, value: Bytes, lease: LeaseId) -> Result<u64>;

    /// Writes a value, last write wins. Returns the new revision.
    async fn put(&self, key: &str, value: Bytes) -> Result<u64>;

    /// Writes only when the key is absent (first write wins). True when written.
    async fn put_if_absent(&self, key: &str, value: Bytes) -> Result<bool>;

    /// Writes `new` only when the current value equals `expected` (`None`:
    /// the key must be absent). True when written; false leaves the key as
    /// it was, and the caller re-reads.
    async fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        new: Bytes,
    ) -> Result<bool>;

    /// Deletes a key. True when it existed.
    async fn delete(&self, key: &str) -> Result<bool>;

    /// Writes `key` (deleted when `lease` ends, when given) only while the
    /// key `guard` was last changed at `guard_revision` (0: `guard` is
    /// absent); `guard` may be `key` itself. The new revision when written,
    /// `None` when the guard had moved. This is the fenced write: a claim is
    /// `put_guarded(k, 0, k, ..)`, and a write in the claim's name is
    /// guarded by the claim's revision, so it fails once the claim is gone
    /// or taken by someone else.
    async fn put_guarded(
        &self,
        guard: &str,
        guard_revision: u64,
        key: &str,
        value: Bytes,
        lease: Option<LeaseId>,
    ) -> Result<Option<u64>>;

    /// Deletes `key` only while it was last changed at `revision`. True
    /// when deleted.
    async fn delete_at(&self, key: &str, revision: u64) -> Result<bool>;
}
