//! Pattern subscriptions (`orders.*.created`, `orders.>`) through the real
//! binary.
//!
//! | scenario | test |
//! |---|---|
//! | existing matching topics, topics created later (by a publish, by the admin API) from their first event, nothing of other topics; no topic made for the pattern; shown once with its topics | [`a_pattern_follows_existing_and_new_topics_and_nothing_else`] |
//! | malformed patterns refused (HTTP, TCP, a stream's query) naming the problem | [`malformed_patterns_are_refused_naming_the_problem`] |
//! | the ACL keeps a topic out (existing or new), counted and audited; roles stored with the subscription count | [`the_acl_keeps_denied_topics_out_and_counts_each`] |
//! | filters, over SSE, WebSocket, TCP and a webhook | [`patterns_take_filters_on_every_transport`] |
//! | a load-balanced group of two over a pattern; overlapping patterns in one group share mode and filters | [`a_load_balanced_group_shares_every_topic_of_its_pattern`] |
//! | a deleted topic is detached (not in use), followed again from its start when created again; unsubscribe stops everything | [`deleted_topics_are_detached_and_unsubscribe_stops_everything`] |
//! | JetStream: a topic made by a second instance (admin API, publish) is attached through the servers' advisories | [`backends::jetstream_attaches_topics_made_by_another_instance`] |
//! | `PARTITION_OWNED_PULL`, three instances: the concrete topics' partitions are claimed and spread, each event once | [`backends::owned_pull_claims_the_topics_a_pattern_follows`] |

#[path = "patterns/backends.rs"]
mod backends;
mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::gate::{start_closed, GateFiles};
use common::hook::{start_hook, HookMode};
use common::routing::{order, start_with_tcp, take_sse, take_tcp, take_ws};
use common::topics::{admin, publish_batch};
use common::*;
use eventmesh_client::{Delivery, Error, StartFrom, StreamOptions, SubscribeOptions};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(15);
/// How long a test waits to be sure that nothing more comes.
const QUIET: Duration = Duration::from_millis(800);

fn ev(id: &str, ty: &str) -> Value {
    json!({
        "specversion": "1.0",
        "id": id,
        "source": "/patterns",
        "type": ty,
        "data": {"id": id},
    })
}

/// One poll (up to `wait`) of `client`, as `token` when given: the status
/// and the deliveries.
async fn poll_once(
    c: &reqwest::Client,
    s: &Server,
    client: &str,
    token: Option<&str>,
    wait: Duration,
) -> (u16, Vec<Value>) {
    let mut r = c.get(s.url(&format!(
        "/events/poll?clientId={client}&timeoutMs={}&max=100",
        wait.as_millis()
    )));
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or_default())
}

/// Polls and acknowledges until `want` events came or `within` passed;
/// then makes sure nothing more comes for [`QUIET`]. Every event id
/// received, sorted, duplicates included.
async fn drain(
    c: &reqwest::Client,
    s: &Server,
    client: &str,
    token: Option<&str>,
    want: usize,
) -> Vec<String> {
    let deadline = Instant::now() + WAIT;
    let mut got = Vec::new();
    let mut quiet = false;
    loop {
        let wait = if got.len() >= want {
            QUIET
        } else {
            Duration::from_millis(500)
        };
        let (status, batch) = poll_once(c, s, client, token, wait).await;
        assert_eq!(status, 200, "poll of {client}: {batch:?}");
        if got.len() >= want && batch.is_empty() {
            quiet = true;
        }
        for d in &batch {
            got.push(d["event"]["id"].as_str().unwrap().to_string());
            let mut r = c
                .post(s.url("/events/ack"))
                .json(&json!({"deliveryId": d["deliveryId"]}));
            if let Some(t) = token {
                r = r.bearer_auth(t);
            }
            assert_eq!(r.send().await.unwrap().status(), 200);
        }
        if quiet || Instant::now() >= deadline {
            break;
        }
    }
    got.sort();
    got
}

/// Polls and acknowledges as every member of `clients` at once (so each
/// is online) until they got `want` events together or the time is up,
/// then until nothing more comes for [`QUIET`]; what each got.
async fn drain_group(
    c: &reqwest::Client,
    s: &Server,
    clients: &[&str],
    want: usize,
) -> Vec<Vec<String>> {
    let total = AtomicUsize::new(0);
    let deadline = Instant::now() + WAIT;
    let members = clients
        .iter()
        .map(|client| drain_member(c, s, client, &total, want, deadline));
    futures::future::join_all(members).await
}

