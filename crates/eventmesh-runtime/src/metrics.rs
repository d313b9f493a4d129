//! The runtime's Prometheus metrics, kept in one registry that is passed
//! down to every service (no global state).

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

pub struct Metrics {
    registry: Registry,
    pub events_published: Counter,
    pub events_dispatched: Counter,
    pub acks: Counter,
    pub redeliveries: Counter,
    pub dead_letters: Counter,
    pub push_failures: Counter,
    pub nacks: Counter,
    pub publish_failures: Counter,
    pub offset_write_failures: Counter,
    pub corrupt_records: Counter,
    pub pending_deliveries: Gauge,
    /// Security gate denials by reason (counted in permissive mode too).
    pub gate_denied: Family<Vec<(String, String)>, Counter>,
    /// Refused admin-token and cluster-secret attempts, by listener
    /// (`admin`, `internal`) and reason (`missing`, `bad_token`, `limited`).
    pub auth_failures: Family<Vec<(String, String)>, Counter>,
    /// Seconds from request arrival to a durable append.
    pub publish_latency: Histogram,
    /// Events held back until their due time, released to their topics.
    pub scheduled_released: Counter,
    /// Seconds from an event's due time to its release.
    pub scheduled_lateness: Histogram,
    /// Seconds from the event's ingest to its acknowledgement.
    pub end_to_end_latency: Histogram,
    /// Seconds one group commit of the log took (the write and, with
    /// `eventmesh.storage.sync`, its WAL fsync): what every publish in it
    /// waited for the disk.
    pub log_commit_seconds: Histogram,
    /// Publish requests that shared one group commit.
    pub log_commit_appends: Histogram,
    /// The local store's memory by kind (`block_cache`, `memtables`), as of
    /// the last scrape.
    pub storage_memory: Family<Vec<(String, String)>, Gauge>,
    pub storage_disk: Family<Vec<(String, String)>, Gauge>,
    /// Offsets a consumer had not read when retention dropped them, by
    /// topic (on the standalone log exactly the events lost to it).
    pub retention_skipped: Family<Vec<(String, String)>, Counter>,
    /// Events a subscription's filters did not match (read past, never
    /// handed out), by topic and group.
    pub filter_skipped: Family<Vec<(String, String)>, Counter>,
    /// Filter evaluations that raised an error (the event counted as not
    /// matching), by topic and group.
    pub filter_errors: Family<Vec<(String, String)>, Counter>,
    /// Events read past because their `expirytime` had passed, by topic
    /// and group.
    pub expired: Family<Vec<(String, String)>, Counter>,
    /// Writes refused because this instance no longer held the partition's
    /// claim, by kind (`offset`, `ack`, `dead_letter`).
    pub fenced_writes: Family<Vec<(String, String)>, Counter>,
    /// Partitions this instance owns and dispatches.
    pub owned_partitions: Gauge,
    /// Tasks alive in the async runtime, read at each scrape.
    pub tasks: Gauge,
    /// The process's resident memory and open file descriptors (Linux),
    /// read at each scrape.
    pub resident_bytes: Gauge,
    pub open_fds: Gauge,
    /// Changes of the partitions this instance owns.
    pub rebalances: Counter,
    /// Seconds from giving partitions up to releasing their claims.
    pub handover_seconds: Histogram,
    /// Events connectors moved, by connector and direction (`in`: a
    /// source published them; `out`: a sink wrote them).
    pub connector_events: Family<Vec<(String, String)>, Counter>,
    /// Connector errors, by connector and reason.
    pub connector_errors: Family<Vec<(String, String)>, Counter>,
    /// Events each consumer of a subscribed topic has not committed yet,
    /// by topic and consumer, as of the last scrape.
    pub consumer_lag: Family<Vec<(String, String)>, Gauge>,
    /// Connections a listener closed before serving them (over a limit) or
    /// cut off before they got anywhere (a timeout), by listener and reason.
    pub connections_refused: Family<Vec<(String, String)>, Counter>,
    /// Connections each listener holds, by listener.
    pub connections_open: Family<Vec<(String, String)>, Gauge>,
    /// The connection limits in force, by scope (`traffic`, `per_address`,
    /// `admin`).
    pub connections_limit: Family<Vec<(String, String)>, Gauge>,
    /// The process's descriptor limit (the soft one, after the boot raised
    /// it).
    pub max_fds: Gauge,
    /// MQTT control packets, by direction (`in`, `out`) and type.
    pub mqtt_packets: Family<Vec<(String, String)>, Counter>,
    /// MQTT application messages (PUBLISH packets), by direction and QoS.
    pub mqtt_messages: Family<Vec<(String, String)>, Counter>,
    /// Refusals the MQTT listener sent (reason codes 0x80 and above), by
    /// packet and reason code.
    pub mqtt_refusals: Family<Vec<(String, String)>, Counter>,
    /// Events each mesh link took from the log, by link and outcome
    /// (`sent`, `duplicate`: the remote had it already, `loop`: the remote
    /// is on its path, `hops`: past the hop limit, `refused`: the remote
    /// refused it for good and it was dead-lettered).
    pub link_events: Family<Vec<(String, String)>, Counter>,
    /// Whether each mesh link runs here and reaches its remote (1) or not (0).
    pub link_up: Family<Vec<(String, String)>, Gauge>,
    /// Events waiting for each mesh link, as last read.
    pub link_lag_events: Family<Vec<(String, String)>, Gauge>,
    /// Age in seconds of the oldest event each mesh link has not sent, as
    /// last read (0 when none waits).
    pub link_lag_seconds: Family<Vec<(String, String)>, Gauge>,
    /// Whether retention may drop events each mesh link has not sent (1).
    pub link_retention_risk: Family<Vec<(String, String)>, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Counts `n` events a connector moved.
    pub fn connector_events(&self, connector: &str, direction: &str, n: u64) {
        self.connector_events
            .get_or_create(&vec![
                ("connector".to_string(), connector.to_string()),
                ("direction".to_string(), direction.to_string()),
            ])
            .inc_by(n);
    }

