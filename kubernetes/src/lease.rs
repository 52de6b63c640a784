//! [`KubeLease`]: troupe's [`Lease`] on one `coordination.k8s.io/v1` Lease object.
//!
//! # Protocol
//! - **Acquire**: read the Lease. Absent → create it naming this owner (`201`; `409
//!   AlreadyExists` means another acquirer created it first → not granted). Present and held by
//!   someone else whose `renewTime + leaseDurationSeconds` has not passed → not granted.
//!   Otherwise (free, released, or expired) → replace it carrying the `resourceVersion` just read,
//!   naming this owner and incrementing `leaseTransitions`; `409 Conflict` means another writer
//!   got in between → not granted. Only one of any number of racing acquirers can succeed, because
//!   the API server accepts exactly one write per `resourceVersion`.
//! - **Renew**: every `renew_interval`, replace the Lease with a fresh `renewTime`, carrying the
//!   `resourceVersion` of the last successful write. `409 Conflict` (someone else wrote it) and
//!   `404 NotFound` (it was deleted) end the grant at once. Other failures and timeouts are
//!   retried until the local deadline.
//! - **Local deadline**: the grant is reported lost at `sent + ttl − max_clock_skew`, where `sent`
//!   is the monotonic moment the last successful write was sent. Its `renewTime` is the wall
//!   clock at that same moment, and nobody may take over before `renewTime + ttl` on their clock,
//!   so the loss is reported before another holder can get in (given the skew bound). Every
//!   request is bounded by the time left to the deadline, so a hanging API server cannot delay it.
//! - **Release**: stop renewing, then clear `holderIdentity` (carrying the `resourceVersion`, so
//!   a release never clears someone else's grant). A handle that does not hold does nothing.
//!
//! # Fencing token
//! The token of a grant is the `resourceVersion` of the write that granted it (the create or the
//! takeover), parsed as an integer. On every real API server it is the etcd revision of that
//! write; etcd revisions are cluster-wide and strictly increase with every write, and each grant
//! is written after the previous grant was (the takeover carries the `resourceVersion` it read,
//! which is at least the previous grant's write), so tokens strictly increase across holders —
//! even across a deletion and re-creation of the Lease, where `leaseTransitions` would restart
//! at 0. Kubernetes calls `resourceVersion` opaque; this backend requires it to be numeric and
//! reports an error otherwise.

use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use chrono::Utc;
use k8s_openapi::api::coordination::v1::{Lease as LeaseObject, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use parking_lot::Mutex;
use tokio::time::Instant;
use troupe::lease::{FencingToken, Lease, LeaseError, LeaseFuture, LeaseLost, LeaseLostCallback};

use crate::error::{api_code, describe};
use crate::settings::{KubeTiming, TimingError};

/// One owner's handle to one Kubernetes Lease object.
pub struct KubeLease {
    inner: Arc<Inner>,
}

struct Inner {
    api: Api<LeaseObject>,
    namespace: String,
    name: String,
    owner: String,
    timing: KubeTiming,
    held: Mutex<Option<Held>>,
}

struct Held {
    token: u64,
    renewal: tokio::task::AbortHandle,
}

impl fmt::Debug for KubeLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeLease")
            .field("namespace", &self.inner.namespace)
            .field("name", &self.inner.name)
            .field("owner", &self.inner.owner)
            .field("timing", &self.inner.timing)
            .field("token", &self.fencing_token())
            .finish()
    }
}

impl KubeLease {
    /// A handle to Lease `name` in `namespace` that acquires as `owner`.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        owner: &str,
        timing: KubeTiming,
    ) -> Result<Self, TimingError> {
        timing.validate()?;
        if owner.is_empty() {
            return Err(TimingError(
                "the owner identity must not be empty (an empty holderIdentity means free)".into(),
            ));
        }
        Ok(Self {
            inner: Arc::new(Inner {
                api: Api::namespaced(client, namespace),
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                owner: owner.to_owned(),
                timing,
                held: Mutex::new(None),
            }),
        })
    }

    /// The timing this handle uses.
    #[must_use]
    pub fn timing(&self) -> KubeTiming {
        self.inner.timing
    }
}

