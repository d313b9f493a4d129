//! The disk's own floor for a log that syncs every event: a bare loop of
//! appends to one file, each followed by `fdatasync`, paced like the load
//! (one record due every `1 / --rate` seconds), with no server in between.
//!
//! Two figures come out of one run. Each append and its sync, timed
//! together: what one `fdatasync` costs. And each record from the moment it
//! was due to the end of the sync that covered it: records that fall due
//! while a sync is under way wait for it and go out together in the next
//! append (group commit, as any log that syncs before it answers must do
//! with one sync at a time), so this is the floor of such a log's latency
//! at this rate, before any network or server.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use hdrhistogram::Histogram;
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
    /// Threads syncing at once, each appending to a file of its own. With
    /// 1 (the default) the loop commits in groups; with more, each record
    /// is written and synced on its own by the next free thread, so that
    /// a record never waits for a sync already under way while a thread
    /// is free: several syncs in flight, as a log with its own segment
    /// files could have.
    #[arg(long, default_value_t = 1)]
    writers: usize,
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
    if a.writers == 0 {
        bail!("--writers must be at least 1, got 0");
    }
    let paths: Vec<PathBuf> = (0..a.writers)
        .map(|i| {
            a.dir
                .join(format!("fsync-loop-{}-{i}.dat", std::process::id()))
        })
        .collect();
    let mut files = Vec::with_capacity(paths.len());
    for path in &paths {
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .with_context(|| format!("creating {}", path.display()));
        match file {
            Ok(f) => files.push(f),
            Err(e) => {
                remove(&paths[..files.len()])?;
                return Err(e);
            }
        }
    }
    let measured = if a.writers == 1 {
        append_and_sync(&mut files[0], &a, appends)
    } else {
        sync_apart(files, &a, appends)
    };
    remove(&paths)?;
    let Timed { syncs, records } =
        measured.with_context(|| format!("writing in {}", a.dir.display()))?;
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let max = |h: &Histogram<u64>| h.max() as f64 / 1000.0;
    if a.json {
        let v = json!({
            "kind": "fsync", "rate": a.rate, "size": a.size, "writers": a.writers,
            "appends": records.len(), "syncs": syncs.len(),
            "p50_ms": ms(&syncs, 0.5), "p90_ms": ms(&syncs, 0.9), "p99_ms": ms(&syncs, 0.99),
            "p999_ms": ms(&syncs, 0.999), "max_ms": max(&syncs),
            "due_p50_ms": ms(&records, 0.5), "due_p90_ms": ms(&records, 0.9),
            "due_p99_ms": ms(&records, 0.99), "due_p999_ms": ms(&records, 0.999),
            "due_max_ms": max(&records),
        });
        println!("{v}");
    } else {
        println!("| timed | count | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms |");
        println!("|---|---|---|---|---|---|---|");
        for (what, h) in [("append + sync", &syncs), ("record from due", &records)] {
            println!(
                "| {what} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
                h.len(),
                ms(h, 0.5),
                ms(h, 0.9),
                ms(h, 0.99),
                ms(h, 0.999),
                max(h)
            );
        }
    }
    Ok(())
}

fn remove(paths: &[PathBuf]) -> Result<()> {
    for path in paths {
        std::fs::remove_file(path).with_context(|| format!("removing {}", path.display()))?;
    }
    Ok(())
}

/// The loop's two figures.
struct Timed {
    /// Each append and its sync.
    syncs: Histogram<u64>,
    /// Each record, from its due time to the end of its sync.
    records: Histogram<u64>,
}

impl Timed {
    fn new() -> Timed {
        Timed {
            syncs: histogram(),
            records: histogram(),
        }
    }
}

/// Sleeps until shortly before `at`, then yields until `at`: a sleep
/// alone wakes tens of microseconds late, which would count in every
/// record's time from its due time.
fn wait_until(at: Instant) {
    const SPIN: Duration = Duration::from_micros(100);
    if let Some(wait) = at.checked_duration_since(Instant::now() + SPIN) {
        std::thread::sleep(wait);
    }
    while Instant::now() < at {
        std::thread::yield_now();
    }
}

/// One record due every `1 / rate` s; each append writes every record due
/// by then and is followed by its sync.
fn append_and_sync(
    file: &mut std::fs::File,
    a: &FsyncArgs,
    appends: u64,
) -> std::io::Result<Timed> {
    let every = Duration::from_secs_f64(1.0 / a.rate);
    let due = |n: u64| every.mul_f64(n as f64);
    let mut timed = Timed::new();
    let mut buf = Vec::new();
    let start = Instant::now();
    let mut next = 0;
    while next < appends {
        wait_until(start + due(next));
        let now = start.elapsed();
        // Every record due by now, at least the one just waited for.
        let mut upto = next + 1;
        while upto < appends && due(upto) <= now {
            upto += 1;
        }
        buf.clear();
        buf.resize(a.size * (upto - next) as usize, b'x');
        let began = Instant::now();
        file.write_all(&buf)?;
        file.sync_data()?;
        timed.syncs.saturating_record(micros(began.elapsed()));
        let done = start.elapsed();
        for n in next..upto {
            timed
                .records
                .saturating_record(micros(done.saturating_sub(due(n))));
        }
        next = upto;
    }
    Ok(timed)
}

/// Each record written and synced on its own by the next free thread
/// (each thread appends to its own file); the records fall due on this
/// thread, which hands them out.
fn sync_apart(files: Vec<std::fs::File>, a: &FsyncArgs, appends: u64) -> std::io::Result<Timed> {
    let every = Duration::from_secs_f64(1.0 / a.rate);
    let start = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel::<Duration>();
    let rx = std::sync::Mutex::new(rx);
    let record = vec![b'x'; a.size];
    std::thread::scope(|scope| {
        let threads: Vec<_> = files
            .into_iter()
            .map(|mut file| {
                let (rx, record) = (&rx, &record);
                scope.spawn(move || -> std::io::Result<Timed> {
                    let mut timed = Timed::new();
                    loop {
                        // The lock is held only while waiting for the next
                        // record, so the next free thread takes it.
                        let due = match rx.lock().map(|r| r.recv()) {
                            Ok(Ok(due)) => due,
                            _ => return Ok(timed),
                        };
                        let began = Instant::now();
                        file.write_all(record)?;
                        file.sync_data()?;
                        timed.syncs.saturating_record(micros(began.elapsed()));
                        let done = start.elapsed();
                        timed
                            .records
                            .saturating_record(micros(done.saturating_sub(due)));
                    }
                })
            })
            .collect();
        for n in 0..appends {
            let due = every.mul_f64(n as f64);
            wait_until(start + due);
            if tx.send(due).is_err() {
                break;
            }
        }
        drop(tx);
        let mut all = Timed::new();
        for t in threads {
            let timed = t
                .join()
                .map_err(|_| std::io::Error::other("a sync thread panicked"))??;
            all.syncs.add(&timed.syncs).map_err(std::io::Error::other)?;
            all.records
                .add(&timed.records)
                .map_err(std::io::Error::other)?;
        }
        Ok(all)
    })
}
