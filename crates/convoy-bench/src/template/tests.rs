use super::*;

fn env() -> Env {
    let mut e = Env::new();
    e.insert("Index".into(), Value::Int(7));
    e.insert("Count".into(), Value::Int(100));
    e.insert("podsPerGroup".into(), Value::Int(3));
    e.insert("zone".into(), Value::Str("moon".into()));
    e.insert("ratio".into(), Value::Float(0.5));
    e
}

#[test]
fn renders_fields_functions_and_pipelines() {
    let cases = [
        ("name: pod-{{.Index}}", "name: pod-7"),
        ("n: {{ .Count }}", "n: 100"),
        ("g: gang-{{DivideInt .Index .podsPerGroup}}", "g: gang-2"),
        ("r: rack-{{ Mod .Index 3 }}", "r: rack-1"),
        ("x: {{AddInt (MultiplyInt .Index 2) 1}}", "x: 15"),
        ("x: {{SubtractInt .Count .Index}}", "x: 93"),
        ("x: {{ .Index | AddInt 1 }}", "x: 8"),
        ("x: {{MultiplyFloat .ratio 3}}", "x: 1.5"),
        ("x: {{DivideFloat 1 4}}", "x: 0.25"),
        ("z: {{.zone}}-{{.Index}}", "z: moon-7"),
        ("a: 1\n{{- /* comment */ -}}\nb", "a: 1b"),
        ("s: {{\"lit\"}}", "s: lit"),
        ("no actions at all", "no actions at all"),
    ];
    for (text, want) in cases {
        assert_eq!(render(text, &env()).unwrap(), want, "{text}");
    }
}

#[test]
fn errors_name_the_problem() {
    let cases = [
        ("{{.Missing}}", "no field .Missing"),
        ("{{Frobnicate 1 2}}", "unknown function \"Frobnicate\""),
        ("{{DivideInt .Index 0}}", "division by zero"),
        ("{{AddInt .Index}}", "takes 2 arguments"),
        ("{{range $i, $e := .Index}}x{{end}}", "can't use $i, $e with a range over an integer"),
        ("{{with .Index}}x{{end}}", "\"with\" actions are not supported"),
        ("{{if .Index}}x", "missing {{end}}"),
        ("{{if}}x{{end}}", "missing condition"),
        ("x{{end}}", "{{end}} outside an {{if}}"),
        ("x{{else}}y", "{{else}} outside an {{if}}"),
        ("{{if .Index}}a{{else}}b{{else}}c{{end}}", "missing {{end}} after {{else}}"),
        ("{{if .Index}}a{{else with .x}}b{{end}}", "only {{else}} and {{else if ...}}"),
        ("{{if eq .Index \"7\"}}x{{end}}", "incompatible types for comparison"),
        ("{{if eq .Missing 1}}x{{end}}", "no field .Missing"),
        ("{{if lt .Index 1 2}}x{{end}}", "lt takes 2 arguments, got 3"),
        ("{{if eq .Index}}x{{end}}", "eq takes at least 2 arguments, got 1"),
        ("{{len .zone}}", "unknown function \"len\""),
        ("{{if .Index}}{{.Missing}}{{end}}", "no field .Missing"),
        ("{{AddInt .zone 1}}", "expected an integer"),
        ("{{.Index", "unclosed action"),
    ];
    for (text, want) in cases {
        let e = render(text, &env()).unwrap_err().to_string();
        assert!(e.contains(want), "{text}: {e}");
    }
}

