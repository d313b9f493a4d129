//! The dispatcher of one consumer on one topic: reads the partitions the
//! topology assigns, hands each event to one member (a webhook or a pull
//! mailbox), and commits the consumer's offsets as acknowledgements arrive.
//!
//! A consumer is a load-balanced group (events spread over its members,
//! sticky by partition key) or one broadcast member. The dispatcher is one
//! task working its parts (under a lock other tasks may take between its
//! turns, see `lane`), each in its own file with its own invariants:
//! - `flight`: the state machine of one event's delivery (queued, in a
//!   mailbox, handed out, pushing, backing off, dead-lettering);
//! - `cursor`: per partition, the read position and the contiguous
//!   watermark that becomes the committed offset;
//! - `router`: the members, rendezvous picks, per-client caps and
//!   online/offline members, and the one re-routing rule;
//! - `ledger`: the write-behind buffer of the in-flight ledger;
//! - `timers`: every timer, on tokio's clock;
//! - `batch`: the batcher of a member pushing in batch mode, a task beside
//!   the loop that gathers its deliveries into one POST;
//! - `ids`: delivery ids and their random nonces;
//! - `api`: the settings, commands and answers the runtime uses.
//!
//! What the task does with them, as methods of [`Dispatcher`], one concern
//! a file:
//! - `start`: the partitions to read, their starting offsets, the attempts
//!   the previous run left in the ledger, and spawning the task;
//! - `run`: the loop, what each command and each timer leads to, and how
//!   repeating faults are logged;
//! - `fill`: reading the log into flight;
//! - `hand_out`: sending an event to its member (a mailbox copy, a
//!   webhook call, or a place in the member's batch, see `batch`), and sending released or orphaned deliveries elsewhere;
//! - `settle`: acks, nacks and webhook outcomes, and retiring an event;
//! - `retry`: counting failed attempts, the backoff, redelivery;
//! - `dead_letter`: writing an event out of attempts to the dead-letter
//!   store;
//! - `fence`: the partitions read and the fencing token of the claim each
//!   is read under (`PARTITION_OWNED_PULL`);
//! - `drain`: drain and stop;
//! - `flush`: the offset and ledger writes, beside the loop.
//!
//! - `lane`: the state as other tasks reach it between the loop's turns
//!   (an event offered by its publisher, a settle from its client).
//!
//! This file holds the dispatcher's state and the types those files share.
//! Invariants they keep together:
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
mod batch;
mod cursor;
mod dead_letter;
mod drain;
mod fence;
mod fill;
mod flight;
mod flush;
mod hand_out;
mod ids;
mod lane;
mod ledger;
mod retry;
mod router;
mod run;
mod settle;
mod start;
#[cfg(test)]
mod tests;
mod timers;

use std::collections::HashMap;
use std::sync::Arc;

use eventmesh_core::throttle::FailureLog;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use cursor::Cursor;
use flight::Flight;
use ids::{Nonces, Slot};
use ledger::LedgerBuffer;
use router::Router;
use timers::Timers;

pub use api::{
    Command, DispatchSettings, DispatcherDeps, DispatcherHandle, HandOutObserver, Internal,
    Membership, NoObserver, Policy, Settle, Settled,
};
pub use ids::{parse_delivery_id, DeliveryId};
pub use lane::Lane;
pub use router::{Channel, ClientLoad, Member};
pub(crate) use start::starting_offsets;

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

/// When an event that entered the log at `ingest_ms` expires (ms since the
/// epoch), if it does: its `expirytime`, else the topic's time to live.
fn expiry_of(
    event: &eventmesh_core::CloudEvent,
    ingest_ms: u64,
    ttl_ms: Option<u64>,
) -> Option<u64> {
    event
        .expires_at_ms()
        .or_else(|| ttl_ms.map(|t| ingest_ms.saturating_add(t)))
}

/// Whether an expiry has come.
fn is_past(expiry: Option<u64>) -> bool {
    expiry.is_some_and(|at| at <= eventmesh_core::time::now_ms())
}

