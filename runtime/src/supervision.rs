//! Supervision: what happens to an actor that fails, decided by a pure restart-budget step.
//!
//! # Directives
//! - **Restart** (the default): the children are stopped, `post_stop` runs on the failed
//!   instance, a fresh instance is built from the [`crate::Props`] factory and `pre_start` runs.
//!   The mailbox is kept; the message that failed is not retried.
//! - **Stop**: the actor stops as if told to (`post_stop` runs, queued messages go to dead
//!   letters, watchers get `Terminated`).
//! - **Escalate**: the actor stops and its parent fails with [`crate::Failure::Escalated`], which
//!   the parent's own strategy then resolves.
//!
//! # Restart budget
//! Restarts are limited to `max_restarts` within a sliding `within` window. The failure that
//! would exceed the budget stops the actor instead: a crash loop ends in a stop, not a hot loop.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// What to do with an actor that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Directive {
    /// Replace the instance with a fresh one from the factory.
    Restart,
    /// Stop the actor.
    Stop,
    /// Stop the actor and fail its parent.
    Escalate,
}

/// The supervision policy of one actor, chosen by whoever spawns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SupervisorStrategy {
    directive: Directive,
    max_restarts: u32,
    within: Duration,
}

impl Default for SupervisorStrategy {
    /// Restart, at most 10 times within 60 seconds.
    fn default() -> Self {
        Self::restart()
    }
}

impl SupervisorStrategy {
    /// Restart on failure, at most 10 times within 60 seconds (then stop).
    #[must_use]
    pub fn restart() -> Self {
        Self {
            directive: Directive::Restart,
            max_restarts: 10,
            within: Duration::from_secs(60),
        }
    }

    /// Stop on the first failure.
    #[must_use]
    pub fn stop() -> Self {
        Self {
            directive: Directive::Stop,
            ..Self::restart()
        }
    }

    /// Stop and fail the parent on the first failure.
    #[must_use]
    pub fn escalate() -> Self {
        Self {
            directive: Directive::Escalate,
            ..Self::restart()
        }
    }

    /// Allow at most `max_restarts` restarts within `within`; the next failure stops the actor.
    #[must_use]
    pub fn with_restart_budget(mut self, max_restarts: u32, within: Duration) -> Self {
        self.max_restarts = max_restarts;
        self.within = within;
        self
    }

    /// The directive applied to a failure while budget remains.
    #[must_use]
    pub fn directive(&self) -> Directive {
        self.directive
    }
}

/// The restarts an actor has used inside the current window.
#[derive(Debug, Clone, Default)]
pub struct RestartHistory {
    restarts: VecDeque<Instant>,
}

impl RestartHistory {
    /// Restarts counted in the window as of the last step.
    #[must_use]
    pub fn len(&self) -> usize {
        self.restarts.len()
    }

    /// Whether no restart is counted.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.restarts.is_empty()
    }
}

/// Decide what a failure at `now` leads to, and record a restart if it is one.
///
/// Pure apart from the history it updates: no clock is read, so it is tested without time.
#[must_use]
pub fn decide(
    strategy: &SupervisorStrategy,
    history: &mut RestartHistory,
    now: Instant,
) -> Directive {
    match strategy.directive {
        Directive::Stop => Directive::Stop,
        Directive::Escalate => Directive::Escalate,
        Directive::Restart => {
            while let Some(&oldest) = history.restarts.front() {
                if now.saturating_duration_since(oldest) >= strategy.within {
                    history.restarts.pop_front();
                } else {
                    break;
                }
            }
            if history.restarts.len() < strategy.max_restarts as usize {
                history.restarts.push_back(now);
                Directive::Restart
            } else {
                Directive::Stop
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn budget_exhaustion_stops_instead_of_restarting() {
        let strategy =
            SupervisorStrategy::restart().with_restart_budget(2, Duration::from_secs(10));
        let mut history = RestartHistory::default();
        let t0 = Instant::now();
        assert_eq!(decide(&strategy, &mut history, t0), Directive::Restart);
        assert_eq!(
            decide(&strategy, &mut history, t0 + Duration::from_secs(1)),
            Directive::Restart
        );
        assert_eq!(
            decide(&strategy, &mut history, t0 + Duration::from_secs(2)),
            Directive::Stop
        );
    }

    #[test]
    fn restarts_outside_the_window_no_longer_count() {
        let strategy =
            SupervisorStrategy::restart().with_restart_budget(1, Duration::from_secs(10));
        let mut history = RestartHistory::default();
        let t0 = Instant::now();
        assert_eq!(decide(&strategy, &mut history, t0), Directive::Restart);
        assert_eq!(
            decide(&strategy, &mut history, t0 + Duration::from_secs(10)),
            Directive::Restart
        );
    }

    proptest! {
        #[test]
        fn never_more_than_max_restarts_inside_any_window(
            max in 0u32..6,
            gaps in proptest::collection::vec(0u64..4_000, 1..60),
        ) {
            let within = Duration::from_secs(5);
            let strategy = SupervisorStrategy::restart().with_restart_budget(max, within);
            let mut history = RestartHistory::default();
            let mut now = Instant::now();
            let mut granted: Vec<Instant> = Vec::new();
            for gap in gaps {
                now += Duration::from_millis(gap);
                if decide(&strategy, &mut history, now) == Directive::Restart {
                    granted.push(now);
                }
                let in_window = granted.iter().filter(|t| now.duration_since(**t) < within).count();
                prop_assert!(in_window <= max as usize);
            }
        }
    }
}
