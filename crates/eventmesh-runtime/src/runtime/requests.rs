//! Request-reply: the table of requests waiting for their reply, keyed by
//! the `correlationid` extension.
//!
//! Invariants:
//! - A request is in the table from just before its event is published
//!   until its call returns (reply, timeout, failed publish or the caller
//!   going away), so a reply can never find a request that stopped waiting.
//! - A reply is bound to its request: the table remembers the request's
//!   topic and the clients its event was handed to (told by the
//!   dispatchers through [`HandOutObserver`]); the runtime accepts a reply
//!   checked against a creator only from the creator of one of those clients.
//! - The hand-out hook costs one atomic load while no request waits (and
//!   the instance is not in a cluster).
//! - In a cluster the instance that hands a request out is often not the
//!   one where it waits: every instance also remembers, for a bounded
//!   time and number, the clients it handed events carrying a correlation
//!   id to ([`Requests::seen`]), so that a reply can be checked wherever
//!   it arrives.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use eventmesh_core::{CloudEvent, ExtValue};
use tokio::sync::oneshot;

use crate::dispatcher::HandOutObserver;

/// The extension that ties a reply to its request.
pub const CORRELATION: &str = "correlationid";

struct Waiting {
    tx: oneshot::Sender<CloudEvent>,
    topic: String,
    /// Clients the request's event was handed to.
    holders: BTreeSet<String>,
}

/// The longest a request waits for its reply.
pub const MAX_REQUEST_WAIT: Duration = Duration::from_secs(300);
/// Bound on the hand-outs remembered for requests waiting elsewhere.
const SEEN_MAX: usize = 65_536;

/// A reply handed over by [`super::Runtime::reply`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replied {
    Done,
    /// Under [`crate::Policy::Permissive`], from a creator none of whose
    /// clients the request was handed to.
    Foreign,
}

/// A request still waiting, as a reply is checked against it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingRequest {
    pub topic: String,
    pub holders: Vec<String>,
    /// The boot id of the instance where it waits; `None` here.
    pub waiting_on: Option<String>,
}

#[derive(Default)]
pub(crate) struct Requests {
    waiting: Mutex<HashMap<String, Waiting>>,
    count: AtomicUsize,
    /// In a cluster: hand-outs of events of requests waiting elsewhere.
    seen: Option<Mutex<Seen>>,
}

/// Clients handed events with a correlation id, oldest first out: kept
/// for [`MAX_REQUEST_WAIT`] and at most [`SEEN_MAX`] ids.
#[derive(Default)]
struct Seen {
    holders: HashMap<String, BTreeSet<String>>,
    order: VecDeque<(Instant, String)>,
}

impl Seen {
    fn record(&mut self, correlation: String, client: &str) {
        let now = Instant::now();
        while let Some((at, _)) = self.order.front() {
            if self.order.len() < SEEN_MAX && now.duration_since(*at) < MAX_REQUEST_WAIT {
                break;
            }
            let (_, old) = self.order.pop_front().expect("front exists");
            self.holders.remove(&old);
        }
        let holders = self.holders.entry(correlation.clone()).or_insert_with(|| {
            self.order.push_back((now, correlation));
            BTreeSet::new()
        });
        holders.insert(client.to_string());
    }
}

/// The correlation id of an event, if it carries one.
pub(crate) fn correlation_of(event: &CloudEvent) -> Option<String> {
    event.extension(CORRELATION).map(ExtValue::to_text)
}

impl Requests {
    /// The table of an instance; `in_cluster` remembers hand-outs of
    /// requests waiting elsewhere too.
    pub(crate) fn new(in_cluster: bool) -> Requests {
        Requests {
            seen: in_cluster.then(Mutex::default),
            ..Requests::default()
        }
    }

    /// Registers a request; false when one with this correlation id waits.
    pub(crate) fn insert(
        &self,
        correlation: &str,
        topic: &str,
        tx: oneshot::Sender<CloudEvent>,
    ) -> bool {
        let mut w = self.waiting.lock().expect("requests lock");
        if w.contains_key(correlation) {
            return false;
        }
        w.insert(
            correlation.to_string(),
            Waiting {
                tx,
                topic: topic.to_string(),
                holders: BTreeSet::new(),
            },
        );
        self.count.store(w.len(), Ordering::Release);
        true
    }

    pub(crate) fn remove(&self, correlation: &str) {
        let mut w = self.waiting.lock().expect("requests lock");
        w.remove(correlation);
        self.count.store(w.len(), Ordering::Release);
    }

