//! Upstream's DRA cases: `dra/performance-config.yaml` of kubernetes
//! v1.37.2 and the templates it uses, copied verbatim into
//! `tests/fixtures/upstream/dra/` (byte equality with upstream's files is
//! checked in `upstream_configs.rs`) and into `benches/config/` as
//! `dra-config.yaml` with its templates under `benches/config/templates/`,
//! where its own `templates/...` paths resolve (checked equal here).
//! convoy-bench loads the config unchanged and plans every workload but
//! two, which upstream cannot plan either (see [`UNPLANNABLE`]); every
//! object a workload's templates render decodes into its
//! `resource.k8s.io/v1` type. On the embedded target with Convoy, the
//! `integration-test` workloads bind every measured pod, and
//! `allocResourceClaims` fills devices as upstream's.
//!
//! `dra/devicetaints/performance-config.yaml` (DeviceTaintToleration) and
//! its two further templates are copied the same way, to
//! `benches/config/devicetaints/` (its `../templates/...` paths resolve to
//! `benches/config/templates/`), and its integration workload binds every
//! pod; DeviceTaintRules of our own show the taints are evaluated.

use std::path::PathBuf;
use std::time::Duration;

use convoy_bench::labels::LabelFilter;
use convoy_bench::plan::{AnyStep, Step, TemplateSource};
use convoy_bench::targets::embedded::EmbeddedOptions;
use convoy_bench::{RunOptions, load_file, parse_str, run};
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};

/// Workloads upstream's own `createPodsOp.patchParams` refuses: they pass
/// no `measurePods` for `countParam: $measurePods` (they carry no label, so
/// upstream's CI never selects them).
const UNPLANNABLE: [&str; 2] = [
    "SchedulingWithResourceClaimTemplate/empty_100nodes",
    "SchedulingWithResourceClaimTemplate/empty_200nodes",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream/dra")
}

#[test]
fn benches_copy_is_upstreams_file_and_templates() {
    let ours = std::fs::read(root().join("benches/config/dra-config.yaml")).unwrap();
    let theirs = std::fs::read(fixture_dir().join("performance-config.yaml")).unwrap();
    assert!(ours == theirs, "benches/config/dra-config.yaml differs from upstream's");
    let mut n = 0;
    for e in std::fs::read_dir(fixture_dir().join("templates")).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap();
        let ours = std::fs::read(root().join("benches/config/templates").join(name)).unwrap();
        assert!(ours == std::fs::read(&p).unwrap(), "{name:?} differs from upstream's");
        n += 1;
    }
    assert_eq!(n, 9);
    let ours = std::fs::read(root().join("benches/config/devicetaints/performance-config.yaml"));
    let theirs = std::fs::read(fixture_dir().join("devicetaints/performance-config.yaml"));
    assert!(ours.unwrap() == theirs.unwrap(), "devicetaints/performance-config.yaml differs");
}

