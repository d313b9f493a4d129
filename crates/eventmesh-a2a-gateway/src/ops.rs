//! The gateway's operations on the protocol's v1.0 model, whatever the
//! version a client speaks: send, get, list, cancel and subscribe, and the
//! changes applied to a task (an agent's update, a client's follow-up
//! message, a cancel, a timeout). Agent registration is in agents.rs, the
//! rules an agent's update applies by in updates.rs.

use std::sync::Arc;

use bytes::Bytes;
use eventmesh_a2a::events::{self, ArtifactData, StatusData, TaskCancel, TaskMessage};
use eventmesh_a2a::model::{
    self, now_timestamp, CancelTaskRequest, GetTaskRequest, ListTasksRequest, ListTasksResponse,
    Message, Role, SendMessageRequest, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState,
    TaskStatus, TaskStatusUpdateEvent,
};
use eventmesh_a2a::rpc::RpcError;
use eventmesh_core::event::{Data, ExtValue, PARTITION_KEY};
use eventmesh_core::CloudEvent;
use eventmesh_runtime::Creator;
use eventmesh_state::{StateError, Updated};
use tokio::sync::broadcast;

use super::live::Applied;
use super::push::PushTarget;
use super::{meta_error, now_ms, store_state, Gateway, Record};
use eventmesh_api::ApiError;

/// One change to a task.
pub(super) enum Change {
    /// The agent's status update.
    Status(StatusData),
    /// The agent's artifact update.
    Artifact(ArtifactData),
    /// The client's next message on the task: it waits for the agent again.
    FollowUp(Message),
    /// The client canceled it.
    Cancel,
}

/// A change written: the task after it, the event streams send for it,
/// and the task's webhooks to notify.
pub(super) struct Changed {
    pub task: Task,
    pub event: StreamResponse,
    pub push: Vec<PushTarget>,
}

/// A send accepted: the task as created (or continued), and its changes
/// from before the agent was told.
pub(super) struct Sent {
    pub task: Task,
    pub changes: broadcast::Receiver<Arc<Applied>>,
}

/// The answer to a send to an agent nobody registered (or that the ACL
/// hides from the caller).
pub(super) fn no_agent(agent: &str) -> RpcError {
    RpcError::invalid_params(format!("no agent {agent:?} is registered"))
}

/// The key a task id a client chose (v0.1 `tasks/send`) is kept under
/// when the gate is on: `<id>@<tenant>`, the tenant with every byte but
/// letters, digits, `-`, `_` and `.` written `~hh`, so that another tenant
/// choosing the same id gets a task of its own. `None` without a tenant.
pub(super) fn scoped_id(who: &Creator, id: &str) -> Option<String> {
    let tenant = who.tenant.as_deref()?;
    let mut key = format!("{id}@");
    for b in tenant.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.') {
            key.push(char::from(b));
        } else {
            key.push_str(&format!("~{b:02x}"));
        }
    }
    Some(key)
}

/// Pages of `ListTasks`.
const DEFAULT_PAGE: i32 = 50;
const MAX_PAGE: i32 = 100;

fn cannot_cancel(id: &str) -> RpcError {
    RpcError::new(
        eventmesh_a2a::rpc::TASK_NOT_CANCELABLE,
        format!("Task {id} cannot be canceled: it has ended"),
    )
}

pub(super) fn decode(rec: &eventmesh_state::Task) -> Option<Record> {
    match serde_json::from_value(rec.payload.clone()) {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::warn!(task = %rec.id, error = %e, "unreadable A2A task record");
            None
        }
    }
}

fn history_length(n: Option<i32>) -> Result<Option<i32>, RpcError> {
    match n {
        Some(n) if n < 0 => Err(RpcError::invalid_params(
            "historyLength must be non-negative",
        )),
        n => Ok(n),
    }
}

fn push_history(task: &mut Task, mut message: Message, max: usize) {
    message.task_id = Some(task.id.clone());
    message.context_id = Some(task.context_id.clone());
    task.history.push(message);
    let excess = task.history.len().saturating_sub(max);
    task.history.drain(..excess);
}

