//! The steps of an ingest transaction both backends share, as macros: the SQL text is the same,
//! the executor types differ, so each backend's `ingest` expands them over its own
//! transaction.

/// Runs the state changes of a batch inside transaction `$tx` (same SQL on both backends).
macro_rules! apply_state_changes {
    ($tx:expr, $cluster_id:expr, $agent_id:expr, $sequence:expr, $received_ms:expr, $changes:expr) => {{
        let sequence: i64 = $sequence;
        use crate::store::state::StateChange;
        for change in $changes {
            match change {
                StateChange::MemberStatus {
                    at_ms,
                    address,
                    uid,
                    status,
                    rank,
                    roles,
                } => {
                    sqlx::query(crate::store::sql::UPSERT_MEMBER_STATUS)
                        .bind($cluster_id)
                        .bind(address)
                        .bind(uid)
                        .bind(*status)
                        .bind(rank)
                        .bind(roles)
                        .bind(at_ms)
                        .bind($received_ms)
                        .execute(&mut *$tx)
                        .await?;
                }
                StateChange::Reachability {
                    at_ms,
                    address,
                    uid,
                    status,
                    rank,
                    roles,
                    reachable,
                    observers,
                } => {
                    sqlx::query(crate::store::sql::UPSERT_MEMBER_REACHABILITY)
                        .bind($cluster_id)
                        .bind(address)
                        .bind(uid)
                        .bind(*status)
                        .bind(rank)
                        .bind(roles)
                        .bind(reachable)
                        .bind(observers)
                        .bind(at_ms)
                        .bind($received_ms)
                        .bind($agent_id)
                        .bind(sequence)
                        .execute(&mut *$tx)
                        .await?;
                }
                StateChange::Leader { at_ms, leader } => {
                    sqlx::query(crate::store::sql::UPDATE_LEADER)
                        .bind($cluster_id)
                        .bind(leader)
                        .bind(at_ms)
                        .bind($agent_id)
                        .bind(sequence)
                        .execute(&mut *$tx)
                        .await?;
                }
                StateChange::SingletonHosted {
                    at_ms,
                    singleton,
                    role,
                    host,
                } => {
                    sqlx::query(crate::store::sql::UPSERT_SINGLETON_HOST)
                        .bind($cluster_id)
                        .bind(singleton)
                        .bind(role)
                        .bind(host)
                        .bind(at_ms)
                        .bind($agent_id)
                        .bind(sequence)
                        .execute(&mut *$tx)
                        .await?;
                }
                StateChange::SingletonStopped {
                    at_ms,
                    singleton,
                    role,
                    host,
                } => {
                    sqlx::query(crate::store::sql::UPSERT_SINGLETON_STOPPED)
                        .bind($cluster_id)
                        .bind(singleton)
                        .bind(role)
                        .bind(host)
                        .bind(at_ms)
                        .bind($agent_id)
                        .bind(sequence)
                        .execute(&mut *$tx)
                        .await?;
                }
                StateChange::Lease {
                    at_ms,
                    singleton,
                    role,
                    lease,
                    holder,
                } => {
                    sqlx::query(crate::store::sql::UPSERT_SINGLETON_LEASE)
                        .bind($cluster_id)
                        .bind(singleton)
                        .bind(role)
                        .bind(lease)
                        .bind(holder)
                        .bind(at_ms)
                        .bind($agent_id)
                        .bind(sequence)
                        .execute(&mut *$tx)
                        .await?;
                }
                StateChange::Router {
                    at_ms,
                    path,
                    strategy,
                    role,
                    routee_path,
                    routees,
                } => {
                    sqlx::query(crate::store::sql::UPSERT_ROUTER)
                        .bind($cluster_id)
                        .bind(path)
                        .bind(*strategy)
                        .bind(role)
                        .bind(routee_path)
                        .bind(routees)
                        .bind(at_ms)
                        .bind($agent_id)
                        .bind(sequence)
                        .execute(&mut *$tx)
                        .await?;
                }
                StateChange::Health { at_ms, health } => {
                    sqlx::query(crate::store::sql::UPDATE_HEALTH)
                        .bind($agent_id)
                        .bind(*health)
                        .bind(at_ms)
                        .bind(sequence)
                        .execute(&mut *$tx)
                        .await?;
                }
            }
        }
    }};
}

