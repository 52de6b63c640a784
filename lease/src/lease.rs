//! The [`Lease`] abstraction — at most one holder cluster-wide, arbitrated by a third party that
//! every node reaches — its [`LeaseSettings`] and limits, the [`LeaseProvider`] that makes
//! handles, the one handle every backend shares ([`store::GrantedLease`] over a backend's
//! [`store::LeaseStore`]), grants kept wholly at the backend for a service that holds them for
//! remote clients ([`stored::StoredGrants`]), and an in-memory arbiter for tests and
//! single-node use.
//!
//! Backends for etcd, PostgreSQL and the control plane live in `troupe-coordination`, the
//! Kubernetes Lease in `troupe-kubernetes`; each implements only its store operations, and
//! every one passes the shared conformance suite in `troupe_lease::testing::conformance`
//! (feature `testing`).
//!
//! # Contract
//! - `acquire` resolves to `Some(token)` when this handle holds the lease (also when it already
//!   did), `None` when another owner holds it or when the store's answer came after the grant's
//!   local validity ran out (that grant is released), or an error when the provider cannot be
//!   reached. It never waits for the lease to become free; the caller retries.
//! - `on_lost` (given to `acquire`) is called at most once per grant, from any thread, when the
//!   grant ends without `release`: revoked, taken over after expiry, or renewal failed. It must
//!   not block. After it, `holds()` is false.
//! - `holds()` is a non-blocking local answer: whether this handle currently believes it holds
//!   the lease.
//! - Every grant carries a [`FencingToken`] that increases with each new grant of the lease, so
//!   a resource guarded by the lease can refuse writes from an older holder. Tokens of one
//!   lease name are strictly increasing across holders, for the lifetime of the backend's
//!   store.
//! - `release` by a handle that does not hold the current grant is refused by the backend: it
//!   changes nothing there (the current holder keeps its grant) and resolves `Ok(())`.
//! - While held, the handle renews in the background every [`LeaseSettings::renew_interval`].
//!   When no renewal has been confirmed for `ttl - renew_interval` (measured from when the
//!   last confirmed renewal was *sent*, so the local deadline is always earlier than the
//!   provider's), the handle reports the loss — before the provider would let another owner
//!   in. With `renew_interval <= ttl / 3` at least two renewals are attempted before that.
//! - Dropping every clone of a handle stops its renewal without releasing, as a crash would:
//!   the grant expires `ttl` after its last renewal and another owner can acquire it.
//!
//! # Limits
//! - `ttl` is within [`MIN_LEASE_TTL`] ..= [`MAX_LEASE_TTL`] (1 s to 1 h), `renew_interval` at
//!   least [`MIN_RENEW_INTERVAL`] and at most `ttl / 3`; [`LeaseSettings::new`] refuses anything
//!   else with a [`LeaseSettingsError`] naming the value and the allowed range, so no backend
//!   ever grants an absurd TTL (the control plane answers it with 400 and that message).
//! - Lease names and owners are non-empty, at most [`MAX_NAME_BYTES`] bytes, without control
//!   characters ([`validate_identity`]); handles refuse others with
//!   [`LeaseError::InvalidName`] or [`LeaseError::InvalidOwner`].

mod machine;
mod memory;
pub mod store;
pub mod stored;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

pub use crate::NameProblem;
pub use memory::{InMemoryLease, InMemoryLeaseArbiter, LeaseOp, LeaseRecord};

/// The longest lease name, lease owner, directory actor id or host name accepted, in bytes
/// (UTF-8).
pub const MAX_NAME_BYTES: usize = 512;

/// A monotonically increasing number per grant of one lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(pub u64);

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// A grant that ended without `release`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseLost {
    /// The lease's name.
    pub lease: String,
    /// The owner that lost it.
    pub owner: String,
    /// The token of the lost grant.
    pub token: FencingToken,
    /// What happened.
    pub reason: String,
}

/// Called once when a grant is lost.
pub type LeaseLostCallback = Box<dyn Fn(LeaseLost) + Send + Sync>;

/// The future of a lease operation.
pub type LeaseFuture<T> = Pin<Box<dyn Future<Output = Result<T, LeaseError>> + Send>>;

