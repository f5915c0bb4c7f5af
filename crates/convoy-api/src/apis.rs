//! Which of the APIs Convoy reads the API server serves, and in which
//! version: found by discovery on a real cluster, all of them on the
//! embedded one.
//!
//! Every kind Convoy watches besides the core ones (`v1` Nodes, Pods,
//! Namespaces, Services, ReplicationControllers, PersistentVolumeClaims,
//! PersistentVolumes, which every server serves) is an [`ApiInfo`] in
//! [`OPTIONAL_APIS`], with the versions Convoy can read, newest first. The
//! API adapter asks the server which of them it serves, watches each in the
//! first readable version served, and reports the result as a
//! [`ServedApis`] (`ClusterUpdate::ApisServed`). A kind that is not served
//! is an empty set, never a wait; a pod that needs it is refused by name
//! ([`ServedApis::refusal`]), never placed as if the feature were absent.

use std::collections::BTreeMap;
use std::fmt;

/// The Kubernetes minor versions Convoy supports and is tested on, oldest
/// first (each on its own API server; `docs/operating.md`).
pub const SUPPORTED_MINORS: [u32; 4] = [34, 35, 36, 37];

/// The supported range as users read it: `1.34 to 1.37`.
pub fn supported_range() -> String {
    format!("1.{} to 1.{}", SUPPORTED_MINORS[0], SUPPORTED_MINORS[SUPPORTED_MINORS.len() - 1])
}

/// The minor version of a server's `gitVersion` (`v1.36.3`, `v1.34.4-gke.100`),
/// if it is Kubernetes 1.x.
pub fn minor_of(git_version: &str) -> Option<u32> {
    let rest = git_version.strip_prefix('v').unwrap_or(git_version).strip_prefix("1.")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Whether a server's `gitVersion` is in [`SUPPORTED_MINORS`].
pub fn is_supported(git_version: &str) -> bool {
    minor_of(git_version).is_some_and(|m| SUPPORTED_MINORS.contains(&m))
}

/// One API (group and resource) Convoy reads, and the versions it can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApiInfo {
    /// The API group (`resource.k8s.io`).
    pub group: &'static str,
    /// The resource, plural (`resourceclaims`).
    pub resource: &'static str,
    /// The kind (`ResourceClaim`).
    pub kind: &'static str,
    /// The versions Convoy reads, the preferred first (`["v1", "v1beta2"]`):
    /// the same schema as the first, or one Convoy converts from.
    pub readable: &'static [&'static str],
}

impl ApiInfo {
    /// `resourceclaims.resource.k8s.io`, as upstream names a resource.
    pub fn name(&self) -> String {
        format!("{}.{}", self.resource, self.group)
    }

    /// `resource.k8s.io/v1`, for a version.
    pub fn api_version(&self, version: &str) -> String {
        format!("{}/{version}", self.group)
    }

    /// The first version of [`readable`](Self::readable) among `served`.
    pub fn pick(&self, served: &[impl AsRef<str>]) -> Option<&'static str> {
        self.readable.iter().copied().find(|v| served.iter().any(|s| s.as_ref() == *v))
    }
}

impl fmt::Display for ApiInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.resource, self.group)
    }
}

macro_rules! api {
    ($name:ident, $group:literal, $resource:literal, $kind:literal, [$($v:literal),+], $doc:literal) => {
        #[doc = $doc]
        pub const $name: ApiInfo =
            ApiInfo { group: $group, resource: $resource, kind: $kind, readable: &[$($v),+] };
    };
}

