//! Moving a group's committed offsets: replay from the beginning, from a
//! time or from an offset, or skip to the end (`POST
//! /admin/groups/{group}/offsets`).
//!
//! A reset is planned where it is asked for: the topics (one, or those a
//! pattern matches), the group's consumers on each (the group itself, and
//! each broadcast member's own consumer), each partition's target offset
//! (a time resolves through [`EventLog::offset_at_time`]) and how many
//! events come again or are passed over. It is applied where each
//! partition is dispatched: by this instance without partition ownership;
//! with it, by the partition's owner (over the internal channel), or by
//! this instance for a partition nobody claims. The owner stops the
//! consumer's dispatcher (it flushes, and what it had in flight is
//! dropped: mailbox copies withdrawn, handed-out ids settle nothing from
//! then on), writes the new offsets through the fenced offset store,
//! forgets the consumer's in-flight ledger entries on those partitions,
//! and starts the dispatcher again, which reads from the new offsets.
//!
//! Invariants: while the group has deliveries in clients' hands, a reset
//! without `force` changes nothing and is refused (`409`); an offset is
//! written only by the partition's owner, or while nobody owns it, never
//! around the owner; a partition whose owner cannot be reached is tried
//! again (it may be dead, and its claim ends with its lease) until the
//! deadline, then reported unavailable with what was done.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use eventmesh_core::pattern::TopicPattern;
use eventmesh_storage::EventLog;
use serde::{Deserialize, Serialize};

use super::Runtime;
use crate::cluster::peer_post;
use crate::error::{Result, RuntimeError};

/// Where a reset moves a partition: the oldest event held, the end, the
/// first event appended at or after a time, or an offset (kept within what
/// the partition holds).
pub use eventmesh_core::position::Position as ResetTo;

/// The offset `to` names in the partition now.
pub(super) async fn resolve(
    to: ResetTo,
    log: &dyn EventLog,
    topic: &str,
    partition: u32,
) -> Result<u64> {
    Ok(match to {
        ResetTo::Earliest => log.start_offset(topic, partition).await?,
        ResetTo::Latest => log.end_offset(topic, partition).await?,
        ResetTo::TimeMs(ms) => log.offset_at_time(topic, partition, ms).await?,
        ResetTo::Offset(o) => {
            let start = log.start_offset(topic, partition).await?;
            let end = log.end_offset(topic, partition).await?;
            o.clamp(start, end.max(start))
        }
    })
}

/// A reset as the operator asks for it.
#[derive(Debug, Clone)]
pub struct ResetRequest {
    pub group: String,
    /// A topic, or a pattern (`*`, `>`) of topics.
    pub topic: String,
    /// Where every partition not in `partitions` goes; without it, only
    /// those in `partitions` move.
    pub to: Option<ResetTo>,
    pub partitions: BTreeMap<u32, ResetTo>,
    /// Release the deliveries in clients' hands instead of refusing.
    pub force: bool,
    /// Only say what would happen.
    pub dry_run: bool,
}

/// One consumer's move on one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionMove {
    pub topic: String,
    pub consumer: String,
    pub partition: u32,
    /// The committed offset before (`None`: the consumer had none there).
    pub from: Option<u64>,
    pub to: u64,
    /// Events that come again (moving back).
    pub again: u64,
    /// Events passed over (moving forward).
    pub skipped: u64,
}

/// What a reset did, or would do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResetOutcome {
    pub group: String,
    /// False for a dry run.
    pub applied: bool,
    /// Deliveries in the group's clients' hands when it was asked (a forced
    /// reset released them: they come again from the new position).
    pub held: usize,
    /// Events that come again, over every move.
    pub again: u64,
    /// Events passed over, over every move.
    pub skipped: u64,
    pub partitions: Vec<PartitionMove>,
}

/// `POST /internal/offsets/reset`: what one instance applies, for the
/// partitions it owns (or that nobody owns).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnedReset {
    pub topic: String,
    pub consumers: Vec<String>,
    pub offsets: Vec<(u32, u64)>,
    pub force: bool,
    /// Only count the deliveries in clients' hands.
    pub count_only: bool,
}

/// The answer to an [`OwnedReset`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnedResetAnswer {
    pub held: usize,
    /// Whether the offsets were written.
    pub applied: bool,
    /// Partitions another instance owns: nothing was done for them.
    pub elsewhere: Vec<u32>,
}

