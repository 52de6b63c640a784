//! Hostile input shared by the dashboard tests: the XSS corpus and report batches that put a
//! payload into every user-controlled field.

#![allow(dead_code)]

use troupe_protocol::{
    AgentHealth, AgentMeta, DeadLetterEvent, EventBody, HandOverTimedOut, HealthChange,
    LeaderChange, LeaseChange, MemberChange, MemberInfo, MemberStatus, ReportBatch, RouteesChange,
    RouterStarted, RoutingStrategy, SingletonInstance,
};
use troupe_server::testing::BatchBuilder;

/// A member change of `address`.
pub(crate) fn member(address: &str, status: MemberStatus, roles: &[&str]) -> MemberChange {
    MemberChange {
        member: MemberInfo {
            address: address.to_owned(),
            uid: 7,
            status,
            roles: roles.iter().map(|r| (*r).to_owned()).collect(),
        },
        previous_status: None,
        observers: Vec::new(),
    }
}

/// The payloads of `web/tests/xss-payloads.txt`.
pub(crate) fn payloads() -> Vec<String> {
    let text = include_str!("../../../web/tests/xss-payloads.txt");
    let payloads: Vec<String> = text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("# "))
        .map(str::to_owned)
        .collect();
    assert!(
        payloads.len() >= 50,
        "the corpus holds at least 50 payloads"
    );
    payloads
}

/// How askama writes `s` into HTML.
pub(crate) fn escaped(s: &str) -> String {
    s.replace('&', "&#38;")
        .replace('<', "&#60;")
        .replace('>', "&#62;")
        .replace('"', "&#34;")
        .replace('\'', "&#39;")
}

pub(crate) fn encoded(s: &str) -> String {
    troupe_web::format::encode(s)
}

/// One agent whose every user-controlled field is `p`.
pub(crate) fn hostile_batch(cluster: &str, p: &str, t: i64) -> ReportBatch {
    let mut batch = BatchBuilder::new(cluster, p, 1)
        .sent_at(t)
        .event(
            t - 50_000,
            EventBody::MemberUp(member(p, MemberStatus::Up, &[p])),
        )
        .event(
            t - 49_000,
            EventBody::MemberUnreachable(MemberChange {
                observers: vec![p.to_owned()],
                ..member(p, MemberStatus::Up, &[p])
            }),
        )
        .event(
            t - 48_000,
            EventBody::LeaderChanged(LeaderChange {
                leader: Some(p.to_owned()),
            }),
        )
        .event(
            t - 47_000,
            EventBody::SingletonStarted(SingletonInstance {
                singleton: p.to_owned(),
                role: Some(p.to_owned()),
                host: p.to_owned(),
                backoff_ms: Some(10),
                reason: Some(p.to_owned()),
            }),
        )
        .event(
            t - 46_000,
            EventBody::SingletonHandOverTimedOut(HandOverTimedOut {
                singleton: p.to_owned(),
                role: Some(p.to_owned()),
                new_host: p.to_owned(),
                silent_peers: vec![p.to_owned()],
                duration_ms: 10,
            }),
        )
        .event(
            t - 45_000,
            EventBody::LeaseAcquired(LeaseChange {
                singleton: p.to_owned(),
                role: Some(p.to_owned()),
                lease: p.to_owned(),
                holder: Some(p.to_owned()),
                reason: Some(p.to_owned()),
            }),
        )
        .event(
            t - 44_000,
            EventBody::RouterStarted(RouterStarted {
                router: p.to_owned(),
                strategy: RoutingStrategy::Broadcast,
                role: Some(p.to_owned()),
                routee_path: p.to_owned(),
            }),
        )
        .event(
            t - 43_000,
            EventBody::RouteesChanged(RouteesChange {
                router: p.to_owned(),
                strategy: RoutingStrategy::Broadcast,
                routees: vec![p.to_owned()],
            }),
        )
        .event(
            t - 42_000,
            EventBody::DeadLetter(DeadLetterEvent {
                recipient: p.to_owned(),
                sender: Some(p.to_owned()),
                message_type: p.to_owned(),
                reason: p.to_owned(),
            }),
        )
        .event(
            t - 41_000,
            EventBody::AgentHealthChanged(HealthChange {
                health: AgentHealth::Draining,
                reason: Some(p.to_owned()),
            }),
        )
        .depth_tick(t - 5_000, &[(p, Some(p), 9)])
        .build();
    batch.identity.meta = AgentMeta {
        node: Some(p.to_owned()),
    };
    batch
}
