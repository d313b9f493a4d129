//! Retention, byte counts and topic deletion on the JetStream backend,
//! against a real `nats-server -js`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use bytes::Bytes;

use eventmesh_jetstream::testutil::{NatsCluster, NatsServer};
use eventmesh_jetstream::{JetStreamLog, JetStreamSettings};
use eventmesh_storage::{Durability, EventLog, Retention, StorageError};

const KIB: u64 = 1024;
/// The deduplication window the logs run with.
const WINDOW: Duration = Duration::from_secs(120);
/// Longest any wait below may take.
const WAIT: Duration = Duration::from_secs(15);

async fn connect(nats: &NatsServer, prefix: &str) -> Arc<JetStreamLog> {
    connect_to(vec![nats.url()], 1, prefix).await
}

async fn connect_to(servers: Vec<String>, replicas: usize, prefix: &str) -> Arc<JetStreamLog> {
    let opts = JetStreamSettings {
        servers,
        replicas,
        prefix: prefix.to_string(),
        timeout: Duration::from_secs(5),
        ..Default::default()
    };
    tokio::time::timeout(WAIT, JetStreamLog::connect(&opts, WINDOW))
        .await
        .expect("connects in time")
        .expect("connects to JetStream")
}

/// A stream's configuration, read with a client of its own.
async fn stream_config(nats: &NatsServer, name: &str) -> stream::Config {
    stream_info(&nats.url(), name).await.config
}

async fn stream_info(url: &str, name: &str) -> stream::Info {
    let client = async_nats::connect(url).await.unwrap();
    let js = jetstream::new(client);
    js.get_stream(name).await.unwrap().cached_info().clone()
}

/// Appends `n` records of one KiB to the partition, one append each (so
/// every stored message has the same size).
async fn fill(log: &JetStreamLog, topic: &str, partition: u32, n: usize) -> Vec<u64> {
    let mut offsets = Vec::with_capacity(n);
    for _ in 0..n {
        let payload = Bytes::from(vec![b'x'; KIB as usize]);
        let placed = tokio::time::timeout(WAIT, log.append(topic, vec![(partition, payload)]))
            .await
            .expect("append in time")
            .unwrap();
        offsets.extend(placed);
    }
    offsets
}

