//! The families `/metrics` declares, each with its HELP and TYPE from
//! boot: a family with labels is rendered before its first series (its
//! HELP and TYPE alone), so a scrape lists every family this instance can
//! serve. Which ones depends on the instance ([`Profile`]): the partition
//! ownership's only in cluster mode (`PARTITION_OWNED_PULL`), the
//! standalone log's group commits only on the standalone log.

use std::fmt;

use eventmesh_core::config::StorageType;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Metric, Registry};

use super::{Labels, Metrics};

/// What this instance runs as: it decides the families declared and the
/// labels of `eventmesh_build_info`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// A member of a cluster that shares the partitions out
    /// (`PARTITION_OWNED_PULL`): the ownership's families are served.
    pub cluster: bool,
    /// The event log's backend (`eventmesh.storage.type`).
    pub storage: StorageType,
    /// The release (`version` label).
    pub version: String,
    /// The commit built, when the build named one (`commit` label).
    pub commit: Option<String>,
}

impl Default for Profile {
    /// A standalone instance of this crate's version.
    fn default() -> Self {
        Profile {
            cluster: false,
            storage: StorageType::Standalone,
            version: env!("CARGO_PKG_VERSION").to_string(),
            commit: None,
        }
    }
}

impl Profile {
    /// `standalone` or `cluster` (the `mode` label).
    pub fn mode(&self) -> &'static str {
        if self.cluster {
            "cluster"
        } else {
            "standalone"
        }
    }

    /// The labels of `eventmesh_build_info`.
    pub fn build_labels(&self) -> Labels {
        let mut labels = vec![("version".to_string(), self.version.clone())];
        if let Some(commit) = &self.commit {
            labels.push(("commit".to_string(), commit.clone()));
        }
        labels.push(("mode".to_string(), self.mode().to_string()));
        labels.push(("storage".to_string(), self.storage.as_str().to_string()));
        labels
    }
}

/// A family rendered even without a series: its HELP and TYPE are in
/// every scrape (the library leaves out a family with no series).
#[derive(Debug)]
struct Declared<M>(M);

impl<M: EncodeMetric> EncodeMetric for Declared<M> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }

    fn is_empty(&self) -> bool {
        false
    }
}

/// Registers a family with labels, declared from boot.
fn declare<M>(r: &mut Registry, name: &str, help: &str, family: &Family<Labels, M>)
where
    Family<Labels, M>: Metric,
{
    r.register(name, help, Declared(family.clone()));
}

