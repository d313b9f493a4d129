//! The dispatcher of one consumer on one topic: reads the partitions the
//! topology assigns, hands each event to one member (a webhook or a pull
//! mailbox), and commits the consumer's offsets as acknowledgements arrive.
//!
//! A consumer is a load-balanced group (events spread over its members,
//! sticky by partition key through rendezvous hashing) or one broadcast
//! member. Invariants:
//! - The committed offset of a partition is its *contiguous watermark*: the
//!   lowest offset still in flight, or the next offset to read when nothing
//!   is. It never passes an event that has not been acknowledged.
//! - At most `max_inflight` deliveries are unacknowledged at once; reading
//!   pauses while the window is full. A client holds at most
//!   `max_inflight_per_client` over all its subscriptions: a member at its
//!   cap gets no new events (a load-balanced group hands its keys to the
//!   next member by rendezvous score), so a slow or dead client never
//!   stalls the others.
//! - `eventmesh_pending_deliveries` counts deliveries whose offset is not
//!   committed yet: an acknowledged delivery leaves it only once the
//!   watermark past it is written, so a failing offset write (disk full)
//!   shows as pending deliveries that do not drop.
//! - Delivery ids are `<boot>-<dispatcher>-<seq>`: unique across restarts
//!   (the boot id is new at every start), so an ack from an earlier run or
//!   for a retired delivery matches nothing.
//! - A failed push is retried with exponential backoff; a pulled delivery
//!   not acknowledged within the ack timeout is sent again under a new id.
//!   Each counts as a failed attempt; after `max_attempts` the event goes to
//!   the dead-letter store, and the delivery is retired only once that write
//!   is confirmed (until then it stays in flight and the write is retried),
//!   so the watermark passes only events acknowledged or dead-lettered.
//! - The ledger (`DeliveryStateStore`) is written behind, like the
//!   offsets: every flush (one fsync) records the deliveries still in
//!   flight with their attempt counts and deletes the entries of those
//!   retired since. A delivery settled between two flushes never touches
//!   the ledger, so at a steady rate it costs no state write at all. Its
//!   one use is the attempt count after a restart: the log supplies again
//!   every event above the committed watermark, and an event with no entry
//!   starts from zero attempts, which is what a first attempt has spent;
//!   what a crash can lose is at most one flush interval of counted
//!   failures, the same bound as for offsets. At start the previous run's
//!   entries give the attempts already spent; they are deleted by the
//!   first flush, after the new entries are written.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use eventmesh_core::codec::{self, StoredEvent};
use eventmesh_core::config::DeliveryTopology;
use eventmesh_core::throttle::{FailureLog, Report};
use eventmesh_core::topic::stable_hash;
use eventmesh_core::CloudEvent;
use eventmesh_state::{
    DeadLetter, DeadLetterStore, DeliveryStateStore, LedgerEntry, OffsetStore, StartFrom,
};
use eventmesh_storage::{EventLog, Record};
use std::collections::HashSet;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::error::Result;
use crate::ingress::now_ms;
use crate::mailbox::{HandOut, MailItem, Mailbox};
use crate::metrics::Metrics;
use crate::{push, topology};

/// Records read from one partition in one go.
const READ_BATCH: usize = 512;
const READ_MAX_BYTES: usize = 4 << 20;
/// Commands handled in one wake-up before reading again.
const COMMAND_BURST: usize = 1024;
/// While every member is at its cap, how often to look for room again.
const CAP_RECHECK: Duration = Duration::from_millis(20);

/// False for a streaming client with no stream open.
fn online(m: &Member) -> bool {
    match &m.channel {
        Channel::Pull(mailbox) => !mailbox.is_offline(),
        Channel::Push(_) => true,
    }
}

/// Repeating failures, reported sparingly.
#[derive(Default)]
struct Faults {
    ledger: FailureLog,
    offsets: FailureLog,
    dead_letters: FailureLog,
}

enum Admit {
    Admitted(u64),
    /// Undecodable: skipped for good.
    Skipped,
    /// Every member is at its per-client cap.
    Full,
}

/// Tunables shared by every dispatcher.
#[derive(Debug, Clone)]
pub struct DispatchSettings {
    pub topology: DeliveryTopology,
    pub max_inflight: usize,
    pub max_inflight_per_client: usize,
    pub max_attempts: u32,
    pub ack_timeout: Duration,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// Largest random spread added to a retry delay, as a fraction of it.
    pub backoff_jitter: f64,
    pub flush_interval: Duration,
    pub webhook_timeout: Duration,
    /// The ranges webhook pushes may not reach, checked on every push.
    pub webhook_guard: Arc<crate::ssrf::WebhookGuard>,
}

/// Where a member receives its deliveries.
#[derive(Clone)]
pub enum Channel {
    Pull(Arc<Mailbox>),
    Push(String),
}

#[derive(Clone)]
pub struct Member {
    pub client_id: String,
    pub channel: Channel,
    pub load: Arc<ClientLoad>,
}

/// Deliveries a client holds, over every dispatcher that serves it.
#[derive(Debug, Default)]
pub struct ClientLoad {
    inflight: AtomicUsize,
}

