//! One A2A call, whatever the binding it came over (JSON-RPC, HTTP+JSON,
//! gRPC, or an MCP tool): the method, its request message as JSON in the
//! version the client speaks, and the endpoint it reached. Each binding
//! decodes into a [`Request`], calls [`call`], and encodes the [`Answer`]
//! or the [`Refused`] its own way; the gate, the lookups and the
//! operations themselves are the same for all of them.
//!
//! The gate runs before anything is looked up for the caller, so that an
//! answer never tells an existing agent or task from an unknown one: an
//! unauthenticated caller is refused either way, one the ACL refuses on
//! the agent gets the unknown agent's (or task's) answer. A send takes one
//! event from the caller's tenant's publish quota.

use std::sync::Arc;
use std::time::Duration;

use eventmesh_a2a::model::{
    parse_params, CancelTaskRequest, DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest, GetTaskRequest, ListTaskPushNotificationConfigsRequest,
    ListTasksRequest, SendMessageRequest, StreamResponse, SubscribeToTaskRequest, Task,
};
pub use eventmesh_a2a::rpc::Version;
use eventmesh_a2a::rpc::{self, RpcError};
use eventmesh_a2a::v03;
use eventmesh_api::{ApiError, Ask, Caller, StatusCode};
use eventmesh_runtime::Creator;
use eventmesh_security::Operation;
use serde_json::Value;
use tokio::sync::broadcast;

use super::live::Applied;
use super::ops::Sent;
use super::Gateway;

/// The operations of the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    SendMessage,
    SendStreamingMessage,
    GetTask,
    ListTasks,
    CancelTask,
    SubscribeToTask,
    CreateTaskPushNotificationConfig,
    GetTaskPushNotificationConfig,
    ListTaskPushNotificationConfigs,
    DeleteTaskPushNotificationConfig,
    GetExtendedAgentCard,
}

impl Method {
    /// The method a JSON-RPC method name stands for, with the version the
    /// name belongs to.
    pub fn from_rpc(name: &str) -> Option<(Method, Version)> {
        use Method as M;
        let (m, v) = match name {
            "SendMessage" => (M::SendMessage, Version::V1),
            "SendStreamingMessage" => (M::SendStreamingMessage, Version::V1),
            "GetTask" => (M::GetTask, Version::V1),
            "ListTasks" => (M::ListTasks, Version::V1),
            "CancelTask" => (M::CancelTask, Version::V1),
            "SubscribeToTask" => (M::SubscribeToTask, Version::V1),
            "CreateTaskPushNotificationConfig" => {
                (M::CreateTaskPushNotificationConfig, Version::V1)
            }
            "GetTaskPushNotificationConfig" => (M::GetTaskPushNotificationConfig, Version::V1),
            "ListTaskPushNotificationConfigs" => (M::ListTaskPushNotificationConfigs, Version::V1),
            "DeleteTaskPushNotificationConfig" => {
                (M::DeleteTaskPushNotificationConfig, Version::V1)
            }
            "GetExtendedAgentCard" => (M::GetExtendedAgentCard, Version::V1),
            "message/send" => (M::SendMessage, Version::V03),
            "message/stream" => (M::SendStreamingMessage, Version::V03),
            "tasks/get" => (M::GetTask, Version::V03),
            "tasks/cancel" => (M::CancelTask, Version::V03),
            "tasks/resubscribe" => (M::SubscribeToTask, Version::V03),
            "tasks/pushNotificationConfig/set" => {
                (M::CreateTaskPushNotificationConfig, Version::V03)
            }
            "tasks/pushNotificationConfig/get" => (M::GetTaskPushNotificationConfig, Version::V03),
            "tasks/pushNotificationConfig/list" => {
                (M::ListTaskPushNotificationConfigs, Version::V03)
            }
            "tasks/pushNotificationConfig/delete" => {
                (M::DeleteTaskPushNotificationConfig, Version::V03)
            }
            "agent/getAuthenticatedExtendedCard" => (M::GetExtendedAgentCard, Version::V03),
            _ => return None,
        };
        Some((m, v))
    }

    /// Sends a message to the agent (and so counts against the caller's
    /// publish quota).
    pub fn is_send(self) -> bool {
        matches!(self, Method::SendMessage | Method::SendStreamingMessage)
    }

    /// Answers with a stream.
    pub fn streams(self) -> bool {
        matches!(self, Method::SendStreamingMessage | Method::SubscribeToTask)
    }

    fn is_push(self) -> bool {
        matches!(
            self,
            Method::CreateTaskPushNotificationConfig
                | Method::GetTaskPushNotificationConfig
                | Method::ListTaskPushNotificationConfigs
                | Method::DeleteTaskPushNotificationConfig
        )
    }
}

