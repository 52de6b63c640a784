//! `/api/v1/clusters/{cluster}/members`: members as the control plane last saw them, and
//! member operations (leave, down) relayed to the agents — Akka Management's
//! `/cluster/members` shape, in snake_case.
//!
//! # Member operations
//! Off unless the server runs with `--enable-member-operations`, and then only with the admin
//! token. An accepted operation is queued and handed to the next agent of the cluster that
//! reports (in its ingest acknowledgment), which carries it out through the cluster. Every
//! request for one, accepted or not, goes into the cluster's audit trail (see `audit`).

use crate::json::JsonBody;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use troupe_protocol::OperationKind;
use utoipa::ToSchema;

use super::audit::{Asked, audited, member_action};
use super::clusters::find_cluster;
use super::nodes::{NodeDto, agents};
use crate::address;
use crate::error::{ApiError, ErrorBody};
use crate::request::query;
use crate::state::AppState;
use crate::store::{ClusterRow, MemberRow, string_list};
use crate::time::{datetime, now_ms};

/// A member.
#[derive(Debug, Serialize, ToSchema)]
pub struct MemberDto {
    /// Its address, `host:port`.
    pub node: String,
    /// Its full address, `troupe://<cluster>@<host>:<port>` (what agents print); either form
    /// names it in paths.
    pub address: String,
    /// Its incarnation (Akka's `nodeUid`).
    #[serde(with = "troupe_protocol::wire::u64_string")]
    #[schema(value_type = troupe_protocol::wire::schema::U64)]
    pub node_uid: u64,
    /// `joining`, `weakly-up`, `up`, `leaving`, `exiting`, `down` or `removed`.
    pub status: String,
    /// Its roles.
    pub roles: Vec<String>,
    /// When its status last changed.
    pub status_since: DateTime<Utc>,
    /// Whether every observer reaches it.
    pub reachable: bool,
    /// Whether it is the leader.
    pub leader: bool,
    /// Its agent as last reported (newest incarnation), if it reports.
    pub agent: Option<NodeDto>,
}

/// A member some node cannot reach.
#[derive(Debug, Serialize, ToSchema)]
pub struct UnreachableDto {
    /// Its address.
    pub node: String,
    /// Who cannot reach it.
    pub observed_by: Vec<String>,
}

/// The members of a cluster.
#[derive(Debug, Serialize, ToSchema)]
pub struct MembersDto {
    /// The cluster.
    pub cluster: String,
    /// The leader's address.
    pub leader: Option<String>,
    /// Members by address (removed ones only with `include_removed=true`).
    pub members: Vec<MemberDto>,
    /// The unreachable ones and their observers.
    pub unreachable: Vec<UnreachableDto>,
}

/// Query of the member list.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MembersQuery {
    /// Also list removed members.
    #[serde(default)]
    pub include_removed: bool,
}

fn member_dto(
    cluster: &str,
    row: MemberRow,
    leader: Option<&str>,
    agents: &[NodeDto],
) -> MemberDto {
    MemberDto {
        leader: leader == Some(row.address.as_str()),
        // This incarnation's agent; else the address's newest (an agent whose incarnation is
        // not its member uid, such as one embedded with its own numbering).
        agent: agents
            .iter()
            .find(|a| a.node == row.address && a.incarnation == row.uid as u64)
            .or_else(|| agents.iter().find(|a| a.node == row.address))
            .cloned(),
        node_uid: row.uid as u64,
        roles: string_list(&row.roles),
        status_since: datetime(row.status_ms),
        reachable: row.reachable,
        status: row.status,
        address: address::full(cluster, &row.address),
        node: row.address,
    }
}

/// The members DTO of `cluster` from its rows (removed members only with `include_removed`).
pub(crate) fn members_dto(
    cluster: &ClusterRow,
    rows: &[MemberRow],
    agents: &[NodeDto],
    include_removed: bool,
) -> MembersDto {
    let unreachable = rows
        .iter()
        .filter(|m| !m.reachable && m.status != "removed")
        .map(|m| UnreachableDto {
            node: m.address.clone(),
            observed_by: string_list(&m.observers),
        })
        .collect();
    let members = rows
        .iter()
        .filter(|m| include_removed || m.status != "removed")
        .cloned()
        .map(|m| member_dto(&cluster.name, m, cluster.leader.as_deref(), agents))
        .collect();
    MembersDto {
        cluster: cluster.cluster_key.clone(),
        leader: cluster.leader.clone(),
        members,
        unreachable,
    }
}

async fn load(
    state: &AppState,
    cluster: &ClusterRow,
    include_removed: bool,
) -> Result<(MembersDto, Vec<MemberRow>), ApiError> {
    let rows = state.store.members(cluster.id).await?;
    let agents = agents(state, cluster.id).await?;
    Ok((members_dto(cluster, &rows, &agents, include_removed), rows))
}

