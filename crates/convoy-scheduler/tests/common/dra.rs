//! DRA fixtures (`resource.k8s.io/v1`) shared by `e2e_dra.rs` and the
//! parity scenario `parity/dra.rs`: a DeviceClass, node-local
//! ResourceSlices of GPUs, claim and template requests, pods naming claims,
//! and what an allocation says.
//!
//! Objects are JSON with `apiVersion` and `kind`, created by [`create`].

#![allow(dead_code)]

use std::collections::BTreeSet;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

/// The driver of every device, and the name of its DeviceClass.
pub const DRIVER: &str = "gpu.example.com";
/// The DeviceClass selecting the driver's devices.
pub const CLASS: &str = "gpu.example.com";
/// The node label naming a node's NVLink domain.
pub const CLIQUE_LABEL: &str = "nvidia.com/gpu.clique";
/// The finalizer the scheduler adds to a claim it allocates.
pub const FINALIZER: &str = "resource.kubernetes.io/delete-protection";

/// A GPU model: its `productName` attribute and `memory` capacity.
#[derive(Debug, Clone, Copy)]
pub struct Gpu {
    /// The `productName` attribute.
    pub product: &'static str,
    /// The `memory` capacity, as a quantity.
    pub memory: &'static str,
}

/// 40 GB A100s.
pub const A100_40: Gpu = Gpu { product: "NVIDIA A100-SXM4-40GB", memory: "40Gi" };
/// 80 GB A100s.
pub const A100_80: Gpu = Gpu { product: "NVIDIA A100-SXM4-80GB", memory: "80Gi" };
/// 80 GB H100s.
pub const H100_80: Gpu = Gpu { product: "NVIDIA H100-SXM5-80GB", memory: "80Gi" };

/// CEL: more than 40Gi of memory.
pub const MORE_THAN_40GI: &str =
    r#"device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) > 0"#;

/// CEL: `productName` is `product`.
pub fn product_is(product: &str) -> String {
    format!(r#"device.attributes["gpu.example.com"].productName == "{product}""#)
}

/// CEL: `cliqueId` is `clique`.
pub fn clique_is(clique: &str) -> String {
    format!(r#"device.attributes["gpu.example.com"].cliqueId == "{clique}""#)
}

/// The DeviceClass [`CLASS`]: every device of [`DRIVER`].
pub fn device_class() -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": { "name": CLASS },
        "spec": { "selectors": [{ "cel": { "expression": format!("device.driver == \"{DRIVER}\"") } }] },
    })
}

/// The ResourceSlice of `node`: pool `node`, one slice, `count` devices
/// `gpu-0..` of model `gpu` in NVLink domain `clique`.
pub fn slice(node: &str, gpu: Gpu, clique: &str, count: usize) -> Value {
    let devices: Vec<Value> = (0..count)
        .map(|i| {
            json!({
                "name": format!("gpu-{i}"),
                "attributes": {
                    "productName": { "string": gpu.product },
                    "cliqueId": { "string": clique },
                    "index": { "int": i },
                },
                "capacity": { "memory": { "value": gpu.memory } },
            })
        })
        .collect();
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": { "name": format!("{node}-{DRIVER}") },
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": { "name": node, "generation": 1, "resourceSliceCount": 1 },
            "devices": devices,
        },
    })
}

/// An `exactly` request `name` of [`CLASS`] for `count` devices
/// (`allocationMode: ExactCount`) matching every CEL `selectors`.
pub fn request(name: &str, count: i64, selectors: &[&str]) -> Value {
    json!({ "name": name, "exactly": {
        "deviceClassName": CLASS,
        "allocationMode": "ExactCount",
        "count": count,
        "selectors": cel(selectors),
    }})
}

/// An `exactly` request `name` of [`CLASS`] for every device matching
/// `selectors` (`allocationMode: All`).
pub fn request_all(name: &str, selectors: &[&str]) -> Value {
    json!({ "name": name, "exactly": {
        "deviceClassName": CLASS, "allocationMode": "All", "selectors": cel(selectors),
    }})
}

/// A `firstAvailable` request `name`: subrequests `(name, count,
/// selectors)`, in order of preference.
pub fn first_available(name: &str, subs: &[(&str, i64, &[&str])]) -> Value {
    let subs: Vec<Value> = subs
        .iter()
        .map(|(n, count, selectors)| {
            json!({ "name": n, "deviceClassName": CLASS, "allocationMode": "ExactCount",
                    "count": count, "selectors": cel(selectors) })
        })
        .collect();
    json!({ "name": name, "firstAvailable": subs })
}

fn cel(selectors: &[&str]) -> Vec<Value> {
    selectors.iter().map(|e| json!({ "cel": { "expression": e } })).collect()
}

/// A ResourceClaim `ns/name` with `requests`.
pub fn claim(ns: &str, name: &str, requests: Vec<Value>) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": { "name": name, "namespace": ns },
        "spec": { "devices": { "requests": requests } },
    })
}

/// A ResourceClaimTemplate `ns/name` whose claims have `requests`.
pub fn template(ns: &str, name: &str, requests: Vec<Value>) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": { "name": name, "namespace": ns },
        "spec": { "spec": { "devices": { "requests": requests } } },
    })
}

