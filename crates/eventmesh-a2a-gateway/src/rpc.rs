//! JSON-RPC dispatch: one request body, decoded for the version its
//! `A2A-Version` header names (absent: 0.3), gated, run as an operation of
//! the gateway, and encoded back in that version.
//!
//! Every protocol error is a JSON-RPC error in an HTTP 200 answer, as A2A
//! clients expect; only the gate's refusals (401, 403, 429) are HTTP
//! errors, like on every other route.

use std::sync::Arc;
use std::time::Duration;

use eventmesh_a2a::model::{
    parse_params, CancelTaskRequest, DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest, GetTaskRequest, ListTaskPushNotificationConfigsRequest,
    ListTasksRequest, SendMessageRequest, StreamResponse, SubscribeToTaskRequest, Task,
};
use eventmesh_a2a::rpc::{self, RpcError, Version};
use eventmesh_a2a::v03;
use eventmesh_runtime::Creator;
use eventmesh_security::Operation;
use serde_json::Value;
use tokio::sync::broadcast;

use super::live::Applied;
use super::ops::Sent;
use super::Gateway;
use eventmesh_api::StatusCode;
use eventmesh_api::{ApiError, Ask, Caller};

/// What a request is answered with.
pub enum Reply {
    /// One JSON-RPC response.
    Json(Value),
    /// A server-sent event stream: `first`, then the task's changes until
    /// one settles it (terminal, or waiting for the client).
    Stream(Streaming),
}

pub struct Streaming {
    pub id: Value,
    pub version: Version,
    pub first: Vec<StreamResponse>,
    pub changes: broadcast::Receiver<Arc<Applied>>,
    pub gateway: Arc<Gateway>,
    pub task: String,
}

impl Streaming {
    /// One stream event as a JSON-RPC response; `last` marks the one that
    /// ends the stream (v0.3's `final`).
    pub fn encode(&self, event: &StreamResponse, last: bool) -> Value {
        let result = match self.version {
            Version::V1 => serde_json::to_value(event).unwrap_or(Value::Null),
            Version::V03 => v03::stream_to_v03(event, last),
        };
        rpc::success(&self.id, result)
    }

    /// The task as it is now (after a waiter fell behind).
    pub async fn reread(&self) -> Option<Task> {
        self.gateway.current(&self.task).await
    }
}

fn task_json(task: &Task, version: Version) -> Value {
    match version {
        Version::V1 => serde_json::to_value(task).unwrap_or(Value::Null),
        Version::V03 => v03::task_to_v03(task),
    }
}

fn is_send(method: &str) -> bool {
    matches!(
        method,
        "SendMessage" | "SendStreamingMessage" | "message/send" | "message/stream"
    )
}

/// The task a task method names (a push config's params name it `taskId`,
/// and the config `id`).
fn task_param(params: &Value) -> Option<&str> {
    params
        .get("taskId")
        .or_else(|| params.get("id"))
        .and_then(Value::as_str)
}

