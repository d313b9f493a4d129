//! Built-in connectors end to end through the real binary, each against
//! the real system the test starts: rows of a PostgreSQL outbox become
//! events and events become rows, Redis Streams entries, MQTT messages and
//! NATS messages (JetStream in, core out) in and out, and
//! kill -9 of `eventmesh` in the middle of a PostgreSQL sink's stream (the
//! table ends with exactly one row per event) and of a source's (every
//! row in the log exactly once).

mod common;

use std::time::Duration;

use common::connectors::{create, drain, reader, stored, stored_reaching, wait_status};
use common::topics::publish_range;
use common::*;
use eventmesh_connect::testutil::mqtt::Mosquitto;
use eventmesh_connect::testutil::nats::NatsServer;
use eventmesh_connect::testutil::postgres::PostgresServer;
use eventmesh_connect::testutil::redis::RedisServer;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn postgres_outbox_rows_become_events_and_events_become_rows() {
    let pg = PostgresServer::start();
    pg.psql(
        "CREATE TABLE outbox (id bigserial PRIMARY KEY, type text, subject text, payload jsonb);\
         INSERT INTO outbox (type, payload) VALUES ('order.created', '{\"order\": 1}'), ('order.paid', '{\"order\": 1}');",
    );
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.connector.offset.store=rocksdb"]);
    let c = client();
    reader(&c, &s, "r", "orders").await;
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "outbox", "kind": "postgres-source", "topic": "orders",
            "config": {"url": pg.url(), "table": "outbox", "poll_interval_ms": 50}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let got = drain(&c, &s, "r", 2, WAIT).await;
    let ids: Vec<&String> = got.keys().collect();
    assert_eq!(ids, ["outbox:1", "outbox:2"]);
    let (e1, _) = &got["outbox:1"];
    assert_eq!(e1["type"], "order.created");
    assert_eq!(e1["data"], json!({"order": 1}));
    assert_eq!(e1["source"], "/connectors/outbox");
    let v = wait_status(&c, &s, "outbox", WAIT, |v| {
        v["status"]["position"] == json!({"id": 2})
    })
    .await;
    assert_eq!(v["status"]["position"], json!({"id": 2}), "{v}");

    // The other way: events published to a topic become rows.
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "orders-table", "kind": "postgres-sink", "topic": "orders",
            "config": {"url": pg.url(), "table": "order_events"}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    // The password of the URL (none here) and the rest come back as given.
    assert_eq!(v["config"]["table"], "order_events");
    let v = wait_status(&c, &s, "orders-table", WAIT, |v| v["status"]["events"] == 2).await;
    assert_eq!(v["status"]["events"], 2, "{v}");
    let rows = pg.psql("SELECT id, type, data::text FROM order_events ORDER BY id");
    assert_eq!(
        rows.trim(),
        "outbox:1|order.created|{\"order\": 1}\noutbox:2|order.paid|{\"order\": 1}"
    );
}

#[tokio::test]
async fn a_postgres_sink_killed_mid_stream_ends_with_one_row_per_event() {
    let pg = PostgresServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &[]);
    let c = client();
    const N: usize = 20_000;
    publish_range(&c, &s, "feed", 0, N).await;
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "pg", "kind": "postgres-sink", "topic": "feed",
            "config": {"url": pg.url(), "table": "feed"}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    // Killed once some, not all, rows are in.
    let rows = || {
        pg.psql("SELECT count(*) FROM feed")
            .parse::<usize>()
            .unwrap_or(0)
    };
    let deadline = std::time::Instant::now() + WAIT;
    while pg.psql("SELECT to_regclass('feed') IS NOT NULL") != "t" || rows() < 300 {
        assert!(std::time::Instant::now() < deadline, "no rows in time");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    s.kill9();
    let written = rows();
    assert!(
        written < N,
        "all {N} rows were in before the kill: make the topic bigger"
    );
    let s = s.restart();
    assert!(committed_reaches(&c, &s, "feed", N as u64, Duration::from_secs(120)).await);
    let counts = pg.psql("SELECT count(*), count(DISTINCT id), min(id), max(id) FROM feed");
    assert_eq!(counts.trim(), format!("{N}|{N}|e0|e9999"));
}

