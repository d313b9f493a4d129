//! Driving NATS with the same workloads, so that
//! `eventmesh-bench ... --target nats://HOST:PORT` compares like for like:
//!
//! - [`publish`] (`pub`): JetStream publish with ack (the counterpart of a
//!   durable publish): one file-backed, single-replica stream whose only
//!   subject is the topic, one connection per publisher, each pipelining
//!   up to `window` publishes whose acks are still outstanding.
//! - [`pubsub`]: end to end through the same stream and one durable pull
//!   consumer with explicit acks shared by all subscribers (a work queue,
//!   like a load-balanced subscription group). The publisher writes the
//!   instant each message was due into its first 8 bytes; the subscriber
//!   records receive time minus that instant.
//! - [`sub`]: the stream is prefilled with `count` JetStream publishes
//!   (flat out, not measured), then subscribers drain it through a durable
//!   pull consumer from the first message, acking each one with a request
//!   (an ack with a reply subject, which the server confirms: what
//!   `double_ack` does, over the client's shared reply inbox); latency is
//!   that ack round trip, and an event counts once its ack is confirmed.
//! - [`request`]: core NATS request-reply, not JetStream (nothing is
//!   stored): responders in one queue group answer each request with a
//!   small reply, requesters keep `window` requests in flight each.
//!
//! The stream is deleted and created again at the start of every run, so
//! messages (and consumers) of earlier runs do not count, and deleted at
//! the end (the CLI picks a new topic per run unless told otherwise, and
//! each run may leave gigabytes behind).
//!
//! The test `against_a_real_server` talks to a real server and is skipped
//! unless `EVENTMESH_BENCH_NATS_URL` is set (CI does not set it), e.g.
//! `nats-server -js -a 127.0.0.1 -p 4333 -sd /tmp/nats-store` and
//! `EVENTMESH_BENCH_NATS_URL=nats://127.0.0.1:4333 cargo test -p eventmesh-bench nats`.

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _, Result};
use async_nats::jetstream::consumer::pull::{self, MessagesErrorKind};
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer};
use async_nats::jetstream::context::{GetStreamErrorKind, PublishError, PublishErrorKind};
use async_nats::jetstream::stream::{self, StorageType};
use async_nats::jetstream::{self, ErrorCode};
use async_nats::{Client, RequestErrorKind, ServerAddr, Subject};
use bytes::{BufMut, Bytes, BytesMut};
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{sleep, Instant};

use crate::workload::{Local, Quota, Receipt, Recorder, Schedule, Seen, Workload};

/// How long a publish waits for its ack (and JetStream API calls for their
/// answer) before it counts as `ack_timeout`. Generous on purpose (the
/// client's default is 5 s, and the runtime's side waits for acks without
/// a limit): with `sync_interval: always` a deep window makes every ack
/// wait several seconds (about window x publishers / fsyncs per second),
/// and a short timeout would turn that into nothing but timeouts.
const ACK_TIMEOUT: Duration = Duration::from_secs(30);
/// How long to connect before giving up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// After the run, how long subscribers keep receiving what is still on its
/// way.
const DRAIN: Duration = Duration::from_secs(5);
/// How long a paced publisher that is behind schedule keeps sending the
/// slots that fell due before the run stopped.
const CATCH_UP: Duration = Duration::from_millis(100);
/// The durable consumer all subscribers share.
const CONSUMER: &str = "eventmesh-bench";
/// Messages asked for by each pull request (the client pulls again before a
/// batch runs out, so this bounds buffering, not latency).
const PULL_BATCH: usize = 256;
/// Unacknowledged deliveries the server allows the consumer; high enough
/// not to throttle a flat-out run.
const MAX_ACK_PENDING: i64 = 65_536;
/// The due-time stamp at the start of each end-to-end payload.
const STAMP_LEN: usize = 8;
/// Publishes in flight per prefill connection, at least.
const PREFILL_WINDOW: usize = 64;
/// How long a core NATS request waits for its reply.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The queue group of `request` responders.
const RESPONDERS: &str = "eventmesh-bench";
/// How long `request` waits for the responders' interest to reach the
/// server before it starts.
const READY_WAIT: Duration = Duration::from_secs(5);

