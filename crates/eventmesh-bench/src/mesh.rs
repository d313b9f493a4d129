//! Driving the runtime itself: publishers over HTTP (concurrent requests,
//! optional batches) or TCP (pipelined frames on persistent connections),
//! and end-to-end runs through a TCP subscriber.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::{Bytes, BytesMut};
use eventmesh_core::tcp_frame::{self, Frame, FrameType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::stats;
use crate::workload::{Recorder, Workload};

/// A structured event whose id carries its due time (nanoseconds since the
/// run started) so a subscriber can measure end-to-end latency.
pub fn event_json(id: &str, size: usize) -> Vec<u8> {
    let mut body = Vec::with_capacity(size + 160);
    body.extend_from_slice(b"{\"specversion\":\"1.0\",\"id\":\"");
    body.extend_from_slice(id.as_bytes());
    body.extend_from_slice(
        b"\",\"source\":\"/bench\",\"type\":\"bench.event\",\"datacontenttype\":\"text/plain\",\"data\":\"",
    );
    body.extend(std::iter::repeat_n(b'x', size));
    body.extend_from_slice(b"\"}");
    body
}

fn due_id(rec: &Recorder, due: Instant, n: u64) -> String {
    format!(
        "{}-{n}",
        due.saturating_duration_since(rec.start()).as_nanos()
    )
}

/// The due time an id made by [`due_id`] carries.
fn due_of(rec: &Recorder, id: &str) -> Option<Instant> {
    let nanos: u64 = id.split('-').next()?.parse().ok()?;
    Some(rec.start() + Duration::from_nanos(nanos))
}

/// Waits for the next slot of a fixed-rate schedule (or returns now when
/// running flat out); the slot is the operation's due time.
struct Schedule {
    next: Instant,
    every: Option<Duration>,
}

impl Schedule {
    fn new(start: Instant, every: Option<Duration>) -> Self {
        Schedule { next: start, every }
    }

    async fn tick(&mut self) -> Instant {
        match self.every {
            None => Instant::now(),
            Some(gap) => {
                let due = self.next;
                self.next += gap;
                tokio::time::sleep_until(due).await;
                due
            }
        }
    }
}

/// A connection that has said HELLO.
async fn tcp_connect(addr: &str, client: &str, token: Option<&str>) -> Result<TcpStream> {
    let mut stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("cannot reach the eventmesh TCP port at {addr}"))?;
    stream.set_nodelay(true)?;
    let hello = Frame::json(
        FrameType::Hello,
        0,
        &serde_json::json!({"clientId": client, "token": token}),
    );
    stream.write_all(&hello.to_bytes()).await?;
    let mut buf = BytesMut::new();
    let reply = read_frame(&mut stream, &mut buf).await?;
    if reply.kind != FrameType::HelloOk {
        bail!("HELLO refused: {}", String::from_utf8_lossy(&reply.payload));
    }
    Ok(stream)
}

async fn read_frame(stream: &mut (impl AsyncReadExt + Unpin), buf: &mut BytesMut) -> Result<Frame> {
    loop {
        if let Some(f) = tcp_frame::decode(buf, 64 << 20)? {
            return Ok(f);
        }
        if stream.read_buf(buf).await? == 0 {
            bail!("the server closed the connection");
        }
    }
}

/// Pipelined publishes over TCP: `window` in flight per connection.
pub async fn tcp_publish(
    addr: &str,
    token: Option<&str>,
    w: &Workload,
    rec: &Arc<Recorder>,
) -> Result<()> {
    let mut tasks = Vec::new();
    for p in 0..w.publishers {
        let stream = tcp_connect(addr, &format!("bench-pub-{p}"), token).await?;
        let (w, rec) = (w.clone(), rec.clone());
        tasks.push(tokio::spawn(async move {
            tcp_publisher(stream, p, w, rec).await
        }));
    }
    for t in tasks {
        t.await.context("publisher task")??;
    }
    Ok(())
}

