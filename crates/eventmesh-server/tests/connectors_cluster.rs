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

use common::connectors::{create, drain, get, reader, wait_status};
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
    const BIG: usize = 20_000;
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
    for k in 0..4 {
        let name = format!("connector=s{k}");
        let starts: usize = (0..2)
            .map(|i| {
                mesh.s(i)
                    .log_text()
                    .lines()
                    .filter(|l| l.contains("connector starting here") && l.contains(&name))
                    .count()
            })
            .sum();
        assert_eq!(starts, 1, "s{k} started {starts} times");
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
        per_instance.sort_by(f64::total_cmp);
        assert_eq!(per_instance, [0.0, SMALL as f64], "s{k}");
    }

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
    let size = std::fs::metadata(&path).unwrap().len();
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
    let s = mesh.s(survivor);
    reader(&c, s, "r", "big").await;
    let got = drain(&c, s, "r", BIG, Duration::from_secs(180)).await;
    assert_eq!(got.len(), BIG);
    let (_, after) = get(&c, s, "big").await;
    assert_eq!(after["status"]["state"], "running");
}
