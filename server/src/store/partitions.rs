//! Day partitions of the PostgreSQL history (`events`, `dead_letters`, `depth_ticks`): made
//! ahead of time, dropped whole by retention. SQLite keeps plain tables and deletes rows.
//!
//! # Layout
//! Migration `20261203120001_history_partitions` partitions each table by range of `at_ms`:
//! one partition per UTC day, `<table>_pYYYYMMDD` for `[midnight, next midnight)`, and
//! `<table>_default` for rows of any day without one.
//!
//! # Ahead of time
//! [`make`] makes the partitions of yesterday (a report delayed over midnight), today and the
//! next [`DAYS_AHEAD`] days, when the store connects and then every hour, so a day's rows
//! always find their partition however long the server runs. Event times further ahead than
//! the allowed clock skew are stored as the receive time (`state::clamp_times`), so no row is
//! dated past the partitions made; rows dated further back (an agent whose clock is days
//! behind, a spool replayed long after) land in the default partition, which retention
//! empties by `DELETE` (it holds only such rows). A partition is made as a plain table and
//! then attached, which locks the partitioned table only in `SHARE UPDATE EXCLUSIVE` mode:
//! ingest goes on meanwhile. Rows of its day that sat in the default partition move into it
//! first, in the same transaction (otherwise the attach would fail).
//!
//! # Retention
//! [`drop_expired`] detaches each partition whose whole day is older than the cutoff, then
//! drops it: no row-by-row delete, no dead tuples, no vacuum. A day is kept until it has
//! entirely expired, so a row lives between `retention` and `retention + 1 day`. The detach
//! takes the partitioned table's `ACCESS EXCLUSIVE` lock for a moment (a concurrent detach is
//! not possible beside a default partition), waiting at most [`LOCK_TIMEOUT`] for it, so a
//! long dashboard query can hold ingest back by at most that long; a detach that times out
//! is retried on the next pass. The drop runs after the detach committed, so its file
//! removal never holds the lock. A partition detached but not dropped (a crash in between)
//! is dropped on the next pass.
//!
//! # Replicas
//! Several servers on one database run this concurrently: a transaction-scoped advisory lock
//! serialises them, and each step checks under it that it is still needed.

use chrono::DateTime;
use sqlx::PgPool;

use super::error::StoreError;

/// The partitioned history tables.
pub const PARTITIONED_TABLES: [&str; 3] = ["events", "dead_letters", "depth_ticks"];

/// Days after today whose partitions are made in advance.
pub const DAYS_AHEAD: i64 = 3;

/// How long a detach or attach waits for its lock before giving up until the next pass.
pub const LOCK_TIMEOUT: &str = "500ms";

const DAY_MS: i64 = 86_400_000;

/// Serialises partition maintenance across replicas (advisory lock space `0x7473` = "ts").
const MAINTENANCE_LOCK: &str = "SELECT pg_advisory_xact_lock(29811, 0)";

/// The tables named like day partitions of `$1`, attached or not.
const LIST: &str = "\
SELECT c.relname::text, c.relispartition
FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
  AND c.relname LIKE $1 || '\\_p________'
ORDER BY c.relname";

/// One day partition of a history table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DayPartition {
    /// The partitioned table (`events`, `dead_letters`, `depth_ticks`).
    pub table: &'static str,
    /// The partition's table name (`events_p20261203`).
    pub name: String,
    /// Its first millisecond (midnight UTC).
    pub start_ms: i64,
    /// Whether it is attached (a detached one is about to be dropped).
    pub attached: bool,
}

impl DayPartition {
    /// Its end (exclusive): the next midnight.
    #[must_use]
    pub fn end_ms(&self) -> i64 {
        self.start_ms + DAY_MS
    }
}

/// The name of `table`'s partition for the day holding `at_ms`.
#[must_use]
pub fn partition_name(table: &str, at_ms: i64) -> String {
    let start_ms = day_start(at_ms);
    let date = DateTime::from_timestamp_millis(start_ms).unwrap_or_default();
    format!("{table}_p{}", date.format("%Y%m%d"))
}

/// Midnight UTC of the day holding `at_ms`.
fn day_start(at_ms: i64) -> i64 {
    at_ms.div_euclid(DAY_MS) * DAY_MS
}

/// The day a partition name stands for (its first millisecond), if it is one.
fn parse_day(table: &str, name: &str) -> Option<i64> {
    let digits = name.strip_prefix(table)?.strip_prefix("_p")?;
    if digits.len() != 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let date = chrono::NaiveDate::parse_from_str(digits, "%Y%m%d").ok()?;
    Some(date.and_hms_opt(0, 0, 0)?.and_utc().timestamp_millis())
}

/// Every day partition of the history tables, by table then day.
pub(super) async fn list(pool: &PgPool) -> Result<Vec<DayPartition>, StoreError> {
    let mut out = Vec::new();
    for table in PARTITIONED_TABLES {
        let rows: Vec<(String, bool)> = sqlx::query_as(LIST).bind(table).fetch_all(pool).await?;
        out.extend(rows.into_iter().filter_map(|(name, attached)| {
            Some(DayPartition {
                table,
                start_ms: parse_day(table, &name)?,
                name,
                attached,
            })
        }));
    }
    Ok(out)
}

