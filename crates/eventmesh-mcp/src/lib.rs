//! The MCP gateway: a Model Context Protocol server (Streamable HTTP, the
//! official `rmcp` SDK) that offers the mesh to MCP clients as tools.
//!
//! ```text
//! MCP client ──POST/GET/DELETE /mcp (Authorization: Bearer …)──▶ traffic port
//!   ──the caller (credential, address, client certificate) and the body
//!     put into the request──▶ rmcp's streamable HTTP service (sessions)
//!   ──tools/list, tools/call, resources/*──▶ Session (handler.rs)
//!      publish, list_topics, read_events, request ──▶ eventmesh_api::Api
//!      find_agents, <agent>__<skill> ──▶ the A2A gateway (call layer)
//!   ◀── results, progress notifications, tools/list_changed (notify.rs)
//! ```
//!
//! Invariants:
//! - Every tool call is made by the HTTP request's own caller and goes
//!   through the operation layer (publish, browse, request) or the A2A
//!   call layer, which run the gate; nothing here reaches the runtime
//!   around them. What a caller lists (topics, agent tools) is what the
//!   gate's ACL lets it use, and another tenant's agents are never shown.
//! - A refusal, a bad argument, or a failed or rejected agent task is a
//!   tool result with `isError: true` and a text saying why; a topic the
//!   ACL refuses reads as refused whether it exists or not.
//! - Nothing is held forever: sessions are bounded in number
//!   (`eventmesh.mcp.sessions.max`) and closed after
//!   `eventmesh.mcp.session.idle.ms` without a message; `read_events`
//!   returns at most 100 events and waits at most 30 s; an agent tool
//!   waits at most the A2A task timeout; a cancelled call cancels its
//!   agent task. While sessions are open, the agent registry is looked at
//!   once per [`TOOLS_CHECK`] for all of them.

mod agent_call;
mod agents;
mod args;
mod handler;
mod mesh;
mod notify;
mod resources;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use eventmesh_a2a_gateway::Gateway;
use eventmesh_api::{Api, Caller};
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

pub use handler::Session;

/// How often the agent registry is looked at while sessions are open, to
/// tell them when their agent tools change.
pub const TOOLS_CHECK: Duration = Duration::from_secs(1);

/// The longest a notification to a session (progress, a tool list
/// change) may wait for room in its stream before it is dropped.
pub const SEND_WAIT: Duration = Duration::from_secs(1);

/// The caller of one HTTP request to `/mcp` and the request's body, as
/// the transport found them; put into the request's extensions before
/// the MCP service sees it.
#[derive(Clone)]
pub struct RequestCaller {
    pub caller: Caller,
    /// The body as received (the gate sizes, verifies and audits it).
    pub raw: Bytes,
}

/// The MCP gateway's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Open sessions at most.
    pub max_sessions: usize,
    /// A session without a message for this long is closed.
    pub session_idle: Duration,
    /// The longest an agent tool waits for its task (the A2A task timeout,
    /// with a margin).
    pub task_timeout: Duration,
    /// The largest request body.
    pub max_body_bytes: usize,
}

/// What every session shares.
pub struct Mcp {
    api: Api,
    a2a: Option<Arc<Gateway>>,
    settings: Settings,
    sessions: notify::Sessions,
    manager: Arc<LocalSessionManager>,
}

/// The HTTP service of `/mcp`.
pub type Service = StreamableHttpService<Session, LocalSessionManager>;

impl Mcp {
    pub fn new(api: Api, a2a: Option<Arc<Gateway>>, settings: Settings) -> Arc<Mcp> {
        let mut session_config = SessionConfig::default();
        session_config.keep_alive = Some(settings.session_idle);
        let mut manager = LocalSessionManager::default();
        manager.session_config = session_config;
        Arc::new(Mcp {
            api,
            a2a,
            settings,
            sessions: notify::Sessions::default(),
            manager: Arc::new(manager),
        })
    }

    /// The streamable HTTP service serving `/mcp`: one [`Session`] per MCP
    /// session. The `Host` header is not checked (the gate decides who
    /// may call); it ends its streams when the server shuts down.
    pub fn service(self: &Arc<Self>) -> Service {
        let config = StreamableHttpServerConfig::default()
            .disable_allowed_hosts()
            .with_cancellation_token(self.api.shutdown().child_token())
            .with_max_request_body_bytes(self.settings.max_body_bytes);
        let mcp = self.clone();
        StreamableHttpService::new(
            move || Ok(Session::new(mcp.clone())),
            self.manager.clone(),
            config,
        )
    }

    /// Whether another session may open.
    pub async fn has_room(&self) -> bool {
        self.manager.sessions.read().await.len() < self.settings.max_sessions
    }

    pub fn api(&self) -> &Api {
        &self.api
    }
}
