//! The workload commands (`pub`, `sub`, `pubsub`, `request`) against
//! either target: the runtime (`--target eventmesh`, over `--transport
//! http|ws|tcp`, see [`crate::mesh`]) or NATS (`--target nats://HOST:PORT`,
//! see [`crate::nats`]), driven by one harness and reported the same way:
//! a live progress line on stderr (when it is a terminal), then a summary
//! table, or one JSON object with `--json`.

use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::json;
use tokio::time::Instant;

use crate::workload::{Recorder, Workload};
use crate::{mesh, nats, stats};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    Http,
    Ws,
    Tcp,
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Transport::Http => "http",
            Transport::Ws => "ws",
            Transport::Tcp => "tcp",
        }
    }
}

/// Events `sub` prefills without `--count`.
pub const SUB_COUNT: u64 = 100_000;
/// The measured window without `--duration` (and without `--count`).
const DURATION: Duration = Duration::from_secs(10);
/// The longest `sub` drains without `--duration`.
const SUB_DURATION: Duration = Duration::from_secs(60);
/// Publishes in flight per `pubsub` publisher without `--window`: enough
/// that a paced publisher never waits for acks (the end-to-end latency is
/// the subject, not the publish's), bounded all the same.
const PUBSUB_WINDOW: u32 = 1024;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// `eventmesh`, or `nats://HOST:PORT` for NATS (JetStream; `request`
    /// uses core NATS request-reply).
    #[arg(long, default_value = "eventmesh")]
    pub target: String,
    /// The runtime's HTTP traffic port (HTTP, and WebSocket at
    /// `/events/ws`).
    #[arg(
        long,
        env = "EVENTMESH_SERVER",
        default_value = "http://127.0.0.1:10105"
    )]
    pub server: String,
    /// Subscribers connect here instead of `--server` (HTTP and WebSocket
    /// transports): a consumer at another cluster, behind a mesh link from
    /// `--server`'s.
    #[arg(long)]
    pub subscribe_server: Option<String>,
    /// The runtime's TCP port.
    #[arg(long, env = "EVENTMESH_TCP_SERVER", default_value = "127.0.0.1:10000")]
    pub tcp_server: String,
    /// Transport to the runtime (ignored for NATS). `request` always issues
    /// its requests over HTTP; its responders use this transport.
    #[arg(long, value_enum, default_value_t = Transport::Http)]
    pub transport: Transport,
    /// Bytes of data per event.
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Publishing connections (`request`: requesters; `sub`: prefill
    /// connections).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub publishers: u32,
    /// Subscribing connections, in one load-balanced group (`request`:
    /// responders).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub subscribers: u32,
    /// Events per publish request (`--transport http` only:
    /// /events/publish-batch).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: u32,
    /// Publishes (or requests) in flight per connection: pipelined on TCP,
    /// WebSocket and NATS, concurrent requests on HTTP [default: 1;
    /// pubsub: 1024, so that paced publishers do not wait for acks].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub window: Option<u32>,
    /// `pub`, `pubsub`, `request`: stop after this many measured events
    /// (then without --duration there is no time limit). `sub`: the events
    /// to prefill and drain [default: 100000].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// The measured window [default: 10s]. `sub`: the longest the drain
    /// may take [default: 60s].
    #[arg(long, value_parser = crate::parse_duration)]
    pub duration: Option<Duration>,
    /// Total fixed rate in events/s over all publishers (latency at a given
    /// load; timing is coordinated-omission correct: from each event's
    /// slot in the schedule). Default: as fast as possible. `sub`'s
    /// prefill is always flat out.
    #[arg(long, value_parser = crate::parse_rate)]
    pub rate: Option<f64>,
    /// Load before measuring, not recorded (`sub`: ignored).
    #[arg(long, default_value = "2s", value_parser = crate::parse_duration)]
    pub warmup: Duration,
    /// Topic (NATS: the subject). Default: a new one per run.
    #[arg(long)]
    pub topic: Option<String>,
    /// NATS: give every publish a unique `Nats-Msg-Id`, so the stream
    /// deduplicates within its window as it does for the runtime's
    /// idempotent publishing (`--target nats://` only).
    #[arg(long)]
    pub msg_ids: bool,
    /// `sub`: give one prefilled event in N the type `bench.selected` and
    /// subscribe with the filter `{"exact": {"type": "bench.selected"}}`,
    /// so the group delivers those and reads past the rest (how cheap
    /// skipping is). The runtime only.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(2..))]
    pub select: Option<u64>,
    /// `pubsub`, `sub`: subscribe N groups instead of one, group k with the
    /// filter `{"sql": "benchgroup = 'gk'"}` and `--subscribers` links,
    /// while event n carries the extension `benchgroup: "g<n mod N>"`, so
    /// every event matches exactly one group (fan-out by content). The
    /// runtime only.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub groups: Option<u32>,
    /// With `--groups` over `--transport tcp`: spread the groups over N
    /// connections (connection i subscribes its client to groups i, i+N,
    /// ...) instead of one connection per group and subscriber.
    #[arg(long, value_name = "N", requires = "groups", value_parser = clap::value_parser!(u32).range(1..))]
    pub links: Option<u32>,
    /// Bearer token (HTTP, WebSocket) or TCP connection token.
    #[arg(long, env = "EVENTMESH_TOKEN")]
    pub token: Option<String>,
    /// Print the summary as one JSON object: events, seconds,
    /// events_per_sec, mb_per_sec, p50_ms, p90_ms, p99_ms, p999_ms, max_ms,
    /// errors, and the run's parameters.
    #[arg(long)]
    pub json: bool,
    /// A server process (repeatable) whose CPU time (user + system, from
    /// /proc) over the measured window is reported per measured event
    /// (`server_cpu_us_per_event`, the sum over the processes given, and
    /// `server_cpu_us_per_event_each`).
    #[arg(long, value_name = "PID")]
    pub server_pid: Vec<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pub,
    Sub,
    PubSub,
    Request,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Pub => "pub",
            Kind::Sub => "sub",
            Kind::PubSub => "pubsub",
            Kind::Request => "request",
        }
    }
}

