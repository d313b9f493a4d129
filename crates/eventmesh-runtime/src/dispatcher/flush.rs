//! Flushing: the in-flight ledger's buffered changes and the moved
//! watermarks, written beside the dispatch loop.
//!
//! A flush waits for an fsync or two, milliseconds during which deliveries
//! would otherwise stall, so it runs as its own task, one at a time; the
//! loop takes in its outcome. Invariants: the ledger is written before the
//! offsets in one flush; a failed ledger write gives its work back to the
//! buffer, a failed offset write leaves the watermark to be written by the
//! next flush (and the deliveries it covers pending); at stop, whatever is
//! left is written before the dispatcher answers.

use eventmesh_state::LedgerEntry;

use super::ledger::Batch;
use super::Dispatcher;
use crate::ingress::now_ms;

/// What a flush wrote, and how it went.
pub(super) struct Flushed {
    batch: Batch,
    ledger: std::result::Result<(), String>,
    /// The watermarks it committed.
    moved: Vec<(u32, u64)>,
    offsets: std::result::Result<(), String>,
}

impl Dispatcher {
    /// Starts writing the ledger changes and the moved watermarks, unless a
    /// flush is under way already (the next tick takes what it missed).
    pub(super) fn start_flush(&mut self) {
        if self.flushing.is_some() {
            return;
        }
        let moved: Vec<(u32, u64)> = self
            .partitions
            .iter()
            .filter_map(|p| Some((*p, self.cursors.get(p)?.advanced()?)))
            .collect();
        if moved.is_empty() && self.ledger.is_clean() {
            return;
        }
        let batch = self.ledger.take();
        let sent_ms = now_ms();
        let entries: Vec<LedgerEntry> = batch
            .puts
            .iter()
            .filter_map(|slot| {
                let f = self.flights.get(slot)?;
                Some(LedgerEntry {
                    consumer: self.consumer.clone(),
                    topic: self.topic.to_string(),
                    partition: slot.partition,
                    offset: slot.offset,
                    member: f.holder().map(|m| m.client_id.clone()).unwrap_or_default(),
                    attempts: f.attempts(),
                    sent_ms,
                })
            })
            .collect();
        let deletes: Vec<(u32, u64)> = batch
            .deletes
            .iter()
            .map(|s| (s.partition, s.offset))
            .collect();
        let (deps, consumer, topic) =
            (self.deps.clone(), self.consumer.clone(), self.topic.clone());
        self.flushing = Some(tokio::spawn(async move {
            let ledger = if entries.is_empty() && deletes.is_empty() {
                Ok(())
            } else {
                async {
                    deps.ledger.put_batch(&entries).await?;
                    deps.ledger
                        .remove_batch(&consumer, &topic, &deletes)
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
                batch,
                ledger,
                moved,
                offsets,
            }
        }));
    }

    /// Takes in the outcome of a flush task.
    pub(super) fn flushed(&mut self, done: std::result::Result<Flushed, tokio::task::JoinError>) {
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
                let flights = &self.flights;
                self.ledger
                    .failed(done.batch, |slot| flights.contains_key(&slot));
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
                    if let Some(c) = self.cursors.get_mut(p) {
                        finished += c.commit(*w);
                    }
                }
                self.deps.metrics.pending_deliveries.dec_by(finished as i64);
                let r = self.faults.offsets.succeeded();
                self.report(r, "offset commit", "");
            }
            Err(e) => {
                // The next flush tries again.
                self.deps.metrics.offset_write_failures.inc();
                let r = self.faults.offsets.failed();
                self.report(r, "offset commit (kept; the deliveries stay pending)", &e);
            }
        }
    }

    /// Waits for a flush under way, then flushes what is left, and returns
    /// once it is written (shutdown and stop).
    pub(super) async fn flush(&mut self) {
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
