//! The conformance suite every [`EventLog`] backend must pass. Each check
//! uses its own topic, so the suite runs against one fresh log instance.

use bytes::Bytes;

use crate::error::StorageError;
use crate::log::{Append, EventLog, IdempotencyKey, Placed};

fn payload(i: usize) -> Bytes {
    Bytes::from(format!("record-{i}"))
}

/// Runs every check, panicking with a description on the first failure.
pub async fn run_all(log: &dyn EventLog) {
    create_is_idempotent(log).await;
    append_and_read_in_order(log).await;
    batch_spans_partitions(log).await;
    read_limits(log).await;
    unknown_topic_and_partition(log).await;
    concurrent_appends_get_unique_increasing_offsets(log).await;
    queued_appends_keep_their_order(log).await;
    truncate_drops_prefix(log).await;
    watch_signals_appends(log).await;
    topic_watch_signals_creates_and_deletes(log).await;
    readers_reach_the_end(log).await;
    keyed_appends_are_stored_once(log).await;
    time_to_live_is_kept_with_the_topic(log).await;
    times_resolve_to_offsets(log).await;
    held_back_events_come_due_in_order(log).await;
}

async fn create_is_idempotent(log: &dyn EventLog) {
    let a = log.create_topic("tck.create", 3).await.unwrap();
    assert_eq!(a.partitions, 3);
    let b = log.create_topic("tck.create", 8).await.unwrap();
    assert_eq!(b.partitions, 3, "re-creating keeps the partition count");
    assert_eq!(log.partitions("tck.create").await.unwrap(), Some(3));
    assert_eq!(log.partitions("tck.absent").await.unwrap(), None);
    assert!(log
        .topics()
        .await
        .unwrap()
        .iter()
        .any(|t| t.name == "tck.create"));
    assert!(log.create_topic("tck.zero", 0).await.is_err());
}

/// The offsets of what a read returned.
fn offsets(records: &[crate::log::Record]) -> Vec<u64> {
    records.iter().map(|r| r.offset).collect()
}

fn increasing(offsets: &[u64]) -> bool {
    offsets.windows(2).all(|w| w[0] < w[1])
}

async fn append_and_read_in_order(log: &dyn EventLog) {
    log.create_topic("tck.order", 2).await.unwrap();
    let empty_end = log.end_offset("tck.order", 0).await.unwrap();
    let mut offs = Vec::new();
    for i in 0..10 {
        let off = log
            .append("tck.order", vec![(1, payload(i))])
            .await
            .unwrap();
        assert_eq!(off.len(), 1);
        offs.push(off[0]);
    }
    assert!(
        increasing(&offs),
        "offsets in a partition increase: {offs:?}"
    );
    assert!(log.end_offset("tck.order", 1).await.unwrap() > offs[9]);
    let got = log.read("tck.order", 1, 0, 100, usize::MAX).await.unwrap();
    assert_eq!(offsets(&got), offs, "a read returns what was appended");
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r.payload, payload(i));
    }
    let tail = log
        .read("tck.order", 1, offs[7], 100, usize::MAX)
        .await
        .unwrap();
    assert_eq!(offsets(&tail), offs[7..]);
    // Reading from between two offsets starts at the next one stored.
    let between = log
        .read("tck.order", 1, offs[6] + 1, 100, usize::MAX)
        .await
        .unwrap();
    assert_eq!(offsets(&between), offs[7..]);
    assert!(log
        .read("tck.order", 1, offs[9] + 1, 100, usize::MAX)
        .await
        .unwrap()
        .is_empty());
    // The other partition holds nothing, and what it gets next is at or
    // after the end offset it had (a subscription starting "from the end"
    // misses nothing appended after it started).
    assert!(log
        .read("tck.order", 0, 0, 100, usize::MAX)
        .await
        .unwrap()
        .is_empty());
    let first = log
        .append("tck.order", vec![(0, payload(0))])
        .await
        .unwrap();
    assert!(first[0] >= empty_end, "{first:?} below the end {empty_end}");
}

