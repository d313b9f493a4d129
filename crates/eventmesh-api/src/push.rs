//! Decoding a subscription's push settings from the wire: the camelCase
//! keys of a subscribe body (`contentMode`, `batchSize`, `batchLingerMs`,
//! `webhookHandshake`) and the lower-case keys of a Subscriptions API
//! subscription's `protocolsettings` (`contentmode`, `batchsize`,
//! `batchlingerms`, `webhookhandshake`). Both take JSON values or their
//! string forms (`"10"`, `"false"`), and both are checked by the one rule
//! ([`PushSettings::check`]).
//!
//! Invariant: every refusal is a 400 whose message starts with the field
//! as the caller spelled it (`batchSize`, `protocolsettings.batchsize`)
//! and names the value.

use eventmesh_state::push_settings::MAX_BATCH_SIZE;
use eventmesh_state::{ContentMode, PushSettings};
use serde_json::Value;

use crate::ApiError;

/// The four settings as given (`None`: left out), each with the name the
/// caller knows it by.
#[derive(Debug, Default)]
pub struct PushFields<'a> {
    pub content_mode: Option<&'a Value>,
    pub batch_size: Option<&'a Value>,
    pub batch_linger_ms: Option<&'a Value>,
    pub webhook_handshake: Option<&'a Value>,
}

/// How the caller names the fields: camelCase (subscribe bodies) or the
/// Subscriptions API's `protocolsettings.<lowercase>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    Body,
    ProtocolSettings,
}

impl Naming {
    fn name(self, camel: &str) -> String {
        match self {
            Naming::Body => camel.to_string(),
            Naming::ProtocolSettings => format!("protocolsettings.{}", camel.to_ascii_lowercase()),
        }
    }

    fn code(self) -> &'static str {
        match self {
            Naming::Body => "invalid_request",
            Naming::ProtocolSettings => "invalid_subscription",
        }
    }

    fn invalid(self, camel: &str, message: impl std::fmt::Display) -> ApiError {
        ApiError::bad_request(self.code(), format!("{}: {message}", self.name(camel)))
    }
}

fn whole(v: &Value, field: &str, naming: Naming) -> Result<u64, ApiError> {
    let n = match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse::<u64>().ok(),
        _ => None,
    };
    n.ok_or_else(|| naming.invalid(field, format!("{v} is not a whole number (0 or more)")))
}

impl PushFields<'_> {
    /// The settings, checked; `webhook`: the subscription has a URL.
    pub fn parse(&self, naming: Naming, webhook: bool) -> Result<PushSettings, ApiError> {
        let mut s = PushSettings::default();
        if let Some(v) = self.content_mode {
            let text = v.as_str().ok_or_else(|| {
                naming.invalid(
                    "contentMode",
                    format!("{v} is not a string (binary, structured or batch)"),
                )
            })?;
            s.content_mode =
                ContentMode::parse(text).map_err(|m| naming.invalid("contentMode", m))?;
        }
        if let Some(v) = self.batch_size {
            let n = whole(v, "batchSize", naming)?;
            s.batch_size = Some(u32::try_from(n).map_err(|_| {
                naming.invalid(
                    "batchSize",
                    format!("{n} is out of range: 1 to {MAX_BATCH_SIZE} events per push"),
                )
            })?);
        }
        if let Some(v) = self.batch_linger_ms {
            s.batch_linger_ms = Some(whole(v, "batchLingerMs", naming)?);
        }
        if let Some(v) = self.webhook_handshake {
            let b = match v {
                Value::Bool(b) => Some(*b),
                Value::String(t) if t.eq_ignore_ascii_case("true") => Some(true),
                Value::String(t) if t.eq_ignore_ascii_case("false") => Some(false),
                _ => None,
            };
            s.webhook_handshake = Some(b.ok_or_else(|| {
                naming.invalid("webhookHandshake", format!("{v} is not true or false"))
            })?);
        }
        s.check(webhook)
            .map_err(|e| naming.invalid(e.field, e.message))?;
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value, naming: Naming) -> Result<PushSettings, (u16, String, String)> {
        let f = PushFields {
            content_mode: v.get("contentMode"),
            batch_size: v.get("batchSize"),
            batch_linger_ms: v.get("batchLingerMs"),
            webhook_handshake: v.get("webhookHandshake"),
        };
        f.parse(naming, true)
            .map_err(|e| (e.status.as_u16(), e.code.to_string(), e.message))
    }

    #[test]
    fn values_and_their_string_forms() {
        let s = parse(
            json!({"contentMode": "batch", "batchSize": "5", "batchLingerMs": 0, "webhookHandshake": "false"}),
            Naming::ProtocolSettings,
        )
        .unwrap();
        assert_eq!(
            s,
            PushSettings {
                content_mode: ContentMode::Batch,
                batch_size: Some(5),
                batch_linger_ms: Some(0),
                webhook_handshake: Some(false),
            }
        );
        assert_eq!(
            parse(json!({}), Naming::Body).unwrap(),
            PushSettings::default()
        );
    }

    #[test]
    fn refusals_name_the_field_and_value() {
        let e = parse(
            json!({"contentMode": "batch", "batchSize": 0}),
            Naming::Body,
        )
        .unwrap_err();
        assert_eq!(
            e,
            (
                400,
                "invalid_request".into(),
                "batchSize: 0 is out of range: 1 to 1000 events per push".into()
            )
        );
        let e = parse(json!({"contentMode": "xml"}), Naming::ProtocolSettings).unwrap_err();
        assert_eq!(
            e,
            (
                400,
                "invalid_subscription".into(),
                "protocolsettings.contentmode: \"xml\" is not a content mode (binary, structured or batch)".into()
            )
        );
        let e = parse(
            json!({"contentMode": "batch", "batchLingerMs": -1}),
            Naming::Body,
        )
        .unwrap_err();
        assert_eq!(e.2, "batchLingerMs: -1 is not a whole number (0 or more)");
        let e = parse(
            json!({"contentMode": "batch", "batchSize": 5000000000u64}),
            Naming::Body,
        )
        .unwrap_err();
        assert_eq!(
            e.2,
            "batchSize: 5000000000 is out of range: 1 to 1000 events per push"
        );
        let e = parse(json!({"webhookHandshake": "maybe"}), Naming::Body).unwrap_err();
        assert_eq!(e.2, "webhookHandshake: \"maybe\" is not true or false");
    }
}