impl Inner {
    fn provider_error(&self, what: &str, error: &kube::Error) -> LeaseError {
        let reason = format!(
            "{what} Lease {}/{}: {}",
            self.namespace,
            self.name,
            describe(error)
        );
        match error {
            kube::Error::SerdeError(_) => LeaseError::Malformed {
                lease: self.name.clone(),
                reason,
            },
            kube::Error::Api(_) => LeaseError::Provider {
                lease: self.name.clone(),
                reason,
            },
            _ => LeaseError::Unavailable {
                lease: self.name.clone(),
                reason,
            },
        }
    }

    fn timeout_error(&self, what: &str) -> LeaseError {
        LeaseError::Unavailable {
            lease: self.name.clone(),
            reason: format!(
                "{what} Lease {}/{}: no answer within {:?}",
                self.namespace, self.name, self.timing.renew_interval
            ),
        }
    }

    /// The grant `token` ended: forget it if current. True when the caller should report it.
    fn lost(&self, token: u64) -> bool {
        let mut held = self.held.lock();
        if held.as_ref().is_some_and(|h| h.token == token) {
            if let Some(h) = held.take() {
                h.renewal.abort();
            }
            true
        } else {
            false
        }
    }

    fn spec_for(&self, now: chrono::DateTime<Utc>, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.owner.clone()),
            lease_duration_seconds: Some(self.timing.lease_duration_seconds()),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }
}

/// The parts of a stored Lease object this backend relies on, checked.
#[derive(Debug, Clone)]
pub(crate) struct Observed {
    pub(crate) transitions: i32,
    pub(crate) expired: bool,
}

/// Check a Lease object from the API server; a malformed one is an error naming what is wrong.
pub(crate) fn observe(
    object: &LeaseObject,
    now: chrono::DateTime<Utc>,
    fallback_ttl: Duration,
) -> Result<Observed, String> {
    if object
        .metadata
        .resource_version
        .as_deref()
        .is_none_or(str::is_empty)
    {
        return Err("metadata.resourceVersion is missing".to_owned());
    }
    let spec = object.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.filter(|h| !h.is_empty());
    let transitions = spec.lease_transitions.unwrap_or(0);
    if transitions < 0 {
        return Err(format!("spec.leaseTransitions is negative ({transitions})"));
    }
    let duration = match spec.lease_duration_seconds {
        Some(d) if d > 0 => chrono::Duration::seconds(i64::from(d)),
        Some(d) => {
            return Err(format!(
                "spec.leaseDurationSeconds must be positive, got {d}"
            ));
        }
        None => chrono::Duration::from_std(fallback_ttl).unwrap_or(chrono::Duration::MAX),
    };
    let expired = match (&holder, spec.renew_time.or(spec.acquire_time)) {
        (None, _) => true,
        // Held but never renewed: treat it as held until someone who knows better clears it.
        (Some(_), None) => false,
        (Some(_), Some(MicroTime(renewed))) => renewed + duration <= now,
    };
    Ok(Observed {
        transitions,
        expired,
    })
}

fn token_of(object: &LeaseObject, lease: &str) -> Result<u64, LeaseError> {
    let rv = object.metadata.resource_version.as_deref().unwrap_or("");
    rv.parse::<u64>().map_err(|_| LeaseError::Malformed {
        lease: lease.to_owned(),
        reason: format!(
            "the API server's resourceVersion {rv:?} is not a number; the fencing token is the numeric (etcd) resourceVersion of the granting write"
        ),
    })
}

impl Lease for KubeLease {
    fn name(&self) -> &str {
        &self.inner.name
    }

    fn owner(&self) -> &str {
        &self.inner.owner
    }

