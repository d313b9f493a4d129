//! Conversion between A2A v0.3 JSON and the v1.0 [model](crate::model).
//!
//! v0.3 differs from v1.0 in form only: objects carry a `kind`
//! (`task`, `message`, `status-update`, `artifact-update`, and `text`/`file`/
//! `data` on parts), enums are lowercase (`user`, `input-required`), files
//! sit in a nested `file` object (`bytes`/`uri`, `mimeType`, `name`), a data
//! part's `data` must be an object, a push config is nested under
//! `pushNotificationConfig` with `authentication.schemes`, and a status
//! update has a required `final`.
//!
//! Invariants: the output always has the fields v0.3 clients require
//! (`contextId` on tasks, `final` on status updates, `append` and `lastChunk`
//! on artifact updates); a v1.0 data part whose value is not an object is
//! sent as `{"value": X}` with metadata `data_part_compat: true`, and read
//! back to `X`. Input errors name the field (`message.parts[0].file: …`).

use serde_json::{json, Map, Value};

use crate::model::{
    Artifact, AuthenticationInfo, CancelTaskRequest, GetTaskRequest, Message, Part, Role,
    SendMessageConfiguration, SendMessageRequest, StreamResponse, SubscribeToTaskRequest, Task,
    TaskArtifactUpdateEvent, TaskPushNotificationConfig, TaskStatus, TaskStatusUpdateEvent,
};

const DATA_PART_COMPAT: &str = "data_part_compat";

// ---- reading v0.3 JSON ----

fn path(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_string()
    } else {
        format!("{at}.{key}")
    }
}

fn object<'a>(v: &'a Value, at: &str) -> Result<&'a Map<String, Value>, String> {
    let at = if at.is_empty() { "params" } else { at };
    v.as_object()
        .ok_or_else(|| format!("{at}: must be an object"))
}

/// A field that may be absent or `null`.
fn field<'a>(o: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    o.get(key).filter(|v| !v.is_null())
}

fn opt_str(o: &Map<String, Value>, key: &str, at: &str) -> Result<Option<String>, String> {
    match field(o, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("{}: must be a string", path(at, key))),
    }
}

fn req_str(o: &Map<String, Value>, key: &str, at: &str) -> Result<String, String> {
    opt_str(o, key, at)?.ok_or_else(|| format!("{}: missing", path(at, key)))
}

fn opt_object(o: &Map<String, Value>, key: &str, at: &str) -> Result<Option<Value>, String> {
    match field(o, key) {
        None => Ok(None),
        Some(v @ Value::Object(_)) => Ok(Some(v.clone())),
        Some(_) => Err(format!("{}: must be an object", path(at, key))),
    }
}

fn str_list(o: &Map<String, Value>, key: &str, at: &str) -> Result<Vec<String>, String> {
    let err = || format!("{}: must be an array of strings", path(at, key));
    match field(o, key) {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_string).ok_or_else(err))
            .collect(),
        Some(_) => Err(err()),
    }
}

fn opt_i32(o: &Map<String, Value>, key: &str, at: &str) -> Result<Option<i32>, String> {
    match field(o, key) {
        None => Ok(None),
        Some(v) => v
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| format!("{}: must be a 32-bit integer", path(at, key))),
    }
}

fn opt_bool(o: &Map<String, Value>, key: &str, at: &str) -> Result<Option<bool>, String> {
    match field(o, key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(format!("{}: must be a boolean", path(at, key))),
    }
}

