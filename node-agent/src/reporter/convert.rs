//! From the runtime's events to the wire format the control plane stores. Members are named
//! by `host:port` (the cluster is in the batch's identity).

use troupe::DeadLetter;
use troupe::cluster::{ClusterEvent, ClusterView, Member, MemberStatus};
use troupe_protocol::{DeadLetterEvent, Event, EventBody, LeaderChange, MemberChange, MemberInfo};

fn status(status: MemberStatus) -> troupe_protocol::MemberStatus {
    match status {
        MemberStatus::Joining => troupe_protocol::MemberStatus::Joining,
        MemberStatus::WeaklyUp => troupe_protocol::MemberStatus::WeaklyUp,
        MemberStatus::Up => troupe_protocol::MemberStatus::Up,
        MemberStatus::Leaving => troupe_protocol::MemberStatus::Leaving,
        MemberStatus::Exiting => troupe_protocol::MemberStatus::Exiting,
        MemberStatus::Down => troupe_protocol::MemberStatus::Down,
        MemberStatus::Removed => troupe_protocol::MemberStatus::Removed,
    }
}

fn info(member: &Member) -> MemberInfo {
    MemberInfo {
        address: member.address().host_port(),
        uid: member.node.incarnation,
        status: status(member.status),
        roles: member.roles.iter().cloned().collect(),
    }
}

fn change(member: &Member, previous: Option<MemberStatus>, observers: Vec<String>) -> MemberChange {
    MemberChange {
        member: info(member),
        previous_status: previous.map(status),
        observers,
    }
}

/// A cluster event as a stored event. `view` (after the change) names who observed an
/// unreachable member.
#[must_use]
pub fn cluster_event(event: &ClusterEvent, view: &ClusterView, at_ms: i64) -> Event {
    let observers = |member: &Member| {
        view.observed_by
            .iter()
            .find(|(node, _)| *node == member.node)
            .map(|(_, observers)| observers.iter().map(|o| o.address.host_port()).collect())
            .unwrap_or_default()
    };
    let body = match event {
        ClusterEvent::MemberJoined(m) => EventBody::MemberJoined(change(m, None, Vec::new())),
        ClusterEvent::MemberWeaklyUp(m) => EventBody::MemberWeaklyUp(change(m, None, Vec::new())),
        ClusterEvent::MemberUp(m) => EventBody::MemberUp(change(m, None, Vec::new())),
        ClusterEvent::MemberLeft(m) => EventBody::MemberLeft(change(m, None, Vec::new())),
        ClusterEvent::MemberExited(m) => EventBody::MemberExited(change(m, None, Vec::new())),
        ClusterEvent::MemberDown(m) => EventBody::MemberDown(change(m, None, Vec::new())),
        ClusterEvent::MemberRemoved { member, previous } => {
            EventBody::MemberRemoved(change(member, Some(*previous), Vec::new()))
        }
        ClusterEvent::MemberUnreachable(m) => {
            EventBody::MemberUnreachable(change(m, None, observers(m)))
        }
        ClusterEvent::MemberReachable(m) => EventBody::MemberReachable(change(m, None, Vec::new())),
        ClusterEvent::LeaderChanged(leader) => EventBody::LeaderChanged(LeaderChange {
            leader: leader.as_ref().map(troupe::remote::Address::host_port),
        }),
        ClusterEvent::SelfUp(m) => EventBody::SelfUp(change(m, None, Vec::new())),
    };
    Event { at_ms, body }
}

/// A path as the control plane shows it: `/user/worker` on the reporting node, the full
/// `troupe://...@host:port/...` form for a path on another node.
fn path(path: &troupe::ActorPath) -> String {
    match path.address() {
        Some(_) => path.to_string(),
        None => path.elements().to_owned(),
    }
}

/// A dead letter as a stored event.
#[must_use]
pub fn dead_letter(letter: &DeadLetter, at_ms: i64) -> Event {
    Event {
        at_ms,
        body: EventBody::DeadLetter(DeadLetterEvent {
            recipient: path(&letter.recipient),
            sender: letter.sender.as_ref().map(path),
            message_type: letter.message_type.to_owned(),
            reason: letter.reason.to_string(),
        }),
    }
}
