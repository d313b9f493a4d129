//! The CloudEvents webhook validation handshake through the real binary:
//! one `OPTIONS` per origin, a refusal pausing the pushes (visibly) until
//! the receiver allows them, an allowed rate kept to, the handshake turned
//! off per subscription, and push settings refused naming the field.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};

use super::common::*;
use super::receiver::{Answer, Receiver};
use super::{publish_batch, start, ORIGIN, WAIT};

/// The `webhook` block `/admin/subscriptions` shows for `client`.
async fn webhook_of(c: &reqwest::Client, s: &Server, client: &str) -> Value {
    let subs: Vec<Value> = admin_json(c, s, "/admin/subscriptions").await;
    subs.into_iter()
        .find(|v| v["clientId"] == client)
        .unwrap_or_else(|| panic!("no subscription of {client}"))["webhook"]
        .clone()
}

/// Waits until `client`'s webhook block satisfies `cond`; the last seen.
async fn webhook_reaching(
    c: &reqwest::Client,
    s: &Server,
    client: &str,
    cond: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let w = webhook_of(c, s, client).await;
        if cond(&w) || std::time::Instant::now() > deadline {
            return w;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn one_handshake_per_origin_asks_with_our_origin_and_rate() {
    let shared = Receiver::start(Answer::Allow {
        origin: ORIGIN,
        rate: None,
    })
    .await;
    let other = Receiver::start(Answer::allow()).await;
    let dir = tempfile::tempdir().unwrap();
    let s = start(
        dir.path(),
        &["eventmesh.webhook.handshake.request.rate=120"],
    );
    let c = client();
    // Two paths of one origin, each in its own group, and another origin.
    for (client, url) in [
        ("a", shared.url("/hook/a")),
        ("b", shared.url("/hook/b")),
        ("o", other.url("/hook")),
    ] {
        subscribe(
            &c,
            &s,
            json!({"clientId": client, "group": client, "topic": "hs", "url": url}),
        )
        .await;
    }
    let events: Vec<Value> = (0..5).map(|i| event(&format!("h{i}"))).collect();
    publish_batch(&c, &s, "hs", &events).await;
    assert!(shared.wait_events(10, WAIT).await, "{:?}", shared.posts());
    assert!(other.wait_events(5, WAIT).await, "{:?}", other.posts());
    let asked = shared.options();
    assert_eq!(asked.len(), 1, "one handshake for both paths: {asked:?}");
    assert_eq!(asked[0].header("webhook-request-origin"), ORIGIN);
    assert_eq!(asked[0].header("webhook-request-rate"), "120");
    assert!(asked[0].path.starts_with("/hook/"), "{}", asked[0].path);
    assert_eq!(other.options().len(), 1);
    // Every push came after its origin's handshake, naming our origin.
    for hook in [&shared, &other] {
        let first_post = hook.posts()[0].at;
        assert!(hook.options()[0].at <= first_post);
        let origins: BTreeSet<String> = hook
            .posts()
            .iter()
            .map(|p| p.header("webhook-request-origin"))
            .collect();
        assert_eq!(origins, BTreeSet::from([ORIGIN.to_string()]));
    }
    let paths: BTreeSet<String> = shared.posts().iter().map(|p| p.path.clone()).collect();
    assert_eq!(
        paths,
        BTreeSet::from(["/hook/a".to_string(), "/hook/b".to_string()])
    );
}

#[tokio::test]
async fn a_refused_handshake_pauses_the_pushes_until_the_receiver_allows_them() {
    let hook = Receiver::start(Answer::Status(405)).await;
    let dir = tempfile::tempdir().unwrap();
    let s = start(
        dir.path(),
        &[
            "eventmesh.webhook.handshake.retry.max.ms=300",
            "eventmesh.delivery.max.attempts=2",
        ],
    );
    let c = client();
    subscribe(
        &c,
        &s,
        json!({"clientId": "paused", "topic": "wait", "url": hook.url("/hook")}),
    )
    .await;
    let events: Vec<Value> = (0..3).map(|i| event(&format!("w{i}"))).collect();
    publish_batch(&c, &s, "wait", &events).await;
    // Asked, refused, asked again after the wait: nothing was pushed.
    assert!(hook.wait_options(2, WAIT).await);
    assert_eq!(hook.posts().len(), 0);
    let w = webhook_reaching(&c, &s, "paused", |w| w["state"] == "paused").await;
    assert_eq!(w["state"], "paused", "{w}");
    assert_eq!(
        w["reason"],
        "the receiver answered the handshake (OPTIONS) with status 405"
    );
    assert_eq!(w["origin"]["state"], "refused");
    // Counted: one origin refused, at least the two refusals seen so far.
    assert_eq!(
        metric(&c, &s, "eventmesh_webhook_origins_refused").await,
        1.0
    );
    let refusals = r#"eventmesh_webhook_handshakes_total{outcome="refused"}"#;
    assert!(counter(&c, &s, refusals).await >= 2.0);
    // Allowing another origin is no permission either.
    hook.answer(Answer::Allow {
        origin: "someone-else.example",
        rate: None,
    });
    let w = webhook_reaching(&c, &s, "paused", |w| {
        w["reason"]
            .as_str()
            .is_some_and(|r| r.contains("someone-else"))
    })
    .await;
    assert_eq!(
        w["reason"],
        "the receiver allows the origin \"someone-else.example\", not \"mesh.test\" (WebHook-Allowed-Origin)"
    );
    let asked = hook.options().len();
    assert!(hook.wait_options(asked + 1, WAIT).await);
    assert_eq!(hook.posts().len(), 0);
    // The receiver allows us: the pushes resume, every event delivered,
    // none of the waiting counted as a failed attempt.
    hook.answer(Answer::Allow {
        origin: ORIGIN,
        rate: None,
    });
    assert!(hook.wait_events(3, WAIT).await, "{:?}", hook.posts());
    let mut got: Vec<String> = hook.posts().iter().flat_map(|p| p.event_ids()).collect();
    got.sort();
    assert_eq!(got, ["w0", "w1", "w2"]);
    let w = webhook_reaching(&c, &s, "paused", |w| w["state"] == "active").await;
    assert_eq!(
        (&w["state"], &w["origin"]["state"]),
        (&json!("active"), &json!("allowed"))
    );
    assert!(w.get("reason").is_none(), "{w}");
    assert_eq!(
        counter_reaching(&c, &s, "eventmesh_acks_total", 3.0, WAIT).await,
        3.0
    );
    assert_eq!(metric(&c, &s, "eventmesh_push_failures_total").await, 0.0);
    assert_eq!(metric(&c, &s, "eventmesh_dead_letters_total").await, 0.0);
    // Allowed once, refused no more.
    let allowed = r#"eventmesh_webhook_handshakes_total{outcome="allowed"}"#;
    assert_eq!(counter(&c, &s, allowed).await, 1.0);
    assert_eq!(
        metric(&c, &s, "eventmesh_webhook_origins_refused").await,
        0.0
    );
}

#[tokio::test]
async fn an_allowed_rate_caps_the_pushes_which_wait_rather_than_drop() {
    // 60 a minute: one token a second, a bucket of one.
    let hook = Receiver::start(Answer::Allow {
        origin: "*",
        rate: Some("60"),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let c = client();
    subscribe(
        &c,
        &s,
        json!({"clientId": "capped", "topic": "rate", "url": hook.url("/hook")}),
    )
    .await;
    let events: Vec<Value> = (0..4).map(|i| event(&format!("p{i}"))).collect();
    publish_batch(&c, &s, "rate", &events).await;
    assert!(hook.wait_events(4, WAIT).await, "{:?}", hook.posts());
    let at: Vec<_> = hook.posts().iter().map(|p| p.at).collect();
    // Within any second from the first push, at most the bucket (1) and
    // one refill arrive.
    let first_second = at
        .iter()
        .filter(|t| t.duration_since(at[0]) < Duration::from_secs(1))
        .count();
    assert!(
        first_second <= 2,
        "{first_second} pushes in the first second"
    );
    let w = webhook_of(&c, &s, "capped").await;
    assert_eq!(w["origin"]["allowedRate"], 60);
    assert_eq!(metric(&c, &s, "eventmesh_push_failures_total").await, 0.0);
    assert_eq!(
        counter_reaching(&c, &s, "eventmesh_acks_total", 4.0, WAIT).await,
        4.0
    );
}

#[tokio::test]
async fn the_handshake_is_off_for_subscriptions_that_say_so() {
    // A receiver that predates the handshake: OPTIONS is not allowed.
    let hook = Receiver::start(Answer::Status(405)).await;
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let c = client();
    let (status, answer) = post_json(
        &c,
        s.url("/events/subscribe"),
        json!({"clientId": "old", "topic": "legacy", "url": hook.url("/hook/old"),
               "webhookHandshake": false}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        (&answer["contentMode"], &answer["webhookHandshake"]),
        (&json!("binary"), &json!(false))
    );
    // Through the Subscriptions API, as protocolsettings.
    let (status, created) = post_json(
        &c,
        s.url("/subscriptions"),
        json!({"source": "legacy", "sink": hook.url("/hook/api"), "protocol": "HTTP",
               "protocolsettings": {"contentmode": "structured", "webhookhandshake": "false"}}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        created["protocolsettings"],
        json!({"method": "POST", "contentmode": "structured", "webhookhandshake": false})
    );
    let (status, shown) = {
        let id = created["id"].as_str().unwrap();
        let r = c
            .get(s.url(&format!("/subscriptions/{id}")))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json::<Value>().await.unwrap())
    };
    assert_eq!((status, &shown), (200, &created));
    let events: Vec<Value> = (0..2).map(|i| event(&format!("o{i}"))).collect();
    publish_batch(&c, &s, "legacy", &events).await;
    assert!(hook.wait_events(4, WAIT).await, "{:?}", hook.posts());
    assert_eq!(hook.options().len(), 0);
    for p in hook.posts() {
        assert_eq!(p.header("webhook-request-origin"), "", "{p:?}");
        let structured = p.path == "/hook/api";
        assert_eq!(
            p.header("content-type")
                .starts_with("application/cloudevents+json"),
            structured
        );
    }
    let w = webhook_of(&c, &s, "old").await;
    assert_eq!(
        w,
        json!({"contentMode": "binary", "handshake": false, "state": "active"})
    );
}

#[tokio::test]
async fn the_handshake_may_be_off_by_default_and_asked_for_per_subscription() {
    let hook = Receiver::start(Answer::Status(405)).await;
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &["eventmesh.webhook.handshake.enabled=false"]);
    let c = client();
    for (client, handshake) in [("plain", Value::Null), ("asks", json!(true))] {
        let mut body = json!({"clientId": client, "group": client, "topic": "dflt",
                              "url": hook.url(&format!("/hook/{client}"))});
        if !handshake.is_null() {
            body["webhookHandshake"] = handshake;
        }
        subscribe(&c, &s, body).await;
    }
    publish(&c, &s, "dflt", &event("d0")).await;
    // The one that asks is refused and waits; the other is pushed.
    assert!(hook.wait_events(1, WAIT).await);
    assert!(hook.wait_options(1, WAIT).await);
    let w = webhook_reaching(&c, &s, "asks", |w| w["state"] == "paused").await;
    assert_eq!(w["state"], "paused", "{w}");
    let paths: Vec<String> = hook.posts().iter().map(|p| p.path.clone()).collect();
    assert_eq!(paths, ["/hook/plain"]);
    assert_eq!(webhook_of(&c, &s, "plain").await["handshake"], false);
}

#[tokio::test]
async fn bad_push_settings_are_refused_naming_the_field_and_value() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let c = client();
    let url = "http://127.0.0.1:9/hook";
    for (extra, message) in [
        (
            json!({"contentMode": "batch", "batchSize": 0}),
            "batchSize: 0 is out of range: 1 to 1000 events per push",
        ),
        (
            json!({"contentMode": "batch", "batchSize": 1001}),
            "batchSize: 1001 is out of range: 1 to 1000 events per push",
        ),
        (
            json!({"contentMode": "batch", "batchLingerMs": 20000}),
            "batchLingerMs: 20000 is out of range: 0 to 10000 milliseconds",
        ),
        (
            json!({"contentMode": "xml"}),
            "contentMode: \"xml\" is not a content mode (binary, structured or batch)",
        ),
        (
            json!({"batchSize": 5}),
            "batchSize: 5 is given, but the content mode is binary (it applies to batch only)",
        ),
        (
            json!({"webhookHandshake": "maybe"}),
            "webhookHandshake: \"maybe\" is not true or false",
        ),
    ] {
        let mut body = json!({"clientId": "bad", "topic": "t", "url": url});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, answer) = post_json(&c, s.url("/events/subscribe"), body).await;
        assert_eq!(
            (status, answer),
            (400, json!({"error": "invalid_request", "message": message}))
        );
    }
    // A pulling subscription takes no push settings.
    let (status, answer) = post_json(
        &c,
        s.url("/events/subscribe"),
        json!({"clientId": "puller", "topic": "t", "contentMode": "structured"}),
    )
    .await;
    assert_eq!(
        (status, answer),
        (
            400,
            json!({"error": "invalid_request",
                   "message": "contentMode: applies to webhook subscriptions only (give a url)"})
        )
    );
    let (status, answer) = post_json(
        &c,
        s.url("/subscriptions"),
        json!({"source": "t", "sink": url, "protocol": "HTTP",
               "protocolsettings": {"contentmode": "batch", "batchsize": "0"}}),
    )
    .await;
    assert_eq!(
        (status, answer),
        (
            400,
            json!({"error": "invalid_subscription",
                   "message": "protocolsettings.batchsize: 0 is out of range: 1 to 1000 events per push"})
        )
    );
    let subs: Vec<Value> = admin_json(&c, &s, "/admin/subscriptions").await;
    assert_eq!(subs, Vec::<Value>::new());
}

#[tokio::test]
async fn the_origin_is_the_cluster_name_unless_configured() {
    let hook = Receiver::start(Answer::allow()).await;
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.cluster.name=eu-west"]);
    let c = client();
    subscribe(
        &c,
        &s,
        json!({"clientId": "named", "topic": "origin", "url": hook.url("/hook")}),
    )
    .await;
    publish(&c, &s, "origin", &event("n0")).await;
    assert!(hook.wait_events(1, WAIT).await);
    assert_eq!(
        hook.options()[0].header("webhook-request-origin"),
        "eu-west"
    );
    assert_eq!(hook.options()[0].header("webhook-request-rate"), "600");
    assert_eq!(hook.posts()[0].header("webhook-request-origin"), "eu-west");
}
