//! Running one connector: a source's read → publish → commit loop, or a
//! sink's consume → write → acknowledge loop, and the status each keeps.
//!
//! Invariants:
//! - A source's position is committed only after the publish of every
//!   record up to it is durable, and the source is told (`commit`) only
//!   after that: a crash anywhere re-reads from the last committed
//!   position, and the re-read records carry the same `source` + `id`, so
//!   the publish deduplication window drops the copies.
//! - A commit refused because the claim moved (`Fenced`) stops the copy at
//!   once: another instance runs the connector now.
//! - A sink acknowledges an event only after `Sink::write` returned `Ok`
//!   for it; a failed write gives the events back (`Nack`), so they are
//!   retried after the delivery backoff and dead-lettered after
//!   `eventmesh.delivery.max.attempts`. A batch that fails is written
//!   again one event at a time, so one bad event does not hold back the
//!   others; a write error never stops the connector (only an open that
//!   cannot work does), and a transient one reopens the sink after the
//!   backoff.
//! - The sink is opened before the stream is attached: no event is handed
//!   out while the outside system cannot take it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eventmesh_connect::{ConnectorError, Kind, Role, Sink, SinkContext, SourceContext, Verdict};
use eventmesh_core::CloudEvent;
use eventmesh_runtime::{Settle, SubscribeRequest};
use eventmesh_state::StartFrom;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::def::Definition;
use super::positions::{Claim, Committed, Positions};
use eventmesh_api::{Api, ApiError, Caller};

/// Events a sink takes at once.
const SINK_BATCH: usize = 500;
/// Events a mesh link takes at once.
const LINK_BATCH: usize = 1000;
/// How often a sink's lag is read again.
const LAG_EVERY: Duration = Duration::from_secs(2);

/// What a running copy reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// `starting`, `running`, `retrying` (an outside error; trying again)
    /// or `failed` (stopped until the definition changes); the admin view
    /// adds `paused` and `unassigned`.
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_ms: Option<u64>,
    /// A source's last committed position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<Value>,
    /// Events published (source) or written (sink) by this copy.
    #[serde(default)]
    pub events: u64,
    /// Records waiting outside (source), or events waiting in the mesh
    /// for the sink's group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag: Option<u64>,
    /// A mesh link's remote cluster, once it connected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    /// A mesh link's lag in seconds: the age of the oldest event it holds
    /// unsent (by its `time`), 0 when none waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_seconds: Option<f64>,
    /// When this copy started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<u64>,
}

pub type SharedStatus = Arc<Mutex<Status>>;

pub(crate) fn set(status: &SharedStatus, f: impl FnOnce(&mut Status)) {
    f(&mut status.lock().expect("status lock"));
}

/// A running copy's settings.
pub struct Runner {
    pub api: Api,
    pub def: Definition,
    pub kind: Kind,
    pub positions: Arc<dyn Positions>,
    pub claim: Option<Claim>,
    /// This cluster's name.
    pub cluster: Arc<str>,
    pub status: SharedStatus,
    /// A link's oldest unsent event's `time` (Unix ms; 0: none), kept
    /// across its sessions.
    pub unsent_since: AtomicU64,
    pub stop: CancellationToken,
    pub backoff: (Duration, Duration),
    pub metrics: Arc<eventmesh_runtime::Metrics>,
}

/// How a runner ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    Stopped,
    /// Its claim moved: another instance runs it.
    Fenced,
    /// A config error: stays failed until the definition changes.
    Failed,
}

/// A step's outcome: `Err` ends the copy.
type Step<T> = Result<T, Ended>;

impl Runner {
    /// The caller the connector acts as: its own identity, as a session
    /// the gate takes as authenticated; every operation is still checked
    /// by the ACL, quotas and audit.
    pub fn caller(def: &Definition) -> Caller {
        let mut caller = Caller::new(eventmesh_security::Transport::Connector, None, None);
        caller.session = Some(Arc::new(def.identity()));
        caller
    }

