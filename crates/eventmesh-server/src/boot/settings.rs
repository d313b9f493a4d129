//! What the boot derives from the configuration beyond the sections
//! themselves: the internal channel's client TLS, the local store's tuning,
//! and this instance's id in the cluster.

use std::sync::Arc;

use anyhow::Context;
use eventmesh_core::config::Config;
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
        dedup_window: cfg.publish.dedup_window,
    }
}

/// This instance's id in the cluster: the configured one, else the one
/// made up at first boot and kept in the data directory.
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
