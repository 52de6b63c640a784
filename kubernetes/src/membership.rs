//! Cluster membership on Kubernetes Leases: troupe's [`MembershipProvider`] without an extra
//! store.
//!
//! - One Lease per host, named `<cluster>-<incarnation as 16 hex digits>`, labelled
//!   `troupe.dev/cluster=<cluster>`, with the host's address, incarnation, roles and status in
//!   annotations and `holderIdentity` = the host's unique address. `spec.renewTime` is the
//!   heartbeat, written every `renew_interval`; `leaseDurationSeconds` is the TTL.
//! - Peers are discovered by a list and then a watch of Leases selected by the cluster label;
//!   a peer is a member while `renewTime + leaseDurationSeconds` lies ahead (on this host's
//!   clock) and is aged out (removed, for good) when it passes. The leader (lowest address)
//!   deletes Leases that expired a full TTL ago.
//! - **Fencing**: a renewal answered `404` means the Lease was deleted — by an operator, by
//!   `down`, or by the leader after the host was aged out. The host then *fences*: it never
//!   recreates its Lease, publishes a view without itself (everything it hosted stops; the others
//!   stay as it last saw them), stops
//!   taking part and reports [`HostHealth::Fenced`], which liveness reports as fatal so the pod
//!   restarts with a fresh identity. Likewise when its renewals fail for longer than
//!   `ttl − max_clock_skew`, when a renewal lands after that, or when the watch shows its Lease
//!   deleted. The exception: a `404` racing the host's own graceful `leave` is not a fence.
//! - `leave` marks the Lease `leaving` (peers see `MemberLeft`), then deletes it (peers see
//!   `MemberRemoved`). `down(address)` deletes that host's Lease. `join` does nothing: a host
//!   joins by creating its Lease when the provider starts. `leave_member` is not supported
//!   (another host's Lease is not ours to mark); use `down`.
//!
//! The decisions are made by the pure [`MembershipMachine`]; this module is the async shell.

pub mod machine;

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease as LeaseObject, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, PostParams, Preconditions, WatchEvent,
    WatchParams,
};
use tokio::sync::{mpsc, watch};
use troupe::ActorSystem;
use troupe::cluster::{ClusterError, Departure, MembershipControl, MembershipProvider, ViewSink};
use troupe::{Address, UniqueAddress};

pub use machine::{
    Action, Event, HostHealth, MembershipMachine, Now, PeerLease, Purpose, WriteError,
};

use crate::error::{api_code, describe};
use crate::settings::{KubeTiming, TimingError};

/// The label every member Lease carries: `troupe.dev/cluster=<cluster>`.
pub const CLUSTER_LABEL: &str = "troupe.dev/cluster";
/// Annotation: the host's address, `troupe://<system>@<host>:<port>`.
pub const ADDRESS_ANNOTATION: &str = "troupe.dev/address";
/// Annotation: the host's incarnation (decimal).
pub const INCARNATION_ANNOTATION: &str = "troupe.dev/incarnation";
/// Annotation: the host's roles, comma-separated.
pub const ROLES_ANNOTATION: &str = "troupe.dev/roles";
/// Annotation: `up` or `leaving`.
pub const STATUS_ANNOTATION: &str = "troupe.dev/status";

/// Settings of Lease membership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeMembershipSettings {
    /// The namespace of the Leases (default `default`).
    pub namespace: String,
    /// The cluster's name: the value of the label every member Lease carries (default
    /// `troupe`), and the Lease names' prefix unless `lease_prefix` says otherwise.
    pub cluster: String,
    /// Member Leases are named `<lease_prefix>-<incarnation>`; `None`: the cluster's name.
    pub lease_prefix: Option<String>,
    /// The key of the label that carries `cluster` and that discovery selects on; `None`:
    /// [`CLUSTER_LABEL`] (`troupe.dev/cluster`).
    pub label_key: Option<String>,
    /// TTL, renew interval, clock skew.
    pub timing: KubeTiming,
    /// This host's roles.
    pub roles: BTreeSet<String>,
}