async fn batch_spans_partitions(log: &dyn EventLog) {
    log.create_topic("tck.batch", 2).await.unwrap();
    let offs = log
        .append(
            "tck.batch",
            vec![(0, payload(0)), (1, payload(1)), (0, payload(2))],
        )
        .await
        .unwrap();
    assert_eq!(offs.len(), 3);
    assert!(offs[0] < offs[2], "{offs:?}");
    let p0 = log.read("tck.batch", 0, 0, 100, usize::MAX).await.unwrap();
    assert_eq!(offsets(&p0), [offs[0], offs[2]]);
    assert_eq!(p0[1].payload, payload(2));
    let p1 = log.read("tck.batch", 1, 0, 100, usize::MAX).await.unwrap();
    assert_eq!(offsets(&p1), [offs[1]]);
    let ends = [
        log.end_offset("tck.batch", 0).await.unwrap(),
        log.end_offset("tck.batch", 1).await.unwrap(),
    ];
    // A batch naming a partition that does not exist stores nothing.
    let err = log
        .append("tck.batch", vec![(0, payload(3)), (9, payload(4))])
        .await;
    assert!(matches!(err, Err(StorageError::UnknownPartition { .. })));
    assert_eq!(
        log.read("tck.batch", 0, 0, 100, usize::MAX)
            .await
            .unwrap()
            .len(),
        2
    );
    assert_eq!(log.end_offset("tck.batch", 0).await.unwrap(), ends[0]);
    assert_eq!(log.end_offset("tck.batch", 1).await.unwrap(), ends[1]);
}

async fn read_limits(log: &dyn EventLog) {
    log.create_topic("tck.limits", 1).await.unwrap();
    let recs: Vec<_> = (0..20).map(|i| (0, payload(i))).collect();
    log.append("tck.limits", recs).await.unwrap();
    assert_eq!(
        log.read("tck.limits", 0, 0, 5, usize::MAX)
            .await
            .unwrap()
            .len(),
        5
    );
    // The byte limit stops the read, but the first record always comes back.
    let one = log.read("tck.limits", 0, 0, 100, 1).await.unwrap();
    assert_eq!(one.len(), 1);
    let size = payload(0).len();
    let three = log.read("tck.limits", 0, 0, 100, size * 3).await.unwrap();
    assert_eq!(three.len(), 3);
}

async fn unknown_topic_and_partition(log: &dyn EventLog) {
    assert!(log.topic("tck.nope").await.unwrap().is_none());
    assert!(matches!(
        log.append("tck.nope", vec![(0, payload(0))]).await,
        Err(StorageError::UnknownTopic(_))
    ));
    assert!(matches!(
        log.read("tck.nope", 0, 0, 1, 1).await,
        Err(StorageError::UnknownTopic(_))
    ));
    log.create_topic("tck.parts", 1).await.unwrap();
    assert!(matches!(
        log.end_offset("tck.parts", 1).await,
        Err(StorageError::UnknownPartition { .. })
    ));
}

async fn concurrent_appends_get_unique_increasing_offsets(log: &dyn EventLog) {
    log.create_topic("tck.concurrent", 1).await.unwrap();
    let tasks = 16;
    let per = 25;
    let mut all = Vec::new();
    let futs = (0..tasks).map(|t| async move {
        let mut mine = Vec::new();
        for i in 0..per {
            let o = log
                .append("tck.concurrent", vec![(0, payload(t * per + i))])
                .await
                .unwrap();
            mine.push(o[0]);
        }
        mine
    });
    for mine in futures::future::join_all(futs).await {
        // Each writer's own appends are ordered.
        assert!(mine.windows(2).all(|w| w[0] < w[1]));
        all.extend(mine);
    }
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), tasks * per, "every append has its own offset");
    let read = log
        .read("tck.concurrent", 0, 0, usize::MAX, usize::MAX)
        .await
        .unwrap();
    assert_eq!(offsets(&read), all);
}

