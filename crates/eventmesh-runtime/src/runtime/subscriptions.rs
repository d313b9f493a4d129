//! The subscriptions view: the subscriptions this instance applies, and
//! making and removing them.
//!
//! Invariants:
//! - A subscription is written to the meta store before it is applied in
//!   memory, so an acknowledged subscribe survives a crash. Changes made
//!   through other instances arrive through the store's watch and are
//!   applied the same way; applying is idempotent, so this instance's own
//!   changes coming back are no-ops.
//! - Every change to the view brings the affected consumers' dispatchers in
//!   line with their members before the view's lock is released.
//! - A client id keeps the creator of its first subscription: a later
//!   subscribe by anyone never changes the tenant or principal recorded
//!   (with `enforce`, another creator is refused with `not_owner`).
//! - A subscription names one topic (created if absent) or a pattern
//!   (`patterns.rs`: it creates no topic and follows every topic it
//!   matches, each through a consumer dispatcher of its own). The members
//!   of a consumer on a topic are the subscriptions serving that topic,
//!   each client once; the subscriptions of one group whose topics overlap
//!   share one mode and one set of filters.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use eventmesh_core::pattern::{overlap_of, parse_subscription_topic, TopicPattern};
use eventmesh_state::{
    DeliveryMode, PushSettings, StartFrom, Subscription, SubscriptionChange, SubscriptionSpec,
};

use super::consumers::Consumers;
use super::patterns::{pattern_of, Attachment};
use super::Runtime;
use crate::creator::Creator;
use crate::dispatcher::{Channel, Member, Membership};
use crate::error::{Result, RuntimeError};
use crate::ingress::now_ms;
use crate::push::{validate_url, Webhook};

/// A subscribe request (the transports' wire form is decoded into it by
/// the operation layer).
#[derive(Debug, Clone, Default)]
pub struct SubscribeRequest {
    pub client_id: String,
    pub topic: String,
    pub group: Option<String>,
    pub mode: Option<DeliveryMode>,
    pub url: Option<String>,
    pub from: Option<StartFrom>,
    /// CloudEvents Subscriptions API filter objects (JSON); every one must
    /// match for an event to be delivered.
    pub filters: Vec<serde_json::Value>,
    /// The id of the subscription when it is new (a fresh one when
    /// `None`); an existing subscription keeps its own.
    pub subscription_id: Option<String>,
    /// Headers sent with every webhook push.
    pub headers: BTreeMap<String, String>,
    /// What a CloudEvents Subscriptions API request asked for.
    pub spec: Option<SubscriptionSpec>,
    /// How a webhook subscription's events are pushed (checked here,
    /// whatever the transport).
    pub push: PushSettings,
    /// The roles of the authenticated caller, set by the operation layer
    /// (never from the wire): stored with a pattern subscription for the
    /// access check of the topics it attaches later.
    pub roles: Vec<String>,
}

/// What this instance applies: subscriptions by meta key, and the
/// dispatchers serving them.
#[derive(Default)]
pub(super) struct View {
    pub(super) subs: HashMap<String, Subscription>,
    pub(super) consumers: Consumers,
    /// The topics each pattern subscription (by key) follows; an entry for
    /// every pattern subscription in `subs`.
    pub(super) patterns: HashMap<String, Attachment>,
    /// Each client id's creator and how many subscriptions it has, kept with
    /// `subs` (`insert`, `remove`) so a creator check is one lookup.
    clients: HashMap<String, (Creator, usize)>,
}

fn creator(s: &Subscription) -> Creator {
    Creator {
        tenant: s.tenant.clone(),
        principal: s.principal.clone(),
    }
}

impl View {
    /// The creator of a client id: that of its first subscription applied.
    pub(super) fn creator_of(&self, client_id: &str) -> Option<Creator> {
        self.clients.get(client_id).map(|(o, _)| o.clone())
    }

    fn insert(&mut self, sub: Subscription) -> Option<Subscription> {
        let previous = self.subs.insert(sub.key(), sub.clone());
        if previous.is_none() {
            self.clients
                .entry(sub.client_id.clone())
                .or_insert_with(|| (creator(&sub), 0))
                .1 += 1;
        }
        previous
    }

