//! `soak`: a bounded soak test of a running eventmesh.
//!
//! For `--duration` it publishes at a steady `--rate` (`--publishers`
//! paced connections, small events) to one new topic that three consumer
//! groups read at once: a webhook group (pushed to a receiver this process
//! runs on a free loopback port, which answers 200), a long-poll group
//! (`--pollers` clients acking each delivery) and an SSE group
//! (`--streams` streams, each delivery acked over HTTP). Every `--sample`
//! it writes one JSON line ([`Sample`]): what was published and delivered,
//! each group's lag, and the server's resident memory, open file
//! descriptors and async tasks (from the admin `/metrics`) and the data
//! directory's size. At the end it judges the series ([`judge`]) and fails
//! when a resource grows without bound, the rate was not kept, or a group
//! did not catch up.
//!
//! Invariants worth naming:
//! - Publishing reuses the `pub` workload ([`mesh::publish`]) one sample
//!   interval at a time, so each sample carries that interval's own
//!   publish count, errors and latency; the publishers connect again for
//!   every interval (connection churn is part of the load), and the
//!   samples are taken while the next interval already publishes.
//! - Every sample is written (and flushed) as soon as it is taken: a run
//!   stopped part way leaves the curve so far.
//! - Only samples taken under load are judged; the catch-up after the load
//!   (at most `--drain`) decides only whether each group recovered.

mod admin;
mod clients;
mod verdict;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::{sleep, sleep_until, Instant};

use self::admin::{Admin, Offsets, Process};
use self::clients::Consumers;
use self::verdict::{catch_up_check, judge_resources, rate_check, Check};
use crate::mesh::{self, Mesh};
use crate::run::Transport;
use crate::stats::Errors;
use crate::workload::{Recorder, Summary, Workload};

/// A run has at least this many samples: a shorter `--duration` samples
/// more often than `--sample`.
const MIN_SAMPLES: u32 = 10;
/// How long an admin call (or a subscribe) may take.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the data directory's size is read between samples.
const DISK_POLL: Duration = Duration::from_secs(2);

#[derive(Debug, Args)]
pub struct SoakArgs {
    /// The runtime's HTTP traffic port (publishing over HTTP, polls, SSE,
    /// acks, subscriptions).
    #[arg(
        long,
        env = "EVENTMESH_SERVER",
        default_value = "http://127.0.0.1:10105"
    )]
    pub server: String,
    /// The runtime's TCP port (publishing with `--transport tcp`).
    #[arg(long, env = "EVENTMESH_TCP_SERVER", default_value = "127.0.0.1:10000")]
    pub tcp_server: String,
    /// The runtime's admin port (`/metrics`, `/admin/offsets`,
    /// `/admin/topics`).
    #[arg(
        long,
        env = "EVENTMESH_ADMIN",
        default_value = "http://127.0.0.1:10106"
    )]
    pub admin: String,
    /// The admin bearer token (`eventmesh.admin.token`); required by the
    /// admin routes the soak reads.
    #[arg(long, env = "EVENTMESH_ADMIN_TOKEN")]
    pub admin_token: Option<String>,
    /// Bearer token (HTTP) or TCP connection token of the traffic ports.
    #[arg(long, env = "EVENTMESH_TOKEN")]
    pub token: Option<String>,
    /// How long to publish.
    #[arg(long, default_value = "30m", value_parser = crate::parse_duration)]
    pub duration: Duration,
    /// Total events/s, paced, over all publishers.
    #[arg(long, default_value = "5000", value_parser = crate::parse_rate)]
    pub rate: f64,
    /// Interval between samples (shortened so that a run has at least 10).
    #[arg(long, default_value = "60s", value_parser = crate::parse_duration)]
    pub sample: Duration,
    /// Write the JSON lines here instead of stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The server's data directory, whose size is sampled (summed file
    /// sizes); without it disk usage is not judged.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// How the publishers publish.
    #[arg(long, value_enum, default_value_t = Transport::Tcp)]
    pub transport: Transport,
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub publishers: u32,
    /// Publishes in flight per publisher, at most.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub window: u32,
    /// Bytes of data per event.
    #[arg(long, default_value_t = 256)]
    pub size: usize,
    /// Webhook subscribers (one group, all pushing to the receiver).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub webhooks: u32,
    /// Long-polling subscribers (one group).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub pollers: u32,
    /// SSE subscribers (one group).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub streams: u32,
    /// Topic; default: a new one. Created through the admin API when
    /// missing (so the configured retention applies).
    #[arg(long)]
    pub topic: Option<String>,
    /// After the load, how long the groups may take to catch up.
    #[arg(long, default_value = "30s", value_parser = crate::parse_duration)]
    pub drain: Duration,
    /// Largest lag (and shortfall of deliveries) a group may have once the
    /// drain is over [default: the larger of 1000 and one second of
    /// --rate].
    #[arg(long)]
    pub max_lag: Option<u64>,
    /// Resident memory outside the local store's bounded caches (RSS less
    /// `eventmesh_storage_memory_bytes`: block cache, memtables and the
    /// index of idempotency keys, each capped by its configuration) may grow by this share of its median
    /// over the steady window (and no longer be rising).
    #[arg(long, default_value_t = 0.2)]
    pub rss_tolerance: f64,
    /// The peak disk usage of the last third of the steady window may
    /// exceed that of the first third by this share.
    #[arg(long, default_value_t = 0.2)]
    pub disk_tolerance: f64,
    /// Open descriptors late in the run may exceed the early maximum by
    /// this many.
    #[arg(long, default_value_t = 32)]
    pub fd_slack: u64,
    /// Async tasks late in the run may exceed the early maximum by this
    /// many.
    #[arg(long, default_value_t = 64)]
    pub task_slack: u64,
    /// The share of --rate the publishers must reach.
    #[arg(long, default_value_t = verdict::RATE_SHARE)]
    pub rate_share: f64,
}

