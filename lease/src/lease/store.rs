//! What a lease backend implements — three store operations ([`LeaseStore`]) — and the one
//! [`Lease`] handle over them ([`GrantedLease`]) that every backend shares: the held grant, its
//! background renewal with the conservative local deadline, and the once-only loss report.
//!
//! The timing is the pure machine in `machine.rs` (`step(state, event, now) -> action`); this
//! module is its async shell: it sleeps, sends renewals (each abandoned at the deadline), and
//! reports. A handle reports the loss when no renewal has been confirmed for
//! `ttl − renew_interval` since the last confirmed renewal was *sent*, which is earlier than the
//! store can expire the grant; a store that learns by itself that a grant is gone (a revocation,
//! a takeover) tells the handle through [`GrantEnded`], and the loss is reported at once.
//! `on_lost` is called at most once per grant, never after `release`.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::machine::{self, Action, Event, GrantState, LossCause};
use super::{FencingToken, Lease, LeaseError, LeaseFuture, LeaseLost, LeaseLostCallback};
use super::{LeaseSettings, validate_identity};

/// Why a renewal did not confirm the grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenewError {
    /// The store says the grant is gone (expired, revoked, taken over): lost now.
    Gone(String),
    /// The store could not be asked; the handle retries until its local deadline.
    Failed(String),
}

/// What a lease backend does; [`GrantedLease`] makes a [`Lease`] of it.
pub trait LeaseStore: Send + Sync + 'static {
    /// The backend's data of one grant (an etcd lease id, the last written object, ...).
    type Grant: Send + Sync + 'static;

    /// Refuse `settings` this store cannot honour with [`LeaseError::Settings`], when a handle
    /// is made (etcd grants whole seconds). Every valid [`LeaseSettings`] is fine by default.
    fn check_settings(&self, name: &str, settings: &LeaseSettings) -> Result<(), LeaseError> {
        let _ = (name, settings);
        Ok(())
    }

    /// Try to become the holder; `Ok(None)` when another owner holds the lease. A store that
    /// can learn by itself that the grant ended (revoked, taken over) keeps `ended` and calls
    /// [`GrantEnded::end`] then; others drop it.
    fn try_acquire(
        &self,
        name: &str,
        owner: &str,
        settings: &LeaseSettings,
        ended: GrantEnded,
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

type EndHook = Arc<dyn Fn(String) + Send + Sync>;

/// A store's way to tell the handle that a grant ended at the store (revoked, taken over).
/// Only the first call counts; a call before the handle has recorded the grant is kept and
/// takes effect when it does.
#[derive(Clone, Default)]
pub struct GrantEnded {
    inner: Arc<Mutex<EndedState>>,
}

#[derive(Default)]
struct EndedState {
    reason: Option<String>,
    hook: Option<EndHook>,
}

impl fmt::Debug for GrantEnded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrantEnded")
            .field("reason", &self.inner.lock().reason)
            .finish_non_exhaustive()
    }
}

impl GrantEnded {
    /// The grant ended at the store, for `reason`.
    pub fn end(&self, reason: &str) {
        let hook = {
            let mut state = self.inner.lock();
            if state.reason.is_some() {
                return;
            }
            state.reason = Some(reason.to_owned());
            state.hook.clone()
        };
        if let Some(hook) = hook {
            hook(reason.to_owned());
        }
    }

    fn install(&self, hook: EndHook) {
        let early = {
            let mut state = self.inner.lock();
            match &state.reason {
                Some(reason) => Some(reason.clone()),
                None => {
                    state.hook = Some(Arc::clone(&hook));
                    None
                }
            }
        };
        if let Some(reason) = early {
            hook(reason);
        }
    }
}

/// The [`Lease`] handle of every backend: a [`LeaseStore`] plus the shared grant machine.
pub struct GrantedLease<S: LeaseStore> {
    inner: Arc<Inner<S>>,
}

struct Inner<S: LeaseStore> {
    store: Arc<S>,
    name: String,
    owner: String,
    settings: LeaseSettings,
    loss_deadline: Duration,
    /// Serialises acquire and release of this handle.
    busy: tokio::sync::Mutex<()>,
    held: Mutex<Option<Held<S::Grant>>>,
}

