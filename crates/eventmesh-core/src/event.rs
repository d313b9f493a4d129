//! The CloudEvents 1.0 model, its JSON event format (single events and
//! batches), and its HTTP binary mode.
//!
//! Parsing validates everything the specification requires (required context
//! attributes, the `1.0` spec version, RFC 3339 times, RFC 2046 media types,
//! extension naming and types, `data` and `data_base64` being exclusive), so
//! that an accepted event can always be written back out in either mode.
//! Binary-mode header values follow the HTTP protocol binding 1.0.2
//! (section 3.1.3.2): written percent-encoded, read back through quoted-string
//! unescaping and one round of percent-decoding that must yield UTF-8, so
//! `decode(encode(v)) == v` for every attribute value.

use std::borrow::Cow;

use base64::Engine as _;
use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::CoreError;

mod header;
mod parse;
mod timing;
pub use header::{decode_header_value, percent_encode};
use parse::{read_error, Attributes, DataIn, Parts};
use timing::check_schedule;

/// The only spec version this runtime speaks.
pub const SPEC_VERSION: &str = "1.0";

/// Extension attribute carrying the partition key.
pub const PARTITION_KEY: &str = "partitionkey";
/// The CloudEvents expiry time extension: after it, the event is not
/// delivered (see `docs/expiry.md`).
pub const EXPIRY_TIME: &str = "expirytime";
/// Scheduled delivery: the event is held back until this RFC 3339 time
/// (see `docs/scheduling.md`).
pub const DELIVER_AT: &str = "deliverat";
/// Scheduled delivery: the event is held back this long (an ISO 8601
/// duration such as `PT30S`) after it is published.
pub const DELIVER_AFTER: &str = "deliverafter";

/// The value of an extension attribute, in the types the JSON format carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtValue {
    Str(String),
    Bool(bool),
    Int(i64),
}

impl ExtValue {
    /// The canonical string form (used in HTTP headers).
    pub fn to_text(&self) -> String {
        match self {
            ExtValue::Str(s) => s.clone(),
            ExtValue::Bool(b) => b.to_string(),
            ExtValue::Int(i) => i.to_string(),
        }
    }
}

/// An event's payload, kept in the form it arrived in.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Data {
    #[default]
    None,
    /// Serialized JSON text (a JSON value of any kind).
    Json(Bytes),
    /// A text payload (JSON string in structured mode).
    Text(String),
    /// Opaque bytes (`data_base64` in structured mode).
    Binary(Bytes),
}

impl Data {
    /// The payload bytes as sent in HTTP binary mode.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Data::None => &[],
            Data::Json(b) | Data::Binary(b) => b,
            Data::Text(s) => s.as_bytes(),
        }
    }
}

/// One CloudEvent 1.0.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CloudEvent {
    pub id: String,
    pub source: String,
    pub ty: String,
    pub datacontenttype: Option<String>,
    pub dataschema: Option<String>,
    pub subject: Option<String>,
    /// RFC 3339 timestamp, kept as sent.
    pub time: Option<String>,
    /// Extension attributes, sorted by name.
    pub extensions: Vec<(String, ExtValue)>,
    pub data: Data,
}

fn invalid(msg: impl Into<String>) -> CoreError {
    CoreError::InvalidEvent(msg.into())
}

