//! The history store: PostgreSQL in production, an embedded SQLite file when no database is
//! configured. All SQL lives in this module and its children.
//!
//! # One SQL text, two backends
//! Reads and the current-state upserts are written once in the dialect both backends accept
//! (`$N` parameters, `ON CONFLICT … DO UPDATE`, integer time arithmetic) and expanded for each
//! pool by `with_pool!`. Only the bulk inserts differ: `UNNEST` arrays on PostgreSQL,
//! multi-row `INSERT … VALUES` on SQLite.
//!
//! # Ingest
//! A batch is written in one transaction: the agent's row, the batch's `(agent, sequence)`
//! marker, its events, dead letters and depth ticks, and the state changes. A marker that
//! already exists means a retry: the transaction is rolled back and nothing is written twice.
//! Any error rolls everything back, so a batch is stored whole or not at all. On SQLite every
//! batch goes through one writer task, and a big batch is written in bounded chunks with the
//! batches queued meanwhile served between them (see `sqlite`): a retry after a crash
//! midway resumes after the last stored chunk.

mod audit;
mod error;
mod grants;
mod ingest;
mod model;
mod partitions;
mod postgres;
mod rows;
mod sql;
mod sqlite;
mod state;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{PgPool, SqlitePool};
use troupe_protocol::{OperationKind, ReportBatch};

pub use audit::{AuditFilter, AuditOutcome, AuditRow, AuditScope, MAX_REFUSED, NewAuditEntry};
pub use error::StoreError;
pub use grants::SqliteGrants;
pub use model::{
    AgentRow, ClusterRow, ClusterSnapshot, DeadLetterGroup, DeadLetterRow, DepthTickRow, EventRow,
    IngestOutcome, MemberRow, MinuteCount, RouterRow, SILENT_HEALTH, SingletonRow,
    StreamDeadLetterRow, StreamPosition, Totals, current_incarnations, string_list,
};
pub use partitions::{DAYS_AHEAD, DayPartition, LOCK_TIMEOUT, PARTITIONED_TABLES, partition_name};

/// Runs `$body` with `$pool` bound to the backend's pool; the body is compiled once per backend.
macro_rules! with_pool {
    ($store:expr, |$pool:ident| $body:expr) => {
        match &$store.backend {
            Backend::Postgres($pool) => $body,
            Backend::Sqlite($pool) => $body,
        }
    };
}

/// How far (milliseconds) an event time may be ahead of the server's receive time before it is
/// stored as the receive time.
pub const DEFAULT_MAX_CLOCK_SKEW_MS: u64 = 5_000;

static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");
static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

/// Why the store cannot serve requests now.
#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    /// The database did not answer.
    #[error("the database does not answer: {0}")]
    Unreachable(#[source] StoreError),
    /// A migration this server needs is not applied.
    #[error("migration {version} ({description}) is not applied")]
    Migration {
        /// Its version.
        version: i64,
        /// Its description.
        description: String,
    },
}

/// Which backend a [`Store`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// PostgreSQL.
    Postgres,
    /// Embedded SQLite.
    Sqlite,
}

#[derive(Debug, Clone)]
enum Backend {
    Postgres(PgPool),
    Sqlite(SqlitePool),
}

/// The history store; cheap to clone (it is a pool).
#[derive(Debug, Clone)]
pub struct Store {
    backend: Backend,
    /// How far ahead of the receive time an event time may be before it is clamped.
    max_clock_skew_ms: i64,
    /// The single SQLite writer (none on PostgreSQL).
    sqlite_writer: Option<sqlite::Writer>,
    /// Ids and identities of clusters known to exist, by key (clusters are never deleted).
    cluster_ids: Arc<Mutex<HashMap<String, (i64, String)>>>,
}

/// Filters for [`Store::events`].
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    /// Only these kinds (any, when empty).
    pub kinds: Vec<String>,
    /// Only events reported by this node address.
    pub node: Option<String>,
    /// Only events about this subject (member address, singleton, router path).
    pub subject: Option<String>,
    /// From this time on (inclusive, epoch ms).
    pub since_ms: Option<i64>,
    /// Before this time (exclusive, epoch ms).
    pub until_ms: Option<i64>,
    /// Only events before this `(at_ms, id)` position (the cursor of the previous page).
    pub before: Option<(i64, i64)>,
    /// Page size.
    pub limit: i64,
}

