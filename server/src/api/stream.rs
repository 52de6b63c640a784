//! `GET /api/v1/events/stream`: stored events live, as server-sent events.
//!
//! Each event is `event: <Kind>` plus one JSON `data:` line (Akka Management's
//! `/cluster/domain-events` shape). `type` (repeatable) and `cluster` filter. The stream opens
//! with `retry: 3000` and sends a `: keep-alive` comment every 15 s; it ends when the server
//! shuts down.

use std::str::FromStr;
use std::time::Duration;

use actix_web::web::Bytes;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;
use troupe_protocol::EventKind;

use crate::error::{ApiError, ErrorBody};
use crate::metrics::Metrics;
use crate::request::query;
use crate::state::AppState;

const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Filters of the live stream.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
    /// Only these kinds; repeat the parameter (`type=MemberUp&type=LeaderChanged`).
    #[serde(default, rename = "type")]
    pub kinds: Vec<String>,
    /// Only this cluster.
    pub cluster: Option<String>,
}

/// Streams events as they are stored.
#[utoipa::path(get, path = "/api/v1/events/stream", tag = "events", params(StreamQuery),
    responses((status = 200, description = "text/event-stream", content_type = "text/event-stream", body = String),
              (status = 400, body = ErrorBody)))]
pub async fn stream(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let query: StreamQuery = query(&req)?;
    let kinds = query
        .kinds
        .iter()
        .flat_map(|k| k.split(','))
        .filter(|k| !k.is_empty())
        .map(|k| EventKind::from_str(k).map_err(|e| ApiError::BadRequest(e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    let receiver = state.live.subscribe();
    let shutdown = state.shutdown.clone();
    let metrics = state.metrics.clone();
    metrics.stream_clients(1);
    let guard = ClientGuard(metrics);
    let mut keep_alive =
        tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
    keep_alive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let opening = futures_util::stream::once(async {
        Ok::<_, actix_web::Error>(Bytes::from_static(b"retry: 3000\n\n"))
    });
    let events = futures_util::stream::unfold(
        (receiver, shutdown, keep_alive, guard),
        move |(mut receiver, mut shutdown, mut keep_alive, guard)| {
            let kinds = kinds.clone();
            let cluster = query.cluster.clone();
            async move {
                loop {
                    if *shutdown.borrow() {
                        return None;
                    }
                    let frame = tokio::select! {
                        received = receiver.recv() => match received {
                            Ok(event) => {
                                let wanted = (kinds.is_empty() || kinds.contains(&event.kind))
                                    && cluster.as_ref().is_none_or(|c| *c == event.cluster);
                                if !wanted {
                                    continue;
                                }
                                format!("event: {}\ndata: {}\n\n", event.kind, event.json)
                            }
                            Err(RecvError::Lagged(missed)) => format!(": missed {missed} events\n\n"),
                            Err(RecvError::Closed) => return None,
                        },
                        _ = keep_alive.tick() => ": keep-alive\n\n".to_owned(),
                        _ = shutdown.changed() => return None,
                    };
                    return Some((
                        Ok::<_, actix_web::Error>(Bytes::from(frame)),
                        (receiver, shutdown, keep_alive, guard),
                    ));
                }
            }
        },
    );
    Ok(HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(futures_util::StreamExt::chain(opening, events)))
}

/// Counts the stream in `troupe_event_stream_clients` while it lives.
struct ClientGuard(std::sync::Arc<Metrics>);

impl std::fmt::Debug for ClientGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientGuard")
    }
}

impl Drop for ClientGuard {
    fn drop(&mut self) {
        self.0.stream_clients(-1);
    }
}
