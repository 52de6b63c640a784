use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};

use proptest::prelude::*;

use super::*;

fn ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, n))
}

fn small() -> AdmissionOptions {
    AdmissionOptions::default()
        .with_general_slots(4)
        .with_reserved_slots(2)
        .with_per_source_slots(2)
        .with_max_known_sources(3)
        .with_known_for(Duration::from_secs(60))
}

/// Steps `state` and returns it with the actions.
fn run(state: Admission, event: AdmissionEvent, now: Instant) -> (Admission, Vec<AdmissionAction>) {
    step(state, event, now)
}

fn arrive(
    state: Admission,
    id: u64,
    source: IpAddr,
    now: Instant,
) -> (Admission, Vec<AdmissionAction>) {
    run(state, AdmissionEvent::Arrived { id, source }, now)
}

/// Makes `source` known by one authenticated connection.
fn prove(state: Admission, id: u64, source: IpAddr, now: Instant) -> Admission {
    let (state, actions) = arrive(state, id, source, now);
    assert!(matches!(
        actions.last(),
        Some(AdmissionAction::Admit { .. })
    ));
    run(state, AdmissionEvent::Authenticated { id }, now).0
}

#[test]
fn connections_are_admitted_to_the_general_pool_until_it_is_full_then_the_oldest_is_evicted() {
    let now = Instant::now();
    let mut state = Admission::new(small());
    for id in 0..4 {
        let actions;
        (state, actions) = arrive(state, id, ip(10 + id as u8), now);
        assert_eq!(
            actions,
            vec![AdmissionAction::Admit {
                id,
                pool: Pool::General
            }]
        );
    }
    let (state, actions) = arrive(state, 4, ip(20), now);
    assert_eq!(
        actions,
        vec![
            AdmissionAction::Evict {
                id: 0,
                pool: Pool::General
            },
            AdmissionAction::Admit {
                id: 4,
                pool: Pool::General
            },
        ]
    );
    assert_eq!(state.pending(Pool::General), 4);
}

#[test]
fn a_connection_that_sent_a_valid_first_message_outlives_silent_ones() {
    let now = Instant::now();
    let mut state = Admission::new(small());
    for id in 0..4 {
        (state, _) = arrive(state, id, ip(10 + id as u8), now);
    }
    (state, _) = run(state, AdmissionEvent::Progressed { id: 0 }, now);
    let (_, actions) = arrive(state, 4, ip(20), now);
    assert_eq!(
        actions[0],
        AdmissionAction::Evict {
            id: 1,
            pool: Pool::General
        }
    );
}

#[test]
fn one_source_may_hold_only_its_share_of_the_general_pool() {
    let now = Instant::now();
    let mut state = Admission::new(small());
    for id in 0..2 {
        (state, _) = arrive(state, id, ip(7), now);
    }
    let (state, actions) = arrive(state, 2, ip(7), now);
    assert_eq!(
        actions,
        vec![AdmissionAction::Refuse {
            id: 2,
            reason: Refusal::PerSourceLimit
        }]
    );
    // Its slots free up when its connections end.
    let (state, _) = run(state, AdmissionEvent::Ended { id: 0 }, now);
    let (_, actions) = arrive(state, 3, ip(7), now);
    assert_eq!(
        actions,
        vec![AdmissionAction::Admit {
            id: 3,
            pool: Pool::General
        }]
    );
}

#[test]
fn a_source_that_proved_the_secret_uses_the_reserved_pool_and_is_never_refused() {
    let now = Instant::now();
    let member = ip(1);
    let mut state = prove(Admission::new(small()), 100, member, now);
    // A flood fills the general pool.
    for id in 0..4 {
        (state, _) = arrive(state, id, ip(50 + id as u8), now);
    }
    // The member's reconnects take the reserved slots, beyond its per-source share.
    for id in 10..12 {
        let actions;
        (state, actions) = arrive(state, id, member, now);
        assert_eq!(
            actions,
            vec![AdmissionAction::Admit {
                id,
                pool: Pool::Reserved
            }]
        );
    }
    // Both pools full: the member's oldest pending connection yields, never the member.
    let (state, actions) = arrive(state, 12, member, now);
    assert_eq!(
        actions,
        vec![
            AdmissionAction::Evict {
                id: 10,
                pool: Pool::Reserved
            },
            AdmissionAction::Admit {
                id: 12,
                pool: Pool::Reserved
            },
        ]
    );
    assert_eq!(state.pending(Pool::General), 4);
}

