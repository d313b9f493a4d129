//! A webhook receiver for the push tests: an axum server on an ephemeral
//! port that records every request raw (method, path, headers, body,
//! arrival) and answers the validation handshake (`OPTIONS`) as the test
//! says, which it may change while the test runs. POSTs are answered 200,
//! or 500 while the test asks for failures.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// How the receiver answers a handshake.
#[derive(Debug, Clone)]
pub enum Answer {
    /// 200 with `WebHook-Allowed-Origin` (and `WebHook-Allowed-Rate`).
    Allow {
        origin: &'static str,
        rate: Option<&'static str>,
    },
    /// This status, without the handshake's headers.
    Status(u16),
}

impl Answer {
    /// Allows every origin, with no rate limit.
    pub fn allow() -> Answer {
        Answer::Allow {
            origin: "*",
            rate: Some("*"),
        }
    }
}

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: Method,
    pub path: String,
    /// Lower-case names; a repeated header's values joined by `, `.
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
    pub at: Instant,
}

impl Request {
    pub fn header(&self, name: &str) -> String {
        self.headers.get(name).cloned().unwrap_or_default()
    }

    fn batch(&self) -> Option<Vec<Value>> {
        self.header("content-type")
            .starts_with("application/cloudevents-batch+json")
            .then(|| serde_json::from_slice(&self.body).expect("a JSON array"))
    }

    /// The events it carries: a batch's length, else one.
    pub fn events(&self) -> usize {
        self.batch().map_or(1, |b| b.len())
    }

    /// The ids of the events it carries (a binary-mode id is read from
    /// `ce-id` as sent, percent-encoded).
    pub fn event_ids(&self) -> Vec<String> {
        match self.batch() {
            Some(b) => b
                .iter()
                .map(|e| e["id"].as_str().unwrap().to_string())
                .collect(),
            None if self.headers.contains_key("ce-id") => vec![self.header("ce-id")],
            None => {
                let e: Value = serde_json::from_slice(&self.body).unwrap();
                vec![e["id"].as_str().unwrap().to_string()]
            }
        }
    }
}

struct Recorded {
    answer: Answer,
    /// POSTs still to be answered 500.
    failures: u32,
    requests: Vec<Request>,
}

#[derive(Clone)]
pub struct Receiver {
    base: String,
    state: Arc<Mutex<Recorded>>,
}

async fn handle(
    State(state): State<Arc<Mutex<Recorded>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut joined: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in &headers {
        let v = String::from_utf8_lossy(value.as_bytes()).into_owned();
        joined
            .entry(name.as_str().to_string())
            .and_modify(|e| {
                e.push_str(", ");
                e.push_str(&v);
            })
            .or_insert(v);
    }
    let mut s = state.lock().unwrap();
    s.requests.push(Request {
        method: method.clone(),
        path: uri.path().to_string(),
        headers: joined,
        body: body.to_vec(),
        at: Instant::now(),
    });
    if method == Method::OPTIONS {
        return match s.answer.clone() {
            Answer::Allow { origin, rate } => {
                let mut h = vec![("webhook-allowed-origin", origin), ("allow", "POST")];
                if let Some(r) = rate {
                    h.push(("webhook-allowed-rate", r));
                }
                let mut resp = StatusCode::OK.into_response();
                for (k, v) in h {
                    resp.headers_mut().insert(k, v.parse().unwrap());
                }
                resp
            }
            Answer::Status(code) => StatusCode::from_u16(code).unwrap().into_response(),
        };
    }
    if s.failures > 0 {
        s.failures -= 1;
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    StatusCode::OK.into_response()
}

impl Receiver {
    pub async fn start(answer: Answer) -> Receiver {
        let state = Arc::new(Mutex::new(Recorded {
            answer,
            failures: 0,
            requests: Vec::new(),
        }));
        let app = axum::Router::new()
            .route("/{*path}", axum::routing::any(handle))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver {
            base: format!("http://{addr}"),
            state,
        }
    }

    /// The URL of `path` here.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn answer(&self, answer: Answer) {
        self.state.lock().unwrap().answer = answer;
    }

    /// Answers the next `n` POSTs with 500.
    pub fn fail_posts(&self, n: u32) {
        self.state.lock().unwrap().failures = n;
    }

    fn with_method(&self, m: Method) -> Vec<Request> {
        let s = self.state.lock().unwrap();
        s.requests
            .iter()
            .filter(|r| r.method == m)
            .cloned()
            .collect()
    }

    /// Every POST, in arrival order.
    pub fn posts(&self) -> Vec<Request> {
        self.with_method(Method::POST)
    }

    /// Every handshake (`OPTIONS`), in arrival order.
    pub fn options(&self) -> Vec<Request> {
        self.with_method(Method::OPTIONS)
    }

    /// Events carried by every POST so far.
    pub fn events(&self) -> usize {
        self.posts().iter().map(Request::events).sum()
    }

    /// Waits until POSTs carried `n` events; whether they did in time.
    pub async fn wait_events(&self, n: usize, within: Duration) -> bool {
        super::wait_until(|| self.events() >= n, within).await
    }

    /// Waits until `n` handshakes came; whether they did in time.
    pub async fn wait_options(&self, n: usize, within: Duration) -> bool {
        super::wait_until(|| self.options().len() >= n, within).await
    }
}

/// Requests as the SDK readers take them: headers and the body in hex.
pub fn dump(requests: &[Request]) -> Value {
    Value::Array(
        requests
            .iter()
            .map(|r| json!({"headers": r.headers, "body_hex": hex::encode(&r.body)}))
            .collect(),
    )
}
