use std::collections::BTreeSet;

use proptest::prelude::*;
use troupe::cluster::MemberStatus;

use super::*;

const INCARNATION: u64 = 15_365_700_884_095_386_388;

fn node(port: u16) -> UniqueAddress {
    UniqueAddress {
        address: Address::new("demo", "127.0.0.1", port),
        incarnation: u64::from(port) * 7,
    }
}

fn member(port: u16, status: MemberStatus) -> Member {
    Member {
        node: node(port),
        status,
        roles: BTreeSet::from(["web".to_owned()]),
    }
}

fn me() -> UniqueAddress {
    UniqueAddress {
        address: Address::new("demo", "127.0.0.1", 2551),
        incarnation: INCARNATION,
    }
}

fn journal(capacity: usize) -> Journal {
    Journal::new(&me(), &ClusterView::default(), capacity)
}

/// One event of every recorded kind, then a `SelfUp`.
fn every_kind() -> Vec<ClusterEvent> {
    vec![
        ClusterEvent::MemberJoined(member(1, MemberStatus::Joining)),
        ClusterEvent::MemberWeaklyUp(member(1, MemberStatus::WeaklyUp)),
        ClusterEvent::MemberUp(member(1, MemberStatus::Up)),
        ClusterEvent::LeaderChanged(Some(node(1).address)),
        ClusterEvent::MemberUnreachable(member(1, MemberStatus::Up)),
        ClusterEvent::MemberReachable(member(1, MemberStatus::Up)),
        ClusterEvent::MemberLeft(member(1, MemberStatus::Leaving)),
        ClusterEvent::MemberExited(member(1, MemberStatus::Exiting)),
        ClusterEvent::MemberDown(member(1, MemberStatus::Down)),
        ClusterEvent::MemberRemoved {
            member: member(1, MemberStatus::Removed),
            previous: MemberStatus::Down,
        },
        ClusterEvent::SelfUp(member(2551, MemberStatus::Up)),
    ]
}

#[test]
fn every_runtime_event_but_self_up_is_recorded_under_its_akka_name() {
    let mut journal = journal(64);
    let names: Vec<&str> = every_kind()
        .iter()
        .filter_map(|e| journal.record(e).map(|_| journal.since(0).unwrap()))
        .map(|recorded| recorded.last().unwrap().event)
        .collect();
    assert_eq!(
        names,
        [
            "MemberJoined",
            "MemberWeaklyUp",
            "MemberUp",
            "LeaderChanged",
            "UnreachableMember",
            "ReachableMember",
            "MemberLeft",
            "MemberExited",
            "MemberDowned",
            "MemberRemoved",
        ]
    );
    let all: BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(all, EVENT_TYPES.into_iter().collect());
}

#[test]
fn event_data_is_the_servers_domain_event_shape() {
    let mut journal = journal(8);
    journal.record(&ClusterEvent::MemberUp(member(1, MemberStatus::Up)));
    journal.record(&ClusterEvent::MemberRemoved {
        member: member(1, MemberStatus::Removed),
        previous: MemberStatus::WeaklyUp,
    });
    journal.record(&ClusterEvent::LeaderChanged(None));
    let data: Vec<Value> = journal
        .since(0)
        .unwrap()
        .iter()
        .map(|r| serde_json::from_str(&r.data).unwrap())
        .collect();
    assert_eq!(
        data[0],
        json!({"type": "MemberUp", "member": {"node": "troupe://demo@127.0.0.1:1",
            "nodeUid": "7", "status": "Up", "roles": ["web"]}})
    );
    assert_eq!(data[1]["previousStatus"], "WeaklyUp");
    assert_eq!(data[1]["member"]["status"], "Removed");
    assert_eq!(data[2], json!({"type": "LeaderChanged", "address": null}));
}

#[test]
fn an_id_is_the_incarnation_and_the_sequence_and_reads_back() {
    let id = EventId {
        incarnation: INCARNATION,
        sequence: 17,
    };
    assert_eq!(id.to_string(), "15365700884095386388-17");
    assert_eq!("15365700884095386388-17".parse(), Ok(id));
    assert_eq!(
        " 1-0 ".parse(),
        Ok(EventId {
            incarnation: 1,
            sequence: 0
        })
    );
    for bad in [
        "",
        "17",
        "1:17.0",
        "-1",
        "1-",
        "a-1",
        "1-+2",
        "1-2-3",
        "99999999999999999999-1",
    ] {
        let error = bad.parse::<EventId>().unwrap_err();
        assert!(
            error.to_string().contains("<incarnation>-<sequence>"),
            "{bad}: {error}"
        );
    }
}

