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

    /// Every `.rs` file under `dir`, with its text.
    fn sources(dir: &std::path::Path, out: &mut Vec<(std::path::PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).expect("read the sources") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("read a source file");
                out.push((path, text));
            }
        }
    }

    #[test]
    fn the_topology_is_consulted_from_one_place() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&root, &mut files);
        let mut callers = Vec::new();
        for (path, text) in &files {
            let rel = path
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .to_string();
            if rel == "topology.rs" || rel.starts_with("dispatcher/tests") {
                continue;
            }
            // No other code decides by the topology's value ...
            assert!(
                !text.contains("DeliveryTopology::"),
                "{rel} matches on the delivery topology; only topology.rs may"
            );
            // ... and one place asks this module which partitions to read.
            callers.extend(
                text.matches("topology::owned_partitions(")
                    .map(|_| rel.clone()),
            );
        }
        assert_eq!(callers, ["dispatcher/start.rs"]);
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
