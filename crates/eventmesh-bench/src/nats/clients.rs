//! The tasks that publish and receive: JetStream publishers (one
//! connection each, up to `window` acks outstanding, on a shared
//! schedule, optionally limited by a quota), the `pubsub` subscribers
//! (latency from the stamp in each payload) and the `sub` drainers
//! (latency of each confirmed ack), and the join that merges every task's
//! tally into the recorder. A task that fails counts as an error, never
//! aborts the run; a publish handed to the client is never cancelled, and
//! every outstanding ack is awaited before a publisher ends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use async_nats::jetstream::consumer::pull::{self, MessagesErrorKind};
use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::{Client, ServerAddr, Subject};
use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::conn::{connect, context, due_offset, stamped_payload};
use super::request::request_error_kind;
use super::{CATCH_UP, CONSUMER, PULL_BATCH};
use crate::workload::{Local, Quota, Receipt, Recorder, Schedule, Seen, Workload};

/// A `sub` subscriber: acks each message with a request (first receipts)
/// and records the round trip when the server confirms.
pub(super) async fn drainer(
    client: Client,
    mut messages: pull::Stream,
    rec: Arc<Recorder>,
    seen: Arc<Seen>,
    mut stop: watch::Receiver<bool>,
) -> Local {
    let mut local = rec.local();
    let mut confirming = FuturesUnordered::new();
    loop {
        tokio::select! {
            biased;
            _ = stop.changed() => break,
            Some((sent, len, r)) = confirming.next(), if !confirming.is_empty() => match r {
                Ok(_) => {
                    let latency = Instant::now().saturating_duration_since(sent);
                    local.record_latency(&rec, sent, latency, 1, len);
                }
                Err(e) => local.error(request_error_kind(&e, "ack")),
            },
            next = messages.next() => match next {
                Some(Ok(msg)) => {
                    let receipt = msg
                        .info()
                        .ok()
                        .and_then(|i| i.stream_sequence.checked_sub(1))
                        .map_or(Receipt::Unknown, |seq| seen.insert(seq));
                    match (receipt, msg.reply.clone()) {
                        (Receipt::First, Some(reply)) => {
                            let (client, sent) = (client.clone(), Instant::now());
                            let len = msg.payload.len() as u64;
                            confirming.push(async move {
                                (sent, len, client.request(reply, ACK.into()).await)
                            });
                        }
                        (other, _) => {
                            local.error(match other {
                                Receipt::Again => "duplicate",
                                _ => "bad_message",
                            });
                            if msg.ack().await.is_err() {
                                local.error("ack");
                            }
                        }
                    }
                }
                Some(Err(e)) => local.error(messages_error_kind(&e)),
                None => break,
            },
        }
    }
    local
}

/// The body of an ack.
const ACK: &[u8] = b"+ACK";

/// What publishers send and what they do with an ack.
#[derive(Clone)]
pub(super) enum Body {
    /// The same payload every time; acks are the measurement.
    Fixed(Bytes),
    /// The due instant in the first 8 bytes, padded to `size`; acks are
    /// only counted (the subscriber measures).
    Stamped { size: usize, acked: Arc<AtomicU64> },
}

/// Connects `w.publishers` clients (a failed one counts as a `connect`
/// error) and starts them on a common schedule, staggered so that their
/// slots interleave evenly; with a `quota`, they stop once it is used up.
pub(super) async fn spawn_publishers(
    addr: &ServerAddr,
    w: &Workload,
    rec: &Arc<Recorder>,
    body: Body,
    quota: Option<Arc<Quota>>,
) -> JoinSet<Local> {
    let n = w.publishers.max(1);
    let clients = futures::future::join_all((0..n).map(|_| connect(addr))).await;
    let base = Instant::now();
    let subject = Subject::from(w.topic.as_str());
    let mut tasks = JoinSet::new();
    let mut failed = rec.local();
    for (i, client) in clients.into_iter().enumerate() {
        let client = match client {
            Ok(c) => c,
            Err(_) => {
                failed.error("connect");
                continue;
            }
        };
        tasks.spawn(publisher(Publisher {
            ids: w
                .msg_ids
                .then(|| (uuid::Uuid::now_v7().simple().to_string(), 0)),
            js: context(client, w.window),
            subject: subject.clone(),
            window: w.window.max(1),
            schedule: w.schedule(base, i),
            quota: quota.clone(),
            body: body.clone(),
            rec: Arc::clone(rec),
        }));
    }
    rec.merge(failed);
    tasks
}

struct Publisher {
    /// With `--msg-ids`: this publisher's prefix and its counter.
    ids: Option<(String, u64)>,
    js: jetstream::Context,
    subject: Subject,
    window: usize,
    schedule: Schedule,
    /// Messages left to publish, when limited (a prefill).
    quota: Option<Arc<Quota>>,
    body: Body,
    rec: Arc<Recorder>,
}

