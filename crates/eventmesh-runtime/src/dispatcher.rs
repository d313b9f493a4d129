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
//!   pauses while the window is full.
//! - Delivery ids are `<boot>-<dispatcher>-<seq>`: unique across restarts
//!   (the boot id is new at every start), so an ack from an earlier run or
//!   for a retired delivery matches nothing.
//! - A failed push is retried with exponential backoff; a pulled delivery
//!   not acknowledged within the ack timeout is sent again under a new id.
//!   Each counts as a failed attempt; after `max_attempts` the event goes to
//!   the dead-letter store, and the delivery is retired only once that write
//!   is confirmed (until then it stays in flight and the write is retried),
//!   so the watermark passes only events acknowledged or dead-lettered.
//! - Every delivery is in the ledger (`DeliveryStateStore`) before it is
//!   first pushed; attempt counts and retirements are written behind, at
//!   every flush (with one fsync). At start the ledger's entries give the
//!   attempts already spent on events that are read again from the log.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use eventmesh_core::codec::{self, StoredEvent};
use eventmesh_core::config::DeliveryTopology;
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

/// Tunables shared by every dispatcher.
#[derive(Debug, Clone)]
pub struct DispatchSettings {
    pub topology: DeliveryTopology,
    pub max_inflight: usize,
    pub max_attempts: u32,
    pub ack_timeout: Duration,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// Largest random spread added to a retry delay, as a fraction of it.
    pub backoff_jitter: f64,
    pub flush_interval: Duration,
    pub webhook_timeout: Duration,
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
}

