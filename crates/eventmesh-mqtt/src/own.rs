//! What a connection published itself, for its MQTT 5 No Local
//! subscriptions: a message the connection published is not sent back to
//! it through a No Local subscription. Events are known by their source
//! and id (a hash of both), remembered for two generations of
//! [`GENERATION`] (at least that long), and only while the session has a
//! No Local subscription.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use eventmesh_core::CloudEvent;

/// How long one generation lasts.
const GENERATION: Duration = Duration::from_secs(60);
/// A generation this large starts the next one early (memory bound).
const MAX_PER_GENERATION: usize = 100_000;

fn key(e: &CloudEvent) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    e.source.hash(&mut h);
    e.id.hash(&mut h);
    h.finish()
}

pub(crate) struct Own {
    current: HashSet<u64>,
    previous: HashSet<u64>,
    since: Instant,
}

impl Default for Own {
    fn default() -> Self {
        Own {
            current: HashSet::new(),
            previous: HashSet::new(),
            since: Instant::now(),
        }
    }
}

impl Own {
    /// Remembers an event this connection published.
    pub(crate) fn insert(&mut self, e: &CloudEvent) {
        if self.since.elapsed() >= GENERATION || self.current.len() >= MAX_PER_GENERATION {
            self.previous = std::mem::take(&mut self.current);
            self.since = Instant::now();
        }
        self.current.insert(key(e));
    }

    /// Whether this connection published `e` (within the generations
    /// kept).
    pub(crate) fn contains(&self, e: &CloudEvent) -> bool {
        if self.current.is_empty() && self.previous.is_empty() {
            return false;
        }
        let k = key(e);
        self.current.contains(&k) || self.previous.contains(&k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(source: &str, id: &str) -> CloudEvent {
        CloudEvent::from_json_slice(
            format!(r#"{{"specversion":"1.0","id":"{id}","source":"{source}","type":"t"}}"#)
                .as_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn events_are_known_by_source_and_id() {
        let mut own = Own::default();
        assert!(!own.contains(&ev("/a", "1")));
        own.insert(&ev("/a", "1"));
        assert!(own.contains(&ev("/a", "1")));
        assert!(!own.contains(&ev("/b", "1")));
        assert!(!own.contains(&ev("/a", "2")));
        // A full generation moves to the previous one, still known.
        for i in 0..MAX_PER_GENERATION {
            own.insert(&ev("/x", &i.to_string()));
        }
        own.insert(&ev("/a", "3"));
        assert!(own.contains(&ev("/a", "1")) && own.contains(&ev("/a", "3")));
    }
}
