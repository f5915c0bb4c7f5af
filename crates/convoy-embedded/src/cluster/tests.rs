use convoy_api::testing::{NodeBuilder, PodBuilder};
use futures::FutureExt;

use super::*;

fn objects() -> Objects {
    Objects {
        nodes: vec![NodeBuilder::new("n1").build(), NodeBuilder::new("n2").build()],
        pods: vec![
            PodBuilder::new("a").build(),
            PodBuilder::new("b").build(),
            PodBuilder::new("on-n2").node("n2").build(),
        ],
        pod_groups: Vec::new(),
        others: Vec::new(),
        resource_claim_templates: Vec::new(),
        custom: Vec::new(),
        skipped: Default::default(),
    }
}

#[test]
fn objects_are_applied_and_deleted_with_updates() {
    let ns: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(
        serde_json::json!({"metadata": {"name": "team-a", "labels": {"team": "a"}}}),
    )
    .unwrap();
    let (c, mut rx) = EmbeddedCluster::new(Objects {
        others: vec![ClusterObject::Namespace(Arc::new(ns))],
        ..Objects::default()
    });
    assert_eq!(drain(&mut rx), ["NamespaceApplied team-a", "Synced"]);
    assert_eq!(c.objects().len(), 1);
    c.delete_object("Namespace", "team-a").unwrap();
    assert_eq!(drain(&mut rx), ["NamespaceDeleted team-a"]);
    assert!(c.delete_object("Namespace", "team-a").is_err());
    let unnamed = k8s_openapi::api::core::v1::Namespace::default();
    assert!(c.apply_object(ClusterObject::Namespace(Arc::new(unnamed))).is_err());
}

#[test]
fn device_taint_rules_are_applied_with_a_version_and_deleted() {
    let (c, mut rx) = EmbeddedCluster::new(Objects::default());
    drain(&mut rx);
    let rule: k8s_openapi::api::resource::v1::DeviceTaintRule =
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "broken"},
            "spec": {"deviceSelector": {"device": "gpu-1"},
                     "taint": {"key": "k", "effect": "NoSchedule"}}
        }))
        .unwrap();
    c.apply_object(ClusterObject::DeviceTaintRule(Arc::new(rule))).unwrap();
    assert_eq!(drain(&mut rx), ["DeviceTaintRuleApplied broken"]);
    let held = c.objects();
    let [ClusterObject::DeviceTaintRule(r)] = &held[..] else { panic!("{held:?}") };
    assert!(r.metadata.resource_version.is_some());
    c.delete_object("DeviceTaintRule", "broken").unwrap();
    assert_eq!(drain(&mut rx), ["DeviceTaintRuleDeleted broken"]);
    assert!(c.objects().is_empty());
}

/// `add_pod` merges `matchLabelKeys` as the API server's create does;
/// `update_pod` (an update) does not merge again.
#[test]
fn add_pod_merges_match_label_keys_once() {
    let (c, _rx) = EmbeddedCluster::new(Objects::default());
    let affinity = serde_json::from_value(serde_json::json!({"podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app": "web"}},
            "mismatchLabelKeys": ["tenant"],
            "topologyKey": "zone"
        }]
    }}))
    .unwrap();
    let pod = PodBuilder::new("p")
        .label("app", "web")
        .label("tenant", "t1")
        .with_spec(|s| s.affinity = Some(affinity))
        .build();
    let exprs = |p: &Pod| {
        let a = p.spec.as_ref().unwrap().affinity.as_ref().unwrap();
        let terms = a.pod_affinity.as_ref().unwrap();
        let t = &terms.required_during_scheduling_ignored_during_execution.as_ref().unwrap()[0];
        t.label_selector.as_ref().unwrap().match_expressions.clone().unwrap_or_default()
    };
    let created = c.add_pod(pod).unwrap();
    let e = exprs(&created);
    assert_eq!(e.len(), 1);
    assert_eq!((e[0].key.as_str(), e[0].operator.as_str()), ("tenant", "NotIn"));
    let updated = c.update_pod((*created).clone()).unwrap();
    assert_eq!(exprs(&updated).len(), 1, "an update does not merge again");
}

