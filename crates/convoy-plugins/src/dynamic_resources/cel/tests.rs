//! Table-driven tests, many ported from upstream's `cel/compile_test.go`.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{Device, DeviceAttribute, DeviceCapacity};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use super::*;

fn int(i: i64) -> DeviceAttribute {
    DeviceAttribute { int: Some(i), ..Default::default() }
}
fn boolean(b: bool) -> DeviceAttribute {
    DeviceAttribute { bool: Some(b), ..Default::default() }
}
fn string(s: &str) -> DeviceAttribute {
    DeviceAttribute { string: Some(s.to_string()), ..Default::default() }
}
fn version(s: &str) -> DeviceAttribute {
    DeviceAttribute { version: Some(s.to_string()), ..Default::default() }
}
fn ints(v: &[i64]) -> DeviceAttribute {
    DeviceAttribute { ints: Some(v.to_vec()), ..Default::default() }
}
fn bools(v: &[bool]) -> DeviceAttribute {
    DeviceAttribute { bools: Some(v.to_vec()), ..Default::default() }
}
fn strings(v: &[&str]) -> DeviceAttribute {
    DeviceAttribute {
        strings: Some(v.iter().map(|s| s.to_string()).collect()),
        ..Default::default()
    }
}
fn versions(v: &[&str]) -> DeviceAttribute {
    DeviceAttribute {
        versions: Some(v.iter().map(|s| s.to_string()).collect()),
        ..Default::default()
    }
}

fn device(attributes: &[(&str, DeviceAttribute)], capacity: &[(&str, &str)]) -> Device {
    Device {
        name: "dev-0".to_string(),
        attributes: Some(
            attributes.iter().map(|(k, v)| (k.to_string(), v.clone())).collect::<BTreeMap<_, _>>(),
        ),
        capacity: Some(
            capacity
                .iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        DeviceCapacity { value: K8sQuantity(v.to_string()), ..Default::default() },
                    )
                })
                .collect(),
        ),
        ..Default::default()
    }
}

