//! The [`Lease`] abstraction — at most one holder cluster-wide, arbitrated by a third party that
//! every node reaches — its [`LeaseSettings`], the [`LeaseProvider`] that makes handles, and an
//! in-memory arbiter for tests and single-node use.
//!
//! Backends for etcd and PostgreSQL live in the `troupe-coordination` crate; every backend
//! passes the shared conformance suite in `troupe::testkit::conformance` (feature `testkit`).
//!
//! # Contract
//! - `acquire` resolves to `Some(token)` when this handle holds the lease (also when it already
//!   did), `None` when another owner holds it, or an error when the provider cannot be reached.
//!   It never waits for the lease to become free; the caller retries.
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

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

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

/// Why a lease operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// The provider could not be reached or did not answer in time.
    #[error("lease {lease:?}: provider unreachable: {reason}")]
    Unavailable {
        /// The lease's name.
        lease: String,
        /// What failed.
        reason: String,
    },
    /// The provider answered with an error.
    #[error("lease {lease:?}: {reason}")]
    Provider {
        /// The lease's name.
        lease: String,
        /// The provider's answer.
        reason: String,
    },
    /// The provider holds a value for this lease that is not a valid lease record (written by
    /// something else, or corrupted). Nothing was changed.
    #[error("lease {lease:?}: malformed value at the provider: {reason}")]
    Malformed {
        /// The lease's name.
        lease: String,
        /// What was wrong with it.
        reason: String,
    },
    /// The settings cannot be used with this provider.
    #[error("lease {lease:?}: {reason}")]
    Settings {
        /// The lease's name.
        lease: String,
        /// Which setting and what the provider allows.
        reason: String,
    },
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

/// The smallest ratio `ttl / renew_interval` accepted: renewal must happen at least three
/// times per TTL, so that two renewals can fail (or be slow) before the holder has to report
/// the loss at `ttl - renew_interval`.
pub const MIN_RENEWALS_PER_TTL: u32 = 3;

/// How long a grant lives unrenewed and how often its holder renews it, validated together.
///
/// ```
/// use std::time::Duration;
/// use troupe::lease::LeaseSettings;
///
/// let settings = LeaseSettings::new(Duration::from_secs(15), Duration::from_secs(3)).unwrap();
/// assert_eq!(settings.loss_deadline(), Duration::from_secs(12));
/// let error = LeaseSettings::new(Duration::from_secs(10), Duration::from_secs(5)).unwrap_err();
/// assert!(error.to_string().contains("renew interval 5s"));
/// ```
///
/// Rules: `ttl > 0`, `renew_interval > 0`, and `renew_interval * 3 <= ttl`
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
    /// refuses settings it cannot honour with [`LeaseError::Settings`], and names it cannot
    /// store with [`LeaseError::Provider`].
    fn lease(
        &self,
        name: &str,
        owner: &str,
        settings: &LeaseSettings,
    ) -> Result<Arc<dyn Lease>, LeaseError>;
}

/// What happened at the arbiter, for tests that check the order of lease operations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseOp {
    /// The owner got the lease.
    Acquired(FencingToken),
    /// The owner asked while `holder` held it.
    Denied {
        /// The holder at the time.
        holder: String,
    },
    /// The owner released its grant.
    Released(FencingToken),
    /// The grant was revoked by [`InMemoryLeaseArbiter::revoke`].
    Revoked(FencingToken),
    /// The grant expired unrenewed and another owner took the lease.
    Expired(FencingToken),
    /// A request from a cut-off owner failed.
    Unreachable,
}

/// One line of the arbiter's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRecord {
    /// When it happened.
    pub at: Instant,
    /// The lease.
    pub lease: String,
    /// The owner that asked (or lost).
    pub owner: String,
    /// What happened.
    pub op: LeaseOp,
}

/// A third party that arbitrates leases in memory: every node in the process reaches it (tests,
/// single-node deployments). Grants of handles made by [`InMemoryLeaseArbiter::lease`] expire
/// `ttl` after their last renewal and are renewed every `ttl / 3`; handles made through
/// [`LeaseProvider::lease`] use their own [`LeaseSettings`].
#[derive(Clone)]
pub struct InMemoryLeaseArbiter {
    inner: Arc<Mutex<ArbiterState>>,
}

struct ArbiterState {
    ttl: Duration,
    latency: Duration,
    grants: HashMap<String, Grant>,
    next_token: u64,
    cut_off: HashSet<String>,
    history: Vec<LeaseRecord>,
}

struct Grant {
    owner: String,
    token: u64,
    ttl: Duration,
    expires_at: Instant,
    on_lost: Arc<LeaseLostCallback>,
}

