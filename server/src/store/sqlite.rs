//! SQLite ingest behind one writer task, so that no batch can starve another.
//!
//! # One writer
//! SQLite has one write lock per file. Every batch goes to a single writer task through a
//! bounded queue; the task runs one transaction at a time, so writers never wait on each other
//! inside SQLite (no `database is locked` after the busy timeout). A batch of more than
//! [`CHUNK_ROWS`] rows is written in several transactions of at most that many rows, and the
//! writer serves the batches queued meanwhile between two chunks (round robin): a small batch
//! waits for at most one chunk of each big batch ahead of it, not for the whole big batch.
//!
//! # Refusals
//! A batch that waited in the queue longer than [`MAX_QUEUE_WAIT`] without being started, or
//! that finds the queue full, is refused with [`StoreError::Busy`] (503 with `Retry-After`);
//! nothing of it is written and the agent sends it again. So is a retry of a batch the writer
//! is still writing in chunks.
//!
//! # Whole or not at all, chunked
//! A chunked batch's marker records how many of its rows are stored (`batches.pending_from`,
//! NULL once whole), updated in the transaction of each chunk. While it is being written, the
//! history shows the rows stored so far; the state changes, per-minute counts and operations
//! are applied in its last chunk. If the server stops midway, the agent's retry of the batch
//! resumes after the last stored chunk, so no row is written twice and none is lost.
//!
//! Rows are inserted with multi-row `INSERT … VALUES` statements of [`ROWS_PER_STATEMENT`]
//! rows (SQLite has no arrays; one statement per row costs a round trip to the connection's
//! thread each).

use std::collections::{HashSet, VecDeque};
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::{Sqlite, SqliteConnection, SqlitePool};
use tokio::sync::{mpsc, oneshot};
use troupe_protocol::ReportBatch;

use super::error::StoreError;
use super::ingest::{apply_state_changes, begin_batch, take_operations};
use super::model::IngestOutcome;
use super::rows::BatchRows;
use super::sql;
use super::state::{StateChange, state_changes};

/// Most rows (events, dead letters, depth ticks) one transaction of a batch writes.
pub(super) const CHUNK_ROWS: usize = 2_000;
/// Rows per multi-row insert statement (7 bound values each, far below SQLite's limit).
const ROWS_PER_STATEMENT: usize = 400;
/// Longest a batch waits in the writer's queue before it is refused as busy: with its own
/// transaction it is stored within about a second or answered 503.
pub(super) const MAX_QUEUE_WAIT: Duration = Duration::from_millis(400);
/// Batches waiting for the writer at most; more are refused as busy at once.
const QUEUE_CAPACITY: usize = 256;

type Reply = oneshot::Sender<Result<(IngestOutcome, i64), StoreError>>;

/// A batch for the writer.
struct Job {
    batch: Arc<ReportBatch>,
    /// Its rows and state changes, when prepared before it was queued.
    prepared: Option<(BatchRows, Vec<StateChange>)>,
    received_ms: i64,
    known_cluster: Option<i64>,
    queued: Instant,
    reply: Reply,
}

/// The handle of the writer task; cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct Writer {
    jobs: mpsc::Sender<Job>,
    /// Batches being written in chunks, by (cluster key, node, incarnation, sequence).
    in_progress: Arc<Mutex<HashSet<BatchKey>>>,
}

type BatchKey = (String, String, u64, u64);

fn key(batch: &ReportBatch) -> BatchKey {
    let id = &batch.identity;
    (
        id.cluster_key(),
        id.node.clone(),
        id.incarnation,
        batch.sequence,
    )
}

impl Writer {
    /// Starts the writer task on `pool`.
    pub(super) fn start(pool: SqlitePool) -> Self {
        let (jobs, queue) = mpsc::channel(QUEUE_CAPACITY);
        let in_progress = Arc::new(Mutex::new(HashSet::new()));
        tokio::spawn(run(pool, queue, Arc::clone(&in_progress)));
        Self { jobs, in_progress }
    }

    /// Stores `batch` through the writer; see the module docs.
    pub(super) async fn ingest(
        &self,
        batch: &ReportBatch,
        received_ms: i64,
        known_cluster: Option<i64>,
    ) -> Result<(IngestOutcome, i64), StoreError> {
        if self
            .in_progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&key(batch))
        {
            return Err(StoreError::Busy(
                "this batch is still being written in chunks",
            ));
        }
        let (reply, answer) = oneshot::channel();
        let batch = Arc::new(batch.clone());
        // The rows of a big batch are prepared on the blocking pool, not on the writer's
        // thread, which meanwhile serves the other batches.
        let prepared = if batch.events.len() + batch.depth_samples.len() > CHUNK_ROWS {
            let batch = Arc::clone(&batch);
            let prepared = tokio::task::spawn_blocking(move || {
                BatchRows::from_batch(&batch).map(|rows| (rows, state_changes(&batch)))
            })
            .await
            .map_err(|_| StoreError::Busy("preparing the batch's rows failed"))??;
            Some(prepared)
        } else {
            None
        };
        let job = Job {
            batch,
            prepared,
            received_ms,
            known_cluster,
            queued: Instant::now(),
            reply,
        };
        self.jobs.try_send(job).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => {
                StoreError::Busy("the SQLite writer's queue is full")
            }
            mpsc::error::TrySendError::Closed(_) => StoreError::Busy("the SQLite writer stopped"),
        })?;
        answer
            .await
            .map_err(|_| StoreError::Busy("the SQLite writer stopped"))?
    }
}

