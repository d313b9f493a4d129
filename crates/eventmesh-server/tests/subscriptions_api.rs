//! The CloudEvents Subscriptions API through the real binary, with a real
//! webhook receiver: what a subscription's types and filters let through,
//! the headers and credential sent with each push, retrieve, query,
//! update and delete, refusals naming the field at fault, and tenants
//! that cannot see each other's subscriptions.

mod common;

use std::time::Duration;

use common::gate::{start_closed, GateFiles};
use common::hook::{start_hook, Hook, HookMode};
use common::routing::order;
use common::*;
use reqwest::Method;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(10);

/// `GET path` on the traffic port, without a token: the status, the JSON
/// answer and the headers.
async fn get(
    c: &reqwest::Client,
    s: &Server,
    path: &str,
) -> (u16, Value, reqwest::header::HeaderMap) {
    send(c, s, Method::GET, path, None, Value::Null).await
}

/// A request to the traffic port with a JSON body (none when `Null`) and
/// the bearer `token`, if any: the status, the JSON answer and the headers.
async fn send(
    c: &reqwest::Client,
    s: &Server,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Value,
) -> (u16, Value, reqwest::header::HeaderMap) {
    let body = match body {
        Value::Null => Vec::new(),
        v => serde_json::to_vec(&v).unwrap(),
    };
    call(c, method, s.url(path), token, "application/json", body, &[]).await
}

/// The ids of the events the hook accepted, in order.
fn accepted(hook: &Hook) -> Vec<String> {
    let h = hook.lock().unwrap();
    h.accepted.iter().map(|a| a.0.clone()).collect()
}

/// A header of every accepted push, in order.
fn header_of_each(hook: &Hook, name: &str) -> Vec<String> {
    let h = hook.lock().unwrap();
    h.headers
        .iter()
        .map(|m| {
            m.get(name)
                .map(|v| v.to_str().unwrap().to_string())
                .unwrap_or_default()
        })
        .collect()
}