/// Applies `change` to `task`; the event streams send for it.
pub(super) fn apply(task: &mut Task, change: &Change, history_max: usize) -> StreamResponse {
    let status_event = |task: &Task| {
        StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: task.id.clone(),
            context_id: task.context_id.clone(),
            status: task.status.clone(),
            metadata: None,
        })
    };
    match change {
        Change::Status(s) => {
            let message = s.message.clone().map(|mut m| {
                if m.role == Role::Unspecified {
                    m.role = Role::Agent;
                }
                m.task_id = Some(task.id.clone());
                m.context_id = Some(task.context_id.clone());
                m
            });
            if let Some(m) = &message {
                push_history(task, m.clone(), history_max);
            }
            task.status = TaskStatus {
                state: s.state,
                message,
                timestamp: Some(now_timestamp()),
            };
            status_event(task)
        }
        Change::Artifact(a) => {
            let existing = task
                .artifacts
                .iter_mut()
                .find(|x| x.artifact_id == a.artifact.artifact_id);
            match existing {
                Some(x) if a.append => x.parts.extend(a.artifact.parts.iter().cloned()),
                Some(x) => *x = a.artifact.clone(),
                None => task.artifacts.push(a.artifact.clone()),
            }
            StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                task_id: task.id.clone(),
                context_id: task.context_id.clone(),
                artifact: a.artifact.clone(),
                append: a.append,
                last_chunk: a.last_chunk,
                metadata: None,
            })
        }
        Change::FollowUp(m) => {
            push_history(task, m.clone(), history_max);
            task.status = TaskStatus {
                state: TaskState::Submitted,
                message: None,
                timestamp: Some(now_timestamp()),
            };
            status_event(task)
        }
        Change::Cancel => {
            task.status = TaskStatus {
                state: TaskState::Canceled,
                message: None,
                timestamp: Some(now_timestamp()),
            };
            status_event(task)
        }
    }
}

impl Gateway {
    /// Changes task `id` when `accept` says the stored task takes the
    /// change (and lets it record what it needs), then offers the result to
    /// the task's waiters (its webhooks are the caller's to notify). `None`:
    /// nothing changed (absent, terminal, or refused by `accept`).
    pub(super) async fn change<F>(
        &self,
        id: &str,
        change: &Change,
        mut accept: F,
    ) -> Result<Option<Changed>, StateError>
    where
        F: FnMut(&mut eventmesh_state::Task) -> bool,
    {
        let history_max = self.cfg.history_max as usize;
        let mut out = None;
        let updated = self
            .tasks
            .update(id, now_ms(), |rec| {
                if !accept(rec) {
                    return false;
                }
                let Some(mut record) = decode(rec) else {
                    return false;
                };
                let event = apply(&mut record.task, change, history_max);
                record.last = Some(event.clone());
                rec.state = store_state(record.task.status.state);
                match serde_json::to_value(&record) {
                    Ok(v) => rec.payload = v,
                    Err(_) => return false,
                }
                out = Some(Changed {
                    task: record.task,
                    event,
                    push: record.push,
                });
                true
            })
            .await?;
        match (updated, out) {
            (Updated::Written(_), Some(changed)) => Ok(Some(changed)),
            _ => Ok(None),
        }
    }

    /// Queues a change's notifications; a failure is logged (the change
    /// stands, and its webhooks miss this one notification).
    async fn notify_or_warn(&self, c: &Changed) {
        if let Err(e) = self.notify(&c.task, &c.event, &c.push).await {
            tracing::warn!(task = %c.task.id, error = %e, "A2A push notification not queued");
        }
    }

    /// A change made here (a timeout, a cancel), not by the agent.
    pub(super) async fn apply_local(&self, id: &str, change: Change) -> Result<(), StateError> {
        if let Some(c) = self.change(id, &change, |_| true).await? {
            self.notify_or_warn(&c).await;
        }
        Ok(())
    }

