//! Subscriptions, kept in the meta store under
//! `/em/subs/<group>/<topic>/<clientId>` as JSON, so they survive restarts
//! and, with a cluster meta store, are shared by every instance.
//!
//! Writes go to the meta store. [`SubscriptionStore::follow`] reads every
//! subscription and then follows each change through a prefix watch,
//! resuming from the last revision it saw after a failure, and re-reading
//! the whole prefix (reporting the difference) when the meta store can no
//! longer replay from there. A local view fed this way converges on the
//! meta store's view after every outage.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use eventmesh_meta::{KeyValue, MetaError, MetaStore, WatchEvent};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::error::{Result, StateError};
use crate::push_settings::PushSettings;

pub const SUBS_PREFIX: &str = "/em/subs/";

/// How the members of a group share a topic's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DeliveryMode {
    /// Each event goes to exactly one member, sticky by partition key.
    LoadBalance,
    /// Every member gets every event.
    Broadcast,
}

/// Where a new consumer starts reading: the end of the log, its
/// beginning, or the first event appended at or after a time (ms since the
/// epoch). On the wire and in the meta store: `"latest"`, `"earliest"` or
/// an RFC 3339 timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFrom {
    Latest,
    Earliest,
    Time(u64),
}

impl StartFrom {
    /// `latest`, `earliest` or an RFC 3339 timestamp; the reason when it is
    /// none of them.
    pub fn parse(v: &str) -> std::result::Result<StartFrom, String> {
        match v {
            "latest" => Ok(StartFrom::Latest),
            "earliest" => Ok(StartFrom::Earliest),
            t => eventmesh_core::time::parse_rfc3339_ms(t)
                .map(StartFrom::Time)
                .map_err(|e| {
                    format!("{t:?} is not latest, earliest or an RFC 3339 timestamp ({e})")
                }),
        }
    }
}

impl std::fmt::Display for StartFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartFrom::Latest => f.write_str("latest"),
            StartFrom::Earliest => f.write_str("earliest"),
            StartFrom::Time(ms) => f.write_str(&eventmesh_core::time::format_rfc3339_ms(*ms)),
        }
    }
}

impl Serialize for StartFrom {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for StartFrom {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let v = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        StartFrom::parse(&v).map_err(serde::de::Error::custom)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subscription {
    pub subscription_id: String,
    pub client_id: String,
    pub topic: String,
    pub group: String,
    pub mode: DeliveryMode,
    /// Webhook target; `None` means the client pulls (long poll).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    pub from: StartFrom,
    pub created_ms: u64,
    /// Who made it, when the security gate authenticated the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// Only events every filter matches are delivered: CloudEvents
    /// Subscriptions API filter objects as the subscriber sent them
    /// (checked when subscribing; the runtime compiles them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filters: Vec<serde_json::Value>,
    /// The roles the creator held when subscribing, for a pattern
    /// subscription: the access check of each topic the pattern attaches
    /// later is made for the tenant, principal and these roles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// For a pattern subscription starting at `latest`: the topics the
    /// pattern matched when it was made, read from their end. Any other
    /// topic it attaches (created later) is read from its start.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topics_at_subscribe: Vec<String>,
    /// HTTP headers sent with every webhook push (a Subscriptions API
    /// subscription's `protocolsettings.headers` and `sinkcredential`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Made through the CloudEvents Subscriptions API: what it asked for
    /// beyond the fields above (`None` for every other subscription).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<SubscriptionSpec>,
    /// How a webhook subscription's events are pushed (content mode,
    /// batching, handshake); its keys sit beside the others, each only
    /// when it is not the default.
    #[serde(default, flatten)]
    pub push: PushSettings,
}

/// What a CloudEvents Subscriptions API subscription keeps of its request
/// besides the runtime's fields, so that it is shown as it was asked for:
/// its `types` and `filters` as given (the subscription's `filters` hold
/// both, the types as one `any` filter first) and the non-secret fields of
/// its `sinkcredential` (the secret itself is only in the `Authorization`
/// header of [`Subscription::headers`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub types: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filters: Vec<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<BTreeMap<String, String>>,
}

/// Whether a push header carries a credential (its value is not shown to
/// operators): `Authorization`, `Proxy-Authorization`, `Cookie`, and names
/// that read as a secret (`x-api-key`, `x-auth-token`, ...).
pub fn is_secret_header(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    matches!(
        n.as_str(),
        "authorization" | "proxy-authorization" | "cookie"
    ) || n.ends_with("api-key")
        || n.ends_with("apikey")
        || eventmesh_core::redact::is_secret_name(&n)
}

impl Subscription {
    /// The subscription as operators see it: the values of push headers
    /// that carry a credential ([`is_secret_header`]) replaced by the
    /// redaction placeholder.
    pub fn redacted(&self) -> Subscription {
        let mut shown = self.clone();
        for (name, value) in shown.headers.iter_mut() {
            if is_secret_header(name) {
                *value = eventmesh_core::redact::PLACEHOLDER.to_string();
            }
        }
        shown
    }