fn part_from_v03(v: &Value, at: &str) -> Result<Part, String> {
    let o = object(v, at)?;
    let mut metadata = opt_object(o, "metadata", at)?;
    let kind = match opt_str(o, "kind", at)? {
        Some(kind) => kind,
        None => ["text", "file", "data"]
            .into_iter()
            .find(|k| o.contains_key(*k))
            .ok_or_else(|| format!("{}: missing", path(at, "kind")))?
            .to_string(),
    };
    let mut part = Part::default();
    match kind.as_str() {
        "text" => part.text = Some(req_str(o, "text", at)?),
        "file" => {
            let at = path(at, "file");
            let file = object(
                field(o, "file").ok_or_else(|| format!("{at}: missing"))?,
                &at,
            )?;
            part.raw = opt_str(file, "bytes", &at)?;
            part.url = opt_str(file, "uri", &at)?;
            if part.raw.is_some() == part.url.is_some() {
                return Err(format!("{at}: a file has exactly one of bytes, uri"));
            }
            part.media_type = opt_str(file, "mimeType", &at)?;
            part.filename = opt_str(file, "name", &at)?;
        }
        "data" => {
            let data = opt_object(o, "data", at)?
                .ok_or_else(|| format!("{}: missing", path(at, "data")))?;
            let compat = match metadata.as_mut().and_then(Value::as_object_mut) {
                Some(meta) => meta.remove(DATA_PART_COMPAT) == Some(Value::Bool(true)),
                None => false,
            };
            if metadata
                .as_ref()
                .and_then(Value::as_object)
                .is_some_and(Map::is_empty)
            {
                metadata = None;
            }
            part.data = Some(if compat {
                data.get("value").cloned().unwrap_or(Value::Null)
            } else {
                data
            });
        }
        other => return Err(format!("{}: unknown part kind `{other}`", path(at, "kind"))),
    }
    part.metadata = metadata;
    Ok(part)
}

fn message_at(v: &Value, at: &str) -> Result<Message, String> {
    let o = object(v, at)?;
    if let Some(kind) = opt_str(o, "kind", at)? {
        if kind != "message" {
            return Err(format!("{}: must be \"message\"", path(at, "kind")));
        }
    }
    let role = match req_str(o, "role", at)?.as_str() {
        "user" => Role::User,
        "agent" => Role::Agent,
        other => return Err(format!("{}: unknown role `{other}`", path(at, "role"))),
    };
    let parts = match field(o, "parts") {
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(|(i, p)| part_from_v03(p, &format!("{}[{i}]", path(at, "parts"))))
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err(format!("{}: must be an array", path(at, "parts"))),
        None => return Err(format!("{}: missing", path(at, "parts"))),
    };
    Ok(Message {
        message_id: req_str(o, "messageId", at)?,
        context_id: opt_str(o, "contextId", at)?,
        task_id: opt_str(o, "taskId", at)?,
        role,
        parts,
        metadata: opt_object(o, "metadata", at)?,
        extensions: str_list(o, "extensions", at)?,
        reference_task_ids: str_list(o, "referenceTaskIds", at)?,
    })
}

/// Reads a v0.3 message (`kind` may be omitted). Errors name fields under
/// `message`.
pub fn message_from_v03(v: &Value) -> Result<Message, String> {
    message_at(v, "message")
}

fn push_config_at(v: &Value, at: &str) -> Result<TaskPushNotificationConfig, String> {
    let o = object(v, at)?;
    let authentication = match field(o, "authentication") {
        None => None,
        Some(auth) => {
            let at = path(at, "authentication");
            let a = object(auth, &at)?;
            let schemes = str_list(a, "schemes", &at)?;
            let credentials = opt_str(a, "credentials", &at)?;
            schemes.into_iter().next().map(|scheme| AuthenticationInfo {
                scheme,
                credentials,
            })
        }
    };
    Ok(TaskPushNotificationConfig {
        tenant: None,
        id: opt_str(o, "id", at)?,
        task_id: None,
        url: req_str(o, "url", at)?,
        token: opt_str(o, "token", at)?,
        authentication,
    })
}

