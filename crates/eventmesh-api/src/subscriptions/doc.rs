//! The CloudEvents Subscriptions API's subscription object: decoding a
//! proposed one (create, update) into a webhook subscription of the
//! runtime, and showing a stored one. Field names are those of the
//! specification's OpenAPI document.
//!
//! The mapping:
//! - `source` names the topic whose events are delivered;
//! - `sink` is the webhook URL (checked by the webhook guard when
//!   subscribing, see `webhook.rs`), `protocol` must be `HTTP`;
//! - `protocolsettings.headers` go with every push, `method` is `POST`;
//!   `protocolsettings.contentmode` (`binary`, the default, `structured`
//!   or `batch`), `batchsize`, `batchlingerms` and `webhookhandshake` are
//!   the runtime's push settings (see `crate::push`), shown with their
//!   defaults applied;
//! - `sinkcredential`: `ACCESSTOKEN` (bearer) and `PLAIN` (basic) become
//!   the `Authorization` header of every push;
//! - `types` becomes one filter `{"any": [{"exact": {"type": t}}, ...]}`
//!   before the `filters` given, all of which must match;
//! - `config.from` (`latest`, the default, or `earliest`) is where a new
//!   subscription starts reading;
//! - the runtime's client id and group are both `sub-<id>`, load-balanced.
//!
//! Invariants:
//! - Every refusal is a 400 whose message starts with the path of the
//!   field at fault (`sink`, `types[1]`, `protocolsettings.headers.host`,
//!   `filters[0].sql`).
//! - A secret (`accesstoken`, `secret`) is never shown; an update that
//!   leaves it out keeps the stored one, if the credential is otherwise
//!   the same kind (and, for `PLAIN`, the same identifier).

use std::collections::BTreeMap;

use axum::http::{HeaderName, HeaderValue};
use base64::Engine;
use eventmesh_runtime::SubscribeRequest;
use eventmesh_state::{
    ContentMode, DeliveryMode, PushSettings, StartFrom, Subscription, SubscriptionSpec,
};
use serde_json::{json, Map, Value};

use crate::push::{Naming, PushFields};
use crate::ApiError;

/// The one delivery protocol this subscription manager offers.
pub const PROTOCOL: &str = "HTTP";

/// The properties of a subscription object.
const FIELDS: [&str; 9] = [
    "id",
    "source",
    "types",
    "config",
    "filters",
    "sink",
    "sinkcredential",
    "protocol",
    "protocolsettings",
];

/// The protocols of the specification this manager does not deliver over.
const OTHER_PROTOCOLS: [&str; 5] = ["MQTT3", "MQTT5", "AMQP", "NATS", "KAFKA"];

/// Headers a subscription may not set: those of the push itself (the
/// event's `ce-*` attributes, its content type, the delivery ids, the
/// handshake's origin, the trace context) and of the connection.
const RESERVED_HEADERS: [&str; 13] = [
    "content-type",
    "content-length",
    "content-encoding",
    "transfer-encoding",
    "connection",
    "host",
    "te",
    "upgrade",
    "eventmesh-delivery-id",
    "eventmesh-delivery-ids",
    "webhook-request-origin",
    "traceparent",
    "tracestate",
];

/// The runtime's client id (and group) of the subscription `id`.
pub fn client_id(id: &str) -> String {
    format!("sub-{id}")
}

fn invalid(field: &str, message: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request("invalid_subscription", format!("{field}: {message}"))
}

fn unsupported(field: &str, message: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request("unsupported_setting", format!("{field}: {message}"))
}

/// The sink credential of a proposed subscription.
#[derive(Debug, Clone, PartialEq)]
pub enum Credential {
    None,
    /// The `Authorization` value to send, and the fields shown.
    Given {
        authorization: String,
        shown: BTreeMap<String, String>,
    },
    /// The secret was left out: the stored credential stays, if it is the
    /// one these shown fields describe.
    Keep {
        shown: BTreeMap<String, String>,
    },
}