/// What the latency percentiles of a run measure: a key for `--json` and
/// a sentence for people.
pub fn latency(kind: Kind, nats: bool, transport: Transport) -> (&'static str, &'static str) {
    match kind {
        Kind::Pub => (
            "publish_to_ack",
            "from each publish's due time to its acknowledgement (the event is durable)",
        ),
        Kind::PubSub => (
            "publish_to_receive",
            "from each event's due time at the publisher to its receipt by a subscriber",
        ),
        Kind::Sub if nats || transport != Transport::Ws => (
            "ack_round_trip",
            "from each ack, sent on receipt, to the server's answer to it",
        ),
        Kind::Sub => (
            "publish_to_receive",
            "from each event's publish in the prefill to its receipt: includes the wait in the \
             backlog (a WebSocket ack has no answer to time)",
        ),
        Kind::Request => (
            "request_to_reply",
            "from each request's due time to the arrival of its reply",
        ),
    }
}

impl RunArgs {
    fn nats_url(&self) -> Option<&str> {
        self.target
            .starts_with("nats://")
            .then_some(self.target.as_str())
    }

    /// The workload, after checking the options fit together.
    fn workload(&self, kind: Kind) -> Result<Workload> {
        if self.nats_url().is_none() && self.target != "eventmesh" {
            bail!(
                "--target must be eventmesh or nats://HOST:PORT, not {:?}",
                self.target
            );
        }
        let http = self.nats_url().is_none() && self.transport == Transport::Http;
        if self.select.is_some() && (kind != Kind::Sub || self.nats_url().is_some()) {
            bail!("--select applies to sub against the runtime");
        }
        if self.groups.is_some()
            && (!matches!(kind, Kind::Sub | Kind::PubSub) || self.nats_url().is_some())
        {
            bail!("--groups applies to sub and pubsub against the runtime");
        }
        if self.links.is_some() && self.transport != Transport::Tcp {
            bail!("--links applies to --transport tcp");
        }
        if self.groups.is_some() && self.select.is_some() {
            bail!("--groups and --select do not go together");
        }
        if self.msg_ids && self.nats_url().is_none() {
            bail!("--msg-ids applies to --target nats:// (the runtime always sends event ids)");
        }
        if self.batch > 1 && (!http || kind == Kind::Request) {
            bail!("--batch applies to publishes over --transport http (/events/publish-batch)");
        }
        let (count, duration) = match kind {
            Kind::Sub => (
                Some(self.count.unwrap_or(SUB_COUNT)),
                Some(self.duration.unwrap_or(SUB_DURATION)),
            ),
            _ => (
                self.count,
                self.duration.or((self.count.is_none()).then_some(DURATION)),
            ),
        };
        Ok(Workload {
            size: self.size,
            publishers: self.publishers as usize,
            subscribers: self.subscribers as usize,
            batch: self.batch as usize,
            window: self.window.unwrap_or(match kind {
                Kind::PubSub => PUBSUB_WINDOW,
                _ => 1,
            }) as usize,
            count,
            duration,
            warmup: if kind == Kind::Sub {
                Duration::ZERO
            } else {
                self.warmup
            },
            rate: self.rate,
            topic: self
                .topic
                .clone()
                .unwrap_or_else(|| format!("bench.{}", uuid::Uuid::now_v7().simple())),
            msg_ids: self.msg_ids,
            select: self.select,
            groups: self.groups,
            links: self.links,
        })
    }
}

