//! From one watcher's events to [`ClusterUpdate`]s: the [`Watched`] trait each watched kind
//! implements (what an add, a change and a deletion of it mean), and the [`Translator`] that
//! remembers the last `Arc` of every object by `namespace/name`, to produce `old` in
//! `*Updated` and to find what disappeared during a relist. Used by every watch of
//! [`crate::watch`], [`crate::objects`], [`crate::pod_groups`] and `custom`.

use std::collections::{HashMap, VecDeque};
use std::fmt::Debug;
use std::sync::Arc;

use convoy_api::ClusterUpdate;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Resource;
use kube::runtime::watcher::{self, Event};

use crate::trim::{trim_node, trim_pod};

/// An object kind the adapter watches.
pub(crate) trait Watched: Resource + Clone + Debug + Send + Sync + 'static {
    /// For log lines.
    const KIND: &'static str;
    fn trim(&mut self);
    /// Pushes what a new object means (nothing, for an unreadable one).
    fn added(obj: Arc<Self>, out: &mut VecDeque<ClusterUpdate>);
    /// Pushes what a change means (possibly nothing).
    fn updated(old: Arc<Self>, new: Arc<Self>, out: &mut VecDeque<ClusterUpdate>);
    /// Pushes what a deletion means.
    fn deleted(obj: Arc<Self>, out: &mut VecDeque<ClusterUpdate>);
    /// Adapts the JSON of an object of another `version` of the kind's API
    /// before it is read as this type (see [`crate::versioned::convert`]);
    /// nothing by default (the same schema).
    fn read_version(_value: &mut serde_json::Value, _version: &str) {}
}

impl Watched for Node {
    const KIND: &'static str = "Node";
    fn trim(&mut self) {
        trim_node(self);
    }
    fn added(obj: Arc<Self>, out: &mut VecDeque<ClusterUpdate>) {
        out.push_back(ClusterUpdate::NodeAdded(obj));
    }
    fn updated(old: Arc<Self>, new: Arc<Self>, out: &mut VecDeque<ClusterUpdate>) {
        out.push_back(ClusterUpdate::NodeUpdated { old, new });
    }
    fn deleted(obj: Arc<Self>, out: &mut VecDeque<ClusterUpdate>) {
        out.push_back(ClusterUpdate::NodeDeleted(obj));
    }
}

impl Watched for Pod {
    const KIND: &'static str = "Pod";
    fn trim(&mut self) {
        trim_pod(self);
    }
    fn added(obj: Arc<Self>, out: &mut VecDeque<ClusterUpdate>) {
        out.push_back(ClusterUpdate::PodAdded(obj));
    }
    fn updated(old: Arc<Self>, new: Arc<Self>, out: &mut VecDeque<ClusterUpdate>) {
        out.push_back(ClusterUpdate::PodUpdated { old, new });
    }
    fn deleted(obj: Arc<Self>, out: &mut VecDeque<ClusterUpdate>) {
        out.push_back(ClusterUpdate::PodDeleted(obj));
    }
}

/// Turns one watcher's events into updates, remembering the last object of
/// each key.
///
/// Every (re)list is handled the same way: `Init` starts a new epoch,
/// `InitApply` upserts and stamps the object with the epoch, `InitDone`
/// deletes what the list did not stamp. The first list differs only in
/// that its `InitDone` is reported (so the caller can send `Synced`).
/// Nothing is buffered during a list beyond the epoch stamps.
pub(crate) struct Translator<K> {
    known: HashMap<String, Known<K>>,
    epoch: u64,
    listing: bool,
    synced: bool,
}

struct Known<K> {
    obj: Arc<K>,
    epoch: u64,
}

impl<K> Default for Translator<K> {
    fn default() -> Self {
        Self { known: HashMap::new(), epoch: 0, listing: false, synced: false }
    }
}

fn key<K: Resource>(obj: &K) -> String {
    let meta = obj.meta();
    match meta.namespace.as_deref() {
        Some(ns) => format!("{ns}/{}", meta.name.as_deref().unwrap_or("")),
        None => meta.name.clone().unwrap_or_default(),
    }
}

