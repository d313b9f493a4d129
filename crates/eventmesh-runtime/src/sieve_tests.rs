//! The sieve against a real log (RocksDB in a temporary directory).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use eventmesh_core::{codec, CloudEvent};
use eventmesh_filter::Filter;
use eventmesh_storage::{EventLog, LocalDb, StandaloneLog};
use serde_json::json;

use super::*;

const TOPIC: &str = "s";

struct Log {
    log: Arc<dyn EventLog>,
    metrics: Arc<Metrics>,
    sieves: Arc<Sieves>,
    _dir: tempfile::TempDir,
}

async fn log() -> Log {
    let dir = tempfile::tempdir().unwrap();
    let db = LocalDb::open(dir.path()).unwrap();
    let log: Arc<dyn EventLog> = StandaloneLog::open(db, false).unwrap();
    log.create_topic(TOPIC, 1).await.unwrap();
    Log {
        log,
        metrics: Arc::new(Metrics::new()),
        sieves: Arc::default(),
        _dir: dir,
    }
}

impl Log {
    fn register(&self, filter: Arc<Filter>) -> SieveHandle {
        self.sieves
            .register(&self.log, &self.metrics, TOPIC, filter)
    }
}

fn filter(v: serde_json::Value) -> Arc<Filter> {
    crate::filters::compile(&[v]).unwrap().unwrap()
}

/// Event `i` with the extension `g` (when given) and the type `t<i mod 3>`.
fn event(i: u64, g: Option<&str>) -> Bytes {
    let mut v = json!({"specversion": "1.0", "id": format!("e{i}"), "source": "/s",
        "type": format!("t{}", i % 3)});
    if let Some(g) = g {
        v["g"] = json!(g);
    }
    codec::encode(&CloudEvent::from_json_value(v).unwrap(), i).into()
}

async fn append(log: &Log, records: Vec<Bytes>) {
    log.log
        .append(TOPIC, records.into_iter().map(|r| (0, r)).collect())
        .await
        .unwrap();
}

fn offsets(s: &Sifted) -> Vec<u64> {
    s.matched.iter().map(|(o, _)| *o).collect()
}

#[tokio::test]
async fn each_consumer_gets_only_its_matches_from_one_read() {
    let log = log().await;
    let metrics = &*log.metrics;
    let a = log.register(filter(json!({"sql": "g = 'a'"})));
    let b = log.register(filter(json!({"exact": {"g": "b"}})));
    // Not indexable: evaluated on every event.
    let t1 = log.register(filter(json!({"prefix": {"type": "t1"}})));
    let gs = [Some("a"), Some("b"), None, Some("c"), Some("a"), Some("b")];
    append(&log, (0..6).map(|i| event(i, gs[i as usize])).collect()).await;

    let got = a.read(&*log.log, metrics, 0, 0, 6).await.unwrap();
    assert_eq!((offsets(&got), got.upto), (vec![0, 4], 6));
    // Offset 2 has no `g`: the spec's missing-attribute error, counted.
    assert_eq!((got.errored, got.absent), (vec![2], vec![]));
    let got = b.read(&*log.log, metrics, 0, 0, 6).await.unwrap();
    assert_eq!(offsets(&got), vec![1, 5]);
    let got = t1.read(&*log.log, metrics, 0, 0, 6).await.unwrap();
    assert_eq!((offsets(&got), got.errored), (vec![1, 4], vec![]));
    // From a later offset, only what is at or above it.
    let got = b.read(&*log.log, metrics, 0, 3, 6).await.unwrap();
    assert_eq!((offsets(&got), got.upto), (vec![5], 6));
    assert_eq!(
        got.matched[0].1.event.id, "e5",
        "the event itself, decoded once"
    );
    assert_eq!(got.matched[0].1.ingest_ms, 5);

    // Appended later: the segment is read on from where it stopped.
    append(&log, vec![event(6, Some("b")), event(7, Some("a"))]).await;
    let got = b.read(&*log.log, metrics, 0, 6, 8).await.unwrap();
    assert_eq!((offsets(&got), got.upto), (vec![6], 8));
    assert_eq!(log.sieves.topics(), 1);
    drop((a, b, t1));
    assert_eq!(
        log.sieves.topics(),
        0,
        "the last consumer gone, the sieve goes"
    );
}

#[tokio::test]
async fn a_filter_registered_later_sees_what_was_read_before() {
    let log = log().await;
    let metrics = &*log.metrics;
    let a = log.register(filter(json!({"exact": {"g": "a"}})));
    append(&log, vec![event(0, Some("b")), event(1, Some("a"))]).await;
    let got = a.read(&*log.log, metrics, 0, 0, 2).await.unwrap();
    assert_eq!(offsets(&got), vec![1]);
    let b = log.register(filter(json!({"exact": {"g": "b"}})));
    let got = b.read(&*log.log, metrics, 0, 0, 2).await.unwrap();
    assert_eq!(offsets(&got), vec![0], "the segment is read again for it");
    // The same filter twice is one entry; dropping one keeps the other.
    let same = filter(json!({"exact": {"g": "a"}}));
    let a1 = log.register(same.clone());
    let a2 = log.register(same);
    assert_eq!(a1.id, a2.id);
    drop(a1);
    let got = a2.read(&*log.log, metrics, 0, 0, 2).await.unwrap();
    assert_eq!(offsets(&got), vec![1]);
}

