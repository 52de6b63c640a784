//! Cluster membership on etcd: one lease per host under a prefix, peers discovered by a watch
//! of the prefix, aged out when their key disappears — a [`MembershipProvider`] for
//! `Cluster::builder(&system).with_provider(..)`.
//!
//! Each node holds an [`EtcdLeases`] lease named after its unique address
//! (`<prefix>members/leases/<troupe://system@host:port#incarnation>`), whose owner record is
//! the member's JSON (`{"node": …, "roles": […]}`). The lease's keep-alive is the heartbeat:
//! a node that dies stops renewing and etcd deletes its key after the TTL; a node that leaves
//! revokes it at once. Every node watches the prefix and publishes a view of the keys present
//! (all `Up`, address-ordered; the leader is the first).
//!
//! **Fencing.** The key is the membership token. When this node's own key disappears (expired
//! during a partition, deleted by an operator, or `down` from a peer), the node is *fenced*: it
//! publishes a view without itself — so it stops hosting singletons at once — reports
//! [`MembershipHealth::Fenced`] and never recreates the key; a restart (a new incarnation)
//! rejoins cleanly. The one exception is this node's own `leave()` racing a renewal: that is a
//! graceful exit ([`MembershipHealth::Left`]), never fenced.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, EventType, GetOptions, WatchOptions};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use troupe::ActorSystem;
use troupe::cluster::{
    ClusterError, ClusterView, Departure, Member, MemberStatus, MembershipControl,
    MembershipProvider, ViewSink,
};
use troupe::{Address, UniqueAddress};
use troupe_lease::lease::{Lease, LeaseProvider, LeaseSettings};

use crate::etcd::{EtcdLeases, InvalidPrefix};

/// The state of this node's membership, for health probes: a fenced node should report fatal
/// health (liveness fails) so that it is restarted with a fresh identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MembershipHealth {
    /// Registering (retried every renew interval while etcd cannot be reached).
    Joining,
    /// Registered and renewing.
    Up,
    /// This node's key disappeared: it no longer takes part and never re-registers.
    Fenced(String),
    /// Left gracefully (or shut down).
    Left,
}

/// What each member writes as its lease's owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemberRecord {
    node: UniqueAddress,
    roles: BTreeSet<String>,
}

#[derive(Debug, Deserialize)]
struct LeaseRecord {
    owner: String,
}

/// Membership on etcd; see the module header.
pub struct EtcdMembership {
    client: Client,
    prefix: String,
    roles: BTreeSet<String>,
    settings: LeaseSettings,
    health: watch::Sender<MembershipHealth>,
}

impl std::fmt::Debug for EtcdMembership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdMembership")
            .field("prefix", &self.prefix)
            .field("roles", &self.roles)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl EtcdMembership {
    /// Membership under `prefix` (ends with `/`; one per cluster) with this node's `roles`,
    /// heartbeating with `settings` (whole-second TTL).
    pub fn new(
        client: Client,
        prefix: &str,
        roles: &[&str],
        settings: LeaseSettings,
    ) -> Result<Self, InvalidPrefix> {
        EtcdLeases::new(client.clone(), &format!("{prefix}members/"))?;
        Ok(Self {
            client,
            prefix: prefix.to_owned(),
            roles: roles.iter().map(|r| (*r).to_owned()).collect(),
            settings,
            health: watch::channel(MembershipHealth::Joining).0,
        })
    }

    /// This node's membership state, updated as it changes.
    #[must_use]
    pub fn health(&self) -> watch::Receiver<MembershipHealth> {
        self.health.subscribe()
    }
}

struct Control {
    leases: EtcdLeases,
    client: Client,
    me: UniqueAddress,
    /// Taken (dropped, so renewal stops) on shutdown.
    lease: Mutex<Option<Arc<dyn Lease>>>,
    sink: ViewSink,
    health: watch::Sender<MembershipHealth>,
    members: Mutex<BTreeMap<String, MemberRecord>>,
    leaving: std::sync::atomic::AtomicBool,
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
    done: watch::Sender<bool>,
}