impl Default for KubeMembershipSettings {
    fn default() -> Self {
        Self {
            namespace: "default".to_owned(),
            cluster: "troupe".to_owned(),
            lease_prefix: None,
            label_key: None,
            timing: KubeTiming::default(),
            roles: BTreeSet::new(),
        }
    }
}

impl KubeMembershipSettings {
    /// Check every value.
    pub fn validate(&self) -> Result<(), TimingError> {
        self.timing.validate()?;
        let label = |s: &str, max: usize| {
            !s.is_empty()
                && s.len() <= max
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && s.as_bytes()[0].is_ascii_alphanumeric()
                && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
        };
        if !label(&self.namespace, 63) {
            return Err(TimingError(format!(
                "namespace {:?} is not a valid namespace: 1–63 lower-case letters, digits and '-', starting and ending alphanumeric",
                self.namespace
            )));
        }
        if !label(self.lease_prefix(), 46) {
            return Err(TimingError(format!(
                "Lease name prefix {:?} is not allowed: 1–46 lower-case letters, digits and '-', starting and ending alphanumeric (it begins every member Lease's name)",
                self.lease_prefix()
            )));
        }
        let value_ok = !self.cluster.is_empty()
            && self.cluster.len() <= 63
            && self
                .cluster
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && self.cluster.as_bytes()[0].is_ascii_alphanumeric()
            && self.cluster.as_bytes()[self.cluster.len() - 1].is_ascii_alphanumeric();
        if !value_ok {
            return Err(TimingError(format!(
                "cluster name {:?} is not allowed as a label value: 1–63 letters, digits, '-', '_' and '.', starting and ending alphanumeric",
                self.cluster
            )));
        }
        if self.label_key().is_empty() || self.label_key().contains(['=', ',', ' ']) {
            return Err(TimingError(format!(
                "label key {:?} is not a label key",
                self.label_key()
            )));
        }
        for role in &self.roles {
            if role.is_empty() || role.contains(',') {
                return Err(TimingError(format!(
                    "role {role:?} is not allowed: roles are non-empty and contain no ','"
                )));
            }
        }
        Ok(())
    }

    /// The label selector of this cluster's Leases.
    #[must_use]
    pub fn selector(&self) -> String {
        format!("{}={}", self.label_key(), self.cluster)
    }

    /// The prefix of member Lease names.
    #[must_use]
    pub fn lease_prefix(&self) -> &str {
        self.lease_prefix.as_deref().unwrap_or(&self.cluster)
    }

    /// The key of the cluster label.
    #[must_use]
    pub fn label_key(&self) -> &str {
        self.label_key.as_deref().unwrap_or(CLUSTER_LABEL)
    }
}

/// The name of the Lease of host `node`, whose Lease names begin with `prefix` (the
/// cluster's name by default).
#[must_use]
pub fn lease_name(prefix: &str, node: &UniqueAddress) -> String {
    format!("{prefix}-{:016x}", node.incarnation)
}

/// A member Lease that cannot be read: which Lease and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("member Lease {lease:?} is malformed: {problem}")]
pub struct MalformedLease {
    /// The Lease's name (or `?`).
    pub lease: String,
    /// What is wrong.
    pub problem: String,
}

