//! A Redis stream entry: its id and the order of ids, reading entries out
//! of an `XREADGROUP` reply (RESP2 or RESP3), and the event an entry
//! becomes.
//!
//! Mapping of an entry: when it has the payload field (`field`, default
//! `data`), that field's value is the event `data` (JSON kept as JSON,
//! other UTF-8 as text, else bytes) and the other fields are not carried;
//! without it (or with `field: null`) the whole entry becomes a JSON object
//! of its fields, each value a string, or `{"base64": "..."}` for a value
//! that is not UTF-8 (a field given twice keeps its last value, as does
//! the payload field). The event `id` is `<stream>-<entry id>`, stable
//! across redelivery so a replay is dropped by the mesh's deduplication;
//! `type` is the configured `type`; extensions `redisstream` (the key) and
//! `redisid` (the entry id).
//!
//! Invariants: an entry id is `<ms>-<seq>`, both plain decimal `u64`s, and
//! ids compare as the stream orders them; an entry deleted while pending
//! is read as one without fields.

use base64::Engine as _;
use eventmesh_core::event::{Data, ExtValue};
use eventmesh_core::CloudEvent;
use redis::Value;
use serde_json::json;

use crate::sdk::{data_of, event, Position};

/// An entry id, `<milliseconds>-<sequence>`, ordered as the stream orders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct EntryId {
    pub ms: u64,
    pub seq: u64,
}

pub(super) fn digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl EntryId {
    /// Parses `<ms>-<seq>`.
    pub fn parse(s: &str) -> Option<EntryId> {
        let (ms, seq) = s.split_once('-')?;
        Some(EntryId {
            ms: digits(ms)?,
            seq: digits(seq)?,
        })
    }
}

/// The entry id of a source position `{"id": "<entry id>"}`.
pub fn position_id(position: &Position) -> Option<EntryId> {
    EntryId::parse(position.get("id")?.as_str()?)
}

// ---- reading replies -------------------------------------------------------

/// One stream entry as read; `fields` is `None` for an entry deleted while
/// pending.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub id: String,
    pub key: EntryId,
    pub fields: Option<Vec<(Vec<u8>, Vec<u8>)>>,
}

fn bytes_of(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) | Value::VerbatimString { text: s, .. } => Some(s.clone().into()),
        Value::Int(i) => Some(i.to_string().into_bytes()),
        _ => None,
    }
}

/// A flat `[name, value, ...]` list (or a RESP3 map) of strings.
fn pairs_of(v: &Value) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let flat: Vec<&Value> = match v {
        Value::Array(items) => items.iter().collect(),
        Value::Map(pairs) => pairs.iter().flat_map(|(k, v)| [k, v]).collect(),
        _ => return None,
    };
    if flat.len() % 2 != 0 {
        return None;
    }
    flat.chunks(2)
        .map(|p| Some((bytes_of(p[0])?, bytes_of(p[1])?)))
        .collect()
}

fn parse_entry(v: &Value) -> Result<Entry, String> {
    let Value::Array(parts) = v else {
        return Err("a stream entry is not an array".into());
    };
    let id = parts.first().and_then(bytes_of).unwrap_or_default();
    let id = String::from_utf8_lossy(&id).into_owned();
    let key = EntryId::parse(&id).ok_or_else(|| format!("entry id {id:?} is not <ms>-<seq>"))?;
    let fields = match parts.get(1) {
        None | Some(Value::Nil) => None,
        Some(f) => Some(pairs_of(f).ok_or_else(|| format!("entry {id}: fields are not strings"))?),
    };
    Ok(Entry { id, key, fields })
}