api!(REPLICA_SETS, "apps", "replicasets", "ReplicaSet", ["v1"], "`apps/v1` ReplicaSets.");
api!(STATEFUL_SETS, "apps", "statefulsets", "StatefulSet", ["v1"], "`apps/v1` StatefulSets.");
api!(
    POD_DISRUPTION_BUDGETS,
    "policy",
    "poddisruptionbudgets",
    "PodDisruptionBudget",
    ["v1"],
    "`policy/v1` PodDisruptionBudgets."
);
api!(
    PRIORITY_CLASSES,
    "scheduling.k8s.io",
    "priorityclasses",
    "PriorityClass",
    ["v1"],
    "`scheduling.k8s.io/v1` PriorityClasses."
);
api!(
    STORAGE_CLASSES,
    "storage.k8s.io",
    "storageclasses",
    "StorageClass",
    ["v1"],
    "`storage.k8s.io/v1` StorageClasses."
);
api!(CSI_NODES, "storage.k8s.io", "csinodes", "CSINode", ["v1"], "`storage.k8s.io/v1` CSINodes.");
api!(
    CSI_DRIVERS,
    "storage.k8s.io",
    "csidrivers",
    "CSIDriver",
    ["v1"],
    "`storage.k8s.io/v1` CSIDrivers."
);
api!(
    CSI_STORAGE_CAPACITIES,
    "storage.k8s.io",
    "csistoragecapacities",
    "CSIStorageCapacity",
    ["v1"],
    "`storage.k8s.io/v1` CSIStorageCapacities."
);
api!(
    DEVICE_CLASSES,
    "resource.k8s.io",
    "deviceclasses",
    "DeviceClass",
    ["v1", "v1beta2"],
    "DRA DeviceClasses: `v1` (Kubernetes 1.34+), else `v1beta2` (the same schema)."
);
api!(
    RESOURCE_SLICES,
    "resource.k8s.io",
    "resourceslices",
    "ResourceSlice",
    ["v1", "v1beta2"],
    "DRA ResourceSlices: `v1`, else `v1beta2` (the same schema)."
);
api!(
    RESOURCE_CLAIMS,
    "resource.k8s.io",
    "resourceclaims",
    "ResourceClaim",
    ["v1", "v1beta2"],
    "DRA ResourceClaims: `v1`, else `v1beta2` (the same schema; Convoy writes \
     allocations in the version it reads)."
);
api!(
    DEVICE_TAINT_RULES,
    "resource.k8s.io",
    "devicetaintrules",
    "DeviceTaintRule",
    ["v1", "v1beta2", "v1alpha3"],
    "DRA DeviceTaintRules: `v1` (1.37), `v1beta2` (1.36, off by default), \
     `v1alpha3` (1.34 and 1.35, off by default)."
);
api!(
    POD_GROUPS_X_K8S,
    "scheduling.x-k8s.io",
    "podgroups",
    "PodGroup",
    ["v1alpha1"],
    "scheduler-plugins' PodGroup CRD, `scheduling.x-k8s.io/v1alpha1`."
);
api!(
    POD_GROUPS_UPSTREAM,
    "scheduling.k8s.io",
    "podgroups",
    "PodGroup",
    ["v1beta1"],
    "Upstream's PodGroup, `scheduling.k8s.io/v1beta1` (Kubernetes 1.37, \
     `GenericWorkload`)."
);

/// Every API Convoy watches besides the core `v1` kinds.
pub const OPTIONAL_APIS: [ApiInfo; 14] = [
    REPLICA_SETS,
    STATEFUL_SETS,
    POD_DISRUPTION_BUDGETS,
    PRIORITY_CLASSES,
    STORAGE_CLASSES,
    CSI_NODES,
    CSI_DRIVERS,
    CSI_STORAGE_CAPACITIES,
    DEVICE_CLASSES,
    RESOURCE_SLICES,
    RESOURCE_CLAIMS,
    DEVICE_TAINT_RULES,
    POD_GROUPS_X_K8S,
    POD_GROUPS_UPSTREAM,
];

/// What the server does with one API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Serving {
    /// Served in this version, which Convoy reads (and watches).
    Served(&'static str),
    /// Not served in any version.
    NotServed,
    /// Served only in these versions, none of which Convoy reads.
    Unreadable(Vec<String>),
    /// Served in this version, its objects still being listed (a custom
    /// kind a plugin declared, found by discovery a moment ago): not
    /// usable yet.
    Listing(&'static str),
}

impl Serving {
    /// What the server serves, for a log line (`v1beta2`, `not served`,
    /// `only v1beta1 (not read)`).
    pub fn describe(&self) -> String {
        match self {
            Serving::Served(v) => (*v).to_string(),
            Serving::NotServed => "not served".to_string(),
            Serving::Unreadable(vs) => format!("only {} (not read)", vs.join(", ")),
            Serving::Listing(v) => format!("{v} (being listed)"),
        }
    }
}

/// Which [`OPTIONAL_APIS`] a server serves, and its version.
///
/// An API with no entry counts as served in its preferred version: the
/// embedded cluster serves everything ([`ServedApis::all`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServedApis {
    apis: BTreeMap<ApiInfo, Serving>,
    /// The server's `gitVersion` (`v1.36.3`), when known.
    pub server_version: Option<String>,
}

impl ServedApis {
    /// Every API served in its preferred version (the embedded cluster).
    pub fn all() -> Self {
        Self::default()
    }

    /// Whether the server is Kubernetes 1.`minor` or later; true when its
    /// version is unknown (the embedded cluster behaves as the newest).
    /// Plugins whose upstream behaviour changed between supported versions
    /// follow the server's with it.
    pub fn server_at_least(&self, minor: u32) -> bool {
        self.server_version.as_deref().and_then(minor_of).is_none_or(|m| m >= minor)
    }