/// Read a member Lease; a malformed one is an error naming the Lease and the problem.
pub fn parse_member_lease(object: &LeaseObject) -> Result<PeerLease, MalformedLease> {
    let lease = object
        .metadata
        .name
        .clone()
        .unwrap_or_else(|| "?".to_owned());
    let err = |problem: String| MalformedLease {
        lease: lease.clone(),
        problem,
    };
    let resource_version = object
        .metadata
        .resource_version
        .clone()
        .filter(|rv| !rv.is_empty())
        .ok_or_else(|| err("metadata.resourceVersion is missing".to_owned()))?;
    let annotations = object.metadata.annotations.clone().unwrap_or_default();
    let annotation = |key: &str| {
        annotations
            .get(key)
            .cloned()
            .ok_or_else(|| err(format!("annotation {key} is missing")))
    };
    let address_text = annotation(ADDRESS_ANNOTATION)?;
    let address: Address = address_text
        .parse()
        .map_err(|e| err(format!("annotation {ADDRESS_ANNOTATION}: {e}")))?;
    let incarnation_text = annotation(INCARNATION_ANNOTATION)?;
    let incarnation: u64 = incarnation_text.parse().map_err(|_| {
        err(format!(
            "annotation {INCARNATION_ANNOTATION} is {incarnation_text:?}, expected a decimal number"
        ))
    })?;
    let roles = annotations
        .get(ROLES_ANNOTATION)
        .map(|r| {
            r.split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let leaving = match annotations.get(STATUS_ANNOTATION).map(String::as_str) {
        None | Some("up") => false,
        Some("leaving") => true,
        Some(other) => {
            return Err(err(format!(
                "annotation {STATUS_ANNOTATION} is {other:?}, expected \"up\" or \"leaving\""
            )));
        }
    };
    let spec = object
        .spec
        .as_ref()
        .ok_or_else(|| err("spec is missing".to_owned()))?;
    let renew_time = spec
        .renew_time
        .as_ref()
        .map(|t| t.0)
        .ok_or_else(|| err("spec.renewTime is missing".to_owned()))?;
    let duration = match spec.lease_duration_seconds {
        Some(d) if d > 0 => Duration::from_secs(d.unsigned_abs().into()),
        other => {
            return Err(err(format!(
                "spec.leaseDurationSeconds is {other:?}, expected a positive number"
            )));
        }
    };
    Ok(PeerLease {
        lease,
        resource_version,
        node: UniqueAddress {
            address,
            incarnation,
        },
        roles,
        renew_time,
        duration,
        leaving,
    })
}

/// Lease membership for one host. Build it, keep [`KubeMembership::health`], then hand it to
/// `Cluster::builder(&system).with_provider(..)`.
pub struct KubeMembership {
    client: kube::Client,
    settings: KubeMembershipSettings,
    health: watch::Sender<HostHealth>,
}

impl fmt::Debug for KubeMembership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeMembership")
            .field("settings", &self.settings)
            .field("health", &*self.health.borrow())
            .finish()
    }
}

impl KubeMembership {
    /// Lease membership through `client` (see [`crate::client`] for credentials).
    pub fn new(
        client: kube::Client,
        settings: KubeMembershipSettings,
    ) -> Result<Self, TimingError> {
        settings.validate()?;
        Ok(Self {
            client,
            settings,
            health: watch::channel(HostHealth::Starting).0,
        })
    }

    /// This host's health, updated on every change; [`HostHealth::Fenced`] is fatal.
    #[must_use]
    pub fn health(&self) -> watch::Receiver<HostHealth> {
        self.health.subscribe()
    }
}

enum Command {
    Leave,
    Down(Address),
    Shutdown,
}

struct KubeControl {
    commands: mpsc::UnboundedSender<Command>,
    done: watch::Receiver<bool>,
}

impl MembershipControl for KubeControl {
    fn join(&self, _via: Address) {
        tracing::debug!("join: a Lease member joins by creating its Lease at start; nothing to do");
    }

    fn leave(&self) {
        let _ = self.commands.send(Command::Leave);
    }

    fn down(&self, node: Address) {
        let _ = self.commands.send(Command::Down(node));
    }

    fn leave_member(&self, node: Address) {
        tracing::warn!(%node, "leave_member is not supported by Kubernetes Lease membership; use down");
    }

    fn shutdown(&self) {
        let _ = self.commands.send(Command::Shutdown);
    }

    fn terminated(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        let mut done = self.done.clone();
        Box::pin(async move {
            let _ = done.wait_for(|d| *d).await;
        })
    }
}

