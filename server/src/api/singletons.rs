//! `GET /api/v1/clusters/{cluster}/singletons[/{name}]`: current host, lease and hand-over
//! history.

use crate::json::JsonBody;
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use troupe_protocol::{EventCategory, EventKind};
use utoipa::ToSchema;

use super::clusters::find_cluster;
use super::events::EventDto;
use crate::error::{ApiError, ErrorBody};
use crate::paging::page_size;
use crate::request::query;
use crate::state::AppState;
use crate::store::{EventFilter, SingletonRow};
use crate::time::datetime;

/// A singleton's current state.
#[derive(Debug, Serialize, ToSchema)]
pub struct SingletonDto {
    /// Its name.
    pub name: String,
    /// The role hosts carry.
    pub role: Option<String>,
    /// Where its instance runs, if anywhere.
    pub host: Option<String>,
    /// Since when (or since when nobody hosts it).
    pub host_since: DateTime<Utc>,
    /// Its lease's name, if it uses one.
    pub lease: Option<String>,
    /// Who holds the lease.
    pub lease_holder: Option<String>,
}

impl From<SingletonRow> for SingletonDto {
    fn from(row: SingletonRow) -> Self {
        Self {
            name: row.name,
            role: row.role,
            host: row.host,
            host_since: datetime(row.host_at_ms),
            lease: row.lease,
            lease_holder: row.lease_holder,
        }
    }
}

/// A singleton with its history.
#[derive(Debug, Serialize, ToSchema)]
pub struct SingletonDetail {
    /// Its current state.
    pub singleton: SingletonDto,
    /// Hand-overs (started, completed with duration, timed out with silent peers), instance
    /// starts and stops, lease and held-message events; newest first.
    pub history: Vec<EventDto>,
}

/// Query of the singleton detail.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// History entries, 1..=1000 (default 100).
    #[param(minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<i64>,
}

/// A cluster's singletons with their current host and lease.
#[utoipa::path(get, path = "/api/v1/clusters/{cluster}/singletons", operation_id = "listSingletons", tag = "singletons",
    params(("cluster" = String, Path, description = "Cluster key, or a name only one cluster has (409 when several share it; see getCluster)")),
    responses((status = 200, body = [SingletonDto]), (status = 404, description = "No such cluster", body = ErrorBody),
              (status = 503, description = "Store unavailable; retry", body = ErrorBody)))]
pub async fn list(
    state: web::Data<AppState>,
    cluster: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let cluster = find_cluster(&state, &cluster).await?;
    let singletons: Vec<SingletonDto> = state
        .store
        .singletons(cluster.id)
        .await?
        .into_iter()
        .map(Into::into)
        .collect();
    Ok(HttpResponse::Ok().json_body(singletons))
}

/// One singleton with its hand-over history.
#[utoipa::path(get, path = "/api/v1/clusters/{cluster}/singletons/{name}", operation_id = "getSingleton", tag = "singletons",
    params(("cluster" = String, Path, description = "Cluster key, or a name only one cluster has (409 when several share it; see getCluster)"),
           ("name" = String, Path, description = "Singleton name"), HistoryQuery),
    responses((status = 200, body = SingletonDetail),
              (status = 400, description = "`limit` out of range", body = ErrorBody),
              (status = 404, description = "No such cluster or singleton", body = ErrorBody),
              (status = 503, description = "Store unavailable; retry", body = ErrorBody)))]
pub async fn one(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (cluster, name) = path.into_inner();
    let query: HistoryQuery = query(&req)?;
    let cluster = find_cluster(&state, &cluster).await?;
    let singleton = state
        .store
        .singletons(cluster.id)
        .await?
        .into_iter()
        .find(|s| s.name == name);
    let filter = EventFilter {
        subject: Some(name.clone()),
        kinds: EventKind::ALL
            .iter()
            .filter(|k| k.category() == EventCategory::Singleton)
            .map(|k| k.as_str().to_owned())
            .collect(),
        limit: page_size(query.limit)?,
        ..EventFilter::default()
    };
    let history: Vec<EventDto> = state
        .store
        .events(cluster.id, &filter)
        .await?
        .into_iter()
        .map(Into::into)
        .collect();
    let singleton = match singleton {
        Some(row) => row.into(),
        // Elected or handing over, but no instance or lease reported yet.
        None if !history.is_empty() => SingletonDto {
            name,
            role: None,
            host: None,
            host_since: datetime(0),
            lease: None,
            lease_holder: None,
        },
        None => {
            return Err(ApiError::NotFound(format!(
                "no singleton `{name}` in `{}`",
                cluster.cluster_key
            )));
        }
    };
    Ok(HttpResponse::Ok().json_body(SingletonDetail { singleton, history }))
}
