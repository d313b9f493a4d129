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
//! - `POST /a2a/tasks/send`: the v0.1 `tasks/send` request;
//! - the HTTP+JSON binding's routes under `/a2a/agents/{id}/` and
//!   `/a2a/` (a2a_rest.rs).
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
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use eventmesh_security::Operation;
use serde::Deserialize;
use serde_json::{json, Value};

use super::traffic::{body, Req};
use super::AppState;
use eventmesh_a2a::model::StreamResponse;
use eventmesh_a2a_gateway::call;
use eventmesh_a2a_gateway::registry::{AgentPage, AgentQuery};
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
        .route(
            "/a2a/agents/.well-known/agent-card.json",
            get(no_agent_named),
        )
        .route("/a2a/tasks/send", post(tasks_send))
        // The HTTP+JSON binding, under each agent's endpoint and the
        // gateway's.
        .route(
            "/a2a/agents/{id}/{*rest}",
            any(super::a2a_rest::agent_route),
        )
        .route("/a2a/{*rest}", any(super::a2a_rest::gateway_route))
}

pub(super) fn gateway(app: &AppState) -> Result<&Arc<Gateway>, ApiError> {
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
pub(super) fn base_url(app: &AppState, headers: &HeaderMap) -> String {
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
    let base = base_url(&app, &r.headers);
    let card = with_grpc(&app, rpc::gateway_card(&base, &agents, push), &base, None);
    Ok(Json(card).into_response())
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
    let base = base_url(&app, &r.headers);
    let card = with_grpc(&app, rpc::agent_card(&base, &agent, push), &base, Some(&id));
    Ok(Json(card).into_response())
}

/// `GET /a2a/agents/.well-known/agent-card.json`: where a client that
/// resolves the card path relative to the base URL (RFC 3986, as the
/// JavaScript SDK does) lands when given an agent's URL without its
/// trailing slash. The request no longer names the agent, so the answer
/// is 404 with the way out.
async fn no_agent_named() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::NOT_FOUND,
        "unknown_agent",
        "this URL names no agent: an agent's URL given without its trailing slash \
         (…/a2a/agents/<id>) resolves the card path to here in clients that resolve \
         relative URLs (the JavaScript SDK); give the agent's URL with the trailing slash \
         (…/a2a/agents/<id>/) or its card URL (…/a2a/agents/<id>/.well-known/agent-card.json)",
    )
}

/// A served card with the gRPC listener's interface, when it is on.
fn with_grpc(app: &AppState, card: Value, base: &str, agent: Option<&str>) -> Value {
    let a2a = &app.config.a2a;
    let public = a2a.grpc_public_url.as_deref();
    eventmesh_a2a::card::with_grpc(card, public, a2a.grpc_port, base, agent)
}

/// `GET /a2a/agents`: the agents the caller may reach, searched by the
/// query (`skill`, `tag`, `inputMode`, `outputMode`, `q`, `pageSize`,
/// `pageToken`; see `eventmesh_a2a_gateway::registry`).
async fn list_agents(
    State(app): State<AppState>,
    q: Result<Query<AgentQuery>, QueryRejection>,
    r: Req,
) -> Result<Response, ApiError> {
    let gw = gateway(&app)?;
    let query = super::traffic::query(q)?;
    let page = gw.find_agents(&r.caller, &query).await?;
    let base = base_url(&app, &r.headers);
    Ok(page_json(&page, |a| agent_entry(&base, a)))
}

/// A page of agents: each as `entry` shows it, how many match, and the
/// next page's token when there is one.
fn page_json(page: &AgentPage, entry: impl Fn(&eventmesh_state::Agent) -> Value) -> Response {
    let agents: Vec<Value> = page.agents.iter().map(entry).collect();
    let mut body = json!({ "agents": agents, "totalSize": page.total });
    if let Some(next) = &page.next_page_token {
        body["nextPageToken"] = next.clone().into();
    }
    Json(body).into_response()
}

/// `GET /admin/a2a/agents`: the same search over every tenant's agents,
/// each with its tenant and the instance it is attached through.
pub(super) async fn admin_agents(
    State(app): State<AppState>,
    q: Result<Query<AgentQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let gw = gateway(&app)?;
    let query = super::traffic::query(q)?;
    let page = gw.search(&query, |_| true).await?;
    // Clients reach the agents on the traffic port, which this request
    // did not come in on: its URLs are known when configured only.
    let public = app.config.a2a.public_url.clone();
    let base = public.as_deref().unwrap_or("").trim_end_matches('/');
    Ok(page_json(&page, |a| {
        let mut entry = agent_entry(base, a);
        if let Some(o) = entry.as_object_mut() {
            if public.is_none() {
                o.remove("card");
                o.remove("url");
            }
            o.insert("tenant".into(), json!(a.tenant));
            o.insert("instance".into(), json!(a.host));
        }
        entry
    }))
}

/// An agent as a listing shows it: who it is, what it can do, where its
/// card and endpoint are, and when it was last heard of.
pub(super) fn agent_entry(base: &str, a: &eventmesh_state::Agent) -> Value {
    let card = a.card.as_ref();
    let field = |k: &str| card.and_then(|c| c.get(k)).cloned();
    let skills: Vec<Value> = card
        .and_then(|c| c.get("skills"))
        .and_then(Value::as_array)
        .map(|skills| {
            skills
                .iter()
                .map(|s| json!({"id": s.get("id"), "name": s.get("name"), "tags": s.get("tags")}))
                .collect()
        })
        .unwrap_or_default();
    json!({
        "id": a.id,
        "name": field("name"),
        "description": field("description"),
        "skills": skills,
        "card": format!("{base}/a2a/agents/{}/.well-known/agent-card.json", a.id),
        "url": format!("{base}/a2a/agents/{}", a.id),
        "heartbeatMs": a.heartbeat_ms,
        "ttlMs": a.ttl_ms,
    })
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
        Reply::Stream(Streaming { id, inner }) => sse(inner, move |s, ev, last| {
            eventmesh_a2a::rpc::success(&id, s.to_json(ev, last))
        }),
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

/// A call's stream as server-sent events, each event's data written by
/// `encode`; a comment every [`KEEPALIVE`] while idle.
pub(super) fn sse<F>(s: call::Streaming, encode: F) -> Response
where
    F: Fn(&call::Streaming, &StreamResponse, bool) -> Value + Send + 'static,
{
    let events = futures::stream::unfold((s, encode), |(mut s, encode)| async move {
        let (event, last) = s.next().await?;
        let data = encode(&s, &event, last).to_string();
        Some((
            Ok::<_, Infallible>(Event::default().data(data)),
            (s, encode),
        ))
    });
    let mut resp = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEPALIVE).text("keepalive"))
        .into_response();
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    resp
}
