//! Events on MQTT: the CloudEvents MQTT binding, and plain payloads.
//!
//! **Into the mesh.** An MQTT 5 publish whose content type starts with
//! `application/cloudevents+json` carries an event in structured mode; one
//! with a `specversion` user property carries it in binary mode (the other
//! attributes in user properties, `datacontenttype` in the content type,
//! the data as the payload). An MQTT 3.1.1 payload that is a JSON object
//! reading as a valid CloudEvent is one in structured mode, the only mode
//! 3.1.1 has. Anything else is a plain payload and becomes an event of
//! type [`PLAIN_TYPE`] with source `/mqtt/<client id>` and a fresh id (a
//! UUIDv7); its data is JSON when the payload is a JSON object or array
//! (or its content type says JSON), text when it is UTF-8 under a `text/`
//! content type or the payload format indicator, else bytes. MQTT 5
//! properties become attributes: the content type `datacontenttype`, the
//! message expiry interval `expirytime` (unless the event has its own),
//! the response topic `responsetopic` (as a mesh topic) and the
//! correlation data `correlationid`, and on a plain payload each user
//! property whose name is a valid extension name an extension.
//!
//! **Out of the mesh.** A plain event goes out as it came in: its data as
//! the payload and, over MQTT 5, its extensions as user properties. Any
//! other event goes to an MQTT 5 client in binary mode (every attribute a
//! user property) and to an MQTT 3.1.1 client in structured mode (the
//! JSON event as the payload). `expirytime` also sets the message expiry
//! interval, `responsetopic` the response topic and `correlationid` the
//! correlation data.

use bytes::Bytes;
use eventmesh_core::event::valid_extension_name;
use eventmesh_core::{CloudEvent, Data, ExtValue};

use crate::codec::{reason, Protocol, Publish, PublishProps, QoS};
use crate::topic;

/// The type of an event made from a plain MQTT payload.
pub const PLAIN_TYPE: &str = "eventmesh.mqtt.message";
/// The extension holding an MQTT 5 response topic (a mesh topic).
pub const RESPONSE_TOPIC: &str = "responsetopic";
/// The mesh's request-reply correlation extension.
pub const CORRELATION: &str = "correlationid";
/// The MQTT topic a reply to a mesh request is published to: the
/// response topic of every event delivered over MQTT 5 that carries a
/// `correlationid` and no `responsetopic` of its own.
pub const REPLY_TOPIC: &str = "$mesh/reply";
/// CloudEvents' expiry time extension.
pub const EXPIRY: &str = "expirytime";

const STRUCTURED: &str = "application/cloudevents+json";

/// A publish the mesh cannot take: the reason code and a text for the
/// client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub reason: u8,
    pub message: String,
}

fn payload_invalid(message: String) -> Refused {
    Refused {
        reason: reason::PAYLOAD_FORMAT_INVALID,
        message,
    }
}

fn is_structured(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case(STRUCTURED))
}

/// The event an MQTT publish carries, from the client `client_id`, at
/// `now_ms`.
pub fn event_of(
    p: &Publish,
    protocol: Protocol,
    client_id: &str,
    now_ms: u64,
) -> Result<CloudEvent, Refused> {
    let props = &p.props;
    let ct = props.content_type.as_deref();
    let mut event = if ct.is_some_and(is_structured) {
        CloudEvent::from_json_slice(&p.payload)
            .map_err(|e| payload_invalid(format!("structured CloudEvent: {e}")))?
    } else if props.user.iter().any(|(n, _)| n == "specversion") {
        let attrs = props
            .user
            .iter()
            .filter(|(n, _)| valid_extension_name(n) || n == "data_base64")
            .map(|(n, v)| (n.clone(), v.clone()));
        CloudEvent::from_attributes(attrs, ct, p.payload.clone())
            .map_err(|e| payload_invalid(format!("binary-mode CloudEvent: {e}")))?
    } else if protocol == Protocol::V311 && p.payload.first() == Some(&b'{') {
        match CloudEvent::from_json_slice(&p.payload) {
            Ok(e) => e,
            Err(_) => plain(p, client_id)?,
        }
    } else {
        plain(p, client_id)?
    };
    if let Some(s) = props.message_expiry {
        if event.extension(EXPIRY).is_none() {
            let at = now_ms.saturating_add(u64::from(s) * 1000);
            event.set_extension(
                EXPIRY,
                ExtValue::Str(eventmesh_core::time::format_rfc3339_ms(at)),
            );
        }
    }
    if let Some(rt) = &props.response_topic {
        let mesh = topic::to_mesh(rt).map_err(|e| Refused {
            reason: reason::TOPIC_NAME_INVALID,
            message: format!("response topic: {e}"),
        })?;
        event.set_extension(RESPONSE_TOPIC, ExtValue::Str(mesh));
    }
    if let Some(c) = &props.correlation_data {
        let text = String::from_utf8(c.to_vec()).map_err(|_| {
            payload_invalid("correlation data must be UTF-8 text to become correlationid".into())
        })?;
        event.set_extension(CORRELATION, ExtValue::Str(text));
    }
    Ok(event)
}