/// One member of [`drain_group`]: what it got, sorted.
async fn drain_member(
    c: &reqwest::Client,
    s: &Server,
    client: &str,
    total: &AtomicUsize,
    want: usize,
    deadline: Instant,
) -> Vec<String> {
    let mut got = Vec::new();
    loop {
        let done = total.load(Ordering::SeqCst) >= want;
        let wait = if done {
            QUIET
        } else {
            Duration::from_millis(300)
        };
        let (status, batch) = poll_once(c, s, client, None, wait).await;
        assert_eq!(status, 200, "poll of {client}: {batch:?}");
        for d in &batch {
            got.push(d["event"]["id"].as_str().unwrap().to_string());
            assert_eq!(ack(c, s, d["deliveryId"].as_str().unwrap()).await, 200);
        }
        total.fetch_add(batch.len(), Ordering::SeqCst);
        if (done && batch.is_empty()) || Instant::now() >= deadline {
            got.sort();
            return got;
        }
    }
}

fn sorted(ids: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

async fn topic_names(c: &reqwest::Client, s: &Server) -> Vec<String> {
    let topics: Vec<Value> = admin_json(c, s, "/admin/topics").await;
    topics
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// `/admin/subscriptions`: each subscription's client id with the topics
/// its pattern follows (`None` for a subscription naming one topic).
async fn attached(c: &reqwest::Client, s: &Server) -> Vec<(String, Option<Vec<String>>)> {
    let subs: Vec<Value> = admin_json(c, s, "/admin/subscriptions").await;
    subs.iter()
        .map(|v| {
            let topics = v.get("attachedTopics").map(|a| {
                a.as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_str().unwrap().to_string())
                    .collect()
            });
            (v["clientId"].as_str().unwrap().to_string(), topics)
        })
        .collect()
}

fn owned(topics: &[&str]) -> Option<Vec<String>> {
    Some(topics.iter().map(|t| t.to_string()).collect())
}

/// Waits until the pattern subscription of `client` follows exactly
/// `topics`; what it follows at the end.
async fn follows(
    c: &reqwest::Client,
    s: &Server,
    client: &str,
    topics: &[&str],
) -> Option<Vec<String>> {
    let deadline = Instant::now() + WAIT;
    loop {
        let now = attached(c, s)
            .await
            .into_iter()
            .find(|(id, _)| id == client)
            .and_then(|(_, t)| t);
        if now == owned(topics) || Instant::now() >= deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_pattern_follows_existing_and_new_topics_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    publish(&c, &s, "orders.eu.created", &ev("pre", "t")).await;
    publish(&c, &s, "orders.eu.shipped", &ev("pre-shipped", "t")).await;

    // `created` from now on; `all` from the start of every topic.
    let (status, answer) = post_json(
        &c,
        s.url("/events/subscribe"),
        json!({"clientId": "created", "group": "created", "topic": "orders.*.created"}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["topic"], "orders.*.created");
    subscribe(
        &c,
        &s,
        json!({"clientId": "all", "group": "all", "topic": "orders.>", "from": "earliest"}),
    )
    .await;
    // No topic is made for a pattern; the existing ones are followed.
    assert_eq!(
        topic_names(&c, &s).await,
        ["orders.eu.created", "orders.eu.shipped"]
    );
    assert_eq!(
        attached(&c, &s).await,
        [
            (
                "all".to_string(),
                owned(&["orders.eu.created", "orders.eu.shipped"])
            ),
            ("created".to_string(), owned(&["orders.eu.created"])),
        ]
    );

    publish(&c, &s, "orders.eu.created", &ev("a1", "t")).await;
    // A topic made by the publish itself, and one made by the admin API.
    publish(&c, &s, "orders.us.created", &ev("a2", "t")).await;
    let (status, body) = admin(
        &c,
        &s,
        reqwest::Method::POST,
        "/admin/topics",
        Some(json!({"name": "orders.apac.created", "partitions": 2})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    publish(&c, &s, "orders.apac.created", &ev("a3", "t")).await;
    publish(&c, &s, "orders.eu.shipped", &ev("a4", "t")).await;
    publish(&c, &s, "payments.eu.created", &ev("a5", "t")).await;
    publish(&c, &s, "orders.created", &ev("a6", "t")).await;

    assert_eq!(
        drain(&c, &s, "created", None, 3).await,
        sorted(&["a1", "a2", "a3"])
    );
    assert_eq!(
        drain(&c, &s, "all", None, 7).await,
        sorted(&["pre", "pre-shipped", "a1", "a2", "a3", "a4", "a6"])
    );
    // Shown once each, with the topics followed.
    assert_eq!(
        attached(&c, &s).await,
        [
            (
                "all".to_string(),
                owned(&[
                    "orders.apac.created",
                    "orders.created",
                    "orders.eu.created",
                    "orders.eu.shipped",
                    "orders.us.created"
                ])
            ),
            (
                "created".to_string(),
                owned(&[
                    "orders.apac.created",
                    "orders.eu.created",
                    "orders.us.created"
                ])
            ),
        ]
    );
    // A topic's consumers include those of the patterns following it.
    let rows: Vec<Value> = admin_json(&c, &s, "/admin/offsets?topic=orders.us.created").await;
    let consumers: BTreeSet<&str> = rows
        .iter()
        .map(|r| r["consumer"].as_str().unwrap())
        .collect();
    assert_eq!(consumers, BTreeSet::from(["all", "created"]));
    assert!(committed_reaches(&c, &s, "orders.us.created", 2, WAIT).await);
}

/// The error code and message of a refused call.
fn refusal<T: std::fmt::Debug>(r: Result<T, Error>) -> (String, String) {
    match r {
        Err(Error::Api { code, message, .. }) => (code, message),
        other => panic!("expected an API error, got {other:?}"),
    }
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

#[tokio::test]
async fn malformed_patterns_are_refused_naming_the_problem() {
    let (_dir, s, sdk) = start_with_tcp();
    let c = client();
    let cases = [
        (
            "orders.*x",
            "token 2 (\"*x\") mixes a wildcard with other characters",
        ),
        ("ord*", "token 1 (\"ord*\") mixes a wildcard"),
        (
            "orders.>.created",
            "`>` is token 2 of 3; it may only be the last token",
        ),
        ("orders..*", "has an empty token (token 2)"),
        ("orders.* eu", "contains ' '"),
    ];
    for (pattern, says) in cases {
        let (status, v) = post_json(
            &c,
            s.url("/events/subscribe"),
            json!({"clientId": "c", "topic": pattern}),
        )
        .await;
        assert_eq!(
            (status, v["error"].as_str()),
            (400, Some("invalid_pattern")),
            "{pattern}: {v}"
        );
        assert!(
            v["message"].as_str().unwrap().contains(says),
            "{pattern}: {v}"
        );
        let tcp = sdk.tcp("c-tcp").await.unwrap();
        let (code, message) = refusal(
            tcp.subscribe(SubscribeOptions::new("ignored", pattern))
                .await,
        );
        assert_eq!(code, "invalid_pattern", "{pattern}");
        assert!(message.contains(says), "{pattern}: {message}");
        let _ = tcp.goodbye().await;
        let r = c
            .get(s.url(&format!(
                "/events/stream?clientId=c-sse&topic={}",
                urlencode(pattern)
            )))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{pattern}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"], "invalid_pattern", "{pattern}");
    }
    let subs: Vec<Value> = admin_json(&c, &s, "/admin/subscriptions").await;
    assert_eq!(subs, Vec::<Value>::new());
    assert_eq!(topic_names(&c, &s).await, Vec::<String>::new());
}

const ALICE: &str = "alice-token";
const BOB: &str = "bob-token";

async fn publish_as(c: &reqwest::Client, s: &Server, topic: &str, id: &str) {
    let r = c
        .post(s.url(&format!("/events/publish?topic={topic}")))
        .bearer_auth(ALICE)
        .header("content-type", "application/cloudevents+json")
        .body(serde_json::to_vec(&ev(id, "t")).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "{topic}: {}", r.text().await.unwrap());
}

#[tokio::test]
async fn the_acl_keeps_denied_topics_out_and_counts_each() {
    let files = GateFiles::new(&format!("{ALICE} acme alice\n{BOB} globex bob auditor\n"));
    // Bob may subscribe to the pattern `orders.>` itself (an exact rule:
    // the ACL's `*` is a prefix wildcard at the end of a rule, not a
    // pattern token), to `orders.eu*` and `orders.us*`, and, through his
    // role, to `orders.audit*`; nothing else.
    let acl = files.acl(
        "allow alice PUBLISH *\n\
         allow bob SUBSCRIBE orders.>\n\
         allow bob SUBSCRIBE orders.eu*\n\
         allow bob SUBSCRIBE orders.us*\n\
         allow role:auditor SUBSCRIBE orders.audit*\n\
         allow bob ACK *\n",
    );
    let s = start_closed(&files, &[acl, files.audit_file()]);
    let c = client();
    publish_as(&c, &s, "orders.eu", "eu-pre").await;
    publish_as(&c, &s, "orders.secret", "secret-pre").await;
    let denied = r#"eventmesh_gate_denied_total{reason="acl_denied"}"#;
    assert_eq!(counter(&c, &s, denied).await, 0.0);

    let r = c
        .post(s.url("/events/subscribe"))
        .bearer_auth(BOB)
        .json(&json!({"clientId": "bob-1", "topic": "orders.>", "from": "earliest"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    // The existing topic Bob may not read was decided when subscribing.
    assert_eq!(counter(&c, &s, denied).await, 1.0);
    assert_eq!(
        attached(&c, &s).await,
        [("bob-1".to_string(), owned(&["orders.eu"]))]
    );
    // The roles are stored with the subscription.
    let subs: Vec<Value> = admin_json(&c, &s, "/admin/subscriptions").await;
    assert_eq!(subs[0]["roles"], json!(["auditor"]));
    assert_eq!(subs[0]["principal"], "bob");

    publish_as(&c, &s, "orders.eu", "eu-1").await;
    publish_as(&c, &s, "orders.secret", "secret-1").await;
    publish_as(&c, &s, "orders.us", "us-1").await;
    publish_as(&c, &s, "orders.vault", "vault-1").await;
    publish_as(&c, &s, "orders.audit.log", "audit-1").await;
    assert_eq!(
        drain(&c, &s, "bob-1", Some(BOB), 4).await,
        sorted(&["eu-pre", "eu-1", "us-1", "audit-1"])
    );
    assert_eq!(counter_reaching(&c, &s, denied, 2.0, WAIT).await, 2.0);
    assert_eq!(
        follows(
            &c,
            &s,
            "bob-1",
            &["orders.audit.log", "orders.eu", "orders.us"]
        )
        .await,
        owned(&["orders.audit.log", "orders.eu", "orders.us"])
    );
    // Each decision is audited once, over transport `pattern`, as Bob.
    let mut decisions: Vec<(String, String, String)> = files
        .audit()
        .iter()
        .filter(|e| e["transport"] == "pattern")
        .map(|e| {
            assert_eq!(
                (e["principal"].as_str(), e["tenant"].as_str()),
                (Some("bob"), Some("globex"))
            );
            assert_eq!(e["operation"], "SUBSCRIBE");
            (
                e["topic"].as_str().unwrap().to_string(),
                e["verdict"].as_str().unwrap().to_string(),
                e["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    decisions.sort();
    let want: Vec<(String, String, String)> = [
        ("orders.audit.log", "allow", ""),
        ("orders.eu", "allow", ""),
        ("orders.secret", "deny", "acl_denied"),
        ("orders.us", "allow", ""),
        ("orders.vault", "deny", "acl_denied"),
    ]
    .iter()
    .map(|(t, v, r)| (t.to_string(), v.to_string(), r.to_string()))
    .collect();
    assert_eq!(decisions, want);
}

fn big_orders() -> Vec<Value> {
    vec![
        json!({"exact": {"type": "order.created"}}),
        json!({"sql": "amount > 100"}),
    ]
}

fn ids(got: &[Delivery]) -> Vec<String> {
    let mut v: Vec<String> = got
        .iter()
        .map(|d| d.event["id"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn patterns_take_filters_on_every_transport() {
    let (_dir, s, sdk) = start_with_tcp();
    let c = client();
    publish(&c, &s, "shop.eu", &order("x0", "order.created", 500)).await;
    let stream_opts = |client: &str| {
        big_orders().into_iter().fold(
            StreamOptions::new(client)
                .topic("shop.*")
                .group(client)
                .from(StartFrom::Earliest),
            StreamOptions::filter,
        )
    };
    let mut sse = sdk.sse(stream_opts("sse")).await.unwrap();
    let mut ws = sdk.websocket(stream_opts("ws")).await.unwrap();
    let mut tcp = sdk.tcp("tcp").await.unwrap();
    let opts = |client: &str| {
        big_orders().into_iter().fold(
            SubscribeOptions::new(client, "shop.*")
                .group(client)
                .from(StartFrom::Earliest),
            SubscribeOptions::filter,
        )
    };
    tcp.subscribe(opts("tcp")).await.unwrap();
    let (hook_url, hook) = start_hook(HookMode::Accept).await;
    sdk.subscribe(opts("hook").webhook(&hook_url))
        .await
        .unwrap();

    // One topic there before, one made by the publish; another that does
    // not match.
    for (topic, e) in [
        ("shop.eu", order("e1", "order.created", 150)),
        ("shop.eu", order("e2", "order.created", 50)),
        ("shop.us", order("e3", "order.created", 300)),
        ("shop.us", order("e4", "order.cancelled", 300)),
        ("shop.us.west", order("e5", "order.created", 300)),
    ] {
        publish(&c, &s, topic, &e).await;
    }
    let want = sorted(&["x0", "e1", "e3"]);
    let got = take_sse(&sdk, &mut sse, 3).await;
    assert_eq!(ids(&got), want, "SSE");
    let got = take_ws(&mut ws, 3).await;
    assert_eq!(ids(&got), want, "WebSocket");
    let got = take_tcp(&mut tcp, 3).await;
    assert_eq!(ids(&got), want, "TCP");
    assert!(
        wait_until(|| hook.lock().unwrap().accepted_ids().len() >= 3, WAIT).await,
        "three pushes"
    );
    // Every consumer moved past everything of both topics: three events
    // of shop.eu (one skipped), two of shop.us (one skipped).
    for group in ["sse", "ws", "tcp", "hook"] {
        for (topic, skipped) in [("shop.eu", 1.0), ("shop.us", 1.0)] {
            let series =
                format!(r#"eventmesh_filter_skipped_total{{topic="{topic}",group="{group}"}}"#);
            assert_eq!(
                counter_reaching(&c, &s, &series, skipped, WAIT).await,
                skipped,
                "{group} {topic}"
            );
        }
    }
    assert!(committed_reaches(&c, &s, "shop.eu", 3 * 4, WAIT).await);
    assert!(committed_reaches(&c, &s, "shop.us", 2 * 4, WAIT).await);
    let mut pushed = hook.lock().unwrap().accepted_ids();
    pushed.sort();
    assert_eq!(pushed, want);
    ws.close().await;
    let _ = tcp.goodbye().await;
}

#[tokio::test]
async fn a_load_balanced_group_shares_every_topic_of_its_pattern() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    publish(&c, &s, "jobs.a", &ev("pre", "t")).await;
    for m in ["m1", "m2"] {
        subscribe(
            &c,
            &s,
            json!({"clientId": m, "group": "workers", "topic": "jobs.*", "from": "earliest"}),
        )
        .await;
    }
    // Another subscription of the group on an overlapping pattern must
    // keep the group's mode and filters.
    for (body, says) in [
        (
            json!({"clientId": "m3", "group": "workers", "topic": "jobs.>", "mode": "BROADCAST"}),
            "on topic \"jobs.*\" (which overlaps \"jobs.>\") already has LoadBalance members",
        ),
        (
            json!({"clientId": "m3", "group": "workers", "topic": "jobs.b",
                   "filters": [{"exact": {"type": "x"}}]}),
            "already has members with other filters",
        ),
    ] {
        let (status, v) = post_json(&c, s.url("/events/subscribe"), body).await;
        assert_eq!(
            (status, v["error"].as_str()),
            (409, Some("conflict")),
            "{v}"
        );
        assert!(v["message"].as_str().unwrap().contains(says), "{v}");
    }
    // A pattern that does not overlap is another matter.
    subscribe(
        &c,
        &s,
        json!({"clientId": "m3", "group": "workers", "topic": "mail.*", "mode": "BROADCAST"}),
    )
    .await;

    let mut want = vec!["pre".to_string()];
    for (topic, n) in [("jobs.a", 0..15), ("jobs.b", 15..30)] {
        let batch: Vec<Value> = n
            .map(|i| {
                let mut e = ev(&format!("j{i}"), "t");
                e["partitionkey"] = json!(format!("k{i}"));
                want.push(format!("j{i}"));
                e
            })
            .collect();
        publish_batch(&c, &s, topic, &batch).await;
    }
    want.sort();
    // Both members take part, and together they get each event once.
    let got = drain_group(&c, &s, &["m1", "m2"], want.len()).await;
    let (m1, m2) = (&got[0], &got[1]);
    let mut all: Vec<String> = m1.iter().chain(m2).cloned().collect();
    all.sort();
    assert_eq!(all, want, "m1 {m1:?} m2 {m2:?}");
    assert!(!m1.is_empty() && !m2.is_empty(), "m1 {m1:?} m2 {m2:?}");
    // One consumer (the group) per topic.
    for (topic, events) in [("jobs.a", 16), ("jobs.b", 15)] {
        let rows: Vec<Value> = admin_json(&c, &s, &format!("/admin/offsets?topic={topic}")).await;
        let consumers: BTreeSet<&str> = rows
            .iter()
            .map(|r| r["consumer"].as_str().unwrap())
            .collect();
        assert_eq!(consumers, BTreeSet::from(["workers"]), "{topic}");
        assert!(
            committed_reaches(&c, &s, topic, events, WAIT).await,
            "{topic}"
        );
    }
}

#[tokio::test]
async fn deleted_topics_are_detached_and_unsubscribe_stops_everything() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    publish(&c, &s, "news.a", &ev("a0", "t")).await;
    publish(&c, &s, "news.b", &ev("b0", "t")).await;
    subscribe(
        &c,
        &s,
        json!({"clientId": "reader", "topic": "news.>", "from": "earliest"}),
    )
    .await;
    assert_eq!(
        drain(&c, &s, "reader", None, 2).await,
        sorted(&["a0", "b0"])
    );

    // A topic the pattern follows is not in use: deleting it detaches it.
    let (status, body) = admin(
        &c,
        &s,
        reqwest::Method::DELETE,
        "/admin/topics/news.b",
        None,
    )
    .await;
    assert_eq!(status, 204, "{body}");
    assert_eq!(
        attached(&c, &s).await,
        [("reader".to_string(), owned(&["news.a"]))]
    );
    // Made again, it is a new topic: followed from its start.
    publish(&c, &s, "news.b", &ev("b1", "t")).await;
    publish(&c, &s, "news.b", &ev("b2", "t")).await;
    assert_eq!(
        drain(&c, &s, "reader", None, 2).await,
        sorted(&["b1", "b2"])
    );
    assert_eq!(
        follows(&c, &s, "reader", &["news.a", "news.b"]).await,
        owned(&["news.a", "news.b"])
    );

    // Unsubscribing the pattern ends it on every topic.
    let (status, v) = post_json(
        &c,
        s.url("/events/unsubscribe"),
        json!({"clientId": "reader", "topic": "news.>"}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let subs: Vec<Value> = admin_json(&c, &s, "/admin/subscriptions").await;
    assert_eq!(subs, Vec::<Value>::new());
    for topic in ["news.a", "news.b"] {
        let rows: Vec<Value> = admin_json(&c, &s, &format!("/admin/offsets?topic={topic}")).await;
        assert_eq!(rows, Vec::<Value>::new(), "{topic}");
    }
    publish(&c, &s, "news.a", &ev("a1", "t")).await;
    publish(&c, &s, "news.c", &ev("c1", "t")).await;
    let (status, v) = poll_once(&c, &s, "reader", None, Duration::from_millis(100)).await;
    assert_eq!(status, 404, "{v:?}");
    assert_eq!(metric(&c, &s, "eventmesh_pending_deliveries").await, 0.0);
}
