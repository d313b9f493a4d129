//! [`ApiError`] as an HTTP answer: its status, `{"error": code, "message":
//! text}`, and `WWW-Authenticate` / `Retry-After` where they apply. Also
//! maps axum's extractor rejections to the same shape.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::api::ApiError;

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

/// Maps any axum extractor rejection (body too large, bad JSON, bad query)
/// to the common error shape.
pub fn rejection(status: StatusCode, text: String) -> ApiError {
    let code = match status {
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        _ => "invalid_request",
    };
    ApiError::new(status, code, text)
}