    /// Runs the copy until it is stopped, fenced or fails: one session
    /// (an opened source or sink) after another, the backoff between them.
    pub async fn run(self) -> Ended {
        set(&self.status, |s| s.state = "starting".into());
        let caller = Self::caller(&self.def);
        let mut delay = self.backoff.0;
        loop {
            let session = match self.kind.role() {
                Role::Source => self.source_session(&caller, &mut delay).await,
                Role::Sink => self.sink_session(&caller, &mut delay).await,
            };
            if let Err(ended) = session {
                if self.is_link() {
                    self.metrics.link_state(&self.def.name, None);
                }
                return ended;
            }
        }
    }

    /// `fut`, unless the copy is stopped first.
    async fn until_stopped<T>(&self, fut: impl Future<Output = T>) -> Step<T> {
        tokio::select! {
            v = fut => Ok(v),
            _ = self.stop.cancelled() => Err(Ended::Stopped),
        }
    }

    /// Waits `delay` (unless stopped) and doubles it up to the maximum.
    async fn back_off(&self, delay: &mut Duration) -> Step<()> {
        if self.is_link() {
            // What waits grows while the remote is away: shown as it does.
            let since = match self.unsent_since.load(Ordering::Relaxed) {
                0 => None,
                t => Some(t),
            };
            self.refresh_lag(since).await;
        }
        let wait = *delay;
        *delay = (*delay * 2).min(self.backoff.1);
        self.until_stopped(tokio::time::sleep(wait)).await
    }

    /// Records a failure worth trying again, counted by `reason`. The
    /// message is kept with the connector's secrets hidden (client
    /// libraries often echo the URL they were given).
    fn trouble(&self, reason: &str, message: &str) {
        let message = self.def.redact_message(message);
        set(&self.status, |s| {
            s.state = "retrying".into();
            s.last_error = Some(message);
            s.last_error_ms = Some(eventmesh_core::time::now_ms());
        });
        self.metrics.connector_error(&self.def.name, reason);
    }

    /// Records a failure that stops the copy until its definition changes.
    fn fail(&self, reason: &str, message: &str) -> Ended {
        let shown = self.def.redact_message(message);
        tracing::error!(connector = %self.def.name, error = %shown, "connector failed; it stays stopped until its definition changes");
        self.trouble(reason, message);
        set(&self.status, |s| s.state = "failed".into());
        Ended::Failed
    }

    /// The outbound guard before each open, as names may resolve
    /// elsewhere since the create: a denied IP address is a config error,
    /// a name resolving into a denied range is tried again.
    async fn check_targets(&self) -> Result<(), ConnectorError> {
        if !self.def.target_guard {
            return Ok(());
        }
        for target in self.kind.targets(&self.def.config) {
            if let Err(m) = self.api.check_connector_target(&target).await {
                let literal = target.host.parse::<std::net::IpAddr>().is_ok();
                return Err(if literal {
                    ConnectorError::config(m)
                } else {
                    ConnectorError::unavailable(m)
                });
            }
        }
        Ok(())
    }

    /// After an error of the outside system while opening or reading: a
    /// config error ends the copy; anything else waits the backoff, and
    /// the session ends to be opened again.
    async fn recover(&self, e: &ConnectorError, what: &str, delay: &mut Duration) -> Step<()> {
        let message = format!("{what}: {e}");
        if !e.is_transient() {
            return Err(self.fail("config", &message));
        }
        let shown = self.def.redact_message(&message);
        tracing::warn!(connector = %self.def.name, error = %shown, "connector error; trying again");
        self.trouble(what, &message);
        self.back_off(delay).await
    }

