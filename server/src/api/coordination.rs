//! `/api/v1/coordination/…`: the Lease and the directory over HTTP, for agents that should
//! not hold etcd or database credentials. Backed by etcd when `--etcd-endpoints` is set, else
//! by the server's PostgreSQL database, else (SQLite, single-replica dev mode) in memory.
//!
//! # Leases through the server
//! The server holds one backend [`Lease`] handle per grant, keyed by (name, owner); the backend
//! handle renews at the backend on its own. The HTTP client renews through the server; each
//! renewal moves the grant's client deadline to `now + ttl`. When the deadline passes without
//! a renewal the server releases the backend grant, so a client that stops renewing loses the
//! lease one TTL after its last renewal, and the next holder gets a larger fencing token. The
//! client itself gives up `ttl - renew_interval` after its last confirmed renewal was sent,
//! which is earlier.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use tokio::time::Instant;
use troupe::directory::{
    Claim, ClaimOutcome, Directory, DirectoryChange, DirectoryError, DirectoryEvent, Revision,
};
use troupe::lease::{FencingToken, Lease, LeaseError, LeaseProvider, LeaseSettings};
use utoipa::{IntoParams, ToSchema};

use super::ApiError;
use crate::app::AppState;

/// Longest a watch long-poll waits for a change.
pub const MAX_WATCH_WAIT_MS: u64 = 60_000;
/// Wait of a watch long-poll that asks for none.
pub const DEFAULT_WATCH_WAIT_MS: u64 = 10_000;
/// Most events one watch answer carries.
pub const MAX_WATCH_EVENTS: usize = 1_000;

/// The backends behind the coordination API, and the grants held for HTTP clients.
pub struct Coordination {
    leases: Arc<dyn LeaseProvider>,
    directory: Arc<dyn Directory>,
    backend: &'static str,
    slots: Mutex<HashMap<(String, String), Arc<Slot>>>,
}

impl std::fmt::Debug for Coordination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordination")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

/// One (name, owner): operations on it are serialised by `busy`.
#[derive(Default)]
struct Slot {
    busy: tokio::sync::Mutex<()>,
    grant: Mutex<Option<Grant>>,
}

struct Grant {
    lease: Arc<dyn Lease>,
    token: FencingToken,
    ttl: Duration,
    /// The client's deadline: released at the backend when it passes without a renewal.
    deadline: Instant,
}

