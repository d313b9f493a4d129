//! The A2A HTTP+JSON binding: the routes of the proto's `google.api.http`
//! annotations under each agent's endpoint (`/a2a/agents/{id}/…`) and the
//! gateway's (`/a2a/…`), decoded into a call (`eventmesh_a2a_gateway::call`)
//! like a JSON-RPC request is:
//!
//! | route | method |
//! |---|---|
//! | `POST …/message:send` | SendMessage |
//! | `POST …/message:stream` | SendStreamingMessage (server-sent events) |
//! | `GET …/tasks/{id}` | GetTask (`?historyLength=`) |
//! | `GET …/tasks` | ListTasks (`?contextId=&status=&pageSize=&pageToken=&historyLength=&statusTimestampAfter=&includeArtifacts=`) |
//! | `POST …/tasks/{id}:cancel` | CancelTask |
//! | `GET` or `POST …/tasks/{id}:subscribe` | SubscribeToTask (server-sent events) |
//! | `POST …/tasks/{id}/pushNotificationConfigs` | CreateTaskPushNotificationConfig |
//! | `GET …/tasks/{id}/pushNotificationConfigs` | ListTaskPushNotificationConfigs |
//! | `GET …/tasks/{id}/pushNotificationConfigs/{configId}` | GetTaskPushNotificationConfig |
//! | `DELETE …/tasks/{id}/pushNotificationConfigs/{configId}` | DeleteTaskPushNotificationConfig |
//! | `GET …/extendedAgentCard` | GetExtendedAgentCard |
//!
//! Bodies and answers are ProtoJSON, the same JSON the JSON-RPC binding
//! carries as `params` and `result`. The version is the `A2A-Version`
//! header or query parameter; these routes are 1.0's (0.3's REST routes,
//! under `…/v1/`, are in `a2a_rest_v03.rs`). Every error, the gate's
//! included, is a `google.rpc.Status` in JSON under `error`, with the HTTP
//! status of the spec's table and an ErrorInfo naming the A2A error.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, Method as HttpMethod, StatusCode};
use axum::response::{IntoResponse, Response};
use eventmesh_a2a::rpc::{GateRefusal, RpcError, Version};
use eventmesh_a2a_gateway::call::{self, Answer, Method, Refused};
use eventmesh_api::ApiError;
use serde_json::{Map, Value};

use super::a2a::{base_url, gateway};
use super::traffic::Req;
use super::AppState;

/// The media type of the binding's bodies.
const A2A_JSON: &str = "application/a2a+json";

/// `…/agents/{id}/{*rest}`: a route of the agent's endpoint.
pub(super) async fn agent_route(
    State(app): State<AppState>,
    Path((id, rest)): Path<(String, String)>,
    method: HttpMethod,
    Query(query): Query<Vec<(String, String)>>,
    r: Req,
    b: Result<Bytes, BytesRejection>,
) -> Response {
    route(&app, Some(&id), &rest, &method, query, &r, b).await
}

/// `/a2a/{*rest}`: a route of the gateway's endpoint, for any agent.
pub(super) async fn gateway_route(
    State(app): State<AppState>,
    Path(rest): Path<String>,
    method: HttpMethod,
    Query(query): Query<Vec<(String, String)>>,
    r: Req,
    b: Result<Bytes, BytesRejection>,
) -> Response {
    route(&app, None, &rest, &method, query, &r, b).await
}

