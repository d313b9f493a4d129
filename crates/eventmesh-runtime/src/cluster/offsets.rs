//! Committed offsets where every instance reads them:
//! `/em/offsets/<consumer>/<topic>/<partition>` in the meta store, the
//! offset as decimal text. A commit is a write guarded by the committer's
//! claim on the partition (its fencing token is the claim's revision), so
//! the store itself refuses a stale owner's commit; the next owner starts
//! exactly at the last commit its predecessor made while it owned the
//! partition.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use eventmesh_meta::MetaStore;
use eventmesh_state::{OffsetStore, StateError};

type StateResult<T> = std::result::Result<T, StateError>;

use super::{owner_key, Fence};
use crate::metrics::Metrics;

const OFFSETS_PREFIX: &str = "/em/offsets/";

fn prefix(consumer: &str, topic: &str) -> String {
    format!("{OFFSETS_PREFIX}{consumer}/{topic}/")
}

/// [`OffsetStore`] in the meta store, each commit fenced.
pub struct FencedOffsetStore {
    meta: Arc<dyn MetaStore>,
    fence: Arc<Fence>,
    metrics: Arc<Metrics>,
}

impl FencedOffsetStore {
    pub fn new(meta: Arc<dyn MetaStore>, fence: Arc<Fence>, metrics: Arc<Metrics>) -> Self {
        FencedOffsetStore {
            meta,
            fence,
            metrics,
        }
    }

    /// Writes each offset guarded by the revision `guard` gives for its
    /// partition's claim (0: no claim); a partition without one is not
    /// written. The partitions not written, counted as fenced writes.
    async fn write_guarded(
        &self,
        consumer: &str,
        topic: &str,
        offsets: &[(u32, u64)],
        guard: impl Fn(u32) -> Option<u64>,
    ) -> StateResult<Vec<u32>> {
        let prefix = prefix(consumer, topic);
        let mut fenced = Vec::new();
        for &(p, offset) in offsets {
            let written = match guard(p) {
                Some(revision) => {
                    self.meta
                        .put_guarded(
                            &owner_key(topic, p),
                            revision,
                            &format!("{prefix}{p}"),
                            Bytes::from(offset.to_string()),
                            None,
                        )
                        .await?
                }
                None => None,
            };
            if written.is_none() {
                self.metrics.fenced("offset");
                fenced.push(p);
            }
        }
        Ok(fenced)
    }
}

/// `Fenced` naming the partitions refused, if any.
fn refused(fenced: &[u32], message: impl FnOnce() -> String) -> StateResult<()> {
    if fenced.is_empty() {
        Ok(())
    } else {
        Err(StateError::Fenced(message()))
    }
}

