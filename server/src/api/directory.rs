//! `/api/v1/coordination/{claims,hosts,directory}…`: the actor directory over HTTP (claim,
//! look up, release, evict a host, snapshot, and a long-poll watch of changes).

use crate::json::JsonBody;
use std::time::Duration;

use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use serde::{Deserialize, Serialize};
use troupe_lease::directory::{
    Claim, ClaimOutcome, DirectoryChange, DirectoryError, DirectoryEvent, Revision, validate_actor,
    validate_host,
};
use utoipa::{IntoParams, ToSchema};

use super::allow::resource;
use super::audit::{AskedCoordination, audited_coordination};
use crate::error::{ApiError, ErrorBody};
use crate::request::{json_body, query_expecting};
use crate::state::AppState;

/// Longest a watch long-poll waits for a change.
pub const MAX_WATCH_WAIT_MS: u64 = 60_000;
/// Wait of a watch long-poll that asks for none.
pub const DEFAULT_WATCH_WAIT_MS: u64 = 10_000;
/// Most events one watch answer carries.
pub const MAX_WATCH_EVENTS: usize = 1_000;
/// The header a 410 watch answer carries.
pub const OLDEST_REVISION_HEADER: &str = "x-troupe-oldest-revision";

/// Claim an actor for a host.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    /// The claiming host: not empty, no control characters.
    #[schema(value_type = crate::api::schemas::CoordinationName)]
    pub host: String,
}

/// One actor's owner.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ClaimDto {
    /// The actor id.
    pub actor: String,
    /// The owning host.
    pub host: String,
    /// The revision that created the claim.
    #[serde(with = "troupe_protocol::wire::u64_string")]
    #[schema(value_type = troupe_protocol::wire::schema::U64)]
    pub revision: u64,
}

impl From<Claim> for ClaimDto {
    fn from(claim: Claim) -> Self {
        Self {
            actor: claim.actor,
            host: claim.host,
            revision: claim.revision.0,
        }
    }
}

/// The answer to a claim.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ClaimOutcomeDto {
    /// Whether the claimant owns the actor now.
    pub won: bool,
    /// The claim in force.
    pub claim: ClaimDto,
}

/// A lookup.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LookupDto {
    /// The claim, when the actor is claimed.
    pub claim: Option<ClaimDto>,
}

/// Whether a release removed the claim.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ClaimReleasedDto {
    /// `false` (and nothing changed) when the host did not own the actor.
    pub released: bool,
}

/// The actors an eviction released.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EvictedDto {
    /// Their ids.
    pub released: Vec<String>,
}

/// Every claim at one revision.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SnapshotDto {
    /// The claims.
    pub claims: Vec<ClaimDto>,
    /// The revision they are current at; watch after it.
    #[serde(with = "troupe_protocol::wire::u64_string")]
    #[schema(value_type = troupe_protocol::wire::schema::U64)]
    pub revision: u64,
}

/// One change of the directory.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DirectoryEventDto {
    /// When it took effect.
    #[serde(with = "troupe_protocol::wire::u64_string")]
    #[schema(value_type = troupe_protocol::wire::schema::U64)]
    pub revision: u64,
    /// `claimed` or `released`.
    pub kind: String,
    /// The actor id.
    pub actor: String,
    /// The new owner (claimed) or the former one (released).
    pub host: String,
}

impl From<DirectoryEvent> for DirectoryEventDto {
    fn from(event: DirectoryEvent) -> Self {
        let (kind, actor, host) = match event.change {
            DirectoryChange::Claimed { actor, host } => ("claimed", actor, host),
            DirectoryChange::Released { actor, host } => ("released", actor, host),
        };
        Self {
            revision: event.revision.0,
            kind: kind.to_owned(),
            actor,
            host,
        }
    }
}

/// The changes a watch poll returns.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WatchDto {
    /// In revision order; empty when none came within the wait.
    pub events: Vec<DirectoryEventDto>,
}

