use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::Address;

fn host(i: usize) -> UniqueAddress {
    UniqueAddress {
        address: Address::new("sim", &format!("10.0.2.{}", i + 1), 2552),
        incarnation: i as u64 + 1,
    }
}

fn feed(state: &mut Option<Rebalancer>, event: Event, now: Instant) -> Vec<Action> {
    let (next, actions) = step(state.take().expect("state"), event, now);
    *state = Some(next);
    actions
}

fn moves(actions: &[Action]) -> Vec<(String, UniqueAddress)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Move { key, to } => Some((key.clone(), to.clone())),
            Action::Report(_) => None,
        })
        .collect()
}

/// Keys `k0..kN` whose last message was `i` seconds before `now` for key `ki`.
fn keys(n: usize, now: Instant) -> Vec<(String, Instant)> {
    (0..n)
        .map(|i| (format!("k{i}"), now - Duration::from_secs(i as u64)))
        .collect()
}

#[test]
fn off_by_default_nothing_moves_after_a_membership_change() {
    let now = Instant::now() + Duration::from_secs(3_600);
    let mut state = Some(Rebalancer::new(host(0), RebalanceOptions::default()).expect("valid"));
    feed(&mut state, Event::Members([host(0), host(1)].into()), now);
    for _ in 0..3 {
        let actions = feed(
            &mut state,
            Event::Tick {
                activations: keys(100, now),
            },
            now,
        );
        assert!(actions.is_empty(), "{actions:?}");
    }
}

#[test]
fn bad_options_are_refused_naming_the_field_and_what_is_allowed() {
    let me = host(0);
    let cases = [
        (
            RebalanceOptions::enabled().with_interval(Duration::ZERO),
            "rebalance interval must be at least 1 ms, got 0ns",
        ),
        (
            RebalanceOptions::enabled().with_max_moves_per_interval(0),
            "rebalance max_moves_per_interval must be at least 1, got 0",
        ),
        (
            RebalanceOptions::enabled().with_tolerance(1.5),
            "rebalance tolerance must be a number from 0 to 1 (0.1 = within 10% of even), got 1.5",
        ),
        (
            RebalanceOptions::enabled().with_tolerance(f64::NAN),
            "rebalance tolerance must be a number from 0 to 1 (0.1 = within 10% of even), got NaN",
        ),
    ];
    for (options, message) in cases {
        let error = Rebalancer::new(me.clone(), options).expect_err("refused");
        assert_eq!(error.to_string(), message);
    }
    assert!(Rebalancer::new(me, RebalanceOptions::enabled()).is_ok());
}

#[test]
fn the_plan_evens_out_exactly_and_moves_nothing_for_rounding() {
    let c = |ns: &[u64]| -> Vec<(UniqueAddress, u64)> {
        ns.iter().enumerate().map(|(i, n)| (host(i), *n)).collect()
    };
    assert_eq!(
        plan(&c(&[9, 0, 0])),
        vec![(host(0), host(1), 3), (host(0), host(2), 3)]
    );
    assert_eq!(plan(&c(&[4, 3, 4])), vec![]);
    assert_eq!(
        plan(&c(&[10, 10, 10, 0, 0])),
        vec![
            (host(0), host(3), 4),
            (host(1), host(3), 2),
            (host(1), host(4), 2),
            (host(2), host(4), 4)
        ]
    );
    assert!(balanced(&c(&[100, 109, 91]), 0.1));
    assert!(!balanced(&c(&[100, 112, 88]), 0.1));
    // A difference of one is always balanced, however small the share.
    assert!(balanced(&c(&[1, 0]), 0.0));
}

