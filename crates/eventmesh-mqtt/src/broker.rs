//! The listener's shared state: the connections by client id (one per
//! client: a new CONNECT takes the session over from the old connection),
//! the session and retained-message store, and the sweep of expired
//! sessions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eventmesh_api::Api;
use eventmesh_core::config::MqttConfig;
use eventmesh_meta::MetaStore;
use eventmesh_state::MqttStore;
use tokio::sync::watch;

use crate::metrics::Counters;
use tokio_util::sync::CancellationToken;

/// How often expired sessions are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// How long a new connection waits for the one it takes over to end.
const TAKE_OVER_WAIT: Duration = Duration::from_secs(5);

/// The connection holding a client id.
struct Live {
    /// Which connection (a counter), so that one ending removes only
    /// itself.
    serial: u64,
    /// Cancelled to end it (a take-over).
    kick: CancellationToken,
    /// Becomes true once it has ended and let go of its session.
    ended: watch::Receiver<bool>,
}

/// A connection's place in the registry; tells it was taken over, and
/// when dropped leaves the registry and tells that it ended.
pub struct Registration {
    pub kicked: CancellationToken,
    pub serial: u64,
    ended: watch::Sender<bool>,
    broker: Arc<Broker>,
    client: String,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.broker.unregister(&self.client, self.serial);
        let _ = self.ended.send(true);
    }
}

pub struct Broker {
    pub(crate) api: Api,
    pub(crate) store: MqttStore,
    pub(crate) settings: MqttConfig,
    pub(crate) counters: Counters,
    live: Mutex<HashMap<String, Live>>,
    serials: std::sync::atomic::AtomicU64,
}

impl Broker {
    pub fn new(api: Api, meta: Arc<dyn MetaStore>, settings: MqttConfig) -> Arc<Self> {
        let counters = Counters::new(api.admin().metrics().clone());
        Arc::new(Broker {
            counters,
            api,
            store: MqttStore::new(meta),
            settings,
            live: Mutex::new(HashMap::new()),
            serials: std::sync::atomic::AtomicU64::new(1),
        })
    }

    /// The largest packet the listener takes, in bytes.
    pub fn max_packet_bytes(&self) -> usize {
        self.settings.max_packet_bytes
    }

    /// Registers a connection for `client`, ending the one that held it
    /// and waiting (a moment at most) until that one has let go.
    pub(crate) async fn register(self: &Arc<Self>, client: &str) -> Registration {
        let serial = self
            .serials
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = watch::channel(false);
        let kicked = CancellationToken::new();
        let old = self.live.lock().expect("live lock").insert(
            client.to_string(),
            Live {
                serial,
                kick: kicked.clone(),
                ended: rx,
            },
        );
        if let Some(mut old) = old {
            old.kick.cancel();
            let _ = tokio::time::timeout(TAKE_OVER_WAIT, old.ended.wait_for(|e| *e)).await;
        }
        Registration {
            kicked,
            serial,
            ended: tx,
            broker: self.clone(),
            client: client.to_string(),
        }
    }

    /// Removes the connection `serial` of `client` (not a newer one).
    pub(crate) fn unregister(&self, client: &str, serial: u64) {
        let mut live = self.live.lock().expect("live lock");
        if live.get(client).is_some_and(|l| l.serial == serial) {
            live.remove(client);
        }
    }

    /// Whether a connection holds `client` here now.
    pub(crate) fn is_connected(&self, client: &str) -> bool {
        self.live.lock().expect("live lock").contains_key(client)
    }

    /// Cancelled when the server shuts down.
    pub fn shutdown(&self) -> &CancellationToken {
        self.api.shutdown()
    }

    /// The client ids connected here.
    pub fn connected(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .live
            .lock()
            .expect("live lock")
            .keys()
            .cloned()
            .collect();
        ids.sort();
        ids
    }

