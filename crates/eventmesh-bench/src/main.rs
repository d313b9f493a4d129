//! `eventmesh-bench`: a load generator for the eventmesh runtime (over
//! HTTP, WebSocket or its TCP port) and, for comparison, NATS.
//!
//! Four workloads, one harness ([`run`]), one report:
//! - `pub`: publish throughput; latency from each publish's due time to
//!   its acknowledgement.
//! - `sub`: consumer throughput of a prefilled backlog; latency is the ack
//!   round trip (WebSocket: publish-to-receive, backlog wait included).
//! - `pubsub`: end to end; latency from each event's due time at the
//!   publisher to its receipt.
//! - `request`: request-reply; latency from each request's due time to its
//!   reply.
//! - `a2a`: A2A round trips through the gateway to agents on the mesh.
//!
//! Runs stop by themselves, never panic on server errors (they are counted
//! by kind), and print a summary table or, with `--json`, one JSON object.
//! [`mesh`] and [`nats`] say exactly what each workload does per target.

mod a2a;
mod fsync;
mod links;
mod mesh;
mod mqtt;
mod nats;
mod relay;
mod run;
mod soak;
mod stats;
mod workload;

use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "eventmesh-bench",
    version,
    about = "Load generator for the eventmesh runtime (HTTP, WebSocket, TCP) and NATS"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Publish throughput and latency: `--publishers` connections, each
    /// with up to `--window` publishes in flight.
    ///
    /// Latency: from each publish's due time (its slot with `--rate`, else
    /// its send) to its acknowledgement (202 over HTTP, `published` over
    /// WebSocket, PUBLISH_ACK over TCP, the JetStream ack on NATS). E.g.
    /// `pub --transport tcp --size 1024 --publishers 16 --window 256 --duration 10s --json`.
    Pub(run::RunArgs),
    /// Consumer throughput of a backlog: prefill `--count` events (default
    /// 100000; flat out over the same transport, not measured), then
    /// `--subscribers` in one group drain them from the earliest offset.
    ///
    /// The measured window runs from the subscribers' start until every
    /// prefilled event was received and acked (or `--duration` passed,
    /// default 60s); events/s = events received in it / its length;
    /// `--warmup` does not apply. Latency: the ack round trip (each ack is
    /// issued on receipt; its answer: TCP OK, HTTP 200 (at most 64 acks in
    /// flight per subscriber, the wait for one included), NATS ack
    /// confirmation); an event counts once its ack is answered. Over
    /// WebSocket, where a successful ack gets no answer: from each event's
    /// publish during the prefill to its receipt, which includes its wait
    /// in the backlog. NATS: a durable pull
    /// consumer with explicit acks on a JetStream stream prefilled with
    /// JetStream publishes.
    Sub(run::RunArgs),
    /// End to end: publishers (usually at a fixed `--rate`) and
    /// subscribers in one group that ack each event.
    ///
    /// Latency: from each event's due time at the publisher (carried in its
    /// id) to its receipt by a subscriber. Over HTTP subscribers long-poll
    /// and ack each delivery with its own request; over WebSocket and TCP
    /// deliveries are pushed and acks pipelined.
    Pubsub(run::RunArgs),
    /// Request-reply: `--subscribers` responders (one group) answer each
    /// request with a reply carrying its correlationid, `--publishers`
    /// requesters keep `--window` requests in flight each.
    ///
    /// Requests go over HTTP (`POST /events/request`, the runtime's only
    /// request operation) whatever `--transport` is; responders receive
    /// and reply over `--transport`. Latency: from each request's due time
    /// to its reply. NATS: core NATS request-reply (not JetStream) with
    /// responders in a queue group.
    Request(run::RunArgs),
    /// A bounded soak: `--rate` events/s (default 5000) for `--duration`
    /// (default 30m) to one topic read by a webhook group (pushed to a
    /// receiver this process runs), a long-poll group and an SSE group.
    ///
    /// Every `--sample` (default 60s) one JSON line: elapsed, published,
    /// delivered and lag per group, the server's RSS, open fds and tasks
    /// (admin `/metrics`) and the data directory's size. Exits non-zero,
    /// naming the series and its numbers, when a resource grows without
    /// bound after the warm-up (the first 20% of the samples), the rate
    /// falls below 95% of the target, or a group has not caught up at the
    /// end.
    Soak(soak::SoakArgs),
    /// A mesh link's throughput: `--count` events (default 1000000)
    /// prefilled at `--from`, then a link to `--to` made and timed until
    /// the remote's topic holds them all (`--to-admin`, polled every
    /// 50 ms). Both clusters take the same `--admin-token`.
    Link(links::LinkArgs),
    /// A2A round trips through the gateway: `--agents` agents attached with
    /// the SDK's helper complete each task at once, `--clients` clients
    /// keep one blocking v1.0 `SendMessage` in flight each.
    ///
    /// Latency: from each send to its answer, the completed task.
    /// Throughput: tasks completed per second after `--warmup`.
    A2a(a2a::A2aArgs),
    /// The disk's floor, no server: records of `--size` bytes falling due
    /// at `--rate` for `--duration`, appended to a file in `--dir`, each
    /// append followed by `fdatasync` (with `--writers` above 1, several
    /// syncs in flight).
    ///
    /// Latency: each append and its sync together, and each record from
    /// its due time to the end of its sync. Measured beside a run of the
    /// runtime's default mode (which syncs before it hands an event on),
    /// they are the part of that run's latency the disk alone sets.
    Fsync(fsync::FsyncArgs),
    /// MQTT workloads against any broker (the runtime's MQTT listener,
    /// Mosquitto), the same client for both: `pub` (QoS 1 publishes,
    /// `--clients` × `--window` in flight), `fanout` (one publisher at
    /// `--rate` to `--subscribers` QoS 0 subscribers of a wildcard), `idle`
    /// (`--connections` kept alive, the broker's memory read). With `--pid`
    /// the broker's CPU time per message (or its resident memory).
    Mqtt(mqtt::MqttArgs),
    /// A relay that copies bytes between each client and `--to`, doing
    /// nothing else: the floor of any server put between clients and
    /// another server (`pubsub --target nats://<relay>`).
    Relay(relay::RelayArgs),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let (kind, args) = match cli.command {
        Command::Pub(a) => (run::Kind::Pub, a),
        Command::Sub(a) => (run::Kind::Sub, a),
        Command::Pubsub(a) => (run::Kind::PubSub, a),
        Command::Request(a) => (run::Kind::Request, a),
        Command::Soak(a) => return runtime.block_on(soak::run(a)),
        Command::Link(a) => return runtime.block_on(links::run(a)),
        Command::A2a(a) => return runtime.block_on(a2a::run(a)),
        Command::Fsync(a) => return fsync::run(a),
        Command::Mqtt(a) => return runtime.block_on(mqtt::run(a)),
        Command::Relay(a) => return runtime.block_on(relay::run(a)),
    };
    runtime.block_on(run::run(kind, args))
}

