//! The connector runtime: definitions kept in the meta store, each
//! connector run by exactly one copy, and the status of each.
//!
//! - `def`: what a definition holds and how it is checked;
//! - `checks`: what a definition must pass before it is stored (the
//!   deployment, the gate, the outbound guard) and the replay memory of
//!   `http-source` signatures;
//! - `positions`: where sources keep their positions
//!   (`eventmesh.connector.offset.store`);
//! - `run`: one running copy (a source's or a sink's loop);
//! - this file: the admin operations and the supervisor that starts and
//!   stops copies.
//!
//! Where a connector runs: on a single instance (embedded meta store) every
//! connector runs here. In a cluster (`PARTITION_OWNED_PULL`) each runs on
//! the live instance rendezvous hashing assigns it to, under the cluster's
//! leased claim (`eventmesh_runtime::cluster::claims`) on
//! `/em/connectors/owners/<name>`, the same kind of claim a partition's
//! owner holds; the claim's revision is the fencing token every position
//! commit is guarded by. The claim goes with the lease when an instance dies, and the next
//! assignee claims it and resumes from the last committed position; an
//! instance that can no longer vouch for its lease stops its copies before
//! the lease can end.
//!
//! Invariants:
//! - At most one copy of a connector runs across the instances sharing a
//!   meta store: a copy starts only under a claim this instance created,
//!   stops as soon as the claim or the lease is in doubt, and a stale
//!   copy's commits are refused by the store.
//! - A definition's `generation` grows at every change; a copy running an
//!   older generation is stopped and started again.
//! - Creating or changing a definition passes the gate as the connector's
//!   own principal (operation `CONNECTOR` on its topic), the principal its
//!   events are then published and consumed under.

mod checks;
pub mod def;
pub mod link;
pub mod positions;
pub mod run;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use eventmesh_connect::{Kind, Role};
use eventmesh_core::config::{Config, ConnectorOffsetStore, MetaType};
use eventmesh_meta::{follow_prefix, MetaStore, Mirror};
use eventmesh_runtime::cluster::{assignee, claims, Claim, Cluster};
use eventmesh_security::replay::{Refusal, SeenSignatures};
use serde::Serialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use def::{def_key, Definition, DefinitionBody, DEFS_PREFIX};
use eventmesh_api::{Api, ApiError};
use positions::Positions;
use run::{Ended, Runner, SharedStatus, Status};

/// Where claims live.
pub const OWNERS_PREFIX: &str = "/em/connectors/owners/";
/// Where running copies publish their status.
pub const STATUS_PREFIX: &str = "/em/connectors/status/";
/// How often the supervisor looks again without being woken.
const TICK: Duration = Duration::from_millis(500);
/// A copy's status is published when it changed, at most this often...
const STATUS_MIN: Duration = Duration::from_secs(1);
/// ... and at least this often.
const STATUS_EVERY: Duration = Duration::from_secs(5);

/// A running copy, as the supervisor holds it.
struct Copy {
    generation: u64,
    claim: Option<Claim>,
    status: SharedStatus,
    stop: CancellationToken,
    /// `None` once the copy failed: nothing runs until the definition
    /// changes.
    task: Option<tokio::task::JoinHandle<Ended>>,
}

/// How long a copy asked to stop may take before it is aborted.
const STOP_WAIT: Duration = Duration::from_secs(5);

impl Copy {
    /// Stops the copy and waits until nothing of it runs any more: asked
    /// first, aborted after [`STOP_WAIT`]. How it ended, when it did by
    /// itself.
    async fn finish(self) -> Option<Ended> {
        self.stop.cancel();
        let mut task = self.task?;
        match tokio::time::timeout(STOP_WAIT, &mut task).await {
            Ok(ended) => ended.ok(),
            Err(_) => {
                task.abort();
                let _ = task.await;
                None
            }
        }
    }
}

/// A connector as the admin API shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectorView {
    #[serde(flatten)]
    pub def: Definition,
    pub status: StatusView,
}

/// Where and how a connector runs.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusView {
    /// The instance running it (its claim's, or the one that last reported).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// The claim's fencing token (cluster only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    pub events_per_second: f64,
    /// `state` is also `paused`, or `unassigned` (no instance runs it yet).
    #[serde(flatten)]
    pub status: Status,
}

