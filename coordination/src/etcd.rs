//! Leases and the actor directory on etcd (v3 API, etcd 3.4 and later).
//!
//! Layout under a prefix `P` (for example `/troupe/prod/`):
//! - `P` `leases/<name>`: `{"owner": "<owner>"}`, attached to an etcd lease with the grant's
//!   TTL. It is created in a transaction only if absent (`create_revision == 0`); the fencing
//!   token is that transaction's revision (the key's `create_revision`), so it grows with every
//!   new holder. The holder keeps the etcd lease alive every renew interval over one
//!   keep-alive stream and checks the key is still its own; release revokes the etcd lease,
//!   which deletes the key (and only this grant's key). [`StoredGrants`] (for the control
//!   plane's clients) finds the etcd lease from the key instead: a renewal is one keep-alive of
//!   the key's etcd lease after checking the key's owner and `create_revision`, so any replica
//!   serves it, and etcd expires the grant one TTL after the last.
//! - `P` `claims/<actor id>`: `{"host": "<host>"}`, created only if absent; released and
//!   evicted with a transaction that compares the key's `mod_revision`, so a release never
//!   removes a claim it did not read. A claim's revision is its `create_revision`; a watch is
//!   an etcd watch of `P` `claims/` from `after + 1` with previous values, so a watcher resumes
//!   from the last revision it saw. etcd's compaction ends a watch with
//!   [`DirectoryError::Compacted`].

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, KeyValue,
    LeaseKeepAliveStream, LeaseKeeper, PutOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use troupe_lease::directory::{
    self, Claim, ClaimOutcome, Directory, DirectoryChange, DirectoryError, DirectoryEvent,
    DirectoryFuture, DirectorySnapshot, DirectoryWatch, Revision,
};
use troupe_lease::lease::{FencingToken, LeaseError, LeaseSettings};

use troupe_lease::lease::LeaseFuture;
use troupe_lease::lease::store::{GrantEnded, LeaseStore, RenewError};
use troupe_lease::lease::stored::{StoredGrant, StoredGrants};

/// How long one etcd request may take before it counts as failed.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Connect to etcd at `endpoints` (`http://host:port`, several for a cluster). The client
/// reconnects by itself; HTTP/2 keep-alive pings (every 2 s, 2 s timeout) notice a dead
/// connection so watches end instead of hanging.
pub async fn connect(endpoints: &[String]) -> Result<Client, etcd_client::Error> {
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(3))
        .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
        .with_keep_alive_while_idle(true);
    Client::connect(endpoints, Some(options)).await
}

/// A key prefix that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "etcd key prefix {prefix:?} must be non-empty and end with '/' (for example \"/troupe/prod/\")"
)]
pub struct InvalidPrefix {
    /// The prefix given.
    pub prefix: String,
}

fn check_prefix(prefix: &str) -> Result<(), InvalidPrefix> {
    if prefix.is_empty() || !prefix.ends_with('/') {
        return Err(InvalidPrefix {
            prefix: prefix.to_owned(),
        });
    }
    Ok(())
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LeaseValue {
    owner: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClaimValue {
    host: String,
}

/// Leases on etcd: a [`LeaseProvider`](troupe_lease::lease::LeaseProvider) whose handles keep the contract in `troupe_lease::lease`.
#[derive(Clone)]
pub struct EtcdLeases {
    store: Arc<EtcdLeaseStore>,
}

pub(crate) struct EtcdLeaseStore {
    client: Client,
    prefix: String,
    timeout: Duration,
}

impl std::fmt::Debug for EtcdLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdLeases")
            .field("prefix", &self.store.prefix)
            .finish_non_exhaustive()
    }
}

impl EtcdLeases {
    /// Leases under `prefix` (must end with `/`), through `client`.
    pub fn new(client: Client, prefix: &str) -> Result<Self, InvalidPrefix> {
        check_prefix(prefix)?;
        Ok(Self {
            store: Arc::new(EtcdLeaseStore {
                client,
                prefix: prefix.to_owned(),
                timeout: DEFAULT_REQUEST_TIMEOUT,
            }),
        })
    }

    /// The etcd key of lease `name`.
    #[must_use]
    pub fn key(&self, name: &str) -> String {
        self.store.key(name)
    }
}

