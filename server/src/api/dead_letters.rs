//! `GET /api/v1/clusters/{cluster}/dead-letters`, `…/dead-letters/groups` and
//! `…/dead-letters/per-minute`.

use crate::json::JsonBody;
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::clusters::find_cluster;
use crate::error::{ApiError, ErrorBody};
use crate::paging::{next_cursor, page_size, parse_cursor};
use crate::request::query;
use crate::state::AppState;
use crate::store::{DeadLetterFilter, DeadLetterGroup, DeadLetterRow};
use crate::time::{datetime, now_ms, parse_time};

/// A dead letter.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadLetterDto {
    /// Its id (ascending in storage order).
    pub id: i64,
    /// When it happened.
    pub at: DateTime<Utc>,
    /// Where the message was going.
    pub recipient: String,
    /// Who sent it, when known.
    pub sender: Option<String>,
    /// The message's type name.
    pub message_type: String,
    /// Why it was not delivered.
    pub reason: String,
    /// The node that reported it.
    pub node: String,
}

impl From<DeadLetterRow> for DeadLetterDto {
    fn from(row: DeadLetterRow) -> Self {
        Self {
            id: row.id,
            at: datetime(row.at_ms),
            recipient: row.recipient,
            sender: row.sender,
            message_type: row.message_type,
            reason: row.reason,
            node: row.node,
        }
    }
}

/// One page of dead letters.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadLetterPage {
    /// Dead letters, newest first.
    pub dead_letters: Vec<DeadLetterDto>,
    /// Pass as `cursor` for the next (older) page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// Dead letters of one recipient and reason.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadLetterGroupDto {
    /// Where the messages were going.
    pub recipient: String,
    /// Why they were not delivered.
    pub reason: String,
    /// How many in the range.
    pub count: i64,
    /// When the newest of them happened.
    pub last_at: DateTime<Utc>,
}

impl From<DeadLetterGroup> for DeadLetterGroupDto {
    fn from(group: DeadLetterGroup) -> Self {
        Self {
            recipient: group.recipient,
            reason: group.reason,
            count: group.count,
            last_at: datetime(group.last_ms),
        }
    }
}

/// Dead letters counted per recipient and reason.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadLetterGroups {
    /// The groups, the biggest first (ties by recipient, then reason); at most `limit`.
    pub groups: Vec<DeadLetterGroupDto>,
    /// There are more groups than `limit`: narrow the range or filter by recipient or type.
    pub truncated: bool,
}

/// Dead letters in one minute.
#[derive(Debug, Serialize, ToSchema)]
pub struct MinuteCountDto {
    /// Start of the minute.
    pub minute: DateTime<Utc>,
    /// How many.
    pub count: i64,
}

/// Dead letters per minute.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadLetterCounts {
    /// Minutes with at least one dead letter, oldest first.
    pub minutes: Vec<MinuteCountDto>,
    /// All of them together.
    pub total: i64,
}

/// Filters of the dead-letter endpoints.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeadLettersQuery {
    /// Only this recipient path.
    #[param(min_length = 1)]
    pub recipient: Option<String>,
    /// Only this message type.
    #[param(min_length = 1)]
    pub message_type: Option<String>,
    /// From this time (RFC 3339 or epoch ms, inclusive); groups and per-minute counts default to
    /// the last hour.
    #[param(value_type = Option<crate::api::schemas::TimeParameter>)]
    pub since: Option<String>,
    /// Until this time (RFC 3339 or epoch ms, exclusive).
    #[param(value_type = Option<crate::api::schemas::TimeParameter>)]
    pub until: Option<String>,
    /// `next_cursor` of the previous page (list only).
    #[param(value_type = Option<crate::api::schemas::PageCursor>)]
    pub cursor: Option<String>,
    /// Page size, 1..=1000 (default 100): dead letters of the list, groups of the grouping.
    #[param(minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<i64>,
}

fn filter(query: &DeadLettersQuery) -> Result<DeadLetterFilter, ApiError> {
    Ok(DeadLetterFilter {
        recipient: query.recipient.clone(),
        message_type: query.message_type.clone(),
        since_ms: parse_time("since", query.since.as_deref())?,
        until_ms: parse_time("until", query.until.as_deref())?,
        before: parse_cursor(query.cursor.as_deref())?,
        limit: page_size(query.limit)?,
    })
}

