//! Publishing with the CloudEvents SDKs nobody here wrote: the Python SDK
//! (PyPI `cloudevents` 2, its `v1` and `core` APIs) and the JavaScript SDK
//! (npm `cloudevents` 10), in binary and structured mode, with non-ASCII
//! text, double quotes, percent signs, typed extensions and every data
//! kind (`tests/interop/ce_publish.*`). Every event is read back and
//! compared, attribute by attribute and byte by byte, with what the SDK
//! sent. The clients come from `scripts/interop.sh`.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::interop::{node_script, python_script};
use common::*;
use serde_json::{json, Value};

/// Runs both SDKs' publishers against `topic`: what each must have
/// stored, by event id (every publish answered 202).
async fn publish_with_sdks(s: &Server, topic: &str) -> BTreeMap<String, Value> {
    let url = s.url(&format!("/events/publish?topic={topic}"));
    let mut lines = python_script("ce_publish.py", vec![url.clone()]).await;
    lines.extend(node_script("ce_publish.cjs", vec![url]).await);
    let mut expected = BTreeMap::new();
    for line in lines {
        let case = line["case"].as_str().unwrap().to_string();
        assert_eq!(line["status"], 202, "{case}: {}", line["answer"]);
        expected.insert(case, line["expect"].clone());
    }
    expected
}

#[tokio::test]
async fn events_from_both_sdks_in_both_modes_are_stored_as_they_were_sent() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    subscribe(
        &c,
        &s,
        json!({"clientId": "reader", "topic": "sdk", "from": "earliest"}),
    )
    .await;
    let expected = publish_with_sdks(&s, "sdk").await;
    // 4 ways × 3 data kinds from Python plus one ISO-8859-1 send; 2 × 3
    // from JavaScript.
    assert_eq!(expected.len(), 19, "{:?}", expected.keys());

    let got = poll_n(&c, &s, "reader", expected.len(), Duration::from_secs(20)).await;
    let mut stored: BTreeMap<String, Value> = BTreeMap::new();
    for d in got {
        let ev = d["event"].clone();
        stored.insert(ev["id"].as_str().unwrap().to_string(), ev);
    }
    assert_eq!(
        stored.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for (id, want) in &expected {
        assert_eq!(&stored[id], want, "{id}");
    }
    // Spot checks of what the comparison covers: raw UTF-8, ISO-8859-1
    // and percent-encoded headers all read the same; quotes and a `%`
    // that starts no escape stay; binary mode carries extensions as
    // strings, structured mode keeps their types.
    for id in ["py-v1-binary-json", "py-core-binary-json"] {
        assert_eq!(stored[id]["subject"], "größe \"q\" 100% € 😀", "{id}");
        assert_eq!(stored[id]["count"], "7", "{id}");
    }
    assert_eq!(stored["py-v1-binary-latin1"]["subject"], "größe \"q\" 100%");
    assert_eq!(stored["js-binary-text"]["subject"], "größe \"q\" 100%");
    assert_eq!(stored["js-binary-json"]["flag"], "true");
    assert_eq!(stored["js-structured-json"]["flag"], true);
    assert_eq!(stored["py-core-structured-json"]["count"], 7);
    assert_eq!(stored["js-binary-bytes"]["data_base64"], "AAH+/w==");
}

#[tokio::test]
async fn the_same_data_is_judged_the_same_in_binary_and_structured_mode() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    let url = s.url("/events/publish?topic=numbers");
    let binary = |id: &'static str, ct: &'static str, body: &'static str| {
        c.post(&url)
            .header("ce-specversion", "1.0")
            .header("ce-id", id)
            .header("ce-source", "/s")
            .header("ce-type", "t")
            .header("content-type", ct)
            .body(body)
            .send()
    };
    let structured = |id: &str, data: &str| {
        c.post(&url)
            .header("content-type", "application/cloudevents+json")
            .body(format!(
                r#"{{"specversion":"1.0","id":"{id}","source":"/s","type":"t","data":{data}}}"#
            ))
            .send()
    };
    // Valid JSON text, whatever a reader's number type holds: accepted in
    // both modes.
    let r = binary("b-big", "application/json", r#"{"e":1e400}"#)
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let r = structured("s-big", r#"{"e":1e400}"#).await.unwrap();
    assert_eq!(r.status(), 202);
    // Not JSON: refused in both modes, with the reason.
    let r = binary("b-bad", "application/json", r#"{"e":}"#)
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"], "malformed_json", "{v}");
    let r = structured("s-bad", r#"{"e":}"#).await.unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"], "malformed_json", "{v}");

    // A header whose percent-escapes decode to bytes that are not UTF-8
    // is refused with the header named, never altered.
    let r = c
        .post(&url)
        .header("ce-specversion", "1.0")
        .header("ce-id", "x")
        .header("ce-source", "/s")
        .header("ce-type", "t")
        .header("ce-subject", "%C0%A0")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"], "invalid_event", "{v}");
    assert_eq!(
        v["message"],
        "header ce-subject: \"%C0%A0\" percent-decodes to bytes that are not UTF-8"
    );
}
