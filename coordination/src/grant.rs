//! The part every remote lease backend shares: one handle's grant, its background renewal with
//! a conservative local deadline, and the once-only loss report.
//!
//! A backend supplies three operations ([`LeaseStore`]); this module turns them into a
//! [`Lease`] that keeps the contract in `troupe::lease`: the holder reports the loss when no
//! renewal has been confirmed for `ttl - renew_interval` since the last confirmed renewal was
//! *sent*, which is earlier than the store can expire the grant.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio::time::Instant;
use troupe::lease::{
    FencingToken, Lease, LeaseError, LeaseFuture, LeaseLost, LeaseLostCallback, LeaseSettings,
};

/// Why a renewal did not confirm the grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RenewError {
    /// The store says the grant is gone (expired, revoked, taken over): lost now.
    Gone(String),
    /// The store could not be asked; retry until the local deadline.
    Failed(String),
}

/// What a backend does for a [`GrantedLease`].
pub(crate) trait LeaseStore: Send + Sync + 'static {
    /// The backend's data of one grant (an etcd lease id, ...).
    type Grant: Send + Sync + 'static;

    /// Try to become the holder; `Ok(None)` when another owner holds the lease.
    fn try_acquire(
        &self,
        name: &str,
        owner: &str,
        settings: &LeaseSettings,
    ) -> impl Future<Output = Result<Option<(FencingToken, Self::Grant)>, LeaseError>> + Send;

    /// Extend the grant by the TTL.
    fn renew(
        &self,
        name: &str,
        owner: &str,
        token: FencingToken,
        grant: &Self::Grant,
        settings: &LeaseSettings,
    ) -> impl Future<Output = Result<(), RenewError>> + Send;

    /// End the grant (only this grant; never another holder's).
    fn release(
        &self,
        name: &str,
        owner: &str,
        token: FencingToken,
        grant: &Self::Grant,
    ) -> impl Future<Output = Result<(), LeaseError>> + Send;
}

/// A [`Lease`] handle over a [`LeaseStore`].
pub(crate) struct GrantedLease<S: LeaseStore> {
    inner: Arc<Inner<S>>,
}

struct Inner<S: LeaseStore> {
    store: Arc<S>,
    name: String,
    owner: String,
    settings: LeaseSettings,
    /// Serialises acquire and release of this handle.
    busy: tokio::sync::Mutex<()>,
    held: Mutex<Option<Held<S::Grant>>>,
}

struct Held<G> {
    token: FencingToken,
    grant: Arc<G>,
    /// When the holder gives up unless a renewal is confirmed first.
    deadline: Instant,
    on_lost: Arc<LeaseLostCallback>,
    renewal: tokio::task::AbortHandle,
}

impl<S: LeaseStore> fmt::Debug for GrantedLease<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("name", &self.inner.name)
            .field("owner", &self.inner.owner)
            .field("settings", &self.inner.settings)
            .field("token", &self.fencing_token())
            .finish()
    }
}

impl<S: LeaseStore> GrantedLease<S> {
    pub(crate) fn new(store: Arc<S>, name: &str, owner: &str, settings: LeaseSettings) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                name: name.to_owned(),
                owner: owner.to_owned(),
                settings,
                busy: tokio::sync::Mutex::new(()),
                held: Mutex::new(None),
            }),
        }
    }
}

impl<S: LeaseStore> Inner<S> {
    /// The grant `token` ended without release: forget it and tell the user, once.
    fn lost(&self, token: FencingToken, reason: String) {
        let held = {
            let mut held = self.held.lock();
            if held.as_ref().is_some_and(|h| h.token == token) {
                held.take()
            } else {
                None
            }
        };
        let Some(held) = held else { return };
        held.renewal.abort();
        tracing::warn!(lease = %self.name, owner = %self.owner, %token, %reason, "lease lost");
        (held.on_lost)(LeaseLost {
            lease: self.name.clone(),
            owner: self.owner.clone(),
            token,
            reason,
        });
        // Best effort: end the grant at the store too, so that a successor need not wait for
        // the expiry when the store is still reachable. Bounded: the store may be unreachable.
        let store = Arc::clone(&self.store);
        let (name, owner) = (self.name.clone(), self.owner.clone());
        let bound = self.settings.renew_interval();
        tokio::spawn(async move {
            let _ =
                tokio::time::timeout(bound, store.release(&name, &owner, token, &held.grant)).await;
        });
    }

