//! From the runtime's events to the wire format the control plane stores. Members are named
//! by `host:port` (the cluster is in the batch's identity).

use troupe::Address;
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
            leader: leader.as_ref().map(troupe::Address::host_port),
        }),
        ClusterEvent::SelfUp(m) => EventBody::SelfUp(change(m, None, Vec::new())),
    };
    Event { at_ms, body }
}

/// A path as the control plane shows it: `/user/worker` for a path on the reporting node
/// (`local`), whether or not it names the node (a message that arrived over the network names
/// it), and the full `troupe://...@host:port/...` form for a path on another node.
fn path(path: &troupe::ActorPath, local: &Address) -> String {
    match path.address() {
        Some(address) if address != local => path.to_string(),
        _ => path.elements().to_owned(),
    }
}

/// A dead letter on the node at `local` as a stored event.
#[must_use]
pub fn dead_letter(letter: &DeadLetter, local: &Address, at_ms: i64) -> Event {
    Event {
        at_ms,
        body: EventBody::DeadLetter(DeadLetterEvent {
            recipient: path(&letter.recipient, local),
            sender: letter.sender.as_ref().map(|sender| path(sender, local)),
            message_type: letter.message_type.to_owned(),
            reason: letter.reason.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_letter_names_local_paths_without_the_node_and_remote_ones_in_full() {
        let local = Address::new("demo", "127.0.0.1", 1);
        let other = Address::new("demo", "127.0.0.1", 2);
        let letter = DeadLetter {
            recipient: troupe::ActorPath::remote(&local, "/user/worker-v1"),
            sender: Some(troupe::ActorPath::remote(&other, "/user/scheduler")),
            message_type: "Job",
            reason: troupe::DeadLetterReason::UnknownRecipient,
        };
        let EventBody::DeadLetter(event) = dead_letter(&letter, &local, 5).body else {
            panic!("a dead letter")
        };
        assert_eq!(event.recipient, "/user/worker-v1");
        assert_eq!(
            event.sender.as_deref(),
            Some("troupe://demo@127.0.0.1:2/user/scheduler")
        );
        assert_eq!(event.reason, "no actor at recipient path");
    }
}
