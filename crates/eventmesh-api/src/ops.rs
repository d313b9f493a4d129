//! One function per operation: publish (one event or a batch, answered now
//! or queued for pipelining), subscribe, unsubscribe, poll, ack and nack,
//! request, reply, and opening sessions and streams. Each runs the gate and
//! the creator checks, then calls the runtime.
//!
//! Every publish (and request) is traced here, whatever the transport: each
//! event gets a `publish` span continuing the trace its `traceparent` names,
//! and is stored with that span's context (see `eventmesh_runtime::trace`).

use std::time::Duration;

use eventmesh_core::CloudEvent;
use eventmesh_runtime::{
    ErrorKind, Policy, PolledDelivery, PublishSpans, PublishTicket, Published, Replied,
    RuntimeError, Settle, Settled, StreamGuard, SubscribeRequest, CORRELATION, MAX_REQUEST_WAIT,
};
use eventmesh_security::{Operation, Transport};
use eventmesh_state::Subscription;

use super::{quota_key, Admitted, Api, ApiError, Ask, Caller};

/// An authenticated session (a TCP connection) for one client id; its
/// requests go through the gate as `caller`.
pub struct Session {
    /// Shared by the session's concurrent requests.
    pub caller: std::sync::Arc<Caller>,
    pub client: String,
    /// Holds the tenant's connection slot while the session lives.
    _admitted: Admitted,
}

/// An open stream on a client's mailbox (SSE, WebSocket).
pub struct Stream {
    /// Holds the tenant's connection slot while the stream lives.
    pub admitted: Admitted,
    /// `None` for a WebSocket opened before the client has a pull
    /// subscription.
    pub guard: Option<StreamGuard>,
}

/// Events queued in the log, not yet durable, with their `publish` spans
/// (ended when the write is).
pub struct Queued(Option<PublishTicket>, PublishSpans);

impl Queued {
    /// Waits for the write: where each event landed, in input order.
    pub async fn durable(self) -> Result<Vec<Published>, ApiError> {
        let Queued(ticket, spans) = self;
        let result = match ticket {
            Some(ticket) => ticket.durable().await.map_err(ApiError::from),
            None => Ok(Vec::new()),
        };
        match &result {
            Ok(published) => spans.published(published),
            Err(e) => spans.failed(e.code),
        }
        result
    }
}

fn missing_topic() -> ApiError {
    ApiError::bad_request(
        "missing_topic",
        "no topic: pass ?topic= or set the event's subject",
    )
}

/// What the gate is asked for a subscribe of `client` (in `group`, the
/// default one when `None`) to `topic`: the right to consume it, and room
/// for the subscription under its quota key.
pub(crate) fn subscribe_ask<'a>(
    group: Option<&str>,
    topic: &'a str,
    client: &str,
    raw: &'a [u8],
) -> Ask<'a> {
    let mut ask = Ask::new(Operation::Subscribe, Some(topic), raw);
    ask.subscription = Some(quota_key(group.unwrap_or("default"), topic, client));
    ask
}

/// The topic of a publish: the one named, else the events' common subject.
fn topic_of(topic: Option<String>, events: &[CloudEvent]) -> Result<String, ApiError> {
    if let Some(t) = topic {
        return Ok(t);
    }
    let first = events
        .first()
        .and_then(|e| e.subject.clone())
        .ok_or_else(missing_topic)?;
    if events.iter().any(|e| e.subject.as_deref() != Some(&first)) {
        return Err(ApiError::bad_request(
            "missing_topic",
            "without a topic every event of a batch must carry the same subject",
        ));
    }
    Ok(first)
}

impl Api {
    /// Opens a session for `client` (a TCP `HELLO`): authenticates the
    /// caller once, and checks that the client id is the caller's.
    pub async fn open_session(&self, caller: &Caller, client: &str) -> Result<Session, ApiError> {
        let admitted = self.authenticate(caller, client).await?;
        Ok(Session {
            caller: std::sync::Arc::new(
                caller.in_session(caller.transport, admitted.identity().clone()),
            ),
            client: client.to_string(),
            _admitted: admitted,
        })
    }

