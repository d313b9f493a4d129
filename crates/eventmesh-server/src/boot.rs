//! Boot: the configuration, logging, and the steps of `run` in order: the
//! descriptor limit, the local store, the event log and the meta store,
//! the listeners, the state stores (joining the cluster under
//! `PARTITION_OWNED_PULL`), the runtime, the security gate, the A2A
//! gateway, the connectors, and the HTTP and TCP servers; then graceful
//! shutdown on SIGINT/SIGTERM (drain the handed-out deliveries, stop
//! accepting, finish in-flight requests, stop dispatchers and flush
//! offsets, flush RocksDB).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use eventmesh_core::config::DeliveryTopology;
use eventmesh_core::config::{self, Config, ConfigError, ConfigSources, Loaded, ProcessEnv};
use eventmesh_meta::MetaStore;
use eventmesh_runtime::cluster::{Cluster, ClusterSettings, FencedOffsetStore, InstanceInfo};
use eventmesh_runtime::{
    DispatchSettings, IngressSettings, Metrics, Ownership, Runtime, Stores, WebhookGuard,
};
use eventmesh_security::SecurityGate;
use eventmesh_state::{
    DeadLetterStore, OffsetStore, RocksDeliveryStateStore, RocksOffsetStore, SubscriptionStore,
};
use eventmesh_storage::{EventLog, LocalDb, Retention, StandaloneLog};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::http::{self, AppState};
use crate::limits::{Admission, PerAddress, Pool};
use crate::tls::{Incoming, ServerTls};

mod connectors;
mod settings;
mod store;
use connectors::start_connectors;
use settings::{cluster_name, instance_id, internal_tls, metrics_profile};
use store::{open_event_log, open_meta_store, open_storage, retention, store_memory};

const DEFAULT_CONFIG: &str = "conf/eventmesh.properties";

/// Builds the configuration from the file, the environment and `-D` flags.
pub fn load_config(file: Option<PathBuf>, defines: &[String]) -> Result<Loaded, ConfigError> {
    let overrides = defines
        .iter()
        .map(|d| config::parse_override(d))
        .collect::<Result<Vec<_>, _>>()?;
    let (file, file_required) = match file {
        Some(f) => (Some(f), true),
        None => (Some(PathBuf::from(DEFAULT_CONFIG)), false),
    };
    Config::load(&ConfigSources {
        file,
        file_required,
        env: &ProcessEnv,
        overrides,
    })
}

/// Runs the runtime until SIGINT or SIGTERM.
pub fn serve(loaded: Loaded, sources: crate::reload::Sources) -> anyhow::Result<()> {
    let telemetry = crate::telemetry::init(&loaded.config.log, &loaded.config.tracing)?;
    for w in &loaded.warnings {
        tracing::warn!("{w}");
    }
    let cfg = loaded.config;
    // Always set: the key (or its environment variable) is the one knob,
    // whatever TOKIO_WORKER_THREADS holds.
    let workers = match cfg.server.worker_threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .thread_name("eventmesh")
        .build()
        .context("cannot start the async runtime")?;
    // The TCP port's connection threads, started with the runtime's and
    // stopped after it served.
    let shards = match cfg.server.tcp.port {
        Some(_) => crate::shards::Shards::start(crate::shards::Shards::count(
            cfg.server.tcp.threads,
            cfg.storage.backend,
        ))
        .context("cannot start the TCP connection threads")?,
        None => None,
    };
    let served = rt.block_on(run(cfg, sources, shards.clone()));
    if let Some(shards) = shards {
        shards.stop();
    }
    telemetry.shutdown();
    served
}

async fn bind(host: &str, port: u16, what: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind((host, port))
        .await
        .with_context(|| format!("cannot bind {what} on {host}:{port}"))
}

/// Binds a listener that may be off (`port` `None`), on its own host or
/// else the traffic host.
async fn bind_optional(
    cfg: &Config,
    host: &Option<String>,
    port: Option<u16>,
    what: &str,
) -> anyhow::Result<Option<TcpListener>> {
    match port {
        Some(port) => {
            let host = host.as_deref().unwrap_or(&cfg.server.host);
            Ok(Some(bind(host, port, what).await?))
        }
        None => Ok(None),
    }
}

