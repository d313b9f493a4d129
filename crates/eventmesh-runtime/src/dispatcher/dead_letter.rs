//! Dead-lettering: an event out of attempts is written to the dead-letter
//! store in the background, and leaves flight only once the store has it.
//!
//! Invariants: until the write is confirmed the event stays in flight
//! (`DeadLettering`, holding the watermark back) and the write is tried
//! again after a backoff; a dead letter found already written (an earlier
//! try that answered late) counts as done; with ownership, the write is
//! guarded by the fencing token the partition was read under.

use eventmesh_state::DeadLetter;
use tokio::time::Instant;

use super::api::Report;
use super::flight::Kind;
use super::ids::Slot;
use super::{Command, Dispatcher, Internal, Timer};
use crate::ingress::now_ms;

impl Dispatcher {
    /// Writes the event at `slot` to the dead-letter store in the
    /// background; the outcome comes back as a `DeadLettered` report.
    pub(super) fn write_dead_letter(&mut self, slot: Slot) {
        let Some(f) = self.flights.get(&slot) else {
            return;
        };
        let Some(reason) = f.dead_reason() else {
            return;
        };
        let dl = DeadLetter::new(
            self.topic.to_string(),
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

    pub(super) fn dead_letter_written(
        &mut self,
        slot: Slot,
        result: std::result::Result<(), String>,
    ) {
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
}
