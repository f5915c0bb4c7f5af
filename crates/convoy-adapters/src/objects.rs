//! The watches of the [`ClusterObject`](convoy_api::ClusterObject) kinds: Namespaces, Services,
//! ReplicationControllers, ReplicaSets, StatefulSets, PodDisruptionBudgets
//! (`policy/v1`), PriorityClasses (`scheduling.k8s.io/v1`),
//! PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes,
//! CSIDrivers and CSIStorageCapacities (`storage.k8s.io/v1`), and
//! DeviceClasses, ResourceSlices, ResourceClaims and DeviceTaintRules
//! (`resource.k8s.io/v1`),
//! all namespaces, as upstream kube-scheduler's
//! informers. Plugins read their labels (namespaces, for pod affinity's
//! `namespaceSelector`), selectors (the default topology spreading
//! constraints), budgets (preemption), the volume objects (the volume
//! plugins) and the DRA objects (DynamicResources).
//!
//! Each kind has its own watcher and [`Translator`], with the same relist
//! bookkeeping as nodes and pods. Objects are trimmed
//! ([`ObjectKind::trim`]) before they are wrapped, so the `Arc` the
//! translator remembers holds metadata and a selector only. A change that
//! leaves labels, owner references and selector as they were (a
//! ReplicaSet's status, most often) is not passed on.

use std::collections::VecDeque;
use std::sync::Arc;

use convoy_api::ClusterUpdate;
use convoy_api::apis;
use convoy_api::objects::ObjectKind;
use futures::stream::{BoxStream, StreamExt};
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolume, PersistentVolumeClaim, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};
use kube::api::Api;
use kube::runtime::watcher;

use crate::discovery::DiscoveryHandle;
use crate::translator::{Translator, Watched};
use crate::versioned::{KindItem, kind_stream, typed_watch};

macro_rules! watched_object {
    ($($ty:ty),*) => {$(
        impl Watched for $ty {
            const KIND: &'static str = <$ty as ObjectKind>::KIND;
            fn trim(&mut self) {
                ObjectKind::trim(self);
            }
            fn added(obj: Arc<Self>, out: &mut VecDeque<ClusterUpdate>) {
                out.push_back(ClusterUpdate::ObjectApplied(<$ty>::wrap(obj)));
            }
            fn updated(old: Arc<Self>, new: Arc<Self>, out: &mut VecDeque<ClusterUpdate>) {
                if !old.same_for_scheduling(&new) {
                    out.push_back(ClusterUpdate::ObjectApplied(<$ty>::wrap(new)));
                }
            }
            fn deleted(obj: Arc<Self>, out: &mut VecDeque<ClusterUpdate>) {
                out.push_back(ClusterUpdate::ObjectDeleted(<$ty>::wrap(obj)));
            }
            fn read_version(value: &mut serde_json::Value, version: &str) {
                read_version::<$ty>(value, version);
            }
        }
    )*};
}

watched_object!(
    Namespace,
    Service,
    ReplicationController,
    ReplicaSet,
    StatefulSet,
    PodDisruptionBudget,
    PriorityClass,
    PersistentVolumeClaim,
    PersistentVolume,
    StorageClass,
    CSINode,
    CSIDriver,
    CSIStorageCapacity,
    DeviceClass,
    ResourceSlice,
    ResourceClaim,
    DeviceTaintRule
);

/// What differs between an older version of a kind and the version Convoy
/// reads it as. DRA's `v1beta2` is `v1`'s schema; a `v1alpha3`
/// DeviceTaintRule (Kubernetes 1.34 and 1.35) may also select devices by
/// `deviceClassName` and CEL `selectors`, which `v1` dropped: such a rule
/// is read as tainting every device its `driver`, `pool` and `device`
/// select (a superset, so no pod gets a device the rule taints), and
/// logged.
fn read_version<K: ObjectKind>(value: &mut serde_json::Value, version: &str) {
    if K::KIND != "DeviceTaintRule" || version != "v1alpha3" {
        return;
    }
    let Some(selector) = value.pointer_mut("/spec/deviceSelector").and_then(|s| s.as_object_mut())
    else {
        return;
    };
    let dropped: Vec<String> = ["deviceClassName", "selectors"]
        .into_iter()
        .filter(|f| selector.remove(*f).is_some_and(|v| !v.is_null()))
        .map(|f| format!("spec.deviceSelector.{f}"))
        .collect();
    if !dropped.is_empty() {
        let name = value.pointer("/metadata/name").and_then(|n| n.as_str()).unwrap_or("");
        tracing::warn!(
            name, fields = %dropped.join(", "),
            "a v1alpha3 DeviceTaintRule selects devices by fields this scheduler does not \
             evaluate: its taint is applied to every device its driver, pool and device select"
        );
    }
}

