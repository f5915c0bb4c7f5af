use super::*;

const NODE: &str = "apiVersion: v1
kind: Node
metadata:
  name: n1
status:
  allocatable: {cpu: \"4\", memory: 8Gi, pods: 110}
";

const POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: web-1
spec:
  containers:
  - name: main
    resources:
      requests: {cpu: 500m}
";

/// Names of the nodes, the pods and the PodGroups.
type Names = (Vec<String>, Vec<String>, Vec<String>);

fn names(o: &Objects) -> Names {
    (
        o.nodes.iter().map(|n| n.metadata.name.clone().unwrap()).collect(),
        o.pods
            .iter()
            .map(|p| {
                format!(
                    "{}/{}",
                    p.metadata.namespace.as_deref().unwrap(),
                    p.metadata.name.as_deref().unwrap()
                )
            })
            .collect(),
        o.pod_groups.iter().map(|g| format!("{}/{}", g.namespace, g.name)).collect(),
    )
}

#[test]
fn parses_every_accepted_shape() {
    let multi = format!("{NODE}---\n{POD}");
    let leading = format!("# a comment\n---\n{NODE}---\n---\n# empty\n---\n{POD}...\n");
    let list = "apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: n1}
- apiVersion: v1
  kind: Pod
  metadata: {name: web-1}
  spec: {containers: [{name: main}]}
";
    let typed_lists = "apiVersion: v1
kind: NodeList
items:
- metadata: {name: n1}
- metadata: {name: n2}
---
apiVersion: v1
kind: PodList
items:
- metadata: {name: web-1, namespace: prod}
  spec: {containers: [{name: main}]}
";
    let json = r#"{"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
         "status": {"allocatable": {"cpu": 4, "nvidia.com/gpu": "8"}}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1", "namespace": "default"},
         "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": 0.5}}}]}}
    ]}"#;
    let json_stream = r#"{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"}}"#;
    let yaml_flow = "{kind: Node, apiVersion: v1, metadata: {name: n1}}";
    let pod_groups = "apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {name: train}
spec: {minMember: 4}
---
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata: {name: train, namespace: ml}
spec: {schedulingPolicy: {gang: {minCount: 2}}}
";
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let cases: Vec<(&str, String, Names)> = vec![
        ("single node", NODE.to_string(), (s(&["n1"]), s(&[]), s(&[]))),
        ("single pod", POD.to_string(), (s(&[]), s(&["default/web-1"]), s(&[]))),
        ("multi-document", multi, (s(&["n1"]), s(&["default/web-1"]), s(&[]))),
        (
            "comments, empty documents, end marker",
            leading,
            (s(&["n1"]), s(&["default/web-1"]), s(&[])),
        ),
        ("List", list.to_string(), (s(&["n1"]), s(&["default/web-1"]), s(&[]))),
        (
            "NodeList and PodList",
            typed_lists.to_string(),
            (s(&["n1", "n2"]), s(&["prod/web-1"]), s(&[])),
        ),
        ("JSON List", json.to_string(), (s(&["n1"]), s(&["default/web-1"]), s(&[]))),
        ("JSON stream", json_stream.to_string(), (s(&["n1", "n2"]), s(&[]), s(&[]))),
        ("YAML flow mapping", yaml_flow.to_string(), (s(&["n1"]), s(&[]), s(&[]))),
        ("PodGroups", pod_groups.to_string(), (s(&[]), s(&[]), s(&["default/train", "ml/train"]))),
        ("empty", String::new(), (s(&[]), s(&[]), s(&[]))),
        ("only comments", "# nothing\n---\n".to_string(), (s(&[]), s(&[]), s(&[]))),
        ("null document", "~\n".to_string(), (s(&[]), s(&[]), s(&[]))),
        (
            "empty List",
            "kind: List\napiVersion: v1\nitems: []\n".to_string(),
            (s(&[]), s(&[]), s(&[])),
        ),
    ];
    for (name, text, want) in cases {
        let got = parse_objects(&text, "t.yaml").unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(names(&got), want, "{name}");
    }
}

