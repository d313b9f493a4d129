//! Keeps a failure that repeats many times a second (a full disk, an
//! unreachable store) from flooding the log: the first failure is reported,
//! then at most one report per interval with the count left out, and the
//! recovery once.

use std::time::{Duration, Instant};

/// What the caller should log after [`FailureLog::failed`] or
/// [`FailureLog::succeeded`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// Nothing: a report went out recently.
    Quiet,
    /// Report this failure; `suppressed` more happened since the last report.
    Failure { suppressed: u64 },
    /// The operation works again after `failures` failures.
    Recovered { failures: u64 },
}

#[derive(Debug)]
pub struct FailureLog {
    interval: Duration,
    last_report: Option<Instant>,
    suppressed: u64,
    failures: u64,
}

impl FailureLog {
    pub fn new(interval: Duration) -> Self {
        FailureLog {
            interval,
            last_report: None,
            suppressed: 0,
            failures: 0,
        }
    }

    pub fn failed(&mut self) -> Report {
        self.failed_at(Instant::now())
    }

    pub fn succeeded(&mut self) -> Report {
        self.last_report = None;
        self.suppressed = 0;
        match std::mem::take(&mut self.failures) {
            0 => Report::Quiet,
            failures => Report::Recovered { failures },
        }
    }

    fn failed_at(&mut self, now: Instant) -> Report {
        self.failures += 1;
        match self.last_report {
            Some(t) if now.duration_since(t) < self.interval => {
                self.suppressed += 1;
                Report::Quiet
            }
            _ => {
                self.last_report = Some(now);
                Report::Failure {
                    suppressed: std::mem::take(&mut self.suppressed),
                }
            }
        }
    }
}

impl Default for FailureLog {
    /// One report per 30 seconds.
    fn default() -> Self {
        Self::new(Duration::from_secs(30))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_first_then_one_per_interval_then_recovery() {
        let mut log = FailureLog::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(log.failed_at(t0), Report::Failure { suppressed: 0 });
        assert_eq!(log.failed_at(t0 + Duration::from_secs(1)), Report::Quiet);
        assert_eq!(log.failed_at(t0 + Duration::from_secs(2)), Report::Quiet);
        assert_eq!(
            log.failed_at(t0 + Duration::from_secs(11)),
            Report::Failure { suppressed: 2 }
        );
        assert_eq!(log.succeeded(), Report::Recovered { failures: 4 });
        assert_eq!(log.succeeded(), Report::Quiet);
        assert_eq!(
            log.failed_at(t0 + Duration::from_secs(12)),
            Report::Failure { suppressed: 0 }
        );
    }
}
