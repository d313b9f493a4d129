//! The members of a consumer and which one takes an event.
//!
//! Rendezvous hashing: every member scores the event's key (its partition
//! key, else its partition) and the best score takes it, so a member
//! joining or leaving moves only the keys it gains or loses. Invariants:
//! - a new event goes to the best *online* member with room (below
//!   `max_inflight_per_client` over all its subscriptions); streaming
//!   clients that are away get new events only when no member is online;
//!   when every candidate is at its cap the event is not taken (reading
//!   waits), so a slow client stalls nobody else;
//! - an event already in flight is re-routed by one rule ([`Router::destination`]):
//!   it stays with its member while that member is in the group, unless the
//!   member's stream closed and another online member has room; a member
//!   that left hands it to the best remaining one, with room or not (it
//!   was admitted already).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use eventmesh_core::topic::rendezvous_score;
use eventmesh_core::CloudEvent;

use crate::creator::Creator;
use crate::mailbox::Mailbox;
use crate::push::Webhook;

/// Where a member receives its deliveries.
#[derive(Clone)]
pub enum Channel {
    Pull(Arc<Mailbox>),
    Push(Arc<Webhook>),
}

#[derive(Clone)]
pub struct Member {
    pub client_id: String,
    pub channel: Channel,
    pub load: Arc<ClientLoad>,
    /// Who created the client id: only they may settle its deliveries.
    pub creator: Creator,
}

impl Member {
    /// False for a streaming client with no stream open.
    pub fn is_online(&self) -> bool {
        match &self.channel {
            Channel::Pull(mailbox) => !mailbox.is_offline(),
            Channel::Push(_) => true,
        }
    }
}

/// Deliveries a client holds, over every dispatcher that serves it.
#[derive(Debug, Default)]
pub struct ClientLoad {
    inflight: AtomicUsize,
}

impl ClientLoad {
    pub fn inflight(&self) -> usize {
        self.inflight.load(Ordering::Relaxed)
    }

    pub(crate) fn charge(&self) {
        self.inflight.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn release(&self) {
        let _ = self
            .inflight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }
}

pub(crate) struct Router {
    members: Vec<Arc<Member>>,
    cap: usize,
    /// The members' order (indices into `members`) for events without a
    /// partition key, by partition: it depends only on the partition and
    /// the membership, so it is scored once per membership, not per event.
    by_partition: RefCell<HashMap<u32, Arc<[usize]>>>,
}

impl Router {
    pub(crate) fn new(members: Vec<Member>, cap: usize) -> Self {
        let mut r = Router {
            members: Vec::new(),
            cap,
            by_partition: RefCell::default(),
        };
        r.set(members);
        r
    }

