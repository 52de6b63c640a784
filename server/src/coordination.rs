//! The grant service behind the coordination API: backend leases held for HTTP clients, and
//! the directory they share.
//!
//! # Leases through the server
//! The server holds one backend [`Lease`] handle per grant, keyed by (name, owner); the backend
//! handle renews at the backend on its own. The HTTP client renews through the server; each
//! renewal moves the grant's client deadline to `now + ttl`. When the deadline passes without
//! a renewal the server releases the backend grant, so a client that stops renewing loses the
//! lease one TTL after its last renewal, and the next holder gets a larger fencing token. The
//! client itself gives up `ttl - renew_interval` after its last confirmed renewal was sent,
//! which is earlier.
//!
//! # Serialisation
//! Operations on one (name, owner) take that slot's async lock, so an acquire, a renewal, a
//! release and the expiry task never interleave; different leases and owners run in parallel.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;
use troupe_lease::directory::Directory;
use troupe_lease::lease::{
    FencingToken, Lease, LeaseError, LeaseLost, LeaseProvider, LeaseSettings,
};

/// Why a grant operation failed.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// The backend refused or failed.
    #[error(transparent)]
    Backend(#[from] LeaseError),
    /// The owner does not hold the lease with that token (lost, released or never granted).
    #[error("lease {name:?} is not held by {owner:?} with token {}; acquire it again", token.0)]
    NotHeld {
        /// The lease.
        name: String,
        /// Who asked.
        owner: String,
        /// The token it presented.
        token: FencingToken,
    },
}

/// A grant held through this server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldGrant {
    /// The holder.
    pub owner: String,
    /// The grant's fencing token.
    pub token: FencingToken,
    /// The grant's time to live.
    pub ttl: Duration,
    /// Time left until the server releases the grant unless renewed.
    pub expires_in: Duration,
}

/// The answer to an acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquisition {
    /// The owner holds the lease (newly, or again: the grant was extended).
    Granted(HeldGrant),
    /// Another owner holds it.
    Refused,
}

/// The backends behind the coordination API, and the grants held for HTTP clients.
pub struct Coordination {
    leases: Arc<dyn LeaseProvider>,
    directory: Arc<dyn Directory>,
    backend: &'static str,
    slots: Mutex<HashMap<(String, String), Arc<Slot>>>,
}

impl std::fmt::Debug for Coordination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordination")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

/// One (name, owner): operations on it are serialised by `busy`.
#[derive(Default)]
struct Slot {
    busy: tokio::sync::Mutex<()>,
    grant: Mutex<Option<Grant>>,
}

struct Grant {
    lease: Arc<dyn Lease>,
    token: FencingToken,
    ttl: Duration,
    /// The client's deadline: released at the backend when it passes without a renewal.
    deadline: Instant,
}