/// A plain payload as an event of [`PLAIN_TYPE`].
fn plain(p: &Publish, client_id: &str) -> Result<CloudEvent, Refused> {
    let props = &p.props;
    let ct = props.content_type.as_deref();
    let json_ct = ct.is_some_and(eventmesh_core::event::is_json_media_type);
    let looks_json = ct.is_none() && matches!(p.payload.first(), Some(b'{' | b'['));
    let data = if p.payload.is_empty() {
        Data::None
    } else if (json_ct || looks_json)
        && serde_json::from_slice::<serde::de::IgnoredAny>(&p.payload).is_ok()
    {
        Data::Json(p.payload.clone())
    } else if json_ct {
        return Err(payload_invalid(format!(
            "the content type is {:?} but the payload is not JSON",
            ct.unwrap_or_default()
        )));
    } else if ct.is_some_and(|c| c.trim_start().starts_with("text/"))
        || props.payload_utf8 == Some(true)
    {
        match std::str::from_utf8(&p.payload) {
            Ok(s) => Data::Text(s.to_string()),
            Err(_) => Data::Binary(p.payload.clone()),
        }
    } else {
        Data::Binary(p.payload.clone())
    };
    let mut attrs = vec![
        ("specversion".to_string(), "1.0".to_string()),
        ("id".to_string(), uuid::Uuid::now_v7().to_string()),
        ("source".to_string(), format!("/mqtt/{client_id}")),
        ("type".to_string(), PLAIN_TYPE.to_string()),
    ];
    for (n, v) in &props.user {
        if valid_extension_name(n) && !is_attribute(n) {
            attrs.push((n.clone(), v.clone()));
        }
    }
    let mut event = CloudEvent::from_attributes(attrs, ct, Bytes::new())
        .map_err(|e| payload_invalid(e.to_string()))?;
    event.data = data;
    Ok(event)
}

/// A name the CloudEvents specification gives a meaning of its own.
fn is_attribute(name: &str) -> bool {
    matches!(
        name,
        "specversion"
            | "id"
            | "source"
            | "type"
            | "datacontenttype"
            | "dataschema"
            | "subject"
            | "time"
            | "data"
    )
}

/// The MQTT publish of an event read from the mesh topic `mesh_topic`,
/// for a client speaking `protocol`, at `qos`, at `now_ms`. `event_json`
/// is the event as the mesh stores it in structured JSON.
pub fn publish_of(
    event_json: &[u8],
    mesh_topic: &str,
    protocol: Protocol,
    qos: QoS,
    now_ms: u64,
) -> Result<Publish, String> {
    let event = CloudEvent::from_json_slice(event_json).map_err(|e| e.to_string())?;
    Ok(publish_of_event(
        &event, event_json, mesh_topic, protocol, qos, now_ms,
    ))
}

