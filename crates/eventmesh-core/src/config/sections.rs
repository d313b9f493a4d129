//! The typed configuration: [`Config`] and its sections, one per part of the
//! runtime, each shaped so the crate that uses it can take it as it is.
//! Every field is set from exactly one key of [`KNOWN_KEYS`](super::KNOWN_KEYS)
//! (the field path mostly follows the key name; the declaration names it),
//! so a `Config` built by [`Config::load`] holds only validated values.
//! `Debug` never shows a secret.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;

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

        impl Default for $name {
            /// The first value declared.
            fn default() -> Self {
                $name::ALL[0]
            }
        }
    };
}

text_enum! {
    /// Event storage backend.
    StorageType { Standalone = "standalone", Jetstream = "jetstream" }
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

text_enum! {
    /// Where connectors keep their positions.
    ConnectorOffsetStore { Memory = "memory", Rocksdb = "rocksdb", Meta = "meta" }
}

text_enum! {
    /// How log lines are written.
    LogFormat { Text = "text", Json = "json" }
}

text_enum! {
    /// Whether a TLS listener with a client CA insists on a client
    /// certificate.
    ClientAuth { Required = "required", Optional = "optional" }
}

/// The validated, typed runtime configuration. `Debug` lists every key with
/// its effective value, secrets redacted (see [`Config::redacted_entries`]).
#[derive(Clone, PartialEq)]
pub struct Config {
    pub server: ServerConfig,
    pub storage: StorageConfig,
    pub topic: TopicConfig,
    pub publish: PublishConfig,
    pub delivery: DeliveryConfig,
    pub webhook: WebhookConfig,
    pub cluster: ClusterConfig,
    pub meta: MetaConfig,
    pub gate: GateConfig,
    pub shutdown: ShutdownConfig,
    pub log: LogConfig,
    pub tracing: TracingConfig,
    pub a2a: A2aConfig,
    pub mcp: McpConfig,
    pub connector: ConnectorConfig,
}

impl Config {
    /// Every field at its type's zero value; loading then sets each of them
    /// from its key.
    pub(crate) fn unset() -> Config {
        Config {
            server: ServerConfig::default(),
            storage: StorageConfig::default(),
            topic: TopicConfig::default(),
            publish: PublishConfig::default(),
            delivery: DeliveryConfig::default(),
            webhook: WebhookConfig::default(),
            cluster: ClusterConfig::default(),
            meta: MetaConfig::default(),
            gate: GateConfig::default(),
            shutdown: ShutdownConfig::default(),
            log: LogConfig::default(),
            tracing: TracingConfig::default(),
            a2a: A2aConfig::default(),
            mcp: McpConfig::default(),
            connector: ConnectorConfig::default(),
        }
    }
}

/// The listeners: one address, three ports (four with gRPC).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ServerConfig {
    /// Address every listener binds to.
    pub host: String,
    pub http: HttpConfig,
    pub admin: AdminConfig,
    pub tcp: TcpConfig,
    pub grpc: GrpcConfig,
    pub mqtt: MqttConfig,
    pub tls: ServerTlsConfig,
    pub connections: ConnectionLimits,
    /// Threads of the async runtime; 0: one per CPU.
    pub worker_threads: usize,
    /// How many wrong admin tokens and cluster secrets a remote address
    /// may present.
    pub auth_failures: AuthFailuresConfig,
}

/// The allowance of failed admin-token and cluster-secret attempts per
/// remote address: `burst` in a row, then one more per `interval`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AuthFailuresConfig {
    pub burst: u32,
    pub interval: Duration,
}

/// How many connections the listeners hold at once; 0 in a field: derived
/// from the process's descriptor limit at boot.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConnectionLimits {
    /// The traffic ports, HTTP and TCP together.
    pub traffic_max: u32,
    /// One client address on the traffic ports.
    pub per_address_max: u32,
    /// The admin port.
    pub admin_max: u32,
}

/// The listeners' certificate, shared by the three ports.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ServerTlsConfig {
    /// Set with `key_file`, or neither (plain text).
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// Mutual TLS: the authorities client certificates are checked against.
    pub client_ca_file: Option<PathBuf>,
    pub client_auth: ClientAuth,
    /// How often the files are checked for changes (zero: never).
    pub watch: Duration,
    /// Bound on a handshake, from the connection's accept.
    pub handshake_timeout: Duration,
}

impl ServerTlsConfig {
    /// True when a certificate is configured.
    pub fn configured(&self) -> bool {
        self.cert_file.is_some()
    }
}

