//! `/metrics` read by a third-party client: `prometheus_client` (Python),
//! whose classic text parser and OpenMetrics parser are those scrapers and
//! exporters build on (`tests/interop/metrics_parse.py`).
//!
//! | scenario | test |
//! |---|---|
//! | the format follows `Accept` (none, `*/*`, `text/plain`, Prometheus's own header, q-values), each answer with its exact content type | [`a_standalone_node_in_both_formats`] |
//! | both parsers read the same families (name, type, HELP) from boot, every family declared, the standalone ones exactly | [`a_standalone_node_in_both_formats`] |
//! | after 7 publishes: the same counter and histogram samples in both formats, the counts exact | [`a_standalone_node_in_both_formats`] |
//! | `eventmesh_build_info` is 1, labelled with this crate's version, the mode and the storage | [`a_standalone_node_in_both_formats`], [`the_cluster_families_and_the_dashboard`] |
//! | a cluster node (`PARTITION_OWNED_PULL`) serves the ownership families, a standalone one does not; the group commits only on the standalone log | [`the_cluster_families_and_the_dashboard`] |
//! | every metric the Grafana dashboard queries is declared at boot: on a standalone node, or (the ownership's) on a cluster node | [`the_cluster_families_and_the_dashboard`] |

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::interop::python_script;
use common::mesh::{Mesh, LEASE_MS, SERIAL};
use common::*;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// What Prometheus sends when it scrapes.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,\
    application/openmetrics-text;version=0.0.1;q=0.75,\
    text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// The families of the partition ownership: a cluster node's only.
const OWNERSHIP: [&str; 4] = [
    "eventmesh_owned_partitions",
    "eventmesh_rebalances",
    "eventmesh_handover_seconds",
    "eventmesh_fenced_writes",
];
/// The standalone log's group commits.
const GROUP_COMMITS: [&str; 2] = [
    "eventmesh_log_commit_seconds",
    "eventmesh_log_commit_appends",
];

/// Every family of a standalone node, as the parsers name them (a counter
/// without its `_total`).
const STANDALONE: [&str; 48] = [
    "eventmesh_build_info",
    "eventmesh_events_published",
    "eventmesh_events_dispatched",
    "eventmesh_acks",
    "eventmesh_redeliveries",
    "eventmesh_dead_letters",
    "eventmesh_push_failures",
    "eventmesh_nacks",
    "eventmesh_publish_failures",
    "eventmesh_offset_write_failures",
    "eventmesh_corrupt_records",
    "eventmesh_pending_deliveries",
    "eventmesh_gate_denied",
    "eventmesh_auth_failures",
    "eventmesh_publish_latency_seconds",
    "eventmesh_scheduled_released",
    "eventmesh_scheduled_lateness_seconds",
    "eventmesh_delivery_latency_seconds",
    "eventmesh_storage_memory_bytes",
    "eventmesh_storage_disk_bytes",
    "eventmesh_publish_dedup_keys",
    "eventmesh_retention_skipped",
    "eventmesh_filter_skipped",
    "eventmesh_filter_errors",
    "eventmesh_expired",
    "eventmesh_connector_events",
    "eventmesh_connector_errors",
    "eventmesh_consumer_lag",
    "eventmesh_tasks",
    "eventmesh_tcp_thread_connections",
    "process_resident_memory_bytes",
    "process_open_fds",
    "process_max_fds",
    "eventmesh_mqtt_packets",
    "eventmesh_mqtt_messages",
    "eventmesh_mqtt_refusals",
    "eventmesh_link_events",
    "eventmesh_link_up",
    "eventmesh_link_lag_events",
    "eventmesh_link_lag_seconds",
    "eventmesh_link_retention_risk",
    "eventmesh_webhook_handshakes",
    "eventmesh_webhook_origins_refused",
    "eventmesh_connections_refused",
    "eventmesh_connections_open",
    "eventmesh_connections_limit",
    "eventmesh_log_commit_seconds",
    "eventmesh_log_commit_appends",
];

