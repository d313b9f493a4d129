//! The session registry: agents under `/em/agents/<id>`, client-to-agent
//! bindings under `/em/bindings/<clientId>` and client sessions under
//! `/em/sessions/<id>`, all JSON in the meta store.
//!
//! Consistency rules: registration, bindings and sessions are plain puts
//! (last write wins). Which runtime instance hosts an agent (its *host*) is
//! fenced by an epoch: a heartbeat is a compare-and-swap from the value
//! read, rejected when it carries an older epoch than the stored one (or the
//! same epoch from another host), and [`SessionRegistry::take_over`] moves
//! the agent to a new host by a compare-and-swap that bumps the epoch, so a
//! stale host's later writes are refused. Meta
//! failures surface as [`StateError::Meta`], never as `false`/`None`.

use std::sync::Arc;

use bytes::Bytes;
use eventmesh_meta::MetaStore;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Result, StateError};

pub const AGENTS_PREFIX: &str = "/em/agents/";
pub const BINDINGS_PREFIX: &str = "/em/bindings/";
pub const SESSIONS_PREFIX: &str = "/em/sessions/";

/// How many read-CAS rounds [`SessionRegistry::take_over`] tries.
const TAKE_OVER_ATTEMPTS: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AgentStatus {
    Up,
    Down,
    /// Finishing its work, takes no new sessions.
    Draining,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Agent {
    pub id: String,
    pub capabilities: Vec<String>,
    pub capacity: u32,
    pub load: u32,
    pub status: AgentStatus,
    pub heartbeat_ms: u64,
    /// The runtime instance hosting this agent (stored as `owner`, the
    /// field's name in earlier versions).
    #[serde(rename = "owner")]
    pub host: String,
    /// Fencing token: bumped by every take-over (stored as `ownerEpoch`).
    #[serde(rename = "ownerEpoch")]
    pub host_epoch: u64,
    /// What the agent tells clients about itself (an A2A agent card).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card: Option<serde_json::Value>,
    /// The card shown only to callers the gateway admitted (A2A's
    /// authenticated extended card).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_card: Option<serde_json::Value>,
    /// The tenant and principal that registered it, when the gate knows them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// How long after its last heartbeat the agent counts as gone; 0: never.
    #[serde(default)]
    pub ttl_ms: u64,
}

impl Agent {
    /// Gone: no heartbeat within its time to live.
    pub fn expired(&self, now_ms: u64) -> bool {
        self.ttl_ms > 0 && self.heartbeat_ms.saturating_add(self.ttl_ms) < now_ms
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    pub id: String,
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    pub last_activity_ms: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Binding {
    client_id: String,
    agent_id: String,
}

fn agent_key(id: &str) -> String {
    format!("{AGENTS_PREFIX}{id}")
}

fn binding_key(client_id: &str) -> String {
    format!("{BINDINGS_PREFIX}{client_id}")
}

fn session_key(id: &str) -> String {
    format!("{SESSIONS_PREFIX}{id}")
}

pub(crate) fn encode<T: Serialize>(key: &str, value: &T) -> Result<Bytes> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| StateError::Corrupt {
            key: key.to_string(),
            cause: e.to_string(),
        })
}

pub(crate) fn decode<T: DeserializeOwned>(key: &str, value: &[u8]) -> Result<T> {
    serde_json::from_slice(value).map_err(|e| StateError::Corrupt {
        key: key.to_string(),
        cause: e.to_string(),
    })
}

/// Meta-backed registry of agents, bindings and sessions.
#[derive(Clone)]
pub struct SessionRegistry {
    meta: Arc<dyn MetaStore>,
}

impl SessionRegistry {
    pub fn new(meta: Arc<dyn MetaStore>) -> Self {
        SessionRegistry { meta }
    }

    async fn read<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        match self.meta.get(key).await? {
            Some(kv) => decode(key, &kv.value).map(Some),
            None => Ok(None),
        }
    }

    async fn write<T: Serialize>(&self, key: &str, value: &T) -> Result<()> {
        self.meta.put(key, encode(key, value)?).await?;
        Ok(())
    }

    async fn list<T: DeserializeOwned>(&self, prefix: &str) -> Result<Vec<T>> {
        self.meta
            .get_prefix(prefix)
            .await?
            .into_iter()
            .map(|kv| decode(&kv.key, &kv.value))
            .collect()
    }

    /// Stores (or replaces) an agent, last write wins.
    pub async fn register_agent(&self, agent: &Agent) -> Result<()> {
        self.write(&agent_key(&agent.id), agent).await
    }

    pub async fn get_agent(&self, id: &str) -> Result<Option<Agent>> {
        self.read(&agent_key(id)).await
    }

    /// Every registered agent, sorted by key.
    pub async fn list_agents(&self) -> Result<Vec<Agent>> {
        self.list(AGENTS_PREFIX).await
    }

    /// True when the agent existed.
    pub async fn remove_agent(&self, id: &str) -> Result<bool> {
        Ok(self.meta.delete(&agent_key(id)).await?)
    }

    /// Records a heartbeat (`load`, `heartbeat_ms`) from `host` holding
    /// `host_epoch`. False, with nothing written, when the agent is absent,
    /// when `host_epoch` is older than the stored one, when the epochs are
    /// equal but the host differs, or when a concurrent writer changed the
    /// agent since it was read. A heartbeat with a newer epoch is accepted
    /// and records that host and epoch, so the fence never moves back.
    pub async fn heartbeat(
        &self,
        agent_id: &str,
        host: &str,
        host_epoch: u64,
        load: u32,
        now_ms: u64,
    ) -> Result<bool> {
        let key = agent_key(agent_id);
        let Some(old) = self.meta.get(&key).await? else {
            return Ok(false);
        };
        let mut agent: Agent = decode(&key, &old.value)?;
        let fenced =
            host_epoch < agent.host_epoch || (host_epoch == agent.host_epoch && host != agent.host);
        if fenced {
            tracing::debug!(agent_id, host, host_epoch, "stale heartbeat rejected");
            return Ok(false);
        }
        agent.host = host.to_string();
        agent.host_epoch = host_epoch;
        agent.load = load;
        agent.heartbeat_ms = now_ms;
        Ok(self
            .meta
            .compare_and_swap(&key, Some(&old.value), encode(&key, &agent)?)
            .await?)
    }

    /// Makes `new_host` the host of the agent with the next epoch, which it
    /// returns; the heartbeat time becomes `now_ms`. Retries the read-CAS a
    /// few times when concurrent writers change the agent. `None` when the
    /// agent is absent, or (logged) when every attempt lost its CAS: the
    /// caller re-reads and decides.
    pub async fn take_over(
        &self,
        agent_id: &str,
        new_host: &str,
        now_ms: u64,
    ) -> Result<Option<u64>> {
        let key = agent_key(agent_id);
        for _ in 0..TAKE_OVER_ATTEMPTS {
            let Some(old) = self.meta.get(&key).await? else {
                return Ok(None);
            };
            let mut agent: Agent = decode(&key, &old.value)?;
            let epoch = agent
                .host_epoch
                .checked_add(1)
                .ok_or_else(|| StateError::Corrupt {
                    key: key.clone(),
                    cause: "host epoch overflow".into(),
                })?;
            agent.host = new_host.to_string();
            agent.host_epoch = epoch;
            agent.heartbeat_ms = now_ms;
            if self
                .meta
                .compare_and_swap(&key, Some(&old.value), encode(&key, &agent)?)
                .await?
            {
                return Ok(Some(epoch));
            }
        }
        tracing::warn!(agent = agent_id, new_host, "take-over lost every CAS");
        Ok(None)
    }

    /// Binds a client to an agent, last write wins.
    pub async fn bind(&self, client_id: &str, agent_id: &str) -> Result<()> {
        let binding = Binding {
            client_id: client_id.to_string(),
            agent_id: agent_id.to_string(),
        };
        self.write(&binding_key(client_id), &binding).await
    }

    /// The agent a client is bound to.
    pub async fn binding(&self, client_id: &str) -> Result<Option<String>> {
        let binding: Option<Binding> = self.read(&binding_key(client_id)).await?;
        Ok(binding.map(|b| b.agent_id))
    }

    /// True when the client was bound.
    pub async fn unbind(&self, client_id: &str) -> Result<bool> {
        Ok(self.meta.delete(&binding_key(client_id)).await?)
    }

    /// Stores (or refreshes) a session, last write wins.
    pub async fn touch_session(&self, session: &Session) -> Result<()> {
        self.write(&session_key(&session.id), session).await
    }

    pub async fn get_session(&self, id: &str) -> Result<Option<Session>> {
        self.read(&session_key(id)).await
    }

    /// True when the session existed.
    pub async fn remove_session(&self, id: &str) -> Result<bool> {
        Ok(self.meta.delete(&session_key(id)).await?)
    }

    /// Every stored session, sorted by key.
    pub async fn sessions(&self) -> Result<Vec<Session>> {
        self.list(SESSIONS_PREFIX).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use eventmesh_meta::fault::FaultyMetaStore;
    use eventmesh_meta::memory::InMemoryMetaStore;
    use eventmesh_meta::EmbeddedMetaStore;
    use eventmesh_storage::localdb::LocalDb;

    fn agent(id: &str, host: &str, epoch: u64) -> Agent {
        Agent {
            id: id.into(),
            capabilities: vec!["chat".into(), "search".into()],
            capacity: 10,
            load: 0,
            status: AgentStatus::Up,
            heartbeat_ms: 100,
            host: host.into(),
            host_epoch: epoch,
            card: None,
            extended_card: None,
            tenant: None,
            principal: None,
            ttl_ms: 0,
        }
    }

    fn embedded(dir: &std::path::Path) -> Arc<dyn MetaStore> {
        Arc::new(EmbeddedMetaStore::open(LocalDb::open(dir).unwrap()).unwrap())
    }

    async fn check_fencing(meta: Arc<dyn MetaStore>) {
        let reg = SessionRegistry::new(meta);
        reg.register_agent(&agent("ag", "node-a", 1)).await.unwrap();
        assert!(reg.heartbeat("ag", "node-a", 1, 3, 200).await.unwrap());
        let a = reg.get_agent("ag").await.unwrap().unwrap();
        assert_eq!((a.load, a.heartbeat_ms), (3, 200));

        assert_eq!(reg.take_over("ag", "node-b", 300).await.unwrap(), Some(2));
        let after = reg.get_agent("ag").await.unwrap().unwrap();
        assert_eq!((after.host.as_str(), after.host_epoch), ("node-b", 2));
        assert_eq!(after.heartbeat_ms, 300);

        // The old host, still on epoch 1, is fenced off.
        assert!(!reg.heartbeat("ag", "node-a", 1, 9, 400).await.unwrap());
        assert_eq!(reg.get_agent("ag").await.unwrap(), Some(after.clone()));
        // Same epoch, another host: also rejected.
        assert!(!reg.heartbeat("ag", "node-c", 2, 9, 400).await.unwrap());
        assert_eq!(reg.get_agent("ag").await.unwrap(), Some(after));

        assert!(reg.heartbeat("ag", "node-b", 2, 5, 500).await.unwrap());
        let b = reg.get_agent("ag").await.unwrap().unwrap();
        assert_eq!((b.load, b.heartbeat_ms, b.host_epoch), (5, 500, 2));

        assert!(!reg.heartbeat("none", "node-a", 1, 0, 1).await.unwrap());
        assert_eq!(reg.take_over("none", "node-a", 1).await.unwrap(), None);
        assert_eq!(reg.get_agent("none").await.unwrap(), None);
    }

    async fn check_concurrent_take_over(meta: Arc<dyn MetaStore>) {
        // Delayed calls: both callers read before either writes, so one
        // loses its first CAS and retries.
        let faulty = FaultyMetaStore::new(meta);
        faulty.delay(Duration::from_millis(5));
        let reg = SessionRegistry::new(Arc::new(faulty));
        reg.register_agent(&agent("ag", "node-a", 4)).await.unwrap();
        let (b, c) = tokio::join!(
            reg.take_over("ag", "node-b", 10),
            reg.take_over("ag", "node-c", 10)
        );
        let mut epochs = [b.unwrap().unwrap(), c.unwrap().unwrap()];
        epochs.sort();
        assert_eq!(epochs, [5, 6], "both succeed, one after the other");
        assert_eq!(reg.get_agent("ag").await.unwrap().unwrap().host_epoch, 6);
    }

    async fn check_round_trips(meta: Arc<dyn MetaStore>) {
        let reg = SessionRegistry::new(meta);
        let (x, y) = (agent("x", "n", 0), agent("y", "n", 0));
        reg.register_agent(&y).await.unwrap();
        reg.register_agent(&x).await.unwrap();
        assert_eq!(reg.list_agents().await.unwrap(), vec![x.clone(), y.clone()]);
        assert!(reg.remove_agent("x").await.unwrap());
        assert!(!reg.remove_agent("x").await.unwrap());
        assert_eq!(reg.list_agents().await.unwrap(), vec![y]);

        assert_eq!(reg.binding("c1").await.unwrap(), None);
        reg.bind("c1", "x").await.unwrap();
        assert_eq!(reg.binding("c1").await.unwrap().as_deref(), Some("x"));
        reg.bind("c1", "y").await.unwrap();
        assert_eq!(reg.binding("c1").await.unwrap().as_deref(), Some("y"));
        assert!(reg.unbind("c1").await.unwrap());
        assert!(!reg.unbind("c1").await.unwrap());
        assert_eq!(reg.binding("c1").await.unwrap(), None);

        let session = |id: &str, client: &str, agent: Option<&str>, at| Session {
            id: id.into(),
            client_id: client.into(),
            agent_id: agent.map(Into::into),
            last_activity_ms: at,
        };
        let (mut s1, s2) = (
            session("s1", "c1", None, 1),
            session("s2", "c2", Some("y"), 2),
        );
        reg.touch_session(&s2).await.unwrap();
        reg.touch_session(&s1).await.unwrap();
        s1.agent_id = Some("y".into());
        s1.last_activity_ms = 3;
        reg.touch_session(&s1).await.unwrap();
        assert_eq!(reg.get_session("s1").await.unwrap(), Some(s1.clone()));
        assert_eq!(reg.sessions().await.unwrap(), vec![s1, s2.clone()]);
        assert!(reg.remove_session("s1").await.unwrap());
        assert!(!reg.remove_session("s1").await.unwrap());
        assert_eq!(reg.get_session("s1").await.unwrap(), None);
        assert_eq!(reg.sessions().await.unwrap(), vec![s2]);
    }

    /// One `#[tokio::test]` per backend for each check.
    macro_rules! on_both_backends {
        ($($check:ident => $memory:ident, $embedded:ident;)*) => {$(
            #[tokio::test]
            async fn $memory() {
                $check(Arc::new(InMemoryMetaStore::new())).await;
            }

            #[tokio::test]
            async fn $embedded() {
                let dir = tempfile::tempdir().unwrap();
                $check(embedded(dir.path())).await;
            }
        )*};
    }

    on_both_backends! {
        check_fencing => fencing_memory, fencing_embedded;
        check_concurrent_take_over => concurrent_take_over_memory, concurrent_take_over_embedded;
        check_round_trips => round_trips_memory, round_trips_embedded;
    }

    #[tokio::test]
    async fn meta_failures_surface_and_heal() {
        let meta = FaultyMetaStore::new(Arc::new(InMemoryMetaStore::new()));
        let reg = SessionRegistry::new(Arc::new(meta.clone()));
        reg.register_agent(&agent("ag", "n", 1)).await.unwrap();
        meta.partition();
        let down = |e: StateError| assert!(matches!(e, StateError::Meta(_)), "{e:?}");
        down(reg.heartbeat("ag", "n", 1, 0, 1).await.unwrap_err());
        down(reg.take_over("ag", "m", 1).await.unwrap_err());
        down(reg.register_agent(&agent("b", "n", 1)).await.unwrap_err());
        down(reg.list_agents().await.unwrap_err());
        down(reg.bind("c", "ag").await.unwrap_err());
        down(reg.binding("c").await.unwrap_err());
        down(reg.sessions().await.unwrap_err());
        meta.heal();
        assert!(reg.heartbeat("ag", "n", 1, 7, 2).await.unwrap());
        assert_eq!(reg.get_agent("ag").await.unwrap().unwrap().load, 7);
    }

    #[tokio::test]
    async fn corrupt_agent_is_reported() {
        let meta: Arc<dyn MetaStore> = Arc::new(InMemoryMetaStore::new());
        let raw = Bytes::from_static(b"{\"id\":1}");
        meta.put("/em/agents/bad", raw).await.unwrap();
        let reg = SessionRegistry::new(meta);
        let corrupt = |e: StateError| {
            assert!(matches!(&e, StateError::Corrupt { key, .. } if key == "/em/agents/bad"))
        };
        corrupt(reg.heartbeat("bad", "n", 1, 0, 1).await.unwrap_err());
        corrupt(reg.take_over("bad", "n", 1).await.unwrap_err());
        corrupt(reg.list_agents().await.unwrap_err());
    }

    #[test]
    fn json_shape_is_stable() {
        let mut a = agent("ag", "node-a", 3);
        a.status = AgentStatus::Draining;
        let v = serde_json::to_value(&a).unwrap();
        assert_eq!(v["status"], "DRAINING");
        assert_eq!(v["ownerEpoch"], 3);
        assert_eq!(v["heartbeatMs"], 100);
    }
}
