//! Allocator tests, after upstream's `allocatortesting/allocator_testing.go`
//! cases (names in comments are upstream's).

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{AllocationResult, DeviceClass, ResourceClaim, ResourceSlice};
use serde_json::{Value, json};

use super::*;
use crate::dynamic_resources::cel::SelectorCache;
use crate::dynamic_resources::pools::SliceIndex;

const DRIVER: &str = "driver-a";
const SEL_A: &str = "device.driver == \"driver-a\"";

fn node(name: &str, labels: Value) -> Node {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
}

fn node1() -> Node {
    node("node-1", json!({"zone": "z1"}))
}

fn class(name: &str, extra: Value) -> Arc<DeviceClass> {
    let mut spec = json!({"selectors": [{"cel": {"expression": SEL_A}}]});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    Arc::new(serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap())
}

fn dev(name: &str) -> Value {
    json!({"name": name})
}

fn dev_attr(name: &str, attrs: Value) -> Value {
    json!({"name": name, "attributes": attrs})
}

/// A slice of `pool` (generation 1, one slice) on `sel` (a spec fragment
/// such as `{"nodeName": "node-1"}`).
fn slice_gen(
    name: &str,
    pool: &str,
    gen_count: (i64, i64),
    sel: Value,
    devices: Vec<Value>,
) -> Arc<ResourceSlice> {
    let mut spec = json!({
        "driver": DRIVER,
        "pool": {"name": pool, "generation": gen_count.0, "resourceSliceCount": gen_count.1},
        "devices": devices,
    });
    for (k, v) in sel.as_object().unwrap() {
        spec[k] = v.clone();
    }
    Arc::new(serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap())
}

fn slice(name: &str, sel: Value, devices: Vec<Value>) -> Arc<ResourceSlice> {
    slice_gen(name, name, (1, 1), sel, devices)
}

fn on_node1() -> Value {
    json!({"nodeName": "node-1"})
}

fn claim(name: &str, requests: Value, extra: Value) -> Arc<ResourceClaim> {
    let mut devices = json!({"requests": requests});
    for (k, v) in extra.as_object().unwrap() {
        devices[k] = v.clone();
    }
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": devices},
        }))
        .unwrap(),
    )
}

fn exact(name: &str, count: i64) -> Value {
    json!({"name": name, "exactly": {"deviceClassName": "class-a", "count": count}})
}

fn all_req(name: &str) -> Value {
    json!({"name": name, "exactly": {"deviceClassName": "class-a", "allocationMode": "All"}})
}

struct Case {
    classes: Vec<Arc<DeviceClass>>,
    slices: Vec<Arc<ResourceSlice>>,
    claims: Vec<Arc<ResourceClaim>>,
    in_use: Vec<&'static str>,
    options: AllocatorOptions,
    node: Node,
}

impl Case {
    fn new(slices: Vec<Arc<ResourceSlice>>, claims: Vec<Arc<ResourceClaim>>) -> Self {
        Self {
            classes: vec![class("class-a", json!({}))],
            slices,
            claims,
            in_use: Vec::new(),
            options: AllocatorOptions::default(),
            node: node1(),
        }
    }

    fn run(&self) -> Result<Option<Vec<AllocationResult>>, AllocateError> {
        let classes = self.classes.clone();
        let lookup =
            move |n: &str| classes.iter().find(|c| c.metadata.name.as_deref() == Some(n)).cloned();
        let cache = SelectorCache::default();
        let alloc = ClaimAllocator::new(self.claims.clone(), &lookup, &cache)?
            .with_options(self.options.clone());
        let index = SliceIndex::build(&self.slices);
        let pools = index.pools_for_node(&self.node);
        let in_use: HashSet<String> = self.in_use.iter().map(|s| s.to_string()).collect();
        alloc.allocate(&self.node, &pools, &|id: &DeviceId| in_use.contains(&*id.device))
    }

    /// Per claim: the allocated (request, device) pairs.
    fn devices(&self) -> Option<Vec<Vec<(String, String)>>> {
        self.run().unwrap().map(|rs| {
            rs.iter()
                .map(|r| {
                    r.devices
                        .as_ref()
                        .unwrap()
                        .results
                        .iter()
                        .flatten()
                        .map(|d| (d.request.clone(), d.device.clone()))
                        .collect()
                })
                .collect()
        })
    }

