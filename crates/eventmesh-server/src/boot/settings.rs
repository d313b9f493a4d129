//! What the boot derives from the configuration beyond the sections
//! themselves: the internal channel's client TLS, the local store's tuning,
//! this instance's id in the cluster, and what its metrics say it runs as.

use std::sync::Arc;

use anyhow::Context;
use eventmesh_core::config::{Config, DeliveryTopology};
use eventmesh_runtime::metrics::Profile;
use eventmesh_storage::LocalDbOptions;

/// The internal channel's client TLS, when this instance's traffic port
/// (and so, in a uniform cluster, every instance's) serves TLS: it trusts
/// the cluster CA (else the client CA, else the public roots) and presents
/// the instance's own certificate.
pub(super) fn internal_tls(cfg: &Config) -> anyhow::Result<Option<Arc<rustls::ClientConfig>>> {
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
pub(super) fn local_db_options(cfg: &Config) -> LocalDbOptions {
    LocalDbOptions {
        write_buffer_bytes: cfg.storage.write_buffer_bytes,
        block_cache_bytes: cfg.storage.block_cache_bytes,
        wal_reuse_files: cfg.storage.wal_reuse_files,
        dedup_window: cfg.publish.dedup_window,
    }
}

/// This instance's id in the cluster: the configured one, else the one
/// made up at first boot and kept in the data directory.
/// Where the cluster's name is kept.
const CLUSTER_NAME_KEY: &str = "/em/mesh/cluster-name";

/// The cluster's name on the mesh: the configured one (kept, replacing an
/// earlier one, with a warning), else the one kept in the meta store, else
/// one made up now and kept (the first instance to keep one wins, so every
/// instance sharing the store has the same).
pub(super) async fn cluster_name(
    cfg: &Config,
    meta: &Arc<dyn eventmesh_meta::MetaStore>,
) -> anyhow::Result<String> {
    let name = find_cluster_name(cfg, meta).await?;
    tracing::info!(cluster = %name, "this cluster's name on the mesh");
    Ok(name)
}

async fn find_cluster_name(
    cfg: &Config,
    meta: &Arc<dyn eventmesh_meta::MetaStore>,
) -> anyhow::Result<String> {
    let kept = meta
        .get(CLUSTER_NAME_KEY)
        .await
        .context("cannot read the cluster's name from the meta store")?
        .map(|kv| String::from_utf8_lossy(&kv.value).into_owned());
    if let Some(name) = &cfg.cluster.name {
        if kept.as_deref() != Some(name.as_str()) {
            if let Some(old) = &kept {
                tracing::warn!(old = %old, new = %name, "the cluster's name changes (eventmesh.cluster.name): links of other clusters that named the old one must be told");
            }
            meta.put(CLUSTER_NAME_KEY, bytes::Bytes::from(name.clone()))
                .await
                .context("cannot keep the cluster's name in the meta store")?;
        }
        return Ok(name.clone());
    }
    if let Some(name) = kept {
        return Ok(name);
    }
    let made = format!("mesh-{}", &uuid::Uuid::now_v7().simple().to_string()[20..]);
    let kept_mine = meta
        .put_if_absent(CLUSTER_NAME_KEY, bytes::Bytes::from(made.clone()))
        .await
        .context("cannot keep the cluster's name in the meta store")?;
    if kept_mine {
        return Ok(made);
    }
    // Another instance kept one first: that one.
    let kv = meta
        .get(CLUSTER_NAME_KEY)
        .await
        .context("cannot read the cluster's name from the meta store")?
        .context("the cluster's name was kept and is gone")?;
    Ok(String::from_utf8_lossy(&kv.value).into_owned())
}

pub(super) fn instance_id(cfg: &Config) -> anyhow::Result<String> {
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

/// What `/metrics` says this instance runs as: a cluster member when the
/// partitions are shared out (`PARTITION_OWNED_PULL`), its log's backend,
/// this build's version, and its commit when the build was given one in
/// `EVENTMESH_COMMIT`.
pub(super) fn metrics_profile(cfg: &Config) -> Profile {
    Profile {
        cluster: cfg.delivery.topology == DeliveryTopology::PartitionOwnedPull,
        storage: cfg.storage.backend,
        version: env!("CARGO_PKG_VERSION").to_string(),
        commit: option_env!("EVENTMESH_COMMIT")
            .filter(|c| !c.is_empty())
            .map(str::to_string),
    }
}
