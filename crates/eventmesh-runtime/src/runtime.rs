//! The runtime: subscriptions, the dispatchers that serve them, pull
//! mailboxes, and acknowledgement routing.
//!
//! Subscriptions are written to the meta store first and only then applied
//! in memory, so an acknowledged subscribe survives a crash. Changes made
//! through other instances sharing the meta store arrive through the
//! subscription store's watch and are applied the same way (applying is
//! idempotent, so this instance's own changes coming back are no-ops).
//! Each consumer (a load-balanced group on a topic, or one broadcast
//! member) has exactly one dispatcher; membership changes are sent to it as
//! commands.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use eventmesh_core::{CloudEvent, ExtValue};
use eventmesh_state::{
    DeadLetter, DeadLetterStore, DeliveryMode, DeliveryStateStore, OffsetStore, StartFrom,
    Subscription, SubscriptionChange, SubscriptionStore,
};
use eventmesh_storage::EventLog;
use serde::Serialize;
use tokio::sync::{oneshot, Mutex};

use crate::dispatcher::{
    parse_delivery_id, Channel, ClientLoad, Command, DispatchSettings, Dispatcher, DispatcherDeps,
    DispatcherHandle, Member,
};
use crate::error::{Result, RuntimeError};
use crate::ingress::{now_ms, IngressService};
use crate::mailbox::Mailbox;
use crate::metrics::Metrics;
use crate::push::validate_url;

/// Most deliveries one poll returns.
pub const MAX_POLL: usize = 1000;
/// Longest a poll may wait.
pub const MAX_POLL_WAIT: Duration = Duration::from_secs(60);

/// A subscribe request as the transports receive it (JSON, camelCase).
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubscribeRequest {
    pub client_id: String,
    pub topic: String,
    pub group: Option<String>,
    pub mode: Option<DeliveryMode>,
    pub url: Option<String>,
    pub from: Option<StartFrom>,
}

/// One delivery returned by a poll.
#[derive(Debug, Clone)]
pub struct PolledDelivery {
    pub delivery_id: String,
    /// The event in structured JSON.
    pub event_json: Bytes,
}

/// A topic as `/admin/topics` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicStatus {
    pub name: String,
    pub partitions: u32,
    pub end_offsets: Vec<u64>,
}

/// What a dead-letter replay did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReplayOutcome {
    pub replayed: usize,
    pub failed: usize,
}

/// One consumer's position on one partition.
#[derive(Debug, Clone, Serialize)]
pub struct ConsumerOffset {
    pub consumer: String,
    pub partition: u32,
    pub committed: u64,
    pub end: u64,
    pub lag: u64,
}

/// A subscribed client as `/admin/clients` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientStatus {
    pub client_id: String,
    /// Unacknowledged deliveries the client holds, over all its subscriptions.
    pub inflight: usize,
    /// Deliveries waiting in its mailbox for a poll (pulling clients).
    pub queued: usize,
    pub subscriptions: Vec<ClientSubscription>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientSubscription {
    pub topic: String,
    pub group: String,
    pub mode: DeliveryMode,
    /// `webhook` or `poll`.
    pub transport: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// The state stores the runtime works with.
pub struct Stores {
    pub offsets: Arc<dyn OffsetStore>,
    pub ledger: Arc<dyn DeliveryStateStore>,
    pub subscriptions: SubscriptionStore,
    pub dead_letters: DeadLetterStore,
}

struct ConsumerEntry {
    dispatcher_id: u32,
    handle: DispatcherHandle,
}

#[derive(Default)]
struct State {
    /// Keyed by the subscription's meta key.
    subs: HashMap<String, Subscription>,
    /// Keyed by (consumer, topic).
    consumers: HashMap<(String, String), ConsumerEntry>,
    stopped: bool,
    /// Shutdown began: no polls, no new subscriptions.
    draining: bool,
}

pub struct Runtime {
    ingress: IngressService,
    log: Arc<dyn EventLog>,
    store: SubscriptionStore,
    deps: Arc<DispatcherDeps>,
    state: Mutex<State>,
    /// Ack routing: dispatcher id to its command channel.
    routes: RwLock<HashMap<u32, tokio::sync::mpsc::Sender<Command>>>,
    mailboxes: RwLock<HashMap<String, Arc<Mailbox>>>,
    loads: RwLock<HashMap<String, Arc<ClientLoad>>>,
    draining: std::sync::atomic::AtomicBool,
    /// Requests waiting for their reply, by correlation id.
    requests: std::sync::Mutex<HashMap<String, oneshot::Sender<CloudEvent>>>,
    next_dispatcher: AtomicU32,
    metrics: Arc<Metrics>,
}

fn bad(code: &'static str, message: impl Into<String>) -> RuntimeError {
    RuntimeError::BadRequest {
        code,
        message: message.into(),
    }
}

/// Client ids and group names: 1-128 of `[A-Za-z0-9._-]`.
fn validate_name(what: &str, v: &str) -> Result<()> {
    if v.is_empty() || v.len() > 128 {
        return Err(bad(
            "invalid_request",
            format!("{what} must be 1 to 128 characters long"),
        ));
    }
    if let Some(c) = v
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(bad(
            "invalid_request",
            format!("{what} {v:?} contains {c:?}; allowed are A-Z a-z 0-9 . _ -"),
        ));
    }
    Ok(())
}

