//! Which live instance should own a partition: rendezvous hashing over the
//! instances' ids. Every instance computes the same answer from the same
//! set of live instances, with no coordination; when an instance joins it
//! takes only the partitions it now scores highest on, and when one leaves
//! only its own partitions move.

use eventmesh_core::topic::rendezvous_score;

/// The instance that should own `partition` of `topic`, among `instances`
/// (`None` when there are none).
pub fn assignee<'a>(
    topic: &str,
    partition: u32,
    instances: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let key = format!("{topic}/{partition}");
    instances
        .into_iter()
        // Ties (never seen in practice) go to the smaller id, so the
        // answer does not depend on the order of `instances`.
        .max_by(|a, b| {
            let (sa, sb) = (
                rendezvous_score(key.as_bytes(), a.as_bytes()),
                rendezvous_score(key.as_bytes(), b.as_bytes()),
            );
            sa.cmp(&sb).then_with(|| b.cmp(a))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn owners(instances: &[&str], partitions: u32) -> BTreeMap<(String, u32), String> {
        let mut out = BTreeMap::new();
        for t in ["orders", "payments", "a/b"] {
            for p in 0..partitions {
                let o = assignee(t, p, instances.iter().copied()).unwrap();
                out.insert((t.to_string(), p), o.to_string());
            }
        }
        out
    }

    #[test]
    fn same_answer_whatever_the_order() {
        let a = owners(&["i-1", "i-2", "i-3"], 16);
        let b = owners(&["i-3", "i-1", "i-2"], 16);
        assert_eq!(a, b);
        assert_eq!(assignee("t", 0, std::iter::empty()), None);
    }

    #[test]
    fn spread_over_every_instance() {
        let a = owners(&["i-1", "i-2", "i-3"], 32);
        for i in ["i-1", "i-2", "i-3"] {
            let n = a.values().filter(|o| *o == i).count();
            // 96 partitions over 3: each gets a fair share (not p % n, but
            // far from one instance taking most).
            assert!((16..=48).contains(&n), "{i} owns {n} of 96");
        }
    }

    #[test]
    fn a_leaver_moves_only_its_own_partitions_and_a_joiner_only_takes() {
        let three = owners(&["i-1", "i-2", "i-3"], 32);
        let two = owners(&["i-1", "i-3"], 32);
        for (k, o) in &three {
            if o != "i-2" {
                assert_eq!(&two[k], o, "{k:?} moved though its owner stayed");
            }
        }
        let four = owners(&["i-1", "i-2", "i-3", "i-4"], 32);
        let mut moved = 0;
        for (k, o) in &three {
            if &four[k] != o {
                assert_eq!(four[k], "i-4", "{k:?} moved between old instances");
                moved += 1;
            }
        }
        assert!(moved > 0, "the joiner took nothing");
    }
}
