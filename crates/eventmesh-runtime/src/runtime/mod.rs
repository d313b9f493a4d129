//! The runtime: the parts between the transports' operation layer and the
//! log, each in its own file:
//!
//! - `subscriptions.rs`: the subscriptions view, subscribe and unsubscribe;
//!   `patterns.rs`: the topics each pattern subscription follows, and
//!   following the set of topics;
//! - `consumers.rs`: one dispatcher per consumer, and ack routing;
//! - `clients.rs`: client mailboxes, in-flight counts, creators, polls and
//!   streams;
//! - `requests.rs`: the table of requests waiting for their reply;
//!   `relay.rs`: replies across instances;
//! - `ownership.rs`: partition ownership, its handovers applied to the
//!   dispatchers; `forward.rs`: deliveries forwarded to the instance a
//!   client is connected to, and settles to the instance that handed the
//!   delivery out (both `PARTITION_OWNED_PULL`);
//! - `topics.rs`: topic management and the retention loop;
//!   `presence.rs`: pulling members away past the member timeout leave
//!   their groups' rotation; `rewind.rs`: group offset resets;
//! - `admin.rs`: read-only views and dead-letter replay; `ready.rs`:
//!   readiness checks.
//! - `browse.rs`: reading topics without a consumer (a cursor the reader
//!   keeps instead of a group's offsets).
//!
//! This file holds [`Runtime`] itself: starting it, settling, request and
//! reply, drain and shutdown; the loop applying the subscription changes
//! seen in the meta store; and [`Reapply`], when failed work (those
//! changes, handovers) is applied again.
//!
//! One lifecycle state, [`Lifecycle`], says whether the runtime takes new
//! work: `Running`, then `Draining` once shutdown began (no polls, streams
//! or subscriptions; acks still work), then `Stopped` (dispatchers stopped,
//! offsets flushed, the log closed). It only moves forward.

mod admin;
mod browse;
mod clients;
mod consumers;
mod forward;
mod ownership;
mod patterns;
mod presence;
mod ready;
mod relay;
mod release;
mod requests;
mod rewind;
mod subscriptions;
mod topics;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use eventmesh_core::{CloudEvent, ExtValue};
use eventmesh_state::{
    DeadLetterStore, DeliveryStateStore, OffsetStore, SubscriptionChange, SubscriptionStore,
};
use eventmesh_storage::EventLog;
use tokio::sync::{oneshot, Mutex};

pub use admin::{
    ClientStatus, ClientSubscription, ConsumerOffset, ReplayOutcome, SubscriptionStatus,
    TopicStatus, WebhookStatus,
};
pub use browse::{
    BrowseRequest, Browsed, BrowsedEvent, Cursor, MAX_BROWSE, MAX_BROWSE_BYTES, MAX_BROWSE_TOPICS,
    MAX_BROWSE_WAIT,
};
pub use clients::{PolledDelivery, StreamGuard, MAX_POLL, MAX_POLL_WAIT};
pub use forward::{
    settle_answer, ForwardedDeliveries, ForwardedDelivery, ForwardedSettle, SettleAnswer,
};
pub use ownership::Ownership;
pub use ready::Check;
pub use relay::{FindRequest, FoundRequest, ReplyAnswer};
pub use release::{HeldEvent, ScheduledView};
pub use requests::{PendingRequest, Replied, CORRELATION, MAX_REQUEST_WAIT};
pub use rewind::{
    OwnedReset, OwnedResetAnswer, PartitionMove, ResetOutcome, ResetRequest, ResetTo,
};
pub use subscriptions::SubscribeRequest;
pub use topics::{ConsumerPartition, ConsumerView, PartitionView, RetentionView, TopicDetail};

use crate::access::TopicAccess;
use crate::creator::Creator;
use crate::dispatcher::{DispatchSettings, DispatcherDeps, Policy, Settle, Settled};
use crate::error::{Result, RuntimeError};
use crate::ingress::{IngressService, IngressSettings};
use crate::metrics::Metrics;
use clients::Clients;
use consumers::Registry;
use requests::{correlation_of, Requests};
use subscriptions::{bad, View};

