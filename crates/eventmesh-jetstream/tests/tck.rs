//! The storage conformance suite against real `nats-server -js` processes:
//! one server, and a cluster of three with every stream on three replicas.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use eventmesh_jetstream::testutil::{free_port, NatsCluster, NatsServer};
use eventmesh_jetstream::{JetStreamLog, JetStreamSettings};
use eventmesh_storage::{tck, EventLog, StorageError};

/// The deduplication window the suite's idempotency checks run under.
const WINDOW: Duration = Duration::from_secs(120);

/// The default read cache (8 MiB per topic).
const CACHE: usize = 8 << 20;

fn options(servers: Vec<String>, replicas: usize, prefix: &str) -> JetStreamSettings {
    JetStreamSettings {
        servers,
        replicas,
        prefix: prefix.to_string(),
        timeout: Duration::from_secs(5),
        read_cache_bytes: CACHE,
        ..Default::default()
    }
}

async fn connect(servers: Vec<String>, replicas: usize, prefix: &str) -> Arc<JetStreamLog> {
    connect_cached(servers, replicas, prefix, CACHE).await
}

async fn connect_cached(
    servers: Vec<String>,
    replicas: usize,
    prefix: &str,
    cache: usize,
) -> Arc<JetStreamLog> {
    let mut opts = options(servers, replicas, prefix);
    opts.read_cache_bytes = cache;
    JetStreamLog::connect(&opts, WINDOW)
        .await
        .expect("connects to JetStream")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_storage_tck_passes_on_one_server() {
    let nats = NatsServer::start();
    let log = connect(vec![nats.url()], 1, "TCK").await;
    tck::run_all(&*log).await;
    log.close().await;
    // And with every read going to JetStream.
    let log = connect_cached(vec![nats.url()], 1, "TCKNOCACHE", 0).await;
    tck::run_all(&*log).await;
    log.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_past_a_small_read_cache_come_whole_and_in_order() {
    let nats = NatsServer::start();
    // The smallest cache: 64 KiB for the one partition.
    let log = connect_cached(vec![nats.url()], 1, "SMALL", 1).await;
    log.create_topic("t", 1).await.unwrap();
    // Followed from here on: later records reach the cache.
    assert_eq!(log.end_offset("t", 0).await.unwrap(), 0);
    let mut expected = Vec::new();
    for i in 0..300u32 {
        let payload = Bytes::from(format!("{i:0>1024}"));
        let offs = log.append("t", vec![(0, payload.clone())]).await.unwrap();
        expected.push((offs[0], payload));
    }
    let last = expected.last().unwrap().0;
    // The tail has brought the last record once the end is past it and a
    // read from it answers at once.
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let got = log.read("t", 0, last, 1, usize::MAX).await.unwrap();
            if got.len() == 1 {
                break;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the last record is readable");
    // From the start (older than the cache holds), in pieces crossing into it.
    let mut got = Vec::new();
    let mut from = 0;
    while got.len() < expected.len() {
        let piece = log.read("t", 0, from, 37, usize::MAX).await.unwrap();
        assert!(!piece.is_empty(), "stopped at {from}");
        from = piece.last().unwrap().offset + 1;
        got.extend(piece.into_iter().map(|r| (r.offset, r.payload)));
    }
    assert_eq!(got, expected);
    assert!(log
        .read("t", 0, from, 10, usize::MAX)
        .await
        .unwrap()
        .is_empty());
    log.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_storage_tck_passes_on_three_servers_with_three_replicas() {
    let cluster = NatsCluster::start(3);
    let log = connect(cluster.urls(), 3, "TCK3").await;
    tck::run_all(&*log).await;
    // Every stream really is on three servers.
    let nats = async_nats::connect(cluster.servers[0].url()).await.unwrap();
    let js = async_nats::jetstream::new(nats);
    let mut stream = js.get_stream("TCK3_tck_dorder").await.unwrap();
    let info = stream.info().await.unwrap();
    assert_eq!(info.config.num_replicas, 3);
    let cluster_info = info.cluster.clone().expect("clustered stream");
    assert_eq!(cluster_info.replicas.len() + 1, 3, "{cluster_info:?}");
    log.close().await;
    // New topics take their first publish as soon as their creation
    // returns, whichever server the log publishes through: mostly not a
    // new stream's leader, which the other servers learn of a moment later.
    for (i, server) in cluster.servers.iter().enumerate() {
        let through = connect(vec![server.url()], 3, &format!("NEW{i}")).await;
        let firsts = (0..8).map(|n| {
            let through = through.clone();
            async move {
                let topic = format!("fresh{n}");
                through.create_topic(&topic, 1).await.unwrap();
                let placed = through
                    .append(&topic, vec![(0, Bytes::from_static(b"first"))])
                    .await;
                (topic, placed)
            }
        });
        for (topic, placed) in futures::future::join_all(firsts).await {
            match placed {
                Ok(placed) => assert_eq!(placed, vec![0], "{topic}"),
                Err(e) => panic!("the first publish to {topic} through server {i}: {e}"),
            }
        }
        through.close().await;
    }
}

#[tokio::test]
async fn an_unreachable_server_fails_fast_naming_the_url() {
    let url = format!("nats://127.0.0.1:{}", free_port());
    let mut opts = options(vec![url.clone()], 1, "X");
    opts.timeout = Duration::from_millis(500);
    let started = Instant::now();
    let err = match JetStreamLog::connect(&opts, WINDOW).await {
        Err(e) => e,
        Ok(_) => panic!("connected to nothing"),
    };
    assert!(started.elapsed() < Duration::from_secs(5));
    let StorageError::Connect { servers, cause } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(servers, &url);
    assert!(cause.starts_with("cannot connect: "), "{cause}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_one_log() {
    let nats = NatsServer::start();
    let a = connect(vec![nats.url()], 1, "SHARED").await;
    let b = connect(vec![nats.url()], 1, "SHARED").await;
    a.create_topic("orders", 2).await.unwrap();
    // B sees the topic A created, with A's partition count.
    let seen = b.create_topic("orders", 7).await.unwrap();
    assert_eq!(seen.partitions, 2);
    assert_eq!(b.end_offset("orders", 1).await.unwrap(), 0);
    let mut woken = b.append_watch();
    woken.borrow_and_update();
    let offs = a
        .append("orders", vec![(1, Bytes::from_static(b"from a"))])
        .await
        .unwrap();
    // B is woken by A's append and its end offset moves past it.
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            woken.changed().await.unwrap();
            if b.end_offset("orders", 1).await.unwrap() > offs[0] {
                break;
            }
        }
    })
    .await
    .expect("B learns of A's append");
    let got = b.read("orders", 1, 0, 10, usize::MAX).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].offset, offs[0]);
    assert_eq!(got[0].payload, Bytes::from_static(b"from a"));
    let names: Vec<String> = b
        .topics()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["orders"]);
}