/// The three consumer groups of a soak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Group {
    Webhook,
    Poll,
    Sse,
}

impl Group {
    const ALL: [Group; 3] = [Group::Webhook, Group::Poll, Group::Sse];

    fn name(self) -> &'static str {
        match self {
            Group::Webhook => "webhook",
            Group::Poll => "poll",
            Group::Sse => "sse",
        }
    }
}

/// Deliveries settled per group, and what went wrong, shared by every task.
#[derive(Default)]
struct Tally {
    delivered: [AtomicU64; 3],
    errors: Mutex<Errors>,
}

impl Tally {
    fn delivered(&self, g: Group) -> u64 {
        self.delivered[g as usize].load(Ordering::Relaxed)
    }

    fn settled(&self, g: Group) {
        self.delivered[g as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn error(&self, kind: String) {
        *self
            .errors
            .lock()
            .expect("tally lock")
            .entry(kind)
            .or_default() += 1;
    }

    fn group_error(&self, g: Group, kind: &str) {
        self.error(format!("{}_{kind}", g.name()));
    }

    fn merge(&self, prefix: &str, errors: &Errors) {
        let mut mine = self.errors.lock().expect("tally lock");
        for (kind, n) in errors {
            *mine.entry(format!("{prefix}_{kind}")).or_default() += n;
        }
    }

    fn errors(&self) -> Errors {
        self.errors.lock().expect("tally lock").clone()
    }
}

/// One line of the output, taken every sample interval under load.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Seconds since the load started.
    pub elapsed_s: f64,
    /// Events published (answered as stored) so far.
    pub published: u64,
    /// Events/s published in this interval.
    pub publish_rate: f64,
    /// Failed publishes so far.
    pub publish_errors: u64,
    /// Publish latency in this interval, from each event's slot to its
    /// answer.
    pub publish_p50_ms: f64,
    pub publish_p99_ms: f64,
    /// Deliveries settled so far, per group (webhook: pushes answered 200;
    /// poll and sse: acks answered 200).
    pub delivered: BTreeMap<&'static str, u64>,
    /// Each group's lag in events (`/admin/offsets`, summed over the
    /// partitions); `null` when the admin port did not answer.
    pub lag: BTreeMap<&'static str, Option<u64>>,
    /// The server's `process_resident_memory_bytes`, `process_open_fds`
    /// and `eventmesh_tasks`.
    pub rss_bytes: Option<f64>,
    /// The local store's block cache, memtables and index of idempotency
    /// keys (`eventmesh_storage_memory_bytes`, summed; absent with the log on
    /// JetStream), and the resident memory outside them, which the verdict
    /// judges: the caches fill up to their configured capacity over the
    /// first tens of minutes, and that is not a leak.
    pub storage_memory_bytes: Option<f64>,
    pub rss_outside_storage_bytes: Option<f64>,
    pub open_fds: Option<f64>,
    pub tasks: Option<f64>,
    /// Summed file sizes under `--data-dir`, now and at their highest
    /// since the previous sample (polled every 2 s).
    pub disk_bytes: Option<u64>,
    pub disk_peak_bytes: Option<u64>,
    /// Every error so far, by kind.
    pub errors: Errors,
}

/// Runs the soak; an error when the verdict is a failure.
pub async fn run(args: SoakArgs) -> Result<()> {
    let every = interval(args.duration, args.sample);
    if every < args.sample {
        eprintln!(
            "soak: sampling every {:.1}s so that the run has {MIN_SAMPLES} samples",
            every.as_secs_f64()
        );
    }
    let admin = Admin::new(&args.admin, args.admin_token.clone())?;
    let process = admin
        .process()
        .await
        .context("the soak reads the server's resources from the admin /metrics")?;
    if let Some(missing) = process.missing() {
        bail!(
            "{}/metrics has no {missing}: is the server older than the soak?",
            args.admin
        );
    }
    let run = format!("soak-{}", &uuid::Uuid::now_v7().simple().to_string()[20..]);
    let topic = args
        .topic
        .clone()
        .unwrap_or_else(|| format!("{run}.events"));
    admin.create_topic(&topic).await?;
    let w = Workload {
        size: args.size,
        publishers: args.publishers as usize,
        subscribers: (args.pollers + args.streams) as usize,
        batch: 1,
        window: args.window as usize,
        count: None,
        duration: Some(every),
        warmup: Duration::ZERO,
        rate: Some(args.rate),
        topic: topic.clone(),
        msg_ids: false,
        select: None,
        groups: None,
        links: None,
    };
    let m = Mesh::new(
        args.transport,
        &args.server,
        &args.tcp_server,
        args.token.as_deref(),
        &w,
    )?;
    let mut out: Box<dyn Write + Send> = match &args.out {
        Some(p) => {
            Box::new(std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?)
        }
        None => Box::new(std::io::stdout()),
    };

    let tally = Arc::new(Tally::default());
    let consumers = Consumers::start(&args, &m, &run, &topic, &tally).await?;
    eprintln!(
        "soak: {} events/s to {topic} for {:.0}s ({} publishers over {}); groups: {} webhooks \
         ({}), {} pollers, {} SSE streams",
        args.rate,
        args.duration.as_secs_f64(),
        args.publishers,
        transport_name(args.transport),
        args.webhooks,
        consumers.hook_url,
        args.pollers,
        args.streams,
    );

    // Publishing, one interval at a time, in a task of its own; each
    // interval's summary comes back here to be sampled.
    let disk = args.data_dir.clone().map(DiskWatch::start);
    let t0 = Instant::now();
    let (done_tx, mut done) = mpsc::channel(4);
    let publisher = tokio::spawn(publish_intervals(m, w, args.duration, done_tx));
    let mut samples: Vec<Sample> = Vec::new();
    let (mut published, mut publish_errors) = (0u64, 0u64);
    // The publishing time the schedule planned: the achieved rate is
    // measured against it, not against the wall clock, which also counts
    // each interval's last answers and the sampling between intervals.
    let mut planned = Duration::ZERO;
    while let Some((this, interval)) = done.recv().await {
        planned += this;
        // An interval whose publishers could not connect published nothing.
        let s = interval.unwrap_or_else(|e| Summary {
            events: 0,
            seconds: 0.0,
            events_per_sec: 0.0,
            mb_per_sec: 0.0,
            p50_ms: 0.0,
            p90_ms: 0.0,
            p99_ms: 0.0,
            p999_ms: 0.0,
            max_ms: 0.0,
            errors: Errors::from([(format!("{e:#}"), 1)]),
        });
        published += s.events;
        publish_errors += s.errors.values().sum::<u64>();
        tally.merge("publish", &s.errors);
        let mut sample = take_sample(&admin, disk.as_ref(), &topic, &run, &tally, t0).await;
        sample.published = published;
        sample.publish_rate = s.events as f64 / this.as_secs_f64().max(1e-9);
        sample.publish_errors = publish_errors;
        sample.publish_p50_ms = s.p50_ms;
        sample.publish_p99_ms = s.p99_ms;
        writeln!(out, "{}", serde_json::to_string(&sample)?)?;
        out.flush()?;
        eprintln!("{}", describe(&sample));
        samples.push(sample);
    }
    let load_seconds = planned.as_secs_f64();
    publisher.await.context("the publishing task failed")?;

    // The catch-up: until every group has settled what the log holds
    // (which may be a few events more than `published`: an interval counts
    // only the publishes answered before it ended).
    let max_lag = args.max_lag.unwrap_or_else(|| (args.rate as u64).max(1000));
    let drain_start = Instant::now();
    let mut offsets = admin.offsets(&topic, &run).await.ok();
    while drain_start.elapsed() < args.drain && !caught_up(offsets.as_ref(), &tally, published) {
        sleep(Duration::from_millis(500)).await;
        offsets = admin.offsets(&topic, &run).await.ok();
    }
    let drained_in = drain_start.elapsed().as_secs_f64();
    consumers.stop().await;
    let stored = offsets.as_ref().map(|o| o.stored);
    let lag = offsets.map(|o| o.lag);

    let achieved = published as f64 / load_seconds.max(1e-9);
    let mut checks = vec![rate_check(achieved, args.rate, args.rate_share)];
    for g in Group::ALL {
        let group_lag = lag.as_ref().map(|l| l.get(g.name()).copied().unwrap_or(0));
        checks.push(catch_up_check(
            g,
            group_lag,
            stored.unwrap_or(0).max(published),
            tally.delivered(g),
            max_lag,
            drained_in,
        ));
    }
    checks.extend(judge_resources(&samples, &args));
    let failed: Vec<&Check> = checks.iter().filter(|c| !c.ok).collect();
    let verdict = json!({
        "verdict": if failed.is_empty() { "pass" } else { "fail" },
        "target_rate": args.rate,
        "achieved_rate": achieved,
        "published": published,
        "stored": stored,
        "publish_errors": publish_errors,
        "delivered": Group::ALL.map(|g| (g.name(), tally.delivered(g))).into_iter().collect::<BTreeMap<_, _>>(),
        "final_lag": lag,
        "drain_s": drained_in,
        "samples": samples.len(),
        "checks": checks,
        "errors": tally.errors(),
    });
    writeln!(out, "{verdict}")?;
    out.flush()?;
    for c in &checks {
        eprintln!("soak: {} {}", if c.ok { "ok  " } else { "FAIL" }, c.detail);
    }
    if !failed.is_empty() {
        let why: Vec<&str> = failed.iter().map(|c| c.detail.as_str()).collect();
        bail!("soak failed:\n  {}", why.join("\n  "));
    }
    eprintln!("soak: passed");
    Ok(())
}

fn transport_name(t: Transport) -> &'static str {
    match t {
        Transport::Http => "http",
        Transport::Ws => "ws",
        Transport::Tcp => "tcp",
    }
}

