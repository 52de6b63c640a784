//! Leases and the actor directory in PostgreSQL, for deployments that already run it.
//!
//! Everything lives in one dedicated schema, created on first use (`CREATE ... IF NOT
//! EXISTS` under an advisory lock, so concurrent nodes may start together):
//! - `leases(name, owner, token, expires_at, ttl_ms)`: a grant is a row; `token` comes from the
//!   sequence `lease_tokens`, so it grows with every new holder. Expiry is judged by the
//!   server's clock (`now()`): acquire inserts, or takes over a row whose `expires_at` has
//!   passed, in one `INSERT ... ON CONFLICT DO UPDATE ... WHERE expires_at <= now()`; renew
//!   is an optimistic `UPDATE ... WHERE owner AND token AND expires_at > now()`; release
//!   deletes the row only with its own token. Acquires of one name are serialised with a
//!   transaction-scoped advisory lock, so tokens are taken in the order grants happen.
//!   `ttl_ms` (added to older schemas by `ALTER TABLE ... ADD COLUMN IF NOT EXISTS`) is the
//!   grant's TTL, so that [`StoredGrants`] can renew a grant by name, owner and token alone:
//!   any control-plane replica serves a renewal, and a restart of one ends no grant.
//! - `claims(actor, host, revision)` and the change log `claim_changes(revision, actor, host,
//!   kind)`: every directory write takes one advisory lock for the schema, takes its revision
//!   from the sequence `claim_revisions`, and commits before the next writer starts — so
//!   revisions become visible in order and a watcher that has read revision `r` has seen
//!   everything before it. Watches poll the change log, woken by `LISTEN/NOTIFY` (a statement
//!   trigger on `claim_changes`) and at least every [`WATCH_POLL`].
//! - The change log grows until pruned with [`PgCoordination::prune_changes`]; a watch that
//!   asks for pruned history ends with [`DirectoryError::Compacted`].

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPool, PgPoolOptions};
use sqlx::{Postgres, Row, Transaction};
use tokio::sync::mpsc;
use troupe_lease::directory::{
    self, Claim, ClaimOutcome, Directory, DirectoryChange, DirectoryError, DirectoryEvent,
    DirectoryFuture, DirectorySnapshot, DirectoryWatch, Revision,
};
use troupe_lease::lease::{FencingToken, LeaseError, LeaseSettings};

use troupe_lease::lease::LeaseFuture;
use troupe_lease::lease::store::{GrantEnded, LeaseStore, RenewError};
use troupe_lease::lease::stored::{StoredGrant, StoredGrants};

/// How often a watch polls the change log when no notification arrives.
pub const WATCH_POLL: Duration = Duration::from_millis(500);

/// How long one database operation may take before it counts as failed.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The connection pool size [`PgCoordination::connect`] uses.
pub const DEFAULT_POOL_SIZE: u32 = 16;

/// Leases and the directory in one PostgreSQL schema.
#[derive(Clone)]
pub struct PgCoordination {
    inner: Arc<Shared>,
}

struct Shared {
    pool: PgPool,
    schema: String,
    timeout: Duration,
}

impl std::fmt::Debug for PgCoordination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgCoordination")
            .field("schema", &self.inner.schema)
            .finish_non_exhaustive()
    }
}

/// Why the schema could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum PgSetupError {
    /// The schema name is not a plain identifier.
    #[error(
        "schema name {0:?} is not allowed: use 1 to 40 characters of a-z, 0-9 and _, starting with a letter or _"
    )]
    SchemaName(String),
    /// The database refused or could not be reached.
    #[error("postgres: {what}: {source}")]
    Database {
        /// What was being done.
        what: &'static str,
        /// The driver's error.
        source: sqlx::Error,
    },
}