troupe_lease::lease_handle!(
    /// One owner's handle to a lease on etcd (made by [`EtcdLeases::handle`]).
    EtcdLease,
    EtcdLeaseStore,
    provided by EtcdLeases => store
);

/// etcd grants whole seconds.
fn ttl_seconds(settings: &LeaseSettings) -> Result<i64, String> {
    let ttl = settings.ttl();
    if ttl.subsec_nanos() != 0 || ttl < Duration::from_secs(1) {
        return Err(format!(
            "etcd grants leases in whole seconds: ttl {ttl:?} must be a whole number of seconds, at least 1s"
        ));
    }
    i64::try_from(ttl.as_secs()).map_err(|_| format!("ttl {ttl:?} is too long for etcd"))
}

/// One grant: the etcd lease and its keep-alive stream (opened on first renewal, reopened
/// after a failure).
pub(crate) struct EtcdGrant {
    id: i64,
    keeper: tokio::sync::Mutex<Option<(LeaseKeeper, LeaseKeepAliveStream)>>,
}

fn unavailable(lease: &str, what: &str, e: impl std::fmt::Display) -> LeaseError {
    LeaseError::Unavailable {
        lease: lease.to_owned(),
        reason: format!("{what}: {e}"),
    }
}

impl EtcdLeaseStore {
    fn key(&self, name: &str) -> String {
        format!("{}leases/{name}", self.prefix)
    }

    async fn bounded<T, E: std::fmt::Display>(
        &self,
        lease: &str,
        what: &str,
        fut: impl Future<Output = Result<T, E>>,
    ) -> Result<T, LeaseError> {
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(unavailable(lease, what, e)),
            Err(_) => Err(unavailable(
                lease,
                what,
                format!("no answer within {:?}", self.timeout),
            )),
        }
    }

    fn revoke_later(&self, id: i64) {
        let mut client = self.client.clone();
        let timeout = self.timeout;
        tokio::spawn(async move {
            let _ = tokio::time::timeout(timeout, client.lease_revoke(id)).await;
        });
    }
}

/// Parse a lease key's value, or say what is wrong with it.
fn parse_lease_value(key: &str, kv: &KeyValue) -> Result<LeaseValue, String> {
    let value: LeaseValue = serde_json::from_slice(kv.value()).map_err(|e| {
        format!(
            "etcd key {key:?} holds {:?}, not a lease record ({e}); expected JSON {{\"owner\": string}}",
            String::from_utf8_lossy(kv.value())
        )
    })?;
    if kv.lease() == 0 {
        return Err(format!(
            "etcd key {key:?} (owner {:?}) has no etcd lease attached, so it would never expire; delete it",
            value.owner
        ));
    }
    Ok(value)
}

impl LeaseStore for EtcdLeaseStore {
    type Grant = EtcdGrant;

    /// etcd grants whole seconds, at least 2.
    fn check_settings(&self, name: &str, settings: &LeaseSettings) -> Result<(), LeaseError> {
        ttl_seconds(settings)
            .map(drop)
            .map_err(|reason| LeaseError::Settings {
                lease: name.to_owned(),
                reason,
            })
    }