fn drain(rx: &mut mpsc::UnboundedReceiver<ClusterUpdate>) -> Vec<String> {
    let mut out = Vec::new();
    while let Ok(u) = rx.try_recv() {
        let name = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            m.name.clone().unwrap_or_default()
        };
        out.push(match u {
            ClusterUpdate::NodeAdded(n) => format!("NodeAdded {}", name(&n.metadata)),
            ClusterUpdate::NodeUpdated { new, .. } => {
                format!("NodeUpdated {}", name(&new.metadata))
            }
            ClusterUpdate::NodeDeleted(n) => format!("NodeDeleted {}", name(&n.metadata)),
            ClusterUpdate::PodAdded(p) => format!("PodAdded {}", name(&p.metadata)),
            ClusterUpdate::PodUpdated { old, new } => format!(
                "PodUpdated {} {:?}->{:?}",
                name(&new.metadata),
                old.spec.as_ref().unwrap().node_name,
                new.spec.as_ref().unwrap().node_name
            ),
            ClusterUpdate::PodDeleted(p) => format!("PodDeleted {}", name(&p.metadata)),
            ClusterUpdate::PodGroupApplied(g) => format!("PodGroupApplied {}", g.key),
            ClusterUpdate::PodGroupDeleted(k) => format!("PodGroupDeleted {k}"),
            ClusterUpdate::ObjectApplied(o) => format!("{}Applied {}", o.kind(), o.key()),
            ClusterUpdate::ObjectDeleted(o) => format!("{}Deleted {}", o.kind(), o.key()),
            ClusterUpdate::CustomApplied(o) => format!("{}Applied {}", o.api.kind, o.key()),
            ClusterUpdate::CustomDeleted(o) => format!("{}Deleted {}", o.api.kind, o.key()),
            ClusterUpdate::ApisServed(_) => "ApisServed".to_string(),
            ClusterUpdate::Synced => "Synced".to_string(),
        });
    }
    out
}

fn info(pod: Arc<Pod>) -> Arc<PodInfo> {
    Arc::new(PodInfo::new(pod).unwrap())
}

/// Binds through the trait; the future must be ready at once.
fn bind(cluster: &Arc<EmbeddedCluster>, pod: Arc<PodInfo>, node: &str) -> Result<(), BindError> {
    let binder: Arc<dyn Binder> = cluster.clone();
    binder.bind(pod, Arc::from(node)).now_or_never().expect("bind is ready immediately")
}

#[test]
fn stream_starts_with_nodes_then_pods_then_synced() {
    let (cluster, mut rx) = EmbeddedCluster::new(objects());
    assert_eq!(
        drain(&mut rx),
        ["NodeAdded n1", "NodeAdded n2", "PodAdded a", "PodAdded b", "PodAdded on-n2", "Synced"]
    );
    assert_eq!(cluster.bound_count(), 1);
    assert_eq!(cluster.nodes().len(), 2);
    let pods: Vec<_> = cluster.pods().iter().map(|p| p.metadata.name.clone().unwrap()).collect();
    assert_eq!(pods, ["a", "b", "on-n2"]);
}