/// Filters for [`Store::dead_letters`], [`Store::dead_letter_groups`] and
/// [`Store::dead_letter_counts`].
#[derive(Debug, Clone, Default)]
pub struct DeadLetterFilter {
    /// Only this recipient path.
    pub recipient: Option<String>,
    /// Only this message type.
    pub message_type: Option<String>,
    /// From this time on (inclusive, epoch ms).
    pub since_ms: Option<i64>,
    /// Before this time (exclusive, epoch ms).
    pub until_ms: Option<i64>,
    /// Only dead letters before this `(at_ms, id)` position (cursor).
    pub before: Option<(i64, i64)>,
    /// Page size (of groups, for [`Store::dead_letter_groups`]).
    pub limit: i64,
}

impl Store {
    /// Connects to PostgreSQL at `url` and applies the migrations.
    pub async fn connect_postgres(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        Self::connect_postgres_with(url, max_connections, Duration::from_secs(5)).await
    }

    /// Like [`Store::connect_postgres`], waiting at most `acquire_timeout` for a connection
    /// (connecting is retried that long while the database is away) before a query fails
    /// with `PoolTimedOut`.
    pub async fn connect_postgres_with(
        url: &str,
        max_connections: u32,
        acquire_timeout: Duration,
    ) -> Result<Self, StoreError> {
        let options: PgConnectOptions = url.parse()?;
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(acquire_timeout)
            .connect_with(options)
            .await?;
        POSTGRES_MIGRATIONS.run(&pool).await?;
        // Before the first batch: every row of today finds its partition.
        partitions::make(&pool, chrono::Utc::now().timestamp_millis()).await?;
        Ok(Self::with_backend(Backend::Postgres(pool)))
    }