/// One family as `prometheus_client` parsed it.
#[derive(Debug, Clone, PartialEq)]
struct Family {
    name: String,
    kind: String,
    help: String,
    /// (sample name, labels, value).
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

impl Family {
    fn from_json(v: &Value) -> Family {
        let samples = v["samples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let labels = s[1]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect();
                let value = match &s[2] {
                    Value::String(v) => v.parse().unwrap(),
                    v => v.as_f64().unwrap(),
                };
                (s[0].as_str().unwrap().to_string(), labels, value)
            })
            .collect();
        Family {
            name: v["name"].as_str().unwrap().to_string(),
            kind: v["type"].as_str().unwrap().to_string(),
            help: v["help"].as_str().unwrap().to_string(),
            samples,
        }
    }

    /// Whether a query's metric name is one of this family's samples.
    fn owns(&self, metric: &str) -> bool {
        let suffixes: &[&str] = match self.kind.as_str() {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        suffixes
            .iter()
            .any(|s| metric == format!("{}{s}", self.name))
    }
}

/// `GET /metrics` over a plain HTTP/1.0 connection, sending `Accept: accept`
/// when given (no Accept header at all otherwise); the status, the
/// `Content-Type` and the body.
async fn scrape(s: &Server, accept: Option<&str>) -> (u16, String, String) {
    let addr = s.admin.trim_start_matches("http://").to_string();
    let request = format!(
        "GET /metrics HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n{}\r\n",
        accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"))
    );
    let read = async {
        let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
        conn.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        conn.read_to_end(&mut raw).await.unwrap();
        String::from_utf8(raw).unwrap()
    };
    let raw = tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .expect("/metrics answered within 30 s");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a whole answer");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head}"));
    let content_type = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    (status, content_type, body.to_string())
}

/// `text` parsed by `prometheus_client`'s parser of `format` (`text` or
/// `openmetrics`); the test fails if it refuses it.
async fn parse(format: &str, text: &str) -> Vec<Family> {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), text).unwrap();
    let path = file.path().display().to_string();
    python_script("metrics_parse.py", vec![format.to_string(), path])
        .await
        .iter()
        .map(Family::from_json)
        .collect()
}

/// A scrape in each format, each parsed by its own parser: (text,
/// OpenMetrics).
async fn both(s: &Server) -> (Vec<Family>, Vec<Family>) {
    let (status, content_type, text) = scrape(s, Some("text/plain")).await;
    assert_eq!((status, content_type.as_str()), (200, TEXT));
    let (status, content_type, open) = scrape(s, Some(PROMETHEUS_ACCEPT)).await;
    assert_eq!((status, content_type.as_str()), (200, OPENMETRICS));
    (
        parse("text", &text).await,
        parse("openmetrics", &open).await,
    )
}

/// (name, type, HELP) of each family, in order.
fn heads(families: &[Family]) -> Vec<(String, String, String)> {
    families
        .iter()
        .map(|f| (f.name.clone(), f.kind.clone(), f.help.clone()))
        .collect()
}

fn names(families: &[Family]) -> BTreeSet<String> {
    families.iter().map(|f| f.name.clone()).collect()
}

fn family<'a>(families: &'a [Family], name: &str) -> &'a Family {
    families
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no family {name} in {:?}", names(families)))
}

/// The value of a sample without labels.
fn value(families: &[Family], sample: &str) -> f64 {
    families
        .iter()
        .flat_map(|f| &f.samples)
        .find(|(n, labels, _)| n == sample && labels.is_empty())
        .map(|(_, _, v)| *v)
        .unwrap_or_else(|| panic!("no sample {sample}"))
}

/// The labels of `eventmesh_build_info`'s one series, checking it is 1.
fn build_info(families: &[Family]) -> BTreeMap<String, String> {
    let f = family(families, "eventmesh_build_info");
    assert_eq!(f.kind, "gauge");
    assert_eq!(f.samples.len(), 1, "{f:?}");
    let (name, labels, v) = &f.samples[0];
    assert_eq!((name.as_str(), *v), ("eventmesh_build_info", 1.0));
    labels.clone()
}