    /// The consumer whose offsets this subscription reads and commits: the
    /// group for load-balanced members, the group and client for broadcast.
    pub fn consumer(&self) -> String {
        match self.mode {
            DeliveryMode::LoadBalance => self.group.clone(),
            DeliveryMode::Broadcast => format!("{}:{}", self.group, self.client_id),
        }
    }

    /// Whether `topic` is a pattern (`*` or `>` tokens) rather than one
    /// topic.
    pub fn is_pattern(&self) -> bool {
        eventmesh_core::pattern::is_pattern(&self.topic)
    }

    pub fn key(&self) -> String {
        format!(
            "{SUBS_PREFIX}{}/{}/{}",
            self.group, self.topic, self.client_id
        )
    }
}

/// Meta-backed subscription store.
#[derive(Clone)]
pub struct SubscriptionStore {
    meta: Arc<dyn MetaStore>,
}

impl SubscriptionStore {
    pub fn new(meta: Arc<dyn MetaStore>) -> Self {
        SubscriptionStore { meta }
    }

    /// Stores (or replaces) a subscription.
    pub async fn put(&self, sub: &Subscription) -> Result<()> {
        let json = serde_json::to_vec(sub).map_err(|e| StateError::Corrupt {
            key: sub.key(),
            cause: e.to_string(),
        })?;
        self.meta.put(&sub.key(), Bytes::from(json)).await?;
        Ok(())
    }

    /// Removes one subscription; true when it existed.
    pub async fn remove(&self, sub: &Subscription) -> Result<bool> {
        Ok(self.meta.delete(&sub.key()).await?)
    }

    /// The subscription stored under a meta key now, if any.
    pub async fn get(&self, key: &str) -> Result<Option<Subscription>> {
        match self.meta.get(key).await? {
            Some(kv) => parse(kv).map(Some),
            None => Ok(None),
        }
    }

    /// Every stored subscription.
    pub async fn list(&self) -> Result<Vec<Subscription>> {
        self.meta
            .get_prefix(SUBS_PREFIX)
            .await?
            .into_iter()
            .map(parse)
            .collect()
    }

    /// Every stored subscription now, and a channel with every later change
    /// (made by this instance or any other sharing the meta store). The
    /// follower stops when the receiver is dropped.
    pub async fn follow(&self) -> Result<(Vec<Subscription>, mpsc::Receiver<SubscriptionChange>)> {
        let (kvs, revision) = self.meta.snapshot_prefix(SUBS_PREFIX).await?;
        let known: HashMap<String, Subscription> = kvs
            .into_iter()
            .filter_map(|kv| parse_or_warn(kv).map(|s| (s.key(), s)))
            .collect();
        let initial = known.values().cloned().collect();
        let (tx, rx) = mpsc::channel(1024);
        tokio::spawn(follow_loop(self.meta.clone(), known, revision, tx));
        Ok((initial, rx))
    }
}

/// One change seen by [`SubscriptionStore::follow`]. Changes are few (one
/// per subscribe or unsubscribe), so a `Put` is not boxed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(
    clippy::large_enum_variant,
    reason = "changes go one at a time through a channel, nearly all of them puts"
)]
pub enum SubscriptionChange {
    Put(Subscription),
    /// The meta key of a removed subscription.
    Removed(String),
}

fn parse(kv: KeyValue) -> Result<Subscription> {
    serde_json::from_slice(&kv.value).map_err(|e| StateError::Corrupt {
        key: kv.key,
        cause: e.to_string(),
    })
}

fn parse_or_warn(kv: KeyValue) -> Option<Subscription> {
    parse(kv)
        .map_err(|e| tracing::warn!(error = %e, "ignoring an unreadable subscription"))
        .ok()
}

