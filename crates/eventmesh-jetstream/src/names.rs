//! How topics are named on JetStream: one stream per topic, one subject per
//! partition.
//!
//! A topic name (`[A-Za-z0-9._/-]`, up to 255 bytes) is escaped into one
//! token that is valid both in a stream name (no `.`, `/`, `*`, `>`) and as
//! a subject token: letters, digits and `-` stay, `_` becomes `__`, `.`
//! becomes `_d` and `/` becomes `_s`. The escape is reversible, so two
//! topics never share a token. A token too long for a stream name (whose
//! store is a directory) is cut and suffixed with a hash of the whole name.
//!
//! Stream `<prefix>_<token>` holds subjects `<prefix>.<token>.<partition>`.

/// Longest escaped token kept whole.
const MAX_TOKEN: usize = 160;

/// Stream and subjects of one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Names {
    pub stream: String,
    /// `<prefix>.<token>.`: a partition's subject is this and its number.
    pub subject_base: String,
}

impl Names {
    pub fn new(prefix: &str, topic: &str) -> Names {
        let token = token(topic);
        Names {
            stream: format!("{prefix}_{token}"),
            subject_base: format!("{prefix}.{token}."),
        }
    }

    pub fn subject(&self, partition: u32) -> String {
        format!("{}{partition}", self.subject_base)
    }

    /// Every subject of the topic.
    pub fn wildcard(&self) -> String {
        format!("{}*", self.subject_base)
    }

    /// The stream of the topic's held-back events (scheduled delivery):
    /// the topic's token and `_h`, which no token ends in (an `_` in a
    /// token always starts `__`, `_d` or `_s`), so no topic's stream has
    /// this name.
    pub fn held_stream(&self) -> String {
        format!("{}_h", self.stream)
    }

    /// The subject of a partition's held-back events.
    pub fn held_subject(&self, partition: u32) -> String {
        let base = self.subject_base.trim_end_matches('.');
        format!("{base}_h.{partition}")
    }

    /// Every held-back subject of the topic.
    pub fn held_wildcard(&self) -> String {
        let base = self.subject_base.trim_end_matches('.');
        format!("{base}_h.*")
    }

    /// The partition a stored message's subject names.
    pub fn partition_of(&self, subject: &str) -> Option<u32> {
        subject.strip_prefix(&self.subject_base)?.parse().ok()
    }
}

fn token(topic: &str) -> String {
    let mut out = String::with_capacity(topic.len() + 8);
    for c in topic.chars() {
        match c {
            '_' => out.push_str("__"),
            '.' => out.push_str("_d"),
            '/' => out.push_str("_s"),
            c => out.push(c),
        }
    }
    if out.len() > MAX_TOKEN {
        let mut cut = MAX_TOKEN - 17;
        // Never end on half an escape.
        if out.as_bytes()[..cut]
            .iter()
            .rev()
            .take_while(|b| **b == b'_')
            .count()
            % 2
            == 1
        {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str(&format!("-{:016x}", fnv1a(topic.as_bytes())));
    }
    out
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h: u64, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_escape_every_character_a_stream_name_refuses() {
        let n = Names::new("EM", "team_1/orders.v2");
        assert_eq!(n.stream, "EM_team__1_sorders_dv2");
        assert_eq!(n.subject(3), "EM.team__1_sorders_dv2.3");
        assert_eq!(n.wildcard(), "EM.team__1_sorders_dv2.*");
        assert_eq!(n.partition_of("EM.team__1_sorders_dv2.3"), Some(3));
        assert_eq!(n.partition_of("EM.other.3"), None);
    }

    #[test]
    fn distinct_topics_get_distinct_tokens() {
        let names = ["a.b", "a_b", "a/b", "a_db", "a__b", "a-b"];
        let mut tokens: Vec<String> = names.iter().map(|t| token(t)).collect();
        tokens.sort();
        tokens.dedup();
        assert_eq!(tokens.len(), names.len(), "{tokens:?}");
    }

    #[test]
    fn long_names_are_cut_and_hashed() {
        let a = "x".repeat(255);
        let b = format!("{}y", "x".repeat(254));
        let (ta, tb) = (token(&a), token(&b));
        assert_eq!(ta.len(), MAX_TOKEN);
        assert_ne!(ta, tb);
        let dots = ".".repeat(255);
        let td = token(&dots);
        assert!(td.len() <= MAX_TOKEN);
        // Only whole escapes are kept before the hash.
        assert_eq!((td.len() - 17) % 2, 0, "{td}");
    }
}
