//! Pattern subscriptions: a subscription whose topic is a pattern
//! (`orders.*.created`, `orders.>`; see `eventmesh_core::pattern`) is
//! stored and shown once, and served underneath by one consumer
//! dispatcher per concrete topic it follows (offsets per consumer and
//! concrete topic, as for any subscription). This file keeps which topics
//! each one follows (its [`Attachment`]) and follows the set of topics.
//!
//! Invariants:
//! - A topic is attached only once the access check
//!   ([`crate::access::TopicAccess`]) allowed it for the subscription's
//!   creator. A refusal is remembered, so it is decided (and audited) once
//!   per subscription and topic, until the topic goes or the subscription
//!   is applied again.
//! - A topic the pattern matched when the subscription was made
//!   (`topics_at_subscribe`) starts at the subscription's `from`; every
//!   other one (created later, or deleted and created again while the
//!   subscription stood) starts at its beginning, so nothing published to
//!   it is missed. A consumer with a committed offset resumes there.
//! - Attachments change under the view's lock only, with the
//!   subscriptions; a pattern subscription never creates a topic.
//! - New and deleted topics are found by listing the log's topics: at
//!   once when the log's topic watch moves (a topic created or deleted
//!   through this process; on JetStream also the servers' stream
//!   advisories of every other instance's) and again a second after its
//!   last move (a listing made at once may not show the change yet), and
//!   every `eventmesh.topic.pattern.rescan.ms` while pattern subscriptions
//!   exist, for what no watch told.

use std::collections::BTreeSet;
use std::sync::Weak;
use std::time::Duration;

use eventmesh_core::pattern::TopicPattern;
use eventmesh_core::throttle::{FailureLog, Report};
use eventmesh_state::{StartFrom, Subscription};
use tokio::sync::watch;

use super::subscriptions::View;
use super::Runtime;
use crate::error::Result;

/// The concrete topics one pattern subscription follows on this instance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Attachment {
    /// Attached: a consumer dispatcher of the subscription reads each.
    pub(super) topics: BTreeSet<String>,
    /// Matched, but the access check refused them.
    pub(super) refused: BTreeSet<String>,
    /// Attached once and seen gone since: created again, each is a new
    /// topic, read from its start.
    pub(super) gone: BTreeSet<String>,
}

impl Attachment {
    /// Where `sub`'s consumer starts on `topic` when it has no committed
    /// offset there yet.
    pub(super) fn start_of(&self, sub: &Subscription, topic: &str) -> StartFrom {
        if let StartFrom::Time(_) = sub.from {
            // A time means the same on every topic.
            return sub.from;
        }
        let at_subscribe = sub.topics_at_subscribe.iter().any(|t| t == topic);
        if sub.from == StartFrom::Latest && at_subscribe && !self.gone.contains(topic) {
            StartFrom::Latest
        } else {
            StartFrom::Earliest
        }
    }
}

/// The pattern of a subscription, when it has one.
pub(super) fn pattern_of(sub: &Subscription) -> Option<TopicPattern> {
    if !sub.is_pattern() {
        return None;
    }
    // Checked when subscribing; a record that fails is one no instance
    // should have let in: it follows nothing.
    TopicPattern::parse(&sub.topic)
        .inspect_err(|e| tracing::warn!(topic = %sub.topic, error = %e, "a stored subscription has a malformed pattern; it follows no topic"))
        .ok()
}

impl Runtime {
    /// The existing topics `pattern` matches, sorted.
    pub(super) async fn matching_topics(&self, pattern: &TopicPattern) -> Result<Vec<String>> {
        Ok(self
            .log
            .topics()
            .await?
            .into_iter()
            .map(|t| t.name)
            .filter(|t| pattern.matches(t))
            .collect())
    }

