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

/// The message steps two subscribers print, read from both as they come
/// until `n` arrived (30 s at most): their payloads, per subscriber.
fn shared_out(a: &mut Proc, b: &mut Proc, n: usize) -> [Vec<String>; 2] {
    let mut got = [Vec::new(), Vec::new()];
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while got[0].len() + got[1].len() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "only {got:?} of {n} messages came"
        );
        for (i, p) in [&mut *a, &mut *b].into_iter().enumerate() {
            if let Ok(line) = p.lines.recv_timeout(Duration::from_millis(50)) {
                let v: Value = serde_json::from_str(&line).unwrap();
                if v["step"] == "message" {
                    got[i].push(message(&v).1);
                }
            }
        }
    }
    got
}

#[tokio::test]
async fn a_shared_subscription_balances_its_messages_over_its_members() {
    let data = tempfile::tempdir().unwrap();
    let s = mqtt_server(data.path(), &[]);
    let port = s.mqtt_port().to_string();
    let filter = "$share/workers/jobs/#";
    let mut a = listener(&port, &[filter], "1", "99", &["--client-id", "w-a"]);
    let mut b = listener(&port, &[filter], "1", "99", &["--client-id", "w-b"]);
    // A subscriber of its own gets every message as well.
    let mut all = listener(&port, &["jobs/#"], "1", "20", &[]);
    for p in [&mut a, &mut b, &mut all] {
        assert_eq!(p.step("subscribed")["granted"], json!([1]));
    }
    let p = port.clone();
    let acked = tokio::task::spawn_blocking(move || {
        published(&p, "jobs/x", "1", "job-", &["--repeat", "20", "--numbered"])
    })
    .await
    .unwrap();
    assert_eq!(acked, 0);
    let [from_a, from_b] = shared_out(&mut a, &mut b, 20);
    let mut jobs: Vec<String> = from_a.iter().chain(&from_b).cloned().collect();
    jobs.sort();
    let mut want: Vec<String> = (0..20).map(|i| format!("job-{i}")).collect();
    want.sort();
    assert_eq!(
        jobs, want,
        "each job once over the share (a: {from_a:?}, b: {from_b:?})"
    );
    let mut everything: Vec<String> = (0..20).map(|_| message(&all.step("message")).1).collect();
    everything.sort();
    assert_eq!(everything, want);
    assert!(all.succeeded());

    // A malformed share is refused; No Local on a share ends the
    // connection (a protocol error).
    let steps = listened(&port, &["$share/w x/jobs"], "1", "0", &[]);
    assert_eq!(step(&steps, "subscribed")["granted"], json!([0x8F]));
    let mut p = listener(&port, &[filter], "1", "0", &["--no-local"]);
    assert!(!p.succeeded());
    let why = p.stderr();
    assert!(
        why.contains("disconnected with reason 130 instead of a SUBACK"),
        "{why}"
    );
}
