//! The CloudEvents NATS binding: the event a NATS message carries, and the
//! message that carries an event.
//!
//! **Reading** (`message_event`). A message following the binding is the
//! event it carries, id included: structured mode (a `Content-Type`
//! starting `application/cloudevents`, the JSON event as the body) or
//! binary mode (`ce-<attribute>` headers in any case, values
//! percent-encoded; `ce-datacontenttype`, else `Content-Type`, types the
//! body). Any other message (or a CloudEvent that does not parse, which is
//! logged) becomes an event of the configured `type` from
//! `/connectors/<name>`, its `subject` the NATS subject, its data the body
//! (typed by a `Content-Type` header if any, else JSON as JSON, UTF-8 as
//! text, other bytes as binary; an empty body is no data), its id the one
//! the source chose.
//!
//! **Writing** (`encode`). `binary` is the binding's binary mode: `ce-*`
//! headers (values percent-encoded), `ce-datacontenttype` and
//! `Content-Type`, the data as the body (an event without
//! `datacontenttype` gains the one its data implies). `structured` is the
//! JSON event with `Content-Type: application/cloudevents+json`. For
//! JetStream a `Nats-Msg-Id: <source>/<id>` header (percent-encoded like a
//! header value) is added.
//!
//! Invariant: an event written in either format reads back as the same
//! event; only a message carrying no CloudEvent gets the reader's id and
//! `type`.

use std::str::FromStr;

use async_nats::{HeaderMap, HeaderName, HeaderValue};
use bytes::Bytes;
use eventmesh_core::event::{decode_header_value, percent_encode, Data};
use eventmesh_core::CloudEvent;

use super::Format;
use crate::sdk::{data_of, event};

/// A message's headers, names lower-cased, the first value of each.
fn header_pairs(headers: Option<&HeaderMap>) -> Vec<(String, String)> {
    let Some(h) = headers else {
        return Vec::new();
    };
    h.iter()
        .filter_map(|(n, vs)| Some((n.to_string().to_ascii_lowercase(), vs.first()?.to_string())))
        .collect()
}

fn header<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// The CloudEvent a message carries in the binding's structured or binary
/// mode; `None` when it carries none.
fn carried_event(pairs: &[(String, String)], body: &Bytes) -> Option<Result<CloudEvent, String>> {
    let ct = header(pairs, "content-type");
    if let Some(lower) = ct.map(|c| c.trim().to_ascii_lowercase()) {
        if lower.starts_with("application/cloudevents")
            && !lower.starts_with("application/cloudevents-batch")
        {
            return Some(CloudEvent::from_json_slice(body).map_err(|e| e.to_string()));
        }
    }
    header(pairs, "ce-specversion")?;
    let ct = match header(pairs, "ce-datacontenttype").map(decode_header_value) {
        Some(Ok(v)) => Some(v),
        Some(Err(e)) => return Some(Err(format!("header ce-datacontenttype: {e}"))),
        None => ct.map(str::to_string),
    };
    let headers = pairs.iter().map(|(n, v)| (n.as_str(), v.as_str()));
    Some(
        CloudEvent::from_binary_mode(headers, ct.as_deref(), body.clone())
            .map_err(|e| e.to_string()),
    )
}

/// The event made from one message (see the module docs).
pub(super) fn message_event(
    connector: &str,
    ty: &str,
    id: String,
    m: async_nats::Message,
) -> CloudEvent {
    let pairs = header_pairs(m.headers.as_ref());
    match carried_event(&pairs, &m.payload) {
        Some(Ok(ev)) => return ev,
        Some(Err(e)) => tracing::warn!(
            connector, subject = %m.subject, error = %e,
            "a NATS message claims to be a CloudEvent but is not one; read as a plain message"
        ),
        None => {}
    }
    let data = if m.payload.is_empty() {
        Data::None
    } else {
        data_of(&m.payload)
    };
    let mut ev = event(connector, id, ty, data);
    ev.subject = Some(m.subject.to_string());
    if let Some(ct) = header(&pairs, "content-type") {
        // The core's binary-mode reader checks the media type and types the
        // body by it; the stand-in attributes are discarded.
        let stub = [
            ("ce-specversion", "1.0"),
            ("ce-id", "-"),
            ("ce-source", "-"),
            ("ce-type", "-"),
        ];
        if let Ok(typed) = CloudEvent::from_binary_mode(stub, Some(ct), m.payload) {
            (ev.data, ev.datacontenttype) = (typed.data, typed.datacontenttype);
        }
    }
    ev
}

fn put(h: &mut HeaderMap, name: &str, value: &str) -> Result<(), String> {
    let n = HeaderName::from_str(name).map_err(|e| format!("header {name}: {e}"))?;
    let v = HeaderValue::from_str(value).map_err(|e| format!("header {name}: {e}"))?;
    h.insert(n, v);
    Ok(())
}

