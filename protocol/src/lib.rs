//! Wire types shared by Troupe node agents and the control-plane server: serde only, no I/O.
//!
//! An agent ships [`ReportBatch`]es to the server's ingest endpoint; the server answers with an
//! [`IngestAck`]. Every JSON field name and every `kind` string here is part of the wire format:
//! renaming one is an incompatible change and bumps [`PROTOCOL_VERSION`].
//!
//! # Time
//! Instants are Unix epoch milliseconds (`*_ms` fields, `i64`), durations are milliseconds
//! (`duration_ms`, `u64`). Integers keep the hot ingest path free of date parsing.
//!
//! # 64-bit integers
//! Every `u64` (incarnations, uids, sequences, counts, durations) is written as a decimal
//! string and read from a string or a number (see [`wire`]): JavaScript and jq round numbers
//! above 2^53. `i64` times stay JSON numbers (epoch milliseconds are far below 2^53).
//!
//! # Compatibility
//! Optional fields and lists default when absent, so an older agent's report still parses;
//! an unknown event `kind` is an error (the server answers 400 naming it) rather than data
//! silently lost.
//!
//! # Limits
//! Every string field has a maximum length ([`limits`]): identifiers over it are refused, free
//! text is shortened and marked.

mod dead_letter;
mod directory;
mod event;
mod health;
mod identity;
pub mod limits;
mod membership;
mod report;
mod router;
mod singleton;
pub mod wire;

pub use dead_letter::DeadLetterEvent;
pub use directory::HostEviction;
pub use event::{Event, EventBody, EventCategory, EventKind, UnknownEventKind};
pub use health::{AgentHealth, HealthChange};
pub use identity::{
    AgentIdentity, AgentMeta, CLUSTER_IDENTITY_LABEL, CLUSTER_KEY_FINGERPRINT,
    CLUSTER_KEY_SEPARATOR, cluster_key, valid_cluster_identity,
};
pub use membership::{LeaderChange, MemberChange, MemberInfo, MemberStatus};
pub use report::{
    DepthSample, DepthTick, DroppedCounts, IngestAck, MemberOperation, OperationKind, ReportBatch,
};
pub use router::{RouteesChange, RouterStarted, RoutingStrategy};
pub use singleton::{
    HandOverCompleted, HandOverStarted, HandOverTimedOut, LeaseChange, SingletonHostElected,
    SingletonInstance, SingletonMessages,
};

/// The version of the agent ↔ server wire format; bumped on incompatible changes.
pub const PROTOCOL_VERSION: u32 = 1;