struct Held<G> {
    token: FencingToken,
    grant: Arc<G>,
    machine: GrantState,
    on_lost: Arc<LeaseLostCallback>,
    renewal: Option<tokio::task::AbortHandle>,
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
    /// A handle to lease `name` that acquires as `owner` at `store`. Refuses a name or owner
    /// outside the limits ([`validate_identity`]) with [`LeaseError::InvalidName`] or
    /// [`LeaseError::InvalidOwner`].
    pub fn new(
        store: Arc<S>,
        name: &str,
        owner: &str,
        settings: LeaseSettings,
    ) -> Result<Self, LeaseError> {
        Self::with_loss_deadline(store, name, owner, settings, settings.loss_deadline())
    }

    /// Like [`GrantedLease::new`], but the grant is reported lost `loss_deadline` after the
    /// last confirmed renewal was sent instead of `ttl − renew_interval`: for a store whose
    /// participants judge expiry on their own clocks and which therefore keeps a clock-skew
    /// margin instead (the Kubernetes Lease: `ttl − max_clock_skew`). `loss_deadline` must be
    /// shorter than the TTL.
    pub fn with_loss_deadline(
        store: Arc<S>,
        name: &str,
        owner: &str,
        settings: LeaseSettings,
        loss_deadline: Duration,
    ) -> Result<Self, LeaseError> {
        validate_identity(name, owner)?;
        if loss_deadline.is_zero() || loss_deadline >= settings.ttl() {
            return Err(LeaseError::Settings {
                lease: name.to_owned(),
                reason: format!(
                    "the loss deadline {loss_deadline:?} must be greater than zero and shorter than the ttl {:?}",
                    settings.ttl()
                ),
            });
        }
        Ok(Self {
            inner: Arc::new(Inner {
                store,
                name: name.to_owned(),
                owner: owner.to_owned(),
                settings,
                loss_deadline,
                busy: tokio::sync::Mutex::new(()),
                held: Mutex::new(None),
            }),
        })
    }

    /// The settings this handle acquires and renews with.
    #[must_use]
    pub fn settings(&self) -> LeaseSettings {
        self.inner.settings
    }

    /// The store.
    #[must_use]
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    /// Renew the current grant once, now (what the background renewal does every interval);
    /// for benchmarks and diagnostics. `Ok(false)` when nothing is held, or when the store said
    /// the grant is gone (which is then reported as lost).
    pub async fn renew_now(&self) -> Result<bool, LeaseError> {
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
                inner.advance(token, Event::Confirmed { sent }, "");
                Ok(true)
            }
            Err(RenewError::Gone(reason)) => {
                inner.advance(token, Event::Gone, &format!("renewal refused: {reason}"));
                Ok(false)
            }
            Err(RenewError::Failed(reason)) => Err(LeaseError::Unavailable {
                lease: inner.name.clone(),
                reason,
            }),
        }
    }
}

impl<S: LeaseStore> Inner<S> {
    /// Feed `event` to grant `token`'s machine. A loss is reported here (once: the grant is
    /// taken out under the lock); sleeping and renewing are left to the caller.
    fn advance(&self, token: FencingToken, event: Event, detail: &str) -> Action {
        let now = Instant::now();
        let held = {
            let mut guard = self.held.lock();
            let Some(held) = guard.as_mut().filter(|h| h.token == token) else {
                return Action::Stop;
            };
            match machine::step(&mut held.machine, event, now) {
                Action::ReportLost(cause) => guard.take().map(|held| (held, cause)),
                other => return other,
            }
        };
        if let Some((held, cause)) = held {
            self.report(held, cause, detail);
        }
        Action::Stop
    }

    fn report(&self, held: Held<S::Grant>, cause: LossCause, detail: &str) {
        if let Some(renewal) = &held.renewal {
            renewal.abort();
        }
        let reason = match cause {
            LossCause::Deadline => format!(
                "no renewal confirmed for {:?} (ttl {:?} minus {:?})",
                self.loss_deadline,
                self.settings.ttl(),
                self.settings.ttl() - self.loss_deadline
            ),
            LossCause::Gone if detail.is_empty() => "the store ended the grant".to_owned(),
            LossCause::Gone => detail.to_owned(),
        };
        let token = held.token;
        tracing::warn!(lease = %self.name, owner = %self.owner, %token, %reason, "lease lost");
        (held.on_lost)(LeaseLost {
            lease: self.name.clone(),
            owner: self.owner.clone(),
            token,
            reason,
        });
        // Past the deadline the grant may still live at the store: end it there too (best
        // effort, bounded: the store may be unreachable), so that a successor need not wait for
        // the expiry. A grant the store said is gone is left alone: there is nothing to end.
        if cause != LossCause::Deadline {
            return;
        }
        let store = Arc::clone(&self.store);
        let (name, owner) = (self.name.clone(), self.owner.clone());
        let bound = self.settings.renew_interval();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ =
                    tokio::time::timeout(bound, store.release(&name, &owner, token, &held.grant))
                        .await;
            });
        }
    }

    fn current(&self) -> Option<FencingToken> {
        let held = self.held.lock();
        held.as_ref()
            .filter(|h| h.machine.holds(Instant::now()))
            .map(|h| h.token)
    }
}