/// JetStream publish with ack: one stream (file storage, one replica) whose
/// only subject is `w.topic` (recreated at the start so earlier runs do not
/// count), `w.publishers` connections (one client each), each keeping up to
/// `w.window` acked publishes in flight, payload `w.size` bytes; paced by
/// [`Workload::interval_per_publisher`] when `w.rate` is set (latency from
/// the schedule slot, even when sent late), else flat out (latency from the
/// send). Each ack is recorded. Stops when [`Recorder::done`], then waits
/// for the acks still outstanding.
pub async fn publish(url: &str, w: &Workload, rec: &Arc<Recorder>) -> Result<()> {
    let addr = server_addr(url)?;
    let admin = connect(&addr).await.map_err(|e| unreachable(url, &e))?;
    let js = context(admin, w.window);
    recreate_stream(&js, &w.topic).await?;

    let payload = Bytes::from(vec![b'x'; w.size]);
    let publishers = spawn_publishers(&addr, w, rec, Body::Fixed(payload), None).await;
    join_all(publishers, rec).await;
    // Topics are usually new per run: do not leave a stream per run behind.
    let _ = js.delete_stream(stream_name(&w.topic)).await;
    Ok(())
}

/// End to end: the same stream, one durable pull consumer with explicit
/// acks shared by `w.subscribers` subscribers (each on its own connection,
/// pulling batches and acking every message), publishers as in
/// [`publish`]. Each payload starts with the instant the message was due
/// (nanoseconds since [`Recorder::start`], little endian) and is padded to
/// `w.size`; latency is receive time minus that instant, recorded on
/// receive. Stops when [`Recorder::done`] and everything published was
/// received, or [`DRAIN`] after that.
pub async fn pubsub(url: &str, w: &Workload, rec: &Arc<Recorder>) -> Result<()> {
    let addr = server_addr(url)?;
    let admin = connect(&addr).await.map_err(|e| unreachable(url, &e))?;
    let js = context(admin, w.window);
    let stream = recreate_stream(&js, &w.topic).await?;
    let result = run_pubsub(&addr, url, w, rec, &stream).await;
    let _ = js.delete_stream(stream_name(&w.topic)).await;
    result
}

async fn run_pubsub(
    addr: &ServerAddr,
    url: &str,
    w: &Workload,
    rec: &Arc<Recorder>,
    stream: &stream::Stream,
) -> Result<()> {
    let stream_name = create_consumer(stream, &w.topic).await?;

    // Subscribers first, so that the first message finds them pulling.
    let received = Arc::new(AtomicU64::new(0));
    let (stop, stopped) = watch::channel(false);
    let mut subscribers = JoinSet::new();
    let mut setup = rec.local();
    for _ in 0..w.subscribers.max(1) {
        match subscribe(addr, &stream_name).await {
            Ok((_, messages)) => {
                subscribers.spawn(subscriber(
                    messages,
                    Arc::clone(rec),
                    Arc::clone(&received),
                    stopped.clone(),
                ));
            }
            Err(kind) => setup.error(kind),
        }
    }
    if subscribers.is_empty() {
        rec.merge(setup);
        bail!("no subscriber could attach to the consumer {CONSUMER} on {url}");
    }

    let published = Arc::new(AtomicU64::new(0));
    let publishers = spawn_publishers(
        addr,
        w,
        rec,
        Body::Stamped {
            size: w.size,
            acked: Arc::clone(&published),
        },
        None,
    )
    .await;
    while !rec.done() {
        sleep(Duration::from_millis(10)).await;
    }
    let deadline = Instant::now() + DRAIN;
    join_all(publishers, rec).await;
    while received.load(Ordering::Relaxed) < published.load(Ordering::Relaxed)
        && Instant::now() < deadline
    {
        sleep(Duration::from_millis(5)).await;
    }
    let _ = stop.send(true);
    join_all(subscribers, rec).await;
    let missing = published
        .load(Ordering::Relaxed)
        .saturating_sub(received.load(Ordering::Relaxed));
    for _ in 0..missing {
        setup.error("missing");
    }
    rec.merge(setup);
    Ok(())
}

