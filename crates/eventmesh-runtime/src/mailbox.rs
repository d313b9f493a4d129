//! Per-client mailboxes for pulled deliveries (long poll and streams).
//!
//! A dispatcher puts a delivery into its member's mailbox; a poll takes up to
//! `max` of them, stamping each with the moment it was handed out (tokio's
//! clock, the one every dispatcher timer runs on), from which the
//! dispatcher's ack timeout counts. Invariants: an item is handed out at
//! most once, and its stamp, once set, never changes; an item withdrawn
//! before it was handed out (settled, given up on, or sent elsewhere) is
//! skipped by polls and never stamped; so is an item past its expiry.
//!
//! A mailbox also says whether its client is there: a poll of its own
//! waiting, a stream open, or one of them within the member timeout. The
//! runtime takes a client away that long out of its groups' rotation
//! (`Mailbox::set_idle`); its next poll or stream puts it back.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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
    /// The topic the event was read from (a pattern subscription's
    /// deliveries come from many).
    pub topic: Arc<str>,
    pub hand_out: Arc<HandOut>,
    /// When the event expires (ms since the epoch): a poll after it skips
    /// the item, never stamping it, and the dispatcher retires it.
    pub expires_at_ms: Option<u64>,
}

pub struct Mailbox {
    queue: Mutex<VecDeque<MailItem>>,
    notify: Notify,
    /// Set at shutdown: polls return at once.
    closed: AtomicBool,
    /// Streams (SSE, WebSocket, TCP) reading this mailbox now.
    streams: AtomicUsize,
    /// The client has read through a stream: it is offline while none is open.
    streamed: AtomicBool,
    /// Polls of the client's own (not a forwarder's) waiting on it now.
    polls: AtomicUsize,
    /// When the client was last seen: a poll of its ended, a stream of its
    /// opened or closed (at first, when the mailbox was made).
    seen: Mutex<Instant>,
    /// Since when (ms since the epoch) the client is out of its groups'
    /// rotation for having been away past the member timeout; 0 while not.
    idle_since_ms: AtomicU64,
}

impl Default for Mailbox {
    fn default() -> Self {
        Mailbox {
            queue: Mutex::default(),
            notify: Notify::new(),
            closed: AtomicBool::new(false),
            streams: AtomicUsize::new(0),
            streamed: AtomicBool::new(false),
            polls: AtomicUsize::new(0),
            seen: Mutex::new(Instant::now()),
            idle_since_ms: AtomicU64::new(0),
        }
    }
}

/// A poll of the client's own under way: the client counts as present
/// until it ends, and from then on the member timeout counts.
pub struct Presence<'a>(&'a Mailbox);

impl Drop for Presence<'_> {
    fn drop(&mut self) {
        self.0.polls.fetch_sub(1, Ordering::AcqRel);
        self.0.saw();
    }
}