/// The state stores the runtime works with.
pub struct Stores {
    pub offsets: Arc<dyn OffsetStore>,
    pub ledger: Arc<dyn DeliveryStateStore>,
    pub subscriptions: SubscriptionStore,
    pub dead_letters: DeadLetterStore,
    /// Partition ownership, with `PARTITION_OWNED_PULL` (then `offsets`
    /// is the fenced store of the same cluster).
    pub ownership: Option<Ownership>,
}

/// Whether the runtime takes new work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Lifecycle {
    Running = 0,
    /// Shutdown began: no polls, streams or subscriptions; acks still work.
    Draining = 1,
    Stopped = 2,
}

/// The lifecycle, readable without a lock; it only moves forward.
struct LifecycleCell(AtomicU8);

impl LifecycleCell {
    fn get(&self) -> Lifecycle {
        match self.0.load(Ordering::Acquire) {
            0 => Lifecycle::Running,
            1 => Lifecycle::Draining,
            _ => Lifecycle::Stopped,
        }
    }

    /// Moves to `to` unless already past it.
    fn advance(&self, to: Lifecycle) {
        self.0.fetch_max(to as u8, Ordering::AcqRel);
    }

    fn check_running(&self) -> Result<()> {
        match self.get() {
            Lifecycle::Running => Ok(()),
            _ => Err(RuntimeError::ShuttingDown),
        }
    }

    fn is_stopped(&self) -> bool {
        self.get() == Lifecycle::Stopped
    }
}

pub struct Runtime {
    ingress: IngressService,
    log: Arc<dyn EventLog>,
    store: SubscriptionStore,
    deps: Arc<DispatcherDeps>,
    lifecycle: LifecycleCell,
    /// Subscriptions and dispatchers; changed under this lock only.
    view: Mutex<View>,
    registry: Registry,
    clients: Clients,
    requests: Arc<Requests>,
    metrics: Arc<Metrics>,
    cluster: Option<Arc<crate::cluster::Cluster>>,
    /// Calls to other instances (forwarding).
    internal: reqwest::Client,
    /// Decides the topics pattern subscriptions attach.
    access: Arc<dyn TopicAccess>,
}