#[test]
fn defaults_namespace_and_uid() {
    let text = format!(
        "{POD}---\n{NODE}---\n{}",
        POD.replace("web-1", "web-2").replace("metadata:\n", "metadata:\n  uid: u2\n")
    );
    let o = parse_objects(&text, "t.yaml").unwrap();
    assert_eq!(o.pods[0].metadata.namespace.as_deref(), Some("default"));
    assert_eq!(o.pods[0].metadata.uid.as_deref(), Some("sim-default-web-1"));
    assert_eq!(o.pods[1].metadata.uid.as_deref(), Some("u2"));
    assert_eq!(o.nodes[0].metadata.uid.as_deref(), Some("sim-node-n1"));
}

#[test]
fn merges_match_label_keys_as_the_api_server_at_creation() {
    let text = "apiVersion: v1
kind: Pod
metadata: {name: w, labels: {app: web, rev: r1}}
spec:
  containers: [{name: main}]
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector: {matchLabels: {app: web}}
        matchLabelKeys: [rev]
        topologyKey: kubernetes.io/hostname
";
    let o = parse_objects(text, "t.yaml").unwrap();
    // Loading keeps the object as written; the cluster creates it.
    let loaded = o.pods[0].spec.as_ref().unwrap().affinity.clone().unwrap();
    let loaded_term = &loaded
        .pod_anti_affinity
        .unwrap()
        .required_during_scheduling_ignored_during_execution
        .unwrap()[0];
    assert!(loaded_term.label_selector.as_ref().unwrap().match_expressions.is_none());
    let (cluster, _rx) = crate::EmbeddedCluster::new(o);
    let pod = cluster.pod("default", "w").unwrap();
    let spec = pod.spec.as_ref().unwrap();
    let anti = spec.affinity.as_ref().unwrap().pod_anti_affinity.as_ref().unwrap();
    let term = &anti.required_during_scheduling_ignored_during_execution.as_ref().unwrap()[0];
    let exprs = term.label_selector.as_ref().unwrap().match_expressions.as_ref().unwrap();
    assert_eq!(exprs.len(), 1);
    assert_eq!((exprs[0].key.as_str(), exprs[0].operator.as_str()), ("rev", "In"));
    assert_eq!(exprs[0].values.as_deref(), Some(&["r1".to_string()][..]));
}

#[test]
fn keeps_quantities_and_unknown_fields() {
    let text = "apiVersion: v1
kind: Node
metadata: {name: n1, labels: {enabled: yes}}
someField: ignored
status:
  allocatable: {cpu: 4, memory: 8Gi, nvidia.com/gpu: 8}
";
    let o = parse_objects(text, "t.yaml").unwrap();
    let alloc = o.nodes[0].status.as_ref().unwrap().allocatable.as_ref().unwrap();
    assert_eq!(alloc["cpu"].0, "4");
    assert_eq!(alloc["nvidia.com/gpu"].0, "8");
    // YAML 1.2 booleans only: `yes` stays the string a label must be.
    assert_eq!(o.nodes[0].metadata.labels.as_ref().unwrap()["enabled"], "yes");
}

