//! What the rest of the runtime sees of a dispatcher: its settings, the
//! commands it takes, the answers to a settle, the observer told of every
//! hand-out, and what it needs from the runtime.
//!
//! Invariant: a [`Command::Settle`] is answered `Done` (or `DoneForeign`)
//! only when it changed something; `Unknown` and `Foreign` change nothing,
//! and transports answer both the same way, so a foreign id cannot be told
//! from an unknown one.

use std::sync::Arc;

use eventmesh_core::config::DeliveryConfig;
use eventmesh_core::CloudEvent;
use eventmesh_state::{DeadLetterStore, DeliveryStateStore, OffsetStore};
use eventmesh_storage::EventLog;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::ids::{DeliveryId, Slot, Ticket};
use super::router::Member;
use crate::creator::Creator;
use crate::metrics::Metrics;

/// What every dispatcher works with: the delivery section of the
/// configuration as it is, and the webhook guard every push goes through.
#[derive(Debug, Clone)]
pub struct DispatchSettings {
    pub delivery: DeliveryConfig,
    /// The ranges webhook pushes may not reach, checked on every push.
    pub webhook_guard: Arc<crate::ssrf::WebhookGuard>,
}

/// How a client settles a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settle {
    Ack,
    /// Gives it back: a failed attempt, retried after the backoff under a
    /// new id (or dead-lettered when it was the last).
    Nack,
    /// Gives it back untried: no attempt is counted, and it goes out again
    /// at once under a new id (a holder that cannot pass it on for now,
    /// such as a mesh link whose remote is down, and stops taking more).
    Release,
    /// Dead-letters it now with this reason, whatever attempts it has left
    /// (a holder that knows no retry can succeed).
    Reject(std::sync::Arc<str>),
}

impl Settle {
    /// How it is named on the wire between instances and in messages.
    pub fn name(&self) -> &'static str {
        match self {
            Settle::Ack => "ack",
            Settle::Nack => "nack",
            Settle::Release => "release",
            Settle::Reject(_) => "reject",
        }
    }
}

/// How a creator check on a settle (or a reply) is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// Another creator's delivery is refused (`Foreign`): nothing changes.
    #[default]
    Enforce,
    /// Another creator's delivery is settled anyway and reported as
    /// `DoneForeign` (a permissive gate counts it and lets it through).
    Permissive,
}

/// The answer to a [`Command::Settle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    Done,
    /// Settled under [`Policy::Permissive`], although it was handed to a
    /// client of another creator.
    DoneForeign,
    /// No such delivery: malformed, from another run, a wrong nonce, or
    /// settled already.
    Unknown,
    /// The delivery exists but was handed to a client of another creator;
    /// nothing changed. Transports answer it exactly like `Unknown`.
    Foreign,
    /// The delivery's partition is no longer this instance's (another
    /// instance took it over, or this one's lease ended): nothing is
    /// written; the event comes again from the partition's owner.
    Fenced,
}

pub enum Command {
    /// Acknowledges or gives back a delivery. With `by`, only when the
    /// member it was handed to was created by `by` (else `Foreign`), or
    /// anyway under [`Policy::Permissive`] (then `DoneForeign`).
    Settle {
        id: DeliveryId,
        how: Settle,
        by: Option<Creator>,
        policy: Policy,
        reply: oneshot::Sender<Settled>,
    },
    /// The consumer's members and filter now.
    Members(Membership),
    /// A streaming client's connection ended (or it resumed on a new one):
    /// the deliveries it took by `before` go out again at once, to
    /// another online member of the group when there is one, else to it
    /// (for its reconnect); with `waiting`, those still in its mailbox too.
    /// One it had taken counts as a failed attempt, and its id still
    /// settles it until it is handed out again. The bound keeps two
    /// releases racing (a stream's close seen after its client resumed on
    /// a new one) from sending out twice what the new stream took.
    Release {
        client: String,
        before: Instant,
        waiting: bool,
    },
    /// Stop handing out and wait (until the deadline) for what is in the
    /// clients' hands to come back; answered when nothing is or at the
    /// deadline. Acks keep working until `Stop`.
    Drain {
        deadline: Instant,
        done: oneshot::Sender<()>,
    },
    Stop(oneshot::Sender<()>),
    /// Partitions this instance now owns too: read each from its committed
    /// offset (`PARTITION_OWNED_PULL`).
    Extend(Vec<(u32, u64)>),
    /// How many deliveries are in clients' hands now (taken by a poll or a
    /// stream and not settled, or a webhook call under way).
    Held(oneshot::Sender<usize>),
    /// The outcome of the dispatcher's own background work.
    Internal(Internal),
}

