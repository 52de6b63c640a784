//! `troupe_members{cluster,health}`: how many members each cluster has in each health, as the
//! API shows them, kept current on ingest and by the silence sweep.
//!
//! # One health per member
//! Every current member incarnation that is not removed counts once, under the first of:
//! `down` (status down), `unreachable` (some member cannot reach it), `unknown` (its agent has
//! sent nothing for longer than `--agent-silence-ms`, as the API's `unknown`), `leaving`
//! (leaving or exiting), `joining` (joining or weakly up), then for an up member its agent's
//! last reported health (`starting`, `ready`, `draining`, `fenced`), or `up` when its agent
//! reported none (no agent at that address, or none yet). The agent of a member is the one of
//! the same incarnation, else the newest at its address, as in the members API.
//!
//! # Bounded labels
//! `health` is the closed set [`MemberHealth::ALL`] (10 values), every one exported (at 0 when
//! no member has it) for each exported cluster; `cluster` is the cluster key of a cluster in
//! the store (clusters exist only through authenticated ingest), at most
//! [`MAX_GAUGE_CLUSTERS`] of them — the most recently reporting — so the family never has more
//! than 10 × 1,000 series. A cluster deleted from the store (retention) loses its series.
//!
//! # When it is computed
//! From the store, so every replica behind one database exports the same counts. Ingest marks
//! its cluster dirty and wakes the sweep, which recomputes dirty clusters at most every
//! [`MIN_PASS_GAP`] (a burst of batches costs one recount). The sweep also runs every
//! [`sweep_interval`] (a third of the silence limit, between 1 s and 5 s), recounting every
//! cluster that reported within the silence limit plus two sweep intervals: a member whose
//! agent stops reporting turns `unknown` at most one sweep interval after it went silent.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::metrics::Metrics;
use crate::store::{AgentRow, ClusterRow, MemberRow, Store, StoreError};
use crate::time::now_ms;

/// The most clusters the gauge exports (the most recently reporting ones).
pub const MAX_GAUGE_CLUSTERS: usize = 1_000;

/// The shortest time between two recounts triggered by ingest.
pub const MIN_PASS_GAP: Duration = Duration::from_millis(200);

/// A member's health as the gauge counts it; see the module header for the order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemberHealth {
    /// Joining or weakly up.
    Joining,
    /// Up, and its agent reported no health.
    Up,
    /// Up; its agent is starting.
    Starting,
    /// Up; its agent is ready.
    Ready,
    /// Up; its agent is draining.
    Draining,
    /// Up; its agent is fenced.
    Fenced,
    /// Leaving or exiting.
    Leaving,
    /// Marked down.
    Down,
    /// Some member cannot reach it.
    Unreachable,
    /// Its agent has been silent for longer than the silence limit.
    Unknown,
}

impl MemberHealth {
    /// Every value, in label order.
    pub const ALL: [Self; 10] = [
        Self::Joining,
        Self::Up,
        Self::Starting,
        Self::Ready,
        Self::Draining,
        Self::Fenced,
        Self::Leaving,
        Self::Down,
        Self::Unreachable,
        Self::Unknown,
    ];

    /// The label value.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Joining => "joining",
            Self::Up => "up",
            Self::Starting => "starting",
            Self::Ready => "ready",
            Self::Draining => "draining",
            Self::Fenced => "fenced",
            Self::Leaving => "leaving",
            Self::Down => "down",
            Self::Unreachable => "unreachable",
            Self::Unknown => "unknown",
        }
    }

    /// The health of `member` whose agent is `agent`, at `now_ms`; `None` for a removed one.
    #[must_use]
    pub fn of(
        member: &MemberRow,
        agent: Option<&AgentRow>,
        now_ms: i64,
        silence_ms: i64,
    ) -> Option<Self> {
        let status = member.status.as_str();
        Some(match status {
            "removed" => return None,
            "down" => Self::Down,
            _ if !member.reachable => Self::Unreachable,
            _ if agent.is_some_and(|a| a.silent_at(now_ms, silence_ms)) => Self::Unknown,
            "leaving" | "exiting" => Self::Leaving,
            "joining" | "weakly-up" => Self::Joining,
            _ => match agent.and_then(|a| a.health.as_deref()) {
                Some("starting") => Self::Starting,
                Some("ready") => Self::Ready,
                Some("draining") => Self::Draining,
                Some("fenced") => Self::Fenced,
                _ => Self::Up,
            },
        })
    }
}