/// The stored address a member path parameter names in `cluster` (see [`address`]: its exact
/// spelling, or the full `troupe://<cluster>@…` form), or 404.
pub(crate) fn member_address(
    cluster: &ClusterRow,
    rows: &[MemberRow],
    written: &str,
) -> Result<String, ApiError> {
    address::resolve(&cluster.name, written, rows.iter().map(|m| m.address.as_str()))
        .map(str::to_owned)
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "no member `{written}` in `{}` (give its address as reported, `host:port`, or `troupe://{}@host:port`, percent-encoding `/`, `%`, `?`, `#` and spaces)",
                cluster.cluster_key, cluster.name
            ))
        })
}

/// The members of a cluster as last reported.
#[utoipa::path(get, path = "/api/v1/clusters/{cluster}/members", operation_id = "listMembers", tag = "members",
    params(("cluster" = String, Path, description = "Cluster key, or a name only one cluster has (409 when several share it; see getCluster)"), MembersQuery),
    responses((status = 200, body = MembersDto),
              (status = 400, description = "A malformed query", body = ErrorBody),
              (status = 404, description = "No such cluster", body = ErrorBody),
              (status = 503, description = "Store unavailable; retry", body = ErrorBody)))]
pub async fn list(
    state: web::Data<AppState>,
    req: HttpRequest,
    cluster: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let query: MembersQuery = query(&req)?;
    let cluster = find_cluster(&state, &cluster).await?;
    let (members, _) = load(&state, &cluster, query.include_removed).await?;
    Ok(HttpResponse::Ok().json_body(members))
}

/// One member, 404 if unknown.
#[utoipa::path(get, path = "/api/v1/clusters/{cluster}/members/{address}", operation_id = "getMember", tag = "members",
    params(("cluster" = String, Path, description = "Cluster key, or a name only one cluster has (409 when several share it; see getCluster)"),
           ("address" = String, Path, description = "Member address, percent-encoded: its exact spelling as reported (`host:port`; `/` as `%2F`, `%` as `%25`, `?` as `%3F`, `#` as `%23`, a space as `%20`; nothing is trimmed), or the full `troupe://<cluster>@host:port`")),
    responses((status = 200, body = MemberDto),
              (status = 404, description = "No such cluster or member", body = ErrorBody),
              (status = 503, description = "Store unavailable; retry", body = ErrorBody)))]
pub async fn one(
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (cluster, written) = path.into_inner();
    let cluster = find_cluster(&state, &cluster).await?;
    let (members, rows) = load(&state, &cluster, true).await?;
    let address = member_address(&cluster, &rows, &written)?;
    let member = members
        .members
        .into_iter()
        .find(|m| m.node == address)
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "no member `{written}` in `{}`",
                cluster.cluster_key
            ))
        })?;
    Ok(HttpResponse::Ok().json_body(member))
}

/// Body of `PUT …/members/{address}`: form (`operation=Down`, as in Akka Management) or JSON.
#[derive(Debug, Deserialize, ToSchema)]
pub struct OperationRequest {
    /// `Down` or `Leave` (any case).
    #[schema(pattern = "^([Dd][Oo][Ww][Nn]|[Ll][Ee][Aa][Vv][Ee])$")]
    pub operation: String,
}

/// A queued member operation.
#[derive(Debug, Serialize, ToSchema)]
pub struct OperationAccepted {
    /// Its id (agents log it).
    pub id: i64,
    /// The member.
    pub address: String,
    /// `leave` or `down`.
    pub operation: String,
    /// What happens next.
    pub message: String,
}

/// Queues `operation` for member `written` of `cluster`: the admin token, member operations
/// enabled, a known member. Returns the operation's id and the member's `host:port`.
pub(crate) async fn queue_operation(
    state: &AppState,
    req: &HttpRequest,
    cluster: &str,
    written: &str,
    operation: OperationKind,
) -> Result<(i64, String), ApiError> {
    state.tokens.require_admin(req)?;
    if !state.config.enable_member_operations {
        return Err(ApiError::Forbidden(
            "member operations are disabled; start the server with --enable-member-operations",
        ));
    }
    let cluster_row = find_cluster(state, cluster).await?;
    let rows = state.store.members(cluster_row.id).await?;
    let address = member_address(&cluster_row, &rows, written)?;
    let id = state
        .store
        .request_operation(cluster_row.id, &address, operation, now_ms())
        .await?;
    tracing::info!(
        cluster = cluster_row.cluster_key,
        address,
        operation = operation.as_str(),
        id,
        "member operation queued"
    );
    Ok((id, address))
}