#[test]
fn a_round_moves_at_most_its_bound_longest_idle_first_and_waits_for_its_moves() {
    let now = Instant::now() + Duration::from_secs(3_600);
    let options = RebalanceOptions::enabled().with_max_moves_per_interval(3);
    let mut state = Some(Rebalancer::new(host(0), options).expect("valid"));
    feed(&mut state, Event::Members([host(0), host(1)].into()), now);
    // Host 1 is new: nothing published, counts as 0. k9 is the longest idle.
    let actions = feed(
        &mut state,
        Event::Tick {
            activations: keys(10, now),
        },
        now,
    );
    let first = moves(&actions);
    assert_eq!(
        first,
        vec![
            ("k9".to_owned(), host(1)),
            ("k8".to_owned(), host(1)),
            ("k7".to_owned(), host(1)),
        ]
    );
    assert!(
        actions.contains(&Action::Report(RebalanceEvent::MoveStarted {
            key: "k9".to_owned(),
            from: host(0),
            to: host(1),
        }))
    );
    // Moves in flight: the next round starts nothing.
    let actions = feed(
        &mut state,
        Event::Tick {
            activations: keys(10, now),
        },
        now,
    );
    assert!(actions.is_empty(), "{actions:?}");
    let done = feed(
        &mut state,
        Event::MoveFinished {
            key: "k9".to_owned(),
            outcome: Ok(()),
        },
        now,
    );
    assert_eq!(
        done,
        vec![Action::Report(RebalanceEvent::Moved {
            key: "k9".to_owned(),
            from: host(0),
            to: host(1),
        })]
    );
    // A finish for a key not in flight is ignored.
    assert!(
        feed(
            &mut state,
            Event::MoveFinished {
                key: "k9".to_owned(),
                outcome: Ok(()),
            },
            now,
        )
        .is_empty()
    );
    for key in ["k8", "k7"] {
        feed(
            &mut state,
            Event::MoveFinished {
                key: key.to_owned(),
                outcome: Err("target gone".to_owned()),
            },
            now,
        );
    }
    assert_eq!(state.as_ref().expect("state").in_flight(), 0);
}

#[test]
fn balanced_is_reported_once_and_rebalancing_stops_until_membership_changes() {
    let now = Instant::now() + Duration::from_secs(3_600);
    let mut state = Some(Rebalancer::new(host(0), RebalanceOptions::enabled()).expect("valid"));
    feed(&mut state, Event::Members([host(0), host(1)].into()), now);
    feed(
        &mut state,
        Event::Load {
            host: host(1),
            activations: 10,
        },
        now,
    );
    let tick = || Event::Tick {
        activations: keys(10, now),
    };
    let actions = feed(&mut state, tick(), now);
    assert_eq!(
        actions,
        vec![Action::Report(RebalanceEvent::Balanced {
            spread: vec![(host(0), 10), (host(1), 10)],
        })]
    );
    assert!(!state.as_ref().expect("state").is_armed());
    assert!(feed(&mut state, tick(), now).is_empty());
    // The same view again is no change.
    feed(&mut state, Event::Members([host(0), host(1)].into()), now);
    assert!(feed(&mut state, tick(), now).is_empty());
    feed(
        &mut state,
        Event::Members([host(0), host(1), host(2)].into()),
        now,
    );
    let actions = feed(&mut state, tick(), now);
    assert_eq!(moves(&actions).len(), 3, "{actions:?}");
}

// --- property test: a cluster of rebalancers ----------------------------------------------------

/// Hosts with keys (key -> last activity), every host rebalancing, counts published exactly
/// between rounds, each move finishing (or failing) before the next round.
struct Cluster {
    now: Instant,
    machines: BTreeMap<usize, Option<Rebalancer>>,
    keys: BTreeMap<usize, BTreeMap<String, Instant>>,
    options: RebalanceOptions,
}

impl Cluster {
    fn counts(&self) -> Vec<(UniqueAddress, u64)> {
        self.keys
            .iter()
            .map(|(h, k)| (host(*h), k.len() as u64))
            .collect()
    }

    fn view(&mut self) {
        let members: BTreeSet<UniqueAddress> = self.keys.keys().map(|&h| host(h)).collect();
        let loads = self.counts();
        for machine in self.machines.values_mut() {
            feed(machine, Event::Members(members.clone()), self.now);
            for (h, n) in &loads {
                feed(
                    machine,
                    Event::Load {
                        host: h.clone(),
                        activations: *n,
                    },
                    self.now,
                );
            }
        }
    }

