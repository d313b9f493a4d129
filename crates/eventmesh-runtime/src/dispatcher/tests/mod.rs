//! The dispatch loop driven end to end on tokio's paused clock: a real
//! log, offset store and ledger (RocksDB in a temporary directory), the
//! in-memory meta store (behind the fault wrapper) for dead letters, and
//! pull members whose mailboxes the tests read as clients would.

mod delivery;
mod lane;
mod lifecycle;
mod routing;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eventmesh_core::config::{DeliveryConfig, DeliveryTopology};
use eventmesh_core::CloudEvent;
use eventmesh_meta::fault::FaultyMetaStore;
use eventmesh_meta::memory::InMemoryMetaStore;
use eventmesh_state::{
    DeadLetterStore, DeliveryStateStore, OffsetStore, RocksDeliveryStateStore, RocksOffsetStore,
    StartFrom,
};
use eventmesh_storage::{EventLog, LocalDb, StandaloneLog};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::router::Router;
use super::*;
use crate::creator::Creator;
use crate::ingress::{IngressService, IngressSettings};
use crate::mailbox::Mailbox;
use crate::metrics::Metrics;

pub(super) const CONSUMER: &str = "g";
pub(super) const TOPIC: &str = "t";
pub(super) const ACK_TIMEOUT: Duration = Duration::from_secs(30);
pub(super) const BACKOFF: Duration = Duration::from_secs(5);
/// Longest a test waits for something that should happen at once.
pub(super) const PROMPT: Duration = Duration::from_secs(1);

pub(super) fn settings() -> DispatchSettings {
    settings_with(|_| {})
}

/// [`settings`] with some delivery tunables changed.
pub(super) fn settings_with(change: impl FnOnce(&mut DeliveryConfig)) -> DispatchSettings {
    let mut delivery = DeliveryConfig {
        topology: DeliveryTopology::LocalStickyPull,
        after_sync: true,
        max_inflight: 64,
        max_inflight_per_client: 64,
        max_attempts: 3,
        ack_timeout: ACK_TIMEOUT,
        member_timeout: Duration::from_secs(3600),
        backoff_initial: BACKOFF,
        backoff_max: Duration::from_secs(60),
        // Exact retry times.
        backoff_jitter: 0.0,
        flush_interval: Duration::from_secs(3600),
        webhook_timeout: Duration::from_secs(1),
        webhook_tls: Default::default(),
        webhook_handshake: Default::default(),
    };
    change(&mut delivery);
    DispatchSettings {
        delivery,
        webhook_guard: Default::default(),
    }
}

/// Every hand-out the dispatcher reports: (event id, client).
#[derive(Default)]
pub(super) struct Seen(Mutex<Vec<(String, String)>>);

impl HandOutObserver for Seen {
    fn handed(&self, event: &CloudEvent, client: &str) {
        self.0
            .lock()
            .unwrap()
            .push((event.id.clone(), client.to_string()));
    }
}

impl Seen {
    pub(super) fn take(&self) -> Vec<(String, String)> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

pub(super) struct Harness {
    _dir: tempfile::TempDir,
    pub log: Arc<dyn EventLog>,
    ingress: IngressService,
    pub offsets: Arc<RocksOffsetStore>,
    pub ledger: Arc<RocksDeliveryStateStore>,
    pub meta: FaultyMetaStore,
    pub dead_letters: DeadLetterStore,
    pub metrics: Arc<Metrics>,
    pub seen: Arc<Seen>,
    pub settings: DispatchSettings,
    pub boot: Arc<str>,
}

impl Harness {
    pub(super) async fn new(settings: DispatchSettings) -> Self {
        Self::with_topic(settings, eventmesh_storage::Durability::Disk).await
    }