/// `?host=`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct HostQuery {
    /// The host whose claim to remove.
    #[param(value_type = crate::api::schemas::CoordinationName)]
    pub host: String,
}

/// `?after=&wait_ms=`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct WatchQuery {
    /// Changes after this revision (the `revision` of a snapshot or of the last event seen).
    #[param(value_type = troupe_protocol::wire::schema::U64)]
    pub after: u64,
    /// Milliseconds to wait for a first change, 0..=60000 (default 10000).
    #[param(minimum = 0, maximum = 60_000)]
    pub wait_ms: Option<u64>,
}

/// Claim `actor` for `host`; exactly one of concurrent claimants wins.
#[utoipa::path(post, path = "/api/v1/coordination/claims/{actor}", operation_id = "claimActor", tag = "coordination",
    params(("actor" = crate::api::schemas::CoordinationName, Path, description = "Actor id")),
    request_body = ClaimRequest,
    responses((status = 200, description = "`won`: whether the claimant owns the actor now; `claim`: the claim in force", body = ClaimOutcomeDto),
        (status = 400, description = "A malformed body (`code` `bad_request`), or an actor id or host outside the limits (`actor_…`, `host_…`: `_empty`, `_too_long`, `_control_character`)", body = ErrorBody),
        (status = 401, description = "Missing or wrong coordination token", body = ErrorBody), (status = 403, description = "The coordination API is off (no --coordination-token)", body = ErrorBody), (status = 502, description = "The coordination backend answered with an error (`provider_error`, `malformed`)", body = ErrorBody), (status = 503, description = "The coordination backend is unavailable; retry (`unavailable`)", body = ErrorBody)),
    security(("coordination" = [])))]
pub async fn claim(
    state: web::Data<AppState>,
    req: HttpRequest,
    actor: web::Path<String>,
    bytes: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let service = state.coordination_for(&req)?;
    let request: ClaimRequest = json_body(&bytes, r#"{"host": string}"#)?;
    validate_actor(&actor)?;
    validate_host(&request.host)?;
    let outcome = service.directory().claim(&actor, &request.host).await?;
    let won = outcome.won();
    let claim = match outcome {
        ClaimOutcome::Claimed(c) | ClaimOutcome::Owned(c) => c,
    };
    Ok(HttpResponse::Ok().json_body(ClaimOutcomeDto {
        won,
        claim: claim.into(),
    }))
}

/// The current claim of `actor`.
#[utoipa::path(get, path = "/api/v1/coordination/claims/{actor}", operation_id = "lookupClaim", tag = "coordination",
    params(("actor" = crate::api::schemas::CoordinationName, Path, description = "Actor id")),
    responses((status = 200, body = LookupDto),
        (status = 400, description = "A name outside the limits (`actor_…` or `host_…`: `_empty`, `_too_long`, `_control_character`)", body = ErrorBody),
        (status = 401, description = "Missing or wrong coordination token", body = ErrorBody), (status = 403, description = "The coordination API is off (no --coordination-token)", body = ErrorBody), (status = 502, description = "The coordination backend answered with an error (`provider_error`, `malformed`)", body = ErrorBody), (status = 503, description = "The coordination backend is unavailable; retry (`unavailable`)", body = ErrorBody)),
    security(("coordination" = [])))]
pub async fn lookup(
    state: web::Data<AppState>,
    req: HttpRequest,
    actor: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let service = state.coordination_for(&req)?;
    validate_actor(&actor)?;
    let claim = service.directory().lookup(&actor).await?;
    Ok(HttpResponse::Ok().json_body(LookupDto {
        claim: claim.map(Into::into),
    }))
}

