//! `GET /ui/node?node=…`: one node's member state, agent health and incarnations, reporter
//! drops, mailbox depth, the events it reported and that are about it, and a link to the
//! management actions (leave, down) asked of it on the audit page.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use troupe_web::chart::Chart;
use troupe_web::format::{TimeText, age, count, href};
use troupe_web::pages::{DropView, IncarnationView, NodePage, Section, health_class};

use super::page::{self, Context, UiError};
use super::routers::{BUCKETS, Series, chart_ticks, deepest, series_by};
use super::window::DEFAULT_RANGE_MS;
use super::{events, overview};
use crate::state::AppState;
use crate::store::{AuditFilter, AuditScope, EventFilter};

/// Events per table.
const EVENTS: i64 = 50;
/// How far back the "reported by" table looks.
const REPORTED_WINDOW_MS: i64 = 3_600_000;
/// Actors charted.
const CHARTED: usize = 5;
/// Management actions counted for the link to the audit page (more show as "100+").
const AUDITED: i64 = 100;

#[derive(Debug, Default, Deserialize)]
struct NodeQuery {
    cluster: Option<String>,
    node: Option<String>,
    range: Option<String>,
}

async fn build(state: &AppState, req: &HttpRequest) -> Result<NodePage, UiError> {
    let query: NodeQuery = page::query(req)?;
    let node = query
        .node
        .filter(|n| !n.is_empty())
        .ok_or_else(|| UiError::BadRequest("Say which node: /ui/node?node=host:port.".into()))?;
    let ctx = Context::load(state, query.cluster.as_deref()).await?;
    let window = ctx
        .window(state, query.range.as_deref(), DEFAULT_RANGE_MS)
        .await?;
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
            cluster.cluster_key
        )));
    }
    let incarnations = mine
        .iter()
        .map(|a| {
            let health = a
                .health_at(ctx.now_ms, ctx.silence_ms)
                .unwrap_or_default()
                .to_owned();
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
                ("spooled batches given up", a.dropped_spool_batches),
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
            // No index leads from a reporter to its events: the last hour bounds the scan.
            &EventFilter {
                node: Some(node.clone()),
                since_ms: Some(ctx.now_ms - REPORTED_WINDOW_MS),
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
    let audited = store
        .audit_entries(
            AuditScope::Cluster(cluster.id),
            &AuditFilter {
                target: Some(node.clone()),
                before: None,
                limit: AUDITED + 1,
            },
        )
        .await?;
    let (since_ms, until_ms) = (window.since_ms, window.until_ms);
    let mailboxes = deepest(state, &ctx, cluster.id, Some(&node)).await?;
    let (ticks, _) = chart_ticks(state, cluster.id, Some(&node), since_ms, until_ms).await?;
    let by_path = series_by(&ticks, since_ms, window.ms / BUCKETS, |s| {
        Some(s.path.as_str())
    });
    // The actors whose mean depth peaked highest, deepest first.
    let mut charted: Vec<(f64, Series)> = by_path
        .into_iter()
        .filter_map(|(path, mut nodes)| {
            let (_, points) = nodes.pop()?;
            let peak = points.iter().map(|(_, v)| *v).fold(0.0, f64::max);
            Some((peak, (path, points)))
        })
        .collect();
    charted.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.0.cmp(&b.1.0)));
    let series = charted
        .into_iter()
        .take(CHARTED)
        .map(|(_, series)| series)
        .collect();
    Ok(NodePage {
        layout: ctx.layout(Section::Node, format!("Node {node}")),
        member,
        incarnations,
        drops,
        events: reported.iter().map(|r| events::view(&ctx, r)).collect(),
        about: about.iter().map(|r| events::view(&ctx, r)).collect(),
        chart: Chart::lines(since_ms, until_ms, "messages", series),
        ranges: window.choices(),
        range_label: window.label(),
        mailboxes,
        timeline_href: href(
            Section::Timeline.path(),
            &[("cluster", &cluster.cluster_key), ("subject", &node)],
        ),
        audit_href: href(
            Section::Audit.path(),
            &[("cluster", &cluster.cluster_key), ("target", &node)],
        ),
        audit_count: match audited.len() as i64 {
            n if n > AUDITED => format!("{}+", count(AUDITED)),
            n => count(n),
        },
        node,
    })
}

/// `GET /ui/node`.
pub(crate) async fn page(state: web::Data<AppState>, req: HttpRequest) -> HttpResponse {
    page::respond(build(&state, &req).await)
}
