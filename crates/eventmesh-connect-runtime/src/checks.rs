//! What a connector definition must pass before it is stored: the
//! deployment it needs, the gate as its own principal, and the outbound
//! guard on the hosts it connects to; and the replay memory of the
//! timestamped signatures an `http-source` accepted.

use super::*;

impl Connectors {
    /// The definition of an `http-source`, as last seen (the inbound route
    /// reads it at every request).
    pub fn http_source(&self, name: &str) -> Option<Definition> {
        let defs = self.defs.borrow();
        let kv = defs.entries.get(&def_key(name))?;
        serde_json::from_slice::<Definition>(&kv.value)
            .ok()
            .filter(|d| d.kind == eventmesh_connect::kinds::http::KIND)
    }

    /// Admits a verified timestamped signature of the `http-source`
    /// `name`, signed at `at` (Unix seconds): refused when the same
    /// signature was accepted before inside the `window` (409
    /// `replayed_signature`), or when it is older than every signature
    /// still remembered (401 `stale_timestamp`).
    pub fn admit_signature(
        &self,
        name: &str,
        at: u64,
        mac: [u8; 32],
        now: u64,
        window: u64,
    ) -> Result<(), ApiError> {
        let mut seen = self.seen.lock().expect("signatures lock");
        let memory = seen
            .entry(name.to_string())
            .or_insert_with(|| SeenSignatures::new(SEEN_SIGNATURES));
        match memory.admit(at, mac, now, window) {
            Ok(()) => Ok(()),
            Err(Refusal::Replayed) => Err(ApiError::new(
                eventmesh_api::StatusCode::CONFLICT,
                "replayed_signature",
                "this signed request was accepted before; each request is signed anew",
            )),
            Err(Refusal::BelowFloor) => Err(ApiError::new(
                eventmesh_api::StatusCode::UNAUTHORIZED,
                "stale_timestamp",
                "the signed time is older than the signatures this connector still remembers",
            )),
        }
    }

    /// Forgets a signature admitted for a request that then failed, so
    /// that the sender's retry of the same bytes is taken.
    pub fn forget_signature(&self, name: &str, at: u64, mac: [u8; 32]) {
        if let Some(memory) = self.seen.lock().expect("signatures lock").get_mut(name) {
            memory.forget(at, mac);
        }
    }

    /// Refuses what cannot run safely: with a meta store other instances
    /// share, a copy can move, so its positions must be shared and its
    /// ownership fenced.
    pub(super) fn check_deployment(&self, def: &Definition) -> Result<(), ApiError> {
        if !self.shared_meta || def.kind == eventmesh_connect::kinds::http::KIND {
            return Ok(());
        }
        if self.cluster.is_none() {
            return Err(ApiError::new(
                eventmesh_api::StatusCode::CONFLICT,
                "connectors_need_ownership",
                "with a shared meta store (eventmesh.meta.type=etcd) connectors run under \
                 fenced ownership, which needs eventmesh.delivery.topology=PARTITION_OWNED_PULL",
            ));
        }
        if self.store != ConnectorOffsetStore::Meta {
            return Err(ApiError::new(
                eventmesh_api::StatusCode::CONFLICT,
                "connector_offsets_not_shared",
                format!(
                    "eventmesh.connector.offset.store={} keeps positions on one instance, but in a \
                     cluster a connector moves to another instance when its own goes; set \
                     eventmesh.connector.offset.store=meta",
                    self.store
                ),
            ));
        }
        Ok(())
    }

    /// The hosts the connector connects to, against the outbound guard
    /// (`eventmesh.webhook.denied.cidrs`), unless the definition opts out
    /// (`"targetGuard": false`).
    pub(super) async fn check_targets(&self, def: &Definition) -> Result<(), ApiError> {
        let Some(kind) = self.kind(&def.kind).filter(|_| def.target_guard) else {
            return Ok(());
        };
        for target in kind.targets(&def.config) {
            self.api
                .check_connector_target(&target)
                .await
                .map_err(|m| {
                    ApiError::bad_request(
                        "connector_target_denied",
                        format!(
                            "config: {m}; set \"targetGuard\": false in the definition to allow it"
                        ),
                    )
                })?;
        }
        Ok(())
    }

    /// The gate, as the connector's principal: operation `CONNECTOR` on its
    /// topic (each of a link's exports).
    pub(super) fn admit(&self, def: &Definition) -> Result<(), ApiError> {
        for export in def.subscriptions() {
            self.api.admit_as(
                &Runner::caller(def),
                eventmesh_security::Operation::Connector,
                &export.topic,
            )?;
        }
        Ok(())
    }
}
