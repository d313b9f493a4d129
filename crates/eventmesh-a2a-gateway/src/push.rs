//! Push notifications: a client's webhooks for a task, told of each change.
//!
//! A client registers webhooks on a task (`CreateTaskPushNotificationConfig`
//! / `tasks/pushNotificationConfig/set`, or with its send); they are kept in
//! the task's record, so every instance sees them and they go with the
//! task. Each change of a task with webhooks queues one event per webhook
//! on [`PUSH_TOPIC`] before the change counts as handled (an agent's update
//! is acknowledged after it), carrying the body to POST: the v1.0
//! `StreamResponse` of the change, or the whole task for a webhook
//! registered in v0.3, as each version's clients expect.
//!
//! The gateway reads that topic as a pull client of its own group
//! ([`CLIENT`]) and POSTs each notification through the runtime's webhook
//! client (its SSRF guard, TLS settings and timeout) with the config's
//! `X-A2A-Notification-Token` and `Authorization: <scheme> <credentials>`.
//! A 2xx acknowledges it; a failure gives it back, so it is retried after
//! the delivery backoff and dead-lettered after
//! `eventmesh.delivery.max.attempts` like any delivery. The token and the
//! credentials stay in the task's record: the queued event names the config,
//! which is read when the POST is made (a config deleted meanwhile sends
//! nothing).
//!
//! Order: a task's notifications share its partition and are queued in
//! the order of its changes; a retried one may arrive after a later one.
//! Receivers deduplicate with the `eventmesh-delivery-id` header, the same
//! for every attempt of one notification.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use eventmesh_a2a::events::{EXT_PUSH, EXT_TASK, PUSH_TOPIC, TYPE_PUSH};
use eventmesh_a2a::model::{
    now_timestamp, ListTaskPushNotificationConfigsResponse, StreamResponse, Task,
    TaskPushNotificationConfig,
};
use eventmesh_a2a::rpc::RpcError;
use eventmesh_core::event::{Data, ExtValue, PARTITION_KEY};
use eventmesh_core::CloudEvent;
use eventmesh_runtime::{Creator, Settle};
use eventmesh_state::Updated;
use serde::{Deserialize, Serialize};

use super::{meta_error, now_ms, Gateway, Record};

/// The gateway's client id and group on [`PUSH_TOPIC`].
pub const CLIENT: &str = eventmesh_api::RESERVED_CLIENTS[1];
/// Webhooks one task may have.
pub const MAX_PER_TASK: usize = 16;
/// Notifications being POSTed at once.
const CONCURRENCY: usize = 64;
const BATCH: usize = 100;

/// A webhook of a task, with the protocol version it was registered in
/// (which decides the body it is sent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushTarget {
    #[serde(flatten)]
    pub config: TaskPushNotificationConfig,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub v03: bool,
}

impl PushTarget {
    fn id(&self) -> &str {
        self.config.id.as_deref().unwrap_or_default()
    }

    /// The body POSTed for `event`, which left the task as `task`.
    fn body(&self, task: &Task, event: &StreamResponse) -> Vec<u8> {
        let value = if self.v03 {
            eventmesh_a2a::v03::task_to_v03(task)
        } else {
            serde_json::to_value(event).unwrap_or_default()
        };
        serde_json::to_vec(&value).unwrap_or_default()
    }

    /// The headers of a POST: the config's token and credentials.
    fn headers(&self) -> Vec<(String, String)> {
        let mut h = vec![("content-type".to_string(), "application/json".to_string())];
        if let Some(t) = self.config.token.as_deref().filter(|t| !t.is_empty()) {
            h.push(("x-a2a-notification-token".into(), t.to_string()));
        }
        if let Some(a) = &self.config.authentication {
            if let Some(c) = a.credentials.as_deref().filter(|c| !c.is_empty()) {
                if !a.scheme.is_empty() {
                    h.push(("authorization".into(), format!("{} {c}", a.scheme)));
                }
            }
        }
        h
    }
}

fn no_config(task: &str, id: &str) -> RpcError {
    let mut e = RpcError::task_not_found(task);
    e.message = format!("Task {task} has no push notification config {id:?}");
    e
}

impl Gateway {
    /// Checks a webhook config for task `task`: a valid `http(s)` URL the
    /// SSRF guard allows; its id defaults to the task's.
    pub(super) async fn push_target(
        &self,
        task: &str,
        mut config: TaskPushNotificationConfig,
        v03: bool,
    ) -> Result<PushTarget, RpcError> {
        self.api
            .check_webhook_target(&config.url)
            .await
            .map_err(|e| RpcError::invalid_params(e.message).with_meta("error", e.code))?;
        if config.id.as_deref().is_none_or(str::is_empty) {
            config.id = Some(task.to_string());
        }
        config.task_id = Some(task.to_string());
        config.tenant = None;
        Ok(PushTarget { config, v03 })
    }

