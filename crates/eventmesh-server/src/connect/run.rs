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

use std::sync::{Arc, Mutex};
use std::time::Duration;

use eventmesh_connect::{ConnectorError, Kind, Role, SinkContext, SourceContext};
use eventmesh_core::CloudEvent;
use eventmesh_runtime::{Settle, SubscribeRequest};
use eventmesh_state::StartFrom;
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::def::Definition;
use super::positions::{Claim, Committed, Positions};
use crate::api::{Api, ApiError, Caller};

/// Events a sink takes at once.
const SINK_BATCH: usize = 500;
/// How often a sink's lag is read again.
const LAG_EVERY: Duration = Duration::from_secs(2);

/// What a running copy reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// `starting`, `running`, `retrying` (an outside error; trying again)
    /// or `failed` (stopped until the definition changes).
    pub state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error_ms: Option<u64>,
    /// A source's last committed position.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<Value>,
    /// Events published (source) or written (sink) by this copy.
    pub events: u64,
    /// Records waiting outside (source), or events waiting in the mesh
    /// for the sink's group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag: Option<u64>,
    pub since_ms: u64,
}

pub type SharedStatus = Arc<Mutex<Status>>;

fn set(status: &SharedStatus, f: impl FnOnce(&mut Status)) {
    f(&mut status.lock().expect("status lock"));
}

fn failed(status: &SharedStatus, state: &str, error: &str) {
    set(status, |s| {
        s.state = state.to_string();
        s.last_error = Some(error.to_string());
        s.last_error_ms = Some(crate::a2a::now_ms());
    });
}

/// A running copy's settings.
pub struct Runner {
    pub api: Api,
    pub def: Definition,
    pub kind: Kind,
    pub positions: Arc<dyn Positions>,
    pub claim: Option<Claim>,
    pub status: SharedStatus,
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

impl Runner {
    /// The caller the connector acts as: its own identity, as a session
    /// the gate takes as authenticated; every operation is still checked
    /// by the ACL, quotas and audit.
    pub fn caller(def: &Definition) -> Caller {
        let mut caller = Caller::new(eventmesh_security::Transport::Connector, None, None);
        caller.session = Some(Arc::new(def.identity()));
        caller
    }

    pub async fn run(self) -> Ended {
        set(&self.status, |s| s.state = "starting".into());
        match self.kind.role() {
            Role::Source => self.run_source().await,
            Role::Sink => self.run_sink().await,
        }
    }

    /// Sleeps `delay` (or until stopped) and doubles it up to the maximum.
    /// False when stopped.
    async fn back_off(&self, delay: &mut Duration) -> bool {
        let wait = *delay;
        *delay = (*delay * 2).min(self.backoff.1);
        tokio::select! {
            _ = tokio::time::sleep(wait) => true,
            _ = self.stop.cancelled() => false,
        }
    }

    fn count_error(&self, reason: &str) {
        self.metrics.connector_error(&self.def.name, reason);
    }