    /// [`Harness::new`] with the topic kept as `durability` says.
    pub(super) async fn with_topic(
        settings: DispatchSettings,
        durability: eventmesh_storage::Durability,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let db = LocalDb::open(dir.path()).unwrap();
        let log: Arc<dyn EventLog> = StandaloneLog::open(db.clone(), false).unwrap();
        log.create_topic_as(TOPIC, 1, None, durability)
            .await
            .unwrap();
        let metrics = Arc::new(Metrics::new());
        let meta = FaultyMetaStore::new(Arc::new(InMemoryMetaStore::new()));
        Harness {
            ingress: IngressService::new(
                log.clone(),
                // Tests publish the same ids again on purpose.
                IngressSettings {
                    default_partitions: 1,
                    dedup: false,
                    retention: Default::default(),
                    retention_check: std::time::Duration::from_secs(5),
                    pattern_rescan: std::time::Duration::from_secs(5),
                },
                metrics.clone(),
            ),
            log,
            offsets: Arc::new(RocksOffsetStore::new(db.clone())),
            ledger: Arc::new(RocksDeliveryStateStore::new(db)),
            dead_letters: DeadLetterStore::new(Arc::new(meta.clone())),
            meta,
            metrics,
            seen: Arc::default(),
            settings,
            boot: "0190abcdef0123456789abcdef012345".into(),
            _dir: dir,
        }
    }

    /// Publishes events `e0`, `e1`, ... with the given partition keys.
    pub(super) async fn publish(&self, keys: &[&str]) {
        let events = keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                CloudEvent::from_json_value(serde_json::json!({
                    "specversion": "1.0", "id": format!("e{i}"), "source": "/t",
                    "type": "t", "partitionkey": k
                }))
                .unwrap()
            })
            .collect();
        self.ingress.publish(TOPIC, events).await.unwrap();
    }

    pub(super) async fn start(&self, members: Vec<Member>) -> Running {
        let deps = Arc::new(DispatcherDeps {
            boot: self.boot.clone(),
            log: self.log.clone(),
            offsets: self.offsets.clone(),
            dead_letters: self.dead_letters.clone(),
            ledger: self.ledger.clone(),
            metrics: self.metrics.clone(),
            http: reqwest::Client::new(),
            handshakes: Arc::new(crate::push::Handshakes::new(
                "mesh.test",
                60,
                Duration::from_secs(1),
            )),
            settings: self.settings.clone(),
            observer: self.seen.clone(),
            fence: None,
            sieves: Default::default(),
            handoffs: self.ingress.handoffs().clone(),
        });
        let handle = Dispatcher::start(
            DISPATCHER,
            CONSUMER.into(),
            TOPIC.into(),
            StartFrom::Earliest,
            members.into(),
            deps,
        )
        .await
        .unwrap();
        Running {
            tx: handle.lane.commands().clone(),
            lane: handle.lane,
            join: handle.join,
            boot: self.boot.clone(),
        }
    }

    /// Committed offsets by partition.
    pub(super) async fn committed(&self) -> HashMap<u32, u64> {
        self.offsets.load(CONSUMER, TOPIC).await.unwrap()
    }

    /// (partition, offset, attempts) of every ledger entry.
    pub(super) async fn ledger_entries(&self) -> Vec<(u32, u64, u32)> {
        let entries = self.ledger.list(CONSUMER, TOPIC).await.unwrap();
        entries
            .into_iter()
            .map(|e| (e.partition, e.offset, e.attempts))
            .collect()
    }
}

pub(super) const DISPATCHER: u32 = 7;

pub(super) struct Running {
    pub tx: mpsc::Sender<Command>,
    pub lane: Arc<Lane>,
    join: JoinHandle<()>,
    boot: Arc<str>,
}

impl Running {
    pub(super) async fn settle(&self, id: &str, how: Settle, by: Option<Creator>) -> Settled {
        self.settle_as(id, how, by, Policy::Enforce).await
    }