    /// Adds `target` to `targets`, replacing the config of the same id.
    pub(super) fn add_target(
        targets: &mut Vec<PushTarget>,
        target: PushTarget,
    ) -> Result<(), RpcError> {
        if let Some(t) = targets.iter_mut().find(|t| t.id() == target.id()) {
            *t = target;
        } else if targets.len() >= MAX_PER_TASK {
            return Err(RpcError::invalid_params(format!(
                "a task has at most {MAX_PER_TASK} push notification configs"
            )));
        } else {
            targets.push(target);
        }
        Ok(())
    }

    /// Edits the webhooks of task `id` (as `who` may see it, on the endpoint
    /// of `scope`) with `edit`; what `edit` answered. A task that has ended
    /// keeps its webhooks editable: a deleted one gets no notification
    /// still queued for it.
    async fn edit_targets<T>(
        &self,
        who: &Creator,
        scope: Option<&str>,
        id: &str,
        mut edit: impl FnMut(&mut Vec<PushTarget>) -> Result<T, RpcError>,
    ) -> Result<T, RpcError> {
        let (rec, _) = self.load(id, who, scope).await?;
        let mut answer = None;
        let updated = self
            .tasks
            .update_payload(&rec.id, now_ms(), |payload| {
                let Ok(mut record) = serde_json::from_value::<Record>(payload.clone()) else {
                    return false;
                };
                let before = record.push.clone();
                let result = edit(&mut record.push);
                let changed = result.is_ok() && record.push != before;
                answer = Some(result);
                if !changed {
                    return false;
                }
                // Not a change of the task: waiters are not offered it again.
                record.last = None;
                match serde_json::to_value(&record) {
                    Ok(v) => {
                        *payload = v;
                        true
                    }
                    Err(_) => false,
                }
            })
            .await
            .map_err(meta_error)?;
        match (updated, answer) {
            (Updated::Absent, _) | (_, None) => Err(RpcError::task_not_found(id)),
            (_, Some(result)) => result,
        }
    }

