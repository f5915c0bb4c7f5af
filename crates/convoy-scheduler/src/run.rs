//! Driving the scheduler: the production loop (events and scheduling as two
//! tasks, periodic queue flushes) and the simulation driver that runs until
//! the cluster is idle.

use std::sync::Arc;
use std::time::Duration;

use convoy_api::{ClusterUpdate, FakeClock};
use futures::{Stream, StreamExt};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::scheduler::Scheduler;

/// How often backoff-completed pods move to the active queue (upstream: 1 s).
pub const BACKOFF_FLUSH_PERIOD: Duration = Duration::from_secs(1);
/// How often long-unschedulable pods are retried (upstream: 30 s).
pub const UNSCHEDULABLE_FLUSH_PERIOD: Duration = Duration::from_secs(30);
/// How often expired assumed pods are cleaned up.
pub const ASSUMED_CLEANUP_PERIOD: Duration = Duration::from_secs(1);

impl Scheduler {
    /// Runs until `updates` ends: one task applies cluster updates, one
    /// schedules pods as they become active, and tickers flush the queue.
    pub async fn run(self: Arc<Self>, updates: impl Stream<Item = ClusterUpdate> + Send + 'static) {
        let events = {
            let this = self.clone();
            tokio::spawn(async move {
                let mut updates = std::pin::pin!(updates);
                while let Some(u) = updates.next().await {
                    this.handle_update(u);
                }
            })
        };
        let tickers = {
            let this = self.clone();
            tokio::spawn(async move {
                let mut backoff = tokio::time::interval(BACKOFF_FLUSH_PERIOD);
                let mut leftover = tokio::time::interval(UNSCHEDULABLE_FLUSH_PERIOD);
                let mut assumed = tokio::time::interval(ASSUMED_CLEANUP_PERIOD);
                loop {
                    tokio::select! {
                        _ = backoff.tick() => { this.queue.flush_backoff_completed(); }
                        _ = leftover.tick() => { this.queue.flush_unschedulable_leftover(); }
                        _ = assumed.tick() => {
                            for p in this.cache.cleanup_expired_assumed_pods() {
                                tracing::warn!(pod = %p.pod.key, node = %p.node, "assumed pod expired: its binding was never confirmed");
                            }
                        }
                    }
                }
            })
        };
        let scheduling = {
            let this = self.clone();
            tokio::spawn(async move {
                while let Some(qpi) = this.queue.pop().await {
                    this.schedule_one(qpi);
                }
            })
        };
        let _ = events.await;
        self.queue.close();
        let _ = scheduling.await;
        tickers.abort();
    }

    /// Runs a simulation to its end: applies every update, schedules every
    /// active pod, lets bindings complete, and when nothing is left but pods
    /// in backoff, moves the fake clock to the next backoff expiry. Returns
    /// when no pod can make progress any more.
    pub async fn run_until_idle(
        self: &Arc<Self>,
        updates: &mut UnboundedReceiver<ClusterUpdate>,
        clock: &FakeClock,
    ) {
        /// Pods scheduled between two yields to the binding tasks.
        const BATCH: usize = 256;
        loop {
            while let Ok(u) = updates.try_recv() {
                self.handle_update(u);
            }
            let mut progressed = false;
            for _ in 0..BATCH {
                match self.queue.try_pop() {
                    Some(qpi) => {
                        self.schedule_one(qpi);
                        progressed = true;
                    }
                    None => break,
                }
            }
            if progressed {
                tokio::task::yield_now().await;
                continue;
            }
            if self.binds_in_flight() > 0 || !updates.is_empty() {
                tokio::task::yield_now().await;
                continue;
            }
            // Idle: anything waiting for its backoff (or at Permit)?
            match self.queue.next_backoff_expiry() {
                Some(at) => {
                    let now = convoy_api::Clock::now(clock);
                    if at > now {
                        clock.advance(at - now);
                    }
                    self.queue.flush_backoff_completed();
                }
                None if !self.waiting_pods.is_empty() => {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                None => break,
            }
        }
    }
}
