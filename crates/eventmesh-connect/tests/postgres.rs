//! `postgres-source` and `postgres-sink` against a real PostgreSQL server.

use std::time::Duration;

use bytes::Bytes;
use eventmesh_connect::testutil::postgres::PostgresServer;
use eventmesh_connect::{
    builtin, ConnectorError, Kind, Record, Sink, SinkContext, Source, SourceContext,
};
use eventmesh_core::event::{Data, ExtValue};
use eventmesh_core::CloudEvent;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(20);

fn kind(name: &str) -> Kind {
    builtin()
        .into_iter()
        .find(|k| k.name() == name)
        .expect("kind is built in")
}

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(WAIT, f).await.expect("timed out")
}

async fn open_source(
    config: Value,
    position: Option<Value>,
) -> Result<Box<dyn Source>, ConnectorError> {
    let ctx = SourceContext {
        connector: "pg-in".into(),
        topic: "orders".into(),
        position,
        cluster: "test".into(),
    };
    within(kind("postgres-source").open_source(config, ctx)).await
}

async fn open_sink(config: Value) -> Result<Box<dyn Sink>, ConnectorError> {
    let ctx = SinkContext {
        connector: "pg-out".into(),
        topic: "orders".into(),
        cluster: "test".into(),
    };
    within(kind("postgres-sink").open_sink(config, ctx)).await
}

/// Polls until `n` records have come.
async fn take(source: &mut Box<dyn Source>, n: usize) -> Vec<Record> {
    let mut got = Vec::new();
    within(async {
        while got.len() < n {
            got.extend(source.poll().await.expect("poll"));
        }
    })
    .await;
    assert_eq!(got.len(), n, "exactly {n} records");
    got
}

fn ids(records: &[Record]) -> Vec<String> {
    records.iter().map(|r| r.event.id.clone()).collect()
}

fn json_data(v: Value) -> Data {
    Data::Json(Bytes::from(v.to_string()))
}

/// JSON data as a value (PostgreSQL's jsonb spaces it its own way).
fn json_of(data: &Data) -> Value {
    match data {
        Data::Json(b) => serde_json::from_slice(b).expect("valid JSON"),
        other => panic!("not JSON data: {other:?}"),
    }
}

#[tokio::test]
async fn the_source_reads_the_outbox_in_order_and_resumes_after_a_committed_position() {
    let pg = PostgresServer::start();
    let config =
        json!({ "url": pg.url(), "table": "outbox", "create_table": true, "batch_size": 3 });
    let mut source = open_source(config.clone(), None).await.expect("open");
    pg.psql(
        "INSERT INTO outbox (type, subject, key, payload) VALUES \
         ('order.created', 'o-1', 'cust-1', '{\"n\": 1}'), \
         (NULL, NULL, NULL, '\"two\"'), \
         ('order.paid', 'o-1', 'cust-1', NULL), \
         ('order.shipped', NULL, NULL, '[4]'), \
         ('order.closed', NULL, NULL, '{\"n\": 5}')",
    );
    let first = take(&mut source, 3).await;
    assert_eq!(ids(&first), ["outbox:1", "outbox:2", "outbox:3"]);
    let e = &first[0].event;
    assert_eq!(e.source, "/connectors/pg-in");
    assert_eq!(e.ty, "order.created");
    assert_eq!(e.subject.as_deref(), Some("o-1"));
    assert_eq!(json_of(&e.data), json!({"n": 1}));
    assert_eq!(e.datacontenttype.as_deref(), Some("application/json"));
    assert_eq!(
        e.extensions,
        [("partitionkey".to_string(), ExtValue::Str("cust-1".into()))]
    );
    let time = e.time.as_deref().expect("created_at becomes the time");
    assert!(time.len() == 27 && time.ends_with('Z'), "{time}");
    assert_eq!(first[1].event.ty, "postgres.outbox");
    assert_eq!(json_of(&first[1].event.data), json!("two"));
    assert_eq!(first[1].event.subject, None);
    assert_eq!(first[2].event.data, Data::None);
    let positions: Vec<_> = first.iter().map(|r| r.position.clone()).collect();
    assert_eq!(
        positions,
        [json!({"id": 1}), json!({"id": 2}), json!({"id": 3})]
    );
    within(source.commit(&json!({"id": 3})))
        .await
        .expect("commit");
    drop(source);

    let mut again = open_source(config, Some(json!({"id": 3})))
        .await
        .expect("reopen");
    let rest = take(&mut again, 2).await;
    assert_eq!(ids(&rest), ["outbox:4", "outbox:5"]);
    assert_eq!(json_of(&rest[0].event.data), json!([4]));
    assert_eq!(rest[1].position, json!({"id": 5}));
    assert_eq!(
        within(again.poll()).await,
        Ok(Vec::new()),
        "nothing after the last row"
    );
}

