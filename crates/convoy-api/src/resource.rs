//! Resource amounts: quantity parsing, per-resource sums, and a pod's
//! effective requests as upstream computes them (init containers, sidecars,
//! overhead, pod-level resources).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Resource name of CPU.
pub const CPU: &str = "cpu";
/// Resource name of memory.
pub const MEMORY: &str = "memory";
/// Resource name of ephemeral storage.
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// Resource name of the pod count.
pub const PODS: &str = "pods";

/// CPU assumed for a container without a CPU request, for scoring only
/// (upstream `DefaultMilliCPURequest`).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Memory assumed for a container without a memory request, for scoring only
/// (upstream `DefaultMemoryRequest`, 200 MiB).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// A quantity that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {value:?}: {why}")]
pub struct QuantityError {
    /// The text given.
    pub value: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// Why a negative amount is refused (upstream's wording).
const NEGATIVE: &str = "must be greater than or equal to 0";

/// Parses a Kubernetes quantity ("500m", "1.5", "32Gi", "1e3") into
/// thousandths of a unit, rounding up as upstream's `MilliValue` does.
pub fn parse_milli(s: &str) -> Result<i64, QuantityError> {
    let err = |why| QuantityError { value: s.to_string(), why };
    let t = s.trim();
    if t.is_empty() {
        return Err(err("empty"));
    }
    let (neg, t) = match t.as_bytes()[0] {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let num_end = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, suffix) = t.split_at(num_end);
    if num.is_empty() || num == "." || num.matches('.').count() > 1 {
        return Err(err("expected a number"));
    }
    // Multiplier as (numerator, power of ten) applied to thousandths.
    let (mul, exp10): (i128, i32) = match suffix {
        "" => (1, 0),
        "n" => (1, -9),
        "u" => (1, -6),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        s if s.starts_with(['e', 'E']) => {
            let e: i32 = s[1..].parse().map_err(|_| err("bad exponent"))?;
            if !(-30..=30).contains(&e) {
                return Err(err("exponent out of range"));
            }
            (1, e)
        }
        _ => return Err(err("unknown suffix")),
    };
    let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
    if int_part.len() + frac_part.len() > 30 {
        return Err(err("too many digits"));
    }
    // At most 30 digits: below i128::MAX (1.7e38), no allocation.
    let mantissa: i128 =
        int_part.bytes().chain(frac_part.bytes()).fold(0, |m, d| m * 10 + i128::from(d - b'0'));
    // value = mantissa * 10^(exp10 - frac_len) * mul; in thousandths: * 10^3.
    let pow = exp10 - frac_part.len() as i32 + 3;
    let mut v = mantissa.checked_mul(mul).ok_or_else(|| err("too large"))?;
    if pow >= 0 {
        for _ in 0..pow {
            v = v.checked_mul(10).ok_or_else(|| err("too large"))?;
        }
    } else {
        let mut div: i128 = 1;
        for _ in 0..(-pow) {
            div = div.saturating_mul(10);
        }
        // Round up; `v + div - 1` could overflow when `div` saturated.
        v = v / div + i128::from(v % div != 0);
    }
    if v > i64::MAX as i128 {
        return Err(err("too large"));
    }
    Ok(if neg { -(v as i64) } else { v as i64 })
}

/// Parses a quantity into whole units, rounding up (upstream `Value`).
pub fn parse_value(s: &str) -> Result<i64, QuantityError> {
    let m = parse_milli(s)?;
    // Rounds towards +infinity without `m + 999`, which overflows near `i64::MAX`.
    Ok(m / 1000 + i64::from(m % 1000 > 0))
}

/// Amounts of every resource a node offers or a pod requests: CPU in
/// millicores, memory and ephemeral storage in bytes, the pod count, and
/// every extended ("scalar") resource such as `nvidia.com/gpu` in units.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resource {
    /// CPU in millicores.
    pub milli_cpu: i64,
    /// Memory in bytes.
    pub memory: i64,
    /// Ephemeral storage in bytes.
    pub ephemeral_storage: i64,
    /// Number of pods (allocatable) or pods placed (requested).
    pub allowed_pods: i64,
    /// Extended resources (`nvidia.com/gpu`, hugepages, ...), in units.
    pub scalar: BTreeMap<Arc<str>, i64>,
}

