//! `GET /api/v1/clusters/{cluster}/events`: the event history, newest first, with cursor paging.
//!
//! Dead letters have their own endpoint (`/dead-letters`): they are stored apart because they
//! are the high-volume kind.

use crate::json::JsonBody;
use std::str::FromStr;

use actix_web::{HttpRequest, HttpResponse, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use troupe_protocol::EventKind;
use utoipa::ToSchema;

use super::clusters::find_cluster;
use crate::error::{ApiError, ErrorBody};
use crate::paging::{next_cursor, page_size, parse_cursor};
use crate::request::query;
use crate::state::AppState;
use crate::store::{EventFilter, EventRow};
use crate::time::{datetime, parse_time};

/// A stored event.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventDto {
    /// Its id (ascending in storage order; ties of `at_ms` are ordered by it).
    pub id: i64,
    /// When it happened (reporting node's clock; a time more than `--max-clock-skew-ms` ahead
    /// of the server's receive time is stored as the receive time).
    pub at: DateTime<Utc>,
    /// The same, epoch milliseconds.
    pub at_ms: i64,
    /// Its kind (`MemberUp`, `SingletonHandOverCompleted`, …).
    pub kind: String,
    /// `membership`, `singleton`, `router` or `health`.
    pub category: String,
    /// What it is about: member address, singleton name or router path.
    pub subject: Option<String>,
    /// The reporting node's address.
    pub node: String,
    /// The reporting node's incarnation.
    #[serde(with = "troupe_protocol::wire::u64_string")]
    #[schema(value_type = troupe_protocol::wire::schema::U64)]
    pub incarnation: u64,
    /// The event's fields as the agent sent them (with `kind`).
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
}

impl From<EventRow> for EventDto {
    fn from(row: EventRow) -> Self {
        let category = EventKind::from_str(&row.kind)
            .map(|k| k.category().as_str())
            .unwrap_or("unknown");
        Self {
            id: row.id,
            at: datetime(row.at_ms),
            at_ms: row.at_ms,
            category: category.to_owned(),
            kind: row.kind,
            subject: row.subject,
            node: row.node,
            incarnation: row.incarnation as u64,
            detail: detail_json(&row.detail),
        }
    }
}

/// A stored event body as JSON in today's wire form (u64 values as strings), whatever form it
/// was stored in; a body that no longer parses is shown as stored.
pub(crate) fn detail_json(stored: &str) -> serde_json::Value {
    match serde_json::from_str::<troupe_protocol::EventBody>(stored) {
        Ok(body) => serde_json::to_value(&body).unwrap_or(serde_json::Value::Null),
        Err(_) => serde_json::from_str(stored).unwrap_or(serde_json::Value::Null),
    }
}

/// One page of events.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventPage {
    /// Events, newest (by event time) first.
    pub events: Vec<EventDto>,
    /// Pass as `cursor` for the next (older) page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// Filters of the event list.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only these kinds; repeat the parameter (`kind=MemberUp&kind=LeaderChanged`).
    #[serde(default)]
    #[param(value_type = Option<Vec<crate::api::schemas::EventKindName>>, style = Form, explode)]
    pub kind: Vec<String>,
    /// Only these categories; repeatable.
    #[serde(default)]
    #[param(value_type = Option<Vec<crate::api::schemas::EventCategoryName>>, style = Form, explode)]
    pub category: Vec<String>,
    /// Only events reported by this node address.
    #[param(min_length = 1)]
    pub node: Option<String>,
    /// Only events about this member address, singleton name or router path.
    #[param(min_length = 1)]
    pub subject: Option<String>,
    /// From this time (RFC 3339 or epoch ms, inclusive).
    #[param(value_type = Option<crate::api::schemas::TimeParameter>)]
    pub since: Option<String>,
    /// Until this time (RFC 3339 or epoch ms, exclusive).
    #[param(value_type = Option<crate::api::schemas::TimeParameter>)]
    pub until: Option<String>,
    /// `next_cursor` of the previous page.
    #[param(value_type = Option<crate::api::schemas::PageCursor>)]
    pub cursor: Option<String>,
    /// Page size, 1..=1000 (default 100).
    #[param(minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<i64>,
}