/// The durable pull consumer all subscribers share: explicit acks, from
/// the stream's first message. Returns the stream's name.
async fn create_consumer(stream: &stream::Stream, topic: &str) -> Result<String> {
    let name = stream_name(topic);
    stream
        .create_consumer(pull::Config {
            durable_name: Some(CONSUMER.to_owned()),
            ack_policy: AckPolicy::Explicit,
            deliver_policy: DeliverPolicy::All,
            ack_wait: Duration::from_secs(30),
            max_ack_pending: MAX_ACK_PENDING,
            ..Default::default()
        })
        .await
        .with_context(|| format!("creating the consumer {CONSUMER} on stream {name}"))?;
    Ok(name)
}

/// Consumer throughput of a backlog: prefills the stream with `w.count`
/// JetStream publishes (flat out over `w.publishers` connections, each
/// with `max(w.window, 64)` acks outstanding; not measured), then starts
/// the measured window, creates the durable consumer (from the first
/// message, explicit acks) and `w.subscribers` subscribers drain it. Each
/// first receipt is acked with a request whose answer is the server's
/// confirmation; the event counts, with that round trip as its latency,
/// when the confirmation arrives. Stops once every prefilled message was
/// confirmed, or after `w.duration`.
pub async fn sub(url: &str, w: &Workload, rec: &Arc<Recorder>) -> Result<()> {
    let count = w.count.context("sub needs a count of events to prefill")?;
    let addr = server_addr(url)?;
    let admin = connect(&addr).await.map_err(|e| unreachable(url, &e))?;
    let js = context(admin, w.window);
    let stream = recreate_stream(&js, &w.topic).await?;
    let result = run_sub(&addr, url, w, count, rec, &stream).await;
    let _ = js.delete_stream(stream_name(&w.topic)).await;
    result
}

async fn run_sub(
    addr: &ServerAddr,
    url: &str,
    w: &Workload,
    count: u64,
    rec: &Arc<Recorder>,
    stream: &stream::Stream,
) -> Result<()> {
    let prefill = Workload {
        rate: None,
        window: w.window.max(PREFILL_WINDOW),
        ..w.clone()
    };
    let body = Body::Stamped {
        size: w.size,
        acked: rec.prefilled().clone(),
    };
    let quota = Some(Arc::new(Quota::new(count)));
    join_all(
        spawn_publishers(addr, &prefill, rec, body, quota).await,
        rec,
    )
    .await;
    let prefilled = rec.prefilled().load(Ordering::Relaxed);
    if prefilled == 0 {
        bail!("the prefill of {url} published nothing");
    }

    rec.measure_now(prefilled);
    let stream_name = create_consumer(stream, &w.topic).await?;
    let seen = Arc::new(Seen::new(count));
    let (stop, stopped) = watch::channel(false);
    let mut subscribers = JoinSet::new();
    for _ in 0..w.subscribers.max(1) {
        match subscribe(addr, &stream_name).await {
            Ok((client, messages)) => {
                subscribers.spawn(drainer(
                    client,
                    messages,
                    Arc::clone(rec),
                    Arc::clone(&seen),
                    stopped.clone(),
                ));
            }
            Err(kind) => rec.error(kind, 1),
        }
    }
    if subscribers.is_empty() {
        bail!("no subscriber could attach to the consumer {CONSUMER} on {url}");
    }
    while !rec.done() {
        sleep(Duration::from_millis(5)).await;
    }
    let _ = stop.send(true);
    join_all(subscribers, rec).await;
    Ok(())
}