/// [`publish_of`] for an event already read from its JSON.
pub fn publish_of_event(
    event: &CloudEvent,
    event_json: &[u8],
    mesh_topic: &str,
    protocol: Protocol,
    qos: QoS,
    now_ms: u64,
) -> Publish {
    let mut props = PublishProps::default();
    let is_plain = event.ty == PLAIN_TYPE;
    let payload = if is_plain || protocol == Protocol::V5 {
        Bytes::copy_from_slice(event.data.as_bytes())
    } else {
        Bytes::copy_from_slice(event_json)
    };
    if protocol == Protocol::V5 {
        let expiry = event.extension(EXPIRY).and_then(|e| match e {
            ExtValue::Str(t) => eventmesh_core::time::parse_rfc3339_ms(t).ok(),
            _ => None,
        });
        if let Some(at) = expiry {
            // Whole seconds left, rounded up (at least one).
            props.message_expiry = Some(
                u32::try_from(at.saturating_sub(now_ms).div_ceil(1000).max(1)).unwrap_or(u32::MAX),
            );
        }
        if let Some(ExtValue::Str(t)) = event.extension(RESPONSE_TOPIC) {
            props.response_topic = Some(topic::from_mesh(t));
        }
        if let Some(c) = event.extension(CORRELATION) {
            props.correlation_data = Some(Bytes::from(c.to_text()));
            if props.response_topic.is_none() {
                props.response_topic = Some(REPLY_TOPIC.into());
            }
        }
        if matches!(event.data, Data::Json(_) | Data::Text(_)) {
            props.payload_utf8 = Some(true);
        }
        if is_plain {
            props.content_type = event.datacontenttype.clone();
            for (n, v) in &event.extensions {
                props.user.push((n.clone(), v.to_text()));
            }
        } else {
            props.content_type = event.content_type();
            props.user = vec![
                ("specversion".into(), "1.0".into()),
                ("id".into(), event.id.clone()),
                ("source".into(), event.source.clone()),
                ("type".into(), event.ty.clone()),
            ];
            for (name, v) in [
                ("dataschema", &event.dataschema),
                ("subject", &event.subject),
                ("time", &event.time),
            ] {
                if let Some(v) = v {
                    props.user.push((name.into(), v.clone()));
                }
            }
            for (n, v) in &event.extensions {
                props.user.push((n.clone(), v.to_text()));
            }
        }
    }
    Publish {
        dup: false,
        qos,
        retain: false,
        topic: topic::from_mesh(mesh_topic),
        pkid: 0,
        payload,
        props,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publish(payload: &[u8], props: PublishProps) -> Publish {
        Publish {
            dup: false,
            qos: QoS::AtLeastOnce,
            retain: false,
            topic: "a/b".into(),
            pkid: 1,
            payload: Bytes::copy_from_slice(payload),
            props,
        }
    }

    fn json(e: &CloudEvent) -> serde_json::Value {
        serde_json::from_slice(&e.to_json()).unwrap()
    }

    #[test]
    fn a_plain_payload_becomes_an_event_of_the_plain_type() {
        let e = event_of(
            &publish(b"{\"t\": 1}", PublishProps::default()),
            Protocol::V311,
            "dev",
            0,
        )
        .unwrap();
        assert_eq!(
            (e.ty.as_str(), e.source.as_str()),
            (PLAIN_TYPE, "/mqtt/dev")
        );
        assert_eq!(e.data, Data::Json(Bytes::from_static(b"{\"t\": 1}")));
        assert_eq!(e.id.len(), 36);
        let e = event_of(
            &publish(b"21.5", PublishProps::default()),
            Protocol::V5,
            "dev",
            0,
        )
        .unwrap();
        assert_eq!(e.data, Data::Binary(Bytes::from_static(b"21.5")));
        let props = PublishProps {
            payload_utf8: Some(true),
            user: vec![("unit".into(), "c".into()), ("Bad Name".into(), "x".into())],
            ..PublishProps::default()
        };
        let e = event_of(&publish(b"21.5", props), Protocol::V5, "dev", 0).unwrap();
        assert_eq!(e.data, Data::Text("21.5".into()));
        assert_eq!(
            e.extensions,
            vec![("unit".to_string(), ExtValue::Str("c".into()))]
        );
    }

    #[test]
    fn binary_and_structured_modes_carry_the_event() {
        let props = PublishProps {
            content_type: Some("application/json".into()),
            user: vec![
                ("specversion".into(), "1.0".into()),
                ("id".into(), "1".into()),
                ("source".into(), "/s".into()),
                ("type".into(), "t".into()),
                ("region".into(), "eu".into()),
            ],
            ..PublishProps::default()
        };
        let e = event_of(&publish(b"{\"n\":1}", props), Protocol::V5, "dev", 0).unwrap();
        assert_eq!(
            json(&e),
            serde_json::json!({"specversion":"1.0","id":"1","source":"/s","type":"t","region":"eu","datacontenttype":"application/json","data":{"n":1}})
        );
        let structured = br#"{"specversion":"1.0","id":"2","source":"/s","type":"t","data":"x"}"#;
        let e = event_of(
            &publish(structured, PublishProps::default()),
            Protocol::V311,
            "dev",
            0,
        )
        .unwrap();
        assert_eq!(e.id, "2");
        let props = PublishProps {
            content_type: Some("application/cloudevents+json; charset=utf-8".into()),
            ..PublishProps::default()
        };
        let e = event_of(&publish(structured, props), Protocol::V5, "dev", 0).unwrap();
        assert_eq!(e.id, "2");
        // Claiming to be a CloudEvent and not being one is refused.
        let props = PublishProps {
            user: vec![("specversion".into(), "1.0".into())],
            ..PublishProps::default()
        };
        let r = event_of(&publish(b"x", props), Protocol::V5, "dev", 0).unwrap_err();
        assert_eq!(r.reason, reason::PAYLOAD_FORMAT_INVALID);
        assert!(
            r.message.contains("missing required attribute id"),
            "{}",
            r.message
        );
    }

    #[test]
    fn mqtt_5_properties_become_attributes_and_go_back_out() {
        let props = PublishProps {
            message_expiry: Some(60),
            response_topic: Some("replies/dev".into()),
            correlation_data: Some(Bytes::from_static(b"c-1")),
            content_type: Some("text/plain".into()),
            ..PublishProps::default()
        };
        let e = event_of(&publish(b"hi", props), Protocol::V5, "dev", 1_000).unwrap();
        assert_eq!(
            e.extension(EXPIRY),
            Some(&ExtValue::Str("1970-01-01T00:01:01.000Z".into()))
        );
        assert_eq!(
            e.extension(RESPONSE_TOPIC),
            Some(&ExtValue::Str("replies.dev".into()))
        );
        assert_eq!(e.extension(CORRELATION), Some(&ExtValue::Str("c-1".into())));
        // 30.5 s left: 31 whole seconds, rounded up.
        let p = publish_of(&e.to_json(), "a.b", Protocol::V5, QoS::AtLeastOnce, 30_500).unwrap();
        assert_eq!(p.topic, "a/b");
        assert_eq!(p.payload, Bytes::from_static(b"hi"));
        assert_eq!(p.props.message_expiry, Some(31));
        assert_eq!(p.props.response_topic.as_deref(), Some("replies/dev"));
        assert_eq!(p.props.correlation_data, Some(Bytes::from_static(b"c-1")));
        assert_eq!(p.props.content_type.as_deref(), Some("text/plain"));
        // A request from the mesh, with no response topic of its own: the
        // reply topic.
        let mut request = e.clone();
        request.extensions.retain(|(n, _)| n != RESPONSE_TOPIC);
        let p = publish_of(&request.to_json(), "a.b", Protocol::V5, QoS::AtLeastOnce, 0).unwrap();
        assert_eq!(p.props.response_topic.as_deref(), Some(REPLY_TOPIC));
        assert_eq!(p.props.correlation_data, Some(Bytes::from_static(b"c-1")));
        // A plain event to MQTT 3.1.1: the payload as it came.
        let p = publish_of(&e.to_json(), "a.b", Protocol::V311, QoS::AtMostOnce, 0).unwrap();
        assert_eq!(
            (p.payload, p.props),
            (Bytes::from_static(b"hi"), PublishProps::default())
        );
    }

    #[test]
    fn other_events_go_out_in_binary_mode_or_structured_for_3_1_1() {
        let json = br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","subject":"x","data":{"n":1}}"#;
        let p = publish_of(json, "o.new", Protocol::V5, QoS::AtLeastOnce, 0).unwrap();
        assert_eq!(p.payload, Bytes::from_static(br#"{"n":1}"#));
        assert_eq!(p.props.content_type.as_deref(), Some("application/json"));
        assert_eq!(
            p.props.user,
            [
                ("specversion", "1.0"),
                ("id", "1"),
                ("source", "/s"),
                ("type", "t"),
                ("subject", "x")
            ]
            .map(|(a, b)| (a.to_string(), b.to_string()))
        );
        let p = publish_of(json, "o.new", Protocol::V311, QoS::AtLeastOnce, 0).unwrap();
        assert_eq!(p.payload, Bytes::from_static(json));
        assert_eq!(p.topic, "o/new");
    }
}