/// True for media types whose payload is JSON.
pub fn is_json_media_type(ct: &str) -> bool {
    let essence = ct.split(';').next().unwrap_or("").trim().as_bytes();
    let ends_with = |suffix: &[u8]| {
        essence.len() >= suffix.len()
            && essence[essence.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
    };
    essence.eq_ignore_ascii_case(b"application/json")
        || essence.eq_ignore_ascii_case(b"text/json")
        || ends_with(b"+json")
}

fn check_media_type(attr: &str, ct: &str) -> Result<(), CoreError> {
    let essence = ct.split(';').next().unwrap_or("").trim();
    let ok = match essence.split_once('/') {
        Some((t, s)) => {
            let token = |x: &str| {
                !x.is_empty()
                    && x.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
            };
            token(t) && token(s)
        }
        None => false,
    };
    if ok {
        Ok(())
    } else {
        Err(invalid(format!(
            "{attr} {ct:?} is not an RFC 2046 media type (type/subtype)"
        )))
    }
}

fn check_time(t: &str) -> Result<(), CoreError> {
    chrono::DateTime::parse_from_rfc3339(t)
        .map(|_| ())
        .map_err(|e| invalid(format!("time {t:?} is not an RFC 3339 timestamp: {e}")))
}

fn check_uri_ref(attr: &str, v: &str) -> Result<(), CoreError> {
    if v.is_empty() {
        return Err(invalid(format!("{attr} must not be empty")));
    }
    if v.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid(format!(
            "{attr} {v:?} is not a URI reference (contains whitespace)"
        )));
    }
    Ok(())
}

/// Extension names are lower-case ASCII letters and digits.
pub fn valid_extension_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

impl CloudEvent {
    /// Parses one event in the structured JSON format.
    pub fn from_json_slice(body: &[u8]) -> Result<Self, CoreError> {
        let parts: Parts = serde_json::from_slice(body)
            .map_err(|e| read_error(e, "an event must be a JSON object"))?;
        Self::from_parts(parts.attributes, parts.data.map(DataIn::Raw))
    }

    /// Parses a batch (`application/cloudevents-batch+json`): a JSON array of
    /// structured events. An empty array is a valid batch (of no events), as
    /// the JSON batch format says. The whole batch is rejected if any event
    /// is invalid, and the message names the failing index.
    pub fn batch_from_json_slice(body: &[u8]) -> Result<Vec<Self>, CoreError> {
        let items: Vec<&RawValue> = serde_json::from_slice(body)
            .map_err(|e| read_error(e, "a batch must be a JSON array of events"))?;
        items
            .into_iter()
            .enumerate()
            .map(|(i, raw)| {
                Self::from_json_slice(raw.get().as_bytes()).map_err(|e| match e {
                    CoreError::InvalidEvent(m) => invalid(format!("event [{i}]: {m}")),
                    other => other,
                })
            })
            .collect()
    }

    /// Validates and converts one JSON value in the structured format.
    pub fn from_json_value(value: Value) -> Result<Self, CoreError> {
        let Value::Object(mut map) = value else {
            return Err(invalid("an event must be a JSON object"));
        };
        let data = map.remove("data").map(DataIn::Value);
        Self::from_parts(map.into_iter().collect(), data)
    }