impl MembershipProvider for KubeMembership {
    fn start(
        self: Box<Self>,
        _system: &ActorSystem,
        sink: ViewSink,
    ) -> Result<Arc<dyn MembershipControl>, ClusterError> {
        let me = sink.remoting().local().clone();
        let (commands, command_rx) = mpsc::unbounded_channel();
        let (done_tx, done) = watch::channel(false);
        let handle = tokio::runtime::Handle::try_current().map_err(|_| {
            ClusterError::Provider("Kubernetes membership must start inside a Tokio runtime".into())
        })?;
        let shell = Shell::new(*self, me, sink);
        handle.spawn(async move {
            shell.run(command_rx).await;
            done_tx.send_replace(true);
        });
        Ok(Arc::new(KubeControl { commands, done }))
    }
}

struct Shell {
    leases: Api<LeaseObject>,
    dynamic: Api<DynamicObject>,
    settings: KubeMembershipSettings,
    me: UniqueAddress,
    lease: String,
    created_at: chrono::DateTime<Utc>,
    machine: MembershipMachine,
    sink: ViewSink,
    health: watch::Sender<HostHealth>,
}

impl Shell {
    fn new(provider: KubeMembership, me: UniqueAddress, sink: ViewSink) -> Self {
        let KubeMembership {
            client,
            settings,
            health,
        } = provider;
        let lease = lease_name(settings.lease_prefix(), &me);
        let resource = ApiResource::erase::<LeaseObject>(&());
        Self {
            leases: Api::namespaced(client.clone(), &settings.namespace),
            dynamic: Api::namespaced_with(client, &settings.namespace, &resource),
            machine: MembershipMachine::new(
                me.clone(),
                settings.roles.clone(),
                lease.clone(),
                settings.timing,
                Now::current(),
            ),
            settings,
            me,
            lease,
            created_at: Utc::now(),
            sink,
            health,
        }
    }

