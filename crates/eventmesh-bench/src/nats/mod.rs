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
//! - [`request()`]: core NATS request-reply, not JetStream (nothing is
//!   stored): responders in one queue group answer each request with a
//!   small reply, requesters keep `window` requests in flight each.
//!
//! The stream is deleted and created again at the start of every run, so
//! messages (and consumers) of earlier runs do not count, and deleted at
//! the end (the CLI picks a new topic per run unless told otherwise, and
//! each run may leave gigabytes behind).
//!
//! This file holds the workloads above except request-reply, and the
//! constants they share; [`request`](mod@request) is core request-reply,
//! [`clients`] the publisher and subscriber tasks, [`conn`] connections,
//! addresses, the stream and consumer, and the stamped payload.
//!
//! The test `against_a_real_server` runs every workload briefly against
//! a real server: the one named by `EVENTMESH_BENCH_NATS_URL` when set,
//! else a `nats-server -js` it starts itself (loopback, a free port, a
//! temporary store), found on `PATH` or in `/usr/sbin`. Without the
//! binary the test fails rather than skips (Debian/Ubuntu:
//! `apt-get install nats-server`).

mod clients;
mod conn;
mod request;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use async_nats::jetstream::stream;
use async_nats::ServerAddr;
use bytes::Bytes;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{sleep, Instant};

use crate::workload::{Quota, Recorder, Seen, Workload};
use clients::{drainer, join_all, spawn_publishers, subscribe, subscriber, Body};
use conn::{
    connect, context, create_consumer, recreate_stream, server_addr, stream_name, unreachable,
};
pub use request::request;

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