impl Resource {
    /// The amount of a resource by name (0 when absent).
    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.milli_cpu,
            MEMORY => self.memory,
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            PODS => self.allowed_pods,
            other => self.scalar.get(other).copied().unwrap_or(0),
        }
    }

    /// Sets a resource by name.
    pub fn set(&mut self, name: &str, v: i64) {
        match name {
            CPU => self.milli_cpu = v,
            MEMORY => self.memory = v,
            EPHEMERAL_STORAGE => self.ephemeral_storage = v,
            PODS => self.allowed_pods = v,
            other => {
                self.scalar.insert(Arc::from(other), v);
            }
        }
    }

    /// Adds `other` to `self`, resource by resource.
    pub fn add(&mut self, other: &Resource) {
        self.milli_cpu += other.milli_cpu;
        self.memory += other.memory;
        self.ephemeral_storage += other.ephemeral_storage;
        self.allowed_pods += other.allowed_pods;
        for (k, v) in &other.scalar {
            *self.scalar.entry(k.clone()).or_insert(0) += v;
        }
    }

    /// Subtracts `other` from `self`, resource by resource.
    pub fn sub(&mut self, other: &Resource) {
        self.milli_cpu -= other.milli_cpu;
        self.memory -= other.memory;
        self.ephemeral_storage -= other.ephemeral_storage;
        self.allowed_pods -= other.allowed_pods;
        for (k, v) in &other.scalar {
            *self.scalar.entry(k.clone()).or_insert(0) -= v;
        }
    }

    /// Raises each resource of `self` to at least the one in `other`.
    pub fn max_with(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        self.allowed_pods = self.allowed_pods.max(other.allowed_pods);
        for (k, v) in &other.scalar {
            let e = self.scalar.entry(k.clone()).or_insert(0);
            *e = (*e).max(*v);
        }
    }

    /// Iterates over the non-pod resources with a non-zero amount, by name.
    pub fn iter_named(&self) -> impl Iterator<Item = (&str, i64)> {
        [(CPU, self.milli_cpu), (MEMORY, self.memory), (EPHEMERAL_STORAGE, self.ephemeral_storage)]
            .into_iter()
            .chain(self.scalar.iter().map(|(k, v)| (&**k, *v)))
            .filter(|(_, v)| *v != 0)
    }

    /// Builds a resource list from a Kubernetes `ResourceList` map. A
    /// negative amount is an error, as the API server's validation
    /// (`ValidateNonnegativeQuantity`) makes it for every list the scheduler
    /// reads: requests, limits, overhead, node capacity and allocatable.
    pub fn from_list(list: &BTreeMap<String, Quantity>) -> Result<Self, (String, QuantityError)> {
        let mut r = Resource::default();
        for (name, q) in list {
            r.add_quantity(name, q).map_err(|e| (name.clone(), e))?;
        }
        Ok(r)
    }

    fn add_quantity(&mut self, name: &str, q: &Quantity) -> Result<(), QuantityError> {
        let v = if name == CPU { parse_milli(&q.0)? } else { parse_value(&q.0)? };
        if v < 0 {
            return Err(QuantityError { value: q.0.clone(), why: NEGATIVE });
        }
        match name {
            CPU => self.milli_cpu += v,
            MEMORY => self.memory += v,
            EPHEMERAL_STORAGE => self.ephemeral_storage += v,
            PODS => self.allowed_pods += v,
            other => *self.scalar.entry(Arc::from(other)).or_insert(0) += v,
        }
        Ok(())
    }
}

/// A pod's effective requests, as upstream's `resource.PodRequests` computes
/// them, plus the "non-zero" CPU and memory used for scoring (kube-scheduler
/// v1.37.2 with its default feature gates: `PodLevelResources` on).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodRequests {
    /// What the pod takes from a node (`allowed_pods` is 1).
    pub requests: Resource,
    /// CPU the pod adds to a node's `non_zero_requested` (upstream
    /// `PodInfo.CalculateResource().Non0CPU`, `framework/types.go`): each
    /// container that omits a CPU request counts 100m, unless the pod has
    /// pod-level requests and names CPU somewhere (a container, the pod
    /// level or the overhead).
    pub non_zero_milli_cpu: i64,
    /// Memory the pod adds to a node's `non_zero_requested` (`Non0Mem`):
    /// 200Mi for each container that omits a memory request, with the same
    /// pod-level exception as CPU.
    pub non_zero_memory: i64,
}

