//! The soak's verdict: each resource series judged by its rule after the
//! warm-up ([`judge`]), the publish rate against the target, and each
//! group's catch-up once the load stops.
//!
//! Invariants worth naming:
//! - A series is judged on the samples after the warm-up (the first
//!   [`WARMUP_SHARE`] of them) only; a missing value fails it, and so do
//!   fewer than [`MIN_STEADY`] samples.
//! - Growth that levels off is a plateau: a relative series fails only
//!   while its last third still rises.

use serde::Serialize;

use super::{Group, Sample, SoakArgs};

/// Share of the samples, at the start, that the verdict leaves out.
const WARMUP_SHARE: f64 = 0.2;
/// Samples after the warm-up below which nothing can be judged.
const MIN_STEADY: usize = 3;
/// The achieved publish rate must be at least this share of `--rate`.
pub(super) const RATE_SHARE: f64 = 0.95;
/// A growing series counts as "still rising" when the slope of its last
/// third, over the whole steady window, adds this share of its median.
const RISING_SHARE: f64 = 0.05;

/// The outcome of one check.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub check: String,
    pub ok: bool,
    pub detail: String,
}

impl Check {
    fn new(check: &str, ok: bool, detail: String) -> Check {
        Check {
            check: check.to_owned(),
            ok,
            detail,
        }
    }
}

/// How a resource series may behave after the warm-up.
#[derive(Debug, Clone, Copy)]
pub enum Rule {
    /// Fails when the least-squares slope, projected over the steady
    /// window, adds more than `tolerance` of the series' median, and the
    /// series is still rising in its last third (that third's own slope,
    /// projected the same way, adds more than [`RISING_SHARE`]): a rise
    /// that levels off is a plateau, not a leak.
    Relative { tolerance: f64 },
    /// Fails when the median of the last third is more than `slack` above
    /// the maximum of the first third.
    Absolute { slack: f64 },
    /// Fails when the highest value of the last third exceeds the highest
    /// of the first third by more than `tolerance` of it: for a sawtooth
    /// (the log's disk usage: the write-ahead log grows until a memtable
    /// flush, retention drops whole ranges and compaction gives their
    /// space back), a plateau keeps the height of its teeth.
    Peak { tolerance: f64 },
}

/// How a series' values are shown.
#[derive(Debug, Clone, Copy)]
pub enum Unit {
    Bytes,
    Count,
}

impl Unit {
    fn show(self, v: f64) -> String {
        match self {
            Unit::Bytes => format!("{:.1} MB", v / 1e6),
            Unit::Count => format!("{v:.0}"),
        }
    }
}

