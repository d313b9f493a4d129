//! The disk's own floor for a log that syncs every event: a bare loop of
//! appends to one file, each followed by `fdatasync`, paced like the load
//! (one append every `1 / --rate` seconds), with no server in between.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::json;

use crate::stats::{histogram, micros};
use crate::{parse_duration, parse_rate};

#[derive(Debug, Args)]
pub struct FsyncArgs {
    /// Directory the loop's file is written in (the disk under test); the
    /// file is removed at the end.
    #[arg(long)]
    dir: PathBuf,
    /// Appends per second, each followed by its `fdatasync`.
    #[arg(long, default_value = "5000", value_parser = parse_rate)]
    rate: f64,
    /// How long the loop runs: `--rate` x `--duration` appends in all.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// Bytes per append (an event of 1 KiB and its framing in a log).
    #[arg(long, default_value_t = 1100)]
    size: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(a: FsyncArgs) -> Result<()> {
    if a.size == 0 {
        bail!("--size must be at least 1 byte, got 0");
    }
    let appends = (a.rate * a.duration.as_secs_f64()).round() as u64;
    if appends == 0 {
        bail!(
            "--rate {} for --duration {:?} makes no append",
            a.rate,
            a.duration
        );
    }
    let path = a.dir.join(format!("fsync-loop-{}.dat", std::process::id()));
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    let measured = append_and_sync(&mut file, &a, appends);
    drop(file);
    std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
    let latency = measured.with_context(|| format!("writing {}", path.display()))?;
    let ms = |q: f64| latency.value_at_quantile(q) as f64 / 1000.0;
    if a.json {
        let v = json!({
            "kind": "fsync", "rate": a.rate, "size": a.size, "appends": latency.len(),
            "p50_ms": ms(0.5), "p90_ms": ms(0.9), "p99_ms": ms(0.99),
            "p999_ms": ms(0.999), "max_ms": latency.max() as f64 / 1000.0,
        });
        println!("{v}");
    } else {
        println!("| appends | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms |");
        println!("|---|---|---|---|---|---|");
        println!(
            "| {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
            latency.len(),
            ms(0.5),
            ms(0.9),
            ms(0.99),
            ms(0.999),
            latency.max() as f64 / 1000.0
        );
    }
    Ok(())
}

/// Each append and its sync, timed together, one every `1 / rate` s.
fn append_and_sync(
    file: &mut std::fs::File,
    a: &FsyncArgs,
    appends: u64,
) -> std::io::Result<hdrhistogram::Histogram<u64>> {
    let record = vec![b'x'; a.size];
    let every = Duration::from_secs_f64(1.0 / a.rate);
    let mut latency = histogram();
    let start = Instant::now();
    for n in 0..appends {
        let due = start + every.mul_f64(n as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let began = Instant::now();
        file.write_all(&record)?;
        file.sync_data()?;
        latency.saturating_record(micros(began.elapsed()));
    }
    Ok(latency)
}