impl Coordination {
    /// Serve `leases` and `directory`; `backend` names them in logs and answers.
    #[must_use]
    pub fn new(
        leases: Arc<dyn LeaseProvider>,
        directory: Arc<dyn Directory>,
        backend: &'static str,
    ) -> Self {
        Self {
            leases,
            directory,
            backend,
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// Which backend serves (`etcd`, `postgres`, `in-memory`).
    #[must_use]
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    fn slot(&self, name: &str, owner: &str) -> Arc<Slot> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(
            slots
                .entry((name.to_owned(), owner.to_owned()))
                .or_default(),
        )
    }

    /// Forget the slot when nobody uses it and it holds no grant.
    fn tidy(&self, name: &str, owner: &str) {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let key = (name.to_owned(), owner.to_owned());
        if let Some(slot) = slots.get(&key)
            && Arc::strong_count(slot) == 1
            && slot
                .grant
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_none()
        {
            slots.remove(&key);
        }
    }

    async fn acquire(
        self: &Arc<Self>,
        name: &str,
        owner: &str,
        settings: LeaseSettings,
    ) -> Result<LeaseGrantDto, ApiError> {
        let slot = self.slot(name, owner);
        let answer = {
            let _busy = slot.busy.lock().await;
            let existing = take_if(&slot, |g| !g.lease.holds());
            if let Some(stale) = existing {
                let _ = stale.lease.release().await;
            }
            let held = {
                let mut grant = slot.grant.lock().unwrap_or_else(|e| e.into_inner());
                grant.as_mut().map(|g| {
                    g.ttl = settings.ttl();
                    g.deadline = Instant::now() + settings.ttl();
                    g.token
                })
            };
            if let Some(token) = held {
                Ok(LeaseGrantDto::granted(owner, token, settings.ttl()))
            } else {
                let lease = self
                    .leases
                    .lease(name, owner, &settings)
                    .map_err(lease_error)?;
                let lost_slot = Arc::downgrade(&slot);
                let on_lost = Box::new(move |lost: troupe::lease::LeaseLost| {
                    if let Some(slot) = lost_slot.upgrade() {
                        let _ = take_if(&slot, |g| g.token == lost.token);
                    }
                });
                match lease.acquire(on_lost).await.map_err(lease_error)? {
                    Some(token) => {
                        *slot.grant.lock().unwrap_or_else(|e| e.into_inner()) = Some(Grant {
                            lease,
                            token,
                            ttl: settings.ttl(),
                            deadline: Instant::now() + settings.ttl(),
                        });
                        tokio::spawn(Arc::clone(self).expire(
                            name.to_owned(),
                            owner.to_owned(),
                            Arc::downgrade(&slot),
                            token,
                        ));
                        Ok(LeaseGrantDto::granted(owner, token, settings.ttl()))
                    }
                    None => Ok(LeaseGrantDto::refused(owner)),
                }
            }
        };
        drop(slot);
        self.tidy(name, owner);
        answer
    }

    /// Releases grant `token` at the backend once its client deadline passes unrenewed.
    async fn expire(
        self: Arc<Self>,
        name: String,
        owner: String,
        slot: std::sync::Weak<Slot>,
        token: FencingToken,
    ) {
        loop {
            let Some(strong) = slot.upgrade() else { return };
            let deadline = {
                let grant = strong.grant.lock().unwrap_or_else(|e| e.into_inner());
                match grant.as_ref() {
                    Some(g) if g.token == token => g.deadline,
                    _ => return,
                }
            };
            drop(strong);
            tokio::time::sleep_until(deadline).await;
            let Some(strong) = slot.upgrade() else { return };
            let _busy = strong.busy.lock().await;
            if let Some(gone) = take_if(&strong, |g| {
                g.token == token && Instant::now() >= g.deadline
            }) {
                tracing::info!(lease = %name, %owner, %token, "client stopped renewing; lease released");
                let _ = gone.lease.release().await;
                drop(_busy);
                drop(strong);
                self.tidy(&name, &owner);
                return;
            }
        }
    }

    async fn renew(
        &self,
        name: &str,
        owner: &str,
        token: FencingToken,
    ) -> Result<LeaseGrantDto, ApiError> {
        let slot = self.slot(name, owner);
        let answer = {
            let _busy = slot.busy.lock().await;
            let mut grant = slot.grant.lock().unwrap_or_else(|e| e.into_inner());
            match grant.as_mut() {
                Some(g) if g.token == token && g.lease.holds() => {
                    g.deadline = Instant::now() + g.ttl;
                    Ok(LeaseGrantDto::granted(owner, token, g.ttl))
                }
                _ => Err(ApiError::Conflict(format!(
                    "lease {name:?} is not held by {owner:?} with token {}; acquire it again",
                    token.0
                ))),
            }
        };
        drop(slot);
        self.tidy(name, owner);
        answer
    }

    async fn release(
        &self,
        name: &str,
        owner: &str,
        token: FencingToken,
    ) -> Result<bool, ApiError> {
        let slot = self.slot(name, owner);
        let released = {
            let _busy = slot.busy.lock().await;
            match take_if(&slot, |g| g.token == token) {
                Some(grant) => {
                    grant.lease.release().await.map_err(lease_error)?;
                    true
                }
                None => false,
            }
        };
        drop(slot);
        self.tidy(name, owner);
        Ok(released)
    }

    fn holders(&self, name: &str) -> Vec<LeaseGrantDto> {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        slots
            .iter()
            .filter(|((n, _), _)| n == name)
            .filter_map(|((_, owner), slot)| {
                let grant = slot.grant.lock().unwrap_or_else(|e| e.into_inner());
                grant.as_ref().filter(|g| g.lease.holds()).map(|g| {
                    let mut dto = LeaseGrantDto::granted(owner, g.token, g.ttl);
                    dto.expires_in_ms =
                        Some(g.deadline.saturating_duration_since(now).as_millis() as u64);
                    dto
                })
            })
            .collect()
    }
}

fn take_if(slot: &Slot, pred: impl FnOnce(&Grant) -> bool) -> Option<Grant> {
    let mut grant = slot.grant.lock().unwrap_or_else(|e| e.into_inner());
    if grant.as_ref().is_some_and(pred) {
        grant.take()
    } else {
        None
    }
}

fn lease_error(error: LeaseError) -> ApiError {
    match error {
        LeaseError::Settings { .. } => ApiError::BadRequest(error.to_string()),
        LeaseError::Unavailable { .. } => ApiError::Unavailable(error.to_string()),
        other => ApiError::BadGateway(other.to_string()),
    }
}

fn directory_error(error: DirectoryError) -> ApiError {
    match error {
        DirectoryError::Invalid(_) => ApiError::BadRequest(error.to_string()),
        DirectoryError::Unavailable(_) => ApiError::Unavailable(error.to_string()),
        DirectoryError::Compacted { .. } => ApiError::Gone(error.to_string()),
        other => ApiError::BadGateway(other.to_string()),
    }
}

fn service(state: &AppState, req: &HttpRequest) -> Result<Arc<Coordination>, ApiError> {
    state.tokens.require_coordination(req)?;
    state.coordination.clone().ok_or(ApiError::Forbidden(
        "the coordination API is not set up on this server",
    ))
}

fn body<T: DeserializeOwned>(bytes: &[u8], expected: &str) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::BadRequest(format!("malformed JSON body ({e}); expected {expected}"))
    })
}

