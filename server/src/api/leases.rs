//! `/api/v1/coordination/leases/{name}…`: leases over HTTP for agents that should not hold
//! etcd or database credentials (acquire, renew, release, show). The grants live at the
//! coordination backend, so any replica serves any of these; see [`crate::coordination`] for
//! their timing.

use crate::json::JsonBody;
use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};
use troupe_lease::lease::{FencingToken, LeaseSettings, validate_identity, validate_lease_name};
use utoipa::ToSchema;

use super::allow::resource;
use super::audit::{AskedCoordination, audited_coordination};
use crate::coordination::Acquisition;
use crate::error::{ApiError, ErrorBody};
use crate::request::json_body;
use crate::state::AppState;
use troupe_lease::lease::stored::StoredGrant;

/// Ask for a lease.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcquireRequest {
    /// Who acquires (typically the node's address): not empty, at most 512 bytes, no control
    /// characters.
    #[schema(value_type = crate::api::schemas::CoordinationName)]
    pub owner: String,
    /// Time to live of the grant, milliseconds, 1000..=3600000 (1 s to 1 h).
    #[serde(with = "troupe_protocol::wire::u64_string")]
    #[schema(value_type = LeaseTtl)]
    pub ttl_ms: u64,
    /// How often the client renews, milliseconds: at least 50, at most a third of the TTL.
    /// Default: a fifth of the TTL.
    #[serde(default, with = "troupe_protocol::wire::option_u64_string")]
    #[schema(value_type = Option<troupe_protocol::wire::schema::U64Input>)]
    pub renew_interval_ms: Option<u64>,
}

/// The TTL of a lease request: 1000..=3600000 milliseconds (1 s to 1 h), a decimal string or a
/// JSON number.
#[derive(Debug)]
pub struct LeaseTtl;

impl utoipa::PartialSchema for LeaseTtl {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        troupe_protocol::wire::schema::u64_input(
            MIN_TTL_MS,
            MAX_TTL_MS,
            "A lease TTL in milliseconds",
        )
    }
}

impl ToSchema for LeaseTtl {
    fn name() -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("LeaseTtl")
    }
}

/// Renew or release a grant.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantRequest {
    /// The holder.
    #[schema(value_type = crate::api::schemas::CoordinationName)]
    pub owner: String,
    /// The grant's fencing token.
    #[serde(with = "troupe_protocol::wire::u64_string")]
    #[schema(value_type = troupe_protocol::wire::schema::U64Input)]
    pub token: u64,
}

/// A grant, or a refusal.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LeaseGrantDto {
    /// Whether `owner` holds the lease.
    pub granted: bool,
    /// The asking owner (or, in `GET`, the holder).
    pub owner: String,
    /// The fencing token of the grant.
    #[serde(with = "troupe_protocol::wire::option_u64_string")]
    #[schema(value_type = Option<troupe_protocol::wire::schema::U64>)]
    pub token: Option<u64>,
    /// The grant's time to live, milliseconds.
    #[serde(with = "troupe_protocol::wire::option_u64_string")]
    #[schema(value_type = Option<troupe_protocol::wire::schema::U64>)]
    pub ttl_ms: Option<u64>,
    /// Milliseconds until the grant expires at the backend unless renewed.
    #[serde(with = "troupe_protocol::wire::option_u64_string")]
    #[schema(value_type = Option<troupe_protocol::wire::schema::U64>)]
    pub expires_in_ms: Option<u64>,
}

impl From<StoredGrant> for LeaseGrantDto {
    fn from(grant: StoredGrant) -> Self {
        Self {
            granted: true,
            owner: grant.owner,
            token: Some(grant.token.0),
            ttl_ms: Some(grant.ttl.as_millis() as u64),
            expires_in_ms: Some(grant.expires_in.as_millis() as u64),
        }
    }
}

impl LeaseGrantDto {
    fn refused(owner: &str) -> Self {
        Self {
            granted: false,
            owner: owner.to_owned(),
            token: None,
            ttl_ms: None,
            expires_in_ms: None,
        }
    }
}

/// Whether a release ended a grant.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ReleasedDto {
    /// `false` when the owner did not hold the lease with that token (nothing changed).
    pub released: bool,
}