/// Judges one series of `(seconds, value)` samples taken under load: the
/// first [`WARMUP_SHARE`] of the samples (at least one) are left out, the
/// rest (the steady window) must not grow without bound by `rule`. A
/// sample without a value fails the series.
pub fn judge(name: &str, points: &[(f64, Option<f64>)], rule: Rule, unit: Unit) -> Check {
    let missing = points.iter().filter(|p| p.1.is_none()).count();
    if missing > 0 {
        return Check::new(
            name,
            false,
            format!("{name}: no value in {missing} of {} samples", points.len()),
        );
    }
    let points: Vec<(f64, f64)> = points.iter().map(|&(t, v)| (t, v.unwrap_or(0.0))).collect();
    let warm = ((points.len() as f64 * WARMUP_SHARE).ceil() as usize).clamp(1, points.len());
    let steady = &points[warm..];
    if steady.len() < MIN_STEADY {
        return Check::new(
            name,
            false,
            format!(
                "{name}: only {} samples after a warm-up of {warm}; at least {MIN_STEADY} are \
                 needed (run longer or sample more often)",
                steady.len()
            ),
        );
    }
    let third = (steady.len() / 3).max(1);
    let (first, last) = (&steady[..third], &steady[steady.len() - third..]);
    let span = steady[steady.len() - 1].0 - steady[0].0;
    let per_min = slope(steady) * 60.0;
    let trend = format!(
        "{} -> {} over {:.0} s after the warm-up, least-squares {}{}/min",
        unit.show(steady[0].1),
        unit.show(steady[steady.len() - 1].1),
        span,
        if per_min < 0.0 { "-" } else { "+" },
        unit.show(per_min.abs()),
    );
    match rule {
        Rule::Relative { tolerance } => {
            let med = median(steady.iter().map(|p| p.1));
            let growth = slope(steady) * span;
            let late = slope(last) * span;
            let share = growth / med.max(f64::MIN_POSITIVE);
            let over = growth > tolerance * med;
            let rising = late > RISING_SHARE * med;
            let ok = !(over && rising);
            let detail = format!(
                "{name}{}: {trend}; projected {} = {:.1}% of the median {} (limit {:.0}%), last \
                 third {}",
                if ok { "" } else { " grows without bound" },
                unit.show(growth),
                share * 100.0,
                unit.show(med),
                tolerance * 100.0,
                if rising {
                    format!("still rising ({} projected)", unit.show(late))
                } else {
                    "level".to_owned()
                },
            );
            Check::new(name, ok, detail)
        }
        Rule::Absolute { slack } => {
            let base = first.iter().map(|p| p.1).fold(f64::MIN, f64::max);
            let late = median(last.iter().map(|p| p.1));
            let ok = late <= base + slack;
            let detail = format!(
                "{name}{}: {trend}; median of the last third {} vs max of the first third {} + \
                 {slack:.0} allowed",
                if ok { "" } else { " grows without bound" },
                unit.show(late),
                unit.show(base),
            );
            Check::new(name, ok, detail)
        }
        Rule::Peak { tolerance } => {
            let peak = |ps: &[(f64, f64)]| ps.iter().map(|p| p.1).fold(f64::MIN, f64::max);
            let (base, late) = (peak(first), peak(last));
            let ok = late <= base * (1.0 + tolerance);
            let detail = format!(
                "{name}{}: {trend}; peak of the last third {} vs peak of the first third {} \
                 ({:+.1}%, limit +{:.0}%)",
                if ok { "" } else { " grows without bound" },
                unit.show(late),
                unit.show(base),
                (late / base.max(f64::MIN_POSITIVE) - 1.0) * 100.0,
                tolerance * 100.0,
            );
            Check::new(name, ok, detail)
        }
    }
}

/// The least-squares slope of `points` (value per second).
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let (mt, mv) = points
        .iter()
        .fold((0.0, 0.0), |(t, v), p| (t + p.0 / n, v + p.1 / n));
    let (cov, var) = points.iter().fold((0.0, 0.0), |(c, s), p| {
        (c + (p.0 - mt) * (p.1 - mv), s + (p.0 - mt) * (p.0 - mt))
    });
    if var > 0.0 {
        cov / var
    } else {
        0.0
    }
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// The resource series of the samples, each judged by its rule (disk
/// usage only when it was sampled).
pub(super) fn judge_resources(samples: &[Sample], args: &SoakArgs) -> Vec<Check> {
    type Read = fn(&Sample) -> Option<f64>;
    let relative = |tolerance| Rule::Relative { tolerance };
    let absolute = |slack: u64| Rule::Absolute {
        slack: slack as f64,
    };
    let mut series: Vec<(&str, Read, Rule, Unit)> = vec![
        (
            "rss_outside_storage",
            |s| s.rss_outside_storage_bytes,
            relative(args.rss_tolerance),
            Unit::Bytes,
        ),
        (
            "open_fds",
            |s| s.open_fds,
            absolute(args.fd_slack),
            Unit::Count,
        ),
        ("tasks", |s| s.tasks, absolute(args.task_slack), Unit::Count),
    ];
    if args.data_dir.is_some() {
        series.push((
            "disk",
            |s| s.disk_peak_bytes.map(|b| b as f64),
            Rule::Peak {
                tolerance: args.disk_tolerance,
            },
            Unit::Bytes,
        ));
    }
    series
        .into_iter()
        .map(|(name, read, rule, unit)| {
            let points: Vec<_> = samples.iter().map(|s| (s.elapsed_s, read(s))).collect();
            judge(name, &points, rule, unit)
        })
        .collect()
}