    fn current(&self) -> Option<FencingToken> {
        let held = self.held.lock();
        held.as_ref()
            .filter(|h| Instant::now() < h.deadline)
            .map(|h| h.token)
    }
}

/// The renewal protocol of one grant as a pure state machine: what to do next, given what
/// happened and the time. The async shell ([`renew`]) sleeps, sends and reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Renewal {
    settings: LeaseSettings,
    /// The holder gives up at this instant unless a renewal is confirmed first.
    deadline: Instant,
    /// When the next renewal is due.
    next: Instant,
    lost: bool,
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RenewalEvent {
    /// A timer fired.
    Woke,
    /// A renewal sent at `sent` was confirmed.
    Confirmed {
        /// When it was sent.
        sent: Instant,
    },
    /// The store says the grant is gone.
    Refused,
    /// A renewal failed without an answer about the grant.
    Failed,
}

/// What to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RenewalAction {
    /// Send a renewal now, abandoning it at the deadline.
    Renew {
        /// The deadline.
        deadline: Instant,
    },
    /// Sleep until then.
    Sleep(Instant),
    /// The grant is lost: report it (once) and stop.
    Lost(LossCause),
}

/// Why the grant is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LossCause {
    /// No renewal confirmed before the local deadline.
    Deadline,
    /// The store refused the renewal.
    Refused,
}

impl Renewal {
    /// A grant whose acquire was sent at `sent`.
    pub(crate) fn new(settings: LeaseSettings, sent: Instant) -> Self {
        Self {
            settings,
            deadline: sent + settings.loss_deadline(),
            next: sent + settings.renew_interval(),
            lost: false,
        }
    }

    /// The local deadline.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Advance by `event` at `now`.
    pub(crate) fn step(&mut self, event: RenewalEvent, now: Instant) -> RenewalAction {
        if self.lost {
            return RenewalAction::Lost(LossCause::Deadline);
        }
        match event {
            RenewalEvent::Refused => {
                self.lost = true;
                return RenewalAction::Lost(LossCause::Refused);
            }
            RenewalEvent::Confirmed { sent } => {
                // A renewal sent at `sent` extends the grant to at least sent + ttl at the
                // store; give up one renew interval before that.
                self.deadline = self.deadline.max(sent + self.settings.loss_deadline());
                self.next = sent + self.settings.renew_interval();
            }
            RenewalEvent::Failed => {
                // Retry sooner than a full interval: the deadline is closing in.
                self.next = now + self.settings.renew_interval() / 4;
            }
            RenewalEvent::Woke => {}
        }
        if now >= self.deadline {
            self.lost = true;
            return RenewalAction::Lost(LossCause::Deadline);
        }
        if now >= self.next {
            return RenewalAction::Renew {
                deadline: self.deadline,
            };
        }
        RenewalAction::Sleep(self.next.min(self.deadline))
    }
}

/// Renew every renew interval until released, lost, or the handle is dropped.
async fn renew<S: LeaseStore>(
    handle: Weak<Inner<S>>,
    store: Arc<S>,
    token: FencingToken,
    grant: Arc<S::Grant>,
    mut state: Renewal,
) {
    let (name, owner, settings) = match handle.upgrade() {
        Some(inner) => (inner.name.clone(), inner.owner.clone(), inner.settings),
        None => return,
    };
    let mut action = state.step(RenewalEvent::Woke, Instant::now());
    loop {
        match action {
            RenewalAction::Sleep(until) => {
                tokio::time::sleep_until(until).await;
                action = state.step(RenewalEvent::Woke, Instant::now());
            }
            RenewalAction::Lost(cause) => {
                if let Some(inner) = handle.upgrade() {
                    let reason = match cause {
                        LossCause::Deadline => format!(
                            "no renewal confirmed for {:?} (ttl {:?} minus renew interval {:?})",
                            settings.loss_deadline(),
                            settings.ttl(),
                            settings.renew_interval()
                        ),
                        LossCause::Refused => "the store refused the renewal".to_owned(),
                    };
                    inner.lost(token, reason);
                }
                return;
            }
            RenewalAction::Renew { deadline } => {
                if handle.strong_count() == 0 {
                    // Dropped without release: stop renewing, as a crashed process would.
                    return;
                }
                let sent = Instant::now();
                let outcome = tokio::time::timeout_at(
                    deadline,
                    store.renew(&name, &owner, token, &grant, &settings),
                )
                .await;
                let event = match outcome {
                    Ok(Ok(())) => RenewalEvent::Confirmed { sent },
                    Ok(Err(RenewError::Gone(reason))) => {
                        tracing::warn!(lease = %name, %owner, %token, %reason, "lease renewal refused");
                        RenewalEvent::Refused
                    }
                    Ok(Err(RenewError::Failed(reason))) => {
                        tracing::debug!(lease = %name, %owner, %reason, "lease renewal failed; retrying until the deadline");
                        RenewalEvent::Failed
                    }
                    Err(_elapsed) => RenewalEvent::Failed,
                };
                action = state.step(event, Instant::now());
                if let RenewalEvent::Confirmed { .. } = event {
                    let Some(inner) = handle.upgrade() else {
                        return;
                    };
                    let mut held = inner.held.lock();
                    match held.as_mut() {
                        Some(h) if h.token == token => h.deadline = state.deadline(),
                        _ => return,
                    }
                }
            }
        }
    }
}

