//! What the MQTT listener keeps beyond the mesh's own state: sessions
//! under `/em/mqtt/sessions/<client id>` and retained messages under
//! `/em/mqtt/retained/<topic name>`, JSON in the meta store (so that a
//! session survives a restart, and in a cluster is found by whichever
//! instance the device reconnects to).
//!
//! A session record holds what the mesh's subscriptions cannot: each
//! topic filter with its granted QoS and options, the mesh group the
//! session's subscriptions are made in, and the session expiry. The
//! subscriptions themselves, their committed offsets and the deliveries
//! not yet acknowledged are the mesh's, like any subscriber's. Writes are
//! plain puts (last write wins: one connection owns a session at a time).

use std::sync::Arc;

use eventmesh_meta::MetaStore;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::sessions::{decode, encode};

pub const MQTT_SESSIONS_PREFIX: &str = "/em/mqtt/sessions/";
pub const MQTT_RETAINED_PREFIX: &str = "/em/mqtt/retained/";

/// One topic filter of a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MqttSubscription {
    pub filter: String,
    /// The granted QoS (0, 1 or 2).
    pub qos: u8,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_local: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retain_as_published: bool,
    /// The MQTT 5 subscription identifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u32>,
}

/// A persistent MQTT session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MqttSession {
    /// The client identifier the device sent.
    pub client_id: String,
    /// The mesh group the session's subscriptions are in (fresh for
    /// every new session, so that a new session never resumes an older
    /// one's offsets).
    pub group: String,
    /// The protocol level of the last connection (4 or 5).
    pub protocol: u8,
    /// Seconds the session outlives its connection (`u32::MAX`: no
    /// limit the device asked for; the listener's maximum applies).
    pub expiry_s: u32,
    #[serde(default)]
    pub subscriptions: Vec<MqttSubscription>,
    /// When its last connection ended (ms since the epoch); `None`
    /// while a connection holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disconnected_ms: Option<u64>,
    /// The instance whose connection holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// Outbound QoS 2 messages the device acknowledged with PUBREC and
    /// whose PUBCOMP has not come yet: their packet ids, released again
    /// (PUBREL) when the session resumes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_rel: Vec<u16>,
}

impl MqttSession {
    /// Whether the session has outlived its expiry at `now_ms`, with
    /// `max_s` the longest expiry the listener grants.
    pub fn expired(&self, now_ms: u64, max_s: u32) -> bool {
        match self.disconnected_ms {
            None => false,
            Some(at) => {
                let s = u64::from(self.expiry_s.min(max_s));
                now_ms.saturating_sub(at) >= s.saturating_mul(1000)
            }
        }
    }
}

/// A retained message: the event as stored JSON, with the QoS it was
/// published at.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Retained {
    /// The MQTT topic name.
    pub topic: String,
    pub qos: u8,
    /// The CloudEvent in structured JSON.
    pub event: Box<serde_json::value::RawValue>,
    pub stored_ms: u64,
    /// When it expires (MQTT 5 message expiry), ms since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
}

/// The MQTT sessions and retained messages in the meta store.
#[derive(Clone)]
pub struct MqttStore {
    meta: Arc<dyn MetaStore>,
}

fn session_key(client_id: &str) -> String {
    format!("{MQTT_SESSIONS_PREFIX}{client_id}")
}

fn retained_key(topic: &str) -> String {
    format!("{MQTT_RETAINED_PREFIX}{topic}")
}

impl MqttStore {
    pub fn new(meta: Arc<dyn MetaStore>) -> Self {
        MqttStore { meta }
    }

    pub async fn session(&self, client_id: &str) -> Result<Option<MqttSession>> {
        let key = session_key(client_id);
        match self.meta.get(&key).await? {
            Some(kv) => decode(&key, &kv.value).map(Some),
            None => Ok(None),
        }
    }

    pub async fn put_session(&self, session: &MqttSession) -> Result<()> {
        let key = session_key(&session.client_id);
        self.meta.put(&key, encode(&key, session)?).await?;
        Ok(())
    }

    /// True when the session existed.
    pub async fn remove_session(&self, client_id: &str) -> Result<bool> {
        Ok(self.meta.delete(&session_key(client_id)).await?)
    }

    /// Every stored session, sorted by client id.
    pub async fn sessions(&self) -> Result<Vec<MqttSession>> {
        self.meta
            .get_prefix(MQTT_SESSIONS_PREFIX)
            .await?
            .into_iter()
            .map(|kv| decode(&kv.key, &kv.value))
            .collect()
    }

    pub async fn put_retained(&self, retained: &Retained) -> Result<()> {
        let key = retained_key(&retained.topic);
        self.meta.put(&key, encode(&key, retained)?).await?;
        Ok(())
    }

    /// True when a message was retained on the topic.
    pub async fn remove_retained(&self, topic: &str) -> Result<bool> {
        Ok(self.meta.delete(&retained_key(topic)).await?)
    }

    /// The retained messages of the topics starting with `prefix`, sorted
    /// by topic.
    pub async fn retained(&self, prefix: &str) -> Result<Vec<Retained>> {
        self.meta
            .get_prefix(&retained_key(prefix))
            .await?
            .into_iter()
            .map(|kv| decode(&kv.key, &kv.value))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventmesh_meta::memory::InMemoryMetaStore;

    fn session(id: &str) -> MqttSession {
        MqttSession {
            client_id: id.into(),
            group: format!("mqtt.{id}"),
            protocol: 5,
            expiry_s: 60,
            subscriptions: vec![MqttSubscription {
                filter: "a/+".into(),
                qos: 1,
                no_local: false,
                retain_as_published: true,
                id: Some(7),
            }],
            disconnected_ms: None,
            instance: None,
            pending_rel: vec![3],
        }
    }

    #[tokio::test]
    async fn sessions_and_retained_messages_round_trip() {
        let store = MqttStore::new(Arc::new(InMemoryMetaStore::new()));
        assert_eq!(store.session("d1").await.unwrap(), None);
        store.put_session(&session("d1")).await.unwrap();
        store.put_session(&session("d2")).await.unwrap();
        assert_eq!(store.session("d1").await.unwrap(), Some(session("d1")));
        let ids: Vec<String> = store
            .sessions()
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.client_id)
            .collect();
        assert_eq!(ids, ["d1", "d2"]);
        assert!(store.remove_session("d1").await.unwrap());
        assert!(!store.remove_session("d1").await.unwrap());

        for topic in ["a/b", "a/c", "b"] {
            let r = Retained {
                topic: topic.into(),
                qos: 1,
                event: serde_json::value::RawValue::from_string(format!("{{\"id\":\"{topic}\"}}"))
                    .unwrap(),
                stored_ms: 1,
                expires_at_ms: None,
            };
            store.put_retained(&r).await.unwrap();
        }
        let under_a: Vec<String> = store
            .retained("a/")
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.topic)
            .collect();
        assert_eq!(under_a, ["a/b", "a/c"]);
        assert_eq!(store.retained("").await.unwrap().len(), 3);
        assert!(store.remove_retained("a/b").await.unwrap());
        assert_eq!(store.retained("a/").await.unwrap().len(), 1);
    }

    #[test]
    fn a_session_expires_its_interval_after_its_connection_ended() {
        let mut s = session("d");
        assert!(!s.expired(u64::MAX, u32::MAX), "connected: never");
        s.disconnected_ms = Some(1_000);
        assert!(!s.expired(60_999, u32::MAX));
        assert!(s.expired(61_000, u32::MAX));
        assert!(s.expired(11_000, 10), "the listener's maximum caps it");
    }
}
