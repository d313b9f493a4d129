//! Connectors: how the mesh reads from the systems people already run and
//! writes to them.
//!
//! A **source** reads an outside system and hands the runtime [`Record`]s,
//! each with the [`Position`] after it; the runtime publishes them through
//! the operation layer and, once they are durable, commits the position and
//! tells the source ([`Source::commit`]), which may then acknowledge them
//! outside (`XACK`, an MQTT `PUBACK`). A **sink** is given events in log
//! order ([`Sink::write`]) and answers only once the outside write
//! succeeded; the runtime acknowledges them after that, so a failed write is
//! retried with the delivery backoff and dead-lettered like any delivery.
//!
//! A kind of connector is a config type (serde + JSON Schema) and an
//! `open` function: [`SourceKind`] or [`SinkKind`], erased into a [`Kind`]
//! for the registry ([`builtin`]). Writing a new connector is one file: see
//! `docs/connectors.md`.
//!
//! Invariants the runtime relies on:
//! - A source returns records in its system's order, and a position it has
//!   returned, committed and reopened from yields exactly the records after
//!   it (a record may be read again only when its position was never
//!   committed: delivery into the mesh is at least once, and an event id
//!   derived from the position makes a replay a duplicate the publish
//!   deduplication window drops).
//! - A sink's `Ok` means every event of the call is written; an `Err` means
//!   the runtime may give any of them again (sinks write idempotently where
//!   the system allows: the PostgreSQL sink upserts by `source` + `id`).

pub mod kind;
pub mod kinds;
pub mod sdk;
#[doc(hidden)]
pub mod testutil;

pub use kind::{builtin, Kind, Role};
pub use sdk::{
    event, ConnectorError, Position, Record, Sink, SinkContext, SinkKind, Source, SourceContext,
    SourceKind, Target, Verdict,
};