    async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        let (events, mut event_rx) = mpsc::unbounded_channel::<Event>();
        let watcher = tokio::spawn(watch_leases(
            self.dynamic.clone(),
            self.settings.selector(),
            events.clone(),
        ));
        let period = (self.settings.timing.renew_interval / 4)
            .clamp(Duration::from_millis(20), Duration::from_millis(250));
        let mut ticker = tokio::time::interval(period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let event = tokio::select! {
                biased;
                command = commands.recv() => match command {
                    Some(Command::Leave) => Event::Leave,
                    Some(Command::Down(address)) => Event::Down(address),
                    Some(Command::Shutdown) | None => Event::Shutdown,
                },
                Some(event) = event_rx.recv() => event,
                _ = ticker.tick() => Event::Tick,
            };
            let actions = self.machine.step(event, Now::current());
            let mut stop = false;
            for action in actions {
                stop |= self.perform(action, &events).await;
            }
            if stop {
                break;
            }
        }
        watcher.abort();
        let departure = match &*self.health.borrow() {
            HostHealth::Fenced { reason } => Departure::Fenced {
                reason: format!("Kubernetes Lease membership: {reason}"),
            },
            HostHealth::Leaving | HostHealth::Left => Departure::Left,
            HostHealth::Starting | HostHealth::Up | HostHealth::Stopped => Departure::Stopped,
        };
        self.sink.depart(departure);
    }

    /// Do one action; true when the shell should stop.
    async fn perform(&self, action: Action, events: &mpsc::UnboundedSender<Event>) -> bool {
        match action {
            Action::Create => {
                let object = self.own_object(None, "up");
                let api = self.leases.clone();
                let events = events.clone();
                let limit = self.settings.timing.renew_interval;
                tokio::spawn(async move {
                    let result = match tokio::time::timeout(
                        limit,
                        api.create(&PostParams::default(), &object),
                    )
                    .await
                    {
                        Ok(answer) => write_result(answer),
                        Err(_) => Err(WriteError::Other(format!("no answer within {limit:?}"))),
                    };
                    let _ = events.send(Event::Created(result));
                });
            }
            Action::Write {
                purpose,
                resource_version,
                timeout,
            } => {
                let status = match purpose {
                    Purpose::Heartbeat => "up",
                    Purpose::MarkLeaving => "leaving",
                };
                let object = self.own_object(Some(resource_version), status);
                let api = self.leases.clone();
                let name = self.lease.clone();
                let events = events.clone();
                tokio::spawn(async move {
                    let result = match tokio::time::timeout(
                        timeout,
                        api.replace(&name, &PostParams::default(), &object),
                    )
                    .await
                    {
                        Ok(answer) => write_result(answer),
                        Err(_) => Err(WriteError::Other(format!("no answer within {timeout:?}"))),
                    };
                    let _ = events.send(Event::Written { purpose, result });
                });
            }
            Action::FetchOwn => {
                let api = self.leases.clone();
                let name = self.lease.clone();
                let events = events.clone();
                let limit = self.settings.timing.renew_interval;
                tokio::spawn(async move {
                    let result = match tokio::time::timeout(limit, api.get_opt(&name)).await {
                        Err(_) => Err(format!("no answer within {limit:?}")),
                        Ok(Err(e)) => Err(describe(&e)),
                        Ok(Ok(None)) => Ok(None),
                        Ok(Ok(Some(object))) => Ok(Some((
                            object
                                .spec
                                .and_then(|s| s.holder_identity)
                                .unwrap_or_default(),
                            object.metadata.resource_version.unwrap_or_default(),
                        ))),
                    };
                    let _ = events.send(Event::FetchedOwn(result));
                });
            }
            Action::DeleteOwn(resource_version) => {
                let api = self.leases.clone();
                let name = self.lease.clone();
                let events = events.clone();
                let limit = self.settings.timing.renew_interval;
                tokio::spawn(async move {
                    let params = delete_params(resource_version);
                    let result = match tokio::time::timeout(limit, api.delete(&name, &params)).await
                    {
                        Err(_) => Err(WriteError::Other(format!("no answer within {limit:?}"))),
                        Ok(Ok(_)) => Ok(()),
                        Ok(Err(e)) => Err(write_error(&e)),
                    };
                    let _ = events.send(Event::DeletedOwn(result));
                });
            }
            Action::DeletePeer {
                lease,
                resource_version,
            } => {
                let api = self.leases.clone();
                let limit = self.settings.timing.renew_interval;
                let params = delete_params(resource_version);
                let own = lease == self.lease;
                let delete = async move {
                    match tokio::time::timeout(limit, api.delete(&lease, &params)).await {
                        Ok(Ok(_)) => {
                            tracing::info!(%lease, "deleted an expired or downed member Lease")
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%lease, error = %describe(&e), "member Lease not deleted")
                        }
                        Err(_) => tracing::debug!(%lease, "member Lease delete timed out"),
                    }
                };
                if own {
                    // Down on ourselves: delete before stopping.
                    delete.await;
                } else {
                    tokio::spawn(delete);
                }
            }
            Action::Publish(view) => self.sink.publish(view),
            Action::Health(health) => {
                self.health.send_replace(health);
            }
            Action::Stop => return true,
        }
        false
    }

    fn own_object(&self, resource_version: Option<String>, status: &str) -> LeaseObject {
        let now = Utc::now();
        let roles: Vec<&str> = self.settings.roles.iter().map(String::as_str).collect();
        LeaseObject {
            metadata: ObjectMeta {
                name: Some(self.lease.clone()),
                resource_version,
                labels: Some(
                    [(
                        self.settings.label_key().to_owned(),
                        self.settings.cluster.clone(),
                    )]
                    .into(),
                ),
                annotations: Some(
                    [
                        (ADDRESS_ANNOTATION.to_owned(), self.me.address.to_string()),
                        (
                            INCARNATION_ANNOTATION.to_owned(),
                            self.me.incarnation.to_string(),
                        ),
                        (ROLES_ANNOTATION.to_owned(), roles.join(",")),
                        (STATUS_ANNOTATION.to_owned(), status.to_owned()),
                    ]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.me.to_string()),
                lease_duration_seconds: Some(self.settings.timing.lease_duration_seconds()),
                acquire_time: Some(MicroTime(self.created_at)),
                renew_time: Some(MicroTime(now)),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        }
    }
}