/// A batch the writer has started.
struct Task {
    job: Job,
    rows: BatchRows,
    changes: Vec<StateChange>,
    /// `(cluster_id, agent_id, rows stored so far)` once its first transaction committed.
    cursor: Option<(i64, i64, usize)>,
}

enum Step {
    Done(Result<(IngestOutcome, i64), StoreError>),
    More(Box<Task>),
}

async fn run(
    pool: SqlitePool,
    mut queue: mpsc::Receiver<Job>,
    in_progress: Arc<Mutex<HashSet<BatchKey>>>,
) {
    let mut active: VecDeque<Task> = VecDeque::new();
    let mut waiting: VecDeque<Job> = VecDeque::new();
    loop {
        if active.is_empty() && waiting.is_empty() {
            match queue.recv().await {
                Some(job) => waiting.push_back(job),
                None => return,
            }
        }
        while let Ok(job) = queue.try_recv() {
            waiting.push_back(job);
        }
        // Round robin: one new batch, then one chunk of a batch under way.
        if let Some(job) = waiting.pop_front() {
            if job.queued.elapsed() > MAX_QUEUE_WAIT {
                let _ = job.reply.send(Err(StoreError::Busy(
                    "the batch waited too long for the SQLite writer",
                )));
                continue;
            }
            let mut job = job;
            let (rows, changes) = match job.prepared.take() {
                Some(prepared) => prepared,
                None => match BatchRows::from_batch(&job.batch) {
                    Ok(rows) => (rows, state_changes(&job.batch)),
                    Err(e) => {
                        let _ = job.reply.send(Err(e));
                        continue;
                    }
                },
            };
            let task = Task {
                job,
                rows,
                changes,
                cursor: None,
            };
            step_and_requeue(&pool, task, &mut active, &in_progress).await;
        } else if let Some(task) = active.pop_front() {
            step_and_requeue(&pool, task, &mut active, &in_progress).await;
        }
    }
}

async fn step_and_requeue(
    pool: &SqlitePool,
    task: Task,
    active: &mut VecDeque<Task>,
    in_progress: &Mutex<HashSet<BatchKey>>,
) {
    let batch_key = key(&task.job.batch);
    let first = task.cursor.is_none();
    let (reply, outcome) = match step(pool, task).await {
        (Step::More(task), _) => {
            let task = *task;
            if first {
                in_progress
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(batch_key);
            }
            active.push_back(task);
            return;
        }
        (Step::Done(outcome), reply) => (reply, outcome),
    };
    in_progress
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&batch_key);
    if let Some(reply) = reply {
        let _ = reply.send(outcome);
    }
}

/// Runs one transaction of `task`; on completion also hands back its reply channel.
async fn step(pool: &SqlitePool, task: Task) -> (Step, Option<Reply>) {
    let mut task = task;
    match write_chunk(pool, &mut task).await {
        Ok(Some(done)) => (Step::Done(Ok(done)), Some(task.job.reply)),
        Ok(None) => (Step::More(Box::new(task)), None),
        Err(e) => (Step::Done(Err(e)), Some(task.job.reply)),
    }
}