/// What a case expects.
#[derive(Debug)]
enum Want {
    Match(bool),
    /// A compile error containing this text.
    Compile(&'static str),
    /// An evaluation error containing this text.
    Eval(&'static str),
}
use Want::*;

struct Case {
    name: &'static str,
    expression: &'static str,
    driver: &'static str,
    attributes: Vec<(&'static str, DeviceAttribute)>,
    capacity: Vec<(&'static str, &'static str)>,
    want: Want,
}

fn case(name: &'static str, expression: &'static str, want: Want) -> Case {
    Case {
        name,
        expression,
        driver: "dra.example.com",
        attributes: Vec::new(),
        capacity: Vec::new(),
        want,
    }
}

impl Case {
    fn driver(mut self, driver: &'static str) -> Self {
        self.driver = driver;
        self
    }
    fn attr(mut self, name: &'static str, value: DeviceAttribute) -> Self {
        self.attributes.push((name, value));
        self
    }
    fn cap(mut self, name: &'static str, value: &'static str) -> Self {
        self.capacity.push((name, value));
        self
    }
}

fn run(cases: Vec<Case>) {
    for c in cases {
        let compiled = DeviceSelector::compile(c.expression);
        let selector = match (&c.want, compiled) {
            (Compile(text), Err(e)) => {
                assert!(e.contains(text), "{}: compile error {e:?} lacks {text:?}", c.name);
                continue;
            }
            (Compile(_), Ok(_)) => panic!("{}: compiled, wanted an error", c.name),
            (_, Err(e)) => panic!("{}: compile error {e}", c.name),
            (_, Ok(s)) => s,
        };
        assert_eq!(selector.expression(), c.expression);
        let dev = CelDevice::new(c.driver, &device(&c.attributes, &c.capacity));
        match (&c.want, selector.matches(&dev)) {
            (Match(want), Ok(got)) => assert_eq!(got, *want, "{}", c.name),
            (Eval(text), Err(e)) => {
                assert!(e.contains(text), "{}: eval error {e:?} lacks {text:?}", c.name)
            }
            (want, got) => panic!("{}: wanted {want:?}, got {got:?}", c.name),
        }
    }
}

#[test]
fn upstream_compile_test_cases() {
    run(vec![
        case("true", "true", Match(true)),
        case("false", "false", Match(false)),
        case("syntax-error", "?!", Compile("compilation failed")),
        case("int-result", "1", Eval("must evaluate to bool")),
        case(
            "unknown-domain-unknown-id",
            r#"device.attributes["no-such-domain"].noSuchAttr.isGreaterThan(quantity("0"))"#,
            Eval("no such key: noSuchAttr"),
        ),
        case(
            "unknown-domain-unknown-id-index",
            r#"device.attributes["no-such-domain"]["noSuchAttr"].isGreaterThan(quantity("0"))"#,
            Eval("no such key: noSuchAttr"),
        ),
        case("domain-not-in", r#""no-such-domain" in device.attributes"#, Match(false)),
        case("domain-in", r#""dra.example.com" in device.attributes"#, Match(true))
            .attr("dra.example.com/something", boolean(true)),
        case("empty-driver", r#"device.driver == """#, Match(true)).driver(""),
        case("driver", r#"device.driver == "dra.example.com""#, Match(true)),
        case("driver-mismatch", r#"device.driver == "x""#, Match(false)),
        case("unqualified-select", r#"device.attributes["dra.example.com"].name"#, Match(true))
            .attr("name", boolean(true)),
        case("unqualified-index", r#"device.attributes["dra.example.com"]["name"]"#, Match(true))
            .attr("name", boolean(true)),
        case("bind", r#"cel.bind(dra, device.attributes["dra.example.com"], dra.name)"#, Match(true))
            .attr("name", boolean(true)),
        case("other-domain", r#"device.attributes["other.example.com"].name"#, Match(true))
            .attr("other.example.com/name", boolean(true)),
        case("int", r#"device.attributes["dra.example.com"].name > 0"#, Match(true)).attr("name", int(1)),
        case("string", r#"device.attributes["dra.example.com"].name == "fish""#, Match(true))
            .attr("name", string("fish")),
        case("exists-on-int", r#"device.attributes["dra.example.com"].name.exists(x, x > 0)"#, Eval(""))
            .attr("name", int(1)),
        case("list-result", r#"device.attributes["dra.example.com"].names"#, Eval("must evaluate to bool"))
            .attr("names", strings(&["fish", "bird"])),
        case("bool-list-size", r#"device.attributes["dra.example.com"].names.size() == 2"#, Match(true))
            .attr("names", bools(&[true, false])),
        case("int-list-size", r#"device.attributes["dra.example.com"].names.size() == 2"#, Match(true))
            .attr("names", ints(&[1, 2])),
        case("string-list-size", r#"device.attributes["dra.example.com"].names.size() == 2"#, Match(true))
            .attr("names", strings(&["fish", "bird"])),
        case("version-list-size", r#"device.attributes["dra.example.com"].names.size() == 2"#, Match(true))
            .attr("names", versions(&["1.0.0", "2.0.0"])),
        case("int-list-exists", r#"device.attributes["dra.example.com"].names.exists(x, x > 0)"#, Match(true))
            .attr("names", ints(&[1, 2])),
        case("string-list-all", r#"device.attributes["dra.example.com"].names.all(x, x != "")"#, Match(true))
            .attr("names", strings(&["fish", "bird"])),
        case(
            "version-list-all",
            r#"device.attributes["dra.example.com"].names.all(x, x.isGreaterThan(semver("0.0.1")))"#,
            Match(true),
        )
        .attr("names", versions(&["1.0.0", "2.0.0"])),
        case("includes-scalar", r#"device.attributes["dra.example.com"].attr.includes("fish")"#, Match(true))
            .attr("attr", string("fish")),
        case("includes-bool", r#"device.attributes["dra.example.com"].name.includes(true)"#, Match(false))
            .attr("name", boolean(false)),
        case("includes-int-list", r#"device.attributes["dra.example.com"].name.includes(1)"#, Match(true))
            .attr("name", ints(&[1, 2])),
        case("includes-int-list-neg", r#"device.attributes["dra.example.com"].name.includes(3)"#, Match(false))
            .attr("name", ints(&[1, 2])),
        case("includes-string-list", r#"device.attributes["dra.example.com"].name.includes("cat")"#, Match(false))
            .attr("name", strings(&["fish", "bird"])),
        case(
            "includes-semver",
            r#"device.attributes["dra.example.com"].name.includes(semver("1.0.0"))"#,
            Match(true),
        )
        .attr("name", version("1.0.0")),
        case(
            "includes-semver-list",
            r#"device.attributes["dra.example.com"].name.includes(semver("3.0.0"))"#,
            Match(false),
        )
        .attr("name", versions(&["1.0.0", "2.0.0"])),
        case("in-list", r#"1 in device.attributes["dra.example.com"].names"#, Match(true))
            .attr("names", ints(&[1, 2, 3])),
        case("version", r#"device.attributes["dra.example.com"].name.isGreaterThan(semver("0.0.1"))"#, Match(true))
            .attr("name", version("1.0.0")),
        case(
            "version_v",
            r#"device.attributes["dra.example.com"].name.isGreaterThan(semver("v0.0.1", true)) && isSemver("v1.0.0", true)"#,
            Match(true),
        )
        .attr("name", version("1.0.0")),
        case(
            "exists-on-version",
            r#"device.attributes["dra.example.com"].name.exists(x, x.isGreaterThan(semver("0.0.1")))"#,
            Eval(""),
        )
        .attr("name", version("1.0.0")),
        case("quantity", r#"device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))"#, Match(true))
            .cap("name", "1Mi"),
        case(
            "check-positive",
            r#""name" in device.capacity["dra.example.com"] && device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))"#,
            Match(true),
        )
        .cap("name", "1Mi"),
        case(
            "check-negative",
            r#"!("name" in device.capacity["dra.example.com"]) || device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))"#,
            Match(true),
        ),
        case(
            "all",
            r#"device.capacity["dra.example.com"].quantity.isGreaterThan(quantity("1Ki")) &&
               device.attributes["dra.example.com"].bool &&
               device.attributes["dra.example.com"].int > 0 &&
               device.attributes["dra.example.com"].string == "fish" &&
               device.attributes["dra.example.com"].version.isGreaterThan(semver("0.0.1")) &&
               device.attributes["dra.example.com"].bool == true &&
               device.attributes["dra.example.com"].int == 42 &&
               device.attributes["dra.example.com"].string == "fish" &&
               device.attributes["dra.example.com"].version == semver("1.0.0")"#,
            Match(true),
        )
        .attr("bool", boolean(true))
        .attr("int", int(42))
        .attr("string", string("fish"))
        .attr("version", version("1.0.0"))
        .cap("quantity", "1Mi"),
        case(
            "many",
            r#"device.attributes["dra.example.com"].a && device.attributes["dra.example.com"].b && device.attributes["dra.example.com"].c"#,
            Match(true),
        )
        .attr("a", boolean(true))
        .attr("b", boolean(true))
        .attr("c", boolean(true)),
        case("attribute-domains", r#"device.attributes.exists_one(x, x == "dra.example.com")"#, Match(true))
            .attr("services", string("some_example_value")),
        case("attribute-ids", r#"device.attributes["dra.example.com"].exists_one(x, x == "services")"#, Match(true))
            .attr("services", string("some_example_value")),
        case(
            "split",
            r#"device.attributes["dra.example.com"].services.split("example").size() >= 2"#,
            Match(true),
        )
        .attr("services", string("some_example_value")),
        case("regexp", r#"device.attributes["dra.example.com"].services.matches("[^a]?sym")"#, Match(true))
            .attr("services", string("asymetric")),
        case("capacity-domains", r#"device.capacity.exists_one(x, x == "dra.example.com")"#, Match(true))
            .cap("memory", "1Mi"),
        case("capacity-ids", r#"device.capacity["dra.example.com"].exists_one(x, x == "memory")"#, Match(true))
            .cap("memory", "1Mi"),
        case("allow-multiple-allocations-default", "device.allowMultipleAllocations == false", Match(true)),
    ]);
}

#[test]
fn domains_ids_and_types() {
    run(vec![
        case("unknown-domain-in", r#""x" in device.attributes["unknown"]"#, Match(false)),
        case("unknown-domain-has", r#"has(device.attributes["d"].x)"#, Match(false)),
        case("unknown-domain-size", r#"size(device.attributes["unknown"]) == 0"#, Match(true)),
        case("has-present", r#"has(device.attributes["dra.example.com"].model)"#, Match(true))
            .attr("model", string("a")),
        case("has-absent", r#"has(device.attributes["dra.example.com"].other)"#, Match(false))
            .attr("model", string("a")),
        case(
            "missing-id",
            r#"device.attributes["dra.example.com"].other == "a""#,
            Eval("no such key: other"),
        )
        .attr("model", string("a")),
        case(
            "missing-id-index",
            r#"device.attributes["dra.example.com"]["other"] == "a""#,
            Eval("no such key: other"),
        )
        .attr("model", string("a")),
        case(
            "qualified-not-under-driver",
            r#""model" in device.attributes["dra.example.com"]"#,
            Match(false),
        )
        .attr("gpu.example.com/model", string("a")),
        case("qualified", r#"device.attributes["gpu.example.com"].model == "a""#, Match(true))
            .attr("gpu.example.com/model", string("a")),
        case(
            "qualified-index",
            r#"device.attributes["gpu.example.com"]["model"] == "a""#,
            Match(true),
        )
        .attr("gpu.example.com/model", string("a")),
        case(
            "unqualified-under-driver",
            r#"device.attributes["gpu.example.com"].model == "a""#,
            Match(true),
        )
        .driver("gpu.example.com")
        .attr("model", string("a")),
        case("unknown-device-field", "device.nope == 1", Eval("no such key: nope")),
        case(
            "device-equals-itself",
            "device == device && [device].exists(d, d == device)",
            Match(true),
        ),
        case("device-not-a-string", r#"device != "x""#, Match(true)),
        case("bool-attr", r#"device.attributes["dra.example.com"].b == true"#, Match(true))
            .attr("b", boolean(true)),
        case("int-attr-compare", r#"device.attributes["dra.example.com"].i >= 8"#, Match(false))
            .attr("i", int(7)),
        case(
            "string-result",
            r#"device.attributes["dra.example.com"].s"#,
            Eval("must evaluate to bool"),
        )
        .attr("s", string("x")),
        case(
            "map-result",
            r#"device.attributes["dra.example.com"]"#,
            Eval("must evaluate to bool"),
        ),
        case("semver-result", r#"semver("1.0.0")"#, Eval("must evaluate to bool")),
        case(
            "lower-ascii",
            r#"device.attributes["dra.example.com"].s.lowerAscii() == "abc""#,
            Match(true),
        )
        .attr("s", string("AbC")),
        case(
            "starts-ends-contains",
            r#"device.driver.startsWith("dra.") && device.driver.endsWith(".com") && device.driver.contains("example")"#,
            Match(true),
        ),
        case(
            "map-filter",
            r#"device.attributes["dra.example.com"].l.filter(x, x > 1).map(x, x * 2) == [4, 6]"#,
            Match(true),
        )
        .attr("l", ints(&[1, 2, 3])),
        case("bind-nested", r#"cel.bind(a, 1, cel.bind(b, a + 1, b == 2))"#, Match(true)),
        case("bad-version-attr", "true", Eval("parse semantic version")).attr("v", version("1.0")),
        case("bad-capacity", "true", Eval("capacity c")).cap("c", "12x"),
        case("empty-attr", "true", Eval("unsupported attribute value"))
            .attr("e", DeviceAttribute::default()),
        case("unclosed", "device.driver == (", Compile("compilation failed")),
        case("scheduler-perf-class", r#"device.driver == "test-driver.cdi.k8s.io""#, Match(true))
            .driver("test-driver.cdi.k8s.io"),
        case(
            "scheduler-perf-class-other",
            r#"device.driver == "test-driver.cdi.k8s.io""#,
            Match(false),
        ),
    ]);
}

#[test]
fn other_library_features() {
    let t = |e: &'static str| case(e, e, Match(true));
    run(vec![
        t("[3, 1, 2].sort() == [1, 2, 3] && [1, 1].distinct() == [1]"),
        // Two-variable comprehensions (upstream ext.TwoVarComprehensions) are
        // not supported by the crate.
        case("two-var", "{'a': 1}.all(k, v, v > 0)", Eval("Undeclared reference")),
        t("1 < 1.5"),
        t(r#"!device.attributes["d"].?x.hasValue()"#),
        case("undeclared", "nope == 1", Eval("Undeclared reference to 'nope'")),
        case("no-such-function", "device.driver.nope()", Eval("nope")),
    ]);
}

#[test]
fn gpu_example() {
    let expr = r#"device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA A100") &&
        device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0"#;
    run(vec![
        case("a100-80", expr, Match(true))
            .driver("gpu.nvidia.com")
            .attr("productName", string("NVIDIA A100-SXM4-80GB"))
            .cap("memory", "80Gi"),
        case("a100-40", expr, Match(true))
            .driver("gpu.nvidia.com")
            .attr("productName", string("NVIDIA A100-PCIE-40GB"))
            .cap("memory", "40Gi"),
        case("a100-small", expr, Match(false))
            .driver("gpu.nvidia.com")
            .attr("productName", string("NVIDIA A100 MIG"))
            .cap("memory", "20Gi"),
        case("h100", expr, Match(false))
            .driver("gpu.nvidia.com")
            .attr("gpu.nvidia.com/productName", string("NVIDIA H100"))
            .cap("gpu.nvidia.com/memory", "80Gi"),
        // Both sides fail; this crate reports the right-hand error (`memory`).
        case("other-driver", expr, Eval("no such key")).driver("other.com"),
    ]);
}

#[test]
fn semver_functions() {
    let t = |e: &'static str| case(e, e, Match(true));
    let f = |e: &'static str| case(e, e, Match(false));
    run(vec![
        t(r#"semver("1.2.3") == semver("1.2.3")"#),
        t(r#"semver("1.2.3+build.1") == semver("1.2.3+other")"#),
        f(r#"semver("1.2.3") == semver("1.2.4")"#),
        t(r#"semver("1.2.3").compareTo(semver("1.2.4")) == -1"#),
        t(r#"semver("1.10.0").compareTo(semver("1.9.0")) == 1"#),
        t(r#"semver("2.0.0").compareTo(semver("2.0.0")) == 0"#),
        t(r#"semver("1.0.0-alpha").isLessThan(semver("1.0.0"))"#),
        t(r#"semver("1.0.0-alpha").isLessThan(semver("1.0.0-alpha.1"))"#),
        t(r#"semver("1.0.0-alpha.1").isLessThan(semver("1.0.0-alpha.beta"))"#),
        t(r#"semver("1.0.0-beta.2").isLessThan(semver("1.0.0-beta.11"))"#),
        t(r#"semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))"#),
        t(r#"semver("1.0.0").isGreaterThan(semver("1.0.0-rc.1"))"#),
        f(r#"semver("1.0.0").isGreaterThan(semver("1.0.0"))"#),
        t(
            r#"semver("3.4.5").major() == 3 && semver("3.4.5").minor() == 4 && semver("3.4.5").patch() == 5"#,
        ),
        t(r#"isSemver("1.2.3-rc.1+b")"#),
        f(r#"isSemver("1.2")"#),
        f(r#"isSemver("01.2.3")"#),
        f(r#"isSemver("1.2.3-01")"#),
        f(r#"isSemver("v1.2.3")"#),
        t(r#"isSemver("v1.2", true)"#),
        t(r#"semver("v01.02", true) == semver("1.2.0")"#),
        f(r#"isSemver("1-rc", true)"#),
        case("bad-semver", r#"semver("1.2") == semver("1.2.0")"#, Eval("No Major.Minor.Patch")),
        case(
            "driver-version",
            r#"device.attributes["d"].driverVersion == semver("1.2.3")"#,
            Match(true),
        )
        .attr("d/driverVersion", version("1.2.3")),
    ]);
}

#[test]
fn quantity_functions() {
    let t = |e: &'static str| case(e, e, Match(true));
    let f = |e: &'static str| case(e, e, Match(false));
    run(vec![
        t(r#"quantity("1Ki") == quantity("1024")"#),
        t(r#"quantity("1k") == quantity("1000")"#),
        t(r#"quantity("1.5Gi") == quantity("1536Mi")"#),
        t(r#"quantity("500m") == quantity("0.5")"#),
        t(r#"quantity("1e3") == quantity("1k")"#),
        t(r#"quantity("1E-3") == quantity("1m")"#),
        f(r#"quantity("1Ki") == quantity("1k")"#),
        t(r#"quantity("40Gi").compareTo(quantity("42949672960")) == 0"#),
        t(r#"quantity("1Mi").compareTo(quantity("1M")) == 1"#),
        t(r#"quantity("999m").compareTo(quantity("1")) == -1"#),
        t(r#"quantity("2").isGreaterThan(quantity("1999m"))"#),
        t(r#"quantity("-1").isLessThan(quantity("0"))"#),
        t(r#"quantity("1Gi").asInteger() == 1073741824"#),
        case(
            "as-integer-fraction",
            r#"quantity("1500m").asInteger() == 1"#,
            Eval("cannot convert value to integer"),
        ),
        f(r#"quantity("1500m").isInteger()"#),
        t(r#"quantity("3").isInteger()"#),
        t(r#"quantity("1500m").asApproximateFloat() == 1.5"#),
        t(
            r#"quantity("-5").sign() == -1 && quantity("0").sign() == 0 && quantity("1n").sign() == 1"#,
        ),
        t(r#"quantity("1Gi").add(quantity("1Gi")) == quantity("2Gi")"#),
        t(r#"quantity("1").add(2) == quantity("3")"#),
        t(r#"quantity("1").sub(quantity("500m")) == quantity("0.5")"#),
        t(r#"quantity("10").sub(20).sign() == -1"#),
        t(r#"isQuantity("40Gi") && isQuantity("+1.5") && isQuantity(".5") && isQuantity("1e9")"#),
        f(r#"isQuantity("40GB")"#),
        f(r#"isQuantity("")"#),
        f(r#"isQuantity("Gi")"#),
        f(r#"isQuantity(" 1")"#),
        case(
            "bad-quantity",
            r#"quantity("1x") == quantity("1")"#,
            Eval("unable to parse quantity's suffix"),
        ),
    ]);
}

#[test]
fn quantity_parse_is_exact() {
    let nanos = |s: &str| Quantity::parse(s).unwrap().nanos;
    assert_eq!(nanos("1"), NANO);
    assert_eq!(nanos("1n"), 1);
    assert_eq!(nanos("1.5u"), 1500);
    assert_eq!(nanos("0.1n"), 1, "rounds up to a nano-unit");
    assert_eq!(nanos("-0.1n"), -1, "rounds away from zero");
    assert_eq!(nanos("1Ei"), (1i128 << 60) * NANO);
    assert_eq!(nanos("8E"), 8 * 10i128.pow(18) * NANO);
    assert_eq!(nanos("123456789012345678"), 123456789012345678 * NANO);
    assert!(Quantity::parse("1e100").is_err());
    assert!(Quantity::parse("1.2.3").is_err());
    assert!(Quantity::parse("-").is_err());
    assert_eq!(Quantity::parse("12Ei").unwrap().as_i64(), None, "beyond int64");
}

#[test]
fn selector_cache_is_bounded_and_reuses() {
    let cache = SelectorCache::default();
    let a = cache.get("device.driver == \"a\"").unwrap();
    let again = cache.get("device.driver == \"a\"").unwrap();
    assert!(Arc::ptr_eq(&a, &again));
    assert!(cache.get("?!").is_err());
    assert_eq!(cache.len(), 1, "errors are not cached");
    for i in 0..SELECTOR_CACHE_SIZE + 5 {
        let e = format!("device.driver == \"{i}\"");
        cache.get(&e).unwrap();
        // Keep `a` the most recently used.
        cache.get("device.driver == \"a\"").unwrap();
    }
    assert_eq!(cache.len(), SELECTOR_CACHE_SIZE);
    let still = cache.get("device.driver == \"a\"").unwrap();
    assert!(Arc::ptr_eq(&a, &still), "the recently used entry survived eviction");
}

#[test]
fn types_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<CelDevice>();
    check::<DeviceSelector>();
    check::<SelectorCache>();
}

#[test]
fn evaluates_from_many_threads() {
    let selector = Arc::new(DeviceSelector::compile(r#"device.attributes["d"].n > 1"#).unwrap());
    let dev = Arc::new(CelDevice::new("x", &device(&[("d/n", int(2))], &[])));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (s, d) = (Arc::clone(&selector), Arc::clone(&dev));
            std::thread::spawn(move || (0..100).all(|_| s.matches(&d) == Ok(true)))
        })
        .collect();
    for h in handles {
        assert!(h.join().unwrap());
    }
}

/// Upstream's runtime cost limit: work without bound (a long range, loops
/// in loops, a doubling string) stops with cel-go's error, even where an
/// operator would absorb the error, and the budget is per evaluation.
#[test]
fn evaluation_stops_at_the_cost_limit() {
    // The doubling case nests 24 binds: more stack than a debug build's
    // test thread has (a release build parses 95 levels, the parser's
    // limit, on 2 MiB).
    std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(cost_limit_cases)
        .unwrap()
        .join()
        .unwrap();
}

fn cost_limit_cases() {
    // 2^24 copies of a 10-byte string: far beyond the limit, and beyond
    // memory if nothing stopped it.
    let mut doubling = String::from(r#""0123456789""#);
    for i in 0..24 {
        doubling = format!("cel.bind(s{i}, {doubling}, s{i} + s{i})");
    }
    let doubling = format!("size({doubling}) > 0");
    let cases = [
        "lists.range(600000).all(x, x >= 0)",
        "lists.range(1000).all(x, lists.range(1000).all(y, x + y >= 0))",
        "lists.range(100000).map(x, lists.range(100)).size() > 0",
        "lists.range(600000).exists(x, x < 0) || true",
        doubling.as_str(),
    ];
    let dev = CelDevice::new("x", &device(&[], &[]));
    for expression in cases {
        let selector = DeviceSelector::compile(expression).unwrap();
        assert_eq!(
            selector.matches(&dev),
            Err("operation cancelled: actual cost limit exceeded".to_string()),
            "{expression}"
        );
    }
    // Under the limit: the same shapes evaluate, and each evaluation starts
    // with a full budget (about 750,000 units each: the range built, iterated
    // and compared, one unit per element each).
    let within = DeviceSelector::compile("lists.range(250000).all(x, x >= 0)").unwrap();
    for _ in 0..3 {
        assert_eq!(within.matches(&dev), Ok(true));
    }
    let nested =
        DeviceSelector::compile("lists.range(100).all(x, lists.range(100).exists(y, x == y))")
            .unwrap();
    assert_eq!(nested.matches(&dev), Ok(true));
}

/// Per-evaluation time, in release mode:
/// `cargo test --release -p convoy-plugins --lib dynamic_resources::cel -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure_evaluation_time() {
    let dev = CelDevice::new(
        "gpu.nvidia.com",
        &device(
            &[("productName", string("NVIDIA A100-SXM4-80GB")), ("index", int(3))],
            &[("memory", "80Gi")],
        ),
    );
    for expr in [
        r#"device.driver == "test-driver.cdi.k8s.io""#,
        r#"device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA A100") &&
           device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0"#,
    ] {
        let selector = DeviceSelector::compile(expr).unwrap();
        let n = 200_000;
        let start = std::time::Instant::now();
        for _ in 0..n {
            assert!(selector.matches(&dev).is_ok());
        }
        let per = start.elapsed() / n;
        eprintln!("{per:?} per evaluation of {expr}");
    }
}
