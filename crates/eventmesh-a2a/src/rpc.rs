//! The JSON-RPC 2.0 envelope of A2A: request parsing, protocol version
//! selection, and success and error responses in the form each version
//! expects.
//!
//! Invariants:
//! - A success response always has a `result` member, `null` included.
//! - A v1.0 error carries `data`: an array whose single entry is a
//!   `google.rpc.ErrorInfo` with a string-valued `metadata` map; parse errors
//!   and unknown methods without metadata carry no `data`, as the reference
//!   server sends them.
//! - A v0.3 error carries `data`: the metadata object, or `null`; codes that
//!   v0.3 did not define (-32008, -32009) are sent as -32603.
//! - Errors found before the request id is known are answered with `id: null`.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::model::{to_json, StreamResponse, Task, TaskState};
use crate::v03;

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
pub const TASK_NOT_FOUND: i64 = -32001;
pub const TASK_NOT_CANCELABLE: i64 = -32002;
pub const PUSH_NOT_SUPPORTED: i64 = -32003;
pub const UNSUPPORTED_OPERATION: i64 = -32004;
pub const CONTENT_TYPE_NOT_SUPPORTED: i64 = -32005;
pub const INVALID_AGENT_RESPONSE: i64 = -32006;
pub const EXTENDED_CARD_NOT_CONFIGURED: i64 = -32007;
pub const EXTENSION_SUPPORT_REQUIRED: i64 = -32008;
pub const VERSION_NOT_SUPPORTED: i64 = -32009;

/// The `domain` of every v1.0 ErrorInfo.
pub const ERROR_DOMAIN: &str = "a2a-protocol.org";
const ERROR_INFO_TYPE: &str = "type.googleapis.com/google.rpc.ErrorInfo";

/// The v1.0 method names.
pub const V1_METHODS: [&str; 11] = [
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
    "GetExtendedAgentCard",
];

/// The v0.3 method names.
pub const V03_METHODS: [&str; 10] = [
    "message/send",
    "message/stream",
    "tasks/get",
    "tasks/cancel",
    "tasks/resubscribe",
    "tasks/pushNotificationConfig/set",
    "tasks/pushNotificationConfig/get",
    "tasks/pushNotificationConfig/list",
    "tasks/pushNotificationConfig/delete",
    "agent/getAuthenticatedExtendedCard",
];

/// A protocol version the gateway speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    V1,
    V03,
}

impl Version {
    /// `"1.0"` or `"0.3"`, as written in cards and error messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1 => "1.0",
            Version::V03 => "0.3",
        }
    }
}

/// The version an `A2A-Version` header asks for: absent or empty is 0.3,
/// any `1[.x[.y]]` is 1.0, `0.3[.y]` is 0.3. Anything else is returned as the
/// error, for a version-not-supported reply.
pub fn version_from_header(value: Option<&str>) -> Result<Version, String> {
    let raw = value.unwrap_or("").trim();
    if raw.is_empty() {
        return Ok(Version::V03);
    }
    let parts: Vec<&str> = raw.split('.').collect();
    let numeric = parts.len() <= 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()));
    let number = |i: usize| parts.get(i).and_then(|p| p.parse::<u64>().ok());
    match (numeric, number(0), number(1)) {
        (true, Some(1), _) => Ok(Version::V1),
        (true, Some(0), Some(3)) => Ok(Version::V03),
        _ => Err(raw.to_string()),
    }
}

/// The version a method name belongs to; `None` for an unknown method.
pub fn method_version(method: &str) -> Option<Version> {
    if V1_METHODS.contains(&method) {
        Some(Version::V1)
    } else if V03_METHODS.contains(&method) {
        Some(Version::V03)
    } else {
        None
    }
}

/// A JSON-RPC error, before it is framed for a version. `metadata` becomes
/// the ErrorInfo metadata (v1.0) or the `data` object (v0.3).
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub metadata: Map<String, Value>,
}