impl Runtime {
    /// Builds the runtime and starts a dispatcher for every stored
    /// subscription; `access` decides the topics pattern subscriptions
    /// attach.
    pub async fn start(
        log: Arc<dyn EventLog>,
        stores: Stores,
        settings: DispatchSettings,
        ingress: IngressSettings,
        metrics: Arc<Metrics>,
        access: Arc<dyn TopicAccess>,
    ) -> Result<Arc<Self>> {
        let http = crate::push::client(
            settings.delivery.webhook_timeout,
            settings.webhook_guard.clone(),
            &settings.delivery.webhook_tls,
        )
        .map_err(RuntimeError::Config)?;
        let hs = &settings.delivery.webhook_handshake;
        let handshakes = Arc::new(
            crate::push::Handshakes::new(
                hs.origin.clone().unwrap_or_else(|| "eventmesh".to_string()),
                hs.request_rate,
                hs.retry_max,
            )
            .with_metrics(metrics.clone()),
        );
        // The cluster's boot id when there is one: delivery ids name it, so
        // that an ack made elsewhere finds its way back here.
        let boot: Arc<str> = match &stores.ownership {
            Some(o) => o.cluster.boot().into(),
            None => uuid::Uuid::now_v7().simple().to_string().into(),
        };
        tracing::info!(
            topology = settings.delivery.topology.as_str(),
            "delivery topology={}",
            settings.delivery.topology.as_str()
        );
        let (cluster, handovers) = match stores.ownership {
            Some(o) => (Some(o.cluster), Some(o.handovers)),
            None => (None, None),
        };
        let requests = Arc::new(Requests::new(cluster.is_some()));
        let ingress = IngressService::new(log.clone(), ingress, metrics.clone());
        let handoffs = ingress.handoffs().clone();
        let rt = Arc::new(Runtime {
            ingress,
            log: log.clone(),
            store: stores.subscriptions,
            deps: Arc::new(DispatcherDeps {
                boot,
                log,
                offsets: stores.offsets,
                dead_letters: stores.dead_letters,
                ledger: stores.ledger,
                metrics: metrics.clone(),
                http,
                handshakes,
                settings,
                observer: requests.clone(),
                fence: cluster.as_ref().map(|c| c.fence().clone()),
                sieves: Default::default(),
                handoffs,
            }),
            lifecycle: LifecycleCell(AtomicU8::new(Lifecycle::Running as u8)),
            view: Mutex::new(View::default()),
            registry: Registry::default(),
            clients: Clients::default(),
            requests,
            metrics,
            internal: match &cluster {
                Some(c) => c.internal().clone(),
                None => crate::cluster::internal_client(None),
            },
            cluster,
            access,
        });
        if let Some(rx) = handovers {
            tokio::spawn(ownership::apply_handovers(Arc::downgrade(&rt), rx));
            tokio::spawn(forward::forward_loop(Arc::downgrade(&rt)));
        }
        let (subs, changes) = rt.store.follow().await?;
        let mut view = rt.view.lock().await;
        for sub in subs.iter().cloned() {
            rt.apply_put(&mut view, sub).await?;
        }
        tracing::info!(subscriptions = subs.len(), "subscriptions restored");
        rt.publish_topics(&view).await;
        drop(view);
        tokio::spawn(follow_changes(Arc::downgrade(&rt), changes));
        tokio::spawn(patterns::follow_topics(
            Arc::downgrade(&rt),
            rt.ingress.settings().pattern_rescan,
            rt.log.topic_watch(),
        ));
        tokio::spawn(topics::enforce_retention(
            Arc::downgrade(&rt),
            rt.ingress.settings().retention_check,
        ));
        tokio::spawn(release::release_loop(Arc::downgrade(&rt)));
        tokio::spawn(presence::sweep_members(
            Arc::downgrade(&rt),
            rt.deps.settings.delivery.member_timeout,
        ));
        Ok(rt)
    }