    async fn try_acquire(
        &self,
        name: &str,
        owner: &str,
        settings: &LeaseSettings,
        _ended: GrantEnded,
    ) -> Result<Option<(FencingToken, EtcdGrant)>, LeaseError> {
        let ttl = ttl_seconds(settings).map_err(|reason| LeaseError::Settings {
            lease: name.to_owned(),
            reason,
        })?;
        let mut client = self.client.clone();
        let key = self.key(name);
        // Held already (the common case of a standby retrying): one read, no etcd lease granted
        // and revoked again — two raft writes fewer, which is what kept a loaded etcd from
        // confirming the holder's renewals in time.
        let current = self
            .bounded(name, "etcd get", client.get(key.clone(), None))
            .await?;
        if let Some(kv) = current.kvs().first() {
            parse_lease_value(&key, kv).map_err(|reason| LeaseError::Malformed {
                lease: name.to_owned(),
                reason,
            })?;
            return Ok(None);
        }
        let granted = self
            .bounded(name, "etcd lease grant", client.lease_grant(ttl, None))
            .await?;
        let id = granted.id();
        let value = serde_json::to_vec(&LeaseValue {
            owner: owner.to_owned(),
        })
        .map_err(|e| LeaseError::Provider {
            lease: name.to_owned(),
            reason: e.to_string(),
        })?;
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                value,
                Some(PutOptions::new().with_lease(id)),
            )])
            .or_else([TxnOp::get(key.clone(), None)]);
        let response = match self.bounded(name, "etcd txn", client.txn(txn)).await {
            Ok(r) => r,
            Err(e) => {
                self.revoke_later(id);
                return Err(e);
            }
        };
        if response.succeeded() {
            let revision = response.header().map_or(0, |h| h.revision());
            let token = u64::try_from(revision)
                .ok()
                .filter(|r| *r > 0)
                .ok_or_else(|| LeaseError::Provider {
                    lease: name.to_owned(),
                    reason: format!("etcd answered the create with revision {revision}"),
                });
            return match token {
                Ok(token) => Ok(Some((
                    FencingToken(token),
                    EtcdGrant {
                        id,
                        keeper: tokio::sync::Mutex::new(None),
                    },
                ))),
                Err(e) => {
                    self.revoke_later(id);
                    Err(e)
                }
            };
        }
        self.revoke_later(id);
        // Held by someone: check what holds it is a lease record.
        for op in response.op_responses() {
            if let TxnOpResponse::Get(get) = op
                && let Some(kv) = get.kvs().first()
            {
                parse_lease_value(&key, kv).map_err(|reason| LeaseError::Malformed {
                    lease: name.to_owned(),
                    reason,
                })?;
            }
        }
        Ok(None)
    }

    async fn renew(
        &self,
        name: &str,
        _owner: &str,
        token: FencingToken,
        grant: &EtcdGrant,
        _settings: &LeaseSettings,
    ) -> Result<(), RenewError> {
        let mut client = self.client.clone();
        {
            let mut keeper = grant.keeper.lock().await;
            if keeper.is_none() {
                *keeper = Some(
                    client
                        .lease_keep_alive(grant.id)
                        .await
                        .map_err(|e| RenewError::Failed(format!("etcd keep-alive stream: {e}")))?,
                );
            }
            let Some((sender, stream)) = keeper.as_mut() else {
                return Err(RenewError::Failed("no keep-alive stream".to_owned()));
            };
            if let Err(e) = sender.keep_alive().await {
                *keeper = None;
                return Err(RenewError::Failed(format!("etcd keep-alive: {e}")));
            }
            match stream.message().await {
                Ok(Some(response)) if response.ttl() > 0 => {}
                Ok(Some(_)) => {
                    return Err(RenewError::Gone(format!(
                        "etcd lease {:x} has expired or was revoked",
                        grant.id
                    )));
                }
                Ok(None) => {
                    *keeper = None;
                    return Err(RenewError::Failed(
                        "etcd closed the keep-alive stream".to_owned(),
                    ));
                }
                Err(e) => {
                    *keeper = None;
                    return Err(RenewError::Failed(format!("etcd keep-alive: {e}")));
                }
            }
        }
        // The etcd lease lives; is the key still this grant's? (Deleting it revokes.)
        let key = self.key(name);
        let response = client
            .get(key.clone(), None)
            .await
            .map_err(|e| RenewError::Failed(format!("etcd get {key:?}: {e}")))?;
        match response.kvs().first() {
            Some(kv) if kv.create_revision() == token.0 as i64 && kv.lease() == grant.id => Ok(()),
            Some(_) => Err(RenewError::Gone(format!(
                "etcd key {key:?} now belongs to another grant"
            ))),
            None => Err(RenewError::Gone(format!("etcd key {key:?} was deleted"))),
        }
    }

    async fn release(
        &self,
        name: &str,
        _owner: &str,
        _token: FencingToken,
        grant: &EtcdGrant,
    ) -> Result<(), LeaseError> {
        let mut client = self.client.clone();
        match tokio::time::timeout(self.timeout, client.lease_revoke(grant.id)).await {
            Ok(Ok(_)) => Ok(()),
            // Already expired or revoked: the grant has ended either way.
            Ok(Err(e)) if is_lease_not_found(&e) => Ok(()),
            Ok(Err(e)) => Err(unavailable(name, "etcd lease revoke", e)),
            Err(_) => Err(unavailable(
                name,
                "etcd lease revoke",
                format!("no answer within {:?}", self.timeout),
            )),
        }
    }
}

/// A key's lease record and where it stands: (record, token = `create_revision`, etcd lease).
type CurrentGrant = (LeaseValue, FencingToken, i64);