    /// Opens the source and moves its records into the log until
    /// something fails: `Ok` to open it again, `Err` when the copy ends.
    async fn source_session(&self, caller: &Caller, delay: &mut Duration) -> Step<()> {
        let name = &self.def.name;
        let position = match self.positions.load(name).await {
            Ok(p) => p,
            Err(e) => {
                self.trouble("position", &format!("cannot read the position: {e}"));
                return self.back_off(delay).await;
            }
        };
        set(&self.status, |s| s.position = position.clone());
        let ctx = SourceContext {
            connector: name.clone(),
            topic: self.def.topic.clone(),
            position,
            cluster: self.cluster.to_string(),
        };
        if let Err(e) = self.until_stopped(self.check_targets()).await? {
            return self.recover(&e, "open", delay).await;
        }
        let opened = self
            .until_stopped(self.kind.open_source(self.def.config.clone(), ctx))
            .await?;
        let mut source = match opened {
            Ok(s) => s,
            Err(e) => return self.recover(&e, "open", delay).await,
        };
        set(&self.status, |s| s.state = "running".into());
        let mut idle_polls = 0u32;
        loop {
            let records = match self.until_stopped(source.poll()).await? {
                Ok(r) => r,
                Err(e) => return self.recover(&e, "read", delay).await,
            };
            if records.is_empty() {
                idle_polls += 1;
                if idle_polls % 5 == 1 {
                    let lag = source.lag().await;
                    set(&self.status, |s| s.lag = lag);
                }
                continue;
            }
            idle_polls = 0;
            let Some(position) = records.last().map(|r| r.position.clone()) else {
                continue;
            };
            let n = records.len() as u64;
            // In order, one publish per run of records bound for one topic.
            let mut runs: Vec<(Option<String>, Vec<CloudEvent>)> = Vec::new();
            for r in records {
                match runs.last_mut() {
                    Some((topic, events)) if *topic == r.topic => events.push(r.event),
                    _ => runs.push((r.topic, vec![r.event])),
                }
            }
            for (topic, events) in runs {
                let topic = topic.unwrap_or_else(|| self.def.topic.clone());
                self.publish_durably(caller, topic, events, delay).await?;
            }
            self.metrics.connector_events(name, "in", n);
            match self
                .positions
                .commit(name, &position, self.claim.as_ref())
                .await
            {
                Ok(Committed::Done) => {}
                Ok(Committed::Fenced) => {
                    tracing::warn!(connector = %name, "position commit refused: the connector's claim moved; stopping this copy");
                    self.metrics.connector_error(name, "fenced");
                    return Err(Ended::Fenced);
                }
                Err(e) => {
                    // The events are durable; the source reads them again
                    // from the last commit, and they deduplicate.
                    self.trouble("position", &format!("cannot commit the position: {e}"));
                    return self.back_off(delay).await;
                }
            }
            if let Err(e) = source.commit(&position).await {
                let shown = self.def.redact_message(&e.to_string());
                tracing::warn!(connector = %name, error = %shown, "the source could not acknowledge committed records");
            }
            *delay = self.backoff.0;
            set(&self.status, |s| {
                s.state = "running".into();
                s.events += n;
                s.position = Some(position);
            });
        }
    }

    /// Publishes until the events are durable: quotas and unavailability
    /// are waited out; a refusal (the gate, an invalid event) ends the copy.
    async fn publish_durably(
        &self,
        caller: &Caller,
        topic: String,
        events: Vec<CloudEvent>,
        delay: &mut Duration,
    ) -> Step<()> {
        loop {
            let topic = Some(topic.clone());
            let published = self
                .until_stopped(self.api.publish(caller, topic, events.clone(), b""))
                .await?;
            match published {
                Ok(_) => return Ok(()),
                Err(e) if retryable(&e) => {
                    self.trouble("publish", &format!("publish: {}", e.message));
                    self.back_off(delay).await?;
                }
                Err(e) => {
                    let message = format!("publish refused ({}): {}", e.code, e.message);
                    return Err(self.fail("publish_refused", &message));
                }
            }
        }
    }

