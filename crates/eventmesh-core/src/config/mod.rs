//! Runtime configuration, as data. Each key is declared once in
//! [`KNOWN_KEYS`] (`keys.rs`) with its default, value kind, description,
//! secret flag and the typed field it sets; loading, unknown-key warnings,
//! `eventmesh config` output, redaction and the docs table all come from
//! that table.
//!
//! - `properties.rs`: the Java-properties syntax of the file;
//! - `sources.rs`: layering of built-in defaults < properties file <
//!   environment < `-D key=value` overrides;
//! - `kinds.rs`: how a key's text is parsed, validated and rendered;
//! - `sections.rs`: the typed [`Config`] and its sections.
//!
//! This module joins them: [`Config::load`] layers the sources, sets every
//! field from its key, then checks the values that must fit together. A
//! `Config` therefore only ever holds validated values, and every error
//! names the key, the value and what is allowed. The rest of the runtime
//! reads the typed sections only.

mod error;
mod keys;
mod kinds;
mod properties;
mod sections;
mod sources;

use std::fmt;

pub use error::ConfigError;
pub use keys::{markdown_table, KeySpec, KNOWN_KEYS, REDACTED};
pub use kinds::PRODUCTION_DENIED_CIDRS;
pub use properties::parse_properties;
pub use sections::A2aConfig;
pub use sections::AuthFailuresConfig;
pub use sections::ConnectionLimits;
pub use sections::GrpcConfig;
pub use sections::McpConfig;
pub use sections::MqttConfig;
pub use sections::TracingConfig;
pub use sections::{
    AdminConfig, ClientAuth, ClusterConfig, Config, DeliveryConfig, DeliveryTopology, EtcdSettings,
    GateConfig, HttpConfig, JetStreamSettings, LogConfig, LogFormat, MetaConfig, MetaType,
    PublishConfig, ServerConfig, ServerTlsConfig, ShutdownConfig, StorageConfig, StorageType,
    TcpConfig, TopicConfig, WebhookConfig, WebhookHandshakeConfig, WebhookTlsConfig,
};
pub use sections::{ConnectorConfig, ConnectorOffsetStore};
pub use sources::{env_var_name, parse_override, ConfigSources, EnvSource, MapEnv, ProcessEnv};

/// The shortest admin token or cluster secret accepted, in bytes.
pub const MIN_SECRET_BYTES: usize = 16;

/// A loaded configuration plus the warnings produced while loading it.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    pub warnings: Vec<String>,
}

impl fmt::Debug for Config {
    /// Lists every key with its effective value; secrets are redacted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.redacted_entries()).finish()
    }
}

impl Config {
    /// Layers defaults, the file, the environment and the overrides (later
    /// wins), then validates. A blank value means "use the default".
    pub fn load(sources: &ConfigSources) -> Result<Loaded, ConfigError> {
        let layered = sources::layer(sources)?;
        let mut config = Config::unset();
        for spec in KNOWN_KEYS {
            let raw = layered.values.get(spec.key).map(String::as_str);
            spec.apply(&mut config, raw)?;
        }
        config.check_combinations()?;
        Ok(Loaded {
            config,
            warnings: layered.warnings,
        })
    }

