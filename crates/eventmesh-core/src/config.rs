//! Runtime configuration: the list of known keys, the Java-properties parser,
//! layering of the configuration sources (built-in defaults < properties file
//! < environment < `-D key=value` overrides) and validation into the typed
//! [`Config`]. Everything that decides what a configuration value means lives
//! here; the rest of the runtime only reads the typed fields.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// One known configuration key: its name, built-in default as text (`""` when
/// there is none) and a one-line description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySpec {
    pub key: &'static str,
    pub default: &'static str,
    pub description: &'static str,
}

macro_rules! key_specs {
    ($($key:literal = $default:literal : $description:literal;)*) => {
        &[$(KeySpec { key: $key, default: $default, description: $description }),*]
    };
}

/// Every configuration key understood by the runtime, in documentation order.
/// The defaults listed here are the built-in defaults used by [`Config::load`].
#[rustfmt::skip]
pub const KNOWN_KEYS: &[KeySpec] = key_specs! {
    "eventmesh.server.host" = "127.0.0.1":
        "Address the HTTP and admin listeners bind to.";
    "eventmesh.server.http.port" = "10105":
        "Port of the event HTTP API (0 picks an ephemeral port).";
    "eventmesh.server.admin.port" = "10106":
        "Port of the admin HTTP API.";
    "eventmesh.server.tcp.port" = "10000":
        "Port of the legacy TCP protocol (0 disables it).";
    "eventmesh.server.tcp.token" = "":
        "Token a TCP client must send in its HELLO frame (secret; empty means none is required).";
    "eventmesh.server.tcp.max.frame.bytes" = "1114112":
        "Largest accepted TCP frame (the length field), in bytes.";
    "eventmesh.server.tcp.heartbeat.ms" = "15000":
        "TCP heartbeat interval announced to clients; a connection silent for three intervals is closed.";
    "eventmesh.data.dir" = "./data":
        "Directory holding stored events, committed offsets and local metadata.";
    "eventmesh.storage.type" = "":
        "Event storage backend (required, no default); supported: standalone.";
    "eventmesh.storage.sync" = "true":
        "Fsync every acknowledged publish before answering (true or false).";
    "eventmesh.storage.write.buffer.bytes" = "67108864":
        "Memtable size of each RocksDB column family, in bytes (1048576-1073741824); after the disk fills up, writes resume once this much space is free.";
    "eventmesh.storage.block.cache.bytes" = "67108864":
        "Capacity of RocksDB's block cache, shared by every column family and holding index and filter blocks too, in bytes (1048576-68719476736).";
    "eventmesh.delivery.topology" = "LOCAL_STICKY_PULL":
        "Which partitions each instance polls: LOCAL_STICKY_PULL (all) or PARTITION_OWNED_PULL (owned, cluster only).";
    "eventmesh.cluster.enabled" = "false":
        "Run as a member of a cluster (requires eventmesh.meta.type=etcd).";
    "eventmesh.meta.type" = "embedded":
        "Metadata store: embedded (single node) or etcd (cluster).";
    "eventmesh.meta.etcd.endpoints" = "http://127.0.0.1:2379":
        "Comma-separated etcd client URLs (used with eventmesh.meta.type=etcd).";
    "eventmesh.meta.etcd.timeout.ms" = "3000":
        "Bound on every etcd call, in milliseconds.";
    "eventmesh.meta.etcd.user" = "":
        "etcd user name (optional; set together with the password).";
    "eventmesh.meta.etcd.password" = "":
        "etcd password (secret; set together with the user).";
    "eventmesh.topic.default.partitions" = "4":
        "Partition count of a topic created without an explicit count (1-1024).";
    "eventmesh.http.max.body.bytes" = "1048576":
        "Largest accepted HTTP request body, in bytes.";
    "eventmesh.admin.token" = "":
        "Token that admin API requests must present (secret; empty means none).";
    "eventmesh.webhook.timeout.ms" = "5000":
        "Timeout of one webhook delivery attempt, in milliseconds.";
    "eventmesh.webhook.denied.cidrs" = "":
        "Comma-separated CIDR ranges a webhook URL may not resolve into (SSRF guard), e.g. 10.0.0.0/8,127.0.0.0/8.";
    "eventmesh.security.gate.failClosed" = "false":
        "With gate filters configured: true answers denials with 401/403/429; false logs, audits and counts them but lets the request through.";
    "eventmesh.security.gate.token.file" = "":
        "Static bearer tokens, one 'token tenant principal [roles]' a line (a token may be written sha256:<hex>).";
    "eventmesh.security.gate.jwt.hs256.secret" = "":
        "Secret that HS256 JWT bearer tokens are verified with (secret).";
    "eventmesh.security.gate.jwt.public.key.file" = "":
        "PEM public key (RSA for RS256, EC P-256 for ES256) that JWT bearer tokens are verified with.";
    "eventmesh.security.gate.jwt.issuer" = "":
        "Required JWT 'iss' claim (unchecked when empty).";
    "eventmesh.security.gate.jwt.audience" = "":
        "Required JWT 'aud' claim (unchecked when empty).";
    "eventmesh.security.gate.jwt.tenant.claim" = "tenant":
        "JWT claim holding the tenant.";
    "eventmesh.security.gate.jwt.principal.claim" = "sub":
        "JWT claim holding the principal.";
    "eventmesh.security.gate.signature.secrets.file" = "":
        "Per-tenant HMAC secrets, one 'tenant secret' a line; requests of those tenants must be signed.";
    "eventmesh.security.gate.signature.tolerance.s" = "300":
        "Largest accepted distance between x-em-timestamp and the server clock, in seconds.";
    "eventmesh.security.gate.acl.file" = "":
        "ACL rules, one '<allow|deny> <principal-or-tenant pattern> <operation|*> <topic pattern>' a line.";
    "eventmesh.security.gate.quota.publish.rate" = "0":
        "Events per second each tenant may publish (0 = unlimited).";
    "eventmesh.security.gate.quota.publish.burst" = "0":
        "Events a tenant may publish at once above the rate (0 = one second's worth).";
    "eventmesh.security.gate.quota.subscriptions.max" = "0":
        "Subscriptions per tenant on this instance (0 = unlimited).";
    "eventmesh.security.gate.quota.connections.max" = "0":
        "Concurrent requests and streams per tenant (0 = unlimited).";
    "eventmesh.security.gate.audit.file" = "":
        "Write the gate's decisions as JSON lines to this file instead of the log.";
    "eventmesh.delivery.backoff.initial.ms" = "1000":
        "Delay before the first retry of a failed delivery, in milliseconds.";
    "eventmesh.delivery.backoff.max.ms" = "16000":
        "Upper bound of the growing retry delay, in milliseconds (at least the initial delay).";
    "eventmesh.delivery.backoff.jitter" = "0.2":
        "Random spread added to each retry delay, as a fraction of it (0 to 1).";
    "eventmesh.delivery.ack.timeout.ms" = "30000":
        "A polled delivery not acknowledged within this many milliseconds is redelivered.";
    "eventmesh.delivery.max.attempts" = "6":
        "Attempts per delivery before its event goes to the dead-letter store (1-1000).";
    "eventmesh.delivery.max.inflight" = "1024":
        "Most unacknowledged deliveries per consumer (1-1000000).";
    "eventmesh.delivery.max.inflight.per.client" = "1000":
        "Most unacknowledged deliveries per subscribed client, over all its subscriptions (1-1000000).";
    "eventmesh.offset.flush.interval.ms" = "1000":
        "How often committed offsets are flushed to disk, in milliseconds.";
    "eventmesh.shutdown.grace.ms" = "10000":
        "On SIGTERM, how long to wait for deliveries already handed out to be acknowledged, in milliseconds (0 waits for none).";
};