/// The entries of an `XREADGROUP` reply (RESP2 array or RESP3 map of
/// streams; nil when nothing came).
pub fn parse_read_reply(v: &Value) -> Result<Vec<Entry>, String> {
    let lists: Vec<&Value> = match v {
        Value::Nil => Vec::new(),
        Value::Array(streams) => streams
            .iter()
            .map(|s| match s {
                Value::Array(pair) if pair.len() == 2 => Ok(&pair[1]),
                _ => Err("a stream in the reply is not [key, entries]".to_string()),
            })
            .collect::<Result<_, _>>()?,
        Value::Map(streams) => streams.iter().map(|(_, entries)| entries).collect(),
        _ => return Err("the reply is not a list of streams".into()),
    };
    let mut out = Vec::new();
    for list in lists {
        match list {
            Value::Array(items) => out.extend(
                items
                    .iter()
                    .map(parse_entry)
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            Value::Nil => {}
            _ => return Err("a stream's entries are not an array".into()),
        }
    }
    Ok(out)
}

// ---- the event -------------------------------------------------------------

/// How an entry becomes an event (see the module docs).
#[derive(Debug, Clone)]
pub struct Mapping {
    pub connector: String,
    pub stream: String,
    pub field: Option<String>,
    pub ty: String,
}

impl Mapping {
    /// The event for entry `id` with `fields`.
    pub fn event(&self, id: &str, fields: &[(Vec<u8>, Vec<u8>)]) -> CloudEvent {
        let payload = self.field.as_ref().and_then(|name| {
            fields
                .iter()
                .rev()
                .find(|(k, _)| k.as_slice() == name.as_bytes())
        });
        let data = match payload {
            Some((_, value)) => data_of(value),
            None => {
                let mut object = serde_json::Map::new();
                for (k, v) in fields {
                    let value = match std::str::from_utf8(v) {
                        Ok(text) => json!(text),
                        Err(_) => json!({
                            "base64": base64::engine::general_purpose::STANDARD.encode(v)
                        }),
                    };
                    object.insert(String::from_utf8_lossy(k).into_owned(), value);
                }
                let text = serde_json::Value::Object(object).to_string();
                Data::Json(bytes::Bytes::from(text.into_bytes()))
            }
        };
        let mut ev = event(
            &self.connector,
            format!("{}-{id}", self.stream),
            &self.ty,
            data,
        );
        ev.set_extension("redisstream", ExtValue::Str(self.stream.clone()));
        ev.set_extension("redisid", ExtValue::Str(id.to_string()));
        ev
    }
}

#[cfg(test)]
mod tests {
    use super::super::default_type;
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn mapping(field: Option<&str>) -> Mapping {
        let (connector, stream, ty) = ("c1".into(), "orders".into(), default_type());
        let field = field.map(str::to_string);
        Mapping {
            connector,
            stream,
            field,
            ty,
        }
    }

    fn pairs(list: &[(&str, &[u8])]) -> Vec<(Vec<u8>, Vec<u8>)> {
        list.iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.to_vec()))
            .collect()
    }

    fn reply(entries: Vec<Value>) -> Value {
        Value::Array(vec![Value::Array(vec![bulk("s"), Value::Array(entries)])])
    }

    #[test]
    fn entry_ids_parse_and_order_as_the_stream() {
        let id = |s| EntryId::parse(s).unwrap();
        assert!(id("1700000000000-2") < id("1700000000000-10"));
        assert!(id("1700000000000-10") < id("1700000000001-0"));
        for bad in [
            "",
            "1",
            "1-",
            "-1",
            "+1-0",
            "1-0-0",
            "a-1",
            "1-18446744073709551616",
        ] {
            assert_eq!(EntryId::parse(bad), None, "{bad}");
        }
        assert_eq!(
            position_id(&json!({"id": "5-1"})),
            Some(EntryId { ms: 5, seq: 1 })
        );
        assert_eq!(position_id(&json!({"id": 5})), None);
        assert_eq!(position_id(&json!("5-1")), None);
    }

    #[test]
    fn read_replies_parse_in_both_protocols() {
        let fields = Value::Array(vec![bulk("data"), bulk("{}"), bulk("k"), Value::Int(7)]);
        let entries = vec![
            Value::Array(vec![bulk("1-0"), fields]),
            Value::Array(vec![bulk("2-0"), Value::Nil]),
        ];
        let resp3 = Value::Map(vec![(bulk("s"), Value::Array(entries.clone()))]);
        let want = vec![
            Entry {
                id: "1-0".into(),
                key: EntryId { ms: 1, seq: 0 },
                fields: Some(pairs(&[("data", b"{}"), ("k", b"7")])),
            },
            Entry {
                id: "2-0".into(),
                key: EntryId { ms: 2, seq: 0 },
                fields: None,
            },
        ];
        assert_eq!(parse_read_reply(&reply(entries)).unwrap(), want);
        assert_eq!(parse_read_reply(&resp3).unwrap(), want);
        assert_eq!(parse_read_reply(&Value::Nil).unwrap(), vec![]);
        let odd = Value::Array(vec![bulk("1-0"), Value::Array(vec![bulk("x")])]);
        assert!(parse_read_reply(&reply(vec![odd])).is_err());
        let bad_id = Value::Array(vec![bulk("x"), Value::Nil]);
        assert!(parse_read_reply(&reply(vec![bad_id])).is_err());
        assert!(parse_read_reply(&Value::Int(3)).is_err());
    }

    #[test]
    fn the_payload_field_becomes_the_data() {
        let m = mapping(Some("data"));
        let ev = m.event("7-1", &pairs(&[("data", b"{\"n\":1}"), ("other", b"x")]));
        assert_eq!(
            (ev.id.as_str(), ev.source.as_str()),
            ("orders-7-1", "/connectors/c1")
        );
        assert_eq!(ev.ty, "redis.stream.entry");
        assert_eq!(ev.data, Data::Json(bytes::Bytes::from_static(b"{\"n\":1}")));
        assert_eq!(ev.datacontenttype.as_deref(), Some("application/json"));
        let ext = |v: &str| ExtValue::Str(v.into());
        let want = vec![
            ("redisid".into(), ext("7-1")),
            ("redisstream".into(), ext("orders")),
        ];
        assert_eq!(ev.extensions, want);
        let text = m.event("7-2", &pairs(&[("data", b"hello"), ("data", b"again")]));
        assert_eq!(text.data, Data::Text("again".into()));
        let bin = m.event("7-3", &pairs(&[("data", &[0xff, 0x00])]));
        assert_eq!(
            bin.data,
            Data::Binary(bytes::Bytes::from_static(&[0xff, 0x00]))
        );
    }

    #[test]
    fn an_entry_without_the_payload_field_becomes_an_object() {
        for m in [mapping(Some("data")), mapping(None)] {
            let ev = m.event("9-0", &pairs(&[("a", b"1"), ("b", &[0xff]), ("a", b"2")]));
            let Data::Json(body) = &ev.data else {
                panic!("{:?}", ev.data)
            };
            let v: serde_json::Value = serde_json::from_slice(body).unwrap();
            assert_eq!(v, json!({"a": "2", "b": {"base64": "/w=="}}));
        }
        let whole = mapping(None).event("9-1", &pairs(&[("data", b"x")]));
        assert_eq!(
            whole.data,
            Data::Json(bytes::Bytes::from_static(b"{\"data\":\"x\"}"))
        );
    }
}