/// The headers and body of the message for `ev`.
pub(super) fn encode(
    ev: &CloudEvent,
    format: Format,
    msg_id: bool,
) -> Result<(HeaderMap, Bytes), String> {
    let mut h = HeaderMap::new();
    let body = match format {
        Format::Binary => {
            let (pairs, ct) = ev.binary_mode_headers();
            for (n, v) in &pairs {
                put(&mut h, n, v)?;
            }
            if let Some(ct) = ct {
                put(&mut h, "ce-datacontenttype", &percent_encode(&ct))?;
                put(&mut h, "Content-Type", &ct)?;
            }
            match &ev.data {
                Data::Json(b) | Data::Binary(b) => b.clone(),
                Data::Text(t) => Bytes::from(t.clone()),
                Data::None => Bytes::new(),
            }
        }
        Format::Structured => {
            put(&mut h, "Content-Type", "application/cloudevents+json")?;
            Bytes::from(ev.to_json())
        }
    };
    if msg_id {
        let id = percent_encode(&format!("{}/{}", ev.source, ev.id));
        put(&mut h, "Nats-Msg-Id", &id)?;
    }
    Ok((h, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventmesh_core::event::ExtValue;

    fn sample() -> CloudEvent {
        let mut ev = event(
            "c",
            "id 1",
            "order.created",
            Data::Json(Bytes::from_static(b"{\"n\":1}")),
        );
        ev.subject = Some("50% off".into());
        ev.time = Some("2024-01-02T03:04:05Z".into());
        ev.set_extension("region", ExtValue::Str("eu west".into()));
        ev
    }

    fn message(headers: Option<HeaderMap>, body: &'static [u8]) -> async_nats::Message {
        async_nats::Message {
            subject: "orders.eu".into(),
            reply: None,
            payload: Bytes::from_static(body),
            headers,
            status: None,
            description: None,
            length: body.len(),
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> Option<HeaderMap> {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            put(&mut h, n, v).unwrap();
        }
        Some(h)
    }

    #[test]
    fn binary_and_structured_messages_read_back_as_the_event() {
        for format in [Format::Binary, Format::Structured] {
            let (h, body) = encode(&sample(), format, true).unwrap();
            let pairs = header_pairs(Some(&h));
            assert_eq!(header(&pairs, "nats-msg-id"), Some("/connectors/c/id%201"));
            let mut m = message(Some(h), b"");
            m.payload = body;
            assert_eq!(
                message_event("other", "t", "new".into(), m),
                sample(),
                "{format:?}"
            );
        }
        let (h, body) = encode(&sample(), Format::Binary, false).unwrap();
        let pairs = header_pairs(Some(&h));
        assert_eq!(header(&pairs, "ce-id"), Some("id%201"));
        assert_eq!(header(&pairs, "ce-subject"), Some("50%25%20off"));
        assert_eq!(
            header(&pairs, "ce-datacontenttype"),
            Some("application/json")
        );
        assert_eq!(header(&pairs, "content-type"), Some("application/json"));
        assert_eq!(header(&pairs, "nats-msg-id"), None);
        assert_eq!(&body[..], b"{\"n\":1}");
    }

    #[test]
    fn plain_messages_become_events_of_the_configured_type() {
        let ev = message_event("c", "nats.message", "s-7".into(), message(None, b"hello"));
        assert_eq!(
            (ev.id.as_str(), ev.source.as_str()),
            ("s-7", "/connectors/c")
        );
        assert_eq!(
            (ev.ty.as_str(), ev.subject.as_deref()),
            ("nats.message", Some("orders.eu"))
        );
        assert_eq!(ev.data, Data::Text("hello".into()));
        let empty = message_event("c", "t", "1".into(), message(None, b""));
        assert_eq!((empty.data, empty.datacontenttype), (Data::None, None));
        // A Content-Type header types the body.
        let xml = message(headers(&[("Content-Type", "application/xml")]), b"<a/>");
        let xml = message_event("c", "t", "1".into(), xml);
        assert_eq!(xml.data, Data::Binary(Bytes::from_static(b"<a/>")));
        assert_eq!(xml.datacontenttype.as_deref(), Some("application/xml"));
        // CloudEvent headers that do not make an event: a plain message.
        let bad = message(headers(&[("ce-specversion", "1.0"), ("ce-id", "x")]), b"1");
        let bad = message_event("c", "t", "9".into(), bad);
        assert_eq!(
            (bad.id.as_str(), bad.data),
            ("9", Data::Json(Bytes::from_static(b"1")))
        );
        // Header names in any case; Content-Type without ce-datacontenttype.
        let ce = headers(&[
            ("CE-SpecVersion", "1.0"),
            ("Ce-Id", "e1"),
            ("ce-source", "/x"),
            ("ce-type", "y"),
            ("content-type", "text/plain"),
        ]);
        let ce = message_event("c", "t", "9".into(), message(ce, b"hi"));
        assert_eq!(
            (ce.id.as_str(), ce.source.as_str(), ce.ty.as_str()),
            ("e1", "/x", "y")
        );
        assert_eq!(ce.data, Data::Text("hi".into()));
        assert_eq!(ce.datacontenttype.as_deref(), Some("text/plain"));
    }
}
