//! The `etcd` meta store: cluster state in an etcd v3 cluster, shared by
//! every node that points at it.
//!
//! How each operation maps onto etcd:
//! - `get`: a range read of the one key; the returned revision is the key's
//!   `mod_revision`.
//! - `snapshot_prefix` / `get_prefix`: a prefix range read (etcd returns it
//!   sorted by key) plus the revision of the response header, which is the
//!   store revision the read reflects.
//! - `put`: a plain put (it also detaches the key from any lease); returns
//!   the revision of the response header.
//! - `put_if_absent`: a transaction `create_revision(key) == 0` → put.
//! - `compare_and_swap(key, expected, new)`: a transaction whose condition
//!   is `create_revision(key) == 0` when `expected` is `None`, and
//!   `value(key) == expected` otherwise; then put. A key that does not exist
//!   never equals a value, so `Some(_)` against an absent key is false.
//! - `delete`: a delete of the one key; true when etcd deleted something.
//! - `watch_prefix(prefix, after)`: an etcd watch on the prefix starting at
//!   revision `after + 1` (or at "now" for `after == 0`). Puts and deletes
//!   become [`WatchEvent`]s carrying the event's `mod_revision`.
//!   `watch_prefix` returns once etcd confirmed the watch, so a change made
//!   after it returned is always seen.
//! - leases: `grant_lease` grants an etcd lease whose TTL is the requested
//!   one rounded up to whole seconds (at least 1; etcd may raise it to its
//!   own minimum, about 2 s with default settings). `keep_alive` opens a
//!   keep-alive stream, sends one renewal and reads one answer; an answer
//!   with TTL 0 means the lease is gone (`LeaseNotFound`). `revoke_lease`
//!   revokes it (a lease that is already gone counts as revoked), and
//!   `put_with_lease` is a put with the lease attached; etcd refuses it with
//!   "requested lease not found" once the lease ended (`LeaseNotFound`).
//!
//! Failure behaviour:
//! - Every call is bounded by [`EtcdSettings::timeout`]: a call that gets no
//!   answer in time fails with [`MetaError::Timeout`] (an etcd that is
//!   frozen, or unreachable while the client is still trying to connect),
//!   and a call that is refused fails with [`MetaError::Unavailable`] (etcd
//!   down, connection refused or reset, no leader, authentication errors,
//!   any other gRPC error). No call hangs.
//! - The client keeps no connection state the caller has to manage: when
//!   etcd comes back, the next calls on the same [`EtcdMetaStore`] reconnect
//!   by themselves.
//! - [`EtcdMetaStore::connect`] does not need etcd to be up: without
//!   credentials or TLS it only sets the client up, and connects on the
//!   first call. With credentials it authenticates at once, and with TLS it
//!   asks etcd for its status once (both bounded by the timeout), so it
//!   fails when etcd cannot be reached or a certificate is refused.
//! - TLS (`https://` endpoints, see `etcd_tls`): the PEM files are read and
//!   checked before anything else; one that cannot be used fails `connect`
//!   with [`MetaError::Config`] naming it. A handshake that fails (etcd's
//!   certificate not trusted, the client's missing or refused) makes a call
//!   fail with [`MetaError::Tls`].
//! - A watch whose start revision etcd already compacted fails with
//!   [`MetaError::Compacted`]. etcd reports that right after it confirmed
//!   the watch, so the error normally arrives as the first item of the
//!   stream rather than from `watch_prefix` itself; callers handle both.
//! - A watch whose connection breaks (etcd killed, restarted, or frozen long
//!   enough for the HTTP/2 keep-alive to give up) yields one
//!   `Err(MetaError::Unavailable)` and ends. The caller resumes with a new
//!   watch from the last revision it saw; etcd replays what it missed.

use std::collections::VecDeque;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, PutOptions, Txn, TxnOp,
    WatchOptions,
};
use futures::stream::{self, StreamExt};

use crate::error::{MetaError, Result};
use crate::lease::LeaseId;
use crate::store::{KeyValue, MetaStore};
use crate::watch::{WatchEvent, WatchStream};

/// gRPC status codes this backend tells apart (tonic's `Code` values).
const GRPC_DEADLINE_EXCEEDED: i32 = 4;
const GRPC_NOT_FOUND: i32 = 5;