fn valid_schema(schema: &str) -> bool {
    let mut chars = schema.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
        && schema.len() <= 40
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

impl PgCoordination {
    /// Connect to `url` and set up `schema`.
    pub async fn connect(url: &str, schema: &str) -> Result<Self, PgSetupError> {
        let pool = PgPoolOptions::new()
            .max_connections(DEFAULT_POOL_SIZE)
            .acquire_timeout(Duration::from_secs(5))
            .connect(url)
            .await
            .map_err(|source| PgSetupError::Database {
                what: "connect",
                source,
            })?;
        Self::new(pool, schema).await
    }

    /// Use `pool` and set up `schema` (a plain lower-case identifier).
    pub async fn new(pool: PgPool, schema: &str) -> Result<Self, PgSetupError> {
        if !valid_schema(schema) {
            return Err(PgSetupError::SchemaName(schema.to_owned()));
        }
        let s = schema;
        let ddl = format!(
            r#"
            SELECT pg_advisory_xact_lock(hashtext('troupe-coordination-setup'));
            CREATE SCHEMA IF NOT EXISTS "{s}";
            CREATE TABLE IF NOT EXISTS "{s}".leases (
                name text PRIMARY KEY,
                owner text NOT NULL,
                token bigint NOT NULL,
                expires_at timestamptz NOT NULL
            );
            ALTER TABLE "{s}".leases ADD COLUMN IF NOT EXISTS ttl_ms bigint;
            CREATE SEQUENCE IF NOT EXISTS "{s}".lease_tokens;
            CREATE TABLE IF NOT EXISTS "{s}".claims (
                actor text PRIMARY KEY,
                host text NOT NULL,
                revision bigint NOT NULL
            );
            CREATE INDEX IF NOT EXISTS claims_by_host ON "{s}".claims (host);
            CREATE TABLE IF NOT EXISTS "{s}".claim_changes (
                revision bigint PRIMARY KEY,
                actor text NOT NULL,
                host text NOT NULL,
                kind text NOT NULL
            );
            CREATE SEQUENCE IF NOT EXISTS "{s}".claim_revisions;
            CREATE TABLE IF NOT EXISTS "{s}".claim_history (
                id boolean PRIMARY KEY DEFAULT true CHECK (id),
                pruned_through bigint NOT NULL DEFAULT 0
            );
            INSERT INTO "{s}".claim_history (id) VALUES (true) ON CONFLICT DO NOTHING;
            CREATE OR REPLACE FUNCTION "{s}".notify_claim_changes() RETURNS trigger
                LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_notify('troupe_dir_{s}', ''); RETURN NULL; END $$;
            DROP TRIGGER IF EXISTS claim_changes_notify ON "{s}".claim_changes;
            CREATE TRIGGER claim_changes_notify AFTER INSERT ON "{s}".claim_changes
                FOR EACH STATEMENT EXECUTE FUNCTION "{s}".notify_claim_changes();
            "#
        );
        let db = |what| move |source| PgSetupError::Database { what, source };
        let mut tx = pool.begin().await.map_err(db("begin"))?;
        sqlx::raw_sql(&ddl)
            .execute(&mut *tx)
            .await
            .map_err(db("create the schema"))?;
        tx.commit().await.map_err(db("commit the schema"))?;
        Ok(Self {
            inner: Arc::new(Shared {
                pool,
                schema: schema.to_owned(),
                timeout: DEFAULT_REQUEST_TIMEOUT,
            }),
        })
    }

    /// The schema in use.
    #[must_use]
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    /// The pool in use.
    #[must_use]
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// The leases in this schema.
    #[must_use]
    pub fn leases(&self) -> PgLeases {
        PgLeases {
            store: Arc::new(PgLeaseStore {
                shared: Arc::clone(&self.inner),
            }),
        }
    }

    /// The directory in this schema.
    #[must_use]
    pub fn directory(&self) -> PgDirectory {
        PgDirectory {
            shared: Arc::clone(&self.inner),
        }
    }

    /// Delete the directory's change log up to and including `through`; watches that ask to
    /// resume from before it end with [`DirectoryError::Compacted`].
    pub async fn prune_changes(&self, through: Revision) -> Result<(), DirectoryError> {
        let s = &self.inner.schema;
        let through = i64::try_from(through.0)
            .map_err(|_| DirectoryError::Invalid(format!("revision {through} is too large")))?;
        let mut tx = self.inner.begin_directory_write().await?;
        sqlx::query(&format!(
            r#"UPDATE "{s}".claim_history SET pruned_through = greatest(pruned_through, $1)"#
        ))
        .bind(through)
        .execute(&mut *tx)
        .await
        .map_err(db_error("prune"))?;
        sqlx::query(&format!(
            r#"DELETE FROM "{s}".claim_changes WHERE revision <= $1"#
        ))
        .bind(through)
        .execute(&mut *tx)
        .await
        .map_err(db_error("prune"))?;
        tx.commit().await.map_err(db_error("commit"))
    }
}

fn db_error(what: &'static str) -> impl Fn(sqlx::Error) -> DirectoryError {
    move |e| match e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => {
            DirectoryError::Unavailable(format!("postgres {what}: {e}"))
        }
        other => DirectoryError::Provider(format!("postgres {what}: {other}")),
    }
}

