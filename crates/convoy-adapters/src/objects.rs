//! The watches of the [`ClusterObject`] kinds: Namespaces, Services,
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
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use crate::watch::{Translator, Watched};

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

/// One event of one of the object watchers.
#[allow(clippy::large_enum_variant, reason = "the watcher's own events are this size")]
pub(crate) enum ObjectEvent {
    Namespace(watcher::Result<Event<Namespace>>),
    Service(watcher::Result<Event<Service>>),
    ReplicationController(watcher::Result<Event<ReplicationController>>),
    ReplicaSet(watcher::Result<Event<ReplicaSet>>),
    StatefulSet(watcher::Result<Event<StatefulSet>>),
    PodDisruptionBudget(watcher::Result<Event<PodDisruptionBudget>>),
    PriorityClass(watcher::Result<Event<PriorityClass>>),
    PersistentVolumeClaim(watcher::Result<Event<PersistentVolumeClaim>>),
    PersistentVolume(watcher::Result<Event<PersistentVolume>>),
    StorageClass(watcher::Result<Event<StorageClass>>),
    CSINode(watcher::Result<Event<CSINode>>),
    CSIDriver(watcher::Result<Event<CSIDriver>>),
    CSIStorageCapacity(watcher::Result<Event<CSIStorageCapacity>>),
    DeviceClass(watcher::Result<Event<DeviceClass>>),
    ResourceSlice(watcher::Result<Event<ResourceSlice>>),
    ResourceClaim(watcher::Result<Event<ResourceClaim>>),
    DeviceTaintRule(watcher::Result<Event<DeviceTaintRule>>),
}

/// The seventeen watchers, one stream each (merged by the caller).
pub(crate) fn object_streams(
    client: &kube::Client,
    cfg: &watcher::Config,
) -> Vec<BoxStream<'static, ObjectEvent>> {
    fn watch<K>(
        client: &kube::Client,
        cfg: &watcher::Config,
        wrap: fn(watcher::Result<Event<K>>) -> ObjectEvent,
    ) -> BoxStream<'static, ObjectEvent>
    where
        K: Watched + kube::Resource<DynamicType = ()>,
    {
        watcher::watcher(Api::<K>::all(client.clone()), cfg.clone())
            .backoff(crate::backoff::watch_backoff())
            .map(wrap)
            .boxed()
    }
    vec![
        watch(client, cfg, ObjectEvent::Namespace),
        watch(client, cfg, ObjectEvent::Service),
        watch(client, cfg, ObjectEvent::ReplicationController),
        watch(client, cfg, ObjectEvent::ReplicaSet),
        watch(client, cfg, ObjectEvent::StatefulSet),
        watch(client, cfg, ObjectEvent::PodDisruptionBudget),
        watch(client, cfg, ObjectEvent::PriorityClass),
        watch(client, cfg, ObjectEvent::PersistentVolumeClaim),
        watch(client, cfg, ObjectEvent::PersistentVolume),
        watch(client, cfg, ObjectEvent::StorageClass),
        watch(client, cfg, ObjectEvent::CSINode),
        watch(client, cfg, ObjectEvent::CSIDriver),
        watch(client, cfg, ObjectEvent::CSIStorageCapacity),
        watch(client, cfg, ObjectEvent::DeviceClass),
        watch(client, cfg, ObjectEvent::ResourceSlice),
        watch(client, cfg, ObjectEvent::ResourceClaim),
        watch(client, cfg, ObjectEvent::DeviceTaintRule),
    ]
}

/// The translators of the seventeen kinds, and whether each has been listed.
#[derive(Default)]
pub(crate) struct ObjectTranslators {
    namespaces: Translator<Namespace>,
    services: Translator<Service>,
    replication_controllers: Translator<ReplicationController>,
    replica_sets: Translator<ReplicaSet>,
    stateful_sets: Translator<StatefulSet>,
    pdbs: Translator<PodDisruptionBudget>,
    priority_classes: Translator<PriorityClass>,
    pvcs: Translator<PersistentVolumeClaim>,
    pvs: Translator<PersistentVolume>,
    storage_classes: Translator<StorageClass>,
    csi_nodes: Translator<CSINode>,
    csi_drivers: Translator<CSIDriver>,
    csi_storage_capacities: Translator<CSIStorageCapacity>,
    device_classes: Translator<DeviceClass>,
    resource_slices: Translator<ResourceSlice>,
    resource_claims: Translator<ResourceClaim>,
    device_taint_rules: Translator<DeviceTaintRule>,
    listed: [bool; 17],
}