    /// Opens (creating if missing) the SQLite file at `path` and applies the migrations.
    pub async fn open_sqlite(path: &Path, max_connections: u32) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(max_connections.max(1))
            .connect_with(options)
            .await?;
        SQLITE_MIGRATIONS.run(&pool).await?;
        let mut store = Self::with_backend(Backend::Sqlite(pool.clone()));
        store.sqlite_writer = Some(sqlite::Writer::start(pool));
        Ok(store)
    }

    fn with_backend(backend: Backend) -> Self {
        Self {
            backend,
            max_clock_skew_ms: DEFAULT_MAX_CLOCK_SKEW_MS as i64,
            sqlite_writer: None,
            cluster_ids: Arc::default(),
        }
    }

    /// Sets how far (milliseconds) an event time may be ahead of the receive time before it
    /// is stored as the receive time (default [`DEFAULT_MAX_CLOCK_SKEW_MS`]).
    #[must_use]
    pub fn with_max_clock_skew_ms(mut self, max_clock_skew_ms: u64) -> Self {
        self.max_clock_skew_ms = i64::try_from(max_clock_skew_ms).unwrap_or(i64::MAX);
        self
    }

    /// `batch` as it is stored: times too far ahead of `received_ms` clamped to it.
    #[must_use]
    pub fn clamp_times<'a>(
        &self,
        batch: &'a ReportBatch,
        received_ms: i64,
    ) -> std::borrow::Cow<'a, ReportBatch> {
        state::clamp_times(batch, received_ms, self.max_clock_skew_ms)
    }

    /// Which backend this store uses.
    #[must_use]
    pub fn backend(&self) -> BackendKind {
        match self.backend {
            Backend::Postgres(_) => BackendKind::Postgres,
            Backend::Sqlite(_) => BackendKind::Sqlite,
        }
    }

    /// The coordination grants kept in the SQLite file (none on PostgreSQL, whose grants live
    /// in the coordination schema).
    #[must_use]
    pub fn sqlite_grants(&self) -> Option<SqliteGrants> {
        match &self.backend {
            Backend::Postgres(_) => None,
            Backend::Sqlite(pool) => Some(SqliteGrants::new(pool.clone())),
        }
    }

    /// The PostgreSQL pool, for the benchmark's raw-COPY floor.
    #[must_use]
    pub fn postgres_pool(&self) -> Option<&PgPool> {
        match &self.backend {
            Backend::Postgres(pool) => Some(pool),
            Backend::Sqlite(_) => None,
        }
    }

    /// Whether the database answers and every migration this server knows is applied.
    pub async fn check_ready(&self) -> Result<(), NotReady> {
        let applied: Vec<i64> =
            with_pool!(self, |pool| sqlx::query_scalar(sql::APPLIED_MIGRATIONS)
                .fetch_all(pool)
                .await
                .map_err(|e| NotReady::Unreachable(e.into()))?);
        let migrator = match self.backend {
            Backend::Postgres(_) => &POSTGRES_MIGRATIONS,
            Backend::Sqlite(_) => &SQLITE_MIGRATIONS,
        };
        match migrator.iter().find(|m| !applied.contains(&m.version)) {
            Some(missing) => Err(NotReady::Migration {
                version: missing.version,
                description: missing.description.to_string(),
            }),
            None => Ok(()),
        }
    }

    /// The OpenTelemetry `db.system.name` of the backend.
    fn db_system(&self) -> &'static str {
        match self.backend {
            Backend::Postgres(_) => "postgresql",
            Backend::Sqlite(_) => "sqlite",
        }
    }

    /// Closes the pool, waiting for connections to be returned.
    pub async fn close(&self) {
        with_pool!(self, |pool| pool.close().await);
    }

    /// Stores `batch` whole, or recognises it as stored before; see the module docs.
    #[tracing::instrument(name = "store.ingest", skip_all, fields(
        troupe.cluster = %batch.identity.cluster,
        troupe.node = %batch.identity.node,
        troupe.incarnation = %batch.identity.incarnation,
        troupe.batch.sequence = %batch.sequence,
        troupe.batch.events = batch.events.len() as i64,
        db.system.name = self.db_system(),
    ))]
    pub async fn ingest(
        &self,
        batch: &ReportBatch,
        received_ms: i64,
    ) -> Result<IngestOutcome, StoreError> {
        let batch = &*self.clamp_times(batch, received_ms);
        let key = batch.identity.cluster_key();
        let identity = batch.identity.cluster_identity.as_deref().unwrap_or("");
        let known = self.cluster_ids.lock().ok().and_then(|ids| {
            ids.get(&key)
                .filter(|(_, known_identity)| known_identity == identity)
                .map(|(id, _)| *id)
        });
        let (outcome, cluster_id) = match &self.backend {
            Backend::Postgres(pool) => postgres::ingest(pool, batch, received_ms, known).await?,
            Backend::Sqlite(_) => match &self.sqlite_writer {
                Some(writer) => writer.ingest(batch, received_ms, known).await?,
                None => return Err(StoreError::Busy("the SQLite writer is not running")),
            },
        };
        // Only after the commit: a rolled-back insert must not be remembered.
        if known.is_none()
            && let Ok(mut ids) = self.cluster_ids.lock()
        {
            ids.insert(key, (cluster_id, identity.to_owned()));
        }
        Ok(outcome)
    }

    /// Every cluster, by name.
    pub async fn clusters(&self) -> Result<Vec<ClusterRow>, StoreError> {
        Ok(with_pool!(self, |pool| sqlx::query_as(sql::CLUSTERS)
            .fetch_all(pool)
            .await?))
    }

    /// The cluster with key `key` (see [`ClusterRow::cluster_key`]).
    pub async fn cluster(&self, key: &str) -> Result<Option<ClusterRow>, StoreError> {
        Ok(with_pool!(self, |pool| sqlx::query_as(sql::CLUSTER)
            .bind(key)
            .fetch_optional(pool)
            .await?))
    }

    /// When a cluster's history starts: the time of its oldest stored event or dead letter,
    /// `None` when it has stored neither (depth ticks are not looked at: they have no index
    /// that leads from a cluster to its oldest). What the dashboard's default ranges fit.
    pub async fn first_event_ms(&self, cluster_id: i64) -> Result<Option<i64>, StoreError> {
        Ok(with_pool!(self, |pool| sqlx::query_scalar(
            sql::FIRST_EVENT_MS
        )
        .bind(cluster_id)
        .fetch_one(pool)
        .await?))
    }

    /// The clusters named `name`, one per identity, by key.
    pub async fn clusters_named(&self, name: &str) -> Result<Vec<ClusterRow>, StoreError> {
        Ok(with_pool!(self, |pool| sqlx::query_as(sql::CLUSTERS_NAMED)
            .bind(name)
            .fetch_all(pool)
            .await?))
    }

    /// The members of a cluster, by address: the current incarnation of each (removed ones
    /// included; see [`current_incarnations`]).
    pub async fn members(&self, cluster_id: i64) -> Result<Vec<MemberRow>, StoreError> {
        Ok(current_incarnations(
            self.member_incarnations(cluster_id).await?,
        ))
    }

    /// Every member incarnation of a cluster, by address then uid.
    pub async fn member_incarnations(&self, cluster_id: i64) -> Result<Vec<MemberRow>, StoreError> {
        Ok(with_pool!(self, |pool| sqlx::query_as(sql::MEMBERS)
            .bind(cluster_id)
            .fetch_all(pool)
            .await?))
    }

    /// A cluster's newest stream position (committed rows only).
    pub async fn stream_position(&self, cluster_id: i64) -> Result<StreamPosition, StoreError> {
        let (event_id, dead_letter_id): (i64, i64) =
            with_pool!(self, |pool| sqlx::query_as(sql::STREAM_POSITION)
                .bind(cluster_id)
                .fetch_one(pool)
                .await?);
        Ok(StreamPosition {
            event_id,
            dead_letter_id,
        })
    }

    /// A cluster's members, leader and stream position, all read from one snapshot of the
    /// database; `None` when no cluster with key `key` has reported.
    pub async fn cluster_snapshot(&self, key: &str) -> Result<Option<ClusterSnapshot>, StoreError> {
        Ok(with_pool!(self, |pool| {
            let mut tx = pool.begin().await?;
            if self.backend() == BackendKind::Postgres {
                sqlx::query(sql::REPEATABLE_READ).execute(&mut *tx).await?;
            }
            let cluster: Option<ClusterRow> = sqlx::query_as(sql::CLUSTER)
                .bind(key)
                .fetch_optional(&mut *tx)
                .await?;
            let snapshot = match cluster {
                None => None,
                Some(cluster) => {
                    let members = current_incarnations(
                        sqlx::query_as(sql::MEMBERS)
                            .bind(cluster.id)
                            .fetch_all(&mut *tx)
                            .await?,
                    );
                    let (event_id, dead_letter_id): (i64, i64) =
                        sqlx::query_as(sql::STREAM_POSITION)
                            .bind(cluster.id)
                            .fetch_one(&mut *tx)
                            .await?;
                    Some(ClusterSnapshot {
                        cluster,
                        members,
                        position: StreamPosition {
                            event_id,
                            dead_letter_id,
                        },
                    })
                }
            };
            tx.commit().await?;
            snapshot
        }))
    }

    /// Up to `limit` events of a cluster after event id `after`, in id (commit) order.
    pub async fn stream_events(
        &self,
        cluster_id: i64,
        after: i64,
        limit: i64,
    ) -> Result<Vec<EventRow>, StoreError> {
        Ok(with_pool!(self, |pool| sqlx::query_as(sql::STREAM_EVENTS)
            .bind(cluster_id)
            .bind(after)
            .bind(limit)
            .fetch_all(pool)
            .await?))
    }

    /// Up to `limit` dead letters of a cluster after id `after`, in id (commit) order.
    pub async fn stream_dead_letters(
        &self,
        cluster_id: i64,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StreamDeadLetterRow>, StoreError> {
        Ok(with_pool!(self, |pool| sqlx::query_as(
            sql::STREAM_DEAD_LETTERS
        )
        .bind(cluster_id)
        .bind(after)
        .bind(limit)
        .fetch_all(pool)
        .await?))
    }

    /// Every agent incarnation of a cluster, by address then newest incarnation first.
    pub async fn agents(&self, cluster_id: i64) -> Result<Vec<AgentRow>, StoreError> {
        Ok(with_pool!(self, |pool| sqlx::query_as(sql::AGENTS)
            .bind(cluster_id)
            .fetch_all(pool)
            .await?))
    }

    /// One page of a cluster's events, newest (by event time) first.
    pub async fn events(
        &self,
        cluster_id: i64,
        filter: &EventFilter,
    ) -> Result<Vec<EventRow>, StoreError> {
        Ok(with_pool!(self, |pool| {
            let mut q = sqlx::QueryBuilder::new("");
            push_events_query(&mut q, cluster_id, filter);
            q.build_query_as().fetch_all(pool).await?
        }))
    }

    /// One page of a cluster's dead letters, newest (by event time) first.
    pub async fn dead_letters(
        &self,
        cluster_id: i64,
        filter: &DeadLetterFilter,
    ) -> Result<Vec<DeadLetterRow>, StoreError> {
        Ok(with_pool!(self, |pool| {
            let mut q = sqlx::QueryBuilder::new("");
            push_dead_letters_query(&mut q, cluster_id, filter);
            q.build_query_as().fetch_all(pool).await?
        }))
    }

    /// PostgreSQL's plan (`EXPLAIN`, one line per row) for the events page [`Store::events`]
    /// reads with `filter`: which partitions it scans. `None` on SQLite.
    pub async fn explain_events(
        &self,
        cluster_id: i64,
        filter: &EventFilter,
    ) -> Result<Option<String>, StoreError> {
        let Backend::Postgres(pool) = &self.backend else {
            return Ok(None);
        };
        let mut q = sqlx::QueryBuilder::new("EXPLAIN ");
        push_events_query(&mut q, cluster_id, filter);
        let lines: Vec<String> = q.build_query_scalar().fetch_all(pool).await?;
        Ok(Some(lines.join("\n")))
    }

    /// Like [`Store::explain_events`], for the dead letters page [`Store::dead_letters`].
    pub async fn explain_dead_letters(
        &self,
        cluster_id: i64,
        filter: &DeadLetterFilter,
    ) -> Result<Option<String>, StoreError> {
        let Backend::Postgres(pool) = &self.backend else {
            return Ok(None);
        };
        let mut q = sqlx::QueryBuilder::new("EXPLAIN ");
        push_dead_letters_query(&mut q, cluster_id, filter);
        let lines: Vec<String> = q.build_query_scalar().fetch_all(pool).await?;
        Ok(Some(lines.join("\n")))
    }

    /// Like [`Store::explain_events`], for [`Store::depth_ticks`] over `[since_ms, until_ms)`.
    pub async fn explain_depth_ticks(
        &self,
        cluster_id: i64,
        since_ms: i64,
        until_ms: i64,
        limit: i64,
    ) -> Result<Option<String>, StoreError> {
        let Backend::Postgres(pool) = &self.backend else {
            return Ok(None);
        };
        let lines: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {}", sql::DEPTH_TICKS))
            .bind(cluster_id)
            .bind(since_ms)
            .bind(until_ms)
            .bind(limit)
            .fetch_all(pool)
            .await?;
        Ok(Some(lines.join("\n")))
    }

    /// A cluster's dead letters that pass `filter` (its cursor apart), counted per recipient and
    /// reason: at most `filter.limit` groups, the biggest first (ties by recipient, reason).
    ///
    /// One `GROUP BY` over the range's rows (the time index, and on PostgreSQL only the range's
    /// day partitions), so its cost grows with the dead letters in the range.
    pub async fn dead_letter_groups(
        &self,
        cluster_id: i64,
        filter: &DeadLetterFilter,
    ) -> Result<Vec<DeadLetterGroup>, StoreError> {
        Ok(with_pool!(self, |pool| {
            let mut q = sqlx::QueryBuilder::new(sql::DEAD_LETTER_GROUPS_SELECT);
            q.push_bind(cluster_id);
            push_dead_letter_filter(&mut q, filter);
            q.push(sql::DEAD_LETTER_GROUPS_ORDER)
                .push_bind(filter.limit);
            q.build_query_as().fetch_all(pool).await?
        }))
    }

    /// Dead letters per minute over the filter's time range (whole minutes), oldest first.
    pub async fn dead_letter_counts(
        &self,
        cluster_id: i64,
        filter: &DeadLetterFilter,
    ) -> Result<Vec<MinuteCount>, StoreError> {
        Ok(with_pool!(self, |pool| {
            let mut q = sqlx::QueryBuilder::new(sql::DEAD_LETTER_COUNTS_SELECT);
            q.push_bind(cluster_id);
            if let Some(recipient) = &filter.recipient {
                q.push(" AND d.recipient = ").push_bind(recipient.clone());
            }
            if let Some(message_type) = &filter.message_type {
                q.push(" AND d.message_type = ")
                    .push_bind(message_type.clone());
            }
            // Whole minutes: the one holding `since` counts entirely.
            if let Some(since) = filter.since_ms {
                q.push(" AND d.minute_ms >= ")
                    .push_bind(since.div_euclid(60_000).saturating_mul(60_000));
            }
            if let Some(until) = filter.until_ms {
                q.push(" AND d.minute_ms < ").push_bind(until);
            }
            q.push(" GROUP BY d.minute_ms ORDER BY d.minute_ms");
            q.build_query_as().fetch_all(pool).await?
        }))
    }

    /// A cluster's singletons with their current host and lease.
    pub async fn singletons(&self, cluster_id: i64) -> Result<Vec<SingletonRow>, StoreError> {
        Ok(with_pool!(self, |pool| sqlx::query_as(sql::SINGLETONS)
            .bind(cluster_id)
            .fetch_all(pool)
            .await?))
    }

    /// A cluster's routers with their routees.
    pub async fn routers(&self, cluster_id: i64) -> Result<Vec<RouterRow>, StoreError> {
        Ok(with_pool!(self, |pool| sqlx::query_as(sql::ROUTERS)
            .bind(cluster_id)
            .fetch_all(pool)
            .await?))
    }

    /// A cluster's depth ticks in `[since_ms, until_ms)`, oldest first, at most `limit`.
    pub async fn depth_ticks(
        &self,
        cluster_id: i64,
        since_ms: i64,
        until_ms: i64,
        limit: i64,
    ) -> Result<Vec<DepthTickRow>, StoreError> {
        Ok(with_pool!(self, |pool| sqlx::query_as(sql::DEPTH_TICKS)
            .bind(cluster_id)
            .bind(since_ms)
            .bind(until_ms)
            .bind(limit)
            .fetch_all(pool)
            .await?))
    }

    /// A cluster's (or agent address `node`'s) depth ticks taken within any of the
    /// `[start, end)` windows, newest first, at most `limit`: a chart of a busy hour reads a
    /// few seconds at the start of each bucket, each one narrow range of the time index.
    pub async fn depth_ticks_in(
        &self,
        cluster_id: i64,
        node: Option<&str>,
        windows: &[(i64, i64)],
        limit: i64,
    ) -> Result<Vec<DepthTickRow>, StoreError> {
        if windows.is_empty() {
            return Ok(Vec::new());
        }
        Ok(with_pool!(self, |pool| {
            let mut q = sqlx::QueryBuilder::new(sql::DEPTH_TICKS_SELECT);
            q.push_bind(cluster_id);
            if let Some(node) = node {
                q.push(" AND a.node = ").push_bind(node.to_owned());
            }
            q.push(" AND (");
            for (i, (start, end)) in windows.iter().enumerate() {
                if i > 0 {
                    q.push(" OR ");
                }
                q.push("(t.at_ms >= ")
                    .push_bind(*start)
                    .push(" AND t.at_ms < ")
                    .push_bind(*end)
                    .push(")");
            }
            q.push(") ORDER BY t.at_ms DESC LIMIT ").push_bind(limit);
            q.build_query_as().fetch_all(pool).await?
        }))
    }

    /// How many events (dead letters apart) a cluster stored from `since_ms` on, counting at
    /// most `cap`.
    pub async fn count_events_since(
        &self,
        cluster_id: i64,
        since_ms: i64,
        cap: i64,
    ) -> Result<i64, StoreError> {
        Ok(with_pool!(self, |pool| sqlx::query_scalar(
            sql::COUNT_EVENTS_SINCE
        )
        .bind(cluster_id)
        .bind(since_ms)
        .bind(cap)
        .fetch_one(pool)
        .await?))
    }

    /// Queues a member operation for the agents of a cluster; returns its id.
    pub async fn request_operation(
        &self,
        cluster_id: i64,
        address: &str,
        operation: OperationKind,
        requested_ms: i64,
    ) -> Result<i64, StoreError> {
        Ok(with_pool!(self, |pool| sqlx::query_scalar(
            sql::INSERT_OPERATION
        )
        .bind(cluster_id)
        .bind(address)
        .bind(operation.as_str())
        .bind(requested_ms)
        .fetch_one(pool)
        .await?))
    }

    /// Row counts of the history tables.
    pub async fn totals(&self) -> Result<Totals, StoreError> {
        let (batches, events, dead_letters, depth_ticks): (i64, i64, i64, i64) =
            with_pool!(self, |pool| sqlx::query_as(sql::TOTALS)
                .fetch_one(pool)
                .await?);
        Ok(Totals {
            batches,
            events,
            dead_letters,
            depth_ticks,
        })
    }

    /// Deletes history older than `cutoff_ms`, at most `chunk` rows per table and call, so
    /// that ingest never waits long behind it. Returns the rows deleted.
    ///
    /// On PostgreSQL this deletes only from the default partitions (rows of days without a
    /// partition), the per-minute rollups, the batch markers and the audit trail: whole days
    /// of history go with [`Store::drop_expired_partitions`].
    pub async fn delete_older_than(&self, cutoff_ms: i64, chunk: i64) -> Result<u64, StoreError> {
        let statements = match self.backend {
            Backend::Postgres(_) => partitions::RETENTION,
            Backend::Sqlite(_) => sql::RETENTION,
        };
        let mut deleted = 0;
        for cluster in self.clusters().await? {
            for statement in statements {
                deleted += with_pool!(self, |pool| sqlx::query(statement)
                    .bind(cutoff_ms)
                    .bind(chunk)
                    .bind(cluster.id)
                    .execute(pool)
                    .await?
                    .rows_affected());
            }
        }
        deleted += self
            .delete_coordination_audit_older_than(cutoff_ms, chunk)
            .await?;
        Ok(deleted)
    }
}