/// Runs one workload and prints its summary.
pub async fn run(kind: Kind, args: RunArgs) -> Result<()> {
    let w = args.workload(kind)?;
    let rec = Arc::new(match kind {
        Kind::Sub => Recorder::held(&w),
        _ => Recorder::new(&w),
    });
    let progress = (!args.json && std::io::stderr().is_terminal())
        .then(|| tokio::spawn(show_progress(rec.clone(), w.clone())));
    let cpu = (!args.server_pid.is_empty())
        .then(|| tokio::spawn(cpu_over_window(rec.clone(), args.server_pid.clone())));
    let outcome = match args.nats_url() {
        Some(url) => match kind {
            Kind::Pub => nats::publish(url, &w, &rec).await,
            Kind::PubSub => nats::pubsub(url, &w, &rec).await,
            Kind::Sub => nats::sub(url, &w, &rec).await,
            Kind::Request => nats::request(url, &w, &rec).await,
        },
        None => {
            if args.subscribe_server.is_some() && args.transport == Transport::Tcp {
                bail!("--subscribe-server takes an HTTP URL: use --transport http or ws");
            }
            let m = mesh::Mesh::new(
                args.transport,
                &args.server,
                &args.tcp_server,
                args.token.as_deref(),
                &w,
            )?
            .subscribing_at(args.subscribe_server.as_deref());
            match kind {
                Kind::Pub => mesh::publish(&m, &w, &rec).await,
                Kind::PubSub => mesh::pubsub(&m, &w, &rec).await,
                Kind::Sub => mesh::sub(&m, &w, &rec).await,
                Kind::Request => mesh::request(&m, &w, &rec).await,
            }
        }
    };
    if let Some(p) = progress {
        p.abort();
        eprintln!();
    }
    outcome?;
    let cpu = match cpu {
        Some(task) => Some(task.await?.context(
            "a --server-pid process could not be read at the start and end of the measured window",
        )?),
        None => None,
    };
    report(kind, &args, &w, &rec, cpu.as_deref())
}

/// The CPU time each of `pids` used over the run's measured window
/// (sampled every 5 ms: the window's edges are found within that).
async fn cpu_over_window(rec: Arc<Recorder>, pids: Vec<u32>) -> Option<Vec<Duration>> {
    let sample = || -> Option<Vec<Duration>> { pids.iter().map(|p| stats::cpu_time(*p)).collect() };
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    let before = loop {
        tick.tick().await;
        if rec
            .measure_from()
            .is_some_and(|from| Instant::now() >= from)
        {
            break sample()?;
        }
    };
    while !rec.window_over() {
        tick.tick().await;
    }
    let after = sample()?;
    Some(
        after
            .iter()
            .zip(&before)
            .map(|(a, b)| a.saturating_sub(*b))
            .collect(),
    )
}

