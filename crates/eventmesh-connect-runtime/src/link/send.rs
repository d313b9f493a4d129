//! How a link's batch goes to the remote: per topic, in requests small
//! enough for the remote's body limit, several at once when the batch is
//! large, and the events of one partition key always in one request after
//! the other, so that they keep their order.
//!
//! - A topic's events are spread over up to [`LANES`] lanes, one per
//!   [`LANE_BYTES`] of JSON: by their partition key's hash, or in turn when
//!   they have none. The lanes' requests go at once.
//! - A lane goes in requests of at most [`REQUEST_BYTES`], one after the
//!   other.
//! - A request refused with a 4xx other than 403 and 429 (an event too
//!   large, one the remote finds invalid, a body over a smaller limit than
//!   ours) is halved, the halves sent one after the other, until the event
//!   at fault is alone: only it is refused.
//! - A request answered 429 (the remote's publish quota) is tried again
//!   after a pause that doubles, in halves when it held several events (a
//!   batch larger than the quota's burst would never pass whole), and
//!   later requests hold at most as many events as the last that passed
//!   ([`LinkSink`]'s `cap`, growing by an eighth with each that passes).
//!   After [`BUSY_FOR`] what is still unsent goes back to the log
//!   ([`Verdict::Later`]) and the link backs off; what passed is kept.

use std::hash::{Hash, Hasher};
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use eventmesh_client::AsEvent;
use eventmesh_connect::{ConnectorError, Verdict};
use eventmesh_core::CloudEvent;
use futures::future::BoxFuture;
use serde_json::Value;

use super::LinkSink;

/// Requests in flight at once for one topic of a batch, at most.
const LANES: usize = 4;
/// JSON bytes of a batch that make one more lane.
const LANE_BYTES: usize = 128 * 1024;
/// The most JSON bytes in one request: half of the remote's default body
/// limit (`eventmesh.http.max.body.bytes`).
const REQUEST_BYTES: usize = 512 * 1024;
/// The most events in one request.
pub(super) const REQUEST_EVENTS: usize = 1000;
/// How long a batch is tried again while the remote answers 429, before it
/// goes back to the log (well within the delivery ack timeout).
const BUSY_FOR: Duration = Duration::from_secs(5);
/// The first pause after a 429, doubling up to [`BUSY_MAX`].
const BUSY_FIRST: Duration = Duration::from_millis(50);
const BUSY_MAX: Duration = Duration::from_secs(1);

/// An event ready to go: its place in the batch, the hash of its partition
/// key, and its structured JSON.
pub(super) struct Ready {
    at: usize,
    key: Option<u64>,
    json: Vec<u8>,
}

impl Ready {
    /// `json`: the event as it is sent, `e` as it was read.
    pub(super) fn new(at: usize, e: &CloudEvent, json: Vec<u8>) -> Ready {
        let key = e.partition_key().map(|k| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            k.hash(&mut h);
            h.finish()
        });
        Ready { at, key, json }
    }
}

impl AsEvent for Ready {
    fn event_bytes(&self) -> eventmesh_client::Result<Vec<u8>> {
        Ok(self.json.clone())
    }

    fn event_value(&self) -> eventmesh_client::Result<Value> {
        serde_json::from_slice(&self.json)
            .map_err(|e| eventmesh_client::Error::InvalidArgument(e.to_string()))
    }
}

/// What became of each event, by its place in the batch.
type Verdicts = Vec<(usize, Verdict)>;

/// How one request ended.
enum Sent {
    /// Per event: whether the remote had it already.
    Stored(Vec<bool>),
    /// Refused for good, with the remote's reason; `per_topic`: for every
    /// event of the topic (403).
    Refused { reason: String, per_topic: bool },
    /// 429: over the remote's quota for now.
    Busy(String),
}

/// When a batch stops being tried again while the remote is busy, and the
/// next pause.
struct Busy {
    until: Instant,
    pause: Duration,
}

impl LinkSink {
    /// Sends one topic's events (`topic` as named at the remote).
    pub(super) async fn send_topic(
        &self,
        topic: String,
        ready: Vec<Ready>,
    ) -> Result<Verdicts, ConnectorError> {
        let bytes: usize = ready.iter().map(|r| r.json.len()).sum();
        let lanes = bytes.div_ceil(LANE_BYTES).clamp(1, LANES);
        let mut by_lane: Vec<Vec<Ready>> = (0..lanes).map(|_| Vec::new()).collect();
        for (k, r) in ready.into_iter().enumerate() {
            let lane = r.key.map_or(k % lanes, |h| (h % lanes as u64) as usize);
            by_lane[lane].push(r);
        }
        let sent = futures::future::join_all(
            by_lane
                .iter()
                .filter(|l| !l.is_empty())
                .map(|l| self.send_lane(&topic, l)),
        )
        .await;
        let mut out = Vec::new();
        for lane in sent {
            out.extend(lane?);
        }
        Ok(out)
    }

