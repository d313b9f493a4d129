//! A connector's definition: what the admin API accepts, what the meta
//! store keeps (`/em/connectors/defs/<name>`), and what is shown back
//! (secrets in the config redacted).
//!
//! Invariant: a redaction placeholder given back in a definition is never
//! stored as a value: it takes the stored secret at its path, or the
//! change is refused.

use eventmesh_connect::{Kind, Role};
use eventmesh_security::Identity;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use eventmesh_api::ApiError;

/// Where definitions live.
pub const DEFS_PREFIX: &str = "/em/connectors/defs/";

pub fn def_key(name: &str) -> String {
    format!("{DEFS_PREFIX}{name}")
}

/// A stored definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Definition {
    pub name: String,
    pub kind: String,
    pub config: Value,
    /// The topic a source publishes to, or a sink consumes.
    pub topic: String,
    /// A sink's consumer group (default `connector.<name>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// A sink's subscription filters (CloudEvents Subscriptions API filter
    /// objects): it receives only the events they all match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filters: Vec<Value>,
    /// A mesh link's exports, the first one's topic also in `topic`; empty
    /// for every other kind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exports: Vec<Export>,
    /// Who the connector acts as before the gate (default `connector:<name>`).
    pub principal: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default)]
    pub paused: bool,
    /// Whether the hosts the connector connects to are checked against
    /// `eventmesh.webhook.denied.cidrs` (`"targetGuard": false` opts out).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub target_guard: bool,
    /// Grows at every change: a running copy whose generation is behind
    /// restarts with the new definition.
    pub generation: u64,
    pub created_ms: u64,
    pub updated_ms: u64,
}

/// What a sink consumes: a topic or a topic pattern, and the filters
/// an event must match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Export {
    pub topic: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filters: Vec<Value>,
}

pub(crate) fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

impl Definition {
    /// The identity its events are published and consumed under.
    pub fn identity(&self) -> Identity {
        Identity {
            tenant: self.tenant.clone(),
            principal: Some(self.principal.clone()),
            roles: Vec::new(),
        }
    }

    /// A sink's client id.
    pub fn client_id(&self) -> String {
        format!("connector.{}", self.name)
    }

    /// A sink's consumer group.
    pub fn group(&self) -> String {
        self.group.clone().unwrap_or_else(|| self.client_id())
    }

    /// What a sink subscribes to: a link's exports, or its one topic.
    pub fn subscriptions(&self) -> Vec<Export> {
        if self.exports.is_empty() {
            vec![Export {
                topic: self.topic.clone(),
                filters: self.filters.clone(),
            }]
        } else {
            self.exports.clone()
        }
    }

    /// The definition as shown: secrets in the config replaced
    /// ([`eventmesh_core::redact::json`]), and an `http-source` signature
    /// stored without a scheme shown with the one it has (`body`).
    pub fn redacted(&self) -> Definition {
        let mut config = eventmesh_core::redact::json(&self.config);
        if self.kind == eventmesh_connect::kinds::http::KIND {
            eventmesh_connect::kinds::http::show_stored(&mut config);
        }
        Definition {
            config,
            ..self.clone()
        }
    }

    /// What a message (an error, a status) may echo of this connector's
    /// secrets, hidden.
    pub fn redact_message(&self, message: &str) -> String {
        eventmesh_core::redact::message(message, &eventmesh_core::redact::secrets_of(&self.config))
    }
}

/// The `subscription` form of a sink's topic and group.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionBody {
    pub topic: String,
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub filters: Option<Vec<Value>>,
}

