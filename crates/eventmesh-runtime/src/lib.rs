//! The event mesh runtime: ingress (publish into the log), subscriptions,
//! the per-consumer dispatchers that push or hand out events and commit
//! offsets on acknowledgement, and the delivery topology.
//!
//! Transports call [`Runtime`] and [`IngressService`]; they never touch the
//! log, the meta store or the state stores directly.

pub mod access;
pub mod cluster;
pub mod creator;
pub mod dispatcher;
pub mod error;
pub mod filters;
pub mod handoff;
pub mod ingress;
pub mod mailbox;
pub mod metrics;
pub mod push;
pub mod runtime;
pub mod schedule;
pub mod sieve;
pub mod ssrf;
pub mod topology;
pub mod trace;

pub use access::{TopicAccess, Unchecked};
pub use creator::Creator;
pub use dispatcher::DispatchSettings;
pub use dispatcher::{Policy, Settle, Settled};
pub use error::{ErrorKind, RuntimeError};
pub use ingress::{IngressService, IngressSettings, PublishTicket, Published};
pub use metrics::Metrics;
pub use runtime::{settle_answer, ForwardedDeliveries, ForwardedSettle, SettleAnswer};
pub use runtime::{Check, FindRequest, FoundRequest, Replied, ReplyAnswer, MAX_REQUEST_WAIT};
pub use runtime::{
    ClientStatus, ClientSubscription, ConsumerPartition, ConsumerView, Lifecycle, Ownership,
    PartitionView, PendingRequest, PolledDelivery, RetentionView, Runtime, Stores, StreamGuard,
    SubscribeRequest, SubscriptionStatus, TopicDetail, TopicStatus, CORRELATION,
};
pub use ssrf::WebhookGuard;
pub use trace::PublishSpans;