fn query<T: DeserializeOwned>(req: &HttpRequest, expected: &str) -> Result<T, ApiError> {
    serde_html_form::from_str(req.query_string())
        .map_err(|e| ApiError::BadRequest(format!("malformed query ({e}); expected {expected}")))
}

fn name_ok(what: &str, value: &str) -> Result<(), ApiError> {
    troupe::directory::validate_name(what, value).map_err(directory_error)
}

/// Ask for a lease.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcquireRequest {
    /// Who acquires (typically the node's address).
    pub owner: String,
    /// Time to live of the grant, milliseconds.
    pub ttl_ms: u64,
    /// How often the client renews, milliseconds; at most a third of the TTL. Default: a
    /// fifth of the TTL.
    pub renew_interval_ms: Option<u64>,
}

/// Renew or release a grant.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantRequest {
    /// The holder.
    pub owner: String,
    /// The grant's fencing token.
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
    pub token: Option<u64>,
    /// The grant's time to live, milliseconds.
    pub ttl_ms: Option<u64>,
    /// Milliseconds until the server releases the grant unless renewed.
    pub expires_in_ms: Option<u64>,
}

impl LeaseGrantDto {
    fn granted(owner: &str, token: FencingToken, ttl: Duration) -> Self {
        Self {
            granted: true,
            owner: owner.to_owned(),
            token: Some(token.0),
            ttl_ms: Some(ttl.as_millis() as u64),
            expires_in_ms: Some(ttl.as_millis() as u64),
        }
    }

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

/// The grants of one lease made through this server.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LeaseStateDto {
    /// The lease's name.
    pub name: String,
    /// The coordination backend.
    pub backend: String,
    /// The current grant made through this server, if any (another replica's or a direct
    /// backend user's grant is not shown).
    pub holder: Option<LeaseGrantDto>,
}