#[test]
fn bind_outcomes() {
    // (case, pod to bind (name, uid), node, expected result)
    type Case = (&'static str, (&'static str, &'static str), &'static str, Result<(), BindError>);
    let cases: Vec<Case> = vec![
        ("success", ("a", "a"), "n1", Ok(())),
        ("already bound to the same node", ("on-n2", "on-n2"), "n2", Err(BindError::AlreadyBound)),
        (
            "already bound elsewhere",
            ("on-n2", "on-n2"),
            "n1",
            Err(BindError::Failed(
                "pod default/on-n2 is already assigned to node \"n2\"".to_string(),
            )),
        ),
        (
            "pod gone",
            ("nope", "nope"),
            "n1",
            Err(BindError::PodGone("pod default/nope not found".to_string())),
        ),
        (
            "pod recreated with another uid",
            ("a", "old-uid"),
            "n1",
            Err(BindError::PodGone(
                "pod default/a has UID a, not old-uid (it was deleted and recreated)".to_string(),
            )),
        ),
        (
            "node missing",
            ("a", "a"),
            "n9",
            Err(BindError::Failed("node \"n9\" not found".to_string())),
        ),
    ];
    for (name, (pod, uid), node, want) in cases {
        let (cluster, mut rx) = EmbeddedCluster::new(objects());
        drain(&mut rx);
        let before = cluster.bound_count();
        let p = info(Arc::new(PodBuilder::new(pod).uid(uid).build()));
        assert_eq!(bind(&cluster, p, node), want, "{name}");
        let updates = drain(&mut rx);
        if want.is_ok() {
            assert_eq!(updates, [format!("PodUpdated {pod} None->Some(\"{node}\")")], "{name}");
            assert_eq!(cluster.bound_count(), before + 1, "{name}");
            assert_eq!(cluster.bind_count(), 1, "{name}");
        } else {
            assert!(updates.is_empty(), "{name}: {updates:?}");
            assert_eq!(cluster.bound_count(), before, "{name}");
            assert_eq!(cluster.bind_count(), 0, "{name}");
        }
    }
}

#[test]
fn bind_sets_node_name_and_condition() {
    let (cluster, mut rx) = EmbeddedCluster::new(objects());
    drain(&mut rx);
    let old = cluster.pod("default", "a").unwrap();
    bind(&cluster, info(Arc::clone(&old)), "n1").unwrap();
    let new = cluster.pod("default", "a").unwrap();
    assert_eq!(new.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));
    let conds = new.status.as_ref().unwrap().conditions.as_ref().unwrap();
    assert_eq!(conds.len(), 1);
    assert_eq!((conds[0].type_.as_str(), conds[0].status.as_str()), ("PodScheduled", "True"));
    assert_ne!(new.metadata.resource_version, old.metadata.resource_version);
    // The old object is untouched (it is what PodUpdated.old carries).
    assert!(old.spec.as_ref().unwrap().node_name.is_none());
    // A second bind of the same pod is a retry that had succeeded.
    assert_eq!(bind(&cluster, info(old), "n1"), Err(BindError::AlreadyBound));
    // Through the newtype too.
    let b = EmbeddedBinder(Arc::clone(&cluster));
    let p = info(cluster.pod("default", "b").unwrap());
    assert_eq!(b.bind(p, Arc::from("n2")).now_or_never(), Some(Ok(())));
    assert_eq!(cluster.bound_count(), 3);
}

#[test]
fn gated_pods_are_created_with_the_scheduling_gated_condition() {
    let (cluster, mut rx) = EmbeddedCluster::new(Objects {
        pods: vec![PodBuilder::new("gated-at-start").gate("g").build()],
        ..Objects::default()
    });
    drain(&mut rx);
    cluster.add_pod(PodBuilder::new("gated").gate("g").build()).unwrap();
    cluster.add_pod(PodBuilder::new("free").build()).unwrap();
    let condition = |name: &str| {
        let pod = cluster.pod("default", name).unwrap();
        let c = pod.status.as_ref()?.conditions.as_ref()?.first()?.clone();
        Some((c.type_, c.status, c.reason.unwrap_or_default()))
    };
    let gated = Some(("PodScheduled".into(), "False".into(), "SchedulingGated".into()));
    assert_eq!(condition("gated-at-start"), gated);
    assert_eq!(condition("gated"), gated);
    assert_eq!(condition("free"), None);
}

