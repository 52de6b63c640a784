//! The job scheduler: the demo's cluster singleton. While it runs (on one node at a time) it
//! ticks about once a second, creates a burst of jobs and sends them through its node's router.
//!
//! Every `dead_letter_every` ticks it also sends one job to the worker's retired path on a
//! random up member; nothing lives there, so that node records a dead letter
//! (`no actor at recipient path`).

use std::ops::RangeInclusive;
use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};
use troupe::cluster::Cluster;
use troupe::remoting::RemoteMessage;
use troupe::{Actor, ActorError, ActorRef, Context};

use super::RETIRED_WORKER_PATH;
use super::worker::Job;

/// What the scheduler takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SchedulerMsg {
    /// Time to schedule the next burst (sent by the scheduler to itself).
    Tick,
}

impl RemoteMessage for SchedulerMsg {
    const MANIFEST: &'static str = "troupe.demo.SchedulerMsg";
}

/// The scheduler's pace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerSettings {
    /// Between bursts.
    pub tick: Duration,
    /// Jobs per burst for three workers; scaled by the number of up members, so each worker
    /// sees the same load however many nodes there are.
    pub jobs_per_tick: RangeInclusive<u32>,
    /// Every this many ticks the burst is `spike_factor` times as large (0: never).
    pub spike_every: u64,
    /// How much larger a spike is than a normal burst.
    pub spike_factor: u64,
    /// How long one job takes, milliseconds.
    pub work_ms: RangeInclusive<u64>,
    /// Every this many ticks, one job goes to the retired path (0: never).
    pub dead_letter_every: u64,
}

impl Default for SchedulerSettings {
    /// About 4 jobs of about 400 ms a second for three workers (busy about half the time),
    /// a spike of about 24 jobs every 15 s (mailboxes fill to about 8 and drain over a few
    /// seconds), a dead letter every 4 s.
    fn default() -> Self {
        Self {
            tick: Duration::from_secs(1),
            jobs_per_tick: 1..=7,
            spike_every: 15,
            spike_factor: 6,
            work_ms: 100..=700,
            dead_letter_every: 4,
        }
    }
}

/// What one tick does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickPlan {
    /// The work of each job to route, milliseconds.
    pub jobs: Vec<u64>,
    /// Whether to send one job to the retired path.
    pub dead_letter: bool,
}

/// Plan tick number `tick` (from 1) for `workers` workers.
#[must_use]
pub fn plan(
    tick: u64,
    workers: usize,
    settings: &SchedulerSettings,
    rng: &mut impl Rng,
) -> TickPlan {
    let per_three = u64::from(rng.random_range(settings.jobs_per_tick.clone()));
    let mut count = if workers == 0 {
        0
    } else {
        (per_three * workers as u64).div_ceil(3)
    };
    if settings.spike_every > 0 && tick % settings.spike_every == 0 {
        count *= settings.spike_factor;
    }
    TickPlan {
        jobs: (0..count)
            .map(|_| rng.random_range(settings.work_ms.clone()))
            .collect(),
        dead_letter: settings.dead_letter_every > 0 && tick % settings.dead_letter_every == 0,
    }
}

/// The scheduler.
#[derive(Debug)]
pub struct JobScheduler {
    router: ActorRef<Job>,
    cluster: Cluster,
    settings: SchedulerSettings,
    ticks: u64,
    next_job: u64,
    node: String,
}

impl JobScheduler {
    /// A scheduler routing through `router`.
    #[must_use]
    pub fn new(router: ActorRef<Job>, cluster: Cluster, settings: SchedulerSettings) -> Self {
        let node = cluster.self_address().host_port();
        Self {
            router,
            cluster,
            settings,
            ticks: 0,
            next_job: 1,
            node,
        }
    }

    fn job(&mut self, work_ms: u64) -> Job {
        let id = self.next_job;
        self.next_job += 1;
        Job {
            id,
            scheduled_by: self.node.clone(),
            work_ms,
        }
    }

    /// One job to where the worker used to live, on a random up member.
    fn send_to_retired_worker(&mut self, work_ms: u64) {
        let members = self.cluster.up_members();
        if members.is_empty() {
            return;
        }
        let member = &members[rand::rng().random_range(0..members.len())];
        let job = self.job(work_ms);
        tracing::info!(
            job = job.id,
            node = %member.address(),
            "sending a job to the retired worker path {RETIRED_WORKER_PATH} (becomes a dead letter)"
        );
        self.cluster
            .remoting()
            .remote_ref::<Job>(member.address(), RETIRED_WORKER_PATH)
            .tell(job);
    }
}

impl Actor for JobScheduler {
    type Msg = SchedulerMsg;

    async fn pre_start(&mut self, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        tracing::info!(node = %self.node, "job scheduler started");
        ctx.schedule_once(self.settings.tick, SchedulerMsg::Tick);
        Ok(())
    }

    async fn handle(
        &mut self,
        msg: SchedulerMsg,
        ctx: &mut Context<Self>,
    ) -> Result<(), ActorError> {
        match msg {
            SchedulerMsg::Tick => {
                self.ticks += 1;
                let workers = self.cluster.up_members().len();
                let plan = plan(self.ticks, workers, &self.settings, &mut rand::rng());
                for work_ms in &plan.jobs {
                    let job = self.job(*work_ms);
                    self.router.tell(job);
                }
                if plan.dead_letter {
                    let work_ms = *self.settings.work_ms.start();
                    self.send_to_retired_worker(work_ms);
                }
                if self.ticks % 10 == 0 {
                    tracing::info!(
                        ticks = self.ticks,
                        jobs = self.next_job - 1,
                        "job scheduler running"
                    );
                }
                ctx.schedule_once(self.settings.tick, SchedulerMsg::Tick);
            }
        }
        Ok(())
    }

    async fn post_stop(&mut self, _ctx: &mut Context<Self>) {
        tracing::info!(node = %self.node, jobs = self.next_job - 1, "job scheduler stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;

    proptest! {
        #[test]
        fn a_plan_scales_with_the_workers_and_stays_within_the_settings(
            tick in 1u64..1_000,
            workers in 0usize..10,
            seed: u64,
        ) {
            let settings = SchedulerSettings::default();
            let plan = plan(tick, workers, &settings, &mut rand::rngs::StdRng::seed_from_u64(seed));
            let spike = if tick % 15 == 0 { 6 } else { 1 };
            let scaled = |n: u32| (u64::from(n) * workers as u64).div_ceil(3) * spike;
            prop_assert!(plan.jobs.len() as u64 >= scaled(*settings.jobs_per_tick.start()));
            prop_assert!(plan.jobs.len() as u64 <= scaled(*settings.jobs_per_tick.end()));
            prop_assert!(plan.jobs.iter().all(|w| settings.work_ms.contains(w)));
            prop_assert_eq!(plan.dead_letter, tick % 4 == 0);
        }
    }
}
