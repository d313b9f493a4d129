//! Looking at topics without consuming them: the topics a caller may see,
//! and browsing a topic or a pattern of topics from a position or a
//! cursor (see `eventmesh_runtime::runtime::Runtime::browse`: nothing is
//! recorded, no group, offset or subscription is left behind).
//!
//! Invariants:
//! - A topic is visible to a caller whose ACL lets it consume or publish
//!   to it; every topic's decision is the gate's, audited and counted like
//!   any (a permissive gate shows what it would refuse, as it lets the
//!   request through).
//! - A browse of one topic is admitted as consuming that topic before
//!   anything about the topic is looked at: a refused caller learns
//!   nothing of whether it exists. A pattern reads only the matching
//!   topics the caller may consume; the others are left out silently.

use std::time::Duration;

use eventmesh_core::pattern::{is_pattern, TopicPattern};
use eventmesh_core::position::Position;
use eventmesh_runtime::runtime::{BrowseRequest, Browsed, Cursor, TopicStatus, MAX_BROWSE_TOPICS};
use eventmesh_runtime::RuntimeError;
use eventmesh_security::{Identity, Operation};

use super::{Admitted, Api, ApiError, Ask, Caller};

/// A browse as a caller asks for it.
#[derive(Debug, Clone)]
pub struct Browse {
    /// A topic, or a pattern (`orders.*`, `orders.>`).
    pub topic: String,
    pub from: Position,
    pub cursor: Cursor,
    pub max: usize,
    pub wait: Duration,
}

impl Api {
    /// Whether `identity` may do `operation` on `topic` (counted and
    /// audited by the gate).
    fn may(&self, caller: &Caller, identity: &Identity, operation: Operation, topic: &str) -> bool {
        self.gate
            .authorize(caller.transport, operation, identity, topic)
            .is_ok()
    }

    /// Whether the caller `admitted` may do `operation` on `name` (a topic,
    /// or for [`Operation::A2a`] an agent id): for what a listing shows.
    /// Always true without a gate or for a system principal.
    pub fn allows(
        &self,
        caller: &Caller,
        admitted: &Admitted,
        operation: Operation,
        name: &str,
    ) -> bool {
        !self.gate.is_enabled()
            || caller.system_principal().is_some()
            || self.may(caller, admitted.identity(), operation, name)
    }

    /// Whether a fail-closed gate turns the caller away before it asks
    /// for anything: it presents no credential the gate accepts. Nothing
    /// is recorded; each of its requests is then decided on its own.
    pub fn turns_away(&self, caller: &Caller, raw: &[u8]) -> bool {
        self.gate.is_fail_closed() && !self.authenticates(caller, raw)
    }

    /// Every topic the caller may consume or publish to, by name, with its
    /// partitions' end offsets.
    pub async fn visible_topics(
        &self,
        caller: &Caller,
        raw: &[u8],
    ) -> Result<Vec<TopicStatus>, ApiError> {
        // A caller that may only publish lists too.
        let admitted = match self.admit(caller, Ask::new(Operation::Subscribe, None, raw)) {
            Err(e) if e.status == axum::http::StatusCode::FORBIDDEN => {
                self.admit(caller, Ask::new(Operation::Publish, None, raw))?
            }
            other => other?,
        };
        let topics = self.runtime.topics().await?;
        Ok(topics
            .into_iter()
            .filter(|t| {
                self.allows(caller, &admitted, Operation::Subscribe, &t.name)
                    || self.allows(caller, &admitted, Operation::Publish, &t.name)
            })
            .collect())
    }

    /// Reads events of a topic, or of the topics a pattern matches that the
    /// caller may consume, without consuming them.
    pub async fn browse(
        &self,
        caller: &Caller,
        req: Browse,
        raw: &[u8],
    ) -> Result<Browsed, ApiError> {
        let topics = if is_pattern(&req.topic) {
            let pattern = TopicPattern::parse(&req.topic)?;
            let admitted = self.admit(caller, Ask::new(Operation::Subscribe, None, raw))?;
            let matching: Vec<String> = self
                .runtime
                .topics()
                .await?
                .into_iter()
                .map(|t| t.name)
                .filter(|t| pattern.matches(t))
                .filter(|t| self.allows(caller, &admitted, Operation::Subscribe, t))
                .collect();
            if matching.len() > MAX_BROWSE_TOPICS {
                return Err(ApiError::bad_request(
                    "too_many_topics",
                    format!(
                        "{} topics match {:?}; at most {MAX_BROWSE_TOPICS} are read at once: \
                         name fewer with a narrower pattern",
                        matching.len(),
                        req.topic
                    ),
                ));
            }
            matching
        } else {
            eventmesh_core::topic::validate_topic(&req.topic)?;
            self.admit(
                caller,
                Ask::new(Operation::Subscribe, Some(&req.topic), raw),
            )?;
            vec![req.topic]
        };
        let browse = self.runtime.browse(BrowseRequest {
            topics,
            from: req.from,
            cursor: req.cursor,
            max: req.max,
            wait: req.wait,
        });
        tokio::select! {
            r = browse => Ok(r?),
            _ = self.shutdown.cancelled() => Err(RuntimeError::ShuttingDown.into()),
        }
    }
}
