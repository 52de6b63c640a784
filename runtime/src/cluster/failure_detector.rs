//! The phi accrual failure detector: how suspicious the silence of a peer is, on a continuous
//! scale, from the history of its heartbeat intervals.
//!
//! `phi = -log10(P(a heartbeat arrives later than now))` under a normal distribution of
//! intervals whose mean is widened by the acceptable pause. A phi above the threshold makes the
//! observer call the peer unreachable. Pure: every call takes the current instant.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// Settings of the failure detector.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FailureDetectorOptions {
    /// The phi above which a peer is unreachable.
    pub threshold: f64,
    /// How many intervals to remember.
    pub max_sample_size: usize,
    /// The floor for the standard deviation, so perfectly regular heartbeats don't make phi jumpy.
    pub min_std_deviation: Duration,
    /// Extra silence tolerated beyond the usual interval (pauses, bursts of load).
    pub acceptable_heartbeat_pause: Duration,
    /// The expected heartbeat interval, used to seed the history.
    pub heartbeat_interval: Duration,
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
