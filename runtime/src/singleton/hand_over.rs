//! One open hand-over round of a node about to host: which peers still have to acknowledge,
//! when to ask them again, and when to stop waiting.
//!
//! # When nobody answers
//! A `HandOverRequest` is fire-and-forget (one frame can be lost behind a handshake), so it is
//! resent to every silent peer every [`HAND_OVER_RESEND`] while the round is open. A peer that
//! leaves the set of peers to ask — removed or downed — is no longer waited for. After the
//! hand-over timeout the round ends anyway, naming the peers that stayed silent: the node hosts
//! without having proved that nobody else does, and says so.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use crate::Address;

/// How often an open hand-over request is sent again to the peers that have not answered.
pub(super) const HAND_OVER_RESEND: Duration = Duration::from_millis(500);

/// An open hand-over round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HandOver {
    /// Identifies this round; acknowledgments of other rounds are ignored.
    pub nonce: u64,
    /// Peers that have not acknowledged yet.
    pub pending: BTreeSet<Address>,
    /// Every peer asked in this round.
    pub asked: BTreeSet<Address>,
    /// When the round started.
    pub started: Instant,
    /// When to ask the silent peers again.
    pub next_resend: Instant,
    /// When to stop waiting.
    pub deadline: Instant,
}

/// What a timer tick means for an open round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum HandOverTick {
    /// Nothing is due.
    Wait,
    /// Ask these peers again.
    Resend(Vec<Address>),
    /// The timeout passed; these peers never answered.
    TimedOut(Vec<Address>),
}

impl HandOver {
    /// Open a round asking `peers`.
    #[must_use]
    pub(super) fn start(
        nonce: u64,
        peers: BTreeSet<Address>,
        now: Instant,
        timeout: Duration,
    ) -> Self {
        Self {
            nonce,
            asked: peers.clone(),
            pending: peers,
            started: now,
            next_resend: now + HAND_OVER_RESEND,
            deadline: now + timeout,
        }
    }

    /// Every asked peer has acknowledged or dropped out.
    #[must_use]
    pub(super) fn is_complete(&self) -> bool {
        self.pending.is_empty()
    }

    /// Record an acknowledgment; false when it belongs to another round or peer.
    pub(super) fn acknowledge(&mut self, from: &Address, nonce: u64) -> bool {
        nonce == self.nonce && self.pending.remove(from)
    }

    /// The peers to ask changed: stop waiting for the ones that left, and return the new ones,
    /// which are asked at once.
    pub(super) fn update_peers(&mut self, peers: &BTreeSet<Address>) -> Vec<Address> {
        self.pending.retain(|peer| peers.contains(peer));
        let new: Vec<Address> = peers.difference(&self.asked).cloned().collect();
        for peer in &new {
            self.asked.insert(peer.clone());
            self.pending.insert(peer.clone());
        }
        new
    }

    /// Advance to `now`.
    pub(super) fn tick(&mut self, now: Instant) -> HandOverTick {
        if self.pending.is_empty() {
            return HandOverTick::Wait;
        }
        if now >= self.deadline {
            return HandOverTick::TimedOut(std::mem::take(&mut self.pending).into_iter().collect());
        }
        if now >= self.next_resend {
            self.next_resend = now + HAND_OVER_RESEND;
            return HandOverTick::Resend(self.pending.iter().cloned().collect());
        }
        HandOverTick::Wait
    }

    /// The next instant at which [`HandOver::tick`] has something to do.
    #[must_use]
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        (!self.pending.is_empty()).then(|| self.next_resend.min(self.deadline))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::singleton::election::tests::address;

    fn peers(ids: &[u8]) -> BTreeSet<Address> {
        ids.iter().map(|&i| address(i)).collect()
    }

    #[test]
    fn silent_peers_are_asked_again_every_500ms_until_the_timeout_names_them() {
        let start = Instant::now();
        let mut round = HandOver::start(7, peers(&[2, 3]), start, Duration::from_secs(2));
        assert_eq!(
            round.tick(start + Duration::from_millis(499)),
            HandOverTick::Wait
        );
        assert_eq!(
            round.tick(start + Duration::from_millis(500)),
            HandOverTick::Resend(vec![address(2), address(3)])
        );
        assert!(round.acknowledge(&address(2), 7));
        assert!(!round.acknowledge(&address(3), 6), "another round's ack");
        assert_eq!(
            round.tick(start + Duration::from_millis(1_000)),
            HandOverTick::Resend(vec![address(3)])
        );
        assert_eq!(
            round.tick(start + Duration::from_secs(2)),
            HandOverTick::TimedOut(vec![address(3)])
        );
        assert!(round.is_complete());
    }

    #[test]
    fn a_peer_that_leaves_the_set_is_no_longer_waited_for_and_a_new_one_is_asked() {
        let start = Instant::now();
        let mut round = HandOver::start(1, peers(&[2, 3]), start, Duration::from_secs(10));
        let new = round.update_peers(&peers(&[3, 4]));
        assert_eq!(new, vec![address(4)]);
        assert_eq!(round.pending, peers(&[3, 4]));
        round.acknowledge(&address(3), 1);
        round.acknowledge(&address(4), 1);
        assert!(round.is_complete());
        assert_eq!(round.next_deadline(), None);
    }

    proptest! {
        /// Whatever happens, a round never waits past its deadline, never resends more often
        /// than every 500 ms, and only names peers it asked as silent.
        #[test]
        fn a_round_ends_by_its_deadline_and_resends_at_most_every_500ms(
            steps in proptest::collection::vec((0u64..700, proptest::option::of(1u8..6)), 1..60),
            timeout_ms in 1u64..5_000,
        ) {
            let start = Instant::now();
            let mut now = start;
            let mut round = HandOver::start(9, peers(&[1, 2, 3, 4, 5]), start, Duration::from_millis(timeout_ms));
            let mut last_resend = start;
            let mut ended = false;
            for (advance, ack) in steps {
                now += Duration::from_millis(advance);
                if let Some(peer) = ack {
                    round.acknowledge(&address(peer), 9);
                }
                match round.tick(now) {
                    HandOverTick::Wait => {}
                    HandOverTick::Resend(to) => {
                        prop_assert!(now.duration_since(last_resend) >= HAND_OVER_RESEND);
                        prop_assert!(to.iter().all(|p| round.asked.contains(p)));
                        last_resend = now;
                    }
                    HandOverTick::TimedOut(silent) => {
                        prop_assert!(now >= round.deadline);
                        prop_assert!(silent.iter().all(|p| round.asked.contains(p)));
                        ended = true;
                    }
                }
                if now >= round.deadline {
                    prop_assert!(round.is_complete());
                }
                if let Some(next) = round.next_deadline() {
                    prop_assert!(next <= round.deadline);
                }
            }
            prop_assert!(!ended || round.is_complete());
        }
    }
}