/// The labels `eventmesh_build_info` should have on a node of `mode` and
/// `storage`.
fn build_labels(mode: &str, storage: &str) -> BTreeMap<String, String> {
    let mut want: BTreeMap<String, String> = [
        ("version", env!("CARGO_PKG_VERSION")),
        ("mode", mode),
        ("storage", storage),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    if let Some(commit) = option_env!("EVENTMESH_COMMIT").filter(|c| !c.is_empty()) {
        want.insert("commit".to_string(), commit.to_string());
    }
    want
}

#[tokio::test]
async fn a_standalone_node_in_both_formats() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();

    for (accept, want) in [
        (None, TEXT),
        (Some("*/*"), TEXT),
        (Some("text/plain"), TEXT),
        (Some("text/plain; version=0.0.4"), TEXT),
        (Some("application/json"), TEXT),
        (Some(PROMETHEUS_ACCEPT), OPENMETRICS),
        (Some("application/openmetrics-text"), OPENMETRICS),
        (
            Some("application/openmetrics-text; version=1.0.0; charset=utf-8"),
            OPENMETRICS,
        ),
        (
            Some("text/plain;q=0.3, application/openmetrics-text;q=0.7"),
            OPENMETRICS,
        ),
        (Some("application/openmetrics-text;q=0.2, text/plain"), TEXT),
        (Some("application/openmetrics-text;q=0, */*"), TEXT),
    ] {
        let (status, content_type, body) = scrape(&s, accept).await;
        assert_eq!((status, content_type.as_str()), (200, want), "{accept:?}");
        assert_eq!(body.ends_with("# EOF\n"), want == OPENMETRICS, "{accept:?}");
    }

    // At boot: the same families through both parsers, each with its HELP
    // and TYPE, a standalone node's exactly.
    let (text, open) = both(&s).await;
    assert_eq!(heads(&text), heads(&open));
    for f in &open {
        assert!(!f.help.is_empty(), "{} has no HELP", f.name);
    }
    let want: BTreeSet<String> = STANDALONE.iter().map(|n| n.to_string()).collect();
    assert_eq!(names(&open), want);
    for (f, kind) in [
        ("eventmesh_events_published", "counter"),
        ("eventmesh_gate_denied", "counter"),
        ("eventmesh_consumer_lag", "gauge"),
        ("eventmesh_delivery_latency_seconds", "histogram"),
    ] {
        assert_eq!(family(&open, f).kind, kind, "{f}");
    }
    // A counter without labels at 0, a family with labels and no series.
    assert_eq!(value(&open, "eventmesh_events_published_total"), 0.0);
    assert!(family(&open, "eventmesh_gate_denied").samples.is_empty());
    assert_eq!(build_info(&text), build_labels("standalone", "standalone"));
    assert_eq!(build_info(&open), build_labels("standalone", "standalone"));

    // Seven publishes, one at a time: the same samples in both formats.
    for i in 0..7 {
        publish(&c, &s, "interop", &event(&format!("e{i}"))).await;
    }
    let published = counter_reaching(
        &c,
        &s,
        "eventmesh_events_published_total",
        7.0,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(published, 7.0);
    let (text, open) = both(&s).await;
    assert_eq!(heads(&text), heads(&open));
    let mut compared = 0;
    for (t, o) in text.iter().zip(&open) {
        // Gauges (memory, descriptors, tasks) move between two scrapes.
        if t.kind != "gauge" {
            assert_eq!(t.samples, o.samples, "{}", t.name);
            compared += t.samples.len();
        }
    }
    assert!(compared > 50, "only {compared} samples compared");
    for families in [&text, &open] {
        assert_eq!(value(families, "eventmesh_events_published_total"), 7.0);
        assert_eq!(
            value(families, "eventmesh_publish_latency_seconds_count"),
            7.0
        );
        // Each publish appended once, whatever the commits it shared.
        assert_eq!(value(families, "eventmesh_log_commit_appends_sum"), 7.0);
        assert_eq!(value(families, "eventmesh_acks_total"), 0.0);
    }
}

/// Every metric name the dashboard's queries select: an identifier
/// followed by a label matcher (`name{...}`), or one of this project's
/// names (`eventmesh_*`, `process_*`) wherever it stands.
fn dashboard_metrics() -> BTreeSet<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/grafana/eventmesh.json"
    );
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut exprs = Vec::new();
    collect_exprs(&dashboard, &mut exprs);
    assert!(exprs.len() > 20, "{exprs:?}");
    let mut names = BTreeSet::new();
    for expr in &exprs {
        let found = selected_metrics(expr);
        assert!(!found.is_empty(), "no metric in {expr}");
        names.extend(found);
    }
    names
}