/// The current grant of one lease.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LeaseStateDto {
    /// The lease's name.
    pub name: String,
    /// The coordination backend.
    pub backend: String,
    /// The current grant at the backend, if any: made through any replica of this server, or
    /// by a node using the backend directly.
    pub holder: Option<LeaseGrantDto>,
}

/// Shortest TTL a grant may have, milliseconds: `troupe_lease::lease::MIN_LEASE_TTL`.
pub const MIN_TTL_MS: u64 = troupe_lease::lease::MIN_LEASE_TTL.as_millis() as u64;
/// Longest TTL a grant may have, milliseconds: `troupe_lease::lease::MAX_LEASE_TTL`.
pub const MAX_TTL_MS: u64 = troupe_lease::lease::MAX_LEASE_TTL.as_millis() as u64;

/// Acquire lease `name` for `owner`: `granted` and a fencing token, or `granted: false` when
/// another owner holds it. Acquiring again while holding extends the grant.
#[utoipa::path(post, path = "/api/v1/coordination/leases/{name}/acquire", operation_id = "acquireLease", tag = "coordination",
    params(("name" = crate::api::schemas::CoordinationName, Path, description = "Lease name")),
    request_body = AcquireRequest,
    responses((status = 200, description = "Granted, or `granted: false` when another owner holds it", body = LeaseGrantDto),
        (status = 400, description = "A malformed body (`code` `bad_request`), a name or owner outside the limits (`name_empty`, `name_too_long`, `name_control_character`, `owner_…` alike), a TTL or renew interval out of range (`ttl_out_of_range`, `renew_interval_out_of_range`), or valid settings the backend cannot honour (`unsupported_settings`)", body = ErrorBody),
        (status = 401, description = "Missing or wrong coordination token", body = ErrorBody), (status = 403, description = "The coordination API is off (no --coordination-token)", body = ErrorBody), (status = 502, description = "The coordination backend answered with an error (`provider_error`, `malformed`)", body = ErrorBody), (status = 503, description = "The coordination backend is unavailable; retry (`unavailable`)", body = ErrorBody)),
    security(("coordination" = [])))]
pub async fn acquire(
    state: web::Data<AppState>,
    req: HttpRequest,
    name: web::Path<String>,
    bytes: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let service = state.coordination_for(&req)?;
    let request: AcquireRequest = json_body(
        &bytes,
        r#"{"owner": string, "ttl_ms": integer, "renew_interval_ms": integer (optional)}"#,
    )?;
    validate_identity(&name, &request.owner)?;
    let ttl = Duration::from_millis(request.ttl_ms);
    let renew = Duration::from_millis(request.renew_interval_ms.unwrap_or(request.ttl_ms / 5));
    let settings = LeaseSettings::new(ttl, renew).map_err(|e| ApiError::lease_settings(&e))?;
    let grant = match service.acquire(&name, &request.owner, settings).await? {
        Acquisition::Granted(grant) => LeaseGrantDto::from(grant),
        Acquisition::Refused => LeaseGrantDto::refused(&request.owner),
    };
    Ok(HttpResponse::Ok().json_body(grant))
}

/// Renew the grant `token` of `owner`; 409 when it is no longer held (lost: acquire again).
#[utoipa::path(post, path = "/api/v1/coordination/leases/{name}/renew", operation_id = "renewLease", tag = "coordination",
    params(("name" = crate::api::schemas::CoordinationName, Path, description = "Lease name")),
    request_body = GrantRequest,
    responses((status = 200, body = LeaseGrantDto),
        (status = 400, description = "A malformed body (`code` `bad_request`), or a name or owner outside the limits (`name_…`, `owner_…`: `_empty`, `_too_long`, `_control_character`)", body = ErrorBody),
        (status = 401, description = "Missing or wrong coordination token", body = ErrorBody), (status = 403, description = "The coordination API is off (no --coordination-token)", body = ErrorBody),
        (status = 409, description = "The owner no longer holds the lease with that token; acquire again (`code` `not_owner`)", body = ErrorBody),
        (status = 502, description = "The coordination backend answered with an error (`provider_error`, `malformed`)", body = ErrorBody), (status = 503, description = "The coordination backend is unavailable; retry (`unavailable`)", body = ErrorBody)),
    security(("coordination" = [])))]
