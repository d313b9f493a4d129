//! The admin API on the admin port. `/admin/health` and `/admin/ready` are
//! open; everything else needs
//! `Authorization: Bearer <eventmesh.admin.token>`, compared in
//! constant time, with wrong tokens limited per remote address
//! (`credentials.rs`). With no token configured those routes answer 503
//! `admin_locked` (fail closed).

use std::collections::{BTreeMap, HashMap};

use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use super::traffic::{json, not_found};
use super::AppState;
use eventmesh_api::ApiError;
use eventmesh_runtime::metrics::Format;
use eventmesh_storage::{Durability, Retention};

pub fn admin_router(state: AppState) -> Router {
    let guarded = Router::new()
        .route("/metrics", get(metrics))
        .route("/admin/subscriptions", get(subscriptions))
        .route("/admin/topics", get(topics).post(create_topic))
        .route(
            "/admin/topics/{name}",
            get(topic).patch(patch_topic).delete(delete_topic),
        )
        .route("/admin/topics/{name}/scheduled", get(held_events))
        .route(
            "/admin/topics/{name}/scheduled/{id}",
            axum::routing::delete(cancel_held),
        )
        .route("/admin/dlq/browse", get(dlq_browse))
        .route("/admin/dlq/replay", axum::routing::post(dlq_replay))
        .route("/admin/dlq/{topic}/{id}", axum::routing::delete(dlq_delete))
        .route("/admin/a2a/tasks", get(a2a_tasks))
        .route("/admin/a2a/tasks/{id}", get(a2a_task))
        .route(
            "/admin/a2a/tasks/{id}/cancel",
            axum::routing::post(a2a_cancel_task),
        )
        .route("/admin/a2a/agents", get(super::a2a::admin_agents))
        .route("/admin/offsets", get(offsets))
        .route(
            "/admin/groups/{group}/offsets",
            axum::routing::post(reset_offsets),
        )
        .route("/admin/clients", get(clients))
        .route("/admin/mqtt/sessions", get(mqtt_sessions))
        .route("/admin/config", get(config))
        .route("/admin/cluster", get(cluster))
        .route("/admin/cluster/health", get(cluster_health))
        .route("/admin/reload", axum::routing::post(reload))
        .route("/admin/connector-kinds", get(super::connectors::kinds))
        .route(
            "/admin/connectors",
            get(super::connectors::list).post(super::connectors::create),
        )
        .route(
            "/admin/connectors/{name}",
            get(super::connectors::get)
                .put(super::connectors::update)
                .delete(super::connectors::delete),
        )
        .route(
            "/admin/connectors/{name}/pause",
            axum::routing::post(super::connectors::pause),
        )
        .route(
            "/admin/connectors/{name}/resume",
            axum::routing::post(super::connectors::resume),
        )
        .merge(super::links::routes())
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .route("/admin/health", get(health))
        .route("/admin/ready", get(ready))
        .route("/ui", get(super::ui::to_index))
        .route("/ui/", get(super::ui::index))
        .route("/ui/app.js", get(super::ui::app))
        .route("/ui/style.css", get(super::ui::style))
        .merge(guarded)
        .fallback(not_found)
        .with_state(state)
}

async fn require_token(
    State(app): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let Some(expected) = app.config.server.admin.token.as_deref() else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "admin_locked",
            "no admin token is configured (eventmesh.admin.token); admin routes are locked",
        ));
    };
    app.credentials
        .admin
        .admit(&req, expected, "the admin token")?;
    Ok(next.run(req).await)
}

/// `UP` (200), or `DRAINING` (503) once shutdown began, so that load
/// balancers stop sending traffic while in-flight deliveries settle. The
/// event log's state is reported beside it (`storageStatus`: `UP`, or
/// `DOWN` with `storageError`) without changing the answer: a process
/// restart would not bring remote servers back.
async fn health(State(app): State<AppState>) -> Response {
    let (status, code) = if app.api.admin().is_draining() {
        ("DRAINING", axum::http::StatusCode::SERVICE_UNAVAILABLE)
    } else {
        ("UP", axum::http::StatusCode::OK)
    };
    let storage = app.api.admin().log_status();
    let mut body = serde_json::json!({
        "status": status,
        "version": env!("CARGO_PKG_VERSION"),
        "storage": app.config.storage.backend.as_str(),
        "storageStatus": if storage.is_ok() { "UP" } else { "DOWN" },
        "topology": app.config.delivery.topology.as_str(),
        "cluster": &*app.cluster_name,
        "uptimeSeconds": app.started.elapsed().as_secs(),
    });
    if let Err(why) = storage {
        body["storageError"] = why.into();
    }
    (code, Json(body)).into_response()
}