/// Remove `host`'s claim of `actor`.
#[utoipa::path(delete, path = "/api/v1/coordination/claims/{actor}", operation_id = "releaseClaim", tag = "coordination",
    params(("actor" = crate::api::schemas::CoordinationName, Path, description = "Actor id"), HostQuery),
    responses((status = 200, body = ClaimReleasedDto),
        (status = 400, description = "No `host` or unknown query parameters (`bad_request`), or an actor id or host outside the limits (`actor_…`, `host_…`)", body = ErrorBody),
        (status = 401, description = "Missing or wrong coordination token", body = ErrorBody), (status = 403, description = "The coordination API is off (no --coordination-token)", body = ErrorBody), (status = 502, description = "The coordination backend answered with an error (`provider_error`, `malformed`)", body = ErrorBody), (status = 503, description = "The coordination backend is unavailable; retry (`unavailable`)", body = ErrorBody)),
    security(("coordination" = [])))]
pub async fn unclaim(
    state: web::Data<AppState>,
    req: HttpRequest,
    actor: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let host = serde_html_form::from_str::<HostQuery>(req.query_string())
        .map(|q| q.host)
        .unwrap_or_default();
    let asked = AskedCoordination {
        action: "coordination.claim.release",
        target: format!("{actor} (host {host})"),
    };
    audited_coordination(&state, &req, asked, async {
        let service = state.coordination_for(&req)?;
        let host: HostQuery = query_expecting(&req, "?host=<host>")?;
        validate_actor(&actor)?;
        validate_host(&host.host)?;
        let released = service.directory().release(&actor, &host.host).await?;
        let done = if released {
            "released the claim"
        } else {
            "the host held no claim of it; nothing changed"
        };
        Ok((
            done.to_owned(),
            HttpResponse::Ok().json_body(ClaimReleasedDto { released }),
        ))
    })
    .await
}

/// Remove every claim of `host`.
#[utoipa::path(post, path = "/api/v1/coordination/hosts/{host}/evict", operation_id = "evictHost", tag = "coordination",
    params(("host" = crate::api::schemas::CoordinationName, Path, description = "Host")),
    responses((status = 200, body = EvictedDto),
        (status = 400, description = "A name outside the limits (`actor_…` or `host_…`: `_empty`, `_too_long`, `_control_character`)", body = ErrorBody),
        (status = 401, description = "Missing or wrong coordination token", body = ErrorBody), (status = 403, description = "The coordination API is off (no --coordination-token)", body = ErrorBody), (status = 502, description = "The coordination backend answered with an error (`provider_error`, `malformed`)", body = ErrorBody), (status = 503, description = "The coordination backend is unavailable; retry (`unavailable`)", body = ErrorBody)),
    security(("coordination" = [])))]
pub async fn evict(
    state: web::Data<AppState>,
    req: HttpRequest,
    host: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let asked = AskedCoordination {
        action: "coordination.evict",
        target: host.clone(),
    };
    audited_coordination(&state, &req, asked, async {
        let service = state.coordination_for(&req)?;
        validate_host(&host)?;
        let released = service.directory().evict_host(&host).await?;
        let done = format!(
            "released {} claim{}{}{}",
            released.len(),
            if released.len() == 1 { "" } else { "s" },
            if released.is_empty() { "" } else { ": " },
            released.join(", ")
        );
        Ok((done, HttpResponse::Ok().json_body(EvictedDto { released })))
    })
    .await
}

/// Every claim and the revision it is current at.
#[utoipa::path(get, path = "/api/v1/coordination/directory", operation_id = "getDirectory", tag = "coordination",
    responses((status = 200, body = SnapshotDto), (status = 401, description = "Missing or wrong coordination token", body = ErrorBody), (status = 403, description = "The coordination API is off (no --coordination-token)", body = ErrorBody), (status = 502, description = "The coordination backend answered with an error (`provider_error`, `malformed`)", body = ErrorBody), (status = 503, description = "The coordination backend is unavailable; retry (`unavailable`)", body = ErrorBody)),
    security(("coordination" = [])))]
pub async fn snapshot(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let service = state.coordination_for(&req)?;
    let snapshot = service.directory().snapshot().await?;
    Ok(HttpResponse::Ok().json_body(SnapshotDto {
        claims: snapshot.claims.into_iter().map(Into::into).collect(),
        revision: snapshot.revision.0,
    }))
}