impl fmt::Debug for InMemoryLeaseArbiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.inner.lock();
        f.debug_struct("InMemoryLeaseArbiter")
            .field("ttl", &state.ttl)
            .field("grants", &state.grants.len())
            .finish()
    }
}

impl InMemoryLeaseArbiter {
    /// An arbiter whose grants expire `ttl` after their last renewal.
    #[must_use]
    pub fn new(ttl: Duration) -> Self {
        Self {
            inner: Arc::new(Mutex::new(ArbiterState {
                ttl,
                latency: Duration::ZERO,
                grants: HashMap::new(),
                next_token: 1,
                cut_off: HashSet::new(),
                history: Vec::new(),
            })),
        }
    }

    /// Make every acquire and release take `latency` before it reaches the arbiter.
    #[must_use]
    pub fn with_latency(self, latency: Duration) -> Self {
        self.inner.lock().latency = latency;
        self
    }

    /// A handle to lease `name` that acquires as `owner`, with the arbiter's TTL renewed every
    /// `ttl / 3`.
    #[must_use]
    pub fn lease(&self, name: &str, owner: &str) -> Arc<InMemoryLease> {
        let ttl = self.ttl();
        self.handle(name, owner, ttl, ttl / 3)
    }

    /// A handle to lease `name` that acquires as `owner` with `settings`.
    #[must_use]
    pub fn lease_with(
        &self,
        name: &str,
        owner: &str,
        settings: &LeaseSettings,
    ) -> Arc<InMemoryLease> {
        self.handle(name, owner, settings.ttl(), settings.renew_interval())
    }

    fn handle(
        &self,
        name: &str,
        owner: &str,
        ttl: Duration,
        renew_interval: Duration,
    ) -> Arc<InMemoryLease> {
        Arc::new(InMemoryLease {
            inner: Arc::new(HandleInner {
                arbiter: self.clone(),
                name: name.to_owned(),
                owner: owner.to_owned(),
                ttl,
                renew_interval,
                held: Mutex::new(None),
            }),
        })
    }

    /// The current (unexpired) holder of `name` and its token.
    #[must_use]
    pub fn holder(&self, name: &str) -> Option<(String, FencingToken)> {
        let state = self.inner.lock();
        let now = Instant::now();
        state
            .grants
            .get(name)
            .filter(|g| g.expires_at > now)
            .map(|g| (g.owner.clone(), FencingToken(g.token)))
    }

    /// Take `name` away from its holder, which is told through its loss callback.
    pub fn revoke(&self, name: &str) {
        let lost = {
            let mut state = self.inner.lock();
            let grant = state.grants.remove(name);
            if let Some(grant) = &grant {
                state.record(
                    name,
                    &grant.owner,
                    LeaseOp::Revoked(FencingToken(grant.token)),
                );
            }
            grant
        };
        if let Some(grant) = lost {
            (grant.on_lost)(LeaseLost {
                lease: name.to_owned(),
                owner: grant.owner,
                token: FencingToken(grant.token),
                reason: "revoked".to_owned(),
            });
        }
    }

    /// From now on every request from `owner` fails, as if its process could no longer reach
    /// the arbiter (or were dead); its grants stop being renewed and expire.
    pub fn cut_off(&self, owner: &str) {
        self.inner.lock().cut_off.insert(owner.to_owned());
    }

    /// Undo [`InMemoryLeaseArbiter::cut_off`].
    pub fn restore(&self, owner: &str) {
        self.inner.lock().cut_off.remove(owner);
    }

    /// Everything that happened, in order.
    #[must_use]
    pub fn history(&self) -> Vec<LeaseRecord> {
        self.inner.lock().history.clone()
    }

    fn latency(&self) -> Duration {
        self.inner.lock().latency
    }

    fn ttl(&self) -> Duration {
        self.inner.lock().ttl
    }