fn lease_error(lease: &str, what: &str, e: impl std::fmt::Display) -> LeaseError {
    LeaseError::Unavailable {
        lease: lease.to_owned(),
        reason: format!("postgres {what}: {e}"),
    }
}

/// A key for `pg_advisory_xact_lock`, stable across processes.
fn lock_key(text: &str) -> i64 {
    // FNV-1a, 64 bit.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    i64::from_ne_bytes(hash.to_ne_bytes())
}

impl Shared {
    async fn bounded<T>(
        &self,
        what: &'static str,
        fut: impl Future<Output = Result<T, DirectoryError>>,
    ) -> Result<T, DirectoryError> {
        tokio::time::timeout(self.timeout, fut)
            .await
            .unwrap_or_else(|_| {
                Err(DirectoryError::Unavailable(format!(
                    "postgres {what}: no answer within {:?}",
                    self.timeout
                )))
            })
    }

    /// A transaction holding the schema's directory write lock.
    async fn begin_directory_write(
        &self,
    ) -> Result<Transaction<'static, Postgres>, DirectoryError> {
        let mut tx = self.pool.begin().await.map_err(db_error("begin"))?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(lock_key(&format!("troupe-directory:{}", self.schema)))
            .execute(&mut *tx)
            .await
            .map_err(db_error("lock"))?;
        Ok(tx)
    }
}

/// Leases in PostgreSQL: a [`LeaseProvider`](troupe_lease::lease::LeaseProvider) whose handles keep the contract in
/// `troupe_lease::lease`.
#[derive(Clone)]
pub struct PgLeases {
    store: Arc<PgLeaseStore>,
}

impl std::fmt::Debug for PgLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLeases")
            .field("schema", &self.store.shared.schema)
            .finish_non_exhaustive()
    }
}

pub(crate) struct PgLeaseStore {
    shared: Arc<Shared>,
}

troupe_lease::lease_handle!(
    /// One owner's handle to a lease in PostgreSQL (made by [`PgLeases::handle`]).
    PgLease,
    PgLeaseStore,
    provided by PgLeases => store
);