pub async fn renew(
    state: web::Data<AppState>,
    req: HttpRequest,
    name: web::Path<String>,
    bytes: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let service = state.coordination_for(&req)?;
    let request: GrantRequest = json_body(&bytes, r#"{"owner": string, "token": integer}"#)?;
    validate_identity(&name, &request.owner)?;
    let grant = service
        .renew(&name, &request.owner, FencingToken(request.token))
        .await?;
    Ok(HttpResponse::Ok().json_body(LeaseGrantDto::from(grant)))
}

/// Release the grant `token` of `owner`; `released: false` when it did not hold it.
#[utoipa::path(post, path = "/api/v1/coordination/leases/{name}/release", operation_id = "releaseLease", tag = "coordination",
    params(("name" = crate::api::schemas::CoordinationName, Path, description = "Lease name")),
    request_body = GrantRequest,
    responses((status = 200, body = ReleasedDto),
        (status = 400, description = "A malformed body (`code` `bad_request`), or a name or owner outside the limits (`name_…`, `owner_…`: `_empty`, `_too_long`, `_control_character`)", body = ErrorBody),
        (status = 401, description = "Missing or wrong coordination token", body = ErrorBody), (status = 403, description = "The coordination API is off (no --coordination-token)", body = ErrorBody),
        (status = 409, description = "The owner no longer holds the lease with that token (`code` `not_owner`)", body = ErrorBody),
        (status = 502, description = "The coordination backend answered with an error (`provider_error`, `malformed`)", body = ErrorBody), (status = 503, description = "The coordination backend is unavailable; retry (`unavailable`)", body = ErrorBody)),
    security(("coordination" = [])))]
pub async fn release(
    state: web::Data<AppState>,
    req: HttpRequest,
    name: web::Path<String>,
    bytes: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let request: Result<GrantRequest, ApiError> =
        json_body(&bytes, r#"{"owner": string, "token": integer}"#);
    let owner = request.as_ref().map(|r| r.owner.as_str()).unwrap_or("");
    let asked = AskedCoordination {
        action: "coordination.lease.release",
        target: format!("{name} (owner {owner})"),
    };
    audited_coordination(&state, &req, asked, async {
        let service = state.coordination_for(&req)?;
        let request = request?;
        validate_identity(&name, &request.owner)?;
        let released = service
            .release(&name, &request.owner, FencingToken(request.token))
            .await?;
        let done = if released {
            "released the grant"
        } else {
            "the owner did not hold it; nothing changed"
        };
        Ok((
            done.to_owned(),
            HttpResponse::Ok().json_body(ReleasedDto { released }),
        ))
    })
    .await
}

/// The current grant of lease `name` at the backend, if any.
#[utoipa::path(get, path = "/api/v1/coordination/leases/{name}", operation_id = "getLease", tag = "coordination",
    params(("name" = crate::api::schemas::CoordinationName, Path, description = "Lease name")),
    responses((status = 200, body = LeaseStateDto),
        (status = 400, description = "A name outside the limits (`name_empty`, `name_too_long`, `name_control_character`)", body = ErrorBody),
        (status = 401, description = "Missing or wrong coordination token", body = ErrorBody), (status = 403, description = "The coordination API is off (no --coordination-token)", body = ErrorBody),
        (status = 502, description = "The coordination backend answered with an error (`provider_error`, `malformed`)", body = ErrorBody), (status = 503, description = "The coordination backend is unavailable; retry (`unavailable`)", body = ErrorBody)),
    security(("coordination" = [])))]
pub async fn lease(
    state: web::Data<AppState>,
    req: HttpRequest,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let service = state.coordination_for(&req)?;
    validate_lease_name(&name)?;
    let holder = service.holder(&name).await?.map(Into::into);
    Ok(HttpResponse::Ok().json_body(LeaseStateDto {
        name: name.into_inner(),
        backend: service.backend().to_owned(),
        holder,
    }))
}

/// The routes, under `/api/v1`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        resource("/coordination/leases/{name}/acquire", "POST").route(web::post().to(acquire)),
    )
    .service(resource("/coordination/leases/{name}/renew", "POST").route(web::post().to(renew)))
    .service(resource("/coordination/leases/{name}/release", "POST").route(web::post().to(release)))
    .service(resource("/coordination/leases/{name}", "GET").route(web::get().to(lease)));
}
