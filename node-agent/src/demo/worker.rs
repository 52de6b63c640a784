//! The compute worker: one per node at `/user/worker`, the routee of every demo router.
//!
//! A job takes its `work_ms`: mostly waiting (the I/O a real job would do), plus a little real
//! computation whose result is logged, so the worker cannot take the next job early and its
//! mailbox depth follows the load.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use troupe::remoting::RemoteMessage;
use troupe::{Actor, ActorError, Context};

/// One unit of work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Unique per scheduler instance, increasing.
    pub id: u64,
    /// The node whose scheduler instance created it (`host:port`).
    pub scheduled_by: String,
    /// How long the job takes, milliseconds.
    pub work_ms: u64,
}

impl RemoteMessage for Job {
    const MANIFEST: &'static str = "troupe.demo.Job";
}

/// The worker.
#[derive(Debug, Default)]
pub struct ComputeWorker {
    done: u64,
}

/// The number of primes below `limit`: a small, real computation.
#[must_use]
pub fn primes_below(limit: u64) -> u64 {
    (2..limit)
        .filter(|n| (2..).take_while(|d| d * d <= *n).all(|d| n % d != 0))
        .count() as u64
}

impl Actor for ComputeWorker {
    type Msg = Job;

    async fn handle(&mut self, job: Job, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        tokio::time::sleep(Duration::from_millis(job.work_ms)).await;
        let checksum = primes_below(1_000 + job.id % 1_000);
        self.done += 1;
        tracing::debug!(
            job = job.id,
            scheduled_by = %job.scheduled_by,
            work_ms = job.work_ms,
            checksum,
            done = self.done,
            "job done"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primes_below_counts_primes() {
        assert_eq!(primes_below(2), 0);
        assert_eq!(primes_below(10), 4);
        assert_eq!(primes_below(1_000), 168);
    }
}
