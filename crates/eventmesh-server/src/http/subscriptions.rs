//! The CloudEvents Subscriptions API on the traffic port, decoded into the
//! operations of [`eventmesh_api::Api`] (`eventmesh_api::subscriptions`):
//! - `GET /subscriptions`: the caller's subscriptions;
//! - `POST /subscriptions`: create (201, `Location: /subscriptions/<id>`);
//! - `GET`, `PUT`, `DELETE /subscriptions/{id}`: retrieve, update, delete;
//! - `OPTIONS` of both: 200 with the methods in `Allow`.
//!
//! Bodies are subscription objects as the specification's OpenAPI document
//! names their fields; every answer is one (or an array of them), secrets
//! left out.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use eventmesh_api::subscriptions::{render, Proposed};
use eventmesh_api::ApiError;
use serde_json::Value;

use super::traffic::{body, json, Req};
use super::AppState;

/// The methods of the collection and of one subscription.
const COLLECTION: &str = "GET,POST,OPTIONS";
const ONE: &str = "GET,PUT,DELETE,OPTIONS";

pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/subscriptions",
            get(list).post(create).options(|| allow(COLLECTION)),
        )
        .route(
            "/subscriptions/{id}",
            get(retrieve)
                .put(update)
                .delete(delete)
                .options(|| allow(ONE)),
        )
}

async fn allow(methods: &'static str) -> Response {
    (StatusCode::OK, [(header::ALLOW, methods)]).into_response()
}

/// A body's subscription object.
fn proposed(raw: &[u8]) -> Result<Proposed, ApiError> {
    Proposed::parse(&json::<Value>(raw)?)
}

async fn list(State(app): State<AppState>, r: Req) -> Result<Response, ApiError> {
    let subs = app.api.subscriptions_of(&r.caller).await?;
    Ok(Json(subs.iter().map(render).collect::<Vec<_>>()).into_response())
}

async fn create(
    State(app): State<AppState>,
    r: Req,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let raw = body(b)?;
    let sub = app
        .api
        .create_subscription(&r.caller, proposed(&raw)?, &raw)
        .await?;
    let location = format!("/subscriptions/{}", sub.subscription_id);
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(render(&sub)),
    )
        .into_response())
}

async fn retrieve(
    State(app): State<AppState>,
    r: Req,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let sub = app.api.subscription_of(&r.caller, &id).await?;
    Ok(Json(render(&sub)).into_response())
}

async fn update(
    State(app): State<AppState>,
    r: Req,
    Path(id): Path<String>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let raw = body(b)?;
    let sub = app
        .api
        .update_subscription(&r.caller, &id, proposed(&raw)?, &raw)
        .await?;
    Ok(Json(render(&sub)).into_response())
}

async fn delete(
    State(app): State<AppState>,
    r: Req,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let sub = app.api.delete_subscription(&r.caller, &id, b"").await?;
    Ok(Json(render(&sub)).into_response())
}
