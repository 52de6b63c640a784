//! Wire protocol versions: which versions a build speaks, and the one two nodes agree on in
//! their handshake.
//!
//! # Policy
//! A build speaks a contiguous range of protocol versions, [`ProtocolVersions::THIS_BUILD`]:
//! its own and, from the second negotiating version on, the one before it. Two nodes speak the
//! highest version both support; when their ranges do not overlap the handshake is refused
//! with both ranges named (`VersionMismatch`). So a rolling upgrade may mix a release with the
//! next one, never skip one. `docs/operations.md` ("Rolling upgrades") states it for
//! operators; `docs/architecture.md` ("Evolving wire messages") says what a new version may
//! change.

use std::fmt;

/// The lowest protocol version this build speaks. Version 2 is the first that negotiates;
/// version 1 (Troupe 0.1.0) refused every other version.
#[cfg(not(feature = "wire-next"))]
const LOWEST: u16 = 2;
/// The highest protocol version this build speaks.
#[cfg(not(feature = "wire-next"))]
const HIGHEST: u16 = 2;

// The `wire-next` test build: one version ahead, still speaking this build's version.
#[cfg(feature = "wire-next")]
const LOWEST: u16 = 2;
#[cfg(feature = "wire-next")]
const HIGHEST: u16 = 3;

/// A contiguous range of protocol versions, `lowest..=highest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProtocolVersions {
    lowest: u16,
    highest: u16,
}

/// Two nodes whose version ranges do not overlap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no common protocol version: this node speaks {ours}, the peer {theirs}")]
pub struct VersionMismatch {
    /// What this node speaks.
    pub ours: ProtocolVersions,
    /// What the peer speaks.
    pub theirs: ProtocolVersions,
}

impl ProtocolVersions {
    /// The versions this build speaks.
    pub const THIS_BUILD: Self = Self {
        lowest: LOWEST,
        highest: HIGHEST,
    };

    /// `lowest..=highest`, or `None` when `lowest > highest`.
    #[must_use]
    pub const fn new(lowest: u16, highest: u16) -> Option<Self> {
        if lowest > highest {
            None
        } else {
            Some(Self { lowest, highest })
        }
    }

    /// Exactly one version.
    #[must_use]
    pub const fn only(version: u16) -> Self {
        Self {
            lowest: version,
            highest: version,
        }
    }

    /// The lowest version in the range.
    #[must_use]
    pub const fn lowest(self) -> u16 {
        self.lowest
    }

    /// The highest version in the range.
    #[must_use]
    pub const fn highest(self) -> u16 {
        self.highest
    }

    /// Whether `version` is in the range.
    #[must_use]
    pub const fn contains(self, version: u16) -> bool {
        self.lowest <= version && version <= self.highest
    }

    /// The highest version both ranges contain.
    ///
    /// # Errors
    /// [`VersionMismatch`] naming both ranges when they do not overlap.
    pub fn negotiate(self, theirs: Self) -> Result<u16, VersionMismatch> {
        let version = self.highest.min(theirs.highest);
        if self.contains(version) && theirs.contains(version) {
            Ok(version)
        } else {
            Err(VersionMismatch { ours: self, theirs })
        }
    }
}

impl fmt::Display for ProtocolVersions {
    /// `2` for one version, `2-3` for a range.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lowest == self.highest {
            write!(f, "{}", self.lowest)
        } else {
            write!(f, "{}-{}", self.lowest, self.highest)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn range() -> impl Strategy<Value = ProtocolVersions> {
        (0u16..20, 0u16..4)
            .prop_map(|(lowest, width)| ProtocolVersions::new(lowest, lowest + width).unwrap())
    }

    #[test]
    fn a_release_and_the_next_speak_the_release_s_version() {
        let current = ProtocolVersions::new(2, 2).unwrap();
        let next = ProtocolVersions::new(2, 3).unwrap();
        assert_eq!(current.negotiate(next), Ok(2));
        assert_eq!(next.negotiate(next), Ok(3));
        let after_next = ProtocolVersions::new(3, 4).unwrap();
        assert_eq!(next.negotiate(after_next), Ok(3));
        let err = current.negotiate(after_next).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no common protocol version: this node speaks 2, the peer 3-4"
        );
    }

    #[test]
    fn an_inverted_range_is_not_a_range() {
        assert_eq!(ProtocolVersions::new(3, 2), None);
        assert_eq!(ProtocolVersions::only(5).to_string(), "5");
    }

    #[test]
    fn this_build_speaks_at_least_version_two() {
        assert!(ProtocolVersions::THIS_BUILD.lowest() >= 2);
        assert!(ProtocolVersions::THIS_BUILD.highest() >= ProtocolVersions::THIS_BUILD.lowest());
    }

    proptest! {
        #[test]
        fn negotiation_picks_the_highest_common_version_on_both_sides(a in range(), b in range()) {
            let common: Vec<u16> = (0..30).filter(|v| a.contains(*v) && b.contains(*v)).collect();
            match (a.negotiate(b), b.negotiate(a)) {
                (Ok(x), Ok(y)) => {
                    prop_assert_eq!(x, y);
                    prop_assert_eq!(Some(&x), common.last());
                }
                (Err(e), Err(_)) => {
                    prop_assert!(common.is_empty());
                    prop_assert_eq!(e, VersionMismatch { ours: a, theirs: b });
                }
                other => prop_assert!(false, "asymmetric: {:?}", other),
            }
        }
    }
}
