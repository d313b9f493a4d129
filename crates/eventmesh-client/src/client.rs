//! [`EventMeshClient`]: the HTTP API, and the entry point to the streaming
//! transports.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderValue, CONTENT_TYPE};
use reqwest::{RequestBuilder, Response, Url};
use serde::de::DeserializeOwned;
use serde_json::Value;

mod builder;

pub use builder::ClientBuilder;

use crate::error::{Error, Result};
use crate::types::{AsEvent, Delivery, Published, SubscribeOptions, Subscription, CORRELATION_ID};

/// The traffic port of a local server.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:10105";
/// The legacy TCP port of a local server.
pub const DEFAULT_TCP_SERVER: &str = "127.0.0.1:10000";

const STRUCTURED: &str = "application/cloudevents+json";
const BATCH: &str = "application/cloudevents-batch+json";

/// An async client of one eventmesh server. Cheap to clone; clones share
/// the connection pool.
///
/// ```no_run
/// use std::time::Duration;
/// use eventmesh_client::{json_event, EventMeshClient, SubscribeOptions};
///
/// # async fn demo() -> eventmesh_client::Result<()> {
/// let client = EventMeshClient::new("http://127.0.0.1:10105")?.with_token("s3cret");
///
/// client.subscribe(SubscribeOptions::new("worker-1", "orders")).await?;
/// let at = client
///     .publish("orders", &json_event("order.created", "/shop", serde_json::json!({"n": 1})))
///     .await?;
/// println!("stored at {}/{}", at.partition, at.offset);
///
/// for d in client.poll("worker-1", Duration::from_secs(5), 10).await? {
///     println!("{}", d.event);
///     client.ack(&d.delivery_id).await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct EventMeshClient {
    pub(crate) http: reqwest::Client,
    base: Url,
    server: String,
    pub(crate) token: Option<String>,
    pub(crate) tcp_addr: String,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    /// For `https://`, `wss://` and TLS on TCP; `None` when none is used.
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
}

impl EventMeshClient {
    /// A client of the server at `url` with default settings.
    pub fn new(url: impl Into<String>) -> Result<Self> {
        ClientBuilder::default().server(url).build()
    }

    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// The same client, sending `Authorization: Bearer <token>`.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The same client, with the legacy TCP transport at `addr` (`host:port`,
    /// or `tls://host:port` for TLS).
    pub fn with_tcp(mut self, addr: impl Into<String>) -> Self {
        self.tcp_addr = addr.into();
        self
    }

    /// The same client, with another timeout for ordinary requests.
    pub fn with_request_timeout(mut self, d: Duration) -> Self {
        self.request_timeout = d;
        self
    }

    /// The same client, with another idle limit for streaming connections.
    pub fn with_idle_timeout(mut self, d: Duration) -> Self {
        self.idle_timeout = d;
        self
    }