    /// Validates the attributes and the `data` of one event.
    fn from_parts(mut map: Attributes, data: Option<DataIn>) -> Result<Self, CoreError> {
        let required = |map: &mut Attributes, name: &str| -> Result<String, CoreError> {
            match map.remove(name) {
                Some(Value::String(s)) if !s.is_empty() => Ok(s),
                Some(Value::String(_)) => Err(invalid(format!("{name} must not be empty"))),
                None | Some(Value::Null) => {
                    Err(invalid(format!("missing required attribute {name}")))
                }
                Some(_) => Err(invalid(format!("{name} must be a string"))),
            }
        };
        let optional = |map: &mut Attributes, name: &str| -> Result<Option<String>, CoreError> {
            match map.remove(name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if !s.is_empty() => Ok(Some(s)),
                Some(Value::String(_)) => Err(invalid(format!("{name} must not be empty"))),
                Some(_) => Err(invalid(format!("{name} must be a string"))),
            }
        };
        let specversion = required(&mut map, "specversion")?;
        if specversion != SPEC_VERSION {
            return Err(invalid(format!(
                "specversion {specversion:?} is not supported; use \"1.0\""
            )));
        }
        let id = required(&mut map, "id")?;
        let source = required(&mut map, "source")?;
        check_uri_ref("source", &source)?;
        let ty = required(&mut map, "type")?;
        let datacontenttype = optional(&mut map, "datacontenttype")?;
        if let Some(ct) = &datacontenttype {
            check_media_type("datacontenttype", ct)?;
        }
        let dataschema = optional(&mut map, "dataschema")?;
        if let Some(s) = &dataschema {
            check_uri_ref("dataschema", s)?;
        }
        let subject = optional(&mut map, "subject")?;
        let time = optional(&mut map, "time")?;
        if let Some(t) = &time {
            check_time(t)?;
        }
        // A null `data` or `data_base64` is as good as absent.
        let data = data.filter(|d| !d.is_null());
        let data = match (data, map.remove("data_base64").filter(|b| !b.is_null())) {
            (Some(_), Some(_)) => {
                return Err(invalid("an event must not carry both data and data_base64"))
            }
            (None, Some(Value::String(b64))) => Data::Binary(Bytes::from(
                base64::engine::general_purpose::STANDARD
                    .decode(b64.as_bytes())
                    .map_err(|e| invalid(format!("data_base64 is not valid base64: {e}")))?,
            )),
            (None, Some(_)) => return Err(invalid("data_base64 must be a string")),
            (None, None) => Data::None,
            (Some(d), None) if !datacontenttype.as_deref().is_none_or(is_json_media_type) => {
                match d.into_string() {
                    Ok(s) => Data::Text(s),
                    Err(d) => Data::Json(Bytes::from(d.into_json()?)),
                }
            }
            (Some(d), None) => Data::Json(Bytes::from(d.into_json()?)),
        };
        let map = map.into_extensions();
        let mut extensions = Vec::with_capacity(map.len());
        for (name, v) in map {
            if !valid_extension_name(&name) {
                return Err(invalid(format!(
                    "extension attribute name {name:?} must be lower-case letters and digits"
                )));
            }
            let ev = match v {
                Value::Null => continue,
                Value::String(s) => ExtValue::Str(s),
                Value::Bool(b) => ExtValue::Bool(b),
                Value::Number(n) => match n.as_i64() {
                    Some(i) if i32::try_from(i).is_ok() => ExtValue::Int(i),
                    _ => {
                        return Err(invalid(format!(
                            "extension {name} must be a 32-bit integer, not {n}"
                        )))
                    }
                },
                _ => {
                    return Err(invalid(format!(
                        "extension {name} must be a string, boolean or integer"
                    )))
                }
            };
            extensions.push((name, ev));
        }
        extensions.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some((_, v)) = extensions.iter().find(|(n, _)| n == EXPIRY_TIME) {
            match v {
                ExtValue::Str(t) => chrono::DateTime::parse_from_rfc3339(t)
                    .map(|_| ())
                    .map_err(|e| {
                        invalid(format!(
                            "expirytime {t:?} is not an RFC 3339 timestamp: {e}"
                        ))
                    })?,
                _ => return Err(invalid("expirytime must be an RFC 3339 timestamp string")),
            }
        }
        check_schedule(&extensions)?;
        Ok(CloudEvent {
            id,
            source,
            ty,
            datacontenttype,
            dataschema,
            subject,
            time,
            extensions,
            data,
        })
    }