    fn acquire(&self, on_lost: LeaseLostCallback) -> LeaseFuture<Option<FencingToken>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let limit = inner.timing.renew_interval;
            if let Some(token) = inner.held.lock().as_ref().map(|h| h.token) {
                // Already held: the renewal task keeps it; the new callback is not needed.
                drop(on_lost);
                return Ok(Some(FencingToken(token)));
            }
            let sent = Instant::now();
            let wall = Utc::now();
            let current = tokio::time::timeout(limit, inner.api.get_opt(&inner.name))
                .await
                .map_err(|_| inner.timeout_error("reading"))?
                .map_err(|e| inner.provider_error("reading", &e))?;
            let written = match current {
                None => {
                    let object = LeaseObject {
                        metadata: ObjectMeta {
                            name: Some(inner.name.clone()),
                            ..ObjectMeta::default()
                        },
                        spec: Some(inner.spec_for(wall, 0)),
                    };
                    let created = tokio::time::timeout(
                        limit,
                        inner.api.create(&PostParams::default(), &object),
                    )
                    .await
                    .map_err(|_| inner.timeout_error("creating"))?;
                    match created {
                        Ok(created) => created,
                        Err(e) if api_code(&e) == Some(409) => return Ok(None),
                        Err(e) => return Err(inner.provider_error("creating", &e)),
                    }
                }
                Some(object) => {
                    let observed = observe(&object, wall, inner.timing.ttl).map_err(|problem| {
                        LeaseError::Provider {
                            lease: inner.name.clone(),
                            reason: format!(
                                "Lease {}/{} from the API server is malformed: {problem}",
                                inner.namespace, inner.name
                            ),
                        }
                    })?;
                    if !observed.expired {
                        return Ok(None);
                    }
                    let mut next = object.clone();
                    next.metadata.managed_fields = None;
                    next.spec = Some(inner.spec_for(wall, observed.transitions.saturating_add(1)));
                    let replaced = tokio::time::timeout(
                        limit,
                        inner
                            .api
                            .replace(&inner.name, &PostParams::default(), &next),
                    )
                    .await
                    .map_err(|_| inner.timeout_error("taking over"))?;
                    match replaced {
                        Ok(replaced) => replaced,
                        Err(e) if matches!(api_code(&e), Some(409 | 404)) => return Ok(None),
                        Err(e) => return Err(inner.provider_error("taking over", &e)),
                    }
                }
            };
            let token = token_of(&written, &inner.name)?;
            let on_lost: Arc<LeaseLostCallback> = Arc::new(on_lost);
            let mut held = inner.held.lock();
            let renewal = tokio::spawn(renew(
                Arc::downgrade(&inner),
                token,
                written,
                sent + inner.timing.local_validity(),
                on_lost,
            ));
            if let Some(old) = held.replace(Held {
                token,
                renewal: renewal.abort_handle(),
            }) {
                old.renewal.abort();
            }
            Ok(Some(FencingToken(token)))
        })
    }

    fn release(&self) -> LeaseFuture<()> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let Some(held) = inner.held.lock().take() else {
                return Ok(());
            };
            held.renewal.abort();
            let limit = inner.timing.renew_interval;
            let current = tokio::time::timeout(limit, inner.api.get_opt(&inner.name))
                .await
                .map_err(|_| inner.timeout_error("releasing"))?
                .map_err(|e| inner.provider_error("releasing", &e))?;
            let Some(mut object) = current else {
                return Ok(());
            };
            let ours = object
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.as_deref())
                == Some(inner.owner.as_str());
            if !ours {
                return Ok(());
            }
            object.metadata.managed_fields = None;
            if let Some(spec) = object.spec.as_mut() {
                spec.holder_identity = None;
                spec.acquire_time = None;
                spec.renew_time = Some(MicroTime(Utc::now()));
            }
            match tokio::time::timeout(
                limit,
                inner
                    .api
                    .replace(&inner.name, &PostParams::default(), &object),
            )
            .await
            {
                Err(_) => Err(inner.timeout_error("releasing")),
                Ok(Ok(_)) => Ok(()),
                // Someone else wrote it or deleted it: it is not ours to clear.
                Ok(Err(e)) if matches!(api_code(&e), Some(409 | 404)) => Ok(()),
                Ok(Err(e)) => Err(inner.provider_error("releasing", &e)),
            }
        })
    }

    fn holds(&self) -> bool {
        self.inner.held.lock().is_some()
    }

    fn fencing_token(&self) -> Option<FencingToken> {
        self.inner
            .held
            .lock()
            .as_ref()
            .map(|h| FencingToken(h.token))
    }
}