    /// The checks across keys, once each key's value is valid on its own.
    fn check_combinations(&self) -> Result<(), ConfigError> {
        for (key, secret) in [
            ("eventmesh.admin.token", &self.server.admin.token),
            ("eventmesh.cluster.secret", &self.cluster.secret),
        ] {
            if let Some(s) = secret.as_deref().filter(|s| s.len() < MIN_SECRET_BYTES) {
                // The value is a secret: only its length is told.
                return Err(ConfigError::Conflict(format!(
                    "{key} is {} bytes long; it must be at least {MIN_SECRET_BYTES} bytes \
                     (a short token can be guessed)",
                    s.len()
                )));
            }
        }
        let delivery = &self.delivery;
        if delivery.backoff_max < delivery.backoff_initial {
            return Err(ConfigError::Conflict(format!(
                "eventmesh.delivery.backoff.max.ms ({}) must be at least \
                 eventmesh.delivery.backoff.initial.ms ({})",
                delivery.backoff_max.as_millis(),
                delivery.backoff_initial.as_millis()
            )));
        }
        let etcd = self.meta.backend == MetaType::Etcd;
        let cluster = self.cluster.enabled;
        let owned = delivery.topology == DeliveryTopology::PartitionOwnedPull;
        if owned {
            // Each missing requirement named on its own.
            if !cluster {
                return Err(ConfigError::Conflict(
                    "delivery topology PARTITION_OWNED_PULL requires eventmesh.cluster.enabled=true \
                     (partition owners are instances of one cluster); currently false"
                        .to_string(),
                ));
            }
            if !etcd {
                return Err(ConfigError::Conflict(format!(
                    "delivery topology PARTITION_OWNED_PULL requires eventmesh.meta.type=etcd \
                     (claims and offsets live in a meta store every instance shares); currently {}",
                    self.meta.backend
                )));
            }
            if self.cluster.secret.is_none() {
                return Err(ConfigError::Conflict(
                    "delivery topology PARTITION_OWNED_PULL requires eventmesh.cluster.secret \
                     (instances forward deliveries and acknowledgements to each other over a \
                     channel authenticated with it)"
                        .to_string(),
                ));
            }
            match &self.cluster.advertise {
                Some(a) => check_advertised(a)?,
                None if is_wildcard(&self.server.host) => {
                    return Err(ConfigError::Conflict(format!(
                        "delivery topology PARTITION_OWNED_PULL needs eventmesh.cluster.advertise.address \
                         (host:port the other instances reach this one at) when \
                         eventmesh.server.host is the wildcard {:?}",
                        self.server.host
                    )));
                }
                None => {}
            }
            if self.storage.backend != StorageType::Jetstream {
                return Err(ConfigError::Conflict(format!(
                    "delivery topology PARTITION_OWNED_PULL requires eventmesh.storage.type=jetstream \
                     (with a log of its own on each instance there is no partition to share); \
                     currently {}",
                    self.storage.backend
                )));
            }
        }
        if cluster && !etcd {
            return Err(ConfigError::Conflict(format!(
                "eventmesh.cluster.enabled=true requires a cluster meta store \
                 (eventmesh.meta.type=etcd); currently eventmesh.meta.type={}",
                self.meta.backend
            )));
        }
        if self.meta.etcd.user.is_some() != self.meta.etcd.password.is_some() {
            return Err(ConfigError::Conflict(
                "eventmesh.meta.etcd.user and eventmesh.meta.etcd.password must be set together"
                    .to_string(),
            ));
        }
        let tls = &self.server.tls;
        if tls.cert_file.is_some() != tls.key_file.is_some() {
            return Err(ConfigError::Conflict(
                "eventmesh.server.tls.cert.file and eventmesh.server.tls.key.file must be set \
                 together"
                    .to_string(),
            ));
        }
        if tls.client_ca_file.is_some() && tls.cert_file.is_none() {
            return Err(ConfigError::Conflict(
                "eventmesh.server.tls.client.ca.file needs eventmesh.server.tls.cert.file and \
                 .key.file (client certificates are only asked for over TLS)"
                    .to_string(),
            ));
        }
        let js = &self.storage.jetstream;
        if js.user.is_some() != js.password.is_some() {
            return Err(ConfigError::Conflict(
                "eventmesh.storage.jetstream.user and eventmesh.storage.jetstream.password \
                 must be set together"
                    .to_string(),
            ));
        }
        paired(
            "eventmesh.storage.jetstream.tls.cert.file",
            &js.tls_cert_file,
            "eventmesh.storage.jetstream.tls.key.file",
            &js.tls_key_file,
        )?;
        paired(
            "eventmesh.webhook.tls.cert.file",
            &self.delivery.webhook_tls.cert_file,
            "eventmesh.webhook.tls.key.file",
            &self.delivery.webhook_tls.key_file,
        )?;
        self.check_etcd_tls()?;
        let credentials = [
            js.user.is_some(),
            js.token.is_some(),
            js.creds_file.is_some(),
        ];
        if credentials.iter().filter(|set| **set).count() > 1 {
            return Err(ConfigError::Conflict(
                "set one NATS credential at most: eventmesh.storage.jetstream.user/password, \
                 .token or .creds.file"
                    .to_string(),
            ));
        }
        Ok(())
    }

