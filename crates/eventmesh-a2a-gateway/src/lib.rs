//! The A2A gateway: agents attached to the mesh, reached by any A2A client
//! (protocol v1.0 and v0.3, JSON-RPC binding).
//!
//! ```text
//! A2A client ──JSON-RPC──▶ /a2a/agents/{id} ──gate (A2A, agent id)──▶ Gateway
//!    Gateway ──create (first write wins)──▶ TaskStore (meta)
//!    Gateway ──a2a.task.message──▶ topic a2a.agent.<id> ──any transport──▶ agent
//!    agent ──a2a.task.status / a2a.task.artifact──▶ topic a2a.updates
//!    a2a.updates ──internal consumer──▶ Gateway: CAS into the TaskStore,
//!       then to the streams and blocking sends waiting here (live.rs)
//!       and, for a task with webhooks, one event each on a2a.push
//!    a2a.push ──internal consumer──▶ POST to the client's webhook (push.rs)
//! ```
//!
//! Invariants:
//! - A task exists in the TaskStore before its first message is published
//!   to the agent; a send whose task could not be written publishes
//!   nothing (`meta_unavailable`), and a task whose message could not be
//!   published is failed.
//! - Every change of a task is a compare-and-swap that bumps its version;
//!   a terminal state is final. An agent's update carries the task's secret
//!   token and a sequence number: a wrong token is dropped, an update at or
//!   below the last one applied is a repeat and changes nothing, so the
//!   at-least-once delivery of `a2a.updates` applies each update once.
//! - An update is acknowledged only once applied (or found invalid); a
//!   meta failure gives it back for a later retry.
//! - Tasks are visible to their tenant only (everyone's when the gate is
//!   off); another tenant's task, and an agent the ACL hides, are answered
//!   exactly like unknown ones. A task id a client chooses (v0.1
//!   `tasks/send`) is kept under its tenant (`<id>@<tenant>`), so tenants'
//!   ids never meet.
//! - The gateway reaches the runtime only through the operation layer, as
//!   the system principal `system:a2a` (audited, traced, counted); a send
//!   counts one event against the calling client's tenant publish quota
//!   when the gate admits it.

pub mod admin;
mod agents;
pub mod call;
mod live;
mod ops;
pub mod push;
pub mod registry;
pub mod rpc;
mod updates;

use std::sync::Arc;
use std::time::Duration;

use eventmesh_a2a::model;
use eventmesh_a2a::rpc::RpcError;
use eventmesh_core::config::A2aConfig;
use eventmesh_meta::MetaStore;
use eventmesh_runtime::Creator;
use eventmesh_state::{SessionRegistry, StateError, TaskStore};
use serde::{Deserialize, Serialize};

use eventmesh_api::{Api, Caller, System};

/// What the TaskStore keeps of an A2A task besides the store's own fields:
/// the task as the protocol shows it, and its clients' webhooks.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    task: model::Task,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    push: Vec<push::PushTarget>,
    /// The event of the task's last change, for the waiters of every
    /// instance (live.rs); `None` when the last write changed no more than
    /// the webhooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last: Option<model::StreamResponse>,
}

pub struct Gateway {
    api: Api,
    /// The gateway's own caller (`system:a2a`): its messages to agents, its
    /// push notifications and its consumers go through the operation
    /// layer as this principal.
    system: Caller,
    tasks: TaskStore,
    agents: SessionRegistry,
    live: live::Live,
    /// True once the watch feeding `live` is established.
    watching: tokio::sync::watch::Sender<bool>,
    /// Where the sweep's walk through the tasks goes on.
    sweep_cursor: tokio::sync::Mutex<Option<String>>,
    cfg: A2aConfig,
    /// This instance's name in agent registrations.
    instance: String,
    /// The consumer of agents' updates and the sweeper run (from the
    /// first use of the gateway on, or from boot when it was used before).
    started: std::sync::Once,
    me: std::sync::Weak<Gateway>,
}

pub(crate) use eventmesh_core::time::now_ms;

/// The answer for an agent id nobody registered (or whose registration
/// expired).
pub fn unknown_agent(id: &str) -> eventmesh_api::ApiError {
    eventmesh_api::ApiError::not_found("unknown_agent", format!("no agent {id:?} is registered"))
}

/// A meta store failure, as the A2A caller sees it.
fn meta_error(e: StateError) -> RpcError {
    match e {
        StateError::Meta(m) => RpcError::internal(format!("the meta store is unavailable: {m}"))
            .with_meta("error", "meta_unavailable"),
        other => RpcError::internal(other.to_string()).with_meta("error", "state_error"),
    }
}

fn store_state(s: model::TaskState) -> eventmesh_state::TaskState {
    use eventmesh_state::TaskState as S;
    use model::TaskState as M;
    match s {
        M::Unspecified | M::Submitted => S::Submitted,
        M::Working => S::Working,
        M::InputRequired => S::InputRequired,
        M::AuthRequired => S::AuthRequired,
        M::Completed => S::Completed,
        M::Failed => S::Failed,
        M::Canceled => S::Canceled,
        M::Rejected => S::Rejected,
    }
}