/// How often an idle HTTP/2 connection with open streams (watches) is
/// pinged. etcd's servers reject pings more frequent than every 5 s.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// Where the etcd cluster is and how long a call may take: the
/// configuration's own settings type, so that nothing copies it field by
/// field.
pub use eventmesh_core::config::EtcdSettings;

/// A [`MetaStore`] in etcd. Cheap to clone: clones share one connection.
#[derive(Clone)]
pub struct EtcdMetaStore {
    client: Client,
    timeout: Duration,
}

impl std::fmt::Debug for EtcdMetaStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdMetaStore")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

fn timeout_ms(timeout: Duration) -> u64 {
    u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)
}

/// Maps an etcd client error to the store's error.
fn map_err(e: etcd_client::Error, timeout: Duration) -> MetaError {
    if let Some(cause) = crate::etcd_tls::failure(&e) {
        return MetaError::Tls(format!("etcd: {cause}"));
    }
    match e {
        etcd_client::Error::GRpcStatus(status) => {
            if status.code() as i32 == GRPC_DEADLINE_EXCEEDED {
                MetaError::Timeout(timeout_ms(timeout))
            } else {
                MetaError::Unavailable(format!(
                    "etcd: {} ({})",
                    status.message(),
                    status.code().description()
                ))
            }
        }
        other => MetaError::Unavailable(eventmesh_core::redact::text(&format!("etcd: {other}"))),
    }
}

/// Whether etcd said the lease does not exist (expired or revoked).
fn is_lease_not_found(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(status) => {
            status.code() as i32 == GRPC_NOT_FOUND && status.message().contains("lease not found")
        }
        // The client's own keep-alive answers "lease not found" for a
        // renewal answered with TTL 0.
        etcd_client::Error::LeaseKeepAliveError(msg) => msg.contains("not found"),
        _ => false,
    }
}

fn revision(rev: i64) -> u64 {
    u64::try_from(rev).unwrap_or(0)
}

/// The first key after every key starting with `prefix` (etcd's range end
/// for a prefix): its last byte below 0xff incremented, what follows it
/// dropped; `\0` (every key) when there is none.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn header_revision(header: Option<&etcd_client::ResponseHeader>) -> Result<u64> {
    header
        .map(|h| revision(h.revision()))
        .ok_or_else(|| MetaError::Corrupt("etcd response without a header".into()))
}

fn key_string(raw: &[u8]) -> Result<String> {
    String::from_utf8(raw.to_vec()).map_err(|_| MetaError::Corrupt("etcd key is not UTF-8".into()))
}

fn to_key_value(kv: &etcd_client::KeyValue) -> Result<KeyValue> {
    Ok(KeyValue {
        key: key_string(kv.key())?,
        value: Bytes::copy_from_slice(kv.value()),
        revision: revision(kv.mod_revision()),
    })
}

/// Whole seconds for an etcd lease: rounded up, at least 1.
fn ttl_seconds(ttl: Duration) -> i64 {
    let secs = ttl.as_millis().div_ceil(1000).max(1);
    i64::try_from(secs).unwrap_or(i64::MAX)
}

impl EtcdMetaStore {
    /// Sets up a client for `config.endpoints`. See the module docs: without
    /// credentials or TLS this does not contact etcd; with credentials it
    /// authenticates and with TLS it asks etcd for its status, bounded by
    /// `config.timeout`. A TLS refusal is [`MetaError::Tls`], a TLS file that
    /// cannot be used [`MetaError::Config`].
    pub async fn connect(config: EtcdSettings) -> Result<Self> {
        if !crate::etcd_tls::wanted(&config) {
            return Self::open(config).await;
        }
        match Self::open(config.clone()).await {
            // A client certificate etcd refuses surfaces as a cancelled
            // request; a handshake of our own reads etcd's reason.
            Err(MetaError::Unavailable(cause)) => {
                match crate::etcd_tls::diagnose(&config, config.timeout).await {
                    Some(refused) => Err(MetaError::Tls(format!("etcd: {refused}"))),
                    None => Err(MetaError::Unavailable(cause)),
                }
            }
            other => other,
        }
    }

