//! `/management/{cluster}/cluster/…`: Akka Management's cluster routes, per cluster, for the
//! tools and habits of Akka users. Point a client at the base `/management/<cluster>`.
//!
//! | route | answer |
//! |---|---|
//! | `GET /cluster/members` (or `/cluster/members/`) | `{selfNode, members, unreachable, leader, oldest, oldestPerRole}` |
//! | `GET /cluster/members/{address}` | one member `{node, nodeUid, status, roles}`; 404 `{"message": "Member [...] not found"}` |
//! | `PUT /cluster/members/{address}` (form `operation=Down` or `Leave`) | 200 `{"message": "Downing …"}` / `"Leaving …"`; 400 `"Operation not supported"` |
//! | `DELETE /cluster/members/{address}` | 200 `{"message": "Leaving …"}` |
//! | `GET /cluster/domain-events?type=MemberUp&type=LeaderChanged` | server-sent events, resumable |
//!
//! # Where the server differs from a node
//! Akka serves each node's own view from the node. The control plane serves the cluster as
//! its agents last reported it. So `selfNode` cannot be "this node": the server answers the
//! member whose agent reported most recently (the freshest view it merged), or the leader when
//! no member's agent reports. Leave and down are queued and carried out by the next agent of
//! the cluster that reports (as on `/api/v1`); the 200 answer means accepted, as Akka's does.
//! Each request for one, accepted or not, goes into the cluster's audit trail (see `audit`).
//! Joining (`POST /cluster/members`) is not possible from outside the cluster: 405.
//!
//! Addresses are the full `troupe://<cluster>@host:port` (in a path, the address's exact
//! spelling percent-encoded: see `crate::address`); `nodeUid` is a string. Member
//! operations need the admin token and `--enable-member-operations`, as on `/api/v1`; every
//! error answer here is Akka's `{"message": "…"}`.

use crate::json::JsonBody;
use std::collections::BTreeMap;
use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use troupe_protocol::{EventCategory, EventKind, MemberChange, OperationKind};
use utoipa::ToSchema;

use super::audit::{Asked, audited, member_action};
use super::clusters::find_cluster;
use super::members::{member_address, queue_operation};
use super::stream::resume_from;
use crate::address;
use crate::error::ApiError;
use crate::feed::{Cursor, Feed, FeedItem, Scope};
use crate::request::query;
use crate::sse::{self, Frame};
use crate::state::AppState;
use crate::store::{AgentRow, ClusterRow, MemberRow, string_list};

/// Akka Management's answer message (also every error here).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ManagementMessage {
    /// What happened or went wrong.
    pub message: String,
}

/// An error, in Akka's `{"message": …}` shape.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ManagementError(#[from] ApiError);

impl ResponseError for ManagementError {
    fn status_code(&self) -> StatusCode {
        self.0.status_code()
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = self.0.error_response();
        let body = crate::json::to_vec(&ManagementMessage {
            message: self.0.to_string(),
        })
        .unwrap_or_default();
        response.headers_mut().insert(
            actix_web::http::header::CONTENT_TYPE,
            actix_web::http::header::HeaderValue::from_static("application/json"),
        );
        response.set_body(actix_web::body::BoxBody::new(body))
    }
}

type Answer = Result<HttpResponse, ManagementError>;

/// A member, as Akka Management shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMember {
    /// Its full address, `troupe://<cluster>@host:port`.
    pub node: String,
    /// Its incarnation, as a string.
    #[schema(value_type = troupe_protocol::wire::schema::U64)]
    pub node_uid: String,
    /// `Joining`, `WeaklyUp`, `Up`, `Leaving`, `Exiting`, `Down` or `Removed`.
    pub status: String,
    /// Its roles.
    pub roles: Vec<String>,
}

/// A member some node cannot reach.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterUnreachableMember {
    /// Its full address.
    pub node: String,
    /// Who cannot reach it (full addresses).
    pub observed_by: Vec<String>,
}