/// Polls `check` until it returns `Some`, failing after [`WAIT`].
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    tokio::time::timeout(WAIT, async {
        loop {
            if let Some(v) = check().await {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what} within {WAIT:?}"))
}

/// Stored bytes of a topic whose partition 0 holds every record, all of one
/// size: that size, after checking the count is exact.
async fn record_size(log: &JetStreamLog, topic: &str) -> u64 {
    let held = log.stored_bytes(topic).await.unwrap();
    assert_eq!(held.partitions, None);
    let kept = log.end_offset(topic, 0).await.unwrap() - log.start_offset(topic, 0).await.unwrap();
    assert!(kept > 0);
    assert_eq!(
        held.total % kept,
        0,
        "{} bytes in {kept} records",
        held.total
    );
    let size = held.total / kept;
    // The payload, its subject, headers and the store's overhead.
    assert!(
        (KIB + 1..KIB + 128).contains(&size),
        "{size} bytes a record"
    );
    size
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_by_size_keeps_the_newest_bytes_of_the_topic() {
    let nats = NatsServer::start();
    let log = connect(&nats, "RS").await;
    let own = Retention {
        ms: 0,
        bytes: 16 * KIB,
    };
    let (info, created) = log.create_topic_with("sized", 2, Some(own)).await.unwrap();
    assert!(created);
    assert_eq!(info.retention, Some(own));
    // JetStream limits the stream: the bytes per partition times two.
    let config = stream_config(&nats, "RS_sized").await;
    assert_eq!(config.max_bytes, 32 * KIB as i64);
    assert_eq!(config.max_age, Duration::ZERO);
    assert_eq!(config.metadata["eventmesh.retention"], "0,16384");
    let offsets = fill(&log, "sized", 0, 100).await;
    assert_eq!(offsets, (0..100).collect::<Vec<u64>>());
    // Read when the topic is first read: the stream's first sequence then,
    // the first stored record of either partition.
    let floor = log.floor_offset("sized", 0).await.unwrap();
    let start = log.start_offset("sized", 0).await.unwrap();
    assert!(floor > 0 && floor <= start, "floor {floor}, start {start}");
    let size = record_size(&log, "sized").await;
    let held = log.stored_bytes("sized").await.unwrap().total;
    // The newest records that fit: one more would not.
    assert_eq!(held, (100 - start) * size);
    assert!(held <= 32 * KIB, "{held} bytes held");
    assert!(held + size > 32 * KIB, "{held} bytes held");
    assert_eq!(log.end_offset("sized", 0).await.unwrap(), 100);
    let got = log.read("sized", 0, 0, 1000, usize::MAX).await.unwrap();
    assert_eq!(got.len() as u64, 100 - start);
    assert_eq!(got[0].offset, start, "reads start at the new start");
    // A retention pass moves the floor to the first stored record; the
    // empty partition's floor stays at its end.
    log.enforce_retention().await.unwrap();
    assert_eq!(log.floor_offset("sized", 0).await.unwrap(), start);
    assert_eq!(log.floor_offset("sized", 1).await.unwrap(), 0);
    assert_eq!(log.start_offset("sized", 0).await.unwrap(), start);
    assert_eq!(log.start_offset("sized", 1).await.unwrap(), 0);
    // Truncation raises one partition's floor above the topic's.
    log.truncate_before("sized", 0, start + 5).await.unwrap();
    assert_eq!(log.floor_offset("sized", 0).await.unwrap(), start + 5);
    assert_eq!(log.start_offset("sized", 0).await.unwrap(), start + 5);
    assert_eq!(
        log.stored_bytes("sized").await.unwrap().total,
        held - 5 * size
    );
    log.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_by_age_drops_expired_records() {
    let nats = NatsServer::start();
    let log = connect(&nats, "RA").await;
    let own = Retention { ms: 1000, bytes: 0 };
    let (info, _) = log.create_topic_with("aged", 1, Some(own)).await.unwrap();
    assert_eq!(info.retention, Some(own));
    let config = stream_config(&nats, "RA_aged").await;
    assert_eq!(config.max_age, Duration::from_secs(1));
    assert_eq!(config.max_bytes, -1);
    // The duplicate window may not outlast the records.
    assert_eq!(config.duplicate_window, Duration::from_secs(1));
    fill(&log, "aged", 0, 5).await;
    let size = record_size(&log, "aged").await;
    assert_eq!(log.stored_bytes("aged").await.unwrap().total, 5 * size);
    eventually("the records expire", || async {
        let start = log.start_offset("aged", 0).await.unwrap();
        (start == 5).then_some(())
    })
    .await;
    assert_eq!(log.stored_bytes("aged").await.unwrap().total, 0);
    assert!(log
        .read("aged", 0, 0, 10, usize::MAX)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(log.end_offset("aged", 0).await.unwrap(), 5);
    log.enforce_retention().await.unwrap();
    assert_eq!(log.floor_offset("aged", 0).await.unwrap(), 5);
    // New records go on from there and are kept their full period.
    let offs = log
        .append("aged", vec![(0, Bytes::from_static(b"new"))])
        .await
        .unwrap();
    assert_eq!(offs, vec![5]);
    assert_eq!(log.start_offset("aged", 0).await.unwrap(), 5);
    let got = log.read("aged", 0, 0, 10, usize::MAX).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload, Bytes::from_static(b"new"));

    // Shorter than the servers' minimum age: the stream keeps 100 ms, the
    // topic reports what it was given.
    let quick = Retention { ms: 20, bytes: 0 };
    let (info, _) = log
        .create_topic_with("quick", 1, Some(quick))
        .await
        .unwrap();
    assert_eq!(info.retention, Some(quick));
    let config = stream_config(&nats, "RA_quick").await;
    assert_eq!(config.max_age, Duration::from_millis(100));
    assert_eq!(config.duplicate_window, Duration::from_millis(100));
    log.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_settings_are_shared_and_the_default_reaches_existing_streams() {
    let nats = NatsServer::start();
    let a = connect(&nats, "RC").await;
    let b = connect(&nats, "RC").await;
    let (info, created) = a.create_topic_with("shared", 1, None).await.unwrap();
    assert!(created);
    assert_eq!(info.retention, None);
    assert_eq!(b.topic("shared").await.unwrap().unwrap().retention, None);

    let own = Retention {
        ms: 3_600_000,
        bytes: 64 * KIB,
    };
    let info = a.set_retention("shared", Some(own)).await.unwrap();
    assert_eq!(info.retention, Some(own));
    assert_eq!(
        a.topic("shared").await.unwrap().unwrap().retention,
        Some(own)
    );
    let config = stream_config(&nats, "RC_shared").await;
    assert_eq!(config.max_age, Duration::from_secs(3600));
    assert_eq!(config.max_bytes, 64 * KIB as i64);
    assert_eq!(config.duplicate_window, WINDOW);
    // B lists it at once, answers from memory until its next pass.
    let listed = b.topics().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].retention, Some(own));
    b.enforce_retention().await.unwrap();
    assert_eq!(
        b.topic("shared").await.unwrap().unwrap().retention,
        Some(own)
    );
    // Creating it again from B changes nothing.
    let (again, created) = b.create_topic_with("shared", 4, None).await.unwrap();
    assert!(!created);
    assert_eq!(again.partitions, 1);
    assert_eq!(again.retention, Some(own));
    // A third instance reads it when it opens the topic.
    let c = connect(&nats, "RC").await;
    assert_eq!(
        c.topic("shared").await.unwrap().unwrap().retention,
        Some(own)
    );

    // The default: topics created without their own retention get it,
    // existing ones following the default get it at the next pass, those
    // with their own keep theirs.
    a.create_topic("older", 1).await.unwrap();
    a.create_topic_with("pinned", 1, Some(Retention::FOREVER))
        .await
        .unwrap();
    fill(&a, "older", 0, 20).await;
    fill(&a, "pinned", 0, 20).await;
    // Each record's size counts its subject: one per topic.
    let size = record_size(&a, "older").await;
    assert_eq!(a.stored_bytes("older").await.unwrap().total, 20 * size);
    let pinned_size = record_size(&a, "pinned").await;
    let default = Retention {
        ms: 0,
        bytes: 8 * KIB,
    };
    a.set_default_retention(default);
    let (fresh, _) = a.create_topic_with("fresh", 1, None).await.unwrap();
    assert_eq!(fresh.retention, None);
    let config = stream_config(&nats, "RC_fresh").await;
    assert_eq!(config.max_bytes, 8 * KIB as i64);
    assert!(!config.metadata.contains_key("eventmesh.retention"));
    fill(&a, "fresh", 0, 20).await;
    let fresh_size = record_size(&a, "fresh").await;
    let fresh_kept = 8 * KIB / fresh_size;
    assert_eq!(
        a.stored_bytes("fresh").await.unwrap().total,
        fresh_kept * fresh_size
    );
    assert_eq!(a.start_offset("fresh", 0).await.unwrap(), 20 - fresh_kept);

    assert_eq!(stream_config(&nats, "RC_older").await.max_bytes, -1);
    a.enforce_retention().await.unwrap();
    assert_eq!(
        stream_config(&nats, "RC_older").await.max_bytes,
        8 * KIB as i64
    );
    let kept = 8 * KIB / size;
    eventually("the older stream is cut to the default", || async {
        let held = a.stored_bytes("older").await.unwrap().total;
        (held == kept * size).then_some(())
    })
    .await;
    assert_eq!(a.start_offset("older", 0).await.unwrap(), 20 - kept);
    a.enforce_retention().await.unwrap();
    assert_eq!(a.floor_offset("older", 0).await.unwrap(), 20 - kept);
    assert_eq!(stream_config(&nats, "RC_pinned").await.max_bytes, -1);
    assert_eq!(
        a.stored_bytes("pinned").await.unwrap().total,
        20 * pinned_size
    );
    assert_eq!(
        a.topic("pinned").await.unwrap().unwrap().retention,
        Some(Retention::FOREVER)
    );

    // Back to the default: the metadata goes, the default's limits apply.
    let info = a.set_retention("shared", None).await.unwrap();
    assert_eq!(info.retention, None);
    let config = stream_config(&nats, "RC_shared").await;
    assert!(!config.metadata.contains_key("eventmesh.retention"));
    assert_eq!(config.max_bytes, 8 * KIB as i64);
    assert_eq!(config.max_age, Duration::ZERO);
    c.enforce_retention().await.unwrap();
    assert_eq!(c.topic("shared").await.unwrap().unwrap().retention, None);
    for log in [a, b, c] {
        log.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_topic_is_gone_and_its_name_starts_afresh() {
    let nats = NatsServer::start();
    let a = connect(&nats, "RD").await;
    let b = connect(&nats, "RD").await;
    a.create_topic("gone", 2).await.unwrap();
    fill(&a, "gone", 1, 10).await;
    // B has the topic open.
    assert_eq!(b.end_offset("gone", 1).await.unwrap(), 10);

    assert!(a.delete_topic("gone").await.unwrap());
    assert!(!a.delete_topic("gone").await.unwrap());
    assert_eq!(a.topic("gone").await.unwrap(), None);
    assert!(a.topics().await.unwrap().is_empty());
    let err = a.append("gone", vec![(0, Bytes::from_static(b"x"))]).await;
    assert!(matches!(err, Err(StorageError::UnknownTopic(_))), "{err:?}");
    let err = a.stored_bytes("gone").await;
    assert!(matches!(err, Err(StorageError::UnknownTopic(_))), "{err:?}");
    let err = a.set_retention("gone", None).await;
    assert!(matches!(err, Err(StorageError::UnknownTopic(_))), "{err:?}");
    // B forgets it at its next pass.
    b.enforce_retention().await.unwrap();
    let err = b.append("gone", vec![(0, Bytes::from_static(b"x"))]).await;
    assert!(matches!(err, Err(StorageError::UnknownTopic(_))), "{err:?}");

    // The same name again: a new, empty topic.
    let (info, created) = a.create_topic_with("gone", 1, None).await.unwrap();
    assert!(created);
    assert_eq!(info.partitions, 1);
    assert_eq!(a.end_offset("gone", 0).await.unwrap(), 0);
    assert_eq!(a.start_offset("gone", 0).await.unwrap(), 0);
    assert_eq!(a.floor_offset("gone", 0).await.unwrap(), 0);
    assert_eq!(a.stored_bytes("gone").await.unwrap().total, 0);
    assert!(a
        .read("gone", 0, 0, 10, usize::MAX)
        .await
        .unwrap()
        .is_empty());
    let offs = a
        .append("gone", vec![(0, Bytes::from_static(b"again"))])
        .await
        .unwrap();
    assert_eq!(offs, vec![0]);
    assert_eq!(b.topic("gone").await.unwrap().unwrap().partitions, 1);
    assert_eq!(b.end_offset("gone", 0).await.unwrap(), 1);

    // An instance holding the old stream open learns of the new one at
    // its next pass.
    let c = connect(&nats, "RD").await;
    assert_eq!(c.end_offset("gone", 0).await.unwrap(), 1);
    assert!(a.delete_topic("gone").await.unwrap());
    a.create_topic("gone", 3).await.unwrap();
    c.enforce_retention().await.unwrap();
    assert_eq!(c.topic("gone").await.unwrap().unwrap().partitions, 3);
    assert_eq!(c.end_offset("gone", 0).await.unwrap(), 0);
    for log in [a, b, c] {
        log.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_works_on_three_servers_with_three_replicas() {
    let cluster = NatsCluster::start(3);
    let a = connect_to(cluster.urls(), 3, "R3").await;
    let b = connect_to(cluster.urls(), 3, "R3").await;
    let own = Retention {
        ms: 0,
        bytes: 8 * KIB,
    };
    a.create_topic_with("t", 1, Some(own)).await.unwrap();
    fill(&a, "t", 0, 20).await;
    let size = record_size(&a, "t").await;
    let kept = 8 * KIB / size;
    assert_eq!(a.stored_bytes("t").await.unwrap().total, kept * size);
    assert_eq!(a.start_offset("t", 0).await.unwrap(), 20 - kept);
    // B opened it before the change; both see it after a pass.
    assert_eq!(b.topic("t").await.unwrap().unwrap().retention, Some(own));
    let wider = Retention {
        ms: 60_000,
        bytes: 16 * KIB,
    };
    assert_eq!(
        a.set_retention("t", Some(wider)).await.unwrap().retention,
        Some(wider)
    );
    let info = stream_info(&cluster.servers[1].url(), "R3_t").await;
    assert_eq!(info.config.num_replicas, 3);
    assert_eq!(info.config.max_bytes, 16 * KIB as i64);
    assert_eq!(info.config.max_age, Duration::from_secs(60));
    for log in [&a, &b] {
        log.enforce_retention().await.unwrap();
        assert_eq!(
            log.topic("t").await.unwrap().unwrap().retention,
            Some(wider)
        );
        assert_eq!(log.floor_offset("t", 0).await.unwrap(), 20 - kept);
    }
    // The tails still follow the stream after the passes.
    let mut woken = b.append_watch();
    woken.borrow_and_update();
    let offs = a
        .append("t", vec![(0, Bytes::from_static(b"x"))])
        .await
        .unwrap();
    assert_eq!(offs, vec![20]);
    tokio::time::timeout(WAIT, async {
        while b.end_offset("t", 0).await.unwrap() < 21 {
            woken.changed().await.unwrap();
        }
    })
    .await
    .expect("B learns of the append");
    assert!(a.delete_topic("t").await.unwrap());
    b.enforce_retention().await.unwrap();
    assert_eq!(b.topic("t").await.unwrap(), None);
    for log in [a, b] {
        log.close().await;
    }
}

/// Where a consumer starts is asked of the stream's leader: a follower
/// that has not applied an acknowledged record yet must not make "nothing
/// stored" out of it (a consumer starting there would skip the record).
/// Each round appends one record to each of many empty partitions at
/// once, through a server whose replica follows, and asks at once where
/// each partition starts, and where it starts from the time before the
/// appends: always at the record, never at the end past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_on_three_replicas_never_skips_an_acknowledged_record() {
    let cluster = NatsCluster::start(3);
    const PARTITIONS: u32 = 64;
    let maker = connect_to(cluster.urls(), 3, "RW").await;
    for round in 0..2 {
        let topic = format!("t{round}");
        maker.create_topic(&topic, PARTITIONS).await.unwrap();
        // Direct gets are answered by the replica on the client's own
        // server when it has one: a server that does not lead.
        let info = stream_info(&cluster.servers[0].url(), &format!("RW_{topic}")).await;
        let leader = info.cluster.and_then(|c| c.leader).expect("a leader");
        let follower = cluster
            .servers
            .iter()
            .find(|s| s.name != leader)
            .expect("a server that does not lead");
        let log = connect_to(vec![follower.url()], 3, "RW").await;
        assert_eq!(log.end_offset(&topic, 0).await.unwrap(), 0);
        let before = eventmesh_core::time::now_ms();
        let appends = (0..PARTITIONS).map(|p| {
            let (log, topic) = (log.clone(), topic.clone());
            async move {
                let placed = log
                    .append(&topic, vec![(p, Bytes::from_static(b"x"))])
                    .await
                    .unwrap();
                let start = log.start_offset(&topic, p).await.unwrap();
                let from_time = log.offset_at_time(&topic, p, before).await.unwrap();
                (p, placed[0], start, from_time)
            }
        });
        for (p, placed, start, from_time) in futures::future::join_all(appends).await {
            assert_eq!(start, placed, "{topic} partition {p}");
            assert_eq!(
                from_time, placed,
                "{topic} partition {p} from a time before"
            );
        }
        log.close().await;
    }
    maker.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retention_pass_neither_fails_nor_waits_while_nats_is_away() {
    let mut nats = NatsServer::start();
    let log = connect(&nats, "RO").await;
    log.create_topic_with(
        "t",
        1,
        Some(Retention {
            ms: 0,
            bytes: 2 * KIB,
        }),
    )
    .await
    .unwrap();
    nats.kill();
    eventually("the client notices", || async { log.status().err() }).await;
    let pass = tokio::time::timeout(Duration::from_secs(1), log.enforce_retention()).await;
    assert!(matches!(pass, Ok(Ok(()))), "{pass:?}");
    nats.restart();
    nats.wait_ready(WAIT);
    eventually("the client reconnects", || async { log.status().ok() }).await;
    fill(&log, "t", 0, 5).await;
    log.enforce_retention().await.unwrap();
    let size = record_size(&log, "t").await;
    let start = log.start_offset("t", 0).await.unwrap();
    assert_eq!(start, 5 - 2 * KIB / size);
    assert_eq!(log.floor_offset("t", 0).await.unwrap(), start);
    log.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_topic_is_a_stream_in_the_servers_memory() {
    let nats = NatsServer::start();
    let a = connect(&nats, "MEM").await;
    let (info, created) = a
        .create_topic_as("asks", 2, None, Durability::Memory)
        .await
        .unwrap();
    assert!(created);
    assert_eq!(info.durability, Durability::Memory);
    let config = stream_config(&nats, "MEM_asks").await;
    assert_eq!(config.storage, stream::StorageType::Memory);
    let offsets = fill(&a, "asks", 1, 3).await;
    let got = a.read("asks", 1, offsets[0], 10, 1 << 20).await.unwrap();
    assert_eq!(got.iter().map(|r| r.offset).collect::<Vec<_>>(), offsets);
    // Another instance sees it as it is; a topic on disk stays on disk.
    let b = connect(&nats, "MEM").await;
    assert_eq!(
        b.topic("asks").await.unwrap().unwrap().durability,
        Durability::Memory
    );
    b.create_topic("files", 1).await.unwrap();
    let listed: Vec<(String, Durability)> = a
        .topics()
        .await
        .unwrap()
        .into_iter()
        .map(|t| (t.name, t.durability))
        .collect();
    assert_eq!(
        listed,
        vec![
            ("asks".to_string(), Durability::Memory),
            ("files".to_string(), Durability::Disk)
        ]
    );
    assert_eq!(
        stream_config(&nats, "MEM_files").await.storage,
        stream::StorageType::File
    );
    a.close().await;
    b.close().await;
}
