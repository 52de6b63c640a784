//! Placement: which host a new activation goes to, as pure functions of what the placing host
//! knows — the candidate hosts and the activation counts they last published — and one random
//! number it supplies.
//!
//! # Known and unknown load
//! Hosts publish their activation counts (through gossip or the directory, never asked on the
//! message path), so a count can be missing: a host that just joined has published nothing
//! yet. [`ActivationCountPlacement`] reads a host with no known load as **cold** and prefers it
//! even to a host that published zero, so a newly added host attracts new activations at once
//! instead of waiting until its first count arrives (seed 003: "reads a host with no known load
//! as cold and steers to it immediately").
//!
//! # Determinism
//! A policy gets its randomness as [`PlacementRequest::random`], so the same request always
//! gives the same answer: the activation machine that calls it replays exactly from its inputs.

use std::fmt;

use crate::UniqueAddress;

/// One host a new activation may go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate<'a> {
    /// The host.
    pub node: &'a UniqueAddress,
    /// The number of activations it last published, `None` while it has published none.
    pub activations: Option<u64>,
}

/// What a placement policy decides on.
#[derive(Debug, Clone, Copy)]
pub struct PlacementRequest<'a> {
    /// The key to activate (the actor type is the policy's own: one policy per type).
    pub key: &'a str,
    /// The hosts that may take it, sorted by address; never empty.
    pub candidates: &'a [Candidate<'a>],
    /// The index in `candidates` of the host that places, if it is one of them.
    pub local: Option<usize>,
    /// A uniformly random number, fresh for every request.
    pub random: u64,
}

/// Chooses the host of a new activation; one per actor type. Implement it for an application's
/// own placement.
pub trait PlacementPolicy: fmt::Debug + Send + Sync + 'static {
    /// The index in `request.candidates` of the chosen host, or `None` to refuse (the messages
    /// that asked for the activation become dead letters).
    fn place(&self, request: &PlacementRequest<'_>) -> Option<usize>;
}

/// The host with the fewest activations; a host with no known count counts as cold and comes
/// first. Ties are broken at random.
///
/// Hosts publish their counts, so a count can be missing: a host that just joined has published
/// nothing yet. Reading it as cold, ahead even of a host that published zero, makes a newly
/// added host attract new activations at once instead of after its first count arrives.
#[derive(Debug, Clone, Copy, Default)]
pub struct ActivationCountPlacement;

impl PlacementPolicy for ActivationCountPlacement {
    fn place(&self, request: &PlacementRequest<'_>) -> Option<usize> {
        // Unknown sorts before any known count, zero included.
        let load = |c: &Candidate<'_>| c.activations.map_or((0, 0), |n| (1, n));
        let best = request.candidates.iter().map(load).min()?;
        let tied: Vec<usize> = (0..request.candidates.len())
            .filter(|&i| load(&request.candidates[i]) == best)
            .collect();
        Some(tied[pick(request.random, tied.len())])
    }
}

/// A host chosen uniformly at random.
#[derive(Debug, Clone, Copy, Default)]
pub struct RandomPlacement;

impl PlacementPolicy for RandomPlacement {
    fn place(&self, request: &PlacementRequest<'_>) -> Option<usize> {
        if request.candidates.is_empty() {
            return None;
        }
        Some(pick(request.random, request.candidates.len()))
    }
}

/// The placing host when it is a candidate (the first message's host), otherwise a random one.
#[derive(Debug, Clone, Copy, Default)]
pub struct PreferLocalPlacement;

impl PlacementPolicy for PreferLocalPlacement {
    fn place(&self, request: &PlacementRequest<'_>) -> Option<usize> {
        request.local.or_else(|| RandomPlacement.place(request))
    }
}

/// `random` reduced to `0..len` (`len > 0`).
fn pick(random: u64, len: usize) -> usize {
    // The modulo bias is below 2^-50 for any cluster size that fits in memory.
    usize::try_from(random % len as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests;