#[tokio::test]
async fn undecodable_and_dropped_records_are_absent() {
    let log = log().await;
    let metrics = &*log.metrics;
    let a = log.register(filter(json!({"exact": {"g": "a"}})));
    append(
        &log,
        vec![
            event(0, Some("a")),
            Bytes::from_static(b"\xffnot a record"),
            event(2, Some("a")),
        ],
    )
    .await;
    let got = a.read(&*log.log, metrics, 0, 0, 3).await.unwrap();
    assert_eq!((offsets(&got), got.absent), (vec![0, 2], vec![1]));
    assert_eq!(metrics.corrupt_records.get(), 1);

    // Records retention dropped before the sieve read them (on a log no
    // consumer read yet, so the sieve's task has not read ahead).
    let log = self::log().await;
    let metrics = &*log.metrics;
    append(&log, (0..2000).map(|i| event(i, Some("a"))).collect()).await;
    log.log.truncate_before(TOPIC, 0, 1500).await.unwrap();
    let a = log.register(filter(json!({"exact": {"g": "a"}})));
    let got = a.read(&*log.log, metrics, 0, 1100, 2000).await.unwrap();
    // The second segment (1024..2048): 1024..1500 absent, the rest matches.
    assert_eq!(got.upto, 2000);
    assert_eq!(got.absent, (1100..1500).collect::<Vec<_>>());
    assert_eq!(offsets(&got), (1500..2000).collect::<Vec<_>>());
}

#[tokio::test]
async fn segments_are_aligned_and_bounded() {
    let log = log().await;
    let metrics = &*log.metrics;
    let a = log.register(filter(json!({"exact": {"g": "a"}})));
    let n = SEGMENT * (SEGMENTS_PER_PARTITION as u64 + 2);
    append(&log, (0..n).map(|i| event(i, Some("a"))).collect()).await;
    // One read stops at the end of its segment.
    let got = a.read(&*log.log, metrics, 0, 10, n).await.unwrap();
    assert_eq!(
        (got.matched.len() as u64, got.upto),
        (SEGMENT - 10, SEGMENT)
    );
    let mut from = SEGMENT;
    while from < n {
        from = a.read(&*log.log, metrics, 0, from, n).await.unwrap().upto;
    }
    let part = a.sieve.part(0);
    {
        let part = part.lock().await;
        let kept: Vec<u64> = part.segments.keys().copied().collect();
        let last = n / SEGMENT;
        let first = last - SEGMENTS_PER_PARTITION as u64;
        assert_eq!(kept, (first..last).map(|k| k * SEGMENT).collect::<Vec<_>>());
        let decoded: Vec<u64> = part
            .segments
            .iter()
            .filter(|(_, s)| s.events.is_some())
            .map(|(b, _)| *b)
            .collect();
        let first = last - DECODED_SEGMENTS as u64;
        assert_eq!(
            decoded,
            (first..last).map(|k| k * SEGMENT).collect::<Vec<_>>()
        );
    }
    // A segment without its events: the matches are read again.
    let old = n - SEGMENT * (DECODED_SEGMENTS as u64 + 1);
    let got = a.read(&*log.log, metrics, 0, old + 1000, n).await.unwrap();
    assert_eq!(
        offsets(&got),
        (old + 1000..old + SEGMENT).collect::<Vec<_>>()
    );
    assert_eq!(got.matched[0].1.event.id, format!("e{}", old + 1000));
    // An evicted stretch is read again.
    let got = a.read(&*log.log, metrics, 0, 0, n).await.unwrap();
    assert_eq!((got.matched.len() as u64, got.upto), (SEGMENT, SEGMENT));
}

#[tokio::test]
async fn whoever_reads_wakes_the_consumers_it_matched_for() {
    let log = log().await;
    let metrics = &*log.metrics;
    let a = log.register(filter(json!({"exact": {"g": "a"}})));
    let b = log.register(filter(json!({"exact": {"g": "b"}})));
    let (wake_a, wake_b) = (a.waker(), b.waker());
    append(&log, vec![event(0, Some("b")), event(1, Some("c"))]).await;
    // `a` reads: nothing for it, a match for `b`, which is woken.
    let got = a.read(&*log.log, metrics, 0, 0, 2).await.unwrap();
    assert_eq!((offsets(&got), got.upto), (vec![], 2));
    tokio::time::timeout(WAIT, wake_b.notified()).await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(50), wake_a.notified())
            .await
            .is_err(),
        "nothing matched a"
    );
    // From now on the sieve's task reads each append at the tail of the
    // partitions read, and wakes whom it matched for.
    append(&log, vec![event(2, Some("c")), event(3, Some("a"))]).await;
    tokio::time::timeout(WAIT, wake_a.notified()).await.unwrap();
    let part = a.sieve.part(0);
    assert_eq!(part.lock().await.segments[&0].filled, 4, "read by the task");
    let got = a.read(&*log.log, metrics, 0, 2, 4).await.unwrap();
    assert_eq!((offsets(&got), got.upto), (vec![3], 4));
}

const WAIT: Duration = Duration::from_secs(10);
