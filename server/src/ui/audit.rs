//! `GET /ui/audit`: the audit trail of management actions (leave, down), newest first, filtered
//! by target and paged; a node page links here with its address as the target. Below, the
//! newest coordination removals (evict, release), which belong to no cluster.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use troupe_web::format::{TimeText, count, href};
use troupe_web::pages::{AuditPage, AuditView, Section, outcome_class};

use super::page::{self, Context, UiError};
use crate::paging::{cursor_after, parse_cursor};
use crate::state::AppState;
use crate::store::{AuditFilter, AuditRow, AuditScope, MAX_REFUSED};

/// Rows per page.
const ROWS: i64 = 100;
/// Coordination entries shown (the newest).
const COORDINATION_ROWS: i64 = 50;

#[derive(Debug, Default, Deserialize)]
struct AuditQuery {
    cluster: Option<String>,
    target: Option<String>,
    cursor: Option<String>,
}

/// The view of one entry; `nodes` are the addresses the cluster knows.
fn view(ctx: &Context, row: &AuditRow, nodes: &[String]) -> AuditView {
    AuditView {
        at: TimeText::at(row.at_ms),
        token: row.token_id.clone(),
        action: row.action.clone(),
        target_href: href(
            Section::Audit.path(),
            &[("cluster", ctx.cluster_name()), ("target", &row.target)],
        ),
        node_href: nodes
            .contains(&row.target)
            .then(|| ctx.node_href(&row.target)),
        target: row.target.clone(),
        outcome_class: outcome_class(outcome(row)),
        outcome: outcome(row).to_owned(),
        status: row.status,
        reason: row.reason.clone(),
        operation: row
            .operation_id
            .map(|id| id.to_string())
            .unwrap_or_default(),
    }
}

/// What came of it, as the API says: an accepted operation an agent took is `delivered`.
fn outcome(row: &AuditRow) -> &str {
    match row.outcome.as_str() {
        "accepted" if row.delivered_ms.is_some() => "delivered",
        other => other,
    }
}

async fn build(state: &AppState, req: &HttpRequest) -> Result<AuditPage, UiError> {
    let query: AuditQuery = page::query(req)?;
    let ctx = Context::load(state, query.cluster.as_deref()).await?;
    let target = query.target.clone().unwrap_or_default();
    let before = parse_cursor(query.cursor.as_deref().filter(|c| !c.is_empty())).map_err(|_| {
        UiError::BadRequest(
            "This page's `cursor` is not one an “older entries” link gave; start from the newest."
                .to_owned(),
        )
    })?;
    let cluster_name = ctx.cluster_name().to_owned();
    let mut page = AuditPage {
        layout: ctx.layout(Section::Audit, "Audit"),
        target: target.clone(),
        rows: Vec::new(),
        coordination: Vec::new(),
        older_href: None,
        clear_href: href(Section::Audit.path(), &[("cluster", &cluster_name)]),
        refused_kept: count(MAX_REFUSED),
    };
    let coordination = state
        .store
        .audit_entries(
            AuditScope::Coordination,
            &AuditFilter {
                target: None,
                before: None,
                limit: COORDINATION_ROWS,
            },
        )
        .await?;
    page.coordination = coordination
        .iter()
        .map(|r| AuditView {
            node_href: None,
            ..view(&ctx, r, &[])
        })
        .collect();
    let Some(cluster) = &ctx.cluster else {
        return Ok(page);
    };
    let filter = AuditFilter {
        target: (!target.is_empty()).then(|| crate::api::audit::target_of(&cluster.name, &target)),
        before,
        limit: ROWS,
    };
    let rows = state
        .store
        .audit_entries(AuditScope::Cluster(cluster.id), &filter)
        .await?;
    let mut nodes: Vec<String> = state
        .store
        .members(cluster.id)
        .await?
        .into_iter()
        .map(|m| m.address)
        .collect();
    nodes.extend(
        state
            .store
            .agents(cluster.id)
            .await?
            .into_iter()
            .map(|a| a.node),
    );
    if rows.len() as i64 == ROWS
        && let Some(last) = rows.last()
    {
        page.older_href = Some(href(
            Section::Audit.path(),
            &[
                ("cluster", &cluster_name),
                ("target", &target),
                ("cursor", &cursor_after(last.at_ms, last.id)),
            ],
        ));
    }
    page.rows = rows.iter().map(|r| view(&ctx, r, &nodes)).collect();
    Ok(page)
}

/// `GET /ui/audit`.
pub(crate) async fn page(state: web::Data<AppState>, req: HttpRequest) -> HttpResponse {
    page::respond(build(&state, &req).await)
}