fn delete_params(resource_version: Option<String>) -> DeleteParams {
    DeleteParams {
        preconditions: resource_version.map(|rv| Preconditions {
            resource_version: Some(rv),
            uid: None,
        }),
        ..DeleteParams::default()
    }
}

fn write_result<T: kube::Resource>(answer: Result<T, kube::Error>) -> Result<String, WriteError> {
    match answer {
        Ok(object) => Ok(object.meta().resource_version.clone().unwrap_or_default()),
        Err(e) => Err(write_error(&e)),
    }
}

fn write_error(error: &kube::Error) -> WriteError {
    match api_code(error) {
        Some(404) => WriteError::NotFound,
        Some(409) => WriteError::Conflict,
        _ => WriteError::Other(describe(error)),
    }
}

/// Turn a raw object from the list or watch into a member Lease, logging (not failing on) a
/// malformed one.
fn member_of(object: &DynamicObject) -> Option<PeerLease> {
    let name = object
        .metadata
        .name
        .clone()
        .unwrap_or_else(|| "?".to_owned());
    let parsed = serde_json::to_value(object)
        .and_then(serde_json::from_value::<LeaseObject>)
        .map_err(|e| MalformedLease {
            lease: name,
            problem: format!("not a valid Lease object: {e}"),
        })
        .and_then(|lease| parse_member_lease(&lease));
    match parsed {
        Ok(peer) => Some(peer),
        Err(error) => {
            tracing::warn!(%error, "ignoring a malformed member Lease");
            None
        }
    }
}

/// List, then watch, the cluster's Leases; relist after a `410` or a broken stream.
async fn watch_leases(
    api: Api<DynamicObject>,
    selector: String,
    events: mpsc::UnboundedSender<Event>,
) {
    let backoff = Duration::from_millis(200);
    loop {
        let list = match api.list(&ListParams::default().labels(&selector)).await {
            Ok(list) => list,
            Err(e) => {
                tracing::warn!(error = %describe(&e), "listing member Leases failed; retrying");
                tokio::time::sleep(backoff).await;
                continue;
            }
        };
        let mut version = list.metadata.resource_version.clone().unwrap_or_default();
        let members = list.items.iter().filter_map(member_of).collect();
        if events.send(Event::Resync(members)).is_err() {
            return;
        }
        'watch: loop {
            let params = WatchParams::default().labels(&selector).timeout(290);
            let stream = match api.watch(&params, &version).await {
                Ok(stream) => stream,
                Err(e) => {
                    tracing::warn!(error = %describe(&e), "watching member Leases failed; relisting");
                    tokio::time::sleep(backoff).await;
                    break 'watch;
                }
            };
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                let event = match item {
                    Ok(WatchEvent::Added(object) | WatchEvent::Modified(object)) => {
                        if let Some(rv) = &object.metadata.resource_version {
                            version.clone_from(rv);
                        }
                        member_of(&object).map(Event::Upsert)
                    }
                    Ok(WatchEvent::Deleted(object)) => {
                        if let Some(rv) = &object.metadata.resource_version {
                            version.clone_from(rv);
                        }
                        object.metadata.name.clone().map(Event::Removed)
                    }
                    Ok(WatchEvent::Bookmark(bookmark)) => {
                        version = bookmark.metadata.resource_version;
                        None
                    }
                    Ok(WatchEvent::Error(status)) => {
                        tracing::debug!(code = status.code, reason = %status.reason, message = %status.message, "watch ended by the API server; relisting");
                        break 'watch;
                    }
                    Err(e) => {
                        tracing::warn!(error = %describe(&e), "unreadable watch event; relisting");
                        break 'watch;
                    }
                };
                if let Some(event) = event
                    && events.send(event).is_err()
                {
                    return;
                }
            }
            // The stream ended (server timeout): resume from the last version seen.
        }
    }
}
