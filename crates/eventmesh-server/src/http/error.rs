//! Maps axum's extractor rejections to the common error shape (the
//! operation layer's `ApiError` answers HTTP itself).

use axum::http::StatusCode;

use eventmesh_api::ApiError;

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
