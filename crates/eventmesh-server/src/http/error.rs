//! One error shape for every HTTP answer: `{"error": code, "message": text}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use eventmesh_core::CoreError;
use eventmesh_runtime::RuntimeError;
use eventmesh_storage::StorageError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Extra response headers (`Retry-After`, `WWW-Authenticate`).
    pub headers: Vec<(axum::http::HeaderName, String)>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            headers: Vec::new(),
        }
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }
}

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
        for (name, value) in self.headers {
            if let Ok(v) = axum::http::HeaderValue::from_str(&value) {
                response.headers_mut().insert(name, v);
            }
        }
        response
    }
}

impl From<CoreError> for ApiError {
    fn from(e: CoreError) -> Self {
        ApiError::bad_request(e.code(), e.to_string())
    }
}

impl From<RuntimeError> for ApiError {
    fn from(e: RuntimeError) -> Self {
        use StatusCode as S;
        match e {
            RuntimeError::BadRequest { code, message } => {
                ApiError::new(S::BAD_REQUEST, code, message)
            }
            RuntimeError::NotFound { code, message } => ApiError::new(S::NOT_FOUND, code, message),
            RuntimeError::Conflict(m) => ApiError::new(S::CONFLICT, "conflict", m),
            RuntimeError::Timeout(m) => ApiError::new(S::REQUEST_TIMEOUT, "request_timeout", m),
            RuntimeError::ShuttingDown => {
                ApiError::new(S::SERVICE_UNAVAILABLE, "shutting_down", e.to_string())
            }
            RuntimeError::Storage(s) => match s {
                StorageError::UnknownTopic(_) | StorageError::UnknownPartition { .. } => {
                    ApiError::new(S::NOT_FOUND, "unknown_topic", s.to_string())
                }
                StorageError::InvalidArgument(_) => {
                    ApiError::new(S::BAD_REQUEST, "invalid_request", s.to_string())
                }
                StorageError::Closed => {
                    ApiError::new(S::SERVICE_UNAVAILABLE, "shutting_down", s.to_string())
                }
                StorageError::NoSpace(_) => ApiError::new(
                    S::INSUFFICIENT_STORAGE,
                    "insufficient_storage",
                    format!("{s}; nothing was stored, retry once space is freed"),
                ),
                StorageError::Io(_) | StorageError::Open { .. } => {
                    ApiError::new(S::SERVICE_UNAVAILABLE, "storage_unavailable", s.to_string())
                }
            },
            RuntimeError::State(eventmesh_state::StateError::Meta(m)) => {
                ApiError::new(S::SERVICE_UNAVAILABLE, "meta_unavailable", m.to_string())
            }
            RuntimeError::State(s) => {
                ApiError::new(S::SERVICE_UNAVAILABLE, "state_unavailable", s.to_string())
            }
        }
    }
}

/// Maps any axum extractor rejection (body too large, bad JSON, bad query)
/// to the common error shape.
pub fn rejection(status: StatusCode, text: String) -> ApiError {
    let code = match status {
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        _ => "invalid_request",
    };
    ApiError::new(status, code, text)
}