/// `READY` (200) while the instance can take traffic; otherwise 503
/// `not_ready`, the failing checks named in the message. Every check is
/// listed either way. Open without the admin token, as probes need.
async fn ready(State(app): State<AppState>) -> Response {
    let shared_meta = app.config.meta.backend == eventmesh_core::config::MetaType::Etcd;
    let checks = app.api.admin().readiness(shared_meta).await;
    let failing: Vec<String> = checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| format!("{}: {}", c.name, c.detail.as_deref().unwrap_or("failing")))
        .collect();
    if failing.is_empty() {
        return Json(serde_json::json!({"status": "READY", "checks": checks})).into_response();
    }
    let body = serde_json::json!({
        "error": "not_ready",
        "message": failing.join("; "),
        "status": "NOT_READY",
        "checks": checks,
    });
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

/// `/metrics` in the format the `Accept` header asks for: the classic text
/// format by default, OpenMetrics when the scraper prefers it.
async fn metrics(State(app): State<AppState>, headers: HeaderMap) -> Response {
    let format = Format::negotiate(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    let metrics = app.api.admin().metrics();
    metrics.sample_process();
    app.api.admin().sample_lag().await;
    let usage = (app.store_memory)();
    for (kind, bytes) in usage.memory {
        metrics.set_storage_memory(kind, bytes);
    }
    for (kind, bytes) in usage.disk {
        metrics.set_storage_disk(kind, bytes);
    }
    if let Some(keys) = usage.dedup_keys {
        metrics.dedup_keys.set(keys as i64);
    }
    (
        [
            (header::CONTENT_TYPE, format.content_type()),
            (header::VARY, "Accept"),
        ],
        metrics.render(format),
    )
        .into_response()
}

async fn subscriptions(
    State(app): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let subs = app
        .api
        .admin()
        .subscriptions(q.get("topic").map(String::as_str))
        .await;
    Json(subs).into_response()
}

/// The subscribed clients; an MQTT client with its session.
async fn clients(State(app): State<AppState>) -> Response {
    let clients = app.api.admin().clients().await;
    let Some(broker) = &app.mqtt else {
        return Json(clients).into_response();
    };
    let sessions: std::collections::HashMap<String, eventmesh_mqtt::SessionView> =
        match broker.sessions().await {
            Ok(s) => s.into_iter().map(|s| (s.mesh_client.clone(), s)).collect(),
            Err(e) => return meta_unavailable(e),
        };
    let shown: Vec<serde_json::Value> = clients
        .into_iter()
        .map(|c| {
            let mut v = serde_json::to_value(&c).unwrap_or_default();
            if let Some(s) = sessions.get(&c.client_id) {
                v["mqtt"] = serde_json::to_value(s).unwrap_or_default();
            }
            v
        })
        .collect();
    Json(shown).into_response()
}

/// `GET /admin/mqtt/sessions`: every MQTT session kept (connected or
/// not); an empty list when the listener is off.
async fn mqtt_sessions(State(app): State<AppState>) -> Response {
    match &app.mqtt {
        None => Json(Vec::<eventmesh_mqtt::SessionView>::new()).into_response(),
        Some(broker) => match broker.sessions().await {
            Ok(s) => Json(s).into_response(),
            Err(e) => meta_unavailable(e),
        },
    }
}

fn meta_unavailable(e: eventmesh_state::StateError) -> Response {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "meta_unavailable",
        format!("cannot read the MQTT sessions: {e}"),
    )
    .into_response()
}

async fn topics(State(app): State<AppState>) -> Result<Response, ApiError> {
    Ok(Json(app.api.admin().topics().await?).into_response())
}

/// A retention in a request: each limit absent or 0 is none.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RetentionBody {
    #[serde(default)]
    ms: u64,
    #[serde(default)]
    bytes: u64,
}