impl Store {
    /// Makes the missing day partitions of the history, from yesterday to [`DAYS_AHEAD`] days
    /// after the day of `now_ms` (PostgreSQL; nothing on SQLite). Returns the names made.
    /// The store does this when it connects; the server again every hour.
    pub async fn make_partitions(&self, now_ms: i64) -> Result<Vec<String>, StoreError> {
        match &self.backend {
            Backend::Postgres(pool) => partitions::make(pool, now_ms).await,
            Backend::Sqlite(_) => Ok(Vec::new()),
        }
    }

    /// Detaches and drops the day partitions that end at or before `cutoff_ms` (PostgreSQL;
    /// nothing on SQLite, where [`Store::delete_older_than`] deletes the rows). Returns the
    /// names dropped.
    pub async fn drop_expired_partitions(&self, cutoff_ms: i64) -> Result<Vec<String>, StoreError> {
        match &self.backend {
            Backend::Postgres(pool) => partitions::drop_expired(pool, cutoff_ms).await,
            Backend::Sqlite(_) => Ok(Vec::new()),
        }
    }

    /// The day partitions of the history tables, by table then day (none on SQLite).
    pub async fn day_partitions(&self) -> Result<Vec<DayPartition>, StoreError> {
        match &self.backend {
            Backend::Postgres(pool) => partitions::list(pool).await,
            Backend::Sqlite(_) => Ok(Vec::new()),
        }
    }
}