    /// One round; the moves each host started, with their targets.
    fn round(&mut self, rng: &mut SmallRng, fail_percent: u32) -> (usize, bool) {
        self.now += self.options.interval();
        let mut started = 0;
        let mut all_balanced = true;
        let hosts: Vec<usize> = self.machines.keys().copied().collect();
        let mut pending: Vec<(usize, String, usize)> = Vec::new();
        let mut in_flight: BTreeSet<String> = BTreeSet::new();
        for h in &hosts {
            let activations: Vec<(String, Instant)> = self.keys[h]
                .iter()
                .map(|(k, at)| (k.clone(), *at))
                .collect();
            let machine = self.machines.get_mut(h).expect("machine");
            let actions = feed(machine, Event::Tick { activations }, self.now);
            let moved = moves(&actions);
            assert!(
                moved.len() <= self.options.max_moves_per_interval,
                "host {h} started {} moves in one round",
                moved.len()
            );
            // Every move is reported as it starts.
            for (key, to) in &moved {
                assert!(
                    actions.contains(&Action::Report(RebalanceEvent::MoveStarted {
                        key: key.clone(),
                        from: host(*h),
                        to: to.clone(),
                    }))
                );
                assert!(in_flight.insert(key.clone()), "{key} moved twice at once");
                assert!(self.keys[h].contains_key(key), "{key} is not on host {h}");
            }
            // Idle first: nothing that stays is idler than something that moves.
            let moved_set: BTreeSet<&String> = moved.iter().map(|(k, _)| k).collect();
            if let Some(newest_moved) = moved.iter().map(|(k, _)| self.keys[h][k]).max() {
                for (k, at) in &self.keys[h] {
                    if !moved_set.contains(k) {
                        assert!(*at >= newest_moved, "{k} stayed but was idler");
                    }
                }
            }
            if actions
                .iter()
                .any(|a| matches!(a, Action::Report(RebalanceEvent::MoveStarted { .. })))
            {
                all_balanced = false;
            }
            let armed = self.machines[h].as_ref().expect("machine").is_armed();
            all_balanced &= !armed;
            started += moved.len();
            for (key, to) in moved {
                let to = usize::try_from(to.incarnation - 1).expect("sim host");
                pending.push((*h, key, to));
            }
        }
        // The moves finish before the next round, some failing.
        for (from, key, to) in pending {
            let ok = rng.random_range(0..100) >= fail_percent;
            let machine = self.machines.get_mut(&from).expect("machine");
            let actions = feed(
                machine,
                Event::MoveFinished {
                    key: key.clone(),
                    outcome: if ok {
                        Ok(())
                    } else {
                        Err("refused".to_owned())
                    },
                },
                self.now,
            );
            assert_eq!(actions.len(), 1, "{actions:?}");
            if ok {
                let at = self
                    .keys
                    .get_mut(&from)
                    .expect("host")
                    .remove(&key)
                    .expect("key");
                self.keys.get_mut(&to).expect("target").insert(key, at);
            }
        }
        for machine in self.machines.values() {
            assert_eq!(machine.as_ref().expect("machine").in_flight(), 0);
        }
        self.view();
        (started, all_balanced)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// After hosts are added or removed, rebalancing moves activations (bounded per round,
    /// idle first, one move per key at a time, every move reported) until every host is within
    /// 10% of the even share, then stops.
    #[test]
    fn rebalancing_converges_to_within_ten_percent_of_even_and_stops(
        seed in any::<u64>(),
        initial in proptest::collection::vec(0usize..400, 1..5),
        added in 0usize..3,
        remove_one in any::<bool>(),
        max_moves in prop_oneof![Just(100usize), 1usize..20],
        fail_percent in prop_oneof![Just(0u32), 1u32..30],
    ) {
        let mut rng = SmallRng::seed_from_u64(seed);
        let options = RebalanceOptions::enabled().with_max_moves_per_interval(max_moves);
        let start = Instant::now() + Duration::from_secs(100_000);
        let mut cluster = Cluster {
            now: start,
            machines: BTreeMap::new(),
            keys: BTreeMap::new(),
            options,
        };
        let mut next_key = 0;
        for (h, n) in initial.iter().enumerate() {
            let mut keys = BTreeMap::new();
            for _ in 0..*n {
                let idle = Duration::from_secs(rng.random_range(0..10_000));
                keys.insert(format!("k{next_key}"), start - idle);
                next_key += 1;
            }
            cluster.keys.insert(h, keys);
            cluster
                .machines
                .insert(h, Some(Rebalancer::new(host(h), options).expect("valid")));
        }
        cluster.view();
        // Settle the initial spread (hosts start armed: their first view is a change).
        for _ in 0..2_000 {
            if cluster.round(&mut rng, fail_percent).1 {
                break;
            }
        }
        // The membership change.
        let first_new = initial.len();
        for h in first_new..first_new + added {
            cluster.keys.insert(h, BTreeMap::new());
            cluster
                .machines
                .insert(h, Some(Rebalancer::new(host(h), options).expect("valid")));
        }
        if remove_one && cluster.keys.len() > 1 {
            // Its activations are gone (they re-activate on their next messages).
            cluster.keys.remove(&0);
            cluster.machines.remove(&0);
        }
        cluster.view();
        let total: usize = cluster.keys.values().map(BTreeMap::len).sum();
        let bound = 10 + 4 * total.div_ceil(max_moves);
        let mut rounds = 0;
        loop {
            let (started, done) = cluster.round(&mut rng, fail_percent);
            rounds += 1;
            if done {
                prop_assert_eq!(started, 0);
                break;
            }
            prop_assert!(rounds <= bound, "not balanced after {} rounds: {:?}", rounds, cluster.counts());
        }
        let counts = cluster.counts();
        prop_assert!(balanced(&counts, DEFAULT_TOLERANCE), "{:?}", counts);
        prop_assert_eq!(counts.iter().map(|(_, n)| *n as usize).sum::<usize>(), total);
        // Stopped: more rounds move nothing.
        for _ in 0..3 {
            let (started, done) = cluster.round(&mut rng, fail_percent);
            prop_assert_eq!(started, 0);
            prop_assert!(done);
        }
    }
}

#[test]
fn ten_thousand_activations_on_three_hosts_spread_over_five_in_thirteen_default_rounds() {
    let options = RebalanceOptions::enabled();
    let start = Instant::now() + Duration::from_secs(100_000);
    let mut cluster = Cluster {
        now: start,
        machines: BTreeMap::new(),
        keys: BTreeMap::new(),
        options,
    };
    for h in 0..5 {
        let keys: BTreeMap<String, Instant> = if h < 3 {
            (0..3_334 - usize::from(h == 2) * 2)
                .map(|i| {
                    (
                        format!("h{h}-k{i}"),
                        start - Duration::from_millis(i as u64),
                    )
                })
                .collect()
        } else {
            BTreeMap::new()
        };
        cluster.keys.insert(h, keys);
        cluster
            .machines
            .insert(h, Some(Rebalancer::new(host(h), options).expect("valid")));
    }
    assert_eq!(
        cluster.keys.values().map(BTreeMap::len).sum::<usize>(),
        10_000
    );
    cluster.view();
    let mut rng = SmallRng::seed_from_u64(7);
    let mut rounds_moving = 0;
    let mut moved = 0;
    loop {
        let (started, done) = cluster.round(&mut rng, 0);
        if done {
            break;
        }
        moved += started;
        rounds_moving += 1;
        assert!(rounds_moving <= 20, "{:?}", cluster.counts());
    }
    let counts: Vec<u64> = cluster.counts().iter().map(|(_, n)| *n).collect();
    println!(
        "10,000 activations, 3 -> 5 hosts: {rounds_moving} rounds of at most 100 moves per host \
         ({moved} moves, {:?} at the default interval), spread {counts:?}",
        options.interval() * rounds_moving
    );
    // 100 per old host and round towards 2,000 each; it stops as soon as every host is within
    // 10% of 2,000 (1,934 on the last new host), which is one round before exactly even.
    assert_eq!(rounds_moving, 13);
    assert_eq!(moved, 3_900);
    assert!(
        counts.iter().all(|n| n.abs_diff(2_000) <= 200),
        "{counts:?}"
    );
    assert_eq!(counts.iter().sum::<u64>(), 10_000);
}
