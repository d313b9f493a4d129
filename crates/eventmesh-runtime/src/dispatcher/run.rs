//! The dispatch loop: the one task that owns a dispatcher's state. Each
//! turn reads the log into flight (see `fill`), then waits for whichever
//! comes first: a command (and the ones queued behind it, up to a burst),
//! an append to the log (for a filtered consumer: the sieve reading a
//! match for it), a timer coming due, the flush interval, a flush
//! finishing, or, while every member is at its cap, the time to look for
//! room again. Also here: what each command and each timer leads to, and
//! how repeating faults are logged.
//!
//! Invariants: only this task touches the state (webhook calls and
//! dead-letter writes report back as an [`Internal`] command, a flush as
//! its task's outcome), so nothing is locked; `Stop` is answered only
//! once everything is flushed.

use std::time::Duration;

use eventmesh_core::throttle::Report as FaultReport;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::api::Report;
use super::flight::Kind;
use super::{Command, Dispatcher, Internal, Next, Timer};

/// Commands handled in one wake-up before reading again.
const COMMAND_BURST: usize = 1024;
/// While every member is at its cap, how often to look for room again.
const CAP_RECHECK: Duration = Duration::from_millis(20);

impl Dispatcher {
    pub(super) async fn run(mut self) {
        let mut flush = tokio::time::interval(self.deps.settings.delivery.flush_interval);
        flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut log_open = true;
        loop {
            let more = if self.filter.is_none() || std::mem::take(&mut self.read_due) {
                self.fill().await
            } else {
                false
            };
            // A filtered consumer wakes when the sieve read something for
            // it, not at every append.
            let sifted = self.filter.as_ref().map(|s| s.sieve.waker());
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
                changed = self.watch.changed(), if log_open && sifted.is_none() => {
                    log_open = changed.is_ok();
                }
                () = async { sifted.as_ref().expect("checked").notified().await }, if sifted.is_some() => {
                    self.read_due = true;
                }
                _ = tokio::time::sleep_until(next_timer) => self.fire_timers(),
                _ = flush.tick() => {
                    // A filtered consumer reads past what it skipped; the
                    // topic's time to live is read again.
                    self.read_due = true;
                    self.ttl_due = true;
                    self.start_flush();
                }
                done = async { self.flushing.as_mut().expect("checked").await }, if self.flushing.is_some() => {
                    self.flushing = None;
                    self.flushed(done);
                }
                // Room at a capped client may come from another dispatcher.
                _ = tokio::time::sleep(CAP_RECHECK), if self.capped => self.read_due = true,
                // More to read now: read on, after whatever else is ready
                // (tokio picks among ready branches at random, so commands
                // and timers still get their turn).
                () = std::future::ready(()), if more => self.read_due = true,
            }
            self.read_due |= self.stalled;
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
            Command::Members(membership) => self.set_members(membership),
            Command::Release {
                client,
                before,
                waiting,
            } => self.release(&client, before, waiting),
            Command::Drain { deadline, done } => self.begin_drain(deadline, done),
            Command::Stop(done) => return Some(done),
            Command::Extend(added) => self.extend(added),
            Command::Held(reply) => {
                let _ = reply.send(self.flights.values().filter(|f| f.in_hands()).count());
            }
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
                // Still waiting in the mailbox: the ack clock has not
                // started; past its expiry it is taken back for good.
                Kind::InMailbox => {
                    let expiry = super::expiry_of(&f.event, f.ingest_ms, self.ttl_ms);
                    if super::is_past(expiry) {
                        self.expired_in_mailbox(slot);
                    } else {
                        self.timers
                            .set(timer, super::mailbox_check(timeout, expiry));
                    }
                }
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

    /// Logs a failure or recovery that
    /// [`FailureLog`](eventmesh_core::throttle::FailureLog) let through.
    pub(super) fn report(&self, r: FaultReport, what: &str, error: &str) {
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
