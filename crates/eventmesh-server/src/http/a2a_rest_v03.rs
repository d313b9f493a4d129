//! A2A v0.3 over HTTP+JSON: the v0.3 REST routes, under `…/v1/` at each
//! agent's endpoint and the gateway's, served by the same calls as every
//! other binding (at v0.3, as the JSON-RPC binding serves `message/send`).
//!
//! | route | method |
//! |---|---|
//! | `POST …/v1/message:send` | message/send |
//! | `POST …/v1/message:stream` | message/stream (server-sent events) |
//! | `GET …/v1/tasks/{id}` | tasks/get (`?historyLength=`) |
//! | `POST …/v1/tasks/{id}:cancel` | tasks/cancel |
//! | `GET` or `POST …/v1/tasks/{id}:subscribe` | tasks/resubscribe (server-sent events) |
//! | `POST …/v1/tasks/{id}/pushNotificationConfigs` | tasks/pushNotificationConfig/set |
//! | `GET …/v1/tasks/{id}/pushNotificationConfigs` | tasks/pushNotificationConfig/list |
//! | `GET …/v1/tasks/{id}/pushNotificationConfigs/{configId}` | tasks/pushNotificationConfig/get |
//! | `DELETE …/v1/tasks/{id}/pushNotificationConfigs/{configId}` | tasks/pushNotificationConfig/delete |
//! | `GET …/v1/card` | agent/getAuthenticatedExtendedCard |
//!
//! Bodies and answers are the v0.3 proto's JSON, translated to and from
//! the call layer's v0.3 JSON by `eventmesh_a2a::v03_rest`. v0.3 has no
//! ListTasks. Errors are v0.3's: the status of its table and
//! `{"message", "type"}`; the gate's refusals are the common ones
//! (`{"error", "message"}`, with `WWW-Authenticate` and `Retry-After`).
//! A request naming a version other than 0.3 is refused.

use axum::http::{header, HeaderValue, Method as HttpMethod, StatusCode};
use axum::response::{IntoResponse, Response};
use eventmesh_a2a::rpc::{self, RpcError, Version};
use eventmesh_a2a::v03_rest;
use eventmesh_a2a_gateway::call::{self, Answer, Method, Refused};
use eventmesh_a2a_gateway::Gateway;
use serde_json::{json, Value};

use super::a2a_rest::requested_version;
use super::traffic::Req;

/// Which method `verb path` is (`path` below `…/v1/`), and the task and
/// config ids its path names.
fn decode(verb: &HttpMethod, path: &str) -> Option<(Method, Option<String>, Option<String>)> {
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let get = verb == HttpMethod::GET;
    let post = verb == HttpMethod::POST;
    let task = |t: &str| Some(t.to_string());
    match segments.as_slice() {
        ["message:send"] if post => Some((Method::SendMessage, None, None)),
        ["message:stream"] if post => Some((Method::SendStreamingMessage, None, None)),
        ["card"] if get => Some((Method::GetExtendedAgentCard, None, None)),
        ["tasks", t] => match t.rsplit_once(':') {
            Some((id, "cancel")) if post => Some((Method::CancelTask, task(id), None)),
            Some((id, "subscribe")) if get || post => {
                Some((Method::SubscribeToTask, task(id), None))
            }
            None if get => Some((Method::GetTask, task(t), None)),
            _ => None,
        },
        ["tasks", t, "pushNotificationConfigs"] if post => {
            Some((Method::CreateTaskPushNotificationConfig, task(t), None))
        }
        ["tasks", t, "pushNotificationConfigs"] if get => {
            Some((Method::ListTaskPushNotificationConfigs, task(t), None))
        }
        ["tasks", t, "pushNotificationConfigs", c] => {
            let method = if get {
                Method::GetTaskPushNotificationConfig
            } else if verb == HttpMethod::DELETE {
                Method::DeleteTaskPushNotificationConfig
            } else {
                return None;
            };
            Some((method, task(t), Some(c.to_string())))
        }
        _ => None,
    }
}

/// The call's params (v0.3 JSON-RPC form) from the body, the query and
/// the path.
fn params(
    method: Method,
    body: &[u8],
    query: &[(String, String)],
    task: Option<String>,
    config: Option<String>,
) -> Result<Value, RpcError> {
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice::<Value>(body)
            .map_err(|e| RpcError::parse_error(format!("the body is not JSON: {e}")))?
    };
    let invalid = RpcError::invalid_params;
    let task = task.unwrap_or_default();
    Ok(match method {
        Method::SendMessage | Method::SendStreamingMessage => {
            v03_rest::send_in(&body).map_err(invalid)?
        }
        Method::CreateTaskPushNotificationConfig => {
            v03_rest::push_create_in(&task, &body).map_err(invalid)?
        }
        Method::GetTask => {
            let mut p = json!({ "id": task });
            if let Some((_, n)) = query.iter().find(|(k, _)| k == "historyLength") {
                let n: i64 = n
                    .parse()
                    .map_err(|_| invalid(format!("historyLength: {n:?} is not an integer")))?;
                p["historyLength"] = n.into();
            }
            p
        }
        Method::GetTaskPushNotificationConfig | Method::DeleteTaskPushNotificationConfig => {
            json!({ "id": task, "pushNotificationConfigId": config })
        }
        Method::GetExtendedAgentCard => json!({}),
        _ => json!({ "id": task }),
    })
}

/// A call's answer (v0.3 JSON-RPC form) as the proto's JSON.
fn answer_out(method: Method, v: &Value) -> Value {
    match method {
        Method::SendMessage => v03_rest::stream_out(v),
        Method::GetTask | Method::CancelTask => v03_rest::task_out(v),
        Method::CreateTaskPushNotificationConfig | Method::GetTaskPushNotificationConfig => {
            v03_rest::push_out(v)
        }
        Method::ListTaskPushNotificationConfigs => v03_rest::push_list_out(v),
        Method::DeleteTaskPushNotificationConfig => json!({}),
        _ => v.clone(),
    }
}

