//! The narrow ways into the runtime that are not client operations: the
//! operator's (admin routes, the connector runtime's bookkeeping) and the
//! other instances' (the internal cluster routes). Each handle exposes
//! exactly the runtime calls its users make; nothing else reaches the
//! runtime except through the operations of [`super::Api`].

use std::sync::Arc;

use eventmesh_core::CloudEvent;
use eventmesh_runtime::cluster::{Cluster, ClusterView};
use eventmesh_runtime::runtime::{
    ConsumerOffset, OwnedReset, OwnedResetAnswer, ReplayOutcome, ResetOutcome, ResetRequest,
};
use eventmesh_runtime::{
    Check, ClientStatus, Creator, ForwardedDeliveries, FoundRequest, Metrics, Policy, Runtime,
    RuntimeError, Settle, Settled, SubscriptionStatus, TopicDetail, TopicStatus,
};
use eventmesh_state::DeadLetter;
use eventmesh_storage::{Durability, Retention};

type Result<T> = std::result::Result<T, RuntimeError>;

/// The operator's view and controls: health, metrics, topics, offsets,
/// dead letters, clients and the cluster. Behind the admin token (admin
/// port) or used by the runtime's own bookkeeping (connector lag and
/// counters); never by a client request.
pub struct AdminOps<'a>(pub(super) &'a Runtime);

impl<'a> AdminOps<'a> {
    pub fn is_draining(&self) -> bool {
        self.0.is_draining()
    }

    pub fn log_status(&self) -> std::result::Result<(), String> {
        self.0.log_status()
    }

    pub async fn readiness(&self, shared_meta: bool) -> Vec<Check> {
        self.0.readiness(shared_meta).await
    }

    pub fn metrics(&self) -> &'a Arc<Metrics> {
        self.0.metrics()
    }

    pub async fn sample_lag(&self) {
        self.0.sample_lag().await
    }

    /// Subscriptions naming `topic` or following it through their
    /// pattern (all, without `topic`), each pattern one with the topics it
    /// follows; push headers that carry a credential redacted.
    pub async fn subscriptions(&self, topic: Option<&str>) -> Vec<SubscriptionStatus> {
        let mut subs = self.0.subscription_statuses(topic).await;
        for s in &mut subs {
            s.subscription = s.subscription.redacted();
        }
        subs
    }

    pub async fn clients(&self) -> Vec<ClientStatus> {
        self.0.clients().await
    }

    pub async fn topics(&self) -> Result<Vec<TopicStatus>> {
        self.0.topics().await
    }

    pub async fn create_topic(
        &self,
        name: &str,
        partitions: Option<u32>,
        retention: Option<Retention>,
        ttl_ms: Option<u64>,
        durability: Durability,
    ) -> Result<TopicDetail> {
        self.0
            .create_topic(name, partitions, retention, ttl_ms, durability)
            .await
    }

    pub async fn set_topic_ttl(&self, name: &str, ttl_ms: Option<u64>) -> Result<TopicDetail> {
        self.0.set_topic_ttl(name, ttl_ms).await
    }

    pub async fn topic_detail(&self, name: &str) -> Result<TopicDetail> {
        self.0.topic_detail(name).await
    }

    pub async fn set_topic_retention(
        &self,
        name: &str,
        retention: Option<Retention>,
    ) -> Result<TopicDetail> {
        self.0.set_topic_retention(name, retention).await
    }

    pub async fn delete_topic(&self, name: &str, force: bool) -> Result<()> {
        self.0.delete_topic(name, force).await
    }

    pub async fn dead_letters(&self, topic: &str, max: usize) -> Result<Vec<DeadLetter>> {
        self.0.dead_letters(topic, max).await
    }

    pub async fn replay_dead_letters(&self, topic: &str, max: usize) -> Result<ReplayOutcome> {
        self.0.replay_dead_letters(topic, max).await
    }

    pub async fn replay_dead_letter_ids(
        &self,
        topic: &str,
        ids: &[String],
    ) -> Result<ReplayOutcome> {
        self.0.replay_dead_letter_ids(topic, ids).await
    }

    pub async fn remove_dead_letter(&self, topic: &str, id: &str) -> Result<bool> {
        self.0.remove_dead_letter(topic, id).await
    }

    pub async fn offsets(&self, topic: &str) -> Result<Vec<ConsumerOffset>> {
        self.0.offsets(topic).await
    }

    /// Up to `max` of a topic's held-back events, soonest first.
    pub async fn held_events(
        &self,
        topic: &str,
        max: usize,
    ) -> Result<Vec<eventmesh_runtime::runtime::HeldEvent>> {
        self.0.held_events(topic, max).await
    }

    /// Cancels a topic's held-back events of an id (and source).
    pub async fn cancel_held(&self, topic: &str, id: &str, source: Option<&str>) -> Result<usize> {
        self.0.cancel_held(topic, id, source).await
    }

    /// Moves a group's committed offsets (see `eventmesh_runtime::runtime::ResetRequest`).
    pub async fn reset_offsets(&self, req: ResetRequest) -> Result<ResetOutcome> {
        self.0.reset_offsets(req).await
    }

    pub fn cluster_view(&self) -> Option<ClusterView> {
        self.0.cluster_view()
    }

    pub fn cluster(&self) -> Option<&'a Arc<Cluster>> {
        self.0.cluster()
    }
}

/// What other instances ask of this one over the internal channel (behind
/// the cluster secret): forwarded deliveries, settles of deliveries handed
/// out here, and requests waiting here. The gate ran on the instance the
/// client called.
pub struct InternalOps<'a>(pub(super) &'a Runtime);

impl<'a> InternalOps<'a> {
    /// The internal channel's secret (`None` without ownership).
    pub fn cluster_secret(&self) -> Option<&'a str> {
        self.0.cluster_secret()
    }

    pub fn accept_forwarded(&self, batch: ForwardedDeliveries) -> Result<usize> {
        self.0.accept_forwarded(batch)
    }

    pub async fn settle_here(
        &self,
        delivery_id: &str,
        how: Settle,
        by: Option<&Creator>,
        policy: Policy,
    ) -> Settled {
        self.0.settle_here(delivery_id, how, by, policy).await
    }

    pub fn find_here(&self, correlation: &str) -> FoundRequest {
        self.0.find_here(correlation)
    }

    pub fn complete_here(&self, reply: CloudEvent) -> bool {
        self.0.complete_here(reply)
    }

    /// A group reset's part for the partitions this instance owns.
    pub async fn reset_owned(&self, req: OwnedReset) -> OwnedResetAnswer {
        self.0.reset_owned(req).await
    }
}