    fn try_acquire(
        &self,
        name: &str,
        owner: &str,
        ttl: Duration,
        on_lost: Arc<LeaseLostCallback>,
    ) -> Result<Option<FencingToken>, LeaseError> {
        let now = Instant::now();
        let mut expired = None;
        let result = {
            let mut state = self.inner.lock();
            if state.cut_off.contains(owner) {
                state.record(name, owner, LeaseOp::Unreachable);
                return Err(unreachable(name));
            }
            match state.grants.get_mut(name) {
                Some(grant) if grant.owner == owner => {
                    grant.ttl = ttl;
                    grant.expires_at = now + ttl;
                    grant.on_lost = on_lost;
                    Some(FencingToken(grant.token))
                }
                Some(grant) if grant.expires_at > now => {
                    let holder = grant.owner.clone();
                    state.record(name, owner, LeaseOp::Denied { holder });
                    None
                }
                _ => {
                    if let Some(old) = state.grants.remove(name) {
                        state.record(name, &old.owner, LeaseOp::Expired(FencingToken(old.token)));
                        expired = Some(old);
                    }
                    let token = state.next_token;
                    state.next_token += 1;
                    state.grants.insert(
                        name.to_owned(),
                        Grant {
                            owner: owner.to_owned(),
                            token,
                            ttl,
                            expires_at: now + ttl,
                            on_lost,
                        },
                    );
                    state.record(name, owner, LeaseOp::Acquired(FencingToken(token)));
                    Some(FencingToken(token))
                }
            }
        };
        if let Some(old) = expired {
            (old.on_lost)(LeaseLost {
                lease: name.to_owned(),
                owner: old.owner,
                token: FencingToken(old.token),
                reason: "expired unrenewed; another owner took it".to_owned(),
            });
        }
        Ok(result)
    }

    fn renew(&self, name: &str, owner: &str, token: u64) -> Result<(), String> {
        let mut state = self.inner.lock();
        if state.cut_off.contains(owner) {
            return Err("arbiter unreachable".to_owned());
        }
        let now = Instant::now();
        match state.grants.get_mut(name) {
            Some(grant) if grant.owner == owner && grant.token == token => {
                grant.expires_at = now + grant.ttl;
                Ok(())
            }
            _ => Err("grant is gone".to_owned()),
        }
    }

    fn release(&self, name: &str, owner: &str, token: Option<u64>) -> Result<(), LeaseError> {
        let mut state = self.inner.lock();
        if state.cut_off.contains(owner) {
            state.record(name, owner, LeaseOp::Unreachable);
            return Err(unreachable(name));
        }
        let Some(token) = token else {
            return Ok(());
        };
        if state
            .grants
            .get(name)
            .is_some_and(|g| g.owner == owner && g.token == token)
            && let Some(grant) = state.grants.remove(name)
        {
            state.record(name, owner, LeaseOp::Released(FencingToken(grant.token)));
        }
        Ok(())
    }
}

impl ArbiterState {
    fn record(&mut self, lease: &str, owner: &str, op: LeaseOp) {
        self.history.push(LeaseRecord {
            at: Instant::now(),
            lease: lease.to_owned(),
            owner: owner.to_owned(),
            op,
        });
    }
}

fn unreachable(name: &str) -> LeaseError {
    LeaseError::Unavailable {
        lease: name.to_owned(),
        reason: "the arbiter cannot be reached from this owner".to_owned(),
    }
}

impl LeaseProvider for InMemoryLeaseArbiter {
    fn lease(
        &self,
        name: &str,
        owner: &str,
        settings: &LeaseSettings,
    ) -> Result<Arc<dyn Lease>, LeaseError> {
        Ok(self.lease_with(name, owner, settings))
    }
}

/// One owner's handle to a lease of an [`InMemoryLeaseArbiter`].
pub struct InMemoryLease {
    inner: Arc<HandleInner>,
}

struct HandleInner {
    arbiter: InMemoryLeaseArbiter,
    name: String,
    owner: String,
    ttl: Duration,
    renew_interval: Duration,
    held: Mutex<Option<HeldGrant>>,
}

struct HeldGrant {
    token: u64,
    renewal: tokio::task::AbortHandle,
}

impl fmt::Debug for InMemoryLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InMemoryLease")
            .field("name", &self.inner.name)
            .field("owner", &self.inner.owner)
            .field("token", &self.fencing_token())
            .finish()
    }
}

impl HandleInner {
    /// The grant `token` ended: forget it (if it is still the current one) and tell the user.
    fn lost(&self, token: u64) -> bool {
        let mut held = self.held.lock();
        if held.as_ref().is_some_and(|h| h.token == token) {
            if let Some(h) = held.take() {
                h.renewal.abort();
            }
            true
        } else {
            false
        }
    }
}

impl Lease for InMemoryLease {
    fn name(&self) -> &str {
        &self.inner.name
    }

    fn owner(&self) -> &str {
        &self.inner.owner
    }