impl ObjectTranslators {
    /// Handles one event (errors are logged: the watcher retries).
    pub(crate) fn handle(&mut self, event: ObjectEvent, out: &mut VecDeque<ClusterUpdate>) {
        let (i, first_list_done) = match event {
            ObjectEvent::Namespace(e) => (0, self.namespaces.handle_result(e, out)),
            ObjectEvent::Service(e) => (1, self.services.handle_result(e, out)),
            ObjectEvent::ReplicationController(e) => {
                (2, self.replication_controllers.handle_result(e, out))
            }
            ObjectEvent::ReplicaSet(e) => (3, self.replica_sets.handle_result(e, out)),
            ObjectEvent::StatefulSet(e) => (4, self.stateful_sets.handle_result(e, out)),
            ObjectEvent::PodDisruptionBudget(e) => (5, self.pdbs.handle_result(e, out)),
            ObjectEvent::PriorityClass(e) => (6, self.priority_classes.handle_result(e, out)),
            ObjectEvent::PersistentVolumeClaim(e) => (7, self.pvcs.handle_result(e, out)),
            ObjectEvent::PersistentVolume(e) => (8, self.pvs.handle_result(e, out)),
            ObjectEvent::StorageClass(e) => (9, self.storage_classes.handle_result(e, out)),
            ObjectEvent::CSINode(e) => (10, self.csi_nodes.handle_result(e, out)),
            ObjectEvent::CSIDriver(e) => (11, self.csi_drivers.handle_result(e, out)),
            ObjectEvent::CSIStorageCapacity(e) => {
                (12, self.csi_storage_capacities.handle_result(e, out))
            }
            ObjectEvent::DeviceClass(e) => (13, self.device_classes.handle_result(e, out)),
            ObjectEvent::ResourceSlice(e) => (14, self.resource_slices.handle_result(e, out)),
            ObjectEvent::ResourceClaim(e) => (15, self.resource_claims.handle_result(e, out)),
            ObjectEvent::DeviceTaintRule(e) => (16, self.device_taint_rules.handle_result(e, out)),
        };
        self.listed[i] |= first_list_done;
    }

    /// Whether every kind has completed its first list.
    pub(crate) fn listed(&self) -> bool {
        self.listed.iter().all(|l| *l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use convoy_api::ClusterObject;
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
            ObjectEvent::Namespace(Ok(Event::InitDone)),
            ObjectEvent::Service(Ok(Event::InitDone)),
            ObjectEvent::ReplicationController(Ok(Event::InitDone)),
            ObjectEvent::ReplicaSet(Ok(Event::InitDone)),
            ObjectEvent::PodDisruptionBudget(Ok(Event::InitDone)),
            ObjectEvent::PriorityClass(Ok(Event::InitDone)),
            ObjectEvent::PersistentVolumeClaim(Ok(Event::InitDone)),
            ObjectEvent::PersistentVolume(Ok(Event::InitDone)),
            ObjectEvent::StorageClass(Ok(Event::InitDone)),
            ObjectEvent::CSINode(Ok(Event::InitDone)),
            ObjectEvent::CSIDriver(Ok(Event::InitDone)),
            ObjectEvent::CSIStorageCapacity(Ok(Event::InitDone)),
            ObjectEvent::DeviceClass(Ok(Event::InitDone)),
            ObjectEvent::ResourceSlice(Ok(Event::InitDone)),
            ObjectEvent::ResourceClaim(Ok(Event::InitDone)),
            ObjectEvent::DeviceTaintRule(Ok(Event::InitDone)),
        ];
        for e in done {
            t.handle(e, &mut out);
            assert!(!t.listed());
        }
        // A relist of a kind already listed does not count for another.
        t.handle(ObjectEvent::Namespace(Ok(Event::Init)), &mut out);
        t.handle(ObjectEvent::Namespace(Ok(Event::InitDone)), &mut out);
        assert!(!t.listed());
        t.handle(ObjectEvent::StatefulSet(Ok(Event::Init)), &mut out);
        t.handle(ObjectEvent::StatefulSet(Ok(Event::InitDone)), &mut out);
        assert!(t.listed());
        assert!(out.is_empty());
    }
}