#[tokio::test]
async fn rows_committed_out_of_id_order_are_not_skipped() {
    let pg = PostgresServer::start();
    let config = json!({ "url": pg.url(), "table": "public.outbox", "create_table": true });
    let mut source = open_source(config, None).await.expect("open");
    let mut a = pg.client().await;
    let b = pg.client().await;

    // A takes id 1 and stays open; B takes id 2 and commits first.
    let tx = a.transaction().await.expect("begin");
    let row = tx
        .query_one(
            "INSERT INTO outbox (payload) VALUES ('\"a\"') RETURNING id",
            &[],
        )
        .await
        .expect("insert a");
    assert_eq!(row.get::<_, i64>(0), 1);
    b.execute("INSERT INTO outbox (payload) VALUES ('\"b\"')", &[])
        .await
        .expect("insert b");
    assert_eq!(
        within(source.poll()).await,
        Ok(Vec::new()),
        "id 2 waits for id 1's transaction"
    );
    tx.commit().await.expect("commit a");
    let got = take(&mut source, 2).await;
    assert_eq!(ids(&got), ["public.outbox:1", "public.outbox:2"]);
    assert_eq!(json_of(&got[0].event.data), json!("a"));
    assert_eq!(json_of(&got[1].event.data), json!("b"));

    // A rolled-back id leaves a gap the source passes over.
    let tx = a.transaction().await.expect("begin");
    tx.execute("INSERT INTO outbox (payload) VALUES ('\"lost\"')", &[])
        .await
        .expect("insert 3");
    b.execute("INSERT INTO outbox (payload) VALUES ('\"d\"')", &[])
        .await
        .expect("insert 4");
    tx.rollback().await.expect("rollback");
    let got = take(&mut source, 1).await;
    assert_eq!(ids(&got), ["public.outbox:4"]);
    assert_eq!(got[0].position, json!({"id": 4}));
}

#[tokio::test]
async fn concurrent_writers_are_read_completely_and_in_order() {
    let pg = PostgresServer::start();
    let config = json!({ "url": pg.url(), "table": "outbox", "create_table": true });
    let mut source = open_source(config, None).await.expect("open");
    let mut writers = Vec::new();
    for w in 0..4u64 {
        let mut client = pg.client().await;
        writers.push(tokio::spawn(async move {
            let mut kept = Vec::new();
            for i in 0..25u64 {
                let tx = client.transaction().await.expect("begin");
                let sql = "INSERT INTO outbox (payload) VALUES ('1') RETURNING id";
                let id: i64 = tx.query_one(sql, &[]).await.expect("insert").get(0);
                // Commits land out of id order across the writers.
                tokio::time::sleep(Duration::from_millis((w * 7 + i * 3) % 11)).await;
                if (w + i) % 10 == 0 {
                    tx.rollback().await.expect("rollback");
                } else {
                    tx.commit().await.expect("commit");
                    kept.push(id);
                }
            }
            kept
        }));
    }
    let mut got: Vec<i64> = Vec::new();
    let ids_of = |records: Vec<Record>| -> Vec<i64> {
        records
            .iter()
            .map(|r| r.position["id"].as_i64().expect("id"))
            .collect()
    };
    within(async {
        while !writers.iter().all(|h| h.is_finished()) {
            got.extend(ids_of(source.poll().await.expect("poll")));
        }
    })
    .await;
    let mut expected = Vec::new();
    for h in writers {
        expected.extend(h.await.expect("writer"));
    }
    expected.sort();
    assert_eq!(expected.len(), 91, "nine of the hundred rolled back");
    within(async {
        while got.len() < expected.len() {
            got.extend(ids_of(source.poll().await.expect("poll")));
        }
    })
    .await;
    assert_eq!(got, expected, "every committed row, once, in id order");
}

