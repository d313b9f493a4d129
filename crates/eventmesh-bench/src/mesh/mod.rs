//! The workloads against the runtime itself, written once over a
//! [`Link`] and run over any transport (`--transport tcp|ws|http`: see
//! [`tcp`], [`ws`] and [`http`] for how each maps operations to its wire
//! protocol):
//!
//! - [`publish`] (`pub`): `--publishers` connections, each keeping up to
//!   `--window` publishes in flight (pipelined on TCP and WebSocket,
//!   concurrent requests on HTTP, where `--batch` events go in one
//!   `/events/publish-batch` request). Latency: from the publish's due
//!   time to its answer (the event is durable).
//! - [`pubsub`]: subscribers in one load-balanced group (from `latest`)
//!   receive and ack; publishers send events whose id carries their due
//!   time. Latency: from that due time to the receipt.
//! - [`sub`]: consumer throughput of a backlog. `--count` events are
//!   prefilled flat out over the same transport (`--publishers`
//!   connections, `max(--window, 64)` in flight each; over HTTP in
//!   batches of `--batch`), not measured; then the measured window starts
//!   and `--subscribers` subscribers in a new group drain the topic from
//!   `earliest`, until every prefilled event has been received and acked
//!   (or `--duration` passed). Latency: the ack round trip (the ack is
//!   issued on receipt, its answer completes it) where the protocol
//!   answers acks (TCP `OK`, HTTP `200`; over HTTP at most 64 acks per
//!   subscriber are in flight, and an ack's time includes its wait for
//!   one of them); an event counts once its ack is answered. Over
//!   WebSocket, which answers only failed acks, the latency is the
//!   publish-to-receive time, which includes the wait in the backlog, and
//!   an event counts on receipt. Warm-up does not apply.
//! - [`request`]: `--subscribers` responders (one load-balanced group,
//!   over the chosen transport) answer each request event with a small
//!   reply carrying its `correlationid` and ack it (a WebSocket `reply`
//!   message and an ack, `POST /events/reply` and `/events/ack`, or one
//!   TCP `REPLY_ACK` frame); `--publishers`
//!   requesters each keep `--window` requests in flight: TCP `REQUEST`
//!   frames over `--transport tcp`, else `POST /events/request` (WebSocket
//!   has no request operation). Latency: from the request's due time to
//!   its reply.
//!
//! Every run uses a new group and new client ids, and removes its
//! subscriptions at the end.

mod feed;
mod http;
pub(crate) mod link;
mod tcp;
mod ws;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{sleep, sleep_until, Instant};

use self::feed::{group_filter, reply_json, Feed, REPLIES, SELECTED};
use self::link::{In, Link, Op, Subscription};
use crate::run::Transport;
use crate::stats;
use crate::workload::{self, Local, Quota, Receipt, Recorder, Schedule, Seen, Workload};

/// How long publishers wait for the answers still outstanding once they
/// stop, and subscribers for the events still on their way.
const DRAIN: Duration = Duration::from_secs(10);
/// Publishes in flight per prefill connection, at least.
const PREFILL_WINDOW: usize = 64;
/// How long a paced publisher that is behind schedule keeps sending the
/// slots that fell due before the run stopped.
const CATCH_UP: Duration = Duration::from_millis(100);

