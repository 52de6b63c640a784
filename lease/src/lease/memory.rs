//! The in-memory arbiter: a [`LeaseStore`] every node of one process reaches (tests, single-node
//! use), with fault knobs (revoke, cut off, latency) and a history of what happened. Its handles
//! are the shared [`GrantedLease`], so they renew and report losses exactly as every other
//! backend's do.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::store::{GrantEnded, LeaseStore, RenewError};
use super::stored::{StoredGrant, StoredGrants};
use super::{FencingToken, LeaseError, LeaseFuture, LeaseSettings};

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
/// single-node deployments). Handles made by [`InMemoryLeaseArbiter::lease`] use the
/// arbiter's [`LeaseSettings`] (checked by [`LeaseSettings::new`] like every backend's); handles
/// made through [`LeaseProvider::lease`](super::LeaseProvider::lease) or
/// [`InMemoryLeaseArbiter::lease_with`] use their own.
#[derive(Clone)]
pub struct InMemoryLeaseArbiter {
    store: Arc<ArbiterStore>,
}

/// The arbiter's store; shared by every handle.
pub(crate) struct ArbiterStore {
    state: Mutex<ArbiterState>,
}

struct ArbiterState {
    settings: LeaseSettings,
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
    ended: GrantEnded,
}

crate::lease_handle!(
    /// One owner's handle to a lease of an [`InMemoryLeaseArbiter`].
    InMemoryLease,
    ArbiterStore,
    provided by InMemoryLeaseArbiter => store
);

impl fmt::Debug for InMemoryLeaseArbiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.store.state.lock();
        f.debug_struct("InMemoryLeaseArbiter")
            .field("settings", &state.settings)
            .field("grants", &state.grants.len())
            .finish()
    }
}

impl InMemoryLeaseArbiter {
    /// An arbiter whose handles made by [`InMemoryLeaseArbiter::lease`] use `settings`: their
    /// grants expire `settings.ttl()` after their last renewal and are renewed every
    /// `settings.renew_interval()`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use troupe_lease::lease::{InMemoryLeaseArbiter, LeaseSettings};
    ///
    /// let settings = LeaseSettings::new(Duration::from_secs(3), Duration::from_secs(1)).unwrap();
    /// let arbiter = InMemoryLeaseArbiter::new(settings);
    /// assert_eq!(arbiter.settings(), settings);
    /// ```
    #[must_use]
    pub fn new(settings: LeaseSettings) -> Self {
        Self {
            store: Arc::new(ArbiterStore {
                state: Mutex::new(ArbiterState {
                    settings,
                    latency: Duration::ZERO,
                    grants: HashMap::new(),
                    next_token: 1,
                    cut_off: HashSet::new(),
                    history: Vec::new(),
                }),
            }),
        }
    }

    /// Make every acquire and release take `latency` before it reaches the arbiter.
    #[must_use]
    pub fn with_latency(self, latency: Duration) -> Self {
        self.store.state.lock().latency = latency;
        self
    }

    /// The settings of the handles [`InMemoryLeaseArbiter::lease`] makes.
    #[must_use]
    pub fn settings(&self) -> LeaseSettings {
        self.store.state.lock().settings
    }

    /// A handle to lease `name` that acquires as `owner`, with the arbiter's settings.
    ///
    /// # Panics
    /// When the name or owner is outside the limits ([`super::validate_identity`]).
    #[must_use]
    pub fn lease(&self, name: &str, owner: &str) -> Arc<InMemoryLease> {
        let settings = self.settings();
        self.lease_with(name, owner, &settings)
    }

    /// A handle to lease `name` that acquires as `owner` with `settings`.
    ///
    /// # Panics
    /// When the name or owner is outside the limits ([`super::validate_identity`]); use
    /// [`LeaseProvider::lease`](super::LeaseProvider::lease) to get that as an error.
    #[must_use]
    pub fn lease_with(
        &self,
        name: &str,
        owner: &str,
        settings: &LeaseSettings,
    ) -> Arc<InMemoryLease> {
        match self.handle(name, owner, settings) {
            Ok(handle) => handle,
            Err(e) => panic!("{e}"),
        }
    }

