//! Cluster state: the [`MetaStore`] trait, its `embedded` backend (the
//! `meta` column family of the node's local RocksDB), its `etcd` backend (an
//! etcd v3 cluster shared by the nodes), a test-only in-memory backend, and
//! the conformance suite ([`tck`]) every backend passes.
//!
//! Contract kept by every backend:
//! - every mutation gets a revision greater than all earlier ones;
//! - `put_if_absent` is first-write-wins, `compare_and_swap` writes only when
//!   the current value equals the expected one (`None` = key absent);
//! - a call that cannot reach the backend returns an error, never hangs;
//! - a watch delivers every change under its prefix in revision order, or
//!   fails with `Compacted` when it cannot, never skipping one silently;
//! - a key written with a lease is deleted once the lease ends.

pub mod embedded;
pub mod error;
pub mod etcd;
mod etcd_tls;
#[cfg(any(test, feature = "testing"))]
pub mod fault;
pub mod lease;
#[cfg(any(test, feature = "testing"))]
pub mod memory;
pub mod mirror;
pub mod store;
pub mod tck;
pub mod watch;

pub use embedded::EmbeddedMetaStore;
pub use error::MetaError;
pub use etcd::{EtcdMetaStore, EtcdSettings};
pub use lease::LeaseId;
pub use mirror::{follow_prefix, Mirror};
pub use store::{KeyValue, MetaStore};
pub use watch::{WatchEvent, WatchStream};
