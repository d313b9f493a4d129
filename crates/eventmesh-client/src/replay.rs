//! Replay: moving a consumer group's committed offsets back to a time, the
//! beginning or an offset, or on to the end. This is an operator's call on
//! the admin port, so it takes a client made for the admin URL with the
//! admin token:
//!
//! ```no_run
//! use eventmesh_client::{EventMeshClient, ResetOffsets, ResetTo};
//!
//! # async fn demo() -> eventmesh_client::Result<()> {
//! let admin = EventMeshClient::new("http://127.0.0.1:10106")?.with_token("admin-token");
//! // First ask what would happen, then do it.
//! let reset = ResetOffsets::new("orders", ResetTo::Earliest);
//! let plan = admin.reset_offsets("billing", &reset.clone().dry_run()).await?;
//! println!("{} events would come again", plan.again);
//! admin.reset_offsets("billing", &reset.force()).await?;
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::{EventMeshClient, Result};

/// Where a reset moves a partition: `Earliest` (the oldest event held),
/// `Latest` (the end), `TimeMs` (the first event appended at or after a
/// time, ms since the epoch) or `Offset` (kept within what the partition
/// holds); `ResetTo::parse` reads the forms the CLI takes.
pub use eventmesh_core::position::Position as ResetTo;

/// A reset of one group on a topic (or a pattern of topics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetOffsets {
    pub topic: String,
    /// Where every partition not in `partitions` goes (`None`: only those).
    pub to: Option<ResetTo>,
    pub partitions: BTreeMap<u32, ResetTo>,
    /// Release deliveries the group's members hold instead of refusing.
    pub force: bool,
    /// Only say what would happen.
    pub dry_run: bool,
}

impl ResetOffsets {
    /// Every partition of `topic` to `to`.
    pub fn new(topic: impl Into<String>, to: ResetTo) -> Self {
        ResetOffsets {
            topic: topic.into(),
            to: Some(to),
            partitions: BTreeMap::new(),
            force: false,
            dry_run: false,
        }
    }

    /// Only the partitions given with [`ResetOffsets::partition`].
    pub fn partitions_of(topic: impl Into<String>) -> Self {
        ResetOffsets {
            to: None,
            ..ResetOffsets::new(topic, ResetTo::Latest)
        }
    }

    /// Partition `p` to `to` (instead of the topic-wide target).
    pub fn partition(mut self, p: u32, to: ResetTo) -> Self {
        self.partitions.insert(p, to);
        self
    }

    pub fn force(mut self) -> Self {
        self.force = true;
        self
    }

    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }

    /// The query of this reset (`force`, `dryRun`).
    pub fn query(&self) -> Vec<(&'static str, &'static str)> {
        let mut q = Vec::new();
        if self.force {
            q.push(("force", "true"));
        }
        if self.dry_run {
            q.push(("dryRun", "true"));
        }
        q
    }

    /// The request body.
    pub fn body(&self) -> Value {
        let mut body = json!({ "topic": self.topic });
        if let Some(to) = self.to {
            body["to"] = to.to_json();
        }
        if !self.partitions.is_empty() {
            let parts: serde_json::Map<String, Value> = self
                .partitions
                .iter()
                .map(|(p, to)| (p.to_string(), to.to_json()))
                .collect();
            body["partitions"] = Value::Object(parts);
        }
        body
    }
}

/// What a reset did, or would do.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResetOutcome {
    pub group: String,
    /// False for a dry run.
    pub applied: bool,
    /// Deliveries the group's members held (released, when forced).
    pub held: u64,
    /// Events that come again.
    pub again: u64,
    /// Events passed over.
    pub skipped: u64,
    pub partitions: Vec<PartitionMove>,
}

/// One consumer's move on one partition.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionMove {
    pub topic: String,
    pub consumer: String,
    pub partition: u32,
    /// The committed offset before (`None`: none there yet).
    pub from: Option<u64>,
    pub to: u64,
    pub again: u64,
    pub skipped: u64,
}

impl EventMeshClient {
    /// Moves `group`'s committed offsets (`POST
    /// /admin/groups/{group}/offsets`; call it on a client of the admin
    /// URL, with the admin token). Refused with `409 group_busy` while the
    /// group's members hold deliveries, unless [`ResetOffsets::force`].
    pub async fn reset_offsets(&self, group: &str, reset: &ResetOffsets) -> Result<ResetOutcome> {
        let url = self.endpoint(&format!("admin/groups/{group}/offsets"), &reset.query());
        self.post_json_to(url, &reset.body()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_goes_out_as_the_admin_api_reads_it() {
        let r = ResetOffsets::new("orders.*", ResetTo::TimeMs(1_796_461_200_250))
            .partition(3, ResetTo::Offset(17))
            .force();
        assert_eq!(r.query(), [("force", "true")]);
        assert_eq!(
            r.body(),
            json!({"topic": "orders.*", "to": "2026-12-05T09:00:00.250Z", "partitions": {"3": 17}})
        );
        let r = ResetOffsets::partitions_of("t")
            .partition(0, ResetTo::Earliest)
            .dry_run();
        assert_eq!(r.query(), [("dryRun", "true")]);
        assert_eq!(
            r.body(),
            json!({"topic": "t", "partitions": {"0": "earliest"}})
        );
    }
}