/// Why a lease operation failed. Each variant has a stable [`code`](LeaseError::code),
/// what the control plane's JSON error bodies carry and its HTTP client maps back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// The provider could not be reached or did not answer in time (`unavailable`):
    /// retrying may succeed.
    #[error("lease {lease:?}: provider unreachable: {reason}")]
    Unavailable {
        /// The lease's name.
        lease: String,
        /// What failed.
        reason: String,
    },
    /// The provider answered with an error (`provider_error`).
    #[error("lease {lease:?}: {reason}")]
    Provider {
        /// The lease's name.
        lease: String,
        /// The provider's answer.
        reason: String,
    },
    /// The provider holds a value for this lease that is not a valid lease record (written by
    /// something else, or corrupted). Nothing was changed (`malformed`).
    #[error("lease {lease:?}: malformed value at the provider: {reason}")]
    Malformed {
        /// The lease's name.
        lease: String,
        /// What was wrong with it.
        reason: String,
    },
    /// Valid [`LeaseSettings`] this provider cannot honour (etcd grants whole seconds, at
    /// least 2 s) (`unsupported_settings`).
    #[error("lease {lease:?}: {reason}")]
    Settings {
        /// The lease's name.
        lease: String,
        /// Which setting and what the provider allows.
        reason: String,
    },
    /// A TTL outside [`MIN_LEASE_TTL`] ..= [`MAX_LEASE_TTL`] (`ttl_out_of_range`): what
    /// [`LeaseSettings::new`] refuses, when the settings came from outside (over HTTP).
    #[error("lease {lease:?}: {reason}")]
    TtlOutOfRange {
        /// The lease's name.
        lease: String,
        /// The value and the allowed range.
        reason: String,
    },
    /// A renew interval [`LeaseSettings::new`] refuses (`renew_interval_out_of_range`).
    #[error("lease {lease:?}: {reason}")]
    RenewIntervalOutOfRange {
        /// The lease's name.
        lease: String,
        /// The value and the allowed range.
        reason: String,
    },
    /// A lease name outside the limits (`name_empty`, `name_too_long`,
    /// `name_control_character`). Bad input: retrying the same request cannot succeed.
    #[error("lease {lease:?}: {reason}")]
    InvalidName {
        /// The lease's name (shortened, when it is too long).
        lease: String,
        /// What is wrong with it.
        problem: NameProblem,
        /// What was wrong and what is allowed.
        reason: String,
    },
    /// An owner outside the limits (`owner_empty`, `owner_too_long`,
    /// `owner_control_character`). Bad input: retrying the same request cannot succeed.
    #[error("lease {lease:?}: {reason}")]
    InvalidOwner {
        /// The lease's name.
        lease: String,
        /// What is wrong with the owner.
        problem: NameProblem,
        /// What was wrong and what is allowed.
        reason: String,
    },
    /// The owner does not hold the grant it names (lost, released, or never granted): acquire
    /// again (`not_owner`).
    #[error("lease {lease:?}: {reason}")]
    NotOwner {
        /// The lease's name.
        lease: String,
        /// Who asked with which token.
        reason: String,
    },
}

/// Every code [`LeaseError::code`] answers, except the name and owner codes (`name_…`,
/// `owner_…` with each [`NameProblem::suffix`]).
pub const LEASE_ERROR_CODES: [&str; 7] = [
    "unavailable",
    "provider_error",
    "malformed",
    "unsupported_settings",
    "ttl_out_of_range",
    "renew_interval_out_of_range",
    "not_owner",
];

