//! Committed offsets: for each consumer (a load-balanced group, or one
//! broadcast member) and each partition of a topic, the offset of the first
//! event not yet acknowledged. Delivery resumes there after a restart.
//!
//! Commits are written to RocksDB without an fsync: the write reaches the
//! WAL (so a killed process keeps it), and a power cut can only leave the
//! stored offset behind the real one, which redelivers, never loses.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use eventmesh_storage::localdb::{LocalDb, CF_OFFSETS};
use rocksdb::{Direction, IteratorMode, WriteBatch};

use crate::error::{Result, StateError};

#[async_trait]
pub trait OffsetStore: Send + Sync + 'static {
    /// Every committed offset of one consumer on one topic.
    async fn load(&self, consumer: &str, topic: &str) -> Result<HashMap<u32, u64>>;

    /// Commits offsets for several partitions at once (one write).
    async fn commit(&self, consumer: &str, topic: &str, offsets: &[(u32, u64)]) -> Result<()>;

    /// Moves committed offsets anywhere, back or forward (a reset of the
    /// group by an operator). Where partitions have owners, only the
    /// owner's write, or one made while nobody owns the partition, counts.
    async fn reset(&self, consumer: &str, topic: &str, offsets: &[(u32, u64)]) -> Result<()> {
        self.commit(consumer, topic, offsets).await
    }

    /// Sets where the consumer starts in the partitions that have no
    /// committed offset yet; committed ones stay as they are. Written when
    /// a subscription is made, so that "latest" means the end of the log
    /// then, however late a partition is first dispatched.
    async fn seed(&self, consumer: &str, topic: &str, offsets: &[(u32, u64)]) -> Result<()> {
        let committed = self.load(consumer, topic).await?;
        let missing: Vec<(u32, u64)> = offsets
            .iter()
            .filter(|(p, _)| !committed.contains_key(p))
            .copied()
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        self.commit(consumer, topic, &missing).await
    }

    /// Forgets every consumer's offsets on `topic` (the topic was deleted:
    /// a new one of that name starts from its beginning). Returns how many
    /// partition offsets went.
    async fn forget_topic(&self, topic: &str) -> Result<usize>;
}

/// [`OffsetStore`] in the `offsets` column family.
/// Key: `consumer | 0 | topic | 0 | partition (u32 BE)`, value: `u64 BE`.
pub struct RocksOffsetStore {
    db: Arc<LocalDb>,
}

impl RocksOffsetStore {
    pub fn new(db: Arc<LocalDb>) -> Self {
        RocksOffsetStore { db }
    }
}

fn prefix(consumer: &str, topic: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(consumer.len() + topic.len() + 6);
    k.extend_from_slice(consumer.as_bytes());
    k.push(0);
    k.extend_from_slice(topic.as_bytes());
    k.push(0);
    k
}

fn io(e: impl std::fmt::Display) -> StateError {
    StateError::Io(e.to_string())
}

#[async_trait]
impl OffsetStore for RocksOffsetStore {
    async fn load(&self, consumer: &str, topic: &str) -> Result<HashMap<u32, u64>> {
        let pre = prefix(consumer, topic);
        self.db
            .blocking(move |db| {
                let mut out = HashMap::new();
                let iter = db.db().iterator_cf(
                    db.cf(CF_OFFSETS),
                    IteratorMode::From(&pre, Direction::Forward),
                );
                for item in iter {
                    let (k, v) = item.map_err(io)?;
                    if !k.starts_with(&pre) {
                        break;
                    }
                    let (Ok(p), Ok(o)) = (
                        <[u8; 4]>::try_from(&k[pre.len()..]),
                        <[u8; 8]>::try_from(&v[..]),
                    ) else {
                        return Err(StateError::Corrupt {
                            key: String::from_utf8_lossy(&k).into_owned(),
                            cause: "bad offset entry".into(),
                        });
                    };
                    out.insert(u32::from_be_bytes(p), u64::from_be_bytes(o));
                }
                Ok(out)
            })
            .await
            .map_err(io)?
    }