/// The traffic HTTP API (HTTP, SSE and WebSocket).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HttpConfig {
    /// 0 picks a free port.
    pub port: u16,
    /// Largest request body, and (with framing room) WebSocket message.
    pub max_body_bytes: usize,
    /// TLS when a certificate is configured.
    pub tls: bool,
    /// Both HTTP ports: from accept (or a later request's first byte) to a
    /// complete request header.
    pub header_timeout: Duration,
    /// Both HTTP ports: a kept-alive connection with nothing under way.
    pub idle_timeout: Duration,
    /// Both HTTP ports: from a request's header to the end of its body.
    pub body_timeout: Duration,
}

/// The admin HTTP API.
#[derive(Clone, PartialEq, Default)]
pub struct AdminConfig {
    /// `None`: the traffic host.
    pub host: Option<String>,
    /// 0 picks a free port.
    pub port: u16,
    /// Bearer token of the admin routes (secret); `None` locks them.
    pub token: Option<String>,
    /// TLS when a certificate is configured.
    pub tls: bool,
}

/// The gRPC listener (the A2A gRPC binding).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GrpcConfig {
    /// `None`: the traffic host.
    pub host: Option<String>,
    /// `None` when the gRPC listener is off.
    pub port: Option<u16>,
    /// TLS when a certificate is configured.
    pub tls: bool,
    /// Largest request message.
    pub max_message_bytes: usize,
    /// HTTP/2 ping interval, and how long a ping may go unanswered.
    pub keepalive: Duration,
}

/// The MQTT listener.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MqttConfig {
    /// `None`: the traffic host.
    pub host: Option<String>,
    /// `None` when the MQTT listener is off.
    pub port: Option<u16>,
    /// TLS when a certificate is configured.
    pub tls: bool,
    /// Largest packet accepted.
    pub max_packet_bytes: usize,
    /// From accept to a complete CONNECT.
    pub connect_timeout: Duration,
    /// Longest keep-alive granted.
    pub keepalive_max: Duration,
    /// Longest a session outlives its connection.
    pub session_expiry_max: Duration,
    /// Unacknowledged QoS 1 and 2 publishes a client may have.
    pub receive_maximum: u16,
    /// Unacknowledged QoS 1 and 2 deliveries to a client, at most.
    pub inflight_max: u16,
    /// Topic aliases a client may set.
    pub topic_alias_max: u16,
}

/// The binary TCP protocol.
#[derive(Clone, PartialEq, Default)]
pub struct TcpConfig {
    /// `None`: the traffic host.
    pub host: Option<String>,
    /// `None` when the TCP port is disabled.
    pub port: Option<u16>,
    /// Connection token a HELLO must carry (secret); `None`: none required.
    pub token: Option<String>,
    pub max_frame_bytes: usize,
    /// Heartbeat interval announced to clients.
    pub heartbeat: Duration,
    /// From accept to a complete `HELLO`.
    pub hello_timeout: Duration,
    /// Threads the connections are served on; `0`: one per two CPUs.
    pub threads: usize,
    /// TLS when a certificate is configured.
    pub tls: bool,
}

/// The node's local RocksDB and the event log kept in it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StorageConfig {
    pub data_dir: PathBuf,
    pub backend: StorageType,
    /// Fsync every publish before answering it.
    pub sync: bool,
    pub write_buffer_bytes: usize,
    pub block_cache_bytes: usize,
    /// WAL files kept for reuse.
    pub wal_reuse_files: usize,
    /// Retention of topics without their own, per partition: records older
    /// than this go (zero: no age limit).
    pub retention_age: Duration,
    /// ... and the oldest records past this many payload bytes (zero: no
    /// size limit).
    pub retention_bytes: u64,
    /// How often retention runs (standalone) or its state is refreshed
    /// (JetStream, whose servers apply the limits).
    pub retention_check: Duration,
    /// Used when `backend` is [`StorageType::Jetstream`].
    pub jetstream: JetStreamSettings,
}

/// How to reach the JetStream the event log lives on.
#[derive(Clone, PartialEq, Default)]
pub struct JetStreamSettings {
    pub servers: Vec<String>,
    pub replicas: usize,
    /// Prefix of stream names and subjects.
    pub prefix: String,
    /// Bound on every call.
    pub timeout: Duration,
    /// Per topic read, payload bytes of its latest records kept in memory.
    pub read_cache_bytes: usize,
    /// Set together with `password`, or neither.
    pub user: Option<String>,
    /// Secret.
    pub password: Option<String>,
    /// Secret.
    pub token: Option<String>,
    pub creds_file: Option<PathBuf>,
    pub tls_ca_file: Option<PathBuf>,
    /// Client certificate for servers that verify clients; set together
    /// with `tls_key_file`, or neither.
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
}

