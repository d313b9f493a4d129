//! What `/metrics` declares and how each format renders it.

use eventmesh_core::config::StorageType;

use super::{Format, Metrics, Profile};

/// The sample lines of an exposition, in order.
fn samples(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.starts_with('#')).collect()
}

/// `(family, type)` of each `# TYPE` line.
fn types(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (name, kind) = l.split_once(' ').unwrap();
            (name.to_string(), kind.to_string())
        })
        .collect()
}

fn cluster() -> Profile {
    Profile {
        cluster: true,
        storage: StorageType::Jetstream,
        version: "9.8.7".to_string(),
        commit: Some("abc123".to_string()),
    }
}

#[test]
fn renders_the_documented_names() {
    let m = Metrics::new();
    m.events_published.inc_by(3);
    m.publish_latency.observe(0.001);
    m.log_commit_seconds.observe(0.0002);
    m.set_storage_memory("block_cache", 4096);
    m.connection_refused("traffic", "limit");
    m.connections_open("admin").inc();
    m.set_connections_limit("per_address", 44);
    m.max_fds.set(256);
    for format in [Format::Text, Format::OpenMetrics] {
        let text = m.render(format);
        for name in [
            "eventmesh_events_published_total 3",
            "eventmesh_events_dispatched_total 0",
            "eventmesh_acks_total 0",
            "eventmesh_pending_deliveries 0",
            "eventmesh_publish_latency_seconds_bucket",
            "eventmesh_log_commit_seconds_count 1",
            "eventmesh_log_commit_appends_bucket",
            "eventmesh_storage_memory_bytes{kind=\"block_cache\"} 4096",
            "eventmesh_connections_refused_total{listener=\"traffic\",reason=\"limit\"} 1",
            "eventmesh_connections_open{listener=\"admin\"} 1",
            "eventmesh_connections_limit{scope=\"per_address\"} 44",
            "process_max_fds 256",
        ] {
            assert!(text.contains(name), "{format:?}: missing {name} in\n{text}");
        }
    }
}

#[test]
fn both_formats_hold_the_same_samples_and_differ_in_counter_families() {
    let m = Metrics::new();
    m.events_published.inc_by(5);
    m.gate_denied
        .get_or_create(&vec![("reason".to_string(), "no_rule".to_string())])
        .inc();
    m.end_to_end_latency.observe(0.01);
    let (text, open) = (m.render(Format::Text), m.render(Format::OpenMetrics));
    assert_eq!(samples(&text), samples(&open));
    assert!(open.ends_with("# EOF\n"), "{open}");
    assert!(
        !text.contains("# EOF") && !text.contains("# UNIT"),
        "{text}"
    );
    let (text_types, open_types) = (types(&text), types(&open));
    assert_eq!(text_types.len(), open_types.len());
    for ((t_name, t_kind), (o_name, o_kind)) in text_types.iter().zip(&open_types) {
        assert_eq!(t_kind, o_kind);
        if o_kind == "counter" {
            assert_eq!(t_name, &format!("{o_name}_total"));
        } else {
            assert_eq!(t_name, o_name);
        }
    }
    assert!(text.contains(
        "# TYPE eventmesh_events_published_total counter\neventmesh_events_published_total 5\n"
    ));
    assert!(open.contains(
        "# TYPE eventmesh_events_published counter\neventmesh_events_published_total 5\n"
    ));
}

#[test]
fn every_family_is_declared_before_its_first_series() {
    let open = Metrics::new().render(Format::OpenMetrics);
    let declared: Vec<String> = types(&open).into_iter().map(|(n, _)| n).collect();
    for family in [
        "eventmesh_gate_denied",
        "eventmesh_auth_failures",
        "eventmesh_consumer_lag",
        "eventmesh_retention_skipped",
        "eventmesh_connector_events",
        "eventmesh_connector_errors",
        "eventmesh_storage_disk_bytes",
        "eventmesh_link_up",
        "eventmesh_mqtt_packets",
    ] {
        assert!(declared.iter().any(|d| d == family), "{family}:\n{open}");
    }
    // HELP and TYPE, no sample.
    assert!(open.contains(
        "# HELP eventmesh_consumer_lag Events a consumer of a subscribed topic has not \
         committed yet, by topic and consumer (as of the scrape).\n\
         # TYPE eventmesh_consumer_lag gauge\n# HELP "
    ));
    let text = Metrics::new().render(Format::Text);
    assert!(text.contains("# TYPE eventmesh_gate_denied_total counter\n# HELP "));
}

#[test]
fn the_ownership_families_only_in_cluster_mode_the_group_commits_only_on_the_standalone_log() {
    const OWNERSHIP: [&str; 4] = [
        "eventmesh_owned_partitions",
        "eventmesh_rebalances",
        "eventmesh_handover_seconds",
        "eventmesh_fenced_writes",
    ];
    const GROUP_COMMITS: [&str; 2] = [
        "eventmesh_log_commit_seconds",
        "eventmesh_log_commit_appends",
    ];
    let names = |m: Metrics| -> Vec<String> {
        types(&m.render(Format::OpenMetrics))
            .into_iter()
            .map(|(n, _)| n)
            .collect()
    };
    let standalone = names(Metrics::new());
    let clustered = names(Metrics::for_instance(&cluster()));
    for family in OWNERSHIP {
        assert!(!standalone.iter().any(|n| n == family), "{family}");
        assert!(clustered.iter().any(|n| n == family), "{family}");
    }
    for family in GROUP_COMMITS {
        assert!(standalone.iter().any(|n| n == family), "{family}");
        assert!(!clustered.iter().any(|n| n == family), "{family}");
    }
    // Everything else in both.
    let rest = |v: &[String]| -> Vec<String> {
        v.iter()
            .filter(|n| !OWNERSHIP.contains(&n.as_str()) && !GROUP_COMMITS.contains(&n.as_str()))
            .cloned()
            .collect()
    };
    assert_eq!(rest(&standalone), rest(&clustered));
}

#[test]
fn build_info_names_the_build_and_the_mode() {
    let text = Metrics::for_instance(&cluster()).render(Format::Text);
    assert!(text.contains(
        "# TYPE eventmesh_build_info gauge\n\
         eventmesh_build_info{version=\"9.8.7\",commit=\"abc123\",mode=\"cluster\",storage=\"jetstream\"} 1\n"
    ));
    let text = Metrics::new().render(Format::Text);
    let want = format!(
        "eventmesh_build_info{{version=\"{}\",mode=\"standalone\",storage=\"standalone\"}} 1\n",
        env!("CARGO_PKG_VERSION")
    );
    assert!(text.contains(&want), "{text}");
}

#[test]
fn help_texts_are_plain() {
    let open = Metrics::for_instance(&cluster()).render(Format::OpenMetrics)
        + &Metrics::new().render(Format::OpenMetrics);
    for line in open.lines().filter(|l| l.starts_with("# HELP ")) {
        assert!(!line.contains(['\\', '"']), "{line}");
    }
}
