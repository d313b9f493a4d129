//! The CloudEvents Subscriptions API's operations: create, retrieve, query,
//! update and delete webhook subscriptions (the object and its mapping onto
//! the runtime are in `doc.rs`).
//!
//! Invariants:
//! - Each operation runs the gate once, as a subscribe: create and update
//!   on the proposed `source` (with the subscription's quota key), the
//!   others with no topic, so that the answer to an id never depends on
//!   the topic of a subscription the caller may not see.
//! - With the gate on, a caller sees only the subscriptions its own
//!   creator (tenant and principal) made through this API; another
//!   creator's id is answered exactly like an unknown one (404
//!   `unknown_subscription`). Subscriptions made otherwise
//!   (`POST /events/subscribe`, connectors, the A2A gateway) are not
//!   subscriptions of this API.
//! - An update keeps the id: a new `source` subscribes the new topic under
//!   the same id before the old topic's subscription is removed.

pub mod doc;

use eventmesh_runtime::SubscribeRequest;
use eventmesh_security::Operation;
use eventmesh_state::Subscription;

use super::ops::subscribe_ask;
use super::{Admitted, Api, ApiError, Ask, Caller};
pub use doc::{client_id, render, Proposed};

/// The answer to an id the caller may not see, or that is not there.
fn unknown(id: &str) -> ApiError {
    ApiError::not_found("unknown_subscription", format!("no subscription {id:?}"))
}

impl Api {
    /// Whether `sub` is one of this API's that `admitted` may see.
    fn sees(&self, admitted: &Admitted, sub: &Subscription) -> bool {
        sub.spec.is_some()
            && (!self.gate.is_enabled()
                || (sub.tenant == admitted.creator.tenant
                    && sub.principal == admitted.creator.principal))
    }

    /// This API's subscription `id`, whoever made it (the newest, while an
    /// update moves it to another topic).
    async fn find_subscription(&self, id: &str) -> Option<Subscription> {
        self.runtime
            .subscriptions(None)
            .await
            .into_iter()
            .filter(|s| s.spec.is_some() && s.subscription_id == id)
            .max_by_key(|s| s.created_ms)
    }

    /// The caller's subscriptions of this API, by id.
    pub async fn subscriptions_of(&self, caller: &Caller) -> Result<Vec<Subscription>, ApiError> {
        let admitted = self.admit(caller, Ask::new(Operation::Subscribe, None, b""))?;
        let mut subs: Vec<Subscription> = self
            .runtime
            .subscriptions(None)
            .await
            .into_iter()
            .filter(|s| self.sees(&admitted, s))
            .collect();
        // The newest first of each id: while an update moves one to
        // another topic, it is shown once, as it is becoming.
        subs.sort_by(|a, b| {
            (&a.subscription_id, b.created_ms).cmp(&(&b.subscription_id, a.created_ms))
        });
        subs.dedup_by(|later, kept| later.subscription_id == kept.subscription_id);
        Ok(subs)
    }

    /// One of the caller's subscriptions of this API.
    pub async fn subscription_of(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<Subscription, ApiError> {
        let admitted = self.admit(caller, Ask::new(Operation::Subscribe, None, b""))?;
        self.find_subscription(id)
            .await
            .filter(|s| self.sees(&admitted, s))
            .ok_or_else(|| unknown(id))
    }

    /// Creates a subscription with a new id.
    pub async fn create_subscription(
        &self,
        caller: &Caller,
        proposed: Proposed,
        raw: &[u8],
    ) -> Result<Subscription, ApiError> {
        let id = uuid::Uuid::now_v7().to_string();
        let req = proposed.into_request(&id, None)?;
        let ask = subscribe_ask(req.group.as_deref(), &req.topic, &req.client_id, raw);
        let admitted = self.admit(caller, ask)?;
        self.subscribe_sink(caller, &admitted, req).await
    }

    /// Subscribes once admitted: the creator check of the client id, the
    /// webhook guard on the sink (its refusals naming `sink`), the runtime.
    async fn subscribe_sink(
        &self,
        caller: &Caller,
        admitted: &Admitted,
        req: SubscribeRequest,
    ) -> Result<Subscription, ApiError> {
        self.check_client(caller, admitted, &req.client_id).await?;
        if let Some(url) = &req.url {
            self.check_webhook_target(url).await.map_err(|mut e| {
                e.message = format!("sink: {}", e.message);
                e
            })?;
        }
        self.subscribe_checked(admitted, req).await
    }

    /// Replaces the caller's subscription `id` with `proposed` (whose own
    /// `id`, if any, must be the same).
    pub async fn update_subscription(
        &self,
        caller: &Caller,
        id: &str,
        proposed: Proposed,
        raw: &[u8],
    ) -> Result<Subscription, ApiError> {
        if proposed.id.as_deref().is_some_and(|given| given != id) {
            return Err(ApiError::bad_request(
                "invalid_subscription",
                format!(
                    "id: {:?} is not the id of the subscription updated ({id:?}); an id never changes",
                    proposed.id.unwrap_or_default()
                ),
            ));
        }
        // The gate and the visibility first: what a caller is told must
        // not depend on what it may not see.
        let client = client_id(id);
        let ask = subscribe_ask(Some(&client), &proposed.topic, &client, raw);
        let admitted = self.admit(caller, ask)?;
        let stored = self
            .find_subscription(id)
            .await
            .filter(|s| self.sees(&admitted, s))
            .ok_or_else(|| unknown(id))?;
        let req = proposed.into_request(id, Some(&stored))?;
        let sub = self.subscribe_sink(caller, &admitted, req).await?;
        if stored.topic != sub.topic {
            self.drop_subscriptions(&stored.client_id, Some(&stored.topic))
                .await?;
        }
        Ok(sub)
    }

    /// Deletes the caller's subscription `id`; what it was.
    pub async fn delete_subscription(
        &self,
        caller: &Caller,
        id: &str,
        raw: &[u8],
    ) -> Result<Subscription, ApiError> {
        let admitted = self.admit(caller, Ask::new(Operation::Subscribe, None, raw))?;
        let sub = self
            .find_subscription(id)
            .await
            .filter(|s| self.sees(&admitted, s))
            .ok_or_else(|| unknown(id))?;
        self.drop_subscriptions(&sub.client_id, None).await?;
        Ok(sub)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_id_is_a_404_naming_it() {
        let e = unknown("x");
        assert_eq!(
            (e.status.as_u16(), e.code, e.message.as_str()),
            (404, "unknown_subscription", "no subscription \"x\"")
        );
    }
}
