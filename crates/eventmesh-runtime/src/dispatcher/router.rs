//! The members of a consumer and which one takes an event.
//!
//! An event with a partition key goes by rendezvous hashing: every member
//! scores the key and the best score takes it, so a member joining or
//! leaving moves only the keys it gains or loses. An event without one goes
//! by its partition, and the topic's partitions are dealt out evenly: each
//! member is first for ⌊P/M⌋ or ⌈P/M⌉ of the P partitions (with M members),
//! each partition to the best-scoring member that still has a share to
//! take, best pairs first. Plain rendezvous over a few partitions would
//! often leave a member without any (a group of two on four partitions,
//! one time in eight). Invariants:
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
    /// The topic's partitions, dealt out evenly among the members.
    partitions: u32,
    /// The members' order (indices into `members`) for events without a
    /// partition key, by partition: it depends only on the partition and
    /// the membership, so it is worked out once per membership (for every
    /// partition at once, see [`deal`]), not per event.
    by_partition: RefCell<HashMap<u32, Arc<[usize]>>>,
}

/// Partition–member pairs up to which the partitions are dealt out evenly;
/// past it (very many partitions and members, where hashing alone spreads
/// them well) each partition's order is its own rendezvous ranking.
const DEAL_MAX_PAIRS: usize = 1 << 16;