impl fmt::Debug for JetStreamSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JetStreamSettings")
            .field("servers", &self.servers)
            .field("replicas", &self.replicas)
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("read_cache_bytes", &self.read_cache_bytes)
            .field("user", &self.user)
            .field("password", &Redacted(&self.password))
            .field("token", &Redacted(&self.token))
            .field("creds_file", &self.creds_file)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("tls_cert_file", &self.tls_cert_file)
            .field("tls_key_file", &self.tls_key_file)
            .finish()
    }
}

/// Publishing.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PublishConfig {
    /// How long a publish's `source` + `id` is remembered, so that a retry
    /// is stored once; zero turns idempotent publishing off.
    pub dedup_window: Duration,
}

/// Topics: their partitions when created on first use, and how often
/// pattern subscriptions list them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TopicConfig {
    pub default_partitions: u32,
    /// How often pattern subscriptions list the topics.
    pub pattern_rescan: Duration,
}

/// The dispatchers' tunables: exactly the fields of the runtime's
/// `DispatchSettings`, with the same names and types.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeliveryConfig {
    pub topology: DeliveryTopology,
    /// Events reach subscribers only once fsynced (standalone log).
    pub after_sync: bool,
    pub max_inflight: usize,
    pub max_inflight_per_client: usize,
    pub max_attempts: u32,
    pub ack_timeout: Duration,
    /// How long a pulling member may go without a poll or a stream before
    /// it leaves its groups' rotation.
    pub member_timeout: Duration,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// Largest random spread added to a retry delay, as a fraction of it.
    pub backoff_jitter: f64,
    /// How often committed offsets (and the in-flight ledger) are flushed.
    pub flush_interval: Duration,
    /// Timeout of one webhook push.
    pub webhook_timeout: Duration,
    /// TLS of webhook pushes.
    pub webhook_tls: WebhookTlsConfig,
    /// The CloudEvents webhook validation handshake.
    pub webhook_handshake: WebhookHandshakeConfig,
}

/// The CloudEvents webhook validation handshake (its keys are
/// `eventmesh.webhook.handshake.*`). The `Default` is off, for tests
/// that build a configuration by hand; the keys' default is on.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WebhookHandshakeConfig {
    /// Whether subscriptions that do not say run the handshake.
    pub enabled: bool,
    /// `WebHook-Request-Origin`; `None`: the cluster's name, set at boot.
    pub origin: Option<String>,
    /// `WebHook-Request-Rate`: pushes per minute asked for.
    pub request_rate: u32,
    /// The longest wait before a refused handshake is asked again.
    pub retry_max: Duration,
}

/// The client side of TLS to webhook receivers (its keys are
/// `eventmesh.webhook.*`; it travels with the push timeout to the
/// dispatchers).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WebhookTlsConfig {
    /// Extra authorities trusted next to the built-in public roots.
    pub ca_file: Option<PathBuf>,
    /// Client certificate shown to receivers that ask for one; set
    /// together with `key_file`, or neither.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

/// Where webhooks may point (the push timeout is in [`DeliveryConfig`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WebhookConfig {
    /// Ranges a webhook URL may not resolve into.
    pub denied_cidrs: Vec<IpNet>,
}

/// Cluster membership.
#[derive(Clone, PartialEq, Default)]
pub struct ClusterConfig {
    pub enabled: bool,
    /// `None`: made up at first boot and kept in the data directory.
    pub instance_id: Option<String>,
    /// The cluster's name on the mesh; `None`: the one kept in the meta
    /// store (made up at first boot).
    pub name: Option<String>,
    /// Time to live of the instance's registration.
    pub lease: Duration,
    /// How long a partition given up waits for its deliveries in hand.
    pub handover_grace: Duration,
    /// Secret of the internal channel between instances.
    pub secret: Option<String>,
    /// `host:port` the other instances call; `None`: the traffic listener's.
    pub advertise: Option<String>,
    /// Authorities of the other instances' traffic certificates; `None`:
    /// the client CA, else the public web roots.
    pub tls_ca_file: Option<PathBuf>,
}

/// The metadata store.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MetaConfig {
    pub backend: MetaType,
    /// Used when `backend` is [`MetaType::Etcd`].
    pub etcd: EtcdSettings,
}