    async fn run_source(self) -> Ended {
        let name = self.def.name.clone();
        let caller = Self::caller(&self.def);
        let mut delay = self.backoff.0;
        'open: loop {
            if self.stop.is_cancelled() {
                return Ended::Stopped;
            }
            let position = match self.positions.load(&name).await {
                Ok(p) => p,
                Err(e) => {
                    failed(
                        &self.status,
                        "retrying",
                        &format!("cannot read the position: {e}"),
                    );
                    self.count_error("position");
                    if !self.back_off(&mut delay).await {
                        return Ended::Stopped;
                    }
                    continue;
                }
            };
            set(&self.status, |s| s.position = position.clone());
            let ctx = SourceContext {
                connector: name.clone(),
                topic: self.def.topic.clone(),
                position,
            };
            let opened = tokio::select! {
                o = self.kind.open_source(self.def.config.clone(), ctx) => o,
                _ = self.stop.cancelled() => return Ended::Stopped,
            };
            let mut source = match opened {
                Ok(s) => s,
                Err(e) => match self.outside_error(&e, "open").await {
                    Some(ended) => return ended,
                    None => {
                        if !self.back_off(&mut delay).await {
                            return Ended::Stopped;
                        }
                        continue;
                    }
                },
            };
            set(&self.status, |s| s.state = "running".into());
            let mut idle_polls = 0u32;
            loop {
                let polled = tokio::select! {
                    p = source.poll() => p,
                    _ = self.stop.cancelled() => return Ended::Stopped,
                };
                let records = match polled {
                    Ok(r) => r,
                    Err(e) => match self.outside_error(&e, "read").await {
                        Some(ended) => return ended,
                        None => {
                            if !self.back_off(&mut delay).await {
                                return Ended::Stopped;
                            }
                            continue 'open;
                        }
                    },
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
                let position = records
                    .last()
                    .map(|r| r.position.clone())
                    .unwrap_or_default();
                let events: Vec<CloudEvent> = records.into_iter().map(|r| r.event).collect();
                let n = events.len() as u64;
                // Published until durable, or the connector stops.
                loop {
                    let published = tokio::select! {
                        p = self.api.publish(&caller, Some(self.def.topic.clone()), events.clone(), b"") => p,
                        _ = self.stop.cancelled() => return Ended::Stopped,
                    };
                    match published {
                        Ok(_) => break,
                        Err(e) if retryable(&e) => {
                            failed(&self.status, "retrying", &format!("publish: {}", e.message));
                            self.count_error("publish");
                            if !self.back_off(&mut delay).await {
                                return Ended::Stopped;
                            }
                        }
                        Err(e) => {
                            failed(
                                &self.status,
                                "failed",
                                &format!("publish refused ({}): {}", e.code, e.message),
                            );
                            self.count_error("publish_refused");
                            return Ended::Failed;
                        }
                    }
                }
                self.metrics.connector_events(&name, "in", n);
                match self
                    .positions
                    .commit(&name, &position, self.claim.as_ref())
                    .await
                {
                    Ok(Committed::Done) => {}
                    Ok(Committed::Fenced) => {
                        tracing::warn!(connector = %name, "position commit refused: the connector's claim moved; stopping this copy");
                        self.count_error("fenced");
                        return Ended::Fenced;
                    }
                    Err(e) => {
                        // The events are durable; the source reads them
                        // again from the last commit and they deduplicate.
                        failed(
                            &self.status,
                            "retrying",
                            &format!("cannot commit the position: {e}"),
                        );
                        self.count_error("position");
                        if !self.back_off(&mut delay).await {
                            return Ended::Stopped;
                        }
                        continue 'open;
                    }
                }
                if let Err(e) = source.commit(&position).await {
                    tracing::warn!(connector = %name, error = %e, "the source could not acknowledge committed records");
                }
                delay = self.backoff.0;
                set(&self.status, |s| {
                    s.state = "running".into();
                    s.events += n;
                    s.position = Some(position);
                });
            }
        }
    }

    /// Handles an error from the outside system: `Some` ends the copy (a
    /// config error), `None` means try again after the backoff.
    async fn outside_error(&self, e: &ConnectorError, what: &str) -> Option<Ended> {
        let message = format!("{what}: {e}");
        if e.is_transient() {
            tracing::warn!(connector = %self.def.name, error = %message, "connector error; trying again");
            failed(&self.status, "retrying", &message);
            self.count_error(what);
            None
        } else {
            tracing::error!(connector = %self.def.name, error = %message, "connector failed; it stays stopped until its definition changes");
            failed(&self.status, "failed", &message);
            self.count_error("config");
            Some(Ended::Failed)
        }
    }