fn collect_exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                match v {
                    Value::String(s) if k == "expr" => out.push(s.clone()),
                    _ => collect_exprs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}

/// The metric names of one PromQL expression (label matchers, strings,
/// ranges and `$variables` skipped).
fn selected_metrics(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let ch = chars[i];
        let close = match ch {
            '{' => Some('}'),
            '[' => Some(']'),
            '"' => Some('"'),
            _ => None,
        };
        if let Some(close) = close {
            i += 1;
            while i < chars.len() && chars[i] != close {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if ch == '$' || ch.is_ascii_digit() {
            // A variable, or a number (`0.99`, `5m`).
            i += 1;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else if ch.is_ascii_alphabetic() || ch == '_' || ch == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let ident: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().find(|c| !c.is_whitespace());
            let ours = ident.starts_with("eventmesh_") || ident.starts_with("process_");
            if next == Some(&'{') || ours {
                names.insert(ident);
            }
        } else {
            i += 1;
        }
    }
    names
}

#[tokio::test]
async fn the_cluster_families_and_the_dashboard() {
    let _one_mesh = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let standalone = Server::start(dir.path(), &[]);
    let mesh = Mesh::start(1, "METRICSINTEROP", LEASE_MS).await;
    let cluster = mesh.s(0);

    let (text, open) = both(&standalone).await;
    assert_eq!(heads(&text), heads(&open));
    let on_standalone = names(&open);
    let (text, open) = both(cluster).await;
    assert_eq!(heads(&text), heads(&open));
    let on_cluster = names(&open);
    assert_eq!(build_info(&text), build_labels("cluster", "jetstream"));
    assert_eq!(build_info(&open), build_labels("cluster", "jetstream"));

    for f in OWNERSHIP {
        assert!(on_cluster.contains(f), "{f} not on the cluster node");
        assert!(!on_standalone.contains(f), "{f} on the standalone node");
    }
    for f in GROUP_COMMITS {
        assert!(on_standalone.contains(f), "{f} not on the standalone node");
        assert!(
            !on_cluster.contains(f),
            "{f} on a node without the standalone log"
        );
    }
    let mut others = on_standalone.clone();
    others.retain(|f| !GROUP_COMMITS.contains(&f.as_str()));
    let mut cluster_others = on_cluster.clone();
    cluster_others.retain(|f| !OWNERSHIP.contains(&f.as_str()));
    assert_eq!(others, cluster_others);
    // A cluster node's ownership gauge, from boot.
    assert_eq!(family(&open, "eventmesh_owned_partitions").samples.len(), 1);

    // Every metric the dashboard queries is declared at boot: on a
    // standalone node, the ownership's on a cluster node.
    let standalone_families = parse("text", &scrape(&standalone, None).await.2).await;
    let cluster_families = open;
    let queried = dashboard_metrics();
    let mut cluster_only = BTreeSet::new();
    for metric in &queried {
        if standalone_families.iter().any(|f| f.owns(metric)) {
            continue;
        }
        assert!(
            cluster_families
                .iter()
                .any(|f| f.owns(metric) && OWNERSHIP.contains(&f.name.as_str())),
            "the dashboard queries {metric}, declared on neither node"
        );
        cluster_only.insert(metric.as_str());
    }
    assert_eq!(
        cluster_only,
        BTreeSet::from([
            "eventmesh_fenced_writes_total",
            "eventmesh_handover_seconds_bucket",
            "eventmesh_owned_partitions",
            "eventmesh_rebalances_total",
        ])
    );
    assert!(queried.len() >= 27, "{queried:?}");
}