/// How long a reset waits for partitions whose owner cannot be reached,
/// beyond the lease that ends a dead owner's claims.
const OWNER_WAIT: Duration = Duration::from_secs(5);
const RETRY: Duration = Duration::from_millis(250);

/// Partitions and their offsets.
type Offsets = Vec<(u32, u64)>;

/// One topic's plan.
struct TopicPlan {
    topic: String,
    consumers: Vec<String>,
    offsets: Offsets,
}

/// Where a partition's reset is applied.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Where {
    Here,
    /// Another live instance owns it (its id).
    There(String),
}

impl Runtime {
    /// Plans a reset, checks the deliveries in clients' hands, and (unless
    /// a dry run) applies it where each partition is dispatched.
    pub async fn reset_offsets(&self, req: ResetRequest) -> Result<ResetOutcome> {
        self.lifecycle.check_running()?;
        if req.group.is_empty() {
            return Err(super::bad("invalid_request", "the group must not be empty"));
        }
        if req.to.is_none() && req.partitions.is_empty() {
            return Err(super::bad(
                "invalid_request",
                "nothing to reset: give to (for every partition), partitions, or both",
            ));
        }
        let topics = self.reset_topics(&req.topic).await?;
        let mut plans = Vec::new();
        let mut moves = Vec::new();
        for (topic, partitions) in topics {
            let consumers = self.consumers_of_group(&req.group, &topic).await?;
            if consumers.is_empty() {
                continue;
            }
            if let Some(p) = req.partitions.keys().find(|p| **p >= partitions) {
                return Err(super::bad(
                    "invalid_request",
                    format!("topic {topic:?} has no partition {p} (it has {partitions})"),
                ));
            }
            let mut offsets = Vec::new();
            for p in 0..partitions {
                let Some(to) = req.partitions.get(&p).copied().or(req.to) else {
                    continue;
                };
                offsets.push((p, resolve(to, &*self.log, &topic, p).await?));
            }
            for consumer in &consumers {
                let committed = self.deps.offsets.load(consumer, &topic).await?;
                for &(p, to) in &offsets {
                    let from = committed.get(&p).copied();
                    let (again, skipped) = match from {
                        Some(f) if to < f => (self.log.count_between(&topic, p, to, f).await?, 0),
                        Some(f) if to > f => (0, self.log.count_between(&topic, p, f, to).await?),
                        _ => (0, 0),
                    };
                    moves.push(PartitionMove {
                        topic: topic.clone(),
                        consumer: consumer.clone(),
                        partition: p,
                        from,
                        to,
                        again,
                        skipped,
                    });
                }
            }
            plans.push(TopicPlan {
                topic,
                consumers,
                offsets,
            });
        }
        if plans.is_empty() {
            return Err(RuntimeError::NotFound {
                code: "unknown_group",
                message: format!(
                    "group {:?} has no subscription or committed offset on {:?}",
                    req.group, req.topic
                ),
            });
        }
        let mut outcome = ResetOutcome {
            group: req.group.clone(),
            applied: false,
            held: 0,
            again: moves.iter().map(|m| m.again).sum(),
            skipped: moves.iter().map(|m| m.skipped).sum(),
            partitions: moves,
        };
        for plan in &plans {
            outcome.held += self.spread(plan, false, true).await?.held;
        }
        if req.dry_run {
            return Ok(outcome);
        }
        if outcome.held > 0 && !req.force {
            return Err(held_conflict(&req.group, outcome.held));
        }
        for (i, plan) in plans.iter().enumerate() {
            let answer = self.spread(plan, req.force, false).await?;
            if !answer.applied {
                // A member took a delivery since the count: some owners may
                // have applied their part already.
                let mut e = held_conflict(&req.group, answer.held);
                if let RuntimeError::Conflict { message, .. } = &mut e {
                    message.push_str(&format!(
                        "; it took them while the reset was under way, so partitions of {:?} \
                         owned elsewhere{} may be reset already: call again to finish",
                        plan.topic,
                        if i > 0 {
                            " (and the topics before it)"
                        } else {
                            ""
                        }
                    ));
                }
                return Err(e);
            }
        }
        outcome.applied = true;
        tracing::info!(group = %req.group, topic = %req.topic, again = outcome.again, skipped = outcome.skipped, held = outcome.held, force = req.force, "group offsets reset");
        Ok(outcome)
    }

