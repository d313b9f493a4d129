//! Topic names and partition selection.
//!
//! A topic name is 1 to 255 bytes of `[A-Za-z0-9._/-]`. An event with a
//! `partitionkey` extension always lands in the same partition of a topic (a
//! stable FNV-1a hash of the key, identical across processes and releases);
//! events without one are spread round-robin by the caller.

use crate::CoreError;

/// Longest topic name accepted, in bytes.
pub const MAX_TOPIC_LEN: usize = 255;

/// Checks a topic name, naming the offending character when there is one.
pub fn validate_topic(name: &str) -> Result<(), CoreError> {
    if name.is_empty() {
        return Err(CoreError::InvalidTopic("topic name is empty".into()));
    }
    if name.len() > MAX_TOPIC_LEN {
        return Err(CoreError::InvalidTopic(format!(
            "topic name is {} bytes long; the limit is {MAX_TOPIC_LEN}",
            name.len()
        )));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-')))
    {
        return Err(CoreError::InvalidTopic(format!(
            "topic name {name:?} contains {c:?}; allowed characters are A-Z a-z 0-9 . _ / -"
        )));
    }
    Ok(())
}

/// FNV-1a, 64 bit. Stable across platforms and releases, which partition
/// stickiness depends on.
pub fn stable_hash(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Rendezvous (highest random weight) score of `candidate` for `key`: the
/// candidate with the highest score takes the key, so adding or removing
/// one candidate moves only the keys it gains or held. The FNV-1a hash of
/// `key`, a zero byte and `candidate`, mixed by the SplitMix64 finalizer so
/// that candidates differing in their last bytes still score apart.
pub fn rendezvous_score(key: &[u8], candidate: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.iter().chain(&[0u8]).chain(candidate) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The partition a partition key maps to.
pub fn partition_for_key(key: &str, partitions: u32) -> u32 {
    partition_of(stable_hash(key.as_bytes()), partitions)
}

/// The partition a 64-bit hash (or counter) falls in.
pub fn partition_of(hash: u64, partitions: u32) -> u32 {
    (hash % u64::from(partitions.max(1))) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_allowed_names() {
        for n in ["orders", "a", "team-1/orders.v2_x", &"x".repeat(255)] {
            assert!(validate_topic(n).is_ok(), "{n}");
        }
    }

    #[test]
    fn rejects_bad_names() {
        assert!(validate_topic("").is_err());
        assert!(validate_topic(&"x".repeat(256)).is_err());
        let e = validate_topic("orders created").unwrap_err();
        assert!(e.to_string().contains("' '"), "{e}");
        assert!(validate_topic("ørders").is_err());
        assert_eq!(validate_topic("a*b").unwrap_err().code(), "invalid_topic");
    }

    #[test]
    fn hash_is_stable_and_spreads() {
        // Known FNV-1a 64 vectors.
        assert_eq!(stable_hash(b""), 0xcbf29ce484222325);
        assert_eq!(stable_hash(b"a"), 0xaf63dc4c8601ec8c);
        let mut seen = [0u32; 4];
        for i in 0..1000 {
            seen[partition_for_key(&format!("key-{i}"), 4) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 150), "{seen:?}");
        assert_eq!(partition_for_key("k", 1), 0);
    }
}
