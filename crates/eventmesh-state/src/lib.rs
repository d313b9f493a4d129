//! The runtime's state stores, each behind a trait so that the dispatcher
//! and the transports never see a backend:
//! - [`OffsetStore`]: committed offsets per (consumer, topic, partition), in
//!   the node's local RocksDB (`offsets` column family);
//! - [`DeliveryStateStore`]: the in-flight delivery ledger, one entry per
//!   unacknowledged event keyed by (consumer, topic, partition, offset), in
//!   the local RocksDB (`deliveries` column family);
//! - [`SubscriptionStore`]: subscriptions, in the meta store under `/em/subs/`;
//! - [`DeadLetterStore`]: dead letters under `/em/dlq/`, first write wins;
//! - [`TaskStore`]: tasks under `/em/tasks/`, create first-write-wins, status by CAS;
//! - [`SessionRegistry`]: agents (epoch-fenced), bindings and sessions under
//!   `/em/agents/`, `/em/bindings/`, `/em/sessions/`;
//! - [`MqttStore`]: MQTT sessions and retained messages under
//!   `/em/mqtt/sessions/` and `/em/mqtt/retained/`.

pub mod dead_letters;
pub mod deliveries;
pub mod error;
pub mod mqtt;
pub mod offsets;
pub mod push_settings;
pub mod sessions;
pub mod subscriptions;
pub mod tasks;

pub use dead_letters::{DeadLetter, DeadLetterStore};
pub use deliveries::{DeliveryStateStore, LedgerEntry, RocksDeliveryStateStore};
pub use error::StateError;
pub use mqtt::{MqttSession, MqttStore, MqttSubscription, Retained};
pub use offsets::{OffsetStore, RocksOffsetStore};
pub use push_settings::{ContentMode, PushSettingError, PushSettings};
pub use sessions::{Agent, AgentStatus, Session, SessionRegistry};
pub use subscriptions::{
    is_secret_header, DeliveryMode, StartFrom, Subscription, SubscriptionChange, SubscriptionSpec,
    SubscriptionStore,
};
pub use tasks::{Task, TaskState, TaskStore, Updated};