    fn error(&self) -> String {
        match self.run() {
            Err(AllocateError::Error(m)) => m,
            other => panic!("expected an error, got {other:?}"),
        }
    }
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

#[test]
fn simple() {
    let c = Case::new(
        vec![slice("pool-1", on_node1(), vec![dev("device-1"), dev("device-2")])],
        vec![claim("claim-1", json!([exact("req-0", 1)]), json!({}))],
    );
    let r = c.run().unwrap().unwrap();
    assert_eq!(r.len(), 1);
    let res = &r[0].devices.as_ref().unwrap().results.as_ref().unwrap()[0];
    assert_eq!(
        (res.request.as_str(), res.driver.as_str(), res.pool.as_str()),
        ("req-0", DRIVER, "pool-1")
    );
    assert_eq!(res.device, "device-1");
    assert_eq!(res.admin_access, None);
    // Node-local device: the allocation is pinned to the node by name.
    let ns = serde_json::to_value(r[0].node_selector.as_ref().unwrap()).unwrap();
    assert_eq!(
        ns,
        json!({"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]})
    );
}

#[test]
fn other_node() {
    // upstream "other-node": devices of another node's slice are not seen.
    let c = Case::new(
        vec![slice("pool-2", json!({"nodeName": "node-2"}), vec![dev("device-1")])],
        vec![claim("claim-1", json!([exact("req-0", 1)]), json!({}))],
    );
    assert_eq!(c.devices(), None);
}

#[test]
fn count_and_not_enough_devices() {
    let slices = vec![slice("pool-1", on_node1(), vec![dev("d1"), dev("d2"), dev("d3")])];
    let c = Case::new(slices.clone(), vec![claim("c", json!([exact("req-0", 2)]), json!({}))]);
    assert_eq!(c.devices(), Some(vec![pairs(&[("req-0", "d1"), ("req-0", "d2")])]));
    // "not-enough-suitable-devices"
    let c = Case::new(slices, vec![claim("c", json!([exact("req-0", 4)]), json!({}))]);
    assert_eq!(c.devices(), None);
}

#[test]
fn in_use_devices_are_skipped() {
    // upstream "already-allocated-devices"
    let mut c = Case::new(
        vec![slice("pool-1", on_node1(), vec![dev("d1"), dev("d2")])],
        vec![claim("c", json!([exact("req-0", 1)]), json!({}))],
    );
    c.in_use = vec!["d1"];
    assert_eq!(c.devices(), Some(vec![pairs(&[("req-0", "d2")])]));
    c.in_use = vec!["d1", "d2"];
    assert_eq!(c.devices(), None);
}

#[test]
fn multiple_claims_compete_for_devices() {
    let claims = vec![
        claim("c1", json!([exact("req-0", 1)]), json!({})),
        claim("c2", json!([exact("req-0", 1)]), json!({})),
    ];
    let c =
        Case::new(vec![slice("pool-1", on_node1(), vec![dev("d1"), dev("d2")])], claims.clone());
    assert_eq!(c.devices(), Some(vec![pairs(&[("req-0", "d1")]), pairs(&[("req-0", "d2")])]));
    let c = Case::new(vec![slice("pool-1", on_node1(), vec![dev("d1")])], claims);
    assert_eq!(c.devices(), None);
}

#[test]
fn small_and_large_backtrack_claims() {
    // upstream "small-and-large-backtrack-claims": the first claim's first
    // pick must be undone so that the second claim's matchAttribute holds.
    let attrs = |v: &str| json!({"numa": {"string": v}});
    let slices = vec![slice(
        "pool-1",
        on_node1(),
        vec![dev_attr("d1", attrs("x")), dev_attr("d2", attrs("y")), dev_attr("d3", attrs("x"))],
    )];
    let claims = vec![
        claim("small", json!([exact("req-0", 1)]), json!({})),
        claim(
            "large",
            json!([exact("req-0", 2)]),
            json!({"constraints": [{"matchAttribute": "driver-a/numa"}]}),
        ),
    ];
    let c = Case::new(slices, claims);
    assert_eq!(
        c.devices(),
        Some(vec![pairs(&[("req-0", "d2")]), pairs(&[("req-0", "d1"), ("req-0", "d3")])])
    );
}

#[test]
fn all_devices() {
    let slices = vec![slice("pool-1", on_node1(), vec![dev("d1"), dev("d2")])];
    // "all-devices-many"
    let c = Case::new(slices.clone(), vec![claim("c", json!([all_req("req-0")]), json!({}))]);
    assert_eq!(c.devices(), Some(vec![pairs(&[("req-0", "d1"), ("req-0", "d2")])]));
    // "all-devices-some-allocated": an allocated device makes "all" impossible.
    let mut c = Case::new(slices.clone(), vec![claim("c", json!([all_req("req-0")]), json!({}))]);
    c.in_use = vec!["d2"];
    assert_eq!(c.devices(), None);
    // "all-devices-plus-another": nothing left for the second request.
    let c = Case::new(
        slices,
        vec![claim("c", json!([all_req("req-0"), exact("req-1", 1)]), json!({}))],
    );
    assert_eq!(c.devices(), None);
    // "all-devices-no-slices": at least one device is required.
    let c = Case::new(vec![], vec![claim("c", json!([all_req("req-0")]), json!({}))]);
    assert_eq!(c.devices(), None);
}

#[test]
fn all_devices_of_the_incomplete_pool() {
    let c = Case::new(
        vec![slice_gen("slice-1", "pool-1", (1, 2), on_node1(), vec![dev("d1")])],
        vec![claim("claim-1", json!([all_req("req-0")]), json!({}))],
    );
    assert_eq!(
        c.error(),
        "claim default/claim-1, request req-0: asks for all devices, but resource pool driver-a/pool-1 is currently being updated"
    );
    // ExactCount requests just do not use the incomplete pool.
    let c =
        Case::new(c.slices.clone(), vec![claim("claim-1", json!([exact("req-0", 1)]), json!({}))]);
    assert_eq!(c.devices(), None);
}

#[test]
fn first_available() {
    // "prioritized-list-first-unavailable": the first subrequest wants more
    // devices than there are; the second is used and named "<req>/<sub>".
    let req = json!({"name": "req-0", "firstAvailable": [
        {"name": "big", "deviceClassName": "class-a", "count": 3},
        {"name": "small", "deviceClassName": "class-a", "count": 1},
    ]});
    let c = Case::new(
        vec![slice("pool-1", on_node1(), vec![dev("d1"), dev("d2")])],
        vec![claim("c", json!([req]), json!({}))],
    );
    assert_eq!(c.devices(), Some(vec![pairs(&[("req-0/small", "d1")])]));
    // "prioritized-list-non-available"
    let req = json!({"name": "req-0", "firstAvailable": [
        {"name": "big", "deviceClassName": "class-a", "count": 3},
    ]});
    let c = Case::new(c.slices.clone(), vec![claim("c", json!([req]), json!({}))]);
    assert_eq!(c.devices(), None);
}

#[test]
fn first_available_constraint_on_parent_or_subrequest() {
    // "prioritized-list-subrequests-with-constraints-ref-parent-request":
    // a constraint naming the parent covers its subrequests.
    let attrs = |v: i64| json!({"numa": {"int": v}});
    let slices = vec![slice(
        "pool-1",
        on_node1(),
        vec![dev_attr("d1", attrs(1)), dev_attr("d2", attrs(2)), dev_attr("d3", attrs(1))],
    )];
    for names in [json!(["req-0"]), json!(["req-0/sub"])] {
        let req = json!({"name": "req-0", "firstAvailable": [
            {"name": "sub", "deviceClassName": "class-a", "count": 1}]});
        let claims = vec![claim(
            "c",
            json!([exact("req-1", 1), req]),
            json!({"constraints": [{"matchAttribute": "driver-a/numa", "requests": ["req-1", names[0].clone()]}]}),
        )];
        let mut c = Case::new(slices.clone(), claims);
        c.in_use = vec!["d1"];
        assert_eq!(c.devices(), None, "d2 (numa 2) has no partner: only d3 (numa 1) is free");
        c.in_use = vec![];
        assert_eq!(c.devices(), Some(vec![pairs(&[("req-1", "d1"), ("req-0/sub", "d3")])]));
    }
}

#[test]
fn match_attribute_backtracks() {
    // "with-constraint-for-request-retry": d1's value has no partner.
    let attrs = |v: &str| json!({"driver-a/model": {"string": v}});
    let slices = vec![slice(
        "pool-1",
        on_node1(),
        vec![dev_attr("d1", attrs("a")), dev_attr("d2", attrs("b")), dev_attr("d3", attrs("b"))],
    )];
    let claims = vec![claim(
        "c",
        json!([exact("req-0", 2)]),
        json!({"constraints": [{"matchAttribute": "driver-a/model"}]}),
    )];
    let c = Case::new(slices, claims);
    assert_eq!(c.devices(), Some(vec![pairs(&[("req-0", "d2"), ("req-0", "d3")])]));
}

#[test]
fn match_attribute_typed_and_missing() {
    // "with-constraint-not-matching-int-attribute": int 1 vs string "1".
    let slices = vec![slice(
        "pool-1",
        on_node1(),
        vec![
            dev_attr("d1", json!({"x": {"int": 1}})),
            dev_attr("d2", json!({"x": {"string": "1"}})),
        ],
    )];
    let cons = json!({"constraints": [{"matchAttribute": "driver-a/x"}]});
    let c = Case::new(slices.clone(), vec![claim("c", json!([exact("req-0", 2)]), cons.clone())]);
    assert_eq!(c.devices(), None);
    // "with-constraint-non-existent-attribute"
    let c = Case::new(
        vec![slice("pool-1", on_node1(), vec![dev("d1"), dev("d2")])],
        vec![claim("c", json!([exact("req-0", 1)]), cons.clone())],
    );
    assert_eq!(c.devices(), None);
    // "with-constraint-not-matching-int-attribute-all-devices": an error in All mode.
    let c = Case::new(slices, vec![claim("c", json!([all_req("req-0")]), cons)]);
    assert_eq!(
        c.error(),
        "claim default/c, request req-0: cannot add device driver-a/pool-1/d2 because a claim constraint would not be satisfied"
    );
}

#[test]
fn distinct_attribute() {
    let attrs = |v: &str| json!({"driver-a/nic": {"string": v}});
    let slices = vec![slice(
        "pool-1",
        on_node1(),
        vec![dev_attr("d1", attrs("a")), dev_attr("d2", attrs("a")), dev_attr("d3", attrs("b"))],
    )];
    let c = Case::new(
        slices,
        vec![claim(
            "c",
            json!([exact("req-0", 2)]),
            json!({"constraints": [{"distinctAttribute": "driver-a/nic"}]}),
        )],
    );
    assert_eq!(c.devices(), Some(vec![pairs(&[("req-0", "d1"), ("req-0", "d3")])]));
}

#[test]
fn taints_and_tolerations() {
    let tainted = |name: &str, effect: &str| json!({"name": name, "taints": [{"key": "k", "value": "v", "effect": effect}]});
    // "tainted-two-devices"
    let slices = vec![slice(
        "pool-1",
        on_node1(),
        vec![tainted("d1", "NoSchedule"), tainted("d2", "NoExecute")],
    )];
    let c = Case::new(slices.clone(), vec![claim("c", json!([exact("req-0", 1)]), json!({}))]);
    assert_eq!(c.devices(), None);
    // "tainted-two-devices-tolerated"
    for tol in [
        json!({"key": "k", "operator": "Exists"}),
        json!({"key": "k", "operator": "Equal", "value": "v"}),
        json!({"operator": "Exists", "effect": "NoExecute"}),
    ] {
        let req = json!([{"name": "req-0", "exactly": {"deviceClassName": "class-a", "tolerations": [tol]}}]);
        let c = Case::new(slices.clone(), vec![claim("c", req, json!({}))]);
        let got = c.run().unwrap().unwrap();
        let res = &got[0].devices.as_ref().unwrap().results.as_ref().unwrap()[0];
        assert!(res.tolerations.is_some(), "tolerations are copied into the result");
        let expect = if tol.get("effect").is_some() { "d2" } else { "d1" };
        assert_eq!(res.device, expect, "{tol}");
    }
    // Wrong value: not tolerated.
    let req = json!([{"name": "req-0", "exactly": {"deviceClassName": "class-a",
        "tolerations": [{"key": "k", "operator": "Equal", "value": "other"}]}}]);
    assert_eq!(Case::new(slices, vec![claim("c", req, json!({}))]).devices(), None);
    // "tainted-no-effect": effect None does not prevent allocation.
    let c = Case::new(
        vec![slice("pool-1", on_node1(), vec![tainted("d1", "None")])],
        vec![claim("c", json!([exact("req-0", 1)]), json!({}))],
    );
    assert_eq!(c.devices(), Some(vec![pairs(&[("req-0", "d1")])]));
}

#[test]
fn admin_access() {
    // "admin-access-enabled": an allocated device may be used for admin access.
    let req = json!([
        {"name": "req-0", "exactly": {"deviceClassName": "class-a", "adminAccess": true}},
        {"name": "req-1", "exactly": {"deviceClassName": "class-a", "adminAccess": true}},
    ]);
    let mut c = Case::new(
        vec![slice("pool-1", on_node1(), vec![dev("d1"), dev("d2")])],
        vec![claim("c", req, json!({}))],
    );
    c.in_use = vec!["d1", "d2"];
    let r = c.run().unwrap().unwrap();
    let results = r[0].devices.as_ref().unwrap().results.clone().unwrap();
    // Not twice in the same claim.
    assert_eq!(results.iter().map(|r| r.device.as_str()).collect::<Vec<_>>(), ["d1", "d2"]);
    assert!(results.iter().all(|r| r.admin_access == Some(true)));
}

fn counter_slices() -> Vec<Arc<ResourceSlice>> {
    let consume = |name: &str, mem: &str| json!({"name": name, "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": mem}}}]});
    vec![
        slice_gen("counters", "pool-1", (1, 2), on_node1(), vec![]),
        slice_gen(
            "devices",
            "pool-1",
            (1, 2),
            on_node1(),
            vec![consume("whole", "8Gi"), consume("half-1", "4Gi"), consume("half-2", "4Gi")],
        ),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, s)| {
        if i == 0 {
            let mut s = (*s).clone();
            s.spec.devices = None;
            s.spec.shared_counters = Some(vec![
                serde_json::from_value(
                    json!({"name": "gpu-0", "counters": {"memory": {"value": "8Gi"}}}),
                )
                .unwrap(),
            ]);
            Arc::new(s)
        } else {
            s
        }
    })
    .collect()
}