/// Upstream `NonMissingContainerRequests`: what a container whose request
/// list omits CPU or memory counts for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Defaults {
    milli_cpu: Option<i64>,
    memory: Option<i64>,
}

impl Defaults {
    const NONE: Self = Self { milli_cpu: None, memory: None };
    const BOTH: Self =
        Self { milli_cpu: Some(DEFAULT_MILLI_CPU_REQUEST), memory: Some(DEFAULT_MEMORY_REQUEST) };
}

fn request_list(c: &Container) -> Option<&BTreeMap<String, Quantity>> {
    c.resources.as_ref().and_then(|r| r.requests.as_ref())
}

/// A container's requests, completed by `defaults` for CPU and memory when
/// its list omits them (upstream `applyNonMissing`: a request written as
/// `0` stays 0).
fn container_requests(
    c: &Container,
    defaults: Defaults,
) -> Result<Resource, (String, QuantityError)> {
    let list = request_list(c);
    let mut r = match list {
        Some(list) => Resource::from_list(list)?,
        None => Resource::default(),
    };
    let names = |name: &str| list.is_some_and(|l| l.contains_key(name));
    if let Some(cpu) = defaults.milli_cpu.filter(|_| !names(CPU)) {
        r.milli_cpu += cpu;
    }
    if let Some(memory) = defaults.memory.filter(|_| !names(MEMORY)) {
        r.memory += memory;
    }
    Ok(r)
}

fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Upstream `IsSupportedPodLevelResource`: the resources pod-level requests
/// can set (cpu, memory, hugepages-*).
pub fn is_supported_pod_level_resource(name: &str) -> bool {
    name == CPU || name == MEMORY || name.starts_with("hugepages-")
}

/// What a pod's spec requests besides its containers: the supported
/// pod-level requests (empty unless upstream's `IsPodLevelRequestsSet`) and
/// the overhead.
struct PodLevel {
    requests: Vec<(String, i64)>,
    overhead: Option<Resource>,
}

/// The summed requests of one way of counting the containers, and whether
/// the sum names CPU and memory (upstream tests the key, not the value).
struct Aggregate {
    requests: Resource,
    names_cpu: bool,
    names_memory: bool,
}

/// Upstream `PodRequests` (`component-helpers/resource/helpers.go`,
/// v0.37.2, spec requests): app containers plus sidecars (restartable init
/// containers), raised to the largest init-container phase, each
/// container's list completed by `defaults`; supported pod-level requests
/// replace the sum; plus the overhead.
fn aggregate(spec: &PodSpec, defaults: Defaults, pod: &PodLevel) -> Result<Aggregate, String> {
    // The path is written out only for an error (this runs for every pod).
    let field = |kind: &'static str, i: usize| {
        move |(name, e): (String, QuantityError)| {
            format!("spec.{kind}[{i}].resources.requests[{name}]: {e}")
        }
    };
    let names = |c: &Container, name: &str| request_list(c).is_some_and(|l| l.contains_key(name));
    let (mut names_cpu, mut names_memory) = (false, false);
    let mut reqs = Resource::default();
    for (i, c) in spec.containers.iter().enumerate() {
        let r = container_requests(c, defaults).map_err(field("containers", i))?;
        names_cpu |= names(c, CPU);
        names_memory |= names(c, MEMORY);
        reqs.add(&r);
    }
    let mut sidecars = Resource::default();
    let mut init_max = Resource::default();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let r = container_requests(c, defaults).map_err(field("initContainers", i))?;
        names_cpu |= names(c, CPU);
        names_memory |= names(c, MEMORY);
        let phase = if is_sidecar(c) {
            reqs.add(&r);
            sidecars.add(&r);
            sidecars.clone()
        } else {
            let mut p = r;
            p.add(&sidecars);
            p
        };
        init_max.max_with(&phase);
    }
    reqs.max_with(&init_max);
    for (name, v) in &pod.requests {
        reqs.set(name, *v);
        names_cpu |= name == CPU;
        names_memory |= name == MEMORY;
    }
    if let Some(o) = &pod.overhead {
        reqs.add(o);
        names_cpu |= spec.overhead.as_ref().is_some_and(|l| l.contains_key(CPU));
        names_memory |= spec.overhead.as_ref().is_some_and(|l| l.contains_key(MEMORY));
    }
    Ok(Aggregate { requests: reqs, names_cpu, names_memory })
}

