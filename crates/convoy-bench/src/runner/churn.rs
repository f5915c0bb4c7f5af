//! `churn`, shared by both targets: a background task that, every
//! interval, creates an object from each template (`create` mode) or
//! creates and deletes them in turn (`recreate` mode), as upstream's
//! `churnOp` does, until the workload ends (the task is aborted then).
//!
//! Upstream's `recreate` keeps `number` slots per template, used
//! round-robin, one per tick: an empty slot gets a new object, a full one
//! has its object deleted. Each object therefore lives for `number` ticks,
//! and at most `number` objects per template exist at once.

use std::time::Duration;

use futures::future::BoxFuture;

use crate::plan::ChurnMode;

/// What a target does for `churn`.
pub(crate) trait Churner: Send + Sync + 'static {
    /// Creates an object from template `template`; its name, or `None`
    /// when creation failed (logged, as upstream logs it and goes on).
    fn create(&self, template: usize) -> BoxFuture<'_, Option<String>>;
    /// Deletes an object created from `template` (failures logged).
    fn delete(&self, template: usize, name: String) -> BoxFuture<'_, ()>;
}

/// Runs until aborted (or, in `create` mode with a limit, until the limit).
pub(crate) async fn run(
    churner: impl Churner,
    templates: usize,
    mode: ChurnMode,
    interval: Duration,
) {
    // Go's ticker first fires one interval after it starts.
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    match mode {
        ChurnMode::Create { limit } => {
            let mut count = 0;
            while limit.is_none_or(|l| count < l) {
                ticker.tick().await;
                for t in 0..templates {
                    churner.create(t).await;
                }
                count += 1;
            }
        }
        ChurnMode::Recreate { number } => {
            let mut slots: Vec<Vec<Option<String>>> = vec![vec![None; number]; templates];
            let mut count = 0;
            loop {
                ticker.tick().await;
                for (t, slots) in slots.iter_mut().enumerate() {
                    let slot = &mut slots[count % number];
                    *slot = match slot.take() {
                        Some(name) => {
                            churner.delete(t, name).await;
                            None
                        }
                        None => churner.create(t).await,
                    };
                }
                count += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parking_lot::Mutex;

    use super::*;

    #[derive(Clone, Default)]
    struct Log(Arc<Mutex<Vec<String>>>);

    impl Churner for Log {
        fn create(&self, template: usize) -> BoxFuture<'_, Option<String>> {
            Box::pin(async move {
                let mut log = self.0.lock();
                let name = format!("t{template}-{}", log.len());
                log.push(format!("+{name}"));
                Some(name)
            })
        }
        fn delete(&self, _: usize, name: String) -> BoxFuture<'_, ()> {
            Box::pin(async move { self.0.lock().push(format!("-{name}")) })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn create_mode_stops_at_the_limit() {
        let log = Log::default();
        run(log.clone(), 2, ChurnMode::Create { limit: Some(2) }, Duration::from_millis(500)).await;
        assert_eq!(*log.0.lock(), ["+t0-0", "+t1-1", "+t0-2", "+t1-3"]);
    }

    #[tokio::test(start_paused = true)]
    async fn recreate_mode_alternates_per_slot() {
        let log = Log::default();
        let task = tokio::spawn(run(
            log.clone(),
            1,
            ChurnMode::Recreate { number: 2 },
            Duration::from_millis(100),
        ));
        // Ticks at 100..=600 ms: create, create, delete, delete, create, create.
        tokio::time::sleep(Duration::from_millis(650)).await;
        task.abort();
        assert_eq!(*log.0.lock(), ["+t0-0", "+t0-1", "-t0-0", "-t0-1", "+t0-4", "+t0-5"]);
    }
}