    /// Whether `s` serves `topic`: it names it, or its pattern follows it.
    pub(super) fn serves(&self, s: &Subscription, topic: &str) -> bool {
        match self.patterns.get(&s.key()) {
            Some(a) => a.topics.contains(topic),
            None => s.topic == topic,
        }
    }

    /// The topics `s` is served on, each with where its consumer starts
    /// there.
    pub(super) fn topics_of(&self, s: &Subscription) -> Vec<(String, StartFrom)> {
        match self.patterns.get(&s.key()) {
            Some(a) => a
                .topics
                .iter()
                .map(|t| (t.clone(), a.start_of(s, t)))
                .collect(),
            None if s.is_pattern() => Vec::new(),
            None => vec![(s.topic.clone(), s.from)],
        }
    }

    /// Where the consumer of `s` starts on `topic`.
    pub(super) fn start_of(&self, s: &Subscription, topic: &str) -> StartFrom {
        match self.patterns.get(&s.key()) {
            Some(a) => a.start_of(s, topic),
            None => s.from,
        }
    }

    /// Every topic some subscription is served on.
    pub(super) fn served_topics(&self) -> BTreeSet<String> {
        let mut topics = BTreeSet::new();
        for s in self.subs.values() {
            match self.patterns.get(&s.key()) {
                Some(a) => topics.extend(a.topics.iter().cloned()),
                None if s.is_pattern() => {}
                None => {
                    topics.insert(s.topic.clone());
                }
            }
        }
        topics
    }

    fn remove(&mut self, key: &str) -> Option<Subscription> {
        let prev = self.subs.remove(key)?;
        if let Some((_, n)) = self.clients.get_mut(&prev.client_id) {
            *n -= 1;
            if *n == 0 {
                self.clients.remove(&prev.client_id);
            }
        }
        Some(prev)
    }
}