#[tokio::test]
async fn a_postgres_source_killed_mid_stream_publishes_every_row_once() {
    let pg = PostgresServer::start();
    const N: usize = 100_000;
    pg.psql(&format!(
        "CREATE TABLE outbox (id bigserial PRIMARY KEY, payload jsonb);\
         INSERT INTO outbox (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, {N}) g;"
    ));
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &["eventmesh.connector.offset.store=rocksdb"]);
    let c = client();
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "ob", "kind": "postgres-source", "topic": "rows",
            "config": {"url": pg.url(), "table": "outbox", "batch_size": 50}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    // Killed once some, not all, rows are in the log.
    let before = stored_reaching(&c, &s, "rows", 2_000).await;
    s.kill9();
    assert!(before < N as u64, "all rows were in before the kill");
    let s = s.restart();
    let v = wait_status(&c, &s, "ob", Duration::from_secs(120), |v| {
        v["status"]["position"] == json!({"id": N})
    })
    .await;
    assert_eq!(v["status"]["position"], json!({"id": N}), "{v}");
    assert_eq!(stored(&c, &s, "rows").await, N as u64);
}

#[tokio::test]
async fn redis_stream_entries_in_and_out() {
    let redis = RedisServer::start();
    let rc = redis::Client::open(redis.url()).unwrap();
    let mut conn = rc.get_multiplexed_async_connection().await.unwrap();
    for n in 0..3 {
        let _: String = redis::cmd("XADD")
            .arg("incoming")
            .arg(format!("{}-0", n + 1))
            .arg("data")
            .arg(json!({"n": n}).to_string())
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    reader(&c, &s, "r", "from-redis").await;
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "rin", "kind": "redis-source", "topic": "from-redis",
            "config": {"url": redis.url(), "stream": "incoming"}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let got = drain(&c, &s, "r", 3, WAIT).await;
    let ids: Vec<&String> = got.keys().collect();
    assert_eq!(ids, ["incoming-1-0", "incoming-2-0", "incoming-3-0"]);
    assert_eq!(got["incoming-2-0"].0["data"], json!({"n": 1}));
    // Committed entries are acknowledged in the group.
    let v = wait_status(&c, &s, "rin", WAIT, |v| {
        v["status"]["position"] == json!({"id": "3-0"})
    })
    .await;
    assert_eq!(v["status"]["position"], json!({"id": "3-0"}), "{v}");
    let pending: redis::Value = redis::cmd("XPENDING")
        .arg("incoming")
        .arg("eventmesh-rin")
        .query_async(&mut conn)
        .await
        .unwrap();
    match pending {
        redis::Value::Array(items) => assert_eq!(items[0], redis::Value::Int(0)),
        other => panic!("XPENDING answered {other:?}"),
    }

    let (code, v) = create(
        &c,
        &s,
        json!({"name": "rout", "kind": "redis-sink", "topic": "to-redis",
            "config": {"url": redis.url(), "stream": "outgoing"}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    // One partition key: the sink keeps the order of a partition, not
    // across partitions.
    for n in 0..2 {
        let mut e = event(&format!("x{n}"));
        e["partitionkey"] = json!("one");
        publish(&c, &s, "to-redis", &e).await;
    }
    let v = wait_status(&c, &s, "rout", WAIT, |v| v["status"]["events"] == 2).await;
    assert_eq!(v["status"]["events"], 2, "{v}");
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg("outgoing")
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .unwrap();
    let ids: Vec<String> = entries
        .iter()
        .map(|(_, fields)| fields.iter().find(|(k, _)| k == "id").unwrap().1.clone())
        .collect();
    assert_eq!(ids, ["x0", "x1"]);
    let data = entries[1]
        .1
        .iter()
        .find(|(k, _)| k == "data")
        .unwrap()
        .1
        .clone();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&data).unwrap(),
        json!({"n": "x1"})
    );
}

#[tokio::test]
async fn mqtt_messages_in_and_out() {
    let broker = Mosquitto::start();
    let port = broker.port();
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    reader(&c, &s, "r", "sensors").await;
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "min", "kind": "mqtt-source", "topic": "sensors",
            "config": {"host": "127.0.0.1", "port": port, "topics": ["sensors/#"]}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    // The source's subscription is in place once it runs: published after
    // that, QoS 1 messages reach it.
    wait_status(&c, &s, "min", WAIT, |v| v["status"]["state"] == "running").await;

    // An outside subscriber for what the sink writes (MQTT 5, binary mode).
    let (sub, mut subscribed) = rumqttc::v5::AsyncClient::new(
        rumqttc::v5::MqttOptions::new("outside-sub", "127.0.0.1", port),
        100,
    );
    sub.subscribe("out/#", rumqttc::v5::mqttbytes::QoS::AtLeastOnce)
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        use rumqttc::v5::mqttbytes::v5::Packet;
        while let Ok(ev) = subscribed.poll().await {
            match ev {
                rumqttc::v5::Event::Incoming(Packet::SubAck(_)) => {
                    let _ = tx.send(None);
                }
                rumqttc::v5::Event::Incoming(Packet::Publish(p)) => {
                    let props = p.properties.unwrap_or_default().user_properties;
                    let _ = tx.send(Some((
                        String::from_utf8_lossy(&p.topic).into_owned(),
                        p.payload,
                        props,
                    )));
                }
                _ => {}
            }
        }
    });
    assert_eq!(
        tokio::time::timeout(WAIT, rx.recv()).await.unwrap(),
        Some(None)
    );

    // In: three QoS 1 messages from an outside MQTT 3.1.1 client.
    let (pubc, mut publ) = rumqttc::AsyncClient::new(
        rumqttc::MqttOptions::new("outside-pub", "127.0.0.1", port),
        100,
    );
    for n in 0..3 {
        pubc.publish(
            format!("sensors/t{n}"),
            rumqttc::QoS::AtLeastOnce,
            false,
            json!({"t": n}).to_string(),
        )
        .await
        .unwrap();
    }
    let mut acked = 0;
    tokio::time::timeout(WAIT, async {
        while acked < 3 {
            if let rumqttc::Event::Incoming(rumqttc::Packet::PubAck(_)) = publ.poll().await.unwrap()
            {
                acked += 1;
            }
        }
    })
    .await
    .unwrap();
    let got = drain(&c, &s, "r", 3, WAIT).await;
    let mut subjects: Vec<(String, serde_json::Value)> = got
        .values()
        .map(|(e, _)| {
            (
                e["subject"].as_str().unwrap().to_string(),
                e["data"].clone(),
            )
        })
        .collect();
    subjects.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        subjects,
        [
            ("sensors/t0".to_string(), json!({"t": 0})),
            ("sensors/t1".to_string(), json!({"t": 1})),
            ("sensors/t2".to_string(), json!({"t": 2})),
        ]
    );

    // Out: events published to the mesh reach the outside subscriber.
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "mout", "kind": "mqtt-sink", "topic": "alerts",
            "config": {"host": "127.0.0.1", "port": port, "protocol": "5", "topic": "out/{type}"}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    publish(&c, &s, "alerts", &event("a1")).await;
    let (topic, payload, props) = tokio::time::timeout(WAIT, rx.recv())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(topic, "out/test.event");
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&payload).unwrap(),
        json!({"n": "a1"})
    );
    let id = props
        .iter()
        .find(|(k, _)| k == "id")
        .map(|(_, v)| v.as_str());
    assert_eq!(id, Some("a1"));
}

