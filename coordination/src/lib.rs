//! Coordination backends for Troupe: [`Lease`](troupe::lease::Lease)s and the
//! [`Directory`](troupe::directory::Directory) on etcd ([`etcd`]) and PostgreSQL
//! ([`postgres`]).
//!
//! Every backend keeps the contracts written in `troupe::lease` and `troupe::directory` and
//! passes the shared conformance suite (`troupe::testkit::conformance`) against a real server.
//! `docs/runtime-semantics.md` ("Leases and the directory") describes the guarantees and
//! `docs/operations.md` how to run each backend.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use troupe::lease::{LeaseProvider, LeaseSettings};
//! use troupe_coordination::etcd::{self, EtcdLeases};
//!
//! let client = etcd::connect(&["http://127.0.0.1:2379".to_owned()]).await?;
//! let leases = EtcdLeases::new(client, "/troupe/prod/")?;
//! let settings = LeaseSettings::new(Duration::from_secs(15), Duration::from_secs(3))?;
//! let lease = leases.lease("job-scheduler", "node-a:7355", &settings)?;
//! // Hand it to the singleton: StartSingletonOptions::new(..).with_lease(lease)
//! # let _ = lease; Ok(()) }
//! ```

pub mod etcd;
pub mod etcd_membership;
mod grant;
pub mod http;
pub mod postgres;

/// Checks a lease's name and owner the way every backend here does before making a handle.
fn validate_lease_identity(name: &str, owner: &str) -> Result<(), troupe::lease::LeaseError> {
    troupe::directory::validate_name("lease name", name)
        .and(troupe::directory::validate_name("lease owner", owner))
        .map_err(|e| troupe::lease::LeaseError::Provider {
            lease: name.to_owned(),
            reason: e.to_string(),
        })
}