/// The events page query for `filter`, pushed after what `q` holds.
fn push_events_query<DB: sqlx::Database>(
    q: &mut sqlx::QueryBuilder<'_, DB>,
    cluster_id: i64,
    filter: &EventFilter,
) where
    String: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    i64: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    let mut kinds = filter.kinds.clone();
    kinds.sort();
    kinds.dedup();
    match kinds.as_slice() {
        // One range of the time, kind, subject or (subject, kind) index.
        kinds if kinds.len() <= 1 => {
            push_events_page(q, cluster_id, filter, kinds);
        }
        // One range of the kind (or subject and kind) index per kind, merged: an IN
        // list would make the database walk the time (or subject) index past every
        // event of other kinds.
        kinds => {
            q.push("SELECT * FROM (");
            for (i, kind) in kinds.iter().enumerate() {
                if i > 0 {
                    q.push(" UNION ALL ");
                }
                q.push("SELECT * FROM (");
                push_events_page(q, cluster_id, filter, std::slice::from_ref(kind));
                q.push(format!(") AS k{i}"));
            }
            q.push(") AS u ORDER BY at_ms DESC, id DESC LIMIT ")
                .push_bind(filter.limit);
        }
    }
}

/// The dead letters page query for `filter`, pushed after what `q` holds.
fn push_dead_letters_query<DB: sqlx::Database>(
    q: &mut sqlx::QueryBuilder<'_, DB>,
    cluster_id: i64,
    filter: &DeadLetterFilter,
) where
    String: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    i64: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    q.push(sql::DEAD_LETTERS_SELECT);
    q.push_bind(cluster_id);
    push_dead_letter_filter(q, filter);
    if let Some((at_ms, id)) = filter.before {
        q.push(" AND (d.at_ms, d.id) < (")
            .push_bind(at_ms)
            .push(", ")
            .push_bind(id)
            .push(")");
    }
    q.push(" ORDER BY d.at_ms DESC, d.id DESC LIMIT ")
        .push_bind(filter.limit);
}

