//! Coordination backends for Troupe: [`Lease`](troupe_lease::lease::Lease)s and the
//! [`Directory`](troupe_lease::directory::Directory) on etcd ([`etcd`]), PostgreSQL
//! ([`postgres`]) and through the control plane ([`http`]); with the `membership` feature
//! (default) also cluster membership on etcd ([`etcd_membership`]).
//!
//! Every backend keeps the contracts written in `troupe_lease::lease` and
//! `troupe_lease::directory` (`troupe::lease`, `troupe::directory` to users of the runtime),
//! implements only its store operations (`troupe_lease::lease::store::LeaseStore`: the held
//! grant, its renewal and loss deadline are the one shared machine), and passes the shared
//! conformance suite (`troupe_lease::testing::conformance`) against a real server.
//! `docs/runtime-semantics.md` ("Leases and the directory") describes the guarantees and
//! `docs/operations.md` how to run each backend.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use troupe_lease::lease::{LeaseProvider, LeaseSettings};
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
#[cfg(feature = "membership")]
pub mod etcd_membership;
pub mod http;
pub mod postgres;
