//! `GET /ui/routers`: routers with their routees and strategy, routee mailbox depth over the
//! last hour per node, and the deepest mailboxes now.

use std::collections::HashSet;

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use troupe_protocol::DepthSample;
use troupe_web::chart::Chart;
use troupe_web::format::TimeText;
use troupe_web::pages::{MailboxView, NodeLink, RouterView, RoutersPage, Section};

use super::{Context, UiError};
use crate::api::routers::{DepthTarget, NodeSeries, bucket};
use crate::api::string_list;
use crate::app::AppState;
use crate::store::DepthTickRow;

/// Routers shown at most.
const MAX_ROUTERS: usize = 50;
/// Depth ticks the charts read at most (the newest).
pub(crate) const MAX_TICKS: i64 = 20_000;
/// The charts' range.
pub(crate) const RANGE_MS: i64 = 3_600_000;
/// Buckets per chart.
const BUCKETS: i64 = 60;
/// Mailboxes in a "deepest now" table.
pub(crate) const TOP_N: usize = 10;
/// How old a node's latest sample may be to count as "now".
const NOW_MS: i64 = 60_000;

#[derive(Debug, Default, Deserialize)]
struct RoutersQuery {
    cluster: Option<String>,
}

/// Series of [`bucket`] as chart lines (mean depth per bucket).
pub(crate) fn series_points(series: Vec<NodeSeries>) -> Vec<(String, Vec<(i64, f64)>)> {
    series
        .into_iter()
        .map(|s| {
            (
                s.node,
                s.points
                    .into_iter()
                    .map(|p| (p.at.timestamp_millis(), p.mean))
                    .collect(),
            )
        })
        .collect()
}

/// The deepest mailboxes in each node's newest tick (ticks newest first) not older than a
/// minute.
pub(crate) fn deepest(ctx: &Context, newest_first: &[DepthTickRow]) -> Vec<MailboxView> {
    let mut seen = HashSet::new();
    let mut mailboxes = Vec::new();
    for tick in newest_first {
        if tick.at_ms < ctx.now_ms - NOW_MS {
            break;
        }
        if !seen.insert(tick.node.as_str()) {
            continue;
        }
        let Ok(samples) = serde_json::from_str::<Vec<DepthSample>>(&tick.samples) else {
            continue;
        };
        mailboxes.extend(samples.into_iter().map(|s| MailboxView {
            path: s.path,
            router: s.router.unwrap_or_default(),
            node: tick.node.clone(),
            node_href: ctx.node_href(&tick.node),
            depth: s.depth,
            at: TimeText::at(tick.at_ms),
        }));
    }
    mailboxes.sort_by(|a, b| b.depth.cmp(&a.depth).then_with(|| a.path.cmp(&b.path)));
    mailboxes.truncate(TOP_N);
    mailboxes
}

async fn build(state: &AppState, req: &HttpRequest) -> Result<RoutersPage, UiError> {
    let query: RoutersQuery = super::query(req)?;
    let ctx = Context::load(state, query.cluster.as_deref()).await?;
    let mut page = RoutersPage {
        layout: ctx.layout(Section::Routers, "Routers & mailboxes"),
        routers: Vec::new(),
        deepest: Vec::new(),
        range_label: "last hour (mean per minute)".to_owned(),
        truncated: false,
    };
    let Some(cluster) = &ctx.cluster else {
        return Ok(page);
    };
    let until_ms = ctx.now_ms + 1;
    let since_ms = until_ms - RANGE_MS;
    let mut ticks = state
        .store
        .depth_ticks_newest(cluster.id, None, since_ms, until_ms, MAX_TICKS)
        .await?;
    page.truncated = ticks.len() as i64 == MAX_TICKS;
    page.deepest = deepest(&ctx, &ticks);
    ticks.reverse();
    let routers = state.store.routers(cluster.id).await?;
    for row in routers.into_iter().take(MAX_ROUTERS) {
        let series = bucket(
            &ticks,
            DepthTarget::Router(&row.path),
            since_ms,
            RANGE_MS / BUCKETS,
        );
        page.routers.push(RouterView {
            chart: Chart::lines(since_ms, until_ms, "messages", series_points(series)),
            strategy: row.strategy.clone(),
            role: row.role.clone().unwrap_or_default(),
            routee_path: row.routee_path.clone().unwrap_or_default(),
            routees: string_list(&row.routees)
                .into_iter()
                .map(|address| NodeLink {
                    href: ctx.node_href(&address),
                    address,
                })
                .collect(),
            updated: TimeText::at(row.updated_ms),
            path: row.path,
        });
    }
    Ok(page)
}

/// `GET /ui/routers`.
pub(crate) async fn page(state: web::Data<AppState>, req: HttpRequest) -> HttpResponse {
    super::respond(build(&state, &req).await, None)
}
