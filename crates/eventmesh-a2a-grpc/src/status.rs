//! Refusals as gRPC statuses, in the one place they are mapped.
//!
//! An A2A error (the call layer's `RpcError`) takes the gRPC code of the
//! specification's table (TaskNotFound → `NOT_FOUND`, TaskNotCancelable
//! → `FAILED_PRECONDITION`, …; the mapping every binding shares,
//! `RpcError::status`), its message, and a `google.rpc.ErrorInfo`
//! detail with the error's reason (`TASK_NOT_FOUND`), the domain
//! `a2a-protocol.org` and its metadata: the A2A SDKs read the reason to
//! raise the matching typed error. The gate's refusals take the code of
//! their HTTP status (401 → `UNAUTHENTICATED`, 404 → `NOT_FOUND`, 429 →
//! `RESOURCE_EXHAUSTED`, …: `GateRefusal`) and an ErrorInfo in the domain
//! `GATE_DOMAIN` whose reason is the error code in capitals
//! (`UNKNOWN_AGENT`), plus a `google.rpc.RetryInfo` when the refusal says
//! when to try again.
//!
//! Invariant: the details are a `google.rpc.Status` (sent as the
//! `grpc-status-details-bin` trailer) whose code and message are exactly
//! the status's own, as clients check.

use eventmesh_a2a::rpc::{GateRefusal, RpcError, ERROR_DOMAIN, GATE_DOMAIN};
use eventmesh_a2a_gateway::call::Refused;
use eventmesh_api::ApiError;
use prost::Message as _;
use tonic::Code;

use crate::rpc_status::{ErrorInfo, RetryInfo, Status as RpcStatus};

const ERROR_INFO_TYPE: &str = "type.googleapis.com/google.rpc.ErrorInfo";
const RETRY_INFO_TYPE: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// The gRPC code of an A2A error: the specification's mapping, as every
/// binding writes it ([`RpcError::status`]).
pub fn code_of(e: &RpcError) -> Code {
    Code::from(e.status().grpc)
}

/// A refusal of the call layer as a status.
pub fn refused(r: Refused) -> tonic::Status {
    match r {
        Refused::Rpc(e) => a2a(&e),
        Refused::Gate(e) => gate(&e),
    }
}

/// An A2A error as a status.
pub fn a2a(e: &RpcError) -> tonic::Status {
    let info = ErrorInfo {
        reason: e.reason().to_string(),
        domain: ERROR_DOMAIN.to_string(),
        metadata: e.metadata_text().into_iter().collect(),
    };
    with_details(code_of(e), &e.message, vec![any(ERROR_INFO_TYPE, &info)])
}

