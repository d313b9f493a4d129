//! Every transition of the flight state machine, driven directly.

use std::time::Duration;

use super::*;
use crate::dispatcher::router::tests::{event, pull};
use crate::dispatcher::router::ClientLoad;

const MAX: u32 = 3;

fn creator(tenant: &str, principal: &str) -> Creator {
    Creator::new(Some(tenant.into()), Some(principal.into()))
}

fn member(client: &str, creator: Creator) -> Arc<Member> {
    let mut m = pull(client);
    m.creator = creator;
    Arc::new(m)
}

fn push_member(client: &str) -> Arc<Member> {
    Arc::new(Member {
        client_id: client.into(),
        channel: Channel::Push(Arc::new(Webhook::new("http://127.0.0.1:9/hook"))),
        load: Arc::new(ClientLoad::default()),
        creator: Creator::default(),
    })
}

fn mailbox(m: &Member) -> &Mailbox {
    match &m.channel {
        Channel::Pull(mb) => mb,
        Channel::Push(_) => unreachable!("a pull member"),
    }
}

fn flight(m: &Arc<Member>, attempts: u32) -> Flight {
    Flight::new(
        Arc::new(event(Some("k"))),
        1,
        attempts,
        Holder::charge(m.clone()),
    )
}

/// Dispatches to `to` and puts the copy into its mailbox, as the loop
/// does: its hand-out and ticket.
fn to_mailbox(
    f: &mut Flight,
    to: &Arc<Member>,
    released: bool,
    nonce: u64,
) -> (Arc<HandOut>, Ticket) {
    let Outgoing::Mailbox {
        mailbox,
        hand_out,
        ticket,
    } = f.dispatch(Some(to.clone()), released, nonce)
    else {
        panic!("expected a mailbox copy")
    };
    mailbox.push(crate::mailbox::MailItem {
        delivery_id: format!("{ticket:?}"),
        event_json: bytes::Bytes::from_static(b"{}"),
        topic: std::sync::Arc::from("t"),
        hand_out: hand_out.clone(),
        expires_at_ms: None,
    });
    (hand_out, ticket)
}

/// A poll on `m`'s mailbox takes everything waiting.
async fn take_all(m: &Member) -> usize {
    mailbox(m).poll(100, Duration::ZERO).await.len()
}

#[tokio::test(start_paused = true)]
async fn queued_mailbox_taken_acked() {
    let a = member("a", creator("acme", "alice"));
    let mut f = flight(&a, 0);
    assert_eq!(f.kind(), Kind::Queued);
    assert_eq!(a.load.inflight(), 1, "charged from admission");
    let (h, t) = to_mailbox(&mut f, &a, false, 77);
    assert_eq!(
        t,
        Ticket {
            generation: 1,
            nonce: 77
        }
    );
    assert_eq!(f.kind(), Kind::InMailbox);
    assert!(!f.in_hands());
    tokio::time::advance(Duration::from_secs(2)).await;
    let at = Instant::now();
    assert_eq!(take_all(&a).await, 1);
    f.observe();
    assert_eq!(f.kind(), Kind::HandedOut(at));
    assert!(f.in_hands());
    assert_eq!(f.authorize(t, None), Settled::Done);
    f.ack();
    assert_eq!(f.kind(), Kind::Retired);
    assert_eq!(a.load.inflight(), 0, "released when settled");
    assert!(h.is_withdrawn());
    assert_eq!(f.authorize(t, None), Settled::Unknown, "settled already");
}

#[tokio::test(start_paused = true)]
async fn nack_backs_off_and_the_old_ticket_stops_counting() {
    let a = member("a", Creator::default());
    let mut f = flight(&a, 0);
    let (_, t1) = to_mailbox(&mut f, &a, false, 1);
    take_all(&a).await;
    assert_eq!(f.authorize(t1, None), Settled::Done);
    assert_eq!(f.fail("nack", MAX), Verdict::Retry);
    f.back_off(false);
    assert_eq!((f.kind(), f.attempts()), (Kind::BackingOff, 1));
    assert_eq!(f.authorize(t1, None), Settled::Unknown);
    assert_eq!(a.load.inflight(), 1, "still assigned while backing off");
    // The retry timer fired: out again under a new id.
    let (_, t2) = to_mailbox(&mut f, &a, false, 2);
    assert_eq!(t2.generation, 2);
    assert_eq!(f.authorize(t1, None), Settled::Unknown);
    assert_eq!(f.authorize(t2, None), Settled::Done);
}

