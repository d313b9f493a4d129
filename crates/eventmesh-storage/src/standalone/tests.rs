//! The standalone log: the conformance suite, reopening, idempotency keys
//! and blob files.

use super::*;
use crate::log::IdempotencyKey;
use bytes::Bytes;
use std::time::Instant;

async fn open(dir: &std::path::Path) -> Arc<StandaloneLog> {
    StandaloneLog::open(LocalDb::open(dir).unwrap(), true).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_the_tck() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path()).await;
    crate::tck::run_all(log.as_ref()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_the_tck_reading_before_the_sync() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path()).await;
    log.set_read_before_sync(true);
    crate::tck::run_all(log.as_ref()).await;
}

fn keyed(partition: u32, key: &str) -> Vec<Append> {
    vec![Append {
        partition,
        payload: Bytes::from_static(b"x"),
        key: IdempotencyKey::new(key),
    }]
}

async fn put(log: &StandaloneLog, records: Vec<Append>) -> Placed {
    log.enqueue("t", records)
        .await
        .unwrap()
        .durable()
        .await
        .unwrap()[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_keys_survive_a_reopen_and_expire() {
    let dir = tempfile::tempdir().unwrap();
    let window = Duration::from_millis(300);
    let opts = crate::localdb::LocalDbOptions {
        dedup_window: window,
        ..Default::default()
    };
    let reopen = || {
        let db = LocalDb::open_with(dir.path(), &opts).unwrap();
        StandaloneLog::open_observed(db, true, window, Arc::new(|_, _| {})).unwrap()
    };
    let first = {
        let log = reopen();
        log.create_topic("t", 2).await.unwrap();
        let first = put(&log, keyed(1, "k")).await;
        log.close().await;
        first
    };
    let log = reopen();
    let again = put(&log, keyed(1, "k")).await;
    assert_eq!(
        again,
        Placed {
            duplicate: true,
            ..first
        },
        "the index outlives the process"
    );
    // Past the window the key is new again.
    tokio::time::sleep(window + Duration::from_millis(50)).await;
    let later = put(&log, keyed(1, "k")).await;
    assert!(!later.duplicate);
    assert_eq!(later.offset, first.offset + 1);
    assert!(put(&log, keyed(1, "k")).await.duplicate);
    // The journal: one entry per commit that stored a key (the first
    // process's and the one after the window). Its files go once a window
    // (rounded up to whole seconds, plus one) old: after a later flush,
    // only the newest entry is left.
    let cf = log.db.cf(crate::localdb::CF_DEDUP);
    log.db.db().flush_cf(cf).unwrap();
    let count = || log.db.db().iterator_cf(cf, IteratorMode::Start).count();
    assert_eq!(count(), 2, "one entry per commit that stored a key");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    put(&log, keyed(1, "k2")).await;
    log.db.db().flush_cf(cf).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while count() > 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(count(), 1, "the expired files are dropped");
}

/// The index of the layout before the journal (keyed by topic id in the
/// `dedup` column family) is dropped at open; the journal after it works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_index_before_the_journal_is_dropped_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let first = {
        let log = open(dir.path()).await;
        log.create_topic("t", 1).await.unwrap();
        let first = put(&log, keyed(0, "k")).await;
        let cf = log.db.cf(crate::localdb::CF_DEDUP);
        let mut old_key = 1u32.to_be_bytes().to_vec();
        old_key.extend_from_slice(b"\0old");
        log.db.db().put_cf(cf, &old_key, [0u8; 20]).unwrap();
        log.close().await;
        first
    };
    let log = open(dir.path()).await;
    let cf = log.db.cf(crate::localdb::CF_DEDUP);
    let keys: Vec<Box<[u8]>> = log
        .db
        .db()
        .iterator_cf(cf, IteratorMode::Start)
        .map(|i| i.unwrap().0)
        .collect();
    assert_eq!(keys.len(), 1, "only the journal entry is left");
    assert_eq!(keys[0][0], 0xFF);
    assert_eq!(
        put(&log, keyed(0, "k")).await,
        Placed {
            duplicate: true,
            ..first
        }
    );
}