#[test]
fn partitionable_devices() {
    // "partitionable-devices-single-device"
    let c = Case::new(counter_slices(), vec![claim("c", json!([exact("req-0", 1)]), json!({}))]);
    assert_eq!(c.devices(), Some(vec![pairs(&[("req-0", "whole")])]));
    // "partitionable-devices-multiple-devices": the whole device's counters
    // leave nothing for a half, so two halves are chosen.
    let c = Case::new(counter_slices(), vec![claim("c", json!([exact("req-0", 2)]), json!({}))]);
    assert_eq!(c.devices(), Some(vec![pairs(&[("req-0", "half-1"), ("req-0", "half-2")])]));
    // A half in use elsewhere consumes its counters: the whole device no
    // longer fits, the other half does.
    let mut c =
        Case::new(counter_slices(), vec![claim("c", json!([exact("req-0", 1)]), json!({}))]);
    c.in_use = vec!["half-1"];
    assert_eq!(c.devices(), Some(vec![pairs(&[("req-0", "half-2")])]));
    c.in_use = vec!["whole"];
    assert_eq!(c.devices(), None);
    // "partitionable-devices-no-capacity-available"
    let c = Case::new(counter_slices(), vec![claim("c", json!([exact("req-0", 3)]), json!({}))]);
    assert_eq!(c.devices(), None);
}