    /// Task `id` as `who` may see it: by its id, or by the id its client
    /// chose (kept under the client's tenant, see [`scoped_id`]); the
    /// stored task's `id` is the one to change it by. Another tenant's
    /// task is not found, exactly like an unknown one. On the endpoint of
    /// agent `scope`, only that agent's tasks exist.
    pub(super) async fn load(
        &self,
        id: &str,
        who: &Creator,
        scope: Option<&str>,
    ) -> Result<(eventmesh_state::Task, Record), RpcError> {
        let mine = |rec: Option<eventmesh_state::Task>| {
            rec.filter(|r| !r.agent.is_empty() && Self::visible(r, who))
                .filter(|r| scope.is_none_or(|a| a == r.agent))
                .and_then(|r| decode(&r).map(|d| (r, d)))
        };
        if let Some(found) = mine(self.tasks.get(id).await.map_err(meta_error)?) {
            return Ok(found);
        }
        if let Some(key) = scoped_id(who, id) {
            if let Some(found) = mine(self.tasks.get(&key).await.map_err(meta_error)?) {
                return Ok(found);
            }
        }
        Err(RpcError::task_not_found(id))
    }

    /// Task `id` as stored now, for a waiter that fell behind its changes
    /// (it was allowed to see the task when it started waiting).
    pub(crate) async fn current(&self, id: &str) -> Option<Task> {
        let rec = self.tasks.get(id).await.ok()??;
        decode(&rec).map(|r| r.task)
    }

    /// Publishes a gateway-to-agent event about task `rec` on the agent's
    /// inbox topic and waits until it is durable.
    async fn tell_agent(
        &self,
        agent: &str,
        rec: &eventmesh_state::Task,
        task_id: &str,
        ty: &str,
        data: Vec<u8>,
        stream: bool,
    ) -> Result<(), RpcError> {
        let mut ev = CloudEvent {
            id: uuid::Uuid::now_v7().to_string(),
            source: "/a2a/gateway".into(),
            ty: ty.into(),
            datacontenttype: Some("application/json".into()),
            subject: Some(task_id.to_string()),
            time: Some(now_timestamp()),
            data: Data::Json(Bytes::from(data)),
            ..CloudEvent::default()
        };
        ev.set_extension(events::EXT_TASK, ExtValue::Str(task_id.to_string()));
        ev.set_extension(events::EXT_AGENT, ExtValue::Str(agent.to_string()));
        ev.set_extension(events::EXT_TOKEN, ExtValue::Str(rec.token.clone()));
        ev.set_extension(events::EXT_SEQ, ExtValue::Str(rec.seq.to_string()));
        ev.set_extension(events::EXT_STREAM, ExtValue::Bool(stream));
        ev.set_extension(PARTITION_KEY, ExtValue::Str(task_id.to_string()));
        let topic = format!("{}{agent}", events::INBOX_PREFIX);
        let failed = |e: ApiError| {
            RpcError::internal(format!(
                "the message could not be queued for the agent: {}",
                e.message
            ))
            .with_meta("error", e.code)
        };
        self.api
            .publish(&self.system, Some(topic), vec![ev], b"")
            .await
            .map_err(failed)?;
        Ok(())
    }