/// Sent by a dispatcher's background tasks to itself.
pub struct Internal(pub(super) Report);

pub(super) enum Report {
    Pushed {
        slot: Slot,
        ticket: Ticket,
        result: std::result::Result<(), String>,
    },
    DeadLettered {
        slot: Slot,
        result: std::result::Result<(), String>,
    },
}

/// Told of every delivery handed to a member (mailbox push or webhook
/// call); request-reply uses it to bind replies to the clients a request
/// reached.
pub trait HandOutObserver: Send + Sync {
    fn handed(&self, event: &CloudEvent, client: &str);
}

/// Observes nothing.
pub struct NoObserver;

impl HandOutObserver for NoObserver {
    fn handed(&self, _event: &CloudEvent, _client: &str) {}
}

/// The runtime's handle on a running dispatcher.
pub struct DispatcherHandle {
    /// Its state, for the steps other tasks take on it, and its commands
    /// (see [`Lane`]).
    pub lane: Arc<super::Lane>,
    pub join: JoinHandle<()>,
    /// The partitions it reads (more once extended).
    pub partitions: Vec<u32>,
}

/// Who a consumer's events go to: its members, and the filter every event
/// must pass before anything is spent on it (the members of a consumer
/// share one).
#[derive(Clone, Default)]
pub struct Membership {
    pub members: Vec<Member>,
    pub filter: Option<Arc<eventmesh_filter::Filter>>,
}

impl From<Vec<Member>> for Membership {
    fn from(members: Vec<Member>) -> Self {
        Membership {
            members,
            filter: None,
        }
    }
}

/// Everything a dispatcher needs from the runtime.
pub struct DispatcherDeps {
    pub boot: Arc<str>,
    pub log: Arc<dyn EventLog>,
    pub offsets: Arc<dyn OffsetStore>,
    pub dead_letters: DeadLetterStore,
    pub ledger: Arc<dyn DeliveryStateStore>,
    pub metrics: Arc<Metrics>,
    pub http: reqwest::Client,
    /// The webhook validation handshakes, per origin, of every push.
    pub handshakes: Arc<crate::push::Handshakes>,
    pub settings: DispatchSettings,
    pub observer: Arc<dyn HandOutObserver>,
    /// The claims of this instance (`PARTITION_OWNED_PULL`), for the
    /// partitions to read and the tokens writes are fenced by.
    pub fence: Option<Arc<crate::cluster::Fence>>,
    /// The shared reads of filtered consumers (see `crate::sieve`).
    pub sieves: Arc<crate::sieve::Sieves>,
    /// The dispatchers of topics kept in memory, offered each event as it
    /// is appended (see `crate::handoff`).
    pub handoffs: Arc<crate::handoff::Handoffs>,
}

impl DispatcherDeps {
    /// What a webhook push goes through: the client, the outbound guard,
    /// the handshakes and the timeout of the settings.
    pub(crate) fn pusher(&self) -> crate::push::Pusher<'_> {
        crate::push::Pusher {
            client: &self.http,
            guard: &self.settings.webhook_guard,
            handshakes: &self.handshakes,
            timeout: self.settings.delivery.webhook_timeout,
        }
    }
}
