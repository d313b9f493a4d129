//! One event in flight and the state machine of its delivery.
//!
//! ```text
//!            admit                dispatch (pull)            poll takes it
//!   ───────▶ Queued ────────────▶ InMailbox ───────────────▶ HandedOut
//!              ▲   dispatch (push)   │  ▲ dispatch                │
//!              │  ┌──────────────────┼──┴───────────────────┐     │
//!   drain      │  ▼                  │                      │     │
//!   withdraws  Pushing ──failure──▶ BackingOff ◀──nack──────┴─────┘
//!   ◀──────────  │                    timer ─▶ dispatch
//!                │ 2xx       ack (any live state)         last attempt
//!                └────────▶ Retired ◀──── written ── DeadLettering
//! ```
//! Each state carries only its data; each transition is a method. Two
//! guards own what a state lends out and give it back when the state is
//! left, whatever the transition:
//! - [`Holder`]: the member charged with the delivery; its client's load
//!   counts the delivery while a holder exists (every live state has one,
//!   `DeadLettering` and `Retired` have none);
//! - `Lent`: the copy waiting in a mailbox; dropping it withdraws the
//!   copy, so a poll never hands out a delivery that left `InMailbox`.
//!
//! Ids: each hand-out gets a [`Ticket`] (an id generation and a random
//! nonce). A ticket settles the delivery only while it is current: until a
//! nack, an ack timeout, or the delivery going to another member. One
//! exception: a delivery released because its client's stream closed keeps
//! its old ticket as `Prior` until it is handed out again (a poll takes the
//! new copy, or a webhook call starts), so a client that reconnects and
//! acks under the old id still settles it.

use std::sync::Arc;

use eventmesh_core::CloudEvent;
use tokio::time::Instant;
use tracing::Span;

use super::ids::{Slot, Ticket};
use super::router::{Channel, Member};
use super::Settled;
use crate::creator::Creator;
use crate::mailbox::{HandOut, Mailbox};
use crate::push::Webhook;

/// The member a delivery is assigned to; its client's load counts the
/// delivery until this is dropped.
pub(crate) struct Holder(Arc<Member>);

impl Holder {
    pub(crate) fn charge(member: Arc<Member>) -> Self {
        member.load.charge();
        Holder(member)
    }

    pub(crate) fn member(&self) -> &Arc<Member> {
        &self.0
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.0.load.release();
    }
}

/// A copy of the delivery in a mailbox, withdrawn when dropped.
pub(crate) struct Lent(Arc<HandOut>);

impl Drop for Lent {
    fn drop(&mut self) {
        self.0.withdraw();
    }
}

/// A hand-out released with its client's stream: still settles the
/// delivery, on behalf of the member it was handed to.
pub(crate) struct Prior {
    ticket: Ticket,
    member: Arc<Member>,
}

#[derive(Default)]
pub(crate) enum State {
    /// Not with any member: nobody to send to, or the dispatcher drains.
    Queued {
        holder: Holder,
        prior: Option<Prior>,
    },
    /// Waiting in `holder`'s mailbox for a poll.
    InMailbox {
        holder: Holder,
        lent: Lent,
        ticket: Ticket,
        prior: Option<Prior>,
    },
    /// Taken by a poll at `taken` (the mailbox's stamp), from which the
    /// ack timeout runs.
    HandedOut {
        holder: Holder,
        ticket: Ticket,
        taken: Instant,
    },
    /// A webhook call is under way.
    Pushing { holder: Holder, ticket: Ticket },
    /// Waiting for its retry timer; a failed push keeps its ticket (the
    /// retry goes out under the same id, for receivers to deduplicate).
    BackingOff {
        holder: Holder,
        ticket: Option<Ticket>,
    },
    /// Attempts used up: the dead letter is being written.
    DeadLettering { reason: String },
    /// Acknowledged or dead-lettered: about to leave flight.
    #[default]
    Retired,
}

/// The state without its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Queued,
    InMailbox,
    /// With the moment it was taken.
    HandedOut(Instant),
    Pushing,
    BackingOff,
    DeadLettering,
    Retired,
}

/// After a counted failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Attempts remain; the state is unchanged.
    Retry,
    /// That was the last: now `DeadLettering`.
    Exhausted,
}

/// What a dispatch asks the dispatcher to carry out.
pub(crate) enum Outgoing {
    /// Put a copy into the mailbox, under `ticket`.
    Mailbox {
        mailbox: Arc<Mailbox>,
        hand_out: Arc<HandOut>,
        ticket: Ticket,
    },
    /// Call the webhook, under `ticket`.
    Push { hook: Arc<Webhook>, ticket: Ticket },
    /// Kept in flight, sent nowhere.
    Queued,
    /// Not a state that is sent (dead-lettering or retired).
    Nothing,
}