async fn queued_appends_keep_their_order(log: &dyn EventLog) {
    log.create_topic("tck.queued", 2).await.unwrap();
    let mut pending = Vec::new();
    for i in 0..500 {
        pending.push(
            log.enqueue("tck.queued", vec![(i % 2, payload(i as usize)).into()])
                .await
                .unwrap(),
        );
    }
    // Awaited in reverse: the order is fixed when queued, not when awaited.
    let mut offsets = Vec::new();
    for p in pending.into_iter().rev() {
        offsets.push(p.durable().await.unwrap()[0].offset);
    }
    offsets.reverse();
    for parity in 0..2 {
        let mine: Vec<u64> = offsets.iter().skip(parity).step_by(2).copied().collect();
        assert!(increasing(&mine), "partition {parity}: {mine:?}");
    }
    let read = log
        .read("tck.queued", 1, 0, usize::MAX, usize::MAX)
        .await
        .unwrap();
    let want: Vec<Bytes> = (0..500).filter(|i| i % 2 == 1).map(payload).collect();
    assert_eq!(
        read.into_iter().map(|r| r.payload).collect::<Vec<_>>(),
        want
    );
    let empty = log.enqueue("tck.queued", Vec::new()).await.unwrap();
    assert_eq!(empty.durable().await.unwrap(), Vec::<Placed>::new());
}

async fn truncate_drops_prefix(log: &dyn EventLog) {
    log.create_topic("tck.truncate", 1).await.unwrap();
    let recs: Vec<_> = (0..10).map(|i| (0, payload(i))).collect();
    let offs = log.append("tck.truncate", recs).await.unwrap();
    assert_eq!(log.start_offset("tck.truncate", 0).await.unwrap(), offs[0]);
    let end = log.end_offset("tck.truncate", 0).await.unwrap();
    log.truncate_before("tck.truncate", 0, offs[4])
        .await
        .unwrap();
    assert_eq!(log.start_offset("tck.truncate", 0).await.unwrap(), offs[4]);
    let got = log
        .read("tck.truncate", 0, 0, 100, usize::MAX)
        .await
        .unwrap();
    assert_eq!(offsets(&got), offs[4..]);
    assert_eq!(log.end_offset("tck.truncate", 0).await.unwrap(), end);
    // Truncating never frees an offset for reuse.
    let next = log
        .append("tck.truncate", vec![(0, payload(10))])
        .await
        .unwrap();
    assert!(next[0] > offs[9], "{next:?} reuses an offset");
}

async fn watch_signals_appends(log: &dyn EventLog) {
    log.create_topic("tck.watch", 1).await.unwrap();
    let mut w = log.append_watch();
    w.borrow_and_update();
    log.append("tck.watch", vec![(0, payload(0))])
        .await
        .unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), w.changed())
        .await
        .expect("append wakes watchers")
        .unwrap();
}

/// A backend that tells of topic changes bumps its watch when a topic is
/// created and when it is deleted.
async fn topic_watch_signals_creates_and_deletes(log: &dyn EventLog) {
    let Some(mut w) = log.topic_watch() else {
        return;
    };
    let within = std::time::Duration::from_secs(5);
    w.borrow_and_update();
    log.create_topic("tck.topicwatch", 1).await.unwrap();
    let woke = tokio::time::timeout(within, w.changed()).await;
    assert!(woke.is_ok(), "a create wakes topic watchers");
    w.borrow_and_update();
    assert!(log.delete_topic("tck.topicwatch").await.unwrap());
    let woke = tokio::time::timeout(within, w.changed()).await;
    assert!(woke.is_ok(), "a delete wakes topic watchers");
}