/// A status record as published by the instance running the copy.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Published {
    instance: String,
    generation: u64,
    events_per_second: f64,
    #[serde(flatten)]
    status: Status,
}

/// The connector runtime of this instance.
pub struct Connectors {
    api: Api,
    meta: Arc<dyn MetaStore>,
    kinds: Vec<Kind>,
    positions: Arc<dyn Positions>,
    store: ConnectorOffsetStore,
    shared_meta: bool,
    cluster: Option<Arc<Cluster>>,
    /// This cluster's name (what links add to an event's path).
    cluster_name: Arc<str>,
    instance: String,
    backoff: (Duration, Duration),
    defs: watch::Receiver<Mirror>,
    owners: Option<watch::Receiver<Mirror>>,
    copies: tokio::sync::Mutex<HashMap<String, Copy>>,
    /// The status last published for each copy here, and when.
    last_published: Mutex<HashMap<String, (Status, tokio::time::Instant)>>,
    /// The timestamped `http-source` signatures accepted here, per
    /// connector, until their time leaves the tolerance window.
    seen: Mutex<HashMap<String, SeenSignatures>>,
    stop: CancellationToken,
}

/// The most signatures remembered per `http-source` (about 6 MB when
/// full; past it the oldest go and requests signed at or before them are
/// refused as stale).
const SEEN_SIGNATURES: usize = 100_000;

fn meta_error(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        eventmesh_api::StatusCode::SERVICE_UNAVAILABLE,
        "meta_unavailable",
        format!("the meta store failed: {e}"),
    )
}

impl Connectors {
    /// Starts the supervisor.
    pub fn start(
        api: Api,
        meta: Arc<dyn MetaStore>,
        positions: Arc<dyn Positions>,
        cfg: &Config,
        cluster_name: Arc<str>,
    ) -> Arc<Connectors> {
        let stop = api.shutdown().child_token();
        let cluster = api.admin().cluster().cloned();
        let defs = follow_prefix(meta.clone(), DEFS_PREFIX, stop.clone());
        let owners = cluster
            .as_ref()
            .map(|_| follow_prefix(meta.clone(), OWNERS_PREFIX, stop.clone()));
        let instance = cluster
            .as_ref()
            .map(|c| c.id().to_string())
            .unwrap_or_else(|| "local".to_string());
        let me = Arc::new(Connectors {
            api,
            meta,
            kinds: {
                let mut kinds = eventmesh_connect::builtin();
                kinds.push(Kind::sink::<link::MeshLink>());
                kinds.push(Kind::source::<link::pull::MeshPull>());
                kinds.sort_by_key(|k| k.name());
                kinds
            },
            positions,
            store: cfg.connector.offset_store,
            shared_meta: cfg.meta.backend == MetaType::Etcd,
            cluster,
            cluster_name,
            instance,
            backoff: (cfg.delivery.backoff_initial, cfg.delivery.backoff_max),
            defs,
            owners,
            copies: tokio::sync::Mutex::default(),
            last_published: Mutex::default(),
            seen: Mutex::default(),
            stop,
        });
        tokio::spawn(me.clone().supervise());
        me
    }

    pub fn kinds(&self) -> &[Kind] {
        &self.kinds
    }

    fn kind(&self, name: &str) -> Option<&Kind> {
        self.kinds.iter().find(|k| k.name() == name)
    }

    /// The definitions as last seen, by name.
    fn definitions(&self) -> BTreeMap<String, Definition> {
        self.defs
            .borrow()
            .entries
            .values()
            .filter_map(|kv| serde_json::from_slice::<Definition>(&kv.value).ok())
            .map(|d| (d.name.clone(), d))
            .collect()
    }

    /// A definition, read from the store.
    pub async fn definition(&self, name: &str) -> Result<Option<Definition>, ApiError> {
        let kv = self.meta.get(&def_key(name)).await.map_err(meta_error)?;
        Ok(kv.and_then(|kv| serde_json::from_slice(&kv.value).ok()))
    }

