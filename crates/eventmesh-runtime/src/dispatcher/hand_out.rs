//! Handing an event to its member, where the router says: a copy in a
//! pulling client's mailbox, under its ack timer (which runs once a poll
//! takes the copy), or a webhook call in the background whose outcome
//! comes back as a `Pushed` report (in batch mode, through the member's
//! batcher, see `batch`); and sending deliveries elsewhere when
//! a closed stream releases a client's deliveries or the members change.
//!
//! Invariants: while draining, or for a partition no longer owned, nothing
//! is handed out (the event stays queued); every hand-out is told to the
//! observer; released and orphaned deliveries go out again in log order; a
//! released delivery its client had taken counts as a failed attempt, one
//! still waiting in its mailbox or whose member left does not.

use std::sync::Arc;

use bytes::Bytes;
use tokio::time::Instant;

use super::api::Report;
use super::batch::{Batcher, Item};
use super::flight::{Kind, Outgoing};
use super::ids::{format_delivery_id, Slot};
use super::{Command, Dispatcher, Internal, Membership, Next, Phase, Selection, Timer};
use crate::mailbox::MailItem;
use crate::push::{self, Webhook};
use crate::trace;

impl Dispatcher {
    /// Sends the event at `slot` to where the router says (see
    /// [`Router::destination`](super::router::Router::destination)), or
    /// keeps it queued while draining.
    pub(super) fn dispatch(&mut self, slot: Slot, released: bool) {
        // A partition this instance may no longer own is not handed out
        // (kept queued until the handover restarts the dispatcher).
        let draining =
            matches!(self.phase, Phase::Draining { .. }) || !self.still_owns(slot.partition);
        let Some(f) = self.flights.get_mut(&slot) else {
            return;
        };
        let to = match f.holder() {
            Some(h) if !draining => {
                self.router
                    .destination(&f.event, slot.partition, &h.client_id, released)
            }
            _ => None,
        };
        let nonce = self.nonces.next();
        let expiry = super::expiry_of(&f.event, f.ingest_ms, self.ttl_ms);
        let check = super::mailbox_check(self.deps.settings.delivery.ack_timeout, expiry);
        match f.dispatch(to, released, nonce) {
            Outgoing::Mailbox {
                mailbox,
                hand_out,
                ticket,
            } => {
                let _span = f.trace(&self.consumer, &self.topic, slot, "mailbox");
                // Sized for the data: growing the buffer past it would copy
                // the whole event again.
                let json = f.event.to_json();
                mailbox.push(MailItem {
                    delivery_id: format_delivery_id(&self.deps.boot, self.id, slot, ticket),
                    event_json: Bytes::from(json),
                    topic: self.topic.clone(),
                    hand_out,
                    expires_at_ms: expiry,
                });
                if let Some(m) = f.holder() {
                    self.deps.observer.handed(&f.event, &m.client_id);
                }
                self.timers.set(Timer::Flight(slot), check);
            }
            Outgoing::Push { hook, ticket } => {
                self.timers.cancel(Timer::Flight(slot));
                if let Some(m) = f.holder() {
                    self.deps.observer.handed(&f.event, &m.client_id);
                }
                let id = format_delivery_id(&self.deps.boot, self.id, slot, ticket);
                if hook.batches() {
                    let client = f.holder().map(|m| m.client_id.clone()).unwrap_or_default();
                    let item = Item {
                        slot,
                        ticket,
                        delivery_id: id,
                        event: f.event.clone(),
                    };
                    self.batch(client, hook, item);
                    return;
                }
                let (event, deps, tx) = (f.event.clone(), self.deps.clone(), self.tx.clone());
                let span = f.trace(&self.consumer, &self.topic, slot, "webhook");
                tokio::spawn(trace::within(span, async move {
                    let result = tokio::select! {
                        r = push::push(deps.pusher(), &hook, &id, &event) => r,
                        // The dispatcher is gone (a push waiting for its
                        // origin's permission stops waiting).
                        () = tx.closed() => return,
                    };
                    let report = Report::Pushed {
                        slot,
                        ticket,
                        result,
                    };
                    let _ = tx.send(Command::Internal(Internal(report))).await;
                }));
            }
            Outgoing::Queued | Outgoing::Nothing => self.timers.cancel(Timer::Flight(slot)),
        }
    }

    /// Queues a delivery at the batcher of `client`'s webhook, starting
    /// one (or a new one, when the webhook changed).
    fn batch(&mut self, client: String, hook: Arc<Webhook>, item: Item) {
        let fresh = || Batcher::start(hook.clone(), self.deps.clone(), self.tx.clone());
        let batcher = match self.batchers.get(&client) {
            Some(b) if b.serves(&hook) => b,
            _ => {
                let b = fresh();
                self.batchers.insert(client.clone(), b);
                &self.batchers[&client]
            }
        };
        if let Err(item) = batcher.send(item) {
            // Ended (cannot happen while the dispatcher runs): start anew.
            let b = fresh();
            let _ = b.send(item);
            self.batchers.insert(client, b);
        }
    }

    pub(super) fn release(&mut self, client: &str, before: Instant, waiting: bool) {
        let mut slots: Vec<Slot> = self
            .flights
            .iter_mut()
            .filter_map(|(slot, f)| {
                f.observe();
                let due = match f.kind() {
                    Kind::HandedOut(taken) => taken <= before,
                    _ => waiting,
                };
                (due && f.lent_to(client)).then_some(*slot)
            })
            .collect();
        if slots.is_empty() {
            return;
        }
        // In log order, so that the member taking them over reads them so.
        slots.sort_unstable();
        tracing::debug!(consumer = %self.consumer, client, deliveries = slots.len(), "releasing the deliveries of a closed stream");
        let released = Next::Redeliver { released: true };
        for slot in slots {
            let taken = matches!(self.flights[&slot].kind(), Kind::HandedOut(_));
            if taken {
                self.failed(slot, "connection lost", released);
            } else {
                self.redeliver(slot, true);
            }
        }
    }

    pub(super) fn set_members(&mut self, membership: Membership) {
        let old = self.filter.take();
        self.filter = Selection::renewed(
            old,
            &self.deps,
            &self.consumer,
            &self.topic,
            membership.filter,
        );
        self.router.set(membership.members);
        // A member that left takes its batcher along (it ends once it has
        // sent what it holds).
        let router = &self.router;
        self.batchers
            .retain(|client, _| router.get(client).is_some());
        self.read_due = true;
        let mut orphaned: Vec<Slot> = self
            .flights
            .iter()
            .filter(|(_, f)| {
                f.holder()
                    .is_some_and(|h| self.router.get(&h.client_id).is_none())
            })
            .map(|(slot, _)| *slot)
            .collect();
        orphaned.sort_unstable();
        for slot in orphaned {
            self.redeliver(slot, false);
        }
    }
}