/// The runtime as a target: its addresses and the transport to use.
pub struct Mesh {
    transport: Transport,
    /// The HTTP traffic port's base URL (HTTP and WebSocket).
    server: String,
    /// Where subscribers connect (HTTP and WebSocket), `server` unless
    /// told otherwise.
    sub_server: String,
    /// The TCP port, `HOST:PORT`.
    tcp: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Mesh {
    pub fn new(
        transport: Transport,
        server: &str,
        tcp: &str,
        token: Option<&str>,
        w: &Workload,
    ) -> Result<Mesh> {
        let pool = w.publishers * w.window.max(PREFILL_WINDOW)
            + w.subscribers * (http::ACKS_IN_FLIGHT + 1);
        Ok(Mesh {
            transport,
            server: server.to_owned(),
            sub_server: server.to_owned(),
            tcp: tcp.to_owned(),
            token: token.map(str::to_owned),
            http: stats::client(
                pool.min(4096),
                http::REQUEST_TIMEOUT + Duration::from_secs(20),
            )?,
        })
    }

    /// The same target, its subscribers connecting at `server` (when given).
    pub fn subscribing_at(mut self, server: Option<&str>) -> Mesh {
        if let Some(s) = server {
            self.sub_server = s.to_owned();
        }
        self
    }

    /// A link for `client_id` over `transport`, subscribed to `topic`
    /// when `sub` is given (the soak's consumers use it too).
    pub(crate) async fn connect(
        &self,
        transport: Transport,
        client_id: &str,
        topic: &str,
        sub: Option<&Subscription>,
        window: usize,
    ) -> Result<Link> {
        let token = self.token.as_deref();
        let server = match sub {
            Some(_) => &self.sub_server,
            None => &self.server,
        };
        match transport {
            Transport::Tcp => {
                let subs = sub.map(std::slice::from_ref).unwrap_or_default();
                tcp::connect(&self.tcp, token, client_id, topic, subs).await
            }
            Transport::Ws => ws::connect(server, &self.http, token, client_id, topic, sub).await,
            Transport::Http => {
                http::connect(server, &self.http, token, client_id, topic, sub, window).await
            }
        }
    }
}

/// `pub`: publish throughput and publish-to-answer latency.
pub async fn publish(m: &Mesh, w: &Workload, rec: &Arc<Recorder>) -> Result<()> {
    let plan = Plan {
        op: OpKind::Publish,
        feed: Feed::counted(w),
        window: w.window,
        on_ok: OnOk::Record,
    };
    run_publishers(m, m.transport, w, rec, plan, &Run::new().id("pub")).await
}

/// `pubsub`: publish-to-receive latency through one group.
pub async fn pubsub(m: &Mesh, w: &Workload, rec: &Arc<Recorder>) -> Result<()> {
    let run = Run::new();
    let subs = Group::start(m, w, rec, Role::Latency, &run, "latest").await?;
    let published = Arc::new(AtomicU64::new(0));
    let plan = Plan {
        op: OpKind::Publish,
        feed: Feed::stamped(w, Quota::new(u64::MAX)),
        window: w.window,
        on_ok: OnOk::Count(published.clone()),
    };
    let outcome = run_publishers(m, m.transport, w, rec, plan, &run.id("pub")).await;
    let published = published.load(Ordering::Relaxed);
    let deadline = Instant::now() + DRAIN;
    while outcome.is_ok() && subs.received() < published && Instant::now() < deadline {
        sleep(Duration::from_millis(5)).await;
    }
    let received = subs.stop(rec).await;
    rec.error("missing", published.saturating_sub(received));
    outcome
}

/// `sub`: prefills `w.count` events, then measures how fast subscribers
/// drain them.
pub async fn sub(m: &Mesh, w: &Workload, rec: &Arc<Recorder>) -> Result<()> {
    let count = w.count.context("sub needs a count of events to prefill")?;
    let run = Run::new();
    let prefill = Workload {
        rate: None,
        window: w.window.max(PREFILL_WINDOW),
        ..w.clone()
    };
    let plan = Plan {
        op: OpKind::Publish,
        feed: Feed::stamped(&prefill, Quota::new(count)),
        window: prefill.window,
        on_ok: OnOk::Count(rec.prefilled().clone()),
    };
    run_publishers(m, m.transport, &prefill, rec, plan, &run.id("fill")).await?;
    let prefilled = rec.prefilled().load(Ordering::Relaxed);
    if prefilled == 0 {
        bail!(
            "the prefill published nothing ({})",
            stats::format_errors(&rec.summary().errors)
        );
    }

    // With --select, only one event in k comes: seq 0, k, 2k, ...
    let wanted = match w.select {
        Some(k) => prefilled.div_ceil(k),
        None => prefilled,
    };
    rec.measure_now(wanted);
    let role = Role::Drain(Arc::new(Seen::new(count)));
    let subs = Group::start(m, w, rec, role, &run, "earliest").await?;
    while !rec.done() {
        sleep(Duration::from_millis(5)).await;
    }
    subs.stop(rec).await;
    Ok(())
}

/// `request`: request-reply latency through responders in one group.
pub async fn request(m: &Mesh, w: &Workload, rec: &Arc<Recorder>) -> Result<()> {
    let run = Run::new();
    let responders = Group::start(m, w, rec, Role::Respond, &run, "latest").await?;
    let plan = Plan {
        op: OpKind::Request,
        feed: Feed::counted(w),
        window: w.window,
        on_ok: OnOk::Record,
    };
    // WebSocket has no request operation: its requests go over HTTP.
    let transport = match m.transport {
        Transport::Tcp => Transport::Tcp,
        _ => Transport::Http,
    };
    let outcome = run_publishers(m, transport, w, rec, plan, &run.id("req")).await;
    responders.stop(rec).await;
    outcome
}

/// The names of one run: a new group, and client ids under it.
struct Run(String);

impl Run {
    fn new() -> Run {
        Run(format!("bench-{}", uuid::Uuid::now_v7().simple()))
    }