    /// The server base URL, without a trailing slash.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The legacy TCP address.
    pub fn tcp_addr(&self) -> &str {
        &self.tcp_addr
    }

    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// The URL of an API path (`events/publish`) with query parameters.
    pub fn endpoint(&self, path: &str, query: &[(&str, &str)]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut segs) = url.path_segments_mut() {
            segs.pop_if_empty();
            segs.extend(path.split('/').filter(|s| !s.is_empty()));
        }
        if !query.is_empty() {
            let mut q = url.query_pairs_mut();
            for (k, v) in query {
                q.append_pair(k, v);
            }
        }
        url
    }

    /// [`EventMeshClient::endpoint`] with a `ws://` or `wss://` scheme.
    pub fn ws_endpoint(&self, path: &str, query: &[(&str, &str)]) -> Url {
        let mut url = self.endpoint(path, query);
        let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
        // http -> ws and https -> wss are always allowed.
        let _ = url.set_scheme(scheme);
        url
    }

    pub(crate) fn authorize(&self, rb: RequestBuilder) -> RequestBuilder {
        match &self.token {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        }
    }

    pub(crate) fn bearer(&self) -> Option<HeaderValue> {
        self.token
            .as_ref()
            .and_then(|t| HeaderValue::from_str(&format!("Bearer {t}")).ok())
            .map(|mut v| {
                v.set_sensitive(true);
                v
            })
    }

    /// Sends a request; a non-2xx answer becomes [`Error::Api`].
    pub(crate) async fn send(&self, rb: RequestBuilder) -> Result<Response> {
        let resp = self
            .authorize(rb)
            .send()
            .await
            .map_err(|e| Error::from_reqwest(&self.server, e))?;
        check(resp, &self.server).await
    }

    async fn read_json<T: DeserializeOwned>(&self, resp: Response) -> Result<T> {
        let body = resp
            .bytes()
            .await
            .map_err(|e| Error::from_reqwest(&self.server, e))?;
        serde_json::from_slice(&body).map_err(|e| {
            Error::Protocol(format!(
                "unexpected answer from {}: {e}: {}",
                self.server,
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ))
        })
    }

    async fn post_json<T: DeserializeOwned>(&self, path: &str, body: &Value) -> Result<T> {
        self.post_json_to(self.endpoint(path, &[]), body).await
    }

    /// `POST` of a JSON body to `url`, answered with JSON.
    pub(crate) async fn post_json_to<T: DeserializeOwned>(
        &self,
        url: Url,
        body: &Value,
    ) -> Result<T> {
        let rb = self.http.post(url).timeout(self.request_timeout).json(body);
        let resp = self.send(rb).await?;
        self.read_json(resp).await
    }

    /// `POST` of a JSON body to `path`, answered with JSON.
    pub(crate) async fn post_value(&self, path: &str, body: &Value) -> Result<Value> {
        self.post_json(path, body).await
    }

    /// `DELETE` of `path`; any 2xx answer is success.
    pub(crate) async fn delete_path(&self, path: &str) -> Result<()> {
        let rb = self
            .http
            .delete(self.endpoint(path, &[]))
            .timeout(self.request_timeout);
        self.send(rb).await.map(|_| ())
    }

    /// Publishes one event (`POST /events/publish?topic=`). Answers once
    /// the event is durable.
    pub async fn publish<E: AsEvent + ?Sized>(&self, topic: &str, event: &E) -> Result<Published> {
        let body = event.event_bytes()?;
        let rb = self
            .http
            .post(self.endpoint("events/publish", &[("topic", topic)]))
            .timeout(self.request_timeout)
            .header(CONTENT_TYPE, STRUCTURED)
            .body(body);
        let resp = self.send(rb).await?;
        self.read_json(resp).await
    }

    /// Publishes several events in one request, all or none
    /// (`POST /events/publish-batch?topic=`).
    pub async fn publish_batch<E: AsEvent>(
        &self,
        topic: &str,
        events: &[E],
    ) -> Result<Vec<Published>> {
        let mut body = Vec::with_capacity(256 * events.len() + 2);
        body.push(b'[');
        for (i, e) in events.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(&e.event_bytes()?);
        }
        body.push(b']');
        let rb = self
            .http
            .post(self.endpoint("events/publish-batch", &[("topic", topic)]))
            .timeout(self.request_timeout)
            .header(CONTENT_TYPE, BATCH)
            .body(body);
        let resp = self.send(rb).await?;
        self.read_json(resp).await
    }

    /// The name of the cluster the server belongs to (`GET /cluster`):
    /// what mesh links record in the path of the events they carry.
    pub async fn cluster(&self) -> Result<String> {
        #[derive(serde::Deserialize)]
        struct Answer {
            cluster: String,
        }
        let rb = self
            .http
            .get(self.endpoint("cluster", &[]))
            .timeout(self.request_timeout);
        let resp = self.send(rb).await?;
        let a: Answer = self.read_json(resp).await?;
        Ok(a.cluster)
    }

    /// Subscribes a client to a topic (`POST /events/subscribe`). Calling it
    /// again with the same client, topic and group updates the subscription.
    pub async fn subscribe(&self, opts: SubscribeOptions) -> Result<Subscription> {
        let body = serde_json::to_value(&opts)
            .map_err(|e| Error::InvalidArgument(format!("subscribe options: {e}")))?;
        self.post_json("events/subscribe", &body).await
    }

    /// Removes a client's subscription to `topic`, or all of them. True
    /// when there was something to remove.
    pub async fn unsubscribe(&self, client_id: &str, topic: Option<&str>) -> Result<bool> {
        let mut body = serde_json::json!({ "clientId": client_id });
        if let Some(t) = topic {
            body["topic"] = Value::String(t.to_string());
        }
        let v: Value = self.post_json("events/unsubscribe", &body).await?;
        Ok(v.get("removed").and_then(Value::as_bool).unwrap_or(false))
    }

    /// Long poll: waits up to `timeout` for deliveries of a pulling client
    /// and returns up to `max` of them (possibly none).
    pub async fn poll(
        &self,
        client_id: &str,
        timeout: Duration,
        max: usize,
    ) -> Result<Vec<Delivery>> {
        let ms = timeout.as_millis().to_string();
        let max = max.to_string();
        let url = self.endpoint(
            "events/poll",
            &[("clientId", client_id), ("timeoutMs", &ms), ("max", &max)],
        );
        let rb = self.http.get(url).timeout(timeout + self.request_timeout);
        let resp = self.send(rb).await?;
        self.read_json(resp).await
    }

    /// Acknowledges a delivery: it will not be sent again. An unknown or
    /// already settled id is [`Error::Api`] with code `unknown_delivery`.
    pub async fn ack(&self, delivery_id: &str) -> Result<()> {
        let _: Value = self
            .post_json(
                "events/ack",
                &serde_json::json!({ "deliveryId": delivery_id }),
            )
            .await?;
        Ok(())
    }

    /// Gives a delivery back: it is redelivered after a backoff (or
    /// dead-lettered after the last attempt).
    pub async fn nack(&self, delivery_id: &str) -> Result<()> {
        let _: Value = self
            .post_json(
                "events/nack",
                &serde_json::json!({ "deliveryId": delivery_id }),
            )
            .await?;
        Ok(())
    }

    /// Request-reply: publishes `event` to `topic` and waits up to
    /// `timeout` for the reply event. The server sets the `correlationid`
    /// extension (keeping one the event already has). No reply in time is
    /// [`Error::Timeout`].
    ///
    /// ```no_run
    /// # async fn demo(client: eventmesh_client::EventMeshClient) -> eventmesh_client::Result<()> {
    /// use std::time::Duration;
    /// let ask = eventmesh_client::json_event("price.query", "/shop", serde_json::json!({"sku": "A1"}));
    /// let answer = client.request("prices", &ask, Duration::from_secs(5)).await?;
    /// println!("{}", answer["data"]);
    /// # Ok(()) }
    /// ```
    pub async fn request<E: AsEvent + ?Sized>(
        &self,
        topic: &str,
        event: &E,
        timeout: Duration,
    ) -> Result<Value> {
        let body = event.event_bytes()?;
        let ms = timeout.as_millis().to_string();
        let rb = self
            .http
            .post(self.endpoint("events/request", &[("topic", topic), ("timeoutMs", &ms)]))
            .timeout(timeout + self.request_timeout)
            .header(CONTENT_TYPE, STRUCTURED)
            .body(body);
        match self.send(rb).await {
            Ok(resp) => self.read_json(resp).await,
            Err(Error::Api { status: 408, .. }) => Err(Error::Timeout),
            Err(e) => Err(e),
        }
    }

    /// Answers a request: `event` must carry the request's `correlationid`
    /// extension. An unknown (or expired) correlation is [`Error::Api`]
    /// with code `unknown_correlation`.
    pub async fn reply<E: AsEvent + ?Sized>(&self, event: &E) -> Result<()> {
        let body = event.event_bytes()?;
        let rb = self
            .http
            .post(self.endpoint("events/reply", &[]))
            .timeout(self.request_timeout)
            .header(CONTENT_TYPE, STRUCTURED)
            .body(body);
        self.send(rb).await?;
        Ok(())
    }

    /// Answers the request `request` (a delivered event) with `event`,
    /// copying the request's `correlationid` onto it.
    ///
    /// ```no_run
    /// # async fn demo(client: eventmesh_client::EventMeshClient, d: eventmesh_client::Delivery) -> eventmesh_client::Result<()> {
    /// let answer = eventmesh_client::json_event("price.answer", "/pricing", serde_json::json!({"eur": 12}));
    /// client.reply_to(&d, &answer).await?;
    /// client.ack(&d.delivery_id).await?;
    /// # Ok(()) }
    /// ```
    pub async fn reply_to<E: AsEvent + ?Sized>(&self, request: &Delivery, event: &E) -> Result<()> {
        let event = with_correlation(request, event)?;
        self.reply(&event).await
    }
}

