//! Failed attempts: counting one (a nack, a failed webhook call, an ack
//! timeout, a stream closing on a delivery its client had taken), then
//! backing off, sending again at once, or, after the last, dead-lettering;
//! the backoff schedule; and redelivery, unless the event expired
//! meanwhile (then it is dead-lettered with the reason `expired`).
//!
//! Invariants: every failure counts toward `max_attempts` and marks the
//! event's ledger entry for the next flush; a retry waits
//! `backoff_initial`, doubling with each attempt up to `backoff_max`, plus
//! up to `backoff_jitter` of it, derived from the event and the attempt
//! (the same for the same retry, different across events); a failed
//! dead-letter write is tried again after the first step of it.

use std::time::Duration;

use eventmesh_core::topic::stable_hash;
use tokio::time::Instant;

use super::flight::Verdict;
use super::ids::Slot;
use super::{Dispatcher, Next, Timer};

impl Dispatcher {
    /// Counts a failed attempt, then dead-letters the event or goes on
    /// with `next`.
    pub(super) fn failed(&mut self, slot: Slot, reason: &str, next: Next) {
        let max = self.deps.settings.delivery.max_attempts;
        self.failed_within(slot, reason, next, max);
    }

    /// Dead-letters the event at `slot` now with `reason`, as if its
    /// attempts were used up.
    pub(super) fn rejected(&mut self, slot: Slot, reason: &str) {
        let next = Next::BackOff {
            keep_push_ticket: false,
        };
        self.failed_within(slot, reason, next, 0);
    }

    fn failed_within(&mut self, slot: Slot, reason: &str, next: Next, max: u32) {
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
    pub(super) fn backoff(&self, slot: Slot, attempts: u32) -> Duration {
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

    pub(super) fn redeliver(&mut self, slot: Slot, released: bool) {
        if self.expire(slot) {
            return;
        }
        self.deps.metrics.redeliveries.inc();
        self.dispatch(slot, released);
    }

    /// An event that expired while waiting in its member's mailbox, never
    /// taken: withdrawn, read past and counted as expired (it was never
    /// delivered, so it is not dead-lettered).
    pub(super) fn expired_in_mailbox(&mut self, slot: Slot) {
        let Some(mut f) = self.flights.remove(&slot) else {
            return;
        };
        tracing::debug!(consumer = %self.consumer, partition = slot.partition, offset = slot.offset, "expired in a mailbox; withdrawn");
        // Retired: the mailbox copy is withdrawn, the holder's load freed.
        f.ack();
        self.retire(slot);
        self.expired.inc();
    }

    /// An event past its `expirytime` is not sent again: it is
    /// dead-lettered with the reason `expired`, and counted as expired.
    /// True when it was.
    fn expire(&mut self, slot: Slot) -> bool {
        let Some(f) = self.flights.get_mut(&slot) else {
            return false;
        };
        if !super::is_past(super::expiry_of(&f.event, f.ingest_ms, self.ttl_ms)) {
            return false;
        }
        tracing::debug!(consumer = %self.consumer, partition = slot.partition, offset = slot.offset, "expired while being retried; dead-lettering");
        f.expire();
        self.expired.inc();
        self.ledger.touch(slot);
        self.timers.cancel(Timer::Flight(slot));
        self.write_dead_letter(slot);
        true
    }
}