/// Renew grant `token` until it is released or lost; report the loss by the local deadline.
async fn renew(
    handle: Weak<Inner>,
    token: u64,
    mut last: LeaseObject,
    mut deadline: Instant,
    on_lost: Arc<LeaseLostCallback>,
) {
    let report = |inner: &Inner, reason: String| {
        if inner.lost(token) {
            tracing::warn!(lease = %inner.name, owner = %inner.owner, token, %reason, "lease lost");
            on_lost(LeaseLost {
                lease: inner.name.clone(),
                owner: inner.owner.clone(),
                token: FencingToken(token),
                reason,
            });
        }
    };
    let mut wait = match handle.upgrade() {
        Some(inner) => inner.timing.renew_interval,
        None => return,
    };
    loop {
        let now = Instant::now();
        tokio::time::sleep_until((now + wait).min(deadline)).await;
        let Some(inner) = handle.upgrade() else {
            return;
        };
        let sent = Instant::now();
        if sent >= deadline {
            report(
                &inner,
                format!(
                    "no successful renewal within {:?}; others may take over at the Lease's TTL",
                    inner.timing.local_validity()
                ),
            );
            return;
        }
        let wall = Utc::now();
        let mut next = last.clone();
        next.metadata.managed_fields = None;
        if let Some(spec) = next.spec.as_mut() {
            spec.renew_time = Some(MicroTime(wall));
        }
        let limit = inner.timing.renew_interval.min(deadline - sent);
        let api = inner.api.clone();
        let name = inner.name.clone();
        drop(inner);
        let answer =
            tokio::time::timeout(limit, api.replace(&name, &PostParams::default(), &next)).await;
        let Some(inner) = handle.upgrade() else {
            return;
        };
        wait = inner.timing.renew_interval;
        match answer {
            Ok(Ok(renewed)) => {
                let holder = renewed
                    .spec
                    .as_ref()
                    .and_then(|s| s.holder_identity.clone());
                if holder.as_deref() != Some(inner.owner.as_str()) {
                    report(
                        &inner,
                        format!("the renewed Lease names {holder:?} as holder"),
                    );
                    return;
                }
                last = renewed;
                deadline = sent + inner.timing.local_validity();
            }
            Ok(Err(e)) if api_code(&e) == Some(409) => {
                report(
                    &inner,
                    format!(
                        "renewal refused with 409 Conflict: another writer changed the Lease ({})",
                        describe(&e)
                    ),
                );
                return;
            }
            Ok(Err(e)) if api_code(&e) == Some(404) => {
                report(
                    &inner,
                    "renewal answered 404 NotFound: the Lease was deleted".to_owned(),
                );
                return;
            }
            Ok(Err(e)) => {
                tracing::debug!(lease = %inner.name, error = %describe(&e), "renewal failed; retrying");
                wait = (inner.timing.renew_interval / 4).max(Duration::from_millis(50));
            }
            Err(_) => {
                tracing::debug!(lease = %inner.name, "renewal timed out; retrying");
                wait = Duration::ZERO;
            }
        }
    }
}

/// Makes [`KubeLease`] handles on Lease objects in one namespace: troupe's `LeaseProvider`.
///
/// The shared [`LeaseSettings`](troupe::lease::LeaseSettings) map onto the Lease as: `ttl` →
/// `leaseDurationSeconds` (so a whole number of seconds, at least 1 — other values are refused
/// with `LeaseError::Settings`), `renew_interval` as is, and the loss reported at
/// `ttl − renew_interval` after the last confirmed renewal was sent (the shared
/// `loss_deadline`; one renew interval of clock skew tolerated).
#[derive(Clone)]
pub struct KubeLeaseProvider {
    client: kube::Client,
    namespace: String,
}

impl fmt::Debug for KubeLeaseProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeLeaseProvider")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl KubeLeaseProvider {
    /// Leases in `namespace`, through `client`.
    #[must_use]
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            client,
            namespace: namespace.to_owned(),
        }
    }
}

impl troupe::lease::LeaseProvider for KubeLeaseProvider {
    fn lease(
        &self,
        name: &str,
        owner: &str,
        settings: &troupe::lease::LeaseSettings,
    ) -> Result<Arc<dyn Lease>, LeaseError> {
        let timing = KubeTiming {
            ttl: settings.ttl(),
            renew_interval: settings.renew_interval(),
            max_clock_skew: settings.renew_interval(),
        };
        let handle = KubeLease::new(self.client.clone(), &self.namespace, name, owner, timing)
            .map_err(|e| LeaseError::Settings {
                lease: name.to_owned(),
                reason: e.to_string(),
            })?;
        Ok(Arc::new(handle))
    }
}
