//! `publish`: N workers, one request in flight each, for warm-up + duration.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use bytes::Bytes;
use clap::Args;
use hdrhistogram::Histogram;
use reqwest::header::HeaderMap;
use reqwest::{StatusCode, Url};
use serde::Serialize;
use tokio::task::JoinSet;
use tokio::time::{interval_at, sleep, Instant, MissedTickBehavior};

use crate::payload::{EventBuilder, Mode};
use crate::stats::{self, Errors, Latency};

/// Pause after a transport error so a dead server is not hammered in a
/// tight loop.
const ERROR_BACKOFF: Duration = Duration::from_millis(10);

#[derive(Debug, Args)]
pub struct PublishArgs {
    /// Base URL of the eventmesh HTTP traffic port.
    #[arg(
        long,
        env = "EVENTMESH_BENCH_URL",
        default_value = "http://127.0.0.1:10105"
    )]
    pub url: String,
    /// Topic to publish to (`?topic=`).
    #[arg(long, default_value = "bench")]
    pub topic: String,
    /// Number of workers, each with one request in flight.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: u32,
    /// Length of the measured window (e.g. 10s, 500ms, 2m).
    #[arg(long, default_value = "10s", value_parser = crate::parse_duration)]
    pub duration: Duration,
    /// Load applied before measuring starts; not recorded.
    #[arg(long, default_value = "2s", value_parser = crate::parse_duration)]
    pub warmup: Duration,
    /// Size of each event's data payload in bytes.
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// CloudEvents HTTP content mode.
    #[arg(long, value_enum, default_value_t = Mode::Structured)]
    pub mode: Mode,
    /// Add a `partitionkey` extension cycling over N keys (k0..k{N-1}).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub partition_keys: Option<u32>,
    /// Fixed total rate in events/s, split evenly over the workers
    /// (default: as fast as the server answers).
    #[arg(long, value_parser = crate::parse_rate)]
    pub rate: Option<f64>,
    /// Per-request timeout.
    #[arg(long, default_value = "10s", value_parser = crate::parse_duration)]
    pub timeout: Duration,
    /// Print one JSON line instead of the human summary.
    #[arg(long)]
    pub json: bool,
}

/// The `--json` line.
#[derive(Debug, Serialize)]
struct Report {
    concurrency: u32,
    size: usize,
    mode: &'static str,
    events: u64,
    seconds: f64,
    events_per_sec: f64,
    #[serde(flatten)]
    latency: Latency,
    errors: Errors,
}

struct Plan {
    client: reqwest::Client,
    url: Url,
    events: EventBuilder,
    run_id: String,
    concurrency: u32,
    /// Per-worker pacing period, when `--rate` is set.
    period: Option<Duration>,
    start: Instant,
    measure_from: Instant,
    end: Instant,
}

#[derive(Default)]
struct WorkerResult {
    hist: Option<Histogram<u64>>,
    events: u64,
    errors: Errors,
}

pub async fn run(args: PublishArgs) -> Result<()> {
    let mut url = stats::endpoint(&args.url, "events/publish")?;
    url.query_pairs_mut().append_pair("topic", &args.topic);
    let concurrency = args.concurrency;
    let period = args
        .rate
        .map(|r| Duration::from_secs_f64(f64::from(concurrency) / r));
    if let Some(p) = period {
        if p < Duration::from_millis(1) {
            eprintln!(
                "warning: {:.0} events/s per worker exceeds the 1 ms timer resolution; \
                 raise --concurrency to reach the target rate",
                1.0 / p.as_secs_f64()
            );
        }
    }
    let start = Instant::now();
    let plan = Arc::new(Plan {
        client: stats::client(concurrency as usize, args.timeout)?,
        url,
        events: EventBuilder::new(args.mode, args.size, args.partition_keys),
        run_id: uuid::Uuid::now_v7().simple().to_string(),
        concurrency,
        period,
        start,
        measure_from: start + args.warmup,
        end: start + args.warmup + args.duration,
    });

    let mut workers = JoinSet::new();
    for idx in 0..concurrency {
        workers.spawn(worker(Arc::clone(&plan), idx));
    }
    let mut hist = stats::histogram();
    let mut events = 0;
    let mut errors = Errors::new();
    // Every request is bounded by --timeout, so this is a safety net only.
    let hard_stop = plan.end + args.timeout + Duration::from_secs(5);
    while let Ok(Some(joined)) = tokio::time::timeout_at(hard_stop, workers.join_next()).await {
        match joined {
            Ok(w) => {
                if let Some(h) = w.hist {
                    hist.add(&h)?;
                }
                events += w.events;
                stats::merge(&mut errors, w.errors);
            }
            Err(e) => stats::count(&mut errors, format!("worker_{}", task_error(&e))),
        }
    }
    if !workers.is_empty() {
        stats::count(&mut errors, "worker_stuck".to_owned());
        workers.abort_all();
    }

    let seconds = args.duration.as_secs_f64();
    let report = Report {
        concurrency,
        size: args.size,
        mode: args.mode.as_str(),
        events,
        seconds,
        events_per_sec: events as f64 / seconds,
        latency: Latency::of(&hist),
        errors,
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_summary(&args, &report);
    }
    if events == 0 {
        bail!("no event was accepted (202) during the measured window");
    }
    Ok(())
}

