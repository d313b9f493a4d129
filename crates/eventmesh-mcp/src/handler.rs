//! One MCP session's handler: what the server says it offers, and the
//! `tools/*` and `resources/*` requests, each decoded and handed to the
//! tool that serves it as the HTTP request's own caller.
//!
//! The caller of every request is the one the transport put into the
//! HTTP request ([`RequestCaller`]); a request without one is refused
//! (it did not come through `/mcp`).

use std::sync::{Arc, OnceLock};

use rmcp::model::Extensions;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, InitializeRequestParams,
    InitializeResult, JsonObject, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};

use crate::args::{Args, ToolError};
use crate::notify::Watched;
use crate::{agent_call, agents, mesh, resources, Mcp, RequestCaller};

const INSTRUCTIONS: &str = "Tools of the eventmesh event mesh: publish events to topics, list \
topics, read a topic's events without consuming them, make request-reply calls, and find and call \
the A2A agents attached to the mesh (one tool per agent skill, named <agent>__<skill>).";

/// The handler of one session (and of the requests the transport asks
/// about outside sessions).
pub struct Session {
    mcp: Arc<Mcp>,
    /// Set once the session is initialized.
    watched: OnceLock<Arc<Watched>>,
}

/// The caller the transport put into the HTTP request.
fn caller_of(extensions: &Extensions) -> Result<RequestCaller, McpError> {
    extensions
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.extensions.get::<RequestCaller>())
        .cloned()
        .ok_or_else(|| McpError::internal_error("the request has no caller", None))
}

impl Session {
    pub(crate) fn new(mcp: Arc<Mcp>) -> Session {
        Session {
            mcp,
            watched: OnceLock::new(),
        }
    }

    async fn call(
        &self,
        name: &str,
        rc: &RequestCaller,
        args: &Args<'_>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResult, CallError> {
        let api = &self.mcp.api;
        let done = match name {
            mesh::PUBLISH => mesh::publish(api, rc, args).await,
            mesh::LIST_TOPICS => mesh::list_topics(api, rc, args).await,
            mesh::READ_EVENTS => mesh::read_events(api, rc, args).await,
            mesh::REQUEST => mesh::request(api, &rc.caller, &rc.raw, args).await,
            agents::FIND_AGENTS => agents::find(self.mcp.a2a.as_ref(), rc, args).await,
            _ => {
                let Some(gw) = &self.mcp.a2a else {
                    return Err(CallError::Unknown);
                };
                let named = |seen: &[eventmesh_state::Agent]| {
                    agents::tools_of(seen)
                        .into_iter()
                        .find(|t| t.tool.name == name)
                };
                // The watcher's last read of the registry, else a fresh one
                // (an agent that has just registered).
                let recent = self.mcp.sessions.recent_agents();
                let tool = match recent.and_then(|all| named(&agents::visible_of(api, &all, rc))) {
                    Some(tool) => tool,
                    None => {
                        named(&agents::visible(Some(gw), rc).await?).ok_or(CallError::Unknown)?
                    }
                };
                let limit = self.mcp.settings.task_timeout;
                agent_call::call_skill(gw, rc, &tool, args, ctx, limit).await
            }
        };
        Ok(done.unwrap_or_else(ToolError::into_result))
    }
}

/// Why a call found no tool to run.
enum CallError {
    /// No tool of this name that the caller may use (one it may not use is
    /// not told apart from one that does not exist).
    Unknown,
    Failed(ToolError),
}

impl From<ToolError> for CallError {
    fn from(e: ToolError) -> Self {
        CallError::Failed(e)
    }
}

impl ServerHandler for Session {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_resources()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        InitializeResult::new(capabilities)
            .with_server_info(Implementation::new("eventmesh", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        let result = self.negotiate_initialize(&request)?;
        if let Ok(rc) = caller_of(&context.extensions) {
            let watched = self
                .mcp
                .sessions
                .open(&self.mcp, rc.clone(), context.peer.clone());
            if let Ok(seen) = agents::visible(self.mcp.a2a.as_ref(), &rc).await {
                watched.shown(tool_names(&seen));
            }
            let _ = self.watched.set(watched);
        }
        Ok(result)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let rc = caller_of(&context.extensions)?;
        let mut tools = mesh::tools();
        if self.mcp.a2a.is_some() {
            tools.push(agents::find_tool());
        }
        let seen = agents::visible(self.mcp.a2a.as_ref(), &rc)
            .await
            .map_err(|e| McpError::internal_error(e.0, None))?;
        let agent_tools = agents::tools_of(&seen);
        if let Some(w) = self.watched.get() {
            w.shown(
                agent_tools
                    .iter()
                    .map(|t| t.tool.name.to_string())
                    .collect(),
            );
        }
        tools.extend(agent_tools.into_iter().map(|t| t.tool));
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let rc = caller_of(&context.extensions)?;
        let empty = JsonObject::new();
        let args = Args(request.arguments.as_ref().unwrap_or(&empty));
        match self.call(&request.name, &rc, &args, &context).await {
            Ok(result) => Ok(result.into()),
            Err(CallError::Failed(e)) => Ok(e.into_result().into()),
            Err(CallError::Unknown) => Err(McpError::invalid_params(
                format!("unknown tool {:?}", request.name),
                None,
            )),
        }
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let rc = caller_of(&context.extensions)?;
        Ok(ListResourcesResult::with_all_items(
            resources::list(&self.mcp.api, &rc).await?,
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let rc = caller_of(&context.extensions)?;
        let contents = resources::read(&self.mcp.api, &rc, &request.uri).await?;
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}

fn tool_names(agents: &[eventmesh_state::Agent]) -> Vec<String> {
    agents::tools_of(agents)
        .into_iter()
        .map(|t| t.tool.name.to_string())
        .collect()
}
