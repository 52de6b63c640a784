//! [`VirtualActorOptions`]: how one node hosts one virtual actor type, validated once when the
//! type starts.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::activation::{DEFAULT_BUFFER_SIZE, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_HOPS, Limits};
use super::placement::{ActivationCountPlacement, PlacementPolicy};
use crate::directory::Directory;

/// The largest per-key buffer accepted.
pub const MAX_BUFFER_SIZE: usize = 100_000;
/// The shortest idle timeout accepted (shorter would passivate between two messages of one burst).
pub const MIN_IDLE_TIMEOUT: Duration = Duration::from_millis(10);
/// The largest `max_hops` accepted.
pub const MAX_HOPS_LIMIT: u8 = 32;

/// How this node hosts one virtual actor type. Every node of the cluster starts the type with
/// the same directory (and should use the same options).
///
/// | option | default | allowed |
/// |---|---|---|
/// | [`with_idle_timeout`](Self::with_idle_timeout) | 120 s | at least 10 ms, or `None`: never passivate |
/// | [`with_placement`](Self::with_placement) | [`ActivationCountPlacement`] | any [`PlacementPolicy`] |
/// | [`with_max_hops`](Self::with_max_hops) | 4 | 1 to 32 |
/// | [`with_buffer_size`](Self::with_buffer_size) | 1000 | 1 to 100000 |
///
/// Rebalancing is off; it has no option yet (its machine is built, its shell is not).
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use troupe::directory::InMemoryDirectory;
/// use troupe::virtual_actor::{PreferLocalPlacement, VirtualActorOptions};
///
/// let options = VirtualActorOptions::new(Arc::new(InMemoryDirectory::new()))
///     .with_idle_timeout(Some(Duration::from_secs(30)))
///     .with_placement(PreferLocalPlacement)
///     .with_max_hops(4);
/// assert!(options.validate().is_ok());
/// ```
#[derive(Clone)]
#[must_use]
pub struct VirtualActorOptions {
    pub(crate) directory: Arc<dyn Directory>,
    pub(crate) placement: Arc<dyn PlacementPolicy>,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) max_hops: u8,
    pub(crate) buffer_size: usize,
}

impl fmt::Debug for VirtualActorOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VirtualActorOptions")
            .field("directory", &self.directory)
            .field("placement", &self.placement)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_hops", &self.max_hops)
            .field("buffer_size", &self.buffer_size)
            .finish()
    }
}

/// An option that cannot work: names the field, the value and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("virtual actor option {field} must be {allowed}, got {value}")]
pub struct OptionsError {
    /// The option.
    pub field: &'static str,
    /// What it was set to.
    pub value: String,
    /// What is allowed.
    pub allowed: &'static str,
}

impl VirtualActorOptions {
    /// The defaults (see the table), claiming activations in `directory`: the same directory
    /// (or backend) on every node. With a lease-backed one (etcd, PostgreSQL) a fenced host's
    /// claims go with it; with [`InMemoryDirectory`](crate::directory::InMemoryDirectory) the
    /// nodes must share one process.
    pub fn new(directory: Arc<dyn Directory>) -> Self {
        Self {
            directory,
            placement: Arc::new(ActivationCountPlacement),
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            max_hops: DEFAULT_MAX_HOPS,
            buffer_size: DEFAULT_BUFFER_SIZE,
        }
    }

    /// Passivate an activation after this long without a message (`None`: never). The next
    /// message activates it again, wherever placement says.
    pub fn with_idle_timeout(mut self, idle_timeout: Option<Duration>) -> Self {
        self.idle_timeout = idle_timeout;
        self
    }

    /// The policy that picks the host of a new activation.
    pub fn with_placement(mut self, placement: impl PlacementPolicy) -> Self {
        self.placement = Arc::new(placement);
        self
    }

    /// How often a message may be forwarded between hosts before it becomes a dead letter
    /// (ends loops of stale routes).
    pub fn with_max_hops(mut self, max_hops: u8) -> Self {
        self.max_hops = max_hops;
        self
    }

    /// How many messages one key may buffer while its activation is looked up, claimed, stopped
    /// or moved; more become dead letters.
    pub fn with_buffer_size(mut self, buffer_size: usize) -> Self {
        self.buffer_size = buffer_size;
        self
    }

    /// Checks every option; the error names the one that cannot work and what is allowed.
    ///
    /// # Errors
    /// [`OptionsError`] for an idle timeout under 10 ms, `max_hops` outside 1..=32, or a buffer
    /// size outside 1..=100000.
    pub fn validate(&self) -> Result<(), OptionsError> {
        if let Some(idle) = self.idle_timeout
            && idle < MIN_IDLE_TIMEOUT
        {
            return Err(OptionsError {
                field: "idle_timeout",
                value: format!("{idle:?}"),
                allowed: "at least 10ms, or None to never passivate",
            });
        }
        if !(1..=MAX_HOPS_LIMIT).contains(&self.max_hops) {
            return Err(OptionsError {
                field: "max_hops",
                value: self.max_hops.to_string(),
                allowed: "from 1 to 32",
            });
        }
        if !(1..=MAX_BUFFER_SIZE).contains(&self.buffer_size) {
            return Err(OptionsError {
                field: "buffer_size",
                value: self.buffer_size.to_string(),
                allowed: "from 1 to 100000",
            });
        }
        Ok(())
    }

    pub(crate) fn limits(&self) -> Limits {
        Limits {
            buffer_size: self.buffer_size,
            idle_timeout: self.idle_timeout,
            max_hops: self.max_hops,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directory::InMemoryDirectory;

    fn options() -> VirtualActorOptions {
        VirtualActorOptions::new(Arc::new(InMemoryDirectory::new()))
    }

    #[test]
    fn the_defaults_are_the_documented_ones() {
        let o = options();
        assert_eq!(o.idle_timeout, Some(Duration::from_secs(120)));
        assert_eq!(o.max_hops, 4);
        assert_eq!(o.buffer_size, 1_000);
        assert!(format!("{:?}", o.placement).contains("ActivationCountPlacement"));
        assert!(o.validate().is_ok());
    }

    #[test]
    fn options_that_cannot_work_are_refused_naming_field_value_and_range() {
        let e = options()
            .with_idle_timeout(Some(Duration::from_millis(1)))
            .validate()
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "virtual actor option idle_timeout must be at least 10ms, or None to never passivate, got 1ms"
        );
        let e = options().with_max_hops(0).validate().unwrap_err();
        assert_eq!(
            e.to_string(),
            "virtual actor option max_hops must be from 1 to 32, got 0"
        );
        assert_eq!(
            options().with_max_hops(33).validate().unwrap_err().field,
            "max_hops"
        );
        let e = options().with_buffer_size(0).validate().unwrap_err();
        assert_eq!(e.field, "buffer_size");
        assert!(options().with_buffer_size(100_001).validate().is_err());
        assert!(options().with_idle_timeout(None).validate().is_ok());
    }
}