impl Router {
    /// A router over a topic of `partitions` partitions (`0`: keyless
    /// events go by each partition's rendezvous ranking alone).
    pub(crate) fn new(members: Vec<Member>, cap: usize, partitions: u32) -> Self {
        let mut r = Router {
            members: Vec::new(),
            cap,
            partitions,
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
        if let Some(key) = event.partition_key() {
            return self.score(key.as_bytes());
        }
        let mut kept = self.by_partition.borrow_mut();
        if kept.is_empty() {
            *kept = deal(&self.members, self.partitions);
        }
        kept.entry(partition)
            .or_insert_with(|| self.score(&partition_key(partition)))
            .clone()
    }

    fn score(&self, key: &[u8]) -> Arc<[usize]> {
        let scored = scores(&self.members, key);
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

/// What a partition is scored by, for events without a partition key.
fn partition_key(partition: u32) -> Vec<u8> {
    format!("#{partition}").into_bytes()
}

/// Every member's score for `key` with its index, best first (equal
/// scores, as unlikely as they are, by client id).
fn scores(members: &[Arc<Member>], key: &[u8]) -> Vec<(u64, usize)> {
    let mut scored: Vec<(u64, usize)> = members
        .iter()
        .enumerate()
        .map(|(i, m)| (rendezvous_score(key, m.client_id.as_bytes()), i))
        .collect();
    scored.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then_with(|| members[a.1].client_id.cmp(&members[b.1].client_id))
    });
    scored
}

/// The order of the members for each of `partitions` partitions, dealt
/// out evenly: taking partition–member pairs best score first, a member
/// becomes a partition's first while it has fewer than ⌊P/M⌋, or ⌈P/M⌉
/// while fewer than P mod M members have that many. The rest of each
/// order is the partition's rendezvous ranking. Empty when there is
/// nothing to deal (no partitions, no members, or past
/// [`DEAL_MAX_PAIRS`]).
fn deal(members: &[Arc<Member>], partitions: u32) -> HashMap<u32, Arc<[usize]>> {
    let m = members.len();
    let p = partitions as usize;
    if m == 0 || p == 0 || m.saturating_mul(p) > DEAL_MAX_PAIRS {
        return HashMap::new();
    }
    let ranked: Vec<Vec<(u64, usize)>> = (0..partitions)
        .map(|q| scores(members, &partition_key(q)))
        .collect();
    let mut pairs: Vec<(u64, u32, usize)> = ranked
        .iter()
        .enumerate()
        .flat_map(|(q, r)| r.iter().map(move |&(s, i)| (s, q as u32, i)))
        .collect();
    pairs.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then(a.1.cmp(&b.1))
            .then_with(|| members[a.2].client_id.cmp(&members[b.2].client_id))
    });
    let (floor, mut larger) = (p / m, p % m);
    let mut held = vec![0usize; m];
    let mut first: Vec<Option<usize>> = vec![None; p];
    for (_, q, i) in pairs {
        let q = q as usize;
        if first[q].is_some() {
            continue;
        }
        if held[i] < floor || (held[i] == floor && larger > 0) {
            if held[i] == floor {
                larger -= 1;
            }
            held[i] += 1;
            first[q] = Some(i);
        }
    }
    ranked
        .into_iter()
        .zip(first)
        .enumerate()
        .map(|(q, (r, first))| {
            let first = first.expect("the shares add up to the partitions");
            let order: Arc<[usize]> = std::iter::once(first)
                .chain(r.into_iter().map(|(_, i)| i).filter(|&i| i != first))
                .collect();
            (q as u32, order)
        })
        .collect()
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
            let r = Router::new(members, 10, 32);
            ids(&r.ranked(&keyless, p))
        };
        let mut r = Router::new(vec![pull("a"), pull("b"), pull("c")], 10, 32);
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
        let all = Router::new(vec![pull("a"), pull("b"), pull("c")], 10, 0);
        let keys: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
        let before: Vec<String> = keys
            .iter()
            .map(|k| all.pick(&event(Some(k)), 0).unwrap().client_id.clone())
            .collect();
        // Deterministic, and spread over every member.
        for m in ["a", "b", "c"] {
            assert!(before.iter().any(|b| b == m), "{m} got no key");
        }
        let again = Router::new(vec![pull("a"), pull("b"), pull("c")], 10, 0);
        for (k, b) in keys.iter().zip(&before) {
            assert_eq!(&again.pick(&event(Some(k)), 0).unwrap().client_id, b);
        }
        let without_c = Router::new(vec![pull("a"), pull("b")], 10, 0);
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
        let r = Router::new(vec![pull("a"), pull("b")], 1, 0);
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
        let r = Router::new(vec![pull("a"), pull("b")], 10, 0);
        let e = event(Some("k"));
        let ranked = ids(&r.ranked(&e, 0));
        set_offline(r.get(&ranked[0]).unwrap());
        assert_eq!(r.pick(&e, 0).unwrap().client_id, ranked[1]);
        set_offline(r.get(&ranked[1]).unwrap());
        assert_eq!(r.pick(&e, 0).unwrap().client_id, ranked[0]);
    }

    #[test]
    fn destination_stays_moves_on_leave_and_takes_over_from_a_leaver() {
        let r = Router::new(vec![pull("a"), pull("b"), pull("c")], 1, 0);
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
            Router::new(vec![], 1, 0)
                .destination(&e, 0, "gone", false)
                .map(|m| m.client_id.clone()),
            None
        );
    }

    /// Keyless events: every member is first for ⌊P/M⌋ or ⌈P/M⌉ of the
    /// partitions, whatever the ids and their order; each order names
    /// every member once; a partition past the topic's goes by its
    /// rendezvous ranking.
    #[test]
    fn keyless_partitions_are_dealt_out_evenly() {
        let keyless = event(None);
        for round in 0..20 {
            for m in 1..=5usize {
                let names: Vec<String> = (0..m).map(|i| format!("c{round}-{i}")).collect();
                let members = |rev: bool| {
                    let mut v: Vec<Member> = names.iter().map(|n| pull(n)).collect();
                    if rev {
                        v.reverse();
                    }
                    v
                };
                for p in 1..=12u32 {
                    let r = Router::new(members(false), 10, p);
                    let reversed = Router::new(members(true), 10, p);
                    let mut firsts = std::collections::BTreeMap::<String, usize>::new();
                    for q in 0..p {
                        let order = ids(&r.ranked(&keyless, q));
                        let mut sorted = order.clone();
                        sorted.sort();
                        let mut all = names.clone();
                        all.sort();
                        assert_eq!(sorted, all, "partition {q} of {p}");
                        assert_eq!(order, ids(&reversed.ranked(&keyless, q)));
                        assert_eq!(r.pick(&keyless, q).unwrap().client_id, order[0]);
                        *firsts.entry(order[0].clone()).or_default() += 1;
                    }
                    let (floor, ceil) = (p as usize / m, (p as usize).div_ceil(m));
                    let larger = names
                        .iter()
                        .map(|n| firsts.get(n).copied().unwrap_or(0))
                        .inspect(|&n| assert!(n == floor || n == ceil, "{firsts:?} of {p}"))
                        .filter(|&n| n == ceil && ceil > floor)
                        .count();
                    assert_eq!(larger, p as usize % m, "{firsts:?} of {p}");
                    let past = ids(&r.ranked(&keyless, p));
                    let plain = Router::new(members(false), 10, 0);
                    assert_eq!(past, ids(&plain.ranked(&keyless, p)));
                }
            }
        }
    }

    /// The deal is worked out again when the membership changes.
    #[test]
    fn a_membership_change_deals_the_partitions_again() {
        let keyless = event(None);
        let mut r = Router::new(vec![pull("a"), pull("b")], 10, 4);
        let firsts = |r: &Router| {
            let mut n = std::collections::BTreeMap::<String, usize>::new();
            for q in 0..4 {
                *n.entry(r.pick(&keyless, q).unwrap().client_id.clone())
                    .or_default() += 1;
            }
            n.into_iter().collect::<Vec<_>>()
        };
        assert_eq!(firsts(&r), [("a".into(), 2), ("b".into(), 2)]);
        r.set(vec![pull("a"), pull("b"), pull("c"), pull("d")]);
        assert_eq!(
            firsts(&r),
            [
                ("a".into(), 1),
                ("b".into(), 1),
                ("c".into(), 1),
                ("d".into(), 1)
            ]
        );
        r.set(vec![pull("d")]);
        assert_eq!(firsts(&r), [("d".into(), 4)]);
    }
}
