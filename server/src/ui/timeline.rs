//! `GET /ui/timeline`: events over a time range, filterable by kind, subject and reporting
//! node, with a picture of member lifetimes and leadership.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use troupe_protocol::{EventCategory, EventKind};
use troupe_web::chart::{Lifetimes, MembershipPoint, Phase};
use troupe_web::format::TimeText;
use troupe_web::pages::{Choice, Section, TimelinePage};

use super::events;
use super::page::{self, Context, UiError};
use super::window::DEFAULT_RANGE_MS;
use crate::state::AppState;
use crate::store::EventFilter;

/// Rows of the event table.
const EVENT_ROWS: i64 = 200;
/// Membership events the lifetime picture reads at most (per kind).
const LIFETIME_EVENTS: i64 = 2_000;

#[derive(Debug, Default, Deserialize)]
struct TimelineQuery {
    cluster: Option<String>,
    range: Option<String>,
    kind: Option<String>,
    node: Option<String>,
    subject: Option<String>,
}

fn kinds_of(category: EventCategory) -> Vec<String> {
    EventKind::ALL
        .iter()
        .filter(|k| k.category() == category)
        .map(|k| k.as_str().to_owned())
        .collect()
}

/// The kinds a `kind` choice stands for (empty: every kind).
fn kinds(choice: &str) -> Result<Vec<String>, UiError> {
    Ok(match choice {
        "" => Vec::new(),
        "membership" => kinds_of(EventCategory::Membership),
        "singleton" => kinds_of(EventCategory::Singleton),
        "router" => kinds_of(EventCategory::Router),
        "health" => kinds_of(EventCategory::Health),
        kind => {
            let kind: EventKind = kind.parse().map_err(|e| {
                UiError::BadRequest(format!(
                    "{e}; or use membership, singleton, router or health"
                ))
            })?;
            vec![kind.as_str().to_owned()]
        }
    })
}

fn kind_choices(current: &str) -> Vec<Choice> {
    let mut options: Vec<(&str, &str)> = vec![
        ("", "every kind"),
        ("membership", "membership"),
        ("singleton", "singleton"),
        ("router", "router"),
        ("health", "agent health"),
    ];
    options.extend(
        EventKind::ALL
            .iter()
            .filter(|k| k.category() != EventCategory::DeadLetter)
            .map(|k| (k.as_str(), k.as_str())),
    );
    Choice::list(&options, current)
}

async fn build(state: &AppState, req: &HttpRequest) -> Result<TimelinePage, UiError> {
    let query: TimelineQuery = page::query(req)?;
    let ctx = Context::load(state, query.cluster.as_deref()).await?;
    let kind = query.kind.clone().unwrap_or_default();
    let selected_kinds = kinds(&kind)?;
    let window = ctx
        .window(state, query.range.as_deref(), DEFAULT_RANGE_MS)
        .await?;
    let node = query.node.clone().unwrap_or_default();
    let subject = query.subject.clone().unwrap_or_default();
    let (since_ms, until_ms) = (window.since_ms, window.until_ms);
    let mut page = TimelinePage {
        layout: ctx.layout(Section::Timeline, "Timeline"),
        ranges: window.choices(),
        kinds: kind_choices(&kind),
        node: node.clone(),
        subject: subject.clone(),
        since: TimeText::at(since_ms),
        until: TimeText::at(until_ms),
        lifetimes: Lifetimes::build(since_ms, until_ms, &[], &[], None, |_| String::new()),
        lifetimes_truncated: false,
        events: Vec::new(),
        events_truncated: false,
    };
    let Some(cluster) = &ctx.cluster else {
        return Ok(page);
    };
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    let rows = state
        .store
        .events(
            cluster.id,
            &EventFilter {
                kinds: selected_kinds,
                node: non_empty(&node),
                subject: non_empty(&subject),
                since_ms: Some(since_ms),
                until_ms: Some(until_ms),
                before: None,
                limit: EVENT_ROWS,
            },
        )
        .await?;
    page.events_truncated = rows.len() as i64 == EVENT_ROWS;
    page.events = rows.iter().map(|r| events::view(&ctx, r)).collect();
    let membership = state
        .store
        .events(
            cluster.id,
            &EventFilter {
                kinds: kinds_of(EventCategory::Membership),
                subject: non_empty(&subject),
                since_ms: Some(since_ms),
                until_ms: Some(until_ms),
                limit: LIFETIME_EVENTS,
                ..EventFilter::default()
            },
        )
        .await?;
    page.lifetimes_truncated = membership.len() as i64 == LIFETIME_EVENTS;
    let points: Vec<MembershipPoint> = membership
        .into_iter()
        .map(|r| MembershipPoint {
            at_ms: r.at_ms,
            kind: r.kind,
            subject: r.subject,
        })
        .collect();
    let current: Vec<(String, Option<Phase>)> = state
        .store
        .members(cluster.id)
        .await?
        .into_iter()
        .filter(|m| subject.is_empty() || m.address == subject)
        .filter(|m| m.status != "removed")
        .map(|m| {
            let phase = Phase::from_status(&m.status, m.reachable);
            (m.address, phase)
        })
        .collect();
    page.lifetimes = Lifetimes::build(
        since_ms,
        until_ms,
        &points,
        &current,
        cluster.leader.as_deref(),
        |address| ctx.node_href(address),
    );
    Ok(page)
}

/// `GET /ui/timeline`.
pub(crate) async fn page(state: web::Data<AppState>, req: HttpRequest) -> HttpResponse {
    page::respond(build(&state, &req).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_choices_name_categories_and_kinds_and_refuse_others() {
        assert!(kinds("").unwrap().is_empty());
        assert!(
            kinds("membership")
                .unwrap()
                .contains(&"MemberUp".to_owned())
        );
        assert_eq!(kinds("LeaderChanged").unwrap(), ["LeaderChanged"]);
        assert!(matches!(kinds("Bogus"), Err(UiError::BadRequest(_))));
    }
}
