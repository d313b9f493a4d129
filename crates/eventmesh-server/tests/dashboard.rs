//! The dashboard in a real browser: headless Chromium driven with Selenium
//! (`tests/dashboard/drive.py`) against a real `eventmesh`. A wrong token
//! is refused with a clear message; signed in, the publish rate moves
//! while events are published, a topic shows its lag, a consumer group is
//! replayed after a confirmation that says how many events come again, a
//! dead letter is replayed and delivered again, a link to another cluster
//! shows up with the remote's name, and every page opens
//! (each screenshotted: into `EVENTMESH_SCREENSHOTS` when set, which is
//! how `docs/images/` is made, else a temporary directory).

mod common;

use std::process::Command;
use std::time::Duration;

use common::connectors::create;
use common::*;
use serde_json::{json, Value};

fn python() -> String {
    std::env::var("EVENTMESH_BROWSER_PYTHON").unwrap_or_else(|_| {
        panic!("EVENTMESH_BROWSER_PYTHON is not set: run the tests through scripts/test.sh (scripts/browser.sh installs Selenium)")
    })
}

#[tokio::test]
async fn an_operator_signs_in_watches_and_replays_a_dead_letter() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.delivery.max.attempts=1"]);
    let c = client();
    // A link to another cluster, `b`: up by the time the browser looks.
    let dir_b = tempfile::tempdir().unwrap();
    let b = Server::start(dir_b.path(), &["eventmesh.cluster.name=b"]);
    let (code, v) = common::topics::admin(
        &c,
        &s,
        reqwest::Method::POST,
        "/admin/links",
        Some(json!({"name": "to-b", "remote": {"url": b.traffic},
            "exports": [{"topic": "linked"}], "targetGuard": false})),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    // A topic with a lag of 5: a consumer that never polls.
    subscribe(
        &c,
        &s,
        json!({"clientId": "slow", "topic": "orders", "group": "g"}),
    )
    .await;
    for n in 0..5 {
        publish(&c, &s, "orders", &event(&format!("o{n}"))).await;
    }
    // A subscription with filters, shown on the subscriptions page.
    subscribe(
        &c,
        &s,
        json!({"clientId": "picky", "topic": "routed", "group": "picky",
               "filters": [{"exact": {"type": "order.created"}}, {"sql": "amount > 100"}]}),
    )
    .await;
    // A pattern subscription and the topics it follows.
    for t in ["orders.eu", "orders.us"] {
        publish(&c, &s, t, &event(&format!("{t}-1"))).await;
    }
    subscribe(
        &c,
        &s,
        json!({"clientId": "wide", "topic": "orders.*", "group": "wide"}),
    )
    .await;
    // A dead letter: one attempt allowed, given back.
    let got = one_delivery(&c, &s, "w1", "pay", "billing", "p1").await;
    assert_eq!(nack(&c, &s, got["deliveryId"].as_str().unwrap()).await, 200);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let dlq: Vec<Value> = loop {
        let dlq: Vec<Value> = admin_json(&c, &s, "/admin/dlq/browse?topic=pay").await;
        if dlq.len() == 1 {
            break dlq;
        }
        assert!(std::time::Instant::now() < deadline, "no dead letter");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let dlq_id = dlq[0]["id"].as_str().unwrap().to_string();
    // A group that has read everything of its topic, to be replayed.
    subscribe(
        &c,
        &s,
        json!({"clientId": "r1", "topic": "replayed", "group": "r"}),
    )
    .await;
    for n in 0..3 {
        publish(&c, &s, "replayed", &event(&format!("r{n}"))).await;
    }
    for d in poll_n(&c, &s, "r1", 3, Duration::from_secs(10)).await {
        assert_eq!(ack(&c, &s, d["deliveryId"].as_str().unwrap()).await, 200);
    }
    assert!(caught_up(&c, &s, "replayed", Duration::from_secs(10)).await);
    // A connector.
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "hook", "kind": "http-source", "topic": "in"}),
    )
    .await;
    assert_eq!(code, 201, "{v}");

    let shots = std::env::var("EVENTMESH_SCREENSHOTS").ok();
    let tmp = tempfile::tempdir().unwrap();
    let shots_dir = shots
        .clone()
        .unwrap_or_else(|| tmp.path().display().to_string());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/dashboard/drive.py");
    let admin = s.admin_url("");
    let traffic = s.url("");
    let mut cmd = Command::new(python());
    cmd.args([script, &admin, &traffic, TOKEN, &shots_dir, &dlq_id]);
    let (status, out, err) = output_within(&mut cmd, Duration::from_secs(240));
    assert!(status.success(), "the browser run failed:\n{err}\n{out}");
    let seen: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));

    assert_eq!(
        seen["wrong_token_error"],
        "The admin token was not accepted."
    );
    assert!(seen["publish_rate"].as_f64() > Some(0.0), "{seen}");
    assert!(seen["published_live"].as_u64() > Some(0), "{seen}");
    assert_eq!(seen["orders_lag"], 5);
    assert_eq!(seen["dlq_event_shown"], "p1");
    assert_eq!(seen["replay_outcome"], "Replayed 1 dead letter.");
    assert_eq!(seen["connector_state"], "running");
    assert_eq!(
        (&seen["link_state"], &seen["link_remote"]),
        (&json!("UP"), &json!("b"))
    );
    assert_eq!(
        seen["picky_filters"],
        "{\"exact\":{\"type\":\"order.created\"}}\n{\"sql\":\"amount > 100\"}"
    );
    assert_eq!(seen["token_shown_as"], "eventmesh.admin.token ******");
    assert_eq!(seen["wide_topics"], "orders.eu\norders.us");
    assert_eq!(
        seen["replay_confirm"],
        "Reset group \"r\" on \"replayed\" to the oldest event it holds? 3 events will come again."
    );
    assert_eq!(
        seen["replay_notice"],
        "Group \"r\" reset: 3 events come again."
    );
    let replayed = poll_n(&c, &s, "r1", 3, Duration::from_secs(10)).await;
    assert_eq!(polled_ids(&replayed), ["r0", "r1", "r2"]);
    // The replayed dead letter is delivered again, and gone from the store.
    let again = poll_n(&c, &s, "w1", 1, Duration::from_secs(10)).await;
    assert_eq!(again[0]["event"]["id"], "p1");
    let left: Vec<Value> = admin_json(&c, &s, "/admin/dlq/browse?topic=pay").await;
    assert_eq!(left, Vec::<Value>::new());
    // What the lag column showed is also a Prometheus series.
    let lag = "eventmesh_consumer_lag{topic=\"orders\",consumer=\"g\"}";
    assert_eq!(metric(&c, &s, lag).await, 5.0);
    for page in [
        "signin-error",
        "overview",
        "topics",
        "topic",
        "replay-confirm",
        "deadletters",
        "subscriptions",
        "connectors",
        "links",
        "cluster",
        "tasks",
        "config",
    ] {
        let path = format!("{shots_dir}/dashboard-{page}.png");
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        assert!(len > 10_000, "{path}: {len} bytes");
    }
}

/// The pages are served from the binary, with their content types and a
/// policy that lets the page run only its own script.
#[tokio::test]
async fn the_assets_are_served_from_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = c.get(s.admin_url("/ui")).send().await.unwrap();
    assert_eq!(r.status(), 308);
    assert_eq!(r.headers()["location"], "/ui/");
    for (path, ct, needle) in [
        (
            "/ui/",
            "text/html; charset=utf-8",
            "<title>eventmesh · admin</title>",
        ),
        (
            "/ui/app.js",
            "text/javascript; charset=utf-8",
            "The admin token was not accepted.",
        ),
        ("/ui/style.css", "text/css; charset=utf-8", "tabular-nums"),
    ] {
        let r = c.get(s.admin_url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(r.headers()["content-type"], ct, "{path}");
        assert!(r.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .starts_with("default-src 'none'; script-src 'self';"));
        let body = r.text().await.unwrap();
        assert!(body.contains(needle), "{path}");
    }
}