/// The members of a cluster, as Akka Management shows them.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMembers {
    /// Not the answering node (the server is none): the member whose agent reported most
    /// recently, else the leader; null when neither is known.
    pub self_node: Option<String>,
    /// Members by address (removed ones left out).
    pub members: Vec<ClusterMember>,
    /// Unreachable members and their observers.
    pub unreachable: Vec<ClusterUnreachableMember>,
    /// The leader.
    pub leader: Option<String>,
    /// The up member that has been up longest.
    pub oldest: Option<String>,
    /// Per role, its oldest up member.
    pub oldest_per_role: BTreeMap<String, String>,
}

/// Akka's name of a status (`weakly-up` → `WeaklyUp`).
fn akka_status(status: &str) -> String {
    status
        .split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_uppercase().chain(chars).collect()
            })
        })
        .collect()
}

fn member_of(cluster: &str, row: &MemberRow) -> ClusterMember {
    ClusterMember {
        node: address::full(cluster, &row.address),
        node_uid: (row.uid as u64).to_string(),
        status: akka_status(&row.status),
        roles: string_list(&row.roles),
    }
}

/// The members answer from the stored rows.
pub(crate) fn cluster_members(
    cluster: &ClusterRow,
    rows: &[MemberRow],
    agents: &[AgentRow],
) -> ClusterMembers {
    let name = cluster.name.as_str();
    let live: Vec<&MemberRow> = rows.iter().filter(|m| m.status != "removed").collect();
    let up: Vec<&&MemberRow> = {
        let mut up: Vec<_> = live.iter().filter(|m| m.status == "up").collect();
        up.sort_by(|a, b| (a.status_ms, &a.address).cmp(&(b.status_ms, &b.address)));
        up
    };
    let mut oldest_per_role = BTreeMap::new();
    for member in &up {
        for role in string_list(&member.roles) {
            oldest_per_role
                .entry(role)
                .or_insert_with(|| address::full(name, &member.address));
        }
    }
    let freshest = agents
        .iter()
        .filter(|a| live.iter().any(|m| m.address == a.node))
        .max_by_key(|a| a.last_report_ms)
        .map(|a| a.node.clone());
    ClusterMembers {
        self_node: freshest
            .or_else(|| cluster.leader.clone())
            .map(|n| address::full(name, &n)),
        members: live.iter().map(|m| member_of(name, m)).collect(),
        unreachable: live
            .iter()
            .filter(|m| !m.reachable)
            .map(|m| ClusterUnreachableMember {
                node: address::full(name, &m.address),
                observed_by: string_list(&m.observers)
                    .iter()
                    .map(|o| address::full(name, o))
                    .collect(),
            })
            .collect(),
        leader: cluster.leader.as_deref().map(|l| address::full(name, l)),
        oldest: up.first().map(|m| address::full(name, &m.address)),
        oldest_per_role,
    }
}

/// The cluster's members (Akka's `GET /cluster/members`).
#[utoipa::path(get, path = "/management/{cluster}/cluster/members", operation_id = "getClusterMembers", tag = "management",
    params(("cluster" = String, Path, description = "Cluster key, or a name only one cluster has (409 when several share it; see getCluster)")),
    responses((status = 200, body = ClusterMembers),
              (status = 404, description = "No such cluster", body = ManagementMessage),
              (status = 503, description = "Store unavailable; retry", body = ManagementMessage)))]
pub async fn members(state: web::Data<AppState>, cluster: web::Path<String>) -> Answer {
    let cluster = find_cluster(&state, &cluster).await?;
    let rows = state
        .store
        .members(cluster.id)
        .await
        .map_err(ApiError::from)?;
    let agents = state
        .store
        .agents(cluster.id)
        .await
        .map_err(ApiError::from)?;
    Ok(HttpResponse::Ok().json_body(cluster_members(&cluster, &rows, &agents)))
}

