//! A dispatcher's state as other tasks reach it: the loop (see `run`)
//! holds it while it works and lets go while it waits, and in that time a
//! publisher or a settling client may take a step on it themselves:
//! - a publisher to a topic kept in memory offers each event it appended
//!   (see `crate::handoff`); when the consumer has read everything before
//!   it, the event goes into flight and out to its member from the
//!   publisher's task, without waking the loop to read it back;
//! - on such a topic, a client's settle is applied at once, without a
//!   command and its answer crossing to the loop. (On a topic on disk the
//!   loop takes settles in bursts: draining a backlog, one read after
//!   each burst costs less than letting every settle in between reads.)
//!
//! Either only ever tries the lock: when the loop is at work, the event
//! waits for the loop's own read (the publisher tells the log's watch)
//! and the settle goes as a command. A direct step is the same code the
//! loop runs (`admit_event`, `settle`), under the same lock, so every
//! invariant of the dispatcher holds as it does for the loop's own steps;
//! one that sets a timer earlier than the one the loop waits for wakes it.
//! While the loop waits for room to read into, settles go to it as
//! commands: it takes them in bursts and reads once after each burst.
//!
//! Invariants: an offered event is taken only when it is the next offset
//! the consumer reads in its partition (so nothing is read twice or
//! skipped: the loop's read starts from the cursor the offer moved); a
//! stopped dispatcher takes nothing and settles nothing.

use std::sync::Arc;

use eventmesh_core::CloudEvent;
use tokio::sync::{mpsc, Mutex, MutexGuard, Notify};

use super::fill::Admit;
use super::{Command, DeliveryId, Dispatcher, Phase, Policy, Settle, Settled};
use crate::creator::Creator;

/// A dispatcher's state, shared by its loop and the tasks that take a
/// step on it between the loop's turns.
pub struct Lane {
    pub(super) state: Mutex<Dispatcher>,
    /// Gives the loop a turn (a stored permit when it is not waiting).
    pub(super) wake: Notify,
    pub(super) tx: mpsc::Sender<Command>,
    /// Whether settles are applied through the lane: on topics kept in
    /// memory, whose requests and replies gain from one hand-over less;
    /// elsewhere the loop takes them in bursts (see `try_settle`).
    pub(super) direct: bool,
}

impl Lane {
    /// The dispatcher's commands, for what the lane does not do itself.
    pub fn commands(&self) -> &mpsc::Sender<Command> {
        &self.tx
    }

    /// Sends `command` to the loop; false once the loop has ended.
    pub async fn command(&self, command: Command) -> bool {
        self.tx.send(command).await.is_ok()
    }

    /// Offers an event just appended to a topic kept in memory at
    /// `partition`/`offset`: true when the consumer took it (in flight, or
    /// read past as expired), false when its loop reads it (busy, behind,
    /// filtered, draining, or no member with room).
    pub fn offer(
        &self,
        partition: u32,
        offset: u64,
        ingest_ms: u64,
        event: &Arc<CloudEvent>,
    ) -> bool {
        let Ok(mut me) = self.state.try_lock() else {
            return false;
        };
        let taken = me.take_offered(partition, offset, ingest_ms, event);
        self.done(me);
        taken
    }

    /// Settles a delivery as [`Command::Settle`] would, when the loop is
    /// waiting; `None` when it is at work or waits for room to read into
    /// (send the command).
    pub fn try_settle(
        &self,
        id: &DeliveryId,
        how: Settle,
        by: Option<&Creator>,
        policy: Policy,
    ) -> Option<Settled> {
        if !self.direct {
            return None;
        }
        let mut me = self.state.try_lock().ok()?;
        if me.stopped {
            return Some(Settled::Unknown);
        }
        if me.stalled || me.capped {
            // Reading waits for room: the loop takes settles in bursts
            // and reads once after each, rather than once per settle.
            return None;
        }
        let settled = me.settle(id, how, by, policy);
        me.check_drained();
        self.done(me);
        Some(settled)
    }

    /// Lets go of the state after a direct step, waking the loop when the
    /// step left it something to do.
    fn done(&self, me: MutexGuard<'_, Dispatcher>) {
        let turn = me.needs_turn();
        drop(me);
        if turn {
            self.wake.notify_one();
        }
    }
}

impl Dispatcher {
    fn take_offered(
        &mut self,
        partition: u32,
        offset: u64,
        ingest_ms: u64,
        event: &Arc<CloudEvent>,
    ) -> bool {
        let ready = !self.stopped
            && self.filter.is_none()
            && !self.ttl_due
            && matches!(self.phase, Phase::Running)
            && self.flights.len() < self.deps.settings.delivery.max_inflight
            && self
                .cursors
                .get(&partition)
                .is_some_and(|c| c.next() == offset)
            && self.still_owns(partition);
        ready
            && matches!(
                self.admit_event(partition, offset, ingest_ms, event.clone()),
                Admit::Admitted | Admit::Expired
            )
    }

    /// Whether the loop, waiting, has something to do after a step taken
    /// without it: a timer due before the one it sleeps until. (A step
    /// that frees room to read into is not taken without it, see
    /// [`Lane::try_settle`].)
    fn needs_turn(&self) -> bool {
        match (self.sleeping_until, self.timers.next()) {
            (Some(until), Some(next)) => next < until,
            _ => false,
        }
    }
}
