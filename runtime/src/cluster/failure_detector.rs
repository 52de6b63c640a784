//! The phi accrual failure detector: how suspicious the silence of a peer is, on a continuous
//! scale, from the history of its heartbeat intervals.
//!
//! `phi = -log10(P(a heartbeat arrives later than now))` under a normal distribution of
//! intervals whose mean is widened by the acceptable pause. A phi above the threshold makes the
//! observer call the peer unreachable. Pure: every call takes the current instant.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::membership::OptionsError;

/// Settings of the failure detector. Defaults are documented on each setter; the expected
/// heartbeat interval is not one of them: it is always the membership's
/// [`heartbeat_interval`](super::MembershipOptions::with_heartbeat_interval).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FailureDetectorOptions {
    threshold: f64,
    max_sample_size: usize,
    min_std_deviation: Duration,
    acceptable_heartbeat_pause: Duration,
    /// Seeds the history; set by the membership from its own heartbeat interval.
    heartbeat_interval: Duration,
}

impl Default for FailureDetectorOptions {
    fn default() -> Self {
        Self {
            threshold: 8.0,
            max_sample_size: 200,
            min_std_deviation: Duration::from_millis(100),
            acceptable_heartbeat_pause: Duration::from_millis(1_000),
            heartbeat_interval: Duration::from_millis(500),
        }
    }
}

impl FailureDetectorOptions {
    /// The phi above which a peer is unreachable (default 8): phi 8 is a heartbeat that, by
    /// the history so far, had a 10⁻⁸ chance of being this late.
    #[must_use]
    pub fn with_threshold(mut self, phi: f64) -> Self {
        self.threshold = phi;
        self
    }

    /// How many heartbeat intervals to remember (default 200).
    #[must_use]
    pub fn with_max_sample_size(mut self, intervals: usize) -> Self {
        self.max_sample_size = intervals;
        self
    }

    /// The floor for the standard deviation of the intervals, so perfectly regular heartbeats
    /// do not make phi jumpy (default 100 ms).
    #[must_use]
    pub fn with_min_std_deviation(mut self, deviation: Duration) -> Self {
        self.min_std_deviation = deviation;
        self
    }

    /// Extra silence tolerated beyond the usual interval: pauses, bursts of load (default 1 s).
    #[must_use]
    pub fn with_acceptable_heartbeat_pause(mut self, pause: Duration) -> Self {
        self.acceptable_heartbeat_pause = pause;
        self
    }

    /// The phi above which a peer is unreachable.
    #[must_use]
    pub fn threshold(&self) -> f64 {
        self.threshold
    }

    /// How many heartbeat intervals are remembered.
    #[must_use]
    pub fn max_sample_size(&self) -> usize {
        self.max_sample_size
    }

    /// The floor for the standard deviation of the intervals.
    #[must_use]
    pub fn min_std_deviation(&self) -> Duration {
        self.min_std_deviation
    }

    /// Extra silence tolerated beyond the usual interval.
    #[must_use]
    pub fn acceptable_heartbeat_pause(&self) -> Duration {
        self.acceptable_heartbeat_pause
    }

    /// The same settings expecting a heartbeat every `interval`.
    pub(super) fn expecting_heartbeats_every(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = interval;
        self
    }

    /// Checks every setting; [`MembershipOptions::validate`](super::MembershipOptions::validate)
    /// calls it at start.
    ///
    /// # Errors
    /// An [`OptionsError`] naming the field (`failure_detector.threshold`, …), the value and
    /// what is allowed.
    pub fn validate(&self) -> Result<(), OptionsError> {
        if !self.threshold.is_finite() || self.threshold <= 0.0 {
            return Err(OptionsError {
                field: "failure_detector.threshold",
                value: self.threshold.to_string(),
                allowed: "a finite number > 0 (8 is typical)",
            });
        }
        if self.max_sample_size == 0 {
            return Err(OptionsError {
                field: "failure_detector.max_sample_size",
                value: "0".to_owned(),
                allowed: "at least 1 interval",
            });
        }
        if self.min_std_deviation.is_zero() {
            return Err(OptionsError {
                field: "failure_detector.min_std_deviation",
                value: format!("{:?}", self.min_std_deviation),
                allowed: "> 0",
            });
        }
        Ok(())
    }
}

/// The failure detector for one monitored peer.
#[derive(Debug, Clone)]
pub(super) struct PhiAccrual {
    settings: FailureDetectorOptions,
    intervals: VecDeque<f64>,
    sum: f64,
    sum_squares: f64,
    last: Instant,
}

impl PhiAccrual {
    /// Start monitoring at `now`, as if a heartbeat had just arrived, so a peer that never
    /// answers is still detected.
    #[must_use]
    pub(super) fn new(settings: FailureDetectorOptions, now: Instant) -> Self {
        let mut detector = Self {
            settings,
            intervals: VecDeque::new(),
            sum: 0.0,
            sum_squares: 0.0,
            last: now,
        };
        // Seed with the expected interval ± a quarter, as Akka does.
        let mean = settings.heartbeat_interval.as_secs_f64() * 1_000.0;
        let std = mean / 4.0;
        detector.record(mean - std);
        detector.record(mean + std);
        detector
    }