fn json_response(status: StatusCode, v: &Value) -> Response {
    let mut resp = (status, v.to_string()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn error(e: &RpcError) -> Response {
    let (status, body) = v03_rest::error_out(e);
    json_response(
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &body,
    )
}

/// One request to a v0.3 route: `path` is below `…/v1/`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn route(
    gw: &std::sync::Arc<Gateway>,
    scope: Option<&str>,
    path: &str,
    verb: &HttpMethod,
    query: &[(String, String)],
    r: &Req,
    raw: &[u8],
    base: &str,
) -> Response {
    // A request that is no call still meets the gate first.
    let refuse = |e: RpcError| async move {
        match call::gate(gw, &r.caller, scope, raw).await {
            Ok(()) => error(&e),
            Err(g) => g.into_response(),
        }
    };
    let Some((method, task, config)) = decode(verb, path) else {
        return refuse(RpcError::new(
            rpc::METHOD_NOT_FOUND,
            format!("no A2A v0.3 operation is {verb} /v1/{path}"),
        ))
        .await;
    };
    if let Some(v) = requested_version(&r.headers, query) {
        if rpc::version_from_header(Some(&v)) != Ok(Version::V03) {
            return refuse(RpcError::new(
                rpc::VERSION_NOT_SUPPORTED,
                format!("A2A version {v:?} is not served on the /v1/ routes: they are 0.3's"),
            ))
            .await;
        }
    }
    let params = match params(method, raw, query, task, config) {
        Ok(p) => p,
        Err(e) => return refuse(e).await,
    };
    let req = call::Request {
        method,
        version: Version::V03,
        params,
        scope,
        base,
        raw,
    };
    match call::call(gw, &r.caller, req).await {
        Ok(Answer::Value(v)) => json_response(StatusCode::OK, &answer_out(method, &v)),
        Ok(Answer::Stream(s)) => {
            super::a2a::sse(s, |s, ev, last| v03_rest::stream_out(&s.to_json(ev, last)))
        }
        Err(Refused::Rpc(e)) => error(&e),
        Err(Refused::Gate(e)) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v03_routes_decode_to_methods() {
        use HttpMethod as V;
        let d = |verb: V, path: &str| decode(&verb, path);
        let t = |s: &str| Some(s.to_string());
        assert_eq!(
            d(V::POST, "message:send"),
            Some((Method::SendMessage, None, None))
        );
        assert_eq!(d(V::GET, "message:send"), None);
        assert_eq!(
            d(V::POST, "message:stream"),
            Some((Method::SendStreamingMessage, None, None))
        );
        assert_eq!(
            d(V::GET, "card"),
            Some((Method::GetExtendedAgentCard, None, None))
        );
        assert_eq!(
            d(V::GET, "tasks/t1"),
            Some((Method::GetTask, t("t1"), None))
        );
        assert_eq!(d(V::GET, "tasks"), None);
        assert_eq!(
            d(V::POST, "tasks/t1:cancel"),
            Some((Method::CancelTask, t("t1"), None))
        );
        assert_eq!(
            d(V::GET, "tasks/t1:subscribe"),
            Some((Method::SubscribeToTask, t("t1"), None))
        );
        assert_eq!(
            d(V::POST, "tasks/t1:subscribe"),
            Some((Method::SubscribeToTask, t("t1"), None))
        );
        assert_eq!(d(V::POST, "tasks/t1:frobnicate"), None);
        assert_eq!(
            d(V::POST, "tasks/t1/pushNotificationConfigs"),
            Some((Method::CreateTaskPushNotificationConfig, t("t1"), None))
        );
        assert_eq!(
            d(V::GET, "tasks/t1/pushNotificationConfigs"),
            Some((Method::ListTaskPushNotificationConfigs, t("t1"), None))
        );
        assert_eq!(
            d(V::GET, "tasks/t1/pushNotificationConfigs/c1"),
            Some((Method::GetTaskPushNotificationConfig, t("t1"), t("c1")))
        );
        assert_eq!(
            d(V::DELETE, "tasks/t1/pushNotificationConfigs/c1"),
            Some((Method::DeleteTaskPushNotificationConfig, t("t1"), t("c1")))
        );
        assert_eq!(d(V::PUT, "tasks/t1/pushNotificationConfigs/c1"), None);
    }

    #[test]
    fn path_and_query_fill_the_params() {
        let p = params(
            Method::GetTask,
            b"",
            &[("historyLength".into(), "2".into())],
            Some("t".into()),
            None,
        );
        assert_eq!(p.unwrap(), json!({"id": "t", "historyLength": 2}));
        let bad = params(
            Method::GetTask,
            b"",
            &[("historyLength".into(), "two".into())],
            Some("t".into()),
            None,
        );
        assert_eq!(
            bad.unwrap_err().message,
            "historyLength: \"two\" is not an integer"
        );
        let p = params(
            Method::GetTaskPushNotificationConfig,
            b" ",
            &[],
            Some("t".into()),
            Some("c".into()),
        );
        assert_eq!(
            p.unwrap(),
            json!({"id": "t", "pushNotificationConfigId": "c"})
        );
        let p = params(Method::CancelTask, b"", &[], Some("t".into()), None);
        assert_eq!(p.unwrap(), json!({"id": "t"}));
        assert_eq!(
            params(Method::SendMessage, b"{", &[], None, None)
                .unwrap_err()
                .code,
            rpc::PARSE_ERROR
        );
    }
}