/// The watched kinds, one variant each: `$variant($type, $field, api)`,
/// where `api` is the [`apis`] constant of an optional API (watched as
/// discovery says) or `core` for a core `v1` kind (always served).
macro_rules! object_kinds {
    ($($variant:ident($ty:ty, $field:ident, $api:tt)),* $(,)?) => {
        /// One event of one of the object watchers.
        #[allow(clippy::large_enum_variant, reason = "the watcher's own events are this size")]
        pub(crate) enum ObjectEvent {
            $(
                #[doc = concat!("A ", stringify!($variant), " event.")]
                $variant(KindItem<$ty>),
            )*
        }

        /// The watchers, one stream each (merged by the caller).
        pub(crate) fn object_streams(
            client: &kube::Client,
            cfg: &watcher::Config,
            discovery: &DiscoveryHandle,
        ) -> Vec<BoxStream<'static, ObjectEvent>> {
            vec![$(
                object_kinds!(@stream client, cfg, discovery, $variant, $ty, $api),
            )*]
        }

        /// The translators of the watched kinds, and whether each is ready
        /// (listed once, or not served).
        #[derive(Default)]
        pub(crate) struct ObjectTranslators {
            $($field: Translator<$ty>,)*
            ready: Vec<&'static str>,
        }

        impl ObjectTranslators {
            /// Handles one event (errors are logged: the watcher retries).
            pub(crate) fn handle(&mut self, event: ObjectEvent, out: &mut VecDeque<ClusterUpdate>) {
                let (kind, ready) = match event {
                    $(ObjectEvent::$variant(item) => {
                        (stringify!($variant), handle_item(&mut self.$field, item, out))
                    })*
                };
                if ready && !self.ready.contains(&kind) {
                    self.ready.push(kind);
                }
            }

            /// Whether every kind has completed its first list or is not
            /// served.
            pub(crate) fn listed(&self) -> bool {
                self.ready.len() == [$(stringify!($variant)),*].len()
            }
        }
    };
    (@stream $client:ident, $cfg:ident, $discovery:ident, $variant:ident, $ty:ty, core) => {
        crate::initial_list::watch(Api::<$ty>::all($client.clone()), &$cfg)
            .map(|e| ObjectEvent::$variant(KindItem::Event(e)))
            .boxed()
    };
    (@stream $client:ident, $cfg:ident, $discovery:ident, $variant:ident, $ty:ty, $api:ident) => {
        kind_stream(
            $client.clone(),
            apis::$api,
            $cfg.clone(),
            $discovery.clone(),
            typed_watch::<$ty>,
        )
        .map(ObjectEvent::$variant)
        .boxed()
    };
}

object_kinds!(
    Namespace(Namespace, namespaces, core),
    Service(Service, services, core),
    ReplicationController(ReplicationController, replication_controllers, core),
    ReplicaSet(ReplicaSet, replica_sets, REPLICA_SETS),
    StatefulSet(StatefulSet, stateful_sets, STATEFUL_SETS),
    PodDisruptionBudget(PodDisruptionBudget, pdbs, POD_DISRUPTION_BUDGETS),
    PriorityClass(PriorityClass, priority_classes, PRIORITY_CLASSES),
    PersistentVolumeClaim(PersistentVolumeClaim, pvcs, core),
    PersistentVolume(PersistentVolume, pvs, core),
    StorageClass(StorageClass, storage_classes, STORAGE_CLASSES),
    CSINode(CSINode, csi_nodes, CSI_NODES),
    CSIDriver(CSIDriver, csi_drivers, CSI_DRIVERS),
    CSIStorageCapacity(CSIStorageCapacity, csi_storage_capacities, CSI_STORAGE_CAPACITIES),
    DeviceClass(DeviceClass, device_classes, DEVICE_CLASSES),
    ResourceSlice(ResourceSlice, resource_slices, RESOURCE_SLICES),
    ResourceClaim(ResourceClaim, resource_claims, RESOURCE_CLAIMS),
    DeviceTaintRule(DeviceTaintRule, device_taint_rules, DEVICE_TAINT_RULES),
);