    /// The current (unexpired) holder of `name` and its token.
    #[must_use]
    pub fn holder(&self, name: &str) -> Option<(String, FencingToken)> {
        let state = self.store.state.lock();
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
            let mut state = self.store.state.lock();
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
            grant.ended.end("revoked");
        }
    }

    /// From now on every request from `owner` fails, as if its process could no longer reach
    /// the arbiter (or were dead); its grants stop being renewed and expire.
    pub fn cut_off(&self, owner: &str) {
        self.store.state.lock().cut_off.insert(owner.to_owned());
    }

    /// Undo [`InMemoryLeaseArbiter::cut_off`].
    pub fn restore(&self, owner: &str) {
        self.store.state.lock().cut_off.remove(owner);
    }

    /// Everything that happened, in order.
    #[must_use]
    pub fn history(&self) -> Vec<LeaseRecord> {
        self.store.state.lock().history.clone()
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

impl ArbiterStore {
    async fn delay(&self) {
        let latency = self.state.lock().latency;
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
    }

    fn grant(
        &self,
        name: &str,
        owner: &str,
        ttl: Duration,
        ended: GrantEnded,
    ) -> Result<Option<FencingToken>, LeaseError> {
        let now = Instant::now();
        let mut expired = None;
        let result = {
            let mut state = self.state.lock();
            if state.cut_off.contains(owner) {
                state.record(name, owner, LeaseOp::Unreachable);
                return Err(unreachable(name));
            }
            match state.grants.get_mut(name) {
                Some(grant) if grant.owner == owner => {
                    // This owner holds it already (through another handle): the same grant,
                    // extended.
                    grant.ttl = ttl;
                    grant.expires_at = now + ttl;
                    grant.ended = ended;
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
                            ended,
                        },
                    );
                    state.record(name, owner, LeaseOp::Acquired(FencingToken(token)));
                    Some(FencingToken(token))
                }
            }
        };
        if let Some(old) = expired {
            old.ended.end("expired unrenewed; another owner took it");
        }
        Ok(result)
    }
}

impl LeaseStore for ArbiterStore {
    type Grant = ();

    async fn try_acquire(
        &self,
        name: &str,
        owner: &str,
        settings: &LeaseSettings,
        ended: GrantEnded,
    ) -> Result<Option<(FencingToken, ())>, LeaseError> {
        self.delay().await;
        Ok(self
            .grant(name, owner, settings.ttl(), ended)?
            .map(|token| (token, ())))
    }

    async fn renew(
        &self,
        name: &str,
        owner: &str,
        token: FencingToken,
        _grant: &(),
        _settings: &LeaseSettings,
    ) -> Result<(), RenewError> {
        let mut state = self.state.lock();
        if state.cut_off.contains(owner) {
            return Err(RenewError::Failed("arbiter unreachable".to_owned()));
        }
        let now = Instant::now();
        match state.grants.get_mut(name) {
            Some(grant) if grant.owner == owner && grant.token == token.0 => {
                grant.expires_at = now + grant.ttl;
                Ok(())
            }
            _ => Err(RenewError::Gone("the grant is gone".to_owned())),
        }
    }

    async fn release(
        &self,
        name: &str,
        owner: &str,
        token: FencingToken,
        _grant: &(),
    ) -> Result<(), LeaseError> {
        self.delay().await;
        let mut state = self.state.lock();
        if state.cut_off.contains(owner) {
            state.record(name, owner, LeaseOp::Unreachable);
            return Err(unreachable(name));
        }
        if state
            .grants
            .get(name)
            .is_some_and(|g| g.owner == owner && g.token == token.0)
            && let Some(grant) = state.grants.remove(name)
        {
            state.record(name, owner, LeaseOp::Released(FencingToken(grant.token)));
        }
        Ok(())
    }
}

/// The arbiter's grants for a service that holds them for remote clients: expiry by the
/// arbiter's clock, nothing renewed in the background.
impl StoredGrants for InMemoryLeaseArbiter {
    fn acquire(&self, name: &str, owner: &str, ttl: Duration) -> LeaseFuture<Option<StoredGrant>> {
        let store = Arc::clone(&self.store);
        let (name, owner) = (name.to_owned(), owner.to_owned());
        Box::pin(async move {
            store.delay().await;
            Ok(store
                .grant(&name, &owner, ttl, GrantEnded::default())?
                .map(|token| StoredGrant {
                    owner,
                    token,
                    ttl,
                    expires_in: ttl,
                }))
        })
    }

    fn renew(
        &self,
        name: &str,
        owner: &str,
        token: FencingToken,
    ) -> LeaseFuture<Option<StoredGrant>> {
        let store = Arc::clone(&self.store);
        let (name, owner) = (name.to_owned(), owner.to_owned());
        Box::pin(async move {
            let mut state = store.state.lock();
            if state.cut_off.contains(&owner) {
                return Err(unreachable(&name));
            }
            let now = Instant::now();
            Ok(match state.grants.get_mut(&name) {
                Some(grant)
                    if grant.owner == owner && grant.token == token.0 && grant.expires_at > now =>
                {
                    grant.expires_at = now + grant.ttl;
                    Some(StoredGrant {
                        owner,
                        token,
                        ttl: grant.ttl,
                        expires_in: grant.ttl,
                    })
                }
                _ => None,
            })
        })
    }