impl PgLeaseStore {
    async fn bounded<T>(
        &self,
        lease: &str,
        what: &str,
        fut: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, LeaseError> {
        match tokio::time::timeout(self.shared.timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(lease_error(lease, what, e)),
            Err(_) => Err(lease_error(
                lease,
                what,
                format!("no answer within {:?}", self.shared.timeout),
            )),
        }
    }

    async fn acquire_tx(
        &self,
        name: &str,
        owner: &str,
        ttl: f64,
    ) -> Result<Result<Option<i64>, String>, sqlx::Error> {
        let s = &self.shared.schema;
        let mut tx = self.shared.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(lock_key(&format!("troupe-lease:{s}:{name}")))
            .execute(&mut *tx)
            .await?;
        let granted = sqlx::query(&format!(
            r#"INSERT INTO "{s}".leases (name, owner, token, expires_at, ttl_ms)
               VALUES ($1, $2, nextval('"{s}".lease_tokens'), now() + make_interval(secs => $3),
                       CAST(round($3 * 1000) AS bigint))
               ON CONFLICT (name) DO UPDATE
                 SET owner = EXCLUDED.owner, token = EXCLUDED.token, expires_at = EXCLUDED.expires_at,
                     ttl_ms = EXCLUDED.ttl_ms
                 WHERE "{s}".leases.expires_at <= now()
               RETURNING token"#
        ))
        .bind(name)
        .bind(owner)
        .bind(ttl)
        .fetch_optional(&mut *tx)
        .await?;
        let outcome = match granted {
            Some(row) => Ok(Some(row.try_get::<i64, _>("token")?)),
            None => {
                let row = sqlx::query(&format!(
                    r#"SELECT owner, token FROM "{s}".leases WHERE name = $1"#
                ))
                .bind(name)
                .fetch_one(&mut *tx)
                .await?;
                let holder: String = row.try_get("owner")?;
                let token: i64 = row.try_get("token")?;
                if holder.is_empty() || token <= 0 {
                    Err(format!(
                        "row {s}.leases[{name:?}] has owner {holder:?} and token {token}; a lease row needs a non-empty owner and a positive token"
                    ))
                } else {
                    Ok(None)
                }
            }
        };
        tx.commit().await?;
        Ok(outcome)
    }
}

impl LeaseStore for PgLeaseStore {
    type Grant = ();

    async fn try_acquire(
        &self,
        name: &str,
        owner: &str,
        settings: &LeaseSettings,
        _ended: GrantEnded,
    ) -> Result<Option<(FencingToken, ())>, LeaseError> {
        let ttl = settings.ttl().as_secs_f64();
        let outcome = self
            .bounded(name, "acquire", self.acquire_tx(name, owner, ttl))
            .await?
            .map_err(|reason| LeaseError::Malformed {
                lease: name.to_owned(),
                reason,
            })?;
        match outcome {
            None => Ok(None),
            Some(token) => u64::try_from(token)
                .ok()
                .filter(|t| *t > 0)
                .map(|t| Some((FencingToken(t), ())))
                .ok_or_else(|| LeaseError::Malformed {
                    lease: name.to_owned(),
                    reason: format!("the token sequence answered {token}"),
                }),
        }
    }

    async fn renew(
        &self,
        name: &str,
        owner: &str,
        token: FencingToken,
        _grant: &(),
        settings: &LeaseSettings,
    ) -> Result<(), RenewError> {
        let s = &self.shared.schema;
        let result = sqlx::query(&format!(
            r#"UPDATE "{s}".leases SET expires_at = now() + make_interval(secs => $4)
               WHERE name = $1 AND owner = $2 AND token = $3 AND expires_at > now()"#
        ))
        .bind(name)
        .bind(owner)
        .bind(token.0 as i64)
        .bind(settings.ttl().as_secs_f64())
        .execute(&self.shared.pool)
        .await
        .map_err(|e| RenewError::Failed(format!("postgres renew: {e}")))?;
        if result.rows_affected() == 1 {
            Ok(())
        } else {
            Err(RenewError::Gone(format!(
                "row {s}.leases[{name:?}] with token {token} is gone or expired"
            )))
        }
    }