/// The boot, step by step, then serving until SIGINT or SIGTERM and the
/// graceful shutdown.
async fn run(
    mut cfg: Config,
    sources: crate::reload::Sources,
    shards: Option<crate::shards::Shards>,
) -> anyhow::Result<()> {
    let started = Instant::now();
    log_start(&cfg);
    let (nofile, limits) = raise_descriptor_limit(&cfg);
    let db = open_storage(&cfg)?;
    let metrics = new_metrics(&cfg, nofile, &limits);
    if let Some(shards) = &shards {
        metrics.watch_connection_threads(shards.watched());
    }
    let retention = retention(&cfg);
    let (log, standalone) = open_event_log(&cfg, &db, &metrics, retention).await?;
    let meta = open_meta_store(&cfg, &db).await?;
    let listeners = bind_listeners(&cfg, &limits, &metrics).await?;
    // Cards name the gRPC listener by the port it got.
    cfg.a2a.grpc_port = listeners
        .grpc
        .as_ref()
        .and_then(|l| l.local_addr().ok())
        .map(|a| a.port());
    let webhook_guard = Arc::new(WebhookGuard::new(cfg.webhook.denied_cidrs.clone()));
    let stores = open_state_stores(&cfg, &db, &meta, &metrics, &listeners)?;
    let gate = build_gate(&cfg, &metrics)?;
    let access = Arc::new(eventmesh_api::GateAccess::new(gate.clone()));
    let cluster_name: Arc<str> = cluster_name(&cfg, &meta).await?.into();
    let runtime = start_runtime(
        &with_handshake_origin(&cfg, &cluster_name),
        log,
        stores,
        &webhook_guard,
        retention,
        metrics,
        access,
    )
    .await?;
    track_subscriptions(&gate, &runtime).await;

    let shutdown = CancellationToken::new();
    watch_certificates(&cfg, &listeners, &shutdown);
    let reloader = start_reloader(sources, &gate, &listeners, &cfg);
    let credentials = credential_guards(&cfg, &runtime, &gate);
    let api = eventmesh_api::Api::new(runtime.clone(), gate, webhook_guard, shutdown.clone());
    let store_memory = store_memory(&db, standalone.as_ref());
    let a2a = start_a2a_gateway(&cfg, &api, &meta).await;
    let connectors = start_connectors(&cfg, &api, &meta, &db, cluster_name.clone());
    let mqtt = (cfg.server.mqtt.port.is_some())
        .then(|| eventmesh_mqtt::Broker::new(api.clone(), meta.clone(), cfg.server.mqtt.clone()));
    let state = AppState {
        api: api.clone(),
        config: Arc::new(cfg.clone()),
        started,
        store_memory,
        reloader,
        a2a,
        connectors,
        credentials,
        mqtt: mqtt.clone(),
        cluster_name,
    };
    let servers = start_servers(listeners, state, api, mqtt, &cfg, &shutdown, shards)?;
    tracing::info!("eventmesh ready in {} ms", started.elapsed().as_millis());
    serve_until_shutdown(servers, &runtime, &shutdown, cfg.shutdown.grace).await;
    shut_down(&runtime, standalone, &db).await
}

/// Logs the version and the settings the boot starts with.
fn log_start(cfg: &Config) {
    tracing::info!(
        worker_threads = tokio::runtime::Handle::current().metrics().num_workers(),
        tcp_threads = crate::shards::Shards::count(cfg.server.tcp.threads, cfg.storage.backend),
        storage = cfg.storage.backend.as_str(),
        data_dir = %cfg.storage.data_dir.display(),
        sync = cfg.storage.sync,
        "starting eventmesh {}",
        env!("CARGO_PKG_VERSION")
    );
}