/// A create (`POST /admin/connectors`) or update (`PUT .../{name}`) body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DefinitionBody {
    #[serde(default)]
    pub name: Option<String>,
    pub kind: String,
    #[serde(default)]
    pub config: Option<Value>,
    #[serde(default)]
    pub topic: Option<String>,
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub subscription: Option<SubscriptionBody>,
    /// A sink's filters (also accepted inside `subscription`).
    #[serde(default)]
    pub filters: Option<Vec<Value>>,
    /// A mesh link's exports (instead of `topic` or `subscription`).
    #[serde(default)]
    pub exports: Option<Vec<Export>>,
    #[serde(default)]
    pub principal: Option<String>,
    #[serde(default)]
    pub tenant: Option<String>,
    #[serde(default)]
    pub paused: bool,
    /// `false`: the connector may reach the ranges of
    /// `eventmesh.webhook.denied.cidrs`.
    #[serde(default = "yes", rename = "targetGuard")]
    pub target_guard: bool,
}

fn invalid(field: &str, message: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request("invalid_connector", format!("{field}: {message}"))
}

/// Names: 1 to 64 of `A-Z a-z 0-9 . _ -`, not starting with `.`.
pub fn check_name(name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            "name",
            format!("{name:?} must be 1 to 64 of A-Z a-z 0-9 . _ - (not starting with .)"),
        ))
    }
}

impl DefinitionBody {
    /// Checks the body against its kind and makes the definition it asks
    /// for (generation and times left to the caller). `stored` is the
    /// config the definition has now (an update): each redaction
    /// placeholder the body gives back takes the stored value at its path;
    /// a placeholder with nothing stored there is refused.
    pub fn into_definition(
        self,
        name: String,
        kinds: &[Kind],
        stored: Option<&Value>,
    ) -> Result<Definition, ApiError> {
        check_name(&name)?;
        let kind = kinds
            .iter()
            .find(|k| k.name() == self.kind)
            .ok_or_else(|| {
                let names: Vec<&str> = kinds.iter().map(Kind::name).collect();
                invalid(
                    "kind",
                    format!(
                        "{:?} is not a connector kind (one of: {})",
                        self.kind,
                        names.join(", ")
                    ),
                )
            })?;
        let is_link = kind.name() == crate::link::KIND;
        let exports = match self.exports {
            Some(_) if !is_link => {
                return Err(invalid(
                    "exports",
                    format!("only a {} has exports", crate::link::KIND),
                ))
            }
            Some(_) if self.topic.is_some() || self.subscription.is_some() => {
                return Err(invalid("exports", "give exports, or topic, not both"))
            }
            Some(exports) => check_exports(exports)?,
            None => Vec::new(),
        };
        let (topic, subscription) = match exports.first() {
            Some(first) => (Some(first.topic.clone()), None),
            None => (self.topic, self.subscription),
        };
        let (topic, group, filters) = match (topic, subscription) {
            (Some(_), Some(_)) => {
                return Err(invalid("topic", "give topic or subscription, not both"))
            }
            (Some(t), None) => (t, self.group, self.filters),
            (None, Some(_)) if self.group.is_some() => {
                return Err(invalid("group", "give the group inside subscription"))
            }
            (None, Some(s)) if self.filters.is_some() && s.filters.is_some() => {
                return Err(invalid(
                    "filters",
                    "give the filters inside subscription or beside it, not both",
                ))
            }
            (None, Some(s)) => (s.topic, s.group, s.filters.or(self.filters)),
            (None, None) => return Err(invalid("topic", "missing")),
        };
        let filters = filters.unwrap_or_default();
        if !filters.is_empty() {
            if kind.role() == Role::Source {
                return Err(invalid("filters", "only a sink's subscription has filters"));
            }
            crate::check_filters(&filters)
                .map_err(|e| ApiError::bad_request("invalid_connector", e))?;
        }
        let (exports, filters) = match (is_link, exports.is_empty()) {
            (true, true) => (
                check_exports(vec![Export {
                    topic: topic.clone(),
                    filters,
                }])?,
                Vec::new(),
            ),
            (true, false) => (exports, Vec::new()),
            // A pulling link publishes to the topics its imports name here.
            (false, _) if kind.name() == crate::link::pull::KIND => {
                eventmesh_core::pattern::parse_subscription_topic(&topic)
                    .map_err(|e| invalid("topic", e))?;
                (Vec::new(), filters)
            }
            (false, _) => {
                eventmesh_core::topic::validate_topic(&topic).map_err(|e| invalid("topic", e))?;
                (Vec::new(), filters)
            }
        };
        if let Some(g) = &group {
            if kind.role() == Role::Source {
                return Err(invalid("group", "only a sink consumes as a group"));
            }
            check_group(g)?;
        }
        let mut config = self
            .config
            .unwrap_or_else(|| Value::Object(Default::default()));
        eventmesh_core::redact::restore_json(&mut config, stored).map_err(|path| {
            invalid(
                &format!("config.{path}"),
                format!(
                    "{:?} stands for a stored secret, and none is stored there; give the value",
                    eventmesh_core::redact::PLACEHOLDER
                ),
            )
        })?;
        if kind.name() == eventmesh_connect::kinds::http::KIND {
            eventmesh_connect::kinds::http::complete_new(&mut config);
        }
        kind.check(&config).map_err(|e| {
            let secrets = eventmesh_core::redact::secrets_of(&config);
            ApiError::bad_request(
                "invalid_connector",
                eventmesh_core::redact::message(&e, &secrets),
            )
        })?;
        let principal = match self.principal {
            Some(p) if p.trim().is_empty() => {
                return Err(invalid("principal", "must not be empty"))
            }
            Some(p) => p,
            None => format!("connector:{name}"),
        };
        Ok(Definition {
            name,
            kind: self.kind,
            config,
            topic,
            group,
            filters,
            exports,
            principal,
            tenant: self.tenant.filter(|t| !t.is_empty()),
            paused: self.paused,
            target_guard: self.target_guard,
            generation: 0,
            created_ms: 0,
            updated_ms: 0,
        })
    }
}

