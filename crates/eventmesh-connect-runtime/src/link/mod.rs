//! Mesh links: the sink kind `mesh-link` that carries the events of this
//! cluster's exports to a remote cluster through the remote's own publish
//! (`POST /events/publish-batch` on its traffic port), so that the remote's
//! gate, ACL and quotas apply to what arrives.
//!
//! A link runs as a connector (one fenced copy, its consumer group, a
//! commit only after the remote answered 202); what this module adds:
//! - **The path.** Every event that crosses a link carries the extension
//!   [`PATH`]: the names of the clusters it has left, in order, separated
//!   by commas. A link never sends an event to a cluster already on its
//!   path (`loop`), nor one whose path holds `maxHops` clusters already
//!   (`hops`); both are acknowledged and counted, not sent.
//! - **The remote's name**, read from `GET /cluster` at every connect;
//!   with `cluster` in the config, a remote of another name is not sent to.
//! - **Refusals per kind:** unreachable, 401, 408 and 5xx keep the
//!   events waiting in the local log (no attempt is counted) and the link
//!   backs off; 429 is tried again in smaller requests after a pause, then
//!   the same (`send`); a 403 dead-letters the events of that topic with the
//!   remote's reason; any other 4xx halves the request until the event at
//!   fault is alone, and only it is dead-lettered (`send`).
//!
//! Invariant: `source` and `id` cross unchanged, so that the remote's
//! idempotent publishing stores a re-sent event once within its window.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use eventmesh_client::{ClientBuilder, EventMeshClient, TlsFiles};
use eventmesh_connect::{ConnectorError, Sink, SinkContext, SinkKind, Target, Verdict};
use eventmesh_core::event::ExtValue;
use eventmesh_core::CloudEvent;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod pull;
mod send;
pub mod view;
mod watch;

/// The kind's name.
pub const KIND: &str = "mesh-link";
/// The extension that carries the clusters an event has left.
pub const PATH: &str = "meshpath";
/// The hop limit when the config names none.
const MAX_HOPS: u32 = 8;

/// A link's `config`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// The remote cluster's traffic URL (`http://` or `https://`).
    pub url: String,
    /// A bearer token or JWT of the principal the link publishes as on the
    /// remote: the remote's ACL for it is the link's boundary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// PEM file of the certificate authorities trusted for the remote's
    /// certificate (besides the public roots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// PEM client certificate chain and key, for a remote that asks for
    /// one (mTLS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<String>,
    /// The remote cluster's name, when it must be this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// Put in front of each topic's name at the remote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rename_prefix: Option<String>,
    /// Most clusters an event may have left to be sent on (default 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_hops: Option<u32>,
    /// How long one request to the remote may take, in milliseconds
    /// (default 10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// A pulling link's topics (or patterns) at the remote, with filters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub imports: Vec<crate::def::Export>,
}

impl Config {
    fn max_hops(&self) -> usize {
        self.max_hops.unwrap_or(MAX_HOPS) as usize
    }
}

/// The `mesh-link` kind.
pub struct MeshLink;

#[async_trait]
impl SinkKind for MeshLink {
    type Config = Config;
    const NAME: &'static str = KIND;
    const DESCRIPTION: &'static str =
        "Carries the events of its exports to another eventmesh cluster, loop-free and deduplicated";

    fn check(c: &Config) -> Result<(), String> {
        if !c.imports.is_empty() {
            return Err(format!(
                "imports: only a pulling link ({}) has imports",
                pull::KIND
            ));
        }
        check_remote(c)
    }

    fn targets(c: &Config) -> Vec<Target> {
        targets_of(c)
    }

    async fn open(c: Config, ctx: SinkContext) -> Result<Box<dyn Sink>, ConnectorError> {
        let (client, remote) = connect(&c, &ctx.connector, &ctx.cluster).await?;
        Ok(Box::new(LinkSink {
            client,
            local: ctx.cluster,
            remote,
            prefix: c.rename_prefix.clone().unwrap_or_default(),
            max_hops: c.max_hops(),
            cap: send::REQUEST_EVENTS.into(),
        }))
    }
}