async fn find_member(
    state: &AppState,
    cluster: &str,
    written: &str,
) -> Result<(ClusterRow, MemberRow), ManagementError> {
    let not_found = || ManagementError(ApiError::NotFound(format!("Member [{written}] not found")));
    let cluster = find_cluster(state, cluster).await?;
    let rows: Vec<MemberRow> = state
        .store
        .members(cluster.id)
        .await
        .map_err(ApiError::from)?
        .into_iter()
        .filter(|m| m.status != "removed")
        .collect();
    let address = member_address(&cluster, &rows, written).map_err(|_| not_found())?;
    let row = rows
        .into_iter()
        .find(|m| m.address == address)
        .ok_or_else(not_found)?;
    Ok((cluster, row))
}

/// One member (Akka's `GET /cluster/members/{address}`).
#[utoipa::path(get, path = "/management/{cluster}/cluster/members/{address}", operation_id = "getClusterMember", tag = "management",
    params(("cluster" = String, Path, description = "Cluster key, or a name only one cluster has (409 when several share it; see getCluster)"),
           ("address" = String, Path, description = "`troupe://<cluster>@host:port` or `host:port`, percent-encoded: the address's exact spelling as reported (`/` as `%2F`, `%` as `%25`, `?` as `%3F`, `#` as `%23`, a space as `%20`; nothing is trimmed)")),
    responses((status = 200, body = ClusterMember),
              (status = 404, description = "No such cluster or member", body = ManagementMessage),
              (status = 503, description = "Store unavailable; retry", body = ManagementMessage)))]
pub async fn member(state: web::Data<AppState>, path: web::Path<(String, String)>) -> Answer {
    let (cluster, written) = path.into_inner();
    let (cluster, row) = find_member(&state, &cluster, &written).await?;
    Ok(HttpResponse::Ok().json_body(member_of(&cluster.name, &row)))
}

/// The form of `PUT /cluster/members/{address}`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ManagementOperation {
    /// `Down` or `Leave` (any case).
    #[schema(pattern = "^([Dd][Oo][Ww][Nn]|[Ll][Ee][Aa][Vv][Ee])$")]
    pub operation: String,
}

/// Carries out `operation` and answers the queued operation's id and Akka's answer.
async fn operate(
    state: &AppState,
    req: &HttpRequest,
    cluster: &str,
    written: &str,
    operation: OperationKind,
) -> Result<(i64, HttpResponse), ApiError> {
    // Akka answers 404 for an unknown member before anything else.
    let (cluster_row, row) = find_member(state, cluster, written)
        .await
        .map_err(|e| e.0)?;
    let (id, _) = queue_operation(state, req, cluster, &row.address, operation).await?;
    let verb = match operation {
        OperationKind::Down => "Downing",
        OperationKind::Leave => "Leaving",
    };
    Ok((
        id,
        HttpResponse::Ok().json_body(ManagementMessage {
            message: format!("{verb} {}", address::full(&cluster_row.name, &row.address)),
        }),
    ))
}

/// Down or leave a member (Akka's `PUT /cluster/members/{address}`, form `operation`).
#[utoipa::path(put, path = "/management/{cluster}/cluster/members/{address}", operation_id = "operateClusterMember", tag = "management",
    params(("cluster" = String, Path, description = "Cluster key, or a name only one cluster has (409 when several share it; see getCluster)"),
           ("address" = String, Path, description = "`troupe://<cluster>@host:port` or `host:port`, percent-encoded: the address's exact spelling as reported (`/` as `%2F`, `%` as `%25`, `?` as `%3F`, `#` as `%23`, a space as `%20`; nothing is trimmed)")),
    request_body(content = ManagementOperation, content_type = "application/x-www-form-urlencoded"),
    responses((status = 200, description = "Accepted: the next agent of the cluster to report carries it out", body = ManagementMessage),
              (status = 400, description = "Not `Down` or `Leave`", body = ManagementMessage),
              (status = 401, description = "Missing or wrong admin token", body = ManagementMessage),
              (status = 403, description = "Member operations are off (`--enable-member-operations`)", body = ManagementMessage),
              (status = 404, description = "No such cluster or member", body = ManagementMessage),
              (status = 503, description = "Store unavailable; retry", body = ManagementMessage)),
    security(("admin" = [])))]
