//! The runtime's HTTP traffic API (`docs/http-api.md`) as a link: every
//! operation is its own keep-alive request, run concurrently (the
//! workload bounds how many are in flight; acks and replies at most
//! [`ACKS_IN_FLIGHT`] more): `POST /events/publish` (or
//! `/events/publish-batch`), `/events/request`, `/events/reply`,
//! `/events/ack` (one delivery per request: the API has no batch ack). A
//! subscribed link first `POST /events/subscribe`s, then long-polls
//! `GET /events/poll` in a loop of its own; closing stops the poll and
//! unsubscribes.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use reqwest::{StatusCode, Url};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;

use super::link::{error_code, In, Link, Op, Subscription, Unsubscribe};
use crate::stats;

/// How long a request waits for its reply (`timeoutMs`).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Acks and replies one link has in flight beyond the workload's window.
pub const ACKS_IN_FLIGHT: usize = 64;
/// Long-poll wait and batch size of each `GET /events/poll`.
const POLL_WAIT_MS: u64 = 1000;
const POLL_MAX: usize = 500;
/// Pause after a failed poll or a request that got no answer at all, so
/// a dead server is not hammered in a tight loop.
const ERROR_BACKOFF: Duration = Duration::from_millis(10);

const STRUCTURED: &str = "application/cloudevents+json";
const BATCH: &str = "application/cloudevents-batch+json";

struct Urls {
    publish: Url,
    publish_batch: Url,
    request: Url,
    reply: Url,
    ack: Url,
}

/// A link for `client_id` (subscribed to `topic` when `sub` is given)
/// with up to `window` operations of the workload in flight.
pub async fn connect(
    server: &str,
    http: &reqwest::Client,
    token: Option<&str>,
    client_id: &str,
    topic: &str,
    sub: Option<&Subscription>,
    window: usize,
) -> Result<Link> {
    let with_topic = |path: &str| -> Result<Url> {
        let mut u = stats::endpoint(server, path)?;
        u.query_pairs_mut().append_pair("topic", topic);
        Ok(u)
    };
    let mut request = with_topic("events/request")?;
    request
        .query_pairs_mut()
        .append_pair("timeoutMs", &REQUEST_TIMEOUT.as_millis().to_string());
    let urls = Arc::new(Urls {
        publish: with_topic("events/publish")?,
        publish_batch: with_topic("events/publish-batch")?,
        request,
        reply: stats::endpoint(server, "events/reply")?,
        ack: stats::endpoint(server, "events/ack")?,
    });
    let token = token.map(str::to_owned);
    let (ops_tx, ops) = mpsc::unbounded_channel();
    let (answers, answers_rx) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write(
        ops,
        answers.clone(),
        urls,
        http.clone(),
        token.clone(),
        window + ACKS_IN_FLIGHT,
    ));
    let mut link = Link::new(ops_tx, answers_rx, true).task(writer);
    if sub.is_none() {
        // Requests connect lazily: make an unreachable server a clear
        // error now rather than a count of failures (any answer will do).
        let url = stats::endpoint(server, "")?;
        authorized(http.get(url.clone()), token.as_deref())
            .send()
            .await
            .with_context(|| format!("cannot reach the eventmesh HTTP port at {url}"))?;
    }
    if let Some(s) = sub {
        let url = stats::endpoint(server, "events/subscribe")?;
        let mut body = serde_json::json!({
            "clientId": client_id, "topic": topic, "group": s.group, "from": s.from,
        });
        if let Some(f) = &s.filters {
            body["filters"] = f.clone();
        }
        let resp = authorized(http.post(url.clone()).json(&body), token.as_deref())
            .send()
            .await
            .with_context(|| format!("cannot reach the eventmesh HTTP port at {url}"))?;
        let status = resp.status();
        if status != StatusCode::OK {
            let text = resp.text().await.unwrap_or_default();
            bail!("{url} answered {status}: {text}");
        }
        let mut poll = stats::endpoint(server, "events/poll")?;
        poll.query_pairs_mut()
            .append_pair("clientId", client_id)
            .append_pair("timeoutMs", &POLL_WAIT_MS.to_string())
            .append_pair("max", &POLL_MAX.to_string());
        let poller = tokio::spawn(poll_loop(http.clone(), poll, token.clone(), answers));
        link = link
            .background(poller)
            .unsubscribe_on_close(Some(Unsubscribe {
                http: http.clone(),
                url: stats::endpoint(server, "events/unsubscribe")?,
                token,
                client_id: client_id.to_owned(),
            }));
    }
    Ok(link)
}

fn authorized(req: reqwest::RequestBuilder, token: Option<&str>) -> reqwest::RequestBuilder {
    match token {
        Some(t) => req.bearer_auth(t),
        None => req,
    }
}