/// Checks what a link of either direction says of its remote.
fn check_remote(c: &Config) -> Result<(), String> {
    let url = reqwest::Url::parse(&c.url).map_err(|e| format!("url {:?}: {e}", c.url))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!(
            "url {:?} must be http:// or https:// with a host",
            c.url
        ));
    }
    if c.cert_file.is_some() != c.key_file.is_some() {
        return Err("certFile and keyFile go together".into());
    }
    for (field, path) in [
        ("caFile", &c.ca_file),
        ("certFile", &c.cert_file),
        ("keyFile", &c.key_file),
    ] {
        if let Some(p) = path.as_deref().filter(|p| !p.starts_with('/')) {
            return Err(format!("{field} {p:?} must be an absolute path"));
        }
    }
    if let Some(name) = &c.cluster {
        if !valid_cluster_name(name) {
            return Err(format!(
                "cluster {name:?} must be 1 to 32 of A-Z a-z 0-9 - _"
            ));
        }
    }
    if let Some(p) = c.rename_prefix.as_deref() {
        eventmesh_core::topic::validate_topic(&format!("{p}x"))
            .map_err(|e| format!("renamePrefix {p:?}: {e}"))?;
    }
    if c.max_hops == Some(0) || c.max_hops.is_some_and(|h| h > 64) {
        return Err("maxHops must be 1 to 64".into());
    }
    if c.timeout_ms == Some(0) {
        return Err("timeoutMs must be above 0".into());
    }
    Ok(())
}

/// Where a link connects to.
fn targets_of(c: &Config) -> Vec<Target> {
    let Ok(url) = reqwest::Url::parse(&c.url) else {
        return Vec::new();
    };
    match (url.host_str(), url.port_or_known_default()) {
        (Some(host), Some(port)) => {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            vec![Target::new(host, port)]
        }
        _ => Vec::new(),
    }
}

/// A client of the remote, and the remote's cluster name (checked against
/// this cluster's, `local`, and the configured one).
async fn connect(
    c: &Config,
    link: &str,
    local: &str,
) -> Result<(EventMeshClient, String), ConnectorError> {
    let client = ClientBuilder::default()
        .server(&c.url)
        .token_opt(c.token.clone())
        .tls(TlsFiles {
            ca_file: c.ca_file.as_ref().map(Into::into),
            cert_file: c.cert_file.as_ref().map(Into::into),
            key_file: c.key_file.as_ref().map(Into::into),
        })
        .connect_timeout(Duration::from_secs(5))
        .request_timeout(Duration::from_millis(c.timeout_ms.unwrap_or(10_000)))
        .build()
        .map_err(|e| ConnectorError::config(format!("the remote: {e}")))?;
    let remote = client.cluster().await.map_err(|e| {
        ConnectorError::unavailable(format!("cannot learn the remote's cluster name: {e}"))
    })?;
    if remote == local {
        return Err(ConnectorError::config(format!(
            "the remote at {} is this cluster ({remote})",
            c.url
        )));
    }
    if let Some(expected) = c.cluster.as_ref().filter(|e| **e != remote) {
        return Err(ConnectorError::unavailable(format!(
            "the remote at {} is cluster {remote}, not {expected}",
            c.url
        )));
    }
    tracing::info!(link = %link, remote = %remote, url = %c.url, "mesh link connected");
    Ok((client, remote))
}

/// Cluster names: 1 to 32 of `A-Z a-z 0-9 - _` (no comma, so that a path
/// splits cleanly).
pub fn valid_cluster_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The clusters an event has left, in order.
pub fn path_of(e: &CloudEvent) -> Vec<&str> {
    match e.extension(PATH) {
        Some(ExtValue::Str(s)) => s.split(',').filter(|c| !c.is_empty()).collect(),
        _ => Vec::new(),
    }
}

/// The path `e` gets as it leaves cluster `from` for cluster `to`, or why
/// it must not: either is on its path already (`loop`), or it has left
/// `max_hops` clusters (`hops`).
pub fn crossing(
    e: &CloudEvent,
    from: &str,
    to: &str,
    max_hops: usize,
) -> Result<String, &'static str> {
    let path = path_of(e);
    if path.contains(&from) || path.contains(&to) {
        return Err("loop");
    }
    if path.len() >= max_hops {
        return Err("hops");
    }
    let mut walked = path.join(",");
    if !walked.is_empty() {
        walked.push(',');
    }
    walked.push_str(from);
    Ok(walked)
}