impl Runtime {
    /// Builds the runtime and starts a dispatcher for every stored
    /// subscription.
    pub async fn start(
        log: Arc<dyn EventLog>,
        stores: Stores,
        settings: DispatchSettings,
        default_partitions: u32,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<Self>> {
        let http = crate::push::client(settings.webhook_timeout, settings.webhook_guard.clone());
        let boot: Arc<str> = uuid::Uuid::now_v7().simple().to_string().into();
        tracing::info!(
            topology = settings.topology.as_str(),
            "delivery topology={}",
            settings.topology.as_str()
        );
        let rt = Arc::new(Runtime {
            ingress: IngressService::new(log.clone(), default_partitions, metrics.clone()),
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
                settings,
            }),
            state: Mutex::new(State::default()),
            routes: RwLock::new(HashMap::new()),
            mailboxes: RwLock::new(HashMap::new()),
            loads: RwLock::new(HashMap::new()),
            draining: std::sync::atomic::AtomicBool::new(false),
            requests: std::sync::Mutex::new(HashMap::new()),
            next_dispatcher: AtomicU32::new(1),
            metrics,
        });
        let (subs, changes) = rt.store.follow().await?;
        let mut state = rt.state.lock().await;
        for sub in subs.iter().cloned() {
            rt.apply_put(&mut state, sub).await?;
        }
        tracing::info!(subscriptions = subs.len(), "subscriptions restored");
        drop(state);
        tokio::spawn(follow_changes(Arc::downgrade(&rt), changes));
        Ok(rt)
    }

    pub fn ingress(&self) -> &IngressService {
        &self.ingress
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The members of a consumer, from the current subscriptions.
    fn members_of(&self, state: &State, consumer: &str, topic: &str) -> Vec<Member> {
        let mut members: Vec<Member> = state
            .subs
            .values()
            .filter(|s| s.topic == topic && s.consumer() == consumer)
            .map(|s| Member {
                client_id: s.client_id.clone(),
                channel: match &s.url {
                    Some(url) => Channel::Push(url.clone()),
                    None => Channel::Pull(self.mailbox(&s.client_id, true).expect("created")),
                },
                load: self.load(&s.client_id),
            })
            .collect();
        members.sort_by(|a, b| a.client_id.cmp(&b.client_id));
        members
    }

    /// The shared in-flight count of a client (created on first use).
    fn load(&self, client: &str) -> Arc<ClientLoad> {
        if let Some(l) = self.loads.read().expect("loads lock").get(client) {
            return l.clone();
        }
        self.loads
            .write()
            .expect("loads lock")
            .entry(client.to_string())
            .or_default()
            .clone()
    }

    fn mailbox(&self, client: &str, create: bool) -> Option<Arc<Mailbox>> {
        if let Some(m) = self.mailboxes.read().expect("mailboxes lock").get(client) {
            return Some(m.clone());
        }
        if !create {
            return None;
        }
        Some(
            self.mailboxes
                .write()
                .expect("mailboxes lock")
                .entry(client.to_string())
                .or_default()
                .clone(),
        )
    }

    /// Brings a consumer's dispatcher in line with its subscriptions:
    /// starts it, updates its members, or stops it when none are left.
    async fn sync_consumer(
        &self,
        state: &mut State,
        consumer: &str,
        topic: &str,
        from: StartFrom,
    ) -> Result<()> {
        let members = self.members_of(state, consumer, topic);
        let key = (consumer.to_string(), topic.to_string());
        match (state.consumers.get(&key), members.is_empty()) {
            (Some(entry), false) => {
                let _ = entry.handle.tx.send(Command::Members(members)).await;
            }
            (Some(_), true) => {
                let entry = state.consumers.remove(&key).expect("present");
                self.routes
                    .write()
                    .expect("routes lock")
                    .remove(&entry.dispatcher_id);
                stop_dispatcher(entry.handle).await;
            }
            (None, false) => {
                let id = self.next_dispatcher.fetch_add(1, Ordering::Relaxed);
                let handle = Dispatcher::start(
                    id,
                    consumer.to_string(),
                    topic.to_string(),
                    from,
                    members,
                    self.deps.clone(),
                )
                .await?;
                self.routes
                    .write()
                    .expect("routes lock")
                    .insert(id, handle.tx.clone());
                state.consumers.insert(
                    key,
                    ConsumerEntry {
                        dispatcher_id: id,
                        handle,
                    },
                );
            }
            (None, true) => {}
        }
        // Drop mailboxes of clients that no longer pull anything.
        let pulling: std::collections::HashSet<&str> = state
            .subs
            .values()
            .filter(|s| s.url.is_none())
            .map(|s| s.client_id.as_str())
            .collect();
        self.mailboxes
            .write()
            .expect("mailboxes lock")
            .retain(|c, _| pulling.contains(c.as_str()));
        let subscribed: std::collections::HashSet<&str> =
            state.subs.values().map(|s| s.client_id.as_str()).collect();
        self.loads
            .write()
            .expect("loads lock")
            .retain(|c, _| subscribed.contains(c.as_str()));
        Ok(())
    }

    /// Makes the in-memory view hold `sub`, starting or updating the
    /// dispatchers it affects. A no-op when it already does.
    async fn apply_put(&self, state: &mut State, sub: Subscription) -> Result<()> {
        if state.subs.get(&sub.key()) == Some(&sub) {
            return Ok(());
        }
        self.ingress.ensure_topic(&sub.topic).await?;
        let previous = state.subs.insert(sub.key(), sub.clone());
        if let Some(prev) = previous.filter(|p| p.consumer() != sub.consumer()) {
            self.sync_consumer(state, &prev.consumer(), &prev.topic, prev.from)
                .await?;
        }
        self.sync_consumer(state, &sub.consumer(), &sub.topic, sub.from)
            .await
    }

    /// Drops a subscription from the in-memory view; true when it was there.
    async fn apply_remove(&self, state: &mut State, key: &str) -> Result<bool> {
        let Some(prev) = state.subs.remove(key) else {
            return Ok(false);
        };
        self.sync_consumer(state, &prev.consumer(), &prev.topic, prev.from)
            .await?;
        Ok(true)
    }

    /// Applies a change seen in the meta store.
    async fn apply_change(&self, change: SubscriptionChange) {
        let mut state = self.state.lock().await;
        if state.stopped {
            return;
        }
        let result = match change {
            SubscriptionChange::Put(sub) => self.apply_put(&mut state, sub).await,
            SubscriptionChange::Removed(key) => self.apply_remove(&mut state, &key).await.map(drop),
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, "cannot apply a subscription change");
        }
    }

    /// Creates or replaces a subscription. Idempotent for the same
    /// (group, topic, client): the existing id is kept.
    pub async fn subscribe(&self, req: SubscribeRequest) -> Result<Subscription> {
        self.subscribe_as(req, None, None).await
    }

    /// [`Runtime::subscribe`] on behalf of an authenticated tenant and
    /// principal, recorded with the subscription.
    pub async fn subscribe_as(
        &self,
        req: SubscribeRequest,
        tenant: Option<String>,
        principal: Option<String>,
    ) -> Result<Subscription> {
        validate_name("clientId", &req.client_id)?;
        eventmesh_core::topic::validate_topic(&req.topic)?;
        let group = req.group.unwrap_or_else(|| "default".to_string());
        validate_name("group", &group)?;
        if let Some(url) = &req.url {
            validate_url(url).map_err(|m| bad("invalid_url", m))?;
        }
        let mode = req.mode.unwrap_or(DeliveryMode::LoadBalance);
        let from = req.from.unwrap_or(StartFrom::Latest);
        self.ingress.ensure_topic(&req.topic).await?;
        let mut state = self.state.lock().await;
        if state.stopped || state.draining {
            return Err(RuntimeError::ShuttingDown);
        }
        if let Some(other) = state.subs.values().find(|s| {
            s.group == group
                && s.topic == req.topic
                && s.mode != mode
                && s.client_id != req.client_id
        }) {
            return Err(RuntimeError::Conflict(format!(
                "group {group:?} on topic {:?} already has {:?} members (client {:?}); a group uses one mode",
                req.topic, other.mode, other.client_id
            )));
        }
        let mut sub = Subscription {
            subscription_id: uuid::Uuid::now_v7().to_string(),
            client_id: req.client_id,
            topic: req.topic,
            group,
            mode,
            url: req.url,
            from,
            created_ms: now_ms(),
            tenant,
            principal,
        };
        let previous = state.subs.get(&sub.key()).cloned();
        if let Some(prev) = &previous {
            sub.subscription_id = prev.subscription_id.clone();
            sub.created_ms = prev.created_ms;
        }
        self.store.put(&sub).await?;
        self.apply_put(&mut state, sub.clone()).await?;
        tracing::info!(client = %sub.client_id, topic = %sub.topic, group = %sub.group, mode = ?sub.mode, push = sub.url.is_some(), "subscribed");
        Ok(sub)
    }

    /// Removes a client's subscriptions (on one topic, or all). True when
    /// any existed.
    pub async fn unsubscribe(&self, client_id: &str, topic: Option<&str>) -> Result<bool> {
        Ok(!self.unsubscribe_all(client_id, topic).await?.is_empty())
    }

    /// Removes a client's subscriptions (on one topic, or all), returning
    /// those removed.
    pub async fn unsubscribe_all(
        &self,
        client_id: &str,
        topic: Option<&str>,
    ) -> Result<Vec<Subscription>> {
        let mut state = self.state.lock().await;
        let gone: Vec<Subscription> = state
            .subs
            .values()
            .filter(|s| s.client_id == client_id && topic.is_none_or(|t| s.topic == t))
            .cloned()
            .collect();
        for sub in &gone {
            self.store.remove(sub).await?;
            self.apply_remove(&mut state, &sub.key()).await?;
            tracing::info!(client = %sub.client_id, topic = %sub.topic, "unsubscribed");
        }
        Ok(gone)
    }

    /// The principals that subscribed a client (empty when none recorded).
    pub async fn client_principals(&self, client_id: &str) -> Vec<Option<String>> {
        let state = self.state.lock().await;
        let mut out: Vec<Option<String>> = state
            .subs
            .values()
            .filter(|s| s.client_id == client_id)
            .map(|s| s.principal.clone())
            .collect();
        out.dedup();
        out
    }

    /// Long poll: up to `max` deliveries for a pulling client, waiting up
    /// to `wait` for the first.
    pub async fn poll(
        &self,
        client_id: &str,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<PolledDelivery>> {
        if self.draining.load(Ordering::Acquire) {
            return Err(RuntimeError::ShuttingDown);
        }
        let Some(mailbox) = self.mailbox(client_id, false) else {
            return Err(RuntimeError::NotFound {
                code: "unknown_client",
                message: format!("client {client_id:?} has no pull subscription"),
            });
        };
        let items = mailbox
            .poll(max.clamp(1, MAX_POLL), wait.min(MAX_POLL_WAIT))
            .await;
        Ok(items
            .into_iter()
            .map(|i| PolledDelivery {
                delivery_id: i.delivery_id,
                event_json: i.event_json,
            })
            .collect())
    }

    /// Acknowledges a delivery. False when the id is unknown, from an
    /// earlier run, or already acknowledged.
    pub async fn ack(&self, delivery_id: &str) -> bool {
        self.settle(delivery_id, |seq, reply| Command::Ack { seq, reply })
            .await
    }

    /// Gives a delivery back: a failed attempt, sent again after the
    /// backoff (or dead-lettered when it was the last). False when the id
    /// is unknown, from an earlier run, or already settled.
    pub async fn nack(&self, delivery_id: &str) -> bool {
        self.settle(delivery_id, |seq, reply| Command::Nack { seq, reply })
            .await
    }

    async fn settle(
        &self,
        delivery_id: &str,
        command: impl FnOnce(u64, oneshot::Sender<bool>) -> Command,
    ) -> bool {
        let Some((boot, dispatcher, seq)) = parse_delivery_id(delivery_id) else {
            return false;
        };
        if boot != &*self.deps.boot {
            return false;
        }
        let Some(tx) = self
            .routes
            .read()
            .expect("routes lock")
            .get(&dispatcher)
            .cloned()
        else {
            return false;
        };
        let (reply, rx) = oneshot::channel();
        if tx.send(command(seq, reply)).await.is_err() {
            return false;
        }
        rx.await.unwrap_or(false)
    }

    /// Opens a stream (SSE, WebSocket, TCP) on a pulling client's mailbox.
    /// While the guard lives the client is online; when its last stream
    /// closes, its deliveries are released at once (see
    /// [`Runtime::release`]).
    pub fn attach_stream(self: &Arc<Self>, client_id: &str) -> Result<StreamGuard> {
        if self.is_draining() {
            return Err(RuntimeError::ShuttingDown);
        }
        let Some(mailbox) = self.mailbox(client_id, false) else {
            return Err(RuntimeError::NotFound {
                code: "unknown_client",
                message: format!("client {client_id:?} has no pull subscription"),
            });
        };
        mailbox.attach();
        Ok(StreamGuard {
            runtime: Arc::downgrade(self),
            client: client_id.to_string(),
            mailbox,
        })
    }

    /// Sends a client's unacknowledged deliveries out again at once (to
    /// another online member of its group when there is one): its stream
    /// closed, or it resumed on a new one.
    pub async fn release(&self, client_id: &str) {
        let routes: Vec<_> = self
            .routes
            .read()
            .expect("routes lock")
            .values()
            .cloned()
            .collect();
        for tx in routes {
            let _ = tx
                .send(Command::Release {
                    client: client_id.to_string(),
                })
                .await;
        }
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
        let correlation = match event.extension(CORRELATION) {
            Some(v) => v.to_text(),
            None => {
                let id = uuid::Uuid::now_v7().to_string();
                event.set_extension(CORRELATION, ExtValue::Str(id.clone()));
                id
            }
        };
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = self.requests.lock().expect("requests lock");
            if pending.contains_key(&correlation) {
                return Err(RuntimeError::Conflict(format!(
                    "a request with correlationid {correlation:?} is already waiting"
                )));
            }
            pending.insert(correlation.clone(), tx);
        }
        // Forgets the request however this call ends (reply, timeout, a
        // failed publish, or the caller going away).
        struct Forget<'a>(&'a Runtime, &'a str);
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                self.0
                    .requests
                    .lock()
                    .expect("requests lock")
                    .remove(self.1);
            }
        }
        let _forget = Forget(self, &correlation);
        self.ingress.publish(topic, vec![event]).await?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(reply)) => Ok(reply),
            _ => Err(RuntimeError::Timeout(format!(
                "no reply to request {correlation:?} within {} ms",
                timeout.as_millis()
            ))),
        }
    }

    /// Hands a reply to the request waiting for its `correlationid`.
    pub fn reply(&self, event: CloudEvent) -> Result<()> {
        let Some(correlation) = event.extension(CORRELATION).map(ExtValue::to_text) else {
            return Err(bad(
                "missing_correlation",
                "a reply must carry the correlationid extension of its request",
            ));
        };
        let waiting = self
            .requests
            .lock()
            .expect("requests lock")
            .remove(&correlation);
        if waiting.is_some_and(|tx| tx.send(event).is_ok()) {
            return Ok(());
        }
        Err(RuntimeError::NotFound {
            code: "unknown_correlation",
            message: format!(
                "no request with correlationid {correlation:?} is waiting (answered, timed out, or never made)"
            ),
        })
    }

    /// Every subscribed client with its load, sorted by id.
    pub async fn clients(&self) -> Vec<ClientStatus> {
        let state = self.state.lock().await;
        let mut by_client: std::collections::BTreeMap<&str, Vec<&Subscription>> =
            std::collections::BTreeMap::new();
        for s in state.subs.values() {
            by_client.entry(&s.client_id).or_default().push(s);
        }
        by_client
            .into_iter()
            .map(|(client, mut subs)| {
                subs.sort_by(|a, b| a.topic.cmp(&b.topic));
                ClientStatus {
                    client_id: client.to_string(),
                    inflight: self
                        .loads
                        .read()
                        .expect("loads lock")
                        .get(client)
                        .map_or(0, |l| l.inflight()),
                    queued: self.mailbox(client, false).map_or(0, |m| m.len()),
                    subscriptions: subs
                        .into_iter()
                        .map(|s| ClientSubscription {
                            topic: s.topic.clone(),
                            group: s.group.clone(),
                            mode: s.mode,
                            transport: if s.url.is_some() { "webhook" } else { "poll" },
                            url: s.url.clone(),
                        })
                        .collect(),
                }
            })
            .collect()
    }

    /// True once [`Runtime::drain`] began.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// First step of a graceful shutdown: refuse polls and new
    /// subscriptions, stop handing out events, and wait up to `grace` for
    /// the deliveries in clients' hands (webhook calls under way, polled
    /// events) to be settled. Acks keep working meanwhile.
    pub async fn drain(&self, grace: Duration) {
        let deadline = tokio::time::Instant::now() + grace;
        self.draining.store(true, Ordering::Release);
        let senders: Vec<_> = {
            let mut state = self.state.lock().await;
            state.draining = true;
            state
                .consumers
                .values()
                .map(|c| c.handle.tx.clone())
                .collect()
        };
        // Wake long polls so that they return now.
        for m in self.mailboxes.read().expect("mailboxes lock").values() {
            m.close();
        }
        let mut waits = Vec::new();
        for tx in senders {
            let (done, rx) = oneshot::channel();
            if tx.send(Command::Drain { deadline, done }).await.is_ok() {
                waits.push(rx);
            }
        }
        for rx in waits {
            let _ = tokio::time::timeout_at(deadline + Duration::from_secs(1), rx).await;
        }
    }

    /// Subscriptions, optionally of one topic, sorted by key.
    pub async fn subscriptions(&self, topic: Option<&str>) -> Vec<Subscription> {
        let state = self.state.lock().await;
        let mut subs: Vec<Subscription> = state
            .subs
            .values()
            .filter(|s| topic.is_none_or(|t| s.topic == t))
            .cloned()
            .collect();
        subs.sort_by_key(|s| s.key());
        subs
    }

    /// Dead letters of a topic, oldest key first, at most `max`.
    pub async fn dead_letters(&self, topic: &str, max: usize) -> Result<Vec<DeadLetter>> {
        Ok(self.deps.dead_letters.browse(topic, max).await?)
    }

    /// Publishes up to `max` dead letters of a topic again (as new events at
    /// the end of the log) and removes each one once it is durable again.
    /// Returns how many were replayed; one that cannot be read back as an
    /// event stays in the store and is counted in `failed`.
    pub async fn replay_dead_letters(&self, topic: &str, max: usize) -> Result<ReplayOutcome> {
        let mut outcome = ReplayOutcome::default();
        for dl in self.deps.dead_letters.browse(topic, max).await? {
            let event = match eventmesh_core::CloudEvent::from_json_slice(dl.event_json.as_bytes())
            {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(topic, id = %dl.id, error = %e, "dead letter cannot be replayed");
                    outcome.failed += 1;
                    continue;
                }
            };
            self.ingress.publish(topic, vec![event]).await?;
            self.deps.dead_letters.remove(topic, &dl.id).await?;
            outcome.replayed += 1;
        }
        Ok(outcome)
    }

    /// Committed offset, end offset and lag of every consumer of a topic.
    pub async fn offsets(&self, topic: &str) -> Result<Vec<ConsumerOffset>> {
        let Some(info) = self.log.topic(topic).await? else {
            return Err(RuntimeError::NotFound {
                code: "unknown_topic",
                message: format!("topic {topic:?} does not exist"),
            });
        };
        let mut consumers: Vec<String> = self
            .state
            .lock()
            .await
            .subs
            .values()
            .filter(|s| s.topic == topic)
            .map(|s| s.consumer())
            .collect();
        consumers.sort();
        consumers.dedup();
        let mut out = Vec::new();
        for consumer in consumers {
            let committed = self.deps.offsets.load(&consumer, topic).await?;
            for p in 0..info.partitions {
                let end = self.log.end_offset(topic, p).await?;
                let c = committed.get(&p).copied().unwrap_or(0);
                out.push(ConsumerOffset {
                    consumer: consumer.clone(),
                    partition: p,
                    committed: c,
                    end,
                    lag: end.saturating_sub(c),
                });
            }
        }
        Ok(out)
    }

    /// Every topic with its partitions' end offsets.
    pub async fn topics(&self) -> Result<Vec<TopicStatus>> {
        let mut out = Vec::new();
        for t in self.log.topics().await? {
            let mut end_offsets = Vec::with_capacity(t.partitions as usize);
            for p in 0..t.partitions {
                end_offsets.push(self.log.end_offset(&t.name, p).await?);
            }
            out.push(TopicStatus {
                name: t.name,
                partitions: t.partitions,
                end_offsets,
            });
        }
        Ok(out)
    }

    /// Stops every dispatcher (each flushes its offsets) and closes the log.
    pub async fn shutdown(&self) {
        let mut state = self.state.lock().await;
        state.stopped = true;
        self.routes.write().expect("routes lock").clear();
        for (_, entry) in state.consumers.drain() {
            stop_dispatcher(entry.handle).await;
        }
        self.log.close().await;
    }
}