    /// Decides each of `topics` for `sub` with the access check: the
    /// topics allowed, and those refused.
    pub(super) fn decide(
        &self,
        sub: &Subscription,
        topics: impl IntoIterator<Item = String>,
    ) -> (BTreeSet<String>, BTreeSet<String>) {
        let (mut allowed, mut refused) = (BTreeSet::new(), BTreeSet::new());
        for t in topics {
            if self.access.may_attach(sub, &t) {
                allowed.insert(t);
            } else {
                tracing::info!(client = %sub.client_id, pattern = %sub.topic, topic = %t, "topic not attached to the pattern subscription: access denied");
                refused.insert(t);
            }
        }
        (allowed, refused)
    }

    /// Brings every pattern subscription in line with the topics that
    /// exist now: attaches new matching topics (after the access check)
    /// and detaches those gone. What cannot be brought in line now (a
    /// dispatcher that cannot start) is left for the next pass.
    pub(super) async fn rescan(&self) -> Result<()> {
        let mut view = self.view.lock().await;
        if self.lifecycle.is_stopped() || view.patterns.is_empty() {
            return Ok(());
        }
        let existing: BTreeSet<String> = self
            .log
            .topics()
            .await?
            .into_iter()
            .map(|t| t.name)
            .collect();
        let keys: Vec<String> = view.patterns.keys().cloned().collect();
        let mut changed = false;
        let mut failed = Ok(());
        for key in keys {
            let Some(sub) = view.subs.get(&key).cloned() else {
                continue;
            };
            let Some(pattern) = pattern_of(&sub) else {
                continue;
            };
            let want: BTreeSet<String> = existing
                .iter()
                .filter(|t| pattern.matches(t))
                .cloned()
                .collect();
            let consumer = sub.consumer();
            let (vanished, new) = {
                let a = view.patterns.get_mut(&key).expect("listed");
                for t in a.refused.difference(&want).cloned().collect::<Vec<_>>() {
                    a.refused.remove(&t);
                    a.gone.insert(t);
                }
                let vanished: Vec<String> = a.topics.difference(&want).cloned().collect();
                for t in &vanished {
                    a.topics.remove(t);
                    a.gone.insert(t.clone());
                }
                let new: Vec<String> = want
                    .iter()
                    .filter(|t| !a.topics.contains(*t) && !a.refused.contains(*t))
                    .cloned()
                    .collect();
                (vanished, new)
            };
            for t in vanished {
                changed = true;
                let done = self
                    .sync_consumer(&mut view, &consumer, &t, StartFrom::Earliest)
                    .await;
                match done {
                    Ok(()) => {
                        tracing::info!(client = %sub.client_id, pattern = %sub.topic, topic = %t, "topic gone: detached from the pattern subscription")
                    }
                    Err(e) => {
                        // Detached again at the next pass.
                        let a = view.patterns.get_mut(&key).expect("listed");
                        a.topics.insert(t);
                        failed = Err(e);
                    }
                }
            }
            let (allowed, refused) = self.decide(&sub, new);
            let a = view.patterns.get_mut(&key).expect("listed");
            a.refused.extend(refused);
            a.topics.extend(allowed.iter().cloned());
            for t in allowed {
                let from = view.patterns[&key].start_of(&sub, &t);
                match self.sync_consumer(&mut view, &consumer, &t, from).await {
                    Ok(()) => {
                        changed = true;
                        tracing::info!(client = %sub.client_id, pattern = %sub.topic, topic = %t, ?from, "topic attached to the pattern subscription");
                    }
                    Err(e) => {
                        // Decided and attached again at the next pass.
                        let a = view.patterns.get_mut(&key).expect("listed");
                        a.topics.remove(&t);
                        failed = Err(e);
                    }
                }
            }
        }
        if changed {
            self.publish_topics(&view).await;
        }
        failed
    }

    /// Detaches `topic` from every pattern subscription following it (the
    /// topic is being deleted), stopping the dispatchers left without
    /// members.
    pub(super) async fn detach_topic(&self, view: &mut View, topic: &str) -> Result<()> {
        let keys: Vec<String> = view
            .patterns
            .iter()
            .filter(|(_, a)| a.topics.contains(topic) || a.refused.contains(topic))
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            let a = view.patterns.get_mut(&key).expect("listed");
            a.refused.remove(topic);
            a.gone.insert(topic.to_string());
            if !a.topics.remove(topic) {
                continue;
            }
            if let Some(sub) = view.subs.get(&key).cloned() {
                self.sync_consumer(view, &sub.consumer(), topic, StartFrom::Earliest)
                    .await?;
            }
        }
        Ok(())
    }

    /// Whether any pattern subscription is applied here.
    async fn has_patterns(&self) -> bool {
        !self.view.lock().await.patterns.is_empty()
    }
}