impl EtcdLeaseStore {
    /// The grant of `name` as etcd holds it, if the key exists.
    async fn current(&self, name: &str) -> Result<Option<CurrentGrant>, LeaseError> {
        let mut client = self.client.clone();
        let key = self.key(name);
        let response = self
            .bounded(name, "etcd get", client.get(key.clone(), None))
            .await?;
        let Some(kv) = response.kvs().first() else {
            return Ok(None);
        };
        let value = parse_lease_value(&key, kv).map_err(|reason| LeaseError::Malformed {
            lease: name.to_owned(),
            reason,
        })?;
        let token = u64::try_from(kv.create_revision()).unwrap_or(0);
        Ok(Some((value, FencingToken(token), kv.lease())))
    }

    /// Keeps etcd lease `id` alive once: its TTL now, in seconds (0 or less: it is gone).
    async fn keep_alive_once(&self, name: &str, id: i64) -> Result<i64, LeaseError> {
        let mut client = self.client.clone();
        let once = async {
            let (mut keeper, mut stream) = client.lease_keep_alive(id).await?;
            keeper.keep_alive().await?;
            Ok::<_, etcd_client::Error>(stream.message().await?.map_or(0, |r| r.ttl()))
        };
        self.bounded(name, "etcd keep-alive", once).await
    }

    /// The stored grant of `name` held by `owner` with `token`, renewed now; `None` when that
    /// grant is not held.
    async fn renew_stored(
        &self,
        name: &str,
        owner: &str,
        token: FencingToken,
    ) -> Result<Option<StoredGrant>, LeaseError> {
        let Some((value, held, id)) = self.current(name).await? else {
            return Ok(None);
        };
        if value.owner != owner || held != token {
            return Ok(None);
        }
        let ttl = self.keep_alive_once(name, id).await?;
        Ok((ttl > 0).then(|| StoredGrant {
            owner: value.owner,
            token,
            ttl: Duration::from_secs(ttl.unsigned_abs()),
            expires_in: Duration::from_secs(ttl.unsigned_abs()),
        }))
    }
}

/// Grants on etcd for a service that holds them for remote clients: expiry by etcd's lease
/// TTL. etcd grants whole seconds, at least 1; acquiring again while holding renews the grant
/// with the TTL it was first given (an etcd lease's TTL cannot change).
impl StoredGrants for EtcdLeases {
    fn acquire(&self, name: &str, owner: &str, ttl: Duration) -> LeaseFuture<Option<StoredGrant>> {
        let store = Arc::clone(&self.store);
        let (name, owner) = (name.to_owned(), owner.to_owned());
        Box::pin(async move {
            let settings = LeaseSettings::with_ttl(ttl).map_err(|e| LeaseError::Settings {
                lease: name.clone(),
                reason: e.to_string(),
            })?;
            store.check_settings(&name, &settings)?;
            if let Some((value, token, _)) = store.current(&name).await? {
                if value.owner != owner {
                    return Ok(None);
                }
                return store.renew_stored(&name, &owner, token).await;
            }
            let granted = store
                .try_acquire(&name, &owner, &settings, GrantEnded::default())
                .await?;
            // The etcd lease outlives the dropped grant data: only keep-alives renew it.
            Ok(granted.map(|(token, _)| StoredGrant {
                owner,
                token,
                ttl,
                expires_in: ttl,
            }))
        })
    }

    fn renew(
        &self,
        name: &str,
        owner: &str,
        token: FencingToken,
    ) -> LeaseFuture<Option<StoredGrant>> {
        let store = Arc::clone(&self.store);
        let (name, owner) = (name.to_owned(), owner.to_owned());
        Box::pin(async move { store.renew_stored(&name, &owner, token).await })
    }

    fn release(&self, name: &str, owner: &str, token: FencingToken) -> LeaseFuture<bool> {
        let store = Arc::clone(&self.store);
        let (name, owner) = (name.to_owned(), owner.to_owned());
        Box::pin(async move {
            let Some((value, held, id)) = store.current(&name).await? else {
                return Ok(false);
            };
            if value.owner != owner || held != token {
                return Ok(false);
            }
            let mut client = store.client.clone();
            match tokio::time::timeout(store.timeout, client.lease_revoke(id)).await {
                Ok(Ok(_)) => Ok(true),
                Ok(Err(e)) if is_lease_not_found(&e) => Ok(false),
                Ok(Err(e)) => Err(unavailable(&name, "etcd lease revoke", e)),
                Err(_) => Err(unavailable(
                    &name,
                    "etcd lease revoke",
                    format!("no answer within {:?}", store.timeout),
                )),
            }
        })
    }