#[test]
fn bad_counter_reference_makes_the_pool_invalid() {
    let mut slices = counter_slices();
    let mut s = (*slices[1]).clone();
    s.spec.devices.as_mut().unwrap()[0].consumes_counters.as_mut().unwrap()[0].counter_set =
        "nope".into();
    slices[1] = Arc::new(s);
    let index = SliceIndex::build(&slices);
    let pools = index.pools_for_node(&node1());
    assert_eq!(pools[0].invalid.as_deref(), Some("counter set nope not found"));
    let c = Case::new(slices, vec![claim("c", json!([exact("req-0", 1)]), json!({}))]);
    assert_eq!(
        c.run(),
        Err(AllocateError::FailedOnNode("invalid resource pools were encountered".into()))
    );
}

#[test]
fn node_selector_slices() {
    let sel = json!({"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]});
    let slices = vec![slice("pool-1", json!({"nodeSelector": sel.clone()}), vec![dev("d1")])];
    let c = Case::new(slices.clone(), vec![claim("c", json!([exact("req-0", 1)]), json!({}))]);
    let r = c.run().unwrap().unwrap();
    assert_eq!(serde_json::to_value(r[0].node_selector.as_ref().unwrap()).unwrap(), sel);
    let mut c = Case::new(slices, c.claims.clone());
    c.node = node("node-2", json!({"zone": "z2"}));
    assert_eq!(c.devices(), None);
    // "network-attached-device" on all nodes: no node selector.
    let c = Case::new(
        vec![slice("pool-1", json!({"allNodes": true}), vec![dev("d1")])],
        vec![claim("c", json!([exact("req-0", 1)]), json!({}))],
    );
    assert_eq!(c.run().unwrap().unwrap()[0].node_selector, None);
}

#[test]
fn per_device_node_selection() {
    // "partitionable-devices-per-device-node-selection-nodename"
    let slices = vec![slice(
        "pool-1",
        json!({"perDeviceNodeSelection": true}),
        vec![
            json!({"name": "d1", "nodeName": "node-2"}),
            json!({"name": "d2", "nodeName": "node-1"}),
        ],
    )];
    let c = Case::new(slices, vec![claim("c", json!([exact("req-0", 1)]), json!({}))]);
    let r = c.run().unwrap().unwrap();
    assert_eq!(r[0].devices.as_ref().unwrap().results.as_ref().unwrap()[0].device, "d2");
    assert!(r[0].node_selector.is_some());
}

#[test]
fn pool_generations_and_obsolete_slices() {
    // "obsolete-slice": the newer generation wins.
    let c = Case::new(
        vec![
            slice_gen("old", "pool-1", (1, 1), on_node1(), vec![dev("old-device")]),
            slice_gen("new", "pool-1", (2, 1), on_node1(), vec![dev("new-device")]),
        ],
        vec![claim("c", json!([exact("req-0", 1)]), json!({}))],
    );
    assert_eq!(c.devices(), Some(vec![pairs(&[("req-0", "new-device")])]));
    // "duplicate-slice": duplicate device names make the pool invalid.
    let c = Case::new(
        vec![
            slice_gen("s1", "pool-1", (1, 2), on_node1(), vec![dev("d1")]),
            slice_gen("s2", "pool-1", (1, 2), on_node1(), vec![dev("d1")]),
        ],
        vec![claim("c", json!([exact("req-0", 1)]), json!({}))],
    );
    assert!(matches!(c.run(), Err(AllocateError::FailedOnNode(_))));
}

#[test]
fn pools_are_cached_and_sorted() {
    let slices = vec![
        slice("pool-b", on_node1(), vec![dev("d1")]),
        slice("pool-a", json!({"allNodes": true}), vec![dev("d1")]),
    ];
    let index = SliceIndex::build(&slices);
    assert!(!index.is_empty());
    assert!(SliceIndex::build(&[]).is_empty());
    let p1 = index.pools_for_node(&node1());
    let p2 = index.pools_for_node(&node1());
    assert_eq!(p1.iter().map(|p| &*p.name).collect::<Vec<_>>(), ["pool-a", "pool-b"]);
    assert!(p1.iter().zip(&p2).all(|(a, b)| Arc::ptr_eq(a, b)));
    let other = index.pools_for_node(&node("node-2", json!({})));
    assert_eq!(other.len(), 1);
    assert!(Arc::ptr_eq(&other[0], &p1[0]), "the allNodes pool is shared between nodes");
}

#[test]
fn configs() {
    // "with-class-device-config" + "claim-with-device-config"
    let opaque = |p: &str| json!({"opaque": {"driver": DRIVER, "parameters": {"p": p}}});
    let mut c = Case::new(
        vec![slice("pool-1", on_node1(), vec![dev("d1"), dev("d2")])],
        vec![claim(
            "c",
            json!([exact("req-0", 1), exact("req-1", 1)]),
            json!({"config": [
                {"requests": ["req-1"], "opaque": opaque("claim")["opaque"]},
                {"requests": ["nope"], "opaque": opaque("unused")["opaque"]},
            ]}),
        )],
    );
    c.classes = vec![class("class-a", json!({"config": [opaque("class")]}))];
    let r = c.run().unwrap().unwrap();
    let cfg =
        serde_json::to_value(r[0].devices.as_ref().unwrap().config.as_ref().unwrap()).unwrap();
    assert_eq!(
        cfg,
        json!([
            // Both requests use the class: its config applies to all.
            {"source": "FromClass", "opaque": opaque("class")["opaque"]},
            {"source": "FromClaim", "requests": ["req-1"], "opaque": opaque("claim")["opaque"]},
        ])
    );
}

#[test]
fn errors() {
    let slices = vec![slice("pool-1", on_node1(), vec![dev("d1")])];
    // "unknown-class"
    let c = Case::new(
        slices.clone(),
        vec![claim(
            "c",
            json!([{"name": "req-0", "exactly": {"deviceClassName": "nope"}}]),
            json!({}),
        )],
    );
    assert_eq!(c.error(), "claim default/c, request req-0: could not retrieve device class nope");
    // "too-many-devices-single-request"
    let c = Case::new(slices.clone(), vec![claim("c", json!([exact("req-0", 33)]), json!({}))]);
    assert_eq!(
        c.error(),
        "claim default/c, request req-0: adding 33 devices exceeds the claim limit of 32, with 0 already accounted for"
    );
    // "too-many-devices-total"
    let c = Case::new(
        slices.clone(),
        vec![claim("c", json!([exact("req-0", 16), exact("req-1", 17)]), json!({}))],
    );
    assert_eq!(
        c.error(),
        "claim default/c, request req-1: adding 17 devices exceeds the claim limit of 32, with 16 already accounted for"
    );
    // "unknown-allocation-mode"
    let req = json!([{"name": "req-0", "exactly": {"deviceClassName": "class-a", "allocationMode": "Some"}}]);
    let c = Case::new(slices.clone(), vec![claim("c", req, json!({}))]);
    assert_eq!(c.error(), "claim default/c, request req-0: unsupported count mode Some");
    // "unknown-constraint"
    let c = Case::new(
        slices.clone(),
        vec![claim("c", json!([exact("req-0", 1)]), json!({"constraints": [{}]}))],
    );
    assert_eq!(
        c.error(),
        "claim default/c, constraint #0: empty constraint (unsupported constraint type?)"
    );
    // Consumable capacity is refused.
    let req = json!([{"name": "req-0", "exactly": {"deviceClassName": "class-a",
        "capacity": {"requests": {"memory": "1Gi"}}}}]);
    let c = Case::new(slices.clone(), vec![claim("c", req, json!({}))]);
    assert_eq!(
        c.error(),
        "request req-0: capacity requests are not supported by this scheduler yet"
    );
    // A selector the CEL module cannot compile fails at evaluation.
    let req = json!([{"name": "req-0", "exactly": {"deviceClassName": "class-a",
        "selectors": [{"cel": {"expression": "device.driver =="}}]}}]);
    let c = Case::new(slices, vec![claim("c", req, json!({}))]);
    assert!(
        c.error().starts_with("claim default/c: selector #0: CEL compile error: "),
        "{}",
        c.error()
    );
}

#[test]
fn binding_conditions_are_not_selectable() {
    let c = Case::new(
        vec![slice(
            "pool-1",
            on_node1(),
            vec![
                json!({"name": "d1", "bindingConditions": ["ready"], "bindingFailureConditions": ["failed"]}),
                json!({"name": "d2", "bindsToNode": true}),
                dev("d3"),
            ],
        )],
        vec![claim("c", json!([exact("req-0", 1)]), json!({}))],
    );
    assert_eq!(c.devices(), Some(vec![pairs(&[("req-0", "d3")])]));
}

#[test]
fn class_selector_filters_devices() {
    let mut s = (*slice("pool-1", on_node1(), vec![dev("d1")])).clone();
    s.spec.driver = "driver-b".into();
    let c = Case::new(vec![Arc::new(s)], vec![claim("c", json!([exact("req-0", 1)]), json!({}))]);
    assert_eq!(c.devices(), None, "class-a selects driver-a only");
}

#[test]
fn domain_preference_picks_the_smallest_group() {
    // Domain B (4 free) comes first in slice order; domain A has 3 free.
    let d = |n: &str, g: &str| dev_attr(n, json!({"clique": {"string": g}}));
    let slices = vec![slice(
        "pool-1",
        on_node1(),
        vec![
            d("b1", "B"),
            d("b2", "B"),
            d("b3", "B"),
            d("b4", "B"),
            d("a1", "A"),
            d("a2", "A"),
            d("a3", "A"),
            d("a4", "A"),
        ],
    )];
    let claims = vec![claim("c", json!([exact("req-0", 2)]), json!({}))];
    let mut c = Case::new(slices, claims);
    c.in_use = vec!["a4"];
    assert_eq!(
        c.devices(),
        Some(vec![pairs(&[("req-0", "b1"), ("req-0", "b2")])]),
        "upstream order without the option"
    );
    for attr in ["clique", "driver-a/clique"] {
        c.options = AllocatorOptions { domain_attribute: Some(attr.into()) };
        assert_eq!(c.devices(), Some(vec![pairs(&[("req-0", "a1"), ("req-0", "a2")])]), "{attr}");
    }
}

#[test]
fn request_selectors_on_attributes() {
    // "small-and-large-backtrack-requests"-like: request selectors on attributes.
    let d = |n: &str, size: &str| dev_attr(n, json!({"size": {"string": size}}));
    let slices = vec![slice(
        "pool-1",
        on_node1(),
        vec![d("d1", "small"), d("d2", "large"), d("d3", "small")],
    )];
    let req = |name: &str, size: &str| {
        json!({"name": name, "exactly": {"deviceClassName": "class-a",
            "selectors": [{"cel": {"expression": format!("device.attributes[\"driver-a\"].size == \"{size}\"")}}]}})
    };
    let c = Case::new(
        slices,
        vec![claim("c", json!([req("small", "small"), req("large", "large")]), json!({}))],
    );
    assert_eq!(c.devices(), Some(vec![pairs(&[("small", "d1"), ("large", "d2")])]));
}

#[test]
fn first_available_with_selectors() {
    // "prioritized-list-subrequests-with-expressions"
    let d = |n: &str, mem: i64| dev_attr(n, json!({"memory": {"int": mem}}));
    let slices = vec![slice("pool-1", on_node1(), vec![d("d1", 4), d("d2", 8)])];
    let sub = |name: &str, expr: &str| {
        json!({"name": name, "deviceClassName": "class-a",
        "selectors": [{"cel": {"expression": expr}}]})
    };
    let req = json!({"name": "req-0", "firstAvailable": [
        sub("big", "device.attributes[\"driver-a\"].memory >= 16"),
        sub("medium", "device.attributes[\"driver-a\"].memory >= 8"),
    ]});
    let c = Case::new(slices, vec![claim("c", json!([req]), json!({}))]);
    assert_eq!(c.devices(), Some(vec![pairs(&[("req-0/medium", "d2")])]));
}

#[test]
fn cel_runtime_error_is_an_error() {
    let req = json!([{"name": "req-0", "exactly": {"deviceClassName": "class-a",
        "selectors": [{"cel": {"expression": "device.attributes[\"driver-a\"].missing == 1"}}]}}]);
    let c = Case::new(
        vec![slice("pool-1", on_node1(), vec![dev("d1")])],
        vec![claim("c", req, json!({}))],
    );
    assert!(c.error().starts_with(
        "claim default/c: selector #0 on device driver-a/pool-1/d1: CEL runtime error: "
    ));
}

#[test]
fn claim_configs_with_subrequests() {
    let opaque = |p: &str| json!({"driver": DRIVER, "parameters": {"p": p}});
    let req0 = json!({"name": "req-0", "firstAvailable": [
        {"name": "sub-0", "deviceClassName": "class-a", "count": 1},
        {"name": "sub-1", "deviceClassName": "class-a", "count": 1},
    ]});
    let slices = vec![slice("pool-1", on_node1(), vec![dev("d0"), dev("d1")])];
    let run = |requests: Value| {
        let c = Case::new(
            slices.clone(),
            vec![claim(
                "c",
                json!([req0.clone(), exact("req-1", 1)]),
                json!({"config": [{"requests": requests, "opaque": opaque("x")}]}),
            )],
        );
        let r = c.run().unwrap().unwrap();
        serde_json::to_value(r[0].devices.as_ref().unwrap()).unwrap()
    };
    // "claim-config-scoped-to-subrequests-of-one-request"
    assert_eq!(
        run(json!(["req-0/sub-0", "req-0/sub-1"])),
        json!({
            "results": [
                {"request": "req-0/sub-0", "driver": DRIVER, "pool": "pool-1", "device": "d0"},
                {"request": "req-1", "driver": DRIVER, "pool": "pool-1", "device": "d1"},
            ],
            "config": [{"source": "FromClaim", "requests": ["req-0/sub-0", "req-0/sub-1"], "opaque": opaque("x")}],
        })
    );
    // "claim-config-covering-all-requests-is-cleared"
    assert_eq!(
        run(json!(["req-0/sub-0", "req-1"]))["config"],
        json!([{"source": "FromClaim", "opaque": opaque("x")}])
    );
}

#[test]
fn node_selector_of_mixed_devices() {
    let zone = |z: &str| json!({"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": [z]}]}]});
    let rack = json!({"nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "Exists"}]}]});
    let two = json!([exact("req-0", 1), exact("req-1", 1)]);
    // Two selector slices: their requirements are merged into one term, without duplicates.
    let mut c = Case::new(
        vec![
            slice("pool-1", json!({"nodeSelector": zone("z1")}), vec![dev("d1")]),
            slice("pool-2", json!({"nodeSelector": rack.clone()}), vec![dev("d2")]),
            slice("pool-3", json!({"nodeSelector": zone("z1")}), vec![dev("d3")]),
        ],
        vec![claim(
            "c",
            json!([exact("req-0", 1), exact("req-1", 1), exact("req-2", 1)]),
            json!({}),
        )],
    );
    c.node = node("node-1", json!({"zone": "z1", "rack": "r1"}));
    let r = c.run().unwrap().unwrap();
    assert_eq!(
        serde_json::to_value(r[0].node_selector.as_ref().unwrap()).unwrap(),
        json!({"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["z1"]},
            {"key": "rack", "operator": "Exists"},
        ]}]})
    );
    // "local-and-network-attached-devices": a node-local device pins the claim to the node.
    let c = Case::new(
        vec![
            slice("pool-1", json!({"allNodes": true}), vec![dev("d1")]),
            slice("pool-2", on_node1(), vec![dev("d2")]),
        ],
        vec![claim("c", two, json!({}))],
    );
    let r = c.run().unwrap().unwrap();
    let ns = serde_json::to_value(r[0].node_selector.as_ref().unwrap()).unwrap();
    assert_eq!(ns["nodeSelectorTerms"][0]["matchFields"][0]["values"], json!(["node-1"]));
}