    async fn commit(&self, consumer: &str, topic: &str, offsets: &[(u32, u64)]) -> Result<()> {
        if offsets.is_empty() {
            return Ok(());
        }
        let pre = prefix(consumer, topic);
        let offsets = offsets.to_vec();
        self.db
            .blocking(move |db| {
                let cf = db.cf(CF_OFFSETS);
                let mut wb = WriteBatch::default();
                for (p, o) in offsets {
                    let mut k = pre.clone();
                    k.extend_from_slice(&p.to_be_bytes());
                    wb.put_cf(cf, k, o.to_be_bytes());
                }
                db.db().write(wb).map_err(io)
            })
            .await
            .map_err(io)?
    }

    async fn forget_topic(&self, topic: &str) -> Result<usize> {
        let topic = topic.as_bytes().to_vec();
        self.db
            .blocking(move |db| {
                let cf = db.cf(CF_OFFSETS);
                let mut wb = WriteBatch::default();
                let mut gone = 0;
                for item in db.db().iterator_cf(cf, IteratorMode::Start) {
                    let (k, _) = item.map_err(io)?;
                    // consumer | 0 | topic | 0 | partition (4 bytes)
                    let Some(at) = k.iter().position(|&b| b == 0) else {
                        continue;
                    };
                    let rest = &k[at + 1..];
                    if rest.len() == topic.len() + 5
                        && rest.starts_with(&topic)
                        && rest[topic.len()] == 0
                    {
                        wb.delete_cf(cf, &k);
                        gone += 1;
                    }
                }
                db.db().write(wb).map_err(io)?;
                Ok(gone)
            })
            .await
            .map_err(io)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn commits_are_scoped_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = RocksOffsetStore::new(LocalDb::open(dir.path()).unwrap());
            s.commit("g1", "t", &[(0, 100), (3, 7)]).await.unwrap();
            s.commit("g1", "t", &[(0, 101)]).await.unwrap();
            s.commit("g1", "t2", &[(0, 5)]).await.unwrap();
            s.commit("g2", "t", &[(0, 9)]).await.unwrap();
        }
        let s = RocksOffsetStore::new(LocalDb::open(dir.path()).unwrap());
        let got = s.load("g1", "t").await.unwrap();
        assert_eq!(got, HashMap::from([(0, 101), (3, 7)]));
        assert_eq!(s.load("g2", "t").await.unwrap(), HashMap::from([(0, 9)]));
        assert!(s.load("g3", "t").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn forgetting_a_topic_leaves_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let s = RocksOffsetStore::new(LocalDb::open(dir.path()).unwrap());
        s.commit("g1", "t", &[(0, 100), (3, 7)]).await.unwrap();
        s.commit("g2", "t", &[(0, 9)]).await.unwrap();
        s.commit("g1", "t2", &[(0, 5)]).await.unwrap();
        s.commit("g1", "t.x", &[(0, 6)]).await.unwrap();
        assert_eq!(s.forget_topic("t").await.unwrap(), 3);
        assert!(s.load("g1", "t").await.unwrap().is_empty());
        assert!(s.load("g2", "t").await.unwrap().is_empty());
        assert_eq!(s.load("g1", "t2").await.unwrap(), HashMap::from([(0, 5)]));
        assert_eq!(s.load("g1", "t.x").await.unwrap(), HashMap::from([(0, 6)]));
    }

    #[tokio::test]
    async fn a_seed_sets_only_what_is_not_committed() {
        let dir = tempfile::tempdir().unwrap();
        let s = RocksOffsetStore::new(LocalDb::open(dir.path()).unwrap());
        s.commit("g", "t", &[(0, 100)]).await.unwrap();
        s.seed("g", "t", &[(0, 3), (1, 4)]).await.unwrap();
        assert_eq!(
            s.load("g", "t").await.unwrap(),
            HashMap::from([(0, 100), (1, 4)])
        );
    }
}
