//! What every workload shares, whatever the target and transport: its
//! shape ([`Workload`]); one [`Recorder`] that turns completions into the
//! summary (events/s, MB/s, latency percentiles from an HDR histogram);
//! the fixed-rate [`Schedule`] publishers follow; the [`Quota`] of events
//! a prefill publishes; the due time and number each end-to-end event
//! carries in its id ([`stamp_id`], [`parse_stamp`]); and the [`Seen`] set
//! that tells first receipts from redeliveries.
//!
//! Timing is coordinated-omission correct: a latency is measured from the
//! moment the operation was *due* (its slot in a fixed-rate schedule, or
//! the moment it was sent when running flat out) to its completion, so a
//! stalled server shows up as latency instead of as fewer samples.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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
    /// Events per publish request (HTTP publish-batch; 1 elsewhere).
    pub batch: usize,
    /// Operations in flight per publisher or requester (pipelined on TCP,
    /// WebSocket and NATS; concurrent requests on HTTP).
    pub window: usize,
    /// `pub`, `pubsub`, `request`: stop after this many measured events.
    /// `sub`: the number of events prefilled and then consumed.
    pub count: Option<u64>,
    /// The measured window; `None`: until `count` (`sub`: the longest the
    /// drain may take).
    pub duration: Option<Duration>,
    /// Load before measuring (ignored by `sub`).
    pub warmup: Duration,
    /// Total target rate in events/s over all publishers; `None` = flat out.
    pub rate: Option<f64>,
    pub topic: String,
    /// NATS: every publish carries a unique `Nats-Msg-Id`, so the stream
    /// checks it against its duplicate window (what the runtime's
    /// idempotent publishing asks of JetStream).
    pub msg_ids: bool,
    /// `sub`: one event in `select` has the type `bench.selected`, and the
    /// subscribers' filter lets only those through (`None`: no filter).
    pub select: Option<u64>,
    /// `sub`, `pubsub`: this many groups, each taking the events of one
    /// `benchgroup` value (`None`: one group, no filter).
    pub groups: Option<u32>,
    /// `--groups` over this many TCP connections (`None`: one per group
    /// and subscriber).
    pub links: Option<u32>,
}

impl Workload {
    /// Each publisher's share of the rate, as the gap between its sends
    /// (of `batch` events each).
    pub fn interval_per_publisher(&self) -> Option<Duration> {
        self.rate.map(|r| {
            Duration::from_secs_f64(self.publishers.max(1) as f64 * self.batch.max(1) as f64 / r)
        })
    }

    /// The schedule of publisher `i`: all publishers share the rate, their
    /// slots staggered so that they interleave evenly.
    pub fn schedule(&self, start: Instant, i: usize) -> Schedule {
        let every = self.interval_per_publisher();
        let first = match every {
            Some(gap) => start + gap.mul_f64(i as f64 / self.publishers.max(1) as f64),
            None => start,
        };
        Schedule {
            next: first,
            every,
            timer: None,
        }
    }
}

/// The slots of a fixed-rate schedule, or "now" when running flat out; a
/// slot is the due time of the operation sent in it.
#[derive(Debug)]
pub struct Schedule {
    next: Instant,
    every: Option<Duration>,
    /// Made at the first wait (it needs the runtime's reactor).
    timer: Option<pace::Timer>,
}

impl Schedule {
    /// The next slot (what [`Schedule::tick`] would wait for), `None` flat
    /// out.
    pub fn next_slot(&self) -> Option<Instant> {
        self.every.map(|_| self.next)
    }

    /// Waits for the next slot and returns it; a slot already past returns
    /// at once (the operation is late, and keeps its due time). Cancel
    /// safe: a slot is only used up when this returns.
    pub async fn tick(&mut self) -> Instant {
        match self.every {
            None => Instant::now(),
            Some(gap) => {
                let due = self.next;
                let wait = due.saturating_duration_since(Instant::now());
                if !wait.is_zero() {
                    pace::sleep(&mut self.timer, due, wait).await;
                }
                self.next += gap;
                due
            }
        }
    }
}

/// Waits for a schedule's slots. Tokio's timer wheel rounds every deadline
/// up to the next whole millisecond: paced by it, a publisher at 5,000
/// events/s would send its events in bursts of five, each up to 1 ms after
/// its slot, and as latency is measured from the slot, that lateness of the
/// load generator would be charged to the target. On Linux the wait is a
/// timerfd (a high-resolution kernel timer) watched by the runtime's
/// reactor, which wakes within microseconds of the slot.
mod pace {
    use std::time::Duration;