    /// Counts `n` events a mesh link took, by what became of them.
    pub fn link_events(&self, link: &str, outcome: &str, n: u64) {
        self.link_events
            .get_or_create(&vec![
                ("link".to_string(), link.to_string()),
                ("outcome".to_string(), outcome.to_string()),
            ])
            .inc_by(n);
    }

    /// A mesh link's state and lag, as last read (`None`: it stopped here,
    /// and its series go).
    pub fn link_state(&self, link: &str, state: Option<(bool, u64, f64)>) {
        let labels = vec![("link".to_string(), link.to_string())];
        match state {
            Some((up, lag, seconds)) => {
                self.link_up.get_or_create(&labels).set(i64::from(up));
                self.link_lag_events
                    .get_or_create(&labels)
                    .set(i64::try_from(lag).unwrap_or(i64::MAX));
                self.link_lag_seconds
                    .get_or_create(&labels)
                    .set(seconds.round() as i64);
            }
            None => {
                self.link_up.remove(&labels);
                self.link_retention_risk.remove(&labels);
                self.link_lag_events.remove(&labels);
                self.link_lag_seconds.remove(&labels);
            }
        }
    }

    /// Records whether a mesh link's backlog is at risk; whether it was.
    pub fn link_at_risk(&self, link: &str, at_risk: bool) -> bool {
        let labels = vec![("link".to_string(), link.to_string())];
        let gauge = self.link_retention_risk.get_or_create(&labels);
        gauge.set(i64::from(at_risk)) == 1
    }

    /// Counts a connector error.
    pub fn connector_error(&self, connector: &str, reason: &str) {
        self.connector_errors
            .get_or_create(&vec![
                ("connector".to_string(), connector.to_string()),
                ("reason".to_string(), reason.to_string()),
            ])
            .inc();
    }

    /// Counts a connection `listener` refused or cut off for `reason`.
    pub fn connection_refused(&self, listener: &str, reason: &str) {
        self.connections_refused
            .get_or_create(&vec![
                ("listener".to_string(), listener.to_string()),
                ("reason".to_string(), reason.to_string()),
            ])
            .inc();
    }

    /// The gauge of the connections `listener` holds.
    pub fn connections_open(&self, listener: &str) -> Gauge {
        self.connections_open
            .get_or_create(&vec![("listener".to_string(), listener.to_string())])
            .clone()
    }

    /// Publishes a connection limit in force.
    pub fn set_connections_limit(&self, scope: &str, limit: u32) {
        self.connections_limit
            .get_or_create(&vec![("scope".to_string(), scope.to_string())])
            .set(i64::from(limit));
    }