/// A `sub` subscriber: acks each message with a request (first receipts)
/// and records the round trip when the server confirms.
async fn drainer(
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

/// Core NATS request-reply (no JetStream): `w.subscribers` responders in
/// one queue group answer each request with a 2-byte reply;
/// `w.publishers` requesters each keep `w.window` requests of `w.size`
/// bytes in flight (paced by the rate, if any), latency from each
/// request's due time to its reply.
pub async fn request(url: &str, w: &Workload, rec: &Arc<Recorder>) -> Result<()> {
    let addr = server_addr(url)?;
    check_subject(&w.topic)?;
    let subject = Subject::from(w.topic.as_str());
    let (stop, stopped) = watch::channel(false);
    let mut responders = JoinSet::new();
    for _ in 0..w.subscribers.max(1) {
        let client = connect(&addr).await.map_err(|e| unreachable(url, &e))?;
        let requests = client
            .queue_subscribe(subject.clone(), RESPONDERS.into())
            .await
            .with_context(|| format!("subscribing to {subject} on {url}"))?;
        client.flush().await.context("flushing the subscription")?;
        responders.spawn(responder(client, requests, rec.clone(), stopped.clone()));
    }
    let result = run_requests(&addr, url, w, rec, &subject).await;
    let _ = stop.send(true);
    join_all(responders, rec).await;
    result
}

async fn run_requests(
    addr: &ServerAddr,
    url: &str,
    w: &Workload,
    rec: &Arc<Recorder>,
    subject: &Subject,
) -> Result<()> {
    let mut clients = Vec::new();
    for _ in 0..w.publishers.max(1) {
        clients.push(connect(addr).await.map_err(|e| unreachable(url, &e))?);
    }
    // The responders' interest reaches the server before the first
    // measured request: one request answered is the proof.
    let ready = Instant::now() + READY_WAIT;
    while let Err(e) = clients[0].request(subject.clone(), Bytes::new()).await {
        if Instant::now() >= ready {
            bail!("no responder on {subject} answered within {READY_WAIT:?} on {url}: {e}");
        }
        sleep(Duration::from_millis(10)).await;
    }
    let payload = Bytes::from(vec![b'x'; w.size]);
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for (i, client) in clients.into_iter().enumerate() {
        tasks.spawn(requester(
            client,
            subject.clone(),
            payload.clone(),
            w.window.max(1),
            w.schedule(start, i),
            rec.clone(),
        ));
    }
    join_all(tasks, rec).await;
    Ok(())
}

async fn responder(
    client: Client,
    mut requests: async_nats::Subscriber,
    rec: Arc<Recorder>,
    mut stop: watch::Receiver<bool>,
) -> Local {
    let mut local = rec.local();
    let answer = Bytes::from_static(b"ok");
    loop {
        tokio::select! {
            biased;
            _ = stop.changed() => break,
            next = requests.next() => match next {
                Some(msg) => {
                    let Some(reply) = msg.reply else {
                        local.error("no_reply_subject");
                        continue;
                    };
                    if client.publish(reply, answer.clone()).await.is_err() {
                        local.error("reply");
                    }
                }
                None => break,
            },
        }
    }
    local
}

/// Keeps `window` requests in flight on the schedule until the run is
/// done, then waits for the outstanding ones (each ends by its timeout).
async fn requester(
    client: Client,
    subject: Subject,
    payload: Bytes,
    window: usize,
    mut schedule: Schedule,
    rec: Arc<Recorder>,
) -> Local {
    let mut local = rec.local();
    let size = payload.len() as u64;
    let mut inflight = FuturesUnordered::new();
    let answered = |local: &mut Local, (due, r, at): (Instant, Result<_, _>, Instant)| match r {
        Ok(_) => local.record(&rec, due, at, 1, size),
        Err(e) => local.error(request_error_kind(&e, "request")),
    };
    while !rec.done() {
        let room = inflight.len() < window;
        tokio::select! {
            biased;
            Some(a) = inflight.next(), if !inflight.is_empty() => answered(&mut local, a),
            due = schedule.tick(), if room => {
                let (client, subject, payload) = (client.clone(), subject.clone(), payload.clone());
                inflight.push(async move {
                    let r = client.request(subject, payload).await;
                    (due, r, Instant::now())
                });
            }
        }
    }
    while let Some(a) = inflight.next().await {
        answered(&mut local, a);
    }
    local
}

fn request_error_kind(e: &async_nats::RequestError, what: &'static str) -> &'static str {
    match (e.kind(), what) {
        (RequestErrorKind::TimedOut, "ack") => "ack_timeout",
        (RequestErrorKind::TimedOut, _) => "request_timeout",
        (RequestErrorKind::NoResponders, _) => "no_responders",
        (_, "ack") => "ack",
        _ => "request",
    }
}

/// What publishers send and what they do with an ack.
#[derive(Clone)]
enum Body {
    /// The same payload every time; acks are the measurement.
    Fixed(Bytes),
    /// The due instant in the first 8 bytes, padded to `size`; acks are
    /// only counted (the subscriber measures).
    Stamped { size: usize, acked: Arc<AtomicU64> },
}

/// Connects `w.publishers` clients (a failed one counts as a `connect`
/// error) and starts them on a common schedule, staggered so that their
/// slots interleave evenly; with a `quota`, they stop once it is used up.
async fn spawn_publishers(
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
        let send = p.js.publish(p.subject.clone(), payload);
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
async fn subscribe(
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

async fn subscriber(
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

async fn join_all(mut tasks: JoinSet<Local>, rec: &Recorder) {
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

/// A JetStream context whose ack timeout is [`ACK_TIMEOUT`] and which allows
/// at least `window` acks outstanding (the publisher enforces the window).
fn context(client: Client, window: usize) -> jetstream::Context {
    jetstream::context::ContextBuilder::new()
        .timeout(ACK_TIMEOUT)
        .max_ack_inflight(window.max(1))
        .backpressure_on_inflight(true)
        .build(client)
}

async fn connect(addr: &ServerAddr) -> Result<Client, async_nats::ConnectError> {
    async_nats::ConnectOptions::new()
        .name("eventmesh-bench")
        .connection_timeout(CONNECT_TIMEOUT)
        .request_timeout(Some(REQUEST_TIMEOUT))
        .connect(addr.clone())
        .await
}

fn unreachable(url: &str, cause: &async_nats::ConnectError) -> anyhow::Error {
    anyhow!("cannot reach NATS at {url}: {cause}")
}

/// The server of a `nats://HOST:PORT` target; the scheme may be left out
/// (`HOST:PORT`), the port defaults to 4222, `tls://` asks for TLS.
fn server_addr(url: &str) -> Result<ServerAddr> {
    let addr = ServerAddr::from_str(url.trim())
        .map_err(|e| anyhow!("invalid NATS URL {url:?} (expected nats://HOST:PORT): {e}"))?;
    let u = addr.clone().into_inner();
    if !matches!(u.scheme(), "nats" | "tls") {
        bail!("invalid NATS URL {url:?}: use nats://HOST:PORT (or tls://HOST:PORT)");
    }
    if u.host_str().is_none_or(str::is_empty) {
        bail!("invalid NATS URL {url:?}: no host");
    }
    if !matches!(u.path(), "" | "/") || u.query().is_some() || u.fragment().is_some() {
        bail!("invalid NATS URL {url:?}: a NATS URL has no path or query");
    }
    Ok(addr)
}

/// Deletes the run's stream if it exists and creates it again, empty.
async fn recreate_stream(js: &jetstream::Context, topic: &str) -> Result<stream::Stream> {
    check_subject(topic)?;
    let name = stream_name(topic);
    match js.delete_stream(&name).await {
        Ok(_) => {}
        Err(e) if is_not_found(e.kind()) => {}
        Err(e) => {
            return Err(anyhow!(e)).with_context(|| {
                format!("deleting the stream {name} of an earlier run (is JetStream enabled: nats-server -js?)")
            })
        }
    }
    js.create_stream(stream::Config {
        name: name.clone(),
        subjects: vec![topic.to_owned()],
        storage: StorageType::File,
        num_replicas: 1,
        ..Default::default()
    })
    .await
    .with_context(|| {
        format!(
            "creating the stream {name} for subject {topic:?} (does another stream capture it?)"
        )
    })
}

fn is_not_found(kind: GetStreamErrorKind) -> bool {
    matches!(kind, GetStreamErrorKind::JetStream(e) if e.error_code() == ErrorCode::STREAM_NOT_FOUND)
}

/// The stream of a topic: stream names may not hold `.`, `*`, `>`, path
/// separators or whitespace.
fn stream_name(topic: &str) -> String {
    let safe: String = topic
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("eventmesh-bench-{safe}")
}

/// The topic is published to as a NATS subject: dot-separated non-empty
/// tokens, no whitespace, no wildcards.
fn check_subject(topic: &str) -> Result<()> {
    let ok = !topic.is_empty()
        && !topic.chars().any(char::is_whitespace)
        && topic
            .split('.')
            .all(|t| !t.is_empty() && t != "*" && t != ">");
    if !ok {
        bail!(
            "topic {topic:?} is not a NATS subject (dot-separated tokens, no spaces or wildcards)"
        );
    }
    Ok(())
}

/// A payload of `size` bytes (at least [`STAMP_LEN`]) starting with
/// `since_start` as little-endian nanoseconds.
fn stamped_payload(since_start: Duration, size: usize) -> Bytes {
    let nanos = u64::try_from(since_start.as_nanos()).unwrap_or(u64::MAX);
    let mut b = BytesMut::with_capacity(size.max(STAMP_LEN));
    b.put_u64_le(nanos);
    b.resize(size.max(STAMP_LEN), b'x');
    b.freeze()
}

/// The due time carried by a [`stamped_payload`], as time since
/// [`Recorder::start`].
fn due_offset(payload: &[u8]) -> Option<Duration> {
    let stamp: [u8; STAMP_LEN] = payload.get(..STAMP_LEN)?.try_into().ok()?;
    Some(Duration::from_nanos(u64::from_le_bytes(stamp)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamp_round_trips_and_pads() {
        let d = Duration::from_nanos(12_345_678_901);
        let p = stamped_payload(d, 1024);
        assert_eq!(p.len(), 1024);
        assert_eq!(due_offset(&p), Some(d));
        assert!(p[STAMP_LEN..].iter().all(|&b| b == b'x'));
        // Too small for the stamp: grown to hold it.
        let p = stamped_payload(Duration::from_secs(3), 2);
        assert_eq!(p.len(), STAMP_LEN);
        assert_eq!(due_offset(&p), Some(Duration::from_secs(3)));
        assert_eq!(due_offset(b"short"), None);
        assert_eq!(
            due_offset(&[1, 0, 0, 0, 0, 0, 0, 0]),
            Some(Duration::from_nanos(1))
        );
    }

    #[test]
    fn urls() {
        let a = server_addr("nats://127.0.0.1:4333").unwrap();
        assert_eq!((a.host(), a.port()), ("127.0.0.1", 4333));
        let a = server_addr(" nats://localhost:4333/ ").unwrap();
        assert_eq!((a.host(), a.port()), ("localhost", 4333));
        let a = server_addr("127.0.0.1:4333").unwrap();
        assert_eq!((a.host(), a.port()), ("127.0.0.1", 4333));
        let a = server_addr("nats://example.com").unwrap();
        assert_eq!(a.port(), 4222);
        assert!(server_addr("tls://example.com:4443")
            .unwrap()
            .tls_required());
        for bad in [
            "http://127.0.0.1:4222",
            "ws://127.0.0.1:8080",
            "nats://",
            "nats://h:4222/stream",
            "nats://h:4222?x=1",
            "nats://h:notaport",
        ] {
            assert!(server_addr(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn subjects_and_stream_names() {
        for ok in ["bench", "bench.e2e", "orders/v1", "a-b_c"] {
            assert!(check_subject(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a b", "a..b", ".a", "a.", "a.*", ">", "a.>"] {
            assert!(check_subject(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            stream_name("bench.e2e/x y"),
            "eventmesh-bench-bench_e2e_x_y"
        );
        assert_eq!(stream_name("bench"), "eventmesh-bench-bench");
    }

    fn workload(topic: &str) -> Workload {
        Workload {
            size: 1024,
            publishers: 2,
            subscribers: 2,
            batch: 1,
            window: 32,
            count: None,
            duration: Some(Duration::from_millis(1500)),
            warmup: Duration::from_millis(500),
            rate: None,
            topic: topic.to_owned(),
        }
    }

    #[tokio::test]
    async fn unreachable_server_is_a_clear_error() {
        // A port nothing listens on: bind one, then free it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("nats://127.0.0.1:{port}");
        let w = workload("bench");
        let rec = Arc::new(Recorder::new(&w));
        let e = publish(&url, &w, &rec).await.unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("cannot reach NATS at {url}: ")),
            "{e}"
        );
        let e = pubsub("http://x", &w, &rec).await.unwrap_err().to_string();
        assert!(e.contains("invalid NATS URL"), "{e}");
    }

    /// A `nats-server -js` of its own (loopback, a free port, a temporary
    /// store), killed when dropped. Fails, never skips, when the binary is
    /// missing (Debian/Ubuntu: `apt-get install nats-server`).
    struct NatsServer {
        child: std::process::Child,
        url: String,
        _store: tempfile::TempDir,
    }

    impl NatsServer {
        fn start() -> NatsServer {
            let path = std::env::var_os("PATH").unwrap_or_default();
            let bin = std::env::split_paths(&path)
                .chain([std::path::PathBuf::from("/usr/sbin")])
                .map(|d| d.join("nats-server"))
                .find(|p| p.is_file())
                .expect(
                    "`nats-server` was not found on PATH or in /usr/sbin; this test needs a \
                     real NATS server with JetStream (Debian/Ubuntu: `apt-get install nats-server`)",
                );
            let store = tempfile::tempdir().expect("tempdir for the NATS store");
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free localhost port")
                .port();
            let log = store.path().join("nats.log");
            let child = std::process::Command::new(&bin)
                .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
                .arg(store.path())
                .arg("-l")
                .arg(&log)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
            let server = NatsServer {
                child,
                url: format!("nats://127.0.0.1:{port}"),
                _store: store,
            };
            let ready = std::time::Instant::now() + Duration::from_secs(20);
            loop {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                if text.contains("Server is ready") {
                    return server;
                }
                assert!(
                    std::time::Instant::now() < ready,
                    "nats-server did not become ready within 20 s; its log:\n{text}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    impl Drop for NatsServer {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// Runs every workload briefly against a real NATS server (JetStream
    /// enabled, default sync policy: with `sync_interval: always` the rate
    /// below is not sustained): the one named by `EVENTMESH_BENCH_NATS_URL`,
    /// else one started for the test.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn against_a_real_server() {
        let (url, _own) = match std::env::var("EVENTMESH_BENCH_NATS_URL") {
            Ok(url) => (url, None),
            Err(_) => {
                let server = NatsServer::start();
                (server.url.clone(), Some(server))
            }
        };

        let w = workload("eventmesh-bench.test.pub");
        let rec = Arc::new(Recorder::new(&w));
        publish(&url, &w, &rec).await.unwrap();
        let s = rec.summary();
        eprintln!("publish: {s}");
        assert!(s.events > 100, "{s:?}");
        assert!(s.errors.is_empty(), "{s:?}");
        assert!(s.p50_ms > 0.0 && s.p50_ms <= s.p99_ms && s.p99_ms <= s.max_ms);

        // Paced: the rate is held, one publisher, two subscribers sharing
        // the work queue.
        let mut w = workload("eventmesh-bench.test.e2e");
        w.publishers = 1;
        w.rate = Some(2000.0);
        let rec = Arc::new(Recorder::new(&w));
        pubsub(&url, &w, &rec).await.unwrap();
        let s = rec.summary();
        eprintln!("pubsub: {s}");
        assert!(s.errors.is_empty(), "{s:?}");
        let expected = 2000.0 * w.duration.unwrap().as_secs_f64();
        assert!(
            (s.events as f64 - expected).abs() <= expected * 0.02,
            "{s:?}"
        );
        assert!(s.p50_ms > 0.0 && s.p50_ms < 100.0, "{s:?}");

        // A second run on the same topic starts from an empty stream.
        let rec = Arc::new(Recorder::new(&w));
        pubsub(&url, &w, &rec).await.unwrap();
        let s2 = rec.summary();
        assert!(s2.errors.is_empty(), "{s2:?}");
        assert!(
            (s2.events as f64 - expected).abs() <= expected * 0.02,
            "{s2:?}"
        );

        // A backlog of 3000, drained by two subscribers.
        let mut w = workload("eventmesh-bench.test.sub");
        w.count = Some(3000);
        w.duration = Some(Duration::from_secs(20));
        let rec = Arc::new(Recorder::held(&w));
        sub(&url, &w, &rec).await.unwrap();
        let s = rec.summary();
        eprintln!("sub: {s}");
        assert!(s.errors.is_empty(), "{s:?}");
        assert_eq!(s.events, 3000, "{s:?}");
        assert!(s.p50_ms > 0.0 && s.p50_ms <= s.p99_ms && s.p99_ms <= s.max_ms);

        // Core request-reply.
        let w = workload("eventmesh-bench.test.request");
        let rec = Arc::new(Recorder::new(&w));
        request(&url, &w, &rec).await.unwrap();
        let s = rec.summary();
        eprintln!("request: {s}");
        assert!(s.events > 100, "{s:?}");
        assert!(s.errors.is_empty(), "{s:?}");
        assert!(s.p50_ms > 0.0 && s.p50_ms <= s.p99_ms && s.p99_ms <= s.max_ms);
    }
}