/// How to reach etcd.
#[derive(Clone, PartialEq, Default)]
pub struct EtcdSettings {
    pub endpoints: Vec<String>,
    /// Bound on every etcd call.
    pub timeout: Duration,
    /// Set together with `password`, or neither.
    pub user: Option<String>,
    /// Secret.
    pub password: Option<String>,
    /// Authorities etcd's certificates are checked against (`https://`
    /// endpoints; `None`: the system's roots).
    pub tls_ca_file: Option<PathBuf>,
    /// Client certificate for an etcd with `--client-cert-auth`; set
    /// together with `tls_key_file`, or neither.
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
}

impl EtcdSettings {
    /// Endpoints with a 5 s timeout, no credentials and no TLS files.
    pub fn new<I, S>(endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        EtcdSettings {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            timeout: Duration::from_secs(5),
            ..EtcdSettings::default()
        }
    }

    /// True when any TLS file is set.
    pub fn tls_files(&self) -> bool {
        self.tls_ca_file.is_some() || self.tls_cert_file.is_some() || self.tls_key_file.is_some()
    }
}

/// On SIGTERM/SIGINT.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ShutdownConfig {
    /// How long handed-out deliveries may still be acknowledged.
    pub grace: Duration,
}

/// The process's own log.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LogConfig {
    pub format: LogFormat,
}

/// Distributed tracing: the spans of each event's path, exported over
/// OTLP/HTTP when a collector is named.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TracingConfig {
    /// Base URL of the collector's OTLP/HTTP receiver; `None`: no export.
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the exported spans.
    pub service_name: String,
    /// Share of new traces recorded (0 to 1); a sampled parent decides
    /// for its children.
    pub sample_ratio: f64,
}

/// The connector runtime.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConnectorConfig {
    pub offset_store: ConnectorOffsetStore,
}

/// The A2A gateway.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct A2aConfig {
    pub enabled: bool,
    /// Base URL written into served agent cards; `None`: from the request.
    pub public_url: Option<String>,
    /// Messages kept per task history.
    pub history_max: u32,
    /// A task with no update from its agent for this long is failed.
    pub task_timeout: Duration,
    /// An agent with no heartbeat for this long is gone.
    pub agent_ttl: Duration,
    /// How long a finished task is kept; zero: forever.
    pub task_retention: Duration,
    /// Clients may register webhooks (push notifications).
    pub push_enabled: bool,
    /// The URL of the gRPC interface in served cards; `None`: the card
    /// request's host with [`A2aConfig::grpc_port`].
    pub grpc_public_url: Option<String>,
    /// The gRPC listener's port once bound. Not a key: the boot sets it
    /// from `eventmesh.server.grpc.port` (the port it got, for `0`);
    /// `None`: no gRPC listener, and cards list no gRPC interface.
    pub grpc_port: Option<u16>,
}

/// The MCP gateway.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct McpConfig {
    pub enabled: bool,
    /// Open sessions at most.
    pub sessions_max: u32,
    /// A session without a message for this long is closed.
    pub session_idle: Duration,
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

/// How `Debug` shows a secret: whether it is set, never its value.
struct Redacted<'a>(&'a Option<String>);

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(_) => f.write_str("Some(\"******\")"),
            None => f.write_str("None"),
        }
    }
}

impl fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterConfig")
            .field("enabled", &self.enabled)
            .field("instance_id", &self.instance_id)
            .field("name", &self.name)
            .field("lease", &self.lease)
            .field("handover_grace", &self.handover_grace)
            .field("secret", &Redacted(&self.secret))
            .finish()
    }
}

impl fmt::Debug for AdminConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminConfig")
            .field("port", &self.port)
            .field("token", &Redacted(&self.token))
            .finish()
    }
}

impl fmt::Debug for TcpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpConfig")
            .field("port", &self.port)
            .field("token", &Redacted(&self.token))
            .field("max_frame_bytes", &self.max_frame_bytes)
            .field("heartbeat", &self.heartbeat)
            .field("hello_timeout", &self.hello_timeout)
            .field("threads", &self.threads)
            .finish()
    }
}

impl fmt::Debug for EtcdSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdSettings")
            .field("endpoints", &self.endpoints)
            .field("timeout", &self.timeout)
            .field("user", &self.user)
            .field("password", &Redacted(&self.password))
            .field("tls_ca_file", &self.tls_ca_file)
            .field("tls_cert_file", &self.tls_cert_file)
            .field("tls_key_file", &self.tls_key_file)
            .finish()
    }
}