fn task_error(e: &tokio::task::JoinError) -> &'static str {
    if e.is_panic() {
        "panic"
    } else {
        "cancelled"
    }
}

async fn worker(plan: Arc<Plan>, idx: u32) -> WorkerResult {
    let mut out = WorkerResult::default();
    let mut hist = stats::histogram();
    let mut ticker = plan.period.map(|p| {
        // Stagger the workers over one period so the load is smooth.
        let offset = p.mul_f64(f64::from(idx) / f64::from(plan.concurrency));
        let mut t = interval_at(plan.start + offset, p);
        t.set_missed_tick_behavior(MissedTickBehavior::Skip);
        t
    });
    for seq in 0u64.. {
        // With --rate, latency counts from the scheduled send time, so a slow
        // answer that delays the next send is charged to that send too.
        let scheduled = match ticker.as_mut() {
            Some(t) => t.tick().await,
            None => Instant::now(),
        };
        if scheduled >= plan.end {
            break;
        }
        let n = seq * u64::from(plan.concurrency) + u64::from(idx);
        let id = format!("{}-{n}", plan.run_id);
        let (headers, body) = plan.events.build(&id, n);
        let result = send(&plan.client, &plan.url, headers, body).await;
        let done = Instant::now();
        let measured = done >= plan.measure_from && done <= plan.end;
        match result {
            Ok(()) if measured => {
                out.events += 1;
                hist.saturating_record(stats::micros(done - scheduled));
            }
            Ok(()) => {}
            Err((kind, transport)) => {
                if measured {
                    stats::count(&mut out.errors, kind);
                }
                if transport {
                    sleep(ERROR_BACKOFF).await;
                }
            }
        }
    }
    out.hist = Some(hist);
    out
}

/// One publish; `Err((kind, is_transport_error))` unless the answer is 202.
async fn send(
    client: &reqwest::Client,
    url: &Url,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(), (String, bool)> {
    let resp = client
        .post(url.clone())
        .headers(headers)
        .body(body)
        .send()
        .await
        .map_err(|e| (stats::error_kind(&e), true))?;
    let status = resp.status();
    // Read the whole answer so the connection goes back to the pool.
    resp.bytes()
        .await
        .map_err(|e| (stats::error_kind(&e), true))?;
    if status == StatusCode::ACCEPTED {
        Ok(())
    } else {
        Err((format!("http_{}", status.as_u16()), false))
    }
}

fn print_summary(args: &PublishArgs, r: &Report) {
    println!(
        "publish: {} workers, {} B {} events to topic {:?} at {}",
        r.concurrency, r.size, r.mode, args.topic, args.url
    );
    let pacing = match args.rate {
        Some(rate) => format!(", target {rate:.0} events/s"),
        None => String::new(),
    };
    println!(
        "  window:  {:.1} s measured after {:.1} s warm-up{pacing}",
        r.seconds,
        args.warmup.as_secs_f64()
    );
    println!(
        "  events:  {} accepted ({:.1} events/s)",
        r.events, r.events_per_sec
    );
    println!("  latency: {}", r.latency);
    println!("  errors:  {}", stats::format_errors(&r.errors));
}
