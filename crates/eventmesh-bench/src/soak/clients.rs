//! The soak's consumers: the webhook receiver (a plain HTTP/1.1 responder
//! on a loopback port that answers every push `200`), the long-polling
//! clients (the load generator's HTTP link, which polls and acks), and
//! the SSE readers (a stream each, its deliveries acked over an HTTP link).
//!
//! Invariants worth naming:
//! - A delivery counts as settled when its ack is answered `200` (polls,
//!   SSE) or when the receiver answers its push (webhook).
//! - Every client runs until [`Consumers::stop`], which removes the
//!   subscriptions it made.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::{Buf, BytesMut};
use reqwest::{StatusCode, Url};
use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::sleep;

use super::{Group, SoakArgs, Tally, ADMIN_TIMEOUT};
use crate::mesh::link::{In, Link, Op, Subscription};
use crate::mesh::Mesh;
use crate::run::Transport;
use crate::stats;

/// Deliveries an SSE reader may hold before its acker takes them.
const SSE_QUEUE: usize = 4096;
/// Pause before an SSE stream connects again.
const RECONNECT: Duration = Duration::from_millis(200);
/// Largest request head the webhook receiver reads.
const MAX_HEAD: usize = 64 << 10;

/// The three groups' clients, running until stopped.
pub(super) struct Consumers {
    pub(super) hook_url: String,
    hook: tokio::task::JoinHandle<()>,
    tasks: JoinSet<()>,
    stop: watch::Sender<bool>,
    http: reqwest::Client,
    server: String,
    token: Option<String>,
    /// Clients to unsubscribe at the end (webhook and SSE; a poller's link
    /// unsubscribes as it closes).
    unsubscribe: Vec<String>,
}

impl Consumers {
    pub(super) async fn start(
        args: &SoakArgs,
        m: &Mesh,
        run: &str,
        topic: &str,
        tally: &Arc<Tally>,
    ) -> Result<Consumers> {
        // SSE responses last the whole run: the client's timeout covers
        // every body read.
        let http = stats::client(
            (args.streams + args.webhooks) as usize,
            args.duration + args.drain + Duration::from_secs(600),
        )?;
        let (stop, stopped) = watch::channel(false);
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the webhook receiver")?;
        let hook_url = format!("http://{}/hook", listener.local_addr()?);
        let hook = tokio::spawn(receive_hooks(listener, tally.clone()));
        let mut c = Consumers {
            hook_url,
            hook,
            tasks: JoinSet::new(),
            stop,
            http,
            server: args.server.clone(),
            token: args.token.clone(),
            unsubscribe: Vec::new(),
        };
        let group = |g: Group| format!("{run}-{}", g.name());
        for i in 0..args.webhooks {
            let client = format!("{run}-webhook-{i}");
            let body = json!({
                "clientId": client, "topic": topic, "group": group(Group::Webhook),
                "url": c.hook_url, "from": "earliest",
            });
            c.post("events/subscribe", &body)
                .await
                .context("subscribing the webhook group")?;
            c.unsubscribe.push(client);
        }
        let sub = Subscription {
            group: group(Group::Poll),
            from: "earliest",
            filters: None,
        };
        for i in 0..args.pollers {
            let id = format!("{run}-poll-{i}");
            let link = m
                .connect(Transport::Http, &id, topic, Some(&sub), 0)
                .await
                .context("subscribing the polling group")?;
            c.tasks.spawn(consume(
                link,
                None,
                Group::Poll,
                tally.clone(),
                stopped.clone(),
            ));
        }
        for i in 0..args.streams {
            let id = format!("{run}-sse-{i}");
            let mut url = stats::endpoint(&args.server, "events/stream")?;
            url.query_pairs_mut()
                .append_pair("clientId", &id)
                .append_pair("topic", topic)
                .append_pair("group", &group(Group::Sse))
                .append_pair("from", "earliest");
            // Acks go over HTTP, through a link of their own.
            let acks = m.connect(Transport::Http, &id, topic, None, 0).await?;
            let (tx, rx) = mpsc::channel(SSE_QUEUE);
            c.tasks.spawn(read_stream(
                c.http.clone(),
                url,
                c.token.clone(),
                tx,
                tally.clone(),
                stopped.clone(),
            ));
            c.tasks.spawn(consume(
                acks,
                Some(rx),
                Group::Sse,
                tally.clone(),
                stopped.clone(),
            ));
            c.unsubscribe.push(id);
        }
        Ok(c)
    }

