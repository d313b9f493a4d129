//! `nats-source` and `nats-sink` against a real nats-server (2.12+, see
//! `testutil::nats`): core subscriptions and queue groups, CloudEvents
//! through the NATS binding, JetStream acknowledgement on commit and
//! redelivery, `Nats-Msg-Id` deduplication, and the errors of configs and
//! servers that cannot work.

use std::time::Duration;

use async_nats::jetstream;
use bytes::Bytes;
use eventmesh_connect::testutil::nats::NatsServer;
use eventmesh_connect::{
    builtin, event, ConnectorError, Kind, Record, Sink, SinkContext, Source, SourceContext,
};
use eventmesh_core::event::{Data, ExtValue};
use eventmesh_core::CloudEvent;
use futures::StreamExt;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(20);

fn kind(name: &str) -> Kind {
    builtin()
        .into_iter()
        .find(|k| k.name() == name)
        .expect("a built-in kind")
}

async fn source(config: Value, connector: &str, position: Option<Value>) -> Box<dyn Source> {
    let ctx = SourceContext {
        connector: connector.into(),
        topic: "t".into(),
        position,
        cluster: "test".into(),
    };
    tokio::time::timeout(WAIT, kind("nats-source").open_source(config, ctx))
        .await
        .expect("open in time")
        .expect("the source opens")
}

async fn sink(config: Value) -> Box<dyn Sink> {
    let ctx = SinkContext {
        connector: "out".into(),
        topic: "t".into(),
        cluster: "test".into(),
    };
    tokio::time::timeout(WAIT, kind("nats-sink").open_sink(config, ctx))
        .await
        .expect("open in time")
        .expect("the sink opens")
}

