//! Driving the scheduler: the production loop (events and scheduling as two
//! tasks, periodic queue flushes) and the simulation driver that runs until
//! the cluster is idle.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use std::collections::HashSet;

use convoy_api::{ClusterUpdate, FakeClock, PodKey};
use convoy_queue::{QueueKind, SchedulingQueue};
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

/// Runs `start` once this replica leads when `delay` is set (upstream's
/// `delayCacheUntilActive`: informers start in `OnStartedLeading`), at once
/// otherwise. `None`, without running `start`, when the election ended
/// before this replica led.
pub(crate) async fn after_leading<F: Future>(
    delay: bool,
    leader: &mut watch::Receiver<bool>,
    start: F,
) -> Option<F::Output> {
    if delay && leader.wait_for(|leading| *leading).await.is_err() {
        return None;
    }
    Some(start.await)
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
    /// start-up, so the cache is warm before this replica leads; with
    /// `delayCacheUntilActive` and leader election, from when it leads:
    /// [`after_leading`]), tickers
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
            let mut leading = leader.clone();
            let delay = self.delay_cache_until_active;
            tokio::spawn(async move {
                let apply = async {
                    // `updates` is lazy: its watches start at the first poll.
                    let mut updates = std::pin::pin!(updates);
                    while let Some(u) = updates.next().await {
                        this.handle_update(u);
                    }
                };
                if after_leading(delay, &mut leading, apply).await.is_some() {
                    let _ = ended_tx.send(true);
                } else {
                    // The election ended before this replica led: the loop
                    // below sees the lost lease; keep `ended` open till then.
                    std::future::pending::<()>().await;
                }
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
            self.leading.store(true, Ordering::Release);
            let mut since_yield = 0u32;
            loop {
                // pop() returns at once while pods are queued; start the
                // bindings of the pods scheduled so far and give them a turn
                // now and then (their task sits in this worker's LIFO slot,
                // which other workers cannot steal).
                since_yield += 1;
                if since_yield == YIELD_EVERY {
                    since_yield = 0;
                    self.start_bindings();
                    tokio::task::yield_now().await;
                }
                tokio::select! {
                    biased;
                    _ = &mut shutdown => break 'outer Exit::Shutdown,
                    r = leader.changed() => {
                        if r.is_err() || !*leader.borrow() {
                            tracing::warn!("leader election lost: scheduling stops");
                            self.fence();
                            break 'outer Exit::LostLease;
                        }
                    }
                    _ = ended.changed() => break 'outer Exit::WatchEnded,
                    qpi = self.next_pod() => match qpi {
                        Some(qpi) => self.schedule(qpi),
                        None => break 'outer Exit::Shutdown,
                    },
                }
            }
        };
        // Pods already assumed bind even as the loop stops (a shutdown
        // waits for them; a lost lease leaves them to the API server).
        self.start_bindings();
        self.queue.close();
        events.abort();
        tickers.abort();
        exit
    }

    /// The next pod to schedule: at once while activeQ has one; otherwise
    /// the bindings of the pods scheduled so far start before the wait.
    async fn next_pod(self: &Arc<Self>) -> Option<convoy_api::QueuedPodInfo> {
        if let Some(qpi) = self.queue.try_pop() {
            return Some(qpi);
        }
        self.start_bindings();
        self.queue.pop().await
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
                        self.release_node_holds();
                        self.release_expired_preemptions();
                        self.refresh_idle_snapshot();
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
    /// when no pod can make progress any more: nothing is left to do, or
    /// nothing can change ([`Quiet`]): in a simulation only the scheduler
    /// changes the cluster (bindings, evictions, nominations), so once every
    /// pod in activeQ and backoffQ has been attempted since the last change
    /// and failed, retrying them gives the same answers forever. The fake
    /// clock then jumps once over every timer that could change an outcome
    /// by itself (the quiet limit: twice the maximum backoff, or the gang
    /// starvation guard's threshold plus hold when longer), and the run ends
    /// after one more such round. Without this, a pod with no node to go to
    /// at all (no nodes, or an internal error) was retried without end.
    pub async fn run_until_idle(
        self: &Arc<Self>,
        updates: &mut UnboundedReceiver<ClusterUpdate>,
        clock: &FakeClock,
    ) {
        /// Pods scheduled between two yields to the binding tasks.
        const BATCH: usize = 256;
        let mut quiet = Quiet::default();
        self.leading.store(true, Ordering::Release);
        loop {
            while let Ok(u) = updates.try_recv() {
                self.handle_update(u);
                quiet.changed();
            }
            let mut progressed = false;
            for _ in 0..BATCH {
                match self.queue.try_pop() {
                    Some(qpi) => {
                        let repeat = quiet.attempt(qpi.key());
                        self.schedule(qpi);
                        progressed = true;
                        if repeat && quiet.round_done(&self.queue) {
                            break;
                        }
                    }
                    None => break,
                }
            }
            self.start_bindings();
            if !updates.is_empty() {
                tokio::task::yield_now().await;
                continue;
            }
            let in_flight = self.binds_in_flight() > 0 || self.preemptions_in_flight() > 0;
            if quiet.round_complete && !in_flight {
                if quiet.waited {
                    let pending = self.queue.pending_counts();
                    tracing::info!(
                        active = pending.active,
                        backoff = pending.backoff,
                        "simulation ends: every pod left was retried without any change \
                         to the cluster; they stay pending"
                    );
                    break;
                }
                clock.advance(self.quiet_limit);
                self.queue.flush_backoff_completed();
                self.release_held_pods();
                quiet.waited_once();
                continue;
            }
            if progressed {
                tokio::task::yield_now().await;
                continue;
            }
            if in_flight {
                // Nothing to schedule while bindings complete: let the
                // snapshot drop the pods they replace as they are confirmed.
                self.refresh_idle_snapshot();
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
        self.refresh_idle_snapshot();
    }

    /// Brings the scheduling loop's snapshot up to date when the loop is
    /// not using it. A snapshot is refreshed at the start of each cycle;
    /// between bursts it keeps the nodes as the last cycle saw them, and
    /// with them every pod that was assumed then in its pending version,
    /// which the cluster has since replaced by the bound one: after a burst
    /// of 50,000 pods on 5,000 nodes that was about 200 MiB held for
    /// nothing. Called once a second by the tickers and at the end of a
    /// simulation; a loop holding the snapshot is refreshing it anyway.
    pub(crate) fn refresh_idle_snapshot(&self) {
        if let Some(mut ls) = self.loop_state.try_lock() {
            self.cache.update_snapshot(&mut ls.snapshot);
        }
    }
}

/// What a simulation has tried since the cluster last changed, to tell when
/// nothing can change any more (see [`Scheduler::run_until_idle`]).
#[derive(Debug, Default)]
struct Quiet {
    /// Pods attempted since the last change.
    attempted: HashSet<PodKey>,
    /// Attempts in a row of pods already in `attempted`.
    repeats: usize,
    /// Every pod in activeQ and backoffQ was attempted since the last
    /// change (and a pod came round again).
    round_complete: bool,
    /// The clock already jumped over the quiet limit since the last change.
    waited: bool,
}

impl Quiet {
    /// The cluster changed: everything may be different.
    fn changed(&mut self) {
        *self = Self::default();
    }

    /// A pod is about to be attempted; true if it was already attempted
    /// since the last change.
    fn attempt(&mut self, key: &PodKey) -> bool {
        if self.attempted.contains(key) {
            self.repeats += 1;
            true
        } else {
            self.attempted.insert(key.clone());
            self.repeats = 0;
            false
        }
    }

    /// After a repeat: whether every pod in activeQ and backoffQ has been
    /// attempted since the last change. Checked once the repeats in a row
    /// outnumber those pods, so the check costs O(1) per attempt.
    fn round_done(&mut self, queue: &SchedulingQueue) -> bool {
        let counts = queue.pending_counts();
        let queued = counts.active + counts.backoff;
        if self.repeats <= queued {
            return false;
        }
        self.repeats = 0;
        let attempted = self
            .attempted
            .iter()
            .filter(|k| matches!(queue.queue_of(k), Some(QueueKind::Active | QueueKind::Backoff)))
            .count();
        self.round_complete = attempted >= queued;
        self.round_complete
    }

    /// The clock jumped over the quiet limit: one more round, then the end.
    fn waited_once(&mut self) {
        self.attempted.clear();
        self.repeats = 0;
        self.round_complete = false;
        self.waited = true;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    /// `delayCacheUntilActive`: the caches start after the lease is won,
    /// never for a replica whose election ended first; without the delay
    /// they start at once, leading or not.
    #[tokio::test]
    async fn caches_start_after_leading_when_delayed() {
        let started = AtomicBool::new(false);
        let start = || async {
            started.store(true, Ordering::SeqCst);
            "started"
        };

        let (tx, mut rx) = watch::channel(false);
        {
            let mut delayed = std::pin::pin!(after_leading(true, &mut rx, start()));
            assert!(futures::poll!(delayed.as_mut()).is_pending());
            assert!(!started.load(Ordering::SeqCst), "started before leading");
            tx.send(true).unwrap();
            assert_eq!(delayed.await, Some("started"));
        }
        assert!(started.swap(false, Ordering::SeqCst));

        // Already leading: at once.
        assert_eq!(after_leading(true, &mut rx, start()).await, Some("started"));
        assert!(started.swap(false, Ordering::SeqCst));

        // Not delayed: at once, even as a follower.
        let (_tx, mut follower) = watch::channel(false);
        assert_eq!(after_leading(false, &mut follower, start()).await, Some("started"));
        assert!(started.swap(false, Ordering::SeqCst));

        // The election ended before this replica led: never.
        let (tx, mut lost) = watch::channel(false);
        drop(tx);
        assert_eq!(after_leading(true, &mut lost, start()).await, None);
        assert!(!started.load(Ordering::SeqCst));
    }
}