/// The items of a repeatable filter: each value, and each comma-separated part of one; an
/// empty part is refused (it names nothing).
pub(crate) fn filter_items<'a>(name: &str, values: &'a [String]) -> Result<Vec<&'a str>, ApiError> {
    let mut out = Vec::new();
    for value in values {
        for item in value.split(',') {
            if item.is_empty() {
                return Err(ApiError::BadRequest(format!(
                    "`{name}` has an empty value (`{value}`); give a name or leave it out"
                )));
            }
            out.push(item);
        }
    }
    Ok(out)
}

/// Resolves kind and category names into the list of kinds to match.
pub(crate) fn kinds_filter(
    kinds: &[String],
    categories: &[String],
) -> Result<Vec<String>, ApiError> {
    let mut out = Vec::new();
    for kind in filter_items("kind", kinds)? {
        let kind = EventKind::from_str(kind).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        out.push(kind.as_str().to_owned());
    }
    for category in filter_items("category", categories)? {
        let matching: Vec<_> = EventKind::ALL
            .iter()
            .filter(|k| k.category().as_str() == category)
            .map(|k| k.as_str().to_owned())
            .collect();
        if matching.is_empty() {
            return Err(ApiError::BadRequest(format!(
                "unknown category `{category}`; known: membership, singleton, router, dead-letter, health"
            )));
        }
        out.extend(matching);
    }
    Ok(out)
}

/// A cluster's events, newest first, filtered by kind, node, subject and time range.
#[utoipa::path(get, path = "/api/v1/clusters/{cluster}/events", operation_id = "listEvents", tag = "events",
    params(("cluster" = String, Path, description = "Cluster key, or a name only one cluster has (409 when several share it; see getCluster)"), EventsQuery),
    responses((status = 200, body = EventPage),
              (status = 400, description = "A malformed filter (unknown kind or category, bad time, cursor or limit)", body = ErrorBody),
              (status = 404, description = "No such cluster", body = ErrorBody),
              (status = 503, description = "Store unavailable; retry", body = ErrorBody)))]
pub async fn list(
    state: web::Data<AppState>,
    req: HttpRequest,
    cluster: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let query: EventsQuery = query(&req)?;
    let filter = EventFilter {
        kinds: kinds_filter(&query.kind, &query.category)?,
        node: query.node,
        subject: query.subject,
        since_ms: parse_time("since", query.since.as_deref())?,
        until_ms: parse_time("until", query.until.as_deref())?,
        before: parse_cursor(query.cursor.as_deref())?,
        limit: page_size(query.limit)?,
    };
    let cluster = find_cluster(&state, &cluster).await?;
    let rows = state.store.events(cluster.id, &filter).await?;
    let next_cursor = next_cursor(
        rows.len(),
        filter.limit,
        rows.last().map(|r| (r.at_ms, r.id)),
    );
    Ok(HttpResponse::Ok().json_body(EventPage {
        events: rows.into_iter().map(Into::into).collect(),
        next_cursor,
    }))
}

#[cfg(test)]
mod tests {
    use super::detail_json;

    #[test]
    fn details_stored_with_numbers_are_shown_with_u64_strings() {
        let stored = r#"{"kind":"SingletonHandOverCompleted","singleton":"s","new_host":"a:1","duration_ms":740}"#;
        let shown = detail_json(stored);
        assert_eq!(shown["duration_ms"], "740");
        assert_eq!(shown["kind"], "SingletonHandOverCompleted");
        assert_eq!(
            detail_json(r#"{"kind":"Gone","x":1}"#)["x"],
            1,
            "kept as stored"
        );
    }
}
