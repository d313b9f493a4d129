//! Reading the structured JSON format without building a tree of the
//! payload: the attributes are read as small JSON values, `data` is kept as
//! the text it arrived as (a borrowed [`RawValue`]), so a large payload is
//! scanned once and copied once instead of parsed into a tree and written
//! out again.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::CoreError;

/// The attributes the specification names (and `data_base64`), each read
/// into a slot of its own; the rest are extensions.
const NAMED: [&str; 9] = [
    "specversion",
    "id",
    "source",
    "type",
    "datacontenttype",
    "dataschema",
    "subject",
    "time",
    "data_base64",
];

/// The slot of a named attribute: a `match` on the name, which compiles
/// to a switch on its length and one comparison, where a search of
/// [`NAMED`] compared it with each name in turn (twice per attribute: once
/// read, once taken).
fn slot(name: &str) -> Option<usize> {
    let i = match name {
        "specversion" => 0,
        "id" => 1,
        "source" => 2,
        "type" => 3,
        "datacontenttype" => 4,
        "dataschema" => 5,
        "subject" => 6,
        "time" => 7,
        "data_base64" => 8,
        _ => return None,
    };
    debug_assert_eq!(NAMED[i], name);
    Some(i)
}

/// An event's attributes as read, before they are checked.
#[derive(Default)]
pub(super) struct Attributes {
    named: [Option<Value>; NAMED.len()],
    extensions: Map<String, Value>,
}

impl Attributes {
    /// Sets an attribute; a name seen again keeps its last value, as a
    /// JSON object read into a map does.
    pub(super) fn insert(&mut self, name: Cow<'_, str>, value: Value) {
        match slot(&name) {
            Some(i) => self.named[i] = Some(value),
            None => {
                self.extensions.insert(name.into_owned(), value);
            }
        }
    }

    /// Takes the value of a named attribute (or an extension).
    pub(super) fn remove(&mut self, name: &str) -> Option<Value> {
        match slot(name) {
            Some(i) => self.named[i].take(),
            None => self.extensions.remove(name),
        }
    }

    /// The extensions, once the named attributes are taken.
    pub(super) fn into_extensions(self) -> Map<String, Value> {
        self.extensions
    }
}

impl FromIterator<(String, Value)> for Attributes {
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(items: I) -> Self {
        let mut attributes = Attributes::default();
        for (name, value) in items {
            attributes.insert(Cow::Owned(name), value);
        }
        attributes
    }
}

/// One event object, split into its attributes and its `data`.
pub(super) struct Parts<'a> {
    pub attributes: Attributes,
    pub data: Option<&'a RawValue>,
}

impl<'de> Deserialize<'de> for Parts<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(PartsVisitor)
    }
}

struct PartsVisitor;

impl<'de> Visitor<'de> for PartsVisitor {
    type Value = Parts<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parts<'de>, A::Error> {
        let mut attributes = Attributes::default();
        let mut data = None;
        while let Some(Name(name)) = map.next_key::<Name>()? {
            if name == "data" {
                data = Some(map.next_value::<&RawValue>()?);
            } else {
                attributes.insert(name, map.next_value()?);
            }
        }
        Ok(Parts { attributes, data })
    }
}

/// A member name, borrowed from the input unless it holds escapes.
struct Name<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(NameVisitor)
    }
}

struct NameVisitor;