#[test]
fn incomplete_pool_does_not_block_other_pools() {
    // ExactCount skips the incomplete pool and takes a device elsewhere.
    let c = Case::new(
        vec![
            slice_gen("a", "pool-a", (1, 2), on_node1(), vec![dev("a1")]),
            slice("pool-b", on_node1(), vec![dev("b1")]),
        ],
        vec![claim("c", json!([exact("req-0", 1)]), json!({}))],
    );
    assert_eq!(c.devices(), Some(vec![pairs(&[("req-0", "b1")])]));
    let index = SliceIndex::build(&c.slices);
    let pools = index.pools_for_node(&node1());
    assert!(pools[0].incomplete && pools[0].devices.is_empty());
    // The missing slice exists for another node: the pool is complete, and
    // only the devices of this node's slice are offered.
    let c = Case::new(
        vec![
            slice_gen("a", "pool-a", (1, 2), on_node1(), vec![dev("a1")]),
            slice_gen("a2", "pool-a", (1, 2), json!({"nodeName": "node-2"}), vec![dev("a2")]),
        ],
        vec![claim("c", json!([all_req("req-0")]), json!({}))],
    );
    assert_eq!(c.devices(), Some(vec![pairs(&[("req-0", "a1")])]));
    // A newer generation on another node makes this node's slice obsolete.
    let c = Case::new(
        vec![
            slice_gen("a", "pool-a", (1, 2), on_node1(), vec![dev("a1")]),
            slice_gen("a2", "pool-a", (2, 2), json!({"nodeName": "node-2"}), vec![dev("a2")]),
        ],
        vec![claim("c", json!([all_req("req-0")]), json!({}))],
    );
    assert_eq!(c.devices(), None);
    assert!(SliceIndex::build(&c.slices).pools_for_node(&node1()).is_empty());
}

