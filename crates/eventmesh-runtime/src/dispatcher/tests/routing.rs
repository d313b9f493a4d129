//! Which member gets what: caps, members leaving, streams closing, and the
//! hand-outs the observer is told of.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_member_at_its_cap_is_passed_over_and_reading_waits_when_all_are() {
    let h = Harness::new(settings_with(|d| {
        d.max_inflight_per_client = 1;
    }))
    .await;
    let key = key_for(&["a", "b"], "a");
    h.publish(&[&key, &key, &key]).await;
    let (a, mb_a) = pull_member("a", Creator::default());
    let (b, mb_b) = pull_member("b", Creator::default());
    let d = h.start(vec![a.clone(), b.clone()]).await;
    let got_a = poll_n(&mb_a, 1).await;
    let got_b = poll_n(&mb_b, 1).await;
    assert_eq!((events(&got_a), events(&got_b)), (vec!["e0"], vec!["e1"]));
    // Both at their cap: e2 waits in the log.
    assert!(poll_for(&mb_a, 10, PROMPT).await.is_empty());
    assert!(poll_for(&mb_b, 10, PROMPT).await.is_empty());
    assert_eq!(h.metrics.events_dispatched.get(), 2);
    assert_eq!(d.ack(&got_a[0].id).await, Settled::Done);
    // Room at a, its best member, again.
    assert_eq!(events(&poll_n(&mb_a, 1).await), ["e2"]);
    assert_eq!((a.load.inflight(), b.load.inflight()), (1, 1));
    d.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_member_that_leaves_hands_its_deliveries_over_without_a_failed_attempt() {
    let h = Harness::new(settings()).await;
    let key = key_for(&["a", "b"], "a");
    h.publish(&[&key]).await;
    let (a, mb_a) = pull_member("a", Creator::default());
    let (b, mb_b) = pull_member("b", Creator::default());
    let d = h.start(vec![a.clone(), b.clone()]).await;
    let first = poll_n(&mb_a, 1).await.remove(0);
    d.send(Command::Members(vec![b.clone()].into())).await;
    let moved = poll_n(&mb_b, 1).await.remove(0);
    assert_eq!(moved.event, "e0");
    assert_ne!(moved.id, first.id);
    assert_eq!(d.ack(&first.id).await, Settled::Unknown);
    assert_eq!((a.load.inflight(), b.load.inflight()), (0, 1));
    assert_eq!(h.metrics.redeliveries.get(), 1);
    assert_eq!(
        h.seen.take(),
        [
            ("e0".to_string(), "a".to_string()),
            ("e0".into(), "b".into())
        ]
    );
    d.stop().await;
    assert_eq!(
        h.ledger_entries().await,
        [(0, 0, 0)],
        "not a failed attempt"
    );
}

#[tokio::test(start_paused = true)]
async fn a_closed_stream_hands_its_deliveries_to_another_online_member() {
    let h = Harness::new(settings()).await;
    let key = key_for(&["a", "b"], "a");
    h.publish(&[&key]).await;
    let (a, mb_a) = pull_member("a", Creator::default());
    let (b, mb_b) = pull_member("b", Creator::default());
    let d = h.start(vec![a.clone(), b.clone()]).await;
    mb_a.attach();
    let first = poll_n(&mb_a, 1).await.remove(0);
    mb_a.detach();
    d.send(Command::Release {
        client: "a".into(),
        before: tokio::time::Instant::now(),
        waiting: true,
    })
    .await;
    let moved = poll_n(&mb_b, 1).await.remove(0);
    assert_eq!(moved.event, "e0");
    assert_eq!((a.load.inflight(), b.load.inflight()), (0, 1));
    assert_eq!(d.ack(&first.id).await, Settled::Unknown, "b took it");
    assert_eq!(d.ack(&moved.id).await, Settled::Done);
    // New events go to b while a is away.
    h.publish(&[&key]).await;
    assert_eq!(poll_n(&mb_b, 1).await.len(), 1);
    d.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_release_with_nothing_taken_counts_no_attempt() {
    let h = Harness::new(settings()).await;
    h.publish(&["k"]).await;
    let (a, mb) = pull_member("a", Creator::default());
    let d = h.start(vec![a]).await;
    until("the delivery in the mailbox", async || mb.len() == 1).await;
    mb.attach();
    mb.detach();
    d.send(Command::Release {
        client: "a".into(),
        before: tokio::time::Instant::now(),
        waiting: true,
    })
    .await;
    d.barrier().await;
    mb.attach();
    let got = poll_n(&mb, 1).await;
    assert_eq!(events(&got), ["e0"], "one copy, the new one");
    assert!(poll_for(&mb, 10, PROMPT).await.is_empty());
    d.stop().await;
    assert_eq!(h.ledger_entries().await, [(0, 0, 0)]);
}
