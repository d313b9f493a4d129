//! A real webhook receiver (an axum server on an ephemeral port) whose
//! behaviour a test sets and changes while it runs. It answers the
//! CloudEvents webhook validation handshake (`OPTIONS`) by allowing every
//! origin, as a receiver that follows the specification does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;

/// How the receiver answers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HookMode {
    /// 200 to everything.
    Accept,
    /// 500 to everything.
    Refuse,
    /// 500 to the first `n` attempts of each event, then 204.
    FailFirst(u32),
    /// Waits this long, then 200.
    Slow(Duration),
}

#[derive(Debug)]
pub struct HookState {
    pub mode: HookMode,
    /// Attempts per event id (`ce-id`), answered or not yet.
    pub attempts: HashMap<String, u32>,
    /// (event id, delivery id, body) of every accepted push, in order.
    pub accepted: Vec<(String, String, Vec<u8>)>,
    /// The request headers of every accepted push, in the same order.
    pub headers: Vec<HeaderMap>,
    /// When each accepted push arrived (ms since the epoch), in the same
    /// order.
    pub received_ms: Vec<u64>,
    /// Validation handshakes (`OPTIONS`) answered.
    pub handshakes: u32,
}

impl HookState {
    /// Accepted event ids, sorted.
    pub fn accepted_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.accepted.iter().map(|a| a.0.clone()).collect();
        ids.sort();
        ids
    }

    pub fn attempts_of(&self, id: &str) -> u32 {
        self.attempts.get(id).copied().unwrap_or(0)
    }
}

pub type Hook = Arc<Mutex<HookState>>;

fn header(headers: &HeaderMap, name: &str) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

async fn handle(State(h): State<Hook>, headers: HeaderMap, body: axum::body::Bytes) -> StatusCode {
    let id = header(&headers, "ce-id");
    let delivery = header(&headers, "eventmesh-delivery-id");
    let mode = {
        let mut s = h.lock().unwrap();
        let n = {
            let n = s.attempts.entry(id.clone()).or_default();
            *n += 1;
            *n
        };
        match s.mode {
            HookMode::Refuse => return StatusCode::INTERNAL_SERVER_ERROR,
            HookMode::FailFirst(k) if n <= k => return StatusCode::INTERNAL_SERVER_ERROR,
            m => m,
        }
    };
    if let HookMode::Slow(d) = mode {
        tokio::time::sleep(d).await;
    }
    let mut s = h.lock().unwrap();
    s.accepted.push((id, delivery, body.to_vec()));
    s.headers.push(headers);
    s.received_ms.push(eventmesh_core::time::now_ms());
    drop(s);
    if matches!(mode, HookMode::FailFirst(_)) {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::OK
    }
}

/// The answer of a receiver allowing the handshake (`OPTIONS`) from any
/// origin, at no rate limit: an axum handler for any test receiver.
pub async fn allow_any_origin() -> (StatusCode, [(&'static str, &'static str); 3]) {
    (
        StatusCode::OK,
        [
            ("webhook-allowed-origin", "*"),
            ("webhook-allowed-rate", "*"),
            ("allow", "POST, OPTIONS"),
        ],
    )
}

async fn allow(State(h): State<Hook>) -> (StatusCode, [(&'static str, &'static str); 3]) {
    h.lock().unwrap().handshakes += 1;
    allow_any_origin().await
}

/// Starts a receiver at `http://127.0.0.1:<port>/hook`.
pub async fn start_hook(mode: HookMode) -> (String, Hook) {
    let state = Arc::new(Mutex::new(HookState {
        mode,
        attempts: HashMap::new(),
        accepted: Vec::new(),
        headers: Vec::new(),
        received_ms: Vec::new(),
        handshakes: 0,
    }));
    let app = axum::Router::new()
        .route("/hook", post(handle).options(allow))
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/hook"), state)
}