/// Parses `10s`, `500ms`, `250us`, `2m`, `1.5s`; a bare number means seconds.
pub(crate) fn parse_duration(s: &str) -> Result<Duration> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .with_context(|| format!("{s:?} is not a duration (try 10s, 500ms, 2m)"))?;
    let scale = match unit.trim() {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "us" => 1e-6,
        "m" => 60.0,
        other => bail!("unknown duration unit {other:?} (use us, ms, s or m)"),
    };
    Duration::try_from_secs_f64(value * scale).with_context(|| format!("{s:?} is out of range"))
}

/// Parses a strictly positive, finite events-per-second rate.
pub(crate) fn parse_rate(s: &str) -> Result<f64> {
    let r: f64 = s
        .trim()
        .parse()
        .with_context(|| format!("{s:?} is not a number"))?;
    if !(r.is_finite() && r > 0.0) {
        bail!("the rate must be a positive number of events per second");
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5h").is_err());
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("-1").is_err());
        assert_eq!(parse_rate("2000").unwrap(), 2000.0);
    }

    #[test]
    fn every_workload_takes_the_common_options() {
        for cmd in ["pub", "sub", "pubsub", "request"] {
            let cli = Cli::try_parse_from([
                "eventmesh-bench",
                cmd,
                "--transport",
                "ws",
                "--publishers",
                "2",
                "--subscribers",
                "3",
                "--window",
                "8",
                "--count",
                "2000",
                "--duration",
                "1s",
                "--warmup",
                "0s",
                "--rate",
                "500",
                "--size",
                "64",
                "--json",
            ])
            .unwrap();
            let (Command::Pub(a) | Command::Sub(a) | Command::Pubsub(a) | Command::Request(a)) =
                cli.command
            else {
                panic!("{cmd} parsed as another command");
            };
            assert_eq!(a.transport, run::Transport::Ws);
            assert_eq!((a.publishers, a.subscribers, a.window), (2, 3, Some(8)));
            assert_eq!(a.count, Some(2000));
            assert_eq!(a.duration, Some(Duration::from_secs(1)));
            assert_eq!(a.rate, Some(500.0));
            assert!(a.json);
        }
        for bad in [
            &["pub", "--publishers", "0"][..],
            &["sub", "--count", "0"],
            &["pubsub", "--rate", "0"],
            &["request", "--transport", "udp"],
            &["pub", "--duration", "soon"],
            &["publish"],
            &["e2e"],
        ] {
            let argv = std::iter::once("eventmesh-bench").chain(bad.iter().copied());
            assert!(
                Cli::try_parse_from(argv).is_err(),
                "{bad:?} should be rejected"
            );
        }
    }
}