impl From<RetentionBody> for Retention {
    fn from(r: RetentionBody) -> Self {
        Retention {
            ms: r.ms,
            bytes: r.bytes,
        }
    }
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NewTopic {
    name: String,
    partitions: Option<u32>,
    retention: Option<RetentionBody>,
    /// The time to live of the topic's events without an `expirytime`.
    #[serde(rename = "ttlMs", default, deserialize_with = "ttl_field")]
    ttl_ms: Option<u64>,
    /// `disk` (the default) or `memory`.
    #[serde(default, deserialize_with = "durability_field")]
    durability: Durability,
}

/// A topic's durability: `"disk"` or `"memory"`.
fn durability_field<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Durability, D::Error> {
    match <serde_json::Value as serde::Deserialize>::deserialize(d)? {
        serde_json::Value::String(s) => s.parse().map_err(serde::de::Error::custom),
        other => Err(serde::de::Error::custom(format!(
            "durability must be \"disk\" or \"memory\", not {other}"
        ))),
    }
}

/// A time to live: a whole number of milliseconds, at least 1.
fn ttl_field<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let v = <Option<u64> as serde::Deserialize>::deserialize(d)?;
    match v {
        Some(0) => Err(serde::de::Error::custom(
            "ttlMs must be at least 1 (or null for none)",
        )),
        v => Ok(v),
    }
}

/// `POST /admin/topics`: 201 with the topic, 409 `topic_exists`.
async fn create_topic(State(app): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let t: NewTopic = json(&body)?;
    let detail = app
        .api
        .admin()
        .create_topic(
            &t.name,
            t.partitions,
            t.retention.map(Retention::from),
            t.ttl_ms,
            t.durability,
        )
        .await?;
    Ok((StatusCode::CREATED, Json(detail)).into_response())
}

async fn topic(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.api.admin().topic_detail(&name).await?).into_response())
}

/// `PATCH /admin/topics/{name}` with `{"retention": {...}}` (the topic's
/// own) or `{"retention": null}` (back to the default), and/or
/// `{"ttlMs": N}` (its events' time to live) or `{"ttlMs": null}` (none).
async fn patch_topic(
    State(app): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Patch {
        #[serde(default, deserialize_with = "present")]
        retention: Option<serde_json::Value>,
        #[serde(rename = "ttlMs", default, deserialize_with = "present")]
        ttl_ms: Option<serde_json::Value>,
    }
    /// A field that is there, even as `null`, is `Some`.
    fn present<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<serde_json::Value>, D::Error> {
        <serde_json::Value as serde::Deserialize>::deserialize(d).map(Some)
    }
    let p: Patch = json(&body)?;
    if p.retention.is_none() && p.ttl_ms.is_none() {
        return Err(ApiError::bad_request(
            "invalid_request",
            "nothing to change: give retention, ttlMs or both",
        ));
    }
    let retention = match p.retention {
        None => None,
        Some(serde_json::Value::Null) => Some(None),
        Some(v) => Some(Some(Retention::from(
            serde_json::from_value::<RetentionBody>(v)
                .map_err(|e| ApiError::bad_request("invalid_request", format!("retention: {e}")))?,
        ))),
    };
    let ttl = match p.ttl_ms {
        None => None,
        Some(serde_json::Value::Null) => Some(None),
        Some(v) => match v.as_u64() {
            Some(ms) if ms >= 1 => Some(Some(ms)),
            _ => {
                return Err(ApiError::bad_request(
                    "invalid_request",
                    format!("ttlMs: {v} is not a whole number of milliseconds of at least 1 (or null for none)"),
                ))
            }
        },
    };
    let admin = app.api.admin();
    let mut detail = None;
    if let Some(retention) = retention {
        detail = Some(admin.set_topic_retention(&name, retention).await?);
    }
    if let Some(ttl) = ttl {
        detail = Some(admin.set_topic_ttl(&name, ttl).await?);
    }
    Ok(Json(detail.expect("one was set")).into_response())
}

