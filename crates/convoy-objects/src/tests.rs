//! The store keeps what each kind's readers need, and says which
//! version an update replaced.

use super::*;
use serde_json::json;

macro_rules! obj {
    ($v:expr) => {
        Arc::new(serde_json::from_value($v).unwrap())
    };
}

#[test]
fn keeps_labels_and_selectors() {
    let s = ClusterObjects::new();
    let ns =
        ClusterObject::Namespace(obj!(json!({"metadata": {"name": "a", "labels": {"team": "x"}}})));
    s.apply(&ns);
    s.apply(&ClusterObject::Namespace(obj!(json!({"metadata": {"name": "b"}}))));
    let team = Selector::from_set(&[("team".to_string(), "x".to_string())].into());
    let v = s.namespaces_version();
    assert_eq!(s.namespaces_matching(&team), vec![Arc::from("a")]);
    assert_eq!(s.namespaces_matching(&Selector::everything()).len(), 2);
    assert_eq!(s.namespace_labels("a").unwrap().get("team").unwrap(), "x");
    s.delete(&ns);
    assert!(s.namespace_labels("a").is_none());
    assert_ne!(s.namespaces_version(), v, "a namespace change changes the version");

    let svc = ClusterObject::Service(obj!(json!({"metadata": {"name": "web", "namespace": "n"},
        "spec": {"selector": {"app": "web"}}})));
    s.apply(&svc);
    s.apply(&ClusterObject::Service(obj!(
        json!({"metadata": {"name": "headless", "namespace": "n"}, "spec": {}})
    )));
    assert_eq!(s.service_selectors("n").len(), 1);
    s.delete(&svc);
    assert!(s.service_selectors("n").is_empty());

    let rs = ClusterObject::ReplicaSet(obj!(json!({"metadata": {"name": "r", "namespace": "n"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}}})));
    s.apply(&rs);
    assert!(s.replica_set_selector("n", "r").is_some());
    assert!(s.stateful_set_selector("n", "r").is_none());
    assert_eq!(rs.key(), "n/r");
    assert_eq!(s.counts()["ReplicaSet"], 1);
}

#[test]
fn keeps_disruption_budgets_and_priority_classes() {
    let s = ClusterObjects::new();
    let pdb = |name: &str, selector: serde_json::Value| {
        ClusterObject::PodDisruptionBudget(obj!(json!({
            "metadata": {"name": name, "namespace": "n"},
            "spec": {"selector": selector},
            "status": {"disruptionsAllowed": 1, "currentHealthy": 2, "desiredHealthy": 1,
                       "expectedPods": 2, "disruptedPods": {"p1": "2026-01-01T00:00:00Z"}}
        })))
    };
    s.apply(&pdb("b", json!({"matchLabels": {"app": "web"}})));
    s.apply(&pdb("a", json!({})));
    let all = s.pod_disruption_budgets();
    assert_eq!(all.iter().map(|p| &*p.name).collect::<Vec<_>>(), ["a", "b"]);
    assert!(all[0].selector.is_none(), "an empty selector matches nothing");
    let web: Labels = [("app".to_string(), "web".to_string())].into();
    assert!(all[1].covers("n", &web));
    assert!(!all[1].covers("other", &web));
    assert!(!all[1].covers("n", &Labels::new()), "a pod without labels is never covered");
    assert_eq!(all[1].disruptions_allowed, 1);
    assert!(all[1].disrupted_pods.contains("p1"));
    s.delete(&pdb("a", json!({})));
    assert_eq!(s.pod_disruption_budgets().len(), 1);

    let pc = ClusterObject::PriorityClass(obj!(
        json!({"metadata": {"name": "high"}, "value": 1000, "globalDefault": true})
    ));
    assert_eq!(pc.key(), "high");
    s.apply(&pc);
    assert_eq!(s.priority_classes()[0].value, 1000);
    assert_eq!(s.counts()["PriorityClass"], 1);
    s.delete(&pc);
    assert!(s.priority_classes().is_empty());
}