    fn acquire(&self, on_lost: LeaseLostCallback) -> LeaseFuture<Option<FencingToken>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let latency = inner.arbiter.latency();
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            let handle: Weak<HandleInner> = Arc::downgrade(&inner);
            let on_lost: Arc<LeaseLostCallback> = Arc::new(on_lost);
            let user = Arc::clone(&on_lost);
            // The arbiter calls this; it tells the user only if the grant was still current.
            let wrapper: LeaseLostCallback = Box::new(move |lost: LeaseLost| {
                if handle.upgrade().is_some_and(|h| h.lost(lost.token.0)) {
                    user(lost);
                }
            });
            // Hold the handle's lock across the grant: a revocation racing this acquire then
            // finds the grant recorded here and is reported, never lost in between.
            let mut held = inner.held.lock();
            let granted = inner.arbiter.try_acquire(
                &inner.name,
                &inner.owner,
                inner.ttl,
                Arc::new(wrapper),
            )?;
            if let Some(token) = granted {
                if held.as_ref().is_none_or(|h| h.token != token.0) {
                    if let Some(old) = held.take() {
                        old.renewal.abort();
                    }
                    let renewal = tokio::spawn(renew(Arc::downgrade(&inner), token.0, on_lost));
                    *held = Some(HeldGrant {
                        token: token.0,
                        renewal: renewal.abort_handle(),
                    });
                }
            }
            drop(held);
            Ok(granted)
        })
    }

    fn release(&self) -> LeaseFuture<()> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let latency = inner.arbiter.latency();
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            let token = inner.held.lock().as_ref().map(|h| h.token);
            inner.arbiter.release(&inner.name, &inner.owner, token)?;
            if let Some(held) = inner.held.lock().take() {
                held.renewal.abort();
            }
            Ok(())
        })
    }

    fn holds(&self) -> bool {
        self.inner.held.lock().is_some()
    }

    fn fencing_token(&self) -> Option<FencingToken> {
        self.inner
            .held
            .lock()
            .as_ref()
            .map(|h| FencingToken(h.token))
    }
}

/// Renew grant `token` every renew interval until it is released or lost.
async fn renew(handle: Weak<HandleInner>, token: u64, on_lost: Arc<LeaseLostCallback>) {
    loop {
        let Some(inner) = handle.upgrade() else {
            return;
        };
        let period = inner.renew_interval;
        drop(inner);
        tokio::time::sleep(period).await;
        let Some(inner) = handle.upgrade() else {
            return;
        };
        if let Err(reason) = inner.arbiter.renew(&inner.name, &inner.owner, token) {
            if inner.lost(token) {
                on_lost(LeaseLost {
                    lease: inner.name.clone(),
                    owner: inner.owner.clone(),
                    token: FencingToken(token),
                    reason: format!("renewal failed: {reason}"),
                });
            }
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter() -> (LeaseLostCallback, Arc<Mutex<Vec<LeaseLost>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        (Box::new(move |lost| sink.lock().push(lost)), seen)
    }

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

    #[tokio::test(start_paused = true)]
    async fn one_holder_at_a_time_with_increasing_tokens() {
        let arbiter = InMemoryLeaseArbiter::new(Duration::from_secs(3));
        let a = arbiter.lease("s", "a");
        let b = arbiter.lease("s", "b");
        let (cb, _) = counter();
        let t1 = a.acquire(cb).await.unwrap().expect("free lease is granted");
        let (cb, _) = counter();
        assert_eq!(b.acquire(cb).await.unwrap(), None, "held by a");
        assert!(a.holds() && !b.holds());
        a.release().await.unwrap();
        assert!(!a.holds());
        let (cb, _) = counter();
        let t2 = b
            .acquire(cb)
            .await
            .unwrap()
            .expect("released lease is granted");
        assert!(t2 > t1, "{t2} after {t1}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_holder_renews_and_keeps_the_lease_past_its_ttl() {
        let arbiter = InMemoryLeaseArbiter::new(Duration::from_secs(3));
        let a = arbiter.lease("s", "a");
        let (cb, lost) = counter();
        a.acquire(cb).await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(a.holds());
        assert!(lost.lock().is_empty());
        assert_eq!(arbiter.holder("s").map(|(o, _)| o), Some("a".to_owned()));
    }

    #[tokio::test(start_paused = true)]
    async fn revocation_and_cut_off_are_reported_once_through_the_callback() {
        let arbiter = InMemoryLeaseArbiter::new(Duration::from_secs(3));
        let a = arbiter.lease("s", "a");
        let (cb, lost) = counter();
        a.acquire(cb).await.unwrap().unwrap();
        arbiter.revoke("s");
        assert_eq!(lost.lock().len(), 1);
        assert!(!a.holds());

        let (cb, lost) = counter();
        a.acquire(cb).await.unwrap().unwrap();
        arbiter.cut_off("a");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(lost.lock().len(), 1, "renewal failed");
        assert!(!a.holds());
        let b = arbiter.lease("s", "b");
        let (cb, _) = counter();
        assert_eq!(b.acquire(cb).await.unwrap(), None, "not expired yet");
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (cb, _) = counter();
        assert!(
            b.acquire(cb).await.unwrap().is_some(),
            "expired, taken over"
        );
    }
}
