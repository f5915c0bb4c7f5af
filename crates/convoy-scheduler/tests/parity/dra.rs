//! The DRA scenario of the parity test: one fixed cluster (not seeded)
//! whose pods exercise DynamicResources (`resource.k8s.io/v1`, structured
//! parameters), run through upstream kube-scheduler and Convoy on two
//! control planes with kube-controller-manager (its resourceclaim
//! controller makes the claims of pods' ResourceClaimTemplates, and
//! releases and deletes them when their pods go).
//!
//! Four nodes, each publishing one ResourceSlice (driver
//! `gpu.example.com`, pool = node) of four devices: `n0` 40GB A100s and
//! `n1` 80GB A100s in NVLink domain `clique-a`, `n2` 80GB H100s and `n3`
//! 40GB A100s in `clique-b`. The pods, in order ([`PODS`]):
//!
//! - `a100-80-pair`: two 80Gi A100s (CEL on capacity and attribute): `n1`;
//! - `h100-all`: `allocationMode: All` of the H100s: all of `n2`;
//! - `three-big`: three devices of more than 40Gi: `n1` has two left, `n2`
//!   none: unschedulable;
//! - `shared-1`, `shared-2`: the claim `shared-b` (a 40GB device of
//!   `clique-b`: `n3`), then its second user (the allocated claim's node);
//! - `shared-elsewhere`: `shared-b` with a node selector for `n0`: the
//!   claim is allocated on `n3` and reserved for two pods, so PostFilter
//!   does not deallocate it: unschedulable;
//! - `prefer-big`: `firstAvailable` (two 80Gi devices, else any one): the
//!   score prefers `n1`, where the first subrequest fits;
//! - `two-claims`: two templates of 40GB devices (two and one): `n0` or
//!   `n3`;
//! - `h200`: a product no node has: unschedulable;
//! - `wrong-class`: a claim of a DeviceClass that does not exist
//!   (PreFilter);
//! - `clique-pair`: two 40GB devices with `matchAttribute` on `cliqueId`:
//!   whichever of `n0`, `n3` still has two free;
//! - `no-claim`: no claim at all (DynamicResources skips it);
//! - `realloc`: the claim `preallocated`, allocated from the start on `n0`
//!   (as by another allocator) and reserved for nobody, with a node
//!   selector for `n3`: the claim is not available there, PostFilter
//!   deallocates it (`deallocation of ResourceClaim completed`), and the
//!   next attempt allocates it on `n3`.
//!
//! A pod both schedulers bound to the same node keeps its claims; any
//! other outcome (unschedulable, a tie broken differently, a divergence)
//! deletes the pod from both clusters and waits until the resourceclaim
//! controller has released its claims, so every pod is compared on the
//! same state.

use serde_json::{Value, json};

use crate::dra_fixtures::{
    self as fx, A100_40, H100_80, MORE_THAN_40GI, Uses, claim, first_available, product_is,
    request, request_all, template,
};

/// The namespace of every claim and pod.
pub const NAMESPACE: &str = "dra";
const HOSTNAME: &str = "kubernetes.io/hostname";

/// The nodes: name, NVLink domain, GPU model.
const NODES: [(&str, &str, fx::Gpu); 4] = [
    ("n0", "clique-a", A100_40),
    ("n1", "clique-a", fx::A100_80),
    ("n2", "clique-b", H100_80),
    ("n3", "clique-b", A100_40),
];

/// A pod to schedule: its name and the claims it uses.
pub struct PodCase {
    /// The pod's name.
    pub name: &'static str,
    /// Its `spec.resourceClaims`.
    pub uses: &'static [Uses<'static>],
}

const fn case(name: &'static str, uses: &'static [Uses<'static>]) -> PodCase {
    PodCase { name, uses }
}

/// The pods to schedule, in order.
pub const PODS: [PodCase; 13] = [
    case("a100-80-pair", &[Uses::Template("a100-80-pair")]),
    case("h100-all", &[Uses::Template("h100-all")]),
    case("three-big", &[Uses::Template("three-big")]),
    case("shared-1", &[Uses::Claim("shared-b")]),
    case("shared-2", &[Uses::Claim("shared-b")]),
    case("shared-elsewhere", &[Uses::Claim("shared-b")]),
    case("prefer-big", &[Uses::Template("prefer-big")]),
    case("two-claims", &[Uses::Template("forty-pair"), Uses::Template("forty-one")]),
    case("h200", &[Uses::Template("h200")]),
    case("wrong-class", &[Uses::Claim("wrong-class")]),
    case("clique-pair", &[Uses::Template("clique-pair")]),
    case("no-claim", &[]),
    case("realloc", &[Uses::Claim("preallocated")]),
];

/// The scenario's objects, as JSON with `apiVersion` and `kind`.
#[derive(Debug, Clone, Default)]
pub struct Objects {
    /// Nodes, the DeviceClass, ResourceSlices, ResourceClaims and
    /// ResourceClaimTemplates, in creation order (a claim's `status` is
    /// written after its creation).
    pub cluster: Vec<Value>,
    /// The pods to schedule, in the order of [`PODS`], without
    /// `schedulerName`.
    pub pods: Vec<Value>,
}

fn node(name: &str, clique: &str) -> Value {
    let allocatable = json!({ "cpu": "4", "memory": "8Gi", "pods": "110" });
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": { "name": name, "labels": { HOSTNAME: name, fx::CLIQUE_LABEL: clique } },
        "status": {
            "allocatable": allocatable, "capacity": allocatable,
            "conditions": [{ "type": "Ready", "status": "True" }],
        },
    })
}