/// One page of events (of any of `kinds`, or all when empty), newest first.
fn push_events_page<DB: sqlx::Database>(
    q: &mut sqlx::QueryBuilder<'_, DB>,
    cluster_id: i64,
    filter: &EventFilter,
    kinds: &[String],
) where
    String: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    i64: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    q.push(sql::EVENTS_SELECT).push_bind(cluster_id);
    match kinds {
        [] => {}
        [kind] => {
            q.push(" AND e.kind = ").push_bind(kind.clone());
        }
        kinds => {
            q.push(" AND e.kind IN (");
            let mut list = q.separated(", ");
            for kind in kinds {
                list.push_bind(kind.clone());
            }
            q.push(")");
        }
    }
    if let Some(node) = &filter.node {
        q.push(" AND a.node = ").push_bind(node.clone());
    }
    if let Some(subject) = &filter.subject {
        q.push(" AND e.subject = ").push_bind(subject.clone());
    }
    if let Some(since) = filter.since_ms {
        q.push(" AND e.at_ms >= ").push_bind(since);
    }
    if let Some(until) = filter.until_ms {
        q.push(" AND e.at_ms < ").push_bind(until);
    }
    if let Some((at_ms, id)) = filter.before {
        q.push(" AND (e.at_ms, e.id) < (")
            .push_bind(at_ms)
            .push(", ")
            .push_bind(id)
            .push(")");
    }
    q.push(" ORDER BY e.at_ms DESC, e.id DESC LIMIT ")
        .push_bind(filter.limit);
}

