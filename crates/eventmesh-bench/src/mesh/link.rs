//! One connection to the runtime, whatever the transport: the workloads
//! send [`Op`]s and receive [`In`]s, and each transport (`tcp`, `ws`,
//! `http`) translates them to and from its wire protocol in its own tasks.
//!
//! Answers are matched to operations by the id the workload chose (the TCP
//! frame's correlation, the WebSocket `requestId`, the HTTP request's own
//! task), never by order: a server may answer pipelined operations in any
//! order.

use std::time::Duration;

use bytes::Bytes;
use reqwest::Url;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How long closing waits for a connection's tasks to finish what is
/// queued (acks, a goodbye) before it stops them.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// An operation a workload asks of the server.
#[derive(Debug)]
pub enum Op {
    /// Publish `body` to the link's topic: one structured event, or (HTTP
    /// only, `events > 1`) a JSON array of them for `/events/publish-batch`.
    Publish { id: u64, body: Bytes, events: u32 },
    /// A request-reply request (`POST /events/request`; HTTP only).
    Request { id: u64, body: Bytes },
    /// A reply event (carrying the request's `correlationid`).
    Reply { id: u64, event: Bytes },
    /// Acknowledge a delivery. Answered only where
    /// [`Link::acks_answered`]; an error is always answered.
    Ack { id: u64, delivery: String },
    /// A reply event and the ack of the request's delivery in one
    /// operation (TCP `REPLY_ACK`), where [`Link::replies_with_ack`].
    ReplyAck {
        id: u64,
        delivery: String,
        event: Bytes,
    },
}

/// What the server sent.
#[derive(Debug)]
pub enum In {
    /// The answer to operation `id`: `Err` holds the error code.
    Done { id: u64, result: Result<(), String> },
    /// A delivery of the link's subscription, to acknowledge.
    Delivery { delivery: String, event: Bytes },
    /// An error not tied to an operation (a failed poll, an unsolicited
    /// error message).
    Error(String),
    /// The connection ended; with an error kind when it broke.
    Closed(Option<String>),
}

/// A subscription made when the link connects.
#[derive(Debug, Clone)]
pub struct Subscription {
    pub group: String,
    /// `earliest` or `latest`.
    pub from: &'static str,
    /// Filter objects, when the workload selects (`--select`).
    pub filters: Option<serde_json::Value>,
}

/// The runtime's HTTP unsubscribe for a client, run when its link closes.
pub struct Unsubscribe {
    pub http: reqwest::Client,
    pub url: Url,
    pub token: Option<String>,
    pub client_id: String,
}

impl Unsubscribe {
    async fn run(self) {
        let mut req = self
            .http
            .post(self.url)
            .json(&serde_json::json!({ "clientId": self.client_id }));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let _ = req.send().await;
    }
}

/// A connection: operations go out through [`Link::send`], answers and
/// deliveries come in through [`Link::recv`].
pub struct Link {
    ops: mpsc::UnboundedSender<Op>,
    answers: mpsc::UnboundedReceiver<In>,
    acks_answered: bool,
    reply_acks: bool,
    /// Tasks that finish by themselves once `ops` is closed (writers,
    /// readers that see the server's goodbye).
    tasks: Vec<JoinHandle<()>>,
    /// Tasks stopped when the link closes (HTTP polling).
    background: Vec<JoinHandle<()>>,
    unsubscribe: Option<Unsubscribe>,
}

impl Link {
    pub fn new(
        ops: mpsc::UnboundedSender<Op>,
        answers: mpsc::UnboundedReceiver<In>,
        acks_answered: bool,
    ) -> Link {
        Link {
            ops,
            answers,
            acks_answered,
            reply_acks: false,
            tasks: Vec::new(),
            background: Vec::new(),
            unsubscribe: None,
        }
    }

    pub fn task(mut self, t: JoinHandle<()>) -> Link {
        self.tasks.push(t);
        self
    }

    pub fn background(mut self, t: JoinHandle<()>) -> Link {
        self.background.push(t);
        self
    }

    pub fn unsubscribe_on_close(mut self, u: Option<Unsubscribe>) -> Link {
        self.unsubscribe = u;
        self
    }

    /// The link takes [`Op::ReplyAck`].
    pub fn with_reply_acks(mut self) -> Link {
        self.reply_acks = true;
        self
    }

    /// Whether the link takes [`Op::ReplyAck`] (else a reply and an ack).
    pub fn replies_with_ack(&self) -> bool {
        self.reply_acks
    }

    /// Whether a successful [`Op::Ack`] is answered (TCP `OK`, HTTP `200`;
    /// a WebSocket ack is answered only when it fails).
    pub fn acks_answered(&self) -> bool {
        self.acks_answered
    }

    /// Queues an operation; false once the connection is gone.
    pub fn send(&self, op: Op) -> bool {
        self.ops.send(op).is_ok()
    }

    /// The next answer or delivery; [`In::Closed`] (or `None`) once the
    /// connection ended.
    pub async fn recv(&mut self) -> Option<In> {
        self.answers.recv().await
    }

    /// Sends what is queued, says goodbye (TCP), removes the link's
    /// subscription and waits for the connection's tasks, briefly.
    pub async fn close(self) {
        let Link {
            ops,
            answers,
            tasks,
            background,
            unsubscribe,
            ..
        } = self;
        drop(ops);
        for b in &background {
            b.abort();
        }
        for mut t in tasks {
            if tokio::time::timeout(CLOSE_WAIT, &mut t).await.is_err() {
                t.abort();
            }
        }
        drop(answers);
        if let Some(u) = unsubscribe {
            let _ = tokio::time::timeout(CLOSE_WAIT, u.run()).await;
        }
    }
}

/// The error code in an error body `{"error": code, ...}` (HTTP answers,
/// TCP `ERROR` frames and WebSocket error messages share it).
pub fn error_code(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct E {
        error: String,
    }
    serde_json::from_slice::<E>(body).ok().map(|e| e.error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_come_from_error_bodies() {
        assert_eq!(
            error_code(br#"{"error":"unknown_delivery","message":"gone"}"#).as_deref(),
            Some("unknown_delivery")
        );
        assert_eq!(error_code(b"<html>"), None);
        assert_eq!(error_code(br#"{"status":"acked"}"#), None);
    }
}
