//! Per-client mailboxes for pulled deliveries (long poll and streams).
//!
//! A dispatcher puts a delivery into its member's mailbox; a poll takes up to
//! `max` of them, stamping each with the moment it was handed out (tokio's
//! clock, the one every dispatcher timer runs on), from which the
//! dispatcher's ack timeout counts. Invariants: an item is handed out at
//! most once, and its stamp, once set, never changes; an item withdrawn
//! before it was handed out (settled, given up on, or sent elsewhere) is
//! skipped by polls and never stamped; so is an item past its expiry.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Shared between a dispatcher's in-flight entry and the mailbox item.
#[derive(Debug, Default)]
pub struct HandOut {
    /// When a poll returned it; unset while it waits in the mailbox.
    taken: OnceLock<Instant>,
    /// Set when the dispatcher withdraws it.
    withdrawn: AtomicBool,
}

impl HandOut {
    /// When a poll handed it out, if one did.
    pub fn taken_at(&self) -> Option<Instant> {
        self.taken.get().copied()
    }

    /// The dispatcher no longer offers it: a poll skips it.
    pub fn withdraw(&self) {
        self.withdrawn.store(true, Ordering::Release);
    }

    pub fn is_withdrawn(&self) -> bool {
        self.withdrawn.load(Ordering::Acquire)
    }
}

pub struct MailItem {
    pub delivery_id: String,
    /// The event in structured JSON.
    pub event_json: Bytes,
    pub hand_out: Arc<HandOut>,
    /// When the event expires (ms since the epoch): a poll after it skips
    /// the item, never stamping it, and the dispatcher retires it.
    pub expires_at_ms: Option<u64>,
}

#[derive(Default)]
pub struct Mailbox {
    queue: Mutex<VecDeque<MailItem>>,
    notify: Notify,
    /// Set at shutdown: polls return at once.
    closed: AtomicBool,
    /// Streams (SSE, WebSocket, TCP) reading this mailbox now.
    streams: AtomicUsize,
    /// The client has read through a stream: it is offline while none is open.
    streamed: AtomicBool,
}

impl Mailbox {
    pub fn push(&self, item: MailItem) {
        self.queue.lock().expect("mailbox lock").push_back(item);
        self.notify.notify_one();
    }

    fn take(&self, max: usize) -> Vec<MailItem> {
        let now = Instant::now();
        let wall = eventmesh_core::time::now_ms();
        let mut q = self.queue.lock().expect("mailbox lock");
        let mut out = Vec::new();
        while out.len() < max {
            let Some(item) = q.pop_front() else { break };
            if item.hand_out.is_withdrawn() || item.expires_at_ms.is_some_and(|t| t <= wall) {
                continue;
            }
            // Pushed once and popped once: never stamped before.
            let _ = item.hand_out.taken.set(now);
            out.push(item);
        }
        if !q.is_empty() {
            // Leave a wake-up for the next poller.
            self.notify.notify_one();
        }
        out
    }

    /// A stream starts reading this mailbox.
    pub fn attach(&self) {
        self.streamed.store(true, Ordering::Release);
        self.streams.fetch_add(1, Ordering::AcqRel);
    }

    /// A stream stopped; true when it was the last one.
    pub fn detach(&self) -> bool {
        self.streams.fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// A streaming client with no stream open: new deliveries should go to
    /// other members while it is away.
    pub fn is_offline(&self) -> bool {
        self.streamed.load(Ordering::Acquire) && self.streams.load(Ordering::Acquire) == 0
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Ends every waiting poll and makes later ones return at once.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Takes up to `max` deliveries, waiting up to `timeout` for the first.
    pub async fn poll(&self, max: usize, timeout: Duration) -> Vec<MailItem> {
        let deadline = Instant::now() + timeout;
        loop {
            // Registered before the checks, so a close or push in between
            // still wakes this poll.
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.closed.load(Ordering::Acquire) {
                return Vec::new();
            }
            let got = self.take(max);
            if !got.is_empty() {
                return got;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.take(max);
            }
        }
    }

    /// Deliveries waiting to be polled.
    pub fn len(&self) -> usize {
        self.queue.lock().expect("mailbox lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str) -> (MailItem, Arc<HandOut>) {
        let h = Arc::new(HandOut::default());
        (
            MailItem {
                delivery_id: id.into(),
                event_json: Bytes::from_static(b"{}"),
                hand_out: h.clone(),
                expires_at_ms: None,
            },
            h,
        )
    }

    #[tokio::test(start_paused = true)]
    async fn poll_takes_in_order_and_stamps_tokio_time() {
        let m = Mailbox::default();
        let (a, ha) = item("a");
        let (b, hb) = item("b");
        let (c, hc) = item("c");
        m.push(a);
        m.push(b);
        m.push(c);
        hb.withdraw();
        tokio::time::advance(Duration::from_secs(7)).await;
        let at = Instant::now();
        let got = m.poll(2, Duration::from_millis(10)).await;
        let ids: Vec<_> = got.iter().map(|i| i.delivery_id.as_str()).collect();
        assert_eq!(ids, ["a", "c"]);
        assert_eq!(ha.taken_at(), Some(at));
        assert_eq!(hc.taken_at(), Some(at));
        assert_eq!(hb.taken_at(), None, "a withdrawn item is never stamped");
        assert!(m.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn poll_waits_for_a_push() {
        let m = Arc::new(Mailbox::default());
        let m2 = m.clone();
        let start = Instant::now();
        let waiter = tokio::spawn(async move { m2.poll(10, Duration::from_secs(10)).await });
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (x, hx) = item("x");
        m.push(x);
        let got = waiter.await.unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(hx.taken_at(), Some(start + Duration::from_secs(3)));
    }

    #[tokio::test(start_paused = true)]
    async fn close_ends_a_waiting_poll_and_later_ones() {
        let m = Arc::new(Mailbox::default());
        let m2 = m.clone();
        let start = Instant::now();
        let waiter = tokio::spawn(async move { m2.poll(10, Duration::from_secs(60)).await });
        tokio::time::sleep(Duration::from_secs(1)).await;
        m.close();
        let got = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the poll returned after close")
            .unwrap();
        assert!(got.is_empty());
        assert_eq!(Instant::now(), start + Duration::from_secs(1));
        m.push(item("late").0);
        assert!(m.poll(10, Duration::from_secs(60)).await.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn empty_poll_times_out() {
        let m = Mailbox::default();
        let start = Instant::now();
        assert!(m.poll(10, Duration::from_millis(5)).await.is_empty());
        assert_eq!(Instant::now(), start + Duration::from_millis(5));
    }
}
