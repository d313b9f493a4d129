//! The dispatcher of one consumer on one topic: reads the partitions the
//! topology assigns, hands each event to one member (a webhook or a pull
//! mailbox), and commits the consumer's offsets as acknowledgements arrive.
//!
//! A consumer is a load-balanced group (events spread over its members,
//! sticky by partition key) or one broadcast member. The dispatcher is one
//! task owning its parts, each in its own file with its own invariants:
//! - `flight`: the state machine of one event's delivery (queued, in a
//!   mailbox, handed out, pushing, backing off, dead-lettering);
//! - `cursor`: per partition, the read position and the contiguous
//!   watermark that becomes the committed offset;
//! - `router`: the members, rendezvous picks, per-client caps and
//!   online/offline members, and the one re-routing rule;
//! - `ledger`: the write-behind buffer of the in-flight ledger;
//! - `timers`: every timer, on tokio's clock;
//! - `ids`: delivery ids and their random nonces;
//! - `fill`: reading the log into flight;
//! - `flush`: the offset and ledger writes, beside the loop;
//! - `api`: the settings, commands and answers the runtime uses.
//!
//! This file is the loop that ties them together. Invariants it keeps:
//! - at most `max_inflight` events are in flight at once; reading pauses
//!   while the window is full or every member is at its cap;
//! - an event leaves flight only when acknowledged (by its holder, see
//!   [`Command::Settle`]) or dead-lettered with the dead letter confirmed
//!   by the meta store (until then its write is retried), so the committed
//!   offset passes only settled events;
//! - a failed push is retried after an exponential backoff with jitter; a
//!   nack likewise; a pulled delivery not acknowledged within the ack
//!   timeout goes out again at once under a new id; each counts as a failed
//!   attempt, and after `max_attempts` the event is dead-lettered;
//! - `eventmesh_pending_deliveries` counts events whose offset is not
//!   committed yet: it falls only once a committed watermark covers them.

mod api;
mod cursor;
mod fill;
mod flight;
mod flush;
mod ids;
mod ledger;
mod router;
mod timers;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use eventmesh_core::throttle::{FailureLog, Report as FaultReport};
use eventmesh_core::topic::stable_hash;
use eventmesh_state::{DeadLetter, StartFrom};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::error::Result;
use crate::ingress::now_ms;
use crate::mailbox::MailItem;
use crate::owner::Owner;
use crate::{push, topology, trace};

use api::Report;
use cursor::Cursor;
use flight::{Flight, Kind, Outgoing, Verdict};
use ids::{format_delivery_id, Nonces, Slot, Ticket};
use ledger::LedgerBuffer;
use router::Router;
use timers::Timers;

pub use api::{
    Command, DispatchSettings, DispatcherDeps, DispatcherHandle, HandOutObserver, Internal,
    NoObserver, Policy, Settle, Settled,
};
pub use ids::{parse_delivery_id, DeliveryId};
pub use router::{Channel, ClientLoad, Member};

/// Records read from one partition in one go.
const READ_BATCH: usize = 512;
const READ_MAX_BYTES: usize = 4 << 20;
/// Commands handled in one wake-up before reading again.
const COMMAND_BURST: usize = 1024;
/// While every member is at its cap, how often to look for room again.
const CAP_RECHECK: Duration = Duration::from_millis(20);

