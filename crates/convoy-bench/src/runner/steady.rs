//! `createPods` with `steadyState: true`, shared by both targets, as
//! upstream's `createPodsSteadily`: `count` pods are created, and every
//! pod of the namespace seen bound is deleted and replaced by a new one,
//! until `duration` (counted from the start of the op) is over. Pods that
//! are in flight when the time is up are still created; the `count` pods
//! present at the end stay (a later `deletePods` or `barrier` may use
//! them).
//!
//! As upstream warns, every pod of the namespace is deleted once bound,
//! so pods meant to stay belong in another namespace.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::time::Duration;

use convoy_api::PodKey;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;

use super::tracker::{Created, PodTracker, SteadyHook};
use crate::objects::PodFactory;

/// What a steady state did to its namespace.
#[derive(Debug, Default)]
pub(crate) struct SteadyOutcome {
    /// Pods it created that are still there.
    pub(crate) live: Vec<Created>,
    /// Names of the pods it deleted (some may have been created earlier,
    /// by other ops).
    pub(crate) deleted: HashSet<String>,
    /// Replacements created.
    pub(crate) replaced: usize,
}

/// Runs a steady state in `namespace`. `serial` numbers pod names;
/// `create` and `delete` are the target's (up to `concurrency` of each in
/// flight).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run<C, D>(
    tracker: &Mutex<PodTracker>,
    namespace: &str,
    factory: &mut PodFactory,
    serial: &mut u64,
    count: usize,
    duration: Duration,
    concurrency: usize,
    create: impl Fn(Pod) -> C,
    delete: impl Fn(PodKey) -> D,
) -> Result<SteadyOutcome, String>
where
    C: Future<Output = Result<(), String>>,
    D: Future<Output = Result<(), String>>,
{
    let deadline = tokio::time::Instant::now() + duration;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tracker.lock().steady = Some(SteadyHook { namespace: namespace.to_string(), bound: tx });
    let live: Mutex<HashMap<String, Created>> = Mutex::default();
    let result = async {
        let mut first = Vec::with_capacity(count);
        for i in 0..count {
            *serial += 1;
            let pod = factory.build(i, *serial)?;
            live.lock().insert(pod.metadata.name.clone().unwrap_or_default(), Created::of(&pod));
            first.push(pod);
        }
        futures::stream::iter(first)
            .map(&create)
            .buffer_unordered(concurrency)
            .try_collect::<Vec<()>>()
            .await?;
        let mut deleted = HashSet::new();
        let mut next = count;
        let bound =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|k| (k, rx)) })
                .take_until(tokio::time::sleep_until(deadline));
        let own_deletes = tracker.lock().own_deletes.clone();
        bound
            .map(|key: PodKey| {
                own_deletes.mark(&key.namespace, &key.name);
                live.lock().remove(key.name.as_ref());
                deleted.insert(key.name.to_string());
                *serial += 1;
                let pod = factory.build(next, *serial);
                next += 1;
                if let Ok(pod) = &pod {
                    live.lock()
                        .insert(pod.metadata.name.clone().unwrap_or_default(), Created::of(pod));
                }
                let (delete, create) = (&delete, &create);
                async move {
                    delete(key).await?;
                    create(pod?).await
                }
            })
            .buffer_unordered(concurrency)
            .try_collect::<Vec<()>>()
            .await?;
        Ok::<_, String>((deleted, next - count))
    }
    .await;
    tracker.lock().steady = None;
    let (deleted, replaced) = result?;
    Ok(SteadyOutcome { live: live.into_inner().into_values().collect(), deleted, replaced })
}
