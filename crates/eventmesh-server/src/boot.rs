//! Boot: configuration, logging, the local store, the runtime, the two HTTP
//! servers, and graceful shutdown on SIGINT/SIGTERM (stop accepting, finish
//! in-flight requests, stop dispatchers and flush offsets, close the log,
//! flush RocksDB).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use eventmesh_core::config::{
    self, Config, ConfigError, ConfigSources, Loaded, MetaType, ProcessEnv, StorageType,
};
use eventmesh_core::config::{ConnectorOffsetStore, DeliveryTopology};
use eventmesh_jetstream::JetStreamLog;
use eventmesh_meta::{EmbeddedMetaStore, EtcdMetaStore, MetaStore};
use eventmesh_runtime::cluster::{Cluster, ClusterSettings, FencedOffsetStore, InstanceInfo};
use eventmesh_runtime::{
    DispatchSettings, IngressSettings, Metrics, Ownership, Runtime, Stores, WebhookGuard,
};
use eventmesh_security::SecurityGate;
use eventmesh_state::{
    DeadLetterStore, OffsetStore, RocksDeliveryStateStore, RocksOffsetStore, SubscriptionStore,
};
use eventmesh_storage::{
    CommitObserver, EventLog, LocalDb, LocalDbOptions, Retention, StandaloneLog,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::http::{self, AppState};
use crate::limits::{Admission, PerAddress, Pool};
use crate::tls::Incoming;

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
    let served = rt.block_on(run(cfg, sources));
    telemetry.shutdown();
    served
}

async fn bind(host: &str, port: u16, what: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind((host, port))
        .await
        .with_context(|| format!("cannot bind {what} on {host}:{port}"))
}