/// Repeating failures, reported sparingly.
#[derive(Default)]
struct Faults {
    ledger: FailureLog,
    offsets: FailureLog,
    dead_letters: FailureLog,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Timer {
    DrainDeadline,
    /// The one timer of an event in flight: its ack check, retry, or
    /// dead-letter retry, by its state.
    Flight(Slot),
}

enum Phase {
    Running,
    /// Nothing new is handed out; `done` is answered once nothing is in a
    /// client's hands, or at the deadline.
    Draining {
        done: Option<oneshot::Sender<()>>,
    },
}

/// What comes after a failed attempt that was not the last.
#[derive(Clone, Copy)]
enum Next {
    BackOff { keep_push_ticket: bool },
    Redeliver { released: bool },
}

pub struct Dispatcher {
    id: u32,
    consumer: String,
    topic: String,
    deps: Arc<DispatcherDeps>,
    router: Router,
    partitions: Vec<u32>,
    cursors: HashMap<u32, Cursor>,
    /// Per partition read, the fencing token of this instance's claim when
    /// it started reading it (`PARTITION_OWNED_PULL`).
    tokens: HashMap<u32, u64>,
    /// Which partition reading starts from next, in turn.
    rotate: usize,
    flights: HashMap<Slot, Flight>,
    timers: Timers<Timer>,
    nonces: Nonces,
    ledger: LedgerBuffer,
    /// Attempts spent before the last restart on events not read again yet.
    recovered: HashMap<Slot, u32>,
    /// The ledger and offset writes of a flush under way (see `flush`).
    flushing: Option<JoinHandle<flush::Flushed>>,
    /// Reading stopped because every member is at its per-client cap.
    capped: bool,
    phase: Phase,
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
        let info = deps
            .log
            .topic(&topic)
            .await?
            .ok_or_else(|| eventmesh_storage::StorageError::UnknownTopic(topic.clone()))?;
        let partitions = topology::owned_partitions(
            deps.settings.delivery.topology,
            &topic,
            info.partitions,
            deps.fence.as_deref(),
        );
        let committed = starting_offsets(&deps, &consumer, &topic, from, &partitions).await?;
        let tokens = tokens_of(&deps, &topic, &partitions);
        let cursors: HashMap<u32, Cursor> = partitions
            .iter()
            .map(|p| (*p, Cursor::new(committed[p])))
            .collect();
        // In-flight events of the previous run come again from the log
        // (they are above the watermark): keep their attempts.
        let old = deps.ledger.list(&consumer, &topic).await?;
        if !old.is_empty() {
            tracing::info!(consumer = %consumer, topic = %topic, deliveries = old.len(), "recovered in-flight deliveries from the ledger");
        }
        let recovered = LedgerBuffer::recover(old, |s| {
            cursors
                .get(&s.partition)
                .is_some_and(|c| s.offset >= c.committed())
        });
        let (tx, rx) = mpsc::channel(4096);
        let d = Dispatcher {
            id,
            consumer,
            topic,
            router: Router::new(members, deps.settings.delivery.max_inflight_per_client),
            partitions,
            cursors,
            tokens,
            rotate: 0,
            flights: HashMap::new(),
            timers: Timers::default(),
            nonces: Nonces::default(),
            ledger: recovered.buffer,
            recovered: recovered.attempts,
            flushing: None,
            capped: false,
            phase: Phase::Running,
            faults: Faults::default(),
            tx: tx.clone(),
            rx,
            watch: deps.log.append_watch(),
            deps,
        };
        tracing::info!(consumer = %d.consumer, topic = %d.topic, partitions = ?d.partitions, "dispatcher started");
        let partitions = d.partitions.clone();
        let join = tokio::spawn(d.run());
        Ok(DispatcherHandle {
            tx,
            join,
            partitions,
        })
    }