    fn release(&self, name: &str, owner: &str, token: FencingToken) -> LeaseFuture<bool> {
        let store = Arc::clone(&self.store);
        let (name, owner) = (name.to_owned(), owner.to_owned());
        Box::pin(async move {
            store.delay().await;
            let mut state = store.state.lock();
            if state.cut_off.contains(&owner) {
                state.record(&name, &owner, LeaseOp::Unreachable);
                return Err(unreachable(&name));
            }
            let now = Instant::now();
            let held = state
                .grants
                .get(&name)
                .is_some_and(|g| g.owner == owner && g.token == token.0 && g.expires_at > now);
            if held {
                state.grants.remove(&name);
                state.record(&name, &owner, LeaseOp::Released(token));
            }
            Ok(held)
        })
    }

    fn holder(&self, name: &str) -> LeaseFuture<Option<StoredGrant>> {
        let store = Arc::clone(&self.store);
        let name = name.to_owned();
        Box::pin(async move {
            let state = store.state.lock();
            let now = Instant::now();
            Ok(state
                .grants
                .get(&name)
                .filter(|g| g.expires_at > now)
                .map(|g| StoredGrant {
                    owner: g.owner.clone(),
                    token: FencingToken(g.token),
                    ttl: g.ttl,
                    expires_in: g.expires_at - now,
                }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::{Lease, LeaseLost, LeaseLostCallback};

    fn arbiter() -> InMemoryLeaseArbiter {
        InMemoryLeaseArbiter::new(
            LeaseSettings::new(Duration::from_secs(3), Duration::from_secs(1)).unwrap(),
        )
    }

    fn counter() -> (LeaseLostCallback, Arc<Mutex<Vec<LeaseLost>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        (Box::new(move |lost| sink.lock().push(lost)), seen)
    }

    #[tokio::test(start_paused = true)]
    async fn one_holder_at_a_time_with_increasing_tokens() {
        let arbiter = arbiter();
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
        let arbiter = arbiter();
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
        let arbiter = arbiter();
        let a = arbiter.lease("s", "a");
        let (cb, lost) = counter();
        a.acquire(cb).await.unwrap().unwrap();
        arbiter.revoke("s");
        assert_eq!(lost.lock().len(), 1);
        assert!(!a.holds());

        let (cb, lost) = counter();
        a.acquire(cb).await.unwrap().unwrap();
        arbiter.cut_off("a");
        // Lost at ttl - renew (2 s) after the acquire was sent, the last confirmed send.
        tokio::time::sleep(Duration::from_millis(1990)).await;
        assert!(
            a.holds() && lost.lock().is_empty(),
            "held until the deadline"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(lost.lock().len(), 1, "no renewal confirmed for ttl - renew");
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
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(lost.lock().len(), 1, "the takeover is not a second report");
    }

    #[tokio::test(start_paused = true)]
    async fn a_released_grant_is_not_reported_lost_when_another_owner_takes_the_lease() {
        let arbiter = arbiter();
        let a = arbiter.lease("s", "a");
        let (cb, lost) = counter();
        a.acquire(cb).await.unwrap().unwrap();
        a.release().await.unwrap();
        let b = arbiter.lease("s", "b");
        let (cb, _) = counter();
        b.acquire(cb).await.unwrap().unwrap();
        arbiter.revoke("s");
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(lost.lock().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stored_grant_lives_its_ttl_from_each_renewal_and_then_another_owner_takes_it() {
        let arbiter = arbiter();
        let ttl = Duration::from_secs(3);
        let first = StoredGrants::acquire(&arbiter, "s", "a", ttl)
            .await
            .unwrap()
            .expect("a free lease is granted");
        assert_eq!(
            StoredGrants::acquire(&arbiter, "s", "b", ttl)
                .await
                .unwrap(),
            None
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        let renewed = StoredGrants::renew(&arbiter, "s", "a", first.token)
            .await
            .unwrap()
            .expect("held, so renewed");
        assert_eq!(renewed.expires_in, ttl);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let shown = StoredGrants::holder(&arbiter, "s").await.unwrap().unwrap();
        assert_eq!(
            (shown.token, shown.expires_in),
            (first.token, Duration::from_secs(1))
        );
        assert_eq!(
            StoredGrants::renew(&arbiter, "s", "b", first.token)
                .await
                .unwrap(),
            None,
            "another owner cannot renew it"
        );
        tokio::time::sleep(Duration::from_millis(1001)).await;
        assert_eq!(
            StoredGrants::renew(&arbiter, "s", "a", first.token)
                .await
                .unwrap(),
            None,
            "expired: nothing renews it"
        );
        assert_eq!(StoredGrants::holder(&arbiter, "s").await.unwrap(), None);
        let second = StoredGrants::acquire(&arbiter, "s", "b", ttl)
            .await
            .unwrap()
            .expect("expired, taken over");
        assert!(second.token > first.token);
        assert!(
            !StoredGrants::release(&arbiter, "s", "a", first.token)
                .await
                .unwrap()
        );
        assert!(
            StoredGrants::release(&arbiter, "s", "b", second.token)
                .await
                .unwrap()
        );
        assert_eq!(StoredGrants::holder(&arbiter, "s").await.unwrap(), None);
    }
}