    async fn open(config: EtcdSettings) -> Result<Self> {
        if config.endpoints.is_empty() {
            return Err(MetaError::Unavailable(
                "no etcd endpoints configured".into(),
            ));
        }
        let timeout = config.timeout;
        let tls = crate::etcd_tls::options(&config)?;
        let probe = tls.is_some() && config.user.is_none();
        let mut options = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_keep_alive(KEEP_ALIVE_INTERVAL, timeout.max(Duration::from_secs(1)))
            // Pings without open streams make etcd close the connection.
            .with_keep_alive_while_idle(false)
            .with_require_leader(true);
        if let Some(tls) = tls {
            options = options.with_tls(tls);
        }
        match (config.user, config.password) {
            (Some(user), Some(password)) => {
                options = options
                    .with_user(user, password)
                    .with_auto_token_refresh(true);
            }
            (None, None) => {}
            _ => {
                return Err(MetaError::Unavailable(
                    "etcd user and password must be given together".into(),
                ))
            }
        }
        let client =
            tokio::time::timeout(timeout, Client::connect(&config.endpoints, Some(options)))
                .await
                .map_err(|_| MetaError::Timeout(timeout_ms(timeout)))?
                .map_err(|e| map_err(e, timeout))?;
        let store = EtcdMetaStore { client, timeout };
        if probe {
            // The handshake happens now, so that a certificate either side
            // refuses fails here rather than at the first call.
            let err = store.err();
            store
                .call(|mut c| async move { c.status().await.map_err(err) })
                .await?;
        }
        Ok(store)
    }

    /// Runs one etcd call on a clone of the client, bounded by the timeout.
    async fn call<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        tokio::time::timeout(self.timeout, f(self.client.clone()))
            .await
            .map_err(|_| MetaError::Timeout(timeout_ms(self.timeout)))?
    }

    fn err(&self) -> impl Fn(etcd_client::Error) -> MetaError {
        let timeout = self.timeout;
        move |e| map_err(e, timeout)
    }

    /// Lease errors: "lease not found" becomes `LeaseNotFound`.
    fn lease_err(&self, lease: LeaseId) -> impl Fn(etcd_client::Error) -> MetaError {
        let timeout = self.timeout;
        move |e| {
            if is_lease_not_found(&e) {
                MetaError::LeaseNotFound(lease.0)
            } else {
                map_err(e, timeout)
            }
        }
    }

    /// A put that happens only when `condition` holds. True when written.
    async fn put_when(&self, condition: Compare, key: &str, value: Bytes) -> Result<bool> {
        let txn = Txn::new()
            .when([condition])
            .and_then([TxnOp::put(key, value.to_vec(), None)]);
        let err = self.err();
        self.call(|mut c| async move { c.txn(txn).await.map_err(err) })
            .await
            .map(|r| r.succeeded())
    }

    async fn put_with_options(
        &self,
        key: &str,
        value: Bytes,
        options: Option<PutOptions>,
        err: impl Fn(etcd_client::Error) -> MetaError,
    ) -> Result<u64> {
        let key = key.to_string();
        let resp = self
            .call(|mut c| async move { c.put(key, value.to_vec(), options).await.map_err(err) })
            .await?;
        header_revision(resp.header())
    }
}

/// State of one watch stream between items.
struct WatchState {
    inner: etcd_client::WatchStream,
    /// Events of the last response not handed out yet.
    pending: VecDeque<WatchEvent>,
    /// The revision the caller asked to resume after, for errors.
    requested: u64,
    done: bool,
}

impl WatchState {
    /// The next item, or `None` once the stream ended.
    async fn next_item(&mut self) -> Option<Result<WatchEvent>> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                self.requested = ev.revision();
                return Some(Ok(ev));
            }
            if self.done {
                return None;
            }
            let resp = match self.inner.message().await {
                Ok(Some(resp)) => resp,
                Ok(None) => {
                    self.done = true;
                    return Some(Err(MetaError::Unavailable(
                        "etcd closed the watch stream".into(),
                    )));
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(MetaError::Unavailable(format!(
                        "etcd watch stream broke: {e}"
                    ))));
                }
            };
            if resp.compact_revision() > 0 {
                self.done = true;
                return Some(Err(compacted(self.requested, resp.compact_revision())));
            }
            if resp.canceled() {
                self.done = true;
                return Some(Err(MetaError::Unavailable(format!(
                    "etcd canceled the watch: {}",
                    resp.cancel_reason()
                ))));
            }
            for ev in resp.events() {
                match to_watch_event(ev) {
                    Ok(ev) => self.pending.push_back(ev),
                    Err(e) => {
                        self.done = true;
                        self.pending.clear();
                        return Some(Err(e));
                    }
                }
            }
        }
    }
}

