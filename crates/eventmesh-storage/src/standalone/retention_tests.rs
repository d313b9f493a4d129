//! Retention, byte counts and topic deletion on the standalone log.

use super::*;
use crate::log::IdempotencyKey;
use bytes::Bytes;

const KIB: u64 = 1024;

async fn open(dir: &std::path::Path) -> Arc<StandaloneLog> {
    StandaloneLog::open(LocalDb::open(dir).unwrap(), false).unwrap()
}

/// Appends `n` records of one KiB to partition 0, `per` to a commit.
async fn fill(log: &StandaloneLog, topic: &str, n: usize, per: usize) {
    for _ in 0..n / per {
        let batch = (0..per)
            .map(|_| (0, Bytes::from(vec![b'x'; KIB as usize])))
            .collect();
        log.append(topic, batch).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_by_size_keeps_the_newest_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path()).await;
    let limit = 64 * KIB;
    let (info, created) = log
        .create_topic_with(
            "s",
            1,
            Some(Retention {
                ms: 0,
                bytes: limit,
            }),
        )
        .await
        .unwrap();
    assert!(created);
    assert_eq!(
        info.retention,
        Some(Retention {
            ms: 0,
            bytes: limit
        })
    );
    fill(&log, "s", 1000, 10).await;
    assert_eq!(log.stored_bytes("s").await.unwrap().total, 1000 * KIB);
    log.enforce_retention().await.unwrap();
    let start = log.start_offset("s", 0).await.unwrap();
    let held = log.stored_bytes("s").await.unwrap();
    // Cut at a mark: marks are 4 KiB apart (a sixteenth of the limit) and
    // land on commit boundaries (10 KiB here), so at most one commit's
    // worth below the limit.
    assert!(held.total <= limit, "{} bytes held", held.total);
    assert!(held.total > limit - 10 * KIB, "{} bytes held", held.total);
    assert_eq!(held.total, (1000 - start) * KIB);
    assert_eq!(held.partitions, Some(vec![held.total]));
    assert_eq!(log.end_offset("s", 0).await.unwrap(), 1000);
    let got = log.read("s", 0, 0, 10, usize::MAX).await.unwrap();
    assert_eq!(got[0].offset, start, "reads start at the new start");
    // Nothing more to drop until more comes.
    log.enforce_retention().await.unwrap();
    assert_eq!(log.start_offset("s", 0).await.unwrap(), start);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_by_age_drops_what_expired_and_the_default_applies() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path()).await;
    log.create_topic("aged", 2).await.unwrap();
    log.create_topic_with("kept", 1, Some(Retention::FOREVER))
        .await
        .unwrap();
    fill(&log, "aged", 20, 5).await;
    fill(&log, "kept", 20, 5).await;
    // No limit yet: nothing goes.
    log.enforce_retention().await.unwrap();
    assert_eq!(log.start_offset("aged", 0).await.unwrap(), 0);
    log.set_default_retention(Retention { ms: 200, bytes: 0 });
    tokio::time::sleep(Duration::from_millis(300)).await;
    log.enforce_retention().await.unwrap();
    assert_eq!(log.start_offset("aged", 0).await.unwrap(), 20);
    assert_eq!(log.stored_bytes("aged").await.unwrap().total, 0);
    assert!(log
        .read("aged", 0, 0, 10, usize::MAX)
        .await
        .unwrap()
        .is_empty());
    // The topic's own retention (forever) wins over the default.
    assert_eq!(log.start_offset("kept", 0).await.unwrap(), 0);
    assert_eq!(log.stored_bytes("kept").await.unwrap().total, 20 * KIB);
    // New records are kept their full period; offsets go on.
    let offs = log
        .append("aged", vec![(0, Bytes::from_static(b"new"))])
        .await
        .unwrap();
    assert_eq!(offs, vec![20]);
    log.enforce_retention().await.unwrap();
    assert_eq!(log.start_offset("aged", 0).await.unwrap(), 20);
    assert_eq!(log.stored_bytes("aged").await.unwrap().total, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_settings_and_byte_counts_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let limit = Retention {
        ms: 3_600_000,
        bytes: 32 * KIB,
    };
    let (start, held) = {
        let log = open(dir.path()).await;
        log.create_topic("t", 1).await.unwrap();
        let info = log.set_retention("t", Some(limit)).await.unwrap();
        assert_eq!(info.retention, Some(limit));
        fill(&log, "t", 100, 4).await;
        log.enforce_retention().await.unwrap();
        let start = log.start_offset("t", 0).await.unwrap();
        assert!(start > 0);
        let held = log.stored_bytes("t").await.unwrap().total;
        log.close().await;
        (start, held)
    };
    let log = open(dir.path()).await;
    assert_eq!(
        log.topic("t").await.unwrap().unwrap().retention,
        Some(limit)
    );
    assert_eq!(log.start_offset("t", 0).await.unwrap(), start);
    assert_eq!(log.stored_bytes("t").await.unwrap().total, held);
    // Back to the default (forever): more records, nothing dropped.
    log.set_retention("t", None).await.unwrap();
    fill(&log, "t", 100, 4).await;
    log.enforce_retention().await.unwrap();
    assert_eq!(log.start_offset("t", 0).await.unwrap(), start);
    assert_eq!(log.stored_bytes("t").await.unwrap().total, held + 100 * KIB);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_time_to_live_survives_a_reopen_with_and_without_retention() {
    let dir = tempfile::tempdir().unwrap();
    let limit = Retention {
        ms: 3_600_000,
        bytes: 0,
    };
    {
        let log = open(dir.path()).await;
        for t in ["only", "both", "none"] {
            log.create_topic(t, 1).await.unwrap();
        }
        log.set_ttl("only", Some(1_000)).await.unwrap();
        log.set_ttl("both", Some(2_000)).await.unwrap();
        log.set_retention("both", Some(limit)).await.unwrap();
        log.close().await;
    }
    let log = open(dir.path()).await;
    let of = |t: TopicInfo| (t.retention, t.ttl_ms);
    assert_eq!(
        of(log.topic("only").await.unwrap().unwrap()),
        (None, Some(1_000))
    );
    assert_eq!(
        of(log.topic("both").await.unwrap().unwrap()),
        (Some(limit), Some(2_000))
    );
    assert_eq!(of(log.topic("none").await.unwrap().unwrap()), (None, None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_topic_is_gone_and_its_name_starts_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path()).await;
    log.create_topic("gone", 2).await.unwrap();
    fill(&log, "gone", 50, 5).await;
    let keyed = vec![Append {
        partition: 1,
        payload: Bytes::from_static(b"k"),
        key: IdempotencyKey::new("key-1"),
    }];
    log.enqueue("gone", keyed.clone())
        .await
        .unwrap()
        .durable()
        .await
        .unwrap();
    assert!(log.delete_topic("gone").await.unwrap());
    assert!(!log.delete_topic("gone").await.unwrap());
    assert_eq!(log.topic("gone").await.unwrap(), None);
    let err = log
        .append("gone", vec![(0, Bytes::from_static(b"x"))])
        .await;
    assert!(matches!(err, Err(StorageError::UnknownTopic(_))), "{err:?}");
    // Same name again: a new, empty topic; the old key means nothing.
    log.create_topic("gone", 1).await.unwrap();
    assert_eq!(log.end_offset("gone", 0).await.unwrap(), 0);
    let placed = log
        .enqueue(
            "gone",
            vec![Append {
                partition: 0,
                ..keyed[0].clone()
            }],
        )
        .await
        .unwrap()
        .durable()
        .await
        .unwrap();
    assert!(!placed[0].duplicate);
    log.close().await;
    drop(log);
    // And after a reopen: one topic, one record.
    let log = open(dir.path()).await;
    assert_eq!(log.topics().await.unwrap().len(), 1);
    assert_eq!(log.end_offset("gone", 0).await.unwrap(), 1);
    assert_eq!(log.stored_bytes("gone").await.unwrap().total, 1);
}