/// The index of the earlier layout (in the `log` column family) is dropped
/// at open; records and marks stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_older_index_layout_is_dropped_at_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = open(dir.path()).await;
        log.create_topic("t", 1).await.unwrap();
        log.append("t", vec![(0, Bytes::from_static(b"a"))])
            .await
            .unwrap();
        let cf = log.db.cf(CF_LOG);
        log.db.db().put_cf(cf, b"k\0\0\0\x01abc", b"x").unwrap();
        log.db
            .db()
            .put_cf(cf, b"K\0\0\0\0\0\0\0\x01abc", b"")
            .unwrap();
        log.close().await;
    }
    let log = open(dir.path()).await;
    let cf = log.db.cf(CF_LOG);
    for tag in [b'k', b'K'] {
        let left = log
            .db
            .db()
            .prefix_iterator_cf(cf, [tag])
            .take_while(|i| i.as_ref().is_ok_and(|(k, _)| k[0] == tag))
            .count();
        assert_eq!(left, 0);
    }
    assert_eq!(log.read("t", 0, 0, 10, 1 << 20).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_window_stores_every_keyed_append() {
    let dir = tempfile::tempdir().unwrap();
    let db = LocalDb::open(dir.path()).unwrap();
    let log = StandaloneLog::open_observed(db, true, Duration::ZERO, Arc::new(|_, _| {})).unwrap();
    log.create_topic("t", 1).await.unwrap();
    let a = put(&log, keyed(0, "k")).await;
    let b = put(&log, keyed(0, "k")).await;
    assert!(!a.duplicate && !b.duplicate);
    assert_eq!(b.offset, a.offset + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = open(dir.path()).await;
        log.create_topic("t", 2).await.unwrap();
        log.append(
            "t",
            vec![(1, Bytes::from_static(b"a")), (1, Bytes::from_static(b"b"))],
        )
        .await
        .unwrap();
        log.truncate_before("t", 1, 1).await.unwrap();
        log.close().await;
    }
    let log = open(dir.path()).await;
    assert_eq!(log.topic("t").await.unwrap().unwrap().partitions, 2);
    assert_eq!(log.end_offset("t", 1).await.unwrap(), 2);
    assert_eq!(log.start_offset("t", 1).await.unwrap(), 1);
    assert_eq!(log.end_offset("t", 0).await.unwrap(), 0);
    let got = log.read("t", 1, 0, 10, 1 << 20).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].offset, 1);
    // Offsets continue after the reopen; they are never reused.
    assert_eq!(
        log.append("t", vec![(1, Bytes::from_static(b"c"))])
            .await
            .unwrap(),
        vec![2]
    );
    // A second topic gets a fresh id and does not see the first's records.
    log.create_topic("u", 2).await.unwrap();
    assert!(log.read("u", 1, 0, 10, 1 << 20).await.unwrap().is_empty());
}

fn blob_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".blob")
        })
        .count()
}