#[test]
fn every_dra_workload_plans_and_renders_typed_objects() {
    for path in [
        root().join("benches/config/dra-config.yaml"),
        fixture_dir().join("performance-config.yaml"),
    ] {
        let config = load_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let cases: Vec<&str> = config.test_cases.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            cases,
            [
                "PublishResourceSlices",
                "SchedulingWithResourceClaimTemplate",
                "SchedulingWithResourceClaim"
            ]
        );
        let mut plans = Vec::new();
        for tc in &config.test_cases {
            for w in &tc.workloads {
                let name = format!("{}/{}", tc.name, w.name);
                match convoy_bench::plan::plan(&config, tc, w) {
                    Ok(p) => plans.push(p),
                    Err(e) if UNPLANNABLE.contains(&name.as_str()) => {
                        assert!(e.ends_with("parameter measurePods is undefined"), "{e}")
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
        assert_eq!(plans.len(), 2 + 16 + 3 - UNPLANNABLE.len());
        let mut kinds = std::collections::BTreeSet::new();
        for plan in &plans {
            assert_eq!(plan.feature_gates.get("DynamicResourceAllocation"), Some(&true));
            convoy_bench::objects::render_first(plan)
                .unwrap_or_else(|e| panic!("{}: {e}", plan.name));
            for step in &plan.steps {
                match step {
                    Step::CreateAny(s) => {
                        let s = AnyStep { count: s.count.min(3), ..s.clone() };
                        for v in convoy_bench::objects::render_objects(&s).unwrap() {
                            let kind = v["kind"].as_str().unwrap().to_string();
                            let at = |e: serde_json::Error| format!("{}: {kind}: {e}", plan.name);
                            match kind.as_str() {
                                "ResourceSlice" => drop(
                                    serde_json::from_value::<ResourceSlice>(v).map_err(at).unwrap(),
                                ),
                                "DeviceClass" => drop(
                                    serde_json::from_value::<DeviceClass>(v).map_err(at).unwrap(),
                                ),
                                "ResourceClaim" => drop(
                                    serde_json::from_value::<ResourceClaim>(v).map_err(at).unwrap(),
                                ),
                                "ResourceClaimTemplate" => drop(
                                    serde_json::from_value::<ResourceClaimTemplate>(v)
                                        .map_err(at)
                                        .unwrap(),
                                ),
                                other => panic!("{}: unexpected kind {other}", plan.name),
                            }
                            kinds.insert(kind);
                        }
                        if let TemplateSource::File { path, .. } = &s.template {
                            assert!(path.is_file(), "{}", path.display());
                        }
                    }
                    Step::AllocResourceClaims { namespace } => {
                        assert_eq!(namespace.as_deref(), Some("init"), "{}", plan.name);
                    }
                    _ => {}
                }
            }
        }
        assert_eq!(kinds.len(), 4, "{kinds:?}");
    }
}

fn opts(filter: &str, timeout: Duration) -> RunOptions {
    RunOptions {
        filter: Some(filter.into()),
        labels: LabelFilter::parse(""),
        topic: "dra".into(),
        embedded: EmbeddedOptions { timeout, ..Default::default() },
    }
}

#[test]
fn integration_workloads_bind_every_pod_on_the_embedded_target() {
    let config = load_file(&root().join("benches/config/dra-config.yaml")).unwrap();
    let want = [
        ("SchedulingWithResourceClaimTemplate/fast", 10),
        ("SchedulingWithResourceClaimTemplate/selector_fast", 10),
        ("SchedulingWithResourceClaimTemplate/match_fast", 2),
        ("SchedulingWithResourceClaim/fast", 10),
    ];
    for (name, pods) in want {
        let report = run(
            &config,
            &opts(&format!("^{}$", name.replace('/', "$/^")), Duration::from_secs(30)),
        )
        .unwrap();
        assert_eq!(report.results.len(), 1, "{name}");
        let r = &report.results[0];
        assert_eq!(r.error, None, "{name}");
        assert_eq!(r.windows.len(), 1, "{name}");
        assert_eq!(r.windows[0].pods, pods, "{name}");
    }
    // Selected, a workload upstream cannot plan fails before anything runs.
    let e = run(
        &config,
        &opts("SchedulingWithResourceClaimTemplate/^empty_100nodes$", Duration::from_secs(1)),
    )
    .unwrap_err();
    assert!(e.ends_with("parameter measurePods is undefined"), "{e}");
}

/// A small SchedulingWithResourceClaim: `nodes` nodes with 2 devices each,
/// `init` claims allocated by `allocResourceClaims`, then 2 pods sharing one
/// claim (upstream's templates).
fn alloc_config(nodes: usize, init: usize) -> convoy_bench::Config {
    let yaml = format!(
        r#"
- name: Alloc
  workloadTemplate:
  - opcode: createNodes
    nodeTemplatePath: templates/node-with-dra-test-driver.yaml
    count: {nodes}
  - opcode: createAny
    templatePath: templates/resourceslice-basic-devices.yaml
    count: {nodes}
    templateParams:
      numDevices: 2
  - opcode: createAny
    templatePath: templates/deviceclass.yaml
  - opcode: createAny
    templatePath: templates/resourceclaim.yaml
    namespace: init
    count: {init}
  - opcode: allocResourceClaims
    namespace: init
  - opcode: createAny
    templatePath: templates/resourceclaim.yaml
    namespace: test
    count: 1
  - opcode: createPods
    namespace: test
    count: 2
    podTemplatePath: templates/pod-with-claim-ref.yaml
    collectMetrics: true
  workloads:
  - name: w
"#
    );
    parse_str(&yaml, "alloc.yaml", fixture_dir()).unwrap()
}

#[test]
fn alloc_resource_claims_takes_devices_from_the_pods() {
    let short = Duration::from_secs(3);
    // 6 of 8 devices allocated: the pods' claim gets one of the other two.
    let report = run(&alloc_config(4, 6), &opts("Alloc", short)).unwrap();
    let r = &report.results[0];
    assert_eq!(r.error, None);
    assert_eq!(r.windows[0].pods, 2);
    // All 8 allocated: the pods cannot be scheduled.
    let report = run(&alloc_config(4, 8), &opts("Alloc", short)).unwrap();
    let e = report.results[0].error.as_deref().expect("no device left");
    assert!(e.contains("0/2 scheduled") && e.contains("cannot allocate all claims"), "{e}");
    // More claims than devices: the op fails naming the claim, as upstream's.
    let report = run(&alloc_config(4, 9), &opts("Alloc", short)).unwrap();
    let e = report.results[0].error.as_deref().expect("a claim does not fit");
    assert!(e.contains("allocResourceClaims: could not allocate claim init/test-claim-8"), "{e}");
}

#[test]
fn device_taint_toleration_binds_every_pod_on_the_embedded_target() {
    let config =
        load_file(&root().join("benches/config/devicetaints/performance-config.yaml")).unwrap();
    let report =
        run(&config, &opts("^DeviceTaintToleration$/^fast$", Duration::from_secs(30))).unwrap();
    assert_eq!(report.results.len(), 1);
    let r = &report.results[0];
    assert_eq!(r.error, None);
    assert_eq!(r.windows[0].pods, 10);
}

/// Two nodes with one device each, a DeviceTaintRule with `selector`
/// (NoSchedule, upstream's taint key), the claim template `template`, and
/// `pods` pods; the rule's file lives in the returned directory, removed
/// when it is dropped.
fn taint_config(
    selector: &str,
    template: &str,
    pods: usize,
) -> (tempfile::TempDir, convoy_bench::Config) {
    let dir = tempfile::tempdir().unwrap();
    let rule = dir.path().join("rule.yaml");
    std::fs::write(
        &rule,
        format!(
            "apiVersion: resource.k8s.io/v1\nkind: DeviceTaintRule\nmetadata: {{name: r}}\n\
             spec:\n  deviceSelector: {selector}\n  taint: {{key: example.com/taint, \
             value: tainted, effect: NoSchedule}}\n"
        ),
    )
    .unwrap();
    let yaml = format!(
        r#"
- name: Taint
  workloadTemplate:
  - opcode: createNodes
    nodeTemplatePath: templates/node-with-dra-test-driver.yaml
    count: 2
  - opcode: createAny
    templatePath: templates/resourceslice-basic-devices.yaml
    count: 2
    templateParams:
      numDevices: 1
  - opcode: createAny
    templatePath: templates/deviceclass.yaml
  - opcode: createAny
    templatePath: {rule}
  - opcode: createAny
    templatePath: templates/{template}
    namespace: test
  - opcode: createPods
    namespace: test
    count: {pods}
    podTemplatePath: templates/pod-with-claim-template.yaml
    collectMetrics: true
  workloads:
  - name: w
"#,
        rule = rule.display()
    );
    (dir, parse_str(&yaml, "taint.yaml", fixture_dir()).unwrap())
}

/// Runs [`taint_config`]'s workload, its rule's directory kept until the
/// run ends.
fn run_taint(
    selector: &str,
    template: &str,
    pods: usize,
    timeout: Duration,
) -> Result<convoy_bench::Report, String> {
    let (_dir, config) = taint_config(selector, template, pods);
    run(&config, &opts("Taint", timeout))
}

#[test]
fn device_taint_rules_keep_pods_off_tainted_devices() {
    let short = Duration::from_secs(3);
    // Every device tainted (the empty selector): nothing for a claim that
    // does not tolerate it.
    let report = run_taint("{}", "resourceclaimtemplate.yaml", 1, short).unwrap();
    let e = report.results[0].error.as_deref().expect("every device tainted");
    assert!(e.contains("0/1 scheduled") && e.contains("cannot allocate all claims"), "{e}");
    // Tolerated, both devices are used.
    let tolerant = "resourceclaimtemplate-toleration.yaml";
    let report = run_taint("{}", tolerant, 2, short).unwrap();
    assert_eq!(report.results[0].error, None);
    assert_eq!(report.results[0].windows[0].pods, 2);
    // One device tainted (driver, pool and device selected): one pod of two.
    let one = "{driver: test-driver.cdi.k8s.io, pool: resourceslice-0, device: basic-device-0}";
    let report = run_taint(one, "resourceclaimtemplate.yaml", 2, short).unwrap();
    let e = report.results[0].error.as_deref().expect("one device tainted");
    assert!(e.contains("1/2 scheduled"), "{e}");
    // No selector (upstream's own devicetaintrule.yaml): no device matched.
    let report = run_taint("null", "resourceclaimtemplate.yaml", 2, short).unwrap();
    assert_eq!(report.results[0].error, None);
    assert_eq!(report.results[0].windows[0].pods, 2);
}
