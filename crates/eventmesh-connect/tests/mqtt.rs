//! `mqtt-source` and `mqtt-sink` against a real mosquitto, for MQTT 3.1.1
//! and 5, with outside clients (plain `rumqttc`) on the other end.

use std::time::Duration;

use bytes::Bytes;
use eventmesh_connect::testutil::free_port;
use eventmesh_connect::testutil::mqtt::Mosquitto;
use eventmesh_connect::{
    builtin, ConnectorError, Kind, Record, Sink, SinkContext, Source, SourceContext,
};
use eventmesh_core::event::{Data, ExtValue};
use eventmesh_core::CloudEvent;
use rumqttc::v5::mqttbytes::v5 as p5;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(20);

fn kind(name: &str) -> Kind {
    builtin()
        .into_iter()
        .find(|k| k.name() == name)
        .expect("a built-in kind")
}

async fn source(
    config: Value,
    connector: &str,
    position: Option<Value>,
) -> Result<Box<dyn Source>, ConnectorError> {
    let ctx = SourceContext {
        connector: connector.into(),
        topic: "t".into(),
        position,
        cluster: "test".into(),
    };
    kind("mqtt-source").open_source(config, ctx).await
}

async fn sink(config: Value, connector: &str) -> Result<Box<dyn Sink>, ConnectorError> {
    let ctx = SinkContext {
        connector: connector.into(),
        topic: "t".into(),
        cluster: "test".into(),
    };
    kind("mqtt-sink").open_sink(config, ctx).await
}