async fn tcp_publisher(stream: TcpStream, p: usize, w: Workload, rec: Arc<Recorder>) -> Result<()> {
    let (mut rd, mut wr) = stream.into_split();
    let window = Arc::new(Semaphore::new(w.window.max(1)));
    let due: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let size = w.size as u64;
    // Acks come back in any order; each frees one slot of the window.
    let reader = {
        let (window, due, rec) = (window.clone(), due.clone(), rec.clone());
        tokio::spawn(async move {
            let mut local = rec.local();
            let mut buf = BytesMut::with_capacity(64 << 10);
            while let Ok(frame) = read_frame(&mut rd, &mut buf).await {
                let Some(at) = due.lock().expect("due lock").remove(&frame.correlation) else {
                    continue;
                };
                match frame.kind {
                    FrameType::PublishAck => local.record(&rec, at, Instant::now(), 1, size),
                    _ => local.error("publish"),
                }
                window.add_permits(1);
            }
            rec.merge(local);
        })
    };
    let body = event_json("x", w.size);
    let payload = tcp_frame::publish_payload(&w.topic, &body)?;
    let mut schedule = Schedule::new(rec.start(), w.interval_per_publisher());
    let mut correlation = (p as u64) << 40;
    let mut out = BytesMut::with_capacity(256 << 10);
    while !rec.done() {
        let permit = window.acquire().await.context("window")?;
        permit.forget();
        let at = schedule.tick().await;
        correlation += 1;
        due.lock().expect("due lock").insert(correlation, at);
        out.clear();
        Frame::new(FrameType::Publish, correlation, payload.clone()).encode(&mut out);
        // Coalesce: send what is ready in one write when the window allows.
        while window.available_permits() > 0
            && w.rate.is_none()
            && out.len() < (128 << 10)
            && !rec.done()
        {
            let permit = window.try_acquire().expect("checked");
            permit.forget();
            correlation += 1;
            due.lock()
                .expect("due lock")
                .insert(correlation, Instant::now());
            Frame::new(FrameType::Publish, correlation, payload.clone()).encode(&mut out);
        }
        wr.write_all(&out).await.context("TCP write")?;
    }
    // Let the acks of what is in flight arrive.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !due.lock().expect("due lock").is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = wr
        .write_all(&Frame::new(FrameType::Goodbye, 0, Vec::new()).to_bytes())
        .await;
    drop(wr);
    let _ = tokio::time::timeout(Duration::from_secs(5), reader).await;
    Ok(())
}

/// HTTP publishes: `window` concurrent keep-alive requests per publisher,
/// `batch` events per request.
pub async fn http_publish(server: &str, w: &Workload, rec: &Arc<Recorder>) -> Result<()> {
    let (path, content_type) = if w.batch > 1 {
        ("events/publish-batch", "application/cloudevents-batch+json")
    } else {
        ("events/publish", "application/cloudevents+json")
    };
    let mut url = stats::endpoint(server, path)?;
    url.query_pairs_mut().append_pair("topic", &w.topic);
    let workers = w.publishers * w.window.max(1);
    let client = stats::client(workers, Duration::from_secs(30))?;
    let body: Bytes = if w.batch > 1 {
        let one = event_json("x", w.size);
        let mut b = Vec::with_capacity((one.len() + 1) * w.batch + 2);
        b.push(b'[');
        for i in 0..w.batch {
            if i > 0 {
                b.push(b',');
            }
            b.extend_from_slice(&one);
        }
        b.push(b']');
        b.into()
    } else {
        event_json("x", w.size).into()
    };
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let (client, url, body, rec, w) = (
            client.clone(),
            url.clone(),
            body.clone(),
            rec.clone(),
            w.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut local = rec.local();
            let every = w
                .interval_per_publisher()
                .map(|g| g * w.window.max(1) as u32);
            let mut schedule = Schedule::new(rec.start(), every);
            let events = w.batch as u64;
            while !rec.done() {
                let at = schedule.tick().await;
                let sent = client
                    .post(url.clone())
                    .header("content-type", content_type)
                    .body(body.clone())
                    .send()
                    .await;
                match sent {
                    Ok(r) if r.status().as_u16() == 202 => {
                        let _ = r.bytes().await;
                        local.record(&rec, at, Instant::now(), events, events * w.size as u64);
                    }
                    Ok(r) => local.error(&format!("http_{}", r.status().as_u16())),
                    Err(e) => {
                        local.error(&stats::error_kind(&e));
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            rec.merge(local);
        }));
    }
    for t in tasks {
        t.await.context("publisher task")?;
    }
    Ok(())
}

