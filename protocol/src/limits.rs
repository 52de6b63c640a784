//! The longest string each report field may hold, and the one check that enforces them.
//!
//! Every string an agent reports has a maximum length in bytes of UTF-8 ([`FieldClass`] lists
//! them; `docs/control-plane.md` has the same table). [`enforce`] walks a batch once:
//!
//! # Refused or shortened
//! - **Identifiers** (cluster and node names, addresses, roles, singleton and lease names,
//!   actor paths, statuses) over their limit make the whole batch bad input: the server answers
//!   400 naming the field by its JSON path (`events[3].member.address`), its length and the
//!   limit. Shortening an identifier would silently merge two different things (two paths with
//!   the same first kilobyte), so it is refused instead.
//! - **Free text** (dead-letter message types, reasons) is shortened to its limit and marked:
//!   the end of the kept text reads `…[truncated from 2700 bytes]`. A type name or an error
//!   chain is copied from elsewhere and its length is not under the reporter's control;
//!   refusing it would lose every other event of the batch (a `SingletonStopped`, a
//!   `MemberLeft`) for the sake of a description.
//!
//! The limits keep every indexed column well under PostgreSQL's btree row limit (about 2,700
//! bytes): the widest index key, a dead-letter minute's recipient plus message type, is at most
//! 2,048 bytes.

use std::fmt;

use crate::event::EventBody;
use crate::report::ReportBatch;

/// [`FieldClass::ClusterName`]'s limit (bytes); the constants are for schema attributes.
pub const CLUSTER_NAME_MAX: usize = 64;
/// [`FieldClass::NodeName`]'s limit (bytes).
pub const NODE_NAME_MAX: usize = 256;
/// [`FieldClass::Address`]'s limit (bytes).
pub const ADDRESS_MAX: usize = 512;
/// [`FieldClass::Role`]'s limit (bytes).
pub const ROLE_MAX: usize = 128;
/// [`FieldClass::SingletonName`]'s limit (bytes).
pub const SINGLETON_NAME_MAX: usize = 256;
/// [`FieldClass::ActorPath`]'s limit (bytes).
pub const ACTOR_PATH_MAX: usize = 1024;
/// [`FieldClass::Status`]'s limit (bytes).
pub const STATUS_MAX: usize = 32;
/// [`FieldClass::MessageType`]'s limit (bytes; longer is shortened and marked).
pub const MESSAGE_TYPE_MAX: usize = 1024;
/// [`FieldClass::Reason`]'s limit (bytes; longer is shortened and marked).
pub const REASON_MAX: usize = 1024;

/// What a string field holds, which decides its limit and what happens above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldClass {
    /// The cluster (actor system) name: the runtime allows 1 to 64 characters.
    ClusterName,
    /// The reporting node's `host:port`, and the Kubernetes node name it runs on.
    NodeName,
    /// A member address (`host:port` or `troupe://system@host:port`).
    Address,
    /// A member role or a singleton's or router's role.
    Role,
    /// A singleton's name or its lease's name.
    SingletonName,
    /// An actor path (router, routee, dead-letter recipient and sender, sampled actor).
    ActorPath,
    /// A member status word reported as text.
    Status,
    /// A dead letter's message type (a Rust type name, generics included).
    MessageType,
    /// Free-text reason (dead letters, singleton stops, lease changes, health changes).
    Reason,
}

impl FieldClass {
    /// Every class, in the order of the documentation's table.
    pub const ALL: [Self; 9] = [
        Self::ClusterName,
        Self::NodeName,
        Self::Address,
        Self::Role,
        Self::SingletonName,
        Self::ActorPath,
        Self::Status,
        Self::MessageType,
        Self::Reason,
    ];

    /// The longest value allowed, in bytes of UTF-8.
    #[must_use]
    pub const fn max_bytes(self) -> usize {
        match self {
            Self::ClusterName => CLUSTER_NAME_MAX,
            Self::NodeName => NODE_NAME_MAX,
            Self::Address => ADDRESS_MAX,
            Self::Role => ROLE_MAX,
            Self::SingletonName => SINGLETON_NAME_MAX,
            Self::ActorPath => ACTOR_PATH_MAX,
            Self::Status => STATUS_MAX,
            Self::MessageType => MESSAGE_TYPE_MAX,
            Self::Reason => REASON_MAX,
        }
    }

