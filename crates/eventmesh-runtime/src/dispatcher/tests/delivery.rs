//! Settling: ack, nack, the ack timeout, released ids, the holder check,
//! nonces, and the way to the dead-letter store.

use super::*;

#[tokio::test(start_paused = true)]
async fn an_ack_settles_once_and_the_watermark_passes_acknowledged_events_only() {
    let h = Harness::new(settings()).await;
    h.publish(&["k", "k", "k"]).await;
    let (a, mb) = pull_member("a", Creator::default());
    let d = h.start(vec![a.clone()]).await;
    let got = poll_n(&mb, 3).await;
    assert_eq!(events(&got), ["e0", "e1", "e2"]);
    assert_eq!(a.load.inflight(), 3);
    assert_eq!(d.ack(&got[0].id).await, Settled::Done);
    assert_eq!(d.ack(&got[2].id).await, Settled::Done);
    assert_eq!(d.ack(&got[0].id).await, Settled::Unknown, "settled already");
    assert_eq!(
        d.nack(&got[2].id).await,
        Settled::Unknown,
        "settled already"
    );
    assert_eq!(a.load.inflight(), 1);
    assert_eq!(h.metrics.acks.get(), 2);
    assert_eq!(
        h.metrics.pending_deliveries.get(),
        3,
        "nothing committed yet"
    );
    d.stop().await;
    // e1 is still in flight: the committed offset stops below it.
    assert_eq!(h.committed().await, HashMap::from([(0, 1)]));
    assert_eq!(h.metrics.pending_deliveries.get(), 0);
    assert_eq!(a.load.inflight(), 0, "stopping releases what it held");
    assert_eq!(h.ledger_entries().await, [(0, 1, 0)]);
}

#[tokio::test(start_paused = true)]
async fn a_nack_comes_back_after_the_backoff_under_a_new_id() {
    let h = Harness::new(settings()).await;
    h.publish(&["k"]).await;
    let (a, mb) = pull_member("a", Creator::default());
    let d = h.start(vec![a.clone()]).await;
    let first = poll_n(&mb, 1).await.remove(0);
    assert_eq!(d.nack(&first.id).await, Settled::Done);
    let t0 = Instant::now();
    assert_eq!(
        d.ack(&first.id).await,
        Settled::Unknown,
        "a nack spends the id"
    );
    assert_eq!(d.nack(&first.id).await, Settled::Unknown);
    let again = poll_for(&mb, 10, BACKOFF * 2).await;
    assert_eq!(since(t0), BACKOFF, "sent again when the backoff is over");
    assert_eq!(events(&again), ["e0"]);
    assert_ne!(again[0].id, first.id);
    assert_eq!(h.metrics.nacks.get(), 1);
    assert_eq!(h.metrics.redeliveries.get(), 1);
    assert_eq!(a.load.inflight(), 1, "charged while backing off");
    assert_eq!(d.ack(&again[0].id).await, Settled::Done);
    d.stop().await;
    assert_eq!(h.committed().await, HashMap::from([(0, 1)]));
}

#[tokio::test(start_paused = true)]
async fn the_ack_timeout_runs_from_the_moment_a_poll_took_the_delivery() {
    let h = Harness::new(settings()).await;
    h.publish(&["k"]).await;
    let (a, mb) = pull_member("a", Creator::default());
    let d = h.start(vec![a]).await;
    until("the delivery in the mailbox", async || mb.len() == 1).await;
    // Waiting in the mailbox is not in the client's hands: no timeout.
    tokio::time::sleep(ACK_TIMEOUT * 3).await;
    let first = poll_n(&mb, 1).await.remove(0);
    let taken = Instant::now();
    assert_eq!(h.metrics.redeliveries.get(), 0);
    let again = poll_for(&mb, 10, ACK_TIMEOUT * 2).await;
    assert_eq!(since(taken), ACK_TIMEOUT);
    assert_eq!(events(&again), ["e0"]);
    assert_ne!(again[0].id, first.id);
    assert_eq!(
        d.ack(&first.id).await,
        Settled::Unknown,
        "a timeout spends the id"
    );
    assert_eq!(h.metrics.redeliveries.get(), 1);
    assert_eq!(d.ack(&again[0].id).await, Settled::Done);
    d.stop().await;
    assert!(h.ledger_entries().await.is_empty());
}

