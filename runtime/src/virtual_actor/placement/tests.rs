use proptest::prelude::*;

use super::*;
use crate::Address;

fn host(i: usize) -> UniqueAddress {
    UniqueAddress {
        address: Address::new("sim", &format!("10.0.0.{}", i + 1), 2552),
        incarnation: 1,
    }
}

fn request<'a>(
    candidates: &'a [Candidate<'a>],
    local: Option<usize>,
    random: u64,
) -> PlacementRequest<'a> {
    PlacementRequest {
        key: "cart-1",
        candidates,
        local,
        random,
    }
}

#[test]
fn activation_count_prefers_a_host_that_published_nothing_over_one_that_published_zero() {
    let hosts: Vec<UniqueAddress> = (0..3).map(host).collect();
    let candidates = [
        Candidate {
            node: &hosts[0],
            activations: Some(0),
        },
        Candidate {
            node: &hosts[1],
            activations: None,
        },
        Candidate {
            node: &hosts[2],
            activations: Some(7),
        },
    ];
    for random in 0..20 {
        assert_eq!(
            ActivationCountPlacement.place(&request(&candidates, Some(0), random)),
            Some(1)
        );
    }
}

#[test]
fn activation_count_picks_the_least_loaded_host_when_every_load_is_known() {
    let hosts: Vec<UniqueAddress> = (0..3).map(host).collect();
    let candidates: Vec<Candidate<'_>> = hosts
        .iter()
        .zip([12, 3, 9])
        .map(|(node, n)| Candidate {
            node,
            activations: Some(n),
        })
        .collect();
    assert_eq!(
        ActivationCountPlacement.place(&request(&candidates, None, 99)),
        Some(1)
    );
}

#[test]
fn prefer_local_places_on_the_placing_host_and_otherwise_at_random() {
    let hosts: Vec<UniqueAddress> = (0..4).map(host).collect();
    let candidates: Vec<Candidate<'_>> = hosts
        .iter()
        .map(|node| Candidate {
            node,
            activations: Some(100),
        })
        .collect();
    assert_eq!(
        PreferLocalPlacement.place(&request(&candidates, Some(2), 5)),
        Some(2)
    );
    assert_eq!(
        PreferLocalPlacement.place(&request(&candidates, None, 5)),
        Some(1)
    );
}

#[test]
fn no_candidate_means_no_placement() {
    assert_eq!(ActivationCountPlacement.place(&request(&[], None, 1)), None);
    assert_eq!(RandomPlacement.place(&request(&[], None, 1)), None);
    assert_eq!(PreferLocalPlacement.place(&request(&[], None, 1)), None);
}

proptest! {
    /// Whatever the loads, activation-count placement answers a candidate, never a host with
    /// a higher known load than another candidate, and an unknown one whenever there is one.
    #[test]
    fn activation_count_answers_a_coldest_candidate(
        loads in proptest::collection::vec(proptest::option::of(0u64..5), 1..8),
        random: u64,
    ) {
        let hosts: Vec<UniqueAddress> = (0..loads.len()).map(host).collect();
        let candidates: Vec<Candidate<'_>> = hosts
            .iter()
            .zip(&loads)
            .map(|(node, &activations)| Candidate { node, activations })
            .collect();
        let chosen = ActivationCountPlacement
            .place(&request(&candidates, None, random))
            .expect("a candidate");
        prop_assert!(chosen < candidates.len());
        if loads.iter().any(Option::is_none) {
            prop_assert_eq!(loads[chosen], None);
        } else {
            let min = loads.iter().flatten().min().copied();
            prop_assert_eq!(loads[chosen], min);
        }
    }

    /// Random placement reaches every candidate and only candidates.
    #[test]
    fn random_placement_answers_a_candidate(len in 1usize..10, random: u64) {
        let hosts: Vec<UniqueAddress> = (0..len).map(host).collect();
        let candidates: Vec<Candidate<'_>> = hosts
            .iter()
            .map(|node| Candidate { node, activations: None })
            .collect();
        let chosen = RandomPlacement.place(&request(&candidates, None, random));
        prop_assert_eq!(chosen, Some(usize::try_from(random % len as u64).unwrap()));
    }
}
