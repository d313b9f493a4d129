//! The file kinds on a real disk: lines in order with ids from their place,
//! a partial line held until its newline, rotation followed (also when
//! reopened from a position in the rotated-away file), truncation, a start
//! at the end, and the sink's lines in both formats.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use eventmesh_connect::{builtin, Kind, Position, Record, SinkContext, Source, SourceContext};
use eventmesh_core::event::Data;
use eventmesh_core::CloudEvent;
use serde_json::{json, Value};

fn kind(name: &str) -> Kind {
    builtin().into_iter().find(|k| k.name() == name).unwrap()
}

async fn open(path: &Path, extra: Value, position: Option<Position>) -> Box<dyn Source> {
    let mut config = json!({"path": path.display().to_string(), "poll_ms": 10});
    for (k, v) in extra.as_object().unwrap() {
        config[k] = v.clone();
    }
    kind("file-source")
        .open_source(
            config,
            SourceContext {
                connector: "f".into(),
                topic: "t".into(),
                position,
                cluster: "test".into(),
            },
        )
        .await
        .unwrap()
}

fn append(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// Polls until `n` records came (10 s at most).
async fn records(source: &mut Box<dyn Source>, n: usize) -> Vec<Record> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while out.len() < n && tokio::time::Instant::now() < deadline {
        out.extend(source.poll().await.unwrap());
    }
    out
}

fn data(r: &Record) -> Value {
    match &r.event.data {
        Data::Json(b) => serde_json::from_slice(b).unwrap(),
        Data::Text(t) => Value::String(t.clone()),
        other => panic!("unexpected data {other:?}"),
    }
}

fn ino(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().ino()
}

#[tokio::test]
async fn lines_come_in_order_and_a_partial_line_waits_for_its_newline() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    append(&path, "{\"n\":1}\nplain text\n\n{\"n\":");
    let mut s = open(&path, json!({}), None).await;
    let got = records(&mut s, 2).await;
    let i = ino(&path);
    assert_eq!(got.len(), 2);
    assert_eq!(data(&got[0]), json!({"n": 1}));
    assert_eq!(got[0].event.id, format!("{i}-0"));
    assert_eq!(got[0].event.source, "/connectors/f");
    assert_eq!(got[0].event.ty, "file.line");
    assert_eq!(
        got[0].event.datacontenttype.as_deref(),
        Some("application/json")
    );
    assert_eq!(data(&got[1]), json!("plain text"));
    assert_eq!(got[1].event.id, format!("{i}-8"));
    assert_eq!(got[1].position, json!({"file": i, "offset": 19}));
    // The blank line and the unterminated one make nothing yet.
    assert_eq!(s.poll().await.unwrap(), Vec::new());
    append(&path, "2}\n");
    let got = records(&mut s, 1).await;
    assert_eq!(data(&got[0]), json!({"n": 2}));
    assert_eq!(got[0].event.id, format!("{i}-20"));
    assert_eq!(s.lag().await, Some(0));
}

#[tokio::test]
async fn reopened_at_a_position_it_yields_exactly_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    append(&path, "1\n2\n3\n");
    let mut s = open(&path, json!({}), None).await;
    let got = records(&mut s, 3).await;
    let at = got[1].position.clone();
    drop(s);
    let mut s = open(&path, json!({}), Some(at)).await;
    let got = records(&mut s, 1).await;
    assert_eq!(got.iter().map(data).collect::<Vec<_>>(), [json!(3)]);
    assert_eq!(s.poll().await.unwrap(), Vec::new());
}

#[tokio::test]
async fn rotation_is_followed_even_from_a_position_in_the_rotated_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.log");
    append(&path, "1\n2\n");
    let mut s = open(&path, json!({}), None).await;
    let first = records(&mut s, 1).await;
    let at = first[0].position.clone();
    drop(s);
    // While stopped: one more line, then rotation, then a new file with an
    // unterminated last line in the old one.
    append(&path, "3");
    std::fs::rename(&path, dir.path().join("app.log.1")).unwrap();
    append(&path, "4\n");
    let mut s = open(&path, json!({}), Some(at)).await;
    let got = records(&mut s, 3).await;
    assert_eq!(
        got.iter().map(data).collect::<Vec<_>>(),
        [json!(2), json!(3), json!(4)]
    );
    assert_eq!(got[2].position, json!({"file": ino(&path), "offset": 2}));
}

#[tokio::test]
async fn a_truncated_file_is_read_again_from_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    append(&path, "1\n2\n");
    let mut s = open(&path, json!({}), None).await;
    assert_eq!(records(&mut s, 2).await.len(), 2);
    std::fs::File::create(&path).unwrap(); // copytruncate
    append(&path, "9\n");
    let got = records(&mut s, 1).await;
    assert_eq!(got.iter().map(data).collect::<Vec<_>>(), [json!(9)]);
}

#[tokio::test]
async fn start_end_skips_what_the_file_held_and_a_missing_file_is_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    append(&path, "old\n");
    let mut s = open(&path, json!({"start": "end"}), None).await;
    assert_eq!(s.poll().await.unwrap(), Vec::new());
    append(&path, "new\n");
    let got = records(&mut s, 1).await;
    assert_eq!(got.iter().map(data).collect::<Vec<_>>(), [json!("new")]);

    let later = dir.path().join("later.jsonl");
    let mut s = open(&later, json!({}), None).await;
    assert_eq!(s.poll().await.unwrap(), Vec::new());
    append(&later, "1\n");
    assert_eq!(records(&mut s, 1).await.len(), 1);
}

#[tokio::test]
async fn the_sink_appends_events_or_their_data() {
    let dir = tempfile::tempdir().unwrap();
    let ev = |id: &str, data: Data| CloudEvent {
        id: id.into(),
        source: "/s".into(),
        ty: "t".into(),
        data,
        ..CloudEvent::default()
    };
    let events = [
        ev("a", Data::Json(bytes::Bytes::from_static(b"{\"x\":1}"))),
        ev("b", Data::Text("hi".into())),
        ev("c", Data::Binary(bytes::Bytes::from_static(&[0xff, 0]))),
        ev("d", Data::None),
    ];
    for (format, want) in [
        (
            "event",
            vec![
                json!({"specversion":"1.0","id":"a","source":"/s","type":"t","data":{"x":1}}),
                json!({"specversion":"1.0","id":"b","source":"/s","type":"t","data":"hi"}),
                json!({"specversion":"1.0","id":"c","source":"/s","type":"t","data_base64":"/wA="}),
                json!({"specversion":"1.0","id":"d","source":"/s","type":"t"}),
            ],
        ),
        (
            "data",
            vec![json!({"x":1}), json!("hi"), json!("/wA="), Value::Null],
        ),
    ] {
        let path = dir.path().join(format!("{format}.jsonl"));
        let mut sink = kind("file-sink")
            .open_sink(
                json!({"path": path.display().to_string(), "format": format}),
                SinkContext {
                    connector: "s".into(),
                    topic: "t".into(),
                    cluster: "test".into(),
                },
            )
            .await
            .unwrap();
        sink.write(&events[..2]).await.unwrap();
        sink.write(&events[2..]).await.unwrap();
        let lines: Vec<Value> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines, want, "{format}");
    }
    // A directory that does not exist cannot work until the definition changes.
    let err = kind("file-sink")
        .open_sink(
            json!({"path": dir.path().join("no/such/dir.jsonl").display().to_string()}),
            SinkContext {
                connector: "s".into(),
                topic: "t".into(),
                cluster: "test".into(),
            },
        )
        .await
        .err()
        .unwrap();
    assert!(!err.is_transient(), "{err}");
}