    /// Authenticates a session's caller once (no ACL: each request of the
    /// session is checked on its own), takes its tenant's connection slot,
    /// and checks that `client` is the caller's.
    async fn authenticate(&self, caller: &Caller, client: &str) -> Result<Admitted, ApiError> {
        let admission = if self.gate.is_enabled() {
            let ctx = self.context(caller, Operation::Subscribe);
            self.gate
                .open(&ctx, &super::signed_frame(caller.signed.as_ref()))?
        } else {
            Default::default()
        };
        let admitted = Admitted {
            creator: self.creator_of(caller, &admission),
            admission,
        };
        self.check_client(caller, &admitted, client).await?;
        Ok(admitted)
    }

    /// Admits `events` and queues them in the log before returning, so the
    /// publishes of one connection keep their order; the durability is
    /// waited for separately (pipelined transports answer out of order).
    pub async fn submit(
        &self,
        caller: &Caller,
        topic: Option<String>,
        mut events: Vec<CloudEvent>,
        raw: &[u8],
    ) -> Result<Queued, ApiError> {
        let topic = topic_of(topic, &events)?;
        let spans = PublishSpans::start(&topic, &mut events, caller.trace.as_ref());
        match self.enqueue(caller, &topic, events, raw).await {
            Ok(ticket) => Ok(Queued(ticket, spans)),
            Err(e) => {
                spans.failed(e.code);
                Err(e)
            }
        }
    }

    /// [`Self::submit`] once the topic is known and the events traced.
    async fn enqueue(
        &self,
        caller: &Caller,
        topic: &str,
        events: Vec<CloudEvent>,
        raw: &[u8],
    ) -> Result<Option<PublishTicket>, ApiError> {
        let mut ask = Ask::new(Operation::Publish, Some(topic), raw);
        ask.events = u32::try_from(events.len()).unwrap_or(u32::MAX);
        let _admitted = self.admit(caller, ask)?;
        if events.is_empty() {
            // A valid batch of no events: nothing appended, no topic created.
            eventmesh_core::topic::validate_topic(topic)?;
            return Ok(None);
        }
        Ok(Some(self.runtime.ingress().submit(topic, events).await?))
    }

    /// Asks the gate whether `caller` may do `operation` on `topic`, for
    /// operations whose effect lies elsewhere (a connector's definition).
    pub fn admit_as(
        &self,
        caller: &Caller,
        operation: Operation,
        topic: &str,
    ) -> Result<(), ApiError> {
        self.admit(caller, Ask::new(operation, Some(topic), b""))
            .map(|_| ())
    }

    /// Publishes events and answers once they are durable.
    pub async fn publish(
        &self,
        caller: &Caller,
        topic: Option<String>,
        events: Vec<CloudEvent>,
        raw: &[u8],
    ) -> Result<Vec<Published>, ApiError> {
        self.submit(caller, topic, events, raw)
            .await?
            .durable()
            .await
    }

    /// Makes (or updates) a subscription for the caller. The returned
    /// admission holds the connection slot.
    pub async fn subscribe(
        &self,
        caller: &Caller,
        req: SubscribeRequest,
        raw: &[u8],
    ) -> Result<(Subscription, Admitted), ApiError> {
        let ask = subscribe_ask(req.group.as_deref(), &req.topic, &req.client_id, raw);
        let admitted = self.admit(caller, ask)?;
        self.check_client(caller, &admitted, &req.client_id).await?;
        if let Some(url) = &req.url {
            self.check_webhook_target(url).await?;
        }
        let sub = self.subscribe_checked(&admitted, req).await?;
        Ok((sub, admitted))
    }