    async fn release(
        &self,
        name: &str,
        _owner: &str,
        token: FencingToken,
        _grant: &(),
    ) -> Result<(), LeaseError> {
        let s = &self.shared.schema;
        let query = format!(r#"DELETE FROM "{s}".leases WHERE name = $1 AND token = $2"#);
        self.bounded(
            name,
            "release",
            sqlx::query(&query)
                .bind(name)
                .bind(token.0 as i64)
                .execute(&self.shared.pool),
        )
        .await?;
        Ok(())
    }
}

/// A stored grant's token, checked: the sequence only answers positive numbers.
fn stored_token(name: &str, token: i64) -> Result<FencingToken, LeaseError> {
    u64::try_from(token)
        .ok()
        .filter(|t| *t > 0)
        .map(FencingToken)
        .ok_or_else(|| LeaseError::Malformed {
            lease: name.to_owned(),
            reason: format!("the grant's token is {token}; tokens are positive"),
        })
}

/// Milliseconds as a duration (negative: zero).
fn millis(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

impl PgLeaseStore {
    /// [`StoredGrants::acquire`]: one upsert under the name's advisory lock. A row of another
    /// owner is taken over only once expired (a new token); a row of this owner keeps its
    /// token and lives `ttl` from now.
    async fn acquire_stored_tx(
        &self,
        name: &str,
        owner: &str,
        ttl_ms: i64,
    ) -> Result<Option<i64>, sqlx::Error> {
        let s = &self.shared.schema;
        let mut tx = self.shared.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(lock_key(&format!("troupe-lease:{s}:{name}")))
            .execute(&mut *tx)
            .await?;
        let token = sqlx::query_scalar(&format!(
            r#"INSERT INTO "{s}".leases AS l (name, owner, token, expires_at, ttl_ms)
               VALUES ($1, $2, nextval('"{s}".lease_tokens'),
                       now() + $3 * interval '1 millisecond', $3)
               ON CONFLICT (name) DO UPDATE
                 SET token = CASE WHEN l.expires_at <= now() THEN EXCLUDED.token ELSE l.token END,
                     owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at,
                     ttl_ms = EXCLUDED.ttl_ms
                 WHERE l.expires_at <= now() OR l.owner = EXCLUDED.owner
               RETURNING token"#
        ))
        .bind(name)
        .bind(owner)
        .bind(ttl_ms)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(token)
    }
}

/// Grants in the `leases` table for a service that holds them for remote clients: expiry by
/// the database's clock, so every replica of the service agrees on it.
impl StoredGrants for PgLeases {
    fn acquire(&self, name: &str, owner: &str, ttl: Duration) -> LeaseFuture<Option<StoredGrant>> {
        let store = Arc::clone(&self.store);
        let (name, owner) = (name.to_owned(), owner.to_owned());
        Box::pin(async move {
            let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
            let token = store
                .bounded(
                    &name,
                    "acquire",
                    store.acquire_stored_tx(&name, &owner, ttl_ms),
                )
                .await?;
            token
                .map(|token| {
                    Ok(StoredGrant {
                        token: stored_token(&name, token)?,
                        owner,
                        ttl,
                        expires_in: ttl,
                    })
                })
                .transpose()
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
        Box::pin(async move {
            let s = &store.shared.schema;
            let query = format!(
                r#"UPDATE "{s}".leases SET expires_at = now() + ttl_ms * interval '1 millisecond'
                   WHERE name = $1 AND owner = $2 AND token = $3 AND expires_at > now()
                     AND ttl_ms IS NOT NULL
                   RETURNING ttl_ms"#
            );
            let ttl: Option<i64> = store
                .bounded(
                    &name,
                    "renew",
                    sqlx::query_scalar(&query)
                        .bind(&name)
                        .bind(&owner)
                        .bind(i64::try_from(token.0).unwrap_or(-1))
                        .fetch_optional(&store.shared.pool),
                )
                .await?;
            Ok(ttl.map(|ttl| StoredGrant {
                owner,
                token,
                ttl: millis(ttl),
                expires_in: millis(ttl),
            }))
        })
    }

    fn release(&self, name: &str, owner: &str, token: FencingToken) -> LeaseFuture<bool> {
        let store = Arc::clone(&self.store);
        let (name, owner) = (name.to_owned(), owner.to_owned());
        Box::pin(async move {
            let s = &store.shared.schema;
            let query = format!(
                r#"DELETE FROM "{s}".leases
                   WHERE name = $1 AND owner = $2 AND token = $3 AND expires_at > now()"#
            );
            let deleted = store
                .bounded(
                    &name,
                    "release",
                    sqlx::query(&query)
                        .bind(&name)
                        .bind(&owner)
                        .bind(i64::try_from(token.0).unwrap_or(-1))
                        .execute(&store.shared.pool),
                )
                .await?;
            Ok(deleted.rows_affected() == 1)
        })
    }

    fn holder(&self, name: &str) -> LeaseFuture<Option<StoredGrant>> {
        let store = Arc::clone(&self.store);
        let name = name.to_owned();
        Box::pin(async move {
            let s = &store.shared.schema;
            let query = format!(
                r#"SELECT owner, token, ttl_ms,
                          CAST(ceil(extract(epoch FROM expires_at - now()) * 1000) AS bigint) AS left_ms
                   FROM "{s}".leases WHERE name = $1 AND expires_at > now()"#
            );
            let row: Option<(String, i64, Option<i64>, i64)> = store
                .bounded(
                    &name,
                    "read",
                    sqlx::query_as(&query)
                        .bind(&name)
                        .fetch_optional(&store.shared.pool),
                )
                .await?;
            row.map(|(owner, token, ttl, left)| {
                Ok(StoredGrant {
                    owner,
                    token: stored_token(&name, token)?,
                    // A row written before `ttl_ms` existed: what is left is all that is known.
                    ttl: millis(ttl.unwrap_or(left)),
                    expires_in: millis(left),
                })
            })
            .transpose()
        })
    }
}

/// The actor directory in PostgreSQL; see the module header.
#[derive(Clone)]
pub struct PgDirectory {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for PgDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgDirectory")
            .field("schema", &self.shared.schema)
            .finish_non_exhaustive()
    }
}

fn claim_from_row(schema: &str, row: &sqlx::postgres::PgRow) -> Result<Claim, DirectoryError> {
    let actor: String = row.try_get("actor").map_err(db_error("read claim"))?;
    let host: String = row.try_get("host").map_err(db_error("read claim"))?;
    let revision: i64 = row.try_get("revision").map_err(db_error("read claim"))?;
    let malformed = |reason: String| DirectoryError::Malformed {
        key: format!("{schema}.claims[{actor:?}]"),
        reason,
    };
    directory::validate_host(&host).map_err(|e| malformed(e.to_string()))?;
    let revision = u64::try_from(revision)
        .ok()
        .filter(|r| *r > 0)
        .ok_or_else(|| malformed(format!("revision {revision} is not positive")))?;
    Ok(Claim {
        actor,
        host,
        revision: Revision(revision),
    })
}

fn event_from_row(
    schema: &str,
    row: &sqlx::postgres::PgRow,
) -> Result<DirectoryEvent, DirectoryError> {
    let revision: i64 = row.try_get("revision").map_err(db_error("read change"))?;
    let actor: String = row.try_get("actor").map_err(db_error("read change"))?;
    let host: String = row.try_get("host").map_err(db_error("read change"))?;
    let kind: String = row.try_get("kind").map_err(db_error("read change"))?;
    let change = match kind.as_str() {
        "claimed" => DirectoryChange::Claimed { actor, host },
        "released" => DirectoryChange::Released { actor, host },
        other => {
            return Err(DirectoryError::Malformed {
                key: format!("{schema}.claim_changes[revision {revision}]"),
                reason: format!("kind {other:?} is neither \"claimed\" nor \"released\""),
            });
        }
    };
    Ok(DirectoryEvent {
        revision: Revision(u64::try_from(revision).unwrap_or(0)),
        change,
    })
}

impl PgDirectory {
    async fn claim(&self, actor: String, host: String) -> Result<ClaimOutcome, DirectoryError> {
        let s = &self.shared.schema;
        if let Some(existing) = self.lookup(actor.clone()).await? {
            return Ok(if existing.host == host {
                ClaimOutcome::Claimed(existing)
            } else {
                ClaimOutcome::Owned(existing)
            });
        }
        let mut tx = self.shared.begin_directory_write().await?;
        let inserted = sqlx::query(&format!(
            r#"INSERT INTO "{s}".claims (actor, host, revision)
               VALUES ($1, $2, nextval('"{s}".claim_revisions'))
               ON CONFLICT (actor) DO NOTHING
               RETURNING actor, host, revision"#
        ))
        .bind(&actor)
        .bind(&host)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error("claim"))?;
        let outcome = match inserted {
            Some(row) => {
                let claim = claim_from_row(s, &row)?;
                sqlx::query(&format!(
                    r#"INSERT INTO "{s}".claim_changes (revision, actor, host, kind)
                       VALUES ($1, $2, $3, 'claimed')"#
                ))
                .bind(claim.revision.0 as i64)
                .bind(&actor)
                .bind(&host)
                .execute(&mut *tx)
                .await
                .map_err(db_error("log claim"))?;
                ClaimOutcome::Claimed(claim)
            }
            None => {
                let row = sqlx::query(&format!(
                    r#"SELECT actor, host, revision FROM "{s}".claims WHERE actor = $1"#
                ))
                .bind(&actor)
                .fetch_one(&mut *tx)
                .await
                .map_err(db_error("lookup"))?;
                let existing = claim_from_row(s, &row)?;
                if existing.host == host {
                    ClaimOutcome::Claimed(existing)
                } else {
                    ClaimOutcome::Owned(existing)
                }
            }
        };
        tx.commit().await.map_err(db_error("commit"))?;
        Ok(outcome)
    }

    async fn lookup(&self, actor: String) -> Result<Option<Claim>, DirectoryError> {
        let s = &self.shared.schema;
        let row = sqlx::query(&format!(
            r#"SELECT actor, host, revision FROM "{s}".claims WHERE actor = $1"#
        ))
        .bind(&actor)
        .fetch_optional(&self.shared.pool)
        .await
        .map_err(db_error("lookup"))?;
        row.map(|r| claim_from_row(s, &r)).transpose()
    }

    /// Delete `host`'s claim of `actor` (all of `host`'s claims when `actor` is `None`) and
    /// log one release each, in actor order.
    async fn remove(&self, actor: Option<&str>, host: &str) -> Result<Vec<String>, DirectoryError> {
        let s = &self.shared.schema;
        let mut tx = self.shared.begin_directory_write().await?;
        let rows = sqlx::query(&format!(
            r#"WITH gone AS (DELETE FROM "{s}".claims
                               WHERE host = $1 AND ($2::text IS NULL OR actor = $2)
                               RETURNING actor, host)
               INSERT INTO "{s}".claim_changes (revision, actor, host, kind)
               SELECT nextval('"{s}".claim_revisions'), actor, host, 'released'
               FROM (SELECT actor, host FROM gone ORDER BY actor) AS ordered
               RETURNING actor"#
        ))
        .bind(host)
        .bind(actor)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error("release"))?;
        tx.commit().await.map_err(db_error("commit"))?;
        rows.iter()
            .map(|r| r.try_get::<String, _>("actor").map_err(db_error("release")))
            .collect()
    }

