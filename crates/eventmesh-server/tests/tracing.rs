//! W3C trace context through the mesh, end to end: the real binary exports
//! its spans over OTLP/HTTP (protobuf) to a collector this test runs (an
//! axum server decoding `ExportTraceServiceRequest`), and a webhook
//! receiver and a polling client show what subscribers get: publishes over
//! HTTP, TCP and WebSocket, on either log backend, and a delivery forwarded
//! between the instances of a `PARTITION_OWNED_PULL` mesh. The checks are
//! exact: trace ids, parent span ids, the `traceparent` each subscriber
//! receives. Every wait is bounded; spans are awaited by polling what the
//! collector received, until a deadline.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::routing::post;
use common::{ack, client, poll_n, run_to_exit, subscribe, Server};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use prost::Message;
use serde_json::{json, Value};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";
const TOPIC: &str = "orders";
/// Spans arrive in batches (every 5 s by default) or at shutdown.
const SPANS_WITHIN: Duration = Duration::from_secs(30);

/// One span as the collector received it, ids in lower-case hex.
#[derive(Debug, Clone)]
struct Seen {
    name: String,
    trace: String,
    id: String,
    /// Empty for a root span.
    parent: String,
    kind: i32,
    attrs: HashMap<String, String>,
}

impl Seen {
    fn attr(&self, key: &str) -> &str {
        self.attrs.get(key).map_or("", String::as_str)
    }
}

#[derive(Default)]
struct Collector {
    spans: Vec<Seen>,
    /// `service.name` of every resource seen.
    services: Vec<String>,
    /// Requests refused (wrong content type, undecodable body).
    refused: Vec<String>,
}

type Shared = Arc<Mutex<Collector>>;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(v: &Option<AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn attrs(list: &[KeyValue]) -> HashMap<String, String> {
    list.iter()
        .map(|kv| (kv.key.clone(), text(&kv.value)))
        .collect()
}

/// `POST /v1/traces`: OTLP/HTTP with a protobuf body.
async fn traces(
    State(c): State<Shared>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> (StatusCode, [(header::HeaderName, &'static str); 1], Vec<u8>) {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let protobuf = [(header::CONTENT_TYPE, "application/x-protobuf")];
    if ct != "application/x-protobuf" {
        c.lock()
            .unwrap()
            .refused
            .push(format!("content type {ct:?}"));
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, protobuf, Vec::new());
    }
    let request = match ExportTraceServiceRequest::decode(body) {
        Ok(r) => r,
        Err(e) => {
            c.lock().unwrap().refused.push(format!("undecodable: {e}"));
            return (StatusCode::BAD_REQUEST, protobuf, Vec::new());
        }
    };
    let mut c = c.lock().unwrap();
    for resource in request.resource_spans {
        let resource_attrs = resource.resource.map(|r| attrs(&r.attributes));
        if let Some(name) = resource_attrs.and_then(|a| a.get("service.name").cloned()) {
            c.services.push(name);
        }
        for scope in resource.scope_spans {
            for s in scope.spans {
                c.spans.push(Seen {
                    name: s.name,
                    trace: hex(&s.trace_id),
                    id: hex(&s.span_id),
                    parent: hex(&s.parent_span_id),
                    kind: s.kind,
                    attrs: attrs(&s.attributes),
                });
            }
        }
    }
    let answer = ExportTraceServiceResponse::default().encode_to_vec();
    (StatusCode::OK, protobuf, answer)
}

/// Starts the collector; its base URL (the OTLP/HTTP endpoint).
async fn start_collector() -> (String, Shared) {
    let shared = Shared::default();
    let app = axum::Router::new()
        .route("/v1/traces", post(traces))
        .with_state(shared.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), shared)
}

/// Headers of every push the webhook receiver took (all answered 200).
type Pushes = Arc<Mutex<Vec<HashMap<String, String>>>>;

async fn start_hook() -> (String, Pushes) {
    async fn take(State(p): State<Pushes>, headers: HeaderMap) -> StatusCode {
        let seen = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_string()))
            .collect();
        p.lock().unwrap().push(seen);
        StatusCode::OK
    }
    let pushes = Pushes::default();
    let app = axum::Router::new()
        .route("/hook", post(take).options(common::hook::allow_any_origin))
        .with_state(pushes.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/hook"), pushes)
}

/// An event `id`, with the given extension attributes.
fn event(id: &str, extensions: &[(&str, &str)]) -> Value {
    let mut e = json!({
        "specversion": "1.0", "id": id, "source": "/shop", "type": "order.created",
        "datacontenttype": "application/json", "data": {"n": id},
    });
    for (k, v) in extensions {
        e[*k] = json!(v);
    }
    e
}

/// Publishes `ev` (202 expected); its `(partition, offset)`.
async fn publish(c: &reqwest::Client, s: &Server, ev: &Value) -> (String, String) {
    let answer = common::publish(c, s, TOPIC, ev).await;
    let at = |k: &str| answer[k].to_string();
    (at("partition"), at("offset"))
}

/// The polled deliveries of events `ids` (acknowledged), as the poller got
/// them, by id.
async fn polled_all(c: &reqwest::Client, s: &Server, ids: &[&str]) -> HashMap<String, Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = HashMap::new();
    while got.len() < ids.len() {
        assert!(
            Instant::now() < deadline,
            "polled {:?} of {ids:?}",
            got.keys()
        );
        for d in poll_n(c, s, "poller", 1, Duration::from_secs(1)).await {
            assert_eq!(ack(c, s, d["deliveryId"].as_str().unwrap()).await, 200);
            let id = d["event"]["id"].as_str().unwrap().to_string();
            got.insert(id, d["event"].clone());
        }
    }
    got
}

