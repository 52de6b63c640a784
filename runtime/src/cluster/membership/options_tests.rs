//! `MembershipOptions`: the setters set what they say, and settings that cannot work are
//! refused with the field, the value and what is allowed.

use std::time::Duration;

use super::{Downing, FailureDetectorOptions, MembershipOptions, OptionsError};
use crate::Address;

#[test]
fn every_setter_is_read_back_by_its_getter() {
    let seed: Address = "troupe://demo@10.0.0.1:2551".parse().unwrap();
    let detector = FailureDetectorOptions::default().with_threshold(10.0);
    let options = MembershipOptions::default()
        .with_seeds([seed.clone()])
        .with_roles(["a", "b"])
        .with_gossip_interval(Duration::from_millis(100))
        .with_heartbeat_interval(Duration::from_millis(250))
        .with_failure_detector(detector)
        .with_down_after(None)
        .with_downing(Downing::KeepMajority)
        .with_seed_node_timeout(Duration::from_millis(300))
        .with_join_timeout(Duration::from_millis(400))
        .with_removal_grace(Duration::ZERO);
    assert_eq!(options.seeds(), [seed]);
    assert_eq!(
        options
            .roles()
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(options.gossip_interval(), Duration::from_millis(100));
    assert_eq!(options.heartbeat_interval(), Duration::from_millis(250));
    assert_eq!(options.failure_detector(), detector);
    assert_eq!(options.down_after(), None);
    assert_eq!(options.downing(), Downing::KeepMajority);
    assert_eq!(options.seed_node_timeout(), Duration::from_millis(300));
    assert_eq!(options.join_timeout(), Duration::from_millis(400));
    assert_eq!(options.removal_grace(), Duration::ZERO);
    assert_eq!(options.validate(), Ok(()));
}

#[test]
fn a_zero_interval_or_timeout_is_refused_naming_the_field() {
    let defaults = MembershipOptions::default();
    assert_eq!(defaults.validate(), Ok(()));
    let zero = Duration::ZERO;
    let cases = [
        (
            "gossip_interval",
            defaults.clone().with_gossip_interval(zero),
        ),
        (
            "heartbeat_interval",
            defaults.clone().with_heartbeat_interval(zero),
        ),
        (
            "seed_node_timeout",
            defaults.clone().with_seed_node_timeout(zero),
        ),
        ("join_timeout", defaults.clone().with_join_timeout(zero)),
        ("down_after", defaults.clone().with_down_after(Some(zero))),
    ];
    for (field, options) in cases {
        assert_eq!(
            options.validate(),
            Err(OptionsError {
                field,
                value: "0ns".to_owned(),
                allowed: "> 0",
            })
        );
        assert_eq!(
            options.validate().unwrap_err().to_string(),
            format!("{field} must be > 0, got 0ns")
        );
    }
}

#[test]
fn the_failure_detector_is_checked_with_the_membership() {
    let options = MembershipOptions::default()
        .with_failure_detector(FailureDetectorOptions::default().with_threshold(-1.0));
    let error = options.validate().unwrap_err();
    assert_eq!(error.field, "failure_detector.threshold");
    assert_eq!(
        error.to_string(),
        "failure_detector.threshold must be a finite number > 0 (8 is typical), got -1"
    );
}

#[test]
fn the_failure_detector_expects_the_membership_heartbeat_interval() {
    let options = MembershipOptions::default().with_heartbeat_interval(Duration::from_secs(3));
    let me = crate::UniqueAddress {
        address: "troupe://demo@10.0.0.1:2551".parse().unwrap(),
        incarnation: 1,
    };
    let membership = super::Membership::new(me, options, tokio::time::Instant::now(), 7);
    assert_eq!(
        membership.settings.failure_detector,
        FailureDetectorOptions::default().expecting_heartbeats_every(Duration::from_secs(3))
    );
}
