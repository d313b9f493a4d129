//! Connectors across instances: two `eventmesh` instances on one etcd and
//! one JetStream log (three NATS servers) with partition ownership and
//! positions in the meta store. Each connector runs on exactly one
//! instance, both instances report the same owner, and when the owner is
//! killed -9 mid-stream the other takes the connector over after the lease
//! and resumes from the last committed position: every line reaches the
//! log exactly once.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::time::Duration;

use common::connectors::{create, get, ids_in, wait_status};
use common::mesh::{Mesh, LEASE_MS, SERIAL};
use common::*;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

fn write_lines(path: &std::path::Path, n: usize) {
    let mut f = std::fs::File::create(path).unwrap();
    for k in 0..n {
        writeln!(f, "{}", json!({"n": k})).unwrap();
    }
    f.sync_all().unwrap();
}

/// The runs of connector `name` on every instance, from the instances'
/// logs, by start time: (started, stopped if it did, instance).
fn runs_of(logs: &[String], name: &str) -> Vec<(String, Option<String>, usize)> {
    let field = format!("connector={name} ");
    let mut runs = Vec::new();
    for (i, log) in logs.iter().enumerate() {
        let mut open: Option<String> = None;
        for line in log.lines().filter(|l| l.contains(&field)) {
            // Lines start with the RFC 3339 UTC time, all of one width.
            let at = line
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
            if line.contains("connector starting here") {
                assert!(open.is_none(), "i-{i} started {name} twice: {line}");
                open = Some(at);
            } else if line.contains("connector stopped here") {
                let started = open
                    .take()
                    .unwrap_or_else(|| panic!("i-{i} stopped {name} unstarted"));
                runs.push((started, Some(at), i));
            }
        }
        if let Some(started) = open {
            runs.push((started, None, i));
        }
    }
    runs.sort();
    runs
}

/// The instance each connector runs on, as `s` reports it.
async fn owners(c: &reqwest::Client, s: &Server) -> BTreeMap<String, String> {
    let list: Vec<Value> = admin_json(c, s, "/admin/connectors").await;
    list.iter()
        .filter_map(|v| {
            Some((
                v["name"].as_str()?.to_string(),
                v["status"]["instance"].as_str()?.to_string(),
            ))
        })
        .collect()
}