async fn run(cfg: Config, sources: crate::reload::Sources) -> anyhow::Result<()> {
    let started = Instant::now();
    tracing::info!(
        worker_threads = tokio::runtime::Handle::current().metrics().num_workers(),
        storage = cfg.storage.backend.as_str(),
        data_dir = %cfg.storage.data_dir.display(),
        sync = cfg.storage.sync,
        "starting eventmesh {}",
        env!("CARGO_PKG_VERSION")
    );
    // Before the store opens its files: every descriptor the hard limit
    // allows, and the listeners' share of them.
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
    let db = LocalDb::open_with(&cfg.storage.data_dir, &local_db_options(&cfg))?;
    let metrics = Arc::new(Metrics::new());
    metrics.max_fds.set(
        nofile
            .soft
            .map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX)),
    );
    metrics.set_connections_limit("traffic", limits.traffic);
    metrics.set_connections_limit("per_address", limits.per_address);
    metrics.set_connections_limit("admin", limits.admin);
    let observer: CommitObserver = {
        let m = metrics.clone();
        Arc::new(move |took, appends| {
            m.log_commit_seconds.observe(took.as_secs_f64());
            m.log_commit_appends.observe(appends as f64);
        })
    };
    let retention = Retention {
        ms: cfg.storage.retention_age.as_millis() as u64,
        bytes: cfg.storage.retention_bytes,
    };
    // The standalone log keeps its writer's statistics for the shutdown line.
    let (log, standalone): (Arc<dyn EventLog>, Option<Arc<StandaloneLog>>) =
        match cfg.storage.backend {
            StorageType::Standalone => {
                let log = StandaloneLog::open_observed(
                    db.clone(),
                    cfg.storage.sync,
                    cfg.publish.dedup_window,
                    observer,
                )?;
                log.set_default_retention(retention);
                log.set_read_before_sync(!cfg.delivery.after_sync);
                (log.clone(), Some(log))
            }
            StorageType::Jetstream => {
                let js = &cfg.storage.jetstream;
                tracing::info!(
                    servers = %eventmesh_core::redact::urls(&js.servers),
                    replicas = js.replicas,
                    prefix = %js.prefix,
                    "event log: JetStream"
                );
                let log = JetStreamLog::connect(js, cfg.publish.dedup_window).await?;
                log.set_default_retention(retention);
                (log, None)
            }
        };
    let meta: Arc<dyn MetaStore> = match cfg.meta.backend {
        MetaType::Embedded => Arc::new(EmbeddedMetaStore::open(db.clone())?),
        MetaType::Etcd => {
            let endpoints = eventmesh_core::redact::urls(&cfg.meta.etcd.endpoints);
            tracing::info!("meta store: etcd at {endpoints}");
            Arc::new(
                EtcdMetaStore::connect(cfg.meta.etcd.clone())
                    .await
                    .with_context(|| format!("cannot connect to etcd at {endpoints}"))?,
            )
        }
    };
    let server = &cfg.server;
    let traffic = bind(&server.host, server.http.port, "traffic HTTP").await?;
    let admin_host = server.admin.host.as_deref().unwrap_or(&server.host);
    let admin = bind(admin_host, server.admin.port, "admin HTTP").await?;
    let tcp = match server.tcp.port {
        Some(port) => {
            let host = server.tcp.host.as_deref().unwrap_or(&server.host);
            Some(bind(host, port, "TCP").await?)
        }
        None => None,
    };
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
    let tls_for = |on: bool| tls.clone().filter(|_| on);
    // The traffic ports share one pool and one per-address count; the
    // admin port has its own pool.
    let traffic_pool = Pool::new(limits.traffic);
    let per_address = PerAddress::new(limits.per_address);
    let admission = {
        let m = metrics.clone();
        move |name: &'static str| {
            Admission::new(
                name,
                traffic_pool.clone(),
                Some(per_address.clone()),
                m.clone(),
            )
        }
    };
    let traffic = Incoming::new(traffic, tls_for(server.http.tls), admission("traffic"))?;
    let admin = Incoming::new(
        admin,
        tls_for(server.admin.tls),
        Admission::new("admin", Pool::new(limits.admin), None, metrics.clone()),
    )?;
    let traffic_addr: SocketAddr = traffic.local_addr();
    let admin_addr: SocketAddr = admin.local_addr();
    let webhook_guard = Arc::new(WebhookGuard::new(cfg.webhook.denied_cidrs.clone()));
    let (offsets, ownership): (Arc<dyn OffsetStore>, Option<Ownership>) =
        if cfg.delivery.topology == DeliveryTopology::PartitionOwnedPull {
            let info = InstanceInfo {
                id: instance_id(&cfg)?,
                boot: uuid::Uuid::now_v7().simple().to_string(),
                address: cfg
                    .cluster
                    .advertise
                    .clone()
                    .unwrap_or_else(|| traffic_addr.to_string()),
                admin_address: admin_addr.to_string(),
                tls: tls.is_some() && server.http.tls,
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
                    internal_tls: internal_tls(&cfg)?,
                },
                metrics.clone(),
            );
            let offsets =
                FencedOffsetStore::new(meta.clone(), cluster.fence().clone(), metrics.clone());
            (Arc::new(offsets), Some(Ownership { cluster, handovers }))
        } else {
            (Arc::new(RocksOffsetStore::new(db.clone())), None)
        };
    let runtime = Runtime::start(
        log,
        Stores {
            offsets,
            ledger: Arc::new(RocksDeliveryStateStore::new(db.clone())),
            subscriptions: SubscriptionStore::new(meta.clone()),
            dead_letters: DeadLetterStore::new(meta.clone()),
            ownership,
        },
        DispatchSettings {
            delivery: cfg.delivery.clone(),
            webhook_guard: webhook_guard.clone(),
        },
        IngressSettings {
            default_partitions: cfg.topic.default_partitions,
            dedup: !cfg.publish.dedup_window.is_zero(),
            retention,
            retention_check: cfg.storage.retention_check,
        },
        metrics,
    )
    .await
    .context("cannot start the runtime")?;

    let shutdown = CancellationToken::new();
    let gate = SecurityGate::from_config(&cfg.gate, runtime.metrics().gate_denied.clone())
        .context("cannot build the security gate")?;
    // Subscriptions made before this start count against their tenants.
    for sub in runtime.subscriptions(None).await {
        if let Some(tenant) = &sub.tenant {
            gate.track_subscription(
                tenant,
                &eventmesh_api::quota_key(&sub.group, &sub.topic, &sub.client_id),
            );
        }
    }
    let gate = Arc::new(gate);
    if let Some(t) = &tls {
        t.clone().watch(server.tls.watch, shutdown.clone());
    }
    let reloader = Arc::new(crate::reload::Reloader::new(
        sources,
        gate.clone(),
        tls.clone(),
        cfg.clone(),
    ));
    reloader.clone().on_hangup();
    let credentials = Arc::new(http::credentials::CredentialGuards::new(
        &cfg.server.auth_failures,
        runtime.metrics().auth_failures.clone(),
        gate.clone(),
    ));
    let api = eventmesh_api::Api::new(runtime.clone(), gate, webhook_guard, shutdown.clone());
    let store_memory: http::StoreMemory = {
        let db = db.clone();
        Arc::new(move || {
            let m = db.memory_usage();
            vec![("block_cache", m.block_cache), ("memtables", m.memtables)]
        })
    };
    let a2a = match cfg.a2a.enabled {
        true => {
            let gw =
                eventmesh_a2a_gateway::Gateway::new(api.clone(), meta.clone(), cfg.a2a.clone());
            gw.start().await;
            Some(gw)
        }
        false => None,
    };
    let positions: Arc<dyn eventmesh_connect_runtime::positions::Positions> =
        match cfg.connector.offset_store {
            ConnectorOffsetStore::Memory => {
                tracing::warn!(
                "connector positions are kept in memory (eventmesh.connector.offset.store=memory): \
                 development only, sources start over after a restart; use rocksdb or meta"
            );
                Arc::new(eventmesh_connect_runtime::positions::MemoryPositions::default())
            }
            ConnectorOffsetStore::Rocksdb => Arc::new(
                eventmesh_connect_runtime::positions::RocksPositions(db.clone()),
            ),
            ConnectorOffsetStore::Meta => Arc::new(
                eventmesh_connect_runtime::positions::MetaPositions(meta.clone()),
            ),
        };
    let connectors =
        eventmesh_connect_runtime::Connectors::start(api.clone(), meta.clone(), positions, &cfg);
    let state = AppState {
        api: api.clone(),
        config: Arc::new(cfg.clone()),
        started,
        store_memory,
        reloader,
        a2a,
        connectors,
        credentials,
    };
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
        Some(listener) => {
            let listener = Incoming::new(listener, tls_for(server.tcp.tls), admission("tcp"))?;
            tracing::info!(
                "TCP listening on {}{}",
                listener.local_addr(),
                over(server.tcp.tls)
            );
            Some(tokio::spawn(crate::tcp::serve(
                listener,
                api,
                cfg.server.tcp.clone(),
            )))
        }
        None => {
            tracing::info!("TCP port disabled");
            None
        }
    };
    tracing::info!("eventmesh ready in {} ms", started.elapsed().as_millis());
    let signals = tokio::spawn({
        let (token, runtime, grace) = (shutdown.clone(), runtime.clone(), cfg.shutdown.grace);
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
    });
    tokio::join!(traffic_server, admin_server);
    signals.abort();
    if let Some(t) = tcp_server {
        let _ = t.await;
    }
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