/// A proposed subscription, checked field by field.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposed {
    /// The `id` the body carries (ignored on create).
    pub id: Option<String>,
    pub topic: String,
    pub sink: String,
    pub headers: BTreeMap<String, String>,
    pub credential: Credential,
    pub types: Vec<String>,
    pub filters: Vec<Value>,
    /// `config.from`.
    pub from: StartFrom,
    /// `protocolsettings.contentmode`, `batchsize`, `batchlingerms`,
    /// `webhookhandshake`.
    pub push: PushSettings,
}

fn string<'v>(v: &'v Value, field: &str) -> Result<&'v str, ApiError> {
    v.as_str()
        .ok_or_else(|| invalid(field, format!("must be a string, not {v}")))
}

fn object<'v>(v: &'v Value, field: &str) -> Result<&'v Map<String, Value>, ApiError> {
    v.as_object()
        .ok_or_else(|| invalid(field, format!("must be an object, not {v}")))
}

/// A string map (`protocolsettings.headers`, `config`).
fn strings(v: &Value, field: &str) -> Result<BTreeMap<String, String>, ApiError> {
    object(v, field)?
        .iter()
        .map(|(k, v)| {
            let path = format!("{field}.{k}");
            if k.is_empty() {
                return Err(invalid(field, "a key must not be empty"));
            }
            Ok((k.clone(), string(v, &path)?.to_string()))
        })
        .collect()
}