    fn holder(&self, name: &str) -> LeaseFuture<Option<StoredGrant>> {
        let store = Arc::clone(&self.store);
        let name = name.to_owned();
        Box::pin(async move {
            let Some((value, token, id)) = store.current(&name).await? else {
                return Ok(None);
            };
            let mut client = store.client.clone();
            let lease = store
                .bounded(
                    &name,
                    "etcd lease time-to-live",
                    client.lease_time_to_live(id, None),
                )
                .await?;
            Ok((lease.ttl() > 0).then(|| StoredGrant {
                owner: value.owner,
                token,
                ttl: Duration::from_secs(lease.granted_ttl().unsigned_abs()),
                expires_in: Duration::from_secs(lease.ttl().unsigned_abs()),
            }))
        })
    }
}

/// Whether etcd answered that the etcd lease does not exist (expired or revoked): gRPC status
/// `NOT_FOUND`, which etcd sends for `ErrLeaseNotFound` and nothing else a revoke can meet.
fn is_lease_not_found(error: &etcd_client::Error) -> bool {
    matches!(error, etcd_client::Error::GRpcStatus(status) if status.code() == tonic::Code::NotFound)
}

/// The actor directory on etcd; see the module header for the layout.
#[derive(Clone)]
pub struct EtcdDirectory {
    inner: Arc<DirInner>,
}

struct DirInner {
    client: Client,
    prefix: String,
    timeout: Duration,
}

impl std::fmt::Debug for EtcdDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdDirectory")
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

fn dir_unavailable(what: &str, e: impl std::fmt::Display) -> DirectoryError {
    DirectoryError::Unavailable(format!("etcd {what}: {e}"))
}

fn revision_of(raw: i64) -> Revision {
    Revision(u64::try_from(raw).unwrap_or(0))
}

impl EtcdDirectory {
    /// The directory under `prefix` (must end with `/`), through `client`.
    pub fn new(client: Client, prefix: &str) -> Result<Self, InvalidPrefix> {
        check_prefix(prefix)?;
        Ok(Self {
            inner: Arc::new(DirInner {
                client,
                prefix: prefix.to_owned(),
                timeout: DEFAULT_REQUEST_TIMEOUT,
            }),
        })
    }

    /// The etcd key of `actor`'s claim.
    #[must_use]
    pub fn key(&self, actor: &str) -> String {
        self.inner.key(actor)
    }
}

impl DirInner {
    fn claims_prefix(&self) -> String {
        format!("{}claims/", self.prefix)
    }

    fn key(&self, actor: &str) -> String {
        format!("{}claims/{actor}", self.prefix)
    }

