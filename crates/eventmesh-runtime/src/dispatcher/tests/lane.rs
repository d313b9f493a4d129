//! Steps taken on a dispatcher's state from other tasks (see `lane`): an
//! event of a topic kept in memory handed over by its publisher, and
//! settles applied without a command, with the loop woken for what they
//! leave it to do.

use eventmesh_storage::Durability;
use tokio::sync::watch;

use super::*;

/// A harness whose topic is kept in memory, a dispatcher on it with one
/// pulling member, and the log's watch as seen now.
async fn memory_topic(
    settings: DispatchSettings,
) -> (Harness, Running, Arc<Mailbox>, Member, watch::Receiver<u64>) {
    let h = Harness::with_topic(settings, Durability::Memory).await;
    let (a, mb) = pull_member("a", Creator::default());
    let d = h.start(vec![a.clone()]).await;
    waiting(&d).await;
    let mut appended = h.log.append_watch();
    appended.borrow_and_update();
    (h, d, mb, a, appended)
}

/// Returns once the dispatcher's loop waits (its state is free) with no
/// flush under way: nothing but a step through the lane gives it a turn.
async fn waiting(d: &Running) {
    let lane = d.lane.clone();
    until("the loop waits", async || {
        lane.state
            .try_lock()
            .is_ok_and(|me| me.sleeping_until.is_some() && !me.flush_pending)
    })
    .await;
}

/// Whether the log's watch moved since last looked at.
fn announced(appended: &mut watch::Receiver<u64>) -> bool {
    let moved = appended.has_changed().unwrap();
    appended.borrow_and_update();
    moved
}