/// A cluster's dead letters, newest first.
#[utoipa::path(get, path = "/api/v1/clusters/{cluster}/dead-letters", operation_id = "listDeadLetters", tag = "dead letters",
    params(("cluster" = String, Path, description = "Cluster key, or a name only one cluster has (409 when several share it; see getCluster)"), DeadLettersQuery),
    responses((status = 200, body = DeadLetterPage),
              (status = 400, description = "A bad time, cursor or limit", body = ErrorBody),
              (status = 404, description = "No such cluster", body = ErrorBody),
              (status = 503, description = "Store unavailable; retry", body = ErrorBody)))]
pub async fn list(
    state: web::Data<AppState>,
    req: HttpRequest,
    cluster: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let query: DeadLettersQuery = query(&req)?;
    let filter = filter(&query)?;
    let cluster = find_cluster(&state, &cluster).await?;
    let rows = state.store.dead_letters(cluster.id, &filter).await?;
    let next_cursor = next_cursor(
        rows.len(),
        filter.limit,
        rows.last().map(|r| (r.at_ms, r.id)),
    );
    Ok(HttpResponse::Ok().json_body(DeadLetterPage {
        dead_letters: rows.into_iter().map(Into::into).collect(),
        next_cursor,
    }))
}

/// The filter's `since`, or an hour before its `until` (now when absent).
fn default_to_the_last_hour(filter: &mut DeadLetterFilter) {
    if filter.since_ms.is_none() {
        filter.since_ms = Some(filter.until_ms.unwrap_or_else(now_ms) - 3_600_000);
    }
}

/// A cluster's dead letters counted per recipient and reason, the biggest group first
/// (default range: the last hour).
#[utoipa::path(get, path = "/api/v1/clusters/{cluster}/dead-letters/groups", operation_id = "groupDeadLetters", tag = "dead letters",
    params(("cluster" = String, Path, description = "Cluster key, or a name only one cluster has (409 when several share it; see getCluster)"), DeadLettersQuery),
    responses((status = 200, body = DeadLetterGroups),
              (status = 400, description = "A bad time, cursor or limit", body = ErrorBody),
              (status = 404, description = "No such cluster", body = ErrorBody),
              (status = 503, description = "Store unavailable; retry", body = ErrorBody)))]
pub async fn groups(
    state: web::Data<AppState>,
    req: HttpRequest,
    cluster: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let query: DeadLettersQuery = query(&req)?;
    let mut filter = filter(&query)?;
    default_to_the_last_hour(&mut filter);
    let cluster = find_cluster(&state, &cluster).await?;
    let limit = filter.limit;
    // One more than asked tells whether there are more.
    filter.limit += 1;
    let mut groups = state.store.dead_letter_groups(cluster.id, &filter).await?;
    let truncated = groups.len() as i64 > limit;
    groups.truncate(limit as usize);
    Ok(HttpResponse::Ok().json_body(DeadLetterGroups {
        groups: groups.into_iter().map(Into::into).collect(),
        truncated,
    }))
}

/// Dead letters per minute (default: the last hour).
#[utoipa::path(get, path = "/api/v1/clusters/{cluster}/dead-letters/per-minute", operation_id = "countDeadLettersPerMinute", tag = "dead letters",
    params(("cluster" = String, Path, description = "Cluster key, or a name only one cluster has (409 when several share it; see getCluster)"), DeadLettersQuery),
    responses((status = 200, body = DeadLetterCounts),
              (status = 400, description = "A bad time, cursor or limit", body = ErrorBody),
              (status = 404, description = "No such cluster", body = ErrorBody),
              (status = 503, description = "Store unavailable; retry", body = ErrorBody)))]
pub async fn per_minute(
    state: web::Data<AppState>,
    req: HttpRequest,
    cluster: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let query: DeadLettersQuery = query(&req)?;
    let mut filter = filter(&query)?;
    default_to_the_last_hour(&mut filter);
    let cluster = find_cluster(&state, &cluster).await?;
    let counts = state.store.dead_letter_counts(cluster.id, &filter).await?;
    let total = counts.iter().map(|c| c.count).sum();
    Ok(HttpResponse::Ok().json_body(DeadLetterCounts {
        minutes: counts
            .into_iter()
            .map(|c| MinuteCountDto {
                minute: datetime(c.minute_ms),
                count: c.count,
            })
            .collect(),
        total,
    }))
}
