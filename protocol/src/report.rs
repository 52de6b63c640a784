//! The report an agent ships, and the server's answer.
//!
//! # Idempotency
//! `(identity, sequence)` names a batch. An agent that gets no answer resends the same batch
//! with the same sequence; the server stores it once and acknowledges both sends.
//!
//! # Dropped counts
//! [`DroppedCounts`] are running totals since the agent's incarnation started, not deltas, so a
//! lost or retried batch cannot lose or double a count: the server keeps the latest totals.
//! What an agent's report spool gave up of an earlier incarnation's batches (see the agent's
//! `reporter/spool.rs`) is counted by the incarnation that found out, in its own totals.

use serde::{Deserialize, Serialize};

use crate::event::Event;
use crate::identity::AgentIdentity;

/// One shipment from an agent.
///
/// Strings are limited in bytes of UTF-8 ([`crate::limits`]; `maxLength` in the OpenAPI
/// document, which counts characters, so a value of multi-byte characters meets its byte limit
/// first): an identifier over its limit makes the batch bad input (400 naming the field), free
/// text over its limit is stored shortened and marked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReportBatch {
    /// The wire-format version the agent speaks ([`crate::PROTOCOL_VERSION`]).
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1))]
    #[serde(deserialize_with = "crate::wire::u32_number::deserialize")]
    pub version: u32,
    /// Who is reporting.
    pub identity: AgentIdentity,
    /// Per-incarnation batch number, starting at 1; a retry reuses its number.
    #[serde(with = "crate::wire::u64_string")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::wire::schema::SequenceInput))]
    pub sequence: u64,
    /// When the agent sent (first sent) this batch, Unix epoch milliseconds.
    #[cfg_attr(feature = "openapi", schema(minimum = -9223372036854775808i64, maximum = 9223372036854775807i64))]
    #[serde(deserialize_with = "crate::wire::i64_number::deserialize")]
    pub sent_at_ms: i64,
    /// Events in the order they happened on the agent.
    #[serde(default)]
    pub events: Vec<Event>,
    /// Mailbox-depth samples, one entry per sampling tick.
    #[serde(default)]
    pub depth_samples: Vec<DepthTick>,
    /// Items the agent had to drop since it started (running totals).
    #[serde(default)]
    pub dropped: DroppedCounts,
}

/// The depths sampled on one tick: stored compactly, one row per tick.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DepthTick {
    /// When the tick sampled, Unix epoch milliseconds.
    #[cfg_attr(feature = "openapi", schema(minimum = -9223372036854775808i64, maximum = 9223372036854775807i64))]
    #[serde(deserialize_with = "crate::wire::i64_number::deserialize")]
    pub at_ms: i64,
    /// One sample per routed or named actor on the reporting node.
    pub samples: Vec<DepthSample>,
}

/// One actor's mailbox depth at a tick.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DepthSample {
    /// The actor's path (`/user/workers/w1`).
    #[cfg_attr(feature = "openapi", schema(max_length = 1024))]
    pub path: String,
    /// The router it is a routee of, if any (the router's path).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 1024))]
    pub router: Option<String>,
    /// Messages queued in its mailbox.
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 4294967295u32))]
    #[serde(deserialize_with = "crate::wire::u32_number::deserialize")]
    pub depth: u32,
}

/// Items an agent dropped from its bounded buffer, by kind, since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DroppedCounts {
    /// Membership events.
    #[serde(default, with = "crate::wire::u64_string")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::wire::schema::U64Input))]
    pub membership: u64,
    /// Singleton events.
    #[serde(default, with = "crate::wire::u64_string")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::wire::schema::U64Input))]
    pub singleton: u64,
    /// Router events.
    #[serde(default, with = "crate::wire::u64_string")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::wire::schema::U64Input))]
    pub router: u64,
    /// Dead-letter events.
    #[serde(default, with = "crate::wire::u64_string")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::wire::schema::U64Input))]
    pub dead_letters: u64,
    /// Health events.
    #[serde(default, with = "crate::wire::u64_string")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::wire::schema::U64Input))]
    pub health: u64,
    /// Depth samples (dropped first when the buffer is full).
    #[serde(default, with = "crate::wire::u64_string")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::wire::schema::U64Input))]
    pub depth_samples: u64,
    /// Whole report batches of this node given up by its report spool (pushed out when the
    /// spool was full, refused as bad input on replay, or torn or unreadable in the spool
    /// file), of this incarnation or an earlier one of the same node; the items of those it
    /// could read are counted by kind above too. Not part of [`DroppedCounts::total`], which
    /// counts items.
    #[serde(default, with = "crate::wire::u64_string")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::wire::schema::U64Input))]
    pub spool_batches: u64,
}

impl DroppedCounts {
    /// Every item dropped, all kinds together (whole batches, `spool_batches`, apart).
    #[must_use]
    pub fn total(&self) -> u64 {
        self.membership
            + self.singleton
            + self.router
            + self.dead_letters
            + self.health
            + self.depth_samples
    }
}

/// The server's answer to a stored (or already stored) batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct IngestAck {
    /// The acknowledged batch's sequence.
    #[serde(with = "crate::wire::u64_string")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::wire::schema::U64))]
    pub sequence: u64,
    /// `true` when this batch had been stored before (a retry); nothing was written again.
    pub duplicate: bool,
    /// Events stored from this batch (0 for a duplicate).
    #[serde(with = "crate::wire::u64_string")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::wire::schema::U64))]
    pub stored_events: u64,
    /// Member operations an operator asked this agent to carry out.
    #[serde(default)]
    pub operations: Vec<MemberOperation>,
}

/// A member operation relayed to an agent (Akka Management's `PUT /cluster/members/{address}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemberOperation {
    /// The operation's id, for the agent's log and to drop repeats.
    pub id: i64,
    /// The member to act on.
    pub address: String,
    /// What to do.
    pub operation: OperationKind,
}

/// What an operator can ask of a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum OperationKind {
    /// Leave the cluster gracefully.
    Leave,
    /// Declare the member down.
    Down,
}

impl OperationKind {
    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Leave => "leave",
            Self::Down => "down",
        }
    }
}
