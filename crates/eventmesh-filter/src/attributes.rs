//! The event as filters see it: a read-only view of context attributes.
//!
//! Filters never look at an event's `data`, only at its context attributes
//! and extensions, so they evaluate against the small [`Attributes`] trait
//! rather than a concrete event type. This crate implements it for the
//! decoded [`CloudEvent`]; the runtime can implement it for a lazily decoded
//! stored record without building a `CloudEvent` first.
//!
//! Invariants worth naming:
//! - Attribute names are lower-case (CloudEvents 1.0 naming: `a`-`z`,
//!   `0`-`9`). Filters lower-case names when they compile, so an
//!   implementation only ever sees lower-case names.
//! - The required attributes `specversion`, `id`, `source` and `type` are
//!   always present; `data` is never an attribute.
//! - [`AttrKey`] resolves the well-known context attributes once, at compile
//!   time, so an implementation can answer them with a `match` instead of
//!   comparing strings on every evaluation.

use eventmesh_core::{event::SPEC_VERSION, CloudEvent, ExtValue};

/// One attribute value, borrowed from the event.
///
/// Strings include the CloudEvents types that have a string form (URI,
/// URI-reference, timestamp).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrValue<'a> {
    Str(&'a str),
    Int(i64),
    Bool(bool),
}

/// A context attribute that every CloudEvent 1.0 defines (required or
/// optional), as opposed to an extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContextAttr {
    SpecVersion,
    Id,
    Source,
    Type,
    DataContentType,
    DataSchema,
    Subject,
    Time,
}

impl ContextAttr {
    /// The context attribute of that (lower-case) name, if it is one.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "specversion" => ContextAttr::SpecVersion,
            "id" => ContextAttr::Id,
            "source" => ContextAttr::Source,
            "type" => ContextAttr::Type,
            "datacontenttype" => ContextAttr::DataContentType,
            "dataschema" => ContextAttr::DataSchema,
            "subject" => ContextAttr::Subject,
            "time" => ContextAttr::Time,
            _ => return None,
        })
    }

    /// The attribute's name.
    pub fn name(self) -> &'static str {
        match self {
            ContextAttr::SpecVersion => "specversion",
            ContextAttr::Id => "id",
            ContextAttr::Source => "source",
            ContextAttr::Type => "type",
            ContextAttr::DataContentType => "datacontenttype",
            ContextAttr::DataSchema => "dataschema",
            ContextAttr::Subject => "subject",
            ContextAttr::Time => "time",
        }
    }

    /// True for the attributes every valid event carries.
    pub fn is_required(self) -> bool {
        matches!(
            self,
            ContextAttr::SpecVersion | ContextAttr::Id | ContextAttr::Source | ContextAttr::Type
        )
    }
}

/// An attribute name resolved once when a filter is compiled.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AttrKey {
    name: Box<str>,
    context: Option<ContextAttr>,
}

impl AttrKey {
    /// Resolves a name; it is lower-cased here (attribute names are
    /// case-insensitive in CESQL and lower-case in CloudEvents).
    pub fn new(name: &str) -> Self {
        let name: Box<str> = if name.bytes().any(|b| b.is_ascii_uppercase()) {
            name.to_ascii_lowercase().into()
        } else {
            name.into()
        };
        let context = ContextAttr::from_name(&name);
        AttrKey { name, context }
    }

    /// The lower-case name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The context attribute this names, or `None` for an extension.
    pub fn context(&self) -> Option<ContextAttr> {
        self.context
    }
}

/// Read access to an event's context attributes and extensions.
///
/// Object-safe: filters evaluate against `&dyn Attributes` as well as any
/// concrete implementation.
pub trait Attributes {
    /// The attribute of that lower-case name, or `None` when the event does
    /// not carry it.
    fn get(&self, name: &str) -> Option<AttrValue<'_>>;

    /// The attribute a pre-resolved key names. The default looks the name up
    /// with [`Attributes::get`]; implementations override it to answer the
    /// well-known context attributes without comparing names.
    fn get_key(&self, key: &AttrKey) -> Option<AttrValue<'_>> {
        self.get(key.name())
    }
}

impl<T: Attributes + ?Sized> Attributes for &T {
    fn get(&self, name: &str) -> Option<AttrValue<'_>> {
        (**self).get(name)
    }

    fn get_key(&self, key: &AttrKey) -> Option<AttrValue<'_>> {
        (**self).get_key(key)
    }
}

fn ext_value(v: &ExtValue) -> AttrValue<'_> {
    match v {
        ExtValue::Str(s) => AttrValue::Str(s),
        ExtValue::Int(i) => AttrValue::Int(*i),
        ExtValue::Bool(b) => AttrValue::Bool(*b),
    }
}