/// The agent a gateway-wide request is about: the task's, or for a send
/// the one its metadata names (`agentId`).
async fn agent_of(gw: &Gateway, method: &str, params: &Value) -> Result<String, RpcError> {
    let named = |v: &Value| {
        v.get("metadata")
            .and_then(|m| m.get("agentId"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    if is_send(method) {
        let from_message = params.get("message").and_then(named);
        return from_message.or_else(|| named(params)).ok_or_else(|| {
            RpcError::invalid_params(
                "the gateway's endpoint needs metadata.agentId naming the agent (or use the agent's own endpoint, /a2a/agents/{id})",
            )
        });
    }
    let task = task_param(params).ok_or_else(|| RpcError::invalid_params("params.id: missing"))?;
    match gw.tasks.get(task).await {
        Ok(Some(t)) if !t.agent.is_empty() => Ok(t.agent),
        // Perhaps an id a client chose (v0.1): which tenant's is known only
        // once the gate has admitted the caller; the task is looked up then.
        Ok(_) => Err(RpcError::task_not_found(task)),
        Err(e) => Err(super::meta_error(e)),
    }
}

/// What a caller the ACL refuses on the agent a request is about is
/// answered: exactly what an unknown agent or task is answered.
fn hidden(method: &str, params: &Value, agent: &Result<String, RpcError>) -> RpcError {
    match agent {
        Err(e) => e.clone(),
        Ok(a) if is_send(method) => super::ops::no_agent(a),
        Ok(_) => RpcError::task_not_found(task_param(params).unwrap_or_default()),
    }
}

/// Handles one JSON-RPC request. `scope`: the agent of the endpoint
/// (`/a2a/agents/{id}`), `None` on the gateway's own endpoint; `base`: the
/// URL clients reach the traffic port at. `Err` only for the gate's
/// refusals, and for an agent the endpoint names that is not there (or
/// that the ACL hides from the caller: the same 404).
///
/// The gate runs before anything is looked up for the caller, so that an
/// answer never tells an existing agent or task from an unknown one: an
/// unauthenticated caller gets 401 either way, one the ACL refuses on the
/// agent gets the unknown agent's (or task's) answer. A send takes one
/// event from the caller's tenant's publish quota.
pub async fn handle(
    gw: &Arc<Gateway>,
    caller: &Caller,
    scope: Option<&str>,
    base: &str,
    version_header: Option<&str>,
    body: &[u8],
) -> Result<Reply, ApiError> {
    let header = rpc::version_from_header(version_header);
    let fallback = header.clone().unwrap_or(Version::V1);
    let parsed = rpc::parse_envelope(body);
    let agent = match (scope, &parsed) {
        (Some(a), _) => Ok(a.to_string()),
        (None, Ok(req)) => agent_of(gw, &req.method, &req.params).await,
        (None, Err((_, e))) => Err(e.clone()),
    };
    let send = parsed.as_ref().is_ok_and(|r| is_send(&r.method));
    let mut ask = Ask::new(Operation::A2a, agent.as_deref().ok(), body);
    if send && agent.is_ok() {
        ask.events = 1;
    }
    let admitted = match gw.api.admit(caller, ask) {
        Ok(a) => a,
        Err(e) if e.status == StatusCode::FORBIDDEN => {
            return match (scope, &parsed) {
                (Some(a), _) => Err(super::unknown_agent(a)),
                (None, Ok(req)) => {
                    let version = rpc::method_version(&req.method).unwrap_or(fallback);
                    let e = hidden(&req.method, &req.params, &agent);
                    Ok(Reply::Json(rpc::error(&req.id, &e, version)))
                }
                (None, Err((id, e))) => Ok(Reply::Json(rpc::error(id, e, fallback))),
            };
        }
        Err(e) => return Err(e),
    };
    // The endpoint of an agent that is gone is not there at all; a meta
    // store that cannot say is a JSON-RPC error like any other.
    if let Some(a) = scope {
        match gw.agent(a).await {
            Ok(Some(_)) => {}
            Ok(None) => return Err(super::unknown_agent(a)),
            Err(e) => {
                let id = parsed
                    .as_ref()
                    .map_or_else(|(id, _)| id.clone(), |r| r.id.clone());
                let version = header.clone().unwrap_or(Version::V1);
                return Ok(Reply::Json(rpc::error(&id, &super::meta_error(e), version)));
            }
        }
    }
    let req = match parsed {
        Ok(r) => r,
        Err((id, e)) => return Ok(Reply::Json(rpc::error(&id, &e, fallback))),
    };
    let id = req.id.clone();
    let Some(version) = rpc::method_version(&req.method) else {
        let e = RpcError::new(
            rpc::METHOD_NOT_FOUND,
            format!("Method not found: {}", req.method),
        );
        return Ok(Reply::Json(rpc::error(&id, &e, fallback)));
    };
    let mismatch = match &header {
        Err(v) => Some(format!(
            "A2A version {v:?} is not supported: this gateway speaks 1.0 and 0.3"
        )),
        Ok(h) if *h != version => Some(format!(
            "method {} belongs to A2A {}, but the request's A2A-Version is {}",
            req.method,
            version.as_str(),
            h.as_str()
        )),
        Ok(_) => None,
    };
    if let Some(m) = mismatch {
        let e = RpcError::new(rpc::VERSION_NOT_SUPPORTED, m);
        return Ok(Reply::Json(rpc::error(&id, &e, version)));
    }
    let agent = match agent {
        Ok(a) => a,
        // A task id a client chose is its tenant's (see `scoped_id`).
        Err(e) if e.code == rpc::TASK_NOT_FOUND => {
            let Some(a) = scoped_agent(gw, &admitted.creator, &req.params).await else {
                return Ok(Reply::Json(rpc::error(&id, &e, version)));
            };
            // Admitted without an agent so far: now on the task's.
            match gw
                .api
                .admit(caller, Ask::new(Operation::A2a, Some(&a), body))
            {
                Ok(_) => a,
                Err(d) if d.status == StatusCode::FORBIDDEN => {
                    return Ok(Reply::Json(rpc::error(&id, &e, version)));
                }
                Err(d) => return Err(d),
            }
        }
        Err(e) => return Ok(Reply::Json(rpc::error(&id, &e, version))),
    };
    let creator = admitted.creator.clone();
    let answer = match req.method.as_str() {
        "GetExtendedAgentCard" | "agent/getAuthenticatedExtendedCard" => {
            extended_card(gw, base, &agent)
                .await
                .map(|card| Reply::Json(rpc::success(&id, card)))
        }
        method => run(gw, &creator, &agent, method, &req.params, &id, version).await,
    };
    Ok(match answer {
        Ok(reply) => reply,
        Err(e) => Reply::Json(rpc::error(&id, &e, version)),
    })
}

/// The agent of the task a client chose the id of (v0.1), kept under the
/// caller's tenant; `None` when there is none of the caller's.
async fn scoped_agent(gw: &Gateway, who: &Creator, params: &Value) -> Option<String> {
    let key = super::ops::scoped_id(who, task_param(params)?)?;
    match gw.tasks.get(&key).await {
        Ok(Some(t)) if !t.agent.is_empty() && Gateway::visible(&t, who) => Some(t.agent),
        _ => None,
    }
}

/// What the client sent as `SendMessage` params, in either version.
fn send_params(params: &Value, version: Version) -> Result<SendMessageRequest, RpcError> {
    match version {
        Version::V1 => parse_params(params),
        Version::V03 => v03::send_from_v03(params),
    }
    .map_err(RpcError::invalid_params)
}

async fn run(
    gw: &Arc<Gateway>,
    creator: &Creator,
    agent: &str,
    method: &str,
    params: &Value,
    id: &Value,
    version: Version,
) -> Result<Reply, RpcError> {
    let ok = |v: Value| Ok(Reply::Json(rpc::success(id, v)));
    let v03 = version == Version::V03;
    let scope = Some(agent);
    let stream = |sent: Sent, task: &str| {
        Reply::Stream(Streaming {
            id: id.clone(),
            version,
            first: vec![StreamResponse::Task(sent.task)],
            changes: sent.changes,
            gateway: gw.clone(),
            task: task.to_string(),
        })
    };
    let push_method = method.contains("PushNotificationConfig")
        || method.starts_with("tasks/pushNotificationConfig/");
    if push_method && !gw.cfg.push_enabled {
        return Err(RpcError::push_not_supported());
    }
    match method {
        "SendMessage" | "message/send" => {
            let req = send_params(params, version)?;
            let (immediately, history) = req
                .configuration
                .as_ref()
                .map_or((false, None), |c| (c.return_immediately, c.history_length));
            let sent = gw.send(creator, agent, req, false, v03, None).await?;
            let task = if immediately {
                sent.task
            } else {
                settled(gw, sent).await
            };
            let task = task.with_history_length(history);
            match version {
                Version::V1 => ok(serde_json::json!({ "task": task })),
                Version::V03 => ok(v03::task_to_v03(&task)),
            }
        }
        "SendStreamingMessage" | "message/stream" => {
            let req = send_params(params, version)?;
            let sent = gw.send(creator, agent, req, true, v03, None).await?;
            let task = sent.task.id.clone();
            Ok(stream(sent, &task))
        }
        "GetTask" | "tasks/get" => {
            let req: GetTaskRequest = match version {
                Version::V1 => parse_params(params),
                Version::V03 => v03::get_from_v03(params),
            }
            .map_err(RpcError::invalid_params)?;
            let task = gw.get(creator, Some(agent), req).await?;
            ok(task_json(&task, version))
        }
        "ListTasks" => {
            let req: ListTasksRequest = parse_params(params).map_err(RpcError::invalid_params)?;
            let list = gw.list(creator, Some(agent), req).await?;
            ok(serde_json::to_value(list).unwrap_or(Value::Null))
        }
        "CancelTask" | "tasks/cancel" => {
            let req: CancelTaskRequest = match version {
                Version::V1 => parse_params(params),
                Version::V03 => v03::cancel_from_v03(params),
            }
            .map_err(RpcError::invalid_params)?;
            let task = gw.cancel(creator, Some(agent), req).await?;
            ok(task_json(&task, version))
        }
        "SubscribeToTask" | "tasks/resubscribe" => {
            let req: SubscribeToTaskRequest = match version {
                Version::V1 => parse_params(params),
                Version::V03 => v03::subscribe_from_v03(params),
            }
            .map_err(RpcError::invalid_params)?;
            let sent = gw.subscribe(creator, Some(agent), &req.id).await?;
            let task = sent.task.id.clone();
            Ok(stream(sent, &task))
        }
        "CreateTaskPushNotificationConfig" => {
            let config = parse_params(params).map_err(RpcError::invalid_params)?;
            let saved = gw.set_push(creator, scope, config, false).await?;
            ok(serde_json::to_value(saved).unwrap_or(Value::Null))
        }
        "tasks/pushNotificationConfig/set" => {
            let config = v03::push_set_from_v03(params).map_err(RpcError::invalid_params)?;
            let saved = gw.set_push(creator, scope, config, true).await?;
            ok(v03::push_to_v03(&saved))
        }
        "GetTaskPushNotificationConfig" => {
            let req: GetTaskPushNotificationConfigRequest =
                parse_params(params).map_err(RpcError::invalid_params)?;
            let found = gw
                .get_push(creator, scope, &req.task_id, Some(&req.id))
                .await?;
            ok(serde_json::to_value(found).unwrap_or(Value::Null))
        }
        "tasks/pushNotificationConfig/get" => {
            let (task, config) =
                v03::push_get_from_v03(params).map_err(RpcError::invalid_params)?;
            let found = gw
                .get_push(creator, scope, &task, config.as_deref())
                .await?;
            ok(v03::push_to_v03(&found))
        }
        "ListTaskPushNotificationConfigs" => {
            let req: ListTaskPushNotificationConfigsRequest =
                parse_params(params).map_err(RpcError::invalid_params)?;
            let list = gw
                .list_push(
                    creator,
                    scope,
                    &req.task_id,
                    req.page_size,
                    req.page_token.as_deref(),
                )
                .await?;
            ok(serde_json::to_value(list).unwrap_or(Value::Null))
        }
        "tasks/pushNotificationConfig/list" => {
            let (task, _) = v03::push_get_from_v03(params).map_err(RpcError::invalid_params)?;
            let list = gw.list_push(creator, scope, &task, None, None).await?;
            ok(Value::Array(
                list.configs.iter().map(v03::push_to_v03).collect(),
            ))
        }
        "DeleteTaskPushNotificationConfig" => {
            let req: DeleteTaskPushNotificationConfigRequest =
                parse_params(params).map_err(RpcError::invalid_params)?;
            gw.delete_push(creator, scope, &req.task_id, &req.id)
                .await?;
            ok(Value::Null)
        }
        "tasks/pushNotificationConfig/delete" => {
            let (task, config) =
                v03::push_get_from_v03(params).map_err(RpcError::invalid_params)?;
            let config = config
                .ok_or_else(|| RpcError::invalid_params("pushNotificationConfigId: missing"))?;
            gw.delete_push(creator, scope, &task, &config).await?;
            ok(Value::Null)
        }
        other => Err(RpcError::new(
            rpc::METHOD_NOT_FOUND,
            format!("Method not found: {other}"),
        )),
    }
}

/// `GetExtendedAgentCard` / `agent/getAuthenticatedExtendedCard`: the
/// extended card agent `agent` registered, shown like its public card (the
/// caller was admitted by the gate); -32004 when it registered none, as its
/// public card then does not declare one.
async fn extended_card(gw: &Gateway, base: &str, agent: &str) -> Result<Value, RpcError> {
    let found = gw.agent(agent).await.map_err(super::meta_error)?;
    match found {
        Some(a) if a.extended_card.is_some() => {
            let card = a.extended_card.clone().unwrap_or(Value::Null);
            let endpoint = format!("{base}/a2a/agents/{}", a.id);
            let push = gw.cfg.push_enabled;
            Ok(with_extended(
                eventmesh_a2a::card::for_gateway(&card, &endpoint, true, push),
                true,
            ))
        }
        _ => Err(RpcError::unsupported_operation(
            "the agent does not support authenticated extended cards",
        )),
    }
}

/// Says in a served card whether the agent has an extended card, in the
/// words of both versions (`capabilities.extendedAgentCard` in 1.0,
/// `supportsAuthenticatedExtendedCard` in 0.3).
fn with_extended(mut card: Value, extended: bool) -> Value {
    if let Some(o) = card.as_object_mut() {
        if let Some(c) = o.get_mut("capabilities").and_then(Value::as_object_mut) {
            c.insert("extendedAgentCard".into(), extended.into());
        }
        o.insert("supportsAuthenticatedExtendedCard".into(), extended.into());
    }
    card
}

/// Waits until a sent task settles (terminal, or waiting for the client)
/// or its agent's time runs out; the task as it then is.
async fn settled(gw: &Gateway, mut sent: Sent) -> Task {
    let mut task = sent.task;
    let limit = gw.cfg.task_timeout + Duration::from_secs(1);
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let state = task.status.state;
        if state.is_terminal() || state.is_interrupted() {
            return task;
        }
        tokio::select! {
            got = sent.changes.recv() => match got {
                Ok(applied) => task = applied.task.clone(),
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    if let Some(now) = gw.current(&task.id).await {
                        task = now;
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return task,
            },
            _ = tokio::time::sleep_until(deadline) => return task,
            _ = gw.api.shutdown().cancelled() => return task,
        }
    }
}

/// `POST /a2a/tasks/send`: the v0.1 `tasks/send` request (parts typed by
/// `type`, the agent named by `params.metadata.agentId`), run as a
/// blocking `SendMessage` and answered with the v0.1 task (v0.3's shape
/// with `sessionId` and each part's `type`).
pub async fn tasks_send(
    gw: &Arc<Gateway>,
    caller: &Caller,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req = match rpc::parse_envelope(body) {
        Ok(r) => r,
        Err((id, e)) => return Ok(rpc::error(&id, &e, Version::V03)),
    };
    let id = req.id.clone();
    if req.method != "tasks/send" {
        let e = RpcError::new(
            rpc::METHOD_NOT_FOUND,
            format!("Method not found: {}", req.method),
        );
        return Ok(rpc::error(&id, &e, Version::V03));
    }
    let mut params = req.params.clone();
    if let Some(parts) = params
        .get_mut("message")
        .and_then(|m| m.get_mut("parts"))
        .and_then(Value::as_array_mut)
    {
        for p in parts {
            if let Some(obj) = p.as_object_mut() {
                if let Some(t) = obj.remove("type") {
                    obj.entry("kind").or_insert(t);
                }
            }
        }
    }
    if let Some(m) = params.get_mut("message").and_then(Value::as_object_mut) {
        m.entry("messageId")
            .or_insert_with(|| Value::String(uuid::Uuid::now_v7().to_string()));
        if let Some(session) = req.params.get("sessionId").cloned() {
            m.entry("contextId").or_insert(session);
        }
    }
    let agent = match agent_of(gw, "message/send", &params).await {
        Ok(a) => a,
        Err(e) => return Ok(rpc::error(&id, &e, Version::V03)),
    };
    let mut ask = Ask::new(Operation::A2a, Some(&agent), body);
    ask.events = 1;
    let admitted = match gw.api.admit(caller, ask) {
        Ok(a) => a,
        Err(e) if e.status == StatusCode::FORBIDDEN => {
            let e = super::ops::no_agent(&agent);
            return Ok(rpc::error(&id, &e, Version::V03));
        }
        Err(e) => return Err(e),
    };
    let creator = admitted.creator.clone();
    let run = async {
        let mut send = v03::send_from_v03(&params).map_err(RpcError::invalid_params)?;
        // v0.1 clients name the task: a new one takes that id, an existing
        // one is continued.
        let wanted = match req.params.get("id") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) if valid_task_id(id) => Some(id.clone()),
            Some(other) => {
                return Err(RpcError::invalid_params(format!(
                    "params.id {other} is not a task id (1 to 128 letters, digits, '-', '_', '.' or ':')"
                )))
            }
        };
        // Under the gate, kept under the caller's tenant: another tenant's
        // task of the same id is neither continued nor in the way.
        let key = wanted
            .as_ref()
            .map(|id| super::ops::scoped_id(&creator, id).unwrap_or_else(|| id.clone()));
        let new_id = match &key {
            Some(k) if gw.tasks.get(k).await.map_err(super::meta_error)?.is_some() => {
                send.message.task_id = Some(k.clone());
                None
            }
            other => other.as_deref(),
        };
        let sent = gw.send(&creator, &agent, send, false, true, new_id).await?;
        let mut task = settled(gw, sent).await;
        // The client sees the id it chose.
        if let (Some(wanted), Some(key)) = (wanted, key) {
            if task.id == key {
                task.id = wanted;
            }
        }
        Ok(task)
    };
    Ok(match run.await {
        Ok(task) => {
            let mut v = v03::task_to_v03(&task);
            if let Some(obj) = v.as_object_mut() {
                obj.insert("sessionId".into(), Value::String(task.context_id.clone()));
            }
            typed_parts(&mut v);
            rpc::success(&id, v)
        }
        Err(e) => rpc::error(&id, &e, Version::V03),
    })
}

/// A task id a client may choose: 1 to 128 ASCII letters, digits, `-`,
/// `_`, `.` or `:` (it becomes part of a meta store key).
fn valid_task_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// Adds v0.1's `type` next to each part's `kind`, wherever parts appear.
fn typed_parts(v: &mut Value) {
    match v {
        Value::Object(map) => {
            if let Some(kind) = map.get("kind").and_then(Value::as_str) {
                if matches!(kind, "text" | "file" | "data") && !map.contains_key("type") {
                    let k = kind.to_string();
                    map.insert("type".into(), Value::String(k));
                }
            }
            map.values_mut().for_each(typed_parts);
        }
        Value::Array(items) => items.iter_mut().for_each(typed_parts),
        _ => {}
    }
}

/// The gateway's own card: an entry point listing the agents it fronts
/// as skills (`id` the agent id), with its own JSON-RPC endpoint for the
/// task methods of every agent.
pub fn gateway_card(base: &str, agents: &[eventmesh_state::Agent], push: bool) -> Value {
    let skills: Vec<Value> = agents
        .iter()
        .filter_map(|a| {
            let card = a.card.as_ref()?;
            let text = |k: &str| {
                card.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            Some(serde_json::json!({
                "id": a.id,
                "name": text("name"),
                "description": text("description"),
                "tags": ["agent"],
            }))
        })
        .collect();
    let card = serde_json::json!({
        "name": "eventmesh A2A gateway",
        "description": "Agents attached to the event mesh; each agent's own card is at /a2a/agents/{id}/.well-known/agent-card.json",
        "version": env!("CARGO_PKG_VERSION"),
        "skills": skills,
        "agents": agents.iter().map(|a| serde_json::json!({
            "id": a.id,
            "card": format!("{base}/a2a/agents/{}/.well-known/agent-card.json", a.id),
            "url": format!("{base}/a2a/agents/{}", a.id),
        })).collect::<Vec<_>>(),
    });
    eventmesh_a2a::card::for_gateway(&card, &format!("{base}/a2a"), true, push)
}

/// The card clients fetch for agent `a`: its own, with the gateway as its
/// endpoint.
pub fn agent_card(base: &str, a: &eventmesh_state::Agent, push: bool) -> Value {
    let card = a.card.clone().unwrap_or(Value::Null);
    let served =
        eventmesh_a2a::card::for_gateway(&card, &format!("{base}/a2a/agents/{}", a.id), true, push);
    with_extended(served, a.extended_card.is_some())
}
