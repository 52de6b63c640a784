//! Virtual actors: actors named by (actor type, key) that exist on demand — the first message
//! activates one on the host a placement policy picks, the directory
//! ([`crate::directory`]) records which host owns each key, and later messages go straight to
//! that host.
//!
//! What is here so far:
//! - placement: the policies that choose the host of a new activation —
//!   [`ActivationCountPlacement`] (cold hosts first), [`RandomPlacement`],
//!   [`PreferLocalPlacement`] — and [`PlacementPolicy`] for an application's own, one per actor
//!   type.
//! - the activation protocol of one host as a pure `step` machine (`activation.rs`): lookup,
//!   claim, start, forward, idle passivation, hand-off on leave, fencing, and a bounded buffer
//!   per key whose overflow is a dead letter, with its property tests and a seeded multi-host
//!   simulation over the in-memory directory (`activation/simulation.rs`).
//!
//! - rebalancing, off by default, as a pure `step` machine of one host (`rebalance.rs`): after
//!   membership changes, bounded moves per interval towards an even spread, idle first, one move
//!   per key at a time, each reported as an event; with property tests.
//!
//! The typed handle and the shell that runs the machines over remoting are not built yet; `docs/runtime-semantics.md` ("Virtual actors") says what holds.

// The shell that performs the machine's actions lands after the machine; until then only the
// tests drive it.
#[allow(dead_code)]
mod activation;
mod placement;
// Like the activation machine: the shell that runs it lands later.
#[allow(dead_code)]
mod rebalance;

pub use placement::{
    ActivationCountPlacement, Candidate, PlacementPolicy, PlacementRequest, PreferLocalPlacement,
    RandomPlacement,
};