#[tokio::test]
async fn nats_messages_in_from_jetstream_and_out_to_core_subjects() {
    let nats = NatsServer::start();
    let nc = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(nc.clone());
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "ORDERS".into(),
        subjects: vec!["orders.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    for n in 0..3 {
        js.publish(format!("orders.eu.{n}"), json!({"o": n}).to_string().into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    reader(&c, &s, "r", "orders").await;
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "nin", "kind": "nats-source", "topic": "orders",
            "config": {"servers": [nats.url()], "subject": "orders.>", "mode": "jetstream", "stream": "ORDERS"}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let got = drain(&c, &s, "r", 3, WAIT).await;
    let ids: Vec<&String> = got.keys().collect();
    assert_eq!(ids, ["ORDERS-1", "ORDERS-2", "ORDERS-3"]);
    assert_eq!(got["ORDERS-2"].0["subject"], "orders.eu.1");
    assert_eq!(got["ORDERS-2"].0["data"], json!({"o": 1}));
    let v = wait_status(&c, &s, "nin", WAIT, |v| {
        v["status"]["position"] == json!({"stream_seq": 3})
    })
    .await;
    assert_eq!(v["status"]["position"], json!({"stream_seq": 3}), "{v}");

    // Out: core NATS, CloudEvents binary mode.
    let mut sub = nc.subscribe("alerts.>").await.unwrap();
    nc.flush().await.unwrap();
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "nout", "kind": "nats-sink", "topic": "alerts",
            "config": {"servers": [nats.url()], "subject": "alerts.{type}"}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    publish(&c, &s, "alerts", &event("a1")).await;
    let msg = tokio::time::timeout(WAIT, futures::StreamExt::next(&mut sub))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(msg.subject.as_str(), "alerts.test.event");
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&msg.payload).unwrap(),
        json!({"n": "a1"})
    );
    let headers = msg.headers.unwrap();
    assert_eq!(headers.get("ce-id").map(|v| v.as_str()), Some("a1"));
    assert_eq!(headers.get("ce-source").map(|v| v.as_str()), Some("/tests"));
}
