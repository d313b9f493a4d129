//! MQTT workloads, the same client against any broker (the runtime's MQTT
//! listener, Mosquitto): one TCP connection per client speaking MQTT 5
//! through the runtime's own packet codec.
//!
//! - `pub`: `--clients` publishers, each with up to `--window` QoS 1
//!   publishes unacknowledged; messages/s = PUBACKs in the window / its
//!   length.
//! - `fanout`: one publisher at `--rate` QoS 0 messages/s to `--subscribers`
//!   QoS 0 subscribers of one wildcard filter; each subscriber's received
//!   rate.
//! - `idle`: `--connections` connections that only keep alive, held for
//!   `--duration` (the broker's memory is read meanwhile).

use std::time::{Duration, Instant};

use crate::stats;
use anyhow::{anyhow, bail, Context, Result};
use bytes::{Bytes, BytesMut};
use eventmesh_mqtt::codec::{
    self, Connect, Packet, Protocol, Publish, PublishProps, QoS, Subscribe, SubscribeFilter,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Workload {
    Pub,
    Fanout,
    Idle,
}

#[derive(Debug, clap::Args)]
pub struct MqttArgs {
    #[arg(value_enum)]
    pub workload: Workload,
    /// The broker, `host:port`.
    #[arg(long, default_value = "127.0.0.1:1883")]
    pub addr: String,
    /// Publishing clients (`pub`).
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// QoS 1 publishes in flight per client (`pub`).
    #[arg(long, default_value_t = 64)]
    pub window: usize,
    /// Payload bytes.
    #[arg(long, default_value_t = 256)]
    pub size: usize,
    /// Subscribers (`fanout`).
    #[arg(long, default_value_t = 100)]
    pub subscribers: usize,
    /// Messages per second of the publisher (`fanout`).
    #[arg(long, default_value_t = 10_000)]
    pub rate: u64,
    /// Connections (`idle`).
    #[arg(long, default_value_t = 10_000)]
    pub connections: usize,
    /// Measured window (`idle`: how long the connections are held).
    #[arg(long, value_parser = crate::parse_duration, default_value = "10s")]
    pub duration: Duration,
    /// Run before the window, not recorded.
    #[arg(long, value_parser = crate::parse_duration, default_value = "2s")]
    pub warmup: Duration,
    /// The broker's process id: its CPU time over the window is reported.
    #[arg(long)]
    pub pid: Option<u32>,
}

/// One client connection.
struct Conn {
    r: OwnedReadHalf,
    w: OwnedWriteHalf,
    buf: BytesMut,
}

impl Conn {
    async fn open(addr: &str, id: &str, keep_alive: u16) -> Result<Conn> {
        let tcp = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        tcp.set_nodelay(true)?;
        let (r, w) = tcp.into_split();
        let mut c = Conn {
            r,
            w,
            buf: BytesMut::with_capacity(64 << 10),
        };
        let connect = Connect {
            keep_alive,
            ..Connect::new(Protocol::V5, id)
        };
        c.send(&Packet::Connect(Box::new(connect))).await?;
        match c.next().await? {
            Packet::ConnAck { reason: 0, .. } => Ok(c),
            other => bail!("{id}: refused: {other:?}"),
        }
    }

    async fn send(&mut self, p: &Packet) -> Result<()> {
        let mut out = BytesMut::new();
        codec::encode(p, Protocol::V5, &mut out);
        self.w.write_all(&out).await?;
        Ok(())
    }

    async fn next(&mut self) -> Result<Packet> {
        loop {
            if let Some(p) = codec::decode(&mut self.buf, Some(Protocol::V5), 1 << 28)
                .map_err(|e| anyhow!("{e}"))?
            {
                return Ok(p);
            }
            if self.r.read_buf(&mut self.buf).await? == 0 {
                bail!("the broker closed the connection");
            }
        }
    }
}

fn publish(topic: &str, qos: QoS, pkid: u16, payload: &Bytes) -> Packet {
    Packet::Publish(Publish {
        dup: false,
        qos,
        retain: false,
        topic: topic.to_string(),
        pkid,
        payload: payload.clone(),
        props: PublishProps::default(),
    })
}

/// The CPU time (user + system) of process `pid` so far.
fn cpu_of(pid: Option<u32>) -> Option<Duration> {
    stats::cpu_time(pid?)
}

pub async fn run(a: MqttArgs) -> Result<()> {
    match a.workload {
        Workload::Pub => publish_flat_out(&a).await,
        Workload::Fanout => fan_out(&a).await,
        Workload::Idle => idle(&a).await,
    }
}

async fn publish_flat_out(a: &MqttArgs) -> Result<()> {
    let payload = Bytes::from(vec![b'x'; a.size]);
    let start = Instant::now() + a.warmup;
    let end = start + a.duration;
    let mut tasks = Vec::new();
    for i in 0..a.clients {
        let mut c = Conn::open(&a.addr, &format!("bench-pub-{i}"), 60).await?;
        let (payload, window) = (payload.clone(), a.window);
        let topic = format!("bench/pub/{i}");
        tasks.push(tokio::spawn(async move {
            let mut acked = 0u64;
            let mut in_flight = 0usize;
            let mut pkid: u16 = 0;
            loop {
                while in_flight < window && Instant::now() < end {
                    pkid = pkid.checked_add(1).unwrap_or(1);
                    c.send(&publish(&topic, QoS::AtLeastOnce, pkid, &payload))
                        .await?;
                    in_flight += 1;
                }
                if in_flight == 0 {
                    return Ok::<u64, anyhow::Error>(acked);
                }
                if let Packet::PubAck(ack) = c.next().await? {
                    if ack.reason >= 0x80 {
                        bail!("PUBACK {:#x}", ack.reason);
                    }
                    in_flight -= 1;
                    let now = Instant::now();
                    if now >= start && now < end {
                        acked += 1;
                    }
                }
            }
        }));
    }
    tokio::time::sleep_until(start.into()).await;
    let cpu0 = cpu_of(a.pid);
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    let cpu = cpu_of(a.pid).zip(cpu0).map(|(b, a)| b - a);
    let rate = total as f64 / a.duration.as_secs_f64();
    print!(
        "{{\"workload\":\"pub\",\"clients\":{},\"window\":{},\"size\":{},\"acked\":{total},\"msgsPerSec\":{rate:.0}",
        a.clients, a.window, a.size
    );
    if let Some(cpu) = cpu {
        print!(
            ",\"serverCpuUsPerMsg\":{:.2}",
            cpu.as_secs_f64() * 1e6 / total.max(1) as f64
        );
    }
    println!("}}");
    Ok(())
}

async fn fan_out(a: &MqttArgs) -> Result<()> {
    let mut subs = Vec::new();
    for i in 0..a.subscribers {
        let mut c = Conn::open(&a.addr, &format!("bench-sub-{i}"), 60).await?;
        c.send(&Packet::Subscribe(Subscribe {
            pkid: 1,
            id: None,
            filters: vec![SubscribeFilter {
                filter: "bench/fan/#".into(),
                qos: QoS::AtMostOnce,
                no_local: false,
                retain_as_published: false,
                retain_handling: 0,
            }],
            user: Vec::new(),
        }))
        .await?;
        match c.next().await? {
            Packet::SubAck { reasons, .. } if reasons == [0] => {}
            other => bail!("subscriber {i}: {other:?}"),
        }
        subs.push(c);
    }
    let start = Instant::now() + a.warmup;
    let end = start + a.duration;
    let mut counting = Vec::new();
    for mut c in subs {
        counting.push(tokio::spawn(async move {
            let mut n = 0u64;
            loop {
                let left = end.saturating_duration_since(Instant::now());
                match tokio::time::timeout(left, c.next()).await {
                    Ok(Ok(Packet::Publish(_))) => {
                        let now = Instant::now();
                        if now >= start && now < end {
                            n += 1;
                        }
                    }
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return Err(e),
                    Err(_) => return Ok(n),
                }
            }
        }));
    }
    let mut p = Conn::open(&a.addr, "bench-fan-pub", 60).await?;
    let payload = Bytes::from(vec![b'x'; a.size]);
    let every = Duration::from_secs_f64(1.0 / a.rate.max(1) as f64);
    let mut due = Instant::now();
    let mut cpu0 = None;
    let mut started = false;
    while due < end {
        if !started && due >= start {
            cpu0 = cpu_of(a.pid);
            started = true;
        }
        // A burst of whatever is due (the timer is coarser than 100 µs).
        let now = Instant::now();
        while due <= now && due < end {
            p.send(&publish("bench/fan/x", QoS::AtMostOnce, 0, &payload))
                .await?;
            due += every;
        }
        tokio::time::sleep_until(due.into()).await;
    }
    let mut rates = Vec::new();
    for t in counting {
        rates.push(t.await?? as f64 / a.duration.as_secs_f64());
    }
    let cpu = cpu_of(a.pid).zip(cpu0).map(|(b, a)| b - a);
    rates.sort_by(f64::total_cmp);
    let delivered: f64 = rates.iter().sum::<f64>() * a.duration.as_secs_f64();
    print!(
        "{{\"workload\":\"fanout\",\"subscribers\":{},\"rate\":{},\"minPerSubscriber\":{:.0},\"medianPerSubscriber\":{:.0},\"delivered\":{delivered:.0}",
        a.subscribers,
        a.rate,
        rates.first().copied().unwrap_or(0.0),
        rates.get(rates.len() / 2).copied().unwrap_or(0.0)
    );
    if let Some(cpu) = cpu {
        print!(
            ",\"serverCpuUsPerDelivered\":{:.3}",
            cpu.as_secs_f64() * 1e6 / delivered.max(1.0)
        );
    }
    println!("}}");
    Ok(())
}

async fn idle(a: &MqttArgs) -> Result<()> {
    let rss = |pid: Option<u32>| -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", pid?)).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    let before = rss(a.pid);
    let mut conns = Vec::with_capacity(a.connections);
    let opened = Instant::now();
    for i in 0..a.connections {
        conns.push(Conn::open(&a.addr, &format!("bench-idle-{i}"), 120).await?);
    }
    let connected_in = opened.elapsed();
    tokio::time::sleep(a.duration).await;
    print!(
        "{{\"workload\":\"idle\",\"connections\":{},\"connectedInMs\":{}",
        conns.len(),
        connected_in.as_millis()
    );
    if let (Some(before), Some(after)) = (before, rss(a.pid)) {
        let per = (after.saturating_sub(before)) as f64 / conns.len().max(1) as f64;
        print!(",\"serverRssKiBBefore\":{before},\"serverRssKiB\":{after},\"kibPerConnection\":{per:.2}");
    }
    println!("}}");
    drop(conns);
    Ok(())
}
