//! The A2A gateway's routes on the traffic port, decoded into operations
//! of [`eventmesh_a2a_gateway`]:
//! - `GET /.well-known/agent-card.json`: the gateway's card, listing the
//!   agents it fronts;
//! - `GET /a2a/agents/{id}/.well-known/agent-card.json`: an agent's card,
//!   naming the gateway as its endpoint;
//! - `POST /a2a/agents/{id}`: the agent's JSON-RPC endpoint (v1.0 and
//!   v0.3, by `A2A-Version`); `POST /a2a`: the gateway's, for any agent;
//! - `POST /a2a/agents` (register or heartbeat), `GET /a2a/agents`,
//!   `DELETE /a2a/agents/{id}`: agents attaching to the mesh;
//! - `POST /a2a/tasks/send`: the v0.1 `tasks/send` request.
//!
//! Streams are server-sent events, one JSON-RPC response each, with a
//! comment every two seconds while idle (A2A clients give up on a silent
//! stream after a few seconds), closed after the event that settles the
//! task.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use eventmesh_security::Operation;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;

use super::traffic::{body, Req};
use super::AppState;
use eventmesh_a2a_gateway::rpc::{self, Reply, Streaming};
use eventmesh_a2a_gateway::Gateway;
use eventmesh_api::{ApiError, Ask};

/// Idle streams send a comment this often.
const KEEPALIVE: Duration = Duration::from_secs(2);

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/.well-known/agent-card.json", get(gateway_card))
        .route("/a2a", post(gateway_rpc))
        .route("/a2a/agents", get(list_agents).post(register))
        .route("/a2a/agents/{id}", post(agent_rpc).delete(deregister))
        .route(
            "/a2a/agents/{id}/.well-known/agent-card.json",
            get(agent_card),
        )
        .route("/a2a/tasks/send", post(tasks_send))
}

fn gateway(app: &AppState) -> Result<&Arc<Gateway>, ApiError> {
    app.a2a.as_ref().ok_or_else(|| {
        ApiError::not_found(
            "a2a_disabled",
            "the A2A gateway is off (eventmesh.a2a.enabled=false)",
        )
    })
}

fn state_error(e: eventmesh_state::StateError) -> ApiError {
    ApiError::from(eventmesh_runtime::RuntimeError::from(e))
}

