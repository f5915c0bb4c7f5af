//! Upstream's preemption cases (issue 13): `default_preemption/` and
//! `workload_preemption/` of kubernetes v1.37.2, copied verbatim into
//! `tests/fixtures/upstream/` (their byte equality is checked in
//! `upstream_configs.rs`). convoy-bench loads and plans every workload
//! unchanged and renders their templates as Go does (`{{if}}`, `eq`, a
//! PodGroup template naming `v1alpha3` created as `v1beta1`);
//! `benches/config/preemption-config.yaml` carries the same cases; and the
//! small single-pod workloads run on the embedded target with Convoy,
//! reporting `EvictedPods`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use convoy_bench::config::{Config, Threshold};
use convoy_bench::labels::LabelFilter;
use convoy_bench::plan::{AnyStep, ChurnMode, Plan, PodsStep, Step, TemplateSource};
use convoy_bench::targets::embedded::EmbeddedOptions;
use convoy_bench::{RunOptions, load_file, run};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

fn fixture(topic: &str) -> Config {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/upstream")
        .join(topic)
        .join("performance-config.yaml");
    load_file(&path).unwrap_or_else(|e| panic!("{topic}: {e}"))
}

fn plans(config: &Config) -> BTreeMap<String, Plan> {
    convoy_bench::run::plan_all(config).unwrap()
}

fn pods_of(step: &Step) -> Vec<Pod> {
    let Step::CreatePods(s) = step else { panic!("not createPods: {step:?}") };
    convoy_bench::objects::build_pods(s, "default-scheduler", &mut 0).unwrap()
}

fn pod_groups_of(step: &Step) -> (Vec<Value>, Vec<String>) {
    let Step::CreatePodGroups(s) = step else { panic!("not createPodGroups: {step:?}") };
    let mut v = convoy_bench::objects::render_objects(s).unwrap();
    let replaced = convoy_bench::any::as_pod_groups(&mut v).unwrap();
    (v, replaced)
}

fn cpu(p: &Pod) -> String {
    let c = &p.spec.as_ref().unwrap().containers[0];
    c.resources.as_ref().unwrap().requests.as_ref().unwrap()["cpu"].0.clone()
}

fn priority(p: &Pod) -> Option<i32> {
    p.spec.as_ref().unwrap().priority
}

fn group(p: &Pod) -> Option<String> {
    p.spec.as_ref().unwrap().scheduling_group.as_ref().and_then(|g| g.pod_group_name.clone())
}

fn host_port(p: &Pod) -> Option<i32> {
    let c = &p.spec.as_ref().unwrap().containers[0];
    c.ports.as_ref()?.first()?.host_port
}

