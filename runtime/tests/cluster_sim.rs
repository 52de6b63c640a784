//! The real cluster daemons (actor system, remoting, membership) over the simulated network on
//! a paused clock: scenarios replay exactly from their seed.

use std::time::Duration;

use troupe::cluster::{ClusterEvent, ClusterNotification, Departure};
use troupe::testkit::{SimCluster, sim_address};

const LIMIT: Duration = Duration::from_secs(60);

/// Every event received so far (the initial state is skipped).
fn drain(subscription: &mut troupe::cluster::ClusterSubscription) -> Vec<ClusterEvent> {
    let mut events = Vec::new();
    while let Some(notification) = subscription.try_recv() {
        if let ClusterNotification::Event(event) = notification {
            events.push(event);
        }
    }
    events
}

#[tokio::test(start_paused = true)]
async fn three_daemons_converge_over_the_simulated_network_and_agree_on_the_leader() {
    let mut sim = SimCluster::new(11);
    for _ in 0..3 {
        sim.start_node(&[]);
    }
    let took = sim.wait_all_up(3, LIMIT).await;
    for i in sim.live() {
        assert_eq!(
            sim.view(i).leader,
            Some(sim_address(0)),
            "seed {}",
            sim.seed()
        );
    }
    assert!(
        took < Duration::from_secs(5),
        "converged after {took:?} of virtual time"
    );
}

#[tokio::test(start_paused = true)]
async fn a_killed_daemon_is_unreachable_within_3s_then_downed_and_removed_everywhere() {
    let mut sim = SimCluster::new(12);
    for _ in 0..3 {
        sim.start_node(&[]);
    }
    sim.wait_all_up(3, LIMIT).await;
    let mut events = sim.node(0).cluster.subscribe();
    let victim = sim.node(2).node.clone();
    sim.kill(2);
    let unreachable = sim
        .wait_until(LIMIT, |s| {
            [0, 1]
                .iter()
                .all(|&i| s.view(i).unreachable.contains(&victim))
        })
        .await;
    assert!(
        unreachable <= Duration::from_secs(3),
        "unreachable after {unreachable:?}"
    );
    sim.wait_all_up(2, LIMIT).await;
    let kinds: Vec<&str> = drain(&mut events).iter().map(ClusterEvent::kind).collect();
    let position = |kind| kinds.iter().position(|k| *k == kind);
    assert!(
        position("MemberUnreachable") < position("MemberDown")
            && position("MemberDown") < position("MemberRemoved"),
        "{kinds:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_healed_partition_brings_member_reachable_and_member_up() {
    let settings = troupe::cluster::MembershipOptions::default().with_down_after(None);
    let mut sim = SimCluster::with_settings(13, settings);
    for _ in 0..3 {
        sim.start_node(&[]);
    }
    sim.wait_all_up(3, LIMIT).await;
    let mut events = sim.node(0).cluster.subscribe();
    let cut = sim.node(2).node.clone();
    sim.partition(&[0, 1], &[2]);
    sim.wait_until(LIMIT, |s| s.view(0).unreachable.contains(&cut))
        .await;
    sim.heal();
    sim.wait_all_up(3, LIMIT).await;
    let seen = drain(&mut events);
    let reachable = seen
        .iter()
        .position(|e| matches!(e, ClusterEvent::MemberReachable(m) if m.node == cut))
        .expect("MemberReachable after the heal");
    assert!(
        matches!(&seen[reachable + 1], ClusterEvent::MemberUp(m) if m.node == cut),
        "{seen:?}"
    );
}

async fn churn_trace(seed: u64) -> Vec<String> {
    let mut sim = SimCluster::new(seed);
    for _ in 0..4 {
        sim.start_node(&[]);
    }
    sim.wait_all_up(4, LIMIT).await;
    sim.partition(&[0, 1], &[3]);
    sim.run_for(Duration::from_secs(2)).await;
    sim.heal();
    sim.kill(2);
    sim.wait_all_up(3, LIMIT).await;
    sim.network()
        .trace()
        .iter()
        .map(|event| {
            format!(
                "{:?} {} {} {} {:?}",
                event.at, event.from, event.to, event.len, event.outcome
            )
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn the_same_seed_replays_the_same_network_trace() {
    let first = churn_trace(21).await;
    let second = churn_trace(21).await;
    assert!(
        first.len() > 100,
        "a real run exchanges many frames ({})",
        first.len()
    );
    assert_eq!(first, second, "seed 21 must replay frame for frame");
}

#[tokio::test(start_paused = true)]
async fn randomized_daemon_runs_end_converged_with_nobody_stuck() {
    use rand::{Rng, SeedableRng};
    for seed in 100..120u64 {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let mut sim = SimCluster::new(seed);
        for _ in 0..5 {
            sim.start_node(&[]);
        }
        sim.wait_all_up(5, LIMIT).await;
        for _ in 0..4 {
            let live: Vec<usize> = sim.live().filter(|&i| i != 0).collect();
            match rng.random_range(0..3) {
                0 if live.len() > 2 => {
                    let victim = live[rng.random_range(0..live.len())];
                    sim.kill(victim);
                }
                1 if live.len() > 2 => {
                    let leaver = live[rng.random_range(0..live.len())];
                    sim.node(leaver).cluster.leave();
                }
                _ => {
                    let cut = live[rng.random_range(0..live.len())];
                    sim.partition(&[0], &[cut]);
                }
            }
            sim.run_for(Duration::from_millis(rng.random_range(500..3_000)))
                .await;
            sim.heal();
        }
        // Every live node that is still a member ends converged, all up, with no dead or
        // departed member lingering.
        sim.wait_until(LIMIT, |s| {
            let members: Vec<usize> = s
                .live()
                .filter(|&i| !s.node(i).cluster.is_terminated())
                .collect();
            members.iter().all(|&i| {
                let v = s.view(i);
                v.converged
                    && v.unreachable.is_empty()
                    && v.members.iter().all(|m| {
                        m.status == troupe::cluster::MemberStatus::Up
                            && members.iter().any(|&j| s.node(j).node == m.node)
                    })
            })
        })
        .await;
    }
}

#[tokio::test(start_paused = true)]
async fn the_daemon_says_how_its_node_departed_downed_is_fenced_leaving_is_left() {
    let mut sim = SimCluster::new(14);
    for _ in 0..3 {
        sim.start_node(&[]);
    }
    sim.wait_all_up(3, LIMIT).await;
    let (downed, leaver) = (sim.node(2).cluster.clone(), sim.node(1).cluster.clone());
    assert_eq!(downed.departure(), None);
    sim.node(0).cluster.down(sim_address(2));
    let departure = tokio::time::timeout(LIMIT, downed.departed())
        .await
        .unwrap();
    assert!(departure.is_fenced(), "{departure:?}");
    leaver.leave();
    let departure = tokio::time::timeout(LIMIT, leaver.departed())
        .await
        .unwrap();
    assert_eq!(departure, Departure::Left);
    assert_eq!(sim.node(0).cluster.departure(), None);
    sim.node(0).cluster.shutdown();
    let departure = tokio::time::timeout(LIMIT, sim.node(0).cluster.departed())
        .await
        .unwrap();
    assert_eq!(departure, Departure::Stopped);
}