/// A client reads on a stream, loses it, and acks over another
/// connection before its deliveries are handed out again: the acks settle
/// (the old ids still count), and its reconnect reads only the rest.
#[tokio::test(start_paused = true)]
async fn a_released_delivery_is_settled_by_its_old_id_until_handed_out_again() {
    let h = Harness::new(settings()).await;
    h.publish(&["k", "k"]).await;
    let (a, mb) = pull_member("a", Creator::default());
    let d = h.start(vec![a.clone()]).await;
    mb.attach();
    let got = poll_n(&mb, 2).await;
    assert!(mb.detach());
    d.send(Command::Release {
        client: "a".into(),
        before: tokio::time::Instant::now(),
        waiting: true,
    })
    .await;
    assert_eq!(d.ack(&got[0].id).await, Settled::Done);
    mb.attach();
    let again = poll_n(&mb, 1).await;
    assert_eq!(events(&again), ["e1"], "the acknowledged one is withdrawn");
    assert_ne!(again[0].id, got[1].id);
    assert_eq!(
        d.ack(&got[1].id).await,
        Settled::Unknown,
        "handed out again"
    );
    assert_eq!(d.ack(&again[0].id).await, Settled::Done);
    assert_eq!(a.load.inflight(), 0);
    assert_eq!(h.metrics.acks.get(), 2);
    d.stop().await;
    assert_eq!(h.committed().await, HashMap::from([(0, 2)]));
}

#[tokio::test(start_paused = true)]
async fn a_nack_under_a_released_id_counts_and_withdraws_the_queued_copy() {
    let h = Harness::new(settings()).await;
    h.publish(&["k"]).await;
    let (a, mb) = pull_member("a", Creator::default());
    let d = h.start(vec![a]).await;
    mb.attach();
    let got = poll_n(&mb, 1).await;
    mb.detach();
    d.send(Command::Release {
        client: "a".into(),
        before: tokio::time::Instant::now(),
        waiting: true,
    })
    .await;
    assert_eq!(d.nack(&got[0].id).await, Settled::Done);
    mb.attach();
    assert!(poll_for(&mb, 10, PROMPT).await.is_empty(), "backing off");
    let again = poll_for(&mb, 10, BACKOFF * 2).await;
    assert_eq!(events(&again), ["e0"]);
    d.stop().await;
    // Released with the stream (one attempt), then nacked (another).
    assert_eq!(h.ledger_entries().await, [(0, 0, 2)]);
}

#[tokio::test(start_paused = true)]
async fn a_permissive_settle_of_a_foreign_delivery_settles_it_once_and_says_so() {
    let alice = Creator::new(Some("acme".into()), Some("alice".into()));
    let bob = Creator::new(Some("globex".into()), Some("bob".into()));
    let h = Harness::new(settings()).await;
    h.publish(&["k", "k"]).await;
    let (a, mb) = pull_member("a", alice.clone());
    let d = h.start(vec![a]).await;
    let got = poll_n(&mb, 2).await;
    // One call: settled although foreign, and reported as such.
    assert_eq!(
        d.settle_as(&got[0].id, Settle::Ack, Some(bob), Policy::Permissive)
            .await,
        Settled::DoneForeign
    );
    // It is gone: the holder's own ack finds nothing.
    assert_eq!(
        d.settle(&got[0].id, Settle::Ack, Some(alice.clone())).await,
        Settled::Unknown
    );
    // The holder's own settle under the permissive policy is plain `Done`.
    assert_eq!(
        d.settle_as(&got[1].id, Settle::Ack, Some(alice), Policy::Permissive)
            .await,
        Settled::Done
    );
    d.stop().await;
    assert_eq!(h.committed().await, HashMap::from([(0, 2)]));
}

