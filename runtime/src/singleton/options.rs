//! [`StartSingletonOptions`]: how a node takes part in hosting a singleton, validated once when
//! the singleton starts.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::actor::Actor;
use crate::lease::Lease;
use crate::props::Props;

/// The default retry interval after a failed lease acquire.
pub const DEFAULT_ACQUIRE_RETRY_INTERVAL: Duration = Duration::from_secs(5);

/// The default time a new host waits for its peers to step down.
pub const DEFAULT_HAND_OVER_TIMEOUT: Duration = Duration::from_secs(10);

/// The default number of messages a proxy buffers while no node hosts.
pub const DEFAULT_BUFFER_SIZE: usize = 1_000;

/// The largest proxy buffer accepted.
pub const MAX_BUFFER_SIZE: usize = 100_000;

/// How to run a singleton on this node: the actor to spawn when this node hosts, and the
/// settings the manager reacts to.
///
/// ```
/// use std::time::Duration;
/// use troupe::singleton::StartSingletonOptions;
/// # use troupe::{Actor, ActorError, Context, Props};
/// # #[derive(Default)] struct JobScheduler;
/// # impl Actor for JobScheduler { type Msg = (); async fn handle(&mut self, _: (), _: &mut Context<Self>) -> Result<(), ActorError> { Ok(()) } }
///
/// let options = StartSingletonOptions::new(Props::new(JobScheduler::default))
///     .with_role("control-plane")
///     .with_acquire_retry_interval(Duration::from_secs(5))
///     .with_hand_over_timeout(Duration::from_secs(10));
/// assert!(options.validate().is_ok());
/// ```
#[must_use]
pub struct StartSingletonOptions<A: Actor> {
    pub(crate) props: Props<A>,
    pub(crate) role: Option<String>,
    pub(crate) lease: Option<Arc<dyn Lease>>,
    pub(crate) acquire_retry_interval: Duration,
    pub(crate) hand_over_timeout: Duration,
    pub(crate) restart_on_termination: bool,
    pub(crate) buffer_size: usize,
}

impl<A: Actor> fmt::Debug for StartSingletonOptions<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StartSingletonOptions")
            .field("props", &self.props)
            .field("role", &self.role)
            .field("lease", &self.lease)
            .field("acquire_retry_interval", &self.acquire_retry_interval)
            .field("hand_over_timeout", &self.hand_over_timeout)
            .field("restart_on_termination", &self.restart_on_termination)
            .field("buffer_size", &self.buffer_size)
            .finish()
    }
}

/// A start option that cannot work: names the field, the value and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} must be {allowed}, got {value}")]
pub struct OptionsError {
    /// The option.
    pub field: &'static str,
    /// What it was set to.
    pub value: String,
    /// What is allowed.
    pub allowed: &'static str,
}

fn millis(duration: Duration) -> String {
    if duration.subsec_nanos() % 1_000_000 == 0 {
        format!("{}ms", duration.as_millis())
    } else {
        format!("{duration:?}")
    }
}

impl<A: Actor> StartSingletonOptions<A> {
    /// Spawn instances from `props` when this node hosts; every other setting at its default.
    pub fn new(props: Props<A>) -> Self {
        Self {
            props,
            role: None,
            lease: None,
            acquire_retry_interval: DEFAULT_ACQUIRE_RETRY_INTERVAL,
            hand_over_timeout: DEFAULT_HAND_OVER_TIMEOUT,
            restart_on_termination: true,
            buffer_size: DEFAULT_BUFFER_SIZE,
        }
    }

    /// Host only on members carrying `role` (overrides the key's role on this node).
    pub fn with_role(mut self, role: impl Into<String>) -> Self {
        self.role = Some(role.into());
        self
    }