pub async fn put_member(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
    body: web::Bytes,
) -> Answer {
    let (cluster, written) = path.into_inner();
    let form: Option<ManagementOperation> = serde_html_form::from_bytes(&body).ok();
    let operation = match form.map(|f| f.operation.to_ascii_lowercase()).as_deref() {
        Some("down") => Some(OperationKind::Down),
        Some("leave") => Some(OperationKind::Leave),
        _ => None,
    };
    let asked = Asked {
        cluster: &cluster,
        target: &written,
        action: member_action(operation),
    };
    Ok(audited(&state, &req, asked, StatusCode::OK, async {
        state.tokens.require_admin(&req)?;
        let operation =
            operation.ok_or_else(|| ApiError::BadRequest("Operation not supported".to_owned()))?;
        operate(&state, &req, &cluster, &written, operation).await
    })
    .await?)
}

/// Leave (Akka's `DELETE /cluster/members/{address}`).
#[utoipa::path(delete, path = "/management/{cluster}/cluster/members/{address}", operation_id = "leaveClusterMember", tag = "management",
    params(("cluster" = String, Path, description = "Cluster key, or a name only one cluster has (409 when several share it; see getCluster)"),
           ("address" = String, Path, description = "`troupe://<cluster>@host:port` or `host:port`, percent-encoded: the address's exact spelling as reported (`/` as `%2F`, `%` as `%25`, `?` as `%3F`, `#` as `%23`, a space as `%20`; nothing is trimmed)")),
    responses((status = 200, description = "Accepted: the next agent of the cluster to report carries it out", body = ManagementMessage),
              (status = 401, description = "Missing or wrong admin token", body = ManagementMessage),
              (status = 403, description = "Member operations are off (`--enable-member-operations`)", body = ManagementMessage),
              (status = 404, description = "No such cluster or member", body = ManagementMessage),
              (status = 503, description = "Store unavailable; retry", body = ManagementMessage)),
    security(("admin" = [])))]
pub async fn delete_member(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
) -> Answer {
    let (cluster, written) = path.into_inner();
    let operation = OperationKind::Leave;
    let asked = Asked {
        cluster: &cluster,
        target: &written,
        action: member_action(Some(operation)),
    };
    Ok(audited(&state, &req, asked, StatusCode::OK, async {
        state.tokens.require_admin(&req)?;
        operate(&state, &req, &cluster, &written, operation).await
    })
    .await?)
}

/// Akka's domain-event names, by our kind (membership only; `SelfUp` has none).
fn akka_event(kind: EventKind) -> Option<&'static str> {
    Some(match kind {
        EventKind::MemberJoined => "MemberJoined",
        EventKind::MemberWeaklyUp => "MemberWeaklyUp",
        EventKind::MemberUp => "MemberUp",
        EventKind::MemberLeft => "MemberLeft",
        EventKind::MemberExited => "MemberExited",
        EventKind::MemberDown => "MemberDowned",
        EventKind::MemberRemoved => "MemberRemoved",
        EventKind::MemberUnreachable => "UnreachableMember",
        EventKind::MemberReachable => "ReachableMember",
        EventKind::LeaderChanged => "LeaderChanged",
        _ => return None,
    })
}

/// Every domain-event name the stream sends.
pub const DOMAIN_EVENTS: [&str; 10] = [
    "MemberJoined",
    "MemberWeaklyUp",
    "MemberUp",
    "MemberLeft",
    "MemberExited",
    "MemberDowned",
    "MemberRemoved",
    "UnreachableMember",
    "ReachableMember",
    "LeaderChanged",
];

