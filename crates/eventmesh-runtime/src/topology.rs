//! Delivery topology: which partitions of a topic this instance polls.
//!
//! This is the only place the runtime consults the topology. With
//! `LOCAL_STICKY_PULL` (the default) an instance polls every partition of
//! every subscribed topic. `PARTITION_OWNED_PULL` needs a cluster meta store
//! and is refused at boot by configuration validation until one is wired.

use eventmesh_core::config::DeliveryTopology;

/// The partitions of a topic with `partitions` partitions that this
/// instance reads.
pub fn owned_partitions(topology: DeliveryTopology, partitions: u32) -> Vec<u32> {
    match topology {
        DeliveryTopology::LocalStickyPull => (0..partitions).collect(),
        // Validation rejects this mode without a cluster meta store, so no
        // instance reaches here with it; owning nothing is the safe answer.
        DeliveryTopology::PartitionOwnedPull => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_sticky_pull_owns_every_partition() {
        assert_eq!(
            owned_partitions(DeliveryTopology::LocalStickyPull, 4),
            vec![0, 1, 2, 3]
        );
    }
}
