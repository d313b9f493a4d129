//! Request-reply between the mesh and MQTT 5: an HTTP request answered by
//! a device on the response topic it was given, and replies that answer
//! nothing refused with their reason.

use super::*;

#[tokio::test]
async fn an_mqtt_device_answers_a_mesh_request_on_its_response_topic() {
    let data = tempfile::tempdir().unwrap();
    let s = mqtt_server(data.path(), &[]);
    let port = s.mqtt_port().to_string();
    let mut responder = paho(&[
        "respond",
        "--port",
        &port,
        "--topic",
        "svc/+",
        "--count",
        "1",
        "--client-id",
        "svc-1",
        "--payload",
        "{\"answer\": 42}",
    ]);
    responder.step("subscribed");
    let request = json!({
        "specversion": "1.0", "id": "q-1", "source": "/http", "type": "ask",
        "correlationid": "corr-7", "datacontenttype": "text/plain", "data": "ping"
    });
    let r = client()
        .post(s.url("/events/request?topic=svc.echo&timeoutMs=20000"))
        .header("content-type", "application/cloudevents+json")
        .body(request.to_string())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let reply: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        (
            &reply["type"],
            &reply["source"],
            &reply["correlationid"],
            &reply["data"]
        ),
        (
            &json!("eventmesh.mqtt.message"),
            &json!("/mqtt/svc-1"),
            &json!("corr-7"),
            &json!({"answer": 42})
        )
    );
    let replied = responder.step("replied");
    assert_eq!(
        (
            &replied["reason"],
            &replied["responseTopic"],
            &replied["correlation"]
        ),
        (&json!(0), &json!("$mesh/reply"), &json!("corr-7"))
    );
    assert!(responder.succeeded());

    // A reply to no waiting request, and one without correlation data:
    // refused with 0x83 and the reason, the connection kept.
    let p2 = port.clone();
    let refused = tokio::task::spawn_blocking(move || {
        [
            published(
                &p2,
                "$mesh/reply",
                "1",
                "late",
                &["--props", r#"{"CorrelationData": "nobody"}"#],
            ),
            published(&p2, "$mesh/reply", "1", "anonymous", &[]),
        ]
    })
    .await
    .unwrap();
    assert_eq!(refused, [0x83, 0x83]);

    // The listener's counters, exact: three connections, three QoS 1
    // publishes in (all answered), the request out at QoS 1, two
    // refusals.
    let m = metrics(&client(), &s).await;
    let series = [
        r#"eventmesh_mqtt_packets_total{direction="in",type="connect"}"#,
        r#"eventmesh_mqtt_packets_total{direction="in",type="publish"}"#,
        r#"eventmesh_mqtt_messages_total{direction="in",qos="1"}"#,
        r#"eventmesh_mqtt_packets_total{direction="out",type="connack"}"#,
        r#"eventmesh_mqtt_packets_total{direction="out",type="puback"}"#,
        r#"eventmesh_mqtt_messages_total{direction="out",qos="1"}"#,
        r#"eventmesh_mqtt_messages_total{direction="out",qos="0"}"#,
        r#"eventmesh_mqtt_refusals_total{packet="puback",reason="0x83"}"#,
    ];
    assert_eq!(
        series.map(|s| m.get(s)),
        [3.0, 3.0, 3.0, 3.0, 3.0, 1.0, 0.0, 2.0]
    );
}