    /// `SendMessage` / `message/send` and their streaming forms.
    /// `v03`: the client speaks v0.3 (a webhook it names gets v0.3 bodies).
    /// `new_id`: the id a new task takes (a v0.1 client chooses it); the
    /// gateway picks one otherwise.
    pub(super) async fn send(
        &self,
        who: &Creator,
        agent: &str,
        req: SendMessageRequest,
        stream: bool,
        v03: bool,
        new_id: Option<&str>,
    ) -> Result<Sent, RpcError> {
        let mut msg = req.message;
        msg.validate().map_err(RpcError::invalid_params)?;
        self.in_use();
        let card = self
            .agent(agent)
            .await
            .map_err(meta_error)?
            .and_then(|a| a.card)
            .ok_or_else(|| no_agent(agent))?;
        let mut webhook = None;
        let mut accepted = Vec::new();
        if let Some(c) = req.configuration {
            history_length(c.history_length)?;
            webhook = c.task_push_notification_config;
            accepted = c.accepted_output_modes;
        }
        eventmesh_a2a::card::check_content_types(&card, &msg, &accepted)
            .map_err(RpcError::content_type_not_supported)?;
        if webhook.is_some() && !self.cfg.push_enabled {
            return Err(RpcError::push_not_supported());
        }
        if let Some(id) = msg.task_id.clone() {
            if let Some(mut config) = webhook {
                config.task_id = Some(id.clone());
                self.set_push(who, Some(agent), config, v03).await?;
            }
            return self.follow_up(who, agent, &id, msg, stream).await;
        }
        let context = msg
            .context_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        msg.context_id = Some(context.clone());
        let mut attempts = 0;
        let (rec, task, push) = loop {
            attempts += 1;
            let id = match new_id {
                Some(id) => id.to_string(),
                None => uuid::Uuid::now_v7().to_string(),
            };
            msg.task_id = Some(id.clone());
            let push = match &webhook {
                Some(config) => vec![self.push_target(&id, config.clone(), v03).await?],
                None => Vec::new(),
            };
            let task = Task {
                id: id.clone(),
                context_id: context.clone(),
                status: TaskStatus {
                    state: TaskState::Submitted,
                    message: None,
                    timestamp: Some(now_timestamp()),
                },
                artifacts: Vec::new(),
                history: vec![msg.clone()],
                metadata: req.metadata.clone(),
            };
            let record = Record {
                task: task.clone(),
                push: push.clone(),
                last: None,
            };
            let payload = serde_json::to_value(&record)
                .map_err(|e| RpcError::internal(format!("cannot encode the task: {e}")))?;
            let mut rec = eventmesh_state::Task::new(
                id,
                eventmesh_state::TaskState::Submitted,
                who.principal.clone().unwrap_or_default(),
                payload,
                now_ms(),
            );
            rec.agent = agent.to_string();
            rec.tenant = who.tenant.clone();
            rec.token = uuid::Uuid::now_v7().simple().to_string();
            match self.tasks.create(&rec).await.map_err(meta_error)? {
                Some(rec) => break (rec, task, push),
                None if new_id.is_some() => {
                    return Err(RpcError::invalid_params(format!(
                        "a task {:?} exists already",
                        new_id.unwrap_or_default()
                    )))
                }
                // A fresh random id taken: pick another.
                None if attempts < 3 => continue,
                None => return Err(RpcError::internal("no free task id after 3 attempts")),
            }
        };
        self.live_ready().await;
        let changes = self.live.watch(&task.id);
        self.notify_or_warn(&Changed {
            event: StreamResponse::Task(task.clone()),
            task: task.clone(),
            push,
        })
        .await;
        self.deliver(agent, &rec, &task, &msg, stream).await?;
        Ok(Sent { task, changes })
    }

    /// A client's next message on an existing task.
    async fn follow_up(
        &self,
        who: &Creator,
        agent: &str,
        id: &str,
        mut msg: Message,
        stream: bool,
    ) -> Result<Sent, RpcError> {
        let (rec, record) = self.load(id, who, Some(agent)).await?;
        let id = rec.id.as_str();
        let state = record.task.status.state;
        if state.is_terminal() {
            return Err(RpcError::unsupported_operation(format!(
                "Task {id} is in terminal state: {}",
                state.as_v1()
            )));
        }
        if msg
            .context_id
            .as_ref()
            .is_some_and(|c| *c != record.task.context_id)
        {
            return Err(RpcError::invalid_params(format!(
                "message.contextId does not match the contextId of task {id}"
            )));
        }
        msg.context_id = Some(record.task.context_id.clone());
        self.live_ready().await;
        let changes = self.live.watch(id);
        let changed = self
            .change(id, &Change::FollowUp(msg.clone()), |_| true)
            .await
            .map_err(meta_error)?
            .ok_or_else(|| {
                RpcError::unsupported_operation(format!("Task {id} is in terminal state"))
            })?;
        self.notify_or_warn(&changed).await;
        let task = changed.task;
        self.deliver(agent, &rec, &task, &msg, stream).await?;
        Ok(Sent { task, changes })
    }