/// Checks every resource list of a pod's spec the API server validates:
/// each container's and init container's requests and limits, the
/// pod-level requests and limits and the overhead. Each amount must parse
/// and be non-negative; the error names the first bad one
/// (`spec.initContainers[1].resources.limits[memory]: invalid quantity
/// "-1Gi": must be greater than or equal to 0`). The limits are not
/// otherwise read: a pod is placed by its requests.
pub fn check_quantities(spec: &PodSpec) -> Result<(), String> {
    // The field's path is only written out for an error: this runs for
    // every pod the scheduler reads.
    let check = |path: &dyn Fn() -> String, list: Option<&BTreeMap<String, Quantity>>| {
        list.map(Resource::from_list)
            .transpose()
            .map(drop)
            .map_err(|(name, e)| format!("{}[{name}]: {e}", path()))
    };
    let lists = |path: &dyn Fn() -> String,
                 r: Option<&k8s_openapi::api::core::v1::ResourceRequirements>| {
        check(&|| format!("{}.resources.requests", path()), r.and_then(|r| r.requests.as_ref()))?;
        check(&|| format!("{}.resources.limits", path()), r.and_then(|r| r.limits.as_ref()))
    };
    for (i, c) in spec.containers.iter().enumerate() {
        lists(&|| format!("spec.containers[{i}]"), c.resources.as_ref())?;
    }
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        lists(&|| format!("spec.initContainers[{i}]"), c.resources.as_ref())?;
    }
    lists(&|| "spec".to_string(), spec.resources.as_ref())?;
    check(&|| "spec.overhead".to_string(), spec.overhead.as_ref())
}

/// Computes a pod's requests as kube-scheduler v1.37.2 does (upstream
/// `PodInfo.CalculateResource`, `framework/types.go`): see [`PodRequests`]'s
/// fields. Status resources of in-place resized pods
/// (`InPlacePodVerticalScaling`) are not read: requests come from the spec.
///
/// Errors name the field (`spec.containers[0].resources.requests[cpu]`):
/// every list is checked first by [`check_quantities`].
pub fn pod_requests(spec: &PodSpec) -> Result<PodRequests, String> {
    check_quantities(spec)?;
    let requests = match spec.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        Some(list) if list.keys().any(|k| is_supported_pod_level_resource(k)) => {
            let p = Resource::from_list(list)
                .map_err(|(name, e)| format!("spec.resources.requests[{name}]: {e}"))?;
            list.keys()
                .filter(|k| is_supported_pod_level_resource(k))
                .map(|k| (k.clone(), p.get(k)))
                .collect()
        }
        _ => Vec::new(),
    };
    let overhead = spec
        .overhead
        .as_ref()
        .map(Resource::from_list)
        .transpose()
        .map_err(|(name, e)| format!("spec.overhead[{name}]: {e}"))?;
    let pod = PodLevel { requests, overhead };
    let plain = aggregate(spec, Defaults::NONE, &pod)?;
    // Upstream `getNonMissingContainerRequests`: with pod-level requests,
    // defaults only for a resource the pod names nowhere.
    let node_defaults = if pod.requests.is_empty() {
        Defaults::BOTH
    } else {
        Defaults {
            milli_cpu: (!plain.names_cpu).then_some(DEFAULT_MILLI_CPU_REQUEST),
            memory: (!plain.names_memory).then_some(DEFAULT_MEMORY_REQUEST),
        }
    };
    let non_zero = if node_defaults == Defaults::NONE {
        (plain.requests.milli_cpu, plain.requests.memory)
    } else {
        let a = aggregate(spec, node_defaults, &pod)?;
        (a.requests.milli_cpu, a.requests.memory)
    };
    let mut requests = plain.requests;
    requests.allowed_pods = 1;
    Ok(PodRequests { requests, non_zero_milli_cpu: non_zero.0, non_zero_memory: non_zero.1 })
}