/// The sample interval: `sample`, or shorter so that `duration` holds
/// [`MIN_SAMPLES`] of them.
fn interval(duration: Duration, sample: Duration) -> Duration {
    sample
        .min(duration / MIN_SAMPLES)
        .max(Duration::from_millis(100))
}

/// Publishes for `total`, one `w.duration` after the other, sending each
/// interval's summary (or why it could not publish) as it ends.
async fn publish_intervals(
    m: Mesh,
    mut w: Workload,
    total: Duration,
    done: mpsc::Sender<(Duration, Result<Summary>)>,
) {
    let every = w.duration.unwrap_or(total);
    let mut planned = Duration::ZERO;
    while planned < total {
        let this = every.min(total - planned);
        planned += this;
        w.duration = Some(this);
        let started = Instant::now();
        let rec = Arc::new(Recorder::new(&w));
        let outcome = mesh::publish(&m, &w, &rec).await;
        let report = match outcome {
            Ok(()) => Ok(rec.summary()),
            Err(e) => {
                // Nothing published: keep the schedule all the same.
                sleep_until(started + this).await;
                Err(e)
            }
        };
        if done.send((this, report)).await.is_err() {
            return;
        }
    }
}

/// The catch-up is over: no group lags, and each settled at least what the
/// log holds (and what was published).
fn caught_up(offsets: Option<&Offsets>, tally: &Tally, published: u64) -> bool {
    offsets.is_some_and(|o| {
        let want = o.stored.max(published);
        o.lag.values().all(|&n| n == 0) && Group::ALL.iter().all(|&g| tally.delivered(g) >= want)
    })
}

