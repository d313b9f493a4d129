//! Core NATS request-reply (no JetStream, nothing stored): the `request`
//! workload, its responders (one queue group, each request answered with
//! a 2-byte reply) and its requesters (each keeping `window` requests in
//! flight on the schedule). The requesters start only once one request was
//! answered, so the responders' interest has reached the server; every
//! requester waits for its outstanding requests, each bounded by its
//! timeout, before it ends.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use async_nats::{Client, RequestErrorKind, ServerAddr, Subject};
use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{sleep, Instant};

use super::clients::join_all;
use super::conn::{check_subject, connect, server_addr, unreachable};
use super::{READY_WAIT, RESPONDERS};
use crate::workload::{Local, Recorder, Schedule, Workload};

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

pub(super) fn request_error_kind(e: &async_nats::RequestError, what: &'static str) -> &'static str {
    match (e.kind(), what) {
        (RequestErrorKind::TimedOut, "ack") => "ack_timeout",
        (RequestErrorKind::TimedOut, _) => "request_timeout",
        (RequestErrorKind::NoResponders, _) => "no_responders",
        (_, "ack") => "ack",
        _ => "request",
    }
}