/// Writes the next chunk of `task`; `Some` with the outcome when the batch is whole.
async fn write_chunk(
    pool: &SqlitePool,
    task: &mut Task,
) -> Result<Option<(IngestOutcome, i64)>, StoreError> {
    let batch = Arc::clone(&task.job.batch);
    let received_ms = task.job.received_ms;
    let mut tx = pool.begin().await?;
    let (cluster_id, agent_id, from) = match task.cursor {
        Some(cursor) => cursor,
        None => {
            let (cluster_id, agent_id, fresh) =
                begin_batch!(tx, &batch, received_ms, task.job.known_cluster);
            let from = if fresh {
                0
            } else {
                let pending: Option<i64> = sqlx::query_scalar(PENDING_FROM)
                    .bind(agent_id)
                    .bind(batch.sequence as i64)
                    .fetch_one(&mut *tx)
                    .await?;
                match pending {
                    // Stored before; the cluster therefore exists and its id is committed.
                    None => {
                        tx.rollback().await?;
                        return Ok(Some((IngestOutcome::duplicate(), cluster_id)));
                    }
                    // Partly stored before the server stopped: resume.
                    Some(from) => usize::try_from(from).unwrap_or_default(),
                }
            };
            (cluster_id, agent_id, from)
        }
    };
    let total = task.rows.row_count();
    let until = (from + CHUNK_ROWS).min(total);
    insert_rows(&mut tx, cluster_id, agent_id, &task.rows, from..until).await?;
    if until < total {
        sqlx::query(SET_PENDING_FROM)
            .bind(agent_id)
            .bind(batch.sequence as i64)
            .bind(until as i64)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        task.cursor = Some((cluster_id, agent_id, until));
        return Ok(None);
    }
    let m = &task.rows.dead_letter_minutes;
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
    let changes = &task.changes;
    apply_state_changes!(
        tx,
        cluster_id,
        agent_id,
        batch.sequence as i64,
        received_ms,
        changes
    );
    let operations = take_operations!(tx, cluster_id, agent_id, received_ms);
    if task.cursor.is_some() || from > 0 {
        sqlx::query(SET_WHOLE)
            .bind(agent_id)
            .bind(batch.sequence as i64)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(Some((task.rows.outcome(operations), cluster_id)))
}

const PENDING_FROM: &str = "SELECT pending_from FROM batches WHERE agent_id = $1 AND sequence = $2";
const SET_PENDING_FROM: &str =
    "UPDATE batches SET pending_from = $3 WHERE agent_id = $1 AND sequence = $2";
const SET_WHOLE: &str =
    "UPDATE batches SET pending_from = NULL WHERE agent_id = $1 AND sequence = $2";

/// Inserts rows `range` of the batch's row space: its events, then its dead letters, then its
/// depth ticks.
async fn insert_rows(
    tx: &mut SqliteConnection,
    cluster_id: i64,
    agent_id: i64,
    rows: &BatchRows,
    range: Range<usize>,
) -> Result<(), StoreError> {
    let events = rows.events.at_ms.len();
    let dead_letters = rows.dead_letters.at_ms.len();
    let part = |start: usize, len: usize| {
        let from = range.start.clamp(start, start + len) - start;
        let until = range.end.clamp(start, start + len) - start;
        from..until
    };
    let e = &rows.events;
    for sub in statements(part(0, events)) {
        let mut q = sqlx::QueryBuilder::<Sqlite>::new(
            "INSERT INTO events (cluster_id, agent_id, at_ms, kind, subject, detail) ",
        );
        q.push_values(sub, |mut b, i| {
            b.push_bind(cluster_id)
                .push_bind(agent_id)
                .push_bind(e.at_ms[i])
                .push_bind(e.kind[i])
                .push_bind(e.subject[i].as_deref())
                .push_bind(e.detail[i].as_str());
        });
        q.build().execute(&mut *tx).await?;
    }
    let d = &rows.dead_letters;
    for sub in statements(part(events, dead_letters)) {
        let mut q = sqlx::QueryBuilder::<Sqlite>::new(
            "INSERT INTO dead_letters (cluster_id, agent_id, at_ms, recipient, sender, \
             message_type, reason) ",
        );
        q.push_values(sub, |mut b, i| {
            b.push_bind(cluster_id)
                .push_bind(agent_id)
                .push_bind(d.at_ms[i])
                .push_bind(d.recipient[i].as_str())
                .push_bind(d.sender[i].as_deref())
                .push_bind(d.message_type[i].as_str())
                .push_bind(d.reason[i].as_str());
        });
        q.build().execute(&mut *tx).await?;
    }
    let t = &rows.depth_ticks;
    for sub in statements(part(events + dead_letters, t.at_ms.len())) {
        let mut q = sqlx::QueryBuilder::<Sqlite>::new(
            "INSERT INTO depth_ticks (cluster_id, agent_id, at_ms, samples) ",
        );
        q.push_values(sub, |mut b, i| {
            b.push_bind(cluster_id)
                .push_bind(agent_id)
                .push_bind(t.at_ms[i])
                .push_bind(t.samples[i].as_str());
        });
        q.build().execute(&mut *tx).await?;
    }
    Ok(())
}

/// `range` cut into pieces of at most [`ROWS_PER_STATEMENT`].
fn statements(range: Range<usize>) -> impl Iterator<Item = Range<usize>> {
    range
        .clone()
        .step_by(ROWS_PER_STATEMENT)
        .map(move |start| start..(start + ROWS_PER_STATEMENT).min(range.end))
}

#[cfg(test)]
mod tests {
    use super::statements;

    #[test]
    fn statements_cover_the_range_in_bounded_pieces() {
        let pieces: Vec<_> = statements(5..1_205).collect();
        assert_eq!(pieces, [5..405, 405..805, 805..1_205]);
        assert_eq!(statements(3..3).count(), 0);
    }
}