fn gates(g: &[(&str, bool)]) -> BTreeMap<String, bool> {
    g.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn template_file(t: &TemplateSource) -> String {
    match t {
        TemplateSource::File { path, .. } => {
            path.to_string_lossy().rsplit_once("upstream/").unwrap().1.to_string()
        }
        TemplateSource::Builtin => "<built-in>".into(),
    }
}

#[test]
fn every_upstream_preemption_case_loads_unchanged() {
    let want = [
        (
            "default_preemption",
            vec![
                ("PreemptionBasic", 4),
                ("PreemptionAsync", 6),
                ("Unschedulable", 8),
                ("PreemptionPodGroupDisruptionMode", 6),
            ],
        ),
        (
            "workload_preemption",
            vec![
                ("GangPreemptionBasic", 3),
                ("GangPreemptionPodGroups", 3),
                ("GangPreemptionAffinity", 3),
            ],
        ),
    ];
    for (topic, cases) in want {
        let config = fixture(topic);
        let got: Vec<(&str, usize)> =
            config.test_cases.iter().map(|tc| (tc.name.as_str(), tc.workloads.len())).collect();
        assert_eq!(got, cases, "{topic}");
        for plan in plans(&config).values() {
            convoy_bench::objects::render_first(plan)
                .unwrap_or_else(|e| panic!("{}: {e}", plan.name));
        }
    }
}

#[test]
fn default_preemption_ops_as_upstream() {
    let p = plans(&fixture("default_preemption"));

    // PreemptionBasic: low-priority victims, then the measured preemptors.
    let basic = &p["PreemptionBasic/5Nodes"];
    assert_eq!(basic.feature_gates, gates(&[("SchedulerAsyncAPICalls", false)]));
    let low = pods_of(&basic.steps[1]);
    assert_eq!(low.len(), 20);
    assert_eq!((priority(&low[0]), cpu(&low[0])), (None, "900m".to_string()));
    assert_eq!(low[0].spec.as_ref().unwrap().termination_grace_period_seconds, Some(0));
    let high = pods_of(&basic.steps[2]);
    assert_eq!(high.len(), 5);
    assert_eq!((priority(&high[0]), cpu(&high[0])), (Some(9999999), "3970m".to_string()));
    let Step::CreatePods(PodsStep { collect_metrics: true, .. }) = &basic.steps[2] else {
        panic!("the preemptors are measured")
    };

    // PreemptionAsync: preemptors churned every 200 ms, without end, from
    // the default_preemption template; measured default pods.
    let asynch = &p["PreemptionAsync/5000Nodes_AsyncPreemptionEnabled"];
    assert_eq!(
        asynch.feature_gates,
        gates(&[("SchedulerAsyncAPICalls", false), ("SchedulerAsyncPreemption", true)])
    );
    let Step::Churn(churn) = &asynch.steps[2] else { panic!("{:?}", asynch.steps[2]) };
    assert_eq!(churn.mode, ChurnMode::Create { limit: None });
    assert_eq!(churn.interval, Duration::from_millis(200));
    assert_eq!(churn.namespace, "namespace-2");
    assert_eq!(
        churn.templates.iter().map(template_file).collect::<Vec<_>>(),
        ["default_preemption/templates/pod-high-priority.yaml"]
    );
    let config = fixture("default_preemption");
    let tc = config.test_cases.iter().find(|t| t.name == "PreemptionAsync").unwrap();
    let thresholds: Vec<Option<&Threshold>> =
        tc.workloads.iter().map(|w| w.threshold.as_ref()).collect();
    assert_eq!(thresholds.iter().filter(|t| **t == Some(&Threshold::Value(570.0))).count(), 3);

    // Unschedulable: 9-CPU churned pods that never fit.
    let unsched = &p["Unschedulable/5Nodes/1Init/10Pods"];
    let Step::Churn(churn) = &unsched.steps[2] else { panic!() };
    assert_eq!(
        churn.templates.iter().map(template_file).collect::<Vec<_>>(),
        ["default_preemption/../templates/pod-high-priority-large-cpu.yaml"]
    );

    // PreemptionPodGroupDisruptionMode: PodGroups from the shared
    // template (v1alpha3, created as v1beta1) with the mode rendered by
    // `{{if}}` / `eq`; gang pods join them only when a mode is set.
    for (workload, mode) in [
        ("FastTest_NoPodGroup", None),
        ("FastTest_PodGroupDisruptionMode_Single", Some(json!({"single": {}}))),
        ("FastTest_PodGroupDisruptionMode_All", Some(json!({"all": {}}))),
        ("1000Nodes_1000Candidates_DisruptionAll", Some(json!({"all": {}}))),
    ] {
        let plan = &p[&format!("PreemptionPodGroupDisruptionMode/{workload}")];
        assert_eq!(
            plan.feature_gates,
            gates(&[("GenericWorkload", true), ("SchedulerAsyncAPICalls", false)])
        );
        let (groups, replaced) = pod_groups_of(&plan.steps[1]);
        assert_eq!(replaced, ["scheduling.k8s.io/v1alpha3"], "{workload}");
        let g = &groups[1];
        assert_eq!(g["apiVersion"], "scheduling.k8s.io/v1beta1");
        assert_eq!(g["metadata"]["name"], "gang-1");
        assert_eq!(g["spec"]["priority"], 1000);
        assert_eq!(g["spec"].get("disruptionMode"), mode.as_ref(), "{workload}");
        let Step::CreatePodGroups(AnyStep { namespace: Some(ns), .. }) = &plan.steps[1] else {
            panic!()
        };
        assert_eq!(ns, "gang-preempt-1");
        let pods = pods_of(&plan.steps[2]);
        let per_group = g["spec"]["schedulingPolicy"]["gang"]["minCount"].as_u64().unwrap();
        assert_eq!(pods.len() as u64, groups.len() as u64 * per_group);
        let last = pods.last().unwrap();
        assert_eq!(priority(last), Some(1000));
        let want_group = mode.as_ref().map(|_| format!("gang-{}", groups.len() - 1));
        assert_eq!(group(last), want_group, "{workload}");
        let Step::Barrier { namespaces, .. } = &plan.steps[3] else { panic!() };
        assert!(namespaces.is_empty());
        let preemptor = &pods_of(&plan.steps[4])[0];
        assert_eq!((priority(preemptor), cpu(preemptor)), (Some(9999999), "3970m".to_string()));
    }
}

#[test]
fn workload_preemption_ops_as_upstream() {
    let p = plans(&fixture("workload_preemption"));

    // GangPreemptionBasic: low-priority pods spread by host ports, then a
    // gang of the default priority (8888888) that must preempt them.
    let basic = &p["GangPreemptionBasic/2Nodes_1PreemptorGang_2Pods_Evicting_10InitPods"];
    assert_eq!(basic.feature_gates, gates(&[("GenericWorkload", true)]));
    let low = pods_of(&basic.steps[2]);
    assert_eq!(low.len(), 10);
    assert_eq!(priority(&low[0]), Some(0));
    let ports: Vec<Option<i32>> = low.iter().map(host_port).collect();
    assert_eq!(
        ports[..6],
        [Some(8000), Some(8001), Some(8002), Some(8003), Some(8004), Some(8000)]
    );
    let (groups, replaced) = pod_groups_of(&basic.steps[3]);
    assert!(replaced.is_empty(), "already v1beta1");
    assert_eq!(groups[0]["spec"]["priority"], 8888888);
    assert_eq!(groups[0]["spec"]["schedulingPolicy"]["gang"]["minCount"], 2);
    let gang = pods_of(&basic.steps[4]);
    assert_eq!(gang.len(), 2);
    assert_eq!(gang[1].metadata.name.as_deref(), Some("pod-gang-1"));
    assert_eq!((priority(&gang[1]), cpu(&gang[1])), (Some(8888888), "3970m".to_string()));
    assert_eq!((group(&gang[1]).as_deref(), host_port(&gang[1])), (Some("gang-0"), None));

    // GangPreemptionPodGroups: both sides are gangs; host ports by group.
    let pg = &p["GangPreemptionPodGroups/2Nodes_1PreemptorGang_2Pods_Evicting_2LowPriorityGangs"];
    let (low_groups, _) = pod_groups_of(&pg.steps[2]);
    assert_eq!(low_groups[1]["spec"]["priority"], 1000);
    let low = pods_of(&pg.steps[3]);
    let got: Vec<_> = low.iter().map(|p| (group(p), host_port(p), priority(p))).collect();
    assert_eq!(got[1], (Some("gang-0".into()), Some(8000), Some(1000)));
    assert_eq!(got[2], (Some("gang-1".into()), Some(8001), Some(1000)));
    let (high_groups, _) = pod_groups_of(&pg.steps[4]);
    assert_eq!(high_groups[0]["spec"]["priority"], 9999999);
    let high = pods_of(&pg.steps[5]);
    assert_eq!((host_port(&high[0]), cpu(&high[0])), (Some(9000), "3500m".to_string()));

    // GangPreemptionAffinity: anchors, then gang pods with pod affinity.
    let aff = &p["GangPreemptionAffinity/100Nodes_10PreemptorGangs_10Pods_Evicting_1000InitPods"];
    let anchors = pods_of(&aff.steps[2]);
    assert_eq!((anchors.len(), priority(&anchors[0])), (100, Some(9999999)));
    let gang = pods_of(&aff.steps[5]);
    assert_eq!(gang.len(), 100);
    assert_eq!(group(&gang[99]).as_deref(), Some("gang-9"));
    let affinity = gang[0].spec.as_ref().unwrap().affinity.as_ref().unwrap();
    assert!(affinity.pod_affinity.is_some());
}

/// The copy in benches/config carries upstream's cases: same test cases,
/// workloads (names, params, labels, feature gates, thresholds) and ops;
/// only template paths differ.
#[test]
fn benches_config_carries_upstreams_preemption_cases() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../benches/config/preemption-config.yaml");
    let ours = load_file(&path).unwrap();
    let upstream: Vec<_> = ["default_preemption", "workload_preemption"]
        .into_iter()
        .flat_map(|t| fixture(t).test_cases)
        .collect();
    assert_eq!(ours.test_cases.len(), upstream.len());
    for (a, b) in ours.test_cases.iter().zip(&upstream) {
        assert_eq!(a.name, b.name);
        assert_eq!(a.workloads, b.workloads, "{}", a.name);
        assert_eq!(a.feature_gates, b.feature_gates, "{}", a.name);
        assert_eq!(a.labels, b.labels, "{}", a.name);
        let ops = |t: &convoy_bench::config::TestCase| {
            t.workload_template.iter().map(|o| o.opcode()).collect::<Vec<_>>()
        };
        assert_eq!(ops(a), ops(b), "{}", a.name);
    }
    let ours_plans = plans(&ours);
    for plan in ours_plans.values() {
        convoy_bench::objects::render_first(plan).unwrap_or_else(|e| panic!("{}: {e}", plan.name));
    }
    // The same objects, rendered from the copies.
    let theirs = plans(&fixture("default_preemption"));
    let name = "PreemptionPodGroupDisruptionMode/FastTest_PodGroupDisruptionMode_Single";
    assert_eq!(pod_groups_of(&ours_plans[name].steps[1]), pod_groups_of(&theirs[name].steps[1]));
    assert_eq!(pods_of(&ours_plans[name].steps[2]), pods_of(&theirs[name].steps[2]));
}

