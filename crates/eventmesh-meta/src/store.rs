//! The [`MetaStore`] trait.

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::Result;

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
    async fn get_prefix(&self, prefix: &str) -> Result<Vec<KeyValue>>;

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
}