    /// etcd over TLS: a client certificate comes with its key, and TLS
    /// files go with `https://` endpoints only (an `http://` endpoint would
    /// silently skip them); the endpoints share one scheme.
    fn check_etcd_tls(&self) -> Result<(), ConfigError> {
        let etcd = &self.meta.etcd;
        paired(
            "eventmesh.meta.etcd.tls.cert.file",
            &etcd.tls_cert_file,
            "eventmesh.meta.etcd.tls.key.file",
            &etcd.tls_key_file,
        )?;
        let plain = etcd
            .endpoints
            .iter()
            .find(|e| e.starts_with("http://"))
            .map(|e| crate::redact::url(e));
        let secure = etcd
            .endpoints
            .iter()
            .find(|e| e.starts_with("https://"))
            .map(|e| crate::redact::url(e));
        if let Some(plain) = plain {
            if etcd.tls_files() {
                let set: Vec<&str> = [
                    (
                        "eventmesh.meta.etcd.tls.ca.file",
                        etcd.tls_ca_file.is_some(),
                    ),
                    (
                        "eventmesh.meta.etcd.tls.cert.file",
                        etcd.tls_cert_file.is_some(),
                    ),
                    (
                        "eventmesh.meta.etcd.tls.key.file",
                        etcd.tls_key_file.is_some(),
                    ),
                ]
                .into_iter()
                .filter_map(|(key, on)| on.then_some(key))
                .collect();
                return Err(ConfigError::Conflict(format!(
                    "eventmesh.meta.etcd.endpoints has the plain-text endpoint {plain} while {} \
                     {} set; TLS to etcd needs https:// endpoints",
                    set.join(" and "),
                    if set.len() == 1 { "is" } else { "are" }
                )));
            }
            if let Some(secure) = secure {
                return Err(ConfigError::Conflict(format!(
                    "eventmesh.meta.etcd.endpoints mixes http:// ({plain}) and https:// \
                     ({secure}) endpoints; use one scheme for all of them"
                )));
            }
        }
        Ok(())
    }

    /// Every known key with its effective value, in [`KNOWN_KEYS`] order. A
    /// secret is shown as `******` when set and `""` when unset.
    pub fn redacted_entries(&self) -> Vec<(String, String)> {
        KNOWN_KEYS
            .iter()
            .map(|spec| (spec.key.to_string(), spec.redacted_value(self)))
            .collect()
    }

    /// The keys whose effective values differ between `self` and `other`,
    /// compared as they are (a changed secret or URL password counts,
    /// though both show the same redacted).
    pub fn changed_keys(&self, other: &Config) -> Vec<&'static str> {
        KNOWN_KEYS
            .iter()
            .filter(|spec| spec.binding.render(self) != spec.binding.render(other))
            .map(|spec| spec.key)
            .collect()
    }
}

#[cfg(test)]
mod tests;

/// A certificate and its key: both set, or neither.
fn paired<T>(
    cert_key: &str,
    cert: &Option<T>,
    key_key: &str,
    key: &Option<T>,
) -> Result<(), ConfigError> {
    match (cert.is_some(), key.is_some()) {
        (true, false) => Err(ConfigError::Conflict(format!(
            "{cert_key} is set but {key_key} is not; a client certificate needs its private key \
             (set both, or neither)"
        ))),
        (false, true) => Err(ConfigError::Conflict(format!(
            "{key_key} is set but {cert_key} is not; a private key needs its certificate \
             (set both, or neither)"
        ))),
        _ => Ok(()),
    }
}

/// Whether `host` is an address that listens everywhere (no peer can call
/// it).
fn is_wildcard(host: &str) -> bool {
    host.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified())
}

/// An advertised address: `host:port`, a specific host and a port above 0.
fn check_advertised(address: &str) -> Result<(), ConfigError> {
    let bad = |why: &str| {
        ConfigError::Conflict(format!(
            "eventmesh.cluster.advertise.address {address:?} {why}"
        ))
    };
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| bad("is not host:port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err(bad("has no host"));
    }
    if is_wildcard(host) {
        return Err(bad(
            "names a wildcard host; give one the other instances can reach",
        ));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(bad("has no port from 1 to 65535")),
    }
}
