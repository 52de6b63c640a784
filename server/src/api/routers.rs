//! `GET /api/v1/clusters/{cluster}/routers` and `…/routers/depth`: routers, their routees, and
//! mailbox depth over time.
//!
//! # Depth series
//! Each agent stores one row per sampling tick. For a router (or one actor path), the series
//! of a node is the summed depth of the matching mailboxes at each tick, bucketed over the time
//! range: mean and max per bucket.

use crate::json::JsonBody;
use std::collections::BTreeMap;

use actix_web::{HttpRequest, HttpResponse, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use troupe_protocol::DepthSample;
use utoipa::ToSchema;

use super::clusters::find_cluster;
use crate::error::{ApiError, ErrorBody};
use crate::request::query;
use crate::state::AppState;
use crate::store::{DepthTickRow, RouterRow, string_list};
use crate::time::{datetime, now_ms, parse_time};

/// Most ticks one depth query reads.
const MAX_TICKS: i64 = 200_000;
/// Widest bucket, seconds (a leap year).
pub const MAX_BUCKET_SECONDS: i64 = 31_622_400;
/// Buckets when none is asked for.
const DEFAULT_BUCKETS: i64 = 60;

/// A router.
#[derive(Debug, Serialize, ToSchema)]
pub struct RouterDto {
    /// Its actor path.
    pub path: String,
    /// `round-robin`, `random`, `consistent-hashing`, `smallest-mailbox` or `broadcast`.
    pub strategy: String,
    /// The role routees carry.
    pub role: Option<String>,
    /// The routee actor's path on each member.
    pub routee_path: Option<String>,
    /// The current routees, address-ordered.
    pub routees: Vec<String>,
    /// When this was last reported.
    pub updated: DateTime<Utc>,
}

impl From<RouterRow> for RouterDto {
    fn from(row: RouterRow) -> Self {
        Self {
            routees: string_list(&row.routees),
            path: row.path,
            strategy: row.strategy,
            role: row.role,
            routee_path: row.routee_path,
            updated: datetime(row.updated_ms),
        }
    }
}

/// A cluster's routers with their routees.
#[utoipa::path(get, path = "/api/v1/clusters/{cluster}/routers", operation_id = "listRouters", tag = "routers",
    params(("cluster" = String, Path, description = "Cluster key, or a name only one cluster has (409 when several share it; see getCluster)")),
    responses((status = 200, body = [RouterDto]), (status = 404, description = "No such cluster", body = ErrorBody),
              (status = 503, description = "Store unavailable; retry", body = ErrorBody)))]
pub async fn list(
    state: web::Data<AppState>,
    cluster: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let cluster = find_cluster(&state, &cluster).await?;
    let routers: Vec<RouterDto> = state
        .store
        .routers(cluster.id)
        .await?
        .into_iter()
        .map(Into::into)
        .collect();
    Ok(HttpResponse::Ok().json_body(routers))
}

/// Query of the depth series.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DepthQuery {
    /// The router's path: sum the depths of its routees. Give exactly one of `router` and `path`.
    #[param(min_length = 1)]
    pub router: Option<String>,
    /// Or one actor path.
    #[param(min_length = 1)]
    pub path: Option<String>,
    /// From (RFC 3339 or epoch ms; default one hour before `until`); before `until`.
    #[param(value_type = Option<crate::api::schemas::TimeParameter>)]
    pub since: Option<String>,
    /// Until (RFC 3339 or epoch ms; default now).
    #[param(value_type = Option<crate::api::schemas::TimeParameter>)]
    pub until: Option<String>,
    /// Bucket width in seconds, 1..=31622400 (a leap year; default: the range in 60 buckets).
    #[param(minimum = 1, maximum = 31_622_400)]
    pub bucket_seconds: Option<i64>,
}

/// One bucket of a series.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct DepthPoint {
    /// Start of the bucket.
    pub at: DateTime<Utc>,
    /// Mean summed depth over the bucket's ticks.
    pub mean: f64,
    /// Largest summed depth in the bucket.
    #[serde(with = "troupe_protocol::wire::u64_string")]
    #[schema(value_type = troupe_protocol::wire::schema::U64)]
    pub max: u64,
    /// Ticks in the bucket.
    pub ticks: u32,
}

/// One node's series.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct NodeSeries {
    /// The node's address.
    pub node: String,
    /// Buckets with at least one tick, oldest first.
    pub points: Vec<DepthPoint>,
}

/// Mailbox depth over time, per node.
#[derive(Debug, Serialize, ToSchema)]
pub struct DepthSeries {
    /// The router asked for.
    pub router: Option<String>,
    /// The actor path asked for.
    pub path: Option<String>,
    /// Range start.
    pub since: DateTime<Utc>,
    /// Range end.
    pub until: DateTime<Utc>,
    /// Bucket width.
    pub bucket_seconds: i64,
    /// `true` when the range held more ticks than one query reads (narrow it).
    pub truncated: bool,
    /// One series per node, by address.
    pub series: Vec<NodeSeries>,
}

