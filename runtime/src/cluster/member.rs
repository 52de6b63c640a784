//! Members and their states: joining → weakly-up → up → leaving → exiting → removed, and down.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{Address, UniqueAddress};

/// Where a member is in its life in the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum MemberStatus {
    /// Asked to join; not yet admitted by the leader.
    Joining,
    /// Admitted while convergence was blocked by an unreachable member; not yet up.
    WeaklyUp,
    /// A full member.
    Up,
    /// Leaving gracefully.
    Leaving,
    /// Left; about to be removed.
    Exiting,
    /// Declared dead; about to be removed.
    Down,
    /// Gone from the cluster.
    Removed,
}

impl MemberStatus {
    /// Which of two statuses wins when concurrent gossip disagrees: the one further along.
    pub(crate) fn precedence(self) -> u8 {
        match self {
            Self::Joining => 0,
            Self::WeaklyUp => 1,
            Self::Up => 2,
            Self::Leaving => 3,
            Self::Exiting => 4,
            Self::Down => 5,
            Self::Removed => 6,
        }
    }

    /// The lower-case name used in APIs and logs (`weakly-up`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Joining => "joining",
            Self::WeaklyUp => "weakly-up",
            Self::Up => "up",
            Self::Leaving => "leaving",
            Self::Exiting => "exiting",
            Self::Down => "down",
            Self::Removed => "removed",
        }
    }
}

impl fmt::Display for MemberStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One member of the cluster as a view records it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Member {
    /// Address and incarnation.
    pub node: UniqueAddress,
    /// Its state.
    pub status: MemberStatus,
    /// The roles it declared when it joined.
    pub roles: BTreeSet<String>,
}

impl Member {
    /// The member's address.
    #[must_use]
    pub fn address(&self) -> &Address {
        &self.node.address
    }

    /// Whether it carries `role`.
    #[must_use]
    pub fn has_role(&self, role: &str) -> bool {
        self.roles.contains(role)
    }
}