#[tokio::test(start_paused = true)]
async fn only_the_holder_settles_and_a_wrong_nonce_is_unknown() {
    let alice = Creator::new(Some("acme".into()), Some("alice".into()));
    let h = Harness::new(settings()).await;
    h.publish(&["k"]).await;
    let (a, mb) = pull_member("a", alice.clone());
    let d = h.start(vec![a]).await;
    let got = poll_n(&mb, 1).await.remove(0);
    let bob = Creator::new(Some("acme".into()), Some("bob".into()));
    let other_tenant = Creator::new(Some("globex".into()), Some("alice".into()));
    assert_eq!(
        d.settle(&got.id, Settle::Ack, Some(bob)).await,
        Settled::Foreign
    );
    assert_eq!(
        d.settle(&got.id, Settle::Nack, Some(other_tenant)).await,
        Settled::Foreign
    );
    assert_eq!(
        d.settle(&got.id, Settle::Ack, Some(Creator::default()))
            .await,
        Settled::Foreign
    );
    assert_eq!(h.metrics.nacks.get(), 0, "a foreign settle changes nothing");
    // The same id with another nonce, boot or dispatcher.
    let (head, nonce) = got.id.rsplit_once('-').unwrap();
    let flipped = format!(
        "{head}-{:016x}",
        u64::from_str_radix(nonce, 16).unwrap() ^ 1
    );
    assert_eq!(
        d.settle(&flipped, Settle::Ack, Some(alice.clone())).await,
        Settled::Unknown
    );
    let rest = got.id.strip_prefix(d.boot()).unwrap();
    let other_boot = format!("0190abcdef0123456789abcdef012399{rest}");
    assert_eq!(d.ack(&other_boot).await, Settled::Unknown);
    let other_dispatcher = got.id.replacen(&format!("-{DISPATCHER:x}-"), "-8-", 1);
    assert_eq!(d.ack(&other_dispatcher).await, Settled::Unknown);
    assert_eq!(
        d.settle(&got.id, Settle::Ack, Some(alice)).await,
        Settled::Done
    );
    d.stop().await;
    assert_eq!(h.committed().await, HashMap::from([(0, 1)]));
}