/// When to look at an event waiting in a mailbox next: after the ack
/// timeout, or at its expiry if that comes first.
fn mailbox_check(ack_timeout: std::time::Duration, expiry: Option<u64>) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    let timeout = now + ack_timeout;
    match expiry {
        Some(at) => {
            let left = at.saturating_sub(eventmesh_core::time::now_ms());
            timeout.min(now + std::time::Duration::from_millis(left))
        }
        None => timeout,
    }
}

/// The group a consumer belongs to: a broadcast member's consumer is
/// `<group>:<client>`.
fn group_of(consumer: &str) -> &str {
    consumer.split_once(':').map_or(consumer, |(g, _)| g)
}

/// A consumer's filter, its place in the topic's sieve (which reads and
/// evaluates for it, see `crate::sieve`), and the counters of what it
/// skipped and of its evaluation errors.
struct Selection {
    filter: Arc<eventmesh_filter::Filter>,
    sieve: crate::sieve::SieveHandle,
    skipped: prometheus_client::metrics::counter::Counter,
    errors: prometheus_client::metrics::counter::Counter,
}

impl Selection {
    fn new(
        deps: &DispatcherDeps,
        consumer: &str,
        topic: &str,
        filter: Option<Arc<eventmesh_filter::Filter>>,
    ) -> Option<Selection> {
        let filter = filter?;
        let (skipped, errors) = deps.metrics.filter_counters(topic, group_of(consumer));
        Some(Selection {
            sieve: deps
                .sieves
                .register(&deps.log, &deps.metrics, topic, filter.clone()),
            filter,
            skipped,
            errors,
        })
    }

    /// The selection for `filter`: this one when it is the same filter.
    fn renewed(
        this: Option<Selection>,
        deps: &DispatcherDeps,
        consumer: &str,
        topic: &str,
        filter: Option<Arc<eventmesh_filter::Filter>>,
    ) -> Option<Selection> {
        match (this, filter) {
            (Some(s), Some(f)) if Arc::ptr_eq(&s.filter, &f) => Some(s),
            (_, f) => Selection::new(deps, consumer, topic, f),
        }
    }
}

pub struct Dispatcher {
    id: u32,
    consumer: String,
    /// Shared with every mailbox copy (which names its topic).
    topic: Arc<str>,
    deps: Arc<DispatcherDeps>,
    router: Router,
    /// The consumer's filter: with one, events are read through the
    /// topic's sieve, which hands over only the matches (`fill`).
    filter: Option<Selection>,
    /// Events read past because their `expirytime` had passed.
    expired: prometheus_client::metrics::counter::Counter,
    /// The topic's time to live for events without an `expirytime`, as
    /// last read (at start, then at each offset flush tick).
    ttl_ms: Option<u64>,
    ttl_due: bool,
    partitions: Vec<u32>,
    cursors: HashMap<u32, Cursor>,
    /// Per partition read, the fencing token of this instance's claim when
    /// it started reading it (`PARTITION_OWNED_PULL`).
    tokens: HashMap<u32, u64>,
    /// Which partition reading starts from next, in turn.
    rotate: usize,
    flights: HashMap<Slot, Flight>,
    /// The batchers of members pushing in batch mode, by client id.
    batchers: HashMap<String, batch::Batcher>,
    timers: Timers<Timer>,
    nonces: Nonces,
    ledger: LedgerBuffer,
    /// Attempts spent before the last restart on events not read again yet.
    recovered: HashMap<Slot, u32>,
    /// The ledger and offset writes of a flush under way (see `flush`).
    flushing: Option<JoinHandle<flush::Flushed>>,
    /// Reading stopped because every member is at its per-client cap.
    capped: bool,
    /// A filtered consumer reads only when this is set: at start, when the
    /// sieve read a match for it, at the flush tick (to read past what it
    /// skipped), when its members change, when it has more to read at once,
    /// and on any wake-up while `stalled`.
    read_due: bool,
    /// The last read stopped for want of room (the window, or every
    /// member at its cap) with more to read.
    stalled: bool,
    phase: Phase,
    faults: Faults,
    tx: mpsc::Sender<Command>,
    /// While the loop waits: the time it sleeps until (see `lane`).
    sleeping_until: Option<tokio::time::Instant>,
    /// While the loop waits: whether a flush of its is under way (so a
    /// turn follows when it ends; tests wait for it).
    flush_pending: bool,
    /// Stopped: takes no step any more (see `lane`).
    stopped: bool,
}
