//! Upstream's volume cases (issue 14): `volumes/performance-config.yaml`
//! of kubernetes v1.37.2 and the shared templates it uses, copied verbatim
//! into `tests/fixtures/upstream/` (their byte equality is checked in
//! `upstream_configs.rs`). convoy-bench loads and plans every workload
//! unchanged and builds the objects upstream's executor builds (each pod's
//! claim bound to its own volume, a CSINode per node);
//! `benches/config/volumes-config.yaml` carries the same cases; and the
//! `integration-test` workloads run on the embedded target with Convoy,
//! every measured pod bound.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use convoy_bench::config::Config;
use convoy_bench::labels::LabelFilter;
use convoy_bench::plan::{CsiNodeTemplate, NodeStrategy, Plan, Step};
use convoy_bench::targets::embedded::EmbeddedOptions;
use convoy_bench::volumes::{ClaimAndVolume, PodVolumes};
use convoy_bench::{RunOptions, load_file, parse_str, run};
use k8s_openapi::api::core::v1::Pod;

fn fixture() -> Config {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/upstream/volumes/performance-config.yaml");
    load_file(&path).unwrap()
}

fn plans(config: &Config) -> BTreeMap<String, Plan> {
    convoy_bench::run::plan_all(config).unwrap()
}

fn pods_of(step: &Step) -> Vec<Pod> {
    let Step::CreatePods(s) = step else { panic!("not createPods: {step:?}") };
    convoy_bench::objects::build_pods(s, "default-scheduler", &mut 0).unwrap()
}

/// The claim and volume of pod `index` of a `createPods` step.
fn volume_of(step: &Step, index: usize) -> Option<ClaimAndVolume> {
    let Step::CreatePods(s) = step else { panic!("not createPods: {step:?}") };
    let t = s.volumes.as_ref()?;
    Some(PodVolumes::new(t).unwrap().for_pod(&s.namespace, index))
}

fn claim_of(p: &Pod) -> Option<String> {
    let vols = p.spec.as_ref()?.volumes.as_ref()?;
    assert_eq!(vols.len(), 1, "one volume");
    vols[0].persistent_volume_claim.as_ref().map(|c| c.claim_name.clone())
}

fn csi_node_of(step: &Step) -> Option<CsiNodeTemplate> {
    let Step::CreateNodes(s) = step else { panic!("not createNodes: {step:?}") };
    s.csi_node.clone()
}

#[test]
fn every_upstream_volume_case_loads_unchanged() {
    let config = fixture();
    let got: Vec<(&str, usize)> =
        config.test_cases.iter().map(|tc| (tc.name.as_str(), tc.workloads.len())).collect();
    assert_eq!(
        got,
        [
            ("SchedulingSecrets", 4),
            ("SchedulingInTreePVs", 4),
            ("SchedulingMigratedInTreePVs", 4),
            ("SchedulingCSIPVs", 4),
            ("PreemptionPVs", 2),
        ]
    );
    for plan in plans(&config).values() {
        convoy_bench::objects::render_first(plan).unwrap_or_else(|e| panic!("{}: {e}", plan.name));
    }
}