#[test]
fn errors_name_document_object_and_field() {
    let bad_cpu = POD.replace("500m", "lots");
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "invalid pod quantity",
            format!("{NODE}---\n{}---\n{bad_cpu}", NODE.replace("n1", "n0")),
            "t.yaml: document 3 (Pod default/web-1): spec.containers[0].resources.requests[cpu]: invalid quantity \"lots\"",
        ),
        (
            "invalid node quantity",
            NODE.replace("8Gi", "8Gx"),
            "t.yaml: document 1 (Node n1): status.allocatable[memory]: invalid quantity \"8Gx\"",
        ),
        (
            "invalid node capacity",
            format!("{NODE}  capacity: {{cpu: four}}\n"),
            "t.yaml: document 1 (Node n1): status.capacity[cpu]: invalid quantity \"four\"",
        ),
        (
            "ReplicaSet of another API",
            "apiVersion: extensions/v1beta1\nkind: ReplicaSet\nmetadata: {name: r}\n".to_string(),
            "t.yaml: document 1 (ReplicaSet default/r): apiVersion: unsupported \"extensions/v1beta1\" for ReplicaSet (expected \"apps/v1\")",
        ),
        (
            "malformed selector in a List",
            format!("apiVersion: v1\nkind: List\nitems:\n- {}\n- apiVersion: apps/v1\n  kind: ReplicaSet\n  metadata: {{name: web, namespace: prod}}\n  spec: {{selector: {{matchLabels: web}}}}\n", "{apiVersion: v1, kind: ConfigMap, metadata: {name: c}}"),
            "t.yaml: document 1, items[1] (ReplicaSet prod/web): spec.selector.matchLabels: invalid type: string \"web\", expected a map",
        ),
        (
            "namespace labels not a map",
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: prod, labels: [team]}\n".to_string(),
            "t.yaml: document 1 (Namespace prod): metadata.labels: invalid type: sequence, expected a map",
        ),
        (
            "negative pod request",
            POD.replace("500m", "-500m"),
            "t.yaml: document 1 (Pod default/web-1): spec.containers[0].resources.requests[cpu]: invalid quantity \"-500m\": must be greater than or equal to 0",
        ),
        (
            "negative pod limit",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    resources: {limits: {memory: -1Gi}}\n".to_string(),
            "t.yaml: document 1 (Pod default/p): spec.containers[0].resources.limits[memory]: invalid quantity \"-1Gi\": must be greater than or equal to 0",
        ),
        (
            "negative overhead",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  overhead: {cpu: '-1'}\n  containers: [{name: c}]\n".to_string(),
            "t.yaml: document 1 (Pod default/p): spec.overhead[cpu]: invalid quantity \"-1\": must be greater than or equal to 0",
        ),
        (
            "negative node allocatable",
            NODE.replace("8Gi", "-8Gi"),
            "t.yaml: document 1 (Node n1): status.allocatable[memory]: invalid quantity \"-8Gi\": must be greater than or equal to 0",
        ),
        (
            "pod without containers",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\nspec: {containers: []}\n".to_string(),
            "t.yaml: document 1 (Pod ns/p): missing field `containers` at spec",
        ),
        (
            "invalid label value",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {app: 'web server'}}\nspec: {containers: [{name: c}]}\n".to_string(),
            "t.yaml: document 1 (Pod default/p): metadata.labels[app]: Invalid value: \"web server\": a valid label must be an empty string",
        ),
        (
            "invalid label key",
            "apiVersion: v1\nkind: Node\nmetadata: {name: n, labels: {'-zone': a}}\n".to_string(),
            "t.yaml: document 1 (Node n): metadata.labels[-zone]: Invalid value: \"-zone\": a qualified name",
        ),
        (
            "label value not a string",
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: prod, labels: {tier: 1}}\n".to_string(),
            "t.yaml: document 1 (Namespace prod): metadata.labels[tier]: expected a string, found a number",
        ),
        (
            "Service without a name",
            "apiVersion: v1\nkind: Service\nmetadata: {namespace: prod}\nspec: {selector: {app: web}}\n".to_string(),
            "t.yaml: document 1 (Service): metadata.name: required",
        ),
        (
            "duplicate Namespace",
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: prod}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: prod}\n".to_string(),
            "t.yaml: document 2 (Namespace prod): duplicate Namespace prod (first in document 1)",
        ),
        (
            "duplicate Service, one in the default namespace by default",
            "apiVersion: v1\nkind: Service\nmetadata: {name: web}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\n".to_string(),
            "t.yaml: document 2 (Service default/web): duplicate Service default/web (first in document 1)",
        ),
        (
            "missing field",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\nspec: {}\n".to_string(),
            "t.yaml: document 1 (Pod ns/p): missing field `containers` at spec",
        ),
        (
            "wrong type",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    ports: [{containerPort: eighty}]\n".to_string(),
            "t.yaml: document 1 (Pod default/p): spec.containers[0].ports[0].containerPort: invalid type: string \"eighty\"",
        ),
        ("missing name", "apiVersion: v1\nkind: Node\nmetadata: {}\n".to_string(), "t.yaml: document 1 (Node): metadata.name: required"),
        (
            "name not a string",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: 3}\n".to_string(),
            "t.yaml: document 1 (Pod): metadata.name: expected a string, found a number",
        ),
        ("duplicate key", "kind: Node\nkind: Pod\n".to_string(), "t.yaml: document 1: duplicate mapping key: kind at line 2"),
        ("missing kind", "apiVersion: v1\nmetadata: {name: x}\n".to_string(), "t.yaml: document 1: missing field `kind`"),
        ("not an object", "42\n".to_string(), "t.yaml: document 1: expected an object with apiVersion and kind, found a number"),
        ("wrong apiVersion", NODE.replace("v1", "v2"), "t.yaml: document 1 (Node n1): apiVersion: unsupported \"v2\" for Node"),
        (
            "PodGroup of another API",
            "apiVersion: example.com/v1\nkind: PodGroup\nmetadata: {name: g}\n".to_string(),
            "t.yaml: document 1 (PodGroup default/g): apiVersion: unsupported \"example.com/v1\" for PodGroup",
        ),
        (
            "duplicate node",
            format!("{NODE}---\n{NODE}"),
            "t.yaml: document 2 (Node n1): duplicate node n1 (first in document 1)",
        ),
        (
            "duplicate pod in a List",
            "kind: PodList\napiVersion: v1\nitems:\n- metadata: {name: p}\n  spec: {containers: [{name: c}]}\n- metadata: {name: p, namespace: default}\n  spec: {containers: [{name: c}]}\n".to_string(),
            "t.yaml: document 1, items[1] (Pod default/p): duplicate pod default/p (first in document 1, items[0])",
        ),
        (
            "duplicate uid",
            "kind: PodList\napiVersion: v1\nitems:\n- metadata: {name: p, uid: u}\n  spec: {containers: [{name: c}]}\n- metadata: {name: q, uid: u}\n  spec: {containers: [{name: c}]}\n".to_string(),
            "t.yaml: document 1, items[1] (Pod default/q): metadata.uid: duplicate uid, also used by the pod \"u\" in document 1, items[0]",
        ),
        (
            "nested List",
            "kind: List\napiVersion: v1\nitems:\n- kind: List\n  apiVersion: v1\n  items: []\n".to_string(),
            "t.yaml: document 1, items[0]: a List inside a List is not supported",
        ),
        ("items not a list", "kind: List\napiVersion: v1\nitems: 3\n".to_string(), "t.yaml: document 1: items: expected a list, found a number"),
        ("YAML syntax error names the file line", format!("{NODE}---\nkind: Pod\n  bad: [\n"), "t.yaml: document 2: "),
    ];
    for (name, text, want) in cases {
        let err = parse_objects(&text, "t.yaml").map(|o| names(&o)).expect_err(name).to_string();
        assert!(err.starts_with(want), "{name}:\n got: {err}\nwant: {want}...");
    }
}