/// A reader's end is never past the end offset and reaches it once the
/// log has handed the records over (the watch says when it moves); a read
/// up to a bound stops below it.
async fn readers_reach_the_end(log: &dyn EventLog) {
    log.create_topic("tck.readend", 2).await.unwrap();
    // A reader first: the records appended next come its way.
    assert_eq!(
        log.read("tck.readend", 0, 0, 10, usize::MAX)
            .await
            .unwrap()
            .len(),
        0
    );
    let mut w = log.append_watch();
    let mut offs = Vec::new();
    for i in 0..6 {
        let placed = log
            .append("tck.readend", vec![(i % 2, payload(i as usize))])
            .await
            .unwrap();
        if i % 2 == 0 {
            offs.push(placed[0]);
        }
    }
    let end = log.end_offset("tck.readend", 0).await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            w.borrow_and_update();
            let at = log.read_end("tck.readend", 0).await.unwrap();
            assert!(at <= end, "a reader's end {at} past the end {end}");
            if at == end {
                break;
            }
            w.changed().await.unwrap();
        }
    })
    .await
    .expect("a reader's end reaches the end offset");
    let all = log
        .read_until("tck.readend", 0, 0, end, 100, usize::MAX)
        .await
        .unwrap();
    assert_eq!(offsets(&all), offs);
    assert_eq!(all[1].payload, payload(2));
    let below = log
        .read_until("tck.readend", 0, offs[0], offs[2], 100, usize::MAX)
        .await
        .unwrap();
    assert_eq!(offsets(&below), offs[..2]);
    let from_between = log
        .read_until("tck.readend", 0, offs[0] + 1, offs[2] + 1, 100, usize::MAX)
        .await
        .unwrap();
    assert_eq!(offsets(&from_between), offs[1..]);
    assert!(log
        .read_until("tck.readend", 0, offs[1], offs[1], 100, usize::MAX)
        .await
        .unwrap()
        .is_empty());
}

fn keyed(partition: u32, body: &'static str, key: Option<&str>) -> Append {
    Append {
        partition,
        payload: Bytes::from_static(body.as_bytes()),
        key: key.map(|k| IdempotencyKey::new(k).expect("a short key")),
    }
}

async fn keyed_appends_are_stored_once(log: &dyn EventLog) {
    log.create_topic("tck.dedup", 2).await.unwrap();
    let put = |records: Vec<Append>| async move {
        log.enqueue("tck.dedup", records)
            .await
            .unwrap()
            .durable()
            .await
            .unwrap()
    };
    let first = put(vec![keyed(0, "a", Some("k1"))]).await;
    assert!(!first[0].duplicate);
    // The same key again: not stored, answered with the first's place.
    let again = put(vec![keyed(0, "a again", Some("k1"))]).await;
    assert_eq!(
        again,
        [Placed {
            duplicate: true,
            ..first[0]
        }]
    );
    // In one batch: a key twice, a record without a key, a key from before.
    let batch = put(vec![
        keyed(1, "b", Some("k2")),
        keyed(1, "b again", Some("k2")),
        keyed(0, "c", None),
        keyed(0, "a once more", Some("k1")),
    ])
    .await;
    assert!(!batch[0].duplicate && !batch[2].duplicate, "{batch:?}");
    assert_eq!(
        batch[1],
        Placed {
            duplicate: true,
            ..batch[0]
        }
    );
    assert_eq!(
        batch[3],
        Placed {
            duplicate: true,
            ..first[0]
        }
    );
    let bodies = |records: Vec<crate::log::Record>| -> Vec<Bytes> {
        records.into_iter().map(|r| r.payload).collect()
    };
    let p0 = log.read("tck.dedup", 0, 0, 100, usize::MAX).await.unwrap();
    assert_eq!(offsets(&p0), [first[0].offset, batch[2].offset]);
    assert_eq!(
        bodies(p0),
        [Bytes::from_static(b"a"), Bytes::from_static(b"c")]
    );
    let p1 = log.read("tck.dedup", 1, 0, 100, usize::MAX).await.unwrap();
    assert_eq!(bodies(p1), [Bytes::from_static(b"b")]);
}