const ADMIN_TOKEN_KEY: &str = "eventmesh.admin.token";
const ETCD_PASSWORD_KEY: &str = "eventmesh.meta.etcd.password";
const JWT_SECRET_KEY: &str = "eventmesh.security.gate.jwt.hs256.secret";
const TCP_TOKEN_KEY: &str = "eventmesh.server.tcp.token";
/// Variables read by the client commands (`eventmesh publish`, ...), not
/// by the runtime: never reported as unknown.
const CLIENT_ENV: [&str; 3] = [
    "EVENTMESH_SERVER",
    "EVENTMESH_TCP_SERVER",
    "EVENTMESH_TOKEN",
];
const REDACTED: &str = "******";

/// The environment variable consulted for `key`: upper case, dots to underscores.
pub fn env_var_name(key: &str) -> String {
    key.to_ascii_uppercase().replace('.', "_")
}

fn known(key: &str) -> Option<&'static KeySpec> {
    KNOWN_KEYS.iter().find(|s| s.key == key)
}

/// A source of environment variables.
pub trait EnvSource {
    fn get(&self, name: &str) -> Option<String>;
    fn names(&self) -> Vec<String>;
}

/// The real process environment; variables whose name or value is not UTF-8 are skipped.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn get(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn names(&self) -> Vec<String> {
        std::env::vars_os()
            .filter_map(|(name, _)| name.into_string().ok())
            .collect()
    }
}

/// A fixed environment, for tests.
#[derive(Debug, Clone, Default)]
pub struct MapEnv(pub HashMap<String, String>);

impl EnvSource for MapEnv {
    fn get(&self, name: &str) -> Option<String> {
        self.0.get(name).cloned()
    }

    fn names(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
}

/// Where configuration comes from, besides the built-in defaults.
pub struct ConfigSources<'a> {
    /// Properties file; if `None`, nothing is read from a file.
    pub file: Option<PathBuf>,
    /// True when the file was named explicitly: a missing file is then an error.
    pub file_required: bool,
    pub env: &'a dyn EnvSource,
    /// `-D key=value` overrides, in command-line order.
    pub overrides: Vec<(String, String)>,
}

/// A configuration problem; `Display` gives the full human-readable message.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration file {} does not exist", path.display())]
    FileNotFound { path: PathBuf },
    #[error("cannot read configuration file {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{origin}, line {line}: {message}")]
    Parse {
        origin: String,
        line: usize,
        message: String,
    },
    #[error("invalid -D argument \"{arg}\": {reason}")]
    MalformedOverride { arg: String, reason: String },
    #[error("{key} is not set; {hint}")]
    Missing { key: &'static str, hint: String },
    #[error("invalid value \"{value}\" for {key}: expected {expected}")]
    InvalidValue {
        key: &'static str,
        value: String,
        expected: String,
    },
    /// Values that are individually valid but do not fit together.
    #[error("{0}")]
    Conflict(String),
    /// A valid setting that this build cannot honour.
    #[error("{0}")]
    Unsupported(String),
}

/// Splits a `-D` argument `key=value` into its trimmed key and value.
pub fn parse_override(arg: &str) -> Result<(String, String), ConfigError> {
    let malformed = |reason: &str| ConfigError::MalformedOverride {
        arg: arg.to_string(),
        reason: reason.to_string(),
    };
    let (key, value) = arg
        .split_once('=')
        .ok_or_else(|| malformed("expected key=value"))?;
    let key = key.trim();
    if key.is_empty() {
        return Err(malformed("the key before '=' is empty"));
    }
    Ok((key.to_string(), value.trim().to_string()))
}

/// Parses Java `.properties` text: `#`/`!` comments, blank lines, `key=value`,
/// `key:value` or `key value`, backslash line continuation and the escapes
/// `\t \n \r \f \\ \uXXXX` (any other escaped character stands for itself).
pub fn parse_properties(text: &str) -> Result<Vec<(String, String)>, ConfigError> {
    parse_properties_from(text, "properties text")
}

fn parse_properties_from(text: &str, origin: &str) -> Result<Vec<(String, String)>, ConfigError> {
    let mut entries = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((index, first)) = lines.next() {
        let first = first.trim_start();
        if first.is_empty() || first.starts_with('#') || first.starts_with('!') {
            continue;
        }
        let mut logical = first.to_string();
        while ends_with_continuation(&logical) {
            logical.pop();
            match lines.next() {
                Some((_, next)) => logical.push_str(next.trim_start()),
                None => break,
            }
        }
        let entry = split_entry(&logical).map_err(|message| ConfigError::Parse {
            origin: origin.to_string(),
            line: index + 1,
            message,
        })?;
        entries.push(entry);
    }
    Ok(entries)
}

fn ends_with_continuation(line: &str) -> bool {
    line.chars().rev().take_while(|&c| c == '\\').count() % 2 == 1
}

fn split_entry(line: &str) -> Result<(String, String), String> {
    let mut chars = line.chars().peekable();
    let mut key = String::new();
    let mut separated = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => key.push(unescape(&mut chars)?),
            '=' | ':' => {
                separated = true;
                break;
            }
            c if c.is_whitespace() => break,
            c => key.push(c),
        }
    }
    while chars.next_if(|c| c.is_whitespace()).is_some() {}
    if !separated && chars.next_if(|&c| c == '=' || c == ':').is_some() {
        separated = true;
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
    }
    if key.is_empty() {
        return Err("missing key before the separator".to_string());
    }
    if !separated && chars.peek().is_none() {
        return Err(format!(
            "expected key=value but found only the key \"{key}\""
        ));
    }
    // Trailing whitespace is trimmed unless it was written as an escape.
    let mut value = String::new();
    let mut keep = 0;
    while let Some(c) = chars.next() {
        if c == '\\' {
            value.push(unescape(&mut chars)?);
            keep = value.len();
        } else {
            value.push(c);
            if !c.is_whitespace() {
                keep = value.len();
            }
        }
    }
    value.truncate(keep);
    Ok((key, value))
}