#[tokio::test]
async fn a_plain_table_is_read_deleted_after_commit_and_lag_counts_the_rest() {
    let pg = PostgresServer::start();
    pg.psql(
        "CREATE TABLE jobs (id serial PRIMARY KEY, payload text); \
         INSERT INTO jobs (payload) VALUES ('plain text'), ('{\"k\": true}'), ('third')",
    );
    let config = json!({
        "url": pg.url(), "table": "jobs", "type": "job.queued", "delete_after_commit": true
    });
    let mut source = open_source(config, None).await.expect("open");
    assert_eq!(within(source.lag()).await, Some(3));
    let got = take(&mut source, 3).await;
    assert_eq!(ids(&got), ["jobs:1", "jobs:2", "jobs:3"]);
    assert_eq!(got[0].event.data, Data::Text("plain text".into()));
    assert_eq!(got[0].event.ty, "job.queued");
    assert_eq!(got[0].event.time, None);
    assert_eq!(json_of(&got[1].event.data), json!({"k": true}));
    assert_eq!(within(source.lag()).await, Some(0));
    within(source.commit(&got[1].position))
        .await
        .expect("commit");
    assert_eq!(pg.psql("SELECT string_agg(id::text, ',') FROM jobs"), "3");
}

fn sink_event(id: &str, data: Data) -> CloudEvent {
    CloudEvent {
        id: id.into(),
        source: "/orders".into(),
        ty: "order.created".into(),
        subject: Some(format!("subject-{id}")),
        time: Some("2024-05-06T07:08:09.123456+02:00".into()),
        datacontenttype: match data {
            Data::Text(_) => Some("text/plain".into()),
            _ => None,
        },
        data,
        ..CloudEvent::default()
    }
}

#[tokio::test]
async fn the_sink_upserts_by_source_and_id() {
    let pg = PostgresServer::start();
    let mut sink = open_sink(json!({ "url": pg.url(), "table": "public.mesh_events" }))
        .await
        .expect("open");
    let events = vec![
        sink_event("1", json_data(json!({"total": 12.5, "items": [1, 2]}))),
        sink_event("2", Data::Text("hello".into())),
        CloudEvent {
            // A valid RFC 3339 time PostgreSQL cannot store.
            time: Some("0000-01-01T00:00:00Z".into()),
            ..sink_event("3", Data::Binary(Bytes::from_static(&[0, 1, 254, 255])))
        },
        CloudEvent {
            time: None,
            subject: None,
            ..sink_event("4", Data::None)
        },
    ];
    within(sink.write(&events)).await.expect("write");
    within(sink.write(&events)).await.expect("write again");
    within(sink.write(&events[..2]))
        .await
        .expect("and a part again");

    let client = pg.client().await;
    let rows = client
        .query(
            "SELECT source, id, type, subject, \
             to_char(time AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US'), \
             datacontenttype, data, event FROM mesh_events ORDER BY id",
            &[],
        )
        .await
        .expect("read back");
    assert_eq!(rows.len(), 4, "one row per (source, id)");
    for (row, ev) in rows.iter().zip(&events) {
        assert_eq!(row.get::<_, String>(0), "/orders");
        assert_eq!(row.get::<_, String>(1), ev.id);
        assert_eq!(row.get::<_, String>(2), "order.created");
        assert_eq!(row.get::<_, Option<String>>(3), ev.subject);
        let whole: Value = serde_json::from_slice(&ev.to_json()).unwrap();
        assert_eq!(row.get::<_, Value>(7), whole);
        assert_eq!(row.get::<_, Option<String>>(5), ev.datacontenttype);
    }
    let time = |i: usize| rows[i].get::<_, Option<String>>(4);
    assert_eq!(time(0).as_deref(), Some("2024-05-06T05:08:09.123456"));
    assert_eq!(time(2), None);
    assert_eq!(time(3), None);
    let data = |i: usize| rows[i].get::<_, Option<Value>>(6);
    assert_eq!(data(0), Some(json!({"total": 12.5, "items": [1, 2]})));
    assert_eq!(data(1), Some(json!("hello")));
    assert_eq!(data(2), Some(json!("AAH+/w==")));
    assert_eq!(data(3), None);

    // A write of changed content under the same identity replaces the row.
    let changed = sink_event("1", json_data(json!({"total": 99})));
    within(sink.write(std::slice::from_ref(&changed)))
        .await
        .expect("upsert");
    assert_eq!(
        pg.psql("SELECT (data->>'total') || ' ' || (event->'data'->>'total') FROM mesh_events WHERE id = '1'"),
        "99 99"
    );
    assert_eq!(pg.psql("SELECT count(*) FROM mesh_events"), "4");
}