    pub fn new() -> Self {
        let mut registry = Registry::default();
        let m = Metrics {
            events_published: Counter::default(),
            events_dispatched: Counter::default(),
            acks: Counter::default(),
            redeliveries: Counter::default(),
            dead_letters: Counter::default(),
            push_failures: Counter::default(),
            nacks: Counter::default(),
            publish_failures: Counter::default(),
            offset_write_failures: Counter::default(),
            corrupt_records: Counter::default(),
            pending_deliveries: Gauge::default(),
            gate_denied: Family::default(),
            auth_failures: Family::default(),
            publish_latency: Histogram::new(exponential_buckets(0.000_05, 2.0, 18)),
            scheduled_released: Counter::default(),
            scheduled_lateness: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            end_to_end_latency: Histogram::new(exponential_buckets(0.000_1, 2.0, 20)),
            log_commit_seconds: Histogram::new(exponential_buckets(0.000_025, 2.0, 18)),
            log_commit_appends: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            storage_memory: Family::default(),
            storage_disk: Family::default(),
            retention_skipped: Family::default(),
            filter_skipped: Family::default(),
            filter_errors: Family::default(),
            expired: Family::default(),
            fenced_writes: Family::default(),
            owned_partitions: Gauge::default(),
            tasks: Gauge::default(),
            resident_bytes: Gauge::default(),
            open_fds: Gauge::default(),
            rebalances: Counter::default(),
            handover_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            connector_events: Family::default(),
            connector_errors: Family::default(),
            consumer_lag: Family::default(),
            connections_refused: Family::default(),
            connections_open: Family::default(),
            connections_limit: Family::default(),
            max_fds: Gauge::default(),
            mqtt_packets: Family::default(),
            mqtt_messages: Family::default(),
            mqtt_refusals: Family::default(),
            link_events: Family::default(),
            link_up: Family::default(),
            link_lag_events: Family::default(),
            link_lag_seconds: Family::default(),
            link_retention_risk: Family::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
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
        r.register(
            "eventmesh_gate_denied",
            "Requests the security gate denied, by reason (in permissive mode they still proceed)",
            m.gate_denied.clone(),
        );
        r.register(
            "eventmesh_auth_failures",
            "Refused admin-token and cluster-secret attempts, by listener and reason (limited: refused without a check, the address having used up its allowance)",
            m.auth_failures.clone(),
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
        r.register(
            "eventmesh_storage_memory_bytes",
            "Memory of the local RocksDB store by kind (block_cache, memtables)",
            m.storage_memory.clone(),
        );
        r.register(
            "eventmesh_storage_disk_bytes",
            "Disk space of the local RocksDB store by kind (wal, log_tables, log_blobs, dedup_journal: the idempotency keys of the window, other_tables)",
            m.storage_disk.clone(),
        );
        r.register(
            "eventmesh_retention_skipped",
            "Offsets consumers had not read when retention dropped them, by topic",
            m.retention_skipped.clone(),
        );
        r.register(
            "eventmesh_filter_skipped",
            "Events a subscription's filters did not match, by topic and group",
            m.filter_skipped.clone(),
        );
        r.register(
            "eventmesh_filter_errors",
            "Filter evaluations that raised an error (the event did not match), by topic and group",
            m.filter_errors.clone(),
        );
        r.register(
            "eventmesh_expired",
            "Events not delivered because their expirytime had passed, by topic and group",
            m.expired.clone(),
        );
        r.register(
            "eventmesh_fenced_writes",
            "Writes refused because this instance no longer held the partition's claim, by kind (offset, ack, dead_letter)",
            m.fenced_writes.clone(),
        );
        r.register(
            "eventmesh_owned_partitions",
            "Partitions this instance owns and dispatches (PARTITION_OWNED_PULL)",
            m.owned_partitions.clone(),
        );
        r.register(
            "eventmesh_connector_events",
            "Events connectors moved, by connector and direction (in: published by a source; out: written by a sink)",
            m.connector_events.clone(),
        );
        r.register(
            "eventmesh_connector_errors",
            "Connector errors, by connector and reason (open, read, write, publish, position, fenced, config, ...)",
            m.connector_errors.clone(),
        );
        r.register(
            "eventmesh_consumer_lag",
            "Events a consumer of a subscribed topic has not committed yet, by topic and consumer (as of the scrape)",
            m.consumer_lag.clone(),
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
        r.register(
            "eventmesh_tasks",
            "Tasks alive in the async runtime",
            m.tasks.clone(),
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
        r.register(
            "eventmesh_mqtt_packets",
            "MQTT control packets the MQTT listener received (direction in) and sent (out), by type",
            m.mqtt_packets.clone(),
        );
        r.register(
            "eventmesh_mqtt_messages",
            "MQTT application messages (PUBLISH) received (direction in) and sent (out), by QoS",
            m.mqtt_messages.clone(),
        );
        r.register(
            "eventmesh_mqtt_refusals",
            "Refusals the MQTT listener sent, by packet (connack, puback, pubrec, suback, unsuback, disconnect) and reason code (hex)",
            m.mqtt_refusals.clone(),
        );
        r.register(
            "eventmesh_link_events",
            "Events each mesh link took from the log, by link and outcome (sent, duplicate, loop, hops, refused)",
            m.link_events.clone(),
        );
        r.register(
            "eventmesh_link_up",
            "Whether each mesh link running here reaches its remote (1) or not (0)",
            m.link_up.clone(),
        );
        r.register(
            "eventmesh_link_lag_events",
            "Events waiting for each mesh link, as last read",
            m.link_lag_events.clone(),
        );
        r.register(
            "eventmesh_link_lag_seconds",
            "Age in seconds of the oldest event each mesh link has not sent, as last read",
            m.link_lag_seconds.clone(),
        );
        r.register(
            "eventmesh_link_retention_risk",
            "Whether retention may drop events each mesh link has not sent (1) or not (0)",
            m.link_retention_risk.clone(),
        );
        r.register(
            "eventmesh_connections_refused",
            "Connections a listener closed unserved, by listener (traffic, admin, tcp) and reason (limit, per_address, timeout_tls, timeout_header, timeout_body, timeout_hello)",
            m.connections_refused.clone(),
        );
        r.register(
            "eventmesh_connections_open",
            "Connections each listener holds (traffic, admin, tcp), TLS handshakes and WebSockets included",
            m.connections_open.clone(),
        );
        r.register(
            "eventmesh_connections_limit",
            "Connection limits in force, by scope (traffic: the traffic ports together; per_address: one client address on them; admin)",
            m.connections_limit.clone(),
        );
        Metrics { registry, ..m }
    }

    /// Reads the async runtime's task count and (on Linux) the process's
    /// resident memory and open file descriptors; called at each scrape.
    pub fn sample_process(&self) {
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let tasks = handle.metrics().num_alive_tasks();
            self.tasks.set(i64::try_from(tasks).unwrap_or(i64::MAX));
        }
        // `VmRSS:   123456 kB`
        let rss = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
                line.split_whitespace().nth(1)?.parse::<i64>().ok()
            });
        if let Some(kib) = rss {
            self.resident_bytes.set(kib.saturating_mul(1024));
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            self.open_fds
                .set(i64::try_from(fds.count()).unwrap_or(i64::MAX));
        }
    }

    /// Counts offsets of `topic` a consumer skipped because retention
    /// dropped them.
    pub fn retention_skipped(&self, topic: &str, offsets: u64) {
        self.retention_skipped
            .get_or_create(&vec![("topic".to_string(), topic.to_string())])
            .inc_by(offsets);
    }

    /// The skipped and errors counters of one consumer's filter.
    /// The counter of expired events of a group on a topic.
    pub fn expired_counter(&self, topic: &str, group: &str) -> Counter {
        let labels = vec![
            ("topic".to_string(), topic.to_string()),
            ("group".to_string(), group.to_string()),
        ];
        self.expired.get_or_create(&labels).clone()
    }

    pub fn filter_counters(&self, topic: &str, group: &str) -> (Counter, Counter) {
        let labels = vec![
            ("topic".to_string(), topic.to_string()),
            ("group".to_string(), group.to_string()),
        ];
        (
            self.filter_skipped.get_or_create(&labels).clone(),
            self.filter_errors.get_or_create(&labels).clone(),
        )
    }

    /// Counts a write refused because the partition's claim was gone.
    pub fn fenced(&self, kind: &str) {
        self.fenced_writes
            .get_or_create(&vec![("kind".to_string(), kind.to_string())])
            .inc();
    }

    /// Sets the `eventmesh_storage_memory_bytes` gauge of one kind.
    pub fn set_storage_memory(&self, kind: &str, bytes: usize) {
        self.storage_memory
            .get_or_create(&vec![("kind".to_string(), kind.to_string())])
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Sets the `eventmesh_storage_disk_bytes` gauge of one kind.
    pub fn set_storage_disk(&self, kind: &str, bytes: u64) {
        self.storage_disk
            .get_or_create(&vec![("kind".to_string(), kind.to_string())])
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn renders_the_documented_names() {
        let m = super::Metrics::new();
        m.events_published.inc_by(3);
        m.publish_latency.observe(0.001);
        m.log_commit_seconds.observe(0.0002);
        m.set_storage_memory("block_cache", 4096);
        m.connection_refused("traffic", "limit");
        m.connections_open("admin").inc();
        m.set_connections_limit("per_address", 44);
        m.max_fds.set(256);
        let text = m.render();
        for name in [
            "eventmesh_events_published_total 3",
            "eventmesh_events_dispatched_total",
            "eventmesh_acks_total",
            "eventmesh_pending_deliveries",
            "eventmesh_publish_latency_seconds_bucket",
            "eventmesh_log_commit_seconds_count 1",
            "eventmesh_log_commit_appends_bucket",
            "eventmesh_storage_memory_bytes{kind=\"block_cache\"} 4096",
            "eventmesh_connections_refused_total{listener=\"traffic\",reason=\"limit\"} 1",
            "eventmesh_connections_open{listener=\"admin\"} 1",
            "eventmesh_connections_limit{scope=\"per_address\"} 44",
            "process_max_fds 256",
        ] {
            assert!(text.contains(name), "missing {name} in\n{text}");
        }
    }
}