#[test]
fn syntax_errors_report_file_lines() {
    let text = format!("{NODE}---\nkind: Pod\nmetadata: [\n");
    let err = parse_objects(&text, "t.yaml").unwrap_err();
    let inv = err.invalid().unwrap();
    assert_eq!(inv.document, 2);
    // The error is on line 9 or 10 of the file, not line 2 or 3 of the document.
    assert!(inv.message.contains("line 9") || inv.message.contains("line 10"), "{}", inv.message);
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    let deep = "[".repeat(10_000);
    let cases = [
        ":::",
        "[1,2",
        "42",
        "\"just a string\"",
        "- a\n- b\n",
        "{\"kind\": 3}",
        "kind: [Node]\n",
        "\t\tkind: Node",
        "---\n- 1\n...\n%%%\n",
        "kind: Pod\nmetadata: {name: 3}\n",
        "kind: Pod\nmetadata: {name: p}\nspec: 7\n",
        "a: &a [*a]\n",
        "a: 1\na: 2\n",
        &deep,
        "\u{feff}{\"kind\": \"Node\"",
    ];
    for text in cases {
        let r = parse_objects(text, "g.yaml");
        assert!(r.is_err(), "{text:?} parsed: {r:?}");
    }
    // Empty and blank files hold nothing, which is not an error.
    for text in ["", "\n\n", "   ", "---", "# only\n"] {
        assert!(parse_objects(text, "g.yaml").unwrap().is_empty(), "{text:?}");
    }
}