    pub(crate) fn pending(&self, correlation: &str) -> Option<PendingRequest> {
        let w = self.waiting.lock().expect("requests lock");
        w.get(correlation).map(|r| PendingRequest {
            topic: r.topic.clone(),
            holders: r.holders.iter().cloned().collect(),
            waiting_on: None,
        })
    }

    /// The clients this instance handed events correlated by
    /// `correlation` to, when the request waits elsewhere.
    pub(crate) fn seen(&self, correlation: &str) -> Vec<String> {
        let Some(seen) = &self.seen else {
            return Vec::new();
        };
        let seen = seen.lock().expect("seen lock");
        seen.holders
            .get(correlation)
            .map(|h| h.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Hands `reply` to its request; false when none waits any more.
    pub(crate) fn complete(&self, correlation: &str, reply: CloudEvent) -> bool {
        let waiting = {
            let mut w = self.waiting.lock().expect("requests lock");
            let r = w.remove(correlation);
            self.count.store(w.len(), Ordering::Release);
            r
        };
        waiting.is_some_and(|r| r.tx.send(reply).is_ok())
    }
}

impl HandOutObserver for Requests {
    fn handed(&self, event: &CloudEvent, client: &str) {
        if self.seen.is_none() && self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let Some(correlation) = correlation_of(event) else {
            return;
        };
        if let Some(r) = self
            .waiting
            .lock()
            .expect("requests lock")
            .get_mut(&correlation)
        {
            r.holders.insert(client.to_string());
            return;
        }
        if let Some(seen) = &self.seen {
            seen.lock().expect("seen lock").record(correlation, client);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(correlation: Option<&str>) -> CloudEvent {
        let mut e = CloudEvent::from_json_slice(
            br#"{"specversion":"1.0","id":"1","source":"/t","type":"t"}"#,
        )
        .unwrap();
        if let Some(c) = correlation {
            e.set_extension(CORRELATION, ExtValue::Str(c.into()));
        }
        e
    }

    #[test]
    fn hand_outs_of_a_waiting_request_are_remembered() {
        let r = Requests::default();
        let (tx, _rx) = oneshot::channel();
        assert!(r.insert("c1", "prices", tx));
        let (tx2, _rx2) = oneshot::channel();
        assert!(
            !r.insert("c1", "prices", tx2),
            "one request per correlation id"
        );
        r.handed(&event(Some("c1")), "responder-b");
        r.handed(&event(Some("c1")), "responder-a");
        r.handed(&event(Some("other")), "responder-c");
        r.handed(&event(None), "responder-d");
        assert_eq!(
            r.pending("c1"),
            Some(PendingRequest {
                topic: "prices".into(),
                holders: vec!["responder-a".into(), "responder-b".into()],
                waiting_on: None,
            })
        );
        assert_eq!(r.pending("other"), None);
        assert!(
            r.seen("other").is_empty(),
            "not remembered outside a cluster"
        );
    }

    #[test]
    fn in_a_cluster_hand_outs_of_requests_waiting_elsewhere_are_remembered() {
        let r = Requests::new(true);
        let (tx, _rx) = oneshot::channel();
        r.insert("here", "t", tx);
        r.handed(&event(Some("here")), "a");
        r.handed(&event(Some("elsewhere")), "b");
        r.handed(&event(Some("elsewhere")), "c");
        r.handed(&event(None), "d");
        assert_eq!(r.pending("here").unwrap().holders, vec!["a".to_string()]);
        assert!(r.seen("here").is_empty());
        assert_eq!(r.seen("elsewhere"), vec!["b".to_string(), "c".to_string()]);
    }

    #[test]
    fn the_remembered_hand_outs_are_bounded() {
        let mut seen = Seen::default();
        for i in 0..SEEN_MAX + 10 {
            seen.record(format!("c{i}"), "x");
        }
        assert_eq!(seen.holders.len(), SEEN_MAX);
        assert_eq!(seen.order.len(), SEEN_MAX);
        assert!(!seen.holders.contains_key("c0"));
        assert!(seen.holders.contains_key(&format!("c{}", SEEN_MAX + 9)));
    }

    #[test]
    fn a_reply_completes_once_and_removal_forgets() {
        let r = Requests::default();
        let (tx, mut rx) = oneshot::channel();
        r.insert("c1", "t", tx);
        assert!(r.complete("c1", event(Some("c1"))));
        assert!(rx.try_recv().is_ok());
        assert!(!r.complete("c1", event(Some("c1"))));
        let (tx, _rx) = oneshot::channel();
        r.insert("c2", "t", tx);
        r.remove("c2");
        assert_eq!(r.pending("c2"), None);
        assert_eq!(r.count.load(Ordering::Acquire), 0);
    }
}
