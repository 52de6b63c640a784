//! `GET /api/v1/events/stream`: stored events as server-sent events, resumable.
//!
//! Each event is `id: <position>`, `event: <Kind>` and one JSON `data:` line (Akka
//! Management's `/cluster/domain-events` shape): the stored event with `cluster`, `node`,
//! `incarnation`, `at` and `at_ms`. `type` (repeatable) and `cluster` filter.
//!
//! # Resume
//! A client that reconnects with `Last-Event-ID` (an `EventSource` does by itself; or
//! `?last_event_id=`) gets every event stored after that one, from the stored history, then
//! the live ones: none missed, none repeated. Without it the stream starts at what is stored
//! next. With `snapshot=true` a fresh stream (no `Last-Event-ID`) opens with one
//! `CurrentClusterState` event per cluster (the members answer of
//! `/clusters/{cluster}/members`), and continues exactly after it.
//!
//! The stream ends when the server shuts down; `retry: 3000` and a `: keep-alive` comment
//! every 15 s keep proxies and browsers in step (see [`crate::sse`]).

use std::str::FromStr;
use std::sync::Arc;

use actix_web::{HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use troupe_protocol::EventKind;
use utoipa::ToSchema;

use super::clusters::find_cluster;
use super::events::{detail_json, filter_items};
use super::members::members_dto;
use super::nodes::agents;
use crate::error::{ApiError, ErrorBody};
use crate::feed::{Cursor, Feed, FeedItem, Scope};
use crate::request::query;
use crate::sse::{self, Frame};
use crate::state::AppState;
use crate::time::rfc3339;

/// Filters of the live stream.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
    /// Only these kinds; repeat the parameter (`type=MemberUp&type=LeaderChanged`).
    #[serde(default, rename = "type")]
    #[param(value_type = Option<Vec<crate::api::schemas::EventKindName>>, style = Form, explode)]
    pub kinds: Vec<String>,
    /// Only this cluster (absent: every cluster).
    #[param(min_length = 1)]
    pub cluster: Option<String>,
    /// Open a fresh stream with the current state of each cluster (`CurrentClusterState`).
    #[serde(default)]
    pub snapshot: bool,
    /// Resume after this event id, for clients that cannot send `Last-Event-ID`.
    #[param(min_length = 1)]
    pub last_event_id: Option<String>,
}

/// The JSON `data:` line of a `/api/v1/events/stream` event: these fields, beside the stored
/// event's own fields as the agent reported them (`kind` among them; u64 values as strings).
/// A `CurrentClusterState` event's data is `MembersDto` instead.
#[derive(Debug, Serialize, ToSchema)]
pub struct StreamEvent {
    /// The cluster.
    pub cluster: String,
    /// The reporting node's address.
    pub node: String,
    /// The reporting node's incarnation.
    #[schema(value_type = troupe_protocol::wire::schema::U64)]
    pub incarnation: String,
    /// When it happened (reporting node's clock).
    pub at: chrono::DateTime<chrono::Utc>,
    /// The same, epoch milliseconds.
    pub at_ms: i64,
    /// Its kind (`MemberUp`, `DeadLetter`, …), also the SSE `event:` name.
    pub kind: String,
}

/// The kinds asked for (empty: all), or 400 naming the unknown one.
pub(crate) fn parse_kinds(kinds: &[String]) -> Result<Vec<EventKind>, ApiError> {
    filter_items("type", kinds)?
        .into_iter()
        .map(|k| EventKind::from_str(k).map_err(|e| ApiError::BadRequest(e.to_string())))
        .collect()
}

/// Where a stream resumes: `Last-Event-ID`, else `?last_event_id=`; 400 when it is not an id
/// a stream sent.
pub(crate) fn resume_from(
    req: &HttpRequest,
    query: Option<&str>,
) -> Result<Option<Cursor>, ApiError> {
    let header = req
        .headers()
        .get("last-event-id")
        .map(|v| {
            v.to_str()
                .map(str::to_owned)
                .map_err(|_| ApiError::BadRequest("`Last-Event-ID` must be text".to_owned()))
        })
        .transpose()?;
    match header.as_deref().or(query).map(str::trim) {
        None | Some("") => Ok(None),
        Some(text) => text
            .parse()
            .map(Some)
            .map_err(|e: crate::feed::BadCursor| ApiError::BadRequest(e.to_string())),
    }
}