#[test]
fn load_file_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, format!("{NODE}---\n{POD}")).unwrap();
    let o = load_file(&path).unwrap();
    assert_eq!((o.nodes.len(), o.pods.len()), (1, 1));

    std::fs::write(&path, "kind: Namespace\nmetadata: {}\n").unwrap();
    let err = load_file(&path).unwrap_err().to_string();
    let want = format!("{}: document 1 (Namespace): metadata.name: required", path.display());
    assert_eq!(err, want);

    let missing = dir.path().join("missing.yaml");
    let err = load_file(&missing).unwrap_err();
    assert!(matches!(err, LoadError::Io { .. }));
    assert!(err.to_string().starts_with(&missing.display().to_string()));
}

#[test]
fn example_cluster_parses() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/examples/cluster.yaml");
    let o = load_file(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(o.nodes.len(), 6);
    assert!(o.pods.len() >= 12);
    let gpu_nodes = o
        .nodes
        .iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .is_some_and(|a| a.contains_key("nvidia.com/gpu"))
        })
        .count();
    assert_eq!(gpu_nodes, 2);
    fn scheduler(p: &Pod) -> &str {
        p.spec.as_ref().unwrap().scheduler_name.as_deref().unwrap_or("default-scheduler")
    }
    let pending = |p: &&Pod| p.spec.as_ref().unwrap().node_name.is_none();
    let for_default: Vec<_> =
        o.pods.iter().filter(pending).filter(|p| scheduler(p) == "default-scheduler").collect();
    assert_eq!(for_default.len(), 1, "one pending pod for default-scheduler");
    let for_convoy =
        o.pods.iter().filter(pending).filter(|p| scheduler(p) == "convoy-scheduler").count();
    assert!(for_convoy >= 10, "{for_convoy}");
}

/// `kind key` of each Namespace, Service and workload controller.
fn others(o: &Objects) -> Vec<String> {
    o.others.iter().map(|x| format!("{} {}", x.kind(), x.key())).collect()
}

#[test]
fn reads_used_kinds_and_skips_the_others() {
    let text = r#"apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Namespace
  metadata: {name: prod, labels: {team: web}}
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: settings, namespace: prod}
  data: {a: "1"}
- apiVersion: v1
  kind: Service
  metadata: {name: web}
  spec: {selector: {app: web}, ports: [{port: 80}]}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: web, namespace: prod}
- apiVersion: example.com/v1
  kind: Widget
  metadata: {name: w}
  spec: {anything: [1, 2]}
---
apiVersion: v1
kind: ConfigMapList
items:
- metadata: {name: a, namespace: prod}
- metadata: {name: b, namespace: prod}
---
apiVersion: v1
kind: ReplicationController
metadata: {name: legacy, namespace: prod}
spec: {selector: {app: legacy}, template: {metadata: {labels: {app: legacy}}}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: prod}
spec:
  selector: {matchLabels: {app: db}}
  template: {metadata: {labels: {app: db}}, spec: {containers: [{name: c}]}}
