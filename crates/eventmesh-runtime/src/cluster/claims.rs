//! Leased claims: the one way an instance takes a key for itself, whether
//! the key stands for a partition (`/em/owners/…`) or a connector
//! (`/em/connectors/owners/…`).
//!
//! A claim is a create-if-absent of the key, bound to the instance's lease,
//! whose value is the claimant's [`ClaimRecord`] (instance id and boot). The
//! store revision of that create is the claim's fencing token: every write
//! made in the claim's name is guarded by it, it only grows, and no clock is
//! involved. A claim ends with its lease, or when its holder deletes it at
//! that revision.

use bytes::Bytes;
use eventmesh_meta::{KeyValue, LeaseId, MetaError, MetaStore};

use super::ClaimRecord;

/// A claim held: its key, and its revision (the fencing token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub key: String,
    pub token: u64,
}

/// Claims `key` for `me` under `lease`: the claim when made, `None` when
/// someone holds the key.
pub async fn claim(
    meta: &dyn MetaStore,
    key: &str,
    me: &ClaimRecord,
    lease: LeaseId,
) -> Result<Option<Claim>, MetaError> {
    let value = Bytes::from(serde_json::to_vec(me).expect("a claim record serializes"));
    let token = meta.put_guarded(key, 0, key, value, Some(lease)).await?;
    Ok(token.map(|token| Claim {
        key: key.to_string(),
        token,
    }))
}

/// Releases a claim: true when it was deleted, false when it was gone
/// already or is another claim now.
pub async fn release(meta: &dyn MetaStore, key: &str, token: u64) -> Result<bool, MetaError> {
    meta.delete_at(key, token).await
}

/// Who holds the claim stored as `kv`. A value that is not a claim record
/// (written by an older version, which stored the bare instance id) names
/// that instance with an unknown boot.
pub fn holder(kv: &KeyValue) -> ClaimRecord {
    serde_json::from_slice(&kv.value).unwrap_or_else(|_| ClaimRecord {
        instance: String::from_utf8_lossy(&kv.value).into_owned(),
        boot: String::new(),
    })
}

/// The claim stored as `kv`, if `me` holds it.
pub fn held_by(kv: &KeyValue, me: &ClaimRecord) -> Option<Claim> {
    (holder(kv) == *me).then(|| Claim {
        key: kv.key.clone(),
        token: kv.revision,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use eventmesh_meta::memory::InMemoryMetaStore;

    fn record(instance: &str, boot: &str) -> ClaimRecord {
        ClaimRecord {
            instance: instance.into(),
            boot: boot.into(),
        }
    }

    #[tokio::test]
    async fn one_claim_per_key_until_released_or_its_lease_ends() {
        let meta = InMemoryMetaStore::new();
        let lease = meta.grant_lease(Duration::from_secs(60)).await.unwrap();
        let (a, b) = (record("i-0", "b0"), record("i-1", "b1"));
        let first = claim(&meta, "/k", &a, lease).await.unwrap().unwrap();
        assert_eq!(claim(&meta, "/k", &b, lease).await.unwrap(), None);
        let kv = meta.get("/k").await.unwrap().unwrap();
        assert_eq!(holder(&kv), a);
        assert_eq!(held_by(&kv, &a), Some(first.clone()));
        assert_eq!(held_by(&kv, &b), None);
        // Another boot of the same instance does not hold it.
        assert_eq!(held_by(&kv, &record("i-0", "b9")), None);

        assert!(!release(&meta, "/k", first.token + 1).await.unwrap());
        assert!(release(&meta, "/k", first.token).await.unwrap());
        let second = claim(&meta, "/k", &b, lease).await.unwrap().unwrap();
        assert!(second.token > first.token);

        meta.revoke_lease(lease).await.unwrap();
        assert!(meta.get("/k").await.unwrap().is_none());
    }

    #[test]
    fn a_bare_instance_id_is_read_as_its_holder() {
        let kv = KeyValue {
            key: "/k".into(),
            value: Bytes::from_static(b"i-3"),
            revision: 7,
        };
        assert_eq!(holder(&kv), record("i-3", ""));
    }
}