impl RpcError {
    /// An error with `code` and `message`, without metadata.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            metadata: Map::new(),
        }
    }

    /// An error with `code` and the protocol's default message for it.
    pub fn from_code(code: i64) -> Self {
        Self::new(code, default_message(code))
    }

    /// Adds a metadata entry.
    pub fn with_meta(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// -32700: the body is not JSON.
    pub fn parse_error(message: impl Into<String>) -> Self {
        Self::new(PARSE_ERROR, message)
    }

    /// -32600: the body is JSON but not a valid JSON-RPC request.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(INVALID_REQUEST, message)
    }

    /// -32601 "Method not found".
    pub fn method_not_found() -> Self {
        Self::from_code(METHOD_NOT_FOUND)
    }

    /// -32602 with a message naming the bad field.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }

    /// -32603.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(INTERNAL_ERROR, message)
    }

    /// -32001 "Task <id> not found".
    pub fn task_not_found(id: &str) -> Self {
        Self::new(TASK_NOT_FOUND, format!("Task {id} not found"))
    }

    /// -32002 "Task cannot be canceled".
    pub fn task_not_cancelable() -> Self {
        Self::from_code(TASK_NOT_CANCELABLE)
    }

    /// -32003 "Push Notification is not supported".
    pub fn push_not_supported() -> Self {
        Self::from_code(PUSH_NOT_SUPPORTED)
    }

    /// -32004 with a message saying what is not supported.
    pub fn unsupported_operation(message: impl Into<String>) -> Self {
        Self::new(UNSUPPORTED_OPERATION, message)
    }

    /// -32004 for a send or subscribe to a task that has ended.
    pub fn task_terminal(id: &str, state: TaskState) -> Self {
        Self::unsupported_operation(format!("Task {id} is in terminal state: {}", state.as_v1()))
    }

    /// -32005 with a message naming the refused media type.
    pub fn content_type_not_supported(message: impl Into<String>) -> Self {
        Self::new(CONTENT_TYPE_NOT_SUPPORTED, message)
    }

    /// -32006: the agent answered with something the protocol does not allow.
    pub fn invalid_agent_response(message: impl Into<String>) -> Self {
        Self::new(INVALID_AGENT_RESPONSE, message)
    }

    /// -32007 "Authenticated Extended Card is not configured".
    pub fn extended_card_not_configured() -> Self {
        Self::from_code(EXTENDED_CARD_NOT_CONFIGURED)
    }

    /// -32008 for a required extension the client did not ask for.
    pub fn extension_support_required(uri: &str) -> Self {
        Self::new(
            EXTENSION_SUPPORT_REQUIRED,
            format!("Extension support required: {uri}"),
        )
    }

    /// -32009 for a method of version `expected` called with `requested`.
    pub fn version_not_supported(requested: &str, expected: Version) -> Self {
        Self::new(
            VERSION_NOT_SUPPORTED,
            format!(
                "A2A version '{requested}' is not supported by this handler. Expected version '{}'.",
                expected.as_str()
            ),
        )
    }

    /// The v1.0 ErrorInfo `reason` of the code.
    pub fn reason(&self) -> &'static str {
        match self.code {
            PARSE_ERROR => "PARSE_ERROR",
            INVALID_REQUEST => "INVALID_REQUEST",
            METHOD_NOT_FOUND => "METHOD_NOT_FOUND",
            INVALID_PARAMS => "INVALID_PARAMS",
            TASK_NOT_FOUND => "TASK_NOT_FOUND",
            TASK_NOT_CANCELABLE => "TASK_NOT_CANCELABLE",
            PUSH_NOT_SUPPORTED => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            UNSUPPORTED_OPERATION => "UNSUPPORTED_OPERATION",
            CONTENT_TYPE_NOT_SUPPORTED => "CONTENT_TYPE_NOT_SUPPORTED",
            INVALID_AGENT_RESPONSE => "INVALID_AGENT_RESPONSE",
            EXTENDED_CARD_NOT_CONFIGURED => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            EXTENSION_SUPPORT_REQUIRED => "EXTENSION_SUPPORT_REQUIRED",
            VERSION_NOT_SUPPORTED => "VERSION_NOT_SUPPORTED",
            _ => "INTERNAL_ERROR",
        }
    }
}