/// Waits until the hook accepted `n` pushes and the filter of `group` on
/// `orders` skipped `skipped` events: every event published so far was
/// decided.
async fn settled(
    c: &reqwest::Client,
    s: &Server,
    hook: &Hook,
    group: &str,
    n: usize,
    skipped: f64,
) {
    let series = format!(r#"eventmesh_filter_skipped_total{{topic="orders",group="{group}"}}"#);
    assert_eq!(
        counter_reaching(c, s, &series, skipped, WAIT).await,
        skipped
    );
    let h = hook.clone();
    assert!(
        wait_until(move || h.lock().unwrap().accepted.len() >= n, WAIT).await,
        "{:?}",
        accepted(hook)
    );
}

#[tokio::test]
async fn a_subscription_pushes_what_its_types_and_filters_take_until_it_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    let (hook_url, hook) = start_hook(HookMode::Accept).await;

    let (st, created, headers) = send(
        &c,
        &s,
        Method::POST,
        "/subscriptions",
        None,
        json!({
            "id": "chosen-by-the-client",
            "source": "orders",
            "types": ["order.created", "order.paid"],
            "filters": [{"sql": "amount > 100"}],
            "sink": hook_url,
            "protocol": "HTTP",
            "protocolsettings": {"headers": {"X-Tenant": "acme"}},
            "sinkcredential": {"credentialtype": "ACCESSTOKEN", "accesstoken": "t0k"},
        }),
    )
    .await;
    assert_eq!(st, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    assert_ne!(id, "chosen-by-the-client");
    assert_eq!(headers["location"], format!("/subscriptions/{id}").as_str());
    let shown = json!({
        "id": id,
        "source": "orders",
        "types": ["order.created", "order.paid"],
        "filters": [{"sql": "amount > 100"}],
        "config": {"from": "latest"},
        "sink": hook_url,
        "protocol": "HTTP",
        "protocolsettings": {"method": "POST", "contentmode": "binary", "headers": {"X-Tenant": "acme"}},
        "sinkcredential": {"credentialtype": "ACCESSTOKEN", "accesstokentype": "bearer"},
    });
    assert_eq!(created, shown);

    // Only created or paid orders above 100 are pushed, with the headers.
    for e in [
        order("e1", "order.created", json!(150)),
        order("e2", "order.created", json!(50)),
        order("e3", "order.cancelled", json!(150)),
        order("e4", "order.paid", json!(200)),
        order("e5", "order.created", json!("lots")),
    ] {
        publish(&c, &s, "orders", &e).await;
    }
    let group = format!("sub-{id}");
    settled(&c, &s, &hook, &group, 2, 3.0).await;
    let mut got = accepted(&hook);
    got.sort();
    assert_eq!(got, ["e1", "e4"]);
    assert_eq!(header_of_each(&hook, "x-tenant"), ["acme", "acme"]);
    assert_eq!(
        header_of_each(&hook, "authorization"),
        ["Bearer t0k", "Bearer t0k"]
    );
    assert_eq!(header_of_each(&hook, "ce-source"), ["/shop", "/shop"]);

    // Retrieve and query show it as created.
    let (st, one, _) = get(&c, &s, &format!("/subscriptions/{id}")).await;
    assert_eq!((st, &one), (200, &shown));
    let (st, all, _) = send(&c, &s, Method::GET, "/subscriptions", None, Value::Null).await;
    assert_eq!((st, all), (200, json!([shown])));
    // Operators see it, the token redacted.
    let subs: Vec<Value> = admin_json(&c, &s, "/admin/subscriptions").await;
    assert_eq!(subs.len(), 1);
    assert_eq!(
        subs[0]["headers"],
        json!({"Authorization": "***", "X-Tenant": "acme"})
    );

    // An update to other types takes effect at once; the object shown,
    // given back without the token, keeps the stored one.
    let mut changed = shown.clone();
    changed["types"] = json!(["order.cancelled"]);
    changed.as_object_mut().unwrap().remove("filters");
    let (st, updated, _) = send(
        &c,
        &s,
        Method::PUT,
        &format!("/subscriptions/{id}"),
        None,
        changed.clone(),
    )
    .await;
    assert_eq!((st, &updated), (200, &changed));
    for e in [
        order("e6", "order.cancelled", json!(5)),
        order("e7", "order.created", json!(500)),
    ] {
        publish(&c, &s, "orders", &e).await;
    }
    settled(&c, &s, &hook, &group, 3, 4.0).await;
    assert_eq!(accepted(&hook)[2], "e6");
    assert_eq!(header_of_each(&hook, "authorization")[2], "Bearer t0k");
    let (_, one, _) = get(&c, &s, &format!("/subscriptions/{id}")).await;
    assert_eq!(one, changed);

    // Deleted: answered with what it was, then gone, and pushes stop.
    let (st, deleted, _) = send(
        &c,
        &s,
        Method::DELETE,
        &format!("/subscriptions/{id}"),
        None,
        Value::Null,
    )
    .await;
    assert_eq!((st, deleted), (200, changed));
    let (st, v, _) = get(&c, &s, &format!("/subscriptions/{id}")).await;
    assert_eq!(
        (st, v),
        (
            404,
            json!({"error": "unknown_subscription", "message": format!("no subscription {id:?}")})
        )
    );
    let (st, all, _) = send(&c, &s, Method::GET, "/subscriptions", None, Value::Null).await;
    assert_eq!((st, all), (200, json!([])));
    assert!(admin_json::<Vec<Value>>(&c, &s, "/admin/subscriptions")
        .await
        .is_empty());
    // A puller subscribed now gets the next event; the hook does not.
    subscribe(&c, &s, json!({"clientId": "witness", "topic": "orders"})).await;
    publish(&c, &s, "orders", &order("e8", "order.cancelled", json!(1))).await;
    let got = poll_n(&c, &s, "witness", 1, WAIT).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["event"]["id"], "e8");
    let mut got = accepted(&hook);
    got.sort();
    assert_eq!(got, ["e1", "e4", "e6"]);
}

