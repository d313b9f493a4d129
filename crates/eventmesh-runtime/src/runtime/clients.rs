//! Clients: their pull mailboxes, their shared in-flight counts, who
//! created them, and the streams (SSE, WebSocket, TCP) and polls that read
//! the mailboxes.
//!
//! Invariants:
//! - A pulling client has exactly one mailbox while it has a pull
//!   subscription; every dispatcher serving it puts into that mailbox, and
//!   every transport reads it, so acks, caps and the ack timeout are the
//!   same whatever the transport.
//! - A client id belongs to the creator (tenant and principal) of its first
//!   subscription for as long as it has one; later subscriptions never
//!   change it (see `subscriptions.rs`).
//! - While a [`StreamGuard`] lives the client is online; when its last
//!   stream closes, its unacknowledged deliveries are released at once.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;

use super::Runtime;
use crate::creator::Creator;
use crate::dispatcher::{ClientLoad, Command};
use crate::error::{Result, RuntimeError};
use crate::mailbox::Mailbox;

/// Most deliveries one poll returns.
pub const MAX_POLL: usize = 1000;
/// Longest a poll may wait.
pub const MAX_POLL_WAIT: Duration = Duration::from_secs(60);

/// One delivery returned by a poll or a stream.
#[derive(Debug, Clone)]
pub struct PolledDelivery {
    pub delivery_id: String,
    /// The event in structured JSON.
    pub event_json: Bytes,
    /// The topic the event was read from.
    pub topic: Arc<str>,
}

/// Mailboxes and in-flight counts by client id.
#[derive(Default)]
pub(super) struct Clients {
    mailboxes: RwLock<HashMap<String, Arc<Mailbox>>>,
    loads: RwLock<HashMap<String, Arc<ClientLoad>>>,
}

impl Clients {
    /// The shared in-flight count of a client (created on first use).
    pub(super) fn load(&self, client: &str) -> Arc<ClientLoad> {
        if let Some(l) = self.loads.read().expect("loads lock").get(client) {
            return l.clone();
        }
        self.loads
            .write()
            .expect("loads lock")
            .entry(client.to_string())
            .or_default()
            .clone()
    }

    /// Every pulling client's mailbox.
    pub(super) fn pull_mailboxes(&self) -> Vec<(String, Arc<Mailbox>)> {
        self.mailboxes
            .read()
            .expect("mailboxes lock")
            .iter()
            .map(|(c, m)| (c.clone(), m.clone()))
            .collect()
    }

    pub(super) fn inflight(&self, client: &str) -> usize {
        self.loads
            .read()
            .expect("loads lock")
            .get(client)
            .map_or(0, |l| l.inflight())
    }

    pub(super) fn mailbox(&self, client: &str, create: bool) -> Option<Arc<Mailbox>> {
        if let Some(m) = self.mailboxes.read().expect("mailboxes lock").get(client) {
            return Some(m.clone());
        }
        if !create {
            return None;
        }
        Some(
            self.mailboxes
                .write()
                .expect("mailboxes lock")
                .entry(client.to_string())
                .or_default()
                .clone(),
        )
    }

    /// Forgets the mailboxes of clients that pull nothing any more and the
    /// counts of clients with no subscription.
    pub(super) fn retain(&self, pulling: &HashSet<&str>, subscribed: &HashSet<&str>) {
        self.mailboxes
            .write()
            .expect("mailboxes lock")
            .retain(|c, _| pulling.contains(c.as_str()));
        self.loads
            .write()
            .expect("loads lock")
            .retain(|c, _| subscribed.contains(c.as_str()));
    }

    /// Ends every waiting poll and stream (shutdown).
    pub(super) fn close_all(&self) {
        for m in self.mailboxes.read().expect("mailboxes lock").values() {
            m.close();
        }
    }
}

fn unknown_client(client_id: &str) -> RuntimeError {
    RuntimeError::NotFound {
        code: "unknown_client",
        message: format!("client {client_id:?} has no pull subscription"),
    }
}