pub(super) fn bad(code: &'static str, message: impl Into<String>) -> RuntimeError {
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
    /// Whether the webhook validation handshake runs before the pushes of
    /// `s`: as it says, else as `eventmesh.webhook.handshake.enabled` says.
    pub(super) fn handshake_of(&self, s: &Subscription) -> bool {
        s.push
            .webhook_handshake
            .unwrap_or(self.deps.settings.delivery.webhook_handshake.enabled)
    }

    /// The members of a consumer and its filter, from the current
    /// subscriptions (the members of a group share one set of filters; the
    /// first member's, in client id order, should two instances have let
    /// different ones in at once).
    fn membership_of(&self, view: &View, consumer: &str, topic: &str) -> Membership {
        let mut subs: Vec<&Subscription> = view
            .subs
            .values()
            .filter(|s| s.consumer() == consumer && view.serves(s, topic))
            .collect();
        // A client serving the topic through two subscriptions (a topic and
        // a pattern of one group) is one member; the exact one first.
        subs.sort_by(|a, b| {
            (&a.client_id, a.is_pattern(), &a.topic).cmp(&(&b.client_id, b.is_pattern(), &b.topic))
        });
        subs.dedup_by(|a, b| a.client_id == b.client_id);
        let filter = subs
            .first()
            .and_then(|s| crate::filters::applied(consumer, topic, &s.filters));
        let members: Vec<Member> = subs
            .into_iter()
            .map(|s| Member {
                client_id: s.client_id.clone(),
                channel: match &s.url {
                    Some(url) => Channel::Push(Arc::new(Webhook {
                        url: url.clone(),
                        headers: s.headers.clone().into_iter().collect(),
                        settings: s.push,
                        handshake: self.handshake_of(s),
                    })),
                    None => {
                        Channel::Pull(self.clients.mailbox(&s.client_id, true).expect("created"))
                    }
                },
                load: self.clients.load(&s.client_id),
                creator: creator(s),
            })
            .collect();
        Membership { members, filter }
    }

    /// Brings a consumer's dispatcher in line with its subscriptions, then
    /// forgets the mailboxes and counts of clients that left.
    pub(super) async fn sync_consumer(
        &self,
        view: &mut View,
        consumer: &str,
        topic: &str,
        from: StartFrom,
    ) -> Result<()> {
        let membership = self.membership_of(view, consumer, topic);
        self.registry
            .sync(
                &mut view.consumers,
                consumer,
                topic,
                from,
                membership,
                &self.deps,
            )
            .await?;
        let pulling: HashSet<&str> = view
            .subs
            .values()
            .filter(|s| s.url.is_none())
            .map(|s| s.client_id.as_str())
            .collect();
        let subscribed: HashSet<&str> = view.subs.values().map(|s| s.client_id.as_str()).collect();
        self.clients.retain(&pulling, &subscribed);
        Ok(())
    }

    /// Makes the view hold `sub`, starting or updating the dispatchers it
    /// affects: on its topic (created if absent), or, for a pattern, on
    /// every existing topic it matches that the access check allows. A
    /// no-op when the view holds it already. On failure the view is as
    /// before, so that applying the change again does all of it again
    /// (the dispatchers it did bring in line are synced again, which is
    /// idempotent).
    pub(super) async fn apply_put(&self, view: &mut View, sub: Subscription) -> Result<()> {
        let key = sub.key();
        if view.subs.get(&key) == Some(&sub) {
            return Ok(());
        }
        let attachment = match pattern_of(&sub) {
            Some(p) => {
                let (topics, refused) = self.decide(&sub, self.matching_topics(&p).await?);
                Some(Attachment {
                    topics,
                    refused,
                    gone: view
                        .patterns
                        .get(&key)
                        .map(|a| a.gone.clone())
                        .unwrap_or_default(),
                })
            }
            None if sub.is_pattern() => Some(Attachment::default()),
            None => {
                self.ingress.ensure_topic(&sub.topic).await?;
                None
            }
        };
        // What the subscription was served on before, to bring in line
        // too.
        let before: Vec<(String, String, StartFrom)> = match view.subs.get(&key) {
            Some(prev) => view
                .topics_of(prev)
                .into_iter()
                .map(|(t, from)| (prev.consumer(), t, from))
                .collect(),
            None => Vec::new(),
        };
        let previous = view.insert(sub.clone());
        let previous_attachment = match attachment {
            Some(a) => view.patterns.insert(key.clone(), a),
            None => view.patterns.remove(&key),
        };
        let after: Vec<(String, String, StartFrom)> = view
            .topics_of(&sub)
            .into_iter()
            .map(|(t, from)| (sub.consumer(), t, from))
            .collect();
        let left = before
            .into_iter()
            .filter(|(c, t, _)| !after.iter().any(|(c2, t2, _)| c == c2 && t == t2));
        let mut synced = Ok(());
        for (consumer, topic, from) in left.chain(after.iter().cloned()) {
            synced = self.sync_consumer(view, &consumer, &topic, from).await;
            if synced.is_err() {
                break;
            }
        }
        if synced.is_err() {
            match previous {
                Some(prev) => {
                    view.insert(prev);
                }
                None => {
                    view.remove(&key);
                }
            }
            match previous_attachment {
                Some(a) => {
                    view.patterns.insert(key, a);
                }
                None => {
                    view.patterns.remove(&key);
                }
            }
            return synced;
        }
        if sub.url.is_none() {
            // A pulling client has its mailbox from its first pull
            // subscription on, also a pattern one with no topic attached
            // yet (so that a stream can open on it at once).
            self.clients.mailbox(&sub.client_id, true);
        }
        self.publish_topics(view).await;
        Ok(())
    }

    /// Drops a subscription from the view (and a pattern's attached
    /// topics); true when it was there. On failure the view still holds
    /// it (see [`Runtime::apply_put`]).
    async fn apply_remove(&self, view: &mut View, key: &str) -> Result<bool> {
        let Some(prev) = view.subs.get(key).cloned() else {
            return Ok(false);
        };
        let topics = view.topics_of(&prev);
        view.remove(key);
        let attachment = view.patterns.remove(key);
        for (topic, from) in topics {
            if let Err(e) = self
                .sync_consumer(view, &prev.consumer(), &topic, from)
                .await
            {
                view.insert(prev);
                if let Some(a) = attachment {
                    view.patterns.insert(key.to_string(), a);
                }
                return Err(e);
            }
        }
        self.publish_topics(view).await;
        Ok(true)
    }

    /// Applies a change seen in the meta store. A watch event may arrive
    /// after this instance wrote a newer value for the same key (a removal
    /// seen after the key was subscribed again), so the key is brought in
    /// line with what the store holds now, read under the view's lock that
    /// local writes also hold; only when the store cannot be read is the
    /// event applied as it came.
    ///
    /// False when it could not be applied (the log or the meta store
    /// unavailable for a moment): the caller applies it again later.
    pub(super) async fn apply_change(&self, change: SubscriptionChange) -> bool {
        let mut view = self.view.lock().await;
        if self.lifecycle.is_stopped() {
            return true;
        }
        let key = match &change {
            SubscriptionChange::Put(sub) => sub.key(),
            SubscriptionChange::Removed(key) => key.clone(),
        };
        let current = match self.store.get(&key).await {
            Ok(Some(sub)) => SubscriptionChange::Put(sub),
            Ok(None) => SubscriptionChange::Removed(key),
            Err(e) => {
                tracing::debug!(error = %e, "cannot read a changed subscription back; applying the change as seen");
                change
            }
        };
        let result = match current {
            SubscriptionChange::Put(sub) => self.apply_put(&mut view, sub).await,
            SubscriptionChange::Removed(key) => self.apply_remove(&mut view, &key).await.map(drop),
        };
        match result {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "cannot apply a subscription change; trying again");
                false
            }
        }
    }

    /// Creates or replaces a subscription with no creator check. Idempotent
    /// for the same (group, topic, client): the existing id is kept.
    pub async fn subscribe(&self, req: SubscribeRequest) -> Result<Subscription> {
        self.subscribe_as(req, Creator::default(), false).await
    }

    /// [`Runtime::subscribe`] on behalf of `creator`. A new client id is
    /// recorded as `creator`'s; an existing one keeps its creator, and with
    /// `enforce` a subscribe by another creator is refused (`not_owner`).
    pub async fn subscribe_as(
        &self,
        req: SubscribeRequest,
        creator: Creator,
        enforce: bool,
    ) -> Result<Subscription> {
        validate_name("clientId", &req.client_id)?;
        let pattern = parse_subscription_topic(&req.topic)?;
        let group = req.group.unwrap_or_else(|| "default".to_string());
        validate_name("group", &group)?;
        if let Some(url) = &req.url {
            validate_url(url).map_err(|m| bad("invalid_url", m))?;
        }
        crate::filters::compile(&req.filters).map_err(|m| bad("invalid_filter", m))?;
        req.push
            .check(req.url.is_some())
            .map_err(|e| bad("invalid_request", e.to_string()))?;
        let mode = req.mode.unwrap_or(DeliveryMode::LoadBalance);
        let from = req.from.unwrap_or(StartFrom::Latest);
        // A pattern creates no topic.
        let info = match pattern {
            None => Some(self.ingress.ensure_topic(&req.topic).await?),
            Some(_) => None,
        };
        let mut view = self.view.lock().await;
        self.lifecycle.check_running()?;
        let creator = match view.creator_of(&req.client_id) {
            Some(existing) if enforce && existing != creator => {
                return Err(not_creator(&req.client_id));
            }
            Some(existing) => existing,
            None => creator,
        };
        let others = view.subs.values().filter(|s| {
            s.group == group
                && (s.topic != req.topic || s.client_id != req.client_id)
                && overlap_of(&s.topic, &req.topic)
        });
        for other in others {
            let on = if other.topic == req.topic {
                format!("on topic {:?}", req.topic)
            } else {
                format!(
                    "on topic {:?} (which overlaps {:?})",
                    other.topic, req.topic
                )
            };
            if other.mode != mode {
                return Err(RuntimeError::Conflict {
                    code: "conflict",
                    message: format!(
                        "group {group:?} {on} already has {:?} members (client {:?}); a group uses one mode",
                        other.mode, other.client_id
                    ),
                });
            }
            if other.filters != req.filters {
                return Err(RuntimeError::Conflict {
                    code: "conflict",
                    message: format!(
                        "group {group:?} {on} already has members with other filters (client {:?}: {}); a group's members share one set of filters",
                        other.client_id,
                        serde_json::Value::Array(other.filters.clone())
                    ),
                });
            }
        }
        let mut sub = Subscription {
            subscription_id: req
                .subscription_id
                .unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
            client_id: req.client_id,
            topic: req.topic,
            group,
            mode,
            url: req.url,
            from,
            created_ms: now_ms(),
            tenant: creator.tenant,
            principal: creator.principal,
            filters: req.filters,
            headers: req.headers,
            spec: req.spec,
            roles: if pattern.is_some() {
                req.roles
            } else {
                Vec::new()
            },
            topics_at_subscribe: Vec::new(),
            push: req.push,
        };
        let previous = view.subs.get(&sub.key());
        if let Some(prev) = previous {
            sub.subscription_id = prev.subscription_id.clone();
            sub.created_ms = prev.created_ms;
            sub.topics_at_subscribe = prev.topics_at_subscribe.clone();
        }
        match (&pattern, info) {
            (None, Some(info)) if self.cluster.is_some() && sub.from == StartFrom::Latest => {
                self.seed_latest(&sub.consumer(), &sub.topic, info.partitions)
                    .await?;
            }
            (Some(p), _) if previous.is_none() && sub.from == StartFrom::Latest => {
                sub.topics_at_subscribe = self.seed_pattern(&sub, p).await?;
            }
            _ => {}
        }
        self.store.put(&sub).await?;
        self.apply_put(&mut view, sub.clone()).await?;
        tracing::info!(client = %sub.client_id, topic = %sub.topic, group = %sub.group, mode = ?sub.mode, push = sub.url.is_some(), pattern = pattern.is_some(), "subscribed");
        Ok(sub)
    }

    /// A new pattern subscription starting at `latest`: the topics its
    /// pattern matches now, which it reads from their end (every other
    /// topic it attaches later is new and read from its start). With
    /// partition ownership each one's end is fixed now as well
    /// ([`Runtime::seed_latest`]).
    async fn seed_pattern(
        &self,
        sub: &Subscription,
        pattern: &TopicPattern,
    ) -> Result<Vec<String>> {
        let topics = self.matching_topics(pattern).await?;
        if self.cluster.is_some() {
            for t in &topics {
                if let Some(info) = self.log.topic(t).await? {
                    self.seed_latest(&sub.consumer(), t, info.partitions)
                        .await?;
                }
            }
        }
        Ok(topics)
    }

    /// With partition ownership, a partition is first dispatched by
    /// whichever instance claims it, maybe later than the subscription
    /// was made (its owner was failing over, or the offset store was out
    /// of reach for a moment): "latest" is fixed now, as each partition's
    /// end, for the partitions where the consumer has no committed offset.
    /// Written before the subscription, so every owner that sees the
    /// subscription finds it.
    async fn seed_latest(&self, consumer: &str, topic: &str, partitions: u32) -> Result<()> {
        let mut ends = Vec::with_capacity(partitions as usize);
        for p in 0..partitions {
            ends.push((p, self.log.end_offset(topic, p).await?));
        }
        self.deps.offsets.seed(consumer, topic, &ends).await?;
        Ok(())
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
        self.unsubscribe_in(client_id, topic, None).await
    }

    /// [`Runtime::unsubscribe_all`] in one group only, with `group`.
    pub async fn unsubscribe_in(
        &self,
        client_id: &str,
        topic: Option<&str>,
        group: Option<&str>,
    ) -> Result<Vec<Subscription>> {
        let mut view = self.view.lock().await;
        let gone: Vec<Subscription> = view
            .subs
            .values()
            .filter(|s| {
                s.client_id == client_id
                    && topic.is_none_or(|t| s.topic == t)
                    && group.is_none_or(|g| s.group == g)
            })
            .cloned()
            .collect();
        for sub in &gone {
            self.store.remove(sub).await?;
            self.apply_remove(&mut view, &sub.key()).await?;
            tracing::info!(client = %sub.client_id, topic = %sub.topic, "unsubscribed");
        }
        Ok(gone)
    }
}

/// The refusal of a client id to a caller that did not create it (the
/// code stays `not_owner`: it is part of the API).
pub(super) fn not_creator(client_id: &str) -> RuntimeError {
    RuntimeError::Forbidden {
        code: "not_owner",
        message: format!("client {client_id:?} was created by another tenant or principal"),
    }
}
