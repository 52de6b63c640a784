//! `GET /api/v1/clusters`, `GET /api/v1/clusters/{cluster}`: the clusters that report.

use actix_web::{HttpResponse, web};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;
use crate::store::ClusterRow;
use crate::time::datetime;

/// A cluster.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClusterDto {
    /// Its name.
    pub name: String,
    /// The leader's address, as last reported.
    pub leader: Option<String>,
    /// When one of its agents first reported.
    pub first_seen: DateTime<Utc>,
    /// When one of its agents last reported.
    pub last_report: DateTime<Utc>,
}

impl From<ClusterRow> for ClusterDto {
    fn from(row: ClusterRow) -> Self {
        Self {
            name: row.name,
            leader: row.leader,
            first_seen: datetime(row.first_seen_ms),
            last_report: datetime(row.last_report_ms),
        }
    }
}

/// Every cluster that has reported, by name.
#[utoipa::path(get, path = "/api/v1/clusters", operation_id = "listClusters", tag = "clusters",
    responses((status = 200, body = [ClusterDto]), (status = 503, description = "Store unavailable; retry", body = ErrorBody)))]
pub async fn list(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let clusters: Vec<ClusterDto> = state
        .store
        .clusters()
        .await?
        .into_iter()
        .map(Into::into)
        .collect();
    Ok(HttpResponse::Ok().json(clusters))
}

/// The cluster named `name`, or 404.
pub(crate) async fn find_cluster(state: &AppState, name: &str) -> Result<ClusterRow, ApiError> {
    state
        .store
        .cluster(name)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no cluster named `{name}` has reported")))
}

/// One cluster.
#[utoipa::path(get, path = "/api/v1/clusters/{cluster}", operation_id = "getCluster", tag = "clusters",
    params(("cluster" = String, Path, description = "Cluster name")),
    responses((status = 200, body = ClusterDto), (status = 404, description = "No such cluster", body = ErrorBody),
              (status = 503, description = "Store unavailable; retry", body = ErrorBody)))]
pub async fn one(
    state: web::Data<AppState>,
    cluster: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let row = find_cluster(&state, &cluster).await?;
    Ok(HttpResponse::Ok().json(ClusterDto::from(row)))
}
