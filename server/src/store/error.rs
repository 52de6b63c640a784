//! How the store fails.

/// A failure of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database answered with an error or could not be reached.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The migrations could not be applied.
    #[error("applying migrations failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// Stored JSON text did not parse (a bug or a hand-edited row).
    #[error("stored JSON is malformed: {0}")]
    Json(#[from] serde_json::Error),
    /// The SQLite writer cannot take the batch now (its queue is full, the batch waited too
    /// long, or the batch is still being written); nothing was written, a retry succeeds.
    #[error("the store is busy: {0}")]
    Busy(&'static str),
    /// A batch's cluster key (name and identity fingerprint) belongs to a stored cluster of
    /// another identity (or a name that looks like a key); nothing was written.
    #[error(
        "cluster key {0} belongs to a cluster with another identity; this batch is not merged into it"
    )]
    ClusterKeyTaken(String),
}

impl StoreError {
    /// Whether this means the database is away for now (restarting, unreachable, out of
    /// connections) rather than that the request or the data is wrong: such requests get 503
    /// and a retry succeeds once it is back. SQLSTATE classes 08 (connection exception), 57P
    /// (operator intervention: shutdown, crash shutdown, cannot connect now) and 53300 (too
    /// many connections).
    #[must_use]
    pub fn is_unavailable(&self) -> bool {
        match self {
            Self::Busy(_) => true,
            // SQLite: SQLITE_BUSY (5, and its extended codes such as 517) and SQLITE_LOCKED
            // (6): another connection held the file's write lock past the busy timeout.
            Self::Database(sqlx::Error::Database(database))
                if database
                    .try_downcast_ref::<sqlx::sqlite::SqliteError>()
                    .is_some() =>
            {
                database.code().is_some_and(|code| {
                    code.parse::<i32>()
                        .is_ok_and(|code| matches!(code & 0xff, 5 | 6))
                })
            }
            Self::Database(
                sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::PoolClosed,
            ) => true,
            Self::Database(sqlx::Error::Database(database)) => {
                database.code().is_some_and(|code| {
                    code.starts_with("08") || code.starts_with("57P") || code == "53300"
                })
            }
            _ => false,
        }
    }
}
