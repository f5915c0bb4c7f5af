//! `allocResourceClaims` and `createAny` of the DRA kinds on a real API
//! server (a fresh testenv control plane, the null binder): upstream's DRA
//! templates (the verbatim copies in `tests/fixtures/upstream/dra/`) create
//! ResourceSlices, a DeviceClass and ResourceClaims through the dynamic API;
//! `allocResourceClaims` writes each claim's allocation into its status,
//! every claim on its own device, none reserved.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use convoy_bench::labels::LabelFilter;
use convoy_bench::targets::api::{ApiOptions, SchedulerKind};
use convoy_bench::targets::embedded::EmbeddedOptions;
use convoy_bench::{RunOptions, parse_str};
use convoy_testenv::TestEnv;

const CONFIG: &str = r#"
- name: Alloc
  workloadTemplate:
  - opcode: createNodes
    nodeTemplatePath: templates/node-with-dra-test-driver.yaml
    count: 3
  - opcode: createAny
    templatePath: templates/resourceslice-basic-devices.yaml
    count: 3
    templateParams:
      numDevices: 2
  - opcode: createAny
    templatePath: templates/deviceclass.yaml
  - opcode: createAny
    templatePath: templates/resourceclaim.yaml
    namespace: init
    count: 5
  - opcode: allocResourceClaims
    namespace: init
  - opcode: createPods
    count: 1
    collectMetrics: true
  workloads:
  - name: w
"#;

#[test]
fn alloc_resource_claims_on_a_real_api_server() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream/dra");
    let config = parse_str(CONFIG, "alloc.yaml", dir).unwrap();
    let env = TestEnv::start().expect("testenv");
    let mut api = ApiOptions::new(env.kubeconfig().to_path_buf(), SchedulerKind::Null);
    api.timeout = Duration::from_secs(60);
    let opts = RunOptions {
        filter: Some("Alloc".into()),
        labels: LabelFilter::parse(""),
        topic: "test".into(),
        embedded: EmbeddedOptions::default(),
    };
    let report = convoy_bench::run::run_api(&config, &opts, &api).unwrap();
    assert_eq!(report.results[0].error, None);

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        use k8s_openapi::api::resource::v1::ResourceClaim;
        use kube::api::{Api, ListParams};
        let client = env.client().await.unwrap();
        let claims = Api::<ResourceClaim>::namespaced(client, "init")
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        assert_eq!(claims.len(), 5);
        let mut devices = HashSet::new();
        for c in &claims {
            let status = c.status.as_ref().expect("status written");
            assert!(status.reserved_for.as_ref().is_none_or(|r| r.is_empty()));
            let alloc = status.allocation.as_ref().expect("allocated");
            assert!(alloc.node_selector.is_some());
            let results = &alloc.devices.as_ref().unwrap().results;
            let results = results.as_ref().unwrap();
            assert_eq!(results.len(), 1);
            let r = &results[0];
            assert_eq!(r.driver, "test-driver.cdi.k8s.io");
            assert!(devices.insert((r.pool.clone(), r.device.clone())), "{r:?} twice");
        }
    });
}
