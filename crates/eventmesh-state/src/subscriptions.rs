//! Subscriptions, kept in the meta store under
//! `/em/subs/<group>/<topic>/<clientId>` as JSON, so they survive restarts
//! (and, with a cluster meta store, are shared by every instance).

use std::sync::Arc;

use bytes::Bytes;
use eventmesh_meta::MetaStore;
use serde::{Deserialize, Serialize};

use crate::error::{Result, StateError};

pub const SUBS_PREFIX: &str = "/em/subs/";

/// How the members of a group share a topic's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DeliveryMode {
    /// Each event goes to exactly one member, sticky by partition key.
    LoadBalance,
    /// Every member gets every event.
    Broadcast,
}

/// Where a new consumer starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StartFrom {
    Latest,
    Earliest,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subscription {
    pub subscription_id: String,
    pub client_id: String,
    pub topic: String,
    pub group: String,
    pub mode: DeliveryMode,
    /// Webhook target; `None` means the client pulls (long poll).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    pub from: StartFrom,
    pub created_ms: u64,
}

impl Subscription {
    /// The consumer whose offsets this subscription reads and commits: the
    /// group for load-balanced members, the group and client for broadcast.
    pub fn consumer(&self) -> String {
        match self.mode {
            DeliveryMode::LoadBalance => self.group.clone(),
            DeliveryMode::Broadcast => format!("{}:{}", self.group, self.client_id),
        }
    }

    pub fn key(&self) -> String {
        format!(
            "{SUBS_PREFIX}{}/{}/{}",
            self.group, self.topic, self.client_id
        )
    }
}

/// Meta-backed subscription store.
#[derive(Clone)]
pub struct SubscriptionStore {
    meta: Arc<dyn MetaStore>,
}

impl SubscriptionStore {
    pub fn new(meta: Arc<dyn MetaStore>) -> Self {
        SubscriptionStore { meta }
    }

    /// Stores (or replaces) a subscription.
    pub async fn put(&self, sub: &Subscription) -> Result<()> {
        let json = serde_json::to_vec(sub).map_err(|e| StateError::Corrupt {
            key: sub.key(),
            cause: e.to_string(),
        })?;
        self.meta.put(&sub.key(), Bytes::from(json)).await?;
        Ok(())
    }

    /// Removes one subscription; true when it existed.
    pub async fn remove(&self, sub: &Subscription) -> Result<bool> {
        Ok(self.meta.delete(&sub.key()).await?)
    }

    /// Every stored subscription.
    pub async fn list(&self) -> Result<Vec<Subscription>> {
        self.meta
            .get_prefix(SUBS_PREFIX)
            .await?
            .into_iter()
            .map(|kv| {
                serde_json::from_slice(&kv.value).map_err(|e| StateError::Corrupt {
                    key: kv.key,
                    cause: e.to_string(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventmesh_meta::memory::InMemoryMetaStore;

    fn sub(client: &str, mode: DeliveryMode) -> Subscription {
        Subscription {
            subscription_id: format!("id-{client}"),
            client_id: client.into(),
            topic: "orders".into(),
            group: "g".into(),
            mode,
            url: None,
            from: StartFrom::Latest,
            created_ms: 1,
        }
    }

    #[tokio::test]
    async fn put_list_remove() {
        let store = SubscriptionStore::new(Arc::new(InMemoryMetaStore::new()));
        let a = sub("a", DeliveryMode::LoadBalance);
        let b = sub("b", DeliveryMode::Broadcast);
        store.put(&a).await.unwrap();
        store.put(&b).await.unwrap();
        let all = store.list().await.unwrap();
        assert_eq!(all, vec![a.clone(), b.clone()]);
        assert_eq!(a.consumer(), "g");
        assert_eq!(b.consumer(), "g:b");
        assert!(store.remove(&a).await.unwrap());
        assert!(!store.remove(&a).await.unwrap());
        assert_eq!(store.list().await.unwrap(), vec![b]);
    }

    #[test]
    fn json_shape_is_stable() {
        let mut s = sub("c", DeliveryMode::LoadBalance);
        s.url = Some("http://x".into());
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["mode"], "LOAD_BALANCE");
        assert_eq!(v["clientId"], "c");
        assert_eq!(v["from"], "latest");
    }
}
