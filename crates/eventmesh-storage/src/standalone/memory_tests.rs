//! Topics kept in memory: served like any other, bounded, and empty (with
//! fresh offsets) after a reopen while their definition stays.

use super::*;
use crate::log::IdempotencyKey;
use bytes::Bytes;

fn open(dir: &std::path::Path) -> Arc<StandaloneLog> {
    StandaloneLog::open(LocalDb::open(dir).unwrap(), true).unwrap()
}

fn records(partition: u32, n: usize, size: usize) -> Vec<Append> {
    (0..n)
        .map(|i| Append {
            partition,
            payload: Bytes::from(vec![i as u8; size]),
            key: IdempotencyKey::new(&format!("k{i}")),
        })
        .collect()
}

async fn put(log: &StandaloneLog, topic: &str, records: Vec<Append>) -> Vec<Placed> {
    log.enqueue(topic, records)
        .await
        .unwrap()
        .durable()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_topic_serves_reads_in_order_and_keeps_nothing_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let (info, created) = log
        .create_topic_as("req", 2, None, Durability::Memory)
        .await
        .unwrap();
    assert!(created);
    assert_eq!(info.durability, Durability::Memory);
    let start = log.end_offset("req", 1).await.unwrap();
    assert_eq!(log.start_offset("req", 1).await.unwrap(), start);
    let mut watch = log.append_watch();
    let seen = *watch.borrow_and_update();
    let placed = put(&log, "req", records(1, 3, 10)).await;
    assert_eq!(
        placed.iter().map(|p| p.offset).collect::<Vec<_>>(),
        vec![start, start + 1, start + 2]
    );
    assert!(placed.iter().all(|p| p.partition == 1 && !p.duplicate));
    assert!(*watch.borrow_and_update() > seen, "readers are woken");
    // Keys are not deduplicated: the same records are stored again.
    let again = put(&log, "req", records(1, 1, 10)).await;
    assert_eq!(again[0].offset, start + 3);
    assert!(!again[0].duplicate);
    assert_eq!(log.end_offset("req", 1).await.unwrap(), start + 4);
    let got = log.read("req", 1, start + 1, 2, 1 << 20).await.unwrap();
    assert_eq!(
        got.iter().map(|r| r.offset).collect::<Vec<_>>(),
        vec![start + 1, start + 2]
    );
    assert_eq!(got[0].payload, Bytes::from(vec![1u8; 10]));
    // The byte limit of a read: the first record always, then what fits.
    let got = log.read("req", 1, start, 10, 15).await.unwrap();
    assert_eq!(got.len(), 1);
    let got = log
        .read_until("req", 1, start, start + 2, 10, 1 << 20)
        .await
        .unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(log.stored_bytes("req").await.unwrap().total, 40);
    assert!(log.read("req", 0, 0, 10, 1 << 20).await.unwrap().is_empty());
    // Truncation drops the oldest.
    log.truncate_before("req", 1, start + 2).await.unwrap();
    assert_eq!(log.start_offset("req", 1).await.unwrap(), start + 2);
    let got = log.read("req", 1, start, 10, 1 << 20).await.unwrap();
    assert_eq!(got[0].offset, start + 2);
    assert_eq!(log.stored_bytes("req").await.unwrap().total, 20);
    // Nothing of it reached the store.
    let stored = log
        .db
        .db()
        .prefix_iterator_cf(log.db.cf(CF_LOG), b"d")
        .filter_map(|kv| kv.ok())
        .filter(|(k, _)| k.starts_with(b"d"))
        .count();
    assert_eq!(stored, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_topic_keeps_its_definition_and_loses_its_records_on_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let end_before = {
        let log = open(dir.path());
        let own = Retention { ms: 0, bytes: 5000 };
        log.create_topic_as("req", 1, Some(own), Durability::Memory)
            .await
            .unwrap();
        log.set_ttl("req", Some(1234)).await.unwrap();
        log.create_topic("disk", 1).await.unwrap();
        put(&log, "req", records(0, 5, 10)).await;
        put(&log, "disk", records(0, 5, 10)).await;
        log.close().await;
        log.end_offset("req", 0).await.unwrap()
    };
    let log = open(dir.path());
    let info = log.topic("req").await.unwrap().unwrap();
    assert_eq!(
        info,
        TopicInfo {
            name: "req".into(),
            partitions: 1,
            retention: Some(Retention { ms: 0, bytes: 5000 }),
            ttl_ms: Some(1234),
            durability: Durability::Memory,
        }
    );
    assert_eq!(
        log.topic("disk").await.unwrap().unwrap().durability,
        Durability::Disk
    );
    // Empty, starting above every offset of the run before.
    let start = log.start_offset("req", 0).await.unwrap();
    assert!(start > end_before, "{start} > {end_before}");
    assert_eq!(log.end_offset("req", 0).await.unwrap(), start);
    assert!(log.read("req", 0, 0, 10, 1 << 20).await.unwrap().is_empty());
    assert_eq!(log.floor_offset("req", 0).await.unwrap(), start);
    // The disk topic kept its records.
    assert_eq!(log.read("disk", 0, 0, 10, 1 << 20).await.unwrap().len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_partition_drops_its_oldest_records_past_its_byte_limit() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    log.create_topic_as(
        "req",
        1,
        Some(Retention { ms: 0, bytes: 100 }),
        Durability::Memory,
    )
    .await
    .unwrap();
    let placed = put(&log, "req", records(0, 25, 10)).await;
    let last = placed[24].offset;
    // 100 bytes hold the last 10 records of 10 bytes.
    assert_eq!(log.start_offset("req", 0).await.unwrap(), last - 9);
    let got = log.read("req", 0, 0, 100, 1 << 20).await.unwrap();
    assert_eq!(got.len(), 10);
    assert_eq!(got[0].offset, last - 9);
    assert_eq!(log.stored_bytes("req").await.unwrap().total, 100);
    // A record larger than the limit is kept alone.
    let big = put(&log, "req", records(0, 1, 500)).await;
    let got = log.read("req", 0, 0, 100, 1 << 20).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].offset, big[0].offset);
    // Deleting it leaves nothing behind.
    assert!(log.delete_topic("req").await.unwrap());
    assert!(log.topic("req").await.unwrap().is_none());
    assert!(log.enqueue("req", records(0, 1, 1)).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_by_age_applies_to_a_memory_topic() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    log.create_topic_as(
        "req",
        1,
        Some(Retention { ms: 1, bytes: 0 }),
        Durability::Memory,
    )
    .await
    .unwrap();
    // Records carrying their acceptance time, as the runtime stores them.
    let payload = crate::tck::stored_event("e1", 1);
    let placed = put(
        &log,
        "req",
        vec![Append {
            partition: 0,
            payload,
            key: None,
        }],
    )
    .await;
    log.enforce_retention().await.unwrap();
    assert_eq!(
        log.start_offset("req", 0).await.unwrap(),
        placed[0].offset + 1,
        "accepted at 1 ms after the epoch: older than any age limit"
    );
}
