//! An in-memory [`MetaStore`] for tests of the crates above this one. Never
//! used by production code (it is compiled only with the `testing` feature).

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::Result;
use crate::store::{KeyValue, MetaStore};

#[derive(Default)]
pub struct InMemoryMetaStore {
    inner: Mutex<(u64, BTreeMap<String, KeyValue>)>,
}

impl InMemoryMetaStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn mutate(
        &self,
        key: &str,
        decide: impl FnOnce(Option<&KeyValue>) -> Option<Option<Bytes>>,
    ) -> Option<u64> {
        let mut g = self.inner.lock().expect("memory meta lock");
        let change = decide(g.1.get(key))?;
        g.0 += 1;
        let revision = g.0;
        match change {
            Some(value) => {
                g.1.insert(
                    key.to_string(),
                    KeyValue {
                        key: key.to_string(),
                        value,
                        revision,
                    },
                );
            }
            None => {
                g.1.remove(key);
            }
        }
        Some(revision)
    }
}

#[async_trait]
impl MetaStore for InMemoryMetaStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        Ok(self
            .inner
            .lock()
            .expect("memory meta lock")
            .1
            .get(key)
            .cloned())
    }

    async fn get_prefix(&self, prefix: &str) -> Result<Vec<KeyValue>> {
        let g = self.inner.lock().expect("memory meta lock");
        Ok(g.1
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v.clone())
            .collect())
    }

    async fn put(&self, key: &str, value: Bytes) -> Result<u64> {
        Ok(self
            .mutate(key, |_| Some(Some(value)))
            .expect("put always writes"))
    }

    async fn put_if_absent(&self, key: &str, value: Bytes) -> Result<bool> {
        Ok(self
            .mutate(key, |c| c.is_none().then_some(Some(value)))
            .is_some())
    }

    async fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        new: Bytes,
    ) -> Result<bool> {
        Ok(self
            .mutate(key, |c| {
                let ok = match (c, expected) {
                    (None, None) => true,
                    (Some(c), Some(e)) => c.value[..] == *e,
                    _ => false,
                };
                ok.then_some(Some(new))
            })
            .is_some())
    }

    async fn delete(&self, key: &str) -> Result<bool> {
        Ok(self.mutate(key, |c| c.is_some().then_some(None)).is_some())
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn passes_the_tck() {
        crate::tck::run_all(&super::InMemoryMetaStore::new()).await;
    }
}