impl MembershipProvider for EtcdMembership {
    fn start(
        self: Box<Self>,
        _system: &ActorSystem,
        sink: ViewSink,
    ) -> Result<Arc<dyn MembershipControl>, ClusterError> {
        let me = sink.remoting().local().clone();
        let record = MemberRecord {
            node: me.clone(),
            roles: self.roles.clone(),
        };
        let owner =
            serde_json::to_string(&record).map_err(|e| ClusterError::Provider(Box::new(e)))?;
        let leases = EtcdLeases::new(self.client.clone(), &format!("{}members/", self.prefix))
            .map_err(|e| ClusterError::Provider(Box::new(e)))?;
        let lease = leases
            .lease(&me.to_string(), &owner, &self.settings)
            .map_err(|e| ClusterError::Provider(Box::new(e)))?;
        let control = Arc::new(Control {
            leases,
            client: self.client.clone(),
            me,
            lease: Mutex::new(Some(lease)),
            sink,
            health: self.health.clone(),
            members: Mutex::new(BTreeMap::new()),
            leaving: std::sync::atomic::AtomicBool::new(false),
            tasks: Mutex::new(Vec::new()),
            done: watch::channel(false).0,
        });
        let register = tokio::spawn(register(Arc::clone(&control), self.settings));
        let observe = tokio::spawn(observe(Arc::clone(&control)));
        control
            .tasks
            .lock()
            .extend([register.abort_handle(), observe.abort_handle()]);
        Ok(control)
    }
}

/// Acquire this node's lease (retrying while etcd is unreachable); on loss, fence.
async fn register(control: Arc<Control>, settings: LeaseSettings) {
    loop {
        let weak = Arc::downgrade(&control);
        let on_lost = Box::new(move |lost: troupe_lease::lease::LeaseLost| {
            if let Some(control) = weak.upgrade() {
                control.fence(lost.reason);
            }
        });
        let Some(lease) = control.lease.lock().clone() else {
            return;
        };
        match lease.acquire(on_lost).await {
            Ok(Some(_)) => {
                control.health.send_replace(MembershipHealth::Up);
                return;
            }
            Ok(None) => {
                // Our own key (same address and incarnation) already exists: only a bug or an
                // operator could have written it. Fence rather than share an identity.
                control.fence("another registration holds this node's key".to_owned());
                return;
            }
            Err(e) => {
                tracing::warn!(node = %control.me, error = %e, "cannot register with etcd; retrying");
                tokio::time::sleep(settings.renew_interval()).await;
            }
        }
    }
}

impl Control {
    fn members_prefix(&self) -> String {
        self.leases.key("")
    }

    fn fence(&self, reason: String) {
        if self.leaving.load(std::sync::atomic::Ordering::SeqCst) {
            return; // our own leave raced the renewal: a graceful exit
        }
        tracing::error!(node = %self.me, %reason, "fenced: this node's membership key is gone; it stops taking part and will not re-register");
        // Depart before health says fenced: whoever wakes on the health change must find the
        // cluster already departed.
        self.sink.depart(Departure::Fenced {
            reason: format!("etcd membership: {reason}"),
        });
        self.health
            .send_replace(MembershipHealth::Fenced(reason.clone()));
        self.publish();
        self.stop_tasks();
    }

    fn stop_tasks(&self) {
        for task in self.tasks.lock().drain(..) {
            task.abort();
        }
        self.done.send_replace(true);
    }

    /// The view of the keys present; without this node once it is fenced or left.
    fn publish(&self) {
        let excluded = !matches!(
            *self.health.borrow(),
            MembershipHealth::Up | MembershipHealth::Joining
        );
        let members: Vec<Member> = self
            .members
            .lock()
            .values()
            .filter(|r| !(excluded && r.node == self.me))
            .map(|r| Member {
                node: r.node.clone(),
                status: MemberStatus::Up,
                roles: r.roles.clone(),
            })
            .collect();
        self.sink
            .publish(ClusterView::from_members(Some(self.me.clone()), members));
    }