#[tokio::test]
async fn bad_subscriptions_are_refused_naming_the_field_and_nothing_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    let (hook_url, _hook) = start_hook(HookMode::Accept).await;
    let sub = |extra: Value| {
        let mut v = json!({"source": "orders", "sink": hook_url, "protocol": "HTTP"});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    };
    let create = |body: Value| {
        let (c, s) = (&c, &s);
        async move {
            let (st, v, _) = send(c, s, Method::POST, "/subscriptions", None, body).await;
            (st, v)
        }
    };
    let err = |code: &str, message: &str| json!({"error": code, "message": message});

    let mut no_sink = sub(json!({}));
    no_sink.as_object_mut().unwrap().remove("sink");
    assert_eq!(
        create(no_sink).await,
        (400, err("invalid_subscription", "sink: is required"))
    );
    assert_eq!(
        create(sub(json!({"protocol": "MQTT5"}))).await,
        (
            400,
            err(
                "unsupported_protocol",
                "protocol: MQTT5 is not supported; this subscription manager delivers over HTTP only"
            )
        )
    );
    assert_eq!(
        create(sub(json!({"types": ["order.created", ""]}))).await,
        (
            400,
            err("invalid_subscription", "types[1]: must not be empty")
        )
    );
    assert_eq!(
        create(sub(json!({"protocolsettings": {"method": "PUT"}}))).await,
        (
            400,
            err(
                "unsupported_setting",
                "protocolsettings.method: \"PUT\" is not supported; events are delivered with POST (the default)"
            )
        )
    );
    // A denied sink is refused by the webhook guard exactly as a webhook
    // subscribe is, the message naming the field.
    let metadata = "http://169.254.169.254/latest";
    let guard = webhook_refused(&c, &s, metadata).await;
    assert_eq!(
        create(sub(json!({"sink": metadata}))).await,
        (
            403,
            err(
                "webhook_denied",
                &format!("sink: {}", guard["message"].as_str().unwrap())
            )
        )
    );
    let (st, v) = create(sub(json!({"sink": "ftp://example.com/x"}))).await;
    assert_eq!((st, v["error"].as_str()), (400, Some("invalid_url")), "{v}");
    assert_eq!(
        v["message"],
        "sink: url scheme \"ftp\" is not supported; use http or https"
    );
    // A malformed filter: the filter checker's answer, at its position.
    let (st, plain) = post_json(
        &c,
        s.url("/events/subscribe"),
        json!({"clientId": "x", "topic": "orders", "filters": [{"exact": {"type": "a"}}, {"sql": "amount >"}]}),
    )
    .await;
    assert_eq!((st, plain["error"].as_str()), (400, Some("invalid_filter")));
    assert!(
        plain["message"]
            .as_str()
            .unwrap()
            .starts_with("filters[1].sql: "),
        "{plain}"
    );
    assert_eq!(
        create(sub(
            json!({"filters": [{"exact": {"type": "a"}}, {"sql": "amount >"}]})
        ))
        .await,
        (400, plain)
    );
    let (st, v, _) = call(
        &c,
        Method::POST,
        s.url("/subscriptions"),
        None,
        "application/json",
        b"{\"sink\":".to_vec(),
        &[],
    )
    .await;
    assert_eq!(
        (st, v["error"].as_str()),
        (400, Some("malformed_json")),
        "{v}"
    );
    // Nothing was made.
    let (st, all, _) = send(&c, &s, Method::GET, "/subscriptions", None, Value::Null).await;
    assert_eq!((st, all), (200, json!([])));
    assert!(admin_json::<Vec<Value>>(&c, &s, "/admin/subscriptions")
        .await
        .is_empty());

    // Unknown ids, a changed id, and what each path takes.
    let unknown = err("unknown_subscription", "no subscription \"nope\"");
    for method in [Method::GET, Method::DELETE] {
        let (st, v, _) = send(&c, &s, method, "/subscriptions/nope", None, Value::Null).await;
        assert_eq!((st, v), (404, unknown.clone()));
    }
    let (st, v, _) = send(
        &c,
        &s,
        Method::PUT,
        "/subscriptions/nope",
        None,
        sub(json!({})),
    )
    .await;
    assert_eq!((st, v), (404, unknown.clone()));
    let (st, made, _) = send(&c, &s, Method::POST, "/subscriptions", None, sub(json!({}))).await;
    assert_eq!(st, 201, "{made}");
    let id = made["id"].as_str().unwrap();
    let (st, v, _) = send(
        &c,
        &s,
        Method::PUT,
        &format!("/subscriptions/{id}"),
        None,
        sub(json!({"id": "other"})),
    )
    .await;
    assert_eq!(
        (st, v),
        (
            400,
            err(
                "invalid_subscription",
                &format!("id: \"other\" is not the id of the subscription updated ({id:?}); an id never changes")
            )
        )
    );
    for (path, allow) in [
        ("/subscriptions".to_string(), "GET,POST,OPTIONS"),
        (format!("/subscriptions/{id}"), "GET,PUT,DELETE,OPTIONS"),
    ] {
        let (st, _, h) = send(&c, &s, Method::OPTIONS, &path, None, Value::Null).await;
        assert_eq!((st, h["allow"].to_str().unwrap()), (200, allow), "{path}");
    }
    let (st, v, _) = send(
        &c,
        &s,
        Method::PATCH,
        &format!("/subscriptions/{id}"),
        None,
        Value::Null,
    )
    .await;
    assert_eq!(
        (st, v["error"].as_str()),
        (405, Some("method_not_allowed")),
        "{v}"
    );
}

