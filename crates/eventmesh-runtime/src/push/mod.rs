//! Webhook pushes: one delivery (or, in batch mode, several) as an HTTP
//! POST in the CloudEvents content mode the subscription chose
//! (`encode.rs`): binary (the default), structured, or a batch.
//!
//! The delivery id travels in the `eventmesh-delivery-id` header (it stays
//! the same across retries of one delivery, so receivers can deduplicate);
//! a batched push carries the ids of its events, in the array's order, in
//! `eventmesh-delivery-ids` (comma-separated). A batch's events may be
//! batched differently when retried, so a receiver deduplicates per event
//! (its delivery id, or its `source` and `id`).
//! A subscription's own headers ([`Webhook::headers`]) go with each push.
//! A 2xx answer acknowledges (every event of a batch); any other status (a
//! redirect too: redirects are never followed), a timeout, a connection
//! error or an address the [`WebhookGuard`] denies is a failed attempt
//! (of every event of a batch).
//!
//! With the webhook handshake on ([`Webhook::handshake`]), a push first
//! waits for its origin's permission and rate (`handshake.rs`), and then
//! carries `WebHook-Request-Origin`.
//!
//! Every push goes through the one client [`client`] builds, whose resolver
//! is the guard's, and [`push`] checks an IP host before sending: no push
//! (and no handshake) reaches a denied address, whatever the URL became
//! since its subscribe.
//!
//! `https://` webhooks trust the built-in public roots plus the authorities
//! of `eventmesh.webhook.ca.file`, and show the client certificate of
//! `eventmesh.webhook.tls.cert.file` to receivers that ask for one. The
//! files are read once, when the client is built; one that cannot be used
//! fails the build with its path (at boot, before any push).
//!
//! With tracing on, each attempt is a `push` span (a child of the span it
//! runs in, its `dispatch`), and the POST carries that span as its HTTP
//! `traceparent` (and `tracestate`) header, beside the event's own
//! `ce-traceparent` attribute (see [`crate::trace`]).

pub mod encode;
pub mod handshake;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use eventmesh_core::config::WebhookTlsConfig;
use eventmesh_core::{pem, CloudEvent};
use eventmesh_state::{ContentMode, PushSettings};

use crate::ssrf::{GuardedResolver, WebhookGuard};
use crate::trace;

pub use handshake::{HandshakeStatus, Handshakes};

/// Header carrying the delivery id on webhook pushes.
pub const DELIVERY_ID_HEADER: &str = "eventmesh-delivery-id";
/// Header carrying the delivery ids of a batched push, comma-separated,
/// in the order of its events.
pub const DELIVERY_IDS_HEADER: &str = "eventmesh-delivery-ids";

/// Where a subscription's pushes go: the URL, the headers sent with every
/// push besides the event's own (a subscription's
/// `eventmesh_state::Subscription::headers`), how they are made, and
/// whether the validation handshake runs first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub settings: PushSettings,
    /// The subscription's `webhookHandshake`, or the runtime's default.
    pub handshake: bool,
}

impl Webhook {
    /// A binary-mode webhook with no headers of its own and no handshake.
    pub fn new(url: impl Into<String>) -> Self {
        Webhook {
            url: url.into(),
            headers: Vec::new(),
            settings: PushSettings::default(),
            handshake: false,
        }
    }

    /// Whether its events go out in batches.
    pub fn batches(&self) -> bool {
        self.settings.content_mode == ContentMode::Batch
    }
}

/// What every push goes through: the guarded client, the guard itself,
/// the handshakes of the webhook origins, and the timeout of one attempt.
#[derive(Clone, Copy)]
pub struct Pusher<'a> {
    pub client: &'a reqwest::Client,
    pub guard: &'a WebhookGuard,
    pub handshakes: &'a Handshakes,
    pub timeout: Duration,
}

/// Host (IPv6 without brackets) and port of a webhook URL.
pub fn host_and_port(url: &str) -> Option<(String, u16)> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let host = parsed.host_str()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Some((host.to_string(), parsed.port_or_known_default()?))
}

/// Checks a webhook URL: absolute, `http` or `https`, with a host.
pub fn validate_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("url {url:?} is not valid: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "url scheme {:?} is not supported; use http or https",
            parsed.scheme()
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!("url {url:?} has no host"));
    }
    Ok(())
}