/// Renew grant `token` as its machine says until it is released, lost, or the handle dropped.
async fn renew<S: LeaseStore>(
    handle: Weak<Inner<S>>,
    store: Arc<S>,
    token: FencingToken,
    grant: Arc<S::Grant>,
) {
    let (name, owner, settings) = match handle.upgrade() {
        Some(inner) => (inner.name.clone(), inner.owner.clone(), inner.settings),
        None => return,
    };
    let advance = |event: Event, detail: &str| match handle.upgrade() {
        Some(inner) => inner.advance(token, event, detail),
        // Dropped without release: stop renewing, as a crashed process would.
        None => Action::Stop,
    };
    let mut action = advance(Event::Woke, "");
    loop {
        action = match action {
            Action::Stop | Action::ReportLost(_) => return,
            Action::SleepUntil(until) => {
                tokio::time::sleep_until(until).await;
                advance(Event::Woke, "")
            }
            Action::Renew { deadline } => {
                if handle.strong_count() == 0 {
                    return;
                }
                let sent = Instant::now();
                let outcome = tokio::time::timeout_at(
                    deadline,
                    store.renew(&name, &owner, token, &grant, &settings),
                )
                .await;
                match outcome {
                    Ok(Ok(())) => advance(Event::Confirmed { sent }, ""),
                    Ok(Err(RenewError::Gone(reason))) => {
                        advance(Event::Gone, &format!("renewal refused: {reason}"))
                    }
                    Ok(Err(RenewError::Failed(reason))) => {
                        tracing::debug!(lease = %name, %owner, %reason, "lease renewal failed; retrying until the deadline");
                        advance(Event::Failed, "")
                    }
                    Err(_elapsed) => advance(Event::Failed, ""),
                }
            }
        };
    }
}

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
            let past_deadline = {
                let mut held = inner.held.lock();
                match held.as_mut() {
                    Some(h) if h.machine.holds(Instant::now()) => {
                        h.on_lost = on_lost;
                        return Ok(Some(h.token));
                    }
                    Some(h) => Some(h.token),
                    None => None,
                }
            };
            if let Some(token) = past_deadline {
                // The renewal task has not reported it yet; the machine does now.
                inner.advance(token, Event::Woke, "");
            }
            let ended = GrantEnded::default();
            let sent = Instant::now();
            let granted = inner
                .store
                .try_acquire(&inner.name, &inner.owner, &inner.settings, ended.clone())
                .await?;
            let Some((token, grant)) = granted else {
                return Ok(None);
            };
            let grant = Arc::new(grant);
            if Instant::now() >= sent + inner.loss_deadline {
                // Answered after the grant's local validity ran out: the store may already have
                // let another owner in, so this grant counts as not held. End it at the store
                // (best effort, bounded) so a successor need not wait for the expiry.
                tracing::warn!(lease = %inner.name, owner = %inner.owner, %token, "lease granted too late to use; releasing it");
                let store = Arc::clone(&inner.store);
                let (name, owner) = (inner.name.clone(), inner.owner.clone());
                let bound = inner.settings.renew_interval();
                tokio::spawn(async move {
                    let _ =
                        tokio::time::timeout(bound, store.release(&name, &owner, token, &grant))
                            .await;
                });
                return Ok(None);
            }
            let previous = inner.held.lock().replace(Held {
                token,
                grant: Arc::clone(&grant),
                machine: GrantState::with_loss_deadline(inner.settings, inner.loss_deadline, sent),
                on_lost,
                renewal: None,
            });
            if let Some(renewal) = previous.and_then(|p| p.renewal) {
                renewal.abort();
            }
            let renewal = tokio::spawn(renew(
                Arc::downgrade(&inner),
                Arc::clone(&inner.store),
                token,
                grant,
            ));
            match inner.held.lock().as_mut().filter(|h| h.token == token) {
                Some(held) => held.renewal = Some(renewal.abort_handle()),
                None => renewal.abort(),
            }
            let handle = Arc::downgrade(&inner);
            ended.install(Arc::new(move |reason: String| {
                if let Some(inner) = handle.upgrade() {
                    inner.advance(token, Event::Gone, &reason);
                }
            }));
            Ok(Some(token))
        })
    }

    fn release(&self) -> LeaseFuture<()> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let _busy = inner.busy.lock().await;
            let Some(mut held) = inner.held.lock().take() else {
                return Ok(());
            };
            machine::step(&mut held.machine, Event::Released, Instant::now());
            if let Some(renewal) = &held.renewal {
                renewal.abort();
            }
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