#[test]
fn mutations_emit_updates() {
    let (cluster, mut rx) = EmbeddedCluster::new(Objects::default());
    assert_eq!(drain(&mut rx), ["Synced"]);

    cluster.add_node(NodeBuilder::new("n1").build()).unwrap();
    let updated = cluster.update_node(NodeBuilder::new("n1").cpu("8").build()).unwrap();
    assert_eq!(
        updated.metadata.uid.as_deref(),
        Some("sim-node-n1"),
        "keeps the uid given by add_node"
    );
    let mut no_ns = PodBuilder::new("p").build();
    no_ns.metadata.namespace = None;
    no_ns.metadata.uid = None;
    let p = cluster.add_pod(no_ns).unwrap();
    assert_eq!(p.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(p.metadata.uid.as_deref(), Some("sim-default-p"));
    let mut q = PodBuilder::new("p").node("n1").build();
    q.metadata.uid = None;
    let q = cluster.update_pod(q).unwrap();
    assert_eq!(q.metadata.uid.as_deref(), Some("sim-default-p"), "keeps the uid");
    assert_eq!(cluster.bound_count(), 1);
    cluster.delete_pod("default", "p").unwrap();
    assert_eq!(cluster.bound_count(), 0);
    cluster.delete_node("n1").unwrap();
    assert_eq!(
        drain(&mut rx),
        [
            "NodeAdded n1",
            "NodeUpdated n1",
            "PodAdded p",
            "PodUpdated p None->Some(\"n1\")",
            "PodDeleted p",
            "NodeDeleted n1",
        ]
    );
    assert!(cluster.pods().is_empty() && cluster.nodes().is_empty());
}

#[test]
fn mutation_errors() {
    let (cluster, mut rx) = EmbeddedCluster::new(objects());
    drain(&mut rx);
    let cases: Vec<(&str, Result<(), ClusterError>, ClusterError)> = vec![
        (
            "add existing node",
            cluster.add_node(NodeBuilder::new("n1").build()).map(drop),
            ClusterError::AlreadyExists("node n1".into()),
        ),
        (
            "update missing node",
            cluster.update_node(NodeBuilder::new("n9").build()).map(drop),
            ClusterError::NotFound("node n9".into()),
        ),
        (
            "delete missing node",
            cluster.delete_node("n9").map(drop),
            ClusterError::NotFound("node n9".into()),
        ),
        (
            "add existing pod",
            cluster.add_pod(PodBuilder::new("a").build()).map(drop),
            ClusterError::AlreadyExists("pod default/a".into()),
        ),
        (
            "update missing pod",
            cluster.update_pod(PodBuilder::new("z").build()).map(drop),
            ClusterError::NotFound("pod default/z".into()),
        ),
        (
            "delete missing pod",
            cluster.delete_pod("default", "z").map(drop),
            ClusterError::NotFound("pod default/z".into()),
        ),
        (
            "pod without a name",
            cluster.add_pod(Pod::default()).map(drop),
            ClusterError::MissingName("pod"),
        ),
        (
            "node without a name",
            cluster.add_node(Node::default()).map(drop),
            ClusterError::MissingName("node"),
        ),
    ];
    for (name, got, want) in cases {
        assert_eq!(got, Err(want), "{name}");
    }
    assert!(drain(&mut rx).is_empty(), "a refused mutation emits nothing");
}

#[test]
fn deleted_and_recreated_pod_is_gone_for_the_old_uid() {
    let (cluster, mut rx) = EmbeddedCluster::new(objects());
    drain(&mut rx);
    let old = info(cluster.pod("default", "a").unwrap());
    cluster.delete_pod("default", "a").unwrap();
    cluster.add_pod(PodBuilder::new("a").uid("a-2").build()).unwrap();
    assert!(matches!(bind(&cluster, old, "n1"), Err(BindError::PodGone(_))));
}

/// Many binds all land (speed is measured by the benchmarks, not here).
#[test]
fn many_binds_all_land() {
    let mut o = Objects { nodes: vec![NodeBuilder::new("n").build()], ..Default::default() };
    for i in 0..20_000 {
        o.pods.push(PodBuilder::new(&format!("p-{i}")).cpu("100m").build());
    }
    let (cluster, _rx) = EmbeddedCluster::new(o);
    let infos: Vec<_> = cluster.pods().into_iter().map(info).collect();
    let node: Arc<str> = Arc::from("n");
    for p in infos {
        cluster.bind(p, Arc::clone(&node)).now_or_never().unwrap().unwrap();
    }
    assert_eq!(cluster.bound_count(), 20_000);
    assert_eq!(cluster.bind_count(), 20_000);
}

#[test]
fn updates_are_delivered_to_an_async_consumer() {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async {
        let (cluster, mut rx) = EmbeddedCluster::new(objects());
        let p = info(cluster.pod("default", "b").unwrap());
        let task = tokio::spawn(async move {
            let mut n = 0;
            while let Some(u) = rx.recv().await {
                n += 1;
                if matches!(u, ClusterUpdate::PodUpdated { .. }) {
                    return n;
                }
            }
            n
        });
        cluster.bind(p, Arc::from("n1")).await.unwrap();
        assert_eq!(task.await.unwrap(), 7);
    });
}

