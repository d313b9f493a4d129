//! One error type for every operation, and the one table that turns it into
//! each transport's answer: an HTTP status with `{"error","message"}`, a TCP
//! `ERROR` frame (code and message), a WebSocket `{"type":"error"}`
//! message. Transports never build error answers of their own.

use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use eventmesh_core::CoreError;
use eventmesh_runtime::{ErrorKind, RuntimeError};
use eventmesh_security::{Denial, DenyKind};

/// Why an operation failed: a machine code, a human message, and the
/// status that classifies it (the HTTP status; other transports send the
/// code and message).
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// For 429: when to try again (`Retry-After`).
    pub retry_after: Option<Duration>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    /// A refused credential outside the gate (the TCP connection token).
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// The answer to an id that matches nothing the caller may settle: the
    /// same whether the id is unknown or held by someone else.
    pub fn unknown_delivery(id: &str) -> Self {
        Self::not_found(
            "unknown_delivery",
            format!("delivery {id:?} is unknown or already settled"),
        )
    }

    /// 409 `fenced`: the delivery's partition moved to another instance.
    pub fn fenced_delivery(id: &str) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "fenced",
            format!(
                "delivery {id:?} is of a partition this instance no longer owns; \
                 its new owner delivers the event again"
            ),
        )
    }

    /// The WebSocket form: `{"type":"error","error","message"[,"requestId"]}`.
    pub fn ws_json(&self, request_id: Option<&serde_json::Value>) -> serde_json::Value {
        let mut v =
            serde_json::json!({"type": "error", "error": self.code, "message": self.message});
        if let Some(id) = request_id {
            v["requestId"] = id.clone();
        }
        v
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

/// The status of each runtime error kind.
fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Invalid => StatusCode::BAD_REQUEST,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Forbidden => StatusCode::FORBIDDEN,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::Timeout => StatusCode::REQUEST_TIMEOUT,
        ErrorKind::NoSpace => StatusCode::INSUFFICIENT_STORAGE,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
    }
}

impl From<RuntimeError> for ApiError {
    fn from(e: RuntimeError) -> Self {
        let kind = e.kind();
        let message = match kind {
            ErrorKind::NoSpace => format!("{e}; nothing was stored, retry once space is freed"),
            _ => e.to_string(),
        };
        ApiError::new(status_of(kind), e.code(), message)
    }
}

impl From<CoreError> for ApiError {
    fn from(e: CoreError) -> Self {
        ApiError::bad_request(e.code(), e.to_string())
    }
}

impl From<Denial> for ApiError {
    fn from(d: Denial) -> Self {
        let status = match d.kind {
            DenyKind::Authentication => StatusCode::UNAUTHORIZED,
            DenyKind::Authorization => StatusCode::FORBIDDEN,
            DenyKind::Quota => StatusCode::TOO_MANY_REQUESTS,
        };
        ApiError {
            status,
            code: d.reason,
            message: d.message,
            retry_after: d.retry_after,
        }
    }
}

/// The HTTP answer: the status, `{"error": code, "message": text}`, and
/// `WWW-Authenticate` / `Retry-After` where they apply.
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(code = self.code, "{}", self.message);
        }
        let mut response = (
            self.status,
            Json(serde_json::json!({"error": self.code, "message": self.message})),
        )
            .into_response();
        let headers = response.headers_mut();
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(wait) = self.retry_after {
            let secs = (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1);
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventmesh_storage::StorageError;

    #[test]
    fn runtime_errors_map_through_one_table() {
        let e = ApiError::from(RuntimeError::from(StorageError::NoSpace("full".into())));
        assert_eq!(
            (e.status, e.code),
            (StatusCode::INSUFFICIENT_STORAGE, "insufficient_storage")
        );
        assert!(e
            .message
            .ends_with("nothing was stored, retry once space is freed"));
        let e = ApiError::from(RuntimeError::ShuttingDown);
        assert_eq!(
            (e.status, e.code),
            (StatusCode::SERVICE_UNAVAILABLE, "shutting_down")
        );
        let e = ApiError::from(RuntimeError::Forbidden {
            code: "not_owner",
            message: "m".into(),
        });
        assert_eq!(
            (e.status, e.code, e.message.as_str()),
            (StatusCode::FORBIDDEN, "not_owner", "m")
        );
    }

    #[test]
    fn denials_keep_their_reason_and_retry_hint() {
        let mut d = Denial::new(DenyKind::Quota, "publish_rate", "slow down");
        d.retry_after = Some(Duration::from_millis(1500));
        let e = ApiError::from(d);
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(e.code, "publish_rate");
        assert_eq!(e.retry_after, Some(Duration::from_millis(1500)));
        let e = ApiError::from(Denial::authentication("missing_credential", "who?"));
        assert_eq!(e.status, StatusCode::UNAUTHORIZED);
        assert_eq!(
            e.ws_json(Some(&serde_json::json!(7))),
            serde_json::json!({"type":"error","error":"missing_credential","message":"who?","requestId":7})
        );
    }
}
