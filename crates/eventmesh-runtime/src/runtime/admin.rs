//! Read-only views and dead-letter operations for the admin API: clients,
//! subscriptions, topics, consumer offsets, dead letters and their replay.
//! Nothing here changes what is delivered, except a replay, which publishes
//! dead letters again through the ingress like any client.

use std::collections::BTreeMap;

use eventmesh_state::{ContentMode, DeadLetter, DeliveryMode, Subscription};
use serde::Serialize;

use super::Runtime;
use crate::error::Result;
use crate::push::HandshakeStatus;

/// A topic as `/admin/topics` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicStatus {
    pub name: String,
    pub partitions: u32,
    pub end_offsets: Vec<u64>,
}

/// A subscription as `/admin/subscriptions` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionStatus {
    #[serde(flatten)]
    pub subscription: Subscription,
    /// For a pattern subscription: the topics it follows on this instance
    /// (matching, existing, and allowed by the access check).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attached_topics: Option<Vec<String>>,
    /// For a webhook subscription: how its events are pushed, and whether
    /// its pushes flow or wait for the receiver's permission.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookStatus>,
}

/// How a webhook subscription's events are pushed, as
/// `/admin/subscriptions` shows it (defaults applied).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookStatus {
    pub content_mode: ContentMode,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_linger_ms: Option<u64>,
    /// Whether the validation handshake runs before its pushes.
    pub handshake: bool,
    /// `active`, or `paused` while its receiver refuses the handshake
    /// (pushes wait; `reason` says why).
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The handshake with its receiver's origin, once asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<HandshakeStatus>,
}

/// What a dead-letter replay did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReplayOutcome {
    pub replayed: usize,
    pub failed: usize,
    /// Ids asked for that named no dead letter.
    #[serde(skip_serializing_if = "is_zero")]
    pub missing: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
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
    /// A pulling client: `active`, or `idle` once it has been away (no
    /// poll, no stream) past `eventmesh.delivery.member.timeout.ms` and
    /// left its groups' rotation, since `idleSinceMs`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_since_ms: Option<u64>,
    /// The most deliveries it may hold unacknowledged
    /// (`eventmesh.delivery.max.inflight.per.client`).
    pub max_inflight: usize,
    /// With partition ownership: the instance a pulling client polls or
    /// streams at (the owners forward its deliveries there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub home: Option<String>,
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

