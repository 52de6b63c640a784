//! SQLite ingest: one prepared statement per row inside the batch's transaction (SQLite has
//! no arrays, and a prepared insert costs microseconds in-process).

use sqlx::SqlitePool;
use troupe_protocol::ReportBatch;

use super::error::StoreError;
use super::ingest::{apply_state_changes, begin_batch, take_operations};
use super::model::IngestOutcome;
use super::rows::BatchRows;
use super::sql;
use super::state::state_changes;

pub(super) async fn ingest(
    pool: &SqlitePool,
    batch: &ReportBatch,
    received_ms: i64,
    known_cluster: Option<i64>,
) -> Result<(IngestOutcome, i64), StoreError> {
    let rows = BatchRows::from_batch(batch)?;
    let changes = state_changes(batch);
    let mut tx = pool.begin().await?;
    let (cluster_id, agent_id) = begin_batch!(tx, batch, received_ms, known_cluster);
    let Some(agent_id) = agent_id else {
        // Stored before; the cluster therefore exists and its id is committed.
        tx.rollback().await?;
        return Ok((IngestOutcome::duplicate(), cluster_id));
    };
    let e = &rows.events;
    for i in 0..e.at_ms.len() {
        sqlx::query(sql::INSERT_EVENT_ROW)
            .bind(cluster_id)
            .bind(agent_id)
            .bind(e.at_ms[i])
            .bind(e.kind[i])
            .bind(&e.subject[i])
            .bind(&e.detail[i])
            .execute(&mut *tx)
            .await?;
    }
    let d = &rows.dead_letters;
    for i in 0..d.at_ms.len() {
        sqlx::query(sql::INSERT_DEAD_LETTER_ROW)
            .bind(cluster_id)
            .bind(agent_id)
            .bind(d.at_ms[i])
            .bind(&d.recipient[i])
            .bind(&d.sender[i])
            .bind(&d.message_type[i])
            .bind(&d.reason[i])
            .execute(&mut *tx)
            .await?;
    }
    let m = &rows.dead_letter_minutes;
    for i in 0..m.minute_ms.len() {
        sqlx::query(sql::UPSERT_DEAD_LETTER_MINUTE_ROW)
            .bind(cluster_id)
            .bind(agent_id)
            .bind(m.minute_ms[i])
            .bind(&m.recipient[i])
            .bind(&m.message_type[i])
            .bind(m.count[i])
            .execute(&mut *tx)
            .await?;
    }
    let t = &rows.depth_ticks;
    for i in 0..t.at_ms.len() {
        sqlx::query(sql::INSERT_DEPTH_TICK_ROW)
            .bind(cluster_id)
            .bind(agent_id)
            .bind(t.at_ms[i])
            .bind(&t.samples[i])
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
    tx.commit().await?;
    Ok((rows.outcome(operations), cluster_id))
}