impl LeaseError {
    /// The stable machine-readable code of this error (`ttl_out_of_range`,
    /// `owner_too_long`, `not_owner`, `unavailable`, …); see each variant.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unavailable { .. } => "unavailable",
            Self::Provider { .. } => "provider_error",
            Self::Malformed { .. } => "malformed",
            Self::Settings { .. } => "unsupported_settings",
            Self::TtlOutOfRange { .. } => "ttl_out_of_range",
            Self::RenewIntervalOutOfRange { .. } => "renew_interval_out_of_range",
            Self::InvalidName { problem, .. } => match problem {
                NameProblem::Empty => "name_empty",
                NameProblem::TooLong => "name_too_long",
                NameProblem::ControlCharacter => "name_control_character",
            },
            Self::InvalidOwner { problem, .. } => match problem {
                NameProblem::Empty => "owner_empty",
                NameProblem::TooLong => "owner_too_long",
                NameProblem::ControlCharacter => "owner_control_character",
            },
            Self::NotOwner { .. } => "not_owner",
        }
    }

    /// The error of lease `lease` with `code` and `reason` (the text after `lease "name": `),
    /// as the control plane sends them; `None` for a code this version does not know.
    #[must_use]
    pub fn from_code(code: &str, lease: &str, reason: String) -> Option<Self> {
        let lease = lease.to_owned();
        Some(match code {
            "unavailable" => Self::Unavailable { lease, reason },
            "provider_error" => Self::Provider { lease, reason },
            "malformed" => Self::Malformed { lease, reason },
            "unsupported_settings" => Self::Settings { lease, reason },
            "ttl_out_of_range" => Self::TtlOutOfRange { lease, reason },
            "renew_interval_out_of_range" => Self::RenewIntervalOutOfRange { lease, reason },
            "not_owner" => Self::NotOwner { lease, reason },
            _ => {
                if let Some(problem) = NameProblem::from_code("name", code) {
                    Self::InvalidName {
                        lease,
                        problem,
                        reason,
                    }
                } else {
                    Self::InvalidOwner {
                        lease,
                        problem: NameProblem::from_code("owner", code)?,
                        reason,
                    }
                }
            }
        })
    }

    /// The lease's name.
    #[must_use]
    pub fn lease(&self) -> &str {
        match self {
            Self::Unavailable { lease, .. }
            | Self::Provider { lease, .. }
            | Self::Malformed { lease, .. }
            | Self::Settings { lease, .. }
            | Self::TtlOutOfRange { lease, .. }
            | Self::RenewIntervalOutOfRange { lease, .. }
            | Self::InvalidName { lease, .. }
            | Self::InvalidOwner { lease, .. }
            | Self::NotOwner { lease, .. } => lease,
        }
    }

    /// Whether the same request may succeed later (only [`LeaseError::Unavailable`]).
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }

    /// Settings `error` for lease `lease`, as [`LeaseSettings::new`] refused them.
    #[must_use]
    pub fn from_settings(lease: &str, error: &LeaseSettingsError) -> Self {
        let (lease, reason) = (crate::shorten(lease), error.to_string());
        match error {
            LeaseSettingsError::TtlOutOfRange { .. } | LeaseSettingsError::Zero { what: "ttl" } => {
                Self::TtlOutOfRange { lease, reason }
            }
            LeaseSettingsError::Zero { .. }
            | LeaseSettingsError::RenewTooFast { .. }
            | LeaseSettingsError::RenewTooSlow { .. } => {
                Self::RenewIntervalOutOfRange { lease, reason }
            }
        }
    }
}

/// Check a lease's name and owner against the limits: non-empty, at most [`MAX_NAME_BYTES`]
/// bytes, no control characters. Every handle checks them when it is made; the name first.
pub fn validate_identity(name: &str, owner: &str) -> Result<(), LeaseError> {
    validate_lease_name(name)?;
    crate::check_name("lease owner", owner).map_err(|(problem, reason)| LeaseError::InvalidOwner {
        lease: crate::shorten(name),
        problem,
        reason,
    })
}

/// Check a lease's name against the limits (see [`validate_identity`]).
pub fn validate_lease_name(name: &str) -> Result<(), LeaseError> {
    crate::check_name("lease name", name).map_err(|(problem, reason)| LeaseError::InvalidName {
        lease: crate::shorten(name),
        problem,
        reason,
    })
}

/// A lease: at most one holder at a time, cluster-wide.
pub trait Lease: fmt::Debug + Send + Sync + 'static {
    /// The lease's name (one per singleton, typically).
    fn name(&self) -> &str;

    /// The identity this handle acquires as (typically the node's address).
    fn owner(&self) -> &str;

    /// Try to become the holder. See the module header for the contract.
    fn acquire(&self, on_lost: LeaseLostCallback) -> LeaseFuture<Option<FencingToken>>;

    /// Give the lease up (a no-op when not held).
    fn release(&self) -> LeaseFuture<()>;

    /// Whether this handle believes it holds the lease right now. Never blocks.
    fn holds(&self) -> bool;

    /// The token of the current grant, while held.
    fn fencing_token(&self) -> Option<FencingToken>;
}