    async fn post(&self, path: &str, body: &serde_json::Value) -> Result<()> {
        let url = stats::endpoint(&self.server, path)?;
        let mut req = self.http.post(url.clone()).json(body);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let resp = req
            .timeout(ADMIN_TIMEOUT)
            .send()
            .await
            .with_context(|| format!("cannot reach {url}"))?;
        if resp.status() != StatusCode::OK {
            bail!("{url} answered {}: {}", resp.status(), resp.text().await?);
        }
        Ok(())
    }

    /// Stops every client and removes the subscriptions.
    pub(super) async fn stop(mut self) {
        let _ = self.stop.send(true);
        while self.tasks.join_next().await.is_some() {}
        for client in &self.unsubscribe {
            let _ = self
                .post("events/unsubscribe", &json!({ "clientId": client }))
                .await;
        }
        self.hook.abort();
    }
}

/// Acks every delivery, from the link itself (polls) or from `pushed` (an
/// SSE reader), and counts the acks answered, until stopped.
async fn consume(
    mut link: Link,
    mut pushed: Option<mpsc::Receiver<String>>,
    group: Group,
    tally: Arc<Tally>,
    mut stop: watch::Receiver<bool>,
) {
    let mut n = 0u64;
    loop {
        let delivery = tokio::select! {
            biased;
            _ = stop.changed() => break,
            got = link.recv() => match got.unwrap_or(In::Closed(None)) {
                In::Delivery { delivery, .. } => delivery,
                In::Done { result: Ok(()), .. } => {
                    tally.settled(group);
                    continue;
                }
                In::Done { result: Err(code), .. } => {
                    tally.group_error(group, &format!("ack_{code}"));
                    continue;
                }
                In::Error(kind) => {
                    tally.group_error(group, &kind);
                    continue;
                }
                In::Closed(why) => {
                    tally.group_error(group, why.as_deref().unwrap_or("connection_closed"));
                    break;
                }
            },
            Some(d) = next(&mut pushed) => d,
        };
        n += 1;
        link.send(Op::Ack { id: n, delivery });
    }
    link.close().await;
}

/// The next item of an optional channel (never, without one).
async fn next(rx: &mut Option<mpsc::Receiver<String>>) -> Option<String> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Reads one SSE stream (connecting again whenever it ends), passing each
/// delivery id on, until stopped.
async fn read_stream(
    http: reqwest::Client,
    url: Url,
    token: Option<String>,
    deliveries: mpsc::Sender<String>,
    tally: Arc<Tally>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let mut req = http
            .get(url.clone())
            .header(reqwest::header::ACCEPT, "text/event-stream");
        if let Some(t) = &token {
            req = req.bearer_auth(t);
        }
        let resp = tokio::select! {
            _ = stop.changed() => return,
            r = req.send() => r,
        };
        match resp {
            Ok(mut resp) if resp.status() == StatusCode::OK => {
                let mut lines = SseLines::default();
                loop {
                    let chunk = tokio::select! {
                        _ = stop.changed() => return,
                        c = resp.chunk() => c,
                    };
                    match chunk {
                        Ok(Some(bytes)) => {
                            for id in lines.feed(&bytes) {
                                match id {
                                    Some(id) => {
                                        if deliveries.send(id).await.is_err() {
                                            return;
                                        }
                                    }
                                    None => tally.group_error(Group::Sse, "bad_message"),
                                }
                            }
                        }
                        Ok(None) => {
                            tally.group_error(Group::Sse, "stream_ended");
                            break;
                        }
                        Err(e) => {
                            tally.group_error(
                                Group::Sse,
                                &format!("stream_{}", stats::error_kind(&e)),
                            );
                            break;
                        }
                    }
                }
            }
            Ok(resp) => tally.group_error(
                Group::Sse,
                &format!("stream_http_{}", resp.status().as_u16()),
            ),
            Err(e) => tally.group_error(Group::Sse, &format!("stream_{}", stats::error_kind(&e))),
        }
        sleep(RECONNECT).await;
    }
}

/// The delivery ids in an SSE body: each delivery is one `data:` line
/// holding `{"deliveryId", "event"}`; ids, comments and blank lines are
/// passed over.
#[derive(Debug, Default)]
struct SseLines {
    partial: Vec<u8>,
}