    /// Hands a task's message to its agent; fails the task when it cannot.
    async fn deliver(
        &self,
        agent: &str,
        rec: &eventmesh_state::Task,
        task: &Task,
        msg: &Message,
        stream: bool,
    ) -> Result<(), RpcError> {
        let data = serde_json::to_vec(&TaskMessage {
            task: task.clone(),
            message: msg.clone(),
        })
        .map_err(|e| RpcError::internal(format!("cannot encode the task: {e}")))?;
        let told = self
            .tell_agent(agent, rec, &task.id, events::TYPE_MESSAGE, data, stream)
            .await;
        if let Err(e) = &told {
            let failed = StatusData {
                state: TaskState::Failed,
                message: Some(Message::agent_text(
                    uuid::Uuid::now_v7().to_string(),
                    e.message.clone(),
                )),
            };
            if let Err(m) = self.apply_local(&task.id, Change::Status(failed)).await {
                tracing::warn!(task = %task.id, error = %m, "cannot mark the task failed");
            }
        }
        told
    }

    /// `GetTask` / `tasks/get`.
    pub(super) async fn get(
        &self,
        who: &Creator,
        scope: Option<&str>,
        req: GetTaskRequest,
    ) -> Result<Task, RpcError> {
        let n = history_length(req.history_length)?;
        let (_, record) = self.load(&req.id, who, scope).await?;
        Ok(record.task.with_history_length(n))
    }