/// One item of one kind's stream: true when the kind is ready now (its
/// first list done, or not served: what was known is forgotten).
fn handle_item<K: Watched>(
    t: &mut Translator<K>,
    item: KindItem<K>,
    out: &mut VecDeque<ClusterUpdate>,
) -> bool {
    match item {
        KindItem::Event(e) => t.handle_result(e, out),
        KindItem::Unavailable => {
            t.forget_all(out);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use convoy_api::ClusterObject;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    fn rs(name: &str, uid: &str, rv: &str, app: &str) -> ReplicaSet {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv,
                         "labels": {"app": app},
                         "managedFields": [{"manager": "kube-controller-manager"}],
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                              "name": app, "uid": "d", "controller": true}]},
            "spec": {"selector": {"matchLabels": {"app": app}}, "replicas": 2,
                     "template": {"metadata": {"labels": {"app": app}},
                                  "spec": {"containers": [{"name": "c"}]}}},
            "status": {"replicas": rv.parse::<i32>().unwrap()}
        }))
        .unwrap()
    }

    fn ns(name: &str, rv: &str, team: &str) -> Namespace {
        serde_json::from_value(json!({
            "metadata": {"name": name, "uid": format!("u-{name}"), "resourceVersion": rv,
                         "labels": {"team": team}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"}
        }))
        .unwrap()
    }

    fn describe(out: &mut VecDeque<ClusterUpdate>) -> Vec<String> {
        let show = |o: &ClusterObject| {
            let m = o.metadata();
            assert!(m.managed_fields.is_none(), "trimmed");
            if let ClusterObject::ReplicaSet(rs) = o {
                assert!(rs.spec.template.is_none() && rs.status.is_none(), "trimmed");
                assert!(m.owner_references.is_some(), "owner kept");
            }
            if let ClusterObject::Namespace(ns) = o {
                assert!(ns.spec.is_none() && ns.status.is_none(), "trimmed");
            }
            format!("{} {}@{}", o.kind(), o.key(), m.resource_version.as_deref().unwrap_or(""))
        };
        out.drain(..)
            .map(|u| match u {
                ClusterUpdate::ObjectApplied(o) => format!("apply {}", show(&o)),
                ClusterUpdate::ObjectDeleted(o) => format!("delete {}", show(&o)),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn replica_sets_list_change_and_relist() {
        let mut t = Translator::<ReplicaSet>::default();
        let mut out = VecDeque::new();
        t.handle(Event::Init, &mut out);
        t.handle(Event::InitApply(rs("a", "ua", "1", "web")), &mut out);
        t.handle(Event::InitApply(rs("b", "ub", "2", "api")), &mut out);
        assert!(t.handle(Event::InitDone, &mut out));
        assert_eq!(describe(&mut out), ["apply ReplicaSet ns/a@1", "apply ReplicaSet ns/b@2"]);

        // A status change is remembered but not passed on; a selector change is.
        t.handle(Event::Apply(rs("a", "ua", "3", "web")), &mut out);
        assert_eq!(describe(&mut out), Vec::<String>::new());
        t.handle(Event::Apply(rs("a", "ua", "4", "web2")), &mut out);
        t.handle(Event::Delete(rs("b", "ub", "5", "api")), &mut out);
        assert_eq!(describe(&mut out), ["apply ReplicaSet ns/a@4", "delete ReplicaSet ns/b@5"]);

        // Relist: a is gone, c is new, d was recreated under a known name.
        t.handle(Event::Apply(rs("d", "ud1", "6", "db")), &mut out);
        out.clear();
        t.handle(Event::Init, &mut out);
        t.handle(Event::InitApply(rs("c", "uc", "7", "cache")), &mut out);
        t.handle(Event::InitApply(rs("d", "ud2", "8", "db")), &mut out);
        assert!(!t.handle(Event::InitDone, &mut out));
        assert_eq!(
            describe(&mut out),
            [
                "apply ReplicaSet ns/c@7",
                "delete ReplicaSet ns/d@6",
                "apply ReplicaSet ns/d@8",
                "delete ReplicaSet ns/a@4"
            ]
        );
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn namespaces_pass_on_label_changes_only() {
        let mut t = Translator::<Namespace>::default();
        let mut out = VecDeque::new();
        t.handle(Event::Init, &mut out);
        t.handle(Event::InitApply(ns("team-a", "1", "a")), &mut out);
        t.handle(Event::InitDone, &mut out);
        // Terminating: a new version, nothing scheduling reads changed.
        let mut terminating = ns("team-a", "2", "a");
        terminating.status.as_mut().unwrap().phase = Some("Terminating".into());
        t.handle(Event::Apply(terminating), &mut out);
        t.handle(Event::Apply(ns("team-a", "3", "b")), &mut out);
        t.handle(Event::Delete(ns("team-a", "4", "b")), &mut out);
        assert_eq!(
            describe(&mut out),
            ["apply Namespace team-a@1", "apply Namespace team-a@3", "delete Namespace team-a@4"]
        );
    }

    #[test]
    fn listed_once_every_kind_has_listed() {
        let mut t = ObjectTranslators::default();
        let mut out = VecDeque::new();
        let done = [
            ObjectEvent::Namespace(KindItem::Event(Ok(Event::InitDone))),
            ObjectEvent::Service(KindItem::Event(Ok(Event::InitDone))),
            ObjectEvent::ReplicationController(KindItem::Event(Ok(Event::InitDone))),
            ObjectEvent::ReplicaSet(KindItem::Event(Ok(Event::InitDone))),
            ObjectEvent::PodDisruptionBudget(KindItem::Event(Ok(Event::InitDone))),
            ObjectEvent::PriorityClass(KindItem::Event(Ok(Event::InitDone))),
            ObjectEvent::PersistentVolumeClaim(KindItem::Event(Ok(Event::InitDone))),
            ObjectEvent::PersistentVolume(KindItem::Event(Ok(Event::InitDone))),
            ObjectEvent::StorageClass(KindItem::Event(Ok(Event::InitDone))),
            ObjectEvent::CSINode(KindItem::Event(Ok(Event::InitDone))),
            ObjectEvent::CSIDriver(KindItem::Event(Ok(Event::InitDone))),
            ObjectEvent::CSIStorageCapacity(KindItem::Event(Ok(Event::InitDone))),
            ObjectEvent::DeviceClass(KindItem::Event(Ok(Event::InitDone))),
            ObjectEvent::ResourceSlice(KindItem::Event(Ok(Event::InitDone))),
            ObjectEvent::ResourceClaim(KindItem::Event(Ok(Event::InitDone))),
            ObjectEvent::DeviceTaintRule(KindItem::Event(Ok(Event::InitDone))),
        ];
        for e in done {
            t.handle(e, &mut out);
            assert!(!t.listed());
        }
        // A relist of a kind already listed does not count for another.
        t.handle(ObjectEvent::Namespace(KindItem::Event(Ok(Event::Init))), &mut out);
        t.handle(ObjectEvent::Namespace(KindItem::Event(Ok(Event::InitDone))), &mut out);
        assert!(!t.listed());
        t.handle(ObjectEvent::StatefulSet(KindItem::Event(Ok(Event::Init))), &mut out);
        t.handle(ObjectEvent::StatefulSet(KindItem::Event(Ok(Event::InitDone))), &mut out);
        assert!(t.listed());
        assert!(out.is_empty());
    }
}
