//! The HTTP form of a push in each content mode of the CloudEvents HTTP
//! binding: the headers it adds to the subscription's own and its body.
//!
//! - binary: `ce-*` headers (values percent-encoded), the data's media
//!   type as `content-type`, the data as the body;
//! - structured: `content-type: application/cloudevents+json`, the event
//!   in the JSON format as the body (extension attributes keep their
//!   types: integers and booleans stay JSON numbers and booleans; binary
//!   data goes as `data_base64`);
//! - batch: `content-type: application/cloudevents-batch+json`, a JSON
//!   array of events in the JSON format.

use std::sync::Arc;

use eventmesh_core::CloudEvent;
use eventmesh_state::ContentMode;

/// The media type of a structured-mode push.
pub const STRUCTURED: &str = "application/cloudevents+json; charset=utf-8";
/// The media type of a batched push.
pub const BATCH: &str = "application/cloudevents-batch+json; charset=utf-8";

const CONTENT_TYPE: &str = "content-type";

/// The headers and body of one event pushed in `mode` (batch mode sends
/// one event as a batch of one).
pub fn single(event: &CloudEvent, mode: ContentMode) -> (Vec<(String, String)>, Vec<u8>) {
    match mode {
        ContentMode::Binary => {
            let (mut headers, content_type) = event.binary_mode_headers();
            if let Some(ct) = content_type {
                headers.push((CONTENT_TYPE.to_string(), ct));
            }
            (headers, event.data.as_bytes().to_vec())
        }
        ContentMode::Structured => (
            vec![(CONTENT_TYPE.to_string(), STRUCTURED.to_string())],
            event.to_json(),
        ),
        ContentMode::Batch => batch(std::slice::from_ref(&Arc::new(event.clone()))),
    }
}

/// The headers and body of a batched push of `events`, in order.
pub fn batch(events: &[Arc<CloudEvent>]) -> (Vec<(String, String)>, Vec<u8>) {
    let size: usize = events.iter().map(|e| e.data.as_bytes().len() + 256).sum();
    let mut body = Vec::with_capacity(size + 2);
    body.push(b'[');
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        e.write_json(&mut body);
    }
    body.push(b']');
    (vec![(CONTENT_TYPE.to_string(), BATCH.to_string())], body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn event() -> CloudEvent {
        CloudEvent::from_json_slice(
            br#"{"specversion":"1.0","id":"e\"1%","source":"/caf\u00e9","type":"t",
                "count":7,"flag":true,"note":"50% \"off\"","data":{"n":1}}"#,
        )
        .unwrap()
    }

    #[test]
    fn structured_keeps_extension_types() {
        let (h, body) = single(&event(), ContentMode::Structured);
        assert_eq!(h, [("content-type".to_string(), STRUCTURED.to_string())]);
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v,
            json!({"specversion": "1.0", "id": "e\"1%", "source": "/café", "type": "t",
                "count": 7, "flag": true, "note": "50% \"off\"", "data": {"n": 1}})
        );
    }

    #[test]
    fn a_batch_is_an_array_in_order() {
        let a = Arc::new(event());
        let mut b = event();
        b.id = "second".into();
        b.data = eventmesh_core::event::Data::Binary(bytes::Bytes::from_static(&[0, 255]));
        b.datacontenttype = Some("application/octet-stream".into());
        let (h, body) = batch(&[a, Arc::new(b)]);
        assert_eq!(h, [("content-type".to_string(), BATCH.to_string())]);
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 2);
        assert_eq!(v[0]["count"], 7);
        assert_eq!(v[1]["id"], "second");
        assert_eq!(v[1]["data_base64"], "AP8=");
        let (_, one) = single(&event(), ContentMode::Batch);
        assert_eq!(
            serde_json::from_slice::<Value>(&one).unwrap()[0]["flag"],
            true
        );
    }

    #[test]
    fn binary_percent_encodes_headers() {
        let (h, body) = single(&event(), ContentMode::Binary);
        let get = |n: &str| h.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("ce-id"), Some("e%221%25"));
        assert_eq!(get("ce-source"), Some("/caf%C3%A9"));
        assert_eq!(get("ce-count"), Some("7"));
        assert_eq!(get("content-type"), Some("application/json"));
        assert_eq!(body, br#"{"n":1}"#);
    }
}
