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
        ("gpuMix", serde_json::json!([]), "gpuMix is required"),
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
