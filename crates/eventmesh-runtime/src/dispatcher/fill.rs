//! Reading the log into flight: the part of the loop that takes new
//! records, partition by partition in turn, while the window has room.
//!
//! A consumer without filters reads the log itself; one with filters reads
//! through its topic's sieve (`crate::sieve`), which reads and decodes once
//! for every filtered consumer of the topic and hands each only its
//! matches, with how far it has read.
//!
//! Invariants: at most `max_inflight` events are in flight; a record is
//! admitted only when a member can take it (else reading stops at it,
//! `capped`, and resumes from it once a member has room); an undecodable
//! record is skipped for good and counted; an event the consumer's filter
//! does not match is read past before it takes a member's room, a ledger
//! entry or a forward, and counted (`eventmesh_filter_skipped_total`), so
//! the committed offset moves past it; an event past its `expirytime` is
//! read past the same way and counted (`eventmesh_expired_total`); records
//! that retention dropped are read past.

use std::sync::Arc;

use eventmesh_core::codec::{self, StoredEvent};
use eventmesh_core::CloudEvent;
use eventmesh_storage::Record;

use super::flight::{Flight, Holder};
use super::ids::Slot;
use super::{Dispatcher, Phase};

/// Records read from one partition in one go.
const READ_BATCH: usize = 512;
const READ_MAX_BYTES: usize = 4 << 20;

pub(super) enum Admit {
    Admitted,
    /// Undecodable: skipped for good.
    Skipped,
    /// Past its `expirytime`: skipped for good, and counted.
    Expired,
    /// Every member is at its per-client cap.
    Full,
}