fn unescape(chars: &mut impl Iterator<Item = char>) -> Result<char, String> {
    match chars.next() {
        Some('t') => Ok('\t'),
        Some('n') => Ok('\n'),
        Some('r') => Ok('\r'),
        Some('f') => Ok('\u{c}'),
        Some('u') => {
            let hex: String = chars.take(4).collect();
            let code = (hex.len() == 4 && hex.chars().all(|c| c.is_ascii_hexdigit()))
                .then(|| u32::from_str_radix(&hex, 16).ok())
                .flatten()
                .ok_or_else(|| {
                    format!("malformed \\u escape \"\\u{hex}\": expected 4 hex digits")
                })?;
            char::from_u32(code).ok_or_else(|| format!("\\u{hex} is not a valid character"))
        }
        Some(other) => Ok(other),
        None => Err("dangling backslash at end of line".to_string()),
    }
}

/// Declares a closed set of values with their configuration spelling.
macro_rules! text_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The spelling used in configuration.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

text_enum! {
    /// Event storage backend.
    StorageType { Standalone = "standalone" }
}

text_enum! {
    /// How deliveries are assigned to consumers.
    DeliveryTopology {
        LocalStickyPull = "LOCAL_STICKY_PULL",
        PartitionOwnedPull = "PARTITION_OWNED_PULL",
    }
}

text_enum! {
    /// Metadata store.
    MetaType { Embedded = "embedded", Etcd = "etcd" }
}

/// The validated, typed runtime configuration.
#[derive(Clone, PartialEq)]
pub struct Config {
    pub server_host: String,
    pub http_port: u16,
    pub admin_port: u16,
    /// `None` when the TCP port is disabled.
    pub tcp_port: Option<u16>,
    pub tcp_token: Option<String>,
    pub tcp_max_frame_bytes: usize,
    pub tcp_heartbeat: Duration,
    pub data_dir: PathBuf,
    pub storage_type: StorageType,
    pub storage_sync: bool,
    pub storage_write_buffer_bytes: usize,
    pub storage_block_cache_bytes: usize,
    pub delivery_topology: DeliveryTopology,
    pub cluster_enabled: bool,
    pub meta_type: MetaType,
    pub etcd_endpoints: Vec<String>,
    pub etcd_timeout: Duration,
    pub etcd_user: Option<String>,
    pub etcd_password: Option<String>,
    pub topic_default_partitions: u32,
    pub http_max_body_bytes: usize,
    pub admin_token: Option<String>,
    pub webhook_timeout: Duration,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    pub backoff_jitter: f64,
    pub ack_timeout: Duration,
    pub max_attempts: u32,
    pub max_inflight: usize,
    pub max_inflight_per_client: usize,
    pub offset_flush_interval: Duration,
    pub shutdown_grace: Duration,
    pub webhook_denied_cidrs: Vec<String>,
    pub gate: GateConfig,
}

/// The security gate's settings; every file path and limit is optional.
#[derive(Clone, PartialEq, Default)]
pub struct GateConfig {
    pub fail_closed: bool,
    pub token_file: Option<PathBuf>,
    pub jwt_hs256_secret: Option<String>,
    pub jwt_public_key_file: Option<PathBuf>,
    pub jwt_issuer: Option<String>,
    pub jwt_audience: Option<String>,
    pub jwt_tenant_claim: String,
    pub jwt_principal_claim: String,
    pub signature_secrets_file: Option<PathBuf>,
    pub signature_tolerance: Duration,
    pub acl_file: Option<PathBuf>,
    /// Events per second per tenant; 0 = unlimited.
    pub publish_rate: u32,
    pub publish_burst: u32,
    pub subscriptions_max: u32,
    pub connections_max: u32,
    pub audit_file: Option<PathBuf>,
}

impl GateConfig {
    /// True when any filter or quota is configured (otherwise the gate is a
    /// no-op that allows everything).
    pub fn any_configured(&self) -> bool {
        self.token_file.is_some()
            || self.jwt_hs256_secret.is_some()
            || self.jwt_public_key_file.is_some()
            || self.signature_secrets_file.is_some()
            || self.acl_file.is_some()
            || self.publish_rate > 0
            || self.subscriptions_max > 0
            || self.connections_max > 0
    }
}

/// A loaded configuration plus the warnings produced while loading it.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    pub warnings: Vec<String>,
}

impl fmt::Debug for Config {
    /// Lists every key with its effective value; the admin token is redacted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.redacted_entries()).finish()
    }
}

