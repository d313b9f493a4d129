//! The A2A (Agent2Agent) protocol, v1.0 and v0.3, JSON-RPC binding: the wire
//! model the gateway speaks to A2A clients and the names it uses on the mesh.
//!
//! The v1.0 types in [`model`] are canonical: the gateway stores and reasons
//! about tasks only in that form. v0.3 JSON exists only at the edge and is
//! converted to and from the model by [`v03`]. [`rpc`] frames requests,
//! results and errors for either version; [`card`] checks an agent's card and
//! builds the card the gateway serves for it; [`events`] names the topics,
//! event types and extension attributes that carry tasks across the mesh.
//!
//! Nothing here does I/O. Bad input is reported as an error whose text names
//! the offending field; no input can make these functions panic.

pub mod card;
pub mod events;
pub mod model;
mod requests;
pub mod rpc;
pub mod v03;
pub mod v03_rest;