#[test]
fn deadline_stops_a_long_search() {
    // 12 devices with 5 distinct values, 6 distinct ones wanted: no
    // solution, found only after trying many combinations.
    let devices =
        (0..12).map(|i| dev_attr(&format!("d{i}"), json!({"v": {"int": i % 5}}))).collect();
    let c = Case::new(
        vec![slice("pool-1", on_node1(), devices)],
        vec![claim(
            "c",
            json!([exact("req-0", 6)]),
            json!({"constraints": [{"distinctAttribute": "driver-a/v"}]}),
        )],
    );
    assert_eq!(c.devices(), None);
    let classes = c.classes.clone();
    let lookup =
        move |n: &str| classes.iter().find(|k| k.metadata.name.as_deref() == Some(n)).cloned();
    let alloc = ClaimAllocator::new(c.claims.clone(), &lookup, &SelectorCache::default()).unwrap();
    let index = SliceIndex::build(&c.slices);
    let pools = index.pools_for_node(&c.node);
    let past = std::time::Instant::now();
    assert_eq!(
        alloc.allocate_until(&c.node, &pools, &|_| false, Some(past)),
        Err(AllocateError::TimedOut)
    );
}

#[test]
#[ignore = "timing report, run by hand"]
fn timing_500_nodes() {
    let slices: Vec<_> = (0..500)
        .map(|n| {
            let devices = (0..8)
                .map(|i| dev_attr(&format!("gpu-{i}"), json!({"clique": {"int": i / 4}})))
                .collect();
            slice_gen(
                &format!("s{n}"),
                &format!("pool-{n}"),
                (1, 1),
                json!({"nodeName": format!("node-{n}")}),
                devices,
            )
        })
        .collect();
    let nodes: Vec<Node> = (0..500).map(|n| node(&format!("node-{n}"), json!({}))).collect();
    let c = Case::new(slices, vec![claim("c", json!([exact("req-0", 2)]), json!({}))]);
    let classes = c.classes.clone();
    let lookup =
        move |n: &str| classes.iter().find(|k| k.metadata.name.as_deref() == Some(n)).cloned();
    let index = SliceIndex::build(&c.slices);
    for round in 0..3 {
        let start = std::time::Instant::now();
        let alloc = ClaimAllocator::new(c.claims.clone(), &lookup, &SelectorCache::default())
            .unwrap()
            .with_options(AllocatorOptions { domain_attribute: Some("clique".into()) });
        let mut ok = 0;
        for n in &nodes {
            let pools = index.pools_for_node(n);
            ok += alloc.allocate(n, &pools, &|_| false).unwrap().is_some() as usize;
        }
        assert_eq!(ok, 500);
        eprintln!("round {round}: {:?} for 500 nodes", start.elapsed());
    }
}