pub enum Command {
    Ack {
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
    attempts: u32,
    hand_out: Option<Arc<HandOut>>,
    /// Set once the attempts are used up: the event is being dead-lettered
    /// and is not sent again.
    dead_reason: Option<String>,
}

#[derive(PartialEq, Eq, PartialOrd, Ord, Clone, Copy)]
enum TimerKind {
    Retry,
    AckCheck,
    DeadLetterRetry,
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
    /// After a failed ledger write, reading pauses until then.
    ledger_backoff: Option<Instant>,
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
        if !old.is_empty() {
            let ids: Vec<String> = old.into_iter().map(|e| e.delivery_id).collect();
            deps.ledger.remove_batch(&consumer, &topic, &ids).await?;
            tracing::info!(consumer = %consumer, topic = %topic, deliveries = ids.len(), "recovered in-flight deliveries from the ledger");
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
            ledger_retired: Vec::new(),
            ledger_backoff: None,
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
                _ = flush.tick() => self.flush().await,
            }
        }
        self.flush().await;
    }

    async fn stop(&mut self, done: oneshot::Sender<()>) {
        self.flush().await;
        self.deps
            .metrics
            .pending_deliveries
            .dec_by(self.inflight.len() as i64);
        for f in self.inflight.values() {
            if let Some(h) = &f.hand_out {
                h.withdrawn.store(true, Ordering::Release);
            }
        }
        self.inflight.clear();
        tracing::info!(consumer = %self.consumer, topic = %self.topic, "dispatcher stopped");
        let _ = done.send(());
    }

    /// Handles one command; returns the stop acknowledgement when asked to stop.
    fn handle(&mut self, cmd: Command) -> Option<oneshot::Sender<()>> {
        match cmd {
            Command::Ack { seq, reply } => {
                let acked = self.inflight.remove(&seq).map(|f| self.complete(seq, f));
                let _ = reply.send(acked.is_some());
            }
            Command::PushDone { seq, result } => match result {
                Ok(()) => {
                    if let Some(f) = self.inflight.remove(&seq) {
                        self.complete(seq, f);
                    }
                }
                Err(reason) => self.push_failed(seq, &reason),
            },
            Command::Members(members) => self.set_members(members),
            Command::DeadLettered { seq, result } => match result {
                Ok(()) => {
                    if let Some(f) = self.inflight.remove(&seq) {
                        self.retire_dead(seq, f);
                    }
                }
                Err(e) => {
                    tracing::warn!(consumer = %self.consumer, topic = %self.topic, error = %e, "dead-letter write failed; the delivery stays in flight and the write is retried");
                    let wait = self.backoff(seq, 1);
                    self.timers.push(Reverse((
                        Instant::now() + wait,
                        seq,
                        TimerKind::DeadLetterRetry,
                    )));
                }
            },
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
        self.ledger_dirty.remove(&seq);
        self.ledger_retired
            .push(delivery_id(&self.deps.boot, self.id, seq));
    }

    fn complete(&mut self, seq: u64, f: Flight) {
        self.retire(seq, &f);
        let m = &self.deps.metrics;
        m.acks.inc();
        m.pending_deliveries.dec();
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
        self.deps.metrics.pending_deliveries.dec();
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
        if self.members.is_empty() || self.partitions.is_empty() {
            return;
        }
        if self.ledger_backoff.is_some_and(|t| Instant::now() < t) {
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
            let first = records[0].offset;
            let mut admitted = Vec::with_capacity(records.len());
            for r in records {
                self.next_read.insert(p, r.offset + 1);
                if let Some(seq) = self.admit(p, r) {
                    admitted.push(seq);
                }
            }
            // In the ledger before the first push.
            let entries: Vec<LedgerEntry> = admitted
                .iter()
                .filter_map(|s| self.ledger_entry(*s))
                .collect();
            if let Err(e) = self.deps.ledger.put_batch(&entries).await {
                tracing::warn!(consumer = %self.consumer, topic = %self.topic, error = %e, "ledger write failed; reading again later");
                self.undo_admit(p, first, &admitted);
                self.ledger_backoff = Some(Instant::now() + self.deps.settings.backoff_initial);
                return;
            }
            self.ledger_backoff = None;
            for seq in admitted {
                self.deps.metrics.events_dispatched.inc();
                self.send(seq);
            }
        }
    }

    /// Takes back deliveries admitted but never sent; the log supplies
    /// their events again from `first`.
    fn undo_admit(&mut self, partition: u32, first: u64, seqs: &[u64]) {
        for seq in seqs {
            if let Some(f) = self.inflight.remove(seq) {
                if let Some(p) = self.pending.get_mut(&f.partition) {
                    p.remove(&f.offset);
                }
                self.recovered.insert((f.partition, f.offset), f.attempts);
                self.deps.metrics.pending_deliveries.dec();
            }
        }
        self.next_read.insert(partition, first);
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
    fn admit(&mut self, partition: u32, record: Record) -> Option<u64> {
        let StoredEvent { ingest_ms, event } = match codec::decode(&record.payload) {
            Ok(s) => s,
            Err(e) => {
                // Unreadable forever: skipping it is the only way forward.
                self.deps.metrics.corrupt_records.inc();
                tracing::error!(topic = %self.topic, partition, offset = record.offset, error = %e, "skipping undecodable record");
                return None;
            }
        };
        let event = Arc::new(event);
        let member = self.choose(&event, partition).client_id.clone();
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
                attempts: self
                    .recovered
                    .remove(&(partition, record.offset))
                    .unwrap_or(0),
                hand_out: None,
                dead_reason: None,
            },
        );
        self.deps.metrics.pending_deliveries.inc();
        Some(seq)
    }

    /// Rendezvous hashing: the member with the highest score for the key
    /// (the partition key, else the partition) wins, so a member joining or
    /// leaving moves only the keys it gains or loses.
    fn choose(&self, event: &CloudEvent, partition: u32) -> &Member {
        if self.members.len() == 1 {
            return &self.members[0];
        }
        let key = match event.partition_key() {
            Some(k) => k.to_string(),
            None => format!("#{partition}"),
        };
        self.members
            .iter()
            .max_by_key(|m| {
                let mut buf = Vec::with_capacity(key.len() + m.client_id.len() + 1);
                buf.extend_from_slice(key.as_bytes());
                buf.push(0);
                buf.extend_from_slice(m.client_id.as_bytes());
                stable_hash(&buf)
            })
            .expect("members is not empty")
    }

    /// Sends (or re-sends) the delivery `seq` to its member.
    fn send(&mut self, seq: u64) {
        let Some(f) = self.inflight.get(&seq).filter(|f| f.dead_reason.is_none()) else {
            return;
        };
        let member = match self.members.iter().find(|m| m.client_id == f.member) {
            Some(m) => m.clone(),
            None if self.members.is_empty() => return,
            None => {
                let m = self.choose(&f.event, f.partition).clone();
                if let Some(f) = self.inflight.get_mut(&seq) {
                    f.member = m.client_id.clone();
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
                let event = f.event.clone();
                let deps = self.deps.clone();
                let tx = self.tx.clone();
                tokio::spawn(async move {
                    let result =
                        push::push(&deps.http, &url, &id, &event, deps.settings.webhook_timeout)
                            .await;
                    let _ = tx.send(Command::PushDone { seq, result }).await;
                });
            }
        }
    }

    /// Retires delivery `seq` and sends its event again under a new id.
    fn reissue(&mut self, seq: u64) {
        let Some(mut f) = self.inflight.remove(&seq) else {
            return;
        };
        if let Some(h) = f.hand_out.take() {
            h.withdrawn.store(true, Ordering::Release);
        }
        self.seq += 1;
        let new = self.seq;
        self.inflight.insert(new, f);
        // The old entry covers the same offset until the next flush swaps it.
        self.ledger_retired
            .push(delivery_id(&self.deps.boot, self.id, seq));
        self.ledger_dirty.remove(&seq);
        self.ledger_dirty.insert(new);
        self.deps.metrics.redeliveries.inc();
        self.send(new);
    }

    fn fire_timers(&mut self) {
        let now = Instant::now();
        while let Some(Reverse((due, seq, kind))) = self.timers.peek().copied() {
            if due > now {
                break;
            }
            self.timers.pop();
            let Some(f) = self.inflight.get(&seq) else {
                continue;
            };
            match kind {
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

    /// Writes behind what the ledger has not seen yet (new attempt counts,
    /// retirements) and syncs it.
    async fn flush_ledger(&mut self) {
        if self.ledger_dirty.is_empty() && self.ledger_retired.is_empty() {
            return;
        }
        let entries: Vec<LedgerEntry> = self
            .ledger_dirty
            .iter()
            .filter_map(|s| self.ledger_entry(*s))
            .collect();
        let ledger = &self.deps.ledger;
        let result = async {
            ledger.put_batch(&entries).await?;
            ledger
                .remove_batch(&self.consumer, &self.topic, &self.ledger_retired)
                .await?;
            ledger.flush().await
        }
        .await;
        match result {
            Ok(()) => {
                self.ledger_dirty.clear();
                self.ledger_retired.clear();
            }
            Err(e) => {
                tracing::warn!(consumer = %self.consumer, topic = %self.topic, error = %e, "ledger flush failed; kept for the next flush");
            }
        }
    }

    /// Writes every watermark that moved since the last flush.
    async fn flush(&mut self) {
        self.flush_ledger().await;
        let moved: Vec<(u32, u64)> = self
            .partitions
            .iter()
            .map(|p| (*p, self.watermark(*p)))
            .filter(|(p, w)| self.committed.get(p).is_none_or(|c| w > c))
            .collect();
        if moved.is_empty() {
            return;
        }
        match self
            .deps
            .offsets
            .commit(&self.consumer, &self.topic, &moved)
            .await
        {
            Ok(()) => self.committed.extend(moved),
            Err(e) => {
                // Kept dirty: the next flush tries again.
                self.deps.metrics.offset_write_failures.inc();
                tracing::warn!(consumer = %self.consumer, topic = %self.topic, error = %e, "offset commit failed");
            }
        }
    }
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