    /// What happens to a longer value.
    #[must_use]
    pub const fn overflow(self) -> Overflow {
        match self {
            Self::MessageType | Self::Reason => Overflow::Truncate,
            _ => Overflow::Refuse,
        }
    }
}

/// What happens to a value over its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Overflow {
    /// The batch is refused (400) naming the field.
    Refuse,
    /// The value is shortened to the limit and marked `…[truncated from N bytes]`.
    Truncate,
}

/// A field longer than its limit (an identifier: the batch is refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldTooLong {
    /// The field's JSON path in the batch (`identity.cluster`, `events[3].member.address`).
    pub path: String,
    /// Its length in bytes.
    pub length: usize,
    /// The limit in bytes.
    pub limit: usize,
}

impl fmt::Display for FieldTooLong {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is {} bytes long; the limit is {} bytes",
            self.path, self.length, self.limit
        )
    }
}

impl std::error::Error for FieldTooLong {}

/// Shortens `value` to at most `limit` bytes (on a character boundary), ending it with
/// `…[truncated from N bytes]`; `false` when it already fits.
pub fn truncate_marked(value: &mut String, limit: usize) -> bool {
    if value.len() <= limit {
        return false;
    }
    let marker = format!("…[truncated from {} bytes]", value.len());
    let mut keep = limit.saturating_sub(marker.len());
    while !value.is_char_boundary(keep) {
        keep -= 1;
    }
    value.truncate(keep);
    value.push_str(&marker);
    true
}

struct Walk {
    truncated: usize,
}

impl Walk {
    fn field(
        &mut self,
        value: &mut String,
        class: FieldClass,
        path: impl FnOnce() -> String,
    ) -> Result<(), FieldTooLong> {
        let limit = class.max_bytes();
        if value.len() <= limit {
            return Ok(());
        }
        match class.overflow() {
            Overflow::Truncate => {
                truncate_marked(value, limit);
                self.truncated += 1;
                Ok(())
            }
            Overflow::Refuse => Err(FieldTooLong {
                path: path(),
                length: value.len(),
                limit,
            }),
        }
    }

    fn optional(
        &mut self,
        value: &mut Option<String>,
        class: FieldClass,
        path: impl FnOnce() -> String,
    ) -> Result<(), FieldTooLong> {
        match value {
            Some(value) => self.field(value, class, path),
            None => Ok(()),
        }
    }

    fn list(
        &mut self,
        values: &mut [String],
        class: FieldClass,
        path: impl Fn() -> String,
    ) -> Result<(), FieldTooLong> {
        for (i, value) in values.iter_mut().enumerate() {
            self.field(value, class, || format!("{}[{i}]", path()))?;
        }
        Ok(())
    }