#[test]
fn the_type_filter_takes_akka_names_repeated_or_comma_separated() {
    let filter = TypeFilter::parse(["MemberUp", "LeaderChanged,MemberRemoved"]).unwrap();
    assert!(filter.accepts("MemberUp") && filter.accepts("MemberRemoved"));
    assert!(!filter.accepts("MemberJoined"));
    let all = TypeFilter::parse([]).unwrap();
    assert!(EVENT_TYPES.iter().all(|t| all.accepts(t)));
}

#[test]
fn an_unknown_or_empty_type_is_refused_naming_the_allowed_values() {
    let unknown = TypeFilter::parse(["MemberDown"]).unwrap_err();
    assert!(unknown.starts_with("unknown event type `MemberDown`; known: MemberJoined, "));
    assert!(unknown.contains("MemberDowned") && unknown.contains("LeaderChanged"));
    let empty = TypeFilter::parse([""]).unwrap_err();
    assert!(empty.starts_with("`type` has an empty value"), "{empty}");
    assert!(TypeFilter::parse(["MemberUp,"]).is_err());
}

#[test]
fn a_fresh_stream_starts_now_with_the_snapshot_when_asked() {
    let mut journal = journal(4);
    journal.record(&ClusterEvent::MemberUp(member(1, MemberStatus::Up)));
    let opening = journal.open(None, true).unwrap();
    assert!(opening.snapshot && opening.replay.is_empty() && opening.fallback.is_none());
    assert_eq!(opening.position, 1);
    assert!(!journal.open(None, false).unwrap().snapshot);
}

#[test]
fn a_resume_from_an_id_still_kept_replays_exactly_what_came_after_it() {
    let mut journal = journal(4);
    for port in 1..=6 {
        journal.record(&ClusterEvent::MemberUp(member(port, MemberStatus::Up)));
    }
    // The ring keeps 3..=6; resuming after 2 needs 3 onwards: still exact.
    let opening = journal.open(Some(journal.id(2)), false).unwrap();
    let replayed: Vec<u64> = opening.replay.iter().map(|r| r.sequence).collect();
    assert_eq!(replayed, [3, 4, 5, 6]);
    assert!(!opening.snapshot);
    let at_end = journal.open(Some(journal.id(6)), true).unwrap();
    assert!(
        at_end.replay.is_empty() && !at_end.snapshot,
        "a resume never repeats the snapshot"
    );
}

#[test]
fn a_resume_from_an_id_that_fell_out_of_the_ring_opens_with_the_snapshot() {
    let mut journal = journal(4);
    for port in 1..=6 {
        journal.record(&ClusterEvent::MemberUp(member(port, MemberStatus::Up)));
    }
    let opening = journal.open(Some(journal.id(1)), false).unwrap();
    assert!(opening.snapshot && opening.replay.is_empty());
    assert_eq!(opening.position, 6);
    let why = opening.fallback.unwrap();
    assert!(why.contains("fallen out of the last 4 events"), "{why}");
    assert!(why.contains(&format!("{INCARNATION}-3")), "{why}");
}

#[test]
fn an_id_of_another_incarnation_opens_with_the_snapshot() {
    let mut journal = journal(4);
    journal.record(&ClusterEvent::MemberUp(member(1, MemberStatus::Up)));
    let other = EventId {
        incarnation: 1,
        sequence: 1,
    };
    let opening = journal.open(Some(other), false).unwrap();
    assert!(opening.snapshot);
    assert!(opening.fallback.unwrap().contains("another incarnation"));
}

#[test]
fn an_id_beyond_the_last_event_is_refused() {
    let mut journal = journal(4);
    journal.record(&ClusterEvent::MemberUp(member(1, MemberStatus::Up)));
    let error = journal.open(Some(journal.id(2)), false).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "`Last-Event-ID` {INCARNATION}-2 is beyond the last event of this node \
             ({INCARNATION}-1): it was not sent by this stream"
        )
    );
}