#[test]
fn admin_access_across_claims() {
    let admin = |name: &str| {
        claim(
            name,
            json!([{"name": "req-0", "exactly": {"deviceClassName": "class-a", "adminAccess": true}}]),
            json!({}),
        )
    };
    let slices = vec![slice("pool-1", on_node1(), vec![dev("d1"), dev("d2")])];
    // "separate-claims-share-device-admin-access"
    let c = Case::new(slices.clone(), vec![admin("c0"), admin("c1")]);
    assert_eq!(c.devices(), Some(vec![pairs(&[("req-0", "d1")]), pairs(&[("req-0", "d1")])]));
    // "admin-access-claims-device-allocating-for-non-admin-access"
    let c = Case::new(
        slices.clone(),
        vec![claim("c0", json!([exact("req-0", 1)]), json!({})), admin("c1")],
    );
    let r = c.run().unwrap().unwrap();
    let first = |i: usize| r[i].devices.as_ref().unwrap().results.as_ref().unwrap()[0].clone();
    assert_eq!((first(0).device.as_str(), first(0).admin_access), ("d1", None));
    assert_eq!((first(1).device.as_str(), first(1).admin_access), ("d1", Some(true)));
    // "all-devices-some-allocating-admin-access": the All request would need
    // d1 a second time in the same claim.
    let c = Case::new(
        slices,
        vec![claim(
            "c",
            json!([
                {"name": "req-0", "exactly": {"deviceClassName": "class-a", "adminAccess": true}},
                {"name": "req-1", "exactly": {"deviceClassName": "class-a", "adminAccess": true, "allocationMode": "All"}},
            ]),
            json!({}),
        )],
    );
    assert_eq!(c.devices(), None);
}