    fn event(&mut self, body: &mut EventBody, at: &str) -> Result<(), FieldTooLong> {
        use FieldClass::{ActorPath, Address, MessageType, Reason, Role, SingletonName, Status};
        let p = |field: &str| format!("{at}.{field}");
        match body {
            EventBody::MemberJoined(c)
            | EventBody::MemberWeaklyUp(c)
            | EventBody::MemberUp(c)
            | EventBody::MemberLeft(c)
            | EventBody::MemberExited(c)
            | EventBody::MemberDown(c)
            | EventBody::MemberRemoved(c)
            | EventBody::MemberUnreachable(c)
            | EventBody::MemberReachable(c)
            | EventBody::SelfUp(c) => {
                self.field(&mut c.member.address, Address, || p("member.address"))?;
                self.list(&mut c.member.roles, Role, || p("member.roles"))?;
                self.list(&mut c.observers, Address, || p("observers"))
            }
            EventBody::LeaderChanged(c) => self.optional(&mut c.leader, Address, || p("leader")),
            EventBody::SingletonHostElected(e) => {
                self.field(&mut e.singleton, SingletonName, || p("singleton"))?;
                self.optional(&mut e.role, Role, || p("role"))?;
                self.field(&mut e.host, Address, || p("host"))?;
                self.optional(&mut e.previous_host, Address, || p("previous_host"))
            }
            EventBody::SingletonHandOverStarted(e) => {
                self.field(&mut e.singleton, SingletonName, || p("singleton"))?;
                self.optional(&mut e.role, Role, || p("role"))?;
                self.field(&mut e.new_host, Address, || p("new_host"))?;
                self.list(&mut e.peers, Address, || p("peers"))
            }
            EventBody::SingletonHandOverCompleted(e) => {
                self.field(&mut e.singleton, SingletonName, || p("singleton"))?;
                self.optional(&mut e.role, Role, || p("role"))?;
                self.field(&mut e.new_host, Address, || p("new_host"))
            }
            EventBody::SingletonHandOverTimedOut(e) => {
                self.field(&mut e.singleton, SingletonName, || p("singleton"))?;
                self.optional(&mut e.role, Role, || p("role"))?;
                self.field(&mut e.new_host, Address, || p("new_host"))?;
                self.list(&mut e.silent_peers, Address, || p("silent_peers"))
            }
            EventBody::SingletonStarted(e)
            | EventBody::SingletonStopped(e)
            | EventBody::SingletonRestarted(e) => {
                self.field(&mut e.singleton, SingletonName, || p("singleton"))?;
                self.optional(&mut e.role, Role, || p("role"))?;
                self.field(&mut e.host, Address, || p("host"))?;
                self.optional(&mut e.reason, Reason, || p("reason"))
            }
            EventBody::LeaseAcquired(e) | EventBody::LeaseLost(e) | EventBody::LeaseReleased(e) => {
                self.field(&mut e.singleton, SingletonName, || p("singleton"))?;
                self.optional(&mut e.role, Role, || p("role"))?;
                self.field(&mut e.lease, SingletonName, || p("lease"))?;
                self.optional(&mut e.holder, Address, || p("holder"))?;
                self.optional(&mut e.reason, Reason, || p("reason"))
            }
            EventBody::SingletonMessagesHeld(e)
            | EventBody::SingletonMessagesFlushed(e)
            | EventBody::SingletonMessagesDeadLettered(e) => {
                self.field(&mut e.singleton, SingletonName, || p("singleton"))?;
                self.optional(&mut e.role, Role, || p("role"))
            }
            EventBody::RouterStarted(e) => {
                self.field(&mut e.router, ActorPath, || p("router"))?;
                self.optional(&mut e.role, Role, || p("role"))?;
                self.field(&mut e.routee_path, ActorPath, || p("routee_path"))
            }
            EventBody::RouteesChanged(e) => {
                self.field(&mut e.router, ActorPath, || p("router"))?;
                self.list(&mut e.routees, ActorPath, || p("routees"))
            }
            EventBody::DeadLetter(e) => {
                self.field(&mut e.recipient, ActorPath, || p("recipient"))?;
                self.optional(&mut e.sender, ActorPath, || p("sender"))?;
                self.field(&mut e.message_type, MessageType, || p("message_type"))?;
                self.field(&mut e.reason, Reason, || p("reason"))
            }
            EventBody::AgentHealthChanged(e) => {
                self.optional(&mut e.reason, Reason, || p("reason"))
            }
            EventBody::DirectoryHostEvicted(e) => {
                self.field(&mut e.host, Address, || p("host"))?;
                self.optional(&mut e.previous_status, Status, || p("previous_status"))?;
                self.list(&mut e.actors, ActorPath, || p("actors"))
            }
        }
    }
}