    fn record(&mut self, interval_ms: f64) {
        if self.intervals.len() >= self.settings.max_sample_size
            && let Some(old) = self.intervals.pop_front()
        {
            self.sum -= old;
            self.sum_squares -= old * old;
        }
        self.intervals.push_back(interval_ms);
        self.sum += interval_ms;
        self.sum_squares += interval_ms * interval_ms;
    }

    /// A heartbeat arrived at `now`.
    pub(super) fn heartbeat(&mut self, now: Instant) {
        let interval = now.saturating_duration_since(self.last).as_secs_f64() * 1_000.0;
        self.last = now;
        self.record(interval);
    }

    /// The current suspicion level.
    #[must_use]
    pub(super) fn phi(&self, now: Instant) -> f64 {
        let n = self.intervals.len() as f64;
        let mean = self.sum / n;
        let variance = (self.sum_squares / n - mean * mean).max(0.0);
        let min_std = self.settings.min_std_deviation.as_secs_f64() * 1_000.0;
        let std = variance.sqrt().max(min_std);
        let mean = mean + self.settings.acceptable_heartbeat_pause.as_secs_f64() * 1_000.0;
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64() * 1_000.0;
        let y = (elapsed - mean) / std;
        let e = (-y * (1.5976 + 0.070566 * y * y)).exp();
        let p_later = if elapsed > mean {
            e / (1.0 + e)
        } else {
            1.0 - 1.0 / (1.0 + e)
        };
        -p_later.max(f64::MIN_POSITIVE).log10()
    }

    /// Whether the peer counts as reachable at `now`.
    #[must_use]
    pub(super) fn is_available(&self, now: Instant) -> bool {
        self.phi(now) < self.settings.threshold
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn regular_heartbeats_stay_available_and_silence_becomes_unreachable_within_3s() {
        let settings = FailureDetectorOptions::default();
        let start = Instant::now();
        let mut fd = PhiAccrual::new(settings, start);
        let mut now = start;
        for _ in 0..20 {
            now += Duration::from_millis(500);
            fd.heartbeat(now);
            assert!(fd.is_available(now));
        }
        assert!(fd.is_available(now + Duration::from_millis(1_200)));
        let mut silent = Duration::ZERO;
        while fd.is_available(now + silent) {
            silent += Duration::from_millis(10);
        }
        assert!(
            silent <= Duration::from_secs(3),
            "detected after {silent:?}"
        );
        assert!(
            silent >= Duration::from_millis(1_500),
            "detected after {silent:?}"
        );
    }

    #[test]
    fn settings_that_cannot_work_are_refused_naming_the_field_and_what_is_allowed() {
        let defaults = FailureDetectorOptions::default();
        assert_eq!(defaults.validate(), Ok(()));
        let refused = |options: FailureDetectorOptions| options.validate().unwrap_err();
        for phi in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let error = refused(defaults.with_threshold(phi));
            assert_eq!(error.field, "failure_detector.threshold");
            assert_eq!(error.allowed, "a finite number > 0 (8 is typical)");
        }
        assert_eq!(
            refused(defaults.with_max_sample_size(0)).to_string(),
            "failure_detector.max_sample_size must be at least 1 interval, got 0"
        );
        assert_eq!(
            refused(defaults.with_min_std_deviation(Duration::ZERO)).to_string(),
            "failure_detector.min_std_deviation must be > 0, got 0ns"
        );
        let tuned = defaults
            .with_threshold(12.0)
            .with_max_sample_size(1)
            .with_min_std_deviation(Duration::from_millis(1))
            .with_acceptable_heartbeat_pause(Duration::ZERO);
        assert_eq!(tuned.validate(), Ok(()));
        assert_eq!(tuned.threshold(), 12.0);
        assert_eq!(tuned.max_sample_size(), 1);
        assert_eq!(tuned.min_std_deviation(), Duration::from_millis(1));
        assert_eq!(tuned.acceptable_heartbeat_pause(), Duration::ZERO);
    }

    #[test]
    fn a_higher_threshold_tolerates_a_longer_silence() {
        let start = Instant::now();
        let silence_until_unreachable = |settings: FailureDetectorOptions| {
            let fd = PhiAccrual::new(settings, start);
            let mut silent = Duration::ZERO;
            while fd.is_available(start + silent) {
                silent += Duration::from_millis(10);
            }
            silent
        };
        let default = silence_until_unreachable(FailureDetectorOptions::default());
        let lenient =
            silence_until_unreachable(FailureDetectorOptions::default().with_threshold(16.0));
        assert!(lenient > default, "{lenient:?} <= {default:?}");
    }

    proptest! {
        #[test]
        fn phi_never_decreases_while_silent(
            gaps in proptest::collection::vec(300u64..700, 1..50),
            probe in proptest::collection::vec(1u64..500, 2..30),
        ) {
            let start = Instant::now();
            let mut fd = PhiAccrual::new(FailureDetectorOptions::default(), start);
            let mut now = start;
            for gap in gaps {
                now += Duration::from_millis(gap);
                fd.heartbeat(now);
            }
            let mut previous = fd.phi(now);
            prop_assert!(previous.is_finite());
            for step in probe {
                now += Duration::from_millis(step);
                let phi = fd.phi(now);
                prop_assert!(phi >= previous - 1e-9, "phi fell from {previous} to {phi}");
                previous = phi;
            }
        }
    }
}