    async fn bounded<T, E: std::fmt::Display>(
        &self,
        what: &str,
        fut: impl Future<Output = Result<T, E>>,
    ) -> Result<T, DirectoryError> {
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(dir_unavailable(what, e)),
            Err(_) => Err(dir_unavailable(
                what,
                format!("no answer within {:?}", self.timeout),
            )),
        }
    }

    /// The actor id of a claim key, or why it is not one.
    fn actor_of(&self, key: &[u8]) -> Result<String, DirectoryError> {
        let text = std::str::from_utf8(key).map_err(|e| DirectoryError::Malformed {
            key: String::from_utf8_lossy(key).into_owned(),
            reason: format!("key is not UTF-8: {e}"),
        })?;
        text.strip_prefix(&self.claims_prefix())
            .map(str::to_owned)
            .ok_or_else(|| DirectoryError::Malformed {
                key: text.to_owned(),
                reason: format!("key is outside {:?}", self.claims_prefix()),
            })
    }

    fn parse_host(&self, key: &[u8], value: &[u8]) -> Result<String, DirectoryError> {
        let parsed: ClaimValue =
            serde_json::from_slice(value).map_err(|e| DirectoryError::Malformed {
                key: String::from_utf8_lossy(key).into_owned(),
                reason: format!(
                    "value {:?} is not a claim ({e}); expected JSON {{\"host\": string}}",
                    String::from_utf8_lossy(value)
                ),
            })?;
        directory::validate_host(&parsed.host).map_err(|e| DirectoryError::Malformed {
            key: String::from_utf8_lossy(key).into_owned(),
            reason: e.to_string(),
        })?;
        Ok(parsed.host)
    }

    fn parse_claim(&self, kv: &KeyValue) -> Result<Claim, DirectoryError> {
        Ok(Claim {
            actor: self.actor_of(kv.key())?,
            host: self.parse_host(kv.key(), kv.value())?,
            revision: revision_of(kv.create_revision()),
        })
    }

    async fn claim(&self, actor: String, host: String) -> Result<ClaimOutcome, DirectoryError> {
        let key = self.key(&actor);
        let value = serde_json::to_vec(&ClaimValue { host: host.clone() })
            .map_err(|e| DirectoryError::Provider(e.to_string()))?;
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), value, None)])
            .or_else([TxnOp::get(key.clone(), None)]);
        let mut client = self.client.clone();
        let response = self.bounded("txn (claim)", client.txn(txn)).await?;
        if response.succeeded() {
            let revision = revision_of(response.header().map_or(0, |h| h.revision()));
            return Ok(ClaimOutcome::Claimed(Claim {
                actor,
                host,
                revision,
            }));
        }
        for op in response.op_responses() {
            if let TxnOpResponse::Get(get) = op
                && let Some(kv) = get.kvs().first()
            {
                let existing = self.parse_claim(kv)?;
                return Ok(if existing.host == host {
                    ClaimOutcome::Claimed(existing)
                } else {
                    ClaimOutcome::Owned(existing)
                });
            }
        }
        Err(DirectoryError::Provider(format!(
            "etcd refused the create of {key:?} but answered no current value"
        )))
    }

    async fn lookup(&self, actor: String) -> Result<Option<Claim>, DirectoryError> {
        let mut client = self.client.clone();
        let response = self
            .bounded("get", client.get(self.key(&actor), None))
            .await?;
        response
            .kvs()
            .first()
            .map(|kv| self.parse_claim(kv))
            .transpose()
    }

    /// Delete `kv` only if it is still the version read.
    async fn delete_if_unchanged(&self, kv: &KeyValue) -> Result<bool, DirectoryError> {
        let txn = Txn::new()
            .when([Compare::mod_revision(
                kv.key().to_vec(),
                CompareOp::Equal,
                kv.mod_revision(),
            )])
            .and_then([TxnOp::delete(kv.key().to_vec(), None)]);
        let mut client = self.client.clone();
        Ok(self
            .bounded("txn (delete)", client.txn(txn))
            .await?
            .succeeded())
    }

    async fn release(&self, actor: String, host: String) -> Result<bool, DirectoryError> {
        let key = self.key(&actor);
        loop {
            let mut client = self.client.clone();
            let response = self.bounded("get", client.get(key.clone(), None)).await?;
            let Some(kv) = response.kvs().first() else {
                return Ok(false);
            };
            if self.parse_claim(kv)?.host != host {
                return Ok(false);
            }
            if self.delete_if_unchanged(kv).await? {
                return Ok(true);
            }
            // Changed between read and delete: read again.
        }
    }

    async fn evict_host(&self, host: String) -> Result<Vec<String>, DirectoryError> {
        let mut client = self.client.clone();
        let response = self
            .bounded(
                "get (evict)",
                client.get(self.claims_prefix(), Some(GetOptions::new().with_prefix())),
            )
            .await?;
        let mut evicted = Vec::new();
        for kv in response.kvs() {
            let claim = match self.parse_claim(kv) {
                Ok(claim) => claim,
                Err(e) => {
                    tracing::warn!(error = %e, "skipping a malformed claim while evicting {host}");
                    continue;
                }
            };
            // One transaction per claim, so every release has its own revision.
            if claim.host == host && self.delete_if_unchanged(kv).await? {
                evicted.push(claim.actor);
            }
        }
        Ok(evicted)
    }

    async fn snapshot(&self) -> Result<DirectorySnapshot, DirectoryError> {
        let mut client = self.client.clone();
        let response = self
            .bounded(
                "get (snapshot)",
                client.get(self.claims_prefix(), Some(GetOptions::new().with_prefix())),
            )
            .await?;
        let claims = response
            .kvs()
            .iter()
            .map(|kv| self.parse_claim(kv))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(DirectorySnapshot {
            claims,
            revision: revision_of(response.header().map_or(0, |h| h.revision())),
        })
    }

    fn event(&self, event: &etcd_client::Event) -> Result<DirectoryEvent, DirectoryError> {
        let kv = event.kv().ok_or_else(|| DirectoryError::Malformed {
            key: self.claims_prefix(),
            reason: "etcd watch event without a key".to_owned(),
        })?;
        let actor = self.actor_of(kv.key())?;
        let revision = revision_of(kv.mod_revision());
        let change = match event.event_type() {
            EventType::Put => DirectoryChange::Claimed {
                actor,
                host: self.parse_host(kv.key(), kv.value())?,
            },
            EventType::Delete => {
                let prev = event.prev_kv().ok_or_else(|| DirectoryError::Malformed {
                    key: String::from_utf8_lossy(kv.key()).into_owned(),
                    reason: format!(
                        "etcd reported the delete at revision {revision} without the previous value"
                    ),
                })?;
                DirectoryChange::Released {
                    actor,
                    host: self.parse_host(prev.key(), prev.value())?,
                }
            }
        };
        Ok(DirectoryEvent { revision, change })
    }
}