/// The `integration-test` workloads of `default_preemption` that single
/// pods preempt, on the embedded target with Convoy's DefaultPreemption:
/// PreemptionBasic's 5 preemptors each need all four low-priority pods of a
/// node gone (three free only 3100m of the 3970m), so exactly 20 victims,
/// as kube-scheduler's (`api_preemption.rs`); PreemptionAsync's measured pods
/// need no preemption (how many preemptors the churn makes before they are
/// bound depends on timing); Unschedulable's 9-CPU pods can preempt nothing.
#[test]
fn small_workloads_run_on_the_embedded_target() {
    let config = fixture("default_preemption");
    let mut ran = Vec::new();
    for (filter, pods, evicted) in [
        ("^PreemptionBasic$/^5Nodes", 5, Some(20)),
        ("^PreemptionAsync$/^5Nodes", 5, None),
        ("^Unschedulable$/^5Nodes", 10, Some(0)),
    ] {
        let opts = RunOptions {
            filter: Some(filter.into()),
            labels: LabelFilter::parse("integration-test"),
            topic: "default_preemption".into(),
            embedded: EmbeddedOptions { timeout: Duration::from_secs(60), ..Default::default() },
        };
        let report = run(&config, &opts).unwrap();
        assert_eq!(report.results.len(), 2, "{filter}");
        for r in &report.results {
            assert_eq!(r.error, None, "{}", r.name);
            assert_eq!(r.windows.len(), 1, "{}", r.name);
            assert_eq!(r.windows[0].pods, pods, "{}", r.name);
            let e = convoy_bench::run::evictions_of(&r.items).expect("an EvictedPods item");
            if let Some(want) = evicted {
                assert_eq!(e.total, want, "{}: {e:?}", r.name);
            }
            ran.push(r.name.clone());
        }
    }
    assert_eq!(ran.len(), 6);
}