/// The URL clients reach this port at: the configured one, else from the
/// request's `Host`.
fn base_url(app: &AppState, headers: &HeaderMap) -> String {
    if let Some(u) = &app.config.a2a.public_url {
        return u.trim_end_matches('/').to_string();
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    let tls = app.config.server.tls.cert_file.is_some() && app.config.server.http.tls;
    format!("{}://{host}", if tls { "https" } else { "http" })
}

async fn gateway_card(State(app): State<AppState>, r: Req) -> Result<Response, ApiError> {
    let gw = gateway(&app)?;
    let admitted = gw
        .api()
        .admit(&r.caller, Ask::new(Operation::A2a, None, b""))?;
    // Like `GET /a2a/agents`: the caller's tenant's agents only.
    let agents: Vec<_> = gw
        .live_agents()
        .await
        .map_err(state_error)?
        .into_iter()
        .filter(|a| admitted.creator.tenant.is_none() || a.tenant == admitted.creator.tenant)
        .collect();
    let push = app.config.a2a.push_enabled;
    Ok(Json(rpc::gateway_card(
        &base_url(&app, &r.headers),
        &agents,
        push,
    ))
    .into_response())
}

async fn agent_card(
    State(app): State<AppState>,
    Path(id): Path<String>,
    r: Req,
) -> Result<Response, ApiError> {
    let gw = gateway(&app)?;
    admit_on_agent(gw, &r, &id, b"")?;
    let agent = gw
        .agent(&id)
        .await
        .map_err(state_error)?
        .ok_or_else(|| eventmesh_a2a_gateway::unknown_agent(&id))?;
    let push = app.config.a2a.push_enabled;
    Ok(Json(rpc::agent_card(&base_url(&app, &r.headers), &agent, push)).into_response())
}

async fn list_agents(State(app): State<AppState>, r: Req) -> Result<Response, ApiError> {
    let gw = gateway(&app)?;
    let admitted = gw
        .api()
        .admit(&r.caller, Ask::new(Operation::A2a, None, b""))?;
    let base = base_url(&app, &r.headers);
    let agents: Vec<Value> = gw
        .live_agents()
        .await
        .map_err(state_error)?
        .into_iter()
        .filter(|a| admitted.creator.tenant.is_none() || a.tenant == admitted.creator.tenant)
        .map(|a| {
            json!({
                "id": a.id,
                "name": a.card.as_ref().and_then(|c| c.get("name")).cloned(),
                "card": format!("{base}/a2a/agents/{}/.well-known/agent-card.json", a.id),
                "url": format!("{base}/a2a/agents/{}", a.id),
                "heartbeatMs": a.heartbeat_ms,
                "ttlMs": a.ttl_ms,
            })
        })
        .collect();
    Ok(Json(json!({ "agents": agents })).into_response())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Registration {
    id: String,
    card: Value,
    #[serde(default)]
    extended_card: Option<Value>,
    ttl_ms: Option<u64>,
}

async fn register(
    State(app): State<AppState>,
    r: Req,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let gw = gateway(&app)?;
    let raw = body(b)?;
    let reg: Registration = super::traffic::json(&raw)?;
    let admitted = gw
        .api()
        .admit(&r.caller, Ask::new(Operation::A2a, Some(&reg.id), &raw))?;
    let agent = gw
        .register(
            &admitted.creator,
            &reg.id,
            (reg.card, reg.extended_card),
            reg.ttl_ms,
        )
        .await?;
    let base = base_url(&app, &r.headers);
    Ok((
        StatusCode::OK,
        Json(json!({
            "id": agent.id,
            "inbox": format!("{}{}", eventmesh_a2a::events::INBOX_PREFIX, agent.id),
            "updates": eventmesh_a2a::events::UPDATES_TOPIC,
            "card": format!("{base}/a2a/agents/{}/.well-known/agent-card.json", agent.id),
            "url": format!("{base}/a2a/agents/{}", agent.id),
            "ttlMs": agent.ttl_ms,
        })),
    )
        .into_response())
}

async fn deregister(
    State(app): State<AppState>,
    Path(id): Path<String>,
    r: Req,
) -> Result<Response, ApiError> {
    let gw = gateway(&app)?;
    let admitted = admit_on_agent(gw, &r, &id, b"")?;
    if gw.deregister(&admitted.creator, &id).await? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(eventmesh_a2a_gateway::unknown_agent(&id))
    }
}

/// Admits the caller on agent `id`; a caller the ACL refuses on it is
/// answered exactly like one asking for an agent nobody registered.
fn admit_on_agent(
    gw: &Gateway,
    r: &Req,
    id: &str,
    raw: &[u8],
) -> Result<eventmesh_api::Admitted, ApiError> {
    match gw
        .api()
        .admit(&r.caller, Ask::new(Operation::A2a, Some(id), raw))
    {
        Err(e) if e.status == StatusCode::FORBIDDEN => {
            Err(eventmesh_a2a_gateway::unknown_agent(id))
        }
        other => other,
    }
}

fn version_header(headers: &HeaderMap) -> Option<&str> {
    headers.get("a2a-version").and_then(|v| v.to_str().ok())
}

async fn agent_rpc(
    State(app): State<AppState>,
    Path(id): Path<String>,
    r: Req,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    json_rpc(&app, &r, b, Some(&id)).await
}

async fn gateway_rpc(
    State(app): State<AppState>,
    r: Req,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    json_rpc(&app, &r, b, None).await
}

/// One JSON-RPC request to the endpoint of agent `scope` (the gateway's
/// own with `None`).
async fn json_rpc(
    app: &AppState,
    r: &Req,
    b: Result<Bytes, BytesRejection>,
    scope: Option<&str>,
) -> Result<Response, ApiError> {
    let gw = gateway(app)?;
    let raw = body(b)?;
    let base = base_url(app, &r.headers);
    let reply = rpc::handle(
        gw,
        &r.caller,
        scope,
        &base,
        version_header(&r.headers),
        &raw,
    )
    .await?;
    Ok(match reply {
        Reply::Json(v) => Json(v).into_response(),
        Reply::Stream(s) => sse(s),
    })
}

async fn tasks_send(
    State(app): State<AppState>,
    r: Req,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let gw = gateway(&app)?;
    let raw = body(b)?;
    Ok(Json(rpc::tasks_send(gw, &r.caller, &raw).await?).into_response())
}

/// The stream: the first events, then the task's changes until one
/// settles it.
fn sse(s: Streaming) -> Response {
    struct St {
        s: Streaming,
        first: std::collections::VecDeque<eventmesh_a2a::model::StreamResponse>,
        done: bool,
    }
    let first = s.first.clone().into();
    let events = futures::stream::unfold(
        St {
            s,
            first,
            done: false,
        },
        |mut st| async move {
            if let Some(ev) = st.first.pop_front() {
                let data = st.s.encode(&ev, false);
                return Some((
                    Ok::<_, Infallible>(Event::default().data(data.to_string())),
                    st,
                ));
            }
            if st.done {
                return None;
            }
            let shutdown = st.s.gateway.api().shutdown().clone();
            loop {
                tokio::select! {
                    got = st.s.changes.recv() => match got {
                        Ok(applied) => {
                            let last = applied.settles();
                            st.done = last;
                            let data = st.s.encode(&applied.event, last);
                            return Some((Ok(Event::default().data(data.to_string())), st));
                        }
                        Err(RecvError::Lagged(_)) => {
                            // Fell behind: the task as it is now, then on.
                            if let Some(task) = st.s.reread().await {
                                let s = task.status.state;
                                st.done = s.is_terminal() || s.is_interrupted();
                                let ev = eventmesh_a2a::model::StreamResponse::Task(task);
                                let data = st.s.encode(&ev, st.done);
                                return Some((Ok(Event::default().data(data.to_string())), st));
                            }
                        }
                        Err(RecvError::Closed) => return None,
                    },
                    _ = shutdown.cancelled() => return None,
                }
            }
        },
    );
    let mut resp = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEPALIVE).text("keepalive"))
        .into_response();
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    resp
}