    pub fn ingress(&self) -> &IngressService {
        &self.ingress
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// One POST to a webhook through the runtime's webhook client (its SSRF
    /// guard, TLS settings and `eventmesh.webhook.timeout.ms`), for pushes
    /// that are not event deliveries (A2A push notifications). `Ok(())` on
    /// a 2xx; otherwise why it failed.
    pub async fn post_webhook(
        &self,
        url: &str,
        delivery_id: &str,
        headers: &[(String, String)],
        body: Vec<u8>,
    ) -> std::result::Result<(), String> {
        let s = &self.deps.settings;
        crate::push::post(
            &self.deps.http,
            &s.webhook_guard,
            url,
            delivery_id,
            headers,
            body,
            s.delivery.webhook_timeout,
        )
        .await
    }

    pub fn lifecycle(&self) -> Lifecycle {
        self.lifecycle.get()
    }

    /// Whether the event log can serve now (`Err` says why not).
    pub fn log_status(&self) -> std::result::Result<(), String> {
        self.log.status()
    }

    /// True once [`Runtime::drain`] began.
    pub fn is_draining(&self) -> bool {
        self.lifecycle.get() != Lifecycle::Running
    }

    /// Acknowledges or gives back a delivery. With `by`, only when the
    /// client holding it was created by `by` (`Foreign` otherwise, and
    /// nothing changes), unless `policy` is [`Policy::Permissive`]: then
    /// it is settled anyway and answered `DoneForeign`. `Unknown` for an
    /// id that is malformed, from an earlier run, or already settled.
    pub async fn settle(
        &self,
        delivery_id: &str,
        how: Settle,
        by: Option<&Creator>,
        policy: Policy,
    ) -> Settled {
        if let Some(settled) = self.settle_elsewhere(delivery_id, &how, by, policy).await {
            return settled;
        }
        self.settle_here(delivery_id, how, by, policy).await
    }

    /// Publishes `event` as a request and waits up to `timeout` for its
    /// reply. The request carries the extension `correlationid` (kept when
    /// the event has one); [`Runtime::reply`] with an event carrying the
    /// same value completes it.
    pub async fn request(
        &self,
        topic: &str,
        mut event: CloudEvent,
        timeout: Duration,
    ) -> Result<CloudEvent> {
        let correlation = match correlation_of(&event) {
            Some(c) => c,
            None => {
                let id = uuid::Uuid::now_v7().to_string();
                event.set_extension(CORRELATION, ExtValue::Str(id.clone()));
                id
            }
        };
        let (tx, rx) = oneshot::channel();
        if !self.requests.insert(&correlation, topic, tx) {
            return Err(RuntimeError::Conflict {
                code: "conflict",
                message: format!("a request with correlationid {correlation:?} is already waiting"),
            });
        }
        // Forgets the request however this call ends (reply, timeout, a
        // failed publish, or the caller going away).
        struct Forget<'a>(&'a Requests, &'a str);
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                self.0.remove(self.1);
            }
        }
        let _forget = Forget(&self.requests, &correlation);
        self.ingress.publish(topic, vec![event]).await?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(reply)) => Ok(reply),
            _ => Err(RuntimeError::Timeout(format!(
                "no reply to request {correlation:?} within {} ms",
                timeout.as_millis()
            ))),
        }
    }

    /// The request waiting here for `correlation`, if any: its topic and
    /// the clients this instance handed it to.
    pub fn pending_request(&self, correlation: &str) -> Option<PendingRequest> {
        self.requests.pending(correlation)
    }

    /// Hands a reply to `request` (found by [`Runtime::pending_request`]
    /// or [`Runtime::find_request`] with the reply's `correlationid`),
    /// here or on the instance where it waits. With `by`, only the creator of
    /// a client the request was handed to may answer (`Forbidden`, code
    /// `not_holder`, otherwise), unless `policy` is
    /// [`Policy::Permissive`]: then the reply is handed over anyway and
    /// answered [`Replied::Foreign`].
    pub async fn reply(
        &self,
        event: CloudEvent,
        request: Option<PendingRequest>,
        by: Option<&Creator>,
        policy: Policy,
    ) -> Result<Replied> {
        let Some(correlation) = correlation_of(&event) else {
            return Err(bad(
                "missing_correlation",
                "a reply must carry the correlationid extension of its request",
            ));
        };
        let unknown = || {
            RuntimeError::NotFound {
            code: "unknown_correlation",
            message: format!(
                "no request with correlationid {correlation:?} is waiting (answered, timed out, or never made)"
            ),
        }
        };
        let request = request.ok_or_else(unknown)?;
        let mut replied = Replied::Done;
        if let Some(by) = by {
            let mut held = self.held_by(&request.holders, by).await;
            if !held && request.waiting_on.is_none() && self.cluster.is_some() {
                // Waiting here, but perhaps handed out by another instance.
                held = self
                    .held_by(&self.holders_elsewhere(&correlation).await, by)
                    .await;
            }
            if !held && policy == Policy::Permissive {
                replied = Replied::Foreign;
            } else if !held {
                return Err(RuntimeError::Forbidden {
                    code: "not_holder",
                    message: format!(
                        "request {correlation:?} was not handed to a client of this principal"
                    ),
                });
            }
        }
        let completed = match &request.waiting_on {
            None => self.requests.complete(&correlation, event),
            Some(boot) => self.complete_elsewhere(boot, &event).await?,
        };
        if completed {
            Ok(replied)
        } else {
            Err(unknown())
        }
    }

    /// Whether `by` created one of `clients`.
    async fn held_by(&self, clients: &[String], by: &Creator) -> bool {
        let view = self.view.lock().await;
        clients
            .iter()
            .any(|c| view.creator_of(c).as_ref() == Some(by))
    }

    /// First step of a graceful shutdown: refuse polls, streams and new
    /// subscriptions, stop handing out events, and wait up to `grace` for
    /// the deliveries in clients' hands (webhook calls under way, polled
    /// events) to be settled. Acks keep working meanwhile.
    pub async fn drain(&self, grace: Duration) {
        let deadline = tokio::time::Instant::now() + grace;
        let waits = {
            let view = self.view.lock().await;
            self.lifecycle.advance(Lifecycle::Draining);
            // Wake long polls and streams so that they return now.
            self.clients.close_all();
            self.registry.drain(&view.consumers, deadline).await
        };
        for rx in waits {
            let _ = tokio::time::timeout_at(deadline + Duration::from_secs(1), rx).await;
        }
    }

    /// Stops every dispatcher (each flushes its offsets) and closes the log.
    pub async fn shutdown(&self) {
        let mut view = self.view.lock().await;
        self.lifecycle.advance(Lifecycle::Stopped);
        self.registry.stop_all(&mut view.consumers).await;
        // Committed: the lease ends now and the others take the partitions
        // at once.
        if let Some(c) = &self.cluster {
            c.leave().await;
        }
        self.log.close().await;
    }
}