impl<K: Watched> Translator<K> {
    /// Handles a watcher item (errors are logged: the watcher retries).
    /// True when this completed the first list.
    pub(crate) fn handle_result(
        &mut self,
        event: watcher::Result<Event<K>>,
        out: &mut VecDeque<ClusterUpdate>,
    ) -> bool {
        match event {
            Ok(event) => self.handle(event, out),
            Err(e) => {
                tracing::warn!(kind = K::KIND, error = %e, "watch failed; retrying with backoff");
                false
            }
        }
    }

    /// Handles one watcher event. True when this completed the first list.
    pub(crate) fn handle(&mut self, event: Event<K>, out: &mut VecDeque<ClusterUpdate>) -> bool {
        match event {
            Event::Init => {
                self.epoch += 1;
                self.listing = true;
                false
            }
            Event::InitApply(obj) => {
                self.apply(obj, out);
                false
            }
            Event::Apply(obj) => {
                self.apply(obj, out);
                false
            }
            Event::Delete(obj) => {
                self.delete(obj, out);
                false
            }
            Event::InitDone => {
                if self.listing {
                    self.listing = false;
                    let epoch = self.epoch;
                    let mut gone = Vec::new();
                    self.known.retain(|_, k| {
                        let keep = k.epoch == epoch;
                        if !keep {
                            gone.push(Arc::clone(&k.obj));
                        }
                        keep
                    });
                    if !gone.is_empty() {
                        tracing::info!(
                            kind = K::KIND,
                            count = gone.len(),
                            "deleted while not watching"
                        );
                    }
                    for obj in gone {
                        K::deleted(obj, out);
                    }
                }
                let first = !self.synced;
                self.synced = true;
                first
            }
        }
    }

    fn apply(&mut self, mut obj: K, out: &mut VecDeque<ClusterUpdate>) {
        let key = key(&obj);
        let epoch = self.epoch;
        match self.known.get_mut(&key) {
            Some(known) => {
                known.epoch = epoch;
                let (old_meta, new_meta) = (known.obj.meta(), obj.meta());
                if old_meta.uid != new_meta.uid {
                    // Deleted and recreated under the same name unseen.
                    obj.trim();
                    let new = Arc::new(obj);
                    let old = std::mem::replace(&mut known.obj, Arc::clone(&new));
                    K::deleted(old, out);
                    K::added(new, out);
                } else if old_meta.resource_version != new_meta.resource_version {
                    obj.trim();
                    let new = Arc::new(obj);
                    let old = std::mem::replace(&mut known.obj, Arc::clone(&new));
                    K::updated(old, new, out);
                }
            }
            None => {
                obj.trim();
                let obj = Arc::new(obj);
                self.known.insert(key, Known { obj: Arc::clone(&obj), epoch });
                K::added(obj, out);
            }
        }
    }

    fn delete(&mut self, mut obj: K, out: &mut VecDeque<ClusterUpdate>) {
        let Some(known) = self.known.remove(&key(&obj)) else {
            return; // never reported: nothing to take back
        };
        // The final state is the most accurate, unless it is another object.
        let last = if known.obj.meta().uid == obj.meta().uid {
            obj.trim();
            Arc::new(obj)
        } else {
            known.obj
        };
        K::deleted(last, out);
    }

    /// The kind stopped being served: everything known is deleted.
    pub(crate) fn forget_all(&mut self, out: &mut VecDeque<ClusterUpdate>) {
        for (_, known) in self.known.drain() {
            K::deleted(known.obj, out);
        }
        self.listing = false;
    }