    /// Acquire `lease` before spawning; the lease arbitrates when views disagree (split brain).
    pub fn with_lease(mut self, lease: Arc<dyn Lease>) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Retry a failed lease acquire after `interval` (default 5 s; must be > 0 — there is no
    /// "never retry").
    pub fn with_acquire_retry_interval(mut self, interval: Duration) -> Self {
        self.acquire_retry_interval = interval;
        self
    }

    /// Wait at most `timeout` for every eligible peer to acknowledge a hand-over before hosting
    /// anyway (default 10 s; must be > 0).
    pub fn with_hand_over_timeout(mut self, timeout: Duration) -> Self {
        self.hand_over_timeout = timeout;
        self
    }

    /// Spawn the instance again after it died unexpectedly (default true). Turn it off only for
    /// actors whose `stop_self` means "done for good": this node then leaves the rotation until
    /// its manager is stopped and started again.
    pub fn with_restart_on_termination(mut self, restart: bool) -> Self {
        self.restart_on_termination = restart;
        self
    }

    /// How many messages the proxy returned by `start` buffers while no node hosts (default
    /// 1000; at most 100 000; 0 sends them to dead letters at once).
    pub fn with_buffer_size(mut self, size: usize) -> Self {
        self.buffer_size = size;
        self
    }

    /// Check every setting; `start` calls this and fails with the first error.
    pub fn validate(&self) -> Result<(), OptionsError> {
        if self.acquire_retry_interval.is_zero() {
            return Err(OptionsError {
                field: "acquire_retry_interval",
                value: millis(self.acquire_retry_interval),
                allowed: "> 0 (0 does not disable retries; there is no such switch)",
            });
        }
        if self.hand_over_timeout.is_zero() {
            return Err(OptionsError {
                field: "hand_over_timeout",
                value: millis(self.hand_over_timeout),
                allowed: "> 0",
            });
        }
        if self.buffer_size > MAX_BUFFER_SIZE {
            return Err(OptionsError {
                field: "buffer_size",
                value: self.buffer_size.to_string(),
                allowed: "at most 100000",
            });
        }
        if let Some(role) = &self.role
            && role.trim().is_empty()
        {
            return Err(OptionsError {
                field: "role",
                value: format!("{role:?}"),
                allowed: "a non-empty role name (or no role)",
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ActorError, Context};

    struct Noop;

    impl Actor for Noop {
        type Msg = ();

        async fn handle(&mut self, _: (), _: &mut Context<Self>) -> Result<(), ActorError> {
            Ok(())
        }
    }

    fn options() -> StartSingletonOptions<Noop> {
        StartSingletonOptions::new(Props::new(|| Noop))
    }

    #[test]
    fn defaults_are_5s_retry_10s_hand_over_restart_on_and_1000_buffered() {
        let o = options();
        assert_eq!(o.acquire_retry_interval, Duration::from_secs(5));
        assert_eq!(o.hand_over_timeout, Duration::from_secs(10));
        assert!(o.restart_on_termination);
        assert_eq!(o.buffer_size, 1_000);
        assert!(o.validate().is_ok());
    }

    #[test]
    fn a_zero_retry_interval_is_rejected_naming_field_value_and_what_is_allowed() {
        let err = options()
            .with_acquire_retry_interval(Duration::ZERO)
            .validate()
            .unwrap_err();
        assert_eq!(err.field, "acquire_retry_interval");
        assert_eq!(err.value, "0ms");
        assert!(
            err.to_string()
                .starts_with("acquire_retry_interval must be > 0"),
            "{err}"
        );
        assert!(err.to_string().contains("got 0ms"), "{err}");
    }

    #[test]
    fn other_invalid_values_are_rejected_too() {
        let err = options()
            .with_hand_over_timeout(Duration::ZERO)
            .validate()
            .unwrap_err();
        assert_eq!(err.field, "hand_over_timeout");
        let err = options()
            .with_buffer_size(1_000_000)
            .validate()
            .unwrap_err();
        assert_eq!(err.field, "buffer_size");
        assert_eq!(err.value, "1000000");
        let err = options().with_role(" ").validate().unwrap_err();
        assert_eq!(err.field, "role");
    }
}