#[test]
fn if_else_end_as_go() {
    let mut e = env();
    e.insert("empty".into(), Value::Str(String::new()));
    e.insert("mode".into(), Value::Str("single".into()));
    e.insert("zero".into(), Value::Int(0));
    e.insert("no".into(), Value::Bool(false));
    let cases = [
        // A field the data lacks is false (no error), as Go's missing map key.
        ("p: {{if .priority}}{{AddInt 0 .priority}}{{else}}1000{{end}}", "p: 1000"),
        ("p: {{if .Index}}{{AddInt 0 .Index}}{{else}}1000{{end}}", "p: 7"),
        ("{{if .empty}}a{{else}}b{{end}}", "b"),
        ("{{if .zero}}a{{else}}b{{end}}", "b"),
        ("{{if .no}}a{{end}}", ""),
        ("{{if .ratio}}a{{end}}", "a"),
        ("{{if not .priority}}a{{end}}", "a"),
        ("{{if and .Index .priority}}a{{else}}b{{end}}", "b"),
        ("{{if or .priority .Index}}a{{else}}b{{end}}", "a"),
        ("{{if eq .mode \"single\"}}single: {}{{else}}all: {}{{end}}", "single: {}"),
        ("{{if eq .mode \"all\" \"single\"}}x{{end}}", "x"),
        ("{{if ne .mode \"all\"}}x{{end}}", "x"),
        ("{{if lt .Index 8}}x{{end}}{{if ge .Index 8}}y{{end}}", "x"),
        ("{{if gt .ratio 0.25}}x{{end}}", "x"),
        ("{{if eq .Index 1}}a{{else if eq .Index 7}}b{{else}}c{{end}}", "b"),
        ("{{if eq .Index 1}}a{{else if eq .Index 2}}b{{else}}c{{end}}", "c"),
        ("{{if .zone}}{{if .empty}}x{{else}}{{.zone}}{{end}}{{end}}", "moon"),
        ("a\n{{- if .zone -}}\n  b\n{{- end}}\nc", "ab\nc"),
        // The branch not taken is not evaluated (its missing field is no error).
        ("{{if .priority}}{{.priority}}{{else}}none{{end}}", "none"),
    ];
    for (text, want) in cases {
        assert_eq!(render(text, &e).unwrap(), want, "{text}");
    }
    // Upstream's templates/podgroup.yaml (v1.37.2), its shape.
    let podgroup = "spec:\n  priority: {{if .priority}}{{AddInt 0 .priority}}{{else}}1000{{end}}\n\
                    {{if .mode}}\n  disruptionMode:\n    {{if eq .mode \"single\"}}single: {}\
                    {{else}}all: {}{{end}}\n{{end}}\n  x: 1\n";
    assert_eq!(
        render(podgroup, &e).unwrap(),
        "spec:\n  priority: 1000\n\n  disruptionMode:\n    single: {}\n\n  x: 1\n"
    );
    e.insert("mode".into(), Value::Str(String::new()));
    assert_eq!(render(podgroup, &e).unwrap(), "spec:\n  priority: 1000\n\n  x: 1\n");
}

