//! What the holder of a delivery says: a client's ack or nack, and the
//! outcome of a webhook call; and retiring an event that left flight.
//!
//! Invariants: a settle changes something only under a delivery id of
//! this run and dispatcher whose ticket still counts (see `flight`), for a
//! partition still owned, and (with a creator to check) from the holder's
//! creator, unless the policy is permissive; a webhook call's outcome counts
//! only for the call under way (a superseded one is dropped); a retired
//! event no longer holds the watermark back, and its ledger entry and
//! timer go with it.

use super::ids::{DeliveryId, Slot, Ticket};
use super::{Dispatcher, Next, Policy, Settle, Settled, Timer};
use crate::creator::Creator;
use crate::ingress::now_ms;

impl Dispatcher {
    pub(super) fn settle(
        &mut self,
        id: &DeliveryId,
        how: Settle,
        by: Option<&Creator>,
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
            Settle::Release => self.redeliver(slot, true),
            Settle::Reject(reason) => {
                self.deps.metrics.nacks.inc();
                self.rejected(slot, &reason);
            }
        }
        verdict
    }

    pub(super) fn pushed(
        &mut self,
        slot: Slot,
        ticket: Ticket,
        result: std::result::Result<(), String>,
    ) {
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
    pub(super) fn retire(&mut self, slot: Slot) {
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
}
