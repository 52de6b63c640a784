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

/// One history entry for the overlap check: its event time, its stream position (the stored
/// event's id: commit order, which is each agent's own sequence order) and what it says.
pub(crate) type Entry<'a> = (i64, i64, InstanceChange<'a>);

/// An instance started while others were on record as live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Overlap<'a> {
    /// When the later instance started.
    pub(crate) at_ms: i64,
    /// The host that started.
    pub(crate) started: &'a str,
    /// The hosts whose instances were on record as live then.
    pub(crate) others: Vec<&'a str>,
    /// Whether two instances surely ran at once: one of `others` reported its stop after the
    /// start. Otherwise it is unknown: their stops were never reported (lost, or the host
    /// died), so they may have ended before.
    pub(crate) confirmed: bool,
}

/// Sort key: time, then at equal times ends before starts (a stop or completed hand-over and
/// a start in the same millisecond are a hand-over, not an overlap), then stream position.
fn order(entry: &Entry<'_>) -> (i64, u8, i64) {
    let (at, id, change) = entry;
    let rank = match change {
        InstanceChange::Stopped(_) | InstanceChange::HandedOver(_) => 0,
        InstanceChange::Started(_) => 1,
    };
    (*at, rank, *id)
}

/// Times an instance started while others were on record as live, oldest first: walks the
/// history in order ([`order`]), adding a host when its instance starts and dropping it when it
/// stops or a completed hand-over says it did. An overlap is confirmed when one of the other
/// hosts reports its stop afterwards, and unknown when none ever does.
pub(crate) fn overlaps<'a>(history: &[Entry<'a>]) -> Vec<Overlap<'a>> {
    let mut sorted: Vec<&Entry<'a>> = history.iter().collect();
    sorted.sort_by_key(|entry| order(entry));
    let mut live: BTreeSet<&str> = BTreeSet::new();
    let mut found: Vec<Overlap<'a>> = Vec::new();
    // Overlaps still waiting for a stop of one of their other hosts, by index into `found`.
    let mut open: Vec<usize> = Vec::new();
    for (at, _, change) in sorted {
        match change {
            InstanceChange::Started(host) => {
                let others: Vec<&str> = live.iter().copied().filter(|h| h != host).collect();
                live.insert(host);
                if !others.is_empty() {
                    open.push(found.len());
                    found.push(Overlap {
                        at_ms: *at,
                        started: host,
                        others,
                        confirmed: false,
                    });
                }
            }
            InstanceChange::Stopped(host) => {
                live.remove(host);
                open.retain(|&i| {
                    let overlap = &mut found[i];
                    if overlap.others.contains(host) {
                        overlap.confirmed = true;
                        false
                    } else {
                        true
                    }
                });
            }
            InstanceChange::HandedOver(host) => {
                live.retain(|h| h == host);
                // The others acknowledged the hand-over: their stop is known now, but not
                // when it happened relative to the start; overlaps before it stay open.
            }
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
        let bodies: Vec<(i64, i64, Option<EventBody>)> = history
            .iter()
            .map(|r| (r.at_ms, r.id, events::body(r)))
            .collect();
        let changes: Vec<Entry<'_>> = bodies
            .iter()
            .filter_map(|(at, id, body)| {
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
                Some((*at, *id, change))
            })
            .collect();
        let (confirmed, unknown): (Vec<Overlap<'_>>, Vec<Overlap<'_>>) =
            overlaps(&changes).into_iter().partition(|o| o.confirmed);
        let overlaps = confirmed
            .iter()
            .map(|o| {
                let mut hosts = o.others.clone();
                hosts.push(o.started);
                hosts.sort_unstable();
                format!(
                    "{} at {} UTC ({})",
                    hosts.join(" and "),
                    clock_seconds(o.at_ms),
                    TimeText::at(o.at_ms).text
                )
            })
            .collect();
        let unknown_overlaps = unknown
            .iter()
            .map(|o| {
                format!(
                    "{} started at {} UTC ({}) while {} had not reported a stop",
                    o.started,
                    clock_seconds(o.at_ms),
                    TimeText::at(o.at_ms).text,
                    o.others.join(" and ")
                )
            })
            .collect();
        let mut hand_overs = 0;
        let mut timeouts = 0;
        let history = history
            .iter()
            .zip(&bodies)
            .map(|(r, (_, _, body))| {
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
            unknown_overlaps,
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

    fn summary<'a>(found: &[Overlap<'a>]) -> Vec<(i64, &'a str, Vec<&'a str>, bool)> {
        found
            .iter()
            .map(|o| (o.at_ms, o.started, o.others.clone(), o.confirmed))
            .collect()
    }

    #[test]
    fn a_clean_hand_over_shows_no_overlap() {
        let history = [
            (10, 1, Started("a")),
            (20, 2, Stopped("a")),
            (30, 3, HandedOver("b")),
            (31, 4, Started("b")),
        ];
        assert!(overlaps(&history).is_empty());
    }

    #[test]
    fn a_completed_hand_over_ends_the_previous_instance_even_without_its_stop() {
        let history = [
            (10, 1, Started("a")),
            (30, 2, HandedOver("b")),
            (31, 3, Started("b")),
        ];
        assert!(overlaps(&history).is_empty());
    }

    /// Issue 14, item 7: the start and the completed hand-over share a millisecond, and the
    /// start was stored first (another reporter's batch came in earlier).
    #[test]
    fn a_start_and_a_completed_hand_over_in_the_same_millisecond_are_no_overlap() {
        let history = [
            (10, 1, Started("a")),
            (30, 5, Started("b")),
            (30, 6, HandedOver("b")),
        ];
        assert!(overlaps(&history).is_empty());
        let stop_same_ms = [
            (10, 1, Started("a")),
            (30, 5, Started("b")),
            (30, 9, Stopped("a")),
        ];
        assert!(overlaps(&stop_same_ms).is_empty());
    }

    #[test]
    fn a_start_while_another_instance_runs_and_whose_stop_comes_later_is_a_known_overlap() {
        let history = [
            (31, 2, Started("b")),
            (10, 1, Started("a")),
            (40, 3, Stopped("a")),
        ];
        assert_eq!(summary(&overlaps(&history)), [(31, "b", vec!["a"], true)]);
    }

    /// Issue 14, item 7: after a lost `SingletonStopped` nobody knows whether `a` still ran.
    #[test]
    fn a_start_after_a_stop_that_was_never_reported_is_unknown_not_two() {
        let history = [(10, 1, Started("a")), (31, 2, Started("b"))];
        assert_eq!(summary(&overlaps(&history)), [(31, "b", vec!["a"], false)]);
        // A later hand-over acknowledged by `a` does not tell when it stopped either.
        let handed = [
            (10, 1, Started("a")),
            (31, 2, Started("b")),
            (50, 3, HandedOver("c")),
        ];
        assert_eq!(summary(&overlaps(&handed)), [(31, "b", vec!["a"], false)]);
    }
}
