//! What a running sink shows of its backlog: its lag in events, and for a
//! mesh link also in seconds, its state as metrics, and a warning while
//! retention may drop events the link has not sent yet.
//!
//! A link's backlog is at risk on a topic when what waits for it is most
//! of what retention keeps: its oldest unsent event is past
//! [`RISK`] of the topic's age limit, or, on a partition retention already
//! trims, its unsent events are past [`RISK`] of those stored.

use crate::run::{set, Runner};

/// The share of what retention keeps past which a link's backlog is at
/// risk.
const RISK: f64 = 0.8;

impl Runner {
    pub(crate) fn is_link(&self) -> bool {
        self.def.kind == super::KIND
    }

    /// Reads and records a sink's lag (and a link's in seconds, from the
    /// `time` of the oldest event it holds unsent, while any waits).
    pub(crate) async fn refresh_lag(&self, unsent_since: Option<u64>) {
        let topics = self.topics().await;
        let lag = self.group_lag(&topics).await;
        let unsent_since = unsent_since.filter(|_| lag.unwrap_or(0) > 0);
        let seconds = unsent_since.map_or(0.0, |t| {
            eventmesh_core::time::now_ms().saturating_sub(t) as f64 / 1000.0
        });
        let link = self.is_link();
        set(&self.status, |s| {
            s.lag = lag;
            if link {
                s.lag_seconds = Some(seconds);
            }
        });
        if !link {
            return;
        }
        let up = self.status.lock().expect("status lock").state == "running";
        let name = &self.def.name;
        self.metrics
            .link_state(name, Some((up, lag.unwrap_or(0), seconds)));
        let risk = match lag {
            Some(n) if n > 0 => self.retention_risk(&topics, seconds).await,
            _ => None,
        };
        let was = self.metrics.link_at_risk(name, risk.is_some());
        match (was, risk) {
            (false, Some(why)) => {
                tracing::warn!(link = %name, "retention may drop events this link has not sent: {why}")
            }
            (true, None) => {
                tracing::info!(link = %name, "the link's backlog is within retention again")
            }
            _ => {}
        }
    }

    /// Why retention may drop events the link has not sent, if it may.
    async fn retention_risk(&self, topics: &[String], lag_seconds: f64) -> Option<String> {
        let group = self.def.group();
        for topic in topics {
            let Ok(detail) = self.api.admin().topic_detail(topic).await else {
                continue;
            };
            let keep_ms = detail.retention.ms as f64;
            if keep_ms > 0.0 && lag_seconds * 1000.0 >= RISK * keep_ms {
                return Some(format!(
                    "on {topic} the oldest unsent event is {lag_seconds:.0} s old, and retention keeps {:.0} s",
                    keep_ms / 1000.0
                ));
            }
            let Ok(offsets) = self.api.admin().offsets(topic).await else {
                continue;
            };
            for p in &detail.offsets {
                let stored = p.end_offset.saturating_sub(p.start_offset);
                let unsent = offsets
                    .iter()
                    .find(|o| o.consumer == group && o.partition == p.partition)
                    .map_or(stored, |o| p.end_offset.saturating_sub(o.committed));
                if p.start_offset > 0 && stored > 0 && unsent as f64 >= RISK * stored as f64 {
                    return Some(format!(
                        "on {topic} partition {} retention trims the log, and {unsent} of the {stored} events it keeps are unsent",
                        p.partition
                    ));
                }
            }
        }
        None
    }
}