/// One call, decoded.
pub struct Request<'a> {
    pub method: Method,
    /// The version `params` is written in, and the answer will be.
    pub version: Version,
    /// The method's request message: ProtoJSON in 1.0, the JSON-RPC
    /// params object in 0.3.
    pub params: Value,
    /// The agent whose own endpoint the call reached; `None` at the
    /// gateway's endpoint (the agent is then the task's, or for a send
    /// the one `metadata.agentId` names).
    pub scope: Option<&'a str>,
    /// The URL clients reach the traffic port at (cards name it).
    pub base: &'a str,
    /// The request as received, which the gate sizes and audits.
    pub raw: &'a [u8],
}

/// What a call is answered with.
pub enum Answer {
    /// The response message, in the request's version (`null` for an
    /// empty one).
    Value(Value),
    /// The task's events until one settles it.
    Stream(Streaming),
}

/// Why a call was not carried out.
#[derive(Debug)]
pub enum Refused {
    /// The gate's refusal (401, 429, …), or an agent endpoint that is not
    /// there (404): what every route answers such a caller.
    Gate(ApiError),
    /// The protocol's error.
    Rpc(RpcError),
}

impl From<RpcError> for Refused {
    fn from(e: RpcError) -> Self {
        Refused::Rpc(e)
    }
}

/// A stream of a task's events: `first`, then its changes until one
/// settles it (terminal, or waiting for the client).
pub struct Streaming {
    pub version: Version,
    first: std::collections::VecDeque<StreamResponse>,
    changes: broadcast::Receiver<Arc<Applied>>,
    gateway: Arc<Gateway>,
    task: String,
    /// The task as of the last event handed out.
    latest: Box<Task>,
    done: bool,
}

impl Streaming {
    fn new(gw: &Arc<Gateway>, version: Version, sent: Sent) -> Streaming {
        let task = sent.task.id.clone();
        Streaming {
            version,
            latest: Box::new(sent.task.clone()),
            first: vec![StreamResponse::Task(sent.task)].into(),
            changes: sent.changes,
            gateway: gw.clone(),
            task,
            done: false,
        }
    }

    /// The task as it stood after the last event [`next`](Self::next)
    /// gave (all its artifacts and history, as the gateway applied them),
    /// so a caller that wants the settled task needs no read after the
    /// stream.
    pub fn task(&self) -> &Task {
        &self.latest
    }