impl ClientLoad {
    pub fn inflight(&self) -> usize {
        self.inflight.load(Ordering::Relaxed)
    }

    fn charge(&self) {
        self.inflight.fetch_add(1, Ordering::Relaxed);
    }

    fn release(&self) {
        let _ = self
            .inflight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }
}

pub enum Command {
    Ack {
        seq: u64,
        reply: oneshot::Sender<bool>,
    },
    /// The client gave the delivery back: a failed attempt, retried after
    /// the backoff under a new id.
    Nack {
        seq: u64,
        reply: oneshot::Sender<bool>,
    },
    PushDone {
        seq: u64,
        result: std::result::Result<(), String>,
    },
    Members(Vec<Member>),
    /// The dead-letter write for `seq` finished.
    DeadLettered {
        seq: u64,
        result: std::result::Result<(), String>,
    },
    /// A streaming client's connection ended (or it resumed on a new one):
    /// its deliveries go out again at once, to another online member of
    /// the group when there is one, else to it (for its reconnect). One it
    /// had in hand counts as a failed attempt.
    Release {
        client: String,
    },
    /// Stop handing out and wait (until the deadline) for what is in the
    /// clients' hands to come back; answered when nothing is or at the
    /// deadline. Acks keep working until `Stop`.
    Drain {
        deadline: Instant,
        done: oneshot::Sender<()>,
    },
    Stop(oneshot::Sender<()>),
}

/// The runtime's handle on a running dispatcher.
pub struct DispatcherHandle {
    pub tx: mpsc::Sender<Command>,
    pub join: JoinHandle<()>,
}

/// Builds a delivery id.
pub fn delivery_id(boot: &str, dispatcher: u32, seq: u64) -> String {
    format!("{boot}-{dispatcher:x}-{seq:x}")
}

/// Splits a delivery id into boot id, dispatcher id and sequence.
pub fn parse_delivery_id(id: &str) -> Option<(&str, u32, u64)> {
    let mut parts = id.splitn(3, '-');
    let boot = parts.next()?;
    let d = u32::from_str_radix(parts.next()?, 16).ok()?;
    let seq = u64::from_str_radix(parts.next()?, 16).ok()?;
    Some((boot, d, seq))
}

struct Flight {
    partition: u32,
    offset: u64,
    event: Arc<CloudEvent>,
    ingest_ms: u64,
    member: String,
    /// The load of `member`, charged while the flight is assigned to it.
    load: Arc<ClientLoad>,
    attempts: u32,
    /// Its ledger entry was taken into a flush (so it may be on disk, and
    /// retiring it must delete it).
    ledgered: bool,
    hand_out: Option<Arc<HandOut>>,
    /// A webhook call is under way.
    pushing: bool,
    /// Set once the attempts are used up: the event is being dead-lettered
    /// and is not sent again.
    dead_reason: Option<String>,
}

#[derive(PartialEq, Eq, PartialOrd, Ord, Clone, Copy)]
enum TimerKind {
    Retry,
    AckCheck,
    DeadLetterRetry,
    DrainDeadline,
}

/// Everything a dispatcher needs from the runtime.
pub struct DispatcherDeps {
    pub boot: Arc<str>,
    pub log: Arc<dyn EventLog>,
    pub offsets: Arc<dyn OffsetStore>,
    pub dead_letters: DeadLetterStore,
    pub ledger: Arc<dyn DeliveryStateStore>,
    pub metrics: Arc<Metrics>,
    pub http: reqwest::Client,
    pub settings: DispatchSettings,
}

pub struct Dispatcher {
    id: u32,
    consumer: String,
    topic: String,
    deps: Arc<DispatcherDeps>,
    members: Vec<Member>,
    partitions: Vec<u32>,
    next_read: HashMap<u32, u64>,
    pending: HashMap<u32, BTreeSet<u64>>,
    committed: HashMap<u32, u64>,
    inflight: HashMap<u64, Flight>,
    timers: BinaryHeap<Reverse<(Instant, u64, TimerKind)>>,
    seq: u64,
    rotate: usize,
    /// Attempts spent before the last restart, by (partition, offset).
    recovered: HashMap<(u32, u64), u32>,
    /// Deliveries whose ledger entry must be (re)written at the next flush.
    ledger_dirty: HashSet<u64>,
    /// Retired delivery ids to delete from the ledger at the next flush.
    ledger_retired: Vec<String>,
    /// Offsets retired (acked or dead-lettered) that the committed offset
    /// does not cover yet; still counted as pending.
    uncommitted: HashMap<u32, BTreeSet<u64>>,
    /// The ledger and offset writes of a flush under way: they run beside
    /// the dispatch loop (a flush waits for an fsync or two, milliseconds
    /// during which deliveries would otherwise stall), one at a time.
    flushing: Option<JoinHandle<Flushed>>,
    /// Reading stopped because every member is at its per-client cap.
    capped: bool,
    /// Set by `Drain`: nothing new is handed out.
    draining: bool,
    drained: Option<oneshot::Sender<()>>,
    faults: Faults,
    tx: mpsc::Sender<Command>,
    rx: mpsc::Receiver<Command>,
    watch: watch::Receiver<u64>,
}