    /// `POST /admin/connectors`.
    pub async fn create(&self, body: DefinitionBody) -> Result<ConnectorView, ApiError> {
        let name = body
            .name
            .clone()
            .ok_or_else(|| ApiError::bad_request("invalid_connector", "name: missing"))?;
        let mut def = body.into_definition(name, &self.kinds, None)?;
        self.check_deployment(&def)?;
        self.admit(&def)?;
        self.check_targets(&def).await?;
        let now = eventmesh_core::time::now_ms();
        def.generation = 1;
        def.created_ms = now;
        def.updated_ms = now;
        let value = Bytes::from(serde_json::to_vec(&def).map_err(meta_error)?);
        if !self
            .meta
            .put_if_absent(&def_key(&def.name), value)
            .await
            .map_err(meta_error)?
        {
            return Err(ApiError::new(
                eventmesh_api::StatusCode::CONFLICT,
                "connector_exists",
                format!("a connector named {} exists", def.name),
            ));
        }
        tracing::info!(connector = %def.name, kind = %def.kind, topic = %def.topic, "connector created");
        Ok(self.view_of(def).await)
    }

    /// Changes a definition with `edit`, by compare-and-swap on the stored
    /// value; `None` when there is no such connector.
    async fn edit(
        &self,
        name: &str,
        edit: impl Fn(&Definition) -> Result<Definition, ApiError>,
    ) -> Result<Definition, ApiError> {
        loop {
            let kv = self
                .meta
                .get(&def_key(name))
                .await
                .map_err(meta_error)?
                .ok_or_else(|| not_found(name))?;
            let old: Definition = serde_json::from_slice(&kv.value).map_err(meta_error)?;
            let mut new = edit(&old)?;
            new.generation = old.generation + 1;
            new.created_ms = old.created_ms;
            new.updated_ms = eventmesh_core::time::now_ms();
            let value = Bytes::from(serde_json::to_vec(&new).map_err(meta_error)?);
            if self
                .meta
                .compare_and_swap(&def_key(name), Some(&kv.value), value)
                .await
                .map_err(meta_error)?
            {
                return Ok(new);
            }
        }
    }

    /// `PUT /admin/connectors/{name}`: a new definition (same kind).
    pub async fn update(
        &self,
        name: &str,
        body: DefinitionBody,
    ) -> Result<ConnectorView, ApiError> {
        if body.name.as_deref().is_some_and(|n| n != name) {
            return Err(ApiError::bad_request(
                "invalid_connector",
                "name: a connector cannot be renamed",
            ));
        }
        // Checked and made against the stored definition, so that each
        // redaction placeholder given back keeps the secret stored at its
        // path; the targets are checked before anything is written.
        if let Some(old) = self.definition(name).await? {
            let def =
                body.clone()
                    .into_definition(name.to_string(), &self.kinds, Some(&old.config))?;
            self.check_targets(&def).await?;
        }
        let new = self
            .edit(name, |old| {
                if old.kind != body.kind {
                    return Err(ApiError::bad_request(
                        "invalid_connector",
                        format!(
                            "kind: {} cannot become {}; delete and create it",
                            old.kind, body.kind
                        ),
                    ));
                }
                let def = body.clone().into_definition(
                    name.to_string(),
                    &self.kinds,
                    Some(&old.config),
                )?;
                self.check_deployment(&def)?;
                self.admit(&def)?;
                Ok(def)
            })
            .await?;
        tracing::info!(connector = %name, generation = new.generation, "connector updated");
        Ok(self.view_of(new).await)
    }

    /// Pause or resume.
    pub async fn set_paused(&self, name: &str, paused: bool) -> Result<ConnectorView, ApiError> {
        let current = self
            .definition(name)
            .await?
            .ok_or_else(|| not_found(name))?;
        self.admit(&current)?;
        let new = self
            .edit(name, |old| {
                Ok(Definition {
                    paused,
                    ..old.clone()
                })
            })
            .await?;
        tracing::info!(connector = %name, paused, "connector {}", if paused { "paused" } else { "resumed" });
        Ok(self.view_of(new).await)
    }