#[test]
fn volume_ops_as_upstream() {
    let p = plans(&fixture());

    // SchedulingSecrets: the template's secret volume, no claims.
    let secrets = &p["SchedulingSecrets/5Nodes"];
    let pod = &pods_of(&secrets.steps[2])[0];
    let vols = pod.spec.as_ref().unwrap().volumes.as_ref().unwrap();
    assert_eq!(vols[0].secret.as_ref().unwrap().secret_name.as_deref(), Some("secret"));
    assert!(volume_of(&secrets.steps[2], 0).is_none());

    // SchedulingInTreePVs: built-in nodes without CSINodes; EBS volumes.
    let in_tree = &p["SchedulingInTreePVs/5000Nodes_2000Pods"];
    assert_eq!(csi_node_of(&in_tree.steps[0]), None);
    let pods = pods_of(&in_tree.steps[2]);
    assert_eq!(pods.len(), 2000);
    assert_eq!(claim_of(&pods[1999]).as_deref(), Some("pvc-1999"));
    let cv = volume_of(&in_tree.steps[2], 1999).unwrap();
    assert_eq!(cv.volume.metadata.name.as_deref(), Some("namespace-2-vol-1999"));
    let spec = cv.volume.spec.as_ref().unwrap();
    assert_eq!(spec.aws_elastic_block_store.as_ref().unwrap().volume_id, "vol-1999");
    let claim = cv.claim.spec.as_ref().unwrap();
    assert_eq!(claim.volume_name.as_deref(), Some("namespace-2-vol-1999"));
    assert_eq!(claim.access_modes.as_deref(), Some(&["ReadOnlyMany".to_string()][..]));
    // The init pods' claims are in their own namespace, the same names.
    assert_eq!(
        volume_of(&in_tree.steps[1], 0).unwrap().claim.metadata.namespace.as_deref(),
        Some("namespace-1")
    );

    // SchedulingMigratedInTreePVs and SchedulingCSIPVs: node-default.yaml,
    // the attach limit as allocatable and in a CSINode per node.
    for (case, migrated, csi) in [
        ("SchedulingMigratedInTreePVs/5Nodes", vec!["kubernetes.io/aws-ebs".to_string()], false),
        ("SchedulingCSIPVs/5Nodes", vec![], true),
    ] {
        let plan = &p[case];
        let want = CsiNodeTemplate {
            drivers: BTreeMap::from([("ebs.csi.aws.com".to_string(), Some(39))]),
            migrated_plugins: migrated,
        };
        assert_eq!(csi_node_of(&plan.steps[0]), Some(want.clone()), "{case}");
        let Step::CreateNodes(s) = &plan.steps[0] else { panic!() };
        let Some(NodeStrategy::Allocatable(a)) = &s.strategy else { panic!("{case}") };
        assert_eq!(a["attachable-volumes-csi-ebs.csi.aws.com"], "39");
        let node = &convoy_bench::objects::build_nodes(s, &mut 0).unwrap()[0];
        let alloc = node.status.as_ref().unwrap().allocatable.as_ref().unwrap();
        assert_eq!(alloc["cpu"].0, "4");
        let c = convoy_bench::volumes::csi_node(&want, node.metadata.name.as_deref().unwrap());
        assert_eq!(c.metadata.name, node.metadata.name);
        let cv = volume_of(&plan.steps[2], 3).unwrap();
        let spec = cv.volume.spec.as_ref().unwrap();
        assert_eq!(spec.csi.as_ref().map(|c| c.volume_handle.as_str()), {
            csi.then_some("namespace-2-vol-3")
        });
        assert_eq!(claim_of(&pods_of(&plan.steps[2])[3]).as_deref(), Some("pvc-3"));
    }

    // PreemptionPVs: low-priority pods without claims, then 3000m
    // priority-10 preemptors, each with its claim.
    let pre = &p["PreemptionPVs/1000Nodes"];
    let low = pods_of(&pre.steps[1]);
    assert_eq!((low.len(), claim_of(&low[0])), (4000, None));
    let high = pods_of(&pre.steps[2]);
    let spec = high[0].spec.as_ref().unwrap();
    assert_eq!(spec.priority, Some(10));
    let req = spec.containers[0].resources.as_ref().unwrap().requests.as_ref().unwrap();
    assert_eq!(req["cpu"].0, "3000m");
    assert_eq!(claim_of(&high[999]).as_deref(), Some("pvc-999"));
}