impl Directory for EtcdDirectory {
    fn claim(&self, actor: &str, host: &str) -> DirectoryFuture<ClaimOutcome> {
        let inner = Arc::clone(&self.inner);
        let (actor, host) = (actor.to_owned(), host.to_owned());
        Box::pin(async move {
            directory::validate_actor(&actor)?;
            directory::validate_host(&host)?;
            inner.claim(actor, host).await
        })
    }

    fn lookup(&self, actor: &str) -> DirectoryFuture<Option<Claim>> {
        let inner = Arc::clone(&self.inner);
        let actor = actor.to_owned();
        Box::pin(async move {
            directory::validate_actor(&actor)?;
            inner.lookup(actor).await
        })
    }

    fn release(&self, actor: &str, host: &str) -> DirectoryFuture<bool> {
        let inner = Arc::clone(&self.inner);
        let (actor, host) = (actor.to_owned(), host.to_owned());
        Box::pin(async move {
            directory::validate_actor(&actor)?;
            directory::validate_host(&host)?;
            inner.release(actor, host).await
        })
    }

    fn evict_host(&self, host: &str) -> DirectoryFuture<Vec<String>> {
        let inner = Arc::clone(&self.inner);
        let host = host.to_owned();
        Box::pin(async move {
            directory::validate_host(&host)?;
            inner.evict_host(host).await
        })
    }

    fn snapshot(&self) -> DirectoryFuture<DirectorySnapshot> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move { inner.snapshot().await })
    }

    fn watch(&self, after: Revision) -> DirectoryFuture<DirectoryWatch> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let start = i64::try_from(after.0 + 1)
                .map_err(|_| DirectoryError::Invalid(format!("revision {after} is too large")))?;
            let options = WatchOptions::new()
                .with_prefix()
                .with_prev_key()
                .with_start_revision(start);
            let mut client = inner.client.clone();
            let mut stream = inner
                .bounded("watch", client.watch(inner.claims_prefix(), Some(options)))
                .await?;
            let (tx, rx) = mpsc::channel(256);
            let task = tokio::spawn(async move {
                loop {
                    let message = match stream.message().await {
                        Ok(Some(message)) => message,
                        Ok(None) => return,
                        Err(e) => {
                            let _ = tx.send(Err(dir_unavailable("watch", e))).await;
                            return;
                        }
                    };
                    if message.compact_revision() > 0 {
                        let _ = tx
                            .send(Err(DirectoryError::Compacted {
                                requested: after,
                                oldest: revision_of(message.compact_revision()),
                            }))
                            .await;
                        return;
                    }
                    if message.canceled() {
                        let _ = tx
                            .send(Err(DirectoryError::Provider(format!(
                                "etcd cancelled the watch: {}",
                                message.cancel_reason()
                            ))))
                            .await;
                        return;
                    }
                    for event in message.events() {
                        let event = inner.event(event);
                        let failed = event.is_err();
                        if tx.send(event).await.is_err() || failed {
                            return;
                        }
                    }
                }
            });
            Ok(DirectoryWatch::new(rx, Some(task.abort_handle())))
        })
    }
}