/// The default time-to-live of a grant.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(15);

/// The default renew interval (a fifth of the default TTL).
pub const DEFAULT_RENEW_INTERVAL: Duration = Duration::from_secs(3);

/// The shortest TTL [`LeaseSettings::new`] accepts.
pub const MIN_LEASE_TTL: Duration = Duration::from_secs(1);

/// The longest TTL [`LeaseSettings::new`] accepts.
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(3600);

/// The shortest renew interval [`LeaseSettings::new`] accepts.
pub const MIN_RENEW_INTERVAL: Duration = Duration::from_millis(50);

/// The smallest ratio `ttl / renew_interval` accepted: renewal must happen at least three
/// times per TTL, so that two renewals can fail (or be slow) before the holder has to report
/// the loss at `ttl - renew_interval`.
pub const MIN_RENEWALS_PER_TTL: u32 = 3;

/// How long a grant lives unrenewed and how often its holder renews it, validated together.
///
/// ```
/// use std::time::Duration;
/// use troupe_lease::lease::LeaseSettings;
///
/// let settings = LeaseSettings::new(Duration::from_secs(15), Duration::from_secs(3)).unwrap();
/// assert_eq!(settings.loss_deadline(), Duration::from_secs(12));
/// let error = LeaseSettings::new(Duration::from_secs(10), Duration::from_secs(5)).unwrap_err();
/// assert!(error.to_string().contains("renew interval 5s"));
/// ```
///
/// Rules: `ttl` within [`MIN_LEASE_TTL`] ..= [`MAX_LEASE_TTL`] (1 s to 1 h), `renew_interval`
/// at least [`MIN_RENEW_INTERVAL`] (50 ms), and `renew_interval * 3 <= ttl`
/// ([`MIN_RENEWALS_PER_TTL`]). A holder reports the loss when no renewal has been confirmed
/// for [`LeaseSettings::loss_deadline`] `= ttl - renew_interval`, which leaves one renew
/// interval between the holder giving up and the earliest moment the provider lets another
/// owner in — the time a singleton gets to stop. Providers may add their own rules (etcd
/// grants whole seconds, at least 2 s); they refuse with [`LeaseError::Settings`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseSettings {
    ttl: Duration,
    renew_interval: Duration,
}

/// Why [`LeaseSettings::new`] refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseSettingsError {
    /// A zero duration.
    #[error("lease {what} must be greater than zero")]
    Zero {
        /// `ttl` or `renew interval`.
        what: &'static str,
    },
    /// A TTL outside [`MIN_LEASE_TTL`] ..= [`MAX_LEASE_TTL`].
    #[error(
        "lease ttl {ttl:?} is outside the allowed range {min:?} to {max:?} (ttl must be at least {min:?} and at most {max:?})"
    )]
    TtlOutOfRange {
        /// The TTL asked for.
        ttl: Duration,
        /// [`MIN_LEASE_TTL`].
        min: Duration,
        /// [`MAX_LEASE_TTL`].
        max: Duration,
    },
    /// A renew interval below [`MIN_RENEW_INTERVAL`].
    #[error("lease renew interval {renew_interval:?} is too short: it must be at least {min:?}")]
    RenewTooFast {
        /// The renew interval asked for.
        renew_interval: Duration,
        /// [`MIN_RENEW_INTERVAL`].
        min: Duration,
    },
    /// Renewal not well inside the TTL.
    #[error(
        "lease renew interval {renew_interval:?} is too long for ttl {ttl:?}: the renew interval must be at most a third of the ttl (renew_interval * 3 <= ttl, here at most {max:?}) so that two renewals can fail before the lease expires"
    )]
    RenewTooSlow {
        /// The TTL asked for.
        ttl: Duration,
        /// The renew interval asked for.
        renew_interval: Duration,
        /// The longest renew interval this TTL allows.
        max: Duration,
    },
}