/// When work that failed (a subscription change, a handover) is applied
/// again: [`Reapply::FIRST`] after the first failure, the wait doubling up
/// to [`Reapply::MAX`] while passes keep failing, and back to the first
/// once nothing is left.
pub(super) struct Reapply {
    wait: Duration,
    at: tokio::time::Instant,
}

impl Reapply {
    const FIRST: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(2);

    pub(super) fn new() -> Self {
        Reapply {
            wait: Self::FIRST,
            at: tokio::time::Instant::now(),
        }
    }

    /// When the next pass is due (while anything is failing).
    pub(super) fn at(&self) -> tokio::time::Instant {
        self.at
    }

    /// After new work (`retried` false) or a pass over the failures
    /// (`retried` true): `had_failures` before it, `failing` after it. A
    /// pass that left failures, or the first failure, plans the next pass
    /// after the wait; a pass already planned stays.
    pub(super) fn after(&mut self, retried: bool, had_failures: bool, failing: bool) {
        if !failing {
            self.wait = Self::FIRST;
        } else if retried || !had_failures {
            self.at = tokio::time::Instant::now() + self.wait;
            self.wait = (self.wait * 2).min(Self::MAX);
        }
    }
}

/// Applies subscription changes from the meta store until the runtime is
/// gone or the follower stops. A change that fails (the log or the meta
/// store unavailable for a moment) is applied again until it holds: the
/// watch does not bring it a second time, and without it this instance
/// would neither serve the subscription nor claim its partitions.
async fn follow_changes(
    rt: Weak<Runtime>,
    mut changes: tokio::sync::mpsc::Receiver<SubscriptionChange>,
) {
    // By subscription key: the latest change not applied yet.
    let mut failed: BTreeMap<String, SubscriptionChange> = BTreeMap::new();
    let mut again = Reapply::new();
    loop {
        let next = tokio::select! {
            change = changes.recv() => match change {
                Some(change) => Some(change),
                None => return,
            },
            _ = tokio::time::sleep_until(again.at()), if !failed.is_empty() => None,
        };
        let Some(rt) = rt.upgrade() else { return };
        let (batch, retrying) = match next {
            Some(change) => (vec![change], false),
            None => (std::mem::take(&mut failed).into_values().collect(), true),
        };
        let had_failures = !failed.is_empty();
        for change in batch {
            let key = match &change {
                SubscriptionChange::Put(sub) => sub.key(),
                SubscriptionChange::Removed(key) => key.clone(),
            };
            if rt.apply_change(change.clone()).await {
                failed.remove(&key);
            } else {
                failed.insert(key, change);
            }
        }
        again.after(retrying, had_failures, !failed.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lifecycle_only_moves_forward() {
        let l = LifecycleCell(AtomicU8::new(0));
        assert!(l.check_running().is_ok());
        l.advance(Lifecycle::Draining);
        assert_eq!(l.get(), Lifecycle::Draining);
        assert!(matches!(l.check_running(), Err(RuntimeError::ShuttingDown)));
        l.advance(Lifecycle::Stopped);
        l.advance(Lifecycle::Draining);
        assert_eq!(l.get(), Lifecycle::Stopped);
        assert!(l.is_stopped());
    }
}
