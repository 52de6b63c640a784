//! `GET /api/v1/clusters`, `GET /api/v1/clusters/{cluster}`: the clusters that report.
//!
//! # Which cluster a path names
//! Clusters are keyed by name and identity (the keyed hash of the cluster secret their agents
//! report), so two clusters of the same name are two clusters. `{cluster}` in every path is a
//! cluster's `key`: its name alone when its agents report no identity, `name~<fingerprint>`
//! otherwise. A bare name also names the one cluster of that name when there is exactly one;
//! when several share it the request is refused (409) listing their keys, so that nothing
//! (a Leave least of all) goes to a cluster the caller did not mean.

use crate::json::JsonBody;
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
    /// How paths name it: `name`, or `name~<identity fingerprint>` when its agents report a
    /// cluster identity (two clusters of the same name have different keys).
    pub key: String,
    /// Its (actor system) name; clusters with different secrets may share it.
    pub name: String,
    /// The first 16 hex digits of the cluster identity its agents report (a keyed hash of the
    /// cluster secret), absent when they report none.
    pub identity_fingerprint: Option<String>,
    /// The leader's address, as last reported.
    pub leader: Option<String>,
    /// When one of its agents first reported.
    pub first_seen: DateTime<Utc>,
    /// When one of its agents last reported.
    pub last_report: DateTime<Utc>,
}

impl From<ClusterRow> for ClusterDto {
    fn from(row: ClusterRow) -> Self {
        let identity_fingerprint = (!row.identity.is_empty()).then(|| {
            row.identity
                .chars()
                .take(troupe_protocol::CLUSTER_KEY_FINGERPRINT)
                .collect()
        });
        Self {
            key: row.cluster_key,
            name: row.name,
            identity_fingerprint,
            leader: row.leader,
            first_seen: datetime(row.first_seen_ms),
            last_report: datetime(row.last_report_ms),
        }
    }
}

/// Every cluster that has reported, by name then key.
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
    Ok(HttpResponse::Ok().json_body(clusters))
}

/// The cluster `key` names (see the module docs), or 404, or 409 when it is a name several
/// clusters share.
pub(crate) async fn find_cluster(state: &AppState, key: &str) -> Result<ClusterRow, ApiError> {
    if let Some(row) = state.store.cluster(key).await? {
        return Ok(row);
    }
    let mut named = if key.contains(troupe_protocol::CLUSTER_KEY_SEPARATOR) {
        Vec::new()
    } else {
        state.store.clusters_named(key).await?
    };
    match named.len() {
        0 => Err(ApiError::NotFound(format!(
            "no cluster with key or name `{key}` has reported"
        ))),
        1 => Ok(named.remove(0)),
        _ => Err(ApiError::Conflict(format!(
            "{} clusters named `{key}` have reported (their agents hold different secrets); name one by its key: {}",
            named.len(),
            named
                .iter()
                .map(|c| c.cluster_key.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// One cluster.
#[utoipa::path(get, path = "/api/v1/clusters/{cluster}", operation_id = "getCluster", tag = "clusters",
    params(("cluster" = String, Path, description = "Cluster key (`name` or `name~<identity fingerprint>`), or a name only one cluster has")),
    responses((status = 200, body = ClusterDto), (status = 404, description = "No such cluster", body = ErrorBody),
              (status = 409, description = "Several clusters share this name; use a key", body = ErrorBody),
              (status = 503, description = "Store unavailable; retry", body = ErrorBody)))]
pub async fn one(
    state: web::Data<AppState>,
    cluster: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let row = find_cluster(&state, &cluster).await?;
    Ok(HttpResponse::Ok().json_body(ClusterDto::from(row)))
}
