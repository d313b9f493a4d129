//! The configuration keys, declared once each: name, built-in default, value
//! kind (parser, validation and rendering), the typed field it sets, whether
//! it is a secret, and its description. Everything else is derived from this
//! table: the known-key list, unknown-key warnings, environment variable
//! names, loading into [`Config`], `eventmesh config` and `/admin/config`
//! output with secrets redacted, and the table in docs/configuration.md
//! ([`markdown_table`]).
//!
//! Invariants: each key appears once and sets exactly one field; a default
//! is valid for its kind and renders back to itself; a secret is only ever
//! shown as `******` (or `""` when unset).

use std::fmt;

use super::kinds::OPTIONAL_HTTP_URL;
use super::kinds::{
    Cidrs, Flag, Fraction, Int, Invalid, Kind, MaybeEmpty, Millis, OneOf, Optional,
    OptionalHostName, OptionalPath, OptionalWord, Path, PortOrOff, Required, Seconds, Text, Word,
    HTTP_URLS, MILLIS, NATS_URLS, PORT,
};
use super::sections::{
    ClientAuth, Config, ConnectorOffsetStore, DeliveryTopology, LogFormat, MetaType, StorageType,
};
use super::ConfigError;

/// One declared configuration key.
#[derive(Clone, Copy)]
pub struct KeySpec {
    pub key: &'static str,
    /// Built-in default as text (`""` when there is none).
    pub default: &'static str,
    /// One line, as shown in docs/configuration.md (Markdown).
    pub description: &'static str,
    /// Never shown: `eventmesh config`, `/admin/config`, logs and `Debug`
    /// print `******` instead.
    pub secret: bool,
    pub(crate) binding: &'static dyn Binding,
}

impl fmt::Debug for KeySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeySpec")
            .field("key", &self.key)
            .field("default", &self.default)
            .field("description", &self.description)
            .field("secret", &self.secret)
            .finish()
    }
}

/// What a secret that is set is shown as.
pub const REDACTED: &str = "******";

impl KeySpec {
    /// The environment variable consulted for this key.
    pub fn env_var(&self) -> String {
        super::env_var_name(self.key)
    }

    /// This key's effective value in `config`, as text that would load to
    /// the same value; a secret is `******` when set and `""` when not, and
    /// a password or token inside a URL or connection string is `***`
    /// ([`crate::redact`]).
    pub fn redacted_value(&self, config: &Config) -> String {
        let value = self.binding.render(config);
        if self.secret && !value.is_empty() {
            REDACTED.to_string()
        } else {
            crate::redact::text(&value)
        }
    }

    /// Sets this key's field from `raw` (trimmed; absent, or blank unless
    /// the kind takes blank as a value, means the default). The error names
    /// the key, the value and what is allowed.
    pub(crate) fn apply(&self, config: &mut Config, raw: Option<&str>) -> Result<(), ConfigError> {
        let text = match raw.map(str::trim) {
            Some(v) if !v.is_empty() || self.binding.blank_is_a_value() => v,
            _ => self.default,
        };
        self.binding
            .apply(config, text)
            .map_err(|invalid| match invalid {
                Invalid::Value { part, expected } => ConfigError::InvalidValue {
                    key: self.key,
                    value: match part.unwrap_or_else(|| text.to_string()) {
                        v if self.secret && !v.is_empty() => REDACTED.to_string(),
                        v => crate::redact::text(&v),
                    },
                    expected,
                },
                Invalid::Missing { hint } => ConfigError::Missing {
                    key: self.key,
                    hint,
                },
            })
    }
}

/// The declared key named `key`.
pub(crate) fn known(key: &str) -> Option<&'static KeySpec> {
    KNOWN_KEYS.iter().find(|s| s.key == key)
}

/// Reads and writes one field of [`Config`] through its kind.
pub(crate) trait Binding: Sync {
    fn apply(&self, config: &mut Config, text: &str) -> Result<(), Invalid>;
    fn render(&self, config: &Config) -> String;
    fn blank_is_a_value(&self) -> bool;
}

/// A field of [`Config`], reached by the two accessors, with its kind.
pub(crate) struct Field<T: 'static, K> {
    pub get: fn(&Config) -> &T,
    pub get_mut: fn(&mut Config) -> &mut T,
    pub kind: K,
}

impl<T: 'static, K: Kind<Value = T>> Binding for Field<T, K> {
    fn apply(&self, config: &mut Config, text: &str) -> Result<(), Invalid> {
        *(self.get_mut)(config) = self.kind.parse(text)?;
        Ok(())
    }

    fn render(&self, config: &Config) -> String {
        self.kind.render((self.get)(config))
    }

    fn blank_is_a_value(&self) -> bool {
        self.kind.blank_is_a_value()
    }
}

/// `[secret] "key" = "default", field.path => kind, "description";`
macro_rules! keys {
    (@secret) => { false };
    (@secret secret) => { true };
    ($(
        $($secret:ident)? $key:literal = $default:literal,
        $($field:ident).+ => $kind:expr,
        $description:literal;
    )*) => {
        &[$(KeySpec {
            key: $key,
            default: $default,
            description: $description,
            secret: keys!(@secret $($secret)?),
            binding: &Field {
                get: |c| &c.$($field).+,
                get_mut: |c| &mut c.$($field).+,
                kind: $kind,
            },
        }),*]
    };
}

