//! Subscription filters through the real binary: the Subscriptions API
//! dialects and CESQL on every transport, what a filtered group's offsets
//! and metrics show, malformed filters, and groups that disagree.

mod common;

use std::time::Duration;

use common::hook::{start_hook, HookMode};
use common::routing::*;
use common::*;
use eventmesh_client::{Error, StartFrom, StreamOptions, SubscribeOptions};
use serde_json::{json, Value};

/// Six events: two match `type = order.created AND amount > 100`, one
/// makes that expression fail (`amount` is not a number).
fn orders() -> Vec<Value> {
    vec![
        order("e1", "order.created", json!(150)),
        order("e2", "order.created", json!(50)),
        order("e3", "order.cancelled", json!(150)),
        order("e4", "order.created", json!(200)),
        order("e5", "order.cancelled", json!(10)),
        order("e6", "order.created", json!("lots")),
    ]
}

fn big_orders() -> Vec<Value> {
    vec![
        json!({"exact": {"type": "order.created"}}),
        json!({"sql": "amount > 100"}),
    ]
}

async fn publish_orders(c: &reqwest::Client, s: &Server, topic: &str) {
    for e in orders() {
        publish(c, s, topic, &e).await;
    }
}

#[tokio::test]
async fn a_filtered_group_gets_only_what_matches_and_its_offsets_move_past_the_rest() {
    let (_dir, s, sdk) = start_with_tcp();
    let c = client();
    let sub = SubscribeOptions::new("billing-1", "orders")
        .group("billing")
        .from(StartFrom::Earliest);
    let sub = big_orders().into_iter().fold(sub, SubscribeOptions::filter);
    sdk.subscribe(sub).await.unwrap();
    publish_orders(&c, &s, "orders").await;

    let got = poll_n(&c, &s, "billing-1", 2, WAIT).await;
    assert_eq!(polled_ids(&got), ["e1", "e4"]);
    for d in &got {
        assert_eq!(ack(&c, &s, d["deliveryId"].as_str().unwrap()).await, 200);
    }
    // Nothing else comes, and the committed offsets cover all six.
    assert!(poll_n(&c, &s, "billing-1", 1, Duration::from_millis(800))
        .await
        .is_empty());
    assert!(committed_reaches(&c, &s, "orders", 6, WAIT).await);
    let m = metrics(&c, &s).await;
    assert_eq!(
        m.get(r#"eventmesh_filter_skipped_total{topic="orders",group="billing"}"#),
        4.0
    );
    assert_eq!(
        m.get(r#"eventmesh_filter_errors_total{topic="orders",group="billing"}"#),
        1.0
    );
    assert_eq!(m.get("eventmesh_pending_deliveries"), 0.0);

    // The filters are shown with the subscription.
    let subs: Vec<Value> = admin_json(&c, &s, "/admin/subscriptions").await;
    assert_eq!(subs.len(), 1);
    assert_eq!(subs[0]["filters"], json!(big_orders()));
}

/// Groups each taking one shard's events share one read of the topic:
/// every group gets exactly its own, a group subscribed after the events
/// were read gets its own too, and every group's offsets move past the
/// rest.
#[tokio::test]
async fn many_filtered_groups_each_get_exactly_their_own() {
    const GROUPS: usize = 40;
    const EVENTS: usize = 200;
    let (_dir, s, sdk) = start_with_tcp();
    let c = client();
    let subscribe = |k: usize| {
        SubscribeOptions::new(format!("shard-{k}"), "fan")
            .group(format!("shard{k}"))
            .from(StartFrom::Earliest)
            .sql(format!("shard = 's{k}'"))
    };
    // All but the last group before the events are published.
    for k in 0..GROUPS - 1 {
        sdk.subscribe(subscribe(k)).await.unwrap();
    }
    for i in 0..EVENTS {
        let e = json!({"specversion": "1.0", "id": format!("e{i}"), "source": "/fan",
            "type": "t", "shard": format!("s{}", i % GROUPS)});
        publish(&c, &s, "fan", &e).await;
    }
    // Every event read by the groups above, then one more group.
    let first = poll_n(&c, &s, "shard-0", EVENTS / GROUPS, WAIT).await;
    sdk.subscribe(subscribe(GROUPS - 1)).await.unwrap();
    let mut firsts = Some(first);
    for k in 0..GROUPS {
        let got = match (k, firsts.take()) {
            (0, Some(f)) => f,
            _ => poll_n(&c, &s, &format!("shard-{k}"), EVENTS / GROUPS, WAIT).await,
        };
        let mut want: Vec<String> = (k..EVENTS)
            .step_by(GROUPS)
            .map(|i| format!("e{i}"))
            .collect();
        want.sort();
        assert_eq!(polled_ids(&got), want, "group shard{k}");
        for d in &got {
            assert_eq!(ack(&c, &s, d["deliveryId"].as_str().unwrap()).await, 200);
        }
    }
    assert!(committed_reaches(&c, &s, "fan", (EVENTS * GROUPS) as u64, WAIT).await);
    let m = metrics(&c, &s).await;
    for k in [0, GROUPS - 1] {
        let skipped = format!(r#"eventmesh_filter_skipped_total{{topic="fan",group="shard{k}"}}"#);
        assert_eq!(
            m.get(&skipped),
            (EVENTS - EVENTS / GROUPS) as f64,
            "{skipped}"
        );
    }
    assert_eq!(m.get("eventmesh_pending_deliveries"), 0.0);
}

#[tokio::test]
async fn every_dialect_decides_as_the_subscriptions_api_says() {
    let (_dir, s, sdk) = start_with_tcp();
    let c = client();
    let cases: [(&str, Vec<Value>, &[&str]); 6] = [
        (
            "exact",
            vec![json!({"exact": {"type": "order.cancelled"}})],
            &["e3", "e5"],
        ),
        (
            "prefix",
            vec![json!({"prefix": {"type": "order.c"}})],
            &["e1", "e2", "e3", "e4", "e5", "e6"],
        ),
        (
            "suffix",
            vec![json!({"suffix": {"type": ".created", "source": "/shop"}})],
            &["e1", "e2", "e4", "e6"],
        ),
        (
            "any",
            vec![json!({"any": [{"exact": {"id": "e2"}}, {"exact": {"id": "e5"}}]})],
            &["e2", "e5"],
        ),
        (
            "not",
            vec![json!({"not": {"prefix": {"type": "order.created"}}})],
            &["e3", "e5"],
        ),
        (
            "absent",
            // An attribute no event has matches nothing, whatever the value.
            vec![json!({"exact": {"region": "eu"}})],
            &[],
        ),
    ];
    for (name, filters, _) in &cases {
        let sub = SubscribeOptions::new(format!("c-{name}"), "d")
            .group(*name)
            .from(StartFrom::Earliest);
        let sub = filters.iter().cloned().fold(sub, SubscribeOptions::filter);
        sdk.subscribe(sub).await.unwrap();
    }
    publish_orders(&c, &s, "d").await;
    for (name, _, want) in &cases {
        let got = poll_n(&c, &s, &format!("c-{name}"), want.len(), WAIT).await;
        assert_eq!(polled_ids(&got), *want, "{name}");
    }
}

#[tokio::test]
async fn streams_webhooks_and_tcp_take_filters_too() {
    let (_dir, s, sdk) = start_with_tcp();
    let c = client();
    let stream_opts = |client: &str| {
        big_orders().into_iter().fold(
            StreamOptions::new(client)
                .topic("t")
                .from(StartFrom::Earliest),
            StreamOptions::filter,
        )
    };
    let mut sse = sdk.sse(stream_opts("sse").group("sse")).await.unwrap();
    let mut ws = sdk.websocket(stream_opts("ws").group("ws")).await.unwrap();
    let mut tcp = sdk.tcp("tcp").await.unwrap();
    let tcp_sub = big_orders().into_iter().fold(
        SubscribeOptions::new("ignored", "t")
            .group("tcp")
            .from(StartFrom::Earliest),
        SubscribeOptions::filter,
    );
    tcp.subscribe(tcp_sub).await.unwrap();
    let (hook_url, hook) = start_hook(HookMode::Accept).await;
    let hook_sub = big_orders().into_iter().fold(
        SubscribeOptions::new("hook", "t")
            .group("hook")
            .from(StartFrom::Earliest)
            .webhook(&hook_url),
        SubscribeOptions::filter,
    );
    sdk.subscribe(hook_sub).await.unwrap();

    publish_orders(&c, &s, "t").await;

    let got = take_sse(&sdk, &mut sse, 2).await;
    assert_eq!(ids_of(&got), ["e1", "e4"], "SSE");
    let got = take_ws(&mut ws, 2).await;
    assert_eq!(ids_of(&got), ["e1", "e4"], "WebSocket");
    let got = take_tcp(&mut tcp, 2).await;
    assert_eq!(ids_of(&got), ["e1", "e4"], "TCP");
    assert!(
        wait_until(|| hook.lock().unwrap().accepted_ids().len() >= 2, WAIT).await,
        "two pushes"
    );
    // Every consumer moved past all six; the webhook got exactly two.
    for group in ["sse", "ws", "tcp", "hook"] {
        let series = format!(r#"eventmesh_filter_skipped_total{{topic="t",group="{group}"}}"#);
        assert_eq!(
            counter_reaching(&c, &s, &series, 4.0, WAIT).await,
            4.0,
            "{group}"
        );
    }
    assert!(committed_reaches(&c, &s, "t", 6 * 4, WAIT).await);
    let mut pushed = hook.lock().unwrap().accepted_ids();
    pushed.sort();
    assert_eq!(pushed, ["e1", "e4"]);
    ws.close().await;
    let _ = tcp.goodbye().await;
}

/// The error code and message of a refused call.
fn refusal<T: std::fmt::Debug>(r: Result<T, Error>) -> (String, String) {
    match r {
        Err(Error::Api { code, message, .. }) => (code, message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_malformed_filter_is_refused_and_nothing_is_subscribed() {
    let (_dir, s, sdk) = start_with_tcp();
    let c = client();
    let bad: [(Value, &str); 5] = [
        (json!({"sql": "type = 'a' AND"}), "filters[0].sql"),
        (json!({"regex": {"type": "a.*"}}), "filters[0]"),
        (
            json!({"exact": {"type": "a"}, "prefix": {"type": "b"}}),
            "filters[0]",
        ),
        (
            json!({"all": [{"exact": {"type": 7}}]}),
            "filters[0].all[0].exact",
        ),
        (json!({"sql": "NOSUCHFUNCTION(type)"}), "filters[0].sql"),
    ];
    for (filter, path) in &bad {
        let sub = SubscribeOptions::new("c", "t").filter(filter.clone());
        let (code, message) = refusal(sdk.subscribe(sub).await);
        assert_eq!(code, "invalid_filter", "{filter}");
        assert!(
            message.starts_with(path),
            "{filter}: the message names {path}: {message}"
        );
        // The same over TCP and in a stream's query.
        let tcp = sdk.tcp("c-tcp").await.unwrap();
        let sub = SubscribeOptions::new("ignored", "t").filter(filter.clone());
        assert_eq!(refusal(tcp.subscribe(sub).await).0, "invalid_filter");
        let _ = tcp.goodbye().await;
        let r = c
            .get(s.url(&format!(
                "/events/stream?clientId=c-sse&topic=t&filters={}",
                urlencode(&Value::Array(vec![filter.clone()]).to_string())
            )))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"], "invalid_filter", "{filter}");
    }
    // The position of a CESQL parse error is in the message.
    let sub = SubscribeOptions::new("c", "t").sql("type = 'a' AND");
    let (_, message) = refusal(sdk.subscribe(sub).await);
    assert!(
        message.contains("14"),
        "the position of the problem: {message}"
    );
    let subs: Vec<Value> = admin_json(&c, &s, "/admin/subscriptions").await;
    assert_eq!(subs, Vec::<Value>::new());
}

#[tokio::test]
async fn the_members_of_a_group_share_one_set_of_filters() {
    let (_dir, _s, sdk) = start_with_tcp();
    let created = || {
        SubscribeOptions::new("m1", "t")
            .group("g")
            .sql("type = 'order.created'")
    };
    sdk.subscribe(created()).await.unwrap();
    let other = SubscribeOptions::new("m2", "t")
        .group("g")
        .sql("type = 'order.cancelled'");
    assert_eq!(refusal(sdk.subscribe(other).await).0, "conflict");
    let none = SubscribeOptions::new("m2", "t").group("g");
    assert_eq!(refusal(sdk.subscribe(none).await).0, "conflict");
    let mut same = created();
    same.client_id = "m2".into();
    sdk.subscribe(same).await.unwrap();
    // A member alone may change them; with company it may not.
    let changed = SubscribeOptions::new("m1", "t").group("g").sql("TRUE");
    assert_eq!(refusal(sdk.subscribe(changed).await).0, "conflict");
    assert!(sdk.unsubscribe("m2", Some("t")).await.unwrap());
    let changed = SubscribeOptions::new("m1", "t").group("g").sql("TRUE");
    sdk.subscribe(changed).await.unwrap();
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
