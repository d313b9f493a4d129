//! Mesh link routes of the admin API: `/admin/links`, each link's
//! `/pause` and `/resume`. A link is a `mesh-link` connector; these routes
//! show it as one (see `eventmesh_connect_runtime::link::view`).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::traffic::{body, json};
use super::AppState;
use eventmesh_api::ApiError;
use eventmesh_connect_runtime::link::view::LinkBody;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/admin/links", get(list).post(create))
        .route("/admin/links/{name}", get(one).put(update).delete(delete))
        .route(
            "/admin/links/{name}/pause",
            post(|s, p| set_paused(s, p, true)),
        )
        .route(
            "/admin/links/{name}/resume",
            post(|s, p| set_paused(s, p, false)),
        )
}

async fn list(State(app): State<AppState>) -> Result<Response, ApiError> {
    Ok(Json(app.connectors.links().await?).into_response())
}

async fn create(
    State(app): State<AppState>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: LinkBody = json(&body(b)?)?;
    let view = app.connectors.create_link(req).await?;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

async fn one(State(app): State<AppState>, Path(name): Path<String>) -> Result<Response, ApiError> {
    Ok(Json(app.connectors.link(&name).await?).into_response())
}

async fn update(
    State(app): State<AppState>,
    Path(name): Path<String>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: LinkBody = json(&body(b)?)?;
    Ok(Json(app.connectors.update_link(&name, req).await?).into_response())
}

async fn delete(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    app.connectors.delete_link(&name).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn set_paused(
    State(app): State<AppState>,
    Path(name): Path<String>,
    paused: bool,
) -> Result<Response, ApiError> {
    Ok(Json(app.connectors.pause_link(&name, paused).await?).into_response())
}
