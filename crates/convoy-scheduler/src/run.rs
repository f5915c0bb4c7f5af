//! Driving the scheduler: the production loop (events and scheduling as two
//! tasks, periodic queue flushes) and the simulation driver that runs until
//! the cluster is idle.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use convoy_api::{ClusterUpdate, FakeClock};
use futures::{Stream, StreamExt};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::watch;

use crate::scheduler::Scheduler;

/// Why the live loop returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// SIGTERM or SIGINT: shut down cleanly.
    Shutdown,
    /// This replica lost the lease.
    LostLease,
    /// The watches ended (should not happen).
    WatchEnded,
}

/// Pods scheduled between two yields of the live scheduling loop.
const YIELD_EVERY: u32 = 32;

/// How often backoff-completed pods move to the active queue (upstream: 1 s).
pub const BACKOFF_FLUSH_PERIOD: Duration = Duration::from_secs(1);
/// How often long-unschedulable pods are retried (upstream: 30 s).
pub const UNSCHEDULABLE_FLUSH_PERIOD: Duration = Duration::from_secs(30);
/// How often expired assumed pods are cleaned up.
pub const ASSUMED_CLEANUP_PERIOD: Duration = Duration::from_secs(1);

impl Scheduler {
    /// Runs against a live cluster: one task applies cluster updates (from
    /// start-up, so the cache is warm before this replica leads), tickers
    /// flush the queue, and this task schedules pods while `leader` is true
    /// and the initial lists are synced. Returns on `shutdown`, when the
    /// lease is lost (scheduling stops at once), or when `updates` ends.
    /// `leader` turning `false` after `true`, or closing (the elector ended,
    /// even before this replica was synced), is a lost lease: the elector
    /// never campaigns again, so neither does this loop wait to lead again.
    pub async fn run_leader(
        self: Arc<Self>,
        updates: impl Stream<Item = ClusterUpdate> + Send + 'static,
        mut leader: watch::Receiver<bool>,
        shutdown: impl Future<Output = ()>,
    ) -> Exit {
        let (ended_tx, mut ended) = watch::channel(false);
        let events = {
            let this = self.clone();
            tokio::spawn(async move {
                let mut updates = std::pin::pin!(updates);
                while let Some(u) = updates.next().await {
                    this.handle_update(u);
                }
                let _ = ended_tx.send(true);
            })
        };
        let tickers = self.clone().spawn_tickers();
        let mut shutdown = std::pin::pin!(shutdown);
        let exit = 'outer: {
            // Wait until this replica leads and the cache is synced.
            while !(*leader.borrow() && self.synced.load(Ordering::Acquire)) {
                tokio::select! {
                    _ = &mut shutdown => break 'outer Exit::Shutdown,
                    _ = ended.changed() => break 'outer Exit::WatchEnded,
                    r = leader.changed() => if r.is_err() {
                        tracing::warn!("leader election lost before scheduling started");
                        break 'outer Exit::LostLease
                    },
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
            }
            tracing::info!("leading: scheduling starts");
            let mut since_yield = 0u32;
            loop {
                // pop() returns at once while pods are queued; give the
                // binding tasks this loop spawns a turn now and then (they sit
                // in this worker's LIFO slot, which other workers cannot steal).
                since_yield += 1;
                if since_yield == YIELD_EVERY {
                    since_yield = 0;
                    tokio::task::yield_now().await;
                }
                tokio::select! {
                    biased;
                    _ = &mut shutdown => break 'outer Exit::Shutdown,
                    r = leader.changed() => {
                        if r.is_err() || !*leader.borrow() {
                            tracing::warn!("leader election lost: scheduling stops");
                            break 'outer Exit::LostLease;
                        }
                    }
                    _ = ended.changed() => break 'outer Exit::WatchEnded,
                    qpi = self.queue.pop() => match qpi {
                        Some(qpi) => self.schedule_one(qpi),
                        None => break 'outer Exit::Shutdown,
                    },
                }
            }
        };
        self.queue.close();
        events.abort();
        tickers.abort();
        exit
    }

    fn spawn_tickers(self: Arc<Self>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut backoff = tokio::time::interval(BACKOFF_FLUSH_PERIOD);
            let mut leftover = tokio::time::interval(UNSCHEDULABLE_FLUSH_PERIOD);
            let mut assumed = tokio::time::interval(ASSUMED_CLEANUP_PERIOD);
            loop {
                tokio::select! {
                    _ = backoff.tick() => {
                        self.queue.flush_backoff_completed();
                        self.release_held_pods();
                        self.release_expired_preemptions();
                    }
                    _ = leftover.tick() => { self.queue.flush_unschedulable_leftover(); }
                    _ = assumed.tick() => {
                        for p in self.cache.cleanup_expired_assumed_pods() {
                            tracing::warn!(pod = %p.pod.key, node = %p.node, "assumed pod expired: its binding was never confirmed");
                        }
                    }
                }
            }
        })
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
            if !updates.is_empty() {
                tokio::task::yield_now().await;
                continue;
            }
            if self.binds_in_flight() > 0 || self.preemptions_in_flight() > 0 {
                if self.waiting_pods.is_empty() {
                    tokio::task::yield_now().await;
                } else {
                    // Bindings waiting at Permit: let time pass (a paused
                    // test clock jumps to the next timer).
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
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
                    self.release_held_pods();
                }
                None if !self.waiting_pods.is_empty() => {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                None => break,
            }
        }
    }
}