#[async_trait]
impl OffsetStore for FencedOffsetStore {
    async fn load(&self, consumer: &str, topic: &str) -> StateResult<HashMap<u32, u64>> {
        let prefix = prefix(consumer, topic);
        let mut out = HashMap::new();
        for kv in self.meta.get_prefix(&prefix).await? {
            // Keys of a topic whose name extends this one's do not parse.
            let Some(Ok(p)) = kv.key.strip_prefix(&prefix).map(str::parse::<u32>) else {
                continue;
            };
            let offset = std::str::from_utf8(&kv.value)
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| StateError::Corrupt {
                    key: kv.key.clone(),
                    cause: "an offset is not a whole number".to_string(),
                })?;
            out.insert(p, offset);
        }
        Ok(out)
    }

    async fn commit(&self, consumer: &str, topic: &str, offsets: &[(u32, u64)]) -> StateResult<()> {
        // Only under this instance's claim.
        let fenced = self
            .write_guarded(consumer, topic, offsets, |p| self.fence.token(topic, p))
            .await?;
        refused(&fenced, || {
            format!(
                "offset commit of {consumer:?} on {topic:?} partitions {fenced:?} refused: \
                 this instance no longer owns them"
            )
        })
    }

    /// Each partition's write is guarded by this instance's claim on it,
    /// or, where this instance holds none, by the partition having no
    /// claim at all (then no owner reads it, and the next one starts from
    /// what is written here). Refused, per partition, when another
    /// instance claims it.
    async fn reset(&self, consumer: &str, topic: &str, offsets: &[(u32, u64)]) -> StateResult<()> {
        let fenced = self
            .write_guarded(consumer, topic, offsets, |p| {
                Some(self.fence.token(topic, p).unwrap_or(0))
            })
            .await?;
        refused(&fenced, || {
            format!(
                "offset reset of {consumer:?} on {topic:?} partitions {fenced:?} refused: \
                 another instance owns them"
            )
        })
    }

    /// Unfenced, and only where nothing is stored yet (a create-if-absent
    /// per partition): a seed never moves a committed offset, so it needs
    /// no claim on the partition.
    async fn seed(&self, consumer: &str, topic: &str, offsets: &[(u32, u64)]) -> StateResult<()> {
        let prefix = prefix(consumer, topic);
        for &(p, offset) in offsets {
            self.meta
                .put_if_absent(&format!("{prefix}{p}"), Bytes::from(offset.to_string()))
                .await?;
        }
        Ok(())
    }

    async fn forget_topic(&self, topic: &str) -> StateResult<usize> {
        let mut n = 0;
        for kv in self.meta.get_prefix(OFFSETS_PREFIX).await? {
            let Some((rest, p)) = kv.key.rsplit_once('/') else {
                continue;
            };
            if p.parse::<u32>().is_ok() && rest.ends_with(&format!("/{topic}")) {
                n += usize::from(self.meta.delete(&kv.key).await?);
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventmesh_meta::memory::InMemoryMetaStore;

    #[tokio::test]
    async fn commits_follow_the_claim() {
        let meta: Arc<dyn MetaStore> = Arc::new(InMemoryMetaStore::new());
        let fence = Arc::new(Fence::default());
        let metrics = Arc::new(Metrics::new());
        let store = FencedOffsetStore::new(meta.clone(), fence.clone(), metrics.clone());
        let key = owner_key("t", 0);
        let token = meta
            .put_guarded(&key, 0, &key, Bytes::from_static(b"me"), None)
            .await
            .unwrap()
            .unwrap();
        // Not claimed here yet: refused.
        assert!(matches!(
            store.commit("g", "t", &[(0, 5)]).await,
            Err(StateError::Fenced(_))
        ));
        fence.own("t", 0, token);
        let hour = std::time::Duration::from_secs(3600);
        fence.hold_until(Some(tokio::time::Instant::now() + hour));
        store.commit("g", "t", &[(0, 5)]).await.unwrap();
        assert_eq!(store.load("g", "t").await.unwrap(), HashMap::from([(0, 5)]));
        // A seed needs no claim and sets only what is not committed yet.
        fence.forget_all();
        store.seed("g", "t", &[(0, 1), (1, 7)]).await.unwrap();
        assert_eq!(
            store.load("g", "t").await.unwrap(),
            HashMap::from([(0, 5), (1, 7)])
        );
        meta.delete("/em/offsets/g/t/1").await.unwrap();
        fence.own("t", 0, token);
        // Another claim replaces ours: the store refuses the stale token.
        meta.delete(&key).await.unwrap();
        meta.put_guarded(&key, 0, &key, Bytes::from_static(b"other"), None)
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(
            store.commit("g", "t", &[(0, 9)]).await,
            Err(StateError::Fenced(_))
        ));
        assert_eq!(store.load("g", "t").await.unwrap(), HashMap::from([(0, 5)]));
        let fenced = metrics
            .fenced_writes
            .get_or_create(&vec![("kind".to_string(), "offset".to_string())])
            .get();
        assert_eq!(fenced, 2);
        // A topic whose name extends this one's is another topic.
        meta.put("/em/offsets/g/t/x/1", Bytes::from_static(b"7"))
            .await
            .unwrap();
        assert_eq!(store.load("g", "t").await.unwrap(), HashMap::from([(0, 5)]));
        assert_eq!(store.forget_topic("t").await.unwrap(), 1);
        assert!(store.load("g", "t").await.unwrap().is_empty());
    }
}
