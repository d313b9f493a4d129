//! MQTT on three instances in `PARTITION_OWNED_PULL` (etcd, a JetStream
//! cluster): a device publishing on one instance reaches a device
//! subscribed on another, and a persistent session resumes on a third
//! instance after the one holding it is killed.

use std::time::Duration;

use super::*;
use common::mesh::{Mesh, LEASE_MS, SERIAL};

/// Payloads of the message steps a subscriber printed, sorted.
fn payloads(p: &mut Proc, n: usize) -> Vec<String> {
    let mut got: Vec<String> = (0..n).map(|_| message(&p.step("message")).1).collect();
    got.sort();
    got
}

#[tokio::test(flavor = "multi_thread")]
async fn devices_meet_across_instances_and_a_session_moves_when_its_instance_dies() {
    let _one = SERIAL.lock().await;
    let mut mesh =
        Mesh::start_with(3, "MQTTMESH", LEASE_MS, &["eventmesh.server.mqtt.port=0"]).await;
    let ports: Vec<String> = (0..3).map(|k| mesh.s(k).mqtt_port().to_string()).collect();
    let roamer = ["--client-id", "roamer", "--persistent"];
    // Subscribed on i-1, published on i-0.
    let mut sub = listener(&ports[1], &["dev/#"], "1", "3", &roamer);
    sub.step("subscribed");
    for i in 0..3 {
        assert_eq!(published(&ports[0], "dev/x", "1", &format!("m{i}"), &[]), 0);
    }
    assert_eq!(payloads(&mut sub, 3), ["m0", "m1", "m2"]);
    assert!(sub.succeeded());
    // The session is held on i-1 again; i-1 dies with it.
    let mut held = paho(&[
        "resume",
        "--port",
        &ports[1],
        "--client-id",
        "roamer",
        "--persistent",
        "--count",
        "99",
    ]);
    assert_eq!(held.step("subscribed")["sessionPresent"], true);
    mesh.servers[1].as_mut().unwrap().kill9();
    mesh.servers[1] = None;
    drop(held);
    for i in 0..2 {
        assert_eq!(
            published(&ports[0], "dev/x", "1", &format!("after{i}"), &[]),
            0
        );
    }
    // Resumed on i-2: the session is there, and so is what came meanwhile
    // (once the partitions i-1 owned have new owners: its lease, 3 s, and
    // the handover).
    let mut moved = paho(&[
        "resume",
        "--port",
        &ports[2],
        "--client-id",
        "roamer",
        "--persistent",
        "--timeout",
        "60",
        "--count",
        "2",
    ])
    .waiting(Duration::from_secs(60));
    assert_eq!(moved.step("subscribed")["sessionPresent"], true);
    let resumed = std::time::Instant::now();
    assert_eq!(payloads(&mut moved, 2), ["after0", "after1"]);
    eprintln!(
        "the moved session's messages came {:?} after it resumed",
        resumed.elapsed()
    );
    assert!(moved.succeeded());
}