    /// [`Self::subscribe`] once the gate admitted it and the client id and
    /// webhook passed their checks: the runtime, then the tenant's
    /// subscription count.
    pub(crate) async fn subscribe_checked(
        &self,
        admitted: &Admitted,
        mut req: SubscribeRequest,
    ) -> Result<Subscription, ApiError> {
        // The roles the gate found, for the access check of the topics a
        // pattern attaches later (none for the runtime's own subscriptions
        // and without a gate: nothing is checked for those).
        req.roles = if admitted.creator == eventmesh_runtime::Creator::default() {
            Vec::new()
        } else {
            admitted.identity().roles.clone()
        };
        let sub = self
            .runtime
            .subscribe_as(req, admitted.creator.clone(), self.gate.is_fail_closed())
            .await?;
        if let Some(tenant) = &sub.tenant {
            self.gate
                .track_subscription(tenant, &quota_key(&sub.group, &sub.topic, &sub.client_id));
        }
        Ok(sub)
    }

    /// Removes a client's subscriptions (on one topic, or all); true when
    /// any existed.
    pub async fn unsubscribe(
        &self,
        caller: &Caller,
        client: &str,
        topic: Option<&str>,
        raw: &[u8],
    ) -> Result<bool, ApiError> {
        self.unsubscribe_in(caller, client, topic, None, raw).await
    }

    /// [`Api::unsubscribe`] in one consumer group only, with `group` (a
    /// client subscribed to one topic in several groups keeps the others).
    pub async fn unsubscribe_in(
        &self,
        caller: &Caller,
        client: &str,
        topic: Option<&str>,
        group: Option<&str>,
        raw: &[u8],
    ) -> Result<bool, ApiError> {
        let admitted = self.admit(caller, Ask::new(Operation::Subscribe, topic, raw))?;
        self.check_client(caller, &admitted, client).await?;
        let removed = self.runtime.unsubscribe_in(client, topic, group).await?;
        self.untrack(&removed);
        Ok(!removed.is_empty())
    }

    /// Removes a client's subscriptions (on one topic, or all) once the
    /// caller may, and stops counting them against their tenants.
    pub(crate) async fn drop_subscriptions(
        &self,
        client: &str,
        topic: Option<&str>,
    ) -> Result<Vec<Subscription>, ApiError> {
        let removed = self.runtime.unsubscribe_all(client, topic).await?;
        self.untrack(&removed);
        Ok(removed)
    }

    /// Stops counting removed subscriptions against their tenants.
    fn untrack(&self, removed: &[Subscription]) {
        for sub in removed {
            self.gate
                .untrack_subscription(&quota_key(&sub.group, &sub.topic, &sub.client_id));
        }
    }

    /// Removes every subscription of `client` without a caller: a
    /// transport's own housekeeping once a session it keeps for the client
    /// has expired (MQTT). How many went.
    pub async fn expire_client(&self, client: &str) -> Result<usize, ApiError> {
        Ok(self.drop_subscriptions(client, None).await?.len())
    }