#[test]
fn a_known_source_spills_into_the_general_pool_when_its_reserved_pool_is_full() {
    let now = Instant::now();
    let mut state = prove(Admission::new(small()), 100, ip(1), now);
    for id in 0..2 {
        (state, _) = arrive(state, id, ip(1), now);
    }
    let (_, actions) = arrive(state, 2, ip(1), now);
    assert_eq!(
        actions,
        vec![AdmissionAction::Admit {
            id: 2,
            pool: Pool::General
        }]
    );
}

#[test]
fn a_peer_this_node_dialled_is_known_before_it_ever_connects_here() {
    let now = Instant::now();
    let (state, _) = run(
        Admission::new(small()),
        AdmissionEvent::DialledPeerProved { source: ip(3) },
        now,
    );
    let (_, actions) = arrive(state, 1, ip(3), now);
    assert_eq!(
        actions,
        vec![AdmissionAction::Admit {
            id: 1,
            pool: Pool::Reserved
        }]
    );
}

#[test]
fn a_known_source_is_forgotten_after_known_for_and_when_the_set_is_full() {
    let t0 = Instant::now();
    let mut state = Admission::new(small());
    for n in 1..=3 {
        state = prove(
            state,
            u64::from(n),
            ip(n),
            t0 + Duration::from_secs(u64::from(n)),
        );
    }
    assert_eq!(state.known_sources(), 3);
    // A fourth forgets the one that proved least recently.
    let t4 = t0 + Duration::from_secs(4);
    state = prove(state, 4, ip(4), t4);
    assert_eq!(state.known_sources(), 3);
    assert!(!state.is_known(ip(1), t4));
    assert!(state.is_known(ip(2), t4));
    // Sixty seconds after its proof, a source is unknown again.
    assert!(!state.is_known(ip(2), t0 + Duration::from_secs(62)));
    assert!(state.is_known(ip(4), t0 + Duration::from_secs(62)));
}

#[test]
fn events_about_connections_no_longer_pending_change_nothing() {
    let now = Instant::now();
    let (state, _) = arrive(Admission::new(small()), 1, ip(9), now);
    let (state, _) = run(state, AdmissionEvent::Ended { id: 1 }, now);
    let (state, a) = run(state, AdmissionEvent::Ended { id: 1 }, now);
    let (state, b) = run(state, AdmissionEvent::Authenticated { id: 1 }, now);
    let (state, c) = run(state, AdmissionEvent::Progressed { id: 7 }, now);
    assert!(a.is_empty() && b.is_empty() && c.is_empty());
    assert_eq!(state.pending(Pool::General), 0);
    assert_eq!(state.known_sources(), 0);
}

#[test]
fn settings_that_cannot_work_are_rejected_naming_the_field() {
    for (settings, field) in [
        (
            AdmissionOptions::default().with_general_slots(0),
            "general_slots",
        ),
        (
            AdmissionOptions::default().with_reserved_slots(0),
            "reserved_slots",
        ),
        (
            AdmissionOptions::default().with_per_source_slots(0),
            "per_source_slots",
        ),
        (
            AdmissionOptions::default()
                .with_general_slots(4)
                .with_per_source_slots(5),
            "per_source_slots",
        ),
        (
            AdmissionOptions::default().with_max_known_sources(0),
            "max_known_sources",
        ),
        (
            AdmissionOptions::default().with_known_for(Duration::ZERO),
            "known_for",
        ),
    ] {
        let err = settings.validate().unwrap_err();
        assert_eq!(err.field, field);
        assert!(err.to_string().contains(field), "{err}");
    }
    assert!(AdmissionOptions::default().validate().is_ok());
}