    /// `CreateTaskPushNotificationConfig` / `tasks/pushNotificationConfig/set`.
    pub(super) async fn set_push(
        &self,
        who: &Creator,
        scope: Option<&str>,
        config: TaskPushNotificationConfig,
        v03: bool,
    ) -> Result<TaskPushNotificationConfig, RpcError> {
        let task = config
            .task_id
            .clone()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| RpcError::invalid_params("taskId: missing"))?;
        let (_, record) = self.load(&task, who, scope).await?;
        let state = record.task.status.state;
        if state.is_terminal() {
            return Err(RpcError::unsupported_operation(format!(
                "Task {task} is in terminal state {}: it sends no more notifications",
                state.as_v1()
            )));
        }
        let target = self.push_target(&task, config, v03).await?;
        let saved = target.config.clone();
        self.edit_targets(who, scope, &task, |targets| {
            Self::add_target(targets, target.clone())
        })
        .await?;
        Ok(saved)
    }

    /// `GetTaskPushNotificationConfig` / `tasks/pushNotificationConfig/get`;
    /// without an id (v0.3), the task's first config.
    pub(super) async fn get_push(
        &self,
        who: &Creator,
        scope: Option<&str>,
        task: &str,
        id: Option<&str>,
    ) -> Result<TaskPushNotificationConfig, RpcError> {
        let (_, record) = self.load(task, who, scope).await?;
        let found = match id {
            Some(id) => record.push.into_iter().find(|t| t.id() == id),
            None => record.push.into_iter().next(),
        };
        found
            .map(|t| t.config)
            .ok_or_else(|| no_config(task, id.unwrap_or_default()))
    }

    /// `ListTaskPushNotificationConfigs` / `tasks/pushNotificationConfig/list`:
    /// in pages of `page_size` (1 to [`MAX_PER_TASK`]; all by default) from
    /// `page_token`, the position a previous page said to go on from.
    pub(super) async fn list_push(
        &self,
        who: &Creator,
        scope: Option<&str>,
        task: &str,
        page_size: Option<i32>,
        page_token: Option<&str>,
    ) -> Result<ListTaskPushNotificationConfigsResponse, RpcError> {
        let size = match page_size {
            None => MAX_PER_TASK,
            Some(n) if (1..=MAX_PER_TASK as i32).contains(&n) => n as usize,
            Some(n) => {
                return Err(RpcError::invalid_params(format!(
                    "pageSize must be from 1 to {MAX_PER_TASK}, not {n}"
                )))
            }
        };
        let start = match page_token.filter(|t| !t.is_empty()) {
            None => 0,
            Some(t) => t.parse::<usize>().map_err(|_| {
                RpcError::invalid_params(format!("pageToken {t:?} is not one this gateway issued"))
            })?,
        };
        let (_, record) = self.load(task, who, scope).await?;
        let total = record.push.len();
        let end = start.saturating_add(size).min(total);
        Ok(ListTaskPushNotificationConfigsResponse {
            configs: record
                .push
                .into_iter()
                .skip(start)
                .take(end.saturating_sub(start))
                .map(|t| t.config)
                .collect(),
            next_page_token: (end < total).then(|| end.to_string()),
        })
    }

    /// `DeleteTaskPushNotificationConfig` / `tasks/pushNotificationConfig/delete`:
    /// idempotent, as the SDK's server is.
    pub(super) async fn delete_push(
        &self,
        who: &Creator,
        scope: Option<&str>,
        task: &str,
        id: &str,
    ) -> Result<(), RpcError> {
        self.edit_targets(who, scope, task, |targets| {
            targets.retain(|t| t.id() != id);
            Ok(())
        })
        .await
    }

    /// Queues the notifications of one change of `task` (its `event`) for
    /// each of `targets`, and waits until they are durable.
    pub(super) async fn notify(
        &self,
        task: &Task,
        event: &StreamResponse,
        targets: &[PushTarget],
    ) -> Result<(), String> {
        if targets.is_empty() {
            return Ok(());
        }
        self.in_use();
        let batch: Vec<CloudEvent> = targets
            .iter()
            .map(|t| {
                let mut ev = CloudEvent {
                    id: uuid::Uuid::now_v7().to_string(),
                    source: "/a2a/gateway".into(),
                    ty: TYPE_PUSH.into(),
                    datacontenttype: Some("application/json".into()),
                    subject: Some(task.id.clone()),
                    time: Some(now_timestamp()),
                    data: Data::Json(Bytes::from(t.body(task, event))),
                    ..CloudEvent::default()
                };
                ev.set_extension(EXT_TASK, ExtValue::Str(task.id.clone()));
                ev.set_extension(EXT_PUSH, ExtValue::Str(t.id().to_string()));
                ev.set_extension(PARTITION_KEY, ExtValue::Str(task.id.clone()));
                ev
            })
            .collect();
        self.api
            .publish(&self.system, Some(PUSH_TOPIC.to_string()), batch, b"")
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// POSTs one queued notification of `task` to its config `id`;
    /// whether to acknowledge it.
    async fn post_notification(&self, ev: &CloudEvent, task: &str, id: &str) -> Settle {
        let target = match self.tasks.get(task).await {
            Ok(rec) => rec
                .as_ref()
                .and_then(super::ops::decode)
                .and_then(|r| r.push.into_iter().find(|t| t.id() == id)),
            Err(e) => {
                tracing::warn!(%task, error = %e, "A2A push notification waits for the meta store");
                return Settle::Nack;
            }
        };
        // The task or its config is gone: nobody wants it any more.
        let Some(target) = target else {
            return Settle::Ack;
        };
        let body = ev.data.as_bytes().to_vec();
        let sent = self
            .api
            .post_webhook(&target.config.url, &ev.id, &target.headers(), body)
            .await;
        match sent {
            Ok(()) => Settle::Ack,
            Err(reason) => {
                tracing::warn!(%task, config = %id, url = %target.config.url, %reason, "A2A push notification failed; retried after the backoff");
                Settle::Nack
            }
        }
    }
}

/// A queued notification: the event, its task and config.
fn parse(json: &[u8]) -> Result<(CloudEvent, String, String), String> {
    let ev = CloudEvent::from_json_slice(json).map_err(|e| e.to_string())?;
    let text = |name| ev.extension(name).map(ExtValue::to_text);
    match (text(EXT_TASK), text(EXT_PUSH)) {
        (Some(task), Some(id)) => Ok((ev, task, id)),
        _ => Err(format!("event {} names no task or config", ev.id)),
    }
}

