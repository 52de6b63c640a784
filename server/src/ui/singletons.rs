//! `GET /ui/singletons`: each singleton's host, lease and hand-over history, with a warning
//! when the history shows two live instances at once.

use std::collections::BTreeSet;

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use troupe_protocol::{EventBody, EventCategory, EventKind};
use troupe_web::format::{TimeText, clock_seconds, duration, href};
use troupe_web::pages::{HistoryView, Section, SingletonView, SingletonsPage};

use super::events;
use super::page::{self, Context, UiError};
use crate::state::AppState;
use crate::store::EventFilter;

/// Singletons shown at most.
const MAX_SINGLETONS: usize = 50;
/// History entries per singleton.
const HISTORY: i64 = 50;

#[derive(Debug, Default, Deserialize)]
struct SingletonsQuery {
    cluster: Option<String>,
}

/// What the overlap check needs of a history entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InstanceChange<'a> {
    /// An instance started (or restarted) on a host.
    Started(&'a str),
    /// An instance stopped on a host.
    Stopped(&'a str),
    /// Every previous host acknowledged a hand-over to this one: the others have stopped.
    HandedOver(&'a str),
}

/// Times when more than one instance was live, oldest first, as `(at_ms, hosts)`: walks the
/// history in time order, adding a host when its instance starts and dropping it when it
/// stops or a completed hand-over says it did.
pub(crate) fn overlaps<'a>(history: &[(i64, InstanceChange<'a>)]) -> Vec<(i64, Vec<&'a str>)> {
    let mut sorted: Vec<&(i64, InstanceChange<'a>)> = history.iter().collect();
    sorted.sort_by_key(|(at, _)| *at);
    let mut live: BTreeSet<&str> = BTreeSet::new();
    let mut found = Vec::new();
    for (at, change) in sorted {
        match change {
            InstanceChange::Started(host) => {
                if live.insert(host) && live.len() > 1 {
                    found.push((*at, live.iter().copied().collect()));
                }
            }
            InstanceChange::Stopped(host) => {
                live.remove(host);
            }
            InstanceChange::HandedOver(host) => live.retain(|h| h == host),
        }
    }
    found
}

fn singleton_kinds() -> Vec<String> {
    EventKind::ALL
        .iter()
        .filter(|k| k.category() == EventCategory::Singleton)
        .map(|k| k.as_str().to_owned())
        .collect()
}

async fn build(state: &AppState, req: &HttpRequest) -> Result<SingletonsPage, UiError> {
    let query: SingletonsQuery = page::query(req)?;
    let ctx = Context::load(state, query.cluster.as_deref()).await?;
    let mut page = SingletonsPage {
        layout: ctx.layout(Section::Singletons, "Singletons"),
        singletons: Vec::new(),
        history_limit: HISTORY,
    };
    let Some(cluster) = &ctx.cluster else {
        return Ok(page);
    };
    let rows = state.store.singletons(cluster.id).await?;
    for row in rows.into_iter().take(MAX_SINGLETONS) {
        let history = state
            .store
            .events(
                cluster.id,
                &EventFilter {
                    kinds: singleton_kinds(),
                    subject: Some(row.name.clone()),
                    limit: HISTORY,
                    ..EventFilter::default()
                },
            )
            .await?;
        let bodies: Vec<(i64, Option<EventBody>)> =
            history.iter().map(|r| (r.at_ms, events::body(r))).collect();
        let changes: Vec<(i64, InstanceChange<'_>)> = bodies
            .iter()
            .filter_map(|(at, body)| {
                let change = match body.as_ref()? {
                    EventBody::SingletonStarted(e) | EventBody::SingletonRestarted(e) => {
                        InstanceChange::Started(&e.host)
                    }
                    EventBody::SingletonStopped(e) => InstanceChange::Stopped(&e.host),
                    EventBody::SingletonHandOverCompleted(e) => {
                        InstanceChange::HandedOver(&e.new_host)
                    }
                    _ => return None,
                };
                Some((*at, change))
            })
            .collect();
        let overlaps = overlaps(&changes)
            .into_iter()
            .map(|(at, hosts)| {
                format!(
                    "{} at {} UTC ({})",
                    hosts.join(" and "),
                    clock_seconds(at),
                    TimeText::at(at).text
                )
            })
            .collect();
        let mut hand_overs = 0;
        let mut timeouts = 0;
        let history = history
            .iter()
            .zip(&bodies)
            .map(|(r, (_, body))| {
                let (host, took, silent) = match body {
                    Some(EventBody::SingletonHandOverCompleted(e)) => {
                        hand_overs += 1;
                        (e.new_host.clone(), duration(e.duration_ms), Vec::new())
                    }
                    Some(EventBody::SingletonHandOverTimedOut(e)) => {
                        timeouts += 1;
                        (
                            e.new_host.clone(),
                            duration(e.duration_ms),
                            e.silent_peers.clone(),
                        )
                    }
                    Some(EventBody::SingletonHandOverStarted(e)) => {
                        (e.new_host.clone(), String::new(), Vec::new())
                    }
                    Some(EventBody::SingletonHostElected(e)) => {
                        (e.host.clone(), String::new(), Vec::new())
                    }
                    Some(
                        EventBody::SingletonStarted(e)
                        | EventBody::SingletonStopped(e)
                        | EventBody::SingletonRestarted(e),
                    ) => (e.host.clone(), String::new(), Vec::new()),
                    Some(
                        EventBody::LeaseAcquired(e)
                        | EventBody::LeaseLost(e)
                        | EventBody::LeaseReleased(e),
                    ) => (
                        e.holder.clone().unwrap_or_default(),
                        String::new(),
                        Vec::new(),
                    ),
                    _ => (String::new(), String::new(), Vec::new()),
                };
                HistoryView {
                    at: TimeText::at(r.at_ms),
                    kind_class: events::kind_class(&r.kind),
                    kind: r.kind.clone(),
                    host_href: ctx.node_href(&host),
                    host,
                    duration: took,
                    silent_peers: silent,
                    detail: body.as_ref().map_or_else(String::new, events::summary),
                    node: r.node.clone(),
                }
            })
            .collect();
        let host = row.host.clone().unwrap_or_default();
        let holder = row.lease_holder.clone().unwrap_or_default();
        page.singletons.push(SingletonView {
            role: row.role.clone().unwrap_or_default(),
            host_href: ctx.node_href(&host),
            host_since: (row.host_at_ms > 0).then(|| TimeText::at(row.host_at_ms)),
            lease: row.lease.clone().unwrap_or_default(),
            lease_holder_href: ctx.node_href(&holder),
            lease_mismatch: !holder.is_empty() && !host.is_empty() && holder != host,
            lease_holder: holder,
            host,
            hand_overs,
            timeouts,
            overlaps,
            history,
            events_href: href(
                Section::Timeline.path(),
                &[
                    ("cluster", ctx.cluster_name()),
                    ("subject", &row.name),
                    ("kind", "singleton"),
                ],
            ),
            name: row.name,
        });
    }
    Ok(page)
}

/// `GET /ui/singletons`.
pub(crate) async fn page(state: web::Data<AppState>, req: HttpRequest) -> HttpResponse {
    page::respond(build(&state, &req).await)
}

#[cfg(test)]
mod tests {
    use super::InstanceChange::{HandedOver, Started, Stopped};
    use super::*;

    #[test]
    fn a_clean_hand_over_shows_no_overlap() {
        let history = [
            (10, Started("a")),
            (20, Stopped("a")),
            (30, HandedOver("b")),
            (31, Started("b")),
        ];
        assert!(overlaps(&history).is_empty());
    }

    #[test]
    fn a_completed_hand_over_ends_the_previous_instance_even_without_its_stop() {
        let history = [
            (10, Started("a")),
            (30, HandedOver("b")),
            (31, Started("b")),
        ];
        assert!(overlaps(&history).is_empty());
    }

    #[test]
    fn a_start_while_another_instance_runs_is_an_overlap() {
        let history = [(31, Started("b")), (10, Started("a")), (40, Stopped("a"))];
        assert_eq!(overlaps(&history), [(31, vec!["a", "b"])]);
    }
}