/// A route decoded: the method, and the fields its path names.
struct Route {
    method: Method,
    fields: Vec<(&'static str, String)>,
}

/// Which method `verb path` is (`path` below the endpoint, without a
/// leading `/`); `None` when it is none.
fn decode_route(verb: &HttpMethod, path: &str) -> Option<Route> {
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let m = |method: Method, fields: Vec<(&'static str, String)>| Some(Route { method, fields });
    let get = verb == HttpMethod::GET;
    let post = verb == HttpMethod::POST;
    match segments.as_slice() {
        ["message:send"] if post => m(Method::SendMessage, vec![]),
        ["message:stream"] if post => m(Method::SendStreamingMessage, vec![]),
        ["extendedAgentCard"] if get => m(Method::GetExtendedAgentCard, vec![]),
        ["tasks"] if get => m(Method::ListTasks, vec![]),
        ["tasks", task] => {
            if let Some((id, action)) = task.rsplit_once(':') {
                let fields = vec![("id", id.to_string())];
                return match action {
                    "cancel" if post => m(Method::CancelTask, fields),
                    "subscribe" if get || post => m(Method::SubscribeToTask, fields),
                    _ => None,
                };
            }
            if get {
                m(Method::GetTask, vec![("id", task.to_string())])
            } else {
                None
            }
        }
        ["tasks", task, "pushNotificationConfigs"] => {
            let fields = vec![("taskId", task.to_string())];
            if post {
                m(Method::CreateTaskPushNotificationConfig, fields)
            } else if get {
                m(Method::ListTaskPushNotificationConfigs, fields)
            } else {
                None
            }
        }
        ["tasks", task, "pushNotificationConfigs", config] => {
            let fields = vec![("taskId", task.to_string()), ("id", config.to_string())];
            if get {
                m(Method::GetTaskPushNotificationConfig, fields)
            } else if verb == HttpMethod::DELETE {
                m(Method::DeleteTaskPushNotificationConfig, fields)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// Query parameters that are numbers or booleans in the request message
/// (every other one is a string).
const NUMBERS: [&str; 2] = ["historyLength", "pageSize"];
const BOOLEANS: [&str; 1] = ["includeArtifacts"];

/// The request message: the body's object (none for `GET`/`DELETE`),
/// then the query's fields, then the path's.
pub(super) fn request_message(
    body: &[u8],
    query: &[(String, String)],
    path_fields: Vec<(&'static str, String)>,
) -> Result<Value, RpcError> {
    let mut params = if body.iter().all(u8::is_ascii_whitespace) {
        Map::new()
    } else {
        match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(o)) => o,
            Ok(_) => return Err(RpcError::invalid_request("the body must be a JSON object")),
            Err(e) => return Err(RpcError::parse_error(format!("the body is not JSON: {e}"))),
        }
    };
    for (key, value) in query {
        if key.eq_ignore_ascii_case("a2a-version") {
            continue;
        }
        let v = if NUMBERS.contains(&key.as_str()) {
            let n: i64 = value.parse().map_err(|_| {
                RpcError::invalid_params(format!("{key}: {value:?} is not an integer"))
            })?;
            Value::from(n)
        } else if BOOLEANS.contains(&key.as_str()) {
            match value.as_str() {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                other => {
                    return Err(RpcError::invalid_params(format!(
                        "{key}: {other:?} is neither true nor false"
                    )))
                }
            }
        } else {
            Value::String(value.clone())
        };
        params.insert(key.clone(), v);
    }
    for (key, value) in path_fields {
        params.insert(key.into(), Value::String(value));
    }
    Ok(Value::Object(params))
}

/// The version a request asks for: the `A2A-Version` header, else the
/// query parameter; absent is 1.0 on these routes (0.3 had other ones).
pub(super) fn requested_version(headers: &HeaderMap, query: &[(String, String)]) -> Option<String> {
    headers
        .get("a2a-version")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| {
            query
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("a2a-version"))
                .map(|(_, v)| v.clone())
        })
        .filter(|v| !v.trim().is_empty())
}

#[allow(clippy::too_many_arguments)]
async fn route(
    app: &AppState,
    scope: Option<&str>,
    rest: &str,
    verb: &HttpMethod,
    query: Vec<(String, String)>,
    r: &Req,
    b: Result<Bytes, BytesRejection>,
) -> Response {
    let gw = match gateway(app) {
        Ok(gw) => gw,
        Err(e) => return gate_error(e),
    };
    let raw = match super::traffic::body(b) {
        Ok(raw) => raw,
        Err(e) => return gate_error(e),
    };
    if let Some(path) = rest.strip_prefix("v1/") {
        let base = base_url(app, &r.headers);
        return super::a2a_rest_v03::route(gw, scope, path, verb, &query, r, &raw, &base).await;
    }
    let decoded = decode_route(verb, rest);
    let raw_ref: &[u8] = &raw;
    let not_a_call = |e: RpcError| async move {
        match call::gate(gw, &r.caller, scope, raw_ref).await {
            Ok(()) => rpc_error(&e),
            Err(g) => gate_error(g),
        }
    };
    let Some(route) = decoded else {
        return not_a_call(RpcError::new(
            eventmesh_a2a::rpc::METHOD_NOT_FOUND,
            format!("no A2A operation is {verb} /{rest}"),
        ))
        .await;
    };
    if let Some(v) = requested_version(&r.headers, &query) {
        if eventmesh_a2a::rpc::version_from_header(Some(&v)) != Ok(Version::V1) {
            return not_a_call(RpcError::new(
                eventmesh_a2a::rpc::VERSION_NOT_SUPPORTED,
                format!("A2A version {v:?} is not served on these routes: they are 1.0's (0.3's are under /v1/)"),
            ))
            .await;
        }
    }
    let params = match request_message(&raw, &query, route.fields) {
        Ok(p) => p,
        Err(e) => return not_a_call(e).await,
    };
    let base = base_url(app, &r.headers);
    let answer = call::call(
        gw,
        &r.caller,
        call::Request {
            method: route.method,
            version: Version::V1,
            params,
            scope,
            base: &base,
            raw: &raw,
        },
    )
    .await;
    answer_response(answer)
}

/// The answer to a call, as this binding writes it.
pub(super) fn answer_response(answer: Result<Answer, Refused>) -> Response {
    match answer {
        Ok(Answer::Value(Value::Null)) => json_response(StatusCode::OK, &Value::Object(Map::new())),
        Ok(Answer::Value(v)) => json_response(StatusCode::OK, &v),
        Ok(Answer::Stream(s)) => super::a2a::sse(s, |s, ev, last| s.to_json(ev, last)),
        Err(Refused::Rpc(e)) => rpc_error(&e),
        Err(Refused::Gate(e)) => gate_error(e),
    }
}

fn json_response(status: StatusCode, v: &Value) -> Response {
    let mut resp = (status, v.to_string()).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(A2A_JSON));
    resp
}

/// A protocol error: its HTTP status and `google.rpc.Status` body.
pub(super) fn rpc_error(e: &RpcError) -> Response {
    let status = StatusCode::from_u16(e.status().http).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(status, &e.to_status_json())
}

/// A refusal of the gate (or of a missing endpoint) in the binding's
/// error shape: its status, a `google.rpc.Status` body whose ErrorInfo
/// names the refusal (domain `eventmesh`), and the headers the refusal
/// carries on every route (`WWW-Authenticate`, `Retry-After`).
pub(super) fn gate_error(e: ApiError) -> Response {
    let body = GateRefusal::new(e.status.as_u16(), e.code).to_status_json(&e.message);
    // The common answer, for its status and headers, with this body.
    let mut resp = e.into_response();
    *resp.body_mut() = axum::body::Body::from(body.to_string());
    let headers = resp.headers_mut();
    headers.remove(header::CONTENT_LENGTH);
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(A2A_JSON));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_decode_to_methods_and_path_fields() {
        let d = |verb: HttpMethod, path: &str| {
            decode_route(&verb, path).map(|r| {
                let fields: Vec<String> =
                    r.fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
                (r.method, fields.join(","))
            })
        };
        use HttpMethod as V;
        assert_eq!(
            d(V::POST, "message:send"),
            Some((Method::SendMessage, String::new()))
        );
        assert_eq!(d(V::GET, "message:send"), None);
        assert_eq!(
            d(V::GET, "tasks/t-1"),
            Some((Method::GetTask, "id=t-1".into()))
        );
        assert_eq!(d(V::GET, "tasks"), Some((Method::ListTasks, String::new())));
        assert_eq!(
            d(V::POST, "tasks/t-1:cancel"),
            Some((Method::CancelTask, "id=t-1".into()))
        );
        assert_eq!(
            d(V::GET, "tasks/t-1:subscribe"),
            Some((Method::SubscribeToTask, "id=t-1".into()))
        );
        assert_eq!(
            d(V::POST, "tasks/t-1:subscribe"),
            Some((Method::SubscribeToTask, "id=t-1".into()))
        );
        assert_eq!(d(V::POST, "tasks/t-1:archive"), None);
        assert_eq!(
            d(V::GET, "tasks/t-1/pushNotificationConfigs/c-2"),
            Some((
                Method::GetTaskPushNotificationConfig,
                "taskId=t-1,id=c-2".into()
            ))
        );
        assert_eq!(
            d(V::DELETE, "tasks/t-1/pushNotificationConfigs/c-2"),
            Some((
                Method::DeleteTaskPushNotificationConfig,
                "taskId=t-1,id=c-2".into()
            ))
        );
        assert_eq!(
            d(V::GET, "tasks/t-1/pushNotificationConfigs"),
            Some((Method::ListTaskPushNotificationConfigs, "taskId=t-1".into()))
        );
        assert_eq!(
            d(V::GET, "extendedAgentCard"),
            Some((Method::GetExtendedAgentCard, String::new()))
        );
        assert_eq!(d(V::GET, "nothing/here"), None);
    }

    #[test]
    fn query_fields_take_their_types() {
        let q = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let m = request_message(
            b"",
            &q(&[
                ("pageSize", "5"),
                ("includeArtifacts", "true"),
                ("status", "TASK_STATE_WORKING"),
                ("A2A-Version", "1.0"),
            ]),
            vec![],
        )
        .unwrap();
        assert_eq!(
            m,
            serde_json::json!({"pageSize": 5, "includeArtifacts": true, "status": "TASK_STATE_WORKING"})
        );
        let bad = request_message(b"", &q(&[("historyLength", "many")]), vec![]).unwrap_err();
        assert_eq!(bad.code, eventmesh_a2a::rpc::INVALID_PARAMS);
        let path_wins =
            request_message(br#"{"id": "body"}"#, &[], vec![("id", "path".into())]).unwrap();
        assert_eq!(path_wins, serde_json::json!({"id": "path"}));
        assert_eq!(
            request_message(b"[1]", &[], vec![]).unwrap_err().code,
            eventmesh_a2a::rpc::INVALID_REQUEST
        );
        assert_eq!(
            request_message(b"{nope", &[], vec![]).unwrap_err().code,
            eventmesh_a2a::rpc::PARSE_ERROR
        );
    }
}