impl Dispatcher {
    /// Reads new records while the window has room and hands them out:
    /// one batch from each partition in turn. True when a partition has
    /// more to read right away and the window still has room (the filter
    /// skipped what was read, say): the loop calls again without waiting
    /// for something to happen.
    pub(super) async fn fill(&mut self) -> bool {
        self.capped = false;
        self.stalled = false;
        if std::mem::take(&mut self.ttl_due) {
            // The topic's time to live may have changed.
            if let Ok(Some(info)) = self.deps.log.topic(&self.topic).await {
                self.ttl_ms = info.ttl_ms;
            }
        }
        let draining = matches!(self.phase, Phase::Draining { .. });
        if self.router.is_empty() || self.partitions.is_empty() || draining {
            return false;
        }
        let mut more = false;
        let n = self.partitions.len();
        self.rotate = (self.rotate + 1) % n;
        for i in 0..n {
            let free = self
                .deps
                .settings
                .delivery
                .max_inflight
                .saturating_sub(self.flights.len());
            if free == 0 {
                self.stalled = true;
                return false;
            }
            let p = self.partitions[(self.rotate + i) % n];
            if !self.still_owns(p) {
                continue;
            }
            let end = match self.deps.log.read_end(&self.topic, p).await {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(topic = %self.topic, partition = p, error = %e, "cannot read end offset");
                    continue;
                }
            };
            if self.cursors[&p].next() >= end {
                continue;
            }
            if let Ok(floor) = self.deps.log.floor_offset(&self.topic, p).await {
                self.skip_dropped(p, floor);
            }
            let next = self.cursors[&p].next();
            if next >= end {
                continue;
            }
            if self.filter.is_some() {
                match self.fill_sifted(p, next, end).await {
                    Some(more_here) => more |= more_here,
                    // A member is full, or the window.
                    None => {
                        self.stalled = true;
                        return false;
                    }
                }
                continue;
            }
            let want = free.min(READ_BATCH);
            let read = self
                .deps
                .log
                .read_until(&self.topic, p, next, end, want, READ_MAX_BYTES);
            let records = match read.await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(topic = %self.topic, partition = p, error = %e, "log read failed");
                    continue;
                }
            };
            if records.is_empty() {
                // The records below `end` are gone since the floor was
                // last known: skip to what is stored.
                if let Ok(start) = self.deps.log.start_offset(&self.topic, p).await {
                    self.skip_dropped(p, start);
                }
                continue;
            }
            for r in records {
                if let Admit::Full = self.admit(p, r) {
                    // Read again from here once a member has room.
                    self.capped = true;
                    self.stalled = true;
                    return false;
                }
            }
            more |= self.cursors[&p].next() < end;
        }
        more && self.flights.len() < self.deps.settings.delivery.max_inflight
    }

    /// Retention dropped every offset of `partition` below `to`: when the
    /// cursor is below it, the records in between were never read. Counted
    /// and logged; reading goes on from `to`.
    fn skip_dropped(&mut self, partition: u32, to: u64) {
        let Some(cursor) = self.cursors.get_mut(&partition) else {
            return;
        };
        let from = cursor.next();
        if to <= from {
            return;
        }
        cursor.seek(to);
        let gap = to - from;
        self.deps.metrics.retention_skipped(&self.topic, gap);
        tracing::warn!(
            consumer = %self.consumer,
            topic = %self.topic,
            partition,
            from,
            to,
            "retention dropped {gap} offsets this consumer had not read; it continues from {to}"
        );
    }

    /// Takes the consumer's matches in `partition` from `from` on from the
    /// sieve, puts them into flight, and reads past the rest. `None` when
    /// it stopped at a match no member or no window had room for; else
    /// whether the partition has more below `end`.
    async fn fill_sifted(&mut self, partition: u32, from: u64, end: u64) -> Option<bool> {
        let selection = self.filter.as_ref().expect("filtered");
        let deps = &self.deps;
        let read = selection
            .sieve
            .read(&*deps.log, &deps.metrics, partition, from, end);
        let sifted = match read.await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(topic = %self.topic, partition, error = %e, "log read failed");
                return Some(false);
            }
        };
        let mut stopped = None;
        // Matches taken: put in flight, or expired.
        let mut admitted = 0u64;
        for (offset, decoded) in sifted.matched {
            if self.flights.len() >= self.deps.settings.delivery.max_inflight {
                stopped = Some(offset);
                break;
            }
            let event = decoded.event.clone();
            if let Admit::Full = self.admit_event(partition, offset, decoded.ingest_ms, event) {
                self.capped = true;
                stopped = Some(offset);
                break;
            }
            admitted += 1;
        }
        let reached = stopped.unwrap_or(sifted.upto);
        let below = |v: &[u64]| v.partition_point(|o| *o < reached) as u64;
        let absent = below(&sifted.absent);
        if let Some(selection) = &self.filter {
            selection.errors.inc_by(below(&sifted.errored));
            selection
                .skipped
                .inc_by((reached - from).saturating_sub(absent + admitted));
        }
        if let Some(cursor) = self.cursors.get_mut(&partition) {
            cursor.seek(reached);
        }
        stopped.is_none().then_some(reached < end)
    }

    /// Decodes a record, puts it into flight and sends it.
    fn admit(&mut self, partition: u32, record: Record) -> Admit {
        let StoredEvent { ingest_ms, event } = match codec::decode(&record.payload) {
            Ok(s) => s,
            Err(e) => {
                // Unreadable forever: skipping it is the only way forward.
                self.deps.metrics.corrupt_records.inc();
                tracing::error!(topic = %self.topic, partition, offset = record.offset, error = %e, "skipping undecodable record");
                if let Some(cursor) = self.cursors.get_mut(&partition) {
                    cursor.skip(record.offset);
                }
                return Admit::Skipped;
            }
        };
        self.admit_event(partition, record.offset, ingest_ms, Arc::new(event))
    }

    /// Puts a decoded event into flight and sends it.
    pub(super) fn admit_event(
        &mut self,
        partition: u32,
        offset: u64,
        ingest_ms: u64,
        event: Arc<CloudEvent>,
    ) -> Admit {
        let slot = Slot { partition, offset };
        let expired = super::is_past(super::expiry_of(&event, ingest_ms, self.ttl_ms));
        let Some(cursor) = self.cursors.get_mut(&partition) else {
            return Admit::Skipped;
        };
        if expired {
            self.expired.inc();
            cursor.skip(offset);
            return Admit::Expired;
        }
        let Some(member) = self.router.pick(&event, partition) else {
            return Admit::Full;
        };
        cursor.admit(offset);
        let attempts = self.recovered.remove(&slot).unwrap_or(0);
        let flight = Flight::new(event, ingest_ms, attempts, Holder::charge(member));
        self.flights.insert(slot, flight);
        // Recorded at the next flush if still in flight.
        self.ledger.touch(slot);
        self.deps.metrics.pending_deliveries.inc();
        self.deps.metrics.events_dispatched.inc();
        self.dispatch(slot, false);
        Admit::Admitted
    }
}
