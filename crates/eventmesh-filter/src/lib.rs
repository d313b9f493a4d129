//! Event filters for subscriptions.
//!
//! Two layers:
//!
//! - [`cesql`]: the CloudEvents SQL expression language, CESQL 1.0, in
//!   full: a hand-written parser that compiles an expression once into a
//!   tree with resolved attribute keys, bound functions and pre-compiled
//!   `LIKE` patterns and `IN` sets, and an evaluator that returns a value
//!   together with the errors the specification defines.
//! - [`dialect`]: the Subscriptions API filter dialects (`exact`, `prefix`,
//!   `suffix`, `all`, `any`, `not`, `sql`): their JSON form
//!   ([`FilterJson`]), validation with errors that name the path at fault
//!   ([`compile`] → [`FilterError`]), and matching ([`Filter::matches`]).
//!
//! Both evaluate against the [`Attributes`] trait, implemented here for
//! [`eventmesh_core::CloudEvent`]; the runtime can implement it for its
//! stored records. A compiled [`Filter`] also reports the exact attribute
//! values it requires ([`Filter::exact_requirements`]), so subscriptions
//! can be indexed by `type` and the like.
//!
//! ```
//! use eventmesh_filter::{compile, FilterJson};
//! use eventmesh_core::{CloudEvent, ExtValue};
//!
//! let filters: Vec<FilterJson> = serde_json::from_str(
//!     r#"[{"prefix": {"type": "order."}}, {"sql": "amount > 100"}]"#,
//! ).unwrap();
//! let filter = compile(&filters).unwrap();
//!
//! let mut event = CloudEvent {
//!     id: "1".into(),
//!     source: "/shop".into(),
//!     ty: "order.created".into(),
//!     ..CloudEvent::default()
//! };
//! event.set_extension("amount", ExtValue::Int(250));
//! let outcome = filter.matches(&event);
//! assert!(outcome.matched && !outcome.errored);
//! ```
//!
//! The crate depends on `eventmesh-core` and serde only; it does no I/O.

pub mod attributes;
pub mod cesql;
pub mod dialect;
pub mod error;

pub use attributes::{AttrKey, AttrValue, Attributes, ContextAttr};
pub use cesql::{ErrorKind, EvalError, Evaluation, Expression, ParseError, Value};
pub use dialect::{compile, Filter, FilterJson, MAX_FILTER_DEPTH};
pub use error::{FilterError, FilterProblem};

/// The result of matching one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MatchOutcome {
    /// The event passes the filter.
    pub matched: bool,
    /// An expression raised an evaluation error (the event then did not
    /// pass that expression); callers count these.
    pub errored: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiled_filters_can_be_shared_across_threads() {
        fn shared<T: Send + Sync + Clone + 'static>() {}
        shared::<Filter>();
        shared::<Expression>();
        shared::<FilterError>();
        let _: &dyn Attributes = &eventmesh_core::CloudEvent::default();
    }
}