    /// Opens the sink, then takes the group's events and writes them out
    /// until something fails: `Ok` to open it again, `Err` when the copy
    /// ends.
    async fn sink_session(&self, caller: &Caller, delay: &mut Duration) -> Step<()> {
        let ctx = SinkContext {
            connector: self.def.name.clone(),
            topic: self.def.topic.clone(),
            cluster: self.cluster.to_string(),
        };
        if let Err(e) = self.until_stopped(self.check_targets()).await? {
            return self.recover(&e, "open", delay).await;
        }
        let opened = self
            .until_stopped(self.kind.open_sink(self.def.config.clone(), ctx))
            .await?;
        let mut sink = match opened {
            Ok(s) => s,
            Err(e) => return self.recover(&e, "open", delay).await,
        };
        let link = self.is_link();
        set(&self.status, |s| s.remote = sink.peer());
        let client = self.def.client_id();
        let mut reqs: Vec<SubscribeRequest> = self
            .def
            .subscriptions()
            .into_iter()
            .map(|e| SubscribeRequest {
                client_id: client.clone(),
                topic: e.topic,
                group: Some(self.def.group()),
                mode: None,
                url: None,
                from: Some(StartFrom::Earliest),
                filters: e.filters,
                ..Default::default()
            })
            .collect();
        let first = reqs.remove(0);
        if let Err(e) = self.subscribe_rest(caller, &client, reqs).await {
            if retryable(&e) {
                self.trouble("subscribe", &format!("subscribe: {}", e.message));
                return self.back_off(delay).await;
            }
            let message = format!("subscribe refused ({}): {}", e.code, e.message);
            return Err(self.fail("subscribe_refused", &message));
        }
        let stream = match self.api.attach(caller, &client, Some(first), true).await {
            Ok(s) => s,
            Err(e) if retryable(&e) => {
                self.trouble("subscribe", &format!("subscribe: {}", e.message));
                return self.back_off(delay).await;
            }
            Err(e) => {
                let message = format!("subscribe refused ({}): {}", e.code, e.message);
                return Err(self.fail("subscribe_refused", &message));
            }
        };
        let Some(guard) = stream.guard else {
            return Ok(());
        };
        set(&self.status, |s| s.state = "running".into());
        // A link takes as much as a client may hold: its round trips to
        // the remote are what bounds it.
        let batch = if link { LINK_BATCH } else { SINK_BATCH };
        let mut lag_at: Option<tokio::time::Instant> = None;
        // A link's oldest unsent event's `time` (ms), while it holds one.
        let mut unsent_since = match self.unsent_since.swap(0, Ordering::Relaxed) {
            0 => None,
            t => Some(t),
        };
        while !guard.is_closed() {
            if lag_at.is_none_or(|at| at.elapsed() >= LAG_EVERY) {
                lag_at = Some(tokio::time::Instant::now());
                self.refresh_lag(unsent_since).await;
            }
            let got = self
                .until_stopped(guard.next(batch, Duration::from_secs(1)))
                .await?;
            let mut batch = Batch::with_capacity(got.len());
            for d in got {
                match CloudEvent::from_json_slice(&d.event_json) {
                    Ok(ev) => {
                        batch.ids.push(d.delivery_id);
                        batch.topics.push(d.topic);
                        batch.events.push(ev);
                        batch.json.push(d.event_json);
                    }
                    Err(e) => {
                        tracing::error!(connector = %self.def.name, error = %e, "an undecodable event was given back");
                        self.settle(caller, &d.delivery_id, Settle::Nack).await;
                    }
                }
            }
            if batch.events.is_empty() {
                continue;
            }
            if link {
                let oldest = batch.events.iter().filter_map(time_ms).min();
                unsent_since = unsent_since.or(oldest);
            }
            let written = self.write_out(&mut sink, caller, &batch).await?;
            let e = match written {
                Written::Done => {
                    *delay = self.backoff.0;
                    unsent_since = None;
                    continue;
                }
                Written::Busy(why) => {
                    // What passed is kept; the rest waits in the log.
                    self.trouble("busy", &format!("write: {why}"));
                    self.back_off(delay).await?;
                    continue;
                }
                Written::Failed(e) => e,
            };
            // A write error retries its events (and dead-letters them after
            // the last attempt); it never stops the connector.
            self.trouble("write", &format!("write: {e}"));
            if link {
                self.unsent_since
                    .store(unsent_since.unwrap_or(0), Ordering::Relaxed);
                self.refresh_lag(unsent_since).await;
            }
            let shown = self.def.redact_message(&e.to_string());
            tracing::warn!(connector = %self.def.name, error = %shown, "sink write failed; its events are retried");
            if e.is_transient() {
                // The connection may be broken: open again.
                return self.back_off(delay).await;
            }
        }
        Ok(())
    }

