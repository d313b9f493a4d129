//! The operator's view of the gateway's tasks (`GET /admin/a2a/tasks`):
//! every task's state, agent and last change, newest first, and how many
//! tasks are in each state; one task in full (`GET /admin/a2a/tasks/{id}`);
//! and the operator's cancel (`POST /admin/a2a/tasks/{id}/cancel`), which
//! is the A2A `CancelTask` of every tenant's task (the agent is told).
//! Only the cancel changes a task, through the one path clients' cancels
//! take.

use std::collections::BTreeMap;

use serde::Serialize;

use eventmesh_a2a::model::{self, CancelTaskRequest};
use eventmesh_a2a::rpc::{RpcError, TASK_NOT_CANCELABLE, TASK_NOT_FOUND};
use eventmesh_api::{ApiError, StatusCode};
use eventmesh_runtime::Creator;

use super::ops::decode;
use super::{meta_error, Gateway};

/// One task in the admin view.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRow {
    pub id: String,
    pub context_id: String,
    pub agent: String,
    /// As A2A names it (`TASK_STATE_WORKING`, ...).
    pub state: String,
    pub updated_ms: u64,
}

/// `GET /admin/a2a/tasks`.
#[derive(Debug, Clone, Serialize)]
pub struct TasksView {
    /// The newest `limit`, by last change.
    pub tasks: Vec<TaskRow>,
    /// Every task, counted by state.
    pub counts: BTreeMap<String, usize>,
    pub total: usize,
}

/// `GET /admin/a2a/tasks/{id}`: a task as A2A shows it, with the agent
/// working on it and the tenant that created it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskDetail {
    pub agent: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    pub updated_ms: u64,
    pub task: model::Task,
}

/// The operator sees every tenant's tasks.
fn operator() -> Creator {
    Creator::new(None, Some("admin".to_string()))
}

/// An A2A error as the admin API answers it.
fn admin_error(id: &str, e: RpcError) -> ApiError {
    match e.code {
        TASK_NOT_FOUND => ApiError::not_found("unknown_task", format!("no A2A task {id:?}")),
        TASK_NOT_CANCELABLE => {
            ApiError::new(StatusCode::CONFLICT, "task_not_cancelable", e.message)
        }
        _ if e.metadata.get("error").and_then(|v| v.as_str()) == Some("meta_unavailable") => {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "meta_unavailable",
                e.message,
            )
        }
        _ => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.message),
    }
}

impl Gateway {
    /// Task `id` (as `GET /admin/a2a/tasks` lists it), whatever its tenant.
    pub async fn admin_task(&self, id: &str) -> Result<TaskDetail, ApiError> {
        let (rec, record) = self
            .load(id, &operator(), None)
            .await
            .map_err(|e| admin_error(id, e))?;
        Ok(TaskDetail {
            agent: rec.agent,
            tenant: rec.tenant,
            updated_ms: rec.updated_ms,
            task: record.task,
        })
    }

    /// Cancels task `id` as its client's `CancelTask` would: at once, the
    /// agent told, the task's webhooks notified. `409
    /// task_not_cancelable` once it has ended.
    pub async fn admin_cancel_task(&self, id: &str) -> Result<TaskDetail, ApiError> {
        let req = CancelTaskRequest {
            tenant: None,
            id: id.to_string(),
            metadata: None,
        };
        self.cancel(&operator(), None, req)
            .await
            .map_err(|e| admin_error(id, e))?;
        tracing::info!(task = %id, "A2A task canceled through the admin API");
        self.admin_task(id).await
    }

    /// The newest `limit` tasks and the count of every state.
    pub async fn admin_tasks(&self, limit: usize) -> Result<TasksView, eventmesh_api::ApiError> {
        let records = self.tasks.list().await.map_err(|e| {
            eventmesh_api::ApiError::new(
                eventmesh_api::StatusCode::SERVICE_UNAVAILABLE,
                "meta_unavailable",
                meta_error(e).message,
            )
        })?;
        let mut rows: Vec<TaskRow> = records
            .iter()
            .filter(|r| !r.agent.is_empty())
            .filter_map(|r| {
                let rec = decode(r)?;
                let state = serde_json::to_value(rec.task.status.state)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                Some(TaskRow {
                    id: rec.task.id.clone(),
                    context_id: rec.task.context_id.clone(),
                    agent: r.agent.clone(),
                    state,
                    updated_ms: r.updated_ms,
                })
            })
            .collect();
        let mut counts = BTreeMap::new();
        for row in &rows {
            *counts.entry(row.state.clone()).or_insert(0) += 1;
        }
        let total = rows.len();
        rows.sort_by(|a, b| {
            b.updated_ms
                .cmp(&a.updated_ms)
                .then_with(|| a.id.cmp(&b.id))
        });
        rows.truncate(limit);
        Ok(TasksView {
            tasks: rows,
            counts,
            total,
        })
    }
}