    /// `DELETE /admin/connectors/{name}`: the definition, its position and
    /// status, and a sink's subscription.
    pub async fn delete(&self, name: &str) -> Result<(), ApiError> {
        let def = self
            .definition(name)
            .await?
            .ok_or_else(|| not_found(name))?;
        self.admit(&def)?;
        self.meta.delete(&def_key(name)).await.map_err(meta_error)?;
        // The copy (here or elsewhere) stops when it sees the definition go.
        if let Some(copy) = self.copies.lock().await.remove(name) {
            copy.finish().await;
        }
        if self.kind(&def.kind).map(Kind::role) == Some(Role::Sink) {
            let caller = Runner::caller(&def);
            for export in def.subscriptions() {
                if let Err(e) = self
                    .api
                    .unsubscribe(&caller, &def.client_id(), Some(&export.topic), b"")
                    .await
                {
                    tracing::warn!(connector = %name, topic = %export.topic, error = %e.message, "cannot remove the sink's subscription");
                }
            }
        }
        if let Err(e) = self.positions.forget(name).await {
            tracing::warn!(connector = %name, error = %e, "cannot remove the connector's position");
        }
        let _ = self.meta.delete(&format!("{STATUS_PREFIX}{name}")).await;
        self.seen.lock().expect("signatures lock").remove(name);
        tracing::info!(connector = %name, "connector deleted");
        Ok(())
    }