/// Checks a link's exports: 1 to 64, each a topic or a pattern given
/// once, with filters that compile.
pub(crate) fn check_exports(exports: Vec<Export>) -> Result<Vec<Export>, ApiError> {
    if exports.is_empty() || exports.len() > 64 {
        return Err(invalid(
            "exports",
            format!("{} given; give 1 to 64", exports.len()),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for (i, e) in exports.iter().enumerate() {
        let at = format!("exports[{i}].topic");
        eventmesh_core::pattern::parse_subscription_topic(&e.topic).map_err(|m| invalid(&at, m))?;
        if !seen.insert(e.topic.as_str()) {
            return Err(invalid(&at, format!("{:?} is exported twice", e.topic)));
        }
        crate::check_filters(&e.filters)
            .map_err(|m| invalid(&format!("exports[{i}].filters"), m))?;
    }
    Ok(exports)
}

fn check_group(g: &str) -> Result<(), ApiError> {
    let ok = !g.is_empty()
        && g.len() <= 128
        && g.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-:".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            "group",
            format!("{g:?} must be 1 to 128 of A-Z a-z 0-9 . _ - :"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_definition_shown_and_given_back_keeps_its_secrets() {
        let kinds = eventmesh_connect::builtin();
        let make = |v: Value, stored: Option<&Value>| {
            let b: DefinitionBody = serde_json::from_value(v).unwrap();
            b.into_definition("pg".into(), &kinds, stored)
        };
        let stored = make(
            json!({"kind": "postgres-sink", "topic": "t",
                "config": {"url": "postgres://app:hunter2@db:5432/x", "table": "out"}}),
            None,
        )
        .unwrap();
        let shown = stored.redacted();
        assert_eq!(shown.config["url"], "postgres://app:***@db:5432/x");
        let again = make(
            json!({"kind": "postgres-sink", "topic": "t", "config": shown.config}),
            Some(&stored.config),
        )
        .unwrap();
        assert_eq!(again.config, stored.config);
        // The host changes, the password stays.
        let moved = make(
            json!({"kind": "postgres-sink", "topic": "t",
                "config": {"url": "postgres://app:***@db2:5432/x", "table": "out"}}),
            Some(&stored.config),
        )
        .unwrap();
        assert_eq!(moved.config["url"], "postgres://app:hunter2@db2:5432/x");
        let err = make(
            json!({"kind": "postgres-sink", "topic": "t",
                "config": {"url": "postgres://app:***@db:5432/x", "table": "out"}}),
            None,
        )
        .unwrap_err();
        assert_eq!(
            err.message,
            "config.url: \"***\" stands for a stored secret, and none is stored there; give the value"
        );
    }

    #[test]
    fn an_http_source_signature_gets_a_scheme() {
        let d = body(json!({"name": "h", "kind": "http-source", "topic": "t",
            "config": {"signature": {"secret": "s"}}}))
        .unwrap();
        assert_eq!(d.config["signature"]["scheme"], "eventmesh");
        // Stored before schemes: shown as the body-only scheme it is.
        let legacy = Definition {
            config: json!({"signature": {"secret": "s", "header": "x-sig"}}),
            ..d
        };
        assert_eq!(
            legacy.redacted().config,
            json!({"signature": {"secret": "***", "header": "x-sig", "scheme": "body"}})
        );
        assert_eq!(
            body(json!({"name": "h", "kind": "http-source", "topic": "t",
                "config": {"signature": {"secret": "s", "prefix": "sha256="}}}))
            .unwrap_err()
            .message,
            "config: signature.prefix applies to the body scheme only (give \"scheme\": \"body\" for a body-only signature)"
        );
    }

    fn body(v: Value) -> Result<Definition, ApiError> {
        let b: DefinitionBody = serde_json::from_value(v).unwrap();
        let name = b.name.clone().unwrap_or_default();
        b.into_definition(name, &eventmesh_connect::builtin(), None)
    }

    #[test]
    fn a_definition_is_checked_field_by_field() {
        let d = body(json!({"name":"in","kind":"file-source","config":{"path":"/tmp/a.jsonl"},"topic":"orders"}))
            .unwrap();
        assert_eq!(d.principal, "connector:in");
        assert_eq!(d.topic, "orders");
        let d = body(
            json!({"name":"out","kind":"file-sink","config":{"path":"/tmp/b.jsonl"},
            "subscription":{"topic":"orders","group":"g1"}}),
        )
        .unwrap();
        assert_eq!((d.topic.as_str(), d.group()), ("orders", "g1".to_string()));
        assert_eq!(d.client_id(), "connector.out");
        let msg = |v: Value| body(v).unwrap_err().message;
        assert_eq!(
            msg(json!({"name":"in","kind":"file-source","config":{},"topic":"t"})),
            "config: missing field `path`"
        );
        assert_eq!(
            msg(json!({"name":"in","kind":"file-source","config":{"path":"/a","x":1},"topic":"t"})),
            "config: unknown field `x`, expected one of `path`, `type`, `start`, `poll_ms`, `batch`"
        );
        assert_eq!(
            msg(json!({"name":"in","kind":"file-source","config":{"path":"rel"},"topic":"t"})),
            "config: path \"rel\" must be absolute"
        );
        assert_eq!(
            msg(
                json!({"name":"in","kind":"file-source","config":{"path":"/a"},"topic":"t","group":"g"})
            ),
            "group: only a sink consumes as a group"
        );
        assert_eq!(
            msg(json!({"name":"a b","kind":"file-source","config":{"path":"/a"},"topic":"t"})),
            "name: \"a b\" must be 1 to 64 of A-Z a-z 0-9 . _ - (not starting with .)"
        );
        assert!(msg(json!({"name":"x","kind":"ftp-source","topic":"t"}))
            .starts_with("kind: \"ftp-source\" is not a connector kind (one of: file-sink, file-source, http-source"));
        assert_eq!(
            msg(json!({"name":"x","kind":"file-sink","config":{"path":"/a"}})),
            "topic: missing"
        );
    }
}
