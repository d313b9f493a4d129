//! A2A v0.3 over HTTP+JSON: the JSON of the v0.3 proto, which the v0.3
//! REST routes (`…/v1/message:send`, `…/v1/tasks/{id}`, …) carry, to and
//! from the v0.3 JSON of the JSON-RPC binding ([`crate::v03`]), which the
//! gateway's call layer reads and writes at v0.3.
//!
//! The two v0.3 forms say the same things with other names:
//!
//! | v0.3 JSON-RPC | v0.3 proto JSON |
//! |---|---|
//! | `kind` on every object | none: the field that holds it says what it is |
//! | a message's `parts` | `content` |
//! | `{"kind": "file", "file": {"uri" \| "bytes", "mimeType", "name"}}` | `{"file": {"fileWithUri" \| "fileWithBytes", "mimeType", "name"}}` |
//! | `{"kind": "data", "data": {…}}` | `{"data": {"data": {…}}}` |
//! | `user`, `agent` | `ROLE_USER`, `ROLE_AGENT` |
//! | `input-required`, `canceled`, … | `TASK_STATE_INPUT_REQUIRED`, `TASK_STATE_CANCELLED`, … |
//! | send params `{message, configuration}` with `pushNotificationConfig` | `{request, configuration}` with `pushNotification` |
//! | push config `{taskId, pushNotificationConfig}` | `{name: "tasks/{t}/pushNotificationConfigs/{c}", pushNotificationConfig}` |
//! | a send answered with a task or a message | `{"task": …}` or `{"message": …}` |
//! | stream events by `kind` | `{"task"}`, `{"message"}`, `{"statusUpdate"}`, `{"artifactUpdate"}` |
//!
//! Invariants: requests are read with the proto's field names
//! (`message_id`, as the SDKs write them) or their JSON names
//! (`messageId`); answers are written with the JSON names. The contents of
//! `metadata` and of data parts are the caller's and are never renamed.
//! Input errors name the field at fault (`request.content[0]: …`).

use serde_json::{json, Map, Value};

use crate::rpc::{self, RpcError};

// ---- reading the proto's JSON ----

/// `snake_case` as `camelCase`; a name already in camel case is kept.
fn camel(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut upper = false;
    for c in key.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// One level of an object with its field names in camel case (its
/// values untouched); `null` members dropped.
fn object(v: &Value, at: &str) -> Result<Map<String, Value>, String> {
    let o = v
        .as_object()
        .ok_or_else(|| format!("{at}: must be an object"))?;
    Ok(o.iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (camel(k), v.clone()))
        .collect())
}

fn copy(to: &mut Map<String, Value>, from: &Map<String, Value>, keys: &[&str]) {
    for k in keys {
        if let Some(v) = from.get(*k) {
            to.insert((*k).to_string(), v.clone());
        }
    }
}

fn part_in(v: &Value, at: &str) -> Result<Value, String> {
    let o = object(v, at)?;
    let mut p = Map::new();
    if let Some(text) = o.get("text") {
        p.insert("kind".into(), "text".into());
        p.insert("text".into(), text.clone());
    } else if let Some(file) = o.get("file") {
        let at = format!("{at}.file");
        let f = object(file, &at)?;
        let mut out = Map::new();
        if let Some(uri) = f.get("fileWithUri") {
            out.insert("uri".into(), uri.clone());
        }
        if let Some(bytes) = f.get("fileWithBytes") {
            out.insert("bytes".into(), bytes.clone());
        }
        copy(&mut out, &f, &["mimeType", "name"]);
        p.insert("kind".into(), "file".into());
        p.insert("file".into(), Value::Object(out));
    } else if let Some(data) = o.get("data") {
        let d = object(data, &format!("{at}.data"))?;
        p.insert("kind".into(), "data".into());
        p.insert(
            "data".into(),
            d.get("data").cloned().unwrap_or_else(|| json!({})),
        );
    } else {
        return Err(format!("{at}: a part has one of text, file, data"));
    }
    copy(&mut p, &o, &["metadata"]);
    Ok(Value::Object(p))
}