/// `event` as JSON with the `correlationid` of `request`.
pub(crate) fn with_correlation<E: AsEvent + ?Sized>(
    request: &Delivery,
    event: &E,
) -> Result<Value> {
    let id = request.correlation_id().ok_or_else(|| {
        Error::InvalidArgument(format!(
            "delivery {} carries no {CORRELATION_ID}: it is not a request",
            request.delivery_id
        ))
    })?;
    let mut v = event.event_value()?;
    v[CORRELATION_ID] = Value::String(id.to_string());
    Ok(v)
}

/// Turns a non-2xx answer into [`Error::Api`].
async fn check(resp: Response, server: &str) -> Result<Response> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let body = resp
        .bytes()
        .await
        .map_err(|e| Error::from_reqwest(server, e))?;
    Err(Error::from_api_body(status.as_u16(), &body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_urls() {
        let c = EventMeshClient::new("http://127.0.0.1:10105").unwrap();
        assert_eq!(c.server(), "http://127.0.0.1:10105");
        assert_eq!(
            c.endpoint("events/publish", &[("topic", "a b&c")]).as_str(),
            "http://127.0.0.1:10105/events/publish?topic=a+b%26c"
        );
        assert_eq!(
            c.endpoint("events/ack", &[]).as_str(),
            "http://127.0.0.1:10105/events/ack"
        );
        let c = EventMeshClient::new("https://mesh.example/prefix/").unwrap();
        assert_eq!(c.server(), "https://mesh.example/prefix");
        assert_eq!(
            c.endpoint("events/poll", &[("clientId", "c1"), ("max", "5")])
                .as_str(),
            "https://mesh.example/prefix/events/poll?clientId=c1&max=5"
        );
        assert_eq!(
            c.ws_endpoint("events/ws", &[("clientId", "c1")]).as_str(),
            "wss://mesh.example/prefix/events/ws?clientId=c1"
        );
        let c = EventMeshClient::new("localhost:8080").unwrap();
        assert_eq!(
            c.ws_endpoint("/events/ws", &[]).as_str(),
            "ws://localhost:8080/events/ws"
        );
        let c = EventMeshClient::new("http://h:1/?x=1#f").unwrap();
        assert_eq!(
            c.endpoint("events/stream", &[]).as_str(),
            "http://h:1/events/stream"
        );
    }

    #[test]
    fn rejects_bad_servers() {
        for bad in ["", "ftp://h/", "http://", "http://exa mple"] {
            let e = EventMeshClient::new(bad).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{bad}: {e:?}");
        }
    }

    #[test]
    fn builder_and_with() {
        let c = EventMeshClient::new("http://h:1")
            .unwrap()
            .with_token("t")
            .with_tcp("h:2");
        assert_eq!(c.token(), Some("t"));
        assert_eq!(c.tcp_addr(), "h:2");
        assert!(c.bearer().unwrap().is_sensitive());
        let c = EventMeshClient::builder().build().unwrap();
        assert_eq!(c.server(), DEFAULT_SERVER);
        assert_eq!(c.tcp_addr(), DEFAULT_TCP_SERVER);
        assert!(c.token().is_none());
    }

    #[test]
    fn reply_copies_correlation() {
        let req = Delivery {
            delivery_id: "d1".into(),
            topic: None,
            event: serde_json::json!({"specversion":"1.0","id":"1","source":"/s","type":"t","correlationid":"abc"}),
        };
        let answer = crate::json_event("answer", "/me", serde_json::json!(1));
        let v = with_correlation(&req, &answer).unwrap();
        assert_eq!(v["correlationid"], "abc");
        let plain = Delivery {
            delivery_id: "d2".into(),
            topic: None,
            event: serde_json::json!({"id":"1"}),
        };
        assert!(matches!(
            with_correlation(&plain, &answer),
            Err(Error::InvalidArgument(_))
        ));
    }

    use crate::testutil::{http_server, Reply};

    #[tokio::test]
    async fn http_calls_send_the_documented_requests() {
        let (base, mut seen) = http_server(|req, _| match req.target.split('?').next().unwrap() {
            "/events/publish" => Reply::json(
                202,
                r#"{"id":"e1","topic":"orders","partition":1,"offset":9}"#,
            ),
            "/events/publish-batch" => Reply::json(
                202,
                r#"[{"id":"a","topic":"orders","partition":0,"offset":1},{"id":"b","topic":"orders","partition":0,"offset":2}]"#,
            ),
            "/events/subscribe" => Reply::json(
                200,
                r#"{"subscriptionId":"s1","clientId":"c1","topic":"orders","group":"default","mode":"LOAD_BALANCE"}"#,
            ),
            "/events/unsubscribe" => Reply::json(200, r#"{"removed":true}"#),
            "/events/poll" => Reply::json(
                200,
                r#"[{"deliveryId":"d1","event":{"specversion":"1.0","id":"e1","source":"/s","type":"t"}}]"#,
            ),
            "/events/ack" => Reply::json(200, r#"{"status":"acked"}"#),
            "/events/nack" => Reply::json(
                404,
                r#"{"error":"unknown_delivery","message":"delivery \"d9\" is unknown or already settled"}"#,
            ),
            "/events/reply" => Reply::json(200, r#"{"status":"delivered"}"#),
            _ => Reply::json(404, r#"{"error":"not_found","message":"no such route"}"#),
        })
        .await;
        let c = EventMeshClient::new(&base).unwrap().with_token("tok");
        let ev = crate::json_event("order.created", "/shop", serde_json::json!({"n": 1}));

        let p = c.publish("orders", &ev).await.unwrap();
        assert_eq!((p.partition, p.offset), (1, 9));
        let r = seen.recv().await.unwrap();
        assert_eq!(r.method, "POST");
        assert_eq!(r.target, "/events/publish?topic=orders");
        assert_eq!(
            r.header("content-type"),
            Some("application/cloudevents+json")
        );
        assert_eq!(r.header("authorization"), Some("Bearer tok"));
        let sent: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(sent["id"], ev.id.as_str());

        let raw = serde_json::json!({"specversion":"1.0","id":"b","source":"/s","type":"t"});
        let out = c
            .publish_batch("orders", &[raw.clone(), raw])
            .await
            .unwrap();
        assert_eq!(out.len(), 2);
        let r = seen.recv().await.unwrap();
        assert_eq!(
            r.header("content-type"),
            Some("application/cloudevents-batch+json")
        );
        let sent: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(sent.as_array().unwrap().len(), 2);

        let sub = c
            .subscribe(SubscribeOptions::new("c1", "orders").from(crate::StartFrom::Earliest))
            .await
            .unwrap();
        assert_eq!(sub.subscription_id, "s1");
        assert_eq!(sub.mode, crate::DeliveryMode::LoadBalance);
        let r = seen.recv().await.unwrap();
        let sent: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(
            sent,
            serde_json::json!({"clientId":"c1","topic":"orders","from":"earliest"})
        );

        assert!(c.unsubscribe("c1", Some("orders")).await.unwrap());
        let r = seen.recv().await.unwrap();
        let sent: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(sent, serde_json::json!({"clientId":"c1","topic":"orders"}));

        let got = c.poll("c1", Duration::from_millis(1500), 7).await.unwrap();
        assert_eq!(got[0].delivery_id, "d1");
        let r = seen.recv().await.unwrap();
        assert_eq!(r.method, "GET");
        assert_eq!(r.target, "/events/poll?clientId=c1&timeoutMs=1500&max=7");

        c.ack("d1").await.unwrap();
        let r = seen.recv().await.unwrap();
        assert_eq!(r.body, br#"{"deliveryId":"d1"}"#);

        let e = c.nack("d9").await.unwrap_err();
        assert_eq!(e.status(), Some(404));
        assert_eq!(e.code(), Some("unknown_delivery"));
        assert!(e.to_string().contains("already settled"), "{e}");
        seen.recv().await.unwrap();

        c.reply_to(&got[0], &ev).await.unwrap_err(); // no correlationid on d1
        let mut answer = ev.event_value().unwrap();
        answer["correlationid"] = "x".into();
        c.reply(&answer).await.unwrap();
        let r = seen.recv().await.unwrap();
        assert_eq!(r.target, "/events/reply");
        assert_eq!(
            r.header("content-type"),
            Some("application/cloudevents+json")
        );
    }

    #[tokio::test]
    async fn request_reply_and_its_timeout() {
        let (base, mut seen) = http_server(|req, _| {
            if req.target.contains("topic=slow") {
                Reply::json(408, r#"{"error":"request_timeout","message":"no reply"}"#)
            } else {
                Reply::json(
                    200,
                    r#"{"specversion":"1.0","id":"r1","source":"/p","type":"answer","correlationid":"c"}"#,
                )
            }
        })
        .await;
        let c = EventMeshClient::new(&base).unwrap();
        let ask = crate::json_event("q", "/s", serde_json::json!({}));
        let answer = c
            .request("prices", &ask, Duration::from_millis(2500))
            .await
            .unwrap();
        assert_eq!(answer["type"], "answer");
        let r = seen.recv().await.unwrap();
        assert_eq!(r.target, "/events/request?topic=prices&timeoutMs=2500");
        assert!(r.header("authorization").is_none());
        let e = c
            .request("slow", &ask, Duration::from_millis(10))
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Timeout), "{e:?}");
    }

    #[tokio::test]
    async fn non_json_answers_are_protocol_errors() {
        let (base, _seen) = http_server(|_, _| Reply {
            chunks: vec![
                b"HTTP/1.1 202 Accepted\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello"
                    .to_vec(),
            ],
            hold: false,
        })
        .await;
        let c = EventMeshClient::new(&base).unwrap();
        let e = c
            .publish("t", &crate::json_event("t", "/s", Value::Null))
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Protocol(_)), "{e:?}");
    }

    #[tokio::test]
    async fn refused_connection_is_unreachable() {
        // Bind then drop, so the port is very likely closed.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let c = EventMeshClient::new(format!("http://127.0.0.1:{port}")).unwrap();
        let e = c
            .publish("t", &crate::json_event("t", "/s", serde_json::json!(null)))
            .await
            .unwrap_err();
        assert!(e.is_unreachable(), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!(
                "cannot reach the eventmesh server at http://127.0.0.1:{port}: "
            )),
            "{msg}"
        );
        assert!(msg.to_lowercase().contains("refused"), "{msg}");
    }
}