fn context_value(event: &CloudEvent, attr: ContextAttr) -> Option<AttrValue<'_>> {
    let s = match attr {
        ContextAttr::SpecVersion => SPEC_VERSION,
        ContextAttr::Id => &event.id,
        ContextAttr::Source => &event.source,
        ContextAttr::Type => &event.ty,
        ContextAttr::DataContentType => event.datacontenttype.as_deref()?,
        ContextAttr::DataSchema => event.dataschema.as_deref()?,
        ContextAttr::Subject => event.subject.as_deref()?,
        ContextAttr::Time => event.time.as_deref()?,
    };
    Some(AttrValue::Str(s))
}

impl Attributes for CloudEvent {
    fn get(&self, name: &str) -> Option<AttrValue<'_>> {
        match ContextAttr::from_name(name) {
            Some(attr) => context_value(self, attr),
            None => self.extension(name).map(ext_value),
        }
    }

    fn get_key(&self, key: &AttrKey) -> Option<AttrValue<'_>> {
        match key.context() {
            Some(attr) => context_value(self, attr),
            None => self.extension(key.name()).map(ext_value),
        }
    }
}

/// Writes an integer's decimal form into `buf` and returns it, without
/// allocating. Twenty bytes hold any `i64`.
pub(crate) fn int_str(n: i64, buf: &mut [u8; 20]) -> &str {
    let mut i = buf.len();
    let mut m = n.unsigned_abs();
    loop {
        i -= 1;
        buf[i] = b'0' + (m % 10) as u8;
        m /= 10;
        if m == 0 {
            break;
        }
    }
    if n < 0 {
        i -= 1;
        buf[i] = b'-';
    }
    // Only ASCII digits and '-' were written.
    std::str::from_utf8(&buf[i..]).unwrap_or("")
}

impl AttrValue<'_> {
    /// Calls `f` with the value's canonical string form: strings as they
    /// are, integers in decimal, booleans as `true`/`false`. Never allocates.
    pub fn with_str<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        match *self {
            AttrValue::Str(s) => f(s),
            AttrValue::Bool(b) => f(if b { "true" } else { "false" }),
            AttrValue::Int(n) => {
                let mut buf = [0u8; 20];
                f(int_str(n, &mut buf))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> CloudEvent {
        let mut ev = CloudEvent {
            id: "e1".into(),
            source: "/orders".into(),
            ty: "order.created".into(),
            subject: Some("o-17".into()),
            ..CloudEvent::default()
        };
        ev.set_extension("amount", ExtValue::Int(250));
        ev.set_extension("vip", ExtValue::Bool(true));
        ev.set_extension("region", ExtValue::Str("eu".into()));
        ev
    }

    #[test]
    fn cloud_event_answers_context_attributes_and_extensions() {
        let ev = event();
        assert_eq!(ev.get("specversion"), Some(AttrValue::Str("1.0")));
        assert_eq!(ev.get("id"), Some(AttrValue::Str("e1")));
        assert_eq!(ev.get("source"), Some(AttrValue::Str("/orders")));
        assert_eq!(ev.get("type"), Some(AttrValue::Str("order.created")));
        assert_eq!(ev.get("subject"), Some(AttrValue::Str("o-17")));
        assert_eq!(ev.get("time"), None);
        assert_eq!(ev.get("datacontenttype"), None);
        assert_eq!(ev.get("amount"), Some(AttrValue::Int(250)));
        assert_eq!(ev.get("vip"), Some(AttrValue::Bool(true)));
        assert_eq!(ev.get("region"), Some(AttrValue::Str("eu")));
        assert_eq!(ev.get("data"), None);
        assert_eq!(ev.get("missing"), None);
    }

    #[test]
    fn keys_are_lower_cased_and_resolved() {
        let key = AttrKey::new("TYPE");
        assert_eq!(key.name(), "type");
        assert_eq!(key.context(), Some(ContextAttr::Type));
        let ext = AttrKey::new("Amount");
        assert_eq!(ext.name(), "amount");
        assert_eq!(ext.context(), None);
        let ev = event();
        assert_eq!(ev.get_key(&key), Some(AttrValue::Str("order.created")));
        assert_eq!(ev.get_key(&ext), Some(AttrValue::Int(250)));
        let dynamic: &dyn Attributes = &ev;
        assert_eq!(dynamic.get_key(&ext), Some(AttrValue::Int(250)));
    }

    #[test]
    fn string_forms_need_no_allocation() {
        let mut buf = [0u8; 20];
        assert_eq!(int_str(0, &mut buf), "0");
        assert_eq!(int_str(-7, &mut buf), "-7");
        assert_eq!(int_str(i64::MIN, &mut buf), "-9223372036854775808");
        assert_eq!(int_str(i64::MAX, &mut buf), "9223372036854775807");
        assert_eq!(AttrValue::Int(-42).with_str(str::to_owned), "-42");
        assert_eq!(AttrValue::Bool(false).with_str(str::to_owned), "false");
        assert_eq!(AttrValue::Str("x").with_str(str::to_owned), "x");
    }
}
