//! Routing: the five strategies as pure selection logic, rendezvous hashing, and the local pool
//! router. The cluster router (a later layer) reuses the same logic over remote routees.

mod logic;
mod pool;
pub(crate) mod rendezvous;

pub use logic::{
    HashedRouteeId, NO_READING, RouteeId, RoutingLogic, RoutingStrategy, Selection, UnknownStrategy,
};
pub use pool::{PoolRouter, PoolRouterError, PoolRouterOptions};
pub use rendezvous::stable_hash;
