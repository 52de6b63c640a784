//! PostgreSQL ingest: every row kind of a batch goes in with one `INSERT … SELECT FROM UNNEST`.
//!
//! # Stream order
//! Events and dead letters are inserted last, after the cluster's transaction-scoped advisory
//! lock: within a cluster their ids then grow in commit order, which is what lets the live
//! stream resume from an id (see `crate::feed`). The lock is held only for those two inserts
//! and the commit; state changes, rollups and depth ticks are written before it.
//!
//! # Other replicas
//! A batch with events or dead letters also notifies [`crate::live::CHANNEL`] with the
//! cluster's key, in the same transaction: PostgreSQL delivers it at commit (never for a
//! rolled-back batch), and every replica's listener wakes its streams (see `crate::live`).

use sqlx::PgPool;
use troupe_protocol::ReportBatch;

use super::error::StoreError;
use super::ingest::{apply_state_changes, begin_batch, take_operations};
use super::model::IngestOutcome;
use super::rows::BatchRows;
use super::state::state_changes;

const INSERT_EVENTS: &str = "\
INSERT INTO events (cluster_id, agent_id, at_ms, kind, subject, detail)
SELECT $1, $2, t.at_ms, t.kind, t.subject, t.detail
FROM UNNEST($3::bigint[], $4::text[], $5::text[], $6::text[]) AS t(at_ms, kind, subject, detail)";

const INSERT_DEAD_LETTERS: &str = "\
INSERT INTO dead_letters (cluster_id, agent_id, at_ms, recipient, sender, message_type, reason)
SELECT $1, $2, t.at_ms, t.recipient, t.sender, t.message_type, t.reason
FROM UNNEST($3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[])
    AS t(at_ms, recipient, sender, message_type, reason)";

const UPSERT_DEAD_LETTER_MINUTES: &str = "\
INSERT INTO dead_letter_minutes (cluster_id, agent_id, minute_ms, recipient, message_type, count)
SELECT $1, $2, t.minute_ms, t.recipient, t.message_type, t.count
FROM UNNEST($3::bigint[], $4::text[], $5::text[], $6::bigint[])
    AS t(minute_ms, recipient, message_type, count)
ON CONFLICT (cluster_id, minute_ms, agent_id, recipient, message_type)
DO UPDATE SET count = dead_letter_minutes.count + excluded.count";

const INSERT_DEPTH_TICKS: &str = "\
INSERT INTO depth_ticks (cluster_id, agent_id, at_ms, samples)
SELECT $1, $2, t.at_ms, t.samples FROM UNNEST($3::bigint[], $4::text[]) AS t(at_ms, samples)";

/// The cluster's stream lock (two-int advisory lock space `0x7472` = "tr", the cluster id).
const STREAM_LOCK: &str = "SELECT pg_advisory_xact_lock(29810, CAST($1 AS integer))";

/// Announces the cluster's new stream rows to every replica (delivered at commit).
const NOTIFY_LIVE: &str = "SELECT pg_notify($1, $2)";

pub(super) async fn ingest(
    pool: &PgPool,
    batch: &ReportBatch,
    received_ms: i64,
    known_cluster: Option<i64>,
) -> Result<(IngestOutcome, i64), StoreError> {
    // Everything that can fail without the database is done before the transaction opens.
    let rows = BatchRows::from_batch(batch)?;
    let changes = state_changes(batch);
    let mut tx = pool.begin().await?;
    let (cluster_id, agent_id, fresh) = begin_batch!(tx, batch, received_ms, known_cluster);
    if !fresh {
        // Stored before; the cluster therefore exists and its id is committed.
        tx.rollback().await?;
        return Ok((IngestOutcome::duplicate(), cluster_id));
    }
    if !rows.dead_letter_minutes.minute_ms.is_empty() {
        let m = &rows.dead_letter_minutes;
        sqlx::query(UPSERT_DEAD_LETTER_MINUTES)
            .bind(cluster_id)
            .bind(agent_id)
            .bind(&m.minute_ms)
            .bind(&m.recipient)
            .bind(&m.message_type)
            .bind(&m.count)
            .execute(&mut *tx)
            .await?;
    }
    if !rows.depth_ticks.at_ms.is_empty() {
        let t = &rows.depth_ticks;
        sqlx::query(INSERT_DEPTH_TICKS)
            .bind(cluster_id)
            .bind(agent_id)
            .bind(&t.at_ms)
            .bind(&t.samples)
            .execute(&mut *tx)
            .await?;
    }
    apply_state_changes!(
        tx,
        cluster_id,
        agent_id,
        batch.sequence as i64,
        received_ms,
        &changes
    );
    let operations = take_operations!(tx, cluster_id, agent_id, received_ms);
    if !rows.events.at_ms.is_empty() || !rows.dead_letters.at_ms.is_empty() {
        // Event and dead-letter ids are the live stream's positions: taken under the
        // cluster's lock, held until commit, they are assigned in commit order within the
        // cluster, so a stream resuming after id N misses nothing committed later.
        sqlx::query(STREAM_LOCK)
            .bind(cluster_id)
            .execute(&mut *tx)
            .await?;
    }
    if !rows.events.at_ms.is_empty() {
        let e = &rows.events;
        sqlx::query(INSERT_EVENTS)
            .bind(cluster_id)
            .bind(agent_id)
            .bind(&e.at_ms)
            .bind(&e.kind)
            .bind(&e.subject)
            .bind(&e.detail)
            .execute(&mut *tx)
            .await?;
    }
    if !rows.dead_letters.at_ms.is_empty() {
        let d = &rows.dead_letters;
        sqlx::query(INSERT_DEAD_LETTERS)
            .bind(cluster_id)
            .bind(agent_id)
            .bind(&d.at_ms)
            .bind(&d.recipient)
            .bind(&d.sender)
            .bind(&d.message_type)
            .bind(&d.reason)
            .execute(&mut *tx)
            .await?;
    }
    if !rows.events.at_ms.is_empty() || !rows.dead_letters.at_ms.is_empty() {
        sqlx::query(NOTIFY_LIVE)
            .bind(crate::live::CHANNEL)
            .bind(crate::live::notify_payload(&batch.identity.cluster_key()))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok((rows.outcome(operations), cluster_id))
}