    async fn snapshot(&self) -> Result<DirectorySnapshot, DirectoryError> {
        let s = &self.shared.schema;
        let mut tx = self.shared.pool.begin().await.map_err(db_error("begin"))?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .execute(&mut *tx)
            .await
            .map_err(db_error("snapshot"))?;
        let rows = sqlx::query(&format!(
            r#"SELECT actor, host, revision FROM "{s}".claims ORDER BY actor"#
        ))
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error("snapshot"))?;
        let revision: i64 = sqlx::query_scalar(&format!(
            r#"SELECT greatest(
                   (SELECT coalesce(max(revision), 0) FROM "{s}".claim_changes),
                   (SELECT pruned_through FROM "{s}".claim_history))"#
        ))
        .fetch_one(&mut *tx)
        .await
        .map_err(db_error("snapshot"))?;
        tx.commit().await.map_err(db_error("commit"))?;
        Ok(DirectorySnapshot {
            claims: rows
                .iter()
                .map(|r| claim_from_row(s, r))
                .collect::<Result<_, _>>()?,
            revision: Revision(u64::try_from(revision).unwrap_or(0)),
        })
    }

    async fn pruned_through(&self) -> Result<Revision, DirectoryError> {
        let s = &self.shared.schema;
        let through: i64 = sqlx::query_scalar(&format!(
            r#"SELECT pruned_through FROM "{s}".claim_history"#
        ))
        .fetch_one(&self.shared.pool)
        .await
        .map_err(db_error("watch"))?;
        Ok(Revision(u64::try_from(through).unwrap_or(0)))
    }

    async fn watch(&self, after: Revision) -> Result<DirectoryWatch, DirectoryError> {
        let pruned = self.pruned_through().await?;
        if pruned > after {
            return Err(DirectoryError::Compacted {
                requested: after,
                oldest: Revision(pruned.0 + 1),
            });
        }
        let s = self.shared.schema.clone();
        let mut listener = PgListener::connect_with(&self.shared.pool)
            .await
            .map_err(db_error("listen"))?;
        listener
            .listen(&format!("troupe_dir_{s}"))
            .await
            .map_err(db_error("listen"))?;
        let pool = self.shared.pool.clone();
        let (tx, rx) = mpsc::channel(256);
        let task = tokio::spawn(async move {
            let mut last = after;
            let query = format!(
                r#"SELECT revision, actor, host, kind FROM "{s}".claim_changes
                   WHERE revision > $1 ORDER BY revision LIMIT 500"#
            );
            loop {
                let rows = match sqlx::query(&query)
                    .bind(last.0 as i64)
                    .fetch_all(&pool)
                    .await
                {
                    Ok(rows) => rows,
                    Err(e) => {
                        let _ = tx.send(Err(db_error("watch")(e))).await;
                        return;
                    }
                };
                let full = rows.len() == 500;
                for row in &rows {
                    let event = event_from_row(&s, row);
                    let failed = event.is_err();
                    if let Ok(event) = &event {
                        last = event.revision;
                    }
                    if tx.send(event).await.is_err() || failed {
                        return;
                    }
                }
                if full {
                    continue;
                }
                tokio::select! {
                    notified = listener.recv() => {
                        if let Err(e) = notified {
                            let _ = tx.send(Err(db_error("watch notification")(e))).await;
                            return;
                        }
                    }
                    () = tokio::time::sleep(WATCH_POLL) => {}
                    () = tx.closed() => return,
                }
            }
        });
        Ok(DirectoryWatch::new(rx, Some(task.abort_handle())))
    }
}

