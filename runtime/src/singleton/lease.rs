//! The [`Lease`] abstraction — at most one holder cluster-wide, arbitrated by a third party that
//! every node reaches — and an in-memory arbiter for tests and single-node use.
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
//!   a resource guarded by the lease can refuse writes from an older holder.
//!
//! Implementations for etcd, Kubernetes Lease objects and Postgres follow this contract: renew in
//! the background while held, report loss through the callback before the provider would let
//! another owner in.

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
/// single-node deployments). Grants expire `ttl` after their last renewal; holders renew every
/// `ttl / 3`.
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

    /// A handle to lease `name` that acquires as `owner`.
    #[must_use]
    pub fn lease(&self, name: &str, owner: &str) -> Arc<InMemoryLease> {
        Arc::new(InMemoryLease {
            inner: Arc::new(HandleInner {
                arbiter: self.clone(),
                name: name.to_owned(),
                owner: owner.to_owned(),
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
            let ttl = state.ttl;
            match state.grants.get_mut(name) {
                Some(grant) if grant.owner == owner => {
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
        let ttl = state.ttl;
        match state.grants.get_mut(name) {
            Some(grant) if grant.owner == owner && grant.token == token => {
                grant.expires_at = Instant::now() + ttl;
                Ok(())
            }
            _ => Err("grant is gone".to_owned()),
        }
    }

    fn release(&self, name: &str, owner: &str) -> Result<(), LeaseError> {
        let mut state = self.inner.lock();
        if state.cut_off.contains(owner) {
            state.record(name, owner, LeaseOp::Unreachable);
            return Err(unreachable(name));
        }
        if state.grants.get(name).is_some_and(|g| g.owner == owner)
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

/// One owner's handle to a lease of an [`InMemoryLeaseArbiter`].
pub struct InMemoryLease {
    inner: Arc<HandleInner>,
}

struct HandleInner {
    arbiter: InMemoryLeaseArbiter,
    name: String,
    owner: String,
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
            let granted =
                inner
                    .arbiter
                    .try_acquire(&inner.name, &inner.owner, Arc::new(wrapper))?;
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
            inner.arbiter.release(&inner.name, &inner.owner)?;
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

/// Renew grant `token` every `ttl / 3` until it is released or lost.
async fn renew(handle: Weak<HandleInner>, token: u64, on_lost: Arc<LeaseLostCallback>) {
    loop {
        let Some(inner) = handle.upgrade() else {
            return;
        };
        let period = inner.arbiter.ttl() / 3;
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
