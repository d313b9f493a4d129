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
pub use properties::parse_properties;
pub use sections::{
    AdminConfig, ClusterConfig, Config, DeliveryConfig, DeliveryTopology, EtcdSettings, GateConfig,
    HttpConfig, JetStreamSettings, LogConfig, LogFormat, MetaConfig, MetaType, PublishConfig,
    ServerConfig, ShutdownConfig, StorageConfig, StorageType, TcpConfig, TopicConfig,
    WebhookConfig,
};
pub use sources::{env_var_name, parse_override, ConfigSources, EnvSource, MapEnv, ProcessEnv};

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
        let js = &self.storage.jetstream;
        if js.user.is_some() != js.password.is_some() {
            return Err(ConfigError::Conflict(
                "eventmesh.storage.jetstream.user and eventmesh.storage.jetstream.password \
                 must be set together"
                    .to_string(),
            ));
        }
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

    /// Every known key with its effective value, in [`KNOWN_KEYS`] order. A
    /// secret is shown as `******` when set and `""` when unset.
    pub fn redacted_entries(&self) -> Vec<(String, String)> {
        KNOWN_KEYS
            .iter()
            .map(|spec| (spec.key.to_string(), spec.redacted_value(self)))
            .collect()
    }
}

#[cfg(test)]
mod tests;

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