---
kind: Secret
apiVersion: v1
metadata: {name: s}
"#;
    let o = parse_objects(text, "t.yaml").unwrap();
    assert_eq!(
        others(&o),
        [
            "Namespace prod",
            "Service default/web",
            "ReplicationController prod/legacy",
            "StatefulSet prod/db"
        ]
    );
    assert_eq!(
        o.notes(),
        [
            "skipped 3 ConfigMap: not used for scheduling",
            "skipped 1 Deployment: not used for scheduling",
            "skipped 1 Secret: not used for scheduling",
            "skipped 1 Widget: not used for scheduling",
        ]
    );
    assert!(!o.is_empty());
    let only_skipped = parse_objects("kind: ConfigMap\nmetadata: {name: c}\n", "t.yaml").unwrap();
    assert!(only_skipped.is_empty());
    assert_eq!(only_skipped.notes(), ["skipped 1 ConfigMap: not used for scheduling"]);
}

#[test]
fn loads_a_kubectl_dump() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/examples/dump.yaml");
    let o = load_file(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(names(&o).0, ["node-a", "node-b", "node-c"]);
    let assigned = |p: &&Pod| p.spec.as_ref().unwrap().node_name.is_some();
    assert_eq!(
        o.pods.iter().filter(assigned).count(),
        6,
        "coredns x2, web x2, db-0, the Job's pod"
    );
    assert_eq!(o.pods.len(), 9);
    let job = o.pods.iter().find(|p| p.metadata.name.as_deref().unwrap().starts_with("nightly"));
    assert_eq!(job.unwrap().status.as_ref().unwrap().phase.as_deref(), Some("Succeeded"));
    assert_eq!(
        others(&o),
        [
            "Namespace default",
            "Namespace kube-system",
            "Namespace prod",
            "Service prod/web",
            "Service default/kubernetes",
            "ReplicaSet prod/web-7d4b9c6f5",
            "ReplicaSet kube-system/coredns-6f6b679f8f",
            "StatefulSet prod/db"
        ]
    );
    assert_eq!(
        o.notes(),
        [
            "skipped 2 ConfigMap: not used for scheduling",
            "skipped 1 Deployment: not used for scheduling",
            "skipped 1 Job: not used for scheduling",
        ]
    );
    // Trimmed to what scheduling reads.
    for obj in &o.others {
        let m = obj.metadata();
        assert!(m.annotations.is_none() && m.creation_timestamp.is_none(), "{obj:?}");
        match obj {
            convoy_api::ClusterObject::ReplicaSet(rs) => {
                assert!(rs.spec.template.is_none() && rs.status.is_none());
                assert_eq!(m.owner_references.as_ref().unwrap()[0].kind, "Deployment");
                assert!(
                    rs.spec
                        .selector
                        .match_labels
                        .as_ref()
                        .unwrap()
                        .contains_key("pod-template-hash")
                );
            }
            convoy_api::ClusterObject::Service(svc) => {
                assert!(svc.spec.as_ref().unwrap().ports.is_none());
            }
            convoy_api::ClusterObject::Namespace(ns) if m.name.as_deref() == Some("prod") => {
                assert_eq!(m.labels.as_ref().unwrap()["team"], "web");
                assert!(ns.spec.is_none() && ns.status.is_none());
            }
            _ => {}
        }
    }
}