/// An open link.
struct LinkSink {
    client: EventMeshClient,
    local: String,
    remote: String,
    prefix: String,
    max_hops: usize,
    /// The most events a request holds now: lower after the remote's quota
    /// refused a larger one (see `send`).
    cap: std::sync::atomic::AtomicUsize,
}

impl LinkSink {
    /// The structured JSON to send for `e` (`json`, as it was delivered),
    /// with this cluster added to its path, or why not. An event on its
    /// first hop gets the path put in front of its members, without
    /// encoding the event again.
    fn outgoing_json(&self, e: &CloudEvent, json: &[u8]) -> Result<Vec<u8>, &'static str> {
        let path = crossing(e, &self.local, &self.remote, self.max_hops)?;
        match json.split_first() {
            Some((b'{', members)) if e.extension(PATH).is_none() => {
                // Cluster names need no escaping (see `valid_cluster_name`).
                let mut out = Vec::with_capacity(json.len() + PATH.len() + path.len() + 8);
                out.extend_from_slice(b"{\"");
                out.extend_from_slice(PATH.as_bytes());
                out.extend_from_slice(b"\":\"");
                out.extend_from_slice(path.as_bytes());
                out.extend_from_slice(b"\",");
                out.extend_from_slice(members);
                Ok(out)
            }
            _ => {
                let mut out = e.clone();
                out.set_extension(PATH, ExtValue::Str(path));
                Ok(out.to_json())
            }
        }
    }
}

#[async_trait]
impl Sink for LinkSink {
    async fn write(&mut self, _events: &[CloudEvent]) -> Result<(), ConnectorError> {
        Err(ConnectorError::config(
            "a mesh link sends events with the topic each came from",
        ))
    }

    async fn write_routed(
        &mut self,
        topics: &[Arc<str>],
        events: &[CloudEvent],
        json: &[bytes::Bytes],
    ) -> Result<Vec<Verdict>, ConnectorError> {
        let mut verdicts = vec![Verdict::Written; events.len()];
        // By the topic at the remote, in the order they came.
        let mut by_topic: BTreeMap<String, Vec<send::Ready>> = BTreeMap::new();
        for (i, ((topic, e), json)) in topics.iter().zip(events).zip(json).enumerate() {
            match self.outgoing_json(e, json) {
                Ok(out) => by_topic
                    .entry(format!("{}{topic}", self.prefix))
                    .or_default()
                    .push(send::Ready::new(i, e, out)),
                Err(why) => verdicts[i] = Verdict::Skipped(why),
            }
        }
        let sent = futures::future::join_all(
            by_topic
                .into_iter()
                .map(|(topic, ready)| self.send_topic(topic, ready)),
        )
        .await;
        for topic in sent {
            for (i, v) in topic? {
                verdicts[i] = v;
            }
        }
        Ok(verdicts)
    }

    fn keeps_backlog(&self) -> bool {
        true
    }