impl Directory for PgDirectory {
    fn claim(&self, actor: &str, host: &str) -> DirectoryFuture<ClaimOutcome> {
        let this = self.clone();
        let (actor, host) = (actor.to_owned(), host.to_owned());
        Box::pin(async move {
            directory::validate_actor(&actor)?;
            directory::validate_host(&host)?;
            let shared = Arc::clone(&this.shared);
            shared.bounded("claim", this.claim(actor, host)).await
        })
    }

    fn lookup(&self, actor: &str) -> DirectoryFuture<Option<Claim>> {
        let this = self.clone();
        let actor = actor.to_owned();
        Box::pin(async move {
            directory::validate_actor(&actor)?;
            let shared = Arc::clone(&this.shared);
            shared.bounded("lookup", this.lookup(actor)).await
        })
    }

    fn release(&self, actor: &str, host: &str) -> DirectoryFuture<bool> {
        let this = self.clone();
        let (actor, host) = (actor.to_owned(), host.to_owned());
        Box::pin(async move {
            directory::validate_actor(&actor)?;
            directory::validate_host(&host)?;
            let shared = Arc::clone(&this.shared);
            let removed = shared
                .bounded("release", this.remove(Some(&actor), &host))
                .await?;
            Ok(!removed.is_empty())
        })
    }

    fn evict_host(&self, host: &str) -> DirectoryFuture<Vec<String>> {
        let this = self.clone();
        let host = host.to_owned();
        Box::pin(async move {
            directory::validate_host(&host)?;
            let shared = Arc::clone(&this.shared);
            shared.bounded("evict", this.remove(None, &host)).await
        })
    }

    fn snapshot(&self) -> DirectoryFuture<DirectorySnapshot> {
        let this = self.clone();
        Box::pin(async move {
            let shared = Arc::clone(&this.shared);
            shared.bounded("snapshot", this.snapshot()).await
        })
    }

    fn watch(&self, after: Revision) -> DirectoryFuture<DirectoryWatch> {
        let this = self.clone();
        Box::pin(async move {
            let shared = Arc::clone(&this.shared);
            shared.bounded("watch", this.watch(after)).await
        })
    }
}