    use tokio::time::Instant;

    #[cfg(target_os = "linux")]
    pub use linux::Timer;

    /// Waits `wait` (the time left until `due`), on `timer`, made at the
    /// first call; with no timer to be had, on tokio's clock.
    #[cfg(target_os = "linux")]
    pub async fn sleep(timer: &mut Option<Timer>, due: Instant, wait: Duration) {
        if timer.is_none() {
            match Timer::new() {
                Ok(t) => *timer = Some(t),
                Err(e) => {
                    static WARNED: std::sync::Once = std::sync::Once::new();
                    WARNED.call_once(|| {
                        eprintln!("no high-resolution timer ({e}); pacing to the millisecond")
                    });
                }
            }
        }
        let waited = match timer {
            Some(t) => t.sleep(wait).await,
            None => Err(std::io::Error::other("no timer")),
        };
        if waited.is_err() {
            tokio::time::sleep_until(due).await;
        }
    }

    #[cfg(not(target_os = "linux"))]
    #[derive(Debug)]
    pub struct Timer;

    #[cfg(not(target_os = "linux"))]
    pub async fn sleep(_: &mut Option<Timer>, due: Instant, _: Duration) {
        tokio::time::sleep_until(due).await;
    }

    #[cfg(target_os = "linux")]
    mod linux {
        use std::io;
        use std::os::fd::OwnedFd;
        use std::time::Duration;

        use rustix::time::{
            timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags,
            TimerfdTimerFlags, Timespec,
        };
        use tokio::io::unix::AsyncFd;
        use tokio::io::Interest;

        /// A one-shot monotonic timerfd.
        #[derive(Debug)]
        pub struct Timer(AsyncFd<OwnedFd>);

        impl Timer {
            pub fn new() -> io::Result<Timer> {
                let fd = timerfd_create(
                    TimerfdClockId::Monotonic,
                    TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
                )?;
                // Deprecated because an arbitrary `AsRawFd` may close or
                // swap its descriptor while registered; an `OwnedFd` owned by
                // the `AsyncFd` keeps the same open descriptor until both
                // are dropped, so the safe constructor is sound here.
                #[allow(deprecated)]
                let fd = AsyncFd::with_interest(fd, Interest::READABLE)?;
                Ok(Timer(fd))
            }

            /// Arms the timer for `wait` from now and waits for it to fire.
            /// Cancel safe: the next call re-arms it, after taking away
            /// the expiry of an abandoned wait.
            pub async fn sleep(&self, wait: Duration) -> io::Result<()> {
                let mut count = [0u8; 8];
                // Nothing to take is the usual answer (EAGAIN).
                let _ = rustix::io::read(self.0.get_ref(), &mut count[..]);
                let value = Timespec::try_from(wait).map_err(io::Error::other)?;
                let zero = Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                let spec = Itimerspec {
                    it_interval: zero,
                    it_value: value,
                };
                timerfd_settime(self.0.get_ref(), TimerfdTimerFlags::empty(), &spec)?;
                loop {
                    let mut ready = self.0.readable().await?;
                    match ready.try_io(|fd| {
                        rustix::io::read(fd.get_ref(), &mut count[..]).map_err(io::Error::from)
                    }) {
                        Ok(fired) => return fired.map(|_| ()),
                        // Readiness left over from an earlier expiry.
                        Err(_would_block) => continue,
                    }
                }
            }
        }
    }
}

/// A number of events to publish, shared by publishers: each claims the
/// sequence numbers of what it sends.
#[derive(Debug)]
pub struct Quota {
    next: AtomicU64,
    limit: u64,
}

impl Quota {
    pub fn new(limit: u64) -> Quota {
        Quota {
            next: AtomicU64::new(0),
            limit,
        }
    }

    /// Up to `n` sequence numbers of the quota; `None` once it is used up.
    pub fn claim(&self, n: u64) -> Option<Range<u64>> {
        let first = self.next.fetch_add(n, Ordering::Relaxed);
        (first < self.limit).then(|| first..(first + n).min(self.limit))
    }
}

/// The id of an end-to-end event: its due time (nanoseconds since the
/// run's start) and its sequence number, `"<nanos>-<seq>"`.
pub fn stamp_id(start: Instant, due: Instant, seq: u64) -> String {
    format!("{}-{seq}", due.saturating_duration_since(start).as_nanos())
}