impl Config {
    /// Layers defaults, the file, the environment and the overrides (later
    /// wins), then validates. A blank value means "use the default".
    pub fn load(sources: &ConfigSources) -> Result<Loaded, ConfigError> {
        let mut values: HashMap<&'static str, String> = HashMap::new();
        let mut warnings = Vec::new();
        let mut apply = |key: &str, value: &str, origin: &str, warnings: &mut Vec<String>| {
            if let Some(spec) = known(key) {
                values.insert(spec.key, value.to_string());
            } else if key.starts_with("eventmesh.") {
                warnings.push(format!(
                    "unknown configuration key {key} (from {origin}); ignored"
                ));
            }
        };

        if let Some(path) = &sources.file {
            match std::fs::read_to_string(path) {
                Ok(text) => {
                    let origin = path.display().to_string();
                    for (key, value) in parse_properties_from(&text, &origin)? {
                        apply(&key, &value, &origin, &mut warnings);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !sources.file_required => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(ConfigError::FileNotFound { path: path.clone() })
                }
                Err(source) => {
                    return Err(ConfigError::Io {
                        path: path.clone(),
                        source,
                    })
                }
            }
        }

        let known_env: HashSet<String> = KNOWN_KEYS.iter().map(|s| env_var_name(s.key)).collect();
        for spec in KNOWN_KEYS {
            let name = env_var_name(spec.key);
            if let Some(value) = sources.env.get(&name) {
                let origin = format!("environment {name}");
                apply(spec.key, &value, &origin, &mut warnings);
            }
        }
        let mut env_names = sources.env.names();
        env_names.sort();
        for name in env_names {
            if name.starts_with("EVENTMESH_")
                && !known_env.contains(&name)
                && !CLIENT_ENV.contains(&name.as_str())
            {
                warnings.push(format!(
                    "unknown environment variable {name}: it matches no configuration key; ignored"
                ));
            }
        }

        for (key, value) in &sources.overrides {
            apply(key.trim(), value, "-D override", &mut warnings);
        }

        let config = Config::from_values(&values)?;
        Ok(Loaded { config, warnings })
    }

    fn from_values(values: &HashMap<&'static str, String>) -> Result<Config, ConfigError> {
        let r = Resolver(values);
        let ms = |key| {
            let expected = "a duration in milliseconds of at least 1";
            r.num(key, 1, u64::MAX, expected).map(Duration::from_millis)
        };
        let port = |key| {
            r.num(key, 0, 65535, "a port number 0-65535")
                .map(|n| n as u16)
        };
        let count = |key, max: u64| r.num(key, 1, max, &format!("a whole number from 1 to {max}"));
        let limit = |key| {
            r.num(
                key,
                0,
                u64::from(u32::MAX),
                "a whole number (0 = unlimited)",
            )
            .map(|n| n as u32)
        };
        let storage = "eventmesh.storage.type";
        if r.text(storage).is_empty() {
            return Err(ConfigError::Missing {
                key: storage,
                hint: "supported storage backends: standalone".to_string(),
            });
        }
        let config = Config {
            server_host: r.non_empty("eventmesh.server.host", "a host name or IP address")?,
            http_port: port("eventmesh.server.http.port")?,
            admin_port: port("eventmesh.server.admin.port")?,
            tcp_port: Some(port("eventmesh.server.tcp.port")?).filter(|p| *p != 0),
            tcp_token: r.optional(TCP_TOKEN_KEY),
            tcp_max_frame_bytes: r.num(
                "eventmesh.server.tcp.max.frame.bytes",
                1024,
                1 << 30,
                "a size in bytes from 1024 to 1073741824",
            )? as usize,
            tcp_heartbeat: ms("eventmesh.server.tcp.heartbeat.ms")?,
            data_dir: r
                .non_empty("eventmesh.data.dir", "a directory path")?
                .into(),
            storage_type: r.choice(storage, StorageType::ALL, true)?,
            storage_sync: r.bool("eventmesh.storage.sync")?,
            storage_write_buffer_bytes: r.num(
                "eventmesh.storage.write.buffer.bytes",
                1 << 20,
                1 << 30,
                "a size in bytes from 1048576 (1 MiB) to 1073741824 (1 GiB)",
            )? as usize,
            storage_block_cache_bytes: r.num(
                "eventmesh.storage.block.cache.bytes",
                1 << 20,
                1 << 36,
                "a size in bytes from 1048576 (1 MiB) to 68719476736 (64 GiB)",
            )? as usize,
            delivery_topology: r.choice(
                "eventmesh.delivery.topology",
                DeliveryTopology::ALL,
                false,
            )?,
            cluster_enabled: r.bool("eventmesh.cluster.enabled")?,
            meta_type: r.choice("eventmesh.meta.type", MetaType::ALL, true)?,
            etcd_endpoints: endpoints(r.text("eventmesh.meta.etcd.endpoints"))?,
            etcd_timeout: ms("eventmesh.meta.etcd.timeout.ms")?,
            etcd_user: Some(r.text("eventmesh.meta.etcd.user").to_string())
                .filter(|t| !t.is_empty()),
            etcd_password: Some(r.text(ETCD_PASSWORD_KEY).to_string()).filter(|t| !t.is_empty()),
            topic_default_partitions: count("eventmesh.topic.default.partitions", 1024)? as u32,
            http_max_body_bytes: r.num(
                "eventmesh.http.max.body.bytes",
                1,
                usize::MAX as u64,
                "a size in bytes of at least 1",
            )? as usize,
            admin_token: Some(r.text(ADMIN_TOKEN_KEY).to_string()).filter(|t| !t.is_empty()),
            webhook_timeout: ms("eventmesh.webhook.timeout.ms")?,
            backoff_initial: ms("eventmesh.delivery.backoff.initial.ms")?,
            backoff_max: ms("eventmesh.delivery.backoff.max.ms")?,
            backoff_jitter: fraction(
                "eventmesh.delivery.backoff.jitter",
                r.text("eventmesh.delivery.backoff.jitter"),
            )?,
            ack_timeout: ms("eventmesh.delivery.ack.timeout.ms")?,
            max_attempts: count("eventmesh.delivery.max.attempts", 1000)? as u32,
            max_inflight: count("eventmesh.delivery.max.inflight", 1_000_000)? as usize,
            max_inflight_per_client: count("eventmesh.delivery.max.inflight.per.client", 1_000_000)?
                as usize,
            offset_flush_interval: ms("eventmesh.offset.flush.interval.ms")?,
            shutdown_grace: r
                .num(
                    "eventmesh.shutdown.grace.ms",
                    0,
                    u64::MAX,
                    "a duration in milliseconds (0 or more)",
                )
                .map(Duration::from_millis)?,
            webhook_denied_cidrs: cidrs(r.text("eventmesh.webhook.denied.cidrs"))?,
            gate: GateConfig {
                fail_closed: r.bool("eventmesh.security.gate.failClosed")?,
                token_file: r.path("eventmesh.security.gate.token.file"),
                jwt_hs256_secret: r.optional(JWT_SECRET_KEY),
                jwt_public_key_file: r.path("eventmesh.security.gate.jwt.public.key.file"),
                jwt_issuer: r.optional("eventmesh.security.gate.jwt.issuer"),
                jwt_audience: r.optional("eventmesh.security.gate.jwt.audience"),
                // Set empty on purpose: JWTs carry no tenant.
                jwt_tenant_claim: match r.0.get("eventmesh.security.gate.jwt.tenant.claim") {
                    Some(v) => v.trim().to_string(),
                    None => r
                        .text("eventmesh.security.gate.jwt.tenant.claim")
                        .to_string(),
                },
                jwt_principal_claim: r.non_empty(
                    "eventmesh.security.gate.jwt.principal.claim",
                    "a claim name",
                )?,
                signature_secrets_file: r.path("eventmesh.security.gate.signature.secrets.file"),
                signature_tolerance: r
                    .num(
                        "eventmesh.security.gate.signature.tolerance.s",
                        1,
                        86_400,
                        "a number of seconds from 1 to 86400",
                    )
                    .map(Duration::from_secs)?,
                acl_file: r.path("eventmesh.security.gate.acl.file"),
                publish_rate: limit("eventmesh.security.gate.quota.publish.rate")?,
                publish_burst: limit("eventmesh.security.gate.quota.publish.burst")?,
                subscriptions_max: limit("eventmesh.security.gate.quota.subscriptions.max")?,
                connections_max: limit("eventmesh.security.gate.quota.connections.max")?,
                audit_file: r.path("eventmesh.security.gate.audit.file"),
            },
        };
        config.check_combinations()?;
        Ok(config)
    }

    fn check_combinations(&self) -> Result<(), ConfigError> {
        if self.backoff_max < self.backoff_initial {
            return Err(ConfigError::Conflict(format!(
                "eventmesh.delivery.backoff.max.ms ({}) must be at least \
                 eventmesh.delivery.backoff.initial.ms ({})",
                self.backoff_max.as_millis(),
                self.backoff_initial.as_millis()
            )));
        }
        let etcd = self.meta_type == MetaType::Etcd;
        if self.delivery_topology == DeliveryTopology::PartitionOwnedPull
            && !(self.cluster_enabled && etcd)
        {
            return Err(ConfigError::Conflict(format!(
                "delivery topology PARTITION_OWNED_PULL requires eventmesh.cluster.enabled=true \
                 and a cluster meta store (eventmesh.meta.type=etcd); currently \
                 eventmesh.cluster.enabled={} and eventmesh.meta.type={}",
                self.cluster_enabled, self.meta_type
            )));
        }
        if self.cluster_enabled && !etcd {
            return Err(ConfigError::Conflict(format!(
                "eventmesh.cluster.enabled=true requires a cluster meta store \
                 (eventmesh.meta.type=etcd); currently eventmesh.meta.type={}",
                self.meta_type
            )));
        }
        if self.etcd_user.is_some() != self.etcd_password.is_some() {
            return Err(ConfigError::Conflict(
                "eventmesh.meta.etcd.user and eventmesh.meta.etcd.password must be set together"
                    .to_string(),
            ));
        }
        if self.delivery_topology == DeliveryTopology::PartitionOwnedPull {
            return Err(ConfigError::Unsupported(
                "delivery topology PARTITION_OWNED_PULL: partition ownership is not available \
                 in this build yet; use LOCAL_STICKY_PULL"
                    .to_string(),
            ));
        }
        Ok(())
    }

    /// Every known key with its effective value, in [`KNOWN_KEYS`] order. The
    /// admin token is shown as `******` when set and `""` when unset.
    pub fn redacted_entries(&self) -> Vec<(String, String)> {
        let ms = |d: Duration| d.as_millis().to_string();
        KNOWN_KEYS
            .iter()
            .map(|spec| {
                let value = match spec.key {
                    "eventmesh.server.host" => self.server_host.clone(),
                    "eventmesh.server.http.port" => self.http_port.to_string(),
                    "eventmesh.server.admin.port" => self.admin_port.to_string(),
                    "eventmesh.server.tcp.port" => self.tcp_port.unwrap_or(0).to_string(),
                    TCP_TOKEN_KEY => self.tcp_token.as_ref().map_or("", |_| REDACTED).to_string(),
                    "eventmesh.server.tcp.max.frame.bytes" => self.tcp_max_frame_bytes.to_string(),
                    "eventmesh.server.tcp.heartbeat.ms" => ms(self.tcp_heartbeat),
                    "eventmesh.data.dir" => self.data_dir.display().to_string(),
                    "eventmesh.storage.type" => self.storage_type.to_string(),
                    "eventmesh.storage.sync" => self.storage_sync.to_string(),
                    "eventmesh.storage.write.buffer.bytes" => {
                        self.storage_write_buffer_bytes.to_string()
                    }
                    "eventmesh.storage.block.cache.bytes" => {
                        self.storage_block_cache_bytes.to_string()
                    }
                    "eventmesh.delivery.topology" => self.delivery_topology.to_string(),
                    "eventmesh.cluster.enabled" => self.cluster_enabled.to_string(),
                    "eventmesh.meta.type" => self.meta_type.to_string(),
                    "eventmesh.meta.etcd.endpoints" => self.etcd_endpoints.join(","),
                    "eventmesh.meta.etcd.timeout.ms" => ms(self.etcd_timeout),
                    "eventmesh.meta.etcd.user" => self.etcd_user.clone().unwrap_or_default(),
                    ETCD_PASSWORD_KEY => self
                        .etcd_password
                        .as_ref()
                        .map_or("", |_| REDACTED)
                        .to_string(),
                    "eventmesh.topic.default.partitions" => {
                        self.topic_default_partitions.to_string()
                    }
                    "eventmesh.http.max.body.bytes" => self.http_max_body_bytes.to_string(),
                    ADMIN_TOKEN_KEY => self
                        .admin_token
                        .as_ref()
                        .map_or("", |_| REDACTED)
                        .to_string(),
                    "eventmesh.webhook.timeout.ms" => ms(self.webhook_timeout),
                    "eventmesh.delivery.backoff.initial.ms" => ms(self.backoff_initial),
                    "eventmesh.delivery.backoff.max.ms" => ms(self.backoff_max),
                    "eventmesh.delivery.backoff.jitter" => self.backoff_jitter.to_string(),
                    "eventmesh.delivery.ack.timeout.ms" => ms(self.ack_timeout),
                    "eventmesh.delivery.max.attempts" => self.max_attempts.to_string(),
                    "eventmesh.delivery.max.inflight" => self.max_inflight.to_string(),
                    "eventmesh.delivery.max.inflight.per.client" => {
                        self.max_inflight_per_client.to_string()
                    }
                    "eventmesh.offset.flush.interval.ms" => ms(self.offset_flush_interval),
                    "eventmesh.shutdown.grace.ms" => ms(self.shutdown_grace),
                    "eventmesh.webhook.denied.cidrs" => self.webhook_denied_cidrs.join(","),
                    JWT_SECRET_KEY => self
                        .gate
                        .jwt_hs256_secret
                        .as_ref()
                        .map_or("", |_| REDACTED)
                        .to_string(),
                    key if key.starts_with("eventmesh.security.gate.") => self.gate.value(key),
                    _ => String::new(),
                };
                (spec.key.to_string(), value)
            })
            .collect()
    }
}

impl GateConfig {
    /// The effective value of one `eventmesh.security.gate.*` key (not the
    /// secret, which the caller redacts).
    fn value(&self, key: &str) -> String {
        let path = |p: &Option<PathBuf>| {
            p.as_ref()
                .map_or(String::new(), |p| p.display().to_string())
        };
        let text = |t: &Option<String>| t.clone().unwrap_or_default();
        match key.trim_start_matches("eventmesh.security.gate.") {
            "failClosed" => self.fail_closed.to_string(),
            "token.file" => path(&self.token_file),
            "jwt.public.key.file" => path(&self.jwt_public_key_file),
            "jwt.issuer" => text(&self.jwt_issuer),
            "jwt.audience" => text(&self.jwt_audience),
            "jwt.tenant.claim" => self.jwt_tenant_claim.clone(),
            "jwt.principal.claim" => self.jwt_principal_claim.clone(),
            "signature.secrets.file" => path(&self.signature_secrets_file),
            "signature.tolerance.s" => self.signature_tolerance.as_secs().to_string(),
            "acl.file" => path(&self.acl_file),
            "quota.publish.rate" => self.publish_rate.to_string(),
            "quota.publish.burst" => self.publish_burst.to_string(),
            "quota.subscriptions.max" => self.subscriptions_max.to_string(),
            "quota.connections.max" => self.connections_max.to_string(),
            "audit.file" => path(&self.audit_file),
            _ => String::new(),
        }
    }
}

/// Parses `eventmesh.webhook.denied.cidrs`: comma-separated `address/prefix`.
fn cidrs(text: &str) -> Result<Vec<String>, ConfigError> {
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let ok = item.split_once('/').is_some_and(|(addr, prefix)| {
            match (addr.parse::<std::net::IpAddr>(), prefix.parse::<u8>()) {
                (Ok(std::net::IpAddr::V4(_)), Ok(p)) => p <= 32,
                (Ok(std::net::IpAddr::V6(_)), Ok(p)) => p <= 128,
                _ => false,
            }
        });
        if !ok {
            return Err(ConfigError::InvalidValue {
                key: "eventmesh.webhook.denied.cidrs",
                value: item.to_string(),
                expected: "comma-separated CIDR ranges such as 10.0.0.0/8 or fd00::/8".to_string(),
            });
        }
        out.push(item.to_string());
    }
    Ok(out)
}

