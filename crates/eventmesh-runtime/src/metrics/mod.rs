//! The runtime's Prometheus metrics, kept in one registry that is passed
//! down to every service (no global state). `families` declares what an
//! instance serves; `exposition` renders it in the format a scraper asks
//! for (the classic text format or OpenMetrics).

mod exposition;
mod families;

pub use exposition::Format;
pub use families::Profile;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// The label set of a family: (name, value) pairs.
pub type Labels = Vec<(String, String)>;

/// One of the TCP port's connection threads, as the metrics read it.
pub struct ConnectionThread {
    /// The thread's async runtime.
    pub runtime: tokio::runtime::Handle,
    /// Connections being served on it.
    pub connections: Arc<AtomicUsize>,
}

/// A count as a gauge's value.
fn count(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

pub struct Metrics {
    registry: Registry,
    /// `eventmesh_build_info`: one series, 1, labelled by [`Profile`].
    pub build_info: Family<Labels, Gauge>,
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
    pub gate_denied: Family<Labels, Counter>,
    /// Refused admin-token and cluster-secret attempts, by listener
    /// (`admin`, `internal`) and reason (`missing`, `bad_token`, `limited`).
    pub auth_failures: Family<Labels, Counter>,
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
    /// The local store's memory by kind (`block_cache`, `memtables`,
    /// `dedup_index`), as of the last scrape.
    pub storage_memory: Family<Labels, Gauge>,
    /// Idempotency keys the standalone log's index holds, as of the last
    /// scrape.
    pub dedup_keys: Gauge,
    pub storage_disk: Family<Labels, Gauge>,
    /// Offsets a consumer had not read when retention dropped them, by
    /// topic (on the standalone log exactly the events lost to it).
    pub retention_skipped: Family<Labels, Counter>,
    /// Events a subscription's filters did not match (read past, never
    /// handed out), by topic and group.
    pub filter_skipped: Family<Labels, Counter>,
    /// Filter evaluations that raised an error (the event counted as not
    /// matching), by topic and group.
    pub filter_errors: Family<Labels, Counter>,
    /// Events read past because their `expirytime` had passed, by topic
    /// and group.
    pub expired: Family<Labels, Counter>,
    /// Writes refused because this instance no longer held the partition's
    /// claim, by kind (`offset`, `ack`, `dead_letter`).
    pub fenced_writes: Family<Labels, Counter>,
    /// Partitions this instance owns and dispatches.
    pub owned_partitions: Gauge,
    /// Tasks alive in the async runtimes, read at each scrape.
    pub tasks: Gauge,
    /// The TCP port's connection threads, each a runtime of its own whose
    /// tasks `tasks` counts beside those of the runtime serving the
    /// scrape.
    connection_threads: std::sync::Mutex<Vec<ConnectionThread>>,
    /// Connections each of those threads serves, by thread, as of the
    /// last scrape.
    pub thread_connections: Family<Labels, Gauge>,
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
    pub connector_events: Family<Labels, Counter>,
    /// Connector errors, by connector and reason.
    pub connector_errors: Family<Labels, Counter>,
    /// Events each consumer of a subscribed topic has not committed yet,
    /// by topic and consumer, as of the last scrape.
    pub consumer_lag: Family<Labels, Gauge>,
    /// Connections a listener closed before serving them (over a limit) or
    /// cut off before they got anywhere (a timeout), by listener and reason.
    pub connections_refused: Family<Labels, Counter>,
    /// Connections each listener holds, by listener.
    pub connections_open: Family<Labels, Gauge>,
    /// The connection limits in force, by scope (`traffic`, `per_address`,
    /// `admin`).
    pub connections_limit: Family<Labels, Gauge>,
    /// The process's descriptor limit (the soft one, after the boot raised
    /// it).
    pub max_fds: Gauge,
    /// MQTT control packets, by direction (`in`, `out`) and type.
    pub mqtt_packets: Family<Labels, Counter>,
    /// MQTT application messages (PUBLISH packets), by direction and QoS.
    pub mqtt_messages: Family<Labels, Counter>,
    /// Refusals the MQTT listener sent (reason codes 0x80 and above), by
    /// packet and reason code.
    pub mqtt_refusals: Family<Labels, Counter>,
    /// Events each mesh link took from the log, by link and outcome
    /// (`sent`, `duplicate`: the remote had it already, `loop`: the remote
    /// is on its path, `hops`: past the hop limit, `refused`: the remote
    /// refused it for good and it was dead-lettered).
    pub link_events: Family<Labels, Counter>,
    /// Whether each mesh link runs here and reaches its remote (1) or not (0).
    pub link_up: Family<Labels, Gauge>,
    /// Events waiting for each mesh link, as last read.
    pub link_lag_events: Family<Labels, Gauge>,
    /// Age in seconds of the oldest event each mesh link has not sent, as
    /// last read (0 when none waits).
    pub link_lag_seconds: Family<Labels, Gauge>,
    /// Whether retention may drop events each mesh link has not sent (1).
    pub link_retention_risk: Family<Labels, Gauge>,
    /// Webhook validation handshakes (`OPTIONS`) by outcome (`allowed`,
    /// `refused`, `no_answer`).
    pub webhook_handshakes: Family<Labels, Counter>,
    /// Webhook origins whose receivers refused the handshake: their pushes
    /// wait until the receivers allow them.
    pub webhook_origins_refused: Gauge,
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

    /// Counts a webhook handshake by its outcome.
    pub fn webhook_handshake(&self, outcome: &str) {
        self.webhook_handshakes
            .get_or_create(&vec![("outcome".to_string(), outcome.to_string())])
            .inc();
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
                self.link_lag_events.get_or_create(&labels).set(count(lag));
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

    /// The metrics of a standalone instance (see [`Metrics::for_instance`]).
    pub fn new() -> Self {
        Self::for_instance(&Profile::default())
    }

    /// The metrics of an instance of `profile`: every family it can serve
    /// declared from boot, `eventmesh_build_info` set.
    pub fn for_instance(profile: &Profile) -> Self {
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
            dedup_keys: Gauge::default(),
            storage_disk: Family::default(),
            retention_skipped: Family::default(),
            filter_skipped: Family::default(),
            filter_errors: Family::default(),
            expired: Family::default(),
            fenced_writes: Family::default(),
            owned_partitions: Gauge::default(),
            tasks: Gauge::default(),
            connection_threads: std::sync::Mutex::default(),
            thread_connections: Family::default(),
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
            webhook_handshakes: Family::default(),
            webhook_origins_refused: Gauge::default(),
            build_info: Family::default(),
            registry: Registry::default(),
        };
        let registry = families::register(&m, profile);
        Metrics { registry, ..m }
    }

    /// Watches the TCP port's connection threads: their tasks counted in
    /// `eventmesh_tasks`, their connections in
    /// `eventmesh_tcp_thread_connections`, by thread (its index), both
    /// read at each scrape.
    pub fn watch_connection_threads(&self, threads: impl IntoIterator<Item = ConnectionThread>) {
        self.connection_threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(threads);
    }

    /// Reads the async runtimes' task count, the connections of each TCP
    /// connection thread and (on Linux) the process's resident memory and
    /// open file descriptors; called at each scrape.
    pub fn sample_process(&self) {
        {
            let threads = self
                .connection_threads
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let mut tasks = 0;
            for (i, t) in threads.iter().enumerate() {
                tasks += t.runtime.metrics().num_alive_tasks();
                self.thread_connections
                    .get_or_create(&vec![("thread".into(), i.to_string())])
                    .set(count(t.connections.load(Ordering::Relaxed)));
            }
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                self.tasks
                    .set(count(handle.metrics().num_alive_tasks() + tasks));
            }
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
            self.open_fds.set(count(fds.count()));
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
            .set(count(bytes));
    }

    /// Sets the `eventmesh_storage_disk_bytes` gauge of one kind.
    pub fn set_storage_disk(&self, kind: &str, bytes: u64) {
        self.storage_disk
            .get_or_create(&vec![("kind".to_string(), kind.to_string())])
            .set(count(bytes));
    }

    /// The exposition of every family in `format`.
    pub fn render(&self, format: Format) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        match format {
            Format::OpenMetrics => out,
            Format::Text => exposition::to_text(&out),
        }
    }
}

#[cfg(test)]
mod tests;
