//! The internal channel between instances (`PARTITION_OWNED_PULL`), on the
//! traffic port: deliveries forwarded to a client's home instance,
//! acknowledgements sent back to the instance that handed a delivery out,
//! and replies looked up and sent to the instance where their request
//! waits.
//! Every call carries `Authorization: Bearer <eventmesh.cluster.secret>`,
//! compared in constant time, with wrong secrets limited per remote
//! address (`credentials.rs`); without ownership the routes do not exist.

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use eventmesh_core::CloudEvent;
use eventmesh_runtime::{
    settle_answer, Creator, FindRequest, ForwardedDeliveries, ForwardedSettle, Policy, ReplyAnswer,
};

use super::AppState;
use eventmesh_api::ApiError;

pub fn internal_router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/internal/deliveries", post(deliveries))
        .route("/internal/settle", post(settle))
        .route("/internal/requests/find", post(find_request))
        .route("/internal/requests/reply", post(complete_request))
        .route("/internal/offsets/reset", post(reset_offsets))
        .route_layer(middleware::from_fn_with_state(state, require_secret))
}

async fn require_secret(
    State(app): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let Some(expected) = app.api.internal().cluster_secret() else {
        return Err(ApiError::not_found("not_found", "no such route"));
    };
    app.credentials
        .internal
        .admit(&req, expected, "the cluster secret")?;
    Ok(next.run(req).await)
}

async fn deliveries(
    State(app): State<AppState>,
    Json(batch): Json<ForwardedDeliveries>,
) -> Result<Response, ApiError> {
    let n = app.api.internal().accept_forwarded(batch)?;
    Ok(Json(serde_json::json!({ "accepted": n })).into_response())
}

async fn settle(State(app): State<AppState>, Json(s): Json<ForwardedSettle>) -> Response {
    let how = s.settle();
    let creator = s.check_creator.then(|| Creator::new(s.tenant, s.principal));
    let policy = if s.permissive {
        Policy::Permissive
    } else {
        Policy::Enforce
    };
    let settled = app
        .api
        .internal()
        .settle_here(&s.delivery_id, how, creator.as_ref(), policy)
        .await;
    Json(settle_answer(settled)).into_response()
}

/// A group reset's part for the partitions owned here.
async fn reset_offsets(
    State(app): State<AppState>,
    Json(req): Json<eventmesh_runtime::runtime::OwnedReset>,
) -> Response {
    Json(app.api.internal().reset_owned(req).await).into_response()
}

async fn find_request(State(app): State<AppState>, Json(f): Json<FindRequest>) -> Response {
    Json(app.api.internal().find_here(&f.correlation)).into_response()
}

/// A reply checked by the instance it arrived at.
async fn complete_request(
    State(app): State<AppState>,
    event: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let reply =
        CloudEvent::from_json_slice(&event).map_err(eventmesh_runtime::RuntimeError::from)?;
    let completed = app.api.internal().complete_here(reply);
    Ok(Json(ReplyAnswer { completed }).into_response())
}
