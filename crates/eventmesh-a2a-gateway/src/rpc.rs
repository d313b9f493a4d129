//! JSON-RPC dispatch: one request body, decoded for the version its
//! `A2A-Version` header names (absent: 0.3), run as a call (call.rs), and
//! encoded back in that version.
//!
//! Every protocol error is a JSON-RPC error in an HTTP 200 answer, as A2A
//! clients expect; only the gate's refusals (401, 403, 429) are HTTP
//! errors, like on every other route.

use std::sync::Arc;

use eventmesh_a2a::model::StreamResponse;
use eventmesh_a2a::rpc::{self, RpcError, Version};
use eventmesh_a2a::v03;
use eventmesh_security::Operation;
use serde_json::Value;

use super::call::{self, Answer, Method, Refused};
use super::Gateway;
use eventmesh_api::StatusCode;
use eventmesh_api::{ApiError, Ask, Caller};

/// What a request is answered with.
pub enum Reply {
    /// One JSON-RPC response.
    Json(Value),
    /// A server-sent event stream, one JSON-RPC response per event.
    Stream(Streaming),
}

/// A call's stream, each event framed as a response to request `id`.
pub struct Streaming {
    pub id: Value,
    pub inner: call::Streaming,
}

impl Streaming {
    /// The next event as a JSON-RPC response; `None` once the stream ended.
    pub async fn next(&mut self) -> Option<Value> {
        let (event, last) = self.inner.next().await?;
        Some(self.encode(&event, last))
    }

    fn encode(&self, event: &StreamResponse, last: bool) -> Value {
        rpc::success(&self.id, self.inner.to_json(event, last))
    }
}

/// Handles one JSON-RPC request. `scope`: the agent of the endpoint
/// (`/a2a/agents/{id}`), `None` on the gateway's own endpoint; `base`: the
/// URL clients reach the traffic port at. `Err` only for the gate's
/// refusals, and for an agent the endpoint names that is not there (or
/// that the ACL hides from the caller: the same 404). A request that is
/// not a call (unparsable, an unknown method, a version it does not
/// belong to) is answered its JSON-RPC error once the gate admitted the
/// caller.
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
    let not_a_call = |id: Value, e: RpcError, version: Version| async move {
        call::gate(gw, caller, scope, body)
            .await
            .map(|()| Reply::Json(rpc::error(&id, &e, version)))
    };
    let req = match rpc::parse_envelope(body) {
        Ok(r) => r,
        Err((id, e)) => return not_a_call(id, e, fallback).await,
    };
    let id = req.id.clone();
    let Some((method, version)) = Method::from_rpc(&req.method) else {
        let e = RpcError::new(
            rpc::METHOD_NOT_FOUND,
            format!("Method not found: {}", req.method),
        );
        return not_a_call(id, e, fallback).await;
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
        return not_a_call(id, RpcError::new(rpc::VERSION_NOT_SUPPORTED, m), version).await;
    }
    let answer = call::call(
        gw,
        caller,
        call::Request {
            method,
            version,
            params: req.params,
            scope,
            base,
            raw: body,
        },
    )
    .await;
    match answer {
        Ok(Answer::Value(v)) => Ok(Reply::Json(rpc::success(&id, v))),
        Ok(Answer::Stream(inner)) => Ok(Reply::Stream(Streaming { id, inner })),
        Err(Refused::Rpc(e)) => Ok(Reply::Json(rpc::error(&id, &e, version))),
        Err(Refused::Gate(e)) => Err(e),
    }
}

/// An agent's card as served at `base`: its interfaces the gateway's, its
/// capabilities the gateway's, and whether it has an extended card.
pub(super) fn served_card(
    gw: &Gateway,
    base: &str,
    agent: &str,
    card: &Value,
    extended: bool,
) -> Value {
    let endpoint = format!("{base}/a2a/agents/{agent}");
    let push = gw.cfg.push_enabled;
    let card = with_extended(
        eventmesh_a2a::card::for_gateway(card, &endpoint, true, push),
        extended,
    );
    let grpc = (gw.cfg.grpc_public_url.as_deref(), gw.cfg.grpc_port);
    eventmesh_a2a::card::with_grpc(card, grpc.0, grpc.1, base, Some(agent))
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
    let agent = match call::agent_of(gw, Method::SendMessage, &params).await {
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
        let mut task = call::settled(gw, sent).await;
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
