//! An async Rust SDK for the eventmesh runtime, and the `publish`,
//! `subscribe` and `request` commands of the `eventmesh` binary ([`cli`]).
//!
//! One [`EventMeshClient`] talks to one server:
//!
//! - HTTP: [`publish`](EventMeshClient::publish),
//!   [`publish_batch`](EventMeshClient::publish_batch),
//!   [`subscribe`](EventMeshClient::subscribe),
//!   [`unsubscribe`](EventMeshClient::unsubscribe),
//!   [`poll`](EventMeshClient::poll), [`ack`](EventMeshClient::ack),
//!   [`nack`](EventMeshClient::nack), request-reply with
//!   [`request`](EventMeshClient::request) and
//!   [`reply`](EventMeshClient::reply);
//! - server-sent events: [`sse`](EventMeshClient::sse) gives an
//!   [`SseStream`] that reconnects by itself, resuming with `Last-Event-ID`;
//! - WebSocket: [`websocket`](EventMeshClient::websocket) gives a
//!   [`WsSession`] that also acks, nacks, publishes and replies on the
//!   same socket;
//! - the legacy TCP port: [`tcp`](EventMeshClient::tcp) gives a
//!   [`TcpClient`];
//! - on the admin port, with the admin token:
//!   [`reset_offsets`](EventMeshClient::reset_offsets) replays a group
//!   from a time, the beginning or an offset ([`ResetOffsets`]).
//!
//! Events go out as structured CloudEvents: pass a [`CloudEvent`] or a
//! `serde_json::Value` (anything [`AsEvent`]); [`json_event`] and
//! [`text_event`] make new ones. Deliveries come back as [`Delivery`]
//! (`delivery_id` plus the event as JSON). Every failure is an [`Error`].
//!
//! ```no_run
//! use std::time::Duration;
//! use eventmesh_client::{json_event, EventMeshClient, StreamOptions};
//!
//! # async fn demo() -> eventmesh_client::Result<()> {
//! let client = EventMeshClient::new("http://127.0.0.1:10105")?;
//!
//! // Consume over SSE, subscribing in the same call.
//! let mut stream = client.sse(StreamOptions::new("reader-1").topic("orders")).await?;
//!
//! // Publish.
//! let event = json_event("order.created", "/shop", serde_json::json!({"order": 17}));
//! let at = client.publish("orders", &event).await?;
//! println!("stored in partition {} at offset {}", at.partition, at.offset);
//!
//! while let Some(delivery) = stream.next().await {
//!     let delivery = delivery?;
//!     println!("{}", delivery.event);
//!     stream.ack(&delivery.delivery_id).await?;
//! }
//!
//! // Request-reply: blocks until a replier answers, or times out.
//! let ask = json_event("price.query", "/shop", serde_json::json!({"sku": "A1"}));
//! match client.request("prices", &ask, Duration::from_secs(5)).await {
//!     Ok(answer) => println!("{answer}"),
//!     Err(eventmesh_client::Error::Timeout) => eprintln!("nobody answered"),
//!     Err(e) => return Err(e),
//! }
//! # Ok(()) }
//! ```

pub mod agent;
pub mod cli;
mod client;
mod error;
mod replay;
pub mod sse;
pub mod tcp;
mod tls;
mod types;
pub mod ws;

pub use client::{ClientBuilder, EventMeshClient, DEFAULT_SERVER, DEFAULT_TCP_SERVER};
pub use error::{Error, Result};
pub use eventmesh_core::{CloudEvent, Data, ExtValue};
pub use replay::{PartitionMove, ResetOffsets, ResetOutcome, ResetTo};
pub use sse::SseStream;
pub use tcp::TcpClient;
pub use tls::TlsFiles;
pub use types::{
    json_event, text_event, AsEvent, Delivery, DeliveryMode, Published, StartFrom, StreamOptions,
    SubscribeOptions, Subscription, CORRELATION_ID,
};
pub use ws::WsSession;

#[cfg(test)]
mod testutil;
