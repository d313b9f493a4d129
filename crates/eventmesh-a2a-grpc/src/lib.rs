//! The A2A gRPC binding: `lf.a2a.v1.A2AService` of the A2A v1.0 proto
//! (`proto/a2a.proto`, generated at build time), served through the
//! gateway's binding-neutral call layer (`eventmesh_a2a_gateway::call`).
//!
//! ```text
//! gRPC client ──HTTP/2──▶ listener (TLS, limits) ──▶ A2AService
//!    request message ──ProtoJSON──▶ call::call (gate, operation)
//!    answer ──ProtoJSON──▶ response message, or a stream of StreamResponse
//!    refusal ──▶ status (code, message, google.rpc.ErrorInfo)
//! ```
//!
//! Invariants:
//! - One operation, one implementation: every RPC goes through
//!   `call::call`, which runs the gate; nothing here reaches the runtime.
//! - No field is mapped by hand: requests and answers cross between the
//!   generated messages and the model's JSON by their ProtoJSON form
//!   ([`json`]).
//! - Every refusal carries a `google.rpc.Status` in its details whose
//!   code and message are the status's own ([`status`]).
//!
//! [`client`] is a small client of the service (benchmarks, tests).
//! Without the default `server` feature the crate is only the messages,
//! [`json`] and [`client`].

pub mod client;
pub mod json;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "server")]
pub mod service;
#[cfg(feature = "server")]
pub mod status;

/// The A2A v1.0 messages and service (`lf.a2a.v1`), generated from
/// `proto/a2a.proto`, with ProtoJSON serde impls. The client is
/// `pb::a2a_service_client::A2aServiceClient`, the server
/// `pb::a2a_service_server::A2aServiceServer`.
#[allow(clippy::all, missing_docs, rustdoc::all)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/lf.a2a.v1.rs"));
    include!(concat!(env!("OUT_DIR"), "/lf.a2a.v1.serde.rs"));
}

/// `google.rpc.Status` and its error details (`ErrorInfo`, `RetryInfo`),
/// sent in the `grpc-status-details-bin` trailer.
#[allow(clippy::all, missing_docs, rustdoc::all)]
pub mod rpc_status {
    include!(concat!(env!("OUT_DIR"), "/google.rpc.rs"));
}

/// The well-known types the messages use (`Struct`, `Value`, `Timestamp`,
/// `Empty`), with ProtoJSON serde.
pub use pbjson_types;

/// The encoded descriptor set of `proto/a2a.proto` and what it imports,
/// for reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/a2a_descriptor.bin"));