    async fn run(mut self) {
        let mut flush = tokio::time::interval(self.deps.settings.delivery.flush_interval);
        flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut log_open = true;
        loop {
            self.fill().await;
            let next_timer = self
                .timers
                .next()
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

    /// Handles one command; returns the stop acknowledgement when asked to stop.
    fn handle(&mut self, cmd: Command) -> Option<oneshot::Sender<()>> {
        match cmd {
            Command::Settle {
                id,
                how,
                by,
                policy,
                reply,
            } => {
                let _ = reply.send(self.settle(&id, how, by.as_ref(), policy));
            }
            Command::Members(members) => self.set_members(members),
            Command::Release {
                client,
                before,
                waiting,
            } => self.release(&client, before, waiting),
            Command::Drain { deadline, done } => self.begin_drain(deadline, done),
            Command::Stop(done) => return Some(done),
            Command::Extend(added) => self.extend(added),
            Command::Internal(Internal(report)) => match report {
                Report::Pushed {
                    slot,
                    ticket,
                    result,
                } => self.pushed(slot, ticket, result),
                Report::DeadLettered { slot, result } => self.dead_letter_written(slot, result),
            },
        }
        None
    }

    /// Starts reading partitions this instance now owns as well.
    fn extend(&mut self, added: Vec<(u32, u64)>) {
        let mut new = Vec::new();
        for (p, committed) in added {
            if self.cursors.contains_key(&p) {
                continue;
            }
            self.cursors.insert(p, Cursor::new(committed));
            self.partitions.push(p);
            new.push(p);
        }
        self.partitions.sort_unstable();
        self.tokens.extend(tokens_of(&self.deps, &self.topic, &new));
        if !new.is_empty() {
            tracing::info!(consumer = %self.consumer, topic = %self.topic, partitions = ?new, "reading more partitions");
        }
    }

    /// False once this instance's claim on the partition is no longer the
    /// one it read it under (another instance owns it, or the lease ended).
    /// A partition started while no claim counted (the lease between two
    /// renewals it could vouch for) takes the claim that counts now.
    fn still_owns(&mut self, partition: u32) -> bool {
        let Some(f) = &self.deps.fence else {
            return true;
        };
        let now = f.token(&self.topic, partition);
        match (self.tokens.get(&partition), now) {
            (Some(mine), Some(now)) => *mine == now,
            (None, Some(now)) if self.cursors.contains_key(&partition) => {
                self.tokens.insert(partition, now);
                true
            }
            _ => false,
        }
    }

    fn settle(
        &mut self,
        id: &DeliveryId,
        how: Settle,
        by: Option<&Owner>,
        policy: Policy,
    ) -> Settled {
        if id.boot() != &*self.deps.boot || id.dispatcher() != self.id {
            return Settled::Unknown;
        }
        let slot = id.slot();
        if !self.still_owns(slot.partition) {
            // The new owner delivers it again; this instance writes
            // nothing in the partition's name any more.
            return Settled::Fenced;
        }
        let Some(f) = self.flights.get_mut(&slot) else {
            return Settled::Unknown;
        };
        let verdict = match f.authorize(id.ticket(), by) {
            Settled::Foreign if policy == Policy::Permissive => Settled::DoneForeign,
            Settled::Done => Settled::Done,
            refused => return refused,
        };
        match how {
            Settle::Ack => self.acked(slot),
            Settle::Nack => {
                self.deps.metrics.nacks.inc();
                self.failed(
                    slot,
                    "nack",
                    Next::BackOff {
                        keep_push_ticket: false,
                    },
                );
            }
        }
        verdict
    }

    fn pushed(&mut self, slot: Slot, ticket: Ticket, result: std::result::Result<(), String>) {
        if !self
            .flights
            .get(&slot)
            .is_some_and(|f| f.is_pushing(ticket))
        {
            // Superseded (nacked, or sent elsewhere meanwhile).
            return;
        }
        if result.is_ok() && !self.still_owns(slot.partition) {
            // Pushed, but the partition is no longer this instance's: the
            // acknowledgement is not taken (the new owner pushes it again).
            self.deps.metrics.fenced("ack");
            return;
        }
        match result {
            Ok(()) => self.acked(slot),
            Err(reason) => {
                self.deps.metrics.push_failures.inc();
                tracing::debug!(consumer = %self.consumer, reason, "push failed; retrying");
                self.failed(
                    slot,
                    &reason,
                    Next::BackOff {
                        keep_push_ticket: true,
                    },
                );
            }
        }
    }

    /// The event at `slot` left flight: the watermark may pass it, its
    /// ledger entry goes, its timer with it.
    fn retire(&mut self, slot: Slot) {
        if let Some(c) = self.cursors.get_mut(&slot.partition) {
            c.retire(slot.offset);
        }
        self.ledger.retire(slot);
        self.timers.cancel(Timer::Flight(slot));
    }

    fn acked(&mut self, slot: Slot) {
        let Some(mut f) = self.flights.remove(&slot) else {
            return;
        };
        f.ack();
        self.retire(slot);
        let m = &self.deps.metrics;
        m.acks.inc();
        m.end_to_end_latency
            .observe(now_ms().saturating_sub(f.ingest_ms) as f64 / 1000.0);
    }

    /// Counts a failed attempt, then dead-letters the event or goes on
    /// with `next`.
    fn failed(&mut self, slot: Slot, reason: &str, next: Next) {
        let max = self.deps.settings.delivery.max_attempts;
        let Some(f) = self.flights.get_mut(&slot) else {
            return;
        };
        self.ledger.touch(slot);
        let verdict = f.fail(reason, max);
        let attempts = f.attempts();
        match (verdict, next) {
            (Verdict::Exhausted, _) => {
                tracing::info!(consumer = %self.consumer, topic = %self.topic, partition = slot.partition, offset = slot.offset, attempts, reason, "attempts used up; dead-lettering");
                self.timers.cancel(Timer::Flight(slot));
                self.write_dead_letter(slot);
            }
            (Verdict::Retry, Next::BackOff { keep_push_ticket }) => {
                f.back_off(keep_push_ticket);
                let wait = self.backoff(slot, attempts);
                self.timers.set(Timer::Flight(slot), Instant::now() + wait);
            }
            (Verdict::Retry, Next::Redeliver { released }) => self.redeliver(slot, released),
        }
    }

    /// Exponential backoff for the `attempts`-th retry, capped, plus a
    /// spread of up to `backoff_jitter` of it, derived from the event and
    /// attempt so that retries of different events do not line up.
    fn backoff(&self, slot: Slot, attempts: u32) -> Duration {
        let settings = &self.deps.settings;
        let exp = settings
            .delivery
            .backoff_initial
            .saturating_mul(1u32 << attempts.saturating_sub(1).min(20));
        let base = exp.min(settings.delivery.backoff_max);
        let mut key = [0u8; 16];
        key[..4].copy_from_slice(&slot.partition.to_le_bytes());
        key[4..12].copy_from_slice(&slot.offset.to_le_bytes());
        key[12..].copy_from_slice(&attempts.to_le_bytes());
        let spread = (stable_hash(&key) % 1000) as f64 / 1000.0;
        base + base.mul_f64(spread * settings.delivery.backoff_jitter)
    }

    fn redeliver(&mut self, slot: Slot, released: bool) {
        self.deps.metrics.redeliveries.inc();
        self.dispatch(slot, released);
    }

    /// Sends the event at `slot` to where the router says (see
    /// [`Router::destination`]), or keeps it queued while draining.
    fn dispatch(&mut self, slot: Slot, released: bool) {
        // A partition this instance may no longer own is not handed out
        // (kept queued until the handover restarts the dispatcher).
        let draining =
            matches!(self.phase, Phase::Draining { .. }) || !self.still_owns(slot.partition);
        let Some(f) = self.flights.get_mut(&slot) else {
            return;
        };
        let to = match f.holder() {
            Some(h) if !draining => {
                self.router
                    .destination(&f.event, slot.partition, &h.client_id, released)
            }
            _ => None,
        };
        let nonce = self.nonces.next();
        match f.dispatch(to, released, nonce) {
            Outgoing::Mailbox {
                mailbox,
                hand_out,
                ticket,
            } => {
                let _span = f.trace(&self.consumer, &self.topic, slot, "mailbox");
                let mut json = Vec::with_capacity(256);
                f.event.write_json(&mut json);
                mailbox.push(MailItem {
                    delivery_id: format_delivery_id(&self.deps.boot, self.id, slot, ticket),
                    event_json: Bytes::from(json),
                    hand_out,
                });
                if let Some(m) = f.holder() {
                    self.deps.observer.handed(&f.event, &m.client_id);
                }
                self.timers.set(
                    Timer::Flight(slot),
                    Instant::now() + self.deps.settings.delivery.ack_timeout,
                );
            }
            Outgoing::Push { url, ticket } => {
                self.timers.cancel(Timer::Flight(slot));
                if let Some(m) = f.holder() {
                    self.deps.observer.handed(&f.event, &m.client_id);
                }
                let id = format_delivery_id(&self.deps.boot, self.id, slot, ticket);
                let (event, deps, tx) = (f.event.clone(), self.deps.clone(), self.tx.clone());
                let span = f.trace(&self.consumer, &self.topic, slot, "webhook");
                tokio::spawn(trace::within(span, async move {
                    let s = &deps.settings;
                    let result = push::push(
                        &deps.http,
                        &s.webhook_guard,
                        &url,
                        &id,
                        &event,
                        s.delivery.webhook_timeout,
                    )
                    .await;
                    let report = Report::Pushed {
                        slot,
                        ticket,
                        result,
                    };
                    let _ = tx.send(Command::Internal(Internal(report))).await;
                }));
            }
            Outgoing::Queued | Outgoing::Nothing => self.timers.cancel(Timer::Flight(slot)),
        }
    }

    fn release(&mut self, client: &str, before: Instant, waiting: bool) {
        let mut slots: Vec<Slot> = self
            .flights
            .iter_mut()
            .filter_map(|(slot, f)| {
                f.observe();
                let due = match f.kind() {
                    Kind::HandedOut(taken) => taken <= before,
                    _ => waiting,
                };
                (due && f.lent_to(client)).then_some(*slot)
            })
            .collect();
        if slots.is_empty() {
            return;
        }
        // In log order, so that the member taking them over reads them so.
        slots.sort_unstable();
        tracing::debug!(consumer = %self.consumer, client, deliveries = slots.len(), "releasing the deliveries of a closed stream");
        let released = Next::Redeliver { released: true };
        for slot in slots {
            let taken = matches!(self.flights[&slot].kind(), Kind::HandedOut(_));
            if taken {
                self.failed(slot, "connection lost", released);
            } else {
                self.redeliver(slot, true);
            }
        }
    }

    fn set_members(&mut self, members: Vec<Member>) {
        self.router.set(members);
        let mut orphaned: Vec<Slot> = self
            .flights
            .iter()
            .filter(|(_, f)| {
                f.holder()
                    .is_some_and(|h| self.router.get(&h.client_id).is_none())
            })
            .map(|(slot, _)| *slot)
            .collect();
        orphaned.sort_unstable();
        for slot in orphaned {
            self.redeliver(slot, false);
        }
    }

    fn fire_timers(&mut self) {
        let now = Instant::now();
        while let Some(timer) = self.timers.pop_due(now) {
            let slot = match timer {
                Timer::DrainDeadline => {
                    self.finish_drain();
                    continue;
                }
                Timer::Flight(slot) => slot,
            };
            let Some(f) = self.flights.get_mut(&slot) else {
                continue;
            };
            f.observe();
            let timeout = self.deps.settings.delivery.ack_timeout;
            match f.kind() {
                // Still waiting in the mailbox: the ack clock has not started.
                Kind::InMailbox => self.timers.set(timer, now + timeout),
                Kind::HandedOut(taken) if now < taken + timeout => {
                    self.timers.set(timer, taken + timeout);
                }
                Kind::HandedOut(_) => {
                    tracing::debug!(consumer = %self.consumer, partition = slot.partition, offset = slot.offset, "ack timeout; redelivering");
                    self.failed(slot, "ack timeout", Next::Redeliver { released: false });
                }
                Kind::BackingOff => self.redeliver(slot, false),
                Kind::DeadLettering => self.write_dead_letter(slot),
                Kind::Queued | Kind::Pushing | Kind::Retired => {}
            }
        }
    }

    /// Writes the event at `slot` to the dead-letter store in the
    /// background; the outcome comes back as a `DeadLettered` report.
    fn write_dead_letter(&mut self, slot: Slot) {
        let Some(f) = self.flights.get(&slot) else {
            return;
        };
        let Some(reason) = f.dead_reason() else {
            return;
        };
        let dl = DeadLetter::new(
            self.topic.clone(),
            self.consumer.clone(),
            slot.partition,
            slot.offset,
            String::from_utf8_lossy(&f.event.to_json()).into_owned(),
        )
        .with_failure(f.attempts(), reason.to_string(), now_ms());
        let store = self.deps.dead_letters.clone();
        let tx = self.tx.clone();
        // In a partition's name: guarded by the claim it was read under.
        let guard = self.deps.fence.as_ref().map(|_| {
            let token = self.tokens.get(&slot.partition).copied().unwrap_or(0);
            (
                crate::cluster::owner_key(&self.topic, slot.partition),
                token,
            )
        });
        let metrics = self.deps.metrics.clone();
        tokio::spawn(async move {
            // Already present (an earlier try that answered late) counts as done.
            let result = match &guard {
                None => store.record(&dl).await,
                Some((key, token)) => store.record_guarded(&dl, key, *token).await,
            };
            if matches!(result, Err(eventmesh_state::StateError::Fenced(_))) {
                metrics.fenced("dead_letter");
            }
            let result = result.map(drop).map_err(|e| e.to_string());
            let report = Report::DeadLettered { slot, result };
            let _ = tx.send(Command::Internal(Internal(report))).await;
        });
    }

    fn dead_letter_written(&mut self, slot: Slot, result: std::result::Result<(), String>) {
        if !self
            .flights
            .get(&slot)
            .is_some_and(|f| f.kind() == Kind::DeadLettering)
        {
            return;
        }
        match result {
            Ok(()) => {
                let r = self.faults.dead_letters.succeeded();
                self.report(r, "dead-letter write", "");
                if let Some(mut f) = self.flights.remove(&slot) {
                    f.dead_lettered();
                }
                self.retire(slot);
                self.deps.metrics.dead_letters.inc();
            }
            Err(e) => {
                let r = self.faults.dead_letters.failed();
                self.report(
                    r,
                    "dead-letter write (the delivery stays in flight; retried)",
                    &e,
                );
                let wait = self.backoff(slot, 1);
                self.timers.set(Timer::Flight(slot), Instant::now() + wait);
            }
        }
    }

    fn begin_drain(&mut self, deadline: Instant, done: oneshot::Sender<()>) {
        self.phase = Phase::Draining { done: Some(done) };
        // Copies still waiting in a mailbox are in nobody's hands: take
        // them back (they come again from the log after the restart).
        for (slot, f) in self.flights.iter_mut() {
            if f.withdraw() {
                self.timers.cancel(Timer::Flight(*slot));
            }
        }
        self.timers.set(Timer::DrainDeadline, deadline);
        self.check_drained();
    }

    fn check_drained(&mut self) {
        let waiting = matches!(self.phase, Phase::Draining { done: Some(_) });
        if waiting && !self.flights.values().any(Flight::in_hands) {
            self.finish_drain();
        }
    }

    fn finish_drain(&mut self) {
        let Phase::Draining { done } = &mut self.phase else {
            return;
        };
        let Some(done) = done.take() else {
            return;
        };
        self.timers.cancel(Timer::DrainDeadline);
        let held = self.flights.values().filter(|f| f.in_hands()).count();
        if held > 0 {
            tracing::warn!(consumer = %self.consumer, topic = %self.topic, deliveries = held, "shutdown grace over; unacknowledged deliveries come again after the restart");
        }
        let _ = done.send(());
    }

    async fn stop(&mut self, done: oneshot::Sender<()>) {
        self.flush().await;
        let uncommitted: usize = self.cursors.values().map(Cursor::uncommitted).sum();
        self.deps
            .metrics
            .pending_deliveries
            .dec_by((self.flights.len() + uncommitted) as i64);
        // Dropping a flight withdraws its mailbox copy and releases its
        // client's load.
        self.flights.clear();
        self.finish_drain();
        tracing::info!(consumer = %self.consumer, topic = %self.topic, "dispatcher stopped");
        let _ = done.send(());
    }

    /// Logs a failure or recovery that [`FailureLog`] let through.
    fn report(&self, r: FaultReport, what: &str, error: &str) {
        let (consumer, topic) = (&self.consumer, &self.topic);
        match r {
            FaultReport::Quiet => {}
            FaultReport::Failure { suppressed } => {
                tracing::warn!(%consumer, %topic, error, suppressed, "{what} failed")
            }
            FaultReport::Recovered { failures } => {
                tracing::info!(%consumer, %topic, failures, "{what} works again")
            }
        }
    }
}

#[cfg(test)]
mod tests;

/// The committed offset of each of `partitions` for the consumer; one not
/// committed yet starts at `from` and is committed at once, so that a
/// restart never evaluates `latest` again.
pub(crate) async fn starting_offsets(
    deps: &DispatcherDeps,
    consumer: &str,
    topic: &str,
    from: StartFrom,
    partitions: &[u32],
) -> Result<HashMap<u32, u64>> {
    if partitions.is_empty() {
        // Nothing to read (no partition owned here): nothing to ask the
        // offset store, which may be unreachable.
        return Ok(HashMap::new());
    }
    let mut committed = deps.offsets.load(consumer, topic).await?;
    committed.retain(|p, _| partitions.contains(p));
    let mut initial = Vec::new();
    for &p in partitions {
        // A committed offset below what retention kept is left as it is:
        // the first read skips the gap and counts it.
        if committed.contains_key(&p) {
            continue;
        }
        let o = match from {
            StartFrom::Latest => deps.log.end_offset(topic, p).await?,
            StartFrom::Earliest => deps.log.start_offset(topic, p).await?,
        };
        committed.insert(p, o);
        initial.push((p, o));
    }
    if !initial.is_empty() {
        deps.offsets.commit(consumer, topic, &initial).await?;
    }
    Ok(committed)
}

/// The fencing tokens of `partitions` now (none without ownership).
fn tokens_of(deps: &DispatcherDeps, topic: &str, partitions: &[u32]) -> HashMap<u32, u64> {
    let Some(fence) = &deps.fence else {
        return HashMap::new();
    };
    partitions
        .iter()
        .filter_map(|p| Some((*p, fence.token(topic, *p)?)))
        .collect()
}