/// The registry of `m`'s families that an instance of `profile` serves,
/// `eventmesh_build_info` (1, labelled with `profile`) first.
pub(super) fn register(m: &Metrics, profile: &Profile) -> Registry {
    let mut registry = Registry::default();
    let r = &mut registry;
    m.build_info.get_or_create(&profile.build_labels()).set(1);
    declare(
        r,
        "eventmesh_build_info",
        "The running build (1), by version, commit (when the build named one), mode (standalone, cluster) and storage (standalone, jetstream)",
        &m.build_info,
    );
    r.register(
        "eventmesh_events_published",
        "Events durably appended to the log",
        m.events_published.clone(),
    );
    r.register(
        "eventmesh_events_dispatched",
        "Deliveries handed to a subscriber (first attempts)",
        m.events_dispatched.clone(),
    );
    r.register("eventmesh_acks", "Deliveries acknowledged", m.acks.clone());
    r.register(
        "eventmesh_redeliveries",
        "Deliveries sent again after a failure or an ack timeout",
        m.redeliveries.clone(),
    );
    r.register(
        "eventmesh_dead_letters",
        "Events whose attempts were used up, written to the dead-letter store",
        m.dead_letters.clone(),
    );
    r.register(
        "eventmesh_push_failures",
        "Webhook attempts that failed (non-2xx, timeout, connection error)",
        m.push_failures.clone(),
    );
    r.register(
        "eventmesh_nacks",
        "Deliveries a client gave back (each a failed attempt)",
        m.nacks.clone(),
    );
    r.register(
        "eventmesh_publish_failures",
        "Publishes refused because the log could not store them (disk full, I/O error)",
        m.publish_failures.clone(),
    );
    r.register(
        "eventmesh_offset_write_failures",
        "Offset commits that could not be written (retried)",
        m.offset_write_failures.clone(),
    );
    r.register(
        "eventmesh_corrupt_records",
        "Stored records that could not be decoded and were skipped",
        m.corrupt_records.clone(),
    );
    r.register(
        "eventmesh_pending_deliveries",
        "Deliveries whose offset is not committed yet (in flight, or acknowledged behind an unacknowledged one or a failed offset write)",
        m.pending_deliveries.clone(),
    );
    declare(
        r,
        "eventmesh_gate_denied",
        "Requests the security gate denied, by reason (in permissive mode they still proceed)",
        &m.gate_denied,
    );
    declare(
        r,
        "eventmesh_auth_failures",
        "Refused admin-token and cluster-secret attempts, by listener and reason (limited: refused without a check, the address having used up its allowance)",
        &m.auth_failures,
    );
    r.register(
        "eventmesh_publish_latency_seconds",
        "Time from receiving a publish to its durable append",
        m.publish_latency.clone(),
    );
    r.register(
        "eventmesh_scheduled_released",
        "Events held back until their deliverat or deliverafter time, released to their topics",
        m.scheduled_released.clone(),
    );
    r.register(
        "eventmesh_scheduled_lateness_seconds",
        "Time from a held-back event's due time to its release",
        m.scheduled_lateness.clone(),
    );
    r.register(
        "eventmesh_delivery_latency_seconds",
        "Time from an event's append to its acknowledgement",
        m.end_to_end_latency.clone(),
    );
    declare(
        r,
        "eventmesh_storage_memory_bytes",
        "Memory of the local store by kind (block_cache, memtables, dedup_index: the index of the idempotency keys of the window)",
        &m.storage_memory,
    );
    r.register(
        "eventmesh_publish_dedup_keys",
        "Idempotency keys the standalone log holds in memory (the last window, and the one before until it ages out)",
        m.dedup_keys.clone(),
    );
    declare(
        r,
        "eventmesh_storage_disk_bytes",
        "Disk space of the local RocksDB store by kind (wal, log_tables, log_blobs, dedup_journal: the idempotency keys of the window, other_tables)",
        &m.storage_disk,
    );
    declare(
        r,
        "eventmesh_retention_skipped",
        "Offsets consumers had not read when retention dropped them, by topic",
        &m.retention_skipped,
    );
    declare(
        r,
        "eventmesh_filter_skipped",
        "Events a subscription's filters did not match, by topic and group",
        &m.filter_skipped,
    );
    declare(
        r,
        "eventmesh_filter_errors",
        "Filter evaluations that raised an error (the event did not match), by topic and group",
        &m.filter_errors,
    );
    declare(
        r,
        "eventmesh_expired",
        "Events not delivered because their expirytime had passed, by topic and group",
        &m.expired,
    );
    declare(
        r,
        "eventmesh_connector_events",
        "Events connectors moved, by connector and direction (in: published by a source; out: written by a sink)",
        &m.connector_events,
    );
    declare(
        r,
        "eventmesh_connector_errors",
        "Connector errors, by connector and reason (open, read, write, publish, position, fenced, config, ...)",
        &m.connector_errors,
    );
    declare(
        r,
        "eventmesh_consumer_lag",
        "Events a consumer of a subscribed topic has not committed yet, by topic and consumer (as of the scrape)",
        &m.consumer_lag,
    );
    r.register(
        "eventmesh_tasks",
        "Tasks alive in the async runtimes (the worker threads' and the TCP port's threads')",
        m.tasks.clone(),
    );
    declare(
        r,
        "eventmesh_tcp_thread_connections",
        "TCP connections each of the TCP port's connection threads serves, by thread (its index)",
        &m.thread_connections,
    );
    r.register(
        "process_resident_memory_bytes",
        "Resident memory of the process",
        m.resident_bytes.clone(),
    );
    r.register(
        "process_open_fds",
        "Open file descriptors of the process",
        m.open_fds.clone(),
    );
    r.register(
        "process_max_fds",
        "The process's descriptor limit (soft, as raised at boot)",
        m.max_fds.clone(),
    );
    declare(
        r,
        "eventmesh_mqtt_packets",
        "MQTT control packets the MQTT listener received (direction in) and sent (out), by type",
        &m.mqtt_packets,
    );
    declare(
        r,
        "eventmesh_mqtt_messages",
        "MQTT application messages (PUBLISH) received (direction in) and sent (out), by QoS",
        &m.mqtt_messages,
    );
    declare(
        r,
        "eventmesh_mqtt_refusals",
        "Refusals the MQTT listener sent, by packet (connack, puback, pubrec, suback, unsuback, disconnect) and reason code (hex)",
        &m.mqtt_refusals,
    );
    declare(
        r,
        "eventmesh_webhook_handshakes",
        "Webhook validation handshakes (OPTIONS) by outcome (allowed, refused, no_answer)",
        &m.webhook_handshakes,
    );
    r.register(
        "eventmesh_webhook_origins_refused",
        "Webhook origins whose receivers refused the handshake: their pushes wait until allowed",
        m.webhook_origins_refused.clone(),
    );
    declare(
        r,
        "eventmesh_link_events",
        "Events each mesh link took from the log, by link and outcome (sent, duplicate, loop, hops, refused)",
        &m.link_events,
    );
    declare(
        r,
        "eventmesh_link_up",
        "Whether each mesh link running here reaches its remote (1) or not (0)",
        &m.link_up,
    );
    declare(
        r,
        "eventmesh_link_lag_events",
        "Events waiting for each mesh link, as last read",
        &m.link_lag_events,
    );
    declare(
        r,
        "eventmesh_link_lag_seconds",
        "Age in seconds of the oldest event each mesh link has not sent, as last read",
        &m.link_lag_seconds,
    );
    declare(
        r,
        "eventmesh_link_retention_risk",
        "Whether retention may drop events each mesh link has not sent (1) or not (0)",
        &m.link_retention_risk,
    );
    declare(
        r,
        "eventmesh_connections_refused",
        "Connections a listener closed unserved, by listener (traffic, admin, tcp) and reason (limit, per_address, timeout_tls, timeout_header, timeout_body, timeout_hello)",
        &m.connections_refused,
    );
    declare(
        r,
        "eventmesh_connections_open",
        "Connections each listener holds (traffic, admin, tcp), TLS handshakes and WebSockets included",
        &m.connections_open,
    );
    declare(
        r,
        "eventmesh_connections_limit",
        "Connection limits in force, by scope (traffic: the traffic ports together; per_address: one client address on them; admin)",
        &m.connections_limit,
    );
    // The standalone log's group commits: JetStream commits on its servers.
    if profile.storage == StorageType::Standalone {
        r.register(
            "eventmesh_log_commit_seconds",
            "Time of one group commit of the log, its fsync included when eventmesh.storage.sync is on",
            m.log_commit_seconds.clone(),
        );
        r.register(
            "eventmesh_log_commit_appends",
            "Publish requests written (and synced) together in one group commit",
            m.log_commit_appends.clone(),
        );
    }
    // The partition ownership: a cluster member's only.
    if profile.cluster {
        declare(
            r,
            "eventmesh_fenced_writes",
            "Writes refused because this instance no longer held the partition's claim, by kind (offset, ack, dead_letter)",
            &m.fenced_writes,
        );
        r.register(
            "eventmesh_owned_partitions",
            "Partitions this instance owns and dispatches (PARTITION_OWNED_PULL)",
            m.owned_partitions.clone(),
        );
        r.register(
            "eventmesh_rebalances",
            "Changes of the partitions this instance owns",
            m.rebalances.clone(),
        );
        r.register(
            "eventmesh_handover_seconds",
            "Time from giving partitions up to releasing their claims, the wait for deliveries in hand included",
            m.handover_seconds.clone(),
        );
    }
    registry
}
