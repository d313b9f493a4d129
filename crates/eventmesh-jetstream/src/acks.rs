//! The acknowledgements of this instance's publishes, on one subscription
//! of its own. Every publish carries the reply subject `<prefix><n>`, `n` a
//! counter that only grows; the subscription's task hands each
//! acknowledgement to the append waiting for its `n`.
//!
//! Waiting appends sit in a queue in counter order, so an insert, a lookup
//! and the sweep of those past the timeout each cost constant time. An
//! append whose acknowledgement does not come in time (or whose connection
//! closed) is answered "timed out": it may have been stored all the same,
//! as with any lost acknowledgement, and a keyed retry is deduplicated.
//!
//! Compared with the client's request call per publish, this spares a
//! random inbox name formatted and hashed into a map of strings, a timer
//! and a boxed future per publish, and reads an acknowledgement in one pass
//! instead of trying an error shape first.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_nats::{Client, Message, StatusCode, Subject, Subscriber};
use futures::StreamExt;
use serde::Deserialize;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// How often waiting appends are checked against their deadline.
const SWEEP_EVERY: Duration = Duration::from_millis(100);

/// Where JetStream stored one publish.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Stored {
    pub sequence: u64,
    pub duplicate: bool,
}

/// Why a publish was not stored (as far as this instance knows).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Failed {
    /// JetStream refused it: its error code and description.
    Refused { code: u64, description: String },
    /// Nothing listens on the subject (no stream, or its leader is being
    /// elected).
    NoResponders,
    /// No acknowledgement within the timeout, or the connection closed.
    TimedOut,
    /// An acknowledgement that could not be read.
    Unreadable(String),
}

/// What became of one publish.
pub(crate) type Acked = Result<Stored, Failed>;

struct Waiting {
    deadline: Instant,
    /// Taken once answered.
    tx: Option<oneshot::Sender<Acked>>,
}

struct Queue {
    /// The counter of the queue's front.
    base: u64,
    waiting: VecDeque<Waiting>,
}

pub(crate) struct Acks {
    prefix: String,
    queue: Mutex<Queue>,
    timeout: Duration,
}

impl Acks {
    /// Subscribes to the acknowledgements and starts their task, which
    /// ends with the connection or once the returned value is dropped.
    pub(crate) async fn start(
        client: &Client,
        timeout: Duration,
    ) -> Result<Arc<Acks>, async_nats::SubscribeError> {
        let prefix = format!("{}.", client.new_inbox());
        let subscription = client.subscribe(format!("{prefix}*")).await?;
        let acks = Arc::new(Acks {
            prefix,
            queue: Mutex::new(Queue {
                base: 0,
                waiting: VecDeque::new(),
            }),
            timeout,
        });
        tokio::spawn(run(Arc::downgrade(&acks), subscription));
        Ok(acks)
    }

    /// The reply subject of one publish, and where its acknowledgement
    /// will come. A publish that fails to go out just drops the receiver.
    pub(crate) fn expect(&self) -> (Subject, oneshot::Receiver<Acked>) {
        let (tx, rx) = oneshot::channel();
        let n = {
            let mut q = self.queue.lock().expect("acks lock");
            q.waiting.push_back(Waiting {
                deadline: Instant::now() + self.timeout,
                tx: Some(tx),
            });
            q.base + q.waiting.len() as u64 - 1
        };
        let mut reply = String::with_capacity(self.prefix.len() + 20);
        reply.push_str(&self.prefix);
        let _ = write!(reply, "{n}");
        (Subject::from(reply), rx)
    }

    /// Hands an acknowledgement to the append waiting for it.
    fn answer(&self, message: &Message) {
        let Some(n) = message
            .subject
            .as_str()
            .strip_prefix(self.prefix.as_str())
            .and_then(|n| n.parse::<u64>().ok())
        else {
            return;
        };
        let tx = {
            let mut q = self.queue.lock().expect("acks lock");
            let tx = n
                .checked_sub(q.base)
                .and_then(|i| q.waiting.get_mut(usize::try_from(i).ok()?))
                .and_then(|w| w.tx.take());
            q.trim(None);
            tx
        };
        if let Some(tx) = tx {
            let _ = tx.send(read(message));
        }
    }

    /// Answers "timed out" to the appends past their deadline (or, with
    /// `None`, to all: the connection is gone).
    fn sweep(&self, now: Option<Instant>) {
        let mut q = self.queue.lock().expect("acks lock");
        match now {
            Some(now) => q.trim(Some(now)),
            None => {
                q.base += q.waiting.len() as u64;
                q.waiting.clear();
            }
        }
    }
}