/// One generated input: which event, for which of a few connections and sources.
#[derive(Debug, Clone)]
enum Op {
    Arrive { source: u8 },
    Progress { pick: prop::sample::Index },
    Authenticate { pick: prop::sample::Index },
    End { pick: prop::sample::Index },
    Dialled { source: u8 },
    Wait { secs: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..12).prop_map(|source| Op::Arrive { source }),
        2 => any::<prop::sample::Index>().prop_map(|pick| Op::Progress { pick }),
        1 => any::<prop::sample::Index>().prop_map(|pick| Op::Authenticate { pick }),
        2 => any::<prop::sample::Index>().prop_map(|pick| Op::End { pick }),
        1 => (0u8..12).prop_map(|source| Op::Dialled { source }),
        1 => (0u8..90).prop_map(|secs| Op::Wait { secs }),
    ]
}

/// What the test remembers of each pending connection, independent of the implementation.
#[derive(Debug, Clone)]
struct Model {
    source: IpAddr,
    pool: Pool,
    arrival: u64,
    progressed: bool,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn pools_stay_bounded_and_every_arrival_gets_exactly_one_decision(
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let settings = small();
        let mut state = Admission::new(settings.clone());
        let mut now = Instant::now();
        let mut model: HashMap<u64, Model> = HashMap::new();
        let mut known_at: HashMap<IpAddr, Instant> = HashMap::new();
        let mut next_id = 0u64;
        let mut arrivals = 0u64;
        for op in ops {
            let pending: Vec<u64> = {
                let mut ids: Vec<u64> = model.keys().copied().collect();
                ids.sort_unstable();
                ids
            };
            let event = match op {
                Op::Arrive { source } => {
                    next_id += 1;
                    AdmissionEvent::Arrived { id: next_id, source: ip(source) }
                }
                Op::Progress { pick } if !pending.is_empty() => {
                    AdmissionEvent::Progressed { id: pending[pick.index(pending.len())] }
                }
                Op::Authenticate { pick } if !pending.is_empty() => {
                    AdmissionEvent::Authenticated { id: pending[pick.index(pending.len())] }
                }
                Op::End { pick } if !pending.is_empty() => {
                    AdmissionEvent::Ended { id: pending[pick.index(pending.len())] }
                }
                Op::Dialled { source } => AdmissionEvent::DialledPeerProved { source: ip(source) },
                Op::Wait { secs } => {
                    now += Duration::from_secs(u64::from(secs));
                    continue;
                }
                _ => continue,
            };
            let was_known = match &event {
                AdmissionEvent::Arrived { source, .. } => state.is_known(*source, now),
                _ => false,
            };
            let actions;
            (state, actions) = step(state, event.clone(), now);
            match event {
                AdmissionEvent::Arrived { id, source } => {
                    let decisions: Vec<_> = actions.iter().filter(|a| matches!(a,
                        AdmissionAction::Admit { id: i, .. } | AdmissionAction::Refuse { id: i, .. } if *i == id)).collect();
                    prop_assert_eq!(decisions.len(), 1, "one decision for {}: {:?}", id, actions);
                    let evictions: Vec<_> = actions.iter().filter_map(|a| match a {
                        AdmissionAction::Evict { id, pool } => Some((*id, *pool)),
                        _ => None,
                    }).collect();
                    prop_assert!(evictions.len() <= 1);
                    for (victim, pool) in evictions {
                        let evicted = model.remove(&victim);
                        prop_assert!(evicted.is_some(), "evicted {} was not pending", victim);
                        let evicted = evicted.unwrap();
                        prop_assert_eq!(evicted.pool, pool);
                        // The least progressed, oldest first, of its pool.
                        for other in model.values().filter(|m| m.pool == pool) {
                            prop_assert!((evicted.progressed, evicted.arrival) < (other.progressed, other.arrival));
                        }
                        // Only a full pool evicts.
                        let in_pool = model.values().filter(|m| m.pool == pool).count() + 1;
                        let capacity = if pool == Pool::General { settings.general_slots() } else { settings.reserved_slots() };
                        prop_assert_eq!(in_pool, capacity);
                    }
                    match decisions[0] {
                        AdmissionAction::Admit { pool, .. } => {
                            if *pool == Pool::Reserved { prop_assert!(was_known); }
                            arrivals += 1;
                            model.insert(id, Model { source, pool: *pool, arrival: arrivals, progressed: false });
                        }
                        AdmissionAction::Refuse { reason, .. } => {
                            // Known sources are never refused; others only beyond their share.
                            prop_assert!(!was_known);
                            prop_assert_eq!(*reason, Refusal::PerSourceLimit);
                            let held = model.values().filter(|m| m.pool == Pool::General && m.source == source).count();
                            // At least its share: connections spilled into the general pool
                            // while the source was known count too, and may exceed it.
                            prop_assert!(held >= settings.per_source_slots, "held {} < share {}", held, settings.per_source_slots);
                        }
                        AdmissionAction::Evict { .. } => unreachable!(),
                    }
                }
                AdmissionEvent::Progressed { id } => {
                    prop_assert!(actions.is_empty());
                    if let Some(m) = model.get_mut(&id) { m.progressed = true; }
                }
                AdmissionEvent::Authenticated { id } => {
                    prop_assert!(actions.is_empty());
                    if let Some(m) = model.remove(&id) { known_at.insert(m.source, now); }
                }
                AdmissionEvent::Ended { id } => {
                    prop_assert!(actions.is_empty());
                    model.remove(&id);
                }
                AdmissionEvent::DialledPeerProved { source } => {
                    prop_assert!(actions.is_empty());
                    known_at.insert(source, now);
                }
            }
            // The implementation agrees with the model on what is pending, and stays bounded.
            for pool in [Pool::Reserved, Pool::General] {
                let expected = model.values().filter(|m| m.pool == pool).count();
                prop_assert_eq!(state.pending(pool), expected);
            }
            prop_assert!(state.pending(Pool::General) <= settings.general_slots());
            prop_assert!(state.pending(Pool::Reserved) <= settings.reserved_slots());
            let mut per_source: HashMap<IpAddr, usize> = HashMap::new();
            for m in model.values().filter(|m| m.pool == Pool::General) {
                *per_source.entry(m.source).or_default() += 1;
            }
            // Known sources may exceed the per-source share (they spill over); others never.
            for (source, count) in per_source {
                if count > settings.per_source_slots {
                    prop_assert!(known_at.contains_key(&source));
                }
            }
            prop_assert!(state.known_sources() <= settings.max_known_sources);
            // Never known without a proof, nor after known_for.
            let proven: HashSet<IpAddr> = known_at.iter()
                .filter(|(_, at)| now.saturating_duration_since(**at) < Duration::from_secs(60))
                .map(|(ip, _)| *ip).collect();
            for n in 0..12 {
                if state.is_known(ip(n), now) { prop_assert!(proven.contains(&ip(n))); }
            }
        }
    }