/// How an error is written in the bindings other than JSON-RPC: the HTTP
/// status of the HTTP+JSON binding and the gRPC status (its number and
/// name, which `google.rpc.Status` JSON calls `status`), by the spec's
/// table of error code mappings; the ErrorInfo `reason` is
/// [`RpcError::reason`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorStatus {
    pub http: u16,
    pub grpc: i32,
    pub grpc_name: &'static str,
}

impl ErrorStatus {
    const INVALID_ARGUMENT: ErrorStatus = ErrorStatus {
        http: 400,
        grpc: 3,
        grpc_name: "INVALID_ARGUMENT",
    };
    const FAILED_PRECONDITION: ErrorStatus = ErrorStatus {
        http: 400,
        grpc: 9,
        grpc_name: "FAILED_PRECONDITION",
    };
    const NOT_FOUND: ErrorStatus = ErrorStatus {
        http: 404,
        grpc: 5,
        grpc_name: "NOT_FOUND",
    };
    const UNIMPLEMENTED: ErrorStatus = ErrorStatus {
        http: 404,
        grpc: 12,
        grpc_name: "UNIMPLEMENTED",
    };
    const INTERNAL: ErrorStatus = ErrorStatus {
        http: 500,
        grpc: 13,
        grpc_name: "INTERNAL",
    };
    const UNAVAILABLE: ErrorStatus = ErrorStatus {
        http: 503,
        grpc: 14,
        grpc_name: "UNAVAILABLE",
    };

    /// The status of a refusal that has only an HTTP status (the gate's,
    /// a missing endpoint): by the usual correspondence of the two.
    pub fn from_http(http: u16) -> ErrorStatus {
        let (grpc, grpc_name) = match http {
            400 | 413 | 415 | 422 => (3, "INVALID_ARGUMENT"),
            401 => (16, "UNAUTHENTICATED"),
            403 => (7, "PERMISSION_DENIED"),
            404 => (5, "NOT_FOUND"),
            405 => (12, "UNIMPLEMENTED"),
            409 => (10, "ABORTED"),
            429 => (8, "RESOURCE_EXHAUSTED"),
            503 => (14, "UNAVAILABLE"),
            504 => (4, "DEADLINE_EXCEEDED"),
            s if (400..500).contains(&s) => (9, "FAILED_PRECONDITION"),
            _ => (13, "INTERNAL"),
        };
        ErrorStatus {
            http,
            grpc,
            grpc_name,
        }
    }
}

impl RpcError {
    /// The error's status in the HTTP+JSON and gRPC bindings.
    pub fn status(&self) -> ErrorStatus {
        match self.code {
            TASK_NOT_FOUND => ErrorStatus::NOT_FOUND,
            METHOD_NOT_FOUND => ErrorStatus::UNIMPLEMENTED,
            TASK_NOT_CANCELABLE
            | PUSH_NOT_SUPPORTED
            | UNSUPPORTED_OPERATION
            | EXTENDED_CARD_NOT_CONFIGURED
            | EXTENSION_SUPPORT_REQUIRED
            | VERSION_NOT_SUPPORTED => ErrorStatus::FAILED_PRECONDITION,
            PARSE_ERROR | INVALID_REQUEST | INVALID_PARAMS | CONTENT_TYPE_NOT_SUPPORTED => {
                ErrorStatus::INVALID_ARGUMENT
            }
            // The meta store being away is worth a retry.
            _ if self.metadata.get("error").and_then(Value::as_str) == Some("meta_unavailable") => {
                ErrorStatus::UNAVAILABLE
            }
            _ => ErrorStatus::INTERNAL,
        }
    }