/// One sample, all but the publishing figures.
async fn take_sample(
    admin: &Admin,
    disk: Option<&DiskWatch>,
    topic: &str,
    run: &str,
    tally: &Tally,
    t0: Instant,
) -> Sample {
    let (process, offsets, disk) =
        tokio::join!(admin.process(), admin.offsets(topic, run), async {
            match disk {
                Some(d) => d.take(tally).await,
                None => None,
            }
        });
    let process = process.unwrap_or_else(|e| {
        tally.error(format!("admin_metrics: {e:#}"));
        Process::default()
    });
    let lag = offsets
        .inspect_err(|e| tally.error(format!("admin_offsets: {e:#}")))
        .ok()
        .map(|o| o.lag);
    Sample {
        elapsed_s: t0.elapsed().as_secs_f64(),
        published: 0,
        publish_rate: 0.0,
        publish_errors: 0,
        publish_p50_ms: 0.0,
        publish_p99_ms: 0.0,
        delivered: Group::ALL
            .map(|g| (g.name(), tally.delivered(g)))
            .into_iter()
            .collect(),
        lag: Group::ALL
            .map(|g| {
                (
                    g.name(),
                    lag.as_ref().map(|l| l.get(g.name()).copied().unwrap_or(0)),
                )
            })
            .into_iter()
            .collect(),
        rss_bytes: process.rss,
        storage_memory_bytes: process.storage,
        rss_outside_storage_bytes: process.rss.map(|r| r - process.storage.unwrap_or(0.0)),
        open_fds: process.fds,
        tasks: process.tasks,
        disk_bytes: disk.map(|d| d.0),
        disk_peak_bytes: disk.map(|d| d.1),
        errors: tally.errors(),
    }
}

