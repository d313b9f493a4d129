//! Delivery topology: which partitions of a topic this instance polls.
//!
//! This is the only place the runtime consults the topology. With
//! `LOCAL_STICKY_PULL` (the default) an instance polls every partition of
//! every subscribed topic. With `PARTITION_OWNED_PULL` it reads the
//! partitions its ownership loop has claimed and dispatches (the
//! [`Fence`]); without one (never the case once booted: validation
//! requires the cluster) it reads none.

use eventmesh_core::config::DeliveryTopology;

use crate::cluster::Fence;

/// The partitions of `topic` (with `partitions` partitions) that this
/// instance reads.
pub fn owned_partitions(
    topology: DeliveryTopology,
    topic: &str,
    partitions: u32,
    fence: Option<&Fence>,
) -> Vec<u32> {
    match topology {
        DeliveryTopology::LocalStickyPull => (0..partitions).collect(),
        DeliveryTopology::PartitionOwnedPull => fence
            .map(|f| {
                f.dispatched(topic)
                    .into_iter()
                    .filter(|p| *p < partitions)
                    .collect()
            })
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_sticky_pull_owns_every_partition() {
        assert_eq!(
            owned_partitions(DeliveryTopology::LocalStickyPull, "t", 4, None),
            vec![0, 1, 2, 3]
        );
    }

    #[test]
    fn partition_owned_pull_reads_what_the_fence_dispatches() {
        let owned = DeliveryTopology::PartitionOwnedPull;
        assert!(owned_partitions(owned, "t", 4, None).is_empty());
        let fence = Fence::default();
        assert!(owned_partitions(owned, "t", 4, Some(&fence)).is_empty());
        let hour = std::time::Duration::from_secs(3600);
        fence.hold_until(Some(tokio::time::Instant::now() + hour));
        fence.own("t", 3, 10);
        fence.own("t", 1, 11);
        fence.own("u", 0, 12);
        assert_eq!(owned_partitions(owned, "t", 4, Some(&fence)), vec![1, 3]);
        fence.stop_dispatching("t", 3);
        assert_eq!(owned_partitions(owned, "t", 4, Some(&fence)), vec![1]);
        assert_eq!(fence.token("t", 3), Some(10), "kept for the last commits");
        // Past the lease's sure life no claim counts.
        fence.hold_until(Some(tokio::time::Instant::now()));
        assert_eq!(fence.token("t", 1), None);
    }
}
