//! Readiness: whether this instance can take traffic now, check by check
//! (`GET /admin/ready`). Liveness is the process answering at all.

use std::time::Duration;

use serde::Serialize;

use super::Runtime;

/// Bound on the meta store's answer to a readiness probe.
const META_PROBE: Duration = Duration::from_secs(2);

/// One readiness check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Check {
    fn of(name: &'static str, r: Result<(), String>) -> Check {
        Check {
            name,
            ok: r.is_ok(),
            detail: r.err(),
        }
    }
}

impl Runtime {
    /// The readiness checks: not shutting down, the event log able to
    /// take writes, the meta store answering (when `shared_meta`: a store
    /// other instances use), and in a cluster the instance settled into
    /// it (see [`crate::cluster::Cluster::settled`]).
    pub async fn readiness(&self, shared_meta: bool) -> Vec<Check> {
        let mut checks = vec![
            Check::of(
                "lifecycle",
                if self.is_draining() {
                    Err("shutting down".into())
                } else {
                    Ok(())
                },
            ),
            Check::of("storage", self.log.status()),
        ];
        if shared_meta {
            let answer = tokio::time::timeout(META_PROBE, self.store.get("ready-probe")).await;
            checks.push(Check::of(
                "meta",
                match answer {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(format!("meta store: {e}")),
                    Err(_) => Err(format!(
                        "meta store did not answer within {} ms",
                        META_PROBE.as_millis()
                    )),
                },
            ));
        }
        if let Some(c) = &self.cluster {
            checks.push(Check::of("partitions", c.settled()));
        }
        checks
    }
}