    fn parse(&self, key: &[u8], value: &[u8]) -> Option<(String, MemberRecord)> {
        let key = String::from_utf8_lossy(key).into_owned();
        let record = serde_json::from_slice::<LeaseRecord>(value)
            .map_err(|e| e.to_string())
            .and_then(|l| {
                serde_json::from_str::<MemberRecord>(&l.owner).map_err(|e| e.to_string())
            });
        match record {
            Ok(record) => Some((key, record)),
            Err(e) => {
                tracing::warn!(%key, error = %e, "ignoring a malformed member record");
                None
            }
        }
    }
}

/// Watch the members prefix: a snapshot, then every change; after a broken watch, start over.
async fn observe(control: Arc<Control>) {
    let prefix = control.members_prefix();
    loop {
        let mut client = control.client.clone();
        let snapshot = match client
            .get(prefix.clone(), Some(GetOptions::new().with_prefix()))
            .await
        {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "membership snapshot failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let revision = snapshot.header().map_or(0, |h| h.revision());
        {
            let mut members = control.members.lock();
            members.clear();
            for kv in snapshot.kvs() {
                if let Some((key, record)) = control.parse(kv.key(), kv.value()) {
                    members.insert(key, record);
                }
            }
        }
        control.publish();
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(revision + 1);
        let mut stream = match client.watch(prefix.clone(), Some(options)).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "membership watch failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        loop {
            let message = match stream.message().await {
                Ok(Some(m)) if !m.canceled() => m,
                Ok(_) | Err(_) => break,
            };
            {
                let mut members = control.members.lock();
                for event in message.events() {
                    let Some(kv) = event.kv() else { continue };
                    match event.event_type() {
                        EventType::Put => {
                            if let Some((key, record)) = control.parse(kv.key(), kv.value()) {
                                members.insert(key, record);
                            }
                        }
                        EventType::Delete => {
                            members.remove(&*String::from_utf8_lossy(kv.key()));
                        }
                    }
                }
            }
            control.publish();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

impl MembershipControl for Control {
    fn join(&self, _via: Address) {
        // etcd is the seed: registering is joining.
    }

    fn leave(&self) {
        self.leaving
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.health.send_replace(MembershipHealth::Left);
        self.publish();
        self.sink.depart(Departure::Left);
        let lease = self.lease.lock().take();
        for task in self.tasks.lock().drain(..) {
            task.abort();
        }
        let done = self.done.clone();
        tokio::spawn(async move {
            if let Some(lease) = lease
                && let Err(e) = lease.release().await
            {
                tracing::warn!(error = %e, "could not revoke the membership key; it expires after its TTL");
            }
            done.send_replace(true);
        });
    }

    fn down(&self, node: Address) {
        // Deleting a member's key fences it (it never re-registers) and ages it out everywhere.
        let keys: Vec<String> = self
            .members
            .lock()
            .iter()
            .filter(|(_, r)| r.node.address == node)
            .map(|(k, _)| k.clone())
            .collect();
        let mut client = self.client.clone();
        tokio::spawn(async move {
            for key in keys {
                if let Err(e) = client.delete(key.clone(), None).await {
                    tracing::warn!(%key, error = %e, "could not delete a downed member's key");
                }
            }
        });
    }

    fn leave_member(&self, node: Address) {
        self.down(node);
    }

    fn shutdown(&self) {
        self.leaving
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.health.send_replace(MembershipHealth::Left);
        self.sink.depart(Departure::Stopped);
        // Dropping the handle stops its renewal without revoking: the key expires after the
        // TTL, as after a crash.
        drop(self.lease.lock().take());
        self.stop_tasks();
    }

    fn terminated(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        let mut done = self.done.subscribe();
        Box::pin(async move {
            let _ = done.wait_for(|d| *d).await;
        })
    }
}