    /// The error as the HTTP+JSON binding writes it: a `google.rpc.Status`
    /// in JSON under `error`, with the ErrorInfo that names the A2A error.
    pub fn to_status_json(&self) -> Value {
        status_json(self.status(), &self.message, self.error_info())
    }

    /// The `google.rpc.ErrorInfo` naming the error (ProtoJSON `Any`): its
    /// reason, the protocol's domain, and the metadata as strings.
    pub fn error_info(&self) -> Value {
        json!({
            "@type": ERROR_INFO_TYPE,
            "reason": self.reason(),
            "domain": ERROR_DOMAIN,
            "metadata": self.metadata_text(),
        })
    }

    /// The metadata as ErrorInfo carries it: every value a string (a
    /// string as it is, anything else as its JSON).
    pub fn metadata_text(&self) -> BTreeMap<String, String> {
        self.metadata
            .iter()
            .map(|(k, v)| {
                let text = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.clone(), text)
            })
            .collect()
    }
}

/// The ErrorInfo domain of the gate's refusals (those that are not A2A
/// errors: unauthenticated, forbidden, over quota, unknown agent).
pub const GATE_DOMAIN: &str = "eventmesh";

/// A refusal of the gate as the HTTP+JSON and gRPC bindings write it:
/// the status of its HTTP code ([`ErrorStatus::from_http`]) and an
/// ErrorInfo in [`GATE_DOMAIN`] whose reason is the error code in
/// capitals (`unknown_agent` → `UNKNOWN_AGENT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateRefusal {
    pub status: ErrorStatus,
    pub reason: String,
}

impl GateRefusal {
    pub fn new(http: u16, code: &str) -> GateRefusal {
        GateRefusal {
            status: ErrorStatus::from_http(http),
            reason: code.to_ascii_uppercase(),
        }
    }

    /// The refusal as a `google.rpc.Status` in JSON under `error`.
    pub fn to_status_json(&self, message: &str) -> Value {
        let info = json!({
            "@type": ERROR_INFO_TYPE,
            "reason": self.reason,
            "domain": GATE_DOMAIN,
        });
        status_json(self.status, message, info)
    }
}

fn status_json(s: ErrorStatus, message: &str, info: Value) -> Value {
    json!({"error": {
        "code": s.http,
        "status": s.grpc_name,
        "message": message,
        "details": [info],
    }})
}

/// The protocol's default message for a code.
pub fn default_message(code: i64) -> &'static str {
    match code {
        PARSE_ERROR => "Invalid JSON payload",
        INVALID_REQUEST => "Invalid Request",
        METHOD_NOT_FOUND => "Method not found",
        INVALID_PARAMS => "Invalid params",
        TASK_NOT_FOUND => "Task not found",
        TASK_NOT_CANCELABLE => "Task cannot be canceled",
        PUSH_NOT_SUPPORTED => "Push Notification is not supported",
        UNSUPPORTED_OPERATION => "This operation is not supported",
        CONTENT_TYPE_NOT_SUPPORTED => "Incompatible content types",
        INVALID_AGENT_RESPONSE => "Invalid agent response",
        EXTENDED_CARD_NOT_CONFIGURED => "Authenticated Extended Card is not configured",
        EXTENSION_SUPPORT_REQUIRED => "Extension support required",
        VERSION_NOT_SUPPORTED => "Version not supported",
        _ => "Internal error",
    }
}

/// A parsed request. `id` is a string, a number or `null`; `params` is an
/// object (`{}` when absent).
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub id: Value,
    pub method: String,
    pub params: Value,
}

/// Parses a request body. The error is answered with `id: null`; see
/// [`parse_envelope`] to echo the id when it could be read.
pub fn parse(body: &[u8]) -> Result<Request, RpcError> {
    parse_envelope(body).map_err(|(_, e)| e)
}

