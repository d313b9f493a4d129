//! Starting a dispatcher: the partitions it reads (those the topology
//! assigns this instance), the offset each is read from, and the attempts
//! the previous run spent on the events it left in flight; then the task.
//!
//! Invariants: a partition the consumer has no committed offset on starts
//! at the subscription's `from`, and that offset is committed before the
//! task starts, so a restart never evaluates `latest` again; an event the
//! previous run left in the ledger at or above the committed offset comes
//! again from the log with the attempts it had spent (see `ledger`).

use std::collections::HashMap;
use std::sync::Arc;

use eventmesh_state::StartFrom;
use eventmesh_storage::Durability;
use tokio::sync::mpsc;

use super::cursor::Cursor;
use super::fence::tokens_of;
use super::ids::Nonces;
use super::lane::Lane;
use super::ledger::LedgerBuffer;
use super::router::Router;
use super::run::run;
use super::timers::Timers;
use super::{Dispatcher, DispatcherDeps, DispatcherHandle, Faults, Membership, Phase, Selection};
use crate::error::Result;
use crate::topology;

impl Dispatcher {
    /// Fixes the consumer's starting offsets (committing them at once, so a
    /// restart never re-evaluates `latest`) and starts the dispatch task.
    pub async fn start(
        id: u32,
        consumer: String,
        topic: String,
        from: StartFrom,
        membership: Membership,
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
            router: Router::new(
                membership.members,
                deps.settings.delivery.max_inflight_per_client,
                info.partitions,
            ),
            filter: Selection::new(&deps, &consumer, &topic, membership.filter),
            ttl_ms: info.ttl_ms,
            ttl_due: false,
            expired: deps
                .metrics
                .expired_counter(&topic, super::group_of(&consumer)),
            partitions,
            cursors,
            tokens,
            rotate: 0,
            flights: HashMap::new(),
            batchers: HashMap::new(),
            timers: Timers::default(),
            nonces: Nonces::default(),
            ledger: recovered.buffer,
            recovered: recovered.attempts,
            flushing: None,
            capped: false,
            read_due: true,
            stalled: false,
            phase: Phase::Running,
            faults: Faults::default(),
            tx: tx.clone(),
            sleeping_until: None,
            flush_pending: false,
            stopped: false,
            consumer,
            topic: Arc::from(topic),
            deps: deps.clone(),
        };
        tracing::info!(consumer = %d.consumer, topic = %d.topic, partitions = ?d.partitions, "dispatcher started");
        let partitions = d.partitions.clone();
        let topic = d.topic.clone();
        let lane = Arc::new(Lane {
            state: tokio::sync::Mutex::new(d),
            wake: tokio::sync::Notify::new(),
            tx: tx.clone(),
            direct: info.durability == Durability::Memory,
        });
        // Offered what its publishers append from before its first read
        // on: either it takes an event, or its loop reads it.
        if lane.direct {
            deps.handoffs.add(&topic, id, lane.clone());
        }
        let join = tokio::spawn(run(lane.clone(), rx, deps.log.append_watch()));
        Ok(DispatcherHandle {
            lane,
            join,
            partitions,
        })
    }
}

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
            StartFrom::Time(ms) => deps.log.offset_at_time(topic, p, ms).await?,
        };
        committed.insert(p, o);
        initial.push((p, o));
    }
    if !initial.is_empty() {
        deps.offsets.commit(consumer, topic, &initial).await?;
    }
    Ok(committed)
}