    /// Records what the server does with `api`.
    pub fn set(&mut self, api: ApiInfo, serving: Serving) {
        self.apis.insert(api, serving);
    }

    /// What the server does with `api`.
    pub fn serving(&self, api: &ApiInfo) -> Serving {
        self.apis.get(api).cloned().unwrap_or(Serving::Served(api.readable[0]))
    }

    /// Whether `api` is served in a version Convoy reads.
    pub fn is_served(&self, api: &ApiInfo) -> bool {
        matches!(self.serving(api), Serving::Served(_))
    }

    /// Every API with what the server does with it, in [`OPTIONAL_APIS`]
    /// order.
    pub fn iter(&self) -> impl Iterator<Item = (ApiInfo, Serving)> + '_ {
        OPTIONAL_APIS.iter().map(|a| (*a, self.serving(a)))
    }

    /// Why a pod that uses `field` (`spec.resourceClaims`), which needs
    /// every one of `needs`, cannot be placed on this server; `None` when
    /// all of them are served in a version Convoy reads.
    ///
    /// `pod uses spec.resourceClaims, which needs resourceclaims.resource.k8s.io
    /// (v1 or v1beta2); this API server does not serve it`.
    pub fn refusal(&self, field: &str, needs: &[ApiInfo]) -> Option<String> {
        needs.iter().find_map(|api| {
            let versions = api.readable.join(" or ");
            match self.serving(api) {
                Serving::Served(_) => None,
                Serving::NotServed => Some(format!(
                    "pod uses {field}, which needs {api} ({versions}); this API server does not \
                     serve it"
                )),
                Serving::Unreadable(vs) => Some(format!(
                    "pod uses {field}, which needs {api} ({versions}); this API server serves it \
                     only as {}, which this scheduler does not read",
                    vs.iter().map(|v| api.api_version(v)).collect::<Vec<_>>().join(", ")
                )),
                Serving::Listing(_) => Some(format!(
                    "pod uses {field}, which needs {api}; its objects are still being listed"
                )),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_range() {
        assert_eq!(minor_of("v1.36.3"), Some(36));
        assert_eq!(minor_of("v1.34.4-gke.1200"), Some(34));
        assert_eq!(minor_of("1.37.0"), Some(37));
        assert_eq!(minor_of("v2.0.0"), None);
        assert!(is_supported("v1.34.4") && is_supported("v1.37.2"));
        assert!(!is_supported("v1.33.9") && !is_supported("v1.38.0"));
        assert_eq!(supported_range(), "1.34 to 1.37");
    }

    #[test]
    fn pick_prefers_the_newest_readable() {
        assert_eq!(DEVICE_TAINT_RULES.pick(&["v1alpha3", "v1beta2"]), Some("v1beta2"));
        assert_eq!(DEVICE_TAINT_RULES.pick(&["v1", "v1beta2"]), Some("v1"));
        assert_eq!(RESOURCE_CLAIMS.pick(&["v1beta1"]), None);
        assert_eq!(RESOURCE_CLAIMS.name(), "resourceclaims.resource.k8s.io");
    }

    #[test]
    fn refusals_name_the_field_and_the_api() {
        let mut s = ServedApis::all();
        assert!(s.is_served(&RESOURCE_CLAIMS));
        assert_eq!(s.refusal("spec.resourceClaims", &[RESOURCE_CLAIMS, DEVICE_CLASSES]), None);
        s.set(DEVICE_CLASSES, Serving::NotServed);
        assert_eq!(
            s.refusal("spec.resourceClaims", &[RESOURCE_CLAIMS, DEVICE_CLASSES]).unwrap(),
            "pod uses spec.resourceClaims, which needs deviceclasses.resource.k8s.io (v1 or \
             v1beta2); this API server does not serve it"
        );
        s.set(RESOURCE_CLAIMS, Serving::Unreadable(vec!["v1beta1".into()]));
        assert_eq!(
            s.refusal("spec.resourceClaims", &[RESOURCE_CLAIMS]).unwrap(),
            "pod uses spec.resourceClaims, which needs resourceclaims.resource.k8s.io (v1 or \
             v1beta2); this API server serves it only as resource.k8s.io/v1beta1, which this \
             scheduler does not read"
        );
        assert_eq!(s.serving(&DEVICE_CLASSES).describe(), "not served");
        assert!(s.server_at_least(37), "unknown: the newest");
        s.server_version = Some("v1.35.4".into());
        assert!(s.server_at_least(35) && !s.server_at_least(36));
        assert_eq!(s.iter().count(), OPTIONAL_APIS.len());
    }
}