fn message_in(v: &Value, at: &str) -> Result<Value, String> {
    let o = object(v, at)?;
    let mut m = Map::new();
    m.insert("kind".into(), "message".into());
    copy(
        &mut m,
        &o,
        &["messageId", "contextId", "taskId", "metadata", "extensions"],
    );
    let role = match o.get("role").and_then(Value::as_str) {
        Some("ROLE_USER" | "user") => "user",
        Some("ROLE_AGENT" | "agent") => "agent",
        Some(other) => return Err(format!("{at}.role: unknown role {other:?}")),
        None => return Err(format!("{at}.role: missing")),
    };
    m.insert("role".into(), role.into());
    let parts = match o.get("content").or_else(|| o.get("parts")) {
        None => Vec::new(),
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(|(i, p)| part_in(p, &format!("{at}.content[{i}]")))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(format!("{at}.content: must be a list")),
    };
    m.insert("parts".into(), Value::Array(parts));
    Ok(Value::Object(m))
}

fn push_in(v: &Value, at: &str) -> Result<Value, String> {
    let mut o = object(v, at)?;
    if let Some(auth) = o.get("authentication") {
        let a = object(auth, &format!("{at}.authentication"))?;
        o.insert("authentication".into(), Value::Object(a));
    }
    Ok(Value::Object(o))
}

/// The body of `POST …/v1/message:send` or `…:stream` as the params of
/// `message/send`. `blocking` is a proto3 boolean: absent is `false`, and
/// the send then answers at once (JSON-RPC's absent `blocking` waits).
pub fn send_in(body: &Value) -> Result<Value, String> {
    let o = object(body, "body")?;
    let (key, message) = ["request", "message"]
        .into_iter()
        .find_map(|k| o.get(k).map(|m| (k, m)))
        .ok_or("request: missing")?;
    let mut params = Map::new();
    params.insert("message".into(), message_in(message, key)?);
    let c = match o.get("configuration") {
        Some(c) => object(c, "configuration")?,
        None => Map::new(),
    };
    let mut out = Map::new();
    copy(
        &mut out,
        &c,
        &["acceptedOutputModes", "historyLength", "blocking"],
    );
    out.entry("blocking").or_insert(Value::Bool(false));
    if let Some(push) = c.get("pushNotification") {
        let push = push_in(push, "configuration.pushNotification")?;
        out.insert("pushNotificationConfig".into(), push);
    }
    params.insert("configuration".into(), Value::Object(out));
    copy(&mut params, &o, &["metadata"]);
    Ok(Value::Object(params))
}

/// The body of `POST …/v1/tasks/{task}/pushNotificationConfigs` as the
/// params of `tasks/pushNotificationConfig/set`. The body is the whole
/// request (`{parent, configId, config}`, as the SDKs send it) or only
/// its config (`{pushNotificationConfig}`, the proto's HTTP rule).
pub fn push_create_in(task: &str, body: &Value) -> Result<Value, String> {
    let o = object(body, "body")?;
    let (config, at) = match o.get("config") {
        Some(c) => (object(c, "config")?, "config.pushNotificationConfig"),
        None => (o.clone(), "pushNotificationConfig"),
    };
    let push = config
        .get("pushNotificationConfig")
        .ok_or_else(|| format!("{at}: missing"))?;
    let mut push = push_in(push, at)?;
    if let Some(id) = o.get("configId").filter(|id| id.as_str() != Some("")) {
        push["id"] = id.clone();
    }
    Ok(json!({"taskId": task, "pushNotificationConfig": push}))
}

// ---- writing the proto's JSON ----

fn fields(v: &Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

fn part_out(v: &Value) -> Value {
    let p = fields(v);
    let mut out = Map::new();
    match p.get("kind").and_then(Value::as_str) {
        Some("file") => {
            let f = fields(p.get("file").unwrap_or(&Value::Null));
            let mut file = Map::new();
            if let Some(uri) = f.get("uri") {
                file.insert("fileWithUri".into(), uri.clone());
            }
            if let Some(bytes) = f.get("bytes") {
                file.insert("fileWithBytes".into(), bytes.clone());
            }
            copy(&mut file, &f, &["mimeType", "name"]);
            out.insert("file".into(), Value::Object(file));
        }
        Some("data") => {
            let data = p.get("data").cloned().unwrap_or_else(|| json!({}));
            out.insert("data".into(), json!({ "data": data }));
        }
        _ => copy(&mut out, &p, &["text"]),
    }
    copy(&mut out, &p, &["metadata"]);
    Value::Object(out)
}

fn parts_out(v: Option<&Value>) -> Value {
    let parts = v
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    Value::Array(parts.iter().map(part_out).collect())
}

fn message_out(v: &Value) -> Value {
    let m = fields(v);
    let mut out = Map::new();
    copy(
        &mut out,
        &m,
        &["messageId", "contextId", "taskId", "metadata", "extensions"],
    );
    let role = match m.get("role").and_then(Value::as_str) {
        Some("user") => "ROLE_USER",
        Some("agent") => "ROLE_AGENT",
        _ => "ROLE_UNSPECIFIED",
    };
    out.insert("role".into(), role.into());
    out.insert("content".into(), parts_out(m.get("parts")));
    Value::Object(out)
}

/// A v0.3 task state (`input-required`) as the proto's enum name.
fn state_out(state: &str) -> &'static str {
    match state {
        "submitted" => "TASK_STATE_SUBMITTED",
        "working" => "TASK_STATE_WORKING",
        "input-required" => "TASK_STATE_INPUT_REQUIRED",
        "completed" => "TASK_STATE_COMPLETED",
        "canceled" => "TASK_STATE_CANCELLED",
        "failed" => "TASK_STATE_FAILED",
        "rejected" => "TASK_STATE_REJECTED",
        "auth-required" => "TASK_STATE_AUTH_REQUIRED",
        _ => "TASK_STATE_UNSPECIFIED",
    }
}