const MS_OR_ZERO: Millis = Millis(Int::new(
    0,
    u64::MAX,
    "a duration in milliseconds (0 or more)",
));
const LIMIT: Int<u32> = Int::new(0, u32::MAX as u64, "a whole number (0 = unlimited)");
const CLAIM: Text = Text("a claim name");
/// A bound on a wait: at least 1 ms, at most a day.
const TIMEOUT: Millis = Millis(Int::new(
    1,
    86_400_000,
    "a duration in milliseconds from 1 to 86400000",
));
const CONNECTIONS: Int<u32> = Int::new(
    0,
    10_000_000,
    "a connection count from 0 to 10000000 (0 = derived)",
);

/// Every configuration key understood by the runtime, in documentation order.
#[rustfmt::skip]
pub const KNOWN_KEYS: &[KeySpec] = keys! {
    "eventmesh.server.host" = "127.0.0.1",
        server.host => Text("a host name or IP address"),
        "Address the traffic HTTP listener binds to, and the admin and TCP listeners unless they have their own.";
    "eventmesh.server.http.port" = "10105",
        server.http.port => PORT,
        "Port of the traffic API (HTTP, SSE, WebSocket); `0` picks a free port, which is logged.";
    "eventmesh.server.admin.port" = "10106",
        server.admin.port => PORT,
        "Port of the admin API; `0` picks a free port, which is logged.";
    "eventmesh.server.admin.host" = "",
        server.admin.host => Optional,
        "Address the admin API binds to; empty: `eventmesh.server.host`. Keep it on 127.0.0.1 when the traffic port is exposed.";
    "eventmesh.server.tcp.port" = "10000",
        server.tcp.port => PortOrOff,
        "Port of the binary TCP protocol (see tcp-protocol.md); `0` picks a free port, which is logged; `off` disables it.";
    "eventmesh.server.tcp.host" = "",
        server.tcp.host => Optional,
        "Address the binary TCP protocol binds to; empty: `eventmesh.server.host`.";
    "eventmesh.server.worker.threads" = "0",
        server.worker_threads => Int::new(0, 1024, "a thread count from 0 to 1024"),
        "Threads that run the runtime's network, publish and delivery work; `0`: one per CPU. On a host of few cores shared with other busy processes, `1` saves the hand-offs between threads at moderate rates (lower tail latency on the JetStream log) and costs peak throughput (see benchmarks.md).";
    "eventmesh.server.tcp.threads" = "0",
        server.tcp.threads => Int::new(0, 1024, "a thread count from 0 to 1024"),
        "Threads of their own that TCP connections are served on, each connection on one thread for its whole life; `0`: one per two CPUs (at least one) on the standalone log, none on the JetStream log (its publishes go through the NATS client's tasks on the worker threads, so the connections are served there too). Two clients on one thread hand each other events (a request and its reply, an event and its delivery) without crossing threads (see deployment.md).";
    secret "eventmesh.server.tcp.token" = "",
        server.tcp.token => Optional,
        "Token a TCP client must send in its HELLO frame; empty: none is required.";
    "eventmesh.server.tcp.max.frame.bytes" = "1114112",
        server.tcp.max_frame_bytes => Int::new(1024, 1 << 30, "a size in bytes from 1024 to 1073741824"),
        "Largest accepted TCP frame, in bytes (1024-1073741824); a larger one closes the connection.";
    "eventmesh.server.tcp.heartbeat.ms" = "15000",
        server.tcp.heartbeat => MILLIS,
        "TCP heartbeat interval announced to clients, in milliseconds; a connection silent for three intervals is closed.";
    "eventmesh.server.tcp.hello.timeout.ms" = "10000",
        server.tcp.hello_timeout => TIMEOUT,
        "A TCP connection must have sent a complete `HELLO` this many milliseconds after it was accepted (a deadline, not extended by bytes trickling in), else it is closed; after the `HELLO` the heartbeat rule applies.";
    "eventmesh.server.http.header.timeout.ms" = "10000",
        server.http.header_timeout => TIMEOUT,
        "On both HTTP ports (traffic and admin): a connection must have sent a complete request header this many milliseconds after it was accepted (its TLS handshake included), and a later request on it within this many milliseconds of its first byte, else it is closed.";
    "eventmesh.server.http.idle.timeout.ms" = "60000",
        server.http.idle_timeout => TIMEOUT,
        "On both HTTP ports: a kept-alive connection with no request under way and none started for this many milliseconds is closed. Streams (SSE, WebSocket) and requests being answered (long polls) are not idle.";
    "eventmesh.server.http.body.timeout.ms" = "30000",
        server.http.body_timeout => TIMEOUT,
        "On both HTTP ports: a request body must have arrived whole this many milliseconds after its header (a deadline, not extended by bytes trickling in), else the request is answered `408 request_timeout` and the connection closed.";
    "eventmesh.server.connections.max" = "0",
        server.connections.traffic_max => CONNECTIONS,
        "Connections the traffic ports (HTTP and TCP together) hold at once; one more is accepted and closed at once, and counted. `0`: derived from the process's descriptor limit (see deployment.md#listeners).";
    "eventmesh.server.connections.per.address.max" = "0",
        server.connections.per_address_max => CONNECTIONS,
        "Connections one client address (an IPv6 one by its /64) holds at once on the traffic ports (HTTP and TCP together). `0`: a quarter of `eventmesh.server.connections.max`. Behind a proxy or NAT that shows many clients as one address, raise it.";
    "eventmesh.server.admin.connections.max" = "0",
        server.connections.admin_max => CONNECTIONS,
        "Connections the admin port holds at once, apart from the traffic ports' so that probes and `/metrics` still answer when those are full. `0`: derived from the process's descriptor limit.";
    "eventmesh.server.tls.cert.file" = "",
        server.tls.cert_file => OptionalPath,
        "PEM file of the listeners' certificate chain (the server certificate first); set with `eventmesh.server.tls.key.file` to serve TLS. Empty: every listener is plain text.";
    "eventmesh.server.tls.key.file" = "",
        server.tls.key_file => OptionalPath,
        "PEM file of the private key of `eventmesh.server.tls.cert.file` (PKCS#8, PKCS#1 or SEC1).";
    "eventmesh.server.tls.client.ca.file" = "",
        server.tls.client_ca_file => OptionalPath,
        "PEM file of the certificate authorities client certificates are checked against (mutual TLS); a verified certificate's subject names the caller for the security gate (`CN` the principal, `O` the tenant). Empty: no client certificates are asked for.";
    "eventmesh.server.tls.client.auth" = "required",
        server.tls.client_auth => OneOf { all: ClientAuth::ALL, ignore_case: true },
        "With a client CA: `required` refuses a handshake without a valid client certificate; `optional` lets clients without one in (they authenticate with a token, if the gate asks for one).";
    "eventmesh.server.tls.handshake.timeout.ms" = "10000",
        server.tls.handshake_timeout => TIMEOUT,
        "On every TLS listener: a TLS handshake must be complete this many milliseconds after the connection was accepted, else the connection is closed.";
    "eventmesh.server.tls.watch.ms" = "5000",
        server.tls.watch => MS_OR_ZERO,
        "How often the certificate, key and client CA files are checked for changes, in milliseconds; changed files serve every new connection from then on, live ones keep theirs (`0`: only on SIGHUP or `POST /admin/reload`).";
    "eventmesh.server.http.tls.enabled" = "true",
        server.http.tls => Flag,
        "With a certificate configured, serve the traffic port (HTTP, SSE, WebSocket) over TLS; `false` keeps it plain.";
    "eventmesh.server.admin.tls.enabled" = "true",
        server.admin.tls => Flag,
        "With a certificate configured, serve the admin port over TLS; `false` keeps it plain.";
    "eventmesh.server.tcp.tls.enabled" = "true",
        server.tcp.tls => Flag,
        "With a certificate configured, serve the binary TCP protocol over TLS; `false` keeps it plain.";
    "eventmesh.server.grpc.port" = "off",
        server.grpc.port => PortOrOff,
        "Port of the A2A gRPC binding (`lf.a2a.v1.A2AService`, with gRPC health and reflection; see a2a-grpc.md); `0` picks a free port, which is logged; `off` (the default) disables it.";
    "eventmesh.server.grpc.host" = "",
        server.grpc.host => Optional,
        "Address the gRPC listener binds to; empty: `eventmesh.server.host`.";
    "eventmesh.server.grpc.tls.enabled" = "true",
        server.grpc.tls => Flag,
        "With a certificate configured, serve the gRPC listener over TLS (ALPN `h2`, client certificates as on the other listeners); `false` keeps it plain.";
    "eventmesh.server.grpc.max.message.bytes" = "4194304",
        server.grpc.max_message_bytes => Int::new(1024, 1 << 30, "a size in bytes from 1024 to 1073741824"),
        "Largest gRPC request message accepted, in bytes (1024-1073741824); a larger one is refused with `OUT_OF_RANGE` before it is decoded.";
    "eventmesh.server.grpc.keepalive.ms" = "30000",
        server.grpc.keepalive => MILLIS,
        "The gRPC listener pings each connection (HTTP/2 PING) this often, in milliseconds, and closes one whose ping is not answered within the same time.";
    "eventmesh.server.mqtt.port" = "off",
        server.mqtt.port => PortOrOff,
        "Port of the MQTT 3.1.1 and 5.0 listener (see mqtt.md; 1883 is MQTT's own, 8883 over TLS); `0` picks a free port, which is logged; `off` (the default) disables it.";
    "eventmesh.server.mqtt.host" = "",
        server.mqtt.host => Optional,
        "Address the MQTT listener binds to; empty: `eventmesh.server.host`.";
    "eventmesh.server.mqtt.tls.enabled" = "true",
        server.mqtt.tls => Flag,
        "With a certificate configured, serve MQTT over TLS (client certificates as on the other listeners); `false` keeps it plain.";
    "eventmesh.server.mqtt.max.packet.bytes" = "1048576",
        server.mqtt.max_packet_bytes => Int::new(1024, 268_435_455, "a size in bytes from 1024 to 268435455"),
        "Largest MQTT packet accepted, in bytes (1024-268435455, announced to MQTT 5 clients); a larger one closes the connection with reason code 0x95.";
    "eventmesh.server.mqtt.connect.timeout.ms" = "10000",
        server.mqtt.connect_timeout => TIMEOUT,
        "An MQTT connection must have sent its CONNECT this many milliseconds after it was accepted (TLS handshake included), else it is closed.";
    "eventmesh.server.mqtt.keepalive.max.ms" = "600000",
        server.mqtt.keepalive_max => TIMEOUT,
        "Longest keep-alive granted, in milliseconds: a client asking for none or for more gets this (MQTT 5 clients are told); a connection silent for one and a half keep-alives is closed.";
    "eventmesh.server.mqtt.session.expiry.max.ms" = "604800000",
        server.mqtt.session_expiry_max => MILLIS,
        "Longest a persistent MQTT session outlives its connection, in milliseconds (MQTT 3.1.1 sessions, which ask for no limit, get this); its subscriptions are then removed.";
    "eventmesh.server.mqtt.receive.maximum" = "64",
        server.mqtt.receive_maximum => Int::new(1, 65_535, "a count from 1 to 65535"),
        "QoS 1 and 2 publishes one MQTT connection may have unacknowledged at once (announced to MQTT 5 clients; one more closes an MQTT 5 connection with reason code 0x93).";
    "eventmesh.server.mqtt.inflight.max" = "128",
        server.mqtt.inflight_max => Int::new(1, 65_535, "a count from 1 to 65535"),
        "QoS 1 and 2 deliveries sent to one MQTT connection and not yet acknowledged, at most (lower when the client's receive maximum is).";
    "eventmesh.server.mqtt.topic.alias.max" = "64",
        server.mqtt.topic_alias_max => Int::new(0, 65_535, "a count from 0 to 65535"),
        "Topic aliases an MQTT 5 client may set on one connection (announced at connect; `0`: none).";
    "eventmesh.http.max.body.bytes" = "1048576",
        server.http.max_body_bytes => Int::new(1, usize::MAX as u64, "a size in bytes of at least 1"),
        "Largest accepted HTTP request body, in bytes; a larger one gets 413.";
    "eventmesh.data.dir" = "./data",
        storage.data_dir => Path("a directory path"),
        "Directory of the local RocksDB: the event log, committed offsets, the in-flight ledger and the embedded meta store.";
    "eventmesh.storage.type" = "",
        storage.backend => Required {
            kind: OneOf { all: StorageType::ALL, ignore_case: true },
            hint: "supported storage backends: standalone, jetstream",
        },
        "Storage backend, required (no default): `standalone` (the event log in the local RocksDB) or `jetstream` (the event log on NATS JetStream, shared by every instance).";
    "eventmesh.storage.sync" = "true",
        storage.sync => Flag,
        "`true` fsyncs every publish before answering it; `false` answers after the WAL write (faster, but a power cut can lose acknowledged events).";
    "eventmesh.storage.write.buffer.bytes" = "67108864",
        storage.write_buffer_bytes => Int::new(1 << 20, 1 << 30, "a size in bytes from 1048576 (1 MiB) to 1073741824 (1 GiB)"),
        "Memtable size of each RocksDB column family, in bytes (1 MiB-1 GiB); it bounds memory, and after a full disk writes resume by themselves once this much space is free.";
    "eventmesh.storage.block.cache.bytes" = "67108864",
        storage.block_cache_bytes => Int::new(1 << 20, 1 << 36, "a size in bytes from 1048576 (1 MiB) to 68719476736 (64 GiB)"),
        "RocksDB's block cache, in bytes (1 MiB-64 GiB): one for every column family, index and filter blocks included; with the memtables it bounds the store's memory whatever the backlog.";
    "eventmesh.storage.wal.reuse.files" = "2",
        storage.wal_reuse_files => Int::new(0, 16, "a count of files from 0 to 16"),
        "WAL files the local RocksDB keeps for reuse once everything in them is flushed, each about a memtable in size: a sync that overwrites a reused file writes no inode, which keeps publish latency down when the cores are busy; `0` deletes them (less disk, slower syncs).";
    "eventmesh.storage.retention.ms" = "0",
        storage.retention_age => MS_OR_ZERO,
        "Retention by age of topics without their own, per partition, in milliseconds: older events are dropped (`0`, the default: no age limit). A topic's own retention is set with `POST /admin/topics` or `PATCH /admin/topics/{name}`.";
    "eventmesh.storage.retention.bytes" = "0",
        storage.retention_bytes => Int::new(0, u64::MAX, "a size in bytes (0 = unlimited)"),
        "Retention by size of topics without their own, per partition, in payload bytes: the oldest events past it are dropped (`0`, the default: no size limit). On JetStream the stream of a topic holds this times its partitions.";
    "eventmesh.storage.retention.check.ms" = "5000",
        storage.retention_check => MILLIS,
        "How often retention runs on the standalone log, in milliseconds (dropped ranges are compacted right after, so the disk space comes back); on JetStream, whose servers apply the limits, how often the instance learns the new start of each topic.";
    "eventmesh.storage.jetstream.servers" = "nats://127.0.0.1:4222",
        storage.jetstream.servers => NATS_URLS,
        "Comma-separated NATS server URLs (`nats://` or `tls://`) of the JetStream the event log lives on (with `eventmesh.storage.type=jetstream`).";
    "eventmesh.storage.jetstream.replicas" = "1",
        storage.jetstream.replicas => Int::new(1, 5, "a whole number from 1 to 5"),
        "Replicas of each topic's stream (1-5); 3 in a cluster of three NATS servers, so that one may fail.";
    "eventmesh.storage.jetstream.stream.prefix" = "EVENTMESH",
        storage.jetstream.prefix => Word,
        "Prefix of the streams and subjects the event log uses (1-32 letters, digits, `-` or `_`); instances sharing one log use the same prefix.";
    "eventmesh.storage.jetstream.timeout.ms" = "5000",
        storage.jetstream.timeout => MILLIS,
        "Bound on every JetStream call (connect, publish acknowledgement, read), in milliseconds; past it the call fails with `storage_unavailable` instead of hanging.";
    "eventmesh.storage.jetstream.read.cache.bytes" = "8388608",
        storage.jetstream.read_cache_bytes => Int::new(0, 1 << 34, "a size in bytes from 0 to 17179869184 (16 GiB)"),
        "Per topic this instance reads, the payload bytes of its latest records kept in memory, so that subscribers keeping up are served without a read from JetStream (`0`: every read goes to JetStream).";
    "eventmesh.storage.jetstream.user" = "",
        storage.jetstream.user => Optional,
        "NATS user name; set together with the password.";
    secret "eventmesh.storage.jetstream.password" = "",
        storage.jetstream.password => Optional,
        "NATS password; set together with the user.";
    secret "eventmesh.storage.jetstream.token" = "",
        storage.jetstream.token => Optional,
        "NATS authentication token.";
    "eventmesh.storage.jetstream.creds.file" = "",
        storage.jetstream.creds_file => OptionalPath,
        "NATS credentials file (a user JWT and its NKey seed).";
    "eventmesh.storage.jetstream.tls.ca.file" = "",
        storage.jetstream.tls_ca_file => OptionalPath,
        "PEM file of the certificate authorities that NATS servers' TLS certificates are checked against; setting it requires TLS.";
    "eventmesh.storage.jetstream.tls.cert.file" = "",
        storage.jetstream.tls_cert_file => OptionalPath,
        "PEM file of the client certificate (chain) presented to NATS servers that verify clients (`verify: true`); set with `eventmesh.storage.jetstream.tls.key.file`; setting it requires TLS.";
    "eventmesh.storage.jetstream.tls.key.file" = "",
        storage.jetstream.tls_key_file => OptionalPath,
        "PEM file of the private key of `eventmesh.storage.jetstream.tls.cert.file` (PKCS#8, PKCS#1 or SEC1).";
    "eventmesh.topic.default.partitions" = "4",
        topic.default_partitions => Int::new(1, 1024, "a whole number from 1 to 1024"),
        "Partitions of a topic created on first use (1-1024).";
    "eventmesh.topic.pattern.rescan.ms" = "10000",
        topic.pattern_rescan => MILLIS,
        "How often pattern subscriptions (`orders.*`) list the topics to find new and deleted ones, in milliseconds, besides at once when the log tells of a topic created or deleted (here; on JetStream also by another instance, through the servers' stream advisories).";
    "eventmesh.publish.dedup.window.ms" = "120000",
        publish.dedup_window => MS_OR_ZERO,
        "How long a published event's `source` + `id` is remembered, in milliseconds: a publish repeating them within this window is stored once and answered with the first one's partition and offset (`\"duplicate\": true`); `0` turns idempotent publishing off.";
    "eventmesh.offset.flush.interval.ms" = "1000",
        delivery.flush_interval => MILLIS,
        "How often moved offsets and the in-flight ledger are written, in milliseconds.";
    "eventmesh.shutdown.grace.ms" = "10000",
        shutdown.grace => MS_OR_ZERO,
        "On SIGTERM/SIGINT, how long deliveries already handed out may still be acknowledged before the runtime closes, in milliseconds; `0` closes at once.";
    "eventmesh.log.format" = "text",
        log.format => OneOf { all: LogFormat::ALL, ignore_case: true },
        "Log lines on stderr: `text` (for people) or `json` (one object a line: `timestamp`, `level`, `target`, `fields`, for log collectors). `RUST_LOG` sets the levels.";
    "eventmesh.tracing.otlp.endpoint" = "",
        tracing.otlp_endpoint => OPTIONAL_HTTP_URL,
        "Base URL of an OpenTelemetry collector's OTLP/HTTP receiver (e.g. `http://127.0.0.1:4318`): spans of publish, append, dispatch and push are exported to `<url>/v1/traces` as protobuf, and the W3C `traceparent` of published events is continued (see tracing.md). Empty: no export, and events are stored as published.";
    "eventmesh.tracing.service.name" = "eventmesh",
        tracing.service_name => Text("a service name"),
        "`service.name` of the exported spans.";
    "eventmesh.tracing.sample.ratio" = "1",
        tracing.sample_ratio => Fraction,
        "Share of new traces that are recorded (0-1); an event whose `traceparent` comes with a sampling decision keeps that decision.";
    "eventmesh.a2a.enabled" = "true",
        a2a.enabled => Flag,
        "Serve the A2A gateway (`/a2a/...` and `/.well-known/agent-card.json` on the traffic port; see a2a.md).";
    "eventmesh.a2a.public.url" = "",
        a2a.public_url => OPTIONAL_HTTP_URL,
        "Base URL clients reach the traffic port at, written into the agent cards the gateway serves (e.g. `https://mesh.example.com`). Empty: taken from each request's `Host` header and the listener's scheme.";
    "eventmesh.a2a.grpc.public.url" = "",
        a2a.grpc_public_url => Optional,
        "Where clients reach the gRPC listener, written as the URL of the `GRPC` interface in the agent cards (e.g. `grpc.example.com:443`). Empty: the host of the card's request with the gRPC port (`host:port`).";
    "eventmesh.a2a.history.max" = "100",
        a2a.history_max => Int::new(1, 100_000, "a whole number from 1 to 100000"),
        "Messages kept in an A2A task's history; older ones are dropped first (1-100000).";
    "eventmesh.a2a.task.timeout.ms" = "300000",
        a2a.task_timeout => MILLIS,
        "An A2A task whose agent sends no update for this many milliseconds while it is submitted or working is failed.";
    "eventmesh.a2a.agent.ttl.ms" = "30000",
        a2a.agent_ttl => MILLIS,
        "An agent registered at `/a2a/agents` that has not registered again (its heartbeat) for this many milliseconds is gone: its card is no longer served and new messages to it are refused.";
    "eventmesh.a2a.task.retention.ms" = "86400000",
        a2a.task_retention => MS_OR_ZERO,
        "How long a finished A2A task stays readable after its last change, in milliseconds; `0` keeps tasks forever.";
    "eventmesh.a2a.push.enabled" = "true",
        a2a.push_enabled => Flag,
        "Let A2A clients register webhooks for their tasks (push notifications, POSTed under the `eventmesh.webhook.*` settings and SSRF guard); `false`: cards say `pushNotifications: false` and the push methods answer -32003.";
    "eventmesh.mcp.enabled" = "true",
        mcp.enabled => Flag,
        "Serve the MCP gateway at `/mcp` on the traffic port (Streamable HTTP, behind the gate; see mcp.md).";
    "eventmesh.mcp.sessions.max" = "1000",
        mcp.sessions_max => Int::new(1, 1_000_000, "a whole number from 1 to 1000000"),
        "MCP sessions open at once on this instance (1-1000000); past it a new session is answered `503 mcp_sessions_full`.";
    "eventmesh.mcp.session.idle.ms" = "600000",
        mcp.session_idle => MILLIS,
        "An MCP session that has sent no message for this many milliseconds is closed (its client then opens a new one).";
    "eventmesh.connector.offset.store" = "memory",
        connector.offset_store => OneOf { all: ConnectorOffsetStore::ALL, ignore_case: true },
        "Where connectors keep their positions: `memory` (development only: lost at restart, so sources start over), `rocksdb` (this instance's data directory) or `meta` (the meta store; required with `eventmesh.meta.type=etcd`, where a connector moves between instances).";
    "eventmesh.delivery.topology" = "LOCAL_STICKY_PULL",
        delivery.topology => OneOf { all: DeliveryTopology::ALL, ignore_case: false },
        "`LOCAL_STICKY_PULL` (every instance polls every partition) or `PARTITION_OWNED_PULL` (one fenced owner per partition across instances; needs `eventmesh.cluster.enabled=true`, etcd and the JetStream log).";
    "eventmesh.delivery.after.sync" = "true",
        delivery.after_sync => Flag,
        "Standalone log with `eventmesh.storage.sync=true`: `true` hands an event to its subscribers once it is fsynced; `false` once it is written, before the fsync (lower end-to-end latency; its publisher is still answered only after the fsync, but after a power cut a subscriber may have seen an event the log lost). A kill -9 loses nothing either way.";
    "eventmesh.delivery.max.attempts" = "6",
        delivery.max_attempts => Int::new(1, 1000, "a whole number from 1 to 1000"),
        "Attempts per delivery (a failed push or an expired ack window each count) before the event is dead-lettered (1-1000).";
    "eventmesh.delivery.max.inflight" = "1024",
        delivery.max_inflight => Int::new(1, 1_000_000, "a whole number from 1 to 1000000"),
        "Unacknowledged deliveries per consumer, a group or a broadcast member (1-1000000).";
    "eventmesh.delivery.max.inflight.per.client" = "1000",
        delivery.max_inflight_per_client => Int::new(1, 1_000_000, "a whole number from 1 to 1000000"),
        "Unacknowledged deliveries per client over all its subscriptions (1-1000000); a slow client never stalls the others.";
    "eventmesh.delivery.ack.timeout.ms" = "30000",
        delivery.ack_timeout => MILLIS,
        "A polled delivery not acknowledged this many milliseconds after hand-out is sent again.";
    "eventmesh.delivery.member.timeout.ms" = "30000",
        delivery.member_timeout => MILLIS,
        "A pulling member (poll, SSE, WebSocket, TCP) that has neither polled nor held a stream this many milliseconds leaves its groups' rotation: what it had queued and its unacknowledged deliveries go to the other members at once, and it rejoins when it polls again. Webhooks are not affected.";
    "eventmesh.delivery.backoff.initial.ms" = "1000",
        delivery.backoff_initial => MILLIS,
        "First retry delay of a failed push, in milliseconds.";
    "eventmesh.delivery.backoff.max.ms" = "16000",
        delivery.backoff_max => MILLIS,
        "Cap of the doubling retry delay, in milliseconds; at least the initial delay.";
    "eventmesh.delivery.backoff.jitter" = "0.2",
        delivery.backoff_jitter => Fraction,
        "Random spread added to each retry delay, as a fraction of it (0-1).";
    "eventmesh.webhook.timeout.ms" = "5000",
        delivery.webhook_timeout => MILLIS,
        "Timeout of one webhook attempt, in milliseconds.";
    "eventmesh.webhook.denied.cidrs" = "169.254.0.0/16,fe80::/10,fd00:ec2::254/128,100.100.100.200/32",
        webhook.denied_cidrs => Cidrs,
        "Comma-separated CIDR ranges a webhook URL, or a connector's target, may not resolve into (SSRF guard: subscribing such a URL answers `403 webhook_denied`); an IPv4 address embedded in an IPv6 one is checked too. The default keeps out link-local addresses and the cloud metadata services; `production` stands for loopback, the private, shared and link-local ranges and the IPv6 forms of IPv4 (see security.md), and may be listed with more ranges; `none` turns the guard off.";
    "eventmesh.webhook.ca.file" = "",
        delivery.webhook_tls.ca_file => OptionalPath,
        "PEM file of extra certificate authorities trusted for `https://` webhooks (a private CA), on top of the built-in public roots, which stay trusted.";
    "eventmesh.webhook.tls.cert.file" = "",
        delivery.webhook_tls.cert_file => OptionalPath,
        "PEM file of the client certificate (chain) presented to webhook receivers that ask for one (mutual TLS); set with `eventmesh.webhook.tls.key.file`.";
    "eventmesh.webhook.tls.key.file" = "",
        delivery.webhook_tls.key_file => OptionalPath,
        "PEM file of the private key of `eventmesh.webhook.tls.cert.file` (PKCS#8, PKCS#1 or SEC1).";
    "eventmesh.webhook.handshake.enabled" = "true",
        delivery.webhook_handshake.enabled => Flag,
        "Run the CloudEvents webhook validation handshake (an `OPTIONS` request with `WebHook-Request-Origin`) before the first push to each webhook origin (scheme, host and port), for subscriptions that do not set `webhookHandshake` themselves. A receiver that does not allow the origin pauses its subscriptions' pushes until it does; `WebHook-Allowed-Rate` caps the push rate to it. `false`: only subscriptions that ask for it run it (for receivers that predate the specification).";
    "eventmesh.webhook.handshake.origin" = "",
        delivery.webhook_handshake.origin => OptionalHostName,
        "The name this runtime sends as `WebHook-Request-Origin` (on the handshake and on every push after it), a DNS-like name of 1 to 253 letters, digits, `.`, `-` or `_`. Empty: the cluster's name (`eventmesh.cluster.name`, or the one made up at first boot).";
    "eventmesh.webhook.handshake.request.rate" = "600",
        delivery.webhook_handshake.request_rate => Int::new(1, 1_000_000, "a number of pushes per minute from 1 to 1000000"),
        "Pushes per minute asked for in `WebHook-Request-Rate` (1-1000000); the receiver's `WebHook-Allowed-Rate` is what is kept to.";
    "eventmesh.webhook.handshake.retry.max.ms" = "60000",
        delivery.webhook_handshake.retry_max => Millis(Int::new(100, 3_600_000, "a duration in milliseconds from 100 to 3600000")),
        "A refused handshake is asked again after 1 second (or this, when less), the wait doubling with each refusal up to this many milliseconds (100-3600000); its subscriptions' pushes wait meanwhile.";
    "eventmesh.cluster.enabled" = "false",
        cluster.enabled => Flag,
        "Cluster membership; requires `eventmesh.meta.type=etcd`.";
    "eventmesh.cluster.instance.id" = "",
        cluster.instance_id => OptionalWord,
        "This instance's name in the cluster (1-32 letters, digits, `-` or `_`); empty: one made up at first boot and kept in the data directory. Two live instances cannot share one.";
    "eventmesh.cluster.name" = "",
        cluster.name => OptionalWord,
        "This cluster's name on the mesh (1-32 letters, digits, `-` or `_`): what links between clusters know it by. Empty: one made up at first boot and kept in the meta store, so every instance sharing it has the same; set, it replaces the kept one.";
    "eventmesh.cluster.lease.ms" = "10000",
        cluster.lease => Millis(Int::new(1000, 600_000, "a duration in milliseconds from 1000 to 600000")),
        "Time to live of this instance's registration, in milliseconds: renewed every quarter of it; an instance that cannot renew it stops handing out events before it ends, and its partitions go to the others once it has ended.";
    secret "eventmesh.cluster.secret" = "",
        cluster.secret => Optional,
        "Shared secret of the instances' internal channel (deliveries forwarded to a client's instance, acknowledgements sent back to the partition's owner), at least 16 bytes; required with `PARTITION_OWNED_PULL`, the same on every instance.";
    "eventmesh.cluster.advertise.address" = "",
        cluster.advertise => Optional,
        "`host:port` at which the other instances reach this one's traffic port (the internal channel); empty: the traffic listener's own address, which must then be a specific one (not `0.0.0.0` or `::`).";
    "eventmesh.cluster.tls.ca.file" = "",
        cluster.tls_ca_file => OptionalPath,
        "When the traffic port serves TLS, the internal channel calls the other instances over TLS: PEM file of the authorities their certificates are checked against (empty: `eventmesh.server.tls.client.ca.file`, else the public web roots). Each instance presents its own certificate to the others, so with client certificates required it must be valid for client authentication too.";
    "eventmesh.cluster.handover.grace.ms" = "5000",
        cluster.handover_grace => MS_OR_ZERO,
        "With `PARTITION_OWNED_PULL`, how long an instance giving a partition up waits for the deliveries of it in clients' hands to be acknowledged before it commits and lets the next owner start, in milliseconds.";
    "eventmesh.meta.type" = "embedded",
        meta.backend => OneOf { all: MetaType::ALL, ignore_case: true },
        "Meta store: `embedded` (single node, in the data directory) or `etcd` (cluster state shared by every instance).";
    "eventmesh.meta.etcd.endpoints" = "http://127.0.0.1:2379",
        meta.etcd.endpoints => HTTP_URLS,
        "Comma-separated etcd client URLs (with `eventmesh.meta.type=etcd`), all `http://` or all `https://` (TLS).";
    "eventmesh.meta.etcd.timeout.ms" = "3000",
        meta.etcd.timeout => MILLIS,
        "Bound on every etcd call, in milliseconds; past it the call fails instead of hanging.";
    "eventmesh.meta.etcd.user" = "",
        meta.etcd.user => Optional,
        "etcd user name; set together with the password.";
    secret "eventmesh.meta.etcd.password" = "",
        meta.etcd.password => Optional,
        "etcd password; set together with the user.";
    "eventmesh.meta.etcd.tls.ca.file" = "",
        meta.etcd.tls_ca_file => OptionalPath,
        "PEM file of the certificate authorities etcd's server certificates are checked against; needs `https://` endpoints. Empty: `https://` endpoints are checked against the system's roots.";
    "eventmesh.meta.etcd.tls.cert.file" = "",
        meta.etcd.tls_cert_file => OptionalPath,
        "PEM file of the client certificate (chain) presented to etcd (for `--client-cert-auth`); set with `eventmesh.meta.etcd.tls.key.file`; needs `https://` endpoints.";
    "eventmesh.meta.etcd.tls.key.file" = "",
        meta.etcd.tls_key_file => OptionalPath,
        "PEM file of the private key of `eventmesh.meta.etcd.tls.cert.file` (PKCS#8, PKCS#1 or SEC1).";
    secret "eventmesh.admin.token" = "",
        server.admin.token => Optional,
        "Bearer token of the admin routes, at least 16 bytes; without one they answer `503 admin_locked`.";
    "eventmesh.auth.failures.burst" = "5",
        server.auth_failures.burst => Int::new(1, 1000, "a whole number from 1 to 1000"),
        "Wrong admin tokens (admin port) or cluster secrets (internal routes) a remote address may present in a row (1-1000); past them it is answered `429 too_many_failures` on every guarded route of that listener, right token or not, until its allowance grows back (an IPv6 address counts with its whole /64).";
    "eventmesh.auth.failures.interval.ms" = "30000",
        server.auth_failures.interval => MILLIS,
        "After the burst, one more wrong token or secret allowed per this many milliseconds, per remote address.";
    "eventmesh.security.gate.failClosed" = "false",
        gate.fail_closed => Flag,
        "With gate filters configured: `true` answers denials with 401/403/429; `false` logs, audits and counts them and lets the request through.";
    "eventmesh.security.gate.token.file" = "",
        gate.token_file => OptionalPath,
        "Static bearer tokens, one `token tenant principal [roles]` a line; a token may be written `sha256:<hex>`.";
    secret "eventmesh.security.gate.jwt.hs256.secret" = "",
        gate.jwt_hs256_secret => Optional,
        "Secret that HS256 JWT bearer tokens are verified with.";
    "eventmesh.security.gate.jwt.public.key.file" = "",
        gate.jwt_public_key_file => OptionalPath,
        "PEM public key that RS256 (RSA) or ES256 (EC P-256) JWT bearer tokens are verified with.";
    "eventmesh.security.gate.jwt.issuer" = "",
        gate.jwt_issuer => Optional,
        "Required JWT `iss` claim; unchecked when empty.";
    "eventmesh.security.gate.jwt.audience" = "",
        gate.jwt_audience => Optional,
        "Required JWT `aud` claim; unchecked when empty.";
    "eventmesh.security.gate.jwt.tenant.claim" = "tenant",
        gate.jwt_tenant_claim => MaybeEmpty,
        "JWT claim holding the tenant; a JWT without it, or with a non-string value, is refused. Empty: JWTs carry no tenant.";
    "eventmesh.security.gate.jwt.principal.claim" = "sub",
        gate.jwt_principal_claim => CLAIM,
        "JWT claim holding the principal.";
    "eventmesh.security.gate.signature.secrets.file" = "",
        gate.signature_secrets_file => OptionalPath,
        "Per-tenant HMAC secrets, one `tenant secret` a line; requests of those tenants must be signed.";
    "eventmesh.security.gate.signature.tolerance.s" = "300",
        gate.signature_tolerance => Seconds(Int::new(1, 86_400, "a number of seconds from 1 to 86400")),
        "Largest accepted distance between `x-em-timestamp` and the server clock, in seconds (1-86400).";
    "eventmesh.security.gate.acl.file" = "",
        gate.acl_file => OptionalPath,
        "ACL rules, one `<allow|deny> <principal-or-tenant pattern> <operation|*> <topic pattern>` a line (see security.md).";
    "eventmesh.security.gate.quota.publish.rate" = "0",
        gate.publish_rate => LIMIT,
        "Events per second each tenant may publish (0 = unlimited).";
    "eventmesh.security.gate.quota.publish.burst" = "0",
        gate.publish_burst => LIMIT,
        "Events a tenant may publish at once above the rate (0 = one second's worth).";
    "eventmesh.security.gate.quota.subscriptions.max" = "0",
        gate.subscriptions_max => LIMIT,
        "Subscriptions per tenant on this instance (0 = unlimited).";
    "eventmesh.security.gate.quota.connections.max" = "0",
        gate.connections_max => LIMIT,
        "Concurrent requests and streams per tenant (0 = unlimited).";
    "eventmesh.security.gate.audit.file" = "",
        gate.audit_file => OptionalPath,
        "Write the gate's decisions as JSON lines to this file instead of the log.";
};

/// The Markdown table of every key, as docs/configuration.md holds it
/// between its `<!-- keys:begin -->` and `<!-- keys:end -->` markers: key,
/// default (`none` when there is none), secret or not, and meaning.
pub fn markdown_table() -> String {
    let cell = |text: &str| text.replace('|', "\\|");
    let mut out = String::from("| key | default | secret | meaning |\n|---|---|---|---|\n");
    for spec in KNOWN_KEYS {
        let default = match spec.default {
            "" => "none".to_string(),
            d => format!("`{d}`"),
        };
        let secret = if spec.secret { "yes" } else { "" };
        out.push_str(&format!(
            "| `{}` | {} | {secret} | {} |\n",
            cell(spec.key),
            cell(&default),
            cell(spec.description)
        ));
    }
    out
}
