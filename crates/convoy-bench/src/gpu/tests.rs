use super::MixEntry;

#[test]
fn op_is_strict() {
    use crate::config::Op;
    let ok = serde_json::json!({
        "opcode": "createGpuJobs", "jobs": 10, "jobsPerWave": 2, "meanLifetimeWaves": 3,
        "gpuMix": [{"gpus": 1, "weight": 1}], "podTemplatePath": "p.yaml",
    });
    let op = Op::from_value(ok.clone()).unwrap();
    op.validate().unwrap();
    let mut bad = ok.clone();
    bad["bogus"] = 1.into();
    let e = Op::from_value(bad).unwrap_err();
    assert!(e.contains("createGpuJobs") && e.contains("bogus"), "{e}");
    let cases = [
        ("gpuMix", serde_json::json!([]), "gpuMix or gpuMixPath is required"),
        ("gpuMix", serde_json::json!([{"gpus": 0, "weight": 1}]), "gpuMix: no entry asks for GPUs"),
        ("gpuMix", serde_json::json!([{"gpus": 1, "weight": 0}]), "gpuMix[0].weight must be > 0"),
        (
            "gpuMix",
            serde_json::json!([{"gpus": 1, "cpuMilli": -1, "weight": 1}]),
            "gpuMix[0].cpuMilli must not be negative",
        ),
        ("gpuMixPath", serde_json::json!("mix.csv"), "give gpuMix or gpuMixPath, not both"),
        ("meanLifetimeWaves", serde_json::json!(0.5), "meanLifetimeWaves must be >= 1"),
        ("jobs", serde_json::json!(0), "jobs must be > 0"),
        (
            "gangs",
            serde_json::json!({"fraction": 0.1, "members": [2], "gpusPerMember": [8]}),
            "podGroupTemplatePath is required",
        ),
        ("stallTimeout", serde_json::json!("soon"), "stallTimeout"),
    ];
    for (field, value, want) in cases {
        let mut v = ok.clone();
        v[field] = value;
        let e = Op::from_value(v).and_then(|o| o.validate()).unwrap_err();
        assert!(e.contains(want), "{field}: {e}");
    }
}

#[test]
fn mix_csv_is_strict_and_names_the_line() {
    let ok = "# a comment\ngpus,cpu_milli,memory_mib,weight\n1,4000,15258,10\n\n0,8000,30517,2.5\n";
    let mix = super::parse_mix_csv(ok, "m.csv").unwrap();
    assert_eq!(
        mix,
        [
            MixEntry { gpus: 1, cpu_milli: Some(4000), memory_mib: Some(15258), weight: 10.0 },
            MixEntry { gpus: 0, cpu_milli: Some(8000), memory_mib: Some(30517), weight: 2.5 },
        ]
    );
    let gpu_only = super::parse_mix_csv("weight,gpus\n3,8\n", "m.csv").unwrap();
    assert_eq!(gpu_only, [MixEntry::gpus(8, 3.0)]);
    let cases = [
        ("", "m.csv: no header line"),
        ("gpus,cpu,weight\n", "m.csv:1: unknown column \"cpu\""),
        ("gpus,cpu_milli\n", "m.csv:1: the header must name gpus and weight"),
        ("gpus,weight\n1\n", "m.csv:2: 1 cells, the header has 2"),
        ("gpus,weight\n# c\n-1,1\n", "m.csv:3: gpus: -1 is out of range"),
        ("gpus,weight\nx,1\n", "m.csv:2: gpus: invalid digit"),
        ("gpus,weight\n1,heavy\n", "m.csv:2: weight:"),
        ("gpus,weight\n", "m.csv: no entries"),
        ("gpus,weight\n0,1\n", "m.csv: no entry asks for GPUs"),
    ];
    for (text, want) in cases {
        let e = super::parse_mix_csv(text, "m.csv").unwrap_err();
        assert!(e.starts_with(want), "{text:?}: {e}");
    }
}

/// A small stream on the embedded target with Convoy's GPU profile: every
/// wave sampled, the metrics consistent with the cluster, gangs whole.
#[test]
fn small_stream_on_the_embedded_target() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = r#"
- name: GpuSmall
  schedulerConfigPath: ../../config/gpu-cluster.yaml
  workloadTemplate:
  - opcode: createNodes
    count: 12
    nodeTemplatePath: templates/gpu/node-gpu.yaml
  - opcode: createGpuJobs
    namespace: gpu-jobs
    jobs: 60
    jobsPerWave: 3
    seed: 3
    gpuMix: [{gpus: 1, weight: 0.6}, {gpus: 2, weight: 0.15}, {gpus: 4, weight: 0.15}, {gpus: 8, weight: 0.1}]
    gangs: {fraction: 0.1, members: [2], gpusPerMember: [8]}
    meanLifetimeWaves: 10
    podTemplatePath: templates/gpu/pod-gpu.yaml
    podGroupTemplatePath: templates/gpu/podgroup.yaml
    collectMetrics: true
  workloads:
  - name: 12Nodes