/// As upstream's `strategy.go` (`mutateTopologySpreadConstraints`, v1.37.2):
/// on creation only, `key In (value)` for each `matchLabelKeys` key the pod
/// has, only into a non-nil selector.
#[test]
fn creation_merges_match_label_keys_into_spread_selectors() {
    use k8s_openapi::api::core::v1::TopologySpreadConstraint;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    let constraint = |selector: bool, keys: &[&str]| TopologySpreadConstraint {
        max_skew: 1,
        topology_key: "zone".to_string(),
        when_unsatisfiable: "DoNotSchedule".to_string(),
        label_selector: selector.then(|| convoy_api::testing::match_labels(&[("app", "web")])),
        match_label_keys: Some(keys.iter().map(|k| k.to_string()).collect()),
        ..Default::default()
    };
    let pod = PodBuilder::new("p")
        .label("app", "web")
        .label("pod-template-hash", "abc")
        .with_spec(|s| {
            s.topology_spread_constraints = Some(vec![
                constraint(true, &["pod-template-hash", "missing"]),
                constraint(false, &["pod-template-hash"]),
                constraint(true, &[]),
            ])
        })
        .build();
    let (c, _rx) = EmbeddedCluster::new(Objects::default());
    let created = c.add_pod(pod).unwrap();
    let got: Vec<_> = created
        .spec
        .as_ref()
        .unwrap()
        .topology_spread_constraints
        .iter()
        .flatten()
        .map(|c| c.label_selector.as_ref().map(|s| s.match_expressions.clone()))
        .collect();
    let merged = LabelSelectorRequirement {
        key: "pod-template-hash".to_string(),
        operator: "In".to_string(),
        values: Some(vec!["abc".to_string()]),
    };
    assert_eq!(got, [Some(Some(vec![merged])), None, Some(None)]);
    // An update keeps the object as given: no second merge.
    let updated = c.update_pod((*created).clone()).unwrap();
    assert_eq!(updated.spec, created.spec);
    // Pods of the initial objects are created the same way.
    let (c, _rx) = EmbeddedCluster::new(Objects {
        pods: vec![
            PodBuilder::new("q")
                .label("pod-template-hash", "abc")
                .with_spec(|s| {
                    s.topology_spread_constraints =
                        Some(vec![constraint(true, &["pod-template-hash"])])
                })
                .build(),
        ],
        ..Objects::default()
    });
    let q = c.pod("default", "q").unwrap();
    let sel = q.spec.as_ref().unwrap().topology_spread_constraints.as_ref().unwrap()[0]
        .label_selector
        .clone()
        .unwrap();
    assert_eq!(sel.match_expressions.unwrap().len(), 1);
}