/// `DELETE /admin/topics/{name}[?force=true]`: 204; 409 `topic_in_use`
/// while subscriptions exist, unless forced.
async fn delete_topic(
    State(app): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    app.api
        .admin()
        .delete_topic(&name, flag(&q, "force")?)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /admin/topics/{name}/scheduled[?max=N]`: the topic's held-back
/// events, soonest first (default 100, at most 10000).
async fn held_events(
    State(app): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let max = match q.get("max") {
        None => 100,
        Some(m) => match m.parse::<usize>() {
            Ok(n @ 1..=10_000) => n,
            _ => {
                return Err(ApiError::bad_request(
                    "invalid_request",
                    format!("max={m:?} is not a whole number from 1 to 10000"),
                ))
            }
        },
    };
    Ok(Json(app.api.admin().held_events(&name, max).await?).into_response())
}

/// `DELETE /admin/topics/{name}/scheduled/{id}[?source=S]`: cancels the
/// held-back events of that id (and source): `200 {"cancelled": n}`, `404
/// unknown_scheduled_event` when none is held back.
async fn cancel_held(
    State(app): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let n = app
        .api
        .admin()
        .cancel_held(&name, &id, q.get("source").map(String::as_str))
        .await?;
    Ok(Json(serde_json::json!({ "cancelled": n })).into_response())
}

/// A `true`/`false` query parameter (absent: false).
fn flag(q: &HashMap<String, String>, name: &str) -> Result<bool, ApiError> {
    match q.get(name).map(String::as_str) {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(ApiError::bad_request(
            "invalid_request",
            format!("{name}={other:?} is not true or false"),
        )),
    }
}

/// `POST /admin/groups/{group}/offsets[?force=true][&dryRun=true]` with
/// `{"topic": "<topic or pattern>", "to": <target>, "partitions": {"<n>":
/// <target>}}`, a target being `"earliest"`, `"latest"`, an RFC 3339 time
/// or an offset: 200 with what moved (or would); 409 `group_busy` while
/// the group's members hold deliveries, unless forced.
async fn reset_offsets(
    State(app): State<AppState>,
    Path(group): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    use eventmesh_runtime::runtime::{ResetRequest, ResetTo};
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body {
        topic: String,
        to: Option<serde_json::Value>,
        #[serde(default)]
        partitions: BTreeMap<String, serde_json::Value>,
    }
    let b: Body = json(&body)?;
    let bad = |m: String| ApiError::bad_request("invalid_request", m);
    let to =
        b.to.as_ref()
            .map(ResetTo::from_json)
            .transpose()
            .map_err(|m| bad(format!("to: {m}")))?;
    let mut partitions = BTreeMap::new();
    for (p, v) in &b.partitions {
        let n: u32 = p
            .parse()
            .map_err(|_| bad(format!("partitions: {p:?} is not a partition number")))?;
        let target = ResetTo::from_json(v).map_err(|m| bad(format!("partitions.{p}: {m}")))?;
        partitions.insert(n, target);
    }
    let req = ResetRequest {
        group,
        topic: b.topic,
        to,
        partitions,
        force: flag(&q, "force")?,
        dry_run: flag(&q, "dryRun")?,
    };
    Ok(Json(app.api.admin().reset_offsets(req).await?).into_response())
}

/// The `topic` and `max` (default 100, at most 10000) query parameters.
fn topic_and_max(q: &HashMap<String, String>) -> Result<(&str, usize), ApiError> {
    let topic = q.get("topic").ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "topic is required",
        )
    })?;
    let max = match q.get("max") {
        None => 100,
        Some(m) => m.parse::<usize>().map_err(|_| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                format!("max={m:?} is not a non-negative integer"),
            )
        })?,
    };
    Ok((topic, max.min(10_000)))
}

async fn dlq_browse(
    State(app): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let (topic, max) = topic_and_max(&q)?;
    Ok(Json(app.api.admin().dead_letters(topic, max).await?).into_response())
}

/// `POST /admin/dlq/replay?topic=T&max=N`, or `&id=I&id=J...` for the
/// dead letters named.
async fn dlq_replay(
    State(app): State<AppState>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let ids: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| k == "id")
        .map(|(_, v)| v.clone())
        .collect();
    let q: HashMap<String, String> = pairs.into_iter().filter(|(k, _)| k != "id").collect();
    let (topic, max) = topic_and_max(&q)?;
    let rt = app.api.admin();
    let outcome = if ids.is_empty() {
        rt.replay_dead_letters(topic, max).await?
    } else {
        rt.replay_dead_letter_ids(topic, &ids).await?
    };
    Ok(Json(outcome).into_response())
}

/// `DELETE /admin/dlq/{topic}/{id}`: drops a dead letter unreplayed.
async fn dlq_delete(
    State(app): State<AppState>,
    Path((topic, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    if app.api.admin().remove_dead_letter(&topic, &id).await? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError::not_found(
            "unknown_dead_letter",
            format!("no dead letter {id} of {topic}"),
        ))
    }
}

/// The A2A gateway, or `404 a2a_disabled`.
fn a2a_gateway(app: &AppState) -> Result<&eventmesh_a2a_gateway::Gateway, ApiError> {
    app.a2a.as_deref().ok_or_else(|| {
        ApiError::not_found(
            "a2a_disabled",
            "the A2A gateway is off (eventmesh.a2a.enabled=false)",
        )
    })
}

/// `GET /admin/a2a/tasks/{id}`: one task, whatever its tenant.
async fn a2a_task(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(a2a_gateway(&app)?.admin_task(&id).await?).into_response())
}