fn report(
    kind: Kind,
    args: &RunArgs,
    w: &Workload,
    rec: &Recorder,
    cpu: Option<&[Duration]>,
) -> Result<()> {
    let s = rec.summary();
    let nats = args.nats_url().is_some();
    let (latency_key, latency_text) = latency(kind, nats, args.transport);
    let target = if nats { "nats" } else { "eventmesh" };
    let transport = if nats { "nats" } else { args.transport.name() };
    let prefilled = rec.prefilled().load(Ordering::Relaxed);
    if args.json {
        let mut v = serde_json::to_value(&s)?;
        v["target"] = json!(target);
        v["transport"] = json!(transport);
        v["workload"] = json!(kind.name());
        v["latency"] = json!(latency_key);
        v["size"] = json!(w.size);
        v["publishers"] = json!(w.publishers);
        v["subscribers"] = json!(w.subscribers);
        v["window"] = json!(w.window);
        v["batch"] = json!(w.batch);
        v["rate"] = json!(w.rate);
        v["groups"] = json!(w.groups.unwrap_or(1));
        v["links"] = json!(w.links);
        if kind == Kind::Sub {
            v["prefilled"] = json!(prefilled);
        }
        if let Some(cpu) = cpu {
            let each: Vec<f64> = cpu.iter().map(|c| per_event(*c, s.events)).collect();
            v["server_cpu_us_per_event"] = json!(each.iter().sum::<f64>());
            v["server_cpu_us_per_event_each"] = json!(each);
        }
        println!("{v}");
    } else {
        let to = args.nats_url().unwrap_or(target);
        let rate = w
            .rate
            .map(|r| format!(", {r} events/s in total"))
            .unwrap_or_default();
        let batch = match w.batch {
            1 => String::new(),
            b => format!(", {b} events per request"),
        };
        let (p, win) = (w.publishers, w.window);
        let s_ = match w.groups {
            Some(g) => match w.links {
                Some(n) => format!("{g} filtered groups over {n} connections"),
                None => format!("{g} filtered groups x {}", w.subscribers),
            },
            None => w.subscribers.to_string(),
        };
        match kind {
            Kind::Pub => println!(
                "pub to {to} over {transport}: {} B events, {p} publishers x window {win}{batch}{rate}",
                w.size
            ),
            Kind::PubSub => println!(
                "pubsub through {to} over {transport}: {} B events, {p} publishers x window {win}{batch}, \
                 {s_} subscribers{rate}",
                w.size
            ),
            Kind::Sub => println!(
                "sub from {to} over {transport}: {s_} subscribers drained {} of {prefilled} prefilled {} B events",
                s.events.min(prefilled),
                w.size
            ),
            Kind::Request => println!(
                "request to {to}: {p} requesters x window {win} (over {}), {s_} responders over {transport}, \
                 {} B requests{rate}",
                // Requests go over TCP on TCP, else over HTTP (WebSocket
                // has no request operation).
                match (nats, transport) {
                    (true, _) => "nats",
                    (false, "tcp") => "tcp",
                    (false, _) => "http",
                },
                w.size
            ),
        }
        println!("latency: {latency_text}");
        println!("{s}");
        if let Some(cpu) = cpu {
            for (pid, c) in args.server_pid.iter().zip(cpu) {
                println!(
                    "server CPU (pid {pid}): {:.2} s, {:.2} us per event",
                    c.as_secs_f64(),
                    per_event(*c, s.events)
                );
            }
        }
    }
    Ok(())
}

/// Microseconds of `cpu` per one of `events`.
fn per_event(cpu: Duration, events: u64) -> f64 {
    cpu.as_secs_f64() * 1e6 / events.max(1) as f64
}