    pub(crate) fn set(&mut self, members: Vec<Member>) {
        self.members = members.into_iter().map(Arc::new).collect();
        self.by_partition.get_mut().clear();
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub(crate) fn get(&self, client: &str) -> Option<&Arc<Member>> {
        self.members.iter().find(|m| m.client_id == client)
    }

    fn has_room(&self, m: &Member) -> bool {
        m.load.inflight() < self.cap
    }

    /// Members best first for the event's key.
    pub(crate) fn ranked(&self, event: &CloudEvent, partition: u32) -> Vec<&Arc<Member>> {
        self.order(event, partition)
            .iter()
            .map(|&i| &self.members[i])
            .collect()
    }

    /// The members' order for the event's key (its partition key, else its
    /// partition), as indices into `members`, best first.
    fn order(&self, event: &CloudEvent, partition: u32) -> Arc<[usize]> {
        match event.partition_key() {
            Some(key) => self.score(key.as_bytes()),
            None => self
                .by_partition
                .borrow_mut()
                .entry(partition)
                .or_insert_with(|| self.score(format!("#{partition}").as_bytes()))
                .clone(),
        }
    }

    fn score(&self, key: &[u8]) -> Arc<[usize]> {
        let mut scored: Vec<(u64, usize)> = self
            .members
            .iter()
            .enumerate()
            .map(|(i, m)| (rendezvous_score(key, m.client_id.as_bytes()), i))
            .collect();
        // Stable: equal scores keep the members' order.
        scored.sort_by_key(|s| std::cmp::Reverse(s.0));
        scored.into_iter().map(|(_, i)| i).collect()
    }

    /// The member that takes a new event, or `None` when every candidate
    /// is at its cap.
    pub(crate) fn pick(&self, event: &CloudEvent, partition: u32) -> Option<Arc<Member>> {
        if let [only] = self.members.as_slice() {
            return self.has_room(only).then(|| only.clone());
        }
        let order = self.order(event, partition);
        let mut ranked = order.iter().map(|&i| &self.members[i]);
        let any_online = ranked.clone().any(|m| m.is_online());
        ranked
            .find(|m| self.has_room(m) && (m.is_online() || !any_online))
            .cloned()
    }

    /// Where an event in flight held by `holder` goes next: to `holder`
    /// while it is a member, unless `leaving` (its stream closed) and
    /// another online member has room; when `holder` left the group, to the
    /// best remaining member, preferring online ones with room. `None` only
    /// when the group is empty.
    pub(crate) fn destination(
        &self,
        event: &CloudEvent,
        partition: u32,
        holder: &str,
        leaving: bool,
    ) -> Option<Arc<Member>> {
        let current = self.get(holder);
        if let (Some(m), false) = (current, leaving) {
            return Some(m.clone());
        }
        let others: Vec<&Arc<Member>> = self
            .ranked(event, partition)
            .into_iter()
            .filter(|m| m.client_id != holder)
            .collect();
        if let Some(m) = others.iter().find(|m| m.is_online() && self.has_room(m)) {
            return Some((*m).clone());
        }
        if let Some(m) = current {
            return Some(m.clone());
        }
        others
            .iter()
            .find(|m| self.has_room(m))
            .or(others.first())
            .map(|m| (*m).clone())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn event(key: Option<&str>) -> CloudEvent {
        let mut v = serde_json::json!({
            "specversion": "1.0", "id": "e", "source": "/t", "type": "t"
        });
        if let Some(k) = key {
            v["partitionkey"] = k.into();
        }
        CloudEvent::from_json_value(v).unwrap()
    }

    pub(crate) fn pull(client: &str) -> Member {
        Member {
            client_id: client.into(),
            channel: Channel::Pull(Arc::new(Mailbox::default())),
            load: Arc::default(),
            creator: Creator::default(),
        }
    }

    fn ids(ms: &[&Arc<Member>]) -> Vec<String> {
        ms.iter().map(|m| m.client_id.clone()).collect()
    }

    fn set_offline(m: &Member) {
        let Channel::Pull(mb) = &m.channel else {
            unreachable!()
        };
        mb.attach();
        mb.detach();
    }

    /// Events without a key are placed by their partition's order, which
    /// is kept per partition: it is the order scored afresh, and a change
    /// of membership scores it again.
    #[test]
    fn a_partitions_order_is_kept_until_the_membership_changes() {
        let keyless = event(None);
        let fresh = |members: Vec<Member>, p: u32| {
            let r = Router::new(members, 10);
            ids(&r.ranked(&keyless, p))
        };
        let mut r = Router::new(vec![pull("a"), pull("b"), pull("c")], 10);
        let mut firsts = std::collections::BTreeSet::new();
        for p in 0..32 {
            let expected = fresh(vec![pull("a"), pull("b"), pull("c")], p);
            // Scored, then read back from what was kept.
            assert_eq!(ids(&r.ranked(&keyless, p)), expected, "partition {p}");
            assert_eq!(ids(&r.ranked(&keyless, p)), expected, "partition {p}");
            assert_eq!(r.pick(&keyless, p).unwrap().client_id, expected[0]);
            firsts.insert(expected[0].clone());
        }
        assert_eq!(firsts.len(), 3, "partitions spread over every member");
        r.set(vec![pull("d"), pull("b")]);
        for p in 0..32 {
            let expected = fresh(vec![pull("d"), pull("b")], p);
            assert_eq!(ids(&r.ranked(&keyless, p)), expected, "partition {p}");
            assert_eq!(r.pick(&keyless, p).unwrap().client_id, expected[0]);
        }
    }

    #[test]
    fn rendezvous_is_sticky_and_moves_only_what_a_leaver_held() {
        let all = Router::new(vec![pull("a"), pull("b"), pull("c")], 10);
        let keys: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
        let before: Vec<String> = keys
            .iter()
            .map(|k| all.pick(&event(Some(k)), 0).unwrap().client_id.clone())
            .collect();
        // Deterministic, and spread over every member.
        for m in ["a", "b", "c"] {
            assert!(before.iter().any(|b| b == m), "{m} got no key");
        }
        let again = Router::new(vec![pull("a"), pull("b"), pull("c")], 10);
        for (k, b) in keys.iter().zip(&before) {
            assert_eq!(&again.pick(&event(Some(k)), 0).unwrap().client_id, b);
        }
        let without_c = Router::new(vec![pull("a"), pull("b")], 10);
        for (k, b) in keys.iter().zip(&before) {
            let now = without_c
                .pick(&event(Some(k)), 0)
                .unwrap()
                .client_id
                .clone();
            if b != "c" {
                assert_eq!(&now, b, "key {k} moved though its member stayed");
            }
        }
        // Without a partition key the partition is the key.
        let e = event(None);
        assert_eq!(ids(&all.ranked(&e, 1)), ids(&again.ranked(&e, 1)));
    }

    #[test]
    fn a_member_at_its_cap_is_passed_over_and_all_capped_takes_nothing() {
        let r = Router::new(vec![pull("a"), pull("b")], 1);
        let e = event(Some("k"));
        let ranked = ids(&r.ranked(&e, 0));
        let first = r.get(&ranked[0]).unwrap().clone();
        first.load.charge();
        assert_eq!(r.pick(&e, 0).unwrap().client_id, ranked[1]);
        r.get(&ranked[1]).unwrap().load.charge();
        assert!(r.pick(&e, 0).is_none());
        first.load.release();
        assert_eq!(r.pick(&e, 0).unwrap().client_id, ranked[0]);
    }

    #[test]
    fn offline_members_get_new_events_only_when_none_is_online() {
        let r = Router::new(vec![pull("a"), pull("b")], 10);
        let e = event(Some("k"));
        let ranked = ids(&r.ranked(&e, 0));
        set_offline(r.get(&ranked[0]).unwrap());
        assert_eq!(r.pick(&e, 0).unwrap().client_id, ranked[1]);
        set_offline(r.get(&ranked[1]).unwrap());
        assert_eq!(r.pick(&e, 0).unwrap().client_id, ranked[0]);
    }

    #[test]
    fn destination_stays_moves_on_leave_and_takes_over_from_a_leaver() {
        let r = Router::new(vec![pull("a"), pull("b"), pull("c")], 1);
        let e = event(Some("k"));
        let ranked = ids(&r.ranked(&e, 0));
        let (best, second, third) = (&ranked[0], &ranked[1], &ranked[2]);
        let to = |holder: &str, leaving| {
            r.destination(&e, 0, holder, leaving)
                .map(|m| m.client_id.clone())
        };
        // A member still in the group keeps it.
        assert_eq!(to(second, false).as_ref(), Some(second));
        // Its stream closed: the best other online member with room.
        assert_eq!(to(second, true).as_ref(), Some(best));
        r.get(best).unwrap().load.charge();
        assert_eq!(to(second, true).as_ref(), Some(third), "best is at its cap");
        r.get(third).unwrap().load.charge();
        assert_eq!(
            to(second, true).as_ref(),
            Some(second),
            "nobody else has room: it stays"
        );
        // A holder that left: the best remaining one, even at its cap.
        assert_eq!(
            to("gone", false).as_ref(),
            Some(second),
            "the one with room"
        );
        r.get(second).unwrap().load.charge();
        assert_eq!(
            to("gone", false).as_ref(),
            Some(best),
            "all capped: the best"
        );
        assert_eq!(
            Router::new(vec![], 1)
                .destination(&e, 0, "gone", false)
                .map(|m| m.client_id.clone()),
            None
        );
    }
}