/// What NodeResourcesFit's scoring strategies count for the pod being
/// scheduled, as v1.37.2 (`resourceAllocationScorer.calculatePodResourceRequest`
/// for the scorer `NewFit` builds): the containers' requests, 100m CPU and
/// 200Mi memory for each container whose list omits them, plus the
/// overhead, and **no pod-level requests**: `NewFit` never sets its scorer's
/// `enablePodLevelResources`, so the scorer skips them even though the
/// `PodLevelResources` gate is on (the pods already on a node do count
/// them, through [`PodRequests::non_zero_milli_cpu`]; BalancedAllocation's
/// scorer counts them too). Measured against kube-scheduler v1.37.2: a pod
/// asking 750m/5376Mi in containers and 3300m/12416Mi at pod level scores
/// 86 on an empty 8-CPU/32Gi node (the containers' amounts), not 60.
///
/// The spec was checked by [`pod_requests`]; an unparsable quantity counts
/// as 0 here.
pub fn fit_scoring_requests(spec: &PodSpec) -> Resource {
    let overhead = spec.overhead.as_ref().and_then(|o| Resource::from_list(o).ok());
    let pod = PodLevel { requests: Vec::new(), overhead };
    aggregate(spec, Defaults::BOTH, &pod).map(|a| a.requests).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        let cases = [
            ("100m", Ok(100)),
            ("1", Ok(1000)),
            ("1.5", Ok(1500)),
            ("0.1", Ok(100)),
            ("2k", Ok(2_000_000)),
            ("1Ki", Ok(1_024_000)),
            ("1e3", Ok(1_000_000)),
            ("1n", Ok(1)), // rounded up to a thousandth
            ("-1", Ok(-1000)),
            ("", Err(())),
            ("1x", Err(())),
            ("abc", Err(())),
            ("1.2.3", Err(())),
        ];
        for (input, want) in cases {
            assert_eq!(parse_milli(input).map_err(|_| ()), want, "{input:?}");
        }
        assert_eq!(parse_value("32Gi").unwrap(), 32 << 30);
        assert_eq!(parse_value("500Mi").unwrap(), 500 << 20);
        assert_eq!(parse_value("100m").unwrap(), 1);
    }

    /// Found by fuzzing (fuzz/corpus/quantity/overflow-*): rounding up
    /// overflowed (a panic with overflow checks, a wrong amount without).
    #[test]
    fn rounding_up_does_not_overflow() {
        assert_eq!(parse_value("9223372036854775807m"), Ok(9_223_372_036_854_776));
        assert_eq!(parse_value("-9223372036854775807m"), Ok(-9_223_372_036_854_775));
        // 2 × 10^-59: the divisor for thousandths saturates.
        assert_eq!(parse_milli(".00000000000000000000000000002e-30"), Ok(1));
        assert_eq!(parse_milli("-.00000000000000000000000000002e-30"), Ok(-1));
        assert_eq!(parse_milli(".00000000000000000000000000000e-30"), Ok(0));
    }

    fn spec(json: serde_json::Value) -> PodSpec {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn requests_follow_upstream() {
        // Two app containers, one init container larger than both, a sidecar, overhead.
        let s = spec(serde_json::json!({
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "200m", "nvidia.com/gpu": "2"}}}
            ],
            "initContainers": [
                {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}},
                {"name": "init", "resources": {"requests": {"cpu": "1", "memory": "10Mi"}}}
            ],
            "overhead": {"cpu": "10m"}
        }));
        let r = pod_requests(&s).unwrap();
        // app + sidecar = 350m; init phase = 1000m + 50m sidecar = 1050m; + 10m overhead.
        assert_eq!(r.requests.milli_cpu, 1060);
        assert_eq!(r.requests.memory, 100 << 20);
        assert_eq!(r.requests.get("nvidia.com/gpu"), 2);
        assert_eq!(r.requests.allowed_pods, 1);
    }

    #[test]
    fn pod_level_requests_replace_supported_resources_only() {
        let s = spec(serde_json::json!({
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "1Gi",
                                                         "ephemeral-storage": "1Gi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "100m"}}}
            ],
            "resources": {"requests": {"cpu": "1", "hugepages-2Mi": "4Mi",
                                       "ephemeral-storage": "5Gi"}},
            "overhead": {"cpu": "10m"}
        }));
        let r = pod_requests(&s).unwrap();
        assert_eq!(r.requests.milli_cpu, 1010, "pod-level cpu, plus overhead");
        assert_eq!(r.requests.memory, 1 << 30, "not set at pod level: the containers' sum");
        assert_eq!(r.requests.get("hugepages-2Mi"), 4 << 20);
        assert_eq!(r.requests.ephemeral_storage, 1 << 30, "not a pod-level resource: ignored");
        assert_eq!(r.non_zero_milli_cpu, 1010);
    }

    #[test]
    fn non_zero_defaults_for_scoring() {
        let s = spec(serde_json::json!({"containers": [{"name": "a"}]}));
        let r = pod_requests(&s).unwrap();
        assert_eq!(r.requests.milli_cpu, 0);
        assert_eq!(r.non_zero_milli_cpu, DEFAULT_MILLI_CPU_REQUEST);
        assert_eq!(r.non_zero_memory, DEFAULT_MEMORY_REQUEST);
    }

    /// The API server refuses a negative amount in every list of the spec;
    /// Convoy refuses the pod and names the list and the resource.
    #[test]
    fn negative_amounts_name_the_field() {
        let neg = |list: &str| serde_json::json!({list: {"memory": "-1Gi"}});
        let cases = [
            (
                serde_json::json!({"containers": [{"name": "a"}, {"name": "b", "resources": neg("requests")}]}),
                "spec.containers[1].resources.requests[memory]",
            ),
            (
                serde_json::json!({"containers": [{"name": "a", "resources": neg("limits")}]}),
                "spec.containers[0].resources.limits[memory]",
            ),
            (
                serde_json::json!({"containers": [{"name": "a"}],
                                   "initContainers": [{"name": "i", "resources": neg("requests")}]}),
                "spec.initContainers[0].resources.requests[memory]",
            ),
            (
                serde_json::json!({"containers": [{"name": "a"}],
                                   "initContainers": [{"name": "i", "resources": neg("limits")}]}),
                "spec.initContainers[0].resources.limits[memory]",
            ),
            (
                serde_json::json!({"containers": [{"name": "a"}], "resources": neg("requests")}),
                "spec.resources.requests[memory]",
            ),
            (
                serde_json::json!({"containers": [{"name": "a"}], "resources": neg("limits")}),
                "spec.resources.limits[memory]",
            ),
            (
                // Not a pod-level resource, so not counted: still refused.
                serde_json::json!({"containers": [{"name": "a"}],
                                   "resources": {"requests": {"example.com/x": "-1"}}}),
                "spec.resources.requests[example.com/x]",
            ),
            (
                serde_json::json!({"containers": [{"name": "a"}], "overhead": {"cpu": "-10m"}}),
                "spec.overhead[cpu]",
            ),
        ];
        for (json, field) in cases {
            let err = pod_requests(&spec(json)).unwrap_err();
            assert!(err.starts_with(&format!("{field}: invalid quantity")), "{field}: {err}");
            assert!(err.ends_with("must be greater than or equal to 0"), "{err}");
        }
        let zero = spec(serde_json::json!({"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "0"}, "limits": {"cpu": "-0"}}}
        ]}));
        assert_eq!(pod_requests(&zero).unwrap().requests.milli_cpu, 0, "zero is allowed");
    }

    /// Upstream `TestPodInfoCalculateResources` (`framework/types_test.go`,
    /// v1.37.2), the cases without DRA claims: requests, Non0CPU, Non0Mem.
    #[test]
    fn calculate_resources_as_upstream() {
        let req = |cpu: &str, mem: &str| {
            let mut r = serde_json::Map::new();
            if !cpu.is_empty() {
                r.insert("cpu".into(), cpu.into());
            }
            if !mem.is_empty() {
                r.insert("memory".into(), mem.into());
            }
            serde_json::json!({"name": "c", "resources": {"requests": r}})
        };
        let sidecar = |cpu: &str, mem: &str| {
            let mut c = req(cpu, mem);
            c["restartPolicy"] = "Always".into();
            c
        };
        let (mi, m) = (1i64 << 20, 1i64);
        let cases = [
            (
                "requestless container",
                serde_json::json!({"containers": [{"name": "c"}]}),
                (0, 0, 100 * m, 200 * mi),
            ),
            (
                "1X container with requests",
                serde_json::json!({"containers": [req("500m", "500Mi")]}),
                (500, 500 * mi, 500, 500 * mi),
            ),
            (
                "2X container with requests",
                serde_json::json!({"containers": [req("500m", "500Mi"), req("700m", "800Mi")]}),
                (1200, 1300 * mi, 1200, 1300 * mi),
            ),
            (
                "1X container and 1X init container with pod-level requests",
                serde_json::json!({
                    "initContainers": [req("500m", "500Mi")],
                    "containers": [req("500m", "500Mi")],
                    "resources": {"requests": {"cpu": "1200m", "memory": "1200Mi"}}
                }),
                (1200, 1200 * mi, 1200, 1200 * mi),
            ),
            (
                "1X container and 1X sidecar container with pod-level requests",
                serde_json::json!({
                    "initContainers": [sidecar("500m", "500Mi")],
                    "containers": [req("500m", "500Mi")],
                    "resources": {"requests": {"cpu": "1200m", "memory": "1200Mi"}}
                }),
                (1200, 1200 * mi, 1200, 1200 * mi),
            ),
            (
                "1X container with pod-level memory requests",
                serde_json::json!({
                    "initContainers": [{"name": "i"}],
                    "containers": [{"name": "c"}],
                    "resources": {"requests": {"memory": "1200Mi"}}
                }),
                (0, 1200 * mi, 100, 1200 * mi),
            ),
            (
                "1X container with pod-level cpu requests",
                serde_json::json!({
                    "initContainers": [{"name": "i"}],
                    "containers": [{"name": "c"}],
                    "resources": {"requests": {"cpu": "500m"}}
                }),
                (500, 0, 500, 200 * mi),
            ),
        ];
        for (name, spec_json, (cpu, mem, nz_cpu, nz_mem)) in cases {
            let r = pod_requests(&spec(spec_json)).unwrap();
            assert_eq!(
                (r.requests.milli_cpu, r.requests.memory, r.non_zero_milli_cpu, r.non_zero_memory),
                (cpu, mem, nz_cpu, nz_mem),
                "{name}"
            );
        }
        // "1X container unsupported resources and pod-level supported
        // resources": ephemeral storage from the containers, CPU from the
        // pod level.
        let r = pod_requests(&spec(serde_json::json!({
            "initContainers": [{"name": "i", "resources": {"requests": {"ephemeral-storage": "500Mi"}}}],
            "containers": [{"name": "c", "resources": {"requests": {"ephemeral-storage": "800Mi"}}}],
            "resources": {"requests": {"cpu": "500m"}}
        })))
        .unwrap();
        assert_eq!(r.requests.milli_cpu, 500);
        assert_eq!(r.requests.ephemeral_storage, 800 * mi);
        assert_eq!((r.non_zero_milli_cpu, r.non_zero_memory), (500, 200 * mi));
    }

    #[test]
    fn non_zero_defaults_follow_the_keys_not_the_values() {
        // Upstream `applyNonMissing` adds the default only when the key is
        // absent: an explicit 0 stays 0.
        let r = pod_requests(&spec(serde_json::json!({"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "0", "memory": "0"}}},
            {"name": "b"}
        ]})))
        .unwrap();
        assert_eq!((r.non_zero_milli_cpu, r.non_zero_memory), (100, DEFAULT_MEMORY_REQUEST));
        let f = fit_scoring_requests(&spec(serde_json::json!({"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "0", "memory": "0"}}},
            {"name": "b"}
        ]})));
        assert_eq!((f.milli_cpu, f.memory), (100, DEFAULT_MEMORY_REQUEST));
    }

    #[test]
    fn pod_level_requests_only_for_supported_resources() {
        // Pod-level cpu; one container names memory: the node's non-zero sum
        // takes no memory default (the pod names memory). Ephemeral storage
        // at the pod level is not a supported pod-level resource: ignored.
        let s = spec(serde_json::json!({
            "containers": [
                {"name": "a", "resources": {"requests": {"memory": "100Mi"}}},
                {"name": "b"}
            ],
            "resources": {"requests": {"cpu": "2", "ephemeral-storage": "1Gi"}},
            "overhead": {"cpu": "10m"}
        }));
        let r = pod_requests(&s).unwrap();
        assert_eq!(r.requests.milli_cpu, 2010);
        assert_eq!(r.requests.memory, 100 << 20);
        assert_eq!(r.requests.ephemeral_storage, 0);
        assert_eq!((r.non_zero_milli_cpu, r.non_zero_memory), (2010, 100 << 20));
        // NodeResourcesFit's scorer ignores the pod level: 100m for b, the
        // overhead, 100Mi + 200Mi.
        let f = fit_scoring_requests(&s);
        assert_eq!((f.milli_cpu, f.memory), (210, (100 << 20) + (200 << 20)));
    }

    #[test]
    fn bad_quantity_names_the_field() {
        let s = spec(serde_json::json!({
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "lots"}}}]
        }));
        let e = pod_requests(&s).unwrap_err();
        assert!(
            e.starts_with("spec.containers[0].resources.requests[cpu]: invalid quantity"),
            "{e}"
        );
    }
}