impl Coordination {
    /// Serve `leases` and `directory`; `backend` names them in logs and answers.
    #[must_use]
    pub fn new(
        leases: Arc<dyn LeaseProvider>,
        directory: Arc<dyn Directory>,
        backend: &'static str,
    ) -> Self {
        Self {
            leases,
            directory,
            backend,
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// Which backend serves (`etcd`, `postgres`, `in-memory`).
    #[must_use]
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// The directory.
    #[must_use]
    pub fn directory(&self) -> &dyn Directory {
        self.directory.as_ref()
    }

    fn slot(&self, name: &str, owner: &str) -> Arc<Slot> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(
            slots
                .entry((name.to_owned(), owner.to_owned()))
                .or_default(),
        )
    }

    /// Forget the slot when nobody uses it and it holds no grant.
    fn tidy(&self, name: &str, owner: &str) {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let key = (name.to_owned(), owner.to_owned());
        if let Some(slot) = slots.get(&key)
            && Arc::strong_count(slot) == 1
            && slot
                .grant
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_none()
        {
            slots.remove(&key);
        }
    }

    /// Acquires lease `name` for `owner`; acquiring again while holding extends the grant.
    pub async fn acquire(
        self: &Arc<Self>,
        name: &str,
        owner: &str,
        settings: LeaseSettings,
    ) -> Result<Acquisition, GrantError> {
        let slot = self.slot(name, owner);
        let answer = {
            let _busy = slot.busy.lock().await;
            let existing = take_if(&slot, |g| !g.lease.holds());
            if let Some(stale) = existing {
                let _ = stale.lease.release().await;
            }
            let held = {
                let mut grant = slot.grant.lock().unwrap_or_else(|e| e.into_inner());
                grant.as_mut().map(|g| {
                    g.ttl = settings.ttl();
                    g.deadline = Instant::now() + settings.ttl();
                    g.token
                })
            };
            if let Some(token) = held {
                Ok(Acquisition::Granted(fresh(owner, token, settings.ttl())))
            } else {
                let lease = self.leases.lease(name, owner, &settings)?;
                let lost_slot = Arc::downgrade(&slot);
                let on_lost = Box::new(move |lost: LeaseLost| {
                    if let Some(slot) = lost_slot.upgrade() {
                        let _ = take_if(&slot, |g| g.token == lost.token);
                    }
                });
                match lease.acquire(on_lost).await? {
                    Some(token) => {
                        *slot.grant.lock().unwrap_or_else(|e| e.into_inner()) = Some(Grant {
                            lease,
                            token,
                            ttl: settings.ttl(),
                            deadline: Instant::now() + settings.ttl(),
                        });
                        tokio::spawn(Arc::clone(self).expire(
                            name.to_owned(),
                            owner.to_owned(),
                            Arc::downgrade(&slot),
                            token,
                        ));
                        Ok(Acquisition::Granted(fresh(owner, token, settings.ttl())))
                    }
                    None => Ok(Acquisition::Refused),
                }
            }
        };
        drop(slot);
        self.tidy(name, owner);
        answer
    }

    /// Releases grant `token` at the backend once its client deadline passes unrenewed.
    async fn expire(
        self: Arc<Self>,
        name: String,
        owner: String,
        slot: Weak<Slot>,
        token: FencingToken,
    ) {
        loop {
            let Some(strong) = slot.upgrade() else { return };
            let deadline = {
                let grant = strong.grant.lock().unwrap_or_else(|e| e.into_inner());
                match grant.as_ref() {
                    Some(g) if g.token == token => g.deadline,
                    _ => return,
                }
            };
            drop(strong);
            tokio::time::sleep_until(deadline).await;
            let Some(strong) = slot.upgrade() else { return };
            let _busy = strong.busy.lock().await;
            if let Some(gone) = take_if(&strong, |g| {
                g.token == token && Instant::now() >= g.deadline
            }) {
                tracing::info!(lease = %name, %owner, %token, "client stopped renewing; lease released");
                let _ = gone.lease.release().await;
                drop(_busy);
                drop(strong);
                self.tidy(&name, &owner);
                return;
            }
        }
    }

    /// Renews the grant `token` of `owner`: its deadline moves to `now + ttl`.
    pub async fn renew(
        &self,
        name: &str,
        owner: &str,
        token: FencingToken,
    ) -> Result<HeldGrant, GrantError> {
        let slot = self.slot(name, owner);
        let answer = {
            let _busy = slot.busy.lock().await;
            let mut grant = slot.grant.lock().unwrap_or_else(|e| e.into_inner());
            match grant.as_mut() {
                Some(g) if g.token == token && g.lease.holds() => {
                    g.deadline = Instant::now() + g.ttl;
                    Ok(fresh(owner, token, g.ttl))
                }
                _ => Err(GrantError::NotHeld {
                    name: name.to_owned(),
                    owner: owner.to_owned(),
                    token,
                }),
            }
        };
        drop(slot);
        self.tidy(name, owner);
        answer
    }

    /// Releases the grant `token` of `owner`; `false` when it did not hold it.
    pub async fn release(
        &self,
        name: &str,
        owner: &str,
        token: FencingToken,
    ) -> Result<bool, GrantError> {
        let slot = self.slot(name, owner);
        let released = {
            let _busy = slot.busy.lock().await;
            match take_if(&slot, |g| g.token == token) {
                Some(grant) => {
                    grant.lease.release().await?;
                    true
                }
                None => false,
            }
        };
        drop(slot);
        self.tidy(name, owner);
        Ok(released)
    }

    /// The grants of lease `name` held through this server.
    #[must_use]
    pub fn holders(&self, name: &str) -> Vec<HeldGrant> {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        slots
            .iter()
            .filter(|((n, _), _)| n == name)
            .filter_map(|((_, owner), slot)| {
                let grant = slot.grant.lock().unwrap_or_else(|e| e.into_inner());
                grant
                    .as_ref()
                    .filter(|g| g.lease.holds())
                    .map(|g| HeldGrant {
                        owner: owner.clone(),
                        token: g.token,
                        ttl: g.ttl,
                        expires_in: g.deadline.saturating_duration_since(now),
                    })
            })
            .collect()
    }
}

/// A grant just made or renewed: it expires one TTL from now.
fn fresh(owner: &str, token: FencingToken, ttl: Duration) -> HeldGrant {
    HeldGrant {
        owner: owner.to_owned(),
        token,
        ttl,
        expires_in: ttl,
    }
}

fn take_if(slot: &Slot, pred: impl FnOnce(&Grant) -> bool) -> Option<Grant> {
    let mut grant = slot.grant.lock().unwrap_or_else(|e| e.into_inner());
    if grant.as_ref().is_some_and(pred) {
        grant.take()
    } else {
        None
    }
}