/// Parses a request body; an error comes with the id to answer with: the
/// request's id if it is a valid one, else `null`.
pub fn parse_envelope(body: &[u8]) -> Result<Request, (Value, RpcError)> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        (
            Value::Null,
            RpcError::parse_error(format!("Invalid JSON payload: {e}")),
        )
    })?;
    let invalid = |id: &Value, msg: &str| (id.clone(), RpcError::invalid_request(msg));
    let obj = match value {
        Value::Object(obj) => obj,
        Value::Array(_) => return Err(invalid(&Value::Null, "Batch requests are not supported")),
        _ => {
            return Err(invalid(
                &Value::Null,
                "Invalid request: the body must be a JSON object",
            ))
        }
    };
    let id = match obj.get("id") {
        None => Value::Null,
        Some(id @ (Value::Null | Value::String(_) | Value::Number(_))) => id.clone(),
        Some(_) => {
            return Err(invalid(
                &Value::Null,
                "Invalid request: 'id' must be a string, a number or null",
            ))
        }
    };
    if obj.get("jsonrpc") != Some(&json!("2.0")) {
        return Err(invalid(
            &id,
            "Invalid request: 'jsonrpc' must be exactly '2.0'",
        ));
    }
    let Some(Value::String(method)) = obj.get("method") else {
        return Err(invalid(&id, "Invalid request: 'method' must be a string"));
    };
    let params = match obj.get("params") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => {
            return Err((id, RpcError::invalid_params("params: must be an object")));
        }
    };
    Ok(Request {
        id,
        method: method.clone(),
        params,
    })
}