/// Event bodies of a few hundred bytes and more live in blob files:
/// they read back after a flush and a reopen, and retention deletes the
/// files once no record points into them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_records_go_to_blob_files_and_retention_frees_them() {
    let dir = tempfile::tempdir().unwrap();
    let body = |i: usize| Bytes::from(format!("{i:04}").repeat(500));
    {
        let log = open(dir.path()).await;
        log.create_topic("big", 2).await.unwrap();
        let records = (0..200).map(|i| ((i % 2) as u32, body(i))).collect();
        log.append("big", records).await.unwrap();
        log.db.flush().unwrap();
        assert!(blob_files(dir.path()) > 0, "no blob file after a flush");
        log.close().await;
    }
    let log = open(dir.path()).await;
    let got = log.read("big", 1, 0, 1000, usize::MAX).await.unwrap();
    assert_eq!(got.len(), 100);
    for (n, r) in got.iter().enumerate() {
        assert_eq!(r.offset, n as u64);
        assert_eq!(r.payload, body(2 * n + 1));
    }
    for p in 0..2 {
        log.truncate_before("big", p, 100).await.unwrap();
    }
    let cf = log.db.cf(CF_LOG);
    log.db
        .db()
        .compact_range_cf(cf, None::<&[u8]>, None::<&[u8]>);
    assert_eq!(blob_files(dir.path()), 0, "retention left blob files");
    assert!(log
        .read("big", 0, 0, 10, usize::MAX)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_share_commits() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path()).await;
    log.create_topic("t", 4).await.unwrap();
    let appends = (0..256u32).map(|i| {
        let log = log.clone();
        async move {
            log.append("t", vec![(i % 4, Bytes::from(vec![b'x'; 1024]))])
                .await
                .unwrap()
        }
    });
    futures::future::join_all(appends).await;
    let stats = log.commit_stats();
    let commits = stats.commits.load(Ordering::Relaxed);
    assert_eq!(stats.appends.load(Ordering::Relaxed), 256);
    // While one synced write is in progress the others queue up and are
    // written together: far fewer writes than appends.
    assert!(commits < 256, "{commits} commits for 256 appends");
    let total: u64 = futures::future::join_all((0..4).map(|p| log.end_offset("t", p)))
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .sum();
    assert_eq!(total, 256);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_after_close_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path()).await;
    log.create_topic("t", 1).await.unwrap();
    log.close().await;
    let err = log.append("t", vec![(0, Bytes::from_static(b"x"))]).await;
    assert!(matches!(err, Err(StorageError::Closed)), "{err:?}");
}

/// With reading before the sync, the fsync and the answers are on a second
/// thread: a close while appends are in flight still answers each of them
/// (stored, or refused as closed), and what was answered as stored is
/// exactly what a reopen finds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_before_the_sync_answers_every_append_through_a_close() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path()).await;
    log.set_read_before_sync(true);
    log.create_topic("t", 4).await.unwrap();
    let answered = Arc::new(AtomicU64::new(0));
    let appends: Vec<_> = (0..4000u32)
        .map(|i| {
            let (log, answered) = (log.clone(), answered.clone());
            tokio::spawn(async move {
                let body = Bytes::from(format!("event {i}"));
                let r = log.append("t", vec![(i % 4, body.clone())]).await;
                answered.fetch_add(1, Ordering::Relaxed);
                (i % 4, body, r)
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while answered.load(Ordering::Relaxed) < 500 {
        assert!(Instant::now() < deadline, "appends are not answered");
        tokio::task::yield_now().await;
    }
    log.close().await;
    let mut stored: Vec<Vec<(u64, Bytes)>> = vec![Vec::new(); 4];
    for a in appends {
        let (p, body, r) = tokio::time::timeout(Duration::from_secs(30), a)
            .await
            .expect("an append was never answered")
            .unwrap();
        match r {
            Ok(offsets) => stored[p as usize].push((offsets[0], body)),
            Err(StorageError::Closed) => {}
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    let kept: usize = stored.iter().map(Vec::len).sum();
    assert!(
        kept >= 500,
        "only {kept} appends stored, 500 were answered before the close"
    );
    drop(log);
    let log = open(dir.path()).await;
    for (p, mut mine) in stored.into_iter().enumerate() {
        mine.sort_by_key(|(o, _)| *o);
        let offsets: Vec<u64> = mine.iter().map(|(o, _)| *o).collect();
        assert_eq!(offsets, (0..mine.len() as u64).collect::<Vec<_>>());
        assert_eq!(
            log.end_offset("t", p as u32).await.unwrap(),
            mine.len() as u64
        );
        let got = log
            .read("t", p as u32, 0, 10_000, usize::MAX)
            .await
            .unwrap();
        let got: Vec<(u64, Bytes)> = got.into_iter().map(|r| (r.offset, r.payload)).collect();
        assert_eq!(got, mine);
    }
}