/// A sample for people, on stderr.
fn describe(s: &Sample) -> String {
    let opt =
        |v: Option<f64>, scale: f64| v.map_or("-".to_owned(), |v| format!("{:.0}", v / scale));
    let lag = |g: Group| s.lag[g.name()].map_or("-".to_owned(), |n| n.to_string());
    format!(
        "[{:>6.0}s] published {} ({:.0}/s, {} errors), delivered webhook {} poll {} sse {}, lag {}/{}/{}, \
         rss {} MB (store caches {} MB), fds {}, tasks {}, disk {} MB (peak {} MB)",
        s.elapsed_s,
        s.published,
        s.publish_rate,
        s.publish_errors,
        s.delivered["webhook"],
        s.delivered["poll"],
        s.delivered["sse"],
        lag(Group::Webhook),
        lag(Group::Poll),
        lag(Group::Sse),
        opt(s.rss_bytes, 1e6),
        opt(s.storage_memory_bytes, 1e6),
        opt(s.open_fds, 1.0),
        opt(s.tasks, 1.0),
        opt(s.disk_bytes.map(|b| b as f64), 1e6),
        opt(s.disk_peak_bytes.map(|b| b as f64), 1e6),
    )
}

/// The data directory's size, read every [`DISK_POLL`] in the background
/// so that each sample also carries the highest it reached since the one
/// before: disk usage is a sawtooth (the write-ahead log grows until a
/// memtable flush; retention drops whole ranges, compaction gives their
/// space back), whose teeth a sample a minute would catch at random
/// heights.
struct DiskWatch {
    dir: PathBuf,
    peak: Arc<AtomicU64>,
    poller: tokio::task::JoinHandle<()>,
}

impl DiskWatch {
    fn start(dir: PathBuf) -> DiskWatch {
        let peak = Arc::new(AtomicU64::new(0));
        let poller = tokio::spawn({
            let (dir, peak) = (dir.clone(), peak.clone());
            async move {
                loop {
                    if let Ok(Some(n)) = measure(&dir).await {
                        peak.fetch_max(n, Ordering::Relaxed);
                    }
                    sleep(DISK_POLL).await;
                }
            }
        });
        DiskWatch { dir, peak, poller }
    }

    /// The size now and the highest since the last call.
    async fn take(&self, tally: &Tally) -> Option<(u64, u64)> {
        match measure(&self.dir).await {
            Ok(Some(now)) => Some((now, self.peak.swap(0, Ordering::Relaxed).max(now))),
            Ok(None) => None,
            Err(e) => {
                tally.error(format!("disk: {e}"));
                None
            }
        }
    }
}

impl Drop for DiskWatch {
    fn drop(&mut self) {
        self.poller.abort();
    }
}

/// [`disk_usage`] off the async workers (`None` if that task failed).
async fn measure(dir: &Path) -> std::io::Result<Option<u64>> {
    let dir = dir.to_path_buf();
    match tokio::task::spawn_blocking(move || disk_usage(&dir)).await {
        Ok(r) => r.map(Some),
        Err(_) => Ok(None),
    }
}

/// Summed sizes of the files under `dir` (a file removed while it is read
/// counts as gone).
fn disk_usage(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && d != dir => continue,
            Err(e) => return Err(e),
        };
        for entry in entries.flatten() {
            match entry.metadata() {
                Ok(md) if md.is_dir() => dirs.push(entry.path()),
                Ok(md) => total += md.len(),
                Err(_) => {}
            }
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_intervals_give_enough_samples() {
        let min = Duration::from_secs(60);
        assert_eq!(interval(30 * min, min), min);
        assert_eq!(interval(3 * min, min), Duration::from_secs(18));
    }
}