/// Runs each operation as its own request, at most `limit` at once.
async fn write(
    mut ops: mpsc::UnboundedReceiver<Op>,
    answers: mpsc::UnboundedSender<In>,
    urls: Arc<Urls>,
    http: reqwest::Client,
    token: Option<String>,
    limit: usize,
) {
    let slots = Arc::new(Semaphore::new(limit));
    let mut running = JoinSet::new();
    while let Some(op) = ops.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        while running.try_join_next().is_some() {}
        let (urls, http, token, answers) =
            (urls.clone(), http.clone(), token.clone(), answers.clone());
        running.spawn(async move {
            let (id, result) = call(&urls, &http, token.as_deref(), op).await;
            let _ = answers.send(In::Done { id, result });
            drop(slot);
        });
    }
    while running.join_next().await.is_some() {}
}

/// One operation's request; its id and outcome (the error code on
/// failure).
async fn call(
    urls: &Urls,
    http: &reqwest::Client,
    token: Option<&str>,
    op: Op,
) -> (u64, Result<(), String>) {
    let (id, url, content_type, body, expect) = match op {
        Op::Publish { id, body, events } if events > 1 => {
            (id, &urls.publish_batch, BATCH, body, StatusCode::ACCEPTED)
        }
        Op::Publish { id, body, .. } => (id, &urls.publish, STRUCTURED, body, StatusCode::ACCEPTED),
        Op::Request { id, body } => (id, &urls.request, STRUCTURED, body, StatusCode::OK),
        Op::Reply { id, event } => (id, &urls.reply, STRUCTURED, event, StatusCode::OK),
        Op::ReplyAck { id, .. } => return (id, Err("reply_ack_unsupported".into())),
        Op::Ack { id, delivery } => {
            let body = serde_json::json!({ "deliveryId": delivery }).to_string();
            (
                id,
                &urls.ack,
                "application/json",
                Bytes::from(body),
                StatusCode::OK,
            )
        }
    };
    let req = http
        .post(url.clone())
        .header(reqwest::header::CONTENT_TYPE, content_type)
        .body(body);
    (
        id,
        outcome(authorized(req, token).send().await, expect).await,
    )
}

/// Reads the whole answer (so the connection goes back to the pool):
/// `Ok` with the expected status, else the error code of the body, or
/// `http_<status>`, or the kind of transport failure.
async fn outcome(
    sent: reqwest::Result<reqwest::Response>,
    expect: StatusCode,
) -> Result<(), String> {
    let resp = match sent {
        Ok(r) => r,
        Err(e) => {
            tokio::time::sleep(ERROR_BACKOFF).await;
            return Err(stats::error_kind(&e));
        }
    };
    let status = resp.status();
    let body = resp.bytes().await.map_err(|e| stats::error_kind(&e))?;
    if status == expect {
        return Ok(());
    }
    Err(error_code(&body).unwrap_or_else(|| format!("http_{}", status.as_u16())))
}

#[derive(Deserialize)]
struct Polled<'a> {
    #[serde(rename = "deliveryId")]
    delivery_id: String,
    #[serde(borrow)]
    event: &'a RawValue,
}

/// The deliveries in a poll answer.
fn deliveries(body: &[u8]) -> Result<Vec<In>, serde_json::Error> {
    let polled: Vec<Polled> = serde_json::from_slice(body)?;
    Ok(polled
        .into_iter()
        .map(|p| In::Delivery {
            delivery: p.delivery_id,
            event: Bytes::copy_from_slice(p.event.get().as_bytes()),
        })
        .collect())
}

/// Long-polls until stopped, passing deliveries on.
async fn poll_loop(
    http: reqwest::Client,
    url: Url,
    token: Option<String>,
    answers: mpsc::UnboundedSender<In>,
) {
    loop {
        let got = match authorized(http.get(url.clone()), token.as_deref())
            .send()
            .await
        {
            Ok(r) if r.status() == StatusCode::OK => match r.bytes().await {
                Ok(body) => deliveries(&body).map_err(|_| "poll_bad_answer".to_owned()),
                Err(e) => Err(format!("poll_{}", stats::error_kind(&e))),
            },
            Ok(r) => {
                let status = r.status().as_u16();
                let body = r.bytes().await.unwrap_or_default();
                Err(format!(
                    "poll_{}",
                    error_code(&body).unwrap_or_else(|| format!("http_{status}"))
                ))
            }
            Err(e) => Err(format!("poll_{}", stats::error_kind(&e))),
        };
        match got {
            Ok(ds) => {
                for d in ds {
                    if answers.send(d).is_err() {
                        return;
                    }
                }
            }
            Err(kind) => {
                if answers.send(In::Error(kind)).is_err() {
                    return;
                }
                tokio::time::sleep(ERROR_BACKOFF).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_answers_become_deliveries() {
        let body = br#"[{"deliveryId":"d-1","event":{"specversion":"1.0","id":"1-2","data":"x"}},
                        {"deliveryId":"d-2","event":{"specversion":"1.0","id":"3-4"}}]"#;
        let got = deliveries(body).unwrap();
        assert_eq!(got.len(), 2);
        match &got[0] {
            In::Delivery { delivery, event } => {
                assert_eq!(delivery, "d-1");
                let v: serde_json::Value = serde_json::from_slice(event).unwrap();
                assert_eq!(v["id"], "1-2");
            }
            other => panic!("{other:?}"),
        }
        assert!(deliveries(b"[]").unwrap().is_empty());
        assert!(deliveries(b"{}").is_err());
    }
}
