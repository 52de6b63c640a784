//! The grant service behind the coordination API: leases held at the backend for HTTP
//! clients, and the directory they share.
//!
//! # Leases through the server
//! A grant lives wholly at the backend ([`StoredGrants`]: a row of the PostgreSQL `leases`
//! table with its TTL, a key on an etcd lease, a row of the SQLite store's
//! `coordination_leases` ([`crate::store::SqliteGrants`]), an entry of the in-memory arbiter); this
//! process keeps nothing about it. So any replica serves a renewal or release of a grant
//! another one made, and a replica restart ends no grant. Each renewal makes the grant live
//! its TTL from now, judged by the backend's clock (PostgreSQL's `now()`, etcd's lease TTL),
//! so every replica agrees when it expires: a client that stops renewing loses the lease one
//! TTL after its last renewal, and the next holder gets a larger fencing token. The client
//! itself gives up `ttl - renew_interval` after its last confirmed renewal was sent, which is
//! earlier.
//!
//! # Serialisation
//! The backend orders the operations on one lease (PostgreSQL: one statement, acquire under
//! the name's advisory lock; etcd: transactions on the key); nothing is locked here.

use std::sync::Arc;

use troupe_lease::directory::Directory;
use troupe_lease::lease::stored::{StoredGrant, StoredGrants};
use troupe_lease::lease::{FencingToken, LeaseError, LeaseSettings};

/// The answer to an acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquisition {
    /// The owner holds the lease (newly, or again: the grant was extended).
    Granted(StoredGrant),
    /// Another owner holds it.
    Refused,
}

/// The backends behind the coordination API.
pub struct Coordination {
    grants: Arc<dyn StoredGrants>,
    directory: Arc<dyn Directory>,
    backend: &'static str,
}

impl std::fmt::Debug for Coordination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordination")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

impl Coordination {
    /// Serve `grants` and `directory`; `backend` names them in logs and answers.
    #[must_use]
    pub fn new(
        grants: Arc<dyn StoredGrants>,
        directory: Arc<dyn Directory>,
        backend: &'static str,
    ) -> Self {
        Self {
            grants,
            directory,
            backend,
        }
    }

    /// Which backend serves (`etcd`, `postgres`, `sqlite`, `in-memory`).
    #[must_use]
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// The directory.
    #[must_use]
    pub fn directory(&self) -> &dyn Directory {
        self.directory.as_ref()
    }

    /// Acquires lease `name` for `owner` for `settings.ttl()`; acquiring again while holding
    /// extends the grant (same token). The name and owner must be valid
    /// ([`troupe_lease::lease::validate_identity`]).
    pub async fn acquire(
        &self,
        name: &str,
        owner: &str,
        settings: LeaseSettings,
    ) -> Result<Acquisition, LeaseError> {
        Ok(
            match self.grants.acquire(name, owner, settings.ttl()).await? {
                Some(grant) => Acquisition::Granted(grant),
                None => Acquisition::Refused,
            },
        )
    }

    /// Renews the grant `token` of `owner`: it lives its TTL from now.
    pub async fn renew(
        &self,
        name: &str,
        owner: &str,
        token: FencingToken,
    ) -> Result<StoredGrant, LeaseError> {
        self.grants
            .renew(name, owner, token)
            .await?
            .ok_or_else(|| not_owner(name, owner, token))
    }

    /// Releases the grant `token` of `owner`; `false` when it did not hold it.
    pub async fn release(
        &self,
        name: &str,
        owner: &str,
        token: FencingToken,
    ) -> Result<bool, LeaseError> {
        let released = self.grants.release(name, owner, token).await?;
        if released {
            tracing::debug!(lease = %name, %owner, %token, "lease released");
        }
        Ok(released)
    }

    /// The current grant of lease `name` at the backend, whoever made it.
    pub async fn holder(&self, name: &str) -> Result<Option<StoredGrant>, LeaseError> {
        self.grants.holder(name).await
    }
}

/// `owner` does not hold lease `name` with `token` (lost, released, taken over or never
/// granted): `not_owner`, a 409.
fn not_owner(name: &str, owner: &str, token: FencingToken) -> LeaseError {
    LeaseError::NotOwner {
        lease: name.to_owned(),
        reason: format!(
            "not held by {owner:?} with token {}; acquire it again",
            token.0
        ),
    }
}
