//! The workload commands (`pub`, `pubsub`) against either target: the
//! runtime (`--target eventmesh`, over `--transport http|tcp`) or NATS
//! JetStream (`--target nats://HOST:PORT`), driven by one harness and
//! reported the same way.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;

use crate::workload::{Recorder, Workload};
use crate::{mesh, nats};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    Http,
    Ws,
    Tcp,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// `eventmesh`, or `nats://HOST:PORT` for NATS JetStream.
    #[arg(long, default_value = "eventmesh")]
    pub target: String,
    /// The runtime's HTTP traffic port.
    #[arg(
        long,
        env = "EVENTMESH_SERVER",
        default_value = "http://127.0.0.1:10105"
    )]
    pub server: String,
    /// The runtime's TCP port.
    #[arg(long, env = "EVENTMESH_TCP_SERVER", default_value = "127.0.0.1:10000")]
    pub tcp_server: String,
    /// Transport to the runtime (ignored for NATS).
    #[arg(long, value_enum, default_value_t = Transport::Http)]
    pub transport: Transport,
    /// Bytes of data per event.
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub publishers: u32,
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub subscribers: u32,
    /// Events per publish request (HTTP publish-batch).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: u32,
    /// Publishes in flight per publisher (pipelined on TCP and NATS,
    /// concurrent requests on HTTP).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub window: u32,
    /// Stop after this many measured events instead of after `--duration`.
    #[arg(long)]
    pub count: Option<u64>,
    #[arg(long, default_value = "10s", value_parser = crate::parse_duration)]
    pub duration: Duration,
    /// Total fixed rate in events/s (latency at a given load; timing is
    /// coordinated-omission correct). Default: as fast as possible.
    #[arg(long, value_parser = crate::parse_rate)]
    pub rate: Option<f64>,
    #[arg(long, default_value = "2s", value_parser = crate::parse_duration)]
    pub warmup: Duration,
    /// Topic (NATS: the stream's subject). Default: a new one per run.
    #[arg(long)]
    pub topic: Option<String>,
    /// Bearer token (HTTP) or TCP connection token.
    #[arg(long, env = "EVENTMESH_TOKEN")]
    pub token: Option<String>,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub json: bool,
}

impl RunArgs {
    fn workload(&self) -> Workload {
        Workload {
            size: self.size,
            publishers: self.publishers as usize,
            subscribers: self.subscribers as usize,
            batch: self.batch as usize,
            window: self.window as usize,
            count: self.count,
            duration: self.duration,
            warmup: self.warmup,
            rate: self.rate,
            topic: self
                .topic
                .clone()
                .unwrap_or_else(|| format!("bench.{}", uuid::Uuid::now_v7().simple())),
        }
    }

    fn nats_url(&self) -> Option<&str> {
        self.target
            .starts_with("nats://")
            .then_some(self.target.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pub,
    PubSub,
}

/// Runs one workload and prints its summary.
pub async fn run(kind: Kind, args: RunArgs) -> Result<()> {
    if args.nats_url().is_none() && args.target != "eventmesh" {
        bail!(
            "--target must be eventmesh or nats://HOST:PORT, not {:?}",
            args.target
        );
    }
    let w = args.workload();
    let rec = Arc::new(Recorder::new(&w));
    let progress = (!args.json && std::io::stderr().is_terminal())
        .then(|| tokio::spawn(show_progress(rec.clone(), w.clone())));
    let token = args.token.as_deref();
    match (kind, args.nats_url(), args.transport) {
        (Kind::Pub, Some(url), _) => nats::publish(url, &w, &rec).await?,
        (Kind::PubSub, Some(url), _) => nats::pubsub(url, &w, &rec).await?,
        (Kind::Pub, None, Transport::Tcp) => {
            mesh::tcp_publish(&args.tcp_server, token, &w, &rec).await?
        }
        (Kind::Pub, None, Transport::Http) => mesh::http_publish(&args.server, &w, &rec).await?,
        (Kind::PubSub, None, Transport::Tcp) => {
            mesh::tcp_pubsub(&args.tcp_server, token, &w, &rec).await?
        }
        (_, None, t) => bail!(
            "{kind:?} over {t:?} to the runtime is not supported yet; use --transport tcp or http"
        ),
    }
    if let Some(p) = progress {
        p.abort();
        eprintln!();
    }
    let s = rec.summary();
    if args.json {
        let mut v = serde_json::to_value(&s)?;
        v["target"] = json!(if args.nats_url().is_some() {
            "nats"
        } else {
            "eventmesh"
        });
        v["transport"] = json!(format!("{:?}", args.transport).to_lowercase());
        v["workload"] = json!(match kind {
            Kind::Pub => "pub",
            Kind::PubSub => "pubsub",
        });
        v["size"] = json!(w.size);
        v["publishers"] = json!(w.publishers);
        v["subscribers"] = json!(w.subscribers);
        v["window"] = json!(w.window);
        v["batch"] = json!(w.batch);
        v["rate"] = json!(w.rate);
        println!("{v}");
    } else {
        println!(
            "{kind:?} to {} ({}), {} B events, {} publishers x window {}, batch {}{}",
            args.nats_url().unwrap_or("eventmesh"),
            format!("{:?}", args.transport).to_lowercase(),
            w.size,
            w.publishers,
            w.window,
            w.batch,
            w.rate
                .map(|r| format!(", {r} events/s"))
                .unwrap_or_default()
        );
        println!("{s}");
    }
    Ok(())
}

/// A live line on stderr: elapsed time, measured events, current rate.
async fn show_progress(rec: Arc<Recorder>, w: Workload) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let mut last = (0u64, tokio::time::Instant::now());
    let total = w.warmup + w.duration;
    loop {
        tick.tick().await;
        let now = tokio::time::Instant::now();
        let done = rec.progress();
        let rate = (done - last.0) as f64 / now.duration_since(last.1).as_secs_f64().max(1e-9);
        last = (done, now);
        let elapsed = now.duration_since(rec.start());
        let phase = if elapsed < w.warmup {
            "warm-up"
        } else {
            "measuring"
        };
        let frac = (elapsed.as_secs_f64() / total.as_secs_f64()).min(1.0);
        let bar: String = (0..30)
            .map(|i| if (i as f64) < frac * 30.0 { '#' } else { '.' })
            .collect();
        eprint!(
            "\r[{bar}] {phase} {:>5.1}s  {done} events  {rate:>10.0}/s ",
            elapsed.as_secs_f64()
        );
    }
}
