//! `GET /ui/routers`: routers with their routees and strategy, routee mailbox depth per node
//! over the page's range (`super::window`), and the deepest mailboxes now.

use std::collections::{BTreeMap, HashSet};

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use troupe_protocol::DepthSample;
use troupe_web::chart::Chart;
use troupe_web::format::TimeText;
use troupe_web::pages::{MailboxView, NodeLink, RouterView, RoutersPage, Section};

use super::page::{self, Context, UiError};
use super::window::DEFAULT_RANGE_MS;
use crate::state::AppState;
use crate::store::string_list;

/// Routers shown at most.
const MAX_ROUTERS: usize = 50;
/// Depth ticks a chart reads at most, about: with more agents each bucket reads only the
/// first seconds of its minute (agents sample at most once a second).
const CHART_TICKS: i64 = 4_000;
/// Ticks the "deepest now" table reads at most (the newest, from the last minute).
const NOW_TICKS: i64 = 2_000;
/// Buckets per chart.
pub(crate) const BUCKETS: i64 = 60;
/// Mailboxes in a "deepest now" table.
pub(crate) const TOP_N: usize = 10;
/// How old a node's latest sample may be to count as "now".
const NOW_MS: i64 = 60_000;

#[derive(Debug, Default, Deserialize)]
struct RoutersQuery {
    cluster: Option<String>,
    range: Option<String>,
}

/// A depth tick with its samples parsed.
#[derive(Debug)]
pub(crate) struct Tick {
    at_ms: i64,
    node: String,
    samples: Vec<DepthSample>,
}

/// The time windows a chart over `[since_ms, until_ms)` reads for `agents` sampling agents:
/// the whole range when that stays under [`CHART_TICKS`] ticks, else the first seconds of each
/// bucket; and the share of each bucket read (1.0: all of it).
pub(crate) fn chart_windows(since_ms: i64, until_ms: i64, agents: i64) -> (Vec<(i64, i64)>, f64) {
    let bucket_ms = ((until_ms - since_ms) / BUCKETS).max(1);
    let per_bucket_ms = CHART_TICKS * 1000 / (BUCKETS * agents.max(1));
    if per_bucket_ms >= bucket_ms {
        return (vec![(since_ms, until_ms)], 1.0);
    }
    let width = per_bucket_ms.max(1000);
    let windows = (0..BUCKETS)
        .map(|i| {
            let start = since_ms + i * bucket_ms;
            (start, (start + width).min(until_ms))
        })
        .collect();
    (windows, width as f64 / bucket_ms as f64)
}

/// The depth ticks of the last hour for charts (of one node's agent when `node` is given),
/// oldest first, at most about [`CHART_TICKS`]; and the share of each bucket they cover.
pub(crate) async fn chart_ticks(
    state: &AppState,
    cluster_id: i64,
    node: Option<&str>,
    since_ms: i64,
    until_ms: i64,
) -> Result<(Vec<Tick>, f64), UiError> {
    let agents = match node {
        Some(_) => 1,
        None => {
            let mut addresses = HashSet::new();
            let agents = state.store.agents(cluster_id).await?;
            agents
                .iter()
                .filter(|a| a.last_report_ms >= since_ms && addresses.insert(a.node.as_str()))
                .count() as i64
        }
    };
    let (windows, share) = chart_windows(since_ms, until_ms, agents);
    let mut rows = state
        .store
        .depth_ticks_in(cluster_id, node, &windows, 2 * CHART_TICKS)
        .await?;
    rows.reverse();
    let ticks = rows
        .into_iter()
        .filter_map(|row| {
            Some(Tick {
                samples: serde_json::from_str(&row.samples).ok()?,
                at_ms: row.at_ms,
                node: row.node,
            })
        })
        .collect();
    Ok((ticks, share))
}

/// A chart line: its label and `(at_ms, value)` points, oldest first.
pub(crate) type Series = (String, Vec<(i64, f64)>);

/// Per node, per bucket start: summed depth and ticks.
type NodeBuckets<'a> = BTreeMap<&'a str, BTreeMap<i64, (u64, u64)>>;

/// Mean summed depth per `(key, node)` and bucket, for keys `key` gives a sample (a router,
/// an actor path): one pass over the ticks.
pub(crate) fn series_by(
    ticks: &[Tick],
    since_ms: i64,
    bucket_ms: i64,
    key: impl Fn(&DepthSample) -> Option<&str>,
) -> BTreeMap<String, Vec<Series>> {
    let mut acc: BTreeMap<&str, NodeBuckets<'_>> = BTreeMap::new();
    for tick in ticks {
        let mut totals: BTreeMap<&str, u64> = BTreeMap::new();
        for sample in &tick.samples {
            if let Some(k) = key(sample) {
                *totals.entry(k).or_default() += u64::from(sample.depth);
            }
        }
        let start = since_ms + (tick.at_ms - since_ms).div_euclid(bucket_ms) * bucket_ms;
        for (k, total) in totals {
            let cell = acc
                .entry(k)
                .or_default()
                .entry(tick.node.as_str())
                .or_default()
                .entry(start)
                .or_default();
            cell.0 += total;
            cell.1 += 1;
        }
    }
    acc.into_iter()
        .map(|(k, nodes)| {
            let series = nodes
                .into_iter()
                .map(|(node, buckets)| {
                    let points = buckets
                        .into_iter()
                        .map(|(at, (sum, n))| (at, sum as f64 / n as f64))
                        .collect();
                    (node.to_owned(), points)
                })
                .collect();
            (k.to_owned(), series)
        })
        .collect()
}

