//! The stores a node opens at boot: the local RocksDB store, the event log
//! and the meta store of the configured backends, and what the local store
//! reports on `/metrics`.

use std::sync::Arc;

use anyhow::Context;
use eventmesh_core::config::{Config, MetaType, StorageType};
use eventmesh_jetstream::JetStreamLog;
use eventmesh_meta::{EmbeddedMetaStore, EtcdMetaStore, MetaStore};
use eventmesh_runtime::Metrics;
use eventmesh_storage::{CommitObserver, EventLog, LocalDb, Retention, StandaloneLog};

use super::settings::local_db_options;
use crate::http;

/// Opens the local store (RocksDB) in the data directory.
pub(super) fn open_storage(cfg: &Config) -> anyhow::Result<Arc<LocalDb>> {
    Ok(LocalDb::open_with(
        &cfg.storage.data_dir,
        &local_db_options(cfg),
    )?)
}

/// The event log's default retention, from the storage section.
pub(super) fn retention(cfg: &Config) -> Retention {
    Retention {
        ms: cfg.storage.retention_age.as_millis() as u64,
        bytes: cfg.storage.retention_bytes,
    }
}

/// Opens the event log of the configured backend: the standalone log in
/// the local store (also returned on its own: it keeps its writer's
/// statistics for the shutdown line), or JetStream.
pub(super) async fn open_event_log(
    cfg: &Config,
    db: &Arc<LocalDb>,
    metrics: &Arc<Metrics>,
    retention: Retention,
) -> anyhow::Result<(Arc<dyn EventLog>, Option<Arc<StandaloneLog>>)> {
    let observer: CommitObserver = {
        let m = metrics.clone();
        Arc::new(move |took, appends| {
            m.log_commit_seconds.observe(took.as_secs_f64());
            m.log_commit_appends.observe(appends as f64);
        })
    };
    Ok(match cfg.storage.backend {
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
    })
}

/// Opens the meta store of the configured backend: embedded in the local
/// store, or etcd.
pub(super) async fn open_meta_store(
    cfg: &Config,
    db: &Arc<LocalDb>,
) -> anyhow::Result<Arc<dyn MetaStore>> {
    Ok(match cfg.meta.backend {
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
    })
}

/// What the local store holds in memory and on disk, for `/metrics`,
/// with the idempotency index of the standalone log.
pub(super) fn store_memory(
    db: &Arc<LocalDb>,
    standalone: Option<&Arc<StandaloneLog>>,
) -> http::StoreMemory {
    let db = db.clone();
    let stats = standalone.map(|log| log.commit_stats().clone());
    Arc::new(move || {
        let m = db.memory_usage();
        let load = |n: &std::sync::atomic::AtomicU64| n.load(std::sync::atomic::Ordering::Relaxed);
        let index = stats.as_ref().map_or(0, |s| load(&s.dedup_index_bytes));
        http::StoreUsage {
            memory: vec![
                ("block_cache", m.block_cache),
                ("memtables", m.memtables),
                ("dedup_index", index as usize),
            ],
            disk: db.disk_usage(),
            dedup_keys: stats.as_ref().map(|s| load(&s.dedup_keys)),
        }
    })
}