/// The HTTP client of every webhook push: connects within `timeout`,
/// follows no redirect, resolves names through the guard, and (with a
/// range denied) ignores proxy settings from the environment, since the
/// guard must see the address the push connects to. `tls` adds trusted
/// authorities and a client certificate; the error names a file that
/// cannot be used and why.
pub fn client(
    timeout: Duration,
    guard: Arc<WebhookGuard>,
    tls: &WebhookTlsConfig,
) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder()
        .connect_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none());
    if guard.is_enabled() {
        builder = builder.no_proxy();
    }
    if let Some(file) = &tls.ca_file {
        for cert in certificates(file, "CA")? {
            builder = builder.add_root_certificate(cert);
        }
    }
    match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            certificates(cert, "client certificate")?;
            let mut pem = read(cert, "client certificate")?;
            pem.push(b'\n');
            pem.extend(read(key, "client key")?);
            let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
                format!(
                    "the webhook client key file {} holds no usable PEM private key: {}",
                    key.display(),
                    with_causes(&e)
                )
            })?;
            builder = builder.identity(identity);
        }
        (None, None) => {}
        _ => return Err("the webhook client certificate and key files go together".into()),
    }
    builder
        .dns_resolver(Arc::new(GuardedResolver(guard)))
        .build()
        .map_err(|e| format!("cannot build the webhook client: {}", with_causes(&e)))
}

fn read(file: &Path, what: &str) -> Result<Vec<u8>, String> {
    pem::read(file, &format!("webhook {what}"))
}

/// The certificates of a PEM file: at least one, none malformed.
fn certificates(file: &Path, what: &str) -> Result<Vec<reqwest::Certificate>, String> {
    pem::certificates(file, &format!("webhook {what}"))?
        .iter()
        .map(|der| {
            reqwest::Certificate::from_der(der).map_err(|e| {
                format!(
                    "the webhook {what} file {} holds a certificate that cannot be used: {}",
                    file.display(),
                    with_causes(&e)
                )
            })
        })
        .collect()
}

/// Sends one attempt of one event, in the webhook's content mode: the
/// webhook's own headers, then the event's. `Ok(())` on a 2xx; otherwise
/// the reason it failed.
pub async fn push(
    p: Pusher<'_>,
    hook: &Webhook,
    delivery_id: &str,
    event: &CloudEvent,
) -> Result<(), String> {
    let (event_headers, body) = encode::single(event, hook.settings.content_mode);
    send(
        p,
        hook,
        (DELIVERY_ID_HEADER, delivery_id),
        event_headers,
        body,
    )
    .await
}

/// Sends one attempt of a batch: `events` as one JSON array, their
/// delivery ids (same order) in [`DELIVERY_IDS_HEADER`].
pub async fn push_batch(
    p: Pusher<'_>,
    hook: &Webhook,
    delivery_ids: &[String],
    events: &[Arc<CloudEvent>],
) -> Result<(), String> {
    let (event_headers, body) = encode::batch(events);
    let ids = delivery_ids.join(",");
    send(p, hook, (DELIVERY_IDS_HEADER, &ids), event_headers, body).await
}

/// The handshake (when on), then the POST with the webhook's headers and
/// the push's.
async fn send(
    p: Pusher<'_>,
    hook: &Webhook,
    delivery: (&str, &str),
    event_headers: Vec<(String, String)>,
    body: Vec<u8>,
) -> Result<(), String> {
    let mut headers = hook.headers.clone();
    if hook.handshake {
        p.handshakes
            .admit(p.client, p.guard, &hook.url, p.timeout)
            .await?;
        headers.push((
            handshake::REQUEST_ORIGIN.to_string(),
            p.handshakes.origin().to_string(),
        ));
    }
    headers.extend(event_headers);
    post_as(
        p.client, p.guard, &hook.url, delivery, &headers, body, p.timeout,
    )
    .await
}

/// One POST of `body` with `headers` (and the delivery id) to `url`, under
/// the same rules as [`push`]: the guard's resolver and host check, no
/// redirect, a `push` span. `Ok(())` on a 2xx; otherwise why it failed.
pub async fn post(
    client: &reqwest::Client,
    guard: &WebhookGuard,
    url: &str,
    delivery_id: &str,
    headers: &[(String, String)],
    body: Vec<u8>,
    timeout: Duration,
) -> Result<(), String> {
    let delivery = (DELIVERY_ID_HEADER, delivery_id);
    post_as(client, guard, url, delivery, headers, body, timeout).await
}