pub(super) fn rate_check(achieved: f64, target: f64, share: f64) -> Check {
    let ok = achieved >= share * target;
    Check::new(
        "rate",
        ok,
        format!(
            "publish rate {achieved:.0}/s {} {:.0}% of the target {target:.0}/s ({:.0}/s)",
            if ok { "reached" } else { "is below" },
            share * 100.0,
            share * target,
        ),
    )
}

/// Whether a group caught up once the load stopped: its lag, and how many
/// fewer deliveries it settled than were published, both within `bound`.
pub(super) fn catch_up_check(
    g: Group,
    lag: Option<u64>,
    published: u64,
    delivered: u64,
    bound: u64,
    drained_s: f64,
) -> Check {
    let short = published.saturating_sub(delivered);
    let name = format!("lag_{}", g.name());
    let Some(lag) = lag else {
        return Check::new(
            &name,
            false,
            format!("{name}: the admin port gave no offsets at the end"),
        );
    };
    let ok = lag <= bound && short <= bound;
    let detail = format!(
        "{name}: {} at the end (after {drained_s:.1} s of catch-up): lag {lag} events, {delivered} \
         settled of {published} published (bound {bound})",
        if ok { "caught up" } else { "fell behind" },
    );
    Check::new(&name, ok, detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` samples a minute apart, valued by `f(i)`.
    fn series(n: usize, f: impl Fn(usize) -> f64) -> Vec<(f64, Option<f64>)> {
        (0..n)
            .map(|i| (60.0 * (i + 1) as f64, Some(f(i))))
            .collect()
    }

    /// Deterministic noise in [-1, 1].
    fn noise(i: usize) -> f64 {
        ((i as f64 * 12.9898).sin() * 43_758.547).fract()
    }

    const MB: f64 = 1e6;
    const RSS: Rule = Rule::Relative { tolerance: 0.2 };

    #[test]
    fn a_flat_series_passes() {
        let c = judge("rss", &series(30, |_| 120.0 * MB), RSS, Unit::Bytes);
        assert!(c.ok, "{}", c.detail);
        let c = judge(
            "open_fds",
            &series(30, |_| 90.0),
            Rule::Absolute { slack: 8.0 },
            Unit::Count,
        );
        assert!(c.ok, "{}", c.detail);
    }

    #[test]
    fn linear_growth_fails_naming_the_series_and_numbers() {
        // +2 MB a minute on 100 MB: +46 MB over the 23 minutes after the
        // warm-up, about 35% of the median.
        let c = judge(
            "rss",
            &series(30, |i| 100.0 * MB + 2.0 * MB * i as f64),
            RSS,
            Unit::Bytes,
        );
        assert!(!c.ok);
        assert!(
            c.detail.starts_with("rss grows without bound"),
            "{}",
            c.detail
        );
        assert!(c.detail.contains("+2.0 MB/min"), "{}", c.detail);
        assert!(c.detail.contains("still rising"), "{}", c.detail);

        // Descriptors: one more every minute.
        let c = judge(
            "open_fds",
            &series(30, |i| 100.0 + i as f64),
            Rule::Absolute { slack: 8.0 },
            Unit::Count,
        );
        assert!(!c.ok, "{}", c.detail);
        assert!(
            c.detail.contains("median of the last third 126"),
            "{}",
            c.detail
        );
        assert!(
            c.detail.contains("max of the first third 113"),
            "{}",
            c.detail
        );
    }

    #[test]
    fn a_noisy_plateau_passes() {
        // Climbs through the warm-up, then wobbles by ±8% around 200 MB.
        let rss = series(30, |i| {
            if i < 6 {
                50.0 * MB + 25.0 * MB * i as f64
            } else {
                200.0 * MB + 16.0 * MB * noise(i)
            }
        });
        let c = judge("rss", &rss, RSS, Unit::Bytes);
        assert!(c.ok, "{}", c.detail);
        // Tasks jumping by up to 40 between samples, no trend.
        let tasks = series(30, |i| 300.0 + 40.0 * noise(i));
        let c = judge("tasks", &tasks, Rule::Absolute { slack: 64.0 }, Unit::Count);
        assert!(c.ok, "{}", c.detail);
    }

    #[test]
    fn a_rise_that_levels_off_is_a_plateau() {
        // From 100 MB it grows 5 MB a minute until minute 18, then stays:
        // far over 20% in all, but level in the last third.
        let disk = series(30, |i| 100.0 * MB + 5.0 * MB * (i.clamp(6, 18) - 6) as f64);
        let c = judge(
            "disk",
            &disk,
            Rule::Relative { tolerance: 0.2 },
            Unit::Bytes,
        );
        assert!(c.ok, "{}", c.detail);
        assert!(c.detail.contains("last third level"), "{}", c.detail);
        // The same climb, still going at the end, fails.
        let disk = series(30, |i| 100.0 * MB + 5.0 * MB * i.saturating_sub(6) as f64);
        let c = judge(
            "disk",
            &disk,
            Rule::Relative { tolerance: 0.2 },
            Unit::Bytes,
        );
        assert!(!c.ok, "{}", c.detail);
    }

    #[test]
    fn a_sawtooth_plateau_passes_by_its_peaks() {
        // The log's disk usage: a tooth every three samples (the WAL grows
        // to a flush), whatever the phase the samples catch.
        let peaks = Rule::Peak { tolerance: 0.2 };
        let disk = series(30, |i| 60.0 * MB + 40.0 * MB * ((i + 1) % 3) as f64);
        let c = judge("disk", &disk, peaks, Unit::Bytes);
        assert!(c.ok, "{}", c.detail);
        // Few samples, the last ones on a rising edge: the slope says
        // "growing", the peaks do not.
        let short = series(10, |i| {
            [
                40.0, 110.0, 170.0, 60.0, 110.0, 150.0, 75.0, 105.0, 145.0, 183.0,
            ][i] * MB
        });
        assert!(!judge("disk", &short, RSS, Unit::Bytes).ok);
        let c = judge("disk", &short, peaks, Unit::Bytes);
        assert!(c.ok, "{}", c.detail);
        // Retention not keeping up: every tooth higher than the last.
        let growing = series(30, |i| {
            60.0 * MB + 40.0 * MB * ((i + 1) % 3) as f64 + 4.0 * MB * i as f64
        });
        let c = judge("disk", &growing, peaks, Unit::Bytes);
        assert!(!c.ok);
        assert!(
            c.detail.starts_with("disk grows without bound"),
            "{}",
            c.detail
        );
        assert!(
            c.detail
                .contains("peak of the last third 252.0 MB vs peak of the first third 192.0 MB"),
            "{}",
            c.detail
        );
    }

    #[test]
    fn missing_values_and_short_runs_fail() {
        let mut s = series(30, |_| 1.0);
        s[10].1 = None;
        let c = judge("tasks", &s, Rule::Absolute { slack: 1.0 }, Unit::Count);
        assert!(!c.ok);
        assert_eq!(c.detail, "tasks: no value in 1 of 30 samples");
        let c = judge(
            "tasks",
            &series(3, |_| 1.0),
            Rule::Absolute { slack: 1.0 },
            Unit::Count,
        );
        assert!(!c.ok);
        assert!(c.detail.contains("only 2 samples"), "{}", c.detail);
    }

    #[test]
    fn rate_and_catch_up_checks() {
        assert!(rate_check(4_760.0, 5_000.0, RATE_SHARE).ok);
        let c = rate_check(4_200.0, 5_000.0, RATE_SHARE);
        assert!(!c.ok);
        assert_eq!(
            c.detail,
            "publish rate 4200/s is below 95% of the target 5000/s (4750/s)"
        );
        assert!(catch_up_check(Group::Sse, Some(0), 1000, 1000, 10, 0.5).ok);
        let c = catch_up_check(Group::Sse, Some(4_000), 10_000, 6_000, 1_000, 30.0);
        assert!(!c.ok);
        assert!(c.detail.starts_with("lag_sse: fell behind"), "{}", c.detail);
        // Offsets may say all is committed while deliveries went missing.
        assert!(!catch_up_check(Group::Poll, Some(0), 10_000, 5_000, 1_000, 1.0).ok);
        assert!(!catch_up_check(Group::Poll, None, 0, 0, 1_000, 1.0).ok);
    }
}