/// Which claim a pod's `spec.resourceClaims` entry names.
#[derive(Debug, Clone, Copy)]
pub enum Uses<'a> {
    /// `resourceClaimName`: an existing claim.
    Claim(&'a str),
    /// `resourceClaimTemplateName`: a claim the resourceclaim controller
    /// makes for the pod.
    Template(&'a str),
}

/// A pod `ns/name` (100m CPU, 128Mi) whose container uses one claim per
/// entry of `uses`, the entries named `c0`, `c1`, ...; no `schedulerName`.
pub fn pod(ns: &str, name: &str, uses: &[Uses<'_>]) -> Value {
    let entries: Vec<Value> = uses
        .iter()
        .enumerate()
        .map(|(i, u)| match u {
            Uses::Claim(c) => json!({ "name": format!("c{i}"), "resourceClaimName": c }),
            Uses::Template(t) => json!({ "name": format!("c{i}"), "resourceClaimTemplateName": t }),
        })
        .collect();
    let claims: Vec<Value> = (0..uses.len()).map(|i| json!({ "name": format!("c{i}") })).collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "namespace": ns },
        "spec": {
            "containers": [{
                "name": "main", "image": "registry.k8s.io/pause:3.10",
                "resources": { "requests": { "cpu": "100m", "memory": "128Mi" }, "claims": claims },
            }],
            "resourceClaims": entries,
        },
    })
}

/// Creates `v` (its `kind` says which API).
pub async fn create(client: &kube::Client, v: &Value) -> Result<()> {
    fn typed<T: serde::de::DeserializeOwned>(v: &Value) -> Result<T> {
        serde_json::from_value(v.clone()).with_context(|| format!("{v}"))
    }
    let (pp, c) = (PostParams::default(), client.clone());
    let ns = v["metadata"]["namespace"].as_str().unwrap_or("default");
    let created = match v["kind"].as_str() {
        Some("Namespace") => Api::<Namespace>::all(c).create(&pp, &typed(v)?).await.map(drop),
        Some("Node") => Api::<Node>::all(c).create(&pp, &typed(v)?).await.map(drop),
        Some("DeviceClass") => Api::<DeviceClass>::all(c).create(&pp, &typed(v)?).await.map(drop),
        Some("ResourceSlice") => {
            Api::<ResourceSlice>::all(c).create(&pp, &typed(v)?).await.map(drop)
        }
        Some("ResourceClaim") => {
            Api::<ResourceClaim>::namespaced(c, ns).create(&pp, &typed(v)?).await.map(drop)
        }
        Some("ResourceClaimTemplate") => {
            Api::<ResourceClaimTemplate>::namespaced(c, ns).create(&pp, &typed(v)?).await.map(drop)
        }
        Some("Pod") => Api::<Pod>::namespaced(c, ns).create(&pp, &typed(v)?).await.map(drop),
        other => bail!("unexpected kind {other:?}"),
    };
    created.with_context(|| format!("creating {v}"))
}

/// The claims a pod uses, by entry, in `spec.resourceClaims` order: a
/// named claim, or the claim the controller made from a template (`None`
/// until `status.resourceClaimStatuses` names it).
pub fn claim_names(p: &Pod) -> Vec<Option<String>> {
    let statuses = p.status.as_ref().and_then(|s| s.resource_claim_statuses.as_ref());
    p.spec
        .iter()
        .flat_map(|s| s.resource_claims.iter().flatten())
        .map(|entry| {
            entry.resource_claim_name.clone().or_else(|| {
                statuses?
                    .iter()
                    .find(|s| s.name == entry.name)
                    .and_then(|s| s.resource_claim_name.clone())
            })
        })
        .collect()
}

/// What a claim's allocation says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocated {
    /// `(driver, pool)` of the results.
    pub pools: BTreeSet<(String, String)>,
    /// `pool/device` of each result, in order.
    pub devices: Vec<String>,
    /// The node names the allocation's node selector names (`matchFields`
    /// on `metadata.name`).
    pub nodes: Vec<String>,
    /// UIDs in `status.reservedFor`.
    pub reserved_for: Vec<String>,
}

/// The claim's allocation, if allocated.
pub fn allocated(c: &ResourceClaim) -> Option<Allocated> {
    let status = c.status.as_ref()?;
    let alloc = status.allocation.as_ref()?;
    let results = alloc.devices.as_ref().and_then(|d| d.results.as_deref()).unwrap_or(&[]);
    let nodes = alloc
        .node_selector
        .iter()
        .flat_map(|s| &s.node_selector_terms)
        .flat_map(|t| t.match_fields.iter().flatten())
        .filter(|r| r.key == "metadata.name" && r.operator == "In")
        .flat_map(|r| r.values.iter().flatten().cloned())
        .collect();
    Some(Allocated {
        pools: results.iter().map(|r| (r.driver.clone(), r.pool.clone())).collect(),
        devices: results.iter().map(|r| format!("{}/{}", r.pool, r.device)).collect(),
        nodes,
        reserved_for: status.reserved_for.iter().flatten().map(|r| r.uid.clone()).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixtures_deserialize_into_the_typed_objects() {
        let _: DeviceClass = serde_json::from_value(device_class()).unwrap();
        let s: ResourceSlice = serde_json::from_value(slice("n0", A100_80, "a", 8)).unwrap();
        assert_eq!(s.spec.devices.as_ref().unwrap().len(), 8);
        let r = vec![
            request("gpu", 2, &[MORE_THAN_40GI]),
            request_all("all", &[]),
            first_available("fa", &[("big", 2, &[MORE_THAN_40GI]), ("any", 1, &[])]),
        ];
        let _: ResourceClaim = serde_json::from_value(claim("ns", "c", r.clone())).unwrap();
        let _: ResourceClaimTemplate = serde_json::from_value(template("ns", "t", r)).unwrap();
        let p: Pod =
            serde_json::from_value(pod("ns", "p", &[Uses::Claim("c"), Uses::Template("t")]))
                .unwrap();
        assert_eq!(claim_names(&p), vec![Some("c".to_string()), None]);
    }
}