    /// Writes a batch and settles each event by the outcome: the error of
    /// the write when any event failed. A batch that fails is written
    /// again one event at a time, so only the event at fault is given back;
    /// a transient error of the system itself gives the rest back untried
    /// (without counting an attempt, for a sink that keeps its backlog).
    async fn write_out(
        &self,
        sink: &mut Box<dyn Sink>,
        caller: &Caller,
        batch: &Batch,
    ) -> Step<Written> {
        let Batch {
            ids,
            topics,
            events,
            json,
        } = batch;
        let e = match self
            .until_stopped(sink.write_routed(topics, events, json))
            .await?
        {
            Ok(verdicts) => {
                return Ok(match self.settle_verdicts(caller, ids, verdicts).await {
                    Some(why) => Written::Busy(why),
                    None => Written::Done,
                });
            }
            Err(e) => e,
        };
        if e.is_transient() && sink.keeps_backlog() {
            self.settle_all(caller, ids, Settle::Release).await;
            return Ok(Written::Failed(e));
        }
        if events.len() == 1 {
            self.settle_all(caller, ids, Settle::Nack).await;
            return Ok(Written::Failed(e));
        }
        let mut failure = None;
        for (k, (id, ev)) in ids.iter().zip(events).enumerate() {
            let one = sink.write_routed(&topics[k..=k], std::slice::from_ref(ev), &json[k..=k]);
            match self.until_stopped(one).await? {
                Ok(verdicts) => {
                    self.settle_verdicts(caller, std::slice::from_ref(id), verdicts)
                        .await;
                }
                Err(e) if e.is_transient() => {
                    let how = match sink.keeps_backlog() {
                        true => Settle::Release,
                        false => Settle::Nack,
                    };
                    self.settle_all(caller, &ids[k..], how).await;
                    return Ok(Written::Failed(e));
                }
                Err(e) => {
                    self.settle(caller, id, Settle::Nack).await;
                    failure = Some(e);
                }
            }
        }
        Ok(failure.map_or(Written::Done, Written::Failed))
    }

    /// Settles each delivery by what became of its event: written and
    /// skipped ones acknowledged, refused ones dead-lettered with the
    /// reason, those for later given back. Why some are for later, if any.
    async fn settle_verdicts(
        &self,
        caller: &Caller,
        ids: &[String],
        verdicts: Vec<Verdict>,
    ) -> Option<String> {
        let link = self.is_link();
        let name = &self.def.name;
        let mut written = 0u64;
        let mut later = None;
        let mut settles = Vec::with_capacity(ids.len());
        for (k, id) in ids.iter().enumerate() {
            let verdict = verdicts.get(k).cloned().unwrap_or(Verdict::Written);
            let how = match verdict {
                Verdict::Written => {
                    written += 1;
                    Settle::Ack
                }
                Verdict::Skipped(why) => {
                    if link {
                        self.metrics.link_events(name, why, 1);
                    }
                    Settle::Ack
                }
                Verdict::Later(why) => {
                    later = Some(why);
                    Settle::Release
                }
                Verdict::Refused(reason) => {
                    tracing::warn!(connector = %name, delivery = %id, reason = %reason, "an event was refused for good; dead-lettering it");
                    self.metrics.connector_error(name, "refused");
                    if link {
                        self.metrics.link_events(name, "refused", 1);
                    }
                    Settle::Reject(reason.into())
                }
            };
            settles.push(self.settle(caller, id, how));
        }
        futures::future::join_all(settles).await;
        if link && written > 0 {
            self.metrics.link_events(name, "sent", written);
        }
        self.done(written);
        later
    }