/// Reads `message/send` and `message/stream` params. `configuration.blocking`
/// false becomes `returnImmediately`; `historyLength` 0 (unlimited in v0.3)
/// becomes `None`; the push config's first auth scheme becomes its `scheme`.
pub fn send_from_v03(params: &Value) -> Result<SendMessageRequest, String> {
    let o = object(params, "")?;
    let message = message_from_v03(field(o, "message").ok_or("message: missing")?)?;
    let configuration = match field(o, "configuration") {
        None => None,
        Some(c) => {
            let at = "configuration";
            let c = object(c, at)?;
            let push = field(c, "pushNotificationConfig")
                .map(|p| push_config_at(p, "configuration.pushNotificationConfig"))
                .transpose()?;
            Some(SendMessageConfiguration {
                accepted_output_modes: str_list(c, "acceptedOutputModes", at)?,
                task_push_notification_config: push,
                history_length: opt_i32(c, "historyLength", at)?.filter(|n| *n != 0),
                return_immediately: opt_bool(c, "blocking", at)? == Some(false),
            })
        }
    };
    Ok(SendMessageRequest {
        tenant: None,
        message,
        configuration,
        metadata: opt_object(o, "metadata", "")?,
    })
}

/// Reads `tasks/get` params `{"id", "historyLength"}`; `historyLength` 0
/// (unlimited in v0.3) becomes `None`.
pub fn get_from_v03(params: &Value) -> Result<GetTaskRequest, String> {
    let o = object(params, "")?;
    Ok(GetTaskRequest {
        tenant: None,
        id: req_str(o, "id", "")?,
        history_length: opt_i32(o, "historyLength", "")?.filter(|n| *n != 0),
    })
}

/// Reads `tasks/cancel` params `{"id", "metadata"}`.
pub fn cancel_from_v03(params: &Value) -> Result<CancelTaskRequest, String> {
    let o = object(params, "")?;
    Ok(CancelTaskRequest {
        tenant: None,
        id: req_str(o, "id", "")?,
        metadata: opt_object(o, "metadata", "")?,
    })
}

/// Reads `tasks/resubscribe` params `{"id"}`.
pub fn subscribe_from_v03(params: &Value) -> Result<SubscribeToTaskRequest, String> {
    let o = object(params, "")?;
    Ok(SubscribeToTaskRequest {
        tenant: None,
        id: req_str(o, "id", "")?,
    })
}

/// Reads `tasks/pushNotificationConfig/set` params
/// `{"taskId", "pushNotificationConfig": {…}}` into the flat v1.0 config.
pub fn push_set_from_v03(params: &Value) -> Result<TaskPushNotificationConfig, String> {
    let o = object(params, "")?;
    let task_id = req_str(o, "taskId", "")?;
    let config = field(o, "pushNotificationConfig").ok_or("pushNotificationConfig: missing")?;
    let mut config = push_config_at(config, "pushNotificationConfig")?;
    config.task_id = Some(task_id);
    Ok(config)
}

/// Reads `tasks/pushNotificationConfig/{get,delete,list}` params
/// `{"id", "pushNotificationConfigId"}`: the task id and the config id, if any.
pub fn push_get_from_v03(params: &Value) -> Result<(String, Option<String>), String> {
    let o = object(params, "")?;
    Ok((
        req_str(o, "id", "")?,
        opt_str(o, "pushNotificationConfigId", "")?,
    ))
}

// ---- writing v0.3 JSON ----

/// Drops the `null` members of an object built with `json!`, so that absent
/// optional fields are omitted.
fn strip(mut v: Value) -> Value {
    if let Value::Object(o) = &mut v {
        o.retain(|_, v| !v.is_null());
    }
    v
}

/// A list, or `null` (then stripped) when empty.
fn list(items: &[String]) -> Value {
    if items.is_empty() {
        Value::Null
    } else {
        json!(items)
    }
}

