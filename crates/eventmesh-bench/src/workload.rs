//! What every workload shares, whatever the target: its shape
//! ([`Workload`]), and one [`Recorder`] that turns completions into the
//! summary (events/s, MB/s, latency percentiles from an HDR histogram).
//!
//! Timing is coordinated-omission correct: a latency is measured from the
//! moment the operation was *due* (its slot in a fixed-rate schedule, or
//! the moment it was sent when running flat out) to its completion, so a
//! stalled server shows up as latency instead of as fewer samples.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::time::Instant;

use crate::stats::{self, Errors};

/// The shape of a run.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Bytes of data per event.
    pub size: usize,
    pub publishers: usize,
    pub subscribers: usize,
    /// Events per publish request (HTTP batch; 1 elsewhere).
    pub batch: usize,
    /// Publishes in flight per publisher (pipelining on TCP, WebSocket and
    /// NATS; concurrent requests on HTTP).
    pub window: usize,
    /// Stop after this many measured events (instead of the duration).
    pub count: Option<u64>,
    pub duration: Duration,
    pub warmup: Duration,
    /// Total target rate in events/s over all publishers; `None` = flat out.
    pub rate: Option<f64>,
    pub topic: String,
}

impl Workload {
    /// Each publisher's share of the rate, as the gap between its sends.
    pub fn interval_per_publisher(&self) -> Option<Duration> {
        self.rate
            .map(|r| Duration::from_secs_f64(self.publishers as f64 * self.batch as f64 / r))
    }
}

/// Per-task counters, merged into the [`Recorder`] when the task ends (no
/// lock on the hot path).
pub struct Local {
    hist: Histogram<u64>,
    events: u64,
    bytes: u64,
    errors: Errors,
}

impl Local {
    /// One completed operation of `events` events and `bytes` bytes, due at
    /// `due`, done at `done`. Ignored outside the measured window.
    pub fn record(&mut self, rec: &Recorder, due: Instant, done: Instant, events: u64, bytes: u64) {
        if !rec.measuring(due) {
            return;
        }
        let us = stats::micros(done.saturating_duration_since(due)).max(1);
        let _ = self.hist.record(us.min(self.hist.high()));
        self.events += events;
        self.bytes += bytes;
        rec.progress.fetch_add(events, Ordering::Relaxed);
    }

    pub fn error(&mut self, kind: &str) {
        stats::count(&mut self.errors, kind.to_string());
    }
}

/// Collects the results of one run.
pub struct Recorder {
    start: Instant,
    warmup: Duration,
    duration: Duration,
    count: Option<u64>,
    /// Events recorded so far in the measured window (for progress and
    /// `--count`).
    progress: AtomicU64,
    stopped: AtomicBool,
    merged: Mutex<(Histogram<u64>, u64, u64, Errors)>,
    /// When the last measured event completed (for `--count` runs).
    finished: Mutex<Option<Instant>>,
}

/// The result of a run, as printed and as `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub events: u64,
    pub seconds: f64,
    pub events_per_sec: f64,
    pub mb_per_sec: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub errors: Errors,
}

impl Recorder {
    pub fn new(w: &Workload) -> Recorder {
        Recorder {
            start: Instant::now(),
            warmup: w.warmup,
            duration: w.duration,
            count: w.count,
            progress: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
            merged: Mutex::new((stats::histogram(), 0, 0, Errors::new())),
            finished: Mutex::new(None),
        }
    }

    pub fn local(&self) -> Local {
        Local {
            hist: stats::histogram(),
            events: 0,
            bytes: 0,
            errors: Errors::new(),
        }
    }

    pub fn merge(&self, l: Local) {
        let mut m = self.merged.lock().expect("recorder lock");
        let _ = m.0.add(&l.hist);
        m.1 += l.events;
        m.2 += l.bytes;
        stats::merge(&mut m.3, l.errors);
    }

    pub fn start(&self) -> Instant {
        self.start
    }

    /// When measuring starts.
    pub fn measure_from(&self) -> Instant {
        self.start + self.warmup
    }

    /// Whether an operation due at `at` belongs to the measured window.
    pub fn measuring(&self, at: Instant) -> bool {
        at >= self.measure_from()
            && (self.count.is_some() || at < self.measure_from() + self.duration)
    }

    /// True once the run should stop sending.
    pub fn done(&self) -> bool {
        if self.stopped.load(Ordering::Relaxed) {
            return true;
        }
        let over = match self.count {
            Some(n) => self.progress.load(Ordering::Relaxed) >= n,
            None => Instant::now() >= self.measure_from() + self.duration,
        };
        if over {
            self.stopped.store(true, Ordering::Relaxed);
            *self.finished.lock().expect("recorder lock") = Some(Instant::now());
        }
        over
    }

    /// Measured events so far.
    pub fn progress(&self) -> u64 {
        self.progress.load(Ordering::Relaxed)
    }

    pub fn summary(&self) -> Summary {
        let m = self.merged.lock().expect("recorder lock");
        let seconds = match self.count {
            Some(_) => self
                .finished
                .lock()
                .expect("recorder lock")
                .unwrap_or_else(Instant::now)
                .saturating_duration_since(self.measure_from())
                .as_secs_f64(),
            None => self.duration.as_secs_f64(),
        }
        .max(1e-9);
        let ms = |q: f64| m.0.value_at_quantile(q) as f64 / 1000.0;
        Summary {
            events: m.1,
            seconds,
            events_per_sec: m.1 as f64 / seconds,
            mb_per_sec: m.2 as f64 / seconds / 1e6,
            p50_ms: ms(0.50),
            p90_ms: ms(0.90),
            p99_ms: ms(0.99),
            p999_ms: ms(0.999),
            max_ms: m.0.max() as f64 / 1000.0,
            errors: m.3.clone(),
        }
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "| events/s | MB/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | events | errors |"
        )?;
        writeln!(f, "|---|---|---|---|---|---|---|---|---|")?;
        write!(
            f,
            "| {:.0} | {:.2} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {} | {} |",
            self.events_per_sec,
            self.mb_per_sec,
            self.p50_ms,
            self.p90_ms,
            self.p99_ms,
            self.p999_ms,
            self.max_ms,
            self.events,
            stats::format_errors(&self.errors)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload() -> Workload {
        Workload {
            size: 10,
            publishers: 2,
            subscribers: 1,
            batch: 1,
            window: 1,
            count: None,
            duration: Duration::from_secs(10),
            warmup: Duration::from_secs(1),
            rate: Some(1000.0),
            topic: "t".into(),
        }
    }

    #[tokio::test]
    async fn records_only_the_measured_window_and_sums_locals() {
        let w = workload();
        assert_eq!(w.interval_per_publisher(), Some(Duration::from_millis(2)));
        let rec = Recorder::new(&w);
        let mut a = rec.local();
        let mut b = rec.local();
        let t0 = rec.start();
        // During warm-up: ignored.
        a.record(&rec, t0, t0 + Duration::from_millis(5), 1, 100);
        let m = rec.measure_from();
        a.record(&rec, m, m + Duration::from_millis(2), 1, 100);
        b.record(&rec, m, m + Duration::from_millis(4), 3, 300);
        b.error("timeout");
        rec.merge(a);
        rec.merge(b);
        let s = rec.summary();
        assert_eq!(s.events, 4);
        assert!((s.events_per_sec - 0.4).abs() < 1e-9);
        assert!((s.max_ms - 4.0).abs() < 0.01, "{s:?}");
        assert_eq!(s.errors.get("timeout"), Some(&1));
    }
}