/// The scenario.
pub fn objects() -> Objects {
    let ns = NAMESPACE;
    let mut cluster: Vec<Value> = NODES.iter().map(|(n, c, _)| node(n, c)).collect();
    cluster.push(fx::device_class());
    cluster.extend(NODES.iter().map(|(n, c, gpu)| fx::slice(n, *gpu, c, 4)));
    let a100 = r#"device.attributes["gpu.example.com"].productName.startsWith("NVIDIA A100")"#;
    let forty = product_is(A100_40.product);
    cluster.extend([
        claim(ns, "shared-b", vec![request("gpu", 1, &[&fx::clique_is("clique-b"), &forty])]),
        {
            let mut c = claim(ns, "preallocated", vec![request("gpu", 1, &[&forty])]);
            c["status"] = json!({ "allocation": {
                "devices": { "results": [
                    { "request": "gpu", "driver": fx::DRIVER, "pool": "n0", "device": "gpu-0" }
                ] },
                "nodeSelector": { "nodeSelectorTerms": [{ "matchFields": [
                    { "key": "metadata.name", "operator": "In", "values": ["n0"] }
                ] }] },
            } });
            c
        },
        claim(
            ns,
            "wrong-class",
            vec![json!({ "name": "gpu", "exactly": { "deviceClassName": "no-such-class" } })],
        ),
        template(ns, "a100-80-pair", vec![request("gpu", 2, &[MORE_THAN_40GI, a100])]),
        template(ns, "h100-all", vec![request_all("gpu", &[&product_is(H100_80.product)])]),
        template(ns, "three-big", vec![request("gpu", 3, &[MORE_THAN_40GI])]),
        template(
            ns,
            "prefer-big",
            vec![first_available("gpu", &[("big", 2, &[MORE_THAN_40GI]), ("any", 1, &[])])],
        ),
        template(ns, "forty-pair", vec![request("gpu", 2, &[&forty])]),
        template(ns, "forty-one", vec![request("gpu", 1, &[&forty])]),
        template(ns, "h200", vec![request("gpu", 1, &[&product_is("NVIDIA H200")])]),
        {
            let mut t = template(ns, "clique-pair", vec![request("gpu", 2, &[&forty])]);
            t["spec"]["spec"]["devices"]["constraints"] =
                json!([{ "requests": ["gpu"], "matchAttribute": "gpu.example.com/cliqueId" }]);
            t
        },
    ]);
    let mut pods: Vec<Value> = PODS.iter().map(|c| fx::pod(ns, c.name, c.uses)).collect();
    let elsewhere =
        pods.iter_mut().find(|p| p["metadata"]["name"] == "shared-elsewhere").expect("listed");
    elsewhere["spec"]["nodeSelector"] = json!({ HOSTNAME: "n0" });
    let realloc = pods.iter_mut().find(|p| p["metadata"]["name"] == "realloc").expect("listed");
    realloc["spec"]["nodeSelector"] = json!({ HOSTNAME: "n3" });
    Objects { cluster, pods }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    #[test]
    fn every_claim_and_template_a_pod_names_exists() {
        let o = objects();
        let named = |kind: &str| -> Vec<String> {
            o.cluster
                .iter()
                .filter(|v| v["kind"] == kind)
                .map(|v| v["metadata"]["name"].as_str().unwrap().to_string())
                .collect()
        };
        let (claims, templates) = (named("ResourceClaim"), named("ResourceClaimTemplate"));
        for case in PODS {
            for u in case.uses {
                match u {
                    Uses::Claim(c) => assert!(claims.contains(&c.to_string()), "{c}"),
                    Uses::Template(t) => assert!(templates.contains(&t.to_string()), "{t}"),
                }
            }
        }
        for p in &o.pods {
            let _: Pod = serde_json::from_value(p.clone()).unwrap();
        }
    }
}
