//! `GET /api/v1/clusters/{cluster}/audit` and `GET /api/v1/audit/coordination`: the audit trail
//! of management actions, and the recording of them by the routes that take them (`members`,
//! `management`, `directory`, `leases`).
//!
//! # What is recorded
//! Every leave and down asked through `/api/v1` or `/management`, whatever came of it: server
//! time, which token asked ([`crate::auth::Tokens::admin_caller`]: an id, never the secret),
//! the action (`member.leave`, `member.down`; `member.operate` when the body named no
//! operation the server knows), the target (the member's `host:port`, else what the request
//! wrote, cut to [`MAX_TEXT`] bytes), and the outcome: `accepted` with the status answered and
//! the queued operation's id, `refused` with status and reason (wrong or missing token,
//! operations off, unknown member, bad body), or `failed` (the store could not queue it).
//! An accepted one becomes `delivered` once an agent took the queued operation.
//! A request naming no known cluster is not recorded; refused entries are bounded per
//! cluster ([`crate::store::MAX_REFUSED`]).
//!
//! Every coordination removal too (`coordination.evict`, `coordination.claim.release`,
//! `coordination.lease.release`), with the coordination token's id, in a trail of its own
//! (the coordination API serves no one cluster); an accepted one's `reason` says what it did.
//!
//! The entry is written after the answer is decided and before it is sent; if writing it
//! fails the answer stands and the server logs a warning naming the action.

use crate::json::JsonBody;
use std::future::Future;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::clusters::find_cluster;
use crate::address;
use crate::error::{ApiError, ErrorBody};
use crate::paging::{next_cursor, page_size, parse_cursor};
use crate::request::query;
use crate::state::AppState;
use crate::store::{AuditFilter, AuditOutcome, AuditRow, AuditScope, NewAuditEntry};
use crate::time::{datetime, now_ms};

/// Longest target or reason stored, bytes (longer ones are cut at a character boundary).
pub const MAX_TEXT: usize = 512;

/// What a management request asked, as the audit trail names it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asked<'a> {
    /// The cluster as the path wrote it (key or name).
    pub cluster: &'a str,
    /// The target as the path wrote it.
    pub target: &'a str,
    /// `member.leave`, `member.down`, `member.operate`.
    pub action: &'static str,
}

/// The action name of a member operation (`None`: the body named none the server knows).
pub(crate) fn member_action(operation: Option<troupe_protocol::OperationKind>) -> &'static str {
    match operation {
        Some(troupe_protocol::OperationKind::Leave) => "member.leave",
        Some(troupe_protocol::OperationKind::Down) => "member.down",
        None => "member.operate",
    }
}

/// The target an entry names for `written` in cluster `cluster`: a full address of its system
/// as the member's `host:port` (one trailing `/` dropped), anything else as written.
pub(crate) fn target_of(cluster: &str, written: &str) -> String {
    let candidates = address::candidates(cluster, written);
    candidates
        .last()
        .cloned()
        .unwrap_or_else(|| written.to_owned())
}

