//! Who may act on what, through the real binary: a request signature
//! covers the method, path, query and `ce-*` headers and cannot be
//! replayed; a JWT must carry its tenant and principal as strings and a
//! numeric `nbf`; a webhook never reaches a denied range, whatever the
//! spelling of its address, a redirect, or a range denied after the
//! subscribe.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, StatusCode};
use axum::routing::post;
use common::hook::{start_hook, HookMode};
use common::*;
use eventmesh_security::Frame;
use serde_json::{json, Value};

const ALICE: &str = "alice-token";
const SIGNING_KEY: &[u8] = b"s1gn1ng-key";

/// One request: (status, JSON body).
async fn send(
    c: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    token: &str,
    headers: &[(String, String)],
    body: Vec<u8>,
) -> (u16, Value) {
    let mut r = c.request(method, url).bearer_auth(token).body(body);
    for (k, v) in headers {
        r = r.header(k.as_str(), v.as_str());
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// A request as it is signed and sent.
#[derive(Clone)]
struct Request {
    method: reqwest::Method,
    path: &'static str,
    query: String,
    /// Every header but the signature's and the credential.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    /// The `x-em-signature` of this request made at `ts`.
    fn signature(&self, ts: &str) -> String {
        let frame = Frame {
            body: &self.body,
            method: Some(self.method.as_str()),
            path: Some(self.path),
            query: Some(&self.query),
            headers: self
                .headers
                .iter()
                .filter(|(n, _)| n.starts_with("ce-"))
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect(),
            ..Frame::default()
        };
        eventmesh_security::signature::sign(SIGNING_KEY, ts, &frame)
    }

    /// Sends it with the given timestamp and signature.
    async fn send(&self, c: &reqwest::Client, s: &Server, ts: &str, sig: &str) -> (u16, Value) {
        let mut headers = self.headers.clone();
        headers.push(("x-em-timestamp".into(), ts.into()));
        headers.push(("x-em-signature".into(), sig.into()));
        let url = match self.query.as_str() {
            "" => s.url(self.path),
            q => s.url(&format!("{}?{q}", self.path)),
        };
        send(
            c,
            self.method.clone(),
            url,
            ALICE,
            &headers,
            self.body.clone(),
        )
        .await
    }
}

/// A binary-mode publish of `orders` event `id` to `?topic=<topic>`.
fn binary_publish(topic: &str, id: &str) -> Request {
    let h = |n: &str, v: &str| (n.to_string(), v.to_string());
    Request {
        method: reqwest::Method::POST,
        path: "/events/publish",
        query: format!("topic={topic}"),
        headers: vec![
            h("content-type", "application/json"),
            h("ce-specversion", "1.0"),
            h("ce-id", id),
            h("ce-source", "%2Fshop"),
            h("ce-type", "order.created"),
        ],
        body: br#"{"total":42}"#.to_vec(),
    }
}

async fn topics(c: &reqwest::Client, s: &Server) -> Vec<(String, u64)> {
    let list: Vec<Value> = admin_json(c, s, "/admin/topics").await;
    let mut out: Vec<(String, u64)> = list
        .iter()
        .map(|t| {
            let offsets = t["endOffsets"].as_array().expect("endOffsets");
            let events = offsets.iter().filter_map(Value::as_u64).sum();
            (t["name"].as_str().unwrap_or_default().to_string(), events)
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn a_signature_covers_the_request_and_is_good_once() {
    let files = tempfile::tempdir().unwrap();
    let tokens = files.path().join("tokens");
    std::fs::write(&tokens, format!("{ALICE} acme alice\n")).unwrap();
    let secrets = files.path().join("secrets");
    std::fs::write(&secrets, "acme s1gn1ng-key\n").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_with(
        dir.path(),
        &[
            "eventmesh.security.gate.failClosed=true".into(),
            format!("eventmesh.security.gate.token.file={}", tokens.display()),
            format!(
                "eventmesh.security.gate.signature.secrets.file={}",
                secrets.display()
            ),
        ],
    );
    let c = client();
    let ts = unix_now().to_string();
    let order = binary_publish("orders", "o-1");
    let sig = order.signature(&ts);
    let (st, v) = order.send(&c, &s, &ts, &sig).await;
    assert_eq!(st, 202, "{v}");
    let denied = |(st, v): (u16, Value), reason: &str| {
        assert_eq!((st, v["error"].as_str()), (401, Some(reason)), "{v}");
    };
    // The captured request, sent to another topic.
    let mut elsewhere = order.clone();
    elsewhere.query = "topic=payroll".into();
    denied(elsewhere.send(&c, &s, &ts, &sig).await, "bad_signature");
    // The captured request with a binary-mode attribute changed.
    let mut retyped = order.clone();
    retyped.headers[4].1 = "order.cancelled".into();
    denied(retyped.send(&c, &s, &ts, &sig).await, "bad_signature");
    // An attribute added.
    let mut extended = order.clone();
    extended
        .headers
        .push(("ce-subject".into(), "payroll".into()));
    denied(extended.send(&c, &s, &ts, &sig).await, "bad_signature");
    // The captured request, exactly as it was.
    denied(order.send(&c, &s, &ts, &sig).await, "replayed_signature");
    assert_eq!(topics(&c, &s).await, [("orders".to_string(), 1)]);

    // The same request twice within a second: each signed at its own
    // (sub-second) time, so the gate lets both through; the event is the
    // same (source and id), so it is stored once.
    for fraction in ["250", "500"] {
        let at = format!("{ts}.{fraction}");
        let (st, v) = order.send(&c, &s, &at, &order.signature(&at)).await;
        assert_eq!(st, 202, "{v}");
        assert_eq!(v["duplicate"], true, "{v}");
    }
    // A structured-mode subscribe and a poll with a query, signed alike.
    let subscribe = Request {
        method: reqwest::Method::POST,
        path: "/events/subscribe",
        query: String::new(),
        headers: vec![("content-type".into(), "application/json".into())],
        body: serde_json::to_vec(&json!({"clientId": "c1", "topic": "orders", "from": "earliest"}))
            .unwrap(),
    };
    let at = format!("{}.1", unix_now());
    let (st, v) = subscribe.send(&c, &s, &at, &subscribe.signature(&at)).await;
    assert_eq!(st, 200, "{v}");
    let poll = Request {
        method: reqwest::Method::GET,
        path: "/events/poll",
        query: "timeoutMs=5000&max=10&clientId=c1".into(),
        headers: Vec::new(),
        body: Vec::new(),
    };
    let at = format!("{}.2", unix_now());
    let (st, v) = poll.send(&c, &s, &at, &poll.signature(&at)).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v.as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(topics(&c, &s).await, [("orders".to_string(), 1)]);
}

/// An HS256 JWT with these claims.
fn jwt(claims: Value) -> String {
    use jsonwebtoken::{encode, EncodingKey, Header};
    encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(b"jwt-s3cret"),
    )
    .unwrap()
}

async fn publish_with(c: &reqwest::Client, s: &Server, token: &str) -> (u16, Value) {
    send(
        c,
        reqwest::Method::POST,
        s.url("/events/publish?topic=jwt"),
        token,
        &[("content-type".into(), "application/cloudevents+json".into())],
        serde_json::to_vec(&event("j1")).unwrap(),
    )
    .await
}

#[tokio::test]
async fn a_jwt_needs_its_tenant_and_principal_as_strings_and_a_numeric_nbf() {
    let dir = tempfile::tempdir().unwrap();
    let gate = [
        "eventmesh.security.gate.jwt.hs256.secret=jwt-s3cret".to_string(),
        "eventmesh.security.gate.failClosed=true".to_string(),
    ];
    let s = Server::start_with(dir.path(), &gate);
    let c = client();
    let exp = unix_now() + 600;
    let good = jwt(json!({"sub": "erin", "tenant": "acme", "exp": exp}));
    assert_eq!(publish_with(&c, &s, &good).await.0, 202);
    for (claims, message) in [
        (
            json!({"sub": "erin", "exp": exp}),
            "the JWT has no \"tenant\" claim (the tenant)",
        ),
        (
            json!({"sub": "erin", "tenant": 7, "exp": exp}),
            "the JWT's \"tenant\" claim (the tenant) must be a non-empty string, not a number",
        ),
        (
            json!({"sub": "erin", "tenant": ["acme"], "exp": exp}),
            "the JWT's \"tenant\" claim (the tenant) must be a non-empty string, not an array",
        ),
        (
            json!({"sub": 42, "tenant": "acme", "exp": exp}),
            "the JWT's \"sub\" claim (the principal) must be a non-empty string, not a number",
        ),
        (
            json!({"sub": "erin", "tenant": "acme", "exp": exp, "nbf": (exp + 3600).to_string()}),
            "the JWT's \"nbf\" claim must be a number (Unix seconds)",
        ),
    ] {
        let (st, v) = publish_with(&c, &s, &jwt(claims.clone())).await;
        assert_eq!(
            (st, v["error"].as_str(), v["message"].as_str()),
            (401, Some("invalid_claim"), Some(message)),
            "{claims}"
        );
    }
    assert_eq!(topics(&c, &s).await, [("jwt".to_string(), 1)]);

    // An empty tenant claim name: JWTs carry no tenant, and are accepted
    // without one.
    let dir = tempfile::tempdir().unwrap();
    let mut tenantless = gate.to_vec();
    tenantless.push("eventmesh.security.gate.jwt.tenant.claim=".into());
    let s = Server::start_with(dir.path(), &tenantless);
    let token = jwt(json!({"sub": "erin", "exp": exp}));
    assert_eq!(publish_with(&c, &s, &token).await.0, 202);
}

const LOOPBACK: &str = "eventmesh.webhook.denied.cidrs=127.0.0.0/8,::1/128";

#[tokio::test]
async fn webhook_addresses_are_refused_in_every_spelling() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[LOOPBACK]);
    let c = client();
    for url in [
        "http://[::ffff:127.0.0.1]/",
        "http://0.0.0.0/",
        "http://0/",
        "http://[::]/",
        "http://127.1:8080/hook",
        "http://localhost/hook",
    ] {
        webhook_refused(&c, &s, url).await;
    }
    let subs: Vec<Value> = admin_json(&c, &s, "/admin/subscriptions").await;
    assert_eq!(subs, Vec::<Value>::new());
}

/// Waits until `/metrics` shows `name` at `want`; its last value.
async fn wait_metric(c: &reqwest::Client, s: &Server, name: &str, want: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = metric(c, s, name).await;
        if got == want || Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A receiver on `ip:0` answering every POST with `status` (and
/// `location`, if any); the paths it was asked for.
async fn receiver(
    ip: &str,
    status: StatusCode,
    location: Option<String>,
) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = asked.clone();
    let app = axum::Router::new().route(
        "/{*path}",
        post(move |uri: axum::http::Uri| {
            let log = log.clone();
            let location = location.clone();
            async move {
                log.lock().unwrap().push(uri.path().to_string());
                let mut h = HeaderMap::new();
                if let Some(l) = location {
                    h.insert(header::LOCATION, l.parse().unwrap());
                }
                (status, h)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, asked)
}

#[tokio::test]
async fn a_redirect_is_a_failed_attempt_and_is_never_followed() {
    // 127.0.0.2 stands for an internal host: denied, while the receiver
    // on 127.0.0.1 is allowed.
    let (inner, inner_asked) = receiver("127.0.0.2", StatusCode::OK, None).await;
    let mut redirectors = Vec::new();
    for status in [StatusCode::FOUND, StatusCode::TEMPORARY_REDIRECT] {
        let to = format!("http://{inner}/internal");
        redirectors.push(receiver("127.0.0.1", status, Some(to)).await);
    }
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        dir.path(),
        &[
            "eventmesh.webhook.denied.cidrs=127.0.0.2/32",
            "eventmesh.delivery.max.attempts=2",
        ],
    );
    let c = client();
    for (i, (addr, _)) in redirectors.iter().enumerate() {
        subscribe(
            &c,
            &s,
            // These receivers answer POST only (no handshake): what is
            // checked is how a push treats a redirect.
            json!({"clientId": format!("hook{i}"), "group": format!("g{i}"),
                   "topic": "redirected", "url": format!("http://{addr}/hook"),
                   "webhookHandshake": false}),
        )
        .await;
    }
    publish(&c, &s, "redirected", &event("r1")).await;
    // Both attempts of both consumers failed: the event is dead-lettered
    // twice, and the denied host was never asked.
    assert_eq!(
        wait_metric(&c, &s, "eventmesh_dead_letters_total", 2.0).await,
        2.0
    );
    assert_eq!(metric(&c, &s, "eventmesh_push_failures_total").await, 4.0);
    for (_, asked) in &redirectors {
        assert_eq!(*asked.lock().unwrap(), ["/hook", "/hook"]);
    }
    assert_eq!(*inner_asked.lock().unwrap(), Vec::<String>::new());
}

#[tokio::test]
async fn every_push_checks_the_address_it_connects_to() {
    let (url, hook) = start_hook(HookMode::Accept).await;
    let port = url
        .trim_start_matches("http://127.0.0.1:")
        .trim_end_matches("/hook");
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &["eventmesh.delivery.max.attempts=2"]);
    let c = client();
    // Allowed when subscribed: a name and an IP address of this host.
    for (i, host) in ["localhost", "127.0.0.1"].into_iter().enumerate() {
        subscribe(
            &c,
            &s,
            json!({"clientId": format!("hook{i}"), "group": format!("g{i}"), "topic": "later",
                   "url": format!("http://{host}:{port}/hook")}),
        )
        .await;
    }
    publish(&c, &s, "later", &event("before")).await;
    let both = || hook.lock().unwrap().accepted_ids() == ["before", "before"];
    assert!(wait_until(both, Duration::from_secs(20)).await);
    assert_eq!(wait_metric(&c, &s, "eventmesh_acks_total", 2.0).await, 2.0);
    s.stop();

    // The same subscriptions once loopback is denied: no push reaches it.
    let s = Server::start(dir.path(), &[LOOPBACK, "eventmesh.delivery.max.attempts=2"]);
    publish(&c, &s, "later", &event("after")).await;
    assert_eq!(
        wait_metric(&c, &s, "eventmesh_dead_letters_total", 2.0).await,
        2.0
    );
    assert_eq!(metric(&c, &s, "eventmesh_push_failures_total").await, 4.0);
    assert_eq!(hook.lock().unwrap().accepted_ids(), ["before", "before"]);
    assert_eq!(hook.lock().unwrap().attempts_of("after"), 0);
    let text = s.log_text();
    assert!(
        text.contains("inside the denied range 127.0.0.0/8"),
        "{text}"
    );
}