#[tokio::test(start_paused = true)]
async fn a_publisher_hands_its_event_to_a_waiting_dispatcher_and_a_direct_ack_settles_it() {
    let (h, d, mb, a, mut appended) = memory_topic(settings()).await;
    assert_eq!(h.ingress.handoffs().registered(TOPIC), 1);
    h.publish(&["k"]).await;
    assert!(
        !announced(&mut appended),
        "taken by the dispatcher: the log's watch is not told"
    );
    // In the mailbox already: the loop had no turn since the publish.
    let got = poll_for(&mb, 10, Duration::ZERO).await;
    assert_eq!(events(&got), ["e0"]);
    assert_eq!(h.seen.take(), [("e0".to_string(), "a".to_string())]);
    assert_eq!(a.load.inflight(), 1);
    let id = parse_delivery_id(&got[0].id).unwrap();
    assert_eq!(
        d.lane.try_settle(&id, Settle::Ack, None, Policy::Enforce),
        Some(Settled::Done)
    );
    assert_eq!(
        d.lane.try_settle(&id, Settle::Ack, None, Policy::Enforce),
        Some(Settled::Unknown),
        "settled already"
    );
    assert_eq!(a.load.inflight(), 0);
    assert_eq!(h.metrics.acks.get(), 1);
    assert_eq!(h.metrics.events_dispatched.get(), 1);
    let end = h.log.end_offset(TOPIC, 0).await.unwrap();
    d.stop().await;
    assert_eq!(
        h.committed().await,
        HashMap::from([(0, end)]),
        "the watermark passed the event handed over"
    );
    assert_eq!(h.metrics.pending_deliveries.get(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_event_handed_over_comes_again_at_its_ack_timeout() {
    // The loop waits for no timer when the event is handed over: the
    // timer the hand-over sets must wake it.
    let (h, d, mb, _a, mut appended) = memory_topic(settings()).await;
    let far = d.lane.state.try_lock().unwrap().sleeping_until.unwrap();
    assert!(far > Instant::now() + ACK_TIMEOUT, "the loop sleeps long");
    h.publish(&["k"]).await;
    assert!(!announced(&mut appended));
    let first = poll_for(&mb, 10, Duration::ZERO).await;
    assert_eq!(events(&first), ["e0"]);
    let t0 = Instant::now();
    let again = poll_for(&mb, 10, ACK_TIMEOUT * 2).await;
    assert_eq!(since(t0), ACK_TIMEOUT, "sent again at the ack timeout");
    assert_eq!(events(&again), ["e0"]);
    assert_ne!(again[0].id, first[0].id);
    assert_eq!(h.metrics.redeliveries.get(), 1);
    assert_eq!(d.ack(&again[0].id).await, Settled::Done);
    d.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_full_window_leaves_the_event_and_its_settles_to_the_loop() {
    let (h, d, mb, _a, mut appended) = memory_topic(settings_with(|c| c.max_inflight = 1)).await;
    h.publish(&["k"]).await;
    assert!(!announced(&mut appended));
    h.publish(&["k"]).await;
    assert!(
        announced(&mut appended),
        "the window is full: the loop reads it later"
    );
    let first = poll_for(&mb, 10, Duration::ZERO).await;
    assert_eq!(first.len(), 1);
    // The loop read the second, found no room, and waits.
    d.barrier().await;
    waiting(&d).await;
    assert!(poll_for(&mb, 10, Duration::ZERO).await.is_empty());
    let id = parse_delivery_id(&first[0].id).unwrap();
    assert_eq!(
        d.lane.try_settle(&id, Settle::Ack, None, Policy::Enforce),
        None,
        "while reading waits for room, settles go to the loop"
    );
    assert_eq!(d.ack(&first[0].id).await, Settled::Done);
    let t0 = Instant::now();
    let second = poll_n(&mb, 1).await;
    assert_eq!(since(t0), Duration::ZERO, "the ack let the loop read on");
    assert_ne!(second[0].id, first[0].id);
    assert_eq!(d.ack(&second[0].id).await, Settled::Done);
    assert_eq!(h.metrics.events_dispatched.get(), 2);
    d.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_reader_of_the_watch_filters_and_a_stopped_dispatcher_each_get_the_announcement() {
    let (h, d, mb, _a, mut appended) = memory_topic(settings()).await;
    {
        let _browsing = h.ingress.handoffs().watching();
        h.publish(&["k"]).await;
        assert!(announced(&mut appended), "a browse waits on the watch");
    }
    let got = poll_n(&mb, 1).await;
    assert_eq!(d.ack(&got[0].id).await, Settled::Done);
    waiting(&d).await;
    // A filtered consumer reads through the topic's sieve.
    let filter = crate::filters::compile(&[serde_json::json!({"exact": {"type": "nothing"}})])
        .unwrap()
        .unwrap();
    let (a, _) = pull_member("a", Creator::default());
    d.send(Command::Members(Membership {
        members: vec![a],
        filter: Some(filter),
    }))
    .await;
    d.barrier().await;
    waiting(&d).await;
    h.publish(&["k"]).await;
    assert!(announced(&mut appended), "the filtered consumer reads it");
    let lane = d.lane.clone();
    d.stop().await;
    assert_eq!(h.ingress.handoffs().registered(TOPIC), 0);
    h.publish(&["k"]).await;
    assert!(announced(&mut appended), "no consumer takes it any more");
    let id = parse_delivery_id(&got[0].id).unwrap();
    assert_eq!(
        lane.try_settle(&id, Settle::Ack, None, Policy::Enforce),
        Some(Settled::Unknown),
        "a stopped dispatcher settles nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn on_a_topic_on_disk_the_loop_reads_every_event_and_takes_every_settle() {
    let h = Harness::new(settings()).await;
    let (a, mb) = pull_member("a", Creator::default());
    let d = h.start(vec![a]).await;
    waiting(&d).await;
    assert_eq!(h.ingress.handoffs().registered(TOPIC), 0);
    let mut appended = h.log.append_watch();
    appended.borrow_and_update();
    h.publish(&["k"]).await;
    assert!(announced(&mut appended));
    let got = poll_n(&mb, 1).await;
    let id = parse_delivery_id(&got[0].id).unwrap();
    waiting(&d).await;
    assert_eq!(
        d.lane.try_settle(&id, Settle::Ack, None, Policy::Enforce),
        None
    );
    assert_eq!(d.ack(&got[0].id).await, Settled::Done);
    d.stop().await;
}
