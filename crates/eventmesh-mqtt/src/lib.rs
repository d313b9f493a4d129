//! The MQTT listener: MQTT 3.1.1 and 5.0 clients connect to the runtime
//! itself and publish and subscribe on the mesh's topics, through the
//! operation layer like every other transport.
//!
//! - [`codec`]: the packets of both protocol versions, decoded with the
//!   checks a server owes its clients and encoded for the version the
//!   client spoke;
//! - [`topic`]: MQTT topic names and filters as the mesh's topics and
//!   patterns;
//! - [`binding`]: CloudEvents on MQTT (binary and structured mode) and
//!   plain payloads;
//! - [`Broker`] and [`serve`]: the listener's sessions, retained messages
//!   and connections.

#[cfg(feature = "server")]
pub mod binding;
#[cfg(feature = "server")]
mod broker;
pub mod codec;
#[cfg(feature = "server")]
mod conn;
#[cfg(feature = "server")]
mod inbound;
#[cfg(feature = "server")]
mod metrics;
#[cfg(feature = "server")]
mod outbound;
#[cfg(feature = "server")]
mod own;
pub mod topic;

#[cfg(feature = "server")]
pub use broker::{Broker, SessionView};
#[cfg(feature = "server")]
pub use conn::{mesh_client, serve};
