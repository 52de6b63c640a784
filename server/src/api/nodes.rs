//! `GET /api/v1/clusters/{cluster}/nodes`: every agent incarnation that reported.

use crate::json::JsonBody;
use actix_web::{HttpResponse, web};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use super::clusters::find_cluster;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;
use crate::store::AgentRow;
use crate::store::SILENT_HEALTH;
use crate::time::{datetime, now_ms};

crate::api::schemas::named_schema!(
    /// An agent's health as the API shows it.
    AgentHealthName = "AgentHealthName",
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .enum_values(Some(
            troupe_protocol::AgentHealth::ALL
                .iter()
                .map(|h| h.as_str())
                .chain([SILENT_HEALTH]),
        ))
        .description(Some(
            "An agent's health; `unknown`: it has sent nothing for longer than `--agent-silence-ms`",
        ))
        .into()
);

/// Items an agent dropped since it started, by kind.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct DroppedDto {
    /// Membership events.
    pub membership: i64,
    /// Singleton events.
    pub singleton: i64,
    /// Router events.
    pub router: i64,
    /// Dead letters.
    pub dead_letters: i64,
    /// Health events.
    pub health: i64,
    /// Depth samples.
    pub depth_samples: i64,
    /// Whole report batches the agent's spool gave up (pushed out when full, refused as bad
    /// input on replay, torn or unreadable in the spool file), of this incarnation or an
    /// earlier one of the same node. Counts batches, not items: their items that could be
    /// read are counted by kind above too.
    pub spool_batches: i64,
}

/// One agent incarnation.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NodeDto {
    /// Its address.
    pub node: String,
    /// Its incarnation.
    #[serde(with = "troupe_protocol::wire::u64_string")]
    #[schema(value_type = troupe_protocol::wire::schema::U64)]
    pub incarnation: u64,
    /// The machine it runs on (`meta.node`).
    pub meta_node: Option<String>,
    /// `starting`, `ready`, `draining` or `fenced` as last reported; `unknown` once the agent
    /// has sent nothing for longer than `--agent-silence-ms` (its next report shows its real
    /// health again); null before its first health report.
    #[schema(value_type = Option<AgentHealthName>)]
    pub health: Option<String>,
    /// The health it last reported, whether or not it has gone silent since.
    #[schema(value_type = Option<AgentHealthName>)]
    pub reported_health: Option<String>,
    /// First report.
    pub first_seen: DateTime<Utc>,
    /// Latest report (server clock).
    pub last_report: DateTime<Utc>,
    /// Send time of the latest batch (agent clock).
    pub last_sent: DateTime<Utc>,
    /// Highest batch sequence stored.
    pub last_sequence: i64,
    /// Dropped items (running totals).
    pub dropped: DroppedDto,
    /// Its clock minus the server's, in milliseconds, measured on its latest batch (send
    /// time minus receive time, so transit makes a correct clock slightly negative). Event
    /// times more than `--max-clock-skew-ms` ahead of the receive time are stored as the
    /// receive time.
    pub clock_skew_ms: i64,
}

impl NodeDto {
    /// `row` as shown at `now_ms`, silent after `silence_ms` without a report.
    #[must_use]
    pub fn at(row: AgentRow, now_ms: i64, silence_ms: i64) -> Self {
        Self {
            health: row.health_at(now_ms, silence_ms).map(str::to_owned),
            node: row.node,
            incarnation: row.incarnation as u64,
            meta_node: row.meta_node,
            reported_health: row.health,
            first_seen: datetime(row.first_seen_ms),
            last_report: datetime(row.last_report_ms),
            last_sent: datetime(row.last_sent_ms),
            last_sequence: row.last_sequence,
            clock_skew_ms: row.clock_skew_ms,
            dropped: DroppedDto {
                membership: row.dropped_membership,
                singleton: row.dropped_singleton,
                router: row.dropped_router,
                dead_letters: row.dropped_dead_letters,
                health: row.dropped_health,
                depth_samples: row.dropped_depth_samples,
                spool_batches: row.dropped_spool_batches,
            },
        }
    }
}

/// Every agent incarnation of a cluster, by address, newest incarnation first.
#[utoipa::path(get, path = "/api/v1/clusters/{cluster}/nodes", operation_id = "listNodes", tag = "nodes",
    params(("cluster" = String, Path, description = "Cluster key, or a name only one cluster has (409 when several share it; see getCluster)")),
    responses((status = 200, body = [NodeDto]), (status = 404, description = "No such cluster", body = ErrorBody),
              (status = 503, description = "Store unavailable; retry", body = ErrorBody)))]
pub async fn list(
    state: web::Data<AppState>,
    cluster: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let cluster = find_cluster(&state, &cluster).await?;
    let nodes = agents(&state, cluster.id).await?;
    Ok(HttpResponse::Ok().json_body(nodes))
}

/// A cluster's agents as DTOs, as of now (silent ones with health `unknown`).
pub(crate) async fn agents(state: &AppState, cluster_id: i64) -> Result<Vec<NodeDto>, ApiError> {
    let rows = state.store.agents(cluster_id).await?;
    let (now, silence) = (now_ms(), state.config.agent_silence_limit_ms());
    Ok(rows
        .into_iter()
        .map(|row| NodeDto::at(row, now, silence))
        .collect())
}