    /// The next event, and whether it is the last; `None` once the stream
    /// ended (after the last event, or when the gateway shuts down).
    pub async fn next(&mut self) -> Option<(StreamResponse, bool)> {
        if let Some(ev) = self.first.pop_front() {
            return Some((ev, false));
        }
        if self.done {
            return None;
        }
        let shutdown = self.gateway.api.shutdown().clone();
        loop {
            tokio::select! {
                got = self.changes.recv() => match got {
                    Ok(applied) => {
                        self.done = applied.settles();
                        *self.latest = applied.task.clone();
                        return Some((applied.event.clone(), self.done));
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        // Fell behind: the task as it is now, then on.
                        if let Some(task) = self.gateway.current(&self.task).await {
                            let s = task.status.state;
                            self.done = s.is_terminal() || s.is_interrupted();
                            *self.latest = task.clone();
                            return Some((StreamResponse::Task(task), self.done));
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                _ = shutdown.cancelled() => return None,
            }
        }
    }

    /// One event as the request's version writes it (v0.3 marks the last
    /// status update `final`).
    pub fn to_json(&self, event: &StreamResponse, last: bool) -> Value {
        rpc::stream_result(event, self.version, last)
    }
}

/// The task a task method names (a push config's params name it `taskId`,
/// and the config `id`).
fn task_param(params: &Value) -> Option<&str> {
    params
        .get("taskId")
        .or_else(|| params.get("id"))
        .and_then(Value::as_str)
}

/// The agent a gateway-wide call is about: the task's, or for a send the
/// one its metadata names (`agentId`).
pub(super) async fn agent_of(
    gw: &Gateway,
    method: Method,
    params: &Value,
) -> Result<String, RpcError> {
    let named = |v: &Value| {
        v.get("metadata")
            .and_then(|m| m.get("agentId"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    if method.is_send() {
        let from_message = params.get("message").and_then(named);
        return from_message.or_else(|| named(params)).ok_or_else(|| {
            RpcError::invalid_params(
                "the gateway's endpoint needs metadata.agentId naming the agent (or use the agent's own endpoint, /a2a/agents/{id})",
            )
        });
    }
    if method == Method::GetExtendedAgentCard {
        return Err(RpcError::invalid_params(
            "the gateway has no extended card of its own: ask the agent's endpoint, /a2a/agents/{id}",
        ));
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

/// The gate alone, for a request refused before it became a call (one
/// that could not be decoded): `Ok` when the caller may be told why, and
/// the 404 of an agent endpoint that is not there (or that the ACL hides)
/// otherwise, as for a call.
pub async fn gate(
    gw: &Gateway,
    caller: &Caller,
    scope: Option<&str>,
    raw: &[u8],
) -> Result<(), ApiError> {
    match gw.api.admit(caller, Ask::new(Operation::A2a, scope, raw)) {
        Ok(_) => {}
        Err(e) if e.status == StatusCode::FORBIDDEN => {
            return match scope {
                Some(a) => Err(super::unknown_agent(a)),
                None => Ok(()),
            }
        }
        Err(e) => return Err(e),
    }
    match scope {
        // A meta store that cannot say lets the request's own error through.
        Some(a) if matches!(gw.agent(a).await, Ok(None)) => Err(super::unknown_agent(a)),
        _ => Ok(()),
    }
}

/// Runs one call: the gate, then the operation.
pub async fn call(gw: &Arc<Gateway>, caller: &Caller, req: Request<'_>) -> Result<Answer, Refused> {
    let agent = match req.scope {
        Some(a) => Ok(a.to_string()),
        None => agent_of(gw, req.method, &req.params).await,
    };
    let mut ask = Ask::new(Operation::A2a, agent.as_deref().ok(), req.raw);
    if req.method.is_send() && agent.is_ok() {
        ask.events = 1;
    }
    let admitted = match gw.api.admit(caller, ask) {
        Ok(a) => a,
        Err(e) if e.status == StatusCode::FORBIDDEN => {
            // Exactly what an unknown agent or task is answered.
            return Err(match (req.scope, &agent) {
                (Some(a), _) => Refused::Gate(super::unknown_agent(a)),
                (None, Err(e)) => Refused::Rpc(e.clone()),
                (None, Ok(a)) if req.method.is_send() => Refused::Rpc(super::ops::no_agent(a)),
                (None, Ok(_)) => Refused::Rpc(RpcError::task_not_found(
                    task_param(&req.params).unwrap_or_default(),
                )),
            });
        }
        Err(e) => return Err(Refused::Gate(e)),
    };
    // The endpoint of an agent that is gone is not there at all; a meta
    // store that cannot say is the protocol's internal error.
    if let Some(a) = req.scope {
        match gw.agent(a).await {
            Ok(Some(_)) => {}
            Ok(None) => return Err(Refused::Gate(super::unknown_agent(a))),
            Err(e) => return Err(Refused::Rpc(super::meta_error(e))),
        }
    }
    let agent = match agent {
        Ok(a) => a,
        // A task id a client chose is its tenant's (see `scoped_id`).
        Err(e) if e.code == rpc::TASK_NOT_FOUND => {
            let Some(a) = scoped_agent(gw, &admitted.creator, &req.params).await else {
                return Err(Refused::Rpc(e));
            };
            // Admitted without an agent so far: now on the task's.
            match gw
                .api
                .admit(caller, Ask::new(Operation::A2a, Some(&a), req.raw))
            {
                Ok(_) => a,
                Err(d) if d.status == StatusCode::FORBIDDEN => return Err(Refused::Rpc(e)),
                Err(d) => return Err(Refused::Gate(d)),
            }
        }
        Err(e) => return Err(Refused::Rpc(e)),
    };
    let creator = admitted.creator.clone();
    run(gw, &creator, &agent, &req).await.map_err(Refused::Rpc)
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

fn parsed<T>(r: Result<T, String>) -> Result<T, RpcError> {
    r.map_err(RpcError::invalid_params)
}

fn to_json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

async fn run(
    gw: &Arc<Gateway>,
    creator: &Creator,
    agent: &str,
    req: &Request<'_>,
) -> Result<Answer, RpcError> {
    use Method as M;
    let version = req.version;
    let params = &req.params;
    let v03 = version == Version::V03;
    let scope = Some(agent);
    let value = |v: Value| Ok(Answer::Value(v));
    if req.method.is_push() && !gw.cfg.push_enabled {
        return Err(RpcError::push_not_supported());
    }
    match (req.method, version) {
        (M::SendMessage, _) => {
            let send = send_params(params, version)?;
            let (immediately, history) = send
                .configuration
                .as_ref()
                .map_or((false, None), |c| (c.return_immediately, c.history_length));
            let sent = gw.send(creator, agent, send, false, v03, None).await?;
            let task = if immediately {
                sent.task
            } else {
                settled(gw, sent).await
            };
            let task = task.with_history_length(history);
            match version {
                Version::V1 => value(serde_json::json!({ "task": task })),
                Version::V03 => value(v03::task_to_v03(&task)),
            }
        }
        (M::SendStreamingMessage, _) => {
            let send = send_params(params, version)?;
            let sent = gw.send(creator, agent, send, true, v03, None).await?;
            Ok(Answer::Stream(Streaming::new(gw, version, sent)))
        }
        (M::GetTask, _) => {
            let get: GetTaskRequest = parsed(match version {
                Version::V1 => parse_params(params),
                Version::V03 => v03::get_from_v03(params),
            })?;
            let task = gw.get(creator, Some(agent), get).await?;
            value(rpc::task_result(&task, version))
        }
        (M::ListTasks, Version::V1) => {
            let list: ListTasksRequest = parsed(parse_params(params))?;
            let page = gw.list(creator, Some(agent), list).await?;
            value(to_json(&page))
        }
        (M::CancelTask, _) => {
            let cancel: CancelTaskRequest = parsed(match version {
                Version::V1 => parse_params(params),
                Version::V03 => v03::cancel_from_v03(params),
            })?;
            let task = gw.cancel(creator, Some(agent), cancel).await?;
            value(rpc::task_result(&task, version))
        }
        (M::SubscribeToTask, _) => {
            let sub: SubscribeToTaskRequest = parsed(match version {
                Version::V1 => parse_params(params),
                Version::V03 => v03::subscribe_from_v03(params),
            })?;
            let sent = gw.subscribe(creator, Some(agent), &sub.id).await?;
            Ok(Answer::Stream(Streaming::new(gw, version, sent)))
        }
        (M::CreateTaskPushNotificationConfig, Version::V1) => {
            let config = parsed(parse_params(params))?;
            let saved = gw.set_push(creator, scope, config, false).await?;
            value(to_json(&saved))
        }
        (M::CreateTaskPushNotificationConfig, Version::V03) => {
            let config = parsed(v03::push_set_from_v03(params))?;
            let saved = gw.set_push(creator, scope, config, true).await?;
            value(v03::push_to_v03(&saved))
        }
        (M::GetTaskPushNotificationConfig, Version::V1) => {
            let get: GetTaskPushNotificationConfigRequest = parsed(parse_params(params))?;
            let found = gw
                .get_push(creator, scope, &get.task_id, Some(&get.id))
                .await?;
            value(to_json(&found))
        }
        (M::GetTaskPushNotificationConfig, Version::V03) => {
            let (task, config) = parsed(v03::push_get_from_v03(params))?;
            let found = gw
                .get_push(creator, scope, &task, config.as_deref())
                .await?;
            value(v03::push_to_v03(&found))
        }
        (M::ListTaskPushNotificationConfigs, Version::V1) => {
            let list: ListTaskPushNotificationConfigsRequest = parsed(parse_params(params))?;
            let page = gw
                .list_push(
                    creator,
                    scope,
                    &list.task_id,
                    list.page_size,
                    list.page_token.as_deref(),
                )
                .await?;
            value(to_json(&page))
        }
        (M::ListTaskPushNotificationConfigs, Version::V03) => {
            let (task, _) = parsed(v03::push_get_from_v03(params))?;
            let page = gw.list_push(creator, scope, &task, None, None).await?;
            value(Value::Array(
                page.configs.iter().map(v03::push_to_v03).collect(),
            ))
        }
        (M::DeleteTaskPushNotificationConfig, Version::V1) => {
            let del: DeleteTaskPushNotificationConfigRequest = parsed(parse_params(params))?;
            gw.delete_push(creator, scope, &del.task_id, &del.id)
                .await?;
            value(Value::Null)
        }
        (M::DeleteTaskPushNotificationConfig, Version::V03) => {
            let (task, config) = parsed(v03::push_get_from_v03(params))?;
            let config = config
                .ok_or_else(|| RpcError::invalid_params("pushNotificationConfigId: missing"))?;
            gw.delete_push(creator, scope, &task, &config).await?;
            value(Value::Null)
        }
        (M::GetExtendedAgentCard, _) => value(extended_card(gw, req.base, agent).await?),
        (M::ListTasks, Version::V03) => Err(RpcError::new(
            rpc::METHOD_NOT_FOUND,
            "ListTasks is not part of A2A 0.3",
        )),
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

/// `GetExtendedAgentCard`: the extended card agent `agent` registered,
/// shown like its public card (the caller was admitted by the gate);
/// UnsupportedOperation when it registered none, as its public card then
/// does not declare one.
async fn extended_card(gw: &Gateway, base: &str, agent: &str) -> Result<Value, RpcError> {
    let found = gw.agent(agent).await.map_err(super::meta_error)?;
    match found {
        Some(a) if a.extended_card.is_some() => {
            let card = a.extended_card.clone().unwrap_or(Value::Null);
            Ok(super::rpc::served_card(gw, base, &a.id, &card, true))
        }
        _ => Err(RpcError::unsupported_operation(
            "the agent does not support authenticated extended cards",
        )),
    }
}

/// Waits until a sent task settles (terminal, or waiting for the client)
/// or its agent's time runs out; the task as it then is.
pub(super) async fn settled(gw: &Gateway, mut sent: Sent) -> Task {
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