/// Acquire lease `name` for `owner`: `granted` and a fencing token, or `granted: false` when
/// another owner holds it. Acquiring again while holding extends the grant.
#[utoipa::path(post, path = "/api/v1/coordination/leases/{name}/acquire", tag = "coordination",
    params(("name" = String, Path, description = "Lease name")),
    request_body = AcquireRequest,
    responses((status = 200, body = LeaseGrantDto), (status = 400, body = super::ErrorBody),
        (status = 401, body = super::ErrorBody), (status = 403, body = super::ErrorBody)),
    security(("bearer" = [])))]
pub async fn acquire(
    state: web::Data<AppState>,
    req: HttpRequest,
    name: web::Path<String>,
    bytes: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let service = service(&state, &req)?;
    let request: AcquireRequest = body(
        &bytes,
        r#"{"owner": string, "ttl_ms": integer, "renew_interval_ms": integer (optional)}"#,
    )?;
    name_ok("lease name", &name)?;
    name_ok("owner", &request.owner)?;
    let ttl = Duration::from_millis(request.ttl_ms);
    let renew = Duration::from_millis(request.renew_interval_ms.unwrap_or(request.ttl_ms / 5));
    let settings = LeaseSettings::new(ttl, renew)
        .map_err(|e| ApiError::BadRequest(format!("ttl_ms/renew_interval_ms: {e}")))?;
    let grant = service.acquire(&name, &request.owner, settings).await?;
    Ok(HttpResponse::Ok().json(grant))
}

/// Renew the grant `token` of `owner`; 409 when it is no longer held (lost: acquire again).
#[utoipa::path(post, path = "/api/v1/coordination/leases/{name}/renew", tag = "coordination",
    params(("name" = String, Path, description = "Lease name")),
    request_body = GrantRequest,
    responses((status = 200, body = LeaseGrantDto), (status = 400, body = super::ErrorBody),
        (status = 409, body = super::ErrorBody), (status = 401, body = super::ErrorBody)),
    security(("bearer" = [])))]
pub async fn renew(
    state: web::Data<AppState>,
    req: HttpRequest,
    name: web::Path<String>,
    bytes: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let service = service(&state, &req)?;
    let request: GrantRequest = body(&bytes, r#"{"owner": string, "token": integer}"#)?;
    let grant = service
        .renew(&name, &request.owner, FencingToken(request.token))
        .await?;
    Ok(HttpResponse::Ok().json(grant))
}

/// Release the grant `token` of `owner`; `released: false` when it did not hold it.
#[utoipa::path(post, path = "/api/v1/coordination/leases/{name}/release", tag = "coordination",
    params(("name" = String, Path, description = "Lease name")),
    request_body = GrantRequest,
    responses((status = 200, body = ReleasedDto), (status = 400, body = super::ErrorBody),
        (status = 401, body = super::ErrorBody)),
    security(("bearer" = [])))]
pub async fn release(
    state: web::Data<AppState>,
    req: HttpRequest,
    name: web::Path<String>,
    bytes: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let service = service(&state, &req)?;
    let request: GrantRequest = body(&bytes, r#"{"owner": string, "token": integer}"#)?;
    let released = service
        .release(&name, &request.owner, FencingToken(request.token))
        .await?;
    Ok(HttpResponse::Ok().json(ReleasedDto { released }))
}

/// The grant of lease `name` made through this server, if any.
#[utoipa::path(get, path = "/api/v1/coordination/leases/{name}", tag = "coordination",
    params(("name" = String, Path, description = "Lease name")),
    responses((status = 200, body = LeaseStateDto), (status = 401, body = super::ErrorBody)),
    security(("bearer" = [])))]
pub async fn lease(
    state: web::Data<AppState>,
    req: HttpRequest,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let service = service(&state, &req)?;
    let holder = service.holders(&name).into_iter().next();
    Ok(HttpResponse::Ok().json(LeaseStateDto {
        name: name.into_inner(),
        backend: service.backend().to_owned(),
        holder,
    }))
}

/// Claim an actor for a host.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    /// The claiming host.
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
    pub revision: u64,
}

