//! `GET /ui/node?node=…`: one node's member state, agent health and incarnations, reporter
//! drops, mailbox depth, and the events it reported and that are about it.

use std::collections::BTreeMap;

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use troupe_protocol::DepthSample;
use troupe_web::chart::Chart;
use troupe_web::format::{TimeText, age, count, href};
use troupe_web::pages::{DropView, IncarnationView, NodePage, Section, health_class};

use super::routers::{MAX_TICKS, RANGE_MS, deepest, series_points};
use super::{Context, UiError, events, overview};
use crate::api::routers::{DepthTarget, bucket};
use crate::app::AppState;
use crate::store::{DepthTickRow, EventFilter};

/// Events per table.
const EVENTS: i64 = 50;
/// Actors charted.
const CHARTED: usize = 5;

#[derive(Debug, Default, Deserialize)]
struct NodeQuery {
    cluster: Option<String>,
    node: Option<String>,
}

/// The actors with the largest depth seen in `ticks`, deepest first.
fn deepest_paths(ticks: &[DepthTickRow], n: usize) -> Vec<String> {
    let mut peak: BTreeMap<String, u32> = BTreeMap::new();
    for tick in ticks {
        let Ok(samples) = serde_json::from_str::<Vec<DepthSample>>(&tick.samples) else {
            continue;
        };
        for s in samples {
            let entry = peak.entry(s.path).or_default();
            *entry = (*entry).max(s.depth);
        }
    }
    let mut paths: Vec<(String, u32)> = peak.into_iter().collect();
    paths.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    paths.into_iter().take(n).map(|(p, _)| p).collect()
}

async fn build(state: &AppState, req: &HttpRequest) -> Result<NodePage, UiError> {
    let query: NodeQuery = super::query(req)?;
    let node = query
        .node
        .filter(|n| !n.is_empty())
        .ok_or_else(|| UiError::BadRequest("Say which node: /ui/node?node=host:port.".into()))?;
    let ctx = Context::load(state, query.cluster.as_deref()).await?;
    let cluster = ctx
        .cluster
        .clone()
        .ok_or_else(|| UiError::NotFound("No cluster has reported yet.".to_owned()))?;
    let store = &state.store;
    let agents = store.agents(cluster.id).await?;
    let member = store
        .members(cluster.id)
        .await?
        .into_iter()
        .find(|m| m.address == node)
        .map(|m| overview::member_view(&ctx, &m, cluster.leader.as_deref(), &agents));
    let mine: Vec<_> = agents.iter().filter(|a| a.node == node).collect();
    if member.is_none() && mine.is_empty() {
        return Err(UiError::NotFound(format!(
            "Cluster “{}” knows no node “{node}”.",
            cluster.name
        )));
    }
    let incarnations = mine
        .iter()
        .map(|a| {
            let health = a.health.clone().unwrap_or_default();
            IncarnationView {
                incarnation: a.incarnation as u64,
                meta_node: a.meta_node.clone().unwrap_or_default(),
                health_class: health_class(&health),
                health,
                first_seen: TimeText::at(a.first_seen_ms),
                last_report: TimeText::at(a.last_report_ms),
                last_report_age: age(ctx.now_ms, a.last_report_ms),
                last_sequence: a.last_sequence,
            }
        })
        .collect();
    let drops = mine
        .first()
        .map(|a| {
            [
                ("membership events", a.dropped_membership),
                ("singleton events", a.dropped_singleton),
                ("router events", a.dropped_router),
                ("dead letters", a.dropped_dead_letters),
                ("health events", a.dropped_health),
                ("depth samples", a.dropped_depth_samples),
            ]
            .into_iter()
            .map(|(kind, n)| DropView {
                kind,
                count: count(n),
                any: n > 0,
            })
            .collect()
        })
        .unwrap_or_default();
    let reported = store
        .events(
            cluster.id,
            &EventFilter {
                node: Some(node.clone()),
                limit: EVENTS,
                ..EventFilter::default()
            },
        )
        .await?;
    let about = store
        .events(
            cluster.id,
            &EventFilter {
                subject: Some(node.clone()),
                limit: EVENTS,
                ..EventFilter::default()
            },
        )
        .await?;
    let until_ms = ctx.now_ms + 1;
    let since_ms = until_ms - RANGE_MS;
    let mut ticks = store
        .depth_ticks_newest(cluster.id, Some(&node), since_ms, until_ms, MAX_TICKS)
        .await?;
    let mailboxes = deepest(&ctx, &ticks);
    ticks.reverse();
    let series = deepest_paths(&ticks, CHARTED)
        .into_iter()
        .filter_map(|path| {
            let series = bucket(&ticks, DepthTarget::Path(&path), since_ms, RANGE_MS / 60);
            series_points(series)
                .into_iter()
                .next()
                .map(|(_, points)| (path, points))
        })
        .collect();
    Ok(NodePage {
        layout: ctx.layout(Section::Node, format!("Node {node}")),
        member,
        incarnations,
        drops,
        events: reported.iter().map(|r| events::view(&ctx, r)).collect(),
        about: about.iter().map(|r| events::view(&ctx, r)).collect(),
        chart: Chart::lines(since_ms, until_ms, "messages", series),
        mailboxes,
        timeline_href: href(
            Section::Timeline.path(),
            &[("cluster", &cluster.name), ("subject", &node)],
        ),
        node,
    })
}

/// `GET /ui/node`.
pub(crate) async fn page(state: web::Data<AppState>, req: HttpRequest) -> HttpResponse {
    super::respond(build(&state, &req).await, None)
}