fn cut(text: &str) -> String {
    let mut end = text.len().min(MAX_TEXT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// Runs `work` (which answers the queued operation's id and its result) and records what came
/// of it; `accepted` is the status a success is answered with.
pub(crate) async fn audited<T>(
    state: &AppState,
    req: &HttpRequest,
    asked: Asked<'_>,
    accepted: StatusCode,
    work: impl Future<Output = Result<(i64, T), ApiError>>,
) -> Result<T, ApiError> {
    let at_ms = now_ms();
    let result = work.await;
    let (outcome, status, reason, operation_id) = match &result {
        Ok((id, _)) => (AuditOutcome::Accepted, accepted, String::new(), Some(*id)),
        Err(error) => {
            let status = error.status_code();
            let outcome = if status.is_server_error() {
                AuditOutcome::Failed
            } else {
                AuditOutcome::Refused
            };
            (outcome, status, cut(&error.public_text()), None)
        }
    };
    // Nothing to file it under when the cluster is unknown (or the name ambiguous): not
    // recorded, so unknown names cannot grow the table either.
    if let Ok(cluster) = find_cluster(state, asked.cluster).await {
        let entry = NewAuditEntry {
            at_ms,
            token_id: state.tokens.admin_caller(req),
            action: asked.action.to_owned(),
            target: cut(&target_of(&cluster.name, asked.target)),
            outcome,
            status: status.as_u16(),
            reason,
            operation_id,
        };
        if let Err(error) = state
            .store
            .record_audit(AuditScope::Cluster(cluster.id), &entry)
            .await
        {
            tracing::warn!(
                cluster = cluster.cluster_key,
                action = entry.action,
                target = entry.target,
                outcome = outcome.as_str(),
                %error,
                "could not write the audit entry of a management request"
            );
        }
    }
    result.map(|(_, answer)| answer)
}

/// What a coordination request asked: `action` (`coordination.evict`, …) of `target`.
#[derive(Debug, Clone)]
pub(crate) struct AskedCoordination {
    /// `coordination.evict`, `coordination.claim.release`, `coordination.lease.release`.
    pub action: &'static str,
    /// The host, `actor (host h)`, `lease (owner o)`.
    pub target: String,
}

/// Runs `work` (which answers what it did, in words, and its result) and records what came of
/// it in the coordination trail; a success is answered 200.
pub(crate) async fn audited_coordination<T>(
    state: &AppState,
    req: &HttpRequest,
    asked: AskedCoordination,
    work: impl Future<Output = Result<(String, T), ApiError>>,
) -> Result<T, ApiError> {
    let at_ms = now_ms();
    let result = work.await;
    let (outcome, status, reason) = match &result {
        Ok((done, _)) => (AuditOutcome::Accepted, StatusCode::OK, cut(done)),
        Err(error) => {
            let status = error.status_code();
            let outcome = if status.is_server_error() {
                AuditOutcome::Failed
            } else {
                AuditOutcome::Refused
            };
            (outcome, status, cut(&error.public_text()))
        }
    };
    let entry = NewAuditEntry {
        at_ms,
        token_id: state.tokens.coordination_caller(req),
        action: asked.action.to_owned(),
        target: cut(&asked.target),
        outcome,
        status: status.as_u16(),
        reason,
        operation_id: None,
    };
    if let Err(error) = state
        .store
        .record_audit(AuditScope::Coordination, &entry)
        .await
    {
        tracing::warn!(
            action = entry.action,
            target = entry.target,
            outcome = outcome.as_str(),
            %error,
            "could not write the audit entry of a coordination request"
        );
    }
    result.map(|(_, answer)| answer)
}

/// What came of a management request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AuditOutcomeDto {
    /// Done or queued as asked (a queued member operation no agent has taken yet).
    Accepted,
    /// A queued member operation an agent took to carry out (`delivered_at` says when).
    Delivered,
    /// Turned down (`status`, `reason` say why).
    Refused,
    /// Allowed, but the server could not carry it out.
    Failed,
}

/// One management request.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AuditEntryDto {
    /// Its id (ascending in storage order).
    pub id: i64,
    /// When the server received it.
    pub at: DateTime<Utc>,
    /// Which token asked: `admin:` and the first 12 hex digits of the admin token's SHA-256,
    /// `none` (no bearer token) or `unknown` (any other token). Never the token.
    pub token: String,
    /// `member.leave`, `member.down`, or `member.operate` (no operation the server knows);
    /// in the coordination trail `coordination.evict`, `coordination.claim.release`,
    /// `coordination.lease.release`.
    pub action: String,
    /// The member's `host:port`, or what the request named when it is no member address; in
    /// the coordination trail the host, `<actor> (host <host>)` or `<lease> (owner <owner>)`.
    pub target: String,
    /// What came of it.
    pub outcome: AuditOutcomeDto,
    /// The HTTP status answered.
    pub status: u16,
    /// Why it was refused or failed; for an accepted coordination action what it did
    /// (`released 2 claims: a, b`). Absent for an accepted member operation.
    pub reason: Option<String>,
    /// The queued member operation (agents log its id), when accepted.
    pub operation_id: Option<i64>,
    /// When an agent took the queued member operation (absent until then).
    pub delivered_at: Option<DateTime<Utc>>,
}

impl From<AuditRow> for AuditEntryDto {
    fn from(row: AuditRow) -> Self {
        Self {
            id: row.id,
            at: datetime(row.at_ms),
            token: row.token_id,
            action: row.action,
            target: row.target,
            outcome: match row.outcome.as_str() {
                "accepted" if row.delivered_ms.is_some() => AuditOutcomeDto::Delivered,
                "accepted" => AuditOutcomeDto::Accepted,
                "failed" => AuditOutcomeDto::Failed,
                _ => AuditOutcomeDto::Refused,
            },
            status: u16::try_from(row.status).unwrap_or(0),
            reason: (!row.reason.is_empty()).then_some(row.reason),
            operation_id: row.operation_id,
            delivered_at: row.delivered_ms.map(datetime),
        }
    }
}