/// The due time and sequence number a [`stamp_id`] carries.
pub fn parse_stamp(start: Instant, id: &str) -> Option<(Instant, u64)> {
    let (nanos, seq) = id.split_once('-')?;
    let nanos: u64 = nanos.parse().ok()?;
    Some((start + Duration::from_nanos(nanos), seq.parse().ok()?))
}

/// Which of the sequence numbers `0..n` were seen, for any number of
/// threads (one bit each).
#[derive(Debug)]
pub struct Seen {
    bits: Vec<AtomicU64>,
    n: u64,
}

/// What [`Seen::insert`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Receipt {
    First,
    Again,
    /// Not a number of this run.
    Unknown,
}

impl Seen {
    pub fn new(n: u64) -> Seen {
        Seen {
            bits: (0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            n,
        }
    }

    pub fn insert(&self, seq: u64) -> Receipt {
        if seq >= self.n {
            return Receipt::Unknown;
        }
        let bit = 1u64 << (seq % 64);
        let before = self.bits[(seq / 64) as usize].fetch_or(bit, Ordering::Relaxed);
        if before & bit == 0 {
            Receipt::First
        } else {
            Receipt::Again
        }
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
    /// `due`, done at `done`; ignored unless due in the measured window.
    pub fn record(&mut self, rec: &Recorder, due: Instant, done: Instant, events: u64, bytes: u64) {
        self.record_latency(rec, due, done.saturating_duration_since(due), events, bytes);
    }

    /// One sample of `latency`, counted when `at` falls in the measured
    /// window (and the `--count` is not reached yet).
    pub fn record_latency(
        &mut self,
        rec: &Recorder,
        at: Instant,
        latency: Duration,
        events: u64,
        bytes: u64,
    ) {
        if !rec.measuring(at) || !rec.admit(events) {
            return;
        }
        let us = stats::micros(latency).max(1);
        let _ = self.hist.record(us.min(self.hist.high()));
        self.events += events;
        self.bytes += bytes;
    }

    pub fn error(&mut self, kind: &str) {
        self.errors(kind, 1);
    }

    pub fn errors(&mut self, kind: &str, n: u64) {
        if n > 0 {
            *self.errors.entry(kind.to_owned()).or_default() += n;
        }
    }
}

/// No `--count`: the value of [`Recorder`]'s target.
const UNLIMITED: u64 = u64::MAX;
/// The measured window has not started (a `sub` prefill).
const HELD: u64 = u64::MAX;

/// Collects the results of one run.
pub struct Recorder {
    start: Instant,
    /// When measuring starts, in nanoseconds since `start`; [`HELD`]
    /// until [`Recorder::measure_now`] for a held recorder.
    measure_from: AtomicU64,
    duration: Option<Duration>,
    /// Measured events to stop at; [`UNLIMITED`] when none.
    target: AtomicU64,
    /// Events admitted in the measured window so far.
    progress: AtomicU64,
    /// Events a prefill published so far (for the progress line).
    prefilled: Arc<AtomicU64>,
    stopped: AtomicBool,
    /// When the target was reached.
    finished: Mutex<Option<Instant>>,
    merged: Mutex<(Histogram<u64>, u64, u64, Errors)>,
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
    /// Measures from `w.warmup` after now, for `w.duration` or up to
    /// `w.count` events, whichever comes first.
    pub fn new(w: &Workload) -> Recorder {
        let rec = Recorder::held(w);
        rec.measure_from
            .store(stats::nanos(w.warmup), Ordering::Relaxed);
        rec.target
            .store(w.count.unwrap_or(UNLIMITED), Ordering::Relaxed);
        rec
    }

    /// A recorder that measures nothing until [`Recorder::measure_now`].
    pub fn held(w: &Workload) -> Recorder {
        Recorder {
            start: Instant::now(),
            measure_from: AtomicU64::new(HELD),
            duration: w.duration,
            target: AtomicU64::new(UNLIMITED),
            progress: AtomicU64::new(0),
            prefilled: Arc::default(),
            stopped: AtomicBool::new(false),
            finished: Mutex::new(None),
            merged: Mutex::new((stats::histogram(), 0, 0, Errors::new())),
        }
    }

    /// Starts the measured window now, to stop after `count` events (or
    /// the duration).
    pub fn measure_now(&self, count: u64) {
        self.target.store(count, Ordering::Relaxed);
        let now = Instant::now().saturating_duration_since(self.start);
        self.measure_from
            .store(stats::nanos(now).min(HELD - 1), Ordering::Relaxed);
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

    /// Counts one error outside any task.
    pub fn error(&self, kind: &str, n: u64) {
        let mut l = self.local();
        l.errors(kind, n);
        self.merge(l);
    }

    /// The run's epoch: due times in event ids count from here.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// When measuring starts; `None` while held.
    pub fn measure_from(&self) -> Option<Instant> {
        match self.measure_from.load(Ordering::Relaxed) {
            HELD => None,
            ns => Some(self.start + Duration::from_nanos(ns)),
        }
    }

    /// When the measured window ends, if it has an end.
    fn measure_until(&self) -> Option<Instant> {
        Some(self.measure_from()? + self.duration?)
    }

    /// Whether an operation due at `at` belongs to the measured window.
    pub fn measuring(&self, at: Instant) -> bool {
        self.measure_from().is_some_and(|from| at >= from)
            && self.measure_until().is_none_or(|until| at < until)
    }

    /// Takes `events` more into the measured count, unless the target was
    /// reached already; notes when it is reached.
    fn admit(&self, events: u64) -> bool {
        let target = self.target.load(Ordering::Relaxed);
        let before = self.progress.fetch_add(events, Ordering::Relaxed);
        if before >= target {
            return false;
        }
        if before + events >= target {
            let mut f = self.finished.lock().expect("recorder lock");
            f.get_or_insert_with(Instant::now);
        }
        true
    }

    /// True once the measured window has ended: its duration passed or its
    /// target count reached.
    pub fn window_over(&self) -> bool {
        self.finished.lock().expect("recorder lock").is_some()
            || self
                .measure_until()
                .is_some_and(|until| Instant::now() >= until)
    }

    /// True once the run should stop sending.
    pub fn done(&self) -> bool {
        if self.stopped.load(Ordering::Relaxed) {
            return true;
        }
        let over = self.progress() >= self.target.load(Ordering::Relaxed)
            || self
                .measure_until()
                .is_some_and(|until| Instant::now() >= until);
        if over {
            self.stopped.store(true, Ordering::Relaxed);
        }
        over
    }

    /// Measured events so far.
    pub fn progress(&self) -> u64 {
        self.progress.load(Ordering::Relaxed)
    }

    /// The events to stop at, if any.
    pub fn target(&self) -> Option<u64> {
        Some(self.target.load(Ordering::Relaxed)).filter(|&t| t != UNLIMITED)
    }

    /// The counter of prefilled events (shown while held).
    pub fn prefilled(&self) -> &Arc<AtomicU64> {
        &self.prefilled
    }

    pub fn summary(&self) -> Summary {
        let m = self.merged.lock().expect("recorder lock");
        let from = self.measure_from().unwrap_or(self.start);
        let finished = *self.finished.lock().expect("recorder lock");
        let seconds = match (finished, self.duration) {
            (Some(at), _) => at.saturating_duration_since(from),
            (None, Some(d)) => d,
            (None, None) => Instant::now().saturating_duration_since(from),
        }
        .as_secs_f64()
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
pub(crate) mod tests {
    use super::*;

    pub(crate) fn workload() -> Workload {
        Workload {
            size: 10,
            publishers: 2,
            subscribers: 1,
            batch: 1,
            window: 1,
            count: None,
            duration: Some(Duration::from_secs(10)),
            warmup: Duration::from_secs(1),
            rate: Some(1000.0),
            topic: "t".into(),
            msg_ids: false,
            select: None,
            groups: None,
            links: None,
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
        let m = rec.measure_from().unwrap();
        a.record(&rec, m, m + Duration::from_millis(2), 1, 100);
        b.record(&rec, m, m + Duration::from_millis(4), 3, 300);
        // Due after the window: ignored.
        b.record(
            &rec,
            m + Duration::from_secs(10),
            m + Duration::from_secs(11),
            1,
            1,
        );
        b.error("timeout");
        rec.merge(a);
        rec.merge(b);
        let s = rec.summary();
        assert_eq!(s.events, 4);
        assert!((s.events_per_sec - 0.4).abs() < 1e-9);
        assert!((s.max_ms - 4.0).abs() < 0.01, "{s:?}");
        assert_eq!(s.errors.get("timeout"), Some(&1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_count_stops_the_run_and_sets_its_length() {
        let mut w = workload();
        w.count = Some(3);
        w.duration = None;
        w.warmup = Duration::ZERO;
        let rec = Recorder::new(&w);
        let mut l = rec.local();
        let t0 = rec.start();
        l.record(&rec, t0, t0 + Duration::from_millis(1), 2, 20);
        assert!(!rec.done());
        tokio::time::advance(Duration::from_millis(500)).await;
        l.record(&rec, t0, t0 + Duration::from_millis(1), 1, 10);
        assert!(rec.done());
        // Past the count: not recorded.
        l.record(&rec, t0, t0 + Duration::from_millis(1), 1, 10);
        rec.merge(l);
        let s = rec.summary();
        assert_eq!(s.events, 3);
        assert!((s.seconds - 0.5).abs() < 1e-6, "{s:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_recorder_measures_from_measure_now() {
        let mut w = workload();
        w.duration = Some(Duration::from_secs(5));
        let rec = Recorder::held(&w);
        let mut l = rec.local();
        assert!(!rec.measuring(Instant::now()));
        l.record_latency(&rec, Instant::now(), Duration::from_millis(1), 1, 1);
        assert!(!rec.done());
        tokio::time::advance(Duration::from_secs(100)).await;
        assert!(!rec.done(), "held: the duration has not started");
        rec.measure_now(2);
        let now = Instant::now();
        l.record_latency(&rec, now, Duration::from_millis(7), 1, 1);
        assert!(!rec.done());
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(rec.done(), "the duration caps the drain");
        rec.merge(l);
        let s = rec.summary();
        assert_eq!(s.events, 1);
        assert!((s.seconds - 5.0).abs() < 1e-6, "{s:?}");
        assert!((s.p50_ms - 7.0).abs() < 0.01, "{s:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn schedules_stagger_publishers_and_keep_late_slots() {
        let w = workload(); // 1000/s over 2 publishers: every 2 ms each
        let t0 = Instant::now();
        let mut a = w.schedule(t0, 0);
        let mut b = w.schedule(t0, 1);
        assert_eq!(a.tick().await, t0);
        assert_eq!(b.tick().await, t0 + Duration::from_millis(1));
        assert_eq!(a.next_slot(), Some(t0 + Duration::from_millis(2)));
        // Behind schedule: the slots come at once, with their own times.
        tokio::time::advance(Duration::from_millis(10)).await;
        assert_eq!(a.tick().await, t0 + Duration::from_millis(2));
        assert_eq!(a.tick().await, t0 + Duration::from_millis(4));
        // A cancelled wait does not use the slot up.
        let next = b.next_slot().unwrap();
        let _ = tokio::time::timeout(Duration::ZERO, async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            b.tick().await
        })
        .await;
        assert_eq!(b.next_slot(), Some(next));

        let mut flat = Workload { rate: None, ..w }.schedule(t0, 1);
        assert_eq!(flat.next_slot(), None);
        assert_eq!(flat.tick().await, Instant::now());
    }

    /// The high-resolution wait lasts at least as long as asked, also
    /// after an abandoned wait whose expiry is still pending.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_precise_timer_never_fires_early() {
        let timer = pace::Timer::new().unwrap();
        let t = std::time::Instant::now();
        timer.sleep(Duration::from_millis(3)).await.unwrap();
        assert!(t.elapsed() >= Duration::from_millis(3));
        // Abandoned after 1 ms; its expiry comes during the sleep below.
        let _ = tokio::time::timeout(
            Duration::from_millis(1),
            timer.sleep(Duration::from_millis(5)),
        )
        .await;
        std::thread::sleep(Duration::from_millis(10));
        let t = std::time::Instant::now();
        timer.sleep(Duration::from_millis(20)).await.unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(20),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn quotas_hand_out_each_number_once() {
        let q = Quota::new(5);
        assert_eq!(q.claim(2), Some(0..2));
        assert_eq!(q.claim(2), Some(2..4));
        assert_eq!(q.claim(2), Some(4..5));
        assert_eq!(q.claim(1), None);
    }

    #[tokio::test]
    async fn stamps_round_trip_through_ids() {
        let t0 = Instant::now();
        let due = t0 + Duration::from_micros(1234);
        let id = stamp_id(t0, due, 7);
        assert_eq!(parse_stamp(t0, &id), Some((due, 7)));
        assert_eq!(parse_stamp(t0, "nonsense"), None);
        assert_eq!(parse_stamp(t0, "12-x"), None);
    }

    #[test]
    fn seen_tells_first_receipts_from_repeats() {
        let s = Seen::new(130);
        assert_eq!(s.insert(0), Receipt::First);
        assert_eq!(s.insert(129), Receipt::First);
        assert_eq!(s.insert(0), Receipt::Again);
        assert_eq!(s.insert(64), Receipt::First);
        assert_eq!(s.insert(130), Receipt::Unknown);
    }
}