impl Gateway {
    pub fn new(api: Api, meta: Arc<dyn MetaStore>, cfg: A2aConfig) -> Arc<Gateway> {
        Arc::new_cyclic(|me| Gateway {
            api,
            system: Caller::system(System::A2A),
            tasks: TaskStore::new(meta.clone()),
            agents: SessionRegistry::new(meta),
            live: live::Live::default(),
            watching: tokio::sync::watch::channel(false).0,
            sweep_cursor: tokio::sync::Mutex::new(None),
            cfg,
            instance: uuid::Uuid::now_v7().simple().to_string(),
            started: std::sync::Once::new(),
            me: me.clone(),
        })
    }

    /// At boot: resumes the gateway's work when it was in use before (its
    /// subscription to `a2a.updates` exists). An instance whose gateway is
    /// never used runs nothing for it and shows no topic or consumer of it.
    pub async fn start(self: &Arc<Self>) {
        let used = self
            .api
            .admin()
            .subscriptions(None)
            .await
            .iter()
            .any(|s| s.subscription.group == updates::CLIENT);
        if used {
            self.in_use();
        }
    }

    /// Starts, once, the consumers of agents' updates and of push
    /// notifications, and the sweeper of timed-out tasks, expired agents
    /// and old tasks.
    pub(crate) fn in_use(&self) {
        self.started.call_once(|| {
            if let Some(gw) = self.me.upgrade() {
                tokio::spawn(live::follow(self.me.clone(), self.watching.clone()));
                tokio::spawn(updates::follow(gw.clone()));
                tokio::spawn(push::follow(gw));
                tokio::spawn(sweep(self.me.clone()));
            }
        });
    }

    pub fn api(&self) -> &Api {
        &self.api
    }

    fn visible(rec: &eventmesh_state::Task, who: &Creator) -> bool {
        who.tenant.is_none() || rec.tenant == who.tenant
    }
}

/// Fails tasks whose agent went quiet, removes finished tasks past their
/// retention and agents past their time to live, until the gateway goes.
async fn sweep(gw: std::sync::Weak<Gateway>) {
    let period = match gw.upgrade() {
        Some(g) => {
            (g.cfg.task_timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(5))
        }
        None => return,
    };
    loop {
        tokio::time::sleep(period).await;
        let Some(gw) = gw.upgrade() else { return };
        if gw.api.shutdown().is_cancelled() {
            return;
        }
        if let Err(e) = gw.sweep_once().await {
            tracing::warn!(error = %e, "A2A sweep failed; trying again later");
        }
    }
}

/// Tasks one sweep reads at most (in pages of [`SWEEP_PAGE`]): a sweep's
/// work stays bounded however many tasks are kept; with more, each sweep
/// goes on where the last one stopped.
const SWEEP_MAX: usize = 5_000;
const SWEEP_PAGE: usize = 500;

impl Gateway {
    /// Reads the next tasks of the sweep's walk through every task, up to
    /// [`SWEEP_MAX`], from where the last sweep stopped (starting over
    /// after the last task).
    async fn sweep_batch(&self) -> Result<Vec<eventmesh_state::Task>, StateError> {
        let mut cursor = self.sweep_cursor.lock().await;
        let mut out = Vec::new();
        while out.len() < SWEEP_MAX {
            let page = self.tasks.page(cursor.as_deref(), SWEEP_PAGE).await?;
            let short = page.len() < SWEEP_PAGE;
            *cursor = if short {
                None
            } else {
                page.last().map(|t| t.id.clone())
            };
            out.extend(page);
            if short {
                break;
            }
        }
        Ok(out)
    }

    async fn sweep_once(&self) -> Result<(), StateError> {
        let now = now_ms();
        let timeout = self.cfg.task_timeout.as_millis() as u64;
        let retention = self.cfg.task_retention.as_millis() as u64;
        for rec in self.sweep_batch().await? {
            if rec.agent.is_empty() {
                continue;
            }
            let idle = now.saturating_sub(rec.updated_ms);
            if rec.state.is_terminal() {
                if retention > 0 && idle > retention {
                    self.tasks.remove(&rec.id).await?;
                }
                continue;
            }
            let waiting_on_agent = matches!(
                rec.state,
                eventmesh_state::TaskState::Submitted | eventmesh_state::TaskState::Working
            );
            if waiting_on_agent && idle > timeout {
                let text = format!("the agent sent no update for {timeout} ms");
                let status = eventmesh_a2a::events::StatusData {
                    state: model::TaskState::Failed,
                    message: Some(model::Message::agent_text(
                        uuid::Uuid::now_v7().to_string(),
                        text,
                    )),
                };
                self.apply_local(&rec.id, ops::Change::Status(status))
                    .await?;
            }
        }
        for agent in self.agents.list_agents().await? {
            if agent.card.is_some() && agent.expired(now) {
                tracing::info!(agent = %agent.id, "A2A agent expired: no heartbeat");
                self.agents.remove_agent(&agent.id).await?;
            }
        }
        self.live.sweep();
        Ok(())
    }
}