impl Dispatcher {
    /// Fixes the consumer's starting offsets (committing them at once, so a
    /// restart never re-evaluates `latest`) and starts the dispatch task.
    pub async fn start(
        id: u32,
        consumer: String,
        topic: String,
        from: StartFrom,
        members: Vec<Member>,
        deps: Arc<DispatcherDeps>,
    ) -> Result<DispatcherHandle> {
        let log = &deps.log;
        let info = log
            .topic(&topic)
            .await?
            .ok_or_else(|| eventmesh_storage::StorageError::UnknownTopic(topic.clone()))?;
        let partitions = topology::owned_partitions(deps.settings.topology, info.partitions);
        let mut committed = deps.offsets.load(&consumer, &topic).await?;
        let mut initial = Vec::new();
        for &p in &partitions {
            let start = log.start_offset(&topic, p).await?;
            match committed.get(&p).copied() {
                Some(c) if c >= start => {}
                Some(_) => {
                    committed.insert(p, start);
                    initial.push((p, start));
                }
                None => {
                    let o = match from {
                        StartFrom::Latest => log.end_offset(&topic, p).await?,
                        StartFrom::Earliest => start,
                    };
                    committed.insert(p, o);
                    initial.push((p, o));
                }
            }
        }
        deps.offsets.commit(&consumer, &topic, &initial).await?;
        // In-flight deliveries of the previous run: their events come again
        // from the log (they are above the watermark); keep their attempts.
        let old = deps.ledger.list(&consumer, &topic).await?;
        let recovered: HashMap<(u32, u64), u32> = old
            .iter()
            .map(|e| ((e.partition, e.offset), e.attempts))
            .collect();
        // Deleted by the first flush, which writes the new entries first: a
        // crash before it finds the counts where they were.
        let stale: Vec<String> = old.into_iter().map(|e| e.delivery_id).collect();
        if !stale.is_empty() {
            tracing::info!(consumer = %consumer, topic = %topic, deliveries = stale.len(), "recovered in-flight deliveries from the ledger");
        }
        let (tx, rx) = mpsc::channel(4096);
        let d = Dispatcher {
            id,
            consumer,
            topic,
            members,
            next_read: committed.clone(),
            pending: partitions.iter().map(|p| (*p, BTreeSet::new())).collect(),
            committed,
            partitions,
            inflight: HashMap::new(),
            timers: BinaryHeap::new(),
            seq: 0,
            rotate: 0,
            recovered,
            ledger_dirty: HashSet::new(),
            ledger_retired: stale,
            flushing: None,
            uncommitted: HashMap::new(),
            capped: false,
            draining: false,
            drained: None,
            faults: Faults::default(),
            tx: tx.clone(),
            rx,
            watch: deps.log.append_watch(),
            deps,
        };
        tracing::info!(consumer = %d.consumer, topic = %d.topic, partitions = ?d.partitions, "dispatcher started");
        let join = tokio::spawn(d.run());
        Ok(DispatcherHandle { tx, join })
    }