/// Which mailboxes a series sums.
#[derive(Debug, Clone, Copy)]
pub(crate) enum DepthTarget<'a> {
    /// The routees of a router.
    Router(&'a str),
    /// One actor.
    Path(&'a str),
}

/// Buckets ticks into per-node series.
pub(crate) fn bucket(
    ticks: &[DepthTickRow],
    target: DepthTarget<'_>,
    since_ms: i64,
    bucket_ms: i64,
) -> Vec<NodeSeries> {
    #[derive(Default)]
    struct Acc {
        sum: u64,
        max: u64,
        ticks: u64,
    }
    let mut nodes: BTreeMap<&str, BTreeMap<i64, Acc>> = BTreeMap::new();
    for tick in ticks {
        let Ok(samples) = serde_json::from_str::<Vec<DepthSample>>(&tick.samples) else {
            continue;
        };
        let mut matched = false;
        let mut total = 0u64;
        for sample in &samples {
            let hit = match target {
                DepthTarget::Router(r) => sample.router.as_deref() == Some(r),
                DepthTarget::Path(p) => sample.path == p,
            };
            if hit {
                matched = true;
                total += u64::from(sample.depth);
            }
        }
        if !matched {
            continue;
        }
        let start = since_ms + (tick.at_ms - since_ms).div_euclid(bucket_ms) * bucket_ms;
        let acc = nodes
            .entry(tick.node.as_str())
            .or_default()
            .entry(start)
            .or_default();
        acc.sum += total;
        acc.max = acc.max.max(total);
        acc.ticks += 1;
    }
    nodes
        .into_iter()
        .map(|(node, buckets)| NodeSeries {
            node: node.to_owned(),
            points: buckets
                .into_iter()
                .map(|(start, acc)| DepthPoint {
                    at: datetime(start),
                    mean: acc.sum as f64 / acc.ticks as f64,
                    max: acc.max,
                    ticks: u32::try_from(acc.ticks).unwrap_or(u32::MAX),
                })
                .collect(),
        })
        .collect()
}

/// Mailbox depth of a router's routees (or one actor) over a time range, per node, bucketed.
#[utoipa::path(get, path = "/api/v1/clusters/{cluster}/routers/depth", operation_id = "getRouterDepth", tag = "routers",
    params(("cluster" = String, Path, description = "Cluster key, or a name only one cluster has (409 when several share it; see getCluster)"), DepthQuery),
    responses((status = 200, body = DepthSeries),
              (status = 400, description = "Not exactly one of `router` and `path`, a bad time, `since` not before `until`, or `bucket_seconds` out of range", body = ErrorBody),
              (status = 404, description = "No such cluster", body = ErrorBody),
              (status = 503, description = "Store unavailable; retry", body = ErrorBody)))]
pub async fn depth(
    state: web::Data<AppState>,
    req: HttpRequest,
    cluster: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let query: DepthQuery = query(&req)?;
    let target = match (&query.router, &query.path) {
        (Some(router), None) => DepthTarget::Router(router),
        (None, Some(path)) => DepthTarget::Path(path),
        _ => {
            return Err(ApiError::BadRequest(
                "give exactly one of `router` (a router's path) or `path` (an actor's path)"
                    .to_owned(),
            ));
        }
    };
    let until_ms = parse_time("until", query.until.as_deref())?.unwrap_or_else(now_ms);
    let since_ms = parse_time("since", query.since.as_deref())?.unwrap_or(until_ms - 3_600_000);
    if since_ms >= until_ms {
        return Err(ApiError::BadRequest(
            "`since` must be before `until`".to_owned(),
        ));
    }
    let bucket_ms = match query.bucket_seconds {
        Some(s) if (1..=MAX_BUCKET_SECONDS).contains(&s) => s * 1000,
        Some(s) => {
            return Err(ApiError::BadRequest(format!(
                "`bucket_seconds` must be between 1 and {MAX_BUCKET_SECONDS} (a leap year), got {s}"
            )));
        }
        None => ((until_ms - since_ms) / DEFAULT_BUCKETS).max(1000),
    };
    let cluster = find_cluster(&state, &cluster).await?;
    let ticks = state
        .store
        .depth_ticks(cluster.id, since_ms, until_ms, MAX_TICKS)
        .await?;
    let series = bucket(&ticks, target, since_ms, bucket_ms);
    Ok(HttpResponse::Ok().json_body(DepthSeries {
        router: query.router.clone(),
        path: query.path.clone(),
        since: datetime(since_ms),
        until: datetime(until_ms),
        bucket_seconds: bucket_ms / 1000,
        truncated: ticks.len() as i64 == MAX_TICKS,
        series,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick(at_ms: i64, node: &str, samples: &str) -> DepthTickRow {
        DepthTickRow {
            at_ms,
            node: node.to_owned(),
            samples: samples.to_owned(),
        }
    }

    #[test]
    fn router_series_sums_routees_per_tick_and_buckets_mean_and_max() {
        let r = r#"[{"path":"/a","router":"/r","depth":2},{"path":"/b","router":"/r","depth":3},{"path":"/c","router":null,"depth":100}]"#;
        let r2 = r#"[{"path":"/a","router":"/r","depth":1}]"#;
        let ticks = [
            tick(0, "n1", r),
            tick(500, "n1", r2),
            tick(1000, "n1", r2),
            tick(0, "n2", r2),
        ];
        let series = bucket(&ticks, DepthTarget::Router("/r"), 0, 1000);
        assert_eq!(series.len(), 2);
        let n1 = &series[0].points;
        assert_eq!((n1[0].mean, n1[0].max, n1[0].ticks), (3.0, 5, 2));
        assert_eq!((n1[1].mean, n1[1].max), (1.0, 1));
        assert_eq!(series[1].node, "n2");
    }

    #[test]
    fn path_series_ignores_ticks_without_that_actor() {
        let ticks = [
            tick(0, "n1", r#"[{"path":"/x","depth":4}]"#),
            tick(0, "n2", r#"[{"path":"/y","depth":4}]"#),
        ];
        let series = bucket(&ticks, DepthTarget::Path("/x"), 0, 1000);
        assert_eq!(series.len(), 1);
        assert_eq!(series[0].points[0].max, 4);
    }
}