    /// The client id prefix of a role (`pub`, `sub`, ...).
    fn id(&self, role: &str) -> String {
        format!("{}-{role}", self.0)
    }
}

#[derive(Clone, Copy)]
enum OpKind {
    Publish,
    Request,
}

/// What a publisher does with a successful answer.
enum OnOk {
    /// Records the latency from the due time (`pub`, `request`).
    Record,
    /// Counts the events (`pubsub`, a prefill: the subscribers measure).
    Count(Arc<AtomicU64>),
}

/// What every publisher of a run does.
struct Plan {
    op: OpKind,
    feed: Feed,
    window: usize,
    on_ok: OnOk,
}

/// Connects `w.publishers` links (as `<prefix>-<i>`), runs a publisher on
/// each, on staggered slots of the workload's rate, until all are done.
async fn run_publishers(
    m: &Mesh,
    transport: Transport,
    w: &Workload,
    rec: &Arc<Recorder>,
    plan: Plan,
    prefix: &str,
) -> Result<()> {
    let plan = Arc::new(plan);
    let mut links = Vec::with_capacity(w.publishers);
    for i in 0..w.publishers.max(1) {
        let id = format!("{prefix}-{i}");
        match m.connect(transport, &id, &w.topic, None, plan.window).await {
            Ok(l) => links.push(l),
            Err(e) => {
                close_all(links).await;
                return Err(e);
            }
        }
    }
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for (i, link) in links.into_iter().enumerate() {
        let schedule = w.schedule(start, i);
        tasks.spawn(publisher(link, schedule, plan.clone(), w.size, rec.clone()));
    }
    join(tasks, rec).await;
    Ok(())
}

async fn close_all(links: Vec<Link>) {
    futures::future::join_all(links.into_iter().map(Link::close)).await;
}

/// Sends on schedule while the window has room, until the run is done (or
/// the quota used up), then waits up to [`DRAIN`] for the answers still
/// outstanding (those that never come count as `no_answer`).
async fn publisher(
    mut link: Link,
    mut schedule: Schedule,
    plan: Arc<Plan>,
    size: usize,
    rec: Arc<Recorder>,
) -> Local {
    let rec = &*rec;
    let mut local = rec.local();
    let window = plan.window.max(1);
    let mut inflight: HashMap<u64, (Instant, u32)> = HashMap::with_capacity(window);
    let mut id = 0u64;
    let mut sending = true;
    let mut stopped_at = None;
    let mut deadline = None;
    loop {
        if sending && rec.done() {
            // Paced: slots that fell due before the stop are still sent
            // (late, with their due time) for a moment, so a publisher a
            // little behind keeps its last events; one far behind does not
            // prolong the run.
            let at = *stopped_at.get_or_insert_with(Instant::now);
            sending = matches!(schedule.next_slot(),
                Some(slot) if slot < at && Instant::now() < at + CATCH_UP);
        }
        if !sending {
            if inflight.is_empty() {
                break;
            }
            deadline.get_or_insert_with(|| Instant::now() + DRAIN);
        }
        let room = sending && inflight.len() < window;
        let give_up = deadline.unwrap_or_else(|| Instant::now() + DRAIN);
        tokio::select! {
            biased;
            got = link.recv() => match got.unwrap_or(In::Closed(None)) {
                In::Done { id, result } => {
                    let Some((due, events)) = inflight.remove(&id) else { continue };
                    match (result, &plan.on_ok) {
                        (Ok(()), OnOk::Record) => {
                            let n = u64::from(events);
                            local.record(rec, due, Instant::now(), n, n * size as u64);
                        }
                        (Ok(()), OnOk::Count(c)) => {
                            c.fetch_add(u64::from(events), Ordering::Relaxed);
                        }
                        (Err(code), _) => local.error(&code),
                    }
                }
                In::Error(kind) => local.error(&kind),
                In::Delivery { .. } => {}
                In::Closed(why) => {
                    local.error(why.as_deref().unwrap_or("connection_closed"));
                    local.errors("no_answer", inflight.len() as u64);
                    inflight.clear();
                    break;
                }
            },
            due = schedule.tick(), if room => match plan.feed.next(rec.start(), due) {
                Some((body, events)) => {
                    id += 1;
                    inflight.insert(id, (due, events));
                    link.send(match plan.op {
                        OpKind::Publish => Op::Publish { id, body, events },
                        OpKind::Request => Op::Request { id, body },
                    });
                }
                None => sending = false,
            },
            _ = sleep_until(give_up), if deadline.is_some() => {
                local.errors("no_answer", inflight.len() as u64);
                break;
            }
        }
    }
    link.close().await;
    local
}

/// What subscribers do with each delivery (besides acking it).
enum Role {
    /// `pubsub`: record the publish-to-receive latency.
    Latency,
    /// `sub`: count first receipts of the prefilled events; latency is the
    /// ack round trip where acks are answered, else publish-to-receive.
    Drain(Arc<Seen>),
    /// `request`: answer each request with a reply.
    Respond,
}

/// The fields of a received event the workloads read.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow, default)]
    correlationid: Option<Cow<'a, str>>,
}