    /// The topics a reset names, with their partition counts.
    async fn reset_topics(&self, topic: &str) -> Result<Vec<(String, u32)>> {
        match eventmesh_core::pattern::parse_subscription_topic(topic)? {
            Some(pattern) => {
                let pattern: TopicPattern = pattern;
                Ok(self
                    .log
                    .topics()
                    .await?
                    .into_iter()
                    .filter(|t| pattern.matches(&t.name))
                    .map(|t| (t.name, t.partitions))
                    .collect())
            }
            None => match self.log.topic(topic).await? {
                Some(info) => Ok(vec![(info.name, info.partitions)]),
                None => Err(RuntimeError::NotFound {
                    code: "unknown_topic",
                    message: format!("topic {topic:?} does not exist"),
                }),
            },
        }
    }

    /// The group's consumers on `topic`: the group, or its broadcast
    /// members' own consumers, from the subscriptions; the group alone when
    /// it has no subscription but committed offsets.
    async fn consumers_of_group(&self, group: &str, topic: &str) -> Result<Vec<String>> {
        let found: BTreeSet<String> = {
            let view = self.view.lock().await;
            view.subs
                .values()
                .filter(|s| s.group == group && view.serves(s, topic))
                .map(|s| s.consumer())
                .collect()
        };
        if !found.is_empty() {
            return Ok(found.into_iter().collect());
        }
        let committed = self.deps.offsets.load(group, topic).await?;
        Ok(if committed.is_empty() {
            Vec::new()
        } else {
            vec![group.to_string()]
        })
    }

    /// Applies (or, with `count_only`, asks about) one topic's plan where
    /// each partition is dispatched; the answers summed. A partition whose
    /// owner moved is sent to the new one; one whose owner cannot be
    /// reached is tried again until the lease of a dead owner has surely
    /// ended.
    async fn spread(
        &self,
        plan: &TopicPlan,
        force: bool,
        count_only: bool,
    ) -> Result<OwnedResetAnswer> {
        let mut total = OwnedResetAnswer {
            applied: true,
            ..OwnedResetAnswer::default()
        };
        let wait = self
            .cluster
            .as_ref()
            .map_or(Duration::ZERO, |c| c.lease_ttl() + OWNER_WAIT);
        let deadline = tokio::time::Instant::now() + wait;
        let mut left = plan.offsets.clone();
        // A dispatcher's deliveries in hands are counted once, however many
        // rounds ask its instance.
        let mut counted: BTreeSet<Where> = BTreeSet::new();
        let mut last_error = None;
        while !left.is_empty() {
            let mut by_owner: BTreeMap<Where, Vec<(u32, u64)>> = BTreeMap::new();
            for &(p, o) in &left {
                by_owner
                    .entry(self.where_is(&plan.topic, p))
                    .or_default()
                    .push((p, o));
            }
            left.clear();
            for (at, offsets) in by_owner {
                let req = OwnedReset {
                    topic: plan.topic.clone(),
                    consumers: plan.consumers.clone(),
                    offsets: offsets.clone(),
                    force,
                    count_only,
                };
                let answer = match &at {
                    Where::Here => Ok(self.reset_owned(req).await),
                    Where::There(id) => self.reset_at(id, &req).await,
                };
                match answer {
                    Ok(a) => {
                        if counted.insert(at) {
                            total.held += a.held;
                        }
                        total.applied &= a.applied;
                        left.extend(offsets.iter().filter(|(p, _)| a.elsewhere.contains(p)));
                    }
                    Err(e) => {
                        last_error = Some(e.to_string());
                        left.extend(offsets);
                    }
                }
            }
            if left.is_empty() {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                let partitions: Vec<u32> = left.iter().map(|(p, _)| *p).collect();
                return Err(RuntimeError::Peer(format!(
                    "the owners of {:?} partitions {partitions:?} could not be reached{}; \
                     nothing was done for them (the other partitions were {})",
                    plan.topic,
                    last_error.map(|e| format!(" ({e})")).unwrap_or_default(),
                    if count_only { "asked" } else { "reset" }
                )));
            }
            tokio::time::sleep(RETRY).await;
        }
        Ok(total)
    }

    /// Where a partition's reset is applied now.
    fn where_is(&self, topic: &str, partition: u32) -> Where {
        let Some(cluster) = &self.cluster else {
            return Where::Here;
        };
        match cluster.owner_of(topic, partition) {
            Some(claim) if claim.instance != cluster.id() => Where::There(claim.instance),
            _ => Where::Here,
        }
    }