/// Query of the domain-event stream.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DomainEventsQuery {
    /// Only these event types (Akka's names: `MemberUp`, `MemberDowned`, `UnreachableMember`,
    /// `LeaderChanged`, …); repeatable.
    #[serde(default, rename = "type")]
    #[param(value_type = Option<Vec<DomainEventType>>, style = Form, explode)]
    pub types: Vec<String>,
    /// Open a fresh stream with a `CurrentClusterState` event (members, unreachable, leader).
    #[serde(default)]
    pub snapshot: bool,
    /// Resume after this event id, for clients that cannot send `Last-Event-ID`.
    #[param(min_length = 1)]
    pub last_event_id: Option<String>,
}

/// The JSON `data:` line of a domain event (Akka's shape). `type` is also the SSE `event:`
/// name; `CurrentClusterState` carries `members`, `unreachable` and `leader` instead.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DomainEvent {
    /// `MemberJoined`, `MemberWeaklyUp`, `MemberUp`, `MemberLeft`, `MemberExited`,
    /// `MemberDowned`, `MemberRemoved`, `UnreachableMember`, `ReachableMember`,
    /// `LeaderChanged` or `CurrentClusterState`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The member (every type but `LeaderChanged`).
    pub member: Option<ClusterMember>,
    /// The new leader's full address (`LeaderChanged`; null: none).
    pub address: Option<String>,
    /// The status the member had (`MemberRemoved`).
    pub previous_status: Option<String>,
}

fn domain_event(cluster: &str, item: &FeedItem) -> Option<(&'static str, Value)> {
    let FeedItem::Event { row, .. } = item else {
        return None;
    };
    let kind: EventKind = row.kind.parse().ok()?;
    if kind.category() != EventCategory::Membership {
        return None;
    }
    let name = akka_event(kind)?;
    let body: troupe_protocol::EventBody = serde_json::from_str(&row.detail).ok()?;
    let member = |change: &MemberChange| {
        json!({
            "node": address::full(cluster, &change.member.address),
            "nodeUid": change.member.uid.to_string(),
            "status": akka_status(change.member.status.as_str()),
            "roles": change.member.roles,
        })
    };
    let data = match &body {
        troupe_protocol::EventBody::LeaderChanged(change) => json!({
            "type": name,
            "address": change.leader.as_deref().map(|l| address::full(cluster, l)),
        }),
        troupe_protocol::EventBody::MemberRemoved(change) => json!({
            "type": name,
            "member": member(change),
            "previousStatus": change.previous_status.map(|s| akka_status(s.as_str())),
        }),
        troupe_protocol::EventBody::MemberJoined(c)
        | troupe_protocol::EventBody::MemberWeaklyUp(c)
        | troupe_protocol::EventBody::MemberUp(c)
        | troupe_protocol::EventBody::MemberLeft(c)
        | troupe_protocol::EventBody::MemberExited(c)
        | troupe_protocol::EventBody::MemberDown(c)
        | troupe_protocol::EventBody::MemberUnreachable(c)
        | troupe_protocol::EventBody::MemberReachable(c) => json!({
            "type": name,
            "member": member(c),
        }),
        _ => return None,
    };
    Some((name, data))
}