/// [`post`] with the delivery id (or ids) in the header given.
async fn post_as(
    client: &reqwest::Client,
    guard: &WebhookGuard,
    url: &str,
    (delivery_header, delivery_id): (&str, &str),
    headers: &[(String, String)],
    body: Vec<u8>,
    timeout: Duration,
) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("url {url:?} is not valid: {e}"))?;
    guard.check_host(&parsed)?;
    let (span, trace_headers) = trace::push(&parsed, delivery_id);
    let mut req = client
        .post(parsed)
        .timeout(timeout)
        .header(delivery_header, delivery_id)
        .body(body);
    for (name, value) in headers {
        req = req.header(name.as_str(), value.as_str());
    }
    for (name, value) in trace_headers {
        req = req.header(name, value);
    }
    let sent = req.send().await;
    let status = sent.as_ref().ok().map(|r| r.status().as_u16());
    let result = match sent {
        Ok(resp) if resp.status().is_success() => Ok(()),
        Ok(resp) => Err(format!("status {}", resp.status().as_u16())),
        Err(e) if e.is_timeout() => Err(format!("timed out after {} ms", timeout.as_millis())),
        Err(e) => Err(format!("request failed: {}", with_causes(&e))),
    };
    trace::pushed(&span, status, &result);
    result
}