/// Polls until `n` records came (panics past `WAIT`); more than `n` fail.
async fn poll_n(src: &mut Box<dyn Source>, n: usize) -> Vec<Record> {
    let mut out = Vec::new();
    tokio::time::timeout(WAIT, async {
        while out.len() < n {
            out.extend(src.poll().await.expect("poll"));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{n} records within {WAIT:?}; got {out:?}"));
    assert_eq!(out.len(), n, "{out:?}");
    out
}

/// Every record a source returns during `period`.
async fn poll_for(src: &mut Box<dyn Source>, period: Duration) -> Vec<Record> {
    let end = tokio::time::Instant::now() + period;
    let mut out = Vec::new();
    while tokio::time::Instant::now() < end {
        let got = tokio::time::timeout(WAIT, src.poll())
            .await
            .expect("poll in time");
        out.extend(got.expect("poll"));
    }
    out
}

async fn client(server: &NatsServer) -> async_nats::Client {
    tokio::time::timeout(WAIT, async_nats::connect(server.url()))
        .await
        .expect("connect in time")
        .expect("connect")
}

fn data(r: &Record) -> &Data {
    &r.event.data
}

#[tokio::test]
async fn core_messages_reach_the_source_in_order_with_their_data_and_subject() {
    let server = NatsServer::start();
    let config = json!({"servers": [server.url()], "subject": "orders.>"});
    let mut src = source(config.clone(), "core-in", None).await;
    let nc = client(&server).await;
    let sent: [(&str, &[u8]); 4] = [
        ("orders.eu", br#"{"n":1}"#),
        ("orders.us", b"plain text"),
        ("orders.eu.late", &[0xff, 0x00, 0xfe]),
        ("orders.eu", b""),
    ];
    for (subject, body) in sent {
        nc.publish(subject, Bytes::from_static(body)).await.unwrap();
    }
    nc.publish("other.subject", "not read".into())
        .await
        .unwrap();
    nc.flush().await.unwrap();

    let records = poll_n(&mut src, 4).await;
    let subjects: Vec<_> = records
        .iter()
        .map(|r| r.event.subject.as_deref().unwrap())
        .collect();
    assert_eq!(
        subjects,
        ["orders.eu", "orders.us", "orders.eu.late", "orders.eu"]
    );
    assert_eq!(
        data(&records[0]),
        &Data::Json(Bytes::from_static(br#"{"n":1}"#))
    );
    assert_eq!(data(&records[1]), &Data::Text("plain text".into()));
    assert_eq!(
        data(&records[2]),
        &Data::Binary(Bytes::from_static(&[0xff, 0x00, 0xfe]))
    );
    assert_eq!(data(&records[3]), &Data::None);
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.position, json!({"seq": i + 1}));
        assert_eq!(r.event.source, "/connectors/core-in");
        assert_eq!(r.event.ty, "nats.message");
        assert!(
            r.event.id.ends_with(&format!("-{}", i + 1)),
            "{}",
            r.event.id
        );
    }
    let prefix = records[0].event.id.rsplit_once('-').unwrap().0.to_string();
    src.commit(&records[3].position).await.unwrap();
    assert!(poll_for(&mut src, Duration::from_millis(1200))
        .await
        .is_empty());
    drop(src);

    // Core NATS keeps nothing for a subscriber that is gone.
    nc.publish("orders.eu", "while stopped".into())
        .await
        .unwrap();
    nc.flush().await.unwrap();
    let mut src = source(config, "core-in", Some(json!({"seq": 4}))).await;
    nc.publish("orders.eu", "after".into()).await.unwrap();
    nc.publish("orders.us", "again".into()).await.unwrap();
    nc.flush().await.unwrap();
    let records = poll_n(&mut src, 2).await;
    assert_eq!(data(&records[0]), &Data::Text("after".into()));
    assert_eq!(data(&records[1]), &Data::Text("again".into()));
    assert_eq!(records[0].position, json!({"seq": 5}));
    assert_eq!(records[1].position, json!({"seq": 6}));
    // A reopened source makes new ids.
    assert!(!records[0].event.id.starts_with(&prefix));
}

#[tokio::test]
async fn a_queue_group_shares_the_messages() {
    let server = NatsServer::start();
    let config = json!({"servers": [server.url()], "subject": "jobs.*", "queue": "workers"});
    let mut a = source(config.clone(), "q", None).await;
    let mut b = source(config, "q", None).await;
    let nc = client(&server).await;
    for i in 0..20 {
        nc.publish(format!("jobs.{i}"), i.to_string().into())
            .await
            .unwrap();
    }
    nc.flush().await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(WAIT, async {
        while got.len() < 20 {
            got.extend(a.poll().await.unwrap());
            got.extend(b.poll().await.unwrap());
        }
    })
    .await
    .expect("20 messages across the group");
    let mut numbers: Vec<u32> = got
        .iter()
        .map(|r| {
            String::from_utf8_lossy(r.event.data.as_bytes())
                .parse()
                .unwrap()
        })
        .collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (0..20).collect::<Vec<_>>());
}

fn sample_events() -> Vec<CloudEvent> {
    let mut a = event(
        "orders",
        "e-1",
        "order.created",
        Data::Json(Bytes::from_static(br#"{"id":1}"#)),
    );
    a.subject = Some("eu west".into());
    a.set_extension("tenant", ExtValue::Str("acme".into()));
    let mut b = event(
        "orders",
        "e 2",
        "order.paid",
        Data::Text("paid in full".into()),
    );
    b.time = Some("2024-05-01T10:00:00Z".into());
    let c = event(
        "orders",
        "e-3",
        "order.blob",
        Data::Binary(Bytes::from_static(&[1, 2, 0, 255])),
    );
    vec![a, b, c]
}

#[tokio::test]
async fn cloudevents_keep_their_attributes_from_sink_to_source() {
    let server = NatsServer::start();
    let nc = client(&server).await;
    let mut raw = nc.subscribe("ce.>").await.unwrap();
    let mut src = source(
        json!({"servers": [server.url()], "subject": "ce.>"}),
        "ce-in",
        None,
    )
    .await;
    let events = sample_events();
    for format in ["binary", "structured"] {
        let mut out = sink(json!({
            "servers": [server.url()], "subject": "ce.{type}", "format": format
        }))
        .await;
        tokio::time::timeout(WAIT, out.write(&events))
            .await
            .unwrap()
            .unwrap();
        let records = poll_n(&mut src, 3).await;
        let back: Vec<CloudEvent> = records.into_iter().map(|r| r.event).collect();
        assert_eq!(back, events, "{format}");

        // What an outside subscriber sees.
        let m = tokio::time::timeout(WAIT, raw.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.subject.as_str(), "ce.order.created");
        let h = m.headers.clone().unwrap_or_default();
        let get = |n: &str| h.get(n).map(|v| v.as_str().to_string());
        if format == "binary" {
            assert_eq!(get("ce-id").as_deref(), Some("e-1"));
            assert_eq!(get("ce-source").as_deref(), Some("/connectors/orders"));
            assert_eq!(get("ce-type").as_deref(), Some("order.created"));
            assert_eq!(get("ce-specversion").as_deref(), Some("1.0"));
            assert_eq!(get("ce-subject").as_deref(), Some("eu%20west"));
            assert_eq!(get("ce-tenant").as_deref(), Some("acme"));
            assert_eq!(get("Content-Type").as_deref(), Some("application/json"));
            assert_eq!(&m.payload[..], br#"{"id":1}"#);
        } else {
            assert_eq!(
                get("Content-Type").as_deref(),
                Some("application/cloudevents+json")
            );
            assert_eq!(CloudEvent::from_json_slice(&m.payload).unwrap(), events[0]);
        }
        for subject in ["ce.order.paid", "ce.order.blob"] {
            let m = tokio::time::timeout(WAIT, raw.next())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(m.subject.as_str(), subject);
        }
    }
}

async fn create_stream(js: &jetstream::Context, name: &str, subject: &str) {
    js.create_stream(jetstream::stream::Config {
        name: name.into(),
        subjects: vec![subject.into()],
        ..Default::default()
    })
    .await
    .expect("create the stream");
}

#[tokio::test]
async fn jetstream_redelivers_what_was_not_committed_and_only_that() {
    let server = NatsServer::start();
    let js = jetstream::new(client(&server).await);
    create_stream(&js, "ORDERS", "orders.>").await;
    for i in 1..=3 {
        js.publish(format!("orders.{i}"), format!("m{i}").into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let config = json!({
        "servers": [server.url()], "subject": "orders.>", "mode": "jetstream",
        "stream": "ORDERS", "ack_wait_ms": 1000
    });
    let ids = |rs: &[Record]| rs.iter().map(|r| r.event.id.clone()).collect::<Vec<_>>();

    let mut first = source(config.clone(), "js-in", None).await;
    let read = poll_n(&mut first, 3).await;
    assert_eq!(ids(&read), ["ORDERS-1", "ORDERS-2", "ORDERS-3"]);
    for (i, r) in read.iter().enumerate() {
        assert_eq!(r.position, json!({"stream_seq": i + 1}));
        assert_eq!(r.event.data, Data::Text(format!("m{}", i + 1)));
        assert_eq!(
            r.event.subject.as_deref(),
            Some(format!("orders.{}", i + 1).as_str())
        );
    }
    drop(first); // no commit: a crash

    let mut second = source(config.clone(), "js-in", None).await;
    let again = poll_n(&mut second, 3).await;
    // Redeliveries come in no promised order.
    let mut sorted = again.clone();
    sorted.sort_by_key(|r| r.position["stream_seq"].as_u64());
    assert_eq!(
        sorted, read,
        "the same events, ids included, after ack_wait"
    );
    // Acknowledges the first two returned, whatever their sequences.
    second.commit(&again[1].position).await.unwrap();
    drop(second);

    let mut third = source(config.clone(), "js-in", None).await;
    let rest = poll_n(&mut third, 1).await;
    assert_eq!(rest[0], again[2]);
    // Held past twice the ack wait: neither returned again nor anything else.
    assert!(poll_for(&mut third, Duration::from_millis(2500))
        .await
        .is_empty());
    third.commit(&rest[0].position).await.unwrap();
    drop(third);

    js.publish("orders.4", "m4".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let mut fourth = source(config, "js-in", Some(json!({"stream_seq": 3}))).await;
    let new = poll_n(&mut fourth, 1).await;
    assert_eq!(ids(&new), ["ORDERS-4"]);
    fourth.commit(&new[0].position).await.unwrap();
    assert!(poll_for(&mut fourth, Duration::from_millis(2500))
        .await
        .is_empty());
    assert_eq!(fourth.lag().await, Some(0));

    let stream = js.get_stream("ORDERS").await.unwrap();
    let info = stream.consumer_info("eventmesh-js-in").await.unwrap();
    assert_eq!(info.num_ack_pending, 0);
    assert_eq!(info.ack_floor.stream_sequence, 4);
    assert_eq!(
        info.config.ack_policy,
        jetstream::consumer::AckPolicy::Explicit
    );
    assert_eq!(info.config.ack_wait, Duration::from_secs(1));
}

#[tokio::test]
async fn a_full_ack_window_waits_for_commits() {
    let server = NatsServer::start();
    let js = jetstream::new(client(&server).await);
    create_stream(&js, "W", "w.>").await;
    // A durable made beforehand keeps its own settings (here at most two
    // messages unacknowledged).
    let stream = js.get_stream("W").await.unwrap();
    stream
        .create_consumer(jetstream::consumer::pull::Config {
            durable_name: Some("win".into()),
            max_ack_pending: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    for i in 1..=5 {
        js.publish(format!("w.{i}"), i.to_string().into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let config = json!({
        "servers": [server.url()], "subject": "w.>", "mode": "jetstream",
        "stream": "W", "durable": "win"
    });
    let mut src = source(config, "w", None).await;
    let first = poll_n(&mut src, 2).await;
    assert!(poll_for(&mut src, Duration::from_millis(1500))
        .await
        .is_empty());
    src.commit(&first[1].position).await.unwrap();
    let next = poll_n(&mut src, 2).await;
    let ids: Vec<_> = first
        .iter()
        .chain(&next)
        .map(|r| r.event.id.as_str())
        .collect();
    assert_eq!(ids, ["W-1", "W-2", "W-3", "W-4"]);
    let info = stream.consumer_info("win").await.unwrap();
    assert_eq!(info.config.max_ack_pending, 2);
    assert_eq!(info.config.ack_wait, Duration::from_secs(60));
}

#[tokio::test]
async fn jetstream_streams_must_exist_unless_created() {
    let server = NatsServer::start();
    let base = json!({
        "servers": [server.url()], "subject": "new.>", "mode": "jetstream", "stream": "NEW"
    });
    let ctx = SourceContext {
        connector: "x".into(),
        topic: "t".into(),
        position: None,
        cluster: "test".into(),
    };
    let err = tokio::time::timeout(WAIT, kind("nats-source").open_source(base.clone(), ctx))
        .await
        .unwrap()
        .err()
        .expect("a missing stream fails");
    assert_eq!(
        err,
        ConnectorError::Config(
            "JetStream stream NEW does not exist (create it, or set create_stream)".into()
        )
    );
    let mut config = base;
    config["create_stream"] = json!(true);
    config["durable"] = json!("reader");
    let mut src = source(config, "x", None).await;
    let js = jetstream::new(client(&server).await);
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Content-Type", "application/json");
    js.publish_with_headers("new.a", headers, r#"[1,2]"#.into())
        .await
        .unwrap()
        .await
        .unwrap();
    let r = poll_n(&mut src, 1).await;
    assert_eq!(r[0].event.id, "NEW-1");
    assert_eq!(r[0].event.data, Data::Json(Bytes::from_static(b"[1,2]")));
    assert_eq!(
        r[0].event.datacontenttype.as_deref(),
        Some("application/json")
    );
    js.get_stream("NEW")
        .await
        .unwrap()
        .consumer_info("reader")
        .await
        .unwrap();
}

#[tokio::test]
async fn a_jetstream_sink_stores_a_replayed_write_once() {
    let server = NatsServer::start();
    let js = jetstream::new(client(&server).await);
    create_stream(&js, "OUT", "out.>").await;
    let mut out = sink(json!({
        "servers": [server.url()], "subject": "out.{type}", "mode": "jetstream"
    }))
    .await;
    let events = sample_events();
    tokio::time::timeout(WAIT, out.write(&events))
        .await
        .unwrap()
        .unwrap();
    tokio::time::timeout(WAIT, out.write(&events))
        .await
        .unwrap()
        .unwrap();
    tokio::time::timeout(WAIT, out.write(&events[1..2]))
        .await
        .unwrap()
        .unwrap();
    let mut stream = js.get_stream("OUT").await.unwrap();
    assert_eq!(stream.info().await.unwrap().state.messages, 3);
    for (seq, ev) in (1..).zip(&events) {
        let m = stream.get_raw_message(seq).await.unwrap();
        assert_eq!(m.subject.as_str(), format!("out.{}", ev.ty));
        let id = m.headers.get("Nats-Msg-Id").unwrap().as_str().to_string();
        assert_eq!(
            id,
            format!("/connectors/orders/{}", ev.id.replace(' ', "%20"))
        );
        assert_eq!(m.payload, Bytes::copy_from_slice(ev.data.as_bytes()));
    }

    // No stream captures the subject: the write fails, to be retried.
    let mut nowhere = sink(json!({
        "servers": [server.url()], "subject": "nowhere.{type}", "mode": "jetstream"
    }))
    .await;
    let err = tokio::time::timeout(WAIT, nowhere.write(&events[..1]))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(
        err,
        ConnectorError::Unavailable(
            "publish to nowhere.order.created: no stream found for given subject".into()
        )
    );
}

#[tokio::test]
async fn a_server_that_is_down_is_unavailable() {
    let dead = format!(
        "nats://127.0.0.1:{}",
        eventmesh_connect::testutil::free_port()
    );
    let ctx = || SourceContext {
        connector: "d".into(),
        topic: "t".into(),
        position: None,
        cluster: "test".into(),
    };
    for config in [
        json!({"servers": [dead], "subject": "a"}),
        json!({"servers": [dead], "subject": "a", "mode": "jetstream", "stream": "S"}),
    ] {
        let err = tokio::time::timeout(WAIT, kind("nats-source").open_source(config, ctx()))
            .await
            .unwrap()
            .err()
            .expect("no server");
        assert!(matches!(err, ConnectorError::Unavailable(_)), "{err:?}");
    }
    let sink_ctx = SinkContext {
        connector: "d".into(),
        topic: "t".into(),
        cluster: "test".into(),
    };
    let err = tokio::time::timeout(
        WAIT,
        kind("nats-sink").open_sink(json!({"servers": [dead], "subject": "a"}), sink_ctx),
    )
    .await
    .unwrap()
    .err()
    .expect("no server");
    assert!(matches!(err, ConnectorError::Unavailable(_)), "{err:?}");

    // A server that goes away under open connectors.
    let mut server = NatsServer::start();
    let js = jetstream::new(client(&server).await);
    create_stream(&js, "S", "s.>").await;
    let mut out =
        sink(json!({"servers": [server.url()], "subject": "s.x", "timeout_ms": 1000})).await;
    let mut src = source(
        json!({"servers": [server.url()], "subject": "s.>", "mode": "jetstream", "stream": "S"}),
        "d",
        None,
    )
    .await;
    let events = sample_events();
    out.write(&events).await.unwrap();
    server.kill();
    // A write may still be flushed into the dead connection's socket (core
    // NATS is at most once); the next ones fail until the server is back.
    let err = tokio::time::timeout(WAIT, async {
        loop {
            match out.write(&events).await {
                Ok(()) => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(e) => return e,
            }
        }
    })
    .await
    .expect("a write fails");
    assert!(matches!(err, ConnectorError::Unavailable(_)), "{err:?}");
    let err = tokio::time::timeout(WAIT, src.poll())
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, ConnectorError::Unavailable(_)), "{err:?}");

    // Back again: the client reconnects by itself.
    server.restart();
    tokio::time::timeout(Duration::from_secs(30), async {
        while out.write(&events).await.is_err() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("writes succeed again");
}

#[test]
fn configs_that_cannot_work_are_refused_naming_the_field() {
    let source = kind("nats-source");
    let sink = kind("nats-sink");
    let url = "nats://127.0.0.1:4222";
    let refused = |k: &Kind, c: Value| k.check(&c).expect_err("refused");

    assert_eq!(
        source.check(&json!({"servers": [url], "subject": "a.>"})),
        Ok(())
    );
    assert_eq!(
        source
            .check(&json!({"servers": [url], "subject": "a", "mode": "jetstream", "stream": "S"})),
        Ok(())
    );
    assert_eq!(
        sink.check(&json!({"servers": [url], "subject": "a.{type}"})),
        Ok(())
    );

    assert_eq!(
        refused(&source, json!({"servers": [url], "subject": ""})),
        "config: subject: must not be empty"
    );
    let e = refused(
        &source,
        json!({"servers": [url], "subject": "a", "subjekt": "b"}),
    );
    assert!(e.contains("unknown field `subjekt`"), "{e}");
    assert_eq!(
        refused(
            &source,
            json!({"servers": [url], "subject": "a", "mode": "jetstream"})
        ),
        "config: stream is required in mode jetstream"
    );
    assert_eq!(
        refused(
            &source,
            json!({"servers": [url], "subject": "a", "stream": "S"})
        ),
        "config: stream is for mode jetstream"
    );
    assert_eq!(
        refused(
            &source,
            json!({"servers": [url], "subject": "a", "mode": "jetstream", "stream": "S", "queue": "q"})
        ),
        "config: queue is for mode core (a durable is shared by its readers)"
    );
    assert_eq!(
        refused(
            &source,
            json!({"servers": [url], "subject": "a", "mode": "jetstream", "stream": "S.1"})
        ),
        "config: stream \"S.1\" must be non-empty, without whitespace, '.', '*' or '>'"
    );
    assert_eq!(
        refused(&source, json!({"servers": ["http://x"], "subject": "a"})),
        "config: servers[0] \"http://x\": invalid scheme for NATS server URL: http"
    );
    let e = refused(
        &source,
        json!({"servers": [url], "subject": "a", "mode": "kafka"}),
    );
    assert!(e.contains("unknown variant `kafka`"), "{e}");

    assert_eq!(
        refused(&sink, json!({"servers": [url], "subject": ""})),
        "config: subject: must not be empty"
    );
    assert_eq!(
        refused(&sink, json!({"servers": [url], "subject": "a.>"})),
        "config: subject: \"a.>\" contains a wildcard"
    );
    assert_eq!(
        refused(&sink, json!({"servers": [url], "subject": "a.{id}"})),
        "config: subject: unknown placeholder \"{id}\"; use {subject} or {type}"
    );
    let e = refused(
        &sink,
        json!({"servers": [url], "subject": "a", "formt": "binary"}),
    );
    assert!(e.contains("unknown field `formt`"), "{e}");
    let e = refused(
        &sink,
        json!({"servers": [url], "subject": "a", "stream": "S"}),
    );
    assert!(e.contains("unknown field `stream`"), "{e}");
    assert_eq!(
        refused(
            &sink,
            json!({"servers": [url], "subject": "a", "user": "u"})
        ),
        "config: user needs a password"
    );
}