/// Ids of a subscriber's own operations: acks even, replies odd.
fn ack_id(n: u64) -> u64 {
    n << 1
}

fn reply_id(n: u64) -> u64 {
    n << 1 | 1
}

/// The subscribers of a run: `w.subscribers` links subscribed to the
/// topic in the run's group, each with its subscriber task.
struct Group {
    tasks: JoinSet<Local>,
    stop: watch::Sender<bool>,
    /// Events received (`pubsub`).
    received: Arc<AtomicU64>,
}

impl Group {
    async fn start(
        m: &Mesh,
        w: &Workload,
        rec: &Arc<Recorder>,
        role: Role,
        run: &Run,
        from: &'static str,
    ) -> Result<Group> {
        // One group, or with --groups one per `benchgroup` value.
        let groups: Vec<(String, Option<serde_json::Value>)> = match w.groups {
            Some(n) => (0..n)
                .map(|k| (format!("{}-g{k}", run.0), Some(group_filter(k))))
                .collect(),
            None => vec![(
                run.0.clone(),
                w.select
                    .map(|_| serde_json::json!([{"exact": {"type": SELECTED}}])),
            )],
        };
        let mut links = Vec::with_capacity(w.subscribers * groups.len());
        if let Some(n) = w.links {
            // The groups spread over n TCP connections, each subscribing
            // its client to its share.
            if m.transport != Transport::Tcp {
                bail!("--links applies to --transport tcp");
            }
            for i in 0..n as usize {
                let subs: Vec<Subscription> = groups
                    .iter()
                    .skip(i)
                    .step_by(n as usize)
                    .map(|(group, filters)| Subscription {
                        group: group.clone(),
                        from,
                        filters: filters.clone(),
                    })
                    .collect();
                let id = format!("{}-{i}", run.id("sub"));
                match tcp::connect(&m.tcp, m.token.as_deref(), &id, &w.topic, &subs).await {
                    Ok(l) => links.push(l),
                    Err(e) => {
                        close_all(links).await;
                        return Err(e);
                    }
                }
            }
        }
        let groups = if w.links.is_some() {
            Vec::new()
        } else {
            groups
        };
        for (g, (group, filters)) in groups.into_iter().enumerate() {
            let sub = Subscription {
                group,
                from,
                filters,
            };
            for i in 0..w.subscribers.max(1) {
                let id = format!("{}-{g}-{i}", run.id("sub"));
                match m.connect(m.transport, &id, &w.topic, Some(&sub), 0).await {
                    Ok(l) => links.push(l),
                    Err(e) => {
                        close_all(links).await;
                        return Err(e);
                    }
                }
            }
        }
        let (stop, stopped) = watch::channel(false);
        let received = Arc::new(AtomicU64::new(0));
        let role = Arc::new(role);
        let mut tasks = JoinSet::new();
        for link in links {
            tasks.spawn(subscriber(
                link,
                role.clone(),
                w.size as u64,
                rec.clone(),
                received.clone(),
                stopped.clone(),
            ));
        }
        Ok(Group {
            tasks,
            stop,
            received,
        })
    }

    fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// Stops the subscribers (they close their links, which removes their
    /// subscriptions); returns the events received.
    async fn stop(self, rec: &Recorder) -> u64 {
        let _ = self.stop.send(true);
        join(self.tasks, rec).await;
        self.received.load(Ordering::Relaxed)
    }
}

/// Receives, handles and acks deliveries until told to stop.
async fn subscriber(
    mut link: Link,
    role: Arc<Role>,
    size: u64,
    rec: Arc<Recorder>,
    received: Arc<AtomicU64>,
    mut stop: watch::Receiver<bool>,
) -> Local {
    let rec = &*rec;
    let mut local = rec.local();
    let round_trips = matches!(*role, Role::Drain(_)) && link.acks_answered();
    let mut acks: HashMap<u64, Instant> = HashMap::new();
    let mut n = 0u64;
    loop {
        let got = tokio::select! {
            biased;
            _ = stop.changed() => break,
            got = link.recv() => got,
        };
        let now = Instant::now();
        match got.unwrap_or(In::Closed(None)) {
            In::Delivery { delivery, event } => {
                n += 1;
                let head = serde_json::from_slice::<Head>(&event).ok();
                let stamp = head
                    .as_ref()
                    .and_then(|h| workload::parse_stamp(rec.start(), &h.id));
                match (&*role, stamp) {
                    (Role::Latency, Some((due, _))) => {
                        received.fetch_add(1, Ordering::Relaxed);
                        local.record(rec, due, now, 1, size);
                    }
                    (Role::Drain(seen), Some((due, seq))) => match seen.insert(seq) {
                        Receipt::First if round_trips => {
                            acks.insert(n, now);
                        }
                        Receipt::First => local.record_latency(
                            rec,
                            now,
                            now.saturating_duration_since(due),
                            1,
                            size,
                        ),
                        Receipt::Again => local.error("duplicate"),
                        Receipt::Unknown => local.error("bad_event"),
                    },
                    (Role::Respond, _) => {
                        match head.as_ref().and_then(|h| h.correlationid.as_deref()) {
                            Some(c) => {
                                let event = reply_json(REPLIES.fetch_add(1, Ordering::Relaxed), c);
                                let id = reply_id(n);
                                if link.replies_with_ack() {
                                    // The reply acks the request's delivery.
                                    link.send(Op::ReplyAck {
                                        id,
                                        delivery,
                                        event,
                                    });
                                    continue;
                                }
                                link.send(Op::Reply { id, event });
                            }
                            None => local.error("no_correlationid"),
                        }
                    }
                    (_, None) => local.error("bad_event"),
                }
                link.send(Op::Ack {
                    id: ack_id(n),
                    delivery,
                });
            }
            In::Done { id, result } => {
                let (kind, k) = match id & 1 {
                    1 => ("reply", id >> 1),
                    _ => ("ack", id >> 1),
                };
                let sent = if kind == "ack" { acks.remove(&k) } else { None };
                match result {
                    Ok(()) => {
                        if let Some(at) = sent {
                            local.record_latency(
                                rec,
                                at,
                                now.saturating_duration_since(at),
                                1,
                                size,
                            );
                        }
                    }
                    Err(code) => local.error(&format!("{kind}_{code}")),
                }
            }
            In::Error(kind) => local.error(&kind),
            In::Closed(why) => {
                local.error(why.as_deref().unwrap_or("connection_closed"));
                break;
            }
        }
    }
    link.close().await;
    local
}