async fn time_to_live_is_kept_with_the_topic(log: &dyn EventLog) {
    let t = log.create_topic("tck.ttl", 1).await.unwrap();
    assert_eq!(t.ttl_ms, None);
    let t = log.set_ttl("tck.ttl", Some(5_000)).await.unwrap();
    assert_eq!(t.ttl_ms, Some(5_000));
    let own = crate::log::Retention {
        ms: 0,
        bytes: 1 << 20,
    };
    // Retention and time to live are set apart and kept together.
    let t = log.set_retention("tck.ttl", Some(own)).await.unwrap();
    assert_eq!((t.retention, t.ttl_ms), (Some(own), Some(5_000)));
    let t = log.topic("tck.ttl").await.unwrap().unwrap();
    assert_eq!((t.retention, t.ttl_ms), (Some(own), Some(5_000)));
    let listed = log.topics().await.unwrap();
    let t = listed.iter().find(|t| t.name == "tck.ttl").unwrap();
    assert_eq!(t.ttl_ms, Some(5_000));
    let t = log.set_ttl("tck.ttl", None).await.unwrap();
    assert_eq!((t.retention, t.ttl_ms), (Some(own), None));
    assert!(log.set_ttl("tck.nope", Some(1)).await.is_err());
}

/// Appends `n` events to `partition`, each stamped with the time it was
/// handed to the log.
async fn stamped(log: &dyn EventLog, topic: &str, partition: u32, n: usize) -> Vec<u64> {
    let records = (0..n)
        .map(|i| {
            let now = eventmesh_core::time::now_ms();
            (partition, stored_event(&format!("e-{i}"), now))
        })
        .collect();
    log.append(topic, records).await.unwrap()
}

/// A bare event as the runtime stores it, accepted at `at_ms`.
pub(crate) fn stored_event(id: &str, at_ms: u64) -> Bytes {
    let event = eventmesh_core::CloudEvent {
        id: id.to_string(),
        source: "/tck".into(),
        ty: "tck.time".into(),
        datacontenttype: None,
        dataschema: None,
        subject: None,
        time: None,
        extensions: Vec::new(),
        data: eventmesh_core::event::Data::None,
    };
    Bytes::from(eventmesh_core::codec::encode(&event, at_ms))
}

/// Waits until the clock has moved `ms` past `from`; returns the time then.
async fn clock_past(from: u64, ms: u64) -> u64 {
    loop {
        let now = eventmesh_core::time::now_ms();
        if now >= from + ms {
            return now;
        }
        tokio::time::sleep(std::time::Duration::from_millis(from + ms - now)).await;
    }
}

async fn times_resolve_to_offsets(log: &dyn EventLog) {
    let topic = "tck.time";
    log.create_topic(topic, 2).await.unwrap();
    let empty = log.end_offset(topic, 0).await.unwrap();
    assert_eq!(log.offset_at_time(topic, 0, 1).await.unwrap(), empty);
    let before = eventmesh_core::time::now_ms();
    let first = stamped(log, topic, 0, 50).await;
    stamped(log, topic, 1, 5).await;
    // A time between the bursts, at least 20 ms from both.
    let between = clock_past(eventmesh_core::time::now_ms(), 20).await;
    clock_past(between, 20).await;
    let second = stamped(log, topic, 0, 70).await;
    let at = |ms| log.offset_at_time(topic, 0, ms);
    assert_eq!(at(before.saturating_sub(60_000)).await.unwrap(), first[0]);
    assert_eq!(
        at(between).await.unwrap(),
        second[0],
        "the first of the second burst"
    );
    let end = log.end_offset(topic, 0).await.unwrap();
    let after = clock_past(eventmesh_core::time::now_ms(), 20).await;
    assert_eq!(at(after).await.unwrap(), end, "nothing that late: the end");
    assert_eq!(
        log.offset_at_time(topic, 1, between).await.unwrap(),
        log.end_offset(topic, 1).await.unwrap(),
        "partition 1 has nothing of the second burst"
    );
    assert_eq!(
        log.count_between(topic, 0, first[0], end).await.unwrap(),
        120
    );
    assert_eq!(
        log.count_between(topic, 0, second[0], end).await.unwrap(),
        70
    );
    assert_eq!(
        log.count_between(topic, 0, first[10], second[5])
            .await
            .unwrap(),
        45
    );
    assert_eq!(
        log.count_between(topic, 0, second[5], second[5])
            .await
            .unwrap(),
        0
    );
    assert_eq!(log.count_between(topic, 0, end, end + 10).await.unwrap(), 0);
    // Below what retention kept: the first record kept.
    log.truncate_before(topic, 0, first[30]).await.unwrap();
    assert_eq!(at(before.saturating_sub(60_000)).await.unwrap(), first[30]);
    assert_eq!(at(between).await.unwrap(), second[0]);
    assert_eq!(log.count_between(topic, 0, 0, second[0]).await.unwrap(), 20);
}