impl Proposed {
    /// Decodes and checks a subscription object (a create's or an
    /// update's body). The sink's address is checked by the webhook guard
    /// later, and the filters' expressions here.
    pub fn parse(body: &Value) -> Result<Proposed, ApiError> {
        let body = body.as_object().ok_or_else(|| {
            ApiError::bad_request(
                "invalid_subscription",
                "a subscription must be a JSON object",
            )
        })?;
        if let Some(k) = body.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(invalid(
                k,
                format!(
                    "not a property of a subscription (those are {})",
                    FIELDS.join(", ")
                ),
            ));
        }
        let field = |name: &str| body.get(name).filter(|v| !v.is_null());
        let protocol = field("protocol").ok_or_else(|| invalid("protocol", "is required"))?;
        match string(protocol, "protocol")? {
            PROTOCOL => {}
            p if OTHER_PROTOCOLS.contains(&p) => {
                return Err(ApiError::bad_request(
                    "unsupported_protocol",
                    format!("protocol: {p} is not supported; this subscription manager delivers over HTTP only"),
                ))
            }
            p => {
                return Err(ApiError::bad_request(
                    "unsupported_protocol",
                    format!("protocol: {p:?} is not a protocol this subscription manager knows; use HTTP (protocols are case sensitive)"),
                ))
            }
        }
        let sink = string(
            field("sink").ok_or_else(|| invalid("sink", "is required"))?,
            "sink",
        )?;
        if sink.is_empty() {
            return Err(invalid("sink", "must not be empty"));
        }
        let topic = string(
            field("source").ok_or_else(|| {
                invalid(
                    "source",
                    "is required: it names the topic whose events the subscription delivers",
                )
            })?,
            "source",
        )?;
        eventmesh_core::pattern::parse_subscription_topic(topic)
            .map_err(|e| ApiError::bad_request(e.code(), format!("source: {e}")))?;
        let id = field("id").map(|v| string(v, "id")).transpose()?;
        let (headers, push) = match field("protocolsettings") {
            Some(v) => http_settings(v)?,
            None => (BTreeMap::new(), PushSettings::default()),
        };
        let credential = match field("sinkcredential") {
            Some(v) => credential(v)?,
            None => Credential::None,
        };
        if credential != Credential::None {
            if let Some(name) = headers
                .keys()
                .find(|n| n.eq_ignore_ascii_case("authorization"))
            {
                return Err(invalid(
                    &format!("protocolsettings.headers.{name}"),
                    "the sinkcredential sets the Authorization header; give one or the other",
                ));
            }
        }
        let types = match field("types") {
            Some(v) => types(v)?,
            None => Vec::new(),
        };
        let filters = match field("filters") {
            Some(Value::Array(f)) => f.clone(),
            Some(v) => {
                return Err(ApiError::bad_request(
                    "invalid_filter",
                    format!("filters: must be an array of filter objects, not {v}"),
                ))
            }
            None => Vec::new(),
        };
        eventmesh_runtime::filters::compile(&filters)
            .map_err(|m| ApiError::bad_request("invalid_filter", m))?;
        let config = match field("config") {
            Some(v) => strings(v, "config")?,
            None => BTreeMap::new(),
        };
        let mut from = StartFrom::Latest;
        for (k, v) in &config {
            match (k.as_str(), v.as_str()) {
                ("from", v) => {
                    from = StartFrom::parse(v).map_err(|m| invalid("config.from", m))?;
                }
                (k, _) => {
                    return Err(unsupported(
                        &format!("config.{k}"),
                        "not a setting of this subscription manager (its one setting is from: latest, earliest or an RFC 3339 time)",
                    ))
                }
            }
        }
        Ok(Proposed {
            id: id.map(str::to_string),
            topic: topic.to_string(),
            sink: sink.to_string(),
            headers,
            credential,
            types,
            filters,
            from,
            push,
        })
    }

    /// The runtime's subscribe request for the subscription `id`; `stored`
    /// is the subscription it replaces (an update), whose secret an update
    /// may keep.
    pub fn into_request(
        self,
        id: &str,
        stored: Option<&Subscription>,
    ) -> Result<SubscribeRequest, ApiError> {
        let mut headers = self.headers;
        let credential = match self.credential {
            Credential::None => None,
            Credential::Given {
                authorization,
                shown,
            } => {
                headers.insert("Authorization".into(), authorization);
                Some(shown)
            }
            Credential::Keep { shown } => {
                let authorization = stored
                    .filter(|s| {
                        s.spec.as_ref().and_then(|spec| spec.credential.as_ref()).is_some_and(
                            |c| {
                                c.get("credentialtype") == shown.get("credentialtype")
                                    && c.get("identifier") == shown.get("identifier")
                            },
                        )
                    })
                    .and_then(|s| s.headers.get("Authorization"))
                    .ok_or_else(|| {
                        let secret = match shown.get("credentialtype").map(String::as_str) {
                            Some("PLAIN") => "secret",
                            _ => "accesstoken",
                        };
                        invalid(
                            &format!("sinkcredential.{secret}"),
                            "is required (it may be left out only to keep the stored one of the same credential)",
                        )
                    })?;
                headers.insert("Authorization".into(), authorization.clone());
                Some(shown)
            }
        };
        let mut filters = Vec::with_capacity(self.filters.len() + 1);
        if !self.types.is_empty() {
            let any: Vec<Value> = self
                .types
                .iter()
                .map(|t| json!({"exact": {"type": t}}))
                .collect();
            filters.push(json!({ "any": any }));
        }
        filters.extend(self.filters.iter().cloned());
        let client = client_id(id);
        Ok(SubscribeRequest {
            client_id: client.clone(),
            topic: self.topic,
            group: Some(client),
            mode: Some(DeliveryMode::LoadBalance),
            url: Some(self.sink),
            from: Some(self.from),
            filters,
            subscription_id: Some(id.to_string()),
            // Set by the operation layer from the gate's admission.
            roles: Vec::new(),
            headers,
            push: self.push,
            spec: Some(SubscriptionSpec {
                types: self.types,
                filters: self.filters,
                credential,
            }),
        })
    }
}