    pub(super) async fn settle_as(
        &self,
        id: &str,
        how: Settle,
        by: Option<Creator>,
        policy: Policy,
    ) -> Settled {
        let id = parse_delivery_id(id).expect("a well-formed id");
        let (reply, rx) = oneshot::channel();
        self.send(Command::Settle {
            id,
            how,
            by,
            policy,
            reply,
        })
        .await;
        tokio::time::timeout(PROMPT, rx).await.unwrap().unwrap()
    }

    pub(super) async fn ack(&self, id: &str) -> Settled {
        self.settle(id, Settle::Ack, None).await
    }

    pub(super) async fn nack(&self, id: &str) -> Settled {
        self.settle(id, Settle::Nack, None).await
    }

    pub(super) async fn send(&self, cmd: Command) {
        self.tx.send(cmd).await.unwrap();
    }

    /// Returns once every command sent before is handled.
    pub(super) async fn barrier(&self) {
        let id = format!("{}-{DISPATCHER:x}-0-ffffffff-1-0000000000000000", self.boot);
        assert_eq!(self.ack(&id).await, Settled::Unknown);
    }

    pub(super) fn boot(&self) -> &str {
        &self.boot
    }

    /// Stops the dispatcher (it flushes first) and waits for its task.
    pub(super) async fn stop(self) {
        let (done, rx) = oneshot::channel();
        self.send(Command::Stop(done)).await;
        tokio::time::timeout(Duration::from_secs(10), rx)
            .await
            .unwrap()
            .unwrap();
        tokio::time::timeout(Duration::from_secs(10), self.join)
            .await
            .unwrap()
            .unwrap();
    }
}

/// A pulling member and its mailbox.
pub(super) fn pull_member(client: &str, creator: Creator) -> (Member, Arc<Mailbox>) {
    let mailbox = Arc::new(Mailbox::default());
    let m = Member {
        client_id: client.into(),
        channel: Channel::Pull(mailbox.clone()),
        load: Arc::default(),
        creator,
    };
    (m, mailbox)
}

/// One delivery as a client sees it: its id and its event's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Got {
    pub id: String,
    pub event: String,
}

/// What one poll of `mailbox` returns within `wait`.
pub(super) async fn poll_for(mailbox: &Mailbox, max: usize, wait: Duration) -> Vec<Got> {
    mailbox
        .poll(max, wait)
        .await
        .into_iter()
        .map(|i| {
            let v: serde_json::Value = serde_json::from_slice(&i.event_json).unwrap();
            Got {
                id: i.delivery_id,
                event: v["id"].as_str().unwrap().to_string(),
            }
        })
        .collect()
}

/// Polls until `n` deliveries came (each poll waiting up to [`PROMPT`]).
pub(super) async fn poll_n(mailbox: &Mailbox, n: usize) -> Vec<Got> {
    let mut got = Vec::new();
    while got.len() < n {
        let more = poll_for(mailbox, n - got.len(), PROMPT).await;
        assert!(!more.is_empty(), "only {got:?} of {n} deliveries came");
        got.extend(more);
    }
    got
}

pub(super) fn events(got: &[Got]) -> Vec<&str> {
    got.iter().map(|g| g.event.as_str()).collect()
}

/// Waits (on the paused clock, 1 ms at a time, 30 s at most) until `cond`.
pub(super) async fn until(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    let wait = async {
        while !cond().await {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(30), wait)
        .await
        .is_err()
    {
        panic!("timed out waiting for {what}");
    }
}

/// A partition key whose best member among `clients` is `best`.
pub(super) fn key_for(clients: &[&str], best: &str) -> String {
    let members: Vec<Member> = clients
        .iter()
        .map(|c| pull_member(c, Creator::default()).0)
        .collect();
    let router = Router::new(members, usize::MAX, 0);
    (0..1000)
        .map(|i| format!("k{i}"))
        .find(|k| {
            let e = super::router::tests::event(Some(k));
            router.ranked(&e, 0)[0].client_id == best
        })
        .expect("some key ranks it first")
}

/// The clock since `t0`.
pub(super) fn since(t0: Instant) -> Duration {
    Instant::now() - t0
}