/// Raises the soft descriptor limit to the hard one (before the store opens
/// its files) and derives the listeners' connection limits from it; logs
/// both, and warns when the limits leave too few descriptors in reserve.
fn raise_descriptor_limit(cfg: &Config) -> (crate::limits::Nofile, crate::limits::Limits) {
    let (nofile_before, nofile) = crate::limits::raise_nofile();
    let limits = crate::limits::derive(nofile.soft, &cfg.server.connections);
    let show = |n: Option<u64>| n.map_or_else(|| "unlimited".to_string(), |n| n.to_string());
    tracing::info!(
        soft = %show(nofile.soft),
        hard = %show(nofile.hard),
        soft_at_start = %show(nofile_before.soft),
        traffic_connections = limits.traffic,
        per_address_connections = limits.per_address,
        admin_connections = limits.admin,
        reserved = limits.reserve,
        "descriptor limit: soft {}, hard {}; connections: traffic ports {}, per address {}, admin {}",
        show(nofile.soft),
        show(nofile.hard),
        limits.traffic,
        limits.per_address,
        limits.admin
    );
    if let Some(soft) = nofile.soft {
        let held = u64::from(limits.traffic) + u64::from(limits.admin);
        if held + limits.reserve > soft {
            tracing::warn!(
                "the connection limits ({} traffic + {} admin) leave fewer than {} of the {} \
                 descriptors for the store and outgoing connections; raise the descriptor \
                 limit (LimitNOFILE) or lower eventmesh.server.connections.max",
                limits.traffic,
                limits.admin,
                limits.reserve,
                soft
            );
        }
    }
    (nofile, limits)
}

/// The runtime's metrics for this instance (its mode, storage and build),
/// with the descriptor and connection limits set.
fn new_metrics(
    cfg: &Config,
    nofile: crate::limits::Nofile,
    limits: &crate::limits::Limits,
) -> Arc<Metrics> {
    let metrics = Arc::new(Metrics::for_instance(&metrics_profile(cfg)));
    metrics.max_fds.set(
        nofile
            .soft
            .map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX)),
    );
    metrics.set_connections_limit("traffic", limits.traffic);
    metrics.set_connections_limit("per_address", limits.per_address);
    metrics.set_connections_limit("admin", limits.admin);
    metrics
}

/// The bound listeners: the two HTTP ports accepting already (within their
/// connection limits, with TLS where it is on), the TCP port bound but not
/// accepting until [`start_servers`].
struct Listeners {
    traffic: Incoming,
    admin: Incoming,
    tcp: Option<TcpListener>,
    grpc: Option<TcpListener>,
    mqtt: Option<TcpListener>,
    tls: Option<Arc<ServerTls>>,
    traffic_admission: TrafficAdmission,
}

/// The listener TLS for a listener: `tls` when it is configured and `on`
/// for the listener.
fn tls_for(tls: &Option<Arc<ServerTls>>, on: bool) -> Option<Arc<ServerTls>> {
    tls.clone().filter(|_| on)
}

/// The traffic ports' limits: one pool and one per-address count, shared
/// by the traffic HTTP port and the TCP port.
struct TrafficAdmission {
    pool: Arc<Pool>,
    per_address: Arc<PerAddress>,
    metrics: Arc<Metrics>,
}

impl TrafficAdmission {
    /// The admission of the traffic port `name`.
    fn admission(&self, name: &'static str) -> Admission {
        Admission::new(
            name,
            self.pool.clone(),
            Some(self.per_address.clone()),
            self.metrics.clone(),
        )
    }
}