#[tokio::test]
async fn each_connector_runs_once_and_moves_when_its_instance_dies() {
    let _one_mesh_at_a_time = SERIAL.lock().await;
    let mut mesh = Mesh::start_with(
        2,
        "CONN",
        LEASE_MS,
        &["eventmesh.connector.offset.store=meta"],
    )
    .await;
    let c = client();
    let dir = tempfile::tempdir().unwrap();
    const SMALL: usize = 50;
    const BIG: usize = 50_000;
    // Four small sources and one big one.
    for k in 0..4 {
        let path = dir.path().join(format!("s{k}.jsonl"));
        write_lines(&path, SMALL);
        let (code, v) = create(
            &c,
            mesh.s(0),
            json!({"name": format!("s{k}"), "kind": "file-source",
                "config": {"path": path.display().to_string()}, "topic": format!("t{k}")}),
        )
        .await;
        assert_eq!(code, 201, "{v}");
    }
    for k in 0..4 {
        let name = format!("s{k}");
        let v = wait_status(&c, mesh.s(1), &name, WAIT, |v| {
            v["status"]["events"] == SMALL as u64
        })
        .await;
        assert_eq!(v["status"]["events"], SMALL as u64, "{v}");
    }
    // Both instances agree on the owners, and each connector started on
    // one instance only.
    let seen0 = owners(&c, mesh.s(0)).await;
    let seen1 = owners(&c, mesh.s(1)).await;
    assert_eq!(seen0, seen1);
    assert_eq!(seen0.len(), 4);
    // Never two copies at once: each instance's runs of each connector
    // (from its log), put together in time, do not overlap.
    let logs: Vec<String> = (0..2).map(|i| mesh.s(i).log_text()).collect();
    for k in 0..4 {
        let runs = runs_of(&logs, &format!("s{k}"));
        assert!(!runs.is_empty(), "s{k} never started");
        for pair in runs.windows(2) {
            let (first, next) = (&pair[0], &pair[1]);
            let ended = first
                .1
                .as_ref()
                .unwrap_or_else(|| panic!("s{k}: {first:?} still runs while {next:?} started"));
            assert!(ended <= &next.0, "s{k}: {first:?} overlaps {next:?}");
        }
    }
    for k in 0..4 {
        let mut per_instance = Vec::new();
        for i in 0..2 {
            let series =
                format!("eventmesh_connector_events_total{{connector=\"s{k}\",direction=\"in\"}} ");
            let text = admin_text(&c, mesh.s(i), "/metrics").await;
            let value = text
                .lines()
                .find_map(|l| l.strip_prefix(series.as_str()))
                .map(|v| v.trim().parse::<f64>().unwrap())
                .unwrap_or(0.0);
            per_instance.push(value);
        }
        // Each line published at least once (a copy that handed over when
        // the second instance joined may have published some again; they
        // were dropped as duplicates).
        let total: f64 = per_instance.iter().sum();
        assert!(total >= SMALL as f64, "s{k}: {per_instance:?}");
    }

    // Each instance's readiness, as one instance asks them all.
    let health: Vec<Value> = admin_json(&c, mesh.s(0), "/admin/cluster/health").await;
    let statuses: BTreeMap<String, String> = health
        .iter()
        .map(|h| {
            (
                h["id"].as_str().unwrap().to_string(),
                h["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        BTreeMap::from([
            ("i-0".to_string(), "READY".to_string()),
            ("i-1".to_string(), "READY".to_string())
        ]),
        "{health:?}"
    );

    // The big one: its instance is killed mid-stream.
    let path = dir.path().join("big.jsonl");
    write_lines(&path, BIG);
    let (code, v) = create(
        &c,
        mesh.s(0),
        json!({"name": "big", "kind": "file-source",
            "config": {"path": path.display().to_string(), "batch": 50}, "topic": "big"}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    // Killed once some, not all, lines are in the log.
    let v = wait_status(&c, mesh.s(0), "big", WAIT, |v| {
        v["status"]["events"].as_u64() >= Some(500)
    })
    .await;
    let victim: usize = v["status"]["instance"].as_str().unwrap()[2..]
        .parse()
        .unwrap();
    let survivor = 1 - victim;
    mesh.servers[victim].as_mut().unwrap().kill9();
    mesh.servers[victim] = None;
    // While its lease lasts the dead instance is still listed, and cannot
    // be asked.
    let health: Vec<Value> = admin_json(&c, mesh.s(survivor), "/admin/cluster/health").await;
    for h in &health {
        if h["id"] == format!("i-{victim}") {
            assert_eq!(h["status"], "UNREACHABLE", "{health:?}");
        } else {
            // Ready, or settling the partitions it takes over.
            let s = h["status"].as_str().unwrap();
            assert!(s == "READY" || s == "NOT_READY", "{health:?}");
        }
    }
    let size = std::fs::metadata(&path).unwrap().len();
    // What the dead copy last reported (its record lives until its lease
    // ends): it was not through the file.
    let (_, last) = get(&c, mesh.s(survivor), "big").await;
    assert_eq!(last["status"]["instance"], format!("i-{victim}"), "{last}");
    assert!(
        last["status"]["position"]["offset"].as_u64() < Some(size),
        "all lines were in before the kill: {last}"
    );
    let v = wait_status(&c, mesh.s(survivor), "big", Duration::from_secs(180), |v| {
        v["status"]["instance"] == format!("i-{survivor}")
            && v["status"]["position"]["offset"] == size
    })
    .await;
    assert_eq!(v["status"]["instance"], format!("i-{survivor}"), "{v}");
    assert_eq!(v["status"]["position"]["offset"], size, "{v}");
    // The survivor also owns the small ones now, and nothing ran twice.
    let seen = owners(&c, mesh.s(survivor)).await;
    assert_eq!(
        seen.values().collect::<BTreeSet<_>>(),
        BTreeSet::from([&format!("i-{survivor}")]),
        "{seen:?}"
    );
    // Every line is in the log once: those read again after the takeover
    // were dropped as duplicates. A file sink reading the topic writes
    // each stored event (at least) once: exactly BIG lines, all distinct.
    let s = mesh.s(survivor);
    let out = dir.path().join("big-out.jsonl");
    let (code, v) = create(
        &c,
        s,
        json!({"name": "dump", "kind": "file-sink", "topic": "big",
            "config": {"path": out.display().to_string(), "format": "event"}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let v = wait_status(&c, s, "dump", Duration::from_secs(180), |v| {
        v["status"]["events"].as_u64() >= Some(BIG as u64) && v["status"]["lag"] == 0
    })
    .await;
    assert_eq!(v["status"]["lag"], 0, "{v}");
    let (ids, lines) = ids_in(&out);
    assert_eq!(ids.len(), BIG, "every line reached the log");
    assert_eq!(lines, BIG, "no line is in the log twice");
    let (_, after) = get(&c, s, "big").await;
    assert_eq!(after["status"]["state"], "running");
}