#[test]
fn variables_range_and_dra_functions_as_go() {
    let mut e = env();
    e.insert(
        "sel".into(),
        Value::List(vec![Value::Map(
            [(
                "cel".into(),
                Value::Map([("expression".into(), Value::Str("a < b".into()))].into()),
            )]
            .into(),
        )]),
    );
    e.insert("none".into(), Value::Null);
    e.insert(
        "m".into(),
        Value::Map([("b".into(), Value::Int(2)), ("a".into(), Value::Int(1))].into()),
    );
    e.insert("s".into(), Value::Str("12".into()));
    let cases = [
        ("{{$n := or .numDevices 3}}{{$n}}", "3"),
        ("{{$n := or .Index 3}}{{$n}}", "7"),
        ("{{$n := (or .x 2) | Int}}{{range $n}}[{{.}}]{{end}}", "[0][1]"),
        ("{{range (.s | Int) }}{{end}}x", "x"),
        ("{{range 4}}{{Mod . 2}}{{end}}", "0101"),
        ("{{$r := 3}}{{range 2}}{{Mod . $r}}{{$r}}{{end}}", "0313"),
        ("{{range 0}}a{{else}}none{{end}}", "none"),
        ("{{range .sel}}{{.cel | JSON}}{{end}}", r#"{"expression":"a < b"}"#),
        ("{{$x := 1}}{{if .Index}}{{$x = 2}}{{$y := 5}}{{$y}}{{end}}{{$x}}", "52"),
        ("{{(or .sel nil) | JSON}}", r#"[{"cel":{"expression":"a < b"}}]"#),
        ("{{(or .selectors nil) | JSON}}", "null"),
        ("{{JSON .none}}", "null"),
        ("{{JSON .zone}} {{JSON .Index}} {{JSON .ratio}}", r#""moon" 7 0.5"#),
        ("{{Int .ratio}} {{Int .s}} {{Int 3}}", "0 12 3"),
        ("{{if .none}}a{{else}}b{{end}}", "b"),
        ("{{if .sel}}a{{end}}", "a"),
        ("{{range $d := 3}}{{$d}}{{.}}{{end}}", "001122"),
        ("{{range $i, $e := .sel}}{{$i}}{{JSON $e}}{{end}}", r#"0{"cel":{"expression":"a < b"}}"#),
        ("{{range $i, $e := .m}}{{$i}}={{$e}};{{end}}", "a=1;b=2;"),
    ];
    for (text, want) in cases {
        assert_eq!(render(text, &e).unwrap(), want, "{text}");
    }
    let errors = [
        ("{{$y}}", "undefined variable $y"),
        ("{{$y = 1}}", "undefined variable $y"),
        ("{{if .Index}}{{$y := 1}}{{end}}{{$y}}", "undefined variable $y"),
        ("{{range 2}}{{.Index}}{{end}}", "can't evaluate field Index in an integer"),
        ("{{.}}", "the whole data"),
        ("{{$}}", "$ (the root data) is not supported"),
        ("{{range .zone}}x{{end}}", "range over a string is not supported"),
        ("{{range 2}}x", "missing {{end}}"),
        ("{{range 2}}x{{else if .x}}y{{end}}", "{{else if}} in a {{range}}"),
        ("{{range $a, $b, $c := .sel}}x{{end}}", "invalid range variables"),
        ("{{range 1}}{{$e := 1}}{{end}}{{$e}}", "undefined variable $e"),
        ("{{.sel}}", "printing a list is not supported"),
        ("{{nil}}", "printing nil is not supported"),
        ("{{Int .zone}}", "cannot convert \"moon\""),
        ("{{JSON 1 2}}", "JSON takes 1 argument"),
        ("{{JSON .missing}}", "no field .missing"),
        ("{{break}}", "\"break\" actions are not supported"),
    ];
    for (text, want) in errors {
        let err = render(text, &e).unwrap_err().to_string();
        assert!(err.contains(want), "{text}: {err}");
    }
}

/// Renders one of upstream's DRA templates (v1.37.2, the verbatim copies
/// in `tests/fixtures/upstream/dra/templates/`) and decodes it as `T`.
fn dra<T: serde::de::DeserializeOwned>(text: &str, params: &[(&str, Value)]) -> T {
    let mut e = Env::new();
    e.insert("Index".into(), Value::Int(3));
    e.insert("Count".into(), Value::Int(5));
    for (k, v) in params {
        e.insert(k.to_string(), v.clone());
    }
    let out = render(text, &e).unwrap_or_else(|err| panic!("{params:?}: {err}"));
    let v: serde_json::Value =
        serde_saphyr::from_str(&out).unwrap_or_else(|err| panic!("{out}: {err}"));
    serde_json::from_value(v).unwrap_or_else(|err| panic!("{out}: {err}"))
}

#[test]
fn upstreams_dra_templates_render_into_their_types() {
    use k8s_openapi::api::resource::v1::{
        DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
    };
    const DIR: &str = "tests/fixtures/upstream/dra/templates";
    let read = |f: &str| {
        std::fs::read_to_string(format!("{}/{DIR}/{f}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    };
    // resourceslice-basic-devices.yaml: as PublishResourceSlices (no
    // params), SchedulingWithResourceClaimTemplate (numPCIRoots 2 by
    // default, 10 devices) and SchedulingWithResourceClaim (2 devices).
    let slice = read("resourceslice-basic-devices.yaml");
    for (params, devices) in [
        (vec![], 10),
        (vec![("numPCIRoots", Value::Int(2)), ("numDevices", Value::Int(10))], 10),
        (vec![("numDevices", Value::Int(2))], 2),
    ] {
        let s: ResourceSlice = dra(&slice, &params);
        assert_eq!(s.metadata.name.as_deref(), Some("resourceslice-3"));
        assert_eq!(s.spec.node_name.as_deref(), Some("scheduler-perf-dra-3"));
        assert_eq!(s.spec.pool.name, "resourceslice-3");
        let d = s.spec.devices.unwrap();
        assert_eq!(d.len(), devices);
        assert_eq!(d[1].name, "basic-device-1");
        let attrs = d[1].attributes.as_ref().unwrap();
        assert_eq!(attrs["resource.kubernetes.io/pciRoot"].string.as_deref(), Some("pci0000:01"));
        assert_eq!(attrs["driverVersion"].version.as_deref(), Some("1.2.3"));
        assert_eq!(d[1].capacity.as_ref().unwrap()["memory"].value.0, "24480Mi");
    }
    let c: DeviceClass = dra(&read("deviceclass.yaml"), &[]);
    assert_eq!(c.metadata.name.as_deref(), Some("test-class"));
    let c: ResourceClaim = dra(&read("resourceclaim.yaml"), &[]);
    assert_eq!(c.metadata.name.as_deref(), Some("test-claim-3"));
    assert_eq!(
        c.spec.unwrap().devices.unwrap().requests.unwrap()[0]
            .exactly
            .as_ref()
            .unwrap()
            .device_class_name,
        "test-class"
    );
    // resourceclaimtemplate.yaml with the params its workloads pass:
    // `numRequests: $numRequests|1`, `selectors: $selectors|`,
    // `constraints: $constraints|` (nil by default).
    let template = read("resourceclaimtemplate.yaml");
    let selectors = Value::List(vec![Value::Map(
        [(
            "cel".into(),
            Value::Map([("expression".into(), Value::Str("device.driver != \"\"".into()))].into()),
        )]
        .into(),
    )]);
    let constraints = Value::List(vec![Value::Map(
        [("matchAttribute".into(), Value::Str("resource.kubernetes.io/pciRoot".into()))].into(),
    )]);
    for (params, requests, with_selector, with_constraint) in [
        (
            vec![
                ("numRequests", Value::Int(1)),
                ("selectors", Value::Null),
                ("constraints", Value::Null),
            ],
            1,
            false,
            false,
        ),
        (
            vec![
                ("numRequests", Value::Int(1)),
                ("selectors", selectors),
                ("constraints", Value::Null),
            ],
            1,
            true,
            false,
        ),
        (
            vec![
                ("numRequests", Value::Int(5)),
                ("selectors", Value::Null),
                ("constraints", constraints),
            ],
            5,
            false,
            true,
        ),
        (vec![], 1, false, false),
    ] {
        let t: ResourceClaimTemplate = dra(&template, &params);
        assert_eq!(t.metadata.name.as_deref(), Some("test-claim-template"));
        let devices = t.spec.unwrap().spec.unwrap().devices.unwrap();
        let reqs = devices.requests.unwrap();
        assert_eq!(reqs.len(), requests, "{params:?}");
        assert_eq!(reqs[requests - 1].name, format!("req-{}", requests - 1));
        let exactly = reqs[0].exactly.as_ref().unwrap();
        assert_eq!(exactly.device_class_name, "test-class");
        assert_eq!(exactly.selectors.as_ref().is_some_and(|s| !s.is_empty()), with_selector);
        let c = devices.constraints.unwrap_or_default();
        assert_eq!(c.len(), usize::from(with_constraint), "{params:?}");
        if with_constraint {
            assert_eq!(c[0].match_attribute.as_deref(), Some("resource.kubernetes.io/pciRoot"));
        }
    }
}