#[derive(Deserialize)]
struct Pushed {
    #[serde(rename = "deliveryId")]
    delivery_id: String,
}

impl SseLines {
    /// The deliveries of the lines `chunk` completes; `None` for a `data:`
    /// line that holds none.
    fn feed(&mut self, chunk: &[u8]) -> Vec<Option<String>> {
        self.partial.extend_from_slice(chunk);
        let mut out = Vec::new();
        let mut start = 0;
        while let Some(len) = self.partial[start..].iter().position(|&b| b == b'\n') {
            let line = &self.partial[start..start + len];
            if let Some(data) = line.strip_prefix(b"data:") {
                let pushed = serde_json::from_slice::<Pushed>(data.trim_ascii());
                out.push(pushed.ok().map(|p| p.delivery_id));
            }
            start += len + 1;
        }
        self.partial.drain(..start);
        out
    }
}

/// The webhook receiver: answers every request `200`, counting each as a
/// settled webhook delivery.
async fn receive_hooks(listener: TcpListener, tally: Arc<Tally>) {
    let mut connections = JoinSet::new();
    loop {
        match listener.accept().await {
            Ok((socket, _)) => {
                while connections.try_join_next().is_some() {}
                connections.spawn(hook_connection(socket, tally.clone()));
            }
            Err(_) => {
                tally.group_error(Group::Webhook, "accept");
                sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// One keep-alive connection of the webhook receiver.
async fn hook_connection(mut socket: TcpStream, tally: Arc<Tally>) {
    const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
    // The CloudEvents webhook validation handshake: any origin may push,
    // at any rate.
    const ALLOWED: &[u8] =
        b"HTTP/1.1 200 OK\r\nwebhook-allowed-origin: *\r\ncontent-length: 0\r\n\r\n";
    let _ = socket.set_nodelay(true);
    let mut buf = BytesMut::with_capacity(8 << 10);
    let mut answers = Vec::new();
    loop {
        loop {
            match request_len(&buf) {
                Ok(Some(len)) => {
                    if buf.starts_with(b"OPTIONS ") {
                        answers.extend_from_slice(ALLOWED);
                    } else {
                        tally.settled(Group::Webhook);
                        answers.extend_from_slice(OK);
                    }
                    buf.advance(len);
                }
                Ok(None) => break,
                Err(why) => {
                    tally.group_error(Group::Webhook, why);
                    return;
                }
            }
        }
        if !answers.is_empty() {
            if socket.write_all(&answers).await.is_err() {
                return;
            }
            answers.clear();
        }
        match socket.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// The length of the first whole request in `buf` (head and body):
/// `None` while it is incomplete.
fn request_len(buf: &[u8]) -> Result<Option<usize>, &'static str> {
    let Some(head) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if buf.len() > MAX_HEAD {
            Err("request_head_too_long")
        } else {
            Ok(None)
        };
    };
    let mut body = 0usize;
    for line in buf[..head].split(|&b| b == b'\n').skip(1) {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if name.eq_ignore_ascii_case(b"content-length") {
            body = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.parse().ok())
                .ok_or("bad_content_length")?;
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            return Err("chunked_request");
        }
    }
    let len = head + 4 + body;
    Ok((buf.len() >= len).then_some(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_lines_give_delivery_ids() {
        let mut lines = SseLines::default();
        assert!(lines.feed(b": heartbeat\n\nid: d-1\nda").is_empty());
        let got =
            lines.feed(b"ta: {\"deliveryId\":\"d-1\",\"event\":{\"id\":\"e\"}}\n\ndata: {}\n");
        assert_eq!(got, vec![Some("d-1".to_owned()), None]);
    }

    #[test]
    fn webhook_requests_are_framed_by_their_length() {
        let req = b"POST /hook HTTP/1.1\r\nhost: x\r\nContent-Length: 3\r\n\r\nabcPOST";
        assert_eq!(request_len(req), Ok(Some(req.len() - 4)));
        assert_eq!(request_len(&req[..40]), Ok(None));
        assert_eq!(
            request_len(b"POST /hook HTTP/1.1\r\nhost: x\r\n\r\n"),
            Ok(Some(32))
        );
        assert_eq!(
            request_len(b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n"),
            Err("chunked_request")
        );
    }
}
