//! The gate's connection quota counts MQTT connections: a tenant at its
//! limit is refused at CONNECT with 0x97, and gets its slot back when a
//! connection ends.

use super::*;

#[test]
fn mqtt_connections_count_against_the_tenants_connection_quota() {
    let files = GateFiles::new("tok-dev acme dev\n");
    let acl = files.acl("allow dev SUBSCRIBE *\nallow dev ACK *\n");
    let s = start_closed(
        &files,
        &[
            "eventmesh.server.mqtt.port=0".to_string(),
            "eventmesh.security.gate.quota.connections.max=1".to_string(),
            acl,
        ],
    );
    let port = s.mqtt_port().to_string();
    let dev = ["--password", "tok-dev"];
    // One connection held open (a subscriber waiting for a message).
    let mut held = listener(&port, &["q/x"], "1", "1", &dev);
    held.step("subscribed");
    let steps = paho_run(&["connect", "--port", &port, "--password", "tok-dev"]);
    assert_eq!(step(&steps, "connack")["reason"], 0x97);
    drop(held);
    // Its slot comes back once the server has seen it go.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let steps = paho_run(&["connect", "--port", &port, "--password", "tok-dev"]);
        let reason = step(&steps, "connack")["reason"].clone();
        if reason == 0 {
            break;
        }
        assert_eq!(reason, 0x97);
        assert!(
            std::time::Instant::now() < deadline,
            "the slot never came back"
        );
    }
}