/// One change.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EventDto {
    /// When it took effect.
    pub revision: u64,
    /// `claimed` or `released`.
    pub kind: String,
    /// The actor id.
    pub actor: String,
    /// The new owner (claimed) or the former one (released).
    pub host: String,
}

impl From<DirectoryEvent> for EventDto {
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
    pub events: Vec<EventDto>,
}

/// `?host=`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct HostQuery {
    /// The host whose claim to remove.
    pub host: String,
}

/// `?after=&wait_ms=`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct WatchQuery {
    /// Changes after this revision.
    pub after: u64,
    /// Milliseconds to wait for a first change (default 10000, at most 60000).
    pub wait_ms: Option<u64>,
}

/// Claim `actor` for `host`; exactly one of concurrent claimants wins.
#[utoipa::path(post, path = "/api/v1/coordination/claims/{actor}", tag = "coordination",
    params(("actor" = String, Path, description = "Actor id")),
    request_body = ClaimRequest,
    responses((status = 200, body = ClaimOutcomeDto), (status = 400, body = super::ErrorBody),
        (status = 401, body = super::ErrorBody)),
    security(("bearer" = [])))]
pub async fn claim(
    state: web::Data<AppState>,
    req: HttpRequest,
    actor: web::Path<String>,
    bytes: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let service = service(&state, &req)?;
    let request: ClaimRequest = body(&bytes, r#"{"host": string}"#)?;
    let outcome = service
        .directory
        .claim(&actor, &request.host)
        .await
        .map_err(directory_error)?;
    let won = outcome.won();
    let claim = match outcome {
        ClaimOutcome::Claimed(c) | ClaimOutcome::Owned(c) => c,
    };
    Ok(HttpResponse::Ok().json(ClaimOutcomeDto {
        won,
        claim: claim.into(),
    }))
}

/// The current claim of `actor`.
#[utoipa::path(get, path = "/api/v1/coordination/claims/{actor}", tag = "coordination",
    params(("actor" = String, Path, description = "Actor id")),
    responses((status = 200, body = LookupDto), (status = 401, body = super::ErrorBody)),
    security(("bearer" = [])))]
pub async fn lookup(
    state: web::Data<AppState>,
    req: HttpRequest,
    actor: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let service = service(&state, &req)?;
    let claim = service
        .directory
        .lookup(&actor)
        .await
        .map_err(directory_error)?;
    Ok(HttpResponse::Ok().json(LookupDto {
        claim: claim.map(Into::into),
    }))
}

/// Remove `host`'s claim of `actor`.
#[utoipa::path(delete, path = "/api/v1/coordination/claims/{actor}", tag = "coordination",
    params(("actor" = String, Path, description = "Actor id"), HostQuery),
    responses((status = 200, body = ClaimReleasedDto), (status = 400, body = super::ErrorBody),
        (status = 401, body = super::ErrorBody)),
    security(("bearer" = [])))]
pub async fn unclaim(
    state: web::Data<AppState>,
    req: HttpRequest,
    actor: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let service = service(&state, &req)?;
    let host: HostQuery = query(&req, "?host=<host>")?;
    let released = service
        .directory
        .release(&actor, &host.host)
        .await
        .map_err(directory_error)?;
    Ok(HttpResponse::Ok().json(ClaimReleasedDto { released }))
}

/// Remove every claim of `host`.
#[utoipa::path(post, path = "/api/v1/coordination/hosts/{host}/evict", tag = "coordination",
    params(("host" = String, Path, description = "Host")),
    responses((status = 200, body = EvictedDto), (status = 401, body = super::ErrorBody)),
    security(("bearer" = [])))]
pub async fn evict(
    state: web::Data<AppState>,
    req: HttpRequest,
    host: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let service = service(&state, &req)?;
    let released = service
        .directory
        .evict_host(&host)
        .await
        .map_err(directory_error)?;
    Ok(HttpResponse::Ok().json(EvictedDto { released }))
}

