//! The dispatch loop: the one task that works a dispatcher's state on its
//! own. Each turn reads the log into flight (see `fill`), then waits for
//! whichever comes first: a command (and the ones queued behind it, up to
//! a burst), an append to the log (for a filtered consumer: the sieve
//! reading a match for it), a timer coming due, the flush interval, a
//! flush finishing, a wake-up from a step taken through the lane (see
//! `lane`), or, while every member is at its cap, the time to look for
//! room again. Also here: what each command and each timer leads to, and
//! how repeating faults are logged.
//!
//! Invariants: the state is touched only under its lock, which the loop
//! holds for a whole turn and lets go only while it waits (so a step
//! through the lane happens between two turns, never inside one); before
//! letting go it notes the time it sleeps until, so that a step setting an
//! earlier timer wakes it; `Stop` is answered only once everything is
//! flushed, and after it the state takes no step.

use std::sync::Arc;
use std::time::Duration;

use eventmesh_core::throttle::Report as FaultReport;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::api::Report;
use super::flight::Kind;
use super::flush::Flushed;
use super::lane::Lane;
use super::{Command, Dispatcher, Internal, Next, Timer};

/// Commands handled in one wake-up before reading again.
const COMMAND_BURST: usize = 1024;
/// While every member is at its cap, how often to look for room again.
const CAP_RECHECK: Duration = Duration::from_millis(20);

/// What ended a wait of the loop.
enum Woke {
    Command(Option<Command>),
    Appended(bool),
    Sifted,
    Timer,
    Tick,
    Flushed(std::result::Result<Flushed, tokio::task::JoinError>),
    /// A step through the lane, room to look for at a capped member, or
    /// more to read at once.
    Turn,
}

/// Runs the loop of the dispatcher in `lane` until it is stopped.
pub(super) async fn run(
    lane: Arc<Lane>,
    mut rx: mpsc::Receiver<Command>,
    mut appended: watch::Receiver<u64>,
) {
    let mut me = lane.state.lock().await;
    let mut flush = tokio::time::interval(me.deps.settings.delivery.flush_interval);
    flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut log_open = true;
    loop {
        let more = if me.filter.is_none() || std::mem::take(&mut me.read_due) {
            me.fill().await
        } else {
            false
        };
        // A filtered consumer wakes when the sieve read something for
        // it, not at every append.
        let sifted = me.filter.as_ref().map(|s| s.sieve.waker());
        let next_timer = me
            .timers
            .next()
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        let capped = me.capped;
        let mut flushing = me.flushing.take();
        me.sleeping_until = Some(next_timer);
        me.flush_pending = flushing.is_some();
        drop(me);
        let woke = tokio::select! {
            cmd = rx.recv() => Woke::Command(cmd),
            changed = appended.changed(), if log_open && sifted.is_none() => Woke::Appended(changed.is_ok()),
            () = async { sifted.as_ref().expect("checked").notified().await }, if sifted.is_some() => Woke::Sifted,
            _ = tokio::time::sleep_until(next_timer) => Woke::Timer,
            _ = flush.tick() => Woke::Tick,
            done = async { flushing.as_mut().expect("checked").await }, if flushing.is_some() => {
                flushing = None;
                Woke::Flushed(done)
            }
            () = lane.wake.notified() => Woke::Turn,
            // Room at a capped client may come from another dispatcher.
            _ = tokio::time::sleep(CAP_RECHECK), if capped => Woke::Turn,
            // More to read now: read on, after whatever else is ready
            // (tokio picks among ready branches at random, so commands
            // and timers still get their turn).
            () = std::future::ready(()), if more => Woke::Turn,
        };
        me = lane.state.lock().await;
        me.sleeping_until = None;
        if flushing.is_some() {
            me.flushing = flushing;
        }
        match woke {
            Woke::Command(None) => break,
            Woke::Command(Some(cmd)) => {
                if let Some(done) = me.handle(cmd) {
                    me.stop(done).await;
                    return;
                }
                for _ in 0..COMMAND_BURST {
                    let Ok(cmd) = rx.try_recv() else { break };
                    if let Some(done) = me.handle(cmd) {
                        me.stop(done).await;
                        return;
                    }
                }
            }
            Woke::Appended(open) => log_open = open,
            Woke::Sifted => me.read_due = true,
            Woke::Timer => me.fire_timers(),
            Woke::Tick => {
                // A filtered consumer reads past what it skipped; the
                // topic's time to live is read again.
                me.read_due = true;
                me.ttl_due = true;
                me.start_flush();
            }
            Woke::Flushed(done) => me.flushed(done),
            Woke::Turn => me.read_due = true,
        }
        me.read_due |= me.stalled;
        me.check_drained();
    }
    me.flush().await;
    me.close();
}

impl Dispatcher {
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