/// The internal channel's client TLS, when this instance's traffic port
/// (and so, in a uniform cluster, every instance's) serves TLS: it trusts
/// the cluster CA (else the client CA, else the public roots) and presents
/// the instance's own certificate.
fn internal_tls(cfg: &Config) -> anyhow::Result<Option<Arc<rustls::ClientConfig>>> {
    let tls = &cfg.server.tls;
    if !(tls.configured() && cfg.server.http.tls) {
        return Ok(None);
    }
    let files = eventmesh_client::TlsFiles {
        ca_file: cfg
            .cluster
            .tls_ca_file
            .clone()
            .or_else(|| tls.client_ca_file.clone()),
        cert_file: tls.cert_file.clone(),
        key_file: tls.key_file.clone(),
    };
    let config = files
        .client_config()
        .context("cannot set up TLS for the internal channel")?;
    Ok(Some(config))
}

/// The local store's tuning, from the storage section.
fn local_db_options(cfg: &Config) -> LocalDbOptions {
    LocalDbOptions {
        write_buffer_bytes: cfg.storage.write_buffer_bytes,
        block_cache_bytes: cfg.storage.block_cache_bytes,
        dedup_window: cfg.publish.dedup_window,
    }
}

/// This instance's id in the cluster: the configured one, else the one
/// made up at first boot and kept in the data directory.
fn instance_id(cfg: &Config) -> anyhow::Result<String> {
    if let Some(id) = &cfg.cluster.instance_id {
        return Ok(id.clone());
    }
    let file = cfg.storage.data_dir.join("instance-id");
    match std::fs::read_to_string(&file) {
        Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", file.display())),
    }
    let id = format!("em-{}", &uuid::Uuid::now_v7().simple().to_string()[20..]);
    std::fs::write(&file, &id).with_context(|| format!("cannot write {}", file.display()))?;
    Ok(id)
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