/// One outstanding publish: when it was due, and its ack (or why there is
/// none) with the instant it arrived.
type Acked = (Instant, Result<(), &'static str>, Instant);

async fn publisher(mut p: Publisher) -> Local {
    let rec = &*p.rec;
    let mut local = rec.local();
    let mut inflight = FuturesUnordered::new();
    let mut stopped: Option<Instant> = None;
    loop {
        if stopped.is_none() && rec.done() {
            stopped = Some(Instant::now());
        }
        if let Some(at) = stopped {
            // Paced: slots that fell due before the stop are still sent
            // (late, with their due time) for a moment, so a publisher a
            // little behind (timer granularity) keeps its last events; one
            // far behind does not prolong the run.
            match p.schedule.next_slot() {
                Some(slot) if slot < at && Instant::now() < at + CATCH_UP => {}
                _ => break,
            }
        }
        if inflight.len() >= p.window {
            if let Some(a) = inflight.next().await {
                acked(rec, &mut local, &p.body, a);
            }
            continue;
        }
        // Wait for the slot, taking acks meanwhile; when behind schedule
        // this sends at once and keeps the slot's time (flat out: now).
        let due = loop {
            tokio::select! {
                biased;
                Some(a) = inflight.next(), if !inflight.is_empty() => {
                    acked(rec, &mut local, &p.body, a);
                }
                due = p.schedule.tick() => break due,
            }
        };
        if p.quota.as_ref().is_some_and(|q| q.claim(1).is_none()) {
            break;
        }
        let payload = match &p.body {
            Body::Fixed(b) => b.clone(),
            Body::Stamped { size, .. } => {
                stamped_payload(due.saturating_duration_since(rec.start()), *size)
            }
        };
        // Handing the message to the client may wait (its queue is full, or
        // the ack permits are used up): keep taking acks meanwhile so their
        // arrival times stay exact. The send itself is never cancelled.
        let mut message = jetstream::message::PublishMessage::build().payload(payload);
        if let Some((prefix, n)) = &mut p.ids {
            *n += 1;
            message = message.message_id(format!("{prefix}-{n}"));
        }
        let send = p.js.send_publish(p.subject.clone(), message);
        tokio::pin!(send);
        let sent = loop {
            tokio::select! {
                biased;
                r = &mut send => break r,
                Some(a) = inflight.next(), if !inflight.is_empty() => {
                    acked(rec, &mut local, &p.body, a);
                }
            }
        };
        match sent {
            Ok(ack) => inflight.push(async move {
                let r = ack.await.map(drop).map_err(|e| publish_error_kind(&e));
                (due, r, Instant::now())
            }),
            Err(e) => local.error(publish_error_kind(&e)),
        }
    }
    while let Some(a) = inflight.next().await {
        acked(rec, &mut local, &p.body, a);
    }
    local
}

fn acked(rec: &Recorder, local: &mut Local, body: &Body, (due, result, at): Acked) {
    match (result, body) {
        (Ok(()), Body::Fixed(b)) => local.record(rec, due, at, 1, b.len() as u64),
        (Ok(()), Body::Stamped { acked, .. }) => {
            acked.fetch_add(1, Ordering::Relaxed);
        }
        (Err(kind), _) => local.error(kind),
    }
}

fn publish_error_kind(e: &PublishError) -> &'static str {
    match e.kind() {
        PublishErrorKind::TimedOut => "ack_timeout",
        PublishErrorKind::StreamNotFound => "no_stream",
        PublishErrorKind::BrokenPipe => "broken_pipe",
        PublishErrorKind::MaxPayloadExceeded => "too_large",
        _ => "publish",
    }
}

/// Attaches one subscriber (its own connection) to the shared durable
/// consumer.
pub(super) async fn subscribe(
    addr: &ServerAddr,
    stream: &str,
) -> Result<(Client, pull::Stream), &'static str> {
    let client = connect(addr).await.map_err(|_| "connect")?;
    let js = context(client.clone(), 1);
    let consumer: PullConsumer = js
        .get_consumer_from_stream(CONSUMER, stream)
        .await
        .map_err(|_| "consumer")?;
    consumer
        .stream()
        .max_messages_per_batch(PULL_BATCH)
        .heartbeat(Duration::from_secs(5))
        .messages()
        .await
        .map(|m| (client, m))
        .map_err(|_| "subscribe")
}

pub(super) async fn subscriber(
    mut messages: pull::Stream,
    rec: Arc<Recorder>,
    received: Arc<AtomicU64>,
    mut stop: watch::Receiver<bool>,
) -> Local {
    let mut local = rec.local();
    loop {
        tokio::select! {
            biased;
            _ = stop.changed() => break,
            next = messages.next() => match next {
                Some(Ok(msg)) => {
                    let at = Instant::now();
                    match due_offset(&msg.payload) {
                        Some(offset) => {
                            let due = rec.start() + offset;
                            local.record(&rec, due, at, 1, msg.payload.len() as u64);
                        }
                        None => local.error("bad_payload"),
                    }
                    received.fetch_add(1, Ordering::Relaxed);
                    if msg.ack().await.is_err() {
                        local.error("ack");
                    }
                }
                Some(Err(e)) => local.error(messages_error_kind(&e)),
                None => break,
            },
        }
    }
    local
}

fn messages_error_kind(e: &pull::MessagesError) -> &'static str {
    match e.kind() {
        MessagesErrorKind::MissingHeartbeat => "heartbeat",
        MessagesErrorKind::ConsumerDeleted => "consumer_deleted",
        _ => "receive",
    }
}

pub(super) async fn join_all(mut tasks: JoinSet<Local>, rec: &Recorder) {
    while let Some(r) = tasks.join_next().await {
        match r {
            Ok(local) => rec.merge(local),
            Err(_) => {
                let mut l = rec.local();
                l.error("task");
                rec.merge(l);
            }
        }
    }
}