/// etcd keeps revisions from `compact_revision` on; everything before it
/// is gone (the same meaning `Compacted::compacted` has for the other
/// backends: the last revision that can no longer be replayed).
fn compacted(requested: u64, compact_revision: i64) -> MetaError {
    MetaError::Compacted {
        requested,
        compacted: revision(compact_revision).saturating_sub(1),
    }
}

fn to_watch_event(ev: &etcd_client::Event) -> Result<WatchEvent> {
    let kv = ev
        .kv()
        .ok_or_else(|| MetaError::Corrupt("etcd watch event without a key".into()))?;
    Ok(match ev.event_type() {
        EventType::Put => WatchEvent::Put(to_key_value(kv)?),
        EventType::Delete => WatchEvent::Delete {
            key: key_string(kv.key())?,
            revision: revision(kv.mod_revision()),
        },
    })
}

#[async_trait]
impl MetaStore for EtcdMetaStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let key = key.to_string();
        let err = self.err();
        let resp = self
            .call(|mut c| async move { c.get(key, None).await.map_err(err) })
            .await?;
        resp.kvs().first().map(to_key_value).transpose()
    }

    async fn get_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<KeyValue>> {
        // From just after `after` (a key plus a zero byte is the next
        // possible key) to the end of the prefix's range.
        let start: Vec<u8> = match after {
            Some(a) if a >= prefix => {
                let mut k = a.as_bytes().to_vec();
                k.push(0);
                k
            }
            _ => prefix.as_bytes().to_vec(),
        };
        let end = prefix_end(prefix.as_bytes());
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let err = self.err();
        let resp = self
            .call(|mut c| async move {
                c.get(
                    start,
                    Some(GetOptions::new().with_range(end).with_limit(limit)),
                )
                .await
                .map_err(err)
            })
            .await?;
        resp.kvs().iter().map(to_key_value).collect()
    }

    async fn snapshot_prefix(&self, prefix: &str) -> Result<(Vec<KeyValue>, u64)> {
        let prefix = prefix.to_string();
        let err = self.err();
        let resp = self
            .call(|mut c| async move {
                c.get(prefix, Some(GetOptions::new().with_prefix()))
                    .await
                    .map_err(err)
            })
            .await?;
        let rev = header_revision(resp.header())?;
        // etcd sorts a range by key.
        let kvs = resp
            .kvs()
            .iter()
            .map(to_key_value)
            .collect::<Result<Vec<_>>>()?;
        Ok((kvs, rev))
    }

    async fn watch_prefix(&self, prefix: &str, after_revision: u64) -> Result<WatchStream> {
        let mut options = WatchOptions::new().with_prefix();
        if after_revision > 0 {
            let start = i64::try_from(after_revision.saturating_add(1)).unwrap_or(i64::MAX);
            options = options.with_start_revision(start);
        }
        let prefix = prefix.to_string();
        let err = self.err();
        let state = self
            .call(|mut c| async move {
                let mut inner = c.watch(prefix, Some(options)).await.map_err(&err)?;
                // Wait for etcd to confirm the watch; only then is every
                // later change guaranteed to reach it.
                let mut pending = VecDeque::new();
                loop {
                    let resp = inner.message().await.map_err(&err)?.ok_or_else(|| {
                        MetaError::Unavailable("etcd closed the watch stream".into())
                    })?;
                    if resp.compact_revision() > 0 {
                        return Err(compacted(after_revision, resp.compact_revision()));
                    }
                    if resp.canceled() {
                        return Err(MetaError::Unavailable(format!(
                            "etcd refused the watch: {}",
                            resp.cancel_reason()
                        )));
                    }
                    for ev in resp.events() {
                        pending.push_back(to_watch_event(ev)?);
                    }
                    if resp.created() {
                        break;
                    }
                }
                Ok(WatchState {
                    inner,
                    pending,
                    requested: after_revision,
                    done: false,
                })
            })
            .await?;
        Ok(stream::unfold(state, |mut state| async move {
            let item = state.next_item().await?;
            Some((item, state))
        })
        .boxed())
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseId> {
        let secs = ttl_seconds(ttl);
        let err = self.err();
        let resp = self
            .call(|mut c| async move { c.lease_grant(secs, None).await.map_err(err) })
            .await?;
        if !resp.error().is_empty() {
            return Err(MetaError::Unavailable(format!(
                "etcd refused the lease: {}",
                resp.error()
            )));
        }
        Ok(LeaseId(resp.id()))
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<()> {
        let err = self.lease_err(lease);
        // The client sends one renewal when it opens the stream and reads the
        // answer; a TTL of 0 there comes back as "lease not found".
        self.call(|mut c| async move {
            let (_keeper, _stream) = c.lease_keep_alive(lease.0).await.map_err(err)?;
            Ok(())
        })
        .await
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<()> {
        let err = self.lease_err(lease);
        let res = self
            .call(|mut c| async move { c.lease_revoke(lease.0).await.map_err(err) })
            .await;
        match res {
            Ok(_) | Err(MetaError::LeaseNotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn put_with_lease(&self, key: &str, value: Bytes, lease: LeaseId) -> Result<u64> {
        let options = PutOptions::new().with_lease(lease.0);
        self.put_with_options(key, value, Some(options), self.lease_err(lease))
            .await
    }

    async fn put(&self, key: &str, value: Bytes) -> Result<u64> {
        self.put_with_options(key, value, None, self.err()).await
    }

    async fn put_if_absent(&self, key: &str, value: Bytes) -> Result<bool> {
        let absent = Compare::create_revision(key, CompareOp::Equal, 0);
        self.put_when(absent, key, value).await
    }

    async fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        new: Bytes,
    ) -> Result<bool> {
        let condition = match expected {
            None => Compare::create_revision(key, CompareOp::Equal, 0),
            Some(v) => Compare::value(key, CompareOp::Equal, v.to_vec()),
        };
        self.put_when(condition, key, new).await
    }

    async fn delete(&self, key: &str) -> Result<bool> {
        let key = key.to_string();
        let err = self.err();
        let resp = self
            .call(|mut c| async move { c.delete(key, None).await.map_err(err) })
            .await?;
        Ok(resp.deleted() > 0)
    }

    async fn put_guarded(
        &self,
        guard: &str,
        guard_revision: u64,
        key: &str,
        value: Bytes,
        lease: Option<LeaseId>,
    ) -> Result<Option<u64>> {
        let condition = at_revision(guard, guard_revision);
        let options = lease.map(|l| PutOptions::new().with_lease(l.0));
        let txn = Txn::new()
            .when([condition])
            .and_then([TxnOp::put(key, value.to_vec(), options)]);
        let timeout = self.timeout;
        let err = move |e: etcd_client::Error| match lease {
            Some(l) if is_lease_not_found(&e) => MetaError::LeaseNotFound(l.0),
            _ => map_err(e, timeout),
        };
        let resp = self
            .call(|mut c| async move { c.txn(txn).await.map_err(err) })
            .await?;
        if !resp.succeeded() {
            return Ok(None);
        }
        header_revision(resp.header()).map(Some)
    }

    async fn delete_at(&self, key: &str, revision: u64) -> Result<bool> {
        let txn = Txn::new()
            .when([at_revision(key, revision)])
            .and_then([TxnOp::delete(key, None)]);
        let err = self.err();
        self.call(|mut c| async move { c.txn(txn).await.map_err(err) })
            .await
            .map(|r| r.succeeded())
    }
}

/// The key was last changed at `revision` (0: the key is absent).
fn at_revision(key: &str, revision: u64) -> Compare {
    if revision == 0 {
        Compare::create_revision(key, CompareOp::Equal, 0)
    } else {
        Compare::mod_revision(key, CompareOp::Equal, revision as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_ttl_rounds_up_to_whole_seconds() {
        assert_eq!(ttl_seconds(Duration::ZERO), 1);
        assert_eq!(ttl_seconds(Duration::from_millis(400)), 1);
        assert_eq!(ttl_seconds(Duration::from_secs(2)), 2);
        assert_eq!(ttl_seconds(Duration::from_millis(2001)), 3);
    }

    #[test]
    fn compacted_reports_the_last_revision_gone() {
        assert!(matches!(
            compacted(3, 10),
            MetaError::Compacted {
                requested: 3,
                compacted: 9
            }
        ));
    }
}