#[tokio::test]
async fn another_tenant_neither_sees_nor_touches_a_subscription() {
    let files = GateFiles::new("alice-token acme alice\nbob-token globex bob\n");
    let s = start_closed(&files, &[]);
    let c = client();
    let (hook_url, _hook) = start_hook(HookMode::Accept).await;
    let body = json!({"source": "orders", "sink": hook_url, "protocol": "HTTP"});
    let (st, made, _) = send(
        &c,
        &s,
        Method::POST,
        "/subscriptions",
        Some("alice-token"),
        body.clone(),
    )
    .await;
    assert_eq!(st, 201, "{made}");
    let id = made["id"].as_str().unwrap();
    let path = format!("/subscriptions/{id}");

    // To bob the id is exactly an unknown one, whatever he does with it.
    let unknown =
        json!({"error": "unknown_subscription", "message": format!("no subscription {id:?}")});
    for (method, body) in [
        (Method::GET, Value::Null),
        (Method::PUT, body.clone()),
        (Method::DELETE, Value::Null),
    ] {
        let (st, v, _) = send(&c, &s, method.clone(), &path, Some("bob-token"), body).await;
        assert_eq!((st, v), (404, unknown.clone()), "{method}");
    }
    let (st, all, _) = send(
        &c,
        &s,
        Method::GET,
        "/subscriptions",
        Some("bob-token"),
        Value::Null,
    )
    .await;
    assert_eq!((st, all), (200, json!([])));
    // Without a credential nothing is answered.
    let (st, v, _) = send(&c, &s, Method::GET, &path, None, Value::Null).await;
    assert_eq!(
        (st, v["error"].as_str()),
        (401, Some("missing_credential")),
        "{v}"
    );

    // Alice still has it, unchanged.
    let (st, one, _) = send(&c, &s, Method::GET, &path, Some("alice-token"), Value::Null).await;
    assert_eq!((st, &one), (200, &made));
    let (st, all, _) = send(
        &c,
        &s,
        Method::GET,
        "/subscriptions",
        Some("alice-token"),
        Value::Null,
    )
    .await;
    assert_eq!((st, all), (200, json!([made])));
    let subs: Vec<Value> = admin_json(&c, &s, "/admin/subscriptions").await;
    assert_eq!(subs.len(), 1);
    assert_eq!(
        (subs[0]["tenant"].as_str(), subs[0]["principal"].as_str()),
        (Some("acme"), Some("alice"))
    );
    let (st, _, _) = send(
        &c,
        &s,
        Method::DELETE,
        &path,
        Some("alice-token"),
        Value::Null,
    )
    .await;
    assert_eq!(st, 200);
}

#[tokio::test]
async fn an_update_to_another_source_moves_the_subscription_under_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    let (hook_url, hook) = start_hook(HookMode::Accept).await;
    let body = |source: &str| json!({"source": source, "sink": hook_url, "protocol": "HTTP"});
    let (st, made, _) = send(&c, &s, Method::POST, "/subscriptions", None, body("before")).await;
    assert_eq!(st, 201, "{made}");
    let id = made["id"].as_str().unwrap();
    let (st, moved, _) = send(
        &c,
        &s,
        Method::PUT,
        &format!("/subscriptions/{id}"),
        None,
        body("after"),
    )
    .await;
    assert_eq!(
        (st, &moved["id"], &moved["source"]),
        (200, &json!(id), &json!("after"))
    );
    let (_, all, _) = send(&c, &s, Method::GET, "/subscriptions", None, Value::Null).await;
    assert_eq!(all, json!([moved]));
    // One subscription is left, on the new topic, under the same ids.
    let subs: Vec<Value> = admin_json(&c, &s, "/admin/subscriptions").await;
    let held: Vec<(&str, &str, &str)> = subs
        .iter()
        .map(|s| {
            (
                s["subscriptionId"].as_str().unwrap(),
                s["topic"].as_str().unwrap(),
                s["clientId"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(held, [(id, "after", format!("sub-{id}").as_str())]);
    publish(&c, &s, "before", &event("old")).await;
    publish(&c, &s, "after", &event("new")).await;
    let h = hook.clone();
    assert!(wait_until(move || !h.lock().unwrap().accepted.is_empty(), WAIT).await);
    assert_eq!(accepted(&hook), ["new"]);
}
