//! `redis-source` and `redis-sink` against a real `redis-server`: entries
//! written outside reach the source in order, uncommitted entries come back
//! and committed ones are acknowledged, the sink's entries read back
//! exactly, and failures map to the right error kind.

use std::time::Duration;

use eventmesh_connect::testutil::redis::RedisServer;
use eventmesh_connect::{ConnectorError, Kind, Record, SinkContext, Source, SourceContext};
use eventmesh_core::event::{Data, ExtValue};
use eventmesh_core::CloudEvent;
use redis::aio::MultiplexedConnection;
use redis::Value;
use serde_json::{json, Value as Json};

/// An entry's field-value pairs, in order.
type Fields = Vec<(String, Vec<u8>)>;

const WAIT: Duration = Duration::from_secs(15);

fn kind(name: &str) -> Kind {
    eventmesh_connect::kinds::redis::kinds()
        .into_iter()
        .find(|k| k.name() == name)
        .expect("the kind")
}

fn source_ctx(connector: &str, position: Option<Json>) -> SourceContext {
    SourceContext {
        connector: connector.into(),
        topic: "t".into(),
        position,
        cluster: "test".into(),
    }
}

fn sink_ctx() -> SinkContext {
    SinkContext {
        connector: "out".into(),
        topic: "t".into(),
        cluster: "test".into(),
    }
}

async fn open_source(config: Json, connector: &str, position: Option<Json>) -> Box<dyn Source> {
    tokio::time::timeout(
        WAIT,
        kind("redis-source").open_source(config, source_ctx(connector, position)),
    )
    .await
    .expect("open in time")
    .expect("the source opens")
}

async fn outside(url: &str) -> MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn xadd(conn: &mut MultiplexedConnection, stream: &str, fields: &[(&str, &[u8])]) -> String {
    let mut cmd = redis::cmd("XADD");
    cmd.arg(stream).arg("*");
    for (k, v) in fields {
        cmd.arg(*k).arg(*v);
    }
    cmd.query_async(conn).await.unwrap()
}

async fn pending(conn: &mut MultiplexedConnection, stream: &str, group: &str) -> i64 {
    let summary: Vec<Value> = redis::cmd("XPENDING")
        .arg(stream)
        .arg(group)
        .query_async(conn)
        .await
        .unwrap();
    match summary.first() {
        Some(Value::Int(n)) => *n,
        other => panic!("XPENDING summary {other:?}"),
    }
}

/// Entries `(id, [(field, value)])` of `XRANGE stream - +`.
async fn xrange(conn: &mut MultiplexedConnection, stream: &str) -> Vec<(String, Fields)> {
    let reply: Vec<(String, Fields)> = redis::cmd("XRANGE")
        .arg(stream)
        .arg("-")
        .arg("+")
        .query_async(conn)
        .await
        .unwrap();
    reply
}

/// Exactly `n` records from consecutive polls.
async fn collect(src: &mut Box<dyn Source>, n: usize) -> Vec<Record> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while out.len() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} of {n} records",
            out.len()
        );
        let got = tokio::time::timeout(WAIT, src.poll())
            .await
            .expect("poll in time")
            .expect("poll");
        out.extend(got);
    }
    assert_eq!(out.len(), n, "more records than expected: {out:?}");
    out
}

/// Two polls in a row return nothing.
async fn quiet(src: &mut Box<dyn Source>) {
    for _ in 0..2 {
        let got = tokio::time::timeout(WAIT, src.poll())
            .await
            .expect("poll in time")
            .expect("poll");
        assert!(got.is_empty(), "unexpected records {got:?}");
    }
}

fn source_config(server: &RedisServer, stream: &str) -> Json {
    json!({ "url": server.url(), "stream": stream })
}

fn pos(id: &str) -> Json {
    json!({ "id": id })
}