/// An error and its chain of causes, `: `-separated (a refused address
/// is a cause of reqwest's "error sending request").
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let part = c.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// An HTTP/1.1 server on `ip:0` that reads each request whole and
    /// answers `response`; counts the requests it read.
    async fn serve(ip: &str, response: String) -> (u16, Arc<AtomicUsize>) {
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(AtomicUsize::new(0));
        let count = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let (head, length) = loop {
                    let n = sock.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        break (0, None);
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let text = String::from_utf8_lossy(&buf[..i]).to_ascii_lowercase();
                        let length = text.lines().find_map(|l| {
                            l.strip_prefix("content-length:")?
                                .trim()
                                .parse::<usize>()
                                .ok()
                        });
                        break (i + 4, length);
                    }
                };
                while buf.len() < head + length.unwrap_or(0) {
                    match sock.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                if head > 0 {
                    count.fetch_add(1, Ordering::SeqCst);
                    let _ = sock.write_all(response.as_bytes()).await;
                }
            }
        });
        (port, seen)
    }

    const OK: &str = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

    fn event() -> CloudEvent {
        CloudEvent::from_json_slice(
            br#"{"specversion":"1.0","id":"e1","source":"/t","type":"t","data":{"n":1}}"#,
        )
        .unwrap()
    }

    fn guard(ranges: &[&str]) -> Arc<WebhookGuard> {
        Arc::new(WebhookGuard::new(
            ranges.iter().map(|r| r.parse().unwrap()).collect(),
        ))
    }

    /// A client, handshakes and timeout for pushes through `guard`.
    struct Parts {
        client: reqwest::Client,
        guard: Arc<WebhookGuard>,
        handshakes: Handshakes,
        timeout: Duration,
    }

    impl Parts {
        fn new(guard: Arc<WebhookGuard>) -> Parts {
            let timeout = Duration::from_secs(5);
            Parts {
                client: client(timeout, guard.clone(), &WebhookTlsConfig::default()).unwrap(),
                guard,
                handshakes: Handshakes::new("mesh.test", 60, Duration::from_secs(1)),
                timeout,
            }
        }

        fn pusher(&self) -> Pusher<'_> {
            Pusher {
                client: &self.client,
                guard: &self.guard,
                handshakes: &self.handshakes,
                timeout: self.timeout,
            }
        }
    }

    async fn attempt(guard: Arc<WebhookGuard>, url: &str) -> Result<(), String> {
        let parts = Parts::new(guard);
        push(parts.pusher(), &Webhook::new(url), "d-1", &event()).await
    }

    #[tokio::test]
    async fn unusable_tls_files_fail_the_client_naming_them() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing-ca.pem");
        let tls = WebhookTlsConfig {
            ca_file: Some(missing.clone()),
            ..Default::default()
        };
        let e = client(Duration::from_secs(1), Arc::default(), &tls).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "cannot read the webhook CA file {}: ",
                missing.display()
            )),
            "{e}"
        );
        let text = dir.path().join("text.pem");
        std::fs::write(&text, "no certificate here\n").unwrap();
        let tls = WebhookTlsConfig {
            ca_file: Some(text.clone()),
            ..Default::default()
        };
        let e = client(Duration::from_secs(1), Arc::default(), &tls).unwrap_err();
        assert_eq!(
            e,
            format!(
                "the webhook CA file {} holds no PEM certificate",
                text.display()
            )
        );
    }

    #[tokio::test]
    async fn a_redirect_is_a_failed_attempt_and_is_not_followed() {
        let (target, reached) = serve("127.0.0.1", OK.to_string()).await;
        for status in ["302 Found", "307 Temporary Redirect"] {
            let (port, _) = serve(
                "127.0.0.1",
                format!(
                    "HTTP/1.1 {status}\r\nlocation: http://127.0.0.1:{target}/\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                ),
            )
            .await;
            let got = attempt(Arc::default(), &format!("http://127.0.0.1:{port}/hook")).await;
            assert_eq!(got, Err(format!("status {}", &status[..3])));
        }
        // The target works, and was never asked.
        assert_eq!(
            attempt(Arc::default(), &format!("http://127.0.0.1:{target}/")).await,
            Ok(())
        );
        assert_eq!(reached.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn every_push_checks_the_address_it_connects_to() {
        let (port, reached) = serve("127.0.0.1", OK.to_string()).await;
        let loopback = || guard(&["127.0.0.0/8", "::1/128"]);
        // Unguarded, these spellings all reach the local listener...
        for host in ["127.0.0.1", "0", "0.0.0.0", "localhost"] {
            let url = format!("http://{host}:{port}/");
            assert_eq!(attempt(Arc::default(), &url).await, Ok(()), "{url}");
        }
        assert_eq!(reached.load(Ordering::SeqCst), 4);
        // ...and guarded, none of them does: IP hosts are refused before
        // sending, names by the resolver.
        for host in ["127.0.0.1", "0", "0.0.0.0", "[::ffff:127.0.0.1]", "[::]"] {
            let url = format!("http://{host}:{port}/");
            let e = attempt(loopback(), &url).await.unwrap_err();
            assert!(e.contains("denied range"), "{url}: {e}");
        }
        let e = attempt(loopback(), &format!("http://localhost:{port}/"))
            .await
            .unwrap_err();
        assert!(
            e.starts_with("request failed: ")
                && e.contains("webhook host \"localhost\" refused: the webhook address "),
            "{e}"
        );
        assert_eq!(reached.load(Ordering::SeqCst), 4);
        // A range elsewhere leaves them alone.
        let url = format!("http://localhost:{port}/");
        assert_eq!(attempt(guard(&["10.0.0.0/8"]), &url).await, Ok(()));
    }

    #[tokio::test]
    async fn pushes_to_a_new_origin_ask_it_once_and_then_name_us() {
        let allow = "HTTP/1.1 200 OK\r\nwebhook-allowed-origin: *\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
        let (port, asked) = serve("127.0.0.1", allow.to_string()).await;
        let parts = Parts::new(Arc::default());
        let p = parts.pusher();
        let mut hook = Webhook::new(format!("http://127.0.0.1:{port}/hook"));
        hook.handshake = true;
        let ev = event();
        let all = tokio::join!(
            push(p, &hook, "d-0", &ev),
            push(p, &hook, "d-1", &ev),
            push(p, &hook, "d-2", &ev),
            push(p, &hook, "d-3", &ev),
            push(p, &hook, "d-4", &ev),
        );
        assert_eq!(all, (Ok(()), Ok(()), Ok(()), Ok(()), Ok(())));
        // One OPTIONS, then the five POSTs (the server answers every
        // request with the handshake's grant, a 2xx).
        assert_eq!(asked.load(Ordering::SeqCst), 6);
        let status = parts.handshakes.status(&hook.url).unwrap();
        assert_eq!((status.state, status.allowed_rate), ("allowed", None));
        // An unreachable origin is a failed attempt, not a refusal.
        let mut gone = Webhook::new("http://127.0.0.1:9/hook");
        gone.handshake = true;
        let e = push(p, &gone, "d-x", &event()).await.unwrap_err();
        assert!(e.starts_with("webhook handshake: OPTIONS failed: "), "{e}");
        assert_eq!(parts.handshakes.status(&gone.url).unwrap().state, "pending");
    }

    #[test]
    fn host_and_port_of_urls() {
        use super::host_and_port as p;
        assert_eq!(p("http://example.com/x"), Some(("example.com".into(), 80)));
        assert_eq!(
            p("https://u:pw@example.com:8443?q"),
            Some(("example.com".into(), 8443))
        );
        assert_eq!(p("http://[::1]:9000/hook"), Some(("::1".into(), 9000)));
        assert_eq!(p("http://10.1.2.3"), Some(("10.1.2.3".into(), 80)));
    }

    #[test]
    fn url_rules() {
        assert!(validate_url("http://127.0.0.1:8080/hook").is_ok());
        assert!(validate_url("https://example.com").is_ok());
        assert!(validate_url("ftp://example.com")
            .unwrap_err()
            .contains("ftp"));
        assert!(validate_url("not a url").is_err());
        assert!(validate_url("file:///etc/passwd").is_err());
    }
}