impl<S: LeaseStore> GrantedLease<S> {
    /// Renew the current grant once, now (what the background renewal does every interval);
    /// for benchmarks and diagnostics. `Ok(false)` when nothing is held.
    pub(crate) async fn renew_now(&self) -> Result<bool, LeaseError> {
        let inner = &self.inner;
        let Some((token, grant)) = inner
            .held
            .lock()
            .as_ref()
            .map(|h| (h.token, Arc::clone(&h.grant)))
        else {
            return Ok(false);
        };
        let sent = Instant::now();
        match inner
            .store
            .renew(&inner.name, &inner.owner, token, &grant, &inner.settings)
            .await
        {
            Ok(()) => {
                if let Some(h) = inner.held.lock().as_mut().filter(|h| h.token == token) {
                    h.deadline = h.deadline.max(sent + inner.settings.loss_deadline());
                }
                Ok(true)
            }
            Err(RenewError::Gone(reason)) => {
                inner.lost(token, format!("renewal refused: {reason}"));
                Ok(false)
            }
            Err(RenewError::Failed(reason)) => Err(LeaseError::Unavailable {
                lease: inner.name.clone(),
                reason,
            }),
        }
    }
}

/// A public lease handle type of one backend, delegating to [`GrantedLease`].
macro_rules! lease_handle {
    ($(#[$doc:meta])* $name:ident, $store:ty) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name(pub(crate) $crate::grant::GrantedLease<$store>);

        impl $name {
            /// Renew the current grant once, now — what the background renewal does every
            /// renew interval (for benchmarks and diagnostics). `Ok(false)` when nothing is
            /// held (or the store said the grant is gone, which is then reported as lost).
            pub async fn renew_now(&self) -> Result<bool, troupe::lease::LeaseError> {
                self.0.renew_now().await
            }
        }

        impl troupe::lease::Lease for $name {
            fn name(&self) -> &str {
                self.0.name()
            }
            fn owner(&self) -> &str {
                self.0.owner()
            }
            fn acquire(
                &self,
                on_lost: troupe::lease::LeaseLostCallback,
            ) -> troupe::lease::LeaseFuture<Option<troupe::lease::FencingToken>> {
                self.0.acquire(on_lost)
            }
            fn release(&self) -> troupe::lease::LeaseFuture<()> {
                self.0.release()
            }
            fn holds(&self) -> bool {
                self.0.holds()
            }
            fn fencing_token(&self) -> Option<troupe::lease::FencingToken> {
                self.0.fencing_token()
            }
        }
    };
}
pub(crate) use lease_handle;

impl<S: LeaseStore> Lease for GrantedLease<S> {
    fn name(&self) -> &str {
        &self.inner.name
    }

    fn owner(&self) -> &str {
        &self.inner.owner
    }

    fn acquire(&self, on_lost: LeaseLostCallback) -> LeaseFuture<Option<FencingToken>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let _busy = inner.busy.lock().await;
            let on_lost = Arc::new(on_lost);
            let expired = {
                let mut held = inner.held.lock();
                match held.as_mut() {
                    Some(h) if Instant::now() < h.deadline => {
                        h.on_lost = on_lost;
                        return Ok(Some(h.token));
                    }
                    Some(h) => Some(h.token),
                    None => None,
                }
            };
            if let Some(token) = expired {
                // The renewal task has not reported it yet; the grant is past its deadline.
                inner.lost(
                    token,
                    "no renewal confirmed before the local deadline".to_owned(),
                );
            }
            let sent = Instant::now();
            let granted = inner
                .store
                .try_acquire(&inner.name, &inner.owner, &inner.settings)
                .await?;
            let Some((token, grant)) = granted else {
                return Ok(None);
            };
            let grant = Arc::new(grant);
            let state = Renewal::new(inner.settings, sent);
            let deadline = state.deadline();
            let renewal = tokio::spawn(renew(
                Arc::downgrade(&inner),
                Arc::clone(&inner.store),
                token,
                Arc::clone(&grant),
                state,
            ));
            let previous = inner.held.lock().replace(Held {
                token,
                grant,
                deadline,
                on_lost,
                renewal: renewal.abort_handle(),
            });
            if let Some(previous) = previous {
                previous.renewal.abort();
            }
            Ok(Some(token))
        })
    }

    fn release(&self) -> LeaseFuture<()> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let _busy = inner.busy.lock().await;
            let Some(held) = inner.held.lock().take() else {
                return Ok(());
            };
            held.renewal.abort();
            inner
                .store
                .release(&inner.name, &inner.owner, held.token, &held.grant)
                .await
        })
    }

    fn holds(&self) -> bool {
        self.inner.current().is_some()
    }

    fn fencing_token(&self) -> Option<FencingToken> {
        self.inner.current()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;

    fn settings() -> LeaseSettings {
        LeaseSettings::new(Duration::from_millis(3000), Duration::from_millis(1000)).unwrap()
    }

    /// (milliseconds later, event kind, for Confirmed: how long before `now` it was sent)
    fn events() -> impl Strategy<Value = Vec<(u64, u8, u64)>> {
        prop::collection::vec((0u64..1500, 0u8..4, 0u64..1500), 1..60)
    }

    proptest! {
        /// The loss is reported no later than the last confirmed send plus `ttl - renew`,
        /// never before it unless the store refused, and once lost it stays lost; a sleep
        /// never passes the deadline.
        #[test]
        fn the_loss_is_reported_by_the_local_deadline_and_not_before(steps in events()) {
            let start = Instant::now();
            let s = settings();
            let mut state = Renewal::new(s, start);
            let mut now = start;
            let mut last_confirmed = start;
            let mut lost = false;
            for (later, kind, age) in steps {
                now += Duration::from_millis(later);
                let event = match kind {
                    0 => RenewalEvent::Woke,
                    1 => {
                        let sent = now.checked_sub(Duration::from_millis(age)).unwrap_or(start).max(start);
                        last_confirmed = last_confirmed.max(sent);
                        RenewalEvent::Confirmed { sent }
                    }
                    2 => RenewalEvent::Failed,
                    _ => RenewalEvent::Refused,
                };
                let action = state.step(event, now);
                let deadline = last_confirmed + s.loss_deadline();
                match action {
                    RenewalAction::Lost(cause) => {
                        if !lost && cause == LossCause::Deadline {
                            prop_assert!(now >= deadline, "lost early");
                        }
                        lost = true;
                    }
                    other => {
                        prop_assert!(!lost, "recovered after a loss: {other:?}");
                        prop_assert!(now < deadline, "not lost at {:?} past the deadline", now - deadline);
                        if let RenewalAction::Sleep(until) = other {
                            prop_assert!(until <= deadline);
                            prop_assert!(until > now);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn renewals_fall_due_every_interval_and_two_can_fail_before_the_deadline() {
        let start = Instant::now();
        let s = settings();
        let mut state = Renewal::new(s, start);
        assert_eq!(
            state.step(RenewalEvent::Woke, start),
            RenewalAction::Sleep(start + s.renew_interval())
        );
        let first = start + s.renew_interval();
        assert!(matches!(
            state.step(RenewalEvent::Woke, first),
            RenewalAction::Renew { .. }
        ));
        // It fails; a retry falls due a quarter interval later, still before the deadline.
        assert_eq!(
            state.step(RenewalEvent::Failed, first),
            RenewalAction::Sleep(first + s.renew_interval() / 4)
        );
        let second = first + s.renew_interval() / 4;
        assert!(matches!(
            state.step(RenewalEvent::Woke, second),
            RenewalAction::Renew { .. }
        ));
        assert_eq!(
            state.step(RenewalEvent::Failed, second),
            RenewalAction::Sleep(second + s.renew_interval() / 4)
        );
        // The deadline: ttl - renew after the acquire was sent.
        assert_eq!(
            state.step(RenewalEvent::Woke, start + s.loss_deadline()),
            RenewalAction::Lost(LossCause::Deadline)
        );
    }
}