    /// `ListTasks` (v1.0): newest status first, ties by id; the page token
    /// is the position after the last task returned.
    pub(super) async fn list(
        &self,
        who: &Creator,
        scope: Option<&str>,
        req: ListTasksRequest,
    ) -> Result<ListTasksResponse, RpcError> {
        let size = req.page_size.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&size) {
            return Err(RpcError::invalid_params(format!(
                "pageSize must be from 1 to {MAX_PAGE}, not {size}"
            )));
        }
        let n = history_length(req.history_length)?;
        let after = match req.status_timestamp_after.as_deref() {
            None => None,
            Some(t) => Some(model::parse_timestamp(t).ok_or_else(|| {
                RpcError::invalid_params(format!(
                    "statusTimestampAfter {t:?} is not an RFC 3339 time"
                ))
            })?),
        };
        let mut tasks: Vec<Task> = self
            .tasks
            .list()
            .await
            .map_err(meta_error)?
            .into_iter()
            .filter(|r| !r.agent.is_empty() && Self::visible(r, who))
            .filter(|r| scope.is_none_or(|a| a == r.agent))
            .filter_map(|r| decode(&r).map(|d| d.task))
            .filter(|t| req.context_id.as_ref().is_none_or(|c| *c == t.context_id))
            .filter(|t| req.status.is_none_or(|s| s == t.status.state))
            .filter(|t| {
                after.is_none_or(|after| {
                    t.status
                        .timestamp
                        .as_deref()
                        .and_then(model::parse_timestamp)
                        >= Some(after)
                })
            })
            .collect();
        let stamp = |t: &Task| t.status.timestamp.clone().unwrap_or_default();
        tasks.sort_by(|a, b| stamp(b).cmp(&stamp(a)).then_with(|| a.id.cmp(&b.id)));
        let total = tasks.len();
        let start = match req.page_token.as_deref().filter(|t| !t.is_empty()) {
            None => 0,
            Some(t) => t.parse::<usize>().map_err(|_| {
                RpcError::invalid_params(format!("pageToken {t:?} is not one this gateway issued"))
            })?,
        };
        let end = (start + size as usize).min(total);
        let page: Vec<Task> = tasks
            .get(start.min(total)..end)
            .unwrap_or_default()
            .iter()
            .map(|t| {
                let t = t.with_history_length(n);
                if req.include_artifacts.unwrap_or(false) {
                    t
                } else {
                    t.without_artifacts()
                }
            })
            .collect();
        Ok(ListTasksResponse {
            next_page_token: if end < total {
                end.to_string()
            } else {
                String::new()
            },
            page_size: size,
            total_size: i32::try_from(total).unwrap_or(i32::MAX),
            tasks: page,
        })
    }

    /// `CancelTask` / `tasks/cancel`: canceled at once; the agent is told.
    pub(super) async fn cancel(
        &self,
        who: &Creator,
        scope: Option<&str>,
        req: CancelTaskRequest,
    ) -> Result<Task, RpcError> {
        let (rec, record) = self.load(&req.id, who, scope).await?;
        let id = rec.id.as_str();
        if record.task.status.state.is_terminal() {
            return Err(cannot_cancel(id));
        }
        let changed = self
            .change(id, &Change::Cancel, |_| true)
            .await
            .map_err(meta_error)?
            .ok_or_else(|| cannot_cancel(id))?;
        self.notify_or_warn(&changed).await;
        let task = changed.task;
        let data = serde_json::to_vec(&TaskCancel {
            task_id: id.to_string(),
        })
        .unwrap_or_default();
        if let Err(e) = self
            .tell_agent(&rec.agent, &rec, id, events::TYPE_CANCEL, data, false)
            .await
        {
            tracing::warn!(task = %id, error = %e.message, "the agent could not be told of a cancel");
        }
        Ok(task)
    }

    /// `SubscribeToTask` / `tasks/resubscribe`: the task now, and its
    /// changes from now on.
    pub(super) async fn subscribe(
        &self,
        who: &Creator,
        scope: Option<&str>,
        id: &str,
    ) -> Result<Sent, RpcError> {
        // Watching first: a change between the read and the watch is seen
        // twice (in the snapshot and as an event), never missed.
        self.in_use();
        self.live_ready().await;
        let (rec, _) = self.load(id, who, scope).await?;
        let changes = self.live.watch(&rec.id);
        let (_, record) = self.load(&rec.id, who, scope).await?;
        let state = record.task.status.state;
        if state.is_terminal() {
            return Err(RpcError::unsupported_operation(format!(
                "Task {id} is in terminal state: {}",
                state.as_v1()
            )));
        }
        Ok(Sent {
            task: record.task,
            changes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventmesh_a2a::model::{Artifact, Part};

    fn task() -> Task {
        Task {
            id: "t".into(),
            context_id: "c".into(),
            status: TaskStatus {
                state: TaskState::Submitted,
                message: None,
                timestamp: None,
            },
            artifacts: Vec::new(),
            history: Vec::new(),
            metadata: None,
        }
    }

    fn artifact(text: &str) -> Artifact {
        Artifact {
            artifact_id: "a".into(),
            name: None,
            description: None,
            parts: vec![Part::text(text)],
            metadata: None,
            extensions: Vec::new(),
        }
    }

    #[test]
    fn status_updates_fill_history_within_its_bound() {
        let mut t = task();
        for i in 0..3 {
            let ev = apply(
                &mut t,
                &Change::Status(StatusData {
                    state: TaskState::Working,
                    message: Some(Message::agent_text(format!("m{i}"), "x")),
                }),
                2,
            );
            assert!(matches!(ev, StreamResponse::StatusUpdate(_)));
        }
        let ids: Vec<_> = t.history.iter().map(|m| m.message_id.as_str()).collect();
        assert_eq!(ids, ["m1", "m2"]);
        assert_eq!(t.history[1].task_id.as_deref(), Some("t"));
        assert_eq!(t.history[1].context_id.as_deref(), Some("c"));
        assert_eq!(t.status.state, TaskState::Working);
        assert!(t.status.timestamp.is_some());
    }

    #[test]
    fn artifact_chunks_append_and_replace() {
        let mut t = task();
        let chunk = |text: &str, append| {
            Change::Artifact(ArtifactData {
                artifact: artifact(text),
                append,
                last_chunk: false,
            })
        };
        apply(&mut t, &chunk("hello ", false), 10);
        apply(&mut t, &chunk("world", true), 10);
        let texts: Vec<_> = t.artifacts[0]
            .parts
            .iter()
            .map(|p| p.text.clone().unwrap())
            .collect();
        assert_eq!(texts, ["hello ", "world"]);
        apply(&mut t, &chunk("again", false), 10);
        assert_eq!(t.artifacts.len(), 1);
        assert_eq!(t.artifacts[0].parts.len(), 1);
    }
}