fn status_out(v: &Value) -> Value {
    let s = fields(v);
    let mut out = Map::new();
    let state = s.get("state").and_then(Value::as_str).unwrap_or("");
    out.insert("state".into(), state_out(state).into());
    if let Some(m) = s.get("message") {
        out.insert("message".into(), message_out(m));
    }
    copy(&mut out, &s, &["timestamp"]);
    Value::Object(out)
}

fn artifact_out(v: &Value) -> Value {
    let a = fields(v);
    let mut out = Map::new();
    copy(
        &mut out,
        &a,
        &[
            "artifactId",
            "name",
            "description",
            "metadata",
            "extensions",
        ],
    );
    out.insert("parts".into(), parts_out(a.get("parts")));
    Value::Object(out)
}

fn list_out(v: Option<&Value>, each: fn(&Value) -> Value) -> Option<Value> {
    v.and_then(Value::as_array)
        .map(|items| Value::Array(items.iter().map(each).collect()))
}

/// A v0.3 task as the proto's `Task`.
pub fn task_out(v: &Value) -> Value {
    let t = fields(v);
    let mut out = Map::new();
    copy(&mut out, &t, &["id", "contextId", "metadata"]);
    out.insert(
        "status".into(),
        status_out(t.get("status").unwrap_or(&Value::Null)),
    );
    if let Some(a) = list_out(t.get("artifacts"), artifact_out) {
        out.insert("artifacts".into(), a);
    }
    if let Some(h) = list_out(t.get("history"), message_out) {
        out.insert("history".into(), h);
    }
    Value::Object(out)
}

/// A send's answer or a stream's event (v0.3, by its `kind`) as the
/// proto's `SendMessageResponse` or `StreamResponse`.
pub fn stream_out(v: &Value) -> Value {
    let e = fields(v);
    match e.get("kind").and_then(Value::as_str) {
        Some("message") => json!({ "message": message_out(v) }),
        Some("status-update") => {
            let mut out = Map::new();
            copy(&mut out, &e, &["taskId", "contextId", "final", "metadata"]);
            let status = status_out(e.get("status").unwrap_or(&Value::Null));
            out.insert("status".into(), status);
            json!({ "statusUpdate": out })
        }
        Some("artifact-update") => {
            let mut out = Map::new();
            copy(
                &mut out,
                &e,
                &["taskId", "contextId", "append", "lastChunk", "metadata"],
            );
            let artifact = artifact_out(e.get("artifact").unwrap_or(&Value::Null));
            out.insert("artifact".into(), artifact);
            json!({ "artifactUpdate": out })
        }
        _ => json!({ "task": task_out(v) }),
    }
}

/// A v0.3 push config (`{taskId, pushNotificationConfig}`) as the
/// proto's `TaskPushNotificationConfig`, named by its resource name.
pub fn push_out(v: &Value) -> Value {
    let task = v["taskId"].as_str().unwrap_or_default();
    let config = v
        .get("pushNotificationConfig")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let id = config["id"].as_str().unwrap_or_default();
    json!({
        "name": format!("tasks/{task}/pushNotificationConfigs/{id}"),
        "pushNotificationConfig": config,
    })
}

/// A list of v0.3 push configs as the proto's list response.
pub fn push_list_out(v: &Value) -> Value {
    let configs = v.as_array().map(Vec::as_slice).unwrap_or(&[]);
    json!({ "configs": configs.iter().map(push_out).collect::<Vec<_>>() })
}

