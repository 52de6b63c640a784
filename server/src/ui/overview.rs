//! `GET /ui/`: every cluster with its members, leader, agent health and last-hour counts; the
//! first with its map (`super::map`).

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use troupe_web::format::{TimeText, age, count, href};
use troupe_web::pages::{
    ClusterView, MemberView, OverviewPage, Section, health_class, status_class,
};

use super::page::{self, Context, UiError};
use crate::state::AppState;
use crate::store::{AgentRow, ClusterRow, DeadLetterFilter, MemberRow, SILENT_HEALTH, string_list};

/// Clusters shown at most (by name).
const MAX_CLUSTERS: usize = 20;
/// Events counted at most per cluster and hour (counting walks the time index).
const COUNT_CAP: i64 = 20_000;

#[derive(Debug, Default, Deserialize)]
struct OverviewQuery {
    cluster: Option<String>,
}

/// A member row; `agents` are the cluster's agents, newest incarnation first per address.
pub(crate) fn member_view(
    ctx: &Context,
    row: &MemberRow,
    leader: Option<&str>,
    agents: &[AgentRow],
) -> MemberView {
    let agent = agents.iter().find(|a| a.node == row.address);
    // "" without an agent; one that has not reported its health yet, or has gone silent, is
    // "unknown".
    let health = agent.map_or_else(String::new, |a| {
        a.health_at(ctx.now_ms, ctx.silence_ms)
            .unwrap_or(SILENT_HEALTH)
            .to_owned()
    });
    MemberView {
        address: row.address.clone(),
        node_href: ctx.node_href(&row.address),
        events_href: href(
            Section::Timeline.path(),
            &[("cluster", ctx.cluster_name()), ("subject", &row.address)],
        ),
        status: row.status.clone(),
        status_class: status_class(&row.status),
        roles: string_list(&row.roles),
        reachable: row.reachable,
        unreachable_by: string_list(&row.observers),
        leader: leader == Some(row.address.as_str()),
        health_class: health_class(&health),
        health,
        last_report: agent.map(|a| TimeText::at(a.last_report_ms)),
        last_report_age: agent.map_or_else(String::new, |a| age(ctx.now_ms, a.last_report_ms)),
        stale: agent.is_some_and(|a| a.silent_at(ctx.now_ms, ctx.silence_ms)),
    }
}

/// The running drop totals of each address's newest incarnation, summed.
pub(crate) fn dropped_total(agents: &[AgentRow]) -> i64 {
    let mut seen = std::collections::HashSet::new();
    agents
        .iter()
        .filter(|a| seen.insert(a.node.as_str()))
        .map(|a| {
            a.dropped_membership
                + a.dropped_singleton
                + a.dropped_router
                + a.dropped_dead_letters
                + a.dropped_health
                + a.dropped_depth_samples
        })
        .sum()
}

async fn cluster_view(
    state: &AppState,
    ctx: &Context,
    cluster: &ClusterRow,
    with_map: bool,
) -> Result<ClusterView, UiError> {
    // Links and node pages of this cluster.
    let ctx = Context {
        now_ms: ctx.now_ms,
        silence_ms: ctx.silence_ms,
        names: Vec::new(),
        cluster: Some(cluster.clone()),
        clusters: Vec::new(),
    };
    let store = &state.store;
    let hour_ago = ctx.now_ms - 3_600_000;
    let members = store.members(cluster.id).await?;
    let agents = store.agents(cluster.id).await?;
    let events = store
        .count_events_since(cluster.id, hour_ago, COUNT_CAP)
        .await?;
    let dead_letters: i64 = store
        .dead_letter_counts(
            cluster.id,
            &DeadLetterFilter {
                since_ms: Some(hour_ago),
                ..DeadLetterFilter::default()
            },
        )
        .await?
        .iter()
        .map(|m| m.count)
        .sum();
    let dropped = dropped_total(&agents);
    let map = if with_map {
        Some(super::map::view(state, &ctx, cluster, &members, &agents).await?)
    } else {
        None
    };
    let leader = cluster.leader.as_deref();
    let members: Vec<MemberView> = members
        .iter()
        .filter(|m| m.status != "removed")
        .map(|m| member_view(&ctx, m, leader, &agents))
        .collect();
    Ok(ClusterView {
        // The key: two clusters of the same name show their identities' fingerprints.
        name: cluster.cluster_key.clone(),
        overview_href: href(
            Section::Overview.path(),
            &[("cluster", &cluster.cluster_key)],
        ),
        timeline_href: href(
            Section::Timeline.path(),
            &[("cluster", &cluster.cluster_key)],
        ),
        dead_letters_href: href(
            Section::DeadLetters.path(),
            &[("cluster", &cluster.cluster_key)],
        ),
        leader: cluster.leader.clone(),
        leader_href: ctx.node_href(leader.unwrap_or_default()),
        last_report: TimeText::at(cluster.last_report_ms),
        last_report_age: age(ctx.now_ms, cluster.last_report_ms),
        up: members.iter().filter(|m| m.status == "up").count(),
        unreachable: members.iter().filter(|m| !m.reachable).count(),
        members,
        events_last_hour: if events >= COUNT_CAP {
            format!("≥ {}", count(COUNT_CAP))
        } else {
            count(events)
        },
        dead_letters_last_hour: count(dead_letters),
        any_dead_letters: dead_letters > 0,
        dropped: count(dropped),
        any_dropped: dropped > 0,
        map,
    })
}

async fn build(state: &AppState, req: &HttpRequest) -> Result<OverviewPage, UiError> {
    let query: OverviewQuery = page::query(req)?;
    let ctx = Context::load(state, query.cluster.as_deref()).await?;
    // The cluster asked for first, then the others by name.
    let mut shown: Vec<&ClusterRow> = ctx.cluster.iter().collect();
    shown.extend(
        ctx.clusters
            .iter()
            .filter(|c| Some(c.id) != ctx.cluster.as_ref().map(|c| c.id)),
    );
    let mut clusters = Vec::new();
    for (i, cluster) in shown.into_iter().take(MAX_CLUSTERS).enumerate() {
        clusters.push(cluster_view(state, &ctx, cluster, i == 0).await?);
    }
    Ok(OverviewPage {
        layout: ctx.layout(Section::Overview, "Overview"),
        clusters,
    })
}

/// `GET /ui/`.
pub(crate) async fn page(state: web::Data<AppState>, req: HttpRequest) -> HttpResponse {
    page::respond(build(&state, &req).await)
}
