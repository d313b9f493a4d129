//! The runtime's state stores, each behind a trait so that the dispatcher
//! and the transports never see a backend:
//! - [`OffsetStore`]: committed offsets per (consumer, topic, partition), in
//!   the node's local RocksDB (`offsets` column family);
//! - [`SubscriptionStore`]: subscriptions, in the meta store under `/em/subs/`.

pub mod error;
pub mod offsets;
pub mod subscriptions;

pub use error::StateError;
pub use offsets::{OffsetStore, RocksOffsetStore};
pub use subscriptions::{DeliveryMode, StartFrom, Subscription, SubscriptionStore};