#[tokio::test]
async fn outside_entries_reach_the_source_in_order_and_resume_after_commit() {
    let server = RedisServer::start();
    let mut out = outside(&server.url()).await;
    let id1 = xadd(
        &mut out,
        "orders",
        &[("data", br#"{"n":1}"#), ("note", b"x")],
    )
    .await;
    let id2 = xadd(&mut out, "orders", &[("data", b"two")]).await;
    let id3 = xadd(&mut out, "orders", &[("a", b"x"), ("b", b"y")]).await;

    let mut src = open_source(source_config(&server, "orders"), "c1", None).await;
    assert_eq!(src.lag().await, Some(3));
    let got = collect(&mut src, 3).await;
    let ids: Vec<&str> = got.iter().map(|r| r.event.id.as_str()).collect();
    assert_eq!(
        ids,
        vec![
            format!("orders-{id1}"),
            format!("orders-{id2}"),
            format!("orders-{id3}")
        ]
    );
    let positions: Vec<&Json> = got.iter().map(|r| &r.position).collect();
    assert_eq!(positions, vec![&pos(&id1), &pos(&id2), &pos(&id3)]);
    assert_eq!(got[0].event.data, Data::Json(br#"{"n":1}"#.to_vec().into()));
    assert_eq!(got[1].event.data, Data::Text("two".into()));
    let Data::Json(obj) = &got[2].event.data else {
        panic!("{:?}", got[2].event.data)
    };
    assert_eq!(
        serde_json::from_slice::<Json>(obj).unwrap(),
        json!({"a": "x", "b": "y"})
    );
    for (r, id) in got.iter().zip([&id1, &id2, &id3]) {
        assert_eq!(r.event.source, "/connectors/c1");
        assert_eq!(r.event.ty, "redis.stream.entry");
        assert_eq!(
            r.event.extension("redisid"),
            Some(&ExtValue::Str(id.clone()))
        );
        assert_eq!(
            r.event.extension("redisstream"),
            Some(&ExtValue::Str("orders".into()))
        );
    }
    assert_eq!(src.lag().await, Some(0));
    assert_eq!(pending(&mut out, "orders", "eventmesh-c1").await, 3);

    src.commit(&pos(&id2)).await.unwrap();
    assert_eq!(pending(&mut out, "orders", "eventmesh-c1").await, 1);
    drop(src);

    // Reopened from the committed position: the third entry (pending, never
    // acknowledged) and then new ones; nothing before it.
    let mut src = open_source(source_config(&server, "orders"), "c1", Some(pos(&id2))).await;
    let again = collect(&mut src, 1).await;
    assert_eq!(again[0].event, got[2].event);
    assert_eq!(again[0].position, pos(&id3));
    let id4 = xadd(&mut out, "orders", &[("data", b"four")]).await;
    let fourth = collect(&mut src, 1).await;
    assert_eq!(fourth[0].event.id, format!("orders-{id4}"));
    assert_eq!(fourth[0].event.data, Data::Text("four".into()));
    src.commit(&pos(&id4)).await.unwrap();
    assert_eq!(pending(&mut out, "orders", "eventmesh-c1").await, 0);
    quiet(&mut src).await;
}

#[tokio::test]
async fn returned_but_uncommitted_entries_come_back_until_committed() {
    let server = RedisServer::start();
    let mut out = outside(&server.url()).await;
    let config = json!({
        "url": server.url(), "stream": "jobs", "group": "workers", "consumer": "w1"
    });
    let id1 = xadd(&mut out, "jobs", &[("data", b"one")]).await;
    let id2 = xadd(&mut out, "jobs", &[("data", b"two")]).await;

    let mut first = open_source(config.clone(), "c2", None).await;
    let got = collect(&mut first, 2).await;
    drop(first);
    assert_eq!(pending(&mut out, "jobs", "workers").await, 2);

    let mut second = open_source(config.clone(), "c2", None).await;
    let again = collect(&mut second, 2).await;
    assert_eq!(again, got);
    assert_eq!(again[0].event.id, format!("jobs-{id1}"));
    assert_eq!(again[1].event.id, format!("jobs-{id2}"));
    second.commit(&again[0].position).await.unwrap();
    assert_eq!(pending(&mut out, "jobs", "workers").await, 1);
    second.commit(&again[1].position).await.unwrap();
    assert_eq!(pending(&mut out, "jobs", "workers").await, 0);
    // Committing again, or an older position, is harmless.
    second.commit(&again[1].position).await.unwrap();
    drop(second);

    let mut third = open_source(config, "c2", Some(pos(&id2))).await;
    quiet(&mut third).await;
}

#[tokio::test]
async fn a_position_whose_ack_was_lost_is_not_read_again() {
    let server = RedisServer::start();
    let mut out = outside(&server.url()).await;
    let config = source_config(&server, "s");
    let _id1 = xadd(&mut out, "s", &[("data", b"1")]).await;
    let id2 = xadd(&mut out, "s", &[("data", b"2")]).await;
    let id3 = xadd(&mut out, "s", &[("data", b"3")]).await;
    let mut first = open_source(config.clone(), "c3", None).await;
    collect(&mut first, 3).await;
    drop(first);

    // The runtime stored the second position but the XACK never happened.
    let mut second = open_source(config, "c3", Some(pos(&id2))).await;
    let got = collect(&mut second, 1).await;
    assert_eq!(got[0].event.id, format!("s-{id3}"));
    assert_eq!(pending(&mut out, "s", "eventmesh-c3").await, 1);
    quiet(&mut second).await;
}

#[tokio::test]
async fn a_read_cut_off_while_waiting_is_not_stranded() {
    let server = RedisServer::start();
    let mut out = outside(&server.url()).await;
    let mut src = open_source(source_config(&server, "s"), "c4", None).await;
    // Dropped while blocked in XREADGROUP; the server still delivers the
    // next entry to that read.
    let mut watcher = outside(&server.url()).await;
    let blocked = async {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let info: String = redis::cmd("INFO")
                .arg("clients")
                .query_async(&mut watcher)
                .await
                .unwrap();
            if info.lines().any(|l| l.trim() == "blocked_clients:1") {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "never blocked");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::select! {
        polled = src.poll() => panic!("the poll should still be waiting: {polled:?}"),
        () = blocked => {}
    }
    let id = xadd(&mut out, "s", &[("data", b"late")]).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while pending(&mut out, "s", "eventmesh-c4").await != 1 {
        assert!(tokio::time::Instant::now() < deadline, "never delivered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let got = collect(&mut src, 1).await;
    assert_eq!(got[0].event.id, format!("s-{id}"));
    assert_eq!(got[0].event.data, Data::Text("late".into()));
    src.commit(&got[0].position).await.unwrap();
    assert_eq!(pending(&mut out, "s", "eventmesh-c4").await, 0);
    quiet(&mut src).await;
}

fn sample_events() -> Vec<CloudEvent> {
    let mut e1 = CloudEvent {
        id: "e1".into(),
        source: "/apps/a".into(),
        ty: "order.created".into(),
        datacontenttype: Some("application/json".into()),
        subject: Some("order/1".into()),
        time: Some("2024-05-01T10:00:00Z".into()),
        data: Data::Json(br#"{"total":12}"#.to_vec().into()),
        ..CloudEvent::default()
    };
    e1.set_extension("partitionkey", ExtValue::Str("k1".into()));
    let e2 = CloudEvent {
        id: "e2".into(),
        source: "/apps/a".into(),
        ty: "note".into(),
        datacontenttype: Some("text/plain".into()),
        data: Data::Text("hello".into()),
        ..CloudEvent::default()
    };
    let e3 = CloudEvent {
        id: "e3".into(),
        source: "/apps/b".into(),
        ty: "ping".into(),
        ..CloudEvent::default()
    };
    vec![e1, e2, e3]
}

fn pairs(list: &[(&str, &[u8])]) -> Fields {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.to_vec()))
        .collect()
}

#[tokio::test]
async fn the_sink_writes_entries_that_read_back_exactly() {
    let server = RedisServer::start();
    let mut out = outside(&server.url()).await;
    let events = sample_events();

    let mut sink = kind("redis-sink")
        .open_sink(json!({"url": server.url(), "stream": "out"}), sink_ctx())
        .await
        .unwrap();
    sink.write(&events).await.unwrap();
    sink.write(&[]).await.unwrap();
    let entries = xrange(&mut out, "out").await;
    let fields: Vec<Fields> = entries.iter().map(|(_, f)| f.clone()).collect();
    let expected = vec![
        pairs(&[
            ("id", b"e1"),
            ("source", b"/apps/a"),
            ("type", b"order.created"),
            ("datacontenttype", b"application/json"),
            ("subject", b"order/1"),
            ("time", b"2024-05-01T10:00:00Z"),
            ("ce_partitionkey", b"k1"),
            ("data", br#"{"total":12}"#),
        ]),
        pairs(&[
            ("id", b"e2"),
            ("source", b"/apps/a"),
            ("type", b"note"),
            ("datacontenttype", b"text/plain"),
            ("data", b"hello"),
        ]),
        pairs(&[("id", b"e3"), ("source", b"/apps/b"), ("type", b"ping")]),
    ];
    assert_eq!(fields, expected);

    // A replayed write appends again: streams have no deduplication.
    sink.write(&events[..1]).await.unwrap();
    let entries = xrange(&mut out, "out").await;
    assert_eq!(entries.len(), 4);
    assert_eq!(entries[3].1, expected[0]);

    // What the sink wrote, a source reads back as the same payloads.
    let mut src = open_source(source_config(&server, "out"), "back", None).await;
    let got = collect(&mut src, 4).await;
    assert_eq!(got[0].event.data, events[0].data);
    assert_eq!(got[1].event.data, events[1].data);
    assert_eq!(got[3].event.data, events[0].data);

    // The whole event as JSON in one field.
    let mut sink = kind("redis-sink")
        .open_sink(
            json!({"url": server.url(), "stream": "whole", "format": "json", "field": "event"}),
            sink_ctx(),
        )
        .await
        .unwrap();
    sink.write(&events).await.unwrap();
    let entries = xrange(&mut out, "whole").await;
    assert_eq!(entries.len(), 3);
    for ((_, fields), ev) in entries.iter().zip(&events) {
        assert_eq!(fields.len(), 1);
        assert_eq!(fields[0].0, "event");
        assert_eq!(&CloudEvent::from_json_slice(&fields[0].1).unwrap(), ev);
    }

    // Approximate trimming keeps the stream near maxlen.
    let mut sink = kind("redis-sink")
        .open_sink(
            json!({"url": server.url(), "stream": "trimmed", "maxlen": 10}),
            sink_ctx(),
        )
        .await
        .unwrap();
    let many: Vec<CloudEvent> = (0..500)
        .map(|i| CloudEvent {
            id: format!("m{i}"),
            ..events[2].clone()
        })
        .collect();
    for chunk in many.chunks(50) {
        sink.write(chunk).await.unwrap();
    }
    let len: u64 = redis::cmd("XLEN")
        .arg("trimmed")
        .query_async(&mut out)
        .await
        .unwrap();
    assert!((10..500).contains(&len), "XLEN {len}");
    let last = xrange(&mut out, "trimmed").await.pop().unwrap();
    assert_eq!(last.1[0], ("id".to_string(), b"m499".to_vec()));
}

fn unavailable<T>(r: Result<T, ConnectorError>) -> String {
    match r {
        Err(ConnectorError::Unavailable(m)) => m,
        Err(other) => panic!("expected Unavailable, got {other:?}"),
        Ok(_) => panic!("expected Unavailable, got Ok"),
    }
}

fn config_error<T>(r: Result<T, ConnectorError>) -> String {
    match r {
        Err(ConnectorError::Config(m)) => m,
        Err(other) => panic!("expected Config, got {other:?}"),
        Ok(_) => panic!("expected Config, got Ok"),
    }
}

#[tokio::test]
async fn a_server_that_is_down_gives_unavailable() {
    let mut server = RedisServer::start();
    let url = server.url();
    let mut out = outside(&url).await;
    xadd(&mut out, "s", &[("data", b"1")]).await;
    let mut src = open_source(source_config(&server, "s"), "c5", None).await;
    let got = collect(&mut src, 1).await;
    let mut sink = kind("redis-sink")
        .open_sink(json!({"url": url, "stream": "o"}), sink_ctx())
        .await
        .unwrap();

    server.kill();
    unavailable(
        kind("redis-source")
            .open_source(source_config(&server, "s"), source_ctx("c5", None))
            .await,
    );
    unavailable(
        kind("redis-sink")
            .open_sink(json!({"url": url, "stream": "o"}), sink_ctx())
            .await,
    );
    let polled = tokio::time::timeout(WAIT, src.poll())
        .await
        .expect("poll in time");
    unavailable(polled);
    let commit = tokio::time::timeout(WAIT, src.commit(&got[0].position))
        .await
        .expect("commit in time");
    unavailable(commit);
    let written = tokio::time::timeout(WAIT, sink.write(&sample_events()))
        .await
        .expect("write in time");
    unavailable(written);
    assert_eq!(src.lag().await, None);

    // Back up: the same source and sink carry on (the runtime would retry).
    server.restart();
    tokio::time::timeout(WAIT, src.commit(&got[0].position))
        .await
        .expect("commit in time")
        .unwrap();
    let mut out = outside(&url).await;
    assert_eq!(pending(&mut out, "s", "eventmesh-c5").await, 0);
    let id = xadd(&mut out, "s", &[("data", b"2")]).await;
    let next = collect(&mut src, 1).await;
    assert_eq!(next[0].event.id, format!("s-{id}"));
    sink.write(&sample_events()).await.unwrap();
    assert_eq!(xrange(&mut out, "o").await.len(), 3);
}

#[tokio::test]
async fn configs_that_cannot_work_give_config_errors() {
    let server = RedisServer::start_with_password("s3cret");
    let good = server.url();
    let port = server.port();
    let no_password = format!("redis://127.0.0.1:{port}/0");
    let wrong_password = format!("redis://:nope@127.0.0.1:{port}/0");
    for url in [&no_password, &wrong_password] {
        let msg = config_error(
            kind("redis-source")
                .open_source(json!({"url": url, "stream": "s"}), source_ctx("c6", None))
                .await,
        );
        assert!(!msg.contains("nope"), "{msg}");
        config_error(
            kind("redis-sink")
                .open_sink(json!({"url": url, "stream": "s"}), sink_ctx())
                .await,
        );
    }

    let mut out = outside(&good).await;
    let _: () = redis::cmd("SET")
        .arg("plain")
        .arg("v")
        .query_async(&mut out)
        .await
        .unwrap();
    let msg = config_error(
        kind("redis-source")
            .open_source(
                json!({"url": good, "stream": "plain"}),
                source_ctx("c6", None),
            )
            .await,
    );
    assert!(msg.contains("WRONGTYPE"), "{msg}");
    let msg = config_error(
        kind("redis-sink")
            .open_sink(json!({"url": good, "stream": "plain"}), sink_ctx())
            .await,
    );
    assert!(msg.contains("not a stream"), "{msg}");
    config_error(
        kind("redis-source")
            .open_source(
                json!({"url": "http://x", "stream": "s"}),
                source_ctx("c6", None),
            )
            .await,
    );

    // With the password both open.
    open_source(json!({"url": good, "stream": "s"}), "c6", None).await;
    kind("redis-sink")
        .open_sink(json!({"url": good, "stream": "s"}), sink_ctx())
        .await
        .unwrap();
}

#[test]
fn check_names_the_field_at_fault() {
    let source = kind("redis-source");
    let sink = kind("redis-sink");
    let url = "redis://127.0.0.1:6379/0";
    assert_eq!(source.check(&json!({"url": url, "stream": "s"})), Ok(()));
    assert_eq!(sink.check(&json!({"url": url, "stream": "s"})), Ok(()));

    let err = |k: &Kind, c: Json| k.check(&c).expect_err("rejected");
    for k in [&source, &sink] {
        let m = err(k, json!({"url": url, "stream": ""}));
        assert!(m.contains("stream must not be empty"), "{m}");
        let m = err(k, json!({"url": url, "stream": "s", "streem": "x"}));
        assert!(m.contains("unknown field `streem`"), "{m}");
        let m = err(k, json!({"url": "http://h/", "stream": "s"}));
        assert!(m.contains("url"), "{m}");
        let m = err(k, json!({"stream": "s"}));
        assert!(m.contains("missing field `url`"), "{m}");
    }
    let m = err(
        &source,
        json!({"url": url, "stream": "s", "start": "latest"}),
    );
    assert!(m.contains("start"), "{m}");
    let m = err(&source, json!({"url": url, "stream": "s", "batch": 0}));
    assert!(m.contains("batch"), "{m}");
    let m = err(&source, json!({"url": url, "stream": "s", "group": ""}));
    assert!(m.contains("group"), "{m}");
    let m = err(&source, json!({"url": url, "stream": "s", "consumer": ""}));
    assert!(m.contains("consumer"), "{m}");
    let m = err(&source, json!({"url": url, "stream": "s", "field": ""}));
    assert!(m.contains("field"), "{m}");
    assert_eq!(
        source.check(&json!({"url": url, "stream": "s", "start": "$", "field": null})),
        Ok(())
    );
    assert_eq!(
        source.check(&json!({"url": url, "stream": "s", "start": "1700000000000-5"})),
        Ok(())
    );
    let m = err(&sink, json!({"url": url, "stream": "s", "field": "type"}));
    assert!(m.contains("field"), "{m}");
    let m = err(&sink, json!({"url": url, "stream": "s", "format": "xml"}));
    assert!(m.contains("format") || m.contains("xml"), "{m}");
    let m = err(&sink, json!({"url": url, "stream": "s", "maxlen": 0}));
    assert!(m.contains("maxlen"), "{m}");
    assert_eq!(
        sink.check(&json!({"url": url, "stream": "s", "format": "json", "field": "type"})),
        Ok(())
    );
    let schema = source.schema().to_string();
    assert!(schema.contains("consumer group"), "{schema}");
}