    /// Removes sessions whose expiry passed (and their subscriptions),
    /// every [`SWEEP_EVERY`], until shutdown.
    pub fn start_sweeping(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let broker = self.clone();
        tokio::spawn(async move {
            let shutdown = broker.api.shutdown().clone();
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(SWEEP_EVERY) => broker.sweep().await,
                    _ = shutdown.cancelled() => return,
                }
            }
        })
    }

    /// One sweep of expired sessions.
    pub async fn sweep(&self) {
        let sessions = match self.store.sessions().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "MQTT: cannot list sessions to expire");
                return;
            }
        };
        let now = eventmesh_core::time::now_ms();
        let here = self.api.instance_id().map(str::to_string);
        // The instances of the cluster (`None` without one).
        let members: Option<Vec<String>> = self
            .api
            .admin()
            .cluster_view()
            .map(|v| v.instances.into_iter().map(|i| i.info.id).collect());
        for mut s in sessions {
            if self.is_connected(&s.client_id) {
                continue;
            }
            let holder_gone = match (&s.instance, &members) {
                (Some(i), Some(m)) => !m.contains(i),
                _ => false,
            };
            if s.disconnected_ms.is_none() && (s.instance == here || holder_gone) {
                // Held by a connection of this instance, or of one that
                // left the cluster, that is gone (it stopped or died
                // without ending it): ended now.
                if s.expiry_s == 0 {
                    self.end_session(&s.client_id).await;
                    continue;
                }
                s.disconnected_ms = Some(now);
                if let Err(e) = self.store.put_session(&s).await {
                    tracing::warn!(client = %s.client_id, error = %e, "MQTT: cannot mark a session disconnected");
                }
                continue;
            }
            if s.expired(now, self.max_expiry_s()) {
                self.end_session(&s.client_id).await;
            }
        }
    }

    /// Ends a session: its subscriptions and its record go.
    pub(crate) async fn end_session(&self, client: &str) {
        let mesh = crate::conn::mesh_client(client);
        if let Err(e) = self.api.expire_client(&mesh).await {
            tracing::warn!(client, error = %e, "MQTT: cannot remove the subscriptions of an ended session");
            return;
        }
        if let Err(e) = self.store.remove_session(client).await {
            tracing::warn!(client, error = %e, "MQTT: cannot remove an ended session");
        }
    }

    /// The longest session expiry granted, in seconds.
    pub(crate) fn max_expiry_s(&self) -> u32 {
        u32::try_from(self.settings.session_expiry_max.as_secs()).unwrap_or(u32::MAX)
    }
}

/// A session as the admin API shows it.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    /// The client identifier the device sent.
    pub client_id: String,
    /// The mesh client its subscriptions belong to.
    pub mesh_client: String,
    /// 4 (MQTT 3.1.1) or 5.
    pub protocol: u8,
    /// A connection holds it on this instance.
    pub connected: bool,
    /// The instance whose connection holds it, in a cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// It outlives its connection.
    pub persistent: bool,
    /// Seconds it outlives its connection (the listener's maximum applied).
    pub expiry_s: u32,
    /// When its last connection ended (ms since the epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disconnected_ms: Option<u64>,
    pub subscriptions: Vec<eventmesh_state::MqttSubscription>,
}

impl Broker {
    /// Every stored session, with whether a connection here holds it.
    pub async fn sessions(&self) -> Result<Vec<SessionView>, eventmesh_state::StateError> {
        let max = self.max_expiry_s();
        Ok(self
            .store
            .sessions()
            .await?
            .into_iter()
            .map(|s| SessionView {
                mesh_client: crate::conn::mesh_client(&s.client_id),
                connected: self.is_connected(&s.client_id),
                protocol: s.protocol,
                instance: s.instance,
                persistent: s.expiry_s > 0,
                expiry_s: s.expiry_s.min(max),
                disconnected_ms: s.disconnected_ms,
                subscriptions: s.subscriptions,
                client_id: s.client_id,
            })
            .collect())
    }
}
