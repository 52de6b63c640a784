//! Stored events as table rows: a badge per kind and one line saying what happened.

use troupe_protocol::EventBody;
use troupe_web::format::{TimeText, duration, href};
use troupe_web::pages::{EventView, Section};

use super::page::Context;
use crate::store::EventRow;

/// Badge class of an event kind.
pub(crate) fn kind_class(kind: &str) -> &'static str {
    match kind {
        "MemberUp"
        | "SelfUp"
        | "MemberReachable"
        | "SingletonHandOverCompleted"
        | "SingletonStarted"
        | "LeaseAcquired"
        | "SingletonMessagesFlushed" => "ok",
        "MemberLeft"
        | "MemberExited"
        | "SingletonHandOverStarted"
        | "SingletonStopped"
        | "SingletonMessagesHeld"
        | "LeaseReleased"
        | "SingletonHostElected" => "warn",
        "MemberDown"
        | "MemberRemoved"
        | "MemberUnreachable"
        | "SingletonHandOverTimedOut"
        | "SingletonRestarted"
        | "LeaseLost"
        | "SingletonMessagesDeadLettered" => "bad",
        "LeaderChanged" => "leader",
        _ => "idle",
    }
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(", ")
    }
}

/// One line saying what an event says.
pub(crate) fn summary(body: &EventBody) -> String {
    match body {
        EventBody::MemberJoined(c)
        | EventBody::MemberWeaklyUp(c)
        | EventBody::MemberUp(c)
        | EventBody::MemberLeft(c)
        | EventBody::MemberExited(c)
        | EventBody::MemberDown(c)
        | EventBody::MemberRemoved(c)
        | EventBody::SelfUp(c) => {
            let mut s = format!("status {}", c.member.status.as_str());
            if let Some(previous) = c.previous_status {
                s.push_str(&format!(" (was {})", previous.as_str()));
            }
            if !c.member.roles.is_empty() {
                s.push_str(&format!(", roles {}", c.member.roles.join(", ")));
            }
            s
        }
        EventBody::MemberUnreachable(c) => {
            format!("unreachable as seen by {}", list(&c.observers))
        }
        EventBody::MemberReachable(_) => "reachable by every observer again".to_owned(),
        EventBody::LeaderChanged(c) => match &c.leader {
            Some(leader) => format!("new leader {leader}"),
            None => "no leader".to_owned(),
        },
        EventBody::SingletonHostElected(e) => match &e.previous_host {
            Some(previous) => format!("host {} elected (was {previous})", e.host),
            None => format!("host {} elected", e.host),
        },
        EventBody::SingletonHandOverStarted(e) => format!(
            "hand-over to {} started, asking {}",
            e.new_host,
            list(&e.peers)
        ),
        EventBody::SingletonHandOverCompleted(e) => format!(
            "hand-over to {} completed in {}",
            e.new_host,
            duration(e.duration_ms)
        ),
        EventBody::SingletonHandOverTimedOut(e) => format!(
            "hand-over to {} timed out after {}; silent: {}",
            e.new_host,
            duration(e.duration_ms),
            list(&e.silent_peers)
        ),
        EventBody::SingletonStarted(e)
        | EventBody::SingletonStopped(e)
        | EventBody::SingletonRestarted(e) => {
            let mut s = format!("instance on {}", e.host);
            if let Some(reason) = &e.reason {
                s.push_str(&format!(": {reason}"));
            }
            if let Some(backoff) = e.backoff_ms {
                s.push_str(&format!(" (restart after {})", duration(backoff)));
            }
            s
        }
        EventBody::LeaseAcquired(e) | EventBody::LeaseLost(e) | EventBody::LeaseReleased(e) => {
            let mut s = format!(
                "lease {} held by {}",
                e.lease,
                e.holder.as_deref().unwrap_or("nobody")
            );
            if let Some(reason) = &e.reason {
                s.push_str(&format!(": {reason}"));
            }
            s
        }
        EventBody::SingletonMessagesHeld(e)
        | EventBody::SingletonMessagesFlushed(e)
        | EventBody::SingletonMessagesDeadLettered(e) => format!("{} messages", e.count),
        EventBody::RouterStarted(e) => {
            format!("{} router of {}", e.strategy.as_str(), e.routee_path)
        }
        EventBody::RouteesChanged(e) => format!("routees: {}", list(&e.routees)),
        EventBody::DeadLetter(e) => format!("{} to {}: {}", e.message_type, e.recipient, e.reason),
        EventBody::AgentHealthChanged(e) => match &e.reason {
            Some(reason) => format!("agent {}: {reason}", e.health.as_str()),
            None => format!("agent {}", e.health.as_str()),
        },
        EventBody::DirectoryHostEvicted(e) => format!(
            "directory claims of {} released ({}): {}",
            e.host,
            e.previous_status.as_deref().unwrap_or("removed"),
            list(&e.actors)
        ),
    }
}

/// The stored body of `row`, if it parses.
pub(crate) fn body(row: &EventRow) -> Option<EventBody> {
    serde_json::from_str(&row.detail).ok()
}

/// `row` as a table row of cluster `ctx`.
pub(crate) fn view(ctx: &Context, row: &EventRow) -> EventView {
    let body = body(row);
    let subject = row.subject.clone().unwrap_or_default();
    let subject_href = match &body {
        _ if subject.is_empty() => String::new(),
        Some(
            EventBody::MemberJoined(_)
            | EventBody::MemberWeaklyUp(_)
            | EventBody::MemberUp(_)
            | EventBody::MemberLeft(_)
            | EventBody::MemberExited(_)
            | EventBody::MemberDown(_)
            | EventBody::MemberRemoved(_)
            | EventBody::MemberUnreachable(_)
            | EventBody::MemberReachable(_)
            | EventBody::SelfUp(_)
            | EventBody::LeaderChanged(_),
        ) => ctx.node_href(&subject),
        Some(EventBody::RouterStarted(_) | EventBody::RouteesChanged(_)) => {
            href(Section::Routers.path(), &[("cluster", ctx.cluster_name())])
        }
        Some(_) => href(
            Section::Singletons.path(),
            &[("cluster", ctx.cluster_name())],
        ),
        None => String::new(),
    };
    EventView {
        at: TimeText::at(row.at_ms),
        kind_class: kind_class(&row.kind),
        kind: row.kind.clone(),
        subject,
        subject_href,
        node: row.node.clone(),
        node_href: ctx.node_href(&row.node),
        summary: body.as_ref().map_or_else(String::new, summary),
    }
}