impl Runtime {
    /// Every subscribed client with its load, sorted by id.
    pub async fn clients(&self) -> Vec<ClientStatus> {
        let view = self.view.lock().await;
        let mut by_client: BTreeMap<&str, Vec<&Subscription>> = BTreeMap::new();
        for s in view.subs.values() {
            by_client.entry(&s.client_id).or_default().push(s);
        }
        by_client
            .into_iter()
            .map(|(client, mut subs)| {
                subs.sort_by(|a, b| a.topic.cmp(&b.topic));
                let pulls = subs.iter().any(|s| s.url.is_none());
                let home = match &self.cluster {
                    Some(c) if pulls => Some(
                        c.home_of(client)
                            .map(|i| i.id)
                            .unwrap_or_else(|| c.id().to_string()),
                    ),
                    _ => None,
                };
                let mailbox = self.clients.mailbox(client, false);
                ClientStatus {
                    client_id: client.to_string(),
                    inflight: self.clients.inflight(client),
                    queued: mailbox.as_ref().map_or(0, |m| m.len()),
                    state: mailbox.as_ref().map(|m| match m.idle_since() {
                        Some(_) => "idle",
                        None => "active",
                    }),
                    idle_since_ms: mailbox.as_ref().and_then(|m| m.idle_since()),
                    max_inflight: self.deps.settings.delivery.max_inflight_per_client,
                    home,
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

    /// Subscriptions, optionally of one topic, sorted by key.
    pub async fn subscriptions(&self, topic: Option<&str>) -> Vec<Subscription> {
        let view = self.view.lock().await;
        let mut subs: Vec<Subscription> = view
            .subs
            .values()
            .filter(|s| topic.is_none_or(|t| s.topic == t))
            .cloned()
            .collect();
        subs.sort_by_key(|s| s.key());
        subs
    }

    /// Subscriptions as `/admin/subscriptions` shows them, sorted by key:
    /// those naming `topic` and the pattern subscriptions following it
    /// (all, without `topic`), each pattern one with the topics it
    /// follows here.
    pub async fn subscription_statuses(&self, topic: Option<&str>) -> Vec<SubscriptionStatus> {
        let view = self.view.lock().await;
        let mut subs: Vec<SubscriptionStatus> = view
            .subs
            .values()
            .filter(|s| topic.is_none_or(|t| s.topic == t || view.serves(s, t)))
            .map(|s| SubscriptionStatus {
                attached_topics: view
                    .patterns
                    .get(&s.key())
                    .map(|a| a.topics.iter().cloned().collect()),
                webhook: self.webhook_status(s),
                subscription: s.clone(),
            })
            .collect();
        subs.sort_by_key(|s| s.subscription.key());
        subs
    }

    /// How a webhook subscription's events are pushed now.
    fn webhook_status(&self, s: &Subscription) -> Option<WebhookStatus> {
        let url = s.url.as_deref()?;
        let p = &s.push;
        let batch = p.content_mode == ContentMode::Batch;
        let handshake = self.handshake_of(s);
        let origin = handshake
            .then(|| self.deps.handshakes.status(url))
            .flatten();
        let refused = origin.as_ref().filter(|o| o.state == "refused");
        Some(WebhookStatus {
            content_mode: p.content_mode,
            batch_size: batch.then(|| p.batch_size()),
            batch_linger_ms: batch.then(|| p.batch_linger_ms()),
            handshake,
            state: if refused.is_some() {
                "paused"
            } else {
                "active"
            },
            reason: refused.and_then(|o| o.reason.clone()),
            origin,
        })
    }

    /// Dead letters of a topic, oldest key first, at most `max`.
    pub async fn dead_letters(&self, topic: &str, max: usize) -> Result<Vec<DeadLetter>> {
        Ok(self.deps.dead_letters.browse(topic, max).await?)
    }

    /// Publishes up to `max` dead letters of a topic again (as new events at
    /// the end of the log) and removes each one once it is durable again.
    /// One that cannot be read back as an event stays in the store and is
    /// counted in `failed`.
    pub async fn replay_dead_letters(&self, topic: &str, max: usize) -> Result<ReplayOutcome> {
        let mut outcome = ReplayOutcome::default();
        for dl in self.deps.dead_letters.browse(topic, max).await? {
            self.replay_one(topic, dl, &mut outcome).await?;
        }
        Ok(outcome)
    }

    /// [`Self::replay_dead_letters`] for the dead letters named by id; an
    /// id with no dead letter (replayed or removed meanwhile) counts in
    /// `missing`.
    pub async fn replay_dead_letter_ids(
        &self,
        topic: &str,
        ids: &[String],
    ) -> Result<ReplayOutcome> {
        let mut outcome = ReplayOutcome::default();
        for id in ids {
            match self.deps.dead_letters.get(topic, id).await? {
                Some(dl) => self.replay_one(topic, dl, &mut outcome).await?,
                None => outcome.missing += 1,
            }
        }
        Ok(outcome)
    }

    /// Publishes one dead letter again and removes it once durable.
    async fn replay_one(
        &self,
        topic: &str,
        dl: eventmesh_state::DeadLetter,
        outcome: &mut ReplayOutcome,
    ) -> Result<()> {
        let event = match eventmesh_core::CloudEvent::from_json_slice(dl.event_json.as_bytes()) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(topic, id = %dl.id, error = %e, "dead letter cannot be replayed");
                outcome.failed += 1;
                return Ok(());
            }
        };
        // A replay is meant to be delivered again: not a duplicate.
        self.ingress.republish(topic, vec![event]).await?;
        self.deps.dead_letters.remove(topic, &dl.id).await?;
        outcome.replayed += 1;
        Ok(())
    }

    /// Removes a dead letter without replaying it; true when it existed.
    pub async fn remove_dead_letter(&self, topic: &str, id: &str) -> Result<bool> {
        Ok(self.deps.dead_letters.remove(topic, id).await?)
    }

    /// Sets `eventmesh_consumer_lag` for every consumer of every subscribed
    /// topic (series of consumers gone are dropped). Called at each scrape.
    pub async fn sample_lag(&self) {
        let topics = self.view.lock().await.served_topics();
        let mut lags: std::collections::BTreeMap<(String, String), u64> = Default::default();
        for topic in topics {
            let Ok(rows) = self.offsets(&topic).await else {
                continue;
            };
            for r in rows {
                *lags.entry((topic.clone(), r.consumer)).or_default() += r.lag;
            }
        }
        let family = &self.metrics.consumer_lag;
        family.clear();
        for ((topic, consumer), lag) in lags {
            family
                .get_or_create(&vec![
                    ("topic".to_string(), topic),
                    ("consumer".to_string(), consumer),
                ])
                .set(i64::try_from(lag).unwrap_or(i64::MAX));
        }
    }

    /// Committed offset, end offset and lag of every consumer of a topic.
    pub async fn offsets(&self, topic: &str) -> Result<Vec<ConsumerOffset>> {
        let Some(info) = self.log.topic(topic).await? else {
            return Err(super::topics::unknown_topic(topic));
        };
        let mut out = Vec::new();
        for consumer in self.consumers_of(topic).await {
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

    /// The consumers of a topic's subscriptions (and of the pattern
    /// subscriptions following it), sorted, each once.
    pub(super) async fn consumers_of(&self, topic: &str) -> Vec<String> {
        let view = self.view.lock().await;
        let mut consumers: Vec<String> = view
            .subs
            .values()
            .filter(|s| view.serves(s, topic))
            .map(|s| s.consumer())
            .collect();
        consumers.sort();
        consumers.dedup();
        consumers
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
}