// ---- errors ----

/// An error as the v0.3 REST routes answer it: an HTTP status and
/// `{"message", "type"}`, `type` naming the error as the SDKs name
/// their error classes (`TaskNotFoundError`).
pub fn error_out(e: &RpcError) -> (u16, Value) {
    let (status, name) = match e.code {
        rpc::PARSE_ERROR => (400, "JSONParseError"),
        rpc::INVALID_REQUEST => (400, "InvalidRequestError"),
        rpc::METHOD_NOT_FOUND => (404, "MethodNotFoundError"),
        rpc::INVALID_PARAMS => (422, "InvalidParamsError"),
        rpc::TASK_NOT_FOUND => (404, "TaskNotFoundError"),
        rpc::TASK_NOT_CANCELABLE => (409, "TaskNotCancelableError"),
        rpc::PUSH_NOT_SUPPORTED => (501, "PushNotificationNotSupportedError"),
        rpc::UNSUPPORTED_OPERATION => (501, "UnsupportedOperationError"),
        rpc::CONTENT_TYPE_NOT_SUPPORTED => (415, "ContentTypeNotSupportedError"),
        rpc::INVALID_AGENT_RESPONSE => (502, "InvalidAgentResponseError"),
        rpc::EXTENDED_CARD_NOT_CONFIGURED => (404, "ExtendedAgentCardNotConfiguredError"),
        rpc::EXTENSION_SUPPORT_REQUIRED => (400, "ExtensionSupportRequiredError"),
        rpc::VERSION_NOT_SUPPORTED => (400, "VersionNotSupportedError"),
        // The meta store being away keeps its 503: worth a retry.
        _ => (e.status().http.max(500), "InternalError"),
    };
    (status, json!({"message": e.message, "type": name}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_in_proto_names_reads_as_message_send() {
        let body = json!({
            "request": {
                "message_id": "m1", "context_id": "c1", "role": "ROLE_USER",
                "content": [
                    {"text": "hi", "metadata": {"snake_key": 1}},
                    {"file": {"file_with_uri": "https://f", "mime_type": "text/plain", "name": "f.txt"}},
                    {"file": {"fileWithBytes": "aGk="}},
                    {"data": {"data": {"a_b": [1]}}},
                ],
                "metadata": {"keep_me": true},
            },
            "configuration": {
                "accepted_output_modes": ["text/plain"], "history_length": 2, "blocking": true,
                "push_notification": {"url": "https://hook", "token": "t",
                                      "authentication": {"schemes": ["Bearer"], "credentials": "c"}},
            },
        });
        assert_eq!(
            send_in(&body).unwrap(),
            json!({
                "message": {
                    "kind": "message", "messageId": "m1", "contextId": "c1", "role": "user",
                    "parts": [
                        {"kind": "text", "text": "hi", "metadata": {"snake_key": 1}},
                        {"kind": "file", "file": {"uri": "https://f", "mimeType": "text/plain", "name": "f.txt"}},
                        {"kind": "file", "file": {"bytes": "aGk="}},
                        {"kind": "data", "data": {"a_b": [1]}},
                    ],
                    "metadata": {"keep_me": true},
                },
                "configuration": {
                    "acceptedOutputModes": ["text/plain"], "historyLength": 2, "blocking": true,
                    "pushNotificationConfig": {"url": "https://hook", "token": "t",
                                               "authentication": {"schemes": ["Bearer"], "credentials": "c"}},
                },
            })
        );
        // The JSON names read the same.
        let camel = json!({"message": {"messageId": "m", "role": "ROLE_AGENT", "content": [{"text": "x"}]}});
        assert_eq!(
            send_in(&camel).unwrap(),
            json!({"message": {"kind": "message", "messageId": "m", "role": "agent",
                               "parts": [{"kind": "text", "text": "x"}]},
                   "configuration": {"blocking": false}})
        );
    }

    #[test]
    fn bad_sends_name_the_field() {
        let cases = [
            (json!([]), "body: must be an object"),
            (json!({}), "request: missing"),
            (json!({"request": {"content": []}}), "request.role: missing"),
            (
                json!({"request": {"role": "ROLE_BOT"}}),
                "request.role: unknown role \"ROLE_BOT\"",
            ),
            (
                json!({"request": {"role": "ROLE_USER", "content": {}}}),
                "request.content: must be a list",
            ),
            (
                json!({"request": {"role": "ROLE_USER", "content": [{"metadata": {}}]}}),
                "request.content[0]: a part has one of text, file, data",
            ),
            (
                json!({"request": {"role": "ROLE_USER", "content": [{"file": "x"}]}}),
                "request.content[0].file: must be an object",
            ),
        ];
        for (body, want) in cases {
            assert_eq!(send_in(&body).unwrap_err(), want, "{body}");
        }
    }

    #[test]
    fn push_configs_are_read_in_both_shapes_and_named_on_the_way_out() {
        let whole = json!({
            "parent": "tasks/t1", "config_id": "c9",
            "config": {"push_notification_config": {"url": "https://h", "token": "k"}},
        });
        let want = json!({"taskId": "t1", "pushNotificationConfig": {"url": "https://h", "token": "k", "id": "c9"}});
        assert_eq!(push_create_in("t1", &whole).unwrap(), want);
        let bare =
            json!({"pushNotificationConfig": {"id": "c9", "url": "https://h", "token": "k"}});
        assert_eq!(push_create_in("t1", &bare).unwrap(), want);
        assert_eq!(
            push_create_in("t1", &json!({"config": {}})).unwrap_err(),
            "config.pushNotificationConfig: missing"
        );
        assert_eq!(
            push_out(&want),
            json!({"name": "tasks/t1/pushNotificationConfigs/c9",
                   "pushNotificationConfig": {"url": "https://h", "token": "k", "id": "c9"}})
        );
        assert_eq!(
            push_list_out(&json!([want])),
            json!({"configs": [push_out(&want)]})
        );
    }

    #[test]
    fn tasks_and_events_are_written_in_the_proto_form() {
        let message = json!({"kind": "message", "messageId": "m", "role": "agent", "taskId": "t",
                             "parts": [{"kind": "text", "text": "done"},
                                       {"kind": "data", "data": {"n": 1}},
                                       {"kind": "file", "file": {"bytes": "aGk=", "name": "b"}}]});
        let proto_message = json!({"messageId": "m", "role": "ROLE_AGENT", "taskId": "t",
                                   "content": [{"text": "done"}, {"data": {"data": {"n": 1}}},
                                               {"file": {"fileWithBytes": "aGk=", "name": "b"}}]});
        let task = json!({"kind": "task", "id": "t", "contextId": "c",
                          "status": {"state": "canceled", "message": message, "timestamp": "2026-01-01T00:00:00Z"},
                          "artifacts": [{"artifactId": "a", "parts": [{"kind": "text", "text": "x"}]}],
                          "history": [message]});
        let proto_task = json!({"id": "t", "contextId": "c",
                                "status": {"state": "TASK_STATE_CANCELLED", "message": proto_message,
                                           "timestamp": "2026-01-01T00:00:00Z"},
                                "artifacts": [{"artifactId": "a", "parts": [{"text": "x"}]}],
                                "history": [proto_message]});
        assert_eq!(task_out(&task), proto_task);
        assert_eq!(stream_out(&task), json!({"task": proto_task}));
        assert_eq!(stream_out(&message), json!({"message": proto_message}));
        let update = json!({"kind": "status-update", "taskId": "t", "contextId": "c", "final": true,
                            "status": {"state": "input-required"}});
        assert_eq!(
            stream_out(&update),
            json!({"statusUpdate": {"taskId": "t", "contextId": "c", "final": true,
                                    "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}})
        );
        let chunk = json!({"kind": "artifact-update", "taskId": "t", "contextId": "c", "append": false,
                           "lastChunk": true, "artifact": {"artifactId": "a", "parts": []}});
        assert_eq!(
            stream_out(&chunk),
            json!({"artifactUpdate": {"taskId": "t", "contextId": "c", "append": false, "lastChunk": true,
                                      "artifact": {"artifactId": "a", "parts": []}}})
        );
    }

    #[test]
    fn errors_carry_the_v03_status_and_the_class_name() {
        assert_eq!(
            error_out(&RpcError::task_not_found("t-1")),
            (
                404,
                json!({"message": RpcError::task_not_found("t-1").message, "type": "TaskNotFoundError"})
            )
        );
        assert_eq!(error_out(&RpcError::task_not_cancelable()).0, 409);
        assert_eq!(error_out(&RpcError::invalid_params("x")).0, 422);
        assert_eq!(
            error_out(&RpcError::internal("x")),
            (500, json!({"message": "x", "type": "InternalError"}))
        );
    }
}