    /// `GET /admin/connectors`.
    pub async fn list(&self) -> Result<Vec<ConnectorView>, ApiError> {
        let read = |prefix: &'static str| async move {
            self.meta.get_prefix(prefix).await.map_err(meta_error)
        };
        // Three prefix reads, whatever the number of connectors.
        let defs = read(DEFS_PREFIX).await?;
        let mut status: HashMap<String, Published> = read(STATUS_PREFIX)
            .await?
            .into_iter()
            .filter_map(|kv| {
                let name = kv.key.strip_prefix(STATUS_PREFIX)?.to_string();
                Some((name, serde_json::from_slice(&kv.value).ok()?))
            })
            .collect();
        let mut owners: HashMap<String, (String, u64)> = match &self.cluster {
            Some(_) => read(OWNERS_PREFIX)
                .await?
                .into_iter()
                .filter_map(|kv| {
                    let name = kv.key.strip_prefix(OWNERS_PREFIX)?.to_string();
                    Some((name, owner_of(&kv)))
                })
                .collect(),
            None => HashMap::new(),
        };
        let mut out = Vec::new();
        for kv in defs {
            if let Ok(def) = serde_json::from_slice::<Definition>(&kv.value) {
                let (published, owner) = (status.remove(&def.name), owners.remove(&def.name));
                out.push(self.view_from(def, published, owner).await);
            }
        }
        Ok(out)
    }

    /// `GET /admin/connectors/{name}`.
    pub async fn get(&self, name: &str) -> Result<ConnectorView, ApiError> {
        let def = self
            .definition(name)
            .await?
            .ok_or_else(|| not_found(name))?;
        Ok(self.view_of(def).await)
    }

    /// One connector's view, its status and claim read for it.
    async fn view_of(&self, def: Definition) -> ConnectorView {
        let published = match self.meta.get(&format!("{STATUS_PREFIX}{}", def.name)).await {
            Ok(Some(kv)) => serde_json::from_slice::<Published>(&kv.value).ok(),
            _ => None,
        };
        let owner = match &self.cluster {
            Some(_) => match self.meta.get(&format!("{OWNERS_PREFIX}{}", def.name)).await {
                Ok(Some(kv)) => Some(owner_of(&kv)),
                _ => None,
            },
            None => None,
        };
        self.view_from(def, published, owner).await
    }

    /// A connector's view from its definition, the status its copy
    /// published and its claim (`(instance, token)`).
    async fn view_from(
        &self,
        def: Definition,
        published: Option<Published>,
        owner: Option<(String, u64)>,
    ) -> ConnectorView {
        let is_http = def.kind == eventmesh_connect::kinds::http::KIND;
        let mut status = StatusView {
            instance: owner.as_ref().map(|o| o.0.clone()),
            token: owner.as_ref().map(|o| o.1),
            events_per_second: 0.0,
            status: Status {
                state: "unassigned".into(),
                ..Status::default()
            },
        };
        if let Some(p) = published.filter(|p| p.generation == def.generation) {
            status.instance = Some(p.instance);
            status.events_per_second = p.events_per_second;
            status.status = p.status;
            // Hidden when recorded; again here for records of older
            // versions.
            status.status.last_error = status
                .status
                .last_error
                .take()
                .map(|m| def.redact_message(&m));
        }
        if is_http {
            status.status.state = "running".into();
        }
        if def.paused {
            status.status.state = "paused".into();
        }
        if status.status.position.is_none() && !is_http {
            status.status.position = self.positions.load(&def.name).await.ok().flatten();
        }
        ConnectorView {
            def: def.redacted(),
            status,
        }
    }

    /// Starts and stops copies until shutdown, then stops them all.
    async fn supervise(self: Arc<Self>) {
        let mut defs = self.defs.clone();
        let mut owners = self.owners.clone();
        loop {
            self.reconcile().await;
            self.publish_status().await;
            let owners_changed = async {
                match owners.as_mut() {
                    Some(o) => o.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = defs.changed() => {}
                _ = owners_changed => {}
                _ = tokio::time::sleep(TICK) => {}
                _ = self.stop.cancelled() => break,
            }
        }
        let copies: Vec<Copy> = self.copies.lock().await.drain().map(|(_, c)| c).collect();
        for c in &copies {
            c.stop.cancel();
        }
        futures::future::join_all(copies.into_iter().map(Copy::finish)).await;
    }

    /// Whether this instance should run `name` now.
    fn assigned_here(&self, name: &str) -> bool {
        match &self.cluster {
            None => true,
            Some(c) => {
                c.registered() && {
                    let live = c.live_ids();
                    assignee(
                        &format!("connector:{name}"),
                        0,
                        live.iter().map(String::as_str),
                    ) == Some(self.instance.as_str())
                }
            }
        }
    }

    /// The claim on `name` this instance holds, per the store's copy.
    fn held_claim(&self, name: &str) -> Option<Claim> {
        let me = self.cluster.as_ref()?.me();
        let owners = self.owners.as_ref()?.borrow();
        claims::held_by(owners.entries.get(&format!("{OWNERS_PREFIX}{name}"))?, &me)
    }

    /// Claims `name` under the instance's lease: the claim when made.
    async fn claim(&self, name: &str) -> Option<Claim> {
        let cluster = self.cluster.as_ref()?;
        match cluster.claim(&format!("{OWNERS_PREFIX}{name}")).await {
            Ok(claim) => claim,
            Err(e) => {
                tracing::debug!(connector = name, error = %e, "cannot claim a connector");
                None
            }
        }
    }

    async fn reconcile(&self) {
        let defs = self.definitions();
        let mut copies = self.copies.lock().await;
        // Stop what should not run here (any more, or not in this form).
        let mut stopped = Vec::new();
        for (name, copy) in copies.iter() {
            let keep = match defs.get(name) {
                Some(d) => {
                    !d.paused
                        && d.generation == copy.generation
                        && copy.task.as_ref().is_none_or(|t| !t.is_finished())
                        && match &self.cluster {
                            None => true,
                            Some(_) => {
                                self.assigned_here(name) && self.held_claim(name) == copy.claim
                            }
                        }
                }
                None => false,
            };
            if !keep {
                stopped.push(name.clone());
            }
        }
        for name in stopped {
            let Some(copy) = copies.remove(&name) else {
                continue;
            };
            self.last_published
                .lock()
                .expect("status lock")
                .remove(&name);
            let (generation, claim, status) =
                (copy.generation, copy.claim.clone(), copy.status.clone());
            let ended = copy.finish().await;
            tracing::info!(connector = %name, ?ended, instance = %self.instance, "connector stopped here");
            // A failed copy stays failed (its status says why) until its
            // definition changes; it is remembered as running nothing.
            if ended == Some(Ended::Failed) {
                if let Some(d) = defs.get(&name) {
                    if d.generation == generation && !d.paused {
                        copies.insert(
                            name.clone(),
                            Copy {
                                generation,
                                claim,
                                status,
                                stop: CancellationToken::new(),
                                task: None,
                            },
                        );
                        continue;
                    }
                }
            }
            // Give the claim up unless the copy lost it: the assignee takes
            // it over at once instead of after the lease.
            if let (Some(claim), Some(cluster)) = (&claim, &self.cluster) {
                if ended != Some(Ended::Fenced) {
                    let _ = cluster.release(claim).await;
                }
            }
        }
        // Start what should run here.
        for (name, def) in &defs {
            if def.paused || copies.contains_key(name) {
                continue;
            }
            let Some(kind) = self.kind(&def.kind).cloned() else {
                continue;
            };
            if kind.name() == eventmesh_connect::kinds::http::KIND {
                continue;
            }
            if !self.assigned_here(name) {
                continue;
            }
            let claim = match &self.cluster {
                None => None,
                Some(_) => match self.held_claim(name) {
                    Some(c) => Some(c),
                    None => match self.claim(name).await {
                        Some(c) => Some(c),
                        None => continue,
                    },
                },
            };
            let status: SharedStatus = Arc::new(Mutex::new(Status {
                since_ms: Some(eventmesh_core::time::now_ms()),
                ..Status::default()
            }));
            let stop = self.stop.child_token();
            let runner = Runner {
                api: self.api.clone(),
                def: def.clone(),
                kind,
                positions: self.positions.clone(),
                claim: claim.clone(),
                cluster: self.cluster_name.clone(),
                status: status.clone(),
                unsent_since: Default::default(),
                stop: stop.clone(),
                backoff: self.backoff,
                metrics: self.api.admin().metrics().clone(),
            };
            tracing::info!(connector = %name, kind = %def.kind, instance = %self.instance, "connector starting here");
            copies.insert(
                name.clone(),
                Copy {
                    generation: def.generation,
                    claim,
                    status,
                    stop,
                    task: Some(tokio::spawn(runner.run())),
                },
            );
        }
    }

    /// Publishes the status of the copies running here (under the lease in
    /// a cluster, so it goes with the instance).
    async fn publish_status(&self) {
        let copies: Vec<(String, u64, Status)> = {
            let copies = self.copies.lock().await;
            copies
                .iter()
                .map(|(n, c)| {
                    (
                        n.clone(),
                        c.generation,
                        c.status.lock().expect("status lock").clone(),
                    )
                })
                .collect()
        };
        let lease = self.cluster.as_ref().and_then(|c| c.lease());
        let now = tokio::time::Instant::now();
        for (name, generation, s) in copies {
            // At most once a second, and only on a change or every
            // `STATUS_EVERY` (the rate is over the time since the last).
            let rate = {
                let mut last = self.last_published.lock().expect("status lock");
                let due = match last.get(&name) {
                    None => true,
                    Some((before, at)) => {
                        let since = now.duration_since(*at);
                        since >= STATUS_EVERY || (since >= STATUS_MIN && *before != s)
                    }
                };
                if !due {
                    continue;
                }
                let rate = match last.get(&name) {
                    Some((before, at)) if now > *at => {
                        s.events.saturating_sub(before.events) as f64
                            / now.duration_since(*at).as_secs_f64()
                    }
                    _ => 0.0,
                };
                last.insert(name.clone(), (s.clone(), now));
                rate
            };
            let record = Published {
                instance: self.instance.clone(),
                generation,
                events_per_second: (rate * 10.0).round() / 10.0,
                status: s,
            };
            let Ok(value) = serde_json::to_vec(&record) else {
                continue;
            };
            let key = format!("{STATUS_PREFIX}{name}");
            let written = match lease {
                Some(l) => self.meta.put_with_lease(&key, Bytes::from(value), l).await,
                None => self.meta.put(&key, Bytes::from(value)).await,
            };
            if let Err(e) = written {
                tracing::debug!(connector = %name, error = %e, "cannot publish connector status");
            }
        }
    }
}

/// A claim's instance and token.
fn owner_of(kv: &eventmesh_meta::KeyValue) -> (String, u64) {
    (claims::holder(kv).instance, kv.revision)
}

fn not_found(name: &str) -> ApiError {
    ApiError::not_found("unknown_connector", format!("no connector named {name}"))
}

/// Checks a sink's subscription filters: the message names the filter at
/// fault and, for CESQL, the position and the problem.
pub(crate) fn check_filters(filters: &[serde_json::Value]) -> Result<(), String> {
    eventmesh_runtime::filters::compile(filters).map(|_| ())
}
