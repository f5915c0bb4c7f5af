//! Pods held at Permit: allowed or rejected by plugins, or timed out.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use convoy_api::{PodInfo, Status, WaitingPods};
use parking_lot::Mutex;
use tokio::sync::oneshot;

struct WaitingPod {
    pod: Arc<PodInfo>,
    /// Plugins that returned Wait and have not allowed the pod yet.
    pending: HashSet<&'static str>,
    done: Option<oneshot::Sender<Status>>,
}

/// The waiting-pods map of one scheduler (shared by its profiles).
#[derive(Default)]
pub struct WaitingPodsMap {
    pods: Mutex<HashMap<Arc<str>, WaitingPod>>,
}

impl std::fmt::Debug for WaitingPodsMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitingPodsMap").field("waiting", &self.pods.lock().len()).finish()
    }
}

/// Resolves when a waiting pod is allowed by every plugin that made it
/// wait, rejected by one, or times out.
#[derive(Debug)]
pub struct PermitWait {
    rx: oneshot::Receiver<Status>,
    timeout: Duration,
    uid: Arc<str>,
    map: Arc<WaitingPodsMap>,
}

impl PermitWait {
    /// Waits for the verdict: Success when allowed, Unschedulable when
    /// rejected or timed out.
    pub async fn wait(self) -> Status {
        match tokio::time::timeout(self.timeout, self.rx).await {
            Ok(Ok(status)) => status,
            Ok(Err(_)) => Status::error("waiting pod dropped"),
            Err(_) => {
                let plugins = self.map.remove(&self.uid).map(|w| w.pending).unwrap_or_default();
                let mut names: Vec<_> = plugins.into_iter().collect();
                names.sort_unstable();
                let s = Status::unschedulable(format!(
                    "rejected due to timeout after waiting {:?} at plugin {}",
                    self.timeout,
                    names.join(",")
                ));
                // The (first) plugin that kept the pod waiting is the one
                // whose events may let it in next time.
                match names.first() {
                    Some(first) => s.with_plugin(first),
                    None => s,
                }
            }
        }
    }
}

impl WaitingPodsMap {
    /// An empty map.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Holds a pod for the given plugins; the returned future resolves with
    /// the verdict.
    pub fn add(
        self: &Arc<Self>,
        pod: Arc<PodInfo>,
        plugins: HashSet<&'static str>,
        timeout: Duration,
    ) -> PermitWait {
        let (tx, rx) = oneshot::channel();
        let uid = pod.uid.clone();
        self.pods.lock().insert(uid.clone(), WaitingPod { pod, pending: plugins, done: Some(tx) });
        PermitWait { rx, timeout, uid, map: self.clone() }
    }

    fn remove(&self, uid: &str) -> Option<WaitingPod> {
        self.pods.lock().remove(uid)
    }

    /// The waiting pod with this UID.
    pub fn get(&self, uid: &str) -> Option<Arc<PodInfo>> {
        self.pods.lock().get(uid).map(|w| w.pod.clone())
    }

    /// Number of waiting pods.
    pub fn len(&self) -> usize {
        self.pods.lock().len()
    }

    /// Whether no pod waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl WaitingPods for WaitingPodsMap {
    fn allow(&self, uid: &str, plugin: &'static str) -> bool {
        let mut pods = self.pods.lock();
        let Some(w) = pods.get_mut(uid) else { return false };
        w.pending.remove(plugin);
        if w.pending.is_empty() {
            let mut w = pods.remove(uid).expect("present");
            if let Some(tx) = w.done.take() {
                let _ = tx.send(Status::success());
            }
        }
        true
    }

    fn reject(&self, uid: &str, plugin: &'static str, message: &str) -> bool {
        let Some(mut w) = self.remove(uid) else { return false };
        if let Some(tx) = w.done.take() {
            let _ = tx.send(Status::unschedulable(message.to_string()).with_plugin(plugin));
        }
        true
    }

    fn uids(&self) -> Vec<Arc<str>> {
        self.pods.lock().keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use convoy_api::testing::PodBuilder;

    #[tokio::test]
    async fn allow_after_every_plugin() {
        let map = WaitingPodsMap::new();
        let wait = map.add(
            PodBuilder::new("p").info(),
            ["A", "B"].into_iter().collect(),
            Duration::from_secs(10),
        );
        assert!(map.allow("p", "A"));
        assert_eq!(map.len(), 1);
        assert!(map.allow("p", "B"));
        assert!(wait.wait().await.is_success());
        assert!(map.is_empty());
    }

    #[tokio::test]
    async fn reject_and_timeout() {
        let map = WaitingPodsMap::new();
        let wait = map.add(
            PodBuilder::new("p").info(),
            ["A"].into_iter().collect(),
            Duration::from_secs(10),
        );
        assert!(map.reject("p", "A", "gang broke"));
        let s = wait.wait().await;
        assert!(s.is_rejected());
        assert_eq!(s.message(), "gang broke");

        let wait = map.add(
            PodBuilder::new("q").info(),
            ["A"].into_iter().collect(),
            Duration::from_millis(10),
        );
        let s = wait.wait().await;
        assert!(s.message().contains("timeout"), "{s}");
        assert!(map.is_empty(), "timed-out pod leaves the map");
    }
}
