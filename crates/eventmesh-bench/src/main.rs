//! `eventmesh-bench`: a load generator for the eventmesh HTTP traffic API.
//!
//! Two subcommands:
//! - `publish`: closed-loop publish benchmark. `--concurrency` workers each keep
//!   exactly one `POST /events/publish` in flight (or pace themselves with
//!   `--rate`), latency is recorded in an HDR histogram after `--warmup`, and
//!   throughput is the number of `202 Accepted` answers completed inside the
//!   measured window divided by its length.
//! - `e2e`: end-to-end latency. One pull subscription is created, one
//!   publisher sends timestamped events at a fixed rate and one consumer
//!   long-polls, acknowledges and records receive time minus send time.
//!
//! Both stop by themselves after warm-up plus duration, never panic on server
//! errors (they are counted by kind), and print a human summary or, with
//! `--json`, a single JSON line.

mod e2e;
mod mesh;
mod nats;
mod payload;
mod publish;
mod run;
mod stats;
mod workload;

use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "eventmesh-bench",
    version,
    about = "Load generator for the eventmesh runtime (HTTP and TCP) and NATS JetStream"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Publish throughput and latency against `--target` (eventmesh over
    /// http or tcp, or NATS JetStream), e.g.
    /// `pub --transport tcp --size 1024 --publishers 16 --window 256 --duration 10s --json`.
    Pub(run::RunArgs),
    /// Publish-to-receive latency: publishers (usually at a fixed `--rate`)
    /// and subscribers in one group that ack each event.
    Pubsub(run::RunArgs),
    /// Publish throughput and latency (POST /events/publish).
    Publish(publish::PublishArgs),
    /// Publish-to-receive latency through a pull subscription.
    E2e(e2e::E2eArgs),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(async move {
        match cli.command {
            Command::Pub(args) => run::run(run::Kind::Pub, args).await,
            Command::Pubsub(args) => run::run(run::Kind::PubSub, args).await,
            Command::Publish(args) => publish::run(args).await,
            Command::E2e(args) => e2e::run(args).await,
        }
    })
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
    fn publish_arguments() {
        let cli = Cli::try_parse_from([
            "eventmesh-bench",
            "publish",
            "--url",
            "http://127.0.0.1:10105",
            "--topic",
            "bench",
            "--concurrency",
            "64",
            "--duration",
            "10s",
            "--warmup",
            "2s",
            "--size",
            "1024",
            "--mode",
            "binary",
            "--partition-keys",
            "16",
            "--rate",
            "5000",
            "--json",
        ])
        .unwrap();
        let Command::Publish(a) = cli.command else {
            panic!("expected publish");
        };
        assert_eq!(a.concurrency, 64);
        assert_eq!(a.duration, Duration::from_secs(10));
        assert_eq!(a.warmup, Duration::from_secs(2));
        assert_eq!(a.size, 1024);
        assert_eq!(a.mode, payload::Mode::Binary);
        assert_eq!(a.partition_keys, Some(16));
        assert_eq!(a.rate, Some(5000.0));
        assert!(a.json);

        // Defaults, and rejected values.
        let cli = Cli::try_parse_from(["eventmesh-bench", "publish"]).unwrap();
        let Command::Publish(a) = cli.command else {
            panic!("expected publish");
        };
        assert_eq!(a.url, "http://127.0.0.1:10105");
        assert_eq!(a.mode, payload::Mode::Structured);
        assert_eq!(a.rate, None);
        for bad in [
            &["--concurrency", "0"][..],
            &["--partition-keys", "0"],
            &["--rate", "0"],
            &["--mode", "batch"],
            &["--duration", "soon"],
        ] {
            let argv = ["eventmesh-bench", "publish"]
                .into_iter()
                .chain(bad.iter().copied());
            assert!(
                Cli::try_parse_from(argv).is_err(),
                "{bad:?} should be rejected"
            );
        }
    }

    #[test]
    fn e2e_arguments() {
        let cli = Cli::try_parse_from([
            "eventmesh-bench",
            "e2e",
            "--url",
            "http://localhost:10105/",
            "--topic",
            "lat",
            "--rate",
            "2000",
            "--duration",
            "10s",
        ])
        .unwrap();
        let Command::E2e(a) = cli.command else {
            panic!("expected e2e");
        };
        assert_eq!(a.topic, "lat");
        assert_eq!(a.rate, 2000.0);
        assert_eq!(a.duration, Duration::from_secs(10));
        assert!(!a.json);
    }
}