#[tokio::test(start_paused = true)]
async fn the_last_attempt_dead_letters_and_the_watermark_passes_it() {
    let h = Harness::new(settings_with(|d| {
        d.max_attempts = 2;
    }))
    .await;
    h.publish(&["k", "k"]).await;
    let (a, mb) = pull_member("a", Creator::default());
    let d = h.start(vec![a.clone()]).await;
    let got = poll_n(&mb, 2).await;
    assert_eq!(d.ack(&got[1].id).await, Settled::Done);
    assert_eq!(d.nack(&got[0].id).await, Settled::Done);
    let again = poll_for(&mb, 10, BACKOFF * 2).await.remove(0);
    assert_eq!(d.nack(&again.id).await, Settled::Done);
    until("the dead letter", async || {
        h.metrics.dead_letters.get() == 1
    })
    .await;
    assert_eq!(d.ack(&again.id).await, Settled::Unknown, "given up on");
    assert_eq!(a.load.inflight(), 0);
    let dls = h.dead_letters.browse(TOPIC, 10).await.unwrap();
    assert_eq!(dls.len(), 1);
    assert_eq!((dls[0].partition, dls[0].offset), (0, 0));
    assert_eq!(dls[0].attempts, 2);
    assert_eq!(dls[0].last_error, "nack");
    assert!(
        poll_for(&mb, 10, BACKOFF * 2).await.is_empty(),
        "not sent again"
    );
    d.stop().await;
    assert_eq!(h.committed().await, HashMap::from([(0, 2)]));
    assert!(h.ledger_entries().await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_release_comes_back_at_once_and_counts_no_attempt() {
    let h = Harness::new(settings_with(|d| {
        d.max_attempts = 1;
    }))
    .await;
    h.publish(&["k"]).await;
    let (a, mb) = pull_member("a", Creator::default());
    let d = h.start(vec![a.clone()]).await;
    let mut id = poll_n(&mb, 1).await.remove(0).id;
    let t0 = Instant::now();
    // With one attempt allowed, a nack would dead-letter it; releases never.
    for _ in 0..3 {
        assert_eq!(d.settle(&id, Settle::Release, None).await, Settled::Done);
        let again = poll_n(&mb, 1).await.remove(0);
        assert_eq!(events(std::slice::from_ref(&again)), ["e0"]);
        assert_ne!(again.id, id);
        id = again.id;
    }
    assert_eq!(since(t0), Duration::ZERO, "no backoff");
    assert_eq!(h.metrics.nacks.get(), 0);
    assert_eq!(h.metrics.dead_letters.get(), 0);
    assert_eq!(d.ack(&id).await, Settled::Done);
    d.stop().await;
    assert_eq!(h.committed().await, HashMap::from([(0, 1)]));
}

#[tokio::test(start_paused = true)]
async fn a_reject_dead_letters_at_once_with_its_reason() {
    let h = Harness::new(settings()).await;
    h.publish(&["k", "k"]).await;
    let (a, mb) = pull_member("a", Creator::default());
    let d = h.start(vec![a.clone()]).await;
    let got = poll_n(&mb, 2).await;
    let why = Settle::Reject("remote refused it: forbidden".into());
    assert_eq!(d.settle(&got[0].id, why, None).await, Settled::Done);
    assert_eq!(d.ack(&got[1].id).await, Settled::Done);
    until("the dead letter", async || {
        h.metrics.dead_letters.get() == 1
    })
    .await;
    let dls = h.dead_letters.browse(TOPIC, 10).await.unwrap();
    assert_eq!(dls.len(), 1);
    assert_eq!((dls[0].offset, dls[0].attempts), (0, 1));
    assert_eq!(dls[0].last_error, "remote refused it: forbidden");
    d.stop().await;
    assert_eq!(h.committed().await, HashMap::from([(0, 2)]));
}

#[tokio::test(start_paused = true)]
async fn a_failing_dead_letter_write_keeps_the_event_in_flight_until_it_is_written() {
    let h = Harness::new(settings_with(|d| {
        d.max_attempts = 1;
        d.flush_interval = Duration::from_secs(1);
    }))
    .await;
    h.publish(&["k"]).await;
    let (a, mb) = pull_member("a", Creator::default());
    let d = h.start(vec![a]).await;
    let got = poll_n(&mb, 1).await.remove(0);
    h.meta.partition();
    assert_eq!(d.nack(&got.id).await, Settled::Done);
    // Several retries and flushes while the meta store is away.
    tokio::time::sleep(BACKOFF * 4).await;
    assert_eq!(h.metrics.dead_letters.get(), 0);
    assert_eq!(h.committed().await, HashMap::from([(0, 0)]), "not past it");
    assert_eq!(h.ledger_entries().await, [(0, 0, 1)]);
    assert_eq!(h.metrics.pending_deliveries.get(), 1);
    h.meta.heal();
    until("the dead letter", async || {
        h.metrics.dead_letters.get() == 1
    })
    .await;
    until("the commit past it", async || {
        h.committed().await == HashMap::from([(0, 1)])
    })
    .await;
    until("the ledger entry gone", async || {
        h.ledger_entries().await.is_empty()
    })
    .await;
    assert_eq!(h.metrics.pending_deliveries.get(), 0);
    assert_eq!(h.dead_letters.browse(TOPIC, 10).await.unwrap().len(), 1);
    d.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_bounded_release_leaves_what_was_taken_after_its_bound() {
    let h = Harness::new(settings()).await;
    h.publish(&["k", "k"]).await;
    let (a, mb) = pull_member("a", Creator::default());
    let d = h.start(vec![a]).await;
    mb.attach();
    // e0 taken by the old stream, e1 by a new one opened after `opened`.
    let first = poll_n(&mb, 1).await;
    let opened = tokio::time::Instant::now();
    tokio::time::advance(Duration::from_millis(10)).await;
    let second = poll_n(&mb, 1).await;
    assert_eq!(events(&first), ["e0"]);
    assert_eq!(events(&second), ["e1"]);
    d.send(Command::Release {
        client: "a".into(),
        before: opened,
        waiting: false,
    })
    .await;
    let again = poll_n(&mb, 1).await;
    assert_eq!(events(&again), ["e0"], "only what the old stream took");
    assert!(poll_for(&mb, 10, PROMPT).await.is_empty());
    assert_eq!(d.ack(&first[0].id).await, Settled::Unknown);
    assert_eq!(d.ack(&second[0].id).await, Settled::Done);
    assert_eq!(d.ack(&again[0].id).await, Settled::Done);
    d.stop().await;
    assert_eq!(h.committed().await, HashMap::from([(0, 2)]));
}
