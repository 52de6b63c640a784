//! The cluster map of the overview, and `GET /ui/map`: the same map alone, which the page's
//! script fetches to keep its mailbox depths and silent agents current between events.
//!
//! # What it reads
//! The current-state tables (members, agents, singletons, routers) and each agent's newest
//! depth tick of the last [`DEPTH_WINDOW_MS`] (at most [`DEPTH_TICKS`] ticks, newest first):
//! a bounded read whatever the history's size.

use std::collections::{HashMap, HashSet};

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use troupe_protocol::DepthSample;
use troupe_web::format::{duration, href};
use troupe_web::map::{ClusterMap, MapMember, MapRouter};
use troupe_web::pages::{MapFragment, MapView, status_class};

use super::page::{self, Context, UiError};
use crate::state::AppState;
use crate::store::{AgentRow, ClusterRow, MemberRow, SILENT_HEALTH, string_list};

/// How old an agent's newest depth tick may be to show as its routees' depth.
pub(crate) const DEPTH_WINDOW_MS: i64 = 60_000;
/// Depth ticks read at most (the newest first; one per agent is used).
const DEPTH_TICKS: i64 = 4_000;
/// Members drawn at most (in address order; the member table lists every one).
const MAX_NODES: usize = 500;

#[derive(Debug, Default, Deserialize)]
struct MapQuery {
    cluster: Option<String>,
}

/// The map of `cluster`, whose `members` and `agents` (newest incarnation first per address)
/// the caller has read.
pub(crate) async fn view(
    state: &AppState,
    ctx: &Context,
    cluster: &ClusterRow,
    members: &[MemberRow],
    agents: &[AgentRow],
) -> Result<MapView, UiError> {
    let store = &state.store;
    let singletons = store.singletons(cluster.id).await?;
    let routers = store.routers(cluster.id).await?;
    let ticks = store
        .depth_ticks_in(
            cluster.id,
            None,
            &[(ctx.now_ms - DEPTH_WINDOW_MS, ctx.now_ms + 1)],
            DEPTH_TICKS,
        )
        .await?;
    // Each agent's newest tick: per node, the depth summed per router.
    let mut seen = HashSet::new();
    let mut depths: HashMap<(String, String), u32> = HashMap::new();
    for tick in &ticks {
        if !seen.insert(tick.node.as_str()) {
            continue;
        }
        let Ok(samples) = serde_json::from_str::<Vec<DepthSample>>(&tick.samples) else {
            continue;
        };
        for sample in samples {
            if let Some(router) = sample.router {
                let depth = depths.entry((router, tick.node.clone())).or_default();
                *depth = depth.saturating_add(sample.depth);
            }
        }
    }
    let mut hosted: HashMap<&str, Vec<String>> = HashMap::new();
    for s in &singletons {
        if let Some(host) = s.host.as_deref() {
            hosted.entry(host).or_default().push(s.name.clone());
        }
    }
    let leader = cluster.leader.as_deref();
    let shown: Vec<&MemberRow> = members
        .iter()
        .filter(|m| m.status != "removed")
        .take(MAX_NODES)
        .collect();
    let map_members: Vec<MapMember> = shown
        .iter()
        .map(|m| {
            let agent = agents.iter().find(|a| a.node == m.address);
            MapMember {
                address: m.address.clone(),
                machine: agent.and_then(|a| a.meta_node.clone()),
                status: m.status.clone(),
                status_class: status_class(&m.status),
                roles: string_list(&m.roles),
                health: agent.map_or_else(String::new, |a| {
                    a.health_at(ctx.now_ms, ctx.silence_ms)
                        .unwrap_or(SILENT_HEALTH)
                        .to_owned()
                }),
                leader: leader == Some(m.address.as_str()),
                silent: agent.is_some_and(|a| a.silent_at(ctx.now_ms, ctx.silence_ms)),
                singletons: hosted.remove(m.address.as_str()).unwrap_or_default(),
                href: ctx.node_href(&m.address),
            }
        })
        .collect();
    let unreachable: Vec<(String, String)> = shown
        .iter()
        .flat_map(|m| {
            string_list(&m.observers)
                .into_iter()
                .map(|observer| (observer, m.address.clone()))
        })
        .collect();
    let map_routers: Vec<MapRouter> = routers
        .iter()
        .map(|r| MapRouter {
            path: r.path.clone(),
            strategy: r.strategy.clone(),
            routees: string_list(&r.routees)
                .into_iter()
                .map(|address| {
                    let depth = depths.get(&(r.path.clone(), address.clone())).copied();
                    (address, depth)
                })
                .collect(),
        })
        .collect();
    Ok(MapView {
        map: ClusterMap::layout(&map_members, &unreachable, &map_routers),
        src: href("/ui/map", &[("cluster", &cluster.cluster_key)]),
        silence: duration(u64::try_from(ctx.silence_ms).unwrap_or(0)),
    })
}

async fn build(state: &AppState, req: &HttpRequest) -> Result<MapFragment, UiError> {
    let query: MapQuery = page::query(req)?;
    let ctx = Context::load(state, query.cluster.as_deref()).await?;
    let Some(cluster) = &ctx.cluster else {
        return Err(UiError::NotFound("No cluster has reported yet.".to_owned()));
    };
    let members = state.store.members(cluster.id).await?;
    let agents = state.store.agents(cluster.id).await?;
    Ok(MapFragment {
        view: view(state, &ctx, cluster, &members, &agents).await?,
    })
}

/// `GET /ui/map`.
pub(crate) async fn fragment(state: web::Data<AppState>, req: HttpRequest) -> HttpResponse {
    page::respond(build(&state, &req).await)
}