/// Cluster domain events as server-sent events (Akka's `GET /cluster/domain-events`), with
/// `id:` to resume from (`Last-Event-ID`) and an optional opening snapshot.
#[utoipa::path(get, path = "/management/{cluster}/cluster/domain-events", operation_id = "streamDomainEvents", tag = "management",
    params(("cluster" = String, Path, description = "Cluster key, or a name only one cluster has (409 when several share it; see getCluster)"), DomainEventsQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event (the `id:` of an event the stream sent)")),
    responses((status = 200, description = "A `text/event-stream` that does not end while the server runs: per event `id:` (resume position), `event: <type>` and one `data:` line, a JSON `DomainEvent` `{\"type\", \"member\": {node, nodeUid, status, roles}}` (`address` for `LeaderChanged`, `previousStatus` for `MemberRemoved`)",
                content_type = "text/event-stream", body = String,
                example = json!("retry: 3000\n\nid: 1:17.0\nevent: MemberUp\ndata: {\"type\":\"MemberUp\",\"member\":{\"node\":\"troupe://demo@127.0.0.1:2552\",\"nodeUid\":\"15365700884095386388\",\"status\":\"Up\",\"roles\":[]}}\n\n")),
              (status = 400, description = "Unknown event type or `Last-Event-ID`", body = ManagementMessage),
              (status = 404, description = "No such cluster", body = ManagementMessage),
              (status = 503, description = "Store unavailable; retry", body = ManagementMessage)))]
pub async fn domain_events(
    state: web::Data<AppState>,
    req: HttpRequest,
    cluster: web::Path<String>,
) -> Answer {
    let query: DomainEventsQuery = query(&req)?;
    let mut types = Vec::new();
    for wanted in super::events::filter_items("type", &query.types)? {
        let known = DOMAIN_EVENTS
            .iter()
            .find(|n| **n == wanted)
            .ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "unknown event type `{wanted}`; known: {}",
                    DOMAIN_EVENTS.join(", ")
                ))
            })?;
        types.push(*known);
    }
    let resume = resume_from(&req, query.last_event_id.as_deref())?;
    let cluster = find_cluster(&state, &cluster).await?;
    let name: Arc<str> = Arc::from(cluster.name.as_str());
    let scope = Scope::One(cluster.id, Arc::from(cluster.cluster_key.as_str()));
    let wake = state.live.subscribe();
    let mut opening = Vec::new();
    let cursor = match resume {
        Some(cursor) => cursor,
        None if query.snapshot => match state
            .store
            .cluster_snapshot(&cluster.cluster_key)
            .await
            .map_err(ApiError::from)?
        {
            Some(snapshot) => {
                let mut cursor = Cursor::default();
                cursor.set(snapshot.cluster.id, snapshot.position);
                let agents = state
                    .store
                    .agents(snapshot.cluster.id)
                    .await
                    .map_err(ApiError::from)?;
                let members = cluster_members(&snapshot.cluster, &snapshot.members, &agents);
                opening.push(Frame {
                    id: Some(cursor.to_string()),
                    event: "CurrentClusterState".to_owned(),
                    data: crate::json::to_string(&json!({
                        "type": "CurrentClusterState",
                        "members": members.members,
                        "unreachable": members.unreachable,
                        "leader": members.leader,
                    }))
                    .unwrap_or_default(),
                });
                cursor
            }
            None => Feed::current(&state.store, &scope)
                .await
                .map_err(ApiError::from)?,
        },
        None => Feed::current(&state.store, &scope)
            .await
            .map_err(ApiError::from)?,
    };
    let feed = Feed::open(state.store.clone(), wake, scope, cursor)
        .await
        .map_err(ApiError::from)?;
    let encode: sse::Encode = Box::new(move |item, id| {
        let (event, data) = domain_event(&name, item)?;
        if !types.is_empty() && !types.contains(&event) {
            return None;
        }
        Some(Frame {
            id: Some(id),
            event: event.to_owned(),
            data: crate::json::to_string(&data).unwrap_or_default(),
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

#[cfg(test)]
mod tests {
    use super::akka_status;

    #[test]
    fn statuses_are_named_as_akka_names_them() {
        assert_eq!(akka_status("weakly-up"), "WeaklyUp");
        assert_eq!(akka_status("up"), "Up");
        assert_eq!(akka_status("removed"), "Removed");
    }
}

crate::api::schemas::named_schema!(
    /// An Akka domain-event type's name.
    DomainEventType = "DomainEventType",
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .enum_values(Some(DOMAIN_EVENTS))
        .description(Some("An Akka Management domain-event type"))
        .into()
);