/// A success response: `{"jsonrpc":"2.0","id":…,"result":…}`.
pub fn success(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// An error response framed for `version` (see the module invariants).
pub fn error(id: &Value, e: &RpcError, version: Version) -> Value {
    let mut err = Map::new();
    match version {
        Version::V1 => {
            err.insert("code".into(), e.code.into());
            err.insert("message".into(), e.message.clone().into());
            let bare = matches!(e.code, PARSE_ERROR | METHOD_NOT_FOUND) && e.metadata.is_empty();
            if !bare {
                err.insert("data".into(), Value::Array(vec![e.error_info()]));
            }
        }
        Version::V03 => {
            let code = match e.code {
                EXTENSION_SUPPORT_REQUIRED | VERSION_NOT_SUPPORTED => INTERNAL_ERROR,
                code => code,
            };
            err.insert("code".into(), code.into());
            err.insert("message".into(), e.message.clone().into());
            let data = if e.metadata.is_empty() {
                Value::Null
            } else {
                Value::Object(e.metadata.clone())
            };
            err.insert("data".into(), data);
        }
    }
    json!({"jsonrpc": "2.0", "id": id, "error": err})
}

/// The `result` of a task-valued call (GetTask, CancelTask): the bare task
/// in either version, with `kind` in v0.3.
pub fn task_result(task: &Task, version: Version) -> Value {
    match version {
        Version::V1 => to_json(task),
        Version::V03 => v03::task_to_v03(task),
    }
}

/// The `result` of a send or a stream event: wrapped (`{"task": …}`) in
/// v1.0, bare with `kind` in v0.3, where a status update carries `final_`.
pub fn stream_result(event: &StreamResponse, version: Version, final_: bool) -> Value {
    match version {
        Version::V1 => to_json(event),
        Version::V03 => v03::stream_to_v03(event, final_),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_header_table() {
        let table = json!([
            [null, "0.3"],
            ["", "0.3"],
            ["  ", "0.3"],
            ["0.3", "0.3"],
            ["0.3.0", "0.3"],
            ["1", "1.0"],
            ["1.0", "1.0"],
            [" 1.0 ", "1.0"],
            ["1.0.0", "1.0"],
            ["1.1", "1.0"],
            ["2.0", "err"],
            ["0.2", "err"],
            ["0", "err"],
            ["1.", "err"],
            ["v1.0", "err"],
            ["1.0.0.0", "err"]
        ]);
        for row in table.as_array().unwrap() {
            let header = row[0].as_str();
            let got = match version_from_header(header) {
                Ok(v) => v.as_str().to_string(),
                Err(e) => {
                    assert_eq!(e, header.unwrap_or("").trim());
                    "err".into()
                }
            };
            assert_eq!(got, row[1].as_str().unwrap(), "{header:?}");
        }
    }

    #[test]
    fn method_versions() {
        assert_eq!(method_version("SendMessage"), Some(Version::V1));
        assert_eq!(
            method_version("ListTaskPushNotificationConfigs"),
            Some(Version::V1)
        );
        assert_eq!(method_version("tasks/resubscribe"), Some(Version::V03));
        assert_eq!(method_version("tasks/list"), None);
        assert_eq!(method_version("sendMessage"), None);
    }

    #[test]
    fn parse_requests() {
        let r = parse(br#"{"jsonrpc":"2.0","id":"r-1","method":"GetTask","params":{"id":"t"}}"#);
        let want = Request {
            id: json!("r-1"),
            method: "GetTask".into(),
            params: json!({"id": "t"}),
        };
        assert_eq!(r, Ok(want));
        let r = parse(br#"{"jsonrpc":"2.0","id":7,"method":"GetExtendedAgentCard"}"#).unwrap();
        assert_eq!((r.id, r.params), (json!(7), json!({})));
        let r = parse(br#"{"jsonrpc":"2.0","method":"x","params":null}"#).unwrap();
        assert_eq!((r.id, r.params), (Value::Null, json!({})));

        let (id, e) = parse_envelope(b"{").unwrap_err();
        assert_eq!((id, e.code), (Value::Null, PARSE_ERROR));
        assert!(
            e.message.starts_with("Invalid JSON payload: "),
            "{}",
            e.message
        );
        // body, id answered with, code, message
        let cases = json!([
            ["[]", null, -32600, "Batch requests are not supported"],
            [
                "5",
                null,
                -32600,
                "Invalid request: the body must be a JSON object"
            ],
            [
                r#"{"jsonrpc":"2.0","id":true,"method":"m"}"#,
                null,
                -32600,
                "Invalid request: 'id' must be a string, a number or null"
            ],
            [
                r#"{"jsonrpc":"1.0","id":7,"method":"m"}"#,
                7,
                -32600,
                "Invalid request: 'jsonrpc' must be exactly '2.0'"
            ],
            [
                r#"{"jsonrpc":2.0,"id":7,"method":"m"}"#,
                7,
                -32600,
                "Invalid request: 'jsonrpc' must be exactly '2.0'"
            ],
            [
                r#"{"jsonrpc":"2.0","id":"a","method":5}"#,
                "a",
                -32600,
                "Invalid request: 'method' must be a string"
            ],
            [
                r#"{"jsonrpc":"2.0","id":"a"}"#,
                "a",
                -32600,
                "Invalid request: 'method' must be a string"
            ],
            [
                r#"{"jsonrpc":"2.0","id":"a","method":"m","params":[1]}"#,
                "a",
                -32602,
                "params: must be an object"
            ]
        ]);
        for case in cases.as_array().unwrap() {
            let body = case[0].as_str().unwrap().as_bytes();
            let (id, e) = parse_envelope(body).unwrap_err();
            assert_eq!(json!([case[0], id, e.code, e.message]), *case);
            assert_eq!(parse(body).unwrap_err(), e);
        }
    }

    #[test]
    fn every_error_in_both_versions() {
        // code, reason, message
        let cases = [
            (RpcError::parse_error("bad"), "-32700 PARSE_ERROR bad"),
            (RpcError::invalid_request("no"), "-32600 INVALID_REQUEST no"),
            (RpcError::method_not_found(), "-32601 METHOD_NOT_FOUND Method not found"),
            (RpcError::invalid_params("id: missing"), "-32602 INVALID_PARAMS id: missing"),
            (RpcError::internal("boom"), "-32603 INTERNAL_ERROR boom"),
            (RpcError::task_not_found("t-1"), "-32001 TASK_NOT_FOUND Task t-1 not found"),
            (RpcError::task_not_cancelable(), "-32002 TASK_NOT_CANCELABLE Task cannot be canceled"),
            (
                RpcError::push_not_supported(),
                "-32003 PUSH_NOTIFICATION_NOT_SUPPORTED Push Notification is not supported",
            ),
            (RpcError::unsupported_operation("no"), "-32004 UNSUPPORTED_OPERATION no"),
            (
                RpcError::task_terminal("t-1", TaskState::Failed),
                "-32004 UNSUPPORTED_OPERATION Task t-1 is in terminal state: TASK_STATE_FAILED",
            ),
            (RpcError::content_type_not_supported("png"), "-32005 CONTENT_TYPE_NOT_SUPPORTED png"),
            (RpcError::invalid_agent_response("bad"), "-32006 INVALID_AGENT_RESPONSE bad"),
            (
                RpcError::extended_card_not_configured(),
                "-32007 EXTENDED_AGENT_CARD_NOT_CONFIGURED Authenticated Extended Card is not configured",
            ),
            (
                RpcError::extension_support_required("urn:x"),
                "-32008 EXTENSION_SUPPORT_REQUIRED Extension support required: urn:x",
            ),
            (
                RpcError::version_not_supported("2.0", Version::V1),
                "-32009 VERSION_NOT_SUPPORTED A2A version '2.0' is not supported by this handler. Expected version '1.0'.",
            ),
        ];
        for (e, want) in cases {
            let mut fields = want.splitn(3, ' ');
            let (code, reason, message) = (fields.next(), fields.next(), fields.next());
            let code: i64 = code.and_then(|c| c.parse().ok()).unwrap();
            assert_eq!(
                (e.code, e.reason(), Some(e.message.as_str())),
                (code, reason.unwrap(), message)
            );
            let mut v1 =
                json!({"jsonrpc": "2.0", "id": "r", "error": {"code": code, "message": message}});
            if !matches!(code, -32700 | -32601) {
                v1["error"]["data"] = json!([{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": reason, "domain": "a2a-protocol.org", "metadata": {}}]);
            }
            assert_eq!(error(&json!("r"), &e, Version::V1), v1, "{want}");
            let v03_code = if matches!(code, -32008 | -32009) {
                -32603
            } else {
                code
            };
            let v03 = json!({"jsonrpc": "2.0", "id": "r", "error": {"code": v03_code, "message": message, "data": null}});
            assert_eq!(error(&json!("r"), &e, Version::V03), v03, "{want}");
        }
    }

    #[test]
    fn error_metadata() {
        let e = RpcError::task_not_found("t")
            .with_meta("taskId", "t")
            .with_meta("n", 2);
        let v1 = error(&json!(1), &e, Version::V1);
        assert_eq!(
            v1["error"]["data"][0]["metadata"],
            json!({"taskId": "t", "n": "2"})
        );
        let v03 = error(&json!(1), &e, Version::V03);
        assert_eq!(v03["error"]["data"], json!({"taskId": "t", "n": 2}));
        let e = RpcError::method_not_found().with_meta("method", "Nope");
        let v1 = error(&json!(1), &e, Version::V1);
        assert_eq!(
            v1["error"]["data"][0]["metadata"],
            json!({"method": "Nope"})
        );
        assert_eq!(RpcError::new(-1, "x").reason(), "INTERNAL_ERROR");
        assert_eq!(
            RpcError::from_code(TASK_NOT_FOUND).message,
            "Task not found"
        );
        let ok = success(&json!(20), Value::Null);
        assert_eq!(ok, json!({"jsonrpc": "2.0", "id": 20, "result": null}));
    }
}