/// Checks every string of `batch` against its limit: shortens (and marks) free text over its
/// limit and returns how many fields it shortened, or refuses the batch at the first
/// identifier over its limit. A refused batch may have been partly shortened; drop it.
pub fn enforce(batch: &mut ReportBatch) -> Result<usize, FieldTooLong> {
    use FieldClass::{ActorPath, ClusterName, NodeName};
    let mut walk = Walk { truncated: 0 };
    let id = &mut batch.identity;
    walk.field(&mut id.cluster, ClusterName, || {
        "identity.cluster".to_owned()
    })?;
    walk.field(&mut id.node, NodeName, || "identity.node".to_owned())?;
    walk.optional(&mut id.meta.node, NodeName, || {
        "identity.meta.node".to_owned()
    })?;
    for (i, event) in batch.events.iter_mut().enumerate() {
        walk.event(&mut event.body, &format!("events[{i}]"))?;
    }
    for (t, tick) in batch.depth_samples.iter_mut().enumerate() {
        for (s, sample) in tick.samples.iter_mut().enumerate() {
            walk.field(&mut sample.path, ActorPath, || {
                format!("depth_samples[{t}].samples[{s}].path")
            })?;
            walk.optional(&mut sample.router, ActorPath, || {
                format!("depth_samples[{t}].samples[{s}].router")
            })?;
        }
    }
    Ok(walk.truncated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AgentIdentity, AgentMeta, DeadLetterEvent, Event, PROTOCOL_VERSION};

    fn batch(events: Vec<EventBody>) -> ReportBatch {
        ReportBatch {
            version: PROTOCOL_VERSION,
            identity: AgentIdentity {
                cluster: "demo".to_owned(),
                node: "127.0.0.1:2551".to_owned(),
                incarnation: 1,
                meta: AgentMeta::default(),
                cluster_identity: None,
            },
            sequence: 1,
            sent_at_ms: 0,
            events: events
                .into_iter()
                .map(|body| Event { at_ms: 0, body })
                .collect(),
            depth_samples: Vec::new(),
            dropped: Default::default(),
        }
    }

    fn dead_letter(recipient: &str, message_type: &str) -> EventBody {
        EventBody::DeadLetter(DeadLetterEvent {
            recipient: recipient.to_owned(),
            sender: None,
            message_type: message_type.to_owned(),
            reason: "no actor".to_owned(),
        })
    }

    #[test]
    fn an_over_long_identifier_is_refused_naming_its_json_path_length_and_limit() {
        let mut b = batch(vec![
            dead_letter("/user/a", "T"),
            dead_letter(&"x".repeat(2_700), "T"),
        ]);
        let error = enforce(&mut b).unwrap_err();
        assert_eq!(error.path, "events[1].recipient");
        assert_eq!((error.length, error.limit), (2_700, 1024));
        assert_eq!(
            error.to_string(),
            "events[1].recipient is 2700 bytes long; the limit is 1024 bytes"
        );
    }

    #[test]
    fn an_over_long_cluster_name_is_refused() {
        let mut b = batch(Vec::new());
        b.identity.cluster = "c".repeat(5 * 1024 * 1024);
        let error = enforce(&mut b).unwrap_err();
        assert_eq!(
            (error.path.as_str(), error.length, error.limit),
            ("identity.cluster", 5 * 1024 * 1024, 64)
        );
    }

    #[test]
    fn an_over_long_message_type_is_shortened_to_the_limit_and_marked() {
        let mut b = batch(vec![dead_letter("/user/a", &"é".repeat(1_350))]);
        assert_eq!(enforce(&mut b), Ok(1));
        let EventBody::DeadLetter(d) = &b.events[0].body else {
            unreachable!()
        };
        assert!(d.message_type.len() <= 1024, "{}", d.message_type.len());
        assert!(d.message_type.starts_with("éé"));
        assert!(d.message_type.ends_with("…[truncated from 2700 bytes]"));
    }

    #[test]
    fn values_at_the_limit_pass_unchanged() {
        for class in FieldClass::ALL {
            let mut value = "a".repeat(class.max_bytes());
            assert!(!truncate_marked(&mut value, class.max_bytes()));
        }
        let mut b = batch(vec![dead_letter(&"p".repeat(1024), &"t".repeat(1024))]);
        let before = b.clone();
        assert_eq!(enforce(&mut b), Ok(0));
        assert_eq!(b, before);
    }

    #[test]
    fn the_widest_index_key_stays_under_the_postgresql_btree_limit() {
        assert!(FieldClass::ActorPath.max_bytes() + FieldClass::MessageType.max_bytes() <= 2_048);
    }
}