/// Declares a public lease handle type of one backend, delegating to [`GrantedLease`]:
/// `lease_handle!(/// docs \n EtcdLease, EtcdLeaseStore);` makes `pub struct EtcdLease` with
/// the [`Lease`] impl and a `renew_now` method.
///
/// `lease_handle!(/// docs \n EtcdLease, EtcdLeaseStore, provided by EtcdLeases => store);`
/// also makes the provider `EtcdLeases` (whose field `store` is an `Arc<EtcdLeaseStore>`) a
/// [`LeaseProvider`](super::LeaseProvider) with a `handle` method answering the concrete type:
/// the bookkeeping every backend's provider would otherwise write again (check the settings
/// with [`LeaseStore::check_settings`], make the shared [`GrantedLease`], wrap it).
#[macro_export]
macro_rules! lease_handle {
    ($(#[$doc:meta])* $name:ident, $store:ty, provided by $provider:ty => $field:ident) => {
        $crate::lease_handle!($(#[$doc])* $name, $store);

        impl $provider {
            /// A handle to lease `name` that acquires as `owner` (what `LeaseProvider::lease`
            /// answers, with its concrete type). Creating it does no I/O; settings the store
            /// cannot honour are refused with `LeaseError::Settings`, names or owners outside
            /// the limits with `LeaseError::InvalidName` or `InvalidOwner`.
            pub fn handle(
                &self,
                name: &str,
                owner: &str,
                settings: &$crate::lease::LeaseSettings,
            ) -> Result<::std::sync::Arc<$name>, $crate::lease::LeaseError> {
                $crate::lease::store::LeaseStore::check_settings(&*self.$field, name, settings)?;
                Ok(::std::sync::Arc::new($name($crate::lease::store::GrantedLease::new(
                    ::std::sync::Arc::clone(&self.$field),
                    name,
                    owner,
                    *settings,
                )?)))
            }
        }

        impl $crate::lease::LeaseProvider for $provider {
            fn lease(
                &self,
                name: &str,
                owner: &str,
                settings: &$crate::lease::LeaseSettings,
            ) -> Result<::std::sync::Arc<dyn $crate::lease::Lease>, $crate::lease::LeaseError> {
                Ok(self.handle(name, owner, settings)?)
            }
        }
    };
    ($(#[$doc:meta])* $name:ident, $store:ty) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name(pub(crate) $crate::lease::store::GrantedLease<$store>);

        impl $name {
            /// Renew the current grant once, now — what the background renewal does every
            /// renew interval (for benchmarks and diagnostics). `Ok(false)` when nothing is
            /// held (or the store said the grant is gone, which is then reported as lost).
            pub async fn renew_now(&self) -> Result<bool, $crate::lease::LeaseError> {
                self.0.renew_now().await
            }
        }

        impl $crate::lease::Lease for $name {
            fn name(&self) -> &str {
                $crate::lease::Lease::name(&self.0)
            }
            fn owner(&self) -> &str {
                $crate::lease::Lease::owner(&self.0)
            }
            fn acquire(
                &self,
                on_lost: $crate::lease::LeaseLostCallback,
            ) -> $crate::lease::LeaseFuture<Option<$crate::lease::FencingToken>> {
                $crate::lease::Lease::acquire(&self.0, on_lost)
            }
            fn release(&self) -> $crate::lease::LeaseFuture<()> {
                $crate::lease::Lease::release(&self.0)
            }
            fn holds(&self) -> bool {
                $crate::lease::Lease::holds(&self.0)
            }
            fn fencing_token(&self) -> Option<$crate::lease::FencingToken> {
                $crate::lease::Lease::fencing_token(&self.0)
            }
        }
    };
}