impl Mailbox {
    /// The client polls: present (back in rotation) until the guard goes.
    pub fn present(&self) -> Presence<'_> {
        self.polls.fetch_add(1, Ordering::AcqRel);
        self.saw();
        Presence(self)
    }

    /// The client was seen now: it is back in its groups' rotation.
    fn saw(&self) {
        *self.seen.lock().expect("seen lock") = Instant::now();
        self.idle_since_ms.store(0, Ordering::Release);
    }

    /// Whether the client has been away `timeout` by `now`: no stream
    /// open, no poll waiting, none ended within it.
    pub fn away_for(&self, timeout: Duration, now: Instant) -> bool {
        self.streams.load(Ordering::Acquire) == 0
            && self.polls.load(Ordering::Acquire) == 0
            && now.saturating_duration_since(*self.seen.lock().expect("seen lock")) >= timeout
    }

    /// Takes the client out of its groups' rotation (it was away too
    /// long); false when it was out already.
    pub fn set_idle(&self, since_ms: u64) -> bool {
        self.idle_since_ms
            .compare_exchange(0, since_ms.max(1), Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Puts it back in rotation without its having polled (its home
    /// instance says it is there).
    pub fn set_present(&self) {
        self.idle_since_ms.store(0, Ordering::Release);
    }

    /// Since when it is out of rotation (ms since the epoch), if it is.
    pub fn idle_since(&self) -> Option<u64> {
        match self.idle_since_ms.load(Ordering::Acquire) {
            0 => None,
            ms => Some(ms),
        }
    }

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
        self.saw();
    }

    /// A stream stopped; true when it was the last one.
    pub fn detach(&self) -> bool {
        self.saw();
        self.streams.fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// New deliveries should go to other members while this is so: a
    /// streaming client with no stream open, or a client out of rotation
    /// for having been away past the member timeout.
    pub fn is_offline(&self) -> bool {
        (self.streamed.load(Ordering::Acquire) && self.streams.load(Ordering::Acquire) == 0)
            || self.idle_since().is_some()
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
        self.poll_until(max, Some(Instant::now() + timeout)).await
    }

    /// Takes up to `max` deliveries, waiting for the first however long it
    /// takes; none only once the mailbox is closed. A waiter that has its
    /// own timers saves one per wait this way.
    pub async fn wait(&self, max: usize) -> Vec<MailItem> {
        self.poll_until(max, None).await
    }

    async fn poll_until(&self, max: usize, deadline: Option<Instant>) -> Vec<MailItem> {
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
            match deadline {
                Some(deadline) => {
                    if tokio::time::timeout_at(deadline, notified).await.is_err() {
                        return self.take(max);
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Deliveries waiting to be polled: not those withdrawn since they
    /// were put here (sent to another member, settled, given up on), which
    /// stay in the queue until a poll passes them.
    pub fn len(&self) -> usize {
        self.queue
            .lock()
            .expect("mailbox lock")
            .iter()
            .filter(|i| !i.hand_out.is_withdrawn())
            .count()
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
                topic: Arc::from("t"),
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
        assert_eq!(m.len(), 2, "a withdrawn item is not counted");
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

    /// What a spawned poll or wait returned, within 5 s.
    async fn joined(waiter: tokio::task::JoinHandle<Vec<MailItem>>, what: &str) -> Vec<MailItem> {
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect(what)
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn close_ends_a_waiting_poll_and_later_ones() {
        let m = Arc::new(Mailbox::default());
        let m2 = m.clone();
        let start = Instant::now();
        let waiter = tokio::spawn(async move { m2.poll(10, Duration::from_secs(60)).await });
        tokio::time::sleep(Duration::from_secs(1)).await;
        m.close();
        let got = joined(waiter, "the poll returned after close").await;
        assert!(got.is_empty());
        assert_eq!(Instant::now(), start + Duration::from_secs(1));
        m.push(item("late").0);
        assert!(m.poll(10, Duration::from_secs(60)).await.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_has_no_deadline_and_ends_at_a_push_or_a_close() {
        let m = Arc::new(Mailbox::default());
        let m2 = m.clone();
        let start = Instant::now();
        let waiter = tokio::spawn(async move { m2.wait(10).await });
        tokio::time::sleep(Duration::from_secs(3600)).await;
        m.push(item("a").0);
        let got = joined(waiter, "the wait returned after the push").await;
        assert_eq!(
            got.iter()
                .map(|i| i.delivery_id.as_str())
                .collect::<Vec<_>>(),
            ["a"]
        );
        assert_eq!(Instant::now(), start + Duration::from_secs(3600));
        let m2 = m.clone();
        let waiter = tokio::spawn(async move { m2.wait(10).await });
        tokio::time::sleep(Duration::from_secs(1)).await;
        m.close();
        let got = joined(waiter, "the wait returned after close").await;
        assert!(got.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn empty_poll_times_out() {
        let m = Mailbox::default();
        let start = Instant::now();
        assert!(m.poll(10, Duration::from_millis(5)).await.is_empty());
        assert_eq!(Instant::now(), start + Duration::from_millis(5));
    }
}