/// `protocolsettings` of HTTP: `headers` and `method` (`POST` only), and
/// the push settings.
fn http_settings(v: &Value) -> Result<(BTreeMap<String, String>, PushSettings), ApiError> {
    let mut headers = BTreeMap::new();
    let mut push = PushFields::default();
    for (k, v) in object(v, "protocolsettings")? {
        let path = format!("protocolsettings.{k}");
        match k.as_str() {
            "method" => {
                let m = string(v, &path)?;
                if m != "POST" {
                    return Err(unsupported(
                        &path,
                        format!(
                            "{m:?} is not supported; events are delivered with POST (the default)"
                        ),
                    ));
                }
            }
            "headers" => headers = push_headers(v)?,
            "contentmode" => push.content_mode = Some(v),
            "batchsize" => push.batch_size = Some(v),
            "batchlingerms" => push.batch_linger_ms = Some(v),
            "webhookhandshake" => push.webhook_handshake = Some(v),
            _ => {
                return Err(invalid(
                    &path,
                    "not an HTTP setting (those are headers, method, contentmode, batchsize, batchlingerms and webhookhandshake)",
                ))
            }
        }
    }
    let push = push.parse(Naming::ProtocolSettings, true)?;
    Ok((headers, push))
}

fn push_headers(v: &Value) -> Result<BTreeMap<String, String>, ApiError> {
    let headers = strings(v, "protocolsettings.headers")?;
    let mut seen = std::collections::HashSet::new();
    for (name, value) in &headers {
        let path = format!("protocolsettings.headers.{name}");
        let lower = name.to_ascii_lowercase();
        if HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(invalid(&path, "is not a valid HTTP header name"));
        }
        if HeaderValue::from_str(value).is_err() {
            return Err(invalid(
                &path,
                "is not a valid HTTP header value (visible ASCII, spaces and tabs)",
            ));
        }
        if RESERVED_HEADERS.contains(&lower.as_str()) || lower.starts_with("ce-") {
            return Err(invalid(
                &path,
                "is set by the push itself (the event's ce-* attributes, its content type, the delivery id, the trace context, the connection)",
            ));
        }
        if !seen.insert(lower) {
            return Err(invalid(
                &path,
                "is given twice (header names are case-insensitive)",
            ));
        }
    }
    Ok(headers)
}

