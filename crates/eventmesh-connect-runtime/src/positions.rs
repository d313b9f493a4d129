//! Where connectors keep their positions
//! (`eventmesh.connector.offset.store`):
//!
//! - `memory`: in the process (development only: a restart starts every
//!   source over, and the boot log says so);
//! - `rocksdb`: the instance's local RocksDB (`offsets` column family,
//!   keys `\0connector\0<name>`, which no consumer offset key can be);
//! - `meta`: the meta store, `/em/connectors/positions/<name>`, shared by
//!   every instance; a commit made under a claim is guarded by the claim's
//!   revision on the store itself, so a stale owner's commit is refused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use eventmesh_meta::MetaStore;
use eventmesh_storage::localdb::CF_OFFSETS;
use eventmesh_storage::LocalDb;
use serde_json::Value;

/// The claim a connector runs under in a shared meta store (the cluster's
/// leased claim): commits are fenced by its token.
pub use eventmesh_runtime::cluster::Claim;

/// What a commit came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Committed {
    Done,
    /// The claim it was made under is gone or someone else's.
    Fenced,
}

#[async_trait]
pub trait Positions: Send + Sync {
    async fn load(&self, name: &str) -> Result<Option<Value>, String>;
    async fn commit(
        &self,
        name: &str,
        position: &Value,
        claim: Option<&Claim>,
    ) -> Result<Committed, String>;
    async fn forget(&self, name: &str) -> Result<(), String>;
}

/// `memory`.
#[derive(Default)]
pub struct MemoryPositions(Mutex<HashMap<String, Value>>);

#[async_trait]
impl Positions for MemoryPositions {
    async fn load(&self, name: &str) -> Result<Option<Value>, String> {
        Ok(self.0.lock().expect("positions lock").get(name).cloned())
    }

    async fn commit(&self, name: &str, p: &Value, _: Option<&Claim>) -> Result<Committed, String> {
        self.0
            .lock()
            .expect("positions lock")
            .insert(name.to_string(), p.clone());
        Ok(Committed::Done)
    }

    async fn forget(&self, name: &str) -> Result<(), String> {
        self.0.lock().expect("positions lock").remove(name);
        Ok(())
    }
}

/// `rocksdb`.
pub struct RocksPositions(pub Arc<LocalDb>);

fn rocks_key(name: &str) -> Vec<u8> {
    let mut k = b"\0connector\0".to_vec();
    k.extend_from_slice(name.as_bytes());
    k
}

#[async_trait]
impl Positions for RocksPositions {
    async fn load(&self, name: &str) -> Result<Option<Value>, String> {
        let key = rocks_key(name);
        let raw = (self.0)
            .blocking(move |db| db.db().get_cf(db.cf(CF_OFFSETS), key))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        raw.map(|v| serde_json::from_slice(&v).map_err(|e| format!("position of {name}: {e}")))
            .transpose()
    }

    async fn commit(&self, name: &str, p: &Value, _: Option<&Claim>) -> Result<Committed, String> {
        let key = rocks_key(name);
        let value = serde_json::to_vec(p).map_err(|e| e.to_string())?;
        (self.0)
            .blocking(move |db| db.db().put_cf(db.cf(CF_OFFSETS), key, value))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        Ok(Committed::Done)
    }

    async fn forget(&self, name: &str) -> Result<(), String> {
        let key = rocks_key(name);
        (self.0)
            .blocking(move |db| db.db().delete_cf(db.cf(CF_OFFSETS), key))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())
    }
}

/// `meta`.
pub struct MetaPositions(pub Arc<dyn MetaStore>);

pub const POSITIONS_PREFIX: &str = "/em/connectors/positions/";

#[async_trait]
impl Positions for MetaPositions {
    async fn load(&self, name: &str) -> Result<Option<Value>, String> {
        let kv = self
            .0
            .get(&format!("{POSITIONS_PREFIX}{name}"))
            .await
            .map_err(|e| e.to_string())?;
        kv.map(|kv| {
            serde_json::from_slice(&kv.value).map_err(|e| format!("position of {name}: {e}"))
        })
        .transpose()
    }

    async fn commit(
        &self,
        name: &str,
        p: &Value,
        claim: Option<&Claim>,
    ) -> Result<Committed, String> {
        let key = format!("{POSITIONS_PREFIX}{name}");
        let value = Bytes::from(serde_json::to_vec(p).map_err(|e| e.to_string())?);
        match claim {
            None => {
                self.0.put(&key, value).await.map_err(|e| e.to_string())?;
                Ok(Committed::Done)
            }
            Some(c) => match self
                .0
                .put_guarded(&c.key, c.token, &key, value, None)
                .await
                .map_err(|e| e.to_string())?
            {
                Some(_) => Ok(Committed::Done),
                None => Ok(Committed::Fenced),
            },
        }
    }

    async fn forget(&self, name: &str) -> Result<(), String> {
        self.0
            .delete(&format!("{POSITIONS_PREFIX}{name}"))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventmesh_meta::memory::InMemoryMetaStore;
    use serde_json::json;

    /// A commit under a claim that moved is refused by the store itself,
    /// and the position stays the last one committed under a valid claim.
    #[tokio::test]
    async fn a_stale_owner_s_commit_is_refused() {
        let meta: Arc<dyn MetaStore> = Arc::new(InMemoryMetaStore::new());
        let positions = MetaPositions(meta.clone());
        let key = "/em/connectors/owners/c";
        let first = meta
            .put_guarded(key, 0, key, Bytes::from("i-0"), None)
            .await
            .unwrap()
            .unwrap();
        let mine = Claim {
            key: key.into(),
            token: first,
        };
        let p1 = json!({"id": 1});
        assert_eq!(
            positions.commit("c", &p1, Some(&mine)).await,
            Ok(Committed::Done)
        );
        // The claim goes (its lease ended) and another instance takes it.
        assert!(meta.delete_at(key, first).await.unwrap());
        let second = meta
            .put_guarded(key, 0, key, Bytes::from("i-1"), None)
            .await
            .unwrap()
            .unwrap();
        let p2 = json!({"id": 2});
        assert_eq!(
            positions.commit("c", &p2, Some(&mine)).await,
            Ok(Committed::Fenced)
        );
        assert_eq!(positions.load("c").await, Ok(Some(p1)));
        let theirs = Claim {
            key: key.into(),
            token: second,
        };
        assert_eq!(
            positions.commit("c", &p2, Some(&theirs)).await,
            Ok(Committed::Done)
        );
        assert_eq!(positions.load("c").await, Ok(Some(p2)));
        positions.forget("c").await.unwrap();
        assert_eq!(positions.load("c").await, Ok(None));
    }
}
