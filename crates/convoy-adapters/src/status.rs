//! Telling users what happened to their pods: `Scheduled` and
//! `FailedScheduling` Events, and the `PodScheduled=False` condition on
//! pods that do not fit (upstream's `updatePod`).
//!
//! Scheduling never waits on these writes. [`StatusWriter`] queues them in
//! a bounded channel drained by one background task that writes at a
//! limited rate; when the queue is full the write is dropped and counted
//! (the pod's next attempt produces another). Events go through
//! [`kube::runtime::events::Recorder`], which turns a repeat of the same
//! event (same pod, reason and note within 6 minutes) into a
//! `series.count` patch instead of a new object.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use convoy_api::PodKey;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::rate::TokenBucket;

/// The `reportingController` of Convoy's events.
pub const REPORTING_CONTROLLER: &str = "convoy-scheduler";

/// Sizing of the [`StatusWriter`].
#[derive(Debug, Clone, PartialEq)]
pub struct StatusWriterOptions {
    /// Writes queued at most; more are dropped.
    pub capacity: usize,
    /// API writes per second (an event and a status patch are one each);
    /// `<= 0` means unlimited.
    pub qps: f32,
    /// Writes allowed at once after a quiet period.
    pub burst: u32,
}

impl Default for StatusWriterOptions {
    fn default() -> Self {
        Self { capacity: 10_000, qps: 50.0, burst: 100 }
    }
}

enum Work {
    Scheduled { pod: PodKey, uid: String, node: String },
    Unschedulable { pod: PodKey, uid: String, message: String },
    Flush(oneshot::Sender<()>),
}

#[derive(Debug, Default)]
struct Counters {
    dropped: AtomicU64,
    failed: AtomicU64,
}

/// Queues Events and pod-status writes for a background task; see the
/// module docs. Cheap to clone; the task ends once every clone is dropped
/// and the queue is drained.
#[derive(Debug, Clone)]
pub struct StatusWriter {
    queue: mpsc::Sender<Work>,
    counters: Arc<Counters>,
}

impl StatusWriter {
    /// Starts the background task (on the current tokio runtime).
    pub fn new(client: kube::Client, opts: StatusWriterOptions) -> (StatusWriter, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(opts.capacity.max(1));
        let counters = Arc::new(Counters::default());
        let reporter = Reporter {
            controller: REPORTING_CONTROLLER.into(),
            instance: std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()),
        };
        let task = Task {
            client: client.clone(),
            recorder: Recorder::new(client, reporter),
            bucket: (opts.qps > 0.0)
                .then(|| TokenBucket::new(opts.qps, opts.burst, tokio::time::Instant::now())),
            counters: Arc::clone(&counters),
        };
        let handle = tokio::spawn(task.run(rx));
        (StatusWriter { queue: tx, counters }, handle)
    }

    /// Queues a `Scheduled` event for a pod bound to `node`. False if the
    /// queue was full and the event dropped.
    pub fn scheduled(&self, pod: &PodKey, uid: &str, node: &str) -> bool {
        self.push(Work::Scheduled { pod: pod.clone(), uid: uid.into(), node: node.into() })
    }

    /// Queues a `FailedScheduling` event and the `PodScheduled=False,
    /// reason=Unschedulable` condition with `message`. False if the queue
    /// was full and both were dropped.
    pub fn unschedulable(&self, pod: &PodKey, uid: &str, message: &str) -> bool {
        self.push(Work::Unschedulable {
            pod: pod.clone(),
            uid: uid.into(),
            message: message.into(),
        })
    }

    fn push(&self, work: Work) -> bool {
        match self.queue.try_send(work) {
            Ok(()) => true,
            Err(_) => {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Writes dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }

    /// API writes that failed (logged, not retried).
    pub fn failed(&self) -> u64 {
        self.counters.failed.load(Ordering::Relaxed)
    }

    /// Waits until everything queued before this call has been written, or
    /// `timeout` passed. True if drained.
    pub async fn flush(&self, timeout: Duration) -> bool {
        let (tx, rx) = oneshot::channel();
        tokio::time::timeout(timeout, async {
            self.queue.send(Work::Flush(tx)).await.is_ok() && rx.await.is_ok()
        })
        .await
        .unwrap_or(false)
    }
}

struct Task {
    client: kube::Client,
    recorder: Recorder,
    bucket: Option<TokenBucket>,
    counters: Arc<Counters>,
}

impl Task {
    async fn run(mut self, mut rx: mpsc::Receiver<Work>) {
        while let Some(work) = rx.recv().await {
            match work {
                Work::Scheduled { pod, uid, node } => {
                    let note = format!("Successfully assigned {pod} to {node}");
                    self.event(&pod, &uid, EventType::Normal, "Scheduled", note).await;
                }
                Work::Unschedulable { pod, uid, message } => {
                    let note = message.clone();
                    self.event(&pod, &uid, EventType::Warning, "FailedScheduling", note).await;
                    self.condition(&pod, &uid, &message).await;
                }
                Work::Flush(done) => {
                    let _ = done.send(());
                }
            }
        }
    }

    async fn take(&mut self) {
        if let Some(bucket) = self.bucket.as_mut() {
            bucket.take().await;
        }
    }

    async fn event(
        &mut self,
        pod: &PodKey,
        uid: &str,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        self.take().await;
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(pod.namespace.to_string()),
            name: Some(pod.name.to_string()),
            uid: Some(uid.into()),
            ..Default::default()
        };
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: if reason == "Scheduled" { "Binding" } else { "Scheduling" }.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &regarding).await {
            self.counters.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%pod, reason, error = %e, "writing event failed");
        }
    }

    /// Sets `PodScheduled=False, reason=Unschedulable` with a strategic
    /// merge patch (conditions merge by type). The UID in the patch makes
    /// the server refuse it for a recreated pod.
    async fn condition(&mut self, pod: &PodKey, uid: &str, message: &str) {
        self.take().await;
        let patch = json!({
            "metadata": { "uid": uid },
            "status": { "conditions": [{
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastProbeTime": null,
                "lastTransitionTime": Time(Timestamp::now()),
            }]}
        });
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        if let Err(e) =
            pods.patch_status(&pod.name, &PatchParams::default(), &Patch::Strategic(patch)).await
        {
            self.counters.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%pod, error = %e, "patching PodScheduled condition failed");
        }
    }
}
