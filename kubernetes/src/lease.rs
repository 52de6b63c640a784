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
//!
//! This module implements only the store operations (`troupe_lease::lease::store::LeaseStore`);
//! the held grant, the renewal schedule, the deadline and the once-only loss report are the one
//! machine every backend shares (`GrantedLease`, with the loss deadline `ttl − max_clock_skew`).
//! Through [`KubeLeaseProvider`] the skew margin is the renew interval, so the deadline is the
//! shared `ttl − renew_interval`.
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
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use k8s_openapi::api::coordination::v1::{Lease as LeaseObject, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use parking_lot::Mutex;
use troupe_lease::lease::store::{GrantEnded, GrantedLease, LeaseStore, RenewError};
use troupe_lease::lease::{
    FencingToken, Lease, LeaseError, LeaseFuture, LeaseLostCallback, LeaseSettings,
};

use crate::error::{api_code, describe};
use crate::settings::{KubeTiming, TimingError};

/// One owner's handle to one Kubernetes Lease object.
pub struct KubeLease {
    lease: GrantedLease<KubeLeaseStore>,
    timing: KubeTiming,
}

/// The store operations on one namespace's Lease objects.
pub(crate) struct KubeLeaseStore {
    api: Api<LeaseObject>,
    namespace: String,
    timing: KubeTiming,
}

impl fmt::Debug for KubeLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeLease")
            .field("namespace", &self.lease.store().namespace)
            .field("name", &self.lease.name())
            .field("owner", &self.lease.owner())
            .field("timing", &self.timing)
            .field("token", &self.fencing_token())
            .finish()
    }
}

impl KubeLease {
    /// A handle to Lease `name` in `namespace` that acquires as `owner`. The timing must be
    /// valid for Kubernetes ([`KubeTiming::validate`]) and as lease settings
    /// (`troupe_lease::lease::LeaseSettings::new`: ttl 1 s to 1 h, renewal at most a third of
    /// it); the name and owner within the shared limits.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        owner: &str,
        timing: KubeTiming,
    ) -> Result<Self, TimingError> {
        timing.validate()?;
        let settings = LeaseSettings::new(timing.ttl, timing.renew_interval)
            .map_err(|e| TimingError(e.to_string()))?;
        let store = Arc::new(KubeLeaseStore {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            timing,
        });
        let lease =
            GrantedLease::with_loss_deadline(store, name, owner, settings, timing.local_validity())
                .map_err(|e| TimingError(e.to_string()))?;
        Ok(Self { lease, timing })
    }

    /// The timing this handle uses.
    #[must_use]
    pub fn timing(&self) -> KubeTiming {
        self.timing
    }
}

impl Lease for KubeLease {
    fn name(&self) -> &str {
        self.lease.name()
    }

    fn owner(&self) -> &str {
        self.lease.owner()
    }

    fn acquire(&self, on_lost: LeaseLostCallback) -> LeaseFuture<Option<FencingToken>> {
        self.lease.acquire(on_lost)
    }

    fn release(&self) -> LeaseFuture<()> {
        self.lease.release()
    }

    fn holds(&self) -> bool {
        self.lease.holds()
    }

    fn fencing_token(&self) -> Option<FencingToken> {
        self.lease.fencing_token()
    }
}

impl KubeLeaseStore {
    fn provider_error(&self, name: &str, what: &str, error: &kube::Error) -> LeaseError {
        let reason = format!(
            "{what} Lease {}/{name}: {}",
            self.namespace,
            describe(error)
        );
        match error {
            kube::Error::SerdeError(_) => LeaseError::Malformed {
                lease: name.to_owned(),
                reason,
            },
            kube::Error::Api(_) => LeaseError::Provider {
                lease: name.to_owned(),
                reason,
            },
            _ => LeaseError::Unavailable {
                lease: name.to_owned(),
                reason,
            },
        }
    }

    fn timeout_error(&self, name: &str, what: &str) -> LeaseError {
        LeaseError::Unavailable {
            lease: name.to_owned(),
            reason: format!(
                "{what} Lease {}/{name}: no answer within {:?}",
                self.namespace,
                self.timing.local_validity()
            ),
        }
    }

