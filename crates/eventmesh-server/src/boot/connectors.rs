//! The connector runtime (mesh links included) at boot: where positions
//! are kept, and this cluster's name for the links.

use std::sync::Arc;

use eventmesh_core::config::{Config, ConnectorOffsetStore};
use eventmesh_meta::MetaStore;
use eventmesh_storage::LocalDb;

/// Starts the connectors defined in the meta store, their positions kept
/// where `eventmesh.connector.offset.store` says.
pub(super) fn start_connectors(
    cfg: &Config,
    api: &eventmesh_api::Api,
    meta: &Arc<dyn MetaStore>,
    db: &Arc<LocalDb>,
    cluster_name: Arc<str>,
) -> Arc<eventmesh_connect_runtime::Connectors> {
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
    eventmesh_connect_runtime::Connectors::start(
        api.clone(),
        meta.clone(),
        positions,
        cfg,
        cluster_name,
    )
}