#[test]
fn several_different_drivers() {
    let mut b = (*slice("pool-b", on_node1(), vec![dev("b1")])).clone();
    b.spec.driver = "driver-b".into();
    let class_b: Arc<DeviceClass> = Arc::new(
        serde_json::from_value(json!({"metadata": {"name": "class-b"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == \"driver-b\""}}]}}))
        .unwrap(),
    );
    let mut c = Case::new(
        vec![slice("pool-a", on_node1(), vec![dev("a1")]), Arc::new(b)],
        vec![claim(
            "c",
            json!([{"name": "req-b", "exactly": {"deviceClassName": "class-b"}}, exact("req-a", 1)]),
            json!({}),
        )],
    );
    c.classes.push(class_b);
    let r = c.run().unwrap().unwrap();
    let got: Vec<_> = r[0]
        .devices
        .as_ref()
        .unwrap()
        .results
        .iter()
        .flatten()
        .map(|d| (d.request.as_str(), d.driver.as_str(), d.device.as_str()))
        .collect();
    assert_eq!(got, [("req-b", "driver-b", "b1"), ("req-a", DRIVER, "a1")]);
}

#[test]
fn shared_between_filter_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<ClaimAllocator>();
    send_sync::<SliceIndex>();
    send_sync::<crate::dynamic_resources::pools::Pool>();
}