/// The volume kinds load trimmed, a claim's namespace defaulted, a
/// StorageClass's binding mode defaulted to `Immediate` as the API server
/// does; a bad field is named.
#[test]
fn reads_the_volume_kinds() {
    let text = r#"apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  annotations: {pv.kubernetes.io/bind-completed: "yes", note: dropped}
spec: {volumeName: pv-1, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-1, labels: {topology.kubernetes.io/zone: a}}
spec: {capacity: {storage: 1Gi}, csi: {driver: d, volumeHandle: h}}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: standard}
provisioner: d
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: local}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata: {name: n1}
spec: {drivers: [{name: d, nodeID: n1, allocatable: {count: 8}}]}
---
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {name: d}
spec: {storageCapacity: true}
---
apiVersion: storage.k8s.io/v1
kind: CSIStorageCapacity
metadata: {name: d-zone-a}
storageClassName: standard
nodeTopology: {matchLabels: {topology.kubernetes.io/zone: a}}
capacity: 10Gi
"#;
    let o = parse_objects(text, "t.yaml").unwrap();
    assert_eq!(
        others(&o),
        [
            "PersistentVolumeClaim default/data",
            "PersistentVolume pv-1",
            "StorageClass standard",
            "StorageClass local",
            "CSINode n1",
            "CSIDriver d",
            "CSIStorageCapacity default/d-zone-a"
        ]
    );
    let ClusterObject::PersistentVolumeClaim(pvc) = &o.others[0] else { panic!() };
    let annotations = pvc.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations.keys().collect::<Vec<_>>(), ["pv.kubernetes.io/bind-completed"]);
    let modes: Vec<_> = o.others[2..4]
        .iter()
        .map(|c| match c {
            ClusterObject::StorageClass(c) => c.volume_binding_mode.clone().unwrap_or_default(),
            _ => panic!(),
        })
        .collect();
    assert_eq!(modes, ["Immediate", "WaitForFirstConsumer"]);

    let bad = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: c}\nspec: {accessModes: x}\n";
    let err = parse_objects(bad, "t.yaml").unwrap_err().to_string();
    assert!(
        err.contains("PersistentVolumeClaim default/c") && err.contains("spec.accessModes"),
        "{err}"
    );
}

/// The Dynamic Resource Allocation kinds load in `resource.k8s.io/v1`
/// (templates kept aside for the embedded cluster's controller); the beta
/// versions are refused naming `apiVersion`.
#[test]
fn reads_the_dra_kinds() {
    let text = r#"apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.example.com}
spec:
  selectors: [{cel: {expression: 'device.driver == "gpu.example.com"'}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceSliceList
items:
- metadata: {name: n1-gpu}
  spec:
    driver: gpu.example.com
    nodeName: n1
    pool: {name: n1, generation: 1, resourceSliceCount: 1}
    devices: [{name: gpu-0}, {name: gpu-1}]
---
apiVersion: resource.k8s.io/v1
kind: DeviceTaintRule
metadata: {name: broken-gpu}
spec:
  deviceSelector: {driver: gpu.example.com, pool: n1, device: gpu-1}
  taint: {key: example.com/broken, effect: NoSchedule}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: shared}
spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.example.com}}]}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: team}
spec:
  spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.example.com}}]}}
---
apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: team}
spec:
  containers: [{name: c}]
  resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