#[tokio::test]
async fn definitions_that_cannot_work_are_config_errors() {
    let pg = PostgresServer::start();
    let err = open_sink(json!({ "url": pg.url(), "table": "missing", "create_table": false }))
        .await
        .err();
    assert!(
        matches!(&err, Some(ConnectorError::Config(m)) if m.contains("missing")),
        "{err:?}"
    );
    let err = open_source(json!({ "url": pg.url(), "table": "missing" }), None)
        .await
        .err();
    assert_eq!(
        err,
        Some(ConnectorError::Config(
            "table missing does not exist".into()
        ))
    );
    pg.psql("CREATE TABLE nopayload (id bigserial PRIMARY KEY, body text)");
    let err = open_source(json!({ "url": pg.url(), "table": "nopayload" }), None)
        .await
        .err();
    let config = |e: &Option<ConnectorError>, word: &str| matches!(e, Some(ConnectorError::Config(m)) if m.contains(word));
    assert!(config(&err, "\"payload\" does not exist"), "{err:?}");
    pg.psql("CREATE TABLE textid (id text PRIMARY KEY, payload jsonb)");
    let err = open_source(json!({ "url": pg.url(), "table": "textid" }), None)
        .await
        .err();
    let msg = "table textid needs an integer id column";
    assert_eq!(err, Some(ConnectorError::Config(msg.into())));
    let url = format!("postgres://postgres@127.0.0.1:{}/nosuchdb", pg.port());
    let err = open_sink(json!({ "url": url, "table": "t" })).await.err();
    assert!(
        matches!(&err, Some(ConnectorError::Config(m)) if m.contains("nosuchdb")),
        "{err:?}"
    );
    let err = open_source(
        json!({ "url": pg.url(), "table": "t" }),
        Some(json!({"offset": 1})),
    )
    .await
    .err();
    assert!(matches!(err, Some(ConnectorError::Config(_))), "{err:?}");
}

#[tokio::test]
async fn a_down_server_is_unavailable_and_both_kinds_recover() {
    let mut pg = PostgresServer::start();
    let source_config = json!({ "url": pg.url(), "table": "outbox", "create_table": true });
    let sink_config = json!({ "url": pg.url(), "table": "events" });
    let mut source = open_source(source_config.clone(), None)
        .await
        .expect("open source");
    let mut sink = open_sink(sink_config.clone()).await.expect("open sink");
    pg.kill();

    let one = [sink_event("1", json_data(json!(1)))];
    let err = within(sink.write(&one)).await;
    assert!(
        matches!(err, Err(ConnectorError::Unavailable(_))),
        "{err:?}"
    );
    let err = within(source.poll()).await;
    assert!(
        matches!(err, Err(ConnectorError::Unavailable(_))),
        "{err:?}"
    );
    let err = open_sink(sink_config).await.err();
    assert!(
        matches!(err, Some(ConnectorError::Unavailable(_))),
        "{err:?}"
    );
    let err = open_source(source_config, None).await.err();
    assert!(
        matches!(err, Some(ConnectorError::Unavailable(_))),
        "{err:?}"
    );

    pg.restart();
    within(sink.write(&one)).await.expect("write after restart");
    assert_eq!(pg.psql("SELECT id FROM events"), "1");
    pg.psql("INSERT INTO outbox (payload) VALUES ('7')");
    let got = take(&mut source, 1).await;
    assert_eq!(ids(&got), ["outbox:1"]);
    assert_eq!(json_of(&got[0].event.data), json!(7));
}

#[test]
fn check_names_the_field_at_fault() {
    let sink = kind("postgres-sink");
    let source = kind("postgres-source");
    let url = "postgres://u:p@127.0.0.1:5432/db";
    assert_eq!(
        sink.check(&json!({ "url": url, "table": "events" })),
        Ok(())
    );
    assert_eq!(
        source.check(&json!({ "url": url, "table": "app.outbox" })),
        Ok(())
    );
    let err = sink
        .check(&json!({ "url": url, "table": "t", "tabel": "x" }))
        .unwrap_err();
    assert!(err.contains("tabel"), "{err}");
    let err = sink
        .check(&json!({ "url": url, "table": "drop table x;" }))
        .unwrap_err();
    assert!(err.starts_with("config: table "), "{err}");
    let err = source
        .check(&json!({ "url": url, "table": "t", "batch_size": 0 }))
        .unwrap_err();
    assert!(err.contains("batch_size"), "{err}");
    let err = source
        .check(&json!({ "url": url, "table": "t", "poll_interval_ms": 0 }))
        .unwrap_err();
    assert!(err.contains("poll_interval_ms"), "{err}");
    let err = source
        .check(&json!({ "url": "postgres://h:notaport/db", "table": "t" }))
        .unwrap_err();
    assert!(err.contains("url"), "{err}");
}