    /// A silent flood never takes the slot of a connection that sent a valid first message.
    #[test]
    fn a_silent_flood_never_evicts_a_connection_that_progressed(
        sources in proptest::collection::vec(0u8..255, 1..300),
    ) {
        let settings = AdmissionOptions::default().with_general_slots(16).with_per_source_slots(4);
        let now = Instant::now();
        let (mut state, _) = arrive(Admission::new(settings), 0, ip(254), now);
        (state, _) = run(state, AdmissionEvent::Progressed { id: 0 }, now);
        for (i, source) in sources.iter().enumerate() {
            let actions;
            (state, actions) = arrive(state, i as u64 + 1, ip(*source % 200), now);
            let evicted = AdmissionAction::Evict { id: 0, pool: Pool::General };
            prop_assert!(!actions.contains(&evicted));
        }
    }

    /// Under a flood, a pending connection keeps its slot until a pool's worth of newer
    /// connections was admitted after it: at rate R that is general_slots / R seconds, time
    /// enough for a real peer's handshake.
    #[test]
    fn a_flood_evicts_a_connection_only_after_a_pool_full_of_newer_admissions(
        sources in proptest::collection::vec(0u8..255, 1..300),
    ) {
        let settings = AdmissionOptions::default().with_general_slots(16).with_per_source_slots(4);
        let now = Instant::now();
        let (mut state, _) = arrive(Admission::new(settings), 0, ip(254), now);
        let mut admitted_after = 0;
        for (i, source) in sources.iter().enumerate() {
            let actions;
            (state, actions) = arrive(state, i as u64 + 1, ip(*source % 200), now);
            if actions.contains(&AdmissionAction::Evict { id: 0, pool: Pool::General }) {
                prop_assert_eq!(admitted_after, 15);
                break;
            }
            if actions.iter().any(|a| matches!(a, AdmissionAction::Admit { .. })) {
                admitted_after += 1;
            }
        }
    }
}