/// How many of `members` have each health, in [`MemberHealth::ALL`] order.
#[must_use]
pub fn count(
    members: &[MemberRow],
    agents: &[AgentRow],
    now_ms: i64,
    silence_ms: i64,
) -> [i64; 10] {
    let mut counts = [0; 10];
    for member in members {
        let agent = agents
            .iter()
            .find(|a| a.node == member.address && a.incarnation == member.uid)
            .or_else(|| agents.iter().find(|a| a.node == member.address));
        if let Some(health) = MemberHealth::of(member, agent, now_ms, silence_ms) {
            let at = MemberHealth::ALL.iter().position(|h| *h == health);
            if let Some(at) = at {
                counts[at] += 1;
            }
        }
    }
    counts
}

/// How often the sweep recounts recently reporting clusters: a third of the silence limit,
/// between 1 s and 5 s.
#[must_use]
pub fn sweep_interval(silence_ms: u64) -> Duration {
    Duration::from_millis(silence_ms / 3).clamp(Duration::from_secs(1), Duration::from_secs(5))
}

/// The clusters ingest changed since the last recount; shared by ingest and the sweep.
#[derive(Debug, Default)]
pub struct MemberGauge {
    dirty: Mutex<HashSet<String>>,
    wake: Notify,
}

impl MemberGauge {
    /// Ingest stored a batch of cluster `key`: recount it soon.
    pub fn touch(&self, key: &str) {
        let mut dirty = self.dirty.lock().unwrap_or_else(|e| e.into_inner());
        if !dirty.contains(key) {
            dirty.insert(key.to_owned());
        }
        drop(dirty);
        self.wake.notify_one();
    }

