//! The operator's view of the gateway's tasks (`GET /admin/a2a/tasks`):
//! every task's state, agent and last change, newest first, and how many
//! tasks are in each state. Reads the task store as it is; nothing here
//! changes a task.

use std::collections::BTreeMap;

use serde::Serialize;

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

impl Gateway {
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
