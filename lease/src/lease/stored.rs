//! Grants whose whole state lives at the backend ([`StoredGrants`]): for a service that holds
//! leases for remote clients (the control plane's coordination API), so that any replica of it
//! can renew or release a grant another replica made, and a restart of the service ends none.
//!
//! Unlike a [`Lease`](super::Lease) handle, nothing renews in the background: a grant lives
//! for its TTL after it was made or last renewed, judged by the backend's clock (PostgreSQL's
//! `now()`, etcd's lease TTL, the in-memory arbiter's clock), and then another owner may take
//! it with a larger [`FencingToken`]. The grants share the backend's lease names and tokens
//! with the [`Lease`](super::Lease) handles of the same backend, so a client of the service
//! and a node using the backend directly exclude each other.

use std::fmt;
use std::time::Duration;

use super::{FencingToken, LeaseFuture};

/// A grant as the backend holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredGrant {
    /// The holder.
    pub owner: String,
    /// The grant's fencing token.
    pub token: FencingToken,
    /// How long the grant lives after it is made or renewed.
    pub ttl: Duration,
    /// Time left until it expires unless renewed.
    pub expires_in: Duration,
}

/// Grants kept entirely at the backend; see the module header. Names and owners are checked
/// by the caller ([`super::validate_identity`]); the TTL is a valid
/// [`LeaseSettings`](super::LeaseSettings) TTL.
pub trait StoredGrants: fmt::Debug + Send + Sync + 'static {
    /// Grants lease `name` to `owner` for `ttl` unless another owner holds it (`None`). When
    /// `owner` holds it already, the same grant (same token) now lives `ttl` from now.
    fn acquire(&self, name: &str, owner: &str, ttl: Duration) -> LeaseFuture<Option<StoredGrant>>;

    /// Renews `owner`'s grant `token` of `name`: it lives its TTL from now. `None` when that
    /// grant is not held (expired, released, taken over, never made).
    fn renew(
        &self,
        name: &str,
        owner: &str,
        token: FencingToken,
    ) -> LeaseFuture<Option<StoredGrant>>;

    /// Ends `owner`'s grant `token` of `name`; `false` when it was not held (nothing changed).
    fn release(&self, name: &str, owner: &str, token: FencingToken) -> LeaseFuture<bool>;

    /// The unexpired grant of `name`, if any.
    fn holder(&self, name: &str) -> LeaseFuture<Option<StoredGrant>>;
}