    fn take_dirty(&self) -> HashSet<String> {
        std::mem::take(&mut *self.dirty.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Recounts clusters until shutdown; see the module header.
pub async fn sweep_loop(
    store: Store,
    metrics: Arc<Metrics>,
    gauge: Arc<MemberGauge>,
    silence_ms: u64,
    mut shutdown: watch::Receiver<bool>,
) {
    let interval = sweep_interval(silence_ms);
    let silence = i64::try_from(silence_ms).unwrap_or(i64::MAX);
    let mut every = tokio::time::interval(interval);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The clusters exported; and those ingest changed that no pass has recounted yet (kept
    // across a failed pass).
    let mut counted: HashSet<String> = HashSet::new();
    let mut pending: HashSet<String> = HashSet::new();
    loop {
        let full = tokio::select! {
            _ = every.tick() => true,
            () = gauge.wake.notified() => false,
            _ = shutdown.changed() => return,
        };
        if *shutdown.borrow() {
            return;
        }
        pending.extend(gauge.take_dirty());
        let pass = Pass {
            store: &store,
            metrics: &metrics,
            silence_ms: silence,
            interval,
        };
        match pass.run(&mut counted, &pending, full).await {
            Ok(()) => pending.clear(),
            // The next tick or ingest tries again.
            Err(error) => tracing::warn!(
                %error,
                "counting members for troupe_members failed; retrying at the next sweep"
            ),
        }
        if !full {
            tokio::time::sleep(MIN_PASS_GAP).await;
        }
    }
}

/// What one recount needs.
struct Pass<'a> {
    store: &'a Store,
    metrics: &'a Metrics,
    silence_ms: i64,
    interval: Duration,
}

impl Pass<'_> {
    /// Recounts the `dirty` clusters, and with `full` every cluster that reported recently or
    /// was never counted; drops the series of clusters no longer exported.
    async fn run(
        &self,
        counted: &mut HashSet<String>,
        dirty: &HashSet<String>,
        full: bool,
    ) -> Result<(), StoreError> {
        let mut clusters: Vec<ClusterRow> = self.store.clusters().await?;
        clusters.sort_by_key(|c| std::cmp::Reverse(c.last_report_ms));
        clusters.truncate(MAX_GAUGE_CLUSTERS);
        let keep: HashSet<&str> = clusters.iter().map(|c| c.cluster_key.as_str()).collect();
        counted.retain(|key| {
            let stays = keep.contains(key.as_str());
            if !stays {
                self.metrics
                    .remove_members(key, MemberHealth::ALL.map(MemberHealth::label));
            }
            stays
        });
        let margin = 2 * i64::try_from(self.interval.as_millis()).unwrap_or(i64::MAX / 4);
        for cluster in &clusters {
            let recent = cluster
                .last_report_ms
                .saturating_add(self.silence_ms)
                .saturating_add(margin)
                >= now_ms();
            let due = dirty.contains(&cluster.cluster_key)
                || !counted.contains(&cluster.cluster_key)
                || (full && recent);
            if !due {
                continue;
            }
            let members = self.store.members(cluster.id).await?;
            let agents = self.store.agents(cluster.id).await?;
            let counts = count(&members, &agents, now_ms(), self.silence_ms);
            self.metrics.set_members(
                &cluster.cluster_key,
                MemberHealth::ALL
                    .map(MemberHealth::label)
                    .into_iter()
                    .zip(counts),
            );
            counted.insert(cluster.cluster_key.clone());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(address: &str, uid: i64, status: &str, reachable: bool) -> MemberRow {
        MemberRow {
            address: address.to_owned(),
            uid,
            status: status.to_owned(),
            status_rank: 0,
            first_seen_ms: 0,
            roles: "[]".to_owned(),
            status_ms: 0,
            reachable,
            observers: "[]".to_owned(),
        }
    }

    fn agent(node: &str, incarnation: i64, last_report_ms: i64, health: Option<&str>) -> AgentRow {
        AgentRow {
            id: 1,
            node: node.to_owned(),
            incarnation,
            meta_node: None,
            first_seen_ms: 0,
            last_report_ms,
            last_sent_ms: 0,
            last_sequence: 1,
            health: health.map(str::to_owned),
            dropped_membership: 0,
            dropped_singleton: 0,
            dropped_router: 0,
            dropped_dead_letters: 0,
            dropped_health: 0,
            dropped_depth_samples: 0,
            dropped_spool_batches: 0,
            clock_skew_ms: 0,
        }
    }

    fn at(health: MemberHealth) -> usize {
        MemberHealth::ALL.iter().position(|h| *h == health).unwrap()
    }

    #[test]
    fn each_member_counts_once_under_the_first_health_that_applies() {
        let members = [
            member("a:1", 1, "up", true),
            member("b:1", 1, "up", true),
            member("c:1", 1, "up", false),
            member("d:1", 1, "down", false),
            member("e:1", 1, "leaving", true),
            member("f:1", 1, "removed", true),
            member("g:1", 1, "weakly-up", true),
            member("h:1", 1, "up", true),
            member("i:1", 2, "up", true),
        ];
        let agents = [
            agent("a:1", 1, 100_000, Some("ready")),
            // Silent: last report 20 s before now, limit 15 s.
            agent("b:1", 1, 80_000, Some("ready")),
            agent("c:1", 1, 80_000, Some("ready")),
            agent("e:1", 1, 100_000, Some("draining")),
            // No agent for h; i's agent is of another incarnation and still counts.
            agent("i:1", 1, 100_000, Some("fenced")),
        ];
        let counts = count(&members, &agents, 100_000, 15_000);
        assert_eq!(counts.iter().sum::<i64>(), 8, "removed is not counted");
        assert_eq!(counts[at(MemberHealth::Ready)], 1);
        assert_eq!(counts[at(MemberHealth::Unknown)], 1);
        assert_eq!(counts[at(MemberHealth::Unreachable)], 1, "before unknown");
        assert_eq!(counts[at(MemberHealth::Down)], 1, "before unreachable");
        assert_eq!(counts[at(MemberHealth::Leaving)], 1);
        assert_eq!(counts[at(MemberHealth::Joining)], 1);
        assert_eq!(counts[at(MemberHealth::Up)], 1);
        assert_eq!(counts[at(MemberHealth::Fenced)], 1);
    }

    #[test]
    fn the_sweep_runs_every_third_of_the_silence_limit_within_one_to_five_seconds() {
        assert_eq!(sweep_interval(3_000), Duration::from_secs(1));
        assert_eq!(sweep_interval(6_000), Duration::from_secs(2));
        assert_eq!(sweep_interval(15_000), Duration::from_secs(5));
        assert_eq!(sweep_interval(86_400_000), Duration::from_secs(5));
    }
}
