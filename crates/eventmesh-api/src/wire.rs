//! The wire types every transport shares: request bodies as clients send
//! them (JSON, camelCase) and the answers' JSON forms.

use eventmesh_runtime::{PolledDelivery, SubscribeRequest};
use eventmesh_state::{DeliveryMode, StartFrom, Subscription};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::push::{Naming, PushFields};
use crate::ApiError;

/// `POST /events/subscribe`, a WebSocket `subscribe` message, a TCP
/// `SUBSCRIBE` frame (whose client id comes from the session).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubscribeBody {
    pub client_id: Option<String>,
    pub topic: String,
    pub group: Option<String>,
    pub mode: Option<DeliveryMode>,
    pub url: Option<String>,
    pub from: Option<StartFrom>,
    /// CloudEvents Subscriptions API filter objects.
    #[serde(default)]
    pub filters: Vec<Value>,
    /// Webhook pushes: `binary` (the default), `structured` or `batch`.
    pub content_mode: Option<Value>,
    /// Batch mode: most events per push (1-1000, default 100).
    pub batch_size: Option<Value>,
    /// Batch mode: the wait for more events before a partial batch goes
    /// out, in ms (0-10000, default 10).
    pub batch_linger_ms: Option<Value>,
    /// The webhook validation handshake; absent: the runtime's default.
    pub webhook_handshake: Option<Value>,
}

impl SubscribeBody {
    /// The request for `client` (the body's own client id when it has
    /// one); a 400 naming a push setting that is not valid.
    pub fn into_request(self, client: Option<&str>) -> Result<SubscribeRequest, ApiError> {
        let push = PushFields {
            content_mode: self.content_mode.as_ref(),
            batch_size: self.batch_size.as_ref(),
            batch_linger_ms: self.batch_linger_ms.as_ref(),
            webhook_handshake: self.webhook_handshake.as_ref(),
        }
        .parse(Naming::Body, self.url.is_some())?;
        Ok(SubscribeRequest {
            client_id: self
                .client_id
                .or_else(|| client.map(str::to_string))
                .unwrap_or_default(),
            topic: self.topic,
            group: self.group,
            mode: self.mode,
            url: self.url,
            from: self.from,
            filters: self.filters,
            push,
            ..Default::default()
        })
    }
}

/// `POST /events/unsubscribe`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UnsubscribeBody {
    pub client_id: String,
    pub topic: Option<String>,
}

/// `POST /events/ack`, `POST /events/nack`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SettleBody {
    pub delivery_id: String,
}

/// The answer to a subscribe; a webhook subscription's with how its
/// events are pushed (`contentMode`, and for batches `batchSize` and
/// `batchLingerMs`, defaults applied; `webhookHandshake` when it set it).
pub fn subscribed(sub: &Subscription) -> Value {
    let mut v = json!({
        "subscriptionId": sub.subscription_id,
        "clientId": sub.client_id,
        "topic": sub.topic,
        "group": sub.group,
        "mode": sub.mode,
    });
    if sub.url.is_some() {
        let p = &sub.push;
        v["contentMode"] = json!(p.content_mode);
        if p.content_mode == eventmesh_state::ContentMode::Batch {
            v["batchSize"] = json!(p.batch_size());
            v["batchLingerMs"] = json!(p.batch_linger_ms());
        }
        if let Some(h) = p.webhook_handshake {
            v["webhookHandshake"] = json!(h);
        }
    }
    v
}

/// `{"deliveryId": ..., "event": ...}`, splicing the stored JSON in
/// rather than parsing it again.
pub fn delivery_json(d: &PolledDelivery) -> Vec<u8> {
    let mut out = Vec::with_capacity(d.event_json.len() + d.delivery_id.len() + 32);
    write_delivery(&mut out, d);
    out
}

fn write_delivery(out: &mut Vec<u8>, d: &PolledDelivery) {
    out.extend_from_slice(b"{\"deliveryId\":");
    out.extend_from_slice(&serde_json::to_vec(&d.delivery_id).unwrap_or_default());
    out.extend_from_slice(b",\"topic\":");
    out.extend_from_slice(&serde_json::to_vec(&*d.topic).unwrap_or_default());
    out.extend_from_slice(b",\"event\":");
    out.extend_from_slice(&d.event_json);
    out.push(b'}');
}

/// A JSON array of deliveries (a poll's answer).
pub fn deliveries_json(got: &[PolledDelivery]) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(got.iter().map(|d| d.event_json.len() + 64).sum::<usize>() + 2);
    out.push(b'[');
    for (i, d) in got.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_delivery(&mut out, d);
    }
    out.push(b']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn deliveries_are_spliced_exactly() {
        let d = PolledDelivery {
            delivery_id: "a\"b".into(),
            event_json: Bytes::from_static(br#"{"id":"1"}"#),
            topic: "t".into(),
        };
        assert_eq!(
            delivery_json(&d),
            br#"{"deliveryId":"a\"b","topic":"t","event":{"id":"1"}}"#
        );
        assert_eq!(
            deliveries_json(&[d.clone(), d]),
            br#"[{"deliveryId":"a\"b","topic":"t","event":{"id":"1"}},{"deliveryId":"a\"b","topic":"t","event":{"id":"1"}}]"#
        );
        assert_eq!(deliveries_json(&[]), b"[]");
    }
}