    /// Number of objects known.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.known.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn pod(name: &str, uid: &str, rv: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(uid.into()),
                resource_version: Some(rv.into()),
                managed_fields: Some(vec![Default::default()]),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn describe(out: &mut VecDeque<ClusterUpdate>) -> Vec<String> {
        let rv = |p: &Pod| {
            assert!(p.metadata.managed_fields.is_none(), "trimmed");
            format!(
                "{}@{}",
                p.metadata.name.as_deref().unwrap(),
                p.metadata.resource_version.as_deref().unwrap()
            )
        };
        out.drain(..)
            .map(|u| match u {
                ClusterUpdate::PodAdded(p) => format!("add {}", rv(&p)),
                ClusterUpdate::PodUpdated { old, new } => {
                    format!("update {} {}", rv(&old), rv(&new))
                }
                ClusterUpdate::PodDeleted(p) => format!("delete {}", rv(&p)),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn list_then_changes_then_relist() {
        let mut t = Translator::<Pod>::default();
        let mut out = VecDeque::new();
        assert!(!t.handle(Event::Init, &mut out));
        t.handle(Event::InitApply(pod("a", "ua", "1")), &mut out);
        t.handle(Event::InitApply(pod("b", "ub", "2")), &mut out);
        assert!(t.handle(Event::InitDone, &mut out), "first list complete");
        assert_eq!(describe(&mut out), ["add a@1", "add b@2"]);

        t.handle(Event::Apply(pod("a", "ua", "3")), &mut out);
        t.handle(Event::Apply(pod("a", "ua", "3")), &mut out); // same version: nothing
        t.handle(Event::Apply(pod("c", "uc", "4")), &mut out);
        t.handle(Event::Delete(pod("b", "ub", "5")), &mut out);
        t.handle(Event::Delete(pod("zz", "uz", "6")), &mut out); // unknown: nothing
        assert_eq!(describe(&mut out), ["update a@1 a@3", "add c@4", "delete b@5"]);

        // Relist after missed events: c changed, d is new, a disappeared.
        assert!(!t.handle(Event::Init, &mut out));
        t.handle(Event::InitApply(pod("c", "uc", "7")), &mut out);
        t.handle(Event::InitApply(pod("d", "ud", "8")), &mut out);
        assert!(!t.handle(Event::InitDone, &mut out), "not the first list");
        assert_eq!(describe(&mut out), ["update c@4 c@7", "add d@8", "delete a@3"]);
        assert_eq!(t.len(), 2);
    }

    /// A pod as a newer client might write it (a field this version does
    /// not know, a quantity it cannot read) decodes, passes through the
    /// watch like any other, and is refused by name when the scheduler
    /// reads it, with its UID (for the Event and condition).
    #[test]
    fn an_unreadable_pod_passes_through_and_is_refused_by_name() {
        let raw = r#"{"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "1"},
            "spec": {"futureField": {"x": 1}, "containers": [{"name": "c",
                "resources": {"requests": {"cpu": "lots"}, "limits": {"memory": "-1Gi"}}}]}}"#;
        let pod: Pod = serde_json::from_str(raw).expect("decodes");
        let mut t = Translator::<Pod>::default();
        let mut out = VecDeque::new();
        t.handle(Event::Init, &mut out);
        t.handle(Event::InitApply(pod), &mut out);
        assert!(t.handle(Event::InitDone, &mut out));
        let Some(ClusterUpdate::PodAdded(p)) = out.pop_front() else { panic!("{out:?}") };
        let err = convoy_api::PodInfo::new(p).unwrap_err();
        assert_eq!(&*err.uid, "u1");
        assert_eq!(
            err.message,
            "spec.containers[0].resources.requests[cpu]: invalid quantity \"lots\": expected a number"
        );
    }

    #[test]
    fn recreated_under_same_name_is_delete_then_add() {
        let mut t = Translator::<Pod>::default();
        let mut out = VecDeque::new();
        t.handle(Event::Init, &mut out);
        t.handle(Event::InitApply(pod("a", "u1", "1")), &mut out);
        t.handle(Event::InitDone, &mut out);
        out.clear();
        t.handle(Event::Init, &mut out);
        t.handle(Event::InitApply(pod("a", "u2", "9")), &mut out);
        t.handle(Event::InitDone, &mut out);
        assert_eq!(describe(&mut out), ["delete a@1", "add a@9"]);
    }

    #[test]
    fn restarted_first_list_reports_done_once() {
        let mut t = Translator::<Pod>::default();
        let mut out = VecDeque::new();
        t.handle(Event::Init, &mut out);
        t.handle(Event::InitApply(pod("a", "ua", "1")), &mut out);
        // The list failed part-way; the watcher starts over.
        t.handle(Event::Init, &mut out);
        t.handle(Event::InitApply(pod("b", "ub", "2")), &mut out);
        assert!(t.handle(Event::InitDone, &mut out));
        assert_eq!(describe(&mut out), ["add a@1", "add b@2", "delete a@1"]);
    }
}