/// A gate refusal as a status.
pub fn gate(e: &ApiError) -> tonic::Status {
    let refusal = GateRefusal::new(e.status.as_u16(), e.code);
    let info = ErrorInfo {
        reason: refusal.reason,
        domain: GATE_DOMAIN.to_string(),
        metadata: Default::default(),
    };
    let mut details = vec![any(ERROR_INFO_TYPE, &info)];
    if let Some(wait) = e.retry_after {
        let delay = pbjson_types::Duration {
            seconds: i64::try_from(wait.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(wait.subsec_nanos()).unwrap_or(0),
        };
        let retry = RetryInfo {
            retry_delay: Some(delay),
        };
        details.push(any(RETRY_INFO_TYPE, &retry));
    }
    with_details(Code::from(refusal.status.grpc), &e.message, details)
}

/// A request that does not fit the proto's rules, or what the gateway
/// answered that does not fit the proto: `INVALID_ARGUMENT` or
/// `INTERNAL`, as an A2A error (invalid params, or internal).
pub fn invalid(message: impl Into<String>) -> tonic::Status {
    a2a(&RpcError::invalid_params(message))
}

/// An answer of the gateway that does not fit the proto (an agent's card
/// with a field of the wrong type, say).
pub fn internal(message: impl Into<String>) -> tonic::Status {
    a2a(&RpcError::internal(message))
}

fn any<M: prost::Message>(type_url: &str, m: &M) -> pbjson_types::Any {
    pbjson_types::Any {
        type_url: type_url.to_string(),
        value: m.encode_to_vec().into(),
    }
}

fn with_details(code: Code, message: &str, details: Vec<pbjson_types::Any>) -> tonic::Status {
    let status = RpcStatus {
        code: code as i32,
        message: message.to_string(),
        details,
    };
    tonic::Status::with_details(code, message, status.encode_to_vec().into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventmesh_a2a::rpc;
    use eventmesh_api::StatusCode;

    fn decoded(s: &tonic::Status) -> RpcStatus {
        RpcStatus::decode(s.details()).expect("details are a google.rpc.Status")
    }

    fn info(s: &RpcStatus, at: usize) -> ErrorInfo {
        assert_eq!(s.details[at].type_url, ERROR_INFO_TYPE);
        ErrorInfo::decode(s.details[at].value.as_ref()).unwrap()
    }

    #[test]
    fn a2a_errors_carry_their_reason() {
        let cases = [
            (
                RpcError::task_not_found("t-1"),
                Code::NotFound,
                "TASK_NOT_FOUND",
            ),
            (
                RpcError::task_not_cancelable(),
                Code::FailedPrecondition,
                "TASK_NOT_CANCELABLE",
            ),
            (
                RpcError::push_not_supported(),
                Code::FailedPrecondition,
                "PUSH_NOTIFICATION_NOT_SUPPORTED",
            ),
            (
                RpcError::unsupported_operation("x"),
                Code::FailedPrecondition,
                "UNSUPPORTED_OPERATION",
            ),
            (
                RpcError::content_type_not_supported("x"),
                Code::InvalidArgument,
                "CONTENT_TYPE_NOT_SUPPORTED",
            ),
            (
                RpcError::invalid_agent_response("x"),
                Code::Internal,
                "INVALID_AGENT_RESPONSE",
            ),
            (
                RpcError::extended_card_not_configured(),
                Code::FailedPrecondition,
                "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            ),
            (
                RpcError::extension_support_required("urn:x"),
                Code::FailedPrecondition,
                "EXTENSION_SUPPORT_REQUIRED",
            ),
            (
                RpcError::new(rpc::VERSION_NOT_SUPPORTED, "x"),
                Code::FailedPrecondition,
                "VERSION_NOT_SUPPORTED",
            ),
            (
                RpcError::invalid_params("message: missing"),
                Code::InvalidArgument,
                "INVALID_PARAMS",
            ),
            (
                RpcError::method_not_found(),
                Code::Unimplemented,
                "METHOD_NOT_FOUND",
            ),
            (RpcError::internal("x"), Code::Internal, "INTERNAL_ERROR"),
            (
                RpcError::internal("x").with_meta("error", "meta_unavailable"),
                Code::Unavailable,
                "INTERNAL_ERROR",
            ),
        ];
        for (e, code, reason) in cases {
            let s = a2a(&e);
            assert_eq!(
                (s.code(), s.message()),
                (code, e.message.as_str()),
                "{reason}"
            );
            let d = decoded(&s);
            assert_eq!(
                (d.code, d.message.as_str()),
                (code as i32, e.message.as_str())
            );
            assert_eq!(d.details.len(), 1);
            let i = info(&d, 0);
            assert_eq!(
                (i.reason.as_str(), i.domain.as_str()),
                (reason, "a2a-protocol.org")
            );
        }
        let e = RpcError::internal("meta down")
            .with_meta("error", "meta_unavailable")
            .with_meta("attempts", 3);
        let i = info(&decoded(&a2a(&e)), 0);
        assert_eq!(i.metadata["error"], "meta_unavailable");
        assert_eq!(i.metadata["attempts"], "3");
    }

    #[test]
    fn gate_refusals_take_their_http_status_code() {
        let cases = [
            (
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                Code::Unauthenticated,
            ),
            (StatusCode::FORBIDDEN, "forbidden", Code::PermissionDenied),
            (StatusCode::NOT_FOUND, "unknown_agent", Code::NotFound),
            (
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                Code::InvalidArgument,
            ),
            (
                StatusCode::TOO_MANY_REQUESTS,
                "publish_rate",
                Code::ResourceExhausted,
            ),
            (StatusCode::SERVICE_UNAVAILABLE, "busy", Code::Unavailable),
            (StatusCode::BAD_REQUEST, "bad", Code::InvalidArgument),
            (StatusCode::CONFLICT, "conflict", Code::Aborted),
            (StatusCode::GONE, "gone", Code::FailedPrecondition),
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                Code::Internal,
            ),
        ];
        for (http, code, want) in cases {
            let e = ApiError::new(http, code, format!("{code} happened"));
            let s = gate(&e);
            assert_eq!(s.code(), want, "{http}");
            assert_eq!(s.message(), format!("{code} happened"));
            let d = decoded(&s);
            assert_eq!(d.code, want as i32);
            let i = info(&d, 0);
            assert_eq!(i.reason, code.to_ascii_uppercase());
            assert_eq!(i.domain, GATE_DOMAIN);
            assert_eq!(d.details.len(), 1);
        }
        let mut e = ApiError::new(StatusCode::TOO_MANY_REQUESTS, "publish_rate", "slow down");
        e.retry_after = Some(std::time::Duration::from_millis(1500));
        let d = decoded(&gate(&e));
        assert_eq!(d.details[1].type_url, RETRY_INFO_TYPE);
        let retry = RetryInfo::decode(d.details[1].value.as_ref()).unwrap();
        let delay = retry.retry_delay.unwrap();
        assert_eq!((delay.seconds, delay.nanos), (1, 500_000_000));
    }
}