/// Waits for the tasks, merging what each recorded (a task that panicked
/// counts as a `task` error).
async fn join(mut tasks: JoinSet<Local>, rec: &Recorder) {
    while let Some(r) = tasks.join_next().await {
        match r {
            Ok(local) => rec.merge(local),
            Err(_) => rec.error("task", 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_carry_the_correlation() {
        let v: serde_json::Value = serde_json::from_slice(&reply_json(3, "c-\"1")).unwrap();
        assert_eq!(v["correlationid"], "c-\"1");
        assert_eq!(v["specversion"], "1.0");
        let id = v["id"].as_str().unwrap();
        assert!(id.starts_with("reply-") && id.ends_with("-3"), "{id}");
        let reply = reply_json(3, "abc");
        let h: Head = serde_json::from_slice(&reply).unwrap();
        assert_eq!(h.correlationid.as_deref(), Some("abc"));
        assert_eq!(h.id, id, "one prefix per process");
        let next = reply_json(4, "abc");
        let other: Head = serde_json::from_slice(&next).unwrap();
        assert_ne!(other.id, h.id);
        assert_eq!((ack_id(5) >> 1, reply_id(5) >> 1), (5, 5));
        assert_eq!((ack_id(5) & 1, reply_id(5) & 1), (0, 1));
    }

    #[tokio::test]
    async fn feeds_batch_and_stamp_their_events() {
        let mut w = crate::workload::tests::workload();
        w.batch = 3;
        let t0 = Instant::now();
        let due = t0 + Duration::from_millis(2);
        let (body, n) = Feed::counted(&w).next(t0, due).unwrap();
        let v: Vec<serde_json::Value> = serde_json::from_slice(&body).unwrap();
        assert_eq!((n, v.len()), (3, 3));
        assert_eq!(v[2]["data"].as_str().unwrap().len(), w.size);

        // Stamped: the quota ends the feed, the last batch is cut short
        // (and a single event is not an array).
        let feed = Feed::stamped(&w, Quota::new(4));
        let (body, n) = feed.next(t0, due).unwrap();
        let v: Vec<serde_json::Value> = serde_json::from_slice(&body).unwrap();
        assert_eq!(n, 3);
        let ids: Vec<_> = v
            .iter()
            .map(|e| workload::parse_stamp(t0, e["id"].as_str().unwrap()).unwrap())
            .collect();
        assert_eq!(ids, vec![(due, 0), (due, 1), (due, 2)]);
        let (body, n) = feed.next(t0, due).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(n, 1);
        assert_eq!(
            workload::parse_stamp(t0, v["id"].as_str().unwrap()),
            Some((due, 3))
        );
        assert!(feed.next(t0, due).is_none());
    }
}