fn types(v: &Value) -> Result<Vec<String>, ApiError> {
    let list = v
        .as_array()
        .ok_or_else(|| invalid("types", format!("must be an array of strings, not {v}")))?;
    if list.is_empty() {
        return Err(invalid(
            "types",
            "must list at least one type (leave it out to take every type)",
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, t)| {
            let path = format!("types[{i}]");
            match string(t, &path)? {
                "" => Err(invalid(&path, "must not be empty")),
                t => Ok(t.to_string()),
            }
        })
        .collect()
}

/// `sinkcredential`: `ACCESSTOKEN` (bearer) or `PLAIN` (basic).
fn credential(v: &Value) -> Result<Credential, ApiError> {
    let fields = object(v, "sinkcredential")?;
    let get = |k: &str| -> Result<Option<&str>, ApiError> {
        fields
            .get(k)
            .filter(|v| !v.is_null())
            .map(|v| string(v, &format!("sinkcredential.{k}")))
            .transpose()
    };
    let kind = get("credentialtype")?
        .ok_or_else(|| invalid("sinkcredential.credentialtype", "is required"))?;
    let known: &[&str] = match kind {
        "ACCESSTOKEN" => &[
            "credentialtype",
            "accesstoken",
            "accesstokentype",
            "accesstokenexpiresutc",
        ],
        "PLAIN" => &["credentialtype", "identifier", "secret"],
        "REFRESHTOKEN" => {
            return Err(unsupported(
                "sinkcredential.credentialtype",
                "REFRESHTOKEN is not supported (tokens are not refreshed); give an ACCESSTOKEN",
            ))
        }
        k => {
            return Err(unsupported(
                "sinkcredential.credentialtype",
                format!("{k:?} is not supported; use ACCESSTOKEN or PLAIN"),
            ))
        }
    };
    if let Some(k) = fields.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(invalid(
            &format!("sinkcredential.{k}"),
            format!(
                "not a field of the {kind} credential (those are {})",
                known.join(", ")
            ),
        ));
    }
    let mut shown = BTreeMap::from([("credentialtype".to_string(), kind.to_string())]);
    if kind == "PLAIN" {
        let identifier = get("identifier")?
            .ok_or_else(|| invalid("sinkcredential.identifier", "is required"))?;
        if identifier.contains(':') {
            return Err(invalid(
                "sinkcredential.identifier",
                "must not contain ':' (it is sent as HTTP basic authentication)",
            ));
        }
        shown.insert("identifier".into(), identifier.into());
        return Ok(match get("secret")? {
            Some(secret) => Credential::Given {
                authorization: format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD
                        .encode(format!("{identifier}:{secret}"))
                ),
                shown,
            },
            None => Credential::Keep { shown },
        });
    }
    let token_type = get("accesstokentype")?.unwrap_or("bearer");
    if !token_type.eq_ignore_ascii_case("bearer") {
        return Err(unsupported(
            "sinkcredential.accesstokentype",
            format!("{token_type:?} is not supported; tokens are sent as bearer tokens"),
        ));
    }
    shown.insert("accesstokentype".into(), token_type.into());
    if let Some(expires) = get("accesstokenexpiresutc")? {
        let at = chrono::DateTime::parse_from_rfc3339(expires).map_err(|e| {
            invalid(
                "sinkcredential.accesstokenexpiresutc",
                format!("{expires:?} is not an RFC 3339 timestamp: {e}"),
            )
        })?;
        if at.timestamp_millis() < i64::try_from(eventmesh_core::time::now_ms()).unwrap_or(i64::MAX)
        {
            return Err(invalid(
                "sinkcredential.accesstokenexpiresutc",
                format!("{expires} is past: the token has expired"),
            ));
        }
        shown.insert("accesstokenexpiresutc".into(), expires.into());
    }
    Ok(match get("accesstoken")? {
        Some("") => return Err(invalid("sinkcredential.accesstoken", "must not be empty")),
        Some(token) => {
            if HeaderValue::from_str(token).is_err() {
                return Err(invalid(
                    "sinkcredential.accesstoken",
                    "is not valid in an HTTP header (visible ASCII)",
                ));
            }
            Credential::Given {
                authorization: format!("Bearer {token}"),
                shown,
            }
        }
        None => Credential::Keep { shown },
    })
}

/// A subscription as the Subscriptions API shows it (its secrets left
/// out), with the defaults applied: `protocolsettings.method` and
/// `config.from`.
pub fn render(sub: &Subscription) -> Value {
    let spec = sub.spec.clone().unwrap_or_default();
    let p = &sub.push;
    let mut settings = json!({"method": "POST", "contentmode": p.content_mode});
    if p.content_mode == ContentMode::Batch {
        settings["batchsize"] = json!(p.batch_size());
        settings["batchlingerms"] = json!(p.batch_linger_ms());
    }
    if let Some(h) = p.webhook_handshake {
        settings["webhookhandshake"] = json!(h);
    }
    let headers: Map<String, Value> = sub
        .headers
        .iter()
        .filter(|(n, _)| spec.credential.is_none() || !n.eq_ignore_ascii_case("authorization"))
        .map(|(n, v)| (n.clone(), Value::String(v.clone())))
        .collect();
    if !headers.is_empty() {
        settings["headers"] = Value::Object(headers);
    }
    let from = sub.from.to_string();
    let mut doc = json!({
        "id": sub.subscription_id,
        "source": sub.topic,
        "config": {"from": from},
        "sink": sub.url,
        "protocol": PROTOCOL,
        "protocolsettings": settings,
    });
    if !spec.types.is_empty() {
        doc["types"] = json!(spec.types);
    }
    if !spec.filters.is_empty() {
        doc["filters"] = json!(spec.filters);
    }
    if let Some(c) = &spec.credential {
        doc["sinkcredential"] = json!(c);
    }
    doc
}

#[cfg(test)]
#[path = "doc_tests.rs"]
mod tests;
