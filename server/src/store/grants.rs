//! Coordination grants on the embedded SQLite store ([`SqliteGrants`]): the
//! [`StoredGrants`] of a server without PostgreSQL or etcd, kept in the store's file so a
//! restart (even a SIGKILL) ends no grant.
//!
//! # Expiry
//! A grant's row holds its TTL and its expiry in epoch milliseconds (`expires_at_ms`). Every
//! statement reads the clock in SQL (`julianday('now')` in milliseconds: SQLite answers the
//! same value for every use within one statement), and judges "expired" as
//! `expires_at_ms <= now`: an acquire takes over, a renewal or release is refused, `GET` shows
//! nothing, all by the same comparison. It is the host's wall clock, the only clock that
//! survives a restart: a clock stepped back lengthens the grants alive by the step, a clock
//! stepped forward shortens them (NTP slewing only stretches time a little).
//!
//! # Tokens
//! Fencing tokens come from a one-row counter (`coordination_lease_tokens`) bumped in the
//! acquire's transaction, so they keep increasing across holders and across restarts.
//!
//! # Writes
//! The grants are written straight through the pool, not through the ingest writer: SQLite's
//! busy timeout makes them wait for at most the ingest transaction in progress (one bounded
//! chunk, see `sqlite`). A database that stays locked answers `unavailable` (503).

use std::time::Duration;

use sqlx::SqlitePool;
use troupe_lease::lease::stored::{StoredGrant, StoredGrants};
use troupe_lease::lease::{FencingToken, LeaseError, LeaseFuture};

/// The current time in epoch milliseconds, read once per statement.
macro_rules! now_ms {
    () => {
        "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
    };
}

const BUMP_TOKEN: &str =
    "UPDATE coordination_lease_tokens SET last = last + 1 WHERE id = 1 RETURNING last";

/// A free or expired name is granted with the fresh token; a name this owner holds keeps its
/// token and lives `ttl` from now; a name another owner holds unexpired is left (no row).
const ACQUIRE: &str = concat!(
    "INSERT INTO coordination_leases AS l (name, owner, token, ttl_ms, expires_at_ms) \
     VALUES ($1, $2, $3, $4, ",
    now_ms!(),
    " + $4) \
     ON CONFLICT (name) DO UPDATE \
       SET token = CASE WHEN l.expires_at_ms <= ",
    now_ms!(),
    " THEN excluded.token ELSE l.token END, \
           owner = excluded.owner, ttl_ms = excluded.ttl_ms, \
           expires_at_ms = excluded.expires_at_ms \
       WHERE l.expires_at_ms <= ",
    now_ms!(),
    " OR l.owner = excluded.owner \
     RETURNING token"
);

const RENEW: &str = concat!(
    "UPDATE coordination_leases SET expires_at_ms = ",
    now_ms!(),
    " + ttl_ms \
     WHERE name = $1 AND owner = $2 AND token = $3 AND expires_at_ms > ",
    now_ms!(),
    " RETURNING ttl_ms"
);

const RELEASE: &str = concat!(
    "DELETE FROM coordination_leases \
     WHERE name = $1 AND owner = $2 AND token = $3 AND expires_at_ms > ",
    now_ms!()
);

const HOLDER: &str = concat!(
    "SELECT owner, token, ttl_ms, expires_at_ms - ",
    now_ms!(),
    " FROM coordination_leases WHERE name = $1 AND expires_at_ms > ",
    now_ms!()
);

/// Coordination grants in the SQLite store's file; see the module header.
#[derive(Debug, Clone)]
pub struct SqliteGrants {
    pool: SqlitePool,
}

impl SqliteGrants {
    pub(super) fn new(pool: SqlitePool) -> Self {
        Self { pool }
    }
}

/// A failed statement: the store is away or locked (retry), named with the operation.
fn unavailable(lease: &str, what: &str, e: &sqlx::Error) -> LeaseError {
    LeaseError::Unavailable {
        lease: lease.to_owned(),
        reason: format!("sqlite store: {what}: {e}"),
    }
}

fn millis(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

fn token_value(lease: &str, token: i64) -> Result<FencingToken, LeaseError> {
    u64::try_from(token)
        .map(FencingToken)
        .map_err(|_| LeaseError::Malformed {
            lease: lease.to_owned(),
            reason: format!("stored fencing token {token} is negative"),
        })
}

/// A token as SQLite stores it: one above `i64::MAX` matches no row.
fn stored_token(token: FencingToken) -> i64 {
    i64::try_from(token.0).unwrap_or(-1)
}

async fn acquire_tx(
    pool: &SqlitePool,
    name: &str,
    owner: &str,
    ttl_ms: i64,
) -> Result<Option<i64>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let fresh: i64 = sqlx::query_scalar(BUMP_TOKEN).fetch_one(&mut *tx).await?;
    let token: Option<i64> = sqlx::query_scalar(ACQUIRE)
        .bind(name)
        .bind(owner)
        .bind(fresh)
        .bind(ttl_ms)
        .fetch_optional(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(token)
}

impl StoredGrants for SqliteGrants {
    fn acquire(&self, name: &str, owner: &str, ttl: Duration) -> LeaseFuture<Option<StoredGrant>> {
        let pool = self.pool.clone();
        let (name, owner) = (name.to_owned(), owner.to_owned());
        Box::pin(async move {
            let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
            let token = acquire_tx(&pool, &name, &owner, ttl_ms)
                .await
                .map_err(|e| unavailable(&name, "acquire", &e))?;
            token
                .map(|token| {
                    Ok(StoredGrant {
                        token: token_value(&name, token)?,
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
        let pool = self.pool.clone();
        let (name, owner) = (name.to_owned(), owner.to_owned());
        Box::pin(async move {
            let ttl: Option<i64> = sqlx::query_scalar(RENEW)
                .bind(&name)
                .bind(&owner)
                .bind(stored_token(token))
                .fetch_optional(&pool)
                .await
                .map_err(|e| unavailable(&name, "renew", &e))?;
            Ok(ttl.map(|ttl| StoredGrant {
                owner,
                token,
                ttl: millis(ttl),
                expires_in: millis(ttl),
            }))
        })
    }

    fn release(&self, name: &str, owner: &str, token: FencingToken) -> LeaseFuture<bool> {
        let pool = self.pool.clone();
        let (name, owner) = (name.to_owned(), owner.to_owned());
        Box::pin(async move {
            let done = sqlx::query(RELEASE)
                .bind(&name)
                .bind(&owner)
                .bind(stored_token(token))
                .execute(&pool)
                .await
                .map_err(|e| unavailable(&name, "release", &e))?;
            Ok(done.rows_affected() == 1)
        })
    }

    fn holder(&self, name: &str) -> LeaseFuture<Option<StoredGrant>> {
        let pool = self.pool.clone();
        let name = name.to_owned();
        Box::pin(async move {
            let row: Option<(String, i64, i64, i64)> = sqlx::query_as(HOLDER)
                .bind(&name)
                .fetch_optional(&pool)
                .await
                .map_err(|e| unavailable(&name, "read", &e))?;
            row.map(|(owner, token, ttl, left)| {
                Ok(StoredGrant {
                    owner,
                    token: token_value(&name, token)?,
                    ttl: millis(ttl),
                    expires_in: millis(left),
                })
            })
            .transpose()
        })
    }
}