/// Parses a fraction from 0 to 1.
fn fraction(key: &'static str, text: &str) -> Result<f64, ConfigError> {
    match text.trim().parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(ConfigError::InvalidValue {
            key,
            value: text.to_string(),
            expected: "a fraction from 0 to 1, e.g. 0.2".to_string(),
        }),
    }
}

/// Parses `eventmesh.meta.etcd.endpoints`: comma-separated http(s) URLs.
fn endpoints(text: &str) -> Result<Vec<String>, ConfigError> {
    let list: Vec<String> = text
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::to_string)
        .collect();
    let bad = list
        .iter()
        .find(|e| !(e.starts_with("http://") || e.starts_with("https://")));
    if list.is_empty() || bad.is_some() {
        return Err(ConfigError::InvalidValue {
            key: "eventmesh.meta.etcd.endpoints",
            value: bad.cloned().unwrap_or_else(|| text.to_string()),
            expected: "comma-separated http:// or https:// URLs".to_string(),
        });
    }
    Ok(list)
}

/// Reads effective values as text (user value if non-blank, else the default)
/// and converts them to typed values.
struct Resolver<'a>(&'a HashMap<&'static str, String>);

impl Resolver<'_> {
    fn text(&self, key: &'static str) -> &str {
        match self.0.get(key).map(|v| v.trim()) {
            Some(v) if !v.is_empty() => v,
            _ => known(key).map_or("", |s| s.default),
        }
    }

    fn invalid(&self, key: &'static str, expected: &str) -> ConfigError {
        ConfigError::InvalidValue {
            key,
            value: self.text(key).to_string(),
            expected: expected.to_string(),
        }
    }

    /// A value that may be left empty.
    fn optional(&self, key: &'static str) -> Option<String> {
        Some(self.text(key).to_string()).filter(|t| !t.is_empty())
    }

    fn path(&self, key: &'static str) -> Option<PathBuf> {
        self.optional(key).map(PathBuf::from)
    }

    fn non_empty(&self, key: &'static str, expected: &str) -> Result<String, ConfigError> {
        match self.text(key) {
            "" => Err(self.invalid(key, expected)),
            v => Ok(v.to_string()),
        }
    }

    fn bool(&self, key: &'static str) -> Result<bool, ConfigError> {
        match self.text(key) {
            v if v.eq_ignore_ascii_case("true") => Ok(true),
            v if v.eq_ignore_ascii_case("false") => Ok(false),
            _ => Err(self.invalid(key, "true or false")),
        }
    }

    /// A decimal integer (digits only, so no sign) within `min..=max`.
    fn num(
        &self,
        key: &'static str,
        min: u64,
        max: u64,
        expected: &str,
    ) -> Result<u64, ConfigError> {
        let v = self.text(key);
        v.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| v.parse::<u64>().ok())
            .flatten()
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(|| self.invalid(key, expected))
    }

    /// One of `all`, by its configuration spelling.
    fn choice<T: Copy + fmt::Display>(
        &self,
        key: &'static str,
        all: &[T],
        ignore_case: bool,
    ) -> Result<T, ConfigError> {
        let v = self.text(key);
        let matches = |t: &&T| {
            let name = t.to_string();
            name == v || (ignore_case && name.eq_ignore_ascii_case(v))
        };
        all.iter().find(matches).copied().ok_or_else(|| {
            let names: Vec<String> = all.iter().map(T::to_string).collect();
            let case = if ignore_case {
                ""
            } else {
                " (exact, upper case)"
            };
            self.invalid(key, &format!("one of: {}{case}", names.join(", ")))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `conf/eventmesh.properties`, found from the crate's directory as
    /// cargo gives it when the test runs (a test binary built from another
    /// checkout of the same sources would point into that one).
    fn shipped() -> std::path::PathBuf {
        let crate_dir = std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
            || env!("CARGO_MANIFEST_DIR").into(),
            std::path::PathBuf::from,
        );
        crate_dir.join("../../conf/eventmesh.properties")
    }
    const PORT: &str = "eventmesh.server.http.port";
    const TOPOLOGY: &str = "eventmesh.delivery.topology";
    const CLUSTER: &str = "eventmesh.cluster.enabled";
    const META: &str = "eventmesh.meta.type";
    type Pairs<'a> = &'a [(&'a str, &'a str)];

    fn owned(pairs: Pairs) -> Vec<(String, String)> {
        let own = |(k, v): &(&str, &str)| (k.to_string(), v.to_string());
        pairs.iter().map(own).collect()
    }

    fn sources<'e>(file: Option<PathBuf>, env: &'e MapEnv, ovr: Pairs) -> ConfigSources<'e> {
        let overrides = owned(ovr);
        ConfigSources {
            file,
            file_required: true,
            env,
            overrides,
        }
    }

    /// Loads from `file`, `vars` and `ovr`; the storage type comes from the
    /// environment unless `vars` sets it.
    fn load_with(file: Option<&PathBuf>, vars: Pairs, ovr: Pairs) -> Result<Loaded, ConfigError> {
        let mut env = MapEnv(owned(vars).into_iter().collect());
        let storage = env.0.entry("EVENTMESH_STORAGE_TYPE".into());
        storage.or_insert_with(|| "standalone".into());
        Config::load(&sources(file.cloned(), &env, ovr))
    }

    fn cfg(ovr: Pairs) -> Config {
        load_with(None, &[], ovr).expect("valid").config
    }

    fn err(ovr: Pairs) -> String {
        load_with(None, &[], ovr).expect_err("invalid").to_string()
    }

    /// Asserts that loading with `ovr` fails with a message containing `parts`.
    fn fails(ovr: Pairs, parts: &[&str]) {
        assert_has(&err(ovr), parts);
    }

    fn assert_has(text: &str, parts: &[&str]) {
        for part in parts {
            assert!(text.contains(part), "{text:?} should contain {part:?}");
        }
    }

    fn temp_file(name: &str, text: &str) -> PathBuf {
        let name = format!("eventmesh-config-{}-{name}.properties", std::process::id());
        let path = std::env::temp_dir().join(name);
        std::fs::write(&path, text).expect("write temp file");
        path
    }

    #[test]
    fn precedence_default_file_env_override() {
        assert_eq!(cfg(&[]).http_port, 10105);
        let file = temp_file("precedence", &format!("{PORT}=1111\n"));
        let port =
            |vars: Pairs, ovr: Pairs| load_with(Some(&file), vars, ovr).unwrap().config.http_port;
        let vars = [("EVENTMESH_SERVER_HTTP_PORT", "2222")];
        assert_eq!(port(&[], &[]), 1111);
        assert_eq!(port(&vars, &[]), 2222);
        assert_eq!(port(&vars, &[(PORT, "3333"), (PORT, "4444")]), 4444);
        std::fs::remove_file(file).ok();
    }

    #[test]
    fn env_name_mapping() {
        assert_eq!(env_var_name(TOPOLOGY), "EVENTMESH_DELIVERY_TOPOLOGY");
        let camel = env_var_name("eventmesh.some.camelCase");
        assert_eq!(camel, "EVENTMESH_SOME_CAMELCASE");
        let inflight = ("EVENTMESH_DELIVERY_MAX_INFLIGHT", "7");
        let loaded = load_with(None, &[inflight, ("EVENTMESH_ADMIN_TOKEN", "s3")], &[]);
        let loaded = loaded.unwrap();
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        assert_eq!(loaded.config.max_inflight, 7);
        assert_eq!(loaded.config.admin_token.as_deref(), Some("s3"));
    }

    #[test]
    fn blank_topology_is_local_sticky_pull() {
        let c = cfg(&[(TOPOLOGY, "  ")]);
        assert_eq!(c.delivery_topology, DeliveryTopology::LocalStickyPull);
        assert_eq!(c.delivery_topology.as_str(), "LOCAL_STICKY_PULL");
        assert_eq!(c.webhook_timeout, Duration::from_millis(5000));
    }

    #[test]
    fn bad_topology_names_value_and_valid_values() {
        let names = ["LOCAL_STICKY_PULL", "PARTITION_OWNED_PULL"];
        fails(
            &[(TOPOLOGY, "PARTITION_OWNER")],
            &["\"PARTITION_OWNER\"", names[0], names[1]],
        );
        fails(
            &[(TOPOLOGY, "local_sticky_pull")],
            &["\"local_sticky_pull\""],
        );
    }

    #[test]
    fn partition_owned_requires_cluster_and_etcd() {
        let e = err(&[(TOPOLOGY, "PARTITION_OWNED_PULL")]);
        let lead =
            "delivery topology PARTITION_OWNED_PULL requires eventmesh.cluster.enabled=true \
                    and a cluster meta store (eventmesh.meta.type=etcd)";
        assert!(e.starts_with(lead), "{e}");
        assert_has(&e, &["cluster.enabled=false", "meta.type=embedded"]);
        fails(
            &[(CLUSTER, "TRUE")],
            &["cluster.enabled=true", "eventmesh.meta.type=etcd"],
        );
        let c = cfg(&[(META, "etcd"), (CLUSTER, "true")]);
        assert_eq!(c.etcd_endpoints, vec!["http://127.0.0.1:2379".to_string()]);
        let owned_pull = (TOPOLOGY, "PARTITION_OWNED_PULL");
        let e = err(&[owned_pull, (CLUSTER, "true"), (META, "etcd")]);
        assert!(e.contains("not available in this build"), "{e}");
        fails(
            &[
                (META, "etcd"),
                ("eventmesh.meta.etcd.endpoints", "127.0.0.1:2379"),
            ],
            &["eventmesh.meta.etcd.endpoints", "127.0.0.1:2379"],
        );
        fails(
            &[(META, "etcd"), ("eventmesh.meta.etcd.user", "root")],
            &["eventmesh.meta.etcd.password"],
        );
    }

    #[test]
    fn storage_type_required() {
        let env = MapEnv(HashMap::new());
        let msg = Config::load(&sources(None, &env, &[]))
            .unwrap_err()
            .to_string();
        let want = "eventmesh.storage.type is not set; supported storage backends: standalone";
        assert_eq!(msg, want);
        fails(
            &[("eventmesh.storage.type", "rocks")],
            &["\"rocks\"", "standalone"],
        );
    }

    #[test]
    fn malformed_values_name_key_and_value() {
        let expected = "invalid value \"abc\" for eventmesh.server.http.port: \
                        expected a port number 0-65535";
        assert_eq!(err(&[(PORT, "abc")]), expected);
        fails(
            &[(PORT, "70000")],
            &["\"70000\" for eventmesh.server.http.port"],
        );
        let size = "eventmesh.http.max.body.bytes";
        fails(
            &[(size, "-5")],
            &["\"-5\" for eventmesh.http.max.body.bytes"],
        );
        fails(
            &[("eventmesh.delivery.max.inflight", "0")],
            &["\"0\" for", "1000000"],
        );
        fails(
            &[("eventmesh.topic.default.partitions", "1025")],
            &["1 to 1024"],
        );
        fails(
            &[("eventmesh.storage.block.cache.bytes", "1000")],
            &["\"1000\" for eventmesh.storage.block.cache.bytes", "1 MiB"],
        );
        fails(
            &[("eventmesh.storage.sync", "yes")],
            &["\"yes\"", "true or false"],
        );
        let initial = ("eventmesh.delivery.backoff.initial.ms", "500");
        let max = ("eventmesh.delivery.backoff.max.ms", "100");
        fails(
            &[initial, max],
            &["backoff.max.ms (100)", "backoff.initial.ms (500)"],
        );
        assert_eq!(cfg(&[(PORT, " 0 ")]).http_port, 0);
    }

    #[test]
    fn unknown_keys_and_env_vars_warn() {
        let typo = "eventmesh.delivery.topolgy";
        let file = temp_file(
            "unknown",
            &format!("{typo}=LOCAL_STICKY_PULL\nother.key=1\n"),
        );
        let vars = [("EVENTMESH_DELIVERY_TOPOLGY", "x"), ("PATH", "/bin")];
        let ovr = [("eventmesh.bogus", "1"), ("java.home", "/x")];
        let w = load_with(Some(&file), &vars, &ovr).unwrap().warnings;
        assert_eq!(w.len(), 3, "{w:?}");
        let from = file.display();
        assert_eq!(
            w[0],
            format!("unknown configuration key {typo} (from {from}); ignored")
        );
        assert_has(&w[1], &["EVENTMESH_DELIVERY_TOPOLGY"]);
        assert_has(&w[2], &["eventmesh.bogus", "-D"]);
        std::fs::remove_file(file).ok();
    }

    #[test]
    fn file_presence_and_parse_errors() {
        let missing = std::env::temp_dir().join("eventmesh-config-does-not-exist.properties");
        let env = MapEnv(
            owned(&[("EVENTMESH_STORAGE_TYPE", "standalone")])
                .into_iter()
                .collect(),
        );
        let mut sources = sources(Some(missing), &env, &[]);
        let loaded = Config::load(&sources);
        assert!(
            matches!(loaded, Err(ConfigError::FileNotFound { .. })),
            "{loaded:?}"
        );
        sources.file_required = false;
        assert!(Config::load(&sources).is_ok());
        let bad = temp_file("bad", "# fine\n=nokey\n");
        let msg = load_with(Some(&bad), &[], &[]).unwrap_err().to_string();
        assert_has(&msg, &[&bad.display().to_string(), "line 2"]);
        std::fs::remove_file(bad).ok();
    }

    #[test]
    fn properties_syntax() {
        let text = "# comment\n  ! other comment\n\na=1\nb : two \nc   three words\n\
                    long = first \\\n     second \\\n third\n\
                    esc=tab\\there\\nnl\\\\back\\u00e9\\u0041\n\
                    key\\ with\\=sep = v\nempty=\ntrail=x\\ \r\ncolon:=v\n";
        let want = owned(&[
            ("a", "1"),
            ("b", "two"),
            ("c", "three words"),
            ("long", "first second third"),
            ("esc", "tab\there\nnl\\backéA"),
            ("key with=sep", "v"),
            ("empty", ""),
            ("trail", "x "),
            ("colon", "=v"),
        ]);
        assert_eq!(parse_properties(text).unwrap(), want);
        let e = parse_properties("a=1\n\nlonely\n").unwrap_err();
        assert!(matches!(e, ConfigError::Parse { line: 3, .. }), "{e}");
        assert_has(&e.to_string(), &["line 3", "lonely"]);
        let e = parse_properties("a=1\nb=\\u12G4\n").unwrap_err();
        assert!(matches!(e, ConfigError::Parse { line: 2, .. }), "{e}");
    }

    #[test]
    fn override_parsing() {
        let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert_eq!(parse_override(" a.b = c=d ").unwrap(), pair("a.b", "c=d"));
        assert_eq!(parse_override("a=").unwrap(), pair("a", ""));
        let message = |arg: &str| parse_override(arg).unwrap_err().to_string();
        assert_has(&message("novalue"), &["\"novalue\""]);
        assert_has(&message(" =x"), &["\" =x\""]);
    }

    #[test]
    fn admin_token_is_redacted() {
        let token = |c: &Config| {
            let entries = c.redacted_entries();
            entries
                .into_iter()
                .find(|(k, _)| k == ADMIN_TOKEN_KEY)
                .map(|(_, v)| v)
        };
        let c = cfg(&[(ADMIN_TOKEN_KEY, "hunter2")]);
        assert_eq!(token(&c).as_deref(), Some("******"));
        assert!(!format!("{c:?}").contains("hunter2"));
        let c = cfg(&[(ADMIN_TOKEN_KEY, " ")]);
        assert_eq!(c.admin_token, None);
        assert_eq!(token(&c).as_deref(), Some(""));
    }

    #[test]
    fn gate_keys_are_typed_and_the_jwt_secret_redacted() {
        let c = cfg(&[
            (JWT_SECRET_KEY, "jwt-hunter2"),
            ("eventmesh.security.gate.quota.publish.rate", "100"),
            ("eventmesh.security.gate.acl.file", "/etc/em/acl"),
            ("eventmesh.webhook.denied.cidrs", "10.0.0.0/8, fd00::/8"),
        ]);
        assert!(c.gate.any_configured());
        assert_eq!(c.gate.publish_rate, 100);
        assert_eq!(c.webhook_denied_cidrs, ["10.0.0.0/8", "fd00::/8"]);
        let entries = c.redacted_entries();
        let value = |k: &str| entries.iter().find(|(key, _)| key == k).unwrap().1.clone();
        assert_eq!(value(JWT_SECRET_KEY), "******");
        assert_eq!(value("eventmesh.security.gate.acl.file"), "/etc/em/acl");
        assert!(!format!("{c:?}").contains("jwt-hunter2"));
        assert!(!cfg(&[]).gate.any_configured());
        for (key, bad) in [
            ("eventmesh.webhook.denied.cidrs", "10.0.0.0"),
            ("eventmesh.security.gate.quota.publish.rate", "-1"),
            ("eventmesh.security.gate.failClosed", "yes"),
        ] {
            fails(&[(key, bad)], &[key, bad]);
        }
    }

    #[test]
    fn shipped_properties_file() {
        let text = std::fs::read_to_string(shipped()).expect("read conf/eventmesh.properties");
        let entries = parse_properties(&text).expect("shipped file parses");
        assert_eq!(entries, owned(&[("eventmesh.storage.type", "standalone")]));
        for spec in KNOWN_KEYS {
            let commented = format!("#{}={}", spec.key, spec.default);
            let set = format!("{}=", spec.key);
            let listed = text.lines().any(|l| l == commented || l.starts_with(&set));
            assert!(listed, "{} missing (expected `{commented}`)", spec.key);
        }
        let env = MapEnv(HashMap::new());
        let loaded = Config::load(&sources(Some(shipped()), &env, &[])).unwrap();
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        assert_eq!(loaded.config.storage_type, StorageType::Standalone);
        let entries = loaded.config.redacted_entries();
        assert_eq!(entries.len(), KNOWN_KEYS.len());
        for ((key, value), spec) in entries.iter().zip(KNOWN_KEYS) {
            let storage = spec.key == "eventmesh.storage.type";
            let default = if storage { "standalone" } else { spec.default };
            assert_eq!((key.as_str(), value.as_str()), (spec.key, default));
        }
    }
}