#[tokio::test(start_paused = true)]
async fn ack_timeout_sends_again_under_a_new_id() {
    let a = member("a", Creator::default());
    let mut f = flight(&a, 0);
    let (h1, t1) = to_mailbox(&mut f, &a, false, 1);
    take_all(&a).await;
    f.observe();
    assert_eq!(f.fail("ack timeout", MAX), Verdict::Retry);
    let (_, t2) = to_mailbox(&mut f, &a, false, 2);
    assert!(h1.is_withdrawn());
    assert_eq!(f.kind(), Kind::InMailbox);
    assert_eq!(
        f.authorize(t1, None),
        Settled::Unknown,
        "a timeout invalidates at once"
    );
    assert_eq!(f.authorize(t2, None), Settled::Done);
    assert_eq!(a.load.inflight(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_released_id_settles_until_the_event_is_handed_out_again() {
    let a = member("a", creator("acme", "alice"));
    let b = member("b", creator("acme", "bob"));
    let mut f = flight(&a, 0);
    let (_, t1) = to_mailbox(&mut f, &a, false, 1);
    take_all(&a).await;
    f.observe();
    // a's stream closed: counted, and the event goes to b.
    assert_eq!(f.fail("connection lost", MAX), Verdict::Retry);
    let (h2, t2) = to_mailbox(&mut f, &b, true, 2);
    assert_eq!((a.load.inflight(), b.load.inflight()), (0, 1));
    assert_eq!(
        f.authorize(t1, None),
        Settled::Done,
        "the released id still counts"
    );
    assert_eq!(f.authorize(t2, None), Settled::Done);
    // Released again before b read it: the old id keeps counting.
    let (h3, _) = to_mailbox(&mut f, &b, true, 3);
    assert!(h2.is_withdrawn());
    assert_eq!(f.authorize(t1, None), Settled::Done);
    // b takes the copy: handed out again, the released id is gone.
    assert_eq!(take_all(&b).await, 1);
    assert!(h3.taken_at().is_some());
    assert_eq!(f.authorize(t1, None), Settled::Unknown);
}

#[tokio::test(start_paused = true)]
async fn an_ack_under_the_released_id_withdraws_the_queued_copy() {
    let a = member("a", Creator::default());
    let mut f = flight(&a, 0);
    let (_, t1) = to_mailbox(&mut f, &a, false, 1);
    take_all(&a).await;
    f.observe();
    f.fail("connection lost", MAX);
    // Nobody else: it waits in a's own mailbox for its reconnect.
    let (h2, _) = to_mailbox(&mut f, &a, true, 2);
    assert_eq!(f.authorize(t1, None), Settled::Done);
    f.ack();
    assert!(h2.is_withdrawn());
    assert_eq!(take_all(&a).await, 0, "the queued copy is never handed out");
    assert_eq!(a.load.inflight(), 0);
}

#[tokio::test(start_paused = true)]
async fn settling_checks_the_holder_and_the_nonce() {
    let alice = creator("acme", "alice");
    let a = member("a", alice.clone());
    let b = member("b", creator("acme", "bob"));
    let mut f = flight(&a, 0);
    let (_, t) = to_mailbox(&mut f, &a, false, 0x1234);
    take_all(&a).await;
    assert_eq!(
        f.authorize(t, Some(&creator("acme", "bob"))),
        Settled::Foreign
    );
    assert_eq!(
        f.authorize(t, Some(&creator("globex", "alice"))),
        Settled::Foreign
    );
    assert_eq!(f.authorize(t, Some(&Creator::default())), Settled::Foreign);
    let wrong = Ticket {
        nonce: t.nonce ^ 1,
        ..t
    };
    assert_eq!(f.authorize(wrong, Some(&alice)), Settled::Unknown);
    assert_eq!(f.authorize(wrong, None), Settled::Unknown);
    assert_eq!(f.authorize(t, Some(&alice)), Settled::Done);
    // A released id answers for the member it was handed to, not the
    // member holding the new copy.
    f.observe();
    f.fail("connection lost", MAX);
    let (_, t2) = to_mailbox(&mut f, &b, true, 2);
    assert_eq!(f.authorize(t, Some(&alice)), Settled::Done);
    assert_eq!(
        f.authorize(t, Some(&creator("acme", "bob"))),
        Settled::Foreign
    );
    assert_eq!(
        f.authorize(t2, Some(&creator("acme", "bob"))),
        Settled::Done
    );
    assert_eq!(f.kind(), Kind::InMailbox, "checks change nothing");
}

#[tokio::test(start_paused = true)]
async fn the_last_attempt_turns_to_dead_lettering() {
    let a = member("a", Creator::default());
    let mut f = flight(&a, MAX - 1);
    let (h, t) = to_mailbox(&mut f, &a, false, 1);
    take_all(&a).await;
    assert_eq!(f.fail("nack", MAX), Verdict::Exhausted);
    assert_eq!((f.kind(), f.attempts()), (Kind::DeadLettering, MAX));
    assert_eq!(f.dead_reason(), Some("nack"));
    assert!(f.holder().is_none());
    assert_eq!(a.load.inflight(), 0, "nothing in the client's hands");
    assert!(h.is_withdrawn());
    assert_eq!(
        f.authorize(t, None),
        Settled::Unknown,
        "given up on: settled"
    );
    assert!(matches!(
        f.dispatch(Some(a.clone()), false, 2),
        Outgoing::Nothing
    ));
    f.back_off(false);
    assert_eq!(
        f.kind(),
        Kind::DeadLettering,
        "a write failure leaves it there"
    );
    f.dead_lettered();
    assert_eq!(f.kind(), Kind::Retired);
}

#[tokio::test(start_paused = true)]
async fn a_webhook_retry_keeps_its_id_and_a_nack_drops_it() {
    let w = push_member("w");
    let mut f = flight(&w, 0);
    let Outgoing::Push { ticket: t, hook } = f.dispatch(Some(w.clone()), false, 5) else {
        panic!("expected a push")
    };
    assert_eq!(hook.url, "http://127.0.0.1:9/hook");
    assert!(f.is_pushing(t));
    assert!(f.in_hands());
    assert_eq!(f.fail("status 500", MAX), Verdict::Retry);
    f.back_off(true);
    assert_eq!(f.kind(), Kind::BackingOff);
    assert!(!f.is_pushing(t));
    assert_eq!(f.authorize(t, None), Settled::Done);
    let Outgoing::Push { ticket: again, .. } = f.dispatch(Some(w.clone()), false, 6) else {
        panic!("expected a push")
    };
    assert_eq!(again, t, "receivers deduplicate retries by id");
    // A nack of a push under way: the id is spent.
    f.fail("nack", MAX);
    f.back_off(false);
    assert_eq!(f.authorize(t, None), Settled::Unknown);
    let Outgoing::Push { ticket: fresh, .. } = f.dispatch(Some(w.clone()), false, 7) else {
        panic!("expected a push")
    };
    assert_eq!(
        fresh,
        Ticket {
            generation: 2,
            nonce: 7
        }
    );
    f.ack();
    assert_eq!(w.load.inflight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_member_gone_hands_over_and_moves_the_load() {
    let a = member("a", Creator::default());
    let b = member("b", Creator::default());
    let mut f = flight(&a, 0);
    let (h1, t1) = to_mailbox(&mut f, &a, false, 1);
    take_all(&a).await;
    let (_, t2) = to_mailbox(&mut f, &b, false, 2);
    assert!(h1.is_withdrawn());
    assert_eq!((a.load.inflight(), b.load.inflight()), (0, 1));
    assert_eq!(f.attempts(), 0, "not a failed attempt");
    assert_eq!(f.authorize(t1, None), Settled::Unknown);
    assert_eq!(f.authorize(t2, None), Settled::Done);
    assert_eq!(f.holder().unwrap().client_id, "b");
    // Nobody left to take it: queued, still charged to b.
    assert!(matches!(f.dispatch(None, false, 3), Outgoing::Queued));
    assert_eq!((f.kind(), b.load.inflight()), (Kind::Queued, 1));
}

#[tokio::test(start_paused = true)]
async fn drain_takes_back_waiting_copies_only() {
    let a = member("a", Creator::default());
    let mut waiting = flight(&a, 0);
    let (h, _) = to_mailbox(&mut waiting, &a, false, 1);
    assert!(waiting.withdraw());
    assert_eq!(waiting.kind(), Kind::Queued);
    assert!(h.is_withdrawn());
    assert!(!waiting.in_hands());
    let mut taken = flight(&a, 0);
    let (h2, _) = to_mailbox(&mut taken, &a, false, 2);
    take_all(&a).await;
    assert!(!taken.withdraw(), "in the client's hands: waited for");
    assert!(taken.in_hands());
    assert_eq!(h2.taken_at(), Some(Instant::now()));
    // While draining a retry stays queued.
    taken.fail("nack", MAX);
    taken.back_off(false);
    assert!(matches!(taken.dispatch(None, false, 3), Outgoing::Queued));
    assert!(!taken.in_hands());
}

#[tokio::test(start_paused = true)]
async fn dropping_a_flight_gives_back_what_it_holds() {
    let a = member("a", Creator::default());
    let mut f = flight(&a, 0);
    let (h, _) = to_mailbox(&mut f, &a, false, 1);
    drop(f);
    assert!(h.is_withdrawn());
    assert_eq!(a.load.inflight(), 0);
    assert_eq!(take_all(&a).await, 0);
}