/// One page of the audit trail.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AuditPage {
    /// Entries, newest first.
    pub entries: Vec<AuditEntryDto>,
    /// Pass as `cursor` for the next (older) page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// Filters of the audit trail.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Only entries about this target: a member as `host:port` or
    /// `troupe://<cluster>@host:port`, else the exact text an entry shows.
    #[param(min_length = 1)]
    pub target: Option<String>,
    /// `next_cursor` of the previous page.
    #[param(value_type = Option<crate::api::schemas::PageCursor>)]
    pub cursor: Option<String>,
    /// Page size, 1..=1000 (default 100).
    #[param(minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<i64>,
}

/// The audit filter `query` asks for in cluster `cluster` (its name).
pub(crate) fn audit_filter(cluster: &str, query: &AuditQuery) -> Result<AuditFilter, ApiError> {
    let target = match query.target.as_deref() {
        None => None,
        Some("") => {
            return Err(ApiError::BadRequest(
                "`target` must not be empty; leave it out for every target".to_owned(),
            ));
        }
        Some(written) => Some(cut(&target_of(cluster, written))),
    };
    Ok(AuditFilter {
        target,
        before: parse_cursor(query.cursor.as_deref())?,
        limit: page_size(query.limit)?,
    })
}

/// A cluster's audit trail of management actions (leave, down; accepted, refused or failed),
/// newest first.
#[utoipa::path(get, path = "/api/v1/clusters/{cluster}/audit", operation_id = "listAuditEntries", tag = "audit",
    params(("cluster" = String, Path, description = "Cluster key, or a name only one cluster has (409 when several share it; see getCluster)"), AuditQuery),
    responses((status = 200, body = AuditPage),
              (status = 400, description = "An empty target, a bad cursor or limit", body = ErrorBody),
              (status = 404, description = "No such cluster", body = ErrorBody),
              (status = 503, description = "Store unavailable; retry", body = ErrorBody)))]
pub async fn list(
    state: web::Data<AppState>,
    req: HttpRequest,
    cluster: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let query: AuditQuery = query(&req)?;
    let cluster = find_cluster(&state, &cluster).await?;
    let filter = audit_filter(&cluster.name, &query)?;
    let rows = state
        .store
        .audit_entries(AuditScope::Cluster(cluster.id), &filter)
        .await?;
    Ok(answer(rows, filter.limit))
}

fn answer(rows: Vec<AuditRow>, limit: i64) -> HttpResponse {
    let next_cursor = next_cursor(rows.len(), limit, rows.last().map(|r| (r.at_ms, r.id)));
    HttpResponse::Ok().json_body(AuditPage {
        entries: rows.into_iter().map(Into::into).collect(),
        next_cursor,
    })
}

/// The audit trail of coordination removals (evict a host, release a claim or a lease;
/// accepted, refused or failed), newest first. Read like the cluster trails (the viewer
/// credential when one is set), not with the coordination token.
#[utoipa::path(get, path = "/api/v1/audit/coordination", operation_id = "listCoordinationAuditEntries", tag = "audit",
    params(AuditQuery),
    responses((status = 200, body = AuditPage),
              (status = 400, description = "An empty target, a bad cursor or limit", body = ErrorBody),
              (status = 503, description = "Store unavailable; retry", body = ErrorBody)))]
pub async fn list_coordination(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let query: AuditQuery = query(&req)?;
    if query.target.as_deref() == Some("") {
        return Err(ApiError::BadRequest(
            "`target` must not be empty; leave it out for every target".to_owned(),
        ));
    }
    let filter = AuditFilter {
        target: query.target.as_deref().map(cut),
        before: parse_cursor(query.cursor.as_deref())?,
        limit: page_size(query.limit)?,
    };
    let rows = state
        .store
        .audit_entries(AuditScope::Coordination, &filter)
        .await?;
    Ok(answer(rows, filter.limit))
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn long_texts_are_cut_at_a_character_boundary() {
        let long = "é".repeat(400);
        let cut = cut(&long);
        assert!(cut.len() <= super::MAX_TEXT && cut.len() >= super::MAX_TEXT - 1);
        assert!(long.starts_with(&cut));
    }
}
