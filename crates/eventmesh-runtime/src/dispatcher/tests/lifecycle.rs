//! Drain, the ledger behind the loop, recovery after a restart, and
//! records that cannot be read.

use super::*;
use bytes::Bytes;
use eventmesh_state::LedgerEntry;

#[tokio::test(start_paused = true)]
async fn drain_takes_back_waiting_copies_and_answers_once_nothing_is_in_hands() {
    let h = Harness::new(settings()).await;
    h.publish(&["k", "k"]).await;
    let (a, mb) = pull_member("a", Creator::default());
    let d = h.start(vec![a]).await;
    until("both in the mailbox", async || mb.len() == 2).await;
    let taken = poll_for(&mb, 1, PROMPT).await.remove(0);
    let deadline = Instant::now() + Duration::from_secs(60);
    let (done, mut drained) = oneshot::channel();
    d.send(Command::Drain { deadline, done }).await;
    d.barrier().await;
    assert!(
        poll_for(&mb, 10, PROMPT).await.is_empty(),
        "e1 was taken back"
    );
    assert!(
        drained.try_recv().is_err(),
        "e0 is still in the client's hands"
    );
    assert_eq!(d.ack(&taken.id).await, Settled::Done);
    tokio::time::timeout(PROMPT, drained)
        .await
        .unwrap()
        .unwrap();
    assert!(Instant::now() < deadline);
    d.stop().await;
    assert_eq!(h.committed().await, HashMap::from([(0, 1)]));
}

#[tokio::test(start_paused = true)]
async fn drain_answers_at_its_deadline_and_acks_still_work() {
    let h = Harness::new(settings()).await;
    h.publish(&["k"]).await;
    let (a, mb) = pull_member("a", Creator::default());
    let d = h.start(vec![a]).await;
    let taken = poll_n(&mb, 1).await.remove(0);
    let t0 = Instant::now();
    let (done, drained) = oneshot::channel();
    d.send(Command::Drain {
        deadline: t0 + Duration::from_secs(10),
        done,
    })
    .await;
    tokio::time::timeout(Duration::from_secs(20), drained)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(since(t0), Duration::from_secs(10));
    assert_eq!(d.ack(&taken.id).await, Settled::Done);
    d.stop().await;
    assert_eq!(h.committed().await, HashMap::from([(0, 1)]));
}

#[tokio::test(start_paused = true)]
async fn the_ledger_holds_one_entry_per_event_whatever_its_ids() {
    let h = Harness::new(settings_with(|d| {
        d.flush_interval = Duration::from_secs(1);
    }))
    .await;
    h.publish(&["k"]).await;
    let (a, mb) = pull_member("a", Creator::default());
    let d = h.start(vec![a]).await;
    let first = poll_n(&mb, 1).await.remove(0);
    until("the entry", async || {
        h.ledger_entries().await == [(0, 0, 0)]
    })
    .await;
    assert_eq!(d.nack(&first.id).await, Settled::Done);
    let again = poll_for(&mb, 1, BACKOFF * 2).await.remove(0);
    until("the attempt recorded", async || {
        h.ledger_entries().await == [(0, 0, 1)]
    })
    .await;
    assert_eq!(d.ack(&again.id).await, Settled::Done);
    until("the entry gone", async || {
        h.ledger_entries().await.is_empty()
    })
    .await;
    d.stop().await;
}

#[tokio::test(start_paused = true)]
async fn attempts_spent_before_a_restart_count_and_stale_entries_go() {
    let h = Harness::new(settings()).await;
    let entry = |partition, offset, attempts| LedgerEntry {
        consumer: CONSUMER.into(),
        topic: TOPIC.into(),
        partition,
        offset,
        member: "a".into(),
        attempts,
        sent_ms: 1,
    };
    // Two attempts of three spent on e0; one entry of a partition the
    // topic does not have.
    h.ledger
        .put_batch(&[entry(0, 0, 2), entry(5, 3, 1)])
        .await
        .unwrap();
    h.publish(&["k"]).await;
    let (a, mb) = pull_member("a", Creator::default());
    let d = h.start(vec![a]).await;
    let got = poll_n(&mb, 1).await.remove(0);
    assert_eq!(d.nack(&got.id).await, Settled::Done);
    until("the dead letter", async || {
        h.metrics.dead_letters.get() == 1
    })
    .await;
    let dls = h.dead_letters.browse(TOPIC, 10).await.unwrap();
    assert_eq!(dls[0].attempts, 3);
    d.stop().await;
    assert!(h.ledger_entries().await.is_empty());
    assert!(h.ledger.list(CONSUMER, TOPIC).await.unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_undecodable_record_is_skipped_for_good() {
    let h = Harness::new(settings()).await;
    h.log
        .append(TOPIC, vec![(0, Bytes::from_static(b"not an event"))])
        .await
        .unwrap();
    h.publish(&["k"]).await;
    let (a, mb) = pull_member("a", Creator::default());
    let d = h.start(vec![a]).await;
    let got = poll_n(&mb, 1).await.remove(0);
    assert_eq!(got.event, "e0");
    assert_eq!(h.metrics.corrupt_records.get(), 1);
    assert_eq!(d.ack(&got.id).await, Settled::Done);
    d.stop().await;
    assert_eq!(h.committed().await, HashMap::from([(0, 2)]));
}