const RETRY_MIN: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// Follows `/em/subs/` from `revision`, keeping `known` equal to the meta
/// store's view and reporting every difference on `tx`.
async fn follow_loop(
    meta: Arc<dyn MetaStore>,
    mut known: HashMap<String, Subscription>,
    mut revision: u64,
    tx: mpsc::Sender<SubscriptionChange>,
) {
    let mut backoff = RETRY_MIN;
    let mut resync = false;
    loop {
        if resync {
            match meta.snapshot_prefix(SUBS_PREFIX).await {
                Ok((kvs, rev)) => {
                    let now: HashMap<String, Subscription> = kvs
                        .into_iter()
                        .filter_map(|kv| parse_or_warn(kv).map(|s| (s.key(), s)))
                        .collect();
                    let mut changes = Vec::new();
                    for key in known.keys().filter(|k| !now.contains_key(*k)) {
                        changes.push(SubscriptionChange::Removed(key.clone()));
                    }
                    for (key, sub) in &now {
                        if known.get(key) != Some(sub) {
                            changes.push(SubscriptionChange::Put(sub.clone()));
                        }
                    }
                    for c in changes {
                        if tx.send(c).await.is_err() {
                            return;
                        }
                    }
                    known = now;
                    revision = rev;
                    resync = false;
                    tracing::info!(revision, "subscriptions re-read from the meta store");
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot re-read subscriptions; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(RETRY_MAX);
                    continue;
                }
            }
        }
        let mut stream = match meta.watch_prefix(SUBS_PREFIX, revision).await {
            Ok(s) => s,
            Err(MetaError::Compacted { .. }) => {
                resync = true;
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch subscriptions; retrying");
                if tx.is_closed() {
                    return;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(RETRY_MAX);
                continue;
            }
        };
        backoff = RETRY_MIN;
        loop {
            let item = tokio::select! {
                item = stream.next() => item,
                _ = tx.closed() => return,
            };
            let change = match item {
                Some(Ok(WatchEvent::Put(kv))) => {
                    revision = kv.revision;
                    let Some(sub) = parse_or_warn(kv) else {
                        continue;
                    };
                    if known.get(&sub.key()) == Some(&sub) {
                        continue;
                    }
                    known.insert(sub.key(), sub.clone());
                    SubscriptionChange::Put(sub)
                }
                Some(Ok(WatchEvent::Delete { key, revision: r })) => {
                    revision = r;
                    if known.remove(&key).is_none() {
                        continue;
                    }
                    SubscriptionChange::Removed(key)
                }
                Some(Err(MetaError::Compacted { .. })) => {
                    resync = true;
                    break;
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "subscription watch broke; resuming");
                    break;
                }
                None => break,
            };
            if tx.send(change).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventmesh_meta::memory::InMemoryMetaStore;

    fn sub(client: &str, mode: DeliveryMode) -> Subscription {
        Subscription {
            subscription_id: format!("id-{client}"),
            client_id: client.into(),
            topic: "orders".into(),
            group: "g".into(),
            mode,
            url: None,
            from: StartFrom::Latest,
            created_ms: 1,
            tenant: None,
            principal: None,
            filters: Vec::new(),
            headers: BTreeMap::new(),
            spec: None,
            roles: Vec::new(),
            topics_at_subscribe: Vec::new(),
            push: PushSettings::default(),
        }
    }

    #[tokio::test]
    async fn put_list_remove() {
        let store = SubscriptionStore::new(Arc::new(InMemoryMetaStore::new()));
        let a = sub("a", DeliveryMode::LoadBalance);
        let b = sub("b", DeliveryMode::Broadcast);
        store.put(&a).await.unwrap();
        store.put(&b).await.unwrap();
        let all = store.list().await.unwrap();
        assert_eq!(all, vec![a.clone(), b.clone()]);
        assert_eq!(a.consumer(), "g");
        assert_eq!(b.consumer(), "g:b");
        assert!(store.remove(&a).await.unwrap());
        assert!(!store.remove(&a).await.unwrap());
        assert_eq!(store.list().await.unwrap(), vec![b]);
    }

    async fn next(rx: &mut mpsc::Receiver<SubscriptionChange>) -> SubscriptionChange {
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("a change within 5 s")
            .expect("follower running")
    }

    #[tokio::test]
    async fn two_instances_converge_through_one_meta_store() {
        let meta: Arc<dyn MetaStore> = Arc::new(InMemoryMetaStore::new());
        let a = SubscriptionStore::new(meta.clone());
        let b = SubscriptionStore::new(meta.clone());
        a.put(&sub("early", DeliveryMode::LoadBalance))
            .await
            .unwrap();
        let (initial, mut rx) = b.follow().await.unwrap();
        assert_eq!(initial, vec![sub("early", DeliveryMode::LoadBalance)]);
        let late = sub("late", DeliveryMode::Broadcast);
        a.put(&late).await.unwrap();
        assert_eq!(next(&mut rx).await, SubscriptionChange::Put(late.clone()));
        a.remove(&late).await.unwrap();
        assert_eq!(next(&mut rx).await, SubscriptionChange::Removed(late.key()));
    }

    #[tokio::test]
    async fn follower_resumes_after_an_outage_without_missing_changes() {
        use eventmesh_meta::fault::FaultyMetaStore;
        let inner: Arc<dyn MetaStore> = Arc::new(InMemoryMetaStore::new());
        let faulty = FaultyMetaStore::new(inner.clone());
        let (_, mut rx) = SubscriptionStore::new(Arc::new(faulty.clone()))
            .follow()
            .await
            .unwrap();
        // The watch breaks; another instance writes meanwhile.
        faulty.partition();
        let writer = SubscriptionStore::new(inner.clone());
        let s1 = sub("x1", DeliveryMode::LoadBalance);
        let s2 = sub("x2", DeliveryMode::LoadBalance);
        writer.put(&s1).await.unwrap();
        writer.put(&s2).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        faulty.heal();
        assert_eq!(next(&mut rx).await, SubscriptionChange::Put(s1));
        assert_eq!(next(&mut rx).await, SubscriptionChange::Put(s2));
    }

    #[tokio::test]
    async fn follower_rereads_when_changes_are_compacted() {
        use eventmesh_meta::fault::FaultyMetaStore;
        let inner: Arc<dyn MetaStore> = Arc::new(InMemoryMetaStore::with_history(2));
        let writer = SubscriptionStore::new(inner.clone());
        let gone = sub("gone", DeliveryMode::LoadBalance);
        writer.put(&gone).await.unwrap();
        let faulty = FaultyMetaStore::new(inner.clone());
        let (initial, mut rx) = SubscriptionStore::new(Arc::new(faulty.clone()))
            .follow()
            .await
            .unwrap();
        assert_eq!(initial.len(), 1);
        faulty.partition();
        writer.remove(&gone).await.unwrap();
        let kept: Vec<Subscription> = (0..5)
            .map(|i| sub(&format!("c{i}"), DeliveryMode::LoadBalance))
            .collect();
        for s in &kept {
            writer.put(s).await.unwrap();
        }
        faulty.heal();
        // More changes than the store keeps: the follower re-reads and
        // reports the difference.
        let mut got = Vec::new();
        for _ in 0..6 {
            got.push(next(&mut rx).await);
        }
        assert!(
            got.contains(&SubscriptionChange::Removed(gone.key())),
            "{got:?}"
        );
        for s in kept {
            assert!(got.contains(&SubscriptionChange::Put(s)), "{got:?}");
        }
    }

    #[test]
    fn json_shape_is_stable() {
        let mut s = sub("c", DeliveryMode::LoadBalance);
        s.url = Some("http://x".into());
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["mode"], "LOAD_BALANCE");
        assert_eq!(v["clientId"], "c");
        assert_eq!(v["from"], "latest");
        // Subscriptions stored before headers and specs existed still read.
        assert!(v.get("roles").is_none() && v.get("topicsAtSubscribe").is_none());
        assert!(v.get("headers").is_none() && v.get("spec").is_none());
        assert!(v.get("contentMode").is_none());
        let back: Subscription = serde_json::from_value(v).unwrap();
        assert_eq!(back, s);
        s.push.content_mode = crate::push_settings::ContentMode::Batch;
        s.push.batch_size = Some(7);
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            (&v["contentMode"], &v["batchSize"]),
            (&serde_json::json!("batch"), &serde_json::json!(7))
        );
        assert_eq!(serde_json::from_value::<Subscription>(v).unwrap(), s);
    }

    #[test]
    fn operators_see_push_headers_without_credentials() {
        let mut s = sub("c", DeliveryMode::LoadBalance);
        for (name, value) in [
            ("Authorization", "Bearer t0k"),
            ("x-api-key", "k"),
            ("X-Auth-Token", "t"),
            ("x-tenant", "acme"),
        ] {
            s.headers.insert(name.into(), value.into());
        }
        let shown = s.redacted();
        let headers: Vec<(&str, &str)> = shown
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            headers,
            [
                ("Authorization", "***"),
                ("X-Auth-Token", "***"),
                ("x-api-key", "***"),
                ("x-tenant", "acme")
            ]
        );
        let stored = serde_json::to_value(&s).unwrap();
        assert_eq!(stored["headers"]["Authorization"], "Bearer t0k");
    }

    #[test]
    fn a_record_without_the_pattern_fields_still_loads() {
        let old = r#"{"subscriptionId":"i","clientId":"c","topic":"orders.*","group":"g",
            "mode":"LOAD_BALANCE","from":"latest","createdMs":1,"tenant":"acme"}"#;
        let s: Subscription = serde_json::from_str(old).unwrap();
        assert!(s.is_pattern());
        assert!(s.roles.is_empty() && s.topics_at_subscribe.is_empty());
        let mut p = s.clone();
        p.roles = vec!["reader".into()];
        p.topics_at_subscribe = vec!["orders.eu".into()];
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["roles"], serde_json::json!(["reader"]));
        assert_eq!(v["topicsAtSubscribe"], serde_json::json!(["orders.eu"]));
        assert_eq!(serde_json::from_value::<Subscription>(v).unwrap(), p);
    }
}