/// Every claim and the revision it is current at.
#[utoipa::path(get, path = "/api/v1/coordination/directory", tag = "coordination",
    responses((status = 200, body = SnapshotDto), (status = 401, body = super::ErrorBody)),
    security(("bearer" = [])))]
pub async fn snapshot(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let service = service(&state, &req)?;
    let snapshot = service
        .directory
        .snapshot()
        .await
        .map_err(directory_error)?;
    Ok(HttpResponse::Ok().json(SnapshotDto {
        claims: snapshot.claims.into_iter().map(Into::into).collect(),
        revision: snapshot.revision.0,
    }))
}

/// Long-poll: the changes after revision `after`, in order, as soon as there is at least one
/// (or none after `wait_ms`). 410 when that history is compacted: take a new snapshot.
#[utoipa::path(get, path = "/api/v1/coordination/directory/watch", tag = "coordination",
    params(WatchQuery),
    responses((status = 200, body = WatchDto), (status = 400, body = super::ErrorBody),
        (status = 410, body = super::ErrorBody), (status = 401, body = super::ErrorBody)),
    security(("bearer" = [])))]
pub async fn watch(state: web::Data<AppState>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let service = service(&state, &req)?;
    let request: WatchQuery = query(
        &req,
        "?after=<revision>&wait_ms=<milliseconds, at most 60000> (wait_ms optional)",
    )?;
    let wait_ms = request.wait_ms.unwrap_or(DEFAULT_WATCH_WAIT_MS);
    if wait_ms > MAX_WATCH_WAIT_MS {
        return Err(ApiError::BadRequest(format!(
            "wait_ms is {wait_ms}; at most {MAX_WATCH_WAIT_MS} is allowed"
        )));
    }
    let mut watch = match service.directory.watch(Revision(request.after)).await {
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
        Ok(Some(Ok(event))) => events.push(EventDto::from(event)),
        Ok(Some(Err(error))) => return Ok(watch_error(error)),
        Ok(None) | Err(_) => {}
    }
    // Whatever follows at once goes in the same answer.
    while !events.is_empty() && events.len() < MAX_WATCH_EVENTS {
        match tokio::time::timeout(Duration::from_millis(20), watch.next()).await {
            Ok(Some(Ok(event))) => events.push(EventDto::from(event)),
            Ok(Some(Err(_)) | None) | Err(_) => break,
        }
    }
    Ok(HttpResponse::Ok().json(WatchDto { events }))
}

/// A watch failure; a compacted history answers 410 with the oldest revision still
/// available in the `x-troupe-oldest-revision` header.
fn watch_error(error: DirectoryError) -> HttpResponse {
    let oldest = match &error {
        DirectoryError::Compacted { oldest, .. } => Some(oldest.0),
        _ => None,
    };
    let mut response = actix_web::ResponseError::error_response(&directory_error(error));
    if let Some(oldest) = oldest
        && let Ok(value) = actix_web::http::header::HeaderValue::from_str(&oldest.to_string())
    {
        response.headers_mut().insert(
            actix_web::http::header::HeaderName::from_static(OLDEST_REVISION_HEADER),
            value,
        );
    }
    response
}

/// The header a 410 watch answer carries.
pub const OLDEST_REVISION_HEADER: &str = "x-troupe-oldest-revision";

/// The routes, under `/api/v1`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route(
        "/coordination/leases/{name}/acquire",
        web::post().to(acquire),
    )
    .route("/coordination/leases/{name}/renew", web::post().to(renew))
    .route(
        "/coordination/leases/{name}/release",
        web::post().to(release),
    )
    .route("/coordination/leases/{name}", web::get().to(lease))
    .route("/coordination/claims/{actor}", web::post().to(claim))
    .route("/coordination/claims/{actor}", web::get().to(lookup))
    .route("/coordination/claims/{actor}", web::delete().to(unclaim))
    .route("/coordination/hosts/{host}/evict", web::post().to(evict))
    .route("/coordination/directory", web::get().to(snapshot))
    .route("/coordination/directory/watch", web::get().to(watch));
}