/// Begins the ingest transaction `$tx`: cluster (unless its id is known) and agent rows, then
/// the batch marker. Evaluates to `(cluster_id, agent_id, fresh)`; `fresh` is false for a batch
/// whose marker existed (stored before, or on SQLite partly stored: see `sqlite`).
macro_rules! begin_batch {
    ($tx:expr, $batch:expr, $received_ms:expr, $known_cluster:expr) => {{
        let batch: &troupe_protocol::ReportBatch = $batch;
        let id = &batch.identity;
        let cluster_id: i64 = match $known_cluster {
            Some(cluster_id) => cluster_id,
            None => {
                let key = id.cluster_key();
                let identity = id.cluster_identity.as_deref().unwrap_or("");
                sqlx::query(crate::store::sql::INSERT_CLUSTER)
                    .bind(&key)
                    .bind(&id.cluster)
                    .bind(identity)
                    .bind($received_ms)
                    .execute(&mut *$tx)
                    .await?;
                let (cluster_id, stored): (i64, String) =
                    sqlx::query_as(crate::store::sql::CLUSTER_ID)
                        .bind(&key)
                        .fetch_one(&mut *$tx)
                        .await?;
                if stored != identity {
                    // Another cluster holds the key: never write into it.
                    return Err(crate::store::error::StoreError::ClusterKeyTaken(key));
                }
                cluster_id
            }
        };
        let d = &batch.dropped;
        let agent_id: i64 = sqlx::query_scalar(crate::store::sql::UPSERT_AGENT)
            .bind(cluster_id)
            .bind(&id.node)
            .bind(id.incarnation as i64)
            .bind(&id.meta.node)
            .bind($received_ms)
            .bind(batch.sent_at_ms)
            .bind(batch.sequence as i64)
            .bind(d.membership as i64)
            .bind(d.singleton as i64)
            .bind(d.router as i64)
            .bind(d.dead_letters as i64)
            .bind(d.health as i64)
            .bind(d.depth_samples as i64)
            .bind(d.spool_batches as i64)
            .bind(batch.sent_at_ms.saturating_sub($received_ms))
            .fetch_one(&mut *$tx)
            .await?;
        let items = (batch.events.len() + batch.depth_samples.len()) as i64;
        let fresh = sqlx::query(crate::store::sql::INSERT_BATCH)
            .bind(agent_id)
            .bind(batch.sequence as i64)
            .bind($received_ms)
            .bind(items)
            .execute(&mut *$tx)
            .await?
            .rows_affected();
        (cluster_id, agent_id, fresh == 1)
    }};
}

/// Marks the operations waiting for cluster `$cluster_id` delivered and evaluates to them.
macro_rules! take_operations {
    ($tx:expr, $cluster_id:expr, $agent_id:expr, $received_ms:expr) => {{
        let rows: Vec<(i64, String, String)> = sqlx::query_as(crate::store::sql::TAKE_OPERATIONS)
            .bind($cluster_id)
            .bind($received_ms)
            .bind($agent_id)
            .fetch_all(&mut *$tx)
            .await?;
        rows.into_iter()
            .filter_map(|(id, address, operation)| {
                let operation = match operation.as_str() {
                    "leave" => troupe_protocol::OperationKind::Leave,
                    "down" => troupe_protocol::OperationKind::Down,
                    _ => return None,
                };
                Some(troupe_protocol::MemberOperation {
                    id,
                    address,
                    operation,
                })
            })
            .collect::<Vec<_>>()
    }};
}

pub(crate) use {apply_state_changes, begin_batch, take_operations};