impl LeaseSettingsError {
    /// The stable code of this refusal: `ttl_out_of_range` (a zero TTL included) or
    /// `renew_interval_out_of_range`, as in [`LeaseError::code`].
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::TtlOutOfRange { .. } | Self::Zero { what: "ttl" } => "ttl_out_of_range",
            _ => "renew_interval_out_of_range",
        }
    }
}

impl Default for LeaseSettings {
    fn default() -> Self {
        Self {
            ttl: DEFAULT_LEASE_TTL,
            renew_interval: DEFAULT_RENEW_INTERVAL,
        }
    }
}

impl LeaseSettings {
    /// Settings with this `ttl` and `renew_interval`; see the type's rules.
    pub fn new(ttl: Duration, renew_interval: Duration) -> Result<Self, LeaseSettingsError> {
        if ttl.is_zero() {
            return Err(LeaseSettingsError::Zero { what: "ttl" });
        }
        if renew_interval.is_zero() {
            return Err(LeaseSettingsError::Zero {
                what: "renew interval",
            });
        }
        if !(MIN_LEASE_TTL..=MAX_LEASE_TTL).contains(&ttl) {
            return Err(LeaseSettingsError::TtlOutOfRange {
                ttl,
                min: MIN_LEASE_TTL,
                max: MAX_LEASE_TTL,
            });
        }
        if renew_interval < MIN_RENEW_INTERVAL {
            return Err(LeaseSettingsError::RenewTooFast {
                renew_interval,
                min: MIN_RENEW_INTERVAL,
            });
        }
        let max = ttl / MIN_RENEWALS_PER_TTL;
        if renew_interval > max {
            return Err(LeaseSettingsError::RenewTooSlow {
                ttl,
                renew_interval,
                max,
            });
        }
        Ok(Self {
            ttl,
            renew_interval,
        })
    }

    /// Settings with this `ttl`, renewed every `ttl / 5`.
    pub fn with_ttl(ttl: Duration) -> Result<Self, LeaseSettingsError> {
        Self::new(ttl, ttl / 5)
    }

    /// How long a grant lives after its last renewal.
    #[must_use]
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How often the holder renews.
    #[must_use]
    pub fn renew_interval(&self) -> Duration {
        self.renew_interval
    }

    /// How long after the last confirmed renewal was sent the holder reports the grant lost:
    /// `ttl - renew_interval`.
    #[must_use]
    pub fn loss_deadline(&self) -> Duration {
        self.ttl - self.renew_interval
    }
}