    /// Sends a reset to the instance `id` over the internal channel.
    async fn reset_at(&self, id: &str, req: &OwnedReset) -> Result<OwnedResetAnswer> {
        let cluster = self.cluster.as_ref().expect("only with a cluster");
        let to = cluster
            .instance(id)
            .ok_or_else(|| RuntimeError::Peer(format!("instance {id} is not registered")))?;
        let resp = peer_post(
            cluster.internal(),
            cluster.secret(),
            &to,
            "/internal/offsets/reset",
        )
        .json(req)
        .send()
        .await
        .map_err(|e| RuntimeError::Peer(format!("instance {id}: {e}")))?;
        if !resp.status().is_success() {
            return Err(RuntimeError::Peer(format!(
                "instance {id} answered {}",
                resp.status()
            )));
        }
        resp.json()
            .await
            .map_err(|e| RuntimeError::Peer(format!("instance {id}: {e}")))
    }

    /// Applies a reset to the partitions of it this instance owns, or that
    /// nobody owns; the others are answered as `elsewhere`. Counts the
    /// deliveries in clients' hands of the consumers' dispatchers here
    /// first; with some and no `force`, changes nothing.
    pub async fn reset_owned(&self, req: OwnedReset) -> OwnedResetAnswer {
        let mut view = self.view.lock().await;
        let (offsets, elsewhere): (Offsets, Offsets) = req
            .offsets
            .iter()
            .partition(|(p, _)| self.where_is(&req.topic, *p) == Where::Here);
        let mut answer = OwnedResetAnswer {
            elsewhere: elsewhere.into_iter().map(|(p, _)| p).collect(),
            ..OwnedResetAnswer::default()
        };
        for consumer in &req.consumers {
            answer.held += self
                .registry
                .held(&view.consumers, consumer, &req.topic)
                .await;
        }
        if req.count_only || (answer.held > 0 && !req.force) {
            return answer;
        }
        if offsets.is_empty() {
            answer.applied = true;
            return answer;
        }
        let partitions: BTreeSet<u32> = offsets.iter().map(|(p, _)| *p).collect();
        for consumer in &req.consumers {
            self.registry
                .stop_one(&mut view.consumers, consumer, &req.topic)
                .await;
            let written = self
                .deps
                .offsets
                .reset(consumer, &req.topic, &offsets)
                .await;
            if let Err(e) = &written {
                tracing::warn!(consumer = %consumer, topic = %req.topic, error = %e, "cannot write reset offsets");
            }
            match self.deps.ledger.list(consumer, &req.topic).await {
                Ok(entries) => {
                    let gone: Vec<(u32, u64)> = entries
                        .iter()
                        .filter(|e| partitions.contains(&e.partition))
                        .map(|e| (e.partition, e.offset))
                        .collect();
                    if let Err(e) = self
                        .deps
                        .ledger
                        .remove_batch(consumer, &req.topic, &gone)
                        .await
                    {
                        tracing::warn!(consumer = %consumer, topic = %req.topic, error = %e, "cannot forget in-flight entries after a reset");
                    }
                }
                Err(e) => {
                    tracing::warn!(consumer = %consumer, topic = %req.topic, error = %e, "cannot list in-flight entries after a reset")
                }
            }
            // The dispatcher starts again on the new offsets (when the
            // consumer still has members).
            let from = view
                .subs
                .values()
                .find(|s| s.consumer() == *consumer && view.serves(s, &req.topic))
                .map(|s| view.start_of(s, &req.topic));
            if let Some(from) = from {
                if let Err(e) = self
                    .sync_consumer(&mut view, consumer, &req.topic, from)
                    .await
                {
                    tracing::warn!(consumer = %consumer, topic = %req.topic, error = %e, "cannot restart a dispatcher after a reset; trying again with the next change");
                }
            }
            if written.is_err() {
                // Another instance took the partitions meanwhile.
                answer.elsewhere.extend(partitions.iter().copied());
            }
        }
        answer.elsewhere.sort_unstable();
        answer.elsewhere.dedup();
        answer.applied = true;
        answer
    }
}

fn held_conflict(group: &str, held: usize) -> RuntimeError {
    RuntimeError::Conflict {
        code: "group_busy",
        message: format!(
            "group {group:?} has {held} deliveries in its members' hands; reset with force=true \
             to release them (they come again from the new position)"
        ),
    }
}