fn push_dead_letter_filter<DB: sqlx::Database>(
    q: &mut sqlx::QueryBuilder<'_, DB>,
    filter: &DeadLetterFilter,
) where
    String: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    i64: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    if let Some(recipient) = &filter.recipient {
        q.push(" AND d.recipient = ").push_bind(recipient.clone());
    }
    if let Some(message_type) = &filter.message_type {
        q.push(" AND d.message_type = ")
            .push_bind(message_type.clone());
    }
    if let Some(since) = filter.since_ms {
        q.push(" AND d.at_ms >= ").push_bind(since);
    }
    if let Some(until) = filter.until_ms {
        q.push(" AND d.at_ms < ").push_bind(until);
    }
}

/// The audit trail (`audit_entries`; the SQL and the types are in `store/audit.rs`).
impl Store {
    /// Writes an audit entry in `scope` (then trims its refused entries to [`MAX_REFUSED`]);
    /// returns its id.
    pub async fn record_audit(
        &self,
        scope: AuditScope,
        entry: &NewAuditEntry,
    ) -> Result<i64, StoreError> {
        let id: i64 = with_pool!(self, |pool| sqlx::query_scalar(audit::INSERT)
            .bind(scope.cluster_id())
            .bind(entry.at_ms)
            .bind(entry.token_id.as_str())
            .bind(entry.action.as_str())
            .bind(entry.target.as_str())
            .bind(entry.outcome.as_str())
            .bind(i64::from(entry.status))
            .bind(entry.reason.as_str())
            .bind(entry.operation_id)
            .fetch_one(pool)
            .await?);
        if entry.outcome == AuditOutcome::Refused {
            match scope {
                AuditScope::Cluster(cluster_id) => {
                    with_pool!(self, |pool| sqlx::query(audit::PRUNE_REFUSED)
                        .bind(cluster_id)
                        .bind(MAX_REFUSED)
                        .execute(pool)
                        .await?
                        .rows_affected())
                }
                AuditScope::Coordination => {
                    with_pool!(self, |pool| sqlx::query(audit::PRUNE_REFUSED_COORDINATION)
                        .bind(MAX_REFUSED)
                        .execute(pool)
                        .await?
                        .rows_affected())
                }
            };
        }
        Ok(id)
    }

