//! Connector routes: the admin API (`/admin/connectors`,
//! `/admin/connector-kinds`) and each `http-source`'s inbound endpoint on
//! the traffic port, `POST /connectors/{name}/events`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use eventmesh_connect::kinds::http::{HttpSourceConfig, Verified};
use eventmesh_core::CloudEvent;
use serde_json::json;

use super::traffic::{body, essence, json, parse_single};
use super::AppState;
use eventmesh_api::ApiError;
use eventmesh_connect_runtime::def::DefinitionBody;

/// `GET /admin/connector-kinds`: every kind with the JSON Schema of its
/// config.
pub async fn kinds(State(app): State<AppState>) -> Response {
    let kinds: Vec<_> = app
        .connectors
        .kinds()
        .iter()
        .map(|k| {
            json!({
                "name": k.name(),
                "role": k.role(),
                "description": k.description(),
                "schema": k.schema(),
            })
        })
        .collect();
    Json(kinds).into_response()
}

pub async fn list(State(app): State<AppState>) -> Result<Response, ApiError> {
    Ok(Json(app.connectors.list().await?).into_response())
}

pub async fn create(
    State(app): State<AppState>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: DefinitionBody = json(&body(b)?)?;
    let view = app.connectors.create(req).await?;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

pub async fn get(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.connectors.get(&name).await?).into_response())
}

pub async fn update(
    State(app): State<AppState>,
    Path(name): Path<String>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: DefinitionBody = json(&body(b)?)?;
    Ok(Json(app.connectors.update(&name, req).await?).into_response())
}

pub async fn delete(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    app.connectors.delete(&name).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn pause(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.connectors.set_paused(&name, true).await?).into_response())
}

pub async fn resume(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.connectors.set_paused(&name, false).await?).into_response())
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The event an inbound request carries: a CloudEvent as sent (structured
/// or binary mode), or a plain body made into one.
fn event_of(
    connector: &str,
    config: &HttpSourceConfig,
    headers: &HeaderMap,
    raw: Bytes,
    verified: Option<&Verified>,
) -> Result<CloudEvent, ApiError> {
    let ct = essence(headers);
    if headers.contains_key("ce-specversion")
        || ct.as_deref() == Some("application/cloudevents+json")
    {
        return parse_single(headers, raw);
    }
    // The sender's delivery id, its idempotency key, else one derived
    // from the signature: the same signed bytes make the same event.
    let id = verified
        .and_then(|v| v.delivery_id.clone())
        .or_else(|| {
            header(headers, &config.idempotency_header)
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        })
        .or_else(|| verified.map(Verified::event_id))
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let data = match ct.as_deref() {
        Some(t) if eventmesh_core::event::is_json_media_type(t) => {
            if serde_json::from_slice::<serde::de::IgnoredAny>(&raw).is_err() {
                return Err(ApiError::bad_request(
                    "malformed_json",
                    format!("the body is not the JSON its content type ({t}) says"),
                ));
            }
            eventmesh_core::event::Data::Json(raw)
        }
        _ => eventmesh_connect::sdk::data_of(&raw),
    };
    let mut ev = eventmesh_connect::event(connector, id, &config.ty, data);
    if let Some(t) = header(headers, "content-type") {
        if !t.is_empty() {
            ev.datacontenttype = Some(t.to_string());
        }
    }
    Ok(ev)
}

/// `POST /connectors/{name}/events`: publishes what an outside system
/// sends to an `http-source`, answering once it is durable.
pub async fn inbound(
    State(app): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let def = app.connectors.http_source(&name).ok_or_else(|| {
        ApiError::not_found("unknown_connector", format!("no http-source named {name}"))
    })?;
    if def.paused {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "connector_paused",
            format!("the connector {name} is paused"),
        ));
    }
    let raw = body(b)?;
    let config: HttpSourceConfig = serde_json::from_value(def.config.clone()).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "invalid_connector",
            format!("the stored config of {name} cannot be read: {e}"),
        )
    })?;
    let now = eventmesh_core::time::now_ms() / 1000;
    let verified = match config.verify(|n| header(&headers, n), &raw, now) {
        Ok(v) => v,
        Err(why) => {
            app.api
                .admin()
                .metrics()
                .connector_error(&name, "signature");
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                why.code,
                why.message,
            ));
        }
    };
    // A timestamped signature is taken once inside its window.
    let remembered = match (&verified, &config.signature) {
        (Some(v), Some(sig)) => match v.at {
            Some(at) => {
                if let Err(e) =
                    app.connectors
                        .admit_signature(&name, at, v.mac, now, sig.tolerance())
                {
                    app.api
                        .admin()
                        .metrics()
                        .connector_error(&name, "signature");
                    return Err(e);
                }
                Some((at, v.mac))
            }
            None => None,
        },
        _ => None,
    };
    let published = async {
        let ev = event_of(&name, &config, &headers, raw.clone(), verified.as_ref())?;
        let caller = eventmesh_connect_runtime::run::Runner::caller(&def);
        app.api
            .publish(&caller, Some(def.topic.clone()), vec![ev], &raw)
            .await
    }
    .await;
    let mut out = match published {
        Ok(out) => out,
        Err(e) => {
            // Not taken: the sender may send the same request again.
            if let Some((at, mac)) = remembered {
                app.connectors.forget_signature(&name, at, mac);
            }
            return Err(e);
        }
    };
    app.api.admin().metrics().connector_events(&name, "in", 1);
    Ok((StatusCode::ACCEPTED, Json(out.remove(0))).into_response())
}