/// The deepest mailboxes in each node's newest tick of the last minute.
pub(crate) async fn deepest(
    state: &AppState,
    ctx: &Context,
    cluster_id: i64,
    node: Option<&str>,
) -> Result<Vec<MailboxView>, UiError> {
    let newest_first = state
        .store
        .depth_ticks_in(
            cluster_id,
            node,
            &[(ctx.now_ms - NOW_MS, ctx.now_ms + 1)],
            NOW_TICKS,
        )
        .await?;
    let mut seen = HashSet::new();
    let mut mailboxes = Vec::new();
    for tick in &newest_first {
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
    Ok(mailboxes)
}

async fn build(state: &AppState, req: &HttpRequest) -> Result<RoutersPage, UiError> {
    let query: RoutersQuery = page::query(req)?;
    let ctx = Context::load(state, query.cluster.as_deref()).await?;
    let window = ctx
        .window(state, query.range.as_deref(), DEFAULT_RANGE_MS)
        .await?;
    let mut page = RoutersPage {
        layout: ctx.layout(Section::Routers, "Routers & mailboxes"),
        routers: Vec::new(),
        deepest: Vec::new(),
        ranges: window.choices(),
        range_label: window.label(),
    };
    let Some(cluster) = &ctx.cluster else {
        return Ok(page);
    };
    let (since_ms, until_ms) = (window.since_ms, window.until_ms);
    page.deepest = deepest(state, &ctx, cluster.id, None).await?;
    let (ticks, _) = chart_ticks(state, cluster.id, None, since_ms, until_ms).await?;
    let mut series = series_by(&ticks, since_ms, window.ms / BUCKETS, |s| {
        s.router.as_deref()
    });
    let routers = state.store.routers(cluster.id).await?;
    for row in routers.into_iter().take(MAX_ROUTERS) {
        let lines = series.remove(&row.path).unwrap_or_default();
        page.routers.push(RouterView {
            chart: Chart::lines(since_ms, until_ms, "messages", lines),
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
    page::respond(build(&state, &req).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick(at_ms: i64, node: &str, samples: &[(&str, Option<&str>, u32)]) -> Tick {
        Tick {
            at_ms,
            node: node.to_owned(),
            samples: samples
                .iter()
                .map(|(path, router, depth)| DepthSample {
                    path: (*path).to_owned(),
                    router: router.map(str::to_owned),
                    depth: *depth,
                })
                .collect(),
        }
    }

    #[test]
    fn charts_read_the_whole_hour_for_few_agents_and_the_start_of_each_minute_for_many() {
        let (windows, share) = chart_windows(0, 3_600_000, 1);
        assert_eq!((windows, share), (vec![(0, 3_600_000)], 1.0));
        let (windows, share) = chart_windows(0, 3_600_000, 8);
        assert_eq!(windows.len(), 60);
        assert_eq!(windows[1], (60_000, 68_333));
        assert!((share - 8.333 / 60.0).abs() < 0.001);
        let (windows, _) = chart_windows(0, 3_600_000, 10_000);
        assert_eq!(windows[0], (0, 1_000), "at least a second per minute");
    }

    #[test]
    fn series_sum_a_routers_routees_per_tick_and_average_per_bucket_and_node() {
        let ticks = [
            tick(
                0,
                "n1",
                &[
                    ("/a", Some("/r"), 2),
                    ("/b", Some("/r"), 3),
                    ("/c", None, 9),
                ],
            ),
            tick(500, "n1", &[("/a", Some("/r"), 1)]),
            tick(1_000, "n1", &[("/a", Some("/r"), 4)]),
            tick(0, "n2", &[("/a", Some("/r"), 6)]),
        ];
        let by_router = series_by(&ticks, 0, 1_000, |s| s.router.as_deref());
        assert_eq!(by_router.len(), 1, "samples without a router are left out");
        assert_eq!(
            by_router["/r"],
            [
                ("n1".to_owned(), vec![(0, 3.0), (1_000, 4.0)]),
                ("n2".to_owned(), vec![(0, 6.0)]),
            ]
        );
        let by_path = series_by(&ticks, 0, 1_000, |s| Some(s.path.as_str()));
        assert_eq!(by_path["/c"], [("n1".to_owned(), vec![(0, 9.0)])]);
    }
}
