//! MQTT 5 subscription options: No Local keeps a connection's own
//! messages from coming back to it through that subscription.

use super::*;
use common::topics::admin;

#[tokio::test]
async fn no_local_keeps_a_connections_own_messages_from_it() {
    let data = tempfile::tempdir().unwrap();
    let s = mqtt_server(data.path(), &[]);
    let port = s.mqtt_port().to_string();
    // One partition: what the subscriber gets comes in publish order.
    for topic in ["nl.a", "own.a"] {
        let (status, v) = admin(
            &client(),
            &s,
            reqwest::Method::POST,
            "/admin/topics",
            Some(json!({"name": topic, "partitions": 1})),
        )
        .await;
        assert_eq!(status, 201, "{v}");
    }
    // With No Local: its own "mine" never comes, another client's "end"
    // (published after it) does. Without: both come.
    for (filter, no_local, want) in [
        ("nl/a", true, vec!["end"]),
        ("own/a", false, vec!["mine", "end"]),
    ] {
        let mut args = vec!["--client-id", "self", "--publish-first", "mine"];
        if no_local {
            args.push("--no-local");
        }
        args.extend(["--until-payload", "end"]);
        let mut sub = listener(&port, &[filter], "1", "99", &args);
        sub.step("subscribed");
        let p = port.clone();
        let f = filter.to_string();
        let acked = tokio::task::spawn_blocking(move || published(&p, &f, "1", "end", &[]))
            .await
            .unwrap();
        assert_eq!(acked, 0);
        let mut got = Vec::new();
        loop {
            let m = message(&sub.step("message"));
            got.push(m.1.clone());
            if m.1 == "end" {
                break;
            }
        }
        assert_eq!(got, want, "{filter}");
        assert!(sub.succeeded());
    }
}