/// A live line on stderr: phase, elapsed time, events, current rate.
async fn show_progress(rec: Arc<Recorder>, w: Workload) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let mut last = (0u64, Instant::now());
    loop {
        tick.tick().await;
        let now = Instant::now();
        let (phase, done, frac) = match rec.measure_from() {
            None => {
                let n = rec.prefilled().load(Ordering::Relaxed);
                let of = w.count.unwrap_or(1).max(1);
                ("prefill", n, n as f64 / of as f64)
            }
            Some(from) if now < from => {
                let f = now.duration_since(rec.start()).as_secs_f64() / w.warmup.as_secs_f64();
                ("warm-up", 0, f)
            }
            Some(from) => {
                let n = rec.progress();
                let by_count = rec.target().map(|t| n as f64 / t.max(1) as f64);
                let by_time = w
                    .duration
                    .map(|d| now.duration_since(from).as_secs_f64() / d.as_secs_f64());
                let f = by_count.into_iter().chain(by_time).fold(0.0, f64::max);
                ("measuring", n, f)
            }
        };
        let rate =
            done.saturating_sub(last.0) as f64 / now.duration_since(last.1).as_secs_f64().max(1e-9);
        last = (done, now);
        let filled = (frac.clamp(0.0, 1.0) * 30.0) as usize;
        let bar = format!("{}{}", "#".repeat(filled), ".".repeat(30 - filled));
        eprint!(
            "\r[{bar}] {phase:<9} {:>6.1}s {done:>10} events {rate:>10.0}/s ",
            now.duration_since(rec.start()).as_secs_f64()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: RunArgs,
    }

    fn args(argv: &[&str]) -> RunArgs {
        Cli::try_parse_from(std::iter::once("bench").chain(argv.iter().copied()))
            .unwrap()
            .args
    }

    #[test]
    fn defaults_depend_on_the_workload() {
        let w = args(&[]).workload(Kind::Pub).unwrap();
        assert_eq!((w.count, w.duration), (None, Some(DURATION)));
        assert_eq!(w.window, 1);
        let w = args(&[]).workload(Kind::PubSub).unwrap();
        assert_eq!(w.window, PUBSUB_WINDOW as usize);
        let w = args(&["--window", "4"]).workload(Kind::PubSub).unwrap();
        assert_eq!(w.window, 4);
        assert_eq!(w.warmup, Duration::from_secs(2));
        assert!(w.topic.starts_with("bench."));
        // A count alone has no time limit; with a duration, both apply.
        let w = args(&["--count", "5"]).workload(Kind::PubSub).unwrap();
        assert_eq!((w.count, w.duration), (Some(5), None));
        let w = args(&["--count", "5", "--duration", "1s"])
            .workload(Kind::Request)
            .unwrap();
        assert_eq!(
            (w.count, w.duration),
            (Some(5), Some(Duration::from_secs(1)))
        );
        // sub: a prefill count, a cap on the drain, no warm-up.
        let w = args(&[]).workload(Kind::Sub).unwrap();
        assert_eq!((w.count, w.duration), (Some(SUB_COUNT), Some(SUB_DURATION)));
        assert_eq!(w.warmup, Duration::ZERO);
        let w = args(&["--count", "2000", "--duration", "5s"])
            .workload(Kind::Sub)
            .unwrap();
        assert_eq!(
            (w.count, w.duration),
            (Some(2000), Some(Duration::from_secs(5)))
        );
    }

    #[test]
    fn options_that_do_not_fit_are_refused() {
        assert!(args(&["--target", "kafka://x"])
            .workload(Kind::Pub)
            .is_err());
        for t in ["tcp", "ws"] {
            let a = args(&["--transport", t, "--batch", "10"]);
            assert!(a.workload(Kind::Pub).is_err(), "{t}");
        }
        let a = args(&["--transport", "http", "--batch", "10"]);
        assert!(a.workload(Kind::Pub).is_ok());
        assert!(a.workload(Kind::Sub).is_ok());
        assert!(a.workload(Kind::Request).is_err());
        let a = args(&["--target", "nats://127.0.0.1:4222", "--batch", "2"]);
        assert!(a.workload(Kind::Pub).is_err());
        let a = args(&["--target", "nats://127.0.0.1:4222", "--batch", "1"]);
        assert!(a.workload(Kind::Pub).is_ok());
        let a = args(&["--groups", "1000"]);
        assert_eq!(a.workload(Kind::PubSub).unwrap().groups, Some(1000));
        assert!(a.workload(Kind::Sub).is_ok());
        assert!(a.workload(Kind::Pub).is_err());
        assert!(a.workload(Kind::Request).is_err());
        let a = args(&["--groups", "10", "--select", "100"]);
        assert!(a.workload(Kind::Sub).is_err());
        let a = args(&["--groups", "10", "--links", "4", "--transport", "tcp"]);
        assert_eq!(a.workload(Kind::PubSub).unwrap().links, Some(4));
        let a = args(&["--groups", "10", "--links", "4", "--transport", "ws"]);
        assert!(a.workload(Kind::PubSub).is_err());
        let a = args(&["--groups", "10", "--target", "nats://127.0.0.1:4222"]);
        assert!(a.workload(Kind::PubSub).is_err());
    }

    #[test]
    fn latency_names_what_it_measures() {
        assert_eq!(
            latency(Kind::Sub, false, Transport::Tcp).0,
            "ack_round_trip"
        );
        assert_eq!(
            latency(Kind::Sub, false, Transport::Http).0,
            "ack_round_trip"
        );
        assert_eq!(latency(Kind::Sub, true, Transport::Ws).0, "ack_round_trip");
        assert_eq!(
            latency(Kind::Sub, false, Transport::Ws).0,
            "publish_to_receive"
        );
        assert_eq!(
            latency(Kind::Request, false, Transport::Ws).0,
            "request_to_reply"
        );
    }
}