fn held(partition: u32, due_ms: u64, key: &str) -> crate::log::Scheduled {
    crate::log::Scheduled {
        partition,
        due_ms,
        key: key.to_string(),
        payload: Bytes::from(format!("event {key}")),
        handle: 0,
    }
}

async fn held_back_events_come_due_in_order(log: &dyn EventLog) {
    let topic = "tck.held";
    log.create_topic(topic, 2).await.unwrap();
    let none = log.scheduled(topic, 0).await.unwrap();
    assert_eq!((none.count, none.next_due_ms), (0, None));
    log.schedule(
        topic,
        vec![
            held(0, 3_000, "c"),
            held(0, 1_000, "a"),
            held(1, 500, "x"),
            held(0, 2_000, "b"),
        ],
    )
    .await
    .unwrap();
    // The same key at the same time again is the same one.
    log.schedule(topic, vec![held(0, 1_000, "a")])
        .await
        .unwrap();
    let s0 = log.scheduled(topic, 0).await.unwrap();
    assert_eq!((s0.count, s0.next_due_ms), (3, Some(1_000)));
    assert_eq!(log.scheduled(topic, 1).await.unwrap().count, 1);
    let due = log.due(topic, 0, 2_000, 10).await.unwrap();
    let keys: Vec<&str> = due.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["a", "b"], "due by 2000, earliest first");
    assert_eq!(due[0].payload, Bytes::from("event a"));
    assert_eq!((due[0].partition, due[0].due_ms), (0, 1_000));
    assert_eq!(log.due(topic, 0, u64::MAX, 1).await.unwrap().len(), 1);
    // Nothing of them is a record of the partition.
    assert!(log
        .read(topic, 0, 0, 10, usize::MAX)
        .await
        .unwrap()
        .is_empty());
    let mut gone_too = due.clone();
    gone_too.push(held(0, 9, "nope"));
    assert_eq!(log.unschedule(topic, 0, &gone_too).await.unwrap(), 2);
    assert_eq!(log.unschedule(topic, 0, &due).await.unwrap(), 0, "once");
    let s0 = log.scheduled(topic, 0).await.unwrap();
    assert_eq!((s0.count, s0.next_due_ms), (1, Some(3_000)));
    assert_eq!(log.due(topic, 0, 2_999, 10).await.unwrap(), Vec::new());
    assert!(log
        .schedule("tck.nope", vec![held(0, 1, "k")])
        .await
        .is_err());
    assert!(log.schedule(topic, vec![held(7, 1, "k")]).await.is_err());
    // Deleting the topic drops them; a new one of the name starts empty.
    assert!(log.delete_topic(topic).await.unwrap());
    log.create_topic(topic, 2).await.unwrap();
    assert_eq!(log.scheduled(topic, 0).await.unwrap().count, 0);
    assert!(log.due(topic, 0, u64::MAX, 10).await.unwrap().is_empty());
}