/// The copy in benches/config carries upstream's cases: same test cases,
/// workloads (names, params, labels, thresholds) and ops, and the same
/// objects; only template paths differ.
#[test]
fn benches_config_carries_upstreams_volume_cases() {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../benches/config/volumes-config.yaml");
    let ours = load_file(&path).unwrap();
    let upstream = fixture();
    assert_eq!(ours.test_cases.len(), upstream.test_cases.len());
    for (a, b) in ours.test_cases.iter().zip(&upstream.test_cases) {
        assert_eq!(a.name, b.name);
        assert_eq!(a.workloads, b.workloads, "{}", a.name);
        assert_eq!(a.labels, b.labels, "{}", a.name);
        let ops = |t: &convoy_bench::config::TestCase| {
            t.workload_template.iter().map(|o| o.opcode()).collect::<Vec<_>>()
        };
        assert_eq!(ops(a), ops(b), "{}", a.name);
    }
    let (ours, theirs) = (plans(&ours), plans(&upstream));
    assert_eq!(ours.keys().collect::<Vec<_>>(), theirs.keys().collect::<Vec<_>>());
    for (name, plan) in &ours {
        let other = &theirs[name];
        for (i, (a, b)) in plan.steps.iter().zip(&other.steps).enumerate() {
            match (a, b) {
                (Step::CreateNodes(x), Step::CreateNodes(y)) => {
                    let n = |s: &convoy_bench::plan::NodesStep| {
                        let s = convoy_bench::plan::NodesStep { count: 2, ..s.clone() };
                        convoy_bench::objects::build_nodes(&s, &mut 0).unwrap()
                    };
                    assert_eq!(n(x), n(y), "{name} step {i}");
                    assert_eq!(x.csi_node, y.csi_node, "{name} step {i}");
                }
                (Step::CreatePods(x), Step::CreatePods(y)) => {
                    let one = |s: &convoy_bench::plan::PodsStep| {
                        convoy_bench::objects::PodFactory::new(s, "s").build(1, 1).unwrap()
                    };
                    assert_eq!(one(x), one(y), "{name} step {i}");
                    assert_eq!(volume_of(a, 1), volume_of(b, 1), "{name} step {i}");
                }
                _ => panic!("{name} step {i}: {a:?} / {b:?}"),
            }
        }
    }
}

/// The `integration-test` workloads on the embedded target with Convoy:
/// every measured pod is bound (its claim found bound, its CSI volume within
/// the node's limit of 39). PreemptionPVs/5Nodes: 4 low-priority 900m pods
/// fill each 4-CPU node, each 3000m preemptor needs three of them gone, one
/// preemptor per node: exactly 15 victims.
#[test]
fn integration_workloads_run_on_the_embedded_target() {
    let opts = RunOptions {
        filter: None,
        labels: LabelFilter::parse("integration-test"),
        topic: "volumes".into(),
        embedded: EmbeddedOptions { timeout: Duration::from_secs(60), ..Default::default() },
    };
    let report = run(&fixture(), &opts).unwrap();
    let got: Vec<(&str, usize)> = report
        .results
        .iter()
        .map(|r| {
            assert_eq!(r.error, None, "{}", r.name);
            assert_eq!(r.windows.len(), 1, "{}", r.name);
            (r.name.as_str(), r.windows[0].pods)
        })
        .collect();
    assert_eq!(
        got,
        [
            ("SchedulingSecrets/5Nodes", 10),
            ("SchedulingInTreePVs/5Nodes", 10),
            ("SchedulingMigratedInTreePVs/5Nodes", 10),
            ("SchedulingCSIPVs/5Nodes", 10),
            ("PreemptionPVs/5Nodes", 5),
        ]
    );
    let pre = report.results.iter().find(|r| r.name == "PreemptionPVs/5Nodes").unwrap();
    assert_eq!(convoy_bench::run::evictions_of(&pre.items).unwrap().total, 15);
}

/// The CSINodes reach the scheduler: with a limit of 2 CSI volumes per node
/// (the same ops as SchedulingCSIPVs), 2 nodes take 4 of 5 pods and the
/// fifth stays pending (NodeVolumeLimits).
#[test]
fn csi_node_limits_reach_the_embedded_scheduler() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream/volumes");
    let yaml = r#"
- name: CSILimit
  workloadTemplate:
  - opcode: createNodes
    count: 2
    nodeTemplatePath: ../templates/node-default.yaml
    nodeAllocatableStrategy:
      csiNodeAllocatable:
        ebs.csi.aws.com:
          count: 2
  - opcode: createPods
    count: 5
    persistentVolumeTemplatePath: ../templates/pv-csi.yaml
    persistentVolumeClaimTemplatePath: ../templates/pvc.yaml
    collectMetrics: true
  workloads:
  - name: 2Nodes
"#;
    let config = parse_str(yaml, "limit.yaml", dir).unwrap();
    let opts = RunOptions {
        filter: None,
        labels: LabelFilter::parse(""),
        topic: "volumes".into(),
        embedded: EmbeddedOptions { timeout: Duration::from_secs(3), ..Default::default() },
    };
    let report = run(&config, &opts).unwrap();
    let r = &report.results[0];
    let e = r.error.as_deref().expect("the fifth pod cannot be bound");
    assert!(e.contains("4/5 scheduled") && e.contains("exceed max volume count"), "{e}");
}