    /// Deletes at most `chunk` coordination entries older than `cutoff_ms`; returns how many.
    pub(crate) async fn delete_coordination_audit_older_than(
        &self,
        cutoff_ms: i64,
        chunk: i64,
    ) -> Result<u64, StoreError> {
        Ok(with_pool!(self, |pool| sqlx::query(
            audit::RETENTION_COORDINATION
        )
        .bind(cutoff_ms)
        .bind(chunk)
        .execute(pool)
        .await?
        .rows_affected()))
    }

    /// One page of the audit entries of `scope`, newest (by server time) first.
    pub async fn audit_entries(
        &self,
        scope: AuditScope,
        filter: &AuditFilter,
    ) -> Result<Vec<AuditRow>, StoreError> {
        Ok(with_pool!(self, |pool| {
            let mut q = sqlx::QueryBuilder::new(audit::SELECT);
            match scope {
                AuditScope::Cluster(cluster_id) => {
                    q.push("a.cluster_id = ").push_bind(cluster_id);
                }
                AuditScope::Coordination => {
                    q.push("a.cluster_id IS NULL");
                }
            }
            if let Some(target) = &filter.target {
                q.push(" AND a.target = ").push_bind(target.clone());
            }
            if let Some((at_ms, id)) = filter.before {
                q.push(" AND (a.at_ms, a.id) < (")
                    .push_bind(at_ms)
                    .push(", ")
                    .push_bind(id)
                    .push(")");
            }
            q.push(" ORDER BY a.at_ms DESC, a.id DESC LIMIT ")
                .push_bind(filter.limit);
            q.build_query_as().fetch_all(pool).await?
        }))
    }
}