/// After a notification, a second pass this long after the first: the
/// listing made at once may not show the change yet (a JetStream server
/// announces a deleted stream a moment before it stops listing it).
const SETTLE: Duration = Duration::from_secs(1);

/// Follows the set of topics for the pattern subscriptions until the
/// runtime is gone: a pass at once when `watch` moves and another
/// [`SETTLE`] after the last move, and one every `every` while pattern
/// subscriptions exist.
pub(super) async fn follow_topics(
    rt: Weak<Runtime>,
    every: Duration,
    mut watch: Option<watch::Receiver<u64>>,
) {
    let mut faults = FailureLog::default();
    let mut settle: Option<tokio::time::Instant> = None;
    loop {
        let periodic = tokio::time::Instant::now() + every;
        let wake = settle.map_or(periodic, |s| s.min(periodic));
        let notified = match watch.as_mut() {
            Some(w) => tokio::select! {
                changed = w.changed() => changed.is_ok(),
                _ = tokio::time::sleep_until(wake) => false,
            },
            None => {
                tokio::time::sleep_until(wake).await;
                false
            }
        };
        if watch.as_ref().is_some_and(|w| w.has_changed().is_err()) {
            // The log is gone: passes on the timer only.
            watch = None;
        }
        settle = notified.then(|| tokio::time::Instant::now() + SETTLE);
        let Some(rt) = rt.upgrade() else { return };
        if rt.lifecycle.is_stopped() {
            return;
        }
        if !rt.has_patterns().await {
            continue;
        }
        match rt.rescan().await {
            Ok(()) => {
                if let Report::Recovered { failures } = faults.succeeded() {
                    tracing::info!(failures, "pattern subscriptions follow the topics again");
                }
            }
            Err(e) => {
                if let Report::Failure { suppressed } = faults.failed() {
                    tracing::warn!(error = %e, suppressed, "cannot bring pattern subscriptions in line with the topics; trying again");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventmesh_state::DeliveryMode;

    fn sub(from: StartFrom, at_subscribe: &[&str]) -> Subscription {
        Subscription {
            subscription_id: "id".into(),
            client_id: "c".into(),
            topic: "orders.*".into(),
            group: "g".into(),
            mode: DeliveryMode::LoadBalance,
            url: None,
            from,
            created_ms: 1,
            tenant: None,
            principal: None,
            filters: Vec::new(),
            roles: Vec::new(),
            topics_at_subscribe: at_subscribe.iter().map(|t| t.to_string()).collect(),
            push: Default::default(),
            headers: Default::default(),
            spec: None,
        }
    }

    #[test]
    fn only_topics_there_at_subscribe_start_at_latest() {
        let mut a = Attachment::default();
        let latest = sub(StartFrom::Latest, &["orders.eu"]);
        assert_eq!(a.start_of(&latest, "orders.eu"), StartFrom::Latest);
        assert_eq!(a.start_of(&latest, "orders.us"), StartFrom::Earliest);
        // Gone and created again: a new topic.
        a.gone.insert("orders.eu".into());
        assert_eq!(a.start_of(&latest, "orders.eu"), StartFrom::Earliest);
        let earliest = sub(StartFrom::Earliest, &[]);
        assert_eq!(a.start_of(&earliest, "orders.us"), StartFrom::Earliest);
    }

    #[test]
    fn a_malformed_stored_pattern_follows_nothing() {
        let mut s = sub(StartFrom::Latest, &[]);
        assert!(pattern_of(&s).is_some());
        s.topic = "orders.>.x".into();
        assert!(pattern_of(&s).is_none());
        s.topic = "orders".into();
        assert!(pattern_of(&s).is_none());
    }
}