/// Polls until `n` records came, failing after [`WAIT`].
async fn take(src: &mut Box<dyn Source>, n: usize) -> Vec<Record> {
    let mut got = Vec::new();
    timeout(WAIT, async {
        while got.len() < n {
            got.extend(src.poll().await.expect("poll"));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{} of {n} records within {WAIT:?}", got.len()));
    assert_eq!(got.len(), n, "exactly {n} records");
    got
}

/// Asserts that the next poll ends in quiet.
async fn quiet(src: &mut Box<dyn Source>) {
    let got = timeout(WAIT, src.poll())
        .await
        .expect("poll returns")
        .expect("poll");
    let ids: Vec<_> = got.iter().map(|r| r.event.id.clone()).collect();
    assert!(ids.is_empty(), "nothing more, got {ids:?}");
}

/// A message from an outside client.
#[derive(Clone, Default)]
struct Out {
    topic: &'static str,
    payload: Vec<u8>,
    content_type: Option<&'static str>,
    properties: Vec<(&'static str, &'static str)>,
}

fn out(topic: &'static str, payload: &[u8]) -> Out {
    Out {
        topic,
        payload: payload.to_vec(),
        ..Out::default()
    }
}

/// Publishes `msgs` at QoS 1 from an outside client and waits for every
/// PUBACK.
async fn publish(port: u16, v5: bool, msgs: &[Out]) {
    let id = format!("outside-pub-{}", free_port());
    let mut acked = 0;
    if v5 {
        let o = rumqttc::v5::MqttOptions::new(id, "127.0.0.1", port);
        let (c, mut l) = rumqttc::v5::AsyncClient::new(o, 100);
        for m in msgs {
            let props = p5::PublishProperties {
                content_type: m.content_type.map(str::to_string),
                user_properties: m
                    .properties
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Default::default()
            };
            let qos = rumqttc::v5::mqttbytes::QoS::AtLeastOnce;
            c.publish_with_properties(m.topic, qos, false, m.payload.clone(), props)
                .await
                .expect("queued");
        }
        timeout(WAIT, async {
            while acked < msgs.len() {
                if let rumqttc::v5::Event::Incoming(p5::Packet::PubAck(_)) =
                    l.poll().await.expect("outside connection")
                {
                    acked += 1;
                }
            }
        })
        .await
        .expect("PUBACKs");
    } else {
        let o = rumqttc::MqttOptions::new(id, "127.0.0.1", port);
        let (c, mut l) = rumqttc::AsyncClient::new(o, 100);
        for m in msgs {
            c.publish(m.topic, rumqttc::QoS::AtLeastOnce, false, m.payload.clone())
                .await
                .expect("queued");
        }
        timeout(WAIT, async {
            while acked < msgs.len() {
                if let rumqttc::Event::Incoming(rumqttc::Packet::PubAck(_)) =
                    l.poll().await.expect("outside connection")
                {
                    acked += 1;
                }
            }
        })
        .await
        .expect("PUBACKs");
    }
}

/// What an outside subscriber received.
#[derive(Debug, PartialEq)]
struct Got {
    topic: String,
    payload: Bytes,
    content_type: Option<String>,
    properties: Vec<(String, String)>,
}

/// An outside subscriber to `filter`, subscribed once this returns.
async fn subscriber(
    port: u16,
    v5: bool,
    filter: &str,
) -> (mpsc::UnboundedReceiver<Got>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let (ready_tx, ready) = tokio::sync::oneshot::channel();
    let id = format!("outside-sub-{}", free_port());
    let filter = filter.to_string();
    let task = if v5 {
        let (c, mut l) = rumqttc::v5::AsyncClient::new(
            rumqttc::v5::MqttOptions::new(id, "127.0.0.1", port),
            100,
        );
        tokio::spawn(async move {
            c.subscribe(filter, rumqttc::v5::mqttbytes::QoS::AtLeastOnce)
                .await
                .expect("subscribe");
            let mut ready = Some(ready_tx);
            while let Ok(ev) = l.poll().await {
                match ev {
                    rumqttc::v5::Event::Incoming(p5::Packet::SubAck(_)) => {
                        ready.take().map(|r| r.send(()));
                    }
                    rumqttc::v5::Event::Incoming(p5::Packet::Publish(p)) => {
                        let props = p.properties.unwrap_or_default();
                        let _ = tx.send(Got {
                            topic: String::from_utf8_lossy(&p.topic).into_owned(),
                            payload: p.payload,
                            content_type: props.content_type,
                            properties: props.user_properties,
                        });
                    }
                    _ => {}
                }
            }
        })
    } else {
        let (c, mut l) =
            rumqttc::AsyncClient::new(rumqttc::MqttOptions::new(id, "127.0.0.1", port), 100);
        tokio::spawn(async move {
            c.subscribe(filter, rumqttc::QoS::AtLeastOnce)
                .await
                .expect("subscribe");
            let mut ready = Some(ready_tx);
            while let Ok(ev) = l.poll().await {
                match ev {
                    rumqttc::Event::Incoming(rumqttc::Packet::SubAck(_)) => {
                        ready.take().map(|r| r.send(()));
                    }
                    rumqttc::Event::Incoming(rumqttc::Packet::Publish(p)) => {
                        let _ = tx.send(Got {
                            topic: p.topic,
                            payload: p.payload,
                            content_type: None,
                            properties: vec![],
                        });
                    }
                    _ => {}
                }
            }
        })
    };
    timeout(WAIT, ready)
        .await
        .expect("SUBACK in time")
        .expect("subscribed");
    (rx, task)
}

fn proto(v5: bool) -> &'static str {
    if v5 {
        "5"
    } else {
        "3.1.1"
    }
}

fn source_config(port: u16, v5: bool, topics: &[&str]) -> Value {
    json!({"host": "127.0.0.1", "port": port, "protocol": proto(v5), "topics": topics, "keep_alive_secs": 5})
}

/// `<session>-<seq>-<12 hex digits>`.
fn plain_id(id: &str, session: &str, seq: u64) {
    let rest = id
        .strip_prefix(&format!("{session}-{seq}-"))
        .unwrap_or_else(|| panic!("{id} is {session}-{seq}-…"));
    assert!(
        rest.len() == 12 && rest.bytes().all(|b| b.is_ascii_hexdigit()),
        "{id}"
    );
}

async fn reads_in_order(v5: bool) {
    let broker = Mosquitto::start();
    let mut src = source(
        source_config(broker.port(), v5, &["dev/+/temp", "cmd/#"]),
        "reader",
        None,
    )
    .await
    .expect("open");
    let ce = br#"{"specversion":"1.0","id":"ce-1","source":"/devices/9","type":"reading","data":{"t":3}}"#;
    let mut msgs = vec![
        out("dev/1/temp", br#"{"t":1}"#),
        out("other/topic", b"not subscribed"),
        out("dev/2/temp", b"hello"),
        out("cmd/x", &[0xff, 0x00, 0x01]),
        out("cmd/ce", ce),
    ];
    if v5 {
        msgs.push(Out {
            content_type: Some("text/plain"),
            properties: vec![
                ("specversion", "1.0"),
                ("id", "ce-2"),
                ("source", "/devices/7"),
                ("type", "reading"),
                ("unit", "c"),
            ],
            ..out("cmd/bin", b"21")
        });
        msgs.push(Out {
            content_type: Some("text/plain"),
            ..out("cmd/text", b"42")
        });
    }
    publish(broker.port(), v5, &msgs).await;
    let recs = take(&mut src, msgs.len() - 1).await;
    let session = recs[0].position["session"]
        .as_str()
        .expect("a session")
        .to_string();
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r.position["seq"], json!(i + 1));
        assert_eq!(r.position["session"], json!(session));
    }
    let subjects: Vec<_> = recs
        .iter()
        .map(|r| r.event.subject.clone().unwrap_or_default())
        .collect();
    let mut want = vec!["dev/1/temp", "dev/2/temp", "cmd/x", "cmd/ce"];
    if v5 {
        want.extend(["cmd/bin", "cmd/text"]);
    }
    assert_eq!(subjects, want);
    for (i, r) in recs[..3].iter().enumerate() {
        plain_id(&r.event.id, &session, i as u64 + 1);
        assert_eq!(r.event.source, "/connectors/reader");
        assert_eq!(r.event.ty, "mqtt.message");
    }
    assert_eq!(
        recs[0].event.data,
        Data::Json(Bytes::from_static(br#"{"t":1}"#))
    );
    assert_eq!(recs[1].event.data, Data::Text("hello".into()));
    assert_eq!(
        recs[2].event.data,
        Data::Binary(Bytes::from_static(&[0xff, 0x00, 0x01]))
    );
    let carried = &recs[3].event;
    assert_eq!(
        (
            carried.id.as_str(),
            carried.source.as_str(),
            carried.ty.as_str()
        ),
        ("ce-1", "/devices/9", "reading")
    );
    assert_eq!(carried.data, Data::Json(Bytes::from_static(br#"{"t":3}"#)));
    if v5 {
        let bin = &recs[4].event;
        assert_eq!(
            (bin.id.as_str(), bin.source.as_str()),
            ("ce-2", "/devices/7")
        );
        assert_eq!(bin.data, Data::Text("21".into()));
        assert_eq!(bin.datacontenttype.as_deref(), Some("text/plain"));
        assert_eq!(bin.extension("unit"), Some(&ExtValue::Str("c".into())));
        let text = &recs[5].event;
        plain_id(&text.id, &session, 6);
        assert_eq!(text.data, Data::Text("42".into()));
        assert_eq!(text.datacontenttype.as_deref(), Some("text/plain"));
    }
    quiet(&mut src).await;
}

#[tokio::test]
async fn the_source_reads_messages_in_order_mqtt311() {
    reads_in_order(false).await;
}

#[tokio::test]
async fn the_source_reads_messages_in_order_mqtt5() {
    reads_in_order(true).await;
}

async fn redelivers_uncommitted(v5: bool) {
    let broker = Mosquitto::start();
    let config = source_config(broker.port(), v5, &["r/#"]);
    let mut s1 = source(config.clone(), "redeliver", None)
        .await
        .expect("open");
    publish(
        broker.port(),
        v5,
        &[out("r/1", b"one"), out("r/2", b"two"), out("r/3", b"three")],
    )
    .await;
    let first = take(&mut s1, 3).await;
    s1.commit(&first[0].position).await.expect("commit");
    drop(s1);

    // The two uncommitted messages come again, with the same ids and
    // positions, so the mesh drops them as duplicates.
    let mut s2 = source(config.clone(), "redeliver", Some(first[0].position.clone()))
        .await
        .expect("reopen");
    let again = take(&mut s2, 2).await;
    assert_eq!(again, first[1..].to_vec());
    s2.commit(&again[1].position).await.expect("commit");
    drop(s2);

    // Once committed, they are not sent again.
    let mut s3 = source(config, "redeliver", Some(again[1].position.clone()))
        .await
        .expect("reopen");
    quiet(&mut s3).await;
    // A poll dropped while waiting loses nothing.
    assert!(timeout(Duration::from_millis(50), s3.poll()).await.is_err());
    publish(broker.port(), v5, &[out("r/4", b"four")]).await;
    let next = take(&mut s3, 1).await;
    assert_eq!(next[0].event.data, Data::Text("four".into()));
    assert_eq!(next[0].position["seq"], json!(4));
    assert_eq!(next[0].position["session"], first[0].position["session"]);
}

#[tokio::test]
async fn uncommitted_messages_are_redelivered_mqtt311() {
    redelivers_uncommitted(false).await;
}

#[tokio::test]
async fn uncommitted_messages_are_redelivered_mqtt5() {
    redelivers_uncommitted(true).await;
}

async fn session_survives_restart(v5: bool) {
    let mut broker = Mosquitto::start();
    let config = source_config(broker.port(), v5, &["k/#"]);
    let mut s1 = source(config.clone(), "keeper", None).await.expect("open");
    publish(broker.port(), v5, &[out("k/1", b"kept")]).await;
    let first = take(&mut s1, 1).await;
    drop(s1);
    broker.restart();
    publish(broker.port(), v5, &[out("k/2", b"queued")]).await;
    let mut s2 = source(config, "keeper", None).await.expect("reopen");
    let got = take(&mut s2, 2).await;
    assert_eq!(got[0].event.data, first[0].event.data);
    assert_eq!(got[1].event.data, Data::Text("queued".into()));
    s2.commit(&got[1].position).await.expect("commit");
    quiet(&mut s2).await;
}

#[tokio::test]
async fn the_session_survives_a_broker_restart_mqtt311() {
    session_survives_restart(false).await;
}

#[tokio::test]
async fn the_session_survives_a_broker_restart_mqtt5() {
    session_survives_restart(true).await;
}

fn events() -> Vec<CloudEvent> {
    let mk = |id: &str, subject: &str, data: Data| {
        let mut e = eventmesh_connect::event("upstream", id, "order.created", data);
        e.subject = Some(subject.into());
        e
    };
    let mut a = mk("e1", "a", Data::Json(Bytes::from_static(br#"{"n":1}"#)));
    a.set_extension("tenant", ExtValue::Str("acme".into()));
    a.time = Some("2026-01-02T03:04:05Z".into());
    vec![
        a,
        mk("e2", "b", Data::Text("two".into())),
        mk("e3", "c", Data::Binary(Bytes::from_static(&[0, 1, 2]))),
    ]
}

async fn receive(rx: &mut mpsc::UnboundedReceiver<Got>, n: usize) -> Vec<Got> {
    let mut got = Vec::new();
    timeout(WAIT, async {
        while got.len() < n {
            got.push(rx.recv().await.expect("subscriber runs"));
        }
    })
    .await
    .expect("messages within the wait");
    got
}

async fn sink_writes(v5: bool, format: &str) {
    let broker = Mosquitto::start();
    let (mut rx, _sub) = subscriber(broker.port(), v5, "out/#").await;
    // Reading back with the source: the events come out as they went in.
    let mut src = source(source_config(broker.port(), v5, &["out/#"]), "echo", None)
        .await
        .expect("open");
    let config = json!({"host": "127.0.0.1", "port": broker.port(), "protocol": proto(v5), "topic": "out/{subject}", "format": format});
    let mut snk = sink(config, "writer").await.expect("open");
    let evs = events();
    timeout(WAIT, snk.write(&evs))
        .await
        .expect("in time")
        .expect("written");
    let got = receive(&mut rx, 3).await;
    for (g, e) in got.iter().zip(&evs) {
        assert_eq!(
            g.topic,
            format!("out/{}", e.subject.as_deref().unwrap_or_default())
        );
        if format == "structured" {
            assert_eq!(g.payload, Bytes::from(e.to_json()));
            assert_eq!(
                g.content_type.as_deref(),
                v5.then_some("application/cloudevents+json")
            );
            assert!(g.properties.is_empty());
        } else {
            assert_eq!(g.payload, Bytes::copy_from_slice(e.data.as_bytes()));
            let mut want = vec![
                ("specversion", "1.0"),
                ("id", &e.id),
                ("source", "/connectors/upstream"),
                ("type", "order.created"),
            ];
            if let Some(t) = &e.time {
                want.extend([
                    ("subject", e.subject.as_deref().unwrap_or_default()),
                    ("time", t.as_str()),
                    ("tenant", "acme"),
                ]);
            } else {
                want.push(("subject", e.subject.as_deref().unwrap_or_default()));
            }
            let want: Vec<(String, String)> = want
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            assert_eq!(g.properties, want);
            assert_eq!(g.content_type, e.datacontenttype);
        }
    }
    let back: Vec<CloudEvent> = take(&mut src, 3)
        .await
        .into_iter()
        .map(|r| r.event)
        .collect();
    assert_eq!(back, evs);
    // Nothing else was published.
    assert!(timeout(Duration::from_millis(300), rx.recv())
        .await
        .is_err());
}

#[tokio::test]
async fn sink_messages_reach_a_subscriber_mqtt311() {
    sink_writes(false, "structured").await;
}

#[tokio::test]
async fn sink_messages_reach_a_subscriber_mqtt5_binary() {
    sink_writes(true, "binary").await;
}

#[tokio::test]
async fn sink_messages_reach_a_subscriber_mqtt5_structured() {
    sink_writes(true, "structured").await;
}

async fn down_is_unavailable(v5: bool) {
    let nobody = free_port();
    let err = source(source_config(nobody, v5, &["a"]), "down", None)
        .await
        .err();
    assert!(
        matches!(err, Some(ConnectorError::Unavailable(_))),
        "{err:?}"
    );
    let sink_config = |port: u16| json!({"host": "127.0.0.1", "port": port, "protocol": proto(v5), "topic": "x", "timeout_secs": 3});
    let err = sink(sink_config(nobody), "down").await.err();
    assert!(
        matches!(err, Some(ConnectorError::Unavailable(_))),
        "{err:?}"
    );

    // A broker that goes away: writes and polls fail as Unavailable, and
    // work again once it is back.
    let mut broker = Mosquitto::start();
    let mut snk = sink(sink_config(broker.port()), "down")
        .await
        .expect("open");
    let mut src = source(source_config(broker.port(), v5, &["x"]), "down-src", None)
        .await
        .expect("open");
    broker.kill();
    let err = timeout(WAIT, snk.write(&events()))
        .await
        .expect("in time")
        .err();
    assert!(
        matches!(err, Some(ConnectorError::Unavailable(_))),
        "{err:?}"
    );
    let err = timeout(WAIT, async {
        loop {
            match src.poll().await {
                Ok(r) if r.is_empty() => continue,
                other => return other.err(),
            }
        }
    })
    .await
    .expect("in time");
    assert!(
        matches!(err, Some(ConnectorError::Unavailable(_))),
        "{err:?}"
    );
    broker.restart();
    // The source reconnects on its next poll (a new session: the killed
    // broker saved none), before anything is published.
    quiet(&mut src).await;
    timeout(WAIT, snk.write(&events()))
        .await
        .expect("in time")
        .expect("written after the restart");
    let got = take(&mut src, 3).await;
    assert_eq!(got[0].event.id, "e1");
}

#[tokio::test]
async fn a_broker_that_is_down_is_unavailable_mqtt311() {
    down_is_unavailable(false).await;
}

#[tokio::test]
async fn a_broker_that_is_down_is_unavailable_mqtt5() {
    down_is_unavailable(true).await;
}

#[tokio::test]
async fn check_rejects_bad_configs_naming_the_field() {
    let src = kind("mqtt-source");
    let snk = kind("mqtt-sink");
    assert_eq!(src.schema()["required"], json!(["host", "topics"]));
    assert_eq!(
        snk.schema()["$defs"]["Protocol"]["enum"],
        json!(["3.1.1", "5"])
    );
    assert_eq!(
        src.check(&json!({"host": "h", "topics": ["a/+/b", "c/#"]})),
        Ok(())
    );
    assert_eq!(
        snk.check(&json!({"host": "h", "topic": "a/{subject}"})),
        Ok(())
    );
    assert_eq!(
        snk.check(
            &json!({"host": "h", "topic": "a", "protocol": "5", "format": "binary", "qos": 2})
        ),
        Ok(())
    );
    let cases = [
        (&src, json!({"host": "h", "topics": ["a/#/b"]}), "topics[0]"),
        (
            &src,
            json!({"host": "h", "topics": ["ok", "a+"]}),
            "topics[1]",
        ),
        (&src, json!({"host": "h", "topics": []}), "topics"),
        (&src, json!({"host": "h", "topics": ["a"], "qos": 1}), "qos"),
        (
            &src,
            json!({"host": "h", "topics": ["a"], "keep_alive_secs": 1}),
            "keep_alive_secs",
        ),
        (
            &src,
            json!({"host": "h", "topics": ["a"], "password": "p"}),
            "password",
        ),
        (&src, json!({"host": "", "topics": ["a"]}), "host"),
        (
            &src,
            json!({"host": "h", "topics": ["a"], "protocol": "4"}),
            "protocol",
        ),
        (&snk, json!({"host": "h", "topic": "a/+"}), "topic"),
        (
            &snk,
            json!({"host": "h", "topic": "a", "format": "binary"}),
            "format",
        ),
        (&snk, json!({"host": "h", "topic": "a", "qos": 3}), "qos"),
        (
            &snk,
            json!({"host": "h", "topic": "a", "topics": ["a"]}),
            "topics",
        ),
        (
            &snk,
            json!({"host": "h", "topic": "a", "client_id": ""}),
            "client_id",
        ),
    ];
    for (k, config, field) in cases {
        let err = k.check(&config).expect_err(&config.to_string());
        assert!(err.contains(field), "{config}: {err:?} names {field}");
    }
    let err = source(json!({"host": "h", "topics": ["#/a"]}), "bad", None)
        .await
        .err();
    assert!(matches!(err, Some(ConnectorError::Config(_))), "{err:?}");
}

#[tokio::test]
async fn a_publish_the_broker_refuses_is_a_config_error_mqtt5() {
    let broker = Mosquitto::start_with_acl("topic readwrite allowed/#\n");
    let port = broker.port();
    let (mut rx, _sub) = subscriber(port, true, "allowed/#").await;
    let config =
        |topic: &str| json!({"host": "127.0.0.1", "port": port, "protocol": "5", "topic": topic});
    let mut denied = sink(config("denied/{subject}"), "denied")
        .await
        .expect("open");
    let err = timeout(WAIT, denied.write(&events()))
        .await
        .expect("in time")
        .err();
    assert!(
        matches!(&err, Some(ConnectorError::Config(m)) if m.contains("NotAuthorized")),
        "{err:?}"
    );
    let mut allowed = sink(config("allowed/{subject}"), "allowed")
        .await
        .expect("open");
    timeout(WAIT, allowed.write(&events()[..1]))
        .await
        .expect("in time")
        .expect("written");
    assert_eq!(receive(&mut rx, 1).await[0].topic, "allowed/a");
}