/// Binds the traffic HTTP, admin HTTP and (when configured) TCP ports,
/// loads the listener TLS, and starts accepting on the HTTP ports.
async fn bind_listeners(
    cfg: &Config,
    limits: &crate::limits::Limits,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<Listeners> {
    let server = &cfg.server;
    let traffic = bind(&server.host, server.http.port, "traffic HTTP").await?;
    let admin_host = server.admin.host.as_deref().unwrap_or(&server.host);
    let admin = bind(admin_host, server.admin.port, "admin HTTP").await?;
    let tcp = bind_optional(cfg, &server.tcp.host, server.tcp.port, "TCP").await?;
    let grpc = bind_optional(cfg, &server.grpc.host, server.grpc.port, "gRPC").await?;
    let mqtt = bind_optional(cfg, &server.mqtt.host, server.mqtt.port, "MQTT").await?;
    let tls = crate::tls::ServerTls::load(&server.tls)?;
    if tls.is_some() {
        tracing::info!(
            traffic = server.http.tls,
            admin = server.admin.tls,
            tcp = server.tcp.tls,
            "TLS: {}",
            crate::tls::describe(&server.tls)
        );
    }
    // The traffic ports share one pool and one per-address count; the
    // admin port has its own pool.
    let traffic_admission = TrafficAdmission {
        pool: Pool::new(limits.traffic),
        per_address: PerAddress::new(limits.per_address),
        metrics: metrics.clone(),
    };
    let traffic = Incoming::new(
        traffic,
        tls_for(&tls, server.http.tls),
        traffic_admission.admission("traffic"),
    )?;
    let admin = Incoming::new(
        admin,
        tls_for(&tls, server.admin.tls),
        Admission::new("admin", Pool::new(limits.admin), None, metrics.clone()),
    )?;
    Ok(Listeners {
        traffic,
        admin,
        tcp,
        grpc,
        mqtt,
        tls,
        traffic_admission,
    })
}

/// The stores the runtime keeps its state in. Under
/// `PARTITION_OWNED_PULL` this instance joins the cluster
/// ([`join_cluster`]) and its offsets are fenced by the partition
/// ownership; otherwise the offsets stay in the local store.
fn open_state_stores(
    cfg: &Config,
    db: &Arc<LocalDb>,
    meta: &Arc<dyn MetaStore>,
    metrics: &Arc<Metrics>,
    listeners: &Listeners,
) -> anyhow::Result<Stores> {
    let (offsets, ownership): (Arc<dyn OffsetStore>, Option<Ownership>) =
        if cfg.delivery.topology == DeliveryTopology::PartitionOwnedPull {
            let (offsets, ownership) = join_cluster(cfg, meta, metrics, listeners)?;
            (Arc::new(offsets), Some(ownership))
        } else {
            (Arc::new(RocksOffsetStore::new(db.clone())), None)
        };
    Ok(Stores {
        offsets,
        ledger: Arc::new(RocksDeliveryStateStore::new(db.clone())),
        subscriptions: SubscriptionStore::new(meta.clone()),
        dead_letters: DeadLetterStore::new(meta.clone()),
        ownership,
    })
}

/// Joins the cluster: registers this instance (its id, this boot, its
/// addresses) in the meta store and takes part in the partition
/// ownership; the offset store fenced by it.
fn join_cluster(
    cfg: &Config,
    meta: &Arc<dyn MetaStore>,
    metrics: &Arc<Metrics>,
    listeners: &Listeners,
) -> anyhow::Result<(FencedOffsetStore, Ownership)> {
    let info = InstanceInfo {
        id: instance_id(cfg)?,
        boot: uuid::Uuid::now_v7().simple().to_string(),
        address: cfg
            .cluster
            .advertise
            .clone()
            .unwrap_or_else(|| listeners.traffic.local_addr().to_string()),
        admin_address: listeners.admin.local_addr().to_string(),
        tls: listeners.tls.is_some() && cfg.server.http.tls,
        since_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
        lease_ms: cfg.cluster.lease.as_millis() as u64,
    };
    tracing::info!(instance = %info.id, "partition ownership: PARTITION_OWNED_PULL");
    let (cluster, handovers) = Cluster::start(
        meta.clone(),
        info,
        ClusterSettings {
            lease: cfg.cluster.lease,
            handover_grace: cfg.cluster.handover_grace,
            secret: cfg.cluster.secret.clone().unwrap_or_default(),
            internal_tls: internal_tls(cfg)?,
        },
        metrics.clone(),
    );
    let offsets = FencedOffsetStore::new(meta.clone(), cluster.fence().clone(), metrics.clone());
    Ok((offsets, Ownership { cluster, handovers }))
}

/// The configuration the runtime runs with: the webhook handshake names
/// this runtime by the cluster's name unless
/// `eventmesh.webhook.handshake.origin` is set. (The configuration in
/// force, which a reload compares with, keeps the key as set.)
fn with_handshake_origin(cfg: &Config, cluster_name: &str) -> Config {
    let mut cfg = cfg.clone();
    cfg.delivery
        .webhook_handshake
        .origin
        .get_or_insert_with(|| cluster_name.to_string());
    cfg
}

/// Starts the runtime (ingress, dispatchers, retention) on the event log
/// and the state stores.
async fn start_runtime(
    cfg: &Config,
    log: Arc<dyn EventLog>,
    stores: Stores,
    webhook_guard: &Arc<WebhookGuard>,
    retention: Retention,
    metrics: Arc<Metrics>,
    access: Arc<dyn eventmesh_runtime::TopicAccess>,
) -> anyhow::Result<Arc<Runtime>> {
    Runtime::start(
        log,
        stores,
        DispatchSettings {
            delivery: cfg.delivery.clone(),
            webhook_guard: webhook_guard.clone(),
        },
        IngressSettings {
            default_partitions: cfg.topic.default_partitions,
            dedup: !cfg.publish.dedup_window.is_zero(),
            retention,
            retention_check: cfg.storage.retention_check,
            pattern_rescan: cfg.topic.pattern_rescan,
        },
        metrics,
        access,
    )
    .await
    .context("cannot start the runtime")
}

/// Builds the security gate from its configuration, before the runtime:
/// the runtime's pattern subscriptions check the topics they attach with
/// it from their first start.
fn build_gate(cfg: &Config, metrics: &Metrics) -> anyhow::Result<Arc<SecurityGate>> {
    let gate = SecurityGate::from_config(&cfg.gate, metrics.gate_denied.clone())
        .context("cannot build the security gate")?;
    Ok(Arc::new(gate))
}

/// The subscriptions made before this start count against their tenants'
/// quotas.
async fn track_subscriptions(gate: &SecurityGate, runtime: &Runtime) {
    for sub in runtime.subscriptions(None).await {
        if let Some(tenant) = &sub.tenant {
            gate.track_subscription(
                tenant,
                &eventmesh_api::quota_key(&sub.group, &sub.topic, &sub.client_id),
            );
        }
    }
}

/// With listener TLS, watches its files and loads them again when they
/// change, until shutdown.
fn watch_certificates(cfg: &Config, listeners: &Listeners, shutdown: &CancellationToken) {
    if let Some(t) = &listeners.tls {
        t.clone().watch(cfg.server.tls.watch, shutdown.clone());
    }
}

/// The reloader of the gate files and the listener TLS (on the admin
/// route), reloading on SIGHUP from now on.
fn start_reloader(
    sources: crate::reload::Sources,
    gate: &Arc<SecurityGate>,
    listeners: &Listeners,
    cfg: &Config,
) -> Arc<crate::reload::Reloader> {
    let reloader = Arc::new(crate::reload::Reloader::new(
        sources,
        gate.clone(),
        listeners.tls.clone(),
        cfg.clone(),
    ));
    reloader.clone().on_hangup();
    reloader
}

/// The guards that limit failed attempts at the admin token and the
/// cluster secret, per address.
fn credential_guards(
    cfg: &Config,
    runtime: &Runtime,
    gate: &Arc<SecurityGate>,
) -> Arc<http::credentials::CredentialGuards> {
    Arc::new(http::credentials::CredentialGuards::new(
        &cfg.server.auth_failures,
        runtime.metrics().auth_failures.clone(),
        gate.clone(),
    ))
}

/// Starts the A2A gateway, unless `eventmesh.a2a.enabled=false`.
async fn start_a2a_gateway(
    cfg: &Config,
    api: &eventmesh_api::Api,
    meta: &Arc<dyn MetaStore>,
) -> Option<Arc<eventmesh_a2a_gateway::Gateway>> {
    match cfg.a2a.enabled {
        true => {
            let gw =
                eventmesh_a2a_gateway::Gateway::new(api.clone(), meta.clone(), cfg.a2a.clone());
            gw.start().await;
            Some(gw)
        }
        false => None,
    }
}

/// The servers on the listeners: the HTTP ones not yet polled, the TCP one
/// running.
struct Servers<H> {
    traffic: H,
    admin: H,
    tcp: Option<tokio::task::JoinHandle<()>>,
    grpc: Option<tokio::task::JoinHandle<()>>,
    mqtt: Option<tokio::task::JoinHandle<()>>,
}

/// Puts the routers on the HTTP listeners (served once polled, until
/// shutdown) and starts serving the TCP port; logs where each listens.
fn start_servers(
    listeners: Listeners,
    state: AppState,
    api: eventmesh_api::Api,
    broker: Option<Arc<eventmesh_mqtt::Broker>>,
    cfg: &Config,
    shutdown: &CancellationToken,
    shards: Option<crate::shards::Shards>,
) -> anyhow::Result<Servers<impl std::future::Future<Output = ()>>> {
    let Listeners {
        traffic,
        admin,
        tcp,
        grpc,
        mqtt,
        tls,
        traffic_admission,
    } = listeners;
    let server = &cfg.server;
    let traffic_addr: SocketAddr = traffic.local_addr();
    let admin_addr: SocketAddr = admin.local_addr();
    let timeouts = crate::http_serve::Timeouts {
        header: server.http.header_timeout,
        idle: server.http.idle_timeout,
        body: server.http.body_timeout,
    };
    let traffic_server = crate::http_serve::serve(
        traffic,
        http::traffic_router(state.clone()),
        timeouts,
        shutdown.clone(),
    );
    let gateway = state.a2a.clone();
    let admin_server =
        crate::http_serve::serve(admin, http::admin_router(state), timeouts, shutdown.clone());
    let over = |on: bool| if tls.is_some() && on { " (TLS)" } else { "" };
    tracing::info!(
        "traffic HTTP listening on {traffic_addr}{}",
        over(server.http.tls)
    );
    tracing::info!(
        "admin HTTP listening on {admin_addr}{}",
        over(server.admin.tls)
    );
    let tcp_server = match tcp {
        Some(listener) => Some(crate::tcp::start(
            listener,
            tls_for(&tls, server.tcp.tls),
            traffic_admission.admission("tcp"),
            api,
            cfg,
            shards,
        )?),
        None => {
            tracing::info!("TCP port disabled");
            None
        }
    };
    let grpc_server = match grpc {
        Some(listener) => Some(crate::grpc::start(
            listener,
            tls.clone(),
            traffic_admission.admission("grpc"),
            gateway,
            cfg,
            traffic_addr.port(),
            shutdown,
        )?),
        None => None,
    };
    let mqtt = mqtt.zip(broker).map(|(listener, broker)| {
        let admission = traffic_admission.admission("mqtt");
        crate::mqtt::start(listener, tls.clone(), admission, broker, cfg)
    });
    Ok(Servers {
        traffic: traffic_server,
        admin: admin_server,
        tcp: tcp_server,
        grpc: grpc_server,
        mqtt: mqtt.transpose()?,
    })
}

/// Serves until SIGINT or SIGTERM ([`drain_on_signal`]) has drained the
/// runtime and stopped the servers; waits for the TCP server to end.
async fn serve_until_shutdown<H: std::future::Future<Output = ()>>(
    servers: Servers<H>,
    runtime: &Arc<Runtime>,
    shutdown: &CancellationToken,
    grace: std::time::Duration,
) {
    let signals = drain_on_signal(runtime, shutdown, grace);
    tokio::join!(servers.traffic, servers.admin);
    signals.abort();
    for server in [servers.tcp, servers.grpc, servers.mqtt]
        .into_iter()
        .flatten()
    {
        let _ = server.await;
    }
}

/// On SIGINT or SIGTERM: no new polls or subscriptions, the deliveries
/// handed out settle (acks are still served) for up to `grace`, then the
/// servers stop accepting and finish their in-flight requests.
fn drain_on_signal(
    runtime: &Arc<Runtime>,
    shutdown: &CancellationToken,
    grace: std::time::Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn({
        let (token, runtime) = (shutdown.clone(), runtime.clone());
        async move {
            wait_for_signal().await;
            // Acks are still served while the handed-out deliveries settle.
            tracing::info!(
                grace_ms = grace.as_millis() as u64,
                "draining: no new polls or subscriptions"
            );
            runtime.drain(grace).await;
            token.cancel();
        }
    })
}

/// Once the servers have stopped: stops the dispatchers (flushing their
/// offsets), reports the standalone log writer's statistics, and flushes
/// the local store.
async fn shut_down(
    runtime: &Runtime,
    standalone: Option<Arc<StandaloneLog>>,
    db: &LocalDb,
) -> anyhow::Result<()> {
    tracing::info!("servers stopped; stopping dispatchers");
    runtime.shutdown().await;
    if let Some(log) = standalone {
        let stats = log.commit_stats();
        tracing::info!(
            "log writer: {} appends in {} commits",
            stats.appends.load(std::sync::atomic::Ordering::Relaxed),
            stats.commits.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
    db.flush()
        .context("final flush of the local store failed")?;
    tracing::info!("shutdown complete");
    Ok(())
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!("cannot listen for SIGTERM: {e}");
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => tracing::info!("SIGINT received; shutting down"),
            _ = term.recv() => tracing::info!("SIGTERM received; shutting down"),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