    fn peer(&self) -> Option<String> {
        Some(self.remote.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sink(local: &str, remote: &str, max_hops: usize) -> LinkSink {
        LinkSink {
            client: EventMeshClient::new("http://127.0.0.1:9").unwrap(),
            local: local.into(),
            remote: remote.into(),
            prefix: String::new(),
            max_hops,
            cap: send::REQUEST_EVENTS.into(),
        }
    }

    fn event(path: Option<&str>) -> CloudEvent {
        let mut v = json!({"specversion": "1.0", "id": "1", "source": "/s", "type": "t"});
        if let Some(p) = path {
            v[PATH] = json!(p);
        }
        CloudEvent::from_json_slice(v.to_string().as_bytes()).unwrap()
    }

    impl LinkSink {
        /// The event the link sends for `e`, read back.
        fn outgoing(&self, e: &CloudEvent) -> Result<CloudEvent, &'static str> {
            let json = self.outgoing_json(e, &e.to_json())?;
            Ok(CloudEvent::from_json_slice(&json).unwrap())
        }
    }

    #[test]
    fn what_a_link_sends_is_the_event_as_read_with_its_path() {
        let mut v = json!({"specversion": "1.0", "id": "7", "source": "/s", "type": "t",
            "subject": "é \"q\"", "datacontenttype": "application/json",
            "n": 5, "flag": true, "data": {"a": [1, 2.5, "x"]}});
        let send = |e: &CloudEvent| sink("a", "b", 8).outgoing_json(e, &e.to_json()).unwrap();
        let first = CloudEvent::from_json_slice(v.to_string().as_bytes()).unwrap();
        let mut expected = first.clone();
        expected.set_extension(PATH, ExtValue::Str("a".into()));
        let sent = send(&first);
        assert!(sent.starts_with(br#"{"meshpath":"a","#));
        assert_eq!(CloudEvent::from_json_slice(&sent).unwrap(), expected);
        // On a later hop the path is replaced, not repeated.
        v[PATH] = json!("x");
        let later = CloudEvent::from_json_slice(v.to_string().as_bytes()).unwrap();
        let mut expected = later.clone();
        expected.set_extension(PATH, ExtValue::Str("x,a".into()));
        let sent = send(&later);
        assert_eq!(CloudEvent::from_json_slice(&sent).unwrap(), expected);
        let key = br#""meshpath""#;
        assert_eq!(sent.windows(key.len()).filter(|w| w == key).count(), 1);
    }

    #[test]
    fn the_path_grows_by_one_cluster_a_hop_and_never_returns() {
        let a_to_b = sink("a", "b", 8);
        let out = a_to_b.outgoing(&event(None)).unwrap();
        assert_eq!(path_of(&out), ["a"]);
        assert_eq!((out.id.as_str(), out.source.as_str()), ("1", "/s"));
        let b_to_c = sink("b", "c", 8);
        assert_eq!(path_of(&b_to_c.outgoing(&out).unwrap()), ["a", "b"]);
        // Back to where it came from, or through this cluster again: never.
        assert_eq!(sink("b", "a", 8).outgoing(&out).unwrap_err(), "loop");
        assert_eq!(sink("a", "c", 8).outgoing(&out).unwrap_err(), "loop");
        // The hop limit counts the clusters left.
        assert_eq!(
            sink("c", "d", 2).outgoing(&event(Some("a,b"))).unwrap_err(),
            "hops"
        );
        assert!(sink("c", "d", 3).outgoing(&event(Some("a,b"))).is_ok());
    }

    #[test]
    fn a_config_is_checked_field_by_field() {
        let check =
            |v: serde_json::Value| MeshLink::check(&serde_json::from_value::<Config>(v).unwrap());
        assert_eq!(check(json!({"url": "http://b:10105"})), Ok(()));
        assert_eq!(
            check(json!({"url": "ftp://b"})).unwrap_err(),
            "url \"ftp://b\" must be http:// or https:// with a host"
        );
        assert_eq!(
            check(json!({"url": "http://b", "certFile": "/c.pem"})).unwrap_err(),
            "certFile and keyFile go together"
        );
        assert_eq!(
            check(json!({"url": "http://b", "caFile": "ca.pem"})).unwrap_err(),
            "caFile \"ca.pem\" must be an absolute path"
        );
        assert_eq!(
            check(json!({"url": "http://b", "cluster": "a,b"})).unwrap_err(),
            "cluster \"a,b\" must be 1 to 32 of A-Z a-z 0-9 - _"
        );
        assert_eq!(
            check(json!({"url": "http://b", "maxHops": 0})).unwrap_err(),
            "maxHops must be 1 to 64"
        );
        assert!(check(json!({"url": "http://b", "renamePrefix": "a b."}))
            .unwrap_err()
            .starts_with("renamePrefix \"a b.\": "));
        assert_eq!(
            MeshLink::targets(
                &serde_json::from_value(json!({"url": "https://b.example"})).unwrap()
            ),
            [Target::new("b.example", 443)]
        );
    }
}