fn part_to_v03(p: &Part) -> Value {
    let mut metadata = p.metadata.clone();
    let mut part = if let Some(text) = &p.text {
        json!({"kind": "text", "text": text})
    } else if let Some(data) = &p.data {
        if data.is_object() {
            json!({"kind": "data", "data": data})
        } else {
            let mut meta = match metadata {
                Some(Value::Object(m)) => m,
                _ => Map::new(),
            };
            meta.insert(DATA_PART_COMPAT.into(), true.into());
            metadata = Some(Value::Object(meta));
            json!({"kind": "data", "data": {"value": data}})
        }
    } else {
        let uri = if p.raw.is_none() {
            p.url.clone().or(Some(String::new()))
        } else {
            None
        };
        let file =
            json!({"bytes": p.raw, "uri": uri, "mimeType": p.media_type, "name": p.filename});
        json!({"kind": "file", "file": strip(file)})
    };
    part["metadata"] = metadata.unwrap_or(Value::Null);
    strip(part)
}

fn parts_to_v03(parts: &[Part]) -> Vec<Value> {
    parts.iter().map(part_to_v03).collect()
}

/// A message as v0.3 JSON, with `kind: "message"` and role `user`/`agent`.
pub fn message_to_v03(m: &Message) -> Value {
    let role = if m.role == Role::User {
        "user"
    } else {
        "agent"
    };
    strip(json!({
        "kind": "message", "messageId": m.message_id, "role": role, "parts": parts_to_v03(&m.parts),
        "contextId": m.context_id, "taskId": m.task_id, "referenceTaskIds": list(&m.reference_task_ids),
        "metadata": m.metadata, "extensions": list(&m.extensions),
    }))
}

fn status_to_v03(s: &TaskStatus) -> Value {
    let message = s.message.as_ref().map(message_to_v03);
    strip(json!({"state": s.state.v03(), "message": message, "timestamp": s.timestamp}))
}

fn artifact_to_v03(a: &Artifact) -> Value {
    strip(json!({
        "artifactId": a.artifact_id, "name": a.name, "description": a.description,
        "parts": parts_to_v03(&a.parts), "metadata": a.metadata, "extensions": list(&a.extensions),
    }))
}

/// A task as v0.3 JSON: `kind: "task"`, `contextId` always present, states
/// lowercase.
pub fn task_to_v03(t: &Task) -> Value {
    let artifacts: Vec<Value> = t.artifacts.iter().map(artifact_to_v03).collect();
    let history: Vec<Value> = t.history.iter().map(message_to_v03).collect();
    let non_empty = |v: Vec<Value>| {
        if v.is_empty() {
            Value::Null
        } else {
            Value::Array(v)
        }
    };
    strip(json!({
        "kind": "task", "id": t.id, "contextId": t.context_id, "status": status_to_v03(&t.status),
        "artifacts": non_empty(artifacts), "history": non_empty(history), "metadata": t.metadata,
    }))
}

/// A status update as v0.3 JSON (`kind: "status-update"`) with `final`.
pub fn status_update_to_v03(e: &TaskStatusUpdateEvent, final_: bool) -> Value {
    strip(json!({
        "kind": "status-update", "taskId": e.task_id, "contextId": e.context_id,
        "status": status_to_v03(&e.status), "final": final_, "metadata": e.metadata,
    }))
}

/// An artifact update as v0.3 JSON (`kind: "artifact-update"`), with
/// `append` and `lastChunk` always present.
pub fn artifact_update_to_v03(e: &TaskArtifactUpdateEvent) -> Value {
    strip(json!({
        "kind": "artifact-update", "taskId": e.task_id, "contextId": e.context_id,
        "artifact": artifact_to_v03(&e.artifact), "append": e.append, "lastChunk": e.last_chunk,
        "metadata": e.metadata,
    }))
}

/// A send result or stream event as bare v0.3 JSON; `final_` is used only
/// by a status update.
pub fn stream_to_v03(event: &StreamResponse, final_: bool) -> Value {
    match event {
        StreamResponse::Task(t) => task_to_v03(t),
        StreamResponse::Message(m) => message_to_v03(m),
        StreamResponse::StatusUpdate(e) => status_update_to_v03(e, final_),
        StreamResponse::ArtifactUpdate(e) => artifact_update_to_v03(e),
    }
}