"#;
    let config = crate::parse_str(text, "test.yaml", root.join("benches/config")).unwrap();
    let opts = crate::RunOptions {
        filter: None,
        labels: crate::labels::LabelFilter::parse(""),
        topic: "t".into(),
        embedded: Default::default(),
    };
    let report = crate::run(&config, &opts).unwrap();
    let r = &report.results[0];
    assert!(r.error.is_none(), "{:?}", r.error);
    let item = |metric: &str| {
        r.items
            .iter()
            .find(|i| i.labels["Metric"] == metric)
            .unwrap_or_else(|| panic!("no {metric} in {:?}", r.items))
    };
    assert_eq!(item("SchedulingThroughput").labels["Name"], "GpuSmall/12Nodes/gpu-jobs");
    let jobs = item("GpuJobs");
    assert_eq!(jobs.data["Accepted"] + jobs.data["Rejected"], 60.0);
    assert_eq!(jobs.data["StalledWaves"], 0.0);
    let free = item("GpuFullyFreeNodes");
    assert!(free.data["Min"] <= free.data["Average"] && free.data["Average"] <= 12.0);
    let first = item("GpuFirstFullNodeFailure");
    assert!(first.data["Percent"] > 0.0 && first.data["Percent"] <= 100.0);
    item("GpuStrandedAtSaturation");
    let unallocated = item("GpuUnallocatedAtSaturation").data["Average"];
    assert!((0.0..=96.0).contains(&unallocated), "{unallocated}");
    // Convoy places a gang whole or not at all.
    assert_eq!(jobs.data["PartialGangs"], 0.0);
}

/// The same kind of stream with the GPUs as DRA devices, on the embedded
/// target with Convoy's GPU profile: slices, class and templates made,
/// every job's claim allocated, the metrics counted from devices.
#[test]
fn small_dra_stream_on_the_embedded_target() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = r#"
- name: GpuSmallDra
  schedulerConfigPath: ../../config/gpu-cluster.yaml
  workloadTemplate:
  - opcode: createNodes
    count: 12
    nodeTemplatePath: templates/gpu/node-gpu-dra.yaml
  - opcode: createGpuJobs
    namespace: gpu-jobs
    jobs: 60
    jobsPerWave: 3
    seed: 3
    gpusAs: draDevices
    gpuMix: [{gpus: 1, weight: 0.6}, {gpus: 2, weight: 0.15}, {gpus: 4, weight: 0.15}, {gpus: 8, weight: 0.1}]
    gangs: {fraction: 0.1, members: [2], gpusPerMember: [8]}
    meanLifetimeWaves: 10
    podTemplatePath: templates/gpu/pod-gpu-dra.yaml
    podGroupTemplatePath: templates/gpu/podgroup.yaml
    collectMetrics: true
  workloads:
  - name: 12Nodes
"#;
    let config = crate::parse_str(text, "test.yaml", root.join("benches/config")).unwrap();
    let opts = crate::RunOptions {
        filter: None,
        labels: crate::labels::LabelFilter::parse(""),
        topic: "t".into(),
        embedded: Default::default(),
    };
    let report = crate::run(&config, &opts).unwrap();
    let r = &report.results[0];
    assert!(r.error.is_none(), "{:?}", r.error);
    let item = |metric: &str| {
        r.items
            .iter()
            .find(|i| i.labels["Metric"] == metric)
            .unwrap_or_else(|| panic!("no {metric} in {:?}", r.items))
    };
    let jobs = item("GpuJobs");
    assert_eq!(jobs.data["Accepted"] + jobs.data["Rejected"], 60.0);
    assert_eq!(jobs.data["StalledWaves"], 0.0);
    // Jobs were placed: devices were allocated through claims.
    assert!(jobs.data["Accepted"] >= 30.0, "{:?}", jobs.data);
    assert_eq!(jobs.data["PartialGangs"], 0.0);
    let free = item("GpuFullyFreeNodes");
    assert!(free.data["Min"] <= free.data["Average"] && free.data["Average"] <= 12.0);
    // 96 devices: a full-node job fails only once some are allocated.
    let first = item("GpuFirstFullNodeFailure");
    assert!(first.data["Percent"] > 0.0 && first.data["Percent"] <= 100.0);
    item("GpuStrandedAtSaturation");
    let allocated = item("GpuAllocatedAtSaturation").data["Average"];
    assert!(allocated > 0.0 && allocated <= 100.0, "{allocated}");
    let unallocated = item("GpuUnallocatedAtSaturation").data["Average"];
    assert!((0.0..96.0).contains(&unallocated), "{unallocated}");
}

#[test]
fn dra_options_need_dra_devices() {
    use crate::config::Op;
    let ok = serde_json::json!({
        "opcode": "createGpuJobs", "jobs": 10, "jobsPerWave": 2, "meanLifetimeWaves": 3,
        "gpuMix": [{"gpus": 1, "weight": 1}], "podTemplatePath": "p.yaml",
        "gpusAs": "draDevices", "draDriver": "gpu.example.com",
    });
    Op::from_value(ok.clone()).unwrap().validate().unwrap();
    let mut bad = ok.clone();
    bad["gpusAs"] = "extendedResource".into();
    let e = Op::from_value(bad).and_then(|o| o.validate()).unwrap_err();
    assert!(e.contains("draDriver needs gpusAs: draDevices"), "{e}");
    let mut bad = ok.clone();
    bad["gpusAs"] = "dra".into();
    let e = Op::from_value(bad).unwrap_err();
    assert!(e.contains("dra"), "{e}");
}