fn polled(items: Vec<crate::mailbox::MailItem>) -> Vec<PolledDelivery> {
    items
        .into_iter()
        .map(|i| PolledDelivery {
            delivery_id: i.delivery_id,
            event_json: i.event_json,
            topic: i.topic,
        })
        .collect()
}

impl Runtime {
    /// The creator of a client id: that of its subscriptions; `None` when it
    /// has none.
    pub async fn client_creator(&self, client_id: &str) -> Option<Creator> {
        self.view.lock().await.creator_of(client_id)
    }

    /// Long poll: up to `max` deliveries for a pulling client, waiting up
    /// to `wait` for the first.
    pub async fn poll(
        &self,
        client_id: &str,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<PolledDelivery>> {
        self.lifecycle.check_running()?;
        let mailbox = self
            .clients
            .mailbox(client_id, false)
            .ok_or_else(|| unknown_client(client_id))?;
        // Present while the poll waits, and for the member timeout after.
        let _present = mailbox.present();
        self.bind_home(client_id).await;
        Ok(polled(
            mailbox
                .poll(max.clamp(1, MAX_POLL), wait.min(MAX_POLL_WAIT))
                .await,
        ))
    }

    /// Opens a stream (SSE, WebSocket, TCP) on a pulling client's mailbox.
    /// While the guard lives the client is online; when its last stream
    /// closes, its deliveries are released at once (see
    /// [`Runtime::release`]).
    pub fn attach_stream(self: &Arc<Self>, client_id: &str) -> Result<StreamGuard> {
        self.lifecycle.check_running()?;
        let mailbox = self
            .clients
            .mailbox(client_id, false)
            .ok_or_else(|| unknown_client(client_id))?;
        mailbox.attach();
        if self.cluster.is_some() {
            let (rt, client) = (self.clone(), client_id.to_string());
            tokio::spawn(async move { rt.bind_home(&client).await });
        }
        Ok(StreamGuard {
            runtime: Arc::downgrade(self),
            client: client_id.to_string(),
            mailbox,
        })
    }

    /// Sends out again at once (to another online member of its group when
    /// there is one) what a client took by `before` and has not
    /// acknowledged, and with `waiting` what still waits in its mailbox:
    /// its last stream closed (everything, up to the close), or it resumed
    /// on a new stream opened at `before` (what the old stream took; the
    /// new one reads the mailbox itself).
    pub async fn release(&self, client_id: &str, before: tokio::time::Instant, waiting: bool) {
        self.registry
            .broadcast(|| Command::Release {
                client: client_id.to_string(),
                before,
                waiting,
            })
            .await;
    }
}

/// Keeps a streaming client online; see [`Runtime::attach_stream`].
pub struct StreamGuard {
    runtime: std::sync::Weak<Runtime>,
    client: String,
    mailbox: Arc<Mailbox>,
}

impl StreamGuard {
    /// Up to `max` deliveries, waiting up to `wait` for the first; empty
    /// when nothing came or the runtime is closing (see
    /// [`StreamGuard::is_closed`]).
    pub async fn next(&self, max: usize, wait: Duration) -> Vec<PolledDelivery> {
        polled(self.mailbox.poll(max.clamp(1, MAX_POLL), wait).await)
    }

    /// Up to `max` deliveries, waiting for the first as long as it takes;
    /// empty only when the runtime is closing.
    pub async fn wait(&self, max: usize) -> Vec<PolledDelivery> {
        polled(self.mailbox.wait(max.clamp(1, MAX_POLL)).await)
    }

    /// The runtime is shutting down: the stream should end.
    pub fn is_closed(&self) -> bool {
        self.mailbox.is_closed()
    }

    pub fn client_id(&self) -> &str {
        &self.client
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if !self.mailbox.detach() {
            return;
        }
        let (Some(rt), Ok(handle)) = (
            self.runtime.upgrade(),
            tokio::runtime::Handle::try_current(),
        ) else {
            return;
        };
        let client = std::mem::take(&mut self.client);
        let closed = tokio::time::Instant::now();
        handle.spawn(async move { rt.release(&client, closed, true).await });
    }
}
