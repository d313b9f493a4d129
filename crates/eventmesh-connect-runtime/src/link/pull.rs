//! Pulling links: the source kind `mesh-pull`, a link that this cluster
//! opens to a remote one to bring the remote's events home (an edge site
//! that can reach the hub but cannot be reached from it, say).
//!
//! The link subscribes at the remote, as the remote principal, to its
//! imports in the consumer group `link.<this cluster>.<name>`, polls, and
//! publishes what it gets into this cluster's log (under `renamePrefix` +
//! the remote's topic) through the operation layer as the link's
//! principal; only once that is durable does it acknowledge the deliveries
//! at the remote. The path rules are a pushing link's, seen from the other
//! end: an event whose path holds this cluster, or `maxHops` clusters, is
//! acknowledged at the remote and not brought home; what is brought home
//! has the remote added to its path.
//!
//! Invariant: a delivery is acknowledged at the remote only after its event
//! is durable here (or skipped by the path rules); a crash in between has
//! the remote deliver it again, and this cluster's idempotent publishing
//! stores it once within its window.

use std::collections::VecDeque;
use std::time::Duration;

use async_trait::async_trait;
use eventmesh_client::{Delivery, EventMeshClient, StartFrom, SubscribeOptions};
use eventmesh_connect::{
    ConnectorError, Position, Record, Source, SourceContext, SourceKind, Target,
};
use eventmesh_core::pattern::TopicPattern;
use serde_json::json;

use super::{check_remote, connect, crossing, targets_of, Config, PATH};

/// The kind's name.
pub const KIND: &str = "mesh-pull";
/// Deliveries one poll takes at most.
const POLL_MAX: usize = 1000;
/// How long one poll waits for a first delivery.
const POLL_WAIT: Duration = Duration::from_secs(1);

/// The `mesh-pull` kind.
pub struct MeshPull;

#[async_trait]
impl SourceKind for MeshPull {
    type Config = Config;
    const NAME: &'static str = KIND;
    const DESCRIPTION: &'static str =
        "Brings the events of its imports home from another eventmesh cluster, loop-free and deduplicated";

    fn check(c: &Config) -> Result<(), String> {
        if c.imports.is_empty() {
            return Err("imports: give 1 to 64 topics or patterns at the remote".into());
        }
        check_remote(c)
    }

    fn targets(c: &Config) -> Vec<Target> {
        targets_of(c)
    }

    async fn open(c: Config, ctx: SourceContext) -> Result<Box<dyn Source>, ConnectorError> {
        let (client, remote) = connect(&c, &ctx.connector, &ctx.cluster).await?;
        let client_id = format!("link.{}.{}", ctx.cluster, ctx.connector);
        let mut imports = Vec::new();
        for import in &c.imports {
            let mut sub = SubscribeOptions::new(&client_id, &import.topic);
            sub.group = Some(client_id.clone());
            sub.from = Some(StartFrom::Earliest);
            sub.filters = import.filters.clone();
            client.subscribe(sub).await.map_err(|e| {
                ConnectorError::unavailable(format!(
                    "cannot subscribe to {} at {remote}: {e}",
                    import.topic
                ))
            })?;
            imports.push(Import::of(&import.topic));
        }
        Ok(Box::new(PullSource {
            client,
            client_id,
            local: ctx.cluster,
            remote,
            prefix: c.rename_prefix.clone().unwrap_or_default(),
            max_hops: c.max_hops(),
            imports,
            seq: 0,
            pending: VecDeque::new(),
        }))
    }
}

/// An import, to tell whose a delivery is.
enum Import {
    Topic(String),
    Pattern(TopicPattern),
}

impl Import {
    fn of(topic: &str) -> Import {
        match TopicPattern::parse(topic) {
            Ok(p) if eventmesh_core::pattern::is_pattern(topic) => Import::Pattern(p),
            _ => Import::Topic(topic.to_string()),
        }
    }

    fn covers(&self, topic: &str) -> bool {
        match self {
            Import::Topic(t) => t == topic,
            Import::Pattern(p) => p.matches(topic),
        }
    }
}

/// An open pulling link.
struct PullSource {
    client: EventMeshClient,
    client_id: String,
    local: String,
    remote: String,
    prefix: String,
    max_hops: usize,
    imports: Vec<Import>,
    /// The number of the last record handed out (its position).
    seq: u64,
    /// Deliveries to acknowledge at the remote, by the record they became.
    pending: VecDeque<(u64, String)>,
}

impl PullSource {
    /// The topic here of what the remote delivered, or why it is not
    /// brought home.
    fn home(&self, d: &Delivery) -> Result<(String, eventmesh_core::CloudEvent), &'static str> {
        let topic = d.topic.as_deref().ok_or("no topic")?;
        if !self.imports.iter().any(|i| i.covers(topic)) {
            // An import the definition no longer has.
            return Err("stale");
        }
        let mut event = d.cloud_event().map_err(|_| "invalid")?;
        let path = crossing(&event, &self.remote, &self.local, self.max_hops)?;
        event.set_extension(PATH, eventmesh_core::event::ExtValue::Str(path));
        Ok((format!("{}{topic}", self.prefix), event))
    }

    /// Acknowledges deliveries at the remote, all at once; one that cannot
    /// be is delivered again and dropped here as a duplicate.
    async fn ack(&self, ids: Vec<String>) {
        let acks = ids.iter().map(|id| self.client.ack(id));
        for (id, r) in ids.iter().zip(futures::future::join_all(acks).await) {
            if let Err(e) = r {
                tracing::debug!(delivery = %id, error = %e, "cannot acknowledge at the remote");
            }
        }
    }
}

#[async_trait]
impl Source for PullSource {
    async fn poll(&mut self) -> Result<Vec<Record>, ConnectorError> {
        let got = self
            .client
            .poll(&self.client_id, POLL_WAIT, POLL_MAX)
            .await
            .map_err(|e| ConnectorError::unavailable(format!("poll at {}: {e}", self.remote)))?;
        let mut records = Vec::with_capacity(got.len());
        let mut skipped = Vec::new();
        for d in got {
            match self.home(&d) {
                Ok((topic, event)) => {
                    self.seq += 1;
                    self.pending.push_back((self.seq, d.delivery_id));
                    records.push(Record {
                        event,
                        position: json!({ "seq": self.seq }),
                        topic: Some(topic),
                    });
                }
                Err(why) => {
                    tracing::debug!(delivery = %d.delivery_id, why, "not brought home");
                    skipped.push(d.delivery_id);
                }
            }
        }
        if !skipped.is_empty() {
            self.ack(skipped).await;
        }
        Ok(records)
    }

    async fn commit(&mut self, position: &Position) -> Result<(), ConnectorError> {
        let upto = position["seq"].as_u64().unwrap_or(0);
        let mut ids = Vec::new();
        while self.pending.front().is_some_and(|(seq, _)| *seq <= upto) {
            if let Some((_, id)) = self.pending.pop_front() {
                ids.push(id);
            }
        }
        self.ack(ids).await;
        Ok(())
    }
}