/// The extension that ties a reply to its request.
pub const CORRELATION: &str = "correlationid";

/// Keeps a streaming client online; see [`Runtime::attach_stream`].
pub struct StreamGuard {
    runtime: std::sync::Weak<Runtime>,
    client: String,
    mailbox: Arc<Mailbox>,
}

impl StreamGuard {
    /// Up to `max` deliveries, waiting up to `wait` for the first; empty
    /// when nothing came or the runtime is closing (see
    /// [`StreamGuard::is_closed`]).
    pub async fn next(&self, max: usize, wait: Duration) -> Vec<PolledDelivery> {
        self.mailbox
            .poll(max.clamp(1, MAX_POLL), wait)
            .await
            .into_iter()
            .map(|i| PolledDelivery {
                delivery_id: i.delivery_id,
                event_json: i.event_json,
            })
            .collect()
    }

    /// The runtime is shutting down: the stream should end.
    pub fn is_closed(&self) -> bool {
        self.mailbox.is_closed()
    }

    pub fn client_id(&self) -> &str {
        &self.client
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if !self.mailbox.detach() {
            return;
        }
        let (Some(rt), Ok(handle)) = (
            self.runtime.upgrade(),
            tokio::runtime::Handle::try_current(),
        ) else {
            return;
        };
        let client = std::mem::take(&mut self.client);
        handle.spawn(async move { rt.release(&client).await });
    }
}

/// Applies subscription changes from the meta store until the runtime is
/// gone or the follower stops.
async fn follow_changes(
    rt: Weak<Runtime>,
    mut changes: tokio::sync::mpsc::Receiver<SubscriptionChange>,
) {
    while let Some(change) = changes.recv().await {
        let Some(rt) = rt.upgrade() else { return };
        rt.apply_change(change).await;
    }
}

async fn stop_dispatcher(handle: DispatcherHandle) {
    let (done, rx) = oneshot::channel();
    if handle.tx.send(Command::Stop(done)).await.is_ok() {
        let _ = rx.await;
    }
    let _ = handle.join.await;
}