"#;
    let o = parse_objects(text, "t.yaml").unwrap();
    assert_eq!(
        others(&o),
        [
            "DeviceClass gpu.example.com",
            "ResourceSlice n1-gpu",
            "DeviceTaintRule broken-gpu",
            "ResourceClaim default/shared"
        ]
    );
    let ClusterObject::DeviceTaintRule(rule) = &o.others[2] else { panic!() };
    assert_eq!(rule.spec.device_selector.as_ref().unwrap().device.as_deref(), Some("gpu-1"));
    assert_eq!(rule.spec.taint.effect, "NoSchedule");
    let ClusterObject::ResourceSlice(slice) = &o.others[1] else { panic!() };
    assert_eq!(slice.spec.devices.as_ref().unwrap().len(), 2);
    assert_eq!(o.resource_claim_templates.len(), 1);
    assert_eq!(o.resource_claim_templates[0].metadata.namespace.as_deref(), Some("team"));
    assert!(o.notes().is_empty(), "{:?}", o.notes());

    // The embedded cluster makes the pod's claim from the template.
    let (cluster, _rx) = crate::EmbeddedCluster::new(o);
    let pod = cluster.pod("team", "trainer").unwrap();
    let statuses = pod.status.as_ref().unwrap().resource_claim_statuses.as_ref().unwrap();
    let claim = statuses[0].resource_claim_name.as_deref().unwrap();
    assert!(claim.starts_with("trainer-gpu-"), "{claim}");
    assert!(cluster.resource_claim("team", claim).is_some());
    assert!(cluster.resource_claim("default", "shared").unwrap().metadata.uid.is_some());

    for (kind, version) in [
        ("DeviceClass", "resource.k8s.io/v1beta1"),
        ("ResourceSlice", "resource.k8s.io/v1beta2"),
        ("ResourceClaim", "resource.k8s.io/v1beta1"),
        ("ResourceClaimTemplate", "resource.k8s.io/v1beta2"),
        ("DeviceTaintRule", "resource.k8s.io/v1alpha3"),
    ] {
        let text = format!("apiVersion: {version}\nkind: {kind}\nmetadata: {{name: x}}\n");
        let err = parse_objects(&text, "t.yaml").unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "apiVersion: unsupported \"{version}\" for {kind} (expected \"resource.k8s.io/v1\")"
            )),
            "{err}"
        );
    }
    let bad = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: t}\nspec: {}\n";
    let err = parse_objects(bad, "t.yaml").unwrap_err().to_string();
    assert!(
        err.contains("ResourceClaimTemplate default/t") && err.contains("spec.spec: required"),
        "{err}"
    );
    let bad = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c}\nspec: {devices: {requests: x}}\n";
    let err = parse_objects(bad, "t.yaml").unwrap_err().to_string();
    assert!(
        err.contains("ResourceClaim default/c") && err.contains("spec.devices.requests"),
        "{err}"
    );
    let dup = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: t}\nspec: {spec: {}}\n";
    let err = parse_objects(&format!("{dup}---\n{dup}"), "t.yaml").unwrap_err().to_string();
    assert!(err.contains("duplicate ResourceClaimTemplate default/t"), "{err}");
}

#[test]
fn custom_resources_of_declared_kinds_are_loaded_others_skipped() {
    const HEALTH: convoy_api::ApiInfo = convoy_api::ApiInfo {
        group: "example.com",
        resource: "gpuhealths",
        kind: "GpuHealth",
        readable: &["v1alpha1"],
    };
    let text = "\
apiVersion: example.com/v1alpha1
kind: GpuHealth
metadata: {name: n0}
spec: {unhealthy: 2}
---
apiVersion: example.com/v1beta9
kind: GpuHealth
metadata: {name: n1}
---
apiVersion: example.com/v1alpha1
kind: Other
metadata: {name: x}
";
    let o = crate::parse_objects_with(text, "c.yaml", &[HEALTH]).unwrap();
    assert_eq!(o.custom.len(), 1);
    assert_eq!(o.custom[0].name(), "n0");
    assert_eq!(o.custom[0].pointer("/spec/unhealthy"), Some(&serde_json::json!(2)));
    assert_eq!(o.skipped.values().sum::<usize>(), 2, "{:?}", o.skipped);
    // Without the kind declared, it is skipped as any kind Convoy does not use.
    let plain = crate::parse_objects(text, "c.yaml").unwrap();
    assert!(plain.custom.is_empty());
    let err = crate::parse_objects_with(
        "apiVersion: example.com/v1alpha1\nkind: GpuHealth\nmetadata: {}\n",
        "c.yaml",
        &[HEALTH],
    )
    .unwrap_err();
    assert!(err.to_string().contains("metadata.name: required"), "{err}");
}