    /// One lane: requests of at most [`REQUEST_BYTES`], one after the
    /// other.
    async fn send_lane(&self, topic: &str, lane: &[Ready]) -> Result<Verdicts, ConnectorError> {
        let mut out = Vec::with_capacity(lane.len());
        let mut busy = Busy {
            until: Instant::now() + BUSY_FOR,
            pause: BUSY_FIRST,
        };
        let mut from = 0;
        while from < lane.len() {
            if Instant::now() >= busy.until {
                let why = "the remote stayed over its publish quota; trying again later";
                out.extend(
                    lane[from..]
                        .iter()
                        .map(|r| (r.at, Verdict::Later(why.into()))),
                );
                break;
            }
            let cap = self.cap.load(Ordering::Relaxed).max(1);
            let mut to = from + 1;
            let mut bytes = lane[from].json.len();
            while to < lane.len() && to - from < cap && bytes + lane[to].json.len() <= REQUEST_BYTES
            {
                bytes += lane[to].json.len();
                to += 1;
            }
            out.extend(self.send_request(topic, &lane[from..to], &mut busy).await?);
            from = to;
        }
        Ok(out)
    }

    /// One request; refused for a reason that may be one event's, halved.
    fn send_request<'a>(
        &'a self,
        topic: &'a str,
        events: &'a [Ready],
        busy: &'a mut Busy,
    ) -> BoxFuture<'a, Result<Verdicts, ConnectorError>> {
        Box::pin(async move {
            match self.publish(topic, events).await? {
                Sent::Busy(message) => {
                    if Instant::now() + busy.pause > busy.until {
                        busy.until = Instant::now();
                        return Ok(events
                            .iter()
                            .map(|r| (r.at, Verdict::Later(message.clone())))
                            .collect());
                    }
                    tokio::time::sleep(busy.pause).await;
                    busy.pause = (busy.pause * 2).min(BUSY_MAX);
                    if events.len() == 1 {
                        return self.send_request(topic, events, busy).await;
                    }
                    self.cap.store(events.len() / 2, Ordering::Relaxed);
                    let (first, second) = events.split_at(events.len() / 2);
                    let mut out = self.send_request(topic, first, busy).await?;
                    out.extend(self.send_request(topic, second, busy).await?);
                    Ok(out)
                }
                Sent::Stored(dups) => {
                    let cap = self.cap.load(Ordering::Relaxed);
                    if events.len() >= cap && cap < REQUEST_EVENTS {
                        let grown = cap + (cap / 8).max(1);
                        self.cap.store(grown.min(REQUEST_EVENTS), Ordering::Relaxed);
                    }
                    Ok(events
                        .iter()
                        .enumerate()
                        .map(|(k, r)| match dups.get(k) {
                            Some(true) => (r.at, Verdict::Skipped("duplicate")),
                            _ => (r.at, Verdict::Written),
                        })
                        .collect())
                }
                Sent::Refused { reason, per_topic } if per_topic || events.len() == 1 => Ok(events
                    .iter()
                    .map(|r| (r.at, Verdict::Refused(reason.clone())))
                    .collect()),
                Sent::Refused { .. } => {
                    let (first, second) = events.split_at(events.len() / 2);
                    let mut out = self.send_request(topic, first, busy).await?;
                    out.extend(self.send_request(topic, second, busy).await?);
                    Ok(out)
                }
            }
        })
    }

    async fn publish(&self, topic: &str, events: &[Ready]) -> Result<Sent, ConnectorError> {
        match self.client.publish_batch(topic, events).await {
            Ok(published) => Ok(Sent::Stored(
                published.iter().map(|p| p.duplicate).collect(),
            )),
            Err(e) => {
                let status = e.status().unwrap_or(0);
                if status == 429 {
                    return Ok(Sent::Busy(format!(
                        "publish to {} ({topic}): {e}",
                        self.remote
                    )));
                }
                if e.is_transient() || matches!(status, 0 | 401 | 408) {
                    return Err(ConnectorError::unavailable(format!(
                        "publish to {} ({topic}): {e}",
                        self.remote
                    )));
                }
                Ok(Sent::Refused {
                    reason: format!("the remote cluster {} refused it: {e}", self.remote),
                    per_topic: status == 403,
                })
            }
        }
    }
}