#[test]
fn keeps_volume_objects_and_returns_the_replaced_version() {
    let s = ClusterObjects::new();
    let pvc = |volume: &str| {
        ClusterObject::PersistentVolumeClaim(obj!(json!({
            "metadata": {"name": "data", "namespace": "n"}, "spec": {"volumeName": volume}
        })))
    };
    assert!(s.apply(&pvc("")).is_none(), "a new claim replaces nothing");
    let old = s.apply(&pvc("pv1")).expect("the claim was held");
    assert_eq!(old.key(), "n/data");
    assert_eq!(
        s.pvc("n", "data").unwrap().spec.as_ref().unwrap().volume_name.as_deref(),
        Some("pv1")
    );
    assert!(s.pvc("other", "data").is_none());
    let kinds = [
        ClusterObject::PersistentVolume(obj!(json!({"metadata": {"name": "pv1"}}))),
        ClusterObject::StorageClass(obj!(
            json!({"metadata": {"name": "fast"}, "provisioner": "p"})
        )),
        ClusterObject::CSINode(obj!(
            json!({"metadata": {"name": "node-1"}, "spec": {"drivers": []}})
        )),
        ClusterObject::CSIDriver(obj!(
            json!({"metadata": {"name": "d"}, "spec": {"storageCapacity": true}})
        )),
        ClusterObject::CSIStorageCapacity(obj!(
            json!({"metadata": {"name": "c2", "namespace": "n"}, "storageClassName": "fast"})
        )),
        ClusterObject::CSIStorageCapacity(obj!(
            json!({"metadata": {"name": "c1", "namespace": "n"}, "storageClassName": "fast"})
        )),
    ];
    for o in &kinds {
        assert!(s.apply(o).is_none());
    }
    assert!(s.pv("pv1").is_some() && s.storage_class("fast").is_some());
    assert_eq!(kinds[2].key(), "node-1");
    assert!(s.csi_node("node-1").is_some());
    assert_eq!(kinds[3].key(), "d");
    assert!(s.csi_driver("d").is_some_and(|d| d.spec.storage_capacity == Some(true)));
    assert_eq!(kinds[4].key(), "n/c2");
    let names: Vec<_> =
        s.csi_storage_capacities().iter().map(|c| c.metadata.name.clone().unwrap()).collect();
    assert_eq!(names, ["c1", "c2"], "sorted by namespace and name");
    assert!(s.apply(&kinds[4]).is_some(), "the replaced version is returned");
    s.delete(&kinds[4]);
    assert_eq!(s.counts()["CSIStorageCapacity"], 1);
    assert!(s.apply(&ClusterObject::Namespace(obj!(json!({"metadata": {"name": "a"}})))).is_none());
    s.delete(&pvc(""));
    s.delete(&kinds[1]);
    assert!(s.pvc("n", "data").is_none() && s.storage_class("fast").is_none());
    assert_eq!(s.counts()["PersistentVolume"], 1);
}

#[test]
fn device_taint_rules_change_their_version() {
    let r: DeviceTaintRule = serde_json::from_value(json!({
        "metadata": {"name": "r"},
        "spec": {"deviceSelector": {"driver": "d", "pool": "p", "device": "x"},
                 "taint": {"key": "k", "value": "v", "effect": "NoExecute"}}
    }))
    .unwrap();
    let store = ClusterObjects::new();
    let v0 = store.device_taint_rules_version();
    assert!(store.apply(&ClusterObject::DeviceTaintRule(Arc::new(r.clone()))).is_none());
    assert_eq!(store.device_taint_rules().0.len(), 1);
    assert_eq!(store.counts()["DeviceTaintRule"], 1);
    store.delete(&ClusterObject::DeviceTaintRule(Arc::new(r)));
    let (rules, v2) = store.device_taint_rules();
    assert!(rules.is_empty() && v2 == v0 + 2, "add and delete each change the version");
}
