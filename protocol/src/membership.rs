//! Membership events: what one node observed about the cluster's members and leader.

use serde::{Deserialize, Serialize};

/// Where a member is in its life in the cluster; the JSON names are the runtime's
/// lower-case names (`weakly-up`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum MemberStatus {
    /// Asked to join; not yet admitted by the leader.
    Joining,
    /// Admitted while convergence was blocked.
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
    /// Every status, in lifecycle order.
    pub const ALL: [Self; 7] = [
        Self::Joining,
        Self::WeaklyUp,
        Self::Up,
        Self::Leaving,
        Self::Exiting,
        Self::Down,
        Self::Removed,
    ];

    /// The wire name (`weakly-up`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
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

    /// The status with wire name `name`, if there is one.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// A member as the reporting node saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemberInfo {
    /// The member's address, `host:port`.
    #[cfg_attr(feature = "openapi", schema(max_length = 512))]
    pub address: String,
    /// The member's incarnation (Akka's `nodeUid`).
    #[serde(with = "crate::wire::u64_string")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::wire::schema::U64Input))]
    pub uid: u64,
    /// Its status after this event.
    pub status: MemberStatus,
    /// The roles it declared when it joined, sorted.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 128))]
    pub roles: Vec<String>,
}

/// A change of one member (`MemberJoined` … `MemberRemoved`, `MemberUnreachable`,
/// `MemberReachable`, `SelfUp`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemberChange {
    /// The member after the change.
    pub member: MemberInfo,
    /// For `MemberRemoved`: the status it had before removal.
    #[serde(default)]
    pub previous_status: Option<MemberStatus>,
    /// For reachability changes: the nodes whose failure detector holds the verdict
    /// (empty when only the reporting node does).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 512))]
    pub observers: Vec<String>,
}

/// `LeaderChanged`: the first address-sorted up member changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaderChange {
    /// The new leader's address; `None` when no member is up.
    #[cfg_attr(feature = "openapi", schema(max_length = 512))]
    pub leader: Option<String>,
}