    /// Builds an event from HTTP binary mode: `ce-*` headers (names in any
    /// case, values decoded here by [`decode_header_value`]), the
    /// `content-type` header and the body.
    pub fn from_binary_mode<'a>(
        headers: impl IntoIterator<Item = (&'a str, &'a str)>,
        content_type: Option<&str>,
        body: Bytes,
    ) -> Result<Self, CoreError> {
        let mut attributes = Vec::new();
        for (name, value) in headers {
            let lower = name.to_ascii_lowercase();
            let Some(attr) = lower.strip_prefix("ce-") else {
                continue;
            };
            let decoded = decode_header_value(value)
                .map_err(|e| invalid(format!("header ce-{attr}: {e}")))?;
            attributes.push((attr.to_string(), decoded));
        }
        Self::from_attributes(attributes, content_type, body)
    }

    /// Builds an event from its attributes as (name, canonical string
    /// value) pairs, as a binary mode carries them (HTTP headers once
    /// decoded, MQTT 5 user properties), the content type and the data.
    /// `data`, `data_base64` and `datacontenttype` among the attributes are
    /// ignored: the content type and the data stand for them.
    pub fn from_attributes(
        attrs: impl IntoIterator<Item = (String, String)>,
        content_type: Option<&str>,
        body: Bytes,
    ) -> Result<Self, CoreError> {
        let mut attributes = Attributes::default();
        for (name, value) in attrs {
            if matches!(name.as_str(), "data" | "data_base64" | "datacontenttype") {
                continue;
            }
            attributes.insert(Cow::Owned(name), Value::String(value));
        }
        if let Some(ct) = content_type {
            attributes.insert(
                Cow::Borrowed("datacontenttype"),
                Value::String(ct.to_string()),
            );
        }
        let mut event = Self::from_parts(attributes, None)?;
        event.data = if body.is_empty() {
            Data::None
        } else if content_type.is_some_and(is_json_media_type) {
            // The same check as the structured mode's `data`: JSON syntax
            // with UTF-8 strings, numbers of any size kept as written.
            serde_json::from_slice::<&RawValue>(&body).map_err(|e| {
                CoreError::MalformedJson(format!("body is declared JSON but is not: {e}"))
            })?;
            Data::Json(body)
        } else if content_type.is_some_and(|c| c.trim_start().starts_with("text/")) {
            match String::from_utf8(body.to_vec()) {
                Ok(s) => Data::Text(s),
                Err(_) => Data::Binary(body),
            }
        } else {
            Data::Binary(body)
        };
        Ok(event)
    }

    /// The `partitionkey` extension, when it is a string.
    pub fn partition_key(&self) -> Option<&str> {
        self.extension(PARTITION_KEY).and_then(|v| match v {
            ExtValue::Str(s) => Some(s.as_str()),
            _ => None,
        })
    }

    /// Sets (or replaces) one extension attribute, keeping them sorted.
    pub fn set_extension(&mut self, name: &str, value: ExtValue) {
        match self
            .extensions
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
        {
            Ok(i) => self.extensions[i].1 = value,
            Err(i) => self.extensions.insert(i, (name.to_string(), value)),
        }
    }

    /// Looks up one extension attribute.
    pub fn extension(&self, name: &str) -> Option<&ExtValue> {
        self.extensions
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|i| &self.extensions[i].1)
    }

    /// Writes the event in the structured JSON format.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        use crate::json_str::write as s;
        fn field(out: &mut Vec<u8>, name: &str, v: &str) {
            out.push(b',');
            s(out, name);
            out.push(b':');
            s(out, v);
        }
        out.extend_from_slice(b"{\"specversion\":\"1.0\"");
        field(out, "id", &self.id);
        field(out, "source", &self.source);
        field(out, "type", &self.ty);
        for (name, v) in [
            ("datacontenttype", &self.datacontenttype),
            ("dataschema", &self.dataschema),
            ("subject", &self.subject),
            ("time", &self.time),
        ] {
            if let Some(v) = v {
                field(out, name, v);
            }
        }
        for (name, v) in &self.extensions {
            match v {
                ExtValue::Str(x) => field(out, name, x),
                ExtValue::Bool(b) => {
                    out.push(b',');
                    s(out, name);
                    out.extend_from_slice(if *b { b":true" } else { b":false" });
                }
                ExtValue::Int(i) => {
                    out.push(b',');
                    s(out, name);
                    out.push(b':');
                    out.extend_from_slice(i.to_string().as_bytes());
                }
            }
        }
        match &self.data {
            Data::None => {}
            Data::Json(raw) => {
                out.extend_from_slice(b",\"data\":");
                out.extend_from_slice(raw);
            }
            Data::Text(t) => field(out, "data", t),
            Data::Binary(b) => {
                field(
                    out,
                    "data_base64",
                    &base64::engine::general_purpose::STANDARD.encode(b),
                );
            }
        }
        out.push(b'}');
    }

    /// The structured JSON form as a fresh buffer.
    pub fn to_json(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(256 + self.data.as_bytes().len());
        self.write_json(&mut v);
        v
    }

    /// HTTP binary-mode headers (`ce-*`, values percent-encoded where needed)
    /// and the `content-type` to send with [`Data::as_bytes`] as the body.
    pub fn binary_mode_headers(&self) -> (Vec<(String, String)>, Option<String>) {
        let mut h = vec![
            ("ce-specversion".to_string(), SPEC_VERSION.to_string()),
            ("ce-id".to_string(), percent_encode(&self.id)),
            ("ce-source".to_string(), percent_encode(&self.source)),
            ("ce-type".to_string(), percent_encode(&self.ty)),
        ];
        for (name, v) in [
            ("ce-dataschema", &self.dataschema),
            ("ce-subject", &self.subject),
            ("ce-time", &self.time),
        ] {
            if let Some(v) = v {
                h.push((name.to_string(), percent_encode(v)));
            }
        }
        for (name, v) in &self.extensions {
            h.push((format!("ce-{name}"), percent_encode(&v.to_text())));
        }
        (h, self.content_type())
    }

    /// The media type of the data: `datacontenttype`, else the one its
    /// kind implies (`None` without data).
    pub fn content_type(&self) -> Option<String> {
        self.datacontenttype.clone().or_else(|| match self.data {
            Data::Json(_) => Some("application/json".to_string()),
            Data::Text(_) => Some("text/plain; charset=utf-8".to_string()),
            Data::Binary(_) => Some("application/octet-stream".to_string()),
            Data::None => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minimal() -> serde_json::Value {
        serde_json::json!({"specversion":"1.0","id":"1","source":"/s","type":"t"})
    }

    #[test]
    fn json_media_types_by_their_essence_in_any_case() {
        for ct in [
            "application/json",
            "Application/JSON; charset=utf-8",
            " text/json ",
            "application/cloudevents+json",
            "application/VND.API+JSON;v=1",
        ] {
            assert!(is_json_media_type(ct), "{ct}");
        }
        for ct in [
            "text/plain",
            "application/jsonx",
            "+jso",
            "",
            "json",
            "application/json+xml",
        ] {
            assert!(!is_json_media_type(ct), "{ct}");
        }
    }

    #[test]
    fn structured_round_trip() {
        let mut v = minimal();
        v["data"] = serde_json::json!({"a": [1, 2]});
        v["partitionkey"] = "k1".into();
        v["count"] = 3.into();
        v["flag"] = true.into();
        v["time"] = "2018-04-05T17:31:00Z".into();
        let e = CloudEvent::from_json_value(v.clone()).unwrap();
        assert_eq!(e.partition_key(), Some("k1"));
        assert_eq!(e.extension("count"), Some(&ExtValue::Int(3)));
        let back: serde_json::Value = serde_json::from_slice(&e.to_json()).unwrap();
        assert_eq!(back, v);
    }

    #[test]
    fn text_and_binary_data() {
        let mut v = minimal();
        v["datacontenttype"] = "text/plain".into();
        v["data"] = "hello".into();
        let e = CloudEvent::from_json_value(v).unwrap();
        assert_eq!(e.data, Data::Text("hello".into()));
        let mut v = minimal();
        v["data_base64"] = "AAEC".into();
        let e = CloudEvent::from_json_value(v.clone()).unwrap();
        assert_eq!(e.data, Data::Binary(Bytes::from_static(&[0, 1, 2])));
        let back: serde_json::Value = serde_json::from_slice(&e.to_json()).unwrap();
        assert_eq!(back, v);
    }

    #[test]
    fn rejects_invalid() {
        let cases = [
            (
                serde_json::json!({"id":"1","source":"/s","type":"t"}),
                "specversion",
            ),
            (
                serde_json::json!({"specversion":"0.3","id":"1","source":"/s","type":"t"}),
                "0.3",
            ),
            (
                serde_json::json!({"specversion":"1.0","id":7,"source":"/s","type":"t"}),
                "id",
            ),
            (
                serde_json::json!({"specversion":"1.0","id":"1","source":"/s","type":"t","time":"2018-04-05T18:31Z"}),
                "time",
            ),
            (
                serde_json::json!({"specversion":"1.0","id":"1","source":"/s","type":"t","time":"2018-04-05T18:31:00+25:00"}),
                "time",
            ),
            (
                serde_json::json!({"specversion":"1.0","id":"1","source":"/s","type":"t","time":"2018-04-05T18:31:00+05"}),
                "time",
            ),
            (
                serde_json::json!({"specversion":"1.0","id":"1","source":"/s","type":"t","Ext":"x"}),
                "Ext",
            ),
            (
                serde_json::json!({"specversion":"1.0","id":"1","source":"/s","type":"t","ext":1.5}),
                "ext",
            ),
            (
                serde_json::json!({"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"xyz"}),
                "xyz",
            ),
            (
                serde_json::json!({"specversion":"1.0","id":"1","source":"/s","type":"t","data":"a","data_base64":"AA=="}),
                "both",
            ),
        ];
        for (v, needle) in cases {
            let e = CloudEvent::from_json_value(v.clone()).unwrap_err();
            assert!(e.to_string().contains(needle), "{v}: {e}");
            assert_eq!(e.code(), "invalid_event");
        }
        assert_eq!(
            CloudEvent::from_json_slice(b"{nope").unwrap_err().code(),
            "malformed_json"
        );
    }

    #[test]
    fn batch_names_failing_index() {
        let body = serde_json::to_vec(&serde_json::json!([minimal(), {"id":"x"}])).unwrap();
        let e = CloudEvent::batch_from_json_slice(&body).unwrap_err();
        assert!(e.to_string().contains("[1]"), "{e}");
        let ok = serde_json::to_vec(&serde_json::json!([minimal(), minimal()])).unwrap();
        assert_eq!(CloudEvent::batch_from_json_slice(&ok).unwrap().len(), 2);
    }

    #[test]
    fn binary_mode_round_trip() {
        let headers = [
            ("Ce-Id", "42"),
            ("ce-source", "/src"),
            ("ce-type", "t"),
            ("ce-specversion", "1.0"),
            ("ce-partitionkey", "caf%C3%A9"),
            ("x-other", "ignored"),
        ];
        let e = CloudEvent::from_binary_mode(
            headers,
            Some("application/json"),
            Bytes::from_static(b"{\"x\":1}"),
        )
        .unwrap();
        assert_eq!(e.partition_key(), Some("café"));
        assert_eq!(e.data, Data::Json(Bytes::from_static(b"{\"x\":1}")));
        let (h, ct) = e.binary_mode_headers();
        assert_eq!(ct.as_deref(), Some("application/json"));
        assert!(h.contains(&("ce-partitionkey".into(), "caf%C3%A9".into())));
        let bad = CloudEvent::from_binary_mode(
            [
                ("ce-id", "1"),
                ("ce-source", "/s"),
                ("ce-type", "t"),
                ("ce-specversion", "1.0"),
            ],
            Some("application/json"),
            Bytes::from_static(b"{oops"),
        )
        .unwrap_err();
        assert_eq!(bad.code(), "malformed_json");
        let missing = CloudEvent::from_binary_mode([("ce-id", "1")], None, Bytes::new());
        assert!(missing.is_err());
    }

    #[test]
    fn an_empty_batch_is_valid() {
        assert_eq!(CloudEvent::batch_from_json_slice(b"[]").unwrap(), vec![]);
        assert_eq!(CloudEvent::batch_from_json_slice(b" [ ] ").unwrap(), vec![]);
        let e = CloudEvent::batch_from_json_slice(b"{}").unwrap_err();
        assert_eq!(e.to_string(), "a batch must be a JSON array of events");
        assert_eq!(
            CloudEvent::batch_from_json_slice(b"[").unwrap_err().code(),
            "malformed_json"
        );
    }

    #[test]
    fn binary_mode_headers_are_encoded_and_decoded() {
        let mut e = CloudEvent::from_json_value(serde_json::json!({
            "specversion": "1.0",
            "id": "id 1",
            "source": "/s",
            "type": "t\"x\"",
            "subject": "50% off",
            "time": "2018-04-05T17:31:00Z",
            "note": "café au lait",
        }))
        .unwrap();
        e.set_extension("count", ExtValue::Int(7));
        let (h, ct) = e.binary_mode_headers();
        assert_eq!(ct, None);
        let expected: Vec<(String, String)> = [
            ("ce-specversion", "1.0"),
            ("ce-id", "id%201"),
            ("ce-source", "/s"),
            ("ce-type", "t%22x%22"),
            ("ce-subject", "50%25%20off"),
            ("ce-time", "2018-04-05T17:31:00Z"),
            ("ce-count", "7"),
            ("ce-note", "caf%C3%A9%20au%20lait"),
        ]
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
        assert_eq!(h, expected);
        let back = CloudEvent::from_binary_mode(
            h.iter().map(|(n, v)| (n.as_str(), v.as_str())),
            None,
            Bytes::new(),
        )
        .unwrap();
        assert_eq!(back.id, "id 1");
        assert_eq!(back.ty, "t\"x\"");
        assert_eq!(back.subject.as_deref(), Some("50% off"));
        assert_eq!(
            back.extension("note"),
            Some(&ExtValue::Str("café au lait".into()))
        );
        // Binary mode carries every extension as a string.
        assert_eq!(back.extension("count"), Some(&ExtValue::Str("7".into())));
    }

    #[test]
    fn binary_mode_refuses_undecodable_header_values() {
        let with = |name: &'static str, value: &'static str| {
            let headers = [
                ("ce-specversion", "1.0"),
                ("ce-id", "1"),
                ("ce-source", "/s"),
                ("ce-type", "t"),
                (name, value),
            ];
            CloudEvent::from_binary_mode(headers, None, Bytes::new())
        };
        let e = with("ce-subject", "%C0%A0").unwrap_err();
        assert_eq!(e.code(), "invalid_event");
        assert_eq!(
            e.to_string(),
            "header ce-subject: \"%C0%A0\" percent-decodes to bytes that are not UTF-8"
        );
        // Double quotes are part of the value, not quoting.
        let ok = with("Ce-Note", "\"open").unwrap();
        assert_eq!(ok.extension("note"), Some(&ExtValue::Str("\"open".into())));
        let ok = with("ce-subject", "\"a b\"").unwrap();
        assert_eq!(ok.subject.as_deref(), Some("\"a b\""));
    }

    #[test]
    fn expirytime_must_be_a_timestamp_and_gives_the_expiry() {
        let with = |t: serde_json::Value| {
            CloudEvent::from_json_value(serde_json::json!({
                "specversion": "1.0", "id": "1", "source": "/s", "type": "t", "expirytime": t
            }))
        };
        let e = with("2026-12-05T10:00:00.5+01:00".into()).unwrap();
        assert_eq!(e.expires_at_ms(), Some(1_796_461_200_500));
        for bad in [
            serde_json::json!("soon"),
            serde_json::json!(5),
            serde_json::json!(true),
        ] {
            let err = with(bad.clone()).unwrap_err();
            assert_eq!(err.code(), "invalid_event", "{bad}");
            assert!(err.to_string().contains("expirytime"), "{err}");
        }
        let none = CloudEvent::from_json_value(serde_json::json!({
            "specversion": "1.0", "id": "1", "source": "/s", "type": "t"
        }))
        .unwrap();
        assert_eq!(none.expires_at_ms(), None);
    }
}