pub(crate) struct Flight {
    pub event: Arc<CloudEvent>,
    /// When the event entered the log (ms since the epoch).
    pub ingest_ms: u64,
    attempts: u32,
    /// Tickets issued so far.
    generation: u32,
    state: State,
}

impl Flight {
    /// An event admitted into flight for `holder`, with the failed attempts
    /// an earlier run spent on it.
    pub(crate) fn new(
        event: Arc<CloudEvent>,
        ingest_ms: u64,
        attempts: u32,
        holder: Holder,
    ) -> Self {
        Flight {
            event,
            ingest_ms,
            attempts,
            generation: 0,
            state: State::Queued {
                holder,
                prior: None,
            },
        }
    }

    pub(crate) fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The `dispatch` span of handing it (at `slot` of `topic`, for the
    /// consumer `group`) to its holder now, over `channel`.
    pub(crate) fn trace(
        &self,
        group: &str,
        topic: &str,
        slot: Slot,
        channel: &'static str,
    ) -> Span {
        let delivery = crate::trace::Delivery {
            topic,
            group,
            partition: slot.partition,
            offset: slot.offset,
            client: self.holder().map_or("", |m| m.client_id.as_str()),
            attempt: self.attempts + 1,
            channel,
        };
        crate::trace::dispatch(&self.event, delivery)
    }

    pub(crate) fn kind(&self) -> Kind {
        match &self.state {
            State::Queued { .. } => Kind::Queued,
            State::InMailbox { .. } => Kind::InMailbox,
            State::HandedOut { taken, .. } => Kind::HandedOut(*taken),
            State::Pushing { .. } => Kind::Pushing,
            State::BackingOff { .. } => Kind::BackingOff,
            State::DeadLettering { .. } => Kind::DeadLettering,
            State::Retired => Kind::Retired,
        }
    }

    /// The member charged with it (none once it is given up on).
    pub(crate) fn holder(&self) -> Option<&Arc<Member>> {
        match &self.state {
            State::Queued { holder, .. }
            | State::InMailbox { holder, .. }
            | State::HandedOut { holder, .. }
            | State::Pushing { holder, .. }
            | State::BackingOff { holder, .. } => Some(holder.member()),
            State::DeadLettering { .. } | State::Retired => None,
        }
    }

    pub(crate) fn dead_reason(&self) -> Option<&str> {
        match &self.state {
            State::DeadLettering { reason } => Some(reason),
            _ => None,
        }
    }

    /// `InMailbox` → `HandedOut` once a poll has taken the copy (the
    /// mailbox stamps it; the dispatcher sees it here). The prior ticket,
    /// if any, stops counting.
    pub(crate) fn observe(&mut self) {
        let Some(taken) = (match &self.state {
            State::InMailbox { lent, .. } => lent.0.taken_at(),
            _ => None,
        }) else {
            return;
        };
        // The copy left the mailbox: nothing is lent any more.
        if let State::InMailbox { holder, ticket, .. } = std::mem::take(&mut self.state) {
            self.state = State::HandedOut {
                holder,
                ticket,
                taken,
            };
        }
    }

    /// In a client's hands: a webhook call under way, or a copy taken by a
    /// poll and not settled.
    pub(crate) fn in_hands(&self) -> bool {
        match &self.state {
            State::HandedOut { .. } | State::Pushing { .. } => true,
            State::InMailbox { lent, .. } => lent.0.taken_at().is_some(),
            _ => false,
        }
    }

    /// A copy of it is with `client` (in its mailbox or taken).
    pub(crate) fn lent_to(&self, client: &str) -> bool {
        match &self.state {
            State::InMailbox { holder, .. } | State::HandedOut { holder, .. } => {
                holder.member().client_id == client
            }
            _ => false,
        }
    }

    /// Whether `ticket` may settle it on behalf of `by` (`None`: anyone):
    /// `Done` when it may, `Foreign` when the ticket is current but was
    /// handed to a member of another creator, else `Unknown`.
    pub(crate) fn authorize(&mut self, ticket: Ticket, by: Option<&Creator>) -> Settled {
        self.observe();
        let to = match &self.state {
            State::InMailbox {
                holder, ticket: t, ..
            }
            | State::HandedOut {
                holder, ticket: t, ..
            }
            | State::Pushing { holder, ticket: t }
            | State::BackingOff {
                holder,
                ticket: Some(t),
            } if *t == ticket => Some(holder.member()),
            State::InMailbox { prior: Some(p), .. } | State::Queued { prior: Some(p), .. }
                if p.ticket == ticket =>
            {
                Some(&p.member)
            }
            _ => None,
        };
        match to {
            None => Settled::Unknown,
            Some(m) if by.is_some_and(|c| *c != m.creator) => Settled::Foreign,
            Some(_) => Settled::Done,
        }
    }

    /// Acknowledged (or the webhook answered 2xx): `Retired`. Any copy in a
    /// mailbox is withdrawn, the holder's load released.
    pub(crate) fn ack(&mut self) {
        self.state = State::Retired;
    }

    /// Counts a failed attempt; the last one turns it to `DeadLettering`.
    pub(crate) fn fail(&mut self, reason: &str, max_attempts: u32) -> Verdict {
        self.attempts += 1;
        if self.attempts < max_attempts {
            return Verdict::Retry;
        }
        self.state = State::DeadLettering {
            reason: reason.to_string(),
        };
        Verdict::Exhausted
    }

    /// Past its `expirytime` before it was delivered: `DeadLettering` with
    /// the reason `expired`, whatever attempts it has left.
    pub(crate) fn expire(&mut self) {
        self.state = State::DeadLettering {
            reason: "expired".to_string(),
        };
    }

    /// After a failure, waits for its retry timer: `BackingOff`. The
    /// current ticket stops counting, except that a failed webhook call
    /// (`keep_push_ticket`) keeps it for the retry.
    pub(crate) fn back_off(&mut self, keep_push_ticket: bool) {
        let (holder, ticket) = match std::mem::take(&mut self.state) {
            State::Queued { holder, .. }
            | State::InMailbox { holder, .. }
            | State::HandedOut { holder, .. } => (holder, None),
            State::Pushing { holder, ticket } => (holder, keep_push_ticket.then_some(ticket)),
            State::BackingOff { holder, ticket } => (holder, ticket),
            other => {
                self.state = other;
                return;
            }
        };
        self.state = State::BackingOff { holder, ticket };
    }

    fn next_ticket(&mut self, nonce: u64) -> Ticket {
        self.generation += 1;
        Ticket {
            generation: self.generation,
            nonce,
        }
    }

    /// Sends it (again) to `to`, or keeps it `Queued` when `None`. A copy
    /// in a mailbox is withdrawn first. Moving to another client charges
    /// that client and releases the previous one. `released`: the holder's
    /// stream closed, so a ticket already taken becomes the prior ticket
    /// (still settles until the next hand-out); otherwise it stops
    /// counting now. `nonce` goes into the new ticket, if one is issued.
    pub(crate) fn dispatch(
        &mut self,
        to: Option<Arc<Member>>,
        released: bool,
        nonce: u64,
    ) -> Outgoing {
        let (holder, prior, kept) = match std::mem::take(&mut self.state) {
            State::Queued { holder, prior } | State::InMailbox { holder, prior, .. } => {
                (holder, prior, None)
            }
            State::HandedOut { holder, ticket, .. } => {
                let prior = released.then(|| Prior {
                    ticket,
                    member: holder.member().clone(),
                });
                (holder, prior, None)
            }
            State::Pushing { holder, .. } => (holder, None, None),
            State::BackingOff { holder, ticket } => (holder, None, ticket),
            other => {
                self.state = other;
                return Outgoing::Nothing;
            }
        };
        let Some(member) = to else {
            self.state = State::Queued { holder, prior };
            return Outgoing::Queued;
        };
        let same = member.client_id == holder.member().client_id
            && Arc::ptr_eq(&member.load, &holder.member().load);
        let holder = if same {
            // The same client, as the group knows it now; still charged once.
            let mut holder = holder;
            holder.0 = member.clone();
            holder
        } else {
            Holder::charge(member.clone())
        };
        match &member.channel {
            Channel::Pull(mailbox) => {
                let ticket = self.next_ticket(nonce);
                let hand_out = Arc::new(HandOut::default());
                self.state = State::InMailbox {
                    holder,
                    lent: Lent(hand_out.clone()),
                    ticket,
                    prior,
                };
                Outgoing::Mailbox {
                    mailbox: mailbox.clone(),
                    hand_out,
                    ticket,
                }
            }
            Channel::Push(hook) => {
                // Handed out again: a prior ticket stops counting.
                let ticket = kept.unwrap_or_else(|| self.next_ticket(nonce));
                self.state = State::Pushing { holder, ticket };
                Outgoing::Push {
                    hook: hook.clone(),
                    ticket,
                }
            }
        }
    }

    /// Drain: a copy still waiting in a mailbox is taken back (`Queued`);
    /// true when one was.
    pub(crate) fn withdraw(&mut self) -> bool {
        self.observe();
        if !matches!(self.state, State::InMailbox { .. }) {
            return false;
        }
        if let State::InMailbox { holder, prior, .. } = std::mem::take(&mut self.state) {
            self.state = State::Queued { holder, prior };
        }
        true
    }

    /// Whether a webhook call under `ticket` is the one under way.
    pub(crate) fn is_pushing(&self, ticket: Ticket) -> bool {
        matches!(&self.state, State::Pushing { ticket: t, .. } if *t == ticket)
    }

    /// The dead letter is written: `Retired`.
    pub(crate) fn dead_lettered(&mut self) {
        if matches!(self.state, State::DeadLettering { .. }) {
            self.state = State::Retired;
        }
    }
}

#[cfg(test)]
#[path = "flight_tests.rs"]
mod tests;