/// Long-poll: the changes after revision `after`, in order, as soon as there is at least one
/// (or none after `wait_ms`). 410 when that history is compacted: take a new snapshot.
#[utoipa::path(get, path = "/api/v1/coordination/directory/watch", operation_id = "watchDirectory", tag = "coordination",
    params(WatchQuery),
    responses((status = 200, description = "The changes after `after` (empty when none came within `wait_ms`)", body = WatchDto),
        (status = 400, description = "No `after`, a malformed one, `wait_ms` above 60000, or unknown query parameters", body = ErrorBody),
        (status = 401, description = "Missing or wrong coordination token", body = ErrorBody), (status = 403, description = "The coordination API is off (no --coordination-token)", body = ErrorBody),
        (status = 410, description = "The history after `after` is compacted; take a new snapshot (`code` `compacted`; `x-troupe-oldest-revision` names the oldest revision still kept)", body = ErrorBody),
        (status = 502, description = "The coordination backend answered with an error (`provider_error`, `malformed`)", body = ErrorBody), (status = 503, description = "The coordination backend is unavailable; retry (`unavailable`)", body = ErrorBody)),
    security(("coordination" = [])))]
pub async fn watch(state: web::Data<AppState>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let service = state.coordination_for(&req)?;
    let request: WatchQuery = query_expecting(
        &req,
        "?after=<revision>&wait_ms=<milliseconds, at most 60000> (wait_ms optional)",
    )?;
    let wait_ms = request.wait_ms.unwrap_or(DEFAULT_WATCH_WAIT_MS);
    if wait_ms > MAX_WATCH_WAIT_MS {
        return Err(ApiError::BadRequest(format!(
            "wait_ms is {wait_ms}; at most {MAX_WATCH_WAIT_MS} is allowed"
        )));
    }
    let mut watch = match service.directory().watch(Revision(request.after)).await {
        Ok(watch) => watch,
        Err(error) => return Ok(watch_error(error)),
    };
    let mut events = Vec::new();
    let mut shutdown = state.shutdown.clone();
    let first = tokio::select! {
        first = tokio::time::timeout(Duration::from_millis(wait_ms), watch.next()) => first,
        _ = shutdown.wait_for(|stop| *stop) => Ok(None),
    };
    match first {
        Ok(Some(Ok(event))) => events.push(DirectoryEventDto::from(event)),
        Ok(Some(Err(error))) => return Ok(watch_error(error)),
        Ok(None) | Err(_) => {}
    }
    // Whatever follows at once goes in the same answer.
    while !events.is_empty() && events.len() < MAX_WATCH_EVENTS {
        match tokio::time::timeout(Duration::from_millis(20), watch.next()).await {
            Ok(Some(Ok(event))) => events.push(DirectoryEventDto::from(event)),
            Ok(Some(Err(_)) | None) | Err(_) => break,
        }
    }
    Ok(HttpResponse::Ok().json_body(WatchDto { events }))
}

/// A watch failure; a compacted history answers 410 with the oldest revision still
/// available in the [`OLDEST_REVISION_HEADER`] header.
fn watch_error(error: DirectoryError) -> HttpResponse {
    let oldest = match &error {
        DirectoryError::Compacted { oldest, .. } => Some(oldest.0),
        _ => None,
    };
    let mut response = ApiError::from(error).error_response();
    if let Some(oldest) = oldest
        && let Ok(value) = HeaderValue::from_str(&oldest.to_string())
    {
        response
            .headers_mut()
            .insert(HeaderName::from_static(OLDEST_REVISION_HEADER), value);
    }
    response
}

/// The routes, under `/api/v1`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        resource("/coordination/claims/{actor}", "GET, POST, DELETE")
            .route(web::post().to(claim))
            .route(web::get().to(lookup))
            .route(web::delete().to(unclaim)),
    )
    .service(resource("/coordination/hosts/{host}/evict", "POST").route(web::post().to(evict)))
    .service(resource("/coordination/directory", "GET").route(web::get().to(snapshot)))
    .service(resource("/coordination/directory/watch", "GET").route(web::get().to(watch)));
}
