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
    let digits = format!("{int_part}{frac_part}");
    if digits.len() > 30 {
        return Err(err("too many digits"));
    }
    let mantissa: i128 =
        if digits.is_empty() { 0 } else { digits.parse().map_err(|_| err("bad digits"))? };
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
        v = (v + div - 1) / div; // round up
    }
    if v > i64::MAX as i128 {
        return Err(err("too large"));
    }
    Ok(if neg { -(v as i64) } else { v as i64 })
}

/// Parses a quantity into whole units, rounding up (upstream `Value`).
pub fn parse_value(s: &str) -> Result<i64, QuantityError> {
    let m = parse_milli(s)?;
    Ok(if m >= 0 { (m + 999) / 1000 } else { m / 1000 })
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

    /// Builds a resource list from a Kubernetes `ResourceList` map.
    pub fn from_list(list: &BTreeMap<String, Quantity>) -> Result<Self, (String, QuantityError)> {
        let mut r = Resource::default();
        for (name, q) in list {
            r.add_quantity(name, q).map_err(|e| (name.clone(), e))?;
        }
        Ok(r)
    }

    fn add_quantity(&mut self, name: &str, q: &Quantity) -> Result<(), QuantityError> {
        match name {
            CPU => self.milli_cpu += parse_milli(&q.0)?,
            MEMORY => self.memory += parse_value(&q.0)?,
            EPHEMERAL_STORAGE => self.ephemeral_storage += parse_value(&q.0)?,
            PODS => self.allowed_pods += parse_value(&q.0)?,
            other => {
                let v = parse_value(&q.0)?;
                *self.scalar.entry(Arc::from(other)).or_insert(0) += v;
            }
        }
        Ok(())
    }
}

/// A pod's effective requests, as upstream's `resource.PodRequests` computes
/// them, plus the "non-zero" CPU and memory used for scoring.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodRequests {
    /// What the pod takes from a node (`allowed_pods` is 1).
    pub requests: Resource,
    /// CPU for scoring: containers without a CPU request count 100m.
    pub non_zero_milli_cpu: i64,
    /// Memory for scoring: containers without a memory request count 200Mi.
    pub non_zero_memory: i64,
}

fn container_requests(c: &Container) -> Result<Resource, (String, QuantityError)> {
    match c.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        Some(list) => Resource::from_list(list),
        None => Ok(Resource::default()),
    }
}

/// Whether pod-level `spec.resources` may set this resource (upstream
/// `IsSupportedPodLevelResource`: cpu, memory, hugepages-*); the others are
/// ignored there.
pub fn is_supported_pod_level_resource(name: &str) -> bool {
    name == CPU || name == MEMORY || name.starts_with("hugepages-")
}

fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Computes a pod's requests: app containers plus sidecars (restartable init
/// containers), at least the largest init-container phase, plus the pod
/// overhead; pod-level `spec.resources.requests` replace the container sum
/// for the resources they name.
///
/// Errors name the field (`spec.containers[0].resources.requests[cpu]`).
pub fn pod_requests(spec: &PodSpec) -> Result<PodRequests, String> {
    let field = |path: String| {
        move |(name, e): (String, QuantityError)| format!("{path}.resources.requests[{name}]: {e}")
    };
    let mut reqs = Resource::default();
    let mut nz_cpu = 0;
    let mut nz_mem = 0;
    for (i, c) in spec.containers.iter().enumerate() {
        let r = container_requests(c).map_err(field(format!("spec.containers[{i}]")))?;
        nz_cpu += if r.milli_cpu == 0 { DEFAULT_MILLI_CPU_REQUEST } else { r.milli_cpu };
        nz_mem += if r.memory == 0 { DEFAULT_MEMORY_REQUEST } else { r.memory };
        reqs.add(&r);
    }
    let mut sidecars = Resource::default();
    let mut init_max = Resource::default();
    let (mut nz_init_cpu, mut nz_init_mem, mut nz_sidecar_cpu, mut nz_sidecar_mem) = (0, 0, 0, 0);
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let r = container_requests(c).map_err(field(format!("spec.initContainers[{i}]")))?;
        let c_cpu = if r.milli_cpu == 0 { DEFAULT_MILLI_CPU_REQUEST } else { r.milli_cpu };
        let c_mem = if r.memory == 0 { DEFAULT_MEMORY_REQUEST } else { r.memory };
        let phase = if is_sidecar(c) {
            reqs.add(&r);
            sidecars.add(&r);
            nz_cpu += c_cpu;
            nz_mem += c_mem;
            nz_sidecar_cpu += c_cpu;
            nz_sidecar_mem += c_mem;
            nz_init_cpu = nz_init_cpu.max(nz_sidecar_cpu);
            nz_init_mem = nz_init_mem.max(nz_sidecar_mem);
            sidecars.clone()
        } else {
            nz_init_cpu = nz_init_cpu.max(c_cpu + nz_sidecar_cpu);
            nz_init_mem = nz_init_mem.max(c_mem + nz_sidecar_mem);
            let mut p = r;
            p.add(&sidecars);
            p
        };
        init_max.max_with(&phase);
    }
    reqs.max_with(&init_max);
    nz_cpu = nz_cpu.max(nz_init_cpu);
    nz_mem = nz_mem.max(nz_init_mem);

    if let Some(pod_level) = spec.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        let p = Resource::from_list(pod_level).map_err(field("spec".to_string()))?;
        for name in pod_level.keys().filter(|n| is_supported_pod_level_resource(n)) {
            let v = p.get(name);
            reqs.set(name, v);
            match name.as_str() {
                CPU => nz_cpu = v.max(1),
                MEMORY => nz_mem = v.max(1),
                _ => {}
            }
        }
    }
    if let Some(overhead) = &spec.overhead {
        let o = Resource::from_list(overhead).map_err(field("spec.overhead".to_string()))?;
        reqs.add(&o);
        nz_cpu += o.milli_cpu;
        nz_mem += o.memory;
    }
    reqs.allowed_pods = 1;
    Ok(PodRequests { requests: reqs, non_zero_milli_cpu: nz_cpu, non_zero_memory: nz_mem })
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