/// Subscribes the gateway to [`PUSH_TOPIC`] and POSTs what arrives, up to
/// [`CONCURRENCY`] at once, until the runtime shuts down. One task's
/// notifications are POSTed one after the other, in their order.
pub async fn follow(gw: Arc<Gateway>) {
    let shutdown = gw.api.shutdown().clone();
    let permits = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    // The last notification started for each task: the next one waits for it.
    let mut last: HashMap<String, tokio::task::JoinHandle<()>> = HashMap::new();
    loop {
        let Some(guard) = super::updates::attach(&gw, CLIENT, PUSH_TOPIC).await else {
            return;
        };
        while !guard.is_closed() {
            let got = tokio::select! {
                got = guard.next(BATCH, Duration::from_secs(5)) => got,
                _ = shutdown.cancelled() => return,
            };
            last.retain(|_, h| !h.is_finished());
            for d in got {
                let (ev, task, id) = match parse(&d.event_json) {
                    Ok(p) => p,
                    Err(reason) => {
                        tracing::warn!(%reason, "invalid A2A push notification dropped");
                        gw.settle(&d.delivery_id, Settle::Ack).await;
                        continue;
                    }
                };
                let permit = tokio::select! {
                    p = permits.clone().acquire_owned() => p.expect("never closed"),
                    _ = shutdown.cancelled() => return,
                };
                let before = last.remove(&task);
                let gw = gw.clone();
                let key = task.clone();
                let handle = tokio::spawn(async move {
                    if let Some(before) = before {
                        let _ = before.await;
                    }
                    let how = gw.post_notification(&ev, &task, &id).await;
                    gw.settle(&d.delivery_id, how).await;
                    drop(permit);
                });
                last.insert(key, handle);
            }
        }
        if shutdown.is_cancelled() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventmesh_a2a::model::{AuthenticationInfo, TaskState, TaskStatus, TaskStatusUpdateEvent};

    fn target(v03: bool) -> PushTarget {
        PushTarget {
            config: TaskPushNotificationConfig {
                id: Some("c1".into()),
                task_id: Some("t".into()),
                url: "http://hook/".into(),
                token: Some("tok".into()),
                authentication: Some(AuthenticationInfo {
                    scheme: "Bearer".into(),
                    credentials: Some("cred".into()),
                }),
                ..Default::default()
            },
            v03,
        }
    }

    fn task() -> Task {
        Task {
            id: "t".into(),
            context_id: "c".into(),
            status: TaskStatus {
                state: TaskState::Working,
                message: None,
                timestamp: None,
            },
            artifacts: Vec::new(),
            history: Vec::new(),
            metadata: None,
        }
    }

    #[test]
    fn a_webhook_gets_its_version_s_body_and_its_credentials() {
        let t = task();
        let ev = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: "t".into(),
            context_id: "c".into(),
            status: t.status.clone(),
            metadata: None,
        });
        let v1: serde_json::Value = serde_json::from_slice(&target(false).body(&t, &ev)).unwrap();
        assert_eq!(
            v1,
            serde_json::json!({"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}})
        );
        let v03: serde_json::Value = serde_json::from_slice(&target(true).body(&t, &ev)).unwrap();
        assert_eq!(
            v03,
            serde_json::json!({"kind": "task", "id": "t", "contextId": "c", "status": {"state": "working"}})
        );
        assert_eq!(
            target(false).headers(),
            [
                ("content-type".to_string(), "application/json".to_string()),
                ("x-a2a-notification-token".into(), "tok".into()),
                ("authorization".into(), "Bearer cred".into()),
            ]
        );
    }

    #[test]
    fn configs_replace_by_id_up_to_the_limit() {
        let mut targets = Vec::new();
        Gateway::add_target(&mut targets, target(false)).unwrap();
        let mut again = target(true);
        again.config.url = "http://other/".into();
        Gateway::add_target(&mut targets, again.clone()).unwrap();
        assert_eq!(targets, [again]);
        for i in 1..MAX_PER_TASK {
            let mut t = target(false);
            t.config.id = Some(format!("n{i}"));
            Gateway::add_target(&mut targets, t).unwrap();
        }
        let mut one_more = target(false);
        one_more.config.id = Some("over".into());
        let err = Gateway::add_target(&mut targets, one_more).unwrap_err();
        assert_eq!(err.code, eventmesh_a2a::rpc::INVALID_PARAMS);
        assert_eq!(targets.len(), MAX_PER_TASK);
    }

    #[test]
    fn records_keep_targets_with_their_version() {
        let rec = Record {
            task: task(),
            push: vec![target(true)],
            last: None,
        };
        let json = serde_json::to_value(&rec).unwrap();
        assert_eq!(json["push"][0]["url"], "http://hook/");
        assert_eq!(json["push"][0]["v03"], true);
        let back: Record = serde_json::from_value(json).unwrap();
        assert_eq!(back.push, rec.push);
    }
}