/// The polled delivery of event `id` (acknowledged), as the poller got it.
async fn polled(c: &reqwest::Client, s: &Server, id: &str) -> Value {
    polled_all(c, s, &[id])
        .await
        .remove(id)
        .unwrap_or_else(|| panic!("no {id}"))
}

/// The push of event `id` the webhook got, waiting for it up to 10 s.
async fn pushed(pushes: &Pushes, id: &str) -> HashMap<String, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = pushes
            .lock()
            .unwrap()
            .iter()
            .find(|h| h.get("ce-id").map(String::as_str) == Some(id))
            .cloned();
        if let Some(h) = found {
            return h;
        }
        assert!(Instant::now() < deadline, "no push of {id}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The spans of `trace` once publish, append, push and two dispatches
/// (poller and webhook) arrived.
async fn chain_of(c: &Shared, trace: &str) -> Vec<Seen> {
    let deadline = Instant::now() + SPANS_WITHIN;
    loop {
        let spans: Vec<Seen> = {
            let c = c.lock().unwrap();
            assert!(c.refused.is_empty(), "collector refused: {:?}", c.refused);
            c.spans
                .iter()
                .filter(|s| s.trace == trace)
                .cloned()
                .collect()
        };
        let count = |n: &str| spans.iter().filter(|s| s.name == n).count();
        let counts = [
            count("publish"),
            count("append"),
            count("dispatch"),
            count("push"),
        ];
        if counts == [1, 1, 2, 1] {
            return spans;
        }
        assert!(
            Instant::now() < deadline,
            "spans of trace {trace} did not arrive: {spans:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn one<'a>(spans: &'a [Seen], name: &str, channel: Option<&str>) -> &'a Seen {
    let mut hits = spans
        .iter()
        .filter(|s| s.name == name && channel.is_none_or(|c| s.attr("channel") == c));
    let hit = hits.next().unwrap_or_else(|| panic!("no {name} span"));
    assert!(hits.next().is_none(), "more than one {name} span");
    hit
}

const INTERNAL: i32 = 1;
const SERVER: i32 = 2;
const CLIENT: i32 = 3;
const PRODUCER: i32 = 4;

/// Checks the links of one event's spans: publish (a child of `parent`, or
/// a root), append and both dispatches its children, push a child of the
/// webhook's dispatch. Returns the publish and push span ids.
fn check_chain(spans: &[Seen], id: &str, parent: &str, at: &(String, String)) -> (String, String) {
    let publish = one(spans, "publish", None);
    assert_eq!(publish.parent, parent, "publish parent");
    assert_eq!(publish.kind, SERVER);
    assert_eq!(publish.attr("topic"), TOPIC);
    assert_eq!(publish.attr("event.id"), id);
    assert_eq!(publish.attr("outcome"), "ok");
    assert_eq!(
        (publish.attr("partition"), publish.attr("offset")),
        (&*at.0, &*at.1)
    );
    // OpenTelemetry's messaging conventions, beside the names above.
    for (key, value) in [
        ("messaging.system", "eventmesh"),
        ("messaging.operation.type", "send"),
        ("messaging.operation.name", "publish"),
        ("messaging.destination.name", TOPIC),
        ("messaging.message.id", id),
        ("messaging.destination.partition.id", &at.0),
    ] {
        assert_eq!(publish.attr(key), value, "publish {key}");
    }
    let append = one(spans, "append", None);
    assert_eq!(append.parent, publish.id, "append parent");
    assert_eq!(append.kind, INTERNAL);
    assert_eq!(
        (append.attr("partition"), append.attr("offset")),
        (&*at.0, &*at.1)
    );
    assert_eq!(append.attr("outcome"), "ok");
    let to_poller = one(spans, "dispatch", Some("mailbox"));
    let to_hook = one(spans, "dispatch", Some("webhook"));
    for (d, group, client) in [
        (to_poller, "pollers", "poller"),
        (to_hook, "hooks", "hook-1"),
    ] {
        assert_eq!(d.parent, publish.id, "dispatch parent");
        assert_eq!(d.kind, PRODUCER);
        assert_eq!((d.attr("group"), d.attr("client")), (group, client));
        assert_eq!((d.attr("partition"), d.attr("offset")), (&*at.0, &*at.1));
        assert_eq!((d.attr("event.id"), d.attr("attempt")), (id, "1"));
        for (key, value) in [
            ("messaging.system", "eventmesh"),
            ("messaging.operation.name", "dispatch"),
            ("messaging.destination.name", TOPIC),
            ("messaging.consumer.group.name", group),
            ("messaging.destination.partition.id", &at.0),
            ("messaging.message.id", id),
        ] {
            assert_eq!(d.attr(key), value, "dispatch {key}");
        }
    }
    let push = one(spans, "push", None);
    assert_eq!(push.parent, to_hook.id, "push parent");
    assert_eq!(push.kind, CLIENT);
    assert_eq!(push.attr("http.response.status_code"), "200");
    assert_eq!(push.attr("outcome"), "ok");
    (publish.id.clone(), push.id.clone())
}

/// The trace id a `traceparent` names.
fn trace_of(traceparent: &str) -> String {
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    parts[1].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_follows_each_event_from_publish_to_every_delivery() {
    let (endpoint, collector) = start_collector().await;
    let (hook_url, pushes) = start_hook().await;
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(
        dir.path(),
        &[
            &format!("eventmesh.tracing.otlp.endpoint={endpoint}"),
            "eventmesh.tracing.service.name=mesh-test",
        ],
    );
    let c = client();
    let hook = json!({"clientId": "hook-1", "topic": TOPIC, "group": "hooks", "url": hook_url});
    subscribe(&c, &s, hook).await;
    subscribe(
        &c,
        &s,
        json!({"clientId": "poller", "topic": TOPIC, "group": "pollers"}),
    )
    .await;

    // 1. A client's context: trace T, span S, a tracestate.
    let client_parent = format!("00-{TRACE}-{CLIENT_SPAN}-01");
    let ev = event(
        "e1",
        &[("traceparent", &client_parent), ("tracestate", "vendor=1")],
    );
    let at = publish(&c, &s, &ev).await;
    let got = polled(&c, &s, "e1").await;
    let hooked = pushed(&pushes, "e1").await;
    let spans = chain_of(&collector, TRACE).await;
    let (publish_span, push_span) = check_chain(&spans, "e1", CLIENT_SPAN, &at);
    // Subscribers continue from the publish span, in the client's trace.
    let stored = format!("00-{TRACE}-{publish_span}-01");
    assert_eq!(got["traceparent"], stored.as_str());
    assert_eq!(got["tracestate"], "vendor=1");
    assert_eq!(hooked["ce-traceparent"], stored);
    assert_eq!(hooked["ce-tracestate"], "vendor=1");
    // The webhook call itself carries the push span.
    assert_eq!(hooked["traceparent"], format!("00-{TRACE}-{push_span}-01"));
    assert_eq!(hooked["tracestate"], "vendor=1");

    // 2. No context: a new trace, linked the same way.
    let at = publish(&c, &s, &event("e2", &[])).await;
    let got = polled(&c, &s, "e2").await;
    let traceparent = got["traceparent"]
        .as_str()
        .expect("a traceparent")
        .to_string();
    let fresh = trace_of(&traceparent);
    assert_ne!(fresh, TRACE);
    let spans = chain_of(&collector, &fresh).await;
    let (publish_span, _) = check_chain(&spans, "e2", "", &at);
    assert_eq!(traceparent, format!("00-{fresh}-{publish_span}-01"));
    assert_eq!(pushed(&pushes, "e2").await["ce-traceparent"], traceparent);

    // 3. A malformed traceparent (upper-case hex) does not fail the
    // publish: it counts as none, and its tracestate goes with it.
    let bad = format!("00-{}-{CLIENT_SPAN}-01", TRACE.to_uppercase());
    let ev = event("e3", &[("traceparent", &bad), ("tracestate", "stale=1")]);
    let at = publish(&c, &s, &ev).await;
    let got = polled(&c, &s, "e3").await;
    let traceparent = got["traceparent"].as_str().unwrap().to_string();
    let fresh3 = trace_of(&traceparent);
    assert!(fresh3 != TRACE && fresh3 != fresh, "{traceparent}");
    assert_eq!(got.get("tracestate"), None);
    let spans = chain_of(&collector, &fresh3).await;
    let (publish_span, _) = check_chain(&spans, "e3", "", &at);
    assert_eq!(traceparent, format!("00-{fresh3}-{publish_span}-01"));

    // 4. No context in the event, but the W3C `traceparent` and
    // `tracestate` HTTP headers that OpenTelemetry's HTTP instrumentation
    // sends: the trace continues from them, and the event carries it on.
    let (http_trace, http_span) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let publish_with = |ev: Value| {
        c.post(s.url(&format!("/events/publish?topic={TOPIC}")))
            .header("traceparent", format!("00-{http_trace}-{http_span}-01"))
            .header("tracestate", "http=1")
            .header("content-type", "application/cloudevents+json")
            .body(ev.to_string())
            .send()
    };
    let r = publish_with(event("e4", &[])).await.unwrap();
    assert_eq!(r.status(), 202);
    let answer: Value = r.json().await.unwrap();
    let at = (
        answer["partition"].to_string(),
        answer["offset"].to_string(),
    );
    let got = polled(&c, &s, "e4").await;
    let spans = chain_of(&collector, http_trace).await;
    let (publish_span, _) = check_chain(&spans, "e4", http_span, &at);
    let stored = format!("00-{http_trace}-{publish_span}-01");
    assert_eq!(got["traceparent"], stored.as_str());
    assert_eq!(got["tracestate"], "http=1");
    assert_eq!(pushed(&pushes, "e4").await["ce-traceparent"], stored);
    // 5. An event's own context wins over the HTTP headers'.
    let own = event(
        "e5",
        &[("traceparent", &client_parent), ("tracestate", "vendor=1")],
    );
    let r = publish_with(own).await.unwrap();
    assert_eq!(r.status(), 202);
    let got = polled(&c, &s, "e5").await;
    assert_eq!(trace_of(got["traceparent"].as_str().unwrap()), TRACE);
    assert_eq!(got["tracestate"], "vendor=1");

    {
        let c = collector.lock().unwrap();
        assert!(!c.services.is_empty() && c.services.iter().all(|n| n == "mesh-test"));
    }
    assert!(s.stop().success(), "{}", s.log_text());
    assert!(
        s.log_text().contains("trace spans flushed"),
        "{}",
        s.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_endpoint_events_keep_the_context_they_came_with() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &[]);
    let c = client();
    subscribe(
        &c,
        &s,
        json!({"clientId": "poller", "topic": TOPIC, "group": "pollers"}),
    )
    .await;
    let client_parent = format!("00-{TRACE}-{CLIENT_SPAN}-01");
    let sent = [
        ("e1", client_parent.as_str(), "vendor=1"),
        ("e2", "not a traceparent", "stale=1"),
    ];
    for (id, traceparent, tracestate) in sent {
        let ev = event(
            id,
            &[("traceparent", traceparent), ("tracestate", tracestate)],
        );
        publish(&c, &s, &ev).await;
    }
    let mut got = polled_all(&c, &s, &["e1", "e2"]).await;
    for (id, traceparent, tracestate) in sent {
        let got = got.remove(id).unwrap();
        assert_eq!(
            (&got["traceparent"], &got["tracestate"]),
            (&json!(traceparent), &json!(tracestate))
        );
    }
    let got = {
        publish(&c, &s, &event("e3", &[])).await;
        polled(&c, &s, "e3").await
    };
    assert_eq!(got.get("traceparent"), None);
    assert!(!s.log_text().contains("exporting trace spans"));
    assert!(s.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_collector_never_holds_up_the_data_path() {
    // Nothing listens on this port: every export fails.
    let endpoint = format!("http://127.0.0.1:{}", common::free_port());
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(
        dir.path(),
        &[&format!("eventmesh.tracing.otlp.endpoint={endpoint}")],
    );
    let c = client();
    subscribe(
        &c,
        &s,
        json!({"clientId": "poller", "topic": TOPIC, "group": "pollers"}),
    )
    .await;
    publish(&c, &s, &event("e1", &[])).await;
    let got = polled(&c, &s, "e1").await;
    assert!(got["traceparent"]
        .as_str()
        .is_some_and(|t| t.starts_with("00-")));
    let stopping = Instant::now();
    assert!(s.stop().success(), "{}", s.log_text());
    // The final flush is bounded by the export timeout.
    assert!(stopping.elapsed() < Duration::from_secs(25));
}

#[test]
fn bad_tracing_values_exit_2_naming_key_and_value() {
    for (kv, parts) in [
        (
            "eventmesh.tracing.otlp.endpoint=grpc://otel:4317",
            [
                "eventmesh.tracing.otlp.endpoint",
                "\"grpc://otel:4317\"",
                "http:// or https://",
            ],
        ),
        (
            "eventmesh.tracing.sample.ratio=1.5",
            [
                "eventmesh.tracing.sample.ratio",
                "\"1.5\"",
                "fraction from 0 to 1",
            ],
        ),
    ] {
        let args = ["serve", "-D", "eventmesh.storage.type=standalone", "-D", kv];
        let (status, err) = run_to_exit(&args, &[]);
        assert_eq!(status.code(), Some(2), "{kv}: {err}");
        for p in parts {
            assert!(err.contains(p), "{kv}: {err:?} should name {p}");
        }
    }
}

/// The spans of `trace` once exactly `want` (name, count) arrived.
async fn spans_of(c: &Shared, trace: &str, want: &[(&str, usize)]) -> Vec<Seen> {
    let deadline = Instant::now() + SPANS_WITHIN;
    loop {
        let spans: Vec<Seen> = {
            let c = c.lock().unwrap();
            assert!(c.refused.is_empty(), "collector refused: {:?}", c.refused);
            c.spans
                .iter()
                .filter(|s| s.trace == trace)
                .cloned()
                .collect()
        };
        let counts: Vec<(&str, usize)> = want
            .iter()
            .map(|(n, _)| (*n, spans.iter().filter(|s| s.name == *n).count()))
            .collect();
        if counts == want && spans.len() == want.iter().map(|(_, k)| k).sum::<usize>() {
            return spans;
        }
        assert!(
            Instant::now() < deadline,
            "spans of trace {trace} did not arrive: {spans:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Checks one event's publish (a child of the client's span), append and
/// mailbox dispatch (children of the publish) in `spans`, and that the
/// poller got the `traceparent` naming the publish span; the publish span.
fn check_polled_chain<'a>(
    spans: &'a [Seen],
    trace: &str,
    id: &str,
    at: (u32, u64),
    got: &Value,
) -> &'a Seen {
    let (partition, offset) = (at.0.to_string(), at.1.to_string());
    let publish = one(spans, "publish", None);
    assert_eq!(
        (publish.parent.as_str(), publish.kind),
        (CLIENT_SPAN, SERVER),
        "{id}"
    );
    assert_eq!(
        (publish.attr("event.id"), publish.attr("outcome")),
        (id, "ok")
    );
    assert_eq!(
        (publish.attr("partition"), publish.attr("offset")),
        (&*partition, &*offset),
        "{id}"
    );
    let append = one(spans, "append", None);
    assert_eq!(
        (append.parent.as_str(), append.kind),
        (publish.id.as_str(), INTERNAL),
        "{id}"
    );
    let dispatch = one(spans, "dispatch", Some("mailbox"));
    assert_eq!(
        (dispatch.parent.as_str(), dispatch.kind),
        (publish.id.as_str(), PRODUCER),
        "{id}"
    );
    assert_eq!(
        (dispatch.attr("client"), dispatch.attr("event.id")),
        ("poller", id)
    );
    assert_eq!(
        got["traceparent"],
        format!("00-{trace}-{}-01", publish.id),
        "{id}"
    );
    publish
}

/// A publish over the TCP protocol and one over a WebSocket, each with a
/// client's `traceparent`, followed to the poller's delivery.
async fn tcp_and_websocket_publishes_are_traced(storage: &[&str]) {
    use eventmesh_client::{EventMeshClient, StreamOptions};
    const OVER_TCP: &str = "0af7651916cd43dd8448eb211c80319c";
    const OVER_WS: &str = "5b8efff798038103d269b633813fc60c";
    let (endpoint, collector) = start_collector().await;
    let dir = tempfile::tempdir().unwrap();
    let mut settings = vec![
        format!("eventmesh.tracing.otlp.endpoint={endpoint}"),
        "eventmesh.server.tcp.port=0".to_string(),
    ];
    settings.extend(storage.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = settings.iter().map(String::as_str).collect();
    let mut s = Server::start(dir.path(), &refs);
    let c = client();
    subscribe(
        &c,
        &s,
        json!({"clientId": "poller", "topic": TOPIC, "group": "pollers"}),
    )
    .await;
    let sdk = EventMeshClient::new(s.traffic.clone())
        .unwrap()
        .with_tcp(s.tcp.clone().expect("the TCP port"));
    let parent = |trace: &str| format!("00-{trace}-{CLIENT_SPAN}-01");

    let tcp = sdk.tcp("tcp-publisher").await.unwrap();
    let ev = event("over-tcp", &[("traceparent", &parent(OVER_TCP))]);
    let by_tcp = tcp.publish(TOPIC, &ev).await.unwrap();
    let _ = tcp.goodbye().await;
    let ws = sdk
        .websocket(StreamOptions::new("ws-publisher"))
        .await
        .unwrap();
    let ev = event("over-ws", &[("traceparent", &parent(OVER_WS))]);
    let by_ws = ws.publish(TOPIC, &ev).await.unwrap();
    ws.close().await;

    let got = polled_all(&c, &s, &["over-tcp", "over-ws"]).await;
    let want = [("publish", 1), ("append", 1), ("dispatch", 1)];
    for (id, trace, at) in [
        ("over-tcp", OVER_TCP, &by_tcp),
        ("over-ws", OVER_WS, &by_ws),
    ] {
        let spans = spans_of(&collector, trace, &want).await;
        check_polled_chain(&spans, trace, id, (at.partition, at.offset), &got[id]);
    }
    assert!(s.stop().success(), "{}", s.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_follows_tcp_and_websocket_publishes_to_the_delivery() {
    tcp_and_websocket_publishes_are_traced(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_follows_tcp_and_websocket_publishes_on_jetstream() {
    let nats = eventmesh_jetstream::testutil::NatsServer::start();
    let servers = format!("eventmesh.storage.jetstream.servers={}", nats.url());
    tcp_and_websocket_publishes_are_traced(&["eventmesh.storage.type=jetstream", &servers]).await;
}

/// `PARTITION_OWNED_PULL`: the owner of the event's partition dispatches
/// it and forwards it to the instance its client polls; the forward is a
/// span of the same trace, a child of the publish like the dispatch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_forwarded_to_the_clients_instance_stays_in_its_trace() {
    use common::mesh::{ids, settled, Mesh, LEASE_MS, PARTITIONS, SERIAL};
    const FORWARDED: &str = "a3ce929d0e0e47364bf92f3577b34da6";
    let _one = SERIAL.lock().await;
    let (endpoint, collector) = start_collector().await;
    let otlp = format!("eventmesh.tracing.otlp.endpoint={endpoint}");
    let mesh = Mesh::start_with(
        2,
        "TRACEMESH",
        LEASE_MS,
        &[otlp.as_str(), "eventmesh.cluster.secret=trace-mesh-s3cret"],
    )
    .await;
    let c = client();
    // The poller's home is i-1: it subscribes and polls there.
    subscribe(
        &c,
        mesh.s(1),
        json!({"clientId": "poller", "topic": TOPIC, "group": "pollers"}),
    )
    .await;
    assert!(
        poll_n(&c, mesh.s(1), "poller", 1, Duration::from_millis(600))
            .await
            .is_empty()
    );
    let owners = settled(&c, mesh.s(0), TOPIC, &ids(&mesh), Duration::from_secs(30)).await;
    // A key whose partition i-0 owns.
    let key = (0..1000)
        .map(|k| format!("k{k}"))
        .find(|k| {
            let p = eventmesh_core::topic::partition_for_key(k, PARTITIONS);
            owners[&p] == "i-0"
        })
        .unwrap_or_else(|| panic!("i-0 owns no partition: {owners:?}"));
    let ev = event(
        "forwarded",
        &[
            ("traceparent", &format!("00-{FORWARDED}-{CLIENT_SPAN}-01")),
            ("partitionkey", &key),
        ],
    );
    let at = common::publish(&c, mesh.s(0), TOPIC, &ev).await;
    let at = (
        at["partition"].as_u64().unwrap() as u32,
        at["offset"].as_u64().unwrap(),
    );
    assert_eq!(owners[&at.0], "i-0");
    let got = poll_n(&c, mesh.s(1), "poller", 1, Duration::from_secs(20)).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["event"]["id"], "forwarded");
    assert_eq!(
        ack(&c, mesh.s(1), got[0]["deliveryId"].as_str().unwrap()).await,
        200
    );
    let want = [
        ("publish", 1),
        ("append", 1),
        ("dispatch", 1),
        ("forward", 1),
    ];
    let spans = spans_of(&collector, FORWARDED, &want).await;
    let publish = check_polled_chain(&spans, FORWARDED, "forwarded", at, &got[0]["event"]);
    let forward = one(&spans, "forward", None);
    assert_eq!(
        (forward.parent.as_str(), forward.kind),
        (publish.id.as_str(), CLIENT),
        "forward parent"
    );
    assert_eq!(
        (
            forward.attr("client"),
            forward.attr("instance"),
            forward.attr("delivery.id"),
            forward.attr("outcome"),
        ),
        (
            "poller",
            "i-1",
            got[0]["deliveryId"].as_str().unwrap(),
            "ok"
        )
    );
}
