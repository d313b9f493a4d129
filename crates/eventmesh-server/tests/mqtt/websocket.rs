//! MQTT over WebSocket (`/mqtt` on the traffic port): paho's WebSocket
//! transport meets clients of the MQTT listener on the same topics.

use super::*;

#[tokio::test]
async fn mqtt_over_websocket_meets_the_mqtt_listener() {
    let data = tempfile::tempdir().unwrap();
    let s = mqtt_server(data.path(), &[]);
    let (port, http) = (s.mqtt_port().to_string(), port_of(&s.url("")).to_string());
    let mut over_ws = listener(&http, &["ws/#"], "1", "2", &["--ws"]);
    over_ws.step("subscribed");
    let (p, h) = (port.clone(), http.clone());
    let acks = tokio::task::spawn_blocking(move || {
        [
            published(&h, "ws/a", "1", "from-ws", &["--ws", "--version", "4"]),
            published(&p, "ws/b", "2", "from-tcp", &[]),
        ]
    })
    .await
    .unwrap();
    assert_eq!(acks, [0, 0]);
    let mut got = vec![
        message(&over_ws.step("message")),
        message(&over_ws.step("message")),
    ];
    got.sort();
    assert_eq!(
        got,
        [
            msg("ws/a", "from-ws", false),
            msg("ws/b", "from-tcp", false)
        ]
    );
    assert!(over_ws.succeeded());

    // Without the MQTT listener there is no /mqtt.
    let off = tempfile::tempdir().unwrap();
    let plain = Server::start(off.path(), &[]);
    let r = client().get(plain.url("/mqtt")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (v["error"].as_str(), v["message"].as_str()),
        (
            Some("not_found"),
            Some("MQTT is off on this server (eventmesh.server.mqtt.port)")
        )
    );
}