    async fn run_sink(self) -> Ended {
        let name = self.def.name.clone();
        let caller = Self::caller(&self.def);
        let client = self.def.client_id();
        let mut delay = self.backoff.0;
        'open: loop {
            if self.stop.is_cancelled() {
                return Ended::Stopped;
            }
            let ctx = SinkContext {
                connector: name.clone(),
                topic: self.def.topic.clone(),
            };
            let opened = tokio::select! {
                o = self.kind.open_sink(self.def.config.clone(), ctx) => o,
                _ = self.stop.cancelled() => return Ended::Stopped,
            };
            let mut sink = match opened {
                Ok(s) => s,
                Err(e) => match self.outside_error(&e, "open").await {
                    Some(ended) => return ended,
                    None => {
                        if !self.back_off(&mut delay).await {
                            return Ended::Stopped;
                        }
                        continue;
                    }
                },
            };
            let req = SubscribeRequest {
                client_id: client.clone(),
                topic: self.def.topic.clone(),
                group: Some(self.def.group()),
                mode: None,
                url: None,
                from: Some(StartFrom::Earliest),
            };
            let stream = match self.api.attach(&caller, &client, Some(req), true).await {
                Ok(s) => s,
                Err(e) if retryable(&e) => {
                    failed(
                        &self.status,
                        "retrying",
                        &format!("subscribe: {}", e.message),
                    );
                    self.count_error("subscribe");
                    if !self.back_off(&mut delay).await {
                        return Ended::Stopped;
                    }
                    continue;
                }
                Err(e) => {
                    failed(
                        &self.status,
                        "failed",
                        &format!("subscribe refused ({}): {}", e.code, e.message),
                    );
                    self.count_error("subscribe_refused");
                    return Ended::Failed;
                }
            };
            let Some(guard) = stream.guard else {
                continue;
            };
            set(&self.status, |s| s.state = "running".into());
            let mut lag_at = tokio::time::Instant::now();
            while !guard.is_closed() {
                if lag_at.elapsed() >= LAG_EVERY {
                    lag_at = tokio::time::Instant::now();
                    let lag = self.group_lag().await;
                    set(&self.status, |s| s.lag = lag);
                }
                let got = tokio::select! {
                    g = guard.next(SINK_BATCH, Duration::from_secs(1)) => g,
                    _ = self.stop.cancelled() => return Ended::Stopped,
                };
                if got.is_empty() {
                    continue;
                }
                let mut ids = Vec::with_capacity(got.len());
                let mut events = Vec::with_capacity(got.len());
                for d in got {
                    match CloudEvent::from_json_slice(&d.event_json) {
                        Ok(ev) => {
                            ids.push(d.delivery_id);
                            events.push(ev);
                        }
                        Err(e) => {
                            tracing::error!(connector = %name, error = %e, "an undecodable event was given back");
                            self.settle(&caller, &d.delivery_id, Settle::Nack).await;
                        }
                    }
                }
                let written = tokio::select! {
                    w = sink.write(&events) => w,
                    _ = self.stop.cancelled() => return Ended::Stopped,
                };
                let failure = match written {
                    Ok(()) => {
                        self.settle_all(&caller, &ids, Settle::Ack).await;
                        self.done(events.len() as u64);
                        delay = self.backoff.0;
                        None
                    }
                    Err(e) if events.len() == 1 => {
                        self.settle(&caller, &ids[0], Settle::Nack).await;
                        Some(e)
                    }
                    Err(_) => {
                        // One event may be at fault: each alone, so the
                        // others are written and only it is retried (and
                        // dead-lettered in the end).
                        let mut failure = None;
                        for (k, (id, ev)) in ids.iter().zip(&events).enumerate() {
                            let one = tokio::select! {
                                w = sink.write(std::slice::from_ref(ev)) => w,
                                _ = self.stop.cancelled() => return Ended::Stopped,
                            };
                            match one {
                                Ok(()) => {
                                    self.settle(&caller, id, Settle::Ack).await;
                                    self.done(1);
                                }
                                Err(e) if e.is_transient() => {
                                    // The system itself fails: give the
                                    // rest back untried.
                                    self.settle_all(&caller, &ids[k..], Settle::Nack).await;
                                    failure = Some(e);
                                    break;
                                }
                                Err(e) => {
                                    self.settle(&caller, id, Settle::Nack).await;
                                    failure = Some(e);
                                }
                            }
                        }
                        failure
                    }
                };
                let Some(e) = failure else {
                    continue;
                };
                // A write error retries its events (and dead-letters them
                // after the last attempt); it never stops the connector.
                failed(&self.status, "retrying", &format!("write: {e}"));
                self.count_error("write");
                tracing::warn!(connector = %name, error = %e, "sink write failed; its events are retried");
                if e.is_transient() {
                    // The connection may be broken: open again.
                    if !self.back_off(&mut delay).await {
                        return Ended::Stopped;
                    }
                    continue 'open;
                }
            }
        }
    }

    /// Events of the sink's topic its group has not committed yet.
    async fn group_lag(&self) -> Option<u64> {
        let group = self.def.group();
        let offsets = self.api.runtime().offsets(&self.def.topic).await.ok()?;
        Some(
            offsets
                .iter()
                .filter(|o| o.consumer == group)
                .map(|o| o.lag)
                .sum(),
        )
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
        futures::future::join_all(ids.iter().map(|id| self.settle(caller, id, how))).await;
    }

    async fn settle(&self, caller: &Caller, id: &str, how: Settle) {
        if let Err(e) = self.api.settle(caller, id, how, b"").await {
            tracing::debug!(connector = %self.def.name, delivery = id, error = %e.message, "cannot settle a delivery");
        }
    }
}

/// Errors worth trying again: quotas and unavailability.
fn retryable(e: &ApiError) -> bool {
    e.status == axum::http::StatusCode::TOO_MANY_REQUESTS || e.status.is_server_error()
}