    /// Long poll of a pulling client's mailbox.
    pub async fn poll(
        &self,
        caller: &Caller,
        client: &str,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<PolledDelivery>, ApiError> {
        let admitted = self.admit(caller, Ask::new(Operation::Subscribe, None, b""))?;
        self.check_client(caller, &admitted, client).await?;
        tokio::select! {
            r = self.runtime.poll(client, max, wait) => Ok(r?),
            _ = self.shutdown.cancelled() => Ok(Vec::new()),
        }
    }

    /// Acks or nacks a delivery the caller holds. An id that is unknown,
    /// already settled, or held by another creator's client is answered the
    /// same way (404 `unknown_delivery`) under a fail-closed gate; a
    /// permissive one settles another creator's delivery anyway and counts it
    /// (`unknown_delivery`). The gate runs once, the runtime is called once.
    pub async fn settle(
        &self,
        caller: &Caller,
        delivery_id: &str,
        how: Settle,
        raw: &[u8],
    ) -> Result<(), ApiError> {
        let admitted = self.admit(caller, Ask::new(Operation::Ack, None, raw))?;
        let by = self.gate.is_enabled().then_some(&admitted.creator);
        match self
            .runtime
            .settle(delivery_id, how, by, self.policy())
            .await
        {
            Settled::Done => Ok(()),
            Settled::DoneForeign => self.refuse(ApiError::unknown_delivery(delivery_id)),
            Settled::Unknown => Err(ApiError::unknown_delivery(delivery_id)),
            Settled::Fenced => Err(ApiError::fenced_delivery(delivery_id)),
            Settled::Foreign => {
                self.refuse(ApiError::unknown_delivery(delivery_id))?;
                // Permissive gates settle foreign deliveries in the
                // runtime; a gate made fail-closed meanwhile answers here.
                Err(ApiError::unknown_delivery(delivery_id))
            }
        }
    }

    /// How creator refusals are applied: enforced by a fail-closed gate,
    /// counted and let through by a permissive one.
    fn policy(&self) -> Policy {
        if self.gate.is_enabled() && !self.gate.is_fail_closed() {
            Policy::Permissive
        } else {
            Policy::Enforce
        }
    }

    /// Acks a delivery a stream handed out itself (`autoAck`).
    pub async fn auto_ack(&self, delivery_id: &str) {
        self.runtime
            .settle(delivery_id, Settle::Ack, None, Policy::Enforce)
            .await;
    }

    /// Publishes `event` as a request and waits for its reply.
    pub async fn request(
        &self,
        caller: &Caller,
        topic: Option<String>,
        mut event: CloudEvent,
        wait: Duration,
        raw: &[u8],
    ) -> Result<CloudEvent, ApiError> {
        let topic = topic_of(topic, std::slice::from_ref(&event))?;
        let spans = PublishSpans::start(
            &topic,
            std::slice::from_mut(&mut event),
            caller.trace.as_ref(),
        );
        let mut ask = Ask::new(Operation::Publish, Some(&topic), raw);
        ask.events = 1;
        let answer = match self.admit(caller, ask) {
            Ok(_admitted) => tokio::select! {
                r = self.runtime.request(&topic, event, wait.min(MAX_REQUEST_WAIT)) => {
                    r.map_err(ApiError::from)
                }
                _ = self.shutdown.cancelled() => Err(RuntimeError::ShuttingDown.into()),
            },
            Err(e) => Err(e),
        };
        match &answer {
            Ok(_) => spans.published(&[]),
            Err(e) => spans.failed(e.code),
        }
        answer
    }

    /// Answers a waiting request. The responder needs the right to consume
    /// the request's topic, and must be the creator of a client the request
    /// was handed to.
    /// Under a fail-closed gate a reply that may not answer the request
    /// (another creator's, or on a topic the caller may not consume) is
    /// answered exactly like one to an unknown correlation id; a permissive
    /// gate hands another creator's reply over and counts it
    /// (`unknown_correlation`).
    /// The gate runs once (one audit record), the runtime is called once.
    pub async fn reply(
        &self,
        caller: &Caller,
        event: CloudEvent,
        raw: &[u8],
    ) -> Result<(), ApiError> {
        let correlation = event.extension(CORRELATION).map(|c| c.to_text());
        let pending = match correlation {
            Some(c) => match self.runtime.pending_request(&c) {
                Some(p) => Some(p),
                None if self.runtime.in_cluster() => {
                    // Other instances are asked only for an authenticated
                    // caller (not recorded: the one audited decision
                    // follows).
                    if self.authenticates(caller, raw) {
                        self.runtime.find_request(&c).await
                    } else {
                        None
                    }
                }
                None => None,
            },
            None => None,
        };
        let topic = pending.as_ref().map(|p| p.topic.as_str());
        let admitted = match self.admit(caller, Ask::new(Operation::Subscribe, topic, raw)) {
            // Refused the right to consume the request's topic (or any
            // topic, for a request that does not exist): it looks like no
            // request, whether there is one or not.
            Err(e) if e.status == axum::http::StatusCode::FORBIDDEN => {
                return Err(unknown_correlation());
            }
            r => r?,
        };
        let by = self.gate.is_enabled().then_some(&admitted.creator);
        match self.runtime.reply(event, pending, by, self.policy()).await {
            Ok(Replied::Done) => Ok(()),
            Ok(Replied::Foreign) => self.refuse(unknown_correlation()),
            Err(e) if e.kind() == ErrorKind::Forbidden => {
                self.refuse(unknown_correlation())?;
                Err(unknown_correlation())
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Err(unknown_correlation()),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens a stream on a client's mailbox, subscribing it first when
    /// `subscribe` is given. With `require_subscription` false a client
    /// with no pull subscription yet gets a stream without a mailbox (a
    /// WebSocket may subscribe later). A WebSocket opened without a topic
    /// is a session: it authenticates like a TCP hello, and each of its
    /// messages passes the ACL on its own; an SSE stream is checked like
    /// a poll.
    pub async fn attach(
        &self,
        caller: &Caller,
        client: &str,
        subscribe: Option<SubscribeRequest>,
        require_subscription: bool,
    ) -> Result<Stream, ApiError> {
        let subscribed = subscribe.is_some();
        let admitted = match subscribe {
            Some(req) => self.subscribe(caller, req, b"").await?.1,
            None if caller.transport == Transport::WebSocket => {
                self.authenticate(caller, client).await?
            }
            None => {
                let admitted = self.admit(caller, Ask::new(Operation::Subscribe, None, b""))?;
                self.check_client(caller, &admitted, client).await?;
                admitted
            }
        };
        let guard = match self.runtime.attach_stream(client) {
            Ok(g) => Some(g),
            Err(e) if e.kind() == ErrorKind::NotFound && !require_subscription && !subscribed => {
                None
            }
            Err(e) => return Err(e.into()),
        };
        Ok(Stream { admitted, guard })
    }

    /// A stream on the mailbox of a client that subscribed on an open
    /// session or socket.
    pub fn stream_of(&self, client: &str) -> Result<StreamGuard, ApiError> {
        Ok(self.runtime.attach_stream(client)?)
    }

    /// A client resumed on a new stream opened at `opened`: what it took
    /// before and has not acknowledged goes out again now.
    pub async fn resume(&self, client: &str, opened: tokio::time::Instant) {
        self.runtime.release(client, opened, false).await;
    }
}

/// The one answer for a reply that answers nothing this caller may answer.
fn unknown_correlation() -> ApiError {
    ApiError::not_found(
        "unknown_correlation",
        "no request with this correlationid is waiting for a reply from this principal",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(subject: Option<&str>) -> CloudEvent {
        let mut e = CloudEvent::from_json_slice(
            br#"{"specversion":"1.0","id":"1","source":"/t","type":"t"}"#,
        )
        .unwrap();
        e.subject = subject.map(str::to_string);
        e
    }

    #[test]
    fn the_topic_comes_from_the_request_or_the_common_subject() {
        assert_eq!(topic_of(Some("t".into()), &[ev(None)]).unwrap(), "t");
        assert_eq!(topic_of(Some("t".into()), &[]).unwrap(), "t");
        assert_eq!(
            topic_of(None, &[ev(Some("s")), ev(Some("s"))]).unwrap(),
            "s"
        );
        assert_eq!(topic_of(None, &[]).unwrap_err().code, "missing_topic");
        assert_eq!(
            topic_of(None, &[ev(None)]).unwrap_err().code,
            "missing_topic"
        );
        assert_eq!(
            topic_of(None, &[ev(Some("a")), ev(Some("b"))])
                .unwrap_err()
                .code,
            "missing_topic"
        );
    }
}