    /// Subscribes the client to a sink's further topics (a link's exports
    /// after the first), and drops its subscriptions to topics it no
    /// longer has.
    async fn subscribe_rest(
        &self,
        caller: &Caller,
        client: &str,
        reqs: Vec<SubscribeRequest>,
    ) -> Result<(), ApiError> {
        let wanted: std::collections::HashSet<String> = self
            .def
            .subscriptions()
            .into_iter()
            .map(|e| e.topic)
            .collect();
        for s in self.api.admin().subscriptions(None).await {
            let sub = &s.subscription;
            if sub.client_id == client && !wanted.contains(&sub.topic) {
                self.api
                    .unsubscribe(caller, client, Some(&sub.topic), b"")
                    .await?;
            }
        }
        for req in reqs {
            self.api.subscribe(caller, req, b"").await?;
        }
        Ok(())
    }

    /// Events of `topics` (the sink's) its group has not committed yet.
    pub(crate) async fn group_lag(&self, topics: &[String]) -> Option<u64> {
        let group = self.def.group();
        let mut lag = 0;
        for topic in topics {
            let offsets = self.api.admin().offsets(topic).await.ok()?;
            lag += offsets
                .iter()
                .filter(|o| o.consumer == group)
                .map(|o| o.lag)
                .sum::<u64>();
        }
        Some(lag)
    }

    /// The topics the sink's subscriptions follow (a pattern's as attached
    /// here).
    pub(crate) async fn topics(&self) -> Vec<String> {
        let client = self.def.client_id();
        let mut topics: Vec<String> = Vec::new();
        for s in self.api.admin().subscriptions(None).await {
            if s.subscription.client_id == client {
                match s.attached_topics {
                    Some(attached) => topics.extend(attached),
                    None => topics.push(s.subscription.topic.clone()),
                }
            }
        }
        topics.sort();
        topics.dedup();
        topics
    }

    fn done(&self, n: u64) {
        self.metrics.connector_events(&self.def.name, "out", n);
        set(&self.status, |s| {
            s.state = "running".into();
            s.events += n;
        });
    }

    /// Settles deliveries all at once (their order does not matter: each
    /// partition commits up to its lowest unsettled offset).
    async fn settle_all(&self, caller: &Caller, ids: &[String], how: Settle) {
        futures::future::join_all(ids.iter().map(|id| self.settle(caller, id, how.clone()))).await;
    }

    async fn settle(&self, caller: &Caller, id: &str, how: Settle) {
        if let Err(e) = self.api.settle(caller, id, how, b"").await {
            tracing::debug!(connector = %self.def.name, delivery = id, error = %e.message, "cannot settle a delivery");
        }
    }
}

/// An event's `time` in Unix milliseconds, when it has a valid one.
fn time_ms(e: &CloudEvent) -> Option<u64> {
    eventmesh_core::time::parse_rfc3339_ms(e.time.as_deref()?).ok()
}

/// How a batch's write ended.
enum Written {
    Done,
    /// Some events went back to wait (the other side is busy): back off,
    /// and go on.
    Busy(String),
    /// The write failed (the events were given back or retried).
    Failed(ConnectorError),
}

/// Errors worth trying again: quotas and unavailability.
fn retryable(e: &ApiError) -> bool {
    e.status == eventmesh_api::StatusCode::TOO_MANY_REQUESTS || e.status.is_server_error()
}

/// The deliveries a sink is given at once: each one's id, topic, decoded
/// event and JSON as delivered, at the same place in each.
struct Batch {
    ids: Vec<String>,
    topics: Vec<Arc<str>>,
    events: Vec<CloudEvent>,
    json: Vec<bytes::Bytes>,
}

impl Batch {
    fn with_capacity(n: usize) -> Batch {
        Batch {
            ids: Vec::with_capacity(n),
            topics: Vec::with_capacity(n),
            events: Vec::with_capacity(n),
            json: Vec::with_capacity(n),
        }
    }
}