/// `POST /admin/a2a/tasks/{id}/cancel`: the operator's `CancelTask`.
async fn a2a_cancel_task(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(a2a_gateway(&app)?.admin_cancel_task(&id).await?).into_response())
}

/// `GET /admin/a2a/tasks?limit=N` (default 100, at most 10000).
async fn a2a_tasks(
    State(app): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let gw = a2a_gateway(&app)?;
    let limit = match q.get("limit") {
        None => 100,
        Some(l) => l.parse::<usize>().map_err(|_| {
            ApiError::bad_request(
                "invalid_request",
                format!("limit={l:?} is not a whole number"),
            )
        })?,
    };
    Ok(Json(gw.admin_tasks(limit.min(10_000)).await?).into_response())
}

async fn offsets(
    State(app): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let (topic, _) = topic_and_max(&q)?;
    Ok(Json(app.api.admin().offsets(topic).await?).into_response())
}

/// `GET /admin/cluster`: instances, the owner and fencing token of every
/// claimed partition, handovers under way (`PARTITION_OWNED_PULL` only).
async fn cluster(State(app): State<AppState>) -> Result<Response, ApiError> {
    match app.api.admin().cluster_view() {
        Some(view) => Ok(Json(view).into_response()),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_ownership",
            "partition ownership is off: it needs eventmesh.delivery.topology=PARTITION_OWNED_PULL",
        )),
    }
}

/// One instance's readiness as `GET /admin/cluster/health` reports it.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct InstanceHealth {
    id: String,
    admin_address: String,
    /// `READY`, `NOT_READY`, or `UNREACHABLE` (no answer within 2 s).
    status: String,
    /// The failing checks, or why it could not be asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
}

/// `GET /admin/cluster/health`: every live instance's `/admin/ready`, asked
/// from here (so that one page sees them all), 2 s each at most.
async fn cluster_health(State(app): State<AppState>) -> Result<Response, ApiError> {
    let rt = app.api.admin();
    let (Some(view), Some(cluster)) = (rt.cluster_view(), rt.cluster()) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_ownership",
            "partition ownership is off: it needs eventmesh.delivery.topology=PARTITION_OWNED_PULL",
        ));
    };
    let https = app.config.server.admin.tls && app.config.server.tls.cert_file.is_some();
    let client = cluster.internal().clone();
    let asks = view.instances.iter().map(|i| {
        let client = client.clone();
        let id = i.info.id.clone();
        // A wildcard bind is reached at the host the instance advertises.
        let admin = match i.info.admin_address.parse::<std::net::SocketAddr>() {
            Ok(a) if a.ip().is_unspecified() => {
                let host = i
                    .info
                    .address
                    .rsplit_once(':')
                    .map_or("127.0.0.1", |(h, _)| h);
                format!("{host}:{}", a.port())
            }
            _ => i.info.admin_address.clone(),
        };
        let url = format!(
            "{}://{admin}/admin/ready",
            if https { "https" } else { "http" }
        );
        async move {
            let asked = client
                .get(&url)
                .timeout(std::time::Duration::from_secs(2))
                .send()
                .await;
            let (status, detail) = match asked {
                Ok(r) => {
                    let ok = r.status().is_success();
                    let body: serde_json::Value = r.json().await.unwrap_or_default();
                    let status = body["status"]
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| {
                            if ok {
                                "READY".into()
                            } else {
                                "NOT_READY".into()
                            }
                        });
                    (status, body["message"].as_str().map(str::to_string))
                }
                Err(e) => ("UNREACHABLE".to_string(), Some(e.to_string())),
            };
            InstanceHealth {
                id,
                admin_address: admin,
                status,
                detail,
            }
        }
    });
    let all: Vec<InstanceHealth> = futures::future::join_all(asks).await;
    Ok(Json(all).into_response())
}

async fn config(State(app): State<AppState>) -> Response {
    let map: serde_json::Map<String, serde_json::Value> = app
        .reloader
        .config()
        .redacted_entries()
        .into_iter()
        .map(|(k, v)| (k, serde_json::Value::String(v)))
        .collect();
    Json(map).into_response()
}

/// Reads the configuration again and applies the security gate's files and
/// keys; `400 reload_failed` (nothing changed) says why not.
async fn reload(State(app): State<AppState>) -> Result<Response, ApiError> {
    match app.reloader.reload() {
        Ok(done) => Ok(Json(done).into_response()),
        Err(why) => {
            tracing::error!("reload failed, the settings in force stay: {why}");
            Err(ApiError::new(StatusCode::BAD_REQUEST, "reload_failed", why))
        }
    }
}