impl Queue {
    /// Drops answered appends from the front, and with `now` those past
    /// their deadline too (dropping the sender tells the receiver).
    fn trim(&mut self, now: Option<Instant>) {
        while let Some(front) = self.waiting.front() {
            let done = front.tx.is_none() || now.is_some_and(|now| front.deadline <= now);
            if !done {
                break;
            }
            self.waiting.pop_front();
            self.base += 1;
        }
    }
}

async fn run(acks: Weak<Acks>, mut subscription: Subscriber) {
    let mut sweep = tokio::time::interval(SWEEP_EVERY);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            message = subscription.next() => {
                let (Some(message), Some(acks)) = (message, acks.upgrade()) else { break };
                acks.answer(&message);
            }
            _ = sweep.tick() => {
                let Some(acks) = acks.upgrade() else { break };
                acks.sweep(Some(Instant::now()));
            }
        }
    }
    if let Some(acks) = acks.upgrade() {
        acks.sweep(None);
    }
}

#[derive(Deserialize)]
struct Body {
    #[serde(default)]
    seq: u64,
    #[serde(default)]
    duplicate: bool,
    error: Option<ApiError>,
}

#[derive(Deserialize)]
struct ApiError {
    #[serde(default)]
    err_code: u64,
    #[serde(default)]
    description: String,
}

/// Reads one acknowledgement.
fn read(message: &Message) -> Acked {
    if message.status == Some(StatusCode::NO_RESPONDERS) {
        return Err(Failed::NoResponders);
    }
    match serde_json::from_slice::<Body>(&message.payload) {
        Ok(Body { error: Some(e), .. }) => Err(Failed::Refused {
            code: e.err_code,
            description: e.description,
        }),
        Ok(Body { seq, duplicate, .. }) if seq >= 1 => Ok(Stored {
            sequence: seq,
            duplicate,
        }),
        Ok(_) => Err(Failed::Unreadable(
            "an acknowledgement without a sequence".into(),
        )),
        Err(e) => Err(Failed::Unreadable(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(payload: &str) -> Message {
        Message {
            subject: "x".into(),
            reply: None,
            payload: payload.to_string().into(),
            headers: None,
            status: None,
            description: None,
            length: payload.len(),
        }
    }

    #[test]
    fn acknowledgements_are_read_in_each_shape() {
        assert_eq!(
            read(&message(r#"{"stream":"s","seq":7,"duplicate":true}"#)),
            Ok(Stored {
                sequence: 7,
                duplicate: true
            })
        );
        assert_eq!(
            read(&message(
                r#"{"error":{"code":400,"err_code":10201,"description":"duplicate"}}"#
            )),
            Err(Failed::Refused {
                code: 10201,
                description: "duplicate".into()
            })
        );
        assert!(matches!(read(&message("{}")), Err(Failed::Unreadable(_))));
        assert!(matches!(read(&message("nope")), Err(Failed::Unreadable(_))));
        let mut none = message("");
        none.status = Some(StatusCode::NO_RESPONDERS);
        assert_eq!(read(&none), Err(Failed::NoResponders));
    }

    #[tokio::test]
    async fn answers_find_their_append_and_the_late_time_out() {
        let acks = Acks {
            prefix: "_INBOX.t.".into(),
            queue: Mutex::new(Queue {
                base: 0,
                waiting: VecDeque::new(),
            }),
            timeout: Duration::from_secs(5),
        };
        let (s0, r0) = acks.expect();
        let (s1, r1) = acks.expect();
        let (s2, r2) = acks.expect();
        assert_eq!(
            [s0.as_str(), s1.as_str(), s2.as_str()],
            ["_INBOX.t.0", "_INBOX.t.1", "_INBOX.t.2"]
        );
        // Answered out of order: the front stays until it is answered.
        let mut m = message(r#"{"seq":2}"#);
        m.subject = s1.clone();
        acks.answer(&m);
        assert_eq!(
            r1.await.unwrap(),
            Ok(Stored {
                sequence: 2,
                duplicate: false
            })
        );
        assert_eq!(acks.queue.lock().unwrap().waiting.len(), 3);
        m.subject = s0;
        acks.answer(&m);
        assert!(r0.await.is_ok());
        {
            let q = acks.queue.lock().unwrap();
            assert_eq!((q.base, q.waiting.len()), (2, 1));
        }
        // An unknown or repeated answer changes nothing.
        m.subject = s1;
        acks.answer(&m);
        m.subject = "_INBOX.t.99".into();
        acks.answer(&m);
        // Past the deadline: the waiter learns it.
        acks.sweep(Some(Instant::now() + Duration::from_secs(6)));
        assert!(r2.await.is_err());
        let q = acks.queue.lock().unwrap();
        assert_eq!((q.base, q.waiting.len()), (3, 0));
    }
}