    fn spec_for(&self, owner: &str, now: chrono::DateTime<Utc>, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(owner.to_owned()),
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

impl LeaseStore for KubeLeaseStore {
    /// The last object this holder wrote (its `resourceVersion` guards the next write).
    type Grant = Mutex<LeaseObject>;

    async fn try_acquire(
        &self,
        name: &str,
        owner: &str,
        _settings: &LeaseSettings,
        _ended: GrantEnded,
    ) -> Result<Option<(FencingToken, Mutex<LeaseObject>)>, LeaseError> {
        // Bounded by the local validity, not the renew interval: a grant acquired later than
        // that would be lost on arrival anyway, and anything shorter turns a slow but
        // successful acquire (twenty racing acquirers on a loaded machine) into an error.
        let limit = self.timing.local_validity();
        let wall = Utc::now();
        let current = tokio::time::timeout(limit, self.api.get_opt(name))
            .await
            .map_err(|_| self.timeout_error(name, "reading"))?
            .map_err(|e| self.provider_error(name, "reading", &e))?;
        let written = match current {
            None => {
                let object = LeaseObject {
                    metadata: ObjectMeta {
                        name: Some(name.to_owned()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(self.spec_for(owner, wall, 0)),
                };
                let created =
                    tokio::time::timeout(limit, self.api.create(&PostParams::default(), &object))
                        .await
                        .map_err(|_| self.timeout_error(name, "creating"))?;
                match created {
                    Ok(created) => created,
                    Err(e) if api_code(&e) == Some(409) => return Ok(None),
                    Err(e) => return Err(self.provider_error(name, "creating", &e)),
                }
            }
            Some(object) => {
                let observed = observe(&object, wall, self.timing.ttl).map_err(|problem| {
                    LeaseError::Provider {
                        lease: name.to_owned(),
                        reason: format!(
                            "Lease {}/{name} from the API server is malformed: {problem}",
                            self.namespace
                        ),
                    }
                })?;
                if !observed.expired {
                    return Ok(None);
                }
                let mut next = object.clone();
                next.metadata.managed_fields = None;
                next.spec =
                    Some(self.spec_for(owner, wall, observed.transitions.saturating_add(1)));
                let replaced = tokio::time::timeout(
                    limit,
                    self.api.replace(name, &PostParams::default(), &next),
                )
                .await
                .map_err(|_| self.timeout_error(name, "taking over"))?;
                match replaced {
                    Ok(replaced) => replaced,
                    Err(e) if matches!(api_code(&e), Some(409 | 404)) => return Ok(None),
                    Err(e) => return Err(self.provider_error(name, "taking over", &e)),
                }
            }
        };
        let token = token_of(&written, name)?;
        Ok(Some((FencingToken(token), Mutex::new(written))))
    }

    async fn renew(
        &self,
        name: &str,
        owner: &str,
        _token: FencingToken,
        grant: &Mutex<LeaseObject>,
        _settings: &LeaseSettings,
    ) -> Result<(), RenewError> {
        let mut next = grant.lock().clone();
        next.metadata.managed_fields = None;
        if let Some(spec) = next.spec.as_mut() {
            spec.renew_time = Some(MicroTime(Utc::now()));
        }
        let limit = self.timing.renew_interval;
        let answer =
            tokio::time::timeout(limit, self.api.replace(name, &PostParams::default(), &next))
                .await;
        match answer {
            Ok(Ok(renewed)) => {
                let holder = renewed
                    .spec
                    .as_ref()
                    .and_then(|s| s.holder_identity.clone());
                if holder.as_deref() != Some(owner) {
                    return Err(RenewError::Gone(format!(
                        "the renewed Lease names {holder:?} as holder"
                    )));
                }
                *grant.lock() = renewed;
                Ok(())
            }
            Ok(Err(e)) if api_code(&e) == Some(409) => Err(RenewError::Gone(format!(
                "renewal refused with 409 Conflict: another writer changed the Lease ({})",
                describe(&e)
            ))),
            Ok(Err(e)) if api_code(&e) == Some(404) => Err(RenewError::Gone(
                "renewal answered 404 NotFound: the Lease was deleted".to_owned(),
            )),
            Ok(Err(e)) => Err(RenewError::Failed(describe(&e))),
            Err(_) => Err(RenewError::Failed(format!("no answer within {limit:?}"))),
        }
    }

    async fn release(
        &self,
        name: &str,
        owner: &str,
        _token: FencingToken,
        _grant: &Mutex<LeaseObject>,
    ) -> Result<(), LeaseError> {
        let limit = self.timing.local_validity();
        let current = tokio::time::timeout(limit, self.api.get_opt(name))
            .await
            .map_err(|_| self.timeout_error(name, "releasing"))?
            .map_err(|e| self.provider_error(name, "releasing", &e))?;
        let Some(mut object) = current else {
            return Ok(());
        };
        let ours = object
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            == Some(owner);
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
            self.api.replace(name, &PostParams::default(), &object),
        )
        .await
        {
            Err(_) => Err(self.timeout_error(name, "releasing")),
            Ok(Ok(_)) => Ok(()),
            // Someone else wrote it or deleted it: it is not ours to clear.
            Ok(Err(e)) if matches!(api_code(&e), Some(409 | 404)) => Ok(()),
            Ok(Err(e)) => Err(self.provider_error(name, "releasing", &e)),
        }
    }
}

/// Makes [`KubeLease`] handles on Lease objects in one namespace: troupe's `LeaseProvider`.
///
/// The shared [`LeaseSettings`] map onto the Lease as: `ttl` →
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

impl troupe_lease::lease::LeaseProvider for KubeLeaseProvider {
    fn lease(
        &self,
        name: &str,
        owner: &str,
        settings: &LeaseSettings,
    ) -> Result<Arc<dyn Lease>, LeaseError> {
        // A name or owner outside the shared limits gets the shared error (its own code), as
        // on every backend; only what is Kubernetes' own is `Settings`.
        troupe_lease::lease::validate_identity(name, owner)?;
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