#[test]
fn the_snapshot_is_the_membership_the_events_add_up_to() {
    let start = ClusterView {
        self_node: Some(me()),
        members: vec![member(1, MemberStatus::Up), member(2, MemberStatus::Up)],
        leader: Some(node(1).address),
        ..ClusterView::default()
    };
    let mut journal = Journal::new(&me(), &start, 8);
    journal.record(&ClusterEvent::MemberUnreachable(member(
        2,
        MemberStatus::Up,
    )));
    journal.record(&ClusterEvent::MemberJoined(member(
        3,
        MemberStatus::Joining,
    )));
    journal.record(&ClusterEvent::MemberRemoved {
        member: member(1, MemberStatus::Removed),
        previous: MemberStatus::Exiting,
    });
    journal.record(&ClusterEvent::LeaderChanged(Some(node(2).address)));
    let observed_by = vec![(node(2), vec![node(3)])];
    let snapshot = journal.snapshot(&observed_by);
    assert_eq!(snapshot["type"], "CurrentClusterState");
    assert_eq!(snapshot["selfNode"], "troupe://demo@127.0.0.1:2551");
    let members: Vec<(&str, &str)> = snapshot["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["node"].as_str().unwrap(), m["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        members,
        [
            ("troupe://demo@127.0.0.1:2", "Up"),
            ("troupe://demo@127.0.0.1:3", "Joining")
        ]
    );
    assert_eq!(
        snapshot["unreachable"],
        json!([{"node": "troupe://demo@127.0.0.1:2", "observedBy": ["troupe://demo@127.0.0.1:3"]}])
    );
    assert_eq!(snapshot["leader"], "troupe://demo@127.0.0.1:2");
}

fn any_event() -> impl Strategy<Value = ClusterEvent> {
    let status = prop::sample::select(vec![
        MemberStatus::Joining,
        MemberStatus::WeaklyUp,
        MemberStatus::Up,
        MemberStatus::Leaving,
        MemberStatus::Exiting,
        MemberStatus::Down,
    ]);
    (0u8..6, 1u16..5, status).prop_map(|(kind, port, status)| {
        let m = member(port, status);
        match kind {
            0 => match status {
                MemberStatus::Joining => ClusterEvent::MemberJoined(m),
                MemberStatus::WeaklyUp => ClusterEvent::MemberWeaklyUp(m),
                MemberStatus::Up => ClusterEvent::MemberUp(m),
                MemberStatus::Leaving => ClusterEvent::MemberLeft(m),
                MemberStatus::Exiting => ClusterEvent::MemberExited(m),
                _ => ClusterEvent::MemberDown(m),
            },
            1 => ClusterEvent::MemberRemoved {
                member: member(port, MemberStatus::Removed),
                previous: status,
            },
            2 => ClusterEvent::MemberUnreachable(m),
            3 => ClusterEvent::MemberReachable(m),
            4 => ClusterEvent::LeaderChanged((port % 2 == 0).then(|| node(port).address)),
            _ => ClusterEvent::SelfUp(m),
        }
    })
}

proptest! {
    /// A client that read up to any point, disconnected and resumed, gets every later event
    /// exactly once and in order, or (when they fell out of the ring) a snapshot equal to the
    /// membership all events add up to, at the journal's last position.
    #[test]
    fn a_resumed_stream_misses_nothing_and_repeats_nothing(
        events in prop::collection::vec(any_event(), 0..40),
        capacity in 1usize..12,
        read in any::<prop::sample::Index>(),
        types in prop::collection::btree_set(prop::sample::select(EVENT_TYPES.to_vec()), 0..4),
    ) {
        let mut journal = journal(capacity);
        let mut everything = Membership::default();
        let mut sent = Vec::new();
        for event in &events {
            everything.apply(event);
            if let Some(sequence) = journal.record(event) {
                sent.push((sequence, akka_type(event).unwrap()));
            }
        }
        prop_assert_eq!(journal.state(), &everything);
        prop_assert_eq!(journal.last(), sent.len() as u64);
        // What the client had seen: the first `seen` events.
        let seen = read.index(sent.len() + 1) as u64;
        let filter = TypeFilter::parse(types.iter().copied()).unwrap();
        let opening = journal.open(Some(journal.id(seen)), false).unwrap();
        prop_assert_eq!(opening.position, journal.last());
        let missed_kept = sent.len() as u64 - seen <= capacity as u64;
        prop_assert_eq!(opening.snapshot, !missed_kept);
        if missed_kept {
            let replayed: Vec<(u64, &str)> = opening
                .replay
                .iter()
                .filter(|r| filter.accepts(r.event))
                .map(|r| (r.sequence, r.event))
                .collect();
            let expected: Vec<(u64, &str)> = sent
                .iter()
                .copied()
                .filter(|(s, name)| *s > seen && filter.accepts(name))
                .collect();
            prop_assert_eq!(replayed, expected);
        } else {
            prop_assert!(opening.replay.is_empty());
            let members = journal.snapshot(&[])["members"].as_array().unwrap().len();
            prop_assert_eq!(members, everything.members.len());
        }
    }

    /// Whatever the text, an id parses to what prints back the same, or is refused.
    #[test]
    fn an_id_reads_back_as_printed(incarnation in any::<u64>(), sequence in any::<u64>()) {
        let id = EventId { incarnation, sequence };
        prop_assert_eq!(id.to_string().parse::<EventId>(), Ok(id));
    }
}