/// Makes [`Lease`] handles of one backend (one store, one namespace).
pub trait LeaseProvider: fmt::Debug + Send + Sync + 'static {
    /// A handle to lease `name` that acquires as `owner`. Creating it does no I/O; a provider
    /// refuses settings it cannot honour with [`LeaseError::Settings`], and names or owners
    /// outside the limits with [`LeaseError::InvalidName`] or [`LeaseError::InvalidOwner`].
    fn lease(
        &self,
        name: &str,
        owner: &str,
        settings: &LeaseSettings,
    ) -> Result<Arc<dyn Lease>, LeaseError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_refuse_a_renewal_not_well_inside_the_ttl_naming_both_values_and_the_rule() {
        let error =
            LeaseSettings::new(Duration::from_secs(9), Duration::from_millis(3001)).unwrap_err();
        let text = error.to_string();
        assert!(text.contains("9s") && text.contains("3.001s"), "{text}");
        assert!(text.contains("renew_interval * 3 <= ttl"), "{text}");
        assert!(LeaseSettings::new(Duration::from_secs(9), Duration::from_secs(3)).is_ok());
        assert_eq!(
            LeaseSettings::new(Duration::ZERO, Duration::from_secs(1)),
            Err(LeaseSettingsError::Zero { what: "ttl" })
        );
        assert_eq!(
            LeaseSettings::new(Duration::from_secs(1), Duration::ZERO),
            Err(LeaseSettingsError::Zero {
                what: "renew interval"
            })
        );
        let defaults = LeaseSettings::default();
        assert_eq!(
            LeaseSettings::new(defaults.ttl(), defaults.renew_interval()),
            Ok(defaults),
            "the defaults obey the rule"
        );
    }

    #[test]
    fn a_ttl_outside_one_second_to_one_hour_is_refused_naming_the_range() {
        for ttl in [
            Duration::from_millis(999),
            Duration::from_secs(3601),
            Duration::from_millis(u64::MAX),
            Duration::MAX,
        ] {
            let error = LeaseSettings::new(ttl, Duration::from_millis(100)).unwrap_err();
            assert!(
                matches!(error, LeaseSettingsError::TtlOutOfRange { .. }),
                "{ttl:?}: {error}"
            );
            let text = error.to_string();
            assert!(text.contains("1s") && text.contains("3600s"), "{text}");
        }
        assert!(LeaseSettings::new(MIN_LEASE_TTL, Duration::from_millis(300)).is_ok());
        assert!(LeaseSettings::new(MAX_LEASE_TTL, Duration::from_secs(60)).is_ok());
        let error =
            LeaseSettings::new(Duration::from_secs(1), Duration::from_millis(49)).unwrap_err();
        assert!(error.to_string().contains("at least 50ms"), "{error}");
    }

    #[test]
    fn every_error_code_maps_back_to_the_same_variant_and_an_unknown_one_to_none() {
        let mut codes: Vec<String> = LEASE_ERROR_CODES.iter().map(|c| (*c).to_owned()).collect();
        for problem in NameProblem::ALL {
            codes.push(format!("name_{}", problem.suffix()));
            codes.push(format!("owner_{}", problem.suffix()));
        }
        for code in &codes {
            let error = LeaseError::from_code(code, "l", "why".to_owned())
                .unwrap_or_else(|| panic!("{code} is known"));
            assert_eq!(error.code(), code);
            assert_eq!(error.lease(), "l");
            assert_eq!(error.is_retryable(), code == "unavailable");
        }
        for unknown in [
            "",
            "name",
            "owner_",
            "name_long",
            "lease_too_long",
            "conflict",
        ] {
            assert_eq!(
                LeaseError::from_code(unknown, "l", String::new()),
                None,
                "{unknown}"
            );
        }
        let ttl =
            LeaseSettings::new(Duration::from_secs(7200), Duration::from_secs(1)).unwrap_err();
        assert_eq!(ttl.code(), "ttl_out_of_range");
        assert_eq!(
            LeaseError::from_settings("l", &ttl).code(),
            "ttl_out_of_range"
        );
        let zero = LeaseSettings::new(Duration::ZERO, Duration::from_secs(1)).unwrap_err();
        assert_eq!(
            LeaseError::from_settings("l", &zero).code(),
            "ttl_out_of_range"
        );
        let renew = LeaseSettings::new(Duration::from_secs(9), Duration::from_secs(4)).unwrap_err();
        assert_eq!(renew.code(), "renew_interval_out_of_range");
        let error = LeaseError::from_settings("l", &renew);
        assert_eq!(error.code(), renew.code());
        assert_eq!(error.to_string(), format!("lease \"l\": {renew}"));
    }

    #[test]
    fn names_and_owners_are_bounded_and_printable() {
        assert!(validate_identity("scheduler", "node-a:7355").is_ok());
        let long = "x".repeat(MAX_NAME_BYTES + 1);
        let error = validate_identity("scheduler", &long).unwrap_err();
        assert!(
            matches!(
                error,
                LeaseError::InvalidOwner {
                    problem: NameProblem::TooLong,
                    ..
                }
            ),
            "{error}"
        );
        assert_eq!(error.code(), "owner_too_long");
        let text = error.to_string();
        assert!(
            text.contains("lease owner") && text.contains("513 bytes") && text.contains("512"),
            "{text}"
        );
        assert!(
            text.len() < 400,
            "the message does not echo the whole value: {text}"
        );
        assert_eq!(
            validate_identity(&long, "a").unwrap_err().code(),
            "name_too_long"
        );
        assert_eq!(
            validate_identity("", "").unwrap_err().code(),
            "name_empty",
            "name first"
        );
        assert_eq!(
            validate_identity("a", "").unwrap_err().code(),
            "owner_empty"
        );
        assert_eq!(
            validate_identity("a", "b\nc").unwrap_err().code(),
            "owner_control_character"
        );
        assert_eq!(
            validate_identity("a\u{7}", "b").unwrap_err().code(),
            "name_control_character"
        );
        assert!(validate_identity(&"y".repeat(MAX_NAME_BYTES), "a").is_ok());
    }
}