/// Makes the missing partitions from yesterday to [`DAYS_AHEAD`] days after the day of
/// `now_ms`; returns the names made.
pub(super) async fn make(pool: &PgPool, now_ms: i64) -> Result<Vec<String>, StoreError> {
    let existing = list(pool).await?;
    let today = day_start(now_ms);
    let mut made = Vec::new();
    for table in PARTITIONED_TABLES {
        for day in -1..=DAYS_AHEAD {
            let start_ms = today + day * DAY_MS;
            let name = partition_name(table, start_ms);
            if existing.iter().any(|p| p.name == name && p.attached) {
                continue;
            }
            if make_one(pool, table, &name, start_ms).await? {
                made.push(name);
            }
        }
    }
    Ok(made)
}

/// Makes and attaches one partition unless another replica just did; true if it made it.
async fn make_one(
    pool: &PgPool,
    table: &str,
    name: &str,
    start_ms: i64,
) -> Result<bool, StoreError> {
    let mut tx = pool.begin().await?;
    sqlx::query(MAINTENANCE_LOCK).execute(&mut *tx).await?;
    sqlx::query(&format!("SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
        .execute(&mut *tx)
        .await?;
    let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
        .bind(name)
        .fetch_one(&mut *tx)
        .await?;
    if exists {
        // Made meanwhile, or left detached by a crash during retention: never attach that
        // one again (its day is being dropped).
        tx.rollback().await?;
        return Ok(false);
    }
    let end_ms = start_ms + DAY_MS;
    // Names are ours (a fixed table name and digits), never input: quoting is not needed.
    sqlx::query(&format!(
        "CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS)"
    ))
    .execute(&mut *tx)
    .await?;
    sqlx::query(&format!(
        "WITH moved AS (DELETE FROM {table}_default WHERE at_ms >= $1 AND at_ms < $2 RETURNING *)
         INSERT INTO {name} SELECT * FROM moved"
    ))
    .bind(start_ms)
    .bind(end_ms)
    .execute(&mut *tx)
    .await?;
    sqlx::query(&format!(
        "ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES FROM ({start_ms}) TO ({end_ms})"
    ))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// Detaches and drops every day partition that ends at or before `cutoff_ms`; returns the
/// names dropped. Stops at the first failure (a lock not granted in time): what is left is
/// dropped on the next pass.
pub(super) async fn drop_expired(pool: &PgPool, cutoff_ms: i64) -> Result<Vec<String>, StoreError> {
    let mut dropped = Vec::new();
    for partition in list(pool).await? {
        if partition.end_ms() > cutoff_ms {
            continue;
        }
        if partition.attached {
            let mut tx = pool.begin().await?;
            sqlx::query(MAINTENANCE_LOCK).execute(&mut *tx).await?;
            sqlx::query(&format!("SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
                .execute(&mut *tx)
                .await?;
            let still_attached: Option<bool> = sqlx::query_scalar(
                "SELECT relispartition FROM pg_class WHERE oid = to_regclass($1)",
            )
            .bind(&partition.name)
            .fetch_optional(&mut *tx)
            .await?;
            if still_attached == Some(true) {
                sqlx::query(&format!(
                    "ALTER TABLE {} DETACH PARTITION {}",
                    partition.table, partition.name
                ))
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
        }
        sqlx::query(&format!("DROP TABLE IF EXISTS {}", partition.name))
            .execute(pool)
            .await?;
        dropped.push(partition.name);
    }
    Ok(dropped)
}

/// Retention in the default partitions (rows of days without a partition), then the rollups,
/// batch markers and audit entries; each takes ($1 cutoff_ms, $2 chunk, $3 cluster_id) like `sql::RETENTION`.
pub(super) const RETENTION: [&str; 6] = [
    "DELETE FROM events_default WHERE id IN
        (SELECT id FROM events_default WHERE cluster_id = $3 AND at_ms < $1 LIMIT $2)",
    "DELETE FROM dead_letters_default WHERE id IN
        (SELECT id FROM dead_letters_default WHERE cluster_id = $3 AND at_ms < $1 LIMIT $2)",
    "DELETE FROM depth_ticks_default WHERE id IN
        (SELECT id FROM depth_ticks_default WHERE cluster_id = $3 AND at_ms < $1 LIMIT $2)",
    super::sql::RETENTION[3],
    super::sql::RETENTION[4],
    super::sql::RETENTION[5],
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_is_named_for_its_utc_day() {
        // 2026-12-03T23:59:59.999Z and the next millisecond.
        let last_ms = 1_796_342_399_999;
        assert_eq!(partition_name("events", last_ms), "events_p20261203");
        assert_eq!(partition_name("events", last_ms + 1), "events_p20261204");
        assert_eq!(partition_name("depth_ticks", 0), "depth_ticks_p19700101");
    }

    #[test]
    fn a_partition_name_gives_back_its_day() {
        let start = day_start(1_796_342_399_999);
        assert_eq!(parse_day("events", "events_p20261203"), Some(start));
        assert_eq!(parse_day("events", "events_default"), None);
        assert_eq!(parse_day("events", "events_p2026120x"), None);
        assert_eq!(parse_day("events", "events_p20261332"), None);
        assert_eq!(parse_day("dead_letters", "events_p20261203"), None);
    }

    #[test]
    fn days_before_the_epoch_start_at_their_own_midnight() {
        assert_eq!(day_start(-1), -DAY_MS);
        assert_eq!(day_start(DAY_MS - 1), 0);
    }
}