/// A push config in the nested v0.3 shape
/// `{"taskId", "pushNotificationConfig": {"url", "id", "token", "authentication": {"schemes", "credentials"}}}`.
pub fn push_to_v03(c: &TaskPushNotificationConfig) -> Value {
    let auth = c
        .authentication
        .as_ref()
        .map(|a| strip(json!({"schemes": [a.scheme], "credentials": a.credentials})));
    let config = json!({"url": c.url, "id": c.id, "token": c.token, "authentication": auth});
    json!({"taskId": c.task_id.clone().unwrap_or_default(), "pushNotificationConfig": strip(config)})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(table: &Value) -> impl Iterator<Item = (&Value, &Value)> {
        table
            .as_array()
            .into_iter()
            .flatten()
            .map(|row| (&row[0], &row[1]))
    }

    #[test]
    fn parts_both_ways() {
        let table = json!([
            [{"text": "hi", "metadata": {"a": 1}}, {"kind": "text", "text": "hi", "metadata": {"a": 1}}],
            [{"raw": "aGk=", "mediaType": "text/plain", "filename": "a.txt"},
             {"kind": "file", "file": {"bytes": "aGk=", "mimeType": "text/plain", "name": "a.txt"}}],
            [{"url": "https://x/f"}, {"kind": "file", "file": {"uri": "https://x/f"}}],
            [{"data": {"k": [1]}}, {"kind": "data", "data": {"k": [1]}}],
            [{"data": [1, 2]}, {"kind": "data", "data": {"value": [1, 2]}, "metadata": {"data_part_compat": true}}],
            [{"data": "s", "metadata": {"m": 1}},
             {"kind": "data", "data": {"value": "s"}, "metadata": {"m": 1, "data_part_compat": true}}]
        ]);
        for (v1, v03) in rows(&table) {
            let part: Part = serde_json::from_value(v1.clone()).unwrap();
            assert_eq!(part_to_v03(&part), *v03);
            assert_eq!(part_from_v03(v03, "p"), Ok(part), "{v03}");
        }
        assert_eq!(
            part_from_v03(&json!({"text": "x"}), "p"),
            Ok(Part::text("x"))
        );
    }

    #[test]
    fn bad_v03_input_names_the_field() {
        let messages = json!([
            [{"role": "user", "messageId": "m", "parts": [{"kind": "text"}]}, "message.parts[0].text: missing"],
            [{"role": "user", "messageId": "m", "parts": [{"kind": "file", "file": {}}]},
             "message.parts[0].file: a file has exactly one of bytes, uri"],
            [{"role": "user", "messageId": "m", "parts": [{"kind": "file"}]}, "message.parts[0].file: missing"],
            [{"role": "user", "messageId": "m", "parts": [{"kind": "data", "data": 5}]},
             "message.parts[0].data: must be an object"],
            [{"role": "user", "messageId": "m", "parts": [{"kind": "video"}]},
             "message.parts[0].kind: unknown part kind `video`"],
            [{"role": "user", "messageId": "m", "parts": [{}]}, "message.parts[0].kind: missing"],
            [{"role": "user", "messageId": "m", "parts": {}}, "message.parts: must be an array"],
            [{"role": "user", "messageId": "m"}, "message.parts: missing"],
            [{"role": "system", "messageId": "m", "parts": []}, "message.role: unknown role `system`"],
            [{"role": "user", "messageId": 5, "parts": []}, "message.messageId: must be a string"],
            [{"kind": "task", "role": "user", "messageId": "m", "parts": []}, "message.kind: must be \"message\""],
            [[], "message: must be an object"]
        ]);
        for (input, want) in rows(&messages) {
            assert_eq!(message_from_v03(input).unwrap_err(), *want, "{input}");
        }
        let m = json!({"messageId": "m", "role": "user", "parts": [{"text": "x"}]});
        let params = json!([
            [{}, "message: missing"],
            [1, "params: must be an object"],
            [{"message": m, "configuration": {"blocking": "yes"}}, "configuration.blocking: must be a boolean"],
            [{"message": m, "configuration": {"pushNotificationConfig": {"token": "t"}}},
             "configuration.pushNotificationConfig.url: missing"],
            [{"message": m, "configuration": {"historyLength": 1.5}}, "configuration.historyLength: must be a 32-bit integer"]
        ]);
        for (input, want) in rows(&params) {
            assert_eq!(send_from_v03(input).unwrap_err(), *want, "{input}");
        }
        assert_eq!(
            get_from_v03(&json!({"historyLength": 1})).unwrap_err(),
            "id: missing"
        );
        let err = push_set_from_v03(&json!({"taskId": "t"})).unwrap_err();
        assert_eq!(err, "pushNotificationConfig: missing");
    }

    #[test]
    fn message_and_params_both_ways() {
        let v03 = json!({"kind": "message", "messageId": "m", "role": "agent", "parts": [{"kind": "text", "text": "hi"}],
            "contextId": "c", "taskId": "t", "referenceTaskIds": ["t0"], "metadata": {"k": "v"}, "extensions": ["urn:e"]});
        let v1 = json!({"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "hi"}],
            "contextId": "c", "taskId": "t", "referenceTaskIds": ["t0"], "metadata": {"k": "v"}, "extensions": ["urn:e"]});
        let m: Message = serde_json::from_value(v1).unwrap();
        assert_eq!(message_to_v03(&m), v03);
        assert_eq!(message_from_v03(&v03), Ok(m));

        let config = |c: Value| {
            let params = json!({"message": v03, "configuration": c, "metadata": {"x": 1}});
            let send = send_from_v03(&params).unwrap();
            assert_eq!(send.metadata, Some(json!({"x": 1})));
            send.configuration.unwrap()
        };
        let c = config(json!({"historyLength": 0, "acceptedOutputModes": ["text/plain"]}));
        assert_eq!((c.history_length, c.return_immediately), (None, false));
        assert_eq!(c.accepted_output_modes, ["text/plain"]);
        let c = config(json!({"historyLength": 3, "blocking": false}));
        assert_eq!((c.history_length, c.return_immediately), (Some(3), true));

        let get = get_from_v03(&json!({"id": "t", "historyLength": 0})).unwrap();
        assert_eq!((get.id.as_str(), get.history_length), ("t", None));
        let cancel = cancel_from_v03(&json!({"id": "t", "metadata": {"r": 1}})).unwrap();
        assert_eq!(
            (cancel.id.as_str(), cancel.metadata),
            ("t", Some(json!({"r": 1})))
        );
        assert_eq!(subscribe_from_v03(&json!({"id": "t"})).unwrap().id, "t");
        assert_eq!(
            push_get_from_v03(&json!({"id": "t"})),
            Ok(("t".to_string(), None))
        );

        let cfg = TaskPushNotificationConfig {
            task_id: Some("t".into()),
            url: "u".into(),
            ..Default::default()
        };
        let nested = json!({"taskId": "t", "pushNotificationConfig": {"url": "u"}});
        assert_eq!(push_to_v03(&cfg), nested);
        assert_eq!(push_set_from_v03(&nested), Ok(cfg));
    }

    #[test]
    fn task_with_unspecified_state_and_metadata() {
        let t: Task = serde_json::from_value(
            json!({"id": "t", "status": {"state": "TASK_STATE_UNSPECIFIED"}, "metadata": {"a": 1}}),
        )
        .unwrap();
        let want = json!({"kind": "task", "id": "t", "contextId": "", "status": {"state": "unknown"}, "metadata": {"a": 1}});
        assert_eq!(task_to_v03(&t), want);
    }
}
