//! Timing settings shared by the Lease and the membership provider, validated together.

use std::fmt;
use std::time::Duration;

/// How long a Lease lives unrenewed and how often its holder renews it.
///
/// - `ttl` becomes the Lease's `spec.leaseDurationSeconds`, so it is a whole number of seconds
///   (at least 1). Default 15 s, as Kubernetes' own leader election.
/// - `renew_interval`: the holder writes `spec.renewTime` this often. Default 5 s.
/// - `max_clock_skew`: how far the holder's clock may be ahead of or behind any other
///   participant's. Others judge expiry by `renewTime + leaseDurationSeconds` against their own
///   wall clock, so the holder gives up locally at `sent + ttl − max_clock_skew`, where `sent` is
///   the (monotonic) moment it sent the last renewal that succeeded. Default 1 s.
///
/// Validation: `renew_interval` must leave room for two attempts before the local deadline,
/// `2 × renew_interval ≤ ttl − max_clock_skew`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KubeTiming {
    /// The Lease's time to live (`leaseDurationSeconds`).
    pub ttl: Duration,
    /// How often the holder renews.
    pub renew_interval: Duration,
    /// The clock skew tolerated between participants.
    pub max_clock_skew: Duration,
}

impl Default for KubeTiming {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(15),
            renew_interval: Duration::from_secs(5),
            max_clock_skew: Duration::from_secs(1),
        }
    }
}

/// A timing that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid Kubernetes lease timing: {0}")]
pub struct TimingError(pub String);

impl KubeTiming {
    /// Check the three values together.
    pub fn validate(&self) -> Result<(), TimingError> {
        let err = |m: String| Err(TimingError(m));
        if self.ttl < Duration::from_secs(1) || self.ttl.subsec_nanos() != 0 {
            return err(format!(
                "ttl {:?} must be a whole number of seconds, at least 1 s (it is the Lease's integer leaseDurationSeconds)",
                self.ttl
            ));
        }
        if self.ttl.as_secs() > i32::MAX as u64 {
            return err(format!(
                "ttl {:?} is too long for leaseDurationSeconds",
                self.ttl
            ));
        }
        if self.renew_interval.is_zero() {
            return err("renew_interval must be greater than zero".to_owned());
        }
        if self.max_clock_skew >= self.ttl {
            return err(format!(
                "max_clock_skew {:?} must be shorter than ttl {:?}",
                self.max_clock_skew, self.ttl
            ));
        }
        let usable = self.ttl - self.max_clock_skew;
        if self.renew_interval * 2 > usable {
            return err(format!(
                "renew_interval {:?} is too long: two renewals must fit in ttl − max_clock_skew = {:?} (allowed: renew_interval ≤ {:?})",
                self.renew_interval,
                usable,
                usable / 2
            ));
        }
        Ok(())
    }

    /// The Lease's `leaseDurationSeconds`.
    #[must_use]
    pub fn lease_duration_seconds(&self) -> i32 {
        i32::try_from(self.ttl.as_secs()).unwrap_or(i32::MAX)
    }

    /// How long after sending a successful renewal the holder still believes it holds.
    #[must_use]
    pub fn local_validity(&self) -> Duration {
        self.ttl.saturating_sub(self.max_clock_skew)
    }
}

impl fmt::Display for KubeTiming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ttl {:?}, renew every {:?}, clock skew ≤ {:?}",
            self.ttl, self.renew_interval, self.max_clock_skew
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_combinations_say_what_is_allowed() {
        KubeTiming::default().validate().unwrap();
        let bad = KubeTiming {
            renew_interval: Duration::from_secs(8),
            ..KubeTiming::default()
        };
        let message = bad.validate().unwrap_err().to_string();
        assert!(message.contains("renew_interval ≤ 7s"), "{message}");
        let fractional = KubeTiming {
            ttl: Duration::from_millis(1500),
            ..KubeTiming::default()
        };
        assert!(
            fractional
                .validate()
                .unwrap_err()
                .to_string()
                .contains("whole number")
        );
        let skew = KubeTiming {
            ttl: Duration::from_secs(1),
            renew_interval: Duration::from_millis(100),
            max_clock_skew: Duration::from_secs(1),
        };
        assert!(
            skew.validate()
                .unwrap_err()
                .to_string()
                .contains("max_clock_skew")
        );
    }
}