/// End to end over TCP: subscribers in one load-balanced group receive,
/// record publish-to-receive latency from the due time in each event id,
/// and ack; publishers send at the workload's rate.
pub async fn tcp_pubsub(
    addr: &str,
    token: Option<&str>,
    w: &Workload,
    rec: &Arc<Recorder>,
) -> Result<()> {
    let group = format!("bench-{}", uuid::Uuid::now_v7().simple());
    let mut subs = Vec::new();
    for s in 0..w.subscribers.max(1) {
        let mut stream = tcp_connect(addr, &format!("{group}-{s}"), token).await?;
        let sub = Frame::json(
            FrameType::Subscribe,
            1,
            &serde_json::json!({"topic": w.topic, "group": group}),
        );
        stream.write_all(&sub.to_bytes()).await?;
        let mut buf = BytesMut::new();
        let ok = read_frame(&mut stream, &mut buf).await?;
        if ok.kind != FrameType::SubscribeOk {
            bail!(
                "SUBSCRIBE refused: {}",
                String::from_utf8_lossy(&ok.payload)
            );
        }
        let rec = rec.clone();
        let size = w.size as u64;
        subs.push(tokio::spawn(async move {
            let mut local = rec.local();
            let (mut rd, mut wr) = stream.into_split();
            let mut out = BytesMut::new();
            let mut n = 1u64 << 50;
            loop {
                let read =
                    tokio::time::timeout(Duration::from_secs(2), read_frame(&mut rd, &mut buf))
                        .await;
                let Ok(Ok(frame)) = read else {
                    if rec.done() {
                        break;
                    }
                    continue;
                };
                if frame.kind != FrameType::Push {
                    continue;
                }
                let now = Instant::now();
                let Ok((delivery, event)) = tcp_frame::parse_push(&frame.payload) else {
                    local.error("bad_push");
                    continue;
                };
                let id = serde_json::from_slice::<serde_json::Value>(&event)
                    .ok()
                    .and_then(|v| v["id"].as_str().map(str::to_string));
                match id.as_deref().and_then(|id| due_of(&rec, id)) {
                    Some(due) => local.record(&rec, due, now, 1, size),
                    None => local.error("bad_event"),
                }
                n += 1;
                out.clear();
                Frame::new(FrameType::Ack, n, delivery.into_bytes()).encode(&mut out);
                if wr.write_all(&out).await.is_err() {
                    break;
                }
            }
            rec.merge(local);
        }));
    }
    let mut pubs = Vec::new();
    for p in 0..w.publishers.max(1) {
        let mut stream = tcp_connect(addr, &format!("{group}-pub-{p}"), token).await?;
        let (rec, w) = (rec.clone(), w.clone());
        pubs.push(tokio::spawn(async move {
            let mut schedule = Schedule::new(rec.start(), w.interval_per_publisher());
            let mut n = 0u64;
            let mut buf = BytesMut::new();
            let (mut rd, mut wr) = stream.split();
            // Acks are read and dropped; publish latency is not this run's subject.
            let drain = async { while read_frame(&mut rd, &mut buf).await.is_ok() {} };
            let send = async {
                while !rec.done() {
                    let at = schedule.tick().await;
                    n += 1;
                    let body = event_json(&due_id(&rec, at, n), w.size);
                    let Ok(payload) = tcp_frame::publish_payload(&w.topic, &body) else {
                        break;
                    };
                    if wr
                        .write_all(&Frame::new(FrameType::Publish, n, payload).to_bytes())
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            };
            tokio::select! {
                _ = send => {}
                _ = drain => {}
            }
        }));
    }
    for p in pubs {
        p.await.context("publisher task")?;
    }
    for s in subs {
        s.await.context("subscriber task")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_json_is_valid_with_exact_data_size() {
        let v: serde_json::Value = serde_json::from_slice(&event_json("id-1", 100)).unwrap();
        assert_eq!(v["data"].as_str().unwrap().len(), 100);
        assert_eq!(v["id"], "id-1");
    }

    #[tokio::test]
    async fn due_times_round_trip_through_ids() {
        let w = crate::workload::Workload {
            size: 1,
            publishers: 1,
            subscribers: 1,
            batch: 1,
            window: 1,
            count: None,
            duration: Duration::from_secs(1),
            warmup: Duration::ZERO,
            rate: None,
            topic: "t".into(),
        };
        let rec = Recorder::new(&w);
        let due = rec.start() + Duration::from_micros(1234);
        let id = due_id(&rec, due, 7);
        assert_eq!(due_of(&rec, &id), Some(due));
        assert_eq!(due_of(&rec, "nonsense"), None);
    }
}
