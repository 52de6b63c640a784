//! Directory eviction: when a member is removed (it left, was downed, or fenced and aged out),
//! the leader releases every directory claim the member held, so that a survivor can claim
//! those actors (seed 003: "by the time the Lease is gone … evictHost has released every
//! directory claim it held").
//!
//! # Exactly once
//! Only the node that leads the view in which the member is gone evicts. During a leadership
//! change two nodes may both believe they lead and both evict: the directory removes each
//! claim once, the second `evict_host` answers no actors, and only an eviction that released
//! something is reported. So each claim is released, and each release reported, once
//! cluster-wide.
//!
//! # When the directory is away
//! The evictor retries with backoff (250 ms doubling to 5 s) for as long as it leads and the
//! node is in the cluster; a new leader that saw the same removal takes over the retrying.

use std::sync::Arc;
use std::time::Duration;

use troupe::UniqueAddress;
use troupe::cluster::{Cluster, ClusterEvent, ClusterNotification};
use troupe::directory::Directory;

use crate::reporter::ReporterHandle;

/// A member's name in the directory: its unique address (`troupe://sys@host:port#uid`), so a
/// restarted process (a new incarnation at the same address) never owns, nor loses, what its
/// previous incarnation claimed.
#[must_use]
pub fn directory_host(node: &UniqueAddress) -> String {
    node.to_string()
}

/// The running evictor; dropping it stops it.
#[derive(Debug)]
pub struct Evictor {
    task: tokio::task::AbortHandle,
}

impl Drop for Evictor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Evict the claims of every member removed from `cluster` while this node leads.
#[must_use]
pub fn start(
    cluster: &Cluster,
    directory: Arc<dyn Directory>,
    reporter: Option<ReporterHandle>,
) -> Evictor {
    let cluster = cluster.clone();
    let mut events = cluster.subscribe();
    let task = tokio::spawn(async move {
        while let Some(notification) = events.recv().await {
            let ClusterNotification::Event(ClusterEvent::MemberRemoved { member, previous }) =
                notification
            else {
                continue;
            };
            if member.node == *cluster.self_node() {
                continue;
            }
            let directory = Arc::clone(&directory);
            let cluster = cluster.clone();
            let reporter = reporter.clone();
            tokio::spawn(async move {
                evict(
                    &cluster,
                    &*directory,
                    &member.node,
                    previous.name(),
                    reporter.as_ref(),
                )
                .await;
            });
        }
    });
    Evictor {
        task: task.abort_handle(),
    }
}

fn leads(cluster: &Cluster) -> bool {
    cluster.departure().is_none() && cluster.leader().as_ref() == Some(cluster.self_address())
}

async fn evict(
    cluster: &Cluster,
    directory: &dyn Directory,
    node: &UniqueAddress,
    previous: &str,
    reporter: Option<&ReporterHandle>,
) {
    let host = directory_host(node);
    let mut backoff = Duration::from_millis(250);
    while leads(cluster) {
        match directory.evict_host(&host).await {
            Ok(actors) => {
                if actors.is_empty() {
                    tracing::debug!(%host, "removed member held no directory claims");
                } else {
                    tracing::info!(%host, previous, claims = actors.len(), "evicted the directory claims of a removed member");
                    if let Some(reporter) = reporter {
                        reporter.host_evicted(&host, previous, actors);
                    }
                }
                return;
            }
            Err(error) => {
                tracing::warn!(%host, %error, retry_in = ?backoff, "could not evict a removed member's directory claims; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}