/// The JSON the stream sends for a stored row.
pub(crate) fn item_json(item: &FeedItem) -> Value {
    let mut object = Map::new();
    object.insert("cluster".into(), item.cluster().into());
    let (node, incarnation, at_ms) = match item {
        FeedItem::Event { row, .. } => (&row.node, row.incarnation, row.at_ms),
        FeedItem::DeadLetter { row, .. } => (&row.node, row.incarnation, row.at_ms),
    };
    object.insert("node".into(), node.as_str().into());
    object.insert(
        "incarnation".into(),
        (incarnation as u64).to_string().into(),
    );
    object.insert("at".into(), rfc3339(at_ms).into());
    object.insert("at_ms".into(), at_ms.into());
    match item {
        FeedItem::Event { row, .. } => {
            if let Value::Object(detail) = detail_json(&row.detail) {
                object.extend(detail);
            }
        }
        FeedItem::DeadLetter { row, .. } => {
            object.insert("kind".into(), "DeadLetter".into());
            object.insert("recipient".into(), row.recipient.as_str().into());
            object.insert(
                "sender".into(),
                row.sender.as_deref().map_or(Value::Null, Into::into),
            );
            object.insert("message_type".into(), row.message_type.as_str().into());
            object.insert("reason".into(), row.reason.as_str().into());
        }
    }
    Value::Object(object)
}

/// Stored events as they are stored: `event: <Kind>`, `id:` to resume from, a JSON `data:`.
#[utoipa::path(get, path = "/api/v1/events/stream", operation_id = "streamEvents", tag = "events", params(StreamQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event (the `id:` of an event the stream sent); wins over `last_event_id`")),
    responses((status = 200, description = "A `text/event-stream` that does not end while the server runs: per event `id:` (resume position), `event: <Kind>` and one `data:` line, a JSON `StreamEvent` (`CurrentClusterState`: a `MembersDto`); `retry: 3000` and a `: keep-alive` comment every 15 s",
                content_type = "text/event-stream", body = String,
                example = json!("retry: 3000\n\nid: 1:17.0\nevent: MemberUp\ndata: {\"cluster\":\"demo\",\"node\":\"127.0.0.1:2552\",\"incarnation\":\"15365700884095386388\",\"at\":\"2026-11-30T03:00:00.000Z\",\"at_ms\":1795921200000,\"kind\":\"MemberUp\",\"member\":{}}\n\n")),
              (status = 400, description = "Unknown event kind, or an id (`Last-Event-ID`) no stream sent", body = ErrorBody),
              (status = 404, description = "No such cluster", body = ErrorBody),
              (status = 503, description = "Store unavailable; retry", body = ErrorBody)))]
pub async fn stream(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let query: StreamQuery = query(&req)?;
    let kinds = parse_kinds(&query.kinds)?;
    let resume = resume_from(&req, query.last_event_id.as_deref())?;
    let scope = match query.cluster.as_deref().filter(|c| !c.is_empty()) {
        Some(name) => {
            let cluster = find_cluster(&state, name).await?;
            Scope::One(cluster.id, Arc::from(cluster.cluster_key.as_str()))
        }
        None => Scope::All,
    };
    // Subscribed before any position is read, so no wake-up is lost in between.
    let wake = state.live.subscribe();
    let mut opening = Vec::new();
    let cursor = match resume {
        Some(cursor) => cursor,
        None if query.snapshot => {
            let names: Vec<String> = match &scope {
                Scope::One(_, name) => vec![name.to_string()],
                Scope::All => state
                    .store
                    .clusters()
                    .await?
                    .into_iter()
                    .map(|c| c.cluster_key)
                    .collect(),
            };
            let mut cursor = Cursor::default();
            for name in names {
                let Some(snapshot) = state.store.cluster_snapshot(&name).await? else {
                    continue;
                };
                cursor.set(snapshot.cluster.id, snapshot.position);
                let agents = agents(&state, snapshot.cluster.id).await?;
                let members = members_dto(&snapshot.cluster, &snapshot.members, &agents, false);
                opening.push(Frame {
                    id: Some(cursor.to_string()),
                    event: "CurrentClusterState".to_owned(),
                    data: crate::json::to_string(&members).unwrap_or_default(),
                });
            }
            cursor
        }
        None => Feed::current(&state.store, &scope).await?,
    };
    let feed = Feed::open(state.store.clone(), wake, scope, cursor).await?;
    let encode: sse::Encode = Box::new(move |item, id| {
        let kind = item.kind()?;
        if !kinds.is_empty() && !kinds.contains(&kind) {
            return None;
        }
        Some(Frame {
            id: Some(id),
            event: kind.as_str().to_owned(),
            data: crate::json::to_string(&item_json(item)).unwrap_or_default(),
        })
    });
    Ok(sse::respond(
        state.metrics.clone(),
        state.shutdown.clone(),
        opening,
        feed,
        encode,
    ))
}