    async fn run(mut self) {
        let mut flush = tokio::time::interval(self.deps.settings.flush_interval);
        flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut log_open = true;
        loop {
            self.fill().await;
            let next_timer = self
                .timers
                .peek()
                .map(|Reverse((due, _, _))| *due)
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                cmd = self.rx.recv() => {
                    let Some(cmd) = cmd else { break };
                    if let Some(done) = self.handle(cmd) {
                        self.stop(done).await;
                        return;
                    }
                    for _ in 0..COMMAND_BURST {
                        let Ok(cmd) = self.rx.try_recv() else { break };
                        if let Some(done) = self.handle(cmd) {
                            self.stop(done).await;
                            return;
                        }
                    }
                }
                changed = self.watch.changed(), if log_open => {
                    log_open = changed.is_ok();
                }
                _ = tokio::time::sleep_until(next_timer) => self.fire_timers(),
                _ = flush.tick() => self.start_flush(),
                done = async { self.flushing.as_mut().expect("checked").await }, if self.flushing.is_some() => {
                    self.flushing = None;
                    self.flushed(done);
                }
                // Room at a capped client may come from another dispatcher.
                _ = tokio::time::sleep(CAP_RECHECK), if self.capped => {}
            }
            self.check_drained();
        }
        self.flush().await;
    }

    /// A delivery is in a client's hands: a webhook call under way, or a
    /// polled event not acknowledged yet.
    fn in_hands(f: &Flight) -> bool {
        f.pushing
            || f.hand_out.as_ref().is_some_and(|h| {
                h.at_ms.load(Ordering::Acquire) != 0 && !h.withdrawn.load(Ordering::Acquire)
            })
    }

    fn begin_drain(&mut self, deadline: Instant, done: oneshot::Sender<()>) {
        self.draining = true;
        self.drained = Some(done);
        // Events still waiting in a mailbox are not in anyone's hands: take
        // them back (they come again from the log after the restart).
        for f in self.inflight.values() {
            if let Some(h) = &f.hand_out {
                if h.at_ms.load(Ordering::Acquire) == 0 {
                    h.withdrawn.store(true, Ordering::Release);
                }
            }
        }
        self.timers
            .push(Reverse((deadline, 0, TimerKind::DrainDeadline)));
        self.check_drained();
    }

    fn check_drained(&mut self) {
        if self.drained.is_some() && !self.inflight.values().any(Self::in_hands) {
            self.finish_drain();
        }
    }

    fn finish_drain(&mut self) {
        if let Some(done) = self.drained.take() {
            let held = self.inflight.values().filter(|f| Self::in_hands(f)).count();
            if held > 0 {
                tracing::warn!(consumer = %self.consumer, topic = %self.topic, deliveries = held, "shutdown grace over; unacknowledged deliveries come again after the restart");
            }
            let _ = done.send(());
        }
    }

    async fn stop(&mut self, done: oneshot::Sender<()>) {
        self.flush().await;
        let uncommitted: usize = self.uncommitted.values().map(BTreeSet::len).sum();
        self.deps
            .metrics
            .pending_deliveries
            .dec_by((self.inflight.len() + uncommitted) as i64);
        for f in self.inflight.values() {
            if let Some(h) = &f.hand_out {
                h.withdrawn.store(true, Ordering::Release);
            }
            f.load.release();
        }
        self.inflight.clear();
        self.uncommitted.clear();
        self.finish_drain();
        tracing::info!(consumer = %self.consumer, topic = %self.topic, "dispatcher stopped");
        let _ = done.send(());
    }

    /// Handles one command; returns the stop acknowledgement when asked to stop.
    fn handle(&mut self, cmd: Command) -> Option<oneshot::Sender<()>> {
        match cmd {
            Command::Ack { seq, reply } => {
                let open = self.settleable(seq);
                if open {
                    let f = self.inflight.remove(&seq).expect("checked");
                    self.complete(seq, f);
                }
                let _ = reply.send(open);
            }
            Command::Nack { seq, reply } => {
                let open = self.settleable(seq);
                if open {
                    self.nacked(seq);
                }
                let _ = reply.send(open);
            }
            Command::PushDone { seq, result } => {
                if let Some(f) = self.inflight.get_mut(&seq) {
                    f.pushing = false;
                }
                match result {
                    Ok(()) => {
                        if let Some(f) = self.inflight.remove(&seq) {
                            self.complete(seq, f);
                        }
                    }
                    Err(reason) => self.push_failed(seq, &reason),
                }
            }
            Command::Members(members) => self.set_members(members),
            Command::DeadLettered { seq, result } => match result {
                Ok(()) => {
                    let r = self.faults.dead_letters.succeeded();
                    self.report(r, "dead-letter write", "");
                    if let Some(f) = self.inflight.remove(&seq) {
                        self.retire_dead(seq, f);
                    }
                }
                Err(e) => {
                    let r = self.faults.dead_letters.failed();
                    self.report(
                        r,
                        "dead-letter write (the delivery stays in flight; retried)",
                        &e,
                    );
                    let wait = self.backoff(seq, 1);
                    self.timers.push(Reverse((
                        Instant::now() + wait,
                        seq,
                        TimerKind::DeadLetterRetry,
                    )));
                }
            },
            Command::Drain { deadline, done } => self.begin_drain(deadline, done),
            Command::Release { client } => self.release(&client),
            Command::Stop(done) => return Some(done),
        }
        None
    }

    /// Drops a retired delivery from the watermark's pending set and queues
    /// its ledger entry for deletion.
    fn retire(&mut self, seq: u64, f: &Flight) {
        if let Some(p) = self.pending.get_mut(&f.partition) {
            p.remove(&f.offset);
        }
        f.load.release();
        self.uncommitted
            .entry(f.partition)
            .or_default()
            .insert(f.offset);
        self.unledger(seq, f);
    }

    /// Drops delivery `seq` from the ledger: from the writes pending when
    /// no flush took it yet, else by deleting its entry at the next flush.
    fn unledger(&mut self, seq: u64, f: &Flight) {
        self.ledger_dirty.remove(&seq);
        if f.ledgered {
            self.ledger_retired
                .push(delivery_id(&self.deps.boot, self.id, seq));
        }
    }

    fn complete(&mut self, seq: u64, f: Flight) {
        self.retire(seq, &f);
        let m = &self.deps.metrics;
        m.acks.inc();
        m.end_to_end_latency
            .observe(now_ms().saturating_sub(f.ingest_ms) as f64 / 1000.0);
    }

    /// Exponential backoff for the `attempts`-th retry, capped, plus a
    /// spread of up to `backoff_jitter` of it, derived from the sequence so
    /// retries of different deliveries do not line up (no RNG needed).
    fn backoff(&self, seq: u64, attempts: u32) -> Duration {
        let settings = &self.deps.settings;
        let exp = settings
            .backoff_initial
            .saturating_mul(1u32 << attempts.saturating_sub(1).min(20));
        let base = exp.min(settings.backoff_max);
        let spread = (stable_hash(&seq.to_le_bytes()) % 1000) as f64 / 1000.0;
        base + base.mul_f64(spread * settings.backoff_jitter)
    }

    /// Counts a failed attempt; true when attempts remain.
    fn count_failure(&mut self, seq: u64, reason: &str) -> bool {
        let max = self.deps.settings.max_attempts;
        let Some(f) = self.inflight.get_mut(&seq) else {
            return false;
        };
        f.attempts += 1;
        self.ledger_dirty.insert(seq);
        if f.attempts < max {
            return true;
        }
        tracing::info!(consumer = %self.consumer, topic = %self.topic, partition = f.partition, offset = f.offset, attempts = f.attempts, reason, "attempts used up; dead-lettering");
        f.dead_reason = Some(reason.to_string());
        if let Some(h) = &f.hand_out {
            h.withdrawn.store(true, Ordering::Release);
        }
        self.dead_letter(seq);
        false
    }

    fn release(&mut self, client: &str) {
        let seqs: Vec<u64> = self
            .inflight
            .iter()
            .filter(|(_, f)| {
                f.member == client
                    && f.dead_reason.is_none()
                    && f.hand_out
                        .as_ref()
                        .is_some_and(|h| !h.withdrawn.load(Ordering::Acquire))
            })
            .map(|(seq, _)| *seq)
            .collect();
        if seqs.is_empty() {
            return;
        }
        tracing::debug!(consumer = %self.consumer, client, deliveries = seqs.len(), "releasing the deliveries of a closed stream");
        for seq in seqs {
            let handed = self.inflight[&seq]
                .hand_out
                .as_ref()
                .is_some_and(|h| h.at_ms.load(Ordering::Acquire) != 0);
            if handed && !self.count_failure(seq, "connection lost") {
                continue;
            }
            self.reroute(seq, client);
            self.reissue(seq);
        }
    }

    /// Moves delivery `seq` to the best online member other than `leaving`
    /// that has room; keeps it where it is when there is none.
    fn reroute(&mut self, seq: u64, leaving: &str) {
        let cap = self.deps.settings.max_inflight_per_client;
        let Some(f) = self.inflight.get(&seq) else {
            return;
        };
        let Some(m) = self
            .ranked(&f.event, f.partition)
            .into_iter()
            .find(|m| m.client_id != leaving && online(m) && m.load.inflight() < cap)
            .cloned()
        else {
            return;
        };
        let f = self.inflight.get_mut(&seq).expect("checked above");
        f.load.release();
        m.load.charge();
        f.member = m.client_id;
        f.load = m.load;
    }

    /// In flight and not given up on (a delivery being dead-lettered is
    /// settled already).
    fn settleable(&self, seq: u64) -> bool {
        self.inflight
            .get(&seq)
            .is_some_and(|f| f.dead_reason.is_none())
    }

    /// A client gave a polled delivery back.
    fn nacked(&mut self, seq: u64) {
        self.deps.metrics.nacks.inc();
        if let Some(h) = self.inflight.get_mut(&seq).and_then(|f| f.hand_out.take()) {
            // Out of the client's hands: the ack clock stops.
            h.withdrawn.store(true, Ordering::Release);
        }
        if !self.count_failure(seq, "nack") {
            return;
        }
        let attempts = self.inflight.get(&seq).map_or(1, |f| f.attempts);
        let wait = self.backoff(seq, attempts);
        // Settled now: the old id matches nothing; the event goes out again
        // under a new one after the backoff.
        if let Some(new) = self.renumber(seq) {
            self.timers
                .push(Reverse((Instant::now() + wait, new, TimerKind::Retry)));
        }
    }

    fn push_failed(&mut self, seq: u64, reason: &str) {
        self.deps.metrics.push_failures.inc();
        if !self.count_failure(seq, reason) {
            return;
        }
        let attempts = self.inflight.get(&seq).map_or(1, |f| f.attempts);
        tracing::debug!(consumer = %self.consumer, attempts, reason, "push failed; retrying");
        let wait = self.backoff(seq, attempts);
        self.timers
            .push(Reverse((Instant::now() + wait, seq, TimerKind::Retry)));
    }

    /// Writes the event of `seq` to the dead-letter store in the background;
    /// the outcome comes back as [`Command::DeadLettered`].
    fn dead_letter(&mut self, seq: u64) {
        let Some(f) = self.inflight.get(&seq) else {
            return;
        };
        let dl = DeadLetter::new(
            self.topic.clone(),
            self.consumer.clone(),
            f.partition,
            f.offset,
            String::from_utf8_lossy(&f.event.to_json()).into_owned(),
        )
        .with_failure(
            f.attempts,
            f.dead_reason.clone().unwrap_or_default(),
            now_ms(),
        );
        let store = self.deps.dead_letters.clone();
        let tx = self.tx.clone();
        tokio::spawn(async move {
            // Already present (an earlier try that answered late) counts as done.
            let result = store.record(&dl).await.map(drop).map_err(|e| e.to_string());
            let _ = tx.send(Command::DeadLettered { seq, result }).await;
        });
    }

    fn retire_dead(&mut self, seq: u64, f: Flight) {
        self.retire(seq, &f);
        self.deps.metrics.dead_letters.inc();
    }

    fn set_members(&mut self, members: Vec<Member>) {
        self.members = members;
        let orphaned: Vec<u64> = self
            .inflight
            .iter()
            .filter(|(_, f)| !self.members.iter().any(|m| m.client_id == f.member))
            .map(|(seq, _)| *seq)
            .collect();
        for seq in orphaned {
            self.reissue(seq);
        }
    }

    /// Reads new records while the window has room and hands them out.
    async fn fill(&mut self) {
        self.capped = false;
        if self.members.is_empty() || self.partitions.is_empty() || self.draining {
            return;
        }
        let n = self.partitions.len();
        self.rotate = (self.rotate + 1) % n;
        for i in 0..n {
            let free = self
                .deps
                .settings
                .max_inflight
                .saturating_sub(self.inflight.len());
            if free == 0 {
                return;
            }
            let p = self.partitions[(self.rotate + i) % n];
            let next = self.next_read[&p];
            let end = match self.deps.log.end_offset(&self.topic, p).await {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(topic = %self.topic, partition = p, error = %e, "cannot read end offset");
                    continue;
                }
            };
            if next >= end {
                continue;
            }
            let records = match self
                .deps
                .log
                .read(&self.topic, p, next, free.min(READ_BATCH), READ_MAX_BYTES)
                .await
            {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(topic = %self.topic, partition = p, error = %e, "log read failed");
                    continue;
                }
            };
            if records.is_empty() {
                // Retention dropped the records below `end`; skip to what is stored.
                if let Ok(start) = self.deps.log.start_offset(&self.topic, p).await {
                    self.next_read.insert(p, start.max(next));
                }
                continue;
            }
            for r in records {
                let offset = r.offset;
                match self.admit(p, r) {
                    Admit::Admitted(seq) => {
                        // Recorded at the next flush if still in flight.
                        self.ledger_dirty.insert(seq);
                        self.deps.metrics.events_dispatched.inc();
                        self.send(seq);
                    }
                    Admit::Skipped => {}
                    Admit::Full => {
                        // Read again from here once a member has room.
                        self.capped = true;
                        break;
                    }
                }
                self.next_read.insert(p, offset + 1);
            }
            if self.capped {
                return;
            }
        }
    }

    fn ledger_entry(&self, seq: u64) -> Option<LedgerEntry> {
        let f = self.inflight.get(&seq)?;
        Some(LedgerEntry {
            delivery_id: delivery_id(&self.deps.boot, self.id, seq),
            consumer: self.consumer.clone(),
            topic: self.topic.clone(),
            partition: f.partition,
            offset: f.offset,
            member: f.member.clone(),
            attempts: f.attempts,
            sent_ms: now_ms(),
        })
    }

    /// Makes a new in-flight delivery for a record (not sent yet).
    fn admit(&mut self, partition: u32, record: Record) -> Admit {
        let StoredEvent { ingest_ms, event } = match codec::decode(&record.payload) {
            Ok(s) => s,
            Err(e) => {
                // Unreadable forever: skipping it is the only way forward.
                self.deps.metrics.corrupt_records.inc();
                tracing::error!(topic = %self.topic, partition, offset = record.offset, error = %e, "skipping undecodable record");
                return Admit::Skipped;
            }
        };
        let cap = self.deps.settings.max_inflight_per_client;
        let ranked = self.ranked(&event, partition);
        // Online members first; streaming clients that are away get new
        // events only when no member is online.
        let any_online = ranked.iter().any(|m| online(m));
        let Some(member) = ranked
            .into_iter()
            .find(|m| m.load.inflight() < cap && (online(m) || !any_online))
        else {
            return Admit::Full;
        };
        let (member, load) = (member.client_id.clone(), member.load.clone());
        load.charge();
        let event = Arc::new(event);
        self.seq += 1;
        let seq = self.seq;
        self.pending
            .get_mut(&partition)
            .expect("pending set per owned partition")
            .insert(record.offset);
        self.inflight.insert(
            seq,
            Flight {
                partition,
                offset: record.offset,
                event,
                ingest_ms,
                member,
                load,
                attempts: self
                    .recovered
                    .remove(&(partition, record.offset))
                    .unwrap_or(0),
                ledgered: false,
                hand_out: None,
                pushing: false,
                dead_reason: None,
            },
        );
        self.deps.metrics.pending_deliveries.inc();
        Admit::Admitted(seq)
    }

    /// Rendezvous hashing: members by their score for the key (the
    /// partition key, else the partition), best first. The best one takes
    /// the event, so a member joining or leaving moves only the keys it
    /// gains or loses; the next ones stand in while it is at its cap.
    fn ranked(&self, event: &CloudEvent, partition: u32) -> Vec<&Member> {
        if self.members.len() == 1 {
            return vec![&self.members[0]];
        }
        let key = match event.partition_key() {
            Some(k) => k.to_string(),
            None => format!("#{partition}"),
        };
        let mut scored: Vec<(u64, &Member)> = self
            .members
            .iter()
            .map(|m| {
                let mut buf = Vec::with_capacity(key.len() + m.client_id.len() + 1);
                buf.extend_from_slice(key.as_bytes());
                buf.push(0);
                buf.extend_from_slice(m.client_id.as_bytes());
                (stable_hash(&buf), m)
            })
            .collect();
        scored.sort_by_key(|s| Reverse(s.0));
        scored.into_iter().map(|(_, m)| m).collect()
    }

    /// Sends (or re-sends) the delivery `seq` to its member.
    fn send(&mut self, seq: u64) {
        if self.draining {
            // Kept in flight (and in the ledger) for the next run.
            return;
        }
        let Some(f) = self.inflight.get(&seq).filter(|f| f.dead_reason.is_none()) else {
            return;
        };
        let member = match self.members.iter().find(|m| m.client_id == f.member) {
            Some(m) => m.clone(),
            None if self.members.is_empty() => return,
            None => {
                // Its member left: the best remaining one takes it over,
                // with room or not (it was admitted already).
                let cap = self.deps.settings.max_inflight_per_client;
                let ranked = self.ranked(&f.event, f.partition);
                let m = (*ranked
                    .iter()
                    .find(|m| m.load.inflight() < cap)
                    .unwrap_or(&ranked[0]))
                .clone();
                if let Some(f) = self.inflight.get_mut(&seq) {
                    f.load.release();
                    m.load.charge();
                    f.member = m.client_id.clone();
                    f.load = m.load.clone();
                }
                m
            }
        };
        let id = delivery_id(&self.deps.boot, self.id, seq);
        let f = self.inflight.get_mut(&seq).expect("checked above");
        match member.channel {
            Channel::Pull(mailbox) => {
                let hand_out = Arc::new(HandOut::default());
                f.hand_out = Some(hand_out.clone());
                let mut json = Vec::with_capacity(256);
                f.event.write_json(&mut json);
                mailbox.push(MailItem {
                    delivery_id: id,
                    event_json: Bytes::from(json),
                    hand_out,
                });
                self.timers.push(Reverse((
                    Instant::now() + self.deps.settings.ack_timeout,
                    seq,
                    TimerKind::AckCheck,
                )));
            }
            Channel::Push(url) => {
                f.pushing = true;
                let event = f.event.clone();
                let deps = self.deps.clone();
                let tx = self.tx.clone();
                tokio::spawn(async move {
                    let s = &deps.settings;
                    let result = push::push(
                        &deps.http,
                        &s.webhook_guard,
                        &url,
                        &id,
                        &event,
                        s.webhook_timeout,
                    )
                    .await;
                    let _ = tx.send(Command::PushDone { seq, result }).await;
                });
            }
        }
    }

    /// Retires delivery `seq` and sends its event again under a new id.
    fn reissue(&mut self, seq: u64) {
        if let Some(new) = self.renumber(seq) {
            self.deps.metrics.redeliveries.inc();
            self.send(new);
        }
    }

    /// Moves the delivery `seq` to a new id (not sent yet); the old id
    /// matches nothing from now on.
    fn renumber(&mut self, seq: u64) -> Option<u64> {
        let mut f = self.inflight.remove(&seq)?;
        if let Some(h) = f.hand_out.take() {
            h.withdrawn.store(true, Ordering::Release);
        }
        // The old entry covers the same offset until the next flush swaps it.
        self.unledger(seq, &f);
        f.ledgered = false;
        self.seq += 1;
        let new = self.seq;
        self.inflight.insert(new, f);
        self.ledger_dirty.insert(new);
        Some(new)
    }

    fn fire_timers(&mut self) {
        let now = Instant::now();
        while let Some(Reverse((due, seq, kind))) = self.timers.peek().copied() {
            if due > now {
                break;
            }
            self.timers.pop();
            if kind == TimerKind::DrainDeadline {
                self.finish_drain();
                continue;
            }
            let Some(f) = self.inflight.get(&seq) else {
                continue;
            };
            match kind {
                TimerKind::DrainDeadline => {}
                TimerKind::DeadLetterRetry => self.dead_letter(seq),
                TimerKind::Retry if f.dead_reason.is_some() => {}
                TimerKind::Retry => {
                    self.deps.metrics.redeliveries.inc();
                    self.send(seq);
                }
                TimerKind::AckCheck if f.dead_reason.is_some() => {}
                TimerKind::AckCheck => {
                    let timeout = self.deps.settings.ack_timeout;
                    let at = f
                        .hand_out
                        .as_ref()
                        .map_or(0, |h| h.at_ms.load(Ordering::Acquire));
                    if at == 0 {
                        // Still waiting in the mailbox: the clock has not started.
                        self.timers
                            .push(Reverse((now + timeout, seq, TimerKind::AckCheck)));
                        continue;
                    }
                    let expires = at + timeout.as_millis() as u64;
                    let now_ms = now_ms();
                    if now_ms >= expires {
                        tracing::debug!(consumer = %self.consumer, member = %f.member, "ack timeout; redelivering");
                        if self.count_failure(seq, "ack timeout") {
                            self.reissue(seq);
                        }
                    } else {
                        self.timers.push(Reverse((
                            now + Duration::from_millis(expires - now_ms),
                            seq,
                            TimerKind::AckCheck,
                        )));
                    }
                }
            }
        }
    }

    fn watermark(&self, p: u32) -> u64 {
        self.pending
            .get(&p)
            .and_then(|s| s.first().copied())
            .unwrap_or(self.next_read[&p])
    }

    /// Logs a failure or recovery that [`FailureLog`] let through.
    fn report(&self, r: Report, what: &str, error: &str) {
        let (consumer, topic) = (&self.consumer, &self.topic);
        match r {
            Report::Quiet => {}
            Report::Failure { suppressed } => {
                tracing::warn!(%consumer, %topic, error, suppressed, "{what} failed")
            }
            Report::Recovered { failures } => {
                tracing::info!(%consumer, %topic, failures, "{what} works again")
            }
        }
    }

    /// Starts writing the ledger changes and the moved watermarks, unless a
    /// flush is under way already (the next tick takes what it missed).
    fn start_flush(&mut self) {
        if self.flushing.is_some() {
            return;
        }
        let moved: Vec<(u32, u64)> = self
            .partitions
            .iter()
            .map(|p| (*p, self.watermark(*p)))
            .filter(|(p, w)| self.committed.get(p).is_none_or(|c| w > c))
            .collect();
        if moved.is_empty() && self.ledger_dirty.is_empty() && self.ledger_retired.is_empty() {
            return;
        }
        let dirty = std::mem::take(&mut self.ledger_dirty);
        let retired = std::mem::take(&mut self.ledger_retired);
        let entries: Vec<LedgerEntry> =
            dirty.iter().filter_map(|s| self.ledger_entry(*s)).collect();
        for seq in &dirty {
            if let Some(f) = self.inflight.get_mut(seq) {
                f.ledgered = true;
            }
        }
        let (deps, consumer, topic) =
            (self.deps.clone(), self.consumer.clone(), self.topic.clone());
        self.flushing = Some(tokio::spawn(async move {
            let ledger = if entries.is_empty() && retired.is_empty() {
                Ok(())
            } else {
                async {
                    deps.ledger.put_batch(&entries).await?;
                    deps.ledger
                        .remove_batch(&consumer, &topic, &retired)
                        .await?;
                    deps.ledger.flush().await
                }
                .await
                .map_err(|e| e.to_string())
            };
            let offsets = if moved.is_empty() {
                Ok(())
            } else {
                deps.offsets
                    .commit(&consumer, &topic, &moved)
                    .await
                    .map_err(|e| e.to_string())
            };
            Flushed {
                dirty,
                retired,
                ledger,
                moved,
                offsets,
            }
        }));
    }

    /// Takes in the outcome of a flush task.
    fn flushed(&mut self, done: std::result::Result<Flushed, tokio::task::JoinError>) {
        let done = match done {
            Ok(done) => done,
            Err(e) => {
                tracing::error!(consumer = %self.consumer, topic = %self.topic, error = %e, "flush task failed");
                return;
            }
        };
        match done.ledger {
            Ok(()) => {
                let r = self.faults.ledger.succeeded();
                self.report(r, "ledger write", "");
            }
            Err(e) => {
                // Kept for the next flush: the deliveries still in flight
                // are written again, the retired ids deleted again.
                self.ledger_dirty.extend(
                    done.dirty
                        .into_iter()
                        .filter(|s| self.inflight.contains_key(s)),
                );
                let mut retired = done.retired;
                retired.append(&mut self.ledger_retired);
                self.ledger_retired = retired;
                let r = self.faults.ledger.failed();
                self.report(r, "ledger flush (kept for the next flush)", &e);
            }
        }
        if done.moved.is_empty() {
            return;
        }
        match done.offsets {
            Ok(()) => {
                // Retired deliveries below the new watermarks are done.
                let mut finished = 0;
                for (p, w) in &done.moved {
                    if let Some(set) = self.uncommitted.get_mut(p) {
                        let above = set.split_off(w);
                        finished += set.len();
                        *set = above;
                    }
                }
                self.deps.metrics.pending_deliveries.dec_by(finished as i64);
                self.committed.extend(done.moved);
                let r = self.faults.offsets.succeeded();
                self.report(r, "offset commit", "");
            }
            Err(e) => {
                // Kept dirty: the next flush tries again.
                self.deps.metrics.offset_write_failures.inc();
                let r = self.faults.offsets.failed();
                self.report(r, "offset commit (kept; the deliveries stay pending)", &e);
            }
        }
    }

    /// Waits for a flush under way, then flushes what is left, and returns
    /// once it is written (shutdown and stop).
    async fn flush(&mut self) {
        for _ in 0..2 {
            if self.flushing.is_none() {
                self.start_flush();
            }
            if let Some(job) = self.flushing.take() {
                self.flushed(job.await);
            }
        }
    }
}

/// What a flush wrote, and how it went.
struct Flushed {
    /// Deliveries whose ledger entries it wrote.
    dirty: HashSet<u64>,
    /// Delivery ids it deleted from the ledger.
    retired: Vec<String>,
    ledger: std::result::Result<(), String>,
    /// The watermarks it committed.
    moved: Vec<(u32, u64)>,
    offsets: std::result::Result<(), String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_ids_round_trip() {
        let id = delivery_id("0190abcdef", 7, 300);
        assert_eq!(parse_delivery_id(&id), Some(("0190abcdef", 7, 300)));
        assert_eq!(parse_delivery_id("nonsense"), None);
        assert_eq!(parse_delivery_id("a-zz-1"), None);
    }
}