fn accepted(id: i64, address: String, operation: OperationKind) -> HttpResponse {
    HttpResponse::Accepted().json_body(OperationAccepted {
        id,
        address,
        operation: operation.as_str().to_owned(),
        message: "queued; the next agent of the cluster to report carries it out".to_owned(),
    })
}

/// The operation a `PUT` body names: form (`operation=Down`) or JSON.
fn parse_operation(body: &[u8]) -> Result<OperationKind, ApiError> {
    let parsed: Option<OperationRequest> = serde_json::from_slice(body)
        .ok()
        .or_else(|| serde_html_form::from_bytes(body).ok());
    match parsed.map(|p| p.operation.to_ascii_lowercase()).as_deref() {
        Some("down") => Ok(OperationKind::Down),
        Some("leave") => Ok(OperationKind::Leave),
        Some(other) => Err(ApiError::BadRequest(format!(
            "unknown operation `{other}`; use Down or Leave"
        ))),
        None => Err(ApiError::BadRequest(
            "expected a form or JSON body with `operation` (Down or Leave)".to_owned(),
        )),
    }
}

/// Asks a member to leave or be downed (`operation=Down|Leave`); needs the admin token and
/// `--enable-member-operations`.
#[utoipa::path(put, path = "/api/v1/clusters/{cluster}/members/{address}", operation_id = "operateMember", tag = "members",
    params(("cluster" = String, Path, description = "Cluster key, or a name only one cluster has (409 when several share it; see getCluster)"),
           ("address" = String, Path, description = "Member address, percent-encoded: its exact spelling as reported (`host:port`; `/` as `%2F`, `%` as `%25`, `?` as `%3F`, `#` as `%23`, a space as `%20`; nothing is trimmed), or the full `troupe://<cluster>@host:port`")),
    request_body(content(
        (OperationRequest = "application/x-www-form-urlencoded"),
        (OperationRequest = "application/json"))),
    responses((status = 202, description = "Queued: the next agent of the cluster to report carries it out", body = OperationAccepted),
              (status = 400, description = "No `operation`, or not `Down` or `Leave`", body = ErrorBody),
              (status = 401, description = "Missing or wrong admin token (or none configured)", body = ErrorBody),
              (status = 403, description = "Member operations are off (`--enable-member-operations`)", body = ErrorBody),
              (status = 404, description = "No such cluster or member", body = ErrorBody),
              (status = 503, description = "Store unavailable; retry", body = ErrorBody)),
    security(("admin" = [])))]
pub async fn operate(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let (cluster, written) = path.into_inner();
    let operation = parse_operation(&body);
    let asked = Asked {
        cluster: &cluster,
        target: &written,
        action: member_action(operation.as_ref().ok().copied()),
    };
    audited(&state, &req, asked, StatusCode::ACCEPTED, async {
        // A wrong token is refused before a bad body.
        state.tokens.require_admin(&req)?;
        let operation = operation?;
        let (id, address) = queue_operation(&state, &req, &cluster, &written, operation).await?;
        Ok::<_, ApiError>((id, accepted(id, address, operation)))
    })
    .await
}

/// Asks a member to leave; needs the admin token and `--enable-member-operations`.
#[utoipa::path(delete, path = "/api/v1/clusters/{cluster}/members/{address}", operation_id = "leaveMember", tag = "members",
    params(("cluster" = String, Path, description = "Cluster key, or a name only one cluster has (409 when several share it; see getCluster)"),
           ("address" = String, Path, description = "Member address, percent-encoded: its exact spelling as reported (`host:port`; `/` as `%2F`, `%` as `%25`, `?` as `%3F`, `#` as `%23`, a space as `%20`; nothing is trimmed), or the full `troupe://<cluster>@host:port`")),
    responses((status = 202, description = "Queued: the next agent of the cluster to report carries it out", body = OperationAccepted),
              (status = 401, description = "Missing or wrong admin token (or none configured)", body = ErrorBody),
              (status = 403, description = "Member operations are off (`--enable-member-operations`)", body = ErrorBody),
              (status = 404, description = "No such cluster or member", body = ErrorBody),
              (status = 503, description = "Store unavailable; retry", body = ErrorBody)),
    security(("admin" = [])))]
pub async fn leave(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (cluster, written) = path.into_inner();
    let operation = OperationKind::Leave;
    let asked = Asked {
        cluster: &cluster,
        target: &written,
        action: member_action(Some(operation)),
    };
    audited(&state, &req, asked, StatusCode::ACCEPTED, async {
        let (id, address) = queue_operation(&state, &req, &cluster, &written, operation).await?;
        Ok::<_, ApiError>((id, accepted(id, address, operation)))
    })
    .await
}
