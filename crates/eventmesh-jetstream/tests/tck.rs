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

fn options(servers: Vec<String>, replicas: usize, prefix: &str) -> JetStreamSettings {
    JetStreamSettings {
        servers,
        replicas,
        prefix: prefix.to_string(),
        timeout: Duration::from_secs(5),
        ..Default::default()
    }
}

async fn connect(servers: Vec<String>, replicas: usize, prefix: &str) -> Arc<JetStreamLog> {
    JetStreamLog::connect(&options(servers, replicas, prefix), WINDOW)
        .await
        .expect("connects to JetStream")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_storage_tck_passes_on_one_server() {
    let nats = NatsServer::start();
    let log = connect(vec![nats.url()], 1, "TCK").await;
    tck::run_all(&*log).await;
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
