//! Drain and stop. Draining hands out nothing new, takes back the copies
//! still waiting in mailboxes, and is answered once nothing is in a
//! client's hands, or at its deadline; acks keep working. Stopping
//! flushes, drops what is in flight (withdrawing its mailbox copies and
//! releasing its clients' loads) and answers.
//!
//! Invariants: a drain is answered once; at stop, the pending-deliveries
//! gauge gives back everything this dispatcher still counted (in flight,
//! or retired but not committed yet).

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::cursor::Cursor;
use super::flight::Flight;
use super::{Dispatcher, Phase, Timer};

impl Dispatcher {
    pub(super) fn begin_drain(&mut self, deadline: Instant, done: oneshot::Sender<()>) {
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

    pub(super) fn check_drained(&mut self) {
        let waiting = matches!(self.phase, Phase::Draining { done: Some(_) });
        if waiting && !self.flights.values().any(Flight::in_hands) {
            self.finish_drain();
        }
    }

    pub(super) fn finish_drain(&mut self) {
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

    pub(super) async fn stop(&mut self, done: oneshot::Sender<()>) {
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
        self.close();
        tracing::info!(consumer = %self.consumer, topic = %self.topic, "dispatcher stopped");
        let _ = done.send(());
    }

    /// The loop is done: the state takes no step from here on, and
    /// publishers stop offering it events.
    pub(super) fn close(&mut self) {
        self.stopped = true;
        self.deps.handoffs.remove(&self.topic, self.id);
    }
}