impl<'de> Visitor<'de> for NameVisitor {
    type Value = Name<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Name<'de>, E> {
        Ok(Name(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Name<'de>, E> {
        Ok(Name(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Name<'de>, E> {
        Ok(Name(Cow::Owned(v)))
    }
}

/// A `data` member, as read.
pub(super) enum DataIn<'a> {
    Raw(&'a RawValue),
    Value(Value),
}

impl DataIn<'_> {
    pub(super) fn is_null(&self) -> bool {
        match self {
            DataIn::Raw(r) => r.get() == "null",
            DataIn::Value(v) => v.is_null(),
        }
    }

    /// The JSON string it holds, if it is one.
    pub(super) fn into_string(self) -> Result<String, Self> {
        match self {
            // A string already read as valid JSON: without escapes, what
            // lies between its quotes is its value.
            DataIn::Raw(r) if r.get().starts_with('"') && !r.get().contains('\\') => {
                let text = r.get();
                Ok(text[1..text.len() - 1].to_owned())
            }
            DataIn::Raw(r) if r.get().starts_with('"') => {
                serde_json::from_str(r.get()).map_err(|_| DataIn::Raw(r))
            }
            DataIn::Value(Value::String(s)) => Ok(s),
            other => Err(other),
        }
    }

    /// Its JSON text.
    pub(super) fn into_json(self) -> Result<Vec<u8>, CoreError> {
        match self {
            DataIn::Raw(r) => Ok(r.get().as_bytes().to_vec()),
            DataIn::Value(v) => {
                serde_json::to_vec(&v).map_err(|e| CoreError::InvalidEvent(e.to_string()))
            }
        }
    }
}

/// A JSON reading error: malformed JSON, or well-formed JSON of the wrong
/// shape (`shape` says what was expected).
pub(super) fn read_error(e: serde_json::Error, shape: &str) -> CoreError {
    match e.classify() {
        serde_json::error::Category::Data => CoreError::InvalidEvent(shape.to_string()),
        _ => CoreError::MalformedJson(format!("body is not valid JSON: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use crate::event::{CloudEvent, Data};
    use crate::CoreError;

    fn parse(text: &str) -> Result<CloudEvent, CoreError> {
        CloudEvent::from_json_slice(text.as_bytes())
    }

    const HEAD: &str = r#""specversion":"1.0","id":"1","source":"/s","type":"t""#;

    #[test]
    fn every_named_attribute_has_its_own_slot() {
        for (i, name) in super::NAMED.iter().enumerate() {
            assert_eq!(super::slot(name), Some(i));
        }
        assert_eq!(super::slot("Type"), None);
        assert_eq!(super::slot("data"), None);
    }

    #[test]
    fn json_data_is_kept_as_sent_and_reads_like_the_tree_form() {
        let text = format!(r#"{{{HEAD},"data":{{"b": [1, 2.50, "x\"y"]}}}}"#);
        let e = parse(&text).unwrap();
        assert_eq!(e.data, Data::Json(r#"{"b": [1, 2.50, "x\"y"]}"#.into()));
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        let from_tree = CloudEvent::from_json_value(value).unwrap();
        let as_json = |d: &Data| serde_json::from_slice::<serde_json::Value>(d.as_bytes()).unwrap();
        assert_eq!(as_json(&e.data), as_json(&from_tree.data));
    }

    #[test]
    fn a_string_of_a_non_json_type_is_text_unescaped() {
        let text = format!(r#"{{{HEAD},"datacontenttype":"text/plain","data":"a\nb \u00e9"}}"#);
        assert_eq!(parse(&text).unwrap().data, Data::Text("a\nb é".into()));
        // Without escapes the text is taken as it stands between the quotes.
        let text = format!(r#"{{{HEAD},"datacontenttype":"text/plain","data":"é x/y"}}"#);
        assert_eq!(parse(&text).unwrap().data, Data::Text("é x/y".into()));
        let text = format!(r#"{{{HEAD},"datacontenttype":"text/plain","data":""}}"#);
        assert_eq!(parse(&text).unwrap().data, Data::Text(String::new()));
        let text = format!(r#"{{{HEAD},"datacontenttype":"text/plain","data":7}}"#);
        assert_eq!(parse(&text).unwrap().data, Data::Json("7".into()));
    }

    #[test]
    fn null_data_counts_as_absent_on_either_side() {
        let text = format!(r#"{{{HEAD},"data":null,"data_base64":"aGk="}}"#);
        assert_eq!(parse(&text).unwrap().data, Data::Binary("hi".into()));
        let text = format!(r#"{{{HEAD},"data":{{"a":1}},"data_base64":null}}"#);
        assert_eq!(parse(&text).unwrap().data, Data::Json(r#"{"a":1}"#.into()));
        let text = format!(r#"{{{HEAD},"data":1,"data_base64":"aGk="}}"#);
        assert!(matches!(parse(&text), Err(CoreError::InvalidEvent(m)) if m.contains("both")));
    }

    #[test]
    fn shapes_and_syntax_are_told_apart() {
        assert!(
            matches!(parse("[1]"), Err(CoreError::InvalidEvent(m)) if m == "an event must be a JSON object")
        );
        assert!(matches!(
            parse("{\"id\":"),
            Err(CoreError::MalformedJson(_))
        ));
        let batch = |t: &str| CloudEvent::batch_from_json_slice(t.as_bytes());
        assert!(
            matches!(batch("{}"), Err(CoreError::InvalidEvent(m)) if m == "a batch must be a JSON array of events")
        );
        assert!(matches!(batch("[{},"), Err(CoreError::MalformedJson(_))));
        assert!(
            matches!(batch("[1]"), Err(CoreError::InvalidEvent(m)) if m == "event [0]: an event must be a JSON object")
        );
        assert_eq!(
            batch(&format!("[{{{HEAD}}}, {{{HEAD}}}]")).unwrap().len(),
            2
        );
    }

    #[test]
    fn json_data_is_judged_the_same_in_binary_and_structured_mode() {
        let headers = vec![
            ("ce-specversion", "1.0"),
            ("ce-id", "e"),
            ("ce-source", "/s"),
            ("ce-type", "t"),
        ];
        let binary = |body: &[u8]| {
            CloudEvent::from_binary_mode(
                headers.clone(),
                Some("application/json"),
                Bytes::copy_from_slice(body),
            )
        };
        let structured = |body: &[u8]| {
            let mut doc =
                br#"{"specversion":"1.0","id":"e","source":"/s","type":"t","data":"#.to_vec();
            doc.extend_from_slice(body);
            doc.push(b'}');
            CloudEvent::from_json_slice(&doc)
        };
        // Found by fuzzing: invalid UTF-8 inside a JSON string is refused
        // (it would break every reader of the stored event).
        let bad = &b"{\"a\xea\": [1, 2.5, null]}"[..];
        assert_eq!(binary(bad).unwrap_err().code(), "malformed_json");
        assert!(structured(bad).is_err());
        // Valid JSON text is kept as written in both modes, also where a
        // reader may not hold the value (a number beyond f64, a lone
        // surrogate escape).
        for body in [
            &br#"{"e":1e400}"#[..],
            &br#""\ud800""#[..],
            &b"[1, 2.50]"[..],
        ] {
            let (b, s) = (binary(body).unwrap(), structured(body).unwrap());
            assert_eq!(b.data, Data::Json(Bytes::copy_from_slice(body)));
            assert_eq!(s.data, b.data, "{}", String::from_utf8_lossy(body));
        }
    }
}
